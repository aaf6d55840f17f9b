//! The arithmetic floor of one budgeted step, next to the step as the solvers run it.
//!
//! A BSGD / BSCA step without budget maintenance must do, for B support vectors of dimension d
//! (or an input row with nnz non-zeros), B x d multiply-adds (the dot products), B exponentials
//! (the kernel values) and one dot product of length B (the decision value). The `floor_*`
//! functions below do exactly that arithmetic and nothing else, written for the best SIMD this CPU
//! offers (AVX-512 where it has it, 8 doubles a vector; else AVX2 + FMA, 4): dot products
//! register-blocked 32 (16) support vectors at a time so that each support-vector value is loaded
//! once and the accumulators never leave registers, the exponential as vectorised Cody-Waite
//! reduction plus a degree-12 polynomial (relative error about 2e-16, the accuracy class of
//! `simd.rs`), all fused into one pass over the B-length arrays, with no bounds checks, no
//! gathering of the input row and no tails (B a multiple of 16). `step/*` is the production step
//! (`SupportVectors::kernel_row_and_decision`: kernel values and decision value) on the same
//! data, so the report reads as a multiple of the floor. `cargo bench --bench floor`;
//! `benchmarks/criterion_report.py` tabulates it.

use budgetsvm::core::budget::maintenance::{BudgetMaintainer, Maintenance};
use budgetsvm::core::budget::merge::{MergeSearch, MergeTable};
use budgetsvm::core::budget::model::{SupportVectors, SvLayout};
use budgetsvm::core::budgeted::bsgd::{train_bsgd_state, BsgdParams};
use budgetsvm::core::budgeted::problem::Targets;
use budgetsvm::core::common::progress::no_monitor;
use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::rows::{CsrView, DenseView, Rows};
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
    /// products with the input (feature-major SVs, one broadcast multiply-add per non-zero and
    /// vector), then distance, exponential and the decision sum, all in registers.
    /// `svt[c * b + j]` is feature c of SV j (b a multiple of 16); the input is given by its
    /// non-zeros (a dense input passes columns 0..d).
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

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// `avx2::exp4` on eight lanes.
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    pub fn exp8(x: __m512d) -> __m512d {
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
        let x = _mm512_max_pd(x, _mm512_set1_pd(-708.0));
        let shifter = _mm512_set1_pd(6_755_399_441_055_744.0);
        let shifted = _mm512_fmadd_pd(x, _mm512_set1_pd(std::f64::consts::LOG2_E), shifter);
        let n = _mm512_sub_pd(shifted, shifter);
        let r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.931_471_803_691_238e-1), x);
        let r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.908_214_929_270_587_7e-10), r);
        let mut p = _mm512_set1_pd(C[12]);
        for k in (0..12).rev() {
            p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(C[k]));
        }
        let bits = _mm512_sub_epi64(_mm512_castpd_si512(shifted), _mm512_castpd_si512(shifter));
        let scale = _mm512_slli_epi64::<52>(_mm512_add_epi64(bits, _mm512_set1_epi64(1023)));
        _mm512_mul_pd(p, _mm512_castsi512_pd(scale))
    }

    /// `avx2::step_sparse` on eight lanes, over SVs stored in tiles of 32 (the last tile may
    /// hold 16): tile t holds SVs 32 t.., feature-major inside (`tiled` below), so one block's
    /// values are one contiguous run of memory.
    #[target_feature(enable = "avx512f,fma")]
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
        #[inline(always)]
        unsafe fn block<const U: usize>(
            tile: *const f64,
            cols: &[usize],
            vals: &[f64],
            pn: *const f64,
            pc: *const f64,
            xn: __m512d,
            g: __m512d,
            f: &mut [__m512d; 4],
        ) {
            // SAFETY: the tile holds U * 8 values per feature; pn and pc U * 8 values.
            unsafe {
                let mut acc = [_mm512_setzero_pd(); U];
                for (&c, &xc) in cols.iter().zip(vals) {
                    let v = _mm512_set1_pd(xc);
                    let row = tile.add(c * 8 * U);
                    for (l, a) in acc.iter_mut().enumerate() {
                        *a = _mm512_fmadd_pd(v, _mm512_loadu_pd(row.add(8 * l)), *a);
                    }
                }
                for (l, a) in acc.iter().enumerate() {
                    let d2 = _mm512_fnmadd_pd(
                        _mm512_set1_pd(2.0),
                        *a,
                        _mm512_add_pd(xn, _mm512_loadu_pd(pn.add(8 * l))),
                    );
                    let k = exp8(_mm512_mul_pd(g, _mm512_max_pd(d2, _mm512_setzero_pd())));
                    f[l] = _mm512_fmadd_pd(k, _mm512_loadu_pd(pc.add(8 * l)), f[l]);
                }
            }
        }
        // SAFETY: the caller guarantees AVX-512F+FMA; every offset stays inside the slices (b a
        // multiple of 16, laid out by `tiled`).
        unsafe {
            let d = svt.len() / b;
            let (ps, pn, pc) = (svt.as_ptr(), sv_norms.as_ptr(), coef.as_ptr());
            let g = _mm512_set1_pd(-gamma);
            let xn = _mm512_set1_pd(x_norm);
            let mut f = [_mm512_setzero_pd(); 4];
            let mut j = 0;
            while j + 32 <= b {
                block::<4>(
                    ps.add(j * d),
                    cols,
                    vals,
                    pn.add(j),
                    pc.add(j),
                    xn,
                    g,
                    &mut f,
                );
                j += 32;
            }
            if j < b {
                block::<2>(
                    ps.add(j * d),
                    cols,
                    vals,
                    pn.add(j),
                    pc.add(j),
                    xn,
                    g,
                    &mut f,
                );
            }
            _mm512_reduce_add_pd(_mm512_add_pd(
                _mm512_add_pd(f[0], f[1]),
                _mm512_add_pd(f[2], f[3]),
            ))
        }
    }

    /// Only the B exponentials (for the report's breakdown).
    #[target_feature(enable = "avx512f,fma")]
    pub unsafe fn exps(args: &[f64], out: &mut [f64]) {
        // SAFETY: the caller guarantees AVX-512F+FMA; chunks of 8 stay inside the slices.
        unsafe {
            for (a, o) in args.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
                _mm512_storeu_pd(o.as_mut_ptr(), exp8(_mm512_loadu_pd(a.as_ptr())));
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

/// Whether the floor is the AVX-512 one.
fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma")
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
        x.for_each_nonzero(j, |c, v| svt[tiled(j, c, b, d)] = v);
    }
    let norms = (0..b).map(|j| x.sq_norm(j)).collect();
    let coef = (0..b)
        .map(|j| if j % 2 == 0 { 0.01 } else { -0.02 })
        .collect();
    (svt, norms, coef)
}

