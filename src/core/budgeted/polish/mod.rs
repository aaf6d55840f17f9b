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
//!
//! The files, in the order a solve uses them:
//! - `solve`: the driver (`polish_on`): the checks, the subsample's start, the first pass and
//!   the iterations, over a `state::Solve` (what the iterations read, what they change);
//! - `rows`: the training rows as a `RowSource` read in the same blocks on every pass (in
//!   memory, or a LIBSVM file read again in chunks); `sample`: the subsample a solve on many
//!   rows starts from;
//! - `segments`: K(X, S) in segments, cached or computed, and the pass that visits them
//!   (`Passes`: what every pass works with); `memory`: the peak bytes and how the cache and
//!   the squared rows' copies share the budget;
//! - `newton_iteration`: the Newton system's solve (the Gram pass over the rows that changed
//!   piece, the direction, the step); `newton`: the system itself (the active-set sums, their
//!   Gram updates, the ridge, the factorised solve);
//! - `hessian_free`: the Hessian-free solve (directions by conjugate gradients, the step from
//!   one pass at the full step's point); `gather`, `copies`, `hessian`: its passes, the
//!   squared rows' copies and the products with them;
//! - `output`: one output's state and its stopping rule; `objective`: the objective and the
//!   start's best multiple; `line_search`: the exact step along a direction;
//! - `partition`: the distributed polish's parts (their Gram factors are the Newton
//!   system's); `tests`: the tests of all of them.

mod copies;
mod gather;
mod hessian;
mod hessian_free;
mod line_search;
mod memory;
mod newton;
mod newton_iteration;
mod objective;
mod output;
mod partition;
mod rows;
mod sample;
mod segments;
mod solve;
mod state;

use crate::core::budget::model::BudgetModel;
use crate::core::budgeted::problem::Targets;
use crate::core::common::checks::check_positive_finite;
use crate::core::common::error::{Result, SvmError};
use crate::core::common::progress::Monitor;
use solve::{polish_on, Problem};
use state::OfTheBasis;

pub use hessian_free::{CG_TOL_EARLY, CG_TOL_FLOOR, MAX_CG_PRODUCTS, RESCALE_FACTOR};
pub use line_search::{settled_step, step_of, walk_order, PieceChange, SlopeWalk};
pub use newton::{
    add_gram_factor, preconditioner_ridge, ActiveSums, GramFactor, NO_CURVATURE, RIDGE,
};
pub use partition::{LineChanges, PartitionGradient, PartitionRows, PartitionSums};
pub use rows::{InMemory, LibsvmFileRows, RowSource};

/// The polish's preconditioner, also the distributed polish's (on the driver).
pub use crate::core::budgeted::conjugate_gradient::{
    solve_many as conjugate_gradients, Preconditioner,
};

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

/// Support vectors from which `PolishMethod::Auto` goes Hessian-free by default. At B = 1,000
/// the Newton system took 5.6 s on 200,000 hard10d rows and 58 s on a million, the Hessian-free
/// solve 2.9 s and 11 s; on a9a, cod-rna and ijcnn1 (33,000-50,000 rows) the system is faster
/// (1.3-1.6 s against 1.4-1.9 s, where the Hessian-free solve stalls and forms it:
/// `FORM_AFTER_ITERATIONS`). At B = 500 the sets part further (ijcnn1 0.8 s against 2.0 s).
pub const HESSIAN_FREE_BASIS: usize = 1000;

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
#[derive(Debug, Clone, Default)]
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

/// Polishes `model` (its support vectors, and its coefficients with `start_intercept` (0 when
/// None) as the warm start) on the rows of
/// `source` with labels `y` (class indices) and optional row weights. Returns the coefficients
/// and intercepts; the model is not changed.
pub fn polish(
    model: &BudgetModel,
    start_intercept: Option<&[f64]>,
    source: &mut dyn RowSource,
    targets: Targets<'_>,
    weights: Option<&[f64]>,
    params: &PolishParams,
    monitor: Monitor<'_>,
) -> Result<PolishResult> {
    let problem = Problem {
        model,
        start_intercept,
        targets,
        weights,
        params,
    };
    polish_on(&problem, source, monitor, &mut OfTheBasis::default())
}

#[cfg(test)]
mod tests;
