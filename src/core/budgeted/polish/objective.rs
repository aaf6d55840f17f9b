//! The objective and the start's best multiple (`scale_start`), with the fixed-chunk sums
//! they are taken in.

use std::ops::Range;

use rayon::prelude::*;

use crate::core::budgeted::problem::Term;
use crate::core::common::parallel;
use crate::core::simd;

use super::output::Output;

/// Rows per chunk of the line-search sums.
pub(super) const SUM_CHUNK: usize = 8192;

/// Row i's loss term at f (`Targets::term` of one output).
pub(super) type TermAt<'a> = dyn Fn(usize, f64) -> Term + Sync + 'a;

/// 1/2 beta^T K beta + C sum_i w_i loss_i(f_i), the sum in fixed chunks.
pub(super) fn objective(
    kss: &[f64],
    beta: &[f64],
    f: &[f64],
    c: f64,
    term: &TermAt<'_>,
    weight: &(dyn Fn(usize) -> f64 + Sync),
) -> f64 {
    let loss = chunked_sum(f.len(), &|rows| {
        let mut s = 0.0;
        for i in rows {
            s += weight(i) * term(i, f[i]).loss(f[i]);
        }
        [s, 0.0]
    })[0];
    0.5 * quad_form(kss, beta, beta) + c * loss
}

/// The start's best multiple: (s, b) minimising the objective at (s beta, b), whose f is
/// s (f - b_0) + b, by Newton steps on the two variables from the first pass's values (a few
/// sweeps over f, no kernel value). The budgeted pass's coefficients are often far off in
/// scale (BSGD's iterate, a Crammer-Singer start at 100x the optimum's objective), and the
/// first Newton steps of the polish, cut by its line search, spent iterations on it. The start
/// moves there only when that lowers its objective by at least the share `least_gain`;
/// returns whether it moved.
pub(super) fn scale_start(
    kss: &[f64],
    o: &mut Output,
    c: f64,
    term: &TermAt<'_>,
    weight: &(dyn Fn(usize) -> f64 + Sync),
    least_gain: f64,
) -> bool {
    let q = quad_form(kss, &o.beta, &o.beta);
    if q.is_nan() || q <= 0.0 {
        return false;
    }
    let b0 = o.b;
    let g: Vec<f64> = o.f.iter().map(|f| f - b0).collect();
    let phi = |s: f64, b: f64| {
        let loss = chunked_sum(g.len(), &|rows| {
            let mut t = 0.0;
            for i in rows {
                let f = s * g[i] + b;
                t += weight(i) * term(i, f).loss(f);
            }
            [t, 0.0]
        })[0];
        0.5 * s * s * q + c * loss
    };
    let (mut s, mut b) = (1.0, b0);
    let mut value = phi(s, b);
    let at_start = value;
    for _ in 0..30 {
        // Gradient and Hessian in (s, b).
        let sums = chunked_sum(g.len(), &|rows| {
            let mut sums = [0.0; 5];
            for i in rows {
                let (gi, f) = (g[i], s * g[i] + b);
                let t = term(i, f);
                let w = weight(i);
                let (hs, cv) = (t.half_slope(f), t.curvature());
                sums[0] += w * hs * gi;
                sums[1] += w * hs;
                sums[2] += w * cv * gi * gi;
                sums[3] += w * cv * gi;
                sums[4] += w * cv;
            }
            sums
        });
        let gs = s * q + 2.0 * c * sums[0];
        let gb = 2.0 * c * sums[1];
        let (hss, hsb, hbb) = (q + 2.0 * c * sums[2], 2.0 * c * sums[3], 2.0 * c * sums[4]);
        let det = hss * hbb - hsb * hsb;
        let (ds, db) = if det > 1e-12 * hss * hbb.max(f64::MIN_POSITIVE) && hbb > 0.0 {
            (-(hbb * gs - hsb * gb) / det, -(hss * gb - hsb * gs) / det)
        } else {
            (-gs / hss, 0.0)
        };
        let slope = gs * ds + gb * db;
        if slope.is_nan() || slope >= 0.0 {
            break;
        }
        let mut t = 1.0;
        let mut next = phi(s + ds, b + db);
        while next > value + 1e-4 * t * slope && t > 1e-10 {
            t *= 0.5;
            next = phi(s + t * ds, b + t * db);
        }
        if next.is_nan() || next >= value {
            break;
        }
        s += t * ds;
        b += t * db;
        let decrease = value - next;
        value = next;
        if decrease <= 1e-9 * value.abs() {
            break;
        }
    }
    if (s == 1.0 && b == b0) || value > (1.0 - least_gain) * at_start {
        return false;
    }
    o.beta.iter_mut().for_each(|v| *v *= s);
    o.b = b;
    o.f.iter_mut().zip(&g).for_each(|(f, gi)| *f = s * gi + b);
    true
}

/// a^T K b for the symmetric m x m K (full storage).
pub(super) fn quad_form(k: &[f64], a: &[f64], b: &[f64]) -> f64 {
    let m = a.len();
    (0..m)
        .map(|j| a[j] * simd::dot(&k[j * m..(j + 1) * m], b))
        .sum()
}

/// Two sums over 0..n in chunks of `SUM_CHUNK` rows (in parallel), added in chunk order.
pub(super) fn chunked_sum<const N: usize>(
    n: usize,
    part: &(dyn Fn(Range<usize>) -> [f64; N] + Sync),
) -> [f64; N] {
    let chunks = n.div_ceil(SUM_CHUNK);
    let parts: Vec<[f64; N]> = parallel::install(|| {
        (0..chunks)
            .into_par_iter()
            .map(|c| part(c * SUM_CHUNK..((c + 1) * SUM_CHUNK).min(n)))
            .collect()
    });
    parts.iter().fold([0.0; N], |mut acc, p| {
        acc.iter_mut().zip(p).for_each(|(a, v)| *a += v);
        acc
    })
}
