//! The request planner: a gather's byte ranges become few, large, concurrent
//! range requests, and the bytes come back as [`Runs`] that records decode
//! from exactly as they decode from a mapping.
//!
//! [`plan`] sorts the ranges, merges those closer than [`GAP`] (fetching a
//! small gap costs less than a request) and cuts what grows past the split
//! size into parts fetched side by side. The split size ([`split_for`])
//! spreads a batch over the requests the process may keep in flight: one
//! connection moves a few tens of MB/s from S3, so a 37 MiB batch fetched
//! as five 8 MiB requests would use five connections where sixty-four are
//! allowed. Every request holds a permit of the process-wide semaphore
//! while in flight (`runtime::Io::limited`).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

/// Ranges closer than this are fetched as one request.
pub(crate) const GAP: u64 = 256 << 10;
/// The most bytes one request fetches; a longer range is fetched as parts,
/// concurrently.
pub(crate) const SPLIT: u64 = 8 << 20;
/// The least bytes a split part has (smaller parts cost more in requests
/// than they gain in concurrency).
pub(crate) const MIN_SPLIT: u64 = 256 << 10;

/// The split size for fetching `ranges` with `inflight` requests allowed:
/// their bytes spread over that many requests, within
/// [`MIN_SPLIT`]..=[`SPLIT`].
pub(crate) fn split_for(ranges: &[Range<u64>], inflight: usize) -> u64 {
    let total: u64 = ranges.iter().map(|r| r.end.saturating_sub(r.start)).sum();
    (total / inflight.max(1) as u64).clamp(MIN_SPLIT, SPLIT)
}

/// One request of a plan: the bytes `range` of the object, and which of
/// the requests of the same merged range it is (a record longer than
/// [`SPLIT`] arrives in parts that are joined again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub range: Range<u64>,
    /// Index of the merged range this request belongs to.
    pub group: usize,
}

/// Plans the requests for `ranges` (any order, overlaps and duplicates
/// allowed, empty ones ignored): the merged ranges in offset order, and the
/// requests that fetch them.
pub(crate) fn plan(ranges: &[Range<u64>], gap: u64, split: u64) -> (Vec<Range<u64>>, Vec<Request>) {
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| r.end > r.start).cloned().collect();
    sorted.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::new();
    for r in sorted {
        match merged.last_mut() {
            // Merge while the gap is small and the request stays within the
            // split size (a range inside the last one always merges).
            Some(last)
                if r.start <= last.end.saturating_add(gap)
                    && (r.end <= last.end || r.end - last.start <= split) =>
            {
                last.end = last.end.max(r.end);
            }
            _ => merged.push(r),
        }
    }
    let mut requests = Vec::with_capacity(merged.len());
    for (group, m) in merged.iter().enumerate() {
        let mut at = m.start;
        while at < m.end {
            let end = m.end.min(at.saturating_add(split.max(1)));
            requests.push(Request {
                range: at..end,
                group,
            });
            at = end;
        }
    }
    (merged, requests)
}

/// Fetched bytes of one object: contiguous runs sorted by offset. A run
/// may overlap the next (a record that crosses two cached blocks gets a run
/// of its own). The runs of a gather's live fetch ([`Landing`]) are still
/// arriving: each serves its bytes once it has landed.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    runs: Vec<(u64, Bytes)>,
    live: Option<Arc<Landing>>,
}

/// The merged ranges of one object in a live fetch (see
/// `object::fetch_live`): each range's bytes land in its slot once every
/// request of the range is done, while the gather decodes the records of
/// the ranges already here.
#[derive(Debug)]
pub(crate) struct Landing {
    /// Sorted, disjoint.
    ranges: Vec<Range<u64>>,
    slots: Vec<OnceLock<Bytes>>,
    /// The id of the first range, among the ranges of every object of the
    /// gather (ids count from 0 across objects, in job order).
    base: usize,
}

