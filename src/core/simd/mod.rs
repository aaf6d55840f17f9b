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

use std::sync::atomic::{AtomicU8, Ordering};

#[cfg(target_arch = "x86_64")]
mod x86;
/// The vector levels as generic code sees them, and the exponential's core (the benchmark of the
/// arithmetic floor writes its loops with them too).
#[cfg(target_arch = "x86_64")]
pub use x86::{exp_in_range, Avx2, Avx512, ScanLanes, Simd};

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

// exp(x) = 2^n exp(r), x = n ln2 + r (Cody-Waite: ln2 split in a high part exact in 32 bits and
// a low part), |r| <= ln2/2; exp(r) by its Taylor polynomial of degree 13 (remainder below
// 5e-18 relative); 2^n assembled in the exponent bits after rounding x log2(e) to an integer by
// adding 1.5 * 2^52. Relative error against f64::exp over [-708, 0]: at most 2.2e-16 measured
// (one ulp) on every level, held below 4.5e-16 by `fast_exp_matches_std_exp` over 200,000
// points of the whole range. Below -708, 0.
const LOG2E: f64 = std::f64::consts::LOG2_E;
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
const SHIFTER: f64 = 6_755_399_441_055_744.0;
const EXP_MIN_ARG: f64 = -708.0;
const INV_FACT: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// The Taylor degree of the exponential for kernel values stored in f32 (the polish's): the
/// remainder (ln2 / 2)^8 / 8! < 5.3e-9 relative lies under f32's half ulp (6e-8), so the value
/// rounded to f32 is almost always the degree-13 one's, for six fused multiply-adds fewer.
pub const SINGLE_DEGREE: usize = 7;

/// The exponential above for x <= 0 (see the constants); branch-free. With `FMA` every
/// multiply-add is fused, the exact sequence of the vector paths.
#[inline(always)]
pub(crate) fn exp_nonpositive<const FMA: bool>(x: f64) -> f64 {
    exp_nonpositive_of::<FMA, 13>(x)
}

/// `exp_nonpositive` with the Taylor polynomial of degree `DEGREE` (at most 13).
#[inline(always)]
fn exp_nonpositive_of<const FMA: bool, const DEGREE: usize>(x: f64) -> f64 {
    #[inline(always)]
    fn fma<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    let underflow = x < EXP_MIN_ARG;
    let x = if underflow { EXP_MIN_ARG } else { x };
    let shifted = fma::<FMA>(x, LOG2E, SHIFTER);
    let n = shifted - SHIFTER;
    let r = fma::<FMA>(-n, LN2_LO, fma::<FMA>(-n, LN2_HI, x));
    let mut p = INV_FACT[DEGREE];
    let mut k = DEGREE - 1;
    while k > 0 {
        p = fma::<FMA>(p, r, INV_FACT[k]);
        k -= 1;
    }
    p = fma::<FMA>(p, r, INV_FACT[0]);
    let n_bits = shifted.to_bits().wrapping_sub(SHIFTER.to_bits());
    let scale = f64::from_bits(n_bits.wrapping_add(1023) << 52);
    if underflow {
        0.0
    } else {
        p * scale
    }
}

/// The Gaussian kernel value from a dot product: exp(-gamma max(0, x_norm + sv_norm - 2 dot)).
/// Rounding below 0 is clamped; a NaN distance (squared norms that overflowed) stays NaN, never
/// a silent 1.
#[inline(always)]
fn rbf_from_dot<const FMA: bool>(gamma: f64, x_norm: f64, sv_norm: f64, dot: f64) -> f64 {
    let d2 = x_norm + sv_norm - 2.0 * dot;
    let d2 = if d2 < 0.0 { 0.0 } else { d2 };
    exp_nonpositive::<FMA>(-gamma * d2)
}

/// `rbf_from_dot` rounded to f32, its exponential of degree `SINGLE_DEGREE`.
#[inline(always)]
fn rbf_from_dot_single<const FMA: bool>(gamma: f64, x_norm: f64, sv_norm: f64, dot: f64) -> f32 {
    let d2 = x_norm + sv_norm - 2.0 * dot;
    let d2 = if d2 < 0.0 { 0.0 } else { d2 };
    exp_nonpositive_of::<FMA, SINGLE_DEGREE>(-gamma * d2) as f32
}

/// Gaussian kernel values in f32 from dot products with a point of squared norm `sq_norm`:
/// out[j] <- exp(-gamma max(0, sq_norm + sv_sq_norms[j] - 2 dots[j])) rounded to f32, the
/// exponential of degree `SINGLE_DEGREE` (for values kept in f32: the Hessian-free polish's).
/// The same values on the AVX2 and AVX-512 levels; the portable path agrees to an ulp.
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
        return unsafe { x86::rbf_from_dots_f32(v, gamma, sq_norm, norms, dots, out) };
    }
    let _ = level;
    for ((o, &d), &sn) in out.iter_mut().zip(dots).zip(norms) {
        *o = rbf_from_dot_single::<false>(gamma, sq_norm, sn, d);
    }
}

#[inline(always)]
fn rbf_from_dots_body<const FMA: bool>(
    gamma: f64,
    sq_norm: f64,
    sv_sq_norms: &[f64],
    dots: &mut [f64],
) {
    for (d, &n) in dots.iter_mut().zip(sv_sq_norms) {
        *d = rbf_from_dot::<FMA>(gamma, sq_norm, n, *d);
    }
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
        return unsafe { x86::rbf_from_dots(v, gamma, sq_norm, norms, dots) };
    }
    let _ = level;
    rbf_from_dots_body::<false>(gamma, sq_norm, norms, dots)
}

/// tanh(gamma dot + coef0) from a dot product (the sigmoid kernel): with a = |x| and
/// t = exp(-2a) from the exponential above, tanh(a) = (1 - t) / (1 + t), signed as x. Absolute
/// error a few ulp of 1 (the subtraction cancels for tiny a, where tanh(x) ~ x is small: the
/// kernel values need absolute, not relative, accuracy); NaN stays NaN.
#[inline(always)]
fn sigmoid_from_dot<const FMA: bool>(gamma: f64, coef0: f64, dot: f64) -> f64 {
    let x = if FMA {
        gamma.mul_add(dot, coef0)
    } else {
        gamma * dot + coef0
    };
    let t = exp_nonpositive::<FMA>(-2.0 * x.abs());
    ((1.0 - t) / (1.0 + t)).copysign(x)
}

#[inline(always)]
fn sigmoid_from_dots_body<const FMA: bool>(gamma: f64, coef0: f64, dots: &mut [f64]) {
    for d in dots.iter_mut() {
        *d = sigmoid_from_dot::<FMA>(gamma, coef0, *d);
    }
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
        return unsafe { x86::sigmoid_from_dots(v, gamma, coef0, dots) };
    }
    let _ = level;
    sigmoid_from_dots_body::<false>(gamma, coef0, dots)
}

/// Turns dot products into polynomial kernel values (gamma dot + coef0)^degree in place. The
/// usual degrees multiply out in a loop the compiler vectorises; `powi` is a call per value.
#[inline]
pub fn poly_from_dots(gamma: f64, coef0: f64, degree: u32, dots: &mut [f64]) {
    fn each(dots: &mut [f64], gamma: f64, coef0: f64, f: impl Fn(f64) -> f64) {
        for d in dots.iter_mut() {
            *d = f(gamma * *d + coef0);
        }
    }
    match degree {
        1 => each(dots, gamma, coef0, |b| b),
        2 => each(dots, gamma, coef0, |b| b * b),
        3 => each(dots, gamma, coef0, |b| b * b * b),
        4 => each(dots, gamma, coef0, |b| {
            let s = b * b;
            s * s
        }),
        _ => each(dots, gamma, coef0, |b| b.powi(degree as i32)),
    }
}

/// An input row by its non-zeros (columns in increasing order need not hold) and squared norm.
#[derive(Debug, Clone, Copy)]
pub struct RowNonzeros<'a> {
    pub cols: &'a [usize],
    pub vals: &'a [f64],
    pub sq_norm: f64,
}

/// Support vectors stored feature-major: feature c of SV j at `svt[c * stride + j]`, j < len,
/// with their squared norms.
#[derive(Debug, Clone, Copy)]
pub struct FeatureMajor<'a> {
    pub svt: &'a [f64],
    pub stride: usize,
    pub len: usize,
    pub sq_norms: &'a [f64],
}

impl<'a> FeatureMajor<'a> {
    pub fn new(svt: &'a [f64], stride: usize, len: usize, sq_norms: &'a [f64]) -> Self {
        FeatureMajor {
            svt,
            stride,
            len,
            sq_norms,
        }
    }
}

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
        return unsafe { x86::rbf_row(v, FusedRow(svs, row, gamma, coef), kvals) };
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
            unsafe { x86::axpy(vector, v, column, kv) };
            continue;
        }
        axpy_portable(v, column, kv);
    }
    rbf_from_dots_at(level, gamma, row.sq_norm, &svs.sq_norms[..len], kv);
    coef.map_or(0.0, |c| dot_by_columns(level, &c[..len], kv))
}

