//! Kernel rows by position, computed in parallel batches into rows of the caller's element type
//! (`simd::RowValue`: values from the dots in f64, rounded once): [`RowComputer`] (the data, the
//! kernel, the squared norms, the positions that shrinking moves, and the path the dot products
//! take: a feature-major copy, bit sets of 0/1 rows, sparse columns, row-wise dots, a
//! precomputed Gram matrix, or a one-vs-one pair's [`PairSegments`] of the store shared by all
//! pairs). The LRU cache (`kernel_cache`) and the shared store (`shared_rows`) both compute
//! through it; it knows neither. Uses `common`, `simd`, `data` and the kernel functions.

use std::sync::Arc;

use rayon::prelude::*;

use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::data::rows::Rows;
use crate::core::kernels::kernel::Kernel;
use crate::core::simd;
use crate::core::simd::RowValue;

pub(crate) const NONE: u32 = u32::MAX;
/// Columns per parallel work item (and per stack buffer of dot products).
pub(crate) const BLOCK: usize = 1024;
/// Above this many columns, sparse rows are multiplied by sorted-index merging instead of
/// being densified.
pub const DENSIFY_MAX_COLS: usize = 1 << 16;
/// Data (dense or CSR) with at most this many columns get a feature-major copy (at most 128 x 8
/// bytes per row, `TRANSPOSE_MAX_BYTES` in all) for vectorised dot products.
pub const TRANSPOSE_MAX_COLS: usize = 128;
/// The largest feature-major copy made (larger data use the row-wise dot products).
pub const TRANSPOSE_MAX_BYTES: usize = 512 << 20;

/// Entries `from..from + out.len()` of the kernel row at position `pos`.
pub(crate) struct RowJob<'o, T> {
    pub pos: usize,
    pub from: usize,
    pub out: &'o mut [T],
}

/// Scratch buffers of a computation (kept by their owner between calls).
#[derive(Default)]
pub(crate) struct Scratch {
    /// Densified rows of a batch (job * width).
    pub(crate) dense: Vec<f64>,
    /// Column scatter: one buffer per part of a row's non-zeros.
    pub(crate) scatter: Vec<f64>,
}

/// Where a cache's kernel values come from.
pub(crate) enum DotPath<'a, T: RowValue> {
    /// A feature-major copy of the data: a block of dot products is one vectorised axpy per
    /// non-zero of x_i.
    FeatureMajor(FeatureMajor),
    /// Sparse data by column: a scatter per non-zero of x_i over the rows sharing its column.
    Columns(SparseColumns),
    /// 0/1 features as bit sets by position: a dot product is the popcount of an AND.
    Bits(BitRows),
    /// Row-wise dots: dense SIMD dots or CSR gathers against the densified x_i, sorted-index
    /// merges for data wider than `DENSIFY_MAX_COLS`.
    RowWise,
    /// A precomputed kernel: the rows of `x` are rows of the Gram matrix, each kernel value one
    /// lookup (column `Rows::source_row` of the other position's row).
    Gram,
    /// One pair of a one-vs-one fit: rows come from the fit's store shared by all pairs while
    /// the positions are in order; once shrinking has moved them, a row's entries are scattered
    /// over both classes and few, and are computed by the pair's own path, `shrunk`.
    Shared {
        segments: PairSegments<'a, T>,
        shrunk: Box<DotPath<'a, T>>,
    },
    /// Rows gathered from a store of kernel rows by data row ([`SourceRows`]: a callable
    /// kernel's, a one-vs-one pair's rows and SVR's two variables of a row reading the same
    /// stored row); `source_at[p]`, the store's row behind position p, moves with the
    /// positions.
    Sources {
        store: &'a dyn SourceRows<T>,
        source_at: Vec<u32>,
    },
}

/// Kernel values by position for the rows of one matrix: the data, the kernel width, the
/// squared norms and the rows behind the positions (which move under shrinking), and the path
/// the dot products take. Shared read-only by the threads of a batch.
pub(crate) struct RowComputer<'a, R: Rows, T: RowValue> {
    pub(crate) x: &'a R,
    pub(crate) kernel: Kernel,
    pub(crate) n: usize,
    pub(crate) sq_norms: Vec<f64>,
    /// Per position: the row of `x` there, and its inverse.
    pub(crate) perm: Vec<u32>,
    pub(crate) pos_of: Vec<u32>,
    /// Per row of `x`: the other row with the same source row (`Rows::source_row`), or NONE;
    /// empty when no source row appears twice. SVR's two variables of a row are such twins:
    /// their kernel rows are equal up to the exchange of the twins' own two entries.
    pub(crate) twin: Vec<u32>,
    /// No positions swapped yet: position p holds row p.
    pub(crate) in_order: bool,
    pub(crate) path: DotPath<'a, T>,
}

impl<'a, R: Rows, T: RowValue> RowComputer<'a, R, T> {
    /// Positions start as the rows' own order. Fails for more rows than a u32 position holds.
    pub(crate) fn new(
        x: &'a R,
        kernel: Kernel,
        sq_norms: Vec<f64>,
        path: DotPath<'a, T>,
    ) -> Result<Self> {
        kernel.check()?;
        let n = x.n_rows();
        if sq_norms.len() != n {
            return Err(SvmError::invalid_input(
                "one squared norm per row is needed",
            ));
        }
        if n >= NONE as usize {
            return Err(SvmError::invalid_input(
                "too many rows for the kernel cache",
            ));
        }
        Ok(RowComputer {
            x,
            kernel,
            n,
            sq_norms,
            perm: (0..n as u32).collect(),
            pos_of: (0..n as u32).collect(),
            twin: twin_rows(x),
            in_order: true,
            path,
        })
    }

