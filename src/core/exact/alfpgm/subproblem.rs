//! The subproblem on B in the d-form (d = a_B - a_B^k): min 1/2 d^T Q_BB d + G_B^T d s.t.
//! y_B^T d = 0, l <= d <= u, built from the cached kernel rows of B (`Subproblem::build`) and
//! solved by SMO on Q_BB (`solve_by_smo`, `local_smo.rs`) or by the paper's augmented
//! Lagrangian with FISTA (`augmented_lagrangian.rs`).

use crate::core::exact::dual::DualState;
use crate::core::kernels::kernel_cache::CachedRows;
use crate::core::simd;
use crate::core::simd::RowValue;

use super::local_smo::{local_smo, LocalSmoInput, LocalSmoOutput, LocalSmoScratch};
use super::selection::WorkingSet;
use super::variable;

/// The subproblem's data and its solvers' scratch, rebuilt for each working set in buffers
/// allocated once for the run (|B| <= 2p).
pub(super) struct Subproblem {
    /// |B|.
    pub(super) size: usize,
    /// Q_BB by rows, the labels folded in: Q_ab = y_a y_b K_ab.
    pub(super) q_bb: Vec<f64>,
    /// G_B (paired: a_t*'s gradient is -F_t).
    pub(super) grad_b: Vec<f64>,
    /// y_B.
    pub(super) y_b: Vec<f64>,
    /// l = lower - a_B and u = C - a_B: the box of d.
    pub(super) lower: Vec<f64>,
    pub(super) upper: Vec<f64>,
    /// d: the step, the solvers' result.
    pub(super) d: Vec<f64>,
    /// With a tube: a_B at d = 0 (where the subproblem's kinks sit); empty otherwise.
    pub(super) alpha_b: Vec<f64>,
    /// The subproblem's SMO: its gradient g + Q_BB d, its violations and its scratch.
    pub(super) smo_grad: Vec<f64>,
    pub(super) smo_viol: Vec<f64>,
    pub(super) smo: LocalSmoScratch,
    /// FISTA: the extrapolated point z ...
    pub(super) fista_z: Vec<f64>,
    /// ... the previous iterate d^{j-1} ...
    pub(super) fista_prev: Vec<f64>,
    /// ... and Q_BB z.
    pub(super) fista_qz: Vec<f64>,
    /// The power method's vector v, and Q_BB v (then Q_BB d for phi(d)).
    pub(super) power_v: Vec<f64>,
    pub(super) q_times: Vec<f64>,
}

/// What a subproblem's solution gives: phi(d) (negative: f decreases) and the inner solver's
/// steps (SMO steps or FISTA iterations).
#[derive(Clone, Copy)]
pub(super) struct Decrease {
    pub(super) phi: f64,
    pub(super) steps: u64,
}

/// The extreme violations over B: m_B (the largest up value) and M_B (the smallest low value).
#[derive(Clone, Copy)]
pub(super) struct Extremes {
    pub(super) up_max: f64,
    pub(super) low_min: f64,
}

impl Subproblem {
    pub(super) fn new(p: usize) -> Self {
        let m = 2 * p;
        let buf = || Vec::with_capacity(m);
        Subproblem {
            size: 0,
            q_bb: Vec::with_capacity(m * m),
            grad_b: buf(),
            y_b: buf(),
            lower: buf(),
            upper: buf(),
            d: buf(),
            alpha_b: buf(),
            smo_grad: buf(),
            smo_viol: buf(),
            smo: LocalSmoScratch::default(),
            fista_z: buf(),
            fista_prev: buf(),
            fista_qz: buf(),
            power_v: buf(),
            q_times: buf(),
        }
    }

    /// Q_BB, G_B, y_B and the box of d from the state and the rows of B (in the order of
    /// `set.members`); d = 0. Returns B's m_B and M_B.
    pub(super) fn build<T: RowValue>(
        &mut self,
        rows: &CachedRows<'_, T>,
        state: &DualState,
        set: &WorkingSet,
    ) -> Extremes {
        let m = set.members.len();
        self.size = m;
        for buf in [
            &mut self.grad_b,
            &mut self.y_b,
            &mut self.lower,
            &mut self.upper,
            &mut self.d,
            &mut self.smo_grad,
            &mut self.smo_viol,
            &mut self.fista_z,
            &mut self.fista_prev,
            &mut self.fista_qz,
            &mut self.power_v,
            &mut self.q_times,
        ] {
            buf.clear();
            buf.resize(m, 0.0);
        }
        self.q_bb.clear();
        self.q_bb.resize(m * m, 0.0);
        let (mut up_max, mut low_min) = (f64::NEG_INFINITY, f64::INFINITY);
        let b = &set.members;
        for (a, (&ia, &label)) in b.iter().zip(set.member_labels.iter()).enumerate() {
            let (alpha, ya) = variable(state, ia, label);
            self.y_b[a] = ya;
            // Paired: a_t*'s gradient is -F_t.
            self.grad_b[a] = if state.paired {
                ya * state.grad[ia]
            } else {
                state.grad[ia]
            };
            self.lower[a] = state.lower(ia) - alpha;
            self.upper[a] = state.upper[ia] - alpha;
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
        let (q, yb) = (&mut self.q_bb, &self.y_b);
        for (a, &ia) in b.iter().enumerate() {
            let row = rows.row(a);
            for (bb, &ib) in b.iter().enumerate() {
                q[a * m + bb] = yb[a] * yb[bb] * row[ib].widen();
            }
            q[a * m + a] = state.diag[ia];
        }
        Extremes { up_max, low_min }
    }

    /// The subproblem by SMO to `eps_in` (at most `max_steps` steps): d and phi(d).
    pub(super) fn solve_by_smo(
        &mut self,
        state: &DualState,
        members: &[usize],
        eps_in: f64,
        max_steps: u64,
    ) -> Decrease {
        let Subproblem {
            size: m,
            q_bb,
            grad_b,
            y_b,
            lower,
            upper,
            d,
            alpha_b,
            smo_grad,
            smo_viol,
            smo,
            ..
        } = self;
        alpha_b.clear();
        if state.signed {
            alpha_b.extend(members.iter().map(|&t| state.alpha[t]));
        }
        let sub = LocalSmoInput {
            q: q_bb,
            g: grad_b,
            y: y_b,
            lo: lower,
            hi: upper,
            m: *m,
            eps: eps_in,
            per_label: state.sum_per_label,
            max_steps,
            tube: state.signed.then_some((&alpha_b[..], state.tube)),
        };
        let mut out = LocalSmoOutput {
            d,
            gl: smo_grad,
            viol: smo_viol,
            scratch: smo,
        };
        let steps = local_smo(simd::level(), sub, &mut out);
        // phi(d) = 1/2 d^T Q d + g^T d = sum d (g + G_local) / 2, G_local = g + Q d; with a
        // tube plus its change of epsilon |a_B + d|_1.
        let quadratic: f64 = d
            .iter()
            .zip(grad_b.iter().zip(smo_grad.iter()))
            .map(|(x, (g0, g1))| 0.5 * x * (g0 + g1))
            .sum();
        let kinks: f64 = alpha_b
            .iter()
            .zip(d.iter())
            .map(|(a, x)| (a + x).abs() - a.abs())
            .sum();
        Decrease {
            phi: quadratic + state.tube * kinks,
            steps,
        }
    }
}
