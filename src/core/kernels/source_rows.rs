//! Kernel rows by data row from a producer outside the problem's own computation: a callable
//! kernel's rows, computed in Python on request (`py::exact`), behind every problem of a fit.
//!
//! The store keeps, least recently used within a byte budget, the n-long row k(x_g, .) of each
//! data row it was asked for; a problem's row by position (permuted by shrinking, a one-vs-one
//! pair's rows a subset of the data rows, SVR's two variables one data row) is gathered from it
//! (`kernel_rows::DotPath::Sources`) into the problem's own `KernelRowCache`, which keeps the
//! rows the solver works with, as for any problem. So the kernel is never asked for more than
//! the rows the solvers need, and never for the whole n x n matrix at once.
//!
//! A producer gives its values in f64 and the store keeps them in the type of the fit's kernel
//! rows (`RowValue`: f32 unless the problem needs f64, `exact::dual::RowPrecision`), so the
//! fit makes the store once it has chosen that type. A producer that fails (the Python
//! function raised) is asked nothing more: the store answers with rows of zeros from then on,
//! and the producer keeps the error for the caller, who stops the solver (the binding's
//! monitor) and raises it.

use std::sync::{Arc, Mutex};

use crate::core::common::error::Result;
use crate::core::kernels::kernel_cache::RowLru;
use crate::core::kernels::kernel_rows::{Scratch, SourceRows};
use crate::core::simd::RowValue;

/// Where a store's rows come from.
pub(crate) trait RowProducer: Sync {
    /// The data rows (the length of every row).
    fn n(&self) -> usize;
    /// Writes the kernel rows of the data rows `rows` into `out` (one n-long slice each, in
    /// the same order); returns the kernel values computed.
    fn produce(&self, rows: &[u32], out: &mut [&mut [f64]], scratch: &mut Scratch) -> Result<u64>;
}

/// Counters of a store's life.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceStats {
    /// Rows asked for that were stored.
    pub hits: u64,
    /// Rows produced.
    pub misses: u64,
    /// Rows dropped to make room.
    pub evictions: u64,
}

/// The stored rows by data row, and the producer's failure.
struct SourceLru<T> {
    rows: RowLru<T>,
    stats: SourceStats,
    /// Set once the producer failed (its error is the producer's to report).
    failed: bool,
}

/// The store (module doc).
pub(crate) struct SourceKernelRows<'p, T> {
    producer: &'p dyn RowProducer,
    budget_bytes: usize,
    lru: Mutex<SourceLru<T>>,
}

impl<'p, T: RowValue> SourceKernelRows<'p, T> {
    /// A store of at most `budget_bytes` of rows (always the rows of the request being served).
    pub(crate) fn new(producer: &'p dyn RowProducer, budget_bytes: usize) -> Self {
        let n = producer.n();
        SourceKernelRows {
            producer,
            budget_bytes,
            lru: Mutex::new(SourceLru {
                rows: RowLru::new(n),
                stats: SourceStats::default(),
                failed: false,
            }),
        }
    }

    #[cfg(test)]
    fn stats(&self) -> SourceStats {
        self.lock().stats.clone()
    }

