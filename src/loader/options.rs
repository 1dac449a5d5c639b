//! A loader's options: the batch, the sampler's settings, the subset, the
//! output, and the exclusions of a run's plan.

use crate::error::{Error, Result};
use crate::loader::state::{Event, Pin};
use crate::sampler::Mode;
use crate::store::RecordIndex;

/// Optional subset of records to sample from: step `k`'s positions
/// `Sampler(len(subset), ...).at(k)` are mapped through it. Signed indices
/// are accepted so that a negative one is reported as such.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subset {
    Unsigned(Vec<u64>),
    Signed(Vec<i64>),
}

impl From<Vec<u64>> for Subset {
    fn from(v: Vec<u64>) -> Self {
        Subset::Unsigned(v)
    }
}

impl From<Vec<i64>> for Subset {
    fn from(v: Vec<i64>) -> Self {
        Subset::Signed(v)
    }
}

impl Subset {
    /// The subset as record indices of streams of length `n`.
    pub(super) fn into_records(self, n: u64) -> Result<Vec<u64>> {
        fn check<I: RecordIndex>(v: &[I], n: u64) -> Result<()> {
            if v.is_empty() {
                return Err(Error::InvalidValue("indices must not be empty".into()));
            }
            let (lo, hi) = v.iter().fold((i128::MAX, i128::MIN), |(lo, hi), &i| {
                (lo.min(i.as_i128()), hi.max(i.as_i128()))
            });
            if lo < 0 || hi >= n as i128 {
                let bad = if lo < 0 { lo } else { hi };
                return Err(Error::InvalidIndex(format!(
                    "indices holds {bad}, out of range for streams of length {n}"
                )));
            }
            Ok(())
        }
        match self {
            Subset::Unsigned(v) => check(&v, n).map(|()| v),
            Subset::Signed(v) => {
                check(&v, n)?;
                Ok(v.into_iter().map(|i| i as u64).collect())
            }
        }
    }
}

/// What a batch's columns hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// [`BatchColumn::Dense`] and [`BatchColumn::Ragged`], by store kind.
    #[default]
    Arrays,
    /// [`BatchColumn::Arrow`]: each stream gathered straight into Arrow buffers
    /// (typed as docs/guide/arrow.md maps stores to Arrow), its field named
    /// after the stream.
    #[cfg(feature = "arrow")]
    Arrow,
}

/// How a [`DataLoader`] samples, shards and prefetches.
#[derive(Clone, Debug)]
pub struct Options {
    /// Records per batch on this rank (≥ 1).
    pub batch_size: usize,
    pub mode: Mode,
    pub seed: u64,
    /// Records per block, for [`Mode::Blocked`] only.
    pub block_size: Option<u64>,
    /// One weight per record of the index space (the subset when
    /// `indices` is given), for [`Mode::Weighted`] only.
    pub weights: Option<std::sync::Arc<crate::sampler::weighted::AliasTable>>,
    /// The first step produced: `k` resumes a run after `k` batches.
    pub start_step: u64,
    /// Sample from these records only.
    pub indices: Option<Subset>,
    /// Steps gathered ahead of the consumer (≥ 1).
    pub prefetch: usize,
    /// Producer threads (≥ 1); each gather itself fans out over the store
    /// worker pool.
    pub producers: usize,
    /// This rank (`0..world_size`) of `world_size` data-parallel ranks, which
    /// all draw the same global batch of `batch_size * world_size`.
    pub rank: usize,
    pub world_size: usize,
    pub output: Output,
    /// The plan's edits, in step order (exclusions: records never drawn
    /// again from a step on, see [`crate::sampler::edit`], at any step;
    /// skips: steps stepped past, ending by `start_step`), replayed
    /// exactly; [`DataLoader::state`] lists them.
    pub events: Vec<Event>,
    /// Per stream set (one for streams, one per source of a mixture),
    /// where its table was read; kept in [`DataLoader::state`] and
    /// compared by [`DataLoader::load_state`]. None: not tables.
    pub pins: Option<Vec<Option<Pin>>>,
    /// Columns of encoded images decoded on the producer threads (see
    /// [`crate::image`]): each named stream (a binary column) becomes a
    /// dense `u8` column of `(B, 3, H, W)` (or `(B, H, W, 3)`) images, each
    /// cropped and flipped as its record's seed (`record_seed(seed, step,
    /// record)`) draws. With [`crate::image::OnError::Zeros`] the batch
    /// also holds a bool column `<name>_ok`, after every stream.
    #[cfg(feature = "image")]
    pub decode: Vec<(String, crate::image::Image)>,
}

