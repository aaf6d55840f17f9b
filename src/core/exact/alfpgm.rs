//! ALFPGM with pWSS (Aregbesola & Griva, paper 003; the method as built and the choices made:
//! `docs/alfpgm_notes.md`): an exact solver of the dual C-SVC that optimises p pairs of variables
//! per decomposition step.
//!
//! The problem is `smo.rs`'s (`DualProblem`: min 1/2 a^T Q a + p^T a, y^T a fixed, a box per
//! variable; C-SVC, SVR and one-class are its instances), with the same gradient, index sets,
//! stopping rule m(a) - M(a) < tol and bias. With a tube (epsilon-SVR, one signed variable per
//! data row) the candidates carry their up and low values (`DualState::up_value` /
//! `low_value`), the look-ahead and the subproblem's SMO step through the kinks at 0
//! (`tube_pair_step`), and the subproblem is always solved by SMO (the augmented Lagrangian's
//! FISTA has no term for epsilon |a|_1). nu-SVR's paired form (`DualProblem::paired`: a row's
//! a_t and a_t* at one position, one value -F_t for both) keeps one candidate list per label,
//! filters the j scan by the label's own list (`Work::j_member`) and puts a position in B at
//! most once, as one of its two variables.
//!
//! One decomposition step:
//! 1. **pWSS.** Up to p pairs (i, j) by repeated second-order selection. Candidates: the 4p
//!    largest -y_t G_t of I_up and the `min_alpha_check` smallest of I_low (minAlphaCheck; by
//!    default all of I_low [RECON: a list of 4p made j a poor second-order choice: cod-rna took
//!    14,426 working sets and 6.2 s, with all of I_low 97 and 2.7 s; a9a 3,289 -> 238]). Each
//!    pair is WSS2 on a look-ahead gradient: i = the largest violation among the candidates, j =
//!    argmin -b_it^2 / a_it over the I_low candidates with b_it > 0; then the candidates'
//!    violations are updated as if the pair's clipped SMO step had been taken (kernel rows of i
//!    and j), so the next pair is the one SMO would take next [RECON: without it the p pairs
//!    of a cluster of similar points were picked together and the working set gained what one
//!    SMO step gains]. The limiter controls steer the candidates only: an index is left out once
//!    it has been in B `max_alpha_opt` times, or once it has been in B `min_alpha_opt` times,
//!    sits at a bound (0 or C) and moved less than `alpha_delta_threshold * C` the last time
//!    (MinMaxLimiter) -- unless its violation is at least half the gap m - M [RECON: the limiter
//!    alone kept the maximal violators out for hundreds of steps on a9a]. Pairs are taken while
//!    the violation exceeds tol and at least `pair_ratio` times the first pair's [RECON]. If
//!    the limited candidates give no pair, the selection runs again
//!    without limiter, which always yields the maximal violating pair while m - M >= tol.
//!    A working set of one pair is solved exactly by the analytic SMO step.
//! 2. **Subproblem in the d-form** (d = a_B - a_B^k): min 1/2 d^T Q_BB d + G_B^T d s.t.
//!    y_B^T d = 0, -a_B <= d <= C - a_B, with Q_BB taken from the cached kernel rows of B.
//!    By default (`InnerSolver::Smo`) it is solved by second-order SMO on Q_BB to eps_in (below)
//!    [RECON: the paper's AL + FISTA of steps 3-5 cost 1,365 FISTA iterations of O(|B|^2) per
//!    working set on a9a, serial; SMO on the subproblem takes O(|B|) per step, a9a 2 threads
//!    3.74 -> 2.50 s]; steps 3-5 are the paper's method, `InnerSolver::Fista`.
//! 3. **Augmented Lagrangian** for the equality: L_k(d, lambda) = phi(d) - lambda y^T d +
//!    k/2 (y^T d)^2, lambda warm-started from the previous step (it converges to the bias rho),
//!    updated lambda <- lambda - k y^T d until k |y^T d| <= eps_in, kept within the range of
//!    -y_t G_t on B widened by its length [RECON]; k defaults to lambda_max(Q_BB) / |B|.
//! 4. **FISTA** (Beck & Teboulle) for each AL subproblem: projected gradient steps 1/L on the box,
//!    Nesterov momentum, adaptive restart (O'Donoghue & Candes) when the step opposes the
//!    momentum, stop when the gradient mapping |L (z - d)|_inf <= eps_in, with
//!    eps_in = max(inner_tol_factor * tol, inner_rel * (smallest pair violation in B)) -- loose
//!    early, tight late (ThunderSVM's local_eps idea). L = safety * lambda_max(Q_BB) + k |B|, lambda_max by a
//!    few power iterations.
//! 5. **Exact feasibility repair**: the residual y^T d goes onto the free entries of d
//!    (d_i <- clip(d_i - mu y_i) for l_i < d_i < u_i, mu by bisection; every entry only if the
//!    free ones cannot absorb it), so y^T a = 0 holds to rounding however loose the AL solve
//!    was, and variables the step drove to a bound stay exactly at 0 or C.
//! 6. **Progress guard**: if phi(d) >= 0 (no decrease of f) but d is a descent direction, d is
//!    shortened by the exact line search on [0, d] [RECON]; otherwise one WSS2 SMO step
//!    (`smo.rs`) is taken instead, so every step decreases f.
//! 7. **Gradient update** G += Q_{:,B} d over the cached rows of B, in parallel over blocks of n.
//!
//! The global stopping test always uses the unfiltered I_up / I_low.

use std::time::Instant;

use rayon::prelude::*;

use crate::core::common::checks::check_positive_finite;
use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::data::rows::Rows;
use crate::core::exact::dual::{
    label_index, tube_pair_step, tube_shifts, DualProblem, DualSolution, DualState, ExactRun,
    Reporter, TubePair, TAU,
};
use crate::core::exact::smo::{select_pair, start_state};
use crate::core::exact::stride::Stride;
use crate::core::kernels::kernel_cache::{row_blocks, CachedRows, KernelRowCache, ROW_BLOCK};
use crate::core::simd;
use crate::core::simd::{Level, RowValue};

/// ALFPGM's parameters (defaults in `Default`).
#[derive(Debug, Clone, PartialEq)]
pub struct AlfpgmParams {
    /// p: pairs per working set (|B| <= 2p).
    pub n_pairs: usize,
    /// MinMaxLimiter: times an index must have been in B before it may be left out for sitting
    /// at a bound without moving.
    pub min_alpha_opt: u32,
    /// Times an index may be in B before it is left out (until the unfiltered fallback).
    pub max_alpha_opt: u32,
    /// Size of the j candidate list (the smallest -y G of I_low); 0 = all of I_low.
    pub min_alpha_check: usize,
    /// A pair is added only while its look-ahead violation is at least this fraction of the
    /// first pair's (p is then a cap): weak pairs cost a kernel row and a gradient update each
    /// and gain next to nothing [RECON; 0 = always p pairs].
    pub pair_ratio: f64,
    /// MinMaxLimiter's "stopped changing" threshold, relative to C.
    pub alpha_delta_threshold: f64,
    /// AL scaling parameter k; 0 = lambda_max(Q_BB) / |B| for each working set.
    pub al_penalty: f64,
    /// AL multiplier updates per working set at most.
    pub al_max_iter: usize,
    /// FISTA iterations per AL subproblem at most.
    pub fista_max_iter: usize,
    /// Floor of the inner tolerance, as a fraction of tol.
    pub inner_tol_factor: f64,
    /// Inner tolerance relative to the violation of the working set.
    pub inner_rel: f64,
    /// Power iterations for lambda_max(Q_BB).
    pub power_iters: usize,
    /// Safety factor on the power-method estimate (which is from below).
    pub lipschitz_safety: f64,
    /// FISTA adaptive restart.
    pub restart: bool,
    /// How the subproblem on B is solved.
    pub inner: InnerSolver,
}

/// The subproblem solver of a working set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerSolver {
    /// The paper's: augmented Lagrangian for y^T d = 0, FISTA on the box (steps 3-5).
    Fista,
    /// WSS2 SMO on the subproblem itself, O(|B|) per step from Q_BB [RECON: a9a took 1,365
    /// FISTA iterations of O(|B|^2) per working set, 20% of a fit and all of it on one thread].
    Smo,
}

impl InnerSolver {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "fista" => Ok(InnerSolver::Fista),
            "smo" => Ok(InnerSolver::Smo),
            other => Err(SvmError::invalid_parameter(
                "inner",
                format!("must be 'fista' or 'smo', got {other:?}"),
            )),
        }
    }
}

impl Default for AlfpgmParams {
    fn default() -> Self {
        AlfpgmParams {
            n_pairs: 50,
            min_alpha_opt: 5,
            max_alpha_opt: 500,
            min_alpha_check: 0,
            pair_ratio: 0.5,
            alpha_delta_threshold: 1e-5,
            al_penalty: 0.0,
            al_max_iter: 20,
            fista_max_iter: 500,
            inner_tol_factor: 0.1,
            inner_rel: 0.1,
            power_iters: 8,
            lipschitz_safety: 1.1,
            restart: true,
            inner: InnerSolver::Smo,
        }
    }
}

impl AlfpgmParams {
    pub fn check(&self) -> Result<()> {
        if self.n_pairs == 0 {
            return Err(SvmError::invalid_parameter("n_pairs", "must be at least 1"));
        }
        if self.max_alpha_opt == 0 {
            return Err(SvmError::invalid_parameter(
                "max_alpha_opt",
                "must be at least 1",
            ));
        }
        if self.min_alpha_opt > self.max_alpha_opt {
            return Err(SvmError::invalid_parameter(
                "min_alpha_opt",
                format!(
                    "must not exceed max_alpha_opt ({} > {})",
                    self.min_alpha_opt, self.max_alpha_opt
                ),
            ));
        }
        if !(self.alpha_delta_threshold.is_finite() && self.alpha_delta_threshold >= 0.0) {
            return Err(SvmError::invalid_parameter(
                "alpha_delta_threshold",
                format!(
                    "must be a finite number >= 0, got {}",
                    self.alpha_delta_threshold
                ),
            ));
        }
        if !(self.pair_ratio.is_finite() && (0.0..1.0).contains(&self.pair_ratio)) {
            return Err(SvmError::invalid_parameter(
                "pair_ratio",
                format!("must lie in [0, 1), got {}", self.pair_ratio),
            ));
        }
        if !(self.al_penalty.is_finite() && self.al_penalty >= 0.0) {
            return Err(SvmError::invalid_parameter(
                "al_penalty",
                format!(
                    "must be a finite number >= 0 (0 = automatic), got {}",
                    self.al_penalty
                ),
            ));
        }
        for (name, v) in [
            ("al_max_iter", self.al_max_iter),
            ("fista_max_iter", self.fista_max_iter),
            ("power_iters", self.power_iters),
        ] {
            if v == 0 {
                return Err(SvmError::invalid_parameter(name, "must be at least 1"));
            }
        }
        check_positive_finite("inner_tol_factor", self.inner_tol_factor)?;
        check_positive_finite("inner_rel", self.inner_rel)?;
        if !(self.lipschitz_safety.is_finite() && self.lipschitz_safety >= 1.0) {
            return Err(SvmError::invalid_parameter(
                "lipschitz_safety",
                format!(
                    "must be a finite number >= 1, got {}",
                    self.lipschitz_safety
                ),
            ));
        }
        Ok(())
    }

    fn candidates(&self) -> usize {
        if self.min_alpha_check == 0 {
            usize::MAX
        } else {
            self.min_alpha_check.max(1)
        }
    }
}

/// The k entries with the smallest keys of a stream, in one pass: entries at or above the
/// current threshold are rejected with one comparison; the buffer is cut back to the best k
/// (`select_nth_unstable`) whenever it holds 2k + 64, which sets the threshold.
struct Smallest {
    k: usize,
    buf: Vec<(f64, u32)>,
    threshold: f64,
}

impl Smallest {
    fn with_capacity(cap: usize) -> Self {
        Smallest {
            k: 0,
            buf: Vec::with_capacity(cap),
            threshold: f64::INFINITY,
        }
    }

    fn reset(&mut self, k: usize) {
        self.k = k.max(1);
        self.buf.clear();
        self.threshold = f64::INFINITY;
    }

    #[inline]
    fn push(&mut self, key: f64, t: u32) {
        if key >= self.threshold {
            return;
        }
        self.buf.push((key, t));
        if self.buf.len() >= self.k.saturating_mul(2).saturating_add(64) {
            self.cut();
            self.threshold = self.buf[self.k - 1].0;
        }
    }

