//! The exact solvers: the dual problem and its state (`dual`, with the kernel rows' precision),
//! LIBSVM's SMO with the second-order working set (`smo`), ALFPGM's multi-pair steps
//! (`alfpgm`), shrinking (`shrinking`), strides along the directions pair steps creep along
//! (`stride`), and the machines built on them (`machines`: C-SVC and nu-SVC one-vs-one,
//! epsilon-SVR, nu-SVR, one-class). Uses `common`, `simd`, `data` and `kernels`, never `budget`
//! or `budgeted`.

pub mod alfpgm;
pub mod dual;
pub mod machines;
pub mod shrinking;
pub mod smo;
pub mod stride;

#[cfg(test)]
mod shrinking_tests;
