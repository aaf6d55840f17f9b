//! Kernel values and where they are computed: the kernel functions (`kernel`: rbf, linear, poly,
//! sigmoid, precomputed, from dot products), kernel blocks K(X, S) for prediction and the polish
//! (`kernel_block`), and the exact solvers' kernel rows: computed in parallel batches
//! (`kernel_rows`), cached (`kernel_cache`), shared between one-vs-one pairs (`shared_rows`),
//! or kept by data row from a producer outside the engine (`source_rows`: a callable kernel's
//! rows from Python). Uses `common`, `simd` and `data`.

pub mod kernel;
pub mod kernel_block;
pub mod kernel_cache;
pub mod kernel_rows;
pub mod shared_rows;
pub mod source_rows;
