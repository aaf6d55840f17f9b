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

/// Checks one batch of training rows against the run it feeds.
pub(crate) fn check_batch<R: Rows>(x: &R, y: &[u32], n_classes: usize, dim: usize) -> Result<()> {
    let n = x.n_rows();
    if y.len() != n {
        return Err(SvmError::invalid_input(format!(
            "X has {n} rows but y has {} labels",
            y.len()
        )));
    }
    if x.n_cols() != dim {
        return Err(SvmError::invalid_input(format!(
            "X has {} features, but the model was started with {dim}",
            x.n_cols()
        )));
    }
    if let Some(bad) = y.iter().find(|&&c| c as usize >= n_classes) {
        return Err(SvmError::invalid_input(format!(
            "class index {bad} out of range for {n_classes} classes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod layout_tests;
