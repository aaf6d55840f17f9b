use super::copies::SquaredRows;
use super::gather::{gather_pass, step_pass, Gather, Gathered, ShortStep};
use super::hessian_free::SCALED_START_GAIN;
use super::line_search::{line_search, WALK_FIRST};
use super::memory::polish_bytes;
use super::objective::{objective, quad_form, scale_start, SUM_CHUNK};
use super::output::{stops_after, Output};
use super::sample::{in_sample, SAMPLE_STEP};
use super::segments::{segment_rows, Passes, Segments};
use super::*;
use crate::core::budgeted::problem::HINGE_BEND;
use crate::core::common::memory::check_fits;
use crate::core::common::parallel;
use crate::core::common::progress::{no_monitor, Progress};
use crate::core::common::rng::Rng;
use crate::core::data::rows::{AnyRows, CsrView, DenseView};
use crate::core::data::sv_matrix::SvMatrix;
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block::kernel_matrix;
use crate::core::kernels::kernel_block::KernelBlocks;

/// A small binary problem: rows in [-1, 1]^2 labelled by a circle, and a basis of rows.
fn problem(seed: u64, n: usize, m: usize, n_classes: usize) -> (Vec<f64>, Vec<u32>, BudgetModel) {
    let mut rng = Rng::new(seed);
    let x: Vec<f64> = (0..n * 2).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
    let y: Vec<u32> = (0..n)
        .map(|i| {
            let r = x[2 * i].powi(2) + x[2 * i + 1].powi(2);
            let class = if n_classes == 2 {
                u32::from(r < 0.5)
            } else {
                ((r * n_classes as f64 * 0.7) as u32).min(n_classes as u32 - 1)
            };
            // 5% label noise.
            if rng.next_f64() < 0.05 {
                (class + 1) % n_classes as u32
            } else {
                class
            }
        })
        .collect();
    let sv: Vec<f64> = x[..m * 2].to_vec();
    let n_out = if n_classes == 2 { 1 } else { n_classes };
    let coef: Vec<f64> = (0..m * n_out).map(|_| rng.next_f64() - 0.5).collect();
    let model = BudgetModel {
        dim: 2,
        n_out,
        gamma: 2.0,
        support_vectors: SvMatrix::Dense(sv),
        coef,
    };
    (x, y, model)
}

/// The line search's step against the objective along the direction minimised by a
/// ternary search (it is convex): classes and values, steps short of and beyond the full
/// one, rows in several chunks, weights.
#[test]
fn line_search_finds_the_minimum_along_the_direction() {
    let (mut steps, mut walked) = (Vec::new(), Vec::new());
    for (seed, regression, scale) in [
        (1u64, false, 1.0),
        (2, false, 0.05),
        (3, false, 20.0),
        (4, true, 1.0),
        (5, true, 0.02),
        (6, true, 10.0),
    ] {
        let mut rng = Rng::new(seed);
        let (n, m, c) = (3 * SUM_CHUNK + 17, 6, 0.7);
        let a: Vec<f64> = (0..m * m).map(|_| rng.next_f64() - 0.5).collect();
        let mut kss = vec![0.0; m * m];
        for i in 0..m {
            for j in 0..m {
                kss[i * m + j] = (0..m).map(|l| a[i * m + l] * a[j * m + l]).sum::<f64>();
            }
        }
        let classes: Vec<u32> = (0..n).map(|_| u32::from(rng.next_f64() < 0.4)).collect();
        let values: Vec<f64> = (0..n).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
        let targets = if regression {
            Targets::Values {
                y: &values,
                epsilon: 0.1,
            }
        } else {
            Targets::classes(&classes, 2)
        };
        let w: Vec<f64> = (0..n).map(|_| 0.5 + rng.next_f64()).collect();
        let beta = (0..m).map(|_| rng.next_f64() - 0.5).collect();
        let o = Output {
            f: (0..n).map(|_| 3.0 * rng.next_f64() - 1.5).collect(),
            // Rows move towards their targets on the whole, as along a Newton direction.
            delta: (0..n)
                .map(|i| {
                    let aim = if regression {
                        values[i]
                    } else {
                        2.0 * f64::from(classes[i]) - 1.0
                    };
                    scale * (0.3 * aim + 0.4 * (rng.next_f64() - 0.5))
                })
                .collect(),
            d: (0..m).map(|_| scale * (rng.next_f64() - 0.5)).collect(),
            ..Output::at(beta, 0.0, n)
        };
        let term = |i: usize, v: f64| targets.term(0, i, v);
        let weight = |i: usize| w[i];
        let along = |t: f64| {
            let beta: Vec<f64> = o.beta.iter().zip(&o.d).map(|(b, d)| b + t * d).collect();
            let f: Vec<f64> = o.f.iter().zip(&o.delta).map(|(f, d)| f + t * d).collect();
            objective(&kss, &beta, &f, c, &term, &weight)
        };
        let boundaries = |i| targets.boundaries(0, i);
        let t = line_search(&kss, &o, c, &term, &boundaries, &weight, false);
        let (mut lo, mut hi) = (0.0, 1e3);
        for _ in 0..300 {
            let (p, q) = (lo + (hi - lo) / 3.0, hi - (hi - lo) / 3.0);
            if along(p) < along(q) {
                hi = q;
            } else {
                lo = p;
            }
        }
        let best = 0.5 * (lo + hi);
        let (at_t, at_best) = (along(t), along(best));
        assert!(
            at_t <= at_best + 1e-10 * at_best.abs(),
            "seed {seed}: t = {t} gives {at_t}, t = {best} gives {at_best}"
        );
        assert!(
            (t - best).abs() <= 1e-6 * best.max(1.0),
            "seed {seed}: {t} vs {best}"
        );
        assert!(t > 0.0 && t.is_finite(), "seed {seed}: {t}");
        steps.push(t);
        // The changes walked before the root.
        walked.push(
            (0..n)
                .map(|i| {
                    let ts = targets.boundaries(0, i).map(|v| (v - o.f[i]) / o.delta[i]);
                    ts.iter().filter(|&&s| s > 0.0 && s < t).count()
                })
                .sum::<usize>(),
        );
    }
    // Both of the search's intervals were walked: steps short of the full one and beyond;
    // and some searches put several doubling shares of their changes in order.
    assert!(
        steps.iter().any(|&t| t < 1.0) && steps.iter().any(|&t| t > 1.0),
        "{steps:?}"
    );
    assert!(walked.iter().all(|&w| w > 4 * WALK_FIRST), "{walked:?}");
}

/// A start where no row's term is squared (every row beyond its margin or on its
/// tangent): the objective is linear in b there, and the Hessian-free solve keeps b for
/// that direction, as the Newton system's does (its intercept's part of the direction was
/// infinite), and reaches the Newton system's optimum.
#[test]
fn a_start_with_no_squared_row_keeps_the_intercept() {
    let (n, m, seed) = (600, 40, 24);
    let (x, y, mut model) = problem(seed, n, m, 2);
    model.coef.iter_mut().for_each(|v| *v *= 1e4);
    let (k, _) = explicit_kernels(&x, n, &model);
    let targets = Targets::classes(&y, 2);
    let squared = (0..n)
        .filter(|&i| {
            let f: f64 = (0..m).map(|j| k[i * m + j] * model.coef[j]).sum();
            targets.term(0, i, f).curvature() > 0.0
        })
        .count();
    assert_eq!(squared, 0);
    // (a9a's C is 32; its first step, at B = 1,000, left no row squared.)
    for c in [1.0, 32.0] {
        let solve = |method| {
            let mut p = params(c);
            p.method = method;
            p.sample_start = false;
            run(&x, &y, None, 2, &model, &p)
        };
        let newton = solve(PolishMethod::Newton);
        let free = solve(PolishMethod::HessianFree);
        assert!(free.cg_products > 0);
        assert_same_optimum(&x, &model, &free, &newton, seed);
    }
}

/// A step along which no row changes piece: the Newton system's (the quadratic's minimiser)
/// is taken whole, a Hessian-free one cut to the minimiser (it may overshoot it).
#[test]
fn a_step_past_the_minimiser_is_cut_unless_it_is_the_newton_step() {
    let (n, c) = (50, 1.0);
    let kss = vec![2.0, 0.5, 0.1, 0.5, 1.5, 0.2, 0.1, 0.2, 1.0];
    let classes: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
    let targets = Targets::classes(&classes, 2);
    let beta = vec![0.3, -0.2, 0.4];
    let o = Output {
        // Three times the step to beta's minimiser along -beta: the minimiser is t = 1/3.
        d: beta.iter().map(|b| -3.0 * b).collect(),
        // Every row far beyond its margin and moving by a hair: no loss along the step.
        f: (0..n)
            .map(|i| if i % 2 == 1 { 5.0 } else { -5.0 })
            .collect(),
        delta: vec![1e-9; n],
        ..Output::at(beta.clone(), 0.0, n)
    };
    let term = |i: usize, v: f64| targets.term(0, i, v);
    let boundaries = |i| targets.boundaries(0, i);
    let cut = line_search(&kss, &o, c, &term, &boundaries, &|_| 1.0, false);
    assert!((cut - 1.0 / 3.0).abs() < 1e-12, "{cut}");
    let whole = line_search(&kss, &o, c, &term, &boundaries, &|_| 1.0, true);
    assert_eq!(whole, 1.0);
}

