//! Support vectors with their coefficients: the working set a budgeted solver updates, and the
//! finished model that predicts.

use rayon::prelude::*;

use crate::core::codec::{corrupt, Reader, Writer};
use crate::core::data::{DenseView, Rows};
use crate::core::error::{Result, SvmError};
use crate::core::kernel::check_gamma;
use crate::core::{parallel, simd};

/// The support vectors of a model under training, at most `capacity` of them.
///
/// Vectors are stored feature-major (`svt[c * capacity + j]` is feature c of SV j), so the dot
/// products of one input row with all SVs are one axpy of length `len` per non-zero of the row:
/// contiguous, vectorised, and the same code path for sparse and dense inputs.
/// Coefficients are stored divided by a global `scale`, which makes the (1 - 1/t) shrink of all
/// coefficients in every SGD step O(1).
///
/// Optionally the store also averages the coefficients over a window of steps (suffix averaging
/// of SGD iterates), in O(1) per step: between changes, SV j's actual coefficient at step tau is
/// scale(tau) c_j, so its running sum is c_j times the running sum of the scale since its last
/// change. Every change of c_j first folds that product into `avg_sum`; merges and projections
/// apply to the sums the same linear map they apply to the coefficients.
#[derive(Debug, Clone)]
pub struct SupportVectors {
    dim: usize,
    capacity: usize,
    len: usize,
    n_out: usize,
    svt: Vec<f64>,
    sq_norms: Vec<f64>,
    coef: Vec<f64>,
    scale: f64,
    averaging: Option<Averaging>,
    /// Per slot: the training row it holds unchanged, or `NO_ORIGIN` once merged.
    origin: Vec<u32>,
    /// Per training row: its slot while it is an unmerged SV (empty unless tracking).
    slot_of_row: Vec<u32>,
}

const NO_ORIGIN: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Averaging {
    /// Sum over averaged steps of the global scale.
    scale_sum: f64,
    steps: u64,
    /// Per SV and output: sum of actual coefficients up to its mark.
    sum: Vec<f64>,
    /// Per SV: `scale_sum` when its coefficient last changed.
    mark: Vec<f64>,
}

/// Below this the scale is folded into the coefficients, long before anything underflows.
const MIN_SCALE: f64 = 1e-12;

impl SupportVectors {
    pub fn new(dim: usize, capacity: usize, n_out: usize) -> Self {
        SupportVectors {
            dim,
            capacity,
            len: 0,
            n_out,
            svt: vec![0.0; dim * capacity],
            sq_norms: vec![0.0; capacity],
            coef: vec![0.0; capacity * n_out],
            scale: 1.0,
            averaging: None,
            origin: vec![NO_ORIGIN; capacity],
            slot_of_row: Vec::new(),
        }
    }

    /// Keeps track of which SV slot holds which of `n_rows` training rows unchanged, so a dual
    /// solver can add to a point's coefficient instead of inserting a duplicate.
    pub fn track_rows(&mut self, n_rows: usize) {
        self.slot_of_row = vec![NO_ORIGIN; n_rows];
    }

    /// The slot holding training row i unchanged (not merged), if any.
    #[inline]
    pub fn slot_of_row(&self, i: usize) -> Option<usize> {
        match self.slot_of_row.get(i) {
            Some(&s) if s != NO_ORIGIN => Some(s as usize),
            _ => None,
        }
    }

    /// Adds `delta` (actual units) to SV j's coefficients.
    pub fn add_to_coef(&mut self, j: usize, delta: &[f64]) {
        self.fold_average(j);
        let inv = 1.0 / self.scale;
        for (c, d) in self.coef_mut(j).iter_mut().zip(delta) {
            *c += d * inv;
        }
    }

    /// Slot j no longer holds its training row unchanged.
    fn forget_origin(&mut self, j: usize) {
        let o = self.origin[j];
        if o != NO_ORIGIN {
            if let Some(s) = self.slot_of_row.get_mut(o as usize) {
                *s = NO_ORIGIN;
            }
            self.origin[j] = NO_ORIGIN;
        }
    }

    /// Starts averaging the coefficients over the steps that follow (see the type's doc).
    pub fn start_averaging(&mut self) {
        self.averaging = Some(Averaging {
            scale_sum: 0.0,
            steps: 0,
            sum: vec![0.0; self.capacity * self.n_out],
            mark: vec![0.0; self.capacity],
        });
    }

