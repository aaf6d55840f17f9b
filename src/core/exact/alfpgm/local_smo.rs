//! WSS2 SMO on the subproblem of a working set (`local_smo`, the default `InnerSolver::Smo`):
//! O(|B|) a step from Q_BB, serial work between parallel regions, so its passes are written
//! without branches per entry and compiled for AVX-512 or AVX2 where the CPU has them.

use crate::core::exact::dual::{label_index, tube_pair_step, tube_shifts, TubePair, TAU};
use crate::core::simd::Level;

use super::candidates::{LOW, UP};

/// Per-variable arrays of `local_smo`, kept between calls.
#[derive(Default)]
pub(super) struct LocalSmoScratch {
    /// UP | LOW membership.
    sets: Vec<u8>,
    /// 0 for members of I_up (I_low), -inf (+inf) for the others: the violation plus this is
    /// what the scan for i (j) compares, with no branch per entry. One run of m per group of
    /// variables that pair (one group; with a sum per label, one per label, the other label's
    /// entries at -inf / +inf).
    up_pen: Vec<f64>,
    low_pen: Vec<f64>,
    /// WSS2's -b^2 / a per candidate j (+inf where b <= 0).
    obj: Vec<f64>,
    /// The diagonal of Q.
    diag: Vec<f64>,
}

/// WSS2 SMO on the subproblem min 1/2 d^T Q d + g^T d, y^T d = 0, lo <= d <= hi (Q with the
/// labels folded in, Q_ab = y_a y_b K_ab), from d = 0 until its own m - M < eps, 50 m + 1000
/// steps or `max_steps`; leaves the gradient g + Q d in `gl`. Returns the steps taken. Each
/// step moves along d_i += y_i s, d_j -= y_j s (y^T d unchanged) by the clipped minimiser
/// s = b / a, and a variable the clip stops lands exactly on its bound. The violations
/// -y_t gl_t (`viol`) and the I_up / I_low membership are kept per variable and refreshed for
/// i and j only. The subproblem is serial work between parallel regions, so its passes are
/// written without branches per entry and compiled for AVX-512 or AVX2 where the CPU has them
/// (a9a, 83 variables: 0.39 -> 0.18 us a step); every level takes the same steps (first index
/// of the extreme value, the same arithmetic). Compiled for `level` (`simd::level()`; a level
/// this CPU does not run falls back).
pub(super) fn local_smo(level: Level, sub: LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // The body compiled once more per instruction set (inlined into each wrapper).
        macro_rules! compiled_for {
            ($name:ident, $features:literal) => {
                /// # Safety
                /// The CPU must run `$features`.
                #[target_feature(enable = $features)]
                unsafe fn $name(sub: LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> u64 {
                    local_smo_body(sub, out)
                }
            };
        }
        compiled_for!(avx512, "avx512f");
        compiled_for!(avx2, "avx2");
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: AVX-512F runs here.
            return unsafe { avx512(sub, out) };
        }
        if level >= Level::Avx2 && Level::Avx2.runs_here() {
            // SAFETY: AVX2 runs here.
            return unsafe { avx2(sub, out) };
        }
    }
    let _ = level;
    local_smo_body(sub, out)
}

/// `local_smo`'s problem: min 1/2 d^T Q d + g^T d s.t. y^T d = 0, lo <= d <= hi, and whether
/// each label's sum is fixed on its own (pairs within a label, each label's m - M).
#[derive(Clone, Copy)]
pub(super) struct LocalSmoInput<'a> {
    /// Q (m x m by rows, labels folded in: Q_ab = y_a y_b K_ab).
    pub(super) q: &'a [f64],
    /// g: the gradient at d = 0.
    pub(super) g: &'a [f64],
    /// y: the labels.
    pub(super) y: &'a [f64],
    /// lo, hi: the box of d.
    pub(super) lo: &'a [f64],
    pub(super) hi: &'a [f64],
    pub(super) m: usize,
    /// Stop once every group's m - M is below it.
    pub(super) eps: f64,
    pub(super) per_label: bool,
    /// The most steps to take (what is left of the run's iterations).
    pub(super) max_steps: u64,
    /// With a tube (`DualProblem::tube`): a_B at d = 0 and epsilon; the subproblem adds
    /// epsilon |a_B + d|_1 (labels all +1).
    pub(super) tube: Option<(&'a [f64], f64)>,
}

