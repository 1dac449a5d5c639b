//! The record engine: create, open, append, gather, delete, compact, sync.
//!
//! A [`Store`] owns the two (or three) files of a store directory and a
//! lock on `meta.zr` for its whole life: exclusive for a writer, shared for
//! a read-only handle ([`Store::open_readonly`]), which never writes. The
//! record location table is held in memory; the on-disk table and header
//! are brought up to date by [`Store::sync`], which is the durability
//! barrier: after a crash a store reopens at its last successful sync.
//!
//! One module per phase: `open` (create, open and recovery), `append`,
//! `read` (the mapping and the [`Records`] implementation), `delete`,
//! `compact`, `commit` (sync, the journal, close).

mod append;
mod commit;
mod compact;
mod delete;
pub(crate) mod gather;
mod open;
mod read;

#[cfg(feature = "fault-injection")]
pub use compact::set_compact_steps_for_tests;
pub(crate) use read::map_large_records;
pub use read::streaming;

use std::collections::BTreeSet;
use std::fs::TryLockError;
use std::io;
use std::path::{Path, PathBuf};

use crate::codec::{self, Codec, Dictionary};
use crate::error::{Error, Result};
use crate::format::RecordLoc;
use crate::io::lock::LockedMeta;
use crate::io::{Fs, FsFile, Local, Storage};
use crate::read::records::Records;
use crate::schema::Schema;
use gather::Counters;

/// An index into a store: `u64` or a signed integer that must not be negative.
pub trait RecordIndex: Copy + Send + Sync {
    /// The index as `u64`, or `None` when negative.
    fn to_u64(self) -> Option<u64>;
    fn as_i128(self) -> i128;
}

impl RecordIndex for u64 {
    fn to_u64(self) -> Option<u64> {
        Some(self)
    }
    fn as_i128(self) -> i128 {
        self as i128
    }
}

impl RecordIndex for i64 {
    fn to_u64(self) -> Option<u64> {
        u64::try_from(self).ok()
    }
    fn as_i128(self) -> i128 {
        self as i128
    }
}

impl RecordIndex for usize {
    fn to_u64(self) -> Option<u64> {
        Some(self as u64)
    }
    fn as_i128(self) -> i128 {
        self as i128
    }
}

pub struct Store {
    dir: PathBuf,
    meta_path: PathBuf,
    data_path: PathBuf,
    meta: LockedMeta<FsFile>,
    data: FsFile,
    /// Where the store lives (local, or a read-only remote location).
    fs: Fs,
    /// Read-only mapping of data.zr covering at least `0..tail` (None when
    /// empty or when the file cannot be mapped: reads then use pread).
    map: Option<memmap2::Mmap>,
    schema: Schema,
    codec: Codec,
    dict: Option<Dictionary>,
    /// Whether new zstd frames carry a content checksum.
    checksum: bool,
    /// For a remote store, whether its frames carry checksums, asked of
    /// the object on first use rather than with a request at open.
    remote_checksum: std::sync::OnceLock<bool>,
    locs: Vec<RecordLoc>,
    /// Whether zstd paid for the records this handle appended last (new
    /// records that do not pay are stored as frames of raw blocks).
    verdict: codec::Verdict,
    /// Raw dense records lie back to back in index order (record `i` at
    /// `i * width`), so a gather computes offsets instead of reading the
    /// location table (a cache miss per record on large stores).
    packed_dense: bool,
    /// In-process frontier of `data.zr`.
    tail: u64,
    live_bytes: u64,
    /// Length of the record table the header on disk commits: slots below
    /// it are only ever rewritten through the journal.
    committed_len: u64,
    /// Location entries `unsynced_from..len` are not yet on disk.
    unsynced_from: u64,
    /// Slots below `unsynced_from` rewritten by deletes since the last sync.
    dirty_slots: BTreeSet<u64>,
    /// Whether the header on disk is behind.
    header_dirty: bool,
    /// Set when a write of committed state failed halfway (an fsync error
    /// leaves the page cache in an unknown state): later writes refuse, and
    /// reopening the store recovers its last commit.
    failed: Option<String>,
    /// Process that opened the store; a forked child may only read.
    owner_pid: u32,
    /// Opened with [`Store::open_readonly`]: holds a shared lock, its files
    /// are open read-only, and every write is refused with
    /// [`Error::ReadOnly`].
    readonly: bool,
    counters: Counters,
    closed: bool,
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

fn lock(meta: FsFile, dir: &Path, meta_path: &Path) -> Result<LockedMeta<FsFile>> {
    lock_as(meta, dir, meta_path, false)
}

/// Takes the store lock: shared for a read-only handle, else exclusive.
fn lock_as(meta: FsFile, dir: &Path, meta_path: &Path, shared: bool) -> Result<LockedMeta<FsFile>> {
    LockedMeta::try_lock(meta, shared).map_err(|e| match e {
        TryLockError::WouldBlock => Error::Busy(dir.to_path_buf()),
        TryLockError::Error(e) => Error::io(meta_path, e),
    })
}

fn sync_dir(dir: &Path) -> Result<()> {
    Local.sync_dir(dir).map_err(io_at(dir))
}

impl Store {
    fn compute_packed_dense(&self) -> bool {
        let Some(w) = self.schema.record_width() else {
            return false;
        };
        self.codec == Codec::Raw
            && self
                .locs
                .iter()
                .enumerate()
                .all(|(i, l)| l.offset == i as u64 * w && l.phys_length as u64 == w)
    }

