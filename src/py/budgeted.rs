//! The budgeted solvers: BSGD and BSCA fits, the BSGD stream that `partial_fit` continues, the
//! merge search and budget reduction of a model.

use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyType};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::convert::{dict, model_arrays, slice1, ExpansionArrays, Features, TargetArray};
use super::error::no_panic;
use super::keywords::{keyword_group, keywords};
use super::runtime::{detached, run_interruptibly, run_on_rows, Job, PythonMonitor};
use crate::core::budget::maintenance::{reduce_to_budget, Maintenance};
use crate::core::budget::merge::{search_pair, MergeSearch, MergeTable, DEFAULT_TABLE_SIZE};
use crate::core::budget::model::{BudgetModel, SvLayout};
use crate::core::budgeted::bsca::{train_bsca, BscaParams, BscaStart, DualStep};
use crate::core::budgeted::bsgd::{train_bsgd_state, BsgdParams, BsgdState, TrainStats};
use crate::core::budgeted::problem::{Targets, Task};
use crate::core::common::error::SvmError;
use crate::core::common::parallel;
use crate::core::common::progress::Progress;
use crate::core::data::rows::{AnyRows, Rows, SubsetRows};

type ArrayPair<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>);

/// Optimal merge coefficient h and normalised weight degradation for arrays of (m, kappa).
#[pyfunction]
#[pyo3(signature = (m, kappa, method, table_size = None))]
pub fn merge_search<'py>(
    py: Python<'py>,
    m: PyReadonlyArray1<'py, f64>,
    kappa: PyReadonlyArray1<'py, f64>,
    method: &str,
    table_size: Option<usize>,
) -> PyResult<ArrayPair<'py>> {
    let table_size = table_size.unwrap_or(DEFAULT_TABLE_SIZE);
    let search = MergeSearch::parse(method)?;
    let (m, kappa) = (slice1(&m)?, slice1(&kappa)?);
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
    let (h, wd) = detached(py, || {
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
    })?;
    Ok((h.into_pyarray(py), wd.into_pyarray(py)))
}

/// The result dict shared by the budgeted solvers.
fn fit_result<'py>(
    py: Python<'py>,
    model: &BudgetModel,
    stats: &TrainStats,
) -> PyResult<Bound<'py, PyDict>> {
    let (sv, coef) = model_arrays(py, model)?;
    let maintenance = &stats.maintenance;
    dict!(PyDict::new(py), {
        "support_vectors" => sv,
        "coef" => coef,
        "iterations" => stats.iterations,
        "insertions" => stats.insertions,
        "maintenance_events" => maintenance.events,
        "maintenance_frequency" => stats.maintenance_frequency(),
        "maintenance_seconds" => maintenance.seconds,
        "total_weight_degradation" => maintenance.total_weight_degradation,
        "compared_merges" => maintenance.compared,
        "agreeing_merges" => maintenance.agreed,
        "seconds" => stats.seconds,
        "epochs" => stats.epochs,
    })
}

keyword_group! {
    /// The settings of every budgeted run (`fit_bsgd`, `fit_bsca`, `BsgdStream`): the objective's
    /// C, the kernel's gamma, the budget and its maintenance, the order of the examples, the
    /// support vectors' storage, and epsilon for a regression.
    struct BudgetSettings {
        c: f64,
        gamma: f64,
        budget: usize,
        maintenance: String,
        merge: String,
        seed: u64,
        shuffle: bool = true,
        sv_storage: String = "auto".to_owned(),
        epsilon: Option<f64> = None,
    }
}

impl BudgetSettings {
    fn maintenance(&self) -> PyResult<Maintenance> {
        Ok(Maintenance::parse(&self.maintenance, &self.merge)?)
    }

    /// The support vector layout for `sv_storage` on these rows.
    fn layout_for(&self, rows: &AnyRows<'_>) -> Result<SvLayout, SvmError> {
        SvLayout::choose(
            &self.sv_storage,
            !matches!(rows, AnyRows::Dense(_)),
            rows.n_cols(),
        )
    }
}

