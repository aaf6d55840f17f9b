use super::augmented_lagrangian::repair;
use super::candidates::Smallest;
use super::local_smo::{local_smo, LocalSmoInput, LocalSmoOutput, LocalSmoScratch};
use super::selection::merge_by_position;
use super::*;
use crate::core::common::rng::Rng;
use crate::core::data::rows::{CsrView, DenseView};
use crate::core::exact::dual::label_index;
use crate::core::exact::smo::tests::{
    assert_same_objective, bounds, check_solution, problem, projected_gradient, q_matrix, quietly,
    rbf_svc, run_smo,
};
use crate::core::kernels::kernel::Kernel;
use crate::core::simd;
use crate::core::simd::Level;

/// How `run` solves: the tolerance, ALFPGM's parameters, the cache's bytes and the shrinking.
struct Setup<'a> {
    tol: f64,
    params: &'a AlfpgmParams,
    cache_bytes: usize,
    shrinking: Option<usize>,
}

fn run<R: Rows>(x: &R, y: &[f64], c: &[f64], gamma: f64, setup: Setup<'_>) -> DualSolution {
    let Setup {
        tol,
        params,
        cache_bytes,
        shrinking,
    } = setup;
    let mut cache = KernelRowCache::<_, f32>::new(x, Kernel::rbf(gamma), cache_bytes).unwrap();
    let run = ExactRun {
        tol,
        max_iter: 1_000_000,
        shrinking,
    };
    let problem = rbf_svc(y.to_vec(), c.to_vec());
    quietly(|rep| solve_alfpgm(&mut cache, problem, &run, params, rep)).unwrap()
}

#[test]
fn alfpgm_matches_smo_on_random_problems() {
    let mut rng = Rng::new(5);
    // Trials 24.. weight the rows (a bound C_i per variable).
    for trial in 0..36 {
        let n = 10 + rng.below(150);
        let d = 1 + rng.below(5);
        let c = [0.1, 1.0, 10.0, 100.0][trial % 4];
        let gamma = [0.3, 1.0, 5.0][(trial / 4) % 3];
        let (xs, y) = problem(n, d, 500 + trial as u64);
        let c = bounds(n, c, trial >= 24, trial as u64);
        let q = q_matrix(&xs, &y, d, gamma);
        let tol = 1e-5;
        let params = AlfpgmParams {
            n_pairs: [1, 2, 5, 20, 100][trial % 5],
            min_alpha_opt: [0, 2, 5][trial % 3] as u32,
            max_alpha_opt: [5, 50, 500][(trial / 3) % 3] as u32,
            min_alpha_check: [0, 1, 7][trial % 3],
            pair_ratio: [0.0, 0.5, 0.9][(trial / 2) % 3],
            ..Default::default()
        };
        let x = DenseView::new(&xs, n, d).unwrap();
        let shrinking = [None, Some(2), Some(0)][(trial / 7) % 3];
        let setup = Setup {
            tol,
            params: &params,
            cache_bytes: [0, 1 << 20][trial % 2],
            shrinking,
        };
        let sol = run(&x, &y, &c, gamma, setup);
        check_solution(&q, &sol, &c, tol);
        let smo = run_smo(&xs, &y, d, &c, gamma, 1e-8, None);
        let what = format!("trial {trial}, alfpgm vs smo");
        assert_same_objective(sol.objective, smo.objective, 1e-5, &what);
        let free = |s: &DualSolution| {
            s.alpha
                .iter()
                .zip(&c)
                .filter(|(&a, &ci)| a > 0.0 && a < ci)
                .count()
        };
        // rho is unique only through free variables (otherwise any point of an interval).
        if free(&sol) > 0 && free(&smo) > 0 {
            assert!(
                (sol.rho - smo.rho).abs() < 1e-3,
                "trial {trial}: rho {} vs {} ({} / {} free)",
                sol.rho,
                smo.rho,
                free(&sol),
                free(&smo)
            );
        }
    }
}

