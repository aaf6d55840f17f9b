//! Shrinking for the exact solvers (SMO, ALFPGM), LIBSVM's `Solver::do_shrinking` restated.
//!
//! A variable at a bound whose gradient says it cannot enter a violating pair (at its lower
//! bound in I_up only with -y_t G_t < M(a), or in I_low only with -y_t G_t > m(a)) is not expected
//! to move; it leaves the active set: positions are swapped so that the active variables are a
//! prefix 0..active (the kernel-row cache swaps the same positions and then computes row
//! prefixes only), and steps scan, select and update the gradient over that prefix. The gradient
//! of shrunk variables is kept recoverable: G_t = G_bar_t + p_t + sum over free s of a_s Q_ts,
//! G_bar_t = sum over variables at their upper bound of C_s Q_ts, updated from full kernel rows
//! whenever a variable reaches or leaves its upper bound. With a tube (`DualProblem::tube`) the
//! variables at -C count in G_bar too (`DualState::bound_part`), and a row at the kink 0 (inside
//! the tube) shrinks when neither of its two values can pair. Before the final optimality test the
//! gradient is reconstructed and every variable is active again, so the solution and the
//! stopping rule are those of the unshrunk solver; once m - M falls to 10 tol on the active set,
//! the gradient is reconstructed once and shrinking starts again from all variables (LIBSVM's
//! `unshrink`).

use rayon::prelude::*;

use crate::core::common::error::Result;
use crate::core::common::parallel;
use crate::core::data::rows::Rows;
use crate::core::exact::dual::{label_index, DualState, Reporter};
use crate::core::kernels::kernel_cache::{CachedRows, KernelRowCache};
use crate::core::simd::RowValue;

/// Variable pairs moved between two shrinking passes (LIBSVM: min(n, 1000) SMO steps).
const SHRINK_EVERY: usize = 1000;
/// The longest work item over G_bar or the gradient (`parallel::item_len` sizes them).
const BLOCK: usize = 4096;
/// Kernel rows requested per batch while reconstructing the gradient.
const RECONSTRUCT_BATCH: usize = 64;

/// The shrinking schedule and scratch of one solver run.
pub struct Shrinking {
    enabled: bool,
    /// Variable pairs still to move before the next pass.
    countdown: usize,
    every: usize,
    /// Whether the one reconstruction at 10 tol has been done.
    unshrunk: bool,
    /// The smallest active set so far.
    pub min_active: usize,
    swaps: Vec<(usize, usize)>,
    positions: Vec<usize>,
    acc: Vec<f64>,
}

impl Shrinking {
    /// `schedule`: None keeps every variable active (G_bar is then not maintained); Some(k) runs
    /// a shrinking pass every k variable pairs moved (k = 0: LIBSVM's min(n, 1000)).
    pub fn new(schedule: Option<usize>, state: &mut DualState) -> Self {
        let n = state.n();
        let enabled = schedule.is_some();
        if enabled {
            // G_bar of a = 0 (no variable at its upper bound; every C_t > 0); a non-zero start
            // adds its part (`smo::start_state`).
            state.grad_bar = vec![0.0; n];
        }
        let every = match schedule {
            Some(k) if k > 0 => k,
            _ => n.clamp(1, SHRINK_EVERY),
        };
        Shrinking {
            enabled,
            min_active: n,
            countdown: every,
            every,
            unshrunk: false,
            swaps: Vec::new(),
            positions: Vec::new(),
            acc: Vec::new(),
        }
    }

    /// Counts `pairs` moved variable pairs; when a pass is due, shrinks and returns the position
    /// swaps made (already applied to `state` and `cache`; the caller swaps its own per-position
    /// arrays the same way).
    pub fn after_step<R: Rows, T: RowValue>(
        &mut self,
        pairs: usize,
        state: &mut DualState,
        cache: &mut KernelRowCache<'_, R, T>,
        tol: f64,
        reporter: &mut Reporter<'_, '_>,
    ) -> Result<&[(usize, usize)]> {
        self.swaps.clear();
        if !self.enabled {
            return Ok(&self.swaps);
        }
        self.countdown = self.countdown.saturating_sub(pairs.max(1));
        if self.countdown == 0 {
            self.countdown = self.every;
            self.shrink(state, cache, tol, reporter)?;
        }
        Ok(&self.swaps)
    }