keyword_group! {
    /// BSGD's own settings (`fit_bsgd`, `BsgdStream`): averaging, and lambda = `lambda_` if
    /// given, else 1/(n_samples C).
    struct BsgdSettings {
        average: bool = true,
        lambda_: Option<f64> = None,
    }
}

impl BsgdSettings {
    /// BSGD's parameters for a run of `epochs` epochs: no merge compared, merges placed for the
    /// last iterate, dense storage until the rows are known.
    fn params(&self, settings: &BudgetSettings, epochs: usize) -> PyResult<BsgdParams> {
        Ok(BsgdParams {
            c: settings.c,
            lambda: self.lambda_,
            gamma: settings.gamma,
            budget: settings.budget,
            epochs,
            maintenance: settings.maintenance()?,
            seed: settings.seed,
            average: self.average,
            average_placement: false,
            compare_with: None,
            shuffle: settings.shuffle,
            layout: SvLayout::Dense,
        })
    }
}

keyword_group! {
    /// What a fit on rows in memory takes besides its `BudgetSettings` (`fit_bsgd`, `fit_bsca`):
    /// its epochs, the second merge search to compare with, where merges place points while
    /// averaging, the row weights, and the progress callback and epoch observer.
    struct FitSettings<'py> {
        epochs: usize,
        compare_with: Option<String> = None,
        average_placement: bool = false,
        sample_weight: Option<PyReadonlyArray1<'py, f64>> = None,
        callback: Option<Py<PyAny>> = None,
        observer: Option<Py<PyAny>> = None,
    }
}

impl<'py> FitSettings<'py> {
    fn compare_with(&self) -> PyResult<Option<MergeSearch>> {
        Ok(self
            .compare_with
            .as_deref()
            .map(MergeSearch::parse)
            .transpose()?)
    }

