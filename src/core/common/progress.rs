//! Where a training run is and how its caller may stop it: [`Progress`], the [`Monitor`] every
//! solver reports to (Ctrl-C and verbose output come through it) and the [`Heartbeat`] that
//! paces the reports. Used by every solver; uses only the error type.

use std::time::{Duration, Instant};

use crate::core::common::error::Result;

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
    /// The polish: the rows this solve runs on (a fifth of them, or less, while it solves a
    /// subsample to start from).
    pub rows: usize,
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

/// A monitor that never stops anything (Rust callers, tests, benches).
pub fn no_monitor(_: &Progress) -> Result<()> {
    Ok(())
}
