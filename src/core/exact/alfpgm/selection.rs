//! pWSS, second half: up to p pairs (i, j) from the candidate lists by repeated WSS2 on a
//! look-ahead gradient (`pick_pairs`), into the working set B (`WorkingSet`).
//!
//! After each pair (i, j) is chosen, the violations v_t = -y_t G_t of the remaining candidates
//! are updated as if the pair's SMO step had been taken (v_t -= (K_ti - K_tj) s, s the clipped
//! WSS2 step length), from the kernel rows of i and j. Without it, the p pairs of a cluster of
//! similar points all carry the same large violation and are picked together although one step
//! fixes them all (ijcnn1: 25 such pairs gained what one SMO step gains); with it each pair is
//! the one SMO would take next. The j candidates are scanned by kernel-row block, in the work
//! item that computes (or reads) that block of row i, and the look-ahead update of the last
//! pair rides along in the same pass (`simd::j_scan`).

use crate::core::common::error::Result;
use crate::core::data::rows::Rows;
use crate::core::exact::dual::{tube_pair_step, DualState, TubePair, TAU};
use crate::core::kernels::kernel_cache::{row_blocks, KernelRowCache, ROW_BLOCK};
use crate::core::simd;
use crate::core::simd::{Level, RowValue};

use super::candidates::{Candidates, Smallest};
use super::variable;

/// The working set B of a step, as the pairing leaves it. Allocated once for the run.
pub(super) struct WorkingSet {
    /// Per position: whether it is in B (the pairing skips it as an i).
    pub(super) in_b: Vec<bool>,
    /// B: the pairs' i, then their j.
    pub(super) members: Vec<usize>,
    /// The label of each member (paired: which of the position's two variables it is).
    pub(super) member_labels: Vec<u8>,
    /// The pairs (i, j) and the label each was chosen in.
    pub(super) pair_i: Vec<usize>,
    pub(super) pair_j: Vec<usize>,
    pub(super) pair_label: Vec<u8>,
    /// The smallest violation b_ij = v_i - v_j among the pairs.
    pub(super) min_violation: f64,
}

impl WorkingSet {
    pub(super) fn new(n: usize, p: usize) -> Self {
        WorkingSet {
            in_b: vec![false; n],
            members: Vec::with_capacity(2 * p),
            member_labels: Vec::with_capacity(2 * p),
            pair_i: Vec::with_capacity(p),
            pair_j: Vec::with_capacity(p),
            pair_label: Vec::with_capacity(p),
            min_violation: f64::INFINITY,
        }
    }

    /// No pair was found.
    pub(super) fn is_empty(&self) -> bool {
        self.pair_i.is_empty()
    }

    fn clear(&mut self) {
        for &t in &self.members {
            self.in_b[t] = false;
        }
        self.members.clear();
        self.member_labels.clear();
        self.pair_i.clear();
        self.pair_j.clear();
        self.pair_label.clear();
        self.min_violation = f64::INFINITY;
    }

    fn push_pair(&mut self, i: usize, j: usize, label: u8, violation: f64) {
        self.in_b[i] = true;
        self.in_b[j] = true;
        self.pair_i.push(i);
        self.pair_j.push(j);
        self.pair_label.push(label);
        self.min_violation = self.min_violation.min(violation);
    }

    /// B from the pairs.
    fn close(&mut self) {
        self.members.extend_from_slice(&self.pair_i);
        self.members.extend_from_slice(&self.pair_j);
        self.member_labels.extend_from_slice(&self.pair_label);
        self.member_labels.extend_from_slice(&self.pair_label);
    }
}

/// How many pairs to take at most (p), and the floor of a pair's violation: tol, and after the
/// first pair `pair_ratio` times its violation.
#[derive(Clone, Copy)]
pub(super) struct PairLimits {
    pub(super) pairs: usize,
    pub(super) tol: f64,
    pub(super) pair_ratio: f64,
}

/// pWSS pairing: fills `set` with up to p pairs from the candidate lists of the last
/// `scan_candidates`, marking them in `set.in_b`.
pub(super) fn pick_pairs<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    state: &DualState,
    candidates: &mut Candidates,
    set: &mut WorkingSet,
    limits: PairLimits,
) -> Result<()> {
    set.clear();
    let none = |lists: &[Smallest; 2]| lists.iter().all(|l| l.buf.is_empty());
    if none(&candidates.up_best) || none(&candidates.low_best) {
        return Ok(());
    }
    candidates.open(state);
    let Candidates {
        up,
        up_label,
        low_values,
        low_positions,
        j_member,
        ..
    } = candidates;
    let mut pairing = Pairing {
        state,
        limits,
        up,
        up_label,
        parts: low_parts(low_values, low_positions, state.active),
        j_member,
        set,
        level: simd::level(),
        first_violation: 0.0,
    };
    pairing.run(cache)?;
    set.close();
    candidates.shut(state);
    Ok(())
}

