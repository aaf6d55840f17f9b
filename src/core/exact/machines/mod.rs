//! The exact kernel machines: C-SVC, nu-SVC, epsilon-SVR, nu-SVR and one-class SVM with any
//! `Kernel` and a bias, each a small builder of the one dual problem (`dual::DualProblem`) that
//! ALFPGM or WSS2 SMO solve exactly (to tol) over one kernel-row cache, as LIBSVM's
//! `solve_c_svc`, `solve_nu_svc`, `solve_epsilon_svr`, `solve_nu_svr` and `solve_one_class`
//! build theirs for its `Solver` and `Solver_NU` (the nu problems: `sum_per_label`).
//!
//! C-SVC: several classes one-vs-one like LIBSVM / scikit-learn's SVC, the K(K-1)/2 pair
//! problems trained in parallel on the configured pool.
//!
//! Each pair (a, b), a < b, is the binary dual C-SVC (see `smo.rs`) on the rows of classes a and
//! b in their original order, with y = +1 for class a, so its decision value
//! sum_i a_i y_i k(x_i, x) - rho is positive for class a (LIBSVM's convention). Each pair has its
//! own kernel-row cache of `cache_bytes` (as LIBSVM has one per pair problem). With several
//! pairs (`shared_rows`, the default) the pairs' caches fill their rows from one store of
//! `cache_bytes` shared by all pairs (`shared_rows.rs`): the part of x_i's row against its own
//! class is computed once for all the K - 1 pairs x_i belongs to.

use std::sync::Mutex;
use std::time::Duration;

use rayon::prelude::*;

use crate::core::common::checks::{check_positive_finite, check_weights};
use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::common::progress::{Monitor, Progress};
use crate::core::data::rows::{Rows, SubsetRows};
use crate::core::exact::alfpgm::{solve_alfpgm, AlfpgmParams};
use crate::core::exact::dual::{
    label_index, DualProblem, DualSolution, ExactRun, Reporter, RowPrecision,
};
use crate::core::exact::smo::solve_smo;
use crate::core::kernels::kernel::{kernel_norms, Kernel};
use crate::core::kernels::kernel_cache::{CacheStats, KernelRowCache};
use crate::core::kernels::kernel_rows::{PairSegments, SourceRows};
use crate::core::kernels::shared_rows::SharedKernelRows;
use crate::core::kernels::source_rows::{RowProducer, SourceKernelRows};
use crate::core::simd::RowValue;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactSolver {
    Smo,
    Alfpgm,
}

impl ExactSolver {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "smo" => Ok(ExactSolver::Smo),
            "alfpgm" => Ok(ExactSolver::Alfpgm),
            other => Err(SvmError::invalid_parameter(
                "solver",
                format!("must be 'alfpgm' or 'smo', got {other:?}"),
            )),
        }
    }
}

/// Hyper-parameters of the exact kernel machines.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactParams {
    /// C of C-SVC and SVR (one-class has none: its bounds are 1, times the row weights).
    pub c: f64,
    pub kernel: Kernel,
    /// Stop when m(a) - M(a) < tol.
    pub tol: f64,
    /// Kernel-row cache per pair problem, in bytes.
    pub cache_bytes: usize,
    /// Iteration cap per pair problem (SMO: pair steps; ALFPGM: working sets); 0 = the
    /// solver's default (SMO: max(10^7, 100 n) as LIBSVM; ALFPGM: max(10^5, n)).
    pub max_iter: u64,
    pub solver: ExactSolver,
    /// LIBSVM's shrinking (`shrinking.rs`): same solution and stopping rule, fewer kernel values.
    pub shrinking: bool,
    /// Several classes: the pairs take their kernel rows from one shared store (`shared_rows.rs`).
    pub shared_rows: bool,
    pub alfpgm: AlfpgmParams,
    /// Seconds between progress lines (verbose); None = none.
    pub report_every: Option<f64>,
    /// Threads for this fit (0 = one per core); None = the process-wide setting.
    pub n_threads: Option<usize>,
    /// The kernel rows' element type; None = what the problem needs (`RowPrecision::needed`).
    /// f64 rows take twice the bytes: `cache_bytes` then holds half the rows.
    pub row_precision: Option<RowPrecision>,
}

impl Default for ExactParams {
    fn default() -> Self {
        ExactParams {
            c: 1.0,
            kernel: Kernel::rbf(1.0),
            tol: 1e-3,
            cache_bytes: 200 << 20,
            max_iter: 0,
            solver: ExactSolver::Alfpgm,
            shrinking: true,
            shared_rows: true,
            alfpgm: AlfpgmParams::default(),
            report_every: None,
            n_threads: None,
            row_precision: None,
        }
    }
}

/// Parameters that passed validation.
#[derive(Debug, Clone)]
pub struct ValidExactParams(ExactParams);

impl ExactParams {
    pub fn check(&self) -> Result<ValidExactParams> {
        self.kernel.check()?;
        // C = inf is the hard margin (scikit-learn's): the box becomes the largest finite bound.
        if self.c.is_nan() || self.c <= 0.0 {
            return Err(SvmError::invalid_parameter(
                "C",
                format!(
                    "must be a positive number (inf: hard margin), got {}",
                    self.c
                ),
            ));
        }
        check_positive_finite("tol", self.tol)?;
        if let Some(r) = self.report_every {
            if !(r.is_finite() && r >= 0.0) {
                return Err(SvmError::invalid_parameter(
                    "report_every",
                    "must be a finite number >= 0",
                ));
            }
        }
        self.alfpgm.check()?;
        Ok(ValidExactParams(self.clone()))
    }
}

