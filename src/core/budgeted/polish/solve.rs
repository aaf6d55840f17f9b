//! The solve's driver: `polish_on`, the outputs' Newton state and the stopping rules.

use std::time::Instant;

use crate::core::budget::model::BudgetModel;
use crate::core::budgeted::conjugate_gradient::{self, Preconditioner};
use crate::core::budgeted::problem::Targets;
use crate::core::common::checks::check_weights;
use crate::core::common::error::{Result, SvmError};
use crate::core::common::memory::{available_bytes, check_fits};
use crate::core::common::progress::{Monitor, Progress};
use crate::core::kernels::kernel::Kernel;
use crate::core::kernels::kernel_block::{sv_rows, BlockScratch, KernelBlocks};
use crate::core::simd;

use super::copies::RowCopies;
use super::gather::{gather_pass, squared_per_segment, step_pass, Gather, Gathered, ShortStep};
use super::hessian::{hessian_product, recomputed_product};
use super::line_search::line_search;
use super::memory::{copy_share, first_pass_room, polish_bytes};
use super::newton::{preconditioner_ridge, NO_CURVATURE};
use super::newton_iteration::{gram_pass, newton_direction, Change, RIDGE_RAISED};
use super::objective::{objective, scale_start};
use super::output::{stops_after, Output};
use super::rows::{InMemory, RowSource};
use super::sample::{
    in_sample, RowSample, PROBE_ROWS_PER_SV, SAMPLE_ROWS_PER_SV, SAMPLE_STEP, SAMPLE_TOL,
};
use super::segments::{matvec_pass, segment_rows, Passes, Segments};
use super::{PolishMethod, PolishParams, PolishResult};

/// A line-search step below this share of the Newton step cannot end the solve (`polish_on`).
const SHORT_STEP: f64 = 0.5;

/// A Hessian-free iteration takes the full Newton step (whose point the pass after the
/// direction evaluated, gathering the next direction's rows at once) when it lowers the
/// objective by at least this share of what the exact line search's step does; otherwise it
/// takes that step and gathers the rows at it in a pass of their own.
const FULL_STEP_SHARE: f64 = 0.99;
/// A Hessian-free step that lowers the objective by more than this share of the step before it
/// means the half-precision rows' Hessian is what limits the iteration (Newton's steps shrink
/// far faster near the optimum: 0.02-0.2 on the generator, 0.6-0.99 with halves on a small
/// ill-conditioned problem): the rows are kept in f32 from then on. Partial steps count too:
/// with halves a9a's directions (B = 3,000) were mostly cut short by the line search and never
/// switched (50 iterations without converging; in f32 from the start, 10).
const STALL_SHARE: f64 = 0.5;
/// The preconditioner's scale is refactored (a Cholesky of m x m, 0.4 s at m = 3,000) when the
/// squared rows' weight moves by more than this factor either way. The generator's 200,000 rows
/// (B = 3,000) moved it 3.7x (6.7 -> 25.2) within the 40,000-row start: at 2 that was a second
/// factorisation, at 4 the same 80 products on all rows.
pub const RESCALE_FACTOR: f64 = 4.0;

/// `PolishMethod::Auto`'s Hessian-free solve forms the Newton system from the next iteration on
/// when it has taken this many iterations, or more Hessian products than m / 4 per output
/// (what forming the system costs: |Q| m^2 / 2 multiply-adds against 2 |Q| m a product). Its
/// preconditioner assumes K_Q^T K_Q ~ (|Q| / m) K_SS^2, which a smooth kernel over a basis
/// unlike the squared rows breaks: at B = 3,000 a9a's Hessian-free solve took 12,840 products
/// and 50 iterations without converging (185 s; the Newton system 8.1 s), cod-rna's 50
/// iterations of 9 products each (12.7 s, 0.2 points short; Newton 9.7 s), while the
/// generator's converge in 4-8 iterations of 10-20 products. (Most of a9a's stall was the
/// halves, which `STALL_SHARE` now catches; a9a, cod-rna and ijcnn1 still form the system at
/// iteration 13, in 8-9 s.)
const FORM_AFTER_ITERATIONS: usize = 12;
/// Conjugate-gradient products per Newton direction at most.
pub const MAX_CG_PRODUCTS: usize = 300;
/// A direction's relative residual: sqrt(|g| / |g_first|) (inexact Newton: loose early,
/// tighter as the gradient falls), at least `CG_TOL_FLOOR` (what the f32 rows' products can
/// tell) and at most `CG_TOL_EARLY` (`CG_TOL_NEAR` after a subsample's start).
pub const CG_TOL_FLOOR: f64 = 1e-6;
pub const CG_TOL_EARLY: f64 = 0.5;