impl Candidates {
    /// The lists of the scan as the pairing reads them: the i candidates with their labels,
    /// the j candidates by position (a paired position that is a j of both labels has one
    /// value: one entry, filtered per label by `j_member`, marked here).
    fn open(&mut self, state: &DualState) {
        self.up.clear();
        self.up_label.clear();
        for (label, up) in self.up_best.iter_mut().enumerate() {
            let list = up.finish();
            self.up.extend(list.iter().map(|&(key, t)| (-key, t)));
            self.up_label
                .extend(std::iter::repeat_n(label as u8, list.len()));
        }
        for (low, member) in self.low_best.iter_mut().zip(self.j_member.iter_mut()) {
            let list = low.finish_unordered();
            if state.paired {
                for &(_, t) in list {
                    member[t as usize] = 1.0;
                }
            }
        }
        let [a, b] = &self.low_best;
        merge_by_position(&a.buf, &b.buf, &mut self.low_merged);
        self.low_values.clear();
        self.low_values.extend(self.low_merged.iter().map(|e| e.0));
        self.low_positions.clear();
        self.low_positions
            .extend(self.low_merged.iter().map(|e| e.1));
    }

    /// Clears the marks of `open`.
    fn shut(&mut self, state: &DualState) {
        if state.paired {
            for (low, member) in self.low_best.iter().zip(self.j_member.iter_mut()) {
                for &(_, t) in &low.buf {
                    member[t as usize] = 0.0;
                }
            }
        }
    }
}

/// The j candidates cut into the runs of the kernel-row blocks over the active positions.
fn low_parts<'c>(values: &'c mut [f64], positions: &'c [u32], active: usize) -> Vec<LowPart<'c>> {
    let mut parts: Vec<LowPart<'_>> = Vec::with_capacity(row_blocks(active));
    let (mut rest_v, mut rest_t) = (values, positions);
    let mut place = 0;
    for blk in 0..row_blocks(active) {
        let end = ((blk + 1) * ROW_BLOCK).min(active);
        let take = rest_t.partition_point(|&t| (t as usize) < end);
        let (head_v, tail_v) = std::mem::take(&mut rest_v).split_at_mut(take);
        let (head_t, tail_t) = rest_t.split_at(take);
        parts.push(LowPart {
            place,
            v: head_v,
            t: head_t,
        });
        place += take;
        (rest_v, rest_t) = (tail_v, tail_t);
    }
    parts
}

/// The look-ahead update of the last pair (i, j) with its step, applied to the j candidates in
/// the same pass as the next pair's j search.
#[derive(Clone, Copy)]
struct LookAhead {
    i: usize,
    j: usize,
    step: f64,
}

/// The pairing of one working set: the candidates it reads and updates, the set it fills.
struct Pairing<'a> {
    state: &'a DualState,
    limits: PairLimits,
    up: &'a mut Vec<(f64, u32)>,
    up_label: &'a [u8],
    parts: Vec<LowPart<'a>>,
    j_member: &'a [Vec<f64>; 2],
    set: &'a mut WorkingSet,
    level: Level,
    /// The first pair's violation (the floor of the later pairs').
    first_violation: f64,
}

impl<'a> Pairing<'a> {
    /// Pairs until p, until no i is left, or until the next pair's violation falls to the
    /// floor.
    fn run<R: Rows, T: RowValue>(&mut self, cache: &mut KernelRowCache<'_, R, T>) -> Result<()> {
        let p = self.limits.pairs;
        let mut pending: Option<LookAhead> = None;
        while self.set.pair_i.len() < p {
            let Some(ki) = self.best_i() else { break };
            let (vi, i) = (self.up[ki].0, self.up[ki].1 as usize);
            let li = self.up_label[ki];
            // Stop at pairs that violate much less than the first one: they cost a kernel row
            // and a gradient update each and gain next to nothing.
            let floor = match self.set.pair_i.first() {
                Some(_) => self
                    .limits
                    .tol
                    .max(self.limits.pair_ratio * self.first_violation),
                None => self.limits.tol,
            };
            let label = self.label_filter(i, li);
            let (lows, best) = self.scan_j(cache, i, vi, label, pending.take())?;
            if vi - lows.without(i) <= floor {
                if label.is_some() {
                    self.drop_label(ki, li, lows.first.1 as usize != i);
                    continue;
                }
                break;
            }
            if best.position == usize::MAX {
                // No partner for this i: drop it from the candidates.
                self.up[ki].0 = f64::NEG_INFINITY;
                continue;
            }
            let j = best.position;
            self.set.push_pair(i, j, li, best.violation);
            // Out of the j scans from now on (the look-ahead values of B are never read again).
            for t in [i, j] {
                self.parts[t / ROW_BLOCK].leave_out(t);
            }
            if self.set.pair_i.len() == 1 {
                self.first_violation = best.violation;
            }
            if self.set.pair_i.len() == p {
                break;
            }
            let step = self.step_length(i, j, li, &best);
            if step > 0.0 {
                let rows = cache.rows_prefix(&[i, j], self.state.active)?;
                let (ri, rj) = (rows.row(0), rows.row(1));
                for e in self.up.iter_mut() {
                    let t = e.1 as usize;
                    e.0 -= (ri[t].widen() - rj[t].widen()) * step;
                }
                pending = Some(LookAhead { i, j, step });
            }
        }
        Ok(())
    }