/// An exact model in terms of the training rows: the expansion sum_s coef_s k(x_s, x) - rho.
#[derive(Debug, Clone)]
pub struct ExactModel {
    /// Training rows (indices into X) with a non-zero coefficient, ascending.
    pub support: Vec<usize>,
    /// Their coefficients (C-SVC: y_i a_i; SVR: a_i - a_i*; one-class: a_i).
    pub coef: Vec<f64>,
    pub rho: f64,
    /// The dual objective 1/2 a^T Q a + p^T a at the solution.
    pub objective: f64,
    pub iterations: u64,
    pub converged: bool,
    pub gap: f64,
    pub fallback_steps: u64,
    pub inner_iterations: u64,
    pub working_sets: u64,
    pub cache: CacheStats,
    pub seconds: f64,
    /// The smallest active set of the run (shrinking).
    pub min_active: usize,
    /// Strides taken (`stride`).
    pub strides: u64,
    /// The nu problems' multiplier of the sum (`DualSolution::r`; nu-SVC's scale, when > 0,
    /// is already applied; nu-SVR's tube is -r); 0 for the others.
    pub r: f64,
    /// Rows in the problem.
    pub n_rows: usize,
}

impl ExactModel {
    /// The model of a solution whose variable t stands for training row `rows[t]` and adds
    /// `sign_t a_t` to that row's coefficient (SVR's two variables per row meet here).
    fn from_solution(sol: DualSolution, rows: &[usize], n_rows: usize) -> Self {
        let mut by_row: Vec<(usize, f64)> = rows
            .iter()
            .enumerate()
            .filter(|&(t, _)| sol.alpha[t] != 0.0)
            .map(|(t, &i)| (i, sol.y[t] * sol.alpha[t]))
            .collect();
        by_row.sort_unstable_by_key(|&(i, _)| i);
        let mut merged: Vec<(usize, f64)> = Vec::with_capacity(by_row.len());
        for (i, c) in by_row {
            match merged.last_mut() {
                Some(last) if last.0 == i => last.1 += c,
                _ => merged.push((i, c)),
            }
        }
        // A row whose two variables cancel is no support vector (LIBSVM's alpha != 0).
        let (support, coef) = merged.into_iter().filter(|&(_, c)| c != 0.0).unzip();
        ExactModel {
            support,
            coef,
            rho: sol.rho,
            objective: sol.objective,
            iterations: sol.iterations,
            converged: sol.converged,
            gap: sol.gap,
            fallback_steps: sol.fallback_steps,
            inner_iterations: sol.inner_iterations,
            working_sets: sol.working_sets,
            cache: sol.cache,
            seconds: sol.seconds,
            min_active: sol.min_active,
            strides: sol.strides,
            r: sol.r,
            n_rows,
        }
    }
}

/// The solution of one pair problem of a one-vs-one C-SVC.
#[derive(Debug, Clone)]
pub struct PairModel {
    /// The classes (a < b); y = +1 for class a.
    pub classes: (u32, u32),
    pub model: ExactModel,
}

/// The upper bound C w of a variable whose row weighs w: finite even for C = inf (a hard margin,
/// the box then never binds; the solvers' clipping needs finite bounds).
fn box_bound(c: f64, w: f64) -> f64 {
    (c * w).min(f64::MAX)
}

/// LIBSVM's cap on the pair steps of an unbounded run (both solvers count pair steps).
fn default_max_iter(n: usize) -> u64 {
    10_000_000u64.max(100 * n as u64)
}

/// Where a problem's kernel rows (of element type T) come from.
pub(crate) enum RowSource<'r, T> {
    /// Computed by the problem's own cache.
    Own,
    /// A one-vs-one pair's: filled from the fit's store shared by the pairs.
    Segments(PairSegments<'r, T>),
    /// Gathered from a store of rows by data row, the problem's own cache holding
    /// `cache_bytes` of them.
    Stored(&'r dyn SourceRows<T>, usize),
}

/// Where a fit's kernel values come from: the rows' features through the params' kernel, or a
/// producer of kernel rows by data row with the kernel's diagonal (a callable kernel's rows,
/// produced in Python on request, kept by the fit in a store of `cache_bytes`,
/// `SourceKernelRows`; the params' kernel is then `Precomputed`, whose value at a row's own
/// position is its diagonal entry).
#[derive(Clone, Copy)]
pub(crate) enum KernelFrom<'a> {
    Features,
    Producer {
        rows: &'a dyn RowProducer,
        diagonal: &'a [f64],
    },
}

impl<'a> KernelFrom<'a> {
    /// What each row enters the kernel with (`kernel_norms`), or the store's diagonal.
    fn norms<R: Rows>(&self, x: &R, kernel: Kernel) -> Result<Vec<f64>> {
        match *self {
            KernelFrom::Features => kernel_norms(x, kernel),
            KernelFrom::Producer { rows, diagonal } => {
                let n = x.n_rows();
                if kernel != Kernel::Precomputed || rows.n() != n || diagonal.len() != n {
                    return Err(SvmError::invalid_input(
                        "stored kernel rows need the precomputed kernel and one row and one \
                         diagonal entry per training row",
                    ));
                }
                if let Some(i) = diagonal.iter().position(|v| !v.is_finite()) {
                    return Err(SvmError::invalid_input(format!(
                        "the kernel's diagonal entry {i} is {}",
                        diagonal[i]
                    )));
                }
                Ok(diagonal.to_vec())
            }
        }
    }

