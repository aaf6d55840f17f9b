//! The exponential and kernel values from dot products on the vector levels: each the scalar
//! code of `../exp.rs` (`exp_nonpositive::<true>` and the kernels from one dot) operation for
//! operation on every lane.

use super::{levels, Simd};
use crate::core::simd::exp::{
    rbf_from_dot, rbf_from_dot_single, sigmoid_from_dot, EXP_MIN_ARG, EXP_MIN_ARG_SINGLE, INV_FACT,
    INV_FACT_SINGLE, LN2_HI, LN2_HI_SINGLE, LN2_LO, LN2_LO_SINGLE, LOG2E, LOG2E_SINGLE, SHIFTER,
    SHIFTER_SINGLE, SINGLE_DEGREE,
};

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
pub(super) fn rbf<S: Simd>(s: S, dot: S::F, sv_norm: S::F, x_norm: S::F, neg_gamma: S::F) -> S::F {
    exp(s, rbf_argument(s, dot, sv_norm, x_norm, neg_gamma))
}

/// `exp_nonpositive_single::<true>` on every lane (2 `LANES` floats), operation for operation.
#[inline(always)]
fn exp_single<S: Simd>(s: S, x: S::Fs) -> S::Fs {
    let min = s.splat_ps(EXP_MIN_ARG_SINGLE);
    let underflow = s.lt_ps(x, min);
    let x = s.select_ps(underflow, min, x);
    let shifter = s.splat_ps(SHIFTER_SINGLE);
    let shifted = s.fmadd_ps(x, s.splat_ps(LOG2E_SINGLE), shifter);
    let n = s.sub_ps(shifted, shifter);
    let r = s.fnmadd_ps(n, s.splat_ps(LN2_HI_SINGLE), x);
    let r = s.fnmadd_ps(n, s.splat_ps(LN2_LO_SINGLE), r);
    let mut p = s.splat_ps(INV_FACT_SINGLE[SINGLE_DEGREE]);
    for k in (0..SINGLE_DEGREE).rev() {
        p = s.fmadd_ps(p, r, s.splat_ps(INV_FACT_SINGLE[k]));
    }
    let e = s.mul_ps(p, s.pow2_ps(shifted, shifter));
    s.select_ps(underflow, s.zero_ps(), e)
}

/// The Gaussian kernel's argument -gamma max(0, d^2) on every lane, in f64 (`rbf`'s, and
/// `rbf_from_dot_single::<true>`'s before its rounding to f32).
#[inline(always)]
fn rbf_argument<S: Simd>(s: S, dot: S::F, sv_norm: S::F, x_norm: S::F, neg_gamma: S::F) -> S::F {
    // (x_norm + sv_norm) - 2 dot rounds once either way: 2 dot is exact.
    let d2 = s.fnmadd(s.splat(2.0), dot, s.add(x_norm, sv_norm));
    // max returns its second operand when one is NaN: a NaN distance stays NaN.
    s.mul(neg_gamma, s.max(s.zero(), d2))
}

/// `rbf_from_dots_f32`: two vectors of arguments in f64 make one of floats for the
/// exponential; the rest in the scalar fused code (the same values).
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
    let w = S::LANES;
    let (neg_gamma, xn) = (s.splat(-gamma), s.splat(x_norm));
    let (pn, pd, po) = (norms.as_ptr(), dots.as_ptr(), out.as_mut_ptr());
    let mut j = 0;
    // SAFETY: lanes j..j + 2 LANES <= n of the three slices.
    unsafe {
        while j + 2 * w <= n {
            let lo = rbf_argument(s, s.load(pd.add(j)), s.load(pn.add(j)), xn, neg_gamma);
            let hi = rbf_argument(
                s,
                s.load(pd.add(j + w)),
                s.load(pn.add(j + w)),
                xn,
                neg_gamma,
            );
            s.store_ps(po.add(j), exp_single(s, s.narrow(lo, hi)));
            j += 2 * w;
        }
    }
    for k in j..n {
        out[k] = rbf_from_dot_single::<true>(gamma, x_norm, norms[k], dots[k]);
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
        rbf_from_dot::<true>(self.gamma, self.x_norm, self.norms[j], dot)
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
        sigmoid_from_dot::<true>(self.gamma, self.coef0, dot)
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
}
