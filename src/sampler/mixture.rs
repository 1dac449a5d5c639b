//! Mixtures: how many records each source gives to each step's global batch,
//! and where they go in it.
//!
//! # Targets
//!
//! Step `k` draws `G` records (the global batch) from `S` sources whose
//! weights at that step are `w(k)`. Source `i`'s *share* is `w_i / Σw`,
//! held as a multiple of `2^-48` ([`shares`]: the shares of a step add up to
//! exactly 1, so the arithmetic below is exact integer arithmetic, the same
//! on every machine). Its *target* after `k` steps is
//! `T_i(k) = Σ_{s<k} G · share_i(s)`, and `C_i(k)` is how many records it
//! has given.
//!
//! # The rule: earliest deadline first
//!
//! Think of source `i`'s `m`-th record (`m = 1, 2, …`) as a job. It may be
//! drawn once `T_i ≥ m − 1 + σ` (its *release*: no source runs a whole
//! record ahead of its target), and it is *due* when `T_i` passes `m` (after
//! that the source would be a record behind), with `σ = 1 / (2S − 2)`. Each
//! step, after adding the step's targets, every source offers its released
//! jobs; there are always at least `G` of them (`Σ_i (⌊T_i − σ⌋ + 1) >
//! ΣT_i − Sσ ≥ kG − 1`), and the step takes the `G` that are due first —
//! deadlines are compared as the time `T_i` needs, at the step's own
//! shares, to pass `m` — by dropping the latest-due ones (ties: the job of
//! the source listed last is dropped first).
//!
//! # What it guarantees
//!
//! * Always, for fixed or scheduled weights: `Σ_i C_i(k) = kG`, and
//!   `C_i(k) ≤ T_i(k) + 1 − σ` (never a whole record ahead).
//! * Fixed weights: also `C_i(k) > T_i(k) − 1`, so `|C_i(k) − T_i(k)| < 1`
//!   at every step `k`: over the steps `0..k` every source's count is its
//!   target to within one record, and over any window of steps `a..b`
//!   (the difference of two such counts) to within two. Proof: with
//!   release and due steps as above, any window of steps `a..=b` holds
//!   fewer jobs of source `i` released and due inside it than
//!   `T_i(b+1) − T_i(a)`, so fewer than `G` per step in all (Hall's
//!   condition); unit jobs with integer release and due steps on `G`
//!   machines are all met by earliest-deadline-first whenever they can be,
//!   and with fixed shares the deadlines compared are the true ones.
//! * Scheduled weights: the deadlines compared are those of the step's own
//!   shares, so a change of weights can leave a source more than one record
//!   behind (no rule that decides step by step can avoid it: two sources
//!   given a record each at step 0 whose weights then drop to zero hold
//!   their leads, and the others can fall short by as much). The shortfall
//!   is bounded by the other sources' leads: `C_i(k) > T_i(k) − (S − 1)`,
//!   and while the weights stay fixed the sources behind are served first.
//!
//! A step's counts depend on every earlier step's weights, so they are
//! computed in step order ([`Blend`]); resuming at step `k` replays the
//! rule from step 0 (integer arithmetic, `O(k · S)`).
//!
//! # Rows
//!
//! The global batch lists the sources' records interleaved: source `i`'s
//! `j`-th record of the step (`j < c_i`) is placed by the key
//! `(j + ½) / c_i`, ties to the source listed first ([`interleave`]). Any
//! run of consecutive rows then holds every source in proportion, up to a
//! record or so each, which is what a data-parallel rank's slice is.
//!
//! # Seeds
//!
//! Each source samples its records with a sampler of its own, seeded by
//! [`source_seed`] from the loader's seed and the source's name.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;

use super::{mix64, GOLDEN_GAMMA};

/// Shares are multiples of `2^-SHARE_BITS`.
pub const SHARE_BITS: u32 = 48;
/// One whole record in target units.
const ONE: u128 = 1 << SHARE_BITS;
/// Most sources a mixture takes (a row's source is a `u16`).
pub const MAX_SOURCES: usize = 1 << 16;
/// Largest global batch of a mixture (targets stay exact in `u128` for
/// `2^47` steps).
pub const MAX_GLOBAL: u64 = 1 << 32;
/// Domain separation of the source seeds ("mixsourc").
const DOMAIN_SOURCE: u64 = 0x6D69_7873_6F75_7263;

