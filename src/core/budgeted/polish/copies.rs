//! The squared rows' copies of their kernel values (halves or f32) that the Hessian products
//! read, and where each output's squared rows are among them.

use crate::core::simd::F16;

use super::segments::SegmentValues;

/// Where a squared row's kernel values are: row `row` of copy `part`.
#[derive(Debug, Clone, Copy)]
pub(super) struct SquaredRow {
    pub(super) part: usize,
    pub(super) row: usize,
}

/// A squared row of an output: its copy, its row among the data's, its weight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Member {
    pub(super) at: SquaredRow,
    pub(super) row: usize,
    pub(super) weight: f64,
}

/// The squared rows' copies, one per squared row (also where its segment is cached in f32).
///
/// The Hessian products are bound by reading these rows (tens of products per pass over the
/// rows), so they start in halves: half the bytes. They only shape the direction: the gradient,
/// the objective and the line search read the f32 values, so the solve still stops at the
/// problem's optimum; but on an ill-conditioned problem the halves' Hessian slows Newton to a
/// linear rate near 1, so a stall (`STALL_SHARE`) switches to f32. (bf16, 8 significant bits,
/// took an iteration more on the generator too.)
pub(super) enum RowCopies {
    Half(Vec<Vec<F16>>),
    Single(Vec<Vec<f32>>),
}

/// One output's squared rows as (kernel values, weight), as stored.
pub(super) enum SquaredRows<'a> {
    Half(Vec<(&'a [F16], f64)>),
    Single(Vec<(&'a [f32], f64)>),
}

impl RowCopies {
    pub(super) fn empty(half: bool) -> Self {
        if half {
            RowCopies::Half(Vec::new())
        } else {
            RowCopies::Single(Vec::new())
        }
    }

    pub(super) fn bytes(&self) -> usize {
        match self {
            RowCopies::Half(c) => c.iter().map(|c| c.len() * 2).sum(),
            RowCopies::Single(c) => c.iter().map(|c| c.len() * 4).sum(),
        }
    }

    pub(super) fn parts(&self) -> usize {
        match self {
            RowCopies::Half(c) => c.len(),
            RowCopies::Single(c) => c.len(),
        }
    }

    /// Appends row t of `kv` to a part of its own (made on the first row, sized for
    /// `capacity` values); the row's index in it.
    pub(super) fn push_row(
        &mut self,
        kv: SegmentValues<'_>,
        t: usize,
        m: usize,
        capacity: usize,
    ) -> usize {
        fn last<T>(parts: &mut Vec<Vec<T>>, capacity: usize) -> &mut Vec<T> {
            if parts.is_empty() {
                parts.push(Vec::with_capacity(capacity));
            }
            parts.last_mut().expect("made above")
        }
        match self {
            RowCopies::Half(c) => {
                let part = last(c, capacity);
                kv.extend_f16(t, m, part);
                part.len() / m - 1
            }
            RowCopies::Single(c) => {
                let part = last(c, capacity);
                kv.extend_f32(t, m, part);
                part.len() / m - 1
            }
        }
    }

    /// Rows in part `part`.
    pub(super) fn rows_in(&self, part: usize, m: usize) -> usize {
        match self {
            RowCopies::Half(c) => c.get(part).map_or(0, |p| p.len() / m.max(1)),
            RowCopies::Single(c) => c.get(part).map_or(0, |p| p.len() / m.max(1)),
        }
    }

    /// Overwrites the row at `slot` with row `row` of `from`'s first part (the same precision).
    pub(super) fn copy_row(&mut self, slot: SquaredRow, from: &RowCopies, row: usize, m: usize) {
        let (a, b) = (slot.row * m..(slot.row + 1) * m, row * m..(row + 1) * m);
        match (self, from) {
            (RowCopies::Half(to), RowCopies::Half(from)) => {
                to[slot.part][a].copy_from_slice(&from[0][b])
            }
            (RowCopies::Single(to), RowCopies::Single(from)) => {
                to[slot.part][a].copy_from_slice(&from[0][b])
            }
            _ => unreachable!("one pass gathers in one precision"),
        }
    }

    /// Appends row `row` of `from`'s first part to this one's only part; its index there.
    pub(super) fn copy_row_to_end(&mut self, from: &RowCopies, row: usize, m: usize) -> usize {
        fn extend<T: Copy>(to: &mut Vec<Vec<T>>, from: &[T]) -> usize {
            if to.is_empty() {
                to.push(Vec::new());
            }
            to[0].extend_from_slice(from);
            to[0].len() / from.len().max(1) - 1
        }
        let b = row * m..(row + 1) * m;
        match (self, from) {
            (RowCopies::Half(to), RowCopies::Half(from)) => extend(to, &from[0][b]),
            (RowCopies::Single(to), RowCopies::Single(from)) => extend(to, &from[0][b]),
            _ => unreachable!("one pass gathers in one precision"),
        }
    }

    /// Moves `other`'s parts after these (the same precision).
    pub(super) fn append(&mut self, other: &mut RowCopies) {
        match (self, other) {
            (RowCopies::Half(a), RowCopies::Half(b)) => a.append(b),
            (RowCopies::Single(a), RowCopies::Single(b)) => a.append(b),
            _ => unreachable!("one pass gathers in one precision"),
        }
    }
}
