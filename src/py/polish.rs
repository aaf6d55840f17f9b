//! The polish (the exact solve of a budgeted model's coefficients over its support vectors) on
//! rows in memory or on a LIBSVM file read in chunks, and the pieces of its distributed form:
//! partitions kept on the workers, the Gram change and the Newton point.

use numpy::{
    IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::convert::{
    cache_bytes, dict, row_major, slice1, sv_matrix, ExpansionArrays, Features, TargetArray,
};
use super::keywords::{keyword_group, keywords};
use super::runtime::{detached, run_checked, run_monitored, run_on_rows};
use crate::core::budgeted::polish::{
    add_gram_factor, conjugate_gradients, polish as polish_solve, preconditioner_ridge,
    settled_step, walk_order, ActiveSums, GramFactor, InMemory, LibsvmFileRows, LineChanges,
    PartitionRows, PieceChange, PolishParams, PolishResult, Preconditioner, SlopeWalk,
    HESSIAN_FREE_BASIS,
};
use crate::core::budgeted::problem::Targets;
use crate::core::common::error::SvmError;
use crate::core::common::parallel;
use crate::core::data::rows::{check_sq_norms, Rows};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block::KernelBlocks;

keyword_group! {
    /// The settings of a polish (`polish`, `polish_file`): C, the Newton iterations' tolerance
    /// and cap, the kernel cache in MB, the starting intercept (None: zeros), the progress
    /// callback, epsilon for a regression, the threads (None: the process-wide setting,
    /// 0: one per core; an estimator's `n_jobs`), and the support vectors from which the solve
    /// is Hessian-free (None: `HESSIAN_FREE_BASIS`; 0: always, forming the Newton system only
    /// when that stalls).
    struct PolishSettings<'py> {
        c: f64,
        tol: f64 = 1e-5,
        max_iter: usize = 50,
        cache_size: f64 = 1024.0,
        intercept: Option<PyReadonlyArray1<'py, f64>> = None,
        callback: Option<Py<PyAny>> = None,
        epsilon: Option<f64> = None,
        n_threads: Option<usize> = None,
        hessian_free_from: Option<usize> = None,
    }
}

impl PolishSettings<'_> {
    /// The solve's parameters, the cache size checked.
    fn params(&self) -> PyResult<PolishParams> {
        let cache_size = self.cache_size;
        if !(cache_size.is_finite() && cache_size >= 0.0) {
            return Err(PyValueError::new_err(format!(
                "cache_size must be a number of MB >= 0, got {cache_size}"
            )));
        }
        Ok(PolishParams {
            c: self.c,
            tol: self.tol,
            max_iter: self.max_iter,
            cache_bytes: cache_bytes(cache_size),
            method: Default::default(),
            hessian_free_basis: self.hessian_free_from.unwrap_or(HESSIAN_FREE_BASIS),
            sample_start: true,
        })
    }
}

/// The polish: the exact solve of a budgeted model's coefficients (and intercepts) over its
/// support vectors on the training rows `x` with class indices `y` (uint32, smoothed hinge), or
/// with real targets `y` (float64) and `epsilon` (squared epsilon-insensitive loss; n_classes is
/// then 0) (`budgeted::polish`). The model and settings (`options`) are those of
/// `ExpansionArrays` and `PolishSettings`. Returns a dict: coef (n_sv, n_out), intercept
/// (n_out), objectives, iterations, statistics.
#[pyfunction]
#[pyo3(signature = (x, y, n_classes, *, sample_weight = None, **options))]
pub fn polish<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    n_classes: usize,
    sample_weight: Option<PyReadonlyArray1<'py, f64>>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (given, settings): (ExpansionArrays<'_>, PolishSettings<'_>) = keywords("polish", options)?;
    let params = settings.params()?;
    let model = given.model()?;
    let n_sv = model.n_sv();
    let y = TargetArray::extract(y, n_classes, settings.epsilon)?;
    let targets = y.targets()?;
    let start = settings.intercept.as_ref().map(slice1).transpose()?;
    let weights = sample_weight.as_ref();
    let n_threads = settings.n_threads;
    let r = run_on_rows(py, x, weights, settings.callback, None, |job| {
        let mut source = InMemory(*job.rows);
        parallel::install_with(n_threads, || {
            polish_solve(
                &model,
                start,
                &mut source,
                targets,
                job.weights,
                &params,
                job.monitor,
            )
        })?
    })?;
    polish_result(py, &r, n_sv, model.n_out)
}

