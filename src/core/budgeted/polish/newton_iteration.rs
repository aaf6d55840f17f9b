//! The Newton system's iteration: the rows whose piece changed update each output's sums
//! (`gram_pass`), and the factorised system gives the direction.

use std::ops::Range;

use crate::core::budgeted::conjugate_gradient;
use crate::core::budgeted::problem::Term;
use crate::core::common::error::Result;

use super::newton::{newton_point, Staging};
use super::output::Output;
use super::segments::{segment_pass, Passes, SegmentValues};

/// The ridge over `RIDGE` once a Newton direction did not descend: cod-rna at B = 500 from a
/// rescaled start stalled at 156,654 (the optimum 155,764) with `RIDGE` alone, and ends at
/// 155,764.42 with 1e-8; 1e-6 would bias the solution (155,788-155,796).
pub(super) const RIDGE_RAISED: f64 = 100.0;

/// A row whose active loss term differs from the one the Newton sums count.
#[derive(Debug, Clone, Copy)]
pub(super) struct Change {
    pub(super) row: usize,
    /// The term the sums count it with, and the one it has now.
    pub(super) counted: Term,
    pub(super) now: Term,
}

/// One output's changed rows of a segment, with their kernel values (row-major).
struct ChangedRows {
    changes: Vec<Change>,
    values: Vec<f64>,
}

/// Updates every live output's M, s, u, sw, swy by its changed rows (entering: +, leaving: -),
/// in row order.
pub(super) fn gram_pass(
    passes: &mut Passes<'_>,
    outputs: &mut [Output],
    changed: &[Vec<Change>],
    weight: &(dyn Fn(usize) -> f64 + Sync),
) -> Result<()> {
    let m = passes.blocks.n_basis();
    if m == 0 || changed.iter().all(|c| c.is_empty()) {
        return Ok(());
    }
    // Segments holding changed rows, found after the first pass laid them out.
    let segments = &passes.segments;
    let n_seg = segments.spans.len();
    let mut wanted = vec![false; n_seg];
    let seg_of = |i: usize, spans: &[Range<usize>]| spans.partition_point(|s| s.end <= i);
    for c in changed {
        for change in c {
            wanted[seg_of(change.row, &segments.spans)] = true;
        }
    }
    let mut is_changed = vec![false; segments.spans.last().map_or(0, |s| s.end)];
    for c in changed {
        for change in c {
            is_changed[change.row] = true;
        }
    }
    let needed = |i: usize| is_changed[i];
    // Per segment and output: the changed rows.
    let work = |_s: usize, span: Range<usize>, kv: SegmentValues<'_>| -> Vec<ChangedRows> {
        let mut wide = vec![0.0; m];
        changed
            .iter()
            .map(|rows| {
                let a = rows.partition_point(|c| c.row < span.start);
                let b = rows.partition_point(|c| c.row < span.end);
                let mut part = ChangedRows {
                    changes: rows[a..b].to_vec(),
                    values: Vec::with_capacity((b - a) * m),
                };
                for c in &rows[a..b] {
                    let t = c.row - span.start;
                    part.values.extend_from_slice(kv.row(t, m, &mut wide));
                }
                part
            })
            .collect()
    };
    let mut staged: Vec<Staging> = (0..outputs.len()).map(|_| Staging::default()).collect();
    // The parallel part computes kernel rows; the sums are taken here, segment by segment in
    // row order, as each wave's results arrive: holding every changed row's kernel values
    // until the pass ended took (changed rows) x m x 8 bytes, all active rows in the first
    // iteration (1,000,000 rows at B = 10,000: tens of GB).
    segment_pass(
        passes,
        Some(&wanted),
        Some(&needed),
        &work,
        &mut |_s, per_output| {
            for (k, part) in per_output.into_iter().enumerate() {
                let o = &mut outputs[k];
                for (t, c) in part.changes.iter().enumerate() {
                    let row = &part.values[t * m..(t + 1) * m];
                    let w = weight(c.row);
                    // The counted term leaves and the new one enters.
                    o.sums.add_term(-w, c.counted, row, &mut staged[k]);
                    o.sums.add_term(w, c.now, row, &mut staged[k]);
                    o.counted[c.row] = c.now;
                }
            }
            Ok(())
        },
    )?;
    for (k, st) in staged.iter_mut().enumerate() {
        st.flush(&mut outputs[k].sums.gram, m);
    }
    Ok(())
}

/// The minimiser of the quadratic model on the current active set, as a direction from the
/// current point (d, db).
pub(super) fn newton_direction(
    kss: &[f64],
    o: &mut Output,
    c: f64,
    m: usize,
    check: conjugate_gradient::Check<'_>,
) -> Result<()> {
    let x = newton_point(kss, &o.sums, c, m, o.b, o.ridge_scale, check)?;
    for ((d, xj), bj) in o.d.iter_mut().zip(&x).zip(&o.beta) {
        *d = xj - bj;
    }
    o.db = x[m] - o.b;
    Ok(())
}