/// `rbf_row`'s operands (svs, row, gamma, coef) once it has checked them: every column of the
/// row indexes a run of `svs.len` values inside `svs`, and the coefficients (and
/// `svs.sq_norms`) hold at least that many.
#[derive(Clone, Copy)]
pub(crate) struct FusedRow<'a>(
    pub FeatureMajor<'a>,
    pub RowNonzeros<'a>,
    pub f64,
    pub Option<&'a [f64]>,
);

/// Rows with more non-zeros than this take `rbf_row`'s pass by columns. Measured on this
/// project's AMD EPYC (AVX-512), B = 496 (`cargo bench --bench floor`): fused vs by columns 0.87
/// vs 1.20 us for 14 non-zeros, 1.54 vs 1.60 at 22, 2.28 vs 1.88 at 32, 4.50 vs 3.30 at 48,
/// 8.44 vs 7.13 at 123: a block of 32 SVs reads one short run per non-zero, and past a few dozen
/// runs the loads stall where the per-feature passes stream.
const FUSED_MAX_NNZ: usize = 24;

/// The decision sum of `rbf_row` by columns: `dot` on a vector level, else the portable dot.
fn dot_by_columns(level: Level, coef: &[f64], kvals: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::at_most(level).is_some() {
        return dot(coef, kvals);
    }
    let _ = level;
    dot_portable(coef, kvals)
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
        return unsafe { x86::decision_sum(v, coef, kvals) };
    }
    let _ = level;
    dot_portable(coef, kvals)
}

/// `return x86::f::<V>(args)` for the V in the list that equals `vectors` (the number of
/// vectors a loop keeps per output row, a const generic chosen at run time); nothing when none
/// does.
#[cfg(target_arch = "x86_64")]
macro_rules! by_vectors {
    ($vectors:expr, [$($v:literal),+], $f:ident, $args:tt) => {
        match $vectors {
            $($v => return x86::$f::<$v> $args,)+
            _ => {}
        }
    };
}

/// out[k] = sum_j weights[j] * coef[j * n_out + k] for k < n_out: the decision values of a model
/// with `n_out` coefficients per SV (SV-major) from its kernel values. AVX-512 and AVX2 keep up
/// to 32 outputs in registers, four SVs in flight, with the same sums in the same order (the same
/// bits); more outputs take the portable loop, which keeps that order unfused. (Its first form
/// called `f64::mul_add`, which without FMA enabled at compile time is a software routine: on
/// an AVX2 machine 74% of the polish's time went there.)
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
    // Four partial sums per output (rows j = u mod 4, the tail in the first), added pairwise;
    // output by output, so nothing is allocated.
    let full = weights.len() / 4 * 4;
    for (k, o) in out.iter_mut().enumerate() {
        let mut partial = [0.0f64; 4];
        for (j, &w) in weights.iter().enumerate() {
            let u = if j < full { j % 4 } else { 0 };
            partial[u] += w * coef[j * n_out + k];
        }
        *o = (partial[0] + partial[1]) + (partial[2] + partial[3]);
    }
}

/// The index of the value of least square (the first of equal ones) and that square; None when
/// empty. A NaN square is never the least unless it comes first and nothing follows.
pub fn argmin_sq(level: Level, values: &[f64]) -> Option<(usize, f64)> {
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() && values.len() >= 16 {
            // SAFETY: AVX-512F runs here.
            return Some(unsafe { x86::argmin_sq_avx512(values) });
        }
    }
    let _ = level;
    argmin_sq_portable(values)
}

fn argmin_sq_portable(values: &[f64]) -> Option<(usize, f64)> {
    let (&first, rest) = values.split_first()?;
    let (mut at, mut least) = (0, first * first);
    for (j, c) in rest.iter().enumerate() {
        let v = c * c;
        if v < least || least.is_nan() {
            (at, least) = (j + 1, v);
        }
    }
    Some((at, least))
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
    let eligible = |j: usize| j != except && sign * coef[j] > 0.0 && !kappa[j].is_nan();
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: AVX-512F runs here; both slices hold n values.
            return unsafe { x86::argmax_same_sign_avx512(coef, kappa, sign, except) };
        }
    }
    let _ = level;
    let mut best: Option<usize> = None;
    for j in (0..n).filter(|&j| eligible(j)) {
        if best.is_none_or(|b| kappa[j] > kappa[b]) {
            best = Some(j);
        }
    }
    best
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
            return unsafe { x86::scan_candidates_avx512(coef, kappa, filter, visit) };
        }
    }
    let _ = level;
    scan_candidates_portable(coef, kappa, CandidateFilter { sign, scale, cut }, visit, 0)
}

/// `scan_candidates`' test: the coefficient's sign, and the kernel value times `scale` against
/// the cut, which rises as partners are found.
#[derive(Clone, Copy)]
pub(crate) struct CandidateFilter {
    pub sign: f64,
    pub scale: f64,
    pub cut: f64,
}

impl CandidateFilter {
    /// Whether a partner of kernel value `kappa` lies in a cell the search skips (NaN never
    /// does).
    #[inline(always)]
    fn below_cut(&self, kappa: f64) -> bool {
        kappa * self.scale < self.cut
    }
}

fn scan_candidates_portable(
    coef: &[f64],
    kappa: &[f64],
    mut filter: CandidateFilter,
    mut visit: impl FnMut(usize) -> f64,
    offset: usize,
) {
    let sign = filter.sign;
    for (j, (&c, &k)) in coef.iter().zip(kappa).enumerate().skip(offset) {
        if filter.below_cut(k) || sign * c <= 0.0 || (sign * c).is_nan() {
            continue;
        }
        filter.cut = visit(j);
    }
}

/// One run of WSS2's j candidates for an i (ALFPGM's pWSS, `alfpgm::pick_pairs`): the
/// candidates' look-ahead values `v` at positions `t` (increasing), all of the run's kernel rows
/// (of element type `T`, `RowValue`) starting at position `j0`.
#[derive(Clone, Copy)]
pub struct JScanInput<'a, T: RowValue> {
    pub t: &'a [u32],
    /// K_tt of every position.
    pub diag: &'a [f64],
    /// Whether every K_tt is the same (the RBF kernel's 1): the vector scans then read none.
    pub equal_diag: bool,
    pub j0: usize,
    /// i's position, its value (the largest look-ahead violation) and its kernel row from j0.
    pub i: usize,
    pub vi: f64,
    pub row_i: &'a [T],
    /// The previous pair's look-ahead update, v -= (K_ti' - K_tj') step: their rows from j0.
    pub update: Option<(&'a [T], &'a [T], f64)>,
    /// With a sum per label: the labels and i's (other labels' candidates do not count).
    pub label: Option<(&'a [f64], f64)>,
    /// The curvature that replaces a_it <= 0.
    pub tau: f64,
}

/// What a run gives: the two smallest values (the first by place, the earliest of equal
/// ones; `usize::MAX` when the run has none) and the best j, argmin -b^2 / a_it over the places
/// with b = vi - v > 0 and t != i (the latest of equal ones): (-b^2 / a, place, b, a), place
/// `usize::MAX` when there is none. A candidate whose value is +inf (left out: already in the
/// working set) counts for neither.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JScan {
    pub first: (f64, usize),
    pub second: f64,
    pub best: (f64, usize, f64, f64),
}

impl Default for JScan {
    fn default() -> Self {
        JScan {
            first: (f64::INFINITY, usize::MAX),
            second: f64::INFINITY,
            best: (f64::INFINITY, usize::MAX, 0.0, 0.0),
        }
    }
}

/// a_it = K_ii + K_tt - 2 K_it, `tau` where that is not positive.
#[inline(always)]
fn pair_curvature<T: RowValue>(k_ii: f64, k_tt: f64, k_it: T, tau: f64) -> f64 {
    let a = k_ii + k_tt - 2.0 * k_it.widen();
    if a > 0.0 {
        a
    } else {
        tau
    }
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
            return unsafe { x86::j_scan_avx512(v, input) };
        }
        if level >= Level::Avx2 && Level::Avx2.runs_here() {
            // SAFETY: AVX2 runs here; the lengths are checked.
            return unsafe { x86::j_scan_avx2(v, input) };
        }
    }
    let _ = level;
    j_scan_portable(v, input, 0, JScan::default())
}

