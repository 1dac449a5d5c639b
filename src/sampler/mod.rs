//! Index sampler: turns a training step into a batch of record indices.
//!
//! A [`Sampler`] is configured by `(n, batch_size, mode, seed)` and every batch
//! it produces is a *pure function* of `(n, batch_size, mode, seed, step)`:
//! [`Sampler::fill_at`] never reads or writes hidden state, so a run can be
//! resumed, replayed or sharded by step number alone. [`Sampler::next_into`]
//! is only a convenience that calls `fill_at(self.step())` and advances the
//! step counter. Indices are `u64` values in `0..n`, with `1 <= n <= 2^63`
//! (so every index also fits in an `i64`). No allocation proportional to `n`
//! is ever made.
//!
//! # Modes
//!
//! * [`Mode::Sequential`]: element `j` of batch `step` is
//!   `(step * B + j) mod n`, computed exactly in `u128` (no wrapping, so huge
//!   steps are exact). `B > n` is allowed (the batch wraps around). The seed
//!   is ignored.
//! * [`Mode::Iid`]: uniform draws with replacement over `0..n`. `B > n` is
//!   allowed.
//! * [`Mode::Cyclic`]: draws without replacement. With `P = n / B` batches
//!   per cycle, batch `step` belongs to cycle `c = step / P` and is batch
//!   `b = step % P` of that cycle; its element `j` is `perm_c(b * B + j)`,
//!   where `perm_c` is a keyed pseudo-random permutation of `0..n` (see
//!   below). The last `n mod B` positions of each cycle are never used, so
//!   each cycle visits exactly `n - n mod B` distinct indices with no
//!   repeats, and a new, independent permutation starts every cycle.
//!   `B > n` is an error.
//! * [`Mode::Blocked`]: cycles like [`Mode::Cyclic`] (same cycle length,
//!   same dropped remainder), but each batch draws its records from a few
//!   blocks of `block_size` consecutive records: the block order is
//!   shuffled each cycle, then the records within windows of a few blocks
//!   (see [`blocked`] for the definition). Built with
//!   [`Sampler::with_block_size`].
//! * [`Mode::Weighted`]: i.i.d. draws, record `i` with probability
//!   proportional to its weight (Walker's alias method, see [`weighted`]).
//!   Built with [`Sampler::with_options`]. `B > n` is allowed.
//!
//! [`Sampler::new`] rejects `n == 0`, `batch_size == 0`, `n > 2^63` and, for
//! CYCLIC only, `batch_size > n`, with a [`SamplerError`] whose message
//! names the offending argument.
//!
//! # IID generator (counter-based SplitMix64)
//!
//! The generator is SplitMix64 used as a counter-based generator. Let
//! `mix64` be the SplitMix64 output finalizer (Stafford's "Mix13":
//! xor-shift 30, multiply `0xBF58476D1CE4E5B9`, xor-shift 27, multiply
//! `0x94D049BB133111EB`, xor-shift 31), a bijection on `u64` with full
//! avalanche, and let `G = 0x9E3779B97F4A7C15` (the golden-ratio gamma).
//! All arithmetic below wraps modulo 2^64.
//!
//! * Per-batch key: `key = mix64(mix64(seed ^ D_IID) + step * G)`, where
//!   `D_IID` is a domain-separation constant. For a fixed seed this is
//!   injective in `step`, and for a fixed step injective in `seed`.
//! * Draw `i = 0, 1, 2, ...` of the batch is `x_i = mix64(key + (i + 1) * G)`:
//!   exactly the SplitMix64 output sequence started from state `key`.
//! * Reduction to `0..n` is Lemire's multiply-shift with rejection on 64
//!   bits: `m = x * n` as a 128-bit product; the draw is rejected when
//!   `low64(m) < 2^64 mod n` (the threshold is precomputed once per
//!   sampler), otherwise the index is `high64(m)`. This is exactly uniform
//!   for every `n`. A rejected draw is followed by the next counter value,
//!   so element `j` is the first accepted draw after element `j - 1`. The
//!   rejection probability is `(2^64 mod n) / 2^64 < n / 2^64 <= 1/2`; the
//!   loop is branch-free, so even a high rejection rate costs no
//!   mispredictions.
//!
//! # CYCLIC permutation (alternating unbalanced Feistel + cycle walking)
//!
//! Let `k = ceil(log2 n)` (`k = 0` for `n = 1`) so that `2^(k-1) < n <= 2^k`:
//! the domain is the next power of two `>= n`. A position `x < 2^k` is
//! split into a high half `H` of `ceil(k/2)` bits and a low half `L` of
//! `floor(k/2)` bits, and `r/2` pairs of rounds are applied:
//!
//! ```text
//! H ^= F(L, key[2i])     & (2^ceil(k/2)  - 1)
//! L ^= F(H, key[2i + 1]) & (2^floor(k/2) - 1)
//! ```
//!
//! Each line xors one half with a function of the other, so this is an
//! (unbalanced when `k` is odd) Feistel network and a bijection on `0..2^k`
//! for every `k`, including odd `k`, `k = 1` (empty low half) and `k = 0`.
//!
//! * Round function: `F(v, key) = (u * (u ^ C)) >> 32` with
//!   `u = (v * G) ^ key`, wrapping 64-bit multiplies and
//!   `C = 0xE7037ED1A0B428DB`. The first multiply spreads the half (at most
//!   32 bits) over the whole word, so the second product is quadratic in
//!   all bits of `v` and every output bit depends on every input bit.
//!   Two multiplies per round.
//! * Rounds: `r = 8` for `k >= 8` (`n > 128`) and `r = 24` for `k <= 7`.
//!   Tiny halves (at most 4 bits) mix slowly: with 8 rounds the walked
//!   permutations of e.g. `n = 5` or `n = 17` are measurably non-uniform,
//!   while 24 rounds make them indistinguishable from uniform in chi-square
//!   tests; for `k >= 8`, 8 rounds pass pair-uniformity tests over millions
//!   of cycles and a full avalanche test.
//! * Keys: the round keys of cycle `c` are the first `r` outputs of the
//!   SplitMix64 stream started at `mix64(mix64(seed ^ D_CYCLIC) + c * G)`,
//!   i.e. `key[i] = mix64(s + (i + 1) * G)`, so every `(seed, cycle)` pair
//!   gets an independent-looking permutation.
//! * Cycle walking: `perm_c(x)` applies the Feistel network repeatedly,
//!   starting from `x`, until the value lands in `0..n`. Because `2^k < 2n`
//!   the walk takes fewer than 2 Feistel evaluations on average: each
//!   out-of-range value lies on at most one walk, so summed over all `n`
//!   starting points at most `2^k` evaluations are made.
//!
//! For speed, a batch is computed in two branch-free passes over groups of
//! eight positions (their rounds overlap in the CPU pipeline): one Feistel
//! evaluation per position, then the out-of-range values are walked through
//! a small eight-lane work queue. The result equals the scalar definition
//! above (tested against it).
//!
//! # Per-record seeds
//!
//! [`record_seeds`] gives each record of a batch a seed of its own for
//! augmentation: the same SplitMix64 stream as the IID draws, keyed by
//! `mix64(mix64(seed ^ D_RECORD) + step * G)`, evaluated at `index + 1`
//! (`mix64(key + (index + 1) * G)`), so it is a pure function of
//! `(seed, step, index)`. The Python loader's `record_seeds` is this
//! function.
//!
//! These definitions are part of the reproducibility contract: changing any
//! constant changes batches. The `golden_values_are_stable` test pins
//! outputs of each mode.
//!
//! A run's plan can be edited: [`edit::Edited`] is a sampler's stream with
//! records excluded from given positions on, still a pure function of the
//! position.