/// The most a solve started from a subsample's solution lets its directions' residual be,
/// relative: near the optimum an iteration (one or two passes over the rows) costs tens of
/// Hessian products, and loose directions cost iterations (1,000,000 hard10d rows, B = 2,000,
/// two passes an iteration: 3 iterations at 0.01, 5 at 0.5; from the budgeted pass's
/// coefficients 0.5 is best). Once an iteration was mostly one pass, 0.05 did best on 200,000
/// hard10d rows at B = 3,000: 79 products in 4 iterations and 5 passes, against 112 at 0.01,
/// 48 at 0.1 (but 6 passes) and 84 at 0.2 (5 iterations), the polish about 1.3 s faster).
const CG_TOL_NEAR: f64 = 0.05;
/// The Hessian-free solve starts from the start's best multiple (`scale_start`) when that
/// lowers the objective by at least this share, and then gathers the rows again at it: one
/// more pass, which the iterations it saves repay. 200,000 hard10d rows, B = 3,000: the
/// subsample's start (BSGD's coefficients) 186,611 -> 91,838, its solve 7 -> 5 iterations
/// (that solve 3.0-3.7 -> 2.3-2.4 s, alternated with the build before); a million rows: fit
/// 45 -> 39-41 s; ijcnn1 B = 1,000 18 -> 12 iterations, B = 3,000 19 -> 11. The subsample's
/// solution, the start on all rows, gains 0.14% (kept).
pub(super) const SCALED_START_GAIN: f64 = 0.01;

/// What depends on the support vectors only, built once for a solve on a subsample and the
/// solve that starts from it: K_SS (lent to the subsample's solve, which gives it back: one
/// copy, 800 MB at m = 10,000) and the Hessian-free preconditioner's factors.
#[derive(Default)]
pub(super) struct OfTheBasis {
    kss: Option<Vec<f64>>,
    preconditioner: Option<Preconditioner>,
}

