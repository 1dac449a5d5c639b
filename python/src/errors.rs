//! One mapping from engine errors to Python exceptions.
//!
//! `StoreBusy` and `Corrupted` are defined in Python (`loaderx._errors`) so
//! that they pickle and document like any Python exception; everything else
//! maps to the builtin a NumPy user expects.

use std::io;
use std::path::Path;

use loaderx::error::{cause, Cause};
use loaderx::Error;
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError, PyRuntimeError,
    PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

fn python_error(py: Python<'_>, name: &str, cell: &'static PyOnceLock<Py<PyType>>) -> Py<PyType> {
    cell.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let ty = py.import("loaderx._errors")?.getattr(name)?;
        Ok(ty.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.clone_ref(py))
    .unwrap_or_else(|_| py.get_type::<PyOSError>().unbind())
}

fn raise_named(name: &str, cell: &'static PyOnceLock<Py<PyType>>, msg: String) -> PyErr {
    Python::attach(|py| {
        let ty = python_error(py, name, cell);
        PyErr::from_type(ty.into_bound(py), msg)
    })
}

pyo3::import_exception!(io, UnsupportedOperation);

static STORE_BUSY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CORRUPTED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

pub fn to_py(err: Error) -> PyErr {
    store_error(&err)
}

/// The exception of a loaderx error.
pub fn store_error(err: &Error) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::Io { path, source } => os_error(source, Some(path)),
        Error::Corrupted { .. } => raise_named("Corrupted", &CORRUPTED, msg),
        Error::Busy(_) => raise_named("StoreBusy", &STORE_BUSY, msg),
        // io.UnsupportedOperation is both an OSError and a ValueError.
        Error::ReadOnly { .. } | Error::ShardedReadOnly { .. } | Error::NullableReadOnly { .. } => {
            UnsupportedOperation::new_err(msg)
        }
        Error::NotFound { .. } | Error::Missing { .. } => PyFileNotFoundError::new_err(msg),
        Error::AlreadyExists { .. } => PyFileExistsError::new_err(msg),
        Error::WrongKind { .. } | Error::InvalidValue(_) | Error::InvalidState(_) => {
            PyValueError::new_err(msg)
        }
        Error::InvalidType(_) => PyTypeError::new_err(msg),
        Error::IndexOutOfRange { .. } | Error::InvalidIndex(_) => PyIndexError::new_err(msg),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        Error::WorkerPanicked(_) => PyRuntimeError::new_err(msg),
        _ => PyOSError::new_err(msg),
    }
}

/// `OSError(errno, strerror[, filename])`, which picks the matching subclass
/// (`FileNotFoundError`, `PermissionError`...); a plain `OSError(message)`
/// for an `io::Error` without an errno.
pub fn os_error(source: &io::Error, path: Option<&Path>) -> PyErr {
    let Some(code) = source.raw_os_error() else {
        return PyOSError::new_err(match path {
            Some(p) => format!("{}: {source}", p.display()),
            None => source.to_string(),
        });
    };
    // std spells it "No space left on device (os error 28)"; Python's own
    // OSError says "[Errno 28] No space left on device".
    let text = source.to_string();
    let suffix = format!(" (os error {code})");
    let strerror = text.strip_suffix(&suffix).unwrap_or(&text).to_string();
    match path {
        Some(p) => PyOSError::new_err((code, strerror, p.display().to_string())),
        None => PyOSError::new_err((code, strerror)),
    }
}

/// The exception of the loaderx error or OS error that a wrapper error
/// (`ArrowError`, `ParquetError`, `DataFusionError`, at any depth) carries;
/// `None` when it carries neither, for the caller's own mapping.
pub fn wrapped(err: &(dyn std::error::Error + 'static)) -> Option<PyErr> {
    Some(match cause(err)? {
        Cause::Store(e) => store_error(e),
        Cause::Os(io) => os_error(io, None),
    })
}

/// Whether `err` is an `OSError` (I/O failures, `Corrupted`, `StoreBusy`).
pub fn is_os_error(err: &PyErr) -> bool {
    Python::attach(|py| err.is_instance_of::<PyOSError>(py))
}

/// `?`-friendly conversion.
pub trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
