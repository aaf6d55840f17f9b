//! The fused kernel row of a budgeted step (`rbf_row`, entry point in `mod.rs`; the vector pass
//! in `x86/rows.rs`): its operands, when a row takes the pass by columns instead, and the
//! portable loop of `weighted_row_sum` (decision values of several outputs from kernel values).

/// An input row by its non-zeros (columns in increasing order need not hold) and squared norm.
#[derive(Debug, Clone, Copy)]
pub struct RowNonzeros<'a> {
    pub cols: &'a [usize],
    pub vals: &'a [f64],
    pub sq_norm: f64,
}

/// Support vectors stored feature-major: feature c of SV j at `svt[c * stride + j]`, j < len,
/// with their squared norms.
#[derive(Debug, Clone, Copy)]
pub struct FeatureMajor<'a> {
    pub svt: &'a [f64],
    pub stride: usize,
    pub len: usize,
    pub sq_norms: &'a [f64],
}

impl<'a> FeatureMajor<'a> {
    pub fn new(svt: &'a [f64], stride: usize, len: usize, sq_norms: &'a [f64]) -> Self {
        FeatureMajor {
            svt,
            stride,
            len,
            sq_norms,
        }
    }
}

/// `rbf_row`'s operands (svs, row, gamma, coef) once it has checked them: every column of the
/// row indexes a run of `svs.len` values inside `svs`, and the coefficients (and
/// `svs.sq_norms`) hold at least that many.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct FusedRow<'a>(
    pub FeatureMajor<'a>,
    pub RowNonzeros<'a>,
    pub f64,
    pub Option<&'a [f64]>,
);

/// Rows with more non-zeros than this take `rbf_row`'s pass by columns: a block of 32 SVs reads
/// one short run per non-zero, and past a few dozen runs the loads stall where the per-feature
/// passes stream (the crossover measured: `docs/step_at_the_floor.md`).
pub(super) const FUSED_MAX_NNZ: usize = 24;

