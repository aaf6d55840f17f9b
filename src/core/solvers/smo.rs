//! Sequential minimal optimisation with second-order working-set selection (WSS2; Fan, Chen &
//! Lin, JMLR 6 (2005)), as LIBSVM's `Solver` does it, over the shared kernel-row cache. It is the
//! reference the multi-pair solver (ALFPGM) is checked against and that solver's fallback step.
//!
//! Both exact solvers take one general problem, LIBSVM's (`DualProblem`):
//!   min_a f(a) = 1/2 a^T Q a + p^T a   s.t.  y^T a = y^T a0,  0 <= a_t <= C_t,
//! Q_ts = y_t y_s K_ts, y_t = +-1, started from a feasible a0 (0 unless given). C-SVC, epsilon-SVR
//! and one-class SVM are small builders of it (`solvers::kernel_svc`): C-SVC p = -e, a0 = 0, C_t = C
//! times the row's weight; SVR 2n variables over n rows; one-class p = 0, y = e, a0 summing to
//! nu n. The gradient is G = Q a + p (G = p at a = 0).
//! I_up = {t: a_t < C_t, y_t = +1} u {t: a_t > 0, y_t = -1},  I_low = {t: a_t < C_t, y_t = -1} u
//! {t: a_t > 0, y_t = +1};  m(a) = max_{I_up} -y_t G_t,  M(a) = min_{I_low} -y_t G_t. The run stops
//! when m(a) - M(a) < tol (LIBSVM's `Gmax + Gmax2 < eps`), or at the iteration cap, which is
//! reported (`converged = false`), never looped past.
//!
//! Shrinking as LIBSVM's (`shrinking.rs`): the state works on positions; variables 0..active
//! are optimised, the others sit at a bound and are not expected to move, their gradient kept
//! recoverable through G_bar and reconstructed before the final optimality test, so the stopping
//! rule is the unshrunk solver's. Kernel rows are K rows (the labels are applied on the fly); the
//! diagonal K_tt is kept per variable in f64 (exactly 1 for the Gaussian kernel), as LIBSVM's QD.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::data::Rows;
use crate::core::error::{Result, SvmError};
use crate::core::kernel_cache::{CacheStats, KernelRowCache};
use crate::core::solvers::shrinking::Shrinking;
use crate::core::solvers::{Heartbeat, Monitor, Progress};

/// LIBSVM's floor for a non-positive curvature a_ij.
pub const TAU: f64 = 1e-12;

/// The problem both exact solvers take (module doc): one entry per variable in every vector.
#[derive(Debug, Clone)]
pub struct DualProblem {
    /// y_t = +1 or -1.
    pub y: Vec<f64>,
    /// The linear term p.
    pub p: Vec<f64>,
    /// C_t > 0, the upper bound of a_t.
    pub upper: Vec<f64>,
    /// K_tt.
    pub diag: Vec<f64>,
    /// A feasible start (0 <= a0_t <= C_t); None = 0.
    pub start: Option<Vec<f64>>,
}

impl DualProblem {
    /// C-SVC: p = -e, a0 = 0.
    pub fn classification(y: Vec<f64>, upper: Vec<f64>, diag: Vec<f64>) -> Self {
        let p = vec![-1.0; y.len()];
        DualProblem {
            y,
            p,
            upper,
            diag,
            start: None,
        }
    }

    pub fn n(&self) -> usize {
        self.y.len()
    }

    /// Whether every vector has one entry per variable, the bounds are positive and the start
    /// inside them.
    pub fn check(&self) -> Result<()> {
        let n = self.y.len();
        let start_ok = self.start.as_ref().is_none_or(|a| {
            a.len() == n
                && a.iter()
                    .zip(&self.upper)
                    .all(|(&a, &c)| a.is_finite() && (0.0..=c).contains(&a))
        });
        if self.p.len() != n || self.upper.len() != n || self.diag.len() != n || !start_ok {
            return Err(SvmError::invalid_input(
                "the dual problem's vectors differ in length or its start is outside the box",
            ));
        }
        if !self.upper.iter().all(|&c| c.is_finite() && c > 0.0)
            || !self.p.iter().all(|v| v.is_finite())
            || !self.y.iter().all(|&v| v == 1.0 || v == -1.0)
        {
            return Err(SvmError::invalid_input(
                "the dual problem needs positive finite bounds, a finite linear term and labels +-1",
            ));
        }
        Ok(())
    }
}

