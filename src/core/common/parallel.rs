//! The thread pool used for parallel kernel work. One pool for the process, resizable from Python
//! (`budgetsvm.set_num_threads`); 0 means one thread per core, which is rayon's default.
//!
//! Fork safety: a forked child inherits the pool's bookkeeping but none of its threads, so work
//! sent there would wait forever. The pool remembers the process that made it; in any other
//! process it is abandoned (leaked: its locks may be held by threads that no longer exist) and
//! rebuilt with the same size.

use std::sync::{Arc, RwLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::core::common::error::{Result, SvmError};

struct Pool {
    threads: usize,
    pool: Arc<ThreadPool>,
    pid: u32,
}

static POOL: RwLock<Option<Pool>> = RwLock::new(None);

/// More threads than this is a mistake (a count of bytes, a typo), not a machine: refusing it
/// beats spending minutes creating threads.
pub const MAX_THREADS: usize = 1024;

fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A thread count as given (0 = all cores), checked against [`MAX_THREADS`].
pub fn resolve_threads(name: &'static str, n: usize) -> Result<usize> {
    if n > MAX_THREADS {
        return Err(SvmError::invalid_parameter(
            name,
            format!("{n} threads is more than the {MAX_THREADS} allowed; use 0 for one per core"),
        ));
    }
    Ok(if n == 0 { available_cores() } else { n })
}

fn build(name: &'static str, n: usize, prefix: &'static str) -> Result<ThreadPool> {
    ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(move |i| format!("{prefix}-{i}"))
        .build()
        .map_err(|e| SvmError::invalid_parameter(name, e))
}

/// Sets the number of threads for parallel kernel computations (0 = all cores).
pub fn set_num_threads(n: usize) -> Result<()> {
    let n = resolve_threads("n_threads", n)?;
    let pool = build("n_threads", n, "budgetsvm")?;
    let mut guard = POOL.write().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = guard.take() {
        abandon_if_forked(old);
    }
    *guard = Some(Pool {
        threads: n,
        pool: Arc::new(pool),
        pid: std::process::id(),
    });
    Ok(())
}

/// Drops a pool normally in the process that made it; in a forked child leaks it instead.
fn abandon_if_forked(old: Pool) {
    if old.pid != std::process::id() {
        std::mem::forget(old.pool);
    }
}

/// The number of threads parallel work will use.
pub fn num_threads() -> usize {
    let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map_or_else(available_cores, |p| p.threads)
}

/// The configured pool, made on first use (one thread per core) and remade after a fork.
fn current_pool() -> Option<Arc<ThreadPool>> {
    {
        let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = guard.as_ref() {
            if p.pid == std::process::id() {
                return Some(Arc::clone(&p.pool));
            }
        }
    }
    let threads = {
        let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or(0, |p| p.threads)
    };
    set_num_threads(threads).ok()?;
    let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map(|p| Arc::clone(&p.pool))
}

/// The length of the parallel work items that split `len` elements into about eight per thread
/// of the current pool, kept within `min..=max` (a few microseconds of work each: fewer items
/// leave one thread idle at the end of a region, shorter ones cost more to hand out).
pub fn item_len(len: usize, min: usize, max: usize) -> usize {
    (len / (8 * rayon::current_num_threads())).clamp(min, max)
}

/// Runs `f` inside the configured pool (one thread per core until a count is set). Called
/// from a worker thread of a pool (nested parallel work, or a fit run by `install_with`), it
/// stays in that pool.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    // Running the whole job on a pool worker keeps the nested parallel loops of a solver from
    // paying a cross-thread hand-off each (rayon's global pool would be entered from outside
    // every time).
    match current_pool() {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// Runs `f` on a pool of `n_threads` threads made for it (0 = one per core), or in the
/// configured pool for `None`: a per-call thread count (an estimator's `n_jobs`) that leaves
/// the process-wide setting alone.
pub fn install_with<R: Send>(n_threads: Option<usize>, f: impl FnOnce() -> R + Send) -> Result<R> {
    match n_threads {
        None => Ok(install(f)),
        Some(n) => {
            let n = resolve_threads("n_jobs", n)?;
            Ok(build("n_jobs", n, "budgetsvm-fit")?.install(f))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_checked() {
        assert!(resolve_threads("n_jobs", MAX_THREADS + 1).is_err());
        assert!(resolve_threads("n_jobs", 1_000_000).is_err());
        assert_eq!(resolve_threads("n_jobs", 3).unwrap(), 3);
        assert!(resolve_threads("n_jobs", 0).unwrap() >= 1);
        assert!(install_with(Some(usize::MAX), || ()).is_err());
    }
}
