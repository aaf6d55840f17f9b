//! The one error type of the core. The binding layer maps each variant to a Python exception
//! (`src/py/error.rs`); nothing on a user-controlled path panics.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum SvmError {
    /// A hyper-parameter outside its domain (negative C, budget 0, unknown method name, ...).
    #[error("invalid parameter {name}: {message}")]
    InvalidParameter { name: &'static str, message: String },
    /// Data that cannot be used: wrong shape, NaN/inf, empty, malformed CSR, one class only, ...
    #[error("{0}")]
    InvalidInput(String),
    /// A malformed line of a LIBSVM/svmlight file, with its 1-based line number.
    #[error("{source_name}, line {line}: {message}")]
    Parse {
        source_name: String,
        line: usize,
        message: String,
    },
    /// Reading a file failed (missing file, permission, broken compressed stream).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A computation whose memory, known before it starts, exceeds what the machine has.
    #[error("{0}")]
    OutOfMemory(String),
    /// Training stopped because the caller asked it to (Ctrl-C in Python).
    #[error("interrupted")]
    Interrupted,
}

impl SvmError {
    pub fn invalid_parameter(name: &'static str, message: impl fmt::Display) -> Self {
        SvmError::InvalidParameter {
            name,
            message: message.to_string(),
        }
    }

    pub fn invalid_input(message: impl fmt::Display) -> Self {
        SvmError::InvalidInput(message.to_string())
    }
}

pub type Result<T, E = SvmError> = std::result::Result<T, E>;
