//! Kernel rows K(X, S) in segments: the unit of caching and of parallel work, the pass that
//! visits them (cached or computed) in row order, and the product K v over all rows.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;

use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::common::progress::{Monitor, Progress};
use crate::core::data::rows::{AnyRows, Rows, SubsetRows};
use crate::core::kernels::kernel_block::{BlockScratch, KernelBlocks};
use crate::core::simd::{self, F16};

use super::rows::RowSource;

/// Rows of a segment of K(X, S), the unit of caching and of parallel work, at most.
pub(super) const MAX_SEGMENT_ROWS: usize = 1024;
/// A segment's kernel values, at most (`segment_rows`).
const SEGMENT_BYTES: usize = 768 << 10;

/// Kernel rows of the segments: cached ones, and how to compute the others.
pub(super) struct Segments {
    /// First row and length of each segment, in visit order.
    pub(super) spans: Vec<Range<usize>>,
    /// Per segment: None (recomputed in every pass), or its values once the first pass
    /// filled them (empty until then).
    pub(super) cache: Vec<Option<Cached>>,
    /// Bytes the cache may still reserve.
    pub(super) cache_left: usize,
    /// `polish_cache_size`: what the cache and the squared rows' copies share.
    pub(super) budget: usize,
    /// Every kernel value rounded to f32, cached or computed (the Hessian-free solve: twice the
    /// rows in the same cache, and the same values whatever the cache holds).
    pub(super) single: bool,
    pub(super) kernel_seconds: f64,
}

impl Segments {
    /// Fits the cache (f32 values) and the copies the next gather will make (`copy_bytes` a
    /// value, one per squared row, cached or not) into the budget, from `squared` (per segment, the rows the
    /// gather will find squared: known from f before any kernel value): over it, cached
    /// segments are released from the last; under it, the first segments not cached are
    /// reserved (filled by the gather itself).
    pub(super) fn plan_budget(&mut self, squared: &[usize], m: usize, copy_bytes: usize) {
        let bytes = |s: &Range<usize>| s.len() * m * 4;
        let copied: usize = squared.iter().map(|&q| q * m * copy_bytes).sum();
        let mut held: usize = (self.cache.iter().zip(&self.spans))
            .filter(|(slot, _)| slot.is_some())
            .map(|(_, span)| bytes(span))
            .sum();
        for s in (0..self.spans.len()).rev() {
            if held + copied <= self.budget {
                break;
            }
            if self.cache[s].is_some() {
                self.cache[s] = None;
                held -= bytes(&self.spans[s]);
            }
        }
        let mut room = self.budget.saturating_sub(held + copied);
        for (slot, span) in self.cache.iter_mut().zip(&self.spans) {
            if slot.is_none() && m > 0 && bytes(span) <= room {
                room -= bytes(span);
                *slot = Some(Cached::F32(Vec::new()));
            }
        }
        self.cache_left = room;
    }

    /// Bytes the cache holds (f32 values), reserved segments counted.
    pub(super) fn held_bytes(&self, m: usize) -> usize {
        self.cache
            .iter()
            .zip(&self.spans)
            .filter(|(c, _)| c.is_some())
            .map(|(_, s)| s.len() * m * 4)
            .sum()
    }
}

/// A cached segment's kernel values.
pub(super) enum Cached {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

/// Rows per segment for m support vectors, values in f32 (`single`) or f64: as many as keep a
/// segment's values within `SEGMENT_BYTES`, the share of a core's L2 cache that a pass can
/// count on. A pass computes a segment's values and then reads them row by row (the values at
/// a point, the gradient, the squared rows' copies): held in L2 they are read from it; a
/// segment of 1,024 rows at B = 3,000 (12 MB) went to memory and back, a third of such a
/// pass's time on this project's 2-core machine.
pub(super) fn segment_rows(m: usize, single: bool) -> usize {
    let value_bytes = if single { 4 } else { 8 };
    (SEGMENT_BYTES / (value_bytes * m.max(1))).clamp(32, MAX_SEGMENT_ROWS)
}

/// Whether a pass needs row i's kernel values.
pub(super) type RowsNeeded<'a> = dyn Fn(usize) -> bool + Sync + 'a;

/// What a pass computes on a segment: (segment, its rows, their kernel values) -> result.
/// The last argument says whether the segment's values are in the cache (after this pass).
type SegmentWork<'a, T> = dyn Fn(usize, Range<usize>, SegmentValues<'_>) -> T + Sync + 'a;