/// The j scan from place `from` on, continuing the result `out` of the places before it.
fn j_scan_portable<T: RowValue>(
    v: &mut [f64],
    input: &JScanInput<'_, T>,
    from: usize,
    mut out: JScan,
) -> JScan {
    let &JScanInput {
        t,
        diag,
        equal_diag: _,
        j0,
        i,
        vi,
        row_i,
        update,
        label,
        tau,
    } = input;
    let k_ii = diag[i];
    for k in from..v.len() {
        let tk = t[k] as usize;
        if let Some((ri, rj, step)) = update {
            v[k] -= (ri[tk - j0].widen() - rj[tk - j0].widen()) * step;
        }
        if label.is_some_and(|(y, yi)| y[tk] != yi) {
            continue;
        }
        let vk = v[k];
        if vk < out.first.0 {
            out.second = out.first.0;
            out.first = (vk, k);
        } else if vk < out.second {
            out.second = vk;
        }
        let b = vi - vk;
        if b <= 0.0 || tk == i {
            continue;
        }
        let a = pair_curvature(k_ii, diag[tk], row_i[tk - j0], tau);
        // Divides only where the gain b^2 / a can reach the best one: the product test admits
        // everything the quotient's test (within its rounding) would, so the same j wins.
        let b2 = b * b;
        if b2 < -out.best.0 * a * (1.0 - 1e-12) {
            continue;
        }
        let obj = -b2 / a;
        if obj <= out.best.0 {
            out.best = (obj, k, b, a);
        }
    }
    out
}

fn dot_portable(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 8];
    let chunks = n / 8;
    for c in 0..chunks {
        let (ca, cb) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for k in 0..8 {
            acc[k] += ca[k] * cb[k];
        }
    }
    let mut sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for k in chunks * 8..n {
        sum += a[k] * b[k];
    }
    sum
}

fn axpy_portable(alpha: f64, x: &[f64], y: &mut [f64]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// Sum of a[i] * b[i] over the common length.
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::current().is_some() {
        // SAFETY: `level()` runs here, so AVX2 and FMA do.
        return unsafe { x86::dot_avx2(a, b) };
    }
    dot_portable(a, b)
}

/// y[i] += alpha * x[i] over the common length.
#[inline]
pub fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::axpy(v, alpha, x, y) };
    }
    axpy_portable(alpha, x, y)
}

/// y += alpha * x for x stored narrower than f64, in f32 or halves (half or a quarter of the
/// memory traffic of an f64 copy; widening is exact, so f32 copies of values f32 holds give
/// the f64 results).
#[inline]
pub fn axpy_narrow<T: ColumnValue>(alpha: f64, x: &[T], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::axpy_narrow(v, alpha, x, y) };
    }
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi.widen();
    }
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
        return unsafe { x86::and_popcounts_popcnt(a, rows, out) };
    }
    and_popcounts_by_width(a, rows, out)
}

/// `and_popcounts` with the common widths unrolled (a9a's 123 columns are two words).
#[inline(always)]
fn and_popcounts_by_width(a: &[u64], rows: &[u64], out: &mut [f64]) {
    #[inline(always)]
    fn fixed<const W: usize>(a: &[u64], rows: &[u64], out: &mut [f64]) {
        let mut a_w = [0u64; W];
        a_w.copy_from_slice(&a[..W]);
        for (o, r) in out.iter_mut().zip(rows.chunks_exact(W)) {
            let mut bits = 0u32;
            for w in 0..W {
                bits += (a_w[w] & r[w]).count_ones();
            }
            *o = f64::from(bits);
        }
    }
    match a.len() {
        0 => out.fill(0.0),
        1 => fixed::<1>(a, rows, out),
        2 => fixed::<2>(a, rows, out),
        3 => fixed::<3>(a, rows, out),
        4 => fixed::<4>(a, rows, out),
        w => {
            for (o, r) in out.iter_mut().zip(rows.chunks_exact(w)) {
                *o = f64::from(
                    a.iter()
                        .zip(r)
                        .map(|(x, y)| (x & y).count_ones())
                        .sum::<u32>(),
                );
            }
        }
    }
}

/// Sum of x[i] * y[i] for x stored in f32 or halves (widened exactly) over the common length.
#[inline]
pub fn dot_narrow<T: ColumnValue>(x: &[T], y: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: nothing beyond the level.
        return unsafe { x86::dot_narrow(v, x, y) };
    }
    let n = x.len().min(y.len());
    let mut acc = [0.0f64; 4];
    for (k, (&a, &b)) in x[..n].iter().zip(&y[..n]).enumerate() {
        acc[k % 4] += a.widen() * b;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// An IEEE 754 half-precision value (binary16: 11 significant bits, normal down to 6.1e-5),
/// the storage of copies that only shape a direction (the polish's squared rows for its Hessian
/// products): half the bytes of f32 where a pass is bound by reading them. Converted with
/// F16C on the vector levels; the portable conversions below give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct F16(pub u16);

impl F16 {
    /// x rounded to the nearest half (ties to even), overflow to infinity, NaN kept a NaN: what
    /// `vcvtps2ph` gives with round-to-nearest.
    pub fn from_f32(x: f32) -> F16 {
        const F32_INFINITY: u32 = 0xff << 23;
        // 65536: the first magnitude no half rounds from (65520 and up round to infinity below).
        const HALF_OVERFLOW: u32 = (127 + 16) << 23;
        // Below 2^-14 the half is subnormal: adding 0.5 (2^-1) puts the half's last bit at the
        // f32's, and the f32 addition rounds to nearest even there.
        const SUBNORMAL_SHIFT: u32 = 126 << 23;
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let a = bits & 0x7fff_ffff;
        let h = if a >= HALF_OVERFLOW {
            if a > F32_INFINITY {
                0x7e00 | ((a >> 13) & 0x3ff) as u16
            } else {
                0x7c00
            }
        } else if a < 113 << 23 {
            let v = f32::from_bits(a) + f32::from_bits(SUBNORMAL_SHIFT);
            (v.to_bits() - SUBNORMAL_SHIFT) as u16
        } else {
            // Rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
            let odd = (a >> 13) & 1;
            (a.wrapping_sub(112 << 23).wrapping_add(0xfff + odd) >> 13) as u16
        };
        F16(sign | h)
    }

    /// The value, exactly (a normal half's bits placed in an f32's, a subnormal one scaled).
    pub fn to_f64(self) -> f64 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let exponent = (h >> 10) & 0x1f;
        let fraction = h & 0x3ff;
        let single = match exponent {
            0 => {
                let v = f64::from(fraction) * (1.0 / 16_777_216.0);
                return if sign != 0 { -v } else { v };
            }
            31 => f32::from_bits(sign | 0x7f80_0000 | (fraction << 13)),
            e => f32::from_bits(sign | ((e + 112) << 23) | (fraction << 13)),
        };
        f64::from(single)
    }
}

/// Sum of x[i] y[i] in f32 arithmetic (halves widened to f32 exactly): for products whose
/// operands are approximate anyway (the Hessian of half-precision rows), at twice the lanes
/// of f64 arithmetic and without a widening per value.
pub fn dot_half(x: &[F16], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::current().is_some() {
        // SAFETY: a vector level runs AVX2, FMA and F16C (`Level::runs_here`).
        return unsafe { x86::dot_half_avx2(x, y) };
    }
    x.iter()
        .zip(y)
        .fold(0.0f32, |s, (&a, &b)| (a.to_f64() as f32).mul_add(b, s))
}

/// y += a x in f32 arithmetic (see `dot_half`).
pub fn axpy_half(a: f32, x: &[F16], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::current().is_some() {
        // SAFETY: as in `dot_half`.
        return unsafe { x86::axpy_half_avx2(a, x, y) };
    }
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = a.mul_add(xi.to_f64() as f32, *yi);
    }
}

/// Appends `x` rounded to halves (`F16::from_f32`, bit for bit on every level).
pub fn extend_f16(x: &[f32], out: &mut Vec<F16>) {
    #[cfg(target_arch = "x86_64")]
    if x86::Vector::current().is_some() {
        // SAFETY: a vector level runs F16C (`Level::runs_here`).
        return unsafe { x86::extend_f16_f16c(x, out) };
    }
    out.extend(x.iter().map(|&v| F16::from_f32(v)));
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

/// Values stored for products in f64: f64; f32 (for data that f32 holds exactly, a feature-major
/// copy gives the same products); halves, for copies that only shape a direction.
pub trait ColumnValue: Copy + Send + Sync + 'static {
    fn widen(self) -> f64;
    /// The first `lanes` values from `ptr` on level `s` (a whole vector when `lanes` is at least
    /// its width; the rest 0), widened.
    ///
    /// # Safety
    /// `ptr..ptr + lanes` must be readable.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load<S: Simd>(s: S, ptr: *const Self, lanes: usize) -> S::F;
}

impl ColumnValue for f64 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load<S: Simd>(s: S, ptr: *const f64, lanes: usize) -> S::F {
        // SAFETY: the caller's contract.
        unsafe { s.load_lanes(ptr, lanes) }
    }
}

