//! The exact machines' tests: one-vs-one pairs, C paths, regression, one-class, stored
//! kernel rows and the rows' precision.

use super::*;

fn train_kernel_svc<R: Rows>(
    x: &R,
    y: &[u32],
    w: Option<&[f64]>,
    k: usize,
    params: &ValidExactParams,
    m: Monitor<'_>,
) -> Result<Vec<PairModel>> {
    let cs = [params.0.c];
    let mut path = train_one_vs_one_path(
        x,
        y,
        w,
        k,
        SvcFormulation::C,
        &cs,
        params,
        KernelFrom::Features,
        m,
    )?;
    Ok(path.remove(0))
}

fn train_kernel_svr<R: Rows>(
    x: &R,
    z: &[f64],
    w: Option<&[f64]>,
    eps: f64,
    params: &ValidExactParams,
    m: Monitor<'_>,
) -> Result<ExactModel> {
    let formulation = SvrFormulation::Epsilon(eps);
    let cs = [params.0.c];
    let mut path =
        train_regression_path(x, z, w, formulation, &cs, params, KernelFrom::Features, m)?;
    Ok(path.remove(0))
}
use crate::core::common::progress::no_monitor;
use crate::core::common::rng::Rng;
use crate::core::data::rows::DenseView;
use crate::core::kernels::kernel::tests::explicit_kernel;

/// Noisy points of three classes in [-1, 1]^2 (labels by the first coordinate, a tenth
/// flipped) and a target for regression.
fn noisy_rows(n: usize, seed: u64) -> (Vec<f64>, Vec<u32>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let (mut xs, mut ys, mut zs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (a, b) = (rng.next_f64() * 2.0 - 1.0, rng.next_f64() * 2.0 - 1.0);
        xs.extend([a, b]);
        let class = ((a + 1.0) * 1.5).floor().min(2.0) as u32;
        ys.push(if rng.next_f64() < 0.1 {
            (class + 1) % 3
        } else {
            class
        });
        zs.push((3.0 * a).sin() + b * b + 0.2 * (rng.next_f64() - 0.5));
    }
    (xs, ys, zs)
}

/// sum_s coef_s k(x_s, x_i) - rho at every training row, from the kernel's definition.
fn decision_values(xs: &[f64], d: usize, kernel: Kernel, model: &ExactModel) -> Vec<f64> {
    (0..xs.len() / d)
        .map(|i| {
            let row = &xs[i * d..(i + 1) * d];
            let sum: f64 = model
                .support
                .iter()
                .zip(&model.coef)
                .map(|(&s, &c)| c * explicit_kernel(kernel, &xs[s * d..(s + 1) * d], row))
                .sum();
            sum - model.rho
        })
        .collect()
}

/// A C path (warm starts, one cache whose positions the shrinking swapped) reaches each
/// C's optimum as a cold fit does: the same objective and decision values, whatever the
/// order of the Cs (down as well as up), the solver, the shrinking and the cache's size.
#[test]
fn a_c_path_reaches_every_cs_cold_optimum() {
    let (n, d) = (300, 2);
    let (xs, ys, zs) = noisy_rows(n, 5);
    let x = DenseView::new(&xs, n, d).unwrap();
    let weights: Vec<f64> = (0..n).map(|i| 0.5 + (i % 4) as f64 * 0.5).collect();
    let kernel = Kernel::rbf(2.0);
    let cs = [0.5, 2.0, 8.0, 0.25, 64.0];
    let close = |a: &ExactModel, b: &ExactModel, what: &str| {
        let scale = a.objective.abs().max(1.0);
        assert!(
            (a.objective - b.objective).abs() <= 1e-5 * scale,
            "{what}: objective {} against {} cold",
            a.objective,
            b.objective
        );
        let (fa, fb) = (
            decision_values(&xs, d, kernel, a),
            decision_values(&xs, d, kernel, b),
        );
        let worst = fa
            .iter()
            .zip(&fb)
            .map(|(u, v)| (u - v).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-2, "{what}: decision values {worst} apart");
    };
    for solver in [ExactSolver::Smo, ExactSolver::Alfpgm] {
        for shrinking in [true, false] {
            for cache_bytes in [1 << 24, 8 * n * 8] {
                let params = |c: f64| {
                    ExactParams {
                        c,
                        kernel,
                        tol: 1e-7,
                        solver,
                        shrinking,
                        cache_bytes,
                        alfpgm: AlfpgmParams {
                            n_pairs: 8,
                            ..Default::default()
                        },
                        ..Default::default()
                    }
                    .check()
                    .unwrap()
                };
                let what = format!("{solver:?} shrinking={shrinking} cache={cache_bytes}");
                let path = train_one_vs_one_path(
                    &x,
                    &ys,
                    Some(&weights),
                    3,
                    SvcFormulation::C,
                    &cs,
                    &params(cs[0]),
                    KernelFrom::Features,
                    &mut no_monitor,
                )
                .unwrap();
                let svr = train_regression_path(
                    &x,
                    &zs,
                    None,
                    SvrFormulation::Epsilon(0.1),
                    &cs,
                    &params(cs[0]),
                    KernelFrom::Features,
                    &mut no_monitor,
                )
                .unwrap();
                for (k, &c) in cs.iter().enumerate() {
                    let cold =
                        train_kernel_svc(&x, &ys, Some(&weights), 3, &params(c), &mut no_monitor)
                            .unwrap();
                    assert_eq!(path[k].len(), 3);
                    for (warm, cold) in path[k].iter().zip(&cold) {
                        assert_eq!(warm.classes, cold.classes);
                        close(&warm.model, &cold.model, &format!("{what} C={c} svc"));
                    }
                    let cold =
                        train_kernel_svr(&x, &zs, None, 0.1, &params(c), &mut no_monitor).unwrap();
                    close(&svr[k], &cold, &format!("{what} C={c} svr"));
                }
            }
        }
    }
}