/// What is wrong with a mixture's weights or sizes.
#[derive(Clone, Debug, PartialEq)]
pub enum MixError {
    /// Weight `at` is negative, NaN or infinite.
    Weight { at: usize, value: f64 },
    /// Every weight is zero.
    Sum { sum: f64 },
    /// `got` weights for `sources` sources.
    Count { sources: usize, got: usize },
    /// No sources, or more than [`MAX_SOURCES`].
    Sources { got: usize },
    /// A global batch of 0 or above [`MAX_GLOBAL`].
    Global { got: u64 },
    /// The targets left the exact range (after about `2^47` steps).
    Overflow { step: u64 },
}

// A NaN weight is only ever reported, never compared.
impl Eq for MixError {}

impl fmt::Display for MixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MixError::Weight { at, value } => write!(
                f,
                "mixture weights must be finite and >= 0, got {value} for source {at}"
            ),
            MixError::Sum { sum } => write!(
                f,
                "mixture weights must not all be zero, got a sum of {sum}"
            ),
            MixError::Count { sources, got } => write!(
                f,
                "mixture weights must hold one weight per source ({sources}), got {got}"
            ),
            MixError::Sources { got } => write!(
                f,
                "a mixture takes 1 to {MAX_SOURCES} sources, got {got}"
            ),
            MixError::Global { got } => write!(
                f,
                "a mixture's global batch must be in 1..={MAX_GLOBAL}, got {got}"
            ),
            MixError::Overflow { step } => write!(
                f,
                "mixture targets overflow at step {step} (steps beyond about 2^47 are not supported)"
            ),
        }
    }
}

impl std::error::Error for MixError {}

/// The shares `w_i / Σw` as multiples of `2^-48` that add up to exactly
/// `2^48`; a zero weight has share 0.
///
/// Each share is `⌊(w_i / w_max) / Σ_j (w_j / w_max) · 2^48⌋` (IEEE
/// arithmetic in that order, then an exact scaling); what the floors leave out goes one unit at a time to the
/// sources with the largest dropped fractions (ties to the first).
pub fn shares(weights: &[f64]) -> Result<Vec<u64>, MixError> {
    if weights.is_empty() || weights.len() > MAX_SOURCES {
        return Err(MixError::Sources { got: weights.len() });
    }
    let mut sum = 0.0f64;
    let mut max = 0.0f64;
    for (at, &value) in weights.iter().enumerate() {
        if !(value.is_finite() && value >= 0.0) {
            return Err(MixError::Weight { at, value });
        }
        sum += value;
        max = max.max(value);
    }
    if max == 0.0 {
        return Err(MixError::Sum { sum });
    }
    // Relative to the largest weight, so that huge weights add up.
    let sum: f64 = weights.iter().map(|w| w / max).sum();
    let scale = ONE as f64;
    let exact: Vec<f64> = weights.iter().map(|w| (w / max / sum) * scale).collect();
    let mut out: Vec<u64> = exact.iter().map(|&e| (e as u64).min(ONE as u64)).collect();
    let total: u128 = out.iter().map(|&s| u128::from(s)).sum();
    let positive: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0).collect();
    if total < ONE {
        // Largest dropped fraction first, ties to the first source.
        let mut order = positive.clone();
        order.sort_by(|&a, &b| {
            let (fa, fb) = (exact[a] - out[a] as f64, exact[b] - out[b] as f64);
            fb.partial_cmp(&fa)
                .unwrap_or(Ordering::Equal)
                .then(a.cmp(&b))
        });
        let mut missing = ONE - total;
        while missing > 0 {
            for &i in &order {
                if missing == 0 {
                    break;
                }
                out[i] += 1;
                missing -= 1;
            }
        }
    } else {
        // The divisions rounded up: take the excess back from the largest.
        for _ in 0..total - ONE {
            let i = (0..out.len())
                .max_by_key(|&i| (out[i], usize::MAX - i))
                .expect("nonempty");
            out[i] -= 1;
        }
    }
    Ok(out)
}

