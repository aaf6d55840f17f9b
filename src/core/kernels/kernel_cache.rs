//! An LRU cache of full kernel rows K[i, :] = (k(x_i, x_0), ..., k(x_i, x_{n-1})) with a byte
//! budget, shared by the exact solvers (SMO, ALFPGM).
//!
//! Rows are stored as f32, as LIBSVM stores its `Qfloat` rows, so a `cache_size` in MB holds
//! the same number of rows as scikit-learn's SVC with the same `cache_size`; or as f64 where
//! f32's rounding is beyond what the solver's tolerance absorbs (`exact::dual::RowPrecision`,
//! a polynomial kernel's values in the thousands at a large C): the cache is generic over the
//! element type (`simd::RowValue`), and f64 rows take twice the bytes, so the same budget then
//! holds half the rows. Values are computed in f64 through `Kernel::from_dots` (the Gaussian
//! kernel's `simd::rbf_from_dots`) from dot products and the cached squared norms, then rounded
//! once to the element type. The diagonal is k(x_i, x_i) from the norm (exactly 1 for the
//! Gaussian kernel).
//!
//! `rows(&[i, j, ...])` makes every requested row resident at the same time and computes only
//! the missing ones, all of them in one parallel batch on the configured pool: the work items
//! are (row, block of columns) pairs, so one missing row (SMO) is spread over the threads as
//! well as a batch of 200 (ALFPGM). For a row x_i the batch first writes x_i densely into a
//! scratch buffer (once per row), then each column block takes the dot products of that buffer
//! with the rows x_j of the block (`Rows::dot_dense`: a SIMD dot for dense rows, a gather over
//! the non-zeros of x_j for CSR rows) and turns them into kernel values in one vectorised call.
//! For very wide sparse data (more than `DENSIFY_MAX_COLS` columns) the densified row would not
//! stay in cache; the cache then keeps the data by column (`ColumnIndex`, built once, nnz
//! entries), and a block of dot products walks, for each non-zero of x_i, the rows of the block
//! that share its column: work in proportion to the shared non-zeros, not to n x nnz (20,000
//! text-like rows x 200,000 columns: KernelSVC 217 s with per-pair sorted merges, measured in
//! docs/sparse.md). Data, dense or CSR, with at most `TRANSPOSE_MAX_COLS` columns get a
//! feature-major copy at construction (up to `TRANSPOSE_MAX_BYTES`), and a block of dot products
//! is then one vectorised axpy per non-zero of x_i (400 dense rows, one thread: ijcnn1 0.21 s ->
//! 0.12 s, cod-rna 0.13 s -> 0.11 s; whole KernelSVC fits from CSR as load_svmlight_file gives
//! them, 2 threads: ijcnn1 9.8 -> 4.1 s, a9a 9.9 -> 5.1 s, phishing 0.72 -> 0.44 s).
//!
//! `rows_prefix_blocks` serves a request and then visits the rows block by block in parallel
//! (ALFPGM's scan for j reads row i that way): a single missing row on the feature-major path
//! is computed in the same work items that visit it, one parallel region instead of two per
//! selected pair (a9a, 2 threads: row i and the scan 0.60 -> 0.56 s of a 1.4 s fit).
//!
//! Eviction is least-recently-used over rows; a request that needs more rows than the budget
//! holds grows the cache to that request (a working set must be resident as a whole).
//!
//! Shrinking (LIBSVM's): the solvers work on positions, not rows. `swap_positions` exchanges two
//! positions (the data row behind each, its norm, its column of the feature-major copy and the
//! entries of every resident row), so the variables still active are a prefix 0..active, and
//! `rows_prefix(idx, len)` computes and keeps only the first `len` entries of a row. A row
//! computed short is extended later (its missing tail only) when a longer prefix is asked for.

use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::data::rows::{finite_sq_norms, Rows};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_rows::{
    choose_dot_path, DotPath, PairSegments, RowComputer, RowJob, Scratch, SourceRows, BLOCK, NONE,
};
use crate::core::simd::RowValue;

/// The blocks `rows_prefix_blocks` visits are this many positions long.
pub const ROW_BLOCK: usize = BLOCK;
/// The most rows `rows_prefix_blocks` visits together.
pub const VISIT_ROWS: usize = 4;

/// Blocks of `ROW_BLOCK` positions in a prefix of `len`.
pub fn row_blocks(len: usize) -> usize {
    len.div_ceil(BLOCK)
}

/// Counters of a cache's life (for the benchmark report and the tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheStats {
    /// Requested rows that were resident.
    pub hits: u64,
    /// Requested rows that had to be computed.
    pub misses: u64,
    /// Rows dropped to make room.
    pub evictions: u64,
    /// Batches of missing rows computed (one per `rows` call with a miss).
    pub batches: u64,
    /// Kernel values computed (a full row is n of them; shrunk problems compute prefixes).
    pub values: u64,
    /// Wall seconds spent computing kernel rows.
    pub seconds: f64,
    /// Missing rows copied from their twin's resident row instead of computed (SVR).
    pub twin_copies: u64,
    /// Bytes of one stored kernel value: 4 for f32 rows, 8 for f64 (`RowValue`).
    pub value_bytes: usize,
}

/// A doubly linked least-recently-used order over ids 0..len (the cache's slots, the shared
/// store's fit rows): head the most recently used, tail the least, NONE past either end.
#[derive(Debug, Clone)]
pub(crate) struct LruOrder {
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
}

impl LruOrder {
    /// `n` ids, none of them in the order yet.
    pub(crate) fn new(n: usize) -> Self {
        LruOrder {
            prev: vec![NONE; n],
            next: vec![NONE; n],
            head: NONE,
            tail: NONE,
        }
    }

    /// One more id, not in the order yet.
    pub(crate) fn add_id(&mut self) {
        self.prev.push(NONE);
        self.next.push(NONE);
    }

    /// The least recently used id, NONE when the order is empty.
    pub(crate) fn tail(&self) -> u32 {
        self.tail
    }

    /// Takes `s` (in the order) out of it.
    pub(crate) fn unlink(&mut self, s: u32) {
        let (p, q) = (self.prev[s as usize], self.next[s as usize]);
        if p == NONE {
            self.head = q;
        } else {
            self.next[p as usize] = q;
        }
        if q == NONE {
            self.tail = p;
        } else {
            self.prev[q as usize] = p;
        }
    }

    /// Puts `s` (not in the order) first.
    pub(crate) fn push_front(&mut self, s: u32) {
        self.prev[s as usize] = NONE;
        self.next[s as usize] = self.head;
        if self.head != NONE {
            self.prev[self.head as usize] = s;
        }
        self.head = s;
        if self.tail == NONE {
            self.tail = s;
        }
    }

    /// Moves `s` (in the order) first.
    pub(crate) fn touch(&mut self, s: u32) {
        self.unlink(s);
        self.push_front(s);
    }
}