/// Euclidean projection onto {sum over label l of a = s_l for both labels, 0 <= a <= c}:
/// per label a_t = clip(v_t - mu_l), mu_l by bisection on the monotone sum.
fn project_per_label(v: &[f64], y: &[f64], c: &[f64], sums: [f64; 2], out: &mut [f64]) {
    for (l, label) in [1.0, -1.0].into_iter().enumerate() {
        let of = |t: &usize| y[*t] == label;
        let at = |mu: f64, t: usize| (v[t] - mu).clamp(0.0, c[t]);
        let sum = |mu: f64| (0..v.len()).filter(of).map(|t| at(mu, t)).sum::<f64>();
        let (mut lo, mut hi) = (-1e6, 1e6);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if sum(mid) > sums[l] {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        for t in (0..v.len()).filter(of) {
            out[t] = at(0.5 * (lo + hi), t);
        }
    }
}

/// An independent solver of a problem with a sum per label (`projected_gradient` onto both
/// labels' sums and the box) from the feasible start.
fn reference_per_label(q: &[f64], problem: &DualProblem, iters: usize) -> Vec<f64> {
    let (n, y, c) = (problem.n(), &problem.y, &problem.upper);
    let a0 = problem.start.clone().unwrap();
    let sums = [1.0, -1.0].map(|l| (0..n).filter(|&t| y[t] == l).map(|t| a0[t]).sum());
    let project = |v: &[f64], out: &mut [f64]| project_per_label(v, y, c, sums, out);
    projected_gradient(q, &problem.p, a0, project, iters)
}

#[test]
fn a_sum_per_label_reaches_the_reference_optimum_with_both_solvers() {
    let mut rng = Rng::new(31);
    for trial in 0..12 {
        let n = 12 + rng.below(40);
        let d = 1 + rng.below(3);
        let gamma = [0.5, 2.0][trial % 2];
        let (xs, y) = problem(n, d, 900 + trial as u64);
        let q = q_matrix(&xs, &y, d, gamma);
        // nu-SVC's start (each label filled to nu sum c / 2) or a nu-SVR-like linear term.
        let c = bounds(n, 1.0, trial % 4 >= 2, trial as u64);
        // Feasible: nu sum c / 2 within each label's total.
        let total = |l: f64| (0..n).filter(|&t| y[t] == l).map(|t| c[t]).sum::<f64>();
        let most = 2.0 * total(1.0).min(total(-1.0)) / c.iter().sum::<f64>();
        let nu = [0.2f64, 0.5, 0.8][trial % 3].min(0.95 * most);
        let mut left = [nu * c.iter().sum::<f64>() / 2.0; 2];
        let start: Vec<f64> = (0..n)
            .map(|t| {
                let l = &mut left[label_index(y[t])];
                let a = c[t].min(*l);
                *l -= a;
                a
            })
            .collect();
        let p: Vec<f64> = if trial % 2 == 0 {
            vec![0.0; n]
        } else {
            (0..n).map(|_| rng.next_f64() - 0.5).collect()
        };
        let problem = DualProblem {
            y: y.clone(),
            p: p.clone(),
            upper: c.clone(),
            diag: vec![1.0; n],
            start: Some(start.clone()),
            sum_per_label: true,
            tube: None,
            paired: false,
            start_gradient: None,
        };
        let f = |a: &[f64]| {
            let quad: f64 = (0..n)
                .map(|i| a[i] * (0..n).map(|j| q[i * n + j] * a[j]).sum::<f64>())
                .sum();
            0.5 * quad + a.iter().zip(&p).map(|(a, p)| a * p).sum::<f64>()
        };
        let f_ref = f(&reference_per_label(&q, &problem, 8_000));
        let x = DenseView::new(&xs, n, d).unwrap();
        let tol = 1e-6;
        let run = ExactRun {
            tol,
            max_iter: 1_000_000,
            shrinking: [None, Some(2)][(trial / 2) % 2],
        };
        let params = AlfpgmParams {
            n_pairs: [1, 3, 20][trial % 3],
            // FISTA cannot keep two sums: the subproblem goes to SMO whatever is asked.
            inner: [InnerSolver::Smo, InnerSolver::Fista][(trial / 3) % 2],
            ..Default::default()
        };
        let mut solutions = Vec::new();
        for alfpgm in [false, true] {
            let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
            let problem = problem.clone();
            let sol = quietly(|rep| {
                if alfpgm {
                    solve_alfpgm(&mut cache, problem, &run, &params, rep)
                } else {
                    crate::core::exact::smo::solve_smo(&mut cache, problem, &run, rep)
                }
            })
            .unwrap();
            assert!(sol.converged, "trial {trial} alfpgm {alfpgm}");
            // Each label's sum stays the start's.
            for l in [1.0, -1.0] {
                let sum = |a: &[f64]| (0..n).filter(|&t| y[t] == l).map(|t| a[t]).sum::<f64>();
                assert!((sum(&sol.alpha) - sum(&start)).abs() < 1e-9 * n as f64);
            }
            assert!(sol
                .alpha
                .iter()
                .zip(&c)
                .all(|(&a, &ct)| (0.0..=ct).contains(&a)));
            let f_sol = f(&sol.alpha);
            assert!((f_sol - sol.objective).abs() < 1e-6 * (1.0 + f_sol.abs()));
            assert!(
                f_sol <= f_ref + 1e-6 * (1.0 + f_ref.abs()),
                "trial {trial} alfpgm {alfpgm}: {f_sol} above the reference {f_ref}"
            );
            assert!(
                (f_sol - f_ref).abs() < 1e-4 * (1.0 + f_ref.abs()),
                "trial {trial} alfpgm {alfpgm}: {f_sol} vs {f_ref}"
            );
            // rho and r from the free variables of each label: G_t = r_l (LIBSVM's r_1 =
            // rho + r for y = +1, r_2 = r - rho for y = -1).
            for (t, &a) in sol.alpha.iter().enumerate() {
                if a > 1e-9 && a < c[t] - 1e-9 {
                    let g: f64 = (0..n).map(|j| q[t * n + j] * sol.alpha[j]).sum::<f64>() + p[t];
                    let r_l = if y[t] > 0.0 {
                        sol.r + sol.rho
                    } else {
                        sol.r - sol.rho
                    };
                    assert!((g - r_l).abs() < 1e-3, "trial {trial}: G {g} vs r_l {r_l}");
                }
            }
            solutions.push(sol);
        }
    }
}

#[test]
fn sparse_and_dense_input_agree() {
    let (xs, y) = problem(120, 4, 9);
    let mut indptr = vec![0i64];
    let (mut idx, mut val) = (vec![], vec![]);
    for i in 0..120 {
        for c in 0..4 {
            let v = xs[i * 4 + c];
            if v.abs() > 0.3 {
                idx.push(c as i64);
                val.push(v);
            }
        }
        indptr.push(idx.len() as i64);
    }
    let mut dense = vec![0.0; 480];
    for i in 0..120 {
        for k in indptr[i] as usize..indptr[i + 1] as usize {
            dense[i * 4 + idx[k] as usize] = val[k];
        }
    }
    let csr = CsrView::new(&indptr, &idx, &val, 4).unwrap();
    let dv = DenseView::new(&dense, 120, 4).unwrap();
    let p = AlfpgmParams {
        n_pairs: 10,
        ..Default::default()
    };
    let setup = || Setup {
        tol: 1e-4,
        params: &p,
        cache_bytes: 1 << 20,
        shrinking: Some(3),
    };
    let a = run(&csr, &y, &[3.0; 120], 1.0, setup());
    let b = run(&dv, &y, &[3.0; 120], 1.0, setup());
    assert!((a.objective - b.objective).abs() < 1e-6 * (1.0 + b.objective.abs()));
    let q = q_matrix(&dense, &y, 4, 1.0);
    check_solution(&q, &a, &[3.0; 120], 1e-4);
}

#[test]
fn iteration_cap_is_reported() {
    let (xs, y) = problem(200, 2, 4);
    let x = DenseView::new(&xs, 200, 2).unwrap();
    let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(3.0), 1 << 20).unwrap();
    let p = AlfpgmParams {
        n_pairs: 2,
        ..Default::default()
    };
    let run = ExactRun {
        tol: 1e-9,
        max_iter: 2,
        shrinking: Some(1),
    };
    let problem = rbf_svc(y.clone(), vec![100.0; 200]);
    let sol = quietly(|rep| solve_alfpgm(&mut cache, problem, &run, &p, rep)).unwrap();
    assert_eq!(sol.iterations, 2);
    assert!(!sol.converged);
    // The cap counts pair steps, also those inside multi-pair working sets.
    let run = ExactRun {
        max_iter: 37,
        ..run
    };
    let problem = rbf_svc(y.clone(), vec![100.0; 200]);
    let sol = quietly(|rep| solve_alfpgm(&mut cache, problem, &run, &p, rep)).unwrap();
    assert_eq!(sol.iterations, 37);
    assert!(!sol.converged && sol.working_sets < 37 && sol.inner_iterations > 0);
    let ya: f64 = sol.alpha.iter().zip(&y).map(|(a, y)| a * y).sum();
    assert!(ya.abs() < 1e-12);
    assert!(sol.alpha.iter().all(|&a| (0.0..=100.0).contains(&a)));
}

