//! The loops every kernel evaluation runs through: dot, axpy, the Gaussian kernel from dot
//! products, and the fused kernel row of a budgeted step.
//!
//! The wheel must run on any x86-64, so AVX2+FMA and AVX-512 are reached by runtime feature
//! detection (checked once, cached) instead of `-C target-cpu=native`. Every vector path computes
//! its kernel values with exactly the operations, in the same order, of the scalar fused
//! multiply-add code (`exp_nonpositive::<true>`, dots summed in column order), so AVX2 and
//! AVX-512 give bit-identical kernel values (tested); the portable path (no FMA) agrees to a few
//! ulp. Elsewhere the portable loops use several independent accumulators so the compiler can
//! keep SIMD registers busy without reassociating.
//!
//! The files, by operation (each with its tests, which compare every level this CPU runs):
//! - this one: the levels, which one this CPU runs, and every entry point: it checks what the
//!   vector code relies on and picks the level's loop;
//! - `exp.rs`: the exponential and kernel values from dot products;
//! - `rows.rs`: the fused kernel row of a budgeted step, weighted row sums;
//! - `dots.rs`: dot products and axpys (f64, f32, halves, bit sets), blocked dots of 1 or 8 rows;
//! - `half.rs`: half-precision values and their f32 products;
//! - `scans.rs`: a merge partner search's scans; `j_scan.rs`: the exact solvers' j scan;
//! - `tiles.rs`: the micro-kernels of dense matrix products;
//! - `values.rs`: the element types the loops read (`ColumnValue`, `RowValue`);
//! - `x86/`: AVX2 and AVX-512, one file per operation as above; `x86/mod.rs` holds `Simd`, the
//!   trait each vector loop is written over once for both levels.
//!
//! The operation files hold the portable loops and the scalar code the vector loops repeat;
//! `x86/` uses them, never the other way round, and only this file calls into both, so no two
//! files import each other (`.ci/import_loops.py`).

use std::sync::atomic::{AtomicU8, Ordering};

mod dots;
mod exp;
mod half;
mod j_scan;
mod rows;
mod scans;
mod tiles;
mod values;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use dots::BLOCK_ROWS;
pub use exp::{poly_from_dots, SINGLE_DEGREE};
pub use half::F16;
pub use j_scan::{JScan, JScanInput};
pub use rows::{FeatureMajor, RowNonzeros};
pub use tiles::{product_tile_columns, product_tile_f32_columns, PRODUCT_TILE_ROWS};
#[cfg(not(target_arch = "x86_64"))]
pub use values::ScanLanes;
pub use values::{ColumnValue, RowValue};
/// The vector levels as generic code sees them, and the exponential's core (the benchmark of the
/// arithmetic floor writes its loops with them too).
#[cfg(target_arch = "x86_64")]
pub use x86::{exp::exp_in_range, Avx2, Avx512, ScanLanes, Simd};

use dots::{EightRows, OneRow};
#[cfg(target_arch = "x86_64")]
use rows::FusedRow;
use rows::FUSED_MAX_NNZ;
use scans::CandidateFilter;
use tiles::{ProductTile, ProductTileF32};

