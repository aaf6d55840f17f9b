//! Products of halves in f32 and the conversion to halves with F16C: AVX2 and FMA, and the
//! products on 16 lanes where AVX-512 runs (1,000,000 hardmc rows in one-vs-one: `dot_half`
//! 2,700 -> 2,200 samples of a fit's profile, docs/multiclass_notes.md, session 35).

use crate::core::simd::half::F16;
use std::arch::x86_64::*;

/// `dot_half`: halves widened to f32 (exactly) 8 at a time, two accumulators of 8 lanes, then
/// the lanes and the scalar tail.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_half_avx2(x: &[F16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (px, py) = (x.as_ptr(), y.as_ptr());
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    // SAFETY: every load reads values i..i + 16 (or i + 8) < n of both slices.
    unsafe {
        while i + 16 <= n {
            let h0 = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i).cast()));
            let h1 = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i + 8).cast()));
            acc0 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(py.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(h1, _mm256_loadu_ps(py.add(i + 8)), acc1);
            i += 16;
        }
        if i + 8 <= n {
            let h0 = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i).cast()));
            acc0 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(py.add(i)), acc0);
            i += 8;
        }
    }
    let acc = _mm256_add_ps(acc0, acc1);
    let quad = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
    for k in i..n {
        sum = (x[k].to_f64() as f32).mul_add(y[k], sum);
    }
    sum
}

/// `dot_half` on 16 lanes: halves widened to f32 (exactly) 16 at a time, two accumulators,
/// then the lanes and the scalar tail (a different summation order from AVX2's: these
/// products only approximate the Hessian).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn dot_half_avx512(x: &[F16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (px, py) = (x.as_ptr(), y.as_ptr());
    let (mut acc0, mut acc1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    // SAFETY: every load reads values i..i + 32 (or i + 16) <= n of both slices.
    unsafe {
        while i + 32 <= n {
            let h0 = _mm512_cvtph_ps(_mm256_loadu_si256(px.add(i).cast()));
            let h1 = _mm512_cvtph_ps(_mm256_loadu_si256(px.add(i + 16).cast()));
            acc0 = _mm512_fmadd_ps(h0, _mm512_loadu_ps(py.add(i)), acc0);
            acc1 = _mm512_fmadd_ps(h1, _mm512_loadu_ps(py.add(i + 16)), acc1);
            i += 32;
        }
        if i + 16 <= n {
            let h0 = _mm512_cvtph_ps(_mm256_loadu_si256(px.add(i).cast()));
            acc0 = _mm512_fmadd_ps(h0, _mm512_loadu_ps(py.add(i)), acc0);
            i += 16;
        }
    }
    let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for k in i..n {
        sum = (x[k].to_f64() as f32).mul_add(y[k], sum);
    }
    sum
}

/// `axpy_half` on 16 lanes (the same values as AVX2's: each lane one fused multiply-add).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn axpy_half_avx512(a: f32, x: &[F16], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), _mm512_set1_ps(a));
    let mut i = 0;
    // SAFETY: values i..i + 16 <= n of both slices.
    unsafe {
        while i + 16 <= n {
            let h = _mm512_cvtph_ps(_mm256_loadu_si256(px.add(i).cast()));
            _mm512_storeu_ps(
                py.add(i),
                _mm512_fmadd_ps(va, h, _mm512_loadu_ps(py.add(i))),
            );
            i += 16;
        }
    }
    for k in i..n {
        y[k] = a.mul_add(x[k].to_f64() as f32, y[k]);
    }
}

/// `axpy_half`: y += a x, 8 lanes at a time, the tail in scalar fused code (the same values).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_half_avx2(a: f32, x: &[F16], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), _mm256_set1_ps(a));
    let mut i = 0;
    // SAFETY: values i..i + 8 <= n of both slices.
    unsafe {
        while i + 8 <= n {
            let h = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i).cast()));
            _mm256_storeu_ps(
                py.add(i),
                _mm256_fmadd_ps(va, h, _mm256_loadu_ps(py.add(i))),
            );
            i += 8;
        }
    }
    for k in i..n {
        y[k] = a.mul_add(x[k].to_f64() as f32, y[k]);
    }
}

/// `extend_f16` with F16C, 8 values a conversion (to nearest, ties to even).
///
/// # Safety
/// The CPU must support AVX and F16C.
#[target_feature(enable = "avx,f16c")]
pub unsafe fn extend_f16_f16c(x: &[f32], out: &mut Vec<F16>) {
    let n = x.len();
    out.reserve(n);
    let start = out.len();
    let mut i = 0;
    // SAFETY: `reserve` made room for n values after `start`; every write lies there, and
    // the length covers only written values.
    unsafe {
        let (px, po) = (x.as_ptr(), out.as_mut_ptr().add(start));
        while i + 8 <= n {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(px.add(i)));
            _mm_storeu_si128(po.add(i).cast(), h);
            i += 8;
        }
        for (k, &v) in x.iter().enumerate().skip(i) {
            po.add(k).write(F16::from_f32(v));
        }
        out.set_len(start + n);
    }
}
