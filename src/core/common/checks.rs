//! Checks of the counts and weights a caller gives any solver, before anything is allocated
//! from them. Uses only the error type.

use crate::core::common::error::{Result, SvmError};

/// More classes than this is a corrupted count, not a data set (every class costs memory per
/// support vector).
pub const MAX_CLASSES: usize = 1 << 20;

/// A class count given by a caller: at least two, at most [`MAX_CLASSES`], and (when training
/// on rows) no more than the rows, since a class without rows would only cost memory.
pub(crate) fn check_classes(n_classes: usize, n_rows: Option<usize>) -> Result<()> {
    if n_classes < 2 {
        return Err(SvmError::invalid_input(
            "training needs at least two classes",
        ));
    }
    let limit = n_rows.map_or(MAX_CLASSES, |n| n.clamp(2, MAX_CLASSES));
    if n_classes > limit {
        return Err(SvmError::invalid_input(format!(
            "{n_classes} classes is more than the {limit} this training can have (one per row, \
             at most {MAX_CLASSES})"
        )));
    }
    Ok(())
}

pub(crate) fn check_positive_finite(name: &'static str, value: f64) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SvmError::invalid_parameter(
            name,
            format!("must be a positive finite number, got {value}"),
        ))
    }
}

/// Row weights (sample weight times class weight), when given: one per row, finite and
/// positive. Rows of weight 0 are for the caller to drop (they would only cost time).
pub fn check_weights(weights: Option<&[f64]>, n_rows: usize) -> Result<()> {
    let Some(w) = weights else { return Ok(()) };
    if w.len() != n_rows {
        return Err(SvmError::invalid_input(format!(
            "{} sample weights for {n_rows} rows",
            w.len()
        )));
    }
    if let Some(i) = w.iter().position(|&v| !(v.is_finite() && v > 0.0)) {
        return Err(SvmError::invalid_input(format!(
            "sample weight {} of row {i} is not a positive finite number (rows of weight 0 \
             must be left out)",
            w[i]
        )));
    }
    Ok(())
}
