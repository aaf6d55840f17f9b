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
//!
//! ## Files
//!
//! - `mod.rs` (here): the entry point `solve_alfpgm` and the decomposition loop around the
//!   steps (`Decomposition`: one pair by the analytic step, the fallbacks, the iteration count).
//! - `params.rs`: `AlfpgmParams` and `InnerSolver`.
//! - `candidates.rs`: step 1's limiter (`Limiter`) and the pass that finds m(a), M(a) and the
//!   candidate lists (`scan_candidates`).
//! - `selection.rs`: step 1's pairing (`pick_pairs`) into the working set (`WorkingSet`).
//! - `subproblem.rs`: step 2, the subproblem on B (`Subproblem`) and its SMO solve.
//! - `local_smo.rs`: the SMO on Q_BB (`local_smo`).
//! - `augmented_lagrangian.rs`: steps 3-6, the paper's subproblem solver.
//! - `update.rs`: a_B += d and step 7.
//! - `tests.rs`.

mod augmented_lagrangian;
mod candidates;
mod local_smo;
mod params;
mod selection;
mod subproblem;
#[cfg(test)]
mod tests;
mod update;

use std::time::Instant;

use crate::core::common::error::Result;
use crate::core::data::rows::Rows;
use crate::core::exact::dual::{DualProblem, DualSolution, DualState, ExactRun, Reporter};
use crate::core::exact::smo::{select_pair, start_state};
use crate::core::exact::stride::Stride;
use crate::core::kernels::kernel_cache::{CachedRows, KernelRowCache};
use crate::core::simd::RowValue;

use candidates::{scan_candidates, Candidates, Limiter};
use selection::{pick_pairs, PairLimits, WorkingSet};
use subproblem::{Decrease, Subproblem};
use update::{take_step, update_gradient, Moves};

pub use params::{AlfpgmParams, InnerSolver};

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
    let mut alf = Decomposition::new(n, p, state.paired, params, run);
    cache.ensure_capacity(2 * p);
    let mut converged = false;
    for t in 0..n {
        alf.limiter.refresh(&state, params, t);
    }
    let mut prev = state.extremes();
    while alf.iter < max_iter {
        // One pass: the unfiltered m(a), M(a) and the limited candidate lists.
        let (m_up, m_low) = alf.scan(&state, p, prev, true);
        if m_up - m_low < tol {
            if shrinker.unshrink(&mut state, cache, reporter)? {
                prev = state.extremes();
                continue;
            }
            converged = true;
            break;
        }
        prev = (m_up, m_low);
        if !alf.select(cache, &state, prev)? {
            // No pair with b_ij > 0 although m - M >= tol cannot happen; stop, reported.
            break;
        }
        if !alf.step(cache, &mut state, prev)? {
            break;
        }
        shrinker.record_moves(&alf.moves.moved, &mut state, cache)?;
        let pairs = alf.moves.moved.len().div_ceil(2);
        for &(a, b) in shrinker.after_step(pairs, &mut state, cache, tol, reporter)? {
            alf.limiter.swap(a, b);
            alf.set.in_b.swap(a, b);
        }
        strode.clear();
        if stride.after(alf.iter, &mut state, &mut strode) {
            shrinker.record_moves(&strode, &mut state, cache)?;
            for &(t, _) in &strode {
                alf.limiter.refresh(&state, params, t);
            }
        }
        reporter.tick(&state, alf.iter, false)?;
    }
    shrinker.unshrink(&mut state, cache, reporter)?;
    if !converged {
        converged = state.gap() < tol;
    }
    let mut sol = DualSolution::from_state(state, alf.iter, converged, start);
    sol.cache = cache.stats().clone();
    sol.min_active = shrinker.min_active;
    sol.fallback_steps = alf.fallback_steps;
    sol.inner_iterations = alf.inner_iterations;
    sol.working_sets = alf.working_sets;
    sol.strides = stride.taken;
    reporter.finish(&sol)?;
    Ok(sol)
}