/// The polish's result as a dict.
fn polish_result<'py>(
    py: Python<'py>,
    r: &PolishResult,
    n_sv: usize,
    n_out: usize,
) -> PyResult<Bound<'py, PyDict>> {
    dict!(PyDict::new(py), {
        "coef" => PyArray1::from_slice(py, &r.coef).reshape([n_sv, n_out])?,
        "intercept" => PyArray1::from_slice(py, &r.intercept),
        "objective_start" => PyArray1::from_slice(py, &r.objective_start),
        "objective" => PyArray1::from_slice(py, &r.objective),
        "iterations" => r.iterations,
        "converged" => r.converged,
        "cached_rows" => r.cached_rows,
        "passes" => r.passes,
        "active_changes" => r.active_changes,
        "cg_products" => r.cg_products,
        "system_from" => r.system_from,
        "squared_rows" => r.squared_rows,
        "recomputed_rows" => r.recomputed_rows,
        "kept_bytes" => r.kept_bytes,
        "sample_rows" => r.sample_rows,
        "sample_seconds" => r.sample_seconds,
        "kernel_seconds" => r.kernel_seconds,
        "gram_seconds" => r.gram_seconds,
        "solve_seconds" => r.solve_seconds,
        "seconds" => r.seconds,
    })
}

/// The polish of a model trained on a LIBSVM file (`fit_file`): the file is read once for its
/// labels, then again in chunks of `chunk_rows` lines on every pass of the solve, never whole.
/// `classes` are the file's sorted labels; `class_weights` (one per class) weigh the rows. With
/// `pair` = (a, b), indices into `classes`, a binary model of one-vs-one's pair (a, b) is
/// polished on the rows of those two classes only, b positive (the other rows are read and
/// skipped). The model and settings (`options`) are `polish`'s.
#[pyfunction]
#[pyo3(signature = (path, chunk_rows, width, classes, *, class_weights = None, pair = None, **options))]
pub fn polish_file<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    chunk_rows: usize,
    width: usize,
    classes: PyReadonlyArray1<'py, f64>,
    class_weights: Option<PyReadonlyArray1<'py, f64>>,
    pair: Option<(u32, u32)>,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (given, settings): (ExpansionArrays<'_>, PolishSettings<'_>) =
        keywords("polish_file", options)?;
    let params = settings.params()?;
    let model = given.model()?;
    let epsilon = settings.epsilon;
    let classes = slice1(&classes)?;
    if epsilon.is_some() && (!classes.is_empty() || class_weights.is_some() || pair.is_some()) {
        return Err(PyValueError::new_err(
            "a regression polish (epsilon given) takes no classes, class weights or pair",
        ));
    }
    let class_weights = class_weights.as_ref().map(slice1).transpose()?;
    if class_weights.is_some_and(|w| w.len() != classes.len()) {
        return Err(PyValueError::new_err(
            "one class weight per class is needed",
        ));
    }
    let start = settings.intercept.as_ref().map(slice1).transpose()?;
    let n_threads = settings.n_threads;
    let r = run_monitored(py, settings.callback, None, |monitor, _| {
        parallel::install_with(n_threads, || {
            if let Some(epsilon) = epsilon {
                let (mut source, z) = LibsvmFileRows::open_values(&path, chunk_rows, width)?;
                let targets = Targets::Values { y: &z, epsilon };
                return polish_solve(&model, start, &mut source, targets, None, &params, monitor);
            }
            let (mut source, y) = match pair {
                Some(pair) => LibsvmFileRows::open_pair(&path, chunk_rows, width, classes, pair)?,
                None => LibsvmFileRows::open(&path, chunk_rows, width, classes)?,
            };
            // A pair's targets are 0 for its first class and 1 for its second.
            let class_of = |k: u32| match pair {
                Some((a, b)) => [a, b][k as usize] as usize,
                None => k as usize,
            };
            let weights: Option<Vec<f64>> =
                class_weights.map(|w| y.iter().map(|&k| w[class_of(k)]).collect());
            let targets = Targets::Classes {
                y: &y,
                n_classes: if pair.is_some() { 2 } else { classes.len() },
            };
            polish_solve(
                &model,
                start,
                &mut source,
                targets,
                weights.as_deref(),
                &params,
                monitor,
            )
        })?
    })?;
    polish_result(py, &r, model.n_sv(), model.n_out)
}