impl Landing {
    pub(crate) fn new(ranges: Vec<Range<u64>>, base: usize) -> Landing {
        let slots = ranges.iter().map(|_| OnceLock::new()).collect();
        Landing {
            ranges,
            slots,
            base,
        }
    }

    /// Stores the bytes of range `at` (ids relative to this object).
    pub(crate) fn land(&self, at: usize, bytes: Bytes) {
        // Each range lands once; a second landing would be a planner bug,
        // and the first bytes stay.
        let _ = self.slots[at].set(bytes);
    }

    /// The range holding `offset..end`, if one does.
    #[inline]
    fn find(&self, offset: u64, end: u64) -> Option<usize> {
        let at = self
            .ranges
            .partition_point(|r| r.start <= offset)
            .checked_sub(1)?;
        (end <= self.ranges[at].end).then_some(at)
    }
}

impl Runs {
    pub(crate) fn new(mut runs: Vec<(u64, Bytes)>) -> Runs {
        runs.sort_by_key(|(start, _)| *start);
        Runs { runs, live: None }
    }

    /// Runs that are still arriving.
    pub(crate) fn landing(landing: Arc<Landing>) -> Runs {
        Runs {
            runs: Vec::new(),
            live: Some(landing),
        }
    }

    /// The id (see [`Landing`]) of the live range that will hold the bytes
    /// `offset..offset + len`, if these runs are live and one does.
    #[inline]
    pub(crate) fn landing_id(&self, offset: u64, len: usize) -> Option<usize> {
        let live = self.live.as_ref()?;
        let end = offset.checked_add(len as u64)?;
        live.find(offset, end).map(|at| live.base + at)
    }

    /// The bytes `offset..offset + len`, if one run holds all of them (and,
    /// in a live fetch, has landed).
    #[inline]
    pub(crate) fn slice(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len as u64)?;
        if let Some(live) = &self.live {
            let at = live.find(offset, end)?;
            let bytes = live.slots[at].get()?;
            let from = (offset - live.ranges[at].start) as usize;
            return bytes.get(from..from + len);
        }
        // The last run starting at or before `offset`, then a few before it
        // (overlapping runs are rare and short).
        let after = self.runs.partition_point(|(s, _)| *s <= offset);
        for (start, bytes) in self.runs[..after].iter().rev().take(3) {
            if end <= start + bytes.len() as u64 {
                let from = (offset - start) as usize;
                return Some(&bytes[from..from + len]);
            }
        }
        None
    }
}

/// Joins the parts of one merged range (in request order) into its bytes:
/// a single part is passed on as it is, several are copied together.
pub(crate) fn join(parts: Vec<Bytes>) -> Bytes {
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in parts {
        out.extend_from_slice(&p);
    }
    Bytes::from(out)
}

/// Counts of what remote reads cost a process (for tests and benches:
/// requests per batch, bytes fetched per byte returned, cache hits).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub requests: std::sync::atomic::AtomicU64,
    pub hedges: std::sync::atomic::AtomicU64,
    pub bytes: std::sync::atomic::AtomicU64,
    pub cache_hits: std::sync::atomic::AtomicU64,
    pub cache_misses: std::sync::atomic::AtomicU64,
    pub retries: std::sync::atomic::AtomicU64,
}