/// A random regression problem of the SVR tests: (n, d, rows, targets sin(2 x) plus noise,
/// bounds (weighted on odd trials), a run whose shrinking cycles through off, often and
/// LIBSVM's).
fn svr_trial(
    rng: &mut Rng,
    trial: usize,
    seed: u64,
    noise: f64,
) -> (usize, usize, Vec<f64>, Vec<f64>, Vec<f64>, ExactRun) {
    let (n, d) = (20 + rng.below(60), 1 + rng.below(3));
    let (xs, _) = problem(n, d, seed + trial as u64);
    let z = (0..n)
        .map(|i| (2.0 * xs[i * d]).sin() + noise * (rng.next_f64() - 0.5))
        .collect();
    let c = bounds(n, [0.3, 3.0][(trial / 3) % 2], trial % 2 == 1, trial as u64);
    let run = ExactRun {
        tol: 1e-7,
        max_iter: 1_000_000,
        shrinking: [None, Some(3), Some(0)][(trial / 6) % 3],
    };
    (n, d, xs, z, c, run)
}

/// LIBSVM's two-variable form of an SVR problem on the rows x with bounds c, solved by SMO:
/// each row twice, a_t (label +1) then a_t* (label -1), with the linear terms p (2 n).
fn two_variable_smo(
    x: &DenseView<'_>,
    p: Vec<f64>,
    c: &[f64],
    start: Option<Vec<f64>>,
    sum_per_label: bool,
    gamma: f64,
    run: &ExactRun,
) -> DualSolution {
    use crate::core::data::rows::SubsetRows;
    use crate::core::exact::smo::solve_smo;
    let n = x.n_rows();
    let twice: Vec<usize> = (0..n).chain(0..n).collect();
    let sub = SubsetRows::new(x, &twice).unwrap();
    let two = DualProblem {
        y: (0..2 * n).map(|t| if t < n { 1.0 } else { -1.0 }).collect(),
        p,
        upper: [c, c].concat(),
        diag: vec![1.0; 2 * n],
        start,
        sum_per_label,
        tube: None,
        paired: false,
        start_gradient: None,
    };
    let mut cache = KernelRowCache::<_, f32>::new(&sub, Kernel::rbf(gamma), 1 << 20).unwrap();
    quietly(|rep| solve_smo(&mut cache, two, run, rep)).unwrap()
}

