//! Sequential minimal optimisation with second-order working-set selection (WSS2; Fan, Chen &
//! Lin, JMLR 6 (2005)), as LIBSVM's `Solver` does it, over the shared kernel-row cache. It is the
//! reference the multi-pair solver (ALFPGM) is checked against and that solver's fallback step.
//!
//! Both exact solvers take one general problem, LIBSVM's (`DualProblem`):
//!   min_a f(a) = 1/2 a^T Q a + p^T a   s.t.  y^T a = y^T a0,  0 <= a_t <= C_t,
//! Q_ts = y_t y_s K_ts, y_t = +-1, started from a feasible a0 (0 unless given). C-SVC, epsilon-SVR
//! and one-class SVM are small builders of it (`exact::machines`): C-SVC p = -e, a0 = 0, C_t = C
//! times the row's weight; SVR 2n variables over n rows; one-class p = 0, y = e, a0 summing to
//! nu n. The gradient is G = Q a + p (G = p at a = 0). epsilon-SVR has a second form,
//! `DualProblem::tube`: one signed variable per data row, whose membership of I_up / I_low and
//! violation values come from `DualState::up_value` / `low_value` and whose pair step walks
//! through the kink at 0 (`DualState::tube_step`); both solvers take it for epsilon-SVR (SMO on
//! lowbwt: half the kernel values, 8.4 s against 16.2 s in two variables per row).
//! I_up = {t: a_t < C_t, y_t = +1} u {t: a_t > 0, y_t = -1},  I_low = {t: a_t < C_t, y_t = -1} u
//! {t: a_t > 0, y_t = +1};  m(a) = max_{I_up} -y_t G_t,  M(a) = min_{I_low} -y_t G_t. The run stops
//! when m(a) - M(a) < tol (LIBSVM's `Gmax + Gmax2 < eps`), or at the iteration cap, which is
//! reported (`converged = false`), never looped past.
//!
//! With `DualProblem::sum_per_label` (nu-SVC, nu-SVR: LIBSVM's `Solver_NU`) the sum of a over
//! each label is fixed too: a pair is always two variables of one label (WSS2 per label, the
//! best j of both), m - M, the stopping rule and the shrinking are per label, and rho comes
//! with the sum's multiplier r.
//!
//! Shrinking as LIBSVM's (`shrinking.rs`): the state works on positions; variables 0..active
//! are optimised, the others sit at a bound and are not expected to move, their gradient kept
//! recoverable through G_bar and reconstructed before the final optimality test, so the stopping
//! rule is the unshrunk solver's. Kernel rows are K rows (the labels are applied on the fly); the
//! diagonal K_tt is kept per variable in f64 (exactly 1 for the Gaussian kernel), as LIBSVM's QD.

use std::time::Instant;

use crate::core::common::error::{Result, SvmError};
use crate::core::data::rows::Rows;
use crate::core::exact::dual::{DualProblem, DualSolution, DualState, ExactRun, Reporter};
use crate::core::exact::shrinking::{add_scaled_rows, Shrinking};
use crate::core::exact::stride::Stride;
use crate::core::kernels::kernel_cache::KernelRowCache;
use crate::core::simd::RowValue;

/// WSS2 SMO on the active positions: the working pair, or None when m - M < tol there.
/// With a sum per label, LIBSVM's `Solver_NU` selection: an i per label, each j paired with
/// its own label's i, the best j of both; None when both labels' m - M < tol.
pub(crate) fn select_pair<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    state: &DualState,
    tol: f64,
) -> Result<Option<(usize, usize)>> {
    if state.sum_per_label {
        return select_pair_per_label(cache, state, tol);
    }
    let Some((i, gmax)) = state.select_i() else {
        return Ok(None);
    };
    let (j, gmax2) = {
        let rows = cache.rows_prefix(&[i], state.active)?;
        state.select_j(i, gmax, rows.row(0))
    };
    // No j with b_ij > 0 means no violating pair at all (LIBSVM returns "optimal" too).
    match j {
        Some(j) if gmax + gmax2 >= tol => Ok(Some((i, j))),
        _ => Ok(None),
    }
}

