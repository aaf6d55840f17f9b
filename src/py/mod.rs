//! The Python binding: the only module that knows about Python. Each function converts its
//! arguments to core views, releases the GIL around the work (`py.detach`), and converts back.

mod convert;
mod error;

use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyType};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::core::budget::maintenance::reduce_to_budget;
use crate::core::budget::maintenance::Maintenance;
use crate::core::budget::maintenance::MaintenanceStats;
use crate::core::budget::merge::{search_pair, MergeSearch, MergeTable, DEFAULT_TABLE_SIZE};
use crate::core::budget::model::{decision_of_expansion, BudgetModel, SvLayout};
use crate::core::budgeted::bsca::{train_bsca, BscaParams, DualStep};
use crate::core::budgeted::bsgd::{train_bsgd_state, BsgdParams, BsgdState};
use crate::core::budgeted::observer::{EpochObserver, EpochSnapshot};
use crate::core::budgeted::polish::{
    add_gram_factor, polish as polish_solve, ActiveSums, GramFactor, InMemory, LibsvmFileRows,
    PartitionRows, PolishParams, PolishResult,
};
use crate::core::budgeted::problem::{Targets, Task};
use crate::core::common::error::SvmError;
use crate::core::common::parallel;
use crate::core::common::progress::{Monitor, Progress};
use crate::core::data::libsvm::{summarize_libsvm_file, LibsvmChunks, LibsvmData};
use crate::core::data::rows::{check_finite, AnyRows, Rows};
use crate::core::data::sv_matrix::SvMatrix;
use crate::core::exact::alfpgm::{AlfpgmParams, InnerSolver};
use crate::core::exact::machines::{
    train_kernel_svc, train_kernel_svr, train_one_class, ExactModel, ExactParams, ExactSolver,
};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block;
use crate::core::kernels::kernel_block::KernelBlocks;
use crate::core::kernels::kernel_block::{decision_from_kernel_values, Outputs};
use crate::core::simd;
use convert::Features;
use error::no_panic;

/// Calls back into Python from detached training, on whichever thread the solver runs: stops
/// at the next heartbeat once the calling thread has seen Ctrl-C (`cancel`), and reports each
/// finished epoch to the optional callback. An error raised by the callback stops training and
/// is re-raised as it was.
struct PythonMonitor<'a> {
    callback: Option<Py<PyAny>>,
    error: Option<PyErr>,
    cancel: &'a AtomicBool,
}

impl PythonMonitor<'_> {
    fn check(&mut self, p: &Progress) -> Result<(), SvmError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(SvmError::Interrupted);
        }
        if self.callback.is_none() || !p.epoch_done {
            return Ok(());
        }
        let result = Python::attach(|py| -> PyResult<()> {
            if let Some(cb) = &self.callback {
                if p.epoch_done {
                    let info = PyDict::new(py);
                    info.set_item("epoch", p.epoch)?;
                    info.set_item("epochs", p.epochs)?;
                    info.set_item("iteration", p.iteration)?;
                    info.set_item("n_sv", p.n_sv)?;
                    info.set_item("maintenance_events", p.maintenance_events)?;
                    info.set_item("seconds", p.seconds)?;
                    if let Some(gap) = p.gap {
                        info.set_item("gap", gap)?;
                    }
                    if p.polish {
                        info.set_item("polish", true)?;
                    }
                    if let Some(objective) = p.objective {
                        info.set_item("objective", objective)?;
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

/// RBF kernel matrix exp(-gamma |x_i - y_j|^2) of two feature matrices (dense or CSR parts), on
/// `n_threads` threads (None: the process-wide setting, 0: one per core).
#[pyfunction]
#[pyo3(signature = (x, y, gamma, *, n_threads = None))]
fn rbf_kernel<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    gamma: f64,
    n_threads: Option<usize>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (fx, fy) = (Features::extract(x)?, Features::extract(y)?);
    let (xr, yr) = (fx.rows()?, fy.rows()?);
    let (n, m) = (xr.n_rows(), yr.n_rows());
    let out = py.detach(|| {
        no_panic(|| {
            let mut out = vec![0.0; n * m];
            parallel::install_with(n_threads, || {
                kernel_block::kernel_matrix(&xr, &yr, gamma, &mut out)
            })??;
            Ok(out)
        })
    })?;
    out.into_pyarray(py).reshape([n, m])
}

type ArrayPair<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>);

/// Optimal merge coefficient h and normalised weight degradation for arrays of (m, kappa).
#[pyfunction]
#[pyo3(signature = (m, kappa, method, table_size = None))]
fn merge_search<'py>(
    py: Python<'py>,
    m: PyReadonlyArray1<'py, f64>,
    kappa: PyReadonlyArray1<'py, f64>,
    method: &str,
    table_size: Option<usize>,
) -> PyResult<ArrayPair<'py>> {
    let table_size = table_size.unwrap_or(DEFAULT_TABLE_SIZE);
    let search = MergeSearch::parse(method)?;
    let (m, kappa) = (convert::slice1(&m)?, convert::slice1(&kappa)?);
    if m.len() != kappa.len() {
        return Err(PyValueError::new_err(format!(
            "m and kappa differ in length ({} vs {})",
            m.len(),
            kappa.len()
        )));
    }
    for (name, v) in [("m", m), ("kappa", kappa)] {
        if let Some(bad) = v.iter().find(|x| !(0.0..=1.0).contains(*x)) {
            return Err(PyValueError::new_err(format!(
                "{name} must lie in [0, 1], got {bad}"
            )));
        }
    }
    let (h, wd) = py.detach(|| {
        no_panic(|| {
            let built;
            let table = if table_size == DEFAULT_TABLE_SIZE {
                MergeTable::shared()
            } else {
                built = MergeTable::build(table_size)?;
                &built
            };
            let mut h = Vec::with_capacity(m.len());
            let mut wd = Vec::with_capacity(m.len());
            for (&mi, &ki) in m.iter().zip(kappa) {
                let choice = search_pair(search, table, mi, ki);
                let hi = if search == MergeSearch::LookupWd {
                    table.h(mi, ki)
                } else {
                    choice.h
                };
                h.push(hi);
                wd.push(choice.wd);
            }
            Ok((h, wd))
        })
    })?;
    Ok((h.into_pyarray(py), wd.into_pyarray(py)))
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
            let info = PyDict::new(py);
            info.set_item("epoch", s.epoch)?;
            info.set_item("seconds", s.seconds)?;
            info.set_item("maintenance_fraction", s.maintenance_fraction)?;
            let (sv, coef) = model_arrays(py, &s.model)?;
            info.set_item("support_vectors", sv)?;
            info.set_item("coef", coef)?;
            let alphas: Vec<_> = s
                .alphas
                .iter()
                .map(|a| PyArray1::from_slice(py, a))
                .collect();
            let labels: Vec<_> = s
                .labels
                .iter()
                .map(|a| PyArray1::from_slice(py, a))
                .collect();
            info.set_item("alphas", alphas)?;
            info.set_item("labels", labels)?;
            self.callback.call1(py, (info,))?;
            Ok(())
        });
        result.map_err(|e| {
            self.error = Some(e);
            SvmError::Interrupted
        })
    }
}

type ModelArrays<'py> = (Bound<'py, PyAny>, Bound<'py, PyArray2<f64>>);