/// The instruction sets the kernel loops can use, from the least to the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Plain Rust, no fused multiply-add.
    Portable,
    /// AVX2 and FMA: four doubles a vector.
    Avx2,
    /// AVX-512F and FMA: eight doubles a vector, masked tails.
    Avx512,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2+fma",
            Level::Avx512 => "avx512f+fma",
        }
    }

    /// Whether this CPU can run the level (whatever the environment caps).
    pub fn runs_here(self) -> bool {
        match self {
            Level::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => {
                std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);

/// The best level this CPU runs, capped by the environment variable `BUDGETSVM_SIMD`
/// (`portable`, `avx2` or `avx512`; `BUDGETSVM_NO_SIMD` set means portable), read once per
/// process. The cap lets tests and benchmarks run the lower paths on a machine with the higher.
pub fn level() -> Level {
    const LEVELS: [Level; 3] = [Level::Portable, Level::Avx2, Level::Avx512];
    let cached = LEVEL.load(Ordering::Relaxed);
    if let Some(&l) = LEVELS.get(cached as usize) {
        return l;
    }
    let cap = if std::env::var_os("BUDGETSVM_NO_SIMD").is_some() {
        Level::Portable
    } else {
        match std::env::var("BUDGETSVM_SIMD").as_deref() {
            Ok("portable") => Level::Portable,
            Ok("avx2") => Level::Avx2,
            _ => Level::Avx512,
        }
    };
    let best = LEVELS
        .into_iter()
        .rev()
        .find(|&l| l <= cap && l.runs_here())
        .unwrap_or(Level::Portable);
    LEVEL.store(best as u8, Ordering::Relaxed);
    best
}

/// The levels this CPU runs, for tests and benchmarks that compare the paths.
pub fn levels_here() -> Vec<Level> {
    [Level::Portable, Level::Avx2, Level::Avx512]
        .into_iter()
        .filter(|l| l.runs_here())
        .collect()
}

/// Whether the fused multiply-add paths run on this CPU (AVX2 and FMA detected at run time).
#[inline]
pub fn has_fma() -> bool {
    level() >= Level::Avx2
}

/// Which code path the kernel loops take on this machine (reported by benchmarks).
pub fn simd_level() -> &'static str {
    level().name()
}

// Kernel values from dot products (`exp.rs`, `x86/exp.rs`).

/// Gaussian kernel values in f32 from dot products with a point of squared norm `sq_norm`:
/// out[j] <- exp(x), x = -gamma max(0, sq_norm + sv_sq_norms[j] - 2 dots[j]) in f64 rounded to
/// f32, the exponential in f32 arithmetic (for values kept in f32: the Hessian-free polish's):
/// within an f32 ulp of the f64 value plus |x| 2^-24 relative (x's rounding), 6e-8 at most.
/// The same values on the AVX2 and AVX-512 levels; the portable path agrees to a few ulp.
#[inline]
pub fn rbf_from_dots_f32(
    gamma: f64,
    sq_norm: f64,
    sv_sq_norms: &[f64],
    dots: &[f64],
    out: &mut [f32],
) {
    rbf_from_dots_f32_at(level(), gamma, sq_norm, sv_sq_norms, dots, out)
}

/// [`rbf_from_dots_f32`] on a given level (falling back as `rbf_from_dots_at`).
pub fn rbf_from_dots_f32_at(
    level: Level,
    gamma: f64,
    sq_norm: f64,
    sv_sq_norms: &[f64],
    dots: &[f64],
    out: &mut [f32],
) {
    let n = dots.len().min(sv_sq_norms.len()).min(out.len());
    let (norms, dots, out) = (&sv_sq_norms[..n], &dots[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::at_most(level) {
        // SAFETY: the three slices hold n values.
        return unsafe { x86::exp::rbf_from_dots_f32(v, gamma, sq_norm, norms, dots, out) };
    }
    let _ = level;
    exp::rbf_from_dots_f32_portable(gamma, sq_norm, norms, dots, out)
}

/// Turns dot products with a point of squared norm `sq_norm` into Gaussian kernel values in
/// place: dots[j] <- exp(-gamma max(0, sq_norm + sv_sq_norms[j] - 2 dots[j])). Kernel values
/// from dot products are computed here or in [`rbf_row`], nowhere else.
#[inline]
pub fn rbf_from_dots(gamma: f64, sq_norm: f64, sv_sq_norms: &[f64], dots: &mut [f64]) {
    rbf_from_dots_at(level(), gamma, sq_norm, sv_sq_norms, dots)
}

/// [`rbf_from_dots`] on a given level (a level this CPU cannot run falls back to the best below
/// it that it can).
pub fn rbf_from_dots_at(
    level: Level,
    gamma: f64,
    sq_norm: f64,
    sv_sq_norms: &[f64],
    dots: &mut [f64],
) {
    let n = dots.len().min(sv_sq_norms.len());
    let (norms, dots) = (&sv_sq_norms[..n], &mut dots[..n]);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::at_most(level) {
        // SAFETY: both slices hold n values.
        return unsafe { x86::exp::rbf_from_dots(v, gamma, sq_norm, norms, dots) };
    }
    let _ = level;
    exp::rbf_from_dots_body::<false>(gamma, sq_norm, norms, dots)
}

/// Turns dot products into sigmoid kernel values tanh(gamma dot + coef0) in place, vectorised
/// (std's tanh is a call per value, most of a sigmoid kernel row's cost).
#[inline]
pub fn sigmoid_from_dots(gamma: f64, coef0: f64, dots: &mut [f64]) {
    sigmoid_from_dots_at(level(), gamma, coef0, dots)
}

/// [`sigmoid_from_dots`] on a given level (a level this CPU cannot run falls back).
pub fn sigmoid_from_dots_at(level: Level, gamma: f64, coef0: f64, dots: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::at_most(level) {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::exp::sigmoid_from_dots(v, gamma, coef0, dots) };
    }
    let _ = level;
    exp::sigmoid_from_dots_body::<false>(gamma, coef0, dots)
}

// The fused kernel row and decision sums (`rows.rs`, `x86/rows.rs`).

/// One budgeted step's kernel arithmetic in one pass over the support vectors: for an input row
/// given by its non-zeros and squared norm, kvals[j] = k(x, sv_j) for j < len,
/// and, with `coef`, the returned sum_j coef[j] kvals[j] (0 without). The vector paths keep a
/// block of 32 (AVX-512) or 16 (AVX2) dot products in registers while they run over the row's
/// non-zeros, then turn them into kernel values and the decision sum before storing anything.
///
/// Panics (a caller's bug, never the user's input) when a column or slice lies outside `svs`.
pub fn rbf_row(
    level: Level,
    svs: FeatureMajor<'_>,
    row: RowNonzeros<'_>,
    gamma: f64,
    coef: Option<&[f64]>,
    kvals: &mut [f64],
) -> f64 {
    let RowNonzeros { cols, vals, .. } = row;
    let len = svs.len;
    assert!(
        cols.len() == vals.len(),
        "rbf_row: columns and values differ in length"
    );
    assert!(
        kvals.len() >= len && svs.sq_norms.len() >= len,
        "rbf_row: short slices"
    );
    assert!(
        coef.is_none_or(|c| c.len() >= len),
        "rbf_row: short coefficients"
    );
    if let Some(&c) = cols.iter().max() {
        let end = c.checked_mul(svs.stride).and_then(|o| o.checked_add(len));
        assert!(
            len <= svs.stride && end.is_some_and(|e| e <= svs.svt.len()),
            "rbf_row: column {c} outside the support vectors"
        );
    }
    #[cfg(target_arch = "x86_64")]
    let vector = x86::Vector::at_most(level);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = vector.filter(|_| cols.len() <= FUSED_MAX_NNZ) {
        // SAFETY: every offset was bounds-checked above.
        return unsafe { x86::rows::rbf_row(v, FusedRow(svs, row, gamma, coef), kvals) };
    }
    // Rows with many non-zeros, and the portable level: one axpy per non-zero over the
    // contiguous run of that feature (a block of 32 SVs would read from as many separate runs as
    // the row has non-zeros), then the kernel values and the decision sum. On a vector level the
    // same dots (fused multiply-adds in column order) and kernel values as the fused pass.
    let kv = &mut kvals[..len];
    kv.fill(0.0);
    for (&c, &v) in cols.iter().zip(vals) {
        let column = &svs.svt[c * svs.stride..c * svs.stride + len];
        #[cfg(target_arch = "x86_64")]
        if let Some(vector) = vector {
            // SAFETY: nothing beyond the level.
            unsafe { x86::dots::axpy(vector, v, column, kv) };
            continue;
        }
        dots::axpy_portable(v, column, kv);
    }
    rbf_from_dots_at(level, gamma, row.sq_norm, &svs.sq_norms[..len], kv);
    coef.map_or(0.0, |c| dot_by_columns(level, &c[..len], kv))
}

/// The decision sum of `rbf_row` by columns: `dot` on a vector level, else the portable dot.
fn dot_by_columns(level: Level, coef: &[f64], kvals: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::at_most(level).is_some() {
        return dot(coef, kvals);
    }
    let _ = level;
    dots::dot_portable(coef, kvals)
}

/// The decision sum sum_j coef[j] kvals[j] over `kvals.len()` values, added in exactly the order
/// [`rbf_row`] adds it for a row of `nnz` non-zeros on `level`: a store that computes its kernel
/// values otherwise (the sparse layout) gets the same decision value to the last bit, so both
/// layouts train the same model.
pub fn decision_sum_as_rbf_row(level: Level, coef: &[f64], kvals: &[f64], nnz: usize) -> f64 {
    let len = kvals.len();
    let coef = &coef[..len];
    if nnz > FUSED_MAX_NNZ {
        return dot_by_columns(level, coef, kvals);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::at_most(level) {
        // SAFETY: both slices hold len values.
        return unsafe { x86::rows::decision_sum(v, coef, kvals) };
    }
    let _ = level;
    dots::dot_portable(coef, kvals)
}

/// `return x86::rows::f::<V>(args)` for the V in the list that equals `vectors` (the number of
/// vectors a loop keeps per output row, a const generic chosen at run time); nothing when none
/// does.
#[cfg(target_arch = "x86_64")]
macro_rules! by_vectors {
    ($vectors:expr, [$($v:literal),+], $f:ident, $args:tt) => {
        match $vectors {
            $($v => return x86::rows::$f::<$v> $args,)+
            _ => {}
        }
    };
}

/// out[k] = sum_j weights[j] * coef[j * n_out + k] for k < n_out: the decision values of a model
/// with `n_out` coefficients per SV (SV-major) from its kernel values. AVX-512 and AVX2 keep up
/// to 32 outputs in registers, four SVs in flight, with the same sums in the same order (the same
/// bits); more outputs take the portable loop, which keeps that order unfused. (Nothing calls
/// `f64::mul_add` here: without FMA enabled at compile time it is a software routine.)
pub fn weighted_row_sum(
    level: Level,
    coef: &[f64],
    n_out: usize,
    weights: &[f64],
    out: &mut [f64],
) {
    let n = weights.len().min(coef.len() / n_out.max(1));
    assert!(out.len() >= n_out, "weighted_row_sum: short output");
    let (coef, weights, out) = (&coef[..n * n_out], &weights[..n], &mut out[..n_out]);
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() && n_out > 0 {
            // SAFETY: AVX-512F runs here; coef holds n rows of n_out, out n_out values.
            unsafe {
                by_vectors!(
                    n_out.div_ceil(8),
                    [1, 2, 3, 4],
                    weighted_row_sum_avx512,
                    (coef, n_out, weights, out)
                );
            }
        }
        if level >= Level::Avx2 && Level::Avx2.runs_here() && n_out > 0 {
            // SAFETY: AVX2 and FMA run here; coef holds n rows of n_out, out n_out values.
            unsafe {
                by_vectors!(
                    n_out.div_ceil(4),
                    [1, 2, 3, 4, 5, 6, 7, 8],
                    weighted_row_sum_avx2,
                    (coef, n_out, weights, out)
                );
            }
        }
    }
    let _ = level;
    rows::weighted_row_sum_portable(coef, n_out, weights, out)
}

// Merge partner scans and the j scan (`scans.rs`, `j_scan.rs`, `x86/scans.rs`, `x86/j_scan.rs`).

/// The index of the value of least square (the first of equal ones) and that square; None when
/// empty. A NaN square is never the least unless it comes first and nothing follows.
pub fn argmin_sq(level: Level, values: &[f64]) -> Option<(usize, f64)> {
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() && values.len() >= 16 {
            // SAFETY: AVX-512F runs here.
            return Some(unsafe { x86::scans::argmin_sq_avx512(values) });
        }
    }
    let _ = level;
    scans::argmin_sq_portable(values)
}

/// The first index j != `except` of the largest `kappa[j]` among those with `sign * coef[j] > 0`
/// (NaN values never win); None when there is none. The nearest same-sign partner of SV
/// `except`.
pub fn argmax_same_sign(
    level: Level,
    coef: &[f64],
    kappa: &[f64],
    sign: f64,
    except: usize,
) -> Option<usize> {
    let n = coef.len().min(kappa.len());
    let (coef, kappa) = (&coef[..n], &kappa[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: AVX-512F runs here; both slices hold n values.
            return unsafe { x86::scans::argmax_same_sign_avx512(coef, kappa, sign, except) };
        }
    }
    let _ = level;
    scans::argmax_same_sign_portable(coef, kappa, sign, except)
}

/// Visits, in increasing j, every j with `sign * coef[j] > 0` and not `kappa[j] * scale < cut`
/// (NaN passes); `visit(j)` returns the cut from then on, never lower. The filter of a merge
/// partner search: most SVs fail it, eight at a time with AVX-512.
pub fn scan_candidates(
    level: Level,
    coef: &[f64],
    kappa: &[f64],
    sign: f64,
    scale: f64,
    cut: f64,
    visit: impl FnMut(usize) -> f64,
) {
    let n = coef.len().min(kappa.len());
    let (coef, kappa) = (&coef[..n], &kappa[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: AVX-512F runs here; both slices hold n values.
            let filter = CandidateFilter { sign, scale, cut };
            return unsafe { x86::scans::scan_candidates_avx512(coef, kappa, filter, visit) };
        }
    }
    let _ = level;
    scans::scan_candidates_portable(coef, kappa, CandidateFilter { sign, scale, cut }, visit, 0)
}

/// The j scan of a run (`JScanInput`, `JScan`), updating `v` in place. Every level gives the
/// same result and the same values (AVX-512 and AVX2: eight or four candidates at a time, the
/// lanes merged by the same tie rules; AVX-512 without the portable loop's product test before
/// the division, AVX2 with it).
pub fn j_scan<T: RowValue>(level: Level, v: &mut [f64], input: &JScanInput<'_, T>) -> JScan {
    assert_eq!(
        v.len(),
        input.t.len(),
        "j_scan: values and positions differ in length"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: AVX-512F runs here; the lengths are checked.
            return unsafe { x86::j_scan::j_scan_avx512(v, input) };
        }
        if level >= Level::Avx2 && Level::Avx2.runs_here() {
            // SAFETY: AVX2 runs here; the lengths are checked.
            return unsafe { x86::j_scan::j_scan_avx2(v, input) };
        }
    }
    let _ = level;
    j_scan::j_scan_portable(v, input, 0, JScan::default())
}