/// The state of a dual problem: labels, linear term, box bounds, the kernel's diagonal, dual
/// variables and the gradient G = Q a + p.
#[derive(Debug, Clone)]
pub struct DualState {
    pub y: Vec<f64>,
    pub alpha: Vec<f64>,
    pub grad: Vec<f64>,
    /// C_t, the upper bound of each a_t.
    pub upper: Vec<f64>,
    /// The linear term p_t.
    pub p: Vec<f64>,
    /// K_tt.
    pub diag: Vec<f64>,
    /// Positions 0..active are optimised; the rest are shrunk (their gradient is stale until
    /// `shrinking::reconstruct_gradient`). Every scan below covers the active positions only.
    pub active: usize,
    /// Position -> the variable's index in the problem as given (shrinking permutes positions).
    pub index: Vec<u32>,
    /// G_bar_t = sum over the variables s at their upper bound of C_s Q_ts (LIBSVM's G_bar);
    /// empty when not shrinking.
    pub grad_bar: Vec<f64>,
}

impl DualState {
    /// a = a0 (0 unless given) and G = p: the gradient of a non-zero start still lacks Q a0,
    /// which `start_gradient` adds from kernel rows.
    pub fn new(problem: DualProblem) -> Self {
        let DualProblem {
            y,
            p,
            upper,
            diag,
            start,
        } = problem;
        let n = y.len();
        DualState {
            alpha: start.unwrap_or_else(|| vec![0.0; n]),
            grad: p.clone(),
            y,
            p,
            upper,
            diag,
            active: n,
            index: (0..n as u32).collect(),
            grad_bar: Vec::new(),
        }
    }

    /// A C-SVC state at a = 0 (G = -e), for tests and callers holding labels and bounds only.
    pub fn classification(y: Vec<f64>, upper: Vec<f64>, diag: Vec<f64>) -> Self {
        Self::new(DualProblem::classification(y, upper, diag))
    }

    /// Exchanges the variables at two positions (the kernel-row cache must swap the same).
    pub fn swap(&mut self, a: usize, b: usize) {
        self.y.swap(a, b);
        self.alpha.swap(a, b);
        self.grad.swap(a, b);
        self.upper.swap(a, b);
        self.p.swap(a, b);
        self.diag.swap(a, b);
        self.index.swap(a, b);
        if !self.grad_bar.is_empty() {
            self.grad_bar.swap(a, b);
        }
    }

    /// Puts the variables back in the order they were given.
    fn into_original_order(mut self) -> Self {
        let index = std::mem::take(&mut self.index);
        let unpermute = |v: &mut Vec<f64>| {
            if v.len() == index.len() {
                let mut out = vec![0.0; v.len()];
                for (p, &k) in index.iter().enumerate() {
                    out[k as usize] = v[p];
                }
                *v = out;
            }
        };
        unpermute(&mut self.alpha);
        unpermute(&mut self.y);
        unpermute(&mut self.grad);
        unpermute(&mut self.upper);
        unpermute(&mut self.p);
        unpermute(&mut self.diag);
        unpermute(&mut self.grad_bar);
        self.index = (0..index.len() as u32).collect();
        self
    }

    pub fn n(&self) -> usize {
        self.y.len()
    }

    #[inline]
    pub fn in_up(&self, t: usize) -> bool {
        if self.y[t] > 0.0 {
            self.alpha[t] < self.upper[t]
        } else {
            self.alpha[t] > 0.0
        }
    }

    #[inline]
    pub fn in_low(&self, t: usize) -> bool {
        if self.y[t] > 0.0 {
            self.alpha[t] > 0.0
        } else {
            self.alpha[t] < self.upper[t]
        }
    }

