//! Memory planning: the polish's peak bytes, and how the squared rows' copies and the cache
//! share `polish_cache_size`.

use super::segments::MAX_SEGMENT_ROWS;

/// Bytes `polish` holds at its peak for m support vectors, n rows and n_out outputs: K_SS, a
/// Gram matrix per output and the Newton system with its factor ((m + 1)^2 each), the kernel
/// values of one wave of segments in flight, the cache (at most all of K(X, S)), and per row and output f, the step and
/// the counted target.
pub(super) fn polish_bytes(m: usize, n: usize, n_out: usize, cache_bytes: usize) -> u128 {
    let (m, n, n_out) = (m as u128, n as u128, n_out as u128);
    let square = (m + 1) * (m + 1) * 8;
    let wave = 4 * rayon::current_num_threads().max(1) as u128 * MAX_SEGMENT_ROWS as u128 * m * 8;
    let cache = (cache_bytes as u128).min(n * m * 8);
    square * (3 + n_out) + wave + cache + n * n_out * 32
}

/// What share of the squared rows get copies of their kernel values (`copy_bytes` each:
/// halves or f32) when `squared` rows are expected: all of them while their copies fit
/// `cache_bytes` (they displace cached segments, `Segments::plan_budget`), else the share that
/// fits, in every segment alike. The rows beyond it are computed again by every Hessian
/// product (`recomputed_product`): the copies are the one part of a Hessian-free solve that
/// grows with the rows (a million hard10d rows, B = 10,000: about 190,000 squared rows,
/// 3.8 GB in halves), and polish_cache_size bounds them as it bounds the cache.
pub(super) fn copy_share(
    squared: usize,
    m: usize,
    copy_bytes: usize,
    cache_bytes: usize,
) -> CopyShare {
    let copies = squared as f64 * m as f64 * copy_bytes as f64;
    if copies <= cache_bytes as f64 {
        CopyShare::All
    } else {
        CopyShare::Part(cache_bytes as f64 / copies)
    }
}

/// `copy_share`'s answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum CopyShare {
    All,
    Part(f64),
}

impl CopyShare {
    /// The copies a segment with `squared` squared rows makes (all it finds, under `All`).
    pub(super) fn limit(self, squared: usize) -> usize {
        match self {
            CopyShare::All => usize::MAX,
            CopyShare::Part(share) => (squared as f64 * share).floor() as usize,
        }
    }
}

/// The cache's bytes on the first pass of a Hessian-free solve: what the squared rows' copies
/// (a `share` of the rows, in halves) leave of `budget`.
pub(super) fn first_pass_room(budget: usize, n: usize, m: usize, share: f64) -> usize {
    let copies = share.clamp(0.0, 1.0) * (n * m * 2) as f64;
    (budget as f64 - copies).max(0.0) as usize
}