/// epsilon-SVR with a tube (one variable per row; SMO and ALFPGM) and in LIBSVM's
/// two-variable form (SMO) reach the same optimum: objective, beta = a - a*, rho;
/// shrinking off, often and LIBSVM's; rows weighted or not.
#[test]
#[allow(clippy::needless_range_loop)] // beta, a, a* and C indexed by row
fn a_tube_reaches_the_two_variable_optimum() {
    use crate::core::exact::smo::solve_smo;
    let mut rng = Rng::new(23);
    for trial in 0..18 {
        let (n, d, xs, z, c, run) = svr_trial(&mut rng, trial, 300, 0.2);
        let eps = [0.0, 0.05, 0.2][trial % 3];
        let gamma = 1.3;
        let x = DenseView::new(&xs, n, d).unwrap();
        let one = DualProblem {
            y: vec![1.0; n],
            p: z.iter().map(|v| -v).collect(),
            upper: c.clone(),
            diag: vec![1.0; n],
            start: None,
            sum_per_label: false,
            tube: Some(eps),
            paired: false,
            start_gradient: None,
        };
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        let tube = quietly(|rep| solve_smo(&mut cache, one.clone(), &run, rep)).unwrap();
        // ALFPGM on the tube: working sets of up to 4 pairs, its subproblem's SMO through
        // the kinks.
        let params = AlfpgmParams {
            n_pairs: 4,
            ..Default::default()
        };
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        let multi = quietly(|rep| solve_alfpgm(&mut cache, one, &run, &params, rep)).unwrap();
        let p = (0..2 * n)
            .map(|t| if t < n { eps - z[t] } else { eps + z[t - n] })
            .collect();
        let pair = two_variable_smo(&x, p, &c, None, false, gamma, &run);
        assert!(tube.converged && pair.converged && multi.converged);
        assert!(multi.working_sets > 0);
        let what = format!("trial {trial}");
        assert_same_objective(tube.objective, pair.objective, 1e-6, &what);
        for sol in [&tube, &multi] {
            assert_same_objective(sol.objective, pair.objective, 1e-6, &what);
            assert!(sol.alpha.iter().sum::<f64>().abs() < 1e-9);
            for i in 0..n {
                let beta = pair.alpha[i] - pair.alpha[n + i];
                assert!(
                    (sol.alpha[i] - beta).abs() < 2e-3 * c[i],
                    "trial {trial}, row {i}: beta {} vs {beta}",
                    sol.alpha[i]
                );
                assert!(sol.alpha[i].abs() <= c[i]);
            }
            assert!(
                (sol.rho - pair.rho).abs() < 1e-3,
                "trial {trial}: rho {} vs {}",
                sol.rho,
                pair.rho
            );
        }
    }
}

