//! Merging two support vectors into one, and the searches for the merge coefficient h.
//!
//! Merge (x1, a1) and (x2, a2) into (z, a_z) with z = h x1 + (1 - h) x2 and kappa = k(x1, x2).
//! For the Gaussian kernel k(x1, z) = kappa^((1-h)^2) and k(x2, z) = kappa^(h^2), and the best a_z
//! for a given z is a1 k(x1, z) + a2 k(x2, z). With m = a1 / (a1 + a2) in [0, 1] (same signs):
//!
//!   s(h)  = m kappa^((1-h)^2) + (1 - m) kappa^(h^2),   h* = argmax_{h in [0,1]} s(h)
//!   |a1 phi(x1) + a2 phi(x2) - a_z phi(z)|^2 = (a1 + a2)^2 [m^2 + (1-m)^2 + 2 m (1-m) kappa - s(h*)^2]
//!
//! The bracket is the *normalised weight degradation* `wd`. Paper 000's Algorithm 1 pairs
//! m = a/(a + a_min) with z = h x_min + (1-h) x, which contradict each other, and its Lemma 1 drops
//! the square on (a_i + a_j); here m always belongs to x1, the point that z = h x1 + ... weighs by h,
//! and the tests check the closed form against explicit feature vectors.
//!
//! Because s(h; m) = s(1 - h; 1 - m), the maximiser lies in [1/2, 1] when m >= 1/2 and in [0, 1/2]
//! otherwise; searching only that half makes golden section search find the global maximum even
//! where s is bimodal (kappa < e^-2, m near 1/2), and it is why h jumps across m = 1/2 there.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;

/// Grid size of the default lookup tables (paper 000 uses 400 x 400; `build.rs` embeds them).
pub use crate::core::budget::merge_math::DEFAULT_TABLE_SIZE;
pub use crate::core::budget::merge_math::{
    golden_section_max, gss_h, merged_value, weight_degradation, GSS_EPS, GSS_PRECISE_EPS,
};
use crate::core::budget::merge_math::{gss_h_and_value, table_row, wd_from_merged_value};
/// Below this kernel value a binary merge cannot beat the removal of the smaller SV measurably:
/// the removal of p degrades the model by (a_p + a_q)^2 m^2, the best merge with q by
/// (a_p + a_q)^2 wd(m, kappa), and with L = -ln kappa, r = (1 - m) / m >= 1 and the merge at h,
///
///   (m^2 - wd) / m^2 = kappa^2 e^(2Lh(2-h)) + 2 r kappa (e^(2Lh(1-h)) - 1) - r^2 (1 - e^(-2Lh^2)),
///
/// a concave quadratic in r whose supremum over h in [0, 1/2] and r >= 1 is kappa^2 (1 + 2L)
/// as h -> 0 (evaluated on a grid of 400,000 h with the maximising r: 2.40e-9 at kappa = 1e-5,
/// 2.86e-11 at 1e-6, equal to the limit to 4 digits). At kappa = 4e-6 that is 4.3e-10: merging
/// with the nearest partner, or any other, saves less than 1e-9 of the removal's degradation,
/// so the partner search, the lookup and the merged vector (for sparse SVs the union of two
/// rows, which makes the store denser) are skipped. Near-orthogonal high-dimensional rows
/// (bag-of-words data with large norms) meet this on nearly every event.
pub const MERGE_MIN_KAPPA: f64 = 4e-6;
/// The largest grid a table may have: 4096 x 4096 is two tables of 128 MB, past any accuracy gain.
pub const MAX_TABLE_SIZE: usize = 4096;

/// How the merge partner and the merge coefficient h are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MergeSearch {
    /// Golden section search on h to precision 0.01 for every candidate partner.
    Gss,
    /// Golden section search on h to precision 1e-10 for every candidate partner.
    GssPrecise,
    /// h(m, kappa) interpolated from the table for every candidate; a_z and WD from the formulas.
    LookupH,
    /// WD(m, kappa) interpolated from the table to choose the partner; h looked up for it only.
    LookupWd,
}

