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

use rayon::prelude::*;

use crate::core::data::Rows;
use crate::core::error::{Result, SvmError};
use crate::core::kernel_block::{BlockScratch, KernelBlocks, BLOCK_ROWS};
use crate::core::{parallel, simd};

/// Checks that gamma is usable: positive and finite.
pub fn check_gamma(gamma: f64) -> Result<()> {
    if gamma.is_finite() && gamma > 0.0 {
        Ok(())
    } else {
        Err(SvmError::invalid_parameter(
            "gamma",
            format!("must be a positive finite number, got {gamma}"),
        ))
    }
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
        return crate::core::data::finite_sq_norms(x, "X");
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

/// Kernel matrix K[i, j] = k(x_i, y_j), row-major into `out` (len x.n_rows() * y.n_rows()),
/// blocks of rows of X computed in parallel on the configured pool as kernel blocks against Y
/// (`kernel_block`: the routine prediction and the polish use). Rows whose squared norms
/// overflow (values near 1e154) make the norm form NaN; those entries are taken from the
/// explicit difference instead, which is exact there (and underflows to a kernel value of 0).
pub fn kernel_matrix<X: Rows, Y: Rows>(x: &X, y: &Y, gamma: f64, out: &mut [f64]) -> Result<()> {
    check_gamma(gamma)?;
    let (n, m) = (x.n_rows(), y.n_rows());
    if out.len() != n * m {
        return Err(SvmError::invalid_input(
            "kernel output buffer has the wrong size",
        ));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let blocks = KernelBlocks::new(y, gamma)?;
    let x_norms = x.sq_norms();
    parallel::install(|| {
        out.par_chunks_mut(BLOCK_ROWS * m)
            .enumerate()
            .for_each_init(BlockScratch::default, |scratch, (b, block)| {
                let first = b * BLOCK_ROWS;
                let rows = first..first + block.len() / m;
                blocks.fill_rows(x, rows.clone(), &x_norms[rows.clone()], block, scratch);
                for (r, row) in block.chunks_mut(m).enumerate() {
                    for (j, o) in row.iter_mut().enumerate() {
                        if o.is_nan() {
                            *o = (-gamma * explicit_sq_distance(x, first + r, y, j)).exp();
                        }
                    }
                }
            });
    });
    Ok(())
}

/// |x_i - y_j|^2 from the two rows' non-zeros (no norms involved).
fn explicit_sq_distance<X: Rows, Y: Rows>(x: &X, i: usize, y: &Y, j: usize) -> f64 {
    let mut a: Vec<(usize, f64)> = Vec::new();
    x.for_each_nonzero(i, |c, v| a.push((c, v)));
    let mut b: Vec<(usize, f64)> = Vec::new();
    y.for_each_nonzero(j, |c, v| b.push((c, v)));
    a.sort_by_key(|e| e.0);
    b.sort_by_key(|e| e.0);
    let (mut p, mut q, mut d2) = (0, 0, 0.0);
    while p < a.len() || q < b.len() {
        let ca = a.get(p).map_or(usize::MAX, |e| e.0);
        let cb = b.get(q).map_or(usize::MAX, |e| e.0);
        let diff = match ca.cmp(&cb) {
            std::cmp::Ordering::Less => {
                p += 1;
                a[p - 1].1
            }
            std::cmp::Ordering::Greater => {
                q += 1;
                b[q - 1].1
            }
            std::cmp::Ordering::Equal => {
                p += 1;
                q += 1;
                a[p - 1].1 - b[q - 1].1
            }
        };
        d2 += diff * diff;
    }
    d2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::data::{CsrView, DenseView};
    use crate::core::rng::Rng;

    fn explicit(a: &[f64], b: &[f64], gamma: f64) -> f64 {
        let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        (-gamma * d2).exp()
    }

    #[test]
    fn kernel_matrix_matches_explicit_distance_dense_and_sparse() {
        let mut rng = Rng::new(5);
        let (n, m, d) = (7, 5, 9);
        let mut xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64() - 0.5).collect();
        // Make X sparse-ish so the CSR path has real zeros.
        for v in xs.iter_mut() {
            if rng.next_f64() < 0.5 {
                *v = 0.0;
            }
        }
        let ys: Vec<f64> = (0..m * d).map(|_| rng.next_f64() - 0.5).collect();
        let x = DenseView::new(&xs, n, d).unwrap();
        let y = DenseView::new(&ys, m, d).unwrap();
        let mut indptr = vec![0i32];
        let (mut idx, mut val) = (vec![], vec![]);
        for i in 0..n {
            for c in 0..d {
                if xs[i * d + c] != 0.0 {
                    idx.push(c as i32);
                    val.push(xs[i * d + c]);
                }
            }
            indptr.push(idx.len() as i32);
        }
        let xsp = CsrView::new(&indptr, &idx, &val, d).unwrap();
        let mut k1 = vec![0.0; n * m];
        let mut k2 = vec![0.0; n * m];
        let mut k3 = vec![0.0; n * n];
        kernel_matrix(&x, &y, 0.7, &mut k1).unwrap();
        kernel_matrix(&xsp, &y, 0.7, &mut k2).unwrap();
        kernel_matrix(&xsp, &xsp, 0.7, &mut k3).unwrap();
        // The same rows declared 10^12 columns wide take the hash-probe path: same values.
        let wide = CsrView::new(&indptr, &idx, &val, 1_000_000_000_000).unwrap();
        let mut k4 = vec![0.0; n * n];
        kernel_matrix(&wide, &wide, 0.7, &mut k4).unwrap();
        for (a, b) in k3.iter().zip(&k4) {
            assert!((a - b).abs() < 1e-13);
        }
        for i in 0..n {
            for j in 0..m {
                let e = explicit(&xs[i * d..(i + 1) * d], &ys[j * d..(j + 1) * d], 0.7);
                assert!((k1[i * m + j] - e).abs() < 1e-13);
                assert!((k2[i * m + j] - e).abs() < 1e-13);
            }
            for j in 0..n {
                let e = explicit(&xs[i * d..(i + 1) * d], &xs[j * d..(j + 1) * d], 0.7);
                assert!((k3[i * n + j] - e).abs() < 1e-13);
            }
        }
        assert!(kernel_matrix(&x, &y, -1.0, &mut k1).is_err());
        assert!(kernel_matrix(&x, &y, f64::NAN, &mut k1).is_err());
    }
}
