//! Dot products and axpys: of f64 slices, of copies stored narrower (f32, halves) against f64,
//! of 0/1 rows held as bit sets, and the register-blocked dots of one or eight rows with a
//! feature-major copy. Here the portable loops and the operands the vector loops
//! (`x86/dots.rs`) take once `mod.rs` has checked them.

use super::values::ColumnValue;

pub(super) fn dot_portable(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        let (ca, cb) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for k in 0..8 {
            acc[k] += ca[k] * cb[k];
        }
    }
    let mut sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for k in chunks * 8..n {
        sum += a[k] * b[k];
    }
    sum
}

pub(super) fn axpy_portable(alpha: f64, x: &[f64], y: &mut [f64]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// `axpy_narrow` on the portable level.
pub(super) fn axpy_narrow_portable<T: ColumnValue>(alpha: f64, x: &[T], y: &mut [f64]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi.widen();
    }
}

/// `dot_narrow` on the portable level.
pub(super) fn dot_narrow_portable<T: ColumnValue>(x: &[T], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    let mut acc = [0.0f64; 4];
    for (k, (&a, &b)) in x[..n].iter().zip(&y[..n]).enumerate() {
        acc[k % 4] += a.widen() * b;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// `signed_and_popcounts` with one and two words a half unrolled (42 board cells are one).
#[inline(always)]
pub(super) fn signed_and_popcounts_by_width(a: &[u64], rows: &[u64], out: &mut [f64]) {
    #[inline(always)]
    fn fixed<const W: usize>(a: &[u64], rows: &[u64], out: &mut [f64]) {
        let (mut plus, mut minus) = ([0u64; W], [0u64; W]);
        plus.copy_from_slice(&a[..W]);
        minus.copy_from_slice(&a[W..2 * W]);
        for (o, r) in out.iter_mut().zip(rows.chunks_exact(2 * W)) {
            let (mut same, mut opposite) = (0u32, 0u32);
            for w in 0..W {
                same += (plus[w] & r[w]).count_ones() + (minus[w] & r[W + w]).count_ones();
                opposite += (plus[w] & r[W + w]).count_ones() + (minus[w] & r[w]).count_ones();
            }
            *o = f64::from(same) - f64::from(opposite);
        }
    }
    let w = a.len() / 2;
    match w {
        0 => out.fill(0.0),
        1 => fixed::<1>(a, rows, out),
        2 => fixed::<2>(a, rows, out),
        _ => {
            let (plus, minus) = a.split_at(w);
            for (o, r) in out.iter_mut().zip(rows.chunks_exact(2 * w)) {
                let (r_plus, r_minus) = r.split_at(w);
                let count = |x: &[u64], y: &[u64]| -> u32 {
                    x.iter().zip(y).map(|(x, y)| (x & y).count_ones()).sum()
                };
                let same = count(plus, r_plus) + count(minus, r_minus);
                let opposite = count(plus, r_minus) + count(minus, r_plus);
                *o = f64::from(same) - f64::from(opposite);
            }
        }
    }
}

/// `and_popcounts` with the common widths unrolled (a9a's 123 columns are two words).
#[inline(always)]
pub(super) fn and_popcounts_by_width(a: &[u64], rows: &[u64], out: &mut [f64]) {
    #[inline(always)]
    fn fixed<const W: usize>(a: &[u64], rows: &[u64], out: &mut [f64]) {
        let mut a_w = [0u64; W];
        a_w.copy_from_slice(&a[..W]);
        for (o, r) in out.iter_mut().zip(rows.chunks_exact(W)) {
            let mut bits = 0u32;
            for w in 0..W {
                bits += (a_w[w] & r[w]).count_ones();
            }
            *o = f64::from(bits);
        }
    }
    match a.len() {
        0 => out.fill(0.0),
        1 => fixed::<1>(a, rows, out),
        2 => fixed::<2>(a, rows, out),
        3 => fixed::<3>(a, rows, out),
        4 => fixed::<4>(a, rows, out),
        w => {
            for (o, r) in out.iter_mut().zip(rows.chunks_exact(w)) {
                *o = f64::from(
                    a.iter()
                        .zip(r)
                        .map(|(x, y)| (x & y).count_ones())
                        .sum::<u32>(),
                );
            }
        }
    }
}

/// Rows of a `dots_8_rows` block.
pub const BLOCK_ROWS: usize = 8;

/// `dots_8_rows`' operands (q, width, cols, xt, stride, m) once it has checked them: 8 rows of
/// `width` values in q, the ascending columns below `width`, and column c's m values at
/// `xt[c * stride..]`.
#[derive(Clone, Copy)]
pub(crate) struct EightRows<'a, T>(
    pub &'a [f64],
    pub usize,
    pub &'a [usize],
    pub &'a [T],
    pub usize,
    pub usize,
);

/// `dots_8_rows` on the portable level: each step a multiply then an add.
pub(super) fn dots_8_rows_portable<T: ColumnValue>(block: EightRows<'_, T>, dots: &mut [f64]) {
    let EightRows(q, width, cols, xt, stride, m) = block;
    for p in 0..BLOCK_ROWS {
        let out = &mut dots[p * m..(p + 1) * m];
        out.fill(0.0);
        for &c in cols {
            let qc = q[p * width + c];
            for (o, &v) in out.iter_mut().zip(&xt[c * stride..c * stride + m]) {
                *o += qc * v.widen();
            }
        }
    }
}

/// `dots_one_row`'s operands (q, cols, xt, stride, m) once it has checked them.
#[derive(Clone, Copy)]
pub(crate) struct OneRow<'a, T>(
    pub &'a [f64],
    pub &'a [usize],
    pub &'a [T],
    pub usize,
    pub usize,
);

