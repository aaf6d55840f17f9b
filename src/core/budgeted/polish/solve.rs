//! The solve's driver: `polish_on` checks the problem, starts from a subsample's solution
//! where that pays (`sample_start`), makes the first pass and iterates, the Newton system's
//! way (`newton_iteration`) or the Hessian-free way (`hessian_free`), over the state in
//! `state`.

use std::time::Instant;

use crate::core::budget::model::BudgetModel;
use crate::core::budgeted::problem::Targets;
use crate::core::common::checks::check_weights;
use crate::core::common::error::{Result, SvmError};
use crate::core::common::memory::{available_bytes, check_fits};
use crate::core::common::progress::{Monitor, Progress};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block::{sv_rows, BlockScratch, KernelBlocks};

use super::memory::polish_bytes;
use super::newton::preconditioner_ridge;
use super::output::Output;
use super::rows::{InMemory, RowSource};
use super::sample::{
    in_sample, RowSample, PROBE_ROWS_PER_SV, SAMPLE_ROWS_PER_SV, SAMPLE_STEP, SAMPLE_TOL,
};
use super::segments::{Passes, Segments};
use super::state::{Fixed, OfTheBasis, Solve};
use super::{PolishMethod, PolishParams, PolishResult};

/// What a polish is asked: the model (its support vectors, and its coefficients with
/// `start_intercept`, 0 when None, as the warm start), the rows' targets and optional
/// weights, and the settings.
#[derive(Clone, Copy)]
pub(super) struct Problem<'a> {
    pub(super) model: &'a BudgetModel,
    pub(super) start_intercept: Option<&'a [f64]>,
    pub(super) targets: Targets<'a>,
    pub(super) weights: Option<&'a [f64]>,
    pub(super) params: &'a PolishParams,
}

/// `polish` with what depends on the basis only (`OfTheBasis`).
pub(super) fn polish_on(
    problem: &Problem<'_>,
    source: &mut dyn RowSource,
    monitor: Monitor<'_>,
    basis: &mut OfTheBasis,
) -> Result<PolishResult> {
    let start = Instant::now();
    let Problem {
        model,
        start_intercept,
        targets,
        weights,
        params,
    } = *problem;
    let (n, m, n_out) = check(problem, &*source)?;
    let blocks = KernelBlocks::from_sv_matrix(
        &model.support_vectors,
        m,
        model.dim,
        Kernel::rbf(model.gamma),
    )?;
    crate::core::data::rows::check_sq_norms(blocks.sq_norms(), "support vector")?;

    // K_SS, once.
    let mut kss = basis
        .kss
        .take()
        .unwrap_or_else(|| basis_kernel(model, &blocks));

    let mut outputs: Vec<Output> = (0..n_out)
        .map(|k| Output {
            done: m == 0,
            ..Output::at(
                (0..m).map(|j| model.coef[j * n_out + k]).collect(),
                start_intercept.map_or(0.0, |b| b[k]),
                n,
            )
        })
        .collect();

    let mut hessian_free = match params.method {
        PolishMethod::Auto => m >= params.hessian_free_basis,
        PolishMethod::Newton => false,
        PolishMethod::HessianFree => m > 0,
    };
    let started = sample_start(
        problem,
        &mut *source,
        &mut *monitor,
        basis,
        &mut kss,
        &mut outputs,
        hessian_free,
    )?;
    hessian_free |= started.hessian_free;
    let segments = Segments {
        spans: Vec::new(),
        cache: Vec::new(),
        cache_left: params.cache_bytes,
        budget: params.cache_bytes,
        single: hessian_free,
        kernel_seconds: 0.0,
    };
    let progress = Progress {
        epochs: params.max_iter,
        n_sv: m,
        polish: true,
        rows: n,
        ..Progress::default()
    };
    // The Hessian products read K_SS in f32, as they read the rows: half the bytes of every
    // product's pass over it.
    let kss_f32: Vec<f32> = if hessian_free {
        kss.iter().map(|&v| v as f32).collect()
    } else {
        Vec::new()
    };
    let ridge = preconditioner_ridge(&kss, m);
    let mut solve = Solve {
        fixed: Fixed {
            kss,
            kss_f32,
            ridge,
            targets,
            weights,
            params,
            c: params.c,
            n,
            m,
            n_out,
        },
        passes: Passes {
            blocks: &blocks,
            source,
            segments,
            count: 0,
            monitor,
            progress,
        },
        basis,
        outputs,
        hessian_free,
        pending: None,
        half_rows: true,
        last_decrease: vec![f64::INFINITY; n_out],
        first_gradient: vec![0.0; n_out],
        decrement_ratio: vec![0.0; n_out],
        result: PolishResult {
            sample_rows: started.rows,
            sample_seconds: started.seconds,
            ..PolishResult::default()
        },
        start,
    };

    // f = K beta + b at the warm start; the first pass also lays out the segments (and the
    // Hessian-free solve gathers its first direction's rows in it).
    if hessian_free {
        solve.hessian_free_start(started.squared_share)?;
    } else {
        solve.newton_start()?;
    }
    let objective_start: Vec<f64> = solve.outputs.iter().map(|o| o.objective).collect();
    while solve.result.iterations < params.max_iter && solve.outputs.iter().any(|o| !o.done) {
        if solve.forms_system() {
            solve.form_system();
        }
        if solve.hessian_free {
            solve.hessian_free_iteration()?;
        } else if !solve.newton_iteration()? {
            break;
        }
    }
    Ok(solve.finish(objective_start))
}

