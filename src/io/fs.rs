//! [`Fs`] and [`FsFile`]: the storage a store or table was opened on, as
//! one of the seam's implementations, chosen once at open.
//!
//! Each method is a `match` that forwards to [`Local`] or (with the
//! `remote` feature) [`Remote`]; writes on a remote location fail with
//! `Unsupported` (remote stores and tables open read-only, and writers
//! upload whole objects through `remote::upload` instead).

use std::ffi::OsString;
use std::fs::TryLockError;
use std::io;
use std::path::Path;
#[cfg(feature = "remote")]
use std::sync::Arc;

#[cfg(feature = "remote")]
use super::remote::{Remote, RemoteFile};
use super::{EntryKind, Local, LocalFile, Storage, StorageFile};

/// Where a store or table lives.
#[derive(Clone, Debug, Default)]
pub(crate) enum Fs {
    #[default]
    Local,
    #[cfg(feature = "remote")]
    Remote(Arc<Remote>),
}

/// An open file of an [`Fs`].
#[derive(Debug)]
pub(crate) enum FsFile {
    Local(LocalFile),
    #[cfg(feature = "remote")]
    Remote(RemoteFile),
}

impl Fs {
    pub(crate) fn is_remote(&self) -> bool {
        !matches!(self, Fs::Local)
    }
}

impl FsFile {
    /// The remote object, if this file is one.
    #[cfg(feature = "remote")]
    pub(crate) fn remote(&self) -> Option<&RemoteFile> {
        match self {
            FsFile::Remote(r) => Some(r),
            FsFile::Local(_) => None,
        }
    }
}

/// Forwards a call to the implementation behind `$self`.
macro_rules! forward {
    ($self:expr, $v:ident => $call:expr) => {
        match $self {
            Fs::Local => {
                let $v = &Local;
                $call
            }
            #[cfg(feature = "remote")]
            Fs::Remote(r) => {
                let $v = &**r;
                $call
            }
        }
    };
}

macro_rules! forward_file {
    ($self:expr, $v:ident => $call:expr) => {
        match $self {
            FsFile::Local($v) => $call,
            #[cfg(feature = "remote")]
            FsFile::Remote($v) => $call,
        }
    };
}

impl Storage for Fs {
    type File = FsFile;

    fn open(&self, path: &Path, writable: bool) -> io::Result<FsFile> {
        match self {
            Fs::Local => Local.open(path, writable).map(FsFile::Local),
            #[cfg(feature = "remote")]
            Fs::Remote(r) => r.open(path, writable).map(FsFile::Remote),
        }
    }

    fn create(&self, path: &Path, truncate: bool) -> io::Result<FsFile> {
        match self {
            Fs::Local => Local.create(path, truncate).map(FsFile::Local),
            #[cfg(feature = "remote")]
            Fs::Remote(r) => r.create(path, truncate).map(FsFile::Remote),
        }
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        forward!(self, s => s.read(path))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        forward!(self, s => s.create_dir_all(dir))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        forward!(self, s => s.remove(path))
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        forward!(self, s => s.rename_noreplace(from, to))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        forward!(self, s => s.sync_dir(dir))
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        forward!(self, s => s.kind(path))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        forward!(self, s => s.list(dir))
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        forward!(self, s => s.create_dir(dir))
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        forward!(self, s => s.remove_dir(dir))
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        forward!(self, s => s.remove_dir_all(dir))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        forward!(self, s => s.rename(from, to))
    }
}

impl StorageFile for FsFile {
    fn len(&self) -> io::Result<u64> {
        forward_file!(self, f => f.len())
    }

    #[inline]
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        forward_file!(self, f => f.read_exact_at(buf, at))
    }

    unsafe fn map(&self, len: usize) -> Option<memmap2::Mmap> {
        // SAFETY: the caller's guarantee (see `StorageFile::map`) is passed on.
        forward_file!(self, f => unsafe { f.map(len) })
    }

    fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()> {
        forward_file!(self, f => f.write_all_at(buf, at))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        forward_file!(self, f => f.set_len(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        forward_file!(self, f => f.sync_data())
    }

    fn sync_all(&self) -> io::Result<()> {
        forward_file!(self, f => f.sync_all())
    }

    fn try_lock(&self, shared: bool) -> Result<(), TryLockError> {
        forward_file!(self, f => f.try_lock(shared))
    }

    fn lock(&self) -> io::Result<()> {
        forward_file!(self, f => f.lock())
    }

    fn unlock(&self) -> io::Result<()> {
        forward_file!(self, f => f.unlock())
    }
}