/// The kernel matrices of a [`problem`] written out: rows x SVs and SVs x SVs.
/// The smooth function the regression tests fit: sin(3 x_0) + x_1^2 of each 2-column row.
fn regression_values(x: &[f64]) -> Vec<f64> {
    x.chunks_exact(2)
        .map(|r| (3.0 * r[0]).sin() + r[1] * r[1])
        .collect()
}

/// A test's targets: `classes` classes, or (0) a regression on `z` with epsilon 0.05.
fn test_targets<'a>(classes: usize, y: &'a [u32], z: &'a [f64]) -> Targets<'a> {
    if classes == 0 {
        Targets::Values {
            y: z,
            epsilon: 0.05,
        }
    } else {
        Targets::classes(y, classes)
    }
}

fn explicit_kernels(x: &[f64], n: usize, model: &BudgetModel) -> (Vec<f64>, Vec<f64>) {
    let m = model.n_sv();
    let xv = DenseView::new(x, n, 2).unwrap();
    let SvMatrix::Dense(sv) = &model.support_vectors else {
        unreachable!()
    };
    let s = DenseView::new(sv, m, 2).unwrap();
    let mut k = vec![0.0; n * m];
    kernel_matrix(&xv, &s, model.gamma, &mut k).unwrap();
    let mut kss = vec![0.0; m * m];
    kernel_matrix(&s, &s, model.gamma, &mut kss).unwrap();
    (k, kss)
}

/// `polish` from the model's own coefficients on the in-memory dense rows x (two features).
fn polish_dense(
    model: &BudgetModel,
    x: &[f64],
    targets: Targets<'_>,
    weights: Option<&[f64]>,
    p: &PolishParams,
) -> Result<PolishResult> {
    let view = DenseView::new(x, x.len() / 2, 2).unwrap();
    let mut source = InMemory(AnyRows::Dense(view));
    polish(
        model,
        None,
        &mut source,
        targets,
        weights,
        p,
        &mut no_monitor,
    )
}

fn params(c: f64) -> PolishParams {
    PolishParams {
        c,
        tol: 0.0,
        max_iter: 100,
        cache_bytes: 1 << 30,
        method: PolishMethod::Newton,
        hessian_free_basis: HESSIAN_FREE_BASIS,
        sample_start: true,
    }
}

fn run(
    x: &[f64],
    y: &[u32],
    w: Option<&[f64]>,
    k: usize,
    model: &BudgetModel,
    p: &PolishParams,
) -> PolishResult {
    let n = y.len();
    let view = DenseView::new(x, n, 2).unwrap();
    let mut source = InMemory(AnyRows::Dense(view));
    let targets = Targets::Classes { y, n_classes: k };
    polish(model, None, &mut source, targets, w, p, &mut no_monitor).unwrap()
}