/// `weighted_row_sum` on the portable level, and for more outputs than the vector levels hold
/// in registers: their sums in their order, unfused.
pub(super) fn weighted_row_sum_portable(
    coef: &[f64],
    n_out: usize,
    weights: &[f64],
    out: &mut [f64],
) {
    // Four partial sums per output (rows j = u mod 4, the tail in the first), added pairwise;
    // output by output, so nothing is allocated.
    let full = weights.len() / 4 * 4;
    for (k, o) in out.iter_mut().enumerate() {
        let mut partial = [0.0f64; 4];
        for (j, &w) in weights.iter().enumerate() {
            let u = if j < full { j % 4 } else { 0 };
            partial[u] += w * coef[j * n_out + k];
        }
        *o = (partial[0] + partial[1]) + (partial[2] + partial[3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::simd::exp::rbf_from_dot;
    use crate::core::simd::{
        decision_sum_as_rbf_row, level, levels_here, rbf_from_dots_at, rbf_row, weighted_row_sum,
        Level,
    };

    /// Random feature-major SV stores and rows: every vector level gives the kernel values of
    /// the scalar fused code bit for bit and the same decision sum up to its summation order;
    /// the portable level agrees to a few ulp.
    #[test]
    fn fused_rows_match_scalar_code_on_every_level() {
        let mut rng = Rng::new(7);
        for case in 0..400 {
            let len = (rng.next_f64() * 150.0) as usize;
            let stride = len + (rng.next_f64() * 9.0) as usize;
            let dim = 1 + (rng.next_f64() * 40.0) as usize;
            let svt: Vec<f64> = (0..dim * stride)
                .map(|_| rng.next_f64() * 2.0 - 1.0)
                .collect();
            let norms: Vec<f64> = (0..stride)
                .map(|j| (0..dim).map(|c| svt[c * stride + j].powi(2)).sum())
                .collect();
            let mut cols: Vec<usize> = (0..dim).filter(|_| rng.next_f64() < 0.6).collect();
            if case % 7 == 0 {
                cols.clear(); // the zero row
            }
            let vals: Vec<f64> = cols.iter().map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let x_norm: f64 = vals.iter().map(|v| v * v).sum();
            let gamma = [0.0, 0.01, 1.0, 30.0, 1e6][case % 5];
            let coef: Vec<f64> = (0..stride).map(|_| rng.next_f64() - 0.5).collect();
            let svs = FeatureMajor {
                svt: &svt,
                stride,
                len,
                sq_norms: &norms,
            };
            let row = RowNonzeros {
                cols: &cols,
                vals: &vals,
                sq_norm: x_norm,
            };
            let reference: Vec<f64> = (0..len)
                .map(|j| {
                    let dot = cols
                        .iter()
                        .zip(&vals)
                        .fold(0.0, |acc, (&c, &v)| v.mul_add(svt[c * stride + j], acc));
                    rbf_from_dot::<true>(gamma, x_norm, norms[j], dot)
                })
                .collect();
            let f_ref: f64 = reference.iter().zip(&coef).map(|(k, c)| k * c).sum();
            let f_abs: f64 = reference
                .iter()
                .zip(&coef)
                .map(|(k, c)| (k * c).abs())
                .sum();
            for level in levels_here() {
                let mut kv = vec![f64::NAN; stride + 1];
                let f = rbf_row(level, svs, row, gamma, Some(&coef), &mut kv);
                let replay = decision_sum_as_rbf_row(level, &coef, &kv[..len], cols.len());
                assert_eq!(
                    replay.to_bits(),
                    f.to_bits(),
                    "{level:?} case {case}: decision order"
                );
                assert!(
                    kv[len..].iter().all(|v| v.is_nan()),
                    "{level:?} wrote past len"
                );
                for (j, (&g, &r)) in kv.iter().zip(&reference).enumerate() {
                    if level == Level::Portable {
                        // Unfused dots differ by rounding, which gamma magnifies in the exponent.
                        let tol = 1e-13 * (1.0 + gamma * (x_norm + norms[j])) * r.abs();
                        assert!((g - r).abs() <= tol + 1e-300, "{level:?} {j}");
                    } else {
                        assert_eq!(g.to_bits(), r.to_bits(), "{level:?} case {case} sv {j}");
                    }
                }
                assert!(
                    (f - f_ref).abs() <= 1e-13 * f_abs + 1e-300,
                    "{level:?} {f} {f_ref}"
                );
                let mut kv2 = vec![0.0; stride];
                let none = rbf_row(level, svs, row, gamma, None, &mut kv2);
                assert_eq!(none, 0.0);
                assert_eq!(kv2[..len], kv[..len]);
            }
        }
    }

    #[test]
    fn weighted_row_sums_agree_on_every_level() {
        let mut rng = Rng::new(10);
        for case in 0..300 {
            let n_out = 1 + (rng.next_f64() * 40.0) as usize;
            let n = (rng.next_f64() * 60.0) as usize;
            let coef: Vec<f64> = (0..n * n_out).map(|_| rng.next_f64() - 0.5).collect();
            let w: Vec<f64> = (0..n).map(|_| rng.next_f64()).collect();
            let exact: Vec<f64> = (0..n_out)
                .map(|k| (0..n).map(|j| w[j] * coef[j * n_out + k]).sum())
                .collect();
            let mut vector_bits: Option<Vec<u64>> = None;
            for level in levels_here() {
                let mut out = vec![f64::NAN; n_out + 2];
                out[..n_out].fill(7.0); // overwritten, not added to
                weighted_row_sum(level, &coef, n_out, &w, &mut out);
                // AVX2 and AVX-512 take the same sums in the same order.
                // (Compared as bits: the entries past n_out stay NaN, which no == matches.)
                if level >= Level::Avx2 && n_out <= 32 {
                    let bits: Vec<u64> = out.iter().map(|v| v.to_bits()).collect();
                    match &vector_bits {
                        Some(first) => assert_eq!(first, &bits, "case {case}: AVX2 vs AVX-512"),
                        None => vector_bits = Some(bits),
                    }
                }
                for k in 0..n_out {
                    assert!(
                        (out[k] - exact[k]).abs() < 1e-12,
                        "{level:?} case {case} k {k}"
                    );
                }
                assert!(
                    out[n_out..].iter().all(|v| v.is_nan()),
                    "{level:?} wrote past n_out"
                );
            }
        }
    }

    #[test]
    fn nan_distances_stay_nan_on_every_level() {
        let svt = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let norms = [1.0, f64::NAN, 9.0, 16.0, f64::NAN, 36.0, 49.0, 64.0, 81.0];
        let svs = FeatureMajor {
            svt: &svt,
            stride: 9,
            len: 9,
            sq_norms: &norms,
        };
        for level in levels_here() {
            let mut kv = [0.0; 9];
            let row = RowNonzeros {
                cols: &[0],
                vals: &[1.0],
                sq_norm: 1.0,
            };
            rbf_row(level, svs, row, 0.5, None, &mut kv);
            let nan: Vec<bool> = kv.iter().map(|k| k.is_nan()).collect();
            assert_eq!(nan, norms.map(|n| n.is_nan()), "{level:?}");
            let mut dots = [0.5; 9];
            rbf_from_dots_at(level, 0.5, 1.0, &norms, &mut dots);
            assert!(
                dots[1].is_nan() && dots[4].is_nan() && !dots[0].is_nan(),
                "{level:?}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "outside the support vectors")]
    fn fused_row_checks_its_columns() {
        let (svt, norms) = ([0.0; 8], [0.0; 4]);
        let svs = FeatureMajor {
            svt: &svt,
            stride: 4,
            len: 4,
            sq_norms: &norms,
        };
        let row = RowNonzeros {
            cols: &[2],
            vals: &[1.0],
            sq_norm: 0.0,
        };
        rbf_row(level(), svs, row, 1.0, None, &mut [0.0; 4]);
    }
}
