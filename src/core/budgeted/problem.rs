//! What a budgeted solver learns ([`Targets`]: classes or real values; [`Task`]: the same
//! without the rows) and the checks every budgeted run shares.

use crate::core::common::checks::check_classes;
use crate::core::common::error::{Result, SvmError};
use crate::core::data::rows::Rows;
use crate::core::kernels::kernel::check_gamma;

/// Parameter checks every budgeted solver shares.
pub(crate) fn check_run(gamma: f64, n_samples: usize, budget: usize, epochs: usize) -> Result<()> {
    check_gamma(gamma)?;
    if n_samples == 0 {
        return Err(SvmError::invalid_input("no training samples (0 rows)"));
    }
    if budget < 2 {
        return Err(SvmError::invalid_parameter(
            "budget",
            format!("must be at least 2, got {budget}"),
        ));
    }
    if epochs == 0 {
        return Err(SvmError::invalid_parameter("epochs", "must be at least 1"));
    }
    Ok(())
}

/// What a budgeted solver learns from, and so its loss: class indices (hinge losses) or real
/// targets (epsilon-insensitive losses). BSGD takes the loss itself, the polish its square:
/// every term of the polish is w (f - r)^2 while it is active and 0 otherwise, with r the
/// term's target value (`active_target`), so its Newton system, Gram updates and line search
/// are one code for both.
#[derive(Debug, Clone, Copy)]
pub enum Targets<'a> {
    /// Class indices: the squared hinge max(0, 1 - y f)^2 (y = +-1 per output: one output for
    /// two classes, one-vs-rest otherwise), active below the margin with r = y.
    Classes { y: &'a [u32], n_classes: usize },
    /// Real targets: the squared epsilon-insensitive loss max(0, |f - y| - epsilon)^2, active
    /// outside the tube with r = y - epsilon below it and y + epsilon above it.
    Values { y: &'a [f64], epsilon: f64 },
}

impl<'a> Targets<'a> {
    /// Class indices in `0..n_classes`.
    pub fn classes(y: &'a [u32], n_classes: usize) -> Self {
        Targets::Classes { y, n_classes }
    }

    pub fn len(&self) -> usize {
        match self {
            Targets::Classes { y, .. } => y.len(),
            Targets::Values { y, .. } => y.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn n_out(&self) -> usize {
        match *self {
            Targets::Classes { n_classes, .. } if n_classes > 2 => n_classes,
            _ => 1,
        }
    }

    /// The target value r of row i's active term for output k at f, None when none is active.
    #[inline]
    pub fn active_target(&self, k: usize, i: usize, f: f64) -> Option<f64> {
        match *self {
            Targets::Classes { y, n_classes } => {
                let positive = if n_classes == 2 {
                    y[i] == 1
                } else {
                    y[i] as usize == k
                };
                let r = if positive { 1.0 } else { -1.0 };
                (r * f < 1.0).then_some(r)
            }
            Targets::Values { y, epsilon } => {
                let yi = y[i];
                if f < yi - epsilon {
                    Some(yi - epsilon)
                } else if f > yi + epsilon {
                    Some(yi + epsilon)
                } else {
                    None
                }
            }
        }
    }

    /// What the targets are for, without the rows.
    pub fn task(&self) -> Task {
        match *self {
            Targets::Classes { n_classes, .. } => Task::Classes(n_classes),
            Targets::Values { epsilon, .. } => Task::Regression { epsilon },
        }
    }

    /// The targets fit `n` rows: as many, class indices in range, finite values, a valid epsilon.
    pub fn check(&self, n: usize) -> Result<()> {
        if self.len() != n {
            return Err(SvmError::invalid_input(format!(
                "X has {n} rows but y has {} targets",
                self.len()
            )));
        }
        match *self {
            Targets::Classes { y, n_classes } => {
                check_classes(n_classes, None)?;
                if let Some(bad) = y.iter().find(|&&c| c as usize >= n_classes) {
                    return Err(SvmError::invalid_input(format!(
                        "class index {bad} out of range for {n_classes} classes"
                    )));
                }
            }
            Targets::Values { y, epsilon } => {
                if !(epsilon.is_finite() && epsilon >= 0.0) {
                    return Err(SvmError::invalid_parameter(
                        "epsilon",
                        format!("must be a finite number >= 0, got {epsilon}"),
                    ));
                }
                if let Some(i) = y.iter().position(|v| !v.is_finite()) {
                    return Err(SvmError::invalid_input(format!(
                        "the target of row {i} is not finite ({})",
                        y[i]
                    )));
                }
            }
        }
        Ok(())
    }
}

/// What a run learns, without its rows: `n` classes, or regression with its tube.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Task {
    Classes(usize),
    Regression { epsilon: f64 },
}

impl Task {
    /// Outputs of a model: one for two classes and for regression, one per class otherwise.
    pub fn n_out(self) -> usize {
        match self {
            Task::Classes(n) if n > 2 => n,
            _ => 1,
        }
    }
}

/// A task given by a caller: a valid class count, or a finite epsilon >= 0.
pub(crate) fn check_task(task: Task) -> Result<()> {
    match task {
        Task::Classes(n) => check_classes(n, None),
        Task::Regression { epsilon } if !(epsilon.is_finite() && epsilon >= 0.0) => {
            Err(SvmError::invalid_parameter(
                "epsilon",
                format!("must be finite and >= 0, got {epsilon}"),
            ))
        }
        Task::Regression { .. } => Ok(()),
    }
}

/// A batch for a run of `task` on `dim` features: its targets are for that task and fit X.
pub(crate) fn check_targets<R: Rows>(x: &R, y: Targets<'_>, task: Task, dim: usize) -> Result<()> {
    if y.task() != task {
        return Err(SvmError::invalid_input(format!(
            "the targets are for {:?}, the run is for {task:?}",
            y.task()
        )));
    }
    y.check(x.n_rows())?;
    if x.n_cols() != dim {
        return Err(SvmError::invalid_input(format!(
            "X has {} features, but the model was started with {dim}",
            x.n_cols()
        )));
    }
    Ok(())
}
