//! Support vectors with their coefficients: the working set a budgeted solver updates, and the
//! finished model that predicts.

use crate::core::common::error::{Result, SvmError};
use crate::core::data::codec::{corrupt, Reader, Writer};
use crate::core::data::rows::{DenseView, Rows};
use crate::core::data::sparse::{RowProbe, SparseArena};
use crate::core::data::sv_matrix::SvMatrix;
use crate::core::kernels::kernel::{check_gamma, Kernel};
use crate::core::kernels::kernel_block::{decision_values, KernelBlocks, Outputs};
use crate::core::simd;
use rayon::prelude::*;

/// How the support vectors of a model under training are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SvLayout {
    /// Feature-major dense block: the dots of one row with all SVs are one axpy of length B
    /// per non-zero of the row. Fastest for dense or low-dimensional input; costs
    /// O(n_features) memory per SV and O(n_features) per insertion, merge and removal.
    Dense,
    /// Each SV as sorted (column, value) pairs in shared arenas: every operation costs
    /// O(non-zeros), whatever the number of features.
    Sparse,
}

/// CSR input with more columns than this gets the sparse layout under `auto`. Measured with
/// `benchmarks/sparse_layouts.py` (docs/sparse.md), BSGD at B = 100 and 500, 50 non-zeros a row:
/// the dense block is 5-20x faster up to 4,096 columns (a9a and w8a, 123 and 300 columns: 7-15x),
/// since merged vectors fill in and the sparse step probes every stored entry; at 16,384 columns
/// they are even (sparse 0.8x the time at B = 100, 1.2x at B = 500), and beyond, the dense block's
/// O(n_features) insertions, merges and memory (B x n_features) grow without bound.
pub const DENSE_LAYOUT_MAX_COLS: usize = 16_384;

impl SvLayout {
    /// The layout for `requested` ("auto", "dense" or "sparse") on input with `n_cols` columns.
    pub fn choose(requested: &str, sparse_input: bool, n_cols: usize) -> Result<Self> {
        match requested {
            "dense" => Ok(SvLayout::Dense),
            "sparse" => Ok(SvLayout::Sparse),
            "auto" => Ok(if sparse_input && n_cols > DENSE_LAYOUT_MAX_COLS {
                SvLayout::Sparse
            } else {
                SvLayout::Dense
            }),
            other => Err(SvmError::invalid_parameter(
                "sv_storage",
                format!("unknown support vector storage {other:?}; expected auto, dense or sparse"),
            )),
        }
    }
}

/// A zero-filled vector of `rows x cols` f64, or a clear error where that cannot exist.
fn try_zeroed(rows: usize, cols: usize, what: &str) -> Result<Vec<f64>> {
    let too_big = || {
        SvmError::invalid_input(format!(
            "{what} of {rows} x {cols} values does not fit in memory; \
             for high-dimensional sparse data use sv_storage='sparse' (or 'auto' with CSR input)"
        ))
    };
    let n = rows.checked_mul(cols).ok_or_else(too_big)?;
    if n > isize::MAX as usize / 8 {
        return Err(too_big());
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_big())?;
    v.resize(n, 0.0);
    Ok(v)
}

#[derive(Debug, Clone)]
enum Store {
    /// `svt[c * capacity + j]` is feature c of SV j; `cols` and `vals` hold the non-zeros of
    /// the row whose kernel row is being computed (reused, so a step allocates nothing).
    Dense {
        svt: Vec<f64>,
        cols: Vec<usize>,
        vals: Vec<f64>,
    },
    Sparse {
        arena: Box<SparseArena>,
        probe: RowProbe,
    },
}

/// The support vectors of a model under training, in either [`SvLayout`]; slots grow on
/// demand (by doubling), so a budget far above the number of rows seen costs nothing.
///
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
    store: Store,
    sq_norms: Vec<f64>,
    coef: Vec<f64>,
    scale: f64,
    averaging: Option<Averaging>,
}

/// What the saved form keeps where version 1-4 states kept each slot's training row (a row
/// tracking that a step now finds by content, `Budgeted::stored_copy`): none.
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

/// Slots allocated up front: enough for most budgets, small enough for any.
const INITIAL_SLOTS: usize = 64;
/// From this many support vectors a step's kernel row is computed in parts of `ROW_PART_SVS`,
/// in parallel when the step runs on a pool's thread (the budgeted passes do), and its
/// decision sum is the parts' sums added in order: the same model on any number of threads,
/// and the sparse layout sums its row in the same parts. One step at B = 10,000 on 10 features
/// is about 17 us of work, enough to split in two or more.
const ROW_PARTS_FROM: usize = 4096;
const ROW_PART_SVS: usize = 2048;
/// Parts at most (their sums stay on the stack); beyond, the parts grow.
const MAX_ROW_PARTS: usize = 64;