    /// Exchanges the positions of each pair (pairwise disjoint): rows, norms and the columns of
    /// a feature-major copy.
    pub(crate) fn swap_positions(&mut self, pairs: &[(usize, usize)]) {
        let n = self.n;
        self.in_order &= pairs.iter().all(|&(a, b)| a == b);
        for &(a, b) in pairs {
            self.perm.swap(a, b);
            self.pos_of[self.perm[a] as usize] = a as u32;
            self.pos_of[self.perm[b] as usize] = b as u32;
            self.sq_norms.swap(a, b);
        }
        fn swap_in_columns<T: Send>(t: &mut [T], n: usize, pairs: &[(usize, usize)]) {
            parallel::install(|| {
                t.par_chunks_mut(n).for_each(|col| {
                    for &(a, b) in pairs {
                        col.swap(a, b);
                    }
                })
            });
        }
        let path = match &mut self.path {
            DotPath::Shared { shrunk, .. } => &mut **shrunk,
            path => path,
        };
        match path {
            DotPath::FeatureMajor(FeatureMajor::F64(t)) => swap_in_columns(t, n, pairs),
            DotPath::FeatureMajor(FeatureMajor::F32(t)) => swap_in_columns(t, n, pairs),
            DotPath::Bits(bits) => bits.swap_positions(pairs),
            DotPath::Sources { source_at, .. } => {
                for &(a, b) in pairs {
                    source_at.swap(a, b);
                }
            }
            _ => {}
        }
    }

    /// The position of the twin of the row at position `pos` (same source row), if any.
    #[inline]
    pub(crate) fn twin_position(&self, pos: usize) -> Option<usize> {
        let t = *self.twin.get(self.perm[pos] as usize)?;
        (t != NONE).then(|| self.pos_of[t as usize] as usize)
    }

    /// The cheapest path for the data (`choose_dot_path`).
    pub(crate) fn for_data(x: &'a R, kernel: Kernel, sq_norms: Vec<f64>) -> Result<Self> {
        let path = if kernel == Kernel::Precomputed {
            let square = (0..x.n_rows()).all(|i| {
                x.dense_row(i)
                    .is_some_and(|row| x.source_row(i) < row.len())
            });
            if !square {
                return Err(SvmError::invalid_input(
                    "a precomputed kernel must be a dense square Gram matrix",
                ));
            }
            DotPath::Gram
        } else {
            choose_dot_path(x)
        };
        Self::new(x, kernel, sq_norms, path)
    }

    /// Fills the jobs, in parallel on the configured pool; returns the kernel values computed
    /// for them (for shared segments: those computed because this call asked).
    pub(crate) fn compute(&self, jobs: Vec<RowJob<'_, T>>, scratch: &mut Scratch) -> u64 {
        self.compute_by(&self.path, jobs, scratch)
    }