    /// (m(a), M(a)) over the full (unfiltered) index sets of the active positions; -inf / +inf
    /// for an empty set.
    pub fn extremes(&self) -> (f64, f64) {
        let (mut m, mut big_m) = (f64::NEG_INFINITY, f64::INFINITY);
        for t in 0..self.active {
            let v = -self.y[t] * self.grad[t];
            if self.in_up(t) && v > m {
                m = v;
            }
            if self.in_low(t) && v < big_m {
                big_m = v;
            }
        }
        (m, big_m)
    }

    /// The maximal violation m(a) - M(a) (negative infinity when a set is empty).
    pub fn gap(&self) -> f64 {
        let (m, big_m) = self.extremes();
        m - big_m
    }

    /// The bias rho as LIBSVM's `calculate_rho`: the mean of y_i G_i over free variables, or the
    /// middle of the feasible interval when no variable is free. Decision f(x) = sum a_i y_i k - rho.
    pub fn rho(&self) -> f64 {
        let (mut ub, mut lb) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut n_free, mut sum_free) = (0usize, 0.0);
        for t in 0..self.active {
            let yg = self.y[t] * self.grad[t];
            if self.alpha[t] >= self.upper[t] {
                if self.y[t] < 0.0 {
                    ub = ub.min(yg);
                } else {
                    lb = lb.max(yg);
                }
            } else if self.alpha[t] <= 0.0 {
                if self.y[t] > 0.0 {
                    ub = ub.min(yg);
                } else {
                    lb = lb.max(yg);
                }
            } else {
                n_free += 1;
                sum_free += yg;
            }
        }
        if n_free > 0 {
            sum_free / n_free as f64
        } else {
            (ub + lb) / 2.0
        }
    }

    /// f(a) = 1/2 a^T Q a + p^T a = sum_i a_i (G_i + p_i) / 2 (LIBSVM's `obj`).
    pub fn objective(&self) -> f64 {
        self.alpha
            .iter()
            .zip(&self.grad)
            .zip(&self.p)
            .map(|((a, g), p)| a * (g + p))
            .sum::<f64>()
            / 2.0
    }

    pub fn n_sv(&self) -> usize {
        self.alpha.iter().filter(|&&a| a > 0.0).count()
    }

    /// The i of WSS2: argmax over I_up of -y_t G_t (ties to the last index, as LIBSVM).
    pub fn select_i(&self) -> Option<(usize, f64)> {
        let mut best: Option<(usize, f64)> = None;
        let mut gmax = f64::NEG_INFINITY;
        for t in 0..self.active {
            if self.in_up(t) {
                let v = -self.y[t] * self.grad[t];
                if v >= gmax {
                    gmax = v;
                    best = Some((t, v));
                }
            }
        }
        best
    }

    /// The j of WSS2 for i with -y_i G_i = `gmax` and kernel row K[i, :]: argmin over
    /// t in I_low with b_it = gmax + y_t G_t > 0 of -b_it^2 / a_it, a_it = K_ii + K_tt - 2 K_it
    /// (TAU when not positive). Also returns -M(a) = max over I_low of y_t G_t.
    #[allow(clippy::needless_range_loop)] // five arrays indexed by t
    pub fn select_j(&self, i: usize, gmax: f64, row_i: &[f32]) -> (Option<usize>, f64) {
        let k_ii = self.diag[i];
        let mut gmax2 = f64::NEG_INFINITY;
        let mut best = None;
        let mut obj_min = f64::INFINITY;
        for t in 0..self.active {
            if !self.in_low(t) {
                continue;
            }
            let yg = self.y[t] * self.grad[t];
            if yg >= gmax2 {
                gmax2 = yg;
            }
            let b = gmax + yg;
            if b > 0.0 {
                let a = k_ii + self.diag[t] - 2.0 * f64::from(row_i[t]);
                let a = if a > 0.0 { a } else { TAU };
                let obj = -(b * b) / a;
                if obj <= obj_min {
                    obj_min = obj;
                    best = Some(t);
                }
            }
        }
        (best, gmax2)
    }

    /// LIBSVM's analytic two-variable step on (i, j) with their kernel rows (at least the active
    /// prefix), then the gradient update G_k += y_k (y_i da_i K_ik + y_j da_j K_jk) over the active
    /// positions. Returns (da_i, da_j).
    pub fn smo_step(&mut self, i: usize, j: usize, row_i: &[f32], row_j: &[f32]) -> (f64, f64) {
        let (c_i, c_j) = (self.upper[i], self.upper[j]);
        let (yi, yj) = (self.y[i], self.y[j]);
        let k_ij = f64::from(row_i[j]);
        let (old_i, old_j) = (self.alpha[i], self.alpha[j]);
        let (gi, gj) = (self.grad[i], self.grad[j]);
        let (mut ai, mut aj) = (old_i, old_j);
        // Q_ii + Q_jj - 2 y_i y_j Q_ij, the curvature along the pair's direction.
        let quad = self.diag[i] + self.diag[j] - 2.0 * k_ij;
        let quad = if quad > 0.0 { quad } else { TAU };
        // The clipping of LIBSVM's Solver::Solve, with a bound per variable.
        if yi != yj {
            let delta = (-gi - gj) / quad;
            let diff = ai - aj;
            ai += delta;
            aj += delta;
            if diff > 0.0 {
                if aj < 0.0 {
                    aj = 0.0;
                    ai = diff;
                }
            } else if ai < 0.0 {
                ai = 0.0;
                aj = -diff;
            }
            if diff > c_i - c_j {
                if ai > c_i {
                    ai = c_i;
                    aj = c_i - diff;
                }
            } else if aj > c_j {
                aj = c_j;
                ai = c_j + diff;
            }
        } else {
            let delta = (gi - gj) / quad;
            let sum = ai + aj;
            ai -= delta;
            aj += delta;
            if sum > c_i {
                if ai > c_i {
                    ai = c_i;
                    aj = sum - c_i;
                }
            } else if aj < 0.0 {
                aj = 0.0;
                ai = sum;
            }
            if sum > c_j {
                if aj > c_j {
                    aj = c_j;
                    ai = sum - c_j;
                }
            } else if ai < 0.0 {
                ai = 0.0;
                aj = sum;
            }
        }
        self.alpha[i] = ai;
        self.alpha[j] = aj;
        let (di, dj) = (ai - old_i, aj - old_j);
        let (ci, cj) = (yi * di, yj * dj);
        let active = self.active;
        for ((g, &y), (&ki, &kj)) in self.grad[..active]
            .iter_mut()
            .zip(&self.y[..active])
            .zip(row_i.iter().zip(row_j))
        {
            *g += y * (ci * f64::from(ki) + cj * f64::from(kj));
        }
        (di, dj)
    }
}

