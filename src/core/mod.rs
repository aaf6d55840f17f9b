//! The pure-Rust core: no Python here (checked in CI with `grep -r pyo3 src/core`).

pub mod budget;
pub mod codec;
pub mod data;
pub mod error;
pub mod kernel;
pub mod kernel_block;
pub mod kernel_cache;
pub mod libsvm;
pub mod merge;
pub mod merge_math;
pub mod model;
pub mod parallel;
pub mod rng;
pub mod shared_rows;
pub mod simd;
pub mod solvers;
pub mod sparse;
