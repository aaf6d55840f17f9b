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

/// The floor's loops, written once over the library's vector levels (`Simd`: the same
/// instructions as the production loops) and compiled for each level in `avx2` and `avx512`.
#[cfg(target_arch = "x86_64")]
mod lanes {
    use super::Floor;
    use budgetsvm::core::simd::{exp_in_range, Simd};

    /// exp(x) for x <= 0 by the library's reduction and a degree-12 Taylor polynomial
    /// (Estrin-free Horner: the floor counts the multiply-adds, 13 of them). Arguments below -708
    /// are clamped, with no underflow to 0: the floor leaves out what it need not do.
    #[inline(always)]
    pub fn exp<S: Simd>(s: S, x: S::F) -> S::F {
        exp_in_range::<S, 12>(s, s.max(x, s.splat(-708.0)))
    }

    /// One block of U vectors of SVs: their dot products with the input (one broadcast
    /// multiply-add per non-zero and vector, feature c of the block's SVs at `tile + c * stride`),
    /// then distance, exponential and the decision sum into `f`, all in registers.
    ///
    /// # Safety
    /// The block's values lie inside the SV store; pn and pc hold U vectors.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn block<S: Simd, const U: usize>(
        s: S,
        tile: *const f64,
        stride: usize,
        cols: &[usize],
        vals: &[f64],
        pn: *const f64,
        pc: *const f64,
        xn: S::F,
        g: S::F,
        f: &mut [S::F; 4],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut acc = [s.zero(); U];
            for (&c, &xc) in cols.iter().zip(vals) {
                let v = s.splat(xc);
                let row = tile.add(c * stride);
                for (l, a) in acc.iter_mut().enumerate() {
                    *a = s.fmadd(v, s.load(row.add(S::LANES * l)), *a);
                }
            }
            for (l, a) in acc.iter().enumerate() {
                let d2 = s.fnmadd(s.splat(2.0), *a, s.add(xn, s.load(pn.add(S::LANES * l))));
                let k = exp(s, s.mul(g, s.max(d2, s.zero())));
                f[l] = s.fmadd(k, s.load(pc.add(S::LANES * l)), f[l]);
            }
        }
    }

    /// The whole step's unavoidable arithmetic in one pass, a block of four vectors of SVs at a
    /// time. AVX2's store is feature-major with stride b (`svt[c * b + j]`); AVX-512's holds the
    /// SVs in tiles of 32 (the last may hold 16), tile t holding SVs 32 t.., feature-major
    /// inside (`tiled` below), so one block's values are one contiguous run of memory. The input
    /// is given by its non-zeros (a dense input passes columns 0..d).
    ///
    /// # Safety
    /// `fl` holds b values per feature, b a multiple of 16, laid out by `tiled`.
    #[inline(always)]
    pub unsafe fn step<S: Simd>(
        s: S,
        fl: &Floor,
        cols: &[usize],
        vals: &[f64],
        x_norm: f64,
    ) -> f64 {
        let (b, d) = (fl.b, fl.svt.len() / fl.b);
        let (ps, pn, pc) = (fl.svt.as_ptr(), fl.sv_norms.as_ptr(), fl.coef.as_ptr());
        let (g, xn) = (s.splat(-fl.gamma), s.splat(x_norm));
        let mut f = [s.zero(); 4];
        let mut j = 0;
        // SAFETY: the blocks lie inside the store (b a multiple of 16).
        unsafe {
            if S::LANES == 4 {
                while j < b {
                    let (n, c) = (pn.add(j), pc.add(j));
                    block::<_, 4>(s, ps.add(j), b, cols, vals, n, c, xn, g, &mut f);
                    j += 16;
                }
            } else {
                while j + 32 <= b {
                    let (t, n, c) = (ps.add(j * d), pn.add(j), pc.add(j));
                    block::<_, 4>(s, t, 32, cols, vals, n, c, xn, g, &mut f);
                    j += 32;
                }
                if j < b {
                    let (t, n, c) = (ps.add(j * d), pn.add(j), pc.add(j));
                    block::<_, 2>(s, t, 16, cols, vals, n, c, xn, g, &mut f);
                }
            }
        }
        s.sum(s.add(s.add(f[0], f[1]), s.add(f[2], f[3])))
    }

    /// Only the B exponentials (for the report's breakdown).
    ///
    /// # Safety
    /// None beyond the level's.
    #[inline(always)]
    pub unsafe fn exps<S: Simd>(s: S, args: &[f64], out: &mut [f64]) {
        let w = S::LANES;
        // SAFETY: whole chunks stay inside the slices.
        unsafe {
            for (a, o) in args.chunks_exact(w).zip(out.chunks_exact_mut(w)) {
                s.store(o.as_mut_ptr(), exp(s, s.load(a.as_ptr())));
            }
        }
    }
}