    /// Counts the current coefficients as one more averaged step (O(1)).
    #[inline]
    pub fn accumulate_average(&mut self) {
        if let Some(a) = &mut self.averaging {
            a.scale_sum += self.scale;
            a.steps += 1;
        }
    }

    /// Folds SV j's running product into its sum, so its coefficient may change.
    #[inline]
    fn fold_average(&mut self, j: usize) {
        let n = self.n_out;
        if let Some(a) = &mut self.averaging {
            let since = a.scale_sum - a.mark[j];
            for k in 0..n {
                a.sum[j * n + k] += self.coef[j * n + k] * since;
            }
            a.mark[j] = a.scale_sum;
        }
    }

    fn fold_all_averages(&mut self) {
        for j in 0..self.len {
            self.fold_average(j);
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub fn dim(&self) -> usize {
        self.dim
    }
    #[inline]
    pub fn n_out(&self) -> usize {
        self.n_out
    }
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    #[inline]
    pub fn scale(&self) -> f64 {
        self.scale
    }
    #[inline]
    pub fn sq_norm(&self, j: usize) -> f64 {
        self.sq_norms[j]
    }
    /// Stored coefficients of SV j (multiply by `scale()` for the actual ones).
    #[inline]
    pub fn coef(&self, j: usize) -> &[f64] {
        &self.coef[j * self.n_out..(j + 1) * self.n_out]
    }
    #[inline]
    pub fn coef_mut(&mut self, j: usize) -> &mut [f64] {
        &mut self.coef[j * self.n_out..(j + 1) * self.n_out]
    }

    /// out[j] = <sv_j, x_i> for j < len.
    #[inline]
    pub fn dots_with_row<R: Rows>(&self, x: &R, i: usize, out: &mut [f64]) {
        let (len, cap, dim) = (self.len, self.capacity, self.dim);
        let out = &mut out[..len];
        out.fill(0.0);
        x.for_each_nonzero(i, |c, v| {
            if c < dim {
                simd::axpy(v, &self.svt[c * cap..c * cap + len], out);
            }
        });
    }

    /// out[j] = <sv_j, v> for a dense vector v of length dim.
    pub fn dots_with_dense(&self, v: &[f64], out: &mut [f64]) {
        let (len, cap) = (self.len, self.capacity);
        let out = &mut out[..len];
        out.fill(0.0);
        for (c, &x) in v.iter().enumerate().take(self.dim) {
            if x != 0.0 {
                simd::axpy(x, &self.svt[c * cap..c * cap + len], out);
            }
        }
    }

    /// Turns dot products with a point of squared norm `sq_norm` into kernel values, in place.
    #[inline]
    pub fn dots_to_kernel(&self, gamma: f64, sq_norm: f64, dots: &mut [f64]) {
        simd::rbf_from_dots(
            gamma,
            sq_norm,
            &self.sq_norms[..self.len],
            &mut dots[..self.len],
        );
    }

    /// out[k] = scale * sum_j coef[j][k] * kvals[j]: the decision values for a point.
    #[inline]
    pub fn decision_from_kernel(&self, kvals: &[f64], out: &mut [f64]) {
        if self.n_out == 1 {
            out[0] = self.scale * simd::dot(&self.coef[..self.len], &kvals[..self.len]);
            return;
        }
        out.fill(0.0);
        for (j, &k) in kvals[..self.len].iter().enumerate() {
            simd::axpy(k, self.coef(j), out);
        }
        for o in out.iter_mut() {
            *o *= self.scale;
        }
    }

    /// Multiplies every coefficient by `factor` in O(1).
    #[inline]
    pub fn shrink(&mut self, factor: f64) {
        self.scale *= factor;
        if self.scale < MIN_SCALE {
            // Sums hold actual values; after folding, the scale sum can restart in new units.
            self.fold_all_averages();
            if let Some(a) = &mut self.averaging {
                a.scale_sum = 0.0;
                a.mark.fill(0.0);
            }
            let s = self.scale;
            for c in &mut self.coef[..self.len * self.n_out] {
                *c *= s;
            }
            self.scale = 1.0;
        }
    }

    /// Appends row i of x with actual (unscaled) coefficients `coef`. Needs room (len < capacity).
    pub fn push_row<R: Rows>(&mut self, x: &R, i: usize, coef: &[f64]) {
        let j = self.len;
        let cap = self.capacity;
        for c in 0..self.dim {
            self.svt[c * cap + j] = 0.0;
        }
        let dim = self.dim;
        let svt = &mut self.svt;
        let mut norm = 0.0;
        x.for_each_nonzero(i, |c, v| {
            if c < dim {
                svt[c * cap + j] = v;
                norm += v * v;
            }
        });
        // The norm of what is stored: a row with columns past dim loses them here.
        self.sq_norms[j] = norm;
        self.len += 1;
        self.origin[j] = u32::try_from(i).unwrap_or(NO_ORIGIN);
        if let Some(s) = self.slot_of_row.get_mut(i) {
            *s = j as u32;
        }
        self.reset_average(j);
        self.set_actual_coef(j, coef);
    }

    /// A new SV: nothing accumulated yet.
    fn reset_average(&mut self, j: usize) {
        let n = self.n_out;
        if let Some(a) = &mut self.averaging {
            a.sum[j * n..(j + 1) * n].fill(0.0);
            a.mark[j] = a.scale_sum;
        }
    }

    /// Replaces SVs p and q by the point z with coefficients k_p c_p + k_q c_q (the merge of
    /// `budget.rs`; k_p = k(x_p, z), k_q = k(x_q, z)). z takes q's slot, then p is removed.
    pub fn merge_pair(&mut self, p: usize, q: usize, z: &[f64], k_p: f64, k_q: f64) {
        self.fold_average(p);
        self.fold_average(q);
        let n = self.n_out;
        for k in 0..n {
            self.coef[q * n + k] = k_p * self.coef[p * n + k] + k_q * self.coef[q * n + k];
        }
        if let Some(a) = &mut self.averaging {
            for k in 0..n {
                a.sum[q * n + k] = k_p * a.sum[p * n + k] + k_q * a.sum[q * n + k];
            }
        }
        let cap = self.capacity;
        for (c, &x) in z.iter().enumerate().take(self.dim) {
            self.svt[c * cap + q] = x;
        }
        self.sq_norms[q] = simd::dot(z, z);
        self.forget_origin(q);
        self.swap_remove(p);
    }

    /// Removes SV p after adding c_p delta_i to every other SV i (projection onto the others;
    /// delta[p] is ignored).
    pub fn project_out(&mut self, p: usize, delta: &[f64]) {
        self.fold_all_averages();
        let n = self.n_out;
        for i in (0..self.len).filter(|&i| i != p) {
            for k in 0..n {
                self.coef[i * n + k] += delta[i] * self.coef[p * n + k];
            }
            if let Some(a) = &mut self.averaging {
                for k in 0..n {
                    a.sum[i * n + k] += delta[i] * a.sum[p * n + k];
                }
            }
        }
        self.swap_remove(p);
    }

    fn set_actual_coef(&mut self, j: usize, coef: &[f64]) {
        let inv = 1.0 / self.scale;
        for (dst, &src) in self.coef_mut(j).iter_mut().zip(coef) {
            *dst = src * inv;
        }
    }

    /// Copies SV j into a dense vector of length dim.
    pub fn copy_sv(&self, j: usize, out: &mut [f64]) {
        let cap = self.capacity;
        for (c, o) in out.iter_mut().enumerate().take(self.dim) {
            *o = self.svt[c * cap + j];
        }
    }

    /// Removes SV j by moving the last one into its place (so indices > j are not shifted).
    pub fn swap_remove(&mut self, j: usize) {
        let last = self.len - 1;
        self.forget_origin(j);
        if j != last {
            self.origin[j] = self.origin[last];
            self.origin[last] = NO_ORIGIN;
            if let Some(s) = self.slot_of_row.get_mut(self.origin[j] as usize) {
                *s = j as u32;
            }
            let cap = self.capacity;
            for c in 0..self.dim {
                self.svt[c * cap + j] = self.svt[c * cap + last];
            }
            self.sq_norms[j] = self.sq_norms[last];
            let n = self.n_out;
            self.coef.copy_within(last * n..(last + 1) * n, j * n);
            if let Some(a) = &mut self.averaging {
                a.sum.copy_within(last * n..(last + 1) * n, j * n);
                a.mark[j] = a.mark[last];
            }
        }
        self.len -= 1;
    }

    /// Index of the SV with the smallest coefficient norm (the one budget maintenance acts on).
    pub fn smallest(&self) -> Option<usize> {
        (0..self.len)
            .map(|j| (j, self.coef(j).iter().map(|c| c * c).sum::<f64>()))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(j, _)| j)
    }

    /// The finished model: SVs row-major, the scale folded into the coefficients; with averaging
    /// on (and at least one averaged step), the averaged coefficients.
    pub fn to_model(&self, gamma: f64) -> BudgetModel {
        let mut sv = vec![0.0; self.len * self.dim];
        for j in 0..self.len {
            self.copy_sv(j, &mut sv[j * self.dim..(j + 1) * self.dim]);
        }
        let n = self.n_out;
        let coef = match &self.averaging {
            Some(a) if a.steps > 0 => (0..self.len * n)
                .map(|jk| {
                    let j = jk / n;
                    (a.sum[jk] + self.coef[jk] * (a.scale_sum - a.mark[j])) / a.steps as f64
                })
                .collect(),
            _ => self.coef[..self.len * n]
                .iter()
                .map(|c| c * self.scale)
                .collect(),
        };
        BudgetModel {
            dim: self.dim,
            n_out: self.n_out,
            gamma,
            support_vectors: sv,
            coef,
        }
    }
}

impl SupportVectors {
    /// Writes the whole store (for saving a streaming run's state).
    pub fn encode(&self, w: &mut Writer) {
        for v in [self.dim, self.capacity, self.len, self.n_out] {
            w.usize(v);
        }
        w.f64s(&self.svt);
        w.f64s(&self.sq_norms);
        w.f64s(&self.coef);
        w.f64(self.scale);
        match &self.averaging {
            None => w.bool(false),
            Some(a) => {
                w.bool(true);
                w.f64(a.scale_sum);
                w.u64(a.steps);
                w.f64s(&a.sum);
                w.f64s(&a.mark);
            }
        }
        w.u32s(&self.origin);
        w.u32s(&self.slot_of_row);
    }

