//! An edited record stream: a [`Sampler`]'s stream with records excluded
//! from given positions on.
//!
//! A run's plan can be edited while it trains: from some step on, some
//! records must never be drawn again (they caused a loss spike, or turned
//! out to be bad). [`Edited`] keeps the sampler's stream (positions
//! `0, 1, 2, ...`, batch `k` being positions `k * B .. (k + 1) * B`) and a
//! list of *exclusions*, each from a stream position on, and stays a pure
//! function of the position: the same exclusions at the same positions
//! give the same records, on every run, resume and rank.
//!
//! Before the first exclusion the stream is the sampler's, exactly. After
//! one (each exclusion adds records to the set excluded so far):
//!
//! * **cyclic, blocked**: the cycle under way goes on from where it was,
//!   in the same order, skipping the excluded records: every record not
//!   excluded that the cycle has not drawn yet is drawn once before it
//!   ends. A cycle ends when fewer than `B` of its records are left
//!   (those are dropped, as the sampler drops `n mod B`). Later cycles are
//!   the sampler's cycles (the same keyed permutation of cycle `c`) with
//!   the excluded records' positions skipped, `(n - e) / B` batches each
//!   (`e` records excluded). The excluded records' positions in a cycle
//!   are found by inverting the permutation (`e` inversions per cycle), so
//!   no table proportional to `n` is built.
//! * **sequential**: the sweep goes on from the next record in order,
//!   skipping the excluded ones.
//! * **iid, weighted**: a draw that picks an excluded record is drawn
//!   again with the next counter value (rejection), so the records left
//!   are drawn uniformly, or in proportion to their weights, exactly as if
//!   the excluded records' weights were zero. A draw costs `1 / (1 - f)`
//!   attempts on average, `f` the excluded share of the weight.

use std::fmt;
use std::sync::{Arc, Mutex};

use super::blocked;
use super::{cycle_keys, Mode, Sampler, LANES};

/// An exclusion the stream cannot take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditError {
    /// A record outside `0..n`.
    Record { record: u64, n: u64 },
    /// An exclusion before one already made.
    Order { at: u64, last: u64 },
    /// Every record would be excluded (for weighted: every record of
    /// positive weight).
    Everything { n: u64 },
    /// Cyclic or blocked: fewer records left than a batch.
    FewerThanBatch { left: u64, batch: usize },
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditError::Record { record, n } => write!(
                f,
                "record id {record} is out of range: the records are 0..{n}"
            ),
            EditError::Order { at, last } => write!(
                f,
                "exclusions come in stream order: position {at} is before {last}"
            ),
            EditError::Everything { n } => {
                write!(
                    f,
                    "excluding these records leaves none of the {n} to draw (in mode \
                     'weighted', none of positive weight)"
                )
            }
            EditError::FewerThanBatch { left, batch } => write!(
                f,
                "excluding these records leaves {left}, fewer than a global batch of {batch}: \
                 cyclic and blocked sampling draw without replacement"
            ),
        }
    }
}

impl std::error::Error for EditError {}

/// The stream from one exclusion (or the start) to the next.
#[derive(Debug)]
struct Phase {
    /// The first stream position of the phase.
    start: u64,
    /// Records excluded, sorted and distinct.
    excluded: Arc<Vec<u64>>,
    /// Cycles: the cycle under way at `start`.
    cycle: u64,
    /// Cycles: the live index (among the cycle's positions not excluded)
    /// of the phase's first record. Sequential: the index among the
    /// records not excluded of the record the sweep resumes at.
    live: u64,
    /// Cycles: the stream positions the cycle under way still gives.
    first_len: u64,
}

/// A sampler's record stream with exclusions (see the module documentation).
pub struct Edited {
    base: Sampler,
    phases: Vec<Phase>,
    /// The excluded records' positions in a cycle: `(phase, cycle)` ->
    /// sorted positions, the last few used.
    positions: Mutex<Vec<CachedCycle>>,
}

impl fmt::Debug for Edited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Edited")
            .field("base", &self.base)
            .field("exclusions", &(self.phases.len() - 1))
            .finish()
    }
}

