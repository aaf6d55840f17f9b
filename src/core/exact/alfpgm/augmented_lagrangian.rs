//! The paper's subproblem solver (`InnerSolver::Fista`, steps 3-6 of the module doc): the
//! augmented Lagrangian for y_B^T d = 0, FISTA on the box for each of its rounds, the exact
//! feasibility repair, and the progress guard's line search.

use super::params::AlfpgmParams;
use super::subproblem::{Decrease, Extremes, Subproblem};

/// One AL subproblem as FISTA sees it: the multiplier lambda, the penalty k, the Lipschitz
/// constant L of the gradient and the stopping tolerance eps_in.
struct AlRound {
    lambda: f64,
    k: f64,
    lipschitz: f64,
    eps_in: f64,
}

impl Subproblem {
    /// d by the augmented Lagrangian (`lambda` warm-started and kept), repaired to y^T d = 0;
    /// returns phi(d) and the FISTA iterations.
    pub(super) fn solve_by_al(
        &mut self,
        params: &AlfpgmParams,
        eps_in: f64,
        extremes: Extremes,
        lambda: &mut f64,
    ) -> Decrease {
        let m = self.size;
        let lam_max = self.lambda_max(params.power_iters);
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
        let Extremes { up_max, low_min } = extremes;
        let (lam_lo, lam_hi) = if up_max.is_finite() && low_min.is_finite() && low_min <= up_max {
            let w = up_max - low_min;
            (-up_max - w, -low_min + w)
        } else {
            (f64::NEG_INFINITY, f64::INFINITY)
        };
        *lambda = lambda.clamp(lam_lo, lam_hi);
        // d starts at 0 (feasible); each AL round warm-starts FISTA from the last d.
        for _ in 0..params.al_max_iter {
            let round = AlRound {
                lambda: *lambda,
                k,
                lipschitz: lip,
                eps_in,
            };
            fista_iters += self.fista(&round, params);
            let r: f64 = self.y_b.iter().zip(self.d.iter()).map(|(y, x)| y * x).sum();
            *lambda = (*lambda - k * r).clamp(lam_lo, lam_hi);
            if k * r.abs() <= eps_in {
                break;
            }
        }
        repair(&mut self.d, &self.y_b, &self.lower, &self.upper);
        Decrease {
            phi: self.guarded_phi(),
            steps: fista_iters,
        }
    }

    /// lambda_max(Q_BB) by power iterations from the uniform vector (Q_BB is PSD).
    fn lambda_max(&mut self, power_iters: usize) -> f64 {
        let (m, q, v, w) = (self.size, &self.q_bb, &mut self.power_v, &mut self.q_times);
        let mut vnorm = 1.0 / (m as f64).sqrt();
        v.fill(vnorm);
        let mut lam_max = 1.0;
        for _ in 0..power_iters {
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
        lam_max.max(vnorm).max(1e-12)
    }

    /// FISTA on L_k(., lambda) over the box [l, u], from d; returns its iterations.
    fn fista(&mut self, round: &AlRound, params: &AlfpgmParams) -> u64 {
        let Subproblem {
            size: m,
            q_bb: q,
            grad_b: g,
            y_b: yb,
            lower: lo,
            upper: hi,
            d,
            fista_z: z,
            fista_prev: prev,
            fista_qz: grad,
            ..
        } = self;
        let m = *m;
        let &AlRound {
            lambda,
            k,
            lipschitz: lip,
            eps_in,
        } = round;
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

    /// phi(d) = 1/2 d^T Q d + g^T d, after the progress guard: where an inexact solve
    /// overshot along a descent direction (phi >= 0 > g^T d), d shrinks to the exact line
    /// search's t = -g^T d / d^T Q d (< 1/2 here) on the segment [0, d], which stays feasible.
    fn guarded_phi(&mut self) -> f64 {
        let (m, d, w) = (self.size, &mut self.d, &mut self.q_times);
        matvec(&self.q_bb, d, w, m);
        let dqd: f64 = d.iter().zip(w.iter()).map(|(x, qx)| x * qx).sum();
        let gd: f64 = d.iter().zip(self.grad_b.iter()).map(|(x, gi)| x * gi).sum();
        let mut phi = 0.5 * dqd + gd;
        if phi >= 0.0 && gd < 0.0 && dqd > 0.0 {
            let t = -gd / dqd;
            for x in d.iter_mut() {
                *x *= t;
            }
            phi = -0.5 * gd * gd / dqd;
        }
        phi
    }
}

#[inline]
fn matvec(q: &[f64], x: &[f64], out: &mut [f64], m: usize) {
    for (a, o) in out.iter_mut().enumerate() {
        *o = crate::core::simd::dot(&q[a * m..(a + 1) * m], x);
    }
}

/// Makes d feasible for y^T d = 0 within the box, moving as little as it can: the residual goes
/// onto the free entries (lo < d_i < hi), d_i <- clip(d_i - mu y_i) for those only, with mu
/// the root of the non-increasing h(mu) found by bisection. Entries on a bound stay there, so
/// the step leaves the variables it drove to 0 or C exactly at 0 or C (a projection of every
/// entry would lift them off by mu and leave many tiny non-zero alphas behind). Only if the
/// free entries cannot absorb the residual is every entry projected. What rounding leaves
/// goes onto one free variable that has room for it.
pub(super) fn repair(d: &mut [f64], yb: &[f64], lo: &[f64], hi: &[f64]) {
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
