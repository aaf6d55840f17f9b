//! Sparse vectors at O(nnz) cost, whatever the number of features: a hash probe of one row for
//! dot products against many sparse vectors, and an arena of sparse support vectors.
//!
//! Why a hash probe and not a scatter into a dense buffer of n_features: the buffer costs memory
//! that grows with n_features (8 GB at 10^9 columns) and its gathers miss the cache as soon as
//! it outgrows L2; an open-addressing table of 4 x nnz slots stays in L1 for text-like rows
//! (50-500 non-zeros), and a probe costs one multiply, one load and usually one compare.
//! Why not sorted merges: the merge of two index lists branches on every element and
//! mispredicts about half of the time; the probe's loop over a support vector's non-zeros
//! has no data-dependent branch except the rare collision.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::core::data::rows::Rows;

const EMPTY: u64 = u64::MAX;

/// The non-zeros of one vector in an open-addressing hash table (linear probing, load at most
/// 1/4), so its dot product with a sparse vector costs O(nnz of that vector). Most probes of
/// sparse data miss; a filter of 16 bits per slot (4 more hash bits than the slot index) answers
/// 98% of misses with one load and a predictable branch, without touching the table.
#[derive(Debug, Clone)]
pub struct RowProbe {
    keys: Vec<u64>,
    vals: Vec<f64>,
    filter: Vec<u64>,
    /// 64 - log2(slots in use): the slot is the top bits of the hash.
    shift: u32,
    mask: usize,
    filled: Vec<usize>,
}

const HASH: u64 = 0x9E37_79B9_7F4A_7C15;

impl Default for RowProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl RowProbe {
    pub fn new() -> Self {
        RowProbe {
            keys: vec![EMPTY; 16],
            vals: vec![0.0; 16],
            filter: vec![0; 4],
            shift: 64 - 4,
            mask: 15,
            filled: Vec::new(),
        }
    }

    /// Empties the table and sizes it for `n` entries: 4n slots rounded up to a power of two,
    /// so the footprint follows the row (the allocation only grows: no allocation once the
    /// largest row has been seen).
    fn reset(&mut self, n: usize) {
        for &s in &self.filled {
            self.keys[s] = EMPTY;
        }
        self.filled.clear();
        let size = n.saturating_mul(4).next_power_of_two().max(16);
        if size > self.keys.len() {
            self.keys = vec![EMPTY; size];
            self.vals = vec![0.0; size];
        }
        let words = size / 4;
        if self.filter.len() < words {
            self.filter.resize(words, 0);
        }
        self.filter[..words].fill(0);
        self.shift = 64 - size.trailing_zeros();
        self.mask = size - 1;
    }

    #[inline(always)]
    fn filter_bit(&self, h: u64) -> (usize, u64) {
        let f = (h >> (self.shift - 4)) as usize;
        (f >> 6, 1u64 << (f & 63))
    }

    #[inline]
    fn insert(&mut self, c: u64, v: f64) {
        let h = c.wrapping_mul(HASH);
        let (word, bit) = self.filter_bit(h);
        self.filter[word] |= bit;
        let mut s = (h >> self.shift) as usize;
        loop {
            if self.keys[s] == c {
                // A repeated column (non-canonical CSR) counts as the sum, as scipy reads it.
                self.vals[s] += v;
                return;
            }
            if self.keys[s] == EMPTY {
                self.keys[s] = c;
                self.vals[s] = v;
                self.filled.push(s);
                return;
            }
            s = (s + 1) & self.mask;
        }
    }

    /// Loads row i of x (its columns below `dim`).
    pub fn load_row<R: Rows>(&mut self, x: &R, i: usize, dim: usize) {
        self.reset(x.row_nnz(i).min(dim));
        x.for_each_nonzero(i, |c, v| {
            if c < dim && v != 0.0 {
                self.insert(c as u64, v);
            }
        });
    }

