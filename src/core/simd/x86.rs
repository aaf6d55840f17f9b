//! The AVX2+FMA and AVX-512F+FMA paths of the kernel loops.
//!
//! Each loop is written once, generic over [`Simd`] (a vector width and its intrinsics), and
//! `levels!` compiles it once per level inside a `#[target_feature]` entry point, where the
//! `#[inline(always)]` methods of `Simd` inline and their intrinsics with them: the machine code
//! of a hand-written copy per level, from one definition. The same macro writes the one match
//! that picks the level. The loops that only AVX-512 has (its mask registers are what make them
//! pay) follow at the end.

use super::{
    pair_curvature, CandidateFilter, ColumnValue, EightRows, FusedRow, JScan, JScanInput, Level,
    OneRow, ProductTile, ProductTileF32, RowValue, BLOCK_ROWS, EXP_MIN_ARG, F16, INV_FACT, LN2_HI,
    LN2_LO, LOG2E, PRODUCT_TILE_ROWS, SHIFTER, SINGLE_DEGREE,
};
use std::arch::x86_64::*;

/// Declares [`Simd`] with each method's AVX2 and AVX-512 implementation side by side, and
/// implements it for [`Avx2`] and [`Avx512`]: one line (or block) per operation, the two levels'
/// intrinsics next to each other.
macro_rules! simd {
    (
        types { $($(#[doc = $ydoc:literal])* $ty:ident = $ty2:ty, $ty5:ty;)* }
        consts { $($(#[doc = $cdoc:literal])* $c:ident: $ct:ty = $c2:expr, $c5:expr;)* }
        safe { $(
            $(#[doc = $fdoc:literal])*
            fn $f:ident($($fa:ident: $ft:ty),*) -> $fr:ty = $f2:expr, $f5:expr;
        )* }
        unsafe { $(
            $(#[doc = $udoc:literal])*
            fn $u:ident $(<$ug:ident: $ub:path>)? ($($ua:ident: $ut:ty),*) $(-> $ur:ty)?
                = $u2:expr, $u5:expr;
        )* }
    ) => {
        /// One vector instruction set as the kernel loops use it: `F` holds `LANES` doubles. A
        /// value of an implementing type exists only where the CPU runs the set, which is what
        /// makes the arithmetic safe; each method is one intrinsic, or the short sequence the
        /// level has always used.
        pub trait Simd: Copy {
            $($(#[doc = $ydoc])* type $ty: Copy;)*
            $($(#[doc = $cdoc])* const $c: $ct;)*
            $($(#[doc = $fdoc])* fn $f(self, $($fa: $ft),*) -> $fr;)*
            $(
                $(#[doc = $udoc])*
                ///
                /// # Safety
                /// The lanes it reads or writes must be readable or writable.
                unsafe fn $u $(<$ug: $ub>)? (self, $($ua: $ut),*) $(-> $ur)?;
            )*

            /// A whole vector (`t` None) or the lanes of `t`.
            ///
            /// # Safety
            /// As `load` or `load_tail`.
            #[inline(always)]
            unsafe fn load_part(self, p: *const f64, t: Option<Self::Tail>) -> Self::F {
                // SAFETY: the caller's contract.
                unsafe {
                    match t {
                        None => self.load(p),
                        Some(t) => self.load_tail(p, t),
                    }
                }
            }
        }
        simd!(@impl Avx2 { $($ty = $ty2;)* } { $($c: $ct = $c2;)* }
            { $(fn $f($($fa: $ft),*) -> $fr = $f2;)* }
            { $(fn $u $(<$ug: $ub>)? ($($ua: $ut),*) $(-> $ur)? = $u2;)* });
        simd!(@impl Avx512 { $($ty = $ty5;)* } { $($c: $ct = $c5;)* }
            { $(fn $f($($fa: $ft),*) -> $fr = $f5;)* }
            { $(fn $u $(<$ug: $ub>)? ($($ua: $ut),*) $(-> $ur)? = $u5;)* });
    };
    (@impl $level:ident { $($ty:ident = $tyv:ty;)* } { $($c:ident: $ct:ty = $cv:expr;)* }
        { $(fn $f:ident($($fa:ident: $ft:ty),*) -> $fr:ty = $fv:expr;)* }
        { $(fn $u:ident $(<$ug:ident: $ub:path>)? ($($ua:ident: $ut:ty),*) $(-> $ur:ty)?
            = $uv:expr;)* }
    ) => {
        // SAFETY (every block): a value of the type exists only where its instruction sets run;
        // the loads and stores touch what the callers' contracts name. A few implementations
        // call no intrinsic, hence the allowance.
        #[allow(unused_unsafe)]
        impl Simd for $level {
            $(type $ty = $tyv;)*
            $(const $c: $ct = $cv;)*
            $(
                #[inline(always)]
                fn $f(self, $($fa: $ft),*) -> $fr {
                    unsafe { $fv }
                }
            )*
            $(
                #[inline(always)]
                unsafe fn $u $(<$ug: $ub>)? (self, $($ua: $ut),*) $(-> $ur)? {
                    unsafe { $uv }
                }
            )*
        }
    };
}

simd! {
    types {
        /// A vector of doubles.
        F = __m256d, __m512d;
        /// A vector of floats (twice `LANES`).
        Fs = __m256, __m512;
        /// The lanes where a comparison holds.
        Cmp = __m256d, __mmask8;
        /// The lanes of a partial last vector.
        Tail = __m256i, __mmask8;
    }
    consts {
        LANES: usize = 4, 8;
        /// Whether the elementwise loops (`axpy`, kernel values from dots) end with one masked
        /// vector; AVX2 ends them in scalar fused code instead, which gives the same values.
        MASKED_TAILS: bool = false, true;
        /// Vectors of sums `dots_8_rows` holds for each of its 8 rows: two fit AVX-512's 32
        /// registers, one AVX2's 16.
        DOT_VECTORS: usize = 1, 2;
    }
    safe {
        fn splat(x: f64) -> Self::F = _mm256_set1_pd(x), _mm512_set1_pd(x);
        fn zero() -> Self::F = _mm256_setzero_pd(), _mm512_setzero_pd();
        fn zero_ps() -> Self::Fs = _mm256_setzero_ps(), _mm512_setzero_ps();
        fn splat_ps(x: f32) -> Self::Fs = _mm256_set1_ps(x), _mm512_set1_ps(x);
        /// a * b + c in f32, rounded once.
        fn fmadd_ps(a: Self::Fs, b: Self::Fs, c: Self::Fs) -> Self::Fs
            = _mm256_fmadd_ps(a, b, c), _mm512_fmadd_ps(a, b, c);
        /// a * b + c, rounded once.
        fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F
            = _mm256_fmadd_pd(a, b, c), _mm512_fmadd_pd(a, b, c);
        /// c - a * b, rounded once.
        fn fnmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F
            = _mm256_fnmadd_pd(a, b, c), _mm512_fnmadd_pd(a, b, c);
        fn add(a: Self::F, b: Self::F) -> Self::F = _mm256_add_pd(a, b), _mm512_add_pd(a, b);
        fn sub(a: Self::F, b: Self::F) -> Self::F = _mm256_sub_pd(a, b), _mm512_sub_pd(a, b);
        fn mul(a: Self::F, b: Self::F) -> Self::F = _mm256_mul_pd(a, b), _mm512_mul_pd(a, b);
        fn div(a: Self::F, b: Self::F) -> Self::F = _mm256_div_pd(a, b), _mm512_div_pd(a, b);
        /// The larger of a and b; b where either is NaN.
        fn max(a: Self::F, b: Self::F) -> Self::F = _mm256_max_pd(a, b), _mm512_max_pd(a, b);
        /// a < b, false where either is NaN.
        fn lt(a: Self::F, b: Self::F) -> Self::Cmp
            = _mm256_cmp_pd::<_CMP_LT_OQ>(a, b), _mm512_cmp_pd_mask::<_CMP_LT_OQ>(a, b);
        /// `yes` in the lanes of `m`, `no` elsewhere.
        fn select(m: Self::Cmp, yes: Self::F, no: Self::F) -> Self::F
            = _mm256_blendv_pd(no, yes, m), _mm512_mask_blend_pd(m, no, yes);
        /// 2^n, where `shifted` = n + `shifter` with n an integer in its low mantissa bits.
        fn pow2(shifted: Self::F, shifter: Self::F) -> Self::F = {
            let n = _mm256_sub_epi64(_mm256_castpd_si256(shifted), _mm256_castpd_si256(shifter));
            let e = _mm256_slli_epi64::<52>(_mm256_add_epi64(n, _mm256_set1_epi64x(1023)));
            _mm256_castsi256_pd(e)
        }, {
            let n = _mm512_sub_epi64(_mm512_castpd_si512(shifted), _mm512_castpd_si512(shifter));
            let e = _mm512_slli_epi64::<52>(_mm512_add_epi64(n, _mm512_set1_epi64(1023)));
            _mm512_castsi512_pd(e)
        };
        // AVX-512F has the bitwise operations on integer vectors only (on doubles they are DQ's).
        fn abs(x: Self::F) -> Self::F = _mm256_andnot_pd(_mm256_set1_pd(-0.0), x), {
            let s = _mm512_castpd_si512(_mm512_set1_pd(-0.0));
            _mm512_castsi512_pd(_mm512_andnot_si512(s, _mm512_castpd_si512(x)))
        };
        /// The magnitude of `mag` with the sign of `sign`.
        fn copysign(mag: Self::F, sign: Self::F) -> Self::F = {
            let s = _mm256_set1_pd(-0.0);
            _mm256_or_pd(_mm256_andnot_pd(s, mag), _mm256_and_pd(s, sign))
        }, {
            let s = _mm512_castpd_si512(_mm512_set1_pd(-0.0));
            let m = _mm512_andnot_si512(s, _mm512_castpd_si512(mag));
            _mm512_castsi512_pd(_mm512_or_si512(m, _mm512_and_si512(s, _mm512_castpd_si512(sign))))
        };
        /// The sum of the lanes, added in this level's fixed order.
        fn sum(v: Self::F) -> f64 = {
            let mut l = [0.0; 4];
            _mm256_storeu_pd(l.as_mut_ptr(), v);
            (l[0] + l[1]) + (l[2] + l[3])
        }, _mm512_reduce_add_pd(v);
        /// The first min(lanes, LANES) lanes.
        fn tail(lanes: usize) -> Self::Tail = {
            let rem = lanes.min(4) as i64;
            _mm256_cmpgt_epi64(_mm256_set1_epi64x(rem), _mm256_set_epi64x(3, 2, 1, 0))
        }, first_lanes(lanes);
    }
    unsafe {
        fn load(p: *const f64) -> Self::F = _mm256_loadu_pd(p), _mm512_loadu_pd(p);
        fn load_ps(p: *const f32) -> Self::Fs = _mm256_loadu_ps(p), _mm512_loadu_ps(p);
        fn store_ps(p: *mut f32, v: Self::Fs) = _mm256_storeu_ps(p, v), _mm512_storeu_ps(p, v);
        fn store(p: *mut f64, v: Self::F) = _mm256_storeu_pd(p, v), _mm512_storeu_pd(p, v);
        /// The lanes of `t` from `p`, the others 0 (and not read).
        fn load_tail(p: *const f64, t: Self::Tail) -> Self::F
            = _mm256_maskload_pd(p, t), _mm512_maskz_loadu_pd(t, p);
        /// Stores the lanes of `t` only.
        fn store_tail(p: *mut f64, t: Self::Tail, v: Self::F)
            = _mm256_maskstore_pd(p, t, v), _mm512_mask_storeu_pd(p, t, v);
        /// The first `lanes` values from `p` (a whole vector when `lanes` >= LANES; the rest 0).
        fn load_lanes(p: *const f64, lanes: usize) -> Self::F = if lanes >= 4 {
            _mm256_loadu_pd(p)
        } else {
            _mm256_loadu_pd(padded(p, lanes).as_ptr())
        }, if lanes >= 8 {
            _mm512_loadu_pd(p)
        } else {
            _mm512_maskz_loadu_pd(first_lanes(lanes), p)
        };
        /// `load_lanes` of f32 values, widened.
        fn load_lanes_f32(p: *const f32, lanes: usize) -> Self::F = _mm256_cvtps_pd(if lanes >= 4 {
            _mm_loadu_ps(p)
        } else {
            _mm_loadu_ps(padded(p, lanes).as_ptr())
        }), _mm512_cvtps_pd(if lanes >= 8 {
            _mm256_loadu_ps(p)
        } else {
            _mm256_maskz_loadu_ps(first_lanes(lanes), p)
        });
        /// `load_lanes` of halves, widened (F16C).
        fn load_lanes_f16(p: *const F16, lanes: usize) -> Self::F = _mm256_cvtps_pd(_mm_cvtph_ps(
            _mm_loadl_epi64(if lanes >= 4 { p } else { padded(p, lanes).as_ptr() }.cast())
        )), _mm512_cvtps_pd(_mm256_cvtph_ps(if lanes >= 8 {
            _mm_loadu_si128(p.cast())
        } else {
            let mut v = [F16::default(); 8];
            std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), lanes);
            _mm_loadu_si128(v.as_ptr().cast())
        }));
        /// Stores the LANES lanes of `v` rounded to f32 (to nearest).
        fn store_f32(p: *mut f32, v: Self::F)
            = _mm_storeu_ps(p, _mm256_cvtpd_ps(v)), _mm256_storeu_ps(p, _mm512_cvtpd_ps(v));
        /// Stores the first `lanes` (at most LANES) lanes of `v`.
        fn store_column(p: *mut f64, lanes: usize, v: Self::F) = if lanes >= 4 {
            _mm256_storeu_pd(p, v)
        } else {
            let mut part = [0.0f64; 4];
            _mm256_storeu_pd(part.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(part.as_ptr(), p, lanes);
        }, _mm512_mask_storeu_pd(p, first_lanes(lanes), v);
    }
}

/// AVX2 and FMA: four doubles a vector.
#[derive(Debug, Clone, Copy)]
pub struct Avx2(());

/// AVX-512F and FMA: eight doubles a vector, masked tails.
#[derive(Debug, Clone, Copy)]
pub struct Avx512(());

impl Avx2 {
    /// # Safety
    /// AVX2 and FMA must run here.
    #[inline(always)]
    pub unsafe fn new_unchecked() -> Self {
        Avx2(())
    }
}

impl Avx512 {
    /// # Safety
    /// AVX-512F and FMA must run here.
    #[inline(always)]
    pub unsafe fn new_unchecked() -> Self {
        Avx512(())
    }
}

/// A vector level this CPU runs, with its proof.
#[derive(Debug, Clone, Copy)]
pub enum Vector {
    Avx2(Avx2),
    Avx512(Avx512),
}

impl Vector {
    /// The best vector level at most `level` that this CPU runs (None: the portable code).
    #[inline]
    pub fn at_most(level: Level) -> Option<Vector> {
        if level == Level::Avx512 && level.runs_here() {
            // SAFETY: checked just above.
            return Some(Vector::Avx512(unsafe { Avx512::new_unchecked() }));
        }
        if level >= Level::Avx2 && Level::Avx2.runs_here() {
            // SAFETY: checked just above.
            return Some(Vector::Avx2(unsafe { Avx2::new_unchecked() }));
        }
        None
    }

    /// The vector level of [`super::level`], which returns only levels this CPU runs: nothing
    /// is detected again, so `axpy` still costs one atomic load a call to dispatch.
    #[inline]
    pub fn current() -> Option<Vector> {
        match super::level() {
            // SAFETY: `level()` returns only levels this CPU runs.
            Level::Avx512 => Some(Vector::Avx512(unsafe { Avx512::new_unchecked() })),
            // SAFETY: as above.
            Level::Avx2 => Some(Vector::Avx2(unsafe { Avx2::new_unchecked() })),
            Level::Portable => None,
        }
    }
}

/// The first `lanes` (fewer than 4) values from `p`, the rest 0.
///
/// # Safety
/// `p..p + lanes` must be readable.
#[inline(always)]
unsafe fn padded<T: Copy + Default>(p: *const T, lanes: usize) -> [T; 4] {
    let mut v = [T::default(); 4];
    // SAFETY: the caller's contract; `v` holds 4.
    unsafe { std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), lanes) };
    v
}

/// The mask of the first min(lanes, 8) lanes.
#[inline(always)]
fn first_lanes(lanes: usize) -> __mmask8 {
    (1u16 << lanes.min(8)).wrapping_sub(1) as u8
}

/// exp(x) for x in [-708, 0] on every lane: 2^n exp(r), x = n ln2 + r, exp(r) by its Taylor
/// polynomial of degree `DEGREE` (at most 13). The exponential's core, which the benchmark of the
/// arithmetic floor runs too, at degree 12 and with the arguments clamped instead of underflowing.
#[inline(always)]
pub fn exp_in_range<S: Simd, const DEGREE: usize>(s: S, x: S::F) -> S::F {
    let shifter = s.splat(SHIFTER);
    let shifted = s.fmadd(x, s.splat(LOG2E), shifter);
    let n = s.sub(shifted, shifter);
    let r = s.fnmadd(n, s.splat(LN2_HI), x);
    let r = s.fnmadd(n, s.splat(LN2_LO), r);
    let mut p = s.splat(INV_FACT[DEGREE]);
    for k in (0..DEGREE).rev() {
        p = s.fmadd(p, r, s.splat(INV_FACT[k]));
    }
    s.mul(p, s.pow2(shifted, shifter))
}

/// `exp_nonpositive::<true>` on every lane, operation for operation.
#[inline(always)]
fn exp<S: Simd>(s: S, x: S::F) -> S::F {
    let min = s.splat(EXP_MIN_ARG);
    let underflow = s.lt(x, min);
    let e = exp_in_range::<S, 13>(s, s.select(underflow, min, x));
    s.select(underflow, s.zero(), e)
}

/// `rbf_from_dot::<true>` on every lane (`neg_gamma` = -gamma).
#[inline(always)]
fn rbf<S: Simd>(s: S, dot: S::F, sv_norm: S::F, x_norm: S::F, neg_gamma: S::F) -> S::F {
    // (x_norm + sv_norm) - 2 dot rounds once either way: 2 dot is exact.
    let d2 = s.fnmadd(s.splat(2.0), dot, s.add(x_norm, sv_norm));
    // max returns its second operand when one is NaN: a NaN distance stays NaN.
    exp(s, s.mul(neg_gamma, s.max(s.zero(), d2)))
}

/// `rbf_from_dot_single::<true>` on every lane before its rounding to f32.
#[inline(always)]
fn rbf_single<S: Simd>(s: S, dot: S::F, sv_norm: S::F, x_norm: S::F, neg_gamma: S::F) -> S::F {
    let d2 = s.fnmadd(s.splat(2.0), dot, s.add(x_norm, sv_norm));
    let x = s.mul(neg_gamma, s.max(s.zero(), d2));
    let min = s.splat(EXP_MIN_ARG);
    let underflow = s.lt(x, min);
    let e = exp_in_range::<S, SINGLE_DEGREE>(s, s.select(underflow, min, x));
    s.select(underflow, s.zero(), e)
}

/// `rbf_from_dots_f32`: whole vectors, the rest in the scalar fused code (the same values).
///
/// # Safety
/// `norms`, `dots` and `out` hold the same number of values.
#[inline(always)]
unsafe fn rbf_from_dots_f32_on<S: Simd>(
    s: S,
    gamma: f64,
    x_norm: f64,
    norms: &[f64],
    dots: &[f64],
    out: &mut [f32],
) {
    let n = out.len();
    let (neg_gamma, xn) = (s.splat(-gamma), s.splat(x_norm));
    let (pn, pd, po) = (norms.as_ptr(), dots.as_ptr(), out.as_mut_ptr());
    let mut j = 0;
    // SAFETY: lanes j..j + LANES <= n of the three slices.
    unsafe {
        while j + S::LANES <= n {
            let v = rbf_single(s, s.load(pd.add(j)), s.load(pn.add(j)), xn, neg_gamma);
            s.store_f32(po.add(j), v);
            j += S::LANES;
        }
    }
    for k in j..n {
        out[k] = super::rbf_from_dot_single::<true>(gamma, x_norm, norms[k], dots[k]);
    }
}

/// `sigmoid_from_dot::<true>` on every lane, operation for operation.
#[inline(always)]
fn sigmoid<S: Simd>(s: S, dot: S::F, gamma: S::F, coef0: S::F) -> S::F {
    let x = s.fmadd(gamma, dot, coef0);
    let t = exp(s, s.mul(s.splat(-2.0), s.abs(x)));
    let one = s.splat(1.0);
    s.copysign(s.div(s.sub(one, t), s.add(one, t)), x)
}

/// (f[0] + f[1]) + (f[2] + f[3]), then the lanes: the decision sum's order.
#[inline(always)]
fn sum4<S: Simd>(s: S, f: [S::F; 4]) -> f64 {
    s.sum(s.add(s.add(f[0], f[1]), s.add(f[2], f[3])))
}

/// An elementwise map from dot products to kernel values, for `map_in_place`. A trait with
/// `#[inline(always)]` methods rather than closures: a closure is compiled without the entry
/// point's target features, so its intrinsics would stay calls.
trait DotsMap<S: Simd> {
    /// The values at j of whole vectors (`t` None) or of the tail's lanes.
    ///
    /// # Safety
    /// What it loads at j must be readable as the dots are.
    unsafe fn vector(&self, j: usize, dots: S::F, t: Option<S::Tail>) -> S::F;
    /// One value in scalar fused code: the vector's value, lane for lane.
    fn scalar(&self, j: usize, dot: f64) -> f64;
}

/// dots[j] <- `map`(j, dots[j]) a vector at a time, then the rest masked, or in scalar code
/// (see `Simd::MASKED_TAILS`).
///
/// # Safety
/// As `map.vector`.
#[inline(always)]
unsafe fn map_in_place<S: Simd>(s: S, dots: &mut [f64], map: impl DotsMap<S>) {
    let (n, pd) = (dots.len(), dots.as_mut_ptr());
    let mut j = 0;
    // SAFETY: whole vectors read and write lanes j..j + LANES <= n; the tail's masked lanes are
    // neither read nor written.
    unsafe {
        while j + S::LANES <= n {
            s.store(pd.add(j), map.vector(j, s.load(pd.add(j)), None));
            j += S::LANES;
        }
        if S::MASKED_TAILS && j < n {
            let t = s.tail(n - j);
            s.store_tail(
                pd.add(j),
                t,
                map.vector(j, s.load_tail(pd.add(j), t), Some(t)),
            );
            return;
        }
    }
    for (k, d) in dots.iter_mut().enumerate().skip(j) {
        *d = map.scalar(k, *d);
    }
}

/// Gaussian kernel values from dots and the SVs' squared norms.
struct RbfMap<'a, S: Simd> {
    s: S,
    gamma: f64,
    x_norm: f64,
    norms: &'a [f64],
    neg_gamma: S::F,
    x_norm_v: S::F,
}

impl<S: Simd> DotsMap<S> for RbfMap<'_, S> {
    #[inline(always)]
    unsafe fn vector(&self, j: usize, dots: S::F, t: Option<S::Tail>) -> S::F {
        let s = self.s;
        // SAFETY: the norms hold as many values as the dots (the caller's contract).
        let norms = unsafe { s.load_part(self.norms.as_ptr().add(j), t) };
        rbf(s, dots, norms, self.x_norm_v, self.neg_gamma)
    }
    #[inline(always)]
    fn scalar(&self, j: usize, dot: f64) -> f64 {
        super::rbf_from_dot::<true>(self.gamma, self.x_norm, self.norms[j], dot)
    }
}

/// Sigmoid kernel values from dots.
struct SigmoidMap<S: Simd> {
    s: S,
    gamma: f64,
    coef0: f64,
    gamma_v: S::F,
    coef0_v: S::F,
}

impl<S: Simd> DotsMap<S> for SigmoidMap<S> {
    #[inline(always)]
    unsafe fn vector(&self, _: usize, dots: S::F, _: Option<S::Tail>) -> S::F {
        sigmoid(self.s, dots, self.gamma_v, self.coef0_v)
    }
    #[inline(always)]
    fn scalar(&self, _: usize, dot: f64) -> f64 {
        super::sigmoid_from_dot::<true>(self.gamma, self.coef0, dot)
    }
}

/// # Safety
/// `norms` holds as many values as `dots`.
#[inline(always)]
unsafe fn rbf_from_dots_on<S: Simd>(
    s: S,
    gamma: f64,
    x_norm: f64,
    norms: &[f64],
    dots: &mut [f64],
) {
    let (neg_gamma, x_norm_v) = (s.splat(-gamma), s.splat(x_norm));
    let map = RbfMap {
        s,
        gamma,
        x_norm,
        norms,
        neg_gamma,
        x_norm_v,
    };
    // SAFETY: the caller's contract.
    unsafe { map_in_place(s, dots, map) }
}

/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn sigmoid_from_dots_on<S: Simd>(s: S, gamma: f64, coef0: f64, dots: &mut [f64]) {
    let (gamma_v, coef0_v) = (s.splat(gamma), s.splat(coef0));
    let map = SigmoidMap {
        s,
        gamma,
        coef0,
        gamma_v,
        coef0_v,
    };
    // SAFETY: the map loads nothing.
    unsafe { map_in_place(s, dots, map) }
}

/// Blocks of 4 vectors of SVs at a time in the decision sum's four accumulators, then single
/// vectors (the last masked) into the first: `rbf_row`'s order.
const UNROLL: usize = 4;

/// The decision sum of `rbf_row_on`, in its order, from stored kernel values.
///
/// # Safety
/// Both slices have the same length.
#[inline(always)]
unsafe fn decision_sum_on<S: Simd>(s: S, coef: &[f64], kvals: &[f64]) -> f64 {
    let (w, len) = (S::LANES, kvals.len());
    let (pc, pk) = (coef.as_ptr(), kvals.as_ptr());
    let mut f = [s.zero(); UNROLL];
    let mut j = 0;
    // SAFETY: whole blocks read below len; the tail is masked.
    unsafe {
        while j + w * UNROLL <= len {
            for (l, fl) in f.iter_mut().enumerate() {
                let o = j + w * l;
                *fl = s.fmadd(s.load(pc.add(o)), s.load(pk.add(o)), *fl);
            }
            j += w * UNROLL;
        }
        while j < len {
            let t = s.tail(len - j);
            f[0] = s.fmadd(s.load_tail(pc.add(j), t), s.load_tail(pk.add(j), t), f[0]);
            j += w;
        }
    }
    sum4(s, f)
}

/// `rbf_row`: blocks of UNROLL vectors of SVs (their dot products in registers across the row's
/// non-zeros), then single vectors, the last masked.
///
/// # Safety
/// `rbf_row` checked every offset.
#[inline(always)]
unsafe fn rbf_row_on<S: Simd>(s: S, fused: FusedRow<'_>, kvals: &mut [f64]) -> f64 {
    let FusedRow(svs, row, gamma, coef) = fused;
    let (w, cols, vals) = (S::LANES, row.cols, row.vals);
    let (len, stride) = (svs.len, svs.stride);
    let (ps, pn, pk) = (svs.svt.as_ptr(), svs.sq_norms.as_ptr(), kvals.as_mut_ptr());
    let pc = coef.map(|c| c.as_ptr());
    let (g, xn) = (s.splat(-gamma), s.splat(row.sq_norm));
    let mut f = [s.zero(); UNROLL];
    let mut j = 0;
    // SAFETY: rows c * stride + j .. + w * UNROLL with j + w * UNROLL <= len <= stride and c
    // checked by the caller; the masked tail reads and writes only lanes below len.
    unsafe {
        while j + w * UNROLL <= len {
            let mut acc = [s.zero(); UNROLL];
            for (&c, &v) in cols.iter().zip(vals) {
                let (vv, run) = (s.splat(v), ps.add(c * stride + j));
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = s.fmadd(vv, s.load(run.add(w * l)), *a);
                }
            }
            for (l, a) in acc.iter().enumerate() {
                let o = j + w * l;
                let k = rbf(s, *a, s.load(pn.add(o)), xn, g);
                s.store(pk.add(o), k);
                if let Some(pc) = pc {
                    f[l] = s.fmadd(s.load(pc.add(o)), k, f[l]);
                }
            }
            j += w * UNROLL;
        }
        while j < len {
            let t = s.tail(len - j);
            let mut acc = s.zero();
            for (&c, &v) in cols.iter().zip(vals) {
                acc = s.fmadd(s.splat(v), s.load_tail(ps.add(c * stride + j), t), acc);
            }
            let k = rbf(s, acc, s.load_tail(pn.add(j), t), xn, g);
            s.store_tail(pk.add(j), t, k);
            if let Some(pc) = pc {
                f[0] = s.fmadd(s.load_tail(pc.add(j), t), k, f[0]);
            }
            j += w;
        }
    }
    sum4(s, f)
}

/// y += alpha * x two whole vectors at a time from the start (each lane the scalar fused
/// multiply-add on the widened value); returns where it stopped.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn axpy_pairs<S: Simd, T: ColumnValue>(s: S, alpha: f64, x: &[T], y: &mut [f64]) -> usize {
    let (n, w) = (x.len().min(y.len()), S::LANES);
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), s.splat(alpha));
    let mut i = 0;
    // SAFETY: lanes i..i + 2 w are in bounds of both slices.
    unsafe {
        while i + 2 * w <= n {
            let y0 = s.fmadd(va, T::load(s, px.add(i), w), s.load(py.add(i)));
            let y1 = s.fmadd(va, T::load(s, px.add(i + w), w), s.load(py.add(i + w)));
            s.store(py.add(i), y0);
            s.store(py.add(i + w), y1);
            i += 2 * w;
        }
    }
    i
}

/// y += alpha * x, the rest after `axpy_pairs` masked, or in a vector then scalar code.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn axpy_on<S: Simd>(s: S, alpha: f64, x: &[f64], y: &mut [f64]) {
    // SAFETY: the level's.
    let mut i = unsafe { axpy_pairs(s, alpha, x, y) };
    let n = x.len().min(y.len());
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), s.splat(alpha));
    // SAFETY: lanes below n only.
    unsafe {
        if S::MASKED_TAILS {
            while i < n {
                let t = s.tail(n - i);
                let v = s.fmadd(va, s.load_tail(px.add(i), t), s.load_tail(py.add(i), t));
                s.store_tail(py.add(i), t, v);
                i += S::LANES;
            }
            return;
        }
        while i + S::LANES <= n {
            s.store(py.add(i), s.fmadd(va, s.load(px.add(i)), s.load(py.add(i))));
            i += S::LANES;
        }
    }
    for (yk, &xk) in y.iter_mut().zip(x).skip(i) {
        *yk = alpha.mul_add(xk, *yk);
    }
}

/// y += alpha * x for x stored narrow (widened exactly), the rest after `axpy_pairs` in scalar
/// code.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn axpy_narrow_on<S: Simd, T: ColumnValue>(s: S, alpha: f64, x: &[T], y: &mut [f64]) {
    // SAFETY: the level's.
    let i = unsafe { axpy_pairs(s, alpha, x, y) };
    for (yk, &xk) in y.iter_mut().zip(x).skip(i) {
        *yk = alpha.mul_add(xk.widen(), *yk);
    }
}

/// Sum of x[i] (widened) * y[i]: four vector accumulators (lanes i = u mod 4 vectors), added
/// pairwise, then the lanes in the level's order and the scalar tail.
///
/// # Safety
/// None beyond the level's.
#[inline(always)]
unsafe fn dot_narrow_on<S: Simd, T: ColumnValue>(s: S, x: &[T], y: &[f64]) -> f64 {
    let (n, w) = (x.len().min(y.len()), S::LANES);
    let (px, py) = (x.as_ptr(), y.as_ptr());
    let mut acc = [s.zero(); 4];
    let mut i = 0;
    // SAFETY: lanes i..i + 4 w are in bounds of both slices.
    unsafe {
        while i + 4 * w <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let at = i + u * w;
                *a = s.fmadd(T::load(s, px.add(at), w), s.load(py.add(at)), *a);
            }
            i += 4 * w;
        }
    }
    let mut sum = s.sum(s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3])));
    for (&a, &b) in x[i..n].iter().zip(&y[i..n]) {
        sum = a.widen().mul_add(b, sum);
    }
    sum
}