    /// Reads what `encode` wrote, checking every size against the others.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let (dim, capacity, len, n_out) = (r.usize()?, r.usize()?, r.usize()?, r.usize()?);
        let cells = dim
            .checked_mul(capacity)
            .ok_or_else(|| corrupt("support vector sizes"))?;
        let coefs = capacity
            .checked_mul(n_out)
            .ok_or_else(|| corrupt("coefficient sizes"))?;
        if len > capacity || n_out == 0 {
            return Err(corrupt("support vector count"));
        }
        let svt = r.f64s_of(cells)?;
        let sq_norms = r.f64s_of(capacity)?;
        let coef = r.f64s_of(coefs)?;
        let scale = r.f64()?;
        let averaging = if r.bool()? {
            Some(Averaging {
                scale_sum: r.f64()?,
                steps: r.u64()?,
                sum: r.f64s_of(coefs)?,
                mark: r.f64s_of(capacity)?,
            })
        } else {
            None
        };
        let origin = r.u32s()?;
        let slot_of_row = r.u32s()?;
        if origin.len() != capacity
            || slot_of_row
                .iter()
                .any(|&s| s != NO_ORIGIN && s as usize >= capacity)
        {
            return Err(corrupt("row tracking"));
        }
        if !(scale.is_finite() && scale > 0.0) {
            return Err(corrupt("scale"));
        }
        Ok(SupportVectors {
            dim,
            capacity,
            len,
            n_out,
            svt,
            sq_norms,
            coef,
            scale,
            averaging,
            origin,
            slot_of_row,
        })
    }

