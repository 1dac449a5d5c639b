//! The loader: an endless, step-ordered stream of batches over aligned stores.
//!
//! A [`DataLoader`] reads a set of named, equal-length streams. Step `k` is
//! planned as the Python `loaderx.DataLoader` documents it
//! (docs/guide/loader.md, "DataLoader"):
//!
//! 1. the [`Sampler`] draws the global batch `Sampler(space, B * world_size,
//!    mode, seed).at(k)`, where `space` is the subset's length, or the
//!    streams' length when there is no subset (with the plan's
//!    exclusions ([`Event::Exclude`]), through the edited stream of [`crate::sampler::edit`]:
//!    from its step on, an excluded record is never drawn);
//! 2. each position is mapped through the subset, when there is one;
//! 3. this rank keeps slice `rank` of `world_size` equal, consecutive slices
//!    (so the ranks' slices are disjoint and together make the global batch);
//! 4. every stream is gathered at those same indices, so record `i` lines up
//!    across streams.
//!
//! Producer threads run the plan ahead of the consumer on a `Prefetcher`
//! (at most `prefetch` steps ahead, so memory is bounded by what is in
//! flight), and [`DataLoader::next`] hands batches over strictly in step
//! order whatever the thread timing. Every batch is a pure function of the
//! options and its step, so a loader started at `start_step = k` yields
//! exactly the batches `k, k+1, ...` of a run that never stopped.
//!
//! A run's state ([`LoaderState`], see `state`) is the step, the sampler's
//! settings, a mixture's weights, where the sources were read and the
//! plan's edits ([`DataLoader::exclude`], [`DataLoader::skip`]):
//! [`DataLoader::state`] saves it, [`DataLoader::load_state`] and
//! [`DataLoader::from_state`] continue from it bit-exactly. An edit
//! rebuilds the plan over the same streams ([`DataLoader::edited`]).
//!
//! An endless loader reads every page of a store sooner or later, so its
//! gathers run under [`store::streaming`]: large records are read with
//! positional reads and leave no pages mapped in the process.
//!
//! A *mixture* ([`DataLoader::mixture`], see `mix`) draws each global batch
//! from several sources of the same columns, each source's share set by
//! weights (fixed, or a schedule pushed step by step); its batches carry
//! each row's source.
//!
//! Fork: a `fork()`ed child inherits the loader but none of its producer
//! threads. There [`DataLoader::next`] fails with [`Error::InvalidState`],
//! and closing or dropping the loader leaks the pipeline instead of joining
//! threads that do not exist in the child.