/// The gradient of the objective in (beta, b) at the solution is zero: an independent
/// check from the explicit kernel matrices, with the loss written in the margin.
#[test]
fn solution_satisfies_the_optimality_conditions() {
    for (seed, n, m, c, weighted) in [
        (1, 300, 20, 1.0, false),
        (2, 500, 40, 10.0, true),
        (3, 200, 60, 0.1, false),
    ] {
        let (x, y, model) = problem(seed, n, m, 2);
        let mut rng = Rng::new(seed + 100);
        let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
        let w = weighted.then_some(&w[..]);
        let r = run(&x, &y, w, 2, &model, &params(c));
        assert!(r.converged);
        let (k, kss) = explicit_kernels(&x, n, &model);
        let beta = &r.coef;
        let b = r.intercept[0];
        let mut grad: Vec<f64> = (0..m)
            .map(|j| (0..m).map(|l| kss[j * m + l] * beta[l]).sum())
            .collect();
        let mut gb = 0.0;
        for i in 0..n {
            let yi = if y[i] == 1 { 1.0 } else { -1.0 };
            let fi: f64 = (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b;
            // The smoothed hinge written in the margin: (1 - margin)^2 above the bend,
            // linear with slope 2 HINGE_BEND below it; its derivative in f times y.
            let xi = 1.0 - yi * fi;
            let dloss = if xi <= 0.0 {
                0.0
            } else if xi < HINGE_BEND {
                2.0 * xi
            } else {
                2.0 * HINGE_BEND
            };
            let wi = w.map_or(1.0, |w| w[i]);
            for j in 0..m {
                grad[j] -= c * wi * yi * dloss * k[i * m + j];
            }
            gb -= c * wi * yi * dloss;
        }
        // Relative to the size of the loss term.
        let scale = 2.0 * c * n as f64;
        let worst = grad.iter().map(|g| g.abs()).fold(gb.abs(), f64::max);
        assert!(worst < 1e-9 * scale, "seed {seed}: gradient {worst}");
        assert!(r.objective[0] <= r.objective_start[0]);
    }
}

/// Regression: at the solution the gradient of 1/2 beta K beta + C sum w max(0, |f - y| -
/// eps)^2, written out from the explicit kernel matrices, is zero; the objective is below
/// the start and below any random perturbation of the solution.
#[test]
fn regression_solution_satisfies_the_optimality_conditions() {
    for (seed, n, m, c, epsilon, weighted) in [
        (11, 300, 20, 1.0, 0.1, false),
        (12, 500, 40, 10.0, 0.05, true),
        (13, 200, 60, 0.1, 0.0, false),
        (14, 400, 30, 100.0, 0.3, true),
    ] {
        let (x, _, mut model) = problem(seed, n, m, 2);
        let mut rng = Rng::new(seed + 100);
        let z: Vec<f64> = (0..n)
            .map(|i| {
                let (a, b) = (x[2 * i], x[2 * i + 1]);
                (3.0 * a).sin() + b * b + 0.2 * (rng.next_f64() - 0.5) + 5.0
            })
            .collect();
        // A start far from the solution, with rows on both sides of the tube.
        model.coef.iter_mut().for_each(|v| *v *= 4.0);
        let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
        let w = weighted.then_some(&w[..]);
        let targets = Targets::Values { y: &z, epsilon };
        let r = polish_dense(&model, &x, targets, w, &params(c)).unwrap();
        assert!(r.converged, "seed {seed}");
        let (k, kss) = explicit_kernels(&x, n, &model);
        let value = |beta: &[f64], b: f64| -> (f64, Vec<f64>, f64) {
            let mut grad: Vec<f64> = (0..m)
                .map(|j| (0..m).map(|l| kss[j * m + l] * beta[l]).sum())
                .collect();
            let mut obj = 0.5 * (0..m).map(|j| beta[j] * grad[j]).sum::<f64>();
            let mut gb = 0.0;
            for i in 0..n {
                let fi: f64 = (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b;
                let excess = (fi - z[i]).abs() - epsilon;
                if excess > 0.0 {
                    let wi = w.map_or(1.0, |w| w[i]);
                    let e = excess * (fi - z[i]).signum();
                    obj += c * wi * excess * excess;
                    for j in 0..m {
                        grad[j] += 2.0 * c * wi * e * k[i * m + j];
                    }
                    gb += 2.0 * c * wi * e;
                }
            }
            (obj, grad, gb)
        };
        let (obj, grad, gb) = value(&r.coef, r.intercept[0]);
        let scale = 2.0 * c * n as f64;
        let worst = grad.iter().map(|g| g.abs()).fold(gb.abs(), f64::max);
        assert!(worst < 1e-9 * scale, "seed {seed}: gradient {worst}");
        assert!(
            (obj - r.objective[0]).abs() <= 1e-9 * obj.max(1.0),
            "seed {seed}"
        );
        assert!(r.objective[0] < r.objective_start[0]);
        for _ in 0..20 {
            let beta: Vec<f64> = r
                .coef
                .iter()
                .map(|v| v + 1e-3 * (rng.next_f64() - 0.5))
                .collect();
            let b = r.intercept[0] + 1e-3 * (rng.next_f64() - 0.5);
            assert!(
                value(&beta, b).0 >= obj - 1e-12 * obj.max(1.0),
                "seed {seed}"
            );
        }
    }
}

/// The Hessian-free solve reaches the Newton system's optimum (objective and decision
/// values; it works on kernel values rounded to f32, hence 1e-5 and not rounding),
/// classes (two and three, weighted or not) and regression, and gives the same bits on
/// any thread count and cache size.
#[test]
fn hessian_free_reaches_the_newton_optimum() {
    for (seed, n, m, classes, c, weighted) in [
        (21, 600, 40, 2, 1.0, false),
        (22, 900, 60, 3, 5.0, true),
        (23, 500, 25, 0, 2.0, false),
    ] {
        let (x, y, mut model) = problem(seed, n, m, classes.max(2));
        let z = regression_values(&x);
        let mut rng = Rng::new(seed);
        let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
        let w = weighted.then_some(&w[..]);
        if classes == 0 {
            model.coef.iter_mut().for_each(|v| *v *= 3.0);
        }
        let solve = |method, cache_bytes, threads| {
            let view = DenseView::new(&x, n, 2).unwrap();
            let mut source = InMemory(AnyRows::Dense(view));
            let targets = test_targets(classes, &y, &z);
            let mut p = params(c);
            p.method = method;
            p.cache_bytes = cache_bytes;
            parallel::install_with(Some(threads), || {
                polish(&model, None, &mut source, targets, w, &p, &mut no_monitor)
            })
            .unwrap()
            .unwrap()
        };
        let newton = solve(PolishMethod::Newton, 1 << 30, 2);
        let free = solve(PolishMethod::HessianFree, 1 << 30, 2);
        assert!(free.cg_products > 0 && newton.cg_products == 0);
        assert_same_optimum(&x, &model, &free, &newton, seed);
        // The squared rows' copies and the cache share the budget: whatever it is, the
        // same solution (the same bits while the copies fit; the same optimum when some
        // rows are computed again by each product), within the budget.
        let squared = free.squared_rows * m * 4;
        for (cache, threads) in [
            (segment_rows(m, true) * m * 8, 1),
            (squared + segment_rows(m, true) * m * 4, 2),
            (squared / 2, 1),
            (0, 3),
        ] {
            let again = solve(PolishMethod::HessianFree, cache, threads);
            if again.recomputed_rows == 0 {
                assert_eq!(again.coef, free.coef, "seed {seed}");
                assert_eq!(again.intercept, free.intercept, "seed {seed}");
            } else {
                assert_same_optimum(&x, &model, &again, &free, seed);
            }
            assert!(
                again.kept_bytes <= cache.max(squared),
                "seed {seed} cache {cache}"
            );
        }
        assert!(free.kept_bytes <= (n + free.squared_rows) * m * 4 && free.squared_rows > 0);
    }
}

/// The Hessian-free solve starts from the start's best multiple when that gains at least
/// `SCALED_START_GAIN` (gathering the rows again there), and from the start itself
/// otherwise; either way it reaches the Newton solve's optimum (two and three classes).
#[test]
fn a_start_far_off_in_scale_is_rescaled_before_the_hessian_free_solve() {
    for (seed, classes, scale) in [(31, 2, 40.0), (32, 3, 0.02), (33, 3, 40.0)] {
        let (n, m, c) = (700, 30, 2.0);
        let (x, y, mut model) = problem(seed, n, m, classes);
        let z = regression_values(&x);
        let targets = test_targets(classes, &y, &z);
        let solve = |model: &BudgetModel, intercept: Option<&[f64]>, method| {
            let view = DenseView::new(&x, n, 2).unwrap();
            let mut p = params(c);
            p.method = method;
            polish(
                model,
                intercept,
                &mut InMemory(AnyRows::Dense(view)),
                targets,
                None,
                &p,
                &mut no_monitor,
            )
            .unwrap()
        };
        // Where the start is the solution, its best multiple gains less than the share:
        // the solve starts from it as given (its objective from the f32 kernel values).
        let newton = solve(&model, None, PolishMethod::Newton);
        let mut solved = model.clone();
        solved.coef.clone_from(&newton.coef);
        let kept = solve(&solved, Some(&newton.intercept), PolishMethod::HessianFree);
        for (o, (&a, &b)) in kept
            .objective_start
            .iter()
            .zip(&newton.objective)
            .enumerate()
        {
            assert!(
                (a - b).abs() <= 1e-6 * b,
                "seed {seed} output {o}: {a} != {b}"
            );
        }
        model.coef.iter_mut().for_each(|v| *v *= scale);
        let (k, kss) = explicit_kernels(&x, n, &model);
        let q = model.n_out;
        let raw: Vec<f64> = (0..q)
            .map(|o| {
                let beta: Vec<f64> = (0..m).map(|j| model.coef[j * q + o]).collect();
                let f: Vec<f64> = (0..n)
                    .map(|i| (0..m).map(|j| k[i * m + j] * beta[j]).sum())
                    .collect();
                let term = |i: usize, v: f64| targets.term(o, i, v);
                objective(&kss, &beta, &f, c, &term, &|_| 1.0)
            })
            .collect();
        let free = solve(&model, None, PolishMethod::HessianFree);
        let rescaled = free
            .objective_start
            .iter()
            .zip(&raw)
            .any(|(&a, &r)| a <= (1.0 - SCALED_START_GAIN) * r);
        assert!(
            rescaled,
            "seed {seed}: {:?} from {raw:?}",
            free.objective_start
        );
        assert!(free
            .objective_start
            .iter()
            .zip(&raw)
            .all(|(&a, &r)| a <= r * (1.0 + 1e-6)));
        assert_same_optimum(
            &x,
            &model,
            &free,
            &solve(&model, None, PolishMethod::Newton),
            seed,
        );
    }
}

/// `Auto`'s Hessian-free solve forms the Newton system once its directions have cost what
/// forming it does (m / 4 products per output: a few directions at m = 40 and 60), and
/// then reaches the Newton optimum, the same on any thread count; below its basis size
/// `Auto` is the Newton solve.
#[test]
fn hessian_free_forms_the_system_when_it_stalls() {
    for (seed, n, m, classes, c) in [(41, 600, 40, 2, 1.0), (42, 900, 60, 3, 5.0)] {
        let (x, y, model) = problem(seed, n, m, classes);
        let solve = |method, basis, threads| {
            let mut p = params(c);
            p.method = method;
            p.hessian_free_basis = basis;
            let targets = Targets::classes(&y, classes);
            parallel::install_with(Some(threads), || {
                polish_dense(&model, &x, targets, None, &p)
            })
            .unwrap()
            .unwrap()
        };
        let newton = solve(PolishMethod::Newton, 0, 2);
        let auto = solve(PolishMethod::Auto, 1, 2);
        assert!(auto.cg_products > 0, "seed {seed}");
        assert!(
            auto.system_from > 1 && auto.active_changes > 0,
            "seed {seed}"
        );
        assert!(
            auto.converged && auto.iterations > auto.system_from,
            "seed {seed}"
        );
        assert_same_optimum(&x, &model, &auto, &newton, seed);
        let again = solve(PolishMethod::Auto, 1, 1);
        assert_eq!(again.coef, auto.coef, "seed {seed}");
        assert_eq!(again.intercept, auto.intercept, "seed {seed}");
        let below = solve(PolishMethod::Auto, m + 1, 2);
        assert_eq!(
            (below.cg_products, below.system_from),
            (0, 0),
            "seed {seed}"
        );
        assert_eq!(below.coef, newton.coef, "seed {seed}");
    }
}

/// `a` reaches `b`'s optimum: the objective to 1e-5 relative, the decision values on the
/// rows `x` (two columns) to 1e-3, per output.
fn assert_same_optimum(
    x: &[f64],
    model: &BudgetModel,
    a: &PolishResult,
    b: &PolishResult,
    seed: u64,
) {
    let (n, m, q) = (x.len() / 2, model.n_sv(), model.n_out);
    let (k, _) = explicit_kernels(x, n, model);
    for o in 0..q {
        let rel = (a.objective[o] - b.objective[o]).abs() / b.objective[o];
        assert!(rel < 1e-5, "seed {seed} output {o}: {rel}");
        let value = |r: &PolishResult, i: usize| {
            (0..m)
                .map(|j| k[i * m + j] * r.coef[j * q + o])
                .sum::<f64>()
                + r.intercept[o]
        };
        let worst = (0..n)
            .map(|i| (value(a, i) - value(b, i)).abs())
            .fold(0.0, f64::max);
        assert!(
            worst < 1e-3,
            "seed {seed} output {o}: decision values differ by {worst}"
        );
    }
}

/// A short step's `step_pass` gathers at its point what a pass there does (`gather_pass`
/// at the current point): the gradient to rounding, the same squared rows with the same
/// weights and kernel values (copies placed where the full step's no longer serve), for
/// two and three classes, one output's step short and another's full, the segments cached
/// or computed, the copies within the budget or none at all; and for steps longer than the
/// full one (t > 1), where rows in one piece at 0 and 1 leave it beyond 1 (counted as in
/// their piece at 1, such a row made the gradient wrong: a three-class polish took a
/// direction that did not descend and stopped 36% above the optimum).
#[test]
fn a_short_step_gathers_what_a_pass_at_its_point_does() {
    let (n, m) = (700, 25);
    for (seed, classes) in [(61, 2), (62, 3)] {
        let (x, y, model) = problem(seed, n, m, classes);
        let targets = Targets::classes(&y, classes);
        let q = targets.n_out();
        let term = |k: usize, i: usize, f: f64| targets.term(k, i, f);
        let weight = |i: usize| 1.0 + (i % 3) as f64 * 0.5;
        let blocks = KernelBlocks::from_sv_matrix(
            &model.support_vectors,
            m,
            model.dim,
            Kernel::rbf(model.gamma),
        )
        .unwrap();
        let mut rng = Rng::new(seed);
        let configs = [(1 << 30, 1 << 30, false), (0, 1 << 30, true), (0, 0, false)];
        for ((cache_left, budget, half), long) in
            configs.into_iter().flat_map(|c| [(c, false), (c, true)])
        {
            let view = DenseView::new(&x, n, 2).unwrap();
            let mut source = InMemory(AnyRows::Dense(view));
            let mut passes = Passes {
                blocks: &blocks,
                source: &mut source,
                segments: Segments {
                    spans: Vec::new(),
                    cache: Vec::new(),
                    cache_left,
                    budget,
                    single: true,
                    kernel_seconds: 0.0,
                },
                count: 0,
                monitor: &mut no_monitor,
                progress: Progress::default(),
            };
            let mut outputs: Vec<Output> = (0..q)
                .map(|k| Output {
                    d: (0..m).map(|_| rng.next_f64() - 0.5).collect(),
                    db: 0.2,
                    ..Output::at((0..m).map(|j| model.coef[j * q + k]).collect(), 0.1, n)
                })
                .collect();
            let all: Vec<usize> = (0..q).collect();
            let copies = if budget == 0 { 0 } else { usize::MAX };
            let gather = |passes: &mut Passes<'_>,
                          outputs: &[Output],
                          points: Option<&[(Vec<f64>, f64)]>| {
                let at = Gather {
                    outputs,
                    live: &all,
                    trial: points,
                    half,
                    squared: &|_| 0,
                    copy_limit: &|_| copies,
                    term: &term,
                    weight: &weight,
                };
                gather_pass(passes, &at).unwrap()
            };
            let here: Vec<(Vec<f64>, f64)> =
                outputs.iter().map(|o| (o.beta.clone(), o.b)).collect();
            let values = gather(&mut passes, &outputs, Some(&here)).1;
            for (o, f) in outputs.iter_mut().zip(values) {
                o.f = f;
            }
            let full: Vec<(Vec<f64>, f64)> = outputs
                .iter()
                .map(|o| {
                    (
                        o.beta.iter().zip(&o.d).map(|(b, d)| b + d).collect(),
                        o.b + o.db,
                    )
                })
                .collect();
            let (at_full, values) = gather(&mut passes, &outputs, Some(&full));
            // Output 0 steps 0.4 of the way (long: 1.6), the last one (of three) 0.7 (2.3),
            // the rest fully.
            let mut steps = Vec::new();
            for (k, (o, v)) in outputs.iter_mut().zip(values).enumerate() {
                o.delta = v.iter().zip(&o.f).map(|(v, f)| v - f).collect();
                let t = match (k, long) {
                    (0, false) => 0.4,
                    (0, true) => 1.6,
                    (2, false) => 0.7,
                    (2, true) => 2.3,
                    _ => 1.0,
                };
                let f_before = o.f.clone();
                o.f.iter_mut().zip(&o.delta).for_each(|(f, d)| *f += t * d);
                o.beta.iter_mut().zip(&o.d).for_each(|(b, d)| *b += t * d);
                o.b += t * o.db;
                if t != 1.0 {
                    steps.push(ShortStep {
                        output: k,
                        t,
                        f_before,
                    });
                }
            }
            let flips = (0..n)
                .filter(|&i| term(0, i, steps[0].f_before[i]) != term(0, i, outputs[0].f[i]))
                .count();
            assert!(flips > 10, "seed {seed}: {flips} rows change piece");
            if long {
                // Rows in one piece at 0 and at the full step that leave it beyond.
                let s = &steps[0];
                let beyond = (0..n)
                    .filter(|&i| {
                        let full = s.f_before[i] + outputs[0].delta[i];
                        term(0, i, s.f_before[i]) == term(0, i, full)
                            && term(0, i, full) != term(0, i, outputs[0].f[i])
                    })
                    .count();
                assert!(
                    beyond > 10,
                    "seed {seed}: {beyond} rows change piece beyond 1"
                );
            }
            let stepped =
                step_pass(&mut passes, at_full, &outputs, &steps, &term, &weight).unwrap();
            let (fresh, _) = gather(&mut passes, &outputs, None);
            assert_eq!(stepped.n_rows, fresh.n_rows, "seed {seed}");
            assert_eq!(stepped.n_recomputed, fresh.n_recomputed, "seed {seed}");
            for k in 0..q {
                let (a, b) = (stepped.place(k), fresh.place(k));
                let scale = fresh.gradient[b].iter().fold(1.0f64, |s, v| s.max(v.abs()));
                for (u, v) in stepped.gradient[a].iter().zip(&fresh.gradient[b]) {
                    assert!(
                        (u - v).abs() <= 1e-12 * scale,
                        "seed {seed} output {k}: {u} {v}"
                    );
                }
                assert!((stepped.weight[a] - fresh.weight[b]).abs() <= 1e-12 * fresh.weight[b]);
                let mut recomputed = stepped.recomputed[a].clone();
                recomputed.sort_by_key(|&(i, _)| i);
                assert_eq!(recomputed, fresh.recomputed[b]);
                // The same rows, their weights and their kernel values as copied.
                let rows = |g: &Gathered, li: usize| -> Vec<(usize, f64, Vec<f32>)> {
                    let values = match g.rows_of(li, m) {
                        SquaredRows::Half(r) => r
                            .iter()
                            .map(|(v, _)| v.iter().map(|h| f32::from(h.0)).collect())
                            .collect::<Vec<Vec<f32>>>(),
                        SquaredRows::Single(r) => r.iter().map(|(v, _)| v.to_vec()).collect(),
                    };
                    let mut rows: Vec<(usize, f64, Vec<f32>)> = g.members[li]
                        .iter()
                        .zip(values)
                        .map(|(member, v)| (member.row, member.weight, v))
                        .collect();
                    rows.sort_by_key(|r| r.0);
                    rows
                };
                assert_eq!(rows(&stepped, a), rows(&fresh, b), "seed {seed} output {k}");
            }
        }
    }
}

/// Squared rows whose copies do not fit the cache are computed again by every product:
/// the same optimum as with every row copied, the same bits on any thread count, the
/// cache's bytes within its budget; rows read from a file (in chunks: the recomputed rows
/// fall in several) too.
#[test]
fn squared_rows_beyond_the_cache_are_recomputed() {
    let (n, m) = (3000, 30);
    for (seed, classes) in [(51, 2), (52, 3)] {
        let (x, y, model) = problem(seed, n, m, classes);
        let x: Vec<f64> = x.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
        let solve = |cache_bytes, threads| {
            let mut p = params(2.0);
            p.method = PolishMethod::HessianFree;
            p.sample_start = false;
            p.cache_bytes = cache_bytes;
            parallel::install_with(Some(threads), || run(&x, &y, None, classes, &model, &p))
                .unwrap()
        };
        let all = solve(1 << 30, 2);
        assert_eq!(all.recomputed_rows, 0);
        let budget = all.squared_rows * m * 2 / 3;
        let part = solve(budget, 1);
        assert!(part.recomputed_rows > 0, "seed {seed}");
        assert!(
            part.kept_bytes <= budget,
            "seed {seed}: {} > {budget}",
            part.kept_bytes
        );
        assert_same_optimum(&x, &model, &part, &all, seed);
        let threads = solve(budget, 3);
        assert_eq!(
            (&threads.coef, &threads.intercept),
            (&part.coef, &part.intercept)
        );
        let none = solve(0, 2);
        assert_eq!(none.recomputed_rows, none.squared_rows);
        assert_same_optimum(&x, &model, &none, &all, seed);

        let path = std::env::temp_dir().join(format!(
            "budgetsvm_recomputed_{}_{seed}.svm",
            std::process::id()
        ));
        let text: String = (0..n)
            .map(|i| format!("{} 1:{:?} 2:{:?}\n", y[i], x[2 * i], x[2 * i + 1]))
            .collect();
        std::fs::write(&path, text).unwrap();
        let labels: Vec<f64> = (0..classes).map(|c| c as f64).collect();
        let opened = LibsvmFileRows::open(&path, 333, 2, &labels);
        let mut p = params(2.0);
        p.method = PolishMethod::HessianFree;
        p.sample_start = false;
        p.cache_bytes = budget;
        let from_file = opened.and_then(|(mut file, _)| {
            let targets = Targets::classes(&y, classes);
            polish(&model, None, &mut file, targets, None, &p, &mut no_monitor)
        });
        std::fs::remove_file(&path).unwrap();
        let from_file = from_file.unwrap();
        assert!(from_file.recomputed_rows > 0, "seed {seed}");
        assert_same_optimum(&x, &model, &from_file, &all, seed);
    }
}

/// The solve that starts from a subsample's solution reaches the optimum of the one that
/// does not (two and three classes, weights, regression, dense and CSR rows; Hessian-free
/// and by the Newton system, whose rows here are more than m^2).
#[test]
fn sample_start_reaches_the_same_optimum() {
    for (seed, classes, weighted, sparse) in [
        (31, 2, false, false),
        (32, 3, true, true),
        (33, 0, false, false),
    ] {
        let (n, m) = (3000, 30);
        let (x, y, mut model) = problem(seed, n, m, classes.max(2));
        let z = regression_values(&x);
        if classes == 0 {
            model.coef.iter_mut().for_each(|v| *v *= 3.0);
        }
        let mut rng = Rng::new(seed);
        let w: Vec<f64> = (0..n).map(|_| 0.2 + rng.next_f64() * 2.0).collect();
        let w = weighted.then_some(&w[..]);
        let indptr: Vec<i64> = (0..=n as i64).map(|i| 2 * i).collect();
        let indices: Vec<i64> = (0..2 * n as i64).map(|k| k % 2).collect();
        let solve = |method, sample_start, cache_bytes| {
            let rows = if sparse {
                AnyRows::Csr64(CsrView::new(&indptr, &indices, &x, 2).unwrap())
            } else {
                AnyRows::Dense(DenseView::new(&x, n, 2).unwrap())
            };
            let targets = test_targets(classes, &y, &z);
            let mut p = params(2.0);
            p.method = method;
            p.sample_start = sample_start;
            p.cache_bytes = cache_bytes;
            polish(
                &model,
                None,
                &mut InMemory(rows),
                targets,
                w,
                &p,
                &mut no_monitor,
            )
            .unwrap()
        };
        let sampled = (0..n).filter(|&i| in_sample(i)).count();
        for method in [PolishMethod::HessianFree, PolishMethod::Newton] {
            let (direct, started) = (solve(method, false, 1 << 30), solve(method, true, 1 << 30));
            assert_eq!((direct.sample_rows, started.sample_rows), (0, sampled));
            // Rows in memory are copied whatever the cache.
            assert_eq!(solve(method, true, 0).sample_rows, sampled);
            assert_same_optimum(&x, &model, &started, &direct, seed);
        }
    }
}

/// `scale_start` moves a start to its best multiple (s beta, b): the objective does not
/// rise, f stays K beta + b, and no nearby (s, b) on a grid is lower; for starts far too
/// large, far too small and about right, classes and regression.
#[test]
fn the_scaled_start_is_the_best_multiple() {
    for (seed, classes, scale) in [(81, 2, 40.0), (82, 2, 0.01), (83, 0, 3.0), (84, 2, 1.0)] {
        let (n, m, c) = (600, 20, 2.0);
        let (x, y, model) = problem(seed, n, m, 2);
        let (k, kss) = explicit_kernels(&x, n, &model);
        let z = regression_values(&x);
        let targets = test_targets(classes, &y, &z);
        let term = |i: usize, v: f64| targets.term(0, i, v);
        let weight = |i: usize| 0.5 + (i % 3) as f64 * 0.5;
        let beta: Vec<f64> = (0..m)
            .map(|j| scale * model.coef[j * model.n_out])
            .collect();
        let b0 = 0.3;
        let values = |beta: &[f64], b: f64| -> Vec<f64> {
            (0..n)
                .map(|i| (0..m).map(|j| k[i * m + j] * beta[j]).sum::<f64>() + b)
                .collect()
        };
        let mut o = Output {
            f: values(&beta, b0),
            ..Output::at(beta, b0, n)
        };
        let value =
            |beta: &[f64], b: f64| objective(&kss, beta, &values(beta, b), c, &term, &weight);
        let before = value(&o.beta, o.b);
        let start = o.beta.clone();
        scale_start(&kss, &mut o, c, &term, &weight, 0.0);
        let after = value(&o.beta, o.b);
        assert!(after <= before, "seed {seed}: {after} > {before}");
        let fresh = values(&o.beta, o.b);
        let drift = fresh
            .iter()
            .zip(&o.f)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(drift < 1e-9, "seed {seed}: f off by {drift}");
        let s = if start[0] != 0.0 {
            o.beta[0] / start[0]
        } else {
            1.0
        };
        for ds in [-0.02, -0.002, 0.002, 0.02] {
            for db in [-0.02, -0.002, 0.0, 0.002, 0.02] {
                let moved: Vec<f64> = start.iter().map(|v| v * (s + ds)).collect();
                let near = value(&moved, o.b + db);
                assert!(
                    near >= after * (1.0 - 1e-12),
                    "seed {seed}: s {s} + {ds}, b {} + {db}: {near} < {after}",
                    o.b
                );
            }
        }
        if scale != 1.0 {
            assert!(after < before, "seed {seed}: the start did not move");
        }
    }
}

/// The predicted stop: after a full step, once the next decrease at the last two's rate
/// is within the tolerance; never after a short step or a growing decrease.
#[test]
fn a_full_steps_decrease_predicts_the_next() {
    // Halving decreases 8, 4, 2, 1 with the tolerance 0.6: 2 predicts 1 (go on), 1
    // predicts 0.5 (stop, a step before 0.5 itself would).
    assert!(!stops_after(4.0, 8.0, true, 0.6));
    assert!(!stops_after(2.0, 4.0, true, 0.6));
    assert!(stops_after(1.0, 2.0, true, 0.6));
    assert!(!stops_after(1.0, 2.0, false, 0.6));
    assert!(!stops_after(1.0, 0.0, true, 0.6) && !stops_after(3.0, 2.0, true, 0.6));
    assert!(stops_after(0.5, 2.0, false, 0.6) && stops_after(-1.0, 0.0, false, 0.0));
}

/// A tolerance's stop, the one a full step's decrease predicts included, ends near the
/// optimum (the solve run to the end: tol 0) and takes no more iterations; for both solves,
/// classes and regression. Near: the Newton solve within tol (0.02 tol here), the
/// Hessian-free one within 10 tol (6 here: its last direction's predicted decrease, -g.x of
/// a direction solved to a residual of 0.05, is what it stops on).
#[test]
fn a_tolerance_stops_within_it_of_the_optimum() {
    for (seed, n, m, classes, c) in [
        (71, 3000, 30, 2, 2.0),
        (72, 2000, 40, 3, 8.0),
        (73, 2500, 30, 0, 4.0),
    ] {
        let (x, y, mut model) = problem(seed, n, m, classes.max(2));
        let z = regression_values(&x);
        if classes == 0 {
            model.coef.iter_mut().for_each(|v| *v *= 3.0);
        }
        for method in [PolishMethod::Newton, PolishMethod::HessianFree] {
            let solve = |tol| {
                let targets = test_targets(classes, &y, &z);
                let mut p = params(c);
                p.method = method;
                p.tol = tol;
                polish_dense(&model, &x, targets, None, &p).unwrap()
            };
            let exact = solve(0.0);
            assert!(exact.converged);
            let allowed = if method == PolishMethod::Newton {
                1.0
            } else {
                10.0
            };
            for tol in [1e-3, 1e-4, 1e-5] {
                let r = solve(tol);
                assert!(r.converged && r.iterations <= exact.iterations);
                for (o, (&got, &best)) in r.objective.iter().zip(&exact.objective).enumerate() {
                    assert!(
                        got - best <= allowed * tol * best && got >= best * (1.0 - 1e-9),
                        "seed {seed} {method:?} tol {tol} output {o}: {got} against {best}"
                    );
                }
            }
        }
    }
}

/// A model without support vectors polishes its intercept alone, on many rows too (the
/// subsample's start, which would recurse on it without end, is not taken).
#[test]
fn an_empty_basis_polishes_without_a_subsample() {
    let (x, y, mut model) = problem(61, 2000, 1, 2);
    model.support_vectors = SvMatrix::Dense(Vec::new());
    model.coef.clear();
    for method in [PolishMethod::Newton, PolishMethod::Auto] {
        let mut p = params(1.0);
        p.method = method;
        let r = run(&x, &y, None, 2, &model, &p);
        assert_eq!((r.sample_rows, r.coef.len()), (0, 0));
        assert!(r.intercept[0].is_finite());
    }
}

/// The subsample takes about one row in `SAMPLE_STEP` of every residue of the row's index
/// (a stride would take all of some residues and none of others: data stored in a period).
#[test]
fn the_sample_is_not_a_stride() {
    let n = 200_000;
    for period in [2, 5, 7, 10, 64] {
        for residue in 0..period {
            let rows = (residue..n).step_by(period);
            let (all, taken) = (rows.len(), rows.filter(|&i| in_sample(i)).count());
            // Within five standard deviations of a binomial draw's count.
            let p = 1.0 / SAMPLE_STEP as f64;
            let sd = (all as f64 * p * (1.0 - p)).sqrt();
            let off = (taken as f64 - all as f64 * p).abs() / sd;
            assert!(
                off < 5.0,
                "period {period}, residue {residue}: {off} sd off"
            );
        }
    }
}

/// A LIBSVM file read in chunks (333 rows: the subsample's rows are picked by their index in
/// the file, not in the chunk) starts from the same subsample as the rows in memory, and
/// ends at the same optimum.
#[test]
fn file_rows_give_the_same_sample_start() {
    let (n, m) = (3000, 30);
    let (x, y, model) = problem(41, n, m, 2);
    // Three decimals: the file's text is the values exactly.
    let x: Vec<f64> = x.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
    let path =
        std::env::temp_dir().join(format!("budgetsvm_sample_start_{}.svm", std::process::id()));
    let text: String = (0..n)
        .map(|i| format!("{} 1:{:?} 2:{:?}\n", y[i], x[2 * i], x[2 * i + 1]))
        .collect();
    std::fs::write(&path, text).unwrap();
    let mut p = params(2.0);
    p.method = PolishMethod::HessianFree;
    let from_file_with = |p: &PolishParams| {
        let (mut file, file_y) = LibsvmFileRows::open(&path, 333, 2, &[0.0, 1.0])?;
        assert_eq!(file_y, y);
        let targets = Targets::classes(&y, 2);
        polish(&model, None, &mut file, targets, None, p, &mut no_monitor)
    };
    let from_file = from_file_with(&p);
    // A file's subsample larger than a quarter of the cache is not copied.
    let sampled = (0..n).filter(|&i| in_sample(i)).count();
    let mut small = p.clone();
    small.cache_bytes = 4 * sampled * 8;
    let not_copied = from_file_with(&small);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(not_copied.unwrap().sample_rows, 0);
    let from_file = from_file.unwrap();
    let indptr: Vec<i64> = (0..=n as i64).map(|i| 2 * i).collect();
    let indices: Vec<i64> = (0..2 * n as i64).map(|k| k % 2).collect();
    let rows = AnyRows::Csr64(CsrView::new(&indptr, &indices, &x, 2).unwrap());
    let in_memory = polish(
        &model,
        None,
        &mut InMemory(rows),
        Targets::classes(&y, 2),
        None,
        &p,
        &mut no_monitor,
    )
    .unwrap();
    assert_eq!(from_file.sample_rows, sampled);
    assert_eq!(in_memory.sample_rows, from_file.sample_rows);
    // The same optimum; not the same bits: the gather's sums follow the file's blocks.
    assert_same_optimum(&x, &model, &from_file, &in_memory, 41);
}

/// The same solution whatever the cache holds and however many threads run.
#[test]
fn cache_and_threads_do_not_change_the_result() {
    let (x, y, model) = problem(5, 3000, 30, 3);
    let base = run(&x, &y, None, 3, &model, &params(5.0));
    let mut small = params(5.0);
    let segment = segment_rows(30, false);
    small.cache_bytes = segment * 30 * 8; // one segment cached, two recomputed
    for threads in [1, 3] {
        let r =
            parallel::install_with(Some(threads), || run(&x, &y, None, 3, &model, &small)).unwrap();
        assert_eq!(r.coef, base.coef);
        assert_eq!(r.intercept, base.intercept);
        assert_eq!(r.cached_rows, segment);
    }
    assert_eq!(base.cached_rows, 3000);
    assert!(base
        .objective
        .iter()
        .zip(&base.objective_start)
        .all(|(a, b)| a <= b));
}

/// Ctrl-C reaches the Hessian-free solve before every conjugate-gradient product (the
/// monitor is called at least once per product, with the rows copied or computed again),
/// and its first error ends the polish at once: returned, the monitor not called again.
#[test]
fn the_hessian_free_solve_looks_for_ctrl_c_before_every_product() {
    let (x, y, model) = problem(31, 800, 40, 2);
    let n = y.len();
    for cache_bytes in [1 << 30, 0] {
        let mut p = params(2.0);
        p.method = PolishMethod::HessianFree;
        p.cache_bytes = cache_bytes;
        let solve = |stop_at: usize| {
            let view = DenseView::new(&x, n, 2).unwrap();
            let mut source = InMemory(AnyRows::Dense(view));
            let targets = Targets::Classes {
                y: &y,
                n_classes: 2,
            };
            let mut calls = 0;
            let mut monitor = |_: &Progress| {
                calls += 1;
                if calls >= stop_at {
                    Err(SvmError::Interrupted)
                } else {
                    Ok(())
                }
            };
            let r = polish(&model, None, &mut source, targets, None, &p, &mut monitor);
            (r, calls)
        };
        let (whole, calls) = solve(usize::MAX);
        let whole = whole.unwrap();
        assert!(whole.cg_products > 10, "{}", whole.cg_products);
        assert!(
            calls >= whole.cg_products,
            "cache {cache_bytes}: {calls} checks for {} products",
            whole.cg_products
        );
        for stop_at in [1, calls / 3, calls / 2, calls - 1] {
            let (r, made) = solve(stop_at);
            assert!(matches!(r, Err(SvmError::Interrupted)), "stop at {stop_at}");
            assert_eq!(made, stop_at, "cache {cache_bytes}: checks after the error");
        }
    }
}

/// Duplicated basis vectors (a singular K_SS) still give the optimum's objective.
#[test]
fn singular_basis_gives_the_same_objective() {
    let (x, y, model) = problem(7, 400, 15, 2);
    let r = run(&x, &y, None, 2, &model, &params(3.0));
    let SvMatrix::Dense(sv) = &model.support_vectors else {
        unreachable!()
    };
    let mut twice = sv.clone();
    twice.extend_from_slice(sv);
    let mut coef = model.coef.clone();
    coef.extend(model.coef.iter().map(|c| c * 0.5));
    let doubled = BudgetModel {
        support_vectors: SvMatrix::Dense(twice),
        coef,
        ..model.clone()
    };
    let r2 = run(&x, &y, None, 2, &doubled, &params(3.0));
    let rel = (r2.objective[0] - r.objective[0]).abs() / r.objective[0];
    assert!(rel < 1e-8, "{} vs {}", r2.objective[0], r.objective[0]);
}

/// Weight 2 on a row equals the row twice.
#[test]
fn weights_equal_repeated_rows() {
    let (x, y, model) = problem(9, 250, 12, 2);
    let n = y.len();
    let w: Vec<f64> = (0..n).map(|i| if i % 3 == 0 { 2.0 } else { 1.0 }).collect();
    let weighted = run(&x, &y, Some(&w), 2, &model, &params(2.0));
    let (mut xr, mut yr) = (x.clone(), y.clone());
    for i in (0..n).step_by(3) {
        xr.extend_from_slice(&x[2 * i..2 * i + 2]);
        yr.push(y[i]);
    }
    let repeated = run(&xr, &yr, None, 2, &model, &params(2.0));
    let rel = (weighted.objective[0] - repeated.objective[0]).abs() / repeated.objective[0];
    assert!(rel < 1e-9);
    for (a, b) in weighted.coef.iter().zip(&repeated.coef) {
        assert!((a - b).abs() < 1e-6 * (1.0 + b.abs()));
    }
}

/// A partition's Hessian-free sums are the explicit ones: the gradient sum w hs k (and
/// its intercept part), the loss, the squared rows' weight, and the products
/// sum_Q w (k . v + v_b) k over the rows squared at the point asked (the memo follows the
/// point); the same bits on one thread.
#[test]
#[allow(clippy::needless_range_loop)] // rows and outputs index several arrays at once
fn partition_gradient_and_hessian_products_are_the_explicit_sums() {
    for n_classes in [2, 3] {
        let (x, y, model) = problem(13, 700, 20, n_classes);
        let (m, q, n) = (model.n_sv(), model.n_out, 700);
        let blocks =
            KernelBlocks::from_sv_matrix(&model.support_vectors, m, 2, Kernel::rbf(model.gamma))
                .unwrap();
        let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 5) as f64 * 0.25).collect();
        let view = DenseView::new(&x, n, 2).unwrap();
        let targets = Targets::classes(&y, n_classes);
        let part = PartitionRows::new(&blocks, &view, targets, Some(&w)).unwrap();
        let v: Vec<f64> = (0..q * (m + 1)).map(|i| (i as f64 * 0.7).sin()).collect();
        for scale in [1.0, 2.5] {
            let coef: Vec<f64> = model.coef.iter().map(|c| c * scale).collect();
            let b: Vec<f64> = (0..q).map(|k| 0.1 * k as f64 - 0.05).collect();
            let grad = part.gradient((&coef, &b)).unwrap();
            let hv = part.hessian_product((&coef, &b), &v).unwrap();
            let mut want_g = vec![0.0; q * (m + 1)];
            let mut want_hv = vec![0.0; q * (m + 1)];
            let (mut loss, mut weight) = (vec![0.0; q], vec![0.0; q]);
            for i in 0..n {
                let row = &part.k[i * m..(i + 1) * m];
                for k in 0..q {
                    let f: f64 = (0..m).map(|j| row[j] * coef[j * q + k]).sum::<f64>() + b[k];
                    let term = targets.term(k, i, f);
                    loss[k] += w[i] * term.loss(f);
                    let hs = w[i] * term.half_slope(f);
                    for j in 0..m {
                        want_g[k * (m + 1) + j] += hs * row[j];
                    }
                    want_g[k * (m + 1) + m] += hs;
                    if term.curvature() > 0.0 {
                        weight[k] += w[i];
                        let vk = &v[k * (m + 1)..(k + 1) * (m + 1)];
                        let t = w[i] * ((0..m).map(|j| row[j] * vk[j]).sum::<f64>() + vk[m]);
                        for j in 0..m {
                            want_hv[k * (m + 1) + j] += t * row[j];
                        }
                        want_hv[k * (m + 1) + m] += t;
                    }
                }
            }
            let close = |got: &[f64], want: &[f64]| {
                let top = want.iter().fold(1.0f64, |a, v| a.max(v.abs()));
                got.iter()
                    .zip(want)
                    .all(|(g, w)| (g - w).abs() <= 1e-10 * top)
            };
            assert!(close(&grad.gradient, &want_g), "classes {n_classes}");
            assert!(close(&grad.loss, &loss) && close(&grad.weight, &weight));
            assert!(
                weight.iter().sum::<f64>() > 0.0,
                "no square at {scale}: {weight:?}"
            );
            assert!(close(&hv, &want_hv), "classes {n_classes} scale {scale}");
            // Another point first: the memo must not answer for this one.
            let other: Vec<f64> = coef.iter().map(|c| c * 2.0).collect();
            part.hessian_product((&other, &b), &v).unwrap();
            let again = crate::core::common::parallel::install_with(Some(1), || {
                part.hessian_product((&coef, &b), &v).unwrap()
            })
            .unwrap();
            assert!(again
                .iter()
                .zip(&hv)
                .all(|(a, h)| a.to_bits() == h.to_bits()));
            let one = crate::core::common::parallel::install_with(Some(1), || {
                part.gradient((&coef, &b)).unwrap()
            })
            .unwrap();
            assert!(one
                .gradient
                .iter()
                .zip(&grad.gradient)
                .all(|(a, g)| a.to_bits() == g.to_bits()));
        }
        // Bad input is an error, not a panic.
        assert!(part
            .hessian_product((&model.coef, &vec![0.0; q]), &v[1..])
            .is_err());
        assert!(part.gradient((&model.coef[1..], &vec![0.0; q])).is_err());
        let point = (&model.coef[..], &vec![0.0; q][..]);
        assert!(part.line_changes(point, point, 1.0, &[], 8).is_err());
        assert!(part
            .line_changes(point, point, 1.0, &vec![f64::NAN; q], 8)
            .is_err());
        assert!(part
            .line_changes(point, point, 1.0, &vec![0.0; q], 0)
            .is_err());
        assert!(part
            .line_changes(point, point, -1.0, &vec![0.0; q], 8)
            .is_err());
    }
}

