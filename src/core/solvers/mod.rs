//! Solvers. Each states its objective in its module doc and reports through [`Progress`].

pub mod alfpgm;
pub mod bsca;
pub mod bsgd;
pub mod kernel_svc;
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