/// A segment's kernel values (row-major, m a row) as a pass reads them: f64, or f32 where
/// every value is rounded to f32 (`Segments::single`), read as stored instead of widened
/// into a copy of the segment first. When a pass computed only the rows it needs, they are
/// packed and `at` gives each segment row's place among them (rows not computed are never
/// read).
#[derive(Clone, Copy)]
pub(super) struct SegmentValues<'a> {
    values: Values<'a>,
    at: Option<&'a [usize]>,
}

#[derive(Clone, Copy)]
pub(super) enum Values<'a> {
    F64(&'a [f64]),
    F32(&'a [f32]),
}

impl<'a> SegmentValues<'a> {
    fn all(values: Values<'a>) -> Self {
        SegmentValues { values, at: None }
    }

    /// Where segment row t's values start.
    fn start(self, t: usize, m: usize) -> usize {
        self.at.map_or(t, |at| at[t]) * m
    }

    /// Row t, widened into `buf` (m long) when stored as f32.
    pub(super) fn row<'b>(self, t: usize, m: usize, buf: &'b mut [f64]) -> &'b [f64]
    where
        'a: 'b,
    {
        let a = self.start(t, m);
        match self.values {
            Values::F64(v) => &v[a..a + m],
            Values::F32(v) => {
                for (b, &x) in buf.iter_mut().zip(&v[a..a + m]) {
                    *b = f64::from(x);
                }
                &buf[..m]
            }
        }
    }

    /// Row t's dot product with `v`, read as stored.
    pub(super) fn dot(self, t: usize, m: usize, v: &[f64]) -> f64 {
        let a = self.start(t, m);
        match self.values {
            Values::F64(x) => simd::dot(&x[a..a + m], v),
            Values::F32(x) => simd::dot_narrow(&x[a..a + m], v),
        }
    }

    /// y += alpha row t, read as stored.
    pub(super) fn axpy(self, t: usize, m: usize, alpha: f64, y: &mut [f64]) {
        let a = self.start(t, m);
        match self.values {
            Values::F64(x) => simd::axpy(alpha, &x[a..a + m], y),
            Values::F32(x) => simd::axpy_narrow(alpha, &x[a..a + m], y),
        }
    }

    /// Appends row t to `out` in f32.
    pub(super) fn extend_f32(self, t: usize, m: usize, out: &mut Vec<f32>) {
        let a = self.start(t, m);
        match self.values {
            Values::F64(v) => out.extend(v[a..a + m].iter().map(|&x| x as f32)),
            Values::F32(v) => out.extend_from_slice(&v[a..a + m]),
        }
    }

    /// Appends row t to `out` in halves (through f32 when stored in f64).
    pub(super) fn extend_f16(self, t: usize, m: usize, out: &mut Vec<F16>) {
        let a = self.start(t, m);
        match self.values {
            Values::F64(v) => out.extend(v[a..a + m].iter().map(|&x| F16::from_f32(x as f32))),
            Values::F32(v) => simd::extend_f16(&v[a..a + m], out),
        }
    }
}

/// What every pass over the rows works with: the basis's kernel blocks, the rows, their
/// segments (and what the cache holds), the passes made so far, and the monitor (Ctrl-C
/// between waves) with the progress it is shown.
pub(super) struct Passes<'a> {
    pub(super) blocks: &'a KernelBlocks,
    pub(super) source: &'a mut dyn RowSource,
    pub(super) segments: Segments,
    pub(super) count: usize,
    pub(super) monitor: Monitor<'a>,
    pub(super) progress: Progress,
}

