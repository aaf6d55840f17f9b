//! Strides: a step along what the last window of steps did, for problems of a wide range.
//!
//! Where K is far from full rank on the free variables (a polynomial kernel of degree 3 on one
//! feature has rank 4), the problem restricted to them has directions of (nearly) zero
//! curvature along which the objective keeps falling until a variable reaches its bound or,
//! with a tube, its kink. Pair steps cannot follow such a direction: each one minimises along
//! its own pair, whose curvature is that of the kernel, and moves the iterate a step of about
//! b / a along the null direction, so the solver creeps, its gap m - M constant and its
//! objective falling by the same amount per step, until the first variable arrives. The
//! creep's length grows with C K_max / tol, the range `RowPrecision` measures: on
//! scikit-learn's polynomial SVR example (K up to 1.76e4, C = 100) SMO crept through phases of
//! 200,000 to 1,000,000 steps each, 4.6 million steps without shrinking, and with it (each
//! shrunk variable let back in started a new creep) over 10^7 at tol 1e-3 and 1.4 10^8 at
//! 1e-5; ALFPGM's SMO inside its working sets crept the same way (5.2 million steps, 9.8
//! million with shrinking).
//!
//! A stride takes the displacement D of the variables over the last `WINDOW` pair steps and the
//! gradient's change over them, Q D (exact: G is linear in a), and follows D while the
//! objective along it, slope g^T D + t D^T Q D (with a tube plus epsilon's slope of the
//! signs), still falls where the first variable reaches its bound (or kink): it jumps there,
//! and that variable lands on it exactly. A minimum along D inside the box is ordinary
//! convergence, left to the pair steps. D keeps y^T a (and each label's sum) since it is the
//! difference of two feasible points, and the new G is G + t Q D, no kernel row needed; the
//! variables it moves to or from their upper bound update G_bar (`Shrinking::record_moves`).
//! Strides are taken only by problems of a wide range (`RowPrecision::needed` gives f64 for
//! them), so Gaussian fits at usual C take the steps they always took. On the example, with
//! shrinking, at tol 1e-3 / 1e-5: SMO 636,804 / 716,950 steps (57 / 65 strides), ALFPGM
//! 232,909 / 248,687 (23 / 23), both to a duality gap within tol of the objective
//! (`docs/row_precision.md`).

use crate::core::exact::dual::{DualProblem, DualState, RowPrecision};

/// Pair steps between two strides (the window whose displacement a stride follows).
pub const WINDOW: u64 = 1000;

/// The shortest stride taken, in windows: a stride shorter than the window itself gains less
/// than the window's own steps did.
const SHORTEST: f64 = 1.0;

/// A run's strides: the snapshot of the window's start, and how many were taken.
pub(crate) struct Stride {
    enabled: bool,
    /// The pair step the snapshot was taken at; None before the first.
    since: Option<u64>,
    /// The snapshot: the active prefix, the variables at its positions, a, a* (paired) and G.
    active: usize,
    index: Vec<u32>,
    alpha: Vec<f64>,
    alpha_star: Vec<f64>,
    grad: Vec<f64>,
    /// Strides taken.
    pub taken: u64,
}

impl Stride {
    /// Strides for `problem` at tolerance `tol`, on when its range calls for them.
    pub(crate) fn new(problem: &DualProblem, tol: f64) -> Self {
        let most = |v: &[f64]| v.iter().fold(0.0f64, |m, &x| m.max(x.abs()));
        let wide = RowPrecision::needed(most(&problem.diag), most(&problem.upper), tol);
        Stride {
            enabled: wide == RowPrecision::F64,
            since: None,
            active: 0,
            index: Vec::new(),
            alpha: Vec::new(),
            alpha_star: Vec::new(),
            grad: Vec::new(),
            taken: 0,
        }
    }

    /// After pair step `step`: once a window has passed since the snapshot, a stride (the
    /// variables it moved pushed to `moved` with their `DualState::bound_part` before) and a
    /// new snapshot. Returns whether a stride was taken. Shrinking moves positions: a change of
    /// the active set starts a new window at once, and a snapshot whose positions moved
    /// otherwise gives no stride, only the new snapshot.
    pub(crate) fn after(
        &mut self,
        step: u64,
        state: &mut DualState,
        moved: &mut Vec<(usize, f64)>,
    ) -> bool {
        if !self.enabled {
            return false;
        }
        let Some(since) = self.since.filter(|_| self.active == state.active) else {
            self.snapshot(step, state);
            return false;
        };
        if step < since + WINDOW {
            return false;
        }
        let taken = self.index[..] == state.index[..state.active] && self.take(state, moved);
        self.snapshot(step, state);
        taken
    }

