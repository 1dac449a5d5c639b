//! One mapping from engine errors to Python exceptions.
//!
//! `StoreBusy` and `Corrupted` are created here (both `OSError` subclasses,
//! named `loaderx.zrecord.*` so that they pickle by reference and document
//! where users meet them); everything else maps to the builtin a NumPy user
//! expects.

use std::io;
use std::path::Path;

use loaderx::error::{cause, Cause, Refusal};
use loaderx::Error;
use pyo3::exceptions::{
    PyConnectionAbortedError, PyConnectionError, PyConnectionRefusedError, PyConnectionResetError,
    PyFileExistsError, PyFileNotFoundError, PyIndexError, PyMemoryError, PyOSError,
    PyPermissionError, PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;

pyo3::create_exception!(
    loaderx.zrecord,
    StoreBusy,
    PyOSError,
    "Another handle, in this or another process, holds the store's lock.\n\n\
     A writer holds a store alone: ``DenseStore.open(path)`` takes a\n\
     non-blocking exclusive lock on ``meta.zr`` for the handle's lifetime.\n\
     Read-only handles (``open(path, readonly=True)``) take a shared lock:\n\
     they coexist with each other, in any processes, but not with a writer.\n\
     Close the other handle, open read-only, or share one handle (a dict of\n\
     open stores can feed any number of loaders and SQL queries in one\n\
     process)."
);

pyo3::create_exception!(
    loaderx,
    CommitConflict,
    PyRuntimeError,
    "A concurrent commit to the table made this one impossible.\n\n\
     The message names both commits (the version this one was planned on\n\
     and the one committed meanwhile). Nothing of this commit is visible;\n\
     reopen the table and try again. Independent commits (appends beside\n\
     appends, columns added beside other columns) are retried, never\n\
     raised."
);

pyo3::create_exception!(
    loaderx.zrecord,
    Corrupted,
    PyOSError,
    "A store or table on disk breaks an invariant of the format.\n\n\
     The message names the file (``meta.zr``, ``data.zr``, ``dict.zr``,\n\
     ``table.json`` or ``manifest.json``) and the broken invariant. Stores\n\
     are rebuildable training data: rebuild it from its source."
);

pyo3::import_exception!(io, UnsupportedOperation);

/// Adds the exception classes to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("StoreBusy", m.py().get_type::<StoreBusy>())?;
    m.add("Corrupted", m.py().get_type::<Corrupted>())?;
    m.add("CommitConflict", m.py().get_type::<CommitConflict>())?;
    Ok(())
}

pub fn to_py(err: Error) -> PyErr {
    store_error(&err)
}

/// What a Python caller does about `err`, where the core's message (which
/// speaks of the data only) leaves it open: the package's names for it.
fn python_hint(err: &Error) -> Option<&'static str> {
    Some(match err {
        Error::ReadOnly { .. } => {
            "it was opened with readonly=True; open it without readonly to write"
        }
        Error::ShardedReadOnly { .. } => {
            "add data as new shards: loaderx.new_shard, then loaderx.commit_shards"
        }
        Error::NullableReadOnly { .. } => {
            "write the table again with its nulls: loaderx.arrow.ingest"
        }
        Error::Refused { refusal, .. } => match refusal {
            Refusal::DictionaryTooSmall => "give loaderx.train_dict more or larger records",
            Refusal::CredentialsInUri => "storage_options is where they go",
            Refusal::RemoteWritable => "open it with readonly=True",
            Refusal::LayoutKept => "Table.compact() converts records columns to columnar",
            _ => return None,
        },
        _ => return None,
    })
}

/// The exception of a loaderx error.
pub fn store_error(err: &Error) -> PyErr {
    let msg = match python_hint(err) {
        Some(hint) => format!("{err} ({hint})"),
        None => err.to_string(),
    };
    match err {
        Error::Io { path, source } => os_error(source, Some(path)),
        Error::Corrupted { .. } => Corrupted::new_err(msg),
        Error::Busy(_) => StoreBusy::new_err(msg),
        // io.UnsupportedOperation is both an OSError and a ValueError.
        Error::ReadOnly { .. } | Error::ShardedReadOnly { .. } | Error::NullableReadOnly { .. } => {
            UnsupportedOperation::new_err(msg)
        }
        Error::NoStore { .. } | Error::Missing { .. } => PyFileNotFoundError::new_err(msg),
        Error::AlreadyExists { .. } => PyFileExistsError::new_err(msg),
        Error::WrongKind { .. }
        | Error::InvalidValue(_)
        | Error::Refused { .. }
        | Error::InvalidState(_) => PyValueError::new_err(msg),
        Error::InvalidType(_) => PyTypeError::new_err(msg),
        Error::IndexOutOfRange { .. } | Error::InvalidIndex(_) => PyIndexError::new_err(msg),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        Error::WorkerPanicked(_) => PyRuntimeError::new_err(msg),
        Error::CommitConflict(_) => CommitConflict::new_err(msg),
        _ => PyOSError::new_err(msg),
    }
}

/// `OSError(errno, strerror[, filename])`, which picks the matching subclass
/// (`FileNotFoundError`, `PermissionError`...); a plain `OSError(message)`
/// for an `io::Error` without an errno.
pub fn os_error(source: &io::Error, path: Option<&Path>) -> PyErr {
    let Some(code) = source.raw_os_error() else {
        // A remote request's error names its object itself.
        let text = source.to_string();
        let msg = match path {
            Some(p) if !text.contains(&*p.to_string_lossy()) => format!("{}: {text}", p.display()),
            _ => text,
        };
        return match source.kind() {
            io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
            io::ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
            io::ErrorKind::TimedOut => PyTimeoutError::new_err(msg),
            io::ErrorKind::ConnectionRefused => PyConnectionRefusedError::new_err(msg),
            io::ErrorKind::ConnectionReset => PyConnectionResetError::new_err(msg),
            io::ErrorKind::ConnectionAborted => PyConnectionAbortedError::new_err(msg),
            io::ErrorKind::NotConnected => PyConnectionError::new_err(msg),
            io::ErrorKind::AlreadyExists => PyFileExistsError::new_err(msg),
            _ => PyOSError::new_err(msg),
        };
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