/// The model's support vectors (a 2-D array, or CSR parts (data, indices, indptr, n_cols) with
/// int64 indices) and coefficients.
fn model_arrays<'py>(py: Python<'py>, model: &BudgetModel) -> PyResult<ModelArrays<'py>> {
    let n_sv = model.n_sv();
    let sv = match &model.support_vectors {
        SvMatrix::Dense(sv) => PyArray1::from_slice(py, sv)
            .reshape([n_sv, model.dim])?
            .into_any(),
        SvMatrix::Sparse {
            indptr,
            indices,
            values,
        } => {
            let to_i64 = |v: u64| {
                i64::try_from(v)
                    .map_err(|_| SvmError::invalid_input("column index does not fit in int64"))
            };
            let indices: Vec<i64> = indices
                .iter()
                .map(|&c| to_i64(c))
                .collect::<Result<_, _>>()?;
            let indptr: Vec<i64> = indptr
                .iter()
                .map(|&c| to_i64(c as u64))
                .collect::<Result<_, _>>()?;
            (
                PyArray1::from_slice(py, values),
                indices.into_pyarray(py),
                indptr.into_pyarray(py),
                model.dim,
            )
                .into_pyobject(py)?
                .into_any()
        }
    };
    Ok((
        sv,
        PyArray1::from_slice(py, &model.coef).reshape([n_sv, model.n_out])?,
    ))
}

/// Support vectors as the binding receives them (dense array or CSR parts), copied into the
/// model's form: (matrix, n_sv, n_features).
fn sv_matrix(sv: &Bound<'_, PyAny>) -> PyResult<(SvMatrix, usize, usize)> {
    let features = Features::extract(sv)?;
    let rows = features.rows()?;
    let (n_sv, dim) = (rows.n_rows(), rows.n_cols());
    let m = match &rows {
        AnyRows::Dense(d) => SvMatrix::Dense(d.data().to_vec()),
        _ => {
            let mut indptr = Vec::with_capacity(n_sv + 1);
            let mut indices = Vec::new();
            let mut values = Vec::new();
            indptr.push(0);
            for j in 0..n_sv {
                rows.for_each_nonzero(j, |c, v| {
                    indices.push(c as u64);
                    values.push(v);
                });
                indptr.push(indices.len());
            }
            SvMatrix::Sparse {
                indptr,
                indices,
                values,
            }
        }
    };
    Ok((m, n_sv, dim))
}

/// The result dict shared by the budgeted solvers.
fn fit_result<'py>(
    py: Python<'py>,
    model: &BudgetModel,
    iterations: u64,
    insertions: u64,
    maintenance: &MaintenanceStats,
    seconds: f64,
    epochs: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let (sv, coef) = model_arrays(py, model)?;
    out.set_item("support_vectors", sv)?;
    out.set_item("coef", coef)?;
    out.set_item("iterations", iterations)?;
    out.set_item("insertions", insertions)?;
    out.set_item("maintenance_events", maintenance.events)?;
    let frequency = if iterations == 0 {
        0.0
    } else {
        maintenance.events as f64 / iterations as f64
    };
    out.set_item("maintenance_frequency", frequency)?;
    out.set_item("maintenance_seconds", maintenance.seconds)?;
    out.set_item(
        "total_weight_degradation",
        maintenance.total_weight_degradation,
    )?;
    out.set_item("compared_merges", maintenance.compared)?;
    out.set_item("agreeing_merges", maintenance.agreed)?;
    out.set_item("seconds", seconds)?;
    out.set_item("epochs", epochs)?;
    Ok(out)
}

/// The support vector layout for `sv_storage` on these rows.
fn layout_for(sv_storage: &str, rows: &AnyRows<'_>) -> Result<SvLayout, SvmError> {
    SvLayout::choose(
        sv_storage,
        !matches!(rows, AnyRows::Dense(_)),
        rows.n_cols(),
    )
}

/// Runs `work` on a thread of its own with the GIL released while the calling thread waits and
/// looks for Ctrl-C every 50 ms (Python delivers signals to the main thread only, and the solver
/// may be running on pool threads). On Ctrl-C `cancel` is set, which every solver's heartbeat
/// reads, and the KeyboardInterrupt is returned once the work has stopped.
fn run_interruptibly<T: Send>(
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

/// Runs a solver on borrowed features with the GIL released, Ctrl-C checks and the optional
/// progress callback and epoch observer; returns what the solver returned.
fn run_solver<'py, T: Send>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    callback: Option<Py<PyAny>>,
    observer: Option<Py<PyAny>>,
    solve: impl FnOnce(&AnyRows<'_>, Monitor<'_>, Option<EpochObserver<'_>>) -> Result<T, SvmError>
        + Send,
) -> PyResult<T> {
    let features = Features::extract(x)?;
    let rows = features.rows()?;
    if let AnyRows::Dense(d) = &rows {
        check_finite(d.data(), "X")?;
    }
    let cancel = AtomicBool::new(false);
    let mut monitor = PythonMonitor {
        callback,
        error: None,
        cancel: &cancel,
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
            solve(&rows, &mut m, obs)
        })
    });
    let observer_error = observer.and_then(|o| o.error);
    match (result, observer_error) {
        (Err(_), Some(e)) => Err(e),
        (r, _) => monitor.finish(r),
    }
}

/// Targets from Python: class indices (uint32) with their count, or real values (float64) with
/// the regression's epsilon (given exactly when the task is regression).
enum TargetArray<'py> {
    Classes(PyReadonlyArray1<'py, u32>, usize),
    Values(PyReadonlyArray1<'py, f64>, f64),
}

impl<'py> TargetArray<'py> {
    fn extract(y: &Bound<'py, PyAny>, n_classes: usize, epsilon: Option<f64>) -> PyResult<Self> {
        Ok(match epsilon {
            None => TargetArray::Classes(y.extract()?, n_classes),
            Some(e) => TargetArray::Values(y.extract()?, e),
        })
    }

    fn targets(&self) -> PyResult<Targets<'_>> {
        Ok(match self {
            TargetArray::Classes(y, n_classes) => Targets::Classes {
                y: convert::slice1(y)?,
                n_classes: *n_classes,
            },
            TargetArray::Values(y, epsilon) => Targets::Values {
                y: convert::slice1(y)?,
                epsilon: *epsilon,
            },
        })
    }
}

/// Trains BSGD; returns a dict with the model arrays, the training statistics and the run's
/// state ("state", a `BsgdStream` that `partial_fit` continues). `y` holds class indices
/// (uint32), or real targets (float64) when `epsilon` is given (regression; n_classes 0).
#[pyfunction]
#[pyo3(signature = (x, y, n_classes, *, c, gamma, budget, epochs, maintenance, merge, seed, average = true, lambda_ = None, compare_with = None, callback = None, observer = None, shuffle = true, sv_storage = "auto", sample_weight = None, epsilon = None, average_placement = false))]
#[allow(clippy::too_many_arguments)]
fn fit_bsgd<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    n_classes: usize,
    c: f64,
    gamma: f64,
    budget: usize,
    epochs: usize,
    maintenance: &str,
    merge: &str,
    seed: u64,
    average: bool,
    lambda_: Option<f64>,
    compare_with: Option<&str>,
    callback: Option<Py<PyAny>>,
    observer: Option<Py<PyAny>>,
    shuffle: bool,
    sv_storage: &str,
    sample_weight: Option<PyReadonlyArray1<'py, f64>>,
    epsilon: Option<f64>,
    average_placement: bool,
) -> PyResult<Bound<'py, PyDict>> {
    SvLayout::choose(sv_storage, false, 0)?;
    let mut params = BsgdParams {
        c,
        lambda: lambda_,
        gamma,
        budget,
        epochs,
        maintenance: Maintenance::parse(maintenance, merge)?,
        seed,
        average,
        average_placement,
        compare_with: compare_with.map(MergeSearch::parse).transpose()?,
        shuffle,
        layout: SvLayout::Dense,
    };
    let y = TargetArray::extract(y, n_classes, epsilon)?;
    let targets = y.targets()?;
    let weights = sample_weight.as_ref().map(convert::slice1).transpose()?;
    let state = run_solver(py, x, callback, observer, |rows, monitor, obs| {
        params.layout = layout_for(sv_storage, rows)?;
        let valid = params.check(rows.n_rows())?;
        train_bsgd_state(rows, targets, weights, &valid, monitor, obs)
    })?;
    let stream = BsgdStream { state };
    let out = stream.result(py)?;
    out.set_item("state", Py::new(py, stream)?)?;
    Ok(out)
}