    /// Called when the active set looks optimal: reconstructs the gradient and makes every
    /// variable active. Returns whether anything had been shrunk (then the optimality test must
    /// be repeated on all variables, and the next step shrinks again).
    pub fn unshrink<R: Rows, T: RowValue>(
        &mut self,
        state: &mut DualState,
        cache: &mut KernelRowCache<'_, R, T>,
        reporter: &mut Reporter<'_, '_>,
    ) -> Result<bool> {
        if state.active == state.n() {
            return Ok(false);
        }
        self.reconstruct_gradient(state, cache, reporter)?;
        state.active = state.n();
        // LIBSVM's counter = 1: shrink again right after the next step.
        self.countdown = 1;
        Ok(true)
    }

    /// Keeps G_bar current after a step: `moved` lists (position, its `DualState::bound_part`
    /// before the step) of the positions the step changed. Variables that reached or left their upper bound add or
    /// remove C_t Q_t. from G_bar, from their full kernel rows (one batch).
    pub fn record_moves<R: Rows, T: RowValue>(
        &mut self,
        moved: &[(usize, f64)],
        state: &mut DualState,
        cache: &mut KernelRowCache<'_, R, T>,
    ) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        self.positions.clear();
        self.acc.clear();
        for &(t, was) in moved {
            let is = state.bound_part(t);
            if was != is {
                self.positions.push(t);
                self.acc.push(is - was);
            }
        }
        if self.positions.is_empty() {
            return Ok(());
        }
        let rows = cache.rows(&self.positions)?;
        add_scaled_rows(&mut state.grad_bar, &state.y, 0, &self.acc, &rows);
        Ok(())
    }

    /// LIBSVM's `do_shrinking`.
    fn shrink<R: Rows, T: RowValue>(
        &mut self,
        state: &mut DualState,
        cache: &mut KernelRowCache<'_, R, T>,
        tol: f64,
        reporter: &mut Reporter<'_, '_>,
    ) -> Result<()> {
        // gmax1 = m(a) = max over I_up of -y G; gmax2 = -M(a) = max over I_low of y G; with a
        // sum per label, each label's own (LIBSVM's Solver_NU::do_shrinking).
        let extremes = state.extremes_by_label();
        let per_label = state.sum_per_label;
        let gap = |(m, big_m): (f64, f64)| m - big_m;
        let worst = if per_label {
            gap(extremes[0]).max(gap(extremes[1]))
        } else {
            gap(extremes[0])
        };
        if !self.unshrunk && worst <= 10.0 * tol {
            self.unshrunk = true;
            self.reconstruct_gradient(state, cache, reporter)?;
            state.active = state.n();
        }
        // A variable at a bound (or a tube's kink) that cannot enter a violating pair: as an
        // i its up value is below every low value, as a j its low value above every up value.
        let shrinkable = |state: &DualState, t: usize| -> bool {
            if state.is_free(t) {
                return false;
            }
            if state.paired {
                // A position goes when neither of its variables can pair in its label.
                let v = -state.grad[t];
                return state
                    .paired_sets(t)
                    .iter()
                    .zip(&extremes)
                    .all(|(&(up, low), &(m, big_m))| (!up || v < big_m) && (!low || v > m));
            }
            let (m, big_m) = extremes[if per_label {
                label_index(state.y[t])
            } else {
                0
            }];
            (!state.in_up(t) || state.up_value(t) < big_m)
                && (!state.in_low(t) || state.low_value(t) > m)
        };
        let mut active = state.active;
        let mut i = 0;
        while i < active {
            if shrinkable(state, i) {
                active -= 1;
                while active > i {
                    if !shrinkable(state, active) {
                        self.swaps.push((i, active));
                        state.swap(i, active);
                        break;
                    }
                    active -= 1;
                }
            }
            i += 1;
        }
        state.active = active;
        self.min_active = self.min_active.min(active);
        cache.swap_positions(&self.swaps);
        Ok(())
    }

    /// G_t for the shrunk positions t from G_bar and the free variables, LIBSVM's
    /// `reconstruct_gradient`: by the rows of the shrunk variables (active prefix) or by the full
    /// rows of the free ones, whichever needs fewer kernel values; Ctrl-C between batches.
    fn reconstruct_gradient<R: Rows, T: RowValue>(
        &mut self,
        state: &mut DualState,
        cache: &mut KernelRowCache<'_, R, T>,
        reporter: &mut Reporter<'_, '_>,
    ) -> Result<()> {
        let (n, active) = (state.n(), state.active);
        if active == n {
            return Ok(());
        }
        for t in active..n {
            state.grad[t] = state.grad_bar[t] + state.p[t];
        }
        self.positions.clear();
        self.positions
            .extend((0..active).filter(|&s| state.is_free(s)));
        let n_free = self.positions.len();
        if n_free == 0 {
            return Ok(());
        }
        let batch = RECONSTRUCT_BATCH.min(cache.capacity()).max(1);
        if n_free * n > 2 * active * (n - active) {
            // Rows of the shrunk variables, their active prefix: G_t += y_t sum_s a_s y_s K_ts.
            self.acc.clear();
            self.acc.extend((0..active).map(|s| state.free_part(s)));
            let shrunk: Vec<usize> = (active..n).collect();
            let acc = &self.acc;
            for chunk in shrunk.chunks(batch) {
                let rows = cache.rows_prefix(chunk, active)?;
                let t0 = chunk[0];
                let (grad, y) = (&mut state.grad[t0..t0 + chunk.len()], &state.y[t0..]);
                // One row per work item, each summed in order: the same values on any threads.
                parallel::install(|| {
                    grad.par_iter_mut().enumerate().for_each(|(k, g)| {
                        let sum: f64 = rows
                            .row(k)
                            .iter()
                            .zip(acc)
                            .map(|(&kv, &c)| c * kv.widen())
                            .sum();
                        *g += y[k] * sum;
                    })
                });
                reporter.keep_alive(state)?;
            }
        } else {
            // Full rows of the free variables: G_t += y_t a_s y_s K_st for each shrunk t.
            let free = std::mem::take(&mut self.positions);
            for chunk in free.chunks(batch) {
                let rows = cache.rows(chunk)?;
                self.acc.clear();
                self.acc.extend(chunk.iter().map(|&s| state.free_part(s)));
                let (grad, y) = (&mut state.grad[active..], &state.y[active..]);
                add_scaled_rows(grad, y, active, &self.acc, &rows);
                reporter.keep_alive(state)?;
            }
            self.positions = free;
        }
        Ok(())
    }
}

/// target[t] += y[t] sum_k coef[k] K_k[first + t] for every t, `rows` holding the K_k: blocks of
/// target in parallel, each adding the rows in order (the same values on any number of
/// threads). Also the start's gradient (`smo::start_state`).
pub(crate) fn add_scaled_rows<T: RowValue>(
    target: &mut [f64],
    y: &[f64],
    first: usize,
    coef: &[f64],
    rows: &CachedRows<'_, T>,
) {
    parallel::install(|| {
        let block = parallel::item_len(target.len(), 512, BLOCK);
        target
            .par_chunks_mut(block)
            .zip(y.par_chunks(block))
            .enumerate()
            .for_each(|(blk, (g, yb))| {
                let k0 = first + blk * block;
                for (k, &c) in coef.iter().enumerate() {
                    let row = &rows.row(k)[k0..k0 + g.len()];
                    for ((g, &yv), &kv) in g.iter_mut().zip(yb).zip(row) {
                        *g += c * yv * kv.widen();
                    }
                }
            })
    });
}
