//! One output's state in a solve (its point, values, direction and Newton sums) and the rule
//! that ends its iterations.

use crate::core::budgeted::problem::Term;

use super::newton::ActiveSums;

/// One output's Newton state.
pub(super) struct Output {
    pub(super) beta: Vec<f64>,
    pub(super) b: f64,
    /// f_i = k_i . beta + b, and the change along the current direction.
    pub(super) f: Vec<f64>,
    pub(super) delta: Vec<f64>,
    /// The term each row is counted with in `sums`.
    pub(super) counted: Vec<Term>,
    pub(super) sums: ActiveSums,
    /// The direction.
    pub(super) d: Vec<f64>,
    pub(super) db: f64,
    pub(super) objective: f64,
    pub(super) done: bool,
    /// The last step was a full one.
    pub(super) full_step: bool,
    /// How much the last step lowered the objective (0 before the first).
    pub(super) decrease_before: f64,
    /// The Newton system's ridge over `RIDGE` (`RIDGE_RAISED` once a direction did not
    /// descend).
    pub(super) ridge_scale: f64,
}

impl Output {
    /// The state at (beta, b) on n rows before the first pass: f, the direction and the
    /// counted terms zero, no step taken.
    pub(super) fn at(beta: Vec<f64>, b: f64, n: usize) -> Self {
        let m = beta.len();
        Output {
            beta,
            b,
            f: vec![0.0; n],
            delta: vec![0.0; n],
            counted: vec![Term::Zero; n],
            sums: ActiveSums::new(m),
            d: vec![0.0; m],
            db: 0.0,
            objective: 0.0,
            done: false,
            full_step: false,
            decrease_before: 0.0,
            ridge_scale: 1.0,
        }
    }
}

/// Whether a step that lowered the objective by `decrease` (the step before by
/// `decrease_before`, 0 if none) ends the solve at the tolerance `enough` (absolute). After a
/// full Newton step the decreases contract at a steady rate (linear at the directions'
/// residual, quadratic once exact), so decrease^2 / decrease_before estimates the next one and
/// the iteration that would only confirm it is skipped (200,000 hard10d rows, B = 3,000: the
/// subsample's solve 8 -> 7 iterations, the last 31 Hessian products for nothing).
pub(super) fn stops_after(
    decrease: f64,
    decrease_before: f64,
    full_step: bool,
    enough: f64,
) -> bool {
    decrease <= enough
        || (full_step
            && decrease < decrease_before
            && decrease * (decrease / decrease_before) <= enough)
}