/// Support vectors per part of a kernel row over `len` of them (`ROW_PARTS_FROM`).
fn row_part_svs(len: usize) -> usize {
    ROW_PART_SVS.max(len.div_ceil(MAX_ROW_PARTS))
}

/// The parts of a kernel row over `len` SVs, in the order their sums are added.
fn row_parts(len: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let size = if len < ROW_PARTS_FROM {
        len.max(1)
    } else {
        row_part_svs(len)
    };
    (0..len).step_by(size).map(move |a| a..(a + size).min(len))
}

impl SupportVectors {
    /// An empty store for vectors of `dim` features with `n_out` coefficients each. `expected`
    /// SVs get slots at once when that is cheap (the budget + 1 of a solver); more are added on
    /// demand. Fails, without allocating, where the dense layout cannot exist.
    pub fn new(dim: usize, expected: usize, n_out: usize, layout: SvLayout) -> Result<Self> {
        if n_out == 0 {
            return Err(SvmError::invalid_input("a model needs at least one output"));
        }
        let capacity = expected.clamp(1, INITIAL_SLOTS.max(1));
        let store = match layout {
            SvLayout::Dense => Store::Dense {
                svt: try_zeroed(capacity, dim, "dense support vector storage")?,
                cols: Vec::new(),
                vals: Vec::new(),
            },
            SvLayout::Sparse => Store::Sparse {
                arena: Box::new(SparseArena::new()),
                probe: RowProbe::new(),
            },
        };
        Ok(SupportVectors {
            dim,
            capacity,
            len: 0,
            n_out,
            store,
            sq_norms: vec![0.0; capacity],
            coef: vec![0.0; capacity * n_out],
            scale: 1.0,
            averaging: None,
        })
    }

    pub fn layout(&self) -> SvLayout {
        match self.store {
            Store::Dense { .. } => SvLayout::Dense,
            Store::Sparse { .. } => SvLayout::Sparse,
        }
    }

    /// Makes room for one more SV, doubling the slots when full.
    fn ensure_room(&mut self) -> Result<()> {
        if self.len < self.capacity {
            return Ok(());
        }
        // Not a power of two: the dense store's feature runs are `capacity` values apart, and at
        // 512 (4 KiB) they all fall into the same L1 sets, which made the fused step at B = 500
        // and d = 22 1.6x slower (criterion, benches/merge.rs and floor.rs).
        let new_cap = self
            .capacity
            .saturating_mul(2)
            .saturating_add(8)
            .max(INITIAL_SLOTS);
        if let Store::Dense { svt, .. } = &mut self.store {
            let mut grown = try_zeroed(new_cap, self.dim, "dense support vector storage")?;
            let (old_cap, len) = (self.capacity, self.len);
            for c in 0..self.dim {
                grown[c * new_cap..c * new_cap + len]
                    .copy_from_slice(&svt[c * old_cap..c * old_cap + len]);
            }
            *svt = grown;
        }
        self.sq_norms.resize(new_cap, 0.0);
        self.coef.resize(new_cap * self.n_out, 0.0);
        if let Some(a) = &mut self.averaging {
            a.sum.resize(new_cap * self.n_out, 0.0);
            a.mark.resize(new_cap, 0.0);
        }
        self.capacity = new_cap;
        Ok(())
    }