use std::fmt;

/// Largest supported index space: indices are `< 2^63` and fit in an `i64`.
pub const MAX_N: u64 = 1 << 63;

/// SplitMix64 / golden-ratio increment.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
/// Domain separation for IID batch keys.
const DOMAIN_IID: u64 = 0x6969_645F_7374_6570; // "iid_step"
/// Domain separation for CYCLIC permutation keys.
const DOMAIN_CYCLIC: u64 = 0x6379_636C_6963_5F63; // "cyclic_c"
/// Domain separation for per-record seeds.
const DOMAIN_RECORD: u64 = 0x7265_635F_7365_6564; // "rec_seed"
/// Constant xored into the second factor of the Feistel round function.
const ROUND_MUL: u64 = 0xE703_7ED1_A0B4_28DB;
/// Positions encrypted together in the CYCLIC fast path.
const LANES: usize = 8;

/// Sampling strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `(step * B + j) mod n`.
    Sequential,
    /// Uniform with replacement.
    Iid,
    /// Without replacement, a fresh permutation every cycle.
    Cyclic,
    /// Without replacement like `Cyclic`, each batch from a few blocks of
    /// consecutive records.
    Blocked,
    /// With replacement, proportional to a weight per record.
    Weighted,
}

impl Mode {
    /// The canonical lowercase name: `"sequential"`, `"iid"` or `"cyclic"`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Iid => "iid",
            Mode::Cyclic => "cyclic",
            Mode::Blocked => "blocked",
            Mode::Weighted => "weighted",
        }
    }

    /// Whether batches are drawn without replacement, a cycle at a time.
    pub fn cycles(self) -> bool {
        matches!(self, Mode::Cyclic | Mode::Blocked)
    }

    /// Parses a mode name, ignoring ASCII case (`"cyclic"`, `"CYCLIC"`, ...).
    pub fn from_name(name: &str) -> Option<Mode> {
        [
            Mode::Sequential,
            Mode::Iid,
            Mode::Cyclic,
            Mode::Blocked,
            Mode::Weighted,
        ]
        .into_iter()
        .find(|m| m.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Invalid sampler configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SamplerError {
    /// `n == 0`.
    EmptyIndexSpace,
    /// `batch_size == 0`.
    ZeroBatch,
    /// CYCLIC mode with `batch_size > n`.
    BatchLargerThanSpace { batch: usize, n: u64 },
    /// `n > 2^63`.
    IndexSpaceTooLarge { n: u64 },
    /// BLOCKED mode without a block size, or a block size of 0.
    BlockSize { got: Option<u64> },
    /// A block size for a mode other than BLOCKED.
    BlockSizeUnused { mode: Mode },
    /// WEIGHTED mode without weights.
    MissingWeights,
    /// Weights for a mode other than WEIGHTED.
    WeightsUnused { mode: Mode },
    /// Weights that do not fit the index space.
    Weights(weighted::WeightsError),
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplerError::EmptyIndexSpace => {
                f.write_str("n must be at least 1: cannot sample from an empty index space")
            }
            SamplerError::ZeroBatch => f.write_str("batch_size must be at least 1"),
            SamplerError::BatchLargerThanSpace { batch, n } => write!(
                f,
                "batch_size {batch} exceeds n {n}: cyclic sampling draws without replacement"
            ),
            SamplerError::BlockSize { got: None } => f.write_str(
                "block_size must be given for mode 'blocked' (records per block, >= 1), got None",
            ),
            SamplerError::BlockSize { got: Some(b) } => {
                write!(f, "block_size must be >= 1 (records per block), got {b}")
            }
            SamplerError::BlockSizeUnused { mode } => write!(
                f,
                "block_size applies only to mode 'blocked', but mode is {:?}",
                mode.name()
            ),
            SamplerError::MissingWeights => f.write_str(
                "weights must be given for mode 'weighted' (one weight per record), got None",
            ),
            SamplerError::WeightsUnused { mode } => write!(
                f,
                "weights apply only to mode 'weighted', but mode is {:?}",
                mode.name()
            ),
            SamplerError::Weights(e) => e.fmt(f),
            SamplerError::IndexSpaceTooLarge { n } => write!(
                f,
                "n {n} exceeds the maximum index space 2^63 ({MAX_N}): indices must fit in an i64"
            ),
        }
    }
}