    /// i: the place of the largest look-ahead violation in I_up outside B.
    fn best_i(&self) -> Option<usize> {
        let mut best_i = None;
        let mut vi = f64::NEG_INFINITY;
        for (k, &(v, t)) in self.up.iter().enumerate() {
            if v > vi && !self.set.in_b[t as usize] {
                vi = v;
                best_i = Some(k);
            }
        }
        best_i
    }

    /// With a sum per label, j only among i's label (a step keeps each label's sum): the
    /// labels to compare and i's.
    fn label_filter(&self, i: usize, li: u8) -> Option<(&'a [f64], f64)> {
        let state = self.state;
        if state.paired {
            let member: &'a [Vec<f64>; 2] = self.j_member;
            Some((&member[usize::from(li)][..], 1.0))
        } else {
            state.sum_per_label.then(|| (&state.y[..], state.y[i]))
        }
    }

    /// One pass over the j candidates, block by block: the pending look-ahead update, the two
    /// smallest violations (the stopping test) and WSS2's j for i.
    fn scan_j<R: Rows, T: RowValue>(
        &mut self,
        cache: &mut KernelRowCache<'_, R, T>,
        i: usize,
        vi: f64,
        label: Option<(&[f64], f64)>,
        pending: Option<LookAhead>,
    ) -> Result<(TwoSmallest, BestJ)> {
        let (idx, k_rows, step) = match pending {
            Some(LookAhead { i: pi, j: pj, step }) => ([i, pi, pj], 3, step),
            None => ([i, i, i], 1, 0.0),
        };
        let (diag, equal_diag) = (&self.state.diag[..], self.state.equal_diag);
        let level = self.level;
        let (_, found) = cache.rows_prefix_blocks(
            &idx[..k_rows],
            self.state.active,
            &mut self.parts,
            |j0, rows, part| {
                let input = simd::JScanInput {
                    t: part.t,
                    diag,
                    equal_diag,
                    j0,
                    i,
                    vi,
                    row_i: rows[0],
                    update: (k_rows == 3).then(|| (rows[1], rows[2], step)),
                    label,
                    tau: TAU,
                };
                let scan = simd::j_scan(level, part.v, &input);
                part.found(scan)
            },
            || (TwoSmallest::default(), BestJ::NONE),
            |(ta, ba), (tb, bb)| (ta.merge(tb), ba.or_later(bb)),
        )?;
        Ok(found)
    }

    /// Only i's label is (nearly) optimal: the other may still have pairs. Every other i' of
    /// the label has v_i' <= vi, and unless i is the label's smallest j violation the same
    /// smallest one, so none of them passes either: the whole label is dropped at once (one
    /// scan over the j candidates each, they cost 39% of a nu-SVR fit on puma8nh).
    fn drop_label(&mut self, ki: usize, li: u8, whole_label: bool) {
        if whole_label {
            for (e, &l) in self.up.iter_mut().zip(self.up_label.iter()) {
                if l == li {
                    e.0 = f64::NEG_INFINITY;
                }
            }
        } else {
            self.up[ki].0 = f64::NEG_INFINITY;
        }
    }

