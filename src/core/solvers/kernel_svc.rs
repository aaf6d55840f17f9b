//! The exact kernel machines: C-SVC, epsilon-SVR and one-class SVM with any `Kernel` and a bias,
//! each a small builder of the one dual problem (`smo::DualProblem`) that ALFPGM or WSS2 SMO
//! solve exactly (to tol) over one kernel-row cache, as LIBSVM's `solve_c_svc`,
//! `solve_epsilon_svr` and `solve_one_class` build theirs for its `Solver`.
//!
//! C-SVC: several classes one-vs-one like LIBSVM / scikit-learn's SVC, the K(K-1)/2 pair
//! problems trained in parallel on the configured pool.
//!
//! Each pair (a, b), a < b, is the binary dual C-SVC (see `smo.rs`) on the rows of classes a and
//! b in their original order, with y = +1 for class a, so its decision value
//! sum_i a_i y_i k(x_i, x) - rho is positive for class a (LIBSVM's convention). Each pair has its
//! own kernel-row cache of `cache_bytes` (as LIBSVM has one per pair problem). With several
//! pairs (`shared_rows`, the default) the pairs' caches fill their rows from one store of
//! `cache_bytes` shared by all pairs (`shared_rows.rs`): the part of x_i's row against its own
//! class is computed once for all the K - 1 pairs x_i belongs to.

use std::sync::Mutex;
use std::time::Duration;

use rayon::prelude::*;

use crate::core::data::{Rows, SubsetRows};
use crate::core::error::{Result, SvmError};
use crate::core::kernel::{kernel_norms, Kernel};
use crate::core::kernel_cache::{CacheStats, KernelRowCache};
use crate::core::parallel;
use crate::core::shared_rows::{PairSegments, SharedKernelRows};
use crate::core::solvers::alfpgm::{solve_alfpgm, AlfpgmParams};
use crate::core::solvers::smo::{solve_smo, DualProblem, DualSolution, ExactRun, Reporter};
use crate::core::solvers::{check_weights, Monitor, Progress};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactSolver {
    Smo,
    Alfpgm,
}

impl ExactSolver {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "smo" => Ok(ExactSolver::Smo),
            "alfpgm" => Ok(ExactSolver::Alfpgm),
            other => Err(SvmError::invalid_parameter(
                "solver",
                format!("must be 'alfpgm' or 'smo', got {other:?}"),
            )),
        }
    }
}

/// Hyper-parameters of the exact kernel machines.
#[derive(Debug, Clone, PartialEq)]
pub struct ExactParams {
    /// C of C-SVC and SVR (one-class has none: its bounds are 1, times the row weights).
    pub c: f64,
    pub kernel: Kernel,
    /// Stop when m(a) - M(a) < tol.
    pub tol: f64,
    /// Kernel-row cache per pair problem, in bytes.
    pub cache_bytes: usize,
    /// Iteration cap per pair problem (SMO: pair steps; ALFPGM: working sets); 0 = the
    /// solver's default (SMO: max(10^7, 100 n) as LIBSVM; ALFPGM: max(10^5, n)).
    pub max_iter: u64,
    pub solver: ExactSolver,
    /// LIBSVM's shrinking (`shrinking.rs`): same solution and stopping rule, fewer kernel values.
    pub shrinking: bool,
    /// Several classes: the pairs take their kernel rows from one shared store (`shared_rows.rs`).
    pub shared_rows: bool,
    pub alfpgm: AlfpgmParams,
    /// Seconds between progress lines (verbose); None = none.
    pub report_every: Option<f64>,
    /// Threads for this fit (0 = one per core); None = the process-wide setting.
    pub n_threads: Option<usize>,
}

impl Default for ExactParams {
    fn default() -> Self {
        ExactParams {
            c: 1.0,
            kernel: Kernel::rbf(1.0),
            tol: 1e-3,
            cache_bytes: 200 << 20,
            max_iter: 0,
            solver: ExactSolver::Alfpgm,
            shrinking: true,
            shared_rows: true,
            alfpgm: AlfpgmParams::default(),
            report_every: None,
            n_threads: None,
        }
    }
}

/// Parameters that passed validation.
#[derive(Debug, Clone)]
pub struct ValidExactParams(ExactParams);

impl ExactParams {
    pub fn check(&self) -> Result<ValidExactParams> {
        self.kernel.check()?;
        if !(self.c.is_finite() && self.c > 0.0) {
            return Err(SvmError::invalid_parameter(
                "C",
                format!("must be a positive finite number, got {}", self.c),
            ));
        }
        if !(self.tol.is_finite() && self.tol > 0.0) {
            return Err(SvmError::invalid_parameter(
                "tol",
                format!("must be a positive finite number, got {}", self.tol),
            ));
        }
        if let Some(r) = self.report_every {
            if !(r.is_finite() && r >= 0.0) {
                return Err(SvmError::invalid_parameter(
                    "report_every",
                    "must be a finite number >= 0",
                ));
            }
        }
        self.alfpgm.check()?;
        Ok(ValidExactParams(self.clone()))
    }
}

