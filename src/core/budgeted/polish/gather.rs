//! The Hessian-free solve's passes: what a direction needs of the rows (`Gathered`: the
//! gradient, the squared rows and their weight), at the current point or at a trial point, and
//! at a short step's point from the full step's (`step_pass`).

use std::ops::Range;

use crate::core::budgeted::problem::{Targets, Term};
use crate::core::common::error::Result;

use super::copies::{Member, RowCopies, SquaredRow, SquaredRows};
use super::output::Output;
use super::segments::{segment_pass, Passes, RowsNeeded, SegmentValues};

/// Per segment, the rows whose loss term is squared for some output of `live` at its f.
pub(super) fn squared_per_segment(
    spans: &[Range<usize>],
    outputs: &[Output],
    live: &[usize],
    targets: &Targets<'_>,
) -> Vec<usize> {
    spans
        .iter()
        .map(|span| {
            span.clone()
                .filter(|&i| {
                    live.iter()
                        .any(|&k| targets.term(k, i, outputs[k].f[i]).curvature() > 0.0)
                })
                .count()
        })
        .collect()
}

/// What the Hessian-free direction needs of the rows at the current point, per live output:
/// the loss term's gradient sum_i w hs_i (k_i, 1) (hs: the term's half slope), the squared
/// rows (per output where their kernel values are, with their weight) and those rows' total
/// weight. The rows are in f32: they serve only the Hessian products, whose directions need
/// not be exact (the gradient, the line search and the objective use f64), and the products
/// read them tens of times an iteration. A row of a cached segment is read from the cache;
/// the others are copied, one vector per segment (no vector of all rows to grow).
pub(super) struct Gathered {
    /// The outputs gathered for (the live ones of the pass), in the order of the vectors below.
    outputs: Vec<usize>,
    pub(super) gradient: Vec<Vec<f64>>,
    /// At a trial point, per output: sum w d_i (k_i, 1) over the rows squared at both ends of
    /// the step (d_i: the change of f_i over it), the gradient's rate of change along the step
    /// from those rows (`step_pass`). Empty at the current point.
    slope: Vec<Vec<f64>>,
    pub(super) copies: RowCopies,
    pub(super) members: Vec<Vec<Member>>,
    /// Per output, the squared rows without a copy (row, weight), in row order: their kernel
    /// values are computed again by every Hessian product (`recomputed_product`).
    pub(super) recomputed: Vec<Vec<(usize, f64)>>,
    pub(super) weight: Vec<f64>,
    /// Squared rows (of any output).
    pub(super) n_rows: usize,
    /// Squared rows without a copy (of any output).
    pub(super) n_recomputed: usize,
}

impl Gathered {
    /// Empty sums for the `live` outputs; a slope per output only at a trial point (`trial`).
    fn new(live: &[usize], m: usize, half: bool, trial: bool) -> Self {
        let q = live.len();
        Gathered {
            outputs: live.to_vec(),
            gradient: vec![vec![0.0; m + 1]; q],
            slope: vec![vec![0.0; if trial { m + 1 } else { 0 }]; q],
            copies: RowCopies::empty(half),
            members: vec![Vec::new(); q],
            recomputed: vec![Vec::new(); q],
            weight: vec![0.0; q],
            n_rows: 0,
            n_recomputed: 0,
        }
    }

    pub(super) fn copied_bytes(&self) -> usize {
        self.copies.bytes()
    }

    /// Output k's place among the vectors.
    pub(super) fn place(&self, k: usize) -> usize {
        self.outputs
            .iter()
            .position(|&o| o == k)
            .expect("gathered for every live output")
    }

    /// Output `li`'s squared rows.
    pub(super) fn rows_of(&self, li: usize, m: usize) -> SquaredRows<'_> {
        fn rows<'a, T>(members: &[Member], copies: &'a [Vec<T>], m: usize) -> Vec<(&'a [T], f64)> {
            members
                .iter()
                .map(|member| {
                    let SquaredRow { part, row } = member.at;
                    (&copies[part][row * m..(row + 1) * m], member.weight)
                })
                .collect()
        }
        match &self.copies {
            RowCopies::Half(c) => SquaredRows::Half(rows(&self.members[li], c, m)),
            RowCopies::Single(c) => SquaredRows::Single(rows(&self.members[li], c, m)),
        }
    }
}

