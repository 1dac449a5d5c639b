//! Appending records: raw runs written as they are, compressed records
//! fanned out over the executor.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::codec::{self, Codec};
use crate::error::{Error, Result};
use crate::executor;
use crate::format::{RecordLoc, MAX_RECORD_BYTES};
use crate::io::StorageFile;
use crate::read::ragged::{self, Packed};
use crate::read::records::Records;
use crate::schema::Kind;

use super::{io_at, Store};

impl Store {
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
            self.data
                .write_all_at(src, start)
                .map_err(io_at(&self.data_path))?;
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
            // Records are compressed in parallel a chunk at a time into one
            // buffer each, written with one call: small records would
            // otherwise cost a system call apiece.
            let chunk = chunk_records(src.len(), n);
            let frontier = AtomicU64::new(start);
            let first = self.len();
            let verdict = self.verdict;
            let mut locs = vec![RecordLoc::default(); n];
            let (codec, dict, checksum, data, data_path) = (
                self.codec,
                self.dict.as_ref(),
                self.checksum,
                &self.data,
                &self.data_path,
            );
            // Each chunk starts from the verdict the last append left and
            // hands on its own; the last chunk's is the store's next.
            let verdicts = executor::pool().install(|| {
                locs.par_chunks_mut(chunk)
                    .enumerate()
                    .map(|(c, locs)| -> Result<codec::Verdict> {
                        let mut buf = Vec::new();
                        let mut verdict = verdict;
                        for (k, loc) in locs.iter_mut().enumerate() {
                            let i = c * chunk + k;
                            let r = record(i);
                            let logic = r.len() as u32;
                            codec::encode_with(
                                codec,
                                dict,
                                checksum,
                                &mut verdict,
                                first + i as u64,
                                &src[r],
                                |frame| -> Result<()> {
                                    *loc = RecordLoc {
                                        // Within the chunk for now.
                                        offset: buf.len() as u64,
                                        phys_length: frame.len() as u32,
                                        logic_length: logic,
                                    };
                                    buf.extend_from_slice(frame);
                                    Ok(())
                                },
                            )
                            .map_err(|e| {
                                Error::InvalidValue(format!("compressing record {i}: {e}"))
                            })??;
                        }
                        // Chunks reserve their offsets in completion order.
                        let base = frontier.fetch_add(buf.len() as u64, Ordering::Relaxed);
                        data.write_all_at(&buf, base)
                            .map_err(|e| Error::io(data_path, e))?;
                        for loc in locs.iter_mut() {
                            loc.offset += base;
                        }
                        Ok(verdict)
                    })
                    .collect::<Result<Vec<_>>>()
            })?;
            if let Some(&last) = verdicts.last() {
                self.verdict = last;
            }
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
}

/// Records per compression chunk: about 1 MiB of source bytes, and at
/// least enough chunks to keep every worker busy.
fn chunk_records(bytes: usize, n: usize) -> usize {
    const TARGET: usize = 1 << 20;
    let per_record = (bytes / n.max(1)).max(1);
    let by_size = (TARGET / per_record).max(1);
    let by_workers = n.div_ceil(4 * executor::budget().max(1)).max(1);
    by_size.min(by_workers)
}

#[cfg(test)]
mod tests {
    use crate::codec::Codec;
    use crate::error::Error;
    use crate::read::records::Records;
    use crate::store::testing::bytes_store;

    #[test]
    fn raw_records_are_packed_back_to_back() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = bytes_store(&tmp.path().join("s"), 3, Codec::Raw);
        s.append_dense(&[7, 8]).unwrap();
        assert!(s.packed_dense);
        assert_eq!(s.tail, 5);
        for i in 0..5 {
            assert_eq!(s.loc(i).unwrap().offset, i);
        }
        assert_eq!(s.gather_dense(&[4, 0]).unwrap().as_slice(), &[8, 0]);
    }

    #[test]
    fn compressed_records_take_disjoint_extents() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = bytes_store(&tmp.path().join("s"), 0, Codec::Zstd);
        s.append_dense(&(0..200u8).collect::<Vec<_>>()).unwrap();
        let mut extents: Vec<(u64, u64)> = (0..200)
            .map(|i| s.loc(i).unwrap())
            .map(|l| (l.offset, l.offset + l.phys_length as u64))
            .collect();
        extents.sort_unstable();
        assert_eq!(extents[0].0, 0);
        assert!(extents.windows(2).all(|w| w[0].1 == w[1].0));
        assert_eq!(extents[199].1, s.tail);
        assert_eq!(s.stats().live_bytes, s.tail);
    }

    #[test]
    fn a_rejected_append_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = crate::Store::create(
            tmp.path().join("s"),
            crate::Schema::dense(crate::DType::U8, &[2]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        let err = s.append_dense(&[1, 2, 3]).unwrap_err();
        assert!(matches!(err, Error::InvalidValue(_)), "{err:?}");
        let err = s.append_ragged(&crate::Packed::default()).unwrap_err();
        assert!(err.to_string().contains("not a ragged store"), "{err}");
        assert_eq!((s.len(), s.tail), (0, 0));
    }
}
