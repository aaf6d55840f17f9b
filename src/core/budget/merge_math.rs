//! The scalar merge math that has no dependency on the rest of the crate: the merged value
//! s(h), the weight degradation, golden section search and one row of the lookup tables. The
//! crate's build script compiles this file too (`#[path]`), to embed the default 400 x 400
//! tables in the library; `merge.rs` holds everything else of merging.

/// Precision of the golden section search in BSGD's reference implementation.
pub const GSS_EPS: f64 = 0.01;
/// Precision used to build the lookup tables (and the `gss-precise` search).
pub const GSS_PRECISE_EPS: f64 = 1e-10;
/// Grid size of the default lookup tables (paper 000 uses 400 x 400).
pub const DEFAULT_TABLE_SIZE: usize = 400;

/// Golden section search for the maximum of a unimodal function on [lo, hi], to interval width
/// `eps`. Returns (argmax, max) at the midpoint of the final interval.
pub fn golden_section_max(f: impl Fn(f64) -> f64, lo: f64, hi: f64, eps: f64) -> (f64, f64) {
    const INV_PHI: f64 = 0.618_033_988_749_894_8; // 1/phi
    let (mut a, mut b) = (lo, hi);
    let mut c = b - INV_PHI * (b - a);
    let mut d = a + INV_PHI * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    while b - a > eps {
        if fc >= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - INV_PHI * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + INV_PHI * (b - a);
            fd = f(d);
        }
    }
    let x = 0.5 * (a + b);
    (x, f(x))
}

/// s(h) = m kappa^((1-h)^2) + (1-m) kappa^(h^2), with ln(kappa) precomputed.
#[inline]
fn merged_value_ln(m: f64, ln_kappa: f64, h: f64) -> f64 {
    let g = 1.0 - h;
    m * (g * g * ln_kappa).exp() + (1.0 - m) * (h * h * ln_kappa).exp()
}

/// s(h): the coefficient a_z of the merged point divided by (a1 + a2).
pub fn merged_value(m: f64, kappa: f64, h: f64) -> f64 {
    if kappa <= 0.0 {
        // kappa^0 = 1 and kappa^p = 0 otherwise.
        return m * f64::from(h == 1.0) + (1.0 - m) * f64::from(h == 0.0);
    }
    merged_value_ln(m, kappa.ln(), h)
}

/// Normalised weight degradation for merge coefficient h: |Delta|^2 / (a1 + a2)^2.
pub fn weight_degradation(m: f64, kappa: f64, h: f64) -> f64 {
    wd_from_merged_value(m, kappa, merged_value(m, kappa, h))
}

/// Normalised weight degradation from s(h).
#[inline]
pub(crate) fn wd_from_merged_value(m: f64, kappa: f64, s: f64) -> f64 {
    (m * m + (1.0 - m) * (1.0 - m) + 2.0 * m * (1.0 - m) * kappa - s * s).max(0.0)
}

/// The optimal h and s(h) by golden section search on the half of [0, 1] that holds the global
/// maximum.
pub(crate) fn gss_h_and_value(m: f64, kappa: f64, eps: f64) -> (f64, f64) {
    if kappa <= 0.0 {
        let h = if m >= 0.5 { 1.0 } else { 0.0 };
        return (h, merged_value(m, kappa, h));
    }
    if kappa >= 1.0 {
        // x1 == x2: every h gives the same point; s(h) = 1 everywhere.
        return (m, 1.0);
    }
    let ln_kappa = kappa.ln();
    // The maximiser lies between m and the end of its half: for m <= 1/2 a stationary point
    // solves h / (1 - h) = m / (1 - m) kappa^(1 - 2h) <= m / (1 - m), so h <= m (h >= m for
    // m >= 1/2 by symmetry). Searching [0, m] to a width relative to it keeps h precise when m
    // is tiny (a fresh SV merged into an old one, m ~ 1e-4, h ~ kappa m): an absolute width of
    // `eps` put z up to eps / 2 away from where it belongs there, a degradation far above the
    // optimum's (which scales like m^2), and ranked partners by that error.
    let (lo, hi) = if m >= 0.5 { (m, 1.0) } else { (0.0, m) };
    let width = eps * (hi - lo) / 0.5;
    golden_section_max(|h| merged_value_ln(m, ln_kappa, h), lo, hi, width)
}

/// The optimal h by golden section search to interval width `eps`.
pub fn gss_h(m: f64, kappa: f64, eps: f64) -> f64 {
    gss_h_and_value(m, kappa, eps).0
}

/// lim_{m -> 0} wd(m, kappa) / m^2 = 1 - kappa^2 + 2 kappa^2 ln(kappa) (1 at kappa = 0).
pub(crate) fn wd_over_m2_at_zero(kappa: f64) -> f64 {
    if kappa <= 0.0 {
        return 1.0;
    }
    let k2 = kappa * kappa;
    (1.0 - k2 + 2.0 * k2 * kappa.ln()).max(0.0)
}

/// Row i of the n x n lookup tables (m = i / (2 (n - 1)), kappa = j / (n - 1)): h*(m, kappa) by
/// precise golden section search, and wd / m^2 (its limit at m = 0).
pub fn table_row(i: usize, n: usize, hrow: &mut [f64], wdrow: &mut [f64]) {
    let step = 1.0 / (n - 1) as f64;
    // Just below 1/2 at the last row: the limit from the side this table covers.
    let m = if i == n - 1 {
        0.5 - 1e-12
    } else {
        0.5 * i as f64 * step
    };
    for j in 0..n {
        let kappa = j as f64 * step;
        let hs = gss_h(m, kappa, GSS_PRECISE_EPS);
        hrow[j] = hs;
        wdrow[j] = if i == 0 {
            wd_over_m2_at_zero(kappa)
        } else {
            weight_degradation(m, kappa, hs) / (m * m)
        };
    }
}