/// What a gather pass collects, and where: the outputs (their f is the current point) and the
/// live ones among them, the trial point if any (per live output its coefficients and
/// intercept), the copies' precision (halves or f32), per segment the squared rows expected
/// (the copies' capacity) and the copies it may make, and the rows' terms and weights.
#[derive(Clone, Copy)]
pub(super) struct Gather<'a> {
    pub(super) outputs: &'a [Output],
    pub(super) live: &'a [usize],
    pub(super) trial: Option<&'a [(Vec<f64>, f64)]>,
    pub(super) half: bool,
    pub(super) squared: &'a (dyn Fn(usize) -> usize + Sync),
    pub(super) copy_limit: &'a (dyn Fn(usize) -> usize + Sync),
    pub(super) term: &'a (dyn Fn(usize, usize, f64) -> Term + Sync),
    pub(super) weight: &'a (dyn Fn(usize) -> f64 + Sync),
}

/// One pass over the rows for `Gathered`, segments in parallel, their parts added in row order.
/// At the current point (`trial` None) a row's value is read from the outputs' f and rows with
/// a zero term are skipped; at a trial point (per live output its coefficients and intercept)
/// every row's value is computed from its kernel values in the same pass, and returned per live
/// output: one pass gives both the values a line search needs and, when the full step is
/// taken, the next direction's gradient and squared rows (the product K d and the gather were
/// two passes over the rows per iteration).
pub(super) fn gather_pass(
    passes: &mut Passes<'_>,
    at: &Gather<'_>,
) -> Result<(Gathered, Vec<Vec<f64>>)> {
    let Gather {
        outputs,
        live,
        trial,
        half,
        squared,
        copy_limit,
        term,
        weight,
    } = *at;
    let m = passes.blocks.n_basis();
    let q = live.len();
    let mut out = Gathered::new(live, m, half, trial.is_some());
    // Rows with a zero term for every output add nothing.
    let needed = |i: usize| {
        live.iter()
            .any(|&k| term(k, i, outputs[k].f[i]) != Term::Zero)
    };
    let work = |s: usize, span: Range<usize>, kv: SegmentValues<'_>| {
        let mut part = Gathered::new(live, m, half, trial.is_some());
        let mut values = vec![0.0; if trial.is_some() { span.len() * q } else { 0 }];
        // Sized for the segment's squared rows: a vector grown by doubling kept up to twice
        // their bytes (a million rows, B = 2,000: 2.75 GB at the peak for 1.34 GB of rows).
        let start = span.start;
        let (limit, mut copied) = (copy_limit(s), 0);
        for (t, i) in span.enumerate() {
            if trial.is_none() && !needed(i) {
                continue;
            }
            let w = weight(i);
            // The row's copy (None: not made yet), or Some(None): the row is recomputed.
            let mut kept: Option<Option<SquaredRow>> = None;
            for (li, &k) in live.iter().enumerate() {
                let f = match trial {
                    Some(points) => {
                        let (beta, b) = &points[li];
                        let f = kv.dot(t, m, beta) + b;
                        values[t * q + li] = f;
                        f
                    }
                    None => outputs[k].f[i],
                };
                let piece = term(k, i, f);
                if piece == Term::Zero {
                    continue;
                }
                let hs = w * piece.half_slope(f);
                let g = &mut part.gradient[li];
                kv.axpy(t, m, hs, &mut g[..m]);
                g[m] += hs;
                let f0 = outputs[k].f[i];
                if trial.is_some() && piece.curvature() > 0.0 && term(k, i, f0) == piece {
                    let rate = w * (f - f0);
                    let slope = &mut part.slope[li];
                    kv.axpy(t, m, rate, &mut slope[..m]);
                    slope[m] += rate;
                }
                if piece.curvature() > 0.0 {
                    let at = *kept.get_or_insert_with(|| {
                        part.n_rows += 1;
                        if copied < limit {
                            copied += 1;
                            let capacity = squared(s).min(limit) * m;
                            Some(SquaredRow {
                                part: 0,
                                row: part.copies.push_row(kv, t, m, capacity),
                            })
                        } else {
                            part.n_recomputed += 1;
                            None
                        }
                    });
                    match at {
                        Some(at) => part.members[li].push(Member {
                            at,
                            row: i,
                            weight: w,
                        }),
                        None => part.recomputed[li].push((i, w)),
                    }
                    part.weight[li] += w;
                }
            }
        }
        (part, start, values)
    };
    let n = passes.source.n_rows();
    let mut values = vec![vec![0.0; if trial.is_some() { n } else { 0 }]; q];
    segment_pass(
        passes,
        None,
        trial.is_none().then_some(&needed as &RowsNeeded<'_>),
        &work,
        &mut |_s, (mut part, first, f)| {
            let at = out.copies.parts();
            out.copies.append(&mut part.copies);
            out.n_rows += part.n_rows;
            out.n_recomputed += part.n_recomputed;
            for li in 0..q {
                out.recomputed[li].append(&mut part.recomputed[li]);
                for (a, b) in out.gradient[li].iter_mut().zip(&part.gradient[li]) {
                    *a += b;
                }
                for (a, b) in out.slope[li].iter_mut().zip(&part.slope[li]) {
                    *a += b;
                }
                out.weight[li] += part.weight[li];
                out.members[li].extend(part.members[li].iter().map(|member| Member {
                    at: SquaredRow {
                        part: at,
                        row: member.at.row,
                    },
                    ..*member
                }));
            }
            if q > 0 {
                for (t, row) in f.chunks(q).enumerate() {
                    for (li, &v) in row.iter().enumerate() {
                        values[li][first + t] = v;
                    }
                }
            }
            Ok(())
        },
    )?;
    Ok((out, values))
}