#[test]
fn paired_nu_svr_reaches_the_two_variable_optimum() {
    use crate::core::exact::smo::solve_smo;
    let mut rng = Rng::new(41);
    for trial in 0..18 {
        let (n, d, xs, z, c, run) = svr_trial(&mut rng, trial, 500, 0.3);
        let nu = [0.1, 0.5, 0.9][trial % 3];
        let gamma = 1.3;
        // LIBSVM's start: a_i = a_i* filled in row order to nu sum C / 2.
        let mut left = nu * c.iter().sum::<f64>() / 2.0;
        let half: Vec<f64> = c
            .iter()
            .map(|&ct| {
                let a = ct.min(left).max(0.0);
                left -= a;
                a
            })
            .collect();
        let start = [&half[..], &half[..]].concat();
        let x = DenseView::new(&xs, n, d).unwrap();
        let paired = DualProblem {
            y: vec![1.0; n],
            p: z.iter().map(|v| -v).collect(),
            upper: c.clone(),
            diag: vec![1.0; n],
            start: Some(start.clone()),
            sum_per_label: true,
            tube: None,
            paired: true,
            start_gradient: None,
        };
        let params = AlfpgmParams {
            n_pairs: [1, 4, 30][trial % 3],
            ..Default::default()
        };
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        let multi =
            quietly(|rep| solve_alfpgm(&mut cache, paired.clone(), &run, &params, rep)).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        assert!(quietly(|rep| solve_smo(&mut cache, paired, &run, rep)).is_err());
        let p = (0..2 * n)
            .map(|t| if t < n { -z[t] } else { z[t - n] })
            .collect();
        let pair = two_variable_smo(&x, p, &c, Some(start), true, gamma, &run);
        assert!(pair.converged && multi.converged, "trial {trial}");
        assert!(multi.working_sets > 0);
        // The solution comes back as LIBSVM's variables: (a, a*), labels (+1, -1).
        assert_eq!(multi.alpha.len(), 2 * n);
        assert!(multi.y[..n].iter().all(|&v| v == 1.0));
        assert!(multi.y[n..].iter().all(|&v| v == -1.0));
        assert_same_objective(
            multi.objective,
            pair.objective,
            1e-6,
            &format!("trial {trial}"),
        );
        // Each label's sum stays the start's, every variable in its box.
        for half_of in [&multi.alpha[..n], &multi.alpha[n..]] {
            let sum: f64 = half_of.iter().sum();
            assert!((sum - nu * c.iter().sum::<f64>() / 2.0).abs() < 1e-9 * n as f64);
            assert!(half_of
                .iter()
                .zip(&c)
                .all(|(&a, &ct)| (0.0..=ct).contains(&a)));
        }
        for (i, &ci) in c.iter().enumerate() {
            let beta = pair.alpha[i] - pair.alpha[n + i];
            let mine = multi.alpha[i] - multi.alpha[n + i];
            assert!(
                (mine - beta).abs() < 2e-3 * ci,
                "trial {trial}, row {i}: beta {mine} vs {beta}"
            );
        }
        for (what, a, b) in [("rho", multi.rho, pair.rho), ("r", multi.r, pair.r)] {
            assert!((a - b).abs() < 1e-3, "trial {trial}: {what} {a} vs {b}");
        }
    }
}

