//! budgetsvm: Gaussian-kernel SVMs trained on a budget of support vectors.
//!
//! `core` is plain Rust (storage, kernel, merging, solvers); `py` is the only module that knows
//! about Python.

pub mod core;
mod py;
