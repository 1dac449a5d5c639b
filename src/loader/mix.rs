//! Mixed batches: a loader over several sources of the same columns.
//!
//! Step `k`'s global batch takes `c_i(k)` records from source `i`, counts
//! planned by [`crate::sampler::mixture`] (earliest deadline first against
//! the weights' running targets). Source `i`'s records are positions
//! `C_i(k)..C_i(k) + c_i(k)` of its own record stream (a batch-1
//! [`Sampler`], seeded by [`source_seed`]), so each source keeps its own
//! cycle. The global batch interleaves the sources
//! ([`mixture::interleave`]); a rank keeps its slice, and within it the rows
//! are grouped by source in source order, so each column is one gather per
//! source straight into the batch.
//!
//! The counts are computed in step order by a [`Planner`]. With fixed
//! weights it replays the rule itself (from step 0 when the loader starts
//! at a later step). With a schedule, the caller pushes each step's weights
//! in order ([`Planner::push`]); a producer that needs a step not pushed yet
//! waits for it, and a step whose weights were bad fails, with every later
//! step (their counts depend on it).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use crate::error::{Error, Result};
use crate::read::buffer::Buffer;
use crate::read::ragged::RaggedBatch;
use crate::read::records::{Records, StoreAccess};
use crate::sampler::edit::Edited;
use crate::sampler::mixture::{self, Blend};
use crate::sampler::weighted::AliasTable;
use crate::sampler::{Mode, Sampler};
use crate::schema::Kind;

use super::{BatchColumn, Exclusion, Output};

/// Steps whose plans stay available behind the consumer (for the rows of a
/// batch that a transform asks for after the consumer moved on).
const KEEP_BEHIND: u64 = 1024;

/// How a mixture weighs its sources.
#[derive(Clone, Debug)]
pub enum MixWeights {
    /// The same weights at every step, one per source.
    Fixed(Vec<f64>),
    /// Weights that change with the step, pushed in step order through
    /// [`crate::DataLoader::push_weights`], from step 0.
    Schedule,
}

/// One source of a mixture: its streams (the same names, kinds and order
/// in every source) and, for [`Mode::Weighted`], its per-record weights.
#[derive(Clone)]
pub struct MixSource<S> {
    pub name: String,
    pub streams: Vec<(String, S)>,
    pub weights: Option<Arc<AliasTable>>,
}

/// Where step `k` starts in each source's stream, and how many records
/// each source gives.
#[derive(Debug)]
pub(super) struct StepPlan {
    /// `C_i(k)`.
    first: Vec<u64>,
    /// `c_i(k)`.
    counts: Vec<u32>,
}

struct PlannerState {
    /// The rule's state before the next step to plan.
    blend: Blend,
    plans: BTreeMap<u64, Arc<StepPlan>>,
    /// Plans of steps below are not kept.
    floor: u64,
    /// A schedule's step whose weights were refused, and why.
    failed: Option<(u64, String)>,
    closed: bool,
    /// Exclusions not applied yet (in step order): each is applied to its
    /// source's stream when the rule reaches its step, at the position
    /// the source's stream has reached then.
    pending: VecDeque<Exclusion>,
}

/// The per-step counts of a mixture, computed in step order and kept for
/// the steps in flight.
pub(super) struct Planner {
    sources: usize,
    global: u64,
    /// The shares of fixed weights; None for a schedule.
    fixed: Option<Vec<u64>>,
    state: Mutex<PlannerState>,
    pushed: Condvar,
    /// Each source's record stream, with its exclusions.
    streams: Vec<RwLock<Edited>>,
}

fn mix_error(e: mixture::MixError) -> Error {
    Error::InvalidValue(e.to_string())
}

impl Planner {
    fn new(
        streams: Vec<Edited>,
        global: u64,
        weights: &MixWeights,
        start: u64,
        exclusions: Vec<Exclusion>,
    ) -> Result<Planner> {
        let sources = streams.len();
        let blend = Blend::new(sources, global).map_err(mix_error)?;
        let fixed = match weights {
            MixWeights::Fixed(w) => {
                if w.len() != sources {
                    return Err(mix_error(mixture::MixError::Count {
                        sources,
                        got: w.len(),
                    }));
                }
                Some(mixture::shares(w).map_err(mix_error)?)
            }
            MixWeights::Schedule => None,
        };
        let planner = Planner {
            sources,
            global,
            fixed,
            state: Mutex::new(PlannerState {
                blend,
                plans: BTreeMap::new(),
                floor: start,
                failed: None,
                closed: false,
                pending: exclusions.into(),
            }),
            pushed: Condvar::new(),
            streams: streams.into_iter().map(RwLock::new).collect(),
        };
        if let Some(shares) = &planner.fixed {
            // Resuming: the counts of step `start` depend on every step before.
            let mut st = planner.lock();
            while st.blend.step() < start {
                planner.advance(&mut st, shares)?;
            }
            planner.apply_pending(&mut st);
        }
        Ok(planner)
    }