// Dot products and axpys (`dots.rs`, `x86/dots.rs`).

/// Sum of a[i] * b[i] over the common length.
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::current().is_some() {
        // SAFETY: `level()` runs here, so AVX2 and FMA do.
        return unsafe { x86::dots::dot_avx2(a, b) };
    }
    dots::dot_portable(a, b)
}

/// y[i] += alpha * x[i] over the common length.
#[inline]
pub fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::dots::axpy(v, alpha, x, y) };
    }
    dots::axpy_portable(alpha, x, y)
}

/// y += alpha * x for x stored narrower than f64, in f32 or halves (half or a quarter of the
/// memory traffic of an f64 copy; widening is exact, so f32 copies of values f32 holds give
/// the f64 results).
#[inline]
pub fn axpy_narrow<T: ColumnValue>(alpha: f64, x: &[T], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::dots::axpy_narrow(v, alpha, x, y) };
    }
    dots::axpy_narrow_portable(alpha, x, y)
}

/// Sum of x[i] * y[i] for x stored in f32 or halves (widened exactly) over the common length.
#[inline]
pub fn dot_narrow<T: ColumnValue>(x: &[T], y: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::dots::dot_narrow(v, x, y) };
    }
    dots::dot_narrow_portable(x, y)
}

/// Dot products of 0/1 rows held as bit sets: out[k] = the number of bits set in both `a` and
/// row k of `rows` (`a.len()` words a row, so `rows` holds out.len() rows).
pub fn and_popcounts(a: &[u64], rows: &[u64], out: &mut [f64]) {
    assert_eq!(
        rows.len(),
        a.len() * out.len(),
        "and_popcounts: one row of a's width per output"
    );
    #[cfg(target_arch = "x86_64")]
    if level() != Level::Portable && std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT.
        return unsafe { x86::dots::and_popcounts_popcnt(a, rows, out) };
    }
    dots::and_popcounts_by_width(a, rows, out)
}