impl ColumnValue for f32 {
    #[inline(always)]
    fn widen(self) -> f64 {
        f64::from(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load<S: Simd>(s: S, ptr: *const f32, lanes: usize) -> S::F {
        // SAFETY: the caller's contract.
        unsafe { s.load_lanes_f32(ptr, lanes) }
    }
}

impl ColumnValue for F16 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self.to_f64()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load<S: Simd>(s: S, ptr: *const F16, lanes: usize) -> S::F {
        // SAFETY: the caller's contract.
        unsafe { s.load_lanes_f16(ptr, lanes) }
    }
}

/// The element type of the exact solvers' kernel rows (`kernels::kernel_cache`): f32, as
/// LIBSVM's `Qfloat`, or f64 where f32's rounding of the kernel values is larger than the
/// solver's tolerance can absorb (`exact::dual::RowPrecision`). The cache, the stores and the
/// solvers are generic over it and compiled once for each, so no loop over a row asks which.
pub trait RowValue: ColumnValue + ScanLanes + Default + PartialEq + std::fmt::Debug {
    /// `v` rounded to this type (to nearest).
    fn narrow(v: f64) -> Self;
}

impl RowValue for f32 {
    #[inline(always)]
    fn narrow(v: f64) -> f32 {
        v as f32
    }
}

impl RowValue for f64 {
    #[inline(always)]
    fn narrow(v: f64) -> f64 {
        v
    }
}

/// What `j_scan`'s vector levels need of a row's element type (nothing off x86-64).
#[cfg(not(target_arch = "x86_64"))]
pub trait ScanLanes {}
#[cfg(not(target_arch = "x86_64"))]
impl ScanLanes for f32 {}
#[cfg(not(target_arch = "x86_64"))]
impl ScanLanes for f64 {}

/// Rows of a `product_tile`.
pub const PRODUCT_TILE_ROWS: usize = 6;

/// Columns of a `product_tile` (the width of a packed panel) on this machine's level: two
/// vectors of doubles.
pub fn product_tile_columns() -> usize {
    match level() {
        Level::Avx512 => 16,
        _ => 8,
    }
}

/// `product_tile`'s operands once checked: rows of `a` (stride, count), the packed panel and
/// the length k of the sums.
#[derive(Clone, Copy)]
pub(crate) struct ProductTile<'a>(
    pub &'a [f64],
    pub usize,
    pub usize,
    pub &'a [f64],
    pub usize,
);

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
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: the bounds checked above; the level's width is nr.
        return unsafe { x86::product_tile(v, ProductTile(a, a_stride, rows, panel, kc), out) };
    }
    for r in 0..rows {
        for j in 0..nr {
            let mut sum = 0.0;
            for k in 0..kc {
                sum = a[r * a_stride + k].mul_add(panel[k * nr + j], sum);
            }
            out[r * nr + j] = sum;
        }
    }
}

/// `product_tile_f32`'s operands once checked (as `ProductTile`'s).
#[derive(Clone, Copy)]
pub(crate) struct ProductTileF32<'a>(
    pub &'a [f32],
    pub usize,
    pub usize,
    pub &'a [f32],
    pub usize,
);

/// Columns of a `product_tile_f32`: two vectors of floats.
pub fn product_tile_f32_columns() -> usize {
    2 * product_tile_columns()
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
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        // SAFETY: the bounds checked above; the level's width is nr.
        return unsafe {
            x86::product_tile_f32(v, ProductTileF32(a, a_stride, rows, panel, kc), out)
        };
    }
    for r in 0..rows {
        for j in 0..nr {
            let mut sum = 0.0f32;
            for k in 0..kc {
                sum = a[r * a_stride + k].mul_add(panel[k * nr + j], sum);
            }
            out[r * nr + j] = sum;
        }
    }
}

/// `dots_8_rows`' operands (q, width, cols, xt, stride, m) once it has checked them: 8 rows of
/// `width` values in q, the ascending columns below `width`, and column c's m values at
/// `xt[c * stride..]`.
#[derive(Clone, Copy)]
pub(crate) struct EightRows<'a, T>(
    pub &'a [f64],
    pub usize,
    pub &'a [usize],
    pub &'a [T],
    pub usize,
    pub usize,
);

/// Rows of a `dots_8_rows` block.
pub const BLOCK_ROWS: usize = 8;

/// Dot products of 8 rows with `m` rows of a feature-major copy, register-blocked: for p in 0..8
/// and k in 0..m, dots[p * m + k] = the chain over the columns c of `cols` (ascending) of
/// q[p * width + c] * xt[c * stride + k], each step a fused multiply-add on the vector levels and a
/// multiply then an add on the portable one. That is `axpy` (`axpy_f32`) over the non-zero
/// q[p, c] one row at a time, value for value: a step with q = 0 adds an exact zero to a sum that
/// is never -0. Each loaded lane of the copy serves the 8 rows from a register, where the axpy
/// path loads and stores its sum once per column and row: for dense rows (ijcnn1-like, 22
/// columns) a block of 8 rows costs about half as much; `cols` should hold the columns where
/// any of the 8 rows is non-zero.
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
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        let block = EightRows(q, width, cols, xt, stride, m);
        // SAFETY: the bounds checked above.
        return unsafe { x86::dots_8_rows(v, block, dots) };
    }
    for p in 0..BLOCK_ROWS {
        let out = &mut dots[p * m..(p + 1) * m];
        out.fill(0.0);
        for &c in cols {
            let qc = q[p * width + c];
            for (o, &v) in out.iter_mut().zip(&xt[c * stride..c * stride + m]) {
                *o += qc * v.widen();
            }
        }
    }
}

/// `dots_one_row`'s operands (q, cols, xt, stride, m) once it has checked them.
#[derive(Clone, Copy)]
pub(crate) struct OneRow<'a, T>(
    pub &'a [f64],
    pub &'a [usize],
    pub &'a [T],
    pub usize,
    pub usize,
);