/// Kernel rows kept by id (a fit row, a data row), least recently used dropped first beyond
/// a byte budget: the stores of `shared_rows` and `source_rows` keep theirs here.
pub(crate) struct RowLru<T> {
    rows: Vec<Option<Arc<[T]>>>,
    order: LruOrder,
    bytes: usize,
}

impl<T> RowLru<T> {
    /// Room for ids 0..n, nothing stored.
    pub(crate) fn new(n: usize) -> Self {
        RowLru {
            rows: vec![None; n],
            order: LruOrder::new(n),
            bytes: 0,
        }
    }

    /// The row of `g`, now the most recently used.
    pub(crate) fn get(&mut self, g: u32) -> Option<Arc<[T]>> {
        let row = self.rows[g as usize].clone();
        if row.is_some() {
            self.order.touch(g);
        }
        row
    }

    pub(crate) fn contains(&self, g: u32) -> bool {
        self.rows[g as usize].is_some()
    }

    /// Stores `row` for `g` (unless a row is stored already: another thread's, the same
    /// values) and drops the least recently used rows beyond `budget` bytes, never `g`'s;
    /// returns how many were dropped.
    pub(crate) fn insert(&mut self, g: u32, row: &Arc<[T]>, budget: usize) -> u64 {
        if self.contains(g) {
            return 0;
        }
        self.rows[g as usize] = Some(Arc::clone(row));
        self.order.push_front(g);
        self.bytes += row.len() * std::mem::size_of::<T>();
        let mut dropped = 0;
        while self.bytes > budget && self.order.tail() != g {
            let old = self.order.tail();
            self.order.unlink(old);
            if let Some(gone) = self.rows[old as usize].take() {
                self.bytes -= gone.len() * std::mem::size_of::<T>();
            }
            dropped += 1;
        }
        dropped
    }
}

/// The LRU kernel-row cache over the rows of `x`.
pub struct KernelRowCache<'a, R: Rows, T: RowValue> {
    n: usize,
    /// The data, norms and positions, and the path dot products take.
    computer: RowComputer<'a, R, T>,
    scratch: Scratch,
    max_slots: usize,
    /// Row storage, one allocation per slot made the first time the slot is used.
    storage: Vec<Vec<T>>,
    /// Per slot: the position it holds, or NONE.
    slot_row: Vec<u32>,
    /// Per slot: how many leading entries of its row are valid.
    row_len: Vec<u32>,
    /// Per position: its slot, or NONE.
    row_slot: Vec<u32>,
    /// The slots, most recently used first.
    lru: LruOrder,
    /// Per slot: its position in the batch being computed, or NONE.
    pending: Vec<u32>,
    /// Positions of the batch being computed, in batch order, and the first entry to compute.
    batch_rows: Vec<u32>,
    batch_from: Vec<u32>,
    /// Entries computed per row of the batch (the prefix asked for).
    batch_len: usize,
    /// Slots of the last request, in request order.
    result: Vec<u32>,
    /// The position swaps since the log was last emptied, in order, and per slot how many of
    /// them its row has had applied: a row takes them when it is next read (`up_to_date`), so
    /// rows never read again (most of them, after a shrinking pass) never pay.
    swap_log: Vec<(u32, u32)>,
    swaps_applied: Vec<usize>,
    stats: CacheStats,
}

/// The rows of one `rows` request, resident together.
pub struct CachedRows<'c, T> {
    storage: &'c [Vec<T>],
    slots: &'c [u32],
    len: usize,
}

impl<'c, T> CachedRows<'c, T> {
    /// Kernel row of the k-th requested position, the prefix asked for (length n for `rows`).
    #[inline]
    pub fn row(&self, k: usize) -> &'c [T] {
        &self.storage[self.slots[k] as usize][..self.len]
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl<'a, R: Rows, T: RowValue> KernelRowCache<'a, R, T> {
    /// A cache of at most `cache_bytes` of rows (at least two rows) over the rows of `x`.
    pub fn new(x: &'a R, kernel: Kernel, cache_bytes: usize) -> Result<Self> {
        let norms = finite_sq_norms(x, "X")?;
        Self::with_norms(x, kernel, norms, cache_bytes)
    }

    /// The same with the squared norms already computed (one per row of `x`).
    pub fn with_norms(
        x: &'a R,
        kernel: Kernel,
        sq_norms: Vec<f64>,
        cache_bytes: usize,
    ) -> Result<Self> {
        Ok(Self::with_computer(
            RowComputer::for_data(x, kernel, sq_norms)?,
            cache_bytes,
        ))
    }

    /// A cache of one pair problem of a one-vs-one fit whose values come from the fit's shared
    /// segments (`x`: the pair's rows, in the order `segments` maps).
    pub fn with_segments(
        x: &'a R,
        kernel: Kernel,
        sq_norms: Vec<f64>,
        cache_bytes: usize,
        segments: PairSegments<'a, T>,
    ) -> Result<Self> {
        if segments.n_rows() != x.n_rows() || kernel == Kernel::Precomputed {
            return Err(SvmError::invalid_input(
                "the pair's segments map another number of rows, or the kernel is precomputed \
                 (read from its matrix, never shared)",
            ));
        }
        let path = DotPath::Shared {
            segments,
            shrunk: Box::new(choose_dot_path(x)),
        };
        let computer = RowComputer::new(x, kernel, sq_norms, path)?;
        Ok(Self::with_computer(computer, cache_bytes))
    }

    /// A cache whose rows are gathered from `store`, a store of kernel rows by data row (`x`:
    /// the problem's rows, each one's `Rows::source_row` a row of the store).
    pub(crate) fn with_source_rows(
        x: &'a R,
        kernel: Kernel,
        sq_norms: Vec<f64>,
        cache_bytes: usize,
        store: &'a dyn SourceRows<T>,
    ) -> Result<Self> {
        let source_at: Vec<u32> = (0..x.n_rows()).map(|i| x.source_row(i) as u32).collect();
        if source_at.iter().any(|&g| g as usize >= store.n_sources()) {
            return Err(SvmError::invalid_input(
                "a row's data row lies outside the store of kernel rows",
            ));
        }
        let path = DotPath::Sources { store, source_at };
        let computer = RowComputer::new(x, kernel, sq_norms, path)?;
        Ok(Self::with_computer(computer, cache_bytes))
    }

    fn with_computer(computer: RowComputer<'a, R, T>, cache_bytes: usize) -> Self {
        let n = computer.n;
        let row_bytes = (n * std::mem::size_of::<T>()).max(1);
        let max_slots = (cache_bytes / row_bytes).clamp(2, n.max(2));
        KernelRowCache {
            n,
            computer,
            scratch: Scratch::default(),
            max_slots,
            storage: Vec::new(),
            slot_row: Vec::new(),
            row_len: Vec::new(),
            row_slot: vec![NONE; n],
            lru: LruOrder::new(0),
            pending: Vec::new(),
            batch_rows: Vec::new(),
            batch_from: Vec::new(),
            batch_len: 0,
            result: Vec::new(),
            swap_log: Vec::new(),
            swaps_applied: Vec::new(),
            stats: CacheStats {
                value_bytes: std::mem::size_of::<T>(),
                ..CacheStats::default()
            },
        }
    }

    /// Number of rows (and the length of each kernel row).
    pub fn n(&self) -> usize {
        self.n
    }

    pub fn kernel(&self) -> Kernel {
        self.computer.kernel
    }

    pub fn sq_norms(&self) -> &[f64] {
        &self.computer.sq_norms
    }

    /// The position of the variable whose kernel row equals this position's up to their own
    /// two entries (SVR's other variable of the same data row), if any.
    pub(crate) fn twin_position(&self, pos: usize) -> Option<usize> {
        self.computer.twin_position(pos)
    }

    /// How many rows the cache may hold.
    pub fn capacity(&self) -> usize {
        self.max_slots
    }

    /// Rows resident now.
    pub fn resident(&self) -> usize {
        self.slot_row.iter().filter(|&&r| r != NONE).count()
    }

    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Lets the cache hold at least `rows` rows (a solver's working set), beyond the byte budget
    /// if need be.
    pub fn ensure_capacity(&mut self, rows: usize) {
        self.max_slots = self.max_slots.max(rows.min(self.n.max(2)));
    }

    /// Whether row i is resident (does not touch the LRU order).
    pub fn contains(&self, i: usize) -> bool {
        self.row_slot.get(i).is_some_and(|&s| s != NONE)
    }

    /// A slot for a new row: a fresh one while under capacity, else the least recently used.
    fn take_slot(&mut self) -> u32 {
        if self.storage.len() < self.max_slots {
            let s = self.storage.len() as u32;
            self.storage.push(vec![T::default(); self.n]);
            self.slot_row.push(NONE);
            self.row_len.push(0);
            self.lru.add_id();
            self.pending.push(NONE);
            self.swaps_applied.push(self.swap_log.len());
            return s;
        }
        let s = self.lru.tail();
        self.lru.unlink(s);
        let old = self.slot_row[s as usize];
        if old != NONE {
            self.row_slot[old as usize] = NONE;
            self.stats.evictions += 1;
        }
        self.slot_row[s as usize] = NONE;
        self.row_len[s as usize] = 0;
        self.swaps_applied[s as usize] = self.swap_log.len();
        s
    }

    /// Applies to slot s's row the swaps it has not had yet (`swap_positions`' rule for each).
    fn up_to_date(&mut self, s: usize) {
        let from = self.swaps_applied[s];
        if from == self.swap_log.len() {
            return;
        }
        self.row_len[s] = apply_swaps(
            &mut self.storage[s],
            self.row_len[s],
            &self.swap_log[from..],
        );
        self.swaps_applied[s] = self.swap_log.len();
    }

    /// Makes the full rows of the positions `idx` resident (computing the missing ones in one
    /// parallel batch) and returns them in request order. Repeated indices are allowed.
    pub fn rows(&mut self, idx: &[usize]) -> Result<CachedRows<'_, T>> {
        self.rows_prefix(idx, self.n)
    }

    /// The same for the first `len` entries of each row (the active positions of a shrunk
    /// problem); rows resident with a shorter prefix get their missing entries computed.
    pub fn rows_prefix(&mut self, idx: &[usize], len: usize) -> Result<CachedRows<'_, T>> {
        let len = self.plan(idx, len)?;
        if !self.batch_rows.is_empty() {
            self.compute_batch();
        }
        Ok(CachedRows {
            storage: &self.storage,
            slots: &self.result,
            len,
        })
    }

