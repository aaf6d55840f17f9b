//! The Python binding: the only module that knows about Python. Each entry point converts its
//! arguments to core views (`convert`), runs the work with the GIL released (`runtime`), and
//! converts the result back; the entry points live in one file per family (`budgeted`, `exact`,
//! `predict`, `polish`, `data`), registered below as the extension module `_budgetsvm`.

mod budgeted;
mod convert;
mod data;
mod error;
mod exact;
mod keywords;
mod polish;
mod predict;
mod runtime;

#[pyo3::pymodule]
mod _budgetsvm {
    #[pymodule_export]
    use super::budgeted::{
        fit_bsca, fit_bsgd, fit_pairs, merge_search, partial_fit_pairs, reduce_budget, BsgdStream,
    };
    #[pymodule_export]
    use super::data::{feature_variance, load_libsvm, summarize_libsvm, LibsvmChunkReader};
    #[pymodule_export]
    use super::exact::{fit_exact, kernel_rows};
    #[pymodule_export]
    use super::polish::{
        add_gram_change, polish, polish_file, polish_line_walk, polish_newton_point,
        polish_settled_step, PolishPartition, PolishPreconditioner,
    };
    #[pymodule_export]
    use super::predict::{decision_from_kernel, decision_function, rbf_kernel};
    #[pymodule_export]
    use super::runtime::{get_num_threads, requested_num_threads, set_num_threads, simd_level};

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add(
            "DEFAULT_TABLE_SIZE",
            crate::core::budget::merge::DEFAULT_TABLE_SIZE,
        )?;
        m.add("MAX_THREADS", crate::core::common::parallel::MAX_THREADS)?;
        {
            // The Hessian-free polish's settings, which the distributed polish's driver
            // (`budgetsvm.dask`) follows too.
            use crate::core::budgeted::polish as p;
            m.add("HESSIAN_FREE_BASIS", p::HESSIAN_FREE_BASIS)?;
            m.add("POLISH_MAX_CG_PRODUCTS", p::MAX_CG_PRODUCTS)?;
            m.add("POLISH_RESCALE_FACTOR", p::RESCALE_FACTOR)?;
            m.add("POLISH_CG_TOL", (p::CG_TOL_FLOOR, p::CG_TOL_EARLY))?;
            m.add("POLISH_NO_CURVATURE", p::NO_CURVATURE)?;
        }
        // Load NumPy's C API now. Loaded lazily, it is first needed for the arrays a long read
        // returns, and an import run while a Ctrl-C is pending fails inside rust-numpy as a
        // PanicException instead of a KeyboardInterrupt.
        numpy::PyArray1::<f64>::zeros(m.py(), 0, false);
        Ok(())
    }
}
