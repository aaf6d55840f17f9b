//! The exact kernel machines (SVC, SVR, one-class; ALFPGM or SMO) and the kernel rows their
//! solvers compute.

use numpy::{IntoPyArray, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::convert::{cache_bytes, dict, slice1, Features};
use super::runtime::{detached, run_on_rows};
use crate::core::data::rows::Rows;
use crate::core::exact::alfpgm::{AlfpgmParams, InnerSolver};
use crate::core::exact::machines::{
    train_kernel_nu_svc, train_kernel_svc, train_one_class, train_regression, ExactModel,
    ExactParams, ExactSolver, SvrFormulation,
};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_cache::KernelRowCache;

/// Trains an exact kernel machine (ALFPGM or SMO on one dual problem): `problem` 'svc' or
/// 'nu_svc' (target: uint32 class indices in 0..n_classes, one-vs-one pairs), 'svr' or 'nu_svr'
/// (target: float64 values) or 'one_class' (no target). A precomputed kernel takes x as the dense n x n Gram matrix. Returns
/// one dict per problem solved (one per class pair for 'svc', with its "classes").
#[pyfunction]
#[pyo3(signature = (x, target, *, problem, n_classes = 0, c = 1.0, epsilon = 0.1, nu = 0.5, kernel = "rbf", gamma = 1.0, coef0 = 0.0, degree = 3, solver = "alfpgm", shrinking = true, shared_rows = true, tol = 1e-3, cache_size = 200.0, max_iter = 0, n_threads = None, n_pairs = 50, min_alpha_opt = 5, max_alpha_opt = 500, min_alpha_check = 0, pair_ratio = 0.5, alpha_delta_threshold = 1e-5, al_penalty = 0.0, al_max_iter = 20, fista_max_iter = 500, inner_tol_factor = 0.1, inner_rel = 0.1, power_iters = 8, lipschitz_safety = 1.1, restart = true, inner = "smo", report_every = None, callback = None, sample_weight = None))]
#[allow(clippy::too_many_arguments)]
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
    };
    let valid = params.check()?;
    let need_target = |what: &str| {
        target.ok_or_else(|| PyValueError::new_err(format!("problem {problem:?} needs {what}")))
    };
    let weights = sample_weight.as_ref();
    let models: Vec<(Option<(u32, u32)>, ExactModel)> = match problem {
        "svc" => {
            let y: PyReadonlyArray1<'py, u32> = need_target("class indices")?.extract()?;
            let y = slice1(&y)?;
            run_on_rows(py, x, weights, callback, None, |job| {
                train_kernel_svc(job.rows, y, job.weights, n_classes, &valid, job.monitor)
            })?
            .into_iter()
            .map(|p| (Some(p.classes), p.model))
            .collect()
        }
        "nu_svc" => {
            let y: PyReadonlyArray1<'py, u32> = need_target("class indices")?.extract()?;
            let y = slice1(&y)?;
            run_on_rows(py, x, weights, callback, None, |job| {
                train_kernel_nu_svc(job.rows, y, job.weights, n_classes, nu, &valid, job.monitor)
            })?
            .into_iter()
            .map(|p| (Some(p.classes), p.model))
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
            let model = run_on_rows(py, x, weights, callback, None, |job| {
                train_regression(job.rows, z, job.weights, formulation, &valid, job.monitor)
            })?;
            vec![(None, model)]
        }
        "one_class" => {
            let model = run_on_rows(py, x, weights, callback, None, |job| {
                train_one_class(job.rows, job.weights, nu, &valid, job.monitor)
            })?;
            vec![(None, model)]
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "problem must be 'svc', 'nu_svc', 'svr', 'nu_svr' or 'one_class', got {other:?}"
            )))
        }
    };
    let out = PyList::empty(py);
    for (classes, p) in models {
        let d = PyDict::new(py);
        if let Some((a, b)) = classes {
            d.set_item("classes", (a, b))?;
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
            "min_active" => p.min_active,
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
        let mut cache = KernelRowCache::new(&xr, Kernel::rbf(gamma), bytes)?;
        let got = cache.rows(&idx)?;
        let mut out = Vec::with_capacity(idx.len() * n);
        for k in 0..got.len() {
            out.extend_from_slice(got.row(k));
        }
        Ok((out, cache.stats().seconds))
    })?;
    Ok((out.into_pyarray(py).reshape([idx.len(), n])?, seconds))
}
