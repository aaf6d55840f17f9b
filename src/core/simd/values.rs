//! The element types the loops read: `ColumnValue` (f64, f32 or halves, widened to f64) and
//! `RowValue` (the exact solvers' kernel rows, f32 or f64).

use super::half::F16;
#[cfg(target_arch = "x86_64")]
use super::x86::{ScanLanes, Simd};

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