    /// Loads a sparse vector given by sorted indices and values.
    pub fn load_sparse(&mut self, idx: &[u64], val: &[f64]) {
        self.reset(idx.len());
        for (&c, &v) in idx.iter().zip(val) {
            if v != 0.0 {
                self.insert(c, v);
            }
        }
    }

    /// The value at column c, if stored.
    #[inline(always)]
    fn lookup(&self, c: u64) -> Option<f64> {
        let h = c.wrapping_mul(HASH);
        let (word, bit) = self.filter_bit(h);
        if self.filter[word] & bit == 0 {
            return None;
        }
        let mut s = (h >> self.shift) as usize;
        loop {
            let k = self.keys[s];
            if k == c {
                return Some(self.vals[s]);
            }
            if k == EMPTY {
                return None;
            }
            s = (s + 1) & self.mask;
        }
    }

    /// The value at column c (0 when absent).
    #[inline]
    pub fn get(&self, c: u64) -> f64 {
        self.lookup(c).unwrap_or(0.0)
    }

    /// Dot product with the sparse vector (idx, val): the products of the shared columns
    /// accumulated in column order, fused (FMA) where the CPU has it. That is exactly the
    /// arithmetic of the dense layout's axpy over the same columns, so both layouts train
    /// bit-identical models; the dependent chain only runs over shared columns, which are few
    /// in sparse data (most probes miss).
    #[inline]
    pub fn dot(&self, idx: &[u64], val: &[f64]) -> f64 {
        #[cfg(target_arch = "x86_64")]
        if crate::core::simd::has_fma() {
            // SAFETY: FMA was detected at run time.
            return unsafe { self.dot_fma(idx, val) };
        }
        let mut acc = 0.0;
        for (&c, &v) in idx.iter().zip(val) {
            if let Some(x) = self.lookup(c) {
                acc += x * v;
            }
        }
        acc
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn dot_fma(&self, idx: &[u64], val: &[f64]) -> f64 {
        let mut acc = 0.0f64;
        for (&c, &v) in idx.iter().zip(val) {
            if let Some(x) = self.lookup(c) {
                acc = x.mul_add(v, acc);
            }
        }
        acc
    }

    /// out[j] = this vector's dot product with vector j of `arena`, for every j (as `dot`,
    /// with the CPU check made once for the whole pass).
    pub fn dots(&self, arena: &SparseArena, out: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        if crate::core::simd::has_fma() {
            // SAFETY: FMA was detected at run time.
            unsafe { self.dots_fma(arena, out) };
            return;
        }
        for (j, o) in out.iter_mut().enumerate() {
            let (idx, val) = arena.get(j);
            *o = self.dot(idx, val);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn dots_fma(&self, arena: &SparseArena, out: &mut [f64]) {
        for (j, o) in out.iter_mut().enumerate() {
            let (idx, val) = arena.get(j);
            // SAFETY: this function runs only where FMA was detected.
            *o = unsafe { self.dot_fma(idx, val) };
        }
    }

    /// The stored entries' values (for the squared norm of what was loaded).
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.filled.iter().map(|&s| self.vals[s])
    }
}

/// A fast hash for column ids (a multiply and a fold), for maps that only ever see integers.
#[derive(Debug, Default, Clone, Copy)]
pub struct ColumnHasher(u64);

impl Hasher for ColumnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(HASH);
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(HASH);
        self.0 = h ^ (h >> 29);
    }
}

type ColumnMap<V> = HashMap<u64, V, BuildHasherDefault<ColumnHasher>>;

