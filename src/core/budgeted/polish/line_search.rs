//! The exact line search along a direction of the piecewise-quadratic objective: where the
//! rows' terms change piece along it, and the walk over those changes in order. The serial
//! solve does both; the distributed one finds each partition's changes on its worker
//! (`PartitionRows::line_changes`) and walks them on the driver with the same `SlopeWalk`.

use rayon::prelude::*;

use crate::core::budgeted::problem::Term;
use crate::core::common::parallel;

use super::objective::{chunked_sum, quad_form, TermAt, SUM_CHUNK};
use super::output::Output;

/// Where a row's loss term changes piece along a line search's direction.
#[derive(Debug, Clone, Copy)]
pub struct PieceChange {
    pub t: f64,
    pub row: usize,
    /// What phi' = a + b t gains there: the entered piece's part less the left one's.
    pub da: f64,
    pub db: f64,
}

/// The order a line search walks the changes in (a total order: rows break ties in t).
pub fn walk_order(x: &PieceChange, y: &PieceChange) -> std::cmp::Ordering {
    x.t.total_cmp(&y.t).then(x.row.cmp(&y.row))
}

/// The smallest changes first: a line search's root is mostly among them.
pub(super) const WALK_FIRST: usize = 256;

/// A row's part of phi' = a + b t while its term stays `piece` (before the factor 2C w):
/// f its value at t = 0, d its change over the full step.
pub(super) fn slope_part(f: f64, d: f64, piece: Term) -> (f64, f64) {
    match piece {
        Term::Zero => (0.0, 0.0),
        Term::Square { r } => (d * (f - r), d * d),
        Term::Tangent { r, e } => (d * (e - r), 0.0),
    }
}

/// Row `row`'s changes of piece at steps in (lo, hi] along f + t d, pushed onto `found` with
/// what phi' gains there (`w2c`: the row's 2C w); `boundaries` the values of f where its
/// term changes piece. Each entered piece is found at the middle of the next interval, so
/// rounding at a boundary cannot misplace it.
pub(super) fn row_changes(
    row: usize,
    (f, d): (f64, f64),
    term: &dyn Fn(f64) -> Term,
    boundaries: [f64; 2],
    w2c: f64,
    (lo, hi): (f64, f64),
    found: &mut Vec<PieceChange>,
) {
    if d == 0.0 {
        return;
    }
    let mut ts = boundaries.map(|v| (v - f) / d);
    ts.sort_by(f64::total_cmp);
    let mut leaves = term(f);
    for (j, &t) in ts.iter().enumerate() {
        if !(t > 0.0 && t.is_finite()) {
            continue;
        }
        let next = match ts.get(j + 1) {
            Some(&u) if u > 0.0 && u.is_finite() => 0.5 * (t + u),
            _ => t + 1.0,
        };
        let enters = term(f + next * d);
        if t > lo && t <= hi {
            let (la, lb) = slope_part(f, d, leaves);
            let (ea, eb) = slope_part(f, d, enters);
            found.push(PieceChange {
                t,
                row,
                da: w2c * (ea - la),
                db: w2c * (eb - lb),
            });
        }
        leaves = enters;
    }
}

/// The step a line search takes without walking any change, from phi'(0) = a, phi'' = b on
/// the first piece and whether any row changes piece within the full step (`flips`); None
/// when the changes must be walked. `exact_step`: the direction is a Newton system's.
pub fn settled_step(a: f64, b: f64, flips: bool, exact_step: bool) -> Option<f64> {
    // Rows in one piece at both ends of the full step are in it all along (the pieces are
    // intervals of f): if no row changes piece between t = 0 and t = 1, the objective is
    // quadratic on the whole step, and a Newton system's step (the minimiser of that
    // quadratic) is its minimiser, t = 1 (this also settles the last, tiny steps that the
    // slope's rounding could not).
    if !flips && exact_step {
        return Some(1.0);
    }
    if a >= 0.0 {
        // Not a descent direction (converged to rounding).
        return Some(0.0);
    }
    if !flips {
        // A Hessian-free step is the minimiser for the Hessian its products used (the
        // squared rows rounded to halves or f32): t = 1 up to that rounding's share of the
        // curvature along it, which on a basis whose kernel values all lie near 1 (a9a's
        // gamma) can be large. Cut where the minimiser -a / b is short of half the step; from
        // half on, the full step lowers the objective too, and it is taken as the Newton
        // system's is (never longer: along K_SS's near-null directions the quadratic is
        // nearly flat, and its minimiser can lie 1e8 steps out for a gain of 1e-7).
        let t = -a / b;
        return Some(if b > 0.0 && t < 0.5 { t } else { 1.0 });
    }
    None
}

/// phi'(t) = a + b t on the piece from `t` on, as the walk over the changes up to `t` left it
/// (phi' is piecewise linear and increasing; its root is the step).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlopeWalk {
    pub a: f64,
    pub b: f64,
    pub t: f64,
}