/// One ALFPGM run: its settings, what each phase keeps (allocated once) and its counters.
struct Decomposition<'p> {
    params: &'p AlfpgmParams,
    tol: f64,
    max_iter: u64,
    /// p: pairs per working set.
    pairs: usize,
    limiter: Limiter,
    candidates: Candidates,
    set: WorkingSet,
    sub: Subproblem,
    moves: Moves,
    /// The AL multiplier lambda, warm-started from the last working set.
    lambda: f64,
    /// Pair steps (the iterations reported).
    iter: u64,
    working_sets: u64,
    fallback_steps: u64,
    /// The inner solver's steps, over all working sets.
    inner_iterations: u64,
}

impl<'p> Decomposition<'p> {
    fn new(n: usize, p: usize, paired: bool, params: &'p AlfpgmParams, run: &ExactRun) -> Self {
        Decomposition {
            params,
            tol: run.tol,
            max_iter: run.max_iter,
            pairs: p,
            limiter: Limiter::new(n),
            candidates: Candidates::new(n, p, paired),
            set: WorkingSet::new(n, p),
            sub: Subproblem::new(p),
            moves: Moves::new(p),
            lambda: 0.0,
            iter: 0,
            working_sets: 0,
            fallback_steps: 0,
            inner_iterations: 0,
        }
    }

    /// `scan_candidates` for up to `p` pairs: the unfiltered (m(a), M(a)).
    fn scan(
        &mut self,
        state: &DualState,
        p: usize,
        prev: (f64, f64),
        filtered: bool,
    ) -> (f64, f64) {
        let (limiter, candidates) = (&self.limiter, &mut self.candidates);
        scan_candidates(state, limiter, candidates, self.params, p, prev, filtered)
    }

    /// `pick_pairs` from the lists of the last scan, up to `p` pairs.
    fn pick<R: Rows, T: RowValue>(
        &mut self,
        cache: &mut KernelRowCache<'_, R, T>,
        state: &DualState,
        p: usize,
    ) -> Result<()> {
        let limits = PairLimits {
            pairs: p,
            tol: self.tol,
            pair_ratio: self.params.pair_ratio,
        };
        pick_pairs(cache, state, &mut self.candidates, &mut self.set, limits)
    }

    /// Step 1: the working set from the limited candidates; if they give no pair, the
    /// selection runs again without limiter, which always yields the maximal violating pair
    /// while m - M >= tol. False where neither gives a pair.
    fn select<R: Rows, T: RowValue>(
        &mut self,
        cache: &mut KernelRowCache<'_, R, T>,
        state: &DualState,
        prev: (f64, f64),
    ) -> Result<bool> {
        self.pick(cache, state, self.pairs)?;
        if self.set.is_empty() {
            self.scan(state, self.pairs, prev, false);
            self.pick(cache, state, self.pairs)?;
        }
        Ok(!self.set.is_empty())
    }

    /// Steps 2-7 on the working set, or the fallback where they give no decrease. False where
    /// not even the fallback moves (the run stops; the final test reports it).
    fn step<R: Rows, T: RowValue>(
        &mut self,
        cache: &mut KernelRowCache<'_, R, T>,
        state: &mut DualState,
        prev: (f64, f64),
    ) -> Result<bool> {
        self.working_sets += 1;
        if self.set.pair_i.len() == 1 && !state.paired {
            // One pair: the subproblem's exact solution is the analytic SMO step.
            let (i, j) = (self.set.pair_i[0], self.set.pair_j[0]);
            let (di, dj) = self.pair_step(cache, state, i, j)?;
            self.iter += 1;
            for (t, dt) in [(i, di), (j, dj)] {
                self.limiter.record(t, dt);
                self.set.in_b[t] = false;
                self.limiter.refresh(state, self.params, t);
            }
            return Ok(true);
        }
        let rows = cache.rows_prefix(&self.set.members, state.active)?;
        let left = self.max_iter - self.iter;
        let decrease = self.solve_subproblem(&rows, state, left);
        self.inner_iterations += decrease.steps;
        self.iter += decrease.steps.max(1);
        if decrease.phi < 0.0 {
            self.apply_step(&rows, state);
            for &t in &self.set.members {
                self.limiter.refresh(state, self.params, t);
            }
            return Ok(true);
        }
        self.fallback_steps += 1;
        if state.paired {
            return self.paired_fallback(cache, state, prev);
        }
        // No decrease from the multi-pair step: one WSS2 SMO step instead.
        for &t in &self.set.members {
            self.set.in_b[t] = false;
        }
        self.moves.moved.clear();
        // No tolerance: any violating pair (the caller saw m - M >= tol).
        if let Some((i, j)) = select_pair(cache, state, f64::NEG_INFINITY)? {
            self.pair_step(cache, state, i, j)?;
            for t in [i, j] {
                self.limiter.refresh(state, self.params, t);
            }
        }
        Ok(true)
    }

