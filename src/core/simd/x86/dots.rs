//! Dot products and axpys on the vector levels, each lane the scalar fused multiply-add on the
//! widened value; the register-blocked dots of one or eight rows; popcounts of bit sets.

use super::{levels, Simd};
use crate::core::simd::dots::{
    and_popcounts_by_width, signed_and_popcounts_by_width, EightRows, OneRow, BLOCK_ROWS,
};
use crate::core::simd::values::ColumnValue;
use std::arch::x86_64::*;

/// y += alpha * x two whole vectors at a time from the start (each lane the scalar fused
/// multiply-add on the widened value); returns where it stopped.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn axpy_pairs<S: Simd, T: ColumnValue>(s: S, alpha: f64, x: &[T], y: &mut [f64]) -> usize {
    let (n, w) = (x.len().min(y.len()), S::LANES);
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), s.splat(alpha));
    let mut i = 0;
    // SAFETY: lanes i..i + 2 w are in bounds of both slices.
    unsafe {
        while i + 2 * w <= n {
            let y0 = s.fmadd(va, T::load(s, px.add(i), w), s.load(py.add(i)));
            let y1 = s.fmadd(va, T::load(s, px.add(i + w), w), s.load(py.add(i + w)));
            s.store(py.add(i), y0);
            s.store(py.add(i + w), y1);
            i += 2 * w;
        }
    }
    i
}

/// y += alpha * x, the rest after `axpy_pairs` masked, or in a vector then scalar code.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn axpy_on<S: Simd>(s: S, alpha: f64, x: &[f64], y: &mut [f64]) {
    // SAFETY: the level's.
    let mut i = unsafe { axpy_pairs(s, alpha, x, y) };
    let n = x.len().min(y.len());
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), s.splat(alpha));
    // SAFETY: lanes below n only.
    unsafe {
        if S::MASKED_TAILS {
            while i < n {
                let t = s.tail(n - i);
                let v = s.fmadd(va, s.load_tail(px.add(i), t), s.load_tail(py.add(i), t));
                s.store_tail(py.add(i), t, v);
                i += S::LANES;
            }
            return;
        }
        while i + S::LANES <= n {
            s.store(py.add(i), s.fmadd(va, s.load(px.add(i)), s.load(py.add(i))));
            i += S::LANES;
        }
    }
    for (yk, &xk) in y.iter_mut().zip(x).skip(i) {
        *yk = alpha.mul_add(xk, *yk);
    }
}

/// y += alpha * x for x stored narrow (widened exactly), the rest after `axpy_pairs` in scalar
/// code.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn axpy_narrow_on<S: Simd, T: ColumnValue>(s: S, alpha: f64, x: &[T], y: &mut [f64]) {
    // SAFETY: the level's.
    let i = unsafe { axpy_pairs(s, alpha, x, y) };
    for (yk, &xk) in y.iter_mut().zip(x).skip(i) {
        *yk = alpha.mul_add(xk.widen(), *yk);
    }
}

/// Sum of x[i] (widened) * y[i]: four vector accumulators (lanes i = u mod 4 vectors), added
/// pairwise, then the lanes in the level's order and the scalar tail.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn dot_narrow_on<S: Simd, T: ColumnValue>(s: S, x: &[T], y: &[f64]) -> f64 {
    let (n, w) = (x.len().min(y.len()), S::LANES);
    let (px, py) = (x.as_ptr(), y.as_ptr());
    let mut acc = [s.zero(); 4];
    let mut i = 0;
    // SAFETY: lanes i..i + 4 w are in bounds of both slices.
    unsafe {
        while i + 4 * w <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let at = i + u * w;
                *a = s.fmadd(T::load(s, px.add(at), w), s.load(py.add(at)), *a);
            }
            i += 4 * w;
        }
    }
    let mut sum = s.sum(s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3])));
    for (&a, &b) in x[i..n].iter().zip(&y[i..n]) {
        sum = a.widen().mul_add(b, sum);
    }
    sum
}

