//! Batch gathers, written once for a single store and for a concatenation
//! of stores (a sharded table's column, [`crate::concat::Concat`]).
//!
//! A gather resolves each index to the store that holds it and the index
//! there ([`Parts::part`]), then decodes straight into its place in the
//! output: one pass, no intermediate buffer. A batch larger than one chunk
//! is cut into contiguous chunks of the output that the calling thread and
//! the executor's workers claim one at a time as they come free
//! ([`executor::for_each_chunk`]), so fan-out never makes a gather wait.

use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::executor::{self, FanOut, Work};
use crate::ragged;
use crate::schema::Schema;
use crate::store::{self, RaggedBatch, RecordIndex, Store};

/// Output bytes per chunk of a raw gather: the unit that threads claim one
/// at a time (see [`executor::for_each_chunk`]). Large enough that claiming
/// costs nothing beside the copy, small enough that a 512 KiB batch still
/// spreads over eight threads.
const CHUNK_BYTES_RAW: usize = 64 << 10;
/// Output bytes per chunk of a decoding gather (decoding costs about ten
/// times a copy per byte, and small frames cost more per byte still).
const CHUNK_BYTES_CODED: usize = 16 << 10;

/// What a gather reads from: one store, or stores end to end.
pub(crate) trait Parts: Sync {
    /// The records' schema (every part shares it).
    fn schema(&self) -> &Schema;
    /// Total number of records.
    fn len(&self) -> u64;
    /// The store holding record `i` (`i < len`) and its index there.
    fn part(&self, i: u64) -> (&Store, u64);
    /// Whether any part decodes (not raw).
    fn coded(&self) -> bool;
    /// What the error of a wrong-kind gather names.
    fn describe(&self) -> String;
    /// Adds to the read counters.
    fn count_read(&self, records: usize, bytes: usize);
}