/// What an exact solver run returns for one binary problem.
#[derive(Debug, Clone)]
pub struct DualSolution {
    pub alpha: Vec<f64>,
    pub y: Vec<f64>,
    pub rho: f64,
    /// f(a) = 1/2 a^T Q a - e^T a (LIBSVM's `obj`, minus the usual dual).
    pub objective: f64,
    /// Decomposition steps (SMO: pairs; ALFPGM: working sets).
    pub iterations: u64,
    pub converged: bool,
    /// m(a) - M(a) at the end.
    pub gap: f64,
    pub cache: CacheStats,
    pub seconds: f64,
    /// ALFPGM only: single-pair SMO steps taken because a multi-pair step made no progress.
    pub fallback_steps: u64,
    /// ALFPGM only: FISTA iterations over all subproblems.
    pub inner_iterations: u64,
    /// The smallest number of active (unshrunk) variables during the run.
    pub min_active: usize,
}

impl DualSolution {
    /// The solution of a state whose gradient is complete (nothing shrunk), in the variables'
    /// original order.
    pub fn from_state(state: DualState, iterations: u64, converged: bool, start: Instant) -> Self {
        debug_assert_eq!(state.active, state.n());
        let state = state.into_original_order();
        let gap = state.gap();
        DualSolution {
            min_active: state.n(),
            rho: state.rho(),
            objective: state.objective(),
            iterations,
            converged,
            gap,
            cache: CacheStats::default(),
            seconds: start.elapsed().as_secs_f64(),
            fallback_steps: 0,
            inner_iterations: 0,
            alpha: state.alpha,
            y: state.y,
        }
    }

    pub fn n_sv(&self) -> usize {
        self.alpha.iter().filter(|&&a| a > 0.0).count()
    }
}

