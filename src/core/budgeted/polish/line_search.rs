//! The exact line search along a direction of the piecewise-quadratic objective.

use rayon::prelude::*;

use crate::core::budgeted::problem::Term;
use crate::core::common::parallel;

use super::objective::{chunked_sum, quad_form, TermAt, SUM_CHUNK};
use super::output::Output;

/// Where a row's loss term changes piece along a line search's direction.
struct PieceChange {
    t: f64,
    row: usize,
    /// What phi' = a + b t gains there: the entered piece's part less the left one's.
    da: f64,
    db: f64,
}

/// The order a line search walks the changes in (a total order: rows break ties in t).
fn walk_order(x: &PieceChange, y: &PieceChange) -> std::cmp::Ordering {
    x.t.total_cmp(&y.t).then(x.row.cmp(&y.row))
}

/// The smallest changes first: a line search's root is mostly among them.
pub(super) const WALK_FIRST: usize = 256;

/// The step t > 0 minimising the objective along (d, db) exactly: the derivative
/// phi'(t) = beta^T K d + t d^T K d + 2C sum_i w delta_i half_slope_i(f_i + t delta_i)
/// is piecewise linear and increasing, its pieces changing where a row's value crosses one of
/// its boundaries (`Targets::boundaries`). Those steps are sorted and swept in order, phi'
/// kept as a + b t between them, until it turns non-negative: the root is then exact, in
/// O(n log n) whatever the number of pieces (a root-finder on phi' needs an O(n) evaluation
/// per step, and many steps where the smoothed hinge's bends are dense). The steps up to the
/// full one come first, those beyond only while phi' is still negative at t = 1: most rows'
/// changes lie far beyond it (sorting them all took a tenth of the million-row checkerboard's
/// polish).
/// Returns exactly 1 when the full step is the minimiser to rounding.
pub(super) fn line_search(
    kss: &[f64],
    o: &Output,
    c: f64,
    term: &TermAt<'_>,
    boundaries: &(dyn Fn(usize) -> [f64; 2] + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
    exact_step: bool,
) -> f64 {
    let (f, delta) = (&o.f, &o.delta);
    let n = f.len();
    // Rows in one piece at both ends of the full step are in it all along (the pieces are
    // intervals of f): if no row changes piece between t = 0 and t = 1, the objective is
    // quadratic on the whole step, and a Newton system's step (`exact_step`: the minimiser of
    // that quadratic) is its minimiser, t = 1 (this also settles the last, tiny steps that the
    // slope's rounding could not). A Hessian-free step: below.
    let flips = chunked_sum(n, &|r| {
        let mut count = 0.0;
        for i in r {
            if term(i, f[i]) != term(i, f[i] + delta[i]) {
                count += 1.0;
            }
        }
        [count, 0.0]
    })[0];
    if flips == 0.0 && exact_step {
        return 1.0;
    }
    let dkd = quad_form(kss, &o.d, &o.d);
    let bkd = quad_form(kss, &o.beta, &o.d);
    // A row's part of phi' = a + b t while it stays in one piece (before the factor 2C w).
    let part = |i: usize, piece: Term| -> (f64, f64) {
        let d = delta[i];
        match piece {
            Term::Zero => (0.0, 0.0),
            Term::Square { r } => (d * (f[i] - r), d * d),
            Term::Tangent { r, e } => (d * (e - r), 0.0),
        }
    };
    // phi' at t = 0 (summed in row order).
    let (mut a, mut b) = (bkd, dkd);
    for (i, &fi) in f.iter().enumerate() {
        let w2c = 2.0 * c * weight(i);
        let (pa, pb) = part(i, term(i, fi));
        a += w2c * pa;
        b += w2c * pb;
    }
    if a >= 0.0 {
        // Not a descent direction (converged to rounding).
        return 0.0;
    }
    if flips == 0.0 {
        // A Hessian-free step is the minimiser for the Hessian its products used (the
        // squared rows rounded to halves or f32): t = 1 up to that rounding's share of the
        // curvature along it, which on a basis whose kernel values all lie near 1 (a9a's
        // gamma) can be large. Cut where the minimiser -a / b is short of half the step; from
        // half on, the full step lowers the objective too, and it is taken as the Newton
        // system's is (never longer: along K_SS's near-null directions the quadratic is
        // nearly flat, and its minimiser can lie 1e8 steps out for a gain of 1e-7).
        let t = -a / b;
        return if b > 0.0 && t < 0.5 { t } else { 1.0 };
    }
    // The steps in (lo, hi] where a row changes piece, with what phi' gains there from the
    // piece it leaves to the one it enters (each entered piece found at the middle of the next
    // interval, so rounding at a boundary cannot misplace it). Most rows' changes lie far
    // beyond the full step, so those up to t = 1 are walked first, the others only if phi' is
    // still negative there; and the root is mostly among the first changes, so they are put
    // in order a doubling share at a time (a selection, then a sort of the share), not all.
    let changes_in = |lo: f64, hi: f64| -> Vec<PieceChange> {
        let chunks = n.div_ceil(SUM_CHUNK);
        let parts: Vec<Vec<PieceChange>> = parallel::install(|| {
            (0..chunks)
                .into_par_iter()
                .map(|ch| {
                    let mut found = Vec::new();
                    for i in ch * SUM_CHUNK..((ch + 1) * SUM_CHUNK).min(n) {
                        let d = delta[i];
                        if d == 0.0 {
                            continue;
                        }
                        let mut ts = boundaries(i).map(|v| (v - f[i]) / d);
                        ts.sort_by(f64::total_cmp);
                        let mut leaves = term(i, f[i]);
                        for (j, &t) in ts.iter().enumerate() {
                            if !(t > 0.0 && t.is_finite()) {
                                continue;
                            }
                            let next = match ts.get(j + 1) {
                                Some(&u) if u > 0.0 && u.is_finite() => 0.5 * (t + u),
                                _ => t + 1.0,
                            };
                            let enters = term(i, f[i] + next * d);
                            if t > lo && t <= hi {
                                let w2c = 2.0 * c * weight(i);
                                let (la, lb) = part(i, leaves);
                                let (ea, eb) = part(i, enters);
                                found.push(PieceChange {
                                    t,
                                    row: i,
                                    da: w2c * (ea - la),
                                    db: w2c * (eb - lb),
                                });
                            }
                            leaves = enters;
                        }
                    }
                    found
                })
                .collect()
        });
        parts.into_iter().flatten().collect()
    };
    let mut t_lo = 0.0;
    let mut root = f64::NAN;
    'walk: for (lo, hi) in [(0.0, 1.0), (1.0, f64::INFINITY)] {
        let mut changes = changes_in(lo, hi);
        let (mut from, mut share) = (0, WALK_FIRST);
        while from < changes.len() {
            let rest = &mut changes[from..];
            let k = share.min(rest.len());
            if k < rest.len() {
                rest.select_nth_unstable_by(k - 1, walk_order);
            }
            rest[..k].sort_unstable_by(walk_order);
            for change in &rest[..k] {
                // phi' is a + b t on [t_lo, t]; its root there ends the search.
                if a + b * change.t >= 0.0 {
                    root = if b > 0.0 {
                        (-a / b).max(t_lo)
                    } else {
                        change.t
                    };
                    break 'walk;
                }
                a += change.da;
                b += change.db;
                t_lo = change.t;
            }
            from += k;
            share *= 2;
        }
        if a + b * hi >= 0.0 {
            // The root lies before the next interval's first change.
            break;
        }
    }
    if root.is_nan() {
        // Past the last change phi' is linear with slope dkd + 2C (squares) > 0 unless no
        // curvature is left; then the last change is as far as the model can tell.
        root = if b > 0.0 { (-a / b).max(t_lo) } else { t_lo };
    }
    if (root - 1.0).abs() <= 1e-12 {
        return 1.0;
    }
    root
}