impl SlopeWalk {
    /// The walk from t = 0, phi'(0) = a and phi'' = b there.
    pub fn new(a: f64, b: f64) -> Self {
        SlopeWalk { a, b, t: 0.0 }
    }

    /// Walks `changes`, in walk order and the next ones after those walked: the root when
    /// phi' turns non-negative before one of them, else None with the changes applied.
    pub fn walk(&mut self, changes: &[PieceChange]) -> Option<f64> {
        for change in changes {
            // phi' is a + b t on [self.t, change.t]; its root there ends the search.
            if self.a + self.b * change.t >= 0.0 {
                return Some(if self.b > 0.0 {
                    (-self.a / self.b).max(self.t)
                } else {
                    change.t
                });
            }
            self.a += change.da;
            self.b += change.db;
            self.t = change.t;
        }
        None
    }

    /// Whether the root lies at or before `t`, no change being left before it.
    pub fn reaches(&self, t: f64) -> bool {
        self.a + self.b * t >= 0.0
    }

    /// The root when no change is left before it. Past the last change phi' is linear with
    /// slope dkd + 2C (squares) > 0 unless no curvature is left; then the last change is as
    /// far as the model can tell.
    pub fn root(&self) -> f64 {
        if self.b > 0.0 {
            (-self.a / self.b).max(self.t)
        } else {
            self.t
        }
    }

    /// Walks `changes`, in walk order and the next ones after those walked, which are every
    /// change up to `complete_to` (the distributed search's partitions send theirs a share at
    /// a time): the step once the root is known (`step_of`), else None, the walk to go on from
    /// `complete_to` with the changes beyond.
    pub fn walk_to(&mut self, changes: &[PieceChange], complete_to: f64) -> Option<f64> {
        match self.walk(changes) {
            Some(root) => Some(step_of(root)),
            None if complete_to == f64::INFINITY || self.reaches(complete_to) => {
                Some(step_of(self.root()))
            }
            None => None,
        }
    }

    /// Walks `changes` (in any order), put in walk order a doubling share at a time (a
    /// selection, then a sort of the share): the root is mostly among the first, so most are
    /// never sorted.
    pub fn walk_unsorted(&mut self, changes: &mut [PieceChange]) -> Option<f64> {
        let (mut from, mut share) = (0, WALK_FIRST);
        while from < changes.len() {
            let rest = &mut changes[from..];
            let k = share.min(rest.len());
            if k < rest.len() {
                rest.select_nth_unstable_by(k - 1, walk_order);
            }
            rest[..k].sort_unstable_by(walk_order);
            if let Some(root) = self.walk(&rest[..k]) {
                return Some(root);
            }
            from += k;
            share *= 2;
        }
        None
    }
}

/// The step from a line search's root: exactly 1 when the full step is the minimiser to
/// rounding.
pub fn step_of(root: f64) -> f64 {
    if (root - 1.0).abs() <= 1e-12 {
        1.0
    } else {
        root
    }
}

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
        // `settled_step`'s first case, before the pass over the rows that phi'(0) costs.
        return 1.0;
    }
    let dkd = quad_form(kss, &o.d, &o.d);
    let bkd = quad_form(kss, &o.beta, &o.d);
    // phi' at t = 0 (summed in row order).
    let (mut a, mut b) = (bkd, dkd);
    for (i, &fi) in f.iter().enumerate() {
        let w2c = 2.0 * c * weight(i);
        let (pa, pb) = slope_part(fi, delta[i], term(i, fi));
        a += w2c * pa;
        b += w2c * pb;
    }
    if let Some(t) = settled_step(a, b, flips > 0.0, exact_step) {
        return t;
    }
    // Most rows' changes lie far beyond the full step, so those up to t = 1 are walked
    // first, the others only if phi' is still negative there.
    let changes_in = |lo: f64, hi: f64| -> Vec<PieceChange> {
        let chunks = n.div_ceil(SUM_CHUNK);
        let parts: Vec<Vec<PieceChange>> = parallel::install(|| {
            (0..chunks)
                .into_par_iter()
                .map(|ch| {
                    let mut found = Vec::new();
                    for i in ch * SUM_CHUNK..((ch + 1) * SUM_CHUNK).min(n) {
                        let w2c = 2.0 * c * weight(i);
                        let term_i = |v: f64| term(i, v);
                        let at = (f[i], delta[i]);
                        row_changes(i, at, &term_i, boundaries(i), w2c, (lo, hi), &mut found);
                    }
                    found
                })
                .collect()
        });
        parts.into_iter().flatten().collect()
    };
    let mut walk = SlopeWalk::new(a, b);
    for (lo, hi) in [(0.0, 1.0), (1.0, f64::INFINITY)] {
        if let Some(root) = walk.walk_unsorted(&mut changes_in(lo, hi)) {
            return step_of(root);
        }
        if walk.reaches(hi) {
            // The root lies before the next interval's first change.
            break;
        }
    }
    step_of(walk.root())
}