/// `dots_8_rows`: `DOT_VECTORS` vectors of each of the 8 rows' sums held in registers across
/// the columns.
///
/// # Safety
/// The bounds checked by `dots_8_rows`.
// p indexes the 8 register sums and the 8 rows of q alike; unrolled by the compiler.
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
#[inline(always)]
unsafe fn dots_8_rows_on<S: Simd, T: ColumnValue>(s: S, block: EightRows<'_, T>, dots: &mut [f64]) {
    let EightRows(q, width, cols, xt, stride, m) = block;
    let w = S::LANES;
    let (pq, px, pd) = (q.as_ptr(), xt.as_ptr(), dots.as_mut_ptr());
    let mut k = 0;
    while k < m {
        let lanes = (m - k).min(S::DOT_VECTORS * w);
        // The second vector's lanes (none on a level that holds one vector a row).
        let (l0, l1) = (lanes.min(w), lanes.saturating_sub(w));
        let mut a = [s.zero(); BLOCK_ROWS];
        let mut b = [s.zero(); BLOCK_ROWS];
        // SAFETY: column c's lanes k..k + lanes lie within xt (checked by the caller), the 8
        // rows of q within q, the outputs within dots.
        unsafe {
            for &c in cols {
                let x = px.add(c * stride + k);
                let x0 = T::load(s, x, l0);
                let x1 = if l1 > 0 {
                    T::load(s, x.add(w), l1)
                } else {
                    s.zero()
                };
                for p in 0..BLOCK_ROWS {
                    let qp = s.splat(*pq.add(p * width + c));
                    a[p] = s.fmadd(qp, x0, a[p]);
                    if S::DOT_VECTORS > 1 {
                        b[p] = s.fmadd(qp, x1, b[p]);
                    }
                }
            }
            for p in 0..BLOCK_ROWS {
                let out = pd.add(p * m + k);
                s.store_column(out, l0, a[p]);
                if S::DOT_VECTORS > 1 && l1 > 0 {
                    s.store_column(out.add(w), l1, b[p]);
                }
            }
        }
        k += lanes;
    }
}