/// The path's Cs: several only where C is the problem's, each finite and > 0.
#[test]
fn a_c_path_refuses_what_has_no_path() {
    let (xs, ys, zs) = noisy_rows(40, 1);
    let x = DenseView::new(&xs, 40, 2).unwrap();
    let params = ExactParams::default().check().unwrap();
    let svc = |formulation, cs: &[f64]| {
        train_one_vs_one_path(
            &x,
            &ys,
            None,
            3,
            formulation,
            cs,
            &params,
            KernelFrom::Features,
            &mut no_monitor,
        )
        .map(|_| ())
    };
    assert!(svc(SvcFormulation::C, &[]).is_err());
    assert!(svc(SvcFormulation::Nu(0.3), &[1.0, 2.0]).is_err());
    assert!(svc(SvcFormulation::C, &[1.0, f64::INFINITY]).is_err());
    assert!(svc(SvcFormulation::C, &[1.0, 0.0]).is_err());
    assert!(svc(SvcFormulation::C, &[1.0, 3.0]).is_ok());
    let svr = train_regression_path(
        &x,
        &zs,
        None,
        SvrFormulation::Nu(0.5),
        &[1.0, 2.0],
        &params,
        KernelFrom::Features,
        &mut no_monitor,
    );
    assert!(svr.is_err());
}

#[test]
fn one_vs_one_pairs_agree_between_solvers_and_threads() {
    let mut rng = Rng::new(8);
    let (n, d) = (240, 2);
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for i in 0..n {
        let (a, b) = (rng.next_f64() * 2.0 - 1.0, rng.next_f64() * 2.0 - 1.0);
        xs.extend([a, b]);
        let c = if i < 3 {
            i as u32
        } else {
            ((a + 1.0) * 1.5).floor().min(2.0) as u32
        };
        ys.push(c);
    }
    let x = DenseView::new(&xs, n, d).unwrap();
    let mut results = Vec::new();
    for (solver, threads) in [
        (ExactSolver::Smo, None),
        (ExactSolver::Alfpgm, Some(1)),
        (ExactSolver::Alfpgm, Some(2)),
    ] {
        let params = ExactParams {
            c: 5.0,
            kernel: Kernel::rbf(2.0),
            tol: 1e-5,
            solver,
            n_threads: threads,
            alfpgm: AlfpgmParams {
                n_pairs: 8,
                ..Default::default()
            },
            ..Default::default()
        }
        .check()
        .unwrap();
        let pairs = train_kernel_svc(&x, &ys, None, 3, &params, &mut no_monitor).unwrap();
        assert_eq!(
            pairs.iter().map(|p| p.classes).collect::<Vec<_>>(),
            vec![(0, 1), (0, 2), (1, 2)]
        );
        for p in &pairs {
            assert!(p.model.converged);
            let sum: f64 = p.model.coef.iter().sum();
            assert!(sum.abs() < 1e-9, "y^T a = {sum}");
            for &i in &p.model.support {
                assert!(ys[i] == p.classes.0 || ys[i] == p.classes.1);
            }
        }
        results.push(pairs);
    }
    for k in 0..3 {
        let f0 = results[0][k].model.objective;
        for r in &results[1..] {
            assert!((r[k].model.objective - f0).abs() < 1e-5 * (1.0 + f0.abs()));
        }
    }
    // One thread or two: the same arithmetic, the same model.
    assert_eq!(results[1][0].model.coef, results[2][0].model.coef);
}

