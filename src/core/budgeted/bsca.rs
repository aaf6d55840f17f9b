//! Budgeted stochastic coordinate ascent (BSCA; Qaadan, Schüler & Glasmachers, paper 002),
//! the dual counterpart of BSGD on the same budgeted model and the same budget maintenance.
//!
//! Binary dual: max_{0 <= alpha_i <= C_i} 1^T alpha - 1/2 alpha^T Q alpha, Q_ij = y_i y_j k(x_i, x_j),
//! C_i = C w_i with the row's weight w_i (sample times class weight; 1 unweighted),
//! w = sum_i alpha_i y_i phi(x_i). The budgeted model {(beta_j, x~_j)} approximates w. A step on
//! coordinate i (a fresh random permutation each epoch) uses the model's margin f~(x_i):
//!   delta = clip(alpha_i + (1 - y_i f~(x_i)) / Q_ii, 0, C_i) - alpha_i   (Q_ii = k(x_i, x_i) = 1)
//!   alpha_i += delta;  beta(x_i) += y_i delta   (paper 002 writes (delta, x_i): the label belongs there)
//! where beta(x_i) is x_i's coefficient if x_i is still an unmerged SV, else a new SV (x_i, y_i delta),
//! followed by budget maintenance when the model exceeds B. Merging pairs coefficients of the same
//! *sign*, not the same label: one label's coefficients take both signs here (a delta can be
//! negative), and merging by label would push m = b1/(b1 + b2) out of [0, 1] (the swings of the
//! authors' research code, DESIGN.md section 5). A fixed number of epochs; no stopping rule.
//!
//! Step size. Paper 002 takes the full step above in every epoch ([`DualStep::Full`]). With a
//! budget that drifts at large C: every merge replaces a1 phi(x1) + a2 phi(x2) by its (shorter)
//! projection alpha_z phi(z), the margins at the merged points drop, the next steps raise their
//! alphas again, and alpha and beta grow apart (on a9a at C = 32, B = 500: sum(alpha) +13,500 per
//! epoch, test accuracy swinging between 66% and 84%). [`DualStep::Decaying`] (the default) takes
//! 1/e of the step in epoch e once budget maintenance has happened, a stochastic-approximation
//! schedule: the first epoch is the paper's, later epochs refine with steps whose sum still
//! diverges while the merge noise they inject dies out. A run whose budget never binds (B >= n)
//! takes full steps and solves the exact dual as fast as `Full`. With `average`, the returned
//! model is the average over the last epoch's steps, which takes out what noise is left (a9a at
//! C = 32: last-epoch accuracy 85.3% instead of 84.0%). Measured in docs/bsca_paper002.md.
//!
//! Regression (epsilon-SVR without offset): the dual in beta_i = alpha_i - alpha_i* in
//! [-C_i, C_i], max y^T beta - epsilon |beta|_1 - 1/2 beta^T K beta; the exact coordinate step is
//! the soft-threshold of the unconstrained one, beta_i <- clip(S_eps(beta_i + y_i - f~(x_i)),
//! -C_i, C_i), and the SV's coefficient moves by the change of beta_i (both signs, as the
//! classification coefficients of one label already have).
//!
//! Multi-class: one-vs-rest, the K binary duals (alpha[k][i], labels +1 for class k) on one shared
//! budgeted model whose SVs carry K coefficients, as Crammer-Singer BSGD's do: the budget B bounds
//! the whole model, which is what prediction costs. A step on row i computes its kernel values
//! once, takes the coordinate step of every problem from the same model, and adds the K deltas
//! to x_i's coefficients (one new SV for all problems); budget maintenance merges by the summed
//! objective of all outputs (paper 001 eq. 18). Before, each problem had its own model of B SVs
//! (K B in all): at equal model size the shared pool is more accurate (docs/bsca_shared_budget.md)
//! and K times cheaper per step in kernel values.

use std::time::{Duration, Instant};

use crate::core::budget::maintenance::{Maintenance, MaintenanceStats};
use crate::core::budget::merge::MergeSearch;
use crate::core::budget::model::{BudgetModel, SupportVectors, SvLayout};
use crate::core::budgeted::bsgd::TrainStats;
use crate::core::budgeted::observer::{EpochObserver, EpochSnapshot};
use crate::core::budgeted::problem::{check_run, check_targets, Targets};
use crate::core::budgeted::step::{self, Budgeted};
use crate::core::common::checks::{check_classes, check_positive_finite, check_weights};
use crate::core::common::error::{Result, SvmError};
use crate::core::common::parallel;
use crate::core::common::progress::{Heartbeat, Monitor, Progress};
use crate::core::common::rng::Rng;
use crate::core::data::rows::{finite_sq_norms, Rows};

/// BSCA hyper-parameters as the user gave them.
#[derive(Debug, Clone, PartialEq)]
pub struct BscaParams {
    pub c: f64,
    pub gamma: f64,
    pub budget: usize,
    pub epochs: usize,
    pub maintenance: Maintenance,
    pub seed: u64,
    pub compare_with: Option<MergeSearch>,
    /// Visit the coordinates in a fresh random order every epoch; otherwise in the order given.
    pub shuffle: bool,
    pub step: DualStep,
    /// How the support vectors are stored (see [`SvLayout::choose`]).
    pub layout: SvLayout,
    /// Return the model averaged over the last epoch's steps (the second half of the data for
    /// one epoch) instead of the last one; not with removal, which discards SVs with their
    /// averages (as in BSGD).
    pub average: bool,
    /// While averaging, place merged points for the averaged coefficients (as BSGD's).
    pub average_placement: bool,
}

