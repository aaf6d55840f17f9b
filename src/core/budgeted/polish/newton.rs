//! The Newton system: the active-set sums (M, s, u, sw, swy) updated by the rows that change
//! piece, the Gram updates in fixed batches, the ridge, and the direction from the factorised
//! system.

use rayon::prelude::*;

use crate::core::budgeted::conjugate_gradient::{self, backward, cholesky, forward};
use crate::core::budgeted::problem::Term;
use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::simd;

/// Rows per Gram update (fixed, so the sums do not depend on the threads).
const GRAM_BATCH: usize = 256;

/// The ridge added to the Newton system, relative to K_SS's largest diagonal entry: directions
/// of K_SS below it change no prediction measurably.
pub const RIDGE: f64 = 1e-10;
/// Squared terms' total weight below which none is counted (what the updates' rounding leaves).
pub const NO_CURVATURE: f64 = 1e-9;

/// The ridge of K_SS's factor and of the Hessian's products: `RIDGE` times K_SS's largest
/// diagonal entry (at least 1).
pub fn preconditioner_ridge(kss: &[f64], m: usize) -> f64 {
    RIDGE * (0..m).map(|i| kss[i * m + i]).fold(1.0f64, f64::max)
}

/// Rows' kernel values (c x m, row-major) and signed weights whose sum w k k^T is a change of M.
#[derive(Debug, Clone, Default)]
pub struct GramFactor {
    pub weights: Vec<f64>,
    pub rows: Vec<f64>,
}

/// gram (upper triangle, m x m) += sum_r weights[r] rows[r] rows[r]^T, in batches of
/// `GRAM_BATCH` rows in order (the serial solve's own Gram update).
pub fn add_gram_factor(gram: &mut [f64], m: usize, factor: &GramFactor) -> Result<()> {
    let c = factor.weights.len();
    if gram.len() != m * m || factor.rows.len() != c * m {
        return Err(SvmError::invalid_input(
            "a Gram factor must be c x m rows with c weights for an m x m matrix",
        ));
    }
    let mut staging = Staging::default();
    for (r, &w) in factor.weights.iter().enumerate() {
        staging.push(w, &factor.rows[r * m..(r + 1) * m]);
        if staging.weights.len() == GRAM_BATCH {
            staging.flush(gram, m);
        }
    }
    staging.flush(gram, m);
    Ok(())
}

/// M = sum w k k^T (upper triangle, full storage m x m), s = sum w k and sw = sum w over a set
/// of squared terms, u = sum w rhs k and swy = sum w rhs over every term (`Term::rhs`): what
/// the Newton system needs of the rows' pieces. The
/// serial solve keeps one per output; a distributed one adds the partitions' changes.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveSums {
    pub gram: Vec<f64>,
    pub s: Vec<f64>,
    pub u: Vec<f64>,
    pub sw: f64,
    pub swy: f64,
}

impl ActiveSums {
    pub fn new(m: usize) -> Self {
        ActiveSums {
            gram: vec![0.0; m * m],
            s: vec![0.0; m],
            u: vec![0.0; m],
            sw: 0.0,
            swy: 0.0,
        }
    }

    /// Adds row `row`'s `term` with signed weight g (negative: the term leaves); its part of M
    /// waits in `staging`, which is flushed every `GRAM_BATCH` rows (and must be at the end).
    pub(super) fn add_term(&mut self, g: f64, term: Term, row: &[f64], staging: &mut Staging) {
        self.add_linear(g, term, row);
        if term.curvature() > 0.0 {
            staging.push(g, row);
            if staging.weights.len() == GRAM_BATCH {
                staging.flush(&mut self.gram, self.s.len());
            }
        }
    }

    /// `add_term` but for M: s and sw count the squares, u and swy every term's right-hand side.
    pub(super) fn add_linear(&mut self, g: f64, term: Term, row: &[f64]) {
        if term.curvature() > 0.0 {
            simd::axpy(g, row, &mut self.s);
            self.sw += g;
        }
        let r = term.rhs();
        if r != 0.0 {
            simd::axpy(g * r, row, &mut self.u);
            self.swy += g * r;
        }
    }

    /// self += a partition's change (its M part dense, or as a factor).
    pub fn add_change(&mut self, change: &ActiveSums, factor: Option<&GramFactor>) -> Result<()> {
        if let Some(f) = factor {
            let m = self.s.len();
            add_gram_factor(&mut self.gram, m, f)?;
        }
        self.add(change);
        Ok(())
    }

    /// self += other (the partitions' parts, added in partition order); an empty `other.gram`
    /// adds nothing to M.
    pub fn add(&mut self, other: &ActiveSums) {
        for (a, b) in self.gram.iter_mut().zip(&other.gram) {
            *a += b;
        }
        for (a, b) in self.s.iter_mut().zip(&other.s) {
            *a += b;
        }
        for (a, b) in self.u.iter_mut().zip(&other.u) {
            *a += b;
        }
        self.sw += other.sw;
        self.swy += other.swy;
    }

    /// The minimiser (beta, b) of the quadratic model whose active set these sums describe:
    /// [K_SS + 2C M, 2C s; 2C s^T, 2C sw] (beta, b) = (2C u, 2C swy), m + 1 values.
    /// `intercept` is the current one, kept when no term is squared (the model is then linear
    /// in b: no minimiser).
    pub fn newton_point(
        &self,
        kss: &[f64],
        c: f64,
        intercept: f64,
        check: conjugate_gradient::Check<'_>,
    ) -> Result<Vec<f64>> {
        newton_point(kss, self, c, self.s.len(), intercept, 1.0, check)
    }
}