    /// The path's copy of the data when any block of a row can be computed from it alone
    /// (`source_block`; also for a shared-rows pair whose positions have moved, which computes
    /// its rows itself).
    pub(crate) fn block_source(&self) -> Option<BlockSource<'_>> {
        let path = match &self.path {
            DotPath::Shared { shrunk, .. } if !self.in_order => shrunk.as_ref(),
            path => path,
        };
        match path {
            DotPath::FeatureMajor(xt) => Some(BlockSource::FeatureMajor(xt)),
            DotPath::Bits(bits) => Some(BlockSource::Bits(bits)),
            _ => None,
        }
    }

    /// Kernel values of the row at position `i` (dense `xi`, read by the feature-major copy
    /// only) with the positions j0..j0 + out.len() (at most `BLOCK`): one axpy of the copy per
    /// non-zero of x_i, or the bit sets' popcounts.
    pub(crate) fn source_block(
        &self,
        source: &BlockSource<'_>,
        i: usize,
        xi: &[f64],
        j0: usize,
        out: &mut [T],
    ) {
        let (n, norms) = (self.n, &self.sq_norms[..]);
        let mut buf = [0.0f64; BLOCK];
        let buf = &mut buf[..out.len()];
        match source {
            BlockSource::FeatureMajor(xt) => {
                // On the stack for the data `transpose` copies (`TRANSPOSE_MAX_COLS` columns at
                // most; a copy made otherwise may be wider).
                let mut stack = [0usize; TRANSPOSE_MAX_COLS];
                let mut heap = Vec::new();
                let cols: &mut [usize] = if xi.len() <= TRANSPOSE_MAX_COLS {
                    &mut stack[..]
                } else {
                    heap.resize(xi.len(), 0);
                    &mut heap
                };
                let mut nnz = 0;
                for (c, &q) in xi.iter().enumerate() {
                    if q != 0.0 {
                        cols[nnz] = c;
                        nnz += 1;
                    }
                }
                xt.dots_one_row(xi, &cols[..nnz], j0, n, buf);
            }
            BlockSource::Bits(bits) => bits.dots(i, j0, buf),
        }
        kernel_values(
            self.kernel,
            (i, norms[i]),
            j0,
            &norms[j0..j0 + out.len()],
            buf,
            out,
        );
    }

    /// The row at position `pos` written densely into the scratch (n_cols values).
    pub(crate) fn dense_row<'s>(&self, pos: usize, scratch: &'s mut Scratch) -> &'s [f64] {
        let width = self.x.n_cols();
        if scratch.dense.len() < width {
            scratch.dense.resize(width, 0.0);
        }
        self.x
            .write_dense(self.perm[pos] as usize, &mut scratch.dense[..width]);
        &scratch.dense[..width]
    }

    pub(crate) fn compute_by(
        &self,
        path: &DotPath<'_, T>,
        mut jobs: Vec<RowJob<'_, T>>,
        scratch: &mut Scratch,
    ) -> u64 {
        if let DotPath::Shared { segments, shrunk } = path {
            return if self.in_order {
                segments.fill(&mut jobs, &self.perm)
            } else {
                self.compute_by(shrunk, jobs, scratch)
            };
        }
        if let DotPath::Sources { store, source_at } = path {
            return gather_from_sources(*store, source_at, &mut jobs, scratch);
        }
        let computed = jobs.iter().map(|j| j.out.len() as u64).sum();
        let width = self.x.n_cols();
        let (x, kernel, n) = (self.x, self.kernel, self.n);
        let norms = &self.sq_norms[..];
        let perm = &self.perm[..];
        let pos_of = &self.pos_of[..];
        let densify = match path {
            DotPath::FeatureMajor(_) => true,
            DotPath::RowWise => width <= DENSIFY_MAX_COLS,
            DotPath::Columns(_) | DotPath::Shared { .. } | DotPath::Sources { .. } => false,
            DotPath::Gram | DotPath::Bits(_) => false,
        };
        let b = jobs.len();
        if densify && scratch.dense.len() < b * width {
            scratch.dense.resize(b * width, 0.0);
        }
        let dense = &mut scratch.dense[..];
        let scatter = &mut scratch.scatter;
        parallel::install(|| {
            if densify && width > 0 {
                if let [job] = &jobs[..] {
                    x.write_dense(perm[job.pos] as usize, &mut dense[..width]);
                } else {
                    dense[..b * width]
                        .par_chunks_mut(width)
                        .zip(jobs.par_iter())
                        .for_each(|(out, job)| x.write_dense(perm[job.pos] as usize, out));
                }
            }
            let dense = &dense[..];
            match path {
                DotPath::Shared { .. } | DotPath::Sources { .. } => {
                    unreachable!("shared and stored rows are filled above")
                }
                DotPath::Gram => {
                    jobs.par_iter_mut().for_each(|job| {
                        let i = job.pos;
                        // Dense and square: checked when the computer was made.
                        let g = x.dense_row(perm[i] as usize).unwrap_or(&[]);
                        fill_in_blocks(kernel, norms, i, job.from, job.out, |j0, buf| {
                            for (t, v) in buf.iter_mut().enumerate() {
                                let col = x.source_row(perm[j0 + t] as usize);
                                *v = g.get(col).copied().unwrap_or(0.0);
                            }
                        });
                    });
                }
                DotPath::Bits(bits) => {
                    jobs.par_iter_mut().for_each(|job| {
                        let i = job.pos;
                        fill_in_blocks(kernel, norms, i, job.from, job.out, |j0, buf| {
                            bits.dots(i, j0, buf)
                        });
                    });
                }
                DotPath::Columns(columns) => {
                    // Row after row (most requests are one row): a row's non-zeros are split
                    // into SCATTER_PARTS parts scattered in parallel, each into a buffer of its
                    // own, and the parts are summed block by block in a fixed order, so the
                    // values do not depend on the number of threads.
                    let parts_n = SCATTER_PARTS;
                    for job in jobs.iter_mut() {
                        let (i, from, m) = (job.pos, job.from, job.out.len());
                        if m == 0 {
                            continue;
                        }
                        if scatter.len() < parts_n * m {
                            scatter.resize(parts_n * m, 0.0);
                        }
                        scatter
                            .par_chunks_mut(m)
                            .take(parts_n)
                            .enumerate()
                            .for_each(|(k, buf)| {
                                columns.dots_part(perm[i] as usize, k, parts_n, pos_of, from, buf)
                            });
                        let parts = &scatter[..parts_n * m];
                        fill_in_blocks(kernel, norms, i, from, job.out, |j0, buf| {
                            let (r0, len) = (j0 - from, buf.len());
                            for part in parts.chunks(m) {
                                for (s, &v) in buf.iter_mut().zip(&part[r0..r0 + len]) {
                                    *s += v;
                                }
                            }
                        });
                    }
                }
                DotPath::FeatureMajor(xt) => {
                    let source = BlockSource::FeatureMajor(xt);
                    let block = |i: usize, xi: &[f64], j0: usize, out: &mut [T]| {
                        self.source_block(&source, i, xi, j0, out)
                    };
                    if let [job] = &mut jobs[..] {
                        // One row (the common request): its blocks in parallel, nothing to share.
                        let (i, from) = (job.pos, job.from);
                        if job.out.len() <= BLOCK {
                            block(i, &dense[..width], from, job.out);
                            return computed;
                        }
                        job.out
                            .par_chunks_mut(BLOCK)
                            .enumerate()
                            .for_each(|(k, out)| block(i, &dense[..width], from + k * BLOCK, out));
                        return computed;
                    }
                    // Block-major: the batch's rows meet each block of columns of the
                    // feature-major copy in turn, so the block (width x 1024 values, 1 MB for
                    // a9a) is read from memory once per batch and then from cache, instead of
                    // once per row.
                    let blocks = jobs
                        .iter()
                        .map(|j| (j.from + j.out.len()).div_ceil(BLOCK))
                        .max()
                        .unwrap_or(0);
                    let mut per_block: Vec<Vec<(usize, usize, &mut [T])>> =
                        (0..blocks).map(|_| Vec::new()).collect();
                    let positions: Vec<usize> = jobs.iter().map(|j| j.pos).collect();
                    for (p, job) in jobs.iter_mut().enumerate() {
                        let mut j0 = job.from;
                        let end = job.from + job.out.len();
                        let mut rest = &mut job.out[..];
                        while !rest.is_empty() {
                            let take = ((j0 / BLOCK + 1) * BLOCK).min(end) - j0;
                            let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
                            per_block[j0 / BLOCK].push((p, j0, head));
                            rest = tail;
                            j0 += take;
                        }
                    }
                    per_block.into_par_iter().for_each(|mut items| {
                        // Rows in groups of eight over the same columns: register-blocked dots
                        // where the rows are dense enough, else one axpy per non-zero and row.
                        let mut q = Vec::new();
                        let mut cols = Vec::new();
                        let mut dots = Vec::new();
                        while !items.is_empty() {
                            let (j0, m) = (items[0].1, items[0].2.len());
                            let take = items
                                .iter()
                                .take(simd::BLOCK_ROWS)
                                .take_while(|it| it.1 == j0 && it.2.len() == m)
                                .count();
                            let group: Vec<_> = items.drain(..take).collect();
                            let row = |p: usize| &dense[p * width..(p + 1) * width];
                            let nnz: usize = group
                                .iter()
                                .map(|it| row(it.0).iter().filter(|&&v| v != 0.0).count())
                                .sum();
                            cols.clear();
                            cols.extend(
                                (0..width).filter(|&c| group.iter().any(|it| row(it.0)[c] != 0.0)),
                            );
                            if cols.len() * simd::BLOCK_ROWS > BLOCKED_FMA_RATIO * nnz {
                                for (p, j0, out) in group {
                                    block(positions[p], row(p), j0, out);
                                }
                                continue;
                            }
                            q.clear();
                            q.resize(simd::BLOCK_ROWS * width, 0.0);
                            for (g, it) in group.iter().enumerate() {
                                q[g * width..(g + 1) * width].copy_from_slice(row(it.0));
                            }
                            dots.resize(simd::BLOCK_ROWS * m, 0.0);
                            xt.dots_8_rows(&q, width, &cols, j0, n, &mut dots);
                            for (g, (p, j0, out)) in group.into_iter().enumerate() {
                                let i = positions[p];
                                let d = &mut dots[g * m..(g + 1) * m];
                                kernel_values(
                                    kernel,
                                    (i, norms[i]),
                                    j0,
                                    &norms[j0..j0 + m],
                                    d,
                                    out,
                                );
                            }
                        }
                    });
                }
                DotPath::RowWise => {
                    jobs.par_iter_mut().enumerate().for_each(|(p, job)| {
                        let i = job.pos;
                        let xi = if densify {
                            &dense[p * width..(p + 1) * width]
                        } else {
                            &[][..]
                        };
                        fill_in_blocks(kernel, norms, i, job.from, job.out, |j0, buf| {
                            if densify {
                                for (t, v) in buf.iter_mut().enumerate() {
                                    *v = x.dot_dense(perm[j0 + t] as usize, xi);
                                }
                            } else {
                                for (t, v) in buf.iter_mut().enumerate() {
                                    *v = x.dot_rows(perm[i] as usize, perm[j0 + t] as usize);
                                }
                            }
                        });
                    });
                }
            }
            computed
        })
    }
}