/// A level's entry points: `#[target_feature]` functions, where the generic loops inline.
macro_rules! floor_level {
    ($level:ident, $token:ident, $features:literal) => {
        #[cfg(target_arch = "x86_64")]
        mod $level {
            use super::{lanes, Floor};
            use budgetsvm::core::simd::$token;

            /// `lanes::step` on this level.
            ///
            /// # Safety
            /// The CPU must run the level; `lanes::step`'s contract.
            #[target_feature(enable = $features)]
            pub unsafe fn step(fl: &Floor, cols: &[usize], vals: &[f64], x_norm: f64) -> f64 {
                // SAFETY: the caller's contract.
                unsafe { lanes::step($token::new_unchecked(), fl, cols, vals, x_norm) }
            }

            /// Only the B exponentials (for the report's breakdown).
            ///
            /// # Safety
            /// The CPU must run the level.
            #[target_feature(enable = $features)]
            pub unsafe fn exps(args: &[f64], out: &mut [f64]) {
                // SAFETY: the caller's contract.
                unsafe { lanes::exps($token::new_unchecked(), args, out) }
            }
        }
    };
}

floor_level!(avx2, Avx2, "avx2,fma");
floor_level!(avx512, Avx512, "avx512f,fma");

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

/// What the floor reads: the first `b` rows laid out by `tiled`, their squared norms,
/// coefficients, and gamma.
struct Floor {
    svt: Vec<f64>,
    b: usize,
    sv_norms: Vec<f64>,
    coef: Vec<f64>,
    gamma: f64,
}

impl Floor {
    fn new<R: Rows>(x: &R, b: usize, gamma: f64) -> Floor {
        let d = x.n_cols();
        let mut svt = vec![0.0; d * b];
        for j in 0..b {
            x.for_each_nonzero(j, |c, v| svt[tiled(j, c, b, d)] = v);
        }
        let sv_norms = (0..b).map(|j| x.sq_norm(j)).collect();
        let coef = (0..b)
            .map(|j| if j % 2 == 0 { 0.01 } else { -0.02 })
            .collect();
        Floor {
            svt,
            b,
            sv_norms,
            coef,
            gamma,
        }
    }
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

/// The floor's decision value for a row: the AVX-512 floor where the CPU has it, else AVX2.
///
/// # Safety
/// AVX2 and FMA must run here.
#[cfg(target_arch = "x86_64")]
unsafe fn floor_step(fl: &Floor, cols: &[usize], vals: &[f64], x_norm: f64) -> f64 {
    // SAFETY: forwarded from the caller; AVX-512 only where detected.
    unsafe {
        if has_avx512() {
            avx512::step(fl, cols, vals, x_norm)
        } else {
            avx2::step(fl, cols, vals, x_norm)
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
    let fl = Floor::new(x, b, gamma);
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
            let v = unsafe { floor_step(&fl, &cols, &vals, norm) };
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
                let v = unsafe { floor_step(&fl, cols, vals, norms[i]) };
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