    /// `rows_prefix`, then `visit(j0, rows, state)` for each block j0..j0 + `ROW_BLOCK` of the
    /// prefix, `rows` the requested rows' entries there (in request order, at most
    /// `VISIT_ROWS` rows) and `state` the block's entry of `states` (one per block,
    /// `row_blocks(len)` of them), in parallel; the results are folded with `reduce`. A single
    /// missing row on the feature-major path is computed block by block in the work items that
    /// visit it: one parallel region instead of two, each block visited while it is still in
    /// its core's cache. Otherwise the rows are computed first. The kernel seconds then count
    /// the visits too.
    pub fn rows_prefix_blocks<S, V>(
        &mut self,
        idx: &[usize],
        len: usize,
        states: &mut [S],
        visit: impl Fn(usize, &[&[T]], &mut S) -> V + Sync,
        identity: impl Fn() -> V + Sync + Send,
        reduce: impl Fn(V, V) -> V + Sync + Send,
    ) -> Result<(CachedRows<'_, T>, V)>
    where
        S: Send,
        V: Send,
    {
        if idx.len() > VISIT_ROWS {
            return Err(SvmError::invalid_input(format!(
                "{} rows visited together; at most {VISIT_ROWS}",
                idx.len()
            )));
        }
        if states.len() != row_blocks(len.min(self.n)) {
            return Err(SvmError::invalid_input(format!(
                "{} block states for a prefix of {} blocks",
                states.len(),
                row_blocks(len.min(self.n))
            )));
        }
        let len = self.plan(idx, len)?;
        let fused = self.batch_rows.len() == 1 && self.batch_from[0] == 0 && len > 0;
        let folded = match fused.then(|| self.computer.block_source()).flatten() {
            Some(source) => {
                let start = Instant::now();
                let pos = self.batch_rows[0] as usize;
                let slot = self.row_slot[pos];
                let mut row = std::mem::take(&mut self.storage[slot as usize]);
                let computer = &self.computer;
                let xi = computer.dense_row(pos, &mut self.scratch);
                let (storage, slots) = (&self.storage[..], &self.result[..]);
                let folded = parallel::install(|| {
                    row[..len]
                        .par_chunks_mut(BLOCK)
                        .zip(states.par_iter_mut())
                        .enumerate()
                        .map(|(k, (out, state))| {
                            let j0 = k * BLOCK;
                            computer.source_block(&source, pos, xi, j0, out);
                            let out = &*out;
                            let mut rows: [&[T]; VISIT_ROWS] = [&[]; VISIT_ROWS];
                            for (r, &s) in rows.iter_mut().zip(slots) {
                                *r = if s == slot {
                                    out
                                } else {
                                    &storage[s as usize][j0..j0 + out.len()]
                                };
                            }
                            visit(j0, &rows[..slots.len()], state)
                        })
                        .reduce(&identity, &reduce)
                });
                self.storage[slot as usize] = row;
                self.pending[slot as usize] = NONE;
                self.row_len[slot as usize] = len as u32;
                self.stats.values += len as u64;
                self.stats.batches += 1;
                self.stats.seconds += start.elapsed().as_secs_f64();
                folded
            }
            None => {
                if !self.batch_rows.is_empty() {
                    self.compute_batch();
                }
                let (storage, slots) = (&self.storage[..], &self.result[..]);
                parallel::install(|| {
                    states
                        .par_iter_mut()
                        .enumerate()
                        .map(|(k, state)| {
                            let j0 = k * BLOCK;
                            let j1 = (j0 + BLOCK).min(len);
                            let mut rows: [&[T]; VISIT_ROWS] = [&[]; VISIT_ROWS];
                            for (r, &s) in rows.iter_mut().zip(slots) {
                                *r = &storage[s as usize][j0..j1];
                            }
                            visit(j0, &rows[..slots.len()], state)
                        })
                        .reduce(&identity, &reduce)
                })
            }
        };
        Ok((
            CachedRows {
                storage: &self.storage,
                slots: &self.result,
                len,
            },
            folded,
        ))
    }

    /// Makes room for the rows `idx` and lists in `batch_rows` / `batch_from` what is missing of
    /// their first `len` entries (the slots of the request in `result`); returns the prefix
    /// length served.
    fn plan(&mut self, idx: &[usize], len: usize) -> Result<usize> {
        if let Some(&bad) = idx.iter().find(|&&i| i >= self.n) {
            return Err(SvmError::invalid_input(format!(
                "kernel row {bad} requested from {} rows",
                self.n
            )));
        }
        let len = len.min(self.n);
        // Every requested row must fit at once.
        self.ensure_capacity(idx.len());
        self.result.clear();
        self.batch_rows.clear();
        self.batch_from.clear();
        // Hits first, so that a miss never evicts a row this same request asks for.
        for &i in idx {
            let s = self.row_slot[i];
            if s != NONE && self.pending[s as usize] == NONE {
                self.up_to_date(s as usize);
                self.lru.touch(s);
                if self.row_len[s as usize] as usize >= len {
                    self.stats.hits += 1;
                } else {
                    // Resident but short: its tail joins the batch.
                    self.stats.misses += 1;
                    self.pending[s as usize] = self.batch_rows.len() as u32;
                    self.batch_rows.push(i as u32);
                    self.batch_from.push(self.row_len[s as usize]);
                }
            }
        }
        for &i in idx {
            let s = self.row_slot[i];
            if s == NONE {
                self.stats.misses += 1;
                // The twin's resident row, if any, is this row up to the twins' own entries.
                // (Not when the twin's position is inside the prefix and this row's own is not:
                // the computed value at the twin's position is then nowhere to copy from.)
                if let Some(t) = self.computer.twin_position(i).map(|q| self.row_slot[q]) {
                    if t != NONE && self.pending[t as usize] == NONE {
                        self.up_to_date(t as usize);
                    }
                }
                let twin = self.computer.twin_position(i).and_then(|q| {
                    let t = self.row_slot[q];
                    let usable = t != NONE
                        && self.pending[t as usize] == NONE
                        && self.row_len[t as usize] as usize >= len
                        && !(q < len && i >= len);
                    usable.then_some((q, t))
                });
                let s = self.take_slot();
                self.slot_row[s as usize] = i as u32;
                self.row_slot[i] = s;
                self.lru.push_front(s);
                match twin {
                    Some((q, t)) if self.slot_row[t as usize] == q as u32 => {
                        self.copy_twin_row(t as usize, s as usize, (q, i), len);
                    }
                    _ => {
                        self.pending[s as usize] = self.batch_rows.len() as u32;
                        self.batch_rows.push(i as u32);
                        self.batch_from.push(0);
                    }
                }
            } else if self.pending[s as usize] != NONE && self.result.contains(&s) {
                // A repeated index whose row this request computes.
                self.stats.hits += 1;
            }
            self.result.push(self.row_slot[i]);
        }
        self.batch_len = len;
        Ok(len)
    }

    /// Fills slot `to` (position `i`) from slot `from` holding the row of its twin at position
    /// `q`: the same values but for the entries at q and i, which exchange (k(x, x) from the norm
    /// sits at the row's own position, the computed value at the twin's), so the row is what
    /// computing it would give.
    fn copy_twin_row(&mut self, from: usize, to: usize, (q, i): (usize, usize), len: usize) {
        let mut row = std::mem::take(&mut self.storage[to]);
        row[..len].copy_from_slice(&self.storage[from][..len]);
        if q < len {
            row.swap(q, i);
        } else if i < len {
            row[i] = T::narrow(self.computer.kernel.self_value(self.computer.sq_norms[i]));
        }
        self.storage[to] = row;
        self.row_len[to] = len as u32;
        self.stats.twin_copies += 1;
    }

    /// Exchanges the positions of each pair (pairwise disjoint): the rows of `x` behind them,
    /// their norms, their feature-major columns, their cached rows and, in every resident row,
    /// the two entries (`apply_swaps`). A row whose valid prefix holds only one of the two
    /// entries is cut back to before it. The rows' entries move when a row is next read: a
    /// shrinking pass swaps thousands of pairs, and applying them to every resident row at once
    /// was 15% of puma8nh's SVR fit (6,553 rows resident, 4,830 swaps in 46 passes).
    pub fn swap_positions(&mut self, pairs: &[(usize, usize)]) {
        if pairs.is_empty() {
            return;
        }
        let n = self.n;
        for &(a, b) in pairs {
            debug_assert!(a < n && b < n);
            self.row_slot.swap(a, b);
            for p in [a, b] {
                let s = self.row_slot[p];
                if s != NONE {
                    self.slot_row[s as usize] = p as u32;
                }
            }
        }
        self.computer.swap_positions(pairs);
        self.swap_log
            .extend(pairs.iter().map(|&(a, b)| (a as u32, b as u32)));
        // A log longer than the rows is applied to every resident row and emptied: memory
        // O(n), and no row then pays more than the eager pass would have.
        if self.swap_log.len() > 2 * self.n + 1024 {
            let (log, applied) = (&self.swap_log[..], &self.swaps_applied[..]);
            let row_len = &mut self.row_len[..];
            let slot_row = &self.slot_row[..];
            parallel::install(|| {
                self.storage
                    .par_iter_mut()
                    .zip(row_len.par_iter_mut())
                    .zip(slot_row.par_iter().zip(applied.par_iter()))
                    .filter(|(_, (&r, _))| r != NONE)
                    .for_each(|((row, len), (_, &from))| {
                        *len = apply_swaps(row, *len, &log[from..])
                    })
            });
            self.swap_log.clear();
            self.swaps_applied.fill(0);
        }
    }

    /// The row of `x` at a position.
    pub fn row_at(&self, position: usize) -> usize {
        self.computer.perm[position] as usize
    }

    /// Computes entries `batch_from[k]..batch_len` of the rows of `batch_rows` into their
    /// (pending) slots.
    fn compute_batch(&mut self) {
        let start = Instant::now();
        let len = self.batch_len;
        let batch_rows = &self.batch_rows[..];
        let batch_from = &self.batch_from[..];
        // Jobs in batch order (the order the densified rows of the batch are written in),
        // their rows split off the storage in slot order: work in the batch's size, not in the
        // cache's slots (1,500 of them for a9a at 200 MB, walked twice per pair before).
        let mut by_slot: Vec<(u32, u32)> = batch_rows
            .iter()
            .enumerate()
            .map(|(p, &i)| (self.row_slot[i as usize], p as u32))
            .collect();
        by_slot.sort_unstable();
        let mut jobs: Vec<Option<RowJob<'_, T>>> = (0..batch_rows.len()).map(|_| None).collect();
        let mut rest = &mut self.storage[..];
        let mut base = 0;
        for (s, p) in by_slot {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(s as usize + 1 - base);
            if let Some(row) = head.last_mut() {
                let from = batch_from[p as usize] as usize;
                jobs[p as usize] = Some(RowJob {
                    pos: batch_rows[p as usize] as usize,
                    from,
                    out: &mut row[from..len],
                });
            }
            rest = tail;
            base = s as usize + 1;
        }
        let jobs = jobs.into_iter().flatten().collect();
        self.stats.values += self.computer.compute(jobs, &mut self.scratch);
        for &i in &self.batch_rows {
            let s = self.row_slot[i as usize];
            self.pending[s as usize] = NONE;
            self.row_len[s as usize] = len as u32;
        }
        self.stats.batches += 1;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }
}

/// Exchanges the two entries of each pair in a row whose first `len` entries are valid; a pair
/// with only its lower entry inside cuts the row back to before it. Returns the valid length.
fn apply_swaps<T>(row: &mut [T], len: u32, pairs: &[(u32, u32)]) -> u32 {
    let mut valid = len as usize;
    for &(a, b) in pairs {
        let (lo, hi) = (a.min(b) as usize, a.max(b) as usize);
        if hi < valid {
            row.swap(lo, hi);
        } else if lo < valid {
            valid = lo;
        }
    }
    valid as u32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::tests::csr_parts;
    use crate::core::data::rows::{CsrView, DenseView, SubsetRows};
    use crate::core::kernels::kernel_block::kernel_matrix;
    use crate::core::kernels::kernel_rows::{transpose, BitRows, DENSIFY_MAX_COLS};

    /// Random rows (40% zeros) as a dense buffer and as CSR parts of the same values.
    pub(crate) struct Data {
        pub dense: Vec<f64>,
        pub indptr: Vec<i32>,
        pub indices: Vec<i32>,
        pub values: Vec<f64>,
        pub n: usize,
        pub d: usize,
    }

    pub(crate) fn data(n: usize, d: usize, seed: u64) -> Data {
        let mut rng = Rng::new(seed);
        let mut dense: Vec<f64> = (0..n * d).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
        for v in dense.iter_mut() {
            if rng.next_f64() < 0.4 {
                *v = 0.0;
            }
        }
        let (indptr, indices, values) = csr_parts(&dense, d);
        Data {
            dense,
            indptr,
            indices,
            values,
            n,
            d,
        }
    }

    fn check_rows<R: Rows>(x: &R, gamma: f64, cache_bytes: usize, seed: u64) {
        let n = x.n_rows();
        let mut full = vec![0.0; n * n];
        kernel_matrix(x, x, gamma, &mut full).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(x, Kernel::rbf(gamma), cache_bytes).unwrap();
        let mut rng = Rng::new(seed);
        for _ in 0..60 {
            let k = 1 + rng.below(6);
            let idx: Vec<usize> = (0..k).map(|_| rng.below(n)).collect();
            let rows = cache.rows(&idx).unwrap();
            assert_eq!(rows.len(), k);
            for (t, &i) in idx.iter().enumerate() {
                let r = rows.row(t);
                assert_eq!(r.len(), n);
                assert_eq!(r[i], 1.0);
                for j in 0..n {
                    let e = full[i * n + j];
                    assert!(
                        (f64::from(r[j]) - e).abs() <= 1e-7 * e.max(1e-30) + 1e-12,
                        "K[{i},{j}] = {} vs {e}",
                        r[j]
                    );
                }
            }
            assert!(cache.resident() <= cache.capacity());
        }
    }

    #[test]
    fn rows_match_kernel_matrix_dense_sparse_and_subsets() {
        for (n, d, seed) in [(37, 5, 1), (1500, 3, 2), (200, 40, 3)] {
            let t = data(n, d, seed);
            let dense = DenseView::new(&t.dense, t.n, t.d).unwrap();
            let csr = CsrView::new(&t.indptr, &t.indices, &t.values, t.d).unwrap();
            for bytes in [0, 4 * n * 3, 1 << 24] {
                check_rows(&dense, 0.8, bytes, seed);
                check_rows(&csr, 0.8, bytes, seed + 10);
            }
            let idx: Vec<usize> = (0..n).filter(|i| i % 3 != 1).collect();
            check_rows(&SubsetRows::new(&csr, &idx).unwrap(), 1.7, 4 * n * 5, seed);
        }
    }

    fn check_prefixes<R: Rows>(
        cache: &mut KernelRowCache<'_, R, f32>,
        idx: &[usize],
        len: usize,
        perm: &[usize],
        full: &[f64],
    ) {
        let n = perm.len();
        let rows = cache.rows_prefix(idx, len).unwrap();
        for (q, &p) in idx.iter().enumerate() {
            let r = rows.row(q);
            assert_eq!(r.len(), len);
            for (col, &v) in r.iter().enumerate() {
                let e = full[perm[p] * n + perm[col]];
                assert!((f64::from(v) - e).abs() <= 1e-7, "{v} vs {e}");
            }
        }
    }

    /// Swaps reach a row when it is next read, however many batches it missed, and a log
    /// longer than the rows is applied to every resident row and emptied: every row resident,
    /// a few read after each batch (some full, some cut short by a pair), all read at the end,
    /// against the permuted kernel matrix; the log is emptied several times on the way.
    #[test]
    fn rows_read_late_have_every_swap_they_missed() {
        let n = 60;
        let t = data(n, 5, 7);
        let x = DenseView::new(&t.dense, t.n, t.d).unwrap();
        let mut full = vec![0.0; n * n];
        kernel_matrix(&x, &x, 0.5, &mut full).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(0.5), 1 << 20).unwrap();
        let all: Vec<usize> = (0..n).collect();
        let mut perm: Vec<usize> = (0..n).collect();
        check_prefixes(&mut cache, &all, n, &perm, &full);
        let mut rng = Rng::new(8);
        let mut emptied = 0;
        for round in 0..400 {
            let mut free: Vec<usize> = (0..n).collect();
            let mut pairs = Vec::new();
            for _ in 0..1 + rng.below(n / 3) {
                let a = free.swap_remove(rng.below(free.len()));
                let b = free.swap_remove(rng.below(free.len()));
                pairs.push((a, b));
                perm.swap(a, b);
            }
            let before = cache.swap_log.len();
            cache.swap_positions(&pairs);
            if cache.swap_log.len() < before + pairs.len() {
                emptied += 1;
            }
            if round % 7 == 0 {
                let idx = [rng.below(n), rng.below(n)];
                check_prefixes(&mut cache, &idx, 1 + rng.below(n), &perm, &full);
            }
        }
        assert!(emptied >= 2, "the log was emptied {emptied} times");
        check_prefixes(&mut cache, &all, n, &perm, &full);
    }