/// Support vectors stored sparse: per slot a run of sorted column indices and values in two
/// contiguous arenas. Replacing or removing a vector leaves its old run as garbage, which a
/// compaction (in place, when garbage exceeds the live entries) reclaims, so after warm-up the
/// arenas stop growing and a step allocates nothing.
///
/// Dot products with a row go through a [`RowProbe`] of the row, one probe per stored entry.
/// An inverted index by feature (posting lists) makes the dots themselves 15x cheaper
/// (benches/sparse.rs) but was measured slower in training (commit 9cc1a5a): merging replaces
/// two vectors of a few hundred entries at almost every step, and keeping the posting lists up
/// to date cost 625 us per merge event in cache misses, against about 80 us for the probes it
/// saves (docs/sparse.md). Prediction, where the vectors do not change, uses the index
/// ([`ColumnIndex`]).
#[derive(Debug, Clone, Default)]
pub struct SparseArena {
    idx: Vec<u64>,
    val: Vec<f64>,
    start: Vec<usize>,
    nnz: Vec<usize>,
    live: usize,
    /// Scratch for compaction (slot order by arena position).
    order: Vec<usize>,
}

impl SparseArena {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.start.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start.is_empty()
    }

    /// Total stored entries of the live vectors.
    #[inline]
    pub fn live_nnz(&self) -> usize {
        self.live
    }

    #[inline]
    pub fn get(&self, j: usize) -> (&[u64], &[f64]) {
        let r = self.start[j]..self.start[j] + self.nnz[j];
        (&self.idx[r.clone()], &self.val[r])
    }

    /// out[j] = <vector j, row i of x> for every j (columns of x at or past `dim` ignored).
    pub fn dots_with_row<R: Rows>(
        &self,
        probe: &mut RowProbe,
        x: &R,
        i: usize,
        dim: usize,
        out: &mut [f64],
    ) {
        probe.load_row(x, i, dim);
        probe.dots(self, out);
    }

    /// out[j] = <vector p, vector j> for every j.
    pub fn dots_with_vector(&self, probe: &mut RowProbe, p: usize, out: &mut [f64]) {
        let (idx, val) = self.get(p);
        probe.load_sparse(idx, val);
        probe.dots(self, out);
    }

    /// Appends a vector: the columns below `dim` of row i of x, sorted.
    pub fn push_row<R: Rows>(&mut self, x: &R, i: usize, dim: usize) {
        let s = self.idx.len();
        x.for_each_nonzero(i, |c, v| {
            if c < dim && v != 0.0 {
                self.idx.push(c as u64);
                self.val.push(v);
            }
        });
        self.sort_run(s);
        self.start.push(s);
        self.nnz.push(self.idx.len() - s);
        self.live += self.idx.len() - s;
    }

    /// Appends a vector given by sorted indices and values.
    pub fn push_sparse(&mut self, idx: &[u64], val: &[f64]) {
        let s = self.idx.len();
        self.idx.extend_from_slice(idx);
        self.val.extend_from_slice(val);
        self.start.push(s);
        self.nnz.push(idx.len());
        self.live += idx.len();
    }

    /// Keeps the run from `s` to the end sorted by column and free of repeated columns (CSR
    /// input is canonical after the Python layer; this guards direct callers).
    fn sort_run(&mut self, s: usize) {
        let run = &self.idx[s..];
        if run.windows(2).all(|w| w[0] < w[1]) {
            return;
        }
        let mut pairs: Vec<(u64, f64)> = self.idx[s..]
            .iter()
            .copied()
            .zip(self.val[s..].iter().copied())
            .collect();
        pairs.sort_by_key(|p| p.0);
        self.idx.truncate(s);
        self.val.truncate(s);
        for (c, v) in pairs {
            if self.idx.len() > s && *self.idx.last().unwrap_or(&EMPTY) == c {
                if let Some(last) = self.val.last_mut() {
                    *last += v;
                }
            } else {
                self.idx.push(c);
                self.val.push(v);
            }
        }
    }

    /// Replaces vector q by h x_p + (1 - h) x_q (a sorted union of their columns); returns its
    /// squared norm, summed over the merged entries.
    pub fn merge_into(&mut self, p: usize, q: usize, h: f64) -> f64 {
        let (pa, pn) = (self.start[p], self.nnz[p]);
        let (qa, qn) = (self.start[q], self.nnz[q]);
        self.idx.reserve(pn + qn);
        self.val.reserve(pn + qn);
        let s = self.idx.len();
        let (mut a, mut b) = (pa, qa);
        let (ae, be) = (pa + pn, qa + qn);
        let g = 1.0 - h;
        let mut norm = 0.0;
        while a < ae || b < be {
            let ca = if a < ae { self.idx[a] } else { EMPTY };
            let cb = if b < be { self.idx[b] } else { EMPTY };
            let (c, v) = if ca < cb {
                a += 1;
                (ca, h * self.val[a - 1])
            } else if cb < ca {
                b += 1;
                (cb, g * self.val[b - 1])
            } else {
                a += 1;
                b += 1;
                (ca, h * self.val[a - 1] + g * self.val[b - 1])
            };
            if v != 0.0 {
                self.idx.push(c);
                self.val.push(v);
                norm += v * v;
            }
        }
        self.live = self.live - qn + (self.idx.len() - s);
        self.start[q] = s;
        self.nnz[q] = self.idx.len() - s;
        self.maybe_compact();
        norm
    }

    /// Removes vector j, moving the last one into its slot (as `SupportVectors::swap_remove`).
    pub fn swap_remove(&mut self, j: usize) {
        self.live -= self.nnz[j];
        self.start.swap_remove(j);
        self.nnz.swap_remove(j);
        self.maybe_compact();
    }

    fn maybe_compact(&mut self) {
        let garbage = self.idx.len() - self.live;
        if garbage > self.live.max(1024) {
            self.compact();
        }
    }

    /// Moves the live runs to the front of the arenas, in arena order (each run moves down, never
    /// over a run not yet moved).
    fn compact(&mut self) {
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(0..self.start.len());
        order.sort_unstable_by_key(|&j| self.start[j]);
        let mut to = 0;
        for &j in &order {
            let (from, n) = (self.start[j], self.nnz[j]);
            self.idx.copy_within(from..from + n, to);
            self.val.copy_within(from..from + n, to);
            self.start[j] = to;
            to += n;
        }
        self.idx.truncate(to);
        self.val.truncate(to);
        self.order = order;
    }

    /// Indices and values of all vectors in slot order, with row pointers (CSR).
    pub fn to_csr(&self) -> (Vec<usize>, Vec<u64>, Vec<f64>) {
        let mut indptr = Vec::with_capacity(self.len() + 1);
        let mut idx = Vec::with_capacity(self.live);
        let mut val = Vec::with_capacity(self.live);
        indptr.push(0);
        for j in 0..self.len() {
            let (i, v) = self.get(j);
            idx.extend_from_slice(i);
            val.extend_from_slice(v);
            indptr.push(idx.len());
        }
        (indptr, idx, val)
    }
}