/// One partition's rows of a distributed polish, kept on the worker that holds them: their
/// kernel values against the basis, computed once (`budgeted::polish::PartitionRows`).
#[pyclass(module = "budgetsvm._budgetsvm")]
pub struct PolishPartition {
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
        let xr = features.finite_rows()?;
        if xr.n_cols() != dim {
            return Err(PyValueError::new_err(format!(
                "X has {} features, the support vectors {dim}",
                xr.n_cols()
            )));
        }
        let y = TargetArray::extract(y, n_classes, epsilon)?;
        let targets = y.targets()?;
        let weights = sample_weight.as_ref().map(slice1).transpose()?;
        let rows = detached(py, || {
            let blocks = KernelBlocks::from_sv_matrix(&sv, n_sv, dim, Kernel::rbf(gamma))?;
            check_sq_norms(blocks.sq_norms(), "support vector")?;
            PartitionRows::new(&blocks, &xr, targets, weights)
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

    /// The partition's part of the exact line search along (dir_coef, dir_intercept) from
    /// the counted point (`PartitionRows::line_changes`): a dict of a, b and flips (n_out
    /// each: phi'(0)'s sums and the rows changing piece within the full step), and per output
    /// the piece changes beyond `start[k]` (at most about `most`, the smallest first) as
    /// lists of t, da and db arrays, with complete_to (n_out).
    fn line_changes<'py>(
        &self,
        py: Python<'py>,
        counted_coef: PyReadonlyArray2<'py, f64>,
        counted_intercept: PyReadonlyArray1<'py, f64>,
        dir_coef: PyReadonlyArray2<'py, f64>,
        dir_intercept: PyReadonlyArray1<'py, f64>,
        c: f64,
        start: PyReadonlyArray1<'py, f64>,
        most: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let cc: Vec<f64> = row_major(&counted_coef);
        let dc: Vec<f64> = row_major(&dir_coef);
        let (cb, db) = (slice1(&counted_intercept)?, slice1(&dir_intercept)?);
        let start = slice1(&start)?;
        let LineChanges {
            a,
            b,
            flips,
            changes,
            complete_to,
        } = detached(py, || {
            self.rows.line_changes((&cc, cb), (&dc, db), c, start, most)
        })?;
        let column = |pick: fn(&PieceChange) -> f64| -> PyResult<Bound<'py, PyList>> {
            let arrays = changes.iter().map(|changes| {
                let values: Vec<f64> = changes.iter().map(pick).collect();
                values.into_pyarray(py)
            });
            PyList::new(py, arrays)
        };
        dict!(PyDict::new(py), {
            "a" => a.into_pyarray(py),
            "b" => b.into_pyarray(py),
            "flips" => flips.into_pyarray(py),
            "t" => column(|change| change.t)?,
            "da" => column(|change| change.da)?,
            "db" => column(|change| change.db)?,
            "complete_to" => complete_to.into_pyarray(py),
        })
    }