    /// Runs a budgeted solver on `x` with targets `y` (`run_on_rows`), handing it the job, the
    /// targets as the core takes them and the support vector layout chosen for the rows.
    fn run<T: Send>(
        self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        y: &Bound<'py, PyAny>,
        n_classes: usize,
        settings: &BudgetSettings,
        solve: impl FnOnce(Job<'_, '_>, Targets<'_>, SvLayout) -> Result<T, SvmError> + Send,
    ) -> PyResult<T> {
        let y = TargetArray::extract(y, n_classes, settings.epsilon)?;
        let targets = y.targets()?;
        let weights = self.sample_weight.as_ref();
        run_on_rows(py, x, weights, self.callback, self.observer, |job| {
            let layout = settings.layout_for(job.rows)?;
            solve(job, targets, layout)
        })
    }
}

/// Trains BSGD; returns a dict with the model arrays, the training statistics and the run's
/// state ("state", a `BsgdStream` that `partial_fit` continues). `y` holds class indices
/// (uint32), or real targets (float64) when `epsilon` is given (regression; n_classes 0). The
/// settings (`options`) are those of `BudgetSettings`, `FitSettings` and `BsgdSettings`.
#[pyfunction]
#[pyo3(signature = (x, y, n_classes, **options))]
pub fn fit_bsgd<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    n_classes: usize,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (settings, fit, bsgd): (BudgetSettings, FitSettings<'_>, BsgdSettings) =
        keywords("fit_bsgd", options)?;
    SvLayout::choose(&settings.sv_storage, false, 0)?;
    let mut params = bsgd.params(&settings, fit.epochs)?;
    params.average_placement = fit.average_placement;
    params.compare_with = fit.compare_with()?;
    let state = fit.run(py, x, y, n_classes, &settings, |job, y, layout| {
        let valid = BsgdParams { layout, ..params }.check(job.rows.n_rows())?;
        train_bsgd_state(job.rows, y, job.weights, &valid, job.monitor, job.observer)
    })?;
    let stream = BsgdStream { state };
    let out = stream.result(py)?;
    out.set_item("state", Py::new(py, stream)?)?;
    Ok(out)
}

/// Trains BSCA; returns a dict with the model arrays and the training statistics. The settings
/// besides BSCA's own (`dual_step`, `average`) are those of `BudgetSettings` and `FitSettings`.
/// A relay over a data set's parts (`budgetsvm.dask`) continues a run: `start` is the model so
/// far (a dict of `support_vectors`, `coef`, `gamma`), `start_alpha` these rows' dual variables
/// from an earlier pass (problems x rows), `epochs_done` the epochs before; `return_alpha` adds
/// the dual variables at the end to the result (`alpha`).
#[pyfunction]
#[pyo3(signature = (
    x, y, n_classes, *, dual_step = "decaying", average = false, start = None,
    start_alpha = None, epochs_done = 0, return_alpha = false, **options
))]
pub fn fit_bsca<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    n_classes: usize,
    dual_step: &str,
    average: bool,
    start: Option<&Bound<'py, PyDict>>,
    start_alpha: Option<PyReadonlyArray2<'py, f64>>,
    epochs_done: usize,
    return_alpha: bool,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (settings, fit): (BudgetSettings, FitSettings<'_>) = keywords("fit_bsca", options)?;
    let start_model = match start {
        Some(given) => {
            Some(keywords::<ExpansionArrays<'_>>("fit_bsca start", Some(given))?.model()?)
        }
        None => None,
    };
    let start_alpha: Option<Vec<Vec<f64>>> = start_alpha.map(|a| {
        a.as_array()
            .rows()
            .into_iter()
            .map(|r| r.to_vec())
            .collect()
    });
    if start_alpha.is_some() && start_model.is_none() {
        return Err(PyValueError::new_err(
            "start_alpha needs the model it belongs to (start)",
        ));
    }
    SvLayout::choose(&settings.sv_storage, false, 0)?;
    let params = BscaParams {
        c: settings.c,
        gamma: settings.gamma,
        budget: settings.budget,
        epochs: fit.epochs,
        maintenance: settings.maintenance()?,
        seed: settings.seed,
        compare_with: fit.compare_with()?,
        shuffle: settings.shuffle,
        step: DualStep::parse(dual_step)?,
        average,
        average_placement: fit.average_placement,
        layout: SvLayout::Dense,
    };
    let (model, stats) = fit.run(py, x, y, n_classes, &settings, |job, y, layout| {
        let valid = BscaParams { layout, ..params }.check(job.rows.n_rows())?;
        let start = start_model.as_ref().map(|model| BscaStart {
            model,
            alpha: start_alpha.as_deref(),
            epochs_done,
        });
        train_bsca(
            job.rows,
            y,
            job.weights,
            &valid,
            start,
            job.monitor,
            job.observer,
        )
    })?;
    let out = fit_result(py, &model, &stats.train_stats())?;
    out.set_item("updates", stats.updates)?;
    out.set_item("dropped_svs", stats.dropped)?;
    if return_alpha {
        let rows: Vec<Vec<f64>> = stats.alpha;
        let alpha = numpy::PyArray2::from_vec2(py, &rows)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        out.set_item("alpha", alpha)?;
    }
    Ok(out)
}

/// A pair's progress checked by its Python monitor; a stop (Ctrl-C, a callback's error) also
/// cancels the other pairs running at once.
fn pair_check(
    monitor: &Mutex<PythonMonitor<'_>>,
    cancel: &AtomicBool,
    p: &Progress,
) -> Result<(), SvmError> {
    let checked = monitor.lock().map_err(|_| SvmError::Interrupted)?.check(p);
    if checked.is_err() {
        cancel.store(true, Ordering::Relaxed);
    }
    checked
}

/// One class pair's run of `fit_pairs`: its rows (indices into x), their targets (0: the
/// pair's first class, 1: its second), their weights, and the run's budget, seed and C.
struct PairRun {
    rows: Vec<usize>,
    targets: Vec<u32>,
    weights: Option<Vec<f64>>,
    budget: usize,
    seed: u64,
    c: f64,
}

/// What a pair's run returns: BSGD's run (which partial_fit continues), or BSCA's model.
enum PairResult {
    Bsgd(Box<BsgdState>),
    Bsca(BudgetModel, TrainStats, u64, u64),
}

/// The budgeted passes of one-vs-one training (`BudgetSVC`, `multiclass='ovo'`): for every
/// class pair (a, b) of `pairs` (tuples of its row indices, budget, seed and C), a binary run
/// on the rows of x with class index a or b (`y`, uint32), b positive, all pairs on the
/// thread pool at once (each run is sequential, so the pairs are what spreads over the cores;
/// each pair's model is the same on any number of threads). `solver` is 'bsgd' or 'bsca'
/// (with `dual_step` and `average`); the other settings are `BudgetSettings`' (its budget, seed
/// and c replaced by the pair's) and `FitSettings`' (no observer; the callback's epoch dicts
/// say whose epoch with "pair", the pair's index), on `n_threads` threads (None: the
/// process-wide setting, 0: one per core; the estimator's `n_jobs`). Returns one dict per
/// pair, as `fit_bsgd` / `fit_bsca` return.
#[pyfunction]
#[pyo3(signature = (x, y, pairs, *, solver, dual_step = "decaying", average = true, n_threads = None, **options))]
pub fn fit_pairs<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: PyReadonlyArray1<'py, u32>,
    pairs: Vec<(PyReadonlyArray1<'py, i64>, usize, u64, f64)>,
    solver: &str,
    dual_step: &str,
    average: bool,
    n_threads: Option<usize>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyList>> {
    let (settings, fit, bsgd): (BudgetSettings, FitSettings<'_>, BsgdSettings) =
        keywords("fit_pairs", options)?;
    if fit.observer.is_some() {
        return Err(PyValueError::new_err(
            "fit_pairs runs its pairs at once: no epoch observer",
        ));
    }
    let bsca = match solver {
        "bsgd" => false,
        "bsca" => true,
        other => {
            return Err(PyValueError::new_err(format!(
                "solver must be 'bsgd' or 'bsca', got {other:?}"
            )))
        }
    };
    let y = slice1(&y)?;
    let weights = fit.sample_weight.as_ref().map(slice1).transpose()?;
    if weights.is_some_and(|w| w.len() != y.len()) {
        return Err(PyValueError::new_err("one sample weight per row is needed"));
    }
    let mut runs = Vec::with_capacity(pairs.len());
    for (index, budget, seed, c) in &pairs {
        let mut rows = Vec::new();
        for &i in slice1(index)? {
            match usize::try_from(i) {
                Ok(i) if i < y.len() => rows.push(i),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "pair row {i} out of range for {} rows",
                        y.len()
                    )))
                }
            }
        }
        // The pair's second class (the larger index) is the positive one.
        let second = rows.iter().map(|&i| y[i]).max();
        let targets = rows
            .iter()
            .map(|&i| u32::from(Some(y[i]) == second))
            .collect();
        runs.push(PairRun {
            weights: weights.map(|w| rows.iter().map(|&i| w[i]).collect()),
            rows,
            targets,
            budget: *budget,
            seed: *seed,
            c: *c,
        });
    }
    let compare_with = fit.compare_with()?;
    let mut bsgd_params = bsgd.params(&settings, fit.epochs)?;
    bsgd_params.average_placement = fit.average_placement;
    bsgd_params.compare_with = compare_with;
    let step = DualStep::parse(dual_step)?;
    let maintenance = settings.maintenance()?;
    let features = Features::extract(x)?;
    let x_rows = features.training_rows(y.len())?;
    let layout = settings.layout_for(&x_rows)?;
    let cancel = AtomicBool::new(false);
    // One monitor per pair: each reports its run's epochs (with the pair's index), any stops all.
    let monitors: Vec<Mutex<PythonMonitor<'_>>> = (0..runs.len())
        .map(|p| {
            Mutex::new(PythonMonitor::for_pair(
                py,
                fit.callback.as_ref(),
                &cancel,
                p,
            ))
        })
        .collect();
    // The runs with the most rows first, each thread taking the next one when it is free: the
    // pass ends with its last run, and a long run taken late runs alone (in pair order the
    // million-row hardmc fit's largest pair ran its 1.5 s on one core at the end).
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&p| std::cmp::Reverse(runs[p].rows.len()));
    // One pair's run, on the thread that takes it.
    let run_pair =
        |run: &PairRun, monitor: &Mutex<PythonMonitor<'_>>| -> Result<PairResult, SvmError> {
            let rows = SubsetRows::new(&x_rows, &run.rows)?;
            let targets = Targets::Classes {
                y: &run.targets,
                n_classes: 2,
            };
            let mut monitor = |p: &Progress| pair_check(monitor, &cancel, p);
            let weights = run.weights.as_deref();
            if bsca {
                let params = BscaParams {
                    c: run.c,
                    gamma: settings.gamma,
                    budget: run.budget,
                    epochs: fit.epochs,
                    maintenance,
                    seed: run.seed,
                    compare_with,
                    shuffle: settings.shuffle,
                    step,
                    average,
                    average_placement: fit.average_placement,
                    layout,
                }
                .check(rows.n_rows())?;
                let (model, stats) =
                    train_bsca(&rows, targets, weights, &params, None, &mut monitor, None)?;
                Ok(PairResult::Bsca(
                    model,
                    stats.train_stats(),
                    stats.updates,
                    stats.dropped,
                ))
            } else {
                let params = BsgdParams {
                    c: run.c,
                    budget: run.budget,
                    seed: run.seed,
                    average,
                    layout,
                    ..bsgd_params.clone()
                }
                .check(rows.n_rows())?;
                let state = train_bsgd_state(&rows, targets, weights, &params, &mut monitor, None)?;
                Ok(PairResult::Bsgd(Box::new(state)))
            }
        };
    let results = run_interruptibly(py, &cancel, || {
        no_panic(|| {
            parallel::install_with(n_threads, || {
                let mut done: Vec<(usize, Result<PairResult, SvmError>)> = order
                    .into_iter()
                    .par_bridge()
                    .map(|p| (p, run_pair(&runs[p], &monitors[p])))
                    .collect();
                done.sort_unstable_by_key(|(p, _)| *p);
                done.into_iter()
                    .map(|(_, result)| result)
                    .collect::<Result<Vec<_>, _>>()
            })?
        })
    });
    // A callback's error is what stopped the runs: re-raised as it was.
    let raised = monitors
        .into_iter()
        .filter_map(|m| m.into_inner().ok().and_then(|mut m| m.take_error()))
        .next();
    let results = match (results, raised) {
        (Err(_), Some(e)) => return Err(e),
        (r, _) => r?,
    };
    let out = PyList::empty(py);
    for result in results {
        let item = match result {
            PairResult::Bsgd(state) => {
                let stream = BsgdStream { state: *state };
                let item = stream.result(py)?;
                item.set_item("state", Py::new(py, stream)?)?;
                item
            }
            PairResult::Bsca(model, stats, updates, dropped) => {
                let item = fit_result(py, &model, &stats)?;
                item.set_item("updates", updates)?;
                item.set_item("dropped_svs", dropped)?;
                item
            }
        };
        out.append(item)?;
    }
    Ok(out)
}

