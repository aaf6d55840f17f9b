//! A solve's state between its phases (`solve`): what the iterations read and never change
//! (`Fixed`: K_SS, the targets, the weights, the settings), what they change (the outputs, the
//! passes over the rows, the Hessian-free solve's carried rows) and what the result reports.

use std::time::Instant;

use crate::core::budgeted::conjugate_gradient::Preconditioner;
use crate::core::budgeted::problem::Targets;
use crate::core::common::error::Result;

use super::gather::Gathered;
use super::line_search::line_search;
use super::objective::objective;
use super::output::{stops_after, Output};
use super::segments::Passes;
use super::{PolishParams, PolishResult};

/// What depends on the support vectors only, built once for a solve on a subsample and the
/// solve that starts from it: K_SS (lent to the subsample's solve, which gives it back: one
/// copy, 800 MB at m = 10,000) and the Hessian-free preconditioner's factors.
#[derive(Default)]
pub(super) struct OfTheBasis {
    pub(super) kss: Option<Vec<f64>>,
    pub(super) preconditioner: Option<Preconditioner>,
}

/// What a solve's iterations read and never change: K_SS (and in f32 for the Hessian
/// products, empty for the Newton system), the ridge of its factor and of the products, the
/// rows' targets and weights, the settings with their C, and the sizes (n rows, m support
/// vectors, n_out outputs).
pub(super) struct Fixed<'a> {
    pub(super) kss: Vec<f64>,
    pub(super) kss_f32: Vec<f32>,
    pub(super) ridge: f64,
    pub(super) targets: Targets<'a>,
    pub(super) weights: Option<&'a [f64]>,
    pub(super) params: &'a PolishParams,
    pub(super) c: f64,
    pub(super) n: usize,
    pub(super) m: usize,
    pub(super) n_out: usize,
}

impl Fixed<'_> {
    /// Row i's weight (1 without weights).
    pub(super) fn weight(&self, i: usize) -> f64 {
        self.weights.map_or(1.0, |w| w[i])
    }

    /// Output k's objective at its point.
    pub(super) fn objective_of(&self, k: usize, o: &Output) -> f64 {
        let term = |i, f| self.targets.term(k, i, f);
        objective(&self.kss, &o.beta, &o.f, self.c, &term, &|i| self.weight(i))
    }

    /// The step along output k's direction that minimises its objective (`line_search`;
    /// `exact_step`: the direction is a Newton system's exact step).
    pub(super) fn line_search_of(&self, k: usize, o: &Output, exact_step: bool) -> f64 {
        line_search(
            &self.kss,
            o,
            self.c,
            &|i, f| self.targets.term(k, i, f),
            &|i| self.targets.boundaries(k, i),
            &|i| self.weight(i),
            exact_step,
        )
    }

    /// The objective at step t along output k's direction.
    pub(super) fn objective_along(&self, k: usize, o: &Output, t: f64) -> f64 {
        let beta: Vec<f64> = o.beta.iter().zip(&o.d).map(|(b, d)| b + t * d).collect();
        let f: Vec<f64> = o.f.iter().zip(&o.delta).map(|(f, d)| f + t * d).collect();
        let term = |i, v| self.targets.term(k, i, v);
        objective(&self.kss, &beta, &f, self.c, &term, &|i| self.weight(i))
    }

    /// Moves output k by t along its direction (delta: the change of f over the full step) and
    /// applies the stopping rules; `predict`: the Hessian-free solve's (the Newton system's
    /// ends at the exact minimiser, which its last iteration reaches cheaply).
    pub(super) fn advance(&self, k: usize, o: &mut Output, t: f64, predict: bool, may_stop: bool) {
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
        o.objective = self.objective_of(k, o);
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
                    self.params.tol * o.objective.abs(),
                )
            {
                o.done = true;
            }
            o.decrease_before = decrease;
        }
    }
}

/// A solve in progress: what it reads (`fixed`), its passes over the rows, the basis's parts
/// it keeps for the caller, each output's state, and what the result reports.
pub(super) struct Solve<'a> {
    pub(super) fixed: Fixed<'a>,
    pub(super) passes: Passes<'a>,
    pub(super) basis: &'a mut OfTheBasis,
    pub(super) outputs: Vec<Output>,
    /// The directions come from conjugate gradients (else from the Newton system).
    pub(super) hessian_free: bool,
    /// The Hessian-free solve: the next direction's rows when a pass gathered them already,
    /// the squared rows' copies in halves until the iteration stalls (`RowCopies`), and per
    /// output the last step's decrease and the first gradient's norm.
    pub(super) pending: Option<Gathered>,
    pub(super) half_rows: bool,
    pub(super) last_decrease: Vec<f64>,
    pub(super) first_gradient: Vec<f64>,
    /// Per output, the largest -g.x of a direction over the preconditioner's estimate of it
    /// seen in this solve (0: none yet).
    pub(super) decrement_ratio: Vec<f64>,
    /// The result's counts and timings as they accrue; `finish` fills in the rest.
    pub(super) result: PolishResult,
    pub(super) start: Instant,
}

impl Solve<'_> {
    /// Reports an iteration's end to the monitor (progress, and Ctrl-C).
    pub(super) fn report(&mut self) -> Result<()> {
        let Passes {
            monitor, progress, ..
        } = &mut self.passes;
        progress.epoch = self.result.iterations;
        progress.epoch_done = true;
        progress.objective = Some(self.outputs.iter().map(|o| o.objective).sum());
        progress.iteration = self.result.active_changes;
        progress.seconds = self.start.elapsed().as_secs_f64();
        monitor(progress)?;
        progress.epoch_done = false;
        Ok(())
    }

    /// The result (`objective_start`: each output's objective after the first pass); K_SS
    /// goes back to the basis's parts.
    pub(super) fn finish(self, objective_start: Vec<f64>) -> PolishResult {
        let Solve {
            fixed,
            passes,
            basis,
            outputs,
            result,
            start,
            ..
        } = self;
        let (m, n_out) = (fixed.m, fixed.n_out);
        let converged = outputs.iter().all(|o| o.done);
        basis.kss = Some(fixed.kss);
        let mut coef = vec![0.0; m * n_out];
        for (k, o) in outputs.iter().enumerate() {
            for j in 0..m {
                coef[j * n_out + k] = o.beta[j];
            }
        }
        let segments = &passes.segments;
        PolishResult {
            coef,
            intercept: outputs.iter().map(|o| o.b).collect(),
            objective_start,
            objective: outputs.iter().map(|o| o.objective).collect(),
            converged,
            cached_rows: segments
                .cache
                .iter()
                .zip(&segments.spans)
                .filter(|(c, _)| c.is_some())
                .map(|(_, s)| s.len())
                .sum(),
            passes: passes.count,
            kernel_seconds: segments.kernel_seconds,
            seconds: start.elapsed().as_secs_f64(),
            ..result
        }
    }
}