    /// Whether SV j is row i of x exactly: the same value in every column the store keeps
    /// (columns past `dim` are dropped on insertion, as `push_row` drops them).
    pub fn holds_row<R: Rows>(&self, j: usize, x: &R, i: usize) -> bool {
        let dim = self.dim;
        let mut same = true;
        match &self.store {
            Store::Dense { svt, .. } => {
                let cap = self.capacity;
                let mut nonzeros = 0usize;
                x.for_each_nonzero(i, |c, v| {
                    if c < dim && v != 0.0 {
                        nonzeros += 1;
                        same &= svt[c * cap + j] == v;
                    }
                });
                same && (0..dim).filter(|&c| svt[c * cap + j] != 0.0).count() == nonzeros
            }
            Store::Sparse { arena, .. } => {
                // Both sides in column order, zeros skipped.
                let (idx, val) = arena.get(j);
                let mut stored = idx.iter().zip(val).filter(|(_, &v)| v != 0.0);
                x.for_each_nonzero(i, |c, v| {
                    if c < dim && v != 0.0 {
                        same &= stored.next() == Some((&(c as u64), &v));
                    }
                });
                same && stored.next().is_none()
            }
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
            a.steps = a.steps.saturating_add(1);
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
    /// Slots allocated now (grows on demand).
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
    /// Stored coefficients of all SVs, SV-major (`n_out` per SV).
    #[inline]
    pub fn coefs(&self) -> &[f64] {
        &self.coef[..self.len * self.n_out]
    }
    #[inline]
    pub fn coef_mut(&mut self, j: usize) -> &mut [f64] {
        &mut self.coef[j * self.n_out..(j + 1) * self.n_out]
    }

    /// out[j] = <sv_j, x_i> for j < len.
    #[inline]
    pub fn dots_with_row<R: Rows>(&mut self, x: &R, i: usize, out: &mut [f64]) {
        let (len, cap, dim) = (self.len, self.capacity, self.dim);
        let out = &mut out[..len];
        match &mut self.store {
            Store::Dense { svt, .. } => {
                out.fill(0.0);
                x.for_each_nonzero(i, |c, v| {
                    if c < dim {
                        simd::axpy(v, &svt[c * cap..c * cap + len], out);
                    }
                });
            }
            Store::Sparse { arena, probe } => arena.dots_with_row(probe, x, i, dim, out),
        }
    }

    /// The kernel row of row i of x (squared norm `sq_norm`) against the SVs into `kvals`, and
    /// its decision values into `f`: the whole arithmetic of a budgeted step. With the dense
    /// layout and one output this is one fused pass (`simd::rbf_row`); otherwise dots, kernel
    /// values and decision values one after the other.
    #[inline]
    pub fn kernel_row_and_decision<R: Rows>(
        &mut self,
        x: &R,
        i: usize,
        sq_norm: f64,
        gamma: f64,
        kvals: &mut [f64],
        f: &mut [f64],
    ) {
        let (len, cap, dim) = (self.len, self.capacity, self.dim);
        if let Store::Dense { svt, cols, vals } = &mut self.store {
            cols.clear();
            vals.clear();
            x.for_each_nonzero(i, |c, v| {
                if c < dim {
                    cols.push(c);
                    vals.push(v);
                }
            });
            let coef = (self.n_out == 1).then_some(&self.coef[..len]);
            let row = simd::RowNonzeros {
                cols,
                vals,
                sq_norm,
            };
            let level = simd::level();
            let sq_norms = &self.sq_norms;
            let part = |first: usize, kv: &mut [f64]| {
                let end = first + kv.len();
                let svs =
                    simd::FeatureMajor::new(&svt[first..], cap, kv.len(), &sq_norms[first..end]);
                simd::rbf_row(level, svs, row, gamma, coef.map(|c| &c[first..end]), kv)
            };
            let sum = if len >= ROW_PARTS_FROM && rayon::current_thread_index().is_some() {
                let size = row_part_svs(len);
                let mut sums = [0.0; MAX_ROW_PARTS];
                kvals[..len]
                    .par_chunks_mut(size)
                    .zip(sums.par_iter_mut())
                    .enumerate()
                    .for_each(|(p, (kv, sum))| *sum = part(p * size, kv));
                sums[..len.div_ceil(size)]
                    .iter()
                    .fold(0.0, |total, p| total + p)
            } else {
                row_parts(len).fold(0.0, |total, r| total + part(r.start, &mut kvals[r]))
            };
            if self.n_out == 1 {
                f[0] = self.scale * sum;
            } else {
                self.decision_from_kernel(kvals, f);
            }
            return;
        }
        self.dots_with_row(x, i, kvals);
        self.dots_to_kernel(gamma, sq_norm, kvals);
        if self.n_out == 1 {
            // Summed as the dense layout's fused pass sums it, so both layouts train one model.
            let mut nnz = 0;
            x.for_each_nonzero(i, |c, _| nnz += usize::from(c < dim));
            let coef = &self.coef[..len];
            let level = simd::level();
            let sum = row_parts(len).fold(0.0, |total, r| {
                total + simd::decision_sum_as_rbf_row(level, &coef[r.clone()], &kvals[r], nnz)
            });
            f[0] = self.scale * sum;
        } else {
            self.decision_from_kernel(kvals, f);
        }
    }

    /// out[j] = k(sv_p, sv_j) for j < len: the kernel row of SV p (for merging).
    pub fn kernel_row_of_sv(&mut self, p: usize, gamma: f64, out: &mut [f64]) {
        let (len, cap) = (self.len, self.capacity);
        match &mut self.store {
            Store::Dense { svt, cols, vals } => {
                cols.clear();
                vals.clear();
                for c in 0..self.dim {
                    let v = svt[c * cap + p];
                    if v != 0.0 {
                        cols.push(c);
                        vals.push(v);
                    }
                }
                let row = simd::RowNonzeros {
                    cols,
                    vals,
                    sq_norm: self.sq_norms[p],
                };
                let svs = simd::FeatureMajor::new(svt, cap, len, &self.sq_norms);
                simd::rbf_row(simd::level(), svs, row, gamma, None, out);
            }
            Store::Sparse { arena, probe } => {
                arena.dots_with_vector(probe, p, &mut out[..len]);
                self.dots_to_kernel(gamma, self.sq_norms[p], out);
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
        let n_out = self.n_out;
        simd::weighted_row_sum(
            simd::level(),
            &self.coef[..self.len * n_out],
            n_out,
            &kvals[..self.len],
            out,
        );
        for o in out[..n_out].iter_mut() {
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

    /// Appends row i of x with actual (unscaled) coefficients `coef`; fails only where the
    /// dense layout cannot grow.
    pub fn push_row<R: Rows>(&mut self, x: &R, i: usize, coef: &[f64]) -> Result<()> {
        self.ensure_room()?;
        let j = self.len;
        let (cap, dim) = (self.capacity, self.dim);
        let mut norm = 0.0;
        match &mut self.store {
            Store::Dense { svt, .. } => {
                for c in 0..dim {
                    svt[c * cap + j] = 0.0;
                }
                x.for_each_nonzero(i, |c, v| {
                    if c < dim {
                        svt[c * cap + j] = v;
                        norm += v * v;
                    }
                });
            }
            Store::Sparse { arena, .. } => {
                arena.push_row(x, i, dim);
                norm = arena.get(j).1.iter().map(|v| v * v).sum();
            }
        }
        // The norm of what is stored: a row with columns past dim loses them here.
        self.sq_norms[j] = norm;
        self.len += 1;
        self.reset_average(j);
        self.set_actual_coef(j, coef);
        Ok(())
    }

    /// A new SV: nothing accumulated yet.
    fn reset_average(&mut self, j: usize) {
        let n = self.n_out;
        if let Some(a) = &mut self.averaging {
            a.sum[j * n..(j + 1) * n].fill(0.0);
            a.mark[j] = a.scale_sum;
        }
    }

    /// Replaces SVs p and q by z = h x_p + (1 - h) x_q with coefficients k_p c_p + k_q c_q (the
    /// merge of `budget.rs`; k_p = k(x_p, z), k_q = k(x_q, z)). z takes q's slot, then p is
    /// removed.
    pub fn merge_pair(&mut self, p: usize, q: usize, h: f64, k_p: f64, k_q: f64) {
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
        self.sq_norms[q] = match &mut self.store {
            Store::Dense { svt, .. } => {
                // Summed in column order over the non-zeros, as the sparse layout sums it.
                let mut norm = 0.0;
                for c in 0..self.dim {
                    let z = h * svt[c * cap + p] + (1.0 - h) * svt[c * cap + q];
                    svt[c * cap + q] = z;
                    norm += z * z;
                }
                norm
            }
            Store::Sparse { arena, .. } => arena.merge_into(p, q, h),
        };
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

    /// Removes SV j by moving the last one into its place (so indices > j are not shifted).
    pub fn swap_remove(&mut self, j: usize) {
        let last = self.len - 1;
        if j != last {
            if let Store::Dense { svt, .. } = &mut self.store {
                let cap = self.capacity;
                for c in 0..self.dim {
                    svt[c * cap + j] = svt[c * cap + last];
                }
            }
            self.sq_norms[j] = self.sq_norms[last];
            let n = self.n_out;
            self.coef.copy_within(last * n..(last + 1) * n, j * n);
            if let Some(a) = &mut self.averaging {
                a.sum.copy_within(last * n..(last + 1) * n, j * n);
                a.mark[j] = a.mark[last];
            }
        }
        if let Store::Sparse { arena, .. } = &mut self.store {
            arena.swap_remove(j);
        }
        self.len -= 1;
    }

    /// Index of the SV with the smallest coefficient norm (the one budget maintenance acts on);
    /// the first of equal ones.
    pub fn smallest(&self) -> Option<usize> {
        self.smallest_with_norm().map(|(j, _)| j)
    }

    fn coef_sq_norm(&self, j: usize) -> f64 {
        self.coef(j).iter().map(|c| c * c).sum()
    }

    fn smallest_with_norm(&self) -> Option<(usize, f64)> {
        if self.len == 0 {
            return None;
        }
        if self.n_out == 1 {
            return simd::argmin_sq(simd::level(), &self.coef[..self.len]);
        }
        let (mut at, mut least) = (0, self.coef_sq_norm(0));
        for j in 1..self.len {
            let v = self.coef_sq_norm(j);
            if v < least || least.is_nan() {
                (at, least) = (j, v);
            }
        }
        Some((at, least))
    }

    /// [`Self::smallest`], except that SV `preferred` is taken when its coefficient norm is the
    /// least up to a relative `tie` (rounding). In BSGD every SV not yet merged has, in exact
    /// arithmetic, the same coefficient 1/(lambda t) (or its class-vector form): its insertion
    /// step eta_s = 1/(lambda s) times the shrinks (1 - 1/tau) since, s/t; stored values differ
    /// only by the rounding of the running scale. Among them the solver prefers the SV it just
    /// added, whose kernel row it has already computed.
    pub fn smallest_preferring(&self, preferred: usize, tie: f64) -> Option<usize> {
        let (p, least) = self.smallest_with_norm()?;
        if preferred < self.len && self.coef_sq_norm(preferred) <= least * (1.0 + tie) {
            Some(preferred)
        } else {
            Some(p)
        }
    }

    /// The support vectors in the model's form: row-major dense, or CSR.
    fn sv_matrix(&self) -> SvMatrix {
        match &self.store {
            Store::Dense { svt, .. } => {
                let (cap, dim) = (self.capacity, self.dim);
                let mut sv = vec![0.0; self.len * dim];
                for j in 0..self.len {
                    for c in 0..dim {
                        sv[j * dim + c] = svt[c * cap + j];
                    }
                }
                SvMatrix::Dense(sv)
            }
            Store::Sparse { arena, .. } => {
                let (indptr, indices, values) = arena.to_csr();
                SvMatrix::Sparse {
                    indptr,
                    indices,
                    values,
                }
            }
        }
    }

    /// The finished model: the scale folded into the coefficients; with averaging on (and at
    /// least one averaged step), the averaged coefficients.
    pub fn to_model(&self, gamma: f64) -> BudgetModel {
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
            support_vectors: self.sv_matrix(),
            coef,
        }
    }
}

impl SupportVectors {
    /// Writes the store (for saving a streaming run's state): only the live slots.
    pub fn encode(&self, w: &mut Writer) {
        let (len, n) = (self.len, self.n_out);
        for v in [self.dim, len, n] {
            w.usize(v);
        }
        w.bool(self.layout() == SvLayout::Sparse);
        match self.sv_matrix() {
            SvMatrix::Dense(sv) => w.f64s(&sv),
            SvMatrix::Sparse {
                indptr,
                indices,
                values,
            } => {
                let nnz: Vec<u64> = indptr.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
                w.u64s(&nnz);
                w.u64s(&indices);
                w.f64s(&values);
            }
        }
        w.f64s(&self.sq_norms[..len]);
        w.f64s(&self.coef[..len * n]);
        w.f64(self.scale);
        w.option(self.averaging.as_ref(), |w, a| {
            w.f64(a.scale_sum);
            w.u64(a.steps);
            w.f64s(&a.sum[..len * n]);
            w.f64s(&a.mark[..len]);
        });
        // Where states before version 5 kept row tracking: the same fields, saying none.
        w.u32s(&vec![NO_ORIGIN; len]);
        w.u32s(&[]);
    }

    /// Reads what `encode` wrote, checking every size against the data that is there; never
    /// allocates more than the bytes read describe (plus the dense block, checked first).
    pub fn decode(r: &mut Reader<'_>) -> Result<Self> {
        let (dim, len, n_out) = (r.usize()?, r.usize()?, r.usize()?);
        let sparse = r.bool()?;
        let coefs = len
            .checked_mul(n_out)
            .ok_or_else(|| corrupt("coefficient sizes"))?;
        if n_out == 0 || u32::try_from(len).is_err() {
            return Err(corrupt("support vector count"));
        }
        let layout = if sparse {
            SvLayout::Sparse
        } else {
            SvLayout::Dense
        };
        let mut rows_data = None;
        let mut sparse_data = None;
        if sparse {
            let nnz = r.u64s()?;
            let indices = r.u64s()?;
            let values = r.f64s()?;
            let total = nnz
                .iter()
                .try_fold(0u64, |a, &b| a.checked_add(b))
                .ok_or_else(|| corrupt("sparse sizes"))?;
            if nnz.len() != len || total != indices.len() as u64 || indices.len() != values.len() {
                return Err(corrupt("sparse sizes"));
            }
            sparse_data = Some((nnz, indices, values));
        } else {
            let sv = r.f64s()?;
            if Some(sv.len()) != len.checked_mul(dim) {
                return Err(corrupt("support vector sizes"));
            }
            rows_data = Some(sv);
        }
        let sq_norms = r.f64s_of(len)?;
        let coef = r.f64s_of(coefs)?;
        let tail = StoreTail::decode(r, coefs, len)?;
        let mut svs = SupportVectors::new(dim, len, n_out, layout)?;
        match (&mut svs.store, rows_data, sparse_data) {
            (Store::Dense { .. }, Some(sv), _) => {
                for j in 0..len {
                    let row = DenseView::new(&sv[j * dim..(j + 1) * dim], 1, dim)?;
                    svs.push_row(&row, 0, &vec![0.0; n_out])?;
                }
            }
            (Store::Sparse { .. }, _, Some((nnz, indices, values))) => {
                let mut at = 0usize;
                for &k in &nnz {
                    let k = k as usize;
                    let (i, v) = (&indices[at..at + k], &values[at..at + k]);
                    if i.windows(2).any(|w| w[0] >= w[1])
                        || i.last().is_some_and(|&c| c >= dim as u64)
                    {
                        return Err(corrupt("sparse support vector indices"));
                    }
                    svs.ensure_room()?;
                    if let Store::Sparse { arena, .. } = &mut svs.store {
                        arena.push_sparse(i, v);
                    }
                    svs.len += 1;
                    at += k;
                }
            }
            _ => return Err(corrupt("layout")),
        }
        svs.sq_norms[..len].copy_from_slice(&sq_norms);
        svs.coef[..coefs].copy_from_slice(&coef);
        svs.scale = tail.scale;
        svs.averaging = tail.averaging.map(|mut a| {
            a.sum.resize(svs.capacity * n_out, 0.0);
            a.mark.resize(svs.capacity, 0.0);
            a
        });
        Ok(svs)
    }

    /// Reads the store of a version 1 state (dense, `capacity` slots all allocated).
    pub fn decode_v1(r: &mut Reader<'_>) -> Result<Self> {
        let (dim, capacity, len, n_out) = (r.usize()?, r.usize()?, r.usize()?, r.usize()?);
        let cells = dim
            .checked_mul(capacity)
            .ok_or_else(|| corrupt("support vector sizes"))?;
        let coefs = capacity
            .checked_mul(n_out)
            .ok_or_else(|| corrupt("coefficient sizes"))?;
        if len > capacity || n_out == 0 || u32::try_from(capacity).is_err() {
            return Err(corrupt("support vector count"));
        }
        let svt = r.f64s_of(cells)?;
        let sq_norms = r.f64s_of(capacity)?;
        let coef = r.f64s_of(coefs)?;
        let tail = StoreTail::decode(r, coefs, capacity)?;
        Ok(SupportVectors {
            dim,
            capacity,
            len,
            n_out,
            store: Store::Dense {
                svt,
                cols: Vec::new(),
                vals: Vec::new(),
            },
            sq_norms,
            coef,
            scale: tail.scale,
            averaging: tail.averaging,
        })
    }

    /// SV j's averaged coefficient for output k so far (actual units, per averaged step), while
    /// averaging.
    pub fn average_coef(&self, j: usize, k: usize) -> Option<f64> {
        let a = self.averaging.as_ref()?;
        let jk = j * self.n_out + k;
        let pending = self.coef[jk] * (a.scale_sum - a.mark[j]);
        Some((a.sum[jk] + pending) / a.steps.max(1) as f64)
    }

    /// Whether averaging has started.
    pub fn is_averaging(&self) -> bool {
        self.averaging.is_some()
    }
}

/// What every version of a saved store ends with, after the coefficients.
struct StoreTail {
    scale: f64,
    averaging: Option<Averaging>,
}

impl StoreTail {
    /// Reads and checks the tail of a store of `slots` slots with `coefs` coefficients.
    fn decode(r: &mut Reader<'_>, coefs: usize, slots: usize) -> Result<Self> {
        let scale = r.f64()?;
        let averaging = r.option(|r| {
            Ok(Averaging {
                scale_sum: r.f64()?,
                steps: r.u64()?,
                sum: r.f64s_of(coefs)?,
                mark: r.f64s_of(slots)?,
            })
        })?;
        let origin = r.u32s()?;
        let slot_of_row = r.u32s()?;
        // The row tracking states before version 5 kept: checked, no longer used.
        if origin.len() != slots
            || slot_of_row
                .iter()
                .any(|&s| s != NO_ORIGIN && s as usize >= slots)
        {
            return Err(corrupt("row tracking"));
        }
        if !(scale.is_finite() && scale > 0.0) {
            return Err(corrupt("scale"));
        }
        Ok(StoreTail { scale, averaging })
    }
}

/// A trained kernel expansion f_k(x) = sum_j coef[j][k] k(sv_j, x).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetModel {
    pub dim: usize,
    pub n_out: usize,
    pub gamma: f64,
    pub support_vectors: SvMatrix,
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
        if self.n_out == 0 || !self.coef.len().is_multiple_of(self.n_out) {
            return Err(SvmError::invalid_input(
                "coefficient array has the wrong shape",
            ));
        }
        let n_sv = self.n_sv();
        match &self.support_vectors {
            SvMatrix::Dense(sv) => {
                if Some(sv.len()) != n_sv.checked_mul(self.dim) {
                    return Err(SvmError::invalid_input(format!(
                        "{n_sv} support vectors of dimension {} need {} values, got {}",
                        self.dim,
                        n_sv.saturating_mul(self.dim),
                        sv.len()
                    )));
                }
            }
            SvMatrix::Sparse {
                indptr,
                indices,
                values,
            } => {
                let ok = indptr.len() == n_sv + 1
                    && indptr.first() == Some(&0)
                    && indptr.last() == Some(&indices.len())
                    && indices.len() == values.len()
                    && indptr.windows(2).all(|w| w[0] <= w[1])
                    && indptr.windows(2).all(|w| {
                        let row = &indices[w[0]..w[1]];
                        row.windows(2).all(|p| p[0] < p[1])
                            && row.last().is_none_or(|&c| c < self.dim as u64)
                    });
                if !ok {
                    return Err(SvmError::invalid_input(format!(
                        "sparse support vectors must be {n_sv} CSR rows with sorted, distinct \
                         column indices below {}",
                        self.dim
                    )));
                }
            }
        }
        crate::core::data::rows::check_finite(self.support_vectors.values(), "support vectors")?;
        crate::core::data::rows::check_finite(&self.coef, "coefficients")
    }

    /// Decision values, n_rows x n_out row-major, rows in parallel.
    pub fn decision_function<R: Rows>(&self, x: &R, out: &mut [f64]) -> Result<()> {
        self.decision_function_until(x, out, &|| false)
    }

    /// `decision_function`, asking `stop` between blocks of rows (Ctrl-C on a large matrix):
    /// `Err(Interrupted)` once it says so.
    pub fn decision_function_until<R: Rows>(
        &self,
        x: &R,
        out: &mut [f64],
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<()> {
        self.validate()?;
        let outputs = Outputs::PerVector {
            coef: &self.coef,
            n_out: self.n_out,
        };
        decision_of_expansion(
            &self.support_vectors,
            self.dim,
            Kernel::rbf(self.gamma),
            &outputs,
            None,
            x,
            out,
            stop,
        )
    }
}

/// Decision values of the kernel expansion over `support_vectors` (n_sv x dim) with the given
/// outputs and intercept, for every row of `x` (kernel_block::decision_values), after checking
/// that no row of either side has a squared norm where kernel values overflow.
#[allow(clippy::too_many_arguments)]
pub fn decision_of_expansion<R: Rows>(
    support_vectors: &SvMatrix,
    dim: usize,
    kernel: Kernel,
    outputs: &Outputs<'_>,
    intercept: Option<&[f64]>,
    x: &R,
    out: &mut [f64],
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let n_sv = match support_vectors {
        SvMatrix::Dense(v) => v.len().checked_div(dim).unwrap_or(0),
        SvMatrix::Sparse { indptr, .. } => indptr.len().saturating_sub(1),
    };
    let x_norms = crate::core::data::rows::finite_sq_norms(x, "X")?;
    let blocks = KernelBlocks::from_sv_matrix(support_vectors, n_sv, dim, kernel)?;
    crate::core::data::rows::check_sq_norms(blocks.sq_norms(), "support vector")?;
    decision_values(&blocks, outputs, intercept, x, &x_norms, out, stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::DenseView;

    #[test]
    fn kernel_values_and_decision_match_direct_evaluation() {
        let mut rng = Rng::new(3);
        let (n, d) = (12, 5);
        let xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64() - 0.5).collect();
        let x = DenseView::new(&xs, n, d).unwrap();
        let mut svs = SupportVectors::new(d, 8, 2, SvLayout::Dense).unwrap();
        for i in 0..6 {
            svs.push_row(&x, i, &[i as f64, -1.0]).unwrap();
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

    /// A step's kernel row over many SVs (`ROW_PARTS_FROM`) in parts: the same kernel values and
    /// decision value to the bit on the dense and sparse layouts, outside a pool and on pools of
    /// one and three threads, and within rounding of the direct sum; rows with more non-zeros
    /// than the fused pass takes too.
    #[test]
    fn kernel_rows_in_parts_agree_across_layouts_and_threads() {
        let mut rng = Rng::new(5);
        let (n_sv, d, gamma) = (ROW_PARTS_FROM + 2 * ROW_PART_SVS + 37, 40, 0.05);
        let xs: Vec<f64> = (0..(n_sv + 4) * d)
            .map(|k| {
                if k % 3 == 0 {
                    0.0
                } else {
                    rng.next_f64() - 0.5
                }
            })
            .collect();
        let x = DenseView::new(&xs, n_sv + 4, d).unwrap();
        let stores: Vec<SupportVectors> = [SvLayout::Dense, SvLayout::Sparse]
            .into_iter()
            .map(|layout| {
                let mut svs = SupportVectors::new(d, n_sv, 1, layout).unwrap();
                for i in 0..n_sv {
                    svs.push_row(&x, i, &[(i % 7) as f64 - 3.0]).unwrap();
                }
                svs
            })
            .collect();
        for (i, dim) in [(n_sv, d), (n_sv + 1, d), (n_sv + 2, 3)] {
            // dim 3: a row of few non-zeros (the fused pass); 40 columns: more than it takes.
            let row: Vec<f64> = xs[i * d..(i + 1) * d]
                .iter()
                .enumerate()
                .map(|(c, v)| if c < dim { *v } else { 0.0 })
                .collect();
            let one = DenseView::new(&row, 1, d).unwrap();
            let direct: f64 = (0..n_sv)
                .map(|j| {
                    let d2: f64 = (0..d).map(|c| (row[c] - xs[j * d + c]).powi(2)).sum();
                    ((j % 7) as f64 - 3.0) * (-gamma * d2).exp()
                })
                .sum();
            let mut results = Vec::new();
            for store in &stores {
                for threads in [None, Some(1), Some(3)] {
                    let mut svs = store.clone();
                    let mut kv = vec![0.0; n_sv];
                    let mut f = [0.0];
                    let mut step = || {
                        svs.kernel_row_and_decision(&one, 0, one.sq_norm(0), gamma, &mut kv, &mut f)
                    };
                    match threads {
                        None => step(),
                        Some(t) => {
                            crate::core::common::parallel::install_with(Some(t), step).unwrap()
                        }
                    }
                    assert!(
                        (f[0] - direct).abs() < 1e-9 * direct.abs().max(1.0),
                        "row {i}"
                    );
                    results.push((
                        f[0].to_bits(),
                        kv.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    ));
                }
            }
            assert!(results.iter().all(|r| *r == results[0]), "row {i}");
        }
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
        let mut svs = SupportVectors::new(d, cap, n_out, SvLayout::Dense).unwrap();
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
                svs.push_row(&x, rng.below(50), &c).unwrap();
                coef.push(c);
                sums.push(vec![0.0; n_out]);
            } else if svs.len() >= 2 && r < 0.55 {
                let (p, q) = (0, svs.len() - 1);
                let (kp, kq) = (rng.next_f64(), rng.next_f64());
                svs.merge_pair(p, q, 0.3, kp, kq);
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
    fn an_sv_holds_a_row_when_every_kept_value_is_equal() {
        let xs = [
            0.0, 1.5, -2.0, 0.0, 1.5, -2.0, 0.0, 1.5, -2.0000001, 7.0, 0.0, 0.0,
        ];
        let x = DenseView::new(&xs, 4, 3).unwrap();
        let wider = DenseView::new(&[0.0, 1.5, -2.0, 0.0, 0.0, 1.5, -2.0, 3.0], 2, 4).unwrap();
        for layout in [SvLayout::Dense, SvLayout::Sparse] {
            let mut svs = SupportVectors::new(3, 4, 1, layout).unwrap();
            svs.push_row(&x, 0, &[1.0]).unwrap();
            svs.push_row(&x, 3, &[1.0]).unwrap();
            assert!(svs.holds_row(0, &x, 0) && svs.holds_row(0, &x, 1));
            assert!(!svs.holds_row(0, &x, 2), "{layout:?}: one value differs");
            assert!(!svs.holds_row(0, &x, 3) && svs.holds_row(1, &x, 3));
            // Columns past the model's width are not kept, so they do not count.
            assert!(svs.holds_row(0, &wider, 0) && svs.holds_row(0, &wider, 1));
            svs.merge_pair(1, 0, 0.5, 0.9, 0.9);
            assert!(
                !svs.holds_row(0, &x, 0),
                "{layout:?}: a merged point is no row"
            );
        }
    }

    #[test]
    fn shrink_renormalises_without_changing_values() {
        let xs = [1.0, 2.0];
        let x = DenseView::new(&xs, 1, 2).unwrap();
        let mut svs = SupportVectors::new(2, 2, 1, SvLayout::Dense).unwrap();
        svs.push_row(&x, 0, &[3.0]).unwrap();
        for _ in 0..100 {
            svs.shrink(0.5);
        }
        let expected = 3.0 * 0.5f64.powi(100);
        let got = svs.to_model(1.0).coef[0];
        assert!((got - expected).abs() <= 1e-12 * expected);
        assert!(svs.scale() >= MIN_SCALE);
    }
}
