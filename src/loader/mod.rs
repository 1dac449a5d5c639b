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

mod batch;
#[cfg(feature = "image")]
mod decode;
mod mix;
mod options;
mod plan;
mod prefetch;
pub mod state;

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::loader::mix::MixDraw;
pub use crate::loader::mix::{MixSource, MixWeights};
use crate::loader::prefetch::Prefetcher;
pub use crate::loader::state::{Event, LoaderState, Pin};
use crate::read::records::StoreAccess;
use crate::sampler::edit::Edited;
use crate::sampler::Sampler;

pub use batch::{Batch, BatchColumn, Provenance};
pub(crate) use options::Exclusion;
pub use options::{Options, Output, Subset};
use plan::Plan;

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
