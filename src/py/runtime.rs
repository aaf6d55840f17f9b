//! How the binding runs core work: with the GIL released, Ctrl-C honoured, progress reported to
//! Python callbacks, and core errors and panics turned into exceptions; and the process-wide
//! thread settings.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use super::convert::{dict, model_arrays, slice1, Features};
use super::error::no_panic;
use crate::core::budgeted::observer::{EpochObserver, EpochSnapshot};
use crate::core::common::error::SvmError;
use crate::core::common::parallel;
use crate::core::common::progress::{Monitor, Progress};
use crate::core::data::rows::AnyRows;
use crate::core::simd;

/// Calls back into Python from detached training, on whichever thread the solver runs: stops
/// at the next heartbeat once the calling thread has seen Ctrl-C (`cancel`), and reports each
/// finished epoch to the optional callback (with `pair`, the index of its run, where several
/// run at once: `fit_pairs`). An error raised by the callback stops training and is re-raised
/// as it was.
pub(super) struct PythonMonitor<'a> {
    callback: Option<Py<PyAny>>,
    error: Option<PyErr>,
    cancel: &'a AtomicBool,
    pair: Option<usize>,
}

impl<'a> PythonMonitor<'a> {
    /// A monitor of run `pair` of several (`fit_pairs`), with its own reference to `callback`.
    pub(super) fn for_pair(
        py: Python<'_>,
        callback: Option<&Py<PyAny>>,
        cancel: &'a AtomicBool,
        pair: usize,
    ) -> Self {
        PythonMonitor {
            callback: callback.map(|c| c.clone_ref(py)),
            error: None,
            cancel,
            pair: Some(pair),
        }
    }

    /// The callback's error, if it raised one.
    pub(super) fn take_error(&mut self) -> Option<PyErr> {
        self.error.take()
    }

    pub(super) fn check(&mut self, p: &Progress) -> Result<(), SvmError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(SvmError::Interrupted);
        }
        if self.callback.is_none() || !p.epoch_done {
            return Ok(());
        }
        let result = Python::attach(|py| -> PyResult<()> {
            if let Some(cb) = &self.callback {
                if p.epoch_done {
                    let info = dict!(PyDict::new(py), {
                        "epoch" => p.epoch,
                        "epochs" => p.epochs,
                        "iteration" => p.iteration,
                        "n_sv" => p.n_sv,
                        "maintenance_events" => p.maintenance_events,
                        "seconds" => p.seconds,
                    })?;
                    if let Some(gap) = p.gap {
                        info.set_item("gap", gap)?;
                    }
                    if p.polish {
                        info.set_item("polish", true)?;
                        info.set_item("rows", p.rows)?;
                    }
                    if let Some(objective) = p.objective {
                        info.set_item("objective", objective)?;
                    }
                    if let Some(pair) = self.pair {
                        info.set_item("pair", pair)?;
                    }
                    cb.call1(py, (info,))?;
                }
            }
            Ok(())
        });
        result.map_err(|e| {
            self.error = Some(e);
            SvmError::Interrupted
        })
    }

    fn finish<T>(self, r: Result<T, PyErr>) -> PyResult<T> {
        match (r, self.error) {
            (Err(_), Some(e)) => Err(e),
            (r, _) => r,
        }
    }
}

/// Calls the Python epoch observer with the state after an epoch; a Python error stops training
/// and is re-raised as it was.
struct PythonObserver {
    callback: Py<PyAny>,
    error: Option<PyErr>,
}

impl PythonObserver {
    fn observe(&mut self, s: &EpochSnapshot<'_>) -> Result<(), SvmError> {
        let result = Python::attach(|py| -> PyResult<()> {
            let (sv, coef) = model_arrays(py, &s.model)?;
            let arrays = |vectors: &[&[f64]]| -> Vec<_> {
                vectors
                    .iter()
                    .map(|a| PyArray1::from_slice(py, a))
                    .collect()
            };
            let info = dict!(PyDict::new(py), {
                "epoch" => s.epoch,
                "seconds" => s.seconds,
                "maintenance_fraction" => s.maintenance_fraction,
                "support_vectors" => sv,
                "coef" => coef,
                "alphas" => arrays(&s.alphas),
                "labels" => arrays(&s.labels),
            })?;
            self.callback.call1(py, (info,))?;
            Ok(())
        });
        result.map_err(|e| {
            self.error = Some(e);
            SvmError::Interrupted
        })
    }
}

/// Runs `work` with the GIL released, a core error or a panic turned into an exception: for
/// work too short to need Ctrl-C checks.
pub fn detached<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> Result<T, SvmError> + Send,
) -> PyResult<T> {
    py.detach(|| no_panic(work))
}

/// Runs `work` on a thread of its own with the GIL released while the calling thread waits and
/// looks for Ctrl-C every 50 ms (Python delivers signals to the main thread only, and the solver
/// may be running on pool threads). On Ctrl-C `cancel` is set, which every solver's heartbeat
/// reads, and the KeyboardInterrupt is returned once the work has stopped.
pub fn run_interruptibly<T: Send>(
    py: Python<'_>,
    cancel: &AtomicBool,
    work: impl FnOnce() -> PyResult<T> + Send,
) -> PyResult<T> {
    let mut signal: Option<PyErr> = None;
    let result = py.detach(|| {
        std::thread::scope(|scope| {
            let (done, finished) = std::sync::mpsc::channel::<()>();
            let worker = scope.spawn(move || {
                let r = work();
                drop(done);
                r
            });
            while let Err(RecvTimeoutError::Timeout) =
                finished.recv_timeout(Duration::from_millis(50))
            {
                if signal.is_none() {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        signal = Some(e);
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
            }
            worker.join().unwrap_or_else(|_| {
                Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "internal error in budgetsvm (please report it): worker thread failed",
                ))
            })
        })
    });
    match signal {
        Some(e) => Err(e),
        None => result,
    }
}