/// A callable kernel's path: every problem gathers its rows from a store of rows by data
/// row (here produced from features, a budget of a few rows, `cache_bytes`: evictions,
/// shrinking's moves, SVR's two variables per row), the kernel precomputed with the
/// producer's diagonal: the models of the same kernel computed from the features.
#[test]
fn stored_kernel_rows_train_the_models_of_the_features() {
    use crate::core::data::rows::finite_sq_norms;
    use crate::core::kernels::source_rows::DataRowProducer;
    let mut rng = Rng::new(33);
    let (n, d) = (180, 3);
    let xs: Vec<f64> = (0..n * d).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let ys: Vec<u32> = (0..n)
        .map(|i| ((xs[i * d] + xs[i * d + 1] + 2.0) * 0.75).floor().min(2.0) as u32)
        .collect();
    let z: Vec<f64> = (0..n)
        .map(|i| (3.0 * xs[i * d]).sin() + xs[i * d + 2])
        .collect();
    let x = DenseView::new(&xs, n, d).unwrap();
    let no_features = DenseView::new(&[], n, 0).unwrap();
    let gamma = 1.5;
    let params = |kernel: Kernel, solver: ExactSolver| {
        ExactParams {
            c: 4.0,
            kernel,
            tol: 1e-6,
            solver,
            cache_bytes: 12 * n * 4,
            ..Default::default()
        }
        .check()
        .unwrap()
    };
    let diagonal = vec![1.0; n];
    let close = |a: &ExactModel, b: &ExactModel| {
        assert_eq!(a.support, b.support);
        for (p, q) in a.coef.iter().zip(&b.coef) {
            assert!((p - q).abs() < 1e-6 * (1.0 + q.abs()), "{p} vs {q}");
        }
        assert!((a.rho - b.rho).abs() < 1e-6 * (1.0 + b.rho.abs()));
    };
    for solver in [ExactSolver::Smo, ExactSolver::Alfpgm] {
        let own = params(Kernel::rbf(gamma), solver);
        let pre = params(Kernel::Precomputed, solver);
        let producer =
            DataRowProducer::new(&x, Kernel::rbf(gamma), finite_sq_norms(&x, "X").unwrap())
                .unwrap();
        let from = KernelFrom::Producer {
            rows: &producer,
            diagonal: &diagonal,
        };
        let want = train_kernel_svc(&x, &ys, None, 3, &own, &mut no_monitor).unwrap();
        let got = train_one_vs_one_path(
            &no_features,
            &ys,
            None,
            3,
            SvcFormulation::C,
            &[pre.0.c],
            &pre,
            from,
            &mut no_monitor,
        )
        .unwrap()
        .remove(0);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.classes, w.classes);
            close(&g.model, &w.model);
        }
        let formulation = SvrFormulation::Epsilon(0.1);
        let features = KernelFrom::Features;
        let cs = [own.0.c];
        let want = train_regression_path(
            &x,
            &z,
            None,
            formulation,
            &cs,
            &own,
            features,
            &mut no_monitor,
        )
        .unwrap()
        .remove(0);
        let got = train_regression_path(
            &no_features,
            &z,
            None,
            formulation,
            &cs,
            &pre,
            from,
            &mut no_monitor,
        )
        .unwrap()
        .remove(0);
        close(&got, &want);
        let want =
            train_one_class(&x, None, 0.3, &own, KernelFrom::Features, &mut no_monitor).unwrap();
        let got = train_one_class(&no_features, None, 0.3, &pre, from, &mut no_monitor).unwrap();
        close(&got, &want);
    }
}

