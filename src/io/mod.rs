//! Storage: where the engine's bytes live, behind one seam.
//!
//! [`Storage`] is a location that holds a store's files (a local
//! directory, or a prefix of an object store; see `docs/storage.md`), and
//! [`StorageFile`] one open file in it. Everything the store engine reads
//! or writes goes through them: positional range reads, an optional
//! whole-file mapping (local files only), sizes, listing, and the few
//! writes a commit needs (positional writes, truncation, syncs, creation,
//! removal, the no-replace rename of create, the lock), and what the table
//! layer adds: what a path is ([`Storage::kind`]), listing a directory,
//! the replacing rename of an atomic replacement (`table.json`,
//! `manifest.json`) and removing a half-made directory.
//!
//! [`Location`] (a path or URI with the storage that reaches it) is a
//! plain value of this layer; what a remote open fetches first is planned
//! by what opens (the store's open, `table::warm`).
//!
//! Two implementations: [`Local`], the local filesystem, through the
//! system calls of [`local`], each write-side call a fault point under the
//! `fault-injection` feature (see [`fault`]); and, with the `remote`
//! feature, `remote::Remote`, the read side over an object store (s3, gs,
//! az, http), whose gathers plan their own range requests. The engine holds
//! a location as [`Fs`] and its files as [`FsFile`], two small enums, so a
//! local read is one predictable branch away from the mapping copy or the
//! `pread` it always was.

use std::ffi::OsString;
use std::fs::TryLockError;
use std::io;
use std::path::Path;

#[cfg(feature = "fault-injection")]
pub mod fault;
mod fs;
pub(crate) mod local;
mod location;
pub(crate) mod lock;
#[cfg(feature = "remote")]
pub(crate) mod remote;
pub(crate) mod uri;

pub(crate) use fs::{Fs, FsFile};
pub(crate) use local::{Local, LocalFile};
#[cfg(feature = "remote")]
pub use location::CACHE_BLOCK;
pub use location::{CacheOptions, Location};
#[cfg(feature = "remote")]
pub(crate) use remote::Runs;

/// Bytes fetched ahead of a gather from a remote object (none exist in a
/// build without the `remote` feature).
#[cfg(not(feature = "remote"))]
pub(crate) enum Runs {}

#[cfg(not(feature = "remote"))]
impl Runs {
    pub(crate) fn slice(&self, _offset: u64, _len: usize) -> Option<&[u8]> {
        match *self {}
    }

    pub(crate) fn landing_id(&self, _offset: u64, _len: usize) -> Option<usize> {
        match *self {}
    }
}

/// The engine error of an I/O failure at `path`: [`crate::Error::Io`], or
/// `Corrupted` for a remote object that changed under an open handle.
pub(crate) fn io_error(path: &Path, e: io::Error) -> crate::Error {
    #[cfg(feature = "remote")]
    return remote::to_error(path, e);
    #[cfg(not(feature = "remote"))]
    crate::Error::io(path, e)
}

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    /// A directory (on an object store: a prefix with objects below it).
    Dir,
}

/// A location holding files: a local directory tree, or (read-only) an
/// object store.
pub(crate) trait Storage: Send + Sync {
    type File: StorageFile;

    /// Opens the existing file `path`; for writing too unless `writable`
    /// is false.
    fn open(&self, path: &Path, writable: bool) -> io::Result<Self::File>;
    /// Opens `path` for reading and writing, creating it when missing;
    /// with `truncate` an existing file is emptied.
    fn create(&self, path: &Path, truncate: bool) -> io::Result<Self::File>;
    /// The whole of a small file (`dict.zr`, `table.json`).
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Makes `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Removes the file `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, failing with `AlreadyExists` rather than
    /// replacing an existing `to`.
    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the names created or renamed in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// What `path` is, None when nothing is there.
    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>>;
    /// The names of the entries directly inside the directory `dir`, in no
    /// particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>>;
    /// Makes the directory `dir`; `AlreadyExists` when something is there.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Removes the empty directory `dir`.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// Removes the directory `dir` and everything in it.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Renames `from` over `to`, replacing it (the commit point of an
    /// atomic replacement).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
}

/// One open file of a [`Storage`].
pub(crate) trait StorageFile: Send + Sync {
    /// Its size in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Fills `buf` from offset `at`; `UnexpectedEof` past the end.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
    /// A read-only mapping of bytes `0..len` (it may extend past the end
    /// of the file), or None where the storage cannot map (remote objects)
    /// or the system refuses: readers then use [`StorageFile::read_exact_at`].
    ///
    /// # Safety
    ///
    /// While the mapping lives, no one may change the bytes of the file
    /// that are read through it (the store lock and the engine's rule that
    /// committed bytes below the tail are never rewritten while mapped
    /// guarantee it).
    unsafe fn map(&self, len: usize) -> Option<memmap2::Mmap>;
    /// Writes all of `buf` at offset `at`.
    fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and metadata durable.
    fn sync_all(&self) -> io::Result<()>;
    /// Takes a non-blocking lock on the file: shared or exclusive.
    fn try_lock(&self, shared: bool) -> Result<(), TryLockError>;
    /// Waits for the exclusive lock on the file (a table's commit lock).
    fn lock(&self) -> io::Result<()>;
    /// Releases the lock (for every holder of the open file description).
    fn unlock(&self) -> io::Result<()>;
}

/// The bytes of `path` (at most `limit`), `None` when it does not exist.
pub(crate) fn read(fs: &Fs, path: &Path, limit: u64) -> crate::Result<Option<Vec<u8>>> {
    let file = match fs.open(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    let len = file.len().map_err(|e| io_error(path, e))?.min(limit);
    let len = usize::try_from(len).map_err(|_| crate::Error::OutOfMemory {
        bytes: len,
        what: format!("reading {}", path.display()),
    })?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| io_error(path, e))?;
    Ok(Some(bytes))
}

/// The whole of the small file `path` on `fs` (at most 64 MiB), None when
/// it does not exist.
pub(crate) fn read_whole(fs: &Fs, path: &Path) -> crate::Result<Option<Vec<u8>>> {
    read(fs, path, 1 << 26)
}

/// `bytes` random bytes as hex digits (the kernel's randomness; the clock
/// and the process id where it cannot be read).
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf));
    if read.is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = now ^ (u64::from(std::process::id()) << 32);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (seed.rotate_left(8 * i as u32) & 0xff) as u8;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
