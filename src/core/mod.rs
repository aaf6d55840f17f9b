//! The pure-Rust core: no Python here (checked in CI with `grep -r pyo3 src/core`).
//!
//! One folder per concept, each using only the folders above it in this list:
//! - `common`: errors, the seeded RNG, the thread pool, progress and Ctrl-C, argument checks;
//! - `simd`: every vector loop (exponential, dots, kernel rows, merge filters), chosen at run time;
//! - `data`: training rows (dense, CSR, subsets), sparse runs, the LIBSVM reader, the byte codec;
//! - `kernels`: kernel functions, kernel blocks K(X, S), kernel rows and their LRU cache;
//! - `budget`: the support-vector store, merging (GSS, lookup tables) and budget maintenance;
//! - `budgeted`: BSGD, BSCA and the polish, over a budget of support vectors;
//! - `exact`: the dual problem, SMO, ALFPGM, shrinking and the exact kernel machines.

pub mod budget;
pub mod budgeted;
pub mod common;
pub mod data;
pub mod exact;
pub mod kernels;
pub mod simd;