    fn cut(&mut self) {
        if self.buf.len() > self.k {
            self.buf
                .select_nth_unstable_by(self.k - 1, |a, b| a.0.total_cmp(&b.0));
            self.buf.truncate(self.k);
            // The k-th smallest is at k - 1 after the partition; keep it there for `push`.
            let worst = self
                .buf
                .iter()
                .enumerate()
                .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
                .map_or(0, |(i, _)| i);
            self.buf.swap(worst, self.k - 1);
        }
    }

    /// The best k, ascending by key.
    fn finish(&mut self) -> &[(f64, u32)] {
        self.cut();
        self.buf.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        &self.buf
    }

    /// The best k in no particular order (no sort: with k = all, a whole index set).
    fn finish_unordered(&mut self) -> &[(f64, u32)] {
        self.cut();
        &self.buf
    }
}

/// The longest gradient-update work item (`parallel::item_len` sizes them).
const BLOCK: usize = 4096;

/// Scratch of one ALFPGM run, allocated once.
struct Work {
    /// Per index: times in B, and |change| at its last optimisation.
    count: Vec<u32>,
    last_change: Vec<f64>,
    in_b: Vec<bool>,
    flags: Vec<u8>,
    /// Candidate (look-ahead v, index) lists of the pairing.
    cand_up: Vec<(f64, u32)>,
    /// The label (`label_index`; 0 without a sum per label) of each `cand_up` entry: a paired
    /// position can be an i of both labels.
    cand_up_label: Vec<u8>,
    cand_low: Vec<(f64, u32)>,
    /// The j candidates by position as the scans read them: look-ahead values (+inf once in
    /// B) and positions.
    low_v: Vec<f64>,
    low_t: Vec<u32>,
    /// The smallest violation b_ij = v_i - v_j among the selected pairs.
    min_violation: f64,
    /// i candidates keyed by -v (largest v first), j candidates keyed by v.
    /// With a sum per label, [1] holds the y = -1 candidates (each label keeps its own best:
    /// one label's violations can lie all above the other's); otherwise only [0] is used.
    up: [Smallest; 2],
    low: [Smallest; 2],
    b: Vec<usize>,
    /// The label of each variable of B (paired: which of the position's two it is).
    b_label: Vec<u8>,
    pairs_i: Vec<usize>,
    pairs_j: Vec<usize>,
    pairs_label: Vec<u8>,
    /// Paired: per label, 1 at the positions that are that label's j candidates in the current
    /// pairing, 0 elsewhere (the j scan's label filter); empty otherwise.
    j_member: [Vec<f64>; 2],
    q: Vec<f64>,
    g: Vec<f64>,
    yb: Vec<f64>,
    lo: Vec<f64>,
    hi: Vec<f64>,
    d: Vec<f64>,
    z: Vec<f64>,
    prev: Vec<f64>,
    grad: Vec<f64>,
    v: Vec<f64>,
    w: Vec<f64>,
    coef: Vec<(f64, usize)>,
    /// (position, a_t before) of the variables the last step moved.
    moved: Vec<(usize, f64)>,
    /// I_up / I_low membership within the working set (the SMO subproblem solver).
    sub_smo: LocalSmoScratch,
    /// With a tube, a_B before the step (where the subproblem's kinks sit).
    base: Vec<f64>,
}

impl Work {
    fn new(n: usize, p: usize, paired: bool) -> Self {
        let m = 2 * p;
        let member = || if paired { vec![0.0; n] } else { Vec::new() };
        Work {
            cand_up_label: Vec::with_capacity(4 * m + 64),
            b_label: Vec::with_capacity(m),
            pairs_label: Vec::with_capacity(p),
            j_member: [member(), member()],
            count: vec![0; n],
            last_change: vec![f64::INFINITY; n],
            in_b: vec![false; n],
            flags: vec![0; n],
            cand_up: Vec::with_capacity(4 * m + 64),
            cand_low: Vec::with_capacity(16 * p + 64),
            low_v: Vec::with_capacity(16 * p + 64),
            low_t: Vec::with_capacity(16 * p + 64),
            min_violation: f64::INFINITY,
            up: [(); 2].map(|_| Smallest::with_capacity(4 * m + 64)),
            low: [(); 2].map(|_| Smallest::with_capacity(16 * p + 64)),
            b: Vec::with_capacity(m),
            pairs_i: Vec::with_capacity(p),
            pairs_j: Vec::with_capacity(p),
            q: Vec::with_capacity(m * m),
            g: Vec::with_capacity(m),
            yb: Vec::with_capacity(m),
            lo: Vec::with_capacity(m),
            hi: Vec::with_capacity(m),
            d: Vec::with_capacity(m),
            z: Vec::with_capacity(m),
            prev: Vec::with_capacity(m),
            grad: Vec::with_capacity(m),
            v: Vec::with_capacity(m),
            w: Vec::with_capacity(m),
            coef: Vec::with_capacity(m),
            moved: Vec::with_capacity(m),
            sub_smo: LocalSmoScratch::default(),
            base: Vec::with_capacity(m),
        }
    }

    /// Follows a position swap of the shrinking.
    fn swap(&mut self, a: usize, b: usize) {
        self.count.swap(a, b);
        self.last_change.swap(a, b);
        self.in_b.swap(a, b);
        self.flags.swap(a, b);
    }
}

/// Runs ALFPGM until m - M < tol or `max_iter` pair steps, counted as LIBSVM counts its
/// iterations (so that `max_iter` and the iterations reported mean what they mean for SMO and
/// scikit-learn's SVC): a working set of one pair or a fallback is one step, a working set of
/// several the SMO steps inside it (capped at what is left; with `InnerSolver::Fista`, its
/// iterations, a working set once started run to its end). The shrinking schedule counts
/// variable pairs moved.
pub fn solve_alfpgm<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    problem: DualProblem,
    run: &ExactRun,
    params: &AlfpgmParams,
    reporter: &mut Reporter<'_, '_>,
) -> Result<DualSolution> {
    params.check()?;
    let (tol, max_iter, shrinking) = (run.tol, run.max_iter, run.shrinking);
    let start = Instant::now();
    let n = problem.n();
    let p = params.n_pairs.min(n.div_ceil(2)).max(1);
    let mut stride = Stride::new(&problem, tol);
    let mut strode = Vec::new();
    let (mut state, mut shrinker) = start_state(cache, problem, shrinking, reporter)?;
    let mut work = Work::new(n, p, state.paired);
    cache.ensure_capacity(2 * p);
    let mut lambda = 0.0;
    let mut iter = 0u64;
    let mut fallback_steps = 0u64;
    let mut inner_iterations = 0u64;
    let mut working_sets = 0u64;
    let mut converged = false;
    for t in 0..n {
        refresh_flags(&state, &mut work, params, t);
    }
    let mut prev = state.extremes();
    while iter < max_iter {
        // One pass: the unfiltered m(a), M(a) and the limited candidate lists.
        let (m_up, m_low) = scan_candidates(&state, &mut work, params, p, prev, true);
        if m_up - m_low < tol {
            if shrinker.unshrink(&mut state, cache, reporter)? {
                prev = state.extremes();
                continue;
            }
            converged = true;
            break;
        }
        prev = (m_up, m_low);
        pick_pairs(cache, &state, &mut work, params, p, tol)?;
        if work.pairs_i.is_empty() {
            scan_candidates(&state, &mut work, params, p, prev, false);
            pick_pairs(cache, &state, &mut work, params, p, tol)?;
        }
        if work.pairs_i.is_empty() {
            // No pair with b_ij > 0 although m - M >= tol cannot happen; stop, reported.
            break;
        }
        working_sets += 1;
        if work.pairs_i.len() == 1 && !state.paired {
            // One pair: the subproblem's exact solution is the analytic SMO step.
            let (i, j) = (work.pairs_i[0], work.pairs_j[0]);
            work.moved.clear();
            work.moved
                .extend([(i, state.bound_part(i)), (j, state.bound_part(j))]);
            let rows = cache.rows_prefix(&[i, j], state.active)?;
            let (di, dj) = state.smo_step(i, j, rows.row(0), rows.row(1));
            iter += 1;
            for (t, dt) in [(i, di), (j, dj)] {
                work.count[t] = work.count[t].saturating_add(1);
                work.last_change[t] = dt.abs();
                work.in_b[t] = false;
                refresh_flags(&state, &mut work, params, t);
            }
        } else {
            let rows = cache.rows_prefix(&work.b, state.active)?;
            let left = max_iter - iter;
            let decrease =
                solve_subproblem(&rows, &state, &mut work, params, tol, &mut lambda, left);
            inner_iterations += decrease.1;
            iter += decrease.1.max(1);
            if decrease.0 < 0.0 {
                apply_step(&rows, &mut state, &mut work);
                for k in 0..work.b.len() {
                    let t = work.b[k];
                    refresh_flags(&state, &mut work, params, t);
                }
            } else if state.paired {
                // No decrease: the unfiltered maximal violating pair alone (the paired form
                // has no analytic step of its own: the subproblem's SMO on two variables).
                fallback_steps += 1;
                scan_candidates(&state, &mut work, params, 1, prev, false);
                pick_pairs(cache, &state, &mut work, params, 1, tol)?;
                work.moved.clear();
                if !work.pairs_i.is_empty() {
                    let rows = cache.rows_prefix(&work.b, state.active)?;
                    let left = max_iter.saturating_sub(iter).max(1);
                    let decrease =
                        solve_subproblem(&rows, &state, &mut work, params, tol, &mut lambda, left);
                    iter += decrease.1.max(1);
                    if decrease.0 < 0.0 {
                        apply_step(&rows, &mut state, &mut work);
                    }
                }
                for k in 0..work.b.len() {
                    let t = work.b[k];
                    work.in_b[t] = false;
                    refresh_flags(&state, &mut work, params, t);
                }
                if work.moved.is_empty() {
                    // Not even the maximal pair descends (rounding): stop, reported.
                    break;
                }
            } else {
                // No decrease from the multi-pair step: one WSS2 SMO step instead.
                fallback_steps += 1;
                for &t in &work.b {
                    work.in_b[t] = false;
                }
                work.moved.clear();
                if let Some(moved) = smo_fallback(cache, &mut state)? {
                    work.moved.extend(moved);
                    for (t, _) in moved {
                        refresh_flags(&state, &mut work, params, t);
                    }
                }
            }
        }
        shrinker.record_moves(&work.moved, &mut state, cache)?;
        let pairs = work.moved.len().div_ceil(2);
        for &(a, b) in shrinker.after_step(pairs, &mut state, cache, tol, reporter)? {
            work.swap(a, b);
        }
        strode.clear();
        if stride.after(iter, &mut state, &mut strode) {
            shrinker.record_moves(&strode, &mut state, cache)?;
            for &(t, _) in &strode {
                refresh_flags(&state, &mut work, params, t);
            }
        }
        reporter.tick(&state, iter, false)?;
    }
    shrinker.unshrink(&mut state, cache, reporter)?;
    if !converged {
        converged = state.gap() < tol;
    }
    let mut sol = DualSolution::from_state(state, iter, converged, start);
    sol.cache = cache.stats().clone();
    sol.min_active = shrinker.min_active;
    sol.fallback_steps = fallback_steps;
    sol.inner_iterations = inner_iterations;
    sol.working_sets = working_sets;
    sol.strides = stride.taken;
    reporter.finish(&sol)?;
    Ok(sol)
}

const UP: u8 = 1;
const LOW: u8 = 2;
const LIMITED: u8 = 4;
/// Paired: a_t*'s membership (`UP` / `LOW` are a_t's).
const UP_STAR: u8 = 8;
const LOW_STAR: u8 = 16;

/// A variable of B: its value and label y as a member of label `label` at position t (paired:
/// a_t with +1 or a_t* with -1; otherwise the position's own).
#[inline]
fn variable(state: &DualState, t: usize, label: u8) -> (f64, f64) {
    match (state.paired, label) {
        (true, 0) => (state.alpha[t], 1.0),
        (true, _) => (state.alpha_star[t], -1.0),
        (false, _) => (state.alpha[t], state.y[t]),
    }
}

/// Index t's membership of I_up / I_low and whether the limiter holds it back; refreshed
/// whenever a_t, its count or its last change move (only for the indices of a step).
fn refresh_flags(state: &DualState, work: &mut Work, params: &AlfpgmParams, t: usize) {
    let c = state.upper[t];
    // At a bound or a tube's kink: where a variable stops for a while.
    let at_bound = !state.is_free(t);
    let cnt = work.count[t];
    let limited = cnt >= params.max_alpha_opt
        || (cnt >= params.min_alpha_opt
            && at_bound
            && work.last_change[t] < params.alpha_delta_threshold * c);
    if state.paired {
        let [(up, low), (up_star, low_star)] = state.paired_sets(t);
        work.flags[t] = u8::from(up) * UP
            + u8::from(low) * LOW
            + u8::from(up_star) * UP_STAR
            + u8::from(low_star) * LOW_STAR
            + u8::from(limited) * LIMITED;
        return;
    }
    work.flags[t] = u8::from(state.in_up(t)) * UP
        + u8::from(state.in_low(t)) * LOW
        + u8::from(limited) * LIMITED;
}