    /// Random prefix requests between random batches of disjoint position swaps, against the
    /// kernel matrix read through the permutation: every path (feature-major copy, densified
    /// row, column index), caches from two rows up.
    #[test]
    fn prefixes_and_swapped_positions_match_the_permuted_kernel_matrix() {
        let mut rng = Rng::new(31);
        let wide = DENSIFY_MAX_COLS + 3;
        for (n, d, seed) in [(90, 3, 1), (1300, 150, 2), (1100, 0, 3)] {
            let t = data(n, d.max(4), seed);
            let dense = DenseView::new(&t.dense, t.n, t.d).unwrap();
            // d = 0: the same rows as CSR in a space wider than DENSIFY_MAX_COLS.
            let csr = CsrView::new(
                &t.indptr,
                &t.indices,
                &t.values,
                if d == 0 { wide } else { t.d },
            )
            .unwrap();
            let mut full = vec![0.0; n * n];
            kernel_matrix(&dense, &dense, 0.7, &mut full).unwrap();
            for bytes in [0, 4 * n * 7, 1 << 24] {
                let mut a = KernelRowCache::<_, f32>::new(&dense, Kernel::rbf(0.7), bytes).unwrap();
                let mut b = KernelRowCache::<_, f32>::new(&csr, Kernel::rbf(0.7), bytes).unwrap();
                let mut perm: Vec<usize> = (0..n).collect();
                for _ in 0..40 {
                    let k = 1 + rng.below(4);
                    let idx: Vec<usize> = (0..k).map(|_| rng.below(n)).collect();
                    let len = 1 + rng.below(n);
                    check_prefixes(&mut a, &idx, len, &perm, &full);
                    check_prefixes(&mut b, &idx, len, &perm, &full);
                    // Disjoint swaps, as a shrinking pass makes them.
                    let mut free: Vec<usize> = (0..n).collect();
                    let mut pairs = Vec::new();
                    for _ in 0..rng.below(n / 4) {
                        let x = free.swap_remove(rng.below(free.len()));
                        let y = free.swap_remove(rng.below(free.len()));
                        pairs.push((x, y));
                        perm.swap(x, y);
                    }
                    a.swap_positions(&pairs);
                    b.swap_positions(&pairs);
                    for (p, &r) in perm.iter().enumerate() {
                        assert_eq!(a.row_at(p), r);
                    }
                }
            }
        }
    }