/// Each job's entries gathered from the stored rows of the data rows behind its position (the
/// missing ones computed first, in one batch); returns the values computed.
fn gather_from_sources<T: RowValue>(
    store: &dyn SourceRows<T>,
    source_at: &[u32],
    jobs: &mut [RowJob<'_, T>],
    scratch: &mut Scratch,
) -> u64 {
    let sources: Vec<u32> = jobs.iter().map(|j| source_at[j.pos]).collect();
    let (rows, computed) = store.rows(&sources, scratch);
    parallel::install(|| {
        jobs.par_iter_mut()
            .zip(rows.par_iter())
            .for_each(|(job, row)| {
                let from = job.from;
                job.out
                    .par_chunks_mut(BLOCK)
                    .enumerate()
                    .for_each(|(k, out)| {
                        let at = &source_at[from + k * BLOCK..from + k * BLOCK + out.len()];
                        let start = at.first().map_or(0, |&g| g as usize);
                        // Until shrinking moves them, the positions run over the data rows in
                        // order (twice): a block is then a copy.
                        if at.windows(2).all(|w| w[1] == w[0] + 1) {
                            out.copy_from_slice(&row[start..start + out.len()]);
                        } else {
                            for (o, &g) in out.iter_mut().zip(at) {
                                *o = row[g as usize];
                            }
                        }
                    })
            })
    });
    computed
}

/// Kernel rows by data row, for problems whose positions are data rows or map onto them (a
/// pair's subset, SVR's two variables of a row); `source_rows::SourceKernelRows` keeps them.
pub(crate) trait SourceRows<T>: Sync {
    /// The data rows (the length of a stored row).
    fn n_sources(&self) -> usize;
    /// The kernel rows of the data rows `sources`, k(x_g, x_h) for every data row h (stored,
    /// or computed now in one batch), in request order, and the kernel values computed.
    fn rows(&self, sources: &[u32], scratch: &mut Scratch) -> (Vec<Arc<[T]>>, u64);
}

/// Per row of `x`, its twin (the other row with the same source row), or empty when every
/// source row appears once. A source row appearing three or more times pairs up its first two.
fn twin_rows<R: Rows>(x: &R) -> Vec<u32> {
    let n = x.n_rows();
    let sources: Vec<usize> = (0..n).map(|i| x.source_row(i)).collect();
    if sources.iter().enumerate().all(|(i, &s)| s == i) {
        return Vec::new();
    }
    let Some(&max) = sources.iter().max() else {
        return Vec::new();
    };
    let mut first = vec![NONE; max + 1];
    let mut twin = vec![NONE; n];
    let mut any = false;
    for (i, &s) in sources.iter().enumerate() {
        let f = first[s];
        if f == NONE {
            first[s] = i as u32;
        } else if twin[f as usize] == NONE && f as usize != i {
            twin[f as usize] = i as u32;
            twin[i] = f;
            any = true;
        }
    }
    if any {
        twin
    } else {
        Vec::new()
    }
}

/// Kernel values of the row at position i with the positions from..from + out.len(), in
/// parallel blocks of at most `BLOCK`: `dots(j0, buf)` writes the dot products (the Gram
/// entries of a precomputed kernel) of the block from position j0 into the zeroed `buf`.
#[inline(always)]
fn fill_in_blocks<T: RowValue>(
    kernel: Kernel,
    norms: &[f64],
    i: usize,
    from: usize,
    out: &mut [T],
    dots: impl Fn(usize, &mut [f64]) + Sync,
) {
    out.par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(blk, out)| {
            let j0 = from + blk * BLOCK;
            let mut buf = [0.0f64; BLOCK];
            let buf = &mut buf[..out.len()];
            dots(j0, buf);
            let sq_j = &norms[j0..j0 + out.len()];
            kernel_values(kernel, (i, norms[i]), j0, sq_j, buf, out);
        });
}

/// Kernel values of the row at position i (squared norm sq_i) with the positions
/// j0..j0 + out.len() from their dot products, rounded once to the rows' type. The diagonal is
/// k(x_i, x_i) from the norm alone (exactly 1 for the Gaussian kernel), the value the solvers'
/// K_ii is.
#[inline]
fn kernel_values<T: RowValue>(
    kernel: Kernel,
    (i, sq_i): (usize, f64),
    j0: usize,
    sq_j: &[f64],
    dots: &mut [f64],
    out: &mut [T],
) {
    kernel.from_dots(sq_i, sq_j, dots);
    for (o, &v) in out.iter_mut().zip(dots.iter()) {
        *o = T::narrow(v);
    }
    if (j0..j0 + out.len()).contains(&i) {
        out[i - j0] = T::narrow(kernel.self_value(sq_i));
    }
}