/// One pass over all indices: returns the unfiltered (m(a), M(a)) and fills the candidate lists
/// (the 2p largest -y G of I_up, the `min_alpha_check` smallest of I_low), leaving out what the
/// limiter holds back when `filtered`. The limiter never holds back a strong violator: an index
/// whose violation is at least half the gap (of the previous step, `prev`) stays a candidate.
fn scan_candidates(
    state: &DualState,
    work: &mut Work,
    params: &AlfpgmParams,
    p: usize,
    prev: (f64, f64),
    filtered: bool,
) -> (f64, f64) {
    let Work { flags, up, low, .. } = work;
    let flags = &flags[..state.active];
    let mut scan = CandidateScan::start(up, low, params, p, prev, filtered);
    if state.paired {
        // Both labels' values at t are -F_t; the flags say which lists t joins.
        for (t, (&f, &g)) in flags.iter().zip(&state.grad).enumerate() {
            scan.offer(0, t, f, (UP, LOW), (-g, -g));
            scan.offer(1, t, f, (UP_STAR, LOW_STAR), (-g, -g));
        }
    } else if state.signed {
        offer_positions::<true>(state, flags, &mut scan);
    } else {
        offer_positions::<false>(state, flags, &mut scan);
    }
    scan.extremes(state.sum_per_label)
}

/// What a candidate scan keeps while it walks the positions: the lists it fills, each label's
/// (m, M) so far, and the limiter's test (half the previous gap: a stronger violator passes).
struct CandidateScan<'w> {
    up: &'w mut [Smallest; 2],
    low: &'w mut [Smallest; 2],
    ext: [(f64, f64); 2],
    prev: (f64, f64),
    half: f64,
    skip: u8,
}

impl<'w> CandidateScan<'w> {
    /// Empties the lists: 4p i candidates and `min_alpha_check` j candidates per label.
    fn start(
        up: &'w mut [Smallest; 2],
        low: &'w mut [Smallest; 2],
        params: &AlfpgmParams,
        p: usize,
        prev: (f64, f64),
        filtered: bool,
    ) -> Self {
        for (up, low) in up.iter_mut().zip(low.iter_mut()) {
            up.reset(4 * p);
            low.reset(params.candidates());
        }
        CandidateScan {
            up,
            low,
            ext: [(f64::NEG_INFINITY, f64::INFINITY); 2],
            prev,
            half: 0.5 * (prev.0 - prev.1),
            skip: if filtered { LIMITED } else { 0 },
        }
    }

    /// Position t as a variable of `label`: a member of I_up (I_low) where flag `bits.0`
    /// (`bits.1`) is set, with the value `values.0` (`values.1`) there.
    #[inline(always)]
    fn offer(&mut self, label: usize, t: usize, f: u8, bits: (u8, u8), values: (f64, f64)) {
        let (v_up, v_low) = values;
        let e = &mut self.ext[label];
        if f & bits.0 != 0 {
            e.0 = e.0.max(v_up);
            if f & self.skip == 0 || v_up - self.prev.1 >= self.half {
                self.up[label].push(-v_up, t as u32);
            }
        }
        if f & bits.1 != 0 {
            e.1 = e.1.min(v_low);
            if f & self.skip == 0 || self.prev.0 - v_low >= self.half {
                self.low[label].push(v_low, t as u32);
            }
        }
    }

    /// The (m, M) that decides the stop: with a sum per label the label whose m - M is
    /// largest (LIBSVM's Solver_NU), otherwise the one set's.
    fn extremes(&self, per_label: bool) -> (f64, f64) {
        let ext = self.ext;
        if per_label && ext[1].0 - ext[1].1 > ext[0].0 - ext[0].1 {
            ext[1]
        } else {
            ext[0]
        }
    }
}

/// `scan_candidates`' pass over a box or tube form, `TUBE` = `state.signed`
/// (`DualState::up_entry`'s reason); each label's lists with a sum per label
/// (`DualProblem::sum_per_label`), else all in label 0's.
fn offer_positions<const TUBE: bool>(
    state: &DualState,
    flags: &[u8],
    scan: &mut CandidateScan<'_>,
) {
    let per_label = usize::from(state.sum_per_label);
    let tube = state.tube;
    for (t, (((&f, &y), &g), &a)) in flags
        .iter()
        .zip(&state.y)
        .zip(&state.grad)
        .zip(&state.alpha)
        .enumerate()
    {
        // The values of t as an i (`DualState::up_value`) and as a j (`low_value`).
        let values = if TUBE {
            let (up, low) = tube_shifts(a, tube);
            (-g + up, -g + low)
        } else {
            let v = -y * g;
            (v, v)
        };
        scan.offer(label_index(y) & per_label, t, f, (UP, LOW), values);
    }
}

/// pWSS pairing: fills `work.b` (and the pairs) with up to p pairs from the candidate lists,
/// marking them in `work.in_b`.
fn pick_pairs<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    state: &DualState,
    work: &mut Work,
    params: &AlfpgmParams,
    p: usize,
    tol: f64,
) -> Result<()> {
    let Work {
        b,
        b_label,
        in_b,
        pairs_i,
        pairs_j,
        pairs_label,
        min_violation,
        up,
        low,
        cand_up,
        cand_up_label,
        cand_low,
        low_v,
        low_t,
        j_member,
        ..
    } = work;
    for &t in b.iter() {
        in_b[t] = false;
    }
    b.clear();
    b_label.clear();
    pairs_i.clear();
    pairs_j.clear();
    pairs_label.clear();
    *min_violation = f64::INFINITY;
    let none = |lists: &[Smallest; 2]| lists.iter().all(|l| l.buf.is_empty());
    if none(up) || none(low) {
        return Ok(());
    }
    // Repeated WSS2 on a look-ahead gradient: after each pair (i, j) is chosen, the violations
    // v_t = -y_t G_t of the remaining candidates are updated as if the pair's SMO step had been
    // taken (v_t -= (K_ti - K_tj) s, s the clipped WSS2 step length), from the kernel rows of i
    // and j. Without it, the p pairs of a cluster of similar points all carry the same large
    // violation and are picked together although one step fixes them all (ijcnn1: 25 such pairs
    // gained what one SMO step gains); with it each pair is the one SMO would take next.
    cand_up.clear();
    cand_up_label.clear();
    for (label, up) in up.iter_mut().enumerate() {
        let list = up.finish();
        cand_up.extend(list.iter().map(|&(key, t)| (-key, t)));
        cand_up_label.extend(std::iter::repeat_n(label as u8, list.len()));
    }
    for (low, member) in low.iter_mut().zip(j_member.iter_mut()) {
        let list = low.finish_unordered();
        if state.paired {
            for &(_, t) in list {
                member[t as usize] = 1.0;
            }
        }
    }
    // The j candidates by position, cut into the runs of the kernel-row blocks: the scan of a
    // block runs in the work item that computes (or reads) that block of row i. A paired
    // position that is a j of both labels has one value: one entry, filtered per label by
    // `j_member`.
    merge_by_position(&low[0].buf, &low[1].buf, cand_low);
    low_v.clear();
    low_v.extend(cand_low.iter().map(|e| e.0));
    low_t.clear();
    low_t.extend(cand_low.iter().map(|e| e.1));
    let active = state.active;
    let mut parts: Vec<LowPart<'_>> = Vec::with_capacity(row_blocks(active));
    let (mut rest_v, mut rest_t) = (&mut low_v[..], &low_t[..]);
    let mut place = 0;
    for blk in 0..row_blocks(active) {
        let end = ((blk + 1) * ROW_BLOCK).min(active);
        let take = rest_t.partition_point(|&t| (t as usize) < end);
        let (head_v, tail_v) = std::mem::take(&mut rest_v).split_at_mut(take);
        let (head_t, tail_t) = rest_t.split_at(take);
        parts.push(LowPart {
            place,
            v: head_v,
            t: head_t,
        });
        place += take;
        (rest_v, rest_t) = (tail_v, tail_t);
    }
    let level = simd::level();
    let mut first_violation = 0.0;
    let pair_ratio = params.pair_ratio;
    // The look-ahead update of the last pair (rows of i and j, step), applied to the j
    // candidates in the same pass as the next pair's j search.
    let mut pending: Option<(usize, usize, f64)> = None;
    while pairs_i.len() < p {
        // i: the largest look-ahead violation in I_up.
        let mut best_i = None;
        let mut vi = f64::NEG_INFINITY;
        for (k, &(v, t)) in cand_up.iter().enumerate() {
            if v > vi && !in_b[t as usize] {
                vi = v;
                best_i = Some(k);
            }
        }
        let Some(ki) = best_i else { break };
        let i = cand_up[ki].1 as usize;
        let li = cand_up_label[ki];
        // Stop at pairs that violate much less than the first one: they cost a kernel row and
        // a gradient update each and gain next to nothing.
        let floor = match pairs_i.first() {
            Some(_) => tol.max(pair_ratio * first_violation),
            None => tol,
        };
        let (idx, k_rows, step) = match pending.take() {
            Some((pi, pj, step)) => ([i, pi, pj], 3, step),
            None => ([i, i, i], 1, 0.0),
        };
        let (diag, equal_diag) = (&state.diag[..], state.equal_diag);
        // With a sum per label, j only among i's label (a step keeps each label's sum).
        let label = if state.paired {
            Some((&j_member[usize::from(li)][..], 1.0))
        } else {
            state.sum_per_label.then(|| (&state.y[..], state.y[i]))
        };
        let (_, (lows, best)) = cache.rows_prefix_blocks(
            &idx[..k_rows],
            active,
            &mut parts,
            |j0, rows, part| {
                let input = simd::JScanInput {
                    t: part.t,
                    diag,
                    equal_diag,
                    j0,
                    i,
                    vi,
                    row_i: rows[0],
                    update: (k_rows == 3).then(|| (rows[1], rows[2], step)),
                    label,
                    tau: TAU,
                };
                let scan = simd::j_scan(level, part.v, &input);
                part.found(scan)
            },
            || (TwoSmallest::default(), NO_J),
            |(ta, ba), (tb, bb)| {
                let best = if bb.0 < ba.0 || (bb.0 == ba.0 && bb.1 > ba.1) {
                    bb
                } else {
                    ba
                };
                (ta.merge(tb), best)
            },
        )?;
        if vi - lows.without(i) <= floor {
            if label.is_some() {
                // Only this label is (nearly) optimal: the other may still have pairs. Every
                // other i' of the label has v_i' <= vi, and unless i is the label's smallest
                // j violation the same smallest one, so none of them passes either: the whole
                // label is dropped at once (one scan over the j candidates each, they cost
                // 39% of a nu-SVR fit on puma8nh).
                if lows.first.1 as usize != i {
                    for (e, &l) in cand_up.iter_mut().zip(cand_up_label.iter()) {
                        if l == li {
                            e.0 = f64::NEG_INFINITY;
                        }
                    }
                } else {
                    cand_up[ki].0 = f64::NEG_INFINITY;
                }
                continue;
            }
            break;
        }
        if best.2 == usize::MAX {
            // No partner for this i: drop it from the candidates.
            cand_up[ki].0 = f64::NEG_INFINITY;
            continue;
        }
        let (j, b_ij, a_ij) = (best.2, best.3, best.4);
        in_b[i] = true;
        in_b[j] = true;
        // Out of the j scans from now on (the look-ahead values of B are never read again).
        for t in [i, j] {
            parts[t / ROW_BLOCK].leave_out(t);
        }
        pairs_i.push(i);
        pairs_j.push(j);
        pairs_label.push(li);
        *min_violation = min_violation.min(b_ij);
        if pairs_i.len() == 1 {
            first_violation = b_ij;
        }
        if pairs_i.len() == p {
            break;
        }
        // The WSS2 step along (a_i += y_i s, a_j -= y_j s), clipped to the box (with a tube,
        // through its kinks).
        let room = |t: usize, up: bool| {
            let (a, y) = variable(state, t, li);
            if (y > 0.0) == up {
                state.upper[t] - a
            } else {
                a - state.lower(t)
            }
        };
        let step = if state.signed {
            tube_pair_step(TubePair {
                slope: -b_ij,
                quad: a_ij,
                tube: state.tube,
                beta_i: state.alpha[i],
                beta_j: state.alpha[j],
                room: room(i, true).min(room(j, false)).max(0.0),
            })
        } else {
            (b_ij / a_ij)
                .min(room(i, true))
                .min(room(j, false))
                .max(0.0)
        };
        if step > 0.0 {
            let rows = cache.rows_prefix(&[i, j], active)?;
            let (ri, rj) = (rows.row(0), rows.row(1));
            for e in cand_up.iter_mut() {
                let t = e.1 as usize;
                e.0 -= (ri[t].widen() - rj[t].widen()) * step;
            }
            pending = Some((i, j, step));
        }
    }
    b.extend_from_slice(pairs_i);
    b.extend_from_slice(pairs_j);
    b_label.extend_from_slice(pairs_label);
    b_label.extend_from_slice(pairs_label);
    if state.paired {
        for (low, member) in low.iter().zip(j_member.iter_mut()) {
            for &(_, t) in &low.buf {
                member[t as usize] = 0.0;
            }
        }
    }
    Ok(())
}

