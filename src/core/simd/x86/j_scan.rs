//! The j scan with AVX-512 (eight candidates a vector) and AVX2 (four): per lane the portable
//! loop's two smallest and best j, merged at the end, the places past the last whole vector
//! through the portable loop.

use super::{Near256, Near512};
use crate::core::simd::j_scan::{j_scan_portable, pair_curvature, JScan, JScanInput};
use crate::core::simd::values::RowValue;
use std::arch::x86_64::*;

/// `j_scan` eight candidates at a time: every lane keeps its own two smallest and best j (the
/// portable loop's rules), merged at the end by place; the places past the last whole vector go
/// through the portable loop from that state. No early outs: each lane divides, which costs
/// less than the portable loop's branches.
///
/// # Safety
/// The CPU must support AVX-512F; `v` and `input.t` have the same length; the positions lie
/// within `input.diag`, the labels and, from `input.j0`, the rows.
#[target_feature(enable = "avx512f")]
pub unsafe fn j_scan_avx512<T: RowValue>(v: &mut [f64], input: &JScanInput<'_, T>) -> JScan {
    let n = v.len();
    let whole = n - n % 8;
    let JScanInput {
        t,
        diag,
        equal_diag,
        j0,
        i,
        vi,
        row_i,
        update,
        label,
        tau,
    } = *input;
    let k_ii = diag[i];
    let (pv, pt) = (v.as_mut_ptr(), t.as_ptr());
    // The rows and the diagonal from j0: the gathers' offsets are below a row block.
    let diag_j0 = diag[j0..].as_ptr();
    let (vk_ii, vvi, two, vtau, zero) = (
        _mm512_set1_pd(k_ii),
        _mm512_set1_pd(vi),
        _mm512_set1_pd(2.0),
        _mm512_set1_pd(tau),
        _mm512_setzero_pd(),
    );
    let inf = _mm512_set1_pd(f64::INFINITY);
    let sign = _mm512_set1_epi64(i64::MIN);
    let vj0 = _mm512_set1_epi32(j0 as i32);
    // i's offset, or one no position has.
    let i_off = _mm512_set1_epi32(i.checked_sub(j0).map_or(-1, |o| o as i32));
    // With a sum per label: the labels from j0 and i's.
    let label = label.map(|(y, yi)| (y[j0..].as_ptr(), _mm512_set1_pd(yi)));
    let (mut first_v, mut second_v, mut best_obj) = (inf, inf, inf);
    let (mut first_k, mut best_k) = (_mm512_set1_epi64(-1), _mm512_set1_epi64(-1));
    let mut places = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    let eight = _mm512_set1_epi64(8);
    let mut k = 0;
    while k < whole {
        // SAFETY (the loads, gathers and store): places k..k+8 lie in v and t; offsets within
        // the rows and diag from j0 (the caller's contract).
        let off = unsafe {
            _mm512_sub_epi32(
                _mm512_castsi256_si512(_mm256_loadu_si256(pt.add(k).cast())),
                vj0,
            )
        };
        let off8 = _mm512_castsi512_si256(off);
        let mut vv = unsafe { _mm512_loadu_pd(pv.add(k)) };
        // Eight positions within 32 (16 for f64) of the first are read by one or two plain
        // loads and a permute: AMD's gathers cost several times a load per lane, and I_low is
        // mostly dense or nearly so. Positions increase, so the last is the farthest.
        let span = (t[k + 7] - t[k]) as usize;
        let first_off = t[k] as usize - j0;
        // The offsets from the first, and the near loads' masks: first_off..=first_off + span,
        // all inside the rows.
        let rel = || _mm512_sub_epi32(off, _mm512_set1_epi32(first_off as i32));
        let near_mask = || !0u32 >> (31 - span.min(31));
        let at = Near512 {
            first_off,
            span,
            off,
            rel: rel(),
        };
        // SAFETY: offsets within the rows (the caller's contract), lanes outside the masks not
        // read.
        let row_lanes = |row: &[T], mask: __mmask8| unsafe { T::lanes_512(row, &at, mask) };
        // SAFETY: as `row_lanes`, for a per-position array of f64 from j0.
        let f64_lanes = |from_j0: *const f64, mask: __mmask8| -> __m512d {
            unsafe {
                let p = from_j0.add(first_off);
                if span == 7 {
                    _mm512_maskz_loadu_pd(mask, p)
                } else if span < 16 {
                    let m = near_mask();
                    let lo = _mm512_maskz_loadu_pd(m as __mmask8, p);
                    let hi = _mm512_maskz_loadu_pd((m >> 8) as __mmask8, p.add(8));
                    let rel64 = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(rel()));
                    _mm512_permutex2var_pd(lo, rel64, hi)
                } else {
                    _mm512_mask_i32gather_pd::<8>(zero, mask, off8, from_j0)
                }
            }
        };
        if let Some((ri, rj, step)) = update {
            let d = _mm512_sub_pd(row_lanes(ri, 0xff), row_lanes(rj, 0xff));
            vv = _mm512_sub_pd(vv, _mm512_mul_pd(d, _mm512_set1_pd(step)));
            unsafe { _mm512_storeu_pd(pv.add(k), vv) };
        }
        // The candidates that count: all, or those of i's label.
        let counted: __mmask8 = match label {
            None => 0xff,
            Some((y, yi)) => _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(f64_lanes(y, 0xff), yi),
        };
        // The two smallest, as `j_scan_portable` pushes them.
        let lt1 = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(counted, vv, first_v);
        let lt2 = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(counted & !lt1, vv, second_v);
        second_v = _mm512_mask_blend_pd(lt1, _mm512_mask_blend_pd(lt2, second_v, vv), first_v);
        first_v = _mm512_mask_blend_pd(lt1, first_v, vv);
        first_k = _mm512_mask_blend_epi64(lt1, first_k, places);
        // The j candidates: b > 0 and not i.
        let b = _mm512_sub_pd(vvi, vv);
        let not_i = (_mm512_cmpneq_epi32_mask(off, i_off) & 0xff) as __mmask8 & counted;
        let cand = _mm512_mask_cmp_pd_mask::<_CMP_GT_OQ>(not_i, b, zero);
        if cand != 0 {
            let k_tt = if equal_diag {
                vk_ii
            } else {
                f64_lanes(diag_j0, cand)
            };
            let k_it = row_lanes(row_i, cand);
            let a = _mm512_sub_pd(_mm512_add_pd(vk_ii, k_tt), _mm512_mul_pd(two, k_it));
            let a = _mm512_mask_blend_pd(_mm512_cmp_pd_mask::<_CMP_GT_OQ>(a, zero), vtau, a);
            let b2 = _mm512_mul_pd(b, b);
            // Every lane divides: a test against the lane's best first (the portable loop's)
            // would chain each vector to the last through that best, which costs more.
            let neg_b2 = _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(b2), sign));
            let obj = _mm512_div_pd(neg_b2, a);
            let better = _mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(cand, obj, best_obj);
            best_obj = _mm512_mask_blend_pd(better, best_obj, obj);
            best_k = _mm512_mask_blend_epi64(better, best_k, places);
        }
        places = _mm512_add_epi64(places, eight);
        k += 8;
    }
    let mut out = JScan::default();
    if whole > 0 {
        let (mut fv, mut sv, mut bo) = ([0.0f64; 8], [0.0f64; 8], [0.0f64; 8]);
        let (mut fk, mut bk) = ([0i64; 8], [0i64; 8]);
        // SAFETY: eight lanes each.
        unsafe {
            _mm512_storeu_pd(fv.as_mut_ptr(), first_v);
            _mm512_storeu_pd(sv.as_mut_ptr(), second_v);
            _mm512_storeu_pd(bo.as_mut_ptr(), best_obj);
            _mm512_storeu_si512(fk.as_mut_ptr().cast(), first_k);
            _mm512_storeu_si512(bk.as_mut_ptr().cast(), best_k);
        }
        out = merged_j_lanes(&fv, &fk, &sv, &bo, &bk, v, input);
    }
    j_scan_portable(v, input, whole, out)
}