/// `dots_8_rows`: `DOT_VECTORS` vectors of each of the 8 rows' sums held in registers across
/// the columns.
///
/// # Safety
/// The bounds checked by `dots_8_rows`.
// p indexes the 8 register sums and the 8 rows of q alike; unrolled by the compiler.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn dots_8_rows_on<S: Simd, T: ColumnValue>(s: S, block: EightRows<'_, T>, dots: &mut [f64]) {
    let EightRows(q, width, cols, xt, stride, m) = block;
    let w = S::LANES;
    let (pq, px, pd) = (q.as_ptr(), xt.as_ptr(), dots.as_mut_ptr());
    let mut k = 0;
    while k < m {
        let lanes = (m - k).min(S::DOT_VECTORS * w);
        // The second vector's lanes (none on a level that holds one vector a row).
        let (l0, l1) = (lanes.min(w), lanes.saturating_sub(w));
        let mut a = [s.zero(); BLOCK_ROWS];
        let mut b = [s.zero(); BLOCK_ROWS];
        // SAFETY: column c's lanes k..k + lanes lie within xt (checked by the caller), the 8
        // rows of q within q, the outputs within dots.
        unsafe {
            for &c in cols {
                let x = px.add(c * stride + k);
                let x0 = T::load(s, x, l0);
                let x1 = if l1 > 0 {
                    T::load(s, x.add(w), l1)
                } else {
                    s.zero()
                };
                for p in 0..BLOCK_ROWS {
                    let qp = s.splat(*pq.add(p * width + c));
                    a[p] = s.fmadd(qp, x0, a[p]);
                    if S::DOT_VECTORS > 1 {
                        b[p] = s.fmadd(qp, x1, b[p]);
                    }
                }
            }
            for p in 0..BLOCK_ROWS {
                let out = pd.add(p * m + k);
                s.store_column(out, l0, a[p]);
                if S::DOT_VECTORS > 1 && l1 > 0 {
                    s.store_column(out.add(w), l1, b[p]);
                }
            }
        }
        k += lanes;
    }
}

/// Vectors of `dots_one_row`'s sums held in registers (32 f64 lanes on AVX-512, 16 on AVX2).
const ONE_ROW_VECTORS: usize = 4;

/// `dots_one_row`: `ONE_ROW_VECTORS` vectors of sums held in registers across the columns, the
/// last block's lanes masked on load and store.
///
/// # Safety
/// The bounds checked by `dots_one_row`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn dots_one_row_on<S: Simd, T: ColumnValue>(s: S, row: OneRow<'_, T>, dots: &mut [f64]) {
    let OneRow(q, cols, xt, stride, m) = row;
    let w = S::LANES;
    let (px, pd) = (xt.as_ptr(), dots.as_mut_ptr());
    let mut k = 0;
    // SAFETY: column c's lanes k..k + lanes lie within xt (checked by the caller), the outputs
    // within dots.
    unsafe {
        while k + ONE_ROW_VECTORS * w <= m {
            let mut acc = [s.zero(); ONE_ROW_VECTORS];
            for &c in cols {
                let qc = s.splat(q[c]);
                let x = px.add(c * stride + k);
                for u in 0..ONE_ROW_VECTORS {
                    acc[u] = s.fmadd(qc, T::load(s, x.add(u * w), w), acc[u]);
                }
            }
            for u in 0..ONE_ROW_VECTORS {
                s.store(pd.add(k + u * w), acc[u]);
            }
            k += ONE_ROW_VECTORS * w;
        }
        while k < m {
            let lanes = (m - k).min(w);
            let mut acc = s.zero();
            for &c in cols {
                let x = T::load(s, px.add(c * stride + k), lanes);
                acc = s.fmadd(s.splat(q[c]), x, acc);
            }
            s.store_column(pd.add(k), lanes, acc);
            k += lanes;
        }
    }
}

