//! A budget of support vectors: the store with its global scale factor and the step's kernel row
//! (`model`), the merge math shared with the build script (`merge_math`), the partner search by
//! golden section or lookup table (`merge`), and budget maintenance by removal, projection or
//! merging (`maintenance`). Uses `common`, `simd`, `data` and `kernels`.

pub mod maintenance;
pub mod merge;
pub mod merge_math;
pub mod model;