/// Dot products of one row `q` with `m` rows of a feature-major copy: dots[k] = the chain over
/// the columns c of `cols` (ascending) of q[c] * xt[c * stride + k], each step a fused
/// multiply-add on the vector levels and a multiply then an add on the portable one: `axpy`
/// (`axpy_narrow`) over the non-zero q[c], value for value. The vector levels hold
/// `ONE_ROW_VECTORS` vectors of sums in registers across the columns, where the axpy loads and
/// stores its sums once per column: a kernel row of dense data with 42 features costs about
/// half as much. `cols` should be q's non-zero columns.
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
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = x86::Vector::current() {
        let row = OneRow(q, cols, xt, stride, m);
        // SAFETY: the bounds checked above.
        return unsafe { x86::dots_one_row(v, row, dots) };
    }
    let out = &mut dots[..m];
    out.fill(0.0);
    for &c in cols {
        let qc = q[c];
        for (o, &v) in out.iter_mut().zip(&xt[c * stride..c * stride + m]) {
            *o += qc * v.widen();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;

    /// Every vector level this CPU runs, with its token for the `x86` dispatchers.
    #[cfg(target_arch = "x86_64")]
    fn vector_levels() -> Vec<x86::Vector> {
        levels_here()
            .into_iter()
            .filter_map(x86::Vector::at_most)
            .collect()
    }

    /// `j_scan` at every level against its definition written out (all values updated, then the
    /// least value and the second by sorting, the best j by brute force with the tie rules):
    /// runs of 0-40 candidates (tails of every length), positions in a row or with gaps, values
    /// and kernel values from small sets (ties everywhere), +inf candidates, i among the
    /// candidates or not, with and without the look-ahead update and a label filter.
    #[test]
    fn j_scan_is_its_definition_at_every_level() {
        let mut rng = Rng::new(41);
        let pick = |rng: &mut Rng, set: &[f64]| set[rng.below(set.len())];
        for trial in 0..3000 {
            let n = rng.below(41);
            let j0 = [0, 5, 4096][trial % 3];
            let span = n + [0, 3, 40][(trial / 3) % 3];
            let mut positions: Vec<usize> = (0..span).collect();
            rng.shuffle(&mut positions);
            let mut t: Vec<u32> = positions[..n].iter().map(|&o| (j0 + o) as u32).collect();
            t.sort_unstable();
            let len = j0 + span.max(1);
            // Every fifth run with the RBF kernel's equal diagonal (the vector scans skip it).
            let diag: Vec<f64> = (0..len)
                .map(|_| match trial % 5 {
                    0 => 1.0,
                    _ => pick(&mut rng, &[1.0, 0.5, 2.0]),
                })
                .collect();
            let row = |rng: &mut Rng| -> Vec<f32> {
                (0..span.max(1))
                    .map(|_| [0.25f32, 0.5, 1.0, 0.0, 0.7][rng.below(5)])
                    .collect()
            };
            let (row_i, ri, rj) = (row(&mut rng), row(&mut rng), row(&mut rng));
            let labels: Vec<f64> = (0..len).map(|_| pick(&mut rng, &[1.0, -1.0])).collect();
            let v0: Vec<f64> = (0..n)
                .map(|_| pick(&mut rng, &[-1.0, 0.0, 0.5, 2.0, -0.25, f64::INFINITY]))
                .collect();
            let i = if n > 0 && trial % 2 == 0 {
                t[rng.below(n)] as usize
            } else {
                j0 + span
            }
            .min(len - 1);
            let input = JScanInput {
                t: &t,
                diag: &diag,
                equal_diag: diag.iter().all(|&d| d == diag[0]),
                j0,
                i,
                vi: pick(&mut rng, &[1.0, 0.5, 3.0]),
                row_i: &row_i,
                update: (trial % 4 < 2).then_some((&ri[..], &rj[..], 0.375)),
                label: (trial % 8 >= 6).then_some((&labels[..], 1.0)),
                tau: 1e-12,
            };
            // The definition.
            let mut v_want = v0.clone();
            if let Some((a, b, step)) = input.update {
                for (k, v) in v_want.iter_mut().enumerate() {
                    let o = t[k] as usize - j0;
                    *v -= (f64::from(a[o]) - f64::from(b[o])) * step;
                }
            }
            let counted: Vec<usize> = (0..n)
                .filter(|&k| input.label.is_none_or(|(y, yi)| y[t[k] as usize] == yi))
                .filter(|&k| v_want[k] < f64::INFINITY)
                .collect();
            let mut sorted: Vec<(f64, usize)> = counted.iter().map(|&k| (v_want[k], k)).collect();
            sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let first = sorted
                .first()
                .copied()
                .unwrap_or((f64::INFINITY, usize::MAX));
            let second = sorted.get(1).map_or(f64::INFINITY, |e| e.0);
            let mut best = (f64::INFINITY, usize::MAX, 0.0, 0.0);
            for &k in &counted {
                let tk = t[k] as usize;
                let b = input.vi - v_want[k];
                if b <= 0.0 || tk == i {
                    continue;
                }
                let a = diag[i] + diag[tk] - 2.0 * f64::from(row_i[tk - j0]);
                let a = if a > 0.0 { a } else { 1e-12 };
                let obj = -(b * b) / a;
                if obj <= best.0 {
                    best = (obj, k, b, a);
                }
            }
            let want = JScan {
                first,
                second,
                best,
            };
            for level in levels_here() {
                let mut v = v0.clone();
                let got = j_scan(level, &mut v, &input);
                assert_eq!(got, want, "trial {trial}, {level:?}");
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&v), bits(&v_want), "trial {trial}, {level:?}: values");
            }
        }
    }

    /// Max relative error of exp over [-708, 0] on `level` (through `rbf_from_dots_at`).
    fn worst_exp_error(level: Level) -> f64 {
        let mut rng = Rng::new(2);
        let mut args = Vec::new();
        for k in 0..200_000 {
            args.push(if k < 1000 {
                (k as f64) * 0.708
            } else {
                708.0 * rng.next_f64().powi(3)
            });
        }
        // With gamma 1, a point of norm 0 and dots 0, the kernel value is exp(-norm).
        let mut got = vec![0.0; args.len()];
        rbf_from_dots_at(level, 1.0, 0.0, &args, &mut got);
        args.iter()
            .zip(&got)
            .map(|(a, g)| {
                let exact = (-a).exp();
                (g - exact).abs() / exact
            })
            .fold(0.0, f64::max)
    }

    /// The vectorised sigmoid against std's tanh: absolute error a few ulp of 1 on every level
    /// over random and edge arguments (tiny, huge, signed zeros, infinities, NaN), and the
    /// vector levels equal to the scalar fused sequence bit for bit.
    #[test]
    fn sigmoid_matches_std_tanh() {
        let mut rng = Rng::new(11);
        let mut dots: Vec<f64> = (0..20_000)
            .map(|k| {
                let u = rng.next_f64() * 2.0 - 1.0;
                match k % 4 {
                    0 => u * 1e-9,
                    1 => u,
                    2 => u * 30.0,
                    _ => u * 1e6,
                }
            })
            .collect();
        dots.extend([
            0.0,
            -0.0,
            1e-300,
            -1e-300,
            354.0,
            -400.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]);
        for (gamma, coef0) in [(1.0, 0.0), (0.0078125, -1.5), (3.0, 2.0)] {
            let mut fused = dots.clone();
            sigmoid_from_dots_body::<true>(gamma, coef0, &mut fused);
            for level in levels_here() {
                let mut got = dots.clone();
                sigmoid_from_dots_at(level, gamma, coef0, &mut got);
                for (k, (&d, &g)) in dots.iter().zip(&got).enumerate() {
                    let exact = gamma.mul_add(d, coef0).tanh();
                    assert!(
                        (g - exact).abs() <= 4.0 * f64::EPSILON,
                        "{level:?}: tanh({gamma} * {d} + {coef0}) = {exact}, got {g}"
                    );
                    assert!(g.abs() <= 1.0);
                    if level != Level::Portable {
                        assert_eq!(g.to_bits(), fused[k].to_bits(), "{level:?} at {d}");
                    }
                }
            }
        }
        for level in levels_here() {
            let mut v = [f64::NAN, 0.5];
            sigmoid_from_dots_at(level, 1.0, 0.0, &mut v);
            assert!(v[0].is_nan() && (v[1] - 0.5f64.tanh()).abs() < 1e-16);
        }
    }

    /// The multiplied-out degrees against powi.
    #[test]
    fn poly_matches_powi() {
        let mut rng = Rng::new(12);
        let dots: Vec<f64> = (0..1000).map(|_| rng.next_f64() * 20.0 - 10.0).collect();
        for degree in 0..8u32 {
            let mut got = dots.clone();
            poly_from_dots(0.3, 1.0, degree, &mut got);
            for (&d, &g) in dots.iter().zip(&got) {
                let exact = (0.3 * d + 1.0).powi(degree as i32);
                assert!(
                    (g - exact).abs() <= 4.0 * f64::EPSILON * exact.abs(),
                    "{degree}: {d}"
                );
            }
        }
    }

    #[test]
    fn fast_exp_matches_std_exp() {
        for level in levels_here() {
            let worst = worst_exp_error(level);
            eprintln!("exp on {level:?}: worst relative error {worst:.3e}");
            // The stated bound of the exponential (see its constants): 4.5e-16.
            assert!(worst < 4.5e-16, "{level:?}: worst relative error {worst}");
        }
        for x in [0.0f64, -1e-300, -1.0, -707.9] {
            let e = x.exp();
            assert!((exp_nonpositive::<false>(x) - e).abs() <= 4.5e-16 * e);
        }
        assert_eq!(exp_nonpositive::<false>(0.0), 1.0);
        assert_eq!(exp_nonpositive::<true>(0.0), 1.0);
        assert_eq!(exp_nonpositive::<false>(-1e6), 0.0);
        assert_eq!(exp_nonpositive::<true>(f64::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive::<true>(f64::NAN).is_nan());
    }

    /// Random feature-major SV stores and rows: every vector level gives the kernel values of
    /// the scalar fused code bit for bit and the same decision sum up to its summation order;
    /// the portable level agrees to a few ulp.
    #[test]
    fn fused_rows_match_scalar_code_on_every_level() {
        let mut rng = Rng::new(7);
        for case in 0..400 {
            let len = (rng.next_f64() * 150.0) as usize;
            let stride = len + (rng.next_f64() * 9.0) as usize;
            let dim = 1 + (rng.next_f64() * 40.0) as usize;
            let svt: Vec<f64> = (0..dim * stride)
                .map(|_| rng.next_f64() * 2.0 - 1.0)
                .collect();
            let norms: Vec<f64> = (0..stride)
                .map(|j| (0..dim).map(|c| svt[c * stride + j].powi(2)).sum())
                .collect();
            let mut cols: Vec<usize> = (0..dim).filter(|_| rng.next_f64() < 0.6).collect();
            if case % 7 == 0 {
                cols.clear(); // the zero row
            }
            let vals: Vec<f64> = cols.iter().map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let x_norm: f64 = vals.iter().map(|v| v * v).sum();
            let gamma = [0.0, 0.01, 1.0, 30.0, 1e6][case % 5];
            let coef: Vec<f64> = (0..stride).map(|_| rng.next_f64() - 0.5).collect();
            let svs = FeatureMajor {
                svt: &svt,
                stride,
                len,
                sq_norms: &norms,
            };
            let row = RowNonzeros {
                cols: &cols,
                vals: &vals,
                sq_norm: x_norm,
            };
            let reference: Vec<f64> = (0..len)
                .map(|j| {
                    let dot = cols
                        .iter()
                        .zip(&vals)
                        .fold(0.0, |acc, (&c, &v)| v.mul_add(svt[c * stride + j], acc));
                    rbf_from_dot::<true>(gamma, x_norm, norms[j], dot)
                })
                .collect();
            let f_ref: f64 = reference.iter().zip(&coef).map(|(k, c)| k * c).sum();
            let f_abs: f64 = reference
                .iter()
                .zip(&coef)
                .map(|(k, c)| (k * c).abs())
                .sum();
            for level in levels_here() {
                let mut kv = vec![f64::NAN; stride + 1];
                let f = rbf_row(level, svs, row, gamma, Some(&coef), &mut kv);
                let replay = decision_sum_as_rbf_row(level, &coef, &kv[..len], cols.len());
                assert_eq!(
                    replay.to_bits(),
                    f.to_bits(),
                    "{level:?} case {case}: decision order"
                );
                assert!(
                    kv[len..].iter().all(|v| v.is_nan()),
                    "{level:?} wrote past len"
                );
                for (j, (&g, &r)) in kv.iter().zip(&reference).enumerate() {
                    if level == Level::Portable {
                        // Unfused dots differ by rounding, which gamma magnifies in the exponent.
                        let tol = 1e-13 * (1.0 + gamma * (x_norm + norms[j])) * r.abs();
                        assert!((g - r).abs() <= tol + 1e-300, "{level:?} {j}");
                    } else {
                        assert_eq!(g.to_bits(), r.to_bits(), "{level:?} case {case} sv {j}");
                    }
                }
                assert!(
                    (f - f_ref).abs() <= 1e-13 * f_abs + 1e-300,
                    "{level:?} {f} {f_ref}"
                );
                let mut kv2 = vec![0.0; stride];
                let none = rbf_row(level, svs, row, gamma, None, &mut kv2);
                assert_eq!(none, 0.0);
                assert_eq!(kv2[..len], kv[..len]);
            }
        }
    }

    #[test]
    fn argmin_and_candidate_scan_agree_on_every_level() {
        let mut rng = Rng::new(9);
        for case in 0..500 {
            let n = (rng.next_f64() * 70.0) as usize;
            // Few distinct values, so ties are common; both signs.
            let coef: Vec<f64> = (0..n)
                .map(|_| {
                    let v = 1.0 + (rng.next_f64() * 4.0).floor();
                    if rng.next_f64() < 0.5 {
                        -v
                    } else {
                        v
                    }
                })
                .collect();
            let kappa: Vec<f64> = (0..n).map(|_| rng.next_f64()).collect();
            let expected = argmin_sq_portable(&coef);
            let sign = if case % 2 == 0 { 1.0 } else { -1.0 };
            let mut visits = Vec::new();
            for level in levels_here() {
                assert_eq!(argmin_sq(level, &coef), expected, "{level:?} case {case}");
                // The cut rises with every visit, as a partner search's does.
                let mut seen = Vec::new();
                scan_candidates(level, &coef, &kappa, sign, 399.0, 50.0, |j| {
                    seen.push(j);
                    (kappa[j] * 399.0).max(50.0)
                });
                visits.push(seen);
            }
            assert!(
                visits.windows(2).all(|w| w[0] == w[1]),
                "case {case}: {visits:?}"
            );
            if let Some(seen) = visits.first() {
                for &j in seen {
                    assert!(sign * coef[j] > 0.0);
                }
            }
        }
        assert_eq!(argmin_sq(level(), &[]), None);
    }

    /// Every level's tile is the sums in k order of the fused products, for 1 to 6 rows.
    #[test]
    fn product_tiles_are_the_fused_sums_on_every_level() {
        let mut rng = Rng::new(21);
        for kc in [0, 1, 5, 64, 257] {
            for rows in 1..=PRODUCT_TILE_ROWS {
                let a_stride = kc + 3;
                let a: Vec<f64> = (0..rows * a_stride).map(|_| rng.next_f64() - 0.5).collect();
                let check = |nr: usize, tile: &dyn Fn(&[f64], &mut [f64])| {
                    let panel: Vec<f64> = (0..kc * nr).map(|i| (i as f64 * 0.37).sin()).collect();
                    let mut out = vec![f64::NAN; rows * nr];
                    tile(&panel, &mut out);
                    for r in 0..rows {
                        for j in 0..nr {
                            let want = (0..kc).fold(0.0, |s: f64, k| {
                                a[r * a_stride + k].mul_add(panel[k * nr + j], s)
                            });
                            assert_eq!(out[r * nr + j], want, "kc {kc} rows {rows} nr {nr}");
                        }
                    }
                };
                check(product_tile_columns(), &|panel, out| {
                    product_tile(&a, a_stride, rows, panel, kc, out)
                });
                #[cfg(target_arch = "x86_64")]
                for level in vector_levels() {
                    let nr = match level {
                        x86::Vector::Avx2(_) => 8,
                        x86::Vector::Avx512(_) => 16,
                    };
                    check(nr, &|panel, out| {
                        // SAFETY: the level runs here; the bounds hold for its width.
                        unsafe {
                            x86::product_tile(
                                level,
                                ProductTile(&a, a_stride, rows, panel, kc),
                                out,
                            )
                        }
                    });
                }
            }
        }
    }

    /// The f32 tile likewise: fused f32 sums in k order on every level.
    #[test]
    fn f32_product_tiles_are_the_fused_sums_on_every_level() {
        let mut rng = Rng::new(22);
        for kc in [0, 1, 5, 64, 257] {
            for rows in 1..=PRODUCT_TILE_ROWS {
                let a_stride = kc + 3;
                let a: Vec<f32> = (0..rows * a_stride)
                    .map(|_| rng.next_f64() as f32 - 0.5)
                    .collect();
                let check = |nr: usize, tile: &dyn Fn(&[f32], &mut [f32])| {
                    let panel: Vec<f32> = (0..kc * nr).map(|i| (i as f32 * 0.37).sin()).collect();
                    let mut out = vec![f32::NAN; rows * nr];
                    tile(&panel, &mut out);
                    for r in 0..rows {
                        for j in 0..nr {
                            let want = (0..kc).fold(0.0, |s: f32, k| {
                                a[r * a_stride + k].mul_add(panel[k * nr + j], s)
                            });
                            assert_eq!(out[r * nr + j], want, "kc {kc} rows {rows} nr {nr}");
                        }
                    }
                };
                check(product_tile_f32_columns(), &|panel, out| {
                    product_tile_f32(&a, a_stride, rows, panel, kc, out)
                });
                #[cfg(target_arch = "x86_64")]
                for level in vector_levels() {
                    let nr = match level {
                        x86::Vector::Avx2(_) => 16,
                        x86::Vector::Avx512(_) => 32,
                    };
                    check(nr, &|panel, out| {
                        // SAFETY: the level runs here; the bounds hold for its width.
                        unsafe {
                            x86::product_tile_f32(
                                level,
                                ProductTileF32(&a, a_stride, rows, panel, kc),
                                out,
                            )
                        }
                    });
                }
            }
        }
    }

    #[test]
    fn dot_narrow_is_the_widened_dot() {
        let mut rng = Rng::new(12);
        for n in [0, 1, 3, 4, 7, 15, 16, 17, 33, 64, 100, 257] {
            let x: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 - 0.5).collect();
            let h: Vec<F16> = x.iter().map(|&v| F16::from_f32(v)).collect();
            let y: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
            let exact = |wide: Vec<f64>| -> f64 { wide.iter().zip(&y).map(|(a, b)| a * b).sum() };
            let wide_x = exact(x.iter().map(|&v| f64::from(v)).collect());
            let wide_h = exact(h.iter().map(|&v| v.to_f64()).collect());
            assert!((dot_narrow(&x, &y) - wide_x).abs() < 1e-13, "n {n}");
            assert!((dot_narrow(&h, &y) - wide_h).abs() < 1e-13, "n {n}");
        }
    }

    /// The f32 products of halves: the dot to f32's rounding of the exact sum, the axpy the
    /// fused f32 update on every value (vector lanes and tail alike).
    #[test]
    fn half_products_in_f32() {
        let mut rng = Rng::new(23);
        for n in [0, 1, 7, 8, 15, 16, 17, 40, 3000] {
            let x: Vec<F16> = (0..n)
                .map(|_| F16::from_f32(rng.next_f64() as f32))
                .collect();
            let y: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 - 0.5).collect();
            let exact: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, &b)| a.to_f64() * f64::from(b))
                .sum();
            let scale: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, &b)| (a.to_f64() * f64::from(b)).abs())
                .sum();
            let got = f64::from(dot_half(&x, &y));
            assert!(
                (got - exact).abs() <= 1e-6 * scale + 1e-30,
                "n {n}: {got} vs {exact}"
            );
            let mut out = y.clone();
            axpy_half(0.7, &x, &mut out);
            for i in 0..n {
                assert_eq!(
                    out[i],
                    0.7f32.mul_add(x[i].to_f64() as f32, y[i]),
                    "n {n} at {i}"
                );
            }
        }
    }

    /// Every finite half, in ascending order of value, with its bits; each value from the
    /// format's definition, checked against `F16::to_f64`.
    fn finite_halves() -> Vec<(f64, u16)> {
        let defined = |b: u16| {
            let sign = if b & 0x8000 != 0 { -1.0 } else { 1.0 };
            let (e, f) = (i32::from((b >> 10) & 0x1f), f64::from(b & 0x3ff));
            sign * match e {
                0 => f * 2f64.powi(-24),
                31 if f == 0.0 => f64::INFINITY,
                31 => f64::NAN,
                e => (1024.0 + f) * 2f64.powi(e - 25),
            }
        };
        for b in 0..=u16::MAX {
            let (got, want) = (F16(b).to_f64(), defined(b));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{b:#x}"
            );
        }
        let mut all: Vec<(f64, u16)> = (0..=u16::MAX)
            .map(|b| (defined(b), b))
            .filter(|(v, _)| v.is_finite())
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all
    }

    /// The half nearest to x by search over all halves (ties to the even bits), infinity
    /// from 65520 on: IEEE 754's rounding written out, to check `F16::from_f32` against.
    fn nearest_half(halves: &[(f64, u16)], x: f32) -> u16 {
        let x = f64::from(x);
        if x.abs() >= 65520.0 {
            return if x > 0.0 { 0x7c00 } else { 0xfc00 };
        }
        let at = halves.partition_point(|&(v, _)| v < x);
        let mut best = halves[at.min(halves.len() - 1)];
        for &(v, b) in &halves[at.saturating_sub(1)..(at + 1).min(halves.len())] {
            let (d, db) = ((v - x).abs(), (best.0 - x).abs());
            if d < db || (d == db && b & 1 == 0 && best.1 & 1 == 1) {
                best = (v, b);
            }
        }
        if best.0 == 0.0 {
            // Zero keeps the sign of what rounded to it.
            return if x.is_sign_negative() { 0x8000 } else { 0 };
        }
        best.1
    }

    #[test]
    fn halves_round_to_nearest_even_and_widen_exactly() {
        let halves = finite_halves();
        let mut rng = Rng::new(16);
        let mut probes: Vec<f32> = Vec::new();
        for &(v, _) in &halves {
            // Each half, and around it and the midpoints next to it.
            let v = v as f32;
            probes.extend([
                v,
                f32::from_bits(v.to_bits() + 1),
                f32::from_bits(v.to_bits().max(1) - 1),
            ]);
        }
        for w in halves.windows(2) {
            let mid = ((w[0].0 + w[1].0) / 2.0) as f32;
            probes.extend([
                mid,
                f32::from_bits(mid.to_bits() + 1),
                f32::from_bits(mid.to_bits().max(1) - 1),
            ]);
        }
        for _ in 0..200_000 {
            probes.push(f32::from_bits(rng.next_u64() as u32));
        }
        probes.extend([
            65519.0,
            65520.0,
            1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
        ]);
        probes.retain(|v| !v.is_nan());
        for &x in &probes {
            let bits = F16::from_f32(x).0;
            assert_eq!(bits, nearest_half(&halves, x), "{x:e} ({:#x})", x.to_bits());
        }
        // NaN stays NaN.
        assert!(F16::from_f32(f32::NAN).to_f64().is_nan());
        // The conversion every level runs is the same, bit for bit.
        let mut converted = Vec::new();
        extend_f16(&probes, &mut converted);
        let expected: Vec<F16> = probes.iter().map(|&x| F16::from_f32(x)).collect();
        assert_eq!(converted, expected);
        // Widening: every finite half through the vector loads is its value.
        let all: Vec<F16> = halves.iter().map(|&(_, b)| F16(b)).collect();
        let mut wide = vec![0.0; all.len()];
        axpy_narrow(1.0, &all, &mut wide);
        for (&(v, b), w) in halves.iter().zip(&wide) {
            assert_eq!(*w, v, "{b:#x}");
        }
        assert_eq!(F16(0x7c00).to_f64(), f64::INFINITY);
        assert_eq!(F16(0x3c00).to_f64(), 1.0);
        assert_eq!(F16(0x0001).to_f64(), 2f64.powi(-24));
    }

    #[test]
    fn weighted_row_sums_agree_on_every_level() {
        let mut rng = Rng::new(10);
        for case in 0..300 {
            let n_out = 1 + (rng.next_f64() * 40.0) as usize;
            let n = (rng.next_f64() * 60.0) as usize;
            let coef: Vec<f64> = (0..n * n_out).map(|_| rng.next_f64() - 0.5).collect();
            let w: Vec<f64> = (0..n).map(|_| rng.next_f64()).collect();
            let exact: Vec<f64> = (0..n_out)
                .map(|k| (0..n).map(|j| w[j] * coef[j * n_out + k]).sum())
                .collect();
            let mut vector_bits: Option<Vec<u64>> = None;
            for level in levels_here() {
                let mut out = vec![f64::NAN; n_out + 2];
                out[..n_out].fill(7.0); // overwritten, not added to
                weighted_row_sum(level, &coef, n_out, &w, &mut out);
                // AVX2 and AVX-512 take the same sums in the same order.
                // (Compared as bits: the entries past n_out stay NaN, which no == matches.)
                if level >= Level::Avx2 && n_out <= 32 {
                    let bits: Vec<u64> = out.iter().map(|v| v.to_bits()).collect();
                    match &vector_bits {
                        Some(first) => assert_eq!(first, &bits, "case {case}: AVX2 vs AVX-512"),
                        None => vector_bits = Some(bits),
                    }
                }
                for k in 0..n_out {
                    assert!(
                        (out[k] - exact[k]).abs() < 1e-12,
                        "{level:?} case {case} k {k}"
                    );
                }
                assert!(
                    out[n_out..].iter().all(|v| v.is_nan()),
                    "{level:?} wrote past n_out"
                );
            }
        }
    }

    #[test]
    fn nan_distances_stay_nan_on_every_level() {
        let svt = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let norms = [1.0, f64::NAN, 9.0, 16.0, f64::NAN, 36.0, 49.0, 64.0, 81.0];
        let svs = FeatureMajor {
            svt: &svt,
            stride: 9,
            len: 9,
            sq_norms: &norms,
        };
        for level in levels_here() {
            let mut kv = [0.0; 9];
            let row = RowNonzeros {
                cols: &[0],
                vals: &[1.0],
                sq_norm: 1.0,
            };
            rbf_row(level, svs, row, 0.5, None, &mut kv);
            let nan: Vec<bool> = kv.iter().map(|k| k.is_nan()).collect();
            assert_eq!(nan, norms.map(|n| n.is_nan()), "{level:?}");
            let mut dots = [0.5; 9];
            rbf_from_dots_at(level, 0.5, 1.0, &norms, &mut dots);
            assert!(
                dots[1].is_nan() && dots[4].is_nan() && !dots[0].is_nan(),
                "{level:?}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "outside the support vectors")]
    fn fused_row_checks_its_columns() {
        let (svt, norms) = ([0.0; 8], [0.0; 4]);
        let svs = FeatureMajor {
            svt: &svt,
            stride: 4,
            len: 4,
            sq_norms: &norms,
        };
        let row = RowNonzeros {
            cols: &[2],
            vals: &[1.0],
            sq_norm: 0.0,
        };
        rbf_row(level(), svs, row, 1.0, None, &mut [0.0; 4]);
    }

    #[test]
    fn batch_rbf_matches_definition() {
        let norms: [f64; 4] = [1.0, 4.0, 0.0, 2.5];
        let mut dots: [f64; 4] = [0.5, -1.0, 0.0, 1.58];
        let expected: Vec<f64> = dots
            .iter()
            .zip(&norms)
            .map(|(d, n)| (-0.3 * (2.0 + n - 2.0 * d).max(0.0)).exp())
            .collect();
        rbf_from_dots(0.3, 2.0, &norms, &mut dots);
        for (g, e) in dots.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-15);
        }
    }

    /// The f32 Gaussian values: on every level within an f32 ulp of the f64 values rounded
    /// (whose exponential is exact to an f64 ulp), the vector levels the scalar fused code's
    /// bits; NaN distances stay NaN, far points give 0.
    #[test]
    fn f32_rbf_values_round_the_f64_ones() {
        let mut rng = Rng::new(33);
        for n in [0, 1, 3, 4, 5, 8, 9, 17, 100, 259] {
            let norms: Vec<f64> = (0..n).map(|_| rng.next_f64() * 8.0).collect();
            let mut dots: Vec<f64> = (0..n).map(|_| (rng.next_f64() - 0.5) * 6.0).collect();
            if n > 4 {
                dots[1] = f64::NAN;
                dots[2] = -1e6;
            }
            let (gamma, x_norm) = (0.7, 3.0);
            let mut wide = dots.clone();
            rbf_from_dots(gamma, x_norm, &norms, &mut wide);
            for level in levels_here() {
                let mut out = vec![7.0f32; n];
                rbf_from_dots_f32_at(level, gamma, x_norm, &norms, &dots, &mut out);
                for j in 0..n {
                    let w = wide[j] as f32;
                    if w.is_nan() {
                        assert!(out[j].is_nan(), "{level:?} n {n} j {j}");
                        continue;
                    }
                    let ulp = (out[j].to_bits() as i64 - w.to_bits() as i64).abs();
                    assert!(ulp <= 1, "{level:?} n {n} j {j}: {} vs {w}", out[j]);
                    if level != Level::Portable {
                        let fused = rbf_from_dot_single::<true>(gamma, x_norm, norms[j], dots[j]);
                        assert_eq!(out[j].to_bits(), fused.to_bits(), "{level:?} n {n} j {j}");
                    }
                }
                if n > 4 {
                    assert_eq!(out[2], 0.0);
                }
            }
        }
    }

    #[test]
    fn axpy_is_the_same_on_every_vector_level() {
        #[cfg(target_arch = "x86_64")]
        {
            let mut rng = Rng::new(3);
            for n in 0..70 {
                let x: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
                let y: Vec<f64> = (0..n + 3).map(|_| rng.next_f64() - 0.5).collect();
                let fma: Vec<f64> = (0..n).map(|i| 0.3f64.mul_add(x[i], y[i])).collect();
                for level in vector_levels() {
                    let mut out = y.clone();
                    // SAFETY: the level runs here.
                    unsafe { x86::axpy(level, 0.3, &x, &mut out) };
                    assert_eq!(out[..n], fma[..], "{level:?} n {n}");
                    assert_eq!(out[n..], y[n..], "{level:?} wrote past n");
                }
            }
        }
    }

    #[test]
    fn axpy_f32_matches_axpy_on_the_widened_values() {
        let mut rng = Rng::new(4);
        for n in 0..70 {
            let x: Vec<f32> = (0..n).map(|_| (rng.next_f64() - 0.5) as f32).collect();
            let wide: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let y: Vec<f64> = (0..n + 3).map(|_| rng.next_f64() - 0.5).collect();
            // The dispatched pair agree on this machine's level...
            let (mut a, mut b) = (y.clone(), y.clone());
            axpy_narrow(0.3, &x, &mut a);
            axpy(0.3, &wide, &mut b);
            assert_eq!(a, b, "n {n}");
            // ...and every vector level is the fused multiply-add on the widened values.
            #[cfg(target_arch = "x86_64")]
            for level in vector_levels() {
                let mut out = y.clone();
                // SAFETY: the level runs here.
                unsafe { x86::axpy_narrow(level, 0.3, &x, &mut out) };
                for i in 0..n {
                    assert_eq!(out[i], 0.3f64.mul_add(wide[i], y[i]), "{level:?} n {n}");
                }
                assert_eq!(out[n..], y[n..], "{level:?} wrote past n");
            }
        }
    }

    #[test]
    fn dot_and_axpy_match_naive_for_all_lengths() {
        let mut rng = Rng::new(1);
        for n in 0..70 {
            let a: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
            let b: Vec<f64> = (0..n).map(|_| rng.next_f64() - 0.5).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-12);
            assert!((dot_portable(&a, &b) - naive).abs() < 1e-12);
            let mut y = b.clone();
            axpy(0.7, &a, &mut y);
            let mut y2 = b.clone();
            axpy_portable(0.7, &a, &mut y2);
            for i in 0..n {
                assert!((y[i] - (b[i] + 0.7 * a[i])).abs() < 1e-14);
                assert!((y2[i] - y[i]).abs() < 1e-14);
            }
        }
    }

    #[test]
    fn dots_8_rows_match_axpy_row_by_row_on_every_level() {
        let mut rng = Rng::new(12);
        for (width, m, zeros) in [
            (22, 37, 0.4),
            (5, 16, 0.0),
            (123, 9, 0.9),
            (3, 1, 0.5),
            (7, 0, 0.2),
        ] {
            let stride = m + 5;
            let xt: Vec<f64> = (0..width * stride)
                .map(|_| rng.next_f64() * 2.0 - 1.0)
                .collect();
            let xt32: Vec<f32> = xt.iter().map(|&v| v as f32).collect();
            let q: Vec<f64> = (0..BLOCK_ROWS * width)
                .map(|_| {
                    if rng.next_f64() < zeros {
                        0.0
                    } else {
                        rng.next_f64() - 0.5
                    }
                })
                .collect();
            let cols: Vec<usize> = (0..width)
                .filter(|&c| (0..BLOCK_ROWS).any(|p| q[p * width + c] != 0.0))
                .collect();
            // The reference: axpy per row over its non-zeros, as the cache's per-row path.
            let by_rows = |fused: bool, wide: &dyn Fn(usize) -> f64| -> Vec<f64> {
                let mut out = vec![0.0; BLOCK_ROWS * m];
                for p in 0..BLOCK_ROWS {
                    for c in 0..width {
                        let qc = q[p * width + c];
                        if qc == 0.0 {
                            continue;
                        }
                        for k in 0..m {
                            let o = &mut out[p * m + k];
                            let v = wide(c * stride + k);
                            *o = if fused {
                                qc.mul_add(v, *o)
                            } else {
                                *o + qc * v
                            };
                        }
                    }
                }
                out
            };
            let (fused64, fused32) = (
                by_rows(true, &|i| xt[i]),
                by_rows(true, &|i| f64::from(xt32[i])),
            );
            let plain64 = by_rows(false, &|i| xt[i]);
            let mut out = vec![f64::NAN; BLOCK_ROWS * m];
            dots_8_rows(&q, width, &cols, &xt, stride, m, &mut out);
            let expect = if level() == Level::Portable {
                &plain64
            } else {
                &fused64
            };
            assert_eq!(&out, expect, "dispatched, width {width} m {m}");
            #[cfg(target_arch = "x86_64")]
            for level in vector_levels() {
                for (data, expect) in [(0, &fused64), (1, &fused32)] {
                    let mut out = vec![f64::NAN; BLOCK_ROWS * m];
                    let b64 = EightRows(&q, width, &cols, &xt, stride, m);
                    let b32 = EightRows(&q, width, &cols, &xt32, stride, m);
                    // SAFETY: the level runs here; the bounds hold by construction.
                    unsafe {
                        if data == 0 {
                            x86::dots_8_rows(level, b64, &mut out)
                        } else {
                            x86::dots_8_rows(level, b32, &mut out)
                        }
                    }
                    assert_eq!(
                        &out,
                        expect,
                        "{level:?} f{} width {width} m {m}",
                        if data == 0 { 64 } else { 32 }
                    );
                }
            }
        }
    }
    #[test]
    fn dots_one_row_matches_axpy_over_its_non_zeros_on_every_level() {
        let mut rng = Rng::new(13);
        // m across the register block (32 lanes on AVX-512, 16 on AVX2) and its masked tail.
        for (width, m, zeros) in [
            (42, 1024, 0.33),
            (42, 77, 0.33),
            (5, 16, 0.0),
            (123, 9, 0.9),
            (3, 1, 0.5),
            (7, 0, 0.2),
            (16, 33, 1.0),
        ] {
            let stride = m + 3;
            let xt: Vec<f64> = (0..width * stride)
                .map(|_| rng.next_f64() * 2.0 - 1.0)
                .collect();
            let xt32: Vec<f32> = xt.iter().map(|&v| v as f32).collect();
            let q: Vec<f64> = (0..width)
                .map(|_| {
                    if rng.next_f64() < zeros {
                        0.0
                    } else {
                        rng.next_f64() - 0.5
                    }
                })
                .collect();
            let cols: Vec<usize> = (0..width).filter(|&c| q[c] != 0.0).collect();
            // The reference: the cache's former path, one axpy per non-zero.
            let by_axpy = |fused: bool, wide: &dyn Fn(usize) -> f64| -> Vec<f64> {
                let mut out = vec![0.0; m];
                for &c in &cols {
                    for (k, o) in out.iter_mut().enumerate() {
                        let v = wide(c * stride + k);
                        *o = if fused {
                            q[c].mul_add(v, *o)
                        } else {
                            *o + q[c] * v
                        };
                    }
                }
                out
            };
            let fused64 = by_axpy(true, &|i| xt[i]);
            let fused32 = by_axpy(true, &|i| f64::from(xt32[i]));
            let plain64 = by_axpy(false, &|i| xt[i]);
            let mut out = vec![f64::NAN; m];
            dots_one_row(&q, &cols, &xt, stride, m, &mut out);
            let expect = if level() == Level::Portable {
                &plain64
            } else {
                &fused64
            };
            assert_eq!(&out, expect, "dispatched, width {width} m {m}");
            let mut axpy = vec![0.0; m];
            for &c in &cols {
                axpy_narrow(q[c], &xt32[c * stride..c * stride + m], &mut axpy);
            }
            let mut out = vec![f64::NAN; m];
            dots_one_row(&q, &cols, &xt32, stride, m, &mut out);
            assert_eq!(out, axpy, "f32 against axpy_narrow, width {width} m {m}");
            #[cfg(target_arch = "x86_64")]
            for level in vector_levels() {
                for (data, expect) in [(0, &fused64), (1, &fused32)] {
                    let mut out = vec![f64::NAN; m];
                    // SAFETY: the level runs here; the bounds hold by construction.
                    unsafe {
                        if data == 0 {
                            x86::dots_one_row(level, OneRow(&q, &cols, &xt, stride, m), &mut out)
                        } else {
                            x86::dots_one_row(level, OneRow(&q, &cols, &xt32, stride, m), &mut out)
                        }
                    }
                    assert_eq!(
                        &out,
                        expect,
                        "{level:?} f{} width {width} m {m}",
                        32 << (1 - data)
                    );
                }
            }
        }
    }
}