    /// Applies the exclusions of the step the rule is at.
    fn apply_pending(&self, st: &mut PlannerState) {
        let step = st.blend.step();
        while st.pending.front().is_some_and(|e| e.step <= step) {
            let ex = st.pending.pop_front().expect("checked");
            let source = ex.source.expect("checked by MixDraw::new");
            let at = st.blend.drawn()[source];
            self.streams[source]
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .exclude(at, &ex.records)
                .expect("checked by MixDraw::new");
        }
    }

    /// Source `i`'s record stream.
    fn stream(&self, i: usize) -> std::sync::RwLockReadGuard<'_, Edited> {
        self.streams[i].read().unwrap_or_else(|e| e.into_inner())
    }

    /// The plans of `steps` (any order), replayed from step 0 with the
    /// fixed weights, or with `schedule`'s (one row per step from 0).
    fn plans_for(&self, steps: &[u64], schedule: Option<&[f64]>) -> Result<Vec<Arc<StepPlan>>> {
        let Some(&max) = steps.iter().max() else {
            return Ok(Vec::new());
        };
        let mut wanted: Vec<u64> = steps.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let rows = match (&self.fixed, schedule) {
            (Some(_), _) => None,
            (None, Some(rows)) => {
                let need = (max as u128 + 1) * self.sources as u128;
                if (rows.len() as u128) < need {
                    return Err(Error::InvalidValue(format!(
                        "the schedule's weights of steps 0..={max} are needed ({need} values), \
                         got {}",
                        rows.len()
                    )));
                }
                Some(rows)
            }
            (None, None) => {
                return Err(Error::InvalidValue(
                    "a mixture with a schedule lists its rows from the schedule's weights".into(),
                ))
            }
        };
        let mut blend = Blend::new(self.sources, self.global).map_err(mix_error)?;
        let mut found = HashMap::with_capacity(wanted.len());
        let mut next = wanted.iter().peekable();
        while let Some(&&want) = next.peek() {
            let step = blend.step();
            let shares = match (&self.fixed, rows) {
                (Some(s), _) => s.clone(),
                (None, Some(rows)) => {
                    let at = step as usize * self.sources;
                    mixture::shares(&rows[at..at + self.sources]).map_err(|e| {
                        Error::InvalidValue(format!("the mixture's weights at step {step}: {e}"))
                    })?
                }
                (None, None) => unreachable!("refused above"),
            };
            let first = blend.drawn().to_vec();
            let counts = blend.advance(&shares).map_err(mix_error)?;
            if step == want {
                found.insert(step, Arc::new(StepPlan { first, counts }));
                next.next();
            }
        }
        Ok(steps.iter().map(|s| Arc::clone(&found[s])).collect())
    }

    fn lock(&self) -> MutexGuard<'_, PlannerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Plans the next step with `shares`, keeping it if it is not below the floor.
    fn advance(&self, st: &mut PlannerState, shares: &[u64]) -> Result<()> {
        self.apply_pending(st);
        let step = st.blend.step();
        let first = st.blend.drawn().to_vec();
        let counts = st.blend.advance(shares).map_err(mix_error)?;
        if step >= st.floor {
            st.plans.insert(step, Arc::new(StepPlan { first, counts }));
        }
        Ok(())
    }

    /// The plan of `step`; with a schedule, waits (when `wait`) until its
    /// weights are pushed.
    fn plan_at(&self, step: u64, wait: bool) -> Result<Arc<StepPlan>> {
        let mut st = self.lock();
        loop {
            if let Some(p) = st.plans.get(&step) {
                return Ok(Arc::clone(p));
            }
            if st.closed {
                return Err(Error::InvalidState("DataLoader is closed".into()));
            }
            if let Some((at, why)) = &st.failed {
                if step >= *at {
                    return Err(Error::InvalidValue(format!(
                        "step {step}: the mixture's weights at step {at} were refused ({why}); \
                         every later step's counts depend on them"
                    )));
                }
            }
            if step < st.blend.step() {
                // Planned once and since dropped: replay (fixed weights only).
                let Some(shares) = &self.fixed else {
                    return Err(Error::InvalidState(format!(
                        "step {step} of the mixture is no longer planned (steps from {} are)",
                        st.floor
                    )));
                };
                drop(st);
                return self.replay(shares, step);
            }
            match &self.fixed {
                Some(shares) => {
                    while st.blend.step() <= step {
                        self.advance(&mut st, shares)?;
                    }
                }
                None if wait => {
                    st = self.pushed.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                None => {
                    return Err(Error::InvalidState(format!(
                        "step {step}: the mixture's weights are pushed up to step {} only",
                        st.blend.step()
                    )))
                }
            }
        }
    }

    fn replay(&self, shares: &[u64], step: u64) -> Result<Arc<StepPlan>> {
        let mut blend = Blend::new(self.sources, self.global).map_err(mix_error)?;
        for _ in 0..step {
            blend.advance(shares).map_err(mix_error)?;
        }
        let first = blend.drawn().to_vec();
        let counts = blend.advance(shares).map_err(mix_error)?;
        Ok(Arc::new(StepPlan { first, counts }))
    }

    /// The next steps' weights (a schedule's), `sources` per step, in step
    /// order from [`Planner::pushed`]. A refused row fails its step and
    /// every later one.
    fn push(&self, rows: &[f64]) -> Result<()> {
        if self.fixed.is_some() {
            return Err(Error::InvalidState(
                "this mixture has fixed weights; only a schedule's are pushed".into(),
            ));
        }
        if !rows.len().is_multiple_of(self.sources) {
            return Err(Error::InvalidValue(format!(
                "mixture weights come {} per step (one per source), got {} values",
                self.sources,
                rows.len()
            )));
        }
        let mut st = self.lock();
        let mut result = Ok(());
        if st.failed.is_none() {
            for row in rows.chunks_exact(self.sources) {
                let step = st.blend.step();
                if let Err(e) = mixture::shares(row)
                    .map_err(mix_error)
                    .and_then(|s| self.advance(&mut st, &s))
                {
                    st.failed = Some((step, e.to_string()));
                    result = Err(Error::InvalidValue(format!(
                        "the mixture's weights at step {step}: {e}"
                    )));
                    break;
                }
            }
        }
        drop(st);
        self.pushed.notify_all();
        result
    }

    /// Marks `step` (the next one to push) as failed: its batch, and every
    /// later one, fails with `why`.
    fn fail(&self, step: u64, why: String) {
        let mut st = self.lock();
        if st.failed.is_none() {
            st.failed = Some((step, why));
        }
        drop(st);
        self.pushed.notify_all();
    }

    /// The next step whose weights a schedule must push.
    fn pushed(&self) -> u64 {
        self.lock().blend.step()
    }

    /// The consumer reached `step`: plans far behind it go.
    fn release(&self, step: u64) {
        let keep = step.saturating_sub(KEEP_BEHIND);
        let mut st = self.lock();
        if keep > st.floor {
            st.floor = keep;
            while st.plans.first_key_value().is_some_and(|(&k, _)| k < keep) {
                st.plans.pop_first();
            }
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.pushed.notify_all();
    }
}

/// A mixture's sources with their record samplers and its planner.
pub(super) struct MixDraw<S> {
    sources: Vec<(MixSource<S>, Sampler)>,
    planner: Planner,
}

/// What a mixed batch's rows are: each row's record within its source, and
/// its source.
pub(super) struct Rows {
    pub indices: Vec<u64>,
    pub sources: Vec<u16>,
    /// Rows of each source, in source order (they are grouped).
    pub counts: Vec<usize>,
}

/// The kind of a column, to compare across sources.
fn column_kind(r: &dyn Records) -> String {
    format!("{} ({})", r.schema(), r.logical().name())
}

impl<S: StoreAccess> MixDraw<S> {
    /// Checks the sources against each other and builds their samplers.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        sources: Vec<MixSource<S>>,
        weights: &MixWeights,
        global: u64,
        mode: Mode,
        seed: u64,
        block_size: Option<u64>,
        start: u64,
        exclusions: Vec<Exclusion>,
    ) -> Result<MixDraw<S>> {
        if sources.is_empty() || sources.len() > mixture::MAX_SOURCES {
            return Err(mix_error(mixture::MixError::Sources { got: sources.len() }));
        }
        let first = &sources[0];
        if first.streams.is_empty() {
            return Err(Error::InvalidValue(format!(
                "source {:?} has no streams",
                first.name
            )));
        }
        let names: Vec<String> = first.streams.iter().map(|(n, _)| n.clone()).collect();
        let kinds = first
            .streams
            .iter()
            .map(|(_, s)| s.with(|r| Ok(column_kind(r))))
            .collect::<Result<Vec<_>>>()?;
        let first_name = first.name.clone();
        let mut out = Vec::with_capacity(sources.len());
        for src in sources {
            let theirs: Vec<String> = src.streams.iter().map(|(n, _)| n.clone()).collect();
            if theirs != names {
                return Err(Error::InvalidValue(format!(
                    "every source of a mixture must have the same columns: source {:?} has \
                     {theirs:?}, source {:?} has {names:?}",
                    src.name, first_name
                )));
            }
            let mut len = None;
            for ((name, s), kind) in src.streams.iter().zip(&kinds) {
                let (theirs, n) = s.with(|r| Ok((column_kind(r), r.len())))?;
                if &theirs != kind {
                    return Err(Error::InvalidValue(format!(
                        "column {name:?} differs between the sources of a mixture: {kind} in \
                         source {:?}, {theirs} in source {:?}",
                        first_name, src.name
                    )));
                }
                if *len.get_or_insert(n) != n {
                    return Err(Error::InvalidValue(format!(
                        "the streams of source {:?} must all have the same length \
                         (column {name:?} has {n}, the first {})",
                        src.name,
                        len.unwrap_or(0)
                    )));
                }
            }
            let n = len.unwrap_or(0);
            if n == 0 {
                return Err(Error::InvalidValue(format!(
                    "source {:?} is empty: nothing to sample",
                    src.name
                )));
            }
            if mode == Mode::Weighted && src.weights.is_none() {
                return Err(Error::InvalidValue(format!(
                    "mode 'weighted' needs per-record weights for every source, and source \
                     {:?} has none",
                    src.name
                )));
            }
            let sampler = Sampler::with_options(
                n,
                1,
                mode,
                mixture::source_seed(seed, &src.name),
                block_size,
                src.weights.clone(),
            )
            .map_err(|e| Error::InvalidValue(format!("source {:?}: {e}", src.name)))?;
            out.push((src, sampler));
        }
        // Every exclusion is checked now: the planner applies them later,
        // when the rule reaches their steps.
        let mut check: Vec<Edited> = out.iter().map(|(_, s)| Edited::new(s.clone())).collect();
        Exclusion::check_all(&exclusions, |source| match source {
            Some(i) if i < out.len() => {
                let n = out[i].1.n();
                Ok((
                    n,
                    format!(
                        "source {} ({n} records)",
                        crate::repr::py_str(&out[i].0.name)
                    ),
                ))
            }
            _ => Err(Error::InvalidValue(format!(
                "an exclusion from a mixture must name one of its {} sources, got {source:?}",
                out.len()
            ))),
        })?;
        for ex in &exclusions {
            let i = ex.source.expect("checked: every exclusion names a source");
            let name = &out[i].0.name;
            check[i].exclude(0, &ex.records).map_err(|e| {
                Error::InvalidValue(format!(
                    "exclusion at step {} from source {name:?}: {e}",
                    ex.step
                ))
            })?;
        }
        let streams = out.iter().map(|(_, s)| Edited::new(s.clone())).collect();
        let planner = Planner::new(streams, global, weights, start, exclusions)?;
        Ok(MixDraw {
            sources: out,
            planner,
        })
    }

    /// The first source's streams (every source's columns look the same).
    pub(super) fn template(&self) -> (&[(String, S)], &Sampler) {
        (&self.sources[0].0.streams, &self.sources[0].1)
    }

    /// The sources, in order.
    pub(super) fn sources(&self) -> impl Iterator<Item = &MixSource<S>> {
        self.sources.iter().map(|(s, _)| s)
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.sources.iter().map(|(s, _)| s.name.as_str())
    }

    /// The rows of `step` on rank `rank` of batches of `local` rows.
    pub(super) fn rows(&self, step: u64, rank: usize, local: usize, wait: bool) -> Result<Rows> {
        let plan = self.planner.plan_at(step, wait)?;
        Ok(self.rows_of(&plan, rank, local))
    }

    /// The plans of `steps` (see [`Planner::plans_for`]).
    pub(super) fn plans_for(
        &self,
        steps: &[u64],
        schedule: Option<&[f64]>,
    ) -> Result<Vec<Arc<StepPlan>>> {
        self.planner.plans_for(steps, schedule)
    }

    /// The rows a step's `plan` gives rank `rank` of batches of `local` rows.
    pub(super) fn rows_of(&self, plan: &StepPlan, rank: usize, local: usize) -> Rows {
        let runs = mixture::runs(&plan.counts, rank * local, (rank + 1) * local);
        let mut indices = vec![0u64; local];
        let mut sources = Vec::with_capacity(local);
        let mut counts = Vec::with_capacity(runs.len());
        let mut at = 0;
        for (i, &(skip, count)) in runs.iter().enumerate().take(self.sources.len()) {
            let count = count as usize;
            self.planner.stream(i).fill_stream(
                plan.first[i] + u64::from(skip),
                &mut indices[at..at + count],
            );
            sources.extend(std::iter::repeat_n(i as u16, count));
            counts.push(count);
            at += count;
        }
        Rows {
            indices,
            sources,
            counts,
        }
    }

    /// The parts of `rows`: per source with rows, the source, its rows'
    /// records and where they start in the batch.
    fn parts<'a>(&'a self, rows: &'a Rows) -> Vec<(&'a MixSource<S>, &'a [u64], usize)> {
        let mut parts = Vec::new();
        let mut at = 0;
        for ((src, _), &n) in self.sources.iter().zip(&rows.counts) {
            if n > 0 {
                parts.push((src, &rows.indices[at..at + n], at));
            }
            at += n;
        }
        parts
    }

    /// The images of column `c` (binary, in every source) at `rows`,
    /// decoded as `image` says: each row's crop and flip drawn from
    /// `record_seeds(source_seed(seed, source), step, record)`, the seeds a
    /// transform's `info.record_seeds` gives a mixture's rows.
    #[cfg(feature = "image")]
    pub(super) fn decode_column(
        &self,
        c: usize,
        rows: &Rows,
        image: &crate::image::Image,
        seed: u64,
        step: u64,
        output: Output,
    ) -> Result<(BatchColumn, Option<BatchColumn>)> {
        let total = rows.indices.len();
        let len = image.image_len();
        let mut out = Buffer::new(total * len);
        let mut ok = vec![false; total];
        for (src, idx, at) in self.parts(rows) {
            let seed = crate::sampler::mixture::source_seed(seed, &src.name);
            let dst = &mut out.as_mut_slice()[at * len..(at + idx.len()) * len];
            src.streams[c].1.with(|r| {
                super::decode::decode_part(
                    r,
                    image,
                    seed,
                    step,
                    idx,
                    dst,
                    &mut ok[at..at + idx.len()],
                )
            })?;
        }
        let name = &self.sources[0].0.streams[c].0;
        super::decode::image_columns(output, name, image, out, ok)
    }

    /// Gathers column `c` of `rows`, one gather per source.
    pub(super) fn gather_column(
        &self,
        c: usize,
        rows: &Rows,
        output: Output,
    ) -> Result<(BatchColumn, Option<Buffer>)> {
        fn stream<S>(src: &MixSource<S>, c: usize) -> &S {
            &src.streams[c].1
        }
        let parts: Vec<_> = self
            .parts(rows)
            .into_iter()
            .map(|(src, idx, at)| (stream(src, c), idx, at))
            .collect();
        let total = rows.indices.len();
        let (kind, schema) = self.sources[0].0.streams[c]
            .1
            .with(|r| Ok((r.kind(), r.schema().clone())))?;
        // Nullable when any source's column is (the others' rows are valid).
        let mut nullable = false;
        for (src, _) in &self.sources {
            nullable |= stream(src, c).with(|r| Ok(r.validity().is_some()))?;
        }
        match output {
            #[cfg(feature = "arrow")]
            Output::Arrow => {
                let name = &self.sources[0].0.streams[c].0;
                let mut arrays = Vec::with_capacity(parts.len());
                for (s, idx, _) in &parts {
                    arrays.push(s.with(|r| crate::arrow::gather_array(r, *idx))?);
                }
                let field = self.sources[0].0.streams[c]
                    .1
                    .with(|r| Ok(crate::arrow::field_of(r, name)))?
                    .with_nullable(nullable);
                Ok((
                    BatchColumn::Arrow(field, concat_arrays(&arrays, name)?),
                    None,
                ))
            }
            Output::Arrays => {
                let column = match kind {
                    Kind::Dense => {
                        let width = schema.record_width().unwrap_or(0) as usize;
                        let mut buf = total
                            .checked_mul(width)
                            .and_then(Buffer::try_new)
                            .ok_or_else(|| Error::OutOfMemory {
                                bytes: (total as u64).saturating_mul(width as u64),
                                what: format!("a gather of {total} records"),
                            })?;
                        let dst = buf.as_mut_slice();
                        for (s, idx, at) in &parts {
                            let part = &mut dst[at * width..(at + idx.len()) * width];
                            s.with(|r| r.gather_dense_into(idx, part))?;
                        }
                        BatchColumn::Dense(buf)
                    }
                    Kind::Ragged => {
                        let mut batches = Vec::with_capacity(parts.len());
                        for (s, idx, _) in &parts {
                            batches.push(s.with(|r| r.gather_ragged(idx))?);
                        }
                        BatchColumn::Ragged(concat_ragged(batches, schema.dtype.itemsize())?)
                    }
                };
                let valid = if nullable {
                    let mut buf = Buffer::try_new(total).ok_or_else(|| Error::OutOfMemory {
                        bytes: total as u64,
                        what: format!("the validity of {total} records"),
                    })?;
                    let dst = buf.as_mut_slice();
                    for (s, idx, at) in &parts {
                        let part = &mut dst[*at..at + idx.len()];
                        s.with(|r| match r.validity() {
                            Some(v) => v.gather_dense_into(idx, part),
                            None => {
                                part.fill(1);
                                Ok(())
                            }
                        })?;
                    }
                    Some(buf)
                } else {
                    None
                };
                Ok((column, valid))
            }
        }
    }

    pub(super) fn push(&self, rows: &[f64]) -> Result<()> {
        self.planner.push(rows)
    }

    pub(super) fn fail(&self, step: u64, why: String) {
        self.planner.fail(step, why)
    }

    pub(super) fn pushed(&self) -> u64 {
        self.planner.pushed()
    }

    pub(super) fn release(&self, step: u64) {
        self.planner.release(step)
    }

    pub(super) fn close(&self) {
        self.planner.close()
    }

    pub(super) fn is_schedule(&self) -> bool {
        self.planner.fixed.is_none()
    }
}

