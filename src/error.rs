//! One error type for the engine, with a variant per kind of failure so that
//! bindings can map each to the exception a user expects.

use std::io;
use std::path::{Path, PathBuf};

use crate::kind::Kind;

pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// Another handle (in this or another process) holds the store's lock:
    /// a writer while any handle is open, a read-only handle while a
    /// writer is.
    #[error("store {} is busy: another handle holds the lock on its meta.zr (a writer needs the store to itself; read-only handles share it)", .0.display())]
    Busy(PathBuf),
    /// A write (`op`: append, delete, compact, sync) on a handle opened
    /// read-only (maps to `io.UnsupportedOperation`); nothing changed.
    #[error("cannot {op}: the handle on store {} is read-only: it shares the store with other readers and writes nothing; only a writable handle, which holds the store alone, can write", path.display())]
    ReadOnly { op: &'static str, path: PathBuf },
    /// A write on a sharded table's column ([`crate::Concat`]),
    /// which is read-only by design (maps to `io.UnsupportedOperation`).
    #[error("cannot {op}: {} is a column of a sharded table, which is read-only; its shards are written whole, so new data goes into new shards", path.display())]
    ShardedReadOnly { op: &'static str, path: PathBuf },
    /// A write on a nullable column (one with a validity stream), which the
    /// table does not keep in step (maps to `io.UnsupportedOperation`).
    #[error("cannot {op}: column {} is nullable (it has a validity stream), and writes to nullable columns are not supported; the column and its validity are written together, when the table is written", path.display())]
    NullableReadOnly { op: &'static str, path: PathBuf },
    /// No store at the path.
    #[error("no store at {}: {reason}", path.display())]
    NoStore { path: PathBuf, reason: String },
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
    /// An argument holds record indices outside the stores (maps to
    /// IndexError); the message names the argument and the bad index.
    #[error("{0}")]
    InvalidIndex(String),
    /// The operation is not allowed in this state (closed handle, forked child).
    #[error("{0}")]
    InvalidState(String),
    /// A result too large to allocate (maps to MemoryError).
    #[error("cannot allocate {bytes} bytes for {what}")]
    OutOfMemory { bytes: u64, what: String },
    /// A worker thread panicked (maps to RuntimeError); holds the panic's
    /// message.
    #[error("prefetch worker failed: {0}")]
    WorkerPanicked(String),
    /// A concurrent commit to a table made this one impossible (maps to
    /// `loaderx.CommitConflict`, a RuntimeError); the message names both.
    #[error("{0}")]
    CommitConflict(String),
    /// A table directory, shard directory or manifest that is not there
    /// (maps to FileNotFoundError); the message names it.
    #[error("{message}")]
    Missing { path: PathBuf, message: String },

    /// A value refused for a reason whose remedy a binding names in its
    /// own terms ([`Refusal`]); the message speaks of the data. A
    /// `ValueError` in Python, as `InvalidValue`.
    #[error("{message}")]
    Refused { refusal: Refusal, message: String },
}

/// Why a value was refused, where the remedy is the caller's API's to name
/// ([`Error::Refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Too few records, or too few bytes of them, to train a dictionary.
    DictionaryTooSmall,
    /// Credentials written into a location's URI (a user, a password, a
    /// query string): they belong in the location's options.
    CredentialsInUri,
    /// A writable open of a remote location, which opens read-only.
    RemoteWritable,
    /// A layout asked of a column the table stores in the other one (a
    /// column keeps its layout).
    LayoutKept,
}

impl Error {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn corrupted(file: &Path, invariant: impl Into<String>) -> Self {
        Error::Corrupted {
            file: file.to_path_buf(),
            invariant: invariant.into(),
        }
    }
}

/// The failure at the root of a wrapper error, for bindings and connectors
/// that must keep its class (see [`cause`]).
#[derive(Clone, Copy, Debug)]
pub enum Cause<'a> {
    /// A loaderx error (an I/O failure on a named file, a corrupted store...).
    Store(&'a Error),
    /// An operating-system error (it has an errno) with no file attached.
    Os(&'a io::Error),
}

/// Walks the `source()` chain of a wrapper error (`ArrowError::ExternalError`
/// and `IoError`, `ParquetError::External`, DataFusion's `External`,
/// `Context`, `Shared`, `ArrowError`, `IoError`...) and returns the first
/// loaderx [`Error`] or OS-level `io::Error` (one with an errno) it carries.
///
/// An `io::Error` without an errno that wraps another error (`io::Error::other`)
/// is looked through; one that wraps nothing (an unexpected end of file, bad
/// data) is no OS failure, and neither is anything else: `None` for those.
pub fn cause<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<Cause<'a>> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(store) = e.downcast_ref::<Error>() {
            return Some(Cause::Store(store));
        }
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if io.raw_os_error().is_some() {
                return Some(Cause::Os(io));
            }
            // io::Error::source() skips the wrapped error itself.
            return match io.get_ref() {
                Some(inner) => cause(inner),
                None => None,
            };
        }
        next = e.source();
    }
    None
}

/// [`cause`], as the [`Error::Io`] of `path` when the root is an OS error.
/// Returns `None` when the root is a loaderx error or no OS failure.
pub fn os_error_at(err: &(dyn std::error::Error + 'static), path: &Path) -> Option<Error> {
    match cause(err)? {
        Cause::Os(io) => Some(Error::io(
            path,
            io::Error::from_raw_os_error(io.raw_os_error()?),
        )),
        Cause::Store(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[derive(Debug)]
    struct Wrapper(Box<dyn std::error::Error + Send + Sync>);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "wrapped: {}", self.0)
        }
    }

    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.0.as_ref())
        }
    }

    #[test]
    fn cause_finds_os_and_store_errors_through_wrappers() {
        let enospc = Wrapper(Box::new(Wrapper(Box::new(io::Error::from_raw_os_error(
            libc::ENOSPC,
        )))));
        match cause(&enospc) {
            Some(Cause::Os(io)) => assert_eq!(io.raw_os_error(), Some(libc::ENOSPC)),
            other => panic!("{other:?}"),
        }
        let at = os_error_at(&enospc, Path::new("/x/out.parquet")).unwrap();
        assert!(matches!(&at, Error::Io { path, source }
            if path == Path::new("/x/out.parquet") && source.raw_os_error() == Some(libc::ENOSPC)));

        // A loaderx error wins over the io::Error it holds, even inside io::Error::other.
        let store = Wrapper(Box::new(io::Error::other(Error::io(
            Path::new("/s/data.zr"),
            io::Error::from_raw_os_error(libc::EIO),
        ))));
        match cause(&store) {
            Some(Cause::Store(Error::Io { path, .. })) => assert!(path.ends_with("data.zr")),
            other => panic!("{other:?}"),
        }
        assert!(os_error_at(&store, Path::new("/elsewhere")).is_none());

        let eof = Wrapper(Box::new(io::Error::from(io::ErrorKind::UnexpectedEof)));
        assert!(cause(&eof).is_none());
        let text = Wrapper("not an I/O failure".into());
        assert!(cause(&text).is_none());
    }
}
