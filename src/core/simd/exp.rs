//! The exponential every kernel value goes through, and kernel values from dot products: the
//! scalar code that each vector path (`x86/exp.rs`) repeats operation for operation, and the
//! portable loops. `mod.rs` picks the level.

// exp(x) = 2^n exp(r), x = n ln2 + r (Cody-Waite: ln2 split in a high part exact in 32 bits and
// a low part), |r| <= ln2/2; exp(r) by its Taylor polynomial of degree 13 (remainder below
// 5e-18 relative); 2^n assembled in the exponent bits after rounding x log2(e) to an integer by
// adding 1.5 * 2^52. Relative error against f64::exp over [-708, 0]: at most 2.2e-16 measured
// (one ulp) on every level, held below 4.5e-16 by `fast_exp_matches_std_exp` over 200,000
// points of the whole range. Below -708, 0.
pub(super) const LOG2E: f64 = std::f64::consts::LOG2_E;
pub(super) const LN2_HI: f64 = 6.931_471_803_691_238e-1;
pub(super) const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
pub(super) const SHIFTER: f64 = 6_755_399_441_055_744.0;
pub(super) const EXP_MIN_ARG: f64 = -708.0;
pub(super) const INV_FACT: [f64; 14] = [
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

// The exponential of kernel values kept in f32 (the Hessian-free polish's), in f32 arithmetic:
// twice the lanes of f64 per instruction (1,000,000 hardmc rows in one-vs-one: these values
// 13.7% of the fit's CPU samples -> 8.9%, the degree-7 f64 exponential before). The distance
// and -gamma d^2 stay in f64 (d^2 from dot products cancels), and x = -gamma d^2 is rounded to
// f32 once: that moves e^x by at most |x| 2^-24 relative, which is at most max |x| e^x 2^-24 =
// 2.2e-8 absolute (at x = -1), a third of the f32 ulp of the values near 1 and about the
// rounding every kept value already has.
// Then the same scheme as the f64 exponential: x = n ln2 + r with ln 2 in two f32 parts,
// Taylor's polynomial of degree `SINGLE_DEGREE` in r, 2^n in the exponent bits (1.5 * 2^23
// added rounds x log2(e) to an integer). Below `EXP_MIN_ARG_SINGLE` 0 (e^-87.33 = 1.18e-38,
// where f32's normal numbers end: 2^n then stays a normal number).

/// The Taylor degree of the f32 exponential: the remainder (ln2 / 2)^8 / 8! < 5.3e-9 relative
/// lies under f32's half ulp (6e-8).
pub const SINGLE_DEGREE: usize = 7;
pub(super) const LOG2E_SINGLE: f32 = std::f32::consts::LOG2_E;
/// ln 2 in 9 bits (n ln2_hi is exact for |n| < 2^15, also without fused operations) and the
/// rest.
pub(super) const LN2_HI_SINGLE: f32 = 355.0 / 512.0;
pub(super) const LN2_LO_SINGLE: f32 = (std::f64::consts::LN_2 - 355.0 / 512.0) as f32;
pub(super) const SHIFTER_SINGLE: f32 = 12_582_912.0;
pub(super) const EXP_MIN_ARG_SINGLE: f32 = -87.33;
/// `INV_FACT`'s first terms rounded to f32.
pub(super) const INV_FACT_SINGLE: [f32; SINGLE_DEGREE + 1] = {
    let mut t = [0.0; SINGLE_DEGREE + 1];
    let mut k = 0;
    while k <= SINGLE_DEGREE {
        t[k] = INV_FACT[k] as f32;
        k += 1;
    }
    t
};

/// The exponential above for x <= 0 (see the constants); branch-free. With `FMA` every
/// multiply-add is fused, the exact sequence of the vector paths.
#[inline(always)]
pub(crate) fn exp_nonpositive<const FMA: bool>(x: f64) -> f64 {
    exp_nonpositive_of::<FMA, 13>(x)
}

/// `exp_nonpositive` with the Taylor polynomial of degree `DEGREE` (at most 13).
#[inline(always)]
fn exp_nonpositive_of<const FMA: bool, const DEGREE: usize>(x: f64) -> f64 {
    exp_scheme::<f64, FMA, DEGREE>(x)
}

/// A float type the exponential's scheme runs in: its constants (above) and its bits.
trait ExpFloat:
    Copy
    + PartialOrd
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Neg<Output = Self>
{
    const ZERO: Self;
    const LOG2E: Self;
    const LN2_HI: Self;
    const LN2_LO: Self;
    const SHIFTER: Self;
    const MIN_ARG: Self;
    fn inv_fact(k: usize) -> Self;
    /// a * b + c, rounded once with `FMA`.
    fn fma<const FMA: bool>(a: Self, b: Self, c: Self) -> Self;
    /// 2^n for `shifted` = n + SHIFTER (n in its low mantissa bits).
    fn pow2(shifted: Self) -> Self;
}

/// `ExpFloat` for a type from its constants and its exponent's bias and place.
macro_rules! exp_float {
    ($t:ty: $log2e:expr, $hi:expr, $lo:expr, $shifter:expr, $min:expr, $fact:expr, bias $bias:expr, at $at:expr) => {
        impl ExpFloat for $t {
            const ZERO: $t = 0.0;
            const LOG2E: $t = $log2e;
            const LN2_HI: $t = $hi;
            const LN2_LO: $t = $lo;
            const SHIFTER: $t = $shifter;
            const MIN_ARG: $t = $min;
            #[inline(always)]
            fn inv_fact(k: usize) -> $t {
                $fact[k]
            }
            #[inline(always)]
            fn fma<const FMA: bool>(a: $t, b: $t, c: $t) -> $t {
                if FMA {
                    a.mul_add(b, c)
                } else {
                    a * b + c
                }
            }
            #[inline(always)]
            fn pow2(shifted: $t) -> $t {
                let n_bits = shifted.to_bits().wrapping_sub($shifter.to_bits());
                <$t>::from_bits(n_bits.wrapping_add($bias) << $at)
            }
        }
    };
}
exp_float!(f64: LOG2E, LN2_HI, LN2_LO, SHIFTER, EXP_MIN_ARG, INV_FACT, bias 1023, at 52);
exp_float!(f32: LOG2E_SINGLE, LN2_HI_SINGLE, LN2_LO_SINGLE, SHIFTER_SINGLE, EXP_MIN_ARG_SINGLE,
    INV_FACT_SINGLE, bias 127, at 23);

/// e^x for x <= 0 in `T`'s arithmetic, Taylor's polynomial of degree `DEGREE`: the scheme of
/// the constants above, written once for f64 and f32 (`exp_nonpositive_single`).
#[inline(always)]
fn exp_scheme<T: ExpFloat, const FMA: bool, const DEGREE: usize>(x: T) -> T {
    let underflow = x < T::MIN_ARG;
    let x = if underflow { T::MIN_ARG } else { x };
    let shifted = T::fma::<FMA>(x, T::LOG2E, T::SHIFTER);
    let n = shifted - T::SHIFTER;
    let r = T::fma::<FMA>(-n, T::LN2_LO, T::fma::<FMA>(-n, T::LN2_HI, x));
    let mut p = T::inv_fact(DEGREE);
    for k in (0..DEGREE).rev() {
        p = T::fma::<FMA>(p, r, T::inv_fact(k));
    }
    if underflow {
        T::ZERO
    } else {
        p * T::pow2(shifted)
    }
}

/// The Gaussian kernel value from a dot product: exp(-gamma max(0, x_norm + sv_norm - 2 dot)).
/// Rounding below 0 is clamped; a NaN distance (squared norms that overflowed) stays NaN, never
/// a silent 1.
#[inline(always)]
pub(super) fn rbf_from_dot<const FMA: bool>(
    gamma: f64,
    x_norm: f64,
    sv_norm: f64,
    dot: f64,
) -> f64 {
    let d2 = x_norm + sv_norm - 2.0 * dot;
    let d2 = if d2 < 0.0 { 0.0 } else { d2 };
    exp_nonpositive::<FMA>(-gamma * d2)
}

/// e^x for x <= 0 in f32 arithmetic (the constants above); branch-free. With `FMA` every
/// multiply-add is fused, the exact sequence of the vector paths.
#[inline(always)]
pub(super) fn exp_nonpositive_single<const FMA: bool>(x: f32) -> f32 {
    exp_scheme::<f32, FMA, SINGLE_DEGREE>(x)
}

/// The Gaussian kernel value in f32: the distance and -gamma d^2 as `rbf_from_dot`'s, then
/// rounded to f32 and `exp_nonpositive_single`.
#[inline(always)]
pub(super) fn rbf_from_dot_single<const FMA: bool>(
    gamma: f64,
    x_norm: f64,
    sv_norm: f64,
    dot: f64,
) -> f32 {
    let d2 = x_norm + sv_norm - 2.0 * dot;
    let d2 = if d2 < 0.0 { 0.0 } else { d2 };
    exp_nonpositive_single::<FMA>((-gamma * d2) as f32)
}

/// `rbf_from_dots_f32` on the portable level (the slices of one length).
pub(super) fn rbf_from_dots_f32_portable(
    gamma: f64,
    sq_norm: f64,
    norms: &[f64],
    dots: &[f64],
    out: &mut [f32],
) {
    for ((o, &d), &sn) in out.iter_mut().zip(dots).zip(norms) {
        *o = rbf_from_dot_single::<false>(gamma, sq_norm, sn, d);
    }
}

#[inline(always)]
pub(super) fn rbf_from_dots_body<const FMA: bool>(
    gamma: f64,
    sq_norm: f64,
    sv_sq_norms: &[f64],
    dots: &mut [f64],
) {
    for (d, &n) in dots.iter_mut().zip(sv_sq_norms) {
        *d = rbf_from_dot::<FMA>(gamma, sq_norm, n, *d);
    }
}

/// tanh(gamma dot + coef0) from a dot product (the sigmoid kernel): with a = |x| and
/// t = exp(-2a) from the exponential above, tanh(a) = (1 - t) / (1 + t), signed as x. Absolute
/// error a few ulp of 1 (the subtraction cancels for tiny a, where tanh(x) ~ x is small: the
/// kernel values need absolute, not relative, accuracy); NaN stays NaN.
#[inline(always)]
pub(super) fn sigmoid_from_dot<const FMA: bool>(gamma: f64, coef0: f64, dot: f64) -> f64 {
    let x = if FMA {
        gamma.mul_add(dot, coef0)
    } else {
        gamma * dot + coef0
    };
    let t = exp_nonpositive::<FMA>(-2.0 * x.abs());
    ((1.0 - t) / (1.0 + t)).copysign(x)
}

#[inline(always)]
pub(super) fn sigmoid_from_dots_body<const FMA: bool>(gamma: f64, coef0: f64, dots: &mut [f64]) {
    for d in dots.iter_mut() {
        *d = sigmoid_from_dot::<FMA>(gamma, coef0, *d);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::simd::{
        levels_here, rbf_from_dots, rbf_from_dots_at, rbf_from_dots_f32_at, sigmoid_from_dots_at,
        Level,
    };

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

    /// The f32 Gaussian values: on every level within an f32 ulp of the f64 values (whose
    /// exponential is exact to an f64 ulp) plus what rounding the argument x = -gamma d^2 to
    /// f32 moves e^x (|x| 2^-24 relative), so never more than 6e-8 from them; the vector
    /// levels the scalar fused code's bits; NaN distances stay NaN, far points give 0.
    #[test]
    fn f32_rbf_values_are_the_f64_ones_to_the_rounding_of_their_argument() {
        let mut rng = Rng::new(33);
        for n in [0, 1, 3, 4, 5, 8, 9, 15, 16, 17, 31, 33, 100, 259, 4000] {
            let gamma = 0.01 + 3.0 * rng.next_f64();
            let x_norm = 20.0 * rng.next_f64();
            let norms: Vec<f64> = (0..n).map(|_| rng.next_f64() * 20.0).collect();
            let mut dots: Vec<f64> = norms
                .iter()
                .map(|&sn| (rng.next_f64() - 0.5) * 2.0 * (x_norm * sn).sqrt())
                .collect();
            if n > 4 {
                dots[1] = f64::NAN;
                dots[2] = -1e6;
                // The same point as x: distance 0, value 1.
                dots[3] = 0.5 * (x_norm + norms[3]);
            }
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
                    let x = gamma * (x_norm + norms[j] - 2.0 * dots[j]).max(0.0);
                    let ulp = f64::from(f32::from_bits(w.to_bits() + 1) - w);
                    let err = (f64::from(out[j]) - wide[j]).abs();
                    // Where e^x is below f32's normal numbers, 0 is within 1.2e-38.
                    let allowed = (ulp + wide[j] * x * 2f64.powi(-24)).max(1.2e-38);
                    assert!(
                        err <= allowed,
                        "{level:?} n {n} j {j}: {} vs {}",
                        out[j],
                        wide[j]
                    );
                    assert!(
                        err <= 6e-8,
                        "{level:?} n {n} j {j}: {} vs {}",
                        out[j],
                        wide[j]
                    );
                    if level != Level::Portable {
                        let fused = rbf_from_dot_single::<true>(gamma, x_norm, norms[j], dots[j]);
                        assert_eq!(out[j].to_bits(), fused.to_bits(), "{level:?} n {n} j {j}");
                    }
                }
                if n > 4 {
                    assert_eq!(out[2], 0.0);
                    assert_eq!(out[3], 1.0);
                }
            }
        }
    }
}