impl MergeSearch {
    pub const ALL: [MergeSearch; 4] = [
        MergeSearch::Gss,
        MergeSearch::GssPrecise,
        MergeSearch::LookupH,
        MergeSearch::LookupWd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MergeSearch::Gss => "gss",
            MergeSearch::GssPrecise => "gss-precise",
            MergeSearch::LookupH => "lookup-h",
            MergeSearch::LookupWd => "lookup-wd",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        MergeSearch::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                SvmError::invalid_parameter(
                    "merge",
                    format!("unknown merge search {name:?}; expected one of gss, gss-precise, lookup-h, lookup-wd"),
                )
            })
    }
}

/// Lookup tables of h*(m, kappa) and wd(m, kappa) with bilinear interpolation.
///
/// The grid is n x n over (m, kappa) in [0, 1/2] x [0, 1]; m > 1/2 is answered by the symmetry
/// h*(m) = 1 - h*(1 - m), wd(m) = wd(1 - m). That stores as many values as an n x n grid over
/// [0, 1]^2 with twice the resolution in m, and, since h* jumps at m = 1/2 (for kappa < e^-2),
/// no interpolation cell straddles the jump.
///
/// The WD table holds wd / m^2, not wd. In BSGD the fixed SV is the smallest and usually a fresh
/// one, so m is often 1e-4 or less, deep inside the first grid cell, where wd grows like m^2 and
/// linear interpolation of wd itself overestimates it several-fold and by a factor that differs
/// between candidates, so it ranks partners wrongly. wd / m^2 is smooth down to m = 0, with the
/// limit 1 - kappa^2 + 2 kappa^2 ln(kappa) (the merged point sits at h = kappa m).
#[derive(Debug, Clone)]
pub struct MergeTable {
    n: usize,
    h: Vec<f64>,
    wd: Vec<f64>,
    /// Per kappa cell k (kappa in [k, k + 1] / (n - 1)): a lower bound of the interpolated
    /// wd / m^2 over every m and every kappa up to the cell's end. Non-increasing in k, so the
    /// cells a partner search may skip are a prefix (see `first_kappa_cell_within`).
    wd_floor: Vec<f64>,
}

impl MergeTable {
    /// Builds n x n tables (2 <= n <= [`MAX_TABLE_SIZE`]) with precise golden section search
    /// (rows in parallel).
    pub fn build(n: usize) -> Result<Self> {
        if n < 2 {
            return Err(SvmError::invalid_parameter(
                "table_size",
                format!("a lookup table needs at least 2 x 2 grid points, got {n}"),
            ));
        }
        if n > MAX_TABLE_SIZE {
            return Err(SvmError::invalid_parameter(
                "table_size",
                format!(
                    "{n} x {n} grid points is more than the {MAX_TABLE_SIZE} x {MAX_TABLE_SIZE} \
                     (two tables of 128 MB) a lookup can use"
                ),
            ));
        }
        let mut h = vec![0.0; n * n];
        let mut wd = vec![0.0; n * n];
        parallel::install(|| {
            h.par_chunks_mut(n)
                .zip(wd.par_chunks_mut(n))
                .enumerate()
                .for_each(|(i, (hrow, wdrow))| table_row(i, n, hrow, wdrow));
        });
        Ok(Self::from_grids(n, h, wd))
    }

    /// The default table, computed when the crate was built (`build.rs` runs the same
    /// `table_row`), so no fit pays for building it.
    fn embedded() -> Self {
        const BYTES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/merge_table.bin"));
        let n = DEFAULT_TABLE_SIZE;
        let values: Vec<f64> = BYTES
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect();
        assert_eq!(
            values.len(),
            2 * n * n,
            "the embedded merge table has the wrong size"
        );
        let (h, wd) = values.split_at(n * n);
        Self::from_grids(n, h.to_vec(), wd.to_vec())
    }

