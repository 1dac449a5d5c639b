//! Creating a store and opening one: every invariant of the format checked
//! on the way in, and a pending journal (an interrupted commit) recovered.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::Path;

use super::gather::Counters;
use crate::codec::{self, Codec, Dictionary};
use crate::error::{Error, Result};
use crate::format::journal::{self, Journal};
use crate::format::{
    self, Header, RecordLoc, DATA_FILE, DICT_FILE, HEADER_SIZE, LOC_SIZE, MAX_RECORD_BYTES,
    META_FILE, PAGE_SIZE,
};
use crate::io::lock::LockedMeta;
use crate::io::{io_error, Fs, FsFile, Local, Storage, StorageFile};
use crate::read::records::Records;
use crate::schema::Kind;
use crate::schema::{Layout, Schema};

use super::{io_at, lock, lock_as, sync_dir, Store};

/// A zstd frame never decodes to more than this many times its size: each
/// block holds at most 128 KiB and takes at least 4 bytes (an RLE block).
const MAX_ZSTD_RATIO: u64 = 32 << 10;

/// The name meta.zr has while `create` builds it.
const CREATE_TEMP: &str = ".meta.zr.creating";

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
                "a content checksum needs a compressed codec ('zstd' or 'zstd_dict'), got codec '{codec}': raw records are stored as they are, without checksums"
            )));
        }
        match (codec, dict) {
            (Codec::ZstdDict, None) => {
                return Err(Error::InvalidValue(
                    "dict_bytes is required for codec 'zstd_dict': its records are compressed against that dictionary"
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
        Local.create_dir_all(dir).map_err(io_at(dir))?;
        // meta.zr is built under a temporary name and renamed into place
        // last, so a create killed at any instant leaves either no store
        // (create may run again) or a valid empty one. The temporary file's
        // lock excludes concurrent creates; it follows the file through the
        // rename and becomes the store's lock.
        let temp_path = dir.join(CREATE_TEMP);
        let meta = Local
            .create(&temp_path, false)
            .map(FsFile::Local)
            .map_err(io_at(&temp_path))?;
        let meta = lock(meta, dir, &temp_path)?;
        if meta_path.exists() {
            let _ = Local.remove(&temp_path);
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
            let _ = Local.remove(&dir.join(DATA_FILE));
            let _ = Local.remove(&dir.join(DICT_FILE));
            let _ = Local.remove(&temp_path);
        }
        result
    }

    fn initialise(
        dir: &Path,
        meta: LockedMeta<FsFile>,
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
        meta.set_len(0)
            .and_then(|_| meta.write_all_at(&page, 0))
            .and_then(|_| meta.sync_all())
            .map_err(io_at(&temp_path))?;
        let data = Local
            .create(&data_path, true)
            .and_then(|f| f.sync_all().map(|_| FsFile::Local(f)))
            .map_err(io_at(&data_path))?;
        match dict.as_ref().map(|d| d.bytes()) {
            Some(bytes) => {
                Local
                    .create(&dict_path, true)
                    .and_then(|f| f.write_all_at(bytes, 0).and_then(|_| f.sync_all()))
                    .map_err(io_at(&dict_path))?;
            }
            None => match Local.remove(&dict_path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&dict_path, e)),
            },
        }
        sync_dir(dir)?;
        Local
            .rename_noreplace(&temp_path, &meta_path)
            .map_err(|e| {
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
            let _ = Local.remove(&meta_path);
            return Err(e);
        }
        let packed_dense = codec == Codec::Raw && schema.record_width().is_some();
        Ok(Store {
            dir: dir.to_path_buf(),
            meta_path,
            data_path,
            meta,
            data,
            fs: Fs::Local,
            map: None,
            schema: schema.clone(),
            codec,
            dict,
            checksum: false,
            remote_checksum: Default::default(),
            locs: Vec::new(),
            verdict: Default::default(),
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
        Store::open_with(&Fs::Local, dir.as_ref(), false)
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
        Store::open_with(&Fs::Local, dir.as_ref(), true)
    }

    /// Opens the store at `location`: [`Store::open`] or
    /// [`Store::open_readonly`] of a local path, or a remote store (which
    /// opens read-only only: `readonly == false` is `InvalidValue` naming
    /// the URI). A remote open fetches `meta.zr` and `dict.zr` once, with
    /// one listing for the objects' sizes.
    pub fn open_at(location: &crate::Location, readonly: bool) -> Result<Store> {
        location.check_readonly(readonly, "store")?;
        warm(location)?;
        Store::open_with(location.fs(), location.path(), readonly)
    }

    pub(crate) fn open_with(fs: &Fs, dir: &Path, readonly: bool) -> Result<Store> {
        let meta_path = dir.join(META_FILE);
        let data_path = dir.join(DATA_FILE);
        let dict_path = dir.join(DICT_FILE);
        match fs.kind(dir) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(Error::NoStore {
                    path: dir.to_path_buf(),
                    reason: "the path does not exist".into(),
                })
            }
            Err(e) => return Err(io_error(dir, e)),
        }
        let meta = match fs.open(&meta_path, !readonly) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NoStore {
                    path: dir.to_path_buf(),
                    reason: "the directory has no meta.zr".into(),
                })
            }
            Err(e) if e.kind() == ErrorKind::NotADirectory => {
                return Err(Error::NoStore {
                    path: dir.to_path_buf(),
                    reason: "the path is a file, not a store directory".into(),
                })
            }
            Err(e) => return Err(io_error(&meta_path, e)),
        };
        let meta = lock_as(meta, dir, &meta_path, readonly)?;
        let corrupt_meta = |msg: String| Error::corrupted(&meta_path, msg);
        let (header, schema, meta_len) = read_head(&*meta, &meta_path)?;

        let data = match fs.open(&data_path, !readonly) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::corrupted(&data_path, "file is missing"))
            }
            Err(e) => return Err(io_error(&data_path, e)),
        };
        let data_len = data.len().map_err(io_at(&data_path))?;
        if data_len < header.tail_offset {
            return Err(Error::corrupted(
                &data_path,
                format!(
                    "file is {data_len} bytes, shorter than the committed tail_offset {}",
                    header.tail_offset
                ),
            ));
        }

        let dict = match (header.codec, fs.read(&dict_path)) {
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
            (_, Err(e)) => return Err(io_error(&dict_path, e)),
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
                    "an interrupted compaction left a pending journal that moves {} bytes of data.zr; a read-only open cannot apply it: a writable open recovers it",
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
            fs: fs.clone(),
            map: None,
            schema,
            codec: header.codec,
            dict,
            checksum: false,
            remote_checksum: Default::default(),
            locs,
            verdict: Default::default(),
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
        // A remote store asks the object only if someone wants to know.
        if !fs.is_remote() {
            store.checksum = store.last_frame_has_checksum();
        }
        store.packed_dense = store.compute_packed_dense();
        store.ensure_map(data_len);
        Ok(store)
    }

    /// The schema and committed length of the store at `dir` on `fs`,
    /// read from its header page alone (no lock, no record table; one
    /// small read in a bucket): what a table needs of a committed store to
    /// know its columns, which would otherwise cost reading the whole
    /// record table.
    pub(crate) fn peek(fs: &Fs, dir: &Path) -> Result<(Schema, u64)> {
        let meta_path = dir.join(META_FILE);
        let meta = match fs.open(&meta_path, false) {
            Ok(f) => f,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Err(Error::NoStore {
                    path: dir.to_path_buf(),
                    reason: "the directory has no meta.zr".into(),
                })
            }
            Err(e) => return Err(io_error(&meta_path, e)),
        };
        // A pending journal moves records and locations, never the length
        // (an open refuses one whose length differs from the header's).
        let (header, schema, _) = read_head(&meta, &meta_path)?;
        Ok((schema, header.length))
    }

    /// Whether the newest record is a zstd frame with a content checksum:
    /// a store keeps writing frames the way its last one was written.
    pub(super) fn last_frame_has_checksum(&self) -> bool {
        let Some(loc) = self.locs.iter().max_by_key(|l| l.offset) else {
            return false;
        };
        let mut head = [0u8; 5];
        self.codec.is_compressed()
            && loc.phys_length as usize >= head.len()
            && self.data.read_exact_at(&mut head, loc.offset).is_ok()
            && codec::frame_has_checksum(&head)
    }

    /// This store, if it is of `kind`; otherwise [`Error::WrongKind`]
    /// naming both (and the handle is closed):
    /// `Store::open(dir)?.require_kind(Kind::Dense)?`.
    pub fn require_kind(self, kind: Kind) -> Result<Store> {
        if self.kind() != kind {
            return Err(Error::WrongKind {
                path: self.dir.clone(),
                expected: kind,
                actual: self.kind(),
            });
        }
        Ok(self)
    }

    /// [`Store::open_with`] of a store that must be of `kind`.
    pub(crate) fn open_kind_at(fs: &Fs, dir: &Path, kind: Kind, readonly: bool) -> Result<Store> {
        Store::open_with(fs, dir, readonly)?.require_kind(kind)
    }
}

