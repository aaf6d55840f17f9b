//! The polish: the exact solve of a budgeted model's coefficients over its basis S
//! (`../shared/POLISH.md`). The budgeted pass chooses S well and its coefficients poorly; the
//! polish keeps S and solves, for each output,
//!
//!   min_{beta, b}  1/2 beta^T K_SS beta + C sum_i w_i max(0, 1 - y_i (k_i . beta + b))^2
//!
//! over every training row, k_i = (k(x_i, s_1), ..., k(x_i, s_m)): the squared-hinge SVM with an
//! unregularised intercept restricted to span(S) (Keerthi, Chapelle & DeCoste 2006). Two
//! classes give one output (y = +1 for class 1), more give one per class, one-vs-rest.
//!
//! Method: primal Newton with an exact line search (Keerthi & DeCoste 2005). With the active set
//! A = {i : y_i f_i < 1} fixed the objective is quadratic, and its minimiser solves
//!
//!   [K_SS + 2C M    2C s ] [beta]   [2C u    ]
//!   [2C s^T         2C sw] [b   ] = [2C sum_A w y]
//!
//! with M = sum_A w k k^T, s = sum_A w k, u = sum_A w y k, sw = sum_A w. The direction to that
//! minimiser is searched exactly along the piecewise-quadratic objective; the active set then
//! changes, and M, s, u are updated by the rows that entered or left (after the first steps few
//! do), so an iteration costs one product K d over all rows plus m^2 per changed row and one
//! Cholesky factorisation of (m + 1)^2. It stops when a full step leaves the active set as it
//! was (the exact minimiser), when the objective falls by less than `tol` relative, or after
//! `max_iter` iterations. Every iteration is a sum over rows, which is what a distributed solve
//! needs (each worker returns its part of M, s, u and of K d).
//!
//! K_SS may be singular (merged or near-duplicate vectors): the system gets a ridge of
//! `RIDGE` times K_SS's largest diagonal entry (1 for the Gaussian kernel), ten times more per
//! failed factorisation. A
//! direction v with K_SS v = 0 changes no function value (sum_j v_j phi(s_j) = 0), so the ridge
//! only picks the smallest of equivalent solutions.
//!
//! Kernel rows: K(X, S) in segments of `SEGMENT_ROWS` rows from `kernel_block`, kept in memory
//! up to `cache_bytes` (the first segments) and recomputed in every pass beyond it, so memory
//! is O(cache + B^2 + n) whatever n is. Segments are processed in parallel; every sum over rows
//! is taken in row order (the Gram updates in fixed batches of `GRAM_BATCH` rows, each
//! parallel over tiles of M, the line-search sums in fixed chunks), so the result does not
//! depend on the number of threads.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;

use crate::core::data::{AnyRows, CsrView, Rows};
use crate::core::error::{Result, SvmError};
use crate::core::kernel_block::{sv_rows, BlockScratch, KernelBlocks};
use crate::core::libsvm::LibsvmChunks;
use crate::core::model::BudgetModel;
use crate::core::solvers::{
    check_classes, check_positive_finite, check_weights, Monitor, Progress,
};
use crate::core::{parallel, simd};

/// Rows of a segment of K(X, S): the unit of caching and of parallel work.
const SEGMENT_ROWS: usize = 1024;
/// Rows per Gram update (fixed, so the sums do not depend on the threads).
const GRAM_BATCH: usize = 256;
/// Rows per chunk of the line-search sums.
const SUM_CHUNK: usize = 8192;
/// The ridge added to the Newton system, relative to K_SS's largest diagonal entry: directions
/// of K_SS below it change no prediction measurably.
pub const RIDGE: f64 = 1e-10;

/// The polish's settings.
#[derive(Debug, Clone)]
pub struct PolishParams {
    /// C of the objective (lambda = 1 / (n C)).
    pub c: f64,
    /// Stop when an iteration lowers the objective by less than this, relative.
    pub tol: f64,
    /// Newton iterations at most (per output).
    pub max_iter: usize,
    /// Bytes of K(X, S) kept between passes.
    pub cache_bytes: usize,
}

