//! pWSS, first half: what the limiter keeps per position (`Limiter`), and the one pass over
//! all positions that gives the unfiltered m(a), M(a) and the candidate lists of the pairing
//! (`scan_candidates`: the 4p largest -y G of I_up, the `min_alpha_check` smallest of I_low).

use crate::core::exact::dual::{label_index, tube_shifts, DualState};

use super::params::AlfpgmParams;

/// Flags of a position (`Limiter::flags`): its membership of I_up and I_low ...
pub(super) const UP: u8 = 1;
pub(super) const LOW: u8 = 2;
/// ... and whether the limiter holds it back.
const LIMITED: u8 = 4;
/// Paired: a_t*'s membership (`UP` / `LOW` are a_t's).
const UP_STAR: u8 = 8;
const LOW_STAR: u8 = 16;

/// The limiter's record of every position, and the flags the candidate scan reads; follows
/// the shrinking's position swaps.
pub(super) struct Limiter {
    /// cnt_t: times t has been in B.
    times_in_b: Vec<u32>,
    /// d_alpha_t: |change| of a_t at its last optimisation.
    last_change: Vec<f64>,
    /// `UP`, `LOW`, `LIMITED` (paired: also `UP_STAR`, `LOW_STAR`) of each position.
    flags: Vec<u8>,
}

impl Limiter {
    pub(super) fn new(n: usize) -> Self {
        Limiter {
            times_in_b: vec![0; n],
            last_change: vec![f64::INFINITY; n],
            flags: vec![0; n],
        }
    }

    /// Position t has been optimised once more and its variable moved by `change`.
    #[inline]
    pub(super) fn record(&mut self, t: usize, change: f64) {
        self.times_in_b[t] = self.times_in_b[t].saturating_add(1);
        self.last_change[t] = change.abs();
    }

    /// Index t's membership of I_up / I_low and whether the limiter holds it back; refreshed
    /// whenever a_t, its count or its last change move (only for the indices of a step).
    pub(super) fn refresh(&mut self, state: &DualState, params: &AlfpgmParams, t: usize) {
        let c = state.upper[t];
        // At a bound or a tube's kink: where a variable stops for a while.
        let at_bound = !state.is_free(t);
        let cnt = self.times_in_b[t];
        let limited = cnt >= params.max_alpha_opt
            || (cnt >= params.min_alpha_opt
                && at_bound
                && self.last_change[t] < params.alpha_delta_threshold * c);
        if state.paired {
            let [(up, low), (up_star, low_star)] = state.paired_sets(t);
            self.flags[t] = u8::from(up) * UP
                + u8::from(low) * LOW
                + u8::from(up_star) * UP_STAR
                + u8::from(low_star) * LOW_STAR
                + u8::from(limited) * LIMITED;
            return;
        }
        self.flags[t] = u8::from(state.in_up(t)) * UP
            + u8::from(state.in_low(t)) * LOW
            + u8::from(limited) * LIMITED;
    }

    /// Follows a position swap of the shrinking.
    pub(super) fn swap(&mut self, a: usize, b: usize) {
        self.times_in_b.swap(a, b);
        self.last_change.swap(a, b);
        self.flags.swap(a, b);
    }
}

/// The candidates of a pairing: the lists the scan fills, and what the pairing makes of them
/// (`selection.rs`). Allocated once for the run.
pub(super) struct Candidates {
    /// i candidates keyed by -v (largest v first), j candidates keyed by v. With a sum per
    /// label, [1] holds the y = -1 candidates (each label keeps its own best: one label's
    /// violations can lie all above the other's); otherwise only [0] is used.
    pub(super) up_best: [Smallest; 2],
    pub(super) low_best: [Smallest; 2],
    /// The i candidates of the pairing: (look-ahead value v, position) ...
    pub(super) up: Vec<(f64, u32)>,
    /// ... and the label (`label_index`; 0 without a sum per label) of each: a paired position
    /// can be an i of both labels.
    pub(super) up_label: Vec<u8>,
    /// The j candidates of both labels by increasing position, one entry per position ...
    pub(super) low_merged: Vec<(f64, u32)>,
    /// ... split as the scans read them: look-ahead values (+inf once in B) and positions.
    pub(super) low_values: Vec<f64>,
    pub(super) low_positions: Vec<u32>,
    /// Paired: per label, 1 at the positions that are that label's j candidates in the current
    /// pairing, 0 elsewhere (the j scan's label filter); empty otherwise.
    pub(super) j_member: [Vec<f64>; 2],
}