/// The header, schema and size of meta.zr (`meta`, at `meta_path`):
/// `Corrupted` when the file is shorter than its header page or than the
/// record table its header names, or the header or schema does not decode.
fn read_head(meta: &impl StorageFile, meta_path: &Path) -> Result<(Header, Schema, u64)> {
    let corrupt_meta = |msg: String| Error::corrupted(meta_path, msg);
    let meta_len = meta.len().map_err(io_at(meta_path))?;
    if meta_len < PAGE_SIZE {
        return Err(corrupt_meta(format!(
            "file is {meta_len} bytes, shorter than the {PAGE_SIZE}-byte header page"
        )));
    }
    let mut page = vec![0u8; PAGE_SIZE as usize];
    meta.read_exact_at(&mut page, 0).map_err(io_at(meta_path))?;
    let header = Header::decode(page[..HEADER_SIZE].try_into().unwrap())
        .map_err(|e| corrupt_meta(format!("header: {e}")))?;
    let schema_end = HEADER_SIZE + header.schema_length as usize;
    let schema = Schema::decode(&page[HEADER_SIZE..schema_end]).map_err(corrupt_meta)?;
    format::meta_size_for(header.length)
        .filter(|&end| end <= meta_len)
        .ok_or_else(|| {
            corrupt_meta(format!(
                "header length {} needs a {}-entry record table but the file is {meta_len} bytes",
                header.length, header.length
            ))
        })?;
    Ok((header, schema, meta_len))
}