/// The distributed form (partitions' sums added by a driver running Newton steps, each with
/// the exact line search over the partitions' piece changes walked a few at a time) reaches
/// the serial solve's optimum, for classes and for values (where rows also cross the tube,
/// changing their target but not their activity).
#[test]
#[allow(clippy::needless_range_loop)] // outputs index several arrays at once
fn partition_sums_reach_the_serial_optimum() {
    // (classes, C, epsilon): epsilon given means regression on a smooth target.
    for (n_classes, c, epsilon) in [(2, 3.0, None), (3, 1.0, None), (2, 2.0, Some(0.05))] {
        let (x, y, model) = problem(11, 900, 25, n_classes);
        let z = regression_values(&x);
        let targets = |rows: std::ops::Range<usize>| match epsilon {
            None => Targets::classes(&y[rows], n_classes),
            Some(epsilon) => Targets::Values {
                y: &z[rows],
                epsilon,
            },
        };
        let serial = polish_dense(&model, &x, targets(0..900), None, &params(c)).unwrap();
        let m = model.n_sv();
        let q = model.n_out;
        let blocks =
            KernelBlocks::from_sv_matrix(&model.support_vectors, m, 2, Kernel::rbf(model.gamma))
                .unwrap();
        let SvMatrix::Dense(sv) = &model.support_vectors else {
            unreachable!()
        };
        let mut kss = vec![0.0; m * m];
        let s = DenseView::new(sv, m, 2).unwrap();
        kernel_matrix(&s, &s, model.gamma, &mut kss).unwrap();
        // Three uneven partitions, one empty.
        let cuts = [0, 100, 100, 600, 900];
        let parts: Vec<PartitionRows> = cuts
            .windows(2)
            .map(|w| {
                let view = DenseView::new(&x[2 * w[0]..2 * w[1]], w[1] - w[0], 2).unwrap();
                PartitionRows::new(&blocks, &view, targets(w[0]..w[1]), None).unwrap()
            })
            .collect();
        let all = |counted: Option<(&[f64], &[f64])>, trial: (&[f64], &[f64])| {
            parts
                .iter()
                .map(|p| p.sums(counted, trial, true).unwrap())
                .collect::<Vec<_>>()
        };
        let reg = |coef: &[f64], k: usize| {
            let beta: Vec<f64> = (0..m).map(|j| coef[j * q + k]).collect();
            0.5 * quad_form(&kss, &beta, &beta)
        };
        let mut coef = model.coef.clone();
        let mut b = vec![0.0; q];
        let first = all(None, (&coef, &b));
        let mut sums: Vec<ActiveSums> = (0..q).map(|_| ActiveSums::new(m)).collect();
        let mut obj: Vec<f64> = (0..q).map(|k| reg(&coef, k)).collect();
        for p in &first {
            for k in 0..q {
                sums[k]
                    .add_change(&p.change[k], p.factors[k].as_ref())
                    .unwrap();
                obj[k] += c * p.loss_trial[k];
            }
        }
        for _ in 0..60 {
            // Newton points per output, then one step for all with per-output backtracking.
            let mut dir = vec![0.0; m * q];
            let mut db = vec![0.0; q];
            for k in 0..q {
                let xk = sums[k].newton_point(&kss, c, b[k], &mut || Ok(())).unwrap();
                for j in 0..m {
                    dir[j * q + k] = xk[j] - coef[j * q + k];
                }
                db[k] = xk[m] - b[k];
            }
            // The step per output as the distributed driver finds it: phi'(0) from the
            // partitions' sums, then their piece changes walked a few at a time (`most` small,
            // so the walk takes several rounds).
            let mut t = vec![0.0; q];
            let mut walks = vec![SlopeWalk::new(0.0, 0.0); q];
            let mut from = vec![0.0; q];
            let most = 7;
            let mut first = true;
            while from.iter().any(|f: &f64| f.is_finite()) {
                let rounds: Vec<LineChanges> = parts
                    .iter()
                    .map(|p| {
                        p.line_changes((&coef, &b), (&dir, &db), c, &from, most)
                            .unwrap()
                    })
                    .collect();
                for k in 0..q {
                    if first {
                        let beta: Vec<f64> = (0..m).map(|j| coef[j * q + k]).collect();
                        let d: Vec<f64> = (0..m).map(|j| dir[j * q + k]).collect();
                        let a: f64 = rounds.iter().map(|r| r.a[k]).sum();
                        let b: f64 = rounds.iter().map(|r| r.b[k]).sum();
                        walks[k] = SlopeWalk::new(
                            quad_form(&kss, &beta, &d) + a,
                            quad_form(&kss, &d, &d) + b,
                        );
                        let flips = rounds.iter().any(|r| r.flips[k] > 0);
                        let (a, b) = (walks[k].a, walks[k].b);
                        if let Some(step) = settled_step(a, b, flips, true) {
                            (t[k], from[k]) = (step, f64::INFINITY);
                        }
                    }
                    if from[k] == f64::INFINITY {
                        continue;
                    }
                    let walk = &mut walks[k];
                    let complete_to = rounds
                        .iter()
                        .map(|r| r.complete_to[k])
                        .fold(f64::INFINITY, f64::min);
                    let mut changes: Vec<PieceChange> = rounds
                        .iter()
                        .flat_map(|r| r.changes[k].iter().copied())
                        .filter(|change| change.t <= complete_to)
                        .collect();
                    changes.sort_by(walk_order);
                    let step = walk.walk_to(&changes, complete_to);
                    match step {
                        Some(step) => (t[k], from[k]) = (step, f64::INFINITY),
                        None => from[k] = complete_to,
                    }
                }
                first = false;
            }
            let trial_c: Vec<f64> = (0..m * q).map(|i| coef[i] + t[i % q] * dir[i]).collect();
            let trial_b: Vec<f64> = (0..q).map(|k| b[k] + t[k] * db[k]).collect();
            let r = all(Some((&coef, &b)), (&trial_c, &trial_b));
            let mut moved = false;
            for k in 0..q {
                let loss: f64 = r.iter().map(|p| p.loss_trial[k]).sum();
                let new_obj = reg(&trial_c, k) + c * loss;
                if new_obj >= obj[k] {
                    continue;
                }
                for j in 0..m {
                    coef[j * q + k] = trial_c[j * q + k];
                }
                b[k] = trial_b[k];
                for p in &r {
                    sums[k]
                        .add_change(&p.change[k], p.factors[k].as_ref())
                        .unwrap();
                }
                moved |= obj[k] - new_obj > 1e-15 * obj[k];
                obj[k] = new_obj;
            }
            if !moved {
                break;
            }
        }
        for k in 0..q {
            let rel = (obj[k] - serial.objective[k]).abs() / serial.objective[k];
            assert!(
                rel < 1e-9,
                "classes {n_classes} epsilon {epsilon:?} output {k}: {} vs {}",
                obj[k],
                serial.objective[k]
            );
        }
    }
}

