//! Batch gathers, written once for a single store and for a concatenation
//! of stores (a sharded table's column, [`crate::Concat`]), and the
//! store's [`Records`] implementation, which runs them.
//!
//! A gather resolves each index to the store that holds it and the index
//! there (`locate`), then decodes straight into its place in the
//! output: one pass, no intermediate buffer. A batch larger than one chunk
//! is cut into contiguous chunks of the output that the calling thread and
//! the executor's workers claim one at a time as they come free
//! ([`executor::for_each_chunk`]), so fan-out never makes a gather wait.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::codec::{self, Codec};
use crate::error::{Error, Result};
use crate::executor::{self, FanOut, Work};
use crate::io::Runs;
use crate::read::buffer::Buffer;
use crate::read::ragged::{self, RaggedBatch};
use crate::read::records::{dense_width, ReadCounters, Records, Stats, StoreAccess};
use crate::schema::Kind;
use crate::schema::Schema;

use super::{map_large_records, Store};

/// Output bytes per chunk of a raw gather: the unit that threads claim one
/// at a time (see [`executor::for_each_chunk`]). Large enough that claiming
/// costs nothing beside the copy, small enough that a 512 KiB batch still
/// spreads over eight threads.
const CHUNK_BYTES_RAW: usize = 64 << 10;
/// Output bytes per chunk of a decoding gather (decoding costs about ten
/// times a copy per byte, and small frames cost more per byte still).
const CHUNK_BYTES_CODED: usize = 16 << 10;

/// What one gather reads: the records' schema and count, where each
/// record lives, and the counters it adds to. A [`Store`] and a
/// [`crate::Concat`] each build one per call; `locate` is a
/// closure, so the per-record lookup is inlined (no dynamic call).
pub(crate) struct Source<'a, L> {
    /// The records' schema (every part shares it).
    pub schema: &'a Schema,
    /// Total number of records.
    pub len: u64,
    /// Whether any part decodes (not raw).
    pub coded: bool,
    /// What the error of a wrong-kind gather names.
    pub path: &'a Path,
    /// Whether any part is remote (its records are then fetched ahead).
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    pub remote: bool,
    pub counters: &'a Counters,
    /// The store holding record `i < len` and its index there.
    pub locate: L,
}