/// Trains BSCA; returns a dict with the model arrays and the training statistics.
#[pyfunction]
#[pyo3(signature = (x, y, n_classes, *, c, gamma, budget, epochs, maintenance, merge, seed, compare_with = None, callback = None, observer = None, shuffle = true, dual_step = "decaying", average = false, sv_storage = "auto", sample_weight = None, epsilon = None, average_placement = false))]
#[allow(clippy::too_many_arguments)]
fn fit_bsca<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    n_classes: usize,
    c: f64,
    gamma: f64,
    budget: usize,
    epochs: usize,
    maintenance: &str,
    merge: &str,
    seed: u64,
    compare_with: Option<&str>,
    callback: Option<Py<PyAny>>,
    observer: Option<Py<PyAny>>,
    shuffle: bool,
    dual_step: &str,
    average: bool,
    sv_storage: &str,
    sample_weight: Option<PyReadonlyArray1<'py, f64>>,
    epsilon: Option<f64>,
    average_placement: bool,
) -> PyResult<Bound<'py, PyDict>> {
    SvLayout::choose(sv_storage, false, 0)?;
    let mut params = BscaParams {
        c,
        gamma,
        budget,
        epochs,
        maintenance: Maintenance::parse(maintenance, merge)?,
        seed,
        compare_with: compare_with.map(MergeSearch::parse).transpose()?,
        shuffle,
        step: DualStep::parse(dual_step)?,
        average,
        average_placement,
        layout: SvLayout::Dense,
    };
    let y = TargetArray::extract(y, n_classes, epsilon)?;
    let targets = y.targets()?;
    let weights = sample_weight.as_ref().map(convert::slice1).transpose()?;
    let (model, stats) = run_solver(py, x, callback, observer, |rows, monitor, obs| {
        params.layout = layout_for(sv_storage, rows)?;
        let valid = params.check(rows.n_rows())?;
        train_bsca(rows, targets, weights, &valid, monitor, obs)
    })?;
    let out = fit_result(
        py,
        &model,
        stats.iterations,
        stats.insertions,
        &stats.maintenance,
        stats.seconds,
        stats.epochs,
    )?;
    out.set_item("updates", stats.updates)?;
    out.set_item("dropped_svs", stats.dropped)?;
    Ok(out)
}

/// A BSGD run fed in batches (`BudgetSVC.partial_fit`, training from a file in chunks): the core
/// `BsgdState` behind a Python object, pickled as its versioned byte form.
#[pyclass(module = "budgetsvm._budgetsvm")]
struct BsgdStream {
    state: BsgdState,
}

#[pymethods]
impl BsgdStream {
    /// A fresh run. lambda = `lambda_` if given, else 1/(n_samples C); averaging (if on) starts
    /// where `fit_bsgd` with `epochs` epochs over n_samples rows starts it (the last epoch, or
    /// the second half of a single one). With `epsilon` a regression run (n_classes 0).
    #[new]
    #[pyo3(signature = (n_features, n_classes, *, c, gamma, budget, maintenance, merge, seed, n_samples, epochs = 1, average = true, lambda_ = None, shuffle = true, sv_storage = "auto", sparse_input = false, epsilon = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        n_features: usize,
        n_classes: usize,
        c: f64,
        gamma: f64,
        budget: usize,
        maintenance: &str,
        merge: &str,
        seed: u64,
        n_samples: usize,
        epochs: usize,
        average: bool,
        lambda_: Option<f64>,
        shuffle: bool,
        sv_storage: &str,
        sparse_input: bool,
        epsilon: Option<f64>,
    ) -> PyResult<Self> {
        let params = BsgdParams {
            c,
            lambda: lambda_,
            gamma,
            budget,
            epochs,
            maintenance: Maintenance::parse(maintenance, merge)?,
            seed,
            average,
            average_placement: false,
            compare_with: None,
            shuffle,
            layout: SvLayout::choose(sv_storage, sparse_input, n_features)?,
        };
        let valid = params.check(n_samples)?;
        let task = match epsilon {
            None => Task::Classes(n_classes),
            Some(epsilon) => Task::Regression { epsilon },
        };
        let state = BsgdState::new(
            &valid,
            n_features,
            task,
            BsgdState::suffix_start(n_samples, epochs),
        )?;
        Ok(BsgdStream { state })
    }

    /// One pass over a batch (dense array or CSR parts) with class indices y (uint32) or real
    /// targets (float64, a regression run) and optional row weights, GIL released.
    /// `average_placement`: while averaging, merges place merged points for the average (the
    /// model returned when nothing polishes it; `BsgdParams::average_placement`).
    #[pyo3(signature = (x, y, callback = None, sample_weight = None, average_placement = true))]
    fn partial_fit<'py>(
        &mut self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        y: &Bound<'py, PyAny>,
        callback: Option<Py<PyAny>>,
        sample_weight: Option<PyReadonlyArray1<'py, f64>>,
        average_placement: bool,
    ) -> PyResult<()> {
        self.state.set_average_placement(average_placement);
        let y = match self.state.task() {
            Task::Classes(n) => TargetArray::extract(y, n, None)?,
            Task::Regression { epsilon } => TargetArray::extract(y, 0, Some(epsilon))?,
        };
        let y = y.targets()?;
        let weights = sample_weight.as_ref().map(convert::slice1).transpose()?;
        let state = &mut self.state;
        run_solver(py, x, callback, None, |rows, monitor, _| {
            state.pass(rows, y, weights, 1, 1, monitor)
        })
    }

    /// An independent copy of the run (what a partial_fit call advances, so that an
    /// interrupted or failed call leaves the estimator's run as it was).
    fn copy(&self) -> Self {
        BsgdStream {
            state: self.state.clone(),
        }
    }

    /// The current model and statistics, in the dict `fit_bsgd` returns.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let model = self.state.model();
        let stats = self.state.stats();
        fit_result(
            py,
            &model,
            stats.iterations,
            stats.insertions,
            &stats.maintenance,
            stats.seconds,
            stats.epochs,
        )
    }

    #[getter]
    fn n_features(&self) -> usize {
        self.state.dim()
    }

    /// Classes of the run (0 for regression).
    #[getter]
    fn n_classes(&self) -> usize {
        match self.state.task() {
            Task::Classes(n) => n,
            Task::Regression { .. } => 0,
        }
    }

    /// Steps taken so far (the t of the learning rate 1/(lambda t)).
    #[getter]
    fn steps(&self) -> u64 {
        self.state.steps()
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.state.to_bytes())
    }

    #[classmethod]
    fn from_bytes(_cls: &Bound<'_, PyType>, data: &[u8]) -> PyResult<Self> {
        let state = no_panic(|| BsgdState::from_bytes(data))?;
        Ok(BsgdStream { state })
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let from_bytes = slf.get_type().getattr("from_bytes")?;
        let bytes = slf.borrow().to_bytes(slf.py());
        Ok((from_bytes, (bytes,)))
    }
}