/// The support vectors of a finished sparse model by column (a read-only inverted index), for
/// prediction: per column present, the (vector, value) pairs.
#[derive(Debug, Clone, Default)]
pub struct ColumnIndex {
    range_of: ColumnMap<(usize, usize)>,
    vector: Vec<u32>,
    value: Vec<f64>,
}

impl ColumnIndex {
    /// From CSR support vectors (rows = vectors).
    pub fn from_csr(indptr: &[usize], indices: &[u64], values: &[f64]) -> Self {
        let mut entries: Vec<(u64, u32, f64)> = Vec::with_capacity(indices.len());
        for j in 0..indptr.len().saturating_sub(1) {
            for k in indptr[j]..indptr[j + 1] {
                entries.push((indices[k], j as u32, values[k]));
            }
        }
        // By column, then vector: stable, so each list is in vector order.
        entries.sort_by_key(|e| (e.0, e.1));
        let mut index = ColumnIndex {
            range_of: ColumnMap::default(),
            vector: entries.iter().map(|e| e.1).collect(),
            value: entries.iter().map(|e| e.2).collect(),
        };
        let mut a = 0;
        while a < entries.len() {
            let mut b = a + 1;
            while b < entries.len() && entries[b].0 == entries[a].0 {
                b += 1;
            }
            index.range_of.insert(entries[a].0, (a, b));
            a = b;
        }
        index
    }