/// The solution of one pair problem, in terms of the training rows.
#[derive(Debug, Clone)]
pub struct PairModel {
    /// The classes (a < b); y = +1 for class a.
    pub classes: (u32, u32),
    /// Training rows (indices into X) with a_i > 0, ascending.
    pub support: Vec<usize>,
    /// y_i a_i of those rows.
    pub coef: Vec<f64>,
    pub rho: f64,
    /// 1/2 a^T Q a - e^T a at the solution.
    pub objective: f64,
    pub iterations: u64,
    pub converged: bool,
    pub gap: f64,
    pub fallback_steps: u64,
    pub inner_iterations: u64,
    pub cache: CacheStats,
    pub seconds: f64,
    /// The smallest active set of the run (shrinking).
    pub min_active: usize,
    /// Rows in this pair problem.
    pub n_rows: usize,
}

fn default_max_iter(solver: ExactSolver, n: usize) -> u64 {
    match solver {
        ExactSolver::Smo => 10_000_000u64.max(100 * n as u64),
        ExactSolver::Alfpgm => 100_000u64.max(n as u64),
    }
}

/// Solves a dual problem whose variable t is row t of `x` (squared norms `sq_norms`, as
/// `kernel_norms` gives them); kernel rows computed from `x`, or gathered from `segments`.
pub fn solve_dual<R: Rows>(
    x: &R,
    sq_norms: Vec<f64>,
    problem: DualProblem,
    params: &ValidExactParams,
    segments: Option<PairSegments<'_>>,
    reporter: &mut Reporter<'_, '_>,
) -> Result<DualSolution> {
    let p = &params.0;
    let mut cache = match segments {
        Some(s) => KernelRowCache::with_segments(x, p.kernel, sq_norms, p.cache_bytes, s)?,
        None => KernelRowCache::with_norms(x, p.kernel, sq_norms, p.cache_bytes)?,
    };
    let max_iter = if p.max_iter == 0 {
        default_max_iter(p.solver, problem.n())
    } else {
        p.max_iter
    };
    let run = ExactRun {
        tol: p.tol,
        max_iter,
        shrinking: p.shrinking.then_some(0),
    };
    match p.solver {
        ExactSolver::Smo => solve_smo(&mut cache, problem, &run, reporter),
        ExactSolver::Alfpgm => solve_alfpgm(&mut cache, problem, &run, &p.alfpgm, reporter),
    }
}