/// Dot products of rows with values in {-1, 0, 1} held as two bit sets each (`a.len() / 2`
/// words of the columns at 1, then as many of those at -1; `rows` alike, out.len() rows):
/// out[k] = the columns where a and row k agree in sign minus those where they differ, the exact
/// sum of the products.
pub fn signed_and_popcounts(a: &[u64], rows: &[u64], out: &mut [f64]) {
    assert!(
        a.len().is_multiple_of(2),
        "signed_and_popcounts: two halves of equal words"
    );
    assert_eq!(
        rows.len(),
        a.len() * out.len(),
        "signed_and_popcounts: one row of a's width per output"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if a.len() == 2
            && level() == Level::Avx512
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
        {
            // SAFETY: the CPU has AVX-512F (the level), DQ and VPOPCNTDQ; the lengths checked.
            return unsafe { x86::dots::signed_and_popcounts_one_word_avx512(a, rows, out) };
        }
        if level() != Level::Portable && std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has POPCNT.
            return unsafe { x86::dots::signed_and_popcounts_popcnt(a, rows, out) };
        }
    }
    dots::signed_and_popcounts_by_width(a, rows, out)
}

/// Dot products of 8 rows with `m` rows of a feature-major copy, register-blocked: for p in 0..8
/// and k in 0..m, dots[p * m + k] = the chain over the columns c of `cols` (ascending) of
/// q[p * width + c] * xt[c * stride + k], each step a fused multiply-add on the vector levels and a
/// multiply then an add on the portable one. That is `axpy` (`axpy_f32`) over the non-zero
/// q[p, c] one row at a time, value for value: a step with q = 0 adds an exact zero to a sum that
/// is never -0. Each loaded lane of the copy serves the 8 rows from a register, where the axpy
/// path loads and stores its sum once per column and row (the gain on dense rows:
/// `docs/kernel_rows_notes.md`); `cols` should hold the columns where any of the 8 rows is
/// non-zero.
pub fn dots_8_rows<T: ColumnValue>(
    q: &[f64],
    width: usize,
    cols: &[usize],
    xt: &[T],
    stride: usize,
    m: usize,
    dots: &mut [f64],
) {
    assert!(q.len() >= BLOCK_ROWS * width && dots.len() >= BLOCK_ROWS * m);
    if let Some(&last) = cols.last() {
        assert!(last < width && cols.windows(2).all(|w| w[0] < w[1]));
        if m > 0 {
            assert!(last * stride + m <= xt.len());
        }
    }
    let block = EightRows(q, width, cols, xt, stride, m);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: the bounds checked above.
        return unsafe { x86::dots::dots_8_rows(v, block, dots) };
    }
    dots::dots_8_rows_portable(block, dots)
}

