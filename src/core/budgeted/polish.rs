//! The polish: the exact solve of a budgeted model's coefficients over its basis S (design
//! notes: `docs/polish_notes.md`). The budgeted pass chooses S well and its coefficients
//! poorly; the polish keeps S and solves, for each output,
//!
//!   min_{beta, b}  1/2 beta^T K_SS beta + C sum_i w_i loss_i(k_i . beta + b)
//!
//! over every training row, k_i = (k(x_i, s_1), ..., k(x_i, s_m)): the SVM with an
//! unregularised intercept restricted to span(S) (Keerthi, Chapelle & DeCoste 2006). Two
//! classes give one output (y = +1 for class 1), more give one per class, one-vs-rest. The
//! loss (`Targets::term`) is piecewise quadratic: for classes the hinge, squared near the
//! margin and linear beyond `HINGE_BEND` (a Huber-smoothed hinge: the squared hinge everywhere
//! lost 0.7 points to it on noisy data), for values the squared epsilon-insensitive loss.
//!
//! Method: primal Newton with an exact line search (Keerthi & DeCoste 2005). With every row's
//! piece fixed (Q: the squared terms (f - r)^2, L: the tangents, constant slope 2 (e - r)) the
//! objective is quadratic, and its minimiser solves
//!
//!   [K_SS + 2C M    2C s ] [beta]   [2C u  ]
//!   [2C s^T         2C sw] [b   ] = [2C swy]
//!
//! with M = sum_Q w k k^T, s = sum_Q w k, sw = sum_Q w, u = sum_Q w r k + sum_L w (r - e) k,
//! swy = sum_Q w r + sum_L w (r - e). The direction to that minimiser is searched exactly along
//! the piecewise-quadratic objective; the pieces then change, and M, s, u are updated by the
//! rows that changed (after the first steps few do; a tangent costs m, a square m^2), so an
//! iteration costs one product K d over all rows plus m^2 per changed square and one
//! Cholesky factorisation of (m + 1)^2. It stops when a full step leaves the active set as it
//! was (the exact minimiser), when the objective falls by less than `tol` relative (or a full
//! step's decrease, squared over the step before's, says the next one would), or after
//! `max_iter` iterations. Every iteration is a sum over rows, which is what a distributed solve
//! needs (each worker returns its part of M, s, u and of K d).
//!
//! From `HESSIAN_FREE_BASIS` support vectors on the system is never formed: the direction
//! comes from conjugate gradients on products with the squared rows' kernel values
//! (`conjugate_gradient`, preconditioned from K_SS), and one pass over the rows per iteration
//! evaluates the full step's point: its values for the line search and, at once, the next
//! direction's gradient and squared rows, used as they are when the full step is taken
//! (`FULL_STEP_SHARE`) and, after a shorter step, with the rows that changed piece along it
//! computed again (`step_pass`).
//!
//! K_SS may be singular (merged or near-duplicate vectors): the system gets a ridge of
//! `RIDGE` times K_SS's largest diagonal entry (1 for the Gaussian kernel), ten times more per
//! failed factorisation. A
//! direction v with K_SS v = 0 changes no function value (sum_j v_j phi(s_j) = 0), so the ridge
//! only picks the smallest of equivalent solutions.
//!
//! Kernel rows: K(X, S) in segments of `segment_rows` rows from `kernel_block`, kept in memory
//! up to `cache_bytes` (the first segments) and recomputed in every pass beyond it, so memory
//! is O(cache + B^2 + n) whatever n is. Segments are processed in parallel; every sum over rows
//! is taken in row order (the Gram updates in fixed batches of `GRAM_BATCH` rows, each
//! parallel over tiles of M, the line-search sums in fixed chunks), so the result does not
//! depend on the number of threads.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rayon::prelude::*;

use crate::core::budget::model::BudgetModel;
/// The polish's preconditioner, also the distributed polish's (on the driver).
pub use crate::core::budgeted::conjugate_gradient::Preconditioner;
use crate::core::budgeted::conjugate_gradient::{self, backward, cholesky, forward};
use crate::core::budgeted::problem::{Targets, Term};
use crate::core::common::checks::{check_positive_finite, check_weights};
use crate::core::common::error::{Result, SvmError};
use crate::core::common::memory::{available_bytes, check_fits};
use crate::core::common::parallel;
use crate::core::common::progress::{Monitor, Progress};
use crate::core::common::rng::mix;
use crate::core::data::libsvm::LibsvmChunks;
use crate::core::data::rows::{AnyRows, CsrView, DenseView, Rows, SubsetRows};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block::{sv_rows, BlockScratch, KernelBlocks};
use crate::core::simd::{self, F16};

/// Rows of a segment of K(X, S), the unit of caching and of parallel work, at most.
const MAX_SEGMENT_ROWS: usize = 1024;
/// A segment's kernel values, at most (`segment_rows`).
const SEGMENT_BYTES: usize = 768 << 10;
/// Rows per Gram update (fixed, so the sums do not depend on the threads).
const GRAM_BATCH: usize = 256;
/// Rows per chunk of the line-search sums.
const SUM_CHUNK: usize = 8192;
/// The ridge added to the Newton system, relative to K_SS's largest diagonal entry: directions
/// of K_SS below it change no prediction measurably.
pub const RIDGE: f64 = 1e-10;
/// The ridge over `RIDGE` once a Newton direction did not descend: cod-rna at B = 500 from a
/// rescaled start stalled at 156,654 (the optimum 155,764) with `RIDGE` alone, and ends at
/// 155,764.42 with 1e-8; 1e-6 would bias the solution (155,788-155,796).
const RIDGE_RAISED: f64 = 100.0;
/// A line-search step below this share of the Newton step cannot end the solve (`polish_on`).
const SHORT_STEP: f64 = 0.5;
/// Squared terms' total weight below which none is counted (what the updates' rounding leaves).
pub const NO_CURVATURE: f64 = 1e-9;

/// The polish's settings.
#[derive(Debug, Clone)]
pub struct PolishParams {
    /// C of the objective (lambda = 1 / (n C)).
    pub c: f64,
    /// Stop when an iteration lowers the objective by less than this, relative, or a full
    /// step's decrease predicts that the next one would.
    pub tol: f64,
    /// Newton iterations at most (per output).
    pub max_iter: usize,
    /// Bytes of K(X, S) kept between passes.
    pub cache_bytes: usize,
    /// How the Newton direction is found.
    pub method: PolishMethod,
    /// `PolishMethod::Auto` goes Hessian-free from this many support vectors on
    /// (`HESSIAN_FREE_BASIS`).
    pub hessian_free_basis: usize,
    /// A solve on many rows starts from the solve on a subsample of them (`SAMPLE_STEP`).
    pub sample_start: bool,
}

/// How the polish finds its Newton direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolishMethod {
    /// Hessian-free from `PolishParams::hessian_free_basis` support vectors on (forming the
    /// Newton system when that stalls: `FORM_AFTER_ITERATIONS`), the Newton system below.
    #[default]
    Auto,
    /// The (m + 1)^2 Newton system, updated by the rows whose piece changed, factorised.
    Newton,
    /// Conjugate gradients on products with the squared rows' kernel values
    /// (`conjugate_gradient`), never forming the system.
    HessianFree,
}

/// A Hessian-free iteration takes the full Newton step (whose point the pass after the
/// direction evaluated, gathering the next direction's rows at once) when it lowers the
/// objective by at least this share of what the exact line search's step does; otherwise it
/// takes that step and gathers the rows at it in a pass of their own.
const FULL_STEP_SHARE: f64 = 0.99;
/// A Hessian-free step that lowers the objective by more than this share of the step before it
/// means the half-precision rows' Hessian is what limits the iteration (Newton's steps shrink
/// far faster near the optimum: 0.02-0.2 on the generator, 0.6-0.99 with halves on a small
/// ill-conditioned problem): the rows are kept in f32 from then on. Partial steps count too:
/// with halves a9a's directions (B = 3,000) were mostly cut short by the line search and never
/// switched (50 iterations without converging; in f32 from the start, 10).
const STALL_SHARE: f64 = 0.5;
/// The preconditioner's scale is refactored (a Cholesky of m x m, 0.4 s at m = 3,000) when the
/// squared rows' weight moves by more than this factor either way. The generator's 200,000 rows
/// (B = 3,000) moved it 3.7x (6.7 -> 25.2) within the 40,000-row start: at 2 that was a second
/// factorisation, at 4 the same 80 products on all rows.
pub const RESCALE_FACTOR: f64 = 4.0;
/// Support vectors from which `PolishMethod::Auto` goes Hessian-free by default. At B = 1,000
/// the Newton system took 5.6 s on 200,000 hard10d rows and 58 s on a million, the Hessian-free
/// solve 2.9 s and 11 s; on a9a, cod-rna and ijcnn1 (33,000-50,000 rows) the system is faster
/// (1.3-1.6 s against 1.4-1.9 s, where the Hessian-free solve stalls and forms it:
/// `FORM_AFTER_ITERATIONS`). At B = 500 the sets part further (ijcnn1 0.8 s against 2.0 s).
pub const HESSIAN_FREE_BASIS: usize = 1000;
/// `PolishMethod::Auto`'s Hessian-free solve forms the Newton system from the next iteration on
/// when it has taken this many iterations, or more Hessian products than m / 4 per output
/// (what forming the system costs: |Q| m^2 / 2 multiply-adds against 2 |Q| m a product). Its
/// preconditioner assumes K_Q^T K_Q ~ (|Q| / m) K_SS^2, which a smooth kernel over a basis
/// unlike the squared rows breaks: at B = 3,000 a9a's Hessian-free solve took 12,840 products
/// and 50 iterations without converging (185 s; the Newton system 8.1 s), cod-rna's 50
/// iterations of 9 products each (12.7 s, 0.2 points short; Newton 9.7 s), while the
/// generator's converge in 4-8 iterations of 10-20 products. (Most of a9a's stall was the
/// halves, which `STALL_SHARE` now catches; a9a, cod-rna and ijcnn1 still form the system at
/// iteration 13, in 8-9 s.)
const FORM_AFTER_ITERATIONS: usize = 12;
/// Conjugate-gradient products per Newton direction at most.
pub const MAX_CG_PRODUCTS: usize = 300;
/// A direction's relative residual: sqrt(|g| / |g_first|) (inexact Newton: loose early,
/// tighter as the gradient falls), at least `CG_TOL_FLOOR` (what the f32 rows' products can
/// tell) and at most `CG_TOL_EARLY` (`CG_TOL_NEAR` after a subsample's start).
pub const CG_TOL_FLOOR: f64 = 1e-6;
pub const CG_TOL_EARLY: f64 = 0.5;
/// Squared rows per chunk of a Hessian product (fixed: the sums do not depend on threads).
const PRODUCT_CHUNK: usize = 2048;
/// Kernel values per wave of a product that computes its rows again (`recomputed_product`),
/// at least: a fraction of a second, Ctrl-C between waves (a whole product is 1.2e9 values,
/// seconds, at a million rows and B = 10,000).
const RECOMPUTED_WAVE_VALUES: usize = 1 << 27;
/// A solve whose subsample of one row in `SAMPLE_STEP` (`in_sample`) still gives
/// `SAMPLE_ROWS_PER_SV` rows per support vector first solves on those rows (C scaled by the
/// rows' ratio, so the loss weighs as much against the regulariser) and starts from that
/// solution: the iterations that cross from the budgeted pass's coefficients to near the
/// optimum, most of them, then cost a fifth. The subsample's solve does the same in turn, and
/// stops at `SAMPLE_TOL`: a start, not the answer (200,000 hard10d rows, B = 3,000: the full
/// solve's first step still lowers the objective by 7%, and 1e-4 bought only one more
/// direction, 31 products, that ended the solve without a step). The subsample of a file is
/// copied only while it takes at most a quarter of `polish_cache_size` (its rows stay a chunk
/// at a time otherwise); of rows in memory, always. Hessian-free, 1,000,000 hard10d rows,
/// B = 2,000: 10 iterations on all rows became 3. The Newton system's solve starts so where
/// its rows are at least m^2: the million-row checkerboard of docs/polish.md (B = 200) 17
/// iterations on all rows -> 3, its polish 6.1 -> 1.9 s; where the factorisations weigh more
/// it does not pay (a9a, ijcnn1, w8a, cod-rna at B = 500: as many iterations or more, each as
/// dear).
const SAMPLE_STEP: usize = 5;
/// Rows per support vector from which a solve below `hessian_free_basis` probes the
/// Hessian-free path on its subsample (see `polish_on`). Where the squared rows are many and
/// the preconditioner good, products are far cheaper than forming the system: hardmc's class
/// pairs, 158,599 rows at B = 800, 4.9 s -> 1.1 s, 528,459 rows at B = 1,267 the whole
/// one-vs-one fit on 1,000,000 rows 79 -> 40 s. Where the subsample needs many products the
/// system stays, but the probe's subsample solve is then spent: a9a and ijcnn1 at B = 500 (65
/// and 100 rows per vector) 0.56 -> 0.74 s and 0.69 -> 1.04 s with a probe from 50 rows per
/// vector, so it starts at 200.
const PROBE_ROWS_PER_SV: usize = 200;
const SAMPLE_ROWS_PER_SV: usize = 10;
const SAMPLE_TOL: f64 = 1e-3;
/// The most a solve started from a subsample's solution lets its directions' residual be,
/// relative: near the optimum an iteration (one or two passes over the rows) costs tens of
/// Hessian products, and loose directions cost iterations (1,000,000 hard10d rows, B = 2,000,
/// two passes an iteration: 3 iterations at 0.01, 5 at 0.5; from the budgeted pass's
/// coefficients 0.5 is best). Once an iteration was mostly one pass, 0.05 did best on 200,000
/// hard10d rows at B = 3,000: 79 products in 4 iterations and 5 passes, against 112 at 0.01,
/// 48 at 0.1 (but 6 passes) and 84 at 0.2 (5 iterations), the polish about 1.3 s faster).
const CG_TOL_NEAR: f64 = 0.05;
/// The Hessian-free solve starts from the start's best multiple (`scale_start`) when that
/// lowers the objective by at least this share, and then gathers the rows again at it: one
/// more pass, which the iterations it saves repay. 200,000 hard10d rows, B = 3,000: the
/// subsample's start (BSGD's coefficients) 186,611 -> 91,838, its solve 7 -> 5 iterations
/// (that solve 3.0-3.7 -> 2.3-2.4 s, alternated with the build before); a million rows: fit
/// 45 -> 39-41 s; ijcnn1 B = 1,000 18 -> 12 iterations, B = 3,000 19 -> 11. The subsample's
/// solution, the start on all rows, gains 0.14% (kept).
const SCALED_START_GAIN: f64 = 0.01;