/// The lanes' two smallest and best j of a vector `j_scan` merged into one result: the first is
/// the least value (the earliest place of equal ones), the second the least of the lanes'
/// seconds and the other lanes' firsts, the best j the least objective (the latest place of
/// equal ones) with its b and a again from its place by the same operations. A lane's place
/// is negative where it found none.
fn merged_j_lanes<T: RowValue>(
    fv: &[f64],
    fk: &[i64],
    sv: &[f64],
    bo: &[f64],
    bk: &[i64],
    v: &[f64],
    input: &JScanInput<'_, T>,
) -> JScan {
    let mut out = JScan::default();
    let mut at = usize::MAX;
    for l in 0..fv.len() {
        if fk[l] >= 0 && (at == usize::MAX || fv[l] < fv[at] || (fv[l] == fv[at] && fk[l] < fk[at]))
        {
            at = l;
        }
    }
    let mut second = sv.iter().copied().fold(f64::INFINITY, f64::min);
    for l in 0..fv.len() {
        if l != at && fk[l] >= 0 {
            second = second.min(fv[l]);
        }
    }
    if at != usize::MAX {
        out.first = (fv[at], fk[at] as usize);
    }
    out.second = second;
    let mut win = usize::MAX;
    for l in 0..bo.len() {
        if bk[l] >= 0
            && (win == usize::MAX || bo[l] < bo[win] || (bo[l] == bo[win] && bk[l] > bk[win]))
        {
            win = l;
        }
    }
    if win != usize::MAX {
        let place = bk[win] as usize;
        let tp = input.t[place] as usize;
        let b = input.vi - v[place];
        let a = pair_curvature(
            input.diag[input.i],
            input.diag[tp],
            input.row_i[tp - input.j0],
            input.tau,
        );
        out.best = (bo[win], place, b, a);
    }
    out
}