/// Records and logical bytes gathered through one reader.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    records: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    pub(crate) fn add(&self, records: usize, bytes: usize) {
        self.records.fetch_add(records as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> ReadCounters {
        ReadCounters {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// Fails with `IndexOutOfRange` on the first index outside `0..len`.
pub(crate) fn check_indices(idx: &[u64], len: u64) -> Result<()> {
    match idx.iter().find(|&&i| i >= len) {
        Some(&i) => Err(Error::IndexOutOfRange {
            index: i as i128,
            len,
        }),
        None => Ok(()),
    }
}

/// `idx` as one range when its indices run consecutively (none empty).
pub(crate) fn contiguous(idx: &[u64]) -> Option<std::ops::Range<u64>> {
    let first = *idx.first()?;
    let last = *idx.last()?;
    let span = last.checked_sub(first)?.checked_add(1)?;
    (span == idx.len() as u64 && idx.windows(2).all(|w| w[0].checked_add(1) == Some(w[1])))
        .then_some(first..last + 1)
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

fn work_of<L>(src: &Source<'_, L>) -> Work {
    work(src.coded)
}

fn work(coded: bool) -> Work {
    if coded {
        Work::Decode
    } else {
        Work::Copy
    }
}

/// Whether a gather of `idx` plans for decoding (smaller chunks, the
/// decode cost model): its source decodes, and its first record is not
/// stored as a frame of raw blocks (which reads as a copy). One record
/// decides: columns are raw-framed throughout or not at all, as a rule.
fn plans_decoding<'s, L>(src: &Source<'s, L>, idx: &[u64]) -> bool
where
    L: Fn(u64) -> (&'s Store, u64) + Sync,
{
    src.coded
        && idx.first().is_none_or(|&i| {
            let (s, k) = (src.locate)(i);
            let l = s.locs[k as usize];
            s.codec != Codec::Raw && !codec::has_raw_frame_size(l.phys_length, l.logic_length)
        })
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

/// Gathers dense records `idx` (any order, duplicates allowed) into `dst`,
/// which must hold exactly `idx.len()` records.
pub(crate) fn dense_into<'s, L>(src: &Source<'s, L>, idx: &[u64], dst: &mut [u8]) -> Result<()>
where
    L: Fn(u64) -> (&'s Store, u64) + Sync,
{
    let width = dense_width(src.path, src.schema)?;
    if dst.len() != idx.len() * width {
        return Err(Error::InvalidValue(format!(
            "destination of {} bytes does not hold {} records of {width} bytes",
            dst.len(),
            idx.len()
        )));
    }
    check_indices(idx, src.len)?;
    src.counters.add(idx.len(), dst.len());
    let map_large = map_large_records();
    let fetched = Fetched::for_gather(src, idx, |s, k| s.dense_loc(k, width))?;
    if fetched.is_live() {
        let outs = Slots::new(dst.chunks_exact_mut(width));
        let loc = |j: usize| {
            let (s, k) = (src.locate)(idx[j]);
            (s, k, s.dense_loc(k, width))
        };
        return fetched.as_they_land(
            idx.len(),
            |j| {
                let (s, _, l) = loc(j);
                fetched
                    .runs(s)?
                    .landing_id(l.offset, l.phys_length as usize)
            },
            |wave| {
                decode_wave(src, wave, wave.len() * width, |j| {
                    let (s, k, l) = loc(j);
                    s.read_loc(k, l, outs.take(j), map_large, fetched.runs(s))
                })
            },
        );
    }
    let fill = |ids: &[u64], out: &mut [u8]| -> Result<()> {
        for (j, (&i, rec)) in ids.iter().zip(out.chunks_exact_mut(width)).enumerate() {
            // The location table is far larger than the caches on big
            // stores: fetch a few entries ahead.
            if let Some(&ahead) = ids.get(j + 8) {
                let (s, k) = (src.locate)(ahead);
                s.prefetch_dense_loc(k);
            }
            let (s, k) = (src.locate)(i);
            s.read_loc(k, s.dense_loc(k, width), rec, map_large, fetched.runs(s))?;
        }
        Ok(())
    };
    let coded = plans_decoding(src, idx);
    let per = chunk_records(coded, idx.len(), dst.len());
    let plan = FanOut::plan(work(coded), dst.len(), idx.len().div_ceil(per));
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

/// Gathers ragged records `idx` into one buffer of 8-byte aligned records.
pub(crate) fn ragged<'s, L>(src: &Source<'s, L>, idx: &[u64]) -> Result<RaggedBatch>
where
    L: Fn(u64) -> (&'s Store, u64) + Sync,
{
    if src.schema.record_width().is_some() {
        return Err(Error::InvalidValue(format!(
            "{} is a dense store, not a ragged store",
            src.path.display()
        )));
    }
    check_indices(idx, src.len)?;
    let mut spans = Vec::with_capacity(idx.len());
    let mut total = 0usize;
    for (j, &i) in idx.iter().enumerate() {
        if let Some(&ahead) = idx.get(j + 8) {
            let (s, k) = (src.locate)(ahead);
            s.prefetch_loc(k);
        }
        let (s, k) = (src.locate)(i);
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
    src.counters.add(idx.len(), spans.iter().map(|s| s.1).sum());
    let itemsize = src.schema.dtype.itemsize();
    let map_large = map_large_records();
    let fetched = Fetched::for_gather(src, idx, |s, k| s.locs[k as usize])?;
    if fetched.is_live() {
        // Each record's own slice of the buffer.
        let mut outs = Vec::with_capacity(idx.len());
        let mut rest = buffer.as_mut_slice();
        let mut consumed = 0usize;
        for &(start, len) in &spans {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - consumed);
            let (rec, tail) = tail.split_at_mut(len);
            outs.push(rec);
            rest = tail;
            consumed = start + len;
        }
        let outs = Slots::new(outs);
        fetched.as_they_land(
            idx.len(),
            |j| {
                let (s, k) = (src.locate)(idx[j]);
                let l = s.locs[k as usize];
                fetched
                    .runs(s)?
                    .landing_id(l.offset, l.phys_length as usize)
            },
            |wave| {
                let bytes = wave.iter().map(|&j| spans[j].1).sum();
                decode_wave(src, wave, bytes, |j| {
                    let (s, k) = (src.locate)(idx[j]);
                    let rec = outs.take(j);
                    s.read_into(k, rec, map_large, fetched.runs(s))?;
                    ragged::parse(rec, itemsize)
                        .map_err(|e| Error::corrupted(s.data_path(), format!("record {k}: {e}")))?;
                    Ok(())
                })
            },
        )?;
        return Ok(RaggedBatch::new(buffer, spans, itemsize));
    }
    let fill = |ids: &[u64], sp: &[(usize, usize)], out: &mut [u8], base: usize| -> Result<()> {
        for (&i, &(start, len)) in ids.iter().zip(sp) {
            let rec = &mut out[start - base..start - base + len];
            let (s, k) = (src.locate)(i);
            s.read_into(k, rec, map_large, fetched.runs(s))?;
            ragged::parse(rec, itemsize)
                .map_err(|e| Error::corrupted(s.data_path(), format!("record {k}: {e}")))?;
        }
        Ok(())
    };
    let coded = plans_decoding(src, idx);
    let per = chunk_records(coded, idx.len(), total);
    let plan = FanOut::plan(work(coded), total, idx.len().div_ceil(per));
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

/// The bytes of one gather's records in its remote stores, fetched ahead
/// in one concurrent round of planned range requests (see
/// `crate::io::remote::fetch`). Empty, and free, when every store is local.
///
/// Without a block cache the fetch is live: [`Fetched::as_they_land`]
/// decodes the records of each merged range as soon as it lands, while
/// the requests for the others are still in flight, so decoding a
/// compressed batch overlaps fetching it.
pub(crate) struct Fetched<'s> {
    #[cfg(feature = "remote")]
    stores: Vec<(&'s Store, Runs)>,
    /// The remote stores in the order the fetch numbers them (what an
    /// error names).
    #[cfg(feature = "remote")]
    jobs: Vec<&'s Store>,
    #[cfg(feature = "remote")]
    arrivals: Option<crate::io::remote::Arrivals>,
    #[cfg(not(feature = "remote"))]
    stores: std::marker::PhantomData<&'s Store>,
}

impl<'s> Fetched<'s> {
    /// Fetches the stored bytes of records `idx` of `src` that live in
    /// remote stores (`loc` gives a record's location in its store).
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub(crate) fn for_gather<L>(
        src: &Source<'s, L>,
        idx: &[u64],
        loc: impl Fn(&Store, u64) -> crate::format::RecordLoc,
    ) -> Result<Fetched<'s>>
    where
        L: Fn(u64) -> (&'s Store, u64) + Sync,
    {
        #[cfg(feature = "remote")]
        {
            if !src.remote {
                return Ok(Fetched {
                    stores: Vec::new(),
                    jobs: Vec::new(),
                    arrivals: None,
                });
            }
            let mut order: Vec<(&'s Store, Vec<std::ops::Range<u64>>)> = Vec::new();
            let mut slot: std::collections::HashMap<*const Store, usize> = Default::default();
            for &i in idx {
                let (s, k) = (src.locate)(i);
                if s.remote_data().is_none() {
                    continue;
                }
                let at = *slot.entry(s as *const Store).or_insert_with(|| {
                    order.push((s, Vec::new()));
                    order.len() - 1
                });
                order[at].1.push(s.stored_range(loc(s, k)));
            }
            let jobs: Vec<_> = order
                .iter()
                .filter_map(|(s, r)| s.remote_data().map(|f| (f, r.as_slice())))
                .collect();
            let failed =
                |(j, e): (usize, std::io::Error)| crate::io::io_error(order[j].0.data_path(), e);
            let (runs, arrivals) = match crate::io::remote::fetch_live(&jobs).map_err(failed)? {
                Some((runs, arrivals)) => (runs, Some(arrivals)),
                None => (crate::io::remote::fetch_many(&jobs).map_err(failed)?, None),
            };
            drop(jobs);
            let jobs: Vec<&'s Store> = order.iter().map(|(s, _)| *s).collect();
            let mut stores: Vec<(&'s Store, Runs)> =
                order.into_iter().map(|(s, _)| s).zip(runs).collect();
            stores.sort_by_key(|(s, _)| *s as *const Store as usize);
            Ok(Fetched {
                stores,
                jobs,
                arrivals,
            })
        }
        #[cfg(not(feature = "remote"))]
        Ok(Fetched {
            stores: std::marker::PhantomData,
        })
    }

    /// Whether records' bytes are still arriving (decode them with
    /// [`Fetched::as_they_land`]).
    #[inline]
    pub(crate) fn is_live(&self) -> bool {
        #[cfg(feature = "remote")]
        return self.arrivals.as_ref().is_some_and(|a| a.ranges > 0);
        #[cfg(not(feature = "remote"))]
        false
    }

    /// Calls `decode` on the positions `0..n` of a gather's records, each
    /// position once, as soon as the record's bytes are here: first every
    /// record that waits for nothing, then, in waves, the records of the
    /// ranges that landed since the last wave. `landing(j)` is the id of the
    /// range record `j` waits for ([`Runs::landing_id`]). Fails with the
    /// first failed request or decode.
    #[cfg_attr(not(feature = "remote"), allow(unused_variables, unused_mut))]
    pub(crate) fn as_they_land(
        &self,
        n: usize,
        landing: impl Fn(usize) -> Option<usize>,
        mut decode: impl FnMut(&[usize]) -> Result<()>,
    ) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Some(arrivals) = &self.arrivals {
            let ranges = arrivals.ranges;
            // Positions grouped by the range they wait for (a counting
            // sort); those waiting for nothing come last, in group `ranges`.
            let waits: Vec<usize> = (0..n)
                .map(|j| landing(j).filter(|&g| g < ranges).unwrap_or(ranges))
                .collect();
            let mut start = vec![0usize; ranges + 2];
            for &g in &waits {
                start[g + 1] += 1;
            }
            for g in 0..=ranges {
                start[g + 1] += start[g];
            }
            let mut at = start.clone();
            let mut order = vec![0usize; n];
            for (j, &g) in waits.iter().enumerate() {
                order[at[g]] = j;
                at[g] += 1;
            }
            let now = &order[start[ranges]..start[ranges + 1]];
            if !now.is_empty() {
                decode(now)?;
            }
            let (mut landed, mut wave) = (Vec::new(), Vec::new());
            let mut seen = 0;
            while seen < ranges {
                landed.clear();
                arrivals
                    .next(&mut landed)
                    .map_err(|(j, e)| crate::io::io_error(self.jobs[j].data_path(), e))?;
                seen += landed.len();
                wave.clear();
                for &g in &landed {
                    wave.extend_from_slice(&order[start[g]..start[g + 1]]);
                }
                if !wave.is_empty() {
                    decode(&wave)?;
                }
            }
            return Ok(());
        }
        let all: Vec<usize> = (0..n).collect();
        decode(&all)
    }

    /// The fetched bytes of store `s`, if it is remote.
    #[inline]
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub(crate) fn runs(&self, s: &Store) -> Option<&Runs> {
        #[cfg(feature = "remote")]
        {
            match self.stores.as_slice() {
                [] => None,
                [(only, runs)] => std::ptr::eq(*only, s).then_some(runs),
                many => many
                    .binary_search_by_key(&(s as *const Store as usize), |(x, _)| {
                        *x as *const Store as usize
                    })
                    .ok()
                    .map(|at| &many[at].1),
            }
        }
        #[cfg(not(feature = "remote"))]
        None
    }
}

/// Decodes the records at positions `wave` of a live gather (see
/// [`Fetched::as_they_land`]) with `one(j)`, fanned out over the executor
/// in chunks like any gather of `bytes` bytes.
fn decode_wave<L>(
    src: &Source<'_, L>,
    wave: &[usize],
    bytes: usize,
    one: impl Fn(usize) -> Result<()> + Sync,
) -> Result<()> {
    let per = chunk_records(src.coded, wave.len(), bytes);
    let plan = FanOut::plan(work_of(src), bytes, wave.len().div_ceil(per));
    executor::for_each_chunk(plan, |c| {
        let end = wave.len().min((c + 1) * per);
        wave[c * per..end].iter().try_for_each(|&j| one(j))
    })
}

impl Store {
    fn source<'a>(&'a self) -> Source<'a, impl Fn(u64) -> (&'a Store, u64) + Sync + 'a> {
        Source {
            schema: &self.schema,
            len: self.len(),
            coded: self.codec != Codec::Raw,
            path: &self.dir,
            remote: self.is_remote(),
            counters: &self.counters,
            locate: move |i| (self, i),
        }
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
            raw_records: self.raw_records(),
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
        self.frames_have_checksum()
    }

    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        dense_into(&self.source(), idx, dst)
    }

    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        ragged(&self.source(), idx)
    }

    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        check_indices(&[i], self.len())?;
        let len = self.locs[i as usize].logic_length as usize;
        let mut out = Vec::new();
        out.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
            bytes: len as u64,
            what: format!("record {i}"),
        })?;
        out.resize(len, 0);
        self.read_into(i, &mut out, map_large_records(), None)?;
        if self.kind() == Kind::Ragged {
            ragged::parse(&out, self.schema.dtype.itemsize())
                .map_err(|e| Error::corrupted(&self.data_path, format!("record {i}: {e}")))?;
        }
        Ok(out)
    }
}

impl StoreAccess for &Store {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(*self)
    }
}