/// `out` = the entries of `a` and `b` by increasing position, one entry per position (the
/// first list's where both hold it). Lists of a whole index set arrive in position order
/// (`Smallest` keeps the scan's order until it cuts): merged in one pass; otherwise sorted.
fn merge_by_position(a: &[(f64, u32)], b: &[(f64, u32)], out: &mut Vec<(f64, u32)>) {
    out.clear();
    let sorted = |l: &[(f64, u32)]| l.is_sorted_by_key(|e| e.1);
    if !(sorted(a) && sorted(b)) {
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        out.sort_by_key(|e| e.1);
        out.dedup_by_key(|e| e.1);
        return;
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (ea, eb) = (a[i], b[j]);
        if ea.1 <= eb.1 {
            out.push(ea);
            i += 1;
            j += usize::from(ea.1 == eb.1);
        } else {
            out.push(eb);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// A block's run of the j candidates: its place in the whole list, the look-ahead values and
/// the positions.
struct LowPart<'c> {
    place: usize,
    v: &'c mut [f64],
    t: &'c [u32],
}

impl LowPart<'_> {
    /// A run's scan (`simd::j_scan`) by positions and places in the whole list.
    fn found(&self, scan: simd::JScan) -> (TwoSmallest, BestJ) {
        let position = |k: usize| self.t.get(k).map_or(u32::MAX, |&t| t);
        let two = TwoSmallest {
            first: (scan.first.0, position(scan.first.1)),
            second: scan.second,
        };
        let (obj, k, b, a) = scan.best;
        let best = if k == usize::MAX {
            NO_J
        } else {
            (obj, self.place + k, position(k) as usize, b, a)
        };
        (two, best)
    }

    /// Takes position t (if it is a j candidate of this run) out of the scans: value +inf.
    fn leave_out(&mut self, t: usize) {
        if let Ok(k) = self.t.binary_search(&(t as u32)) {
            self.v[k] = f64::INFINITY;
        }
    }
}

/// The best j so far: (-b^2 / a, place in the list, index, b, a).
type BestJ = (f64, usize, usize, f64, f64);
const NO_J: BestJ = (f64::INFINITY, 0, usize::MAX, 0.0, 0.0);

/// The two smallest violations of a candidate list (the smallest other than a given index is
/// then one of them).
#[derive(Clone, Copy)]
struct TwoSmallest {
    first: (f64, u32),
    second: f64,
}

impl Default for TwoSmallest {
    fn default() -> Self {
        TwoSmallest {
            first: (f64::INFINITY, u32::MAX),
            second: f64::INFINITY,
        }
    }
}

impl TwoSmallest {
    #[inline]
    fn push(&mut self, v: f64, t: u32) {
        if v < self.first.0 {
            self.second = self.first.0;
            self.first = (v, t);
        } else if v < self.second {
            self.second = v;
        }
    }

    /// The two smallest of two lists, `self` the earlier one (first place wins ties, as `push`).
    fn merge(self, later: TwoSmallest) -> TwoSmallest {
        let mut out = self;
        out.push(later.first.0, later.first.1);
        out.second = out.second.min(later.second);
        out
    }

    /// The smallest violation of an index other than `i`.
    fn without(&self, i: usize) -> f64 {
        if self.first.1 as usize == i {
            self.second
        } else {
            self.first.0
        }
    }
}

/// Builds and solves the subproblem on B; leaves the feasible step in `work.d`. Returns
/// (phi(d), FISTA iterations).
fn solve_subproblem<T: RowValue>(
    rows: &CachedRows<'_, T>,
    state: &DualState,
    work: &mut Work,
    params: &AlfpgmParams,
    tol: f64,
    lambda: &mut f64,
    max_steps: u64,
) -> (f64, u64) {
    let m = work.b.len();
    let Work {
        b,
        b_label,
        q,
        g,
        yb,
        lo,
        hi,
        d,
        z,
        prev,
        grad,
        v,
        w,
        sub_smo,
        base,
        ..
    } = work;
    for buf in [
        &mut *g, &mut *yb, &mut *lo, &mut *hi, &mut *d, &mut *z, &mut *prev, &mut *grad, &mut *v,
        &mut *w,
    ] {
        buf.clear();
        buf.resize(m, 0.0);
    }
    q.clear();
    q.resize(m * m, 0.0);
    let (mut up_max, mut low_min) = (f64::NEG_INFINITY, f64::INFINITY);
    for (a, (&ia, &label)) in b.iter().zip(b_label.iter()).enumerate() {
        let (alpha, ya) = variable(state, ia, label);
        yb[a] = ya;
        // Paired: a_t*'s gradient is -F_t.
        g[a] = if state.paired {
            ya * state.grad[ia]
        } else {
            state.grad[ia]
        };
        lo[a] = state.lower(ia) - alpha;
        hi[a] = state.upper[ia] - alpha;
        if state.paired {
            let (up, low) = if ya > 0.0 {
                (alpha < state.upper[ia], alpha > 0.0)
            } else {
                (alpha > 0.0, alpha < state.upper[ia])
            };
            let v = -state.grad[ia];
            if up {
                up_max = up_max.max(v);
            }
            if low {
                low_min = low_min.min(v);
            }
            continue;
        }
        if state.in_up(ia) {
            up_max = up_max.max(state.up_value(ia));
        }
        if state.in_low(ia) {
            low_min = low_min.min(state.low_value(ia));
        }
    }
    for (a, &ia) in b.iter().enumerate() {
        let row = rows.row(a);
        for (bb, &ib) in b.iter().enumerate() {
            q[a * m + bb] = yb[a] * yb[bb] * row[ib].widen();
        }
        q[a * m + a] = state.diag[ia];
    }
    // Relative to the weakest selected pair: a tolerance relative to the strongest one let
    // FISTA stop before the weaker pairs moved at all (ijcnn1: 25 pairs gained what one SMO
    // step on the maximal pair gains).
    // With a sum per label, m_B - M_B mixes the labels: the selected pairs' own violations.
    let per_label = state.sum_per_label;
    let weakest = if per_label {
        work.min_violation
    } else {
        work.min_violation.min(up_max - low_min)
    };
    let eps_in = (params.inner_tol_factor * tol).max(params.inner_rel * weakest);
    // The augmented Lagrangian handles one equality and a box: a sum per label or a tube
    // takes the SMO subproblem.
    if params.inner == InnerSolver::Smo || per_label || state.signed {
        base.clear();
        if state.signed {
            base.extend(b.iter().map(|&t| state.alpha[t]));
        }
        let sub = LocalSmoInput {
            q,
            g,
            y: yb,
            lo,
            hi,
            m,
            eps: eps_in,
            per_label,
            max_steps,
            tube: state.signed.then_some((&base[..], state.tube)),
        };
        let mut out = LocalSmoOutput {
            d,
            gl: grad,
            viol: v,
            scratch: sub_smo,
        };
        let steps = local_smo(simd::level(), sub, &mut out);
        // phi(d) = 1/2 d^T Q d + g^T d = sum d (g + G_local) / 2, G_local = g + Q d; with a
        // tube plus its change of epsilon |a_B + d|_1.
        let quadratic: f64 = d
            .iter()
            .zip(g.iter().zip(grad.iter()))
            .map(|(x, (g0, g1))| 0.5 * x * (g0 + g1))
            .sum();
        let kinks: f64 = base
            .iter()
            .zip(d.iter())
            .map(|(a, x)| (a + x).abs() - a.abs())
            .sum();
        return (quadratic + state.tube * kinks, steps);
    }
    // lambda_max(Q_BB) by power iterations from the uniform vector (Q_BB is PSD).
    let mut vnorm = 1.0 / (m as f64).sqrt();
    v.fill(vnorm);
    let mut lam_max = 1.0;
    for _ in 0..params.power_iters {
        matvec(q, v, w, m);
        lam_max = v.iter().zip(w.iter()).map(|(a, b)| a * b).sum::<f64>();
        vnorm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        if vnorm.is_nan() || vnorm <= 0.0 {
            break;
        }
        for (vi, wi) in v.iter_mut().zip(w.iter()) {
            *vi = wi / vnorm;
        }
    }
    let lam_max = lam_max.max(vnorm).max(1e-12);
    let k = if params.al_penalty > 0.0 {
        params.al_penalty
    } else {
        lam_max / m as f64
    };
    let lip = params.lipschitz_safety * lam_max + k * m as f64;
    let mut fista_iters = 0u64;
    // The multiplier of the subproblem's solution is -v of its free variables, which lies in
    // [M_B, m_B] of the violations on B (the step only reduces violations): the warm start and
    // every update are kept in that interval, widened by its length. Unclamped, an update
    // after a loose FISTA solve (k |y^T d| up to k C) could throw lambda far out, where the
    // box-clipped d and its repair came back as d = 0 (cod-rna: 10% of steps).
    let (lam_lo, lam_hi) = if up_max.is_finite() && low_min.is_finite() && low_min <= up_max {
        let w = up_max - low_min;
        (-up_max - w, -low_min + w)
    } else {
        (f64::NEG_INFINITY, f64::INFINITY)
    };
    *lambda = lambda.clamp(lam_lo, lam_hi);
    // d starts at 0 (feasible); each AL round warm-starts FISTA from the last d.
    for _ in 0..params.al_max_iter {
        fista_iters += fista(
            q, g, yb, lo, hi, d, z, prev, grad, m, *lambda, k, lip, eps_in, params,
        );
        let r: f64 = yb.iter().zip(d.iter()).map(|(y, x)| y * x).sum();
        *lambda = (*lambda - k * r).clamp(lam_lo, lam_hi);
        if k * r.abs() <= eps_in {
            break;
        }
    }
    repair(d, yb, lo, hi);
    // phi(d) = 1/2 d^T Q d + g^T d.
    matvec(q, d, w, m);
    let dqd: f64 = d.iter().zip(w.iter()).map(|(x, qx)| x * qx).sum();
    let gd: f64 = d.iter().zip(g.iter()).map(|(x, gi)| x * gi).sum();
    let mut phi = 0.5 * dqd + gd;
    if phi >= 0.0 && gd < 0.0 && dqd > 0.0 {
        // An inexact solve overshot along a descent direction: the exact line search
        // t = -g^T d / d^T Q d (< 1/2 here) on the segment [0, d], which stays feasible.
        let t = -gd / dqd;
        for x in d.iter_mut() {
            *x *= t;
        }
        phi = -0.5 * gd * gd / dqd;
    }
    (phi, fista_iters)
}

/// Per-variable arrays of `local_smo`, kept between calls.
#[derive(Default)]
struct LocalSmoScratch {
    /// UP | LOW membership.
    sets: Vec<u8>,
    /// 0 for members of I_up (I_low), -inf (+inf) for the others: the violation plus this is
    /// what the scan for i (j) compares, with no branch per entry. One run of m per group of
    /// variables that pair (one group; with a sum per label, one per label, the other label's
    /// entries at -inf / +inf).
    up_pen: Vec<f64>,
    low_pen: Vec<f64>,
    /// WSS2's -b^2 / a per candidate j (+inf where b <= 0).
    obj: Vec<f64>,
    /// The diagonal of Q.
    diag: Vec<f64>,
}

/// WSS2 SMO on the subproblem min 1/2 d^T Q d + g^T d, y^T d = 0, lo <= d <= hi (Q with the
/// labels folded in, Q_ab = y_a y_b K_ab), from d = 0 until its own m - M < eps, 50 m + 1000
/// steps or `max_steps`; leaves the gradient g + Q d in `gl`. Returns the steps taken. Each step moves along
/// d_i += y_i s, d_j -= y_j s (y^T d unchanged) by the clipped minimiser s = b / a, and a
/// variable the clip stops lands exactly on its bound. The violations -y_t gl_t (`viol`) and
/// the I_up / I_low membership are kept per variable and refreshed for i and j only. The
/// subproblem is serial work between parallel regions, so its passes are written without
/// branches per entry and compiled for AVX-512 or AVX2 where the CPU has them (a9a, 83
/// variables: 0.39 -> 0.18 us a step); every level takes the same steps (first index of the
/// extreme value, the same arithmetic).
/// Compiled for `level` (`simd::level()`; a level this CPU does not run falls back).
fn local_smo(level: Level, sub: LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // The body compiled once more per instruction set (inlined into each wrapper).
        macro_rules! compiled_for {
            ($name:ident, $features:literal) => {
                /// # Safety
                /// The CPU must run `$features`.
                #[target_feature(enable = $features)]
                unsafe fn $name(sub: LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> u64 {
                    local_smo_body(sub, out)
                }
            };
        }
        compiled_for!(avx512, "avx512f");
        compiled_for!(avx2, "avx2");
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: AVX-512F runs here.
            return unsafe { avx512(sub, out) };
        }
        if level >= Level::Avx2 && Level::Avx2.runs_here() {
            // SAFETY: AVX2 runs here.
            return unsafe { avx2(sub, out) };
        }
    }
    let _ = level;
    local_smo_body(sub, out)
}