/// Vectors of `dots_one_row`'s sums held in registers (32 f64 lanes on AVX-512, 16 on AVX2).
const ONE_ROW_VECTORS: usize = 4;

/// `dots_one_row`: `ONE_ROW_VECTORS` vectors of sums held in registers across the columns, the
/// last block's lanes masked on load and store.
///
/// # Safety
/// The bounds checked by `dots_one_row`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn dots_one_row_on<S: Simd, T: ColumnValue>(s: S, row: OneRow<'_, T>, dots: &mut [f64]) {
    let OneRow(q, cols, xt, stride, m) = row;
    let w = S::LANES;
    let (px, pd) = (xt.as_ptr(), dots.as_mut_ptr());
    let mut k = 0;
    // SAFETY: column c's lanes k..k + lanes lie within xt (checked by the caller), the outputs
    // within dots.
    unsafe {
        while k + ONE_ROW_VECTORS * w <= m {
            let mut acc = [s.zero(); ONE_ROW_VECTORS];
            for &c in cols {
                let qc = s.splat(q[c]);
                let x = px.add(c * stride + k);
                for u in 0..ONE_ROW_VECTORS {
                    acc[u] = s.fmadd(qc, T::load(s, x.add(u * w), w), acc[u]);
                }
            }
            for u in 0..ONE_ROW_VECTORS {
                s.store(pd.add(k + u * w), acc[u]);
            }
            k += ONE_ROW_VECTORS * w;
        }
        while k < m {
            let lanes = (m - k).min(w);
            let mut acc = s.zero();
            for &c in cols {
                let x = T::load(s, px.add(c * stride + k), lanes);
                acc = s.fmadd(s.splat(q[c]), x, acc);
            }
            s.store_column(pd.add(k), lanes, acc);
            k += lanes;
        }
    }
}

