//! One run of the j scan of the exact solvers' working set selection (WSS2 in ALFPGM's pWSS):
//! its input and result, the pair curvature, and the portable loop, which the vector scans
//! (`x86/j_scan.rs`) also finish their runs with.

use super::values::RowValue;

/// One run of WSS2's j candidates for an i (ALFPGM's pWSS, `alfpgm::pick_pairs`): the
/// candidates' look-ahead values `v` at positions `t` (increasing), all of the run's kernel rows
/// (of element type `T`, `RowValue`) starting at position `j0`.
#[derive(Clone, Copy)]
pub struct JScanInput<'a, T: RowValue> {
    pub t: &'a [u32],
    /// K_tt of every position.
    pub diag: &'a [f64],
    /// Whether every K_tt is the same (the RBF kernel's 1): the vector scans then read none.
    pub equal_diag: bool,
    pub j0: usize,
    /// i's position, its value (the largest look-ahead violation) and its kernel row from j0.
    pub i: usize,
    pub vi: f64,
    pub row_i: &'a [T],
    /// The previous pair's look-ahead update, v -= (K_ti' - K_tj') step: their rows from j0.
    pub update: Option<(&'a [T], &'a [T], f64)>,
    /// With a sum per label: the labels and i's (other labels' candidates do not count).
    pub label: Option<(&'a [f64], f64)>,
    /// The curvature that replaces a_it <= 0.
    pub tau: f64,
}

/// What a run gives: the two smallest values (the first by place, the earliest of equal
/// ones; `usize::MAX` when the run has none) and the best j, argmin -b^2 / a_it over the places
/// with b = vi - v > 0 and t != i (the latest of equal ones): (-b^2 / a, place, b, a), place
/// `usize::MAX` when there is none. A candidate whose value is +inf (left out: already in the
/// working set) counts for neither.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JScan {
    pub first: (f64, usize),
    pub second: f64,
    pub best: (f64, usize, f64, f64),
}

impl Default for JScan {
    fn default() -> Self {
        JScan {
            first: (f64::INFINITY, usize::MAX),
            second: f64::INFINITY,
            best: (f64::INFINITY, usize::MAX, 0.0, 0.0),
        }
    }
}

/// a_it = K_ii + K_tt - 2 K_it, `tau` where that is not positive.
#[inline(always)]
pub(super) fn pair_curvature<T: RowValue>(k_ii: f64, k_tt: f64, k_it: T, tau: f64) -> f64 {
    let a = k_ii + k_tt - 2.0 * k_it.widen();
    if a > 0.0 {
        a
    } else {
        tau
    }
}

