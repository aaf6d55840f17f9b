//! The AVX2+FMA and AVX-512F+FMA paths of the kernel loops, one file per operation as the
//! portable ones (`../mod.rs` says which does what). Here what they share: [`Simd`], the vector
//! instruction set the loops are written over; the tokens [`Avx2`] and [`Avx512`] (a value exists
//! only where the CPU runs the level) and [`Vector`], the one a call runs; `levels!`, which
//! makes each loop's entry points; and how `j_scan` reads a kernel row ([`ScanLanes`]).
//!
//! Each loop is written once, generic over [`Simd`], and `levels!` compiles it once per level
//! inside a `#[target_feature]` entry point, where the `#[inline(always)]` methods of `Simd`
//! inline and their intrinsics with them: the machine code of a hand-written copy per level,
//! from one definition. The same macro writes the one match that picks the level. The loops that
//! only AVX-512 has (its mask registers are what make them pay) are plain `#[target_feature]`
//! functions.

use super::{half::F16, Level};
use std::arch::x86_64::*;

pub mod dots;
pub mod exp;
pub mod half;
pub mod j_scan;
pub mod rows;
pub mod scans;
pub mod tiles;

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
        /// The lanes of a vector of floats where a comparison holds.
        CmpS = __m256, __mmask16;
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
        /// c - a * b in f32, rounded once.
        fn fnmadd_ps(a: Self::Fs, b: Self::Fs, c: Self::Fs) -> Self::Fs
            = _mm256_fnmadd_ps(a, b, c), _mm512_fnmadd_ps(a, b, c);
        fn sub_ps(a: Self::Fs, b: Self::Fs) -> Self::Fs = _mm256_sub_ps(a, b), _mm512_sub_ps(a, b);
        fn mul_ps(a: Self::Fs, b: Self::Fs) -> Self::Fs = _mm256_mul_ps(a, b), _mm512_mul_ps(a, b);
        /// a < b in f32, false where either is NaN.
        fn lt_ps(a: Self::Fs, b: Self::Fs) -> Self::CmpS
            = _mm256_cmp_ps::<_CMP_LT_OQ>(a, b), _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b);
        /// `yes` in the lanes of `m`, `no` elsewhere (f32).
        fn select_ps(m: Self::CmpS, yes: Self::Fs, no: Self::Fs) -> Self::Fs
            = _mm256_blendv_ps(no, yes, m), _mm512_mask_blend_ps(m, no, yes);
        /// The lanes of `lo` then of `hi`, each rounded to f32.
        fn narrow(lo: Self::F, hi: Self::F) -> Self::Fs
            = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)),
            _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(lo))),
                _mm256_castps_pd(_mm512_cvtpd_ps(hi)),
            ));
        /// 2^n in f32, where `shifted` = n + `shifter` with n an integer in its low mantissa
        /// bits.
        fn pow2_ps(shifted: Self::Fs, shifter: Self::Fs) -> Self::Fs = {
            let n = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_castps_si256(shifter));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n, _mm256_set1_epi32(127))))
        }, {
            let n = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(shifter));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n, _mm512_set1_epi32(127))))
        };
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

/// For each loop written once (in the files of this folder), its AVX2 and AVX-512 entry points
/// (`#[target_feature]` functions, where the generic code inlines with its intrinsics) and
/// `name(vector, ...)`, the match that runs the one of a [`Vector`].
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
            unsafe { $body($crate::core::simd::x86::Avx2::new_unchecked(), $($arg),*) }
        }

        #[doc = concat!("`", stringify!($body), "` with AVX-512F and FMA.")]
        ///
        /// # Safety
        /// AVX-512F and FMA must run here; the arguments meet the body's contract.
        #[target_feature(enable = "avx512f,fma,f16c")]
        pub unsafe fn $avx512 $(<$g: $bound>)? ($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: the caller's contract.
            unsafe { $body($crate::core::simd::x86::Avx512::new_unchecked(), $($arg),*) }
        }

        $(#[doc = $doc])*
        ///
        /// # Safety
        /// The arguments meet the body's contract (the level is proven by `level`).
        #[inline]
        pub unsafe fn $name $(<$g: $bound>)? (
            level: $crate::core::simd::x86::Vector,
            $($arg: $ty),*
        ) $(-> $ret)? {
            // SAFETY: the token proves the level; the rest is the caller's contract.
            unsafe {
                match level {
                    $crate::core::simd::x86::Vector::Avx2(_) => $avx2($($arg),*),
                    $crate::core::simd::x86::Vector::Avx512(_) => $avx512($($arg),*),
                }
            }
        }
    )*};
}
// The files of this folder take the macro by path (`use super::levels`).
use levels;

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

/// Every vector level this CPU runs, with its token for the entry points (for the tests).
#[cfg(test)]
pub fn vector_levels() -> Vec<Vector> {
    super::levels_here()
        .into_iter()
        .filter_map(Vector::at_most)
        .collect()
}