/// Dot products of one row `q` with `m` rows of a feature-major copy: dots[k] = the chain over
/// the columns c of `cols` (ascending) of q[c] * xt[c * stride + k], each step a fused
/// multiply-add on the vector levels and a multiply then an add on the portable one: `axpy`
/// (`axpy_narrow`) over the non-zero q[c], value for value. The vector levels hold
/// `ONE_ROW_VECTORS` vectors of sums in registers across the columns, where the axpy loads and
/// stores its sums once per column (the gain on dense rows: `docs/kernel_rows_notes.md`).
/// `cols` should be q's non-zero columns.
pub fn dots_one_row<T: ColumnValue>(
    q: &[f64],
    cols: &[usize],
    xt: &[T],
    stride: usize,
    m: usize,
    dots: &mut [f64],
) {
    assert!(dots.len() >= m);
    if let Some(&last) = cols.last() {
        assert!(last < q.len() && cols.windows(2).all(|w| w[0] < w[1]));
        if m > 0 {
            assert!(last * stride + m <= xt.len());
        }
    }
    let row = OneRow(q, cols, xt, stride, m);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: the bounds checked above.
        return unsafe { x86::dots::dots_one_row(v, row, dots) };
    }
    dots::dots_one_row_portable(row, dots)
}

// Half-precision products (`half.rs`, `x86/half.rs`).