    /// Whether averaging has started.
    pub fn is_averaging(&self) -> bool {
        self.averaging.is_some()
    }
}

/// A trained kernel expansion f_k(x) = sum_j coef[j][k] k(sv_j, x).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetModel {
    pub dim: usize,
    pub n_out: usize,
    pub gamma: f64,
    /// n_sv x dim, row-major.
    pub support_vectors: Vec<f64>,
    /// n_sv x n_out, row-major.
    pub coef: Vec<f64>,
}

impl BudgetModel {
    pub fn n_sv(&self) -> usize {
        self.coef.len().checked_div(self.n_out).unwrap_or(0)
    }

    /// Checks the arrays fit together (a model may come from user-supplied arrays).
    pub fn validate(&self) -> Result<()> {
        check_gamma(self.gamma)?;
        if self.n_out == 0 || self.coef.len() % self.n_out != 0 {
            return Err(SvmError::invalid_input(
                "coefficient array has the wrong shape",
            ));
        }
        if self.support_vectors.len() != self.n_sv() * self.dim {
            return Err(SvmError::invalid_input(format!(
                "{} support vectors of dimension {} need {} values, got {}",
                self.n_sv(),
                self.dim,
                self.n_sv() * self.dim,
                self.support_vectors.len()
            )));
        }
        crate::core::data::check_finite(&self.support_vectors, "support vectors")?;
        crate::core::data::check_finite(&self.coef, "coefficients")
    }

