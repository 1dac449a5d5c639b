//! Everything about the dictionaries of the `zstd_dict` codec: the tiers,
//! choosing which records to sample, training, and loading (and validating) a dictionary
//! for use.
//!
//! A tier fixes the dictionary size and the training byte budget; the sample
//! is a strided subset of the records, so each tier costs about the same
//! training time whatever the record size.

use std::sync::OnceLock;

use zstd::zstd_safe::{CDict, DDict};

use crate::error::{Error, Result};

/// zstd level of the `zstd_dict` codec (the dictionary's compression side
/// is prepared at this level).
pub const ZSTD_DICT_LEVEL: i32 = 19;

/// A trained zstd dictionary, prepared once for both directions.
pub struct Dictionary {
    bytes: Vec<u8>,
    ddict: DDict<'static>,
    /// Preparing a level-19 compression dictionary is costly and only
    /// writers need it, so it is built on first use.
    /// `None` when zstd cannot load the dictionary for compression.
    cdict: OnceLock<Option<CDict<'static>>>,
}

impl Dictionary {
    /// Prepares `bytes` for decompression; fails (instead of panicking) when
    /// zstd cannot load them, e.g. a dictionary header whose entropy tables
    /// do not parse.
    pub fn new(bytes: Vec<u8>) -> Result<Dictionary, String> {
        let ddict = DDict::try_create(&bytes).ok_or_else(|| {
            format!(
                "zstd cannot load the {}-byte dictionary (its header or entropy tables do not parse)",
                bytes.len()
            )
        })?;
        Ok(Dictionary {
            bytes,
            ddict,
            cdict: OnceLock::new(),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub(crate) fn ddict(&self) -> &DDict<'static> {
        &self.ddict
    }

    pub(crate) fn cdict(&self) -> Option<&CDict<'static>> {
        self.cdict
            .get_or_init(|| CDict::try_create(&self.bytes, ZSTD_DICT_LEVEL))
            .as_ref()
    }
}

/// A named preset: dictionary size and how many sample bytes train it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DictTier {
    pub name: &'static str,
    /// Upper bound of the dictionary size in bytes.
    pub dict_size: usize,
    /// Upper bound of the training sample in bytes.
    pub sample_bytes: usize,
}

/// The three tiers, from the smallest dictionary (fastest gather) to the
/// largest (best ratio on small records).
pub const DICT_TIERS: [DictTier; 3] = [
    DictTier {
        name: "fast",
        dict_size: 32 << 10,
        sample_bytes: 4 << 20,
    },
    DictTier {
        name: "balanced",
        dict_size: 112 << 10,
        sample_bytes: 16 << 20,
    },
    DictTier {
        name: "max",
        dict_size: 256 << 10,
        sample_bytes: 64 << 20,
    },
];

/// zstd refuses to train on fewer samples than this.
pub const MIN_SAMPLES: usize = 8;
/// Nor on a sample smaller than this many bytes.
pub const MIN_SAMPLE_BYTES: usize = 1024;

pub fn tier(name: &str) -> Result<DictTier> {
    DICT_TIERS
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| {
            Error::InvalidValue(format!(
                "tier must be one of 'fast', 'balanced', 'max', got '{name}'"
            ))
        })
}

/// Picks which of `count` records of `sizes(i)` bytes to sample: an even
/// stride over the records, stopping at the tier's byte budget.
pub fn sample_plan(count: usize, size_of: impl Fn(usize) -> usize, budget: usize) -> Vec<usize> {
    if count == 0 {
        return Vec::new();
    }
    let total: usize = (0..count)
        .map(&size_of)
        .fold(0usize, |a, b| a.saturating_add(b));
    // Stride so the strided subset fits the budget (at least every record
    // when all of them fit).
    let stride = total.div_ceil(budget.max(1)).max(1);
    let mut picked = Vec::new();
    let mut bytes = 0usize;
    let mut i = 0;
    while i < count {
        let s = size_of(i);
        if bytes + s > budget && !picked.is_empty() {
            break;
        }
        picked.push(i);
        bytes += s;
        i += stride;
    }
    picked
}

/// Trains a dictionary on the concatenated `samples` (each record's bytes
/// back to back, `sizes` giving each record's length).
///
/// The dictionary is at most the tier's size and at most a tenth of the
/// sample bytes.
pub fn train(samples: &[u8], sizes: &[usize], tier: DictTier) -> Result<Vec<u8>> {
    let total: usize = sizes.iter().sum();
    if total != samples.len() {
        return Err(Error::InvalidValue(format!(
            "sample sizes add up to {total} bytes but {} were given",
            samples.len()
        )));
    }
    if sizes.len() < MIN_SAMPLES || total < MIN_SAMPLE_BYTES {
        return Err(Error::Refused {
            refusal: crate::error::Refusal::DictionaryTooSmall,
            message: format!(
                "training a dictionary needs at least {MIN_SAMPLES} records and {MIN_SAMPLE_BYTES} bytes of sample, got {} records and {total} bytes",
                sizes.len()
            ),
        });
    }
    let size = tier.dict_size.min(total / 10).max(256);
    zstd::dict::from_continuous(samples, sizes, size).map_err(|e| {
        Error::InvalidValue(format!(
            "zstd could not train a dictionary on {} records ({total} bytes): {e}; \
             give more or more varied records",
            sizes.len()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_samples_are_a_typed_refusal() {
        let err = train(&[1, 2, 3], &[1, 2], DICT_TIERS[0]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Refused {
                    refusal: crate::error::Refusal::DictionaryTooSmall,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err
            .to_string()
            .starts_with("training a dictionary needs at least 8 records"));
    }

    #[test]
    fn plan_respects_budget_and_stride() {
        let plan = sample_plan(1000, |_| 100, 10_000);
        assert!(plan.len() <= 100);
        assert!(plan.windows(2).all(|w| w[1] - w[0] == 10));
        let all = sample_plan(10, |_| 100, 1 << 20);
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(sample_plan(0, |_| 1, 10).is_empty());
    }

    #[test]
    fn trains_within_tier_and_sample_limits() {
        let mut samples = Vec::new();
        let mut sizes = Vec::new();
        for i in 0..2000u32 {
            let rec: Vec<u8> = (0..200u32)
                .map(|j| ((i * 7 + j * j) % 61) as u8 + if j % 3 == 0 { 100 } else { 0 })
                .collect();
            sizes.push(rec.len());
            samples.extend_from_slice(&rec);
        }
        let d = train(&samples, &sizes, tier("fast").unwrap()).unwrap();
        assert!(d.len() <= 32 << 10);
        assert!(d.len() <= samples.len() / 10);
        assert!(train(&samples[..100], &[100], tier("max").unwrap()).is_err());
        assert!(tier("huge").is_err());
    }
}
