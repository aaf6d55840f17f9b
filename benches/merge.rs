//! One budget maintenance event (merge of the smallest SV with its best partner) at B = 100 and
//! B = 500, for each partner search; plus removal and projection for scale.
//! `cargo bench --bench merge`

use budgetsvm::core::budget::maintenance::{BudgetMaintainer, Maintenance};
use budgetsvm::core::budget::merge::{MergeSearch, MergeTable};
use budgetsvm::core::budget::model::{SupportVectors, SvLayout};
use budgetsvm::core::common::rng::Rng;
use budgetsvm::core::data::rows::DenseView;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};

/// B + 1 support vectors of one sign (as in binary BSGD) with coefficients like a late SGD phase:
/// one fresh small coefficient, the rest merged ones of varied size. Dimension 22 (ijcnn1) and
/// gamma 2 as in the paper's IJCNN setting.
fn full_budget(budget: usize, dim: usize, seed: u64) -> SupportVectors {
    let mut rng = Rng::new(seed);
    let n = budget + 1;
    let xs: Vec<f64> = (0..n * dim).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let x = DenseView::new(&xs, n, dim).expect("shape");
    let mut svs = SupportVectors::new(dim, n, 1, SvLayout::Dense).unwrap();
    for i in 0..n {
        let c = if i == n - 1 {
            0.01
        } else {
            0.05 + rng.next_f64()
        };
        svs.push_row(&x, i, &[c]).unwrap();
    }
    svs
}

fn merge_event(c: &mut Criterion) {
    MergeTable::shared(); // build the table outside the measurement
    let (dim, gamma) = (22, 0.05);
    let mut group = c.benchmark_group("maintenance_event");
    for budget in [100usize, 500] {
        let svs = full_budget(budget, dim, 7);
        let mut cases: Vec<(String, Maintenance)> = MergeSearch::ALL
            .iter()
            .map(|s| (format!("merge-{}", s.name()), Maintenance::Merge(*s)))
            .collect();
        cases.push(("remove".into(), Maintenance::Remove));
        for (name, maintenance) in cases {
            let mut maintainer = BudgetMaintainer::new(maintenance, gamma, None);
            group.bench_with_input(BenchmarkId::new(name, budget), &svs, |b, svs| {
                b.iter_batched_ref(
                    || svs.clone(),
                    |s| maintainer.reduce(s),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

fn table_build(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup_table_build");
    group.sample_size(10);
    group.bench_function("400x400", |b| {
        b.iter(|| MergeTable::build(400).expect("size"))
    });
    group.finish();
}

criterion_group!(benches, merge_event, table_build);
criterion_main!(benches);