impl std::error::Error for SamplerError {}

/// SplitMix64 output finalizer (Stafford Mix13): a bijection with full avalanche.
#[inline(always)]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Stream positions `start..start + out.len()` of a plan that draws each
/// batch of `batch_size` from one key (IID, weighted): `fill(step, batch)`
/// fills whole batch `step`; whole batches go straight into `out`, the
/// partial ones at either end through a scratch batch.
fn by_batches(
    batch_size: usize,
    start: u64,
    out: &mut [u64],
    mut fill: impl FnMut(u64, &mut [u64]),
) {
    let b = batch_size as u64;
    let mut scratch = Vec::new();
    let mut pos = start;
    let mut rest = out;
    while !rest.is_empty() {
        let (step, skip) = (pos / b, (pos % b) as usize);
        let take = (batch_size - skip).min(rest.len());
        let (chunk, tail) = rest.split_at_mut(take);
        if take == batch_size {
            fill(step, chunk);
        } else {
            scratch.resize(batch_size, 0);
            fill(step, &mut scratch);
            chunk.copy_from_slice(&scratch[skip..skip + take]);
        }
        pos = pos.wrapping_add(take as u64);
        rest = tail;
    }
}

/// Keys a stream by `(seed, counter)` within a domain. Injective in
/// `counter` for a fixed seed and in `seed` for a fixed counter.
#[inline]
fn stream_key(domain: u64, seed: u64, counter: u64) -> u64 {
    mix64(mix64(seed ^ domain).wrapping_add(counter.wrapping_mul(GOLDEN_GAMMA)))
}

