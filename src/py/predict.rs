//! Prediction: decision values of a kernel expansion (from its support vectors or from
//! precomputed kernel values) and the RBF kernel matrix.

use numpy::{
    IntoPyArray, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

use super::convert::{row_major, slice1, sv_matrix, Features};
use super::error::no_panic;
use super::runtime::{detached, run_interruptibly};
use crate::core::budget::model::decision_of_expansion;
use crate::core::common::error::SvmError;
use crate::core::common::parallel;
use crate::core::data::rows::{check_finite, Rows};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block::{self, decision_from_kernel_values, Outputs};

/// RBF kernel matrix exp(-gamma |x_i - y_j|^2) of two feature matrices (dense or CSR parts), on
/// `n_threads` threads (None: the process-wide setting, 0: one per core).
#[pyfunction]
#[pyo3(signature = (x, y, gamma, *, n_threads = None))]
pub fn rbf_kernel<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    y: &Bound<'py, PyAny>,
    gamma: f64,
    n_threads: Option<usize>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (fx, fy) = (Features::extract(x)?, Features::extract(y)?);
    let (xr, yr) = (fx.rows()?, fy.rows()?);
    let (n, m) = (xr.n_rows(), yr.n_rows());
    let out = detached(py, || {
        filled(n_threads, n * m, |out| {
            kernel_block::kernel_matrix(&xr, &yr, gamma, out)
        })
    })?;
    out.into_pyarray(py).reshape([n, m])
}

/// `len` values that `fill` writes on `n_threads` threads (None: the process-wide setting, 0:
/// one per core).
fn filled(
    n_threads: Option<usize>,
    len: usize,
    fill: impl FnOnce(&mut [f64]) -> Result<(), SvmError> + Send,
) -> Result<Vec<f64>, SvmError> {
    let mut out = vec![0.0; len];
    parallel::install_with(n_threads, || fill(&mut out))??;
    Ok(out)
}

/// A kernel expansion's outputs over `n_sv` vectors from Python's arrays: `coef` n_sv x n_out;
/// or with `class_counts` (the vectors grouped by class) (n_classes - 1) x n_sv one-vs-one
/// coefficients (held row-major, with the class starts); or with `group_counts` (the vectors
/// grouped by output, each used by its own output only) 1 x n_sv; and the optional intercept
/// (n_out).
struct Expansion<'a> {
    coef: Vec<f64>,
    layout: Layout,
    n_cols: usize,
    intercept: Option<&'a [f64]>,
}

enum Layout {
    PerVector,
    OneVsOne(Vec<usize>),
    Grouped(Vec<usize>),
}

/// The starts of consecutive groups of the given sizes, ending at the total.
fn group_starts(counts: &PyReadonlyArray1<'_, i64>, name: &str) -> PyResult<Vec<usize>> {
    let mut starts = vec![0usize];
    for &c in slice1(counts)? {
        let c = usize::try_from(c)
            .map_err(|_| PyValueError::new_err(format!("{name} must be non-negative")))?;
        let last = *starts.last().unwrap_or(&0);
        starts.push(
            last.checked_add(c)
                .ok_or_else(|| PyValueError::new_err(format!("{name} overflow")))?,
        );
    }
    Ok(starts)
}

impl<'a> Expansion<'a> {
    fn new(
        coef: &PyReadonlyArray2<'_, f64>,
        class_counts: Option<&PyReadonlyArray1<'_, i64>>,
        group_counts: Option<&PyReadonlyArray1<'_, i64>>,
        intercept: Option<&'a PyReadonlyArray1<'_, f64>>,
        n_sv: usize,
    ) -> PyResult<Self> {
        let coef_values: Vec<f64> = row_major(coef);
        check_finite(&coef_values, "coefficients")?;
        let layout = match (class_counts, group_counts) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "give class_counts (one-vs-one) or group_counts (grouped), not both",
                ))
            }
            (None, None) => {
                if coef.shape()[0] != n_sv {
                    return Err(PyValueError::new_err(
                        "coef must have one row per support vector",
                    ));
                }
                Layout::PerVector
            }
            (Some(counts), None) => {
                let starts = group_starts(counts, "class_counts")?;
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
                Layout::OneVsOne(starts)
            }
            (None, Some(counts)) => {
                let starts = group_starts(counts, "group_counts")?;
                if starts.last() != Some(&n_sv) || starts.len() < 2 {
                    return Err(PyValueError::new_err(
                        "group_counts must give at least one group and add up to the support vectors",
                    ));
                }
                if coef.shape()[0] != 1 || coef.shape()[1] != n_sv {
                    return Err(PyValueError::new_err(
                        "grouped coef must be 1 x n_support_vectors",
                    ));
                }
                Layout::Grouped(starts)
            }
        };
        let intercept = intercept.map(slice1).transpose()?;
        if let Some(b) = intercept {
            check_finite(b, "intercept")?;
        }
        Ok(Expansion {
            coef: coef_values,
            layout,
            n_cols: coef.shape()[1],
            intercept,
        })
    }

    fn outputs(&self) -> Outputs<'_> {
        match &self.layout {
            Layout::PerVector => Outputs::PerVector {
                coef: &self.coef,
                n_out: self.n_cols,
            },
            Layout::OneVsOne(starts) => Outputs::OneVsOne {
                starts,
                coef: &self.coef,
            },
            Layout::Grouped(starts) => Outputs::Grouped {
                starts,
                coef: &self.coef,
            },
        }
    }
}

