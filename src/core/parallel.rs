//! The thread pool used for parallel kernel work. One pool for the process, resizable from Python
//! (`budgetsvm.set_num_threads`); 0 means one thread per core, which is rayon's default.

use std::sync::{Arc, RwLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::core::error::{Result, SvmError};

static POOL: RwLock<Option<(usize, Arc<ThreadPool>)>> = RwLock::new(None);

fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Sets the number of threads for parallel kernel computations (0 = all cores).
pub fn set_num_threads(n: usize) -> Result<()> {
    let n = if n == 0 { available_cores() } else { n };
    let pool = ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("budgetsvm-{i}"))
        .build()
        .map_err(|e| SvmError::invalid_parameter("n_threads", e))?;
    let mut guard = POOL.write().unwrap_or_else(|e| e.into_inner());
    *guard = Some((n, Arc::new(pool)));
    Ok(())
}

/// The number of threads parallel work will use.
pub fn num_threads() -> usize {
    let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().map_or_else(available_cores, |(n, _)| *n)
}

/// Runs `f` inside the configured pool (one thread per core until a count is set). Called
/// from a worker thread of a pool (nested parallel work, or a fit run by `install_with`), it
/// stays in that pool.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    let configured = {
        let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|(_, p)| Arc::clone(p))
    };
    // Until a thread count is set, a pool of one thread per core is made on first use: running
    // the whole job on a pool worker keeps the nested parallel loops of a solver from paying a
    // cross-thread hand-off each (rayon's global pool would be entered from outside every time).
    let pool = match configured {
        Some(p) => Some(p),
        None => set_num_threads(0).ok().and_then(|_| {
            let guard = POOL.read().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().map(|(_, p)| Arc::clone(p))
        }),
    };
    match pool {
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
            let n = if n == 0 { available_cores() } else { n };
            let pool = ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(|i| format!("budgetsvm-fit-{i}"))
                .build()
                .map_err(|e| SvmError::invalid_parameter("n_jobs", e))?;
            Ok(pool.install(f))
        }
    }
}