levels! {
    /// y += alpha * x (`axpy_on`).
    fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) = axpy_on in axpy_avx2, axpy_avx512;
    /// y += alpha * x for x in f32 or halves (`axpy_narrow_on`).
    fn axpy_narrow<T: ColumnValue>(alpha: f64, x: &[T], y: &mut [f64])
        = axpy_narrow_on in axpy_narrow_avx2, axpy_narrow_avx512;
    /// Sum of x * y for x in f32 or halves (`dot_narrow_on`).
    fn dot_narrow<T: ColumnValue>(x: &[T], y: &[f64]) -> f64
        = dot_narrow_on in dot_narrow_avx2, dot_narrow_avx512;
    /// Dot products of 8 rows with m of a feature-major copy (`dots_8_rows_on`).
    fn dots_8_rows<T: ColumnValue>(block: EightRows<'_, T>, dots: &mut [f64])
        = dots_8_rows_on in dots_8_rows_avx2, dots_8_rows_avx512;
    /// Dot products of one row with m of a feature-major copy (`dots_one_row_on`).
    fn dots_one_row<T: ColumnValue>(row: OneRow<'_, T>, dots: &mut [f64])
        = dots_one_row_on in dots_one_row_avx2, dots_one_row_avx512;
}

/// Sum of a[i] * b[i]: four accumulators of four lanes, then the scalar tail. AVX2's on
/// every vector level: the summation order the fused row's by-columns path has always had.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` must have the same length.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_avx2(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_pd();
    let mut acc1 = _mm256_setzero_pd();
    let mut acc2 = _mm256_setzero_pd();
    let mut acc3 = _mm256_setzero_pd();
    let mut i = 0;
    // SAFETY: every load reads lanes i..i+16 (or i..i+4) with i+16 <= n (or i+4 <= n).
    unsafe {
        while i + 16 <= n {
            acc0 = _mm256_fmadd_pd(_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_pd(
                _mm256_loadu_pd(pa.add(i + 4)),
                _mm256_loadu_pd(pb.add(i + 4)),
                acc1,
            );
            acc2 = _mm256_fmadd_pd(
                _mm256_loadu_pd(pa.add(i + 8)),
                _mm256_loadu_pd(pb.add(i + 8)),
                acc2,
            );
            acc3 = _mm256_fmadd_pd(
                _mm256_loadu_pd(pa.add(i + 12)),
                _mm256_loadu_pd(pb.add(i + 12)),
                acc3,
            );
            i += 16;
        }
        while i + 4 <= n {
            acc0 = _mm256_fmadd_pd(_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pb.add(i)), acc0);
            i += 4;
        }
    }
    let acc = _mm256_add_pd(_mm256_add_pd(acc0, acc1), _mm256_add_pd(acc2, acc3));
    let mut lanes = [0.0f64; 4];
    // SAFETY: `lanes` has room for four f64.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), acc) };
    let mut sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    while i < n {
        sum = a[i].mul_add(b[i], sum);
        i += 1;
    }
    sum
}

/// `signed_and_popcounts` for rows of one word a set (up to 64 columns) with AVX-512's
/// VPOPCNTQ: eight rows a step, their interleaved words (set at 1, set at -1) two vectors,
/// each lane's agreements less its disagreements, then the two lanes of a row added. The
/// same integers as the scalar counts; the tail rows by those.
///
/// # Safety
/// The CPU must support AVX-512F, DQ and VPOPCNTDQ; `a` two words, `rows` two per output.
#[target_feature(enable = "avx512f,avx512dq,avx512vpopcntdq")]
pub unsafe fn signed_and_popcounts_one_word_avx512(a: &[u64], rows: &[u64], out: &mut [f64]) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() == 2 && rows.len() == 2 * out.len());
    let (plus, minus) = (a[0] as i64, a[1] as i64);
    // Lane 2k holds a row's set at 1, lane 2k + 1 its set at -1.
    let agree = _mm512_set_epi64(minus, plus, minus, plus, minus, plus, minus, plus);
    let differ = _mm512_set_epi64(plus, minus, plus, minus, plus, minus, plus, minus);
    let evens = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0);
    let odds = _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1);
    let signed_counts = |v: __m512i| {
        _mm512_sub_epi64(
            _mm512_popcnt_epi64(_mm512_and_si512(v, agree)),
            _mm512_popcnt_epi64(_mm512_and_si512(v, differ)),
        )
    };
    let full = out.len() / 8;
    for k in 0..full {
        // SAFETY: rows 8k..8k + 8 are within `rows` (16 words) and `out` (8 values).
        let (low, high) = unsafe {
            let at = rows.as_ptr().add(16 * k);
            (
                _mm512_loadu_si512(at.cast()),
                _mm512_loadu_si512(at.add(8).cast()),
            )
        };
        let (low, high) = (signed_counts(low), signed_counts(high));
        let dots = _mm512_add_epi64(
            _mm512_permutex2var_epi64(low, evens, high),
            _mm512_permutex2var_epi64(low, odds, high),
        );
        // SAFETY: as above.
        unsafe { _mm512_storeu_pd(out.as_mut_ptr().add(8 * k), _mm512_cvtepi64_pd(dots)) };
    }
    signed_and_popcounts_by_width(a, &rows[16 * full..], &mut out[8 * full..]);
}

/// `signed_and_popcounts` with the POPCNT instruction.
///
/// # Safety
/// The CPU must support POPCNT; the lengths as `signed_and_popcounts` checks them.
#[target_feature(enable = "popcnt")]
pub unsafe fn signed_and_popcounts_popcnt(a: &[u64], rows: &[u64], out: &mut [f64]) {
    signed_and_popcounts_by_width(a, rows, out)
}

/// `and_popcounts` with the POPCNT instruction.
///
/// # Safety
/// The CPU must support POPCNT; the lengths as `and_popcounts` checks them.
#[target_feature(enable = "popcnt")]
pub unsafe fn and_popcounts_popcnt(a: &[u64], rows: &[u64], out: &mut [f64]) {
    and_popcounts_by_width(a, rows, out)
}