    fn from_grids(n: usize, h: Vec<f64>, wd: Vec<f64>) -> Self {
        // A bilinear interpolation is a convex combination of its cell's corners, so the least
        // corner of a cell bounds it from below; the running minimum over the cells of smaller
        // kappa makes the bound monotone.
        let mut wd_floor = vec![0.0; n - 1];
        let mut running = f64::INFINITY;
        for (k, floor) in wd_floor.iter_mut().enumerate() {
            let cell = (0..n).map(|i| wd[i * n + k].min(wd[i * n + k + 1]));
            running = running.min(cell.fold(f64::INFINITY, f64::min).max(0.0));
            *floor = running;
        }
        MergeTable { n, h, wd, wd_floor }
    }

    /// The first kappa cell whose lower bound of wd / m^2 is at most `limit` (n - 1 if none):
    /// every pair with kappa * (n - 1) below that cell's index has an interpolated wd / m^2 above
    /// `limit`, whatever its m. A merge partner search skips those without a lookup.
    pub fn first_kappa_cell_within(&self, limit: f64) -> usize {
        self.wd_floor.partition_point(|&b| b > limit)
    }

    /// The process-wide default 400 x 400 table, embedded at build time (decoded on first use,
    /// well under a millisecond).
    pub fn shared() -> &'static MergeTable {
        static TABLE: OnceLock<MergeTable> = OnceLock::new();
        TABLE.get_or_init(MergeTable::embedded)
    }

    pub fn size(&self) -> usize {
        self.n
    }

    #[inline]
    fn interpolate(&self, grid: &[f64], m_half: f64, kappa: f64) -> f64 {
        let last = (self.n - 1) as f64;
        let x = (2.0 * m_half * last).clamp(0.0, last);
        let y = (kappa * last).clamp(0.0, last);
        let i = (x as usize).min(self.n - 2);
        let j = (y as usize).min(self.n - 2);
        let (tx, ty) = (x - i as f64, y - j as f64);
        let r0 = i * self.n + j;
        let r1 = r0 + self.n;
        let top = grid[r0] + ty * (grid[r0 + 1] - grid[r0]);
        let bottom = grid[r1] + ty * (grid[r1 + 1] - grid[r1]);
        top + tx * (bottom - top)
    }

    /// Interpolated optimal merge coefficient h*(m, kappa).
    #[inline]
    pub fn h(&self, m: f64, kappa: f64) -> f64 {
        if m > 0.5 {
            1.0 - self.interpolate(&self.h, 1.0 - m, kappa)
        } else {
            self.interpolate(&self.h, m, kappa)
        }
    }

    /// Interpolated normalised weight degradation wd(m, kappa) at the optimal h.
    #[inline]
    pub fn wd(&self, m: f64, kappa: f64) -> f64 {
        let mh = if m > 0.5 { 1.0 - m } else { m };
        mh * mh * self.interpolate(&self.wd, mh, kappa).max(0.0)
    }
}

/// The merge of one candidate pair: its coefficient h and normalised weight degradation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MergeChoice {
    pub h: f64,
    pub wd: f64,
}

/// h and normalised WD for one pair by the given search. For the lookup searches `wd` is the
/// interpolated value that ranks partners; `exact_merge` evaluates the chosen one exactly.
#[inline]
pub fn search_pair(search: MergeSearch, table: &MergeTable, m: f64, kappa: f64) -> MergeChoice {
    match search {
        MergeSearch::Gss | MergeSearch::GssPrecise => {
            let eps = if search == MergeSearch::Gss {
                GSS_EPS
            } else {
                GSS_PRECISE_EPS
            };
            let (h, s) = gss_h_and_value(m, kappa, eps);
            MergeChoice {
                h,
                wd: wd_from_merged_value(m, kappa, s),
            }
        }
        MergeSearch::LookupH => {
            let h = table.h(m, kappa);
            MergeChoice {
                h,
                wd: weight_degradation(m, kappa, h),
            }
        }
        MergeSearch::LookupWd => MergeChoice {
            h: f64::NAN, // looked up only for the chosen partner
            wd: table.wd(m, kappa),
        },
    }
}