    /// The partition's sums between the counted point (None: no row counted yet) and the
    /// trial point: a dict of loss_counted, loss_trial, slope, flips (n_out each), s and u
    /// (n_out, m), sw and swy (n_out), and per output the change of M as `gram` (the upper
    /// triangle packed row by row, m (m + 1) / 2 values) or as `factor` (signed weights and
    /// the changed rows' kernel values, c x m, when fewer bytes), the other None.
    /// With `changes=False` (the Hessian-free direction) only the losses, slope and flips.
    #[pyo3(signature = (trial_coef, trial_intercept, counted_coef = None, counted_intercept = None, *, changes = true))]
    fn sums<'py>(
        &self,
        py: Python<'py>,
        trial_coef: PyReadonlyArray2<'py, f64>,
        trial_intercept: PyReadonlyArray1<'py, f64>,
        counted_coef: Option<PyReadonlyArray2<'py, f64>>,
        counted_intercept: Option<PyReadonlyArray1<'py, f64>>,
        changes: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let tc: Vec<f64> = row_major(&trial_coef);
        let tb = slice1(&trial_intercept)?;
        let cc: Option<Vec<f64>> = counted_coef.as_ref().map(row_major);
        let cb = counted_intercept.as_ref().map(slice1).transpose()?;
        let counted = match (&cc, cb) {
            (Some(c), Some(b)) => Some((&c[..], b)),
            (None, None) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "counted_coef and counted_intercept go together",
                ))
            }
        };
        let r = detached(py, || self.rows.sums(counted, (&tc, tb), changes))?;
        let losses = |d: Bound<'py, PyDict>| {
            dict!(d, {
                "loss_counted" => PyArray1::from_slice(py, &r.loss_counted),
                "loss_trial" => PyArray1::from_slice(py, &r.loss_trial),
                "slope" => PyArray1::from_slice(py, &r.slope),
                "flips" => PyArray1::from_slice(py, &r.flips),
            })
        };
        if !changes {
            return losses(PyDict::new(py));
        }
        let (m, q) = (self.m, self.n_out);
        let flat = |f: &dyn Fn(&ActiveSums) -> &[f64]| -> Vec<f64> {
            r.change.iter().flat_map(|c| f(c).iter().copied()).collect()
        };
        let grams = PyList::empty(py);
        let factors = PyList::empty(py);
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
        let sw: Vec<f64> = r.change.iter().map(|c| c.sw).collect();
        let swy: Vec<f64> = r.change.iter().map(|c| c.swy).collect();
        dict!(losses(PyDict::new(py))?, {
            "gram" => grams,
            "factor" => factors,
            "s" => flat(&|c| &c.s).into_pyarray(py).reshape([q, m])?,
            "u" => flat(&|c| &c.u).into_pyarray(py).reshape([q, m])?,
            "sw" => PyArray1::from_slice(py, &sw),
            "swy" => PyArray1::from_slice(py, &swy),
        })
    }

    /// The partition's part of the Hessian-free direction at the point (coef m x n_out,
    /// intercept n_out): a dict of loss and weight (n_out each: sum w loss, the squared terms'
    /// sum w) and gradient (n_out, m + 1: sum w hs k, then sum w hs)
    /// (`PartitionRows::gradient`).
    fn gradient<'py>(
        &self,
        py: Python<'py>,
        coef: PyReadonlyArray2<'py, f64>,
        intercept: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let c: Vec<f64> = row_major(&coef);
        let b = slice1(&intercept)?;
        let r = detached(py, || self.rows.gradient((&c, b)))?;
        let (m, q) = (self.m, self.n_out);
        dict!(PyDict::new(py), {
            "loss" => PyArray1::from_slice(py, &r.loss),
            "weight" => PyArray1::from_slice(py, &r.weight),
            "gradient" => r.gradient.into_pyarray(py).reshape([q, m + 1])?,
        })
    }

    /// The partition's part of the Hessian's products at the point with `v` (n_out, m + 1):
    /// per output sum w (k . v + v_b) k and its sum over the rows squared at the point
    /// (`PartitionRows::hessian_product`), (n_out, m + 1).
    fn hessian_product<'py>(
        &self,
        py: Python<'py>,
        coef: PyReadonlyArray2<'py, f64>,
        intercept: PyReadonlyArray1<'py, f64>,
        v: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c: Vec<f64> = row_major(&coef);
        let b = slice1(&intercept)?;
        let v: Vec<f64> = row_major(&v);
        let out = detached(py, || self.rows.hessian_product((&c, b), &v))?;
        Ok(out
            .into_pyarray(py)
            .reshape([self.n_out, self.m + 1])?
            .into_any())
    }
}

/// The polish's preconditioner for a distributed polish's conjugate gradients on the driver
/// (`conjugate_gradient::Preconditioner`, the serial solve's): from K_SS, rescaled to the
/// squared rows' weight, applied to residuals of m + 1 values.
#[pyclass(module = "budgetsvm._budgetsvm")]
pub struct PolishPreconditioner {
    inner: Preconditioner,
    m: usize,
    ridge: f64,
}