/// `product_tile`: `PRODUCT_TILE_ROWS` x 2 vectors of sums held in registers (12 of AVX2's 16),
/// each step over k two loads of the packed panel and one broadcast per row.
///
/// # Safety
/// The bounds checked by `product_tile`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn product_tile_on<S: Simd>(s: S, tile: ProductTile<'_>, out: &mut [f64]) {
    let ProductTile(a, a_stride, rows, panel, kc) = tile;
    let w = S::LANES;
    let mut acc0 = [s.zero(); PRODUCT_TILE_ROWS];
    let mut acc1 = [s.zero(); PRODUCT_TILE_ROWS];
    // Rows past `rows` repeat the last one (read, never stored).
    let row: [*const f64; PRODUCT_TILE_ROWS] =
        std::array::from_fn(|r| a[r.min(rows - 1) * a_stride..].as_ptr());
    let pb = panel.as_ptr();
    // SAFETY: the caller checked a's rows hold kc values from each row start and the panel
    // kc * 2 w.
    unsafe {
        for k in 0..kc {
            let b0 = s.load(pb.add(k * 2 * w));
            let b1 = s.load(pb.add(k * 2 * w + w));
            for r in 0..PRODUCT_TILE_ROWS {
                let ar = s.splat(*row[r].add(k));
                acc0[r] = s.fmadd(ar, b0, acc0[r]);
                acc1[r] = s.fmadd(ar, b1, acc1[r]);
            }
        }
        let po = out.as_mut_ptr();
        for r in 0..rows {
            s.store(po.add(r * 2 * w), acc0[r]);
            s.store(po.add(r * 2 * w + w), acc1[r]);
        }
    }
}

/// `product_tile_f32`: `product_tile_on` in f32, two vectors of 2 `LANES` floats per row.
///
/// # Safety
/// The bounds checked by `product_tile_f32`.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn product_tile_f32_on<S: Simd>(s: S, tile: ProductTileF32<'_>, out: &mut [f32]) {
    let ProductTileF32(a, a_stride, rows, panel, kc) = tile;
    let w = 2 * S::LANES;
    let mut acc0 = [s.zero_ps(); PRODUCT_TILE_ROWS];
    let mut acc1 = [s.zero_ps(); PRODUCT_TILE_ROWS];
    let row: [*const f32; PRODUCT_TILE_ROWS] =
        std::array::from_fn(|r| a[r.min(rows - 1) * a_stride..].as_ptr());
    let pb = panel.as_ptr();
    // SAFETY: as `product_tile_on`, in floats.
    unsafe {
        for k in 0..kc {
            let b0 = s.load_ps(pb.add(k * 2 * w));
            let b1 = s.load_ps(pb.add(k * 2 * w + w));
            for r in 0..PRODUCT_TILE_ROWS {
                let ar = s.splat_ps(*row[r].add(k));
                acc0[r] = s.fmadd_ps(ar, b0, acc0[r]);
                acc1[r] = s.fmadd_ps(ar, b1, acc1[r]);
            }
        }
        let po = out.as_mut_ptr();
        for r in 0..rows {
            s.store_ps(po.add(r * 2 * w), acc0[r]);
            s.store_ps(po.add(r * 2 * w + w), acc1[r]);
        }
    }
}

