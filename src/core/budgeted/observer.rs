//! What a budgeted solver shows its caller after each epoch (`record_history=True` in Python).

use crate::core::budget::model::BudgetModel;
use crate::core::common::error::Result;

/// The state after an epoch, handed to the observer (for objective and accuracy curves).
pub struct EpochSnapshot<'a> {
    pub epoch: usize,
    /// The combined model as it is now (one output for binary, one per class otherwise).
    pub model: BudgetModel,
    /// Dual variables per binary problem (one problem for two classes, K for one-vs-rest;
    /// none for primal solvers).
    pub alphas: Vec<&'a [f64]>,
    /// Labels (+1/-1) per binary problem.
    pub labels: Vec<&'a [f64]>,
    /// Training seconds so far (observer time excluded).
    pub seconds: f64,
    /// Fraction of this epoch's steps that triggered budget maintenance (over all problems).
    pub maintenance_fraction: f64,
}

/// An observer called after every epoch.
pub type EpochObserver<'a> = &'a mut dyn FnMut(&EpochSnapshot<'_>) -> Result<()>;
