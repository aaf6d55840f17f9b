//! Half-precision values (`F16`) and their products in f32 arithmetic: the conversions, which
//! every level gives bit for bit, and the portable loops (F16C in `x86/half.rs`).

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

/// `dot_half` on the portable level.
pub(super) fn dot_half_portable(x: &[F16], y: &[f32]) -> f32 {
    x.iter()
        .zip(y)
        .fold(0.0f32, |s, (&a, &b)| (a.to_f64() as f32).mul_add(b, s))
}

/// `axpy_half` on the portable level.
pub(super) fn axpy_half_portable(a: f32, x: &[F16], y: &mut [f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi = a.mul_add(xi.to_f64() as f32, *yi);
    }
}

/// `extend_f16` on the portable level.
pub(super) fn extend_f16_portable(x: &[f32], out: &mut Vec<F16>) {
    out.extend(x.iter().map(|&v| F16::from_f32(v)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::rng::Rng;
    use crate::core::simd::{axpy_half, axpy_narrow, dot_half, extend_f16};

    /// The f32 products of halves: the dot to f32's rounding of the exact sum, the axpy the
    /// fused f32 update on every value (vector lanes and tail alike).
    #[test]
    fn half_products_in_f32() {
        let mut rng = Rng::new(23);
        for n in [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 40, 48, 3000] {
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
}