/// Rows waiting to be added to a Gram matrix.
#[derive(Default)]
pub(super) struct Staging {
    pub(super) weights: Vec<f64>,
    rows: Vec<f64>,
}

impl Staging {
    pub(super) fn push(&mut self, w: f64, row: &[f64]) {
        self.weights.push(w);
        self.rows.extend_from_slice(row);
    }

    /// gram (upper triangle) += sum_r w_r row_r row_r^T, tiles of 8 rows of gram in parallel,
    /// each tile through `simd::dots_8_rows` (the rows play the columns of a product).
    pub(super) fn flush(&mut self, gram: &mut [f64], m: usize) {
        let c = self.weights.len();
        if c == 0 {
            return;
        }
        let g8 = simd::BLOCK_ROWS;
        let rows = &self.rows;
        let weights = &self.weights;
        let cols: Vec<usize> = (0..c).collect();
        parallel::install(|| {
            gram.par_chunks_mut(g8 * m).enumerate().for_each_init(
                || (vec![0.0; g8 * c], vec![0.0; g8 * m]),
                |(q, dots), (tile, out)| {
                    let j0 = tile * g8;
                    let height = out.len() / m;
                    let lanes = m - j0;
                    q.fill(0.0);
                    for p in 0..height {
                        for r in 0..c {
                            q[p * c + r] = weights[r] * rows[r * m + j0 + p];
                        }
                    }
                    simd::dots_8_rows(q, c, &cols, &rows[j0..], m, lanes, dots);
                    for p in 0..height {
                        let target = &mut out[p * m + j0..(p + 1) * m];
                        for (t, d) in target.iter_mut().zip(&dots[p * lanes..(p + 1) * lanes]) {
                            *t += d;
                        }
                    }
                },
            );
        });
        self.weights.clear();
        self.rows.clear();
    }
}

pub(super) fn newton_point(
    kss: &[f64],
    o: &ActiveSums,
    c: f64,
    m: usize,
    intercept: f64,
    ridge_scale: f64,
    check: conjugate_gradient::Check<'_>,
) -> Result<Vec<f64>> {
    if kss.len() != m * m || o.gram.len() != m * m || o.u.len() != m {
        return Err(SvmError::invalid_input(
            "the Newton system's arrays do not fit the support vectors",
        ));
    }
    let p = m + 1;
    let two_c = 2.0 * c;
    // Lower triangle of the system, row-major p x p.
    let mut a = vec![0.0; p * p];
    for i in 0..m {
        for j in 0..=i {
            // M is kept in its upper triangle: M[j][i] for j <= i.
            a[i * p + j] = kss[i * m + j] + two_c * o.gram[j * m + i];
        }
    }
    for j in 0..m {
        a[m * p + j] = two_c * o.s[j];
    }
    a[m * p + m] = two_c * o.sw;
    let mut rhs: Vec<f64> = o.u.iter().map(|v| two_c * v).collect();
    rhs.push(two_c * o.swy);
    // No squared term (sw is their weight, up to the rounding of its updates): only tangents,
    // the model is linear in b and its "minimiser" at infinity; b stays (equation b = intercept)
    // and the line search moves it along the next directions.
    if o.sw.abs() <= NO_CURVATURE {
        for j in 0..m {
            a[m * p + j] = 0.0;
        }
        a[m * p + m] = 1.0;
        rhs[m] = intercept;
    }
    // Relative to K_SS (whose null space is where the system is singular), not to the loss
    // term: the intercept and a near-constant function of span(S) are nearly the same
    // direction, which a ridge at the loss term's scale would bias.
    let kss_diag = (0..m).map(|i| kss[i * m + i]).fold(0.0f64, f64::max);
    let mut ridge = RIDGE * ridge_scale * kss_diag.max(1.0);
    let mut l = vec![0.0; p * p];
    for _ in 0..40 {
        if cholesky(&a, ridge, p, &mut l, check)? {
            let mut x = cholesky_solve(&l, p, &rhs);
            // Two steps of iterative refinement: the system is ill-conditioned where the
            // intercept and near-constant functions of span(S) meet.
            for _ in 0..2 {
                let residual: Vec<f64> = (0..p)
                    .map(|i| {
                        let row: f64 = (0..p)
                            .map(|j| {
                                let v = if j <= i { a[i * p + j] } else { a[j * p + i] };
                                v * x[j]
                            })
                            .sum();
                        rhs[i] - row - ridge * x[i]
                    })
                    .collect();
                let fix = cholesky_solve(&l, p, &residual);
                x.iter_mut().zip(&fix).for_each(|(v, d)| *v += d);
            }
            return Ok(x);
        }
        ridge *= 10.0;
    }
    Err(SvmError::invalid_input(
        "the polish's Newton system could not be factorised: its entries are not finite (C too \
         large for these rows, or non-finite kernel values)",
    ))
}

/// Solves L L^T x = b.
fn cholesky_solve(l: &[f64], p: usize, b: &[f64]) -> Vec<f64> {
    let mut z = b.to_vec();
    forward(l, p, &mut z);
    backward(l, p, &mut z);
    z
}