/// Fails with `IndexOutOfRange` on the first index outside `0..len`.
pub(crate) fn check_indices<I: RecordIndex>(idx: &[I], len: u64) -> Result<()> {
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

/// Records per chunk for a gather of `records` records and `bytes` bytes:
/// at least one, and about [`CHUNK_BYTES_RAW`] or [`CHUNK_BYTES_CODED`] of
/// output each.
fn chunk_records(coded: bool, records: usize, bytes: usize) -> usize {
    let target = if coded {
        CHUNK_BYTES_CODED
    } else {
        CHUNK_BYTES_RAW
    };
    let per_record = bytes.div_ceil(records.max(1)).max(1);
    target.div_ceil(per_record).clamp(1, records.max(1))
}

fn work_of<P: Parts + ?Sized>(parts: &P) -> Work {
    if parts.coded() {
        Work::Decode
    } else {
        Work::Copy
    }
}

/// Hands each chunk its own part of the output: chunk `c` takes slot `c`
/// exactly once.
struct Slots<T>(Vec<std::sync::Mutex<Option<T>>>);

impl<T> Slots<T> {
    fn new(parts: impl IntoIterator<Item = T>) -> Self {
        Slots(
            parts
                .into_iter()
                .map(|p| std::sync::Mutex::new(Some(p)))
                .collect(),
        )
    }

    fn take(&self, c: usize) -> T {
        self.0[c]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("each chunk is claimed once")
    }
}

fn dense_width<P: Parts + ?Sized>(parts: &P) -> Result<usize> {
    parts
        .schema()
        .record_width()
        .map(|w| w as usize)
        .ok_or_else(|| {
            Error::InvalidValue(format!(
                "{} is a ragged store, not a dense store",
                parts.describe()
            ))
        })
}

/// Gathers dense records `idx` (any order, duplicates allowed) into `dst`,
/// which must hold exactly `idx.len()` records.
pub(crate) fn dense_into<P: Parts + ?Sized, I: RecordIndex>(
    parts: &P,
    idx: &[I],
    dst: &mut [u8],
) -> Result<()> {
    let width = dense_width(parts)?;
    if dst.len() != idx.len() * width {
        return Err(Error::InvalidValue(format!(
            "destination of {} bytes does not hold {} records of {width} bytes",
            dst.len(),
            idx.len()
        )));
    }
    check_indices(idx, parts.len())?;
    parts.count_read(idx.len(), dst.len());
    let map_large = store::map_large_records();
    let fill = |ids: &[I], out: &mut [u8]| -> Result<()> {
        for (j, (&i, rec)) in ids.iter().zip(out.chunks_exact_mut(width)).enumerate() {
            // The location table is far larger than the caches on big
            // stores: fetch a few entries ahead.
            if let Some(&ahead) = ids.get(j + 8) {
                let (s, k) = parts.part(ahead.to_u64().unwrap());
                s.prefetch_dense_loc(k);
            }
            let (s, k) = parts.part(i.to_u64().unwrap());
            s.read_loc(k, s.dense_loc(k, width), rec, map_large)?;
        }
        Ok(())
    };
    let per = chunk_records(parts.coded(), idx.len(), dst.len());
    let plan = FanOut::plan(work_of(parts), dst.len(), idx.len().div_ceil(per));
    if !plan.fans_out() {
        let r = fill(idx, dst);
        plan.done_alone();
        return r;
    }
    let slots = Slots::new(idx.chunks(per).zip(dst.chunks_mut(per * width)));
    executor::for_each_chunk(plan, |c| {
        let (ids, out) = slots.take(c);
        fill(ids, out)
    })
}

/// Gathers dense records into a new buffer.
pub(crate) fn dense<P: Parts + ?Sized, I: RecordIndex>(parts: &P, idx: &[I]) -> Result<Buffer> {
    let width = dense_width(parts)?;
    let mut buf = idx
        .len()
        .checked_mul(width)
        .and_then(Buffer::try_new)
        .ok_or_else(|| Error::OutOfMemory {
            bytes: (idx.len() as u64).saturating_mul(width as u64),
            what: format!("a gather of {} records", idx.len()),
        })?;
    dense_into(parts, idx, buf.as_mut_slice())?;
    Ok(buf)
}

/// Gathers ragged records `idx` into one buffer of 8-byte aligned records.
pub(crate) fn ragged<P: Parts + ?Sized, I: RecordIndex>(
    parts: &P,
    idx: &[I],
) -> Result<RaggedBatch> {
    if parts.schema().record_width().is_some() {
        return Err(Error::InvalidValue(format!(
            "{} is a dense store, not a ragged store",
            parts.describe()
        )));
    }
    check_indices(idx, parts.len())?;
    let mut spans = Vec::with_capacity(idx.len());
    let mut total = 0usize;
    for (j, &i) in idx.iter().enumerate() {
        if let Some(&ahead) = idx.get(j + 8) {
            let (s, k) = parts.part(ahead.to_u64().unwrap());
            s.prefetch_loc(k);
        }
        let (s, k) = parts.part(i.to_u64().unwrap());
        let len = s.logical_len(k).unwrap_or(0);
        spans.push((total, len));
        total = total
            .checked_add(len)
            .and_then(|t| t.checked_next_multiple_of(8))
            .ok_or_else(|| Error::OutOfMemory {
                bytes: u64::MAX,
                what: format!("a gather of {} ragged records", idx.len()),
            })?;
    }
    let mut buffer = Buffer::try_new(total).ok_or_else(|| Error::OutOfMemory {
        bytes: total as u64,
        what: format!("a gather of {} ragged records", idx.len()),
    })?;
    parts.count_read(idx.len(), spans.iter().map(|s| s.1).sum());
    let itemsize = parts.schema().dtype.itemsize();
    let map_large = store::map_large_records();
    let fill = |ids: &[I], sp: &[(usize, usize)], out: &mut [u8], base: usize| -> Result<()> {
        for (&i, &(start, len)) in ids.iter().zip(sp) {
            let rec = &mut out[start - base..start - base + len];
            let (s, k) = parts.part(i.to_u64().unwrap());
            s.read_into(k, rec, map_large)?;
            ragged::parse(rec, itemsize)
                .map_err(|e| Error::corrupted(s.data_path(), format!("record {k}: {e}")))?;
        }
        Ok(())
    };
    let per = chunk_records(parts.coded(), idx.len(), total);
    let plan = FanOut::plan(work_of(parts), total, idx.len().div_ceil(per));
    if !plan.fans_out() {
        fill(idx, &spans, buffer.as_mut_slice(), 0)?;
        plan.done_alone();
    } else {
        // Contiguous blocks of the index list, each with its own slice of
        // the destination.
        let mut blocks = Vec::with_capacity(idx.len().div_ceil(per));
        let mut rest = buffer.as_mut_slice();
        let mut consumed = 0usize;
        for (ids, sp) in idx.chunks(per).zip(spans.chunks(per)) {
            let end = sp.last().map_or(consumed, |&(s, l)| s + l);
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(end - consumed);
            blocks.push((ids, sp, head, consumed));
            rest = tail;
            consumed = end;
        }
        let slots = Slots::new(blocks);
        executor::for_each_chunk(plan, |c| {
            let (ids, sp, out, base) = slots.take(c);
            fill(ids, sp, out, base)
        })?;
    }
    Ok(RaggedBatch::new(buffer, spans, itemsize))
}