/// Checks the problem against the rows and that the polish's square matrices fit in memory;
/// n (rows), m (support vectors) and n_out (outputs).
fn check(problem: &Problem<'_>, source: &dyn RowSource) -> Result<(usize, usize, usize)> {
    let (model, targets, params) = (problem.model, problem.targets, problem.params);
    params.check()?;
    model.validate()?;
    let n = source.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    targets.check(n)?;
    check_weights(problem.weights, n)?;
    let n_out = targets.n_out();
    if model.n_out != n_out {
        return Err(SvmError::invalid_input(format!(
            "the model has {} outputs, the targets need {n_out}",
            model.n_out
        )));
    }
    if source.n_cols() != model.dim {
        return Err(SvmError::invalid_input(format!(
            "X has {} features, but the model has {}",
            source.n_cols(),
            model.dim
        )));
    }
    if problem
        .start_intercept
        .is_some_and(|b| b.len() != n_out || b.iter().any(|v| !v.is_finite()))
    {
        return Err(SvmError::invalid_input(
            "the starting intercept needs one finite value per output",
        ));
    }
    let m = model.n_sv();
    check_fits(
        polish_bytes(m, n, n_out, params.cache_bytes),
        available_bytes(),
        || {
            format!(
                "the polish of {m} support vectors ({n_out} output(s), K_SS, a Gram matrix per \
                 output and the Newton system, {m} x {m} each, and polish_cache_size)"
            )
        },
    )?;
    Ok((n, m, n_out))
}

/// K_SS (m x m, full storage) from the basis's kernel blocks.
fn basis_kernel(model: &BudgetModel, blocks: &KernelBlocks) -> Vec<f64> {
    let m = model.n_sv();
    let mut kss = vec![0.0; m * m];
    if m > 0 {
        let s = sv_rows(&model.support_vectors, m, model.dim);
        let norms = blocks.sq_norms().to_vec();
        blocks.fill_rows(&s, 0..m, &norms, &mut kss, &mut BlockScratch::default());
    }
    kss
}

/// Where a solve started: the rows of the subsample it started from (0: none) and the seconds
/// that took, the share of the subsample's rows whose loss term was squared at its solution
/// (1: not known), and whether the subsample's Hessian-free probe says the full solve goes
/// Hessian-free too.
struct SampleStart {
    rows: usize,
    seconds: f64,
    squared_share: f64,
    hessian_free: bool,
}