/// The seed of record `index` at `step` of a run seeded `seed` (see
/// "Per-record seeds" above): `mix64(key + (index + 1) * G)` with
/// `key = mix64(mix64(seed ^ D_RECORD) + step * G)`.
#[inline]
pub fn record_seed(seed: u64, step: u64, index: u64) -> u64 {
    let key = stream_key(DOMAIN_RECORD, seed, step);
    mix64(key.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)))
}

/// [`record_seed`] of every `indices[i]` at `step` into `out[i]`, the seed
/// being `seeds[i]`, or `seeds[0]` for every row when `seeds` holds one.
///
/// # Panics
/// If `out` and `indices` differ in length, or `seeds` holds neither one
/// seed nor one per index.
pub fn record_seeds(seeds: &[u64], step: u64, indices: &[u64], out: &mut [u64]) {
    assert_eq!(out.len(), indices.len(), "one output per index");
    match seeds {
        [seed] => {
            let key = stream_key(DOMAIN_RECORD, *seed, step);
            for (o, &i) in out.iter_mut().zip(indices) {
                *o = mix64(key.wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)));
            }
        }
        _ => {
            assert_eq!(seeds.len(), indices.len(), "one seed, or one per index");
            for ((o, &i), &seed) in out.iter_mut().zip(indices).zip(seeds) {
                *o = record_seed(seed, step, i);
            }
        }
    }
}

/// Feistel round function: keyed spread-and-square, 32 output bits.
///
/// `u = (v * G) ^ key` spreads the (at most 32-bit) half over all 64 bits;
/// the result is bits 32..63 of the wrapping product `u * (u ^ C)`. Without
/// the spreading multiply, a small `v` only reaches the output bits through
/// a near-linear term and narrow halves mix badly (measurably non-uniform
/// pairs at `n = 129..255` with 8 rounds); with it, every output bit is a
/// quadratic function of all bits of `v`.
#[inline(always)]
fn round_fn(v: u64, key: u64) -> u64 {
    let u = v.wrapping_mul(GOLDEN_GAMMA) ^ key;
    u.wrapping_mul(u ^ ROUND_MUL) >> 32
}

/// Number of Feistel rounds for a `2^k` domain: halves of at most 4 bits
/// need more rounds before walked permutations look uniform.
fn feistel_rounds(k: u32) -> usize {
    if k <= 7 {
        24
    } else {
        8
    }
}

/// Geometry of the Feistel network over `0..2^k`, `2^(k-1) < n <= 2^k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FeistelDomain {
    /// Width of the low half (`floor(k/2)` bits).
    low_bits: u32,
    /// Mask of the high half (`ceil(k/2)` bits).
    high_mask: u64,
    /// Mask of the low half.
    low_mask: u64,
    /// Number of rounds, from [`feistel_rounds`].
    rounds: usize,
}

impl FeistelDomain {
    fn new(n: u64) -> FeistelDomain {
        debug_assert!((1..=MAX_N).contains(&n));
        let k = 64 - (n - 1).leading_zeros(); // ceil(log2 n); 0 for n = 1
        let low_bits = k / 2;
        let high_bits = k - low_bits;
        FeistelDomain {
            low_bits,
            high_mask: (1u64 << high_bits) - 1,
            low_mask: (1u64 << low_bits) - 1,
            rounds: feistel_rounds(k),
        }
    }

    /// Size of the power-of-two domain, `2^k`.
    fn size(&self) -> u64 {
        ((self.high_mask << self.low_bits) | self.low_mask) + 1
    }

