//! One mapping from engine errors to Python exceptions.
//!
//! `StoreBusy` and `Corrupted` are defined in Python (`loaderx._errors`) so
//! that they pickle and document like any Python exception; everything else
//! maps to the builtin a NumPy user expects.

use loaderx::Error;
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError, PyTypeError,
    PyValueError,
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

static STORE_BUSY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CORRUPTED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

pub fn to_py(err: Error) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::Io { path, source } => match source.raw_os_error() {
            // OSError(errno, strerror, filename) picks the matching subclass.
            Some(code) => {
                PyOSError::new_err((code, source.to_string(), path.display().to_string()))
            }
            None => PyOSError::new_err(msg),
        },
        Error::Corrupted { .. } => raise_named("Corrupted", &CORRUPTED, msg),
        Error::Busy(_) => raise_named("StoreBusy", &STORE_BUSY, msg),
        Error::NotFound { .. } => PyFileNotFoundError::new_err(msg),
        Error::AlreadyExists { .. } => PyFileExistsError::new_err(msg),
        Error::WrongKind { .. } | Error::InvalidValue(_) | Error::InvalidState(_) => {
            PyValueError::new_err(msg)
        }
        Error::InvalidType(_) => PyTypeError::new_err(msg),
        Error::IndexOutOfRange { .. } => PyIndexError::new_err(msg),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        _ => PyOSError::new_err(msg),
    }
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
