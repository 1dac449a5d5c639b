//! Every file access of the table layer, in one place and through the
//! storage seam ([`crate::io::Storage`]): what a path is, listing a table
//! directory, reading `table.json` and `manifest.json`, making and removing
//! shard directories, the commit lock and atomic replacement (written
//! beside, fsynced, renamed, directory fsynced), walking and sizing a
//! local tree. Stores and columnar column files open their own files;
//! nothing else in the table layer touches the disk.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::io::{io_error, EntryKind, Fs, Local, LocalFile, Storage, StorageFile};
use crate::{Error, Result};

/// Where tables are written: the local filesystem (remote tables are read
/// through the `fs` their reader passes, and written by uploading).
const FS: Local = Local;

fn kind(fs: &Fs, path: &Path) -> Option<EntryKind> {
    // An unreadable path counts as absent; opening it then names the error.
    fs.kind(path).ok().flatten()
}

/// The object a copy writes first into its destination and removes last:
/// while it is there, the directory is not a table (see `copy.rs`).
pub const INCOMPLETE: &str = ".loaderx-incomplete";

/// Fails when `dir` holds an interrupted copy ([`INCOMPLETE`]).
pub(crate) fn check_complete(fs: &Fs, dir: &Path) -> Result<()> {
    if is_file(fs, &dir.join(INCOMPLETE)) {
        return Err(Error::InvalidValue(format!(
            "{} is not a table: it holds an interrupted copy ({INCOMPLETE} is there until a copy completes); copy the table to it again",
            dir.display()
        )));
    }
    Ok(())
}

/// Whether `dir` is a store directory (holds `meta.zr`).
pub(crate) fn is_store(fs: &Fs, dir: &Path) -> bool {
    is_file(fs, &dir.join("meta.zr"))
}

pub(crate) fn is_dir(fs: &Fs, path: &Path) -> bool {
    kind(fs, path) == Some(EntryKind::Dir)
}

pub(crate) fn is_file(fs: &Fs, path: &Path) -> bool {
    kind(fs, path) == Some(EntryKind::File)
}

pub(crate) fn exists(fs: &Fs, path: &Path) -> bool {
    kind(fs, path).is_some()
}

/// Whether `dir` holds a column of either layout: a store (`meta.zr`) or
/// a columnar column (`column.zc`).
pub(crate) fn is_column(fs: &Fs, dir: &Path) -> bool {
    is_store(fs, dir) || crate::columnar::is_column_dir(fs, dir)
}