/// Reports to the shared monitor: a heartbeat every 100 ms (Ctrl-C), and a progress line
/// (`epoch_done = true`) every `report` seconds when asked.
pub struct Reporter<'m, 'a> {
    monitor: &'m Mutex<Monitor<'a>>,
    template: Progress,
    heartbeat: Heartbeat,
    last_report: Instant,
    report_every: Option<Duration>,
    start: Instant,
}

impl<'m, 'a> Reporter<'m, 'a> {
    pub fn new(
        monitor: &'m Mutex<Monitor<'a>>,
        template: Progress,
        report_every: Option<Duration>,
    ) -> Self {
        Reporter {
            monitor,
            template,
            heartbeat: Heartbeat::new(Duration::from_millis(100)),
            last_report: Instant::now(),
            report_every,
            start: Instant::now(),
        }
    }

    fn send(&self, state: &DualState, iteration: u64, gap: f64, done: bool) -> Result<()> {
        let mut m = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        (*m)(&Progress {
            iteration,
            n_sv: state.n_sv(),
            seconds: self.start.elapsed().as_secs_f64(),
            epoch_done: done,
            gap: Some(gap),
            ..self.template.clone()
        })
    }

    /// Called once per decomposition step (`step` counts them; cheap steps call it with
    /// `cheap = true`, and the clock is then read every 1024 steps only).
    pub(crate) fn tick(&mut self, state: &DualState, step: u64, cheap: bool) -> Result<()> {
        let due = if cheap {
            self.heartbeat.due(step)
        } else {
            self.heartbeat.due(0)
        };
        if !due {
            return Ok(());
        }
        let report = self
            .report_every
            .is_some_and(|every| self.last_report.elapsed() >= every);
        if report {
            self.last_report = Instant::now();
            self.send(state, step, state.gap(), true)
        } else {
            self.send(state, step, f64::NAN, false)
        }
    }

    /// The line at the end of a problem.
    pub(crate) fn finish(&mut self, solution: &DualSolution) -> Result<()> {
        let mut m = self.monitor.lock().unwrap_or_else(|e| e.into_inner());
        (*m)(&Progress {
            iteration: solution.iterations,
            n_sv: solution.n_sv(),
            seconds: self.start.elapsed().as_secs_f64(),
            epoch_done: self.report_every.is_some(),
            gap: Some(solution.gap),
            ..self.template.clone()
        })
    }
}

/// WSS2 SMO on the active positions: the working pair, or None when m - M < tol there.
fn select_pair<R: Rows>(
    cache: &mut KernelRowCache<'_, R>,
    state: &DualState,
    tol: f64,
) -> Result<Option<(usize, usize)>> {
    let Some((i, gmax)) = state.select_i() else {
        return Ok(None);
    };
    let (j, gmax2) = {
        let rows = cache.rows_prefix(&[i], state.active)?;
        state.select_j(i, gmax, rows.row(0))
    };
    // No j with b_ij > 0 means no violating pair at all (LIBSVM returns "optimal" too).
    match j {
        Some(j) if gmax + gmax2 >= tol => Ok(Some((i, j))),
        _ => Ok(None),
    }
}

/// When an exact solver stops, and how it shrinks.
#[derive(Debug, Clone, Copy)]
pub struct ExactRun {
    /// Stop when m(a) - M(a) < tol.
    pub tol: f64,
    /// Decomposition steps at most (reported as not converged when reached).
    pub max_iter: u64,
    /// `Shrinking::new`'s schedule: None = no shrinking.
    pub shrinking: Option<usize>,
}

/// Kernel rows fetched together while the gradient of a non-zero start is built.
const START_BATCH: usize = 64;