/// Trains an exact kernel machine (ALFPGM or SMO on one dual problem): `problem` 'svc' (target:
/// uint32 class indices in 0..n_classes, one-vs-one pairs), 'svr' (target: float64 values) or
/// 'one_class' (no target). A precomputed kernel takes x as the dense n x n Gram matrix. Returns
/// one dict per problem solved (one per class pair for 'svc', with its "classes").
#[pyfunction]
#[pyo3(signature = (x, target, *, problem, n_classes = 0, c = 1.0, epsilon = 0.1, nu = 0.5, kernel = "rbf", gamma = 1.0, coef0 = 0.0, degree = 3, solver = "alfpgm", shrinking = true, shared_rows = true, tol = 1e-3, cache_size = 200.0, max_iter = 0, n_threads = None, n_pairs = 50, min_alpha_opt = 5, max_alpha_opt = 500, min_alpha_check = 0, pair_ratio = 0.5, alpha_delta_threshold = 1e-5, al_penalty = 0.0, al_max_iter = 20, fista_max_iter = 500, inner_tol_factor = 0.1, inner_rel = 0.1, power_iters = 8, lipschitz_safety = 1.1, restart = true, inner = "smo", report_every = None, callback = None, sample_weight = None))]
#[allow(clippy::too_many_arguments)]
fn fit_exact<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    target: Option<&Bound<'py, PyAny>>,
    problem: &str,
    n_classes: usize,
    c: f64,
    epsilon: f64,
    nu: f64,
    kernel: &str,
    gamma: f64,
    coef0: f64,
    degree: i64,
    solver: &str,
    shrinking: bool,
    shared_rows: bool,
    tol: f64,
    cache_size: f64,
    max_iter: u64,
    n_threads: Option<usize>,
    n_pairs: usize,
    min_alpha_opt: u32,
    max_alpha_opt: u32,
    min_alpha_check: usize,
    pair_ratio: f64,
    alpha_delta_threshold: f64,
    al_penalty: f64,
    al_max_iter: usize,
    fista_max_iter: usize,
    inner_tol_factor: f64,
    inner_rel: f64,
    power_iters: usize,
    lipschitz_safety: f64,
    restart: bool,
    inner: &str,
    report_every: Option<f64>,
    callback: Option<Py<PyAny>>,
    sample_weight: Option<PyReadonlyArray1<'py, f64>>,
) -> PyResult<Bound<'py, pyo3::types::PyList>> {
    if !(cache_size.is_finite() && cache_size > 0.0) {
        return Err(PyValueError::new_err(format!(
            "cache_size must be a positive number of MB, got {cache_size}"
        )));
    }
    let params = ExactParams {
        c,
        kernel: Kernel::parse(kernel, gamma, coef0, degree)?,
        tol,
        cache_bytes: (cache_size * 1024.0 * 1024.0).min(usize::MAX as f64 / 2.0) as usize,
        max_iter,
        solver: ExactSolver::parse(solver)?,
        shrinking,
        shared_rows,
        alfpgm: AlfpgmParams {
            n_pairs,
            min_alpha_opt,
            max_alpha_opt,
            min_alpha_check,
            pair_ratio,
            alpha_delta_threshold,
            al_penalty,
            al_max_iter,
            fista_max_iter,
            inner_tol_factor,
            inner_rel,
            power_iters,
            lipschitz_safety,
            restart,
            inner: InnerSolver::parse(inner)?,
        },
        report_every,
        n_threads,
    };
    let valid = params.check()?;
    let weights = sample_weight.as_ref().map(convert::slice1).transpose()?;
    let need_target = |what: &str| {
        target.ok_or_else(|| PyValueError::new_err(format!("problem {problem:?} needs {what}")))
    };
    let models: Vec<(Option<(u32, u32)>, ExactModel)> = match problem {
        "svc" => {
            let y: PyReadonlyArray1<'py, u32> = need_target("class indices")?.extract()?;
            let y = convert::slice1(&y)?;
            run_solver(py, x, callback, None, |rows, monitor, _| {
                train_kernel_svc(rows, y, weights, n_classes, &valid, monitor)
            })?
            .into_iter()
            .map(|p| (Some(p.classes), p.model))
            .collect()
        }
        "svr" => {
            let z: PyReadonlyArray1<'py, f64> = need_target("targets")?.extract()?;
            let z = convert::slice1(&z)?;
            let model = run_solver(py, x, callback, None, |rows, monitor, _| {
                train_kernel_svr(rows, z, weights, epsilon, &valid, monitor)
            })?;
            vec![(None, model)]
        }
        "one_class" => {
            let model = run_solver(py, x, callback, None, |rows, monitor, _| {
                train_one_class(rows, weights, nu, &valid, monitor)
            })?;
            vec![(None, model)]
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "problem must be 'svc', 'svr' or 'one_class', got {other:?}"
            )))
        }
    };
    let out = pyo3::types::PyList::empty(py);
    for (classes, p) in models {
        let d = PyDict::new(py);
        if let Some((a, b)) = classes {
            d.set_item("classes", (a, b))?;
        }
        let support: Vec<i64> = p.support.iter().map(|&i| i as i64).collect();
        d.set_item("support", support.into_pyarray(py))?;
        d.set_item("coef", p.coef.into_pyarray(py))?;
        d.set_item("rho", p.rho)?;
        d.set_item("objective", p.objective)?;
        d.set_item("iterations", p.iterations)?;
        d.set_item("converged", p.converged)?;
        d.set_item("gap", p.gap)?;
        d.set_item("fallback_steps", p.fallback_steps)?;
        d.set_item("inner_iterations", p.inner_iterations)?;
        d.set_item("cache_hits", p.cache.hits)?;
        d.set_item("cache_misses", p.cache.misses)?;
        d.set_item("kernel_seconds", p.cache.seconds)?;
        d.set_item("kernel_values", p.cache.values)?;
        d.set_item("min_active", p.min_active)?;
        d.set_item("seconds", p.seconds)?;
        d.set_item("n_rows", p.n_rows)?;
        out.append(d)?;
    }
    Ok(out)
}

/// Kernel rows K[i, :] for the given row indices, computed as the solvers compute them (one
/// parallel batch of the kernel-row cache, f32): (rows, seconds spent computing).
#[pyfunction]
fn kernel_rows<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    gamma: f64,
    rows: PyReadonlyArray1<'py, i64>,
) -> PyResult<(Bound<'py, PyArray2<f32>>, f64)> {
    let features = Features::extract(x)?;
    let xr = features.rows()?;
    let idx: Vec<usize> = convert::slice1(&rows)?
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| PyValueError::new_err("negative row index")))
        .collect::<PyResult<_>>()?;
    let n = xr.n_rows();
    let (out, seconds) = py.detach(|| {
        no_panic(|| {
            let bytes = idx.len().max(2) * n.max(1) * std::mem::size_of::<f32>();
            let mut cache = crate::core::kernels::kernel_cache::KernelRowCache::new(
                &xr,
                Kernel::rbf(gamma),
                bytes,
            )?;
            let got = cache.rows(&idx)?;
            let mut out = Vec::with_capacity(idx.len() * n);
            for k in 0..got.len() {
                out.extend_from_slice(got.row(k));
            }
            Ok((out, cache.stats().seconds))
        })
    })?;
    Ok((out.into_pyarray(py).reshape([idx.len(), n])?, seconds))
}

