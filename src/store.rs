//! The record engine: create, open, append, gather, delete, compact, sync.
//!
//! A [`Store`] owns the two (or three) files of a store directory and a
//! lock on `meta.zr` for its whole life: exclusive for a writer, shared for
//! a read-only handle ([`Store::open_readonly`]), which never writes. The record location table
//! is held in memory; the on-disk table and header are brought up to date by
//! [`Store::sync`], which is the durability barrier: after a crash a store
//! reopens at its last successful sync.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::access::Records;
use crate::buffer::Buffer;
use crate::codec::{self, Codec, DecodeError, Dictionary};
use crate::error::{Error, Kind, Result};
use crate::executor;
use crate::fileio;
use crate::format::{
    self, Header, RecordLoc, DATA_FILE, DICT_FILE, HEADER_SIZE, LOC_SIZE, MAX_RECORD_BYTES,
    META_FILE, PAGE_SIZE,
};
use crate::gather::{self, Counters, Source};
use crate::journal::{self, Journal, Move};
use crate::lock::LockedMeta;
use crate::ragged::{self, Packed, RaggedRecord};
use crate::schema::{Layout, Schema};

/// Gathers read records through a shared, read-only mapping of data.zr: no
/// syscall per record, and the kernel maps the page cache's large folios
/// whole, so copying a large record out of the mapping runs 1.1–1.6× faster
/// than a positional read. Mapped pages count in the process's RSS and PSS
/// (a 2 MiB folio as soon as one byte of it is read), so scans that touch a
/// whole store over time run under [`streaming`], which reads records of at
/// least this many stored bytes with `pread` instead.
const LARGE_RECORD: u32 = 64 << 10;

thread_local! {
    static STREAMING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every gather it starts on this thread reading large records
/// with positional reads rather than through the mapping, so they leave no
/// pages mapped in the process. The DataLoader, lazy table readers
/// ([`crate::arrow::TableReader`]: `loaderx.arrow.table`, Parquet export) and
/// SQL scans use it: they run for long or stream over every record, and
/// would otherwise leave the whole store mapped. Results are the same either
/// way.
pub fn streaming<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            STREAMING.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(STREAMING.with(|s| s.replace(true)));
    f()
}

/// Whether gathers started on this thread read large records through the
/// mapping (see [`streaming`]).
pub(crate) fn map_large_records() -> bool {
    !STREAMING.with(Cell::get)
}

/// Compaction moves at most this many bytes per committed step (more when
/// a single record is larger).
const COMPACT_CHUNK: u64 = 32 << 20;
/// A compaction step copies straight into the free space below it once that
/// holds this much: a commit costs a few fsyncs, worth a few MiB of copying.
/// Below it, steps carry their bytes in the journal, writing them twice.
const COMPACT_DIRECT_MIN: u64 = 2 << 20;

static COMPACT_CHUNK_BYTES: AtomicU64 = AtomicU64::new(COMPACT_CHUNK);
static COMPACT_DIRECT_BYTES: AtomicU64 = AtomicU64::new(COMPACT_DIRECT_MIN);

/// Sets the compaction step size and the free space from which steps copy
/// directly, so that crash tests reach every kind of step with small stores.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub fn set_compact_steps_for_tests(chunk: u64, direct_min: u64) {
    COMPACT_CHUNK_BYTES.store(chunk.max(1), Ordering::Relaxed);
    COMPACT_DIRECT_BYTES.store(direct_min, Ordering::Relaxed);
}

/// A zstd frame never decodes to more than this many times its size: each
/// block holds at most 128 KiB and takes at least 4 bytes (an RLE block).
const MAX_ZSTD_RATIO: u64 = 32 << 10;

/// The name meta.zr has while `create` builds it.
const CREATE_TEMP: &str = ".meta.zr.creating";

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

/// Space accounting reported by [`Records::stats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub records: u64,
    /// Stored bytes of live records.
    pub live_bytes: u64,
    /// Committed payload extent of `data.zr`.
    pub data_bytes: u64,
    /// `data_bytes - live_bytes`: what [`Store::compact`] would free.
    pub reclaimable: u64,
}

/// How much a handle has read (for tests and tooling: proves what a query
/// touched, without timing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounters {
    /// Records gathered.
    pub records: u64,
    /// Logical bytes gathered.
    pub bytes: u64,
}

/// The records of a ragged gather, packed into one buffer.
#[derive(Debug)]
pub struct RaggedBatch {
    pub buffer: Buffer,
    /// `(start, len)` of each record's logical bytes in `buffer`; starts are
    /// 8-byte aligned so payloads of any dtype are aligned.
    pub spans: Vec<(usize, usize)>,
    itemsize: usize,
}

impl RaggedBatch {
    pub(crate) fn new(buffer: Buffer, spans: Vec<(usize, usize)>, itemsize: usize) -> RaggedBatch {
        RaggedBatch {
            buffer,
            spans,
            itemsize,
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Record `i` (already validated by the gather).
    pub fn record(&self, i: usize) -> RaggedRecord<'_> {
        let (start, len) = self.spans[i];
        ragged::parse(&self.buffer.as_slice()[start..start + len], self.itemsize)
            .expect("validated during gather")
    }
}

pub struct Store {
    dir: PathBuf,
    meta_path: PathBuf,
    data_path: PathBuf,
    meta: LockedMeta,
    data: File,
    /// Read-only mapping of data.zr covering at least `0..tail` (None when
    /// empty or when the file cannot be mapped: reads then use pread).
    map: Option<memmap2::Mmap>,
    schema: Schema,
    codec: Codec,
    dict: Option<Dictionary>,
    /// Whether new zstd frames carry a content checksum.
    checksum: bool,
    locs: Vec<RecordLoc>,
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

fn lock(meta: File, dir: &Path, meta_path: &Path) -> Result<LockedMeta> {
    lock_as(meta, dir, meta_path, false)
}

/// Takes the store lock: shared for a read-only handle, else exclusive.
fn lock_as(meta: File, dir: &Path, meta_path: &Path, shared: bool) -> Result<LockedMeta> {
    let locked = if shared {
        LockedMeta::try_shared(meta)
    } else {
        LockedMeta::try_exclusive(meta)
    };
    locked.map_err(|e| match e {
        fs::TryLockError::WouldBlock => Error::Busy(dir.to_path_buf()),
        fs::TryLockError::Error(e) => Error::io(meta_path, e),
    })
}

fn sync_dir(dir: &Path) -> Result<()> {
    fileio::sync_dir(dir).map_err(io_at(dir))
}

impl Store {
    /// Creates a new, empty, synced store at `dir` (making missing parents).
    /// `dict` is required for, and only allowed with, [`Codec::ZstdDict`].
    pub fn create(
        dir: impl AsRef<Path>,
        schema: Schema,
        codec: Codec,
        dict: Option<&[u8]>,
    ) -> Result<Store> {
        Store::create_with_checksum(dir, schema, codec, dict, false)
    }