#[test]
fn bad_input_is_an_error() {
    let (x, y, model) = problem(1, 50, 5, 2);
    let view = DenseView::new(&x, 50, 2).unwrap();
    let mut src = InMemory(AnyRows::Dense(view));
    let p = params(1.0);
    let classes = |y, n_classes| Targets::Classes { y, n_classes };
    let short = classes(&y[..49], 2);
    assert!(polish(&model, None, &mut src, short, None, &p, &mut no_monitor).is_err());
    let three = classes(&y, 3);
    assert!(polish(&model, None, &mut src, three, None, &p, &mut no_monitor).is_err());
    let two = classes(&y, 2);
    let mut bad = p.clone();
    bad.max_iter = 0;
    assert!(polish(&model, None, &mut src, two, None, &bad, &mut no_monitor).is_err());
    let w = vec![0.0; 50];
    assert!(polish(&model, None, &mut src, two, Some(&w), &p, &mut no_monitor).is_err());
    let z: Vec<f64> = (0..50).map(|i| i as f64).collect();
    for epsilon in [-0.1, f64::NAN, f64::INFINITY] {
        let values = Targets::Values { y: &z, epsilon };
        assert!(polish(&model, None, &mut src, values, None, &p, &mut no_monitor).is_err());
    }
    let mut bad_z = z.clone();
    bad_z[7] = f64::NAN;
    let values = Targets::Values {
        y: &bad_z,
        epsilon: 0.1,
    };
    let err = polish(&model, None, &mut src, values, None, &p, &mut no_monitor).unwrap_err();
    assert!(err.to_string().contains("row 7"), "{err}");
}