/// The outputs of a kernel expansion over `n_sv` vectors from Python's arrays: `coef` n_sv x
/// n_out, or with `class_counts` (the vectors grouped by class) (n_classes - 1) x n_sv
/// one-vs-one coefficients; returns the coefficients row-major and the class starts.
fn expansion_outputs(
    coef: &PyReadonlyArray2<'_, f64>,
    class_counts: Option<&PyReadonlyArray1<'_, i64>>,
    n_sv: usize,
) -> PyResult<(Vec<f64>, Option<Vec<usize>>)> {
    let coef_values: Vec<f64> = coef.as_array().iter().copied().collect();
    check_finite(&coef_values, "coefficients")?;
    let starts = match class_counts {
        None => {
            if coef.shape()[0] != n_sv {
                return Err(PyValueError::new_err(
                    "coef must have one row per support vector",
                ));
            }
            None
        }
        Some(counts) => {
            let mut starts = vec![0usize];
            for &c in convert::slice1(counts)? {
                let c = usize::try_from(c)
                    .map_err(|_| PyValueError::new_err("class_counts must be non-negative"))?;
                let last = *starts.last().unwrap_or(&0);
                starts.push(
                    last.checked_add(c)
                        .ok_or_else(|| PyValueError::new_err("class_counts overflow"))?,
                );
            }
            if starts.last() != Some(&n_sv) || starts.len() < 3 {
                return Err(PyValueError::new_err(
                    "class_counts must give at least two classes and add up to the support vectors",
                ));
            }
            if coef.shape()[0] != starts.len() - 2 || coef.shape()[1] != n_sv {
                return Err(PyValueError::new_err(
                    "one-vs-one coef must be (n_classes - 1) x n_support_vectors",
                ));
            }
            Some(starts)
        }
    };
    Ok((coef_values, starts))
}

fn outputs_of<'a>(coef: &'a [f64], starts: &'a Option<Vec<usize>>, n_cols: usize) -> Outputs<'a> {
    match starts {
        None => Outputs::PerVector {
            coef,
            n_out: n_cols,
        },
        Some(starts) => Outputs::OneVsOne { starts, coef },
    }
}

/// Decision values of a kernel expansion: (n_rows, n_out), on `n_threads` threads (None: the
/// process-wide setting, 0: one per core). `coef` is n_sv x n_out (one coefficient per output
/// and vector), or, with `class_counts` (the vectors grouped by class, LIBSVM's layout),
/// (n_classes - 1) x n_sv one-vs-one coefficients giving one output per class pair. `intercept`
/// (n_out) is added. The kernel is scikit-learn's (`kernel`, `gamma`, `coef0`, `degree`).
#[pyfunction]
#[pyo3(signature = (support_vectors, coef, gamma, x, *, n_threads = None, class_counts = None, intercept = None, kernel = "rbf", coef0 = 0.0, degree = 3))]
#[allow(clippy::too_many_arguments)]
fn decision_function<'py>(
    py: Python<'py>,
    support_vectors: &Bound<'py, PyAny>,
    coef: PyReadonlyArray2<'py, f64>,
    gamma: f64,
    x: &Bound<'py, PyAny>,
    n_threads: Option<usize>,
    class_counts: Option<PyReadonlyArray1<'py, i64>>,
    intercept: Option<PyReadonlyArray1<'py, f64>>,
    kernel: &str,
    coef0: f64,
    degree: i64,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let kernel = Kernel::parse(kernel, gamma, coef0, degree)?;
    let (support_vectors, n_sv, dim) = sv_matrix(support_vectors)?;
    let (coef_values, starts) = expansion_outputs(&coef, class_counts.as_ref(), n_sv)?;
    let outputs = outputs_of(&coef_values, &starts, coef.shape()[1]);
    let n_out = outputs.n_out();
    let intercept = intercept.as_ref().map(convert::slice1).transpose()?;
    if let Some(b) = intercept {
        check_finite(b, "intercept")?;
    }
    let features = Features::extract(x)?;
    let rows = features.rows()?;
    let n = rows.n_rows();
    let cancel = AtomicBool::new(false);
    let out = run_interruptibly(py, &cancel, || {
        no_panic(|| {
            let mut out = vec![0.0; n * n_out];
            parallel::install_with(n_threads, || {
                decision_of_expansion(
                    &support_vectors,
                    dim,
                    kernel,
                    &outputs,
                    intercept,
                    &rows,
                    &mut out,
                    &|| cancel.load(Ordering::Relaxed),
                )
            })??;
            Ok(out)
        })
    })?;
    out.into_pyarray(py).reshape([n, n_out])
}

/// Decision values of a kernel expansion from its kernel values (a precomputed kernel):
/// `kernel_values` n_rows x n_sv (k(x_r, s_j)), `coef` and `class_counts` as
/// `decision_function`'s; (n_rows, n_out).
#[pyfunction]
#[pyo3(signature = (kernel_values, coef, *, n_threads = None, class_counts = None, intercept = None))]
fn decision_from_kernel<'py>(
    py: Python<'py>,
    kernel_values: PyReadonlyArray2<'py, f64>,
    coef: PyReadonlyArray2<'py, f64>,
    n_threads: Option<usize>,
    class_counts: Option<PyReadonlyArray1<'py, i64>>,
    intercept: Option<PyReadonlyArray1<'py, f64>>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (n, n_sv) = (kernel_values.shape()[0], kernel_values.shape()[1]);
    let (coef_values, starts) = expansion_outputs(&coef, class_counts.as_ref(), n_sv)?;
    let outputs = outputs_of(&coef_values, &starts, coef.shape()[1]);
    let n_out = outputs.n_out();
    let intercept = intercept.as_ref().map(convert::slice1).transpose()?;
    if let Some(b) = intercept {
        check_finite(b, "intercept")?;
    }
    let k = kernel_values
        .as_slice()
        .map_err(|_| PyValueError::new_err("kernel values must be a C-contiguous float64 array"))?;
    check_finite(k, "the precomputed kernel")?;
    let out = py.detach(|| {
        no_panic(|| {
            let mut out = vec![0.0; n * n_out];
            parallel::install_with(n_threads, || {
                decision_from_kernel_values(&outputs, intercept, n_sv, k, &mut out)
            })??;
            Ok(out)
        })
    })?;
    out.into_pyarray(py).reshape([n, n_out])
}