/// Sum of x[i] y[i] in f32 arithmetic (halves widened to f32 exactly): for products whose
/// operands are approximate anyway (the Hessian of half-precision rows), at twice the lanes
/// of f64 arithmetic and without a widening per value. The sums' order is each level's own
/// (AVX-512 adds 16 lanes at a time).
pub fn dot_half(x: &[F16], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    match x86::Vector::current() {
        // SAFETY: the level runs AVX-512F as well as AVX2, FMA and F16C.
        Some(x86::Vector::Avx512(_)) => return unsafe { x86::half::dot_half_avx512(x, y) },
        // SAFETY: a vector level runs AVX2, FMA and F16C (`Level::runs_here`).
        Some(x86::Vector::Avx2(_)) => return unsafe { x86::half::dot_half_avx2(x, y) },
        None => {}
    }
    half::dot_half_portable(x, y)
}

/// y += a x in f32 arithmetic (see `dot_half`).
pub fn axpy_half(a: f32, x: &[F16], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match x86::Vector::current() {
        // SAFETY: as in `dot_half`.
        Some(x86::Vector::Avx512(_)) => return unsafe { x86::half::axpy_half_avx512(a, x, y) },
        // SAFETY: as in `dot_half`.
        Some(x86::Vector::Avx2(_)) => return unsafe { x86::half::axpy_half_avx2(a, x, y) },
        None => {}
    }
    half::axpy_half_portable(a, x, y)
}

