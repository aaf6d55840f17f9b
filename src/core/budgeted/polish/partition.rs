//! The distributed polish's parts (`budgetsvm.dask`): one partition's rows with their kernel
//! values, the sums an iteration asks of them, and the Gram factors the driver adds.

use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use crate::core::budgeted::problem::{Targets, Term};
use crate::core::common::checks::check_weights;
use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::data::rows::Rows;
use crate::core::kernels::kernel_block::{BlockScratch, KernelBlocks};
use crate::core::simd;

use super::hessian::PRODUCT_CHUNK;
use super::line_search::{row_changes, slope_part, walk_order, PieceChange};
use super::newton::{ActiveSums, GramFactor, Staging};
use super::segments::MAX_SEGMENT_ROWS;

/// One partition's rows in a distributed polish (`budgetsvm.dask.fit`): their kernel values
/// against S, computed once by the worker that holds the rows and kept there, and the sums an
/// iteration asks of them. `sums` is a pure function of its arguments and the rows, so a
/// retried task gives the same sums; the driver adds the partitions' sums in partition order
/// and solves the Newton system as the serial solver does.
pub struct PartitionRows {
    pub(super) k: Vec<f64>,
    m: usize,
    targets: OwnedTargets,
    w: Option<Vec<f64>>,
    n_out: usize,
    /// The squared rows of the last point `gradient` or `hessian_product` saw (the point's
    /// bits, then per output (row, weight)): the conjugate gradients' products at one point
    /// read the kernel values once each, not twice.
    squared: Mutex<Option<(Vec<u64>, Arc<SquaredAt>)>>,
}

/// Per output, the rows whose term is a square at a point, with their weights.
type SquaredAt = Vec<Vec<(u32, f64)>>;

/// A partition's part of the Hessian-free direction at a point (`PartitionRows::gradient`),
/// per output.
#[derive(Debug, Clone)]
pub struct PartitionGradient {
    /// sum w loss.
    pub loss: Vec<f64>,
    /// sum w hs k (m values) then sum w hs, hs the term's half slope: n_out x (m + 1).
    pub gradient: Vec<f64>,
    /// sum w over the squared terms (the preconditioner's scale and the intercept's
    /// curvature, times 2C).
    pub weight: Vec<f64>,
}

/// A partition's targets, kept with its kernel values for every later round.
enum OwnedTargets {
    Classes { y: Vec<u32>, n_classes: usize },
    Values { y: Vec<f64>, epsilon: f64 },
}

impl OwnedTargets {
    fn new(targets: Targets<'_>) -> Self {
        match targets {
            Targets::Classes { y, n_classes } => OwnedTargets::Classes {
                y: y.to_vec(),
                n_classes,
            },
            Targets::Values { y, epsilon } => OwnedTargets::Values {
                y: y.to_vec(),
                epsilon,
            },
        }
    }

    fn view(&self) -> Targets<'_> {
        match self {
            OwnedTargets::Classes { y, n_classes } => Targets::Classes {
                y,
                n_classes: *n_classes,
            },
            OwnedTargets::Values { y, epsilon } => Targets::Values {
                y,
                epsilon: *epsilon,
            },
        }
    }
}

/// A partition's part of one iteration, per output.
#[derive(Debug, Clone)]
pub struct PartitionSums {
    /// sum w loss over the rows' terms (`Targets::term`) at the counted point and at the trial
    /// point.
    pub loss_counted: Vec<f64>,
    pub loss_trial: Vec<f64>,
    /// -sum w (f_trial - f_counted) half_slope(f_counted) over the counted point's terms:
    /// times -2C, the loss term's derivative along the step at the counted point.
    pub slope: Vec<f64>,
    /// Rows whose term differs between the two points.
    pub flips: Vec<u64>,
    /// The change of the active-set sums from the counted point's active set to the trial
    /// point's (rows entering added, rows leaving subtracted, in row order). Its M part is
    /// either in `gram` (upper triangle) or, when fewer rows changed than half of m (fewer
    /// bytes), left empty and given as `factors[k]`: the changed rows' kernel values and signed
    /// weights, for `add_gram_factor`.
    pub change: Vec<ActiveSums>,
    pub factors: Vec<Option<GramFactor>>,
}