/// For each loop written once above, its AVX2 and AVX-512 entry points (`#[target_feature]`
/// functions, where the generic code inlines with its intrinsics) and `name(vector, ...)`, the
/// match that runs the one of a [`Vector`].
macro_rules! levels {
    ($(
        $(#[doc = $doc:literal])*
        fn $name:ident $(<$g:ident: $bound:path>)? ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?
            = $body:ident in $avx2:ident, $avx512:ident;
    )*) => {$(
        #[doc = concat!("`", stringify!($body), "` with AVX2 and FMA.")]
        ///
        /// # Safety
        /// AVX2 and FMA must run here; the arguments meet the body's contract.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $avx2 $(<$g: $bound>)? ($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the caller's contract.
            unsafe { $body(Avx2::new_unchecked(), $($arg),*) }
        }

        #[doc = concat!("`", stringify!($body), "` with AVX-512F and FMA.")]
        ///
        /// # Safety
        /// AVX-512F and FMA must run here; the arguments meet the body's contract.
        #[target_feature(enable = "avx512f,fma,f16c")]
        pub unsafe fn $avx512 $(<$g: $bound>)? ($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the caller's contract.
            unsafe { $body(Avx512::new_unchecked(), $($arg),*) }
        }

        $(#[doc = $doc])*
        ///
        /// # Safety
        /// The arguments meet the body's contract (the level is proven by `level`).
        // The level comes on top of the operation's own arguments.
        #[allow(clippy::too_many_arguments)]
        #[inline]
        pub unsafe fn $name $(<$g: $bound>)? (level: Vector, $($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the token proves the level; the rest is the caller's contract.
            unsafe {
                match level {
                    Vector::Avx2(_) => $avx2($($arg),*),
                    Vector::Avx512(_) => $avx512($($arg),*),
                }
            }
        }
    )*};
}

levels! {
    /// Kernel values from dots (`rbf_from_dots_on`).
    fn rbf_from_dots(gamma: f64, x_norm: f64, norms: &[f64], dots: &mut [f64])
        = rbf_from_dots_on in rbf_from_dots_avx2, rbf_from_dots_avx512;
    /// Gaussian kernel values in f32 from dots (`rbf_from_dots_f32_on`).
    fn rbf_from_dots_f32(
        gamma: f64,
        x_norm: f64,
        norms: &[f64],
        dots: &[f64],
        out: &mut [f32]
    ) = rbf_from_dots_f32_on in rbf_from_dots_f32_avx2, rbf_from_dots_f32_avx512;
    /// Sigmoid kernel values from dots (`sigmoid_from_dots_on`).
    fn sigmoid_from_dots(gamma: f64, coef0: f64, dots: &mut [f64])
        = sigmoid_from_dots_on in sigmoid_from_dots_avx2, sigmoid_from_dots_avx512;
    /// The decision sum in `rbf_row`'s order (`decision_sum_on`).
    fn decision_sum(coef: &[f64], kvals: &[f64]) -> f64
        = decision_sum_on in decision_sum_avx2, decision_sum_avx512;
    /// The fused kernel row (`rbf_row_on`).
    fn rbf_row(fused: FusedRow<'_>, kvals: &mut [f64]) -> f64
        = rbf_row_on in rbf_row_avx2, rbf_row_avx512;
    /// y += alpha * x (`axpy_on`).
    fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) = axpy_on in axpy_avx2, axpy_avx512;
    /// y += alpha * x for x in f32 or halves (`axpy_narrow_on`).
    fn axpy_narrow<T: ColumnValue>(alpha: f64, x: &[T], y: &mut [f64])
        = axpy_narrow_on in axpy_narrow_avx2, axpy_narrow_avx512;
    /// Sum of x * y for x in f32 or halves (`dot_narrow_on`).
    fn dot_narrow<T: ColumnValue>(x: &[T], y: &[f64]) -> f64
        = dot_narrow_on in dot_narrow_avx2, dot_narrow_avx512;
    /// A tile of a matrix product against a packed panel (`product_tile_on`).
    fn product_tile(tile: ProductTile<'_>, out: &mut [f64])
        = product_tile_on in product_tile_avx2, product_tile_avx512;
    /// `product_tile_f32_on`.
    fn product_tile_f32(tile: ProductTileF32<'_>, out: &mut [f32])
        = product_tile_f32_on in product_tile_f32_avx2, product_tile_f32_avx512;
    /// Dot products of 8 rows with m of a feature-major copy (`dots_8_rows_on`).
    fn dots_8_rows<T: ColumnValue>(block: EightRows<'_, T>, dots: &mut [f64])
        = dots_8_rows_on in dots_8_rows_avx2, dots_8_rows_avx512;
    /// Dot products of one row with m of a feature-major copy (`dots_one_row_on`).
    fn dots_one_row<T: ColumnValue>(row: OneRow<'_, T>, dots: &mut [f64])
        = dots_one_row_on in dots_one_row_avx2, dots_one_row_avx512;
}

// The loops below have no second level: `dot` is AVX2's on every vector level (the summation
// order the fused row's by-columns path has always had), and the others pay only with AVX-512's
// mask registers.

/// `dot_half`: halves widened to f32 (exactly) 8 at a time, two accumulators of 8 lanes, then
/// the lanes and the scalar tail.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_half_avx2(x: &[F16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (px, py) = (x.as_ptr(), y.as_ptr());
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    // SAFETY: every load reads values i..i + 16 (or i + 8) < n of both slices.
    unsafe {
        while i + 16 <= n {
            let h0 = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i).cast()));
            let h1 = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i + 8).cast()));
            acc0 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(py.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(h1, _mm256_loadu_ps(py.add(i + 8)), acc1);
            i += 16;
        }
        if i + 8 <= n {
            let h0 = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i).cast()));
            acc0 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(py.add(i)), acc0);
            i += 8;
        }
    }
    let acc = _mm256_add_ps(acc0, acc1);
    let quad = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    let mut sum = _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
    for k in i..n {
        sum = (x[k].to_f64() as f32).mul_add(y[k], sum);
    }
    sum
}

/// `axpy_half`: y += a x, 8 lanes at a time, the tail in scalar fused code (the same values).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_half_avx2(a: f32, x: &[F16], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (px, py, va) = (x.as_ptr(), y.as_mut_ptr(), _mm256_set1_ps(a));
    let mut i = 0;
    // SAFETY: values i..i + 8 <= n of both slices.
    unsafe {
        while i + 8 <= n {
            let h = _mm256_cvtph_ps(_mm_loadu_si128(px.add(i).cast()));
            _mm256_storeu_ps(
                py.add(i),
                _mm256_fmadd_ps(va, h, _mm256_loadu_ps(py.add(i))),
            );
            i += 8;
        }
    }
    for k in i..n {
        y[k] = a.mul_add(x[k].to_f64() as f32, y[k]);
    }
}

/// `extend_f16` with F16C, 8 values a conversion (to nearest, ties to even).
///
/// # Safety
/// The CPU must support AVX and F16C.
#[target_feature(enable = "avx,f16c")]
pub unsafe fn extend_f16_f16c(x: &[f32], out: &mut Vec<F16>) {
    let n = x.len();
    out.reserve(n);
    let start = out.len();
    let mut i = 0;
    // SAFETY: `reserve` made room for n values after `start`; every write lies there, and
    // the length covers only written values.
    unsafe {
        let (px, po) = (x.as_ptr(), out.as_mut_ptr().add(start));
        while i + 8 <= n {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(px.add(i)));
            _mm_storeu_si128(po.add(i).cast(), h);
            i += 8;
        }
        for (k, &v) in x.iter().enumerate().skip(i) {
            po.add(k).write(F16::from_f32(v));
        }
        out.set_len(start + n);
    }
}

/// Sum of a[i] * b[i]: four accumulators of four lanes, then the scalar tail.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` must have the same length.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_avx2(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_pd();
    let mut acc1 = _mm256_setzero_pd();
    let mut acc2 = _mm256_setzero_pd();
    let mut acc3 = _mm256_setzero_pd();
    let mut i = 0;
    // SAFETY: every load reads lanes i..i+16 (or i..i+4) with i+16 <= n (or i+4 <= n).
    unsafe {
        while i + 16 <= n {
            acc0 = _mm256_fmadd_pd(_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_pd(
                _mm256_loadu_pd(pa.add(i + 4)),
                _mm256_loadu_pd(pb.add(i + 4)),
                acc1,
            );
            acc2 = _mm256_fmadd_pd(
                _mm256_loadu_pd(pa.add(i + 8)),
                _mm256_loadu_pd(pb.add(i + 8)),
                acc2,
            );
            acc3 = _mm256_fmadd_pd(
                _mm256_loadu_pd(pa.add(i + 12)),
                _mm256_loadu_pd(pb.add(i + 12)),
                acc3,
            );
            i += 16;
        }
        while i + 4 <= n {
            acc0 = _mm256_fmadd_pd(_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pb.add(i)), acc0);
            i += 4;
        }
    }
    let acc = _mm256_add_pd(_mm256_add_pd(acc0, acc1), _mm256_add_pd(acc2, acc3));
    let mut lanes = [0.0f64; 4];
    // SAFETY: `lanes` has room for four f64.
    unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), acc) };
    let mut sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    while i < n {
        sum = a[i].mul_add(b[i], sum);
        i += 1;
    }
    sum
}

/// `weighted_row_sum` for n_out <= C LANES: C vectors of outputs, four SVs in flight (rows
/// j = u mod 4 in accumulator u, the tail in the first), added pairwise at the end: per output
/// the same operations in the same order on every level, so the same bits.
///
/// # Safety
/// `coef` holds `weights.len()` rows of `n_out`, `out` n_out values, n_out <= C LANES.
#[inline(always)]
unsafe fn weighted_row_sum_on<S: Simd, const C: usize>(
    s: S,
    coef: &[f64],
    n_out: usize,
    weights: &[f64],
    out: &mut [f64],
) {
    let tails: [S::Tail; C] = std::array::from_fn(|c| s.tail(n_out.saturating_sub(S::LANES * c)));
    let mut acc = [[s.zero(); C]; 4];
    let pc = coef.as_ptr();
    let n = weights.len();
    let mut j = 0;
    // SAFETY: row j's lanes below n_out only (the tails).
    unsafe {
        while j + 4 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let w = s.splat(weights[j + u]);
                let row = pc.add((j + u) * n_out);
                for (c, v) in a.iter_mut().enumerate() {
                    *v = s.fmadd(w, s.load_tail(row.add(S::LANES * c), tails[c]), *v);
                }
            }
            j += 4;
        }
        while j < n {
            let w = s.splat(weights[j]);
            let row = pc.add(j * n_out);
            for (c, v) in acc[0].iter_mut().enumerate() {
                *v = s.fmadd(w, s.load_tail(row.add(S::LANES * c), tails[c]), *v);
            }
            j += 1;
        }
        for c in 0..C {
            let sum = s.add(s.add(acc[0][c], acc[1][c]), s.add(acc[2][c], acc[3][c]));
            s.store_tail(out.as_mut_ptr().add(S::LANES * c), tails[c], sum);
        }
    }
}