/// Multi-class merge (paper 001 eq. 18): coefficient vectors a1, a2 over classes; maximise
/// sum_c (a1_c kappa^((1-h)^2) + a2_c kappa^(h^2))^2 over h in [0, 1]. Returns (h, |Delta|^2).
/// Without a scalar m the maximiser's half is unknown, so both halves are searched. (Training
/// calls [`merge_multiclass_sums`]; this form is the tests' reference.)
#[cfg(test)]
pub(crate) fn merge_multiclass(a1: &[f64], a2: &[f64], kappa: f64, eps: f64) -> (f64, f64) {
    let (aa, bb, ab) = coefficient_sums(a1, a2);
    merge_multiclass_sums(aa, bb, ab, kappa, eps)
}

/// (|a1|^2, |a2|^2, <a1, a2>): all the multi-class merge needs of the coefficient vectors.
pub fn coefficient_sums(a1: &[f64], a2: &[f64]) -> (f64, f64, f64) {
    a1.iter()
        .zip(a2)
        .fold((0.0, 0.0, 0.0), |(aa, bb, ab), (p, q)| {
            (aa + p * p, bb + q * q, ab + p * q)
        })
}

/// [`merge_multiclass`] from the sums of [`coefficient_sums`]: the objective is
/// |a1 k1 + a2 k2|^2 = aa k1^2 + 2 ab k1 k2 + bb k2^2 (k1 = kappa^((1-h)^2), k2 = kappa^(h^2)), so
/// the search costs the same for any number of classes.
pub fn merge_multiclass_sums(aa: f64, bb: f64, ab: f64, kappa: f64, eps: f64) -> (f64, f64) {
    let before = aa + bb + 2.0 * ab * kappa;
    let l = kappa.ln();
    let objective = |h: f64| -> f64 {
        let (k1, k2) = if kappa > 0.0 {
            (((1.0 - h) * (1.0 - h) * l).exp(), (h * h * l).exp())
        } else {
            (f64::from(h == 1.0), f64::from(h == 0.0))
        };
        aa * k1 * k1 + 2.0 * ab * k1 * k2 + bb * k2 * k2
    };
    let left = golden_section_max(objective, 0.0, 0.5, eps);
    let right = golden_section_max(objective, 0.5, 1.0, eps);
    let (h, best) = if right.1 > left.1 { right } else { left };
    (h, (before - best).max(0.0))
}

/// A lower bound of the |Delta|^2 that [`merge_multiclass_sums`] finds, without a search, for
/// skipping partners that cannot win. With q = kappa^(1/4), h <= 1/2 keeps k1 = kappa^((1-h)^2)
/// in [kappa, q] and k2 = kappa^(h^2) in [q, 1] (h >= 1/2 the other way round), and the
/// objective aa k1^2 + 2 ab k1 k2 + bb k2^2 is convex in k1 and in k2 (aa, bb >= 0), so on each
/// box it is largest at a corner: the largest of the eight corner values bounds the maximum.
/// Far partners (kappa near 0) get a bound near min over h of the removal of one of the two.
pub fn merge_multiclass_bound(aa: f64, bb: f64, ab: f64, kappa: f64) -> f64 {
    let kappa = kappa.clamp(0.0, 1.0);
    let q = kappa.sqrt().sqrt();
    let value = |k1: f64, k2: f64| aa * k1 * k1 + 2.0 * ab * k1 * k2 + bb * k2 * k2;
    let mut best = f64::NEG_INFINITY;
    for (k1, k2) in [
        (kappa, q),
        (kappa, 1.0),
        (q, q),
        (q, 1.0),
        (1.0, kappa),
        (1.0, q),
        (q, kappa),
    ] {
        best = best.max(value(k1, k2));
    }
    aa + bb + 2.0 * ab * kappa - best
}