/// `local_smo`'s results and scratch.
pub(super) struct LocalSmoOutput<'a> {
    /// d: the step.
    pub(super) d: &'a mut [f64],
    /// g + Q d: the gradient at d.
    pub(super) gl: &'a mut [f64],
    /// -y_t (g + Q d)_t: the violations.
    pub(super) viol: &'a mut [f64],
    pub(super) scratch: &'a mut LocalSmoScratch,
}

/// The first index of the largest value above -inf (NaN never wins), and that value.
#[inline(always)]
fn first_max(x: &[f64]) -> Option<(usize, f64)> {
    first_best(x, f64::NEG_INFINITY, |v, best| v > best)
}

/// The first index of the smallest value below +inf (NaN never wins), and that value.
#[inline(always)]
fn first_min(x: &[f64]) -> Option<(usize, f64)> {
    first_best(x, f64::INFINITY, |v, best| v < best)
}

/// The first index of the best value by `better` (a strict order) other than `worst`: the best
/// value by eight independent lanes (no branch, vectorised), then its first place.
#[inline(always)]
fn first_best(
    x: &[f64],
    worst: f64,
    better: impl Fn(f64, f64) -> bool + Copy,
) -> Option<(usize, f64)> {
    let mut lanes = [worst; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if better(v, *l) { v } else { *l };
        }
    }
    let best = lanes
        .iter()
        .chain(tail)
        .fold(worst, |b, &v| if better(v, b) { v } else { b });
    if best == worst {
        return None;
    }
    x.iter().position(|&v| v == best).map(|t| (t, best))
}
#[inline(always)]
fn local_smo_body(sub: LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> u64 {
    start(&sub, out);
    let cap = (50 * sub.m as u64 + 1000).min(sub.max_steps);
    let mut steps = 0u64;
    while steps < cap {
        let Some(pair) = choose_pair(&sub, out) else {
            break;
        };
        let Some(change) = take_step(&sub, out, pair) else {
            break;
        };
        follow_step(&sub, out, pair, change);
        steps += 1;
    }
    steps
}

/// The pair a step moves: i, j and WSS2's -b^2 / a of the pair.
#[derive(Clone, Copy)]
struct Pair {
    i: usize,
    j: usize,
    gain: f64,
}

/// I_up (`UP`) and I_low (`LOW`) membership of variable t at d_t: room to move "up" (a_t y_t
/// grows) and "down".
#[inline(always)]
fn membership(sub: &LocalSmoInput<'_>, t: usize, dt: f64) -> u8 {
    let (up, low) = if sub.y[t] > 0.0 {
        (dt < sub.hi[t], dt > sub.lo[t])
    } else {
        (dt > sub.lo[t], dt < sub.hi[t])
    };
    u8::from(up) * UP + u8::from(low) * LOW
}

/// The penalties of t (`LocalSmoScratch::up_pen` / `low_pen`) with flags `f` at d_t: with a
/// tube the penalty of a member is its value's shift by the sign of a_t + d_t
/// (`DualState::up_value` / `low_value`).
#[inline(always)]
fn penalties(sub: &LocalSmoInput<'_>, t: usize, f: u8, dt: f64) -> (f64, f64) {
    let (up, low) = match sub.tube {
        Some((base, eps)) => tube_shifts(base[t] + dt, eps),
        None => (0.0, 0.0),
    };
    (
        if f & UP != 0 { up } else { f64::NEG_INFINITY },
        if f & LOW != 0 { low } else { f64::INFINITY },
    )
}

/// Where variable t's group starts in the penalty arrays.
#[inline(always)]
fn group(sub: &LocalSmoInput<'_>, t: usize) -> usize {
    if sub.per_label {
        label_index(sub.y[t]) * sub.m
    } else {
        0
    }
}

/// d = 0, the gradient g, and the scratch of every variable.
#[inline(always)]
fn start(sub: &LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) {
    let LocalSmoOutput {
        d,
        gl,
        viol,
        scratch,
    } = out;
    let LocalSmoScratch {
        sets,
        up_pen,
        low_pen,
        obj,
        diag,
    } = scratch;
    let (q, m) = (sub.q, sub.m);
    d.fill(0.0);
    gl.copy_from_slice(sub.g);
    let groups = if sub.per_label { 2 } else { 1 };
    sets.clear();
    sets.extend((0..m).map(|t| membership(sub, t, 0.0)));
    up_pen.clear();
    up_pen.resize(groups * m, f64::NEG_INFINITY);
    low_pen.clear();
    low_pen.resize(groups * m, f64::INFINITY);
    for (t, &f) in sets.iter().enumerate() {
        (up_pen[group(sub, t) + t], low_pen[group(sub, t) + t]) = penalties(sub, t, f, 0.0);
    }
    obj.clear();
    obj.resize(m, f64::INFINITY);
    diag.clear();
    diag.extend((0..m).map(|t| q[t * m + t]));
    for t in 0..m {
        viol[t] = -sub.y[t] * gl[t];
    }
}

/// Per group: i, the group's m - M, and WSS2's j for that i; the pair of the best j over the
/// groups (LIBSVM's Solver_NU). None once every group's m - M < eps. The scans read the
/// violation plus the penalty: the violation itself for members (x + 0 is x), +-inf for the
/// others.
#[inline(always)]
fn choose_pair(sub: &LocalSmoInput<'_>, out: &mut LocalSmoOutput<'_>) -> Option<Pair> {
    let (q, y, m) = (sub.q, sub.y, sub.m);
    let viol = &*out.viol;
    let LocalSmoScratch {
        up_pen,
        low_pen,
        obj,
        diag,
        ..
    } = &mut *out.scratch;
    let groups = if sub.per_label { 2 } else { 1 };
    let mut pick: Option<Pair> = None;
    let mut worst = f64::NEG_INFINITY;
    for grp in 0..groups {
        let (up_g, low_g) = (&up_pen[grp * m..][..m], &low_pen[grp * m..][..m]);
        for ((o, &v), &p) in obj.iter_mut().zip(viol.iter()).zip(up_g) {
            *o = v + p;
        }
        let Some((i, vi)) = first_max(obj) else {
            continue;
        };
        let row_i = &q[i * m..(i + 1) * m];
        let (qii, yi) = (q[i * m + i], y[i]);
        for ((o, &v), &p) in obj.iter_mut().zip(viol.iter()).zip(low_g) {
            *o = v + p;
        }
        let v_min = first_min(obj).map_or(f64::INFINITY, |(_, v)| v);
        worst = worst.max(vi - v_min);
        for (((o, &yt), &qit), &qtt) in obj.iter_mut().zip(y).zip(row_i).zip(diag.iter()) {
            let b = vi - *o;
            // a_it = K_ii + K_tt - 2 K_it, K_it = y_i y_t Q_it.
            let a = qii + qtt - 2.0 * yi * yt * qit;
            let a = if a > 0.0 { a } else { TAU };
            *o = if b > 0.0 { -(b * b) / a } else { f64::INFINITY };
        }
        if let Some((j, gain)) = first_min(obj) {
            if pick.is_none_or(|best| gain < best.gain) {
                pick = Some(Pair { i, j, gain });
            }
        }
    }
    let pair = pick?;
    if worst < sub.eps {
        return None;
    }
    Some(pair)
}

/// The pair's clipped step (with a tube, through its kinks), landing exactly on a bound or a
/// kink; returns the changes of d_i and d_j, or None where the step is not positive.
#[inline(always)]
fn take_step(
    sub: &LocalSmoInput<'_>,
    out: &mut LocalSmoOutput<'_>,
    pair: Pair,
) -> Option<(f64, f64)> {
    let (q, y, lo, hi, m) = (sub.q, sub.y, sub.lo, sub.hi, sub.m);
    let Pair { i, j, .. } = pair;
    let (d, viol) = (&mut *out.d, &*out.viol);
    let scratch = &*out.scratch;
    let row_i = &q[i * m..(i + 1) * m];
    let (qii, yi, vi) = (q[i * m + i], y[i], viol[i]);
    let b = vi - viol[j];
    let a = (qii + q[j * m + j] - 2.0 * yi * y[j] * row_i[j]).max(TAU);
    let room_i = if yi > 0.0 { hi[i] - d[i] } else { d[i] - lo[i] };
    let room_j = if y[j] > 0.0 {
        d[j] - lo[j]
    } else {
        hi[j] - d[j]
    };
    let (old_i, old_j) = (d[i], d[j]);
    if let Some((base, eps)) = sub.tube {
        // b is the pair's up value less its low value: both with their penalties.
        let b = vi + scratch.up_pen[i] - viol[j] - scratch.low_pen[j];
        let (beta_i, beta_j) = (base[i] + old_i, base[j] + old_j);
        let step = tube_pair_step(TubePair {
            slope: -b,
            quad: a,
            tube: eps,
            beta_i,
            beta_j,
            room: room_i.min(room_j),
        });
        if step <= 0.0 {
            return None;
        }
        // Landing on a bound or a kink exactly (`DualState::tube_step`).
        d[i] = if step >= room_i {
            hi[i]
        } else if beta_i < 0.0 && step == -beta_i {
            -base[i]
        } else {
            old_i + step
        };
        d[j] = if step >= room_j {
            lo[j]
        } else if beta_j > 0.0 && step == beta_j {
            -base[j]
        } else {
            old_j - step
        };
    } else {
        let step = (b / a).min(room_i).min(room_j);
        if step <= 0.0 {
            return None;
        }
        d[i] = match (step >= room_i, yi > 0.0) {
            (true, true) => hi[i],
            (true, false) => lo[i],
            (false, _) => old_i + yi * step,
        };
        d[j] = match (step >= room_j, y[j] > 0.0) {
            (true, true) => lo[j],
            (true, false) => hi[j],
            (false, _) => old_j - y[j] * step,
        };
    }
    Some((d[i] - old_i, d[j] - old_j))
}

/// The gradient and the violations after d_i and d_j moved by `change`, and the membership and
/// penalties of i and j.
#[inline(always)]
fn follow_step(
    sub: &LocalSmoInput<'_>,
    out: &mut LocalSmoOutput<'_>,
    pair: Pair,
    change: (f64, f64),
) {
    let (q, y, m) = (sub.q, sub.y, sub.m);
    let Pair { i, j, .. } = pair;
    let (di, dj) = change;
    let (row_i, row_j) = (&q[i * m..(i + 1) * m], &q[j * m..(j + 1) * m]);
    for ((((gk, vk), &yk), &qi), &qj) in out
        .gl
        .iter_mut()
        .zip(out.viol.iter_mut())
        .zip(y)
        .zip(row_i)
        .zip(row_j)
    {
        *gk += qi * di + qj * dj;
        *vk = -yk * *gk;
    }
    let LocalSmoScratch {
        sets,
        up_pen,
        low_pen,
        ..
    } = &mut *out.scratch;
    for t in [i, j] {
        sets[t] = membership(sub, t, out.d[t]);
        (up_pen[group(sub, t) + t], low_pen[group(sub, t) + t]) =
            penalties(sub, t, sets[t], out.d[t]);
    }
}