#[test]
fn the_polish_counts_its_square_matrices_before_allocating_them() {
    // A million rows at B = 10,000, one output, 1 GB of cache: K_SS, M, the system and its
    // factor (3.2 GB) come on top of the cache; a thousand rows cache only what they have.
    let big = polish_bytes(10_000, 1_000_000, 1, 1 << 30);
    assert!(big > 4_200_000_000 && big < 6_000_000_000, "{big}");
    let small = polish_bytes(100, 1_000, 1, 1 << 30);
    assert!(small < 20_000_000, "{small}");
    assert!(check_fits(big, Some(3_000_000_000), || "the polish".into()).is_err());
}

/// A pair of a file's classes (`open_pair`: one-vs-one's polish in `fit_file`) is polished
/// on the rows of its two classes only, targets 0 for its first and 1 for its second: the
/// polish of a file holding only those rows, bit for bit while both are one chunk, and the
/// same optimum in chunks (whose kept rows are copied per chunk).
#[test]
fn a_pair_of_classes_is_polished_on_its_rows() {
    let (n, m) = (3000, 30);
    let (x, y, _) = problem(47, n, m, 3);
    let (_, _, model) = problem(47, n, m, 2); // the same rows, a binary model
    let x: Vec<f64> = x.iter().map(|v| (v * 1000.0).round() / 1000.0).collect();
    let dir = std::env::temp_dir();
    let all = dir.join(format!("budgetsvm_pair_all_{}.svm", std::process::id()));
    let only = dir.join(format!("budgetsvm_pair_only_{}.svm", std::process::id()));
    let line = |i: usize| format!("{} 1:{:?} 2:{:?}\n", y[i], x[2 * i], x[2 * i + 1]);
    let pair: Vec<usize> = (0..n).filter(|&i| y[i] != 1).collect();
    std::fs::write(&all, (0..n).map(line).collect::<String>()).unwrap();
    std::fs::write(&only, pair.iter().map(|&i| line(i)).collect::<String>()).unwrap();
    let classes = [0.0, 1.0, 2.0];
    let mut p = params(2.0);
    p.method = PolishMethod::HessianFree;
    let solve = |path: &std::path::Path, chunk: usize, pair_of: Option<(u32, u32)>| {
        let (mut file, targets) = match pair_of {
            Some(pair_of) => LibsvmFileRows::open_pair(path, chunk, 2, &classes, pair_of)?,
            None => LibsvmFileRows::open(path, chunk, 2, &[0.0, 2.0])?,
        };
        let r = polish(
            &model,
            None,
            &mut file,
            Targets::classes(&targets, 2),
            None,
            &p,
            &mut no_monitor,
        )?;
        Ok::<_, SvmError>((targets, r))
    };
    let whole = solve(&all, n, Some((0, 2)));
    let alone = solve(&only, n, None);
    let chunked = solve(&all, 333, Some((0, 2)));
    let refused = LibsvmFileRows::open_pair(&all, 333, 2, &classes, (2, 2)).err();
    std::fs::remove_file(&all).unwrap();
    std::fs::remove_file(&only).unwrap();
    let ((targets, whole), (alone_targets, alone)) = (whole.unwrap(), alone.unwrap());
    let expected: Vec<u32> = pair.iter().map(|&i| u32::from(y[i] == 2)).collect();
    assert_eq!(targets, expected);
    assert_eq!(alone_targets, expected);
    assert_eq!(
        (&whole.coef, &whole.intercept),
        (&alone.coef, &alone.intercept)
    );
    let (_, chunked) = chunked.unwrap();
    let pair_x: Vec<f64> = pair
        .iter()
        .flat_map(|&i| [x[2 * i], x[2 * i + 1]])
        .collect();
    assert_same_optimum(&pair_x, &model, &chunked, &whole, 47);
    assert!(refused.is_some());
}