    /// The keyed bijection on `0..2^k` (`x` must be `< 2^k`): one pair of
    /// rounds per pair of `keys`, each xoring one half with a function of
    /// the other. Inlined, so a caller's fixed-size key array (the CYCLIC
    /// path's) unrolls the rounds as a const-generic loop would.
    #[inline(always)]
    fn encrypt(&self, keys: &[u64], x: u64) -> u64 {
        let mut hi = x >> self.low_bits;
        let mut lo = x & self.low_mask;
        for pair in keys.chunks_exact(2) {
            hi ^= round_fn(lo, pair[0]) & self.high_mask;
            lo ^= round_fn(hi, pair[1]) & self.low_mask;
        }
        (hi << self.low_bits) | lo
    }

    /// The inverse of [`FeistelDomain::encrypt`]: the rounds undone in
    /// reverse order.
    #[inline(always)]
    fn decrypt(&self, keys: &[u64], y: u64) -> u64 {
        let mut hi = y >> self.low_bits;
        let mut lo = y & self.low_mask;
        for pair in keys.chunks_exact(2).rev() {
            lo ^= round_fn(hi, pair[1]) & self.low_mask;
            hi ^= round_fn(lo, pair[0]) & self.high_mask;
        }
        (hi << self.low_bits) | lo
    }

    /// [`FeistelDomain::decrypt`] on `LANES` independent values, interleaved
    /// like [`FeistelDomain::encrypt_lanes`].
    #[inline(always)]
    fn decrypt_lanes<const R: usize>(&self, keys: &[u64; R], x: &mut [u64; LANES]) {
        let mut hi = [0u64; LANES];
        let mut lo = [0u64; LANES];
        for l in 0..LANES {
            hi[l] = x[l] >> self.low_bits;
            lo[l] = x[l] & self.low_mask;
        }
        for pair in keys.chunks_exact(2).rev() {
            for l in 0..LANES {
                lo[l] ^= round_fn(hi[l], pair[1]) & self.low_mask;
            }
            for l in 0..LANES {
                hi[l] ^= round_fn(lo[l], pair[0]) & self.high_mask;
            }
        }
        for l in 0..LANES {
            x[l] = (hi[l] << self.low_bits) | lo[l];
        }
    }

    /// [`FeistelDomain::encrypt`] on `LANES` independent values, interleaved
    /// so that the rounds of different lanes overlap in the pipeline.
    #[inline(always)]
    fn encrypt_lanes<const R: usize>(&self, keys: &[u64; R], x: &mut [u64; LANES]) {
        let mut hi = [0u64; LANES];
        let mut lo = [0u64; LANES];
        for l in 0..LANES {
            hi[l] = x[l] >> self.low_bits;
            lo[l] = x[l] & self.low_mask;
        }
        for pair in keys.chunks_exact(2) {
            for l in 0..LANES {
                hi[l] ^= round_fn(lo[l], pair[0]) & self.high_mask;
            }
            for l in 0..LANES {
                lo[l] ^= round_fn(hi[l], pair[1]) & self.low_mask;
            }
        }
        for l in 0..LANES {
            x[l] = (hi[l] << self.low_bits) | lo[l];
        }
    }

    /// The keyed bijection on `0..n` by cycle walking (`x` must be `< n`).
    #[cfg(test)]
    fn permute<const R: usize>(&self, keys: &[u64; R], n: u64, x: u64) -> u64 {
        let mut y = self.encrypt(keys, x);
        while y >= n {
            y = self.encrypt(keys, y);
        }
        y
    }
}

/// Round keys of the permutation used in cycle `cycle`: the first `R`
/// outputs of a SplitMix64 stream keyed by `(seed, cycle)`.
fn cycle_keys<const R: usize>(seed: u64, cycle: u64) -> [u64; R] {
    let mut s = stream_key(DOMAIN_CYCLIC, seed, cycle);
    let mut keys = [0u64; R];
    for k in keys.iter_mut() {
        s = s.wrapping_add(GOLDEN_GAMMA);
        *k = mix64(s);
    }
    keys
}

/// Cycle-walking work queue: after one Feistel evaluation, the lanes that
/// are still `>= n` stay queued. Writes every lane's current value to its
/// slot (a final, in-range value overwrites any intermediate one) and
/// returns the number of lanes still pending, moved to the front.
#[inline(always)]
fn retire_lanes(
    n: u64,
    out: &mut [u64],
    ids: &mut [usize; LANES],
    vals: &mut [u64; LANES],
    count: usize,
) -> usize {
    let mut kept = 0;
    for l in 0..count {
        let (id, v) = (ids[l], vals[l]);
        out[id] = v;
        ids[kept] = id;
        vals[kept] = v;
        kept += usize::from(v >= n);
    }
    kept
}

