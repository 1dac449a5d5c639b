//! Every file access of the table layer, in one place: listing a table
//! directory, reading `table.json` and `manifest.json`, the commit lock and
//! atomic replacement (written beside, fsynced, renamed, directory fsynced).
//! Stores open their own files; nothing else here touches the disk.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::io::local as fileio;
use crate::{Error, Result};

/// Whether `dir/name` is a store directory (holds `meta.zr`).
pub(crate) fn is_store(dir: &Path) -> bool {
    dir.join("meta.zr").is_file()
}

pub(crate) fn is_dir(path: &Path) -> bool {
    path.is_dir()
}

pub(crate) fn is_file(path: &Path) -> bool {
    path.is_file()
}

pub(crate) fn exists(path: &Path) -> bool {
    path.exists()
}

/// The names of the store subdirectories of `dir`, sorted (by bytes, as
/// Python sorts `str`).
pub(crate) fn store_names(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not a name a column can have
        };
        if is_store(&dir.join(&name)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The bytes of `path` (at most `limit`), `None` when it does not exist.
pub(crate) fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut bytes = Vec::new();
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(Some(bytes))
}

/// Makes `dir` (and its parents) exist.
pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// Creates the directory `dir`; `Ok(false)` when it already exists.
pub(crate) fn create_dir(dir: &Path) -> Result<bool> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::io(dir, e)),
    }
}

pub(crate) fn remove_dir_all(dir: &Path) -> Result<()> {
    std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// Renames `from` over `to` (both in `dir`), then fsyncs `dir`.
pub(crate) fn rename_synced(from: &Path, to: &Path, dir: &Path) -> Result<()> {
    fileio::rename(from, to).map_err(|e| Error::io(to, e))?;
    fileio::sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Removes `path` if it exists, fsyncing its directory `dir`.
pub(crate) fn remove_file_synced(path: &Path, dir: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => fileio::sync_dir(dir).map_err(|e| Error::io(dir, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Eight random bytes as 16 hex digits (the kernel's randomness; the clock
/// and the process id where it cannot be read).
pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let read = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
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

/// The exclusive commit lock of a table directory: a `flock` on `name` in
/// `dir`, held until dropped (commits from any process serialise on it).
pub(crate) struct CommitLock {
    _file: File,
}

impl CommitLock {
    /// Blocks until the lock is ours.
    pub(crate) fn acquire(dir: &Path, name: &str) -> Result<CommitLock> {
        let path = dir.join(name);
        let file = fileio::open_rw(&path, false).map_err(|e| Error::io(&path, e))?;
        file.lock().map_err(|e| Error::io(&path, e))?;
        Ok(CommitLock { _file: file })
    }
}

/// Replaces `dir/name` with `bytes` atomically: written to `tmp` in `dir`
/// (a unique name per writer), fsynced, renamed over `dir/name`, then `dir`
/// fsynced. On failure the temporary file is removed and `dir/name` is as
/// it was.
pub(crate) fn write_atomically(dir: &Path, name: &str, tmp: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp: PathBuf = dir.join(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        fileio::sync_all(&f)?;
        drop(f);
        fileio::rename(&tmp, &path)?;
        fileio::sync_dir(dir)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(&path, e)
    })
}