/// `dots_one_row` on the portable level: each step a multiply then an add.
pub(super) fn dots_one_row_portable<T: ColumnValue>(row: OneRow<'_, T>, dots: &mut [f64]) {
    let OneRow(q, cols, xt, stride, m) = row;
    let out = &mut dots[..m];
    out.fill(0.0);
    for &c in cols {
        let qc = q[c];
        for (o, &v) in out.iter_mut().zip(&xt[c * stride..c * stride + m]) {
            *o += qc * v.widen();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::simd::half::F16;
    #[cfg(target_arch = "x86_64")]
    use crate::core::simd::x86::{self, vector_levels};
    use crate::core::simd::{
        axpy, axpy_narrow, dot, dot_narrow, dots_8_rows, dots_one_row, level, Level,
    };

    /// Rows of -1, 0 and 1 as two bit sets: the signed counts are the sums of the products,
    /// for one to five words a half (the unrolled widths and the general one), through the
    /// public dispatch and the portable code alike.
    #[test]
    fn signed_popcounts_are_the_sums_of_products() {
        let mut rng = Rng::new(21);
        for words in 1..=5 {
            let d = 64 * words - rng.below(40);
            let rows = 37;
            let values: Vec<Vec<f64>> = (0..=rows)
                .map(|_| (0..d).map(|_| rng.below(3) as f64 - 1.0).collect())
                .collect();
            let bits = |v: &[f64]| -> Vec<u64> {
                let mut b = vec![0u64; 2 * words];
                for (c, &x) in v.iter().enumerate() {
                    let half = if x > 0.0 { 0 } else { words };
                    if x != 0.0 {
                        b[half + c / 64] |= 1 << (c % 64);
                    }
                }
                b
            };
            let a = bits(&values[0]);
            let all: Vec<u64> = values[1..].iter().flat_map(|v| bits(v)).collect();
            let want: Vec<f64> = values[1..]
                .iter()
                .map(|v| v.iter().zip(&values[0]).map(|(x, y)| x * y).sum())
                .collect();
            let mut got = vec![f64::NAN; rows];
            crate::core::simd::signed_and_popcounts(&a, &all, &mut got);
            assert_eq!(got, want, "{words} words");
            let mut portable = vec![f64::NAN; rows];
            signed_and_popcounts_by_width(&a, &all, &mut portable);
            assert_eq!(portable, want, "{words} words, portable");
        }
    }

    #[test]
    fn dot_narrow_is_the_widened_dot() {
        let mut rng = Rng::new(12);
        for n in [0, 1, 3, 4, 7, 15, 16, 17, 33, 64, 100, 257] {
            let x: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 - 0.5).collect();
            let h: Vec<F16> = x.iter().map(|&v| F16::from_f32(v)).collect();
            let y: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
            let exact = |wide: Vec<f64>| -> f64 { wide.iter().zip(&y).map(|(a, b)| a * b).sum() };
            let wide_x = exact(x.iter().map(|&v| f64::from(v)).collect());
            let wide_h = exact(h.iter().map(|&v| v.to_f64()).collect());
            assert!((dot_narrow(&x, &y) - wide_x).abs() < 1e-13, "n {n}");
            assert!((dot_narrow(&h, &y) - wide_h).abs() < 1e-13, "n {n}");
        }
    }

    #[test]
    fn axpy_is_the_same_on_every_vector_level() {
        #[cfg(target_arch = "x86_64")]
        {
            let mut rng = Rng::new(3);
            for n in 0..70 {
                let x: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
                let y: Vec<f64> = (0..n + 3).map(|_| rng.next_f64() - 0.5).collect();
                let fma: Vec<f64> = (0..n).map(|i| 0.3f64.mul_add(x[i], y[i])).collect();
                for level in vector_levels() {
                    let mut out = y.clone();
                    // SAFETY: the level runs here.
                    unsafe { x86::dots::axpy(level, 0.3, &x, &mut out) };
                    assert_eq!(out[..n], fma[..], "{level:?} n {n}");
                    assert_eq!(out[n..], y[n..], "{level:?} wrote past n");
                }
            }
        }
    }

    #[test]
    fn axpy_f32_matches_axpy_on_the_widened_values() {
        let mut rng = Rng::new(4);
        for n in 0..70 {
            let x: Vec<f32> = (0..n).map(|_| (rng.next_f64() - 0.5) as f32).collect();
            let wide: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let y: Vec<f64> = (0..n + 3).map(|_| rng.next_f64() - 0.5).collect();
            // The dispatched pair agree on this machine's level...
            let (mut a, mut b) = (y.clone(), y.clone());
            axpy_narrow(0.3, &x, &mut a);
            axpy(0.3, &wide, &mut b);
            assert_eq!(a, b, "n {n}");
            // ...and every vector level is the fused multiply-add on the widened values.
            #[cfg(target_arch = "x86_64")]
            for level in vector_levels() {
                let mut out = y.clone();
                // SAFETY: the level runs here.
                unsafe { x86::dots::axpy_narrow(level, 0.3, &x, &mut out) };
                for i in 0..n {
                    assert_eq!(out[i], 0.3f64.mul_add(wide[i], y[i]), "{level:?} n {n}");
                }
                assert_eq!(out[n..], y[n..], "{level:?} wrote past n");
            }
        }
    }

    #[test]
    fn dot_and_axpy_match_naive_for_all_lengths() {
        let mut rng = Rng::new(1);
        for n in 0..70 {
            let a: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
            let b: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-12);
            assert!((dot_portable(&a, &b) - naive).abs() < 1e-12);
            let mut y = b.clone();
            axpy(0.7, &a, &mut y);
            let mut y2 = b.clone();
            axpy_portable(0.7, &a, &mut y2);
            for i in 0..n {
                assert!((y[i] - (b[i] + 0.7 * a[i])).abs() < 1e-14);
                assert!((y2[i] - y[i]).abs() < 1e-14);
            }
        }
    }

    #[test]
    fn dots_8_rows_match_axpy_row_by_row_on_every_level() {
        let mut rng = Rng::new(12);
        for (width, m, zeros) in [
            (22, 37, 0.4),
            (5, 16, 0.0),
            (123, 9, 0.9),
            (3, 1, 0.5),
            (7, 0, 0.2),
        ] {
            let stride = m + 5;
            let xt: Vec<f64> = (0..width * stride)
                .map(|_| rng.next_f64() * 2.0 - 1.0)
                .collect();
            let xt32: Vec<f32> = xt.iter().map(|&v| v as f32).collect();
            let q: Vec<f64> = (0..BLOCK_ROWS * width)
                .map(|_| {
                    if rng.next_f64() < zeros {
                        0.0
                    } else {
                        rng.next_f64() - 0.5
                    }
                })
                .collect();
            let cols: Vec<usize> = (0..width)
                .filter(|&c| (0..BLOCK_ROWS).any(|p| q[p * width + c] != 0.0))
                .collect();
            // The reference: axpy per row over its non-zeros, as the cache's per-row path.
            let by_rows = |fused: bool, wide: &dyn Fn(usize) -> f64| -> Vec<f64> {
                let mut out = vec![0.0; BLOCK_ROWS * m];
                for p in 0..BLOCK_ROWS {
                    for c in 0..width {
                        let qc = q[p * width + c];
                        if qc == 0.0 {
                            continue;
                        }
                        for k in 0..m {
                            let o = &mut out[p * m + k];
                            let v = wide(c * stride + k);
                            *o = if fused {
                                qc.mul_add(v, *o)
                            } else {
                                *o + qc * v
                            };
                        }
                    }
                }
                out
            };
            let (fused64, fused32) = (
                by_rows(true, &|i| xt[i]),
                by_rows(true, &|i| f64::from(xt32[i])),
            );
            let plain64 = by_rows(false, &|i| xt[i]);
            let mut out = vec![f64::NAN; BLOCK_ROWS * m];
            dots_8_rows(&q, width, &cols, &xt, stride, m, &mut out);
            let expect = if level() == Level::Portable {
                &plain64
            } else {
                &fused64
            };
            assert_eq!(&out, expect, "dispatched, width {width} m {m}");
            #[cfg(target_arch = "x86_64")]
            for level in vector_levels() {
                for (data, expect) in [(0, &fused64), (1, &fused32)] {
                    let mut out = vec![f64::NAN; BLOCK_ROWS * m];
                    let b64 = EightRows(&q, width, &cols, &xt, stride, m);
                    let b32 = EightRows(&q, width, &cols, &xt32, stride, m);
                    // SAFETY: the level runs here; the bounds hold by construction.
                    unsafe {
                        if data == 0 {
                            x86::dots::dots_8_rows(level, b64, &mut out)
                        } else {
                            x86::dots::dots_8_rows(level, b32, &mut out)
                        }
                    }
                    assert_eq!(
                        &out,
                        expect,
                        "{level:?} f{} width {width} m {m}",
                        if data == 0 { 64 } else { 32 }
                    );
                }
            }
        }
    }

    #[test]
    fn dots_one_row_matches_axpy_over_its_non_zeros_on_every_level() {
        let mut rng = Rng::new(13);
        // m across the register block (32 lanes on AVX-512, 16 on AVX2) and its masked tail.
        for (width, m, zeros) in [
            (42, 1024, 0.33),
            (42, 77, 0.33),
            (5, 16, 0.0),
            (123, 9, 0.9),
            (3, 1, 0.5),
            (7, 0, 0.2),
            (16, 33, 1.0),
        ] {
            let stride = m + 3;
            let xt: Vec<f64> = (0..width * stride)
                .map(|_| rng.next_f64() * 2.0 - 1.0)
                .collect();
            let xt32: Vec<f32> = xt.iter().map(|&v| v as f32).collect();
            let q: Vec<f64> = (0..width)
                .map(|_| {
                    if rng.next_f64() < zeros {
                        0.0
                    } else {
                        rng.next_f64() - 0.5
                    }
                })
                .collect();
            let cols: Vec<usize> = (0..width).filter(|&c| q[c] != 0.0).collect();
            // The reference: the cache's former path, one axpy per non-zero.
            let by_axpy = |fused: bool, wide: &dyn Fn(usize) -> f64| -> Vec<f64> {
                let mut out = vec![0.0; m];
                for &c in &cols {
                    for (k, o) in out.iter_mut().enumerate() {
                        let v = wide(c * stride + k);
                        *o = if fused {
                            q[c].mul_add(v, *o)
                        } else {
                            *o + q[c] * v
                        };
                    }
                }
                out
            };
            let fused64 = by_axpy(true, &|i| xt[i]);
            let fused32 = by_axpy(true, &|i| f64::from(xt32[i]));
            let plain64 = by_axpy(false, &|i| xt[i]);
            let mut out = vec![f64::NAN; m];
            dots_one_row(&q, &cols, &xt, stride, m, &mut out);
            let expect = if level() == Level::Portable {
                &plain64
            } else {
                &fused64
            };
            assert_eq!(&out, expect, "dispatched, width {width} m {m}");
            let mut axpy = vec![0.0; m];
            for &c in &cols {
                axpy_narrow(q[c], &xt32[c * stride..c * stride + m], &mut axpy);
            }
            let mut out = vec![f64::NAN; m];
            dots_one_row(&q, &cols, &xt32, stride, m, &mut out);
            assert_eq!(out, axpy, "f32 against axpy_narrow, width {width} m {m}");
            #[cfg(target_arch = "x86_64")]
            for level in vector_levels() {
                for (data, expect) in [(0, &fused64), (1, &fused32)] {
                    let mut out = vec![f64::NAN; m];
                    // SAFETY: the level runs here; the bounds hold by construction.
                    unsafe {
                        if data == 0 {
                            x86::dots::dots_one_row(
                                level,
                                OneRow(&q, &cols, &xt, stride, m),
                                &mut out,
                            )
                        } else {
                            x86::dots::dots_one_row(
                                level,
                                OneRow(&q, &cols, &xt32, stride, m),
                                &mut out,
                            )
                        }
                    }
                    assert_eq!(
                        &out,
                        expect,
                        "{level:?} f{} width {width} m {m}",
                        32 << (1 - data)
                    );
                }
            }
        }
    }
}
