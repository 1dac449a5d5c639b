//! One error type for the engine, with a variant per kind of failure so that
//! bindings can map each to the exception a user expects.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which of the two store contracts a store follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dense,
    Ragged,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Dense => "dense",
            Kind::Ragged => "ragged",
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O failure on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The store on disk breaks an invariant of the format. `file` is the
    /// full path of the offending file (`meta.zr`, `data.zr` or `dict.zr`).
    #[error("corrupted store: {}: {invariant}", file.display())]
    Corrupted { file: PathBuf, invariant: String },
    /// Another handle (in this or another process) holds the store's lock.
    #[error("store {} is busy: another handle holds the lock on its meta.zr", .0.display())]
    Busy(PathBuf),
    /// No store at the path.
    #[error("no store at {}: {reason}", path.display())]
    NotFound { path: PathBuf, reason: String },
    /// Create on a path that already holds a store.
    #[error("{}: {reason}", path.display())]
    AlreadyExists { path: PathBuf, reason: String },
    /// A store of the other kind was opened.
    #[error("{} holds a {actual} store, not a {expected} store", path.display())]
    WrongKind {
        path: PathBuf,
        expected: Kind,
        actual: Kind,
    },
    /// An argument has the wrong value (maps to ValueError).
    #[error("{0}")]
    InvalidValue(String),
    /// An argument has the wrong type or dtype (maps to TypeError).
    #[error("{0}")]
    InvalidType(String),
    /// A record index outside `0..len`.
    #[error("index {index} is out of range for a store of length {len}")]
    IndexOutOfRange { index: i128, len: u64 },
    /// The operation is not allowed in this state (closed handle, forked child).
    #[error("{0}")]
    InvalidState(String),
    /// A result too large to allocate (maps to MemoryError).
    #[error("cannot allocate {bytes} bytes for {what}")]
    OutOfMemory { bytes: u64, what: String },
}

impl Error {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn corrupted(file: &Path, invariant: impl Into<String>) -> Self {
        Error::Corrupted {
            file: file.to_path_buf(),
            invariant: invariant.into(),
        }
    }
}
