//! The arithmetic floor of one budgeted step, next to the step as the solvers run it.
//!
//! A BSGD / BSCA step without budget maintenance must do, for B support vectors of dimension d
//! (or an input row with nnz non-zeros), B x d multiply-adds (the dot products), B exponentials
//! (the kernel values) and one dot product of length B (the decision value). The `floor_*`
//! functions below do exactly that arithmetic and nothing else, written for the best SIMD this CPU
//! offers (AVX2 + FMA, 4 doubles a vector; no machine here has AVX-512): dot products register-
//! blocked 16 support vectors at a time so that each support-vector value is loaded once and the
//! accumulators never leave registers, the exponential as vectorised Cody-Waite reduction plus a
//! degree-12 polynomial (relative error about 2e-16, the accuracy class of `simd.rs`), all fused
//! into one pass over the B-length arrays. `step/*` is the production step (`SupportVectors`:
//! dots, kernel values, decision value) on the same data, so the report reads as a multiple of
//! the floor. `cargo bench --bench floor`; `benchmarks/criterion_report.py` tabulates it.

use budgetsvm::core::data::{CsrView, DenseView, Rows};
use budgetsvm::core::model::{SupportVectors, SvLayout};
use budgetsvm::core::rng::Rng;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// exp(x) for x <= 0 on four lanes: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-12 Taylor
    /// polynomial (Estrin-free Horner: the floor counts the multiply-adds, 13 of them).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp4(x: __m256d) -> __m256d {
        const C: [f64; 13] = [
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
        ];
        let x = _mm256_max_pd(x, _mm256_set1_pd(-708.0));
        let shifter = _mm256_set1_pd(6_755_399_441_055_744.0);
        let shifted = _mm256_fmadd_pd(x, _mm256_set1_pd(std::f64::consts::LOG2_E), shifter);
        let n = _mm256_sub_pd(shifted, shifter);
        let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.931_471_803_691_238e-1), x);
        let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.908_214_929_270_587_7e-10), r);
        let mut p = _mm256_set1_pd(C[12]);
        for k in (0..12).rev() {
            p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(C[k]));
        }
        let bits = _mm256_sub_epi64(_mm256_castpd_si256(shifted), _mm256_castpd_si256(shifter));
        let scale = _mm256_slli_epi64::<52>(_mm256_add_epi64(bits, _mm256_set1_epi64x(1023)));
        _mm256_mul_pd(p, _mm256_castsi256_pd(scale))
    }

    /// The whole step's unavoidable arithmetic in one pass: for each block of 16 SVs, the dot
    /// products with the input (feature-major SVs, one broadcast multiply-add per feature and
    /// vector), then distance, exponential and the decision sum, all in registers.
    /// `svt[c * b + j]` is feature c of SV j (b a multiple of 16); `x` the dense input.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn step(
        svt: &[f64],
        b: usize,
        x: &[f64],
        x_norm: f64,
        sv_norms: &[f64],
        coef: &[f64],
        gamma: f64,
    ) -> f64 {
        // SAFETY: the caller guarantees AVX2+FMA; every pointer offset stays inside the
        // slices (b a multiple of 16, b values per feature).
        unsafe {
            let (ps, pn, pc) = (svt.as_ptr(), sv_norms.as_ptr(), coef.as_ptr());
            let g = _mm256_set1_pd(-gamma);
            let xn = _mm256_set1_pd(x_norm);
            let two = _mm256_set1_pd(2.0);
            let zero = _mm256_setzero_pd();
            let mut f = [_mm256_setzero_pd(); 4];
            let mut j = 0;
            while j < b {
                let mut acc = [_mm256_setzero_pd(); 4];
                for (c, &xc) in x.iter().enumerate() {
                    let v = _mm256_set1_pd(xc);
                    let row = ps.add(c * b + j);
                    for (l, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_pd(v, _mm256_loadu_pd(row.add(4 * l)), *a);
                    }
                }
                for (l, a) in acc.iter().enumerate() {
                    let d2 = _mm256_fnmadd_pd(
                        two,
                        *a,
                        _mm256_add_pd(xn, _mm256_loadu_pd(pn.add(j + 4 * l))),
                    );
                    let k = exp4(_mm256_mul_pd(g, _mm256_max_pd(d2, zero)));
                    f[l] = _mm256_fmadd_pd(k, _mm256_loadu_pd(pc.add(j + 4 * l)), f[l]);
                }
                j += 16;
            }
            let s = _mm256_add_pd(_mm256_add_pd(f[0], f[1]), _mm256_add_pd(f[2], f[3]));
            let mut lanes = [0.0; 4];
            _mm256_storeu_pd(lanes.as_mut_ptr(), s);
            (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        }
    }

    /// The same for a sparse input row given by (columns, values): nnz broadcast multiply-adds
    /// per vector of SVs instead of d.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn step_sparse(
        svt: &[f64],
        b: usize,
        cols: &[usize],
        vals: &[f64],
        x_norm: f64,
        sv_norms: &[f64],
        coef: &[f64],
        gamma: f64,
    ) -> f64 {
        // SAFETY: the caller guarantees AVX2+FMA; every pointer offset stays inside the
        // slices (b a multiple of 16, b values per feature).
        unsafe {
            let (ps, pn, pc) = (svt.as_ptr(), sv_norms.as_ptr(), coef.as_ptr());
            let g = _mm256_set1_pd(-gamma);
            let xn = _mm256_set1_pd(x_norm);
            let two = _mm256_set1_pd(2.0);
            let zero = _mm256_setzero_pd();
            let mut f = [_mm256_setzero_pd(); 4];
            let mut j = 0;
            while j < b {
                let mut acc = [_mm256_setzero_pd(); 4];
                for (&c, &xc) in cols.iter().zip(vals) {
                    let v = _mm256_set1_pd(xc);
                    let row = ps.add(c * b + j);
                    for (l, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_pd(v, _mm256_loadu_pd(row.add(4 * l)), *a);
                    }
                }
                for (l, a) in acc.iter().enumerate() {
                    let d2 = _mm256_fnmadd_pd(
                        two,
                        *a,
                        _mm256_add_pd(xn, _mm256_loadu_pd(pn.add(j + 4 * l))),
                    );
                    let k = exp4(_mm256_mul_pd(g, _mm256_max_pd(d2, zero)));
                    f[l] = _mm256_fmadd_pd(k, _mm256_loadu_pd(pc.add(j + 4 * l)), f[l]);
                }
                j += 16;
            }
            let s = _mm256_add_pd(_mm256_add_pd(f[0], f[1]), _mm256_add_pd(f[2], f[3]));
            let mut lanes = [0.0; 4];
            _mm256_storeu_pd(lanes.as_mut_ptr(), s);
            (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
        }
    }

    /// Only the B exponentials (for the report's breakdown).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn exps(args: &[f64], out: &mut [f64]) {
        // SAFETY: the caller guarantees AVX2+FMA; every pointer offset stays inside the
        // slices (b a multiple of 16, b values per feature).
        unsafe {
            for (a, o) in args.chunks_exact(4).zip(out.chunks_exact_mut(4)) {
                _mm256_storeu_pd(o.as_mut_ptr(), exp4(_mm256_loadu_pd(a.as_ptr())));
            }
        }
    }
}

fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Rows like the solvers see them: dense uniform values, or a9a-like rows of `nnz` ones.
fn dense(n: usize, d: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n * d).map(|_| rng.next_f64()).collect()
}

fn sparse(n: usize, d: usize, nnz: usize, seed: u64) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let (mut indptr, mut indices) = (vec![0i64], vec![]);
    for _ in 0..n {
        let mut cols: Vec<i64> = (0..d as i64).collect();
        rng.shuffle(&mut cols);
        let mut row = cols[..nnz].to_vec();
        row.sort_unstable();
        indices.extend(row);
        indptr.push(indices.len() as i64);
    }
    let values = vec![1.0; indices.len()];
    (indptr, indices, values)
}

/// Feature-major copy of the first `b` rows (what the floor reads), their squared norms, and
/// coefficients.
fn floor_arrays<R: Rows>(x: &R, b: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let d = x.n_cols();
    let mut svt = vec![0.0; d * b];
    for j in 0..b {
        x.for_each_nonzero(j, |c, v| svt[c * b + j] = v);
    }
    let norms = (0..b).map(|j| x.sq_norm(j)).collect();
    let coef = (0..b)
        .map(|j| if j % 2 == 0 { 0.01 } else { -0.02 })
        .collect();
    (svt, norms, coef)
}