/// Pairs taking their rows from the shared store train the models of pairs computing their
/// own rows (dense and CSR data, both solvers, with and without shrinking), computing fewer
/// kernel values in all.
#[test]
fn shared_rows_train_the_models_of_per_pair_rows() {
    let mut rng = Rng::new(21);
    let (n, d, k) = (400, 3, 5);
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for _ in 0..n {
        let c = rng.below(k) as u32;
        for f in 0..d {
            let centre = (f64::from(c) * (f as f64 + 1.0)).sin();
            xs.push(centre + 0.6 * (rng.next_f64() - 0.5));
        }
        ys.push(c);
    }
    let (mut indptr, mut indices) = (vec![0i32], vec![]);
    for _ in 0..n {
        indices.extend(0..d as i32);
        indptr.push(indices.len() as i32);
    }
    let dense = DenseView::new(&xs, n, d).unwrap();
    let csr = crate::core::data::rows::CsrView::new(&indptr, &indices, &xs, d).unwrap();
    for solver in [ExactSolver::Smo, ExactSolver::Alfpgm] {
        for shrinking in [false, true] {
            let fit = |shared_rows: bool, sparse: bool| {
                let params = ExactParams {
                    c: 10.0,
                    kernel: Kernel::rbf(3.0),
                    tol: 1e-4,
                    solver,
                    shrinking,
                    shared_rows,
                    ..Default::default()
                }
                .check()
                .unwrap();
                let got = if sparse {
                    train_kernel_svc(&csr, &ys, None, k, &params, &mut no_monitor)
                } else {
                    train_kernel_svc(&dense, &ys, None, k, &params, &mut no_monitor)
                };
                got.unwrap()
            };
            let own = fit(false, false);
            for sparse in [false, true] {
                let shared = fit(true, sparse);
                assert_eq!(shared.len(), own.len());
                for (a, b) in shared.iter().zip(&own) {
                    assert!(a.model.converged && b.model.converged);
                    let scale = 1.0 + b.model.objective.abs();
                    assert!((a.model.objective - b.model.objective).abs() < 1e-9 * scale);
                    assert!(
                        (a.model.rho - b.model.rho).abs() < 1e-6,
                        "{} vs {}",
                        a.model.rho,
                        b.model.rho
                    );
                }
                let values = |m: &[PairModel]| m.iter().map(|p| p.model.cache.values).sum::<u64>();
                assert!(values(&shared) < values(&own));
            }
        }
    }
}

#[test]
fn uniform_weights_scale_c() {
    // Weight w on every row is C w: the same bounds, so the same arithmetic and model.
    let mut rng = Rng::new(3);
    let xs: Vec<f64> = (0..160).map(|_| rng.next_f64()).collect();
    let ys: Vec<u32> = (0..80)
        .map(|i| u32::from(xs[2 * i] > xs[2 * i + 1]))
        .collect();
    let x = DenseView::new(&xs, 80, 2).unwrap();
    for solver in [ExactSolver::Smo, ExactSolver::Alfpgm] {
        let params = |c| {
            ExactParams {
                c,
                kernel: Kernel::rbf(3.0),
                solver,
                ..Default::default()
            }
            .check()
            .unwrap()
        };
        let twice = vec![2.0; 80];
        let a = train_kernel_svc(&x, &ys, Some(&twice), 2, &params(1.5), &mut no_monitor);
        let b = train_kernel_svc(&x, &ys, None, 2, &params(3.0), &mut no_monitor);
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a[0].model.coef, b[0].model.coef);
        assert_eq!(a[0].model.rho, b[0].model.rho);
    }
}

#[test]
fn bad_input_is_rejected() {
    let xs = [0.0, 1.0, 2.0, 3.0];
    let x = DenseView::new(&xs, 4, 1).unwrap();
    let ok = ExactParams::default().check().unwrap();
    assert!(train_kernel_svc(&x, &[0, 1, 0], None, 2, &ok, &mut no_monitor).is_err());
    assert!(train_kernel_svc(&x, &[0, 0, 0, 0], None, 2, &ok, &mut no_monitor).is_err());
    assert!(train_kernel_svc(&x, &[0, 1, 0, 5], None, 2, &ok, &mut no_monitor).is_err());
    assert!(train_kernel_svc(&x, &[0, 0, 0, 0], None, 1, &ok, &mut no_monitor).is_err());
    let y = [0, 1, 0, 1];
    for w in [
        &[1.0, 1.0, 1.0][..],
        &[1.0, 0.0, 1.0, 1.0],
        &[1.0, f64::NAN, 1.0, 1.0],
    ] {
        let err = train_kernel_svc(&x, &y, Some(w), 2, &ok, &mut no_monitor).unwrap_err();
        assert!(err.to_string().contains("weight"), "{err}");
    }
    for bad in [
        ExactParams {
            c: 0.0,
            ..Default::default()
        },
        ExactParams {
            tol: -1.0,
            ..Default::default()
        },
        ExactParams {
            kernel: Kernel::rbf(f64::NAN),
            ..Default::default()
        },
    ] {
        assert!(bad.check().is_err());
    }
    assert!(ExactSolver::parse("bogus").is_err());
}