/// A cycle's excluded positions: `((phase, cycle), positions)`.
type CachedCycle = ((usize, u64), Arc<Vec<u64>>);

/// Cached cycles' positions (producers work on neighbouring steps).
const CACHED_CYCLES: usize = 8;

/// The number of `sorted` values below `x`.
fn below(sorted: &[u64], x: u64) -> usize {
    sorted.partition_point(|&v| v < x)
}

/// The `t`-th value (from 0) of `0..` that `sorted` (distinct, ascending)
/// does not hold, and how many of `sorted` lie below it.
fn select(sorted: &[u64], t: u64) -> (u64, usize) {
    // The values below sorted[i] that are not excluded: sorted[i] - i,
    // nondecreasing in i.
    let (mut lo, mut hi) = (0usize, sorted.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if sorted[mid] - mid as u64 <= t {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    (t + lo as u64, lo)
}

/// Fills `out` with the values of `0..` not in `sorted` from the `t`-th
/// on (the caller keeps within range).
fn fill_live(sorted: &[u64], t: u64, out: &mut [u64]) {
    // `v` is live and `sorted[k]` the first excluded value above it: write
    // the run of live values up to it, then step over the excluded ones.
    let (mut v, mut k) = select(sorted, t);
    let mut i = 0;
    while i < out.len() {
        let stop = sorted.get(k).copied().unwrap_or(u64::MAX);
        let run = (stop - v).min((out.len() - i) as u64) as usize;
        for (slot, x) in out[i..i + run].iter_mut().zip(v..) {
            *slot = x;
        }
        i += run;
        v += run as u64;
        while k < sorted.len() && sorted[k] == v {
            v += 1;
            k += 1;
        }
    }
}

/// Sorts distinct positions `< n`: through a bitmap of `n` bits when they
/// are dense enough for it to be cheaper than a comparison sort.
fn sort_positions(v: &mut [u64], n: u64) {
    if (v.len() as u64) < 64 || n / 64 > 16 * v.len() as u64 {
        v.sort_unstable();
        return;
    }
    let mut bits = vec![0u64; n.div_ceil(64) as usize];
    for &p in v.iter() {
        bits[(p / 64) as usize] |= 1 << (p % 64);
    }
    let mut at = 0;
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            v[at] = w as u64 * 64 + u64::from(word.trailing_zeros());
            at += 1;
            word &= word - 1;
        }
    }
}

impl Edited {
    /// The sampler's stream, with no exclusion yet.
    pub fn new(base: Sampler) -> Edited {
        let per = base.batches_per_cycle.max(1) * base.batch_size as u64;
        Edited {
            phases: vec![Phase {
                start: 0,
                excluded: Arc::new(Vec::new()),
                cycle: 0,
                live: 0,
                first_len: if base.mode.cycles() { per } else { 0 },
            }],
            base,
            positions: Mutex::new(Vec::new()),
        }
    }

    /// The sampler this stream edits.
    pub fn base(&self) -> &Sampler {
        &self.base
    }

    /// Whether any record is excluded.
    pub fn is_edited(&self) -> bool {
        self.phases.len() > 1
    }

    /// The records excluded from the last exclusion on (sorted, distinct).
    pub fn excluded(&self) -> &[u64] {
        &self.phases.last().expect("a phase").excluded
    }

    /// Checks that `records` (any order, repeats allowed) can be excluded
    /// on top of what is excluded so far, and returns the new excluded
    /// set.
    pub fn check(&self, records: &[u64]) -> Result<Vec<u64>, EditError> {
        let n = self.base.n;
        if let Some(&record) = records.iter().find(|&&r| r >= n) {
            return Err(EditError::Record { record, n });
        }
        let mut set: Vec<u64> = self.excluded().to_vec();
        set.extend_from_slice(records);
        set.sort_unstable();
        set.dedup();
        let left = n - set.len() as u64;
        if left == 0 {
            return Err(EditError::Everything { n });
        }
        if self.base.mode.cycles() && left < self.base.batch_size as u64 {
            return Err(EditError::FewerThanBatch {
                left,
                batch: self.base.batch_size,
            });
        }
        if let Some(table) = &self.base.weights {
            let drawable = table.drawable();
            let any = (0..n).any(|r| drawable[r as usize] && set.binary_search(&r).is_err());
            if !any {
                return Err(EditError::Everything { n });
            }
        }
        Ok(set)
    }

