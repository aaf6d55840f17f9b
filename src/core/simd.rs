//! Dot product and axpy, the two loops every kernel evaluation runs through.
//!
//! The wheel must run on any x86-64, so AVX2+FMA is reached by runtime feature detection (checked
//! once, cached) instead of `-C target-cpu=native`. Elsewhere the portable loops use several
//! independent accumulators so the compiler can keep SIMD registers busy without reassociating.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::sync::atomic::{AtomicU8, Ordering};

    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    static HAS_AVX2_FMA: AtomicU8 = AtomicU8::new(UNKNOWN);

    #[inline]
    pub fn has_avx2_fma() -> bool {
        match HAS_AVX2_FMA.load(Ordering::Relaxed) {
            YES => true,
            NO => false,
            _ => {
                let yes = std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::env::var_os("BUDGETSVM_NO_SIMD").is_none();
                HAS_AVX2_FMA.store(if yes { YES } else { NO }, Ordering::Relaxed);
                yes
            }
        }
    }

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
                acc0 =
                    _mm256_fmadd_pd(_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pb.add(i)), acc0);
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
                acc0 =
                    _mm256_fmadd_pd(_mm256_loadu_pd(pa.add(i)), _mm256_loadu_pd(pb.add(i)), acc0);
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

    /// y += alpha * x.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy_avx2(alpha: f64, x: &[f64], y: &mut [f64]) {
        let n = x.len().min(y.len());
        let (px, py) = (x.as_ptr(), y.as_mut_ptr());
        let va = _mm256_set1_pd(alpha);
        let mut i = 0;
        // SAFETY: lanes i..i+8 (or i..i+4) are in bounds of both slices.
        unsafe {
            while i + 8 <= n {
                let y0 =
                    _mm256_fmadd_pd(va, _mm256_loadu_pd(px.add(i)), _mm256_loadu_pd(py.add(i)));
                let y1 = _mm256_fmadd_pd(
                    va,
                    _mm256_loadu_pd(px.add(i + 4)),
                    _mm256_loadu_pd(py.add(i + 4)),
                );
                _mm256_storeu_pd(py.add(i), y0);
                _mm256_storeu_pd(py.add(i + 4), y1);
                i += 8;
            }
            while i + 4 <= n {
                let y0 =
                    _mm256_fmadd_pd(va, _mm256_loadu_pd(px.add(i)), _mm256_loadu_pd(py.add(i)));
                _mm256_storeu_pd(py.add(i), y0);
                i += 4;
            }
        }
        while i < n {
            y[i] = alpha.mul_add(x[i], y[i]);
            i += 1;
        }
    }
}

/// exp(x) for x <= 0, branch-free so the compiler vectorises loops over it: Cody-Waite range
/// reduction x = n ln2 + r with |r| <= ln2/2, a degree-13 Taylor polynomial for exp(r) (remainder
/// below 5e-18), and 2^n assembled in the exponent bits. Relative error about 2 ulp; arguments
/// below -708 return 0 (exp there is subnormal or 0: an absolute error under 3e-308).
#[inline(always)]
fn exp_nonpositive<const FMA: bool>(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    // 1.5 * 2^52: adding it rounds to an integer held in the low mantissa bits.
    const SHIFTER: f64 = 6_755_399_441_055_744.0;
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
    #[inline(always)]
    fn fma<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
        if FMA {
            a.mul_add(b, c)
        } else {
            a * b + c
        }
    }
    let underflow = x < -708.0;
    let x = if underflow { -708.0 } else { x };
    let shifted = fma::<FMA>(x, LOG2E, SHIFTER);
    let n = shifted - SHIFTER;
    let r = fma::<FMA>(-n, LN2_LO, fma::<FMA>(-n, LN2_HI, x));
    let mut p = INV_FACT[13];
    let mut k = 12;
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

#[inline(always)]
fn rbf_from_dots_body<const FMA: bool>(
    gamma: f64,
    sq_norm: f64,
    sv_sq_norms: &[f64],
    dots: &mut [f64],
) {
    for (d, &n) in dots.iter_mut().zip(sv_sq_norms) {
        let d2 = sq_norm + n - 2.0 * *d;
        // Clamp rounding below 0, but keep NaN (overflowing norms) visible to the caller.
        let d2 = if d2 < 0.0 { 0.0 } else { d2 };
        *d = exp_nonpositive::<FMA>(-gamma * d2);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rbf_from_dots_avx2(gamma: f64, sq_norm: f64, sv_sq_norms: &[f64], dots: &mut [f64]) {
    rbf_from_dots_body::<true>(gamma, sq_norm, sv_sq_norms, dots)
}

/// Turns dot products with a point of squared norm `sq_norm` into Gaussian kernel values in
/// place: dots[j] <- exp(-gamma max(0, sq_norm + sv_sq_norms[j] - 2 dots[j])). This is the one
/// place kernel values are computed; its exp is vectorised (see `exp_nonpositive`). A NaN
/// distance (squared norms that overflowed) gives NaN, never a silent 1.
#[inline]
pub fn rbf_from_dots(gamma: f64, sq_norm: f64, sv_sq_norms: &[f64], dots: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::has_avx2_fma() {
            // SAFETY: the CPU features were checked at run time.
            unsafe { rbf_from_dots_avx2(gamma, sq_norm, sv_sq_norms, dots) };
            return;
        }
    }
    rbf_from_dots_body::<false>(gamma, sq_norm, sv_sq_norms, dots)
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
    {
        if x86::has_avx2_fma() {
            // SAFETY: the CPU features were checked at run time.
            return unsafe { x86::dot_avx2(a, b) };
        }
    }
    dot_portable(a, b)
}

/// y[i] += alpha * x[i] over the common length.
#[inline]
pub fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::has_avx2_fma() {
            // SAFETY: the CPU features were checked at run time.
            unsafe { x86::axpy_avx2(alpha, x, y) };
            return;
        }
    }
    axpy_portable(alpha, x, y)
}

/// Whether the fused multiply-add paths run on this CPU (AVX2 and FMA detected at run time).
#[inline]
pub fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::has_avx2_fma()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Which code path `dot`/`axpy` take on this machine (reported by benchmarks).
pub fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::has_avx2_fma() {
            return "avx2+fma";
        }
    }
    "portable"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::rng::Rng;

    #[test]
    fn fast_exp_matches_std_exp() {
        let mut rng = Rng::new(2);
        let mut worst = 0.0f64;
        for k in 0..200_000 {
            let x = if k < 1000 {
                -(k as f64) * 0.708
            } else {
                -708.0 * rng.next_f64().powi(3)
            };
            let exact = x.exp();
            if x < -708.0 {
                continue;
            }
            for got in [exp_nonpositive::<true>(x), exp_nonpositive::<false>(x)] {
                worst = worst.max((got - exact).abs() / exact);
            }
        }
        assert!(worst < 1e-15, "worst relative error {worst}");
        assert_eq!(exp_nonpositive::<false>(0.0), 1.0);
        assert_eq!(exp_nonpositive::<false>(-1e6), 0.0);
        assert_eq!(exp_nonpositive::<true>(f64::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive::<true>(f64::NAN).is_nan());
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
}
