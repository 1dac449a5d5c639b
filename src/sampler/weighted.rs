//! The `"weighted"` mode: i.i.d. draws over `0..n`, record `i` with
//! probability `w_i / sum(w)`, by Walker's alias method (Vose's stable
//! construction).
//!
//! The table is built once, from the weights in order, in `f64`: column
//! `i` keeps record `i` with probability `keep_i` and otherwise gives its
//! alias `alias_i`. `keep_i` is stored as a 64-bit threshold
//! (`keep_i * 2^64`, saturated), so a draw is integer arithmetic only:
//! with the batch key `key = mix64(mix64(seed ^ D_WEIGHTED) + step * G)`
//! and `x_j = mix64(key + (j + 1) * G)`, `y_j = mix64(x_j ^ C)`, element
//! `j` of the batch is column `c = high64(x_j * n)` kept when
//! `y_j < threshold_c`, else `alias_c`. `c` is Lemire's multiply-shift
//! without rejection: its bias is below `n / 2^64`. The same weights, seed
//! and step give the same batch on every machine (IEEE arithmetic in a
//! fixed order).

use std::fmt;

use super::{mix64, stream_key, GOLDEN_GAMMA};

/// Domain separation for weighted batch keys.
const DOMAIN_WEIGHTED: u64 = 0x7765_6967_6874_6564; // "weighted"
/// Decorrelates the keep-or-alias draw from the column draw.
const COIN: u64 = 0xD6E8_FEB8_6659_FD93;

/// What is wrong with a weight vector.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightsError {
    /// `weights` has `got` entries for an index space of `n`.
    Length { n: u64, got: usize },
    /// Entry `at` is negative, NaN or infinite.
    Value { at: usize, value: f64 },
    /// Every weight is zero (or their sum is not finite).
    Sum { sum: f64 },
}

// The sampler's errors compare with `==` in tests; a NaN weight is only
// ever reported, never compared.
impl Eq for WeightsError {}

impl fmt::Display for WeightsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightsError::Length { n, got } => write!(
                f,
                "weights must hold one weight per record ({n}), got {got}"
            ),
            WeightsError::Value { at, value } => write!(
                f,
                "weights must be finite and >= 0, got {value} at position {at}"
            ),
            WeightsError::Sum { sum } => {
                write!(f, "weights must have a positive, finite sum, got {sum}")
            }
        }
    }
}

/// Walker's alias table over `0..n`.
#[derive(Clone)]
pub struct AliasTable {
    threshold: Vec<u64>,
    alias: Vec<u64>,
}

impl fmt::Debug for AliasTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AliasTable(n={})", self.threshold.len())
    }
}

impl AliasTable {
    /// The table for `weights` (one per record, finite, `>= 0`, with a
    /// positive sum).
    pub fn new(weights: &[f64]) -> Result<AliasTable, WeightsError> {
        let n = weights.len();
        let mut sum = 0.0f64;
        for (at, &value) in weights.iter().enumerate() {
            if !(value.is_finite() && value >= 0.0) {
                return Err(WeightsError::Value { at, value });
            }
            sum += value;
        }
        if !(sum.is_finite() && sum > 0.0) {
            return Err(WeightsError::Sum { sum });
        }
        // Vose: scale to mean 1, then pair each small column with a large one.
        let scale = n as f64 / sum;
        let mut p: Vec<f64> = weights.iter().map(|w| w * scale).collect();
        let mut alias: Vec<u64> = (0..n as u64).collect();
        let mut small: Vec<usize> = Vec::new();
        let mut large: Vec<usize> = Vec::new();
        for (i, &q) in p.iter().enumerate() {
            if q < 1.0 {
                small.push(i);
            } else {
                large.push(i);
            }
        }
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s] = l as u64;
            p[l] = (p[l] + p[s]) - 1.0;
            if p[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // What is left is 1 up to rounding: always kept.
        for i in small.into_iter().chain(large) {
            p[i] = 1.0;
        }
        let threshold = p
            .iter()
            .map(|&q| {
                if q >= 1.0 {
                    u64::MAX
                } else {
                    // q in [0, 1): q * 2^64 fits below 2^64.
                    (q * 18_446_744_073_709_551_616.0) as u64
                }
            })
            .collect();
        Ok(AliasTable { threshold, alias })
    }

    pub fn len(&self) -> usize {
        self.threshold.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threshold.is_empty()
    }

    /// Batch `step` of `out.len()` draws.
    pub(super) fn fill(&self, seed: u64, step: u64, out: &mut [u64]) {
        let mut ctr = stream_key(DOMAIN_WEIGHTED, seed, step);
        for slot in out.iter_mut() {
            ctr = ctr.wrapping_add(GOLDEN_GAMMA);
            *slot = self.draw(mix64(ctr));
        }
    }

    /// The record that draw value `x` picks.
    #[inline(always)]
    fn draw(&self, x: u64) -> u64 {
        let n = self.threshold.len() as u128;
        let c = ((u128::from(x) * n) >> 64) as usize;
        let y = mix64(x ^ COIN);
        if y < self.threshold[c] || self.threshold[c] == u64::MAX {
            c as u64
        } else {
            self.alias[c]
        }
    }

    /// [`AliasTable::fill`] with the records that `excluded` holds drawn
    /// again: a rejected draw is followed by the next counter value, so the
    /// records left are drawn in proportion to their weights. Some record
    /// outside `excluded` must have a positive weight
    /// ([`AliasTable::drawable`]).
    pub(super) fn fill_without(
        &self,
        seed: u64,
        step: u64,
        out: &mut [u64],
        excluded: impl Fn(u64) -> bool,
    ) {
        let mut ctr = stream_key(DOMAIN_WEIGHTED, seed, step);
        for slot in out.iter_mut() {
            loop {
                ctr = ctr.wrapping_add(GOLDEN_GAMMA);
                let r = self.draw(mix64(ctr));
                if !excluded(r) {
                    *slot = r;
                    break;
                }
            }
        }
    }

    /// Whether record `i` can be drawn (its weight is positive), per record.
    pub(super) fn drawable(&self) -> Vec<bool> {
        let mut out: Vec<bool> = self.threshold.iter().map(|&t| t > 0).collect();
        for (&t, &a) in self.threshold.iter().zip(&self.alias) {
            if t < u64::MAX {
                out[a as usize] = true;
            }
        }
        out
    }
}
