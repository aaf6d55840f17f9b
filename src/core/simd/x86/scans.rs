//! A merge partner search's scans with AVX-512 (no AVX2 form: only the mask registers make them
//! pay): eight SVs a vector, the portable loop's rules per lane.

use super::first_lanes;
use crate::core::simd::scans::{argmin_sq_portable, scan_candidates_portable, CandidateFilter};
use std::arch::x86_64::*;

/// Lane offsets 0..8 as i64.
#[inline]
#[target_feature(enable = "avx512f")]
fn lane_offsets() -> __m512i {
    _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0)
}

/// The first index among lanes holding `value` in `vals` (their indices in `idx`).
#[inline]
#[target_feature(enable = "avx512f")]
fn first_index_of(vals: __m512d, idx: __m512i, value: f64) -> usize {
    let at = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(vals, _mm512_set1_pd(value));
    let masked = _mm512_mask_mov_epi64(_mm512_set1_epi64(i64::MAX), at, idx);
    _mm512_reduce_min_epi64(masked) as usize
}

/// `argmin_sq` in one pass: per lane the least square so far and its (first) index.
///
/// # Safety
/// The CPU must support AVX-512F; `values` holds at least 16.
#[target_feature(enable = "avx512f")]
pub unsafe fn argmin_sq_avx512(values: &[f64]) -> (usize, f64) {
    let n = values.len();
    let p = values.as_ptr();
    let inf = _mm512_set1_pd(f64::INFINITY);
    let (mut lo, mut idx) = (inf, _mm512_setzero_si512());
    let mut at = lane_offsets();
    let eight = _mm512_set1_epi64(8);
    let mut j = 0;
    // SAFETY: lanes below n only (the tail masked, filled with +inf).
    unsafe {
        while j < n {
            let m: __mmask8 = first_lanes(n - j);
            let v = _mm512_mask_loadu_pd(inf, m, p.add(j));
            let sq = _mm512_mul_pd(v, v);
            // Strictly less keeps each lane's first; ordered, so NaN never wins.
            let better = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(sq, lo);
            lo = _mm512_mask_mov_pd(lo, better, sq);
            idx = _mm512_mask_mov_epi64(idx, better, at);
            at = _mm512_add_epi64(at, eight);
            j += 8;
        }
    }
    let least = _mm512_reduce_min_pd(lo);
    if !least.is_finite() {
        // Only infinities or NaN: the scalar rule decides.
        return argmin_sq_portable(values).unwrap_or((0, f64::NAN));
    }
    (first_index_of(lo, idx, least), least)
}