    /// [`Store::create`]; with `checksum` every zstd frame written through
    /// this handle carries its content checksum, so a damaged payload fails
    /// to decode instead of returning wrong bytes. The frames stay plain
    /// zstd frames. Raw records are stored as they are, with no checksum:
    /// `checksum` needs a compressed codec.
    pub fn create_with_checksum(
        dir: impl AsRef<Path>,
        schema: Schema,
        codec: Codec,
        dict: Option<&[u8]>,
        checksum: bool,
    ) -> Result<Store> {
        let dir = dir.as_ref();
        if checksum && !codec.is_compressed() {
            return Err(Error::InvalidValue(format!(
                "checksum=True needs a compressed codec ('zstd' or 'zstd_dict'), got codec '{codec}': raw records are stored as they are, without checksums"
            )));
        }
        match (codec, dict) {
            (Codec::ZstdDict, None) => {
                return Err(Error::InvalidValue(
                    "dict_bytes is required for codec 'zstd_dict' (train one with loaderx.utils.train_dict)"
                        .into(),
                ))
            }
            (Codec::ZstdDict, Some([])) => {
                return Err(Error::InvalidValue(
                    "dict_bytes must be a non-empty zstd dictionary, got 0 bytes".into(),
                ))
            }
            (c, Some(_)) if c != Codec::ZstdDict => {
                return Err(Error::InvalidValue(format!(
                    "dict_bytes is only valid with codec 'zstd_dict', got codec '{c}'"
                )))
            }
            _ => {}
        }
        if let Layout::Dense { item_shape } = &schema.layout {
            Schema::dense(schema.dtype, item_shape)?;
        }
        let dictionary = dict
            .map(|d| Dictionary::new(d.to_vec()))
            .transpose()
            .map_err(|e| {
                Error::InvalidValue(format!("dict_bytes is not a zstd dictionary: {e}"))
            })?;
        let schema_bytes = schema.encode();
        if dir.is_file() {
            return Err(Error::AlreadyExists {
                path: dir.to_path_buf(),
                reason: "the path exists and is a file, not a store directory".into(),
            });
        }
        let meta_path = dir.join(META_FILE);
        let exists = || Error::AlreadyExists {
            path: dir.to_path_buf(),
            reason: "a store already exists here".into(),
        };
        if meta_path.exists() {
            return Err(exists());
        }
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        // meta.zr is built under a temporary name and renamed into place
        // last, so a create killed at any instant leaves either no store
        // (create may run again) or a valid empty one. The temporary file's
        // lock excludes concurrent creates; it follows the file through the
        // rename and becomes the store's lock.
        let temp_path = dir.join(CREATE_TEMP);
        let meta = fileio::open_rw(&temp_path, false).map_err(io_at(&temp_path))?;
        let meta = lock(meta, dir, &temp_path)?;
        if meta_path.exists() {
            let _ = fs::remove_file(&temp_path);
            return Err(exists());
        }
        let result = Store::initialise(dir, meta, &schema, &schema_bytes, codec, dictionary).map(
            |mut store| {
                store.checksum = checksum;
                store
            },
        );
        if result.is_err() {
            // Leave nothing half-written behind.
            let _ = fs::remove_file(dir.join(DATA_FILE));
            let _ = fs::remove_file(dir.join(DICT_FILE));
            let _ = fs::remove_file(&temp_path);
        }
        result
    }

    fn initialise(
        dir: &Path,
        meta: LockedMeta,
        schema: &Schema,
        schema_bytes: &[u8],
        codec: Codec,
        dict: Option<Dictionary>,
    ) -> Result<Store> {
        let meta_path = dir.join(META_FILE);
        let temp_path = dir.join(CREATE_TEMP);
        let data_path = dir.join(DATA_FILE);
        let dict_path = dir.join(DICT_FILE);
        let header = Header {
            length: 0,
            tail_offset: 0,
            schema_length: schema_bytes.len() as u32,
            codec,
            journal: None,
        };
        let mut page = vec![0u8; PAGE_SIZE as usize];
        page[..HEADER_SIZE].copy_from_slice(&header.encode());
        page[HEADER_SIZE..HEADER_SIZE + schema_bytes.len()].copy_from_slice(schema_bytes);
        fileio::set_len(&meta, 0)
            .and_then(|_| fileio::pwrite(&meta, &page, 0))
            .and_then(|_| fileio::sync_all(&meta))
            .map_err(io_at(&temp_path))?;
        let data = fileio::open_rw(&data_path, true)
            .and_then(|f| fileio::sync_all(&f).map(|_| f))
            .map_err(io_at(&data_path))?;
        match dict.as_ref().map(|d| d.bytes()) {
            Some(bytes) => {
                fileio::open_rw(&dict_path, true)
                    .and_then(|f| fileio::pwrite(&f, bytes, 0).and_then(|_| fileio::sync_all(&f)))
                    .map_err(io_at(&dict_path))?;
            }
            None => match fs::remove_file(&dict_path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&dict_path, e)),
            },
        }
        sync_dir(dir)?;
        fileio::rename_noreplace(&temp_path, &meta_path).map_err(|e| {
            if e.kind() == ErrorKind::AlreadyExists {
                Error::AlreadyExists {
                    path: dir.to_path_buf(),
                    reason: "a store already exists here".into(),
                }
            } else {
                Error::io(&meta_path, e)
            }
        })?;
        if let Err(e) = sync_dir(dir) {
            let _ = fs::remove_file(&meta_path);
            return Err(e);
        }
        let packed_dense = codec == Codec::Raw && schema.record_width().is_some();
        Ok(Store {
            dir: dir.to_path_buf(),
            meta_path,
            data_path,
            meta,
            data,
            map: None,
            schema: schema.clone(),
            codec,
            dict,
            checksum: false,
            locs: Vec::new(),
            packed_dense,
            tail: 0,
            live_bytes: 0,
            committed_len: 0,
            unsynced_from: 0,
            dirty_slots: BTreeSet::new(),
            header_dirty: false,
            failed: None,
            owner_pid: std::process::id(),
            readonly: false,
            counters: Counters::default(),
            closed: false,
        })
    }

