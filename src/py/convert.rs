//! Python objects to core views, without copying (the Python layer has already normalised X to a
//! C-contiguous float64 array or to CSR parts (data, indices, indptr, n_cols) with sorted
//! indices), and core models back to arrays.

use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::keywords::keyword_group;
use crate::core::budget::model::BudgetModel;
use crate::core::budgeted::problem::Targets;
use crate::core::common::error::SvmError;
use crate::core::data::rows::{check_finite, AnyRows, CsrView, DenseView, Rows};
use crate::core::data::sv_matrix::SvMatrix;

/// Borrowed feature matrix as the binding receives it.
pub enum Features<'py> {
    Dense(PyReadonlyArray2<'py, f64>),
    Csr32 {
        values: PyReadonlyArray1<'py, f64>,
        indices: PyReadonlyArray1<'py, i32>,
        indptr: PyReadonlyArray1<'py, i32>,
        n_cols: usize,
    },
    Csr64 {
        values: PyReadonlyArray1<'py, f64>,
        indices: PyReadonlyArray1<'py, i64>,
        indptr: PyReadonlyArray1<'py, i64>,
        n_cols: usize,
    },
}

impl<'py> Features<'py> {
    pub fn extract(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(a) = obj.extract::<PyReadonlyArray2<'py, f64>>() {
            if !a.is_c_contiguous() {
                return Err(PyValueError::new_err("dense X must be C-contiguous"));
            }
            return Ok(Features::Dense(a));
        }
        if let Ok(t) = obj.cast::<PyTuple>() {
            if t.len() == 4 {
                let values = t.get_item(0)?.extract::<PyReadonlyArray1<'py, f64>>()?;
                let n_cols = t.get_item(3)?.extract::<usize>()?;
                if let (Ok(indices), Ok(indptr)) = (
                    t.get_item(1)?.extract::<PyReadonlyArray1<'py, i32>>(),
                    t.get_item(2)?.extract::<PyReadonlyArray1<'py, i32>>(),
                ) {
                    return Ok(Features::Csr32 {
                        values,
                        indices,
                        indptr,
                        n_cols,
                    });
                }
                let indices = t.get_item(1)?.extract::<PyReadonlyArray1<'py, i64>>()?;
                let indptr = t.get_item(2)?.extract::<PyReadonlyArray1<'py, i64>>()?;
                return Ok(Features::Csr64 {
                    values,
                    indices,
                    indptr,
                    n_cols,
                });
            }
        }
        Err(PyTypeError::new_err(
            "X must be a C-contiguous float64 2-D array or a (data, indices, indptr, n_cols) CSR tuple",
        ))
    }
}

impl Features<'_> {
    /// The core view of these arrays (validated: shapes, CSR structure).
    pub fn rows(&self) -> PyResult<AnyRows<'_>> {
        Ok(match self {
            Features::Dense(a) => {
                let shape = a.shape();
                let data = a
                    .as_slice()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                AnyRows::Dense(DenseView::new(data, shape[0], shape[1])?)
            }
            Features::Csr32 {
                values,
                indices,
                indptr,
                n_cols,
            } => AnyRows::Csr32(CsrView::new(
                slice1(indptr)?,
                slice1(indices)?,
                slice1(values)?,
                *n_cols,
            )?),
            Features::Csr64 {
                values,
                indices,
                indptr,
                n_cols,
            } => AnyRows::Csr64(CsrView::new(
                slice1(indptr)?,
                slice1(indices)?,
                slice1(values)?,
                *n_cols,
            )?),
        })
    }
}

impl Features<'_> {
    /// The core view of training rows: `rows`, a dense X's values checked finite.
    pub fn finite_rows(&self) -> PyResult<AnyRows<'_>> {
        let rows = self.rows()?;
        if let AnyRows::Dense(d) = &rows {
            check_finite(d.data(), "X")?;
        }
        Ok(rows)
    }

    /// `finite_rows`, checked to be as many as the `n_targets` training targets.
    pub fn training_rows(&self, n_targets: usize) -> PyResult<AnyRows<'_>> {
        let rows = self.finite_rows()?;
        if rows.n_rows() != n_targets {
            return Err(PyValueError::new_err(format!(
                "x has {} rows but y has {n_targets}",
                rows.n_rows()
            )));
        }
        Ok(rows)
    }
}

