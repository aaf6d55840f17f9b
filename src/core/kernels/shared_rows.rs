//! One kernel-row store for all the pair problems of a one-vs-one fit.
//!
//! Pair (a, b) needs, for a row x_g of class a, the kernel values of x_g against the rows of
//! class a and of class b. The part against its own class, k(x_g, x_h) for the rows h of class
//! a, is the same in each of the K - 1 pairs x_g belongs to; the store keeps it (the row's
//! *own-class segment*, in class order) in an LRU of `cache_bytes` shared by all pairs, computed
//! once over the fit's rows grouped by class (one feature-major copy or column index for the
//! whole fit, not one per pair). The part against the other class is needed by pair (a, b)
//! alone and is computed straight into the pair's row. A pair problem holds class a's rows and
//! then class b's (LIBSVM's order), so while its positions are in order its kernel row of x_g is
//! a copy of the stored segment next to the computed one; once shrinking has swapped positions,
//! the row is gathered through the permutation. A pair's own `KernelRowCache` (positions,
//! prefixes, shrinking, as for a binary problem) keeps the rows as before.
//!
//! No value is computed that the pair alone would not have computed, and the values do not
//! depend on which pair computed a segment or on the number of threads (the same arithmetic as a
//! binary problem's row path, over the grouped data), so the pairs still run in parallel and a
//! fit gives one model on any number of threads.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::core::common::error::{Result, SvmError};
use crate::core::data::rows::Rows;
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_cache::RowLru;
use crate::core::kernels::kernel_rows::{
    OwnSegment, RowComputer, RowJob, Scratch, SegmentRequest, SegmentSource, NONE,
};
use crate::core::simd::RowValue;

/// Counters of a shared store's life.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SegmentStats {
    /// Own-class segments asked for that were stored.
    pub hits: u64,
    /// Own-class segments computed.
    pub misses: u64,
    /// Segments dropped to make room.
    pub evictions: u64,
    /// Kernel values computed (own-class segments and other-class parts).
    pub values: u64,
}

/// The stored own-class segments by fit row, least recently used last.
struct Lru<T> {
    segments: RowLru<T>,
    stats: SegmentStats,
    /// Per class: segments stored, and segments found stored.
    class_stored: Vec<u64>,
    class_hits: Vec<u64>,
}

/// Bytes of a class's segments stored before their reuse is judged.
const TRIAL_BYTES: u64 = 1 << 20;

impl<T> Lru<T> {
    /// Whether new segments of class c (of `len` values) are worth storing: storing costs an
    /// allocation, its first touch and a copy into the pair's row, and the traffic pushes the
    /// solver's arrays out of cache (shuttle's large class, segments of 34,108 values seldom
    /// asked for again: pairs 30% slower when every one was stored), so after a trial of
    /// `TRIAL_BYTES` a class is stored only while at least a quarter of its stored segments are
    /// found again.
    fn keeps(&self, c: usize, len: usize) -> bool {
        let bytes = (len * std::mem::size_of::<T>()) as u64;
        let trial = self.class_stored[c] * bytes < TRIAL_BYTES;
        trial || 4 * self.class_hits[c] >= self.class_stored[c]
    }
}

/// The store of a one-vs-one fit: the rows grouped by class, their own-class segments computed
/// on demand and kept least-recently-used within a byte budget.
pub struct SharedKernelRows<'s, R: Rows, T: RowValue> {
    /// Kernel values over the class-grouped rows (positions never move).
    computer: RowComputer<'s, R, T>,
    /// Class c's rows sit at grouped positions class_start[c]..class_start[c + 1].
    class_start: Vec<usize>,
    /// Per fit row: its grouped position, and its class.
    position: Vec<u32>,
    class_of: Vec<u32>,
    budget_bytes: usize,
    lru: Mutex<Lru<T>>,
    /// Kernel values computed (kept apart from the LRU's lock).
    values: AtomicU64,
}