/// Records excluded from `step` on: record ids of the streams (of source
/// `source` of a mixture, by its position); what an [`Event::Exclude`]
/// becomes once its source is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exclusion {
    pub step: u64,
    pub source: Option<usize>,
    pub records: Vec<u64>,
}

impl Exclusion {
    /// The exclusions of `events` (checked: in step order, a skip ending
    /// by `start`, an exclusion at any step; each exclusion naming a source of
    /// the mixture `names` by name, or none when the loader is not a
    /// mixture), their records sorted and distinct; an exclusion of no
    /// record is dropped.
    pub(crate) fn of_events(
        events: &[Event],
        names: Option<&[String]>,
        start: u64,
    ) -> Result<Vec<Exclusion>> {
        let mut out = Vec::new();
        let mut last = 0u64;
        for event in events {
            let step = event.step();
            let future_skip = matches!(event, Event::Skip { .. }) && step > start;
            if step < last || future_skip {
                return Err(Error::InvalidValue(format!(
                    "events come in step order: an event at step {step} after step {last} \
                     (a skip ends by the loader's step {start})"
                )));
            }
            match event {
                Event::Skip { n, .. } => {
                    last = step.checked_add(*n).filter(|&end| end <= start).ok_or_else(|| {
                        Error::InvalidValue(format!(
                            "a skip of {n} steps from step {step} goes past the loader's step {start}"
                        ))
                    })?;
                }
                Event::Exclude {
                    records, source, ..
                } => {
                    last = step;
                    let source = match (names, source) {
                        (None, None) => None,
                        (None, Some(s)) => {
                            return Err(Error::InvalidValue(format!(
                                "source applies to a loader over a Mix, got source={}",
                                crate::repr::py_str(s)
                            )))
                        }
                        (Some(names), s) => {
                            let found =
                                s.as_deref().and_then(|s| names.iter().position(|n| n == s));
                            Some(found.ok_or_else(|| {
                                Error::InvalidValue(format!(
                                    "source must name a source of the Mix ({}), got {}",
                                    crate::repr::py_list(names),
                                    s.as_deref().map_or("None".into(), crate::repr::py_str)
                                ))
                            })?)
                        }
                    };
                    let mut records = records.clone();
                    records.sort_unstable();
                    records.dedup();
                    if !records.is_empty() {
                        out.push(Exclusion {
                            step,
                            source,
                            records,
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    /// Checks that each record of `exclusions` (in step order already,
    /// from [`Exclusion::of_events`]) is a record of the stream it names.
    /// `stream(source)` gives that stream's length and how a message names
    /// it ("the streams (n records)", "source 'a' (n records)"), or the
    /// error of a source it cannot name.
    pub(crate) fn check_all(
        exclusions: &[Exclusion],
        stream: impl Fn(Option<usize>) -> Result<(u64, String)>,
    ) -> Result<()> {
        for ex in exclusions {
            let (n, what) = stream(ex.source)?;
            if let Some(&bad) = ex.records.iter().find(|&&r| r >= n) {
                return Err(Error::InvalidValue(format!(
                    "record_ids holds {bad}, not a record of {what}: ids are 0..{}",
                    n.saturating_sub(1)
                )));
            }
        }
        Ok(())
    }
}

impl Default for Options {
    /// The Python `DataLoader`'s defaults: batches of 256, cyclic, seed 0,
    /// from step 0, 4 steps ahead on 2 producers, one rank.
    fn default() -> Self {
        Options {
            batch_size: 256,
            mode: Mode::Cyclic,
            seed: 0,
            block_size: None,
            weights: None,
            start_step: 0,
            indices: None,
            prefetch: 4,
            producers: 2,
            rank: 0,
            world_size: 1,
            output: Output::Arrays,
            events: Vec::new(),
            pins: None,
            #[cfg(feature = "image")]
            decode: Vec::new(),
        }
    }
}
