//! Kernel functions. Every kernel here is a function of the dot product x.x' and the two squared
//! norms, so kernel rows, the cache and kernel blocks all take dot products first (the one
//! expensive part, written once per storage) and then apply one [`Kernel::from_dots`]:
//! - Gaussian (RBF) k = exp(-gamma |x - x'|^2), |x - x'|^2 = |x|^2 + |x'|^2 - 2 x.x' clamped at 0
//!   against rounding (the budgeted solvers and their merges know this one only);
//! - linear k = x.x' (also the kernel of a precomputed Gram matrix: its entries are the "dots");
//! - polynomial k = (gamma x.x' + coef0)^degree;
//! - sigmoid k = tanh(gamma x.x' + coef0);
//! - precomputed: the rows are rows of a Gram matrix G and its entries are the "dots" (the exact
//!   solvers read them from G; `kernel_norms` makes G_ii the squared norm, so k(x_i, x_i) = G_ii).

use crate::core::common::checks::check_positive_finite;
use crate::core::common::error::{Result, SvmError};
use crate::core::data::rows::Rows;
use crate::core::simd;

/// Checks that gamma is usable: positive and finite.
pub fn check_gamma(gamma: f64) -> Result<()> {
    check_positive_finite("gamma", gamma)
}

/// A kernel function (scikit-learn's / LIBSVM's parameterisation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    Rbf { gamma: f64 },
    Linear,
    Poly { gamma: f64, coef0: f64, degree: u32 },
    Sigmoid { gamma: f64, coef0: f64 },
    Precomputed,
}

/// Polynomial degrees above this are numerically meaningless (and a typo).
pub const MAX_DEGREE: u32 = 64;

impl Kernel {
    pub fn rbf(gamma: f64) -> Self {
        Kernel::Rbf { gamma }
    }

    /// The kernel named as scikit-learn names it ('rbf', 'linear', 'poly', 'sigmoid'), checked.
    pub fn parse(name: &str, gamma: f64, coef0: f64, degree: i64) -> Result<Self> {
        let kernel = match name {
            "rbf" => Kernel::Rbf { gamma },
            "linear" => Kernel::Linear,
            "poly" => Kernel::Poly {
                gamma,
                coef0,
                degree: u32::try_from(degree)
                    .ok()
                    .filter(|&d| d <= MAX_DEGREE)
                    .ok_or_else(|| {
                        SvmError::invalid_parameter(
                            "degree",
                            format!("must be an integer in [0, {MAX_DEGREE}], got {degree}"),
                        )
                    })?,
            },
            "sigmoid" => Kernel::Sigmoid { gamma, coef0 },
            "precomputed" => Kernel::Precomputed,
            other => {
                return Err(SvmError::invalid_parameter(
                    "kernel",
                    format!(
                        "must be 'rbf', 'linear', 'poly', 'sigmoid' or 'precomputed', got {other:?}"
                    ),
                ))
            }
        };
        kernel.check()?;
        Ok(kernel)
    }

    /// Checks the parameters: gamma positive and finite where used, coef0 finite.
    pub fn check(&self) -> Result<()> {
        match *self {
            Kernel::Rbf { gamma } => check_gamma(gamma),
            Kernel::Linear | Kernel::Precomputed => Ok(()),
            Kernel::Poly {
                gamma,
                coef0,
                degree,
            } => {
                check_gamma(gamma)?;
                check_coef0(coef0)?;
                if degree > MAX_DEGREE {
                    return Err(SvmError::invalid_parameter(
                        "degree",
                        format!("must be at most {MAX_DEGREE}, got {degree}"),
                    ));
                }
                Ok(())
            }
            Kernel::Sigmoid { gamma, coef0 } => {
                check_gamma(gamma)?;
                check_coef0(coef0)
            }
        }
    }

    /// The Gaussian kernel's width, for the code that knows only that one.
    pub fn rbf_gamma(&self) -> Option<f64> {
        match *self {
            Kernel::Rbf { gamma } => Some(gamma),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Rbf { .. } => "rbf",
            Kernel::Linear => "linear",
            Kernel::Poly { .. } => "poly",
            Kernel::Sigmoid { .. } => "sigmoid",
            Kernel::Precomputed => "precomputed",
        }
    }