    /// The fit's store of the producer's rows (one for all its problems), None from features.
    fn store<T: RowValue>(&self, cache_bytes: usize) -> Option<SourceKernelRows<'a, T>> {
        match *self {
            KernelFrom::Features => None,
            KernelFrom::Producer { rows, .. } => Some(SourceKernelRows::new(rows, cache_bytes)),
        }
    }

    /// The largest |K_ts| the fit's kernel can take, from the diagonal entries K_tt of its rows
    /// (a positive semi-definite kernel's bound), or read off a precomputed Gram matrix.
    fn kernel_max<R: Rows>(&self, x: &R, kernel: Kernel, diag: &[f64]) -> f64 {
        let mut most = diag.iter().fold(0.0f64, |m, &v| m.max(v.abs()));
        if let (KernelFrom::Features, Kernel::Precomputed) = (self, kernel) {
            for i in 0..x.n_rows() {
                x.for_each_nonzero(i, |_, v| most = most.max(v.abs()));
            }
        }
        most
    }

    /// The rows' element type of a fit whose problems' diagonal entries are `diag` and largest
    /// bound `upper_max`: the params' choice, or what the problem needs.
    fn precision<R: Rows>(
        &self,
        x: &R,
        params: &ValidExactParams,
        diag: &[f64],
        upper_max: f64,
    ) -> RowPrecision {
        let p = &params.0;
        p.row_precision.unwrap_or_else(|| {
            RowPrecision::needed(self.kernel_max(x, p.kernel, diag), upper_max, p.tol)
        })
    }
}

/// The rows of a problem that are not shared between one-vs-one pairs: its own, or gathered
/// from the fit's store (`KernelFrom::store`).
fn own_rows<'s, T: RowValue>(
    store: Option<&'s SourceKernelRows<'_, T>>,
    cache_bytes: usize,
) -> RowSource<'s, T> {
    match store {
        None => RowSource::Own,
        Some(store) => RowSource::Stored(store, cache_bytes),
    }
}

/// Solves `problem_at(c)`, a dual problem whose variable t is row t of `x` (squared norms
/// `sq_norms`, as `kernel_norms` gives them; kernel rows from `rows`), for every C of `cs`
/// in turn over one kernel-row cache (a C path:
/// model selection's warm starts), each from the solution before it scaled by the ratio of
/// the Cs. The box [0, C w_t] (SVR's [-C w_t, C w_t]) scales by that ratio, so the scaled
/// solution is feasible, the variables at a bound stay at it, and its gradient and G_bar
/// follow from the last ones without a kernel row: G = r (G_last - p) + p, G_bar = r G_bar_last
/// (`DualProblem::start_gradient`). On noisy data most support vectors sit at the bound, where
/// the scaled start is where they stay: a9a's path over C = 1, 4, 16, 64 (gamma 2^-9, 21,000
/// rows) took 0.05-0.07 s for each C after the first (0.67 s cold), against 0.43-0.47 s from
/// the last solution unscaled (its G_bar then empty). The rows cached for one C serve the next: each
/// problem is handed to the solver in the order the cache's positions hold its rows (a solve
/// that shrank leaves them swapped), and its solution put back in the variables' order.
/// C-SVC and epsilon-SVR only (p and the box are what scale; the nu problems have no C path).
pub(crate) fn solve_dual_path<R: Rows, T: RowValue>(
    x: &R,
    sq_norms: Vec<f64>,
    cs: &[f64],
    problem_at: &mut (dyn FnMut(f64) -> DualProblem + Send),
    params: &ValidExactParams,
    rows: RowSource<'_, T>,
    reporter: &mut Reporter<'_, '_>,
) -> Result<Vec<DualSolution>> {
    let p = &params.0;
    let mut cache = match rows {
        RowSource::Own => KernelRowCache::with_norms(x, p.kernel, sq_norms, p.cache_bytes)?,
        RowSource::Segments(s) => {
            KernelRowCache::with_segments(x, p.kernel, sq_norms, p.cache_bytes, s)?
        }
        RowSource::Stored(store, bytes) => {
            KernelRowCache::with_source_rows(x, p.kernel, sq_norms, bytes, store)?
        }
    };
    let mut solutions: Vec<DualSolution> = Vec::with_capacity(cs.len());
    for (k, &c) in cs.iter().enumerate() {
        let mut problem = problem_at(c);
        if let Some(last) = solutions.last() {
            if problem.paired || problem.sum_per_label || problem.start.is_some() {
                return Err(SvmError::invalid_input(
                    "a C path takes C-SVC or epsilon-SVR problems (no start of their own)",
                ));
            }
            let ratio = c / cs[k - 1];
            problem.start = Some(last.alpha.iter().map(|&a| ratio * a).collect());
            let grad = last
                .grad
                .iter()
                .zip(&problem.p)
                .map(|(&g, &lin)| ratio * (g - lin) + lin)
                .collect();
            let grad_bar = last.grad_bar.iter().map(|&g| ratio * g).collect();
            problem.start_gradient = Some((grad, grad_bar));
        }
        let max_iter = if p.max_iter == 0 {
            default_max_iter(problem.n())
        } else {
            p.max_iter
        };
        let run = ExactRun {
            tol: p.tol,
            max_iter,
            shrinking: p.shrinking.then_some(0),
        };
        // The cache's position t holds variable order[t].
        let order: Vec<usize> = (0..problem.n()).map(|t| cache.row_at(t)).collect();
        let in_order = order.iter().enumerate().all(|(t, &v)| t == v);
        if !in_order {
            reorder_problem(&mut problem, &order);
        }
        let mut solution = match p.solver {
            ExactSolver::Smo => solve_smo(&mut cache, problem, &run, reporter)?,
            ExactSolver::Alfpgm => solve_alfpgm(&mut cache, problem, &run, &p.alfpgm, reporter)?,
        };
        if !in_order {
            for v in [
                &mut solution.alpha,
                &mut solution.y,
                &mut solution.grad,
                &mut solution.grad_bar,
            ] {
                if v.len() == order.len() {
                    let mut back = vec![0.0; v.len()];
                    for (t, &i) in order.iter().enumerate() {
                        back[i] = v[t];
                    }
                    *v = back;
                }
            }
        }
        solutions.push(solution);
    }
    Ok(solutions)
}