/// A partition's part of the exact line search (`PartitionRows::line_changes`), per output.
#[derive(Debug, Clone)]
pub struct LineChanges {
    /// The rows' part of phi'(0) = a + b t on the first piece: sum 2C w `slope_part`.
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    /// Rows whose term differs between t = 0 and the full step.
    pub flips: Vec<u64>,
    /// The rows' piece changes beyond the output's `from`, in walk order: the first `most`
    /// of them, with any more at the last one's step.
    pub changes: Vec<Vec<PieceChange>>,
    /// Every change beyond `from` up to this step is in `changes` (infinity: every change).
    pub complete_to: Vec<f64>,
}

impl PartitionRows {
    /// The kernel values of `x`'s rows against the basis of `blocks` (rows in parallel), with
    /// their targets (class indices, or values and the tube) and weights.
    pub fn new<R: Rows>(
        blocks: &KernelBlocks,
        x: &R,
        targets: Targets<'_>,
        weights: Option<&[f64]>,
    ) -> Result<Self> {
        let n = x.n_rows();
        targets.check(n)?;
        check_weights(weights, n)?;
        let m = blocks.n_basis();
        let norms = crate::core::data::rows::finite_sq_norms(x, "X")?;
        let mut k = Vec::new();
        k.try_reserve_exact(n * m).map_err(|_| {
            SvmError::invalid_input("not enough memory for the partition's kernel values")
        })?;
        k.resize(n * m, 0.0);
        if m > 0 {
            parallel::install(|| {
                k.par_chunks_mut(MAX_SEGMENT_ROWS * m)
                    .enumerate()
                    .for_each_init(BlockScratch::default, |scratch, (b, out)| {
                        let first = b * MAX_SEGMENT_ROWS;
                        let rows = first..first + out.len() / m;
                        blocks.fill_rows(x, rows.clone(), &norms[rows], out, scratch);
                    })
            });
        }
        Ok(PartitionRows {
            k,
            m,
            n_out: targets.n_out(),
            targets: OwnedTargets::new(targets),
            w: weights.map(<[f64]>::to_vec),
            squared: Mutex::new(None),
        })
    }

    /// Rows of the partition.
    pub fn n_rows(&self) -> usize {
        self.targets.view().len()
    }

    /// Outputs of the model the partition polishes.
    pub fn n_out(&self) -> usize {
        self.n_out
    }

    /// Bytes held (the kernel values).
    pub fn nbytes(&self) -> usize {
        self.k.len() * 8
    }

    /// f = K coef + intercept for every row and output (row-major n x n_out).
    fn values(&self, coef: &[f64], intercept: &[f64]) -> Vec<f64> {
        self.values_of(coef, intercept, self.n_out)
    }

    /// `values` for q columns of coefficients (m x q, vector-major).
    fn values_of(&self, coef: &[f64], intercept: &[f64], q: usize) -> Vec<f64> {
        let m = self.m;
        let mut f = vec![0.0; self.n_rows() * q];
        if m == 0 {
            f.chunks_mut(q).for_each(|o| o.copy_from_slice(intercept));
            return f;
        }
        let level = simd::level();
        parallel::install(|| {
            f.par_chunks_mut(q)
                .zip(self.k.par_chunks(m))
                .for_each(|(o, row)| {
                    simd::weighted_row_sum(level, coef, q, row, o);
                    o.iter_mut().zip(intercept).for_each(|(v, b)| *v += b);
                })
        });
        f
    }

    /// Checks a point (coef m x n_out vector-major, intercept n_out).
    fn check_point(&self, (c, b): (&[f64], &[f64])) -> Result<()> {
        let (m, q) = (self.m, self.n_out);
        if c.len() != m * q || b.len() != q || !c.iter().chain(b).all(|v| v.is_finite()) {
            return Err(SvmError::invalid_input(format!(
                "a point of the polish needs {m} x {q} finite coefficients and {q} intercepts"
            )));
        }
        Ok(())
    }