    /// Batches take register-blocked dots for groups of dense rows: the same kernel values, bit
    /// for bit, as the rows computed one at a time (dense, sparse, f32 and f64 copies, several
    /// column blocks, prefixes).
    #[test]
    fn batched_rows_equal_rows_computed_one_at_a_time() {
        for (n, d, seed) in [(2 * BLOCK + 77, 22, 1), (900, 6, 2), (1500, 40, 3)] {
            let mut t = data(n, d, seed);
            if seed == 2 {
                // 0/1 data: the f32 copy.
                for v in t.dense.iter_mut() {
                    *v = f64::from(u8::from(*v != 0.0));
                }
                t.values.iter_mut().for_each(|v| *v = 1.0);
            }
            let dense = DenseView::new(&t.dense, t.n, t.d).unwrap();
            let csr = CsrView::new(&t.indptr, &t.indices, &t.values, t.d).unwrap();
            let idx: Vec<usize> = (0..19).map(|k| (k * 131 + 7) % n).collect();
            for len in [n, n / 2 + 3] {
                let mut batch =
                    KernelRowCache::<_, f32>::new(&dense, Kernel::rbf(0.3), 1 << 26).unwrap();
                let mut single =
                    KernelRowCache::<_, f32>::new(&csr, Kernel::rbf(0.3), 1 << 26).unwrap();
                let rows = batch.rows_prefix(&idx, len).unwrap();
                for (k, &i) in idx.iter().enumerate() {
                    let one = single.rows_prefix(&[i], len).unwrap();
                    assert_eq!(rows.row(k), one.row(0), "row {i}, n {n}, len {len}");
                }
            }
        }
    }