#[cfg(feature = "image")]
mod decode;
mod mix;
mod prefetch;
pub mod state;

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::loader::mix::MixDraw;
pub use crate::loader::mix::{MixSource, MixWeights};
use crate::loader::prefetch::Prefetcher;
pub use crate::loader::state::{Event, LoaderState, Pin};
use crate::read::buffer::Buffer;
use crate::read::ragged::RaggedBatch;
use crate::read::records::{Records, StoreAccess};
use crate::repr::{py_list, py_str};
use crate::sampler::edit::Edited;
use crate::sampler::{Mode, Sampler};
use crate::schema::Kind;
use crate::store::{self, RecordIndex};

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
    fn into_records(self, n: u64) -> Result<Vec<u64>> {
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

/// The rows of a range of steps, as [`DataLoader::provenance`] lists them:
/// one entry per row, in step order, then rank, then row.
#[derive(Debug, Default)]
pub struct Provenance {
    pub steps: Vec<u64>,
    pub ranks: Vec<u32>,
    pub rows: Vec<u32>,
    pub records: Vec<u64>,
    /// A mixture's: each row's source.
    pub sources: Option<Vec<u16>>,
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

/// One stream of a batch.
#[derive(Debug)]
pub enum BatchColumn {
    /// A dense store's records, back to back (`batch_size` records).
    Dense(Buffer),
    /// A ragged store's records.
    Ragged(RaggedBatch),
    /// The column as Arrow data ([`Output::Arrow`]), with its field.
    #[cfg(feature = "arrow")]
    Arrow(arrow_schema::Field, arrow_array::ArrayRef),
}

/// One step's batch: every stream gathered at the same indices.
#[derive(Debug)]
pub struct Batch {
    pub step: u64,
    /// The records gathered (after the subset mapping and the rank slice).
    pub indices: Vec<u64>,
    /// One column per stream, in stream order.
    pub columns: Vec<BatchColumn>,
    /// Per stream, with array output: the validity of a nullable column at
    /// `indices` (one byte per record, 0 for null), else None. Arrow output
    /// carries nulls in the arrays themselves.
    pub validity: Vec<Option<Buffer>>,
    /// A mixture's batch: each row's source (its position among the
    /// sources); `indices` are then records within each row's source.
    pub sources: Option<Vec<u16>>,
    /// Columns placed after the streams': a decoded column's `<name>_ok`
    /// (one bool byte per row) with [`crate::image::OnError::Zeros`].
    pub extra: Vec<(String, BatchColumn)>,
}

/// Everything a producer needs; shared by every producer thread.
struct Plan<S> {
    streams: Vec<(String, S)>,
    /// The sampler's stream with the plan's exclusions.
    sampler: Edited,
    rank: usize,
    world: usize,
    local_batch: usize,
    /// The subset the sampler's positions map through.
    indices: Option<Vec<u64>>,
    output: Output,
    /// A mixture's sources and planner (then `streams` is empty and
    /// `sampler` is its first source's record sampler).
    mix: Option<MixDraw<S>>,
    /// Per stream, how its encoded images are decoded (None: gathered as
    /// they are).
    #[cfg(feature = "image")]
    decode: Vec<Option<crate::image::Image>>,
    /// The seed of the records' seeds.
    #[cfg(feature = "image")]
    seed: u64,
}

impl<S: StoreAccess> Plan<S> {
    /// The streams of a batch's columns (a mixture's first source's: every
    /// source's columns look the same).
    fn streams(&self) -> &[(String, S)] {
        match &self.mix {
            Some(mix) => mix.template().0,
            None => &self.streams,
        }
    }

    /// The rows of `step`: records, and each row's source for a mixture.
    /// A scheduled mixture's step waits for its weights when `wait`.
    fn rows_at(&self, step: u64, wait: bool) -> Result<(Vec<u64>, Option<Vec<u16>>)> {
        match &self.mix {
            Some(mix) => {
                let rows = mix.rows(step, self.rank, self.local_batch, wait)?;
                Ok((rows.indices, Some(rows.sources)))
            }
            None => Ok((self.indices_at(step), None)),
        }
    }

    fn indices_at(&self, step: u64) -> Vec<u64> {
        let mut global = vec![0u64; self.sampler.base().batch_size()];
        self.sampler.fill_at(step, &mut global);
        let local = &global[self.rank * self.local_batch..(self.rank + 1) * self.local_batch];
        match &self.indices {
            Some(map) => local.iter().map(|&p| map[p as usize]).collect(),
            None => local.to_vec(),
        }
    }

    /// The global batches of `steps` (records, after the subset mapping)
    /// into `out`, `steps.len()` batches end to end.
    fn global_batches(&self, steps: &[u64], out: &mut [u64]) {
        use rayon::prelude::*;
        let b = self.sampler.base().batch_size();
        // Chunks of steps large enough to amortize a task.
        let per_task = (1 << 16) / b.max(1) + 1;
        out.par_chunks_mut(per_task * b)
            .zip(steps.par_chunks(per_task))
            .for_each(|(chunk, steps)| {
                for (batch, &step) in chunk.chunks_exact_mut(b).zip(steps) {
                    self.sampler.fill_at(step, batch);
                    if let Some(map) = &self.indices {
                        for slot in batch.iter_mut() {
                            *slot = map[*slot as usize];
                        }
                    }
                }
            });
    }

    fn produce(&self, step: u64) -> Result<Batch> {
        if let Some(mix) = &self.mix {
            let rows = mix.rows(step, self.rank, self.local_batch, true)?;
            let (columns, validity, extra) =
                store::streaming(|| self.gather_mixed(mix, step, &rows))?;
            return Ok(Batch {
                step,
                indices: rows.indices,
                columns,
                validity,
                sources: Some(rows.sources),
                extra,
            });
        }
        let indices = self.indices_at(step);
        // Large records bypass the mapping (see `store::streaming`).
        let (columns, validity, extra) = store::streaming(|| self.gather(step, &indices))?;
        Ok(Batch {
            step,
            indices,
            columns,
            validity,
            sources: None,
            extra,
        })
    }

    /// A mixture's batch of `rows`: every column, one gather per source and
    /// column, decoded columns decoded.
    #[allow(clippy::type_complexity)]
    fn gather_mixed(
        &self,
        mix: &MixDraw<S>,
        #[cfg_attr(not(feature = "image"), allow(unused_variables))] step: u64,
        rows: &mix::Rows,
    ) -> Result<(
        Vec<BatchColumn>,
        Vec<Option<Buffer>>,
        Vec<(String, BatchColumn)>,
    )> {
        let names = mix.template().0;
        let mut columns = Vec::with_capacity(names.len());
        let mut validity = Vec::with_capacity(names.len());
        #[cfg_attr(not(feature = "image"), allow(unused_mut))]
        let mut extra = Vec::new();
        for (c, (_name, _)) in names.iter().enumerate() {
            #[cfg(feature = "image")]
            if let Some(image) = &self.decode[c] {
                let (col, ok) = mix.decode_column(c, rows, image, self.seed, step, self.output)?;
                columns.push(col);
                validity.push(None);
                if let Some(ok) = ok {
                    extra.push((format!("{_name}_ok"), ok));
                }
                continue;
            }
            let (col, valid) = mix.gather_column(c, rows, self.output)?;
            columns.push(col);
            validity.push(valid);
        }
        Ok((columns, validity, extra))
    }

    #[allow(clippy::type_complexity)]
    fn gather(
        &self,
        #[cfg_attr(not(feature = "image"), allow(unused_variables))] step: u64,
        idx: &[u64],
    ) -> Result<(
        Vec<BatchColumn>,
        Vec<Option<Buffer>>,
        Vec<(String, BatchColumn)>,
    )> {
        let mut columns = Vec::with_capacity(self.streams.len());
        let mut validity = Vec::with_capacity(self.streams.len());
        #[cfg_attr(not(feature = "image"), allow(unused_mut))]
        let mut extra = Vec::new();
        for (_i, (name, s)) in self.streams.iter().enumerate() {
            #[cfg(feature = "image")]
            if let Some(image) = &self.decode[_i] {
                let (c, ok) = s.with(|e| self.decoded(e, name, image, step, idx))?;
                columns.push(c);
                validity.push(None);
                if let Some(ok) = ok {
                    extra.push((format!("{name}_ok"), ok));
                }
                continue;
            }
            let (c, v) = s.with(|e| {
                let c = self.column(e, name, idx)?;
                let v = match (self.output, e.validity()) {
                    (Output::Arrays, Some(v)) => Some(v.gather_dense(idx)?),
                    _ => None,
                };
                Ok((c, v))
            })?;
            columns.push(c);
            validity.push(v);
        }
        Ok((columns, validity, extra))
    }

    /// The images of `store` (a binary column `name`) at `idx`, decoded as
    /// `image` says with the records' seeds of `step`: the images' column
    /// and, with [`crate::image::OnError::Zeros`], the `ok` column.
    #[cfg(feature = "image")]
    fn decoded(
        &self,
        store: &dyn Records,
        name: &str,
        image: &crate::image::Image,
        step: u64,
        idx: &[u64],
    ) -> Result<(BatchColumn, Option<BatchColumn>)> {
        let mut out = Buffer::new(idx.len() * image.image_len());
        let mut ok = vec![false; idx.len()];
        decode::decode_part(
            store,
            image,
            self.seed,
            step,
            idx,
            out.as_mut_slice(),
            &mut ok,
        )?;
        decode::image_columns(self.output, name, image, out, ok)
    }

    #[cfg_attr(not(feature = "arrow"), allow(unused_variables))]
    fn column(&self, store: &dyn Records, name: &str, idx: &[u64]) -> Result<BatchColumn> {
        match (self.output, store.kind()) {
            #[cfg(feature = "arrow")]
            (Output::Arrow, _) => Ok(BatchColumn::Arrow(
                crate::arrow::field_of(store, name),
                crate::arrow::gather_array(store, idx)?,
            )),
            (Output::Arrays, Kind::Dense) => store.gather_dense(idx).map(BatchColumn::Dense),
            (Output::Arrays, Kind::Ragged) => store.gather_ragged(idx).map(BatchColumn::Ragged),
        }
    }
}

struct State {
    prefetcher: Option<Arc<Prefetcher<Result<Batch>>>>,
    /// Next step handed to the caller.
    step: u64,
    closed: bool,
}

/// An endless loader over named, equal-length streams (see the module
/// documentation).
///
/// All methods take `&self`: one thread may block in [`DataLoader::next`]
/// while another calls [`DataLoader::close`], which wakes it.
pub struct DataLoader<S: StoreAccess + 'static> {
    plan: Arc<Plan<S>>,
    /// What the loader was built from, to rebuild it and to state it.
    recipe: Recipe,
    /// The process that created the loader (and its threads).
    pid: u32,
    state: Mutex<State>,
}

/// What a loader was built from besides its streams: its options (without
/// the subset, which the plan keeps, and the edits), a mixture's weights,
/// the plan's edits and where its sources were read.
struct Recipe {
    options: Options,
    /// A mixture's source names and weights.
    mix: Option<(Vec<String>, MixWeights)>,
    events: Vec<Event>,
    pins: Option<Vec<Option<Pin>>>,
}

impl Recipe {
    /// The recipe of `options`, with its subset and edits taken out.
    fn take(options: &mut Options, mix: Option<(Vec<String>, MixWeights)>) -> Recipe {
        let events = std::mem::take(&mut options.events);
        let pins = options
            .pins
            .take()
            .filter(|p| p.iter().any(Option::is_some));
        let indices = options.indices.take();
        let recipe = Recipe {
            options: options.clone(),
            mix,
            events,
            pins,
        };
        options.indices = indices;
        recipe
    }
}

fn at_least(name: &str, value: usize, lo: usize) -> Result<()> {
    if value < lo {
        return Err(Error::InvalidValue(format!(
            "{name} must be >= {lo}, got {value}"
        )));
    }
    Ok(())
}

impl<S: StoreAccess + 'static> DataLoader<S> {
    /// Validates the streams and options and starts the producers at
    /// `options.start_step`.
    ///
    /// Errors ([`Error::InvalidValue`] unless noted): no streams, streams of
    /// different lengths, empty streams, `batch_size`, `world_size`,
    /// `prefetch` or `producers` below 1, `rank` outside `0..world_size`,
    /// empty `indices`, `indices` outside the streams
    /// ([`Error::InvalidIndex`]), a cyclic global batch larger than the index
    /// space; and whatever reading a stream's length fails with.
    pub fn new(streams: Vec<(String, S)>, mut options: Options) -> Result<DataLoader<S>> {
        let recipe = Recipe::take(&mut options, None);
        let exclusions = Exclusion::of_events(&recipe.events, None, options.start_step)?;
        Ok(Self::start(
            Self::plan(streams, options, exclusions)?,
            recipe,
        ))
    }

    /// A loader over a mixture of `sources`, each with the same columns
    /// (names, order and kinds), weighted by `weights`.
    ///
    /// Step `k`'s global batch of `batch_size * world_size` records takes
    /// each source's count from the mixture rule
    /// ([`crate::sampler::mixture`]); source `i`'s records continue its own
    /// record stream (`Sampler(len_i, 1, mode, source_seed(seed, name_i))`,
    /// with its `weights` for [`Mode::Weighted`]). This rank keeps its slice
    /// of the interleaved global batch, its rows grouped by source in
    /// source order. A batch's `indices` are records within each row's
    /// source, and `sources` the rows' sources.
    ///
    /// With [`MixWeights::Schedule`], each step's weights must be pushed
    /// with [`DataLoader::push_weights`], in order from step 0 (the steps
    /// before `start_step` too): a producer waits for its step's weights.
    ///
    /// Errors ([`Error::InvalidValue`]): no sources, sources whose columns
    /// differ (naming the sources and the column), an empty source, bad
    /// fixed weights (naming the source), `indices` or `weights` in the
    /// options (per-record weights go with each source), a source without
    /// weights in mode weighted; and the checks of [`DataLoader::new`].
    pub fn mixture(
        sources: Vec<MixSource<S>>,
        weights: MixWeights,
        mut options: Options,
    ) -> Result<DataLoader<S>> {
        let names: Vec<String> = sources.iter().map(|s| s.name.clone()).collect();
        let exclusions = Exclusion::of_events(&options.events, Some(&names), options.start_step)?;
        let recipe = Recipe::take(&mut options, Some((names, weights.clone())));
        Ok(Self::start(
            Self::mix_plan(sources, &weights, options, exclusions)?,
            recipe,
        ))
    }

    fn start(plan: Plan<S>, recipe: Recipe) -> DataLoader<S> {
        let o = &recipe.options;
        let (start, prefetch, producers) = (o.start_step, o.prefetch, o.producers);
        let plan = Arc::new(plan);
        let producer_plan = Arc::clone(&plan);
        let prefetcher = Prefetcher::new(start, prefetch, producers, move |step| {
            producer_plan.produce(step)
        });
        DataLoader {
            plan,
            recipe,
            pid: std::process::id(),
            state: Mutex::new(State {
                prefetcher: Some(Arc::new(prefetcher)),
                step: start,
                closed: false,
            }),
        }
    }

    fn check_common(o: &Options) -> Result<usize> {
        at_least("batch_size", o.batch_size, 1)?;
        at_least("prefetch", o.prefetch, 1)?;
        at_least("producers", o.producers, 1)?;
        at_least("world_size", o.world_size, 1)?;
        if o.rank >= o.world_size {
            return Err(Error::InvalidValue(format!(
                "rank must be in 0..{}, got {}",
                o.world_size - 1,
                o.rank
            )));
        }
        o.batch_size
            .checked_mul(o.world_size)
            .ok_or_else(|| Error::InvalidValue("batch_size * world_size overflows".into()))
    }

    fn mix_plan(
        sources: Vec<MixSource<S>>,
        weights: &MixWeights,
        o: Options,
        exclusions: Vec<Exclusion>,
    ) -> Result<Plan<S>> {
        let global = Self::check_common(&o)?;
        if o.indices.is_some() {
            return Err(Error::InvalidValue(
                "indices does not apply to a mixture (sample a subset as a source of its own)"
                    .into(),
            ));
        }
        if o.weights.is_some() {
            return Err(Error::InvalidValue(
                "a mixture takes its per-record weights with each source, not in the options"
                    .into(),
            ));
        }
        let mix = MixDraw::new(
            sources,
            weights,
            global as u64,
            o.mode,
            o.seed,
            o.block_size,
            o.start_step,
            exclusions,
        )?;
        // Every source's column must be decodable (their columns look the
        // same, so the decodings are the first source's).
        #[cfg(feature = "image")]
        let decode = {
            let mut decode = Vec::new();
            for src in mix.sources() {
                decode = decode::decoded_streams(&src.streams, &o.decode)?;
            }
            decode
        };
        let sampler = Edited::new(mix.template().1.clone());
        Ok(Plan {
            streams: Vec::new(),
            sampler,
            rank: o.rank,
            world: o.world_size,
            local_batch: o.batch_size,
            indices: None,
            output: o.output,
            mix: Some(mix),
            #[cfg(feature = "image")]
            decode,
            #[cfg(feature = "image")]
            seed: o.seed,
        })
    }

    fn plan(streams: Vec<(String, S)>, o: Options, exclusions: Vec<Exclusion>) -> Result<Plan<S>> {
        if streams.is_empty() {
            return Err(Error::InvalidValue(
                "streams must hold at least one store".into(),
            ));
        }
        let lengths = streams
            .iter()
            .map(|(_, s)| s.with(|e| Ok(e.len())))
            .collect::<Result<Vec<u64>>>()?;
        if lengths.iter().any(|&l| l != lengths[0]) {
            let detail = streams
                .iter()
                .zip(&lengths)
                .map(|((name, _), l)| format!("{name}={l}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Error::InvalidValue(format!(
                "streams must all have the same length, got {detail}"
            )));
        }
        let n = lengths[0];
        if n == 0 {
            return Err(Error::InvalidValue(
                "streams are empty: nothing to sample".into(),
            ));
        }
        let global = Self::check_common(&o)?;
        let subset = o.indices.map(|s| s.into_records(n)).transpose()?;
        let space = subset.as_ref().map_or(n, |s| s.len() as u64);
        if o.mode.cycles() && global as u64 > space {
            let of = if subset.is_some() {
                "indices"
            } else {
                "stream"
            };
            return Err(Error::InvalidValue(format!(
                "batch_size * world_size ({global}) exceeds the {of} length {space}: \
                 {} sampling draws without replacement",
                o.mode.name()
            )));
        }
        #[cfg(feature = "image")]
        let decode = decode::decoded_streams(&streams, &o.decode)?;
        let sampler = Sampler::with_options(space, global, o.mode, o.seed, o.block_size, o.weights)
            .map_err(|e| Error::InvalidValue(e.to_string()))?;
        let sampler = Self::excluding(sampler, n, subset.as_deref(), exclusions)?;
        Ok(Plan {
            streams,
            sampler,
            rank: o.rank,
            world: o.world_size,
            local_batch: o.batch_size,
            indices: subset,
            output: o.output,
            mix: None,
            #[cfg(feature = "image")]
            decode,
            #[cfg(feature = "image")]
            seed: o.seed,
        })
    }

    /// The sampler's stream with `exclusions` (record ids of streams of
    /// length `n`; through `subset`, the positions that hold them).
    fn excluding(
        sampler: Sampler,
        n: u64,
        subset: Option<&[u64]>,
        exclusions: Vec<Exclusion>,
    ) -> Result<Edited> {
        let global = sampler.batch_size() as u64;
        let mut stream = Edited::new(sampler);
        Exclusion::check_all(&exclusions, |source| match source {
            Some(_) => Err(Error::InvalidValue(
                "an exclusion names a source, but this loader is not a mixture".into(),
            )),
            None => Ok((n, format!("the streams ({n} records)"))),
        })?;
        for ex in exclusions {
            let positions = match subset {
                None => ex.records,
                Some(map) => {
                    let mut set = ex.records;
                    set.sort_unstable();
                    (0..map.len() as u64)
                        .filter(|&p| set.binary_search(&map[p as usize]).is_ok())
                        .collect()
                }
            };
            let at = ex.step.checked_mul(global).ok_or_else(|| {
                Error::InvalidValue(format!("an exclusion at step {} overflows", ex.step))
            })?;
            stream
                .exclude(at, &positions)
                .map_err(|e| Error::InvalidValue(format!("exclusion at step {}: {e}", ex.step)))?;
        }
        Ok(stream)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn in_forked_child(&self) -> bool {
        std::process::id() != self.pid
    }

    /// The next step's batch; blocks until it is ready.
    ///
    /// A failed gather is that step's error (the loader goes on with the
    /// next step); a panicking producer is [`Error::WorkerPanicked`]. After
    /// [`DataLoader::close`], or in a `fork()`ed child, [`Error::InvalidState`].
    pub fn next(&self) -> Result<Batch> {
        if self.in_forked_child() {
            return Err(Error::InvalidState(
                "this loader's threads belong to the process that created it; create a new one here"
                    .into(),
            ));
        }
        let closed = || Error::InvalidState("DataLoader is closed".into());
        let prefetcher = {
            let st = self.lock();
            if st.closed {
                return Err(closed());
            }
            st.prefetcher
                .clone()
                .expect("an open loader has a prefetcher")
        };
        let (step, produced) = prefetcher.next().ok_or_else(closed)?;
        self.lock().step = step + 1;
        if let Some(mix) = &self.plan.mix {
            mix.release(step + 1);
        }
        produced.map_err(Error::WorkerPanicked)?
    }

    /// The step the next [`DataLoader::next`] returns: the number of batches
    /// handed over so far, plus `start_step` (prefetched steps do not count).
    pub fn step(&self) -> u64 {
        self.lock().step
    }

    /// The records of `step` (after the subset mapping and the rank slice),
    /// without gathering them. For a mixture, the records within each row's
    /// source (see [`DataLoader::rows_at`]); a step of a schedule whose
    /// weights are not pushed yet, or that failed, is an error.
    pub fn indices_at(&self, step: u64) -> Result<Vec<u64>> {
        self.plan.rows_at(step, false).map(|(indices, _)| indices)
    }

    /// The records of `step` and, for a mixture, each row's source.
    pub fn rows_at(&self, step: u64) -> Result<(Vec<u64>, Option<Vec<u16>>)> {
        self.plan.rows_at(step, false)
    }

    /// Every row of `steps` (in the order given), of rank `rank` or, when
    /// None, of every rank (the global batch), without reading data. A
    /// mixture with a schedule takes the weights of steps `0..=max(steps)`
    /// in `schedule` (one per source and step, in step order); fixed
    /// weights are replayed from step 0. Steps a skip stepped past gave
    /// nothing and are left out.
    pub fn provenance(
        &self,
        steps: &[u64],
        rank: Option<usize>,
        schedule: Option<&[f64]>,
    ) -> Result<Provenance> {
        let skipped: Vec<std::ops::Range<u64>> = state::skipped(&self.recipe.events).collect();
        if skipped.is_empty() {
            return self.planned(steps, rank, schedule);
        }
        let kept: Vec<u64> = steps
            .iter()
            .copied()
            .filter(|k| !skipped.iter().any(|r| r.contains(k)))
            .collect();
        self.planned(&kept, rank, schedule)
    }

    /// The rows [`DataLoader::provenance`] lists, of any of `steps`,
    /// skipped or not (what each step draws).
    pub fn planned(
        &self,
        steps: &[u64],
        rank: Option<usize>,
        schedule: Option<&[f64]>,
    ) -> Result<Provenance> {
        let plan = &self.plan;
        let world = plan.world;
        let ranks: Vec<usize> = match rank {
            Some(r) if r >= world => {
                return Err(Error::InvalidValue(format!(
                    "rank must be in 0..{}, got {r}",
                    world - 1
                )))
            }
            Some(r) => vec![r],
            None => (0..world).collect(),
        };
        let per_step = ranks.len() * plan.local_batch;
        let total = steps.len().checked_mul(per_step).ok_or_else(|| {
            Error::InvalidValue("provenance: too many rows to list at once".into())
        })?;
        let mut out = Provenance {
            steps: vec![0; total],
            ranks: vec![0; total],
            rows: vec![0; total],
            records: vec![0; total],
            sources: None,
        };
        match &plan.mix {
            None if rank.is_none() => plan.global_batches(steps, &mut out.records),
            None => {
                for (chunk, &step) in out.records.chunks_exact_mut(per_step).zip(steps) {
                    chunk.copy_from_slice(&plan.indices_at(step));
                }
            }
            Some(mix) => {
                let plans = mix.plans_for(steps, schedule)?;
                let mut sources = Vec::with_capacity(total);
                let mut at = 0;
                for p in &plans {
                    for &r in &ranks {
                        let rows = mix.rows_of(p, r, plan.local_batch);
                        out.records[at..at + rows.indices.len()].copy_from_slice(&rows.indices);
                        at += rows.indices.len();
                        sources.extend_from_slice(&rows.sources);
                    }
                }
                out.sources = Some(sources);
            }
        }
        // The labels of each row, a step per task.
        use rayon::prelude::*;
        if per_step > 0 {
            let local = plan.local_batch;
            out.steps
                .par_chunks_mut(per_step)
                .zip(out.ranks.par_chunks_mut(per_step))
                .zip(out.rows.par_chunks_mut(per_step))
                .zip(steps.par_iter())
                .for_each(|(((s, k), w), &step)| {
                    s.fill(step);
                    for ((k, w), &r) in k
                        .chunks_exact_mut(local)
                        .zip(w.chunks_exact_mut(local))
                        .zip(&ranks)
                    {
                        k.fill(r as u32);
                        for (slot, i) in w.iter_mut().zip(0u32..) {
                            *slot = i;
                        }
                    }
                });
        }
        Ok(out)
    }

    /// The run's state: the step the next [`DataLoader::next`] returns, the
    /// sampler's settings, a mixture's sources and fixed weights, where the
    /// sources were read and the plan's edits. A loader built from it
    /// ([`DataLoader::from_state`], or [`DataLoader::load_state`] on a
    /// loader over the same data) goes on bit-exactly.
    pub fn state(&self) -> LoaderState {
        let o = &self.recipe.options;
        let (sources, mix_weights) = match &self.recipe.mix {
            Some((names, weights)) => (
                Some(names.clone()),
                match weights {
                    MixWeights::Fixed(w) => Some(w.clone()),
                    MixWeights::Schedule => None,
                },
            ),
            None => (None, None),
        };
        LoaderState {
            step: self.step(),
            seed: o.seed,
            mode: o.mode,
            batch_size: o.batch_size,
            block_size: o.block_size,
            sources,
            mix_weights,
            tables: self.recipe.pins.clone(),
            events: self.recipe.events.clone(),
            decode: self.decode_state(),
        }
    }

    /// The decode settings of the run's state.
    fn decode_state(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        #[cfg(feature = "image")]
        return self
            .recipe
            .options
            .decode
            .iter()
            .map(|(c, image)| (c.clone(), image.to_value()))
            .collect();
        #[cfg(not(feature = "image"))]
        Default::default()
    }

    /// Checks that `state` is this loader's run: the same seed, mode, block
    /// size and mixture sources and, when both name tables, the same
    /// tables at the same versions and views. `batch_size` and the ranks
    /// may differ (a run resumes on another number of ranks).
    fn check_state(&self, state: &LoaderState) -> Result<()> {
        let o = &self.recipe.options;
        let opt = |v: Option<u64>| v.map_or("None".into(), |v| v.to_string());
        let names = |v: Option<&Vec<String>>| v.map_or("None".into(), |v| py_list(v));
        let ours_names = self.recipe.mix.as_ref().map(|(n, _)| n);
        let pairs = [
            ("seed", state.seed.to_string(), o.seed.to_string()),
            ("mode", py_str(state.mode.name()), py_str(o.mode.name())),
            ("block_size", opt(state.block_size), opt(o.block_size)),
            ("sources", names(state.sources.as_ref()), names(ours_names)),
        ];
        for (key, theirs, ours) in pairs {
            if theirs != ours {
                return Err(Error::InvalidValue(format!(
                    "state[{}] is {theirs}, but this loader's {key} is {ours}: a state resumes \
                     the loader that made it (same streams, seed and mode)",
                    py_str(key)
                )));
            }
        }
        let ours = self.decode_state();
        if state.decode != ours {
            let show = |d: &std::collections::BTreeMap<String, serde_json::Value>| {
                crate::repr::py_repr(&serde_json::Value::Object(
                    d.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                ))
            };
            return Err(Error::InvalidValue(format!(
                "state['decode'] is {}, but this loader's decode is {}: a run resumes with the \
                 decode settings it was made with",
                show(&state.decode),
                show(&ours)
            )));
        }
        match (&state.tables, &self.recipe.pins) {
            (Some(theirs), Some(ours)) if theirs != ours => Err(pins_differ(theirs, ours)),
            _ => Ok(()),
        }
    }

    /// A loader over the tables `state` pins, reopened by `open` (which
    /// returns a pinned table's streams, in column order, and where it
    /// actually read: the version a view selects now may differ), at the
    /// state's step with its edits: it goes on bit-exactly. The state's
    /// seed, mode, block size, step and edits replace `options`'; the
    /// batch size, ranks, prefetching and output are `options`' (a run may
    /// resume on another number of ranks). A mixture's state reopens each
    /// source with its fixed weights, or with [`MixWeights::Schedule`]
    /// (push the weights from step 0 again: a schedule is code, not state).
    ///
    /// Errors ([`Error::InvalidValue`]): a state with a source that is not
    /// a table (build the loader and call [`DataLoader::load_state`]), a
    /// table that opens at another version than the state's (naming
    /// both), what `open` fails with, and the checks of [`DataLoader::new`]
    /// and [`DataLoader::mixture`].
    pub fn from_state(
        state: &LoaderState,
        mut open: impl FnMut(&Pin) -> Result<(Vec<(String, S)>, Pin)>,
        options: Options,
    ) -> Result<DataLoader<S>> {
        let pins: Vec<&Pin> = match &state.tables {
            Some(t) if !t.is_empty() && t.iter().all(Option::is_some) => {
                t.iter().flatten().collect()
            }
            _ => {
                return Err(Error::InvalidValue(
                    "state pins no table for some source (a loader over streams that are not \
                     a table): build the loader and call load_state"
                        .into(),
                ))
            }
        };
        let sources = state.sources.as_deref().unwrap_or_default();
        let want = if state.sources.is_some() {
            sources.len()
        } else {
            1
        };
        if pins.len() != want {
            return Err(Error::InvalidValue(format!(
                "state['tables'] pins {} tables, but the state has {want} sources",
                pins.len()
            )));
        }
        let mut opened = Vec::with_capacity(pins.len());
        let mut read = Vec::with_capacity(pins.len());
        for pin in pins {
            let (streams, at) = open(pin)?;
            opened.push(streams);
            read.push(Some(at));
        }
        if state.tables.as_ref() != Some(&read) {
            return Err(pins_differ(
                state.tables.as_deref().unwrap_or_default(),
                &read,
            ));
        }
        let options = Options {
            seed: state.seed,
            mode: state.mode,
            block_size: state.block_size,
            start_step: state.step,
            events: state.events.clone(),
            pins: Some(read),
            ..options
        };
        let loader = match &state.sources {
            None => DataLoader::new(opened.pop().unwrap_or_default(), options)?,
            Some(names) => {
                let weights = match &state.mix_weights {
                    Some(w) => MixWeights::Fixed(w.clone()),
                    None => MixWeights::Schedule,
                };
                let sources = names
                    .iter()
                    .zip(opened)
                    .map(|(name, streams)| MixSource {
                        name: name.clone(),
                        streams,
                        weights: None,
                    })
                    .collect();
                DataLoader::mixture(sources, weights, options)?
            }
        };
        // The decode settings must be the state's too.
        loader.check_state(state)?;
        Ok(loader)
    }

    /// The sources' names of a mixture, in order (None otherwise).
    pub fn source_names(&self) -> Option<Vec<String>> {
        self.plan
            .mix
            .as_ref()
            .map(|m| m.names().map(str::to_string).collect())
    }

    /// A scheduled mixture: the weights of the next steps, one per source
    /// and step, in step order from [`DataLoader::weights_pushed`]. A step
    /// whose weights are refused (negative, NaN, infinite, all zero: the
    /// error names the step and the source) fails, and so does every later
    /// step; the steps before it are unaffected.
    pub fn push_weights(&self, weights: &[f64]) -> Result<()> {
        match &self.plan.mix {
            Some(mix) if mix.is_schedule() => mix.push(weights),
            _ => Err(Error::InvalidState(
                "only a mixture with a schedule takes weights step by step".into(),
            )),
        }
    }

    /// A scheduled mixture: step `weights_pushed()` (and every later one)
    /// fails with `why` (the schedule could not give its weights).
    pub fn fail_weights(&self, why: String) -> Result<()> {
        match &self.plan.mix {
            Some(mix) if mix.is_schedule() => {
                mix.fail(mix.pushed(), why);
                Ok(())
            }
            _ => Err(Error::InvalidState(
                "only a mixture with a schedule takes weights step by step".into(),
            )),
        }
    }

    /// A scheduled mixture: the next step whose weights must be pushed.
    pub fn weights_pushed(&self) -> Option<u64> {
        self.plan
            .mix
            .as_ref()
            .filter(|m| m.is_schedule())
            .map(|m| m.pushed())
    }

    /// The streams, in the order of a batch's columns.
    pub fn streams(&self) -> &[(String, S)] {
        self.plan.streams()
    }

    /// Records per batch on this rank.
    pub fn batch_size(&self) -> usize {
        self.plan.local_batch
    }

    /// The sampler of global batches (over the subset when there is one);
    /// for a mixture, its first source's record sampler.
    pub fn sampler(&self) -> &Sampler {
        self.plan.sampler.base()
    }

    /// Stops and joins the producer threads; a blocked [`DataLoader::next`]
    /// returns [`Error::InvalidState`]. Idempotent. In a `fork()`ed child the
    /// pipeline is leaked instead: its threads do not exist there.
    pub fn close(&self) {
        let prefetcher = {
            let mut st = self.lock();
            st.closed = true;
            st.prefetcher.take()
        };
        self.shut_down(prefetcher);
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn shut_down(&self, prefetcher: Option<Arc<Prefetcher<Result<Batch>>>>) {
        // Wakes producers waiting for a schedule's weights.
        if let Some(mix) = &self.plan.mix {
            mix.close();
        }
        if let Some(p) = prefetcher {
            if self.in_forked_child() {
                std::mem::forget(p);
            } else {
                p.close();
            }
        }
    }
}

/// The edits of a run (they rebuild the plan over the same streams, so the
/// streams are cloned: an `Arc`, a reference or a binding's handle).
impl<S: StoreAccess + Clone + 'static> DataLoader<S> {
    /// A loader over the same streams and settings at `start` with the
    /// plan's edits `events`.
    fn rebuilt(&self, start: u64, events: Vec<Event>) -> Result<DataLoader<S>> {
        let mut options = self.recipe.options.clone();
        options.start_step = start;
        options.events = events;
        options.pins = self.recipe.pins.clone();
        match (&self.plan.mix, &self.recipe.mix) {
            (Some(mix), Some((_, weights))) => {
                DataLoader::mixture(mix.sources().cloned().collect(), weights.clone(), options)
            }
            _ => {
                options.indices = self.plan.indices.clone().map(Subset::Unsigned);
                DataLoader::new(self.plan.streams.clone(), options)
            }
        }
    }

    /// This loader with one more edit of its plan, made at `event.step()`
    /// (where the caller's consumer is: [`DataLoader::step`], or the step
    /// of a caller whose own threads take batches ahead of it): a new
    /// loader continuing at that step (after a skip's steps), with the
    /// same streams and settings. An exclusion of no record and a skip of
    /// 0 steps change nothing. This loader is left as it is; a scheduled
    /// mixture's weights are pushed again from step 0 to the new one.
    ///
    /// Errors ([`Error::InvalidValue`]): an edit before the last one, a
    /// record outside the streams (or the source) it names, a source that
    /// is not the mixture's, an exclusion that leaves nothing (or, for
    /// cyclic and blocked modes, less than a global batch) to draw.
    pub fn edited(&self, event: Event) -> Result<DataLoader<S>> {
        let (start, nothing) = match &event {
            Event::Exclude { step, records, .. } => (*step, records.is_empty()),
            Event::Skip { step, n } => (
                step.checked_add(*n).ok_or_else(|| {
                    Error::InvalidValue(format!("n must be in 0..={}, got {n}", u64::MAX - step))
                })?,
                *n == 0,
            ),
        };
        let mut events = self.recipe.events.clone();
        if !nothing {
            events.push(event);
        }
        self.rebuilt(start, events)
    }

    /// This run continued from `state` (saved by [`DataLoader::state`]): a
    /// new loader over the same streams at the state's step with its
    /// edits. Errors: a state of another run (seed, mode, block size,
    /// mixture sources, or pinned tables differing, naming both), edits
    /// the streams cannot take (see [`DataLoader::edited`]).
    pub fn resumed(&self, state: &LoaderState) -> Result<DataLoader<S>> {
        self.check_state(state)?;
        self.rebuilt(state.step, state.events.clone())
    }

    /// This run restarted at `step` (not before its last edit) with its
    /// edits: what a `fork()`ed child builds to go on where its parent was.
    pub fn restarted(&self, step: u64) -> Result<DataLoader<S>> {
        self.rebuilt(step, self.recipe.events.clone())
    }

    /// From the next step on, `records` (record ids of the streams, or of
    /// the mixture's source `source`) are never drawn. Cyclic and blocked
    /// modes finish the cycle under way without them and then cover every
    /// other record once per cycle; sequential goes on with the next
    /// record; iid and weighted draw as if their weight were zero. Kept in
    /// [`DataLoader::state`] and replayed exactly on resume. Prefetched
    /// batches are dropped. On error (see [`DataLoader::edited`]) nothing
    /// changes.
    pub fn exclude(&mut self, records: &[u64], source: Option<&str>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let event = Event::Exclude {
            step: self.step(),
            records: records.to_vec(),
            source: source.map(str::to_string),
        };
        *self = self.edited(event)?;
        Ok(())
    }

    /// Steps past the next `n` steps without reading them: the next
    /// [`DataLoader::next`] returns step `step() + n`. Kept in
    /// [`DataLoader::state`] and left out of [`DataLoader::provenance`].
    pub fn skip(&mut self, n: u64) -> Result<()> {
        if n > 0 {
            *self = self.edited(Event::Skip {
                step: self.step(),
                n,
            })?;
        }
        Ok(())
    }

    /// Continues from `state` (see [`DataLoader::resumed`]); on error
    /// nothing changes.
    pub fn load_state(&mut self, state: &LoaderState) -> Result<()> {
        *self = self.resumed(state)?;
        Ok(())
    }
}

/// A state's pins against a loader's, both named.
fn pins_differ(theirs: &[Option<Pin>], ours: &[Option<Pin>]) -> Error {
    Error::InvalidValue(format!(
        "state['tables'] pins {}, but this loader reads {}: a state resumes on the data it was \
         made on (DataLoader.from_state reopens it)",
        Pin::describe(theirs),
        Pin::describe(ours)
    ))
}

impl<S: StoreAccess + 'static> Drop for DataLoader<S> {
    fn drop(&mut self) {
        let prefetcher = self
            .state
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .prefetcher
            .take();
        self.shut_down(prefetcher);
    }
}

impl<S: StoreAccess + 'static> std::fmt::Debug for DataLoader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("DataLoader")
            .field(
                "streams",
                &self
                    .plan
                    .streams()
                    .iter()
                    .map(|(n, _)| n)
                    .collect::<Vec<_>>(),
            )
            .field("batch_size", &self.plan.local_batch)
            .field("mode", &self.plan.sampler.base().mode())
            .field("seed", &self.plan.sampler.base().seed())
            .field("step", &st.step)
            .field("closed", &st.closed)
            .finish()
    }
}