/// Deterministic batch-index sampler; see the module documentation.
#[derive(Clone, Debug)]
pub struct Sampler {
    n: u64,
    batch_size: usize,
    mode: Mode,
    seed: u64,
    step: u64,
    /// `2^64 mod n`: Lemire rejection threshold.
    lemire_threshold: u64,
    /// `n / batch_size` (CYCLIC and BLOCKED only; 0 otherwise).
    batches_per_cycle: u64,
    feistel: FeistelDomain,
    /// Records per block (BLOCKED only).
    block_size: Option<u64>,
    /// The alias table of the weights (WEIGHTED only).
    weights: Option<std::sync::Arc<weighted::AliasTable>>,
}

impl Sampler {
    /// Creates a sampler at step 0.
    ///
    /// # Errors
    /// [`SamplerError::EmptyIndexSpace`] if `n == 0`,
    /// [`SamplerError::ZeroBatch`] if `batch_size == 0`,
    /// [`SamplerError::IndexSpaceTooLarge`] if `n > 2^63`, and for
    /// [`Mode::Cyclic`] [`SamplerError::BatchLargerThanSpace`] if
    /// `batch_size > n`.
    pub fn new(n: u64, batch_size: usize, mode: Mode, seed: u64) -> Result<Sampler, SamplerError> {
        Sampler::with_block_size(n, batch_size, mode, seed, None)
    }

    /// [`Sampler::new`] with the block size that [`Mode::Blocked`] needs
    /// (records per block, `>= 1`; `SamplerError::BlockSize` without one)
    /// and that the other modes refuse (`SamplerError::BlockSizeUnused`).
    pub fn with_block_size(
        n: u64,
        batch_size: usize,
        mode: Mode,
        seed: u64,
        block_size: Option<u64>,
    ) -> Result<Sampler, SamplerError> {
        Sampler::with_options(n, batch_size, mode, seed, block_size, None)
    }

    /// [`Sampler::with_block_size`] with the alias table of the weights that
    /// [`Mode::Weighted`] needs (one per record: `SamplerError::Weights`
    /// otherwise) and the other modes refuse.
    pub fn with_options(
        n: u64,
        batch_size: usize,
        mode: Mode,
        seed: u64,
        block_size: Option<u64>,
        weights: Option<std::sync::Arc<weighted::AliasTable>>,
    ) -> Result<Sampler, SamplerError> {
        if n == 0 {
            return Err(SamplerError::EmptyIndexSpace);
        }
        if batch_size == 0 {
            return Err(SamplerError::ZeroBatch);
        }
        if n > MAX_N {
            return Err(SamplerError::IndexSpaceTooLarge { n });
        }
        match (mode, block_size) {
            (Mode::Blocked, None | Some(0)) => {
                return Err(SamplerError::BlockSize { got: block_size })
            }
            (Mode::Blocked, Some(_)) | (_, None) => {}
            (mode, Some(_)) => return Err(SamplerError::BlockSizeUnused { mode }),
        }
        match (mode, &weights) {
            (Mode::Weighted, None) => return Err(SamplerError::MissingWeights),
            (Mode::Weighted, Some(t)) if t.len() as u64 != n => {
                return Err(SamplerError::Weights(weighted::WeightsError::Length {
                    n,
                    got: t.len(),
                }))
            }
            (Mode::Weighted, Some(_)) | (_, None) => {}
            (mode, Some(_)) => return Err(SamplerError::WeightsUnused { mode }),
        }
        let batch = u64::try_from(batch_size).unwrap_or(u64::MAX);
        let batches_per_cycle = if mode.cycles() {
            if batch > n {
                return Err(SamplerError::BatchLargerThanSpace {
                    batch: batch_size,
                    n,
                });
            }
            n / batch
        } else {
            0
        };
        Ok(Sampler {
            n,
            batch_size,
            mode,
            seed,
            step: 0,
            lemire_threshold: n.wrapping_neg() % n,
            batches_per_cycle,
            feistel: FeistelDomain::new(n),
            block_size,
            weights,
        })
    }

    /// Records per block ([`Mode::Blocked`] only).
    pub fn block_size(&self) -> Option<u64> {
        self.block_size
    }