/// Visits the segments wanted (all with `None`) in parallel, block by block of the source:
/// `work(segment, rows, kernel_values)` on each, then `collect` on the results in segment
/// order. Kernel values come from the cache or are computed (and cached on the first pass
/// while the cache has room); with `needed`, a segment computed (not cached) gets the values
/// of the rows it names only, the others' left 0 (`work` must not read them).
pub(super) fn segment_pass<T: Send>(
    passes: &mut Passes<'_>,
    wanted: Option<&[bool]>,
    needed: Option<&RowsNeeded<'_>>,
    work: &SegmentWork<'_, T>,
    collect: &mut dyn FnMut(usize, T) -> Result<()>,
) -> Result<()> {
    let Passes {
        blocks,
        source,
        segments,
        count,
        monitor,
        progress,
    } = passes;
    let blocks: &KernelBlocks = blocks;
    *count += 1;
    let m = blocks.n_basis();
    let first_pass = segments.spans.is_empty();
    let segment = segment_rows(m, segments.single);
    // Every segment the pass wants is in the cache (after the first pass): the source is not
    // read at all (a file is not parsed again), the segments visited in the same order.
    let from_cache = !first_pass
        && (0..segments.spans.len())
            .filter(|&s| wanted.is_none_or(|w| w[s]))
            .all(|s| match &segments.cache[s] {
                Some(Cached::F64(kv)) => !kv.is_empty(),
                Some(Cached::F32(kv)) => !kv.is_empty(),
                None => false,
            });
    let n_segments = segments.spans.len();
    let mut next_segment = 0;
    // The segments `ids` of a block of `len` rows starting at row `first` (the rows None: all
    // the pass wants are cached).
    let mut run = |ids: Vec<usize>,
                   first: usize,
                   len: usize,
                   rows: Option<&AnyRows<'_>>|
     -> Result<()> {
        if first_pass {
            for s in 0..ids.len() {
                let a = first + s * segment;
                segments.spans.push(a..(a + segment).min(first + len));
                let value_bytes = if segments.single { 4 } else { 8 };
                let bytes = segments.spans.last().map_or(0, |r| r.len()) * m * value_bytes;
                if bytes <= segments.cache_left && m > 0 {
                    segments.cache_left -= bytes;
                    segments.cache.push(Some(Cached::F64(Vec::new())));
                } else {
                    segments.cache.push(None);
                }
            }
        }
        let todo: Vec<usize> = ids
            .into_iter()
            .filter(|&s| wanted.is_none_or(|w| w[s]))
            .collect();
        // Waves of a few largest segments' rows per thread bound the memory of results held
        // at once.
        let wave = 4 * rayon::current_num_threads().max(1) * (MAX_SEGMENT_ROWS / segment).max(1);
        for group in todo.chunks(wave) {
            // Ctrl-C between waves of a long pass.
            monitor(progress)?;
            let spans = &segments.spans;
            let cache = &segments.cache;
            let single = segments.single;
            let results: Vec<(T, Option<Cached>, f64)> = parallel::install(|| {
                group
                    .par_iter()
                    // Per thread: the block scratch, and the values of a segment that is
                    // not kept (computed, and rounded to f32 when single), reused across
                    // segments and passes.
                    .map_init(
                        || (BlockScratch::default(), Vec::new(), Vec::new(), Vec::new()),
                        |(scratch, values, values32, at), &s| {
                            let span = spans[s].clone();
                            let local = span.start - first..span.end - first;
                            let slot = match &cache[s] {
                                Some(Cached::F64(kv)) if !kv.is_empty() => {
                                    let kv = SegmentValues::all(Values::F64(kv));
                                    let r = work(s, span, kv);
                                    return (r, None, 0.0);
                                }
                                Some(Cached::F32(kv)) if !kv.is_empty() => {
                                    let kv = SegmentValues::all(Values::F32(kv));
                                    let r = work(s, span, kv);
                                    return (r, None, 0.0);
                                }
                                slot => slot,
                            };
                            // (A pass from the cache wants cached segments only.)
                            let rows = rows.expect("the rows of a segment not cached");
                            let t0 = Instant::now();
                            let some: Option<Vec<usize>> = needed
                                .filter(|_| slot.is_none())
                                .map(|f| local.clone().filter(|&i| f(first + i)).collect());
                            // Only the rows the pass needs, packed (no values computed, zeroed
                            // or moved for the others), or all of them; in f32 straight from the
                            // dots when single (a kept segment's own vector, else a buffer that
                            // only grows), in f64 otherwise.
                            let keep = slot.is_some();
                            let index: Option<Vec<usize>> =
                                some.filter(|index| index.len() < local.len());
                            let count = index.as_ref().map_or(local.len(), |i| i.len());
                            let norms: Vec<f64> = match &index {
                                Some(index) => index.iter().map(|&i| rows.sq_norm(i)).collect(),
                                None => local.clone().map(|i| rows.sq_norm(i)).collect(),
                            };
                            if let Some(index) = &index {
                                at.clear();
                                at.resize(local.len(), usize::MAX);
                                for (p, &i) in index.iter().enumerate() {
                                    at[i - local.start] = p;
                                }
                            }
                            let subset = index.as_ref().map(|index| {
                                SubsetRows::new(rows, index).expect("block-local rows")
                            });
                            let mut kept_f32 = Vec::new();
                            if single {
                                let out: &mut [f32] = if keep {
                                    kept_f32 = vec![0.0; count * m];
                                    &mut kept_f32
                                } else {
                                    if values32.len() < count * m {
                                        values32.resize(count * m, 0.0);
                                    }
                                    &mut values32[..count * m]
                                };
                                match &subset {
                                    Some(subset) => {
                                        blocks.fill_rows_f32(subset, 0..count, &norms, out, scratch)
                                    }
                                    None => blocks.fill_rows_f32(rows, local, &norms, out, scratch),
                                }
                            } else {
                                values.resize(count * m, 0.0);
                                let out = &mut values[..count * m];
                                match &subset {
                                    Some(subset) => {
                                        blocks.fill_rows(subset, 0..count, &norms, out, scratch)
                                    }
                                    None => blocks.fill_rows(rows, local, &norms, out, scratch),
                                }
                            }
                            let packed = index.is_some();
                            let kept = if !keep {
                                None
                            } else if single {
                                Some(Cached::F32(kept_f32))
                            } else {
                                Some(Cached::F64(std::mem::take(values)))
                            };
                            let secs = t0.elapsed().as_secs_f64();
                            let kv = SegmentValues {
                                values: match &kept {
                                    Some(Cached::F32(kv)) => Values::F32(kv),
                                    Some(Cached::F64(kv)) => Values::F64(kv),
                                    None if single => Values::F32(&values32[..count * m]),
                                    None => Values::F64(values),
                                },
                                at: packed.then_some(&at[..]),
                            };
                            let r = work(s, span, kv);
                            (r, kept, secs)
                        },
                    )
                    .collect()
            });
            for (&s, (r, kv, secs)) in group.iter().zip(results) {
                segments.kernel_seconds += secs;
                if let Some(kv) = kv {
                    segments.cache[s] = Some(kv);
                }
                collect(s, r)?;
            }
        }
        Ok(())
    };
    if from_cache {
        run((0..n_segments).collect(), 0, 0, None)?;
    } else {
        source.pass(&mut |first: usize, rows: &AnyRows<'_>| -> Result<()> {
            let len = rows.n_rows();
            // This block's segments.
            let ids: Vec<usize> = (0..len.div_ceil(segment))
                .map(|s| next_segment + s)
                .collect();
            next_segment += ids.len();
            run(ids, first, len, Some(rows))
        })?;
    }
    if first_pass {
        let rows: usize = segments.spans.iter().map(|s| s.len()).sum();
        if rows != source.n_rows() {
            return Err(SvmError::invalid_input(
                "the row source gave a different number of rows than it declared",
            ));
        }
    }
    Ok(())
}

