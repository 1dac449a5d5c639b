//! The plan of a run: every producer's shared view of the streams, the
//! sampler and the subset, and what a step gathers.

use crate::error::Result;
use crate::loader::mix::MixDraw;
use crate::read::buffer::Buffer;
use crate::read::records::{Records, StoreAccess};
use crate::sampler::edit::Edited;
use crate::schema::Kind;
use crate::store::{self};

use super::batch::{Batch, BatchColumn};
#[cfg(feature = "image")]
use super::decode;
use super::mix;
use super::options::Output;

/// Everything a producer needs; shared by every producer thread.
pub(super) struct Plan<S> {
    pub(super) streams: Vec<(String, S)>,
    /// The sampler's stream with the plan's exclusions.
    pub(super) sampler: Edited,
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) local_batch: usize,
    /// The subset the sampler's positions map through.
    pub(super) indices: Option<Vec<u64>>,
    pub(super) output: Output,
    /// A mixture's sources and planner (then `streams` is empty and
    /// `sampler` is its first source's record sampler).
    pub(super) mix: Option<MixDraw<S>>,
    /// Per stream, how its encoded images are decoded (None: gathered as
    /// they are).
    #[cfg(feature = "image")]
    pub(super) decode: Vec<Option<crate::image::Image>>,
    /// The seed of the records' seeds.
    #[cfg(feature = "image")]
    pub(super) seed: u64,
}

impl<S: StoreAccess> Plan<S> {
    /// The streams of a batch's columns (a mixture's first source's: every
    /// source's columns look the same).
    pub(super) fn streams(&self) -> &[(String, S)] {
        match &self.mix {
            Some(mix) => mix.template().0,
            None => &self.streams,
        }
    }

    /// The rows of `step`: records, and each row's source for a mixture.
    /// A scheduled mixture's step waits for its weights when `wait`.
    pub(super) fn rows_at(&self, step: u64, wait: bool) -> Result<(Vec<u64>, Option<Vec<u16>>)> {
        match &self.mix {
            Some(mix) => {
                let rows = mix.rows(step, self.rank, self.local_batch, wait)?;
                Ok((rows.indices, Some(rows.sources)))
            }
            None => Ok((self.indices_at(step), None)),
        }
    }

    pub(super) fn indices_at(&self, step: u64) -> Vec<u64> {
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
    pub(super) fn global_batches(&self, steps: &[u64], out: &mut [u64]) {
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

    pub(super) fn produce(&self, step: u64) -> Result<Batch> {
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
    pub(super) fn gather_mixed(
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
    pub(super) fn gather(
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
        #[cfg_attr(not(feature = "image"), allow(clippy::unused_enumerate_index))]
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
    pub(super) fn decoded(
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
    pub(super) fn column(
        &self,
        store: &dyn Records,
        name: &str,
        idx: &[u64],
    ) -> Result<BatchColumn> {
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