    /// Whether the producer failed (it is then asked nothing more).
    #[cfg(test)]
    fn failed(&self) -> bool {
        self.lock().failed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SourceLru<T>> {
        // At worst a row is produced again after a panic elsewhere.
        self.lru.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: RowValue> SourceRows<T> for SourceKernelRows<'_, T> {
    fn n_sources(&self) -> usize {
        self.producer.n()
    }

    fn rows(&self, sources: &[u32], scratch: &mut Scratch) -> (Vec<Arc<[T]>>, u64) {
        let n = self.producer.n();
        let mut found: Vec<Option<Arc<[T]>>> = Vec::with_capacity(sources.len());
        let mut missing: Vec<u32> = Vec::new();
        let failed = {
            let mut lru = self.lock();
            for &g in sources {
                let row = lru.rows.get(g);
                if row.is_some() {
                    lru.stats.hits += 1;
                } else if !missing.contains(&g) {
                    missing.push(g);
                }
                found.push(row);
            }
            lru.failed
        };
        let mut computed = 0;
        if !missing.is_empty() {
            let mut wide = vec![0.0f64; missing.len() * n];
            let outcome = if failed || n == 0 {
                Ok(0)
            } else {
                let mut out: Vec<&mut [f64]> = wide.chunks_mut(n).collect();
                self.producer.produce(&missing, &mut out, scratch)
            };
            let fresh: Vec<Arc<[T]>> = (0..missing.len())
                .map(|k| {
                    wide[k * n..(k + 1) * n]
                        .iter()
                        .map(|&v| T::narrow(v))
                        .collect()
                })
                .collect();
            let mut lru = self.lock();
            match outcome {
                Ok(values) => computed = values,
                Err(_) => lru.failed = true,
            }
            let keep = !lru.failed;
            for (&g, row) in missing.iter().zip(&fresh) {
                lru.stats.misses += 1;
                if keep {
                    lru.stats.evictions += lru.rows.insert(g, row, self.budget_bytes);
                }
            }
            for (row, &g) in found.iter_mut().zip(sources) {
                if row.is_none() {
                    let k = missing.iter().position(|&m| m == g).unwrap_or(0);
                    *row = Some(Arc::clone(&fresh[k]));
                }
            }
        }
        (found.into_iter().flatten().collect(), computed)
    }
}

/// Rows computed from the data rows' features (the tests' producer).
#[cfg(test)]
pub(crate) struct DataRowProducer<'s, R: crate::core::data::rows::Rows> {
    computer: crate::core::kernels::kernel_rows::RowComputer<'s, R, f64>,
}

#[cfg(test)]
impl<'s, R: crate::core::data::rows::Rows> DataRowProducer<'s, R> {
    pub(crate) fn new(
        x: &'s R,
        kernel: crate::core::kernels::kernel::Kernel,
        sq_norms: Vec<f64>,
    ) -> Result<Self> {
        Ok(DataRowProducer {
            computer: crate::core::kernels::kernel_rows::RowComputer::for_data(
                x, kernel, sq_norms,
            )?,
        })
    }
}

#[cfg(test)]
impl<R: crate::core::data::rows::Rows> RowProducer for DataRowProducer<'_, R> {
    fn n(&self) -> usize {
        self.computer.n
    }