    /// 0/1 rows, -1/0/1 rows and rows whose columns take three consecutive integers each
    /// (shifted to -1/0/1) take the bit-set path: the same kernel values, bit for bit, as the
    /// feature-major copy (the other paths' exact counts), for widths of one to four words
    /// (two a set when signed) and their edges, sparse and dense input, prefixes and swapped
    /// positions; and the fused visits of single missing rows read the bit sets too. Rows with
    /// another value, or wider than four words in all, do not.
    #[test]
    fn bit_rows_equal_the_feature_major_copy() {
        #[derive(Clone, Copy)]
        enum Codes {
            Binary,
            Signed,
            /// The signs moved by a column's shift: 0/1/2, 1/2/3, -2/-1/0 and 4/5/6 cells.
            Shifted,
        }
        const SHIFTS: [f64; 5] = [0.0, 1.0, 2.0, -1.0, 5.0];
        let mut rng = Rng::new(5);
        let shapes = [
            (1100, 123, Codes::Binary),
            (300, 1, Codes::Binary),
            (700, 64, Codes::Binary),
            (500, 65, Codes::Binary),
            (2 * BLOCK + 9, 256, Codes::Binary),
            (1100, 42, Codes::Signed),
            (300, 1, Codes::Signed),
            (700, 64, Codes::Signed),
            (2 * BLOCK + 9, 65, Codes::Signed),
            (500, 128, Codes::Signed),
            (1100, 42, Codes::Shifted),
            (300, 2, Codes::Shifted),
            (2 * BLOCK + 9, 128, Codes::Shifted),
        ];
        for (n, d, codes) in shapes {
            let mut t = data(n, d, n as u64 + d as u64);
            for (k, v) in t.dense.iter_mut().enumerate() {
                let sign = if *v == 0.0 { 0.0 } else { v.signum() };
                *v = match codes {
                    Codes::Binary => sign.abs(),
                    Codes::Signed => sign,
                    Codes::Shifted => sign + SHIFTS[(k % d) % SHIFTS.len()],
                };
            }
            (t.indptr, t.indices, t.values) = csr_parts(&t.dense, d);
            let dense = DenseView::new(&t.dense, t.n, t.d).unwrap();
            let csr = CsrView::new(&t.indptr, &t.indices, &t.values, t.d).unwrap();
            let norms = dense.sq_norms();
            let copy = || transpose(&dense).map(DotPath::FeatureMajor).unwrap();
            let kernel = Kernel::rbf(0.05);
            let reference = RowComputer::new(&dense, kernel, norms, copy()).unwrap();
            let mut want = KernelRowCache::<_, f32>::with_computer(reference, 1 << 26);
            let mut bits = KernelRowCache::<_, f32>::new(&csr, kernel, 1 << 26).unwrap();
            let mut bits_dense = KernelRowCache::<_, f32>::new(&dense, kernel, 4 * n * 3).unwrap();
            assert!(matches!(bits.computer.path, DotPath::Bits(_)));
            assert!(matches!(bits_dense.computer.path, DotPath::Bits(_)));
            for _ in 0..30 {
                let idx: Vec<usize> = (0..1 + rng.below(4)).map(|_| rng.below(n)).collect();
                let len = 1 + rng.below(n);
                let w = want.rows_prefix(&idx, len).unwrap();
                let w: Vec<Vec<f32>> = (0..idx.len()).map(|k| w.row(k).to_vec()).collect();
                let got = bits.rows_prefix(&idx, len).unwrap();
                let got_dense = bits_dense.rows_prefix(&idx, len).unwrap();
                for (k, row) in w.iter().enumerate() {
                    assert_eq!(got.row(k), &row[..], "n {n} d {d} row {}", idx[k]);
                    assert_eq!(got_dense.row(k), &row[..], "n {n} d {d} row {}", idx[k]);
                }
                let pairs: Vec<(usize, usize)> = (0..rng.below(5))
                    .map(|k| (k, n - 1 - k))
                    .filter(|&(a, b)| a < b)
                    .collect();
                want.swap_positions(&pairs);
                bits.swap_positions(&pairs);
                bits_dense.swap_positions(&pairs);
            }
            check_visits(&csr, &dense, n, d as u64);
        }
        let t = data(200, 20, 9);
        let x = CsrView::new(&t.indptr, &t.indices, &t.values, t.d).unwrap();
        assert!(BitRows::build(&x).is_none(), "values that are not integers");
        let twos = [0.0, 1.0, -1.0, 2.0];
        let two = DenseView::new(&twos, 1, 4).unwrap();
        assert!(
            BitRows::build(&two).is_some(),
            "a column of 2 alone, shifted"
        );
        let ones = vec![1.0; 10 * 257];
        let wide = DenseView::new(&ones, 10, 257).unwrap();
        assert!(BitRows::build(&wide).is_none(), "five words");
        let signs: Vec<f64> = (0..10 * 129)
            .map(|k| if k % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        let wide = DenseView::new(&signs, 10, 129).unwrap();
        assert!(BitRows::build(&wide).is_none(), "three words a set");
        // A column of 0, 1, 2 and 3 (four integers), and one of 0, 1, 2 and 1.5.
        for last in [3.0, 1.5] {
            let cells = [0.0, 0.0, 1.0, 1.0, 2.0, 0.0, last, 1.0];
            let x = DenseView::new(&cells, 4, 2).unwrap();
            assert!(BitRows::build(&x).is_none(), "a column of 0, 1, 2, {last}");
        }
    }

    #[test]
    fn visited_blocks_are_the_rows_asked_for() {
        // Requests of one to three rows, prefixes growing and shrinking, a cache of a few rows
        // (evictions, short rows extended) and swapped positions: the blocks visited are the
        // rows rows_prefix gives, block by block, each visited once; a single missing row
        // takes the fused path on the feature-major copy, the rest the computed-first path.
        for (n, d, seed, dense_input) in [
            (3 * BLOCK + 77, 22, 11, true),
            (2 * BLOCK + 5, 9, 12, false),
            (700, 3, 13, true),
        ] {
            let t = data(n, d, seed);
            let dense = DenseView::new(&t.dense, t.n, t.d).unwrap();
            let csr = CsrView::new(&t.indptr, &t.indices, &t.values, t.d).unwrap();
            if dense_input {
                check_visits(&dense, &csr, n, seed);
            } else {
                check_visits(&csr, &dense, n, seed);
            }
        }
    }

    /// `rows_prefix_blocks` on `x` against `rows_prefix` on `other` (the same rows).
    fn check_visits<A: Rows, B: Rows>(x: &A, other: &B, n: usize, seed: u64) {
        {
            let bytes = 5 * n * 4;
            let mut a = KernelRowCache::<_, f32>::new(x, Kernel::rbf(0.4), bytes).unwrap();
            let mut b = KernelRowCache::<_, f32>::new(other, Kernel::rbf(0.4), bytes).unwrap();
            let mut rng = Rng::new(seed);
            for step in 0..60 {
                if step % 17 == 16 {
                    let swaps: Vec<(usize, usize)> =
                        (0..5).map(|k| (k, n - 1 - k - rng.below(n / 2))).collect();
                    a.swap_positions(&swaps);
                    b.swap_positions(&swaps);
                }
                let k = 1 + rng.below(3);
                let idx: Vec<usize> = (0..k).map(|_| rng.below(n)).collect();
                let len = 1 + rng.below(n);
                let mut states: Vec<(usize, Vec<Vec<f32>>)> =
                    vec![(usize::MAX, Vec::new()); row_blocks(len)];
                let (rows, visits) = a
                    .rows_prefix_blocks(
                        &idx,
                        len,
                        &mut states,
                        |j0, rows, st| {
                            *st = (j0, rows.iter().map(|r| r.to_vec()).collect());
                            1usize
                        },
                        || 0,
                        |x, y| x + y,
                    )
                    .unwrap();
                assert_eq!(visits, row_blocks(len));
                let want = b.rows_prefix(&idx, len).unwrap();
                for r in 0..k {
                    assert_eq!(rows.row(r), want.row(r), "step {step}, row {r}");
                    let joined: Vec<f32> = states
                        .iter()
                        .enumerate()
                        .flat_map(|(blk, (j0, blocks))| {
                            assert_eq!(*j0, blk * ROW_BLOCK);
                            blocks[r].clone()
                        })
                        .collect();
                    assert_eq!(&joined[..], want.row(r), "step {step}, row {r} visited");
                }
            }
            let mut wrong = vec![0u8; row_blocks(n) + 1];
            assert!(a
                .rows_prefix_blocks(&[0], n, &mut wrong, |_, _, _| (), || (), |_, _| ())
                .is_err());
            assert!(a
                .rows_prefix_blocks(&[0; 5], n, &mut wrong, |_, _, _| (), || (), |_, _| ())
                .is_err());
        }
    }

    #[test]
    fn column_index_path_matches_densified_path() {
        // Wider than DENSIFY_MAX_COLS: the column-index path, over several column blocks; the
        // same values as the dense view.
        let (n, d) = (2 * BLOCK + 300, DENSIFY_MAX_COLS + 5);
        let mut rng = Rng::new(9);
        let mut indptr = vec![0i32];
        let (mut indices, mut values) = (vec![], vec![]);
        let mut dense = vec![0.0; n * 8];
        for i in 0..n {
            for c in 0..8 {
                if rng.next_f64() < 0.6 {
                    let v = rng.next_f64() - 0.5;
                    // Spread the 8 columns over the wide space, sorted.
                    indices.push((c * (d / 8)) as i32);
                    values.push(v);
                    dense[i * 8 + c] = v;
                }
            }
            indptr.push(indices.len() as i32);
        }
        let csr = CsrView::new(&indptr, &indices, &values, d).unwrap();
        let narrow = DenseView::new(&dense, n, 8).unwrap();
        let mut a = KernelRowCache::<_, f32>::new(&csr, Kernel::rbf(0.9), 1 << 20).unwrap();
        let mut b = KernelRowCache::<_, f32>::new(&narrow, Kernel::rbf(0.9), 1 << 20).unwrap();
        let idx: Vec<usize> = (0..n).step_by(97).chain([n - 1]).collect();
        let (ra, rb) = (a.rows(&idx).unwrap(), b.rows(&idx).unwrap());
        for t in 0..idx.len() {
            for j in 0..n {
                assert!((ra.row(t)[j] - rb.row(t)[j]).abs() <= 1e-7);
            }
        }
    }

    #[test]
    fn hits_misses_and_lru_eviction() {
        let t = data(50, 4, 4);
        let x = DenseView::new(&t.dense, t.n, t.d).unwrap();
        // Room for exactly 3 rows.
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(0.5), 3 * 50 * 4).unwrap();
        assert_eq!(cache.capacity(), 3);
        cache.rows(&[1, 2]).unwrap();
        assert_eq!((cache.stats().hits, cache.stats().misses), (0, 2));
        cache.rows(&[2, 3]).unwrap(); // 2 hit, 3 miss: LRU order 3, 2, 1
        assert_eq!((cache.stats().hits, cache.stats().misses), (1, 3));
        cache.rows(&[1]).unwrap(); // hit: order 1, 3, 2
        cache.rows(&[4]).unwrap(); // evicts 2, the least recently used
        assert_eq!(cache.stats().evictions, 1);
        assert!(cache.contains(1) && cache.contains(3) && cache.contains(4));
        assert!(!cache.contains(2));
        // Repeated indices in one request: one miss, then hits.
        cache.rows(&[7, 7]).unwrap();
        assert_eq!(cache.stats().misses, 5);
        assert!(cache.contains(7) && !cache.contains(3));
        // A request larger than the budget grows the cache and keeps every row resident.
        let big: Vec<usize> = (10..20).collect();
        let rows = cache.rows(&big).unwrap();
        for (k, &i) in big.iter().enumerate() {
            assert_eq!(rows.row(k)[i], 1.0);
        }
        assert!(cache.capacity() >= 10);
        assert!(big.iter().all(|&i| cache.contains(i)));
        assert!(cache.rows(&[50]).is_err());
    }