/// `local_smo`'s problem: Q (m x m, labels folded in), the gradient g at d = 0, the labels,
/// the box, the tolerance, and whether each label's sum is fixed on its own (pairs within a
/// label, each label's m - M).
#[derive(Clone, Copy)]
struct LocalSmoInput<'a> {
    q: &'a [f64],
    g: &'a [f64],
    y: &'a [f64],
    lo: &'a [f64],
    hi: &'a [f64],
    m: usize,
    eps: f64,
    per_label: bool,
    /// The most steps to take (what is left of the run's iterations).
    max_steps: u64,
    /// With a tube (`DualProblem::tube`): a_B at d = 0 and epsilon; the subproblem adds
    /// epsilon |a_B + d|_1 (labels all +1).
    tube: Option<(&'a [f64], f64)>,
}

/// `local_smo`'s results (the step d, the gradient g + Q d, the violations) and scratch.
struct LocalSmoOutput<'a> {
    d: &'a mut [f64],
    gl: &'a mut [f64],
    viol: &'a mut [f64],
    scratch: &'a mut LocalSmoScratch,
}

/// The first index of the largest value above -inf (NaN never wins), and that value.
#[inline(always)]
fn first_max(x: &[f64]) -> Option<(usize, f64)> {
    first_best(x, f64::NEG_INFINITY, |v, best| v > best)
}

/// The first index of the smallest value below +inf (NaN never wins), and that value.
#[inline(always)]
fn first_min(x: &[f64]) -> Option<(usize, f64)> {
    first_best(x, f64::INFINITY, |v, best| v < best)
}

/// The first index of the best value by `better` (a strict order) other than `worst`: the best
/// value by eight independent lanes (no branch, vectorised), then its first place.
#[inline(always)]
fn first_best(
    x: &[f64],
    worst: f64,
    better: impl Fn(f64, f64) -> bool + Copy,
) -> Option<(usize, f64)> {
    let mut lanes = [worst; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if better(v, *l) { v } else { *l };
        }
    }
    let best = lanes
        .iter()
        .chain(tail)
        .fold(worst, |b, &v| if better(v, b) { v } else { b });
    if best == worst {
        return None;
    }
    x.iter().position(|&v| v == best).map(|t| (t, best))
}

