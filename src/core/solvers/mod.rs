//! Solvers. Each states its objective in its module doc and reports through [`Progress`].

pub mod alfpgm;
pub mod bsca;
pub mod bsgd;
pub mod kernel_svc;
pub mod polish;
pub mod shrinking;
pub mod smo;

use std::time::{Duration, Instant};

use crate::core::error::Result;

/// Where a training run is; passed to the caller's monitor, which may stop the run by returning
/// an error (the binding layer returns `Interrupted` on Ctrl-C).
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// 1-based epoch being run (or just finished when `epoch_done`).
    pub epoch: usize,
    pub epochs: usize,
    /// Steps done so far, over all epochs.
    pub iteration: u64,
    pub n_sv: usize,
    /// Budget maintenance events so far.
    pub maintenance_events: u64,
    pub seconds: f64,
    /// True once at the end of each epoch; false for the periodic heartbeats in between.
    /// (Exact solvers: true for the progress lines asked for with verbose output.)
    pub epoch_done: bool,
    /// Exact solvers: the KKT gap m(a) - M(a) when known.
    pub gap: Option<f64>,
    /// The polish: true for its iterations (`epoch` is then the Newton iteration, `iteration`
    /// the rows that entered or left the active sets so far).
    pub polish: bool,
    /// The objective, when known (the polish's).
    pub objective: Option<f64>,
}

/// A monitor callback: sees progress, may abort.
/// `Send` so that solvers which run sub-problems on several threads can share it (behind a lock).
pub type Monitor<'a> = &'a mut (dyn FnMut(&Progress) -> Result<()> + Send);

/// Calls the monitor about every `interval` of wall time, checking the clock only every 1024
/// steps so the hot loop does not pay for it.
pub(crate) struct Heartbeat {
    last: Instant,
    interval: Duration,
}

impl Heartbeat {
    pub(crate) fn new(interval: Duration) -> Self {
        Heartbeat {
            last: Instant::now(),
            interval,
        }
    }

    #[inline]
    pub(crate) fn due(&mut self, step: u64) -> bool {
        if step & 1023 != 0 {
            return false;
        }
        if self.last.elapsed() >= self.interval {
            self.last = Instant::now();
            true
        } else {
            false
        }
    }
}

use crate::core::model::BudgetModel;

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

/// A monitor that never stops anything (Rust callers, tests, benches).
pub fn no_monitor(_: &Progress) -> Result<()> {
    Ok(())
}

use crate::core::data::Rows;
use crate::core::error::SvmError;
use crate::core::kernel::check_gamma;

/// Parameter checks every budgeted solver shares.
pub(crate) fn check_run(gamma: f64, n_samples: usize, budget: usize, epochs: usize) -> Result<()> {
    check_gamma(gamma)?;
    if n_samples == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    if budget < 2 {
        return Err(SvmError::invalid_parameter(
            "budget",
            format!("must be at least 2, got {budget}"),
        ));
    }
    if epochs == 0 {
        return Err(SvmError::invalid_parameter("epochs", "must be at least 1"));
    }
    Ok(())
}

/// More classes than this is a corrupted count, not a data set (every class costs memory per
/// support vector).
pub const MAX_CLASSES: usize = 1 << 20;

/// A class count given by a caller: at least two, at most [`MAX_CLASSES`], and (when training
/// on rows) no more than the rows, since a class without rows would only cost memory.
pub(crate) fn check_classes(n_classes: usize, n_rows: Option<usize>) -> Result<()> {
    if n_classes < 2 {
        return Err(SvmError::invalid_input(
            "training needs at least two classes",
        ));
    }
    let limit = n_rows.map_or(MAX_CLASSES, |n| n.clamp(2, MAX_CLASSES));
    if n_classes > limit {
        return Err(SvmError::invalid_input(format!(
            "{n_classes} classes is more than the {limit} this training can have (one per row, \
             at most {MAX_CLASSES})"
        )));
    }
    Ok(())
}

pub(crate) fn check_positive_finite(name: &'static str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SvmError::invalid_parameter(
            name,
            format!("must be a positive finite number, got {value}"),
        ))
    }
}

/// Row weights (sample weight times class weight), when given: one per row, finite and
/// positive. Rows of weight 0 are for the caller to drop (they would only cost time).
pub fn check_weights(weights: Option<&[f64]>, n_rows: usize) -> Result<()> {
    let Some(w) = weights else { return Ok(()) };
    if w.len() != n_rows {
        return Err(SvmError::invalid_input(format!(
            "{} sample weights for {n_rows} rows",
            w.len()
        )));
    }
    if let Some(i) = w.iter().position(|&v| !(v.is_finite() && v > 0.0)) {
        return Err(SvmError::invalid_input(format!(
            "sample weight {} of row {i} is not a positive finite number (rows of weight 0 \
             must be left out)",
            w[i]
        )));
    }
    Ok(())
}