    #[test]
    fn randomized_requests_keep_the_lru_invariants() {
        let t = data(120, 6, 5);
        let x = CsrView::new(&t.indptr, &t.indices, &t.values, t.d).unwrap();
        let mut full = vec![0.0; 120 * 120];
        kernel_matrix(&x, &x, 0.3, &mut full).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(0.3), 8 * 120 * 4).unwrap();
        let mut rng = Rng::new(11);
        // A reference LRU: most recent first.
        let mut order: Vec<usize> = Vec::new();
        for _ in 0..500 {
            let k = 1 + rng.below(5);
            let idx: Vec<usize> = (0..k).map(|_| rng.below(120)).collect();
            let (h0, m0) = (cache.stats().hits, cache.stats().misses);
            let mut hits = 0;
            let before = order.clone();
            for &i in &idx {
                if let Some(p) = order.iter().position(|&r| r == i) {
                    if before.contains(&i) {
                        hits += 1;
                        order.remove(p);
                        order.insert(0, i);
                    }
                }
            }
            let mut new: Vec<usize> = Vec::new();
            for &i in &idx {
                if before.contains(&i) {
                    continue;
                }
                if new.contains(&i) {
                    hits += 1;
                } else {
                    new.push(i);
                    order.insert(0, i);
                }
            }
            order.truncate(8);
            let rows = cache.rows(&idx).unwrap();
            for (t, &i) in idx.iter().enumerate() {
                let j = rng.below(120);
                assert!((f64::from(rows.row(t)[j]) - full[i * 120 + j]).abs() < 1e-7);
            }
            assert_eq!(cache.stats().hits - h0, hits);
            assert_eq!(cache.stats().misses - m0, k as u64 - hits);
            for i in 0..120 {
                assert_eq!(cache.contains(i), order.contains(&i), "row {i}");
            }
        }
    }

    #[test]
    fn rejects_bad_gamma_and_overflowing_norms() {
        let v = [1.0, 2.0];
        let x = DenseView::new(&v, 1, 2).unwrap();
        assert!(KernelRowCache::<_, f32>::new(&x, Kernel::rbf(0.0), 100).is_err());
        assert!(KernelRowCache::<_, f32>::new(&x, Kernel::rbf(f64::NAN), 100).is_err());
        let huge = [1e200, 1.0];
        let x = DenseView::new(&huge, 1, 2).unwrap();
        assert!(KernelRowCache::<_, f32>::new(&x, Kernel::rbf(1.0), 100).is_err());
    }

    /// SVR's rows twice over (a subset repeating every row): a missing row whose twin is
    /// resident is copied from it, and every row is bit for bit what a cache over the same
    /// rows stored twice (no twins) computes, through requests of any prefix and position swaps.
    #[test]
    fn twin_rows_are_copied_exactly() {
        let mut rng = Rng::new(12);
        let (n, d) = (40, 3);
        let xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
        let x = DenseView::new(&xs, n, d).unwrap();
        let twice: Vec<usize> = (0..n).chain(0..n).collect();
        let sub = SubsetRows::new(&x, &twice).unwrap();
        let copied: Vec<f64> = twice
            .iter()
            .flat_map(|&i| xs[i * d..(i + 1) * d].to_vec())
            .collect();
        let plain = DenseView::new(&copied, 2 * n, d).unwrap();
        for kernel in [
            Kernel::rbf(0.8),
            Kernel::Poly {
                gamma: 0.5,
                coef0: 1.0,
                degree: 3,
            },
        ] {
            let mut a = KernelRowCache::<_, f32>::new(&sub, kernel, 12 * 2 * n * 4).unwrap();
            let mut b = KernelRowCache::<_, f32>::new(&plain, kernel, 1 << 20).unwrap();
            for step in 0..600 {
                if step % 50 == 49 {
                    let (p, q) = (rng.below(2 * n), rng.below(2 * n));
                    let pairs = [(p.min(q), p.max(q))];
                    if p != q {
                        a.swap_positions(&pairs);
                        b.swap_positions(&pairs);
                    }
                }
                let r = rng.below(2 * n);
                let len = if rng.next_f64() < 0.5 {
                    2 * n
                } else {
                    1 + rng.below(2 * n)
                };
                let ra = a.rows_prefix(&[r], len).unwrap().row(0).to_vec();
                let rb = b.rows_prefix(&[r], len).unwrap().row(0).to_vec();
                assert_eq!(
                    ra.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    rb.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{kernel:?} step {step}: row {r}, prefix {len}"
                );
            }
            assert!(a.stats().twin_copies > 20, "{:?}", a.stats());
        }
    }
}
