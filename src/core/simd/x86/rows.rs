//! The fused kernel row of `rbf_row` on the vector levels, its decision sum in the same order,
//! and `weighted_row_sum` with the outputs in registers.

use super::exp::rbf;
use super::{levels, Avx2, Avx512, Simd};
use crate::core::simd::rows::FusedRow;

/// (f[0] + f[1]) + (f[2] + f[3]), then the lanes: the decision sum's order.
#[inline(always)]
fn sum4<S: Simd>(s: S, f: [S::F; 4]) -> f64 {
    s.sum(s.add(s.add(f[0], f[1]), s.add(f[2], f[3])))
}

/// Blocks of 4 vectors of SVs at a time in the decision sum's four accumulators, then single
/// vectors (the last masked) into the first: `rbf_row`'s order.
const UNROLL: usize = 4;

/// The decision sum of `rbf_row_on`, in its order, from stored kernel values.
///
/// # Safety
/// Both slices have the same length.
#[inline(always)]
unsafe fn decision_sum_on<S: Simd>(s: S, coef: &[f64], kvals: &[f64]) -> f64 {
    let (w, len) = (S::LANES, kvals.len());
    let (pc, pk) = (coef.as_ptr(), kvals.as_ptr());
    let mut f = [s.zero(); UNROLL];
    let mut j = 0;
    // SAFETY: whole blocks read below len; the tail is masked.
    unsafe {
        while j + w * UNROLL <= len {
            for (l, fl) in f.iter_mut().enumerate() {
                let o = j + w * l;
                *fl = s.fmadd(s.load(pc.add(o)), s.load(pk.add(o)), *fl);
            }
            j += w * UNROLL;
        }
        while j < len {
            let t = s.tail(len - j);
            f[0] = s.fmadd(s.load_tail(pc.add(j), t), s.load_tail(pk.add(j), t), f[0]);
            j += w;
        }
    }
    sum4(s, f)
}

/// `rbf_row`: blocks of UNROLL vectors of SVs (their dot products in registers across the row's
/// non-zeros), then single vectors, the last masked.
///
/// # Safety
/// `rbf_row` checked every offset.
#[inline(always)]
unsafe fn rbf_row_on<S: Simd>(s: S, fused: FusedRow<'_>, kvals: &mut [f64]) -> f64 {
    let FusedRow(svs, row, gamma, coef) = fused;
    let (w, cols, vals) = (S::LANES, row.cols, row.vals);
    let (len, stride) = (svs.len, svs.stride);
    let (ps, pn, pk) = (svs.svt.as_ptr(), svs.sq_norms.as_ptr(), kvals.as_mut_ptr());
    let pc = coef.map(|c| c.as_ptr());
    let (g, xn) = (s.splat(-gamma), s.splat(row.sq_norm));
    let mut f = [s.zero(); UNROLL];
    let mut j = 0;
    // SAFETY: rows c * stride + j .. + w * UNROLL with j + w * UNROLL <= len <= stride and c
    // checked by the caller; the masked tail reads and writes only lanes below len.
    unsafe {
        while j + w * UNROLL <= len {
            let mut acc = [s.zero(); UNROLL];
            for (&c, &v) in cols.iter().zip(vals) {
                let (vv, run) = (s.splat(v), ps.add(c * stride + j));
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = s.fmadd(vv, s.load(run.add(w * l)), *a);
                }
            }
            for (l, a) in acc.iter().enumerate() {
                let o = j + w * l;
                let k = rbf(s, *a, s.load(pn.add(o)), xn, g);
                s.store(pk.add(o), k);
                if let Some(pc) = pc {
                    f[l] = s.fmadd(s.load(pc.add(o)), k, f[l]);
                }
            }
            j += w * UNROLL;
        }
        while j < len {
            let t = s.tail(len - j);
            let mut acc = s.zero();
            for (&c, &v) in cols.iter().zip(vals) {
                acc = s.fmadd(s.splat(v), s.load_tail(ps.add(c * stride + j), t), acc);
            }
            let k = rbf(s, acc, s.load_tail(pn.add(j), t), xn, g);
            s.store_tail(pk.add(j), t, k);
            if let Some(pc) = pc {
                f[0] = s.fmadd(s.load_tail(pc.add(j), t), k, f[0]);
            }
            j += w;
        }
    }
    sum4(s, f)
}

levels! {
    /// The decision sum in `rbf_row`'s order (`decision_sum_on`).
    fn decision_sum(coef: &[f64], kvals: &[f64]) -> f64
        = decision_sum_on in decision_sum_avx2, decision_sum_avx512;
    /// The fused kernel row (`rbf_row_on`).
    fn rbf_row(fused: FusedRow<'_>, kvals: &mut [f64]) -> f64
        = rbf_row_on in rbf_row_avx2, rbf_row_avx512;
}

/// `weighted_row_sum` for n_out <= C LANES: C vectors of outputs, four SVs in flight (rows
/// j = u mod 4 in accumulator u, the tail in the first), added pairwise at the end: per output
/// the same operations in the same order on every level, so the same bits.
///
/// # Safety
/// `coef` holds `weights.len()` rows of `n_out`, `out` n_out values, n_out <= C LANES.
#[inline(always)]
unsafe fn weighted_row_sum_on<S: Simd, const C: usize>(
    s: S,
    coef: &[f64],
    n_out: usize,
    weights: &[f64],
    out: &mut [f64],
) {
    let tails: [S::Tail; C] = std::array::from_fn(|c| s.tail(n_out.saturating_sub(S::LANES * c)));
    let mut acc = [[s.zero(); C]; 4];
    let pc = coef.as_ptr();
    let n = weights.len();
    let mut j = 0;
    // SAFETY: row j's lanes below n_out only (the tails).
    unsafe {
        while j + 4 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let w = s.splat(weights[j + u]);
                let row = pc.add((j + u) * n_out);
                for (c, v) in a.iter_mut().enumerate() {
                    *v = s.fmadd(w, s.load_tail(row.add(S::LANES * c), tails[c]), *v);
                }
            }
            j += 4;
        }
        while j < n {
            let w = s.splat(weights[j]);
            let row = pc.add(j * n_out);
            for (c, v) in acc[0].iter_mut().enumerate() {
                *v = s.fmadd(w, s.load_tail(row.add(S::LANES * c), tails[c]), *v);
            }
            j += 1;
        }
        for c in 0..C {
            let sum = s.add(s.add(acc[0][c], acc[1][c]), s.add(acc[2][c], acc[3][c]));
            s.store_tail(out.as_mut_ptr().add(S::LANES * c), tails[c], sum);
        }
    }
}

/// `weighted_row_sum_on` with AVX2 and FMA (n_out <= 4 C).
///
/// # Safety
/// AVX2 and FMA must run here; as `weighted_row_sum_on`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn weighted_row_sum_avx2<const C: usize>(c: &[f64], n: usize, w: &[f64], o: &mut [f64]) {
    // SAFETY: the caller's contract.
    unsafe { weighted_row_sum_on::<_, C>(Avx2::new_unchecked(), c, n, w, o) }
}

/// `weighted_row_sum_on` with AVX-512F and FMA (n_out <= 8 C).
///
/// # Safety
/// AVX-512F and FMA must run here; as `weighted_row_sum_on`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn weighted_row_sum_avx512<const C: usize>(
    c: &[f64],
    n: usize,
    w: &[f64],
    o: &mut [f64],
) {
    // SAFETY: the caller's contract.
    unsafe { weighted_row_sum_on::<_, C>(Avx512::new_unchecked(), c, n, w, o) }
}
