//! Local files: the [`Storage`] of the local filesystem.
//!
//! Every change the engine makes on disk goes through the functions here:
//! each positional write, fsync, truncation, file creation and rename. With
//! the `fault-injection` feature (tests only) each of them is a numbered
//! fault point, so a crash test can kill the writer, or fail the call with
//! an errno, before any one of them (see [`super::fault`]). Without the
//! feature they are the plain system calls. Reads, opens, removals and
//! listings are not fault points.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::{EntryKind, Storage, StorageFile};

/// The local filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Local;

/// An open local file.
#[derive(Debug)]
pub(crate) struct LocalFile(File);

impl Storage for Local {
    type File = LocalFile;

    fn open(&self, path: &Path, writable: bool) -> io::Result<LocalFile> {
        OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map(LocalFile)
    }

    fn create(&self, path: &Path, truncate: bool) -> io::Result<LocalFile> {
        open_rw(path, truncate).map(LocalFile)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        rename_noreplace(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(Some(EntryKind::Dir)),
            Ok(m) if m.is_file() => Ok(Some(EntryKind::File)),
            Ok(_) => Ok(None), // a socket, a device: nothing a table holds
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir(dir)
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir(dir)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        rename(from, to)
    }
}

impl StorageFile for LocalFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    #[inline]
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, at)
    }

    unsafe fn map(&self, len: usize) -> Option<memmap2::Mmap> {
        // SAFETY: the caller guarantees that no byte read through the
        // mapping changes while it lives (see `StorageFile::map`).
        unsafe { memmap2::MmapOptions::new().len(len).map(&self.0) }.ok()
    }

    fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()> {
        pwrite(&self.0, buf, at)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        set_len(&self.0, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        sync_data(&self.0)
    }

    fn sync_all(&self) -> io::Result<()> {
        sync_all(&self.0)
    }

    fn try_lock(&self, shared: bool) -> Result<(), TryLockError> {
        if shared {
            self.0.try_lock_shared()
        } else {
            self.0.try_lock()
        }
    }

    fn lock(&self) -> io::Result<()> {
        self.0.lock()
    }

    fn unlock(&self) -> io::Result<()> {
        self.0.unlock()
    }
}

#[inline]
fn point() -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    super::fault::point()?;
    Ok(())
}

thread_local! {
    /// Set while this thread fills a directory that nothing names yet
    /// ([`deferring_syncs`]).
    static DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `fill` with this thread's fsyncs skipped (each is still a fault
/// point). For filling a new directory that nothing names until a later
/// commit: a store's own order of fsyncs keeps it whole against a crash
/// only once something can open it after one, and here nothing can. The
/// writer makes the whole tree durable at once ([`sync_tree`]) before the
/// commit names it, which costs two or three fsyncs a store instead of
/// about seven.
pub(crate) fn deferring_syncs<T>(fill: impl FnOnce() -> T) -> T {
    crate::flag::set_during(&DEFERRED, fill)
}

/// fsyncs every file and directory under `dir`, `dir` itself and its
/// parent (whose entry names it), whether or not this thread defers its
/// fsyncs: after it returns, what was written there survives a crash.
/// Returns how many it synced.
pub(crate) fn sync_tree(dir: &Path) -> io::Result<usize> {
    let mut synced = 0;
    let mut dirs = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        for entry in std::fs::read_dir(&dirs[i])? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                if sync_point_now()? {
                    File::open(entry.path())?.sync_data()?;
                }
                synced += 1;
            }
        }
        i += 1;
    }
    // Deepest first, each directory before the one that names it.
    for d in dirs.iter().rev().map(|d| d.as_path()).chain(dir.parent()) {
        if sync_point_now()? {
            File::open(d)?.sync_all()?;
        }
        synced += 1;
    }
    Ok(synced)
}

/// A fault point before an fsync; `false` when the test asked to skip the
/// system call itself (see [`super::fault::skip_fsync`]), or this thread
/// defers its fsyncs ([`deferring_syncs`]).
#[inline]
fn sync_point() -> io::Result<bool> {
    if DEFERRED.with(|d| d.get()) {
        point()?;
        return Ok(false);
    }
    sync_point_now()
}