/// Size of the coordinate steps (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DualStep {
    /// The full truncated Newton step in every epoch (paper 002).
    Full,
    /// 1/e of it in epoch e, once the budget has been binding.
    Decaying,
}

impl DualStep {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "full" => Ok(DualStep::Full),
            "decaying" => Ok(DualStep::Decaying),
            other => Err(SvmError::invalid_parameter(
                "dual_step",
                format!("must be 'decaying' or 'full', got {other:?}"),
            )),
        }
    }

    fn factor(self, epoch: usize) -> f64 {
        match self {
            DualStep::Full => 1.0,
            DualStep::Decaying => 1.0 / epoch as f64,
        }
    }
}

impl Default for BscaParams {
    fn default() -> Self {
        BscaParams {
            c: 1.0,
            gamma: 1.0,
            budget: 100,
            epochs: 1,
            maintenance: Maintenance::Merge(MergeSearch::LookupWd),
            seed: 0,
            compare_with: None,
            shuffle: true,
            step: DualStep::Decaying,
            average: false,
            average_placement: false,
            layout: SvLayout::Dense,
        }
    }
}

/// Parameters that passed validation.
#[derive(Debug, Clone)]
pub struct ValidBscaParams(BscaParams);

impl BscaParams {
    pub fn check(&self, n_samples: usize) -> Result<ValidBscaParams> {
        check_run(self.gamma, n_samples, self.budget, self.epochs)?;
        check_positive_finite("C", self.c)?;
        Ok(ValidBscaParams(self.clone()))
    }
}

/// A BSCA run that goes on from another over other rows (a relay over a data set's parts, the
/// model handed from part to part: `budgetsvm.dask`): the model so far, whose support vectors
/// join the budget as points of no row of this run, and, on a later pass over rows seen before,
/// their dual variables from that pass (the model holds their contributions already) and how
/// many epochs came before (the decaying step's count). A run over every part in turn, each
/// with its rows' dual variables, is one run over all the rows, the order within each part's
/// own shuffle: w = sum_i alpha_i y_i phi(x_i) holds across the parts as within one.
#[derive(Debug, Clone, Copy)]
pub struct BscaStart<'a> {
    pub model: &'a BudgetModel,
    /// Per problem, one per row of this run; None: the rows are new (0).
    pub alpha: Option<&'a [Vec<f64>]>,
    pub epochs_done: usize,
}

/// What a BSCA run did (summed over the binary problems).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BscaStats {
    pub iterations: u64,
    /// Steps that changed a dual variable.
    pub updates: u64,
    pub insertions: u64,
    /// SVs dropped because their coefficient returned to zero (alpha_i back at 0 before the
    /// point was merged), so n_SV = insertions - maintenance events - dropped.
    pub dropped: u64,
    pub maintenance: MaintenanceStats,
    /// Training time, without the time spent in the epoch observer.
    pub seconds: f64,
    pub epochs: usize,
    /// Each problem's dual variables at the end, one per row (a relay's next pass over these
    /// rows starts from them: `BscaStart::alpha`).
    pub alpha: Vec<Vec<f64>>,
}

impl BscaStats {
    /// The counts every budgeted run reports.
    pub fn train_stats(&self) -> TrainStats {
        TrainStats {
            iterations: self.iterations,
            insertions: self.insertions,
            maintenance: self.maintenance.clone(),
            seconds: self.seconds,
            epochs: self.epochs,
        }
    }
}

/// The one-vs-rest dual problems (one for two classes) on one budgeted model: a support vector
/// carries one coefficient per problem, so the budget bounds the whole model, and a step
/// computes the kernel values of its row once for all problems.
struct SharedProblems {
    /// labels[k][i]: +1 if row i is of problem k's positive class, else -1.
    labels: Vec<Vec<f64>>,
    /// Regression: the targets and epsilon (one problem; `labels` is then empty).
    values: Option<(Vec<f64>, f64)>,
    /// alpha[k][i]: the dual variable of row i in problem k.
    alpha: Vec<Vec<f64>>,
    budgeted: Budgeted,
    /// The step (counted over all epochs) at which averaging starts, when averaging.
    average_from: Option<u64>,
    rng: Rng,
    order: Vec<usize>,
    f: Vec<f64>,
    delta: Vec<f64>,
    iterations: u64,
    updates: u64,
    insertions: u64,
    dropped: u64,
    epoch_events: u64,
}