/// Trains the one-vs-one problems. `y[i]` is the class index of row i in `0..n_classes`; every
/// class must occur. `weights` (positive, one per row; sample times class weight) make the box
/// of row i [0, C w_i], as LIBSVM's weighted C. Pairs come back in LIBSVM's order (0,1), (0,2),
/// ..., (1,2), ...
pub fn train_kernel_svc<R: Rows>(
    x: &R,
    y: &[u32],
    weights: Option<&[f64]>,
    n_classes: usize,
    params: &ValidExactParams,
    monitor: Monitor<'_>,
) -> Result<Vec<PairModel>> {
    let p = &params.0;
    let n = x.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    if y.len() != n {
        return Err(SvmError::invalid_input(format!(
            "X has {n} rows but y has {} labels",
            y.len()
        )));
    }
    crate::core::solvers::check_classes(n_classes, Some(n))?;
    check_weights(weights, n)?;
    let mut counts = vec![0usize; n_classes];
    for &c in y {
        match counts.get_mut(c as usize) {
            Some(k) => *k += 1,
            None => {
                return Err(SvmError::invalid_input(format!(
                    "class index {c} out of range for {n_classes} classes"
                )))
            }
        }
    }
    if let Some(empty) = counts.iter().position(|&k| k == 0) {
        return Err(SvmError::invalid_input(format!(
            "class index {empty} has no training rows"
        )));
    }
    let norms = kernel_norms(x, p.kernel)?;
    let mut pairs = Vec::new();
    for a in 0..n_classes as u32 {
        for b in a + 1..n_classes as u32 {
            pairs.push((a, b));
        }
    }
    let n_pairs = pairs.len();
    // The rows grouped by class (stable), for the store shared by the pairs.
    let mut class_start = vec![0usize; n_classes + 1];
    for (c, &k) in counts.iter().enumerate() {
        class_start[c + 1] = class_start[c] + k;
    }
    // A precomputed kernel is read from its matrix: nothing to share.
    let share = p.shared_rows && n_pairs > 1 && p.kernel != Kernel::Precomputed;
    let mut order = vec![0usize; if share { n } else { 0 }];
    let mut position = vec![0u32; order.len()];
    let mut rank = vec![0u32; order.len()];
    if !order.is_empty() {
        let mut next = class_start[..n_classes].to_vec();
        for (g, &c) in y.iter().enumerate() {
            let at = &mut next[c as usize];
            order[*at] = g;
            position[g] = *at as u32;
            rank[g] = (*at - class_start[c as usize]) as u32;
            *at += 1;
        }
    }
    let grouped = SubsetRows::new(x, &order)?;
    let store = if order.is_empty() {
        None
    } else {
        let grouped_norms = order.iter().map(|&g| norms[g]).collect();
        Some(SharedKernelRows::new(
            &grouped,
            p.kernel,
            grouped_norms,
            class_start,
            position,
            p.cache_bytes,
        )?)
    };
    let monitor = Mutex::new(monitor);
    let report_every = p.report_every.map(Duration::from_secs_f64);
    let solve_pair = |k: usize, (a, b): (u32, u32)| -> Result<PairModel> {
        // Several classes: class a's rows, then class b's (LIBSVM's order of a pair problem,
        // and the layout of the shared store's segments).
        let rows: Vec<usize> = if n_pairs == 1 {
            (0..n).collect()
        } else {
            let of = |c: u32| (0..n).filter(move |&i| y[i] == c);
            of(a).chain(of(b)).collect()
        };
        let labels: Vec<f64> = rows
            .iter()
            .map(|&i| if y[i] == a { 1.0 } else { -1.0 })
            .collect();
        let sub_norms: Vec<f64> = rows.iter().map(|&i| norms[i]).collect();
        let upper: Vec<f64> = rows
            .iter()
            .map(|&i| p.c * weights.map_or(1.0, |w| w[i]))
            .collect();
        let sub = SubsetRows::new(x, &rows)?;
        let template = Progress {
            epoch: k + 1,
            epochs: n_pairs,
            ..Progress::default()
        };
        let mut reporter = Reporter::new(&monitor, template, report_every);
        let segments = match &store {
            Some(store) => Some(PairSegments::new(store, (a, b), &rows, y, &rank)?),
            None => None,
        };
        let diag = sub_norms.iter().map(|&q| p.kernel.self_value(q)).collect();
        let problem = DualProblem::classification(labels, upper, diag);
        let sol = solve_dual(&sub, sub_norms, problem, params, segments, &mut reporter)?;
        let mut by_row: Vec<(usize, f64)> = rows
            .iter()
            .enumerate()
            .filter(|&(t, _)| sol.alpha[t] > 0.0)
            .map(|(t, &i)| (i, sol.y[t] * sol.alpha[t]))
            .collect();
        by_row.sort_unstable_by_key(|&(i, _)| i);
        let (support, coef): (Vec<usize>, Vec<f64>) = by_row.into_iter().unzip();
        Ok(PairModel {
            classes: (a, b),
            support,
            coef,
            rho: sol.rho,
            objective: sol.objective,
            iterations: sol.iterations,
            converged: sol.converged,
            gap: sol.gap,
            fallback_steps: sol.fallback_steps,
            inner_iterations: sol.inner_iterations,
            cache: sol.cache,
            seconds: sol.seconds,
            min_active: sol.min_active,
            n_rows: rows.len(),
        })
    };
    parallel::install_with(p.n_threads, || {
        if n_pairs == 1 {
            Ok(vec![solve_pair(0, pairs[0])?])
        } else {
            pairs
                .par_iter()
                .enumerate()
                .map(|(k, &pair)| solve_pair(k, pair))
                .collect::<Result<Vec<_>>>()
        }
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::data::DenseView;
    use crate::core::rng::Rng;
    use crate::core::solvers::no_monitor;

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
                assert!(p.converged);
                let sum: f64 = p.coef.iter().sum();
                assert!(sum.abs() < 1e-9, "y^T a = {sum}");
                for &i in &p.support {
                    assert!(ys[i] == p.classes.0 || ys[i] == p.classes.1);
                }
            }
            results.push(pairs);
        }
        for k in 0..3 {
            let f0 = results[0][k].objective;
            for r in &results[1..] {
                assert!((r[k].objective - f0).abs() < 1e-5 * (1.0 + f0.abs()));
            }
        }
        // One thread or two: the same arithmetic, the same model.
        assert_eq!(results[1][0].coef, results[2][0].coef);
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
        let csr = crate::core::data::CsrView::new(&indptr, &indices, &xs, d).unwrap();
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
                        assert!(a.converged && b.converged);
                        let scale = 1.0 + b.objective.abs();
                        assert!((a.objective - b.objective).abs() < 1e-9 * scale);
                        assert!((a.rho - b.rho).abs() < 1e-6, "{} vs {}", a.rho, b.rho);
                    }
                    let values = |m: &[PairModel]| m.iter().map(|p| p.cache.values).sum::<u64>();
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
            assert_eq!(a[0].coef, b[0].coef);
            assert_eq!(a[0].rho, b[0].rho);
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
}
