//! What a step of BSGD and a step of BSCA have in common: the support vectors on a budget
//! ([`Budgeted`]: a row's decision values, the row inserted as a support vector and the budget
//! restored), how their budget maintenance is set up, where averaging starts, and what the
//! monitor is shown. The solvers differ only in how a step turns decision values into
//! coefficients.

use crate::core::budget::maintenance::{BudgetMaintainer, Maintenance};
use crate::core::budget::merge::MergeSearch;
use crate::core::budget::model::SupportVectors;
use crate::core::common::error::Result;
use crate::core::common::progress::Progress;
use crate::core::data::rows::Rows;

/// The support vectors of a run with their budget maintenance, and the kernel values of the
/// row being stepped on (an insertion hands them to the maintenance instead of computing them
/// again).
#[derive(Debug, Clone)]
pub(crate) struct Budgeted {
    pub(crate) svs: SupportVectors,
    pub(crate) maintainer: BudgetMaintainer,
    /// The most support vectors a step leaves.
    pub(crate) budget: usize,
    kvals: Vec<f64>,
    /// The squared norm of the row being stepped on, and the kernel's gamma.
    row_sq_norm: f64,
    gamma: f64,
}

/// The rounding of a squared distance |x - s|^2 = |x|^2 + |s|^2 - 2 x.s between equal points,
/// relative to |x|^2 + 1: a few ulps per feature summed, for up to 10^4 features.
const SAME_POINT_ROUNDING: f64 = 1e-12;

impl Budgeted {
    pub(crate) fn new(svs: SupportVectors, maintainer: BudgetMaintainer, budget: usize) -> Self {
        let kvals = vec![0.0; svs.capacity()];
        Budgeted {
            svs,
            maintainer,
            budget,
            kvals,
            row_sq_norm: 0.0,
            gamma: 0.0,
        }
    }

    /// The model's decision values `f` at row i (one per output), keeping the row's kernel
    /// values for [`Budgeted::insert`].
    #[inline]
    pub(crate) fn decision<R: Rows>(
        &mut self,
        x: &R,
        i: usize,
        sq_norm: f64,
        gamma: f64,
        f: &mut [f64],
    ) {
        self.svs
            .kernel_row_and_decision(x, i, sq_norm, gamma, &mut self.kvals, f);
        self.row_sq_norm = sq_norm;
        self.gamma = gamma;
    }

    /// The slot of a support vector equal to row i of x (the row of the last
    /// [`Budgeted::decision`]), if the model holds one: a step on it adds to that SV's
    /// coefficients instead of storing the point twice (the same function, one SV fewer, no
    /// budget maintenance). That is a row stepped on again in a later epoch while still an
    /// SV, or a row given twice. Candidates are the SVs at kernel value 1 up to rounding and of
    /// the row's norm; each is compared value by value. O(B) per call.
    pub(crate) fn stored_copy<R: Rows>(&self, x: &R, i: usize) -> Option<usize> {
        let norm = self.row_sq_norm;
        // The smallest kernel value an SV equal to the row can have: exp(-gamma d) for the
        // rounding d of their squared distance.
        let floor = (-self.gamma * SAME_POINT_ROUNDING * (2.0 * norm + 1.0)).exp();
        let kvals = &self.kvals[..self.svs.len()];
        // Almost every step finds none: one pass asking whether any value reaches the floor
        // (an OR of comparisons, which the compiler vectorises: no early exit, no ordered
        // float reduction), then SV by SV only if one does.
        if !kvals.iter().fold(false, |any, &k| any | (k >= floor)) {
            return None;
        }
        (0..kvals.len()).find(|&j| {
            kvals[j] >= floor
                && (self.svs.sq_norm(j) - norm).abs() <= SAME_POINT_ROUNDING * (norm + 1.0)
                && self.svs.holds_row(j, x, i)
        })
    }

    /// Row i (the row of the last [`Budgeted::decision`]) as a new support vector with
    /// coefficients `coef`, then one budget maintenance event if that went over the budget.
    #[inline]
    pub(crate) fn insert<R: Rows>(&mut self, x: &R, i: usize, coef: &[f64]) -> Result<()> {
        self.svs.push_row(x, i, coef)?;
        self.follow_capacity();
        let new_row = &self.kvals[..self.svs.len() - 1];
        self.maintainer.after_push(new_row);
        if self.svs.len() > self.budget {
            self.maintainer.reduce_after_push(&mut self.svs, new_row);
        }
        Ok(())
    }

    /// Row i of x as a support vector of no row of this run (a continued run's start), with
    /// coefficients `coef`; no maintenance (the start holds at most the budget).
    pub(crate) fn push_given<R: Rows>(&mut self, x: &R, i: usize, coef: &[f64]) -> Result<()> {
        self.svs.push_row(x, i, coef)?;
        self.follow_capacity();
        Ok(())
    }

    /// The step's scratch follows the store when it grew (doubling).
    fn follow_capacity(&mut self) {
        if self.kvals.len() < self.svs.capacity() {
            self.kvals.resize(self.svs.capacity(), 0.0);
        }
    }

    /// Drops the support vector in `slot` (the last one moves there).
    pub(crate) fn remove(&mut self, slot: usize) {
        self.svs.swap_remove(slot);
        self.maintainer.after_remove(slot);
    }

    /// `base` (its epoch and epochs) at step `iteration`, with the model's size now.
    pub(crate) fn progress(
        &self,
        base: &Progress,
        iteration: u64,
        seconds: f64,
        epoch_done: bool,
    ) -> Progress {
        Progress {
            iteration,
            n_sv: self.svs.len(),
            maintenance_events: self.maintainer.stats.events,
            seconds,
            epoch_done,
            ..base.clone()
        }
    }
}

/// The budget maintenance of a run. Regression merges may pair SVs of opposite signs (its
/// coefficients take both signs wherever the function bends); `average_placement` places
/// merged points for the averaged coefficients (`BudgetMaintainer::set_average_placement`).
pub(crate) fn maintainer(
    maintenance: Maintenance,
    gamma: f64,
    compare_with: Option<MergeSearch>,
    regression: bool,
    average_placement: bool,
) -> BudgetMaintainer {
    let mut maintainer = BudgetMaintainer::new(maintenance, gamma, compare_with);
    maintainer.set_opposite_sign_merges(regression);
    maintainer.set_average_placement(average_placement);
    maintainer
}

/// Whether a run asked for the average returns it. Removal throws SVs away with whatever
/// average they carried, so an average over the SVs alive at the end would keep a small,
/// arbitrary part of the epoch's model: the last iterate is returned there.
pub(crate) fn averages(asked: bool, maintenance: Maintenance) -> bool {
    asked && maintenance != Maintenance::Remove
}

/// The step (1-based, counted over all epochs) at which averaging starts for `epochs` passes
/// over `n` rows: the first step of the last epoch, or the middle of the data with one epoch.
pub(crate) fn suffix_start(n: usize, epochs: usize) -> u64 {
    if epochs >= 2 {
        (epochs as u64 - 1) * n as u64 + 1
    } else {
        n as u64 / 2 + 1
    }
}