/// sum_s coef_s k(x_s, x_i) - rho for every row i, from the explicit kernel.
fn explicit_decision(model: &ExactModel, kernel: Kernel, xs: &[f64], d: usize) -> Vec<f64> {
    let n = xs.len() / d;
    (0..n)
        .map(|i| {
            let xi = &xs[i * d..(i + 1) * d];
            model
                .support
                .iter()
                .zip(&model.coef)
                .map(|(&s, &c)| c * explicit_kernel(kernel, &xs[s * d..(s + 1) * d], xi))
                .sum::<f64>()
                - model.rho
        })
        .collect()
}

fn params_for(kernel: Kernel, c: f64, solver: ExactSolver, shrinking: bool) -> ValidExactParams {
    ExactParams {
        c,
        kernel,
        tol: 1e-6,
        solver,
        shrinking,
        alfpgm: AlfpgmParams {
            n_pairs: 6,
            ..Default::default()
        },
        ..Default::default()
    }
    .check()
    .unwrap()
}

const KERNELS: [Kernel; 4] = [
    Kernel::Rbf { gamma: 1.5 },
    Kernel::Linear,
    Kernel::Poly {
        gamma: 0.7,
        coef0: 1.0,
        degree: 3,
    },
    Kernel::Sigmoid {
        gamma: 0.3,
        coef0: -0.5,
    },
];

fn regression_data(seed: u64, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let xs: Vec<f64> = (0..2 * n).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let z = (0..n)
        .map(|i| (3.0 * xs[2 * i]).sin() + 0.5 * xs[2 * i + 1] + 0.1 * (rng.next_f64() - 0.5))
        .collect();
    (xs, z)
}

#[test]
fn svr_solutions_meet_the_primal_optimality_conditions() {
    // epsilon-SVR at its optimum, in terms of beta = a - a* and the residual r = z - f(x):
    // beta = C: r >= eps; beta = -C: r <= -eps; 0 < |beta| < C: r = eps sign(beta);
    // beta = 0: |r| <= eps; and sum beta = 0. Checked from the explicit kernel for every
    // kernel, both solvers, with and without shrinking, on samples weighted or not.
    let (n, d, eps) = (90, 2, 0.1);
    let (xs, z) = regression_data(11, n);
    let x = DenseView::new(&xs, n, d).unwrap();
    let mut rng = Rng::new(5);
    let w: Vec<f64> = (0..n).map(|_| 0.5 + rng.next_f64()).collect();
    for kernel in KERNELS {
        let c = if matches!(kernel, Kernel::Sigmoid { .. }) {
            0.5
        } else {
            4.0
        };
        let mut objectives = Vec::new();
        for (solver, shrinking, weights) in [
            (ExactSolver::Smo, false, None),
            (ExactSolver::Smo, true, None),
            (ExactSolver::Alfpgm, true, None),
            (ExactSolver::Alfpgm, true, Some(&w[..])),
        ] {
            let params = params_for(kernel, c, solver, shrinking);
            let m = train_kernel_svr(&x, &z, weights, eps, &params, &mut no_monitor).unwrap();
            assert!(m.converged);
            assert!(m.coef.iter().sum::<f64>().abs() < 1e-9);
            let f = explicit_decision(&m, kernel, &xs, d);
            let mut beta = vec![0.0; n];
            for (&s, &b) in m.support.iter().zip(&m.coef) {
                beta[s] = b;
            }
            let slack = 1e-4;
            for i in 0..n {
                let ci = c * weights.map_or(1.0, |w| w[i]);
                let (b, r) = (beta[i], z[i] - f[i]);
                assert!(b.abs() <= ci * (1.0 + 1e-12), "{kernel:?} beta {b} > C");
                if b >= ci * (1.0 - 1e-12) {
                    assert!(r >= eps - slack, "{kernel:?} row {i}: beta = C, r = {r}");
                } else if b <= -ci * (1.0 - 1e-12) {
                    assert!(r <= -eps + slack, "{kernel:?} row {i}: beta = -C, r = {r}");
                } else if b > 0.0 {
                    assert!((r - eps).abs() < slack, "{kernel:?} row {i}: free, r = {r}");
                } else if b < 0.0 {
                    assert!((r + eps).abs() < slack, "{kernel:?} row {i}: free, r = {r}");
                } else {
                    assert!(r.abs() <= eps + slack, "{kernel:?} row {i}: 0, r = {r}");
                }
            }
            if weights.is_none() {
                objectives.push(m.objective);
            }
        }
        let f0 = objectives[0];
        for f in &objectives {
            assert!(
                (f - f0).abs() < 1e-6 * (1.0 + f0.abs()),
                "{kernel:?}: {objectives:?}"
            );
        }
    }
}

