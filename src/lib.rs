//! budgetsvm: Gaussian-kernel SVMs trained on a budget of support vectors.
//!
//! `core` is plain Rust (storage, kernel, merging, solvers); `py` is the only module that knows
//! about Python.

pub mod core;
// The binding's entry points take their Python keywords one by one: a pyo3 signature is the
// Python function's, so the argument count is the API's, not a design to fold into structs.
#[allow(clippy::too_many_arguments)]
mod py;