    /// Excludes `records` from stream position `at` on (`at` must not be
    /// before an earlier exclusion's, and, for batches to stay whole, a
    /// multiple of the batch size).
    pub fn exclude(&mut self, at: u64, records: &[u64]) -> Result<(), EditError> {
        let last = self.phases.last().expect("a phase").start;
        if at < last {
            return Err(EditError::Order { at, last });
        }
        let excluded = Arc::new(self.check(records)?);
        let phase = match self.base.mode {
            Mode::Cyclic | Mode::Blocked => {
                let j = self.phases.len() - 1;
                let (cycle, t) = self.cycle_at(j, at);
                // Where the cycle under way resumes: its next live position
                // under the old exclusions.
                let old = self.cycle_positions(j, cycle);
                let (raw, _) = select(&old, t);
                let new = self.positions_of(&excluded, cycle);
                let live = raw - below(&new, raw) as u64;
                let n = self.base.n;
                let left = n - new.len() as u64 - live;
                let b = self.base.batch_size as u64;
                Phase {
                    start: at,
                    excluded,
                    cycle,
                    live,
                    first_len: left / b * b,
                }
            }
            Mode::Sequential => {
                let mut next = [0u64];
                self.fill_stream(at, &mut next);
                let live = next[0] - below(&excluded, next[0]) as u64;
                Phase {
                    start: at,
                    excluded,
                    cycle: 0,
                    live,
                    first_len: 0,
                }
            }
            Mode::Iid | Mode::Weighted => Phase {
                start: at,
                excluded,
                cycle: 0,
                live: 0,
                first_len: 0,
            },
        };
        self.phases.push(phase);
        Ok(())
    }

    /// Batch `step` (positions `step * B ..`) into `out` (`B` records).
    pub fn fill_at(&self, step: u64, out: &mut [u64]) {
        if !self.is_edited() {
            return self.base.fill_at(step, out);
        }
        assert_eq!(out.len(), self.base.batch_size, "one batch");
        self.fill_stream(step.wrapping_mul(self.base.batch_size as u64), out);
    }

    /// Positions `start..start + out.len()` of the edited stream.
    pub fn fill_stream(&self, start: u64, out: &mut [u64]) {
        if !self.is_edited() {
            return self.base.fill_stream(start, out);
        }
        let mut pos = start;
        let mut rest = out;
        while !rest.is_empty() {
            let j = self.phases.partition_point(|p| p.start <= pos) - 1;
            let take = match self.phases.get(j + 1) {
                Some(next) => ((next.start - pos) as usize).min(rest.len()),
                None => rest.len(),
            };
            let (chunk, tail) = rest.split_at_mut(take);
            self.fill_phase(j, pos, chunk);
            pos += take as u64;
            rest = tail;
        }
    }