    /// Size of the index space; indices are in `0..n`.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Number of indices per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Sampling mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Seed (ignored by [`Mode::Sequential`]).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The step that the next [`Sampler::next_into`] call will produce.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Moves the step counter (e.g. when resuming); batches do not depend on
    /// how the counter got there.
    pub fn set_step(&mut self, step: u64) {
        self.step = step;
    }

    /// For [`Mode::Cyclic`] and [`Mode::Blocked`], the number of batches
    /// per cycle, `n / batch_size`.
    pub fn batches_per_cycle(&self) -> Option<u64> {
        self.mode.cycles().then_some(self.batches_per_cycle)
    }

    /// Writes batch `step` into `out`. Pure: depends only on
    /// `(n, batch_size, mode, seed, step)`.
    ///
    /// # Panics
    /// If `out.len() != batch_size`.
    pub fn fill_at(&self, step: u64, out: &mut [u64]) {
        assert_eq!(
            out.len(),
            self.batch_size,
            "fill_at: output slice length must equal batch_size"
        );
        match self.mode {
            Mode::Sequential => self.fill_sequential(step, out),
            Mode::Iid => self.fill_iid(step, out),
            Mode::Cyclic => self.fill_cyclic(step, out),
            Mode::Blocked => self.fill_blocked(step, out),
            Mode::Weighted => self
                .weights
                .as_ref()
                .expect("checked at construction")
                .fill(self.seed, step, out),
        }
    }

    /// Writes batch `self.step()` into `out` and advances the step by one
    /// (wrapping at `u64::MAX`).
    ///
    /// # Panics
    /// If `out.len() != batch_size`.
    pub fn next_into(&mut self, out: &mut [u64]) {
        self.fill_at(self.step, out);
        self.step = self.step.wrapping_add(1);
    }

    /// Batch `step` as a freshly allocated vector.
    pub fn at(&self, step: u64) -> Vec<u64> {
        let mut out = vec![0; self.batch_size];
        self.fill_at(step, &mut out);
        out
    }

    /// Positions `start..start + out.len()` of the sampler's record stream:
    /// its batches end to end, so position `p` is element `p % B` of batch
    /// `p / B` (`B` the batch size). Pure, like [`Sampler::fill_at`]. With
    /// `B = 1` every position is a batch of its own: the stream a mixture
    /// draws a source's records from (a cyclic or blocked stream then visits
    /// every record once per cycle of `n` positions).
    pub fn fill_stream(&self, start: u64, out: &mut [u64]) {
        let b = self.batch_size as u64;
        if self.mode == Mode::Sequential {
            let n = u128::from(self.n);
            let mut idx = (u128::from(start) % n) as u64;
            for slot in out.iter_mut() {
                *slot = idx;
                idx += 1;
                if idx == self.n {
                    idx = 0;
                }
            }
            return;
        }
        if self.mode.cycles() {
            // A cycle is `per_cycle * B` consecutive stream positions, and
            // position `r` within it is cycle position `r` (batch r / B,
            // element r % B).
            let cycle_len = u128::from(self.batches_per_cycle) * u128::from(b);
            let mut pos = u128::from(start);
            let mut rest = out;
            while !rest.is_empty() {
                let cycle = (pos / cycle_len) as u64;
                let base = (pos % cycle_len) as u64;
                let take = ((cycle_len - u128::from(base)) as usize).min(rest.len());
                let (chunk, tail) = rest.split_at_mut(take);
                if self.mode == Mode::Blocked {
                    let block = self.block_size.expect("checked at construction");
                    blocked::Cycle::new(self.n, b, block, self.seed, cycle).fill(base, chunk);
                } else if self.feistel.rounds == 8 {
                    self.fill_cycle_positions::<8>(cycle, base, chunk);
                } else {
                    self.fill_cycle_positions::<24>(cycle, base, chunk);
                }
                pos += take as u128;
                rest = tail;
            }
            return;
        }
        by_batches(self.batch_size, start, out, |step, batch| {
            self.fill_at(step, batch)
        });
    }

    fn fill_sequential(&self, step: u64, out: &mut [u64]) {
        let n = self.n;
        let start = u128::from(step) * self.batch_size as u128 % u128::from(n);
        let mut idx = start as u64;
        for slot in out.iter_mut() {
            *slot = idx;
            idx += 1;
            if idx == n {
                idx = 0;
            }
        }
    }