/// The polish: the exact solve of a budgeted model's coefficients (and intercepts) over its
/// support vectors on the training rows `x` with class indices `y` (uint32, squared hinge), or
/// with real targets `y` (float64) and `epsilon` (squared epsilon-insensitive loss; n_classes is
/// then 0) (`solvers::polish`). Returns a dict: coef (n_sv, n_out), intercept (n_out),
/// objectives, iterations, statistics.
#[pyfunction]
#[pyo3(signature = (support_vectors, coef, gamma, x, y, n_classes, *, c, tol = 1e-6, max_iter = 50, cache_size = 1024.0, intercept = None, sample_weight = None, callback = None, epsilon = None))]
#[allow(clippy::too_many_arguments)]
fn polish<'py>(
    py: Python<'py>,
    support_vectors: &Bound<'py, PyAny>,
    coef: PyReadonlyArray2<'py, f64>,
    gamma: f64,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    n_classes: usize,
    c: f64,
    tol: f64,
    max_iter: usize,
    cache_size: f64,
    intercept: Option<PyReadonlyArray1<'py, f64>>,
    sample_weight: Option<PyReadonlyArray1<'py, f64>>,
    callback: Option<Py<PyAny>>,
    epsilon: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (model, params) =
        polish_inputs(support_vectors, coef, gamma, c, tol, max_iter, cache_size)?;
    let n_sv = model.n_sv();
    let y = TargetArray::extract(y, n_classes, epsilon)?;
    let targets = y.targets()?;
    let weights = sample_weight.as_ref().map(convert::slice1).transpose()?;
    let start = intercept.as_ref().map(convert::slice1).transpose()?;
    let r = run_solver(py, x, callback, None, |rows, monitor, _| {
        let mut source = InMemory(*rows);
        polish_solve(
            &model,
            start,
            &mut source,
            targets,
            weights,
            &params,
            monitor,
        )
    })?;
    polish_result(py, &r, n_sv, model.n_out)
}

/// The model and settings of a polish from the binding's arguments.
fn polish_inputs(
    support_vectors: &Bound<'_, PyAny>,
    coef: PyReadonlyArray2<'_, f64>,
    gamma: f64,
    c: f64,
    tol: f64,
    max_iter: usize,
    cache_size: f64,
) -> PyResult<(BudgetModel, PolishParams)> {
    if !(cache_size.is_finite() && cache_size >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "cache_size must be a number of MB >= 0, got {cache_size}"
        )));
    }
    let (support_vectors, n_sv, dim) = sv_matrix(support_vectors)?;
    if coef.shape()[0] != n_sv {
        return Err(PyValueError::new_err(
            "coef must have one row per support vector",
        ));
    }
    let model = BudgetModel {
        dim,
        n_out: coef.shape()[1],
        gamma,
        support_vectors,
        coef: coef.as_array().iter().copied().collect(),
    };
    let params = PolishParams {
        c,
        tol,
        max_iter,
        cache_bytes: (cache_size * 1024.0 * 1024.0).min(usize::MAX as f64 / 2.0) as usize,
    };
    Ok((model, params))
}

/// The polish's result as a dict.
fn polish_result<'py>(
    py: Python<'py>,
    r: &PolishResult,
    n_sv: usize,
    n_out: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item(
        "coef",
        PyArray1::from_slice(py, &r.coef).reshape([n_sv, n_out])?,
    )?;
    out.set_item("intercept", PyArray1::from_slice(py, &r.intercept))?;
    out.set_item(
        "objective_start",
        PyArray1::from_slice(py, &r.objective_start),
    )?;
    out.set_item("objective", PyArray1::from_slice(py, &r.objective))?;
    out.set_item("iterations", r.iterations)?;
    out.set_item("converged", r.converged)?;
    out.set_item("cached_rows", r.cached_rows)?;
    out.set_item("passes", r.passes)?;
    out.set_item("active_changes", r.active_changes)?;
    out.set_item("kernel_seconds", r.kernel_seconds)?;
    out.set_item("gram_seconds", r.gram_seconds)?;
    out.set_item("solve_seconds", r.solve_seconds)?;
    out.set_item("seconds", r.seconds)?;
    Ok(out)
}

/// The polish of a model trained on a LIBSVM file (`fit_file`): the file is read once for its
/// labels, then again in chunks of `chunk_rows` lines on every pass of the solve, never whole.
/// `classes` are the model's sorted labels; `class_weights` (one per class) weigh the rows.
#[pyfunction]
#[pyo3(signature = (path, chunk_rows, width, classes, support_vectors, coef, gamma, *, c, tol = 1e-6, max_iter = 50, cache_size = 1024.0, intercept = None, class_weights = None, callback = None, epsilon = None))]
#[allow(clippy::too_many_arguments)]
fn polish_file<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    chunk_rows: usize,
    width: usize,
    classes: PyReadonlyArray1<'py, f64>,
    support_vectors: &Bound<'py, PyAny>,
    coef: PyReadonlyArray2<'py, f64>,
    gamma: f64,
    c: f64,
    tol: f64,
    max_iter: usize,
    cache_size: f64,
    intercept: Option<PyReadonlyArray1<'py, f64>>,
    class_weights: Option<PyReadonlyArray1<'py, f64>>,
    callback: Option<Py<PyAny>>,
    epsilon: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (model, params) =
        polish_inputs(support_vectors, coef, gamma, c, tol, max_iter, cache_size)?;
    let classes = convert::slice1(&classes)?;
    if epsilon.is_some() && (!classes.is_empty() || class_weights.is_some()) {
        return Err(PyValueError::new_err(
            "a regression polish (epsilon given) takes no classes or class weights",
        ));
    }
    let class_weights = class_weights.as_ref().map(convert::slice1).transpose()?;
    if class_weights.is_some_and(|w| w.len() != classes.len()) {
        return Err(PyValueError::new_err(
            "one class weight per class is needed",
        ));
    }
    let start = intercept.as_ref().map(convert::slice1).transpose()?;
    let cancel = AtomicBool::new(false);
    let mut monitor = PythonMonitor {
        callback,
        error: None,
        cancel: &cancel,
    };
    let result = run_interruptibly(py, &cancel, || {
        no_panic(|| {
            let mut m = |p: &Progress| monitor.check(p);
            if let Some(epsilon) = epsilon {
                let (mut source, z) = LibsvmFileRows::open_values(&path, chunk_rows, width)?;
                let targets = Targets::Values { y: &z, epsilon };
                return polish_solve(&model, start, &mut source, targets, None, &params, &mut m);
            }
            let (mut source, y) = LibsvmFileRows::open(&path, chunk_rows, width, classes)?;
            let weights: Option<Vec<f64>> =
                class_weights.map(|w| y.iter().map(|&k| w[k as usize]).collect());
            let targets = Targets::Classes {
                y: &y,
                n_classes: classes.len(),
            };
            polish_solve(
                &model,
                start,
                &mut source,
                targets,
                weights.as_deref(),
                &params,
                &mut m,
            )
        })
    });
    let r = monitor.finish(result)?;
    polish_result(py, &r, model.n_sv(), model.n_out)
}

/// One partition's rows of a distributed polish, kept on the worker that holds them: their
/// kernel values against the basis, computed once (`solvers::polish::PartitionRows`).
#[pyclass(module = "budgetsvm._budgetsvm")]
struct PolishPartition {
    rows: PartitionRows,
    m: usize,
    n_out: usize,
}