/// Where feature c of SV j lies in the floor's store of b SVs of d features: feature-major with
/// stride b for the AVX2 floor; for the AVX-512 floor in tiles of 32 SVs (16 in a last short
/// one), feature-major inside a tile.
fn tiled(j: usize, c: usize, b: usize, d: usize) -> usize {
    if has_avx512() {
        let t0 = j / 32 * 32;
        let width = (b - t0).min(32);
        t0 * d + c * width + (j - t0)
    } else {
        c * b + j
    }
}

/// The floor's decision value for row i: the AVX-512 floor where the CPU has it, else AVX2.
///
/// # Safety
/// AVX2 and FMA must run here; `svt` holds b values per feature, b a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn floor_step(
    svt: &[f64],
    b: usize,
    cols: &[usize],
    vals: &[f64],
    x_norm: f64,
    sv_norms: &[f64],
    coef: &[f64],
    gamma: f64,
) -> f64 {
    // SAFETY: forwarded from the caller; AVX-512 only where detected.
    unsafe {
        if has_avx512() {
            avx512::step_sparse(svt, b, cols, vals, x_norm, sv_norms, coef, gamma)
        } else {
            avx2::step_sparse(svt, b, cols, vals, x_norm, sv_norms, coef, gamma)
        }
    }
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
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    let mut group = c.benchmark_group(format!("step_{name}"));
    group.throughput(Throughput::Elements(b as u64));
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("step", b), |bch| {
        bch.iter(|| {
            i = (i + 1) % n;
            svs.kernel_row_and_decision(x, i, norms[i], gamma, &mut kv, &mut f);
            black_box(f[0])
        })
    });
    if x.dense_row(0).is_none() {
        // The same step with the sparse support vector layout (what `auto` picks for wide CSR).
        group.bench_function(BenchmarkId::new("step-sparse-layout", b), |bch| {
            bch.iter(|| {
                i = (i + 1) % n;
                sparse_svs.kernel_row_and_decision(x, i, norms[i], gamma, &mut kv, &mut f);
                black_box(f[0])
            })
        });
    }
    let row_of = |i: usize, cols: &mut Vec<usize>, vals: &mut Vec<f64>| {
        cols.clear();
        vals.clear();
        x.for_each_nonzero(i, |c, v| {
            cols.push(c);
            vals.push(v);
        });
    };
    #[cfg(target_arch = "x86_64")]
    if available() {
        // The floor computes the same decision value as the production step.
        for (i, &norm) in norms.iter().enumerate().take(8) {
            svs.kernel_row_and_decision(x, i, norm, gamma, &mut kv, &mut f);
            row_of(i, &mut cols, &mut vals);
            // SAFETY: AVX2 and FMA were detected; b is a multiple of 16.
            let v = unsafe { floor_step(&svt, b, &cols, &vals, norm, &sv_norms, &coef, gamma) };
            assert!(
                (v - f[0]).abs() <= 1e-9 * (1.0 + f[0].abs()),
                "floor {v} vs step {}",
                f[0]
            );
        }
        // The floor takes the row's non-zeros as given (gathering them is the production
        // step's cost, not arithmetic): rows prepared outside the timed loop.
        let rows: Vec<(Vec<usize>, Vec<f64>)> = (0..n)
            .map(|i| {
                let (mut c, mut v) = (Vec::new(), Vec::new());
                row_of(i, &mut c, &mut v);
                (c, v)
            })
            .collect();
        group.bench_function(BenchmarkId::new("floor", b), |bch| {
            bch.iter(|| {
                i = (i + 1) % n;
                let (cols, vals) = &rows[i];
                // SAFETY: AVX2 and FMA were detected; b is a multiple of 16 and the arrays hold
                // b values per feature.
                let v =
                    unsafe { floor_step(&svt, b, cols, vals, norms[i], &sv_norms, &coef, gamma) };
                black_box(v)
            })
        });
        let args: Vec<f64> = (0..b).map(|j| -(j as f64) * 0.01).collect();
        let mut out = vec![0.0; b];
        group.bench_function(BenchmarkId::new("floor_exp_only", b), |bch| {
            bch.iter(|| {
                // SAFETY: the instruction sets were detected.
                unsafe {
                    if has_avx512() {
                        avx512::exps(black_box(&args), &mut out)
                    } else {
                        avx2::exps(black_box(&args), &mut out)
                    }
                };
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

/// A BSGD model in its steady state (budget full, a merge every few steps: 20,000 rows, lambda
/// 1e-4, one epoch) and, measured on it, what training does per step: `step`, the kernel row
/// and decision value of a fresh row; `step+insert+merge`, a step whose row becomes an SV and
/// the maintenance event that follows (`reduce_after_push`: the new SV is merged, with the
/// kernel row its step computed), so the event costs the difference of the two;
/// `step+insert+merge-row-computed`, the same with the event computing that row again (what
/// `reduce` pays for an SV that is not the new one: BSCA, or class weights).
fn events(c: &mut Criterion) {
    MergeTable::shared(); // built outside the measurement
    let n = 20_000;
    for (name, d, gamma) in [("checkerboard_d2", 2usize, 100.0), ("dense_d22", 22, 1.0)] {
        let xs = dense(n, d, 11);
        let x = DenseView::new(&xs, n, d).expect("shape");
        let label =
            |i: usize| ((4.0 * xs[i * d]).floor() + (4.0 * xs[i * d + 1]).floor()) as u32 % 2;
        let y: Vec<u32> = (0..n).map(label).collect();
        let mut group = c.benchmark_group(format!("event_{name}"));
        for b in [100usize, 500, 2000] {
            let params = BsgdParams {
                lambda: Some(1e-4),
                gamma,
                budget: b,
                epochs: 1,
                average: false,
                ..BsgdParams::default()
            }
            .check(n)
            .expect("params");
            let mut monitor = no_monitor;
            let state = train_bsgd_state(
                &x,
                Targets::classes(&y, 2),
                None,
                &params,
                &mut monitor,
                None,
            )
            .expect("training");
            let svs = state.support_vectors();
            assert_eq!(svs.len(), b, "the budget is full");
            let unmerged = svs.coef(svs.smallest().expect("svs"))[0].abs() * svs.scale();
            let norms = x.sq_norms();
            let (mut kv, mut f) = (vec![0.0; b + 1], [0.0]);
            let mut step_svs = svs.clone();
            let mut i = 0usize;
            group.bench_function(BenchmarkId::new("step", b), |bch| {
                bch.iter(|| {
                    i = (i + 1) % n;
                    step_svs.kernel_row_and_decision(&x, i, norms[i], gamma, &mut kv, &mut f);
                    black_box(f[0])
                })
            });
            // Steps that each insert their row and bring the model back to B, as training does
            // at a violation: the store stays at B + 1 -> B, nothing is cloned or allocated.
            for (label, reuse_row) in [
                ("step+insert+merge", true),
                ("step+insert+merge-row-computed", false),
            ] {
                let mut s = svs.clone();
                let mut m =
                    BudgetMaintainer::new(Maintenance::Merge(MergeSearch::LookupWd), gamma, None);
                let mut row = vec![0.0; 2 * b + 2];
                group.bench_function(BenchmarkId::new(label, b), |bch| {
                    bch.iter(|| {
                        i = (i + 1) % n;
                        s.kernel_row_and_decision(&x, i, norms[i], gamma, &mut row, &mut f);
                        let sign = if y[i] == 1 { 1.0 } else { -1.0 };
                        s.push_row(&x, i, &[sign * unmerged]).expect("room");
                        if reuse_row {
                            m.reduce_after_push(&mut s, &row[..b]);
                        } else {
                            m.reduce(&mut s);
                        }
                        black_box(f[0])
                    })
                });
                assert_eq!(s.len(), b);
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = floor, events
}
criterion_main!(benches);