    fn fill_iid(&self, step: u64, out: &mut [u64]) {
        self.draw_iid(step, out, |_| true);
    }

    /// IID batch `step`'s draws into `out`, each uniform in `0..n`
    /// (Lemire's multiply-shift, rejecting the biased low products), those
    /// for which `keep` is false drawn again (an edited plan's exclusions).
    fn draw_iid(&self, step: u64, out: &mut [u64], keep: impl Fn(u64) -> bool) {
        let n = u128::from(self.n);
        let threshold = self.lemire_threshold;
        let mut ctr = stream_key(DOMAIN_IID, self.seed, step);
        // Branch-free rejection: always store the candidate, advance only
        // when it is accepted (a rejected candidate is overwritten by the
        // next draw). Avoids mispredictions when rejections are frequent.
        let mut j = 0;
        while j < out.len() {
            ctr = ctr.wrapping_add(GOLDEN_GAMMA);
            let m = u128::from(mix64(ctr)) * n;
            let r = (m >> 64) as u64;
            out[j] = r;
            j += usize::from(m as u64 >= threshold && keep(r));
        }
    }

    fn fill_blocked(&self, step: u64, out: &mut [u64]) {
        let per_cycle = self.batches_per_cycle;
        let batch = self.batch_size as u64;
        let block = self.block_size.expect("checked at construction");
        let cycle = blocked::Cycle::new(self.n, batch, block, self.seed, step / per_cycle);
        cycle.fill((step % per_cycle) * batch, out);
    }

    fn fill_cyclic(&self, step: u64, out: &mut [u64]) {
        match self.feistel.rounds {
            8 => self.fill_cyclic_rounds::<8>(step, out),
            _ => self.fill_cyclic_rounds::<24>(step, out),
        }
    }

    fn fill_cyclic_rounds<const R: usize>(&self, step: u64, out: &mut [u64]) {
        let per_cycle = self.batches_per_cycle;
        // b * B <= n - B, so positions base..base + B are all < n.
        let base = (step % per_cycle) * self.batch_size as u64;
        self.fill_cycle_positions::<R>(step / per_cycle, base, out);
    }

    /// `perm_cycle(base + j)` into `out[j]`; `base + out.len()` must be at
    /// most `n`.
    fn fill_cycle_positions<const R: usize>(&self, cycle: u64, base: u64, out: &mut [u64]) {
        for (slot, p) in out.iter_mut().zip(base..) {
            *slot = p;
        }
        self.permute_positions::<R>(cycle, out);
    }

    /// Replaces each position `p < n` in `out` by `perm_cycle(p)`.
    fn permute_positions<const R: usize>(&self, cycle: u64, out: &mut [u64]) {
        let n = self.n;
        let keys = cycle_keys::<R>(self.seed, cycle);
        let f = self.feistel;

        // Pass 1: one branch-free Feistel evaluation per position, LANES
        // positions at a time so their rounds overlap.
        let mut chunks = out.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            let lanes: &mut [u64; LANES] = chunk.try_into().expect("chunk of LANES");
            f.encrypt_lanes(&keys, lanes);
        }
        for slot in chunks.into_remainder().iter_mut() {
            *slot = f.encrypt(&keys, *slot);
        }
        if f.size() == n {
            return; // the domain is exactly 0..n: nothing to walk
        }

        // Pass 2: cycle-walk the values that fell outside 0..n, again LANES
        // at a time through a small work queue (branch-free enqueue).
        let mut ids = [0usize; LANES];
        let mut vals = [0u64; LANES];
        let mut pending = 0;
        for i in 0..out.len() {
            let v = out[i];
            ids[pending] = i;
            vals[pending] = v;
            pending += usize::from(v >= n);
            while pending == LANES {
                f.encrypt_lanes(&keys, &mut vals);
                pending = retire_lanes(n, out, &mut ids, &mut vals, LANES);
            }
        }
        while pending > 0 {
            // Lanes >= pending hold stale in-domain values: harmless.
            f.encrypt_lanes(&keys, &mut vals);
            pending = retire_lanes(n, out, &mut ids, &mut vals, pending);
        }
    }
}

pub mod blocked;
pub mod edit;
pub mod mixture;
#[cfg(test)]
mod tests;
pub mod weighted;
