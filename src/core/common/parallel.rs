//! The thread pool used for parallel kernel work. One pool for the process, resizable from Python
//! (`budgetsvm.set_num_threads`); 0 means the default: the count the environment gives
//! (`RAYON_NUM_THREADS`, else `OMP_NUM_THREADS`, as schedulers such as Dask's workers and
//! joblib's set them for the libraries they run), else one thread per core. The default is read
//! again at every use, so a limit set after import counts.
//!
//! Fork safety: a forked child inherits the pool's bookkeeping but none of its threads, so work
//! sent there would wait forever. The pool remembers the process that made it; in any other
//! process it is abandoned (leaked: its locks may be held by threads that no longer exist) and
//! rebuilt with the same size.

use std::sync::{Arc, RwLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::core::common::error::{Result, SvmError};

struct Pool {
    /// The count asked for: 0 for the default.
    requested: usize,
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

/// A thread count from the environment variables that limit a process's threads, in the order
/// they are honoured: rayon's own, then OpenMP's (its first level, `OMP_NUM_THREADS=4,2`). A
/// value that is not a positive count is skipped, as OpenMP runtimes skip it; one above
/// [`MAX_THREADS`] is taken as that.
fn environment_threads() -> Option<usize> {
    ["RAYON_NUM_THREADS", "OMP_NUM_THREADS"]
        .iter()
        .find_map(|name| threads_from_variable(&std::env::var(name).ok()?))
}

fn threads_from_variable(value: &str) -> Option<usize> {
    let first = value.split(',').next()?.trim();
    match first.parse::<usize>() {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n.min(MAX_THREADS)),
    }
}

/// The default thread count: the environment's, else one per core.
fn default_threads() -> usize {
    environment_threads().unwrap_or_else(available_cores)
}

/// A thread count as given (0 = all cores: an estimator's `n_jobs=-1` asks for them whatever
/// the environment says), checked against [`MAX_THREADS`].
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

/// Sets the number of threads for parallel kernel computations (0 = the default).
pub fn set_num_threads(requested: usize) -> Result<()> {
    let pool = Pool::new(requested)?;
    let mut guard = POOL.write().unwrap_or_else(|e| e.into_inner());
    replace_pool(&mut guard, pool);
    Ok(())
}

impl Pool {
    fn new(requested: usize) -> Result<Pool> {
        let threads = match requested {
            0 => default_threads(),
            n => resolve_threads("n_threads", n)?,
        };
        Ok(Pool {
            requested,
            threads,
            pool: Arc::new(build("n_threads", threads, "budgetsvm")?),
            pid: std::process::id(),
        })
    }
}

fn replace_pool(slot: &mut Option<Pool>, pool: Pool) {
    if let Some(old) = slot.replace(pool) {
        abandon_if_forked(old);
    }
}

/// The pool's count the environment gives now, when the pool follows it; None when the pool
/// is usable as it is (made in this process, of the count it must have).
fn stale_pool(pool: Option<&Pool>) -> Option<usize> {
    match pool {
        None => Some(0),
        Some(p) if p.pid != std::process::id() => Some(p.requested),
        Some(p) if p.requested == 0 && p.threads != default_threads() => Some(0),
        Some(_) => None,
    }
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
    match guard.as_ref() {
        Some(p) if p.requested != 0 => p.threads,
        _ => default_threads(),
    }
}

/// The count last given to [`set_num_threads`]: 0 for the default (also before any call).
pub fn requested_threads() -> usize {
    let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map_or(0, |p| p.requested)
}

/// The configured pool, made on first use, remade after a fork and, for the default count,
/// when the environment's count changed.
fn current_pool() -> Option<Arc<ThreadPool>> {
    {
        let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
        if stale_pool(guard.as_ref()).is_none() {
            return guard.as_ref().map(|p| Arc::clone(&p.pool));
        }
    }
    let mut guard = POOL.write().unwrap_or_else(|e| e.into_inner());
    // Checked again under the write lock: another thread may have set a count meanwhile.
    if let Some(requested) = stale_pool(guard.as_ref()) {
        replace_pool(&mut guard, Pool::new(requested).ok()?);
    }
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

    #[test]
    fn environment_counts_are_read_as_openmp_reads_them() {
        assert_eq!(threads_from_variable("3"), Some(3));
        assert_eq!(threads_from_variable(" 4,2"), Some(4));
        assert_eq!(threads_from_variable("0"), None);
        assert_eq!(threads_from_variable("-2"), None);
        assert_eq!(threads_from_variable("many"), None);
        assert_eq!(threads_from_variable(""), None);
        assert_eq!(threads_from_variable("99999999"), Some(MAX_THREADS));
    }
}