    /// The WSS2 step along (a_i += y_i s, a_j -= y_j s), clipped to the box (with a tube,
    /// through its kinks).
    fn step_length(&self, i: usize, j: usize, li: u8, best: &BestJ) -> f64 {
        let state = self.state;
        let (b_ij, a_ij) = (best.violation, best.curvature);
        let room = |t: usize, up: bool| {
            let (a, y) = variable(state, t, li);
            if (y > 0.0) == up {
                state.upper[t] - a
            } else {
                a - state.lower(t)
            }
        };
        if state.signed {
            tube_pair_step(TubePair {
                slope: -b_ij,
                quad: a_ij,
                tube: state.tube,
                beta_i: state.alpha[i],
                beta_j: state.alpha[j],
                room: room(i, true).min(room(j, false)).max(0.0),
            })
        } else {
            (b_ij / a_ij)
                .min(room(i, true))
                .min(room(j, false))
                .max(0.0)
        }
    }
}

/// `out` = the entries of `a` and `b` by increasing position, one entry per position (the
/// first list's where both hold it). Lists of a whole index set arrive in position order
/// (`Smallest` keeps the scan's order until it cuts): merged in one pass; otherwise sorted.
pub(super) fn merge_by_position(a: &[(f64, u32)], b: &[(f64, u32)], out: &mut Vec<(f64, u32)>) {
    out.clear();
    let sorted = |l: &[(f64, u32)]| l.is_sorted_by_key(|e| e.1);
    if !(sorted(a) && sorted(b)) {
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        out.sort_by_key(|e| e.1);
        out.dedup_by_key(|e| e.1);
        return;
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (ea, eb) = (a[i], b[j]);
        if ea.1 <= eb.1 {
            out.push(ea);
            i += 1;
            j += usize::from(ea.1 == eb.1);
        } else {
            out.push(eb);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// A block's run of the j candidates: its place in the whole list, the look-ahead values and
/// the positions.
struct LowPart<'c> {
    place: usize,
    v: &'c mut [f64],
    t: &'c [u32],
}

impl LowPart<'_> {
    /// A run's scan (`simd::j_scan`) by positions and places in the whole list.
    fn found(&self, scan: simd::JScan) -> (TwoSmallest, BestJ) {
        let position = |k: usize| self.t.get(k).map_or(u32::MAX, |&t| t);
        let two = TwoSmallest {
            first: (scan.first.0, position(scan.first.1)),
            second: scan.second,
        };
        let (score, k, violation, curvature) = scan.best;
        let best = if k == usize::MAX {
            BestJ::NONE
        } else {
            BestJ {
                score,
                place: self.place + k,
                position: position(k) as usize,
                violation,
                curvature,
            }
        };
        (two, best)
    }

    /// Takes position t (if it is a j candidate of this run) out of the scans: value +inf.
    fn leave_out(&mut self, t: usize) {
        if let Ok(k) = self.t.binary_search(&(t as u32)) {
            self.v[k] = f64::INFINITY;
        }
    }
}

/// The best j so far of a j scan.
#[derive(Clone, Copy)]
struct BestJ {
    /// WSS2's -b^2 / a.
    score: f64,
    /// The place in the list of j candidates (ties go to the later).
    place: usize,
    /// j's position; `usize::MAX` for none.
    position: usize,
    /// b_ij = v_i - v_j.
    violation: f64,
    /// a_ij = K_ii + K_jj - 2 K_ij (TAU where not positive).
    curvature: f64,
}

impl BestJ {
    const NONE: BestJ = BestJ {
        score: f64::INFINITY,
        place: 0,
        position: usize::MAX,
        violation: 0.0,
        curvature: 0.0,
    };

    /// The better of this and a later run's best: the lower score, on a tie the later place.
    fn or_later(self, later: BestJ) -> BestJ {
        if later.score < self.score || (later.score == self.score && later.place > self.place) {
            later
        } else {
            self
        }
    }
}

/// The two smallest violations of a candidate list (the smallest other than a given index is
/// then one of them).
#[derive(Clone, Copy)]
struct TwoSmallest {
    first: (f64, u32),
    second: f64,
}

impl Default for TwoSmallest {
    fn default() -> Self {
        TwoSmallest {
            first: (f64::INFINITY, u32::MAX),
            second: f64::INFINITY,
        }
    }
}

impl TwoSmallest {
    #[inline]
    fn push(&mut self, v: f64, t: u32) {
        if v < self.first.0 {
            self.second = self.first.0;
            self.first = (v, t);
        } else if v < self.second {
            self.second = v;
        }
    }

    /// The two smallest of two lists, `self` the earlier one (first place wins ties, as `push`).
    fn merge(self, later: TwoSmallest) -> TwoSmallest {
        let mut out = self;
        out.push(later.first.0, later.first.1);
        out.second = out.second.min(later.second);
        out
    }

    /// The smallest violation of an index other than `i`.
    fn without(&self, i: usize) -> f64 {
        if self.first.1 as usize == i {
            self.second
        } else {
            self.first.0
        }
    }
}