/// Ragged batches end to end in one buffer (each record keeps its 8-byte
/// alignment).
fn concat_ragged(mut parts: Vec<RaggedBatch>, itemsize: usize) -> Result<RaggedBatch> {
    if parts.len() == 1 {
        return Ok(parts.pop().expect("one part"));
    }
    let total: usize = parts
        .iter()
        .map(|p| p.buffer.len().next_multiple_of(8))
        .sum();
    let mut buffer = Buffer::try_new(total).ok_or_else(|| Error::OutOfMemory {
        bytes: total as u64,
        what: "a mixed ragged batch".into(),
    })?;
    let mut spans = Vec::with_capacity(parts.iter().map(RaggedBatch::len).sum());
    let mut at = 0;
    let dst = buffer.as_mut_slice();
    for p in &parts {
        let len = p.buffer.len();
        dst[at..at + len].copy_from_slice(p.buffer.as_slice());
        spans.extend(p.spans.iter().map(|&(start, n)| (start + at, n)));
        at += len.next_multiple_of(8);
    }
    Ok(RaggedBatch::new(buffer, spans, itemsize))
}

/// Arrays of one column from several sources as one array.
#[cfg(feature = "arrow")]
fn concat_arrays(arrays: &[arrow_array::ArrayRef], name: &str) -> Result<arrow_array::ArrayRef> {
    use arrow_array::Array;
    if arrays.len() == 1 {
        return Ok(Arc::clone(&arrays[0]));
    }
    let data: Vec<arrow_data::ArrayData> = arrays.iter().map(|a| a.to_data()).collect();
    if let Some(other) = data.iter().find(|d| d.data_type() != data[0].data_type()) {
        return Err(Error::InvalidValue(format!(
            "column {name:?} gathers to different Arrow types in the sources of a mixture: \
             {} and {}",
            data[0].data_type(),
            other.data_type()
        )));
    }
    let nulls = arrays.iter().any(|a| a.null_count() > 0);
    let total = arrays.iter().map(|a| a.len()).sum();
    let mut out = arrow_data::transform::MutableArrayData::new(data.iter().collect(), nulls, total);
    for (i, a) in arrays.iter().enumerate() {
        out.try_extend(i, 0, a.len())
            .map_err(|e| Error::InvalidValue(format!("column {name:?} of a mixed batch: {e}")))?;
    }
    Ok(arrow_array::make_array(out.freeze()))
}