#[pymethods]
impl PolishPreconditioner {
    /// From K_SS (m x m) with the serial solve's ridge; ValueError when it cannot be factored.
    #[new]
    fn new(py: Python<'_>, kss: PyReadonlyArray2<'_, f64>) -> PyResult<Self> {
        let shape = kss.shape();
        let m = shape[0];
        if shape[1] != m {
            return Err(PyValueError::new_err("K_SS must be square"));
        }
        let kss: Vec<f64> = row_major(&kss);
        let ridge = preconditioner_ridge(&kss, m);
        let inner = run_checked(py, |check| {
            Preconditioner::new(&kss, m, ridge, check)?.ok_or_else(|| {
                SvmError::invalid_input("the polish's preconditioner could not be factorised")
            })
        })?;
        Ok(PolishPreconditioner { inner, m, ridge })
    }

    /// The ridge of K_SS's factor, which the Hessian's products add too (`ridge * v`).
    #[getter]
    fn ridge(&self) -> f64 {
        self.ridge
    }

    /// The scale a of the last rescale (NaN before).
    #[getter]
    fn scale(&self) -> f64 {
        self.inner.scale()
    }

    /// Factors the preconditioner for the scale a = 2C sum_Q w / m; False when it fails.
    fn rescale(&mut self, py: Python<'_>, a: f64) -> PyResult<bool> {
        let inner = &mut self.inner;
        run_checked(py, |check| inner.rescale(a, check))
    }

    /// Solves H_k x_k = rhs_k for each row k of `rhs` (q x (m + 1)) by the serial polish's
    /// preconditioned conjugate gradients (`conjugate_gradient::solve_many`), row k's
    /// intercept curvature `intercepts[k]`, its relative residual `rel_tols[k]`, at most
    /// `max_products` steps; each step calls `product(v, running)` (v q x (m + 1), running a
    /// bool per row), which returns H_k v_k for the running rows (q x (m + 1); the other rows
    /// are not read): a distributed polish's round over its workers. Returns (x, steps); an
    /// exception raised by `product` is re-raised.
    #[pyo3(signature = (rhs, intercepts, rel_tols, max_products, product))]
    fn solve<'py>(
        &self,
        py: Python<'py>,
        rhs: PyReadonlyArray2<'py, f64>,
        intercepts: PyReadonlyArray1<'py, f64>,
        rel_tols: PyReadonlyArray1<'py, f64>,
        max_products: usize,
        product: Py<PyAny>,
    ) -> PyResult<(Bound<'py, numpy::PyArray2<f64>>, usize)> {
        let (q, p) = (rhs.shape()[0], rhs.shape()[1]);
        let (intercepts, rel_tols) = (slice1(&intercepts)?, slice1(&rel_tols)?);
        if p != self.m + 1 || intercepts.len() != q || rel_tols.len() != q {
            return Err(PyValueError::new_err(format!(
                "rhs must be q x {} with one intercept curvature and one tolerance per row",
                self.m + 1
            )));
        }
        if !self.inner.scale().is_finite() {
            return Err(PyValueError::new_err(
                "the preconditioner solves after a rescale",
            ));
        }
        // p = m + 1 >= 1 (checked above).
        let b: Vec<Vec<f64>> = row_major(&rhs).chunks(p).map(<[f64]>::to_vec).collect();
        let mut raised: Option<PyErr> = None;
        let solved = detached(py, || {
            let mut hv = |v: &[Vec<f64>], running: &[bool], out: &mut [Vec<f64>]| {
                Python::attach(|py| -> PyResult<()> {
                    let v = numpy::PyArray2::from_vec2(py, v)?;
                    let running = PyArray1::from_slice(py, running);
                    let result = product.call1(py, (v, running))?;
                    let result: PyReadonlyArray2<'_, f64> = result.extract(py)?;
                    if result.shape() != [q, p] {
                        return Err(PyValueError::new_err(format!(
                            "product must return a {q} x {p} array"
                        )));
                    }
                    let values = row_major(&result);
                    for (k, o) in out.iter_mut().enumerate() {
                        o.copy_from_slice(&values[k * p..(k + 1) * p]);
                    }
                    Ok(())
                })
                .map_err(|e| {
                    raised = Some(e);
                    SvmError::Interrupted
                })
            };
            conjugate_gradients(&mut hv, &self.inner, intercepts, &b, rel_tols, max_products)
        });
        if let Some(e) = raised {
            return Err(e);
        }
        let (x, steps) = solved?;
        Ok((numpy::PyArray2::from_vec2(py, &x)?, steps))
    }
}