impl SharedProblems {
    fn new(
        labels: Vec<Vec<f64>>,
        values: Option<(Vec<f64>, f64)>,
        n: usize,
        dim: usize,
        given_svs: usize,
        p: &BscaParams,
    ) -> Result<Self> {
        let k = if values.is_some() { 1 } else { labels.len() };
        // Never more SVs than rows (and the start's points): a budget above costs nothing.
        let expected = p.budget.min(n.saturating_add(given_svs)).saturating_add(1);
        let svs = SupportVectors::new(dim, expected, k, p.layout)?;
        let maintainer = step::maintainer(
            p.maintenance,
            p.gamma,
            p.compare_with,
            values.is_some(),
            p.average_placement,
        );
        Ok(SharedProblems {
            alpha: vec![vec![0.0; n]; k],
            labels,
            values,
            budgeted: Budgeted::new(svs, maintainer, p.budget),
            average_from: step::averages(p.average, p.maintenance)
                .then(|| step::suffix_start(n, p.epochs)),
            // The seed's first draw, as when every one-vs-rest problem had its own generator
            // (binary runs are unchanged by the shared design).
            rng: Rng::new(Rng::new(p.seed).next_u64()),
            order: (0..n).collect(),
            f: vec![0.0; k],
            delta: vec![0.0; k],
            iterations: 0,
            updates: 0,
            insertions: 0,
            dropped: 0,
            epoch_events: 0,
        })
    }

    /// Takes over `start` (checked against this run's rows and parameters).
    fn continue_from(&mut self, start: &BscaStart<'_>, p: &BscaParams) -> Result<()> {
        let model = start.model;
        model.validate()?;
        if p.maintenance == Maintenance::Project {
            // Projection keeps the inverse Gram matrix of the SVs it saw inserted.
            return Err(SvmError::invalid_parameter(
                "maintenance",
                "a run that continues another merges or removes; projection cannot take over a model",
            ));
        }
        let svs = &self.budgeted.svs;
        if model.dim > svs.dim() || model.n_out != svs.n_out() {
            return Err(SvmError::invalid_input(format!(
                "the model to continue has {} features and {} outputs, this run {} and {}",
                model.dim,
                model.n_out,
                svs.dim(),
                svs.n_out()
            )));
        }
        if model.gamma != p.gamma || model.n_sv() > p.budget {
            return Err(SvmError::invalid_input(format!(
                "the model to continue has gamma {} and {} support vectors; this run gamma {} \
                 and a budget of {}",
                model.gamma,
                model.n_sv(),
                p.gamma,
                p.budget
            )));
        }
        if p.average {
            return Err(SvmError::invalid_parameter(
                "average",
                "a run that continues another cannot average (its steps are not all the run's)",
            ));
        }
        let n_out = model.n_out;
        let rows = crate::core::kernels::kernel_block::sv_rows(
            &model.support_vectors,
            model.n_sv(),
            model.dim,
        );
        for j in 0..model.n_sv() {
            self.budgeted
                .push_given(&rows, j, &model.coef[j * n_out..(j + 1) * n_out])?;
        }
        if let Some(alpha) = start.alpha {
            let n = self.order.len();
            if alpha.len() != self.alpha.len() || alpha.iter().any(|a| a.len() != n) {
                return Err(SvmError::invalid_input(format!(
                    "the dual variables to continue from are not {} problems of {n} rows",
                    self.alpha.len()
                )));
            }
            self.alpha = alpha.to_vec();
        }
        Ok(())
    }

    fn run_epoch<R: Rows>(
        &mut self,
        x: &R,
        sq_norms: &[f64],
        upper: &[f64],
        p: &BscaParams,
        monitor: &mut Monitor<'_>,
        progress: &Progress,
    ) -> Result<()> {
        let events_before = self.budgeted.maintainer.stats.events;
        // Full steps until the budget has been binding: without maintenance there is no drift
        // to damp, and B >= n solves the exact dual at full speed.
        let eta = if events_before == 0 {
            1.0
        } else {
            p.step.factor(progress.epoch)
        };
        let mut heartbeat = Heartbeat::new(Duration::from_millis(100));
        if p.shuffle {
            self.rng.shuffle(&mut self.order);
        }
        for k in 0..self.order.len() {
            let i = self.order[k];
            self.iterations += 1;
            if self.average_from == Some(self.iterations) {
                self.budgeted.svs.start_averaging();
            }
            self.budgeted
                .decision(x, i, sq_norms[i], p.gamma, &mut self.f);
            // One coordinate step per problem on row i, all from the same model.
            let mut changed = false;
            if let Some((values, epsilon)) = &self.values {
                let old = self.alpha[0][i];
                let z = old + values[i] - self.f[0];
                let exact = (z.signum() * (z.abs() - epsilon).max(0.0)).clamp(-upper[i], upper[i]);
                let new = old + eta * (exact - old);
                self.delta[0] = new - old;
                if new != old {
                    self.alpha[0][i] = new;
                    changed = true;
                }
            } else {
                for (c, delta) in self.delta.iter_mut().enumerate() {
                    let y = self.labels[c][i];
                    let old = self.alpha[c][i];
                    let new = (old + eta * (1.0 - y * self.f[c])).clamp(0.0, upper[i]);
                    *delta = y * (new - old);
                    if new != old {
                        self.alpha[c][i] = new;
                        changed = true;
                    }
                }
            }
            if changed {
                self.updates += 1;
                match self.budgeted.stored_copy(x, i) {
                    Some(slot) => {
                        let svs = &mut self.budgeted.svs;
                        svs.add_to_coef(slot, &self.delta);
                        // An unmerged point's coefficients are y alpha_i (plus what projections
                        // moved onto it); when they all reach 0 the SV only costs budget.
                        // (Kept while averaging: its average is not zero.)
                        let scale = svs.scale();
                        if !svs.is_averaging()
                            && svs
                                .coef(slot)
                                .iter()
                                .all(|b| (b * scale).abs() <= 1e-12 * upper[i])
                        {
                            self.budgeted.remove(slot);
                            self.dropped += 1;
                        }
                    }
                    None => {
                        self.budgeted.insert(x, i, &self.delta)?;
                        self.insertions += 1;
                    }
                }
            }
            self.budgeted.svs.accumulate_average();
            if heartbeat.due(self.iterations) {
                // The heartbeats of BSCA carry no time (`seconds` 0).
                monitor(
                    &self
                        .budgeted
                        .progress(progress, self.iterations, 0.0, false),
                )?;
            }
        }
        self.epoch_events = self.budgeted.maintainer.stats.events - events_before;
        Ok(())
    }
}