/// A group of rows takes the register-blocked dots when they cost at most this many times the
/// multiply-adds of the per-row axpys (the blocked kernel also multiplies the zeros of columns
/// some other row of the group uses, but loads each lane once for 8 rows instead of loading and
/// storing the sums per column and row): dense ijcnn1-like rows, not a9a's 0/1 rows with 11%
/// non-zeros (`benches/kernel_block.rs`).
const BLOCKED_FMA_RATIO: usize = 3;

/// Parts a sparse row's column scatter is split into (threads per row; fixed, so that the sum
/// of the parts is the same arithmetic on any number of threads).
const SCATTER_PARTS: usize = 2;

/// Measured costs per operation (ns, AMD Zen 5 class, one thread; `docs/alfpgm.md`): a lane of
/// the feature-major axpy, an entry of a column scatter, a non-zero of a gathered CSR dot.
const NS_AXPY_LANE: f64 = 0.17;
const NS_SCATTER: f64 = 2.5;
const NS_GATHER: f64 = 1.3;

/// How a block of dot products is taken, chosen once per data set by its estimated cost per
/// kernel row: the feature-major copy (nnz_i x n axpy lanes; at most `TRANSPOSE_MAX_COLS`
/// columns), the column scatter of sparse data (sum over x_i's columns of their lengths, on
/// average sum_c len_c^2 / n), or else the row-wise dots (dense SIMD dots, or CSR gathers of
/// nnz(X)). Data wider than `DENSIFY_MAX_COLS` always scatter. A failed allocation of a copy
/// falls back to the row-wise dots (no abort).
pub(crate) fn choose_dot_path<'a, R: Rows, T: RowValue>(x: &R) -> DotPath<'a, T> {
    let (n, width) = (x.n_rows(), x.n_cols());
    if n == 0 || width == 0 {
        return DotPath::RowWise;
    }
    let dense = x.dense_row(0).is_some();
    if let Some(bits) = BitRows::build(x) {
        return DotPath::Bits(bits);
    }
    let fits = n
        .checked_mul(width)
        .is_some_and(|cells| cells <= TRANSPOSE_MAX_BYTES / 8);
    let can_transpose = width <= TRANSPOSE_MAX_COLS && fits;
    let copy_or_rows = || match can_transpose.then(|| transpose(x)).flatten() {
        Some(t) => DotPath::FeatureMajor(t),
        None => DotPath::RowWise,
    };
    if dense {
        return copy_or_rows();
    }
    if width <= DENSIFY_MAX_COLS {
        // The costs from the column lengths alone: the by-column copy (a hash map over the
        // non-zeros, 15 ms for a9a) is built only if it wins.
        let mut len = vec![0u64; width];
        for i in 0..n {
            x.for_each_nonzero(i, |c, _| {
                if let Some(l) = len.get_mut(c) {
                    *l += 1;
                }
            });
        }
        let nnz = len.iter().sum::<u64>() as f64;
        let mean_work = len.iter().map(|&l| (l as f64).powi(2)).sum::<f64>() / n as f64;
        let other = if can_transpose {
            NS_AXPY_LANE * nnz
        } else {
            NS_GATHER * nnz
        };
        if NS_SCATTER * mean_work >= other {
            return copy_or_rows();
        }
    }
    match SparseColumns::build(x) {
        Some(columns) => DotPath::Columns(columns),
        None => copy_or_rows(),
    }
}