fn select_pair_per_label<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    state: &DualState,
    tol: f64,
) -> Result<Option<(usize, usize)>> {
    let firsts = [state.select_i_of(Some(1.0)), state.select_i_of(Some(-1.0))];
    let idx: Vec<usize> = firsts.iter().flatten().map(|&(i, _)| i).collect();
    if idx.is_empty() {
        return Ok(None);
    }
    let rows = cache.rows_prefix(&idx, state.active)?;
    let mut best: Option<(usize, usize, f64)> = None;
    let mut worst_gap = f64::NEG_INFINITY;
    let mut k = 0;
    for (first, label) in firsts.into_iter().zip([1.0, -1.0]) {
        let Some((i, gmax)) = first else { continue };
        let (j, gmax2) = state.select_j_of(i, gmax, rows.row(k), Some(label));
        k += 1;
        worst_gap = worst_gap.max(gmax + gmax2);
        if let Some((j, obj)) = j {
            if best.is_none_or(|b| obj <= b.2) {
                best = Some((i, j, obj));
            }
        }
    }
    Ok(match best {
        Some((i, j, _)) if worst_gap >= tol => Some((i, j)),
        _ => None,
    })
}

/// Kernel rows fetched together while the gradient of a non-zero start is built.
const START_BATCH: usize = 64;

/// The state of `problem` at its start, its gradient complete: G = p + Q a0 and, when
/// shrinking keeps G_bar, G_bar = sum over the variables at their upper bound of C_s Q_.s, from
/// the kernel rows of the non-zero a0_s (LIBSVM's initialisation in `Solver::Solve`). Reports
/// after each batch of rows (a one-class or nu start can be thousands of rows: Ctrl-C lands
/// there too). Two variables of one data row (SVR's a_i and a_i*, twins in the cache) whose
/// parts cancel (y_t a_t + y_q a_q = 0, and at their bounds together or not at all) take no
/// row: nu-SVR starts with a_i = a_i* on nu n / 2 rows, and those rows, 2n values each, were a
/// third of the kernel values of a fit (lowbwt).
pub(crate) fn start_state<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    mut problem: DualProblem,
    shrinking: Option<usize>,
    reporter: &mut Reporter<'_, '_>,
) -> Result<(DualState, Shrinking)> {
    problem.check()?;
    if problem.n() != cache.n() {
        return Err(SvmError::invalid_input(format!(
            "a dual problem of {} variables over {} kernel rows",
            problem.n(),
            cache.n()
        )));
    }
    let known = problem.start_gradient.take();
    let mut state = DualState::new(problem);
    let shrinker = Shrinking::new(shrinking, &mut state);
    let keeps_bar = !state.grad_bar.is_empty();
    if let Some((grad, grad_bar)) = known {
        let n = state.n();
        if grad.len() != n || (keeps_bar && grad_bar.len() != n) {
            return Err(SvmError::invalid_input(
                "a start's gradient (and G_bar, when shrinking) needs one value per variable",
            ));
        }
        state.grad = grad;
        if keeps_bar {
            state.grad_bar = grad_bar;
        }
        return Ok((state, shrinker));
    }
    let part = |t: usize| {
        let bar = if keeps_bar { state.bound_part(t) } else { 0.0 };
        (state.coefficient(t), bar)
    };
    let cancels = |t: usize| {
        cache.twin_position(t).is_some_and(|q| {
            let ((a, bar_a), (b, bar_b)) = (part(t), part(q));
            a + b == 0.0 && bar_a + bar_b == 0.0
        })
    };
    // A paired position whose two variables cancel (nu-SVR's start a_t = a_t*) needs no row.
    let nonzero: Vec<usize> = (0..state.n())
        .filter(|&t| {
            let (coef, bar) = part(t);
            (coef != 0.0 || bar != 0.0) && !cancels(t)
        })
        .collect();
    let (coef, bar): (Vec<f64>, Vec<f64>) = nonzero.iter().map(|&t| part(t)).unzip();
    let size = START_BATCH.min(cache.capacity()).max(1);
    for (k, batch) in nonzero.chunks(size).enumerate() {
        let rows = cache.rows(batch)?;
        let these = k * size..k * size + batch.len();
        add_scaled_rows(&mut state.grad, &state.y, 0, &coef[these.clone()], &rows);
        if bar[these.clone()].iter().any(|&c| c != 0.0) {
            add_scaled_rows(&mut state.grad_bar, &state.y, 0, &bar[these], &rows);
        }
        reporter.keep_alive(&state)?;
    }
    Ok((state, shrinker))
}

