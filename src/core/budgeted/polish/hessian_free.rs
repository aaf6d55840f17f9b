//! The Hessian-free solve (`PolishMethod::HessianFree`, and `Auto` from `hessian_free_basis`
//! support vectors on): its first pass, and each iteration's direction by conjugate gradients
//! on the squared rows' products and its step from one pass at the full step's point.

use std::time::Instant;

use crate::core::budgeted::conjugate_gradient::{self, Preconditioner};
use crate::core::common::error::{Result, SvmError};
use crate::core::simd;

use super::copies::RowCopies;
use super::gather::{gather_pass, squared_per_segment, step_pass, Gather, Gathered, ShortStep};
use super::hessian::{hessian_product, recomputed_product};
use super::memory::{copy_share, first_pass_room};
use super::newton::NO_CURVATURE;
use super::objective::scale_start;
use super::output::Output;
use super::segments::segment_rows;
use super::state::{Fixed, Solve};
use super::PolishMethod;

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

impl Solve<'_> {
    /// Whether `PolishMethod::Auto`'s Hessian-free solve forms the Newton system from here on
    /// (`FORM_AFTER_ITERATIONS`).
    pub(super) fn forms_system(&self) -> bool {
        let Fixed {
            params, m, n_out, ..
        } = self.fixed;
        self.hessian_free
            && params.method == PolishMethod::Auto
            && (self.result.iterations >= FORM_AFTER_ITERATIONS
                || 4 * self.result.cg_products > m * n_out)
    }

    /// From here on the Newton path: its first Gram pass counts every row's term at the
    /// current point (M starts empty), and no earlier step counts as its full one.
    pub(super) fn form_system(&mut self) {
        self.hessian_free = false;
        self.result.system_from = self.result.iterations + 1;
        self.pending = None;
        self.outputs.iter_mut().for_each(|o| o.full_step = false);
    }

    /// The Hessian-free solve's first pass: f = K beta + b at the warm start, the segments laid
    /// out, and the first direction's rows gathered at once, the cache leaving room for the
    /// squared rows' copies (`squared_share` of the rows: the subsample's, all rows when
    /// unknown); then the start's best multiple where it gains enough to pay for gathering the
    /// rows again at it (a pass).
    pub(super) fn hessian_free_start(&mut self, squared_share: f64) -> Result<()> {
        let fixed = &self.fixed;
        let Fixed {
            n,
            m,
            n_out,
            params,
            ..
        } = *fixed;
        let all: Vec<usize> = (0..n_out).collect();
        let points: Vec<(Vec<f64>, f64)> =
            self.outputs.iter().map(|o| (o.beta.clone(), o.b)).collect();
        self.passes.segments.cache_left = first_pass_room(params.cache_bytes, n, m, squared_share);
        let rows = segment_rows(m, true);
        let reserve = (squared_share * rows as f64).ceil() as usize;
        let expected = reserve * n.div_ceil(rows);
        let first_limit = copy_share(expected, m, 2, params.cache_bytes).limit(reserve);
        let t_gram = Instant::now();
        let (gathered, values) = gather_pass(
            &mut self.passes,
            &Gather {
                outputs: &self.outputs,
                live: &all,
                trial: Some(&points),
                half: true,
                squared: &|_| reserve,
                copy_limit: &|_| first_limit,
                term: &|k, i, f| fixed.targets.term(k, i, f),
                weight: &|i| fixed.weight(i),
            },
        )?;
        self.result.gram_seconds += t_gram.elapsed().as_secs_f64();
        let mut rescaled = false;
        for ((k, o), f) in self.outputs.iter_mut().enumerate().zip(values) {
            o.f = f;
            let term = |i: usize, f: f64| fixed.targets.term(k, i, f);
            rescaled |= scale_start(
                &fixed.kss,
                o,
                fixed.c,
                &term,
                &|i| fixed.weight(i),
                SCALED_START_GAIN,
            );
            o.objective = fixed.objective_of(k, o);
        }
        self.pending = (!rescaled).then_some(gathered);
        Ok(())
    }

    /// One Hessian-free iteration: the rows at the current point (gathered by the last pass
    /// where it could), each live output's direction by conjugate gradients, then the steps.
    pub(super) fn hessian_free_iteration(&mut self) -> Result<()> {
        let m = self.fixed.m;
        let live: Vec<usize> = (0..self.fixed.n_out)
            .filter(|&k| !self.outputs[k].done)
            .collect();
        self.result.iterations += 1;
        let gathered = match self.pending.take() {
            Some(gathered) => gathered,
            None => self.gather(&live, None)?.0,
        };
        self.result.squared_rows = self.result.squared_rows.max(gathered.n_rows);
        self.result.recomputed_rows = self.result.recomputed_rows.max(gathered.n_recomputed);
        self.result.kept_bytes = self
            .result
            .kept_bytes
            .max(self.passes.segments.held_bytes(m) + gathered.copied_bytes());
        let t_solve = Instant::now();
        self.directions(&gathered, &live)?;
        self.result.solve_seconds += t_solve.elapsed().as_secs_f64();
        // The squared rows' copies go before the next pass makes its own.
        drop(gathered);
        let live: Vec<usize> = live
            .into_iter()
            .filter(|&k| !self.outputs[k].done)
            .collect();
        if !live.is_empty() {
            self.steps(&live)?;
        }
        self.report()
    }

    /// A pass at the current point (no points) or at trial points; the cache takes what the
    /// squared rows' copies leave of the budget, each copy sized for its segment's squared rows
    /// (counted at the current f).
    fn gather(
        &mut self,
        live: &[usize],
        points: Option<&[(Vec<f64>, f64)]>,
    ) -> Result<(Gathered, Vec<Vec<f64>>)> {
        let fixed = &self.fixed;
        let (m, params, half_rows) = (fixed.m, fixed.params, self.half_rows);
        let t_gram = Instant::now();
        let squared = squared_per_segment(
            &self.passes.segments.spans,
            &self.outputs,
            live,
            &fixed.targets,
        );
        let copy_bytes = if half_rows { 2 } else { 4 };
        let share = copy_share(squared.iter().sum(), m, copy_bytes, params.cache_bytes);
        let limits: Vec<usize> = squared.iter().map(|&q| share.limit(q)).collect();
        let planned: Vec<usize> = squared
            .iter()
            .zip(&limits)
            .map(|(&q, &l)| q.min(l))
            .collect();
        self.passes.segments.plan_budget(&planned, m, copy_bytes);
        let result = gather_pass(
            &mut self.passes,
            &Gather {
                outputs: &self.outputs,
                live,
                trial: points,
                half: half_rows,
                squared: &|s| squared.get(s).copied().unwrap_or(0),
                copy_limit: &|s| limits.get(s).copied().unwrap_or(0),
                term: &|k, i, f| fixed.targets.term(k, i, f),
                weight: &|i| fixed.weight(i),
            },
        );
        self.result.gram_seconds += t_gram.elapsed().as_secs_f64();
        result
    }

    /// Each live output's direction from the rows `gathered` at the current point: conjugate
    /// gradients on the Hessian's products, preconditioned from K_SS; an output whose direction
    /// cannot lower the objective by the tolerance is done.
    fn directions(&mut self, gathered: &Gathered, live: &[usize]) -> Result<()> {
        let Solve {
            fixed,
            passes,
            basis,
            outputs,
            first_gradient,
            decrement_ratio,
            result,
            ..
        } = self;
        let Fixed {
            ref kss,
            ref kss_f32,
            ridge,
            params,
            c,
            m,
            ..
        } = *fixed;
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
            let built = Preconditioner::new(kss, m, ridge, &mut check)?;
            basis.preconditioner = Some(built.ok_or_else(failed)?);
        }
        let pre = basis.preconditioner.as_mut().expect("built above");
        let a0 = pre.scale();
        let scale_holds = a > a0 / RESCALE_FACTOR && a < RESCALE_FACTOR * a0;
        if !scale_holds && !pre.rescale(a, &mut check)? {
            return Err(failed());
        }
        let pre = &*pre;
        for &k in live {
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
                    if result.sample_rows > 0 {
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
            // The preconditioner's estimate of the Newton decrement, rhs^T P^-1 rhs: one
            // application of P^-1 where the conjugate gradients take tens of products. Once
            // this solve's directions have shown how far their -g.x can lie above it
            // (`decrement_ratio`), an output whose estimate so scaled is within the tolerance
            // is done without them: the point is the answer by the test below, and after a
            // subsample's start the products that only confirmed it were a large share of
            // the solve (docs/multiclass_notes.md).
            let curvature_b = 2.0 * c * gathered.weight[li];
            let mut z = vec![0.0; m + 1];
            pre.apply(&rhs, &mut z, curvature_b);
            let estimate = simd::dot(&rhs, &z);
            let ratio = decrement_ratio[k];
            if ratio > 0.0 && estimate * ratio <= params.tol * o.objective.abs() {
                o.done = true;
                continue;
            }
            let rows = gathered.rows_of(li, m);
            let recomputed = &gathered.recomputed[li];
            let half = matches!(gathered.copies, RowCopies::Half(_));
            let mut hv = |v: &[f64], out: &mut [f64]| {
                // Ctrl-C before each product (up to `MAX_CG_PRODUCTS` of them, a tenth of
                // a second each over a gigabyte of copies) and between the waves of one
                // that computes its rows again.
                (passes.monitor)(&passes.progress)?;
                hessian_product(kss_f32, ridge, c, &rows, m, v, out);
                if recomputed.is_empty() {
                    return Ok(());
                }
                recomputed_product(passes, recomputed, half, c, v, out)
            };
            let (x, products) = conjugate_gradient::solve(
                &mut hv,
                pre,
                curvature_b,
                &rhs,
                rel_tol,
                MAX_CG_PRODUCTS,
            )?;
            result.cg_products += products;
            o.d.copy_from_slice(&x[..m]);
            o.db = x[m];
            // The objective is convex, so no step t <= 1 along d lowers it by more than
            // -g.d: below the tolerance, the line search's pass over the rows would only
            // confirm that the point is the answer.
            let most = -simd::dot(&g, &x);
            if most.is_nan() || most <= params.tol * o.objective.abs() {
                o.done = true;
            }
            if estimate > 0.0 && most.is_finite() {
                decrement_ratio[k] = decrement_ratio[k].max(most / estimate);
            }
        }
        Ok(())
    }

    /// The live outputs' steps: the full step's point, its values, gradient and squared rows
    /// in one pass; each output takes the full step unless the exact line search's lowers the
    /// objective clearly more (`FULL_STEP_SHARE`), and the next direction's rows are the full
    /// steps' as gathered, the short steps' from them and the rows that changed piece
    /// (`step_pass`).
    fn steps(&mut self, live: &[usize]) -> Result<()> {
        let points: Vec<(Vec<f64>, f64)> = live
            .iter()
            .map(|&k| {
                let o = &self.outputs[k];
                let beta = o.beta.iter().zip(&o.d).map(|(b, d)| b + d).collect();
                (beta, o.b + o.db)
            })
            .collect();
        let (at_full_step, values) = self.gather(live, Some(&points))?;
        let fixed = &self.fixed;
        let mut short_steps: Vec<ShortStep> = Vec::new();
        for (&k, full) in live.iter().zip(values) {
            let o = &mut self.outputs[k];
            let Output { f, delta, .. } = &mut *o;
            delta
                .iter_mut()
                .zip(full.iter().zip(f.iter()))
                .for_each(|(d, (v, f))| *d = v - f);
            let best = fixed.line_search_of(k, o, false);
            // The full step, whose rows the pass gathered, unless the exact step lowers
            // the objective clearly more.
            let t = if best == 1.0 {
                1.0
            } else {
                let at_best = fixed.objective_along(k, o, best);
                let at_full = fixed.objective_along(k, o, 1.0);
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
            fixed.advance(k, o, t, true, true);
            let decrease = before - o.objective;
            if decrease > STALL_SHARE * self.last_decrease[k] {
                self.half_rows = false;
            }
            self.last_decrease[k] = decrease;
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
        self.pending = Some(if short_steps.is_empty() {
            at_full_step
        } else {
            // The full steps' squared rows were copied, whatever stays of them.
            self.result.squared_rows = self.result.squared_rows.max(at_full_step.n_rows);
            self.result.recomputed_rows =
                self.result.recomputed_rows.max(at_full_step.n_recomputed);
            let t_gram = Instant::now();
            let at_steps = step_pass(
                &mut self.passes,
                at_full_step,
                &self.outputs,
                &short_steps,
                &|k, i, f| fixed.targets.term(k, i, f),
                &|i| fixed.weight(i),
            )?;
            self.result.gram_seconds += t_gram.elapsed().as_secs_f64();
            at_steps
        });
        Ok(())
    }
}