/// Reads the committed location table, with a pending journal's entries
/// (`overlay`) in place of the slots they rewrite, checking each entry as
/// it is read: a table whose header claims far more entries than are real
/// (a sparse file of zeros, say) fails at its first bad entry, and memory
/// grows only with the entries read.
fn read_locs(
    meta: &FsFile,
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
    meta: &FsFile,
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

/// Before a remote store opens: one listing of its objects and one round
/// of concurrent fetches of its `meta.zr` and `dict.zr` (the store's part
/// of a remote open).
#[cfg_attr(not(feature = "remote"), allow(unused_variables))]
fn warm(location: &crate::Location) -> Result<()> {
    #[cfg(feature = "remote")]
    if let Fs::Remote(r) = location.fs() {
        let path = location.path();
        let key = crate::io::remote::setup(path, r.key_of(path))?;
        crate::io::remote::setup(path, r.list_prefix(&key))?;
        let keys = [format!("{key}/meta.zr"), format!("{key}/dict.zr")];
        let present: Vec<String> = keys.into_iter().filter(|k| r.knows(k)).collect();
        crate::io::remote::setup(path, r.prefetch(&present))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::journal::Journal;
    use crate::schema::DType;
    use crate::store::testing::{bytes_store, header_on_disk};

    #[test]
    fn create_then_open_round_trips_and_refuses_a_second_create() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        bytes_store(&dir, 5, Codec::Zstd).close().unwrap();
        let s = Store::open(&dir).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s.read_record(4).unwrap(), vec![4]);
        drop(s);
        let again = Store::create(
            &dir,
            Schema::dense(DType::U8, &[]).unwrap(),
            Codec::Raw,
            None,
        );
        assert!(
            matches!(again, Err(Error::AlreadyExists { .. })),
            "{again:?}"
        );
        assert!(!dir.join(CREATE_TEMP).exists());
        let missing = Store::open(tmp.path().join("nothing"));
        assert!(matches!(missing, Err(Error::NoStore { .. })), "{missing:?}");
    }

    #[test]
    fn open_of_the_other_kind_names_both() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        bytes_store(&dir, 1, Codec::Raw).close().unwrap();
        match Store::open(&dir).and_then(|s| s.require_kind(Kind::Ragged)) {
            Err(Error::WrongKind {
                expected, actual, ..
            }) => {
                assert_eq!((expected, actual), (Kind::Ragged, Kind::Dense))
            }
            other => panic!("expected WrongKind, got {other:?}"),
        }
    }

    #[test]
    fn open_recovers_a_pending_journal() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let mut s = bytes_store(&dir, 4, Codec::Raw);
        // Commit a journal that points slot 0 at record 3's bytes, then stop
        // as a crash would, before applying it.
        let at = format::meta_size_for(4).unwrap();
        let journal = Journal {
            length: 4,
            tail_offset: s.tail,
            locs: vec![(0, s.locs[3])],
            moves: Vec::new(),
            payload: Vec::new(),
        };
        let (prefix, crc) = journal.encode_parts();
        s.meta.write_all_at(&prefix, at).unwrap();
        s.meta.write_all_at(&crc, at + prefix.len() as u64).unwrap();
        s.write_header(Some(at)).unwrap();
        s.failed = Some("stopped by the test".into());
        drop(s);
        assert_eq!(header_on_disk(&dir).journal, Some(at));

        // A read-only handle sees the committed state and writes nothing.
        let r = Store::open_readonly(&dir).unwrap();
        assert_eq!(r.read_record(0).unwrap(), vec![3]);
        drop(r);
        assert_eq!(header_on_disk(&dir).journal, Some(at));

        // A writable open applies the journal and clears it.
        let w = Store::open(&dir).unwrap();
        assert_eq!(w.read_record(0).unwrap(), vec![3]);
        assert_eq!(w.read_record(3).unwrap(), vec![3]);
        drop(w);
        assert_eq!(header_on_disk(&dir).journal, None);
    }

    #[test]
    fn peek_reads_what_an_open_reads_from_the_header_page_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        bytes_store(&dir, 7, Codec::Zstd).close().unwrap();
        let (schema, rows) = Store::peek(&Fs::Local, &dir).unwrap();
        let s = Store::open_readonly(&dir).unwrap();
        assert_eq!((&schema, rows), (s.schema(), s.len()));
        drop(s);
        let missing = Store::peek(&Fs::Local, &tmp.path().join("nothing"));
        assert!(matches!(missing, Err(Error::NoStore { .. })), "{missing:?}");
        // A record table shorter than the header says is refused, naming
        // meta.zr, as an open refuses it.
        let meta = dir.join(META_FILE);
        let f = std::fs::OpenOptions::new().write(true).open(&meta).unwrap();
        f.set_len(PAGE_SIZE + LOC_SIZE).unwrap();
        match Store::peek(&Fs::Local, &dir) {
            Err(Error::Corrupted { file, invariant }) => {
                assert_eq!(file, meta);
                assert!(invariant.contains("record table"), "{invariant}");
            }
            other => panic!("expected Corrupted, got {other:?}"),
        }
    }

    #[test]
    fn check_loc_names_each_broken_invariant() {
        let loc = |offset, phys, logic| RecordLoc {
            offset,
            phys_length: phys,
            logic_length: logic,
        };
        assert_eq!(check_loc(0, &loc(0, 8, 8), Codec::Raw, Some(8), 8), Ok(()));
        let past = check_loc(1, &loc(4, 8, 8), Codec::Raw, Some(8), 8).unwrap_err();
        assert!(past.contains("lies past tail_offset 8"), "{past}");
        let width = check_loc(2, &loc(0, 4, 4), Codec::Raw, Some(8), 8).unwrap_err();
        assert!(width.contains("dense records are 8 bytes"), "{width}");
        let raw = check_loc(3, &loc(0, 4, 9), Codec::Raw, None, 8).unwrap_err();
        assert!(raw.contains("phys_length 4 != logic_length 9"), "{raw}");
        let short = check_loc(4, &loc(0, 4, 4), Codec::Raw, None, 8).unwrap_err();
        assert!(short.contains("too short for a ragged record"), "{short}");
        let dense = check_loc(5, &loc(0, 1, 1 << 20), Codec::Zstd, Some(1 << 20), 8).unwrap_err();
        assert!(
            dense.contains("more than a 1-byte zstd frame can hold"),
            "{dense}"
        );
    }
}