/// The subsample's start (`SAMPLE_STEP`): where it pays, the outputs' coefficients and
/// intercepts become those of a solve on the subsample (`polish_on` on its rows, lent K_SS
/// through the basis's parts).
fn sample_start(
    problem: &Problem<'_>,
    source: &mut dyn RowSource,
    monitor: Monitor<'_>,
    basis: &mut OfTheBasis,
    kss: &mut Vec<f64>,
    outputs: &mut [Output],
    hessian_free: bool,
) -> Result<SampleStart> {
    let Problem {
        model,
        targets,
        weights,
        params,
        ..
    } = *problem;
    let (n, m, n_out) = (source.n_rows(), model.n_sv(), targets.n_out());
    let c = params.c;
    let mut started = SampleStart {
        rows: 0,
        seconds: 0.0,
        squared_share: 1.0,
        hessian_free: false,
    };
    // The subsample's start pays where passes over the rows are the cost: in the Hessian-free
    // solve, and in the Newton system's where a pass (n m kernel values) outweighs the
    // factorisation (m^3 / 3) several times (`SAMPLE_STEP`).
    // Below `hessian_free_basis` the Newton system is the safe choice, but where the rows
    // outnumber the basis enough for a subsample's start, the subsample's solve is run
    // Hessian-free as a probe: if it needed no more products than forming the system costs
    // (and never formed it), the full solve goes Hessian-free too (`PROBE_ROWS_PER_SV`).
    let probe = params.method == PolishMethod::Auto && !hessian_free && n >= PROBE_ROWS_PER_SV * m;
    if !((hessian_free || probe || n >= m * m)
        && m > 0
        && params.sample_start
        && n / SAMPLE_STEP >= SAMPLE_ROWS_PER_SV * m)
    {
        return Ok(started);
    }
    let clock = Instant::now();
    // Rows in memory are copied whatever the cache (a fifth of what the caller holds, and
    // the same solve for every `polish_cache_size`); a file's within a quarter of it.
    let most = if source.in_memory() {
        usize::MAX
    } else {
        params.cache_bytes / 4
    };
    // The subsample's solve recurses: it must be smaller (the hash may take fewer rows).
    let sample = RowSample::take(source, most)?
        .filter(|s| s.n_rows >= SAMPLE_ROWS_PER_SV * m && s.n_rows < n);
    if let Some(sample) = sample {
        started.rows = sample.n_rows;
        let index: Vec<usize> = (0..n).filter(|&i| in_sample(i)).collect();
        let sample_weights: Option<Vec<f64>> =
            weights.map(|w| index.iter().map(|&i| w[i]).collect());
        let class_ids: Vec<u32>;
        let values: Vec<f64>;
        let sample_targets = match targets {
            Targets::Classes { y, n_classes } => {
                class_ids = index.iter().map(|&i| y[i]).collect();
                Targets::Classes {
                    y: &class_ids,
                    n_classes,
                }
            }
            Targets::Values { y, epsilon } => {
                values = index.iter().map(|&i| y[i]).collect();
                Targets::Values {
                    y: &values,
                    epsilon,
                }
            }
        };
        let sample_params = PolishParams {
            c: c * n as f64 / sample.n_rows as f64,
            tol: params.tol.max(SAMPLE_TOL),
            hessian_free_basis: if probe { 0 } else { params.hessian_free_basis },
            ..params.clone()
        };
        let sample_problem = Problem {
            targets: sample_targets,
            weights: sample_weights.as_deref(),
            params: &sample_params,
            ..*problem
        };
        basis.kss = Some(std::mem::take(kss));
        let start = polish_on(
            &sample_problem,
            &mut InMemory(sample.rows()?),
            &mut *monitor,
            basis,
        )?;
        *kss = basis
            .kss
            .take()
            .expect("the subsample's solve gives K_SS back");
        for (k, o) in outputs.iter_mut().enumerate() {
            for j in 0..m {
                o.beta[j] = start.coef[j * n_out + k];
            }
            o.b = start.intercept[k];
        }
        started.squared_share = (start.squared_rows as f64 / sample.n_rows as f64).min(1.0);
        started.hessian_free =
            probe && start.system_from == 0 && 4 * start.cg_products <= m * n_out;
    }
    started.seconds = clock.elapsed().as_secs_f64();
    Ok(started)
}