impl Candidates {
    pub(super) fn new(n: usize, p: usize, paired: bool) -> Self {
        let m = 2 * p;
        let member = || if paired { vec![0.0; n] } else { Vec::new() };
        Candidates {
            up_best: [(); 2].map(|_| Smallest::with_capacity(4 * m + 64)),
            low_best: [(); 2].map(|_| Smallest::with_capacity(16 * p + 64)),
            up: Vec::with_capacity(4 * m + 64),
            up_label: Vec::with_capacity(4 * m + 64),
            low_merged: Vec::with_capacity(16 * p + 64),
            low_values: Vec::with_capacity(16 * p + 64),
            low_positions: Vec::with_capacity(16 * p + 64),
            j_member: [member(), member()],
        }
    }
}

/// The k entries with the smallest keys of a stream, in one pass: entries at or above the
/// current threshold are rejected with one comparison; the buffer is cut back to the best k
/// (`select_nth_unstable`) whenever it holds 2k + 64, which sets the threshold.
pub(super) struct Smallest {
    k: usize,
    pub(super) buf: Vec<(f64, u32)>,
    threshold: f64,
}

impl Smallest {
    pub(super) fn with_capacity(cap: usize) -> Self {
        Smallest {
            k: 0,
            buf: Vec::with_capacity(cap),
            threshold: f64::INFINITY,
        }
    }

    pub(super) fn reset(&mut self, k: usize) {
        self.k = k.max(1);
        self.buf.clear();
        self.threshold = f64::INFINITY;
    }

    #[inline]
    pub(super) fn push(&mut self, key: f64, t: u32) {
        if key >= self.threshold {
            return;
        }
        self.buf.push((key, t));
        if self.buf.len() >= self.k.saturating_mul(2).saturating_add(64) {
            self.cut();
            self.threshold = self.buf[self.k - 1].0;
        }
    }

    fn cut(&mut self) {
        if self.buf.len() > self.k {
            self.buf
                .select_nth_unstable_by(self.k - 1, |a, b| a.0.total_cmp(&b.0));
            self.buf.truncate(self.k);
            // The k-th smallest is at k - 1 after the partition; keep it there for `push`.
            let worst = self
                .buf
                .iter()
                .enumerate()
                .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
                .map_or(0, |(i, _)| i);
            self.buf.swap(worst, self.k - 1);
        }
    }

    /// The best k, ascending by key.
    pub(super) fn finish(&mut self) -> &[(f64, u32)] {
        self.cut();
        self.buf.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        &self.buf
    }

    /// The best k in no particular order (no sort: with k = all, a whole index set).
    pub(super) fn finish_unordered(&mut self) -> &[(f64, u32)] {
        self.cut();
        &self.buf
    }
}

/// One pass over all indices: returns the unfiltered (m(a), M(a)) and fills the candidate lists
/// (the 4p largest -y G of I_up, the `min_alpha_check` smallest of I_low), leaving out what the
/// limiter holds back when `filtered`. The limiter never holds back a strong violator: an index
/// whose violation is at least half the gap (of the previous step, `prev`) stays a candidate.
pub(super) fn scan_candidates(
    state: &DualState,
    limiter: &Limiter,
    candidates: &mut Candidates,
    params: &AlfpgmParams,
    p: usize,
    prev: (f64, f64),
    filtered: bool,
) -> (f64, f64) {
    let flags = &limiter.flags[..state.active];
    let (up, low) = (&mut candidates.up_best, &mut candidates.low_best);
    let mut scan = CandidateScan::start(up, low, params, p, prev, filtered);
    if state.paired {
        // Both labels' values at t are -F_t; the flags say which lists t joins.
        for (t, (&f, &g)) in flags.iter().zip(&state.grad).enumerate() {
            scan.offer(0, t, f, (UP, LOW), (-g, -g));
            scan.offer(1, t, f, (UP_STAR, LOW_STAR), (-g, -g));
        }
    } else if state.signed {
        offer_positions::<true>(state, flags, &mut scan);
    } else {
        offer_positions::<false>(state, flags, &mut scan);
    }
    scan.extremes(state.sum_per_label)
}