/// What a budgeted solver learns from, and so its loss: class indices (hinge losses) or real
/// targets (epsilon-insensitive losses). BSGD takes the loss itself, the polish its square:
/// every term of the polish is w (f - r)^2 while it is active and 0 otherwise, with r the
/// term's target value (`active_target`), so its Newton system, Gram updates and line search
/// are one code for both.
#[derive(Debug, Clone, Copy)]
pub enum Targets<'a> {
    /// Class indices: the squared hinge max(0, 1 - y f)^2 (y = +-1 per output: one output for
    /// two classes, one-vs-rest otherwise), active below the margin with r = y.
    Classes { y: &'a [u32], n_classes: usize },
    /// Real targets: the squared epsilon-insensitive loss max(0, |f - y| - epsilon)^2, active
    /// outside the tube with r = y - epsilon below it and y + epsilon above it.
    Values { y: &'a [f64], epsilon: f64 },
}

impl<'a> Targets<'a> {
    /// Class indices in `0..n_classes`.
    pub fn classes(y: &'a [u32], n_classes: usize) -> Self {
        Targets::Classes { y, n_classes }
    }

    pub fn len(&self) -> usize {
        match self {
            Targets::Classes { y, .. } => y.len(),
            Targets::Values { y, .. } => y.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn n_out(&self) -> usize {
        match *self {
            Targets::Classes { n_classes, .. } if n_classes > 2 => n_classes,
            _ => 1,
        }
    }

    /// The target value r of row i's active term for output k at f, None when none is active.
    #[inline]
    pub fn active_target(&self, k: usize, i: usize, f: f64) -> Option<f64> {
        match *self {
            Targets::Classes { y, n_classes } => {
                let positive = if n_classes == 2 {
                    y[i] == 1
                } else {
                    y[i] as usize == k
                };
                let r = if positive { 1.0 } else { -1.0 };
                (r * f < 1.0).then_some(r)
            }
            Targets::Values { y, epsilon } => {
                let yi = y[i];
                if f < yi - epsilon {
                    Some(yi - epsilon)
                } else if f > yi + epsilon {
                    Some(yi + epsilon)
                } else {
                    None
                }
            }
        }
    }

    /// What the targets are for, without the rows.
    pub fn task(&self) -> Task {
        match *self {
            Targets::Classes { n_classes, .. } => Task::Classes(n_classes),
            Targets::Values { epsilon, .. } => Task::Regression { epsilon },
        }
    }

    /// The targets fit `n` rows: as many, class indices in range, finite values, a valid epsilon.
    pub fn check(&self, n: usize) -> Result<()> {
        if self.len() != n {
            return Err(SvmError::invalid_input(format!(
                "X has {n} rows but y has {} targets",
                self.len()
            )));
        }
        match *self {
            Targets::Classes { y, n_classes } => {
                check_classes(n_classes, None)?;
                if let Some(bad) = y.iter().find(|&&c| c as usize >= n_classes) {
                    return Err(SvmError::invalid_input(format!(
                        "class index {bad} out of range for {n_classes} classes"
                    )));
                }
            }
            Targets::Values { y, epsilon } => {
                if !(epsilon.is_finite() && epsilon >= 0.0) {
                    return Err(SvmError::invalid_parameter(
                        "epsilon",
                        format!("must be a finite number >= 0, got {epsilon}"),
                    ));
                }
                if let Some(i) = y.iter().position(|v| !v.is_finite()) {
                    return Err(SvmError::invalid_input(format!(
                        "the target of row {i} is not finite ({})",
                        y[i]
                    )));
                }
            }
        }
        Ok(())
    }
}

/// What a run learns, without its rows: `n` classes, or regression with its tube.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Task {
    Classes(usize),
    Regression { epsilon: f64 },
}

impl Task {
    /// Outputs of a model: one for two classes and for regression, one per class otherwise.
    pub fn n_out(self) -> usize {
        match self {
            Task::Classes(n) if n > 2 => n,
            _ => 1,
        }
    }
}

/// A task given by a caller: a valid class count, or a finite epsilon >= 0.
pub(crate) fn check_task(task: Task) -> Result<()> {
    match task {
        Task::Classes(n) => check_classes(n, None),
        Task::Regression { epsilon } if !(epsilon.is_finite() && epsilon >= 0.0) => {
            Err(SvmError::invalid_parameter(
                "epsilon",
                format!("must be finite and >= 0, got {epsilon}"),
            ))
        }
        Task::Regression { .. } => Ok(()),
    }
}

/// A batch for a run of `task` on `dim` features: its targets are for that task and fit X.
pub(crate) fn check_targets<R: Rows>(x: &R, y: Targets<'_>, task: Task, dim: usize) -> Result<()> {
    if y.task() != task {
        return Err(SvmError::invalid_input(format!(
            "the targets are for {:?}, the run is for {task:?}",
            y.task()
        )));
    }
    y.check(x.n_rows())?;
    if x.n_cols() != dim {
        return Err(SvmError::invalid_input(format!(
            "X has {} features, but the model was started with {dim}",
            x.n_cols()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod layout_tests;