    pub fn dictionary(&self) -> Option<&[u8]> {
        self.dict.as_ref().map(|d| d.bytes())
    }

    /// Location of record `i` (for inspection and tests).
    pub fn loc(&self, i: u64) -> Option<RecordLoc> {
        self.locs.get(i as usize).copied()
    }

    /// Whether this handle belongs to the calling process (not a forked child).
    pub fn is_owner(&self) -> bool {
        std::process::id() == self.owner_pid
    }

    /// Fails with [`Error::ReadOnly`] naming `op` when the handle is
    /// read-only (bindings check this before validating a write's input).
    pub fn check_not_readonly(&self, op: &'static str) -> Result<()> {
        if self.readonly {
            return Err(Error::ReadOnly {
                op,
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// `op` is the operation's name: append, delete, compact or sync.
    fn check_writable(&self, op: &'static str) -> Result<()> {
        self.check_not_readonly(op)?;
        let op = match op {
            "append" => "append to",
            "delete" => "delete from",
            other => other,
        };
        if let Some(why) = &self.failed {
            return Err(Error::io(
                &self.meta_path,
                io::Error::other(format!(
                    "cannot {op} {}: an earlier write failed ({why}); reopen the store to recover its last sync",
                    self.dir.display()
                )),
            ));
        }
        if !self.is_owner() {
            return Err(Error::InvalidState(format!(
                "cannot {op} {}: the store was opened by process {} and this forked child may only read it",
                self.dir.display(),
                self.owner_pid
            )));
        }
        Ok(())
    }

    fn dense_width(&self) -> Result<usize> {
        self.schema
            .record_width()
            .map(|w| w as usize)
            .ok_or_else(|| {
                Error::InvalidValue(format!(
                    "{} is a ragged store, not a dense store",
                    self.dir.display()
                ))
            })
    }

    fn corrupted_meta(&self, msg: String) -> Error {
        Error::corrupted(&self.meta_path, msg)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.dir)
            .field("kind", &self.kind())
            .field("dtype", &self.schema.dtype)
            .field("item_shape", &self.schema.item_shape())
            .field("codec", &self.codec)
            .field("len", &self.len())
            .finish()
    }
}

/// Stores for the phases' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::Path;

    use crate::codec::Codec;
    use crate::format::{Header, HEADER_SIZE, META_FILE};
    use crate::schema::{DType, Schema};

    use super::Store;

    /// A store of `n` one-byte dense records `0, 1, ..`, synced.
    pub(crate) fn bytes_store(dir: &Path, n: u8, codec: Codec) -> Store {
        let mut s =
            Store::create(dir, Schema::dense(DType::U8, &[]).unwrap(), codec, None).unwrap();
        s.append_dense(&(0..n).collect::<Vec<u8>>()).unwrap();
        s.sync().unwrap();
        s
    }

    /// The header on disk.
    pub(crate) fn header_on_disk(dir: &Path) -> Header {
        let meta = std::fs::read(dir.join(META_FILE)).unwrap();
        Header::decode(meta[..HEADER_SIZE].try_into().unwrap()).unwrap()
    }
}