/// `weighted_row_sum_on` with AVX2 and FMA (n_out <= 4 C).
///
/// # Safety
/// AVX2 and FMA must run here; as `weighted_row_sum_on`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn weighted_row_sum_avx2<const C: usize>(c: &[f64], n: usize, w: &[f64], o: &mut [f64]) {
    // SAFETY: the caller's contract.
    unsafe { weighted_row_sum_on::<_, C>(Avx2::new_unchecked(), c, n, w, o) }
}

/// `weighted_row_sum_on` with AVX-512F and FMA (n_out <= 8 C).
///
/// # Safety
/// AVX-512F and FMA must run here; as `weighted_row_sum_on`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn weighted_row_sum_avx512<const C: usize>(
    c: &[f64],
    n: usize,
    w: &[f64],
    o: &mut [f64],
) {
    // SAFETY: the caller's contract.
    unsafe { weighted_row_sum_on::<_, C>(Avx512::new_unchecked(), c, n, w, o) }
}

/// Lane offsets 0..8 as i64.
#[inline]
#[target_feature(enable = "avx512f")]
fn lane_offsets() -> __m512i {
    _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0)
}

/// The first index among lanes holding `value` in `vals` (their indices in `idx`).
#[inline]
#[target_feature(enable = "avx512f")]
fn first_index_of(vals: __m512d, idx: __m512i, value: f64) -> usize {
    let at = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(vals, _mm512_set1_pd(value));
    let masked = _mm512_mask_mov_epi64(_mm512_set1_epi64(i64::MAX), at, idx);
    _mm512_reduce_min_epi64(masked) as usize
}

/// `argmin_sq` in one pass: per lane the least square so far and its (first) index.
///
/// # Safety
/// The CPU must support AVX-512F; `values` holds at least 16.
#[target_feature(enable = "avx512f")]
pub unsafe fn argmin_sq_avx512(values: &[f64]) -> (usize, f64) {
    let n = values.len();
    let p = values.as_ptr();
    let inf = _mm512_set1_pd(f64::INFINITY);
    let (mut lo, mut idx) = (inf, _mm512_setzero_si512());
    let mut at = lane_offsets();
    let eight = _mm512_set1_epi64(8);
    let mut j = 0;
    // SAFETY: lanes below n only (the tail masked, filled with +inf).
    unsafe {
        while j < n {
            let m: __mmask8 = first_lanes(n - j);
            let v = _mm512_mask_loadu_pd(inf, m, p.add(j));
            let sq = _mm512_mul_pd(v, v);
            // Strictly less keeps each lane's first; ordered, so NaN never wins.
            let better = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(sq, lo);
            lo = _mm512_mask_mov_pd(lo, better, sq);
            idx = _mm512_mask_mov_epi64(idx, better, at);
            at = _mm512_add_epi64(at, eight);
            j += 8;
        }
    }
    let least = _mm512_reduce_min_pd(lo);
    if !least.is_finite() {
        // Only infinities or NaN: the scalar rule decides.
        return super::argmin_sq_portable(values).unwrap_or((0, f64::NAN));
    }
    (first_index_of(lo, idx, least), least)
}

/// The largest kappa[j], j != except, with sign * coef[j] > 0, and its first index (None
/// when there is none; NaN never wins).
///
/// # Safety
/// The CPU must support AVX-512F; `coef` and `kappa` have the same length.
#[target_feature(enable = "avx512f")]
pub unsafe fn argmax_same_sign_avx512(
    coef: &[f64],
    kappa: &[f64],
    sign: f64,
    except: usize,
) -> Option<usize> {
    let n = coef.len();
    let (pc, pk) = (coef.as_ptr(), kappa.as_ptr());
    let vsign = _mm512_set1_pd(sign);
    let lowest = _mm512_set1_pd(f64::NEG_INFINITY);
    // Per lane: the largest eligible kappa so far, its index, whether one was found.
    struct Lanes {
        most: __m512d,
        idx: __m512i,
        found: __mmask8,
    }
    #[inline(always)]
    fn update(l: &mut Lanes, k: __m512d, c: __m512d, vsign: __m512d, at: __m512i, drop: __mmask8) {
        // SAFETY: register-only intrinsics; AVX-512F is enabled in the caller.
        unsafe {
            let same =
                _mm512_cmp_pd_mask::<_CMP_GT_OQ>(_mm512_mul_pd(c, vsign), _mm512_setzero_pd())
                    & !drop;
            // Strictly greater keeps each lane's first; ordered, so NaN never wins. A lane
            // that has not found one takes any eligible value, -inf included.
            let greater = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(k, l.most) | (same & !l.found);
            let take = same & greater & _mm512_cmp_pd_mask::<_CMP_ORD_Q>(k, k);
            l.most = _mm512_mask_mov_pd(l.most, take, k);
            l.idx = _mm512_mask_mov_epi64(l.idx, take, at);
            l.found |= take;
        }
    }
    let start = || Lanes {
        most: lowest,
        idx: _mm512_setzero_si512(),
        found: 0,
    };
    // Two independent accumulators (even and odd chunks) halve the dependency chain.
    let (mut even, mut odd) = (start(), start());
    let drop_at = |j: usize| -> __mmask8 {
        if (j..j + 8).contains(&except) {
            1u8 << (except - j)
        } else {
            0
        }
    };
    let eight = _mm512_set1_epi64(8);
    let mut at = lane_offsets();
    let mut j = 0;
    // SAFETY: full chunks read lanes j..j+16 <= n.
    unsafe {
        while j + 16 <= n {
            let (k0, c0) = (_mm512_loadu_pd(pk.add(j)), _mm512_loadu_pd(pc.add(j)));
            let (k1, c1) = (
                _mm512_loadu_pd(pk.add(j + 8)),
                _mm512_loadu_pd(pc.add(j + 8)),
            );
            update(&mut even, k0, c0, vsign, at, drop_at(j));
            at = _mm512_add_epi64(at, eight);
            update(&mut odd, k1, c1, vsign, at, drop_at(j + 8));
            at = _mm512_add_epi64(at, eight);
            j += 16;
        }
    }
    while j < n {
        let m: __mmask8 = first_lanes(n - j);
        // SAFETY: lanes below n only.
        let (k, c) = unsafe {
            (
                _mm512_mask_loadu_pd(lowest, m, pk.add(j)),
                _mm512_maskz_loadu_pd(m, pc.add(j)),
            )
        };
        update(&mut even, k, c, vsign, at, drop_at(j) | !m);
        at = _mm512_add_epi64(at, eight);
        j += 8;
    }
    let most = [even.most, odd.most];
    let idx = [even.idx, odd.idx];
    let found = [even.found, odd.found];
    let mut best: Option<(f64, usize)> = None;
    for a in 0..2 {
        if found[a] == 0 {
            continue;
        }
        let value = _mm512_mask_reduce_max_pd(found[a], most[a]);
        let lanes = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(most[a], _mm512_set1_pd(value)) & found[a];
        let masked = _mm512_mask_mov_epi64(_mm512_set1_epi64(i64::MAX), lanes, idx[a]);
        let j = _mm512_reduce_min_epi64(masked) as usize;
        if best.is_none_or(|(v, i)| value > v || (value == v && j < i)) {
            best = Some((value, j));
        }
    }
    best.map(|(_, j)| j)
}

/// `scan_candidates` eight SVs at a time.
///
/// # Safety
/// The CPU must support AVX-512F; `coef` and `kappa` have the same length.
#[target_feature(enable = "avx512f")]
pub unsafe fn scan_candidates_avx512(
    coef: &[f64],
    kappa: &[f64],
    filter: CandidateFilter,
    mut visit: impl FnMut(usize) -> f64,
) {
    // In locals, the cut as the search raises it: the struct stays out of the loop.
    let CandidateFilter {
        sign,
        scale,
        mut cut,
    } = filter;
    let n = coef.len();
    let (pc, pk) = (coef.as_ptr(), kappa.as_ptr());
    let (vsign, vscale, zero) = (
        _mm512_set1_pd(sign),
        _mm512_set1_pd(scale),
        _mm512_setzero_pd(),
    );
    let mut vcut = _mm512_set1_pd(cut);
    let mut j0 = 0;
    while j0 + 8 <= n {
        // SAFETY: lanes j0..j0+8 are inside both slices.
        let (k, c) = unsafe { (_mm512_loadu_pd(pk.add(j0)), _mm512_loadu_pd(pc.add(j0))) };
        let near = _mm512_cmp_pd_mask::<_CMP_NLT_UQ>(_mm512_mul_pd(k, vscale), vcut);
        let same = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(_mm512_mul_pd(c, vsign), zero);
        let mut hits = near & same;
        while hits != 0 {
            let j = j0 + hits.trailing_zeros() as usize;
            hits &= hits - 1;
            // The cut may have risen since the vector was compared.
            if !(CandidateFilter { sign, scale, cut }).below_cut(kappa[j]) {
                cut = visit(j);
                vcut = _mm512_set1_pd(cut);
            }
        }
        j0 += 8;
    }
    super::scan_candidates_portable(coef, kappa, CandidateFilter { sign, scale, cut }, visit, j0);
}