/// The largest kappa[j], j != except, with sign * coef[j] > 0, and its first index (None
/// when there is none; NaN never wins).
///
/// # Safety
/// The CPU must support AVX-512F; `coef` and `kappa` have the same length.
#[target_feature(enable = "avx512f")]
pub unsafe fn argmax_same_sign_avx512(
    coef: &[f64],
    kappa: &[f64],
    sign: f64,
    except: usize,
) -> Option<usize> {
    let n = coef.len();
    let (pc, pk) = (coef.as_ptr(), kappa.as_ptr());
    let vsign = _mm512_set1_pd(sign);
    let lowest = _mm512_set1_pd(f64::NEG_INFINITY);
    // Per lane: the largest eligible kappa so far, its index, whether one was found.
    struct Lanes {
        most: __m512d,
        idx: __m512i,
        found: __mmask8,
    }
    #[inline(always)]
    fn update(l: &mut Lanes, k: __m512d, c: __m512d, vsign: __m512d, at: __m512i, drop: __mmask8) {
        // SAFETY: register-only intrinsics; AVX-512F is enabled in the caller.
        unsafe {
            let same =
                _mm512_cmp_pd_mask::<_CMP_GT_OQ>(_mm512_mul_pd(c, vsign), _mm512_setzero_pd())
                    & !drop;
            // Strictly greater keeps each lane's first; ordered, so NaN never wins. A lane
            // that has not found one takes any eligible value, -inf included.
            let greater = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(k, l.most) | (same & !l.found);
            let take = same & greater & _mm512_cmp_pd_mask::<_CMP_ORD_Q>(k, k);
            l.most = _mm512_mask_mov_pd(l.most, take, k);
            l.idx = _mm512_mask_mov_epi64(l.idx, take, at);
            l.found |= take;
        }
    }
    let start = || Lanes {
        most: lowest,
        idx: _mm512_setzero_si512(),
        found: 0,
    };
    // Two independent accumulators (even and odd chunks) halve the dependency chain.
    let (mut even, mut odd) = (start(), start());
    let drop_at = |j: usize| -> __mmask8 {
        if (j..j + 8).contains(&except) {
            1u8 << (except - j)
        } else {
            0
        }
    };
    let eight = _mm512_set1_epi64(8);
    let mut at = lane_offsets();
    let mut j = 0;
    // SAFETY: full chunks read lanes j..j+16 <= n.
    unsafe {
        while j + 16 <= n {
            let (k0, c0) = (_mm512_loadu_pd(pk.add(j)), _mm512_loadu_pd(pc.add(j)));
            let (k1, c1) = (
                _mm512_loadu_pd(pk.add(j + 8)),
                _mm512_loadu_pd(pc.add(j + 8)),
            );
            update(&mut even, k0, c0, vsign, at, drop_at(j));
            at = _mm512_add_epi64(at, eight);
            update(&mut odd, k1, c1, vsign, at, drop_at(j + 8));
            at = _mm512_add_epi64(at, eight);
            j += 16;
        }
    }
    while j < n {
        let m: __mmask8 = first_lanes(n - j);
        // SAFETY: lanes below n only.
        let (k, c) = unsafe {
            (
                _mm512_mask_loadu_pd(lowest, m, pk.add(j)),
                _mm512_maskz_loadu_pd(m, pc.add(j)),
            )
        };
        update(&mut even, k, c, vsign, at, drop_at(j) | !m);
        at = _mm512_add_epi64(at, eight);
        j += 8;
    }
    let most = [even.most, odd.most];
    let idx = [even.idx, odd.idx];
    let found = [even.found, odd.found];
    let mut best: Option<(f64, usize)> = None;
    for a in 0..2 {
        if found[a] == 0 {
            continue;
        }
        let value = _mm512_mask_reduce_max_pd(found[a], most[a]);
        let lanes = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(most[a], _mm512_set1_pd(value)) & found[a];
        let masked = _mm512_mask_mov_epi64(_mm512_set1_epi64(i64::MAX), lanes, idx[a]);
        let j = _mm512_reduce_min_epi64(masked) as usize;
        if best.is_none_or(|(v, i)| value > v || (value == v && j < i)) {
            best = Some((value, j));
        }
    }
    best.map(|(_, j)| j)
}

/// `scan_candidates` eight SVs at a time.
///
/// # Safety
/// The CPU must support AVX-512F; `coef` and `kappa` have the same length.
#[target_feature(enable = "avx512f")]
pub unsafe fn scan_candidates_avx512(
    coef: &[f64],
    kappa: &[f64],
    filter: CandidateFilter,
    mut visit: impl FnMut(usize) -> f64,
) {
    // In locals, the cut as the search raises it: the struct stays out of the loop.
    let CandidateFilter {
        sign,
        scale,
        mut cut,
    } = filter;
    let n = coef.len();
    let (pc, pk) = (coef.as_ptr(), kappa.as_ptr());
    let (vsign, vscale, zero) = (
        _mm512_set1_pd(sign),
        _mm512_set1_pd(scale),
        _mm512_setzero_pd(),
    );
    let mut vcut = _mm512_set1_pd(cut);
    let mut j0 = 0;
    while j0 + 8 <= n {
        // SAFETY: lanes j0..j0+8 are inside both slices.
        let (k, c) = unsafe { (_mm512_loadu_pd(pk.add(j0)), _mm512_loadu_pd(pc.add(j0))) };
        let near = _mm512_cmp_pd_mask::<_CMP_NLT_UQ>(_mm512_mul_pd(k, vscale), vcut);
        let same = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(_mm512_mul_pd(c, vsign), zero);
        let mut hits = near & same;
        while hits != 0 {
            let j = j0 + hits.trailing_zeros() as usize;
            hits &= hits - 1;
            // The cut may have risen since the vector was compared.
            if !(CandidateFilter { sign, scale, cut }).below_cut(kappa[j]) {
                cut = visit(j);
                vcut = _mm512_set1_pd(cut);
            }
        }
        j0 += 8;
    }
    scan_candidates_portable(coef, kappa, CandidateFilter { sign, scale, cut }, visit, j0);
}