/// Decision values of a kernel expansion: (n_rows, n_out), on `n_threads` threads (None: the
/// process-wide setting, 0: one per core). `coef` is n_sv x n_out (one coefficient per output
/// and vector), or, with `class_counts` (the vectors grouped by class, LIBSVM's layout),
/// (n_classes - 1) x n_sv one-vs-one coefficients giving one output per class pair, or, with
/// `group_counts` (the vectors grouped by output, BudgetSVC's one-vs-one pairs), 1 x n_sv: one
/// output per group. `intercept` (n_out) is added. The kernel is scikit-learn's (`kernel`, `gamma`, `coef0`, `degree`).
#[pyfunction]
#[pyo3(signature = (support_vectors, coef, gamma, x, *, n_threads = None, class_counts = None, group_counts = None, intercept = None, kernel = "rbf", coef0 = 0.0, degree = 3))]
pub fn decision_function<'py>(
    py: Python<'py>,
    support_vectors: &Bound<'py, PyAny>,
    coef: PyReadonlyArray2<'py, f64>,
    gamma: f64,
    x: &Bound<'py, PyAny>,
    n_threads: Option<usize>,
    class_counts: Option<PyReadonlyArray1<'py, i64>>,
    group_counts: Option<PyReadonlyArray1<'py, i64>>,
    intercept: Option<PyReadonlyArray1<'py, f64>>,
    kernel: &str,
    coef0: f64,
    degree: i64,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let kernel = Kernel::parse(kernel, gamma, coef0, degree)?;
    let (support_vectors, n_sv, dim) = sv_matrix(support_vectors)?;
    let expansion = Expansion::new(
        &coef,
        class_counts.as_ref(),
        group_counts.as_ref(),
        intercept.as_ref(),
        n_sv,
    )?;
    let outputs = expansion.outputs();
    let n_out = outputs.n_out();
    let features = Features::extract(x)?;
    let rows = features.rows()?;
    let n = rows.n_rows();
    let cancel = AtomicBool::new(false);
    let out = run_interruptibly(py, &cancel, || {
        no_panic(|| {
            filled(n_threads, n * n_out, |out| {
                decision_of_expansion(
                    &support_vectors,
                    dim,
                    kernel,
                    &outputs,
                    expansion.intercept,
                    &rows,
                    out,
                    &|| cancel.load(Ordering::Relaxed),
                )
            })
        })
    })?;
    out.into_pyarray(py).reshape([n, n_out])
}

/// Decision values of a kernel expansion from its kernel values (a precomputed kernel):
/// `kernel_values` n_rows x n_sv (k(x_r, s_j)), `coef` and `class_counts` as
/// `decision_function`'s; (n_rows, n_out).
#[pyfunction]
#[pyo3(signature = (kernel_values, coef, *, n_threads = None, class_counts = None, intercept = None))]
pub fn decision_from_kernel<'py>(
    py: Python<'py>,
    kernel_values: PyReadonlyArray2<'py, f64>,
    coef: PyReadonlyArray2<'py, f64>,
    n_threads: Option<usize>,
    class_counts: Option<PyReadonlyArray1<'py, i64>>,
    intercept: Option<PyReadonlyArray1<'py, f64>>,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let (n, n_sv) = (kernel_values.shape()[0], kernel_values.shape()[1]);
    let expansion = Expansion::new(&coef, class_counts.as_ref(), None, intercept.as_ref(), n_sv)?;
    let outputs = expansion.outputs();
    let n_out = outputs.n_out();
    let k = kernel_values
        .as_slice()
        .map_err(|_| PyValueError::new_err("kernel values must be a C-contiguous float64 array"))?;
    check_finite(k, "the precomputed kernel")?;
    let out = detached(py, || {
        filled(n_threads, n * n_out, |out| {
            decision_from_kernel_values(&outputs, expansion.intercept, n_sv, k, out)
        })
    })?;
    out.into_pyarray(py).reshape([n, n_out])
}