/// `j_scan` eight candidates at a time: every lane keeps its own two smallest and best j (the
/// portable loop's rules), merged at the end by place; the places past the last whole vector go
/// through the portable loop from that state. No early outs: each lane divides, which costs
/// less than the portable loop's branches.
///
/// # Safety
/// The CPU must support AVX-512F; `v` and `input.t` have the same length; the positions lie
/// within `input.diag`, the labels and, from `input.j0`, the rows.
#[target_feature(enable = "avx512f")]
pub unsafe fn j_scan_avx512<T: RowValue>(v: &mut [f64], input: &JScanInput<'_, T>) -> JScan {
    let n = v.len();
    let whole = n - n % 8;
    let JScanInput {
        t,
        diag,
        equal_diag,
        j0,
        i,
        vi,
        row_i,
        update,
        label,
        tau,
    } = *input;
    let k_ii = diag[i];
    let (pv, pt) = (v.as_mut_ptr(), t.as_ptr());
    // The rows and the diagonal from j0: the gathers' offsets are below a row block.
    let diag_j0 = diag[j0..].as_ptr();
    let (vk_ii, vvi, two, vtau, zero) = (
        _mm512_set1_pd(k_ii),
        _mm512_set1_pd(vi),
        _mm512_set1_pd(2.0),
        _mm512_set1_pd(tau),
        _mm512_setzero_pd(),
    );
    let inf = _mm512_set1_pd(f64::INFINITY);
    let sign = _mm512_set1_epi64(i64::MIN);
    let vj0 = _mm512_set1_epi32(j0 as i32);
    // i's offset, or one no position has.
    let i_off = _mm512_set1_epi32(i.checked_sub(j0).map_or(-1, |o| o as i32));
    // With a sum per label: the labels from j0 and i's.
    let label = label.map(|(y, yi)| (y[j0..].as_ptr(), _mm512_set1_pd(yi)));
    let (mut first_v, mut second_v, mut best_obj) = (inf, inf, inf);
    let (mut first_k, mut best_k) = (_mm512_set1_epi64(-1), _mm512_set1_epi64(-1));
    let mut places = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    let eight = _mm512_set1_epi64(8);
    let mut k = 0;
    while k < whole {
        // SAFETY (the loads, gathers and store): places k..k+8 lie in v and t; offsets within
        // the rows and diag from j0 (the caller's contract).
        let off = unsafe {
            _mm512_sub_epi32(
                _mm512_castsi256_si512(_mm256_loadu_si256(pt.add(k).cast())),
                vj0,
            )
        };
        let off8 = _mm512_castsi512_si256(off);
        let mut vv = unsafe { _mm512_loadu_pd(pv.add(k)) };
        // Eight positions within 32 (16 for f64) of the first are read by one or two plain
        // loads and a permute: AMD's gathers cost several times a load per lane, and I_low is
        // mostly dense or nearly so. Positions increase, so the last is the farthest.
        let span = (t[k + 7] - t[k]) as usize;
        let first_off = t[k] as usize - j0;
        // The offsets from the first, and the near loads' masks: first_off..=first_off + span,
        // all inside the rows.
        let rel = || _mm512_sub_epi32(off, _mm512_set1_epi32(first_off as i32));
        let near_mask = || !0u32 >> (31 - span.min(31));
        let at = Near512 {
            first_off,
            span,
            off,
            rel: rel(),
        };
        // SAFETY: offsets within the rows (the caller's contract), lanes outside the masks not
        // read.
        let row_lanes = |row: &[T], mask: __mmask8| unsafe { T::lanes_512(row, &at, mask) };
        // SAFETY: as `row_lanes`, for a per-position array of f64 from j0.
        let f64_lanes = |from_j0: *const f64, mask: __mmask8| -> __m512d {
            unsafe {
                let p = from_j0.add(first_off);
                if span == 7 {
                    _mm512_maskz_loadu_pd(mask, p)
                } else if span < 16 {
                    let m = near_mask();
                    let lo = _mm512_maskz_loadu_pd(m as __mmask8, p);
                    let hi = _mm512_maskz_loadu_pd((m >> 8) as __mmask8, p.add(8));
                    let rel64 = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(rel()));
                    _mm512_permutex2var_pd(lo, rel64, hi)
                } else {
                    _mm512_mask_i32gather_pd::<8>(zero, mask, off8, from_j0)
                }
            }
        };
        if let Some((ri, rj, step)) = update {
            let d = _mm512_sub_pd(row_lanes(ri, 0xff), row_lanes(rj, 0xff));
            vv = _mm512_sub_pd(vv, _mm512_mul_pd(d, _mm512_set1_pd(step)));
            unsafe { _mm512_storeu_pd(pv.add(k), vv) };
        }
        // The candidates that count: all, or those of i's label.
        let counted: __mmask8 = match label {
            None => 0xff,
            Some((y, yi)) => _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(f64_lanes(y, 0xff), yi),
        };
        // The two smallest, as `j_scan_portable` pushes them.
        let lt1 = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(counted, vv, first_v);
        let lt2 = _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(counted & !lt1, vv, second_v);
        second_v = _mm512_mask_blend_pd(lt1, _mm512_mask_blend_pd(lt2, second_v, vv), first_v);
        first_v = _mm512_mask_blend_pd(lt1, first_v, vv);
        first_k = _mm512_mask_blend_epi64(lt1, first_k, places);
        // The j candidates: b > 0 and not i.
        let b = _mm512_sub_pd(vvi, vv);
        let not_i = (_mm512_cmpneq_epi32_mask(off, i_off) & 0xff) as __mmask8 & counted;
        let cand = _mm512_mask_cmp_pd_mask::<_CMP_GT_OQ>(not_i, b, zero);
        if cand != 0 {
            let k_tt = if equal_diag {
                vk_ii
            } else {
                f64_lanes(diag_j0, cand)
            };
            let k_it = row_lanes(row_i, cand);
            let a = _mm512_sub_pd(_mm512_add_pd(vk_ii, k_tt), _mm512_mul_pd(two, k_it));
            let a = _mm512_mask_blend_pd(_mm512_cmp_pd_mask::<_CMP_GT_OQ>(a, zero), vtau, a);
            let b2 = _mm512_mul_pd(b, b);
            // Every lane divides: a test against the lane's best first (the portable loop's)
            // would chain each vector to the last through that best, which costs more.
            let neg_b2 = _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(b2), sign));
            let obj = _mm512_div_pd(neg_b2, a);
            let better = _mm512_mask_cmp_pd_mask::<_CMP_LE_OQ>(cand, obj, best_obj);
            best_obj = _mm512_mask_blend_pd(better, best_obj, obj);
            best_k = _mm512_mask_blend_epi64(better, best_k, places);
        }
        places = _mm512_add_epi64(places, eight);
        k += 8;
    }
    let mut out = JScan::default();
    if whole > 0 {
        let (mut fv, mut sv, mut bo) = ([0.0f64; 8], [0.0f64; 8], [0.0f64; 8]);
        let (mut fk, mut bk) = ([0i64; 8], [0i64; 8]);
        // SAFETY: eight lanes each.
        unsafe {
            _mm512_storeu_pd(fv.as_mut_ptr(), first_v);
            _mm512_storeu_pd(sv.as_mut_ptr(), second_v);
            _mm512_storeu_pd(bo.as_mut_ptr(), best_obj);
            _mm512_storeu_si512(fk.as_mut_ptr().cast(), first_k);
            _mm512_storeu_si512(bk.as_mut_ptr().cast(), best_k);
        }
        out = merged_j_lanes(&fv, &fk, &sv, &bo, &bk, v, input);
    }
    super::j_scan_portable(v, input, whole, out)
}

/// The lanes' two smallest and best j of a vector `j_scan` merged into one result: the first is
/// the least value (the earliest place of equal ones), the second the least of the lanes'
/// seconds and the other lanes' firsts, the best j the least objective (the latest place of
/// equal ones) with its b and a again from its place by the same operations. A lane's place
/// is negative where it found none.
fn merged_j_lanes<T: RowValue>(
    fv: &[f64],
    fk: &[i64],
    sv: &[f64],
    bo: &[f64],
    bk: &[i64],
    v: &[f64],
    input: &JScanInput<'_, T>,
) -> JScan {
    let mut out = JScan::default();
    let mut at = usize::MAX;
    for l in 0..fv.len() {
        if fk[l] >= 0 && (at == usize::MAX || fv[l] < fv[at] || (fv[l] == fv[at] && fk[l] < fk[at]))
        {
            at = l;
        }
    }
    let mut second = sv.iter().copied().fold(f64::INFINITY, f64::min);
    for l in 0..fv.len() {
        if l != at && fk[l] >= 0 {
            second = second.min(fv[l]);
        }
    }
    if at != usize::MAX {
        out.first = (fv[at], fk[at] as usize);
    }
    out.second = second;
    let mut win = usize::MAX;
    for l in 0..bo.len() {
        if bk[l] >= 0
            && (win == usize::MAX || bo[l] < bo[win] || (bo[l] == bo[win] && bk[l] > bk[win]))
        {
            win = l;
        }
    }
    if win != usize::MAX {
        let place = bk[win] as usize;
        let tp = input.t[place] as usize;
        let b = input.vi - v[place];
        let a = pair_curvature(
            input.diag[input.i],
            input.diag[tp],
            input.row_i[tp - input.j0],
            input.tau,
        );
        out.best = (bo[win], place, b, a);
    }
    out
}

/// `and_popcounts` with the POPCNT instruction.
///
/// # Safety
/// The CPU must support POPCNT; the lengths as `and_popcounts` checks them.
#[target_feature(enable = "popcnt")]
pub unsafe fn and_popcounts_popcnt(a: &[u64], rows: &[u64], out: &mut [f64]) {
    super::and_popcounts_by_width(a, rows, out)
}

