//! The exact kernel machines (SVC, SVR, one-class; ALFPGM or SMO) and the kernel rows their
//! solvers compute.

use std::sync::Mutex;

use numpy::{IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::convert::{cache_bytes, dict, slice1, Features};
use super::runtime::{detached, run_on_rows};
use crate::core::common::error::SvmError;
use crate::core::common::progress::{Monitor, Progress};
use crate::core::data::rows::{AnyRows, Rows};
use crate::core::exact::alfpgm::{AlfpgmParams, InnerSolver};
use crate::core::exact::dual::RowPrecision;
use crate::core::exact::machines::{
    train_one_class, train_one_vs_one_path, train_regression_path, ExactModel, ExactParams,
    ExactSolver, KernelFrom, SvcFormulation, SvrFormulation,
};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_cache::KernelRowCache;
use crate::core::kernels::kernel_rows::Scratch;
use crate::core::kernels::source_rows::RowProducer;

/// A callable kernel's rows, produced by a Python function of the row indices (the estimator's
/// `k(X[rows], X)`, checked there). Its first error is kept to be raised as it was; the fit's
/// store then asks nothing more, and the monitor stops the solver (`run_watched`).
struct PythonKernelRows {
    function: Py<PyAny>,
    n: usize,
    error: Mutex<Option<PyErr>>,
}

impl PythonKernelRows {
    fn call(&self, rows: &[u32], out: &mut [&mut [f64]]) -> PyResult<()> {
        Python::attach(|py| {
            let idx: Vec<i64> = rows.iter().map(|&g| i64::from(g)).collect();
            let values = self.function.call1(py, (PyArray1::from_vec(py, idx),))?;
            let values: PyReadonlyArray2<'_, f64> = values.extract(py)?;
            let values = values.as_array();
            let shape = values.shape();
            if shape != [rows.len(), self.n] {
                return Err(PyValueError::new_err(format!(
                    "the kernel rows have shape {shape:?}; expected ({}, {})",
                    rows.len(),
                    self.n
                )));
            }
            for (row, got) in out.iter_mut().zip(values.rows()) {
                for (o, &v) in row.iter_mut().zip(got.iter()) {
                    *o = v;
                }
            }
            Ok(())
        })
    }

    /// Whether the function failed (its error is kept).
    fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// `run_on_rows` for an exact machine whose kernel rows may come from Python (`kernel`): its
/// monitor stops the solver as soon as the kernel function failed, and the function's error
/// is then raised as it was.
fn run_watched<'py, T: Send>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    weights: Option<&PyReadonlyArray1<'py, f64>>,
    callback: Option<Py<PyAny>>,
    kernel: Option<&PythonKernelRows>,
    train: impl FnOnce(&AnyRows<'_>, Option<&[f64]>, Monitor<'_>) -> Result<T, SvmError> + Send,
) -> PyResult<T> {
    let result = run_on_rows(py, x, weights, callback, None, |job| {
        let monitor = job.monitor;
        let mut watched = |p: &Progress| {
            if kernel.is_some_and(|k| k.failed()) {
                return Err(SvmError::Interrupted);
            }
            monitor(p)
        };
        train(job.rows, job.weights, &mut watched)
    });
    let error = kernel.and_then(|k| k.error.lock().unwrap_or_else(|p| p.into_inner()).take());
    match error {
        Some(e) => Err(e),
        None => result,
    }
}

impl RowProducer for PythonKernelRows {
    fn n(&self) -> usize {
        self.n
    }

    fn produce(
        &self,
        rows: &[u32],
        out: &mut [&mut [f64]],
        _: &mut Scratch,
    ) -> Result<u64, SvmError> {
        self.call(rows, out).map_err(|e| {
            let message = e.to_string();
            self.error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
            SvmError::invalid_input(format!("the kernel function failed: {message}"))
        })?;
        Ok((rows.len() * self.n) as u64)
    }
}

/// A problem solved by `fit_exact`: its C, its pair's classes (C-SVC, nu-SVC), its model.
type SolvedProblem = (f64, Option<(u32, u32)>, ExactModel);

/// Trains an exact kernel machine (ALFPGM or SMO on one dual problem): `problem` 'svc' or
/// 'nu_svc' (target: uint32 class indices in 0..n_classes, one-vs-one pairs), 'svr' or 'nu_svr'
/// (target: float64 values) or 'one_class' (no target). A precomputed kernel takes x as the dense n x n Gram matrix. Returns
/// one dict per problem solved (one per class pair for 'svc', with its "classes"). With `cs`
/// ('svc' and 'svr' only), a C path: the problems solved for every C of `cs` in turn, each
/// warm-started from the last C's solution over one kernel-row cache (`c` is then unused);
/// the dicts come C after C, each with its "c".
#[pyfunction]
#[pyo3(signature = (x, target, *, problem, n_classes = 0, c = 1.0, epsilon = 0.1, nu = 0.5, kernel = "rbf", gamma = 1.0, coef0 = 0.0, degree = 3, solver = "alfpgm", shrinking = true, shared_rows = true, tol = 1e-3, cache_size = 200.0, max_iter = 0, n_threads = None, n_pairs = 50, min_alpha_opt = 5, max_alpha_opt = 500, min_alpha_check = 0, pair_ratio = 0.5, alpha_delta_threshold = 1e-5, al_penalty = 0.0, al_max_iter = 20, fista_max_iter = 500, inner_tol_factor = 0.1, inner_rel = 0.1, power_iters = 8, lipschitz_safety = 1.1, restart = true, inner = "smo", report_every = None, callback = None, sample_weight = None, kernel_rows = None, diagonal = None, row_precision = "auto", cs = None))]
pub fn fit_exact<'py>(
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
    kernel_rows: Option<Py<PyAny>>,
    diagonal: Option<PyReadonlyArray1<'py, f64>>,
    row_precision: &str,
    cs: Option<Vec<f64>>,
) -> PyResult<Bound<'py, PyList>> {
    if !(cache_size.is_finite() && cache_size > 0.0) {
        return Err(PyValueError::new_err(format!(
            "cache_size must be a positive number of MB, got {cache_size}"
        )));
    }
    let params = ExactParams {
        c,
        kernel: Kernel::parse(kernel, gamma, coef0, degree)?,
        tol,
        cache_bytes: cache_bytes(cache_size),
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
        row_precision: match row_precision {
            "auto" => None,
            "float32" => Some(RowPrecision::F32),
            "float64" => Some(RowPrecision::F64),
            other => {
                return Err(PyValueError::new_err(format!(
                    "row_precision must be 'auto', 'float32' or 'float64', got {other:?}"
                )))
            }
        },
    };
    let valid = params.check()?;
    let need_target = |what: &str| {
        target.ok_or_else(|| PyValueError::new_err(format!("problem {problem:?} needs {what}")))
    };
    let weights = sample_weight.as_ref();
    // A callable kernel beyond the cache: its rows from Python on request, kept by the fit in a
    // store of cache_size bytes that every problem of the fit gathers from (x is then n rows
    // of no features).
    let diagonal = diagonal.as_ref().map(slice1).transpose()?;
    let function = match (&kernel_rows, diagonal) {
        (Some(function), Some(diagonal)) => Some(PythonKernelRows {
            function: function.clone_ref(py),
            n: diagonal.len(),
            error: Mutex::new(None),
        }),
        (None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "kernel_rows and diagonal come together",
            ))
        }
    };
    let from = match (&function, diagonal) {
        (Some(rows), Some(diagonal)) => KernelFrom::Producer { rows, diagonal },
        _ => KernelFrom::Features,
    };
    let store = function.as_ref();
    let path = cs.is_some();
    if path && !matches!(problem, "svc" | "svr") {
        return Err(PyValueError::new_err(format!(
            "a C path (cs) is for problem 'svc' or 'svr', not {problem:?}"
        )));
    }
    let cs = cs.unwrap_or_else(|| vec![c]);
    // C after C.
    let models: Vec<SolvedProblem> = match problem {
        "svc" | "nu_svc" => {
            let y: PyReadonlyArray1<'py, u32> = need_target("class indices")?.extract()?;
            let y = slice1(&y)?;
            let formulation = if problem == "svc" {
                SvcFormulation::C
            } else {
                SvcFormulation::Nu(nu)
            };
            let by_c = run_watched(py, x, weights, callback, store, |rows, w, m| {
                train_one_vs_one_path(rows, y, w, n_classes, formulation, &cs, &valid, from, m)
            })?;
            cs.iter()
                .zip(by_c)
                .flat_map(|(&c, pairs)| {
                    pairs
                        .into_iter()
                        .map(move |p| (c, Some(p.classes), p.model))
                })
                .collect()
        }
        "svr" | "nu_svr" => {
            let z: PyReadonlyArray1<'py, f64> = need_target("targets")?.extract()?;
            let z = slice1(&z)?;
            let formulation = if problem == "svr" {
                SvrFormulation::Epsilon(epsilon)
            } else {
                SvrFormulation::Nu(nu)
            };
            let by_c = run_watched(py, x, weights, callback, store, |rows, w, m| {
                train_regression_path(rows, z, w, formulation, &cs, &valid, from, m)
            })?;
            cs.iter()
                .zip(by_c)
                .map(|(&c, model)| (c, None, model))
                .collect()
        }
        "one_class" => {
            let model = run_watched(py, x, weights, callback, store, |rows, w, m| {
                train_one_class(rows, w, nu, &valid, from, m)
            })?;
            vec![(c, None, model)]
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "problem must be 'svc', 'nu_svc', 'svr', 'nu_svr' or 'one_class', got {other:?}"
            )))
        }
    };
    let out = PyList::empty(py);
    for (c, classes, p) in models {
        let d = PyDict::new(py);
        if let Some((a, b)) = classes {
            d.set_item("classes", (a, b))?;
        }
        if path {
            d.set_item("c", c)?;
        }
        let support: Vec<i64> = p.support.iter().map(|&i| i as i64).collect();
        let d = dict!(d, {
            "support" => support.into_pyarray(py),
            "coef" => p.coef.into_pyarray(py),
            "rho" => p.rho,
            "objective" => p.objective,
            "iterations" => p.iterations,
            "converged" => p.converged,
            "gap" => p.gap,
            "fallback_steps" => p.fallback_steps,
            "inner_iterations" => p.inner_iterations,
            "working_sets" => p.working_sets,
            "cache_hits" => p.cache.hits,
            "cache_misses" => p.cache.misses,
            "kernel_seconds" => p.cache.seconds,
            "kernel_values" => p.cache.values,
            "row_precision" => if p.cache.value_bytes == 8 { "float64" } else { "float32" },
            "min_active" => p.min_active,
            "strides" => p.strides,
            "r" => p.r,
            "seconds" => p.seconds,
            "n_rows" => p.n_rows,
        })?;
        out.append(d)?;
    }
    Ok(out)
}