    fn snapshot(&mut self, step: u64, state: &DualState) {
        let m = state.active;
        self.since = Some(step);
        self.active = m;
        self.index.clear();
        self.index.extend_from_slice(&state.index[..m]);
        self.alpha.clear();
        self.alpha.extend_from_slice(&state.alpha[..m]);
        self.grad.clear();
        self.grad.extend_from_slice(&state.grad[..m]);
        self.alpha_star.clear();
        if state.paired {
            self.alpha_star.extend_from_slice(&state.alpha_star[..m]);
        }
    }

    /// How far variable t (and, paired, its a_t*) moved over the window; None if neither did.
    fn displacement(&self, state: &DualState, t: usize) -> Option<(f64, f64)> {
        let da = state.alpha[t] - self.alpha[t];
        let ds = if state.paired {
            state.alpha_star[t] - self.alpha_star[t]
        } else {
            0.0
        };
        (da != 0.0 || ds != 0.0).then_some((da, ds))
    }

    /// The stride along the window's displacement (module doc), if the objective along it
    /// still falls at the first bound or kink and that lies at least `SHORTEST` windows out.
    fn take(&mut self, state: &mut DualState, moved: &mut Vec<(usize, f64)>) -> bool {
        let m = self.active;
        let paired = state.paired;
        // d_t: the change of variable t's coefficient in the gradient per unit of the stride
        // (paired: of a_t - a_t*); the objective's slope and curvature along D.
        let mut slope = 0.0;
        let mut curve = 0.0;
        let mut reach = f64::INFINITY;
        for t in 0..m {
            let Some((da, ds)) = self.displacement(state, t) else {
                continue;
            };
            let d = da - ds;
            slope += state.grad[t] * d;
            curve += (state.grad[t] - self.grad[t]) * d;
            let (lo, hi) = (state.lower(t), state.upper[t]);
            reach = reach.min(room(state.alpha[t], da, lo, hi));
            if paired {
                reach = reach.min(room(state.alpha_star[t], ds, 0.0, hi));
            }
            if state.signed {
                // epsilon |beta| along D: its slope by beta's sign (off 0 it costs epsilon),
                // up to where beta reaches 0.
                let beta = state.alpha[t];
                let tube_slope = if beta > 0.0 {
                    da
                } else if beta < 0.0 {
                    -da
                } else {
                    da.abs()
                };
                slope += state.tube * tube_slope;
                if beta != 0.0 && (beta > 0.0) != (da > 0.0) {
                    reach = reach.min(-beta / da);
                }
            }
        }
        // The minimum along D lies beyond the first bound: the objective still falls there.
        let beyond = slope < 0.0 && (curve <= 0.0 || -slope / curve > reach);
        if !(beyond && reach.is_finite() && reach >= SHORTEST) {
            return false;
        }
        let s = reach;
        for t in 0..m {
            let Some((da, ds)) = self.displacement(state, t) else {
                continue;
            };
            moved.push((t, state.bound_part(t)));
            let (lo, hi) = (state.lower(t), state.upper[t]);
            let beta = state.alpha[t];
            let kink = state.signed && beta != 0.0 && (beta > 0.0) != (da > 0.0);
            state.alpha[t] = if da != 0.0 && room(beta, da, lo, hi) <= s {
                if da > 0.0 {
                    hi
                } else {
                    lo
                }
            } else if kink && -beta / da <= s {
                0.0
            } else {
                (beta + s * da).clamp(lo, hi)
            };
            if paired {
                let a = state.alpha_star[t];
                state.alpha_star[t] = if ds != 0.0 && room(a, ds, 0.0, hi) <= s {
                    if ds > 0.0 {
                        hi
                    } else {
                        0.0
                    }
                } else {
                    (a + s * ds).clamp(0.0, hi)
                };
            }
        }
        for t in 0..m {
            state.grad[t] += s * (state.grad[t] - self.grad[t]);
        }
        self.taken += 1;
        true
    }
}

/// How far a variable at `a` moving by `d` per unit may go within [lo, hi].
#[inline]
fn room(a: f64, d: f64, lo: f64, hi: f64) -> f64 {
    if d > 0.0 {
        (hi - a) / d
    } else if d < 0.0 {
        (a - lo) / -d
    } else {
        f64::INFINITY
    }
}