/// Trains BSCA. Class targets: `y[i]` is the class index of row i in `0..n_classes`; `weights`
/// (positive, one per row) make row i's box [0, C w_i]. Real targets: epsilon-SVR, boxes
/// [-C w_i, C w_i]. The observer, if any, is called after every epoch with the current model
/// and dual variables (classification).
pub fn train_bsca<R: Rows>(
    x: &R,
    targets: Targets<'_>,
    weights: Option<&[f64]>,
    params: &ValidBscaParams,
    start: Option<BscaStart<'_>>,
    mut monitor: Monitor<'_>,
    mut observer: Option<EpochObserver<'_>>,
) -> Result<(BudgetModel, BscaStats)> {
    let p = &params.0;
    let n = x.n_rows();
    let (y, n_classes, values): (&[u32], usize, _) = match targets {
        Targets::Classes { y, n_classes } => {
            check_classes(n_classes, Some(n))?;
            (y, n_classes, None)
        }
        Targets::Values { y, epsilon } => (&[], 0, Some((y.to_vec(), epsilon))),
    };
    check_targets(x, targets, targets.task(), x.n_cols())?;
    check_weights(weights, n)?;
    let sq_norms = finite_sq_norms(x, "X")?;
    let upper: Vec<f64> = match weights {
        Some(w) => w.iter().map(|wi| p.c * wi).collect(),
        None => vec![p.c; n],
    };
    // Binary: one problem, positive = class 1. One-vs-rest: problem k, positive = class k.
    // Regression: no labels.
    let positive: Vec<u32> = match n_classes {
        0 => vec![],
        2 => vec![1],
        _ => (0..n_classes as u32).collect(),
    };
    let labels = positive
        .iter()
        .map(|&k| y.iter().map(|&c| if c == k { 1.0 } else { -1.0 }).collect())
        .collect();
    let given_svs = start.map_or(0, |s| s.model.n_sv());
    let mut run = SharedProblems::new(labels, values, n, x.n_cols(), given_svs, p)?;
    let epochs_done = start.map_or(0, |s| s.epochs_done);
    if let Some(start) = &start {
        run.continue_from(start, p)?;
    }
    let start = Instant::now();
    let mut observer_seconds = 0.0;
    let mut stats = BscaStats::default();
    for epoch in epochs_done + 1..=epochs_done + p.epochs {
        let progress = Progress {
            epoch,
            epochs: epochs_done + p.epochs,
            ..Progress::default()
        };
        // On a pool's thread, so that the steps' kernel rows over many SVs run in parts.
        let monitor_ref = &mut monitor;
        parallel::install(|| run.run_epoch(x, &sq_norms, &upper, p, monitor_ref, &progress))?;
        stats.epochs = epoch;
        let train_seconds = start.elapsed().as_secs_f64() - observer_seconds;
        monitor(
            &run.budgeted
                .progress(&progress, run.iterations, train_seconds, true),
        )?;
        if let Some(obs) = observer.as_mut() {
            let t0 = Instant::now();
            let snapshot = EpochSnapshot {
                epoch,
                model: run.budgeted.svs.to_model(p.gamma),
                alphas: run.alpha.iter().map(Vec::as_slice).collect(),
                labels: run.labels.iter().map(Vec::as_slice).collect(),
                seconds: train_seconds,
                maintenance_fraction: run.epoch_events as f64 / n as f64,
            };
            obs(&snapshot)?;
            observer_seconds += t0.elapsed().as_secs_f64();
        }
    }
    stats.seconds = start.elapsed().as_secs_f64() - observer_seconds;
    stats.iterations = run.iterations;
    stats.updates = run.updates;
    stats.insertions = run.insertions;
    stats.dropped = run.dropped;
    stats.maintenance = run.budgeted.maintainer.stats.clone();
    let model = run.budgeted.svs.to_model(p.gamma);
    stats.alpha = run.alpha;
    Ok((model, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::common::progress::no_monitor;
    use crate::core::data::rows::DenseView;

    /// [`fit`], returning with the model and statistics the dual variables and the labels of
    /// every problem after the last epoch.
    fn fit_duals(
        x: &DenseView<'_>,
        targets: Targets<'_>,
        params: &ValidBscaParams,
    ) -> (BudgetModel, BscaStats, Vec<Vec<f64>>, Vec<Vec<f64>>) {
        let (mut alphas, mut labels) = (Vec::new(), Vec::new());
        let mut obs = |s: &EpochSnapshot<'_>| {
            alphas = s.alphas.iter().map(|a| a.to_vec()).collect();
            labels = s.labels.iter().map(|l| l.to_vec()).collect();
            Ok(())
        };
        let (model, stats) = fit(x, targets, None, params, Some(&mut obs)).unwrap();
        (model, stats, alphas, labels)
    }

    /// Full steps and a budget above the `n` rows: coordinate ascent on the exact dual.
    fn exact_params(c: f64, gamma: f64, epochs: usize, n: usize) -> ValidBscaParams {
        BscaParams {
            c,
            gamma,
            budget: 100,
            epochs,
            step: DualStep::Full,
            ..Default::default()
        }
        .check(n)
        .unwrap()
    }

    fn blobs(n: usize, seed: u64) -> (Vec<f64>, Vec<u32>) {
        let mut rng = Rng::new(seed);
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for _ in 0..n {
            let (a, b) = (rng.next_f64() * 2.0 - 1.0, rng.next_f64() * 2.0 - 1.0);
            xs.extend([a, b]);
            // A noisy circle: some points on the wrong side, so alpha hits C somewhere.
            let noisy = rng.next_f64() < 0.1;
            ys.push(u32::from(((a * a + b * b) < 0.4) != noisy));
        }
        (xs, ys)
    }

    /// The dual objective 1^T a - 1/2 a^T Q a by explicit kernel values.
    fn dual_objective(xs: &[f64], y: &[f64], alpha: &[f64], gamma: f64) -> f64 {
        let n = y.len();
        let mut quad = 0.0;
        for i in 0..n {
            for j in 0..n {
                let d2 = (xs[2 * i] - xs[2 * j]).powi(2) + (xs[2 * i + 1] - xs[2 * j + 1]).powi(2);
                quad += alpha[i] * alpha[j] * y[i] * y[j] * (-gamma * d2).exp();
            }
        }
        alpha.iter().sum::<f64>() - 0.5 * quad
    }

    /// Independent solver: projected gradient ascent on the box QP, many iterations.
    fn projected_gradient(xs: &[f64], y: &[f64], c: f64, gamma: f64) -> Vec<f64> {
        let n = y.len();
        let mut q = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let d2 = (xs[2 * i] - xs[2 * j]).powi(2) + (xs[2 * i + 1] - xs[2 * j + 1]).powi(2);
                q[i * n + j] = y[i] * y[j] * (-gamma * d2).exp();
            }
        }
        let step = 1.0 / n as f64; // lambda_max(Q) <= n for the Gaussian kernel
        let mut a = vec![0.0; n];
        for _ in 0..200_000 {
            let g: Vec<f64> = (0..n)
                .map(|i| 1.0 - (0..n).map(|j| q[i * n + j] * a[j]).sum::<f64>())
                .collect();
            for i in 0..n {
                a[i] = (a[i] + step * g[i]).clamp(0.0, c);
            }
        }
        a
    }

    /// Trains without a monitor.
    fn fit(
        x: &DenseView<'_>,
        targets: Targets<'_>,
        weights: Option<&[f64]>,
        params: &ValidBscaParams,
        observer: Option<EpochObserver<'_>>,
    ) -> Result<(BudgetModel, BscaStats)> {
        train_bsca(x, targets, weights, params, None, &mut no_monitor, observer)
    }

    #[test]
    fn without_budget_bsca_reaches_the_exact_dual_optimum() {
        let (xs, ys) = blobs(40, 1);
        let x = DenseView::new(&xs, 40, 2).unwrap();
        let (c, gamma) = (2.0, 1.5);
        let params = exact_params(c, gamma, 300, 40);
        let (model, stats, mut alphas, mut labels) =
            fit_duals(&x, Targets::classes(&ys, 2), &params);
        let (alpha, labels) = (alphas.remove(0), labels.remove(0));
        assert_eq!(stats.maintenance.events, 0);
        let reference = projected_gradient(&xs, &labels, c, gamma);
        let (d_ours, d_ref) = (
            dual_objective(&xs, &labels, &alpha, gamma),
            dual_objective(&xs, &labels, &reference, gamma),
        );
        assert!(
            (d_ours - d_ref).abs() < 1e-6 * d_ref.abs(),
            "{d_ours} vs {d_ref}"
        );
        for (a, r) in alpha.iter().zip(&reference) {
            assert!((a - r).abs() < 1e-3, "{a} vs {r}");
        }
        assert!(alpha.contains(&c) && alpha.contains(&0.0));
        // Without merges the model is exactly w = sum alpha_i y_i phi(x_i).
        let total: f64 = model.coef.iter().map(|b| b.abs()).sum();
        assert!((total - alpha.iter().sum::<f64>()).abs() < 1e-9);
    }

    /// Regression: without a budget BSCA's beta maximises the epsilon-SVR dual without offset,
    /// y^T b - eps |b|_1 - 1/2 b^T K b over |b_i| <= C, as an independent proximal gradient
    /// ascent finds it; the model is exactly sum b_i phi(x_i).
    /// Regression rows for the relay tests: n rows in [-1, 1]^2 and noisy smooth targets.
    fn regression_rows(n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let (xs, _) = blobs(n, seed);
        let mut rng = Rng::new(seed + 1);
        let z = (0..n)
            .map(|i| (3.0 * xs[2 * i]).sin() + xs[2 * i + 1] + 0.3 * (rng.next_f64() - 0.5))
            .collect();
        (xs, z)
    }

    /// One run of `params` over all the rows (epsilon 0.1).
    fn one_run(xs: &[f64], z: &[f64], params: &BscaParams) -> (BudgetModel, BscaStats) {
        let x = DenseView::new(xs, z.len(), 2).unwrap();
        let targets = Targets::Values { y: z, epsilon: 0.1 };
        let valid = params.check(z.len()).unwrap();
        train_bsca(&x, targets, None, &valid, None, &mut no_monitor, None).unwrap()
    }

    /// The relay: a run per part, each from the model (and, on a
    /// later pass, the part's dual variables) the one before left.
    fn relay(
        xs: &[f64],
        z: &[f64],
        parts: &[std::ops::Range<usize>],
        params: &BscaParams,
        passes: usize,
    ) -> (BudgetModel, Vec<Vec<Vec<f64>>>) {
        let mut model: Option<BudgetModel> = None;
        let mut alphas: Vec<Option<Vec<Vec<f64>>>> = vec![None; parts.len()];
        for pass in 0..passes {
            for (k, part) in parts.iter().enumerate() {
                let x = DenseView::new(&xs[2 * part.start..2 * part.end], part.len(), 2).unwrap();
                let targets = Targets::Values {
                    y: &z[part.clone()],
                    epsilon: 0.1,
                };
                let valid = BscaParams {
                    epochs: 1,
                    ..params.clone()
                }
                .check(part.len())
                .unwrap();
                let start = model.as_ref().map(|model| BscaStart {
                    model,
                    alpha: alphas[k].as_deref(),
                    epochs_done: pass,
                });
                let (m, stats) =
                    train_bsca(&x, targets, None, &valid, start, &mut no_monitor, None).unwrap();
                model = Some(m);
                alphas[k] = Some(stats.alpha);
            }
        }
        (
            model.unwrap(),
            alphas.into_iter().map(Option::unwrap).collect(),
        )
    }

    #[test]
    fn a_relay_over_parts_is_one_run_over_their_rows() {
        let n = 300;
        let (xs, z) = regression_rows(n, 21);
        let parts = [0..70, 70..200, 200..300];
        for (budget, maintenance) in [
            (20, Maintenance::Merge(MergeSearch::LookupWd)),
            (25, Maintenance::Remove),
        ] {
            let params = BscaParams {
                c: 2.0,
                gamma: 1.5,
                budget,
                epochs: 1,
                maintenance,
                shuffle: false,
                ..Default::default()
            };
            let (whole, stats) = one_run(&xs, &z, &params);
            let (relayed, alphas) = relay(&xs, &z, &parts, &params, 1);
            // The same steps in the same order: the same model and dual variables, bit for bit.
            assert_eq!(relayed.coef, whole.coef, "{maintenance:?}");
            assert_eq!(relayed.support_vectors, whole.support_vectors);
            assert_eq!(alphas.concat().concat(), stats.alpha.concat());
        }
    }

    #[test]
    fn a_relay_with_dual_variables_makes_later_passes_of_the_same_function() {
        // Without maintenance (B above every insertion) a later pass inserts a row's change as
        // a second point where the one run adds it to the row's SV: the same function and the
        // same dual variables, up to rounding.
        let n = 120;
        let (xs, z) = regression_rows(n, 5);
        let parts = [0..50, 50..120];
        let params = BscaParams {
            c: 1.0,
            gamma: 2.0,
            budget: 1000,
            epochs: 3,
            step: DualStep::Full,
            shuffle: false,
            ..Default::default()
        };
        let x = DenseView::new(&xs, n, 2).unwrap();
        let (whole, stats) = one_run(&xs, &z, &params);
        let (relayed, alphas) = relay(&xs, &z, &parts, &params, 3);
        for (a, b) in alphas.concat().concat().iter().zip(stats.alpha.concat()) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
        let mut f = [vec![0.0; n], vec![0.0; n]];
        for (out, model) in f.iter_mut().zip([&whole, &relayed]) {
            model.decision_function(&x, out).unwrap();
        }
        for (a, b) in f[0].iter().zip(&f[1]) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }

    #[test]
    fn a_start_that_does_not_fit_the_run_is_an_error() {
        let (xs, z) = regression_rows(40, 2);
        let x = DenseView::new(&xs, 40, 2).unwrap();
        let targets = Targets::Values {
            y: &z,
            epsilon: 0.1,
        };
        let params = BscaParams {
            gamma: 1.0,
            budget: 10,
            epochs: 1,
            ..Default::default()
        };
        let valid = params.check(40).unwrap();
        let (model, _) =
            train_bsca(&x, targets, None, &valid, None, &mut no_monitor, None).unwrap();
        let with = |change: fn(&mut BscaParams)| {
            let mut changed = params.clone();
            change(&mut changed);
            changed.check(40).unwrap()
        };
        let short_alpha = [vec![0.0; 39]];
        for (valid, alpha) in [
            (with(|q| q.gamma = 2.0), None),
            (with(|q| q.budget = 5), None),
            (with(|q| q.average = true), None),
            (with(|q| q.maintenance = Maintenance::Project), None),
            (valid.clone(), Some(&short_alpha[..])),
        ] {
            let start = Some(BscaStart {
                model: &model,
                alpha,
                epochs_done: 1,
            });
            assert!(train_bsca(&x, targets, None, &valid, start, &mut no_monitor, None).is_err());
        }
    }

    #[test]
    fn without_budget_regression_reaches_the_exact_dual_optimum() {
        let n = 40;
        let (xs, _) = blobs(n, 3);
        let mut rng = Rng::new(9);
        let z: Vec<f64> = (0..n)
            .map(|i| (3.0 * xs[2 * i]).sin() + xs[2 * i + 1] + 0.3 * (rng.next_f64() - 0.5))
            .collect();
        let x = DenseView::new(&xs, n, 2).unwrap();
        let (c, gamma, epsilon) = (1.5, 2.0, 0.1);
        let params = exact_params(c, gamma, 400, n);
        let targets = Targets::Values { y: &z, epsilon };
        let (model, stats, mut betas, _) = fit_duals(&x, targets, &params);
        let beta = betas.remove(0);
        assert_eq!(stats.maintenance.events, 0);
        let mut k = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let d2 = (xs[2 * i] - xs[2 * j]).powi(2) + (xs[2 * i + 1] - xs[2 * j + 1]).powi(2);
                k[i * n + j] = (-gamma * d2).exp();
            }
        }
        let dual = |b: &[f64]| -> f64 {
            let quad: f64 = (0..n)
                .map(|i| b[i] * (0..n).map(|j| k[i * n + j] * b[j]).sum::<f64>())
                .sum();
            (0..n)
                .map(|i| z[i] * b[i] - epsilon * b[i].abs())
                .sum::<f64>()
                - 0.5 * quad
        };
        // Proximal gradient ascent: gradient step on the smooth part, then the soft threshold
        // of the l1 term and the box.
        let step = 1.0 / n as f64;
        let mut reference = vec![0.0; n];
        for _ in 0..200_000 {
            let g: Vec<f64> = (0..n)
                .map(|i| z[i] - (0..n).map(|j| k[i * n + j] * reference[j]).sum::<f64>())
                .collect();
            for i in 0..n {
                let v = reference[i] + step * g[i];
                let shrunk = v.signum() * (v.abs() - step * epsilon).max(0.0);
                reference[i] = shrunk.clamp(-c, c);
            }
        }
        let (d_ours, d_ref) = (dual(&beta), dual(&reference));
        assert!(
            (d_ours - d_ref).abs() < 1e-6 * d_ref.abs(),
            "{d_ours} vs {d_ref}"
        );
        // The optimality conditions, with g_i = y_i - f(x_i): g = eps sign(b) where 0 < |b| <
        // C, |g| <= eps where b = 0, g beyond the tube on the bound's side where |b| = C.
        for i in 0..n {
            let g = z[i] - (0..n).map(|j| k[i * n + j] * beta[j]).sum::<f64>();
            let b = beta[i];
            let ok = if b == 0.0 {
                g.abs() <= epsilon + 1e-4
            } else if b.abs() == c {
                g * b.signum() >= epsilon - 1e-4
            } else {
                (g - epsilon * b.signum()).abs() <= 1e-4
            };
            assert!(ok, "row {i}: beta {b}, y - f = {g}");
        }
        assert!(beta.iter().any(|b| b.abs() == c), "some row at the bound");
        assert!(beta.contains(&0.0), "some row inside the tube");
        assert!(beta.iter().any(|&b| b > 0.0) && beta.iter().any(|&b| b < 0.0));
        let total: f64 = model.coef.iter().sum();
        assert!((total - beta.iter().sum::<f64>()).abs() < 1e-9);
    }

    #[test]
    fn without_budget_each_one_vs_rest_problem_reaches_its_optimum() {
        // Three classes on the shared model: every problem's alphas solve its own dual.
        let (xs, ys) = blobs(45, 7);
        let ys: Vec<u32> = ys
            .iter()
            .enumerate()
            .map(|(i, &c)| if xs[2 * i] > 0.4 { 2 } else { c })
            .collect();
        let x = DenseView::new(&xs, 45, 2).unwrap();
        let (c, gamma) = (2.0, 1.5);
        let params = exact_params(c, gamma, 400, 45);
        let (model, _, alphas, labels) = fit_duals(&x, Targets::classes(&ys, 3), &params);
        assert_eq!(alphas.len(), 3);
        for k in 0..3 {
            let reference = projected_gradient(&xs, &labels[k], c, gamma);
            let (ours, best) = (
                dual_objective(&xs, &labels[k], &alphas[k], gamma),
                dual_objective(&xs, &labels[k], &reference, gamma),
            );
            assert!(
                (ours - best).abs() < 1e-6 * best.abs(),
                "class {k}: {ours} vs {best}"
            );
            // Column k of the model is w_k = sum_i alpha_ki y_ki phi(x_i), x_i unmerged.
            let col: f64 = (0..model.n_sv()).map(|j| model.coef[j * 3 + k].abs()).sum();
            assert!((col - alphas[k].iter().sum::<f64>()).abs() < 1e-9);
        }
        assert!(model.n_sv() <= 45);
    }

    #[test]
    fn with_a_budget_the_box_holds_and_runs_are_seeded() {
        let (xs, ys) = blobs(400, 2);
        let x = DenseView::new(&xs, 400, 2).unwrap();
        for maintenance in Maintenance::ALL {
            let params = BscaParams {
                c: 4.0,
                gamma: 2.0,
                budget: 12,
                epochs: 4,
                maintenance,
                seed: 3,
                ..Default::default()
            }
            .check(400)
            .unwrap();
            let mut worst = (f64::MAX, f64::MIN);
            let mut obs = |s: &EpochSnapshot<'_>| {
                for &a in s.alphas[0] {
                    worst = (worst.0.min(a), worst.1.max(a));
                }
                Ok(())
            };
            let (m1, s1) =
                fit(&x, Targets::classes(&ys, 2), None, &params, Some(&mut obs)).unwrap();
            assert!(
                worst.0 >= 0.0 && worst.1 <= 4.0,
                "{maintenance:?}: {worst:?}"
            );
            assert!(m1.n_sv() <= 12);
            assert!(s1.maintenance.events > 0);
            let (m2, _) = fit(&x, Targets::classes(&ys, 2), None, &params, None).unwrap();
            assert_eq!(m1, m2);
        }
    }

    #[test]
    fn one_vs_rest_learns_three_classes() {
        let mut rng = Rng::new(5);
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for _ in 0..1500 {
            let (a, b) = (rng.next_f64() * 2.0 - 1.0, rng.next_f64() * 2.0 - 1.0);
            xs.extend([a, b]);
            ys.push(if a < -0.33 {
                0
            } else if a < 0.33 {
                1
            } else {
                2
            });
        }
        let x = DenseView::new(&xs, 1500, 2).unwrap();
        let params = BscaParams {
            c: 10.0,
            gamma: 2.0,
            budget: 20,
            epochs: 3,
            ..Default::default()
        }
        .check(1500)
        .unwrap();
        let (model, _) = fit(&x, Targets::classes(&ys, 3), None, &params, None).unwrap();
        assert_eq!(model.n_out, 3);
        // One shared budget for the three problems.
        assert!(model.n_sv() <= 20);
        let mut out = vec![0.0; 1500 * 3];
        model.decision_function(&x, &mut out).unwrap();
        let correct = (0..1500)
            .filter(|&i| {
                let r = &out[3 * i..3 * i + 3];
                (0..3).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap() as u32 == ys[i]
            })
            .count();
        assert!(correct > 1400, "{correct}/1500");
    }

    #[test]
    fn weights_are_per_row_bounds() {
        let (xs, ys) = blobs(300, 4);
        let x = DenseView::new(&xs, 300, 2).unwrap();
        let params = |c: f64| {
            BscaParams {
                c,
                gamma: 2.0,
                budget: 30,
                epochs: 3,
                ..Default::default()
            }
            .check(300)
            .unwrap()
        };
        // Weight s on every row is C s: the same bounds and arithmetic.
        let (a, _) = fit(
            &x,
            Targets::classes(&ys, 2),
            Some(&[4.0; 300]),
            &params(0.5),
            None,
        )
        .unwrap();
        let (b, _) = fit(&x, Targets::classes(&ys, 2), None, &params(2.0), None).unwrap();
        assert_eq!(a.coef, b.coef);
        // A row's dual variable never leaves [0, C w_i].
        let w: Vec<f64> = (0..300).map(|i| [0.1, 1.0, 7.0][i % 3]).collect();
        let mut seen = 0;
        let mut obs = |s: &EpochSnapshot<'_>| {
            for (i, &a) in s.alphas[0].iter().enumerate() {
                assert!(
                    (0.0..=2.0 * w[i]).contains(&a),
                    "alpha {a} for weight {}",
                    w[i]
                );
            }
            seen += s.alphas[0]
                .iter()
                .zip(&w)
                .filter(|(&a, &wi)| a == 2.0 * wi)
                .count();
            Ok(())
        };
        fit(
            &x,
            Targets::classes(&ys, 2),
            Some(&w),
            &params(2.0),
            Some(&mut obs),
        )
        .unwrap();
        assert!(seen > 0, "no variable reached its bound");
        for bad in [vec![1.0; 299], vec![0.0; 300], vec![f64::INFINITY; 300]] {
            let err = fit(&x, Targets::classes(&ys, 2), Some(&bad), &params(1.0), None);
            assert!(err.unwrap_err().to_string().contains("weight"));
        }
    }
}