    /// Opens an existing store for reading and writing, validating every
    /// invariant of the format. Takes the store's lock exclusively: fails
    /// with [`Error::Busy`] while any other handle (writer or reader, in
    /// any process) has the store open.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir.as_ref(), false)
    }

    /// Opens an existing store read-only, validating every invariant of
    /// the format. Takes a shared lock on meta.zr: any number of read-only
    /// handles, in any number of processes, may hold the store at once,
    /// while a writer ([`Store::open`], [`Store::create`]) excludes them
    /// all ([`Error::Busy`] either way). Both files are opened `O_RDONLY`,
    /// so read-only files and filesystems work, and nothing is ever
    /// written: appends, deletes, compaction and sync fail with
    /// [`Error::ReadOnly`], and closing writes nothing.
    ///
    /// A pending journal (a sync interrupted after its commit) is applied
    /// in memory only: the handle sees the committed state, the files stay
    /// as they are. A pending journal that moves payload bytes (an
    /// interrupted compaction step) cannot be served without writing
    /// data.zr, so such a store fails to open read-only with
    /// [`Error::Corrupted`] until a writable open recovers it.
    pub fn open_readonly(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir.as_ref(), true)
    }

    fn open_with(dir: &Path, readonly: bool) -> Result<Store> {
        let meta_path = dir.join(META_FILE);
        let data_path = dir.join(DATA_FILE);
        let dict_path = dir.join(DICT_FILE);
        if !dir.exists() {
            return Err(Error::NotFound {
                path: dir.to_path_buf(),
                reason: "the path does not exist".into(),
            });
        }
        let meta = match OpenOptions::new()
            .read(true)
            .write(!readonly)
            .open(&meta_path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotFound {
                    path: dir.to_path_buf(),
                    reason: "the directory has no meta.zr".into(),
                })
            }
            Err(e) if e.kind() == ErrorKind::NotADirectory => {
                return Err(Error::NotFound {
                    path: dir.to_path_buf(),
                    reason: "the path is a file, not a store directory".into(),
                })
            }
            Err(e) => return Err(Error::io(&meta_path, e)),
        };
        let meta = lock_as(meta, dir, &meta_path, readonly)?;
        let corrupt_meta = |msg: String| Error::corrupted(&meta_path, msg);
        let meta_len = meta.metadata().map_err(io_at(&meta_path))?.len();
        if meta_len < PAGE_SIZE {
            return Err(corrupt_meta(format!(
                "file is {meta_len} bytes, shorter than the {PAGE_SIZE}-byte header page"
            )));
        }
        let mut page = vec![0u8; PAGE_SIZE as usize];
        meta.read_exact_at(&mut page, 0)
            .map_err(io_at(&meta_path))?;
        let header = Header::decode(page[..HEADER_SIZE].try_into().unwrap())
            .map_err(|e| corrupt_meta(format!("header: {e}")))?;
        let schema_end = HEADER_SIZE + header.schema_length as usize;
        let schema = Schema::decode(&page[HEADER_SIZE..schema_end]).map_err(corrupt_meta)?;
        let table_end = format::meta_size_for(header.length)
            .filter(|&end| end <= meta_len)
            .ok_or_else(|| {
                corrupt_meta(format!(
                    "header length {} needs a {}-entry record table but the file is {meta_len} bytes",
                    header.length, header.length
                ))
            })?;
        debug_assert!(table_end <= meta_len);

        let data = match OpenOptions::new()
            .read(true)
            .write(!readonly)
            .open(&data_path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::corrupted(&data_path, "file is missing"))
            }
            Err(e) => return Err(Error::io(&data_path, e)),
        };
        let data_len = data.metadata().map_err(io_at(&data_path))?.len();
        if data_len < header.tail_offset {
            return Err(Error::corrupted(
                &data_path,
                format!(
                    "file is {data_len} bytes, shorter than the committed tail_offset {}",
                    header.tail_offset
                ),
            ));
        }

        let dict = match (header.codec, fs::read(&dict_path)) {
            (Codec::ZstdDict, Ok(bytes)) if bytes.is_empty() => {
                return Err(Error::corrupted(&dict_path, "dictionary file is empty"))
            }
            (Codec::ZstdDict, Ok(bytes)) => {
                Some(Dictionary::new(bytes).map_err(|e| Error::corrupted(&dict_path, e))?)
            }
            (Codec::ZstdDict, Err(e)) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::corrupted(
                    &dict_path,
                    "file is missing but the store's codec is zstd_dict",
                ))
            }
            (_, Err(e)) if e.kind() == ErrorKind::NotFound => None,
            (_, Err(e)) => return Err(Error::io(&dict_path, e)),
            (codec, Ok(_)) => {
                return Err(Error::corrupted(
                    &dict_path,
                    format!("a dictionary is present but the store's codec is {codec}"),
                ))
            }
        };

        // A journal committed by a sync or compaction step that did not
        // finish applying it: its locations are part of the committed state.
        let journal = header
            .journal
            .map(|at| read_journal(&meta, &meta_path, at, meta_len, &header))
            .transpose()?;
        if readonly {
            if let Some(j) = journal.as_ref().filter(|j| !j.moves.is_empty()) {
                return Err(corrupt_meta(format!(
                    "an interrupted compaction left a pending journal that moves {} bytes of data.zr; a read-only open cannot apply it: open the store once without readonly to recover it",
                    j.payload.len()
                )));
            }
        }
        let width = schema.record_width();
        let mut live_bytes = 0u64;
        let locs = read_locs(
            &meta,
            &meta_path,
            header.length,
            journal.as_ref().map_or(&[][..], |j| &j.locs[..]),
            |i, loc| {
                check_loc(i, loc, header.codec, width, header.tail_offset)?;
                live_bytes = live_bytes.saturating_add(loc.phys_length as u64);
                Ok(())
            },
        )?;
        // Records never share bytes, so their stored lengths cannot add up
        // to more than the committed payload.
        if live_bytes > header.tail_offset {
            return Err(corrupt_meta(format!(
                "the records' stored lengths add up to {live_bytes} bytes, more than tail_offset {}: location entries overlap",
                header.tail_offset
            )));
        }
        let mut store = Store {
            dir: dir.to_path_buf(),
            meta_path,
            data_path,
            meta,
            data,
            map: None,
            schema,
            codec: header.codec,
            dict,
            checksum: false,
            locs,
            packed_dense: false,
            tail: header.tail_offset,
            live_bytes,
            committed_len: header.length,
            unsynced_from: header.length,
            dirty_slots: BTreeSet::new(),
            header_dirty: false,
            failed: None,
            owner_pid: std::process::id(),
            readonly,
            counters: Counters::default(),
            closed: false,
        };
        // A read-only handle already holds the journal's locations (read
        // over the table above) and leaves the files as they are.
        if let Some(journal) = journal.filter(|_| !readonly) {
            store.apply_journal(&journal)?;
        }
        store.checksum = store.last_frame_has_checksum();
        store.packed_dense = store.compute_packed_dense();
        store.ensure_map(data_len);
        Ok(store)
    }

    /// Makes the mapping of data.zr cover `0..tail`. A new mapping covers
    /// at least `hint` bytes and twice the old one, so appends remap rarely;
    /// it may extend past the end of the file, but only bytes below `tail`
    /// (which the file always holds) are ever touched.
    fn ensure_map(&mut self, hint: u64) {
        if self.tail == 0
            || self
                .map
                .as_ref()
                .is_some_and(|m| m.len() as u64 >= self.tail)
        {
            return;
        }
        let old = self.map.as_ref().map_or(0, |m| 2 * m.len() as u64);
        let len = hint.max(self.tail).max(old);
        // SAFETY: a writable handle holds an exclusive lock on meta.zr and
        // only it writes data.zr; committed bytes below tail are never
        // rewritten while reads may use them (compact drops the map first).
        // A read-only handle holds a shared lock, which excludes every
        // loaderx writer for its whole life, so no byte it maps changes.
        self.map = usize::try_from(len)
            .ok()
            .and_then(|len| unsafe { memmap2::MmapOptions::new().len(len).map(&self.data) }.ok());
    }

    /// Whether the newest record is a zstd frame with a content checksum:
    /// a store keeps writing frames the way its last one was written.
    fn last_frame_has_checksum(&self) -> bool {
        let Some(loc) = self.locs.iter().max_by_key(|l| l.offset) else {
            return false;
        };
        let mut head = [0u8; 5];
        self.codec.is_compressed()
            && loc.phys_length as usize >= head.len()
            && self.data.read_exact_at(&mut head, loc.offset).is_ok()
            && codec::frame_has_checksum(&head)
    }

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

    /// Opens a store that must be of `kind`.
    pub fn open_kind(dir: impl AsRef<Path>, kind: Kind) -> Result<Store> {
        Store::open_kind_with(dir.as_ref(), kind, false)
    }

    /// [`Store::open_readonly`] of a store that must be of `kind`.
    pub fn open_kind_readonly(dir: impl AsRef<Path>, kind: Kind) -> Result<Store> {
        Store::open_kind_with(dir.as_ref(), kind, true)
    }

    fn open_kind_with(dir: &Path, kind: Kind, readonly: bool) -> Result<Store> {
        let store = Store::open_with(dir, readonly)?;
        if store.kind() != kind {
            return Err(Error::WrongKind {
                path: dir.to_path_buf(),
                expected: kind,
                actual: store.kind(),
            });
        }
        Ok(store)
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

    // ---------------------------------------------------------------- append

    /// Appends dense records: `bytes` holds whole records back to back.
    pub fn append_dense(&mut self, bytes: &[u8]) -> Result<()> {
        self.check_not_readonly("append")?;
        let width = self.dense_width()?;
        if !bytes.len().is_multiple_of(width) {
            return Err(Error::InvalidValue(format!(
                "append of {} bytes is not a whole number of {width}-byte records",
                bytes.len()
            )));
        }
        let n = bytes.len() / width;
        self.append_records(bytes, n, |i| i * width..(i + 1) * width)
    }

    /// Appends packed ragged records (see [`Packed`]).
    pub fn append_ragged(&mut self, packed: &Packed) -> Result<()> {
        self.check_not_readonly("append")?;
        if self.kind() != Kind::Ragged {
            return Err(Error::InvalidValue(format!(
                "{} is a dense store, not a ragged store",
                self.dir.display()
            )));
        }
        let n = packed.len();
        if packed.bounds.first().copied().unwrap_or(0) != 0
            || packed.bounds.last().copied().unwrap_or(0) != packed.bytes.len()
            || packed.bounds.windows(2).any(|w| w[0] > w[1])
        {
            return Err(Error::InvalidValue(
                "packed record bounds are inconsistent".into(),
            ));
        }
        let itemsize = self.schema.dtype.itemsize();
        for i in 0..n {
            let rec = packed.record(i);
            if rec.len() as u64 > MAX_RECORD_BYTES {
                return Err(Error::InvalidValue(format!(
                    "record {i} is {} bytes, over the 2 GiB record limit",
                    rec.len()
                )));
            }
            ragged::parse(rec, itemsize)
                .map_err(|e| Error::InvalidValue(format!("record {i}: {e}")))?;
        }
        let bounds = &packed.bounds;
        self.append_records(&packed.bytes, n, |i| bounds[i]..bounds[i + 1])
    }

    fn append_records(
        &mut self,
        src: &[u8],
        n: usize,
        record: impl Fn(usize) -> Range<usize> + Sync,
    ) -> Result<()> {
        self.check_writable("append")?;
        if n == 0 {
            return Ok(());
        }
        let start = self.tail;
        let new_locs: Vec<RecordLoc> = if self.codec == Codec::Raw {
            // The source is already the exact byte run to store.
            fileio::pwrite(&self.data, src, start).map_err(io_at(&self.data_path))?;
            (0..n)
                .map(|i| {
                    let r = record(i);
                    RecordLoc {
                        offset: start + r.start as u64,
                        phys_length: r.len() as u32,
                        logic_length: r.len() as u32,
                    }
                })
                .collect()
        } else {
            let frontier = AtomicU64::new(start);
            let mut locs = vec![RecordLoc::default(); n];
            let (codec, dict, checksum, data, data_path) = (
                self.codec,
                self.dict.as_ref(),
                self.checksum,
                &self.data,
                &self.data_path,
            );
            executor::pool().install(|| {
                locs.par_iter_mut()
                    .enumerate()
                    .try_for_each(|(i, loc)| -> Result<()> {
                        let r = record(i);
                        let logic = r.len() as u32;
                        codec::compress_with(
                            codec,
                            dict,
                            checksum,
                            &src[r],
                            |frame| -> Result<()> {
                                // Offsets are reserved in completion order.
                                let offset =
                                    frontier.fetch_add(frame.len() as u64, Ordering::Relaxed);
                                fileio::pwrite(data, frame, offset)
                                    .map_err(|e| Error::io(data_path, e))?;
                                *loc = RecordLoc {
                                    offset,
                                    phys_length: frame.len() as u32,
                                    logic_length: logic,
                                };
                                Ok(())
                            },
                        )
                        .map_err(|e| Error::InvalidValue(format!("compressing record {i}: {e}")))?
                    })
            })?;
            locs
        };
        if self.packed_dense {
            let w = self.schema.record_width().unwrap_or(0);
            self.packed_dense = start == self.len() * w;
        }
        let added: u64 = new_locs.iter().map(|l| l.phys_length as u64).sum();
        let end = new_locs
            .iter()
            .filter_map(|l| l.end())
            .max()
            .unwrap_or(start);
        self.locs.extend_from_slice(&new_locs);
        self.tail = end.max(start);
        self.live_bytes += added;
        self.header_dirty = true;
        self.ensure_map(self.tail);
        Ok(())
    }

    // ---------------------------------------------------------------- gather

    pub(crate) fn data_path(&self) -> &Path {
        &self.data_path
    }

    /// Hints the CPU to fetch record `i`'s location entry.
    #[inline]
    pub(crate) fn prefetch_loc(&self, i: u64) {
        if let Some(loc) = self.locs.get(i as usize) {
            prefetch(loc);
        }
    }

    /// [`Store::prefetch_loc`], unless dense locations are computed.
    #[inline]
    pub(crate) fn prefetch_dense_loc(&self, i: u64) {
        if !self.packed_dense {
            self.prefetch_loc(i);
        }
    }

    /// Reads record `i` (already bounds-checked) into `dst` of its logical size.
    pub(crate) fn read_into(&self, i: u64, dst: &mut [u8], map_large: bool) -> Result<()> {
        self.read_loc(i, self.locs[i as usize], dst, map_large)
    }

    /// Location of dense record `i`: computed when the store is packed.
    #[inline]
    pub(crate) fn dense_loc(&self, i: u64, width: usize) -> RecordLoc {
        if self.packed_dense {
            RecordLoc {
                offset: i * width as u64,
                phys_length: width as u32,
                logic_length: width as u32,
            }
        } else {
            self.locs[i as usize]
        }
    }

    /// Reads record `i`, stored at `loc`, into `dst` of its logical size;
    /// through the mapping unless it is large and `map_large` is false.
    pub(crate) fn read_loc(
        &self,
        i: u64,
        loc: RecordLoc,
        dst: &mut [u8],
        map_large: bool,
    ) -> Result<()> {
        if loc.logic_length as usize != dst.len() {
            return Err(self.corrupted_meta(format!(
                "record {i} has logic_length {}, expected {}",
                loc.logic_length,
                dst.len()
            )));
        }
        match loc.end() {
            Some(end) if end <= self.tail => {}
            _ => {
                return Err(self.corrupted_meta(format!(
                    "record {i} at offset {} (+{}) lies past tail_offset {}",
                    loc.offset, loc.phys_length, self.tail
                )))
            }
        }
        if let Some(map) = &self.map {
            let (start, end) = (
                loc.offset as usize,
                loc.offset as usize + loc.phys_length as usize,
            );
            if end <= map.len() && (map_large || loc.phys_length < LARGE_RECORD) {
                return codec::decode_slice(self.codec, self.dict.as_ref(), &map[start..end], dst)
                    .map_err(|msg| {
                        Error::corrupted(&self.data_path, format!("record {i}: {msg}"))
                    });
            }
        }
        let data_path = &self.data_path;
        let read = |buf: &mut [u8]| -> Result<()> {
            self.data.read_exact_at(buf, loc.offset).map_err(|e| {
                if e.kind() == ErrorKind::UnexpectedEof {
                    Error::corrupted(
                        data_path,
                        format!(
                            "record {i} at offset {} (+{}) lies past the end of the file",
                            loc.offset, loc.phys_length
                        ),
                    )
                } else {
                    Error::io(data_path, e)
                }
            })
        };
        codec::decode_into(
            self.codec,
            self.dict.as_ref(),
            loc.phys_length as usize,
            dst,
            read,
        )
        .map_err(|e| match e {
            DecodeError::Read(e) => e,
            DecodeError::Frame(msg) => {
                Error::corrupted(&self.data_path, format!("record {i}: {msg}"))
            }
        })
    }

    fn source<'a>(&'a self) -> Source<'a, impl Fn(u64) -> (&'a Store, u64) + Sync + 'a> {
        Source {
            schema: &self.schema,
            len: self.len(),
            coded: self.codec != Codec::Raw,
            path: &self.dir,
            counters: &self.counters,
            locate: move |i| (self, i),
        }
    }

    // ------------------------------------------------------- delete, compact

    /// Deletes records by swapping the last record into each hole, in
    /// descending index order. Duplicates delete once.
    pub fn delete<I: RecordIndex>(&mut self, idx: &[I]) -> Result<()> {
        self.check_writable("delete")?;
        check_record_indices(idx, self.len())?;
        let mut order: Vec<u64> = idx.iter().map(|i| i.to_u64().unwrap()).collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        order.dedup();
        for &i in &order {
            if i + 1 != self.len() {
                self.packed_dense = false;
            }
            let removed = self.locs.swap_remove(i as usize);
            self.live_bytes -= removed.phys_length as u64;
            if i < self.len() {
                self.dirty_slots.insert(i);
            }
        }
        let len = self.len();
        self.dirty_slots.split_off(&len);
        self.unsynced_from = self.unsynced_from.min(len);
        if !order.is_empty() {
            self.header_dirty = true;
        }
        Ok(())
    }

    /// Rewrites live records densely in physical order, in place, then
    /// truncates both files. Every index keeps its record.
    ///
    /// Crash-safe: records move in steps of at most [`COMPACT_CHUNK`]
    /// bytes, each committed on its own, so a store killed mid-compaction
    /// reopens with every record intact (partly compacted). A step whose
    /// destination is free space (holes, and bytes of records moved by
    /// earlier steps) copies within data.zr before its commit; a step whose
    /// destination overlaps its own records' bytes carries them in the
    /// commit's journal instead, so no record ever moves to a higher address.
    pub fn compact(&mut self) -> Result<()> {
        self.check_writable("compact")?;
        self.sync()?;
        // Records move and the file shrinks: no reads through the mapping.
        self.map = None;
        self.check_no_overlap()?;
        let result = self.compact_steps();
        if let Err(e) = &result {
            self.fail(e);
        }
        self.packed_dense = self.compute_packed_dense();
        self.ensure_map(self.tail);
        result
    }

    /// Live records in physical order.
    fn physical_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.locs.len()).collect();
        order.sort_unstable_by_key(|&i| self.locs[i].offset);
        order
    }

    fn check_no_overlap(&self) -> Result<()> {
        let order = self.physical_order();
        for w in order.windows(2) {
            let (a, b) = (self.locs[w[0]], self.locs[w[1]]);
            if a.offset + a.phys_length as u64 > b.offset {
                return Err(self.corrupted_meta(format!(
                    "records {} (offset {}, +{}) and {} (offset {}) overlap in data.zr",
                    w[0], a.offset, a.phys_length, w[1], b.offset
                )));
            }
        }
        Ok(())
    }

    fn compact_steps(&mut self) -> Result<()> {
        let order = self.physical_order();
        let chunk = COMPACT_CHUNK_BYTES.load(Ordering::Relaxed);
        let direct_min = COMPACT_DIRECT_BYTES.load(Ordering::Relaxed);
        let mut write_pos = 0u64;
        let mut k = 0;
        // Records already in place stay where they are.
        while k < order.len() && self.locs[order[k]].offset == write_pos {
            write_pos += self.locs[order[k]].phys_length as u64;
            k += 1;
        }
        let mut buf = Vec::new();
        while k < order.len() {
            let first = self.locs[order[k]].offset;
            // Every hole below `first` is free.
            let gap = first - write_pos;
            let limit = if gap >= direct_min {
                gap.min(chunk)
            } else {
                chunk
            };
            let mut j = k;
            let mut bytes = 0u64;
            while j < order.len() {
                let len = self.locs[order[j]].phys_length as u64;
                if j > k && bytes + len > limit {
                    break;
                }
                bytes += len;
                j += 1;
            }
            self.read_runs(&order[k..j], bytes, &mut buf)?;
            let mut pos = write_pos;
            for &i in &order[k..j] {
                self.locs[i].offset = pos;
                pos += self.locs[i].phys_length as u64;
                self.dirty_slots.insert(i as u64);
            }
            if write_pos + bytes <= first {
                fileio::pwrite(&self.data, &buf, write_pos).map_err(io_at(&self.data_path))?;
                self.commit(Vec::new(), Vec::new())?;
            } else {
                let moves = vec![Move {
                    dest: write_pos,
                    len: bytes,
                }];
                buf = self.commit(moves, std::mem::take(&mut buf))?;
            }
            write_pos += bytes;
            k = j;
        }
        if self.tail != write_pos {
            self.tail = write_pos;
            self.header_dirty = true;
            self.commit(Vec::new(), Vec::new())?;
        }
        let data_len = self.data.metadata().map_err(io_at(&self.data_path))?.len();
        if data_len != self.tail {
            fileio::set_len(&self.data, self.tail).map_err(io_at(&self.data_path))?;
        }
        self.truncate_meta()
    }

    /// Reads the stored bytes of `records` (ascending offsets, `bytes` in
    /// all) into `buf`, one read per run of adjacent records.
    fn read_runs(&self, records: &[usize], bytes: u64, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        buf.resize(bytes as usize, 0);
        let mut at = 0usize;
        let mut k = 0;
        while k < records.len() {
            let start = self.locs[records[k]].offset;
            let mut end = start + self.locs[records[k]].phys_length as u64;
            let mut j = k + 1;
            while j < records.len() && self.locs[records[j]].offset == end {
                end += self.locs[records[j]].phys_length as u64;
                j += 1;
            }
            let n = (end - start) as usize;
            self.data
                .read_exact_at(&mut buf[at..at + n], start)
                .map_err(io_at(&self.data_path))?;
            at += n;
            k = j;
        }
        Ok(())
    }

    fn truncate_meta(&self) -> Result<()> {
        let size = format::meta_size_for(self.len()).expect("table size fits u64");
        fileio::set_len(&self.meta, size)
            .and_then(|_| fileio::sync_all(&self.meta))
            .map_err(io_at(&self.meta_path))
    }

    // ------------------------------------------------------- sync and close

    /// Durability barrier: after it returns, a crash reopens the store at
    /// exactly this state; a crash during it, at this state or the last one.
    pub fn sync(&mut self) -> Result<()> {
        self.check_writable("sync")?;
        let len = self.len();
        if !self.header_dirty && self.dirty_slots.is_empty() && self.unsynced_from >= len {
            return Ok(());
        }
        self.commit(Vec::new(), Vec::new()).map(drop)
    }

    /// Commits the in-memory state, plus `moves` of `payload` bytes into
    /// data.zr, and returns the payload buffer for reuse. A failure marks
    /// the handle failed: the state on disk is then the last commit or
    /// this one, and only a reopen tells which.
    fn commit(&mut self, moves: Vec<Move>, payload: Vec<u8>) -> Result<Vec<u8>> {
        let result = self.commit_inner(moves, payload);
        if let Err(e) = &result {
            self.fail(e);
        }
        result
    }

    fn commit_inner(&mut self, moves: Vec<Move>, payload: Vec<u8>) -> Result<Vec<u8>> {
        let len = self.len();
        let committed = self.committed_len;
        fileio::sync_data(&self.data).map_err(io_at(&self.data_path))?;
        // Slots past the committed table are referenced by nothing on disk:
        // they are written in place.
        if len > committed {
            self.write_locs(committed, len)?;
        }
        // Committed slots that change go through the journal.
        let rewrites: Vec<(u64, RecordLoc)> = self
            .dirty_slots
            .iter()
            .copied()
            .chain(self.unsynced_from..committed.min(len))
            .filter(|&i| i < committed.min(len))
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .map(|i| (i, self.locs[i as usize]))
            .collect();
        let payload = if rewrites.is_empty() && moves.is_empty() {
            if len > committed {
                // The new entries reach the disk before the header that
                // commits them.
                fileio::sync_data(&self.meta).map_err(io_at(&self.meta_path))?;
            }
            self.write_header(None)?;
            payload
        } else {
            let journal = Journal {
                length: len,
                tail_offset: self.tail,
                locs: rewrites,
                moves,
                payload,
            };
            let at = format::meta_size_for(committed.max(len)).expect("table size fits u64");
            let (prefix, crc) = journal.encode_parts();
            let meta_err = io_at(&self.meta_path);
            fileio::pwrite(&self.meta, &prefix, at)
                .and_then(|_| {
                    fileio::pwrite(&self.meta, &journal.payload, at + prefix.len() as u64)
                })
                .and_then(|_| {
                    let end = at + prefix.len() as u64 + journal.payload.len() as u64;
                    fileio::pwrite(&self.meta, &crc, end)
                })
                .and_then(|_| fileio::sync_data(&self.meta))
                .map_err(&meta_err)?;
            // The commit point: one header write names the journal.
            self.write_header(Some(at))?;
            self.apply_journal(&journal)?;
            journal.payload
        };
        self.committed_len = len;
        self.unsynced_from = len;
        self.dirty_slots.clear();
        self.header_dirty = false;
        Ok(payload)
    }

    /// Writes the header for the in-memory length and tail (naming a
    /// pending journal or none) and makes it durable.
    fn write_header(&self, journal: Option<u64>) -> Result<()> {
        let header = Header {
            length: self.len(),
            tail_offset: self.tail,
            schema_length: self.schema.encode().len() as u32,
            codec: self.codec,
            journal,
        };
        fileio::pwrite(&self.meta, &header.encode(), 0)
            .and_then(|_| fileio::sync_data(&self.meta))
            .map_err(io_at(&self.meta_path))
    }

    /// Applies a committed journal in place (its moves into data.zr, its
    /// locations into the table), then clears it from the header. Applying
    /// it twice is the same as once.
    fn apply_journal(&self, journal: &Journal) -> Result<()> {
        if !journal.moves.is_empty() {
            for (dest, bytes) in journal.moves_with_bytes() {
                fileio::pwrite(&self.data, bytes, dest).map_err(io_at(&self.data_path))?;
            }
            fileio::sync_data(&self.data).map_err(io_at(&self.data_path))?;
        }
        let slots = &journal.locs;
        let mut k = 0;
        while k < slots.len() {
            let mut j = k + 1;
            while j < slots.len() && slots[j].0 == slots[j - 1].0 + 1 {
                j += 1;
            }
            let run: Vec<RecordLoc> = slots[k..j].iter().map(|&(_, loc)| loc).collect();
            fileio::pwrite(
                &self.meta,
                &format::encode_locs(&run),
                format::loc_position(slots[k].0),
            )
            .map_err(io_at(&self.meta_path))?;
            k = j;
        }
        fileio::sync_data(&self.meta).map_err(io_at(&self.meta_path))?;
        self.write_header(None)
    }

    fn write_locs(&self, from: u64, to: u64) -> Result<()> {
        // Bounded chunks keep the encoding buffer small for huge tables.
        const CHUNK: u64 = 1 << 16;
        let mut i = from;
        while i < to {
            let j = (i + CHUNK).min(to);
            let bytes = format::encode_locs(&self.locs[i as usize..j as usize]);
            fileio::pwrite(&self.meta, &bytes, format::loc_position(i))
                .map_err(io_at(&self.meta_path))?;
            i = j;
        }
        Ok(())
    }

    /// Marks the handle failed after a write of committed state failed.
    fn fail(&mut self, e: &Error) {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
    }

    /// Syncs, trims both files to their committed size and releases the lock.
    /// A read-only handle writes nothing and only releases its shared lock.
    /// In a forked child it only releases this process's handle.
    pub fn close(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        // A forked child never writes; a failed handle leaves the disk at
        // its last commit, which the next open recovers; a read-only handle
        // never writes at all.
        if !self.is_owner() || self.failed.is_some() || self.readonly {
            return Ok(());
        }
        self.closed = false;
        self.sync()?;
        let data_len = self.data.metadata().map_err(io_at(&self.data_path))?.len();
        if data_len != self.tail {
            fileio::set_len(&self.data, self.tail)
                .and_then(|_| fileio::sync_all(&self.data))
                .map_err(io_at(&self.data_path))?;
        }
        let meta_len = self.meta.metadata().map_err(io_at(&self.meta_path))?.len();
        if Some(meta_len) != format::meta_size_for(self.len()) {
            self.truncate_meta()?;
        }
        self.closed = true;
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort: a handle dropped without close() still reaches disk.
        let _ = self.finish();
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

impl Records for Store {
    fn path(&self) -> &Path {
        &self.dir
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn codec(&self) -> Codec {
        self.codec
    }

    fn len(&self) -> u64 {
        self.locs.len() as u64
    }

    fn logical_len(&self, i: u64) -> Option<usize> {
        self.locs.get(i as usize).map(|l| l.logic_length as usize)
    }

    fn stats(&self) -> Stats {
        Stats {
            records: self.len(),
            live_bytes: self.live_bytes,
            data_bytes: self.tail,
            // Open rejects overlapping entries, so this never saturates.
            reclaimable: self.tail.saturating_sub(self.live_bytes),
        }
    }

    fn read_counters(&self) -> ReadCounters {
        self.counters.get()
    }

    /// Whether the handle was opened with [`Store::open_readonly`].
    fn is_readonly(&self) -> bool {
        self.readonly
    }

    /// Whether zstd frames written through this handle carry a checksum.
    fn checksum(&self) -> bool {
        self.checksum
    }

    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        gather::dense_into(&self.source(), idx, dst)
    }

    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        gather::ragged(&self.source(), idx)
    }

    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        gather::check_indices(&[i], self.len())?;
        let len = self.locs[i as usize].logic_length as usize;
        let mut out = Vec::new();
        out.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
            bytes: len as u64,
            what: format!("record {i}"),
        })?;
        out.resize(len, 0);
        self.read_into(i, &mut out, map_large_records())?;
        if self.kind() == Kind::Ragged {
            ragged::parse(&out, self.schema.dtype.itemsize())
                .map_err(|e| Error::corrupted(&self.data_path, format!("record {i}: {e}")))?;
        }
        Ok(out)
    }
}