    /// Turns the dot products of a point (squared norm `sq_norm`) with points of squared norms
    /// `sq_norms` into kernel values in place. The one place kernel values come from dots.
    #[inline]
    pub fn from_dots(&self, sq_norm: f64, sq_norms: &[f64], dots: &mut [f64]) {
        match *self {
            Kernel::Rbf { gamma } => simd::rbf_from_dots(gamma, sq_norm, sq_norms, dots),
            Kernel::Linear | Kernel::Precomputed => {}
            Kernel::Poly {
                gamma,
                coef0,
                degree,
            } => simd::poly_from_dots(gamma, coef0, degree, dots),
            Kernel::Sigmoid { gamma, coef0 } => simd::sigmoid_from_dots(gamma, coef0, dots),
        }
    }

    /// `from_dots` into f32 (`out`, as long as `dots`): the Gaussian kernel through
    /// `simd::rbf_from_dots_f32` (an exponential in f32 arithmetic, `dots` left as they are),
    /// the others computed in place in `dots` and rounded.
    pub fn from_dots_f32(&self, sq_norm: f64, sq_norms: &[f64], dots: &mut [f64], out: &mut [f32]) {
        match *self {
            Kernel::Rbf { gamma } => simd::rbf_from_dots_f32(gamma, sq_norm, sq_norms, dots, out),
            _ => {
                self.from_dots(sq_norm, sq_norms, dots);
                for (o, &v) in out.iter_mut().zip(dots.iter()) {
                    *o = v as f32;
                }
            }
        }
    }

    /// k(x, x) from |x|^2 (exactly 1 for the Gaussian kernel).
    #[inline]
    pub fn self_value(&self, sq_norm: f64) -> f64 {
        match *self {
            Kernel::Rbf { .. } => 1.0,
            _ => {
                let mut v = [sq_norm];
                self.from_dots(sq_norm, &[sq_norm], &mut v);
                v[0]
            }
        }
    }
}

/// The squared norm each row enters the kernel with, checked finite: |x_i|^2, or for a
/// precomputed kernel the Gram matrix's diagonal G_ii (x's rows are then rows of G, dense, and
/// `Rows::source_row` is a row's column in G).
pub fn kernel_norms<R: Rows>(x: &R, kernel: Kernel) -> Result<Vec<f64>> {
    if kernel != Kernel::Precomputed {
        return crate::core::data::rows::finite_sq_norms(x, "X");
    }
    (0..x.n_rows())
        .map(|i| {
            let row = x.dense_row(i).ok_or_else(|| {
                SvmError::invalid_input("a precomputed kernel must be a dense matrix")
            })?;
            let v = row.get(x.source_row(i)).copied().ok_or_else(|| {
                SvmError::invalid_input(format!(
                    "a precomputed kernel must be square (n_samples x n_samples): row {i} has {} \
                     columns",
                    row.len()
                ))
            })?;
            if !v.is_finite() {
                return Err(SvmError::invalid_input(format!(
                    "the precomputed kernel's diagonal entry {i} is {v}"
                )));
            }
            Ok(v)
        })
        .collect()
}

fn check_coef0(coef0: f64) -> Result<()> {
    if coef0.is_finite() {
        Ok(())
    } else {
        Err(SvmError::invalid_parameter(
            "coef0",
            format!("must be a finite number, got {coef0}"),
        ))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// k(a, b) straight from the two vectors (no norms, no dots of a cache): the reference
    /// kernel blocks and exact models are checked against.
    pub(crate) fn explicit_kernel(kernel: Kernel, a: &[f64], b: &[f64]) -> f64 {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        match kernel {
            Kernel::Rbf { gamma } => {
                let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
                (-gamma * d2).exp()
            }
            Kernel::Linear | Kernel::Precomputed => dot,
            Kernel::Poly {
                gamma,
                coef0,
                degree,
            } => (0..degree).map(|_| gamma * dot + coef0).product(),
            Kernel::Sigmoid { gamma, coef0 } => (gamma * dot + coef0).tanh(),
        }
    }
}