/// Rows in memory that count the passes over them (a file read again on every pass).
struct CountedPasses<'a> {
    rows: InMemory<'a>,
    passes: usize,
}

impl RowSource for CountedPasses<'_> {
    fn n_rows(&self) -> usize {
        self.rows.n_rows()
    }
    fn n_cols(&self) -> usize {
        self.rows.n_cols()
    }
    fn pass(&mut self, visit: &mut dyn FnMut(usize, &AnyRows<'_>) -> Result<()>) -> Result<()> {
        self.passes += 1;
        self.rows.pass(visit)
    }
}

/// Once the cache holds every row's kernel values the source is not read again (a file is
/// parsed on the first pass only), and the solution is the one of a cache that holds none
/// (every pass reading the rows): the same bits by the Newton system, the same optimum
/// Hessian-free (whose squared rows' copies follow the cache), with and without the
/// subsample.
#[test]
fn a_source_the_cache_holds_is_read_once() {
    let (x, y, model) = problem(53, 3000, 30, 3);
    for (method, sample_start) in [
        (PolishMethod::Newton, false),
        (PolishMethod::HessianFree, false),
        (PolishMethod::HessianFree, true),
    ] {
        let solve = |cache_bytes: usize| {
            let view = DenseView::new(&x, 3000, 2).unwrap();
            let mut source = CountedPasses {
                rows: InMemory(AnyRows::Dense(view)),
                passes: 0,
            };
            let mut p = params(5.0);
            p.method = method;
            p.sample_start = sample_start;
            p.cache_bytes = cache_bytes;
            let targets = Targets::classes(&y, 3);
            let r = polish(
                &model,
                None,
                &mut source,
                targets,
                None,
                &p,
                &mut no_monitor,
            );
            (r.unwrap(), source.passes)
        };
        let (cached, reads) = solve(1 << 30);
        let (uncached, reads_uncached) = solve(0);
        assert_eq!(cached.cached_rows, 3000);
        assert!(cached.passes > 2, "{method:?}: {} passes", cached.passes);
        // The first pass, and the subsample's copy when the solve starts from it.
        assert_eq!(reads, 1 + usize::from(cached.sample_rows > 0), "{method:?}");
        assert!(reads_uncached >= uncached.passes, "{method:?}");
        if method == PolishMethod::Newton {
            assert_eq!(cached.coef, uncached.coef);
            assert_eq!(cached.intercept, uncached.intercept);
        } else {
            assert_same_optimum(&x, &model, &cached, &uncached, 53);
        }
    }
}