#[pymethods]
impl PolishPartition {
    /// `y`: class indices (uint32) of `n_classes` classes, or with `epsilon` real targets
    /// (float64, `n_classes` 0) of a regression.
    #[new]
    #[pyo3(signature = (support_vectors, gamma, x, y, n_classes, *, sample_weight = None, epsilon = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        support_vectors: &Bound<'_, PyAny>,
        gamma: f64,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
        n_classes: usize,
        sample_weight: Option<PyReadonlyArray1<'_, f64>>,
        epsilon: Option<f64>,
    ) -> PyResult<Self> {
        let (sv, n_sv, dim) = sv_matrix(support_vectors)?;
        let features = Features::extract(x)?;
        let xr = features.rows()?;
        if let AnyRows::Dense(d) = &xr {
            check_finite(d.data(), "X")?;
        }
        if xr.n_cols() != dim {
            return Err(PyValueError::new_err(format!(
                "X has {} features, the support vectors {dim}",
                xr.n_cols()
            )));
        }
        let y = TargetArray::extract(y, n_classes, epsilon)?;
        let targets = y.targets()?;
        let weights = sample_weight.as_ref().map(convert::slice1).transpose()?;
        let rows = py.detach(|| {
            no_panic(|| {
                let blocks = KernelBlocks::from_sv_matrix(&sv, n_sv, dim, Kernel::rbf(gamma))?;
                crate::core::data::rows::check_sq_norms(blocks.sq_norms(), "support vector")?;
                PartitionRows::new(&blocks, &xr, targets, weights)
            })
        })?;
        Ok(PolishPartition {
            n_out: rows.n_out(),
            rows,
            m: n_sv,
        })
    }

    /// Bytes of kernel values held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.rows.nbytes()
    }

    /// The line search's sums along (dir_coef, dir_intercept) from the counted point at each
    /// step of `ts`: a dict of loss, slope and flips, each (len(ts), n_out)
    /// (`PartitionRows::line_sums`).
    fn line_sums<'py>(
        &self,
        py: Python<'py>,
        counted_coef: PyReadonlyArray2<'py, f64>,
        counted_intercept: PyReadonlyArray1<'py, f64>,
        dir_coef: PyReadonlyArray2<'py, f64>,
        dir_intercept: PyReadonlyArray1<'py, f64>,
        ts: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let cc: Vec<f64> = counted_coef.as_array().iter().copied().collect();
        let dc: Vec<f64> = dir_coef.as_array().iter().copied().collect();
        let (cb, db) = (
            convert::slice1(&counted_intercept)?,
            convert::slice1(&dir_intercept)?,
        );
        let ts = convert::slice1(&ts)?;
        let r = py.detach(|| no_panic(|| self.rows.line_sums((&cc, cb), (&dc, db), ts)))?;
        let (g, q) = (ts.len(), self.n_out);
        let out = PyDict::new(py);
        out.set_item("loss", r.loss.into_pyarray(py).reshape([g, q])?)?;
        out.set_item("slope", r.slope.into_pyarray(py).reshape([g, q])?)?;
        out.set_item("flips", r.flips.into_pyarray(py).reshape([g, q])?)?;
        Ok(out)
    }

    /// The partition's sums between the counted point (None: no row counted yet) and the
    /// trial point: a dict of loss_counted, loss_trial, slope, flips (n_out each), s and u
    /// (n_out, m), sw and swy (n_out), and per output the change of M as `gram` (the upper
    /// triangle packed row by row, m (m + 1) / 2 values) or as `factor` (signed weights and
    /// the changed rows' kernel values, c x m, when fewer bytes), the other None.
    #[pyo3(signature = (trial_coef, trial_intercept, counted_coef = None, counted_intercept = None))]
    fn sums<'py>(
        &self,
        py: Python<'py>,
        trial_coef: PyReadonlyArray2<'py, f64>,
        trial_intercept: PyReadonlyArray1<'py, f64>,
        counted_coef: Option<PyReadonlyArray2<'py, f64>>,
        counted_intercept: Option<PyReadonlyArray1<'py, f64>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let tc: Vec<f64> = trial_coef.as_array().iter().copied().collect();
        let tb = convert::slice1(&trial_intercept)?;
        let cc: Option<Vec<f64>> = counted_coef.map(|c| c.as_array().iter().copied().collect());
        let cb = counted_intercept
            .as_ref()
            .map(convert::slice1)
            .transpose()?;
        let counted = match (&cc, cb) {
            (Some(c), Some(b)) => Some((&c[..], b)),
            (None, None) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "counted_coef and counted_intercept go together",
                ))
            }
        };
        let r = py.detach(|| no_panic(|| self.rows.sums(counted, (&tc, tb))))?;
        let (m, q) = (self.m, self.n_out);
        let flat = |f: &dyn Fn(&ActiveSums) -> &[f64]| -> Vec<f64> {
            r.change.iter().flat_map(|c| f(c).iter().copied()).collect()
        };
        let grams = pyo3::types::PyList::empty(py);
        let factors = pyo3::types::PyList::empty(py);
        for (c, f) in r.change.iter().zip(&r.factors) {
            match f {
                Some(f) => {
                    grams.append(py.None())?;
                    let rows = PyArray1::from_slice(py, &f.rows).reshape([f.weights.len(), m])?;
                    factors.append((PyArray1::from_slice(py, &f.weights), rows))?;
                }
                None => {
                    let packed: Vec<f64> = (0..m)
                        .flat_map(|i| c.gram[i * m + i..(i + 1) * m].iter().copied())
                        .collect();
                    grams.append(packed.into_pyarray(py))?;
                    factors.append(py.None())?;
                }
            }
        }
        let out = PyDict::new(py);
        out.set_item("gram", grams)?;
        out.set_item("factor", factors)?;
        out.set_item("loss_counted", PyArray1::from_slice(py, &r.loss_counted))?;
        out.set_item("loss_trial", PyArray1::from_slice(py, &r.loss_trial))?;
        out.set_item("slope", PyArray1::from_slice(py, &r.slope))?;
        out.set_item("flips", PyArray1::from_slice(py, &r.flips))?;
        out.set_item("s", flat(&|c| &c.s).into_pyarray(py).reshape([q, m])?)?;
        out.set_item("u", flat(&|c| &c.u).into_pyarray(py).reshape([q, m])?)?;
        let sw: Vec<f64> = r.change.iter().map(|c| c.sw).collect();
        let swy: Vec<f64> = r.change.iter().map(|c| c.swy).collect();
        out.set_item("sw", PyArray1::from_slice(py, &sw))?;
        out.set_item("swy", PyArray1::from_slice(py, &swy))?;
        Ok(out)
    }
}

/// Adds a partition's change of M (`PolishPartition.sums`: a packed upper triangle, or a
/// factor of signed weights and rows) to `gram` (m x m, upper triangle), in place.
#[pyfunction]
#[pyo3(signature = (gram, *, packed = None, weights = None, rows = None))]
fn add_gram_change<'py>(
    py: Python<'py>,
    mut gram: numpy::PyReadwriteArray2<'py, f64>,
    packed: Option<PyReadonlyArray1<'py, f64>>,
    weights: Option<PyReadonlyArray1<'py, f64>>,
    rows: Option<PyReadonlyArray2<'py, f64>>,
) -> PyResult<()> {
    let m = gram.shape()[0];
    if gram.shape()[1] != m {
        return Err(PyValueError::new_err("gram must be square"));
    }
    let g = gram
        .as_slice_mut()
        .map_err(|_| PyValueError::new_err("gram must be C-contiguous"))?;
    match (packed, weights, rows) {
        (Some(p), None, None) => {
            let p = convert::slice1(&p)?;
            if p.len() != m * (m + 1) / 2 {
                return Err(PyValueError::new_err(
                    "a packed triangle of an m x m matrix has m (m + 1) / 2 values",
                ));
            }
            let mut k = 0;
            for i in 0..m {
                for v in &mut g[i * m + i..(i + 1) * m] {
                    *v += p[k];
                    k += 1;
                }
            }
            Ok(())
        }
        (None, Some(w), Some(r)) => {
            let factor = GramFactor {
                weights: convert::slice1(&w)?.to_vec(),
                rows: r.as_array().iter().copied().collect(),
            };
            py.detach(|| no_panic(|| add_gram_factor(g, m, &factor)))
        }
        _ => Err(PyValueError::new_err(
            "give either packed, or weights and rows",
        )),
    }
}

