//! The one place core errors become Python exceptions.

use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyRuntimeError,
    PyValueError,
};
use pyo3::PyErr;

use crate::core::common::error::SvmError;

impl From<SvmError> for PyErr {
    fn from(err: SvmError) -> PyErr {
        let message = err.to_string();
        match err {
            SvmError::InvalidParameter { .. }
            | SvmError::InvalidInput(_)
            | SvmError::Parse { .. } => PyValueError::new_err(message),
            SvmError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                PyFileNotFoundError::new_err(message)
            }
            SvmError::Io { .. } => PyOSError::new_err(message),
            SvmError::OutOfMemory(_) => PyMemoryError::new_err(message),
            SvmError::Interrupted => PyKeyboardInterrupt::new_err("interrupted (Ctrl-C)"),
        }
    }
}

/// Runs core work, turning a panic (a bug, never expected) into a RuntimeError instead of letting
/// it cross into Python as a PanicException.
pub fn no_panic<T>(f: impl FnOnce() -> Result<T, SvmError>) -> Result<T, PyErr> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(PyErr::from),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(PyRuntimeError::new_err(format!(
                "internal error in budgetsvm (please report it): {what}"
            )))
        }
    }
}