/// One pass of one-vs-one's BSGD runs over a batch (`BudgetSVC.partial_fit` of a one-vs-one
/// model, `fit_file`'s chunks): run p (a binary `BsgdStream` of `streams`) steps over the rows
/// of `x` whose class index in `y` (uint32) is a or b of `pairs[p]` = (a, b), b positive, in
/// the batch's order (shuffled by the run as its own `partial_fit` shuffles), with their
/// `sample_weight`; rows of weight 0 are left out, and a run with no rows in the batch is not
/// stepped. `pair_rows` (one int64 array per pair, ascending) names the batch rows a run steps
/// over instead of all its classes' rows (`fit_file`'s pairs whose pass sees a subset, as
/// `fit`'s). Each run's pass is what its `partial_fit` on those rows would do; the runs go at
/// once on the thread pool (`n_threads` as `fit_pairs`'), so the same runs on any number of
/// threads. Ctrl-C or an error leaves the runs part-way: callers pass copies.
#[pyfunction]
#[pyo3(signature = (streams, x, y, pairs, *, sample_weight = None, average_placement = true, n_threads = None, pair_rows = None))]
#[allow(clippy::too_many_arguments)]
pub fn partial_fit_pairs<'py>(
    py: Python<'py>,
    streams: Vec<Bound<'py, BsgdStream>>,
    x: &Bound<'py, PyAny>,
    y: PyReadonlyArray1<'py, u32>,
    pairs: Vec<(u32, u32)>,
    sample_weight: Option<PyReadonlyArray1<'py, f64>>,
    average_placement: bool,
    n_threads: Option<usize>,
    pair_rows: Option<Vec<PyReadonlyArray1<'py, i64>>>,
) -> PyResult<()> {
    if streams.len() != pairs.len() {
        return Err(PyValueError::new_err(format!(
            "{} streams but {} pairs: one pair of classes per stream",
            streams.len(),
            pairs.len()
        )));
    }
    if pair_rows.as_ref().is_some_and(|r| r.len() != pairs.len()) {
        return Err(PyValueError::new_err(
            "pair_rows needs one array of rows per pair",
        ));
    }
    let y = slice1(&y)?;
    let weights = sample_weight.as_ref().map(slice1).transpose()?;
    if weights.is_some_and(|w| w.len() != y.len()) {
        return Err(PyValueError::new_err("one sample weight per row is needed"));
    }
    let mut runs = Vec::with_capacity(pairs.len());
    for (p, &(a, b)) in pairs.iter().enumerate() {
        if a == b {
            return Err(PyValueError::new_err(format!(
                "a pair needs two distinct classes, got ({a}, {b})"
            )));
        }
        let in_pair = |i: usize| (y[i] == a || y[i] == b) && weights.is_none_or(|w| w[i] > 0.0);
        let rows: Vec<usize> = match &pair_rows {
            None => (0..y.len()).filter(|&i| in_pair(i)).collect(),
            Some(named) => {
                let named = slice1(&named[p])?;
                let mut rows = Vec::with_capacity(named.len());
                for &i in named {
                    let row = usize::try_from(i)
                        .ok()
                        .filter(|&i| i < y.len() && (y[i] == a || y[i] == b));
                    let Some(row) = row else {
                        return Err(PyValueError::new_err(format!(
                            "pair_rows[{p}] names row {i}, which is not a row of classes {a} or \
                             {b} among the batch's {}",
                            y.len()
                        )));
                    };
                    if let Some(&last) = rows.last().filter(|&&last| last >= row) {
                        return Err(PyValueError::new_err(format!(
                            "pair_rows[{p}] must be ascending, got {row} after {last}"
                        )));
                    }
                    rows.push(row);
                }
                // Rows of weight 0 are left out, as from the classes' rows.
                rows.retain(|&i| in_pair(i));
                rows
            }
        };
        let targets: Vec<u32> = rows.iter().map(|&i| u32::from(y[i] == b)).collect();
        let weights = weights.map(|w| rows.iter().map(|&i| w[i]).collect::<Vec<f64>>());
        runs.push((rows, targets, weights));
    }
    let mut held = Vec::with_capacity(streams.len());
    for stream in &streams {
        let run = stream.try_borrow_mut().map_err(|_| {
            PyValueError::new_err("a stream is given twice (or is in use elsewhere)")
        })?;
        if !matches!(run.state.task(), Task::Classes(2)) {
            return Err(PyValueError::new_err(
                "partial_fit_pairs steps binary classification streams (2 classes)",
            ));
        }
        held.push(run);
    }
    let mut states: Vec<&mut BsgdState> = held.iter_mut().map(|r| &mut r.state).collect();
    for state in &mut states {
        state.set_average_placement(average_placement);
    }
    let features = Features::extract(x)?;
    let x_rows = features.training_rows(y.len())?;
    let cancel = AtomicBool::new(false);
    let monitors: Vec<Mutex<PythonMonitor<'_>>> = (0..runs.len())
        .map(|p| Mutex::new(PythonMonitor::for_pair(py, None, &cancel, p)))
        .collect();
    run_interruptibly(py, &cancel, || {
        no_panic(|| {
            parallel::install_with(n_threads, || {
                states
                    .par_iter_mut()
                    .zip(&runs)
                    .zip(&monitors)
                    .filter(|((_, (rows, _, _)), _)| !rows.is_empty())
                    .try_for_each(|((state, (rows, targets, weights)), monitor)| {
                        let subset = SubsetRows::new(&x_rows, rows)?;
                        let targets = Targets::Classes {
                            y: targets,
                            n_classes: 2,
                        };
                        let mut monitor = |p: &Progress| pair_check(monitor, &cancel, p);
                        state.pass(&subset, targets, weights.as_deref(), 1, 1, &mut monitor)
                    })
            })?
        })
    })
}

