//! The scans of a merge partner search (budget maintenance): the coefficient of least square,
//! the nearest same-sign partner, and the filter that skips most candidates. The portable loops
//! and the filter; AVX-512's in `x86/scans.rs` (only its mask registers make them pay).

/// `argmin_sq` on the portable level, and AVX-512's rule where its lanes hold only infinities
/// or NaN.
pub(super) fn argmin_sq_portable(values: &[f64]) -> Option<(usize, f64)> {
    let (&first, rest) = values.split_first()?;
    let (mut at, mut least) = (0, first * first);
    for (j, c) in rest.iter().enumerate() {
        let v = c * c;
        if v < least || least.is_nan() {
            (at, least) = (j + 1, v);
        }
    }
    Some((at, least))
}

/// `argmax_same_sign` on the portable level (the slices of one length).
pub(super) fn argmax_same_sign_portable(
    coef: &[f64],
    kappa: &[f64],
    sign: f64,
    except: usize,
) -> Option<usize> {
    let eligible = |j: usize| j != except && sign * coef[j] > 0.0 && !kappa[j].is_nan();
    let mut best: Option<usize> = None;
    for j in (0..coef.len()).filter(|&j| eligible(j)) {
        if best.is_none_or(|b| kappa[j] > kappa[b]) {
            best = Some(j);
        }
    }
    best
}

/// `scan_candidates`' test: the coefficient's sign, and the kernel value times `scale` against
/// the cut, which rises as partners are found.
#[derive(Clone, Copy)]
pub(crate) struct CandidateFilter {
    pub sign: f64,
    pub scale: f64,
    pub cut: f64,
}

impl CandidateFilter {
    /// Whether a partner of kernel value `kappa` lies in a cell the search skips (NaN never
    /// does).
    #[inline(always)]
    pub(super) fn below_cut(&self, kappa: f64) -> bool {
        kappa * self.scale < self.cut
    }
}

pub(super) fn scan_candidates_portable(
    coef: &[f64],
    kappa: &[f64],
    mut filter: CandidateFilter,
    mut visit: impl FnMut(usize) -> f64,
    offset: usize,
) {
    let sign = filter.sign;
    for (j, (&c, &k)) in coef.iter().zip(kappa).enumerate().skip(offset) {
        if filter.below_cut(k) || sign * c <= 0.0 || (sign * c).is_nan() {
            continue;
        }
        filter.cut = visit(j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::simd::{argmin_sq, level, levels_here, scan_candidates};

    #[test]
    fn argmin_and_candidate_scan_agree_on_every_level() {
        let mut rng = Rng::new(9);
        for case in 0..500 {
            let n = (rng.next_f64() * 70.0) as usize;
            // Few distinct values, so ties are common; both signs.
            let coef: Vec<f64> = (0..n)
                .map(|_| {
                    let v = 1.0 + (rng.next_f64() * 4.0).floor();
                    if rng.next_f64() < 0.5 {
                        -v
                    } else {
                        v
                    }
                })
                .collect();
            let kappa: Vec<f64> = (0..n).map(|_| rng.next_f64()).collect();
            let expected = argmin_sq_portable(&coef);
            let sign = if case % 2 == 0 { 1.0 } else { -1.0 };
            let mut visits = Vec::new();
            for level in levels_here() {
                assert_eq!(argmin_sq(level, &coef), expected, "{level:?} case {case}");
                // The cut rises with every visit, as a partner search's does.
                let mut seen = Vec::new();
                scan_candidates(level, &coef, &kappa, sign, 399.0, 50.0, |j| {
                    seen.push(j);
                    (kappa[j] * 399.0).max(50.0)
                });
                visits.push(seen);
            }
            assert!(
                visits.windows(2).all(|w| w[0] == w[1]),
                "case {case}: {visits:?}"
            );
            if let Some(seen) = visits.first() {
                for &j in seen {
                    assert!(sign * coef[j] > 0.0);
                }
            }
        }
        assert_eq!(argmin_sq(level(), &[]), None);
    }
}
