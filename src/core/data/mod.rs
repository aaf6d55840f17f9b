//! Training and prediction rows as the solvers see them (`rows`: dense and CSR views, subsets,
//! norms and checks), sparse vectors in arenas (`sparse`), the LIBSVM reader (`libsvm`) and the
//! versioned byte codec of saved states (`codec`). Uses `common` and `simd`.

pub mod codec;
pub mod libsvm;
pub mod rows;
pub mod sparse;
pub mod sv_matrix;