/// A BSGD run fed in batches (`BudgetSVC.partial_fit`, training from a file in chunks): the core
/// `BsgdState` behind a Python object, pickled as its versioned byte form.
#[pyclass(module = "budgetsvm._budgetsvm")]
pub struct BsgdStream {
    state: BsgdState,
}

#[pymethods]
impl BsgdStream {
    /// A fresh run. lambda = `lambda_` if given, else 1/(n_samples C); averaging (if on) starts
    /// where `fit_bsgd` with `epochs` epochs over n_samples rows starts it (the last epoch, or
    /// the second half of a single one). With `epsilon` a regression run (n_classes 0). The
    /// settings (`options`) are those of `BudgetSettings` and `BsgdSettings`.
    #[new]
    #[pyo3(signature = (n_features, n_classes, *, n_samples, epochs = 1, sparse_input = false, **options))]
    fn new(
        n_features: usize,
        n_classes: usize,
        n_samples: usize,
        epochs: usize,
        sparse_input: bool,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (settings, bsgd): (BudgetSettings, BsgdSettings) =
            keywords("BsgdStream.__new__", options)?;
        let mut params = bsgd.params(&settings, epochs)?;
        params.layout = SvLayout::choose(&settings.sv_storage, sparse_input, n_features)?;
        let valid = params.check(n_samples)?;
        let task = match settings.epsilon {
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
        let state = &mut self.state;
        run_on_rows(py, x, sample_weight.as_ref(), callback, None, |job| {
            state.pass(job.rows, y, job.weights, 1, 1, job.monitor)
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
        fit_result(py, &self.state.model(), &self.state.stats())
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

/// Reduces a model (`ExpansionArrays`: support vectors, coef (n_sv, n_out), gamma) to at most
/// `budget` support vectors by budget maintenance (`budget::reduce_to_budget`;
/// `opposite_sign_merges` as a regression's fit merges): (support_vectors, coef, total weight
/// degradation).
#[pyfunction]
#[pyo3(signature = (budget, *, maintenance = "merge", merge = "lookup-wd", sv_storage = "auto", opposite_sign_merges = false, **model))]
pub fn reduce_budget<'py>(
    py: Python<'py>,
    budget: usize,
    maintenance: &str,
    merge: &str,
    sv_storage: &str,
    opposite_sign_merges: bool,
    model: Option<&Bound<'py, PyDict>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray2<f64>>, f64)> {
    let given: ExpansionArrays<'_> = keywords("reduce_budget", model)?;
    let sparse_input = !given
        .support_vectors
        .is_instance_of::<numpy::PyUntypedArray>();
    let model = given.model()?;
    let maintenance = Maintenance::parse(maintenance, merge)?;
    let layout = SvLayout::choose(sv_storage, sparse_input, model.dim)?;
    let (reduced, stats) = detached(py, || {
        reduce_to_budget(&model, budget, maintenance, layout, opposite_sign_merges)
    })?;
    let (sv, coef) = model_arrays(py, &reduced)?;
    Ok((sv, coef, stats.total_weight_degradation))
}