/// A source's next released job, ordered by when it is due (the time its
/// target needs, at the current share, to pass the job), for dropping the
/// latest-due first.
#[derive(Clone, Copy, Debug)]
struct Due {
    source: usize,
    /// `m · ONE − T_i`: how far the target is from the job's due point.
    gap: i128,
    share: u64,
}

impl Due {
    /// `-1` overdue at a zero share, `0` finite, `1` never due.
    fn class(&self) -> i8 {
        match (self.share, self.gap > 0) {
            (0, true) => 1,
            (0, false) => -1,
            _ => 0,
        }
    }
}

impl Ord for Due {
    /// Later due is greater; at equal due, the later source is greater (so
    /// it is dropped first).
    fn cmp(&self, other: &Self) -> Ordering {
        let by_class = self.class().cmp(&other.class());
        let by_time = if self.class() == 0 && other.class() == 0 {
            // gap / share, compared exactly: |gap| < S · 2^48, share <= 2^48.
            (self.gap * i128::from(other.share)).cmp(&(other.gap * i128::from(self.share)))
        } else {
            Ordering::Equal
        };
        by_class.then(by_time).then(self.source.cmp(&other.source))
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Due {}

/// The rule's state after some steps: the targets and the counts so far.
#[derive(Clone, Debug)]
pub struct Blend {
    global: u64,
    step: u64,
    /// `T_i` in units of `2^-48` records.
    target: Vec<u128>,
    /// `C_i`.
    drawn: Vec<u64>,
    /// `σ` in target units.
    sigma: u128,
}

impl Blend {
    /// The state before step 0 of a mixture of `sources` sources drawing
    /// `global` records a step.
    pub fn new(sources: usize, global: u64) -> Result<Blend, MixError> {
        if sources == 0 || sources > MAX_SOURCES {
            return Err(MixError::Sources { got: sources });
        }
        if global == 0 || global > MAX_GLOBAL {
            return Err(MixError::Global { got: global });
        }
        let sigma = if sources > 1 {
            ONE / (2 * sources as u128 - 2)
        } else {
            0
        };
        Ok(Blend {
            global,
            step: 0,
            target: vec![0; sources],
            drawn: vec![0; sources],
            sigma,
        })
    }

    /// The step the next [`Blend::advance`] plans.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Records each source has given before [`Blend::step`] (`C_i`).
    pub fn drawn(&self) -> &[u64] {
        &self.drawn
    }

    /// Each source's target before [`Blend::step`], in records.
    pub fn target(&self) -> Vec<f64> {
        self.target.iter().map(|&t| t as f64 / ONE as f64).collect()
    }

    /// Plans the current step with `shares` (from [`shares`]) and moves to
    /// the next: the count of each source, adding up to the global batch.
    pub fn advance(&mut self, shares: &[u64]) -> Result<Vec<u32>, MixError> {
        let s = self.target.len();
        if shares.len() != s {
            return Err(MixError::Count {
                sources: s,
                got: shares.len(),
            });
        }
        let g = u128::from(self.global);
        let mut next = Vec::with_capacity(s);
        for (t, &share) in self.target.iter().zip(shares) {
            next.push(
                t.checked_add(g * u128::from(share))
                    .ok_or(MixError::Overflow { step: self.step })?,
            );
        }
        // Released jobs per source: m <= ⌊(T − σ) / ONE⌋ + 1.
        let mut counts: Vec<u64> = next
            .iter()
            .zip(&self.drawn)
            .map(|(&t, &c)| {
                let top = if t >= self.sigma {
                    ((t - self.sigma) / ONE) as u64 + 1
                } else {
                    0
                };
                // top >= c: a source only ever takes released jobs.
                top.saturating_sub(c)
            })
            .collect();
        let offered: u64 = counts.iter().sum();
        debug_assert!(offered >= self.global, "fewer released jobs than the batch");
        let mut excess = offered.saturating_sub(self.global);
        if excess > 0 {
            let due = |i: usize, counts: &[u64]| Due {
                source: i,
                gap: ((u128::from(self.drawn[i] + counts[i])) * ONE) as i128 - next[i] as i128,
                share: shares[i],
            };
            let mut heap: BinaryHeap<Due> = (0..s)
                .filter(|&i| counts[i] > 0)
                .map(|i| due(i, &counts))
                .collect();
            while excess > 0 {
                let latest = heap.pop().expect("more jobs offered than the excess");
                counts[latest.source] -= 1;
                excess -= 1;
                if counts[latest.source] > 0 {
                    heap.push(due(latest.source, &counts));
                }
            }
        }
        for (c, &n) in self.drawn.iter_mut().zip(&counts) {
            *c += n;
        }
        self.target = next;
        self.step += 1;
        Ok(counts.into_iter().map(|c| c as u32).collect())
    }
}

/// The source of each row of a global batch with `counts[i]` records of
/// source `i`: row keys `(j + ½) / counts[i]` in increasing order, ties to
/// the lower source.
pub fn interleave(counts: &[u32]) -> Vec<u16> {
    #[derive(PartialEq, Eq)]
    struct Head {
        /// `2j + 1`.
        num: u64,
        /// `2 c_i`.
        den: u64,
        source: usize,
    }
    impl Ord for Head {
        // Reversed: BinaryHeap pops the greatest, we want the smallest key.
        fn cmp(&self, o: &Self) -> Ordering {
            let a = u128::from(self.num) * u128::from(o.den);
            let b = u128::from(o.num) * u128::from(self.den);
            b.cmp(&a).then(o.source.cmp(&self.source))
        }
    }
    impl PartialOrd for Head {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    let total: usize = counts.iter().map(|&c| c as usize).sum();
    let mut out = Vec::with_capacity(total);
    let mut heap: BinaryHeap<Head> = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| Head {
            num: 1,
            den: 2 * u64::from(c),
            source: i,
        })
        .collect();
    while let Some(mut h) = heap.pop() {
        out.push(h.source as u16);
        if h.num + 2 < h.den {
            h.num += 2;
            heap.push(h);
        }
    }
    out
}

/// Of the rows `lo..hi` of the global batch that [`interleave`] orders,
/// each source's records as `(first, count)`: the source's `first`-th to
/// `first + count − 1`-th records of the step. Computed without listing
/// the rows: `O(S² log G)` for `S` sources.
pub fn runs(counts: &[u32], lo: usize, hi: usize) -> Vec<(u32, u32)> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let rows_before = |i: usize, p: u64| match p {
        0 => 0,
        p if p >= total => counts[i],
        p => rows_before(counts, i, p),
    };
    (0..counts.len())
        .map(|i| {
            let first = rows_before(i, lo as u64);
            (first, rows_before(i, hi as u64) - first)
        })
        .collect()
}

/// The position of source `i`'s `j`-th row in the [`interleave`] order:
/// the rows of every source with a smaller key, or an equal key and a
/// lower source.
fn position(counts: &[u32], i: usize, j: u32) -> u64 {
    // Row m of source l comes first when (2m+1) / c_l < (2j+1) / c_i, that
    // is (2m+1) c_i < (2j+1) c_l.
    let key = u128::from(2 * j + 1);
    let ci = u128::from(counts[i]);
    let mut before = u64::from(j);
    for (l, &cl) in counts.iter().enumerate() {
        if l == i || cl == 0 {
            continue;
        }
        let bound = key * u128::from(cl); // (2m+1) ci < bound
                                          // m from 0 while (2m+1) ci < bound: m < (bound - ci) / (2 ci).
        let strict = bound
            .saturating_sub(ci)
            .div_ceil(2 * ci)
            .min(u128::from(cl));
        let tie = (bound % ci == 0 && (bound / ci) % 2 == 1 && ((bound / ci) / 2) < u128::from(cl))
            && l < i;
        before += strict as u64 + u64::from(tie);
    }
    before
}

/// How many of source `i`'s rows sit among the first `p` rows.
fn rows_before(counts: &[u32], i: usize, p: u64) -> u32 {
    // Positions increase with j: the first j whose position is >= p.
    let (mut lo, mut hi) = (0u32, counts[i]);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if position(counts, i, mid) < p {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The seed of source `name`'s sampler in a mixture seeded `seed`: a pure
/// function of both (FNV-1a of the name's UTF-8 bytes, mixed with the seed
/// by SplitMix64's finalizer).
pub fn source_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in name.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(mix64(seed ^ DOMAIN_SOURCE).wrapping_add(mix64(h).wrapping_mul(GOLDEN_GAMMA)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(weights: &dyn Fn(u64) -> Vec<f64>, global: u64, steps: u64) -> Vec<Vec<u32>> {
        let s = weights(0).len();
        let mut b = Blend::new(s, global).unwrap();
        (0..steps)
            .map(|k| b.advance(&shares(&weights(k)).unwrap()).unwrap())
            .collect()
    }

    /// The largest `|C_i(k) − T_i(k)|` (shortfall, lead) over every prefix.
    fn errors(weights: &dyn Fn(u64) -> Vec<f64>, global: u64, steps: u64) -> (f64, f64) {
        let s = weights(0).len();
        let mut b = Blend::new(s, global).unwrap();
        let (mut short, mut lead) = (0f64, 0f64);
        for k in 0..steps {
            let c = b.advance(&shares(&weights(k)).unwrap()).unwrap();
            assert_eq!(c.iter().map(|&x| u64::from(x)).sum::<u64>(), global);
            for (&drawn, &target) in b.drawn.iter().zip(&b.target) {
                let err = (i128::from(drawn) * ONE as i128 - target as i128) as f64 / ONE as f64;
                short = short.max(-err);
                lead = lead.max(err);
            }
        }
        (short, lead)
    }

    #[test]
    fn shares_add_up_and_keep_zeros() {
        for w in [
            vec![1.0, 1.0, 1.0],
            vec![3.0, 1.0],
            vec![0.0, 1e-300, 5.0],
            vec![1e308, 1e308],
            vec![0.1, 0.2, 0.3, 0.4],
            vec![7.0],
        ] {
            let s = shares(&w).unwrap();
            assert_eq!(s.iter().map(|&x| u128::from(x)).sum::<u128>(), ONE, "{w:?}");
            for (x, wi) in s.iter().zip(&w) {
                if *wi == 0.0 {
                    assert_eq!(*x, 0);
                }
            }
        }
        assert_eq!(shares(&[3.0, 1.0]).unwrap(), vec![3 << 46, 1 << 46]);
    }

    #[test]
    fn bad_weights_are_named() {
        assert_eq!(
            shares(&[1.0, -1.0]),
            Err(MixError::Weight { at: 1, value: -1.0 })
        );
        assert!(matches!(
            shares(&[f64::NAN]),
            Err(MixError::Weight { at: 0, .. })
        ));
        assert_eq!(shares(&[0.0, 0.0]), Err(MixError::Sum { sum: 0.0 }));
        assert_eq!(shares(&[]), Err(MixError::Sources { got: 0 }));
        assert_eq!(Blend::new(2, 0).unwrap_err(), MixError::Global { got: 0 });
        let mut b = Blend::new(2, 4).unwrap();
        assert_eq!(
            b.advance(&[1]).unwrap_err(),
            MixError::Count { sources: 2, got: 1 }
        );
        assert!(MixError::Weight { at: 1, value: -1.0 }
            .to_string()
            .contains("got -1 for source 1"));
    }

    #[test]
    fn three_to_one_is_exact_every_fourth_step() {
        let c = run(&|_| vec![3.0, 1.0], 2, 8);
        // Targets 1.5 and 0.5 a step: 3 and 1 over every two steps.
        for pair in c.chunks(2) {
            assert_eq!(pair[0][0] + pair[1][0], 3);
            assert_eq!(pair[0][1] + pair[1][1], 1);
        }
    }

    #[test]
    fn a_zero_weight_source_gives_nothing() {
        let c = run(&|k| vec![1.0, if k < 5 { 0.0 } else { 1.0 }, 2.0], 7, 20);
        assert!(c[..5].iter().all(|x| x[1] == 0));
        assert!(c[5..].iter().any(|x| x[1] > 0));
    }

    #[test]
    fn interleave_spreads_each_source() {
        // Keys 1/6, 3/6, 5/6 and 3/6: the tie goes to the first source.
        assert_eq!(interleave(&[3, 1]), vec![0, 0, 1, 0]);
        assert_eq!(interleave(&[2, 2]), vec![0, 1, 0, 1]);
        assert_eq!(interleave(&[0, 3]), vec![1, 1, 1]);
        let order = interleave(&[6, 3, 3]);
        assert_eq!(order.len(), 12);
        assert_eq!(order, vec![0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0]);
        // Two ranks of six rows: (first, count) of each source.
        assert_eq!(runs(&[6, 3, 3], 0, 6), vec![(0, 3), (0, 2), (0, 1)]);
        assert_eq!(runs(&[6, 3, 3], 6, 12), vec![(3, 3), (2, 1), (1, 2)]);
    }

    #[test]
    fn source_seeds_differ_by_name_and_seed() {
        let a = source_seed(1, "web");
        assert_eq!(a, source_seed(1, "web"));
        assert_ne!(a, source_seed(2, "web"));
        assert_ne!(a, source_seed(1, "code"));
        assert_ne!(source_seed(0, ""), source_seed(0, "\0"));
    }

    #[test]
    fn tiny_shares_among_many_sources_stay_within_one() {
        // Many sources below one record a step: where a rounding per step
        // (or largest remainder on the running targets) falls behind.
        let w: Vec<f64> = (0..23).map(|i| 1.0 / f64::from(i * i + 1)).collect();
        for g in [1, 2, 3, 7] {
            let (short, lead) = errors(&|_| w.clone(), g, 3000);
            assert!(short < 1.0 && lead < 1.0, "g={g}: {short} {lead}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn fixed_weights_stay_within_one_record(
            w in prop::collection::vec(prop_oneof![Just(0.0), 0.0f64..1.0, 1.0f64..1e6], 1..12),
            global in 1u64..64,
            steps in 1u64..400,
        ) {
            prop_assume!(w.iter().any(|&x| x > 0.0));
            let s = w.len();
            let sigma = if s > 1 { 1.0 / (2.0 * s as f64 - 2.0) } else { 0.0 };
            let (short, lead) = errors(&|_| w.clone(), global, steps);
            prop_assert!(short < 1.0, "shortfall {short}");
            prop_assert!(lead <= 1.0 - sigma + 1e-12, "lead {lead}");
        }

        #[test]
        fn schedules_never_run_ahead_and_bound_the_shortfall(
            table in prop::collection::vec(
                prop::collection::vec(prop_oneof![Just(0.0), 0.0f64..1.0, 1.0f64..100.0], 6),
                1..60),
            global in 1u64..32,
        ) {
            let table: Vec<Vec<f64>> = table
                .into_iter()
                .map(|mut w| { if w.iter().all(|&x| x == 0.0) { w[0] = 1.0; } w })
                .collect();
            let n = table.len() as u64;
            let (short, lead) = errors(&|k| table[(k % n) as usize].clone(), global, 200);
            prop_assert!(lead < 1.0, "lead {lead}");
            prop_assert!(short < 5.0, "shortfall {short} (bound S - 1 = 5)");
        }

        #[test]
        fn runs_count_the_rows_of_the_interleave(
            counts in prop::collection::vec(prop_oneof![Just(0u32), 0u32..50, 50u32..400], 1..10),
            cut in (0.0f64..1.0, 0.0f64..1.0),
        ) {
            let order = interleave(&counts);
            let total = order.len();
            let (a, b) = ((cut.0 * total as f64) as usize, (cut.1 * total as f64) as usize);
            let (lo, hi) = (a.min(b), a.max(b));
            let mut want = vec![(0u32, 0u32); counts.len()];
            for &s in &order[..lo] {
                want[s as usize].0 += 1;
            }
            for &s in &order[lo..hi] {
                want[s as usize].1 += 1;
            }
            prop_assert_eq!(runs(&counts, lo, hi), want);
        }

        #[test]
        fn counts_are_a_pure_function_of_the_weights(
            w in prop::collection::vec(0.0f64..10.0, 2..6),
            global in 1u64..40,
        ) {
            prop_assume!(w.iter().any(|&x| x > 0.0));
            let a = run(&|_| w.clone(), global, 50);
            let b = run(&|_| w.clone(), global, 50);
            prop_assert_eq!(a, b);
        }
    }
}