impl PolishParams {
    pub fn check(&self) -> Result<()> {
        check_positive_finite("C", self.c)?;
        if !(self.tol.is_finite() && self.tol >= 0.0) {
            return Err(SvmError::invalid_parameter(
                "polish_tol",
                format!("must be a finite number >= 0, got {}", self.tol),
            ));
        }
        if self.max_iter == 0 {
            return Err(SvmError::invalid_parameter(
                "polish_max_iter",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// What the polish found.
#[derive(Debug, Clone)]
pub struct PolishResult {
    /// m x n_out, vector-major (as `BudgetModel::coef`).
    pub coef: Vec<f64>,
    /// One per output.
    pub intercept: Vec<f64>,
    /// Objective per output at the start (the given coefficients, intercept 0) and at the end.
    pub objective_start: Vec<f64>,
    pub objective: Vec<f64>,
    /// Newton iterations (the most any output took).
    pub iterations: usize,
    /// Whether every output met its stopping rule before `max_iter`.
    pub converged: bool,
    /// Rows whose kernel values stayed in memory, and passes over the rows.
    pub cached_rows: usize,
    pub passes: usize,
    /// Rows that entered or left an active set, summed over iterations and outputs.
    pub active_changes: u64,
    /// Hessian products of the conjugate-gradient solves (0 for the Newton system).
    pub cg_products: usize,
    /// The iteration from which an `Auto` Hessian-free solve formed the Newton system instead
    /// (`FORM_AFTER_ITERATIONS`); 0: it did not.
    pub system_from: usize,
    /// The most squared rows one Hessian-free iteration gathered (0 for the Newton system),
    /// and the most of them whose kernel values every product computed again (their copies
    /// did not fit `cache_bytes`).
    pub squared_rows: usize,
    pub recomputed_rows: usize,
    /// Rows of the subsample the solve started from (0: none), and the seconds its solve took.
    pub sample_rows: usize,
    pub sample_seconds: f64,
    /// The most bytes of kernel values the Hessian-free solve kept at once, the cache's and
    /// the squared rows' copies (within `cache_bytes`, but for the copies a trial point's pass
    /// makes beyond the squared rows counted at the current point while all of them fit).
    pub kept_bytes: usize,
    /// Seconds computing kernel values (summed over threads), updating the Gram matrices (the
    /// Hessian-free solve: its passes over the rows), factorising the Newton systems (solving
    /// for the directions), and in all.
    pub kernel_seconds: f64,
    pub gram_seconds: f64,
    pub solve_seconds: f64,
    pub seconds: f64,
}

/// Training rows visited as consecutive blocks, the same blocks in the same order on every
/// pass (rows in memory, or a file read again in chunks).
pub trait RowSource {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// Calls `visit(first_row, rows)` for every block.
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()>;
    /// The rows are held in memory already (a copy of some of them adds at most their size).
    fn in_memory(&self) -> bool {
        false
    }
}

/// Rows in memory: one block.
pub struct InMemory<'a>(pub AnyRows<'a>);

impl RowSource for InMemory<'_> {
    fn n_rows(&self) -> usize {
        self.0.n_rows()
    }
    fn n_cols(&self) -> usize {
        self.0.n_cols()
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        visit(0, &self.0)
    }
    fn in_memory(&self) -> bool {
        true
    }
}

/// A LIBSVM file read again in chunks of `chunk_rows` lines on every pass (`fit_file`): memory
/// is one chunk, whatever the file's size. Its rows are `width` features wide. With `keep`
/// (`open_pair`: one-vs-one's pair of classes) the passes visit the kept rows only, each
/// chunk's kept rows copied (one chunk at most).
pub struct LibsvmFileRows {
    path: std::path::PathBuf,
    chunk_rows: usize,
    width: usize,
    /// Rows visited: the file's, or those kept.
    n_rows: usize,
    /// Rows of the file.
    file_rows: usize,
    /// Per row of the file, whether the passes visit it (None: all).
    keep: Option<Vec<bool>>,
}

impl LibsvmFileRows {
    /// The file's class index per row (labels looked up in the sorted `classes`, -0 as 0),
    /// read in one pass, and the source for the polish's passes.
    pub fn open(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        classes: &[f64],
    ) -> Result<(Self, Vec<u32>)> {
        Self::open_with(path, chunk_rows, width, |labels, y| {
            for &label in labels {
                let label = label + 0.0;
                let k = classes
                    .binary_search_by(|c| c.total_cmp(&label))
                    .map_err(|_| {
                        SvmError::invalid_input(format!(
                            "{} has the label {label}, which is not one of the model's classes",
                            path.display()
                        ))
                    })?;
                y.push(k as u32);
            }
            Ok(())
        })
    }

    /// The rows of two of the file's classes, `pair` = (a, b) (indices into the sorted
    /// `classes`, a != b; a binary polish of one-vs-one's pair): their targets, 0 for class a
    /// and 1 for b, in the file's order, read in one pass (every label must be one of
    /// `classes`), and the source whose passes visit those rows only.
    pub fn open_pair(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        classes: &[f64],
        pair: (u32, u32),
    ) -> Result<(Self, Vec<u32>)> {
        let (a, b) = pair;
        let n_classes = classes.len();
        if a == b || a as usize >= n_classes || b as usize >= n_classes {
            return Err(SvmError::invalid_input(format!(
                "pair ({a}, {b}) must be two distinct class indices below {n_classes}"
            )));
        }
        let (mut source, y) = Self::open(path, chunk_rows, width, classes)?;
        let keep: Vec<bool> = y.iter().map(|&k| k == a || k == b).collect();
        let targets: Vec<u32> = y
            .iter()
            .filter(|&&k| k == a || k == b)
            .map(|&k| u32::from(k == b))
            .collect();
        source.n_rows = targets.len();
        source.keep = Some(keep);
        Ok((source, targets))
    }

    /// The file's labels as real targets (regression; each must be finite), read in one pass,
    /// and the source for the polish's passes.
    pub fn open_values(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
    ) -> Result<(Self, Vec<f64>)> {
        Self::open_with(path, chunk_rows, width, |labels, y| {
            if let Some(bad) = labels.iter().find(|v| !v.is_finite()) {
                return Err(SvmError::invalid_input(format!(
                    "{} has the target {bad}; targets must be finite",
                    path.display()
                )));
            }
            y.extend_from_slice(labels);
            Ok(())
        })
    }

    /// One pass over the file that hands each chunk's labels to `targets` (which checks them
    /// and appends them to the targets as it reads them), and the source.
    fn open_with<T>(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        mut targets: impl FnMut(&[f64], &mut Vec<T>) -> Result<()>,
    ) -> Result<(Self, Vec<T>)> {
        let mut chunks = LibsvmChunks::open(path, chunk_rows)?;
        let mut y = Vec::new();
        while let Some(data) = chunks.next_chunk()? {
            if data.n_features > width {
                return Err(SvmError::invalid_input(format!(
                    "{} has features beyond index {width}",
                    path.display()
                )));
            }
            targets(&data.labels, &mut y)?;
        }
        let source = LibsvmFileRows {
            path: path.to_path_buf(),
            chunk_rows,
            width,
            n_rows: y.len(),
            file_rows: y.len(),
            keep: None,
        };
        Ok((source, y))
    }
}

impl RowSource for LibsvmFileRows {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.width
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        let mut chunks = LibsvmChunks::open(&self.path, self.chunk_rows)?;
        // Rows visited so far, and rows of the file read so far.
        let mut first = 0;
        let mut read = 0;
        // The kept rows of a chunk (with `keep`), reused.
        let (mut indptr, mut indices, mut values) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(data) = chunks.next_chunk()? {
            let n = data.n_rows();
            if data.n_features > self.width || read + n > self.file_rows {
                return Err(SvmError::invalid_input(format!(
                    "{} changed while it was being read",
                    self.path.display()
                )));
            }
            let kept = self.keep.as_ref().map(|keep| &keep[read..read + n]);
            read += n;
            match kept {
                Some(kept) if !kept.iter().all(|&k| k) => {
                    indptr.clear();
                    indices.clear();
                    values.clear();
                    indptr.push(0i64);
                    for (i, _) in kept.iter().enumerate().filter(|(_, &k)| k) {
                        let span = data.indptr[i] as usize..data.indptr[i + 1] as usize;
                        indices.extend_from_slice(&data.indices[span.clone()]);
                        values.extend_from_slice(&data.values[span]);
                        indptr.push(indices.len() as i64);
                    }
                    let rows = indptr.len() - 1;
                    if rows == 0 {
                        continue;
                    }
                    let view = CsrView::new(&indptr, &indices, &values, self.width)?;
                    visit(first, &AnyRows::Csr64(view))?;
                    first += rows;
                }
                _ => {
                    let view = CsrView::new(&data.indptr, &data.indices, &data.values, self.width)?;
                    visit(first, &AnyRows::Csr64(view))?;
                    first += n;
                }
            }
        }
        if read != self.file_rows || first != self.n_rows {
            return Err(SvmError::invalid_input(format!(
                "{} changed while it was being read",
                self.path.display()
            )));
        }
        Ok(())
    }
}

/// The ridge of K_SS's factor and of the Hessian's products: `RIDGE` times K_SS's largest
/// diagonal entry (at least 1).
pub fn preconditioner_ridge(kss: &[f64], m: usize) -> f64 {
    RIDGE * (0..m).map(|i| kss[i * m + i]).fold(1.0f64, f64::max)
}

/// One partition's rows in a distributed polish (`budgetsvm.dask.fit`): their kernel values
/// against S, computed once by the worker that holds the rows and kept there, and the sums an
/// iteration asks of them. `sums` is a pure function of its arguments and the rows, so a
/// retried task gives the same sums; the driver adds the partitions' sums in partition order
/// and solves the Newton system as the serial solver does.
pub struct PartitionRows {
    k: Vec<f64>,
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

/// A partition's line-search sums (`PartitionRows::line_sums`), step-major (steps x n_out).
#[derive(Debug, Clone)]
pub struct LineSums {
    pub loss: Vec<f64>,
    pub slope: Vec<f64>,
    pub flips: Vec<u64>,
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

    /// The line search's sums along a direction from the counted point, at every step t of
    /// `ts`: per t and output (t-major, ts.len() x n_out) sum w (r_t - f_t)^2 and
    /// sum w delta (r_t - f_t) over the active terms at f_t (times -2C, the loss term's slope
    /// at t) and the rows whose active term differs from the counted point's, with
    /// f_t = f + t delta and delta = K d + db. One pass over the kernel values for all the
    /// steps.
    pub fn line_sums(
        &self,
        counted: (&[f64], &[f64]),
        direction: (&[f64], &[f64]),
        ts: &[f64],
    ) -> Result<LineSums> {
        let (m, q) = (self.m, self.n_out);
        let check = |(c, b): (&[f64], &[f64])| c.len() == m * q && b.len() == q;
        if !check(counted) || !check(direction) || ts.iter().any(|t| !t.is_finite()) {
            return Err(SvmError::invalid_input(format!(
                "the line search needs {m} x {q} coefficients, {q} intercepts and finite steps"
            )));
        }
        let n = self.n_rows();
        let mut coef = vec![0.0; m * 2 * q];
        for j in 0..m {
            coef[j * 2 * q..j * 2 * q + q].copy_from_slice(&counted.0[j * q..(j + 1) * q]);
            coef[j * 2 * q + q..(j + 1) * 2 * q].copy_from_slice(&direction.0[j * q..(j + 1) * q]);
        }
        let intercept: Vec<f64> = counted.1.iter().chain(direction.1).copied().collect();
        let both = self.values_of(&coef, &intercept, 2 * q);
        let g = ts.len();
        let mut out = LineSums {
            loss: vec![0.0; g * q],
            slope: vec![0.0; g * q],
            flips: vec![0; g * q],
        };
        let targets = self.targets.view();
        for i in 0..n {
            let w = self.w.as_ref().map_or(1.0, |w| w[i]);
            for k in 0..q {
                let (f, delta) = (both[i * 2 * q + k], both[i * 2 * q + q + k]);
                let counted = targets.term(k, i, f);
                for (j, &t) in ts.iter().enumerate() {
                    let ft = f + t * delta;
                    let term = targets.term(k, i, ft);
                    out.loss[j * q + k] += w * term.loss(ft);
                    out.slope[j * q + k] -= w * delta * term.half_slope(ft);
                    if term != counted {
                        out.flips[j * q + k] += 1;
                    }
                }
            }
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

/// One output's Newton state.
struct Output {
    beta: Vec<f64>,
    b: f64,
    /// f_i = k_i . beta + b, and the change along the current direction.
    f: Vec<f64>,
    delta: Vec<f64>,
    /// The term each row is counted with in `sums`.
    counted: Vec<Term>,
    sums: ActiveSums,
    /// The direction.
    d: Vec<f64>,
    db: f64,
    objective: f64,
    done: bool,
    /// The last step was a full one.
    full_step: bool,
    /// How much the last step lowered the objective (0 before the first).
    decrease_before: f64,
    /// The Newton system's ridge over `RIDGE` (`RIDGE_RAISED` once a direction did not
    /// descend).
    ridge_scale: f64,
}

impl Output {
    /// The state at (beta, b) on n rows before the first pass: f, the direction and the
    /// counted terms zero, no step taken.
    fn at(beta: Vec<f64>, b: f64, n: usize) -> Self {
        let m = beta.len();
        Output {
            beta,
            b,
            f: vec![0.0; n],
            delta: vec![0.0; n],
            counted: vec![Term::Zero; n],
            sums: ActiveSums::new(m),
            d: vec![0.0; m],
            db: 0.0,
            objective: 0.0,
            done: false,
            full_step: false,
            decrease_before: 0.0,
            ridge_scale: 1.0,
        }
    }
}

/// Whether a step that lowered the objective by `decrease` (the step before by
/// `decrease_before`, 0 if none) ends the solve at the tolerance `enough` (absolute). After a
/// full Newton step the decreases contract at a steady rate (linear at the directions'
/// residual, quadratic once exact), so decrease^2 / decrease_before estimates the next one and
/// the iteration that would only confirm it is skipped (200,000 hard10d rows, B = 3,000: the
/// subsample's solve 8 -> 7 iterations, the last 31 Hessian products for nothing).
fn stops_after(decrease: f64, decrease_before: f64, full_step: bool, enough: f64) -> bool {
    decrease <= enough
        || (full_step
            && decrease < decrease_before
            && decrease * (decrease / decrease_before) <= enough)
}

/// Kernel rows of the segments: cached ones, and how to compute the others.
struct Segments {
    /// First row and length of each segment, in visit order.
    spans: Vec<Range<usize>>,
    /// Per segment: None (recomputed in every pass), or its values once the first pass
    /// filled them (empty until then).
    cache: Vec<Option<Cached>>,
    /// Bytes the cache may still reserve.
    cache_left: usize,
    /// `polish_cache_size`: what the cache and the squared rows' copies share.
    budget: usize,
    /// Every kernel value rounded to f32, cached or computed (the Hessian-free solve: twice the
    /// rows in the same cache, and the same values whatever the cache holds).
    single: bool,
    kernel_seconds: f64,
}

impl Segments {
    /// Fits the cache (f32 values) and the copies the next gather will make (`copy_bytes` a
    /// value, one per squared row, cached or not) into the budget, from `squared` (per segment, the rows the
    /// gather will find squared: known from f before any kernel value): over it, cached
    /// segments are released from the last; under it, the first segments not cached are
    /// reserved (filled by the gather itself).
    fn plan_budget(&mut self, squared: &[usize], m: usize, copy_bytes: usize) {
        let bytes = |s: &Range<usize>| s.len() * m * 4;
        let copied: usize = squared.iter().map(|&q| q * m * copy_bytes).sum();
        let mut held: usize = (self.cache.iter().zip(&self.spans))
            .filter(|(slot, _)| slot.is_some())
            .map(|(_, span)| bytes(span))
            .sum();
        for s in (0..self.spans.len()).rev() {
            if held + copied <= self.budget {
                break;
            }
            if self.cache[s].is_some() {
                self.cache[s] = None;
                held -= bytes(&self.spans[s]);
            }
        }
        let mut room = self.budget.saturating_sub(held + copied);
        for (slot, span) in self.cache.iter_mut().zip(&self.spans) {
            if slot.is_none() && m > 0 && bytes(span) <= room {
                room -= bytes(span);
                *slot = Some(Cached::F32(Vec::new()));
            }
        }
        self.cache_left = room;
    }

    /// Bytes the cache holds (f32 values), reserved segments counted.
    fn held_bytes(&self, m: usize) -> usize {
        self.cache
            .iter()
            .zip(&self.spans)
            .filter(|(c, _)| c.is_some())
            .map(|(_, s)| s.len() * m * 4)
            .sum()
    }
}

/// A cached segment's kernel values.
enum Cached {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

/// Polishes `model` (its support vectors, and its coefficients with `start_intercept` (0 when
/// None) as the warm start) on the rows of
/// `source` with labels `y` (class indices) and optional row weights. Returns the coefficients
/// and intercepts; the model is not changed.
#[allow(clippy::too_many_arguments)]
pub fn polish(
    model: &BudgetModel,
    start_intercept: Option<&[f64]>,
    source: &mut dyn RowSource,
    targets: Targets<'_>,
    weights: Option<&[f64]>,
    params: &PolishParams,
    monitor: Monitor<'_>,
) -> Result<PolishResult> {
    polish_on(
        model,
        start_intercept,
        source,
        targets,
        weights,
        params,
        monitor,
        &mut OfTheBasis::default(),
    )
}

/// What depends on the support vectors only, built once for a solve on a subsample and the
/// solve that starts from it: K_SS (lent to the subsample's solve, which gives it back: one
/// copy, 800 MB at m = 10,000) and the Hessian-free preconditioner's factors.
#[derive(Default)]
struct OfTheBasis {
    kss: Option<Vec<f64>>,
    preconditioner: Option<Preconditioner>,
}

/// `polish` with what depends on the basis only (`OfTheBasis`).
#[allow(clippy::too_many_arguments)]
fn polish_on(
    model: &BudgetModel,
    start_intercept: Option<&[f64]>,
    source: &mut dyn RowSource,
    targets: Targets<'_>,
    weights: Option<&[f64]>,
    params: &PolishParams,
    monitor: Monitor<'_>,
    basis: &mut OfTheBasis,
) -> Result<PolishResult> {
    let start = Instant::now();
    params.check()?;
    model.validate()?;
    let n = source.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    targets.check(n)?;
    check_weights(weights, n)?;
    let n_out = targets.n_out();
    if model.n_out != n_out {
        return Err(SvmError::invalid_input(format!(
            "the model has {} outputs, the targets need {n_out}",
            model.n_out
        )));
    }
    if source.n_cols() != model.dim {
        return Err(SvmError::invalid_input(format!(
            "X has {} features, but the model has {}",
            source.n_cols(),
            model.dim
        )));
    }
    if start_intercept.is_some_and(|b| b.len() != n_out || b.iter().any(|v| !v.is_finite())) {
        return Err(SvmError::invalid_input(
            "the starting intercept needs one finite value per output",
        ));
    }
    let m = model.n_sv();
    check_fits(
        polish_bytes(m, n, n_out, params.cache_bytes),
        available_bytes(),
        || {
            format!(
                "the polish of {m} support vectors ({n_out} output(s), K_SS, a Gram matrix per \
                 output and the Newton system, {m} x {m} each, and polish_cache_size)"
            )
        },
    )?;
    let blocks = KernelBlocks::from_sv_matrix(
        &model.support_vectors,
        m,
        model.dim,
        Kernel::rbf(model.gamma),
    )?;
    crate::core::data::rows::check_sq_norms(blocks.sq_norms(), "support vector")?;
    let c = params.c;
    let weight = |i: usize| weights.map_or(1.0, |w| w[i]);

    // K_SS, once.
    let mut kss = basis.kss.take().unwrap_or_else(|| {
        let mut kss = vec![0.0; m * m];
        if m > 0 {
            let s = sv_rows(&model.support_vectors, m, model.dim);
            let norms = blocks.sq_norms().to_vec();
            blocks.fill_rows(&s, 0..m, &norms, &mut kss, &mut BlockScratch::default());
        }
        kss
    });

    let mut outputs: Vec<Output> = (0..n_out)
        .map(|k| Output {
            done: m == 0,
            ..Output::at(
                (0..m).map(|j| model.coef[j * n_out + k]).collect(),
                start_intercept.map_or(0.0, |b| b[k]),
                n,
            )
        })
        .collect();

    let mut hessian_free = match params.method {
        PolishMethod::Auto => m >= params.hessian_free_basis,
        PolishMethod::Newton => false,
        PolishMethod::HessianFree => m > 0,
    };
    let mut segments = Segments {
        spans: Vec::new(),
        cache: Vec::new(),
        cache_left: params.cache_bytes,
        budget: params.cache_bytes,
        single: hessian_free,
        kernel_seconds: 0.0,
    };
    let (mut sample_rows, mut sample_seconds) = (0, 0.0);
    // The share of rows whose loss term is squared at the start (all when not known).
    let mut squared_share = 1.0;
    // The subsample's start pays where passes over the rows are the cost: in the Hessian-free
    // solve, and in the Newton system's where a pass (n m kernel values) outweighs the
    // factorisation (m^3 / 3) several times (`SAMPLE_STEP`).
    // Below `hessian_free_basis` the Newton system is the safe choice, but where the rows
    // outnumber the basis enough for a subsample's start, the subsample's solve is run
    // Hessian-free as a probe: if it needed no more products than forming the system costs
    // (and never formed it), the full solve goes Hessian-free too (`PROBE_ROWS_PER_SV`).
    let probe = params.method == PolishMethod::Auto && !hessian_free && n >= PROBE_ROWS_PER_SV * m;
    if (hessian_free || probe || n >= m * m)
        && m > 0
        && params.sample_start
        && n / SAMPLE_STEP >= SAMPLE_ROWS_PER_SV * m
    {
        let started = Instant::now();
        // Rows in memory are copied whatever the cache (a fifth of what the caller holds, and
        // the same solve for every `polish_cache_size`); a file's within a quarter of it.
        let most = if source.in_memory() {
            usize::MAX
        } else {
            params.cache_bytes / 4
        };
        // The subsample's solve recurses: it must be smaller (the hash may take fewer rows).
        let sample = RowSample::take(source, most)?
            .filter(|s| s.n_rows >= SAMPLE_ROWS_PER_SV * m && s.n_rows < n);
        if let Some(sample) = sample {
            sample_rows = sample.n_rows;
            let index: Vec<usize> = (0..n).filter(|&i| in_sample(i)).collect();
            let sample_weights: Option<Vec<f64>> =
                weights.map(|w| index.iter().map(|&i| w[i]).collect());
            let class_ids: Vec<u32>;
            let values: Vec<f64>;
            let sample_targets = match targets {
                Targets::Classes { y, n_classes } => {
                    class_ids = index.iter().map(|&i| y[i]).collect();
                    Targets::Classes {
                        y: &class_ids,
                        n_classes,
                    }
                }
                Targets::Values { y, epsilon } => {
                    values = index.iter().map(|&i| y[i]).collect();
                    Targets::Values {
                        y: &values,
                        epsilon,
                    }
                }
            };
            let sample_params = PolishParams {
                c: c * n as f64 / sample.n_rows as f64,
                tol: params.tol.max(SAMPLE_TOL),
                hessian_free_basis: if probe { 0 } else { params.hessian_free_basis },
                ..params.clone()
            };
            basis.kss = Some(kss);
            let start = polish_on(
                model,
                start_intercept,
                &mut InMemory(sample.rows()?),
                sample_targets,
                sample_weights.as_deref(),
                &sample_params,
                &mut *monitor,
                basis,
            )?;
            kss = basis
                .kss
                .take()
                .expect("the subsample's solve gives K_SS back");
            for (k, o) in outputs.iter_mut().enumerate() {
                for j in 0..m {
                    o.beta[j] = start.coef[j * n_out + k];
                }
                o.b = start.intercept[k];
            }
            squared_share = (start.squared_rows as f64 / sample.n_rows as f64).min(1.0);
            if probe && start.system_from == 0 && 4 * start.cg_products <= m * n_out {
                hessian_free = true;
                segments.single = true;
            }
        }
        sample_seconds = started.elapsed().as_secs_f64();
    }
    let mut passes = 0;
    let mut progress = Progress {
        epochs: params.max_iter,
        n_sv: m,
        polish: true,
        rows: n,
        ..Progress::default()
    };

    let objective_of = |k: usize, o: &Output| {
        let term = |i, f| targets.term(k, i, f);
        objective(&kss, &o.beta, &o.f, c, &term, &weight)
    };

    // f = K beta + b at the warm start; the first pass also lays out the segments. The
    // Hessian-free solve gathers its first direction's rows in the same pass, its cache
    // leaving room for the squared rows' copies (their share: the subsample's, all rows
    // when unknown).
    let (mut gram_seconds, mut solve_seconds) = (0.0, 0.0);
    let mut pending: Option<Gathered> = None;
    // The squared rows' copies in halves until the iteration stalls (`RowCopies`).
    let mut half_rows = true;
    let mut last_decrease = vec![f64::INFINITY; n_out];
    // The Hessian products read K_SS in f32, as they read the rows: half the bytes of every
    // product's pass over it.
    let kss_f32: Vec<f32> = if hessian_free {
        kss.iter().map(|&v| v as f32).collect()
    } else {
        Vec::new()
    };
    if hessian_free {
        let all: Vec<usize> = (0..n_out).collect();
        let points: Vec<(Vec<f64>, f64)> = outputs.iter().map(|o| (o.beta.clone(), o.b)).collect();
        segments.cache_left = first_pass_room(params.cache_bytes, n, m, squared_share);
        let rows = segment_rows(m, true);
        let reserve = (squared_share * rows as f64).ceil() as usize;
        let expected = reserve * n.div_ceil(rows);
        let first_limit = copy_share(expected, m, 2, params.cache_bytes).limit(reserve);
        let t_gram = Instant::now();
        let (gathered, values) = gather_pass(
            &blocks,
            source,
            &mut segments,
            &outputs,
            &all,
            Some(&points),
            true,
            &|_| reserve,
            &|_| first_limit,
            &|k, i, f| targets.term(k, i, f),
            &weight,
            &mut passes,
            monitor,
            &progress,
        )?;
        gram_seconds += t_gram.elapsed().as_secs_f64();
        // The start's best multiple where it gains enough to pay for gathering the rows
        // again at it (a pass).
        let mut rescaled = false;
        for ((k, o), f) in outputs.iter_mut().enumerate().zip(values) {
            o.f = f;
            let term = |i: usize, f: f64| targets.term(k, i, f);
            rescaled |= scale_start(&kss, o, c, &term, &weight, SCALED_START_GAIN);
            o.objective = objective_of(k, o);
        }
        pending = (!rescaled).then_some(gathered);
    } else {
        let starts: Vec<&[f64]> = outputs.iter().map(|o| &o.beta[..]).collect();
        let values = matvec_pass(
            &blocks,
            source,
            &mut segments,
            &starts,
            &mut passes,
            monitor,
            &progress,
        )?;
        for (k, o) in outputs.iter_mut().enumerate() {
            let b = o.b;
            o.f.iter_mut().zip(&values[k]).for_each(|(f, v)| *f = v + b);
            let term = |i: usize, f: f64| targets.term(k, i, f);
            scale_start(&kss, o, c, &term, &weight, 0.0);
            o.objective = objective_of(k, o);
        }
    }
    let objective_start: Vec<f64> = outputs.iter().map(|o| o.objective).collect();
    let mut iterations = 0;
    let mut active_changes = 0u64;
    let ridge = preconditioner_ridge(&kss, m);
    let mut first_gradient = vec![0.0; n_out];
    let mut cg_products = 0usize;
    let mut system_from = 0;
    let (mut squared_rows, mut recomputed_rows) = (0usize, 0usize);
    let mut kept_bytes = 0usize;
    // Moves output k by t along its direction (delta: the change of f over the full step) and
    // applies the stopping rules; `predict`: the Hessian-free solve's (the Newton system's
    // ends at the exact minimiser, which its last iteration reaches cheaply).
    let advance = |k: usize, o: &mut Output, t: f64, predict: bool, may_stop: bool| {
        let (beta_before, b_before, f_before) = (o.beta.clone(), o.b, o.f.clone());
        for (bj, dj) in o.beta.iter_mut().zip(&o.d) {
            *bj += t * dj;
        }
        o.b += t * o.db;
        let Output { f, delta, .. } = o;
        f.iter_mut()
            .zip(delta.iter())
            .for_each(|(fi, di)| *fi += t * di);
        let before = o.objective;
        o.objective = objective_of(k, o);
        if !o.objective.is_finite() {
            // Beyond what f64 holds (C near f64::MAX): the last finite point is the answer.
            (o.beta, o.b, o.f, o.objective) = (beta_before, b_before, f_before, before);
            o.done = true;
        } else {
            let decrease = before - o.objective;
            if may_stop
                && stops_after(
                    decrease,
                    o.decrease_before,
                    predict && o.full_step,
                    params.tol * o.objective.abs(),
                )
            {
                o.done = true;
            }
            o.decrease_before = decrease;
        }
    };
    // The objective at step t along output k's direction.
    let objective_along = |k: usize, o: &Output, t: f64| {
        let beta: Vec<f64> = o.beta.iter().zip(&o.d).map(|(b, d)| b + t * d).collect();
        let f: Vec<f64> = o.f.iter().zip(&o.delta).map(|(f, d)| f + t * d).collect();
        let term = |i, v| targets.term(k, i, v);
        objective(&kss, &beta, &f, c, &term, &weight)
    };
    while iterations < params.max_iter && outputs.iter().any(|o| !o.done) {
        if hessian_free
            && params.method == PolishMethod::Auto
            && (iterations >= FORM_AFTER_ITERATIONS || 4 * cg_products > m * n_out)
        {
            // From here on the Newton path: its first Gram pass counts every row's term at
            // the current point (M starts empty), and no earlier step counts as its full one.
            hessian_free = false;
            system_from = iterations + 1;
            pending = None;
            outputs.iter_mut().for_each(|o| o.full_step = false);
        }
        let live: Vec<usize> = if hessian_free {
            let live: Vec<usize> = (0..n_out).filter(|&k| !outputs[k].done).collect();
            iterations += 1;
            // A pass at the current point (no points) or at trial points; the cache takes what
            // the squared rows' copies leave of the budget, each copy sized for its segment's
            // squared rows (counted at the current f). The source and the monitor are lent
            // per call: the Hessian products between the passes read the source too.
            let mut gather = |source: &mut dyn RowSource,
                              monitor: Monitor<'_>,
                              segments: &mut Segments,
                              outputs: &[Output],
                              live: &[usize],
                              points: Option<&[(Vec<f64>, f64)]>,
                              passes: &mut usize,
                              progress: &Progress| {
                let t_gram = Instant::now();
                let squared = squared_per_segment(&segments.spans, outputs, live, &targets);
                let copy_bytes = if half_rows { 2 } else { 4 };
                let share = copy_share(squared.iter().sum(), m, copy_bytes, params.cache_bytes);
                let limits: Vec<usize> = squared.iter().map(|&q| share.limit(q)).collect();
                let planned: Vec<usize> = squared
                    .iter()
                    .zip(&limits)
                    .map(|(&q, &l)| q.min(l))
                    .collect();
                segments.plan_budget(&planned, m, copy_bytes);
                let result = gather_pass(
                    &blocks,
                    source,
                    segments,
                    outputs,
                    live,
                    points,
                    half_rows,
                    &|s| squared.get(s).copied().unwrap_or(0),
                    &|s| limits.get(s).copied().unwrap_or(0),
                    &|k, i, f| targets.term(k, i, f),
                    &weight,
                    passes,
                    monitor,
                    progress,
                );
                gram_seconds += t_gram.elapsed().as_secs_f64();
                result
            };
            let gathered = match pending.take() {
                Some(gathered) => gathered,
                None => {
                    gather(
                        &mut *source,
                        &mut *monitor,
                        &mut segments,
                        &outputs,
                        &live,
                        None,
                        &mut passes,
                        &progress,
                    )?
                    .0
                }
            };
            squared_rows = squared_rows.max(gathered.n_rows);
            recomputed_rows = recomputed_rows.max(gathered.n_recomputed);
            kept_bytes = kept_bytes.max(segments.held_bytes(m) + gathered.copied_bytes());
            let t_solve = Instant::now();
            // One preconditioner for all outputs; K_SS's factor once, the scale's factor again
            // when the squared rows' weight moved by more than `RESCALE_FACTOR` (a follows it).
            let weight_q: f64 = live
                .iter()
                .map(|&k| gathered.weight[gathered.place(k)])
                .sum::<f64>()
                / live.len() as f64;
            let a = 2.0 * c * weight_q / m as f64;
            let failed = || {
                SvmError::invalid_input(
                    "the polish's preconditioner could not be factorised: its entries are not finite (C \
                     too large for these rows, or non-finite kernel values)",
                )
            };
            // Ctrl-C between the factorisations' blocks: tens of seconds at m = 10,000.
            let mut check = || monitor(&progress);
            if basis.preconditioner.is_none() {
                let built = Preconditioner::new(&kss, m, ridge, &mut check)?;
                basis.preconditioner = Some(built.ok_or_else(failed)?);
            }
            let pre = basis.preconditioner.as_mut().expect("built above");
            let a0 = pre.scale();
            let scale_holds = a > a0 / RESCALE_FACTOR && a < RESCALE_FACTOR * a0;
            if !scale_holds && !pre.rescale(a, &mut check)? {
                return Err(failed());
            }
            let pre = &*pre;
            for &k in &live {
                let li = gathered.place(k);
                let o = &mut outputs[k];
                // g = (K_SS beta + 2C sum w hs k, 2C sum w hs); solve H x = -g.
                let mut g = vec![0.0; m + 1];
                for j in 0..m {
                    g[j] = simd::dot(&kss[j * m..(j + 1) * m], &o.beta)
                        + 2.0 * c * gathered.gradient[li][j];
                }
                g[m] = 2.0 * c * gathered.gradient[li][m];
                let norm = simd::dot(&g, &g).sqrt();
                if first_gradient[k] == 0.0 {
                    first_gradient[k] = norm;
                }
                let rel_tol = (norm / first_gradient[k].max(f64::MIN_POSITIVE))
                    .sqrt()
                    .clamp(
                        CG_TOL_FLOOR,
                        if sample_rows > 0 {
                            CG_TOL_NEAR
                        } else {
                            CG_TOL_EARLY
                        },
                    );
                let mut rhs: Vec<f64> = g.iter().map(|v| -v).collect();
                if gathered.weight[li].abs() <= NO_CURVATURE {
                    // No squared row: the objective is linear in b (no curvature, nothing
                    // couples it to beta), so b stays, as in the Newton system's solve; left in,
                    // the intercept's part of the solve grows without bound (a9a at B = 1,000,
                    // after a first step that left every row beyond its margin or on a
                    // tangent: a direction of infinite length).
                    rhs[m] = 0.0;
                }
                let rows = gathered.rows_of(li, m);
                let recomputed = &gathered.recomputed[li];
                let half = matches!(gathered.copies, RowCopies::Half(_));
                let mut hv = |v: &[f64], out: &mut [f64]| {
                    // Ctrl-C before each product (up to `MAX_CG_PRODUCTS` of them, a tenth of
                    // a second each over a gigabyte of copies) and between the waves of one
                    // that computes its rows again.
                    let mut check = || monitor(&progress);
                    check()?;
                    hessian_product(&kss_f32, ridge, c, &rows, m, v, out);
                    if recomputed.is_empty() {
                        return Ok(());
                    }
                    recomputed_product(
                        &blocks,
                        &mut *source,
                        recomputed,
                        half,
                        c,
                        v,
                        out,
                        &mut check,
                    )
                };
                let (x, products) = conjugate_gradient::solve(
                    &mut hv,
                    pre,
                    2.0 * c * gathered.weight[li],
                    &rhs,
                    rel_tol,
                    MAX_CG_PRODUCTS,
                )?;
                cg_products += products;
                o.d.copy_from_slice(&x[..m]);
                o.db = x[m];
                // The objective is convex, so no step t <= 1 along d lowers it by more than
                // -g.d: below the tolerance, the line search's pass over the rows would only
                // confirm that the point is the answer.
                let most = -simd::dot(&g, &x);
                if most.is_nan() || most <= params.tol * o.objective.abs() {
                    o.done = true;
                }
            }
            solve_seconds += t_solve.elapsed().as_secs_f64();
            // The squared rows' copies go before the next pass makes its own.
            drop(gathered);
            let live: Vec<usize> = live.into_iter().filter(|&k| !outputs[k].done).collect();
            if !live.is_empty() {
                // The full step's point, its values, gradient and squared rows in one pass.
                let points: Vec<(Vec<f64>, f64)> = live
                    .iter()
                    .map(|&k| {
                        let o = &outputs[k];
                        let beta = o.beta.iter().zip(&o.d).map(|(b, d)| b + d).collect();
                        (beta, o.b + o.db)
                    })
                    .collect();
                let (at_full_step, values) = gather(
                    &mut *source,
                    &mut *monitor,
                    &mut segments,
                    &outputs,
                    &live,
                    Some(&points),
                    &mut passes,
                    &progress,
                )?;
                let mut short_steps: Vec<ShortStep> = Vec::new();
                for (&k, full) in live.iter().zip(values) {
                    let o = &mut outputs[k];
                    let Output { f, delta, .. } = &mut *o;
                    delta
                        .iter_mut()
                        .zip(full.iter().zip(f.iter()))
                        .for_each(|(d, (v, f))| *d = v - f);
                    let best = line_search(
                        &kss,
                        o,
                        c,
                        &|i, f| targets.term(k, i, f),
                        &|i| targets.boundaries(k, i),
                        &weight,
                        false,
                    );
                    // The full step, whose rows the pass gathered, unless the exact step lowers
                    // the objective clearly more.
                    let t = if best == 1.0 {
                        1.0
                    } else {
                        let at_best = objective_along(k, o, best);
                        let at_full = objective_along(k, o, 1.0);
                        let share = FULL_STEP_SHARE * (o.objective - at_best);
                        if o.objective - at_full >= share {
                            1.0
                        } else {
                            best
                        }
                    };
                    o.full_step = t == 1.0;
                    let f_before = (!o.full_step).then(|| o.f.clone());
                    let before = o.objective;
                    advance(k, o, t, true, true);
                    let decrease = before - o.objective;
                    if decrease > STALL_SHARE * last_decrease[k] {
                        half_rows = false;
                    }
                    last_decrease[k] = decrease;
                    if let Some(f_before) = f_before.filter(|_| !o.done) {
                        short_steps.push(ShortStep {
                            output: k,
                            t,
                            f_before,
                        });
                    }
                }
                // The next direction's rows at the points taken: the full steps' as gathered,
                // the short steps' from them and the rows that changed piece.
                pending = Some(if short_steps.is_empty() {
                    at_full_step
                } else {
                    // The full steps' squared rows were copied, whatever stays of them.
                    squared_rows = squared_rows.max(at_full_step.n_rows);
                    recomputed_rows = recomputed_rows.max(at_full_step.n_recomputed);
                    let t_gram = Instant::now();
                    let at_steps = step_pass(
                        &blocks,
                        &mut *source,
                        &mut segments,
                        at_full_step,
                        &outputs,
                        &short_steps,
                        params.cache_bytes,
                        &|k, i, f| targets.term(k, i, f),
                        &weight,
                        &mut passes,
                        &mut *monitor,
                        &progress,
                    )?;
                    gram_seconds += t_gram.elapsed().as_secs_f64();
                    at_steps
                });
            }
            report(
                &mut progress,
                monitor,
                start,
                iterations,
                &outputs,
                active_changes,
            )?;
            continue;
        } else {
            // Rows whose active term differs from what M counts.
            let changed: Vec<Vec<Change>> = outputs
                .iter()
                .enumerate()
                .map(|(k, o)| {
                    if o.done {
                        return Vec::new();
                    }
                    (0..n)
                        .filter_map(|i| {
                            let now = targets.term(k, i, o.f[i]);
                            (now != o.counted[i]).then_some(Change {
                                row: i,
                                counted: o.counted[i],
                                now,
                            })
                        })
                        .collect()
                })
                .collect();
            for (k, o) in outputs.iter_mut().enumerate() {
                if o.done {
                    continue;
                }
                // A full step that changed nothing reached the minimiser of the quadratic.
                if changed[k].is_empty() && o.full_step {
                    o.done = true;
                    continue;
                }
                active_changes += changed[k].len() as u64;
            }
            let t_gram = Instant::now();
            gram_pass(
                &blocks,
                source,
                &mut segments,
                &mut outputs,
                &changed,
                &weight,
                &mut passes,
                monitor,
                &progress,
            )?;
            gram_seconds += t_gram.elapsed().as_secs_f64();
            let live: Vec<usize> = (0..n_out).filter(|&k| !outputs[k].done).collect();
            if live.is_empty() {
                break;
            }
            iterations += 1;
            let t_solve = Instant::now();
            for &k in &live {
                newton_direction(&kss, &mut outputs[k], c, m, &mut || monitor(&progress))?;
            }
            solve_seconds += t_solve.elapsed().as_secs_f64();
            live
        };
        if live.is_empty() {
            break;
        }
        let dirs: Vec<&[f64]> = live.iter().map(|&k| &outputs[k].d[..]).collect();
        let values = matvec_pass(
            &blocks,
            source,
            &mut segments,
            &dirs,
            &mut passes,
            monitor,
            &progress,
        )?;
        for (&k, v) in live.iter().zip(values) {
            let o = &mut outputs[k];
            let db = o.db;
            o.delta.iter_mut().zip(&v).for_each(|(d, x)| *d = x + db);
            let t = line_search(
                &kss,
                o,
                c,
                &|i, f| targets.term(k, i, f),
                &|i| targets.boundaries(k, i),
                &weight,
                true,
            );
            if t == 0.0 && o.ridge_scale < RIDGE_RAISED {
                // No descent along the direction: the system's gradient (M beta, M accurate to
                // about 1e-12) is off along K_SS's near-null directions, which a ridge of
                // `RIDGE` lets the step follow. Solved again with a larger ridge, kept from
                // then on; not counted as the stop it would be at the optimum.
                o.ridge_scale = RIDGE_RAISED;
                o.full_step = false;
                continue;
            }
            // A short step's small decrease says the direction was poor, not that the point
            // is the optimum (cod-rna, B = 500, on a basis where rows given twice are one SV: a
            // step of a small share stopped the solve 0.34% above the optimum); the next
            // iteration's direction, from the new point, says more. No step at all (under the
            // raised ridge) ends it.
            let may_stop = t >= SHORT_STEP || t == 0.0;
            o.full_step = t == 1.0;
            advance(k, o, t, false, may_stop);
        }
        report(
            &mut progress,
            monitor,
            start,
            iterations,
            &outputs,
            active_changes,
        )?;
    }
    let converged = outputs.iter().all(|o| o.done);
    basis.kss = Some(kss);
    let mut coef = vec![0.0; m * n_out];
    for (k, o) in outputs.iter().enumerate() {
        for j in 0..m {
            coef[j * n_out + k] = o.beta[j];
        }
    }
    Ok(PolishResult {
        coef,
        intercept: outputs.iter().map(|o| o.b).collect(),
        objective_start,
        objective: outputs.iter().map(|o| o.objective).collect(),
        iterations,
        converged,
        cached_rows: segments
            .cache
            .iter()
            .zip(&segments.spans)
            .filter(|(c, _)| c.is_some())
            .map(|(_, s)| s.len())
            .sum(),
        passes,
        active_changes,
        cg_products,
        system_from,
        squared_rows,
        recomputed_rows,
        kept_bytes,
        sample_rows,
        sample_seconds,
        kernel_seconds: segments.kernel_seconds,
        gram_seconds,
        solve_seconds,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Whether row `row` is in the subsample a solve starts from: one row in `SAMPLE_STEP`, picked by
/// a hash of its index, since a stride aliases with data stored in a period (ijcnn1's first ten
/// columns cycle through their values every ten rows: every fifth row saw two of them, and its
/// solution started the solve on all rows at 7 times the optimum's objective).
fn in_sample(row: usize) -> bool {
    mix(row as u64).is_multiple_of(SAMPLE_STEP as u64)
}

/// The rows of a source `in_sample`, copied in one pass: dense when the source's first block
/// is, CSR otherwise.
struct RowSample {
    /// The copy outgrew its bound (and stopped growing).
    too_big: bool,
    n_rows: usize,
    n_cols: usize,
    dense: Option<Vec<f64>>,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f64>,
}

impl RowSample {
    /// None when the copy would take more than `max_bytes` (a file read in chunks keeps its
    /// promise of memory for one chunk, not a fifth of the file).
    fn take(source: &mut dyn RowSource, max_bytes: usize) -> Result<Option<Self>> {
        let n_cols = source.n_cols();
        let mut sample = RowSample {
            too_big: false,
            n_rows: 0,
            n_cols,
            dense: None,
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        };
        let mut first_block = true;
        source.pass(&mut |first, rows| {
            if first_block {
                first_block = false;
                if matches!(rows, AnyRows::Dense(_)) {
                    sample.dense = Some(Vec::new());
                }
            }
            for i in (0..rows.n_rows()).filter(|&i| in_sample(first + i)) {
                if sample.too_big {
                    break;
                }
                sample.n_rows += 1;
                if let Some(dense) = &mut sample.dense {
                    let at = dense.len();
                    dense.resize(at + n_cols, 0.0);
                    rows.write_dense(i, &mut dense[at..]);
                } else {
                    rows.for_each_nonzero(i, |c, v| {
                        if v != 0.0 && c < n_cols {
                            sample.indices.push(c as i64);
                            sample.values.push(v);
                        }
                    });
                    sample.indptr.push(sample.values.len() as i64);
                }
                let bytes = sample.dense.as_ref().map_or(0, |d| d.len() * 8)
                    + sample.values.len() * 16
                    + sample.indptr.len() * 8;
                sample.too_big = bytes > max_bytes;
            }
            Ok(())
        })?;
        Ok((!sample.too_big).then_some(sample))
    }

    fn rows(&self) -> Result<AnyRows<'_>> {
        Ok(match &self.dense {
            Some(dense) => AnyRows::Dense(DenseView::new(dense, self.n_rows, self.n_cols)?),
            None => AnyRows::Csr64(CsrView::new(
                &self.indptr,
                &self.indices,
                &self.values,
                self.n_cols,
            )?),
        })
    }
}

/// Bytes `polish` holds at its peak for m support vectors, n rows and n_out outputs: K_SS, a
/// Gram matrix per output and the Newton system with its factor ((m + 1)^2 each), the kernel
/// values of one wave of segments in flight, the cache (at most all of K(X, S)), and per row and output f, the step and
/// the counted target.
fn polish_bytes(m: usize, n: usize, n_out: usize, cache_bytes: usize) -> u128 {
    let (m, n, n_out) = (m as u128, n as u128, n_out as u128);
    let square = (m + 1) * (m + 1) * 8;
    let wave = 4 * rayon::current_num_threads().max(1) as u128 * MAX_SEGMENT_ROWS as u128 * m * 8;
    let cache = (cache_bytes as u128).min(n * m * 8);
    square * (3 + n_out) + wave + cache + n * n_out * 32
}

/// What share of the squared rows get copies of their kernel values (`copy_bytes` each:
/// halves or f32) when `squared` rows are expected: all of them while their copies fit
/// `cache_bytes` (they displace cached segments, `Segments::plan_budget`), else the share that
/// fits, in every segment alike. The rows beyond it are computed again by every Hessian
/// product (`recomputed_product`): the copies are the one part of a Hessian-free solve that
/// grows with the rows (a million hard10d rows, B = 10,000: about 190,000 squared rows,
/// 3.8 GB in halves), and polish_cache_size bounds them as it bounds the cache.
fn copy_share(squared: usize, m: usize, copy_bytes: usize, cache_bytes: usize) -> CopyShare {
    let copies = squared as f64 * m as f64 * copy_bytes as f64;
    if copies <= cache_bytes as f64 {
        CopyShare::All
    } else {
        CopyShare::Part(cache_bytes as f64 / copies)
    }
}

/// `copy_share`'s answer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CopyShare {
    All,
    Part(f64),
}

impl CopyShare {
    /// The copies a segment with `squared` squared rows makes (all it finds, under `All`).
    fn limit(self, squared: usize) -> usize {
        match self {
            CopyShare::All => usize::MAX,
            CopyShare::Part(share) => (squared as f64 * share).floor() as usize,
        }
    }
}

/// The cache's bytes on the first pass of a Hessian-free solve: what the squared rows' copies
/// (a `share` of the rows, in halves) leave of `budget`.
fn first_pass_room(budget: usize, n: usize, m: usize, share: f64) -> usize {
    let copies = share.clamp(0.0, 1.0) * (n * m * 2) as f64;
    (budget as f64 - copies).max(0.0) as usize
}

/// Rows per segment for m support vectors, values in f32 (`single`) or f64: as many as keep a
/// segment's values within `SEGMENT_BYTES`, the share of a core's L2 cache that a pass can
/// count on. A pass computes a segment's values and then reads them row by row (the values at
/// a point, the gradient, the squared rows' copies): held in L2 they are read from it; a
/// segment of 1,024 rows at B = 3,000 (12 MB) went to memory and back, a third of such a
/// pass's time on this project's 2-core machine.
fn segment_rows(m: usize, single: bool) -> usize {
    let value_bytes = if single { 4 } else { 8 };
    (SEGMENT_BYTES / (value_bytes * m.max(1))).clamp(32, MAX_SEGMENT_ROWS)
}

/// Per segment, the rows whose loss term is squared for some output of `live` at its f.
fn squared_per_segment(
    spans: &[Range<usize>],
    outputs: &[Output],
    live: &[usize],
    targets: &Targets<'_>,
) -> Vec<usize> {
    spans
        .iter()
        .map(|span| {
            span.clone()
                .filter(|&i| {
                    live.iter()
                        .any(|&k| targets.term(k, i, outputs[k].f[i]).curvature() > 0.0)
                })
                .count()
        })
        .collect()
}

/// Reports an iteration's end to the monitor (progress, and Ctrl-C).
fn report(
    progress: &mut Progress,
    monitor: Monitor<'_>,
    start: Instant,
    iterations: usize,
    outputs: &[Output],
    active_changes: u64,
) -> Result<()> {
    progress.epoch = iterations;
    progress.epoch_done = true;
    progress.objective = Some(outputs.iter().map(|o| o.objective).sum());
    progress.iteration = active_changes;
    progress.seconds = start.elapsed().as_secs_f64();
    monitor(progress)?;
    progress.epoch_done = false;
    Ok(())
}

/// Row i's loss term at f (`Targets::term` of one output).
type TermAt<'a> = dyn Fn(usize, f64) -> Term + Sync + 'a;

/// 1/2 beta^T K beta + C sum_i w_i loss_i(f_i), the sum in fixed chunks.
fn objective(
    kss: &[f64],
    beta: &[f64],
    f: &[f64],
    c: f64,
    term: &TermAt<'_>,
    weight: &(dyn Fn(usize) -> f64 + Sync),
) -> f64 {
    let loss = chunked_sum(f.len(), &|rows| {
        let mut s = 0.0;
        for i in rows {
            s += weight(i) * term(i, f[i]).loss(f[i]);
        }
        [s, 0.0]
    })[0];
    0.5 * quad_form(kss, beta, beta) + c * loss
}

/// The start's best multiple: (s, b) minimising the objective at (s beta, b), whose f is
/// s (f - b_0) + b, by Newton steps on the two variables from the first pass's values (a few
/// sweeps over f, no kernel value). The budgeted pass's coefficients are often far off in
/// scale (BSGD's iterate, a Crammer-Singer start at 100x the optimum's objective), and the
/// first Newton steps of the polish, cut by its line search, spent iterations on it. The start
/// moves there only when that lowers its objective by at least the share `least_gain`;
/// returns whether it moved.
fn scale_start(
    kss: &[f64],
    o: &mut Output,
    c: f64,
    term: &TermAt<'_>,
    weight: &(dyn Fn(usize) -> f64 + Sync),
    least_gain: f64,
) -> bool {
    let q = quad_form(kss, &o.beta, &o.beta);
    if q.is_nan() || q <= 0.0 {
        return false;
    }
    let b0 = o.b;
    let g: Vec<f64> = o.f.iter().map(|f| f - b0).collect();
    let phi = |s: f64, b: f64| {
        let loss = chunked_sum(g.len(), &|rows| {
            let mut t = 0.0;
            for i in rows {
                let f = s * g[i] + b;
                t += weight(i) * term(i, f).loss(f);
            }
            [t, 0.0]
        })[0];
        0.5 * s * s * q + c * loss
    };
    let (mut s, mut b) = (1.0, b0);
    let mut value = phi(s, b);
    let at_start = value;
    for _ in 0..30 {
        // Gradient and Hessian in (s, b).
        let sums = chunked_sum(g.len(), &|rows| {
            let mut sums = [0.0; 5];
            for i in rows {
                let (gi, f) = (g[i], s * g[i] + b);
                let t = term(i, f);
                let w = weight(i);
                let (hs, cv) = (t.half_slope(f), t.curvature());
                sums[0] += w * hs * gi;
                sums[1] += w * hs;
                sums[2] += w * cv * gi * gi;
                sums[3] += w * cv * gi;
                sums[4] += w * cv;
            }
            sums
        });
        let gs = s * q + 2.0 * c * sums[0];
        let gb = 2.0 * c * sums[1];
        let (hss, hsb, hbb) = (q + 2.0 * c * sums[2], 2.0 * c * sums[3], 2.0 * c * sums[4]);
        let det = hss * hbb - hsb * hsb;
        let (ds, db) = if det > 1e-12 * hss * hbb.max(f64::MIN_POSITIVE) && hbb > 0.0 {
            (-(hbb * gs - hsb * gb) / det, -(hss * gb - hsb * gs) / det)
        } else {
            (-gs / hss, 0.0)
        };
        let slope = gs * ds + gb * db;
        if slope.is_nan() || slope >= 0.0 {
            break;
        }
        let mut t = 1.0;
        let mut next = phi(s + ds, b + db);
        while next > value + 1e-4 * t * slope && t > 1e-10 {
            t *= 0.5;
            next = phi(s + t * ds, b + t * db);
        }
        if next.is_nan() || next >= value {
            break;
        }
        s += t * ds;
        b += t * db;
        let decrease = value - next;
        value = next;
        if decrease <= 1e-9 * value.abs() {
            break;
        }
    }
    if (s == 1.0 && b == b0) || value > (1.0 - least_gain) * at_start {
        return false;
    }
    o.beta.iter_mut().for_each(|v| *v *= s);
    o.b = b;
    o.f.iter_mut().zip(&g).for_each(|(f, gi)| *f = s * gi + b);
    true
}

/// a^T K b for the symmetric m x m K (full storage).
fn quad_form(k: &[f64], a: &[f64], b: &[f64]) -> f64 {
    let m = a.len();
    (0..m)
        .map(|j| a[j] * simd::dot(&k[j * m..(j + 1) * m], b))
        .sum()
}

/// Two sums over 0..n in chunks of `SUM_CHUNK` rows (in parallel), added in chunk order.
fn chunked_sum<const N: usize>(
    n: usize,
    part: &(dyn Fn(Range<usize>) -> [f64; N] + Sync),
) -> [f64; N] {
    let chunks = n.div_ceil(SUM_CHUNK);
    let parts: Vec<[f64; N]> = parallel::install(|| {
        (0..chunks)
            .into_par_iter()
            .map(|c| part(c * SUM_CHUNK..((c + 1) * SUM_CHUNK).min(n)))
            .collect()
    });
    parts.iter().fold([0.0; N], |mut acc, p| {
        acc.iter_mut().zip(p).for_each(|(a, v)| *a += v);
        acc
    })
}

/// Whether a pass needs row i's kernel values.
type RowsNeeded<'a> = dyn Fn(usize) -> bool + Sync + 'a;

/// What a pass computes on a segment: (segment, its rows, their kernel values) -> result.
/// The last argument says whether the segment's values are in the cache (after this pass).
type SegmentWork<'a, T> = dyn Fn(usize, Range<usize>, SegmentValues<'_>) -> T + Sync + 'a;

/// A segment's kernel values (row-major, m a row) as a pass reads them: f64, or f32 where
/// every value is rounded to f32 (`Segments::single`), read as stored instead of widened
/// into a copy of the segment first. When a pass computed only the rows it needs, they are
/// packed and `at` gives each segment row's place among them (rows not computed are never
/// read).
#[derive(Clone, Copy)]
struct SegmentValues<'a> {
    values: Values<'a>,
    at: Option<&'a [usize]>,
}

#[derive(Clone, Copy)]
enum Values<'a> {
    F64(&'a [f64]),
    F32(&'a [f32]),
}

impl<'a> SegmentValues<'a> {
    fn all(values: Values<'a>) -> Self {
        SegmentValues { values, at: None }
    }

    /// Where segment row t's values start.
    fn start(self, t: usize, m: usize) -> usize {
        self.at.map_or(t, |at| at[t]) * m
    }

    /// Row t, widened into `buf` (m long) when stored as f32.
    fn row<'b>(self, t: usize, m: usize, buf: &'b mut [f64]) -> &'b [f64]
    where
        'a: 'b,
    {
        let a = self.start(t, m);
        match self.values {
            Values::F64(v) => &v[a..a + m],
            Values::F32(v) => {
                for (b, &x) in buf.iter_mut().zip(&v[a..a + m]) {
                    *b = f64::from(x);
                }
                &buf[..m]
            }
        }
    }

    /// Row t's dot product with `v`, read as stored.
    fn dot(self, t: usize, m: usize, v: &[f64]) -> f64 {
        let a = self.start(t, m);
        match self.values {
            Values::F64(x) => simd::dot(&x[a..a + m], v),
            Values::F32(x) => simd::dot_narrow(&x[a..a + m], v),
        }
    }

    /// y += alpha row t, read as stored.
    fn axpy(self, t: usize, m: usize, alpha: f64, y: &mut [f64]) {
        let a = self.start(t, m);
        match self.values {
            Values::F64(x) => simd::axpy(alpha, &x[a..a + m], y),
            Values::F32(x) => simd::axpy_narrow(alpha, &x[a..a + m], y),
        }
    }

    /// Appends row t to `out` in f32.
    fn extend_f32(self, t: usize, m: usize, out: &mut Vec<f32>) {
        let a = self.start(t, m);
        match self.values {
            Values::F64(v) => out.extend(v[a..a + m].iter().map(|&x| x as f32)),
            Values::F32(v) => out.extend_from_slice(&v[a..a + m]),
        }
    }

    /// Appends row t to `out` in halves (through f32 when stored in f64).
    fn extend_f16(self, t: usize, m: usize, out: &mut Vec<F16>) {
        let a = self.start(t, m);
        match self.values {
            Values::F64(v) => out.extend(v[a..a + m].iter().map(|&x| F16::from_f32(x as f32))),
            Values::F32(v) => simd::extend_f16(&v[a..a + m], out),
        }
    }
}

/// A row whose active loss term differs from the one the Newton sums count.
#[derive(Debug, Clone, Copy)]
struct Change {
    row: usize,
    /// The term the sums count it with, and the one it has now.
    counted: Term,
    now: Term,
}

/// One output's changed rows of a segment, with their kernel values (row-major).
struct ChangedRows {
    changes: Vec<Change>,
    values: Vec<f64>,
}

/// Visits the segments wanted (all with `None`) in parallel, block by block of the source:
/// `work(segment, rows, kernel_values)` on each, then `collect` on the results in segment
/// order. Kernel values come from the cache or are computed (and cached on the first pass
/// while the cache has room); with `needed`, a segment computed (not cached) gets the values
/// of the rows it names only, the others' left 0 (`work` must not read them).
#[allow(clippy::too_many_arguments)]
fn segment_pass<T: Send>(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    wanted: Option<&[bool]>,
    needed: Option<&RowsNeeded<'_>>,
    work: &SegmentWork<'_, T>,
    collect: &mut dyn FnMut(usize, T) -> Result<()>,
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<()> {
    *passes += 1;
    let m = blocks.n_basis();
    let first_pass = segments.spans.is_empty();
    let segment = segment_rows(m, segments.single);
    // Every segment the pass wants is in the cache (after the first pass): the source is not
    // read at all (a file is not parsed again), the segments visited in the same order.
    let from_cache = !first_pass
        && (0..segments.spans.len())
            .filter(|&s| wanted.is_none_or(|w| w[s]))
            .all(|s| match &segments.cache[s] {
                Some(Cached::F64(kv)) => !kv.is_empty(),
                Some(Cached::F32(kv)) => !kv.is_empty(),
                None => false,
            });
    let n_segments = segments.spans.len();
    let mut next_segment = 0;
    // The segments `ids` of a block of `len` rows starting at row `first` (the rows None: all
    // the pass wants are cached).
    let mut run = |ids: Vec<usize>,
                   first: usize,
                   len: usize,
                   rows: Option<&AnyRows<'_>>|
     -> Result<()> {
        if first_pass {
            for s in 0..ids.len() {
                let a = first + s * segment;
                segments.spans.push(a..(a + segment).min(first + len));
                let value_bytes = if segments.single { 4 } else { 8 };
                let bytes = segments.spans.last().map_or(0, |r| r.len()) * m * value_bytes;
                if bytes <= segments.cache_left && m > 0 {
                    segments.cache_left -= bytes;
                    segments.cache.push(Some(Cached::F64(Vec::new())));
                } else {
                    segments.cache.push(None);
                }
            }
        }
        let todo: Vec<usize> = ids
            .into_iter()
            .filter(|&s| wanted.is_none_or(|w| w[s]))
            .collect();
        // Waves of a few largest segments' rows per thread bound the memory of results held
        // at once.
        let wave = 4 * rayon::current_num_threads().max(1) * (MAX_SEGMENT_ROWS / segment).max(1);
        for group in todo.chunks(wave) {
            // Ctrl-C between waves of a long pass.
            monitor(progress)?;
            let spans = &segments.spans;
            let cache = &segments.cache;
            let single = segments.single;
            let results: Vec<(T, Option<Cached>, f64)> = parallel::install(|| {
                group
                    .par_iter()
                    // Per thread: the block scratch, and the values of a segment that is
                    // not kept (computed, and rounded to f32 when single), reused across
                    // segments and passes.
                    .map_init(
                        || (BlockScratch::default(), Vec::new(), Vec::new(), Vec::new()),
                        |(scratch, values, values32, at), &s| {
                            let span = spans[s].clone();
                            let local = span.start - first..span.end - first;
                            let slot = match &cache[s] {
                                Some(Cached::F64(kv)) if !kv.is_empty() => {
                                    let kv = SegmentValues::all(Values::F64(kv));
                                    let r = work(s, span, kv);
                                    return (r, None, 0.0);
                                }
                                Some(Cached::F32(kv)) if !kv.is_empty() => {
                                    let kv = SegmentValues::all(Values::F32(kv));
                                    let r = work(s, span, kv);
                                    return (r, None, 0.0);
                                }
                                slot => slot,
                            };
                            // (A pass from the cache wants cached segments only.)
                            let rows = rows.expect("the rows of a segment not cached");
                            let t0 = Instant::now();
                            let some: Option<Vec<usize>> = needed
                                .filter(|_| slot.is_none())
                                .map(|f| local.clone().filter(|&i| f(first + i)).collect());
                            // Only the rows the pass needs, packed (no values computed, zeroed
                            // or moved for the others), or all of them; in f32 straight from the
                            // dots when single (a kept segment's own vector, else a buffer that
                            // only grows), in f64 otherwise.
                            let keep = slot.is_some();
                            let index: Option<Vec<usize>> =
                                some.filter(|index| index.len() < local.len());
                            let count = index.as_ref().map_or(local.len(), |i| i.len());
                            let norms: Vec<f64> = match &index {
                                Some(index) => index.iter().map(|&i| rows.sq_norm(i)).collect(),
                                None => local.clone().map(|i| rows.sq_norm(i)).collect(),
                            };
                            if let Some(index) = &index {
                                at.clear();
                                at.resize(local.len(), usize::MAX);
                                for (p, &i) in index.iter().enumerate() {
                                    at[i - local.start] = p;
                                }
                            }
                            let subset = index.as_ref().map(|index| {
                                SubsetRows::new(rows, index).expect("block-local rows")
                            });
                            let mut kept_f32 = Vec::new();
                            if single {
                                let out: &mut [f32] = if keep {
                                    kept_f32 = vec![0.0; count * m];
                                    &mut kept_f32
                                } else {
                                    if values32.len() < count * m {
                                        values32.resize(count * m, 0.0);
                                    }
                                    &mut values32[..count * m]
                                };
                                match &subset {
                                    Some(subset) => {
                                        blocks.fill_rows_f32(subset, 0..count, &norms, out, scratch)
                                    }
                                    None => blocks.fill_rows_f32(rows, local, &norms, out, scratch),
                                }
                            } else {
                                values.resize(count * m, 0.0);
                                let out = &mut values[..count * m];
                                match &subset {
                                    Some(subset) => {
                                        blocks.fill_rows(subset, 0..count, &norms, out, scratch)
                                    }
                                    None => blocks.fill_rows(rows, local, &norms, out, scratch),
                                }
                            }
                            let packed = index.is_some();
                            let kept = if !keep {
                                None
                            } else if single {
                                Some(Cached::F32(kept_f32))
                            } else {
                                Some(Cached::F64(std::mem::take(values)))
                            };
                            let secs = t0.elapsed().as_secs_f64();
                            let kv = SegmentValues {
                                values: match &kept {
                                    Some(Cached::F32(kv)) => Values::F32(kv),
                                    Some(Cached::F64(kv)) => Values::F64(kv),
                                    None if single => Values::F32(&values32[..count * m]),
                                    None => Values::F64(values),
                                },
                                at: packed.then_some(&at[..]),
                            };
                            let r = work(s, span, kv);
                            (r, kept, secs)
                        },
                    )
                    .collect()
            });
            for (&s, (r, kv, secs)) in group.iter().zip(results) {
                segments.kernel_seconds += secs;
                if let Some(kv) = kv {
                    segments.cache[s] = Some(kv);
                }
                collect(s, r)?;
            }
        }
        Ok(())
    };
    if from_cache {
        run((0..n_segments).collect(), 0, 0, None)?;
    } else {
        source.pass(&mut |first: usize, rows: &AnyRows<'_>| -> Result<()> {
            let len = rows.n_rows();
            // This block's segments.
            let ids: Vec<usize> = (0..len.div_ceil(segment))
                .map(|s| next_segment + s)
                .collect();
            next_segment += ids.len();
            run(ids, first, len, Some(rows))
        })?;
    }
    if first_pass {
        let rows: usize = segments.spans.iter().map(|s| s.len()).sum();
        if rows != source.n_rows() {
            return Err(SvmError::invalid_input(
                "the row source gave a different number of rows than it declared",
            ));
        }
    }
    Ok(())
}

/// What the Hessian-free direction needs of the rows at the current point, per live output:
/// the loss term's gradient sum_i w hs_i (k_i, 1) (hs: the term's half slope), the squared
/// rows (per output where their kernel values are, with their weight) and those rows' total
/// weight. The rows are in f32: they serve only the Hessian products, whose directions need
/// not be exact (the gradient, the line search and the objective use f64), and the products
/// read them tens of times an iteration. A row of a cached segment is read from the cache;
/// the others are copied, one vector per segment (no vector of all rows to grow).
struct Gathered {
    /// The outputs gathered for (the live ones of the pass), in the order of the vectors below.
    outputs: Vec<usize>,
    gradient: Vec<Vec<f64>>,
    /// At a trial point, per output: sum w d_i (k_i, 1) over the rows squared at both ends of
    /// the step (d_i: the change of f_i over it), the gradient's rate of change along the step
    /// from those rows (`step_pass`). Empty at the current point.
    slope: Vec<Vec<f64>>,
    copies: RowCopies,
    members: Vec<Vec<Member>>,
    /// Per output, the squared rows without a copy (row, weight), in row order: their kernel
    /// values are computed again by every Hessian product (`recomputed_product`).
    recomputed: Vec<Vec<(usize, f64)>>,
    weight: Vec<f64>,
    /// Squared rows (of any output).
    n_rows: usize,
    /// Squared rows without a copy (of any output).
    n_recomputed: usize,
}

/// Where a squared row's kernel values are: row `row` of copy `part`.
#[derive(Debug, Clone, Copy)]
struct SquaredRow {
    part: usize,
    row: usize,
}

/// A squared row of an output: its copy, its row among the data's, its weight.
#[derive(Debug, Clone, Copy)]
struct Member {
    at: SquaredRow,
    row: usize,
    weight: f64,
}

/// The squared rows' copies, one per squared row (also where its segment is cached in f32).
///
/// The Hessian products are bound by reading these rows (tens of products per pass over the
/// rows), so they start in halves: half the bytes. They only shape the direction: the gradient,
/// the objective and the line search read the f32 values, so the solve still stops at the
/// problem's optimum; but on an ill-conditioned problem the halves' Hessian slows Newton to a
/// linear rate near 1, so a stall (`STALL_SHARE`) switches to f32. (bf16, 8 significant bits,
/// took an iteration more on the generator too.)
enum RowCopies {
    Half(Vec<Vec<F16>>),
    Single(Vec<Vec<f32>>),
}

/// One output's squared rows as (kernel values, weight), as stored.
enum SquaredRows<'a> {
    Half(Vec<(&'a [F16], f64)>),
    Single(Vec<(&'a [f32], f64)>),
}

impl RowCopies {
    fn empty(half: bool) -> Self {
        if half {
            RowCopies::Half(Vec::new())
        } else {
            RowCopies::Single(Vec::new())
        }
    }

    fn bytes(&self) -> usize {
        match self {
            RowCopies::Half(c) => c.iter().map(|c| c.len() * 2).sum(),
            RowCopies::Single(c) => c.iter().map(|c| c.len() * 4).sum(),
        }
    }

    fn parts(&self) -> usize {
        match self {
            RowCopies::Half(c) => c.len(),
            RowCopies::Single(c) => c.len(),
        }
    }

    /// Appends row t of `kv` to a part of its own (made on the first row, sized for
    /// `capacity` values); the row's index in it.
    fn push_row(&mut self, kv: SegmentValues<'_>, t: usize, m: usize, capacity: usize) -> usize {
        fn last<T>(parts: &mut Vec<Vec<T>>, capacity: usize) -> &mut Vec<T> {
            if parts.is_empty() {
                parts.push(Vec::with_capacity(capacity));
            }
            parts.last_mut().expect("made above")
        }
        match self {
            RowCopies::Half(c) => {
                let part = last(c, capacity);
                kv.extend_f16(t, m, part);
                part.len() / m - 1
            }
            RowCopies::Single(c) => {
                let part = last(c, capacity);
                kv.extend_f32(t, m, part);
                part.len() / m - 1
            }
        }
    }

    /// Rows in part `part`.
    fn rows_in(&self, part: usize, m: usize) -> usize {
        match self {
            RowCopies::Half(c) => c.get(part).map_or(0, |p| p.len() / m.max(1)),
            RowCopies::Single(c) => c.get(part).map_or(0, |p| p.len() / m.max(1)),
        }
    }

    /// Overwrites the row at `slot` with row `row` of `from`'s first part (the same precision).
    fn copy_row(&mut self, slot: SquaredRow, from: &RowCopies, row: usize, m: usize) {
        let (a, b) = (slot.row * m..(slot.row + 1) * m, row * m..(row + 1) * m);
        match (self, from) {
            (RowCopies::Half(to), RowCopies::Half(from)) => {
                to[slot.part][a].copy_from_slice(&from[0][b])
            }
            (RowCopies::Single(to), RowCopies::Single(from)) => {
                to[slot.part][a].copy_from_slice(&from[0][b])
            }
            _ => unreachable!("one pass gathers in one precision"),
        }
    }

    /// Appends row `row` of `from`'s first part to this one's only part; its index there.
    fn copy_row_to_end(&mut self, from: &RowCopies, row: usize, m: usize) -> usize {
        fn extend<T: Copy>(to: &mut Vec<Vec<T>>, from: &[T]) -> usize {
            if to.is_empty() {
                to.push(Vec::new());
            }
            to[0].extend_from_slice(from);
            to[0].len() / from.len().max(1) - 1
        }
        let b = row * m..(row + 1) * m;
        match (self, from) {
            (RowCopies::Half(to), RowCopies::Half(from)) => extend(to, &from[0][b]),
            (RowCopies::Single(to), RowCopies::Single(from)) => extend(to, &from[0][b]),
            _ => unreachable!("one pass gathers in one precision"),
        }
    }

    /// Moves `other`'s parts after these (the same precision).
    fn append(&mut self, other: &mut RowCopies) {
        match (self, other) {
            (RowCopies::Half(a), RowCopies::Half(b)) => a.append(b),
            (RowCopies::Single(a), RowCopies::Single(b)) => a.append(b),
            _ => unreachable!("one pass gathers in one precision"),
        }
    }
}

impl Gathered {
    /// Empty sums for the `live` outputs; a slope per output only at a trial point (`trial`).
    fn new(live: &[usize], m: usize, half: bool, trial: bool) -> Self {
        let q = live.len();
        Gathered {
            outputs: live.to_vec(),
            gradient: vec![vec![0.0; m + 1]; q],
            slope: vec![vec![0.0; if trial { m + 1 } else { 0 }]; q],
            copies: RowCopies::empty(half),
            members: vec![Vec::new(); q],
            recomputed: vec![Vec::new(); q],
            weight: vec![0.0; q],
            n_rows: 0,
            n_recomputed: 0,
        }
    }

    fn copied_bytes(&self) -> usize {
        self.copies.bytes()
    }

    /// Output k's place among the vectors.
    fn place(&self, k: usize) -> usize {
        self.outputs
            .iter()
            .position(|&o| o == k)
            .expect("gathered for every live output")
    }

    /// Output `li`'s squared rows.
    fn rows_of(&self, li: usize, m: usize) -> SquaredRows<'_> {
        fn rows<'a, T>(members: &[Member], copies: &'a [Vec<T>], m: usize) -> Vec<(&'a [T], f64)> {
            members
                .iter()
                .map(|member| {
                    let SquaredRow { part, row } = member.at;
                    (&copies[part][row * m..(row + 1) * m], member.weight)
                })
                .collect()
        }
        match &self.copies {
            RowCopies::Half(c) => SquaredRows::Half(rows(&self.members[li], c, m)),
            RowCopies::Single(c) => SquaredRows::Single(rows(&self.members[li], c, m)),
        }
    }
}

/// One pass over the rows for `Gathered`, segments in parallel, their parts added in row order.
/// At the current point (`trial` None) a row's value is read from the outputs' f and rows with
/// a zero term are skipped; at a trial point (per live output its coefficients and intercept)
/// every row's value is computed from its kernel values in the same pass, and returned per live
/// output: one pass gives both the values a line search needs and, when the full step is
/// taken, the next direction's gradient and squared rows (the product K d and the gather were
/// two passes over the rows per iteration).
#[allow(clippy::too_many_arguments)]
fn gather_pass(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    outputs: &[Output],
    live: &[usize],
    trial: Option<&[(Vec<f64>, f64)]>,
    half: bool,
    squared: &(dyn Fn(usize) -> usize + Sync),
    copy_limit: &(dyn Fn(usize) -> usize + Sync),
    term: &(dyn Fn(usize, usize, f64) -> Term + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<(Gathered, Vec<Vec<f64>>)> {
    let m = blocks.n_basis();
    let q = live.len();
    let mut out = Gathered::new(live, m, half, trial.is_some());
    // Rows with a zero term for every output add nothing.
    let needed = |i: usize| {
        live.iter()
            .any(|&k| term(k, i, outputs[k].f[i]) != Term::Zero)
    };
    let work = |s: usize, span: Range<usize>, kv: SegmentValues<'_>| {
        let mut part = Gathered::new(live, m, half, trial.is_some());
        let mut values = vec![0.0; if trial.is_some() { span.len() * q } else { 0 }];
        // Sized for the segment's squared rows: a vector grown by doubling kept up to twice
        // their bytes (a million rows, B = 2,000: 2.75 GB at the peak for 1.34 GB of rows).
        let start = span.start;
        let (limit, mut copied) = (copy_limit(s), 0);
        for (t, i) in span.enumerate() {
            if trial.is_none() && !needed(i) {
                continue;
            }
            let w = weight(i);
            // The row's copy (None: not made yet), or Some(None): the row is recomputed.
            let mut kept: Option<Option<SquaredRow>> = None;
            for (li, &k) in live.iter().enumerate() {
                let f = match trial {
                    Some(points) => {
                        let (beta, b) = &points[li];
                        let f = kv.dot(t, m, beta) + b;
                        values[t * q + li] = f;
                        f
                    }
                    None => outputs[k].f[i],
                };
                let piece = term(k, i, f);
                if piece == Term::Zero {
                    continue;
                }
                let hs = w * piece.half_slope(f);
                let g = &mut part.gradient[li];
                kv.axpy(t, m, hs, &mut g[..m]);
                g[m] += hs;
                let f0 = outputs[k].f[i];
                if trial.is_some() && piece.curvature() > 0.0 && term(k, i, f0) == piece {
                    let rate = w * (f - f0);
                    let slope = &mut part.slope[li];
                    kv.axpy(t, m, rate, &mut slope[..m]);
                    slope[m] += rate;
                }
                if piece.curvature() > 0.0 {
                    let at = *kept.get_or_insert_with(|| {
                        part.n_rows += 1;
                        if copied < limit {
                            copied += 1;
                            let capacity = squared(s).min(limit) * m;
                            Some(SquaredRow {
                                part: 0,
                                row: part.copies.push_row(kv, t, m, capacity),
                            })
                        } else {
                            part.n_recomputed += 1;
                            None
                        }
                    });
                    match at {
                        Some(at) => part.members[li].push(Member {
                            at,
                            row: i,
                            weight: w,
                        }),
                        None => part.recomputed[li].push((i, w)),
                    }
                    part.weight[li] += w;
                }
            }
        }
        (part, start, values)
    };
    let n = source.n_rows();
    let mut values = vec![vec![0.0; if trial.is_some() { n } else { 0 }]; q];
    segment_pass(
        blocks,
        source,
        segments,
        None,
        trial.is_none().then_some(&needed as &RowsNeeded<'_>),
        &work,
        &mut |_s, (mut part, first, f)| {
            let at = out.copies.parts();
            out.copies.append(&mut part.copies);
            out.n_rows += part.n_rows;
            out.n_recomputed += part.n_recomputed;
            for li in 0..q {
                out.recomputed[li].append(&mut part.recomputed[li]);
                for (a, b) in out.gradient[li].iter_mut().zip(&part.gradient[li]) {
                    *a += b;
                }
                for (a, b) in out.slope[li].iter_mut().zip(&part.slope[li]) {
                    *a += b;
                }
                out.weight[li] += part.weight[li];
                out.members[li].extend(part.members[li].iter().map(|member| Member {
                    at: SquaredRow {
                        part: at,
                        row: member.at.row,
                    },
                    ..*member
                }));
            }
            if q > 0 {
                for (t, row) in f.chunks(q).enumerate() {
                    for (li, &v) in row.iter().enumerate() {
                        values[li][first + t] = v;
                    }
                }
            }
            Ok(())
        },
        passes,
        monitor,
        progress,
    )?;
    Ok((out, values))
}

/// An output that took a step t other than 1 along its direction: t and f before the step.
struct ShortStep {
    output: usize,
    t: f64,
    f_before: Vec<f64>,
}

/// `Gathered` at the points the line search chose, from the trial pass's (at the full steps)
/// and a pass over the rows that change piece along a short step only. A row in the same
/// piece at both ends of a step is in it all along (pieces are intervals of f), so its part of
/// the gradient is linear in t: the trial pass's gradient less (1 - t) times its `slope`, and
/// it is squared at t if and only if at the full step. The rows that change piece (about a
/// sixth of the rows on the first full step from a subsample's start, where a pass over all
/// rows took 0.45 s of an 8 s fit) are computed again: their gradient terms at t replace those
/// at the full step, and they are squared rows at t where their piece is. Their copies take
/// the places of the copies no output reads any more, then what the budget leaves (segment by
/// segment in row order, whatever the threads); the rest are computed again by each product.
#[allow(clippy::too_many_arguments)]
fn step_pass(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    mut gathered: Gathered,
    outputs: &[Output],
    steps: &[ShortStep],
    budget: usize,
    term: &(dyn Fn(usize, usize, f64) -> Term + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<Gathered> {
    let m = blocks.n_basis();
    let n = source.n_rows();
    // f at a step's end as `advance` computes it, and whether the row changed piece.
    let at = |s: &ShortStep, i: usize, t: f64| s.f_before[i] + t * outputs[s.output].delta[i];
    let flips: Vec<Vec<bool>> = steps
        .iter()
        .map(|s| {
            (0..n)
                .map(|i| term(s.output, i, s.f_before[i]) != term(s.output, i, at(s, i, 1.0)))
                .collect()
        })
        .collect();
    let squared_at = |si: usize, i: usize| {
        let s = &steps[si];
        term(s.output, i, at(s, i, s.t)).curvature() > 0.0
    };
    // The rows squared at the full step stay unless they changed piece and are not squared at
    // t; the copies that no output reads then are free places.
    let places: Vec<usize> = steps.iter().map(|s| gathered.place(s.output)).collect();
    for (si, &li) in places.iter().enumerate() {
        let stays = |i: usize| !flips[si][i] || squared_at(si, i);
        gathered.members[li].retain(|member| stays(member.row));
        gathered.recomputed[li].retain(|&(i, _)| stays(i));
    }
    let mut read: Vec<Vec<bool>> = (0..gathered.copies.parts())
        .map(|p| vec![false; gathered.copies.rows_in(p, m)])
        .collect();
    // A row's copy, where some output still reads it (copies are shared by the outputs).
    let mut copy_of: Vec<Option<SquaredRow>> = vec![None; n];
    for members in &gathered.members {
        for member in members {
            read[member.at.part][member.at.row] = true;
            copy_of[member.row] = Some(member.at);
        }
    }
    let mut free = read.iter().enumerate().flat_map(|(part, rows)| {
        let rows: Vec<usize> = (0..rows.len()).filter(|&r| !rows[r]).collect();
        rows.into_iter().map(move |row| SquaredRow { part, row })
    });
    let mut room = budget.saturating_sub(segments.held_bytes(m) + gathered.copied_bytes());
    let row_bytes = m * if matches!(gathered.copies, RowCopies::Half(_)) {
        2
    } else {
        4
    };
    let any_flip: Vec<bool> = (0..n).map(|i| flips.iter().any(|f| f[i])).collect();
    let seg_of = |i: usize| segments.spans.partition_point(|s| s.end <= i);
    let mut wanted = vec![false; segments.spans.len()];
    for (i, _) in any_flip.iter().enumerate().filter(|(_, &f)| f) {
        wanted[seg_of(i)] = true;
    }
    let half = matches!(gathered.copies, RowCopies::Half(_));
    let movers: Vec<usize> = steps.iter().map(|s| s.output).collect();
    let needed = |i: usize| any_flip[i];
    // Per segment: the gradient's changes, and the rows newly squared (copied in the part:
    // `NEW_COPY` as their place).
    const NEW_COPY: usize = usize::MAX;
    let work = |_s: usize, span: Range<usize>, kv: SegmentValues<'_>| {
        let mut part = Gathered::new(&movers, m, half, false);
        for (t, i) in span.enumerate() {
            if !any_flip[i] {
                continue;
            }
            let w = weight(i);
            let mut kept: Option<SquaredRow> = None;
            for (si, s) in steps.iter().enumerate() {
                if !flips[si][i] {
                    continue;
                }
                let (f1, ft) = (at(s, i, 1.0), at(s, i, s.t));
                let (p1, pt) = (term(s.output, i, f1), term(s.output, i, ft));
                let change = w * (pt.half_slope(ft) - p1.half_slope(f1));
                let g = &mut part.gradient[si];
                kv.axpy(t, m, change, &mut g[..m]);
                g[m] += change;
                // Squared at both ends of the short step: its copy at the full step serves.
                if pt.curvature() > 0.0 && p1.curvature() == 0.0 {
                    let at = *kept.get_or_insert_with(|| {
                        copy_of[i].unwrap_or_else(|| SquaredRow {
                            part: NEW_COPY,
                            row: part.copies.push_row(kv, t, m, 0),
                        })
                    });
                    part.members[si].push(Member {
                        at,
                        row: i,
                        weight: w,
                    });
                }
            }
        }
        part
    };
    let mut changes = vec![vec![0.0; m + 1]; steps.len()];
    let mut extra = RowCopies::empty(half);
    let first_extra = gathered.copies.parts();
    segment_pass(
        blocks,
        source,
        segments,
        Some(&wanted),
        Some(&needed),
        &work,
        &mut |_s, part| {
            // Each new copy's place: a free one, else a new row within the budget, else none.
            let placed: Vec<Option<SquaredRow>> = (0..part.copies.rows_in(0, m))
                .map(|r| {
                    if let Some(slot) = free.next() {
                        gathered.copies.copy_row(slot, &part.copies, r, m);
                        Some(slot)
                    } else if row_bytes <= room {
                        room -= row_bytes;
                        let row = extra.copy_row_to_end(&part.copies, r, m);
                        Some(SquaredRow {
                            part: first_extra,
                            row,
                        })
                    } else {
                        None
                    }
                })
                .collect();
            for (si, &li) in places.iter().enumerate() {
                for (a, b) in changes[si].iter_mut().zip(&part.gradient[si]) {
                    *a += b;
                }
                for member in &part.members[si] {
                    let at = match member.at.part {
                        NEW_COPY => placed[member.at.row],
                        _ => Some(member.at),
                    };
                    match at {
                        Some(at) => gathered.members[li].push(Member { at, ..*member }),
                        None => gathered.recomputed[li].push((member.row, member.weight)),
                    }
                }
            }
            Ok(())
        },
        passes,
        monitor,
        progress,
    )?;
    gathered.copies.append(&mut extra);
    for (si, s) in steps.iter().enumerate() {
        let li = places[si];
        let g = &mut gathered.gradient[li];
        for ((g, slope), change) in g.iter_mut().zip(&gathered.slope[li]).zip(&changes[si]) {
            *g += change - (1.0 - s.t) * slope;
        }
        // `recomputed_product` takes them in row order.
        gathered.recomputed[li].sort_by_key(|&(i, _)| i);
        gathered.weight[li] = gathered.members[li]
            .iter()
            .map(|member| member.weight)
            .sum::<f64>()
            + gathered.recomputed[li].iter().map(|&(_, w)| w).sum::<f64>();
    }
    // The squared rows (of any output) and those without a copy, counted again.
    let mut squared = vec![0u8; n];
    for li in 0..gathered.outputs.len() {
        for member in &gathered.members[li] {
            squared[member.row] |= 1;
        }
        for &(i, _) in &gathered.recomputed[li] {
            squared[i] |= 2;
        }
    }
    gathered.n_rows = squared.iter().filter(|&&v| v != 0).count();
    gathered.n_recomputed = squared.iter().filter(|&&v| v & 2 != 0).count();
    Ok(gathered)
}

/// out = H v for one output's Newton system (`kss` in f32, its lower triangle read): (K_SS + ridge) v_beta + 2C sum_Q w (k . v_beta +
/// v_b) k, and 2C sum_Q w (k . v_beta + v_b) for the intercept; the squared rows in fixed
/// chunks in parallel, the chunks' parts added in order. Rows in halves are multiplied in f32
/// arithmetic (their values are good to 5e-4, the sums to about 1e-6: twice the lanes and no
/// widening per value, which made the products compute-bound), rows in f32 in f64.
fn hessian_product(
    kss: &[f32],
    ridge: f64,
    c: f64,
    rows: &SquaredRows<'_>,
    m: usize,
    v: &[f64],
    out: &mut [f64],
) {
    let (vb, vbeta) = (v[m], &v[..m]);
    let parts: Vec<Vec<f64>> = match rows {
        SquaredRows::Half(rows) => {
            let v32: Vec<f32> = vbeta.iter().map(|&x| x as f32).collect();
            parallel::install(|| {
                rows.par_chunks(PRODUCT_CHUNK)
                    .map(|chunk| {
                        let mut acc = vec![0.0f32; m];
                        let mut intercept = 0.0;
                        for &(row, w) in chunk {
                            let t = 2.0 * c * w * (f64::from(simd::dot_half(row, &v32)) + vb);
                            simd::axpy_half(t as f32, row, &mut acc);
                            intercept += t;
                        }
                        let mut part: Vec<f64> = acc.iter().map(|&a| f64::from(a)).collect();
                        part.push(intercept);
                        part
                    })
                    .collect()
            })
        }
        SquaredRows::Single(rows) => parallel::install(|| {
            rows.par_chunks(PRODUCT_CHUNK)
                .map(|chunk| {
                    let mut acc = vec![0.0; m + 1];
                    for &(row, w) in chunk {
                        let t = 2.0 * c * w * (simd::dot_narrow(row, vbeta) + vb);
                        simd::axpy_narrow(t, row, &mut acc[..m]);
                        acc[m] += t;
                    }
                    acc
                })
                .collect()
        }),
    };
    conjugate_gradient::symmetric_product(kss, m, vbeta, &mut out[..m]);
    for (o, x) in out[..m].iter_mut().zip(vbeta) {
        *o += ridge * x;
    }
    out[m] = 0.0;
    for part in &parts {
        for (o, a) in out.iter_mut().zip(part) {
            *o += a;
        }
    }
}

/// Adds to `out` (H v from the copied rows) the terms of the squared rows without a copy
/// (`rows`: (row, weight) in row order): their kernel values computed again from the source,
/// in f32 as the gather computes them, rounded to halves when the copies are, so a row adds
/// the same whether it was copied or not. Parts of `PRODUCT_CHUNK` rows in parallel (kernel
/// blocks of `segment_rows` within, for L2 as a pass's segments), added in order: the same sums on any thread count.
/// In waves of whole chunks (`RECOMPUTED_WAVE_VALUES`, the same number per thread), `check`
/// (Ctrl-C) before each.
#[allow(clippy::too_many_arguments)]
fn recomputed_product(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    rows: &[(usize, f64)],
    half: bool,
    c: f64,
    v: &[f64],
    out: &mut [f64],
    check: conjugate_gradient::Check<'_>,
) -> Result<()> {
    let m = blocks.n_basis();
    if m == 0 || rows.is_empty() {
        return Ok(());
    }
    let (vb, vbeta) = (v[m], &v[..m]);
    let v32: Vec<f32> = vbeta.iter().map(|&x| x as f32).collect();
    // Whole chunks, as many per thread: a wave's last chunks do not leave threads idle.
    let threads = rayon::current_num_threads().max(1);
    let chunks = RECOMPUTED_WAVE_VALUES.div_ceil(PRODUCT_CHUNK * m);
    let wave = PRODUCT_CHUNK * chunks.next_multiple_of(threads);
    let mut next = 0;
    source.pass(&mut |first, block| {
        let end = first + block.n_rows();
        let count = rows[next..].partition_point(|&(i, _)| i < end);
        let mine = &rows[next..next + count];
        next += count;
        for mine in mine.chunks(wave) {
            check()?;
            recomputed_wave(blocks, block, first, mine, half, c, (vbeta, &v32, vb), out);
        }
        Ok(())
    })
}

/// `recomputed_product`'s terms of the rows `mine` (of the block whose first row is `first`).
#[allow(clippy::too_many_arguments)]
fn recomputed_wave(
    blocks: &KernelBlocks,
    block: &AnyRows<'_>,
    first: usize,
    mine: &[(usize, f64)],
    half: bool,
    c: f64,
    (vbeta, v32, vb): (&[f64], &[f32], f64),
    out: &mut [f64],
) {
    let m = blocks.n_basis();
    let parts: Vec<Vec<f64>> = parallel::install(|| {
        mine.par_chunks(PRODUCT_CHUNK)
            .map_init(
                || {
                    let buffers = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                    (BlockScratch::default(), buffers)
                },
                |(scratch, (values, halves, index, norms)), chunk| {
                    let mut acc = vec![0.0; m + 1];
                    let mut acc32 = vec![0.0f32; if half { m } else { 0 }];
                    for group in chunk.chunks(segment_rows(m, true)) {
                        index.clear();
                        index.extend(group.iter().map(|&(i, _)| i - first));
                        let subset = SubsetRows::new(block, index).expect("block-local rows");
                        norms.clear();
                        norms.extend((0..group.len()).map(|r| subset.sq_norm(r)));
                        values.resize(group.len() * m, 0.0f32);
                        blocks.fill_rows_f32(&subset, 0..group.len(), norms, values, scratch);
                        for (row, &(_, w)) in values.chunks_exact(m).zip(group) {
                            if half {
                                halves.clear();
                                simd::extend_f16(row, halves);
                                let dot = f64::from(simd::dot_half(halves, v32));
                                let t = 2.0 * c * w * (dot + vb);
                                simd::axpy_half(t as f32, halves, &mut acc32);
                                acc[m] += t;
                            } else {
                                let t = 2.0 * c * w * (simd::dot_narrow(row, vbeta) + vb);
                                simd::axpy_narrow(t, row, &mut acc[..m]);
                                acc[m] += t;
                            }
                        }
                    }
                    if half {
                        for (a, &b) in acc.iter_mut().zip(&acc32) {
                            *a = f64::from(b);
                        }
                    }
                    acc
                },
            )
            .collect()
    });
    for part in &parts {
        for (o, a) in out.iter_mut().zip(part) {
            *o += a;
        }
    }
}

/// K v for each of the vectors `v` (one per listed output): one n-vector per output.
#[allow(clippy::too_many_arguments)]
fn matvec_pass(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    v: &[&[f64]],
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<Vec<Vec<f64>>> {
    let n = source.n_rows();
    let m = blocks.n_basis();
    let q = v.len();
    // Vector-major m x q, for one weighted sum per row.
    let mut coef = vec![0.0; m * q];
    for (k, vk) in v.iter().enumerate() {
        for j in 0..m {
            coef[j * q + k] = vk[j];
        }
    }
    let mut out = vec![vec![0.0; n]; q];
    if m == 0 {
        return Ok(out);
    }
    let level = simd::level();
    let work = |_s: usize, span: Range<usize>, kv: SegmentValues<'_>| -> Vec<f64> {
        let mut r = vec![0.0; span.len() * q];
        let mut wide = vec![0.0; m];
        for (t, o) in r.chunks_mut(q).enumerate() {
            simd::weighted_row_sum(level, &coef, q, kv.row(t, m, &mut wide), o);
        }
        r
    };
    let mut results: Vec<(usize, Vec<f64>)> = Vec::new();
    segment_pass(
        blocks,
        source,
        segments,
        None,
        None,
        &work,
        &mut |s, r| {
            results.push((s, r));
            Ok(())
        },
        passes,
        monitor,
        progress,
    )?;
    for (s, r) in results {
        let span = segments.spans[s].clone();
        for (t, i) in span.enumerate() {
            for k in 0..q {
                out[k][i] = r[t * q + k];
            }
        }
    }
    Ok(out)
}

/// Updates every live output's M, s, u, sw, swy by its changed rows (entering: +, leaving: -),
/// in row order.
#[allow(clippy::too_many_arguments)]
fn gram_pass(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    outputs: &mut [Output],
    changed: &[Vec<Change>],
    weight: &(dyn Fn(usize) -> f64 + Sync),
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<()> {
    let m = blocks.n_basis();
    if m == 0 || changed.iter().all(|c| c.is_empty()) {
        return Ok(());
    }
    // Segments holding changed rows, found after the first pass laid them out.
    let n_seg = segments.spans.len();
    let mut wanted = vec![false; n_seg];
    let seg_of = |i: usize, spans: &[Range<usize>]| spans.partition_point(|s| s.end <= i);
    for c in changed {
        for change in c {
            wanted[seg_of(change.row, &segments.spans)] = true;
        }
    }
    let mut is_changed = vec![false; segments.spans.last().map_or(0, |s| s.end)];
    for c in changed {
        for change in c {
            is_changed[change.row] = true;
        }
    }
    let needed = |i: usize| is_changed[i];
    // Per segment and output: the changed rows.
    let work = |_s: usize, span: Range<usize>, kv: SegmentValues<'_>| -> Vec<ChangedRows> {
        let mut wide = vec![0.0; m];
        changed
            .iter()
            .map(|rows| {
                let a = rows.partition_point(|c| c.row < span.start);
                let b = rows.partition_point(|c| c.row < span.end);
                let mut part = ChangedRows {
                    changes: rows[a..b].to_vec(),
                    values: Vec::with_capacity((b - a) * m),
                };
                for c in &rows[a..b] {
                    let t = c.row - span.start;
                    part.values.extend_from_slice(kv.row(t, m, &mut wide));
                }
                part
            })
            .collect()
    };
    let mut staged: Vec<Staging> = (0..outputs.len()).map(|_| Staging::default()).collect();
    // The parallel part computes kernel rows; the sums are taken here, segment by segment in
    // row order, as each wave's results arrive: holding every changed row's kernel values
    // until the pass ended took (changed rows) x m x 8 bytes, all active rows in the first
    // iteration (1,000,000 rows at B = 10,000: tens of GB).
    segment_pass(
        blocks,
        source,
        segments,
        Some(&wanted),
        Some(&needed),
        &work,
        &mut |_s, per_output| {
            for (k, part) in per_output.into_iter().enumerate() {
                let o = &mut outputs[k];
                for (t, c) in part.changes.iter().enumerate() {
                    let row = &part.values[t * m..(t + 1) * m];
                    let w = weight(c.row);
                    // The counted term leaves and the new one enters.
                    o.sums.add_term(-w, c.counted, row, &mut staged[k]);
                    o.sums.add_term(w, c.now, row, &mut staged[k]);
                    o.counted[c.row] = c.now;
                }
            }
            Ok(())
        },
        passes,
        monitor,
        progress,
    )?;
    for (k, st) in staged.iter_mut().enumerate() {
        st.flush(&mut outputs[k].sums.gram, m);
    }
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
    fn add_term(&mut self, g: f64, term: Term, row: &[f64], staging: &mut Staging) {
        self.add_linear(g, term, row);
        if term.curvature() > 0.0 {
            staging.push(g, row);
            if staging.weights.len() == GRAM_BATCH {
                staging.flush(&mut self.gram, self.s.len());
            }
        }
    }

    /// `add_term` but for M: s and sw count the squares, u and swy every term's right-hand side.
    fn add_linear(&mut self, g: f64, term: Term, row: &[f64]) {
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
struct Staging {
    weights: Vec<f64>,
    rows: Vec<f64>,
}

impl Staging {
    fn push(&mut self, w: f64, row: &[f64]) {
        self.weights.push(w);
        self.rows.extend_from_slice(row);
    }

    /// gram (upper triangle) += sum_r w_r row_r row_r^T, tiles of 8 rows of gram in parallel,
    /// each tile through `simd::dots_8_rows` (the rows play the columns of a product).
    fn flush(&mut self, gram: &mut [f64], m: usize) {
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

/// The minimiser of the quadratic model on the current active set, as a direction from the
/// current point (d, db).
fn newton_direction(
    kss: &[f64],
    o: &mut Output,
    c: f64,
    m: usize,
    check: conjugate_gradient::Check<'_>,
) -> Result<()> {
    let x = newton_point(kss, &o.sums, c, m, o.b, o.ridge_scale, check)?;
    for ((d, xj), bj) in o.d.iter_mut().zip(&x).zip(&o.beta) {
        *d = xj - bj;
    }
    o.db = x[m] - o.b;
    Ok(())
}

fn newton_point(
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

/// Where a row's loss term changes piece along a line search's direction.
struct PieceChange {
    t: f64,
    row: usize,
    /// What phi' = a + b t gains there: the entered piece's part less the left one's.
    da: f64,
    db: f64,
}

/// The order a line search walks the changes in (a total order: rows break ties in t).
fn walk_order(x: &PieceChange, y: &PieceChange) -> std::cmp::Ordering {
    x.t.total_cmp(&y.t).then(x.row.cmp(&y.row))
}

/// The smallest changes first: a line search's root is mostly among them.
const WALK_FIRST: usize = 256;

/// The step t > 0 minimising the objective along (d, db) exactly: the derivative
/// phi'(t) = beta^T K d + t d^T K d + 2C sum_i w delta_i half_slope_i(f_i + t delta_i)
/// is piecewise linear and increasing, its pieces changing where a row's value crosses one of
/// its boundaries (`Targets::boundaries`). Those steps are sorted and swept in order, phi'
/// kept as a + b t between them, until it turns non-negative: the root is then exact, in
/// O(n log n) whatever the number of pieces (a root-finder on phi' needs an O(n) evaluation
/// per step, and many steps where the smoothed hinge's bends are dense). The steps up to the
/// full one come first, those beyond only while phi' is still negative at t = 1: most rows'
/// changes lie far beyond it (sorting them all took a tenth of the million-row checkerboard's
/// polish).
/// Returns exactly 1 when the full step is the minimiser to rounding.
fn line_search(
    kss: &[f64],
    o: &Output,
    c: f64,
    term: &TermAt<'_>,
    boundaries: &(dyn Fn(usize) -> [f64; 2] + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
    exact_step: bool,
) -> f64 {
    let (f, delta) = (&o.f, &o.delta);
    let n = f.len();
    // Rows in one piece at both ends of the full step are in it all along (the pieces are
    // intervals of f): if no row changes piece between t = 0 and t = 1, the objective is
    // quadratic on the whole step, and a Newton system's step (`exact_step`: the minimiser of
    // that quadratic) is its minimiser, t = 1 (this also settles the last, tiny steps that the
    // slope's rounding could not). A Hessian-free step: below.
    let flips = chunked_sum(n, &|r| {
        let mut count = 0.0;
        for i in r {
            if term(i, f[i]) != term(i, f[i] + delta[i]) {
                count += 1.0;
            }
        }
        [count, 0.0]
    })[0];
    if flips == 0.0 && exact_step {
        return 1.0;
    }
    let dkd = quad_form(kss, &o.d, &o.d);
    let bkd = quad_form(kss, &o.beta, &o.d);
    // A row's part of phi' = a + b t while it stays in one piece (before the factor 2C w).
    let part = |i: usize, piece: Term| -> (f64, f64) {
        let d = delta[i];
        match piece {
            Term::Zero => (0.0, 0.0),
            Term::Square { r } => (d * (f[i] - r), d * d),
            Term::Tangent { r, e } => (d * (e - r), 0.0),
        }
    };
    // phi' at t = 0 (summed in row order).
    let (mut a, mut b) = (bkd, dkd);
    for (i, &fi) in f.iter().enumerate() {
        let w2c = 2.0 * c * weight(i);
        let (pa, pb) = part(i, term(i, fi));
        a += w2c * pa;
        b += w2c * pb;
    }
    if a >= 0.0 {
        // Not a descent direction (converged to rounding).
        return 0.0;
    }
    if flips == 0.0 {
        // A Hessian-free step is the minimiser for the Hessian its products used (the
        // squared rows rounded to halves or f32): t = 1 up to that rounding's share of the
        // curvature along it, which on a basis whose kernel values all lie near 1 (a9a's
        // gamma) can be large. Cut where the minimiser -a / b is short of half the step; from
        // half on, the full step lowers the objective too, and it is taken as the Newton
        // system's is (never longer: along K_SS's near-null directions the quadratic is
        // nearly flat, and its minimiser can lie 1e8 steps out for a gain of 1e-7).
        let t = -a / b;
        return if b > 0.0 && t < 0.5 { t } else { 1.0 };
    }
    // The steps in (lo, hi] where a row changes piece, with what phi' gains there from the
    // piece it leaves to the one it enters (each entered piece found at the middle of the next
    // interval, so rounding at a boundary cannot misplace it). Most rows' changes lie far
    // beyond the full step, so those up to t = 1 are walked first, the others only if phi' is
    // still negative there; and the root is mostly among the first changes, so they are put
    // in order a doubling share at a time (a selection, then a sort of the share), not all.
    let changes_in = |lo: f64, hi: f64| -> Vec<PieceChange> {
        let chunks = n.div_ceil(SUM_CHUNK);
        let parts: Vec<Vec<PieceChange>> = parallel::install(|| {
            (0..chunks)
                .into_par_iter()
                .map(|ch| {
                    let mut found = Vec::new();
                    for i in ch * SUM_CHUNK..((ch + 1) * SUM_CHUNK).min(n) {
                        let d = delta[i];
                        if d == 0.0 {
                            continue;
                        }
                        let mut ts = boundaries(i).map(|v| (v - f[i]) / d);
                        ts.sort_by(f64::total_cmp);
                        let mut leaves = term(i, f[i]);
                        for (j, &t) in ts.iter().enumerate() {
                            if !(t > 0.0 && t.is_finite()) {
                                continue;
                            }
                            let next = match ts.get(j + 1) {
                                Some(&u) if u > 0.0 && u.is_finite() => 0.5 * (t + u),
                                _ => t + 1.0,
                            };
                            let enters = term(i, f[i] + next * d);
                            if t > lo && t <= hi {
                                let w2c = 2.0 * c * weight(i);
                                let (la, lb) = part(i, leaves);
                                let (ea, eb) = part(i, enters);
                                found.push(PieceChange {
                                    t,
                                    row: i,
                                    da: w2c * (ea - la),
                                    db: w2c * (eb - lb),
                                });
                            }
                            leaves = enters;
                        }
                    }
                    found
                })
                .collect()
        });
        parts.into_iter().flatten().collect()
    };
    let mut t_lo = 0.0;
    let mut root = f64::NAN;
    'walk: for (lo, hi) in [(0.0, 1.0), (1.0, f64::INFINITY)] {
        let mut changes = changes_in(lo, hi);
        let (mut from, mut share) = (0, WALK_FIRST);
        while from < changes.len() {
            let rest = &mut changes[from..];
            let k = share.min(rest.len());
            if k < rest.len() {
                rest.select_nth_unstable_by(k - 1, walk_order);
            }
            rest[..k].sort_unstable_by(walk_order);
            for change in &rest[..k] {
                // phi' is a + b t on [t_lo, t]; its root there ends the search.
                if a + b * change.t >= 0.0 {
                    root = if b > 0.0 {
                        (-a / b).max(t_lo)
                    } else {
                        change.t
                    };
                    break 'walk;
                }
                a += change.da;
                b += change.db;
                t_lo = change.t;
            }
            from += k;
            share *= 2;
        }
        if a + b * hi >= 0.0 {
            // The root lies before the next interval's first change.
            break;
        }
    }
    if root.is_nan() {
        // Past the last change phi' is linear with slope dkd + 2C (squares) > 0 unless no
        // curvature is left; then the last change is as far as the model can tell.
        root = if b > 0.0 { (-a / b).max(t_lo) } else { t_lo };
    }
    if (root - 1.0).abs() <= 1e-12 {
        return 1.0;
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budgeted::problem::HINGE_BEND;
    use crate::core::common::progress::no_monitor;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::DenseView;
    use crate::core::data::sv_matrix::SvMatrix;
    use crate::core::kernels::kernel_block::kernel_matrix;

    /// A small binary problem: rows in [-1, 1]^2 labelled by a circle, and a basis of rows.
    fn problem(
        seed: u64,
        n: usize,
        m: usize,
        n_classes: usize,
    ) -> (Vec<f64>, Vec<u32>, BudgetModel) {
        let mut rng = Rng::new(seed);
        let x: Vec<f64> = (0..n * 2).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
        let y: Vec<u32> = (0..n)
            .map(|i| {
                let r = x[2 * i].powi(2) + x[2 * i + 1].powi(2);
                let class = if n_classes == 2 {
                    u32::from(r < 0.5)
                } else {
                    ((r * n_classes as f64 * 0.7) as u32).min(n_classes as u32 - 1)
                };
                // 5% label noise.
                if rng.next_f64() < 0.05 {
                    (class + 1) % n_classes as u32
                } else {
                    class
                }
            })
            .collect();
        let sv: Vec<f64> = x[..m * 2].to_vec();
        let n_out = if n_classes == 2 { 1 } else { n_classes };
        let coef: Vec<f64> = (0..m * n_out).map(|_| rng.next_f64() - 0.5).collect();
        let model = BudgetModel {
            dim: 2,
            n_out,
            gamma: 2.0,
            support_vectors: SvMatrix::Dense(sv),
            coef,
        };
        (x, y, model)
    }

    /// The line search's step against the objective along the direction minimised by a
    /// ternary search (it is convex): classes and values, steps short of and beyond the full
    /// one, rows in several chunks, weights.
    #[test]
    fn line_search_finds_the_minimum_along_the_direction() {
        let (mut steps, mut walked) = (Vec::new(), Vec::new());
        for (seed, regression, scale) in [
            (1u64, false, 1.0),
            (2, false, 0.05),
            (3, false, 20.0),
            (4, true, 1.0),
            (5, true, 0.02),
            (6, true, 10.0),
        ] {
            let mut rng = Rng::new(seed);
            let (n, m, c) = (3 * SUM_CHUNK + 17, 6, 0.7);
            let a: Vec<f64> = (0..m * m).map(|_| rng.next_f64() - 0.5).collect();
            let mut kss = vec![0.0; m * m];
            for i in 0..m {
                for j in 0..m {
                    kss[i * m + j] = (0..m).map(|l| a[i * m + l] * a[j * m + l]).sum::<f64>();
                }
            }
            let classes: Vec<u32> = (0..n).map(|_| u32::from(rng.next_f64() < 0.4)).collect();
            let values: Vec<f64> = (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
            let targets = if regression {
                Targets::Values {
                    y: &values,
                    epsilon: 0.1,
                }
            } else {
                Targets::classes(&classes, 2)
            };
            let w: Vec<f64> = (0..n).map(|_| 0.5 + rng.next_f64()).collect();
            let beta = (0..m).map(|_| rng.next_f64() - 0.5).collect();
            let o = Output {
                f: (0..n).map(|_| 3.0 * rng.next_f64() - 1.5).collect(),
                // Rows move towards their targets on the whole, as along a Newton direction.
                delta: (0..n)
                    .map(|i| {
                        let aim = if regression {
                            values[i]
                        } else {
                            2.0 * f64::from(classes[i]) - 1.0
                        };
                        scale * (0.3 * aim + 0.4 * (rng.next_f64() - 0.5))
                    })
                    .collect(),
                d: (0..m).map(|_| scale * (rng.next_f64() - 0.5)).collect(),
                ..Output::at(beta, 0.0, n)
            };
            let term = |i: usize, v: f64| targets.term(0, i, v);
            let weight = |i: usize| w[i];
            let along = |t: f64| {
                let beta: Vec<f64> = o.beta.iter().zip(&o.d).map(|(b, d)| b + t * d).collect();
                let f: Vec<f64> = o.f.iter().zip(&o.delta).map(|(f, d)| f + t * d).collect();
                objective(&kss, &beta, &f, c, &term, &weight)
            };
            let boundaries = |i| targets.boundaries(0, i);
            let t = line_search(&kss, &o, c, &term, &boundaries, &weight, false);
            let (mut lo, mut hi) = (0.0, 1e3);
            for _ in 0..300 {
                let (p, q) = (lo + (hi - lo) / 3.0, hi - (hi - lo) / 3.0);
                if along(p) < along(q) {
                    hi = q;
                } else {
                    lo = p;
                }
            }
            let best = 0.5 * (lo + hi);
            let (at_t, at_best) = (along(t), along(best));
            assert!(
                at_t <= at_best + 1e-10 * at_best.abs(),
                "seed {seed}: t = {t} gives {at_t}, t = {best} gives {at_best}"
            );
            assert!(
                (t - best).abs() <= 1e-6 * best.max(1.0),
                "seed {seed}: {t} vs {best}"
            );
            assert!(t > 0.0 && t.is_finite(), "seed {seed}: {t}");
            steps.push(t);
            // The changes walked before the root.
            walked.push(
                (0..n)
                    .map(|i| {
                        let ts = targets.boundaries(0, i).map(|v| (v - o.f[i]) / o.delta[i]);
                        ts.iter().filter(|&&s| s > 0.0 && s < t).count()
                    })
                    .sum::<usize>(),
            );
        }
        // Both of the search's intervals were walked: steps short of the full one and beyond;
        // and some searches put several doubling shares of their changes in order.
        assert!(
            steps.iter().any(|&t| t < 1.0) && steps.iter().any(|&t| t > 1.0),
            "{steps:?}"
        );
        assert!(walked.iter().all(|&w| w > 4 * WALK_FIRST), "{walked:?}");
    }

    /// A start where no row's term is squared (every row beyond its margin or on its
    /// tangent): the objective is linear in b there, and the Hessian-free solve keeps b for
    /// that direction, as the Newton system's does (its intercept's part of the direction was
    /// infinite), and reaches the Newton system's optimum.
    #[test]
    fn a_start_with_no_squared_row_keeps_the_intercept() {
        let (n, m, seed) = (600, 40, 24);
        let (x, y, mut model) = problem(seed, n, m, 2);
        model.coef.iter_mut().for_each(|v| *v *= 1e4);
        let (k, _) = explicit_kernels(&x, n, &model);
        let targets = Targets::classes(&y, 2);
        let squared = (0..n)
            .filter(|&i| {
                let f: f64 = (0..m).map(|j| k[i * m + j] * model.coef[j]).sum();
                targets.term(0, i, f).curvature() > 0.0
            })
            .count();
        assert_eq!(squared, 0);
        // (a9a's C is 32; its first step, at B = 1,000, left no row squared.)
        for c in [1.0, 32.0] {
            let solve = |method| {
                let mut p = params(c);
                p.method = method;
                p.sample_start = false;
                run(&x, &y, None, 2, &model, &p)
            };
            let newton = solve(PolishMethod::Newton);
            let free = solve(PolishMethod::HessianFree);
            assert!(free.cg_products > 0);
            assert_same_optimum(&x, &model, &free, &newton, seed);
        }
    }

    /// A step along which no row changes piece: the Newton system's (the quadratic's minimiser)
    /// is taken whole, a Hessian-free one cut to the minimiser (it may overshoot it).
    #[test]
    fn a_step_past_the_minimiser_is_cut_unless_it_is_the_newton_step() {
        let (n, c) = (50, 1.0);
        let kss = vec![2.0, 0.5, 0.1, 0.5, 1.5, 0.2, 0.1, 0.2, 1.0];
        let classes: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let targets = Targets::classes(&classes, 2);
        let beta = vec![0.3, -0.2, 0.4];
        let o = Output {
            // Three times the step to beta's minimiser along -beta: the minimiser is t = 1/3.
            d: beta.iter().map(|b| -3.0 * b).collect(),
            // Every row far beyond its margin and moving by a hair: no loss along the step.
            f: (0..n)
                .map(|i| if i % 2 == 1 { 5.0 } else { -5.0 })
                .collect(),
            delta: vec![1e-9; n],
            ..Output::at(beta.clone(), 0.0, n)
        };
        let term = |i: usize, v: f64| targets.term(0, i, v);
        let boundaries = |i| targets.boundaries(0, i);
        let cut = line_search(&kss, &o, c, &term, &boundaries, &|_| 1.0, false);
        assert!((cut - 1.0 / 3.0).abs() < 1e-12, "{cut}");
        let whole = line_search(&kss, &o, c, &term, &boundaries, &|_| 1.0, true);
        assert_eq!(whole, 1.0);
    }

    /// The kernel matrices of a [`problem`] written out: rows x SVs and SVs x SVs.
    /// The smooth function the regression tests fit: sin(3 x_0) + x_1^2 of each 2-column row.
    fn regression_values(x: &[f64]) -> Vec<f64> {
        x.chunks_exact(2)
            .map(|r| (3.0 * r[0]).sin() + r[1] * r[1])
            .collect()
    }

    /// A test's targets: `classes` classes, or (0) a regression on `z` with epsilon 0.05.
    fn test_targets<'a>(classes: usize, y: &'a [u32], z: &'a [f64]) -> Targets<'a> {
        if classes == 0 {
            Targets::Values {
                y: z,
                epsilon: 0.05,
            }
        } else {
            Targets::classes(y, classes)
        }
    }

    fn explicit_kernels(x: &[f64], n: usize, model: &BudgetModel) -> (Vec<f64>, Vec<f64>) {
        let m = model.n_sv();
        let xv = DenseView::new(x, n, 2).unwrap();
        let SvMatrix::Dense(sv) = &model.support_vectors else {
            unreachable!()
        };
        let s = DenseView::new(sv, m, 2).unwrap();
        let mut k = vec![0.0; n * m];
        kernel_matrix(&xv, &s, model.gamma, &mut k).unwrap();
        let mut kss = vec![0.0; m * m];
        kernel_matrix(&s, &s, model.gamma, &mut kss).unwrap();
        (k, kss)
    }

    fn params(c: f64) -> PolishParams {
        PolishParams {
            c,
            tol: 0.0,
            max_iter: 100,
            cache_bytes: 1 << 30,
            method: PolishMethod::Newton,
            hessian_free_basis: HESSIAN_FREE_BASIS,
            sample_start: true,
        }
    }

    fn run(
        x: &[f64],
        y: &[u32],
        w: Option<&[f64]>,
        k: usize,
        model: &BudgetModel,
        p: &PolishParams,
    ) -> PolishResult {
        let n = y.len();
        let view = DenseView::new(x, n, 2).unwrap();
        let mut source = InMemory(AnyRows::Dense(view));
        let targets = Targets::Classes { y, n_classes: k };
        polish(model, None, &mut source, targets, w, p, &mut no_monitor).unwrap()
    }

    /// The gradient of the objective in (beta, b) at the solution is zero: an independent
    /// check from the explicit kernel matrices, with the loss written in the margin.
    #[test]
    fn solution_satisfies_the_optimality_conditions() {
        for (seed, n, m, c, weighted) in [
            (1, 300, 20, 1.0, false),
            (2, 500, 40, 10.0, true),
            (3, 200, 60, 0.1, false),
        ] {
            let (x, y, model) = problem(seed, n, m, 2);
            let mut rng = Rng::new(seed + 100);
            let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
            let w = weighted.then_some(&w[..]);
            let r = run(&x, &y, w, 2, &model, &params(c));
            assert!(r.converged);
            let (k, kss) = explicit_kernels(&x, n, &model);
            let beta = &r.coef;
            let b = r.intercept[0];
            let mut grad: Vec<f64> = (0..m)
                .map(|j| (0..m).map(|l| kss[j * m + l] * beta[l]).sum())
                .collect();
            let mut gb = 0.0;
            for i in 0..n {
                let yi = if y[i] == 1 { 1.0 } else { -1.0 };
                let fi: f64 = (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b;
                // The smoothed hinge written in the margin: (1 - margin)^2 above the bend,
                // linear with slope 2 HINGE_BEND below it; its derivative in f times y.
                let xi = 1.0 - yi * fi;
                let dloss = if xi <= 0.0 {
                    0.0
                } else if xi < HINGE_BEND {
                    2.0 * xi
                } else {
                    2.0 * HINGE_BEND
                };
                let wi = w.map_or(1.0, |w| w[i]);
                for j in 0..m {
                    grad[j] -= c * wi * yi * dloss * k[i * m + j];
                }
                gb -= c * wi * yi * dloss;
            }
            // Relative to the size of the loss term.
            let scale = 2.0 * c * n as f64;
            let worst = grad.iter().map(|g| g.abs()).fold(gb.abs(), f64::max);
            assert!(worst < 1e-9 * scale, "seed {seed}: gradient {worst}");
            assert!(r.objective[0] <= r.objective_start[0]);
        }
    }

    /// Regression: at the solution the gradient of 1/2 beta K beta + C sum w max(0, |f - y| -
    /// eps)^2, written out from the explicit kernel matrices, is zero; the objective is below
    /// the start and below any random perturbation of the solution.
    #[test]
    fn regression_solution_satisfies_the_optimality_conditions() {
        for (seed, n, m, c, epsilon, weighted) in [
            (11, 300, 20, 1.0, 0.1, false),
            (12, 500, 40, 10.0, 0.05, true),
            (13, 200, 60, 0.1, 0.0, false),
            (14, 400, 30, 100.0, 0.3, true),
        ] {
            let (x, _, mut model) = problem(seed, n, m, 2);
            let mut rng = Rng::new(seed + 100);
            let z: Vec<f64> = (0..n)
                .map(|i| {
                    let (a, b) = (x[2 * i], x[2 * i + 1]);
                    (3.0 * a).sin() + b * b + 0.2 * (rng.next_f64() - 0.5) + 5.0
                })
                .collect();
            // A start far from the solution, with rows on both sides of the tube.
            model.coef.iter_mut().for_each(|v| *v *= 4.0);
            let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
            let w = weighted.then_some(&w[..]);
            let view = DenseView::new(&x, n, 2).unwrap();
            let mut source = InMemory(AnyRows::Dense(view));
            let targets = Targets::Values { y: &z, epsilon };
            let r = polish(
                &model,
                None,
                &mut source,
                targets,
                w,
                &params(c),
                &mut no_monitor,
            )
            .unwrap();
            assert!(r.converged, "seed {seed}");
            let (k, kss) = explicit_kernels(&x, n, &model);
            let value = |beta: &[f64], b: f64| -> (f64, Vec<f64>, f64) {
                let mut grad: Vec<f64> = (0..m)
                    .map(|j| (0..m).map(|l| kss[j * m + l] * beta[l]).sum())
                    .collect();
                let mut obj = 0.5 * (0..m).map(|j| beta[j] * grad[j]).sum::<f64>();
                let mut gb = 0.0;
                for i in 0..n {
                    let fi: f64 = (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b;
                    let excess = (fi - z[i]).abs() - epsilon;
                    if excess > 0.0 {
                        let wi = w.map_or(1.0, |w| w[i]);
                        let e = excess * (fi - z[i]).signum();
                        obj += c * wi * excess * excess;
                        for j in 0..m {
                            grad[j] += 2.0 * c * wi * e * k[i * m + j];
                        }
                        gb += 2.0 * c * wi * e;
                    }
                }
                (obj, grad, gb)
            };
            let (obj, grad, gb) = value(&r.coef, r.intercept[0]);
            let scale = 2.0 * c * n as f64;
            let worst = grad.iter().map(|g| g.abs()).fold(gb.abs(), f64::max);
            assert!(worst < 1e-9 * scale, "seed {seed}: gradient {worst}");
            assert!(
                (obj - r.objective[0]).abs() <= 1e-9 * obj.max(1.0),
                "seed {seed}"
            );
            assert!(r.objective[0] < r.objective_start[0]);
            for _ in 0..20 {
                let beta: Vec<f64> = r
                    .coef
                    .iter()
                    .map(|v| v + 1e-3 * (rng.next_f64() - 0.5))
                    .collect();
                let b = r.intercept[0] + 1e-3 * (rng.next_f64() - 0.5);
                assert!(
                    value(&beta, b).0 >= obj - 1e-12 * obj.max(1.0),
                    "seed {seed}"
                );
            }
        }
    }

    /// The Hessian-free solve reaches the Newton system's optimum (objective and decision
    /// values; it works on kernel values rounded to f32, hence 1e-5 and not rounding),
    /// classes (two and three, weighted or not) and regression, and gives the same bits on
    /// any thread count and cache size.
    #[test]
    fn hessian_free_reaches_the_newton_optimum() {
        for (seed, n, m, classes, c, weighted) in [
            (21, 600, 40, 2, 1.0, false),
            (22, 900, 60, 3, 5.0, true),
            (23, 500, 25, 0, 2.0, false),
        ] {
            let (x, y, mut model) = problem(seed, n, m, classes.max(2));
            let z = regression_values(&x);
            let mut rng = Rng::new(seed);
            let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
            let w = weighted.then_some(&w[..]);
            if classes == 0 {
                model.coef.iter_mut().for_each(|v| *v *= 3.0);
            }
            let solve = |method, cache_bytes, threads| {
                let view = DenseView::new(&x, n, 2).unwrap();
                let mut source = InMemory(AnyRows::Dense(view));
                let targets = test_targets(classes, &y, &z);
                let mut p = params(c);
                p.method = method;
                p.cache_bytes = cache_bytes;
                parallel::install_with(Some(threads), || {
                    polish(&model, None, &mut source, targets, w, &p, &mut no_monitor)
                })
                .unwrap()
                .unwrap()
            };
            let newton = solve(PolishMethod::Newton, 1 << 30, 2);
            let free = solve(PolishMethod::HessianFree, 1 << 30, 2);
            assert!(free.cg_products > 0 && newton.cg_products == 0);
            assert_same_optimum(&x, &model, &free, &newton, seed);
            // The squared rows' copies and the cache share the budget: whatever it is, the
            // same solution (the same bits while the copies fit; the same optimum when some
            // rows are computed again by each product), within the budget.
            let squared = free.squared_rows * m * 4;
            for (cache, threads) in [
                (segment_rows(m, true) * m * 8, 1),
                (squared + segment_rows(m, true) * m * 4, 2),
                (squared / 2, 1),
                (0, 3),
            ] {
                let again = solve(PolishMethod::HessianFree, cache, threads);
                if again.recomputed_rows == 0 {
                    assert_eq!(again.coef, free.coef, "seed {seed}");
                    assert_eq!(again.intercept, free.intercept, "seed {seed}");
                } else {
                    assert_same_optimum(&x, &model, &again, &free, seed);
                }
                assert!(
                    again.kept_bytes <= cache.max(squared),
                    "seed {seed} cache {cache}"
                );
            }
            assert!(free.kept_bytes <= (n + free.squared_rows) * m * 4 && free.squared_rows > 0);
        }
    }

    /// The Hessian-free solve starts from the start's best multiple when that gains at least
    /// `SCALED_START_GAIN` (gathering the rows again there), and from the start itself
    /// otherwise; either way it reaches the Newton solve's optimum (two and three classes).
    #[test]
    fn a_start_far_off_in_scale_is_rescaled_before_the_hessian_free_solve() {
        for (seed, classes, scale) in [(31, 2, 40.0), (32, 3, 0.02), (33, 3, 40.0)] {
            let (n, m, c) = (700, 30, 2.0);
            let (x, y, mut model) = problem(seed, n, m, classes);
            let z = regression_values(&x);
            let targets = test_targets(classes, &y, &z);
            let solve = |model: &BudgetModel, intercept: Option<&[f64]>, method| {
                let view = DenseView::new(&x, n, 2).unwrap();
                let mut p = params(c);
                p.method = method;
                polish(
                    model,
                    intercept,
                    &mut InMemory(AnyRows::Dense(view)),
                    targets,
                    None,
                    &p,
                    &mut no_monitor,
                )
                .unwrap()
            };
            // Where the start is the solution, its best multiple gains less than the share:
            // the solve starts from it as given (its objective from the f32 kernel values).
            let newton = solve(&model, None, PolishMethod::Newton);
            let mut solved = model.clone();
            solved.coef.clone_from(&newton.coef);
            let kept = solve(&solved, Some(&newton.intercept), PolishMethod::HessianFree);
            for (o, (&a, &b)) in kept
                .objective_start
                .iter()
                .zip(&newton.objective)
                .enumerate()
            {
                assert!(
                    (a - b).abs() <= 1e-6 * b,
                    "seed {seed} output {o}: {a} != {b}"
                );
            }
            model.coef.iter_mut().for_each(|v| *v *= scale);
            let (k, kss) = explicit_kernels(&x, n, &model);
            let q = model.n_out;
            let raw: Vec<f64> = (0..q)
                .map(|o| {
                    let beta: Vec<f64> = (0..m).map(|j| model.coef[j * q + o]).collect();
                    let f: Vec<f64> = (0..n)
                        .map(|i| (0..m).map(|j| k[i * m + j] * beta[j]).sum())
                        .collect();
                    let term = |i: usize, v: f64| targets.term(o, i, v);
                    objective(&kss, &beta, &f, c, &term, &|_| 1.0)
                })
                .collect();
            let free = solve(&model, None, PolishMethod::HessianFree);
            let rescaled = free
                .objective_start
                .iter()
                .zip(&raw)
                .any(|(&a, &r)| a <= (1.0 - SCALED_START_GAIN) * r);
            assert!(
                rescaled,
                "seed {seed}: {:?} from {raw:?}",
                free.objective_start
            );
            assert!(free
                .objective_start
                .iter()
                .zip(&raw)
                .all(|(&a, &r)| a <= r * (1.0 + 1e-6)));
            assert_same_optimum(
                &x,
                &model,
                &free,
                &solve(&model, None, PolishMethod::Newton),
                seed,
            );
        }
    }

    /// `Auto`'s Hessian-free solve forms the Newton system once its directions have cost what
    /// forming it does (m / 4 products per output: a few directions at m = 40 and 60), and
    /// then reaches the Newton optimum, the same on any thread count; below its basis size
    /// `Auto` is the Newton solve.
    #[test]
    fn hessian_free_forms_the_system_when_it_stalls() {
        for (seed, n, m, classes, c) in [(41, 600, 40, 2, 1.0), (42, 900, 60, 3, 5.0)] {
            let (x, y, model) = problem(seed, n, m, classes);
            let solve = |method, basis, threads| {
                let view = DenseView::new(&x, n, 2).unwrap();
                let mut source = InMemory(AnyRows::Dense(view));
                let mut p = params(c);
                p.method = method;
                p.hessian_free_basis = basis;
                let targets = Targets::classes(&y, classes);
                parallel::install_with(Some(threads), || {
                    polish(
                        &model,
                        None,
                        &mut source,
                        targets,
                        None,
                        &p,
                        &mut no_monitor,
                    )
                })
                .unwrap()
                .unwrap()
            };
            let newton = solve(PolishMethod::Newton, 0, 2);
            let auto = solve(PolishMethod::Auto, 1, 2);
            assert!(auto.cg_products > 0, "seed {seed}");
            assert!(
                auto.system_from > 1 && auto.active_changes > 0,
                "seed {seed}"
            );
            assert!(
                auto.converged && auto.iterations > auto.system_from,
                "seed {seed}"
            );
            assert_same_optimum(&x, &model, &auto, &newton, seed);
            let again = solve(PolishMethod::Auto, 1, 1);
            assert_eq!(again.coef, auto.coef, "seed {seed}");
            assert_eq!(again.intercept, auto.intercept, "seed {seed}");
            let below = solve(PolishMethod::Auto, m + 1, 2);
            assert_eq!(
                (below.cg_products, below.system_from),
                (0, 0),
                "seed {seed}"
            );
            assert_eq!(below.coef, newton.coef, "seed {seed}");
        }
    }

    /// `a` reaches `b`'s optimum: the objective to 1e-5 relative, the decision values on the
    /// rows `x` (two columns) to 1e-3, per output.
    fn assert_same_optimum(
        x: &[f64],
        model: &BudgetModel,
        a: &PolishResult,
        b: &PolishResult,
        seed: u64,
    ) {
        let (n, m, q) = (x.len() / 2, model.n_sv(), model.n_out);
        let (k, _) = explicit_kernels(x, n, model);
        for o in 0..q {
            let rel = (a.objective[o] - b.objective[o]).abs() / b.objective[o];
            assert!(rel < 1e-5, "seed {seed} output {o}: {rel}");
            let value = |r: &PolishResult, i: usize| {
                (0..m)
                    .map(|j| k[i * m + j] * r.coef[j * q + o])
                    .sum::<f64>()
                    + r.intercept[o]
            };
            let worst = (0..n)
                .map(|i| (value(a, i) - value(b, i)).abs())
                .fold(0.0, f64::max);
            assert!(
                worst < 1e-3,
                "seed {seed} output {o}: decision values differ by {worst}"
            );
        }
    }

    /// A short step's `step_pass` gathers at its point what a pass there does (`gather_pass`
    /// at the current point): the gradient to rounding, the same squared rows with the same
    /// weights and kernel values (copies placed where the full step's no longer serve), for
    /// two and three classes, one output's step short and another's full, the segments cached
    /// or computed, the copies within the budget or none at all.
    #[test]
    fn a_short_step_gathers_what_a_pass_at_its_point_does() {
        let (n, m) = (700, 25);
        for (seed, classes) in [(61, 2), (62, 3)] {
            let (x, y, model) = problem(seed, n, m, classes);
            let targets = Targets::classes(&y, classes);
            let q = targets.n_out();
            let term = |k: usize, i: usize, f: f64| targets.term(k, i, f);
            let weight = |i: usize| 1.0 + (i % 3) as f64 * 0.5;
            let blocks = KernelBlocks::from_sv_matrix(
                &model.support_vectors,
                m,
                model.dim,
                Kernel::rbf(model.gamma),
            )
            .unwrap();
            let mut rng = Rng::new(seed);
            for (cache_left, budget, half) in
                [(1 << 30, 1 << 30, false), (0, 1 << 30, true), (0, 0, false)]
            {
                let view = DenseView::new(&x, n, 2).unwrap();
                let mut source = InMemory(AnyRows::Dense(view));
                let mut segments = Segments {
                    spans: Vec::new(),
                    cache: Vec::new(),
                    cache_left,
                    budget,
                    single: true,
                    kernel_seconds: 0.0,
                };
                let mut outputs: Vec<Output> = (0..q)
                    .map(|k| Output {
                        d: (0..m).map(|_| rng.next_f64() - 0.5).collect(),
                        db: 0.2,
                        ..Output::at((0..m).map(|j| model.coef[j * q + k]).collect(), 0.1, n)
                    })
                    .collect();
                let all: Vec<usize> = (0..q).collect();
                let mut passes = 0;
                let copies = if budget == 0 { 0 } else { usize::MAX };
                let gather = |source: &mut InMemory<'_>,
                              segments: &mut Segments,
                              passes: &mut usize,
                              outputs: &[Output],
                              points: Option<&[(Vec<f64>, f64)]>| {
                    gather_pass(
                        &blocks,
                        source,
                        segments,
                        outputs,
                        &all,
                        points,
                        half,
                        &|_| 0,
                        &|_| copies,
                        &term,
                        &weight,
                        passes,
                        &mut no_monitor,
                        &Progress::default(),
                    )
                    .unwrap()
                };
                let here: Vec<(Vec<f64>, f64)> =
                    outputs.iter().map(|o| (o.beta.clone(), o.b)).collect();
                let values = gather(
                    &mut source,
                    &mut segments,
                    &mut passes,
                    &outputs,
                    Some(&here),
                )
                .1;
                for (o, f) in outputs.iter_mut().zip(values) {
                    o.f = f;
                }
                let full: Vec<(Vec<f64>, f64)> = outputs
                    .iter()
                    .map(|o| {
                        (
                            o.beta.iter().zip(&o.d).map(|(b, d)| b + d).collect(),
                            o.b + o.db,
                        )
                    })
                    .collect();
                let (at_full, values) = gather(
                    &mut source,
                    &mut segments,
                    &mut passes,
                    &outputs,
                    Some(&full),
                );
                // Output 0 steps 0.4 of the way, the last one (of three) 0.7, the rest fully.
                let mut steps = Vec::new();
                for (k, (o, v)) in outputs.iter_mut().zip(values).enumerate() {
                    o.delta = v.iter().zip(&o.f).map(|(v, f)| v - f).collect();
                    let t = match k {
                        0 => 0.4,
                        2 => 0.7,
                        _ => 1.0,
                    };
                    let f_before = o.f.clone();
                    o.f.iter_mut().zip(&o.delta).for_each(|(f, d)| *f += t * d);
                    o.beta.iter_mut().zip(&o.d).for_each(|(b, d)| *b += t * d);
                    o.b += t * o.db;
                    if t != 1.0 {
                        steps.push(ShortStep {
                            output: k,
                            t,
                            f_before,
                        });
                    }
                }
                let flips = (0..n)
                    .filter(|&i| term(0, i, steps[0].f_before[i]) != term(0, i, outputs[0].f[i]))
                    .count();
                assert!(flips > 10, "seed {seed}: {flips} rows change piece");
                let stepped = step_pass(
                    &blocks,
                    &mut source,
                    &mut segments,
                    at_full,
                    &outputs,
                    &steps,
                    budget,
                    &term,
                    &weight,
                    &mut passes,
                    &mut no_monitor,
                    &Progress::default(),
                )
                .unwrap();
                let (fresh, _) = gather(&mut source, &mut segments, &mut passes, &outputs, None);
                assert_eq!(stepped.n_rows, fresh.n_rows, "seed {seed}");
                assert_eq!(stepped.n_recomputed, fresh.n_recomputed, "seed {seed}");
                for k in 0..q {
                    let (a, b) = (stepped.place(k), fresh.place(k));
                    let scale = fresh.gradient[b].iter().fold(1.0f64, |s, v| s.max(v.abs()));
                    for (u, v) in stepped.gradient[a].iter().zip(&fresh.gradient[b]) {
                        assert!(
                            (u - v).abs() <= 1e-12 * scale,
                            "seed {seed} output {k}: {u} {v}"
                        );
                    }
                    assert!((stepped.weight[a] - fresh.weight[b]).abs() <= 1e-12 * fresh.weight[b]);
                    let mut recomputed = stepped.recomputed[a].clone();
                    recomputed.sort_by_key(|&(i, _)| i);
                    assert_eq!(recomputed, fresh.recomputed[b]);
                    // The same rows, their weights and their kernel values as copied.
                    let rows = |g: &Gathered, li: usize| -> Vec<(usize, f64, Vec<f32>)> {
                        let values = match g.rows_of(li, m) {
                            SquaredRows::Half(r) => r
                                .iter()
                                .map(|(v, _)| v.iter().map(|h| f32::from(h.0)).collect())
                                .collect::<Vec<Vec<f32>>>(),
                            SquaredRows::Single(r) => r.iter().map(|(v, _)| v.to_vec()).collect(),
                        };
                        let mut rows: Vec<(usize, f64, Vec<f32>)> = g.members[li]
                            .iter()
                            .zip(values)
                            .map(|(member, v)| (member.row, member.weight, v))
                            .collect();
                        rows.sort_by_key(|r| r.0);
                        rows
                    };
                    assert_eq!(rows(&stepped, a), rows(&fresh, b), "seed {seed} output {k}");
                }
            }
        }
    }

    /// Squared rows whose copies do not fit the cache are computed again by every product:
    /// the same optimum as with every row copied, the same bits on any thread count, the
    /// cache's bytes within its budget; rows read from a file (in chunks: the recomputed rows
    /// fall in several) too.
    #[test]
    fn squared_rows_beyond_the_cache_are_recomputed() {
        let (n, m) = (3000, 30);
        for (seed, classes) in [(51, 2), (52, 3)] {
            let (x, y, model) = problem(seed, n, m, classes);
            let x: Vec<f64> = x.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
            let solve = |cache_bytes, threads| {
                let mut p = params(2.0);
                p.method = PolishMethod::HessianFree;
                p.sample_start = false;
                p.cache_bytes = cache_bytes;
                parallel::install_with(Some(threads), || run(&x, &y, None, classes, &model, &p))
                    .unwrap()
            };
            let all = solve(1 << 30, 2);
            assert_eq!(all.recomputed_rows, 0);
            let budget = all.squared_rows * m * 2 / 3;
            let part = solve(budget, 1);
            assert!(part.recomputed_rows > 0, "seed {seed}");
            assert!(
                part.kept_bytes <= budget,
                "seed {seed}: {} > {budget}",
                part.kept_bytes
            );
            assert_same_optimum(&x, &model, &part, &all, seed);
            let threads = solve(budget, 3);
            assert_eq!(
                (&threads.coef, &threads.intercept),
                (&part.coef, &part.intercept)
            );
            let none = solve(0, 2);
            assert_eq!(none.recomputed_rows, none.squared_rows);
            assert_same_optimum(&x, &model, &none, &all, seed);

            let path = std::env::temp_dir().join(format!(
                "budgetsvm_recomputed_{}_{seed}.svm",
                std::process::id()
            ));
            let text: String = (0..n)
                .map(|i| format!("{} 1:{:?} 2:{:?}\n", y[i], x[2 * i], x[2 * i + 1]))
                .collect();
            std::fs::write(&path, text).unwrap();
            let labels: Vec<f64> = (0..classes).map(|c| c as f64).collect();
            let opened = LibsvmFileRows::open(&path, 333, 2, &labels);
            let mut p = params(2.0);
            p.method = PolishMethod::HessianFree;
            p.sample_start = false;
            p.cache_bytes = budget;
            let from_file = opened.and_then(|(mut file, _)| {
                let targets = Targets::classes(&y, classes);
                polish(&model, None, &mut file, targets, None, &p, &mut no_monitor)
            });
            std::fs::remove_file(&path).unwrap();
            let from_file = from_file.unwrap();
            assert!(from_file.recomputed_rows > 0, "seed {seed}");
            assert_same_optimum(&x, &model, &from_file, &all, seed);
        }
    }

    /// The solve that starts from a subsample's solution reaches the optimum of the one that
    /// does not (two and three classes, weights, regression, dense and CSR rows; Hessian-free
    /// and by the Newton system, whose rows here are more than m^2).
    #[test]
    fn sample_start_reaches_the_same_optimum() {
        for (seed, classes, weighted, sparse) in [
            (31, 2, false, false),
            (32, 3, true, true),
            (33, 0, false, false),
        ] {
            let (n, m) = (3000, 30);
            let (x, y, mut model) = problem(seed, n, m, classes.max(2));
            let z = regression_values(&x);
            if classes == 0 {
                model.coef.iter_mut().for_each(|v| *v *= 3.0);
            }
            let mut rng = Rng::new(seed);
            let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
            let w = weighted.then_some(&w[..]);
            let indptr: Vec<i64> = (0..=n as i64).map(|i| 2 * i).collect();
            let indices: Vec<i64> = (0..2 * n as i64).map(|k| k % 2).collect();
            let solve = |method, sample_start, cache_bytes| {
                let rows = if sparse {
                    AnyRows::Csr64(CsrView::new(&indptr, &indices, &x, 2).unwrap())
                } else {
                    AnyRows::Dense(DenseView::new(&x, n, 2).unwrap())
                };
                let targets = test_targets(classes, &y, &z);
                let mut p = params(2.0);
                p.method = method;
                p.sample_start = sample_start;
                p.cache_bytes = cache_bytes;
                polish(
                    &model,
                    None,
                    &mut InMemory(rows),
                    targets,
                    w,
                    &p,
                    &mut no_monitor,
                )
                .unwrap()
            };
            let sampled = (0..n).filter(|&i| in_sample(i)).count();
            for method in [PolishMethod::HessianFree, PolishMethod::Newton] {
                let (direct, started) =
                    (solve(method, false, 1 << 30), solve(method, true, 1 << 30));
                assert_eq!((direct.sample_rows, started.sample_rows), (0, sampled));
                // Rows in memory are copied whatever the cache.
                assert_eq!(solve(method, true, 0).sample_rows, sampled);
                assert_same_optimum(&x, &model, &started, &direct, seed);
            }
        }
    }

    /// `scale_start` moves a start to its best multiple (s beta, b): the objective does not
    /// rise, f stays K beta + b, and no nearby (s, b) on a grid is lower; for starts far too
    /// large, far too small and about right, classes and regression.
    #[test]
    fn the_scaled_start_is_the_best_multiple() {
        for (seed, classes, scale) in [(81, 2, 40.0), (82, 2, 0.01), (83, 0, 3.0), (84, 2, 1.0)] {
            let (n, m, c) = (600, 20, 2.0);
            let (x, y, model) = problem(seed, n, m, 2);
            let (k, kss) = explicit_kernels(&x, n, &model);
            let z = regression_values(&x);
            let targets = test_targets(classes, &y, &z);
            let term = |i: usize, v: f64| targets.term(0, i, v);
            let weight = |i: usize| 0.5 + (i % 3) as f64 * 0.5;
            let beta: Vec<f64> = (0..m)
                .map(|j| scale * model.coef[j * model.n_out])
                .collect();
            let b0 = 0.3;
            let values = |beta: &[f64], b: f64| -> Vec<f64> {
                (0..n)
                    .map(|i| (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b)
                    .collect()
            };
            let mut o = Output {
                f: values(&beta, b0),
                ..Output::at(beta, b0, n)
            };
            let value =
                |beta: &[f64], b: f64| objective(&kss, beta, &values(beta, b), c, &term, &weight);
            let before = value(&o.beta, o.b);
            let start = o.beta.clone();
            scale_start(&kss, &mut o, c, &term, &weight, 0.0);
            let after = value(&o.beta, o.b);
            assert!(after <= before, "seed {seed}: {after} > {before}");
            let fresh = values(&o.beta, o.b);
            let drift = fresh
                .iter()
                .zip(&o.f)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(drift < 1e-9, "seed {seed}: f off by {drift}");
            let s = if start[0] != 0.0 {
                o.beta[0] / start[0]
            } else {
                1.0
            };
            for ds in [-0.02, -0.002, 0.002, 0.02] {
                for db in [-0.02, -0.002, 0.0, 0.002, 0.02] {
                    let moved: Vec<f64> = start.iter().map(|v| v * (s + ds)).collect();
                    let near = value(&moved, o.b + db);
                    assert!(
                        near >= after * (1.0 - 1e-12),
                        "seed {seed}: s {s} + {ds}, b {} + {db}: {near} < {after}",
                        o.b
                    );
                }
            }
            if scale != 1.0 {
                assert!(after < before, "seed {seed}: the start did not move");
            }
        }
    }

    /// The predicted stop: after a full step, once the next decrease at the last two's rate
    /// is within the tolerance; never after a short step or a growing decrease.
    #[test]
    fn a_full_steps_decrease_predicts_the_next() {
        // Halving decreases 8, 4, 2, 1 with the tolerance 0.6: 2 predicts 1 (go on), 1
        // predicts 0.5 (stop, a step before 0.5 itself would).
        assert!(!stops_after(4.0, 8.0, true, 0.6));
        assert!(!stops_after(2.0, 4.0, true, 0.6));
        assert!(stops_after(1.0, 2.0, true, 0.6));
        assert!(!stops_after(1.0, 2.0, false, 0.6));
        assert!(!stops_after(1.0, 0.0, true, 0.6) && !stops_after(3.0, 2.0, true, 0.6));
        assert!(stops_after(0.5, 2.0, false, 0.6) && stops_after(-1.0, 0.0, false, 0.0));
    }

    /// A tolerance's stop, the one a full step's decrease predicts included, ends near the
    /// optimum (the solve run to the end: tol 0) and takes no more iterations; for both solves,
    /// classes and regression. Near: the Newton solve within tol (0.02 tol here), the
    /// Hessian-free one within 10 tol (6 here: its last direction's predicted decrease, -g.x of
    /// a direction solved to a residual of 0.05, is what it stops on).
    #[test]
    fn a_tolerance_stops_within_it_of_the_optimum() {
        for (seed, n, m, classes, c) in [
            (71, 3000, 30, 2, 2.0),
            (72, 2000, 40, 3, 8.0),
            (73, 2500, 30, 0, 4.0),
        ] {
            let (x, y, mut model) = problem(seed, n, m, classes.max(2));
            let z = regression_values(&x);
            if classes == 0 {
                model.coef.iter_mut().for_each(|v| *v *= 3.0);
            }
            for method in [PolishMethod::Newton, PolishMethod::HessianFree] {
                let solve = |tol| {
                    let view = DenseView::new(&x, n, 2).unwrap();
                    let targets = test_targets(classes, &y, &z);
                    let mut p = params(c);
                    p.method = method;
                    p.tol = tol;
                    let mut source = InMemory(AnyRows::Dense(view));
                    polish(
                        &model,
                        None,
                        &mut source,
                        targets,
                        None,
                        &p,
                        &mut no_monitor,
                    )
                    .unwrap()
                };
                let exact = solve(0.0);
                assert!(exact.converged);
                let allowed = if method == PolishMethod::Newton {
                    1.0
                } else {
                    10.0
                };
                for tol in [1e-3, 1e-4, 1e-5] {
                    let r = solve(tol);
                    assert!(r.converged && r.iterations <= exact.iterations);
                    for (o, (&got, &best)) in r.objective.iter().zip(&exact.objective).enumerate() {
                        assert!(
                            got - best <= allowed * tol * best && got >= best * (1.0 - 1e-9),
                            "seed {seed} {method:?} tol {tol} output {o}: {got} against {best}"
                        );
                    }
                }
            }
        }
    }

    /// A model without support vectors polishes its intercept alone, on many rows too (the
    /// subsample's start, which would recurse on it without end, is not taken).
    #[test]
    fn an_empty_basis_polishes_without_a_subsample() {
        let (x, y, mut model) = problem(61, 2000, 1, 2);
        model.support_vectors = SvMatrix::Dense(Vec::new());
        model.coef.clear();
        for method in [PolishMethod::Newton, PolishMethod::Auto] {
            let mut p = params(1.0);
            p.method = method;
            let r = run(&x, &y, None, 2, &model, &p);
            assert_eq!((r.sample_rows, r.coef.len()), (0, 0));
            assert!(r.intercept[0].is_finite());
        }
    }

    /// The subsample takes about one row in `SAMPLE_STEP` of every residue of the row's index
    /// (a stride would take all of some residues and none of others: data stored in a period).
    #[test]
    fn the_sample_is_not_a_stride() {
        let n = 200_000;
        for period in [2, 5, 7, 10, 64] {
            for residue in 0..period {
                let rows = (residue..n).step_by(period);
                let (all, taken) = (rows.len(), rows.filter(|&i| in_sample(i)).count());
                // Within five standard deviations of a binomial draw's count.
                let p = 1.0 / SAMPLE_STEP as f64;
                let sd = (all as f64 * p * (1.0 - p)).sqrt();
                let off = (taken as f64 - all as f64 * p).abs() / sd;
                assert!(
                    off < 5.0,
                    "period {period}, residue {residue}: {off} sd off"
                );
            }
        }
    }

    /// A LIBSVM file read in chunks (333 rows: the subsample's rows are picked by their index in
    /// the file, not in the chunk) starts from the same subsample as the rows in memory, and
    /// ends at the same optimum.
    #[test]
    fn file_rows_give_the_same_sample_start() {
        let (n, m) = (3000, 30);
        let (x, y, model) = problem(41, n, m, 2);
        // Three decimals: the file's text is the values exactly.
        let x: Vec<f64> = x.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
        let path =
            std::env::temp_dir().join(format!("budgetsvm_sample_start_{}.svm", std::process::id()));
        let text: String = (0..n)
            .map(|i| format!("{} 1:{:?} 2:{:?}\n", y[i], x[2 * i], x[2 * i + 1]))
            .collect();
        std::fs::write(&path, text).unwrap();
        let mut p = params(2.0);
        p.method = PolishMethod::HessianFree;
        let from_file_with = |p: &PolishParams| {
            let (mut file, file_y) = LibsvmFileRows::open(&path, 333, 2, &[0.0, 1.0])?;
            assert_eq!(file_y, y);
            let targets = Targets::classes(&y, 2);
            polish(&model, None, &mut file, targets, None, p, &mut no_monitor)
        };
        let from_file = from_file_with(&p);
        // A file's subsample larger than a quarter of the cache is not copied.
        let sampled = (0..n).filter(|&i| in_sample(i)).count();
        let mut small = p.clone();
        small.cache_bytes = 4 * sampled * 8;
        let not_copied = from_file_with(&small);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(not_copied.unwrap().sample_rows, 0);
        let from_file = from_file.unwrap();
        let indptr: Vec<i64> = (0..=n as i64).map(|i| 2 * i).collect();
        let indices: Vec<i64> = (0..2 * n as i64).map(|k| k % 2).collect();
        let rows = AnyRows::Csr64(CsrView::new(&indptr, &indices, &x, 2).unwrap());
        let in_memory = polish(
            &model,
            None,
            &mut InMemory(rows),
            Targets::classes(&y, 2),
            None,
            &p,
            &mut no_monitor,
        )
        .unwrap();
        assert_eq!(from_file.sample_rows, sampled);
        assert_eq!(in_memory.sample_rows, from_file.sample_rows);
        // The same optimum; not the same bits: the gather's sums follow the file's blocks.
        assert_same_optimum(&x, &model, &from_file, &in_memory, 41);
    }

    /// A pair of a file's classes (`open_pair`: one-vs-one's polish in `fit_file`) is polished
    /// on the rows of its two classes only, targets 0 for its first and 1 for its second: the
    /// polish of a file holding only those rows, bit for bit while both are one chunk, and the
    /// same optimum in chunks (whose kept rows are copied per chunk).
    #[test]
    fn a_pair_of_classes_is_polished_on_its_rows() {
        let (n, m) = (3000, 30);
        let (x, y, _) = problem(47, n, m, 3);
        let (_, _, model) = problem(47, n, m, 2); // the same rows, a binary model
        let x: Vec<f64> = x.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
        let dir = std::env::temp_dir();
        let all = dir.join(format!("budgetsvm_pair_all_{}.svm", std::process::id()));
        let only = dir.join(format!("budgetsvm_pair_only_{}.svm", std::process::id()));
        let line = |i: usize| format!("{} 1:{:?} 2:{:?}\n", y[i], x[2 * i], x[2 * i + 1]);
        let pair: Vec<usize> = (0..n).filter(|&i| y[i] != 1).collect();
        std::fs::write(&all, (0..n).map(line).collect::<String>()).unwrap();
        std::fs::write(&only, pair.iter().map(|&i| line(i)).collect::<String>()).unwrap();
        let classes = [0.0, 1.0, 2.0];
        let mut p = params(2.0);
        p.method = PolishMethod::HessianFree;
        let solve = |path: &std::path::Path, chunk: usize, pair_of: Option<(u32, u32)>| {
            let (mut file, targets) = match pair_of {
                Some(pair_of) => LibsvmFileRows::open_pair(path, chunk, 2, &classes, pair_of)?,
                None => LibsvmFileRows::open(path, chunk, 2, &[0.0, 2.0])?,
            };
            let r = polish(
                &model,
                None,
                &mut file,
                Targets::classes(&targets, 2),
                None,
                &p,
                &mut no_monitor,
            )?;
            Ok::<_, SvmError>((targets, r))
        };
        let whole = solve(&all, n, Some((0, 2)));
        let alone = solve(&only, n, None);
        let chunked = solve(&all, 333, Some((0, 2)));
        let refused = LibsvmFileRows::open_pair(&all, 333, 2, &classes, (2, 2)).err();
        std::fs::remove_file(&all).unwrap();
        std::fs::remove_file(&only).unwrap();
        let ((targets, whole), (alone_targets, alone)) = (whole.unwrap(), alone.unwrap());
        let expected: Vec<u32> = pair.iter().map(|&i| u32::from(y[i] == 2)).collect();
        assert_eq!(targets, expected);
        assert_eq!(alone_targets, expected);
        assert_eq!(
            (&whole.coef, &whole.intercept),
            (&alone.coef, &alone.intercept)
        );
        let (_, chunked) = chunked.unwrap();
        let pair_x: Vec<f64> = pair
            .iter()
            .flat_map(|&i| [x[2 * i], x[2 * i + 1]])
            .collect();
        assert_same_optimum(&pair_x, &model, &chunked, &whole, 47);
        assert!(refused.is_some());
    }

    /// Rows in memory that count the passes over them (a file read again on every pass).
    struct CountedPasses<'a> {
        rows: InMemory<'a>,
        passes: usize,
    }

    impl RowSource for CountedPasses<'_> {
        fn n_rows(&self) -> usize {
            self.rows.n_rows()
        }
        fn n_cols(&self) -> usize {
            self.rows.n_cols()
        }
        fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
            self.passes += 1;
            self.rows.pass(visit)
        }
    }

    /// Once the cache holds every row's kernel values the source is not read again (a file is
    /// parsed on the first pass only), and the solution is the one of a cache that holds none
    /// (every pass reading the rows): the same bits by the Newton system, the same optimum
    /// Hessian-free (whose squared rows' copies follow the cache), with and without the
    /// subsample.
    #[test]
    fn a_source_the_cache_holds_is_read_once() {
        let (x, y, model) = problem(53, 3000, 30, 3);
        for (method, sample_start) in [
            (PolishMethod::Newton, false),
            (PolishMethod::HessianFree, false),
            (PolishMethod::HessianFree, true),
        ] {
            let solve = |cache_bytes: usize| {
                let view = DenseView::new(&x, 3000, 2).unwrap();
                let mut source = CountedPasses {
                    rows: InMemory(AnyRows::Dense(view)),
                    passes: 0,
                };
                let mut p = params(5.0);
                p.method = method;
                p.sample_start = sample_start;
                p.cache_bytes = cache_bytes;
                let targets = Targets::classes(&y, 3);
                let r = polish(
                    &model,
                    None,
                    &mut source,
                    targets,
                    None,
                    &p,
                    &mut no_monitor,
                );
                (r.unwrap(), source.passes)
            };
            let (cached, reads) = solve(1 << 30);
            let (uncached, reads_uncached) = solve(0);
            assert_eq!(cached.cached_rows, 3000);
            assert!(cached.passes > 2, "{method:?}: {} passes", cached.passes);
            // The first pass, and the subsample's copy when the solve starts from it.
            assert_eq!(reads, 1 + usize::from(cached.sample_rows > 0), "{method:?}");
            assert!(reads_uncached >= uncached.passes, "{method:?}");
            if method == PolishMethod::Newton {
                assert_eq!(cached.coef, uncached.coef);
                assert_eq!(cached.intercept, uncached.intercept);
            } else {
                assert_same_optimum(&x, &model, &cached, &uncached, 53);
            }
        }
    }

    /// The same solution whatever the cache holds and however many threads run.
    #[test]
    fn cache_and_threads_do_not_change_the_result() {
        let (x, y, model) = problem(5, 3000, 30, 3);
        let base = run(&x, &y, None, 3, &model, &params(5.0));
        let mut small = params(5.0);
        let segment = segment_rows(30, false);
        small.cache_bytes = segment * 30 * 8; // one segment cached, two recomputed
        for threads in [1, 3] {
            let r = parallel::install_with(Some(threads), || run(&x, &y, None, 3, &model, &small))
                .unwrap();
            assert_eq!(r.coef, base.coef);
            assert_eq!(r.intercept, base.intercept);
            assert_eq!(r.cached_rows, segment);
        }
        assert_eq!(base.cached_rows, 3000);
        assert!(base
            .objective
            .iter()
            .zip(&base.objective_start)
            .all(|(a, b)| a <= b));
    }

    /// Ctrl-C reaches the Hessian-free solve before every conjugate-gradient product (the
    /// monitor is called at least once per product, with the rows copied or computed again),
    /// and its first error ends the polish at once: returned, the monitor not called again.
    #[test]
    fn the_hessian_free_solve_looks_for_ctrl_c_before_every_product() {
        let (x, y, model) = problem(31, 800, 40, 2);
        let n = y.len();
        for cache_bytes in [1 << 30, 0] {
            let mut p = params(2.0);
            p.method = PolishMethod::HessianFree;
            p.cache_bytes = cache_bytes;
            let solve = |stop_at: usize| {
                let view = DenseView::new(&x, n, 2).unwrap();
                let mut source = InMemory(AnyRows::Dense(view));
                let targets = Targets::Classes {
                    y: &y,
                    n_classes: 2,
                };
                let mut calls = 0;
                let mut monitor = |_: &Progress| {
                    calls += 1;
                    if calls >= stop_at {
                        Err(SvmError::Interrupted)
                    } else {
                        Ok(())
                    }
                };
                let r = polish(&model, None, &mut source, targets, None, &p, &mut monitor);
                (r, calls)
            };
            let (whole, calls) = solve(usize::MAX);
            let whole = whole.unwrap();
            assert!(whole.cg_products > 10, "{}", whole.cg_products);
            assert!(
                calls >= whole.cg_products,
                "cache {cache_bytes}: {calls} checks for {} products",
                whole.cg_products
            );
            for stop_at in [1, calls / 3, calls / 2, calls - 1] {
                let (r, made) = solve(stop_at);
                assert!(matches!(r, Err(SvmError::Interrupted)), "stop at {stop_at}");
                assert_eq!(made, stop_at, "cache {cache_bytes}: checks after the error");
            }
        }
    }

    /// Duplicated basis vectors (a singular K_SS) still give the optimum's objective.
    #[test]
    fn singular_basis_gives_the_same_objective() {
        let (x, y, model) = problem(7, 400, 15, 2);
        let r = run(&x, &y, None, 2, &model, &params(3.0));
        let SvMatrix::Dense(sv) = &model.support_vectors else {
            unreachable!()
        };
        let mut twice = sv.clone();
        twice.extend_from_slice(sv);
        let mut coef = model.coef.clone();
        coef.extend(model.coef.iter().map(|c| c * 0.5));
        let doubled = BudgetModel {
            support_vectors: SvMatrix::Dense(twice),
            coef,
            ..model.clone()
        };
        let r2 = run(&x, &y, None, 2, &doubled, &params(3.0));
        let rel = (r2.objective[0] - r.objective[0]).abs() / r.objective[0];
        assert!(rel < 1e-8, "{} vs {}", r2.objective[0], r.objective[0]);
    }

    /// Weight 2 on a row equals the row twice.
    #[test]
    fn weights_equal_repeated_rows() {
        let (x, y, model) = problem(9, 250, 12, 2);
        let n = y.len();
        let w: Vec<f64> = (0..n).map(|i| if i % 3 == 0 { 2.0 } else { 1.0 }).collect();
        let weighted = run(&x, &y, Some(&w), 2, &model, &params(2.0));
        let (mut xr, mut yr) = (x.clone(), y.clone());
        for i in (0..n).step_by(3) {
            xr.extend_from_slice(&x[2 * i..2 * i + 2]);
            yr.push(y[i]);
        }
        let repeated = run(&xr, &yr, None, 2, &model, &params(2.0));
        let rel = (weighted.objective[0] - repeated.objective[0]).abs() / repeated.objective[0];
        assert!(rel < 1e-9);
        for (a, b) in weighted.coef.iter().zip(&repeated.coef) {
            assert!((a - b).abs() < 1e-6 * (1.0 + b.abs()));
        }
    }

    /// A partition's Hessian-free sums are the explicit ones: the gradient sum w hs k (and
    /// its intercept part), the loss, the squared rows' weight, and the products
    /// sum_Q w (k . v + v_b) k over the rows squared at the point asked (the memo follows the
    /// point); the same bits on one thread.
    #[test]
    #[allow(clippy::needless_range_loop)] // rows and outputs index several arrays at once
    fn partition_gradient_and_hessian_products_are_the_explicit_sums() {
        for n_classes in [2, 3] {
            let (x, y, model) = problem(13, 700, 20, n_classes);
            let (m, q, n) = (model.n_sv(), model.n_out, 700);
            let blocks = KernelBlocks::from_sv_matrix(
                &model.support_vectors,
                m,
                2,
                Kernel::rbf(model.gamma),
            )
            .unwrap();
            let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 5) as f64 * 0.25).collect();
            let view = DenseView::new(&x, n, 2).unwrap();
            let targets = Targets::classes(&y, n_classes);
            let part = PartitionRows::new(&blocks, &view, targets, Some(&w)).unwrap();
            let v: Vec<f64> = (0..q * (m + 1)).map(|i| (i as f64 * 0.7).sin()).collect();
            for scale in [1.0, 2.5] {
                let coef: Vec<f64> = model.coef.iter().map(|c| c * scale).collect();
                let b: Vec<f64> = (0..q).map(|k| 0.1 * k as f64 - 0.05).collect();
                let grad = part.gradient((&coef, &b)).unwrap();
                let hv = part.hessian_product((&coef, &b), &v).unwrap();
                let mut want_g = vec![0.0; q * (m + 1)];
                let mut want_hv = vec![0.0; q * (m + 1)];
                let (mut loss, mut weight) = (vec![0.0; q], vec![0.0; q]);
                for i in 0..n {
                    let row = &part.k[i * m..(i + 1) * m];
                    for k in 0..q {
                        let f: f64 = (0..m).map(|j| row[j] * coef[j * q + k]).sum::<f64>() + b[k];
                        let term = targets.term(k, i, f);
                        loss[k] += w[i] * term.loss(f);
                        let hs = w[i] * term.half_slope(f);
                        for j in 0..m {
                            want_g[k * (m + 1) + j] += hs * row[j];
                        }
                        want_g[k * (m + 1) + m] += hs;
                        if term.curvature() > 0.0 {
                            weight[k] += w[i];
                            let vk = &v[k * (m + 1)..(k + 1) * (m + 1)];
                            let t = w[i] * ((0..m).map(|j| row[j] * vk[j]).sum::<f64>() + vk[m]);
                            for j in 0..m {
                                want_hv[k * (m + 1) + j] += t * row[j];
                            }
                            want_hv[k * (m + 1) + m] += t;
                        }
                    }
                }
                let close = |got: &[f64], want: &[f64]| {
                    let top = want.iter().fold(1.0f64, |a, v| a.max(v.abs()));
                    got.iter()
                        .zip(want)
                        .all(|(g, w)| (g - w).abs() <= 1e-10 * top)
                };
                assert!(close(&grad.gradient, &want_g), "classes {n_classes}");
                assert!(close(&grad.loss, &loss) && close(&grad.weight, &weight));
                assert!(
                    weight.iter().sum::<f64>() > 0.0,
                    "no square at {scale}: {weight:?}"
                );
                assert!(close(&hv, &want_hv), "classes {n_classes} scale {scale}");
                // Another point first: the memo must not answer for this one.
                let other: Vec<f64> = coef.iter().map(|c| c * 2.0).collect();
                part.hessian_product((&other, &b), &v).unwrap();
                let again = crate::core::common::parallel::install_with(Some(1), || {
                    part.hessian_product((&coef, &b), &v).unwrap()
                })
                .unwrap();
                assert!(again
                    .iter()
                    .zip(&hv)
                    .all(|(a, h)| a.to_bits() == h.to_bits()));
                let one = crate::core::common::parallel::install_with(Some(1), || {
                    part.gradient((&coef, &b)).unwrap()
                })
                .unwrap();
                assert!(one
                    .gradient
                    .iter()
                    .zip(&grad.gradient)
                    .all(|(a, g)| a.to_bits() == g.to_bits()));
            }
            // Bad input is an error, not a panic.
            assert!(part
                .hessian_product((&model.coef, &vec![0.0; q]), &v[1..])
                .is_err());
            assert!(part.gradient((&model.coef[1..], &vec![0.0; q])).is_err());
        }
    }

    /// The distributed form (partitions' sums added by a driver running Newton steps with
    /// Armijo backtracking) reaches the serial solve's optimum, for classes and for values
    /// (where rows also cross the tube, changing their target but not their activity).
    #[test]
    #[allow(clippy::needless_range_loop)] // outputs index several arrays at once
    fn partition_sums_reach_the_serial_optimum() {
        // (classes, C, epsilon): epsilon given means regression on a smooth target.
        for (n_classes, c, epsilon) in [(2, 3.0, None), (3, 1.0, None), (2, 2.0, Some(0.05))] {
            let (x, y, model) = problem(11, 900, 25, n_classes);
            let z = regression_values(&x);
            let targets = |rows: std::ops::Range<usize>| match epsilon {
                None => Targets::classes(&y[rows], n_classes),
                Some(epsilon) => Targets::Values {
                    y: &z[rows],
                    epsilon,
                },
            };
            let serial = {
                let view = DenseView::new(&x, 900, 2).unwrap();
                let mut source = InMemory(AnyRows::Dense(view));
                let p = params(c);
                polish(
                    &model,
                    None,
                    &mut source,
                    targets(0..900),
                    None,
                    &p,
                    &mut no_monitor,
                )
                .unwrap()
            };
            let m = model.n_sv();
            let q = model.n_out;
            let blocks = KernelBlocks::from_sv_matrix(
                &model.support_vectors,
                m,
                2,
                Kernel::rbf(model.gamma),
            )
            .unwrap();
            let SvMatrix::Dense(sv) = &model.support_vectors else {
                unreachable!()
            };
            let mut kss = vec![0.0; m * m];
            let s = DenseView::new(sv, m, 2).unwrap();
            kernel_matrix(&s, &s, model.gamma, &mut kss).unwrap();
            // Three uneven partitions, one empty.
            let cuts = [0, 100, 100, 600, 900];
            let parts: Vec<PartitionRows> = cuts
                .windows(2)
                .map(|w| {
                    let view = DenseView::new(&x[2 * w[0]..2 * w[1]], w[1] - w[0], 2).unwrap();
                    PartitionRows::new(&blocks, &view, targets(w[0]..w[1]), None).unwrap()
                })
                .collect();
            let all = |counted: Option<(&[f64], &[f64])>, trial: (&[f64], &[f64])| {
                parts
                    .iter()
                    .map(|p| p.sums(counted, trial, true).unwrap())
                    .collect::<Vec<_>>()
            };
            let reg = |coef: &[f64], k: usize| {
                let beta: Vec<f64> = (0..m).map(|j| coef[j * q + k]).collect();
                0.5 * quad_form(&kss, &beta, &beta)
            };
            let mut coef = model.coef.clone();
            let mut b = vec![0.0; q];
            let first = all(None, (&coef, &b));
            let mut sums: Vec<ActiveSums> = (0..q).map(|_| ActiveSums::new(m)).collect();
            let mut obj: Vec<f64> = (0..q).map(|k| reg(&coef, k)).collect();
            for p in &first {
                for k in 0..q {
                    sums[k]
                        .add_change(&p.change[k], p.factors[k].as_ref())
                        .unwrap();
                    obj[k] += c * p.loss_trial[k];
                }
            }
            for _ in 0..60 {
                // Newton points per output, then one step for all with per-output backtracking.
                let mut dir = vec![0.0; m * q];
                let mut db = vec![0.0; q];
                for k in 0..q {
                    let xk = sums[k].newton_point(&kss, c, b[k], &mut || Ok(())).unwrap();
                    for j in 0..m {
                        dir[j * q + k] = xk[j] - coef[j * q + k];
                    }
                    db[k] = xk[m] - b[k];
                }
                // The step per output from the partitions' line-search sums: the first
                // bracket of phi' on a geometric grid, narrowed on even grids (the loss has a
                // linear piece, so the Newton point can lie far beyond the minimiser).
                let phi_slopes = |ts: &[f64]| -> Vec<Vec<f64>> {
                    let sums: Vec<LineSums> = parts
                        .iter()
                        .map(|p| p.line_sums((&coef, &b), (&dir, &db), ts).unwrap())
                        .collect();
                    (0..q)
                        .map(|k| {
                            let beta: Vec<f64> = (0..m).map(|j| coef[j * q + k]).collect();
                            let d: Vec<f64> = (0..m).map(|j| dir[j * q + k]).collect();
                            let (a1, a2) = (quad_form(&kss, &beta, &d), quad_form(&kss, &d, &d));
                            (0..ts.len())
                                .map(|j| {
                                    let slope: f64 = sums.iter().map(|p| p.slope[j * q + k]).sum();
                                    a1 + ts[j] * a2 - 2.0 * c * slope
                                })
                                .collect()
                        })
                        .collect()
                };
                let grid: Vec<f64> = (-40..=3).map(|e| 2f64.powi(e)).collect();
                let coarse = phi_slopes(&grid);
                let mut t = vec![0.0; q];
                for k in 0..q {
                    let Some(j) = coarse[k].iter().position(|&g| g >= 0.0) else {
                        t[k] = grid[grid.len() - 1];
                        continue;
                    };
                    let (mut lo, mut hi) = (if j == 0 { 0.0 } else { grid[j - 1] }, grid[j]);
                    for _ in 0..4 {
                        let ts: Vec<f64> =
                            (0..=32).map(|i| lo + (hi - lo) * i as f64 / 32.0).collect();
                        let g = &phi_slopes(&ts)[k];
                        let i = g.iter().position(|&v| v >= 0.0).unwrap_or(32).max(1);
                        (lo, hi) = (ts[i - 1], ts[i]);
                    }
                    t[k] = if coarse[k][0] >= 0.0 && j == 0 {
                        0.0
                    } else {
                        0.5 * (lo + hi)
                    };
                }
                let trial_c: Vec<f64> = (0..m * q).map(|i| coef[i] + t[i % q] * dir[i]).collect();
                let trial_b: Vec<f64> = (0..q).map(|k| b[k] + t[k] * db[k]).collect();
                let r = all(Some((&coef, &b)), (&trial_c, &trial_b));
                let mut moved = false;
                for k in 0..q {
                    let loss: f64 = r.iter().map(|p| p.loss_trial[k]).sum();
                    let new_obj = reg(&trial_c, k) + c * loss;
                    if new_obj >= obj[k] {
                        continue;
                    }
                    for j in 0..m {
                        coef[j * q + k] = trial_c[j * q + k];
                    }
                    b[k] = trial_b[k];
                    for p in &r {
                        sums[k]
                            .add_change(&p.change[k], p.factors[k].as_ref())
                            .unwrap();
                    }
                    moved |= obj[k] - new_obj > 1e-15 * obj[k];
                    obj[k] = new_obj;
                }
                if !moved {
                    break;
                }
            }
            for k in 0..q {
                let rel = (obj[k] - serial.objective[k]).abs() / serial.objective[k];
                assert!(
                    rel < 1e-9,
                    "classes {n_classes} epsilon {epsilon:?} output {k}: {} vs {}",
                    obj[k],
                    serial.objective[k]
                );
            }
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let (x, y, model) = problem(1, 50, 5, 2);
        let view = DenseView::new(&x, 50, 2).unwrap();
        let mut src = InMemory(AnyRows::Dense(view));
        let p = params(1.0);
        let classes = |y, n_classes| Targets::Classes { y, n_classes };
        let short = classes(&y[..49], 2);
        assert!(polish(&model, None, &mut src, short, None, &p, &mut no_monitor).is_err());
        let three = classes(&y, 3);
        assert!(polish(&model, None, &mut src, three, None, &p, &mut no_monitor).is_err());
        let two = classes(&y, 2);
        let mut bad = p.clone();
        bad.max_iter = 0;
        assert!(polish(&model, None, &mut src, two, None, &bad, &mut no_monitor).is_err());
        let w = vec![0.0; 50];
        assert!(polish(&model, None, &mut src, two, Some(&w), &p, &mut no_monitor).is_err());
        let z: Vec<f64> = (0..50).map(|i| i as f64).collect();
        for epsilon in [-0.1, f64::NAN, f64::INFINITY] {
            let values = Targets::Values { y: &z, epsilon };
            assert!(polish(&model, None, &mut src, values, None, &p, &mut no_monitor).is_err());
        }
        let mut bad_z = z.clone();
        bad_z[7] = f64::NAN;
        let values = Targets::Values {
            y: &bad_z,
            epsilon: 0.1,
        };
        let err = polish(&model, None, &mut src, values, None, &p, &mut no_monitor).unwrap_err();
        assert!(err.to_string().contains("row 7"), "{err}");
    }

    #[test]
    fn the_polish_counts_its_square_matrices_before_allocating_them() {
        // A million rows at B = 10,000, one output, 1 GB of cache: K_SS, M, the system and its
        // factor (3.2 GB) come on top of the cache; a thousand rows cache only what they have.
        let big = polish_bytes(10_000, 1_000_000, 1, 1 << 30);
        assert!(big > 4_200_000_000 && big < 6_000_000_000, "{big}");
        let small = polish_bytes(100, 1_000, 1, 1 << 30);
        assert!(small < 20_000_000, "{small}");
        assert!(check_fits(big, Some(3_000_000_000), || "the polish".into()).is_err());
    }
}