/// A cache size in MB (checked finite and non-negative by the caller) in bytes, capped where a
/// byte count overflows.
pub fn cache_bytes(megabytes: f64) -> usize {
    (megabytes * 1024.0 * 1024.0).min(usize::MAX as f64 / 2.0) as usize
}

pub fn slice1<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err("array must be contiguous"))
}

/// A 2-D array's values in row-major order (copied: the array may be strided).
pub fn row_major(a: &PyReadonlyArray2<'_, f64>) -> Vec<f64> {
    a.as_array().iter().copied().collect()
}

/// `$dict` (a fresh `PyDict::new(py)`, or one with entries that come first) with a table of
/// `key => value` entries (values of any type Python takes) added in order, as a `PyResult`: a
/// value that fails to convert fails the whole dict.
macro_rules! dict {
    ($dict:expr, { $($key:literal => $value:expr),* $(,)? }) => {
        (|| -> pyo3::PyResult<_> {
            let dict = $dict;
            $(dict.set_item($key, $value)?;)*
            Ok(dict)
        })()
    };
}
pub(crate) use dict;

/// Targets from Python: class indices (uint32) with their count, or real values (float64) with
/// the regression's epsilon (given exactly when the task is regression).
pub enum TargetArray<'py> {
    Classes(PyReadonlyArray1<'py, u32>, usize),
    Values(PyReadonlyArray1<'py, f64>, f64),
}

impl<'py> TargetArray<'py> {
    pub fn extract(
        y: &Bound<'py, PyAny>,
        n_classes: usize,
        epsilon: Option<f64>,
    ) -> PyResult<Self> {
        Ok(match epsilon {
            None => TargetArray::Classes(y.extract()?, n_classes),
            Some(e) => TargetArray::Values(y.extract()?, e),
        })
    }

    pub fn targets(&self) -> PyResult<Targets<'_>> {
        Ok(match self {
            TargetArray::Classes(y, n_classes) => Targets::Classes {
                y: slice1(y)?,
                n_classes: *n_classes,
            },
            TargetArray::Values(y, epsilon) => Targets::Values {
                y: slice1(y)?,
                epsilon: *epsilon,
            },
        })
    }
}

/// Support vectors as the binding receives them (dense array or CSR parts), copied into the
/// model's form: (matrix, n_sv, n_features).
pub fn sv_matrix(sv: &Bound<'_, PyAny>) -> PyResult<(SvMatrix, usize, usize)> {
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

keyword_group! {
    /// A kernel expansion as the entry points that start from a model take it: support vectors
    /// (dense or CSR parts), `coef` (n_sv, n_out) and the RBF kernel's `gamma`.
    pub struct ExpansionArrays<'py> {
        support_vectors: Bound<'py, PyAny>,
        coef: PyReadonlyArray2<'py, f64>,
        gamma: f64,
    }
}

impl ExpansionArrays<'_> {
    /// The expansion copied into the core's model.
    pub fn model(&self) -> PyResult<BudgetModel> {
        let (support_vectors, n_sv, dim) = sv_matrix(&self.support_vectors)?;
        if self.coef.shape()[0] != n_sv {
            return Err(PyValueError::new_err(
                "coef must have one row per support vector",
            ));
        }
        Ok(BudgetModel {
            dim,
            n_out: self.coef.shape()[1],
            gamma: self.gamma,
            support_vectors,
            coef: row_major(&self.coef),
        })
    }
}

pub type ModelArrays<'py> = (Bound<'py, PyAny>, Bound<'py, PyArray2<f64>>);

/// The model's support vectors (a 2-D array, or CSR parts (data, indices, indptr, n_cols) with
/// int64 indices) and coefficients.
pub fn model_arrays<'py>(py: Python<'py>, model: &BudgetModel) -> PyResult<ModelArrays<'py>> {
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