/// The names of the column subdirectories of `dir` (stores and columnar
/// columns), sorted (by bytes, as Python sorts `str`).
pub(crate) fn column_dirs(fs: &Fs, dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for name in fs.list(dir).map_err(|e| io_error(dir, e))? {
        let Ok(name) = name.into_string() else {
            continue; // not a name a column can have
        };
        if is_column(fs, &dir.join(&name)) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The entry names of the directory `dir`, sorted (names that are not
/// UTF-8 left out: no table file has one).
pub(crate) fn list(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = FS
        .list(dir)
        .map_err(|e| Error::io(dir, e))?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .collect();
    names.sort();
    Ok(names)
}

pub(crate) fn remove_file(path: &Path) -> Result<()> {
    FS.remove(path).map_err(|e| Error::io(path, e))
}

pub(crate) fn remove_dir(dir: &Path) -> Result<()> {
    FS.remove_dir(dir).map_err(|e| Error::io(dir, e))
}

pub(crate) use crate::io::{read, read_whole};

/// [`read_whole`] of a small object in one request where `fs` is a
/// bucket (a GET whose answer is kept; a missing object is remembered as
/// absent), the same read locally.
pub(crate) fn read_object(fs: &Fs, path: &Path) -> Result<Option<Vec<u8>>> {
    prefetch(fs, std::slice::from_ref(&path.to_path_buf()))?;
    read_whole(fs, path)
}

/// Where `fs` is a bucket, fetches the small objects `paths` concurrently
/// (one request each) so that reading them costs nothing more; locally
/// nothing.
#[cfg_attr(not(feature = "remote"), allow(unused_variables))]
pub(crate) fn prefetch(fs: &Fs, paths: &[PathBuf]) -> Result<()> {
    #[cfg(feature = "remote")]
    if let Fs::Remote(r) = fs {
        let mut keys = Vec::with_capacity(paths.len());
        for p in paths {
            keys.push(r.key_of(p).map_err(|e| io_error(p, e))?);
        }
        if let Some(first) = paths.first() {
            r.prefetch(&keys).map_err(|e| io_error(first, e))?;
        }
    }
    Ok(())
}

pub(crate) use crate::io::local::walk;

/// The bytes of every file below the local directory `dir`.
pub(crate) fn tree_size(dir: &Path) -> Result<u64> {
    Ok(walk(dir)?.iter().map(|(_, len)| len).sum())
}

/// The size of the local file `path`; None when it cannot be read.
pub(crate) fn file_len(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// `path` with its symlinks resolved, where it exists.
pub(crate) fn canonical(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// Makes `dir` (and its parents) exist.
pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    FS.create_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// Creates the directory `dir`; `Ok(false)` when it already exists.
pub(crate) fn create_dir(dir: &Path) -> Result<bool> {
    match FS.create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::io(dir, e)),
    }
}

pub(crate) fn remove_dir_all(dir: &Path) -> Result<()> {
    FS.remove_dir_all(dir).map_err(|e| Error::io(dir, e))
}

/// Renames `from` over `to` (both in `dir`), then fsyncs `dir`.
pub(crate) fn rename_synced(from: &Path, to: &Path, dir: &Path) -> Result<()> {
    FS.rename(from, to).map_err(|e| Error::io(to, e))?;
    FS.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// Removes `path` if it exists, fsyncing its directory `dir`.
pub(crate) fn remove_file_synced(path: &Path, dir: &Path) -> Result<()> {
    match FS.remove(path) {
        Ok(()) => FS.sync_dir(dir).map_err(|e| Error::io(dir, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

pub(crate) use crate::io::random_hex;

/// The exclusive commit lock of a table directory: a lock on the file
/// `name` in `dir`, held until dropped (commits from any process serialise
/// on it).
pub(crate) struct CommitLock {
    _file: LocalFile,
}

impl CommitLock {
    /// Blocks until the lock is ours.
    pub(crate) fn acquire(dir: &Path, name: &str) -> Result<CommitLock> {
        let path = dir.join(name);
        let file = FS.create(&path, false).map_err(|e| Error::io(&path, e))?;
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
        let f = FS.create(&tmp, true)?;
        f.write_all_at(bytes, 0)?;
        f.sync_all()?;
        drop(f);
        FS.rename(&tmp, &path)?;
        FS.sync_dir(dir)
    };
    write().map_err(|e| {
        let _ = FS.remove(&tmp);
        Error::io(&path, e)
    })
}

/// How long a dead writer's leftovers (unnamed shard and group
/// directories, local staging directories) are left at least, whatever
/// `cleanup`'s `older_than` says: a leftover younger than this may be a
/// write whose lease is not taken yet.
pub(crate) const LEFTOVER_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The lease file of a write in progress: an exclusive lock on a file,
/// held by the writer's process until the lease is dropped. The kernel
/// releases it when the process dies, so a lease that another process can
/// lock is a dead writer's (whatever its age: a long write is alive).
pub(crate) struct Lease {
    path: PathBuf,
    _file: File,
}

impl Lease {
    /// Takes the lease `path` (its directory made if needed).
    pub(crate) fn take(path: &Path) -> Result<Lease> {
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
        };
        let mut opened = Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        // Another writer giving its lease back removes the directory when
        // it is left empty: made again, and the open tried again.
        for _ in 0..64 {
            if let Some(dir) = path.parent() {
                // Made, or removed, meanwhile by another writer: the open
                // says whether it is there.
                let _ = std::fs::create_dir_all(dir);
            }
            opened = open();
            if !matches!(&opened, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
                break;
            }
        }
        let file = opened.map_err(|e| Error::io(path, e))?;
        file.try_lock().map_err(|e| {
            Error::io(
                path,
                match e {
                    std::fs::TryLockError::Error(e) => e,
                    std::fs::TryLockError::WouldBlock => std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "another live writer holds this lease",
                    ),
                },
            )
        })?;
        Ok(Lease {
            path: path.to_path_buf(),
            _file: file,
        })
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease({})", self.path.display())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Removed while still locked; the lock goes with the file handle.
        // Its directory goes too when it is left empty (a write's leases).
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent().filter(|d| d.ends_with(LEASES_DIR)) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Whether a live process holds the lease file `path` (false when there
/// is none, or when this process can lock it).
pub(crate) fn lease_held(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(std::fs::TryLockError::Error(_)) => false,
    }
}

/// How long ago `path` was last modified (zero when unknown: never old).
pub(crate) fn age(path: &Path) -> std::time::Duration {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default()
}

/// The kinds of local staging directory a write to a bucket makes.
const STAGING_KINDS: [&str; 4] = ["shard", "group", "validity", "ragged"];
/// The lease file inside a staging directory (beside what it uploads).
const STAGING_LEASE: &str = ".loaderx-lease";

/// The staging directories of this process and their leases.
static STAGING: std::sync::Mutex<std::collections::BTreeMap<PathBuf, Lease>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn staging() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<PathBuf, Lease>> {
    STAGING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new local staging directory `<temp>/loaderx-<kind>-<12 hex>` of a
/// write to a bucket, whose lease this process holds until
/// [`remove_staging`] (or its death): [`reclaim_staging`] removes it only
/// then.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn staging_dir(kind: &str) -> Result<PathBuf> {
    debug_assert!(STAGING_KINDS.contains(&kind));
    let dir = std::env::temp_dir().join(format!("loaderx-{kind}-{}", random_hex(6)));
    create_dir_all(&dir)?;
    let lease = Lease::take(&dir.join(STAGING_LEASE))?;
    staging().insert(dir.clone(), lease);
    Ok(dir)
}

/// Removes the staging directory `dir` (made by [`staging_dir`]) and
/// gives its lease back; errors are ignored (a leftover is reclaimed).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn remove_staging(dir: &Path) {
    let lease = staging().remove(dir);
    let _ = remove_dir_all(dir);
    drop(lease);
}

/// The staging directories one write made (a [`TableWrite`] or a
/// [`ColumnsWrite`]): whatever the write did not hand on or remove itself
/// goes when the write does, so that a write that fails (an error, not a
/// kill) leaves no staging directory behind.
///
/// [`TableWrite`]: super::TableWrite
/// [`ColumnsWrite`]: super::ColumnsWrite
#[derive(Debug, Default)]
pub(crate) struct StagingSet(std::sync::Mutex<Vec<PathBuf>>);

impl StagingSet {
    /// A new staging directory of `kind` ([`staging_dir`]), removed at the
    /// latest when the set is dropped.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub(crate) fn make(&self, kind: &str) -> Result<PathBuf> {
        let dir = staging_dir(kind)?;
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dir.clone());
        Ok(dir)
    }
}

impl Drop for StagingSet {
    fn drop(&mut self) {
        let dirs = std::mem::take(self.0.get_mut().unwrap_or_else(|e| e.into_inner()));
        for dir in dirs {
            // Those removed already (uploaded, or dropped on an error) are
            // no longer this process's.
            if staging().contains_key(&dir) {
                remove_staging(&dir);
            }
        }
    }
}

/// Removes the local staging directories of dead writers to buckets (in
/// the temporary directory: no live process holds their lease) that are
/// older than `min_age` (a cleanup's: at least [`LEFTOVER_MIN_AGE`] but in
/// tests); returns the bytes freed.
pub(crate) fn reclaim_staging(min_age: std::time::Duration) -> u64 {
    let tmp = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return 0;
    };
    let mut freed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = STAGING_KINDS.iter().any(|k| {
            name.strip_prefix("loaderx-")
                .and_then(|r| r.strip_prefix(k))
                .and_then(|r| r.strip_prefix('-'))
                .is_some_and(|hex| hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        });
        let dir = entry.path();
        if !ours || !dir.is_dir() || staging().contains_key(&dir) {
            continue;
        }
        if lease_held(&dir.join(STAGING_LEASE)) || age(&dir) < min_age {
            continue;
        }
        freed += tree_size(&dir).unwrap_or(0);
        let _ = remove_dir_all(&dir);
    }
    freed
}

/// The directory of a local table's write leases.
pub const LEASES_DIR: &str = "_leases";

/// A new lease of the write `token` in the local table `table`, taken by
/// this process (each process filling shards or groups of a write takes
/// its own): `_leases/<token>-<pid>-<random>.lease`.
pub(crate) fn write_lease(table: &Path, token: &str) -> Result<Lease> {
    let name = format!("{token}-{}-{}.lease", std::process::id(), random_hex(4));
    Lease::take(&table.join(LEASES_DIR).join(name))
}

/// Whether a live process holds a lease of the write `token` in `table`.
pub(crate) fn write_live(table: &Path, token: &str) -> bool {
    let dir = table.join(LEASES_DIR);
    let prefix = format!("{token}-");
    list(&dir)
        .unwrap_or_default()
        .iter()
        .any(|n| n.starts_with(&prefix) && lease_held(&dir.join(n)))
}

/// Removes the lease files of dead writers in `table` older than
/// `min_age` (a cleanup's: at least [`LEFTOVER_MIN_AGE`] but in tests),
/// and the leases directory when it is left empty.
pub(crate) fn reclaim_leases(table: &Path, min_age: std::time::Duration) {
    reclaim_leases_older(table, min_age);
}

/// [`reclaim_leases`] whatever their age: what a discarding write does
/// (its shards are gone already, so a lease another process is about to
/// take guards nothing).
pub(crate) fn reclaim_leases_now(table: &Path) {
    reclaim_leases_older(table, std::time::Duration::ZERO);
}

fn reclaim_leases_older(table: &Path, min_age: std::time::Duration) {
    let dir = table.join(LEASES_DIR);
    for name in list(&dir).unwrap_or_default() {
        let path = dir.join(&name);
        if name.ends_with(".lease") && !lease_held(&path) && age(&path) >= min_age {
            let _ = std::fs::remove_file(&path);
        }
    }
    let _ = std::fs::remove_dir(&dir);
}

#[cfg(test)]
mod lease_tests {
    use super::*;

    #[test]
    fn writers_taking_and_giving_back_leases_at_once_never_fail() {
        let tmp = tempfile::tempdir().unwrap();
        let table = tmp.path();
        std::thread::scope(|s| {
            for t in 0..8 {
                s.spawn(move || {
                    for _ in 0..200 {
                        let lease = write_lease(table, &format!("{t:012x}")).unwrap();
                        assert!(write_live(table, &format!("{t:012x}")));
                        drop(lease);
                    }
                });
            }
        });
        // Every lease was given back: the directory went with the last.
        assert!(!table.join(LEASES_DIR).exists());
    }
}
