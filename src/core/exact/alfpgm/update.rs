//! Taking a working set's step: a_B += d with the bounds set exactly, the limiter's record
//! (`take_step`), and the gradient update G += Q_{:,B} d over the cached rows of B, in
//! parallel over blocks of n (`update_gradient`).

use rayon::prelude::*;

use crate::core::common::parallel;
use crate::core::exact::dual::DualState;
use crate::core::kernels::kernel_cache::CachedRows;
use crate::core::simd::RowValue;

use super::candidates::Limiter;
use super::selection::WorkingSet;
use super::subproblem::Subproblem;
use super::variable;

/// The longest gradient-update work item (`parallel::item_len` sizes them).
const BLOCK: usize = 4096;

/// What a step moved, allocated once for the run.
pub(super) struct Moves {
    /// (y change, place in B) of each variable that moved: its term of the gradient update.
    pub(super) coefficients: Vec<(f64, usize)>,
    /// (position, a_t before) of the variables the last step moved (the shrinking's record).
    pub(super) moved: Vec<(usize, f64)>,
}

impl Moves {
    pub(super) fn new(p: usize) -> Self {
        Moves {
            coefficients: Vec::with_capacity(2 * p),
            moved: Vec::with_capacity(2 * p),
        }
    }
}

/// a_B += d (a variable d drove to a bound set to it exactly), the limiter's record of B, B's
/// marks cleared; the gradient's terms and the moves in `moves`.
pub(super) fn take_step(
    state: &mut DualState,
    set: &mut WorkingSet,
    sub: &Subproblem,
    limiter: &mut Limiter,
    moves: &mut Moves,
) {
    moves.coefficients.clear();
    moves.moved.clear();
    for (a, (&ia, &label)) in set.members.iter().zip(set.member_labels.iter()).enumerate() {
        let da = sub.d[a];
        let (old, y) = variable(state, ia, label);
        let old_bar = state.bound_part(ia);
        let new = if da >= sub.upper[a] {
            state.upper[ia]
        } else if da <= sub.lower[a] {
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
        limiter.record(ia, change);
        if change != 0.0 {
            // The position's coefficient in the gradient moves by y change (paired: a_t* by
            // -change), and its rows are the position's.
            moves.coefficients.push((y * change, a));
            moves.moved.push((ia, old_bar));
        }
        set.in_b[ia] = false;
    }
}

/// G += sum over the terms (c, a) of c y K_{B_a, :}: G += Q_{:,B} d over the active prefix.
pub(super) fn update_gradient<T: RowValue>(
    rows: &CachedRows<'_, T>,
    state: &mut DualState,
    coefficients: &[(f64, usize)],
) {
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
                for &(ca, a) in coefficients {
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
