//! Data in and out: the LIBSVM/svmlight reader (whole files, chunks, summaries) and statistics
//! of a feature matrix.

use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{dict, Features};
use super::runtime::detached;
use crate::core::data::libsvm::{
    read_libsvm_file, summarize_libsvm_file, LibsvmChunks, LibsvmData,
};
use crate::core::data::rows::entry_variance;

/// Reads a LIBSVM/svmlight file (plain, gzip, bzip2 or xz): (data, indices, indptr, labels, n_features).
#[pyfunction]
pub fn load_libsvm(py: Python<'_>, path: std::path::PathBuf) -> PyResult<CsrChunk<'_>> {
    let data = detached(py, || read_libsvm_file(&path))?;
    Ok(csr_chunk(py, data))
}

type CsrChunk<'py> = (
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
    usize,
);

fn csr_chunk(py: Python<'_>, data: LibsvmData) -> CsrChunk<'_> {
    (
        data.values.into_pyarray(py),
        data.indices.into_pyarray(py),
        data.indptr.into_pyarray(py),
        data.labels.into_pyarray(py),
        data.n_features,
    )
}

/// Iterates over a LIBSVM file (plain, gzip, bzip2 or xz) in chunks of at most `chunk_rows`
/// lines, each as (data, indices, indptr, labels, n_features) like `load_libsvm`; reading and
/// parsing release the GIL.
#[pyclass(module = "budgetsvm._budgetsvm")]
pub struct LibsvmChunkReader {
    inner: std::sync::Mutex<LibsvmChunks>,
}

#[pymethods]
impl LibsvmChunkReader {
    #[new]
    fn new(py: Python<'_>, path: std::path::PathBuf, chunk_rows: usize) -> PyResult<Self> {
        let chunks = detached(py, || LibsvmChunks::open(&path, chunk_rows))?;
        Ok(LibsvmChunkReader {
            inner: std::sync::Mutex::new(chunks),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<CsrChunk<'py>>> {
        let next = detached(py, || {
            let mut chunks = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            chunks.next_chunk()
        })?;
        Ok(next.map(|data| csr_chunk(py, data)))
    }

    /// Lines of the file read so far.
    #[getter]
    fn lines_read(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lines_read()
    }
}

/// One chunked pass over a LIBSVM file keeping only counts: a dict with n_rows, n_features,
/// labels (distinct, sorted), value_sum and value_sq_sum.
#[pyfunction]
pub fn summarize_libsvm<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    chunk_rows: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let summary = detached(py, || summarize_libsvm_file(&path, chunk_rows))?;
    dict!(PyDict::new(py), {
        "n_rows" => summary.n_rows,
        "n_features" => summary.n_features,
        "labels" => summary.labels.into_pyarray(py),
        "label_counts" => summary.label_counts.into_pyarray(py),
        "value_sum" => summary.value_sum,
        "value_sq_sum" => summary.value_sq_sum,
    })
}

/// Variance of all entries of X (numpy's `X.var()`), the same bits for dense and CSR input.
#[pyfunction]
pub fn feature_variance(py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let features = Features::extract(x)?;
    let rows = features.rows()?;
    detached(py, || Ok(entry_variance(&rows)))
}
