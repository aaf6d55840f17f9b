//! The polish's conjugate gradients at m = 3,000 support vectors (hard10d's budget in
//! `../shared/checks/big_budget.py`): one application of the preconditioner P^-1 (what every
//! product of the Hessian-free solve pays besides the rows) and one rescale of it (each time the
//! squared rows' weight moves 4x). Both are bound by reading m x m f32 factors.
//! `cargo bench --bench preconditioner`

use budgetsvm::core::budgeted::polish::{preconditioner_ridge, Preconditioner};
use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::rows::DenseView;
use budgetsvm::core::kernels::kernel_block::kernel_matrix;
use criterion::{black_box, criterion_group, criterion_main, Criterion};

/// m in an optimised build; `cargo test --all-targets` runs each bench once unoptimised, only
/// to see that it runs, so there a small one.
const M: usize = if cfg!(debug_assertions) { 300 } else { 3000 };
const DIM: usize = 10;

fn kss() -> Vec<f64> {
    let mut rng = Rng::new(7);
    let x: Vec<f64> = (0..M * DIM).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
    let view = DenseView::new(&x, M, DIM).expect("rows");
    let mut k = vec![0.0; M * M];
    kernel_matrix(&view, &view, 0.5, &mut k).expect("kernel");
    k
}

fn bench(c: &mut Criterion) {
    let k = kss();
    let ridge = preconditioner_ridge(&k, M);
    let mut pre = Preconditioner::new(&k, M, ridge, &mut || Ok(()))
        .expect("no interruption")
        .expect("factor");
    assert!(pre.rescale(10.0, &mut || Ok(())).expect("no interruption"));
    let mut rng = Rng::new(3);
    let r: Vec<f64> = (0..=M).map(|_| rng.next_f64() - 0.5).collect();
    let mut out = vec![0.0; M + 1];
    let mut group = c.benchmark_group(format!("preconditioner_{M}"));
    group.sample_size(20);
    group.bench_function("apply", |b| {
        b.iter(|| pre.apply(black_box(&r), &mut out, 1.0))
    });
    group.sample_size(10);
    let mut scale = 10.0;
    group.bench_function("rescale", |b| {
        b.iter(|| {
            scale = if scale == 10.0 { 100.0 } else { 10.0 };
            assert!(pre.rescale(scale, &mut || Ok(())).expect("no interruption"))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