    /// Decision values, n_rows x n_out row-major, rows in parallel.
    pub fn decision_function<R: Rows>(&self, x: &R, out: &mut [f64]) -> Result<()> {
        self.validate()?;
        let n_out = self.n_out;
        if out.len() != x.n_rows() * n_out {
            return Err(SvmError::invalid_input(
                "decision output buffer has the wrong size",
            ));
        }
        let n_sv = self.n_sv();
        let svs = DenseView::new(&self.support_vectors, n_sv, self.dim)?;
        crate::core::data::finite_sq_norms(x, "X")?;
        let sv_norms = svs.sq_norms();
        parallel::install(|| {
            out.par_chunks_mut(n_out).enumerate().for_each_init(
                || vec![0.0; n_sv],
                |kvals, (i, o)| {
                    for (j, k) in kvals.iter_mut().enumerate() {
                        *k = x.dot_dense(i, svs.row(j));
                    }
                    simd::rbf_from_dots(self.gamma, x.sq_norm(i), &sv_norms, kvals);
                    o.fill(0.0);
                    for (j, &k) in kvals.iter().enumerate() {
                        simd::axpy(k, &self.coef[j * n_out..(j + 1) * n_out], o);
                    }
                },
            );
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::data::DenseView;
    use crate::core::rng::Rng;

    #[test]
    fn kernel_values_and_decision_match_direct_evaluation() {
        let mut rng = Rng::new(3);
        let (n, d) = (12, 5);
        let xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64() - 0.5).collect();
        let x = DenseView::new(&xs, n, d).unwrap();
        let mut svs = SupportVectors::new(d, 8, 2);
        for i in 0..6 {
            svs.push_row(&x, i, &[i as f64, -1.0]);
        }
        svs.shrink(0.5);
        svs.swap_remove(1);
        let model = svs.to_model(0.8);
        assert_eq!(model.n_sv(), 5);
        let mut direct = vec![0.0; n * 2];
        model.decision_function(&x, &mut direct).unwrap();
        let mut kv = vec![0.0; 8];
        let mut f = [0.0; 2];
        for i in 0..n {
            svs.dots_with_row(&x, i, &mut kv);
            svs.dots_to_kernel(0.8, x.sq_norm(i), &mut kv);
            svs.decision_from_kernel(&kv, &mut f);
            assert!((f[0] - direct[2 * i]).abs() < 1e-12);
            assert!((f[1] - direct[2 * i + 1]).abs() < 1e-12);
        }
        // Coefficients are scaled: SV 0 had [0, -1] * 0.5.
        assert_eq!(&model.coef[0..2], &[0.0, -0.5]);
    }

    #[test]
    fn lazy_averaging_equals_explicit_per_step_sums() {
        // Random pushes, shrinks (with renormalisation), merges, projections and removals; the
        // reference keeps actual coefficients and their running sums explicitly, applying the
        // same linear maps to the sums.
        let mut rng = Rng::new(17);
        let (d, cap, n_out) = (3, 6, 2);
        let xs: Vec<f64> = (0..50 * d).map(|_| rng.next_f64()).collect();
        let x = DenseView::new(&xs, 50, d).unwrap();
        let mut svs = SupportVectors::new(d, cap, n_out);
        let mut coef: Vec<Vec<f64>> = vec![];
        let mut sums: Vec<Vec<f64>> = vec![];
        let mut steps = 0u64;
        for step in 0..400 {
            if step == 40 {
                svs.start_averaging();
            }
            let averaging = step >= 40;
            let r = rng.next_f64();
            if svs.len() < cap - 1 && r < 0.4 {
                let c: Vec<f64> = (0..n_out).map(|_| rng.next_f64() - 0.5).collect();
                svs.push_row(&x, rng.below(50), &c);
                coef.push(c);
                sums.push(vec![0.0; n_out]);
            } else if svs.len() >= 2 && r < 0.55 {
                let (p, q) = (0, svs.len() - 1);
                let (kp, kq) = (rng.next_f64(), rng.next_f64());
                let z = vec![0.3; d];
                svs.merge_pair(p, q, &z, kp, kq);
                for k in 0..n_out {
                    coef[q][k] = kp * coef[p][k] + kq * coef[q][k];
                    sums[q][k] = kp * sums[p][k] + kq * sums[q][k];
                }
                coef.swap_remove(p);
                sums.swap_remove(p);
            } else if svs.len() >= 2 && r < 0.65 {
                let p = rng.below(svs.len());
                let delta: Vec<f64> = (0..svs.len()).map(|_| rng.next_f64() - 0.5).collect();
                svs.project_out(p, &delta);
                for i in (0..coef.len()).filter(|&i| i != p) {
                    for k in 0..n_out {
                        coef[i][k] += delta[i] * coef[p][k];
                        sums[i][k] += delta[i] * sums[p][k];
                    }
                }
                coef.swap_remove(p);
                sums.swap_remove(p);
            } else if !svs.is_empty() && r < 0.7 {
                let p = rng.below(svs.len());
                svs.swap_remove(p);
                coef.swap_remove(p);
                sums.swap_remove(p);
            } else {
                let f = if rng.next_f64() < 0.1 { 1e-7 } else { 0.9 };
                svs.shrink(f);
                for c in coef.iter_mut().flatten() {
                    *c *= f;
                }
            }
            if averaging {
                svs.accumulate_average();
                steps += 1;
                for (s, c) in sums.iter_mut().zip(&coef) {
                    for (sk, ck) in s.iter_mut().zip(c) {
                        *sk += ck;
                    }
                }
            }
        }
        let model = svs.to_model(1.0);
        assert_eq!(model.n_sv(), sums.len());
        for (j, s) in sums.iter().enumerate() {
            for (k, &sk) in s.iter().enumerate() {
                let expected = sk / steps as f64;
                let got = model.coef[j * n_out + k];
                assert!(
                    (got - expected).abs() <= 1e-9 * (1.0 + expected.abs()),
                    "{got} vs {expected}"
                );
            }
        }
    }

    #[test]
    fn row_tracking_follows_pushes_moves_and_merges() {
        let xs: Vec<f64> = (0..10).map(f64::from).collect();
        let x = DenseView::new(&xs, 5, 2).unwrap();
        let mut svs = SupportVectors::new(2, 6, 1);
        svs.track_rows(5);
        for i in [4, 0, 2, 3] {
            svs.push_row(&x, i, &[1.0]);
        }
        assert_eq!(svs.slot_of_row(2), Some(2));
        svs.swap_remove(0); // row 4 leaves, row 3 moves into slot 0
        assert_eq!(svs.slot_of_row(4), None);
        assert_eq!(svs.slot_of_row(3), Some(0));
        svs.merge_pair(1, 0, &[0.5, 0.5], 0.9, 0.9); // rows 0 and 3 become a merged point
        assert_eq!(svs.slot_of_row(0), None);
        assert_eq!(svs.slot_of_row(3), None);
        assert_eq!(svs.slot_of_row(2), Some(1));
        assert_eq!(svs.len(), 2);
        svs.add_to_coef(1, &[0.5]);
        assert_eq!(svs.coef(1), &[1.5]);
    }

    #[test]
    fn shrink_renormalises_without_changing_values() {
        let xs = [1.0, 2.0];
        let x = DenseView::new(&xs, 1, 2).unwrap();
        let mut svs = SupportVectors::new(2, 2, 1);
        svs.push_row(&x, 0, &[3.0]);
        for _ in 0..100 {
            svs.shrink(0.5);
        }
        let expected = 3.0 * 0.5f64.powi(100);
        let got = svs.to_model(1.0).coef[0];
        assert!((got - expected).abs() <= 1e-12 * expected);
        assert!(svs.scale() >= MIN_SCALE);
    }
}