/// The process's counters.
pub(crate) fn stats() -> &'static Arc<Stats> {
    static STATS: std::sync::OnceLock<Arc<Stats>> = std::sync::OnceLock::new();
    STATS.get_or_init(Default::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_near_ranges_and_splits_long_ones() {
        let (merged, reqs) = plan(&[10..20, 0..5, 30..40, 1000..1010, 15..18, 7..7], 10, 100);
        assert_eq!(merged, vec![0..40, 1000..1010]);
        assert_eq!(reqs.len(), 2);
        // A long range is cut into parts of the split size.
        let (merged, reqs) = plan(std::slice::from_ref(&(0..250)), 10, 100);
        assert_eq!(merged, vec![0..250]);
        let parts: Vec<_> = reqs.iter().map(|r| r.range.clone()).collect();
        assert_eq!(parts, vec![0..100, 100..200, 200..250]);
        assert!(reqs.iter().all(|r| r.group == 0));
        // Merging stops at the split size.
        let (merged, _) = plan(&[0..60, 61..120], 10, 100);
        assert_eq!(merged, vec![0..60, 61..120]);
    }

    #[test]
    fn every_range_lies_in_one_merged_range() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for _ in 0..200 {
            // Record-like ranges: within disjoint slots of 300 bytes, any
            // order, duplicates allowed.
            let ranges: Vec<Range<u64>> = (0..50)
                .map(|_| {
                    let k = next() % 40;
                    let s = k * 300 + (k * 37) % 100;
                    s..s + (k * 53) % 200
                })
                .collect();
            let (merged, reqs) = plan(&ranges, 64, 512);
            for r in ranges.iter().filter(|r| r.end > r.start) {
                assert!(
                    merged.iter().any(|m| m.start <= r.start && r.end <= m.end),
                    "{r:?}"
                );
            }
            for w in merged.windows(2) {
                assert!(w[0].end < w[1].start);
            }
            let covered: u64 = reqs.iter().map(|r| r.range.end - r.range.start).sum();
            assert_eq!(covered, merged.iter().map(|m| m.end - m.start).sum::<u64>());
        }
    }

    #[test]
    fn runs_serve_slices_inside_one_run() {
        let runs = Runs::new(vec![
            (100, Bytes::from(vec![1u8; 50])),
            (0, Bytes::from((0..50u8).collect::<Vec<_>>())),
            (140, Bytes::from(vec![2u8; 20])),
        ]);
        assert_eq!(runs.slice(10, 5).unwrap(), &[10, 11, 12, 13, 14]);
        assert_eq!(runs.slice(145, 10).unwrap(), &[2u8; 10][..]);
        assert_eq!(runs.slice(100, 50).unwrap(), &[1u8; 50][..]);
        assert!(runs.slice(45, 10).is_none());
        assert!(runs.slice(155, 10).is_none());
    }

    #[test]
    fn live_runs_serve_a_range_only_once_it_has_landed() {
        let landing = Arc::new(Landing::new(vec![0..10, 100..150], 7));
        let runs = Runs::landing(landing.clone());
        assert_eq!(runs.landing_id(2, 5), Some(7));
        assert_eq!(runs.landing_id(120, 30), Some(8));
        // Not inside one range: no id, and never served.
        assert_eq!(runs.landing_id(8, 5), None);
        assert_eq!(runs.landing_id(50, 1), None);
        assert!(runs.slice(120, 30).is_none());
        landing.land(1, Bytes::from((0..50u8).collect::<Vec<_>>()));
        assert_eq!(runs.slice(120, 3).unwrap(), &[20, 21, 22]);
        assert!(runs.slice(2, 5).is_none());
        assert!(runs.slice(140, 20).is_none());
        // A short landing (never planned) serves nothing past its end.
        landing.land(0, Bytes::from(vec![9u8; 4]));
        assert_eq!(runs.slice(0, 4).unwrap(), &[9u8; 4][..]);
        assert!(runs.slice(2, 5).is_none());
    }

    #[test]
    fn the_split_spreads_a_batch_over_the_requests_in_flight() {
        let batch: Vec<Range<u64>> = (0..256)
            .map(|i| i * 150_000..i * 150_000 + 150_000)
            .collect();
        let split = split_for(&batch, 64);
        assert_eq!(split, 256 * 150_000 / 64);
        let (_, reqs) = plan(&batch, GAP, split);
        assert!((60..=70).contains(&reqs.len()), "{}", reqs.len());
        assert_eq!(split_for(&batch[..2], 64), MIN_SPLIT);
        let huge: Range<u64> = 0..(1u64 << 34);
        assert_eq!(split_for(std::slice::from_ref(&huge), 64), SPLIT);
    }
}