    fn fill_phase(&self, j: usize, pos: u64, out: &mut [u64]) {
        let phase = &self.phases[j];
        if j == 0 {
            return self.base.fill_stream(pos, out);
        }
        let n = self.base.n;
        match self.base.mode {
            Mode::Cyclic | Mode::Blocked => {
                let mut pos = pos;
                let mut rest = out;
                while !rest.is_empty() {
                    let (cycle, t) = self.cycle_at(j, pos);
                    let q = pos - phase.start;
                    let end_of_cycle = if cycle == phase.cycle {
                        phase.first_len - q
                    } else {
                        let per = self.per_cycle(j);
                        per - (q - phase.first_len) % per
                    };
                    let take = (end_of_cycle as usize).min(rest.len());
                    let (chunk, tail) = rest.split_at_mut(take);
                    let positions = self.cycle_positions(j, cycle);
                    fill_live(&positions, t, chunk);
                    self.map_cycle(cycle, chunk);
                    pos += take as u64;
                    rest = tail;
                }
            }
            Mode::Sequential => {
                let live = n - phase.excluded.len() as u64;
                let t = ((u128::from(phase.live) + u128::from(pos - phase.start))
                    % u128::from(live)) as u64;
                let (mut v, mut k) = select(&phase.excluded, t);
                for slot in out.iter_mut() {
                    loop {
                        if v == n {
                            v = 0;
                            k = 0;
                        }
                        if k < phase.excluded.len() && phase.excluded[k] == v {
                            v += 1;
                            k += 1;
                        } else {
                            break;
                        }
                    }
                    *slot = v;
                    v += 1;
                }
            }
            Mode::Iid | Mode::Weighted => {
                let excluded = |r: u64| phase.excluded.binary_search(&r).is_ok();
                super::by_batches(self.base.batch_size, pos, out, |step, batch| {
                    self.fill_without(step, batch, &excluded)
                });
            }
        }
    }

    /// An IID or weighted batch with the excluded records drawn again.
    fn fill_without(&self, step: u64, out: &mut [u64], excluded: &impl Fn(u64) -> bool) {
        let base = &self.base;
        match &base.weights {
            Some(table) => table.fill_without(base.seed, step, out, excluded),
            None => base.draw_iid(step, out, |r| !excluded(r)),
        }
    }

    /// Stream positions per whole cycle in phase `j`.
    fn per_cycle(&self, j: usize) -> u64 {
        let b = self.base.batch_size as u64;
        (self.base.n - self.phases[j].excluded.len() as u64) / b * b
    }

    /// The cycle of stream position `pos` (in phase `j`) and its live
    /// index within the cycle.
    fn cycle_at(&self, j: usize, pos: u64) -> (u64, u64) {
        let phase = &self.phases[j];
        let q = pos - phase.start;
        if q < phase.first_len {
            return (phase.cycle, phase.live + q);
        }
        let per = self.per_cycle(j);
        let q = q - phase.first_len;
        (phase.cycle + 1 + q / per, q % per)
    }

    /// The sorted positions of phase `j`'s excluded records in `cycle`.
    fn cycle_positions(&self, j: usize, cycle: u64) -> Arc<Vec<u64>> {
        let key = (j, cycle);
        // Computed under the lock: producers reaching a new cycle together
        // wait for one computation instead of each making its own.
        let mut cache = self.positions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = cache.iter().find(|(k, _)| *k == key) {
            return Arc::clone(p);
        }
        let positions = Arc::new(self.positions_of(&self.phases[j].excluded, cycle));
        if cache.len() == CACHED_CYCLES {
            cache.remove(0);
        }
        cache.push((key, Arc::clone(&positions)));
        positions
    }

    /// Where `records` sit in `cycle`, sorted.
    fn positions_of(&self, records: &[u64], cycle: u64) -> Vec<u64> {
        let base = &self.base;
        let mut out: Vec<u64> = if base.mode == Mode::Blocked {
            let c = self.blocked_cycle(cycle);
            records.iter().map(|&r| c.position_of(r)).collect()
        } else if base.feistel.rounds == 8 {
            self.invert::<8>(cycle, records)
        } else {
            self.invert::<24>(cycle, records)
        };
        sort_positions(&mut out, base.n);
        out
    }