/// WSS2 SMO until m - M < tol or `max_iter` steps.
pub fn solve_smo<R: Rows, T: RowValue>(
    cache: &mut KernelRowCache<'_, R, T>,
    problem: DualProblem,
    run: &ExactRun,
    reporter: &mut Reporter<'_, '_>,
) -> Result<DualSolution> {
    let start = Instant::now();
    let (tol, max_iter, shrinking) = (run.tol, run.max_iter, run.shrinking);
    if problem.paired {
        return Err(SvmError::invalid_input(
            "SMO takes nu-SVR in LIBSVM's two variables per row, not paired",
        ));
    }
    let mut stride = Stride::new(&problem, tol);
    let mut strode = Vec::new();
    let (mut state, mut shrinker) = start_state(cache, problem, shrinking, reporter)?;
    let mut iter = 0u64;
    let mut converged = false;
    while iter < max_iter {
        let mut pair = select_pair(cache, &state, tol)?;
        if pair.is_none() && shrinker.unshrink(&mut state, cache, reporter)? {
            pair = select_pair(cache, &state, tol)?;
        }
        let Some((i, j)) = pair else {
            converged = true;
            break;
        };
        let before = [(i, state.bound_part(i)), (j, state.bound_part(j))];
        let values_before = cache.stats().values;
        {
            let rows = cache.rows_prefix(&[i, j], state.active)?;
            state.smo_step(i, j, rows.row(0), rows.row(1));
        }
        shrinker.record_moves(&before, &mut state, cache)?;
        shrinker.after_step(1, &mut state, cache, tol, reporter)?;
        iter += 1;
        strode.clear();
        if stride.after(iter, &mut state, &mut strode) {
            shrinker.record_moves(&strode, &mut state, cache)?;
        }
        // A step whose rows were resident costs microseconds (the clock is read every 1024 of
        // them); one that computed rows can cost a millisecond (30,000 rows of nu-SVR's 2n
        // values), and 1024 of those would leave Ctrl-C unanswered for a second.
        let cheap = cache.stats().values == values_before;
        reporter.tick(&state, iter, cheap)?;
    }
    shrinker.unshrink(&mut state, cache, reporter)?;
    if !converged && iter >= max_iter {
        converged = state.gap() < tol;
    }
    let mut sol = DualSolution::from_state(state, iter, converged, start);
    sol.cache = cache.stats().clone();
    sol.min_active = shrinker.min_active;
    sol.strides = stride.taken;
    reporter.finish(&sol)?;
    Ok(sol)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::core::common::progress::no_monitor;
    use crate::core::common::progress::{Monitor, Progress};
    use crate::core::common::rng::Rng;
    use crate::core::data::rows::DenseView;
    use crate::core::kernels::kernel::Kernel;

    /// Asserts that the objective `got` is `reference` to `rel` of 1 + |reference| (`what`
    /// names the case in the failure's message).
    pub(crate) fn assert_same_objective(got: f64, reference: f64, rel: f64, what: &str) {
        let scale = 1.0 + reference.abs();
        assert!(
            (got - reference).abs() < rel * scale,
            "{what}: objective {got} vs {reference}"
        );
    }

    /// A C-SVC problem with the Gaussian kernel's unit diagonal.
    pub(crate) fn rbf_svc(y: Vec<f64>, upper: Vec<f64>) -> DualProblem {
        let n = y.len();
        DualProblem::classification(y, upper, vec![1.0; n])
    }

    /// Random points in [-1, 1]^d with noisy circle labels (both classes, some bounded alphas).
    pub(crate) fn problem(n: usize, d: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let mut rng = Rng::new(seed);
        let mut xs = Vec::with_capacity(n * d);
        let mut ys = Vec::with_capacity(n);
        for k in 0..n {
            let p: Vec<f64> = (0..d).map(|_| rng.next_f64() * 2.0 - 1.0).collect();
            let r2: f64 = p.iter().map(|v| v * v).sum();
            let flip = rng.next_f64() < 0.1;
            let mut y = if (r2 < 0.35 * d as f64) != flip {
                1.0
            } else {
                -1.0
            };
            if k < 2 {
                y = if k == 0 { 1.0 } else { -1.0 };
            }
            xs.extend(p);
            ys.push(y);
        }
        (xs, ys)
    }

    pub(crate) fn q_matrix(xs: &[f64], y: &[f64], d: usize, gamma: f64) -> Vec<f64> {
        let n = y.len();
        let mut q = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let d2: f64 = (0..d)
                    .map(|c| (xs[i * d + c] - xs[j * d + c]).powi(2))
                    .sum();
                q[i * n + j] = y[i] * y[j] * (-gamma * d2).exp();
            }
        }
        q
    }

    pub(crate) fn objective(q: &[f64], a: &[f64]) -> f64 {
        let n = a.len();
        let mut v = 0.0;
        for i in 0..n {
            for j in 0..n {
                v += 0.5 * a[i] * a[j] * q[i * n + j];
            }
            v -= a[i];
        }
        v
    }

    /// An independent QP solver: accelerated projected gradient (FISTA with gradient restart) on
    /// {y^T a = 0, 0 <= a_i <= C_i}, the projection exact by bisection on its multiplier; step
    /// 1/n (lambda_max(Q) <= n for the Gaussian kernel).
    pub(crate) fn reference_qp(q: &[f64], y: &[f64], c: &[f64], iters: usize) -> Vec<f64> {
        let n = y.len();
        let project_box = |v: &[f64], out: &mut [f64]| project(v, y, c, out);
        projected_gradient(q, &vec![-1.0; n], vec![0.0; n], project_box, iters)
    }

    /// min 1/2 a^T Q a + p^T a over a convex set given by its projection, from the feasible
    /// `a0`: FISTA with gradient restart, step 1/n (lambda_max(Q) <= n for the Gaussian
    /// kernel). The reference the exact solvers are checked against.
    pub(crate) fn projected_gradient(
        q: &[f64],
        p: &[f64],
        a0: Vec<f64>,
        project: impl Fn(&[f64], &mut [f64]),
        iters: usize,
    ) -> Vec<f64> {
        let n = p.len();
        let step = 1.0 / n as f64;
        let mut a = a0;
        let (mut z, mut v, mut prev) = (a.clone(), vec![0.0; n], vec![0.0; n]);
        let mut t = 1.0f64;
        for _ in 0..iters {
            for i in 0..n {
                let g: f64 = (0..n).map(|j| q[i * n + j] * z[j]).sum::<f64>() + p[i];
                v[i] = z[i] - step * g;
            }
            prev.copy_from_slice(&a);
            project(&v, &mut a);
            let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
            // Restart when the step goes against the momentum.
            let dot: f64 = (0..n).map(|i| (z[i] - a[i]) * (a[i] - prev[i])).sum();
            if dot > 0.0 {
                t = 1.0;
                z.copy_from_slice(&a);
                continue;
            }
            for i in 0..n {
                z[i] = a[i] + (t - 1.0) / t_next * (a[i] - prev[i]);
            }
            t = t_next;
        }
        a
    }

    /// Euclidean projection onto {y^T a = 0, 0 <= a_i <= C_i}: a_i = clip(v_i - mu y_i), with mu
    /// found by bisection on the monotone sum y^T a(mu).
    fn project(v: &[f64], y: &[f64], c: &[f64], out: &mut [f64]) {
        let s = |mu: f64| -> f64 {
            v.iter()
                .zip(y)
                .zip(c)
                .map(|((vi, yi), ci)| yi * (vi - mu * yi).clamp(0.0, *ci))
                .sum()
        };
        let (mut lo, mut hi) = (-1e6, 1e6);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if s(mid) > 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let mu = 0.5 * (lo + hi);
        for (((o, vi), yi), ci) in out.iter_mut().zip(v).zip(y).zip(c) {
            *o = (vi - mu * yi).clamp(0.0, *ci);
        }
    }

    pub(crate) fn run_smo(
        xs: &[f64],
        y: &[f64],
        d: usize,
        c: &[f64],
        gamma: f64,
        tol: f64,
        shrinking: Option<usize>,
    ) -> DualSolution {
        let n = y.len();
        let x = DenseView::new(xs, n, d).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(gamma), 1 << 20).unwrap();
        let run = ExactRun {
            tol,
            max_iter: 1_000_000,
            shrinking,
        };
        quietly(|rep| solve_smo(&mut cache, rbf_svc(y.to_vec(), c.to_vec()), &run, rep)).unwrap()
    }

    /// Runs `solve` with a reporter that reports nowhere.
    pub(crate) fn quietly<T>(solve: impl FnOnce(&mut Reporter<'_, '_>) -> T) -> T {
        let mut mon = no_monitor;
        let m: Monitor<'_> = &mut mon;
        let monitor = Mutex::new(m);
        let mut rep = Reporter::new(&monitor, Progress::default(), None);
        solve(&mut rep)
    }

    /// Box bounds for a test problem: all C, or C times a random weight in [0.1, 3) per
    /// variable (weighted rows).
    pub(crate) fn bounds(n: usize, c: f64, weighted: bool, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| {
                if weighted {
                    c * (0.1 + 2.9 * rng.next_f64())
                } else {
                    c
                }
            })
            .collect()
    }

    /// Checks what every exact solution must satisfy, from the kernel matrix itself.
    pub(crate) fn check_solution(q: &[f64], sol: &DualSolution, c: &[f64], tol: f64) {
        let n = sol.alpha.len();
        let c_max = c.iter().copied().fold(0.0, f64::max);
        let ya: f64 = sol.alpha.iter().zip(&sol.y).map(|(a, y)| a * y).sum();
        assert!(ya.abs() < 1e-9 * c_max * n as f64, "y^T a = {ya}");
        assert!(sol
            .alpha
            .iter()
            .zip(c)
            .all(|(&a, &ci)| (0.0..=ci).contains(&a)));
        // Recompute G from scratch and check the KKT gap to tol (plus rounding of f32 rows).
        let mut st = DualState::new(rbf_svc(sol.y.clone(), c.to_vec()));
        st.alpha = sol.alpha.clone();
        for i in 0..n {
            st.grad[i] = (0..n).map(|j| q[i * n + j] * st.alpha[j]).sum::<f64>() - 1.0;
        }
        assert!(st.gap() < tol + 1e-4, "gap {}", st.gap());
        assert!(sol.converged);
        assert!((st.objective() - sol.objective).abs() < 1e-5 * (1.0 + sol.objective.abs()));
        assert!(
            (objective(q, &sol.alpha) - sol.objective).abs() < 1e-5 * (1.0 + sol.objective.abs())
        );
        // rho: free variables satisfy y_i G_i = rho (to tol).
        for (i, (&a, &ci)) in sol.alpha.iter().zip(c).enumerate() {
            if a > 1e-9 && a < ci - 1e-9 {
                assert!((st.y[i] * st.grad[i] - sol.rho).abs() < tol + 1e-4);
            }
        }
    }

    #[test]
    fn smo_matches_an_independent_qp_solver() {
        let mut rng = Rng::new(77);
        // Odd trials weight the rows: a bound C_i per variable.
        for trial in 0..24 {
            let n = 10 + rng.below(50);
            let d = 1 + rng.below(4);
            let c = [0.1, 1.0, 10.0][trial % 3];
            let gamma = [0.3, 1.0, 4.0][(trial / 3) % 3];
            let (xs, y) = problem(n, d, 1000 + trial as u64);
            let c = bounds(n, c, trial % 2 == 1, trial as u64);
            let q = q_matrix(&xs, &y, d, gamma);
            let tol = 1e-6;
            // Shrinking off, every 3 pairs (many passes on a small problem), LIBSVM's period.
            let shrinking = [None, Some(3), Some(0)][(trial / 2) % 3];
            let sol = run_smo(&xs, &y, d, &c, gamma, tol, shrinking);
            check_solution(&q, &sol, &c, tol);
            let reference = reference_qp(&q, &y, &c, 5_000);
            let f_ref = objective(&q, &reference);
            assert!(
                sol.objective <= f_ref + 1e-6 * (1.0 + f_ref.abs()),
                "trial {trial}: smo {} vs reference {f_ref}",
                sol.objective
            );
            assert!(
                (sol.objective - f_ref).abs() < 1e-4 * (1.0 + f_ref.abs()),
                "trial {trial}: {} vs {f_ref}",
                sol.objective
            );
        }
    }

    #[test]
    fn smo_stops_at_the_iteration_cap_and_says_so() {
        let (xs, y) = problem(80, 2, 3);
        let x = DenseView::new(&xs, 80, 2).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(2.0), 1 << 20).unwrap();
        let run = ExactRun {
            tol: 1e-8,
            max_iter: 3,
            shrinking: Some(1),
        };
        let sol =
            quietly(|rep| solve_smo(&mut cache, rbf_svc(y.clone(), vec![10.0; 80]), &run, rep))
                .unwrap();
        assert_eq!(sol.iterations, 3);
        assert!(!sol.converged);
        let ya: f64 = sol.alpha.iter().zip(&y).map(|(a, y)| a * y).sum();
        assert!(ya.abs() < 1e-12);
    }

    /// The tube's pair step against the objective along the pair evaluated on a fine grid and
    /// refined by ternary search: kinks before, inside and beyond the box, both orders, a
    /// curvature small enough to run to the bound.
    #[test]
    fn a_tube_pair_step_minimises_the_objective_along_the_pair() {
        use crate::core::exact::dual::{tube_pair_step, TubePair};
        let mut rng = Rng::new(19);
        for trial in 0..2_000 {
            let c = [0.5, 1.0, 4.0][trial % 3];
            let tube = [0.0, 0.05, 0.4][(trial / 3) % 3];
            let pick = |rng: &mut Rng| match rng.below(4) {
                0 => 0.0,
                1 => c,
                2 => -c,
                _ => (rng.next_f64() * 2.0 - 1.0) * c,
            };
            let (bi, bj) = (pick(&mut rng), pick(&mut rng));
            let room = (c - bi).min(bj + c);
            if room <= 0.0 {
                continue;
            }
            let g = (rng.next_f64() * 2.0 - 1.0) * 3.0;
            let quad = [1e-3, 0.5, 2.0][rng.below(3)];
            // phi(d) with the smooth part's slope g at d = 0.
            let phi =
                |d: f64| g * d + quad * d * d / 2.0 + tube * ((bi + d).abs() + (bj - d).abs());
            let up = if bi >= 0.0 { tube } else { -tube };
            let low = if bj > 0.0 { -tube } else { tube };
            let slope = g + up + low;
            if slope >= 0.0 {
                continue; // not a violating pair: the solvers never step it
            }
            let d = tube_pair_step(TubePair {
                slope,
                quad,
                tube,
                beta_i: bi,
                beta_j: bj,
                room,
            });
            assert!(
                (0.0..=room).contains(&d),
                "trial {trial}: d {d} outside [0, {room}]"
            );
            let (mut lo, mut hi) = (0.0, room);
            let best_grid = (0..=2_000)
                .map(|k| room * k as f64 / 2_000.0)
                .min_by(|a, b| phi(*a).total_cmp(&phi(*b)))
                .unwrap();
            lo = (best_grid - room / 2_000.0).max(lo);
            hi = (best_grid + room / 2_000.0).min(hi);
            for _ in 0..200 {
                let (m1, m2) = (lo + (hi - lo) / 3.0, hi - (hi - lo) / 3.0);
                if phi(m1) <= phi(m2) {
                    hi = m2;
                } else {
                    lo = m1;
                }
            }
            let brute = phi((lo + hi) / 2.0);
            assert!(
                phi(d) <= brute + 1e-9 * (1.0 + brute.abs()),
                "trial {trial}: phi({d}) = {} above the search's {brute} (bi {bi}, bj {bj}, \
                 g {g}, quad {quad}, tube {tube}, room {room})",
                phi(d)
            );
        }
    }

    /// A paired position's parts (nu-SVR's a_t, a_t* at one position): its coefficient a - a*,
    /// what G_bar holds of it (C for a_t = C less C for a_t* = C) and the rest, in every
    /// combination of bound and free values; a start where both sit at C needs no row.
    #[test]
    fn paired_positions_split_into_bound_and_free_parts() {
        let c = 2.0;
        let values = [0.0, 0.5, c];
        let n = values.len() * values.len();
        let (mut a, mut star) = (Vec::new(), Vec::new());
        for &va in &values {
            for &vs in &values {
                a.push(va);
                star.push(vs);
            }
        }
        let problem = DualProblem {
            y: vec![1.0; n],
            p: vec![0.0; n],
            upper: vec![c; n],
            diag: vec![1.0; n],
            start: Some([a.clone(), star.clone()].concat()),
            sum_per_label: true,
            tube: None,
            paired: true,
            start_gradient: None,
        };
        problem.check().unwrap();
        let state = DualState::new(problem);
        for t in 0..n {
            let at_c = |v: f64| if v == c { c } else { 0.0 };
            let free = |v: f64| if v > 0.0 && v < c { v } else { 0.0 };
            assert_eq!(state.coefficient(t), a[t] - star[t]);
            assert_eq!(state.bound_part(t), at_c(a[t]) - at_c(star[t]));
            assert_eq!(state.free_part(t), free(a[t]) - free(star[t]));
            assert_eq!(
                state.bound_part(t) + state.free_part(t),
                state.coefficient(t)
            );
            assert_eq!(state.is_free(t), free(a[t]) != 0.0 || free(star[t]) != 0.0);
            let sets = state.paired_sets(t);
            assert_eq!(sets[0], (a[t] < c, a[t] > 0.0));
            assert_eq!(sets[1], (star[t] > 0.0, star[t] < c));
        }
        // LIBSVM's start (a_t = a_t* = C) cancels: no kernel row for the gradient.
        let x: Vec<f64> = (0..4).map(f64::from).collect();
        let x = DenseView::new(&x, 4, 1).unwrap();
        let mut cache = KernelRowCache::<_, f32>::new(&x, Kernel::rbf(1.0), 1 << 20).unwrap();
        let start = DualProblem {
            y: vec![1.0; 4],
            p: vec![-1.0; 4],
            upper: vec![c; 4],
            diag: vec![1.0; 4],
            start: Some(vec![c, c, 0.0, 0.0, c, c, 0.0, 0.0]),
            sum_per_label: true,
            tube: None,
            paired: true,
            start_gradient: None,
        };
        let (state, _) = quietly(|rep| start_state(&mut cache, start, Some(0), rep)).unwrap();
        assert_eq!(cache.stats().misses, 0);
        assert_eq!(state.grad, vec![-1.0; 4]);
        assert!(state.grad_bar.iter().all(|&g| g == 0.0));
    }

    /// SVR's twins: a start with a_i = a_i* (nu-SVR's) on some rows, one twin alone or unequal
    /// on others, at the bound or below it. The gradient and G_bar are the sums written out,
    /// and the rows whose twins cancel are never requested: with only cancelling rows in the
    /// start, the cache computes nothing.
    #[test]
    fn a_start_whose_twins_cancel_computes_no_rows() {
        use crate::core::data::rows::SubsetRows;
        let (n, d, gamma, c) = (30, 3, 0.7, 2.0);
        let (xs, _) = problem(n, d, 41);
        let x = DenseView::new(&xs, n, d).unwrap();
        let twice: Vec<usize> = (0..n).chain(0..n).collect();
        let sub = SubsetRows::new(&x, &twice).unwrap();
        let y: Vec<f64> = (0..2 * n).map(|t| if t < n { 1.0 } else { -1.0 }).collect();
        let p: Vec<f64> = (0..2 * n).map(|t| 0.1 + 0.03 * t as f64).collect();
        let row_of = |t: usize| t % n;
        // Kernel values of the data rows, for the sums written out.
        let k = |a: usize, b: usize| {
            let d2: f64 = (0..d)
                .map(|j| (xs[a * d + j] - xs[b * d + j]).powi(2))
                .sum();
            (-gamma * d2).exp()
        };
        for lone in [false, true] {
            let mut a0 = vec![0.0; 2 * n];
            for i in 0..8 {
                // Cancelling: both at C (rows 0-3), both below it (rows 4-7).
                let v = if i < 4 { c } else { 0.3 + 0.1 * i as f64 };
                a0[i] = v;
                a0[n + i] = v;
            }
            if lone {
                a0[10] = c; // one twin at its bound
                a0[n + 11] = 0.4; // one below it
                a0[12] = 0.9; // both, unequal
                a0[n + 12] = 0.5;
            }
            let problem = DualProblem {
                y: y.clone(),
                p: p.clone(),
                upper: vec![c; 2 * n],
                diag: vec![1.0; 2 * n],
                start: Some(a0.clone()),
                sum_per_label: true,
                tube: None,
                paired: false,
                start_gradient: None,
            };
            let mut cache =
                KernelRowCache::<_, f32>::new(&sub, Kernel::rbf(gamma), 1 << 20).unwrap();
            let (state, _) = quietly(|rep| start_state(&mut cache, problem, Some(0), rep)).unwrap();
            for t in 0..2 * n {
                let mut g = p[t];
                let mut bar = 0.0;
                for s in 0..2 * n {
                    let q = y[t] * y[s] * k(row_of(t), row_of(s));
                    g += q * a0[s];
                    if a0[s] >= c {
                        bar += q * c;
                    }
                }
                // The cache keeps kernel values in f32.
                assert!(
                    (state.grad[t] - g).abs() < 1e-6,
                    "lone {lone}, G_{t}: {} vs {g}",
                    state.grad[t]
                );
                assert!(
                    (state.grad_bar[t] - bar).abs() < 1e-6,
                    "lone {lone}, G_bar_{t}"
                );
            }
            let computed = cache.stats().misses;
            if lone {
                // Rows 10, n + 11, 12 and n + 12 (copied from its twin or computed).
                assert_eq!(computed, 4, "{:?}", cache.stats());
            } else {
                assert_eq!(computed, 0, "{:?}", cache.stats());
            }
        }
    }
}
