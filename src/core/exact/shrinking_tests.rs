//! Shrinking tested through both solvers that use it (SMO and ALFPGM) against an independent
//! QP solver: the same solutions with and without it, on any schedule.

use crate::core::data::rows::DenseView;
use crate::core::exact::alfpgm::{solve_alfpgm, AlfpgmParams};
use crate::core::exact::dual::{DualSolution, ExactRun};
use crate::core::exact::smo::solve_smo;
use crate::core::exact::smo::tests::{
    assert_same_objective, bounds, check_solution, problem, q_matrix, quietly, rbf_svc,
};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_cache::KernelRowCache;

fn solve(
    x: &DenseView<'_>,
    y: &[f64],
    c: &[f64],
    alfpgm: bool,
    shrinking: Option<usize>,
    cache_bytes: usize,
) -> DualSolution {
    let mut cache = KernelRowCache::<_, f32>::new(x, Kernel::rbf(1.5), cache_bytes).unwrap();
    let problem = rbf_svc(y.to_vec(), c.to_vec());
    let run = ExactRun {
        tol: 1e-4,
        max_iter: 10_000_000,
        shrinking,
    };
    quietly(|rep| {
        if alfpgm {
            let p = AlfpgmParams {
                n_pairs: 20,
                ..Default::default()
            };
            solve_alfpgm(&mut cache, problem, &run, &p, rep)
        } else {
            solve_smo(&mut cache, problem, &run, rep)
        }
    })
    .unwrap()
}

#[test]
fn shrinking_reaches_the_unshrunk_solution() {
    // Many rows at a bound (noisy labels, few SVs in the bulk), a cache of 40 rows: row
    // prefixes are computed short, cut by swaps and extended again.
    let (n, d) = (1200, 2);
    let (xs, y) = problem(n, d, 21);
    let x = DenseView::new(&xs, n, d).unwrap();
    let q = q_matrix(&xs, &y, d, 1.5);
    for (weighted, alfpgm) in [(false, false), (true, false), (false, true), (true, true)] {
        let c = bounds(n, 4.0, weighted, 5);
        let plain = solve(&x, &y, &c, alfpgm, None, 1 << 24);
        assert_eq!(plain.min_active, n);
        for (schedule, bytes) in [(Some(0), 1 << 24), (Some(0), 40 * n * 4), (Some(7), 0)] {
            let shrunk = solve(&x, &y, &c, alfpgm, schedule, bytes);
            // ALFPGM moves up to 20 pairs a step and may finish before 1000 pairs.
            assert!(
                shrunk.min_active < n / 2 || (alfpgm && schedule == Some(0)),
                "nothing shrunk: {} of {n} active",
                shrunk.min_active
            );
            check_solution(&q, &shrunk, &c, 1e-4);
            let what = format!("alfpgm {alfpgm} weighted {weighted}");
            assert_same_objective(shrunk.objective, plain.objective, 1e-4, &what);
        }
    }
}