    fn invert<const R: usize>(&self, cycle: u64, records: &[u64]) -> Vec<u64> {
        let keys = cycle_keys::<R>(self.base.seed, cycle);
        let f = self.base.feistel;
        let n = self.base.n;
        let mut out = records.to_vec();
        // One decryption per record, LANES at a time; then the few that
        // fell outside 0..n walk on.
        let mut chunks = out.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            let lanes: &mut [u64; LANES] = chunk.try_into().expect("chunk of LANES");
            f.decrypt_lanes(&keys, lanes);
        }
        for x in chunks.into_remainder() {
            *x = f.decrypt(&keys, *x);
        }
        for x in out.iter_mut() {
            while *x >= n {
                *x = f.decrypt(&keys, *x);
            }
        }
        out
    }

    fn blocked_cycle(&self, cycle: u64) -> blocked::Cycle {
        let base = &self.base;
        let block = base.block_size.expect("checked at construction");
        blocked::Cycle::new(base.n, base.batch_size as u64, block, base.seed, cycle)
    }

    /// Replaces cycle positions in `out` by their records.
    fn map_cycle(&self, cycle: u64, out: &mut [u64]) {
        if self.base.mode == Mode::Blocked {
            self.blocked_cycle(cycle).map_positions(out);
        } else if self.base.feistel.rounds == 8 {
            self.base.permute_positions::<8>(cycle, out);
        } else {
            self.base.permute_positions::<24>(cycle, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn sampler(n: u64, b: usize, mode: Mode, seed: u64) -> Sampler {
        let block = (mode == Mode::Blocked).then_some(7);
        let weights = (mode == Mode::Weighted).then(|| {
            let w: Vec<f64> = (0..n).map(|i| (i % 5) as f64).collect();
            Arc::new(super::super::weighted::AliasTable::new(&w).unwrap())
        });
        Sampler::with_options(n, b, mode, seed, block, weights).unwrap()
    }

    const MODES: [Mode; 5] = [
        Mode::Sequential,
        Mode::Iid,
        Mode::Cyclic,
        Mode::Blocked,
        Mode::Weighted,
    ];

    #[test]
    fn without_exclusions_the_stream_is_the_samplers() {
        for mode in MODES {
            let s = sampler(103, 8, mode, 5);
            let e = Edited::new(s.clone());
            for step in [0, 1, 11, 12, 13, 400] {
                let mut a = vec![0; 8];
                e.fill_at(step, &mut a);
                assert_eq!(a, s.at(step), "{mode:?} step {step}");
            }
        }
    }

    #[test]
    fn inverse_positions_match_the_permutation() {
        for mode in [Mode::Cyclic, Mode::Blocked] {
            for n in [1u64, 2, 5, 17, 100, 103, 1000] {
                let s = sampler(n, 1, mode, 9);
                let e = Edited::new(s.clone());
                for cycle in [0u64, 3] {
                    let mut recs: Vec<u64> = (0..n).collect();
                    e.map_cycle(cycle, &mut recs);
                    for (p, &r) in recs.iter().enumerate() {
                        assert_eq!(
                            e.positions_of(&[r], cycle),
                            vec![p as u64],
                            "{mode:?} n={n}"
                        );
                    }
                    // Many at once (the lanes and the bitmap sort).
                    let some: Vec<u64> = (0..n).filter(|r| r % 3 != 1).collect();
                    let mut want: Vec<u64> =
                        (0..n).filter(|&p| recs[p as usize] % 3 != 1).collect();
                    want.sort_unstable();
                    assert_eq!(e.positions_of(&some, cycle), want, "{mode:?} n={n}");
                }
            }
        }
    }

    #[test]
    fn before_an_exclusion_nothing_changes_and_after_it_no_excluded_record_is_drawn() {
        for mode in MODES {
            let (n, b) = (103u64, 8usize);
            let s = sampler(n, b, mode, 3);
            let mut e = Edited::new(s.clone());
            let banned: Vec<u64> = vec![0, 4, 5, 17, 50, 99, 102];
            e.exclude(20 * b as u64, &banned).unwrap();
            for step in 0..20 {
                let mut a = vec![0; b];
                e.fill_at(step, &mut a);
                assert_eq!(a, s.at(step), "{mode:?} step {step}");
            }
            for step in 20..200 {
                let mut a = vec![0; b];
                e.fill_at(step, &mut a);
                assert!(
                    a.iter().all(|r| !banned.contains(r) && *r < n),
                    "{mode:?} step {step}: {a:?}"
                );
            }
        }
    }

    #[test]
    fn cycles_cover_every_live_record_once() {
        for mode in [Mode::Cyclic, Mode::Blocked] {
            let (n, b) = (100u64, 6usize);
            let s = sampler(n, b, mode, 1);
            let per = s.batches_per_cycle().unwrap();
            let mut e = Edited::new(s.clone());
            let at_step = per + 5; // in cycle 1, after 5 batches
            let banned: Vec<u64> = (0..n).filter(|r| r % 9 == 0).collect();
            e.exclude(at_step * b as u64, &banned).unwrap();
            // Cycle 1: batches before the exclusion, then the rest of it.
            let mut seen = HashSet::new();
            let mut step = per;
            let live = n - banned.len() as u64;
            let mut cycle_records = Vec::new();
            loop {
                let mut a = vec![0; b];
                e.fill_at(step, &mut a);
                if step >= at_step && a.iter().any(|r| seen.contains(r)) {
                    break; // the next cycle began
                }
                for &r in &a {
                    assert!(seen.insert(r), "{mode:?}: {r} twice in a cycle");
                }
                cycle_records.extend(a);
                step += 1;
            }
            let unseen = (0..n)
                .filter(|r| !banned.contains(r) && !seen.contains(r))
                .count();
            assert!(
                unseen < b,
                "{mode:?}: {unseen} live records left out of cycle 1"
            );
            // Later cycles: (n - e) / B batches, each live record once.
            let per_live = live / b as u64;
            let mut later = HashSet::new();
            for k in 0..per_live {
                let mut a = vec![0; b];
                e.fill_at(step + k, &mut a);
                for r in a {
                    assert!(!banned.contains(&r));
                    assert!(later.insert(r), "{mode:?}: {r} twice in a later cycle");
                }
            }
            assert_eq!(later.len() as u64, per_live * b as u64);
        }
    }

    #[test]
    fn the_stream_is_pure_in_the_position() {
        for mode in MODES {
            let (n, b) = (64u64, 4usize);
            let mut e = Edited::new(sampler(n, b, mode, 11));
            e.exclude(12, &[1, 2, 3]).unwrap();
            e.exclude(40, &[10, 2, 63]).unwrap();
            e.exclude(40, &[20]).unwrap();
            e.exclude(400, &[30, 31]).unwrap();
            let mut whole = vec![0; 800];
            e.fill_stream(0, &mut whole);
            for start in [0u64, 3, 12, 39, 40, 41, 399, 401] {
                let mut part = vec![0; 100];
                e.fill_stream(start, &mut part);
                assert_eq!(
                    &part[..],
                    &whole[start as usize..start as usize + 100],
                    "{mode:?}"
                );
            }
            for (p, r) in whole.iter().enumerate() {
                if p >= 400 {
                    assert!(![1, 2, 3, 10, 20, 30, 31, 63].contains(r), "{mode:?}");
                }
            }
        }
    }

    /// The definition, the slow way: each cycle's whole permutation is laid
    /// out, and the stream walks it from where it is, skipping the records
    /// excluded so far; a cycle ends when fewer than `B` records it has
    /// not drawn are left. Sequential walks the records in order.
    fn model(s: &Sampler, events: &[(u64, Vec<u64>)], batches: u64) -> Vec<u64> {
        let (n, b) = (s.n(), s.batch_size() as u64);
        let mut excluded: std::collections::BTreeSet<u64> = Default::default();
        let mut out = Vec::new();
        let (mut cycle, mut raw) = (0u64, 0u64);
        let perm = |c: u64| -> Vec<u64> {
            // The base sampler's cycle c: positions 0..n, B = 1 so that
            // every position (the remainder too) is laid out.
            let one = Sampler::with_block_size(n, 1, s.mode(), s.seed(), s.block_size());
            let one = one.unwrap();
            if s.mode() == Mode::Blocked {
                // Blocked cycles depend on B (the window size): lay out
                // cycle c with this sampler's geometry.
                let mut v: Vec<u64> = (0..n).collect();
                let e = Edited::new(s.clone());
                e.map_cycle(c, &mut v);
                return v;
            }
            let mut v: Vec<u64> = (0..n).collect();
            Edited::new(one).map_cycle(c, &mut v);
            v
        };
        let mut order = perm(0);
        let mut cursor = 0u64; // sequential
        for k in 0..batches {
            for (_, recs) in events.iter().filter(|(at, _)| *at == k * b) {
                excluded.extend(recs.iter().copied());
            }
            if s.mode() == Mode::Sequential {
                for _ in 0..b {
                    while excluded.contains(&cursor) {
                        cursor = (cursor + 1) % n;
                    }
                    out.push(cursor);
                    cursor = (cursor + 1) % n;
                }
                continue;
            }
            let left = (raw..n)
                .filter(|&p| !excluded.contains(&order[p as usize]))
                .count();
            if (left as u64) < b {
                cycle += 1;
                raw = 0;
                order = perm(cycle);
            }
            let mut took = 0;
            while took < b {
                let r = order[raw as usize];
                raw += 1;
                if !excluded.contains(&r) {
                    out.push(r);
                    took += 1;
                }
            }
        }
        out
    }

    #[test]
    fn the_stream_is_the_slow_definition_over_random_histories() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for case in 0..300 {
            let mode = [Mode::Cyclic, Mode::Blocked, Mode::Sequential][case % 3];
            let n = 1 + next(150);
            let b = 1 + next(n.min(12)) as usize;
            let block = (mode == Mode::Blocked).then(|| 1 + next(9));
            let s = Sampler::with_block_size(n, b, mode, next(1000), block).unwrap();
            let mut e = Edited::new(s.clone());
            let mut events = Vec::new();
            let mut at = 0u64;
            let mut gone = 0u64;
            for _ in 0..next(5) {
                at += next(3 * n / b as u64 + 2) * b as u64;
                let recs: Vec<u64> = (0..1 + next(4)).map(|_| next(n)).collect();
                let mut all: Vec<u64> = e.excluded().to_vec();
                all.extend(&recs);
                all.sort_unstable();
                all.dedup();
                if n - (all.len() as u64) < b as u64 {
                    continue; // refused; tested elsewhere
                }
                gone = all.len() as u64;
                e.exclude(at, &recs).unwrap();
                events.push((at, recs));
            }
            let batches = at / b as u64 + 3 * n / b as u64 + 3;
            let want = model(&s, &events, batches);
            let mut got = vec![0; want.len()];
            e.fill_stream(0, &mut got);
            assert_eq!(
                got, want,
                "case {case}: {mode:?} n={n} b={b} {events:?} ({gone} gone)"
            );
        }
    }

    #[test]
    fn sequential_resumes_the_sweep() {
        let mut e = Edited::new(sampler(10, 3, Mode::Sequential, 0));
        e.exclude(6, &[7, 8]).unwrap();
        let mut out = vec![0; 12];
        e.fill_stream(0, &mut out);
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5, 6, 9, 0, 1, 2, 3]);
    }

    #[test]
    fn refused_exclusions() {
        let mut e = Edited::new(sampler(10, 4, Mode::Cyclic, 0));
        assert_eq!(
            e.exclude(0, &[10]),
            Err(EditError::Record { record: 10, n: 10 })
        );
        assert_eq!(
            e.exclude(0, &[0, 1, 2, 3, 4, 5, 6]),
            Err(EditError::FewerThanBatch { left: 3, batch: 4 })
        );
        e.exclude(8, &[0]).unwrap();
        assert_eq!(e.exclude(4, &[1]), Err(EditError::Order { at: 4, last: 8 }));
        let mut w = Edited::new(sampler(10, 4, Mode::Weighted, 0));
        // Weights i % 5: records 0 and 5 weigh nothing.
        let heavy: Vec<u64> = (0..10).filter(|r| r % 5 != 0).collect();
        assert_eq!(w.exclude(0, &heavy), Err(EditError::Everything { n: 10 }));
        let mut i = Edited::new(sampler(3, 4, Mode::Iid, 0));
        assert_eq!(
            i.exclude(0, &[0, 1, 2]),
            Err(EditError::Everything { n: 3 })
        );
    }
}