thread_local! {
    /// Scratch of the store's computations on this thread.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

impl<'s, R: Rows, T: RowValue> SharedKernelRows<'s, R, T> {
    /// `grouped`: the fit's rows ordered by class (class c's rows at
    /// `class_start[c]..class_start[c + 1]`, in their order), `sq_norms` theirs in that order,
    /// `position[g]`: where fit row g sits in `grouped`.
    pub fn new(
        grouped: &'s R,
        kernel: Kernel,
        sq_norms: Vec<f64>,
        class_start: Vec<usize>,
        position: Vec<u32>,
        budget_bytes: usize,
    ) -> Result<Self> {
        let n = grouped.n_rows();
        let ordered = class_start.windows(2).all(|w| w[0] <= w[1]);
        if class_start.first() != Some(&0) || class_start.last() != Some(&n) || !ordered {
            return Err(SvmError::invalid_input(
                "class starts must rise from 0 to the number of rows",
            ));
        }
        if position.len() != n || position.iter().any(|&p| p as usize >= n) || n >= NONE as usize {
            return Err(SvmError::invalid_input(
                "one grouped position per row is needed",
            ));
        }
        let mut class_of = vec![0u32; n];
        for (c, w) in class_start.windows(2).enumerate() {
            class_of[w[0]..w[1]].fill(c as u32);
        }
        let class_of = position.iter().map(|&p| class_of[p as usize]).collect();
        let n_classes = class_start.len() - 1;
        Ok(SharedKernelRows {
            computer: RowComputer::for_data(grouped, kernel, sq_norms)?,
            class_start,
            position,
            class_of,
            budget_bytes,
            lru: Mutex::new(Lru {
                segments: RowLru::new(n),
                stats: SegmentStats::default(),
                class_stored: vec![0; n_classes],
                class_hits: vec![0; n_classes],
            }),
            values: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> SegmentStats {
        SegmentStats {
            values: self.values.load(Ordering::Relaxed),
            ..self.lock().stats.clone()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru<T>> {
        // A panic elsewhere cannot leave the list half-updated in a way that matters here: at
        // worst a segment is computed again.
        self.lru.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<R: Rows, T: RowValue> SegmentSource<T> for SharedKernelRows<'_, R, T> {
    fn own_segment(&self, g: usize) -> OwnSegment<T> {
        let class = self.class_of[g] as usize;
        let mut lru = self.lock();
        if let Some(values) = lru.segments.get(g as u32) {
            lru.stats.hits += 1;
            lru.class_hits[class] += 1;
            return OwnSegment::Stored(values);
        }
        if lru.keeps(class, self.segment_len(g)) {
            OwnSegment::Wanted
        } else {
            OwnSegment::NotKept
        }
    }

    fn keep_segment(&self, g: usize, values: Arc<[T]>) {
        // Computed outside the lock: other pairs went on meanwhile (two pairs asking for the
        // same missing segment at once both computed it, with the same values).
        let class = self.class_of[g] as usize;
        let mut lru = self.lock();
        lru.stats.misses += 1;
        if !lru.segments.contains(g as u32) {
            lru.class_stored[class] += 1;
        }
        lru.stats.evictions += lru.segments.insert(g as u32, &values, self.budget_bytes);
    }

    fn segment_len(&self, g: usize) -> usize {
        let class = self.class_of[g] as usize;
        self.class_start[class + 1] - self.class_start[class]
    }

    fn compute_all(&self, requests: &mut [SegmentRequest<'_, T>]) -> u64 {
        if requests.is_empty() {
            return 0;
        }
        let jobs: Vec<RowJob<'_, T>> = requests
            .iter_mut()
            .map(|r| RowJob {
                pos: self.position[r.g] as usize,
                from: self.class_start[r.class as usize] + r.from,
                out: &mut *r.out,
            })
            .collect();
        let computed = SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.computer.compute(jobs, &mut scratch),
            // This thread is inside another computation (a task it took over while waiting
            // in that one's parallel loop): scratch of its own.
            Err(_) => self.computer.compute(jobs, &mut Scratch::default()),
        });
        self.values.fetch_add(computed, Ordering::Relaxed);
        computed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::{finite_sq_norms, CsrView, DenseView, SubsetRows};
    use crate::core::kernels::kernel_block::kernel_matrix;
    use crate::core::kernels::kernel_cache::KernelRowCache;
    use crate::core::kernels::kernel_rows::PairSegments;

    /// The grouping a one-vs-one fit makes: rows by class (stable), class starts, positions,
    /// each row's class and rank in it.
    fn group(y: &[u32], k: usize) -> (Vec<usize>, Vec<usize>, Vec<u32>, Vec<u32>) {
        let mut order: Vec<usize> = (0..y.len()).collect();
        order.sort_by_key(|&i| y[i]);
        let mut start = vec![0usize; k + 1];
        for &c in y {
            start[c as usize + 1] += 1;
        }
        for c in 0..k {
            start[c + 1] += start[c];
        }
        let mut position = vec![0u32; y.len()];
        let mut rank = vec![0u32; y.len()];
        for (p, &g) in order.iter().enumerate() {
            position[g] = p as u32;
            rank[g] = (p - start[y[g] as usize]) as u32;
        }
        (order, start, position, rank)
    }

    fn check<R: Rows>(x: &R, y: &[u32], k: usize, budget: usize, seed: u64) {
        let gamma = 0.6;
        let n = x.n_rows();
        let mut full = vec![0.0; n * n];
        kernel_matrix(x, x, gamma, &mut full).unwrap();
        let (order, start, position, rank) = group(y, k);
        let grouped = SubsetRows::new(x, &order).unwrap();
        let norms = finite_sq_norms(&grouped, "X").unwrap();
        let store = SharedKernelRows::<_, f32>::new(
            &grouped,
            Kernel::rbf(gamma),
            norms,
            start,
            position,
            budget,
        )
        .unwrap();
        let mut rng = Rng::new(seed);
        let mut computed = 0;
        let mut asked = 0;
        for a in 0..k as u32 {
            for b in a + 1..k as u32 {
                let of = |c: u32| (0..n).filter(move |&i| y[i] == c);
                let rows: Vec<usize> = of(a).chain(of(b)).collect();
                let m = rows.len();
                let sub = SubsetRows::new(x, &rows).unwrap();
                let segments = PairSegments::new(&store, (a, b), &rows, y, &rank).unwrap();
                let norms = finite_sq_norms(&sub, "X").unwrap();
                let mut cache = KernelRowCache::<_, f32>::with_segments(
                    &sub,
                    Kernel::rbf(gamma),
                    norms,
                    4 * m * 3,
                    segments,
                )
                .unwrap();
                let mut perm: Vec<usize> = (0..m).collect();
                for _ in 0..12 {
                    let idx: Vec<usize> = (0..1 + rng.below(3)).map(|_| rng.below(m)).collect();
                    let len = 1 + rng.below(m);
                    let got = cache.rows_prefix(&idx, len).unwrap();
                    for (q, &p) in idx.iter().enumerate() {
                        for (col, &v) in got.row(q).iter().enumerate() {
                            let e = full[rows[perm[p]] * n + rows[perm[col]]];
                            assert!((f64::from(v) - e).abs() <= 1e-7, "{v} vs {e}");
                        }
                    }
                    // Shrinking's swaps move positions; the segments follow through perm.
                    let (s, t) = (rng.below(m), rng.below(m));
                    if s != t {
                        cache.swap_positions(&[(s, t)]);
                        perm.swap(s, t);
                    }
                    asked += 1;
                }
                computed += cache.stats().values;
            }
        }
        let stats = store.stats();
        assert!(
            stats.values <= computed,
            "the store computes only what pairs ask for"
        );
        assert!(stats.misses > 0 && asked > 0);
    }

    #[test]
    fn pair_rows_from_segments_match_the_kernel_matrix() {
        for (n, d, k, seed) in [(60, 3, 3, 1), (300, 7, 5, 2), (150, 40, 4, 3)] {
            let t = crate::core::kernels::kernel_cache::tests::data(n, d, seed);
            let y: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();
            let dense = DenseView::new(&t.dense, n, d).unwrap();
            let csr = CsrView::new(&t.indptr, &t.indices, &t.values, d).unwrap();
            // Budgets: a few segments (evictions) and all of them.
            for budget in [4 * n, 1 << 24] {
                check(&dense, &y, k, budget, n as u64);
                check(&csr, &y, k, budget, n as u64 + 1);
            }
        }
    }

    #[test]
    fn own_class_segments_are_computed_once_for_all_pairs() {
        let mut rng = Rng::new(5);
        let (n, d, k) = (90usize, 2usize, 3usize);
        let xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64()).collect();
        let y: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();
        let x = DenseView::new(&xs, n, d).unwrap();
        let (order, start, position, rank) = group(&y, k);
        let grouped = SubsetRows::new(&x, &order).unwrap();
        let norms = finite_sq_norms(&grouped, "X").unwrap();
        let store = SharedKernelRows::<_, f32>::new(
            &grouped,
            Kernel::rbf(1.0),
            norms,
            start,
            position,
            1 << 20,
        )
        .unwrap();
        // Row 0 (class 0) in pairs (0, 1) and (0, 2): its class-0 segment is computed once.
        for b in [1u32, 2] {
            let y = &y;
            let of = |c: u32| (0..n).filter(move |&i| y[i] == c);
            let rows: Vec<usize> = of(0).chain(of(b)).collect();
            let segments = PairSegments::new(&store, (0, b), &rows, y, &rank).unwrap();
            let sub = SubsetRows::new(&x, &rows).unwrap();
            let norms = finite_sq_norms(&sub, "X").unwrap();
            let mut cache = KernelRowCache::<_, f32>::with_segments(
                &sub,
                Kernel::rbf(1.0),
                norms,
                1 << 20,
                segments,
            )
            .unwrap();
            cache.rows(&[0]).unwrap();
        }
        let stats = store.stats();
        // One own-class segment computed and then found; the two other-class parts computed.
        assert_eq!((stats.misses, stats.hits), (1, 1));
        assert_eq!(stats.values, 3 * 30);
    }

    #[test]
    fn rejects_inconsistent_groupings() {
        let xs = [0.0, 1.0, 2.0];
        let x = DenseView::new(&xs, 3, 1).unwrap();
        let norms = vec![0.0, 1.0, 4.0];
        let bad_start = SharedKernelRows::<_, f32>::new(
            &x,
            Kernel::rbf(1.0),
            norms.clone(),
            vec![0, 2],
            vec![0, 1, 2],
            1,
        );
        assert!(bad_start.is_err());
        let bad_pos = SharedKernelRows::<_, f32>::new(
            &x,
            Kernel::rbf(1.0),
            norms,
            vec![0, 1, 3],
            vec![0, 1, 3],
            1,
        );
        assert!(bad_pos.is_err());
        let store = SharedKernelRows::<_, f32>::new(
            &x,
            Kernel::rbf(1.0),
            vec![0.0, 1.0, 4.0],
            vec![0, 1, 3],
            vec![0, 1, 2],
            1,
        )
        .unwrap();
        // Row 2 is in class 1, not in pair (0, 2); rows of a class out of their order.
        assert!(PairSegments::new(&store, (0, 2), &[0, 2], &[0, 1, 1], &[0, 0, 1]).is_err());
        assert!(PairSegments::new(&store, (0, 1), &[0, 2, 1], &[0, 1, 1], &[0, 0, 1]).is_err());
        assert!(PairSegments::new(&store, (0, 1), &[0, 1, 2], &[0, 1, 1], &[0, 0, 1]).is_ok());
    }
}
