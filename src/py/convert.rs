//! Python objects to core views, without copying: the Python layer has already normalised X to a
//! C-contiguous float64 array or to CSR parts (data, indices, indptr, n_cols) with sorted indices.

use numpy::{PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::core::data::rows::{AnyRows, CsrView, DenseView};

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
    /// The core view of these arrays (validated: shapes, CSR structure, finite dense values).
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

pub fn slice1<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err("array must be contiguous"))
}