    fn produce(&self, rows: &[u32], out: &mut [&mut [f64]], scratch: &mut Scratch) -> Result<u64> {
        let jobs = rows
            .iter()
            .zip(out.iter_mut())
            .map(|(&g, out)| crate::core::kernels::kernel_rows::RowJob {
                pos: g as usize,
                from: 0,
                out: &mut out[..],
            })
            .collect();
        Ok(self.computer.compute(jobs, scratch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::error::SvmError;
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::Rows;
    use crate::core::data::rows::{finite_sq_norms, CsrView, DenseView, SubsetRows};
    use crate::core::kernels::kernel::Kernel;
    use crate::core::kernels::kernel_block::kernel_matrix;
    use crate::core::kernels::kernel_cache::KernelRowCache;

    /// An SVR problem's rows (each data row twice, the copies after the originals) read through
    /// a store of `budget_rows` rows, with shrinking's swaps, against the kernel matrix.
    fn check<R: Rows>(x: &R, budget_rows: usize, seed: u64) {
        let gamma = 0.4;
        let n = x.n_rows();
        let mut full = vec![0.0; n * n];
        kernel_matrix(x, x, gamma, &mut full).unwrap();
        let rows: Vec<usize> = (0..n).chain(0..n).collect();
        let sub = SubsetRows::new(x, &rows).unwrap();
        let norms = finite_sq_norms(x, "X").unwrap();
        let sub_norms: Vec<f64> = rows.iter().map(|&i| norms[i]).collect();
        let kernel = Kernel::rbf(gamma);
        let producer = DataRowProducer::new(x, kernel, norms).unwrap();
        let store = SourceKernelRows::<f32>::new(&producer, budget_rows * n * 4);
        // The problem's own cache holds three of its rows: most requests reach the store.
        let mut cache = KernelRowCache::<_, f32>::with_source_rows(
            &sub,
            kernel,
            sub_norms,
            3 * 2 * n * 4,
            &store,
        )
        .unwrap();
        let mut perm: Vec<usize> = (0..2 * n).collect();
        let mut rng = Rng::new(seed);
        for step in 0..40 {
            let idx: Vec<usize> = (0..1 + rng.below(3)).map(|_| rng.below(2 * n)).collect();
            let len = 1 + rng.below(2 * n);
            let got = cache.rows_prefix(&idx, len).unwrap();
            for (q, &p) in idx.iter().enumerate() {
                let g = rows[perm[p]];
                for (col, &v) in got.row(q).iter().enumerate() {
                    let h = rows[perm[col]];
                    // A row's own data row (its twin's entry too) holds k(x, x) from the norm.
                    let e = if h == g { 1.0 } else { full[g * n + h] };
                    assert!(
                        (f64::from(v) - e).abs() <= 1e-7,
                        "step {step}: position {p} entry {col}: {v} vs {e}"
                    );
                }
            }
            let (s, t) = (rng.below(2 * n), rng.below(2 * n));
            if s != t {
                cache.swap_positions(&[(s, t)]);
                perm.swap(s, t);
            }
        }
        let stats = store.stats();
        assert!(stats.misses > 0);
        assert!(stats.misses <= n as u64 || stats.evictions > 0, "{stats:?}");
        assert!(!store.failed());
    }

    /// A producer that fails from its second call on.
    struct Failing {
        n: usize,
        calls: std::sync::atomic::AtomicUsize,
    }

    impl RowProducer for Failing {
        fn n(&self) -> usize {
            self.n
        }
        fn produce(&self, rows: &[u32], out: &mut [&mut [f64]], _: &mut Scratch) -> Result<u64> {
            if self
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                > 0
            {
                return Err(SvmError::invalid_input("the kernel function failed"));
            }
            for (row, &g) in out.iter_mut().zip(rows) {
                row.fill(f64::from(g));
            }
            Ok((rows.len() * self.n) as u64)
        }
    }

    #[test]
    fn a_failed_producer_is_asked_nothing_more_and_its_error_kept() {
        let failing = Failing {
            n: 5,
            calls: Default::default(),
        };
        let store = SourceKernelRows::<f32>::new(&failing, 1 << 20);
        let mut scratch = Scratch::default();
        let (rows, computed) = store.rows(&[3, 1, 3], &mut scratch);
        assert_eq!(computed, 10);
        assert_eq!(rows.len(), 3);
        assert!(rows[0].iter().all(|&v| v == 3.0) && rows[1].iter().all(|&v| v == 1.0));
        let (rows, computed) = store.rows(&[4], &mut scratch);
        assert_eq!((computed, rows[0].iter().sum::<f32>()), (0, 0.0));
        assert!(store.failed());
        // Asked once more: no call (the count stays at two), stored rows still served.
        let (rows, _) = store.rows(&[2, 3], &mut scratch);
        assert_eq!(failing.calls.load(std::sync::atomic::Ordering::Relaxed), 2);
        assert!(rows[1].iter().all(|&v| v == 3.0) && rows[0].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn gathered_rows_match_the_kernel_matrix() {
        for (n, d, seed) in [(30, 4, 1), (57, 3, 2), (1100, 5, 3)] {
            let t = crate::core::kernels::kernel_cache::tests::data(n, d, seed);
            let dense = DenseView::new(&t.dense, n, d).unwrap();
            let csr = CsrView::new(&t.indptr, &t.indices, &t.values, d).unwrap();
            // Budgets: two rows (evictions within a request's neighbours) and all of them.
            for budget in [2, n] {
                check(&dense, budget, seed);
                check(&csr, budget, seed + 10);
            }
        }
    }
}
