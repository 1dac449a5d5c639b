//! Compaction: live records rewritten densely in physical order, in place,
//! in crash-safe steps.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;
use crate::format::journal::Move;
use crate::format::{self};
use crate::io::StorageFile;
use crate::read::records::Records;

use super::{io_at, Store};

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

impl Store {
    /// Rewrites live records densely in physical order, in place, then
    /// truncates both files. Every index keeps its record.
    ///
    /// Crash-safe: records move in steps of at most `COMPACT_CHUNK`
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
                self.data
                    .write_all_at(&buf, write_pos)
                    .map_err(io_at(&self.data_path))?;
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
        let data_len = self.data.len().map_err(io_at(&self.data_path))?;
        if data_len != self.tail {
            self.data
                .set_len(self.tail)
                .map_err(io_at(&self.data_path))?;
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

    pub(super) fn truncate_meta(&self) -> Result<()> {
        let size = format::meta_size_for(self.len()).expect("table size fits u64");
        self.meta
            .set_len(size)
            .and_then(|_| self.meta.sync_all())
            .map_err(io_at(&self.meta_path))
    }
}

#[cfg(test)]
mod tests {
    use crate::codec::Codec;
    use crate::read::records::Records;
    use crate::store::testing::bytes_store;
    use crate::store::Store;

    #[test]
    fn compaction_frees_the_holes_and_keeps_every_index() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        for codec in [Codec::Raw, Codec::Zstd] {
            let dir = dir.join(format!("{codec}"));
            let mut s = bytes_store(&dir, 10, codec);
            s.delete(&[0u64, 5]).unwrap();
            let before = s.gather_dense(&(0..8).collect::<Vec<u64>>()).unwrap();
            let first = s.loc(1).unwrap().offset;
            s.compact().unwrap();
            let stats = s.stats();
            assert_eq!(stats.reclaimable, 0);
            assert_eq!(stats.data_bytes, stats.live_bytes);
            let after = s.gather_dense(&(0..8).collect::<Vec<u64>>()).unwrap();
            assert_eq!(before.as_slice(), after.as_slice());
            // Nothing moves to a higher address.
            assert!(s.loc(1).unwrap().offset <= first);
            s.close().unwrap();
            let data = std::fs::metadata(dir.join(crate::format::DATA_FILE)).unwrap();
            assert_eq!(data.len(), stats.data_bytes);
            assert_eq!(
                Store::open(&dir)
                    .unwrap()
                    .gather_dense(&[0])
                    .unwrap()
                    .as_slice(),
                &before.as_slice()[..1]
            );
        }
    }

    #[test]
    fn records_in_place_stay_where_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = bytes_store(&tmp.path().join("s"), 6, Codec::Raw);
        let locs: Vec<_> = (0..6).map(|i| s.loc(i).unwrap()).collect();
        s.compact().unwrap();
        assert_eq!((0..6).map(|i| s.loc(i).unwrap()).collect::<Vec<_>>(), locs);
        assert!(s.packed_dense);
    }
}