/// The j scan from place `from` on, continuing the result `out` of the places before it.
pub(super) fn j_scan_portable<T: RowValue>(
    v: &mut [f64],
    input: &JScanInput<'_, T>,
    from: usize,
    mut out: JScan,
) -> JScan {
    let &JScanInput {
        t,
        diag,
        equal_diag: _,
        j0,
        i,
        vi,
        row_i,
        update,
        label,
        tau,
    } = input;
    let k_ii = diag[i];
    for k in from..v.len() {
        let tk = t[k] as usize;
        if let Some((ri, rj, step)) = update {
            v[k] -= (ri[tk - j0].widen() - rj[tk - j0].widen()) * step;
        }
        if label.is_some_and(|(y, yi)| y[tk] != yi) {
            continue;
        }
        let vk = v[k];
        if vk < out.first.0 {
            out.second = out.first.0;
            out.first = (vk, k);
        } else if vk < out.second {
            out.second = vk;
        }
        let b = vi - vk;
        if b <= 0.0 || tk == i {
            continue;
        }
        let a = pair_curvature(k_ii, diag[tk], row_i[tk - j0], tau);
        // Divides only where the gain b^2 / a can reach the best one: the product test admits
        // everything the quotient's test (within its rounding) would, so the same j wins.
        let b2 = b * b;
        if b2 < -out.best.0 * a * (1.0 - 1e-12) {
            continue;
        }
        let obj = -b2 / a;
        if obj <= out.best.0 {
            out.best = (obj, k, b, a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::simd::{j_scan, levels_here};

    /// `j_scan` at every level against its definition written out (all values updated, then the
    /// least value and the second by sorting, the best j by brute force with the tie rules):
    /// runs of 0-40 candidates (tails of every length), positions in a row or with gaps, values
    /// and kernel values from small sets (ties everywhere), +inf candidates, i among the
    /// candidates or not, with and without the look-ahead update and a label filter.
    #[test]
    fn j_scan_is_its_definition_at_every_level() {
        let mut rng = Rng::new(41);
        let pick = |rng: &mut Rng, set: &[f64]| set[rng.below(set.len())];
        for trial in 0..3000 {
            let n = rng.below(41);
            let j0 = [0, 5, 4096][trial % 3];
            let span = n + [0, 3, 40][(trial / 3) % 3];
            let mut positions: Vec<usize> = (0..span).collect();
            rng.shuffle(&mut positions);
            let mut t: Vec<u32> = positions[..n].iter().map(|&o| (j0 + o) as u32).collect();
            t.sort_unstable();
            let len = j0 + span.max(1);
            // Every fifth run with the RBF kernel's equal diagonal (the vector scans skip it).
            let diag: Vec<f64> = (0..len)
                .map(|_| match trial % 5 {
                    0 => 1.0,
                    _ => pick(&mut rng, &[1.0, 0.5, 2.0]),
                })
                .collect();
            let row = |rng: &mut Rng| -> Vec<f32> {
                (0..span.max(1))
                    .map(|_| [0.25f32, 0.5, 1.0, 0.0, 0.7][rng.below(5)])
                    .collect()
            };
            let (row_i, ri, rj) = (row(&mut rng), row(&mut rng), row(&mut rng));
            let labels: Vec<f64> = (0..len).map(|_| pick(&mut rng, &[1.0, -1.0])).collect();
            let v0: Vec<f64> = (0..n)
                .map(|_| pick(&mut rng, &[-1.0, 0.0, 0.5, 2.0, -0.25, f64::INFINITY]))
                .collect();
            let i = if n > 0 && trial % 2 == 0 {
                t[rng.below(n)] as usize
            } else {
                j0 + span
            }
            .min(len - 1);
            let input = JScanInput {
                t: &t,
                diag: &diag,
                equal_diag: diag.iter().all(|&d| d == diag[0]),
                j0,
                i,
                vi: pick(&mut rng, &[1.0, 0.5, 3.0]),
                row_i: &row_i,
                update: (trial % 4 < 2).then_some((&ri[..], &rj[..], 0.375)),
                label: (trial % 8 >= 6).then_some((&labels[..], 1.0)),
                tau: 1e-12,
            };
            // The definition.
            let mut v_want = v0.clone();
            if let Some((a, b, step)) = input.update {
                for (k, v) in v_want.iter_mut().enumerate() {
                    let o = t[k] as usize - j0;
                    *v -= (f64::from(a[o]) - f64::from(b[o])) * step;
                }
            }
            let counted: Vec<usize> = (0..n)
                .filter(|&k| input.label.is_none_or(|(y, yi)| y[t[k] as usize] == yi))
                .filter(|&k| v_want[k] < f64::INFINITY)
                .collect();
            let mut sorted: Vec<(f64, usize)> = counted.iter().map(|&k| (v_want[k], k)).collect();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let first = sorted
                .first()
                .copied()
                .unwrap_or((f64::INFINITY, usize::MAX));
            let second = sorted.get(1).map_or(f64::INFINITY, |e| e.0);
            let mut best = (f64::INFINITY, usize::MAX, 0.0, 0.0);
            for &k in &counted {
                let tk = t[k] as usize;
                let b = input.vi - v_want[k];
                if b <= 0.0 || tk == i {
                    continue;
                }
                let a = diag[i] + diag[tk] - 2.0 * f64::from(row_i[tk - j0]);
                let a = if a > 0.0 { a } else { 1e-12 };
                let obj = -(b * b) / a;
                if obj <= best.0 {
                    best = (obj, k, b, a);
                }
            }
            let want = JScan {
                first,
                second,
                best,
            };
            for level in levels_here() {
                let mut v = v0.clone();
                let got = j_scan(level, &mut v, &input);
                assert_eq!(got, want, "trial {trial}, {level:?}");
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&v), bits(&v_want), "trial {trial}, {level:?}: values");
            }
        }
    }
}