impl PolishParams {
    pub fn check(&self) -> Result<()> {
        check_positive_finite("C", self.c)?;
        if !(self.tol.is_finite() && self.tol >= 0.0) {
            return Err(SvmError::invalid_parameter(
                "polish_tol",
                format!("must be a finite number >= 0, got {}", self.tol),
            ));
        }
        if self.max_iter == 0 {
            return Err(SvmError::invalid_parameter(
                "polish_max_iter",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// What the polish found.
#[derive(Debug, Clone)]
pub struct PolishResult {
    /// m x n_out, vector-major (as `BudgetModel::coef`).
    pub coef: Vec<f64>,
    /// One per output.
    pub intercept: Vec<f64>,
    /// Objective per output at the start (the given coefficients, intercept 0) and at the end.
    pub objective_start: Vec<f64>,
    pub objective: Vec<f64>,
    /// Newton iterations (the most any output took).
    pub iterations: usize,
    /// Whether every output met its stopping rule before `max_iter`.
    pub converged: bool,
    /// Rows whose kernel values stayed in memory, and passes over the rows.
    pub cached_rows: usize,
    pub passes: usize,
    /// Rows that entered or left an active set, summed over iterations and outputs.
    pub active_changes: u64,
    /// Seconds computing kernel values, updating the Gram matrices, factorising the Newton
    /// systems, and in all.
    pub kernel_seconds: f64,
    pub gram_seconds: f64,
    pub solve_seconds: f64,
    pub seconds: f64,
}

/// Training rows visited as consecutive blocks, the same blocks in the same order on every
/// pass (rows in memory, or a file read again in chunks).
pub trait RowSource {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// Calls `visit(first_row, rows)` for every block.
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()>;
}

/// Rows in memory: one block.
pub struct InMemory<'a>(pub AnyRows<'a>);

impl RowSource for InMemory<'_> {
    fn n_rows(&self) -> usize {
        self.0.n_rows()
    }
    fn n_cols(&self) -> usize {
        self.0.n_cols()
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        visit(0, &self.0)
    }
}

/// A LIBSVM file read again in chunks of `chunk_rows` lines on every pass (`fit_file`): memory
/// is one chunk, whatever the file's size. Its rows are `width` features wide.
pub struct LibsvmFileRows {
    path: std::path::PathBuf,
    chunk_rows: usize,
    width: usize,
    n_rows: usize,
}

impl LibsvmFileRows {
    /// The file's class index per row (labels looked up in the sorted `classes`, -0 as 0),
    /// read in one pass, and the source for the polish's passes.
    pub fn open(
        path: &std::path::Path,
        chunk_rows: usize,
        width: usize,
        classes: &[f64],
    ) -> Result<(Self, Vec<u32>)> {
        let mut chunks = LibsvmChunks::open(path, chunk_rows)?;
        let mut y = Vec::new();
        while let Some(data) = chunks.next_chunk()? {
            if data.n_features > width {
                return Err(SvmError::invalid_input(format!(
                    "{} has features beyond index {width}",
                    path.display()
                )));
            }
            for &label in &data.labels {
                let label = label + 0.0;
                let k = classes
                    .binary_search_by(|c| c.total_cmp(&label))
                    .map_err(|_| {
                        SvmError::invalid_input(format!(
                            "{} has the label {label}, which is not one of the model's classes",
                            path.display()
                        ))
                    })?;
                y.push(k as u32);
            }
        }
        let source = LibsvmFileRows {
            path: path.to_path_buf(),
            chunk_rows,
            width,
            n_rows: y.len(),
        };
        Ok((source, y))
    }
}

impl RowSource for LibsvmFileRows {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.width
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        let mut chunks = LibsvmChunks::open(&self.path, self.chunk_rows)?;
        let mut first = 0;
        while let Some(data) = chunks.next_chunk()? {
            if data.n_features > self.width || first + data.n_rows() > self.n_rows {
                return Err(SvmError::invalid_input(format!(
                    "{} changed while it was being read",
                    self.path.display()
                )));
            }
            let view = CsrView::new(&data.indptr, &data.indices, &data.values, self.width)?;
            visit(first, &AnyRows::Csr64(view))?;
            first += data.n_rows();
        }
        if first != self.n_rows {
            return Err(SvmError::invalid_input(format!(
                "{} changed while it was being read",
                self.path.display()
            )));
        }
        Ok(())
    }
}

/// One output's Newton state.
struct Output {
    beta: Vec<f64>,
    b: f64,
    /// f_i = k_i . beta + b, and the change along the current direction.
    f: Vec<f64>,
    delta: Vec<f64>,
    /// Rows counted in M, s, u.
    counted: Vec<bool>,
    /// M (upper triangle, full storage m x m), s, u, sw, swy over the counted rows.
    gram: Vec<f64>,
    s: Vec<f64>,
    u: Vec<f64>,
    sw: f64,
    swy: f64,
    /// The direction.
    d: Vec<f64>,
    db: f64,
    objective: f64,
    done: bool,
    /// The last step was a full one.
    full_step: bool,
}

/// Kernel rows of the segments: cached ones, and how to compute the others.
struct Segments {
    /// First row and length of each segment, in visit order.
    spans: Vec<Range<usize>>,
    cache: Vec<Option<Vec<f64>>>,
    cache_left: usize,
    kernel_seconds: f64,
}

/// Polishes `model` (its support vectors, and its coefficients with `start_intercept` (0 when
/// None) as the warm start) on the rows of
/// `source` with labels `y` (class indices) and optional row weights. Returns the coefficients
/// and intercepts; the model is not changed.
#[allow(clippy::too_many_arguments)]
pub fn polish(
    model: &BudgetModel,
    start_intercept: Option<&[f64]>,
    source: &mut dyn RowSource,
    y: &[u32],
    weights: Option<&[f64]>,
    n_classes: usize,
    params: &PolishParams,
    monitor: Monitor<'_>,
) -> Result<PolishResult> {
    let start = Instant::now();
    params.check()?;
    model.validate()?;
    let n = source.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    if y.len() != n {
        return Err(SvmError::invalid_input(format!(
            "X has {n} rows but y has {} labels",
            y.len()
        )));
    }
    check_classes(n_classes, None)?;
    if let Some(bad) = y.iter().find(|&&c| c as usize >= n_classes) {
        return Err(SvmError::invalid_input(format!(
            "class index {bad} out of range for {n_classes} classes"
        )));
    }
    check_weights(weights, n)?;
    let n_out = if n_classes == 2 { 1 } else { n_classes };
    if model.n_out != n_out {
        return Err(SvmError::invalid_input(format!(
            "the model has {} outputs, {n_classes} classes need {n_out}",
            model.n_out
        )));
    }
    if source.n_cols() != model.dim {
        return Err(SvmError::invalid_input(format!(
            "X has {} features, but the model has {}",
            source.n_cols(),
            model.dim
        )));
    }
    if start_intercept.is_some_and(|b| b.len() != n_out || b.iter().any(|v| !v.is_finite())) {
        return Err(SvmError::invalid_input(
            "the starting intercept needs one finite value per output",
        ));
    }
    let m = model.n_sv();
    let blocks = KernelBlocks::from_sv_matrix(&model.support_vectors, m, model.dim, model.gamma)?;
    crate::core::data::check_sq_norms(blocks.sq_norms(), "support vector")?;
    let c = params.c;
    let target = |k: usize, i: usize| -> f64 {
        let positive = if n_out == 1 {
            y[i] == 1
        } else {
            y[i] as usize == k
        };
        if positive {
            1.0
        } else {
            -1.0
        }
    };
    let weight = |i: usize| weights.map_or(1.0, |w| w[i]);

    // K_SS, once.
    let mut kss = vec![0.0; m * m];
    if m > 0 {
        let s = sv_rows(&model.support_vectors, m, model.dim);
        let norms = blocks.sq_norms().to_vec();
        blocks.fill_rows(&s, 0..m, &norms, &mut kss, &mut BlockScratch::default());
    }

    let mut outputs: Vec<Output> = (0..n_out)
        .map(|k| Output {
            beta: (0..m).map(|j| model.coef[j * n_out + k]).collect(),
            b: start_intercept.map_or(0.0, |b| b[k]),
            f: vec![0.0; n],
            delta: vec![0.0; n],
            counted: vec![false; n],
            gram: vec![0.0; m * m],
            s: vec![0.0; m],
            u: vec![0.0; m],
            sw: 0.0,
            swy: 0.0,
            d: vec![0.0; m],
            db: 0.0,
            objective: 0.0,
            done: m == 0,
            full_step: false,
        })
        .collect();

    let mut segments = Segments {
        spans: Vec::new(),
        cache: Vec::new(),
        cache_left: params.cache_bytes,
        kernel_seconds: 0.0,
    };
    let mut passes = 0;
    let mut progress = Progress {
        epochs: params.max_iter,
        n_sv: m,
        polish: true,
        ..Progress::default()
    };

    // f = K beta + b at the warm start; the first pass also lays out the segments.
    {
        let starts: Vec<&[f64]> = outputs.iter().map(|o| &o.beta[..]).collect();
        let values = matvec_pass(
            &blocks,
            source,
            &mut segments,
            &starts,
            &mut passes,
            monitor,
            &progress,
        )?;
        for (k, o) in outputs.iter_mut().enumerate() {
            let b = o.b;
            o.f.iter_mut().zip(&values[k]).for_each(|(f, v)| *f = v + b);
            o.objective = objective(&kss, &o.beta, &o.f, c, &|i| target(k, i), &weight);
        }
    }
    let objective_start: Vec<f64> = outputs.iter().map(|o| o.objective).collect();
    let mut iterations = 0;
    let mut active_changes = 0u64;
    let (mut gram_seconds, mut solve_seconds) = (0.0, 0.0);
    while iterations < params.max_iter && outputs.iter().any(|o| !o.done) {
        // Rows whose active state differs from what M counts.
        let changed: Vec<Vec<usize>> = outputs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                if o.done {
                    return Vec::new();
                }
                (0..n)
                    .filter(|&i| (target(k, i) * o.f[i] < 1.0) != o.counted[i])
                    .collect()
            })
            .collect();
        for (k, o) in outputs.iter_mut().enumerate() {
            if o.done {
                continue;
            }
            // A full step that changed nothing reached the minimiser of the quadratic.
            if changed[k].is_empty() && o.full_step {
                o.done = true;
                continue;
            }
            active_changes += changed[k].len() as u64;
        }
        let t_gram = Instant::now();
        gram_pass(
            &blocks,
            source,
            &mut segments,
            &mut outputs,
            &changed,
            &|k, i| target(k, i),
            &weight,
            &mut passes,
            monitor,
            &progress,
        )?;
        gram_seconds += t_gram.elapsed().as_secs_f64();
        let live: Vec<usize> = (0..n_out).filter(|&k| !outputs[k].done).collect();
        if live.is_empty() {
            break;
        }
        iterations += 1;
        let t_solve = Instant::now();
        for &k in &live {
            newton_direction(&kss, &mut outputs[k], c, m)?;
        }
        solve_seconds += t_solve.elapsed().as_secs_f64();
        let dirs: Vec<&[f64]> = live.iter().map(|&k| &outputs[k].d[..]).collect();
        let values = matvec_pass(
            &blocks,
            source,
            &mut segments,
            &dirs,
            &mut passes,
            monitor,
            &progress,
        )?;
        for (&k, v) in live.iter().zip(values) {
            let o = &mut outputs[k];
            let db = o.db;
            o.delta.iter_mut().zip(&v).for_each(|(d, x)| *d = x + db);
            let t = line_search(&kss, o, c, &|i| target(k, i), &weight);
            o.full_step = t == 1.0;
            for (bj, dj) in o.beta.iter_mut().zip(&o.d) {
                *bj += t * dj;
            }
            o.b += t * o.db;
            let Output { f, delta, .. } = o;
            f.iter_mut()
                .zip(delta.iter())
                .for_each(|(fi, di)| *fi += t * di);
            let before = o.objective;
            o.objective = objective(&kss, &o.beta, &o.f, c, &|i| target(k, i), &weight);
            if before - o.objective <= params.tol * o.objective.abs() {
                o.done = true;
            }
        }
        progress.epoch = iterations;
        progress.epoch_done = true;
        progress.objective = Some(outputs.iter().map(|o| o.objective).sum());
        progress.iteration = active_changes;
        progress.seconds = start.elapsed().as_secs_f64();
        monitor(&progress)?;
        progress.epoch_done = false;
    }
    let converged = outputs.iter().all(|o| o.done);
    let mut coef = vec![0.0; m * n_out];
    for (k, o) in outputs.iter().enumerate() {
        for j in 0..m {
            coef[j * n_out + k] = o.beta[j];
        }
    }
    Ok(PolishResult {
        coef,
        intercept: outputs.iter().map(|o| o.b).collect(),
        objective_start,
        objective: outputs.iter().map(|o| o.objective).collect(),
        iterations,
        converged,
        cached_rows: segments
            .cache
            .iter()
            .zip(&segments.spans)
            .filter(|(c, _)| c.is_some())
            .map(|(_, s)| s.len())
            .sum(),
        passes,
        active_changes,
        kernel_seconds: segments.kernel_seconds,
        gram_seconds,
        solve_seconds,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// 1/2 beta^T K beta + C sum_i w_i max(0, 1 - y_i f_i)^2, the sum in fixed chunks.
fn objective(
    kss: &[f64],
    beta: &[f64],
    f: &[f64],
    c: f64,
    target: &(dyn Fn(usize) -> f64 + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
) -> f64 {
    let loss = chunked_sum(f.len(), &|r| {
        let mut s = 0.0;
        for i in r {
            let xi = 1.0 - target(i) * f[i];
            if xi > 0.0 {
                s += weight(i) * xi * xi;
            }
        }
        [s, 0.0]
    })[0];
    0.5 * quad_form(kss, beta, beta) + c * loss
}

/// a^T K b for the symmetric m x m K (full storage).
fn quad_form(k: &[f64], a: &[f64], b: &[f64]) -> f64 {
    let m = a.len();
    (0..m)
        .map(|j| a[j] * simd::dot(&k[j * m..(j + 1) * m], b))
        .sum()
}

/// Two sums over 0..n in chunks of `SUM_CHUNK` rows (in parallel), added in chunk order.
fn chunked_sum(n: usize, part: &(dyn Fn(Range<usize>) -> [f64; 2] + Sync)) -> [f64; 2] {
    let chunks = n.div_ceil(SUM_CHUNK);
    let parts: Vec<[f64; 2]> = parallel::install(|| {
        (0..chunks)
            .into_par_iter()
            .map(|c| part(c * SUM_CHUNK..((c + 1) * SUM_CHUNK).min(n)))
            .collect()
    });
    parts
        .iter()
        .fold([0.0, 0.0], |acc, p| [acc[0] + p[0], acc[1] + p[1]])
}

/// What a pass computes on a segment: (segment, its rows, their kernel values) -> result.
type SegmentWork<'a, T> = dyn Fn(usize, Range<usize>, &[f64]) -> T + Sync + 'a;

/// One output's changed rows of a segment: signed weights, rows, kernel values (row-major).
struct ChangedRows {
    signs: Vec<f64>,
    rows: Vec<usize>,
    values: Vec<f64>,
}

/// Visits the segments wanted (all with `None`) in parallel, block by block of the source:
/// `work(segment, rows, kernel_values)` on each, then `collect` on the results in segment
/// order. Kernel values come from the cache or are computed (and cached on the first pass
/// while the cache has room).
#[allow(clippy::too_many_arguments)]
fn segment_pass<T: Send>(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    wanted: Option<&[bool]>,
    work: &SegmentWork<'_, T>,
    collect: &mut dyn FnMut(usize, T) -> Result<()>,
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<()> {
    *passes += 1;
    let m = blocks.n_basis();
    let first_pass = segments.spans.is_empty();
    let mut next_segment = 0;
    let mut visit = |first: usize, rows: &AnyRows<'_>| -> Result<()> {
        let len = rows.n_rows();
        // This block's segments.
        let ids: Vec<usize> = (0..len.div_ceil(SEGMENT_ROWS))
            .map(|s| next_segment + s)
            .collect();
        if first_pass {
            for s in 0..ids.len() {
                let a = first + s * SEGMENT_ROWS;
                segments.spans.push(a..(a + SEGMENT_ROWS).min(first + len));
                let bytes = segments.spans.last().map_or(0, |r| r.len()) * m * 8;
                if bytes <= segments.cache_left && m > 0 {
                    segments.cache_left -= bytes;
                    segments.cache.push(Some(Vec::new()));
                } else {
                    segments.cache.push(None);
                }
            }
        }
        next_segment += ids.len();
        let todo: Vec<usize> = ids
            .into_iter()
            .filter(|&s| wanted.is_none_or(|w| w[s]))
            .collect();
        // Waves of a few segments per thread bound the memory of results held at once.
        let wave = 4 * rayon::current_num_threads().max(1);
        for group in todo.chunks(wave) {
            // Ctrl-C between waves of a long pass.
            monitor(progress)?;
            let spans = &segments.spans;
            let cache = &segments.cache;
            let results: Vec<(T, Option<Vec<f64>>, f64)> = parallel::install(|| {
                group
                    .par_iter()
                    .map_init(BlockScratch::default, |scratch, &s| {
                        let span = spans[s].clone();
                        let local = span.start - first..span.end - first;
                        match &cache[s] {
                            Some(kv) if !kv.is_empty() => (work(s, span, kv), None, 0.0),
                            slot => {
                                let t0 = Instant::now();
                                let norms: Vec<f64> =
                                    local.clone().map(|i| rows.sq_norm(i)).collect();
                                let mut kv = vec![0.0; local.len() * m];
                                blocks.fill_rows(rows, local, &norms, &mut kv, scratch);
                                let secs = t0.elapsed().as_secs_f64();
                                let r = work(s, span, &kv);
                                (r, slot.is_some().then_some(kv), secs)
                            }
                        }
                    })
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
    source.pass(&mut visit)?;
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
#[allow(clippy::too_many_arguments)]
fn matvec_pass(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    v: &[&[f64]],
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<Vec<Vec<f64>>> {
    let n = source.n_rows();
    let m = blocks.n_basis();
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
    let work = |_s: usize, span: Range<usize>, kv: &[f64]| -> Vec<f64> {
        let mut r = vec![0.0; span.len() * q];
        for (row, o) in kv.chunks(m).zip(r.chunks_mut(q)) {
            simd::weighted_row_sum(level, &coef, q, row, o);
        }
        r
    };
    let mut results: Vec<(usize, Vec<f64>)> = Vec::new();
    segment_pass(
        blocks,
        source,
        segments,
        None,
        &work,
        &mut |s, r| {
            results.push((s, r));
            Ok(())
        },
        passes,
        monitor,
        progress,
    )?;
    for (s, r) in results {
        let span = segments.spans[s].clone();
        for (t, i) in span.enumerate() {
            for k in 0..q {
                out[k][i] = r[t * q + k];
            }
        }
    }
    Ok(out)
}

/// Updates every live output's M, s, u, sw, swy by its changed rows (entering: +, leaving: -),
/// in row order.
#[allow(clippy::too_many_arguments)]
fn gram_pass(
    blocks: &KernelBlocks,
    source: &mut dyn RowSource,
    segments: &mut Segments,
    outputs: &mut [Output],
    changed: &[Vec<usize>],
    target: &(dyn Fn(usize, usize) -> f64 + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
    passes: &mut usize,
    monitor: Monitor<'_>,
    progress: &Progress,
) -> Result<()> {
    let m = blocks.n_basis();
    if m == 0 || changed.iter().all(|c| c.is_empty()) {
        return Ok(());
    }
    // Segments holding changed rows, found after the first pass laid them out.
    let n_seg = segments.spans.len();
    let mut wanted = vec![false; n_seg];
    let seg_of = |i: usize, spans: &[Range<usize>]| spans.partition_point(|s| s.end <= i);
    for c in changed {
        for &i in c {
            wanted[seg_of(i, &segments.spans)] = true;
        }
    }
    let counted: Vec<&[bool]> = outputs.iter().map(|o| &o.counted[..]).collect();
    // Per segment and output: the changed rows; a row that M counts leaves it.
    let work = |_s: usize, span: Range<usize>, kv: &[f64]| -> Vec<ChangedRows> {
        changed
            .iter()
            .enumerate()
            .map(|(k, rows)| {
                let a = rows.partition_point(|&i| i < span.start);
                let b = rows.partition_point(|&i| i < span.end);
                let mut part = ChangedRows {
                    signs: Vec::with_capacity(b - a),
                    rows: rows[a..b].to_vec(),
                    values: Vec::with_capacity((b - a) * m),
                };
                for &i in &rows[a..b] {
                    let sign = if counted[k][i] { -1.0 } else { 1.0 };
                    part.signs.push(sign * weight(i));
                    let t = i - span.start;
                    part.values.extend_from_slice(&kv[t * m..(t + 1) * m]);
                }
                part
            })
            .collect()
    };
    let mut staged: Vec<Staging> = (0..outputs.len()).map(|_| Staging::default()).collect();
    let mut results: Vec<Vec<ChangedRows>> = Vec::new();
    // The parallel part computes kernel rows; the sums are taken below in row order.
    segment_pass(
        blocks,
        source,
        segments,
        Some(&wanted),
        &work,
        &mut |_s, r| {
            results.push(r);
            Ok(())
        },
        passes,
        monitor,
        progress,
    )?;
    drop(counted);
    for per_output in results {
        for (k, part) in per_output.into_iter().enumerate() {
            let o = &mut outputs[k];
            for (t, (&g, &i)) in part.signs.iter().zip(&part.rows).enumerate() {
                let row = &part.values[t * m..(t + 1) * m];
                let y = target(k, i);
                simd::axpy(g, row, &mut o.s);
                simd::axpy(g * y, row, &mut o.u);
                o.sw += g;
                o.swy += g * y;
                o.counted[i] = !o.counted[i];
                staged[k].push(g, row);
                if staged[k].weights.len() == GRAM_BATCH {
                    staged[k].flush(&mut o.gram, m);
                }
            }
        }
    }
    for (k, st) in staged.iter_mut().enumerate() {
        st.flush(&mut outputs[k].gram, m);
    }
    Ok(())
}

/// Rows waiting to be added to a Gram matrix.
#[derive(Default)]
struct Staging {
    weights: Vec<f64>,
    rows: Vec<f64>,
}

impl Staging {
    fn push(&mut self, w: f64, row: &[f64]) {
        self.weights.push(w);
        self.rows.extend_from_slice(row);
    }

    /// gram (upper triangle) += sum_r w_r row_r row_r^T, tiles of 8 rows of gram in parallel,
    /// each tile through `simd::dots_8_rows` (the rows play the columns of a product).
    fn flush(&mut self, gram: &mut [f64], m: usize) {
        let c = self.weights.len();
        if c == 0 {
            return;
        }
        let g8 = simd::BLOCK_ROWS;
        let rows = &self.rows;
        let weights = &self.weights;
        let cols: Vec<usize> = (0..c).collect();
        parallel::install(|| {
            gram.par_chunks_mut(g8 * m).enumerate().for_each_init(
                || (vec![0.0; g8 * c], vec![0.0; g8 * m]),
                |(q, dots), (tile, out)| {
                    let j0 = tile * g8;
                    let height = out.len() / m;
                    let lanes = m - j0;
                    q.fill(0.0);
                    for p in 0..height {
                        for r in 0..c {
                            q[p * c + r] = weights[r] * rows[r * m + j0 + p];
                        }
                    }
                    simd::dots_8_rows(q, c, &cols, &rows[j0..], m, lanes, dots);
                    for p in 0..height {
                        let target = &mut out[p * m + j0..(p + 1) * m];
                        for (t, d) in target.iter_mut().zip(&dots[p * lanes..(p + 1) * lanes]) {
                            *t += d;
                        }
                    }
                },
            );
        });
        self.weights.clear();
        self.rows.clear();
    }
}

/// The minimiser of the quadratic model on the current active set, as a direction from the
/// current point (d, db).
fn newton_direction(kss: &[f64], o: &mut Output, c: f64, m: usize) -> Result<()> {
    let p = m + 1;
    let two_c = 2.0 * c;
    // Lower triangle of the system, row-major p x p.
    let mut a = vec![0.0; p * p];
    for i in 0..m {
        for j in 0..=i {
            // M is kept in its upper triangle: M[j][i] for j <= i.
            a[i * p + j] = kss[i * m + j] + two_c * o.gram[j * m + i];
        }
    }
    for j in 0..m {
        a[m * p + j] = two_c * o.s[j];
    }
    a[m * p + m] = two_c * o.sw;
    let mut rhs: Vec<f64> = o.u.iter().map(|v| two_c * v).collect();
    rhs.push(two_c * o.swy);
    // Relative to K_SS (whose null space is where the system is singular), not to the loss
    // term: the intercept and a near-constant function of span(S) are nearly the same
    // direction, which a ridge at the loss term's scale would bias.
    let kss_diag = (0..m).map(|i| kss[i * m + i]).fold(0.0f64, f64::max);
    let mut ridge = RIDGE * kss_diag.max(1.0);
    let mut l = vec![0.0; p * p];
    for _ in 0..40 {
        if cholesky(&a, ridge, p, &mut l) {
            let mut x = cholesky_solve(&l, p, &rhs);
            // Two steps of iterative refinement: the system is ill-conditioned where the
            // intercept and near-constant functions of span(S) meet.
            for _ in 0..2 {
                let residual: Vec<f64> = (0..p)
                    .map(|i| {
                        let row: f64 = (0..p)
                            .map(|j| {
                                let v = if j <= i { a[i * p + j] } else { a[j * p + i] };
                                v * x[j]
                            })
                            .sum();
                        rhs[i] - row - ridge * x[i]
                    })
                    .collect();
                let fix = cholesky_solve(&l, p, &residual);
                x.iter_mut().zip(&fix).for_each(|(v, d)| *v += d);
            }
            for ((d, xj), bj) in o.d.iter_mut().zip(&x).zip(&o.beta) {
                *d = xj - bj;
            }
            o.db = x[m] - o.b;
            return Ok(());
        }
        ridge *= 10.0;
    }
    Err(SvmError::invalid_input(
        "the polish's Newton system could not be factorised (non-finite kernel values?)",
    ))
}

/// Cholesky factor L (row-major lower) of the lower triangle `a` plus `ridge` I; false when a
/// pivot is not positive.
fn cholesky(a: &[f64], ridge: f64, p: usize, l: &mut [f64]) -> bool {
    for i in 0..p {
        for j in 0..=i {
            let s = a[i * p + j] - simd::dot(&l[i * p..i * p + j], &l[j * p..j * p + j]);
            if i == j {
                let s = s + ridge;
                if !(s > 0.0 && s.is_finite()) {
                    return false;
                }
                l[i * p + i] = s.sqrt();
            } else {
                l[i * p + j] = s / l[j * p + j];
            }
        }
    }
    true
}

/// Solves L L^T x = b.
fn cholesky_solve(l: &[f64], p: usize, b: &[f64]) -> Vec<f64> {
    let mut z = b.to_vec();
    for i in 0..p {
        let s = z[i] - simd::dot(&l[i * p..i * p + i], &z[..i]);
        z[i] = s / l[i * p + i];
    }
    for i in (0..p).rev() {
        let mut s = z[i];
        for j in i + 1..p {
            s -= l[j * p + i] * z[j];
        }
        z[i] = s / l[i * p + i];
    }
    z
}

/// The step t > 0 minimising the objective along (d, db) exactly: the derivative
/// phi'(t) = beta^T K d + t d^T K d - 2C sum_{y (f + t delta) < 1} w y delta (1 - y (f + t delta))
/// is piecewise linear and increasing; its root is bracketed and found by Newton steps on it,
/// kept inside the bracket by bisection. Returns exactly 1 when the full step is the minimiser
/// to rounding.
fn line_search(
    kss: &[f64],
    o: &Output,
    c: f64,
    target: &(dyn Fn(usize) -> f64 + Sync),
    weight: &(dyn Fn(usize) -> f64 + Sync),
) -> f64 {
    let (f, delta) = (&o.f, &o.delta);
    let n = f.len();
    let dkd = quad_form(kss, &o.d, &o.d);
    let bkd = quad_form(kss, &o.beta, &o.d);
    // phi'(t) and phi''(t).
    let slope = |t: f64| -> (f64, f64) {
        let [g, h] = chunked_sum(n, &|r| {
            let (mut g, mut h) = (0.0, 0.0);
            for i in r {
                let y = target(i);
                let xi = 1.0 - y * (f[i] + t * delta[i]);
                if xi > 0.0 {
                    let w = weight(i);
                    g += w * y * delta[i] * xi;
                    h += w * delta[i] * delta[i];
                }
            }
            [g, h]
        });
        (bkd + t * dkd - 2.0 * c * g, dkd + 2.0 * c * h)
    };
    // Rows active at both ends of the full step are active along it, inactive ones inactive:
    // if no row changes between t = 0 and t = 1, the objective is the quadratic model on the
    // whole step and t = 1 its exact minimiser (this also settles the last, tiny steps that
    // the slope's rounding could not).
    let flips = chunked_sum(n, &|r| {
        let mut count = 0.0;
        for i in r {
            let y = target(i);
            if (y * f[i] < 1.0) != (y * (f[i] + delta[i]) < 1.0) {
                count += 1.0;
            }
        }
        [count, 0.0]
    })[0];
    if flips == 0.0 {
        return 1.0;
    }
    let (g0, _) = slope(0.0);
    if g0 >= 0.0 {
        // Not a descent direction (converged to rounding).
        return 0.0;
    }
    let scale = g0.abs();
    let (g1, h1) = slope(1.0);
    if g1.abs() <= 1e-12 * scale {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    let (mut t, mut g, mut h) = (1.0, g1, h1);
    if g < 0.0 {
        // The minimiser lies beyond the full step.
        lo = 1.0;
        hi = 2.0;
        for _ in 0..60 {
            let (gh, hh) = slope(hi);
            if gh >= 0.0 {
                t = hi;
                g = gh;
                h = hh;
                break;
            }
            lo = hi;
            hi *= 2.0;
        }
        if g < 0.0 {
            return lo;
        }
    }
    for _ in 0..100 {
        if g.abs() <= 1e-12 * scale || hi - lo <= 1e-14 * hi {
            break;
        }
        if g > 0.0 {
            hi = t;
        } else {
            lo = t;
        }
        let newton = if h > 0.0 { t - g / h } else { f64::NAN };
        t = if newton > lo && newton < hi {
            newton
        } else {
            0.5 * (lo + hi)
        };
        (g, h) = slope(t);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::data::DenseView;
    use crate::core::kernel::kernel_matrix;
    use crate::core::model::SvMatrix;
    use crate::core::rng::Rng;
    use crate::core::solvers::no_monitor;

    /// A small binary problem: rows in [-1, 1]^2 labelled by a circle, and a basis of rows.
    fn problem(
        seed: u64,
        n: usize,
        m: usize,
        n_classes: usize,
    ) -> (Vec<f64>, Vec<u32>, BudgetModel) {
        let mut rng = Rng::new(seed);
        let x: Vec<f64> = (0..n * 2).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
        let y: Vec<u32> = (0..n)
            .map(|i| {
                let r = x[2 * i].powi(2) + x[2 * i + 1].powi(2);
                let class = if n_classes == 2 {
                    u32::from(r < 0.5)
                } else {
                    ((r * n_classes as f64 * 0.7) as u32).min(n_classes as u32 - 1)
                };
                // 5% label noise.
                if rng.next_f64() < 0.05 {
                    (class + 1) % n_classes as u32
                } else {
                    class
                }
            })
            .collect();
        let sv: Vec<f64> = x[..m * 2].to_vec();
        let n_out = if n_classes == 2 { 1 } else { n_classes };
        let coef: Vec<f64> = (0..m * n_out).map(|_| rng.next_f64() - 0.5).collect();
        let model = BudgetModel {
            dim: 2,
            n_out,
            gamma: 2.0,
            support_vectors: SvMatrix::Dense(sv),
            coef,
        };
        (x, y, model)
    }

    fn params(c: f64) -> PolishParams {
        PolishParams {
            c,
            tol: 0.0,
            max_iter: 100,
            cache_bytes: 1 << 30,
        }
    }

    fn run(
        x: &[f64],
        y: &[u32],
        w: Option<&[f64]>,
        k: usize,
        model: &BudgetModel,
        p: &PolishParams,
    ) -> PolishResult {
        let n = y.len();
        let view = DenseView::new(x, n, 2).unwrap();
        let mut source = InMemory(AnyRows::Dense(view));
        polish(model, None, &mut source, y, w, k, p, &mut no_monitor).unwrap()
    }

    /// The gradient of the objective in (beta, b) at the solution is zero: an independent
    /// check from the explicit kernel matrices.
    #[test]
    fn solution_satisfies_the_optimality_conditions() {
        for (seed, n, m, c, weighted) in [
            (1, 300, 20, 1.0, false),
            (2, 500, 40, 10.0, true),
            (3, 200, 60, 0.1, false),
        ] {
            let (x, y, model) = problem(seed, n, m, 2);
            let mut rng = Rng::new(seed + 100);
            let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
            let w = weighted.then_some(&w[..]);
            let r = run(&x, &y, w, 2, &model, &params(c));
            assert!(r.converged);
            let xv = DenseView::new(&x, n, 2).unwrap();
            let SvMatrix::Dense(sv) = &model.support_vectors else {
                unreachable!()
            };
            let s = DenseView::new(sv, m, 2).unwrap();
            let mut k = vec![0.0; n * m];
            kernel_matrix(&xv, &s, 2.0, &mut k).unwrap();
            let mut kss = vec![0.0; m * m];
            kernel_matrix(&s, &s, 2.0, &mut kss).unwrap();
            let beta = &r.coef;
            let b = r.intercept[0];
            let mut grad: Vec<f64> = (0..m)
                .map(|j| (0..m).map(|l| kss[j * m + l] * beta[l]).sum())
                .collect();
            let mut gb = 0.0;
            for i in 0..n {
                let yi = if y[i] == 1 { 1.0 } else { -1.0 };
                let fi: f64 = (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b;
                let xi = 1.0 - yi * fi;
                if xi > 0.0 {
                    let wi = w.map_or(1.0, |w| w[i]);
                    for j in 0..m {
                        grad[j] -= 2.0 * c * wi * yi * xi * k[i * m + j];
                    }
                    gb -= 2.0 * c * wi * yi * xi;
                }
            }
            // Relative to the size of the loss term.
            let scale = 2.0 * c * n as f64;
            let worst = grad.iter().map(|g| g.abs()).fold(gb.abs(), f64::max);
            assert!(worst < 1e-9 * scale, "seed {seed}: gradient {worst}");
            assert!(r.objective[0] <= r.objective_start[0]);
        }
    }

    /// The same solution whatever the cache holds and however many threads run.
    #[test]
    fn cache_and_threads_do_not_change_the_result() {
        let (x, y, model) = problem(5, 3000, 30, 3);
        let base = run(&x, &y, None, 3, &model, &params(5.0));
        let mut small = params(5.0);
        small.cache_bytes = SEGMENT_ROWS * 30 * 8; // one segment cached, two recomputed
        for threads in [1, 3] {
            let r = parallel::install_with(Some(threads), || run(&x, &y, None, 3, &model, &small))
                .unwrap();
            assert_eq!(r.coef, base.coef);
            assert_eq!(r.intercept, base.intercept);
            assert_eq!(r.cached_rows, SEGMENT_ROWS);
        }
        assert_eq!(base.cached_rows, 3000);
        assert!(base
            .objective
            .iter()
            .zip(&base.objective_start)
            .all(|(a, b)| a <= b));
    }

    /// Duplicated basis vectors (a singular K_SS) still give the optimum's objective.
    #[test]
    fn singular_basis_gives_the_same_objective() {
        let (x, y, model) = problem(7, 400, 15, 2);
        let r = run(&x, &y, None, 2, &model, &params(3.0));
        let SvMatrix::Dense(sv) = &model.support_vectors else {
            unreachable!()
        };
        let mut twice = sv.clone();
        twice.extend_from_slice(sv);
        let mut coef = model.coef.clone();
        coef.extend(model.coef.iter().map(|c| c * 0.5));
        let doubled = BudgetModel {
            support_vectors: SvMatrix::Dense(twice),
            coef,
            ..model.clone()
        };
        let r2 = run(&x, &y, None, 2, &doubled, &params(3.0));
        let rel = (r2.objective[0] - r.objective[0]).abs() / r.objective[0];
        assert!(rel < 1e-8, "{} vs {}", r2.objective[0], r.objective[0]);
    }

    /// Weight 2 on a row equals the row twice.
    #[test]
    fn weights_equal_repeated_rows() {
        let (x, y, model) = problem(9, 250, 12, 2);
        let n = y.len();
        let w: Vec<f64> = (0..n).map(|i| if i % 3 == 0 { 2.0 } else { 1.0 }).collect();
        let weighted = run(&x, &y, Some(&w), 2, &model, &params(2.0));
        let (mut xr, mut yr) = (x.clone(), y.clone());
        for i in (0..n).step_by(3) {
            xr.extend_from_slice(&x[2 * i..2 * i + 2]);
            yr.push(y[i]);
        }
        let repeated = run(&xr, &yr, None, 2, &model, &params(2.0));
        let rel = (weighted.objective[0] - repeated.objective[0]).abs() / repeated.objective[0];
        assert!(rel < 1e-9);
        for (a, b) in weighted.coef.iter().zip(&repeated.coef) {
            assert!((a - b).abs() < 1e-6 * (1.0 + b.abs()));
        }
    }

    #[test]
    fn bad_input_is_an_error() {
        let (x, y, model) = problem(1, 50, 5, 2);
        let view = DenseView::new(&x, 50, 2).unwrap();
        let mut src = InMemory(AnyRows::Dense(view));
        let p = params(1.0);
        assert!(polish(
            &model,
            None,
            &mut src,
            &y[..49],
            None,
            2,
            &p,
            &mut no_monitor
        )
        .is_err());
        assert!(polish(&model, None, &mut src, &y, None, 3, &p, &mut no_monitor).is_err());
        let mut bad = p.clone();
        bad.max_iter = 0;
        assert!(polish(&model, None, &mut src, &y, None, 2, &bad, &mut no_monitor).is_err());
        let w = vec![0.0; 50];
        assert!(polish(&model, None, &mut src, &y, Some(&w), 2, &p, &mut no_monitor).is_err());
    }
}