/// The state of `problem` at its start, its gradient complete: G = p + Q a0 and, when
/// shrinking keeps G_bar, G_bar = sum over the variables at their upper bound of C_s Q_.s, from
/// the kernel rows of the non-zero a0_s (LIBSVM's initialisation in `Solver::Solve`).
pub(crate) fn start_state<R: Rows>(
    cache: &mut KernelRowCache<'_, R>,
    problem: DualProblem,
    shrinking: Option<usize>,
) -> Result<(DualState, Shrinking)> {
    problem.check()?;
    if problem.n() != cache.n() {
        return Err(SvmError::invalid_input(format!(
            "a dual problem of {} variables over {} kernel rows",
            problem.n(),
            cache.n()
        )));
    }
    let mut state = DualState::new(problem);
    let shrinker = Shrinking::new(shrinking, &mut state);
    let nonzero: Vec<usize> = (0..state.n()).filter(|&t| state.alpha[t] > 0.0).collect();
    for batch in nonzero.chunks(START_BATCH.min(cache.capacity()).max(1)) {
        let rows = cache.rows(batch)?;
        for (k, &s) in batch.iter().enumerate() {
            let row = rows.row(k);
            let ys = state.y[s];
            let coef = state.alpha[s] * ys;
            for ((g, &yt), &kv) in state.grad.iter_mut().zip(&state.y).zip(row) {
                *g += yt * coef * f64::from(kv);
            }
            if !state.grad_bar.is_empty() && state.alpha[s] >= state.upper[s] {
                let coef = state.upper[s] * ys;
                for ((g, &yt), &kv) in state.grad_bar.iter_mut().zip(&state.y).zip(row) {
                    *g += yt * coef * f64::from(kv);
                }
            }
        }
    }
    Ok((state, shrinker))
}