/// [`sync_point`], whether or not this thread defers its fsyncs.
#[inline]
fn sync_point_now() -> io::Result<bool> {
    point()?;
    #[cfg(feature = "fault-injection")]
    if super::fault::skips_fsync() {
        return Ok(false);
    }
    Ok(true)
}

pub(crate) fn pwrite(file: &File, buf: &[u8], at: u64) -> io::Result<()> {
    point()?;
    file.write_all_at(buf, at)
}

pub(crate) fn sync_data(file: &File) -> io::Result<()> {
    if sync_point()? {
        file.sync_data()?;
    }
    Ok(())
}

pub(crate) fn sync_all(file: &File) -> io::Result<()> {
    if sync_point()? {
        file.sync_all()?;
    }
    Ok(())
}

pub(crate) fn set_len(file: &File, len: u64) -> io::Result<()> {
    point()?;
    file.set_len(len)
}

/// Opens `path` for reading and writing, creating it when missing; with
/// `truncate` an existing file is emptied.
pub(crate) fn open_rw(path: &Path, truncate: bool) -> io::Result<File> {
    point()?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o644)
        .open(path)
}

/// fsyncs a directory, making the names created or renamed in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    if sync_point()? {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Renames `from` over `to` (replacing it).
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    point()?;
    std::fs::rename(from, to)
}

/// Renames `from` to `to`, failing with `AlreadyExists` rather than
/// replacing an existing `to` (where the filesystem supports it).
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    point()?;
    let cstr = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
    };
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: both arguments are valid NUL-terminated paths that outlive
    // the call; renameat2 only reads them.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // Filesystems without RENAME_NOREPLACE: the caller holds the
        // creation lock, so a plain rename is the same here.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => std::fs::rename(from, to),
        _ => Err(err),
    }
}

/// Every file below `dir`: its path relative to `dir` (`/`-separated) and
/// size, sorted. A file or directory below `dir` removed meanwhile is
/// left out; `dir` itself must exist.
pub(crate) fn walk(dir: &Path) -> crate::Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    // What another process removes while the walk runs (a lease given
    // back, a temporary file renamed) was not there: skipped.
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    while let Some((at, rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&at) {
            Err(e) if gone(&e) && !rel.is_empty() => continue,
            r => r.map_err(|e| crate::Error::io(&at, e))?,
        };
        for entry in entries {
            let entry = entry.map_err(|e| crate::Error::io(&at, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let meta = match entry.metadata() {
                Err(e) if gone(&e) => continue,
                r => r.map_err(|e| crate::Error::io(&path, e))?,
            };
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if meta.is_dir() {
                stack.push((path, child));
            } else if meta.is_file() {
                out.push((child, meta.len()));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferring_is_this_threads_and_ends_with_the_fill_even_on_a_panic() {
        let deferred = || DEFERRED.with(|d| d.get());
        assert!(!deferred());
        deferring_syncs(|| {
            assert!(deferred());
            deferring_syncs(|| assert!(deferred()));
            assert!(deferred(), "an inner scope leaves the outer one deferring");
            std::thread::scope(|s| {
                s.spawn(|| assert!(!deferred(), "another thread syncs as usual"));
            });
        });
        assert!(!deferred());
        let caught = std::panic::catch_unwind(|| deferring_syncs(|| panic!("in the fill")));
        assert!(caught.is_err());
        assert!(!deferred(), "a panicking fill ends the deferral");
    }

    #[test]
    fn sync_tree_syncs_every_file_and_directory_and_the_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("group");
        std::fs::create_dir_all(top.join("a/.validity/a")).unwrap();
        std::fs::create_dir_all(top.join("b")).unwrap();
        for f in [
            "a/meta.zr",
            "a/data.zr",
            "a/.validity/a/meta.zr",
            "b/column.zc",
            "rows",
        ] {
            std::fs::write(top.join(f), b"x").unwrap();
        }
        // 5 files; directories group, a, a/.validity, a/.validity/a, b; and
        // the parent.
        let synced = deferring_syncs(|| sync_tree(&top)).unwrap();
        assert_eq!(synced, 5 + 5 + 1);
        assert!(sync_tree(&tmp.path().join("missing")).is_err());
    }
}