    /// No decrease, paired: the unfiltered maximal violating pair alone (the paired form has
    /// no analytic step of its own: the subproblem's SMO on two variables). False where not
    /// even that pair descends (rounding).
    fn paired_fallback<R: Rows, T: RowValue>(
        &mut self,
        cache: &mut KernelRowCache<'_, R, T>,
        state: &mut DualState,
        prev: (f64, f64),
    ) -> Result<bool> {
        self.scan(state, 1, prev, false);
        self.pick(cache, state, 1)?;
        self.moves.moved.clear();
        if !self.set.is_empty() {
            let rows = cache.rows_prefix(&self.set.members, state.active)?;
            let left = self.max_iter.saturating_sub(self.iter).max(1);
            let decrease = self.solve_subproblem(&rows, state, left);
            self.iter += decrease.steps.max(1);
            if decrease.phi < 0.0 {
                self.apply_step(&rows, state);
            }
        }
        for &t in &self.set.members {
            self.set.in_b[t] = false;
            self.limiter.refresh(state, self.params, t);
        }
        Ok(!self.moves.moved.is_empty())
    }

    /// The analytic SMO step on (i, j), its moves recorded: returns the changes of a_i, a_j.
    fn pair_step<R: Rows, T: RowValue>(
        &mut self,
        cache: &mut KernelRowCache<'_, R, T>,
        state: &mut DualState,
        i: usize,
        j: usize,
    ) -> Result<(f64, f64)> {
        self.moves.moved.clear();
        self.moves
            .moved
            .extend([(i, state.bound_part(i)), (j, state.bound_part(j))]);
        let rows = cache.rows_prefix(&[i, j], state.active)?;
        Ok(state.smo_step(i, j, rows.row(0), rows.row(1)))
    }

    /// Steps 2-6: builds and solves the subproblem on B; leaves the feasible step in `sub.d`.
    fn solve_subproblem<T: RowValue>(
        &mut self,
        rows: &CachedRows<'_, T>,
        state: &DualState,
        max_steps: u64,
    ) -> Decrease {
        let extremes = self.sub.build(rows, state, &self.set);
        let params = self.params;
        // Relative to the weakest selected pair: a tolerance relative to the strongest one let
        // FISTA stop before the weaker pairs moved at all (ijcnn1: 25 pairs gained what one SMO
        // step on the maximal pair gains).
        // With a sum per label, m_B - M_B mixes the labels: the selected pairs' own violations.
        let per_label = state.sum_per_label;
        let weakest = if per_label {
            self.set.min_violation
        } else {
            self.set
                .min_violation
                .min(extremes.up_max - extremes.low_min)
        };
        let eps_in = (params.inner_tol_factor * self.tol).max(params.inner_rel * weakest);
        // The augmented Lagrangian handles one equality and a box: a sum per label or a tube
        // takes the SMO subproblem.
        if params.inner == InnerSolver::Smo || per_label || state.signed {
            return self
                .sub
                .solve_by_smo(state, &self.set.members, eps_in, max_steps);
        }
        self.sub
            .solve_by_al(params, eps_in, extremes, &mut self.lambda)
    }

    /// a_B += d and G += Q_{:,B} d (step 7).
    fn apply_step<T: RowValue>(&mut self, rows: &CachedRows<'_, T>, state: &mut DualState) {
        let moves = &mut self.moves;
        take_step(state, &mut self.set, &self.sub, &mut self.limiter, moves);
        update_gradient(rows, state, &moves.coefficients);
    }
}

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
