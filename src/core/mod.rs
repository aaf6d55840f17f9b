//! The pure-Rust core: no Python here (checked in CI with `grep -r pyo3 src/core`).

pub mod data;
pub mod error;
pub mod kernel;
pub mod merge;
pub mod parallel;
pub mod rng;
pub mod simd;
