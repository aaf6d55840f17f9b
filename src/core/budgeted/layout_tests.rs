//! The dense and sparse support vector layouts train the same model (same seed, same data), for
//! every budget maintenance and merge search, binary and multi-class, BSGD and BSCA; and the
//! sparse layout trains on inputs whose number of columns no dense store could hold.

use crate::core::budget::maintenance::Maintenance;
use crate::core::budget::model::{BudgetModel, SvLayout};
use crate::core::budgeted::bsca::{train_bsca, BscaParams};
use crate::core::budgeted::bsgd::{train_bsgd, BsgdParams};
use crate::core::budgeted::problem::Targets;
use crate::core::common::progress::no_monitor;
use crate::core::common::rng::Rng;
use crate::core::data::rows::CsrView;

/// Random sparse rows whose label depends on a few columns; columns spread over `n_cols`.
struct SparseData {
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f64>,
    y: Vec<u32>,
    n_cols: usize,
}

fn sparse_data(n: usize, n_cols: usize, n_classes: u32, seed: u64) -> SparseData {
    let mut rng = Rng::new(seed);
    let mut d = SparseData {
        indptr: vec![0],
        indices: Vec::new(),
        values: Vec::new(),
        y: Vec::new(),
        n_cols,
    };
    // 40 "terms", spread over the column range (so huge n_cols means huge column ids).
    let stride = (n_cols / 40).max(1);
    for _ in 0..n {
        let mut cols: Vec<usize> = (0..2 + rng.below(8))
            .map(|_| (rng.below(40) * stride).min(n_cols - 1))
            .collect();
        cols.sort_unstable();
        cols.dedup();
        let mut score = 0.0;
        for &c in &cols {
            let v = 0.2 + rng.next_f64();
            if (c / stride).is_multiple_of(3) {
                score += v;
            }
            d.indices.push(c as i64);
            d.values.push(v);
        }
        d.indptr.push(d.indices.len() as i64);
        d.y.push((score * 1.5) as u32 % n_classes);
    }
    d
}

fn assert_same_model(a: &BudgetModel, b: &BudgetModel, what: &str) {
    assert_eq!(a.n_sv(), b.n_sv(), "{what}: number of SVs");
    for (x, y) in a.coef.iter().zip(&b.coef) {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + x.abs()),
            "{what}: coef {x} vs {y}"
        );
    }
    let (da, db) = (
        a.support_vectors.to_dense(a.n_sv(), a.dim),
        b.support_vectors.to_dense(b.n_sv(), b.dim),
    );
    for (x, y) in da.iter().zip(&db) {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + x.abs()),
            "{what}: sv {x} vs {y}"
        );
    }
}

/// `train` with the dense and with the sparse layout gives the same model.
fn assert_layouts_agree(what: &str, train: impl Fn(SvLayout) -> BudgetModel) {
    let (dense, sparse) = (train(SvLayout::Dense), train(SvLayout::Sparse));
    assert_same_model(&dense, &sparse, what);
}

#[test]
fn dense_and_sparse_layouts_train_the_same_model() {
    for (seed, n_classes) in [(1u64, 2u32), (2, 3), (3, 2), (4, 4)] {
        let d = sparse_data(300, 60, n_classes, seed);
        let x = CsrView::new(&d.indptr, &d.indices, &d.values, d.n_cols).unwrap();
        for maintenance in Maintenance::ALL {
            let what = format!("seed {seed}, {n_classes} classes, {maintenance:?}");
            let targets = Targets::classes(&d.y, n_classes as usize);
            assert_layouts_agree(&format!("BSGD {what}"), |layout| {
                let params = BsgdParams {
                    c: 10.0,
                    gamma: 0.7,
                    budget: 12,
                    epochs: 2,
                    maintenance,
                    seed,
                    layout,
                    ..BsgdParams::default()
                };
                let valid = params.check(d.y.len()).unwrap();
                train_bsgd(&x, targets, None, &valid, &mut no_monitor, None)
                    .unwrap()
                    .0
            });
            assert_layouts_agree(&format!("BSCA {what}"), |layout| {
                let params = BscaParams {
                    c: 1.0,
                    gamma: 0.7,
                    budget: 12,
                    epochs: 2,
                    maintenance,
                    seed,
                    layout,
                    average: seed % 2 == 0,
                    ..BscaParams::default()
                };
                let valid = params.check(d.y.len()).unwrap();
                train_bsca(&x, targets, None, &valid, None, &mut no_monitor, None)
                    .unwrap()
                    .0
            });
        }
    }
}

#[test]
fn sparse_layout_trains_and_predicts_with_a_trillion_columns() {
    let n_cols = 1_000_000_000_000usize;
    let d = sparse_data(200, n_cols, 2, 9);
    let x = CsrView::new(&d.indptr, &d.indices, &d.values, n_cols).unwrap();
    let small = sparse_data(200, 40, 2, 9);
    let xs = CsrView::new(&small.indptr, &small.indices, &small.values, 40).unwrap();
    let sparse = BsgdParams {
        c: 10.0,
        gamma: 0.7,
        budget: 10,
        epochs: 2,
        layout: SvLayout::Sparse,
        ..BsgdParams::default()
    };
    for maintenance in Maintenance::ALL {
        let params = BsgdParams {
            maintenance,
            ..sparse.clone()
        };
        let valid = params.check(d.y.len()).unwrap();
        let mut m = no_monitor;
        let (model, _) =
            train_bsgd(&x, Targets::classes(&d.y, 2), None, &valid, &mut m, None).unwrap();
        assert!(model.n_sv() <= 10 && model.n_sv() > 0);
        let mut out = vec![0.0; d.y.len()];
        model.decision_function(&x, &mut out).unwrap();
        // The same problem with the terms at columns 0..40 gives the same decision values.
        let (model_small, _) = train_bsgd(
            &xs,
            Targets::classes(&small.y, 2),
            None,
            &valid,
            &mut m,
            None,
        )
        .unwrap();
        let mut out_small = vec![0.0; d.y.len()];
        model_small.decision_function(&xs, &mut out_small).unwrap();
        for (a, b) in out.iter().zip(&out_small) {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + a.abs()),
                "{maintenance:?}: {a} vs {b}"
            );
        }
    }
    // The dense layout refuses cleanly instead of trying to allocate.
    let params = BsgdParams {
        layout: SvLayout::Dense,
        ..BsgdParams::default()
    };
    let valid = params.check(d.y.len()).unwrap();
    let mut m = no_monitor;
    let err = train_bsgd(&x, Targets::classes(&d.y, 2), None, &valid, &mut m, None).unwrap_err();
    assert!(err.to_string().contains("sv_storage"), "{err}");
}