    /// Per output, the rows whose term is a square at the point (memoised for the point).
    fn squared_at(&self, point: (&[f64], &[f64]), f: Option<&[f64]>) -> Arc<SquaredAt> {
        let bits: Vec<u64> = point.0.iter().chain(point.1).map(|v| v.to_bits()).collect();
        let mut memo = self.squared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, squared)) = memo.as_ref() {
            if *at == bits {
                return Arc::clone(squared);
            }
        }
        let owned;
        let f = match f {
            Some(f) => f,
            None => {
                owned = self.values(point.0, point.1);
                &owned
            }
        };
        let q = self.n_out;
        let targets = self.targets.view();
        let squared: SquaredAt = (0..q)
            .map(|k| {
                (0..self.n_rows())
                    .filter_map(|i| {
                        let w = self.w.as_ref().map_or(1.0, |w| w[i]);
                        let curvature = targets.term(k, i, f[i * q + k]).curvature();
                        (curvature > 0.0 && w > 0.0).then_some((i as u32, w * curvature))
                    })
                    .collect()
            })
            .collect();
        let squared = Arc::new(squared);
        *memo = Some((bits, Arc::clone(&squared)));
        squared
    }

    /// The partition's part of the Hessian-free direction at a point: per output sum w loss,
    /// sum w hs k and sum w hs (the loss term's gradient, times 2C), and the squared terms'
    /// weight. Sums over rows in chunks of `MAX_SEGMENT_ROWS`, added in order (the same bits on
    /// any thread count).
    pub fn gradient(&self, point: (&[f64], &[f64])) -> Result<PartitionGradient> {
        self.check_point(point)?;
        let (m, q, n) = (self.m, self.n_out, self.n_rows());
        let f = self.values(point.0, point.1);
        let targets = self.targets.view();
        let weight = |i: usize| self.w.as_ref().map_or(1.0, |w| w[i]);
        let parts: Vec<Vec<f64>> = parallel::install(|| {
            (0..n.div_ceil(MAX_SEGMENT_ROWS))
                .into_par_iter()
                .map(|chunk| {
                    // Per output: the gradient (m + 1), the loss, the squared weight.
                    let mut acc = vec![0.0; q * (m + 3)];
                    for i in chunk * MAX_SEGMENT_ROWS..((chunk + 1) * MAX_SEGMENT_ROWS).min(n) {
                        let (w, row) = (weight(i), &self.k[i * m..(i + 1) * m]);
                        for k in 0..q {
                            let v = f[i * q + k];
                            let term = targets.term(k, i, v);
                            let out = &mut acc[k * (m + 3)..(k + 1) * (m + 3)];
                            let hs = w * term.half_slope(v);
                            if hs != 0.0 {
                                simd::axpy(hs, row, &mut out[..m]);
                                out[m] += hs;
                            }
                            out[m + 1] += w * term.loss(v);
                            out[m + 2] += w * term.curvature();
                        }
                    }
                    acc
                })
                .collect()
        });
        let mut total = vec![0.0; q * (m + 3)];
        for part in &parts {
            total.iter_mut().zip(part).for_each(|(t, p)| *t += p);
        }
        self.squared_at(point, Some(&f));
        let mut out = PartitionGradient {
            loss: Vec::with_capacity(q),
            gradient: Vec::with_capacity(q * (m + 1)),
            weight: Vec::with_capacity(q),
        };
        for k in 0..q {
            let t = &total[k * (m + 3)..(k + 1) * (m + 3)];
            out.gradient.extend_from_slice(&t[..=m]);
            out.loss.push(t[m + 1]);
            out.weight.push(t[m + 2]);
        }
        Ok(out)
    }

    /// The partition's part of the Hessian's products at a point: per output k, sum over
    /// the rows whose term is a square there of w (k . v_k + v_k,b) k, then the sum of those
    /// w (k . v_k + v_k,b) (times 2C, the loss term's part of H v). `v`: n_out x (m + 1), the
    /// coefficients' part then the intercept's; the result likewise. One pass over the
    /// squared rows' kernel values (their list memoised per point); sums in fixed chunks,
    /// added in order.
    pub fn hessian_product(&self, point: (&[f64], &[f64]), v: &[f64]) -> Result<Vec<f64>> {
        self.check_point(point)?;
        let (m, q) = (self.m, self.n_out);
        if v.len() != q * (m + 1) || !v.iter().all(|x| x.is_finite()) {
            return Err(SvmError::invalid_input(format!(
                "a Hessian product needs {q} x {} finite values",
                m + 1
            )));
        }
        let squared = self.squared_at(point, None);
        let mut out = vec![0.0; q * (m + 1)];
        for (k, rows) in squared.iter().enumerate() {
            let (vk, vb) = (&v[k * (m + 1)..k * (m + 1) + m], v[k * (m + 1) + m]);
            if vb == 0.0 && vk.iter().all(|&x| x == 0.0) {
                // An output whose conjugate gradients ended: its product is 0.
                continue;
            }
            let parts: Vec<Vec<f64>> = parallel::install(|| {
                rows.par_chunks(PRODUCT_CHUNK)
                    .map(|chunk| {
                        let mut acc = vec![0.0; m + 1];
                        for &(i, w) in chunk {
                            let row = &self.k[i as usize * m..(i as usize + 1) * m];
                            let t = w * (simd::dot(row, vk) + vb);
                            simd::axpy(t, row, &mut acc[..m]);
                            acc[m] += t;
                        }
                        acc
                    })
                    .collect()
            });
            let o = &mut out[k * (m + 1)..(k + 1) * (m + 1)];
            for part in &parts {
                o.iter_mut().zip(part).for_each(|(t, p)| *t += p);
            }
        }
        Ok(out)
    }

    /// The exact line search's part of this partition along a direction from the counted
    /// point, per output (`LineChanges`): phi'(0)'s sums, the rows changing piece within the
    /// full step, and the piece changes beyond `from[k]` (infinity: none wanted), at most
    /// about `most` of them, the smallest first. The driver adds the partitions' sums and
    /// walks their changes up to the smallest `complete_to` (`SlopeWalk`), asking again from
    /// there while the root lies beyond. One pass over the kernel values.
    pub fn line_changes(
        &self,
        counted: (&[f64], &[f64]),
        direction: (&[f64], &[f64]),
        c: f64,
        from: &[f64],
        most: usize,
    ) -> Result<LineChanges> {
        let (m, q) = (self.m, self.n_out);
        let check = |(c, b): (&[f64], &[f64])| c.len() == m * q && b.len() == q;
        if !check(counted)
            || !check(direction)
            || from.len() != q
            || from.iter().any(|t| t.is_nan())
        {
            return Err(SvmError::invalid_input(format!(
                "the line search needs {m} x {q} coefficients, {q} intercepts and {q} steps"
            )));
        }
        if !(c.is_finite() && c > 0.0) || most == 0 {
            return Err(SvmError::invalid_input(
                "the line search needs C > 0 and at least one change a round",
            ));
        }
        let n = self.n_rows();
        let mut coef = vec![0.0; m * 2 * q];
        for j in 0..m {
            coef[j * 2 * q..j * 2 * q + q].copy_from_slice(&counted.0[j * q..(j + 1) * q]);
            coef[j * 2 * q + q..(j + 1) * 2 * q].copy_from_slice(&direction.0[j * q..(j + 1) * q]);
        }
        let intercept: Vec<f64> = counted.1.iter().chain(direction.1).copied().collect();
        let both = self.values_of(&coef, &intercept, 2 * q);
        let mut out = LineChanges {
            a: vec![0.0; q],
            b: vec![0.0; q],
            flips: vec![0; q],
            changes: vec![Vec::new(); q],
            complete_to: vec![f64::INFINITY; q],
        };
        let targets = self.targets.view();
        for i in 0..n {
            let w2c = 2.0 * c * self.w.as_ref().map_or(1.0, |w| w[i]);
            for k in 0..q {
                let (f, delta) = (both[i * 2 * q + k], both[i * 2 * q + q + k]);
                let term = |v: f64| targets.term(k, i, v);
                let at_zero = term(f);
                let (pa, pb) = slope_part(f, delta, at_zero);
                out.a[k] += w2c * pa;
                out.b[k] += w2c * pb;
                if at_zero != term(f + delta) {
                    out.flips[k] += 1;
                }
                if from[k] < f64::INFINITY {
                    let bounds = targets.boundaries(k, i);
                    let span = (from[k], f64::INFINITY);
                    row_changes(i, (f, delta), &term, bounds, w2c, span, &mut out.changes[k]);
                }
            }
        }
        for (changes, complete_to) in out.changes.iter_mut().zip(&mut out.complete_to) {
            if changes.len() > most {
                changes.select_nth_unstable_by(most - 1, walk_order);
                let last = changes[most - 1].t;
                changes.retain(|change| change.t <= last);
                *complete_to = last;
            }
            changes.sort_unstable_by(walk_order);
        }
        Ok(out)
    }

    /// The sums of one iteration between the counted point (whose active set the driver's M
    /// holds; None: no row is counted yet) and the trial point. Points are (coef, intercept):
    /// coef m x n_out vector-major, intercept n_out. Without `changes` (the Hessian-free
    /// direction, which keeps no M) `change` and `factors` stay empty: the losses, slope and
    /// flips only.
    pub fn sums(
        &self,
        counted: Option<(&[f64], &[f64])>,
        trial: (&[f64], &[f64]),
        changes: bool,
    ) -> Result<PartitionSums> {
        let (m, q) = (self.m, self.n_out);
        let check = |(c, b): (&[f64], &[f64])| c.len() == m * q && b.len() == q;
        if !check(trial) || counted.is_some_and(|p| !check(p)) {
            return Err(SvmError::invalid_input(format!(
                "a point of the polish needs {m} x {q} coefficients and {q} intercepts"
            )));
        }
        let n = self.n_rows();
        // Both points' values in one pass over the kernel values (the pass is memory-bound).
        let (f_trial, f_counted) = match counted {
            None => (self.values(trial.0, trial.1), None),
            Some((cc, cb)) => {
                let mut coef = vec![0.0; m * 2 * q];
                for j in 0..m {
                    coef[j * 2 * q..j * 2 * q + q].copy_from_slice(&trial.0[j * q..(j + 1) * q]);
                    coef[j * 2 * q + q..(j + 1) * 2 * q].copy_from_slice(&cc[j * q..(j + 1) * q]);
                }
                let intercept: Vec<f64> = trial.1.iter().chain(cb).copied().collect();
                let both = self.values_of(&coef, &intercept, 2 * q);
                let (mut ft, mut fc) = (Vec::with_capacity(n * q), Vec::with_capacity(n * q));
                for row in both.chunks(2 * q) {
                    ft.extend_from_slice(&row[..q]);
                    fc.extend_from_slice(&row[q..]);
                }
                (ft, Some(fc))
            }
        };
        let weight = |i: usize| self.w.as_ref().map_or(1.0, |w| w[i]);
        let mut out = PartitionSums {
            loss_counted: vec![0.0; q],
            loss_trial: vec![0.0; q],
            slope: vec![0.0; q],
            flips: vec![0; q],
            change: if changes {
                (0..q).map(|_| ActiveSums::new(m)).collect()
            } else {
                Vec::new()
            },
            factors: if changes { vec![None; q] } else { Vec::new() },
        };
        let targets = self.targets.view();
        for k in 0..q {
            let mut staging = Staging::default();
            // The terms that change: (row, signed weight, target), the counted point's term
            // leaving (-w), the trial point's entering (+w); a row that moves across the tube
            // (regression) does both.
            let mut changed: Vec<(usize, f64, Term)> = Vec::new();
            for i in 0..n {
                let w = weight(i);
                let ft = f_trial[i * q + k];
                let term_t = targets.term(k, i, ft);
                out.loss_trial[k] += w * term_t.loss(ft);
                let term_c = match &f_counted {
                    Some(fc) => {
                        let f = fc[i * q + k];
                        let term = targets.term(k, i, f);
                        out.loss_counted[k] += w * term.loss(f);
                        out.slope[k] -= w * (ft - f) * term.half_slope(f);
                        term
                    }
                    None => Term::Zero,
                };
                if term_t != term_c {
                    out.flips[k] += 1;
                    if !changes {
                        continue;
                    }
                    if term_c != Term::Zero {
                        changed.push((i, -w, term_c));
                    }
                    if term_t != Term::Zero {
                        changed.push((i, w, term_t));
                    }
                }
            }
            if !changes {
                continue;
            }
            let mut factor = GramFactor::default();
            let squares = changed.iter().filter(|c| c.2.curvature() > 0.0).count();
            let as_factor = 2 * squares < m + 1;
            let change = &mut out.change[k];
            for &(i, g, term) in &changed {
                let row = &self.k[i * m..(i + 1) * m];
                if as_factor {
                    change.add_linear(g, term, row);
                    if term.curvature() > 0.0 {
                        factor.weights.push(g);
                        factor.rows.extend_from_slice(row);
                    }
                } else {
                    change.add_term(g, term, row, &mut staging);
                }
            }
            if as_factor {
                change.gram = Vec::new();
                out.factors[k] = Some(factor);
            } else {
                staging.flush(&mut change.gram, m);
            }
        }
        Ok(out)
    }
}