/// K v for each of the vectors `v` (one per listed output): one n-vector per output.
pub(super) fn matvec_pass(passes: &mut Passes<'_>, v: &[&[f64]]) -> Result<Vec<Vec<f64>>> {
    let n = passes.source.n_rows();
    let m = passes.blocks.n_basis();
    let q = v.len();
    // Vector-major m x q, for one weighted sum per row.
    let mut coef = vec![0.0; m * q];
    for (k, vk) in v.iter().enumerate() {
        for j in 0..m {
            coef[j * q + k] = vk[j];
        }
    }
    let mut out = vec![vec![0.0; n]; q];
    if m == 0 {
        return Ok(out);
    }
    let level = simd::level();
    let work = |_s: usize, span: Range<usize>, kv: SegmentValues<'_>| -> Vec<f64> {
        let mut r = vec![0.0; span.len() * q];
        let mut wide = vec![0.0; m];
        for (t, o) in r.chunks_mut(q).enumerate() {
            simd::weighted_row_sum(level, &coef, q, kv.row(t, m, &mut wide), o);
        }
        r
    };
    let mut results: Vec<(usize, Vec<f64>)> = Vec::new();
    segment_pass(passes, None, None, &work, &mut |s, r| {
        results.push((s, r));
        Ok(())
    })?;
    for (s, r) in results {
        let span = passes.segments.spans[s].clone();
        for (t, i) in span.enumerate() {
            for k in 0..q {
                out[k][i] = r[t * q + k];
            }
        }
    }
    Ok(out)
}