fn bench_case<R: Rows>(c: &mut Criterion, name: &str, x: &R, b: usize, gamma: f64) {
    let n = x.n_rows();
    let d = x.n_cols();
    let mut svs = SupportVectors::new(d, b + 1, 1, SvLayout::Dense).unwrap();
    let mut sparse_svs = SupportVectors::new(d, b + 1, 1, SvLayout::Sparse).unwrap();
    for j in 0..b {
        let c = [if j % 2 == 0 { 0.01 } else { -0.02 }];
        svs.push_row(x, j, &c).unwrap();
        sparse_svs.push_row(x, j, &c).unwrap();
    }
    let (svt, sv_norms, coef) = floor_arrays(x, b);
    let norms = x.sq_norms();
    let mut kv = vec![0.0; b + 1];
    let mut f = [0.0];
    let mut dense_x = vec![0.0; d];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    let mut group = c.benchmark_group(format!("step_{name}"));
    group.throughput(Throughput::Elements(b as u64));
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("step", b), |bch| {
        bch.iter(|| {
            i = (i + 1) % n;
            svs.dots_with_row(x, i, &mut kv);
            svs.dots_to_kernel(gamma, norms[i], &mut kv);
            svs.decision_from_kernel(&kv, &mut f);
            black_box(f[0])
        })
    });
    if x.dense_row(0).is_none() {
        // The same step with the sparse support vector layout (what `auto` picks for wide CSR).
        group.bench_function(BenchmarkId::new("step-sparse-layout", b), |bch| {
            bch.iter(|| {
                i = (i + 1) % n;
                sparse_svs.dots_with_row(x, i, &mut kv);
                sparse_svs.dots_to_kernel(gamma, norms[i], &mut kv);
                sparse_svs.decision_from_kernel(&kv, &mut f);
                black_box(f[0])
            })
        });
    }
    #[cfg(target_arch = "x86_64")]
    if available() {
        let is_sparse = x.dense_row(0).is_none();
        // The floor computes the same decision value as the production step.
        for (i, &norm) in norms.iter().enumerate().take(8) {
            svs.dots_with_row(x, i, &mut kv);
            svs.dots_to_kernel(gamma, norm, &mut kv);
            svs.decision_from_kernel(&kv, &mut f);
            x.write_dense(i, &mut dense_x);
            // SAFETY: AVX2 and FMA were detected; b is a multiple of 16.
            let v = unsafe { avx2::step(&svt, b, &dense_x, norm, &sv_norms, &coef, gamma) };
            assert!(
                (v - f[0]).abs() <= 1e-9 * (1.0 + f[0].abs()),
                "floor {v} vs step {}",
                f[0]
            );
        }
        group.bench_function(BenchmarkId::new("floor", b), |bch| {
            bch.iter(|| {
                i = (i + 1) % n;
                // SAFETY: AVX2 and FMA were detected; b is a multiple of 16 and the arrays hold
                // b values per feature.
                let v = unsafe {
                    if is_sparse {
                        cols.clear();
                        vals.clear();
                        x.for_each_nonzero(i, |c, v| {
                            cols.push(c);
                            vals.push(v);
                        });
                        avx2::step_sparse(&svt, b, &cols, &vals, norms[i], &sv_norms, &coef, gamma)
                    } else {
                        x.write_dense(i, &mut dense_x);
                        avx2::step(&svt, b, &dense_x, norms[i], &sv_norms, &coef, gamma)
                    }
                };
                black_box(v)
            })
        });
        let args: Vec<f64> = (0..b).map(|j| -(j as f64) * 0.01).collect();
        let mut out = vec![0.0; b];
        group.bench_function(BenchmarkId::new("floor_exp_only", b), |bch| {
            bch.iter(|| {
                // SAFETY: AVX2 and FMA were detected.
                unsafe { avx2::exps(black_box(&args), &mut out) };
                black_box(out[0])
            })
        });
    }
    group.finish();
}

fn floor(c: &mut Criterion) {
    if !available() {
        eprintln!("floor: no AVX2+FMA on this CPU; only the production step is measured");
    }
    let n = 4096;
    for b in [100usize, 500, 2000] {
        // Multiples of 16 for the register blocking (B = 100 -> 112 floor lanes would overstate
        // the floor, so B = 96 stands for 100 and 496 for 500 in the floor).
        let b = b / 16 * 16;
        for d in [2usize, 22, 123] {
            let xs = dense(n, d, d as u64);
            let x = DenseView::new(&xs, n, d).expect("shape");
            let gamma = if d == 2 { 100.0 } else { 2.0 / d as f64 };
            bench_case(c, &format!("dense_d{d}"), &x, b, gamma);
        }
        let (indptr, indices, values) = sparse(n, 123, 14, 7);
        let x = CsrView::new(&indptr, &indices, &values, 123).expect("csr");
        bench_case(c, "sparse_a9a_like", &x, b, 1.0 / 128.0);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = floor
}
criterion_main!(benches);