/// The minimiser (beta, b) of the polish's quadratic model for the active-set sums given
/// (`ActiveSums::newton_point`, the serial solve's own): m + 1 values.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn polish_newton_point<'py>(
    py: Python<'py>,
    kss: PyReadonlyArray2<'py, f64>,
    gram: PyReadonlyArray2<'py, f64>,
    s: PyReadonlyArray1<'py, f64>,
    u: PyReadonlyArray1<'py, f64>,
    sw: f64,
    swy: f64,
    c: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let sums = ActiveSums {
        gram: gram.as_array().iter().copied().collect(),
        s: convert::slice1(&s)?.to_vec(),
        u: convert::slice1(&u)?.to_vec(),
        sw,
        swy,
    };
    let kss: Vec<f64> = kss.as_array().iter().copied().collect();
    let x = py.detach(|| no_panic(|| sums.newton_point(&kss, c)))?;
    Ok(x.into_pyarray(py))
}

/// Reduces a model (support vectors and coef (n_sv, n_out)) to at most `budget` support
/// vectors by budget maintenance (`budget::reduce_to_budget`; `opposite_sign_merges` as a
/// regression's fit merges): (support_vectors, coef, total weight degradation).
#[pyfunction]
#[pyo3(signature = (support_vectors, coef, gamma, budget, *, maintenance = "merge", merge = "lookup-wd", sv_storage = "auto", opposite_sign_merges = false))]
#[allow(clippy::too_many_arguments)]
fn reduce_budget<'py>(
    py: Python<'py>,
    support_vectors: &Bound<'py, PyAny>,
    coef: PyReadonlyArray2<'py, f64>,
    gamma: f64,
    budget: usize,
    maintenance: &str,
    merge: &str,
    sv_storage: &str,
    opposite_sign_merges: bool,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray2<f64>>, f64)> {
    let sparse_input = !support_vectors.is_instance_of::<numpy::PyUntypedArray>();
    let (sv, n_sv, dim) = sv_matrix(support_vectors)?;
    if coef.shape()[0] != n_sv {
        return Err(PyValueError::new_err(
            "coef must have one row per support vector",
        ));
    }
    let model = BudgetModel {
        dim,
        n_out: coef.shape()[1],
        gamma,
        support_vectors: sv,
        coef: coef.as_array().iter().copied().collect(),
    };
    let maintenance = Maintenance::parse(maintenance, merge)?;
    let layout = SvLayout::choose(sv_storage, sparse_input, dim)?;
    let (reduced, stats) = py.detach(|| {
        no_panic(|| reduce_to_budget(&model, budget, maintenance, layout, opposite_sign_merges))
    })?;
    let (sv, coef) = model_arrays(py, &reduced)?;
    Ok((sv, coef, stats.total_weight_degradation))
}

/// Reads a LIBSVM/svmlight file (plain, gzip, bzip2 or xz): (data, indices, indptr, labels, n_features).
#[pyfunction]
fn load_libsvm(py: Python<'_>, path: std::path::PathBuf) -> PyResult<CsrChunk<'_>> {
    let data = py.detach(|| no_panic(|| crate::core::data::libsvm::read_libsvm_file(&path)))?;
    Ok(csr_chunk(py, data))
}

type CsrChunk<'py> = (
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
    usize,
);

fn csr_chunk(py: Python<'_>, data: LibsvmData) -> CsrChunk<'_> {
    (
        data.values.into_pyarray(py),
        data.indices.into_pyarray(py),
        data.indptr.into_pyarray(py),
        data.labels.into_pyarray(py),
        data.n_features,
    )
}

/// Iterates over a LIBSVM file (plain, gzip, bzip2 or xz) in chunks of at most `chunk_rows`
/// lines, each as (data, indices, indptr, labels, n_features) like `load_libsvm`; reading and
/// parsing release the GIL.
#[pyclass(module = "budgetsvm._budgetsvm")]
struct LibsvmChunkReader {
    inner: std::sync::Mutex<LibsvmChunks>,
}

#[pymethods]
impl LibsvmChunkReader {
    #[new]
    fn new(py: Python<'_>, path: std::path::PathBuf, chunk_rows: usize) -> PyResult<Self> {
        let chunks = py.detach(|| no_panic(|| LibsvmChunks::open(&path, chunk_rows)))?;
        Ok(LibsvmChunkReader {
            inner: std::sync::Mutex::new(chunks),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<CsrChunk<'py>>> {
        let next = py.detach(|| {
            no_panic(|| {
                let mut chunks = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                chunks.next_chunk()
            })
        })?;
        Ok(next.map(|data| csr_chunk(py, data)))
    }

    /// Lines of the file read so far.
    #[getter]
    fn lines_read(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lines_read()
    }
}

/// One chunked pass over a LIBSVM file keeping only counts: a dict with n_rows, n_features,
/// labels (distinct, sorted), value_sum and value_sq_sum.
#[pyfunction]
fn summarize_libsvm<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    chunk_rows: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let summary = py.detach(|| no_panic(|| summarize_libsvm_file(&path, chunk_rows)))?;
    let out = PyDict::new(py);
    out.set_item("n_rows", summary.n_rows)?;
    out.set_item("n_features", summary.n_features)?;
    out.set_item("labels", summary.labels.into_pyarray(py))?;
    out.set_item("label_counts", summary.label_counts.into_pyarray(py))?;
    out.set_item("value_sum", summary.value_sum)?;
    out.set_item("value_sq_sum", summary.value_sq_sum)?;
    Ok(out)
}

/// Variance of all entries of X (numpy's `X.var()`), the same bits for dense and CSR input.
#[pyfunction]
fn feature_variance(py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let features = Features::extract(x)?;
    let rows = features.rows()?;
    Ok(py.detach(|| crate::core::data::rows::entry_variance(&rows)))
}

/// Sets the number of threads of parallel work for estimators whose ``n_jobs`` is None.
///
/// Parameters
/// ----------
/// n : int
///     Threads; 0 means one per core (the default before any call).
#[pyfunction]
fn set_num_threads(n: usize) -> PyResult<()> {
    Ok(parallel::set_num_threads(n)?)
}

/// The number of threads of parallel work for estimators whose ``n_jobs`` is None.
///
/// Returns
/// -------
/// int
#[pyfunction]
fn get_num_threads() -> usize {
    parallel::num_threads()
}

/// The SIMD code path of the kernel loops on this CPU ("avx2+fma" or "portable").
#[pyfunction]
fn simd_level() -> &'static str {
    simd::simd_level()
}

#[pymodule]
mod _budgetsvm {
    #[pymodule_export]
    use super::{
        add_gram_change, decision_from_kernel, decision_function, feature_variance, fit_bsca,
        fit_bsgd, fit_exact, get_num_threads, kernel_rows, load_libsvm, merge_search, polish,
        polish_file, polish_newton_point, rbf_kernel, reduce_budget, set_num_threads, simd_level,
        summarize_libsvm, BsgdStream, LibsvmChunkReader, PolishPartition,
    };

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("DEFAULT_TABLE_SIZE", super::DEFAULT_TABLE_SIZE)?;
        m.add("MAX_THREADS", crate::core::common::parallel::MAX_THREADS)?;
        // Load NumPy's C API now. Loaded lazily, it is first needed for the arrays a long read
        // returns, and an import run while a Ctrl-C is pending fails inside rust-numpy as a
        // PanicException instead of a KeyboardInterrupt.
        numpy::PyArray1::<f64>::zeros(m.py(), 0, false);
        Ok(())
    }
}