#[test]
fn one_class_solutions_meet_the_optimality_conditions() {
    // nu one-class at its optimum, g(x) = sum a_j k(x_j, x) - rho: a_i = 0 -> g_i >= 0,
    // 0 < a_i < C_i -> g_i = 0, a_i = C_i -> g_i <= 0; sum a = nu sum C.
    let (n, d) = (120, 2);
    let (xs, _) = regression_data(4, n);
    let x = DenseView::new(&xs, n, d).unwrap();
    let mut rng = Rng::new(9);
    let w: Vec<f64> = (0..n).map(|_| 0.5 + rng.next_f64()).collect();
    for kernel in [KERNELS[0], KERNELS[2]] {
        for nu in [0.05, 0.3, 1.0] {
            for (solver, shrinking, weights) in [
                (ExactSolver::Smo, true, None),
                (ExactSolver::Alfpgm, false, None),
                (ExactSolver::Alfpgm, true, Some(&w[..])),
            ] {
                let params = params_for(kernel, 1.0, solver, shrinking);
                let m = train_one_class(
                    &x,
                    weights,
                    nu,
                    &params,
                    KernelFrom::Features,
                    &mut no_monitor,
                )
                .unwrap();
                assert!(m.converged);
                let upper = |i: usize| weights.map_or(1.0, |w| w[i]);
                let total: f64 = (0..n).map(upper).sum();
                let sum: f64 = m.coef.iter().sum();
                assert!(
                    (sum - nu * total).abs() < 1e-9 * total,
                    "{sum} vs {}",
                    nu * total
                );
                let g = explicit_decision(&m, kernel, &xs, d);
                let mut a = vec![0.0; n];
                for (&s, &v) in m.support.iter().zip(&m.coef) {
                    a[s] = v;
                }
                let slack = 1e-4 * (1.0 + m.rho.abs());
                for i in 0..n {
                    if a[i] <= 0.0 {
                        assert!(g[i] >= -slack, "{kernel:?} nu {nu} row {i}: g {}", g[i]);
                    } else if a[i] >= upper(i) {
                        assert!(g[i] <= slack, "{kernel:?} nu {nu} row {i}: g {}", g[i]);
                    } else {
                        assert!(
                            g[i].abs() <= slack,
                            "{kernel:?} nu {nu} row {i}: g {}",
                            g[i]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn classification_with_every_kernel_meets_the_optimality_conditions() {
    // C-SVC: y_i f(x_i) >= 1 where a_i = 0, = 1 where free, <= 1 where a_i = C.
    let (n, d) = (100, 2);
    let (xs, z) = regression_data(21, n);
    let labels: Vec<u32> = z.iter().map(|&v| u32::from(v > 0.1)).collect();
    let x = DenseView::new(&xs, n, d).unwrap();
    for kernel in KERNELS {
        for solver in [ExactSolver::Smo, ExactSolver::Alfpgm] {
            let params = params_for(kernel, 2.0, solver, true);
            let pairs = train_kernel_svc(&x, &labels, None, 2, &params, &mut no_monitor);
            let m = &pairs.unwrap()[0].model;
            assert!(m.converged);
            let f = explicit_decision(m, kernel, &xs, d);
            let mut a = vec![0.0; n];
            for (&s, &v) in m.support.iter().zip(&m.coef) {
                a[s] = v.abs();
            }
            for i in 0..n {
                let yf = if labels[i] == 0 { f[i] } else { -f[i] };
                if a[i] == 0.0 {
                    assert!(yf >= 1.0 - 1e-4, "{kernel:?} row {i}: {yf}");
                } else if a[i] >= 2.0 * (1.0 - 1e-12) {
                    assert!(yf <= 1.0 + 1e-4, "{kernel:?} row {i}: {yf}");
                } else {
                    assert!((yf - 1.0).abs() < 1e-4, "{kernel:?} row {i}: {yf}");
                }
            }
        }
    }
}

#[test]
fn a_precomputed_gram_matrix_gives_the_kernels_own_model() {
    // The Gram matrix of the linear (and poly) kernel, given as rows: the same problems as
    // the kernel computed from X (classification with three classes and unshared rows, SVR
    // with its rows twice, one-class).
    let (n, d) = (75, 2);
    let (xs, z) = regression_data(2, n);
    let labels: Vec<u32> = z
        .iter()
        .map(|&v| (v + 1.5).clamp(0.0, 2.9) as u32)
        .collect();
    let x = DenseView::new(&xs, n, d).unwrap();
    for kernel in [KERNELS[1], KERNELS[2]] {
        let gram: Vec<f64> = (0..n * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                explicit_kernel(kernel, &xs[i * d..(i + 1) * d], &xs[j * d..(j + 1) * d])
            })
            .collect();
        let g = DenseView::new(&gram, n, n).unwrap();
        let given = params_for(kernel, 1.0, ExactSolver::Alfpgm, true);
        let pre = params_for(Kernel::Precomputed, 1.0, ExactSolver::Alfpgm, true);
        let close = |a: &ExactModel, b: &ExactModel| {
            let scale = 1.0 + a.objective.abs();
            assert!((a.objective - b.objective).abs() < 1e-5 * scale);
            assert!((a.rho - b.rho).abs() < 1e-3 * (1.0 + a.rho.abs()));
        };
        let a = train_kernel_svc(&x, &labels, None, 3, &given, &mut no_monitor).unwrap();
        let b = train_kernel_svc(&g, &labels, None, 3, &pre, &mut no_monitor).unwrap();
        for (p, q) in a.iter().zip(&b) {
            close(&p.model, &q.model);
        }
        let a = train_kernel_svr(&x, &z, None, 0.1, &given, &mut no_monitor).unwrap();
        let b = train_kernel_svr(&g, &z, None, 0.1, &pre, &mut no_monitor).unwrap();
        close(&a, &b);
        let a =
            train_one_class(&x, None, 0.2, &given, KernelFrom::Features, &mut no_monitor).unwrap();
        let b =
            train_one_class(&g, None, 0.2, &pre, KernelFrom::Features, &mut no_monitor).unwrap();
        close(&a, &b);
    }
    // Not square, not dense: clear errors.
    let wide = vec![1.0; n * (n + 1)];
    let g = DenseView::new(&wide[..n * 3], n, 3).unwrap();
    let pre = params_for(Kernel::Precomputed, 1.0, ExactSolver::Alfpgm, true);
    let err =
        train_one_class(&g, None, 0.2, &pre, KernelFrom::Features, &mut no_monitor).unwrap_err();
    assert!(err.to_string().contains("square"), "{err}");
}

#[test]
fn svr_and_one_class_reject_bad_input() {
    let xs = [0.0, 1.0, 2.0, 3.0];
    let x = DenseView::new(&xs, 4, 1).unwrap();
    let ok = ExactParams::default().check().unwrap();
    let z = [0.0, 1.0, 0.5, 2.0];
    for (zz, eps, what) in [
        (&z[..3], 0.1, "targets"),
        (&[0.0, f64::NAN, 0.5, 2.0][..], 0.1, "finite"),
        (&z[..], -0.1, "epsilon"),
        (&z[..], f64::INFINITY, "epsilon"),
    ] {
        let err = train_kernel_svr(&x, zz, None, eps, &ok, &mut no_monitor).unwrap_err();
        assert!(err.to_string().contains(what), "{err}");
    }
    for nu in [0.0, -0.5, 1.5, f64::NAN] {
        let err =
            train_one_class(&x, None, nu, &ok, KernelFrom::Features, &mut no_monitor).unwrap_err();
        assert!(err.to_string().contains("nu"), "{err}");
    }
    let empty = DenseView::new(&[], 0, 1).unwrap();
    assert!(train_one_class(
        &empty,
        None,
        0.5,
        &ok,
        KernelFrom::Features,
        &mut no_monitor
    )
    .is_err());
    assert!(train_kernel_svr(&empty, &[], None, 0.1, &ok, &mut no_monitor).is_err());
    for (name, degree) in [("poly", -1), ("poly", 1000), ("nope", 3)] {
        assert!(Kernel::parse(name, 1.0, 0.0, degree).is_err());
    }
    assert!(Kernel::parse("sigmoid", 1.0, f64::NAN, 3).is_err());
    assert!(Kernel::parse("poly", 0.0, 1.0, 3).is_err());
}

/// The f64 path: a problem shaped as scikit-learn's polynomial SVR example (40 points in
/// [0, 5], the cubic kernel (x x' + 1)^3 up to 1.76e4, C = 100: f32's rounding of a kernel
/// value times C is 0.1) takes f64 rows and strides, and both solvers, at tol 1e-3 and
/// 1e-5, end within the default cap at a point whose duality gap, from the explicit feature
/// map phi(x) = (1, sqrt(3) x, sqrt(3) x^2, x^3), is within tol of the objective. Forced f32
/// rows end far from it.
#[test]
fn a_wide_range_problem_takes_f64_rows_to_its_optimum() {
    let (n, c, eps) = (40, 100.0, 0.1);
    let mut rng = Rng::new(2);
    let mut xs: Vec<f64> = (0..n).map(|_| 5.0 * rng.next_f64()).collect();
    xs.sort_by(f64::total_cmp);
    let z: Vec<f64> = (0..n)
        .map(|i| {
            let noise = if i % 5 == 0 {
                3.0 * (0.5 - rng.next_f64())
            } else {
                0.0
            };
            xs[i].sin() + noise
        })
        .collect();
    let x = DenseView::new(&xs, n, 1).unwrap();
    let kernel = Kernel::Poly {
        gamma: 1.0,
        coef0: 1.0,
        degree: 3,
    };
    let phi = |v: f64| [1.0, 3f64.sqrt() * v, 3f64.sqrt() * v * v, v * v * v];
    // (primal, dual) of a model: 1/2 |w|^2 + C sum max(0, |f - z| - eps) with w = sum
    // beta_s phi(x_s), and z^T beta - eps |beta|_1 - 1/2 beta^T K beta.
    let certificate = |m: &ExactModel| {
        let f = explicit_decision(m, kernel, &xs, 1);
        let mut w = [0.0; 4];
        for (&s, &b) in m.support.iter().zip(&m.coef) {
            for (wk, pk) in w.iter_mut().zip(phi(xs[s])) {
                *wk += b * pk;
            }
        }
        let loss: f64 = (0..n).map(|i| ((f[i] - z[i]).abs() - eps).max(0.0)).sum();
        let primal = 0.5 * w.iter().map(|v| v * v).sum::<f64>() + c * loss;
        let mut dual = 0.0;
        for (&s, &b) in m.support.iter().zip(&m.coef) {
            dual += z[s] * b - eps * b.abs();
            for (&t, &bt) in m.support.iter().zip(&m.coef) {
                dual -= 0.5 * b * bt * explicit_kernel(kernel, &xs[s..s + 1], &xs[t..t + 1]);
            }
        }
        (primal, dual)
    };
    for (solver, tol) in [
        (ExactSolver::Smo, 1e-3),
        (ExactSolver::Smo, 1e-5),
        (ExactSolver::Alfpgm, 1e-3),
        (ExactSolver::Alfpgm, 1e-5),
    ] {
        let fit = |row_precision: Option<RowPrecision>| {
            let params = ExactParams {
                c,
                kernel,
                tol,
                solver,
                row_precision,
                ..Default::default()
            }
            .check()
            .unwrap();
            train_kernel_svr(&x, &z, None, eps, &params, &mut no_monitor).unwrap()
        };
        let m = fit(None);
        assert_eq!(m.cache.value_bytes, 8, "{solver:?} at {tol}: f64 rows");
        assert!(
            m.converged && m.iterations < default_max_iter(n),
            "{solver:?} at {tol}"
        );
        assert!(m.strides > 0);
        let (primal, dual) = certificate(&m);
        assert!(
            primal - dual < tol * primal,
            "{solver:?} at {tol}: primal {primal}, dual {dual}"
        );
        let f32_rows = fit(Some(RowPrecision::F32));
        assert_eq!(f32_rows.cache.value_bytes, 4);
        let (primal, dual) = certificate(&f32_rows);
        assert!(
            primal - dual > 1e-3 * primal,
            "{solver:?} at {tol}: f32 rows"
        );
    }
}

/// f32 rows unless their rounding, times C, exceeds tol, and not beyond f64's reach.
#[test]
fn rows_are_f64_in_the_band_where_f32_fails_and_f64_holds() {
    use RowPrecision::{F32, F64};
    // Gaussian kernel (K_max = 1): f32 up to C = tol 2^24.
    assert_eq!(RowPrecision::needed(1.0, 1.0, 1e-3), F32);
    assert_eq!(RowPrecision::needed(1.0, 16_000.0, 1e-3), F32);
    assert_eq!(RowPrecision::needed(1.0, 17_000.0, 1e-3), F64);
    assert_eq!(RowPrecision::needed(1.0, 100.0, 1e-7), F64);
    // scikit-learn's polynomial SVR example, and a kernel of 10^12 that neither holds.
    assert_eq!(RowPrecision::needed(1.76e4, 100.0, 1e-3), F64);
    assert_eq!(RowPrecision::needed(1.76e4, 100.0, 1e-5), F64);
    assert_eq!(RowPrecision::needed(9.8e11, 1.0, 1e-3), F32);
}