/// The Cs of a path: at least one; several only where C is the problem's (`c_path`: C-SVC,
/// epsilon-SVR), each finite and > 0 (the ratio of two Cs scales the start).
fn check_c_path(cs: &[f64], c_path: bool) -> Result<()> {
    if cs.is_empty() || (!c_path && cs.len() > 1) {
        return Err(SvmError::invalid_parameter(
            "cs",
            format!(
                "a C path needs at least one C, and several only for C-SVC or epsilon-SVR; got \
                 {} C(s)",
                cs.len()
            ),
        ));
    }
    if cs.len() > 1 {
        if let Some(c) = cs.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
            return Err(SvmError::invalid_parameter(
                "cs",
                format!("every C of a path must be a finite number > 0, got {c}"),
            ));
        }
    }
    Ok(())
}

/// A problem's variables reordered: variable t of the result is variable `order[t]` of the
/// problem (`solve_dual_path`).
fn reorder_problem(problem: &mut DualProblem, order: &[usize]) {
    let reorder = |v: &mut Vec<f64>| {
        if v.len() == order.len() {
            *v = order.iter().map(|&i| v[i]).collect();
        }
    };
    reorder(&mut problem.y);
    reorder(&mut problem.p);
    reorder(&mut problem.upper);
    reorder(&mut problem.diag);
    if let Some(start) = problem.start.as_mut() {
        reorder(start);
    }
    if let Some((grad, grad_bar)) = problem.start_gradient.as_mut() {
        reorder(grad);
        reorder(grad_bar);
    }
}

/// The classifier's formulation: C-SVC, or nu-SVC with its nu in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SvcFormulation {
    C,
    Nu(f64),
}