/// Appends `x` rounded to halves (`F16::from_f32`, bit for bit on every level).
pub fn extend_f16(x: &[f32], out: &mut Vec<F16>) {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::current().is_some() {
        // SAFETY: a vector level runs F16C (`Level::runs_here`).
        return unsafe { x86::half::extend_f16_f16c(x, out) };
    }
    half::extend_f16_portable(x, out)
}

// Tiles of dense matrix products (`tiles.rs`, `x86/tiles.rs`).

/// out[r * nr + j] = sum over k < kc of a[r * a_stride + k] * panel[k * nr + j], for the
/// `rows` (1 to `PRODUCT_TILE_ROWS`) rows of `a` and the nr = `product_tile_columns()` columns
/// of `panel` (packed k-major: the nr values of each k together). The register-blocked
/// micro-kernel of the dense products (the polish's factorisations): 12 fused multiply-adds
/// per 2 loads and 6 broadcasts, each sum taken in k order on every level.
pub fn product_tile(
    a: &[f64],
    a_stride: usize,
    rows: usize,
    panel: &[f64],
    kc: usize,
    out: &mut [f64],
) {
    let nr = product_tile_columns();
    assert!((1..=PRODUCT_TILE_ROWS).contains(&rows));
    assert!((rows - 1) * a_stride + kc <= a.len() && panel.len() >= kc * nr);
    assert!(out.len() >= rows * nr);
    let tile = ProductTile(a, a_stride, rows, panel, kc);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: the bounds checked above; the level's width is nr.
        return unsafe { x86::tiles::product_tile(v, tile, out) };
    }
    tiles::product_tile_portable(tile, nr, out)
}

/// `product_tile` in f32 (sums in f32, each in k order, fused on the vector levels), with
/// nr = `product_tile_f32_columns()`: for the factorisations whose result is kept in f32 and
/// only preconditions (twice the lanes and half the bytes of f64).
pub fn product_tile_f32(
    a: &[f32],
    a_stride: usize,
    rows: usize,
    panel: &[f32],
    kc: usize,
    out: &mut [f32],
) {
    let nr = product_tile_f32_columns();
    assert!((1..=PRODUCT_TILE_ROWS).contains(&rows));
    assert!((rows - 1) * a_stride + kc <= a.len() && panel.len() >= kc * nr);
    assert!(out.len() >= rows * nr);
    let tile = ProductTileF32(a, a_stride, rows, panel, kc);
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: the bounds checked above; the level's width is nr.
        return unsafe { x86::tiles::product_tile_f32(v, tile, out) };
    }
    tiles::product_tile_f32_portable(tile, nr, out)
}