/// `polish` with what depends on the basis only (`OfTheBasis`).
#[allow(clippy::too_many_arguments)]
pub(super) fn polish_on(
    model: &BudgetModel,
    start_intercept: Option<&[f64]>,
    source: &mut dyn RowSource,
    targets: Targets<'_>,
    weights: Option<&[f64]>,
    params: &PolishParams,
    monitor: Monitor<'_>,
    basis: &mut OfTheBasis,
) -> Result<PolishResult> {
    let start = Instant::now();
    params.check()?;
    model.validate()?;
    let n = source.n_rows();
    if n == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    targets.check(n)?;
    check_weights(weights, n)?;
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
    if start_intercept.is_some_and(|b| b.len() != n_out || b.iter().any(|v| !v.is_finite())) {
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
    let blocks = KernelBlocks::from_sv_matrix(
        &model.support_vectors,
        m,
        model.dim,
        Kernel::rbf(model.gamma),
    )?;
    crate::core::data::rows::check_sq_norms(blocks.sq_norms(), "support vector")?;
    let c = params.c;
    let weight = |i: usize| weights.map_or(1.0, |w| w[i]);

    // K_SS, once.
    let mut kss = basis.kss.take().unwrap_or_else(|| {
        let mut kss = vec![0.0; m * m];
        if m > 0 {
            let s = sv_rows(&model.support_vectors, m, model.dim);
            let norms = blocks.sq_norms().to_vec();
            blocks.fill_rows(&s, 0..m, &norms, &mut kss, &mut BlockScratch::default());
        }
        kss
    });

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
    let mut segments = Segments {
        spans: Vec::new(),
        cache: Vec::new(),
        cache_left: params.cache_bytes,
        budget: params.cache_bytes,
        single: hessian_free,
        kernel_seconds: 0.0,
    };
    let (mut sample_rows, mut sample_seconds) = (0, 0.0);
    // The share of rows whose loss term is squared at the start (all when not known).
    let mut squared_share = 1.0;
    // The subsample's start pays where passes over the rows are the cost: in the Hessian-free
    // solve, and in the Newton system's where a pass (n m kernel values) outweighs the
    // factorisation (m^3 / 3) several times (`SAMPLE_STEP`).
    // Below `hessian_free_basis` the Newton system is the safe choice, but where the rows
    // outnumber the basis enough for a subsample's start, the subsample's solve is run
    // Hessian-free as a probe: if it needed no more products than forming the system costs
    // (and never formed it), the full solve goes Hessian-free too (`PROBE_ROWS_PER_SV`).
    let probe = params.method == PolishMethod::Auto && !hessian_free && n >= PROBE_ROWS_PER_SV * m;
    if (hessian_free || probe || n >= m * m)
        && m > 0
        && params.sample_start
        && n / SAMPLE_STEP >= SAMPLE_ROWS_PER_SV * m
    {
        let started = Instant::now();
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
            sample_rows = sample.n_rows;
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
            basis.kss = Some(kss);
            let start = polish_on(
                model,
                start_intercept,
                &mut InMemory(sample.rows()?),
                sample_targets,
                sample_weights.as_deref(),
                &sample_params,
                &mut *monitor,
                basis,
            )?;
            kss = basis
                .kss
                .take()
                .expect("the subsample's solve gives K_SS back");
            for (k, o) in outputs.iter_mut().enumerate() {
                for j in 0..m {
                    o.beta[j] = start.coef[j * n_out + k];
                }
                o.b = start.intercept[k];
            }
            squared_share = (start.squared_rows as f64 / sample.n_rows as f64).min(1.0);
            if probe && start.system_from == 0 && 4 * start.cg_products <= m * n_out {
                hessian_free = true;
                segments.single = true;
            }
        }
        sample_seconds = started.elapsed().as_secs_f64();
    }
    let progress = Progress {
        epochs: params.max_iter,
        n_sv: m,
        polish: true,
        rows: n,
        ..Progress::default()
    };
    let mut passes = Passes {
        blocks: &blocks,
        source,
        segments,
        count: 0,
        monitor,
        progress,
    };

    let objective_of = |k: usize, o: &Output| {
        let term = |i, f| targets.term(k, i, f);
        objective(&kss, &o.beta, &o.f, c, &term, &weight)
    };

    // f = K beta + b at the warm start; the first pass also lays out the segments. The
    // Hessian-free solve gathers its first direction's rows in the same pass, its cache
    // leaving room for the squared rows' copies (their share: the subsample's, all rows
    // when unknown).
    let (mut gram_seconds, mut solve_seconds) = (0.0, 0.0);
    let mut pending: Option<Gathered> = None;
    // The squared rows' copies in halves until the iteration stalls (`RowCopies`).
    let mut half_rows = true;
    let mut last_decrease = vec![f64::INFINITY; n_out];
    // The Hessian products read K_SS in f32, as they read the rows: half the bytes of every
    // product's pass over it.
    let kss_f32: Vec<f32> = if hessian_free {
        kss.iter().map(|&v| v as f32).collect()
    } else {
        Vec::new()
    };
    if hessian_free {
        let all: Vec<usize> = (0..n_out).collect();
        let points: Vec<(Vec<f64>, f64)> = outputs.iter().map(|o| (o.beta.clone(), o.b)).collect();
        passes.segments.cache_left = first_pass_room(params.cache_bytes, n, m, squared_share);
        let rows = segment_rows(m, true);
        let reserve = (squared_share * rows as f64).ceil() as usize;
        let expected = reserve * n.div_ceil(rows);
        let first_limit = copy_share(expected, m, 2, params.cache_bytes).limit(reserve);
        let t_gram = Instant::now();
        let (gathered, values) = gather_pass(
            &mut passes,
            &Gather {
                outputs: &outputs,
                live: &all,
                trial: Some(&points),
                half: true,
                squared: &|_| reserve,
                copy_limit: &|_| first_limit,
                term: &|k, i, f| targets.term(k, i, f),
                weight: &weight,
            },
        )?;
        gram_seconds += t_gram.elapsed().as_secs_f64();
        // The start's best multiple where it gains enough to pay for gathering the rows
        // again at it (a pass).
        let mut rescaled = false;
        for ((k, o), f) in outputs.iter_mut().enumerate().zip(values) {
            o.f = f;
            let term = |i: usize, f: f64| targets.term(k, i, f);
            rescaled |= scale_start(&kss, o, c, &term, &weight, SCALED_START_GAIN);
            o.objective = objective_of(k, o);
        }
        pending = (!rescaled).then_some(gathered);
    } else {
        let starts: Vec<&[f64]> = outputs.iter().map(|o| &o.beta[..]).collect();
        let values = matvec_pass(&mut passes, &starts)?;
        for (k, o) in outputs.iter_mut().enumerate() {
            let b = o.b;
            o.f.iter_mut().zip(&values[k]).for_each(|(f, v)| *f = v + b);
            let term = |i: usize, f: f64| targets.term(k, i, f);
            scale_start(&kss, o, c, &term, &weight, 0.0);
            o.objective = objective_of(k, o);
        }
    }
    let objective_start: Vec<f64> = outputs.iter().map(|o| o.objective).collect();
    let mut iterations = 0;
    let mut active_changes = 0u64;
    let ridge = preconditioner_ridge(&kss, m);
    let mut first_gradient = vec![0.0; n_out];
    let mut cg_products = 0usize;
    let mut system_from = 0;
    let (mut squared_rows, mut recomputed_rows) = (0usize, 0usize);
    let mut kept_bytes = 0usize;
    // Moves output k by t along its direction (delta: the change of f over the full step) and
    // applies the stopping rules; `predict`: the Hessian-free solve's (the Newton system's
    // ends at the exact minimiser, which its last iteration reaches cheaply).
    let advance = |k: usize, o: &mut Output, t: f64, predict: bool, may_stop: bool| {
        let (beta_before, b_before, f_before) = (o.beta.clone(), o.b, o.f.clone());
        for (bj, dj) in o.beta.iter_mut().zip(&o.d) {
            *bj += t * dj;
        }
        o.b += t * o.db;
        let Output { f, delta, .. } = o;
        f.iter_mut()
            .zip(delta.iter())
            .for_each(|(fi, di)| *fi += t * di);
        let before = o.objective;
        o.objective = objective_of(k, o);
        if !o.objective.is_finite() {
            // Beyond what f64 holds (C near f64::MAX): the last finite point is the answer.
            (o.beta, o.b, o.f, o.objective) = (beta_before, b_before, f_before, before);
            o.done = true;
        } else {
            let decrease = before - o.objective;
            if may_stop
                && stops_after(
                    decrease,
                    o.decrease_before,
                    predict && o.full_step,
                    params.tol * o.objective.abs(),
                )
            {
                o.done = true;
            }
            o.decrease_before = decrease;
        }
    };
    // The objective at step t along output k's direction.
    let objective_along = |k: usize, o: &Output, t: f64| {
        let beta: Vec<f64> = o.beta.iter().zip(&o.d).map(|(b, d)| b + t * d).collect();
        let f: Vec<f64> = o.f.iter().zip(&o.delta).map(|(f, d)| f + t * d).collect();
        let term = |i, v| targets.term(k, i, v);
        objective(&kss, &beta, &f, c, &term, &weight)
    };
    while iterations < params.max_iter && outputs.iter().any(|o| !o.done) {
        if hessian_free
            && params.method == PolishMethod::Auto
            && (iterations >= FORM_AFTER_ITERATIONS || 4 * cg_products > m * n_out)
        {
            // From here on the Newton path: its first Gram pass counts every row's term at
            // the current point (M starts empty), and no earlier step counts as its full one.
            hessian_free = false;
            system_from = iterations + 1;
            pending = None;
            outputs.iter_mut().for_each(|o| o.full_step = false);
        }
        let live: Vec<usize> = if hessian_free {
            let live: Vec<usize> = (0..n_out).filter(|&k| !outputs[k].done).collect();
            iterations += 1;
            // A pass at the current point (no points) or at trial points; the cache takes what
            // the squared rows' copies leave of the budget, each copy sized for its segment's
            // squared rows (counted at the current f). The passes are lent per call: the
            // Hessian products between the passes read the source too.
            let mut gather = |passes: &mut Passes<'_>,
                              outputs: &[Output],
                              live: &[usize],
                              points: Option<&[(Vec<f64>, f64)]>| {
                let t_gram = Instant::now();
                let squared = squared_per_segment(&passes.segments.spans, outputs, live, &targets);
                let copy_bytes = if half_rows { 2 } else { 4 };
                let share = copy_share(squared.iter().sum(), m, copy_bytes, params.cache_bytes);
                let limits: Vec<usize> = squared.iter().map(|&q| share.limit(q)).collect();
                let planned: Vec<usize> = squared
                    .iter()
                    .zip(&limits)
                    .map(|(&q, &l)| q.min(l))
                    .collect();
                passes.segments.plan_budget(&planned, m, copy_bytes);
                let result = gather_pass(
                    passes,
                    &Gather {
                        outputs,
                        live,
                        trial: points,
                        half: half_rows,
                        squared: &|s| squared.get(s).copied().unwrap_or(0),
                        copy_limit: &|s| limits.get(s).copied().unwrap_or(0),
                        term: &|k, i, f| targets.term(k, i, f),
                        weight: &weight,
                    },
                );
                gram_seconds += t_gram.elapsed().as_secs_f64();
                result
            };
            let gathered = match pending.take() {
                Some(gathered) => gathered,
                None => gather(&mut passes, &outputs, &live, None)?.0,
            };
            squared_rows = squared_rows.max(gathered.n_rows);
            recomputed_rows = recomputed_rows.max(gathered.n_recomputed);
            kept_bytes = kept_bytes.max(passes.segments.held_bytes(m) + gathered.copied_bytes());
            let t_solve = Instant::now();
            // One preconditioner for all outputs; K_SS's factor once, the scale's factor again
            // when the squared rows' weight moved by more than `RESCALE_FACTOR` (a follows it).
            let weight_q: f64 = live
                .iter()
                .map(|&k| gathered.weight[gathered.place(k)])
                .sum::<f64>()
                / live.len() as f64;
            let a = 2.0 * c * weight_q / m as f64;
            let failed = || {
                SvmError::invalid_input(
                    "the polish's preconditioner could not be factorised: its entries are not finite (C \
                     too large for these rows, or non-finite kernel values)",
                )
            };
            // Ctrl-C between the factorisations' blocks: tens of seconds at m = 10,000.
            let mut check = || (passes.monitor)(&passes.progress);
            if basis.preconditioner.is_none() {
                let built = Preconditioner::new(&kss, m, ridge, &mut check)?;
                basis.preconditioner = Some(built.ok_or_else(failed)?);
            }
            let pre = basis.preconditioner.as_mut().expect("built above");
            let a0 = pre.scale();
            let scale_holds = a > a0 / RESCALE_FACTOR && a < RESCALE_FACTOR * a0;
            if !scale_holds && !pre.rescale(a, &mut check)? {
                return Err(failed());
            }
            let pre = &*pre;
            for &k in &live {
                let li = gathered.place(k);
                let o = &mut outputs[k];
                // g = (K_SS beta + 2C sum w hs k, 2C sum w hs); solve H x = -g.
                let mut g = vec![0.0; m + 1];
                for j in 0..m {
                    g[j] = simd::dot(&kss[j * m..(j + 1) * m], &o.beta)
                        + 2.0 * c * gathered.gradient[li][j];
                }
                g[m] = 2.0 * c * gathered.gradient[li][m];
                let norm = simd::dot(&g, &g).sqrt();
                if first_gradient[k] == 0.0 {
                    first_gradient[k] = norm;
                }
                let rel_tol = (norm / first_gradient[k].max(f64::MIN_POSITIVE))
                    .sqrt()
                    .clamp(
                        CG_TOL_FLOOR,
                        if sample_rows > 0 {
                            CG_TOL_NEAR
                        } else {
                            CG_TOL_EARLY
                        },
                    );
                let mut rhs: Vec<f64> = g.iter().map(|v| -v).collect();
                if gathered.weight[li].abs() <= NO_CURVATURE {
                    // No squared row: the objective is linear in b (no curvature, nothing
                    // couples it to beta), so b stays, as in the Newton system's solve; left in,
                    // the intercept's part of the solve grows without bound (a9a at B = 1,000,
                    // after a first step that left every row beyond its margin or on a
                    // tangent: a direction of infinite length).
                    rhs[m] = 0.0;
                }
                let rows = gathered.rows_of(li, m);
                let recomputed = &gathered.recomputed[li];
                let half = matches!(gathered.copies, RowCopies::Half(_));
                let mut hv = |v: &[f64], out: &mut [f64]| {
                    // Ctrl-C before each product (up to `MAX_CG_PRODUCTS` of them, a tenth of
                    // a second each over a gigabyte of copies) and between the waves of one
                    // that computes its rows again.
                    (passes.monitor)(&passes.progress)?;
                    hessian_product(&kss_f32, ridge, c, &rows, m, v, out);
                    if recomputed.is_empty() {
                        return Ok(());
                    }
                    recomputed_product(&mut passes, recomputed, half, c, v, out)
                };
                let (x, products) = conjugate_gradient::solve(
                    &mut hv,
                    pre,
                    2.0 * c * gathered.weight[li],
                    &rhs,
                    rel_tol,
                    MAX_CG_PRODUCTS,
                )?;
                cg_products += products;
                o.d.copy_from_slice(&x[..m]);
                o.db = x[m];
                // The objective is convex, so no step t <= 1 along d lowers it by more than
                // -g.d: below the tolerance, the line search's pass over the rows would only
                // confirm that the point is the answer.
                let most = -simd::dot(&g, &x);
                if most.is_nan() || most <= params.tol * o.objective.abs() {
                    o.done = true;
                }
            }
            solve_seconds += t_solve.elapsed().as_secs_f64();
            // The squared rows' copies go before the next pass makes its own.
            drop(gathered);
            let live: Vec<usize> = live.into_iter().filter(|&k| !outputs[k].done).collect();
            if !live.is_empty() {
                // The full step's point, its values, gradient and squared rows in one pass.
                let points: Vec<(Vec<f64>, f64)> = live
                    .iter()
                    .map(|&k| {
                        let o = &outputs[k];
                        let beta = o.beta.iter().zip(&o.d).map(|(b, d)| b + d).collect();
                        (beta, o.b + o.db)
                    })
                    .collect();
                let (at_full_step, values) = gather(&mut passes, &outputs, &live, Some(&points))?;
                let mut short_steps: Vec<ShortStep> = Vec::new();
                for (&k, full) in live.iter().zip(values) {
                    let o = &mut outputs[k];
                    let Output { f, delta, .. } = &mut *o;
                    delta
                        .iter_mut()
                        .zip(full.iter().zip(f.iter()))
                        .for_each(|(d, (v, f))| *d = v - f);
                    let best = line_search(
                        &kss,
                        o,
                        c,
                        &|i, f| targets.term(k, i, f),
                        &|i| targets.boundaries(k, i),
                        &weight,
                        false,
                    );
                    // The full step, whose rows the pass gathered, unless the exact step lowers
                    // the objective clearly more.
                    let t = if best == 1.0 {
                        1.0
                    } else {
                        let at_best = objective_along(k, o, best);
                        let at_full = objective_along(k, o, 1.0);
                        let share = FULL_STEP_SHARE * (o.objective - at_best);
                        if o.objective - at_full >= share {
                            1.0
                        } else {
                            best
                        }
                    };
                    o.full_step = t == 1.0;
                    let f_before = (!o.full_step).then(|| o.f.clone());
                    let before = o.objective;
                    advance(k, o, t, true, true);
                    let decrease = before - o.objective;
                    if decrease > STALL_SHARE * last_decrease[k] {
                        half_rows = false;
                    }
                    last_decrease[k] = decrease;
                    if let Some(f_before) = f_before.filter(|_| !o.done) {
                        short_steps.push(ShortStep {
                            output: k,
                            t,
                            f_before,
                        });
                    }
                }
                // The next direction's rows at the points taken: the full steps' as gathered,
                // the short steps' from them and the rows that changed piece.
                pending = Some(if short_steps.is_empty() {
                    at_full_step
                } else {
                    // The full steps' squared rows were copied, whatever stays of them.
                    squared_rows = squared_rows.max(at_full_step.n_rows);
                    recomputed_rows = recomputed_rows.max(at_full_step.n_recomputed);
                    let t_gram = Instant::now();
                    let at_steps = step_pass(
                        &mut passes,
                        at_full_step,
                        &outputs,
                        &short_steps,
                        &|k, i, f| targets.term(k, i, f),
                        &weight,
                    )?;
                    gram_seconds += t_gram.elapsed().as_secs_f64();
                    at_steps
                });
            }
            report(&mut passes, start, iterations, &outputs, active_changes)?;
            continue;
        } else {
            // Rows whose active term differs from what M counts.
            let changed: Vec<Vec<Change>> = outputs
                .iter()
                .enumerate()
                .map(|(k, o)| {
                    if o.done {
                        return Vec::new();
                    }
                    (0..n)
                        .filter_map(|i| {
                            let now = targets.term(k, i, o.f[i]);
                            (now != o.counted[i]).then_some(Change {
                                row: i,
                                counted: o.counted[i],
                                now,
                            })
                        })
                        .collect()
                })
                .collect();
            for (k, o) in outputs.iter_mut().enumerate() {
                if o.done {
                    continue;
                }
                // A full step that changed nothing reached the minimiser of the quadratic.
                if changed[k].is_empty() && o.full_step {
                    o.done = true;
                    continue;
                }
                active_changes += changed[k].len() as u64;
            }
            let t_gram = Instant::now();
            gram_pass(&mut passes, &mut outputs, &changed, &weight)?;
            gram_seconds += t_gram.elapsed().as_secs_f64();
            let live: Vec<usize> = (0..n_out).filter(|&k| !outputs[k].done).collect();
            if live.is_empty() {
                break;
            }
            iterations += 1;
            let t_solve = Instant::now();
            for &k in &live {
                let mut check = || (passes.monitor)(&passes.progress);
                newton_direction(&kss, &mut outputs[k], c, m, &mut check)?;
            }
            solve_seconds += t_solve.elapsed().as_secs_f64();
            live
        };
        if live.is_empty() {
            break;
        }
        let dirs: Vec<&[f64]> = live.iter().map(|&k| &outputs[k].d[..]).collect();
        let values = matvec_pass(&mut passes, &dirs)?;
        for (&k, v) in live.iter().zip(values) {
            let o = &mut outputs[k];
            let db = o.db;
            o.delta.iter_mut().zip(&v).for_each(|(d, x)| *d = x + db);
            let t = line_search(
                &kss,
                o,
                c,
                &|i, f| targets.term(k, i, f),
                &|i| targets.boundaries(k, i),
                &weight,
                true,
            );
            if t == 0.0 && o.ridge_scale < RIDGE_RAISED {
                // No descent along the direction: the system's gradient (M beta, M accurate to
                // about 1e-12) is off along K_SS's near-null directions, which a ridge of
                // `RIDGE` lets the step follow. Solved again with a larger ridge, kept from
                // then on; not counted as the stop it would be at the optimum.
                o.ridge_scale = RIDGE_RAISED;
                o.full_step = false;
                continue;
            }
            // A short step's small decrease says the direction was poor, not that the point
            // is the optimum (cod-rna, B = 500, on a basis where rows given twice are one SV: a
            // step of a small share stopped the solve 0.34% above the optimum); the next
            // iteration's direction, from the new point, says more. No step at all (under the
            // raised ridge) ends it.
            let may_stop = t >= SHORT_STEP || t == 0.0;
            o.full_step = t == 1.0;
            advance(k, o, t, false, may_stop);
        }
        report(&mut passes, start, iterations, &outputs, active_changes)?;
    }
    let segments = &passes.segments;
    let converged = outputs.iter().all(|o| o.done);
    basis.kss = Some(kss);
    let mut coef = vec![0.0; m * n_out];
    for (k, o) in outputs.iter().enumerate() {
        for j in 0..m {
            coef[j * n_out + k] = o.beta[j];
        }
    }
    Ok(PolishResult {
        coef,
        intercept: outputs.iter().map(|o| o.b).collect(),
        objective_start,
        objective: outputs.iter().map(|o| o.objective).collect(),
        iterations,
        converged,
        cached_rows: segments
            .cache
            .iter()
            .zip(&segments.spans)
            .filter(|(c, _)| c.is_some())
            .map(|(_, s)| s.len())
            .sum(),
        passes: passes.count,
        active_changes,
        cg_products,
        system_from,
        squared_rows,
        recomputed_rows,
        kept_bytes,
        sample_rows,
        sample_seconds,
        kernel_seconds: segments.kernel_seconds,
        gram_seconds,
        solve_seconds,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Reports an iteration's end to the monitor (progress, and Ctrl-C).
fn report(
    passes: &mut Passes<'_>,
    start: Instant,
    iterations: usize,
    outputs: &[Output],
    active_changes: u64,
) -> Result<()> {
    let Passes {
        monitor, progress, ..
    } = passes;
    progress.epoch = iterations;
    progress.epoch_done = true;
    progress.objective = Some(outputs.iter().map(|o| o.objective).sum());
    progress.iteration = active_changes;
    progress.seconds = start.elapsed().as_secs_f64();
    monitor(progress)?;
    progress.epoch_done = false;
    Ok(())
}