    /// The rows of `x` by column (rows = vectors).
    pub fn from_rows<R: Rows>(x: &R) -> Self {
        let mut indptr = Vec::with_capacity(x.n_rows() + 1);
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        indptr.push(0);
        for i in 0..x.n_rows() {
            x.for_each_nonzero(i, |c, v| {
                indices.push(c as u64);
                values.push(v);
            });
            indptr.push(indices.len());
        }
        Self::from_csr(&indptr, &indices, &values)
    }

    /// out[j] = <vector j, row i of x> (out zeroed first).
    pub fn dots_with_row<R: Rows>(&self, x: &R, i: usize, out: &mut [f64]) {
        out.fill(0.0);
        x.for_each_nonzero(i, |c, v| {
            if let Some(&(a, b)) = self.range_of.get(&(c as u64)) {
                for k in a..b {
                    out[self.vector[k] as usize] += v * self.value[k];
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::{CsrView, DenseView};

    fn random_sparse(rng: &mut Rng, dim: u64, nnz: usize) -> (Vec<u64>, Vec<f64>) {
        let mut idx: Vec<u64> = (0..nnz)
            .map(|_| (rng.next_f64() * dim as f64) as u64)
            .collect();
        idx.sort_unstable();
        idx.dedup();
        let val = idx.iter().map(|_| rng.next_f64() - 0.5).collect();
        (idx, val)
    }

    fn dense_of(idx: &[u64], val: &[f64], dim: usize) -> Vec<f64> {
        let mut d = vec![0.0; dim];
        for (&c, &v) in idx.iter().zip(val) {
            d[c as usize] += v;
        }
        d
    }

    #[test]
    fn probe_dot_equals_dense_dot_for_random_vectors() {
        let mut rng = Rng::new(11);
        let mut probe = RowProbe::new();
        for round in 0..300 {
            let dim = 1 + rng.below(500) as u64;
            let (na, nb) = (rng.below(80), rng.below(80));
            let (ai, av) = random_sparse(&mut rng, dim, na);
            let (bi, bv) = random_sparse(&mut rng, dim, nb);
            probe.load_sparse(&ai, &av);
            let (da, db) = (
                dense_of(&ai, &av, dim as usize),
                dense_of(&bi, &bv, dim as usize),
            );
            let direct: f64 = da.iter().zip(&db).map(|(a, b)| a * b).sum();
            let got = probe.dot(&bi, &bv);
            assert!(
                (got - direct).abs() <= 1e-12,
                "round {round}: {got} vs {direct}"
            );
        }
    }

    #[test]
    fn probe_handles_huge_column_ids_and_rows_of_every_length() {
        let mut probe = RowProbe::new();
        let idx: Vec<u64> = (0..1000)
            .map(|k| k * 1_000_000_007 + 999_999_999_999)
            .collect();
        let val: Vec<f64> = (0..1000).map(|k| k as f64).collect();
        probe.load_sparse(&idx, &val);
        for (&c, &v) in idx.iter().zip(&val) {
            assert_eq!(probe.get(c), v);
            assert_eq!(probe.get(c + 1), 0.0);
        }
        // A short row after a long one: the old entries are gone.
        probe.load_sparse(&[5], &[2.0]);
        assert_eq!(probe.get(idx[3]), 0.0);
        assert_eq!(probe.get(5), 2.0);
    }

    #[test]
    fn arena_merges_removals_and_compaction_match_dense_vectors() {
        let mut rng = Rng::new(7);
        let dim = 300usize;
        let mut arena = SparseArena::new();
        let mut reference: Vec<Vec<f64>> = Vec::new();
        for step in 0..3000 {
            let r = rng.next_f64();
            if arena.len() < 20 || r < 0.4 {
                let nnz = 1 + rng.below(40);
                let (i, v) = random_sparse(&mut rng, dim as u64, nnz);
                arena.push_sparse(&i, &v);
                reference.push(dense_of(&i, &v, dim));
            } else if r < 0.75 {
                let (p, q) = (rng.below(arena.len()), rng.below(arena.len()));
                if p == q {
                    continue;
                }
                let h = rng.next_f64();
                let norm = arena.merge_into(p, q, h);
                let z: Vec<f64> = reference[p]
                    .iter()
                    .zip(&reference[q])
                    .map(|(a, b)| h * a + (1.0 - h) * b)
                    .collect();
                let direct: f64 = z.iter().map(|v| v * v).sum();
                assert!(
                    (norm - direct).abs() <= 1e-12 * (1.0 + direct),
                    "step {step}"
                );
                reference[q] = z;
            } else {
                let j = rng.below(arena.len());
                arena.swap_remove(j);
                reference.swap_remove(j);
            }
            assert_eq!(arena.len(), reference.len());
        }
        // Dot products through the probe equal explicit ones, with a row and with a vector.
        let (ri, rv) = random_sparse(&mut rng, dim as u64, 60);
        let row_dense = dense_of(&ri, &rv, dim);
        let indptr = [0i64, ri.len() as i64];
        let ri64: Vec<i64> = ri.iter().map(|&c| c as i64).collect();
        let x = CsrView::new(&indptr, &ri64, &rv, dim).unwrap();
        let mut out = vec![0.0; arena.len()];
        let mut probe = RowProbe::new();
        arena.dots_with_row(&mut probe, &x, 0, dim, &mut out);
        for (j, want) in reference.iter().enumerate() {
            let direct: f64 = want.iter().zip(&row_dense).map(|(a, b)| a * b).sum();
            assert!((out[j] - direct).abs() <= 1e-12, "{} vs {direct}", out[j]);
        }
        arena.dots_with_vector(&mut probe, 3, &mut out);
        for (j, want) in reference.iter().enumerate() {
            let direct: f64 = want.iter().zip(&reference[3]).map(|(a, b)| a * b).sum();
            assert!((out[j] - direct).abs() <= 1e-12);
        }
        let mut live = 0;
        for (j, want) in reference.iter().enumerate() {
            let (i, v) = arena.get(j);
            assert!(i.windows(2).all(|w| w[0] < w[1]));
            let got = dense_of(i, v, dim);
            for (a, b) in got.iter().zip(want) {
                assert!((a - b).abs() <= 1e-12);
            }
            live += i.len();
        }
        assert_eq!(live, arena.live_nnz());
        // Compaction kept the arenas near the live size.
        assert!(arena.idx.len() <= 2 * arena.live_nnz().max(1024) + 1);
    }

    #[test]
    fn rows_load_into_probe_and_arena_with_unsorted_or_repeated_columns() {
        let indptr = [0i64, 3, 5];
        let indices = [4i64, 1, 4, 0, 2];
        let values = [1.0, 2.0, 3.0, 5.0, 7.0];
        let x = CsrView::new(&indptr, &indices, &values, 6).unwrap();
        let mut arena = SparseArena::new();
        arena.push_row(&x, 0, 6);
        assert_eq!(arena.get(0), (&[1u64, 4][..], &[2.0, 4.0][..]));
        let mut probe = RowProbe::new();
        probe.load_row(&x, 0, 6);
        assert_eq!(probe.get(4), 4.0);
        // Columns at or past dim are dropped, as the dense store drops them.
        arena.push_row(&x, 1, 1);
        assert_eq!(arena.get(1), (&[0u64][..], &[5.0][..]));
        let d = [0.0, 1.5, 0.0, 2.5];
        let dv = DenseView::new(&d, 1, 4).unwrap();
        arena.push_row(&dv, 0, 4);
        assert_eq!(arena.get(2), (&[1u64, 3][..], &[1.5, 2.5][..]));
    }
}
