//! Blocks of kernel rows K[rows, :] as matrix products: the kernel-row cache's own path (a
//! feature-major copy, one vectorised axpy per non-zero of x_i, block-major over a batch)
//! against three matrix-multiply crates (faer, gemm, matrixmultiply: X_rows X^T into f64, then
//! the same RBF transform and rounding to f32), one thread, on a9a-like data (123 columns, 0/1,
//! 11% non-zero) and ijcnn1-like data (22 dense columns), blocks of 1, 8 and 64 rows against
//! 32,768 rows. The exact solvers ask for one or two rows at a time (the pair selection needs
//! row i before it can choose j) and for batches of up to 64 in the gradient reconstruction.
//!
//!     cargo bench --bench kernel_block --features gemm-compare
//!
//! Results and the choice made from them: docs/kernel_block.md.

use budgetsvm::core::common::parallel;
use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::rows::DenseView;
use budgetsvm::core::kernels::kernel_cache::KernelRowCache;
use budgetsvm::core::simd;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const N: usize = 32_768;
const GAMMA: f64 = 0.05;

/// Row-major n x d data: 0/1 with the given density (a9a-like) or uniform in [-1, 1] with 40%
/// zeros (ijcnn1-like).
fn data(d: usize, binary: bool, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..N * d)
        .map(|_| {
            let u = rng.next_f64();
            if binary {
                f64::from(u8::from(u < 0.11))
            } else if u < 0.4 {
                0.0
            } else {
                rng.next_f64() * 2.0 - 1.0
            }
        })
        .collect()
}

/// Kernel rows from a block of dot products, as the cache finishes them.
fn finish(dots: &mut [f64], rows: &[usize], norms: &[f64], out: &mut [f32]) {
    for ((dots, out), &i) in dots.chunks_mut(N).zip(out.chunks_mut(N)).zip(rows) {
        simd::rbf_from_dots(GAMMA, norms[i], norms, dots);
        for (o, v) in out.iter_mut().zip(dots.iter()) {
            *o = *v as f32;
        }
    }
}

fn gather(x: &[f64], d: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|&i| x[i * d..(i + 1) * d].iter().copied())
        .collect()
}

#[derive(Clone, Copy)]
enum Crate {
    Faer,
    Gemm,
    MatrixMultiply,
}

/// dots (r x N, row-major) = X[rows] X^T by one crate's matrix product, on one thread.
fn product(method: Crate, x: &[f64], d: usize, rows: &[usize], dots: &mut [f64]) {
    let r = rows.len();
    let xr = gather(x, d, rows);
    match method {
        Crate::Faer => {
            let lhs = faer::MatRef::from_row_major_slice(&xr, r, d);
            let rhs = faer::MatRef::from_row_major_slice(x, N, d).transpose();
            let dst = faer::MatMut::from_row_major_slice_mut(dots, r, N);
            faer::linalg::matmul::matmul(dst, faer::Accum::Replace, lhs, rhs, 1.0, faer::Par::Seq);
        }
        // SAFETY (both): dst is r x N row-major, lhs r x d row-major, rhs = X^T (d x N, column j
        // is row j of X); the strides stay within the three buffers of exactly these sizes.
        Crate::Gemm => unsafe {
            gemm::gemm(
                r,
                N,
                d,
                dots.as_mut_ptr(),
                1,
                N as isize,
                false,
                xr.as_ptr(),
                1,
                d as isize,
                x.as_ptr(),
                d as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        },
        Crate::MatrixMultiply => unsafe {
            matrixmultiply::dgemm(
                r,
                d,
                N,
                1.0,
                xr.as_ptr(),
                d as isize,
                1,
                x.as_ptr(),
                1,
                d as isize,
                0.0,
                dots.as_mut_ptr(),
                N as isize,
                1,
            )
        },
    }
}

fn bench(c: &mut Criterion) {
    parallel::set_num_threads(1).unwrap();
    for (name, d, binary) in [
        ("a9a-like d=123", 123, true),
        ("ijcnn1-like d=22", 22, false),
    ] {
        let x = data(d, binary, 7);
        let view = DenseView::new(&x, N, d).unwrap();
        let norms: Vec<f64> = x.chunks(d).map(|r| r.iter().map(|v| v * v).sum()).collect();
        let mut group = c.benchmark_group(format!("kernel_block/{name}"));
        group.sample_size(20);
        for r in [1usize, 8, 64] {
            group.throughput(Throughput::Elements((r * N) as u64));
            // Three disjoint blocks of rows in turn, the cache holding at most two blocks (and
            // at least two rows), so that every request computes its rows.
            let mut rng = Rng::new(r as u64);
            let third = N / 3;
            let blocks: Vec<Vec<usize>> = (0..3)
                .map(|k| (0..r).map(|_| k * third + rng.below(third)).collect())
                .collect();
            let mut cache =
                KernelRowCache::new(&view, Kernel::rbf(GAMMA), r.max(2) * N * 4).unwrap();
            let reference: Vec<f32> = {
                let rows = cache.rows(&blocks[0]).unwrap();
                (0..r).flat_map(|k| rows.row(k).to_vec()).collect()
            };
            let mut turn = 0;
            group.bench_function(BenchmarkId::new("budgetsvm cache", r), |b| {
                b.iter(|| {
                    turn = (turn + 1) % 3;
                    let rows = cache.rows(&blocks[turn]).unwrap();
                    rows.row(0)[0]
                })
            });
            let mut dots = vec![0.0f64; r * N];
            let mut out = vec![0.0f32; r * N];
            for (label, method) in [
                ("faer", Crate::Faer),
                ("gemm", Crate::Gemm),
                ("matrixmultiply", Crate::MatrixMultiply),
            ] {
                // The same block as the cache's, to rounding.
                product(method, &x, d, &blocks[0], &mut dots);
                finish(&mut dots, &blocks[0], &norms, &mut out);
                let worst = out
                    .iter()
                    .zip(&reference)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(worst <= 1e-6, "{label}: {worst}");
                group.bench_function(BenchmarkId::new(label, r), |b| {
                    b.iter(|| {
                        turn = (turn + 1) % 3;
                        product(method, &x, d, &blocks[turn], &mut dots);
                        finish(&mut dots, &blocks[turn], &norms, &mut out);
                        out[0]
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