#[inline(always)]
fn local_smo_body(sub: LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> u64 {
    let LocalSmoInput {
        q,
        g,
        y,
        lo,
        hi,
        m,
        eps,
        per_label,
        max_steps,
        tube,
    } = sub;
    let LocalSmoOutput {
        d,
        gl,
        viol,
        scratch,
    } = out;
    let LocalSmoScratch {
        sets,
        up_pen,
        low_pen,
        obj,
        diag,
    } = scratch;
    d.fill(0.0);
    gl.copy_from_slice(g);
    let membership = |t: usize, dt: f64| -> u8 {
        // Room to move "up" (a_t y_t grows) and "down".
        let (up, low) = if y[t] > 0.0 {
            (dt < hi[t], dt > lo[t])
        } else {
            (dt > lo[t], dt < hi[t])
        };
        u8::from(up) * UP + u8::from(low) * LOW
    };
    // With a tube the penalty of a member is its value's shift by the sign of a_t + d_t
    // (`DualState::up_value` / `low_value`).
    let penalties = |t: usize, f: u8, dt: f64| -> (f64, f64) {
        let (up, low) = match tube {
            Some((base, eps)) => tube_shifts(base[t] + dt, eps),
            None => (0.0, 0.0),
        };
        (
            if f & UP != 0 { up } else { f64::NEG_INFINITY },
            if f & LOW != 0 { low } else { f64::INFINITY },
        )
    };
    let groups = if per_label { 2 } else { 1 };
    let group = |t: usize| if per_label { label_index(y[t]) * m } else { 0 };
    sets.clear();
    sets.extend((0..m).map(|t| membership(t, 0.0)));
    up_pen.clear();
    up_pen.resize(groups * m, f64::NEG_INFINITY);
    low_pen.clear();
    low_pen.resize(groups * m, f64::INFINITY);
    for (t, &f) in sets.iter().enumerate() {
        (up_pen[group(t) + t], low_pen[group(t) + t]) = penalties(t, f, 0.0);
    }
    obj.clear();
    obj.resize(m, f64::INFINITY);
    diag.clear();
    diag.extend((0..m).map(|t| q[t * m + t]));
    for t in 0..m {
        viol[t] = -y[t] * gl[t];
    }
    // The scans read the violation plus the penalty: the violation itself for members (x + 0
    // is x), +-inf for the others.
    let cap = (50 * m as u64 + 1000).min(max_steps);
    let mut steps = 0u64;
    while steps < cap {
        // Per group: i, the group's m - M, and WSS2's j for that i; the pair of the best j
        // over the groups (LIBSVM's Solver_NU), stopping when every group's m - M < eps.
        let mut pick: Option<(usize, usize, f64)> = None;
        let mut worst = f64::NEG_INFINITY;
        for grp in 0..groups {
            let (up_g, low_g) = (&up_pen[grp * m..][..m], &low_pen[grp * m..][..m]);
            for ((o, &v), &p) in obj.iter_mut().zip(viol.iter()).zip(up_g) {
                *o = v + p;
            }
            let Some((i, vi)) = first_max(obj) else {
                continue;
            };
            let row_i = &q[i * m..(i + 1) * m];
            let (qii, yi) = (q[i * m + i], y[i]);
            for ((o, &v), &p) in obj.iter_mut().zip(viol.iter()).zip(low_g) {
                *o = v + p;
            }
            let v_min = first_min(obj).map_or(f64::INFINITY, |(_, v)| v);
            worst = worst.max(vi - v_min);
            for (((o, &yt), &qit), &qtt) in obj.iter_mut().zip(y).zip(row_i).zip(diag.iter()) {
                let b = vi - *o;
                // a_it = K_ii + K_tt - 2 K_it, K_it = y_i y_t Q_it.
                let a = qii + qtt - 2.0 * yi * yt * qit;
                let a = if a > 0.0 { a } else { TAU };
                *o = if b > 0.0 { -(b * b) / a } else { f64::INFINITY };
            }
            if let Some((j, gain)) = first_min(obj) {
                if pick.is_none_or(|(_, _, best)| gain < best) {
                    pick = Some((i, j, gain));
                }
            }
        }
        let Some((i, j, _)) = pick else {
            break;
        };
        if worst < eps {
            break;
        }
        let row_i = &q[i * m..(i + 1) * m];
        let (qii, yi, vi) = (q[i * m + i], y[i], viol[i]);
        let b = vi - viol[j];
        let a = (qii + q[j * m + j] - 2.0 * yi * y[j] * row_i[j]).max(TAU);
        let room_i = if yi > 0.0 { hi[i] - d[i] } else { d[i] - lo[i] };
        let room_j = if y[j] > 0.0 {
            d[j] - lo[j]
        } else {
            hi[j] - d[j]
        };
        let (old_i, old_j) = (d[i], d[j]);
        if let Some((base, eps)) = tube {
            // b is the pair's up value less its low value: both with their penalties.
            let b = vi + up_pen[i] - viol[j] - low_pen[j];
            let (beta_i, beta_j) = (base[i] + old_i, base[j] + old_j);
            let step = tube_pair_step(TubePair {
                slope: -b,
                quad: a,
                tube: eps,
                beta_i,
                beta_j,
                room: room_i.min(room_j),
            });
            if step <= 0.0 {
                break;
            }
            // Landing on a bound or a kink exactly (`DualState::tube_step`).
            d[i] = if step >= room_i {
                hi[i]
            } else if beta_i < 0.0 && step == -beta_i {
                -base[i]
            } else {
                old_i + step
            };
            d[j] = if step >= room_j {
                lo[j]
            } else if beta_j > 0.0 && step == beta_j {
                -base[j]
            } else {
                old_j - step
            };
        } else {
            let step = (b / a).min(room_i).min(room_j);
            if step <= 0.0 {
                break;
            }
            d[i] = match (step >= room_i, yi > 0.0) {
                (true, true) => hi[i],
                (true, false) => lo[i],
                (false, _) => old_i + yi * step,
            };
            d[j] = match (step >= room_j, y[j] > 0.0) {
                (true, true) => lo[j],
                (true, false) => hi[j],
                (false, _) => old_j - y[j] * step,
            };
        }
        let (di, dj) = (d[i] - old_i, d[j] - old_j);
        let row_j = &q[j * m..(j + 1) * m];
        for ((((gk, vk), &yk), &qi), &qj) in gl
            .iter_mut()
            .zip(viol.iter_mut())
            .zip(y)
            .zip(row_i)
            .zip(row_j)
        {
            *gk += qi * di + qj * dj;
            *vk = -yk * *gk;
        }
        for t in [i, j] {
            sets[t] = membership(t, d[t]);
            (up_pen[group(t) + t], low_pen[group(t) + t]) = penalties(t, sets[t], d[t]);
        }
        steps += 1;
    }
    steps
}

#[inline]
fn matvec(q: &[f64], x: &[f64], out: &mut [f64], m: usize) {
    for (a, o) in out.iter_mut().enumerate() {
        *o = crate::core::simd::dot(&q[a * m..(a + 1) * m], x);
    }
}

/// FISTA on L_k(., lambda) over the box [lo, hi], from `d`; returns its iterations.
#[allow(clippy::too_many_arguments)]
fn fista(
    q: &[f64],
    g: &[f64],
    yb: &[f64],
    lo: &[f64],
    hi: &[f64],
    d: &mut [f64],
    z: &mut [f64],
    prev: &mut [f64],
    grad: &mut [f64],
    m: usize,
    lambda: f64,
    k: f64,
    lip: f64,
    eps_in: f64,
    params: &AlfpgmParams,
) -> u64 {
    z.copy_from_slice(d);
    let mut t = 1.0f64;
    let inv_l = 1.0 / lip;
    for it in 0..params.fista_max_iter {
        matvec(q, z, grad, m);
        let s: f64 = yb.iter().zip(z.iter()).map(|(y, x)| y * x).sum();
        prev.copy_from_slice(d);
        let mut mapping = 0.0f64;
        let mut along = 0.0;
        for a in 0..m {
            let ga = grad[a] + g[a] + (k * s - lambda) * yb[a];
            let na = (z[a] - inv_l * ga).clamp(lo[a], hi[a]);
            d[a] = na;
            let step = z[a] - na;
            mapping = mapping.max(step.abs());
            along += step * (na - prev[a]);
        }
        if mapping * lip <= eps_in {
            return it as u64 + 1;
        }
        if params.restart && along > 0.0 {
            t = 1.0;
            z.copy_from_slice(d);
            continue;
        }
        let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
        let beta = (t - 1.0) / t_next;
        for a in 0..m {
            z[a] = d[a] + beta * (d[a] - prev[a]);
        }
        t = t_next;
    }
    params.fista_max_iter as u64
}

/// Makes d feasible for y^T d = 0 within the box, moving as little as it can: the residual goes
/// onto the free entries (lo < d_i < hi), d_i <- clip(d_i - mu y_i) for those only, with mu
/// the root of the non-increasing h(mu) found by bisection. Entries on a bound stay there, so
/// the step leaves the variables it drove to 0 or C exactly at 0 or C (a projection of every
/// entry would lift them off by mu and leave many tiny non-zero alphas behind). Only if the
/// free entries cannot absorb the residual is every entry projected. What rounding leaves
/// goes onto one free variable that has room for it.
fn repair(d: &mut [f64], yb: &[f64], lo: &[f64], hi: &[f64]) {
    let h = |mu: f64, d: &[f64], free_only: bool| -> f64 {
        d.iter()
            .zip(yb)
            .zip(lo.iter().zip(hi))
            .map(|((x, y), (l, u))| {
                if free_only && !(x > l && x < u) {
                    y * x
                } else {
                    y * (x - mu * y).clamp(*l, *u)
                }
            })
            .sum()
    };
    let r0 = h(0.0, d, false);
    if r0 != 0.0 {
        let span = d
            .iter()
            .zip(lo.iter().zip(hi))
            .map(|(x, (l, u))| x.abs() + (u - l))
            .fold(0.0f64, f64::max)
            + 1.0;
        let (a0, b0) = if r0 > 0.0 { (0.0, span) } else { (-span, 0.0) };
        // The free entries alone if they can absorb the residual, else every entry.
        let free_only = h(a0, d, true) >= 0.0 && h(b0, d, true) <= 0.0;
        let (mut a, mut b) = (a0, b0);
        // h(a) >= 0 >= h(b).
        for _ in 0..200 {
            let mid = 0.5 * (a + b);
            if mid <= a || mid >= b {
                break;
            }
            if h(mid, d, free_only) > 0.0 {
                a = mid;
            } else {
                b = mid;
            }
        }
        let mu = if h(b, d, free_only).abs() <= h(a, d, free_only).abs() {
            b
        } else {
            a
        };
        for ((x, y), (l, u)) in d.iter_mut().zip(yb).zip(lo.iter().zip(hi)) {
            if !free_only || (*x > *l && *x < *u) {
                *x = (*x - mu * y).clamp(*l, *u);
            }
        }
    }
    let r: f64 = d.iter().zip(yb).map(|(x, y)| x * y).sum();
    if r != 0.0 {
        // d_a -= y_a r keeps the box if it has room.
        for a in 0..d.len() {
            let t = d[a] - yb[a] * r;
            if t > lo[a] && t < hi[a] {
                d[a] = t;
                break;
            }
        }
    }
}

/// a_B += d (bounds set exactly), limiter counters, and G += Q_{:,B} d over the cached rows.
fn apply_step<T: RowValue>(rows: &CachedRows<'_, T>, state: &mut DualState, work: &mut Work) {
    work.coef.clear();
    work.moved.clear();
    for (a, (&ia, &label)) in work.b.iter().zip(work.b_label.iter()).enumerate() {
        let da = work.d[a];
        let (old, y) = variable(state, ia, label);
        let old_bar = state.bound_part(ia);
        let new = if da >= work.hi[a] {
            state.upper[ia]
        } else if da <= work.lo[a] {
            state.lower(ia)
        } else {
            old + da
        };
        let change = new - old;
        if state.paired && label == 1 {
            state.alpha_star[ia] = new;
        } else {
            state.alpha[ia] = new;
        }
        work.count[ia] = work.count[ia].saturating_add(1);
        work.last_change[ia] = change.abs();
        if change != 0.0 {
            // The position's coefficient in the gradient moves by y change (paired: a_t* by
            // -change), and its rows are the position's.
            work.coef.push((y * change, a));
            work.moved.push((ia, old_bar));
        }
        work.in_b[ia] = false;
    }
    let coef = &work.coef;
    let active = state.active;
    let y = &state.y[..active];
    parallel::install(|| {
        let block = parallel::item_len(active, 512, BLOCK);
        state.grad[..active]
            .par_chunks_mut(block)
            .zip(y.par_chunks(block))
            .enumerate()
            .for_each(|(blk, (g, yk))| {
                let k0 = blk * block;
                let len = g.len();
                let mut acc = [0.0f64; BLOCK];
                let acc = &mut acc[..len];
                for &(ca, a) in coef {
                    let row = &rows.row(a)[k0..k0 + len];
                    for (s, &kv) in acc.iter_mut().zip(row) {
                        *s += ca * kv.widen();
                    }
                }
                for ((gk, &yv), s) in g.iter_mut().zip(yk).zip(acc.iter()) {
                    *gk += yv * s;
                }
            });
    });
}

/// One WSS2 SMO step on the unfiltered maximal violating pair; returns the pair.
fn smo_fallback<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    state: &mut DualState,
) -> Result<Option<[(usize, f64); 2]>> {
    // No tolerance: any violating pair (the caller saw m - M >= tol).
    if let Some((i, j)) = select_pair(cache, state, f64::NEG_INFINITY)? {
        let moved = [(i, state.bound_part(i)), (j, state.bound_part(j))];
        let rows = cache.rows_prefix(&[i, j], state.active)?;
        state.smo_step(i, j, rows.row(0), rows.row(1));
        return Ok(Some(moved));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::{CsrView, DenseView};
    use crate::core::exact::smo::tests::{
        bounds, check_solution, problem, projected_gradient, q_matrix, quietly, rbf_svc, run_smo,
    };
    use crate::core::kernels::kernel::Kernel;

    #[allow(clippy::too_many_arguments)] // the problem, the solver settings and the cache
    fn run<R: Rows>(
        x: &R,
        y: &[f64],
        c: &[f64],
        gamma: f64,
        tol: f64,
        params: &AlfpgmParams,
        cache_bytes: usize,
        shrinking: Option<usize>,
    ) -> DualSolution {
        let mut cache = KernelRowCache::<_, f32>::new(x, Kernel::rbf(gamma), cache_bytes).unwrap();
        let run = ExactRun {
            tol,
            max_iter: 1_000_000,
            shrinking,
        };
        let problem = rbf_svc(y.to_vec(), c.to_vec());
        quietly(|rep| solve_alfpgm(&mut cache, problem, &run, params, rep)).unwrap()
    }

    #[test]
    fn alfpgm_matches_smo_on_random_problems() {
        let mut rng = Rng::new(5);
        // Trials 24.. weight the rows (a bound C_i per variable).
        for trial in 0..36 {
            let n = 10 + rng.below(150);
            let d = 1 + rng.below(5);
            let c = [0.1, 1.0, 10.0, 100.0][trial % 4];
            let gamma = [0.3, 1.0, 5.0][(trial / 4) % 3];
            let (xs, y) = problem(n, d, 500 + trial as u64);
            let c = bounds(n, c, trial >= 24, trial as u64);
            let q = q_matrix(&xs, &y, d, gamma);
            let tol = 1e-5;
            let params = AlfpgmParams {
                n_pairs: [1, 2, 5, 20, 100][trial % 5],
                min_alpha_opt: [0, 2, 5][trial % 3] as u32,
                max_alpha_opt: [5, 50, 500][(trial / 3) % 3] as u32,
                min_alpha_check: [0, 1, 7][trial % 3],
                pair_ratio: [0.0, 0.5, 0.9][(trial / 2) % 3],
                ..Default::default()
            };
            let x = DenseView::new(&xs, n, d).unwrap();
            let shrinking = [None, Some(2), Some(0)][(trial / 7) % 3];
            let sol = run(
                &x,
                &y,
                &c,
                gamma,
                tol,
                &params,
                [0, 1 << 20][trial % 2],
                shrinking,
            );
            check_solution(&q, &sol, &c, tol);
            let smo = run_smo(&xs, &y, d, &c, gamma, 1e-8, None);
            let scale = 1.0 + smo.objective.abs();
            assert!(
                (sol.objective - smo.objective).abs() < 1e-5 * scale,
                "trial {trial}: alfpgm {} vs smo {}",
                sol.objective,
                smo.objective
            );
            let free = |s: &DualSolution| {
                s.alpha
                    .iter()
                    .zip(&c)
                    .filter(|(&a, &ci)| a > 0.0 && a < ci)
                    .count()
            };
            // rho is unique only through free variables (otherwise any point of an interval).
            if free(&sol) > 0 && free(&smo) > 0 {
                assert!(
                    (sol.rho - smo.rho).abs() < 1e-3,
                    "trial {trial}: rho {} vs {} ({} / {} free)",
                    sol.rho,
                    smo.rho,
                    free(&sol),
                    free(&smo)
                );
            }
        }
    }

    /// Euclidean projection onto {sum over label l of a = s_l for both labels, 0 <= a <= c}:
    /// per label a_t = clip(v_t - mu_l), mu_l by bisection on the monotone sum.
    fn project_per_label(v: &[f64], y: &[f64], c: &[f64], sums: [f64; 2], out: &mut [f64]) {
        for (l, label) in [1.0, -1.0].into_iter().enumerate() {
            let of = |t: &usize| y[*t] == label;
            let at = |mu: f64, t: usize| (v[t] - mu).clamp(0.0, c[t]);
            let sum = |mu: f64| (0..v.len()).filter(of).map(|t| at(mu, t)).sum::<f64>();
            let (mut lo, mut hi) = (-1e6, 1e6);
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                if sum(mid) > sums[l] {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            for t in (0..v.len()).filter(of) {
                out[t] = at(0.5 * (lo + hi), t);
            }
        }
    }

    /// An independent solver of a problem with a sum per label (`projected_gradient` onto both
    /// labels' sums and the box) from the feasible start.
    fn reference_per_label(q: &[f64], problem: &DualProblem, iters: usize) -> Vec<f64> {
        let (n, y, c) = (problem.n(), &problem.y, &problem.upper);
        let a0 = problem.start.clone().unwrap();
        let sums = [1.0, -1.0].map(|l| (0..n).filter(|&t| y[t] == l).map(|t| a0[t]).sum());
        let project = |v: &[f64], out: &mut [f64]| project_per_label(v, y, c, sums, out);
        projected_gradient(q, &problem.p, a0, project, iters)
    }

    #[test]
    fn a_sum_per_label_reaches_the_reference_optimum_with_both_solvers() {
        let mut rng = Rng::new(31);
        for trial in 0..12 {
            let n = 12 + rng.below(40);
            let d = 1 + rng.below(3);
            let gamma = [0.5, 2.0][trial % 2];
            let (xs, y) = problem(n, d, 900 + trial as u64);
            let q = q_matrix(&xs, &y, d, gamma);
            // nu-SVC's start (each label filled to nu sum c / 2) or a nu-SVR-like linear term.
            let c = bounds(n, 1.0, trial % 4 >= 2, trial as u64);
            // Feasible: nu sum c / 2 within each label's total.
            let total = |l: f64| (0..n).filter(|&t| y[t] == l).map(|t| c[t]).sum::<f64>();
            let most = 2.0 * total(1.0).min(total(-1.0)) / c.iter().sum::<f64>();
            let nu = [0.2f64, 0.5, 0.8][trial % 3].min(0.95 * most);
            let mut left = [nu * c.iter().sum::<f64>() / 2.0; 2];
            let start: Vec<f64> = (0..n)
                .map(|t| {
                    let l = &mut left[label_index(y[t])];
                    let a = c[t].min(*l);
                    *l -= a;
                    a
                })
                .collect();
            let p: Vec<f64> = if trial % 2 == 0 {
                vec![0.0; n]
            } else {
                (0..n).map(|_| rng.next_f64() - 0.5).collect()
            };
            let problem = DualProblem {
                y: y.clone(),
                p: p.clone(),
                upper: c.clone(),
                diag: vec![1.0; n],
                start: Some(start.clone()),
                sum_per_label: true,
                tube: None,
                paired: false,
                start_gradient: None,
            };
            let f = |a: &[f64]| {
                let quad: f64 = (0..n)
                    .map(|i| a[i] * (0..n).map(|j| q[i * n + j] * a[j]).sum::<f64>())
                    .sum();
                0.5 * quad + a.iter().zip(&p).map(|(a, p)| a * p).sum::<f64>()
            };
            let f_ref = f(&reference_per_label(&q, &problem, 8_000));
            let x = DenseView::new(&xs, n, d).unwrap();
            let tol = 1e-6;
            let run = ExactRun {
                tol,
                max_iter: 1_000_000,
                shrinking: [None, Some(2)][(trial / 2) % 2],
            };
            let params = AlfpgmParams {
                n_pairs: [1, 3, 20][trial % 3],
                // FISTA cannot keep two sums: the subproblem goes to SMO whatever is asked.
                inner: [InnerSolver::Smo, InnerSolver::Fista][(trial / 3) % 2],
                ..Default::default()
            };
            let mut solutions = Vec::new();
            for alfpgm in [false, true] {
                let mut cache =
                    KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
                let problem = problem.clone();
                let sol = quietly(|rep| {
                    if alfpgm {
                        solve_alfpgm(&mut cache, problem, &run, &params, rep)
                    } else {
                        crate::core::exact::smo::solve_smo(&mut cache, problem, &run, rep)
                    }
                })
                .unwrap();
                assert!(sol.converged, "trial {trial} alfpgm {alfpgm}");
                // Each label's sum stays the start's.
                for l in [1.0, -1.0] {
                    let sum = |a: &[f64]| (0..n).filter(|&t| y[t] == l).map(|t| a[t]).sum::<f64>();
                    assert!((sum(&sol.alpha) - sum(&start)).abs() < 1e-9 * n as f64);
                }
                assert!(sol
                    .alpha
                    .iter()
                    .zip(&c)
                    .all(|(&a, &ct)| (0.0..=ct).contains(&a)));
                let f_sol = f(&sol.alpha);
                assert!((f_sol - sol.objective).abs() < 1e-6 * (1.0 + f_sol.abs()));
                assert!(
                    f_sol <= f_ref + 1e-6 * (1.0 + f_ref.abs()),
                    "trial {trial} alfpgm {alfpgm}: {f_sol} above the reference {f_ref}"
                );
                assert!(
                    (f_sol - f_ref).abs() < 1e-4 * (1.0 + f_ref.abs()),
                    "trial {trial} alfpgm {alfpgm}: {f_sol} vs {f_ref}"
                );
                // rho and r from the free variables of each label: G_t = r_l (LIBSVM's r_1 =
                // rho + r for y = +1, r_2 = r - rho for y = -1).
                for (t, &a) in sol.alpha.iter().enumerate() {
                    if a > 1e-9 && a < c[t] - 1e-9 {
                        let g: f64 =
                            (0..n).map(|j| q[t * n + j] * sol.alpha[j]).sum::<f64>() + p[t];
                        let r_l = if y[t] > 0.0 {
                            sol.r + sol.rho
                        } else {
                            sol.r - sol.rho
                        };
                        assert!((g - r_l).abs() < 1e-3, "trial {trial}: G {g} vs r_l {r_l}");
                    }
                }
                solutions.push(sol);
            }
        }
    }

    #[test]
    fn sparse_and_dense_input_agree() {
        let (xs, y) = problem(120, 4, 9);
        let mut indptr = vec![0i64];
        let (mut idx, mut val) = (vec![], vec![]);
        for i in 0..120 {
            for c in 0..4 {
                let v = xs[i * 4 + c];
                if v.abs() > 0.3 {
                    idx.push(c as i64);
                    val.push(v);
                }
            }
            indptr.push(idx.len() as i64);
        }
        let mut dense = vec![0.0; 480];
        for i in 0..120 {
            for k in indptr[i] as usize..indptr[i + 1] as usize {
                dense[i * 4 + idx[k] as usize] = val[k];
            }
        }
        let csr = CsrView::new(&indptr, &idx, &val, 4).unwrap();
        let dv = DenseView::new(&dense, 120, 4).unwrap();
        let p = AlfpgmParams {
            n_pairs: 10,
            ..Default::default()
        };
        let a = run(&csr, &y, &[3.0; 120], 1.0, 1e-4, &p, 1 << 20, Some(3));
        let b = run(&dv, &y, &[3.0; 120], 1.0, 1e-4, &p, 1 << 20, Some(3));
        assert!((a.objective - b.objective).abs() < 1e-6 * (1.0 + b.objective.abs()));
        let q = q_matrix(&dense, &y, 4, 1.0);
        check_solution(&q, &a, &[3.0; 120], 1e-4);
    }

    #[test]
    fn iteration_cap_is_reported() {
        let (xs, y) = problem(200, 2, 4);
        let x = DenseView::new(&xs, 200, 2).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(3.0), 1 << 20).unwrap();
        let p = AlfpgmParams {
            n_pairs: 2,
            ..Default::default()
        };
        let run = ExactRun {
            tol: 1e-9,
            max_iter: 2,
            shrinking: Some(1),
        };
        let problem = rbf_svc(y.clone(), vec![100.0; 200]);
        let sol = quietly(|rep| solve_alfpgm(&mut cache, problem, &run, &p, rep)).unwrap();
        assert_eq!(sol.iterations, 2);
        assert!(!sol.converged);
        // The cap counts pair steps, also those inside multi-pair working sets.
        let run = ExactRun {
            max_iter: 37,
            ..run
        };
        let problem = rbf_svc(y.clone(), vec![100.0; 200]);
        let sol = quietly(|rep| solve_alfpgm(&mut cache, problem, &run, &p, rep)).unwrap();
        assert_eq!(sol.iterations, 37);
        assert!(!sol.converged && sol.working_sets < 37 && sol.inner_iterations > 0);
        let ya: f64 = sol.alpha.iter().zip(&y).map(|(a, y)| a * y).sum();
        assert!(ya.abs() < 1e-12);
        assert!(sol.alpha.iter().all(|&a| (0.0..=100.0).contains(&a)));
    }

    /// A random regression problem of the SVR tests: (n, d, rows, targets sin(2 x) plus noise,
    /// bounds (weighted on odd trials), a run whose shrinking cycles through off, often and
    /// LIBSVM's).
    fn svr_trial(
        rng: &mut Rng,
        trial: usize,
        seed: u64,
        noise: f64,
    ) -> (usize, usize, Vec<f64>, Vec<f64>, Vec<f64>, ExactRun) {
        let (n, d) = (20 + rng.below(60), 1 + rng.below(3));
        let (xs, _) = problem(n, d, seed + trial as u64);
        let z = (0..n)
            .map(|i| (2.0 * xs[i * d]).sin() + noise * (rng.next_f64() - 0.5))
            .collect();
        let c = bounds(n, [0.3, 3.0][(trial / 3) % 2], trial % 2 == 1, trial as u64);
        let run = ExactRun {
            tol: 1e-7,
            max_iter: 1_000_000,
            shrinking: [None, Some(3), Some(0)][(trial / 6) % 3],
        };
        (n, d, xs, z, c, run)
    }

    /// epsilon-SVR with a tube (one variable per row; SMO and ALFPGM) and in LIBSVM's
    /// two-variable form (SMO) reach the same optimum: objective, beta = a - a*, rho;
    /// shrinking off, often and LIBSVM's; rows weighted or not.
    #[test]
    #[allow(clippy::needless_range_loop)] // beta, a, a* and C indexed by row
    fn a_tube_reaches_the_two_variable_optimum() {
        use crate::core::data::rows::SubsetRows;
        use crate::core::exact::smo::solve_smo;
        let mut rng = Rng::new(23);
        for trial in 0..18 {
            let (n, d, xs, z, c, run) = svr_trial(&mut rng, trial, 300, 0.2);
            let eps = [0.0, 0.05, 0.2][trial % 3];
            let gamma = 1.3;
            let x = DenseView::new(&xs, n, d).unwrap();
            let one = DualProblem {
                y: vec![1.0; n],
                p: z.iter().map(|v| -v).collect(),
                upper: c.clone(),
                diag: vec![1.0; n],
                start: None,
                sum_per_label: false,
                tube: Some(eps),
                paired: false,
                start_gradient: None,
            };
            let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
            let tube = quietly(|rep| solve_smo(&mut cache, one.clone(), &run, rep)).unwrap();
            // ALFPGM on the tube: working sets of up to 4 pairs, its subproblem's SMO through
            // the kinks.
            let params = AlfpgmParams {
                n_pairs: 4,
                ..Default::default()
            };
            let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
            let multi = quietly(|rep| solve_alfpgm(&mut cache, one, &run, &params, rep)).unwrap();
            let twice: Vec<usize> = (0..n).chain(0..n).collect();
            let sub = SubsetRows::new(&x, &twice).unwrap();
            let two = DualProblem {
                y: (0..2 * n).map(|t| if t < n { 1.0 } else { -1.0 }).collect(),
                p: (0..2 * n)
                    .map(|t| if t < n { eps - z[t] } else { eps + z[t - n] })
                    .collect(),
                upper: [&c[..], &c[..]].concat(),
                diag: vec![1.0; 2 * n],
                start: None,
                sum_per_label: false,
                tube: None,
                paired: false,
                start_gradient: None,
            };
            let mut cache =
                KernelRowCache::<_, f32>::new(&sub, Kernel::rbf(gamma), 1 << 20).unwrap();
            let pair = quietly(|rep| solve_smo(&mut cache, two, &run, rep)).unwrap();
            assert!(tube.converged && pair.converged && multi.converged);
            assert!(multi.working_sets > 0);
            let scale = 1.0 + pair.objective.abs();
            assert!(
                (tube.objective - pair.objective).abs() < 1e-6 * scale,
                "trial {trial}: objective {} vs {}",
                tube.objective,
                pair.objective
            );
            for sol in [&tube, &multi] {
                assert!(
                    (sol.objective - pair.objective).abs() < 1e-6 * scale,
                    "trial {trial}: objective {} vs {}",
                    sol.objective,
                    pair.objective
                );
                assert!(sol.alpha.iter().sum::<f64>().abs() < 1e-9);
                for i in 0..n {
                    let beta = pair.alpha[i] - pair.alpha[n + i];
                    assert!(
                        (sol.alpha[i] - beta).abs() < 2e-3 * c[i],
                        "trial {trial}, row {i}: beta {} vs {beta}",
                        sol.alpha[i]
                    );
                    assert!(sol.alpha[i].abs() <= c[i]);
                }
                assert!(
                    (sol.rho - pair.rho).abs() < 1e-3,
                    "trial {trial}: rho {} vs {}",
                    sol.rho,
                    pair.rho
                );
            }
        }
    }

    #[test]
    fn paired_nu_svr_reaches_the_two_variable_optimum() {
        use crate::core::data::rows::SubsetRows;
        use crate::core::exact::smo::solve_smo;
        let mut rng = Rng::new(41);
        for trial in 0..18 {
            let (n, d, xs, z, c, run) = svr_trial(&mut rng, trial, 500, 0.3);
            let nu = [0.1, 0.5, 0.9][trial % 3];
            let gamma = 1.3;
            // LIBSVM's start: a_i = a_i* filled in row order to nu sum C / 2.
            let mut left = nu * c.iter().sum::<f64>() / 2.0;
            let half: Vec<f64> = c
                .iter()
                .map(|&ct| {
                    let a = ct.min(left).max(0.0);
                    left -= a;
                    a
                })
                .collect();
            let start = [&half[..], &half[..]].concat();
            let x = DenseView::new(&xs, n, d).unwrap();
            let paired = DualProblem {
                y: vec![1.0; n],
                p: z.iter().map(|v| -v).collect(),
                upper: c.clone(),
                diag: vec![1.0; n],
                start: Some(start.clone()),
                sum_per_label: true,
                tube: None,
                paired: true,
                start_gradient: None,
            };
            let params = AlfpgmParams {
                n_pairs: [1, 4, 30][trial % 3],
                ..Default::default()
            };
            let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
            let multi = quietly(|rep| solve_alfpgm(&mut cache, paired.clone(), &run, &params, rep))
                .unwrap();
            let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
            assert!(quietly(|rep| solve_smo(&mut cache, paired, &run, rep)).is_err());
            let twice: Vec<usize> = (0..n).chain(0..n).collect();
            let sub = SubsetRows::new(&x, &twice).unwrap();
            let two = DualProblem {
                y: (0..2 * n).map(|t| if t < n { 1.0 } else { -1.0 }).collect(),
                p: (0..2 * n)
                    .map(|t| if t < n { -z[t] } else { z[t - n] })
                    .collect(),
                upper: [&c[..], &c[..]].concat(),
                diag: vec![1.0; 2 * n],
                start: Some(start),
                sum_per_label: true,
                tube: None,
                paired: false,
                start_gradient: None,
            };
            let mut cache =
                KernelRowCache::<_, f32>::new(&sub, Kernel::rbf(gamma), 1 << 20).unwrap();
            let pair = quietly(|rep| solve_smo(&mut cache, two, &run, rep)).unwrap();
            assert!(pair.converged && multi.converged, "trial {trial}");
            assert!(multi.working_sets > 0);
            // The solution comes back as LIBSVM's variables: (a, a*), labels (+1, -1).
            assert_eq!(multi.alpha.len(), 2 * n);
            assert!(multi.y[..n].iter().all(|&v| v == 1.0));
            assert!(multi.y[n..].iter().all(|&v| v == -1.0));
            let scale = 1.0 + pair.objective.abs();
            assert!(
                (multi.objective - pair.objective).abs() < 1e-6 * scale,
                "trial {trial}: objective {} vs {}",
                multi.objective,
                pair.objective
            );
            // Each label's sum stays the start's, every variable in its box.
            for half_of in [&multi.alpha[..n], &multi.alpha[n..]] {
                let sum: f64 = half_of.iter().sum();
                assert!((sum - nu * c.iter().sum::<f64>() / 2.0).abs() < 1e-9 * n as f64);
                assert!(half_of
                    .iter()
                    .zip(&c)
                    .all(|(&a, &ct)| (0.0..=ct).contains(&a)));
            }
            for (i, &ci) in c.iter().enumerate() {
                let beta = pair.alpha[i] - pair.alpha[n + i];
                let mine = multi.alpha[i] - multi.alpha[n + i];
                assert!(
                    (mine - beta).abs() < 2e-3 * ci,
                    "trial {trial}, row {i}: beta {mine} vs {beta}"
                );
            }
            for (what, a, b) in [("rho", multi.rho, pair.rho), ("r", multi.r, pair.r)] {
                assert!((a - b).abs() < 1e-3, "trial {trial}: {what} {a} vs {b}");
            }
        }
    }

    /// `local_smo` at `level` from fresh buffers: (steps, d, the gradient g + Q d).
    fn run_local_smo(level: Level, sub: LocalSmoInput<'_>) -> (u64, Vec<f64>, Vec<f64>) {
        let m = sub.m;
        let (mut d, mut gl, mut viol) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
        let mut scratch = LocalSmoScratch::default();
        let mut out = LocalSmoOutput {
            d: &mut d,
            gl: &mut gl,
            viol: &mut viol,
            scratch: &mut scratch,
        };
        let steps = local_smo(level, sub, &mut out);
        (steps, d, gl)
    }

    /// The working set's SMO on a tube's subproblem (min 1/2 b^T K b + p^T b + eps |b|_1 over
    /// b = a_B + d, sum d = 0, the box [-C, C]) reaches the optimum the state's SMO finds from
    /// the same start, at every SIMD level: kinks on both sides of 0, variables at both bounds.
    #[test]
    fn local_smo_solves_a_tube_subproblem() {
        use crate::core::exact::smo::solve_smo;
        let mut rng = Rng::new(31);
        for trial in 0..30 {
            let m = [2, 5, 9, 16, 33][trial % 5];
            let (dim, gamma, c) = (3, 2.0, [0.5, 2.0][trial % 2]);
            let eps = [0.0, 0.1, 0.5][(trial / 2) % 3];
            let pts: Vec<f64> = (0..m * dim).map(|_| rng.next_f64()).collect();
            let x = DenseView::new(&pts, m, dim).unwrap();
            let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
            // Q from the cache's own f32 rows, as the solver reads them.
            let all: Vec<usize> = (0..m).collect();
            let q: Vec<f64> = {
                let rows = cache.rows(&all).unwrap();
                (0..m)
                    .flat_map(|a| {
                        rows.row(a)
                            .iter()
                            .map(|&v| f64::from(v))
                            .collect::<Vec<_>>()
                    })
                    .collect()
            };
            let base: Vec<f64> = (0..m)
                .map(|_| match rng.below(4) {
                    0 => 0.0,
                    1 => c,
                    2 => -c,
                    _ => (rng.next_f64() * 2.0 - 1.0) * c,
                })
                .collect();
            let p: Vec<f64> = (0..m).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let objective = |b: &[f64]| -> f64 {
                let mut f = 0.0;
                for a in 0..m {
                    let qb: f64 = (0..m).map(|k| q[a * m + k] * b[k]).sum();
                    f += 0.5 * b[a] * qb + p[a] * b[a] + eps * b[a].abs();
                }
                f
            };
            // The gradient of the smooth part at the start, and the box of d.
            let g: Vec<f64> = (0..m)
                .map(|a| (0..m).map(|k| q[a * m + k] * base[k]).sum::<f64>() + p[a])
                .collect();
            let lo: Vec<f64> = base.iter().map(|b| -c - b).collect();
            let hi: Vec<f64> = base.iter().map(|b| c - b).collect();
            let y = vec![1.0; m];
            let reference = {
                let problem = DualProblem {
                    y: y.clone(),
                    p: p.clone(),
                    upper: vec![c; m],
                    diag: vec![1.0; m],
                    start: Some(base.clone()),
                    sum_per_label: false,
                    tube: Some(eps),
                    paired: false,
                    start_gradient: None,
                };
                let run = ExactRun {
                    tol: 1e-9,
                    max_iter: 1_000_000,
                    shrinking: None,
                };
                quietly(|rep| solve_smo(&mut cache, problem, &run, rep)).unwrap()
            };
            for level in simd::levels_here() {
                let sub = LocalSmoInput {
                    q: &q,
                    g: &g,
                    y: &y,
                    lo: &lo,
                    hi: &hi,
                    m,
                    eps: 1e-9,
                    per_label: false,
                    max_steps: u64::MAX,
                    tube: Some((&base, eps)),
                };
                let (_, d, _) = run_local_smo(level, sub);
                let b: Vec<f64> = base.iter().zip(&d).map(|(a, x)| a + x).collect();
                assert!(d.iter().sum::<f64>().abs() < 1e-12, "trial {trial}: sum d");
                assert!(b.iter().all(|v| v.abs() <= c), "trial {trial}: box");
                let (f, f_ref) = (objective(&b), objective(&reference.alpha));
                assert!(
                    (f - f_ref).abs() < 1e-7 * (1.0 + f_ref.abs()),
                    "trial {trial}, {level:?}: {f} vs the state's SMO {f_ref}"
                );
            }
        }
    }

    #[test]
    fn local_smo_takes_the_same_steps_at_every_level() {
        // Random subproblems (Gram matrices of random points with labels folded in, the boxes
        // of random a in [0, C], random gradients): every SIMD level returns the same d, gradient and
        // step count, bit for bit, and the result satisfies the box and y^T d = 0.
        let mut rng = Rng::new(5);
        let mut total_steps = 0;
        for trial in 0..40 {
            let m = [2, 7, 8, 9, 16, 33, 83][trial % 7];
            let dim = 3;
            let pts: Vec<f64> = (0..m * dim).map(|_| rng.next_f64()).collect();
            let y: Vec<f64> = (0..m)
                .map(|_| if rng.next_f64() < 0.5 { -1.0 } else { 1.0 })
                .collect();
            let mut q = vec![0.0; m * m];
            for a in 0..m {
                for b in 0..m {
                    let d2: f64 = (0..dim)
                        .map(|c| (pts[a * dim + c] - pts[b * dim + c]).powi(2))
                        .sum();
                    q[a * m + b] = y[a] * y[b] * (-2.0 * d2).exp();
                }
            }
            let g: Vec<f64> = (0..m).map(|_| rng.next_f64() * 2.0 - 1.5).collect();
            // a in [0, C]: d in [-a, C - a], some variables at a bound (one side empty).
            let c = 2.0;
            let alpha: Vec<f64> = (0..m)
                .map(|_| match rng.below(4) {
                    0 => 0.0,
                    1 => c,
                    _ => rng.next_f64() * c,
                })
                .collect();
            let lo: Vec<f64> = alpha.iter().map(|a| -a).collect();
            let hi: Vec<f64> = alpha.iter().map(|a| c - a).collect();
            let mut results = Vec::new();
            for level in simd::levels_here() {
                let sub = LocalSmoInput {
                    q: &q,
                    g: &g,
                    y: &y,
                    lo: &lo,
                    hi: &hi,
                    m,
                    eps: 1e-6,
                    per_label: false,
                    max_steps: u64::MAX,
                    tube: None,
                };
                let (steps, d, gl) = run_local_smo(level, sub);
                let ytd: f64 = y.iter().zip(&d).map(|(a, b)| a * b).sum();
                assert!(ytd.abs() < 1e-9, "y^T d = {ytd}");
                for t in 0..m {
                    assert!(d[t] >= lo[t] && d[t] <= hi[t]);
                }
                results.push((level, steps, d, gl));
            }
            total_steps += results[0].1;
            for r in &results[1..] {
                assert_eq!(
                    (r.1, &r.2, &r.3),
                    (results[0].1, &results[0].2, &results[0].3),
                    "{:?} against {:?}, m {m}",
                    r.0,
                    results[0].0
                );
            }
        }
        assert!(total_steps > 200, "{total_steps} steps in 40 subproblems");
    }

    #[test]
    fn repair_projects_onto_the_feasible_set() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let m = 2 + rng.below(30);
            let yb: Vec<f64> = (0..m)
                .map(|k| {
                    if k == 0 {
                        1.0
                    } else if k == 1 {
                        -1.0
                    } else if rng.next_f64() < 0.5 {
                        1.0
                    } else {
                        -1.0
                    }
                })
                .collect();
            let c = 2.0;
            let alpha: Vec<f64> = (0..m)
                .map(|_| {
                    if rng.next_f64() < 0.3 {
                        0.0
                    } else {
                        rng.next_f64() * c
                    }
                })
                .collect();
            let lo: Vec<f64> = alpha.iter().map(|a| -a).collect();
            let hi: Vec<f64> = alpha.iter().map(|a| c - a).collect();
            let mut d: Vec<f64> = (0..m)
                .map(|k| (rng.next_f64() * 2.0 - 1.0).clamp(lo[k], hi[k]))
                .collect();
            repair(&mut d, &yb, &lo, &hi);
            let r: f64 = d.iter().zip(&yb).map(|(x, y)| x * y).sum();
            assert!(r.abs() < 1e-12, "residual {r}");
            for k in 0..m {
                assert!(d[k] >= lo[k] && d[k] <= hi[k]);
            }
        }
    }

    #[test]
    fn merge_by_position_matches_sort_and_dedup() {
        let mut rng = Rng::new(5);
        let mut out = Vec::new();
        for trial in 0..200 {
            let list = |rng: &mut Rng, len: usize| -> Vec<(f64, u32)> {
                let mut l: Vec<(f64, u32)> = (0..len)
                    .map(|_| (rng.next_f64(), rng.below(40) as u32))
                    .collect();
                l.sort_by_key(|e| e.1);
                l.dedup_by_key(|e| e.1);
                l
            };
            let len = rng.below(30);
            let mut a = list(&mut rng, len);
            let len = rng.below(30);
            let b = list(&mut rng, len);
            if trial % 5 == 0 {
                a.reverse();
            }
            merge_by_position(&a, &b, &mut out);
            let mut want = [a.clone(), b.clone()].concat();
            want.sort_by_key(|e| e.1);
            want.dedup_by_key(|e| e.1);
            let positions = |l: &[(f64, u32)]| l.iter().map(|e| e.1).collect::<Vec<_>>();
            assert_eq!(positions(&out), positions(&want), "trial {trial}");
            for e in &out {
                // The first list's entry wins where both hold the position.
                let from = a.iter().chain(&b).find(|f| f.1 == e.1).unwrap();
                assert_eq!(e.0, from.0);
            }
        }
    }

    #[test]
    fn smallest_keeps_the_k_smallest_in_order() {
        let mut rng = Rng::new(12);
        let mut best = Smallest::with_capacity(8);
        for _ in 0..200 {
            let n = rng.below(3000);
            let k = 1 + rng.below(300);
            let keys: Vec<f64> = (0..n).map(|_| (rng.below(500) as f64) - 250.0).collect();
            best.reset(k);
            for (t, &key) in keys.iter().enumerate() {
                best.push(key, t as u32);
            }
            let got: Vec<f64> = best.finish().iter().map(|e| e.0).collect();
            let mut sorted = keys.clone();
            sorted.sort_by(f64::total_cmp);
            sorted.truncate(k);
            assert_eq!(got, sorted);
            for &(key, t) in best.finish() {
                assert_eq!(keys[t as usize], key);
            }
        }
    }

    #[test]
    fn bad_parameters_are_rejected() {
        let bad = [
            AlfpgmParams {
                n_pairs: 0,
                ..Default::default()
            },
            AlfpgmParams {
                min_alpha_opt: 10,
                max_alpha_opt: 5,
                ..Default::default()
            },
            AlfpgmParams {
                alpha_delta_threshold: f64::NAN,
                ..Default::default()
            },
            AlfpgmParams {
                al_penalty: -1.0,
                ..Default::default()
            },
            AlfpgmParams {
                fista_max_iter: 0,
                ..Default::default()
            },
            AlfpgmParams {
                lipschitz_safety: 0.5,
                ..Default::default()
            },
            AlfpgmParams {
                inner_rel: 0.0,
                ..Default::default()
            },
        ];
        for p in bad {
            assert!(p.check().is_err(), "{p:?}");
        }
        assert!(AlfpgmParams::default().check().is_ok());
    }
}
