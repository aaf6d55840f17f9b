//! A finished model's support vectors as one matrix (dense row-major or CSR): what predict,
//! the polish, model files and the Dask pool take and give.

use crate::core::common::error::{Result, SvmError};

/// The support vectors of a finished model.
#[derive(Debug, Clone, PartialEq)]
pub enum SvMatrix {
    /// n_sv x dim, row-major.
    Dense(Vec<f64>),
    /// CSR: row j holds columns `indices[indptr[j]..indptr[j + 1]]` (sorted).
    Sparse {
        indptr: Vec<usize>,
        indices: Vec<u64>,
        values: Vec<f64>,
    },
}

impl SvMatrix {
    /// Stored values (all of them for the dense form).
    pub fn values(&self) -> &[f64] {
        match self {
            SvMatrix::Dense(v) => v,
            SvMatrix::Sparse { values, .. } => values,
        }
    }

    /// Rows stacked: `self` followed by `other` (same form and dimension).
    pub fn append(&mut self, other: &SvMatrix) -> Result<()> {
        match (self, other) {
            (SvMatrix::Dense(a), SvMatrix::Dense(b)) => a.extend_from_slice(b),
            (
                SvMatrix::Sparse {
                    indptr,
                    indices,
                    values,
                },
                SvMatrix::Sparse {
                    indptr: p2,
                    indices: i2,
                    values: v2,
                },
            ) => {
                let base = indices.len();
                indptr.extend(p2.iter().skip(1).map(|&p| p + base));
                indices.extend_from_slice(i2);
                values.extend_from_slice(v2);
            }
            _ => {
                return Err(SvmError::invalid_input(
                    "cannot stack dense and sparse support vectors",
                ))
            }
        }
        Ok(())
    }

    /// The matrix row-major dense, n_sv x dim.
    pub fn to_dense(&self, n_sv: usize, dim: usize) -> Vec<f64> {
        match self {
            SvMatrix::Dense(v) => v.clone(),
            SvMatrix::Sparse {
                indptr,
                indices,
                values,
            } => {
                let mut out = vec![0.0; n_sv * dim];
                for j in 0..n_sv {
                    for k in indptr[j]..indptr[j + 1] {
                        out[j * dim + indices[k] as usize] = values[k];
                    }
                }
                out
            }
        }
    }

    /// An empty matrix of the same form.
    pub fn empty_like(&self) -> SvMatrix {
        match self {
            SvMatrix::Dense(_) => SvMatrix::Dense(Vec::new()),
            SvMatrix::Sparse { .. } => SvMatrix::Sparse {
                indptr: vec![0],
                indices: Vec::new(),
                values: Vec::new(),
            },
        }
    }
}