/// What a candidate scan keeps while it walks the positions: the lists it fills, each label's
/// (m, M) so far, and the limiter's test (half the previous gap: a stronger violator passes).
struct CandidateScan<'w> {
    up: &'w mut [Smallest; 2],
    low: &'w mut [Smallest; 2],
    ext: [(f64, f64); 2],
    prev: (f64, f64),
    half: f64,
    skip: u8,
}

impl<'w> CandidateScan<'w> {
    /// Empties the lists: 4p i candidates and `min_alpha_check` j candidates per label.
    fn start(
        up: &'w mut [Smallest; 2],
        low: &'w mut [Smallest; 2],
        params: &AlfpgmParams,
        p: usize,
        prev: (f64, f64),
        filtered: bool,
    ) -> Self {
        for (up, low) in up.iter_mut().zip(low.iter_mut()) {
            up.reset(4 * p);
            low.reset(params.j_candidates());
        }
        CandidateScan {
            up,
            low,
            ext: [(f64::NEG_INFINITY, f64::INFINITY); 2],
            prev,
            half: 0.5 * (prev.0 - prev.1),
            skip: if filtered { LIMITED } else { 0 },
        }
    }

    /// Position t as a variable of `label`: a member of I_up (I_low) where flag `bits.0`
    /// (`bits.1`) is set, with the value `values.0` (`values.1`) there.
    #[inline(always)]
    fn offer(&mut self, label: usize, t: usize, f: u8, bits: (u8, u8), values: (f64, f64)) {
        let (v_up, v_low) = values;
        let e = &mut self.ext[label];
        if f & bits.0 != 0 {
            e.0 = e.0.max(v_up);
            if f & self.skip == 0 || v_up - self.prev.1 >= self.half {
                self.up[label].push(-v_up, t as u32);
            }
        }
        if f & bits.1 != 0 {
            e.1 = e.1.min(v_low);
            if f & self.skip == 0 || self.prev.0 - v_low >= self.half {
                self.low[label].push(v_low, t as u32);
            }
        }
    }

    /// The (m, M) that decides the stop: with a sum per label the label whose m - M is
    /// largest (LIBSVM's Solver_NU), otherwise the one set's.
    fn extremes(&self, per_label: bool) -> (f64, f64) {
        let ext = self.ext;
        if per_label && ext[1].0 - ext[1].1 > ext[0].0 - ext[0].1 {
            ext[1]
        } else {
            ext[0]
        }
    }
}

/// `scan_candidates`' pass over a box or tube form, `TUBE` = `state.signed`
/// (`DualState::up_entry`'s reason); each label's lists with a sum per label
/// (`DualProblem::sum_per_label`), else all in label 0's.
fn offer_positions<const TUBE: bool>(
    state: &DualState,
    flags: &[u8],
    scan: &mut CandidateScan<'_>,
) {
    let per_label = usize::from(state.sum_per_label);
    let tube = state.tube;
    for (t, (((&f, &y), &g), &a)) in flags
        .iter()
        .zip(&state.y)
        .zip(&state.grad)
        .zip(&state.alpha)
        .enumerate()
    {
        // The values of t as an i (`DualState::up_value`) and as a j (`low_value`).
        let values = if TUBE {
            let (up, low) = tube_shifts(a, tube);
            (-g + up, -g + low)
        } else {
            let v = -y * g;
            (v, v)
        };
        scan.offer(label_index(y) & per_label, t, f, (UP, LOW), values);
    }
}