/// A path's copy from which any block of a row is computed alone (`RowComputer::block_source`).
pub(crate) enum BlockSource<'p> {
    FeatureMajor(&'p FeatureMajor),
    Bits(&'p BitRows),
}

/// The widest rows held as bit sets (words of 64 columns). The popcount path reads `words`
/// words per kernel value where the feature-major copy reads one f32 per non-zero of x_i.
/// Measured (a `/tmp` timing test, one RBF row of 32,768 positions, this 2-core AMD EPYC): 123
/// columns, 14 non-zeros a row (a9a's shape) 45 us against the copy's 132; 256 columns with
/// 12 / 30 / 60 non-zeros 49 / 60 / 48 us against 149 / 310 / 360. Wider rows not measured.
const BIT_ROWS_MAX_WORDS: usize = 4;

/// Rows whose every stored value is 0 or 1 (a9a's binary features) as bit sets by
/// position, `words` u64 a row (column c: bit c % 64 of word c / 64): a dot product is the
/// popcount of an AND, the exact count the other paths sum to. 16 bytes a row for a9a's 123
/// columns, against 492 for the feature-major copy in f32. Rows of -1, 0 and 1 (categories
/// coded +-1, board cells, binary features scaled to [-1, 1]) are two such sets, the columns at
/// 1 then those at -1 (`signed`): the dot is the columns where the two rows agree in sign less
/// those where they differ, four popcounts a word. The 3-class stand-in of 54,000 x 42 cells
/// (`benchmarks/multiclass_exact.py`'s c4like): one word a half, 16 bytes a row where the
/// copy's 28 non-zeros read 112 from the last-level cache for each kernel value. A column of
/// three consecutive integers other than those (cells coded 0, 1, 2, as an ordinal encoding
/// gives them) is held shifted by its centre c to -1, 0, 1: with x = x' + c,
/// x_i.x_j = x'_i.x'_j + c.x'_i + c.x'_j + c.c, all exact integers, so the same dot products.
pub(crate) struct BitRows {
    /// Words a set: the row's columns in 64s.
    words: usize,
    signed: bool,
    bits: Vec<u64>,
    /// Per position c.x'_i (moving with the positions), and c.c; empty and 0 when no column is
    /// shifted.
    offset: Vec<f64>,
    centre_sq: f64,
}

/// The largest value a column of bit rows may hold: the shifted columns' sums of products stay
/// exact integers (well below 2^53 for `BIT_ROWS_MAX_WORDS` words of columns).
const BIT_ROWS_MAX_VALUE: f64 = (1u64 << 20) as f64;

impl BitRows {
    /// The bit rows of `x`, or None when a column's values (its implicit zeros included) are
    /// not integers within three consecutive ones, the sets of a row take more than
    /// `BIT_ROWS_MAX_WORDS` words, or the copy cannot be allocated.
    pub(crate) fn build<R: Rows>(x: &R) -> Option<Self> {
        let (n, width) = (x.n_rows(), x.n_cols());
        let words = width.div_ceil(64);
        if words == 0 || words > BIT_ROWS_MAX_WORDS {
            return None;
        }
        // Each column's range first (a pass over the non-zeros, no copy), so that the copy has
        // the sets it needs and each column its centre.
        let mut low = vec![f64::INFINITY; width];
        let mut high = vec![f64::NEG_INFINITY; width];
        let mut stored = vec![0usize; width];
        let mut integral = true;
        for i in 0..n {
            x.for_each_nonzero(i, |c, v| {
                if c >= width {
                    integral &= v == 0.0;
                    return;
                }
                // (NaN and infinities have no integral part.)
                integral &= v.fract() == 0.0 && v.abs() <= BIT_ROWS_MAX_VALUE;
                low[c] = low[c].min(v);
                high[c] = high[c].max(v);
                stored[c] += 1;
            });
            if !integral {
                return None;
            }
        }
        let mut centre = vec![0.0; width];
        for c in 0..width {
            if stored[c] < n {
                low[c] = low[c].min(0.0);
                high[c] = high[c].max(0.0);
            }
            if high[c] - low[c] > 2.0 {
                return None;
            }
            if low[c] < -1.0 || high[c] > 1.0 {
                centre[c] = low[c] + 1.0;
            }
        }
        let signed = (0..width).any(|c| low[c] - centre[c] < 0.0);
        let stride = if signed { 2 * words } else { words };
        if stride > BIT_ROWS_MAX_WORDS {
            return None;
        }
        let mut bits = Vec::new();
        bits.try_reserve_exact(n.checked_mul(stride)?).ok()?;
        bits.resize(n * stride, 0u64);
        // A row's implicit zeros are -c in a shifted column (a column of |c| > 1 has none).
        let mut zeros = vec![0u64; stride];
        for (c, &centre) in centre.iter().enumerate() {
            let bit = 1u64 << (c % 64);
            if centre == -1.0 {
                zeros[c / 64] |= bit;
            } else if centre == 1.0 {
                zeros[words + c / 64] |= bit;
            }
        }
        let shifted = centre.iter().any(|&c| c != 0.0);
        let centre_sq: f64 = centre.iter().map(|c| c * c).sum();
        let mut offset = Vec::new();
        if shifted {
            offset.try_reserve_exact(n).ok()?;
        }
        for (i, row) in bits.chunks_exact_mut(stride).enumerate() {
            row.copy_from_slice(&zeros);
            let mut centre_dot = 0.0;
            x.for_each_nonzero(i, |c, v| {
                if c >= width {
                    return;
                }
                let bit = 1u64 << (c % 64);
                row[c / 64] &= !bit;
                if signed {
                    row[words + c / 64] &= !bit;
                }
                match v - centre[c] {
                    1.0 => row[c / 64] |= bit,
                    -1.0 => row[words + c / 64] |= bit,
                    _ => {}
                }
                centre_dot += centre[c] * v;
            });
            if shifted {
                // c.x'_i = c.x_i - c.c
                offset.push(centre_dot - centre_sq);
            }
        }
        Some(BitRows {
            words,
            signed,
            bits,
            offset,
            centre_sq,
        })
    }

    /// Words a row.
    fn stride(&self) -> usize {
        if self.signed {
            2 * self.words
        } else {
            self.words
        }
    }

    /// Exchanges the rows of each pair of positions.
    fn swap_positions(&mut self, pairs: &[(usize, usize)]) {
        let w = self.stride();
        for &(a, b) in pairs {
            for k in 0..w {
                self.bits.swap(a * w + k, b * w + k);
            }
            if !self.offset.is_empty() {
                self.offset.swap(a, b);
            }
        }
    }

    /// The dot products of position i with the positions j0..j0 + out.len().
    fn dots(&self, i: usize, j0: usize, out: &mut [f64]) {
        let w = self.stride();
        let (a, rows) = (
            &self.bits[i * w..(i + 1) * w],
            &self.bits[j0 * w..(j0 + out.len()) * w],
        );
        if self.signed {
            simd::signed_and_popcounts(a, rows, out);
        } else {
            simd::and_popcounts(a, rows, out);
        }
        if !self.offset.is_empty() {
            let (own, others) = (self.offset[i], &self.offset[j0..j0 + out.len()]);
            for (o, &other) in out.iter_mut().zip(others) {
                *o += own + other + self.centre_sq;
            }
        }
    }
}

/// The feature-major copy: column c of all rows contiguous (n x width values), in f32 when
/// every value is an f32 exactly (0/1 features, small integers: half the memory traffic, the
/// same dot products), else in f64.
pub(crate) enum FeatureMajor {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

impl FeatureMajor {
    /// Dots of the dense row `q` (its non-zero columns `cols`) with the copy's positions
    /// j0..j0 + buf.len() (`simd::dots_one_row`: the same values as one axpy of the copy per non-zero).
    pub(crate) fn dots_one_row(
        &self,
        q: &[f64],
        cols: &[usize],
        j0: usize,
        n: usize,
        buf: &mut [f64],
    ) {
        let m = buf.len();
        match self {
            FeatureMajor::F64(t) => simd::dots_one_row(q, cols, &t[j0..], n, m, buf),
            FeatureMajor::F32(t) => simd::dots_one_row(q, cols, &t[j0..], n, m, buf),
        }
    }

    /// Dots of 8 dense rows `q` (8 x width) with the copy's positions j0..j0 + m, m =
    /// dots.len() / 8 (`simd::dots_8_rows`: the same values as `dots_one_row` row by row).
    pub(crate) fn dots_8_rows(
        &self,
        q: &[f64],
        width: usize,
        cols: &[usize],
        j0: usize,
        n: usize,
        dots: &mut [f64],
    ) {
        let m = dots.len() / simd::BLOCK_ROWS;
        match self {
            FeatureMajor::F64(t) => simd::dots_8_rows(q, width, cols, &t[j0..], n, m, dots),
            FeatureMajor::F32(t) => simd::dots_8_rows(q, width, cols, &t[j0..], n, m, dots),
        }
    }
}

/// The feature-major copy of `x`, or None when it cannot be allocated.
pub(crate) fn transpose<R: Rows>(x: &R) -> Option<FeatureMajor> {
    pub(crate) fn fill<R: Rows, T: Copy + Default>(
        x: &R,
        convert: impl Fn(f64) -> T,
    ) -> Option<Vec<T>> {
        let (n, width) = (x.n_rows(), x.n_cols());
        let mut t = Vec::new();
        t.try_reserve_exact(n * width).ok()?;
        t.resize(n * width, T::default());
        for i in 0..n {
            x.for_each_nonzero(i, |c, v| {
                if c < width {
                    t[c * n + i] = convert(v);
                }
            });
        }
        Some(t)
    }
    let mut exact = true;
    for i in 0..x.n_rows() {
        x.for_each_nonzero(i, |_, v| exact &= f64::from(v as f32) == v);
        if !exact {
            break;
        }
    }
    if exact {
        fill(x, |v| v as f32).map(FeatureMajor::F32)
    } else {
        fill(x, |v| v).map(FeatureMajor::F64)
    }
}

/// Sparse rows by column, for dot products as scatters: for each non-zero (c, v) of x_i, v times
/// each entry of column c lands at that entry's position. The work is the sum of the lengths of
/// x_i's columns (the shared non-zeros), not n x nnz, and nothing of size n_features is made:
/// columns get compact ids (only the columns that occur), rows keep theirs next to their values.
pub(crate) struct SparseColumns {
    /// Per row of x: compact column ids and values.
    pub(crate) row_ptr: Vec<usize>,
    pub(crate) row_col: Vec<u32>,
    pub(crate) row_val: Vec<f64>,
    /// Per compact column: the rows of x that hold it (ascending) and their values.
    pub(crate) col_ptr: Vec<usize>,
    pub(crate) col_row: Vec<u32>,
    pub(crate) col_val: Vec<f64>,
}

impl SparseColumns {
    /// None when the copy (24 bytes per non-zero) cannot be allocated.
    pub(crate) fn build<R: Rows>(x: &R) -> Option<Self> {
        let n = x.n_rows();
        let nnz: usize = (0..n).map(|i| x.row_nnz(i)).sum();
        let alloc = |len: usize| -> Option<(Vec<u32>, Vec<f64>)> {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            a.try_reserve_exact(len).ok()?;
            b.try_reserve_exact(len).ok()?;
            Some((a, b))
        };
        let (mut row_col, mut row_val) = alloc(nnz)?;
        let mut row_ptr = Vec::with_capacity(n + 1);
        row_ptr.push(0);
        let mut id_of: std::collections::HashMap<usize, u32> = Default::default();
        let mut count: Vec<usize> = Vec::new();
        for i in 0..n {
            x.for_each_nonzero(i, |c, v| {
                let next = id_of.len() as u32;
                let id = *id_of.entry(c).or_insert(next);
                if id as usize == count.len() {
                    count.push(0);
                }
                count[id as usize] += 1;
                row_col.push(id);
                row_val.push(v);
            });
            row_ptr.push(row_col.len());
        }
        let mut col_ptr = Vec::with_capacity(count.len() + 1);
        col_ptr.push(0);
        for &k in &count {
            col_ptr.push(col_ptr.last().copied().unwrap_or(0) + k);
        }
        let (mut col_row, mut col_val) = alloc(nnz)?;
        col_row.resize(nnz, 0);
        col_val.resize(nnz, 0.0);
        let mut fill = col_ptr[..count.len()].to_vec();
        for i in 0..n {
            for k in row_ptr[i]..row_ptr[i + 1] {
                let id = row_col[k] as usize;
                col_row[fill[id]] = i as u32;
                col_val[fill[id]] = row_val[k];
                fill[id] += 1;
            }
        }
        Some(SparseColumns {
            row_ptr,
            row_col,
            row_val,
            col_ptr,
            col_row,
            col_val,
        })
    }

    /// out[p - from] = the part of <x at position p, x_row> from part `part` of `parts` of the
    /// row's non-zeros, for the positions p in from..from + out.len(), row r of x sitting at
    /// position `pos_of[r]` (out zeroed first; the parts' outputs sum to the dot products, so
    /// one row's scatter can run on several threads).
    pub(crate) fn dots_part(
        &self,
        row: usize,
        part: usize,
        parts: usize,
        pos_of: &[u32],
        from: usize,
        out: &mut [f64],
    ) {
        out.fill(0.0);
        let len = out.len();
        let (k0, k1) = (self.row_ptr[row], self.row_ptr[row + 1]);
        let (a0, a1) = (
            k0 + (k1 - k0) * part / parts,
            k0 + (k1 - k0) * (part + 1) / parts,
        );
        for k in a0..a1 {
            let (c, v) = (self.row_col[k] as usize, self.row_val[k]);
            let (a, b) = (self.col_ptr[c], self.col_ptr[c + 1]);
            for (&r, &w) in self.col_row[a..b].iter().zip(&self.col_val[a..b]) {
                // Positions before `from` wrap around to large values and fail the test.
                let p = (pos_of[r as usize] as usize).wrapping_sub(from);
                if p < len {
                    out[p] += v * w;
                }
            }
        }
    }
}

/// A pair's request for the kernel values of fit row `g` against the rows of `class` from its
/// `from`-th on, into `out`.
pub struct SegmentRequest<'o, T> {
    pub g: usize,
    pub class: u32,
    pub from: usize,
    pub out: &'o mut [T],
}

/// What a store holds of a row's own-class segment.
pub enum OwnSegment<T> {
    /// Stored: its values.
    Stored(Arc<[T]>),
    /// Not stored, and worth storing: the caller computes it whole (`compute_all`) and hands
    /// it to `keep_segment`.
    Wanted,
    /// The store does not keep segments of the row's class (they were seldom asked for
    /// again): the caller computes only what it needs.
    NotKept,
}

/// Kernel values of the fit's rows against the rows of one class, by request.
pub trait SegmentSource<T>: Sync {
    /// The own-class segment of fit row g: k(x_g, x_h) for the rows h of g's class in class
    /// order.
    fn own_segment(&self, g: usize) -> OwnSegment<T>;
    /// Stores row g's own-class segment, computed after `OwnSegment::Wanted`.
    fn keep_segment(&self, g: usize, values: Arc<[T]>);
    /// The rows' own-class segments' length (the rows of g's class).
    fn segment_len(&self, g: usize) -> usize;
    /// Answers the requests together (nothing stored): rows of a batch that meet the same
    /// columns share each load of them (the register-blocked dots of `compute`); returns the
    /// values computed.
    fn compute_all(&self, requests: &mut [SegmentRequest<'_, T>]) -> u64;
}

/// The rows of one pair problem (a, b) on the shared store: class a's rows and then class
/// b's, each in class order.
pub struct PairSegments<'a, T> {
    pub(crate) source: &'a dyn SegmentSource<T>,
    pub(crate) classes: [u32; 2],
    /// Per row of the pair problem: the fit's row behind it.
    pub(crate) global: Vec<u32>,
    /// Rows of class a (the first ones).
    pub(crate) first: usize,
}

impl<'a, T: RowValue> PairSegments<'a, T> {
    /// `rows`: the fit's rows of the pair problem, class a's (`class_of` each row's class)
    /// and then class b's, each class in the order of the store's segments (`rank_in_class`:
    /// each fit row's place among the rows of its class).
    pub fn new(
        source: &'a dyn SegmentSource<T>,
        classes: (u32, u32),
        rows: &[usize],
        class_of: &[u32],
        rank_in_class: &[u32],
    ) -> Result<Self> {
        let first = rows
            .iter()
            .take_while(|&&g| class_of.get(g) == Some(&classes.0))
            .count();
        for (t, &g) in rows.iter().enumerate() {
            let (class, rank) = if t < first {
                (classes.0, t)
            } else {
                (classes.1, t - first)
            };
            if class_of.get(g) != Some(&class) || rank_in_class.get(g) != Some(&(rank as u32)) {
                return Err(SvmError::invalid_input(format!(
                    "row {g} is out of the class order of pair {classes:?}"
                )));
            }
        }
        if rows.len() > u32::MAX as usize || rows.iter().any(|&g| g > u32::MAX as usize) {
            return Err(SvmError::invalid_input(
                "too many rows for the shared store",
            ));
        }
        Ok(PairSegments {
            source,
            classes: [classes.0, classes.1],
            global: rows.iter().map(|&g| g as u32).collect(),
            first,
        })
    }

    /// Rows of the pair problem.
    pub fn n_rows(&self) -> usize {
        self.global.len()
    }

    /// Fills each job (a row of the pair problem at a position; positions in order, `perm` the
    /// identity); returns the values computed for it. The stored own-class segments are
    /// copied; everything else (the other class's part, and the own segments to store or not
    /// kept) is computed in one batch, so that the batch's rows share the loads of the columns
    /// they meet: one row at a time, dense data of 42 features took twice as long.
    pub(crate) fn fill(&self, jobs: &mut [RowJob<'_, T>], perm: &[u32]) -> u64 {
        let (first, [a, b]) = (self.first, self.classes);
        // Per job: its fit row, whether it is of class a, and what the store has of its own
        // segment (a row's own part is class a's columns [0, first) for class a's rows).
        let rows: Vec<(usize, bool)> = jobs
            .iter()
            .map(|job| {
                let r = perm[job.pos] as usize;
                (self.global[r] as usize, r < first)
            })
            .collect();
        let own: Vec<OwnSegment<T>> = rows
            .iter()
            .map(|&(g, _)| self.source.own_segment(g))
            .collect();
        let mut fresh: Vec<(usize, Arc<[T]>)> = own
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, OwnSegment::Wanted))
            .map(|(j, _)| {
                let len = self.source.segment_len(rows[j].0);
                (j, std::iter::repeat_n(T::default(), len).collect())
            })
            .collect();
        let mut requests: Vec<SegmentRequest<'_, T>> = Vec::new();
        for (j, arc) in fresh.iter_mut() {
            let (g, in_a) = rows[*j];
            if let Some(out) = Arc::get_mut(arc) {
                let class = if in_a { a } else { b };
                requests.push(SegmentRequest {
                    g,
                    class,
                    from: 0,
                    out,
                });
            }
        }
        // Each job's row split at the classes' border: class a's columns, then class b's.
        let mut later: Vec<(usize, &mut [T], usize)> = Vec::new();
        for (j, job) in jobs.iter_mut().enumerate() {
            let (g, in_a) = rows[j];
            let from = job.from;
            let split = first.saturating_sub(from).min(job.out.len());
            let (left, right) = job.out.split_at_mut(split);
            for (part, class, offset) in [
                (left, a, from),
                (right, b, (from + split).saturating_sub(first)),
            ] {
                if part.is_empty() {
                    continue;
                }
                let is_own = (class == a) == in_a;
                match &own[j] {
                    OwnSegment::Stored(values) if is_own => {
                        part.copy_from_slice(&values[offset..offset + part.len()])
                    }
                    OwnSegment::Wanted if is_own => later.push((j, part, offset)),
                    _ => requests.push(SegmentRequest {
                        g,
                        class,
                        from: offset,
                        out: part,
                    }),
                }
            }
        }
        // Requests over the same columns side by side: they are computed together.
        requests.sort_by_key(|r| (r.class, r.from, r.out.len()));
        let computed = self.source.compute_all(&mut requests);
        drop(requests);
        for (j, part, offset) in later {
            let values = &fresh
                .iter()
                .find(|(k, _)| *k == j)
                .expect("a fresh segment")
                .1;
            part.copy_from_slice(&values[offset..offset + part.len()]);
        }
        for (j, values) in fresh {
            self.source.keep_segment(rows[j].0, values);
        }
        computed
    }
}