/// `j_scan` four candidates at a time (`j_scan_avx512`'s lanes and rules with AVX2 vectors;
/// every offset of a whole vector is read, so no gather needs a mask). Unlike AVX-512 it divides
/// only where the portable loop's product test lets a lane reach its best: AVX2's division is
/// slow enough that the test pays (`cargo bench --bench j_scan`).
///
/// # Safety
/// The CPU must support AVX2; the contract of `j_scan_avx512`.
#[target_feature(enable = "avx2")]
pub unsafe fn j_scan_avx2<T: RowValue>(v: &mut [f64], input: &JScanInput<'_, T>) -> JScan {
    let n = v.len();
    let whole = n - n % 4;
    let JScanInput {
        t,
        diag,
        equal_diag,
        j0,
        i,
        vi,
        row_i,
        update,
        label,
        tau,
    } = *input;
    let (pv, pt) = (v.as_mut_ptr(), t.as_ptr());
    let diag_j0 = diag[j0..].as_ptr();
    let (vk_ii, vvi, two, vtau, zero) = (
        _mm256_set1_pd(diag[i]),
        _mm256_set1_pd(vi),
        _mm256_set1_pd(2.0),
        _mm256_set1_pd(tau),
        _mm256_setzero_pd(),
    );
    let inf = _mm256_set1_pd(f64::INFINITY);
    let near_one = _mm256_set1_pd(1.0 - 1e-12);
    let lane_index = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    let sign = _mm256_set1_pd(-0.0);
    let all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    let vj0 = _mm_set1_epi32(j0 as i32);
    let i_off = _mm_set1_epi32(i.checked_sub(j0).map_or(-1, |o| o as i32));
    let label = label.map(|(y, yi)| (y[j0..].as_ptr(), _mm256_set1_pd(yi)));
    let (mut first_v, mut second_v, mut best_obj) = (inf, inf, inf);
    let (mut first_k, mut best_k) = (_mm256_set1_epi64x(-1), _mm256_set1_epi64x(-1));
    let mut places = _mm256_set_epi64x(3, 2, 1, 0);
    let four = _mm256_set1_epi64x(4);
    let mut k = 0;
    while k < whole {
        // SAFETY (the loads, gathers and store): places k..k+4 lie in v and t; offsets within
        // the rows, diag and labels from j0 (the caller's contract).
        let off = unsafe { _mm_sub_epi32(_mm_loadu_si128(pt.add(k).cast()), vj0) };
        let span = (t[k + 3] - t[k]) as usize;
        let dense = span == 3;
        let first_off = t[k] as usize - j0;
        // Four positions within 8 of the first: one masked load (first_off..=first_off + span,
        // inside the rows) and a permute instead of a gather.
        let near = _mm256_cmpgt_epi32(_mm256_set1_epi32(span as i32 + 1), lane_index);
        let rel = _mm256_castsi128_si256(_mm_sub_epi32(off, _mm_set1_epi32(first_off as i32)));
        let at = Near256 {
            first_off,
            span,
            near,
            rel,
            off,
        };
        // SAFETY: offsets within the rows, lanes outside `near` not read.
        let row_lanes = |row: &[T]| unsafe { T::lanes_256(row, &at) };
        let mut vv = unsafe { _mm256_loadu_pd(pv.add(k)) };
        if let Some((ri, rj, step)) = update {
            let d = _mm256_sub_pd(row_lanes(ri), row_lanes(rj));
            vv = _mm256_sub_pd(vv, _mm256_mul_pd(d, _mm256_set1_pd(step)));
            unsafe { _mm256_storeu_pd(pv.add(k), vv) };
        }
        let counted = match label {
            None => all,
            Some((y, yi)) => {
                let yt = unsafe {
                    if dense {
                        _mm256_loadu_pd(y.add(first_off))
                    } else {
                        _mm256_i32gather_pd::<8>(y, off)
                    }
                };
                _mm256_cmp_pd::<_CMP_EQ_OQ>(yt, yi)
            }
        };
        let lt1 = _mm256_and_pd(counted, _mm256_cmp_pd::<_CMP_LT_OQ>(vv, first_v));
        let lt2 = _mm256_andnot_pd(
            lt1,
            _mm256_and_pd(counted, _mm256_cmp_pd::<_CMP_LT_OQ>(vv, second_v)),
        );
        second_v = _mm256_blendv_pd(_mm256_blendv_pd(second_v, vv, lt2), first_v, lt1);
        first_v = _mm256_blendv_pd(first_v, vv, lt1);
        first_k = _mm256_blendv_epi8(first_k, places, _mm256_castpd_si256(lt1));
        let b = _mm256_sub_pd(vvi, vv);
        let is_i = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpeq_epi32(off, i_off)));
        let cand = _mm256_andnot_pd(
            is_i,
            _mm256_and_pd(counted, _mm256_cmp_pd::<_CMP_GT_OQ>(b, zero)),
        );
        if _mm256_movemask_pd(cand) != 0 {
            let k_tt = if equal_diag {
                vk_ii
            } else {
                unsafe {
                    if dense {
                        _mm256_loadu_pd(diag_j0.add(first_off))
                    } else {
                        _mm256_i32gather_pd::<8>(diag_j0, off)
                    }
                }
            };
            let a = _mm256_sub_pd(
                _mm256_add_pd(vk_ii, k_tt),
                _mm256_mul_pd(two, row_lanes(row_i)),
            );
            let a = _mm256_blendv_pd(vtau, a, _mm256_cmp_pd::<_CMP_GT_OQ>(a, zero));
            let b2 = _mm256_mul_pd(b, b);
            // The portable loop's product test against the lane's best (as the AVX-512 scan).
            let reach = _mm256_mul_pd(_mm256_mul_pd(_mm256_xor_pd(best_obj, sign), a), near_one);
            let may = _mm256_and_pd(cand, _mm256_cmp_pd::<_CMP_NLT_UQ>(b2, reach));
            if _mm256_movemask_pd(may) != 0 {
                let obj = _mm256_div_pd(_mm256_xor_pd(b2, sign), a);
                let better = _mm256_and_pd(may, _mm256_cmp_pd::<_CMP_LE_OQ>(obj, best_obj));
                best_obj = _mm256_blendv_pd(best_obj, obj, better);
                best_k = _mm256_blendv_epi8(best_k, places, _mm256_castpd_si256(better));
            }
        }
        places = _mm256_add_epi64(places, four);
        k += 4;
    }
    let mut out = JScan::default();
    if whole > 0 {
        let (mut fv, mut sv, mut bo) = ([0.0f64; 4], [0.0f64; 4], [0.0f64; 4]);
        let (mut fk, mut bk) = ([0i64; 4], [0i64; 4]);
        // SAFETY: four lanes each.
        unsafe {
            _mm256_storeu_pd(fv.as_mut_ptr(), first_v);
            _mm256_storeu_pd(sv.as_mut_ptr(), second_v);
            _mm256_storeu_pd(bo.as_mut_ptr(), best_obj);
            _mm256_storeu_si256(fk.as_mut_ptr().cast(), first_k);
            _mm256_storeu_si256(bk.as_mut_ptr().cast(), best_k);
        }
        out = merged_j_lanes(&fv, &fk, &sv, &bo, &bk, v, input);
    }
    j_scan_portable(v, input, whole, out)
}