/// nu-SVC has a feasible point for every pair only if nu (W_a + W_b) / 2 <= min(W_a, W_b), W
/// the classes' total row weights (LIBSVM's check, weighted as scikit-learn's): else an error
/// naming the pair. `y` and `weights` are checked already.
fn check_nu_feasible(nu: f64, y: &[u32], weights: Option<&[f64]>, n_classes: usize) -> Result<()> {
    let mut totals = vec![0.0; n_classes];
    for (i, &c) in y.iter().enumerate() {
        totals[c as usize] += weights.map_or(1.0, |w| w[i]);
    }
    for a in 0..n_classes {
        for b in a + 1..n_classes {
            let (wa, wb) = (totals[a], totals[b]);
            if nu * (wa + wb) / 2.0 > wa.min(wb) {
                return Err(SvmError::invalid_parameter(
                    "nu",
                    format!(
                        "specified nu is infeasible: nu = {nu} exceeds 2 min(n_a, n_b) / (n_a + \
                         n_b) = {:.6} for classes {a} and {b} (their rows' total weights {wa} \
                         and {wb}); use a smaller nu",
                        2.0 * wa.min(wb) / (wa + wb)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// nu-SVR starts with a_i = a_i* at their bound C w_i on nu n / 2 rows and takes beta = a - a*
/// as their difference: a variable at its bound carries a rounding of C w_i times f64's
/// epsilon, and its own gradient that times K_ii. When that alone exceeds tol, no solve can
/// tell a KKT gap below tol from rounding (C = 1e300 on 60 rows ran 10 million steps to the
/// cap for 31 s): an error naming C instead.
fn check_nu_svr_resolution(
    c: f64,
    tol: f64,
    upper: impl Iterator<Item = f64>,
    diag: impl Iterator<Item = f64>,
) -> Result<()> {
    let rounding = upper.fold(0.0, f64::max) * f64::EPSILON * diag.fold(0.0, f64::max);
    if rounding.is_finite() && rounding <= tol {
        return Ok(());
    }
    Err(SvmError::invalid_parameter(
        "C",
        format!(
            "C = {c:e} is too large for nu-SVR to reach tol = {tol:e} in float64: its \
             variables start at C times the row weights and their differences are the model, \
             so the gradients carry a rounding of about {rounding:.3e}; use a smaller C (or a \
             larger tol)"
        ),
    ))
}

fn check_nu(nu: f64) -> Result<()> {
    if nu.is_finite() && nu > 0.0 && nu <= 1.0 {
        Ok(())
    } else {
        Err(SvmError::invalid_parameter(
            "nu",
            format!("must be in (0, 1], got {nu}"),
        ))
    }
}

/// The pair problem of a one-vs-one classifier over the given rows (labels +-1, their weights).
fn pair_problem(
    formulation: SvcFormulation,
    c: f64,
    labels: Vec<f64>,
    row_weights: impl Iterator<Item = f64>,
    diag: Vec<f64>,
) -> DualProblem {
    match formulation {
        SvcFormulation::C => {
            let upper = row_weights.map(|w| box_bound(c, w)).collect();
            DualProblem::classification(labels, upper, diag)
        }
        SvcFormulation::Nu(nu) => {
            let upper: Vec<f64> = row_weights.collect();
            let mut left = [FillInOrder(nu * upper.iter().sum::<f64>() / 2.0); 2];
            let start = labels
                .iter()
                .zip(&upper)
                .map(|(&y, &w)| left[label_index(y)].take(w))
                .collect();
            DualProblem {
                p: vec![0.0; labels.len()],
                y: labels,
                upper,
                diag,
                start: Some(start),
                sum_per_label: true,
                tube: None,
                paired: false,
                start_gradient: None,
            }
        }
    }
}

/// Trains the one-vs-one problems of C-SVC or nu-SVC, the kernel values from `from`. `y[i]` is
/// the class index of row i in `0..n_classes`; every class must occur. `weights` (positive, one
/// per row; sample times class weight) make the box of row i [0, C w_i], as LIBSVM's weighted C.
/// Pairs come back in LIBSVM's order (0,1), (0,2), ..., (1,2), ...
///
/// nu-SVC (LIBSVM's `solve_nu_svc`, scikit-learn's weighted form): per pair
/// min 1/2 a^T Q a s.t. y^T a = 0, e^T a = nu sum w, 0 <= a_i <= w_i (one sum per label:
/// `DualProblem::sum_per_label`), started with each label's rows filled to nu sum w / 2 in
/// order; the solution divided by its r is a C-SVC one (coefficients y a / r, rho / r). An
/// infeasible nu for some pair is an error naming it, before anything is solved
/// (`check_nu_feasible`).
///
/// For every C of `cs` (several for C-SVC only; nu-SVC ignores its one C): each pair's
/// problems solved in turn over one kernel-row cache, each C's from the last C's solution
/// (`solve_dual_path`). Returns the pairs' models per C, in the order of `cs`.
#[allow(clippy::too_many_arguments)] // the problem, its formulation, the Cs, where its values come from
pub(crate) fn train_one_vs_one_path<R: Rows>(
    x: &R,
    y: &[u32],
    weights: Option<&[f64]>,
    n_classes: usize,
    formulation: SvcFormulation,
    cs: &[f64],
    params: &ValidExactParams,
    from: KernelFrom<'_>,
    monitor: Monitor<'_>,
) -> Result<Vec<Vec<PairModel>>> {
    let p = &params.0;
    check_c_path(cs, matches!(formulation, SvcFormulation::C))?;
    if let SvcFormulation::Nu(nu) = formulation {
        check_nu(nu)?;
    }
    let n = x.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    if y.len() != n {
        return Err(SvmError::invalid_input(format!(
            "X has {n} rows but y has {} labels",
            y.len()
        )));
    }
    crate::core::common::checks::check_classes(n_classes, Some(n))?;
    check_weights(weights, n)?;
    let mut counts = vec![0usize; n_classes];
    for &c in y {
        match counts.get_mut(c as usize) {
            Some(k) => *k += 1,
            None => {
                return Err(SvmError::invalid_input(format!(
                    "class index {c} out of range for {n_classes} classes"
                )))
            }
        }
    }
    if let Some(empty) = counts.iter().position(|&k| k == 0) {
        return Err(SvmError::invalid_input(format!(
            "class index {empty} has no training rows"
        )));
    }
    if let SvcFormulation::Nu(nu) = formulation {
        check_nu_feasible(nu, y, weights, n_classes)?;
    }
    let norms = from.norms(x, p.kernel)?;
    let diag: Vec<f64> = norms.iter().map(|&q| p.kernel.self_value(q)).collect();
    let weight_max = weights.map_or(1.0, |w| w.iter().fold(0.0f64, |m, &v| m.max(v)));
    let c_max = cs.iter().fold(0.0f64, |m, &c| m.max(c));
    let upper_max = match formulation {
        SvcFormulation::C => box_bound(c_max, weight_max),
        SvcFormulation::Nu(_) => weight_max,
    };
    let fit = OneVsOne {
        x,
        y,
        weights,
        counts,
        formulation,
        cs,
        params,
        from,
        norms,
    };
    match from.precision(x, params, &diag, upper_max) {
        RowPrecision::F32 => fit.train::<f32>(monitor),
        RowPrecision::F64 => fit.train::<f64>(monitor),
    }
}

/// A one-vs-one fit past its checks: what its pair problems are built from (`train_one_vs_one_path`).
struct OneVsOne<'f, R> {
    x: &'f R,
    y: &'f [u32],
    weights: Option<&'f [f64]>,
    /// Rows per class.
    counts: Vec<usize>,
    formulation: SvcFormulation,
    /// The Cs of the path (one for a fit).
    cs: &'f [f64],
    params: &'f ValidExactParams,
    from: KernelFrom<'f>,
    norms: Vec<f64>,
}

impl<R: Rows> OneVsOne<'_, R> {
    /// Trains the pair problems for every C, their kernel rows of element type T: the models
    /// per C, then per pair.
    fn train<T: RowValue>(&self, monitor: Monitor<'_>) -> Result<Vec<Vec<PairModel>>> {
        let (x, y, weights, params, from) = (self.x, self.y, self.weights, self.params, self.from);
        let (formulation, norms) = (self.formulation, &self.norms[..]);
        let (p, n, n_classes) = (&params.0, x.n_rows(), self.counts.len());
        let mut pairs = Vec::new();
        for a in 0..n_classes as u32 {
            for b in a + 1..n_classes as u32 {
                pairs.push((a, b));
            }
        }
        let n_pairs = pairs.len();
        // The rows grouped by class (stable), for the store shared by the pairs.
        let mut class_start = vec![0usize; n_classes + 1];
        for (c, &k) in self.counts.iter().enumerate() {
            class_start[c + 1] = class_start[c] + k;
        }
        // A precomputed kernel is read from its matrix: nothing to share.
        let share = p.shared_rows && n_pairs > 1 && p.kernel != Kernel::Precomputed;
        let mut order = vec![0usize; if share { n } else { 0 }];
        let mut position = vec![0u32; order.len()];
        let mut rank = vec![0u32; order.len()];
        if !order.is_empty() {
            let mut next = class_start[..n_classes].to_vec();
            for (g, &c) in y.iter().enumerate() {
                let at = &mut next[c as usize];
                order[*at] = g;
                position[g] = *at as u32;
                rank[g] = (*at - class_start[c as usize]) as u32;
                *at += 1;
            }
        }
        let grouped = SubsetRows::new(x, &order)?;
        let store = if order.is_empty() {
            None
        } else {
            let grouped_norms = order.iter().map(|&g| norms[g]).collect();
            Some(SharedKernelRows::<_, T>::new(
                &grouped,
                p.kernel,
                grouped_norms,
                class_start,
                position,
                p.cache_bytes,
            )?)
        };
        let source = from.store::<T>(p.cache_bytes);
        let monitor = Mutex::new(monitor);
        let report_every = p.report_every.map(Duration::from_secs_f64);
        let solve_pair = |k: usize, (a, b): (u32, u32)| -> Result<Vec<PairModel>> {
            // Several classes: class a's rows, then class b's (LIBSVM's order of a pair problem,
            // and the layout of the shared store's segments).
            let rows: Vec<usize> = if n_pairs == 1 {
                (0..n).collect()
            } else {
                let of = |c: u32| (0..n).filter(move |&i| y[i] == c);
                of(a).chain(of(b)).collect()
            };
            let labels: Vec<f64> = rows
                .iter()
                .map(|&i| if y[i] == a { 1.0 } else { -1.0 })
                .collect();
            let sub_norms: Vec<f64> = rows.iter().map(|&i| norms[i]).collect();
            let sub = SubsetRows::new(x, &rows)?;
            let template = Progress {
                epoch: k + 1,
                epochs: n_pairs,
                ..Progress::default()
            };
            let mut reporter = Reporter::new(&monitor, template, report_every);
            let segments = match &store {
                Some(store) => {
                    RowSource::Segments(PairSegments::new(store, (a, b), &rows, y, &rank)?)
                }
                None => own_rows(source.as_ref(), p.cache_bytes),
            };
            let diag: Vec<f64> = sub_norms.iter().map(|&q| p.kernel.self_value(q)).collect();
            let mut problem_at = |c: f64| {
                let row_weights = rows.iter().map(|&i| weights.map_or(1.0, |w| w[i]));
                pair_problem(formulation, c, labels.clone(), row_weights, diag.clone())
            };
            let solutions = solve_dual_path(
                &sub,
                sub_norms,
                self.cs,
                &mut problem_at,
                params,
                segments,
                &mut reporter,
            )?;
            solutions
                .into_iter()
                .map(|sol| self.pair_model(sol, (a, b), &rows))
                .collect()
        };
        let by_pair = parallel::install_with(p.n_threads, || {
            if n_pairs == 1 {
                Ok(vec![solve_pair(0, pairs[0])?])
            } else {
                pairs
                    .par_iter()
                    .enumerate()
                    .map(|(k, &pair)| solve_pair(k, pair))
                    .collect::<Result<Vec<_>>>()
            }
        })??;
        // Per pair, then per C -> per C, then per pair.
        let mut by_c: Vec<Vec<PairModel>> = (0..self.cs.len()).map(|_| Vec::new()).collect();
        for models in by_pair {
            for (c, model) in models.into_iter().enumerate() {
                by_c[c].push(model);
            }
        }
        Ok(by_c)
    }

    /// The model of pair (a, b) from its solution over `rows` (nu-SVC's scaled to C-SVC's).
    fn pair_model(
        &self,
        mut sol: DualSolution,
        (a, b): (u32, u32),
        rows: &[usize],
    ) -> Result<PairModel> {
        let p = &self.params.0;
        if let SvcFormulation::Nu(_) = self.formulation {
            // LIBSVM's nu-SVC solution over r is the C-SVC one of C = 1 / r. r is the mean
            // gradient of the free variables, or the middle of an interval without them.
            let r = sol.r;
            if !r.is_finite() {
                // nu at the pair's largest feasible value (nu = 1 for classes of equal
                // weight) puts every variable of a label at its bound, and that interval is
                // unbounded.
                return Err(SvmError::invalid_input(format!(
                    "The dual coefficients or intercepts are not finite: nu-SVC of classes {a} \
                         and {b} ended with r = {r} (every variable of a label at a bound, as nu \
                         at its largest feasible value for the pair, 2 min(n_a, n_b) / (n_a + \
                         n_b), gives), so a / r is not a model; use a smaller nu"
                )));
            }
            // r is known to within the stopping tolerance (the KKT gap of the free
            // variables' gradients). Inside it, r is a margin of 0 (rows the kernel cannot
            // separate at this nu, e.g. random labels): any positive scale predicts alike,
            // and dividing by rounding noise of either sign would blow the values up or flip
            // them, so the coefficients stay unscaled (`ExactModel::r` reports r). Beyond it,
            // r is the problem's: a negative r (a kernel that is not positive
            // semi-definite) is divided by as LIBSVM divides, or every prediction would be
            // flipped against NuSVC's.
            if r > 0.0 || r < -p.tol {
                for v in &mut sol.alpha {
                    *v /= r;
                }
                sol.rho /= r;
                sol.objective /= r * r;
            }
        }
        Ok(PairModel {
            classes: (a, b),
            model: ExactModel::from_solution(sol, rows, rows.len()),
        })
    }
}

/// The row weights' checks and the monitor's plumbing every single-problem fit shares: solves
/// `problem`, whose variable t is row `rows[t]` of `x`, and returns the model by rows.
fn fit_single<R: Rows>(
    x: &R,
    norms: &[f64],
    rows: Vec<usize>,
    problem: DualProblem,
    params: &ValidExactParams,
    from: KernelFrom<'_>,
    monitor: Monitor<'_>,
) -> Result<ExactModel> {
    let upper_max = problem.upper.iter().fold(0.0f64, |m, &c| m.max(c));
    let mut once = Some(problem);
    let path = ProblemPath {
        cs: &[params.0.c],
        problem_at: &mut |_| once.take().expect("a path of one C builds one problem"),
        upper_max,
    };
    let mut models = fit_single_path(x, norms, rows, path, params, from, monitor)?;
    Ok(models.remove(0))
}

/// The problems of a path over C (`solve_dual_path`): one for each C of `cs`, from
/// `problem_at`; `upper_max` is the largest bound of any of them, which sets the rows'
/// precision.
struct ProblemPath<'a> {
    cs: &'a [f64],
    problem_at: &'a mut (dyn FnMut(f64) -> DualProblem + Send),
    upper_max: f64,
}

/// `fit_single` for every problem of `path`.
fn fit_single_path<R: Rows>(
    x: &R,
    norms: &[f64],
    rows: Vec<usize>,
    path: ProblemPath<'_>,
    params: &ValidExactParams,
    from: KernelFrom<'_>,
    monitor: Monitor<'_>,
) -> Result<Vec<ExactModel>> {
    let ProblemPath {
        cs,
        problem_at,
        upper_max,
    } = path;
    let p = &params.0;
    let sub = SubsetRows::new(x, &rows)?;
    let sub_norms: Vec<f64> = rows.iter().map(|&i| norms[i]).collect();
    let diag: Vec<f64> = sub_norms.iter().map(|&q| p.kernel.self_value(q)).collect();
    let monitor = Mutex::new(monitor);
    let template = Progress {
        epoch: 1,
        epochs: 1,
        ..Progress::default()
    };
    let report_every = p.report_every.map(Duration::from_secs_f64);
    let mut reporter = Reporter::new(&monitor, template, report_every);
    let precision = from.precision(x, params, &diag, upper_max);
    let solutions = parallel::install_with(p.n_threads, || match precision {
        RowPrecision::F32 => {
            solve_own_path::<_, f32>(&sub, sub_norms, cs, problem_at, params, from, &mut reporter)
        }
        RowPrecision::F64 => {
            solve_own_path::<_, f64>(&sub, sub_norms, cs, problem_at, params, from, &mut reporter)
        }
    })??;
    // A paired solution comes back as LIBSVM's variables (a, a*): each position twice.
    let paired = solutions
        .first()
        .is_some_and(|s| s.alpha.len() == 2 * rows.len());
    let rows = if paired {
        [&rows[..], &rows[..]].concat()
    } else {
        rows
    };
    Ok(solutions
        .into_iter()
        .map(|sol| ExactModel::from_solution(sol, &rows, x.n_rows()))
        .collect())
}

/// `solve_dual_path` for the problems of a fit that are not one-vs-one pairs: their rows their
/// own, or from the fit's store of a producer's rows, in rows of type T.
fn solve_own_path<R: Rows, T: RowValue>(
    x: &R,
    sq_norms: Vec<f64>,
    cs: &[f64],
    problem_at: &mut (dyn FnMut(f64) -> DualProblem + Send),
    params: &ValidExactParams,
    from: KernelFrom<'_>,
    reporter: &mut Reporter<'_, '_>,
) -> Result<Vec<DualSolution>> {
    let bytes = params.0.cache_bytes;
    let store = from.store::<T>(bytes);
    let source = own_rows(store.as_ref(), bytes);
    solve_dual_path(x, sq_norms, cs, problem_at, params, source, reporter)
}

/// What is left of a sum to spread over variables in order, each taking up to its bound: the
/// feasible start of LIBSVM's nu problems (the first rows at their bounds, then the remainder,
/// then zeros).
#[derive(Clone, Copy)]
struct FillInOrder(f64);

impl FillInOrder {
    fn take(&mut self, bound: f64) -> f64 {
        let a = bound.min(self.0).max(0.0);
        self.0 -= a;
        a
    }
}

fn check_rows_and_weights<R: Rows>(x: &R, weights: Option<&[f64]>) -> Result<usize> {
    let n = x.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    check_weights(weights, n)?;
    Ok(n)
}

/// The regression's formulation: epsilon-SVR with its epsilon, or nu-SVR with its nu.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SvrFormulation {
    Epsilon(f64),
    Nu(f64),
}

/// epsilon-SVR, the kernel values from `from`: one variable per data row, beta_i = a_i - a_i*
/// in [-C_i, C_i] (C times the row's weight) with p = -z and the tube's term epsilon |beta|_1
/// (`DualProblem::tube`: Shevade et al.'s form of LIBSVM's `solve_epsilon_svr`, whose 2n
/// variables a_i, a_i* took twice the scans, gradient updates and kernel values: lowbwt's
/// ALFPGM fit 5.8 -> 4.3 s, kernel values 1.28e9 -> 0.58e9). The model's coefficient of row i
/// is beta_i; its prediction sum_i beta_i k(x_i, x) - rho.
///
/// nu-SVR (LIBSVM's `solve_nu_svr`, scikit-learn's weighted form): 2n variables, a_i (y = +1)
/// and a_i* (y = -1) of row i with p = (-z, z), both bounded by C times the row's weight, a sum
/// per label fixed to C nu sum w / 2 (`DualProblem::sum_per_label`: not a constraint on beta
/// alone), started with a_i = a_i* filled in row order; the tube's epsilon is the solution's
/// -r. ALFPGM keeps a row's two variables at one position (`DualProblem::paired`: scans,
/// gradient and kernel rows over n); SMO takes LIBSVM's 2n positions (the cache holds row i's
/// kernel row once per variable). The model's coefficient of row i is a_i - a_i*.
///
/// For every C of `cs` (several for epsilon-SVR only; nu-SVR takes one): the problems solved
/// in turn over one kernel-row cache, each C's from the last C's solution
/// (`solve_dual_path`). Returns the models in the order of `cs`.
#[allow(clippy::too_many_arguments)] // the problem, its formulation, the Cs, where its values come from
pub(crate) fn train_regression_path<R: Rows>(
    x: &R,
    z: &[f64],
    weights: Option<&[f64]>,
    formulation: SvrFormulation,
    cs: &[f64],
    params: &ValidExactParams,
    from: KernelFrom<'_>,
    monitor: Monitor<'_>,
) -> Result<Vec<ExactModel>> {
    let p = &params.0;
    check_c_path(cs, matches!(formulation, SvrFormulation::Epsilon(_)))?;
    let n = check_rows_and_weights(x, weights)?;
    if z.len() != n {
        return Err(SvmError::invalid_input(format!(
            "X has {n} rows but y has {} targets",
            z.len()
        )));
    }
    if let Some(i) = z.iter().position(|v| !v.is_finite()) {
        return Err(SvmError::invalid_input(format!(
            "target {i} is {} (targets must be finite)",
            z[i]
        )));
    }
    let epsilon = match formulation {
        SvrFormulation::Epsilon(e) if e.is_finite() && e >= 0.0 => e,
        SvrFormulation::Epsilon(e) => {
            return Err(SvmError::invalid_parameter(
                "epsilon",
                format!("must be a finite number >= 0, got {e}"),
            ))
        }
        SvrFormulation::Nu(nu) => {
            check_nu(nu)?;
            // nu-SVR has no epsilon in its linear term: the tube comes out of the solution.
            0.0
        }
    };
    let norms = from.norms(x, p.kernel)?;
    let upper_of = |i: usize| box_bound(p.c, weights.map_or(1.0, |w| w[i]));
    let diag_of = |i: usize| p.kernel.self_value(norms[i]);
    if let SvrFormulation::Nu(_) = formulation {
        check_nu_svr_resolution(p.c, p.tol, (0..n).map(upper_of), (0..n).map(diag_of))?;
    }
    if let SvrFormulation::Epsilon(_) = formulation {
        // One variable per data row (`DualProblem::tube`): beta = a - a*, p = -z.
        let c_max = cs.iter().fold(0.0f64, |m, &c| m.max(c));
        let upper_max = (0..n)
            .map(|i| box_bound(c_max, weights.map_or(1.0, |w| w[i])))
            .fold(0.0f64, f64::max);
        let diag: Vec<f64> = (0..n).map(diag_of).collect();
        let mut problem_at = |c: f64| DualProblem {
            y: vec![1.0; n],
            p: z.iter().map(|&v| -v).collect(),
            upper: (0..n)
                .map(|i| box_bound(c, weights.map_or(1.0, |w| w[i])))
                .collect(),
            diag: diag.clone(),
            start: None,
            sum_per_label: false,
            tube: Some(epsilon),
            paired: false,
            start_gradient: None,
        };
        let path = ProblemPath {
            cs,
            problem_at: &mut problem_at,
            upper_max,
        };
        return fit_single_path(x, &norms, (0..n).collect(), path, params, from, monitor);
    }
    if let (SvrFormulation::Nu(nu), ExactSolver::Alfpgm) = (formulation, p.solver) {
        // ALFPGM: a_i and a_i* at one position (`DualProblem::paired`), started as LIBSVM's
        // a_i = a_i* filled in row order (beta = 0: the start needs no kernel row).
        let upper: Vec<f64> = (0..n).map(upper_of).collect();
        let mut left = FillInOrder(nu * upper.iter().sum::<f64>() / 2.0);
        let half: Vec<f64> = upper.iter().map(|&c| left.take(c)).collect();
        let problem = DualProblem {
            y: vec![1.0; n],
            p: z.iter().map(|&v| -v).collect(),
            upper,
            diag: (0..n).map(diag_of).collect(),
            start: Some([&half[..], &half[..]].concat()),
            sum_per_label: true,
            tube: None,
            paired: true,
            start_gradient: None,
        };
        return Ok(vec![fit_single(
            x,
            &norms,
            (0..n).collect(),
            problem,
            params,
            from,
            monitor,
        )?]);
    }
    let rows: Vec<usize> = (0..n).chain(0..n).collect();
    let y: Vec<f64> = (0..2 * n).map(|t| if t < n { 1.0 } else { -1.0 }).collect();
    let lin: Vec<f64> = (0..2 * n)
        .map(|t| {
            if t < n {
                epsilon - z[t]
            } else {
                epsilon + z[t - n]
            }
        })
        .collect();
    let upper: Vec<f64> = rows.iter().map(|&i| upper_of(i)).collect();
    let diag = rows.iter().map(|&i| diag_of(i)).collect();
    let (start, sum_per_label) = match formulation {
        SvrFormulation::Epsilon(_) => (None, false),
        SvrFormulation::Nu(nu) => {
            // a_i = a_i* = min(C_i, what is left of C nu sum w / 2), row by row.
            let mut left = FillInOrder(nu * upper[..n].iter().sum::<f64>() / 2.0);
            let half: Vec<f64> = upper[..n].iter().map(|&c| left.take(c)).collect();
            (Some([&half[..], &half[..]].concat()), true)
        }
    };
    let problem = DualProblem {
        y,
        p: lin,
        upper,
        diag,
        start,
        sum_per_label,
        tube: None,
        paired: false,
        start_gradient: None,
    };
    Ok(vec![fit_single(
        x, &norms, rows, problem, params, from, monitor,
    )?])
}

/// The one-class SVM, nu formulation (Schoelkopf et al.; LIBSVM's `solve_one_class`):
/// min 1/2 a^T K a s.t. sum a = nu n, 0 <= a_i <= 1, started from the first rows at their bound
/// (a feasible point), the rest 0. Weighted rows (scikit-learn's LIBSVM) bound a_i by the weight
/// w_i and sum a to nu sum w. The model's decision is sum_i a_i k(x_i, x) - rho; C is unused.
/// The kernel values come from `from`.
pub(crate) fn train_one_class<R: Rows>(
    x: &R,
    weights: Option<&[f64]>,
    nu: f64,
    params: &ValidExactParams,
    from: KernelFrom<'_>,
    monitor: Monitor<'_>,
) -> Result<ExactModel> {
    let p = &params.0;
    let n = check_rows_and_weights(x, weights)?;
    check_nu(nu)?;
    let norms = from.norms(x, p.kernel)?;
    let upper: Vec<f64> = (0..n).map(|i| weights.map_or(1.0, |w| w[i])).collect();
    let mut left = FillInOrder(nu * upper.iter().sum::<f64>());
    let start: Vec<f64> = upper.iter().map(|&c| left.take(c)).collect();
    let diag = norms.iter().map(|&q| p.kernel.self_value(q)).collect();
    let problem = DualProblem {
        y: vec![1.0; n],
        p: vec![0.0; n],
        upper,
        diag,
        start: Some(start),
        sum_per_label: false,
        tube: None,
        paired: false,
        start_gradient: None,
    };
    fit_single(x, &norms, (0..n).collect(), problem, params, from, monitor)
}

#[cfg(test)]
mod tests;