/// WSS2 SMO until m - M < tol or `max_iter` steps.
pub fn solve_smo<R: Rows>(
    cache: &mut KernelRowCache<'_, R>,
    problem: DualProblem,
    run: &ExactRun,
    reporter: &mut Reporter<'_, '_>,
) -> Result<DualSolution> {
    let start = Instant::now();
    let (tol, max_iter, shrinking) = (run.tol, run.max_iter, run.shrinking);
    let (mut state, mut shrinker) = start_state(cache, problem, shrinking)?;
    let mut iter = 0u64;
    let mut converged = false;
    while iter < max_iter {
        let mut pair = select_pair(cache, &state, tol)?;
        if pair.is_none() && shrinker.unshrink(&mut state, cache)? {
            pair = select_pair(cache, &state, tol)?;
        }
        let Some((i, j)) = pair else {
            converged = true;
            break;
        };
        let (old_i, old_j) = (state.alpha[i], state.alpha[j]);
        {
            let rows = cache.rows_prefix(&[i, j], state.active)?;
            state.smo_step(i, j, rows.row(0), rows.row(1));
        }
        shrinker.record_moves(&[(i, old_i), (j, old_j)], &mut state, cache)?;
        shrinker.after_step(1, &mut state, cache, tol)?;
        iter += 1;
        reporter.tick(&state, iter, true)?;
    }
    shrinker.unshrink(&mut state, cache)?;
    if !converged && iter >= max_iter {
        converged = state.gap() < tol;
    }
    let mut sol = DualSolution::from_state(state, iter, converged, start);
    sol.cache = cache.stats().clone();
    sol.min_active = shrinker.min_active;
    reporter.finish(&sol)?;
    Ok(sol)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::data::DenseView;
    use crate::core::kernel::Kernel;
    use crate::core::rng::Rng;
    use crate::core::solvers::no_monitor;

    /// A C-SVC problem with the Gaussian kernel's unit diagonal.
    pub(crate) fn rbf_svc(y: Vec<f64>, upper: Vec<f64>) -> DualProblem {
        let n = y.len();
        DualProblem::classification(y, upper, vec![1.0; n])
    }

    /// Random points in [-1, 1]^d with noisy circle labels (both classes, some bounded alphas).
    pub(crate) fn problem(n: usize, d: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let mut rng = Rng::new(seed);
        let mut xs = Vec::with_capacity(n * d);
        let mut ys = Vec::with_capacity(n);
        for k in 0..n {
            let p: Vec<f64> = (0..d).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let r2: f64 = p.iter().map(|v| v * v).sum();
            let flip = rng.next_f64() < 0.1;
            let mut y = if (r2 < 0.35 * d as f64) != flip {
                1.0
            } else {
                -1.0
            };
            if k < 2 {
                y = if k == 0 { 1.0 } else { -1.0 };
            }
            xs.extend(p);
            ys.push(y);
        }
        (xs, ys)
    }

    pub(crate) fn q_matrix(xs: &[f64], y: &[f64], d: usize, gamma: f64) -> Vec<f64> {
        let n = y.len();
        let mut q = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let d2: f64 = (0..d)
                    .map(|c| (xs[i * d + c] - xs[j * d + c]).powi(2))
                    .sum();
                q[i * n + j] = y[i] * y[j] * (-gamma * d2).exp();
            }
        }
        q
    }

    pub(crate) fn objective(q: &[f64], a: &[f64]) -> f64 {
        let n = a.len();
        let mut v = 0.0;
        for i in 0..n {
            for j in 0..n {
                v += 0.5 * a[i] * a[j] * q[i * n + j];
            }
            v -= a[i];
        }
        v
    }

    /// An independent QP solver: accelerated projected gradient (FISTA with gradient restart) on
    /// {y^T a = 0, 0 <= a_i <= C_i}, the projection exact by bisection on its multiplier; step
    /// 1/n (lambda_max(Q) <= n for the Gaussian kernel).
    pub(crate) fn reference_qp(q: &[f64], y: &[f64], c: &[f64], iters: usize) -> Vec<f64> {
        let n = y.len();
        let step = 1.0 / n as f64;
        let (mut a, mut z, mut v) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let mut t = 1.0f64;
        let mut prev = vec![0.0; n];
        for _ in 0..iters {
            for i in 0..n {
                let g: f64 = (0..n).map(|j| q[i * n + j] * z[j]).sum::<f64>() - 1.0;
                v[i] = z[i] - step * g;
            }
            prev.copy_from_slice(&a);
            project(&v, y, c, &mut a);
            let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
            // Restart when the step goes against the momentum.
            let dot: f64 = (0..n).map(|i| (z[i] - a[i]) * (a[i] - prev[i])).sum();
            if dot > 0.0 {
                t = 1.0;
                z.copy_from_slice(&a);
                continue;
            }
            for i in 0..n {
                z[i] = a[i] + (t - 1.0) / t_next * (a[i] - prev[i]);
            }
            t = t_next;
        }
        a
    }

    /// Euclidean projection onto {y^T a = 0, 0 <= a_i <= C_i}: a_i = clip(v_i - mu y_i), with mu
    /// found by bisection on the monotone sum y^T a(mu).
    fn project(v: &[f64], y: &[f64], c: &[f64], out: &mut [f64]) {
        let s = |mu: f64| -> f64 {
            v.iter()
                .zip(y)
                .zip(c)
                .map(|((vi, yi), ci)| yi * (vi - mu * yi).clamp(0.0, *ci))
                .sum()
        };
        let (mut lo, mut hi) = (-1e6, 1e6);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if s(mid) > 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mu = 0.5 * (lo + hi);
        for (((o, vi), yi), ci) in out.iter_mut().zip(v).zip(y).zip(c) {
            *o = (vi - mu * yi).clamp(0.0, *ci);
        }
    }

    pub(crate) fn run_smo(
        xs: &[f64],
        y: &[f64],
        d: usize,
        c: &[f64],
        gamma: f64,
        tol: f64,
        shrinking: Option<usize>,
    ) -> DualSolution {
        let n = y.len();
        let x = DenseView::new(xs, n, d).unwrap();
        let mut cache = KernelRowCache::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        let mut mon = no_monitor;
        let m: Monitor<'_> = &mut mon;
        let monitor = Mutex::new(m);
        let mut rep = Reporter::new(&monitor, Progress::default(), None);
        let run = ExactRun {
            tol,
            max_iter: 1_000_000,
            shrinking,
        };
        solve_smo(&mut cache, rbf_svc(y.to_vec(), c.to_vec()), &run, &mut rep).unwrap()
    }

    /// Box bounds for a test problem: all C, or C times a random weight in [0.1, 3) per
    /// variable (weighted rows).
    pub(crate) fn bounds(n: usize, c: f64, weighted: bool, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| {
                if weighted {
                    c * (0.1 + 2.9 * rng.next_f64())
                } else {
                    c
                }
            })
            .collect()
    }

    /// Checks what every exact solution must satisfy, from the kernel matrix itself.
    pub(crate) fn check_solution(q: &[f64], sol: &DualSolution, c: &[f64], tol: f64) {
        let n = sol.alpha.len();
        let c_max = c.iter().copied().fold(0.0, f64::max);
        let ya: f64 = sol.alpha.iter().zip(&sol.y).map(|(a, y)| a * y).sum();
        assert!(ya.abs() < 1e-9 * c_max * n as f64, "y^T a = {ya}");
        assert!(sol
            .alpha
            .iter()
            .zip(c)
            .all(|(&a, &ci)| (0.0..=ci).contains(&a)));
        // Recompute G from scratch and check the KKT gap to tol (plus rounding of f32 rows).
        let mut st = DualState::new(rbf_svc(sol.y.clone(), c.to_vec()));
        st.alpha = sol.alpha.clone();
        for i in 0..n {
            st.grad[i] = (0..n).map(|j| q[i * n + j] * st.alpha[j]).sum::<f64>() - 1.0;
        }
        assert!(st.gap() < tol + 1e-4, "gap {}", st.gap());
        assert!(sol.converged);
        assert!((st.objective() - sol.objective).abs() < 1e-5 * (1.0 + sol.objective.abs()));
        assert!(
            (objective(q, &sol.alpha) - sol.objective).abs() < 1e-5 * (1.0 + sol.objective.abs())
        );
        // rho: free variables satisfy y_i G_i = rho (to tol).
        for (i, (&a, &ci)) in sol.alpha.iter().zip(c).enumerate() {
            if a > 1e-9 && a < ci - 1e-9 {
                assert!((st.y[i] * st.grad[i] - sol.rho).abs() < tol + 1e-4);
            }
        }
    }

    #[test]
    fn smo_matches_an_independent_qp_solver() {
        let mut rng = Rng::new(77);
        // Odd trials weight the rows: a bound C_i per variable.
        for trial in 0..24 {
            let n = 10 + rng.below(50);
            let d = 1 + rng.below(4);
            let c = [0.1, 1.0, 10.0][trial % 3];
            let gamma = [0.3, 1.0, 4.0][(trial / 3) % 3];
            let (xs, y) = problem(n, d, 1000 + trial as u64);
            let c = bounds(n, c, trial % 2 == 1, trial as u64);
            let q = q_matrix(&xs, &y, d, gamma);
            let tol = 1e-6;
            // Shrinking off, every 3 pairs (many passes on a small problem), LIBSVM's period.
            let shrinking = [None, Some(3), Some(0)][(trial / 2) % 3];
            let sol = run_smo(&xs, &y, d, &c, gamma, tol, shrinking);
            check_solution(&q, &sol, &c, tol);
            let reference = reference_qp(&q, &y, &c, 5_000);
            let f_ref = objective(&q, &reference);
            assert!(
                sol.objective <= f_ref + 1e-6 * (1.0 + f_ref.abs()),
                "trial {trial}: smo {} vs reference {f_ref}",
                sol.objective
            );
            assert!(
                (sol.objective - f_ref).abs() < 1e-4 * (1.0 + f_ref.abs()),
                "trial {trial}: {} vs {f_ref}",
                sol.objective
            );
        }
    }

    #[test]
    fn smo_stops_at_the_iteration_cap_and_says_so() {
        let (xs, y) = problem(80, 2, 3);
        let x = DenseView::new(&xs, 80, 2).unwrap();
        let mut cache = KernelRowCache::new(&x, Kernel::rbf(2.0), 1 << 20).unwrap();
        let mut mon = no_monitor;
        let m: Monitor<'_> = &mut mon;
        let monitor = Mutex::new(m);
        let mut rep = Reporter::new(&monitor, Progress::default(), None);
        let run = ExactRun {
            tol: 1e-8,
            max_iter: 3,
            shrinking: Some(1),
        };
        let sol = solve_smo(
            &mut cache,
            rbf_svc(y.clone(), vec![10.0; 80]),
            &run,
            &mut rep,
        )
        .unwrap();
        assert_eq!(sol.iterations, 3);
        assert!(!sol.converged);
        let ya: f64 = sol.alpha.iter().zip(&y).map(|(a, y)| a * y).sum();
        assert!(ya.abs() < 1e-12);
    }
}