/// `j_scan` four candidates at a time (`j_scan_avx512`'s lanes and rules with AVX2 vectors;
/// every offset of a whole vector is read, so no gather needs a mask). Unlike AVX-512 it divides
/// only where the portable loop's product test lets a lane reach its best: AVX2's division is
/// slow enough that the test pays (`cargo bench --bench j_scan`).
///
/// # Safety
/// The CPU must support AVX2; the contract of `j_scan_avx512`.
#[target_feature(enable = "avx2")]
pub unsafe fn j_scan_avx2<T: RowValue>(v: &mut [f64], input: &JScanInput<'_, T>) -> JScan {
    let n = v.len();
    let whole = n - n % 4;
    let JScanInput {
        t,
        diag,
        equal_diag,
        j0,
        i,
        vi,
        row_i,
        update,
        label,
        tau,
    } = *input;
    let (pv, pt) = (v.as_mut_ptr(), t.as_ptr());
    let diag_j0 = diag[j0..].as_ptr();
    let (vk_ii, vvi, two, vtau, zero) = (
        _mm256_set1_pd(diag[i]),
        _mm256_set1_pd(vi),
        _mm256_set1_pd(2.0),
        _mm256_set1_pd(tau),
        _mm256_setzero_pd(),
    );
    let inf = _mm256_set1_pd(f64::INFINITY);
    let near_one = _mm256_set1_pd(1.0 - 1e-12);
    let lane_index = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    let sign = _mm256_set1_pd(-0.0);
    let all = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    let vj0 = _mm_set1_epi32(j0 as i32);
    let i_off = _mm_set1_epi32(i.checked_sub(j0).map_or(-1, |o| o as i32));
    let label = label.map(|(y, yi)| (y[j0..].as_ptr(), _mm256_set1_pd(yi)));
    let (mut first_v, mut second_v, mut best_obj) = (inf, inf, inf);
    let (mut first_k, mut best_k) = (_mm256_set1_epi64x(-1), _mm256_set1_epi64x(-1));
    let mut places = _mm256_set_epi64x(3, 2, 1, 0);
    let four = _mm256_set1_epi64x(4);
    let mut k = 0;
    while k < whole {
        // SAFETY (the loads, gathers and store): places k..k+4 lie in v and t; offsets within
        // the rows, diag and labels from j0 (the caller's contract).
        let off = unsafe { _mm_sub_epi32(_mm_loadu_si128(pt.add(k).cast()), vj0) };
        let span = (t[k + 3] - t[k]) as usize;
        let dense = span == 3;
        let first_off = t[k] as usize - j0;
        // Four positions within 8 of the first: one masked load (first_off..=first_off + span,
        // inside the rows) and a permute instead of a gather.
        let near = _mm256_cmpgt_epi32(_mm256_set1_epi32(span as i32 + 1), lane_index);
        let rel = _mm256_castsi128_si256(_mm_sub_epi32(off, _mm_set1_epi32(first_off as i32)));
        let at = Near256 {
            first_off,
            span,
            near,
            rel,
            off,
        };
        // SAFETY: offsets within the rows, lanes outside `near` not read.
        let row_lanes = |row: &[T]| unsafe { T::lanes_256(row, &at) };
        let mut vv = unsafe { _mm256_loadu_pd(pv.add(k)) };
        if let Some((ri, rj, step)) = update {
            let d = _mm256_sub_pd(row_lanes(ri), row_lanes(rj));
            vv = _mm256_sub_pd(vv, _mm256_mul_pd(d, _mm256_set1_pd(step)));
            unsafe { _mm256_storeu_pd(pv.add(k), vv) };
        }
        let counted = match label {
            None => all,
            Some((y, yi)) => {
                let yt = unsafe {
                    if dense {
                        _mm256_loadu_pd(y.add(first_off))
                    } else {
                        _mm256_i32gather_pd::<8>(y, off)
                    }
                };
                _mm256_cmp_pd::<_CMP_EQ_OQ>(yt, yi)
            }
        };
        let lt1 = _mm256_and_pd(counted, _mm256_cmp_pd::<_CMP_LT_OQ>(vv, first_v));
        let lt2 = _mm256_andnot_pd(
            lt1,
            _mm256_and_pd(counted, _mm256_cmp_pd::<_CMP_LT_OQ>(vv, second_v)),
        );
        second_v = _mm256_blendv_pd(_mm256_blendv_pd(second_v, vv, lt2), first_v, lt1);
        first_v = _mm256_blendv_pd(first_v, vv, lt1);
        first_k = _mm256_blendv_epi8(first_k, places, _mm256_castpd_si256(lt1));
        let b = _mm256_sub_pd(vvi, vv);
        let is_i = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpeq_epi32(off, i_off)));
        let cand = _mm256_andnot_pd(
            is_i,
            _mm256_and_pd(counted, _mm256_cmp_pd::<_CMP_GT_OQ>(b, zero)),
        );
        if _mm256_movemask_pd(cand) != 0 {
            let k_tt = if equal_diag {
                vk_ii
            } else {
                unsafe {
                    if dense {
                        _mm256_loadu_pd(diag_j0.add(first_off))
                    } else {
                        _mm256_i32gather_pd::<8>(diag_j0, off)
                    }
                }
            };
            let a = _mm256_sub_pd(
                _mm256_add_pd(vk_ii, k_tt),
                _mm256_mul_pd(two, row_lanes(row_i)),
            );
            let a = _mm256_blendv_pd(vtau, a, _mm256_cmp_pd::<_CMP_GT_OQ>(a, zero));
            let b2 = _mm256_mul_pd(b, b);
            // The portable loop's product test against the lane's best (as the AVX-512 scan).
            let reach = _mm256_mul_pd(_mm256_mul_pd(_mm256_xor_pd(best_obj, sign), a), near_one);
            let may = _mm256_and_pd(cand, _mm256_cmp_pd::<_CMP_NLT_UQ>(b2, reach));
            if _mm256_movemask_pd(may) != 0 {
                let obj = _mm256_div_pd(_mm256_xor_pd(b2, sign), a);
                let better = _mm256_and_pd(may, _mm256_cmp_pd::<_CMP_LE_OQ>(obj, best_obj));
                best_obj = _mm256_blendv_pd(best_obj, obj, better);
                best_k = _mm256_blendv_epi8(best_k, places, _mm256_castpd_si256(better));
            }
        }
        places = _mm256_add_epi64(places, four);
        k += 4;
    }
    let mut out = JScan::default();
    if whole > 0 {
        let (mut fv, mut sv, mut bo) = ([0.0f64; 4], [0.0f64; 4], [0.0f64; 4]);
        let (mut fk, mut bk) = ([0i64; 4], [0i64; 4]);
        // SAFETY: four lanes each.
        unsafe {
            _mm256_storeu_pd(fv.as_mut_ptr(), first_v);
            _mm256_storeu_pd(sv.as_mut_ptr(), second_v);
            _mm256_storeu_pd(bo.as_mut_ptr(), best_obj);
            _mm256_storeu_si256(fk.as_mut_ptr().cast(), first_k);
            _mm256_storeu_si256(bk.as_mut_ptr().cast(), best_k);
        }
        out = merged_j_lanes(&fv, &fk, &sv, &bo, &bk, v, input);
    }
    super::j_scan_portable(v, input, whole, out)
}

/// Where a vector `j_scan` of AVX-512 reads its eight candidates' entries of a kernel row
/// (`ScanLanes::lanes_512`): the first candidate's offset from the run's first position, the
/// span from it to the last (positions increase), the offsets from the run's first position
/// (`off`, eight i32 lanes) and from the first candidate (`rel`).
pub struct Near512 {
    first_off: usize,
    span: usize,
    off: __m512i,
    rel: __m512i,
}

/// `Near512` for AVX2's four candidates: also the lanes within the span (`near`, i32 lanes) and
/// the offsets as four i32 (`off`).
pub struct Near256 {
    first_off: usize,
    span: usize,
    near: __m256i,
    rel: __m256i,
    off: __m128i,
}

/// A kernel row's element type as `j_scan` reads it on the vector levels: the candidates'
/// entries, widened to f64 (`RowValue`: f32 or f64 rows, one scan compiled for each). Near
/// candidates are read by plain loads and a permute, far ones gathered.
pub trait ScanLanes: Sized {
    /// The eight candidates' entries of `row` (from the run's first position on); lanes
    /// outside `mask` read as 0 where gathered.
    ///
    /// # Safety
    /// AVX-512F must run here; the offsets lie within `row`.
    unsafe fn lanes_512(row: &[Self], at: &Near512, mask: __mmask8) -> __m512d;

    /// The four candidates' entries of `row`.
    ///
    /// # Safety
    /// AVX2 must run here; the offsets lie within `row`.
    unsafe fn lanes_256(row: &[Self], at: &Near256) -> __m256d;
}

impl ScanLanes for f32 {
    #[inline(always)]
    unsafe fn lanes_512(row: &[f32], at: &Near512, mask: __mmask8) -> __m512d {
        // SAFETY: the caller's contract; lanes outside the masks are not read.
        unsafe {
            let p = row.as_ptr().add(at.first_off);
            _mm512_cvtps_pd(_mm512_castps512_ps256(if at.span == 7 {
                _mm512_maskz_loadu_ps(__mmask16::from(mask), p)
            } else if at.span < 32 {
                let m = !0u32 >> (31 - at.span.min(31));
                let lo = _mm512_maskz_loadu_ps(m as __mmask16, p);
                let hi = _mm512_maskz_loadu_ps((m >> 16) as __mmask16, p.add(16));
                _mm512_permutex2var_ps(lo, at.rel, hi)
            } else {
                _mm512_mask_i32gather_ps::<4>(
                    _mm512_setzero_ps(),
                    __mmask16::from(mask),
                    at.off,
                    row.as_ptr(),
                )
            }))
        }
    }

    #[inline(always)]
    unsafe fn lanes_256(row: &[f32], at: &Near256) -> __m256d {
        // SAFETY: the caller's contract; lanes outside `near` are not read.
        unsafe {
            let p = row.as_ptr().add(at.first_off);
            _mm256_cvtps_pd(if at.span == 3 {
                _mm_loadu_ps(p)
            } else if at.span < 8 {
                _mm256_castps256_ps128(_mm256_permutevar8x32_ps(
                    _mm256_maskload_ps(p, at.near),
                    at.rel,
                ))
            } else {
                _mm_i32gather_ps::<4>(row.as_ptr(), at.off)
            })
        }
    }
}

impl ScanLanes for f64 {
    #[inline(always)]
    unsafe fn lanes_512(row: &[f64], at: &Near512, mask: __mmask8) -> __m512d {
        // SAFETY: the caller's contract; lanes outside the masks are not read.
        unsafe {
            let p = row.as_ptr().add(at.first_off);
            if at.span == 7 {
                _mm512_maskz_loadu_pd(mask, p)
            } else if at.span < 16 {
                let m = !0u32 >> (31 - at.span.min(31));
                let lo = _mm512_maskz_loadu_pd(m as __mmask8, p);
                let hi = _mm512_maskz_loadu_pd((m >> 8) as __mmask8, p.add(8));
                let rel64 = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(at.rel));
                _mm512_permutex2var_pd(lo, rel64, hi)
            } else {
                let off8 = _mm512_castsi512_si256(at.off);
                _mm512_mask_i32gather_pd::<8>(_mm512_setzero_pd(), mask, off8, row.as_ptr())
            }
        }
    }

    #[inline(always)]
    unsafe fn lanes_256(row: &[f64], at: &Near256) -> __m256d {
        // SAFETY: the caller's contract.
        unsafe {
            if at.span == 3 {
                _mm256_loadu_pd(row.as_ptr().add(at.first_off))
            } else {
                _mm256_i32gather_pd::<8>(row.as_ptr(), at.off)
            }
        }
    }
}
