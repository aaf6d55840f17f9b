//! The Gaussian (RBF) kernel k(x, x') = exp(-gamma |x - x'|^2), evaluated through cached squared
//! norms: |x - x'|^2 = |x|^2 + |x'|^2 - 2 x.x', clamped at 0 against rounding.

use rayon::prelude::*;

use crate::core::data::Rows;
use crate::core::error::{Result, SvmError};
use crate::core::sparse::RowProbe;
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

/// Kernel matrix K[i, j] = k(x_i, y_j), row-major into `out` (len x.n_rows() * y.n_rows()),
/// rows of X computed in parallel on the configured pool. Each worker densifies one row of X
/// into a scratch buffer, so sparse-sparse products cost O(nnz(y_j)) per entry.
pub fn kernel_matrix<X: Rows, Y: Rows>(x: &X, y: &Y, gamma: f64, out: &mut [f64]) -> Result<()> {
    check_gamma(gamma)?;
    let (n, m) = (x.n_rows(), y.n_rows());
    if out.len() != n * m {
        return Err(SvmError::invalid_input(
            "kernel output buffer has the wrong size",
        ));
    }
    if m == 0 {
        return Ok(());
    }
    let y_norms = y.sq_norms();
    let width = x.n_cols().max(y.n_cols());
    if width > DENSE_SCRATCH_MAX_COLS {
        return kernel_matrix_wide(x, y, gamma, &y_norms, out);
    }
    parallel::install(|| {
        out.par_chunks_mut(m).enumerate().for_each_init(
            || (vec![0.0; width], vec![0.0; width]),
            |(scratch, other), (i, row)| {
                x.write_dense(i, scratch);
                for (j, o) in row.iter_mut().enumerate() {
                    *o = y.dot_dense(j, scratch);
                }
                simd::rbf_from_dots(gamma, x.sq_norm(i), &y_norms, row);
                // Squared norms that overflow (values near 1e154) make the norm form NaN; the
                // explicit difference is exact there (and overflows to a kernel value of 0).
                for (j, o) in row.iter_mut().enumerate() {
                    if o.is_nan() {
                        y.write_dense(j, other);
                        let d2: f64 = scratch
                            .iter()
                            .zip(other.iter())
                            .map(|(a, b)| (a - b) * (a - b))
                            .sum();
                        *o = (-gamma * d2).exp();
                    }
                }
            },
        );
    });
    Ok(())
}

/// Rows wider than this are not densified into per-worker scratch (it would cost memory and
/// time in proportion to n_features); their dot products go through a hash probe of the row.
const DENSE_SCRATCH_MAX_COLS: usize = 1 << 16;

/// `kernel_matrix` for wide (sparse) rows: O(nnz) per entry, no n_features-sized buffer.
fn kernel_matrix_wide<X: Rows, Y: Rows>(
    x: &X,
    y: &Y,
    gamma: f64,
    y_norms: &[f64],
    out: &mut [f64],
) -> Result<()> {
    let m = y.n_rows();
    let width = x.n_cols().max(y.n_cols());
    parallel::install(|| {
        out.par_chunks_mut(m)
            .enumerate()
            .for_each_init(RowProbe::new, |probe, (i, row)| {
                probe.load_row(x, i, width);
                for (j, o) in row.iter_mut().enumerate() {
                    let mut s = 0.0;
                    y.for_each_nonzero(j, |c, v| s += v * probe.get(c as u64));
                    *o = s;
                }
                let x_norm = x.sq_norm(i);
                simd::rbf_from_dots(gamma, x_norm, y_norms, row);
                for (j, o) in row.iter_mut().enumerate() {
                    if o.is_nan() {
                        // d2 = sum over y's entries of (y_c - x_c)^2 + |x|^2 on x's other columns.
                        let (mut d2, mut shared) = (0.0, 0.0);
                        y.for_each_nonzero(j, |c, v| {
                            let xc = probe.get(c as u64);
                            d2 += (v - xc) * (v - xc);
                            shared += xc * xc;
                        });
                        let own: f64 = probe.values().map(|v| v * v).sum();
                        *o = (-gamma * (d2 + (own - shared).max(0.0))).exp();
                    }
                }
            });
    });
    Ok(())
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
