//! Reading a store's records: through a shared mapping of data.zr or
//! positional reads, decoding each straight into the caller's buffer.

use std::cell::Cell;
use std::io::ErrorKind;
use std::path::Path;

use crate::codec::{self, Codec, DecodeError};
use crate::error::{Error, Result};
use crate::format::RecordLoc;
use crate::io::{io_error, Runs, StorageFile};

use super::Store;

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
    crate::flag::set_during(&STREAMING, f)
}

/// Whether gathers started on this thread read large records through the
/// mapping (see [`streaming`]).
pub(crate) fn map_large_records() -> bool {
    !STREAMING.with(Cell::get)
}

impl Store {
    /// Makes the mapping of data.zr cover `0..tail`. A new mapping covers
    /// at least `hint` bytes and twice the old one, so appends remap rarely;
    /// it may extend past the end of the file, but only bytes below `tail`
    /// (which the file always holds) are ever touched.
    pub(super) fn ensure_map(&mut self, hint: u64) {
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
            // SAFETY: see above: no byte below tail changes while mapped.
            .and_then(|len| unsafe { self.data.map(len) });
    }

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

    /// Reads record `i` (already bounds-checked) into `dst` of its logical
    /// size, from `runs` when they hold it (a remote store's prefetch).
    pub(crate) fn read_into(
        &self,
        i: u64,
        dst: &mut [u8],
        map_large: bool,
        runs: Option<&Runs>,
    ) -> Result<()> {
        self.read_loc(i, self.locs[i as usize], dst, map_large, runs)
    }

    /// Whether data.zr is a remote object (gathers then fetch their
    /// records' bytes ahead, see `gather.rs`).
    #[inline]
    pub(crate) fn is_remote(&self) -> bool {
        self.fs.is_remote()
    }

    /// The remote data.zr, for the gather's prefetch.
    #[cfg(feature = "remote")]
    pub(crate) fn remote_data(&self) -> Option<&crate::io::remote::RemoteFile> {
        self.data.remote()
    }

    /// The stored byte range of record `i` in data.zr.
    #[cfg(feature = "remote")]
    pub(crate) fn stored_range(&self, loc: RecordLoc) -> std::ops::Range<u64> {
        loc.offset..loc.offset + loc.phys_length as u64
    }

    /// Whether the store's frames carry checksums (a remote store asks its
    /// object on first use).
    pub(crate) fn frames_have_checksum(&self) -> bool {
        if self.is_remote() {
            *self
                .remote_checksum
                .get_or_init(|| self.last_frame_has_checksum())
        } else {
            self.checksum
        }
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

    /// Live records stored uncompressed (see [`crate::Stats::raw_records`]):
    /// in a zstd store, those whose location has a raw frame's size and,
    /// where the data file is mapped, whose frame head and block headers
    /// say so. An unmapped file (a store in a bucket) is counted by the
    /// sizes alone, so that its stats ask for no record's bytes (a request
    /// a record): a compressed frame of exactly a raw frame's size would
    /// count, which a zstd encoder writes only as raw blocks. A
    /// frame that cannot be read counts as compressed; gathers report it.
    pub(crate) fn raw_records(&self) -> u64 {
        if self.codec == Codec::Raw {
            return self.locs.len() as u64;
        }
        let sized = self
            .locs
            .iter()
            .filter(|l| codec::has_raw_frame_size(l.phys_length, l.logic_length))
            .filter(|l| l.end().is_some_and(|end| end <= self.tail));
        let Some(m) = self.map.as_deref() else {
            return sized.count() as u64;
        };
        sized
            .filter(|l| {
                codec::is_raw_frame_read(l.logic_length as usize, |at, buf| {
                    let from = (l.offset + at as u64) as usize;
                    match m.get(from..from + buf.len()) {
                        Some(b) => {
                            buf.copy_from_slice(b);
                            true
                        }
                        None => false,
                    }
                })
            })
            .count() as u64
    }

    /// Reads record `i`, stored at `loc`, into `dst` of its logical size:
    /// from `runs` when they hold it, else through the mapping unless it is
    /// large and `map_large` is false, else with a positional read.
    pub(crate) fn read_loc(
        &self,
        i: u64,
        loc: RecordLoc,
        dst: &mut [u8],
        map_large: bool,
        runs: Option<&Runs>,
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
        // The record's bytes in memory: a remote store's prefetched runs, or
        // the mapping (unless the record is large and `map_large` is false).
        // One decode call site, so that the raw copy inlines.
        let held = runs
            .and_then(|r| r.slice(loc.offset, loc.phys_length as usize))
            .or_else(|| {
                let map = self.map.as_ref()?;
                let (start, end) = (
                    loc.offset as usize,
                    loc.offset as usize + loc.phys_length as usize,
                );
                (end <= map.len() && (map_large || loc.phys_length < LARGE_RECORD))
                    .then(|| &map[start..end])
            });
        if let Some(bytes) = held {
            return codec::decode_slice(self.codec, self.dict.as_ref(), bytes, dst)
                .map_err(|msg| Error::corrupted(&self.data_path, format!("record {i}: {msg}")));
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
                    io_error(data_path, e)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;
    use crate::read::records::Records;
    use crate::store::testing::bytes_store;

    #[test]
    fn streaming_holds_for_its_closure_only() {
        assert!(map_large_records());
        streaming(|| {
            assert!(!map_large_records());
            streaming(|| assert!(!map_large_records()));
            assert!(!map_large_records());
        });
        assert!(map_large_records());
        let r = std::panic::catch_unwind(|| streaming(|| panic!("unwinds")));
        assert!(r.is_err());
        assert!(map_large_records());
    }

    #[test]
    fn positional_reads_match_the_mapping() {
        let tmp = tempfile::tempdir().unwrap();
        for codec in [Codec::Raw, Codec::Zstd] {
            let mut s = bytes_store(&tmp.path().join(format!("{codec}")), 50, codec);
            let idx: Vec<u64> = (0..50).rev().collect();
            let mapped = s.gather_dense(&idx).unwrap();
            assert!(s.map.is_some());
            s.map = None;
            let read = s.gather_dense(&idx).unwrap();
            assert_eq!(mapped.as_slice(), read.as_slice());
            assert_eq!(read.as_slice()[0], 49);
        }
    }

    #[test]
    fn a_location_of_the_wrong_size_is_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let s = bytes_store(&tmp.path().join("s"), 2, Codec::Raw);
        let mut dst = [0u8; 2];
        let err = s.read_loc(1, s.locs[1], &mut dst, true, None).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
        assert!(
            err.to_string().contains("logic_length 1, expected 2"),
            "{err}"
        );
    }
}