/// Fails with `IndexOutOfRange` on the first index outside `0..len` (a
/// negative one included).
fn check_record_indices<I: RecordIndex>(idx: &[I], len: u64) -> Result<()> {
    for &i in idx {
        match i.to_u64() {
            Some(u) if u < len => {}
            _ => {
                return Err(Error::IndexOutOfRange {
                    index: i.as_i128(),
                    len,
                })
            }
        }
    }
    Ok(())
}

/// Hints the CPU to fetch `value` into cache.
#[inline(always)]
fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch(
            value as *const T as *const i8,
            std::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Reads the committed location table, with a pending journal's entries
/// (`overlay`) in place of the slots they rewrite, checking each entry as
/// it is read: a table whose header claims far more entries than are real
/// (a sparse file of zeros, say) fails at its first bad entry, and memory
/// grows only with the entries read.
fn read_locs(
    meta: &File,
    meta_path: &Path,
    length: u64,
    overlay: &[(u64, RecordLoc)],
    mut check: impl FnMut(u64, &RecordLoc) -> Result<(), String>,
) -> Result<Vec<RecordLoc>> {
    const CHUNK: u64 = 4096;
    let mut overlay = overlay.to_vec();
    overlay.sort_unstable_by_key(|&(slot, _)| slot);
    let mut next = overlay.iter().peekable();
    let mut locs = Vec::new();
    let mut chunk = vec![0u8; (LOC_SIZE * CHUNK) as usize];
    let mut i = 0u64;
    while i < length {
        let n = (length - i).min(CHUNK) as usize;
        let bytes = &mut chunk[..n * LOC_SIZE as usize];
        meta.read_exact_at(bytes, format::loc_position(i))
            .map_err(io_at(meta_path))?;
        locs.try_reserve(n).map_err(|_| {
            Error::corrupted(
                meta_path,
                format!("header length {length} is more record locations than fit in memory"),
            )
        })?;
        for (k, entry) in bytes.chunks_exact(LOC_SIZE as usize).enumerate() {
            let slot = i + k as u64;
            let mut loc = RecordLoc::decode(entry);
            while let Some(&&(s, l)) = next.peek() {
                if s > slot {
                    break;
                }
                if s == slot {
                    loc = l;
                }
                next.next();
            }
            check(slot, &loc).map_err(|e| Error::corrupted(meta_path, e))?;
            locs.push(loc);
        }
        i += n as u64;
    }
    Ok(locs)
}

/// Reads and validates the journal a header names as pending.
fn read_journal(
    meta: &File,
    meta_path: &Path,
    at: u64,
    meta_len: u64,
    header: &Header,
) -> Result<Journal> {
    let corrupt = |msg: String| Error::corrupted(meta_path, msg);
    let room = meta_len.saturating_sub(at);
    if room < journal::HEAD_SIZE {
        return Err(corrupt(format!(
            "the header names a pending journal at offset {at}, but the file is {meta_len} bytes"
        )));
    }
    let mut head = [0u8; journal::HEAD_SIZE as usize];
    meta.read_exact_at(&mut head, at)
        .map_err(io_at(meta_path))?;
    let head = journal::Head::decode(&head, room).map_err(corrupt)?;
    if head.length != header.length || head.tail_offset != header.tail_offset {
        return Err(corrupt(format!(
            "the pending journal at offset {at} commits length {} and tail_offset {}, but the header says {} and {}",
            head.length, head.tail_offset, header.length, header.tail_offset
        )));
    }
    // The size is bounded by the file's size, checked by Head::decode.
    let size = head.size().unwrap_or(0) as usize;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(size).map_err(|_| {
        corrupt(format!(
            "the pending journal at offset {at} is {size} bytes, more than can be allocated"
        ))
    })?;
    bytes.resize(size, 0);
    meta.read_exact_at(&mut bytes, at)
        .map_err(io_at(meta_path))?;
    Journal::decode(&bytes, &head).map_err(|e| corrupt(format!("{e} (offset {at})")))
}

fn check_loc(
    i: u64,
    loc: &RecordLoc,
    codec: Codec,
    dense_width: Option<u64>,
    tail: u64,
) -> Result<(), String> {
    match loc.end() {
        Some(end) if end <= tail => {}
        _ => {
            return Err(format!(
                "record {i} at offset {} (+{}) lies past tail_offset {tail}",
                loc.offset, loc.phys_length
            ))
        }
    }
    let logic = loc.logic_length as u64;
    if logic > MAX_RECORD_BYTES {
        return Err(format!(
            "record {i} has logic_length {logic} over the 2 GiB limit"
        ));
    }
    match dense_width {
        Some(w) if logic != w => {
            return Err(format!(
                "record {i} has logic_length {logic}, but dense records are {w} bytes"
            ))
        }
        None if logic < 9 => {
            return Err(format!(
                "record {i} has logic_length {logic}, too short for a ragged record"
            ))
        }
        _ => {}
    }
    if codec != Codec::Raw {
        // The densest a zstd frame can be is an RLE block: 4 bytes for 128 KiB.
        if logic > (loc.phys_length as u64) * MAX_ZSTD_RATIO {
            return Err(format!(
                "record {i} has logic_length {logic}, more than a {}-byte zstd frame can hold",
                loc.phys_length
            ));
        }
        // And a frame is never larger than zstd's bound for its content.
        let bound = zstd::zstd_safe::compress_bound(logic as usize) as u64;
        if loc.phys_length as u64 > bound {
            return Err(format!(
                "record {i} has phys_length {}, more than the {bound} bytes a zstd frame of {logic} bytes can take",
                loc.phys_length
            ));
        }
    }
    if codec == Codec::Raw && loc.phys_length != loc.logic_length {
        return Err(format!(
            "raw record {i} has phys_length {} != logic_length {}",
            loc.phys_length, loc.logic_length
        ));
    }
    if loc.phys_length == 0 {
        return Err(format!("record {i} has phys_length 0"));
    }
    Ok(())
}
