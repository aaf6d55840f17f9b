//! Kernel row throughput: the decision-value hot loop of BSGD (one input row against B support
//! vectors), dense and sparse, next to the same loop without exp (plain multiply-adds) so the
//! report says how close to the machine's limit the kernel loop runs; plus a parallel block of
//! kernel rows. `cargo bench --bench kernel`

use budgetsvm::core::budget::model::{SupportVectors, SvLayout};
use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::rows::{CsrView, DenseView, Rows};
use budgetsvm::core::kernels::kernel_block::kernel_matrix;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn dense_rows(n: usize, dim: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..n * dim).map(|_| rng.next_f64()).collect()
}

/// a9a-like sparse rows: `nnz` ones per row among `dim` columns.
fn sparse_rows(n: usize, dim: usize, nnz: usize, seed: u64) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let mut indptr = vec![0i32];
    let mut indices = Vec::new();
    for _ in 0..n {
        let mut cols: Vec<i32> = (0..dim as i32).collect();
        rng.shuffle(&mut cols);
        let mut row = cols[..nnz].to_vec();
        row.sort_unstable();
        indices.extend(row);
        indptr.push(indices.len() as i32);
    }
    let values = vec![1.0; indices.len()];
    (indptr, indices, values)
}

fn svs_from<R: Rows>(x: &R, budget: usize) -> SupportVectors {
    let mut svs = SupportVectors::new(x.n_cols(), budget + 1, 1, SvLayout::Dense).unwrap();
    for i in 0..budget {
        svs.push_row(x, i, &[1.0]).unwrap();
    }
    svs
}

fn bench_rows<R: Rows>(c: &mut Criterion, name: &str, x: &R, budget: usize) {
    let mut svs = svs_from(x, budget);
    let norms = x.sq_norms();
    let mut out = vec![0.0; budget + 1];
    let n = x.n_rows();
    let mut group = c.benchmark_group(format!("kernel_row_{name}"));
    group.throughput(Throughput::Elements(budget as u64));
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("multiply_add_only", budget), |b| {
        b.iter(|| {
            i = (i + 1) % n;
            svs.dots_with_row(x, i, &mut out);
            black_box(out[0])
        })
    });
    group.bench_function(BenchmarkId::new("rbf", budget), |b| {
        b.iter(|| {
            i = (i + 1) % n;
            svs.dots_with_row(x, i, &mut out);
            svs.dots_to_kernel(0.5, norms[i], &mut out);
            black_box(out[0])
        })
    });
    group.finish();
}

fn kernel_rows(c: &mut Criterion) {
    for budget in [100usize, 500] {
        let (n, dim) = (2048, 123);
        let xs = dense_rows(n, dim, 1);
        let dense = DenseView::new(&xs, n, dim).expect("shape");
        bench_rows(c, &format!("dense_{n}x{dim}"), &dense, budget);
        let (indptr, indices, values) = sparse_rows(n, dim, 14, 2);
        let sparse = CsrView::new(&indptr, &indices, &values, dim).expect("csr");
        bench_rows(c, &format!("sparse_{n}x{dim}_nnz14"), &sparse, budget);
    }
}

fn kernel_block(c: &mut Criterion) {
    let (n, m, dim) = (512, 2048, 123);
    let xs = dense_rows(n, dim, 3);
    let ys = dense_rows(m, dim, 4);
    let x = DenseView::new(&xs, n, dim).expect("shape");
    let y = DenseView::new(&ys, m, dim).expect("shape");
    let mut out = vec![0.0; n * m];
    let mut group = c.benchmark_group("kernel_block");
    group.throughput(Throughput::Elements((n * m) as u64));
    group.sample_size(20);
    group.bench_function(
        BenchmarkId::new("rbf_dense", format!("{n}x{m}x{dim}")),
        |b| b.iter(|| kernel_matrix(&x, &y, 0.5, &mut out).expect("kernel")),
    );
    group.finish();
}

criterion_group!(benches, kernel_rows, kernel_block);
criterion_main!(benches);