/// The merge of a support vector (x_p, a_p) into a partner (x_q, a_q) of the *opposite* sign
/// with |a_q| >= |a_p| (regression coefficients, BSCA's one-label coefficients). With
/// r = |a_p| / |a_q| in (0, 1], z = h x_q + (1 - h) x_p and L = -ln kappa,
///
///   a_z(h) = a_q q(h),  q(h) = kappa^((1-h)^2) - r kappa^(h^2),
///   |a_q phi_q + a_p phi_p - a_z phi_z|^2 = a_q^2 [1 + r^2 - 2 r kappa - q(h)^2].
///
/// q' = 2L [(1-h) kappa^((1-h)^2) + r h kappa^(h^2)] is positive on [0, 1], so q rises past
/// h = 1: the merged point lies beyond x_q, away from x_p (the dipole pushes the bump outward).
/// For h > 1, q' = 0 iff (h-1)/h = r kappa^(2h-1); the left side rises from 0 to 1, the right
/// falls from r kappa, so there is one stationary point, a maximum, in (1, 1/(1 - r kappa)].
/// The other extremum, the minimum of q on x_p's side (h < 0), never gives a larger |a_z|:
/// mirrored at the midpoint, q(1 + u) - |q(-u)| = (1 - r)(kappa^(u^2) + kappa^((1+u)^2)) >= 0.
/// At h = 1 the degradation is a_q^2 r^2 (1 - kappa^2) (the projection of a_p phi_p onto
/// phi_q), so the best opposite-sign merge always beats the removal of x_p (a_q^2 r^2) when
/// kappa > 0. Returns (h*, q(h*)), golden section search to `eps` relative to the bracket.
pub fn opposite_sign_merge(r: f64, kappa: f64, eps: f64) -> (f64, f64) {
    if kappa <= 0.0 {
        return (1.0, 1.0);
    }
    let kappa = kappa.min(1.0);
    if kappa >= 1.0 {
        // x_p == x_q: the coefficients simply add, at x_q.
        return (1.0, 1.0 - r);
    }
    let ln_kappa = kappa.ln();
    let q = |h: f64| ((1.0 - h) * (1.0 - h) * ln_kappa).exp() - r * (h * h * ln_kappa).exp();
    let hi = 1.0 / (1.0 - r * kappa);
    if !hi.is_finite() || hi <= 1.0 {
        return (1.0, q(1.0));
    }
    // The width floor: a bracket of a few ulps (r kappa ~ 1e-16) cannot be split further.
    let width = (eps * (hi - 1.0)).max(8.0 * f64::EPSILON * hi);
    golden_section_max(q, 1.0, hi, width)
}