/// An output that took a step t other than 1 along its direction: t and f before the step.
pub(super) struct ShortStep {
    pub(super) output: usize,
    pub(super) t: f64,
    pub(super) f_before: Vec<f64>,
}

/// `Gathered` at the points the line search chose, from the trial pass's (at the full steps)
/// and a pass over the rows that change piece along a short step only. A row in the same
/// piece at t = 0, 1 and t is in it all along (pieces are intervals of f), so its part of
/// the gradient is linear in t: the trial pass's gradient less (1 - t) times its `slope`, and
/// it is squared at t if and only if at the full step. A row in one piece at 0 and 1 can
/// still leave it beyond 1 when the step is longer than the full one (t > 1): it changes
/// piece too. The rows that change piece (about a sixth of the rows on the first full step
/// from a subsample's start, where a pass over all rows took 0.45 s of an 8 s fit) are
/// computed again: their gradient terms at t replace those at the full step, and they are
/// squared rows at t where their piece is. Their copies take the places of the copies no
/// output reads any more, then what the budget leaves (segment by segment in row order,
/// whatever the threads); the rest are computed again by each product. The budget is the
/// segments' (`Segments::budget`).
pub(super) fn step_pass(
    passes: &mut Passes<'_>,
    mut gathered: Gathered,
    outputs: &[Output],
    steps: &[ShortStep],
    term: &(dyn Fn(usize, usize, f64) -> Term + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
) -> Result<Gathered> {
    let m = passes.blocks.n_basis();
    let n = passes.source.n_rows();
    // f at a step's end as `Fixed::advance` computes it, and whether the row changed piece
    // between 0 and 1 or, on a step longer than the full one, between 1 and t.
    let at = |s: &ShortStep, i: usize, t: f64| s.f_before[i] + t * outputs[s.output].delta[i];
    let flips: Vec<Vec<bool>> = steps
        .iter()
        .map(|s| {
            (0..n)
                .map(|i| {
                    let at_full = term(s.output, i, at(s, i, 1.0));
                    term(s.output, i, s.f_before[i]) != at_full
                        || (s.t > 1.0 && term(s.output, i, at(s, i, s.t)) != at_full)
                })
                .collect()
        })
        .collect();
    let squared_at = |si: usize, i: usize| {
        let s = &steps[si];
        term(s.output, i, at(s, i, s.t)).curvature() > 0.0
    };
    // The rows squared at the full step stay unless they changed piece and are not squared at
    // t; the copies that no output reads then are free places.
    let places: Vec<usize> = steps.iter().map(|s| gathered.place(s.output)).collect();
    for (si, &li) in places.iter().enumerate() {
        let stays = |i: usize| !flips[si][i] || squared_at(si, i);
        gathered.members[li].retain(|member| stays(member.row));
        gathered.recomputed[li].retain(|&(i, _)| stays(i));
    }
    let mut read: Vec<Vec<bool>> = (0..gathered.copies.parts())
        .map(|p| vec![false; gathered.copies.rows_in(p, m)])
        .collect();
    // A row's copy, where some output still reads it (copies are shared by the outputs).
    let mut copy_of: Vec<Option<SquaredRow>> = vec![None; n];
    for members in &gathered.members {
        for member in members {
            read[member.at.part][member.at.row] = true;
            copy_of[member.row] = Some(member.at);
        }
    }
    let mut free = read.iter().enumerate().flat_map(|(part, rows)| {
        let rows: Vec<usize> = (0..rows.len()).filter(|&r| !rows[r]).collect();
        rows.into_iter().map(move |row| SquaredRow { part, row })
    });
    let segments = &passes.segments;
    let mut room = segments
        .budget
        .saturating_sub(segments.held_bytes(m) + gathered.copied_bytes());
    let row_bytes = m * if matches!(gathered.copies, RowCopies::Half(_)) {
        2
    } else {
        4
    };
    let any_flip: Vec<bool> = (0..n).map(|i| flips.iter().any(|f| f[i])).collect();
    let seg_of = |i: usize| segments.spans.partition_point(|s| s.end <= i);
    let mut wanted = vec![false; segments.spans.len()];
    for (i, _) in any_flip.iter().enumerate().filter(|(_, &f)| f) {
        wanted[seg_of(i)] = true;
    }
    let half = matches!(gathered.copies, RowCopies::Half(_));
    let movers: Vec<usize> = steps.iter().map(|s| s.output).collect();
    let needed = |i: usize| any_flip[i];
    // Per segment: the gradient's changes, and the rows newly squared (copied in the part:
    // `NEW_COPY` as their place).
    const NEW_COPY: usize = usize::MAX;
    let work = |_s: usize, span: Range<usize>, kv: SegmentValues<'_>| {
        let mut part = Gathered::new(&movers, m, half, false);
        for (t, i) in span.enumerate() {
            if !any_flip[i] {
                continue;
            }
            let w = weight(i);
            let mut kept: Option<SquaredRow> = None;
            for (si, s) in steps.iter().enumerate() {
                if !flips[si][i] {
                    continue;
                }
                let (f1, ft) = (at(s, i, 1.0), at(s, i, s.t));
                let (p1, pt) = (term(s.output, i, f1), term(s.output, i, ft));
                // What the gradient at t counts for the row without this change: its term at
                // the full step, moved along by the slope where the row was in that piece at
                // 0 too (the slope counts those rows), so read at t then.
                let counted = if term(s.output, i, s.f_before[i]) == p1 {
                    p1.half_slope(ft)
                } else {
                    p1.half_slope(f1)
                };
                let change = w * (pt.half_slope(ft) - counted);
                let g = &mut part.gradient[si];
                kv.axpy(t, m, change, &mut g[..m]);
                g[m] += change;
                // Squared at both ends of the short step: its copy at the full step serves.
                if pt.curvature() > 0.0 && p1.curvature() == 0.0 {
                    let at = *kept.get_or_insert_with(|| {
                        copy_of[i].unwrap_or_else(|| SquaredRow {
                            part: NEW_COPY,
                            row: part.copies.push_row(kv, t, m, 0),
                        })
                    });
                    part.members[si].push(Member {
                        at,
                        row: i,
                        weight: w,
                    });
                }
            }
        }
        part
    };
    let mut changes = vec![vec![0.0; m + 1]; steps.len()];
    let mut extra = RowCopies::empty(half);
    let first_extra = gathered.copies.parts();
    segment_pass(
        passes,
        Some(&wanted),
        Some(&needed),
        &work,
        &mut |_s, part| {
            // Each new copy's place: a free one, else a new row within the budget, else none.
            let placed: Vec<Option<SquaredRow>> = (0..part.copies.rows_in(0, m))
                .map(|r| {
                    if let Some(slot) = free.next() {
                        gathered.copies.copy_row(slot, &part.copies, r, m);
                        Some(slot)
                    } else if row_bytes <= room {
                        room -= row_bytes;
                        let row = extra.copy_row_to_end(&part.copies, r, m);
                        Some(SquaredRow {
                            part: first_extra,
                            row,
                        })
                    } else {
                        None
                    }
                })
                .collect();
            for (si, &li) in places.iter().enumerate() {
                for (a, b) in changes[si].iter_mut().zip(&part.gradient[si]) {
                    *a += b;
                }
                for member in &part.members[si] {
                    let at = match member.at.part {
                        NEW_COPY => placed[member.at.row],
                        _ => Some(member.at),
                    };
                    match at {
                        Some(at) => gathered.members[li].push(Member { at, ..*member }),
                        None => gathered.recomputed[li].push((member.row, member.weight)),
                    }
                }
            }
            Ok(())
        },
    )?;
    gathered.copies.append(&mut extra);
    for (si, s) in steps.iter().enumerate() {
        let li = places[si];
        let g = &mut gathered.gradient[li];
        for ((g, slope), change) in g.iter_mut().zip(&gathered.slope[li]).zip(&changes[si]) {
            *g += change - (1.0 - s.t) * slope;
        }
        // `recomputed_product` takes them in row order.
        gathered.recomputed[li].sort_by_key(|&(i, _)| i);
        gathered.weight[li] = gathered.members[li]
            .iter()
            .map(|member| member.weight)
            .sum::<f64>()
            + gathered.recomputed[li].iter().map(|&(_, w)| w).sum::<f64>();
    }
    // The squared rows (of any output) and those without a copy, counted again.
    let mut squared = vec![0u8; n];
    for li in 0..gathered.outputs.len() {
        for member in &gathered.members[li] {
            squared[member.row] |= 1;
        }
        for &(i, _) in &gathered.recomputed[li] {
            squared[i] |= 2;
        }
    }
    gathered.n_rows = squared.iter().filter(|&&v| v != 0).count();
    gathered.n_recomputed = squared.iter().filter(|&&v| v & 2 != 0).count();
    Ok(gathered)
}