/// `local_smo` at `level` from fresh buffers: (steps, d, the gradient g + Q d).
fn run_local_smo(level: Level, sub: LocalSmoInput<'_>) -> (u64, Vec<f64>, Vec<f64>) {
    let m = sub.m;
    let (mut d, mut gl, mut viol) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
    let mut scratch = LocalSmoScratch::default();
    let mut out = LocalSmoOutput {
        d: &mut d,
        gl: &mut gl,
        viol: &mut viol,
        scratch: &mut scratch,
    };
    let steps = local_smo(level, sub, &mut out);
    (steps, d, gl)
}

/// The working set's SMO on a tube's subproblem (min 1/2 b^T K b + p^T b + eps |b|_1 over
/// b = a_B + d, sum d = 0, the box [-C, C]) reaches the optimum the state's SMO finds from
/// the same start, at every SIMD level: kinks on both sides of 0, variables at both bounds.
#[test]
fn local_smo_solves_a_tube_subproblem() {
    use crate::core::exact::smo::solve_smo;
    let mut rng = Rng::new(31);
    for trial in 0..30 {
        let m = [2, 5, 9, 16, 33][trial % 5];
        let (dim, gamma, c) = (3, 2.0, [0.5, 2.0][trial % 2]);
        let eps = [0.0, 0.1, 0.5][(trial / 2) % 3];
        let pts: Vec<f64> = (0..m * dim).map(|_| rng.next_f64()).collect();
        let x = DenseView::new(&pts, m, dim).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        // Q from the cache's own f32 rows, as the solver reads them.
        let all: Vec<usize> = (0..m).collect();
        let q: Vec<f64> = {
            let rows = cache.rows(&all).unwrap();
            (0..m)
                .flat_map(|a| {
                    rows.row(a)
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let base: Vec<f64> = (0..m)
            .map(|_| match rng.below(4) {
                0 => 0.0,
                1 => c,
                2 => -c,
                _ => (rng.next_f64() * 2.0 - 1.0) * c,
            })
            .collect();
        let p: Vec<f64> = (0..m).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
        let objective = |b: &[f64]| -> f64 {
            let mut f = 0.0;
            for a in 0..m {
                let qb: f64 = (0..m).map(|k| q[a * m + k] * b[k]).sum();
                f += 0.5 * b[a] * qb + p[a] * b[a] + eps * b[a].abs();
            }
            f
        };
        // The gradient of the smooth part at the start, and the box of d.
        let g: Vec<f64> = (0..m)
            .map(|a| (0..m).map(|k| q[a * m + k] * base[k]).sum::<f64>() + p[a])
            .collect();
        let lo: Vec<f64> = base.iter().map(|b| -c - b).collect();
        let hi: Vec<f64> = base.iter().map(|b| c - b).collect();
        let y = vec![1.0; m];
        let reference = {
            let problem = DualProblem {
                y: y.clone(),
                p: p.clone(),
                upper: vec![c; m],
                diag: vec![1.0; m],
                start: Some(base.clone()),
                sum_per_label: false,
                tube: Some(eps),
                paired: false,
                start_gradient: None,
            };
            let run = ExactRun {
                tol: 1e-9,
                max_iter: 1_000_000,
                shrinking: None,
            };
            quietly(|rep| solve_smo(&mut cache, problem, &run, rep)).unwrap()
        };
        for level in simd::levels_here() {
            let sub = LocalSmoInput {
                q: &q,
                g: &g,
                y: &y,
                lo: &lo,
                hi: &hi,
                m,
                eps: 1e-9,
                per_label: false,
                max_steps: u64::MAX,
                tube: Some((&base, eps)),
            };
            let (_, d, _) = run_local_smo(level, sub);
            let b: Vec<f64> = base.iter().zip(&d).map(|(a, x)| a + x).collect();
            assert!(d.iter().sum::<f64>().abs() < 1e-12, "trial {trial}: sum d");
            assert!(b.iter().all(|v| v.abs() <= c), "trial {trial}: box");
            let (f, f_ref) = (objective(&b), objective(&reference.alpha));
            assert!(
                (f - f_ref).abs() < 1e-7 * (1.0 + f_ref.abs()),
                "trial {trial}, {level:?}: {f} vs the state's SMO {f_ref}"
            );
        }
    }
}

#[test]
fn local_smo_takes_the_same_steps_at_every_level() {
    // Random subproblems (Gram matrices of random points with labels folded in, the boxes
    // of random a in [0, C], random gradients): every SIMD level returns the same d, gradient and
    // step count, bit for bit, and the result satisfies the box and y^T d = 0.
    let mut rng = Rng::new(5);
    let mut total_steps = 0;
    for trial in 0..40 {
        let m = [2, 7, 8, 9, 16, 33, 83][trial % 7];
        let dim = 3;
        let pts: Vec<f64> = (0..m * dim).map(|_| rng.next_f64()).collect();
        let y: Vec<f64> = (0..m)
            .map(|_| if rng.next_f64() < 0.5 { -1.0 } else { 1.0 })
            .collect();
        let mut q = vec![0.0; m * m];
        for a in 0..m {
            for b in 0..m {
                let d2: f64 = (0..dim)
                    .map(|c| (pts[a * dim + c] - pts[b * dim + c]).powi(2))
                    .sum();
                q[a * m + b] = y[a] * y[b] * (-2.0 * d2).exp();
            }
        }
        let g: Vec<f64> = (0..m).map(|_| rng.next_f64() * 2.0 - 1.5).collect();
        // a in [0, C]: d in [-a, C - a], some variables at a bound (one side empty).
        let c = 2.0;
        let alpha: Vec<f64> = (0..m)
            .map(|_| match rng.below(4) {
                0 => 0.0,
                1 => c,
                _ => rng.next_f64() * c,
            })
            .collect();
        let lo: Vec<f64> = alpha.iter().map(|a| -a).collect();
        let hi: Vec<f64> = alpha.iter().map(|a| c - a).collect();
        let mut results = Vec::new();
        for level in simd::levels_here() {
            let sub = LocalSmoInput {
                q: &q,
                g: &g,
                y: &y,
                lo: &lo,
                hi: &hi,
                m,
                eps: 1e-6,
                per_label: false,
                max_steps: u64::MAX,
                tube: None,
            };
            let (steps, d, gl) = run_local_smo(level, sub);
            let ytd: f64 = y.iter().zip(&d).map(|(a, b)| a * b).sum();
            assert!(ytd.abs() < 1e-9, "y^T d = {ytd}");
            for t in 0..m {
                assert!(d[t] >= lo[t] && d[t] <= hi[t]);
            }
            results.push((level, steps, d, gl));
        }
        total_steps += results[0].1;
        for r in &results[1..] {
            assert_eq!(
                (r.1, &r.2, &r.3),
                (results[0].1, &results[0].2, &results[0].3),
                "{:?} against {:?}, m {m}",
                r.0,
                results[0].0
            );
        }
    }
    assert!(total_steps > 200, "{total_steps} steps in 40 subproblems");
}

#[test]
fn repair_projects_onto_the_feasible_set() {
    let mut rng = Rng::new(3);
    for _ in 0..200 {
        let m = 2 + rng.below(30);
        let yb: Vec<f64> = (0..m)
            .map(|k| {
                if k == 0 {
                    1.0
                } else if k == 1 {
                    -1.0
                } else if rng.next_f64() < 0.5 {
                    1.0
                } else {
                    -1.0
                }
            })
            .collect();
        let c = 2.0;
        let alpha: Vec<f64> = (0..m)
            .map(|_| {
                if rng.next_f64() < 0.3 {
                    0.0
                } else {
                    rng.next_f64() * c
                }
            })
            .collect();
        let lo: Vec<f64> = alpha.iter().map(|a| -a).collect();
        let hi: Vec<f64> = alpha.iter().map(|a| c - a).collect();
        let mut d: Vec<f64> = (0..m)
            .map(|k| (rng.next_f64() * 2.0 - 1.0).clamp(lo[k], hi[k]))
            .collect();
        repair(&mut d, &yb, &lo, &hi);
        let r: f64 = d.iter().zip(&yb).map(|(x, y)| x * y).sum();
        assert!(r.abs() < 1e-12, "residual {r}");
        for k in 0..m {
            assert!(d[k] >= lo[k] && d[k] <= hi[k]);
        }
    }
}

#[test]
fn merge_by_position_matches_sort_and_dedup() {
    let mut rng = Rng::new(5);
    let mut out = Vec::new();
    for trial in 0..200 {
        let list = |rng: &mut Rng, len: usize| -> Vec<(f64, u32)> {
            let mut l: Vec<(f64, u32)> = (0..len)
                .map(|_| (rng.next_f64(), rng.below(40) as u32))
                .collect();
            l.sort_by_key(|e| e.1);
            l.dedup_by_key(|e| e.1);
            l
        };
        let len = rng.below(30);
        let mut a = list(&mut rng, len);
        let len = rng.below(30);
        let b = list(&mut rng, len);
        if trial % 5 == 0 {
            a.reverse();
        }
        merge_by_position(&a, &b, &mut out);
        let mut want = [a.clone(), b.clone()].concat();
        want.sort_by_key(|e| e.1);
        want.dedup_by_key(|e| e.1);
        let positions = |l: &[(f64, u32)]| l.iter().map(|e| e.1).collect::<Vec<_>>();
        assert_eq!(positions(&out), positions(&want), "trial {trial}");
        for e in &out {
            // The first list's entry wins where both hold the position.
            let from = a.iter().chain(&b).find(|f| f.1 == e.1).unwrap();
            assert_eq!(e.0, from.0);
        }
    }
}

#[test]
fn smallest_keeps_the_k_smallest_in_order() {
    let mut rng = Rng::new(12);
    let mut best = Smallest::with_capacity(8);
    for _ in 0..200 {
        let n = rng.below(3000);
        let k = 1 + rng.below(300);
        let keys: Vec<f64> = (0..n).map(|_| (rng.below(500) as f64) - 250.0).collect();
        best.reset(k);
        for (t, &key) in keys.iter().enumerate() {
            best.push(key, t as u32);
        }
        let got: Vec<f64> = best.finish().iter().map(|e| e.0).collect();
        let mut sorted = keys.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.truncate(k);
        assert_eq!(got, sorted);
        for &(key, t) in best.finish() {
            assert_eq!(keys[t as usize], key);
        }
    }
}

#[test]
fn bad_parameters_are_rejected() {
    let bad = [
        AlfpgmParams {
            n_pairs: 0,
            ..Default::default()
        },
        AlfpgmParams {
            min_alpha_opt: 10,
            max_alpha_opt: 5,
            ..Default::default()
        },
        AlfpgmParams {
            alpha_delta_threshold: f64::NAN,
            ..Default::default()
        },
        AlfpgmParams {
            al_penalty: -1.0,
            ..Default::default()
        },
        AlfpgmParams {
            fista_max_iter: 0,
            ..Default::default()
        },
        AlfpgmParams {
            lipschitz_safety: 0.5,
            ..Default::default()
        },
        AlfpgmParams {
            inner_rel: 0.0,
            ..Default::default()
        },
    ];
    for p in bad {
        assert!(p.check().is_err(), "{p:?}");
    }
    assert!(AlfpgmParams::default().check().is_ok());
}