/// Normalised degradation of [`opposite_sign_merge`]: |Delta|^2 / a_q^2 = 1 + r^2 - 2 r kappa - q^2.
pub fn opposite_sign_degradation(r: f64, kappa: f64, q: f64) -> f64 {
    (1.0 + r * r - 2.0 * r * kappa - q * q).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::budget::merge_math::wd_over_m2_at_zero;
    use crate::core::common::rng::Rng;

    /// The opposite-sign merge against explicit feature vectors and a brute-force search of h
    /// over the whole line: the closed form is the explicit degradation, the search finds the
    /// global optimum (no better h anywhere, x_p's side included), it lies in the bracket, and it
    /// beats both the removal of x_p and the projection onto x_q.
    #[test]
    fn opposite_sign_merge_is_the_brute_force_optimum() {
        let mut rng = Rng::new(77);
        for case in 0..400 {
            let dim = 1 + case % 4;
            let x1: Vec<f64> = (0..dim).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let x2: Vec<f64> = (0..dim).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let gamma = [0.1, 1.0, 5.0][case % 3];
            let big = 0.1 + rng.next_f64() * 3.0;
            let r = if case % 10 == 0 { 1.0 } else { rng.next_f64() };
            let sign = if case % 2 == 0 { 1.0 } else { -1.0 };
            let (a_q, a_p) = (sign * big, -sign * big * r);
            let d2: f64 = x1.iter().zip(&x2).map(|(p, q)| (p - q) * (p - q)).sum();
            let kappa = (-gamma * d2).exp();
            let (h, q) = opposite_sign_merge(r, kappa, GSS_PRECISE_EPS);
            assert!(h >= 1.0 && h <= 1.0 / (1.0 - r * kappa) + 1e-12, "h {h}");
            let (explicit, az) = explicit_degradation(&x1, &x2, a_q, a_p, h, gamma);
            let closed = a_q * a_q * opposite_sign_degradation(r, kappa, q);
            let scale = a_q * a_q;
            assert!(
                (explicit - closed).abs() <= 1e-9 * scale,
                "{explicit} vs {closed}"
            );
            assert!(
                (az - a_q * q).abs() <= 1e-9 * big,
                "a_z {az} vs {}",
                a_q * q
            );
            let mut best = f64::INFINITY;
            for k in 0..=16_000 {
                let hh = -4.0 + 10.0 * k as f64 / 16_000.0;
                best = best.min(explicit_degradation(&x1, &x2, a_q, a_p, hh, gamma).0);
            }
            assert!(
                closed <= best + 1e-7 * scale,
                "case {case}: {closed} vs grid {best}"
            );
            let removal = a_p * a_p;
            let projection = a_p * a_p * (1.0 - kappa * kappa);
            assert!(closed <= projection + 1e-12 * scale && projection <= removal);
            if kappa > 1e-3 && r > 1e-3 {
                assert!(closed < removal, "case {case}");
            }
        }
        // Coincident points add their coefficients; far apart ones keep the larger.
        assert_eq!(opposite_sign_merge(0.25, 1.0, 1e-10), (1.0, 0.75));
        assert_eq!(opposite_sign_merge(0.25, 0.0, 1e-10), (1.0, 1.0));
        // A bracket of a few ulps (r kappa near the rounding of 1) still ends.
        let (h, _) = opposite_sign_merge(1e-12, 1e-6, GSS_PRECISE_EPS);
        assert!((1.0..1.0 + 1e-15).contains(&h));
    }

    /// |a1 phi(x1) + a2 phi(x2) - az phi(z)|^2 through kernel values of explicit vectors.
    fn explicit_degradation(
        x1: &[f64],
        x2: &[f64],
        a1: f64,
        a2: f64,
        h: f64,
        gamma: f64,
    ) -> (f64, f64) {
        let k = |a: &[f64], b: &[f64]| {
            (-gamma * a.iter().zip(b).map(|(p, q)| (p - q) * (p - q)).sum::<f64>()).exp()
        };
        let z: Vec<f64> = x1
            .iter()
            .zip(x2)
            .map(|(p, q)| h * p + (1.0 - h) * q)
            .collect();
        let az = a1 * k(x1, &z) + a2 * k(x2, &z);
        let wd = a1 * a1 + a2 * a2 + az * az + 2.0 * a1 * a2 * k(x1, x2)
            - 2.0 * a1 * az * k(x1, &z)
            - 2.0 * a2 * az * k(x2, &z);
        (wd, az)
    }

    #[test]
    fn closed_form_equals_explicit_feature_space_distance() {
        let mut rng = Rng::new(42);
        for _ in 0..2000 {
            let d = 1 + rng.below(6);
            let x1: Vec<f64> = (0..d).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
            let x2: Vec<f64> = (0..d).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
            let gamma = 0.05 + 3.0 * rng.next_f64();
            let sign = if rng.next_f64() < 0.5 { -1.0 } else { 1.0 };
            let a1 = sign * (0.01 + rng.next_f64());
            let a2 = sign * (0.01 + rng.next_f64());
            let h = rng.next_f64();
            let kappa = (-gamma
                * x1.iter()
                    .zip(&x2)
                    .map(|(p, q)| (p - q) * (p - q))
                    .sum::<f64>())
            .exp();
            let m = a1 / (a1 + a2);
            let (wd_explicit, az_explicit) = explicit_degradation(&x1, &x2, a1, a2, h, gamma);
            let scale = (a1 + a2) * (a1 + a2);
            let wd_closed = scale * weight_degradation(m, kappa, h);
            assert!(
                (wd_closed - wd_explicit).abs() < 1e-10 * scale.max(1.0),
                "{wd_closed} vs {wd_explicit}"
            );
            assert!(((a1 + a2) * merged_value(m, kappa, h) - az_explicit).abs() < 1e-12);
        }
    }

    #[test]
    fn swapping_the_roles_of_m_is_the_slip_the_test_catches() {
        // Paper 000's slip: m computed for one point, h applied to the other. That gives a
        // different (wrong) degradation whenever a1 != a2.
        let (x1, x2) = ([0.0, 0.0], [1.0, 0.5]);
        let (a1, a2, gamma) = (0.2, 0.8, 0.5);
        let kappa = (-gamma * 1.25f64).exp();
        let m_wrong = a2 / (a1 + a2);
        let h = gss_h(m_wrong, kappa, GSS_PRECISE_EPS);
        let (wd_explicit, _) = explicit_degradation(&x1, &x2, a1, a2, h, gamma);
        let wd_claimed = (a1 + a2) * (a1 + a2) * weight_degradation(m_wrong, kappa, h);
        assert!((wd_claimed - wd_explicit).abs() > 1e-3);
    }

    #[test]
    fn precise_gss_matches_brute_force_grid() {
        let mut rng = Rng::new(9);
        for _ in 0..3000 {
            let m = rng.next_f64();
            let kappa = rng.next_f64().powi(3);
            let h = gss_h(m, kappa, GSS_PRECISE_EPS);
            let best_grid = (0..=20_000)
                .map(|k| merged_value(m, kappa, k as f64 / 20_000.0))
                .fold(f64::MIN, f64::max);
            let s = merged_value(m, kappa, h);
            assert!(
                s >= best_grid - 1e-9,
                "m={m} kappa={kappa} h={h} s={s} grid={best_grid}"
            );
        }
    }

    #[test]
    fn coarse_gss_is_close_to_precise() {
        let mut rng = Rng::new(10);
        for _ in 0..2000 {
            let m = rng.next_f64();
            let kappa = rng.next_f64();
            let precise = weight_degradation(m, kappa, gss_h(m, kappa, GSS_PRECISE_EPS));
            let coarse = weight_degradation(m, kappa, gss_h(m, kappa, GSS_EPS));
            assert!(coarse >= precise - 1e-12);
            assert!(coarse - precise < 1e-3, "m={m} kappa={kappa}");
        }
    }

    #[test]
    fn lookups_match_precise_gss_where_kappa_above_e_minus_2() {
        let table = MergeTable::shared();
        let mut rng = Rng::new(11);
        let (mut max_h, mut max_wd) = (0.0f64, 0.0f64);
        for _ in 0..20_000 {
            let m = rng.next_f64();
            let kappa = (-2.0f64).exp() + (1.0 - (-2.0f64).exp()) * rng.next_f64();
            let h = gss_h(m, kappa, GSS_PRECISE_EPS);
            let wd = weight_degradation(m, kappa, h);
            max_h = max_h.max((table.h(m, kappa) - h).abs());
            max_wd = max_wd.max((table.wd(m, kappa) - wd).abs());
            // h from the table never loses more than a hair of WD against the exact optimum.
            assert!(weight_degradation(m, kappa, table.h(m, kappa)) - wd < 1e-5);
        }
        // h* has a square-root singularity at (m, kappa) = (1/2, e^-2), where one grid cell spans
        // a steep rise; everywhere else the error is far smaller. WD, which decides merges, is flat.
        assert!(max_h < 1e-2, "max |h error| {max_h}");
        assert!(max_wd < 5e-5, "max |wd error| {max_wd}");
    }

    #[test]
    fn lookup_wd_is_accurate_everywhere() {
        // WD is continuous on the whole square, so the table is good below e^-2 too.
        let table = MergeTable::shared();
        let mut rng = Rng::new(12);
        for _ in 0..20_000 {
            let (m, kappa) = (rng.next_f64(), rng.next_f64());
            let wd = weight_degradation(m, kappa, gss_h(m, kappa, GSS_PRECISE_EPS));
            assert!(
                (table.wd(m, kappa) - wd).abs() < 1e-3,
                "m={m} kappa={kappa}"
            );
        }
    }

    #[test]
    fn lookup_wd_is_relatively_accurate_for_tiny_m() {
        // BSGD's usual regime: the fixed SV is a fresh one, orders of magnitude below its partner.
        let table = MergeTable::shared();
        let mut rng = Rng::new(14);
        let mut worst = 0.0f64;
        for _ in 0..20_000 {
            let m = 10f64.powf(-5.0 + 3.0 * rng.next_f64());
            let kappa = 0.01 + 0.98 * rng.next_f64();
            let exact = weight_degradation(m, kappa, gss_h(m, kappa, GSS_PRECISE_EPS));
            worst = worst.max((table.wd(m, kappa) - exact).abs() / exact);
        }
        assert!(worst < 0.02, "worst relative WD error {worst}");
        for kappa in [0.1, 0.5, 0.9] {
            let m = 1e-6;
            let exact = weight_degradation(m, kappa, gss_h(m, kappa, GSS_PRECISE_EPS)) / (m * m);
            assert!((wd_over_m2_at_zero(kappa) - exact).abs() < 1e-3);
        }
    }

    #[test]
    fn multiclass_merge_reduces_to_binary() {
        let mut rng = Rng::new(13);
        for _ in 0..500 {
            let (a1, a2) = (0.01 + rng.next_f64(), 0.01 + rng.next_f64());
            let kappa = rng.next_f64();
            let m = a1 / (a1 + a2);
            let (h, wd) = merge_multiclass(&[a1], &[a2], kappa, GSS_PRECISE_EPS);
            let wd_binary =
                (a1 + a2).powi(2) * weight_degradation(m, kappa, gss_h(m, kappa, GSS_PRECISE_EPS));
            assert!((wd - wd_binary).abs() < 1e-9, "h={h}");
        }
    }

    #[test]
    fn multiclass_bound_is_below_the_degradation() {
        // The bound against the exact |a1 phi1 + a2 phi2 - c phi(z)|^2 on a fine grid of h (an
        // independent maximisation of the merged coefficient vector's norm).
        let mut rng = Rng::new(29);
        for trial in 0..2000 {
            let k = 1 + rng.below(6);
            let scale = [1e-3, 1.0, 1e3][trial % 3];
            let a1: Vec<f64> = (0..k).map(|_| scale * (rng.next_f64() - 0.5)).collect();
            let a2: Vec<f64> = (0..k)
                .map(|_| scale * (rng.next_f64() * 2.0 - 0.5))
                .collect();
            let kappa = [0.0, 1e-9, rng.next_f64(), 1.0 - 1e-9][trial % 4];
            let before: f64 = a1
                .iter()
                .zip(&a2)
                .map(|(p, q)| p * p + q * q + 2.0 * p * q * kappa)
                .sum();
            let best_norm = (0..=4000)
                .map(|s| {
                    let h = s as f64 / 4000.0;
                    let (k1, k2) = (kappa.powf((1.0 - h).powi(2)), kappa.powf(h * h));
                    a1.iter()
                        .zip(&a2)
                        .map(|(p, q)| (p * k1 + q * k2).powi(2))
                        .sum::<f64>()
                })
                .fold(0.0, f64::max);
            let (aa, bb, ab) = coefficient_sums(&a1, &a2);
            let bound = merge_multiclass_bound(aa, bb, ab, kappa);
            let tol = 1e-12 * (aa + bb);
            assert!(
                bound <= before - best_norm + tol,
                "trial {trial}: {bound} > {}",
                before - best_norm
            );
            let (_, wd) = merge_multiclass(&a1, &a2, kappa, GSS_EPS);
            assert!(bound <= wd + tol);
        }
    }

    /// The table embedded at build time is the one built at run time, value for value.
    #[test]
    fn embedded_table_equals_the_built_one() {
        let built = MergeTable::build(DEFAULT_TABLE_SIZE).unwrap();
        let embedded = MergeTable::shared();
        assert_eq!(embedded.n, built.n);
        assert!(embedded
            .h
            .iter()
            .zip(&built.h)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(embedded
            .wd
            .iter()
            .zip(&built.wd)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(embedded.wd_floor, built.wd_floor);
    }

    #[test]
    fn table_rejects_degenerate_size_and_parses_names() {
        assert!(MergeTable::build(1).is_err());
        // n * n must not wrap: refused before anything is allocated.
        assert!(MergeTable::build(MAX_TABLE_SIZE + 1).is_err());
        assert!(MergeTable::build(1 << 40).is_err());
        assert_eq!(MergeTable::build(7).unwrap().size(), 7);
        for s in MergeSearch::ALL {
            assert_eq!(MergeSearch::parse(s.name()).unwrap(), s);
        }
        assert!(MergeSearch::parse("gs").is_err());
    }
}