/// Runs `work` interruptibly (`run_interruptibly`), giving it a check to call between its
/// blocks that fails once Ctrl-C has been seen: for work with no monitor of its own (the
/// polish's factorisations, which the dask driver calls one at a time).
pub fn run_checked<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(&mut dyn FnMut() -> Result<(), SvmError>) -> Result<T, SvmError> + Send,
) -> PyResult<T> {
    let cancel = AtomicBool::new(false);
    run_interruptibly(py, &cancel, || {
        no_panic(|| {
            work(&mut || {
                if cancel.load(Ordering::Relaxed) {
                    Err(SvmError::Interrupted)
                } else {
                    Ok(())
                }
            })
        })
    })
}

/// Runs a solver interruptibly (`run_interruptibly`), its heartbeat calling the optional
/// progress `callback` and its epochs the optional `observer`; an error raised by either is
/// re-raised as it was.
pub fn run_monitored<T: Send>(
    py: Python<'_>,
    callback: Option<Py<PyAny>>,
    observer: Option<Py<PyAny>>,
    solve: impl for<'h> FnOnce(Monitor<'h>, Option<EpochObserver<'h>>) -> Result<T, SvmError> + Send,
) -> PyResult<T> {
    let cancel = AtomicBool::new(false);
    let mut monitor = PythonMonitor {
        callback,
        error: None,
        cancel: &cancel,
        pair: None,
    };
    let mut observer = observer.map(|callback| PythonObserver {
        callback,
        error: None,
    });
    let result = run_interruptibly(py, &cancel, || {
        no_panic(|| {
            let mut m = |p: &Progress| monitor.check(p);
            let mut obs_fn;
            let obs: Option<EpochObserver<'_>> = match observer.as_mut() {
                Some(o) => {
                    obs_fn = |s: &EpochSnapshot<'_>| o.observe(s);
                    Some(&mut obs_fn)
                }
                None => None,
            };
            solve(&mut m, obs)
        })
    });
    let observer_error = observer.and_then(|o| o.error);
    match (result, observer_error) {
        (Err(_), Some(e)) => Err(e),
        (r, _) => monitor.finish(r),
    }
}

/// What `run_on_rows` hands its solver: the rows and their weights, and the hooks into Python.
pub struct Job<'r, 'h> {
    pub rows: &'r AnyRows<'r>,
    pub weights: Option<&'r [f64]>,
    pub monitor: Monitor<'h>,
    pub observer: Option<EpochObserver<'h>>,
}

/// The arguments every training entry point takes, handled once: `x` (dense or CSR parts,
/// dense values checked finite) and `sample_weight` become core views, and the solver runs
/// monitored (`run_monitored`); returns what the solver returned.
pub fn run_on_rows<'py, T: Send>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    sample_weight: Option<&PyReadonlyArray1<'py, f64>>,
    callback: Option<Py<PyAny>>,
    observer: Option<Py<PyAny>>,
    solve: impl FnOnce(Job<'_, '_>) -> Result<T, SvmError> + Send,
) -> PyResult<T> {
    let weights = sample_weight.map(slice1).transpose()?;
    let features = Features::extract(x)?;
    let rows = features.finite_rows()?;
    run_monitored(py, callback, observer, |monitor, observer| {
        solve(Job {
            rows: &rows,
            weights,
            monitor,
            observer,
        })
    })
}

/// Sets the number of threads of parallel work for estimators whose ``n_jobs`` is None.
///
/// Without a call (or after ``set_num_threads(0)``) the count follows the environment, read at
/// every fit: ``RAYON_NUM_THREADS``, else ``OMP_NUM_THREADS`` (as Dask's workers and joblib's
/// processes set it), else one thread per core; threadpoolctl's ``threadpool_limits`` limits
/// it as it limits BLAS and OpenMP. An estimator's ``n_jobs`` overrides all of these.
///
/// Parameters
/// ----------
/// n : int
///     Threads; 0 means the default above.
#[pyfunction]
pub fn set_num_threads(n: usize) -> PyResult<()> {
    Ok(parallel::set_num_threads(n)?)
}

/// The number of threads of parallel work for estimators whose ``n_jobs`` is None (see
/// ``set_num_threads``: the count set, else the environment's, else one per core).
///
/// Returns
/// -------
/// int
#[pyfunction]
pub fn get_num_threads() -> usize {
    parallel::num_threads()
}

/// The count last given to ``set_num_threads`` (0: the default, also before any call), so that
/// a temporary limit (threadpoolctl's) can be undone to the default rather than to its count.
///
/// Returns
/// -------
/// int
#[pyfunction]
pub fn requested_num_threads() -> usize {
    parallel::requested_threads()
}

/// The SIMD code path of the kernel loops on this CPU ("avx2+fma" or "portable").
#[pyfunction]
pub fn simd_level() -> &'static str {
    simd::simd_level()
}