/// Kernel rows K[i, :] for the given row indices, computed as the solvers compute them (one
/// parallel batch of the kernel-row cache, f32): (rows, seconds spent computing).
#[pyfunction]
pub fn kernel_rows<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    gamma: f64,
    rows: PyReadonlyArray1<'py, i64>,
) -> PyResult<(Bound<'py, PyArray2<f32>>, f64)> {
    let features = Features::extract(x)?;
    let xr = features.rows()?;
    let idx: Vec<usize> = slice1(&rows)?
        .iter()
        .map(|&i| usize::try_from(i).map_err(|_| PyValueError::new_err("negative row index")))
        .collect::<PyResult<_>>()?;
    let n = xr.n_rows();
    let (out, seconds) = detached(py, || {
        let bytes = idx.len().max(2) * n.max(1) * std::mem::size_of::<f32>();
        let mut cache = KernelRowCache::<_, f32>::new(&xr, Kernel::rbf(gamma), bytes)?;
        let got = cache.rows(&idx)?;
        let mut out = Vec::with_capacity(idx.len() * n);
        for k in 0..got.len() {
            out.extend_from_slice(got.row(k));
        }
        Ok((out, cache.stats().seconds))
    })?;
    Ok((out.into_pyarray(py).reshape([idx.len(), n])?, seconds))
}