/// Adds a partition's change of M (`PolishPartition.sums`: a packed upper triangle, or a
/// factor of signed weights and rows) to `gram` (m x m, upper triangle), in place.
#[pyfunction]
#[pyo3(signature = (gram, *, packed = None, weights = None, rows = None))]
pub fn add_gram_change<'py>(
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
            let p = slice1(&p)?;
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
                weights: slice1(&w)?.to_vec(),
                rows: row_major(&r),
            };
            detached(py, || add_gram_factor(g, m, &factor))
        }
        _ => Err(PyValueError::new_err(
            "give either packed, or weights and rows",
        )),
    }
}

/// The step the polish's line search takes without walking any piece change
/// (`settled_step`), or None: from phi'(0) = a and phi'' = b on the first piece, whether any
/// row changes piece within the full step, and whether the direction is a Newton system's.
#[pyfunction]
pub fn polish_settled_step(a: f64, b: f64, flips: bool, exact_step: bool) -> Option<f64> {
    settled_step(a, b, flips, exact_step)
}

/// The distributed line search's walk on the driver (`SlopeWalk`): from `walk` = (a, b, t),
/// phi' = a + b t from t on, over the partitions' piece changes (t, da, db in any order),
/// which are complete up to `complete_to`. Returns (step, walk): the step once the root is
/// known (`step_of`), else None and the walk to go on from complete_to with the changes beyond.
#[pyfunction]
pub fn polish_line_walk<'py>(
    walk: (f64, f64, f64),
    t: PyReadonlyArray1<'py, f64>,
    da: PyReadonlyArray1<'py, f64>,
    db: PyReadonlyArray1<'py, f64>,
    complete_to: f64,
) -> PyResult<(Option<f64>, (f64, f64, f64))> {
    let (t, da, db) = (slice1(&t)?, slice1(&da)?, slice1(&db)?);
    if da.len() != t.len() || db.len() != t.len() || complete_to.is_nan() {
        return Err(PyValueError::new_err(
            "the line search's changes need as many t, da and db values, and complete_to",
        ));
    }
    let mut changes: Vec<PieceChange> = (0..t.len())
        .filter(|&row| t[row] <= complete_to)
        .map(|row| PieceChange {
            t: t[row],
            row,
            da: da[row],
            db: db[row],
        })
        .collect();
    changes.sort_unstable_by(walk_order);
    let (a, b, from) = walk;
    let mut walk = SlopeWalk { a, b, t: from };
    let step = walk.walk_to(&changes, complete_to);
    Ok((step, (walk.a, walk.b, walk.t)))
}

/// The minimiser (beta, b) of the polish's quadratic model for the active-set sums given
/// (`ActiveSums::newton_point`, the serial solve's own; `intercept` the current one, kept when
/// no term is squared): m + 1 values.
#[pyfunction]
pub fn polish_newton_point<'py>(
    py: Python<'py>,
    kss: PyReadonlyArray2<'py, f64>,
    gram: PyReadonlyArray2<'py, f64>,
    s: PyReadonlyArray1<'py, f64>,
    u: PyReadonlyArray1<'py, f64>,
    sw: f64,
    swy: f64,
    c: f64,
    intercept: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let sums = ActiveSums {
        gram: row_major(&gram),
        s: slice1(&s)?.to_vec(),
        u: slice1(&u)?.to_vec(),
        sw,
        swy,
    };
    let kss: Vec<f64> = row_major(&kss);
    let x = run_checked(py, |check| sums.newton_point(&kss, c, intercept, check))?;
    Ok(x.into_pyarray(py))
}
