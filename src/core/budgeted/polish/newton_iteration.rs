//! The Newton system's solve (`PolishMethod::Newton`, and `Auto` below `hessian_free_basis`
//! support vectors or once the Hessian-free solve stalls): its first pass, and each
//! iteration: the rows whose piece changed update each output's sums (`gram_pass`), the
//! factorised system gives the direction, one product K d over the rows the exact line search.

use std::ops::Range;
use std::time::Instant;

use crate::core::budgeted::conjugate_gradient;
use crate::core::budgeted::problem::Term;
use crate::core::common::error::Result;

use super::newton::{newton_point, Staging};
use super::objective::scale_start;
use super::output::Output;
use super::segments::{matvec_pass, segment_pass, Passes, SegmentValues};
use super::state::Solve;

/// The ridge over `RIDGE` once a Newton direction did not descend: cod-rna at B = 500 from a
/// rescaled start stalled at 156,654 (the optimum 155,764) with `RIDGE` alone, and ends at
/// 155,764.42 with 1e-8; 1e-6 would bias the solution (155,788-155,796).
const RIDGE_RAISED: f64 = 100.0;
/// A line-search step below this share of the Newton step cannot end the solve
/// (`Solve::newton_steps`).
const SHORT_STEP: f64 = 0.5;

/// A row whose active loss term differs from the one the Newton sums count.
#[derive(Debug, Clone, Copy)]
struct Change {
    row: usize,
    /// The term the sums count it with, and the one it has now.
    counted: Term,
    now: Term,
}

/// One output's changed rows of a segment, with their kernel values (row-major).
struct ChangedRows {
    changes: Vec<Change>,
    values: Vec<f64>,
}

/// Updates every live output's M, s, u, sw, swy by its changed rows (entering: +, leaving: -),
/// in row order.
fn gram_pass(
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
fn newton_direction(
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

impl Solve<'_> {
    /// The Newton system's first pass: f = K beta + b at the warm start (the pass also lays out
    /// the segments), then the start's best multiple.
    pub(super) fn newton_start(&mut self) -> Result<()> {
        let starts: Vec<&[f64]> = self.outputs.iter().map(|o| &o.beta[..]).collect();
        let values = matvec_pass(&mut self.passes, &starts)?;
        let fixed = &self.fixed;
        for (k, o) in self.outputs.iter_mut().enumerate() {
            let b = o.b;
            o.f.iter_mut().zip(&values[k]).for_each(|(f, v)| *f = v + b);
            let term = |i: usize, f: f64| fixed.targets.term(k, i, f);
            scale_start(&fixed.kss, o, fixed.c, &term, &|i| fixed.weight(i), 0.0);
            o.objective = fixed.objective_of(k, o);
        }
        Ok(())
    }

    /// One iteration of the Newton system: the sums updated by the rows that changed piece,
    /// each live output's direction from the factorised system, then the steps. False when no
    /// output is left to move (a full step that changed no row's piece reached the
    /// minimiser).
    pub(super) fn newton_iteration(&mut self) -> Result<bool> {
        let changed = self.changed_rows();
        for (k, o) in self.outputs.iter_mut().enumerate() {
            if o.done {
                continue;
            }
            // A full step that changed nothing reached the minimiser of the quadratic.
            if changed[k].is_empty() && o.full_step {
                o.done = true;
                continue;
            }
            self.result.active_changes += changed[k].len() as u64;
        }
        let t_gram = Instant::now();
        let fixed = &self.fixed;
        gram_pass(&mut self.passes, &mut self.outputs, &changed, &|i| {
            fixed.weight(i)
        })?;
        self.result.gram_seconds += t_gram.elapsed().as_secs_f64();
        let live: Vec<usize> = (0..fixed.n_out)
            .filter(|&k| !self.outputs[k].done)
            .collect();
        if live.is_empty() {
            return Ok(false);
        }
        self.result.iterations += 1;
        let t_solve = Instant::now();
        for &k in &live {
            let passes = &mut self.passes;
            let mut check = || (passes.monitor)(&passes.progress);
            newton_direction(
                &fixed.kss,
                &mut self.outputs[k],
                fixed.c,
                fixed.m,
                &mut check,
            )?;
        }
        self.result.solve_seconds += t_solve.elapsed().as_secs_f64();
        self.newton_steps(&live)?;
        self.report()?;
        Ok(true)
    }

    /// Per output, the rows whose active term differs from what M counts.
    fn changed_rows(&self) -> Vec<Vec<Change>> {
        let Self { fixed, outputs, .. } = self;
        outputs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                if o.done {
                    return Vec::new();
                }
                (0..fixed.n)
                    .filter_map(|i| {
                        let now = fixed.targets.term(k, i, o.f[i]);
                        (now != o.counted[i]).then_some(Change {
                            row: i,
                            counted: o.counted[i],
                            now,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// The live outputs' steps along their directions: K d in one pass over the rows, then the
    /// exact line search; a direction that does not descend is solved again with a larger
    /// ridge (`RIDGE_RAISED`).
    fn newton_steps(&mut self, live: &[usize]) -> Result<()> {
        let dirs: Vec<&[f64]> = live.iter().map(|&k| &self.outputs[k].d[..]).collect();
        let values = matvec_pass(&mut self.passes, &dirs)?;
        let fixed = &self.fixed;
        for (&k, v) in live.iter().zip(values) {
            let o = &mut self.outputs[k];
            let db = o.db;
            o.delta.iter_mut().zip(&v).for_each(|(d, x)| *d = x + db);
            let t = fixed.line_search_of(k, o, true);
            if t == 0.0 && o.ridge_scale < RIDGE_RAISED {
                // No descent along the direction: the system's gradient (M beta, M accurate to
                // about 1e-12) is off along K_SS's near-null directions, which a ridge of
                // `RIDGE` lets the step follow. Solved again with a larger ridge, kept from
                // then on; not counted as the stop it would be at the optimum.
                o.ridge_scale = RIDGE_RAISED;
                o.full_step = false;
                continue;
            }
            // A short step's small decrease says the direction was poor, not that the point
            // is the optimum (cod-rna, B = 500, on a basis where rows given twice are one SV: a
            // step of a small share stopped the solve 0.34% above the optimum); the next
            // iteration's direction, from the new point, says more. No step at all (under the
            // raised ridge) ends it.
            let may_stop = t >= SHORT_STEP || t == 0.0;
            o.full_step = t == 1.0;
            fixed.advance(k, o, t, false, may_stop);
        }
        Ok(())
    }
}
