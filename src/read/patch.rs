//! Patches of one part of a column: stores of new values of some of its
//! records (a shard's patch groups), oldest first, so that a later layer's
//! record wins. [`crate::Concat`] lays them over a store, and
//! [`super::overlay::Overlay`] over a columnar column; both look a record
//! up here (one binary search per record of a patched part).

use std::path::Path;

use crate::error::{Error, Result};
use crate::read::buffer::Buffer;
use crate::read::ragged::RaggedBatch;
use crate::read::records::Records;
use crate::schema::Schema;
use crate::store::Store;

/// The records of one part that patches hold: its record `rows[j]` is
/// record `at[j].1` of `stores[at[j].0]`.
pub(crate) struct Layers {
    rows: Vec<u64>,
    at: Vec<(u32, u64)>,
    stores: Vec<Store>,
}

impl Layers {
    /// `layers` over a part of `len` records of the column `what`, which
    /// holds `schema`: each a store of new values and the part's records
    /// it holds (strictly increasing, as many as the store has). `Corrupted`
    /// naming the store for one of another schema, another length or a
    /// record past the part's end.
    pub(crate) fn new(
        what: &Path,
        schema: &Schema,
        len: u64,
        layers: Vec<(Vec<u64>, Store)>,
    ) -> Result<Layers> {
        let mut all: Vec<(u64, u32, u64)> = Vec::new();
        for (layer, (rows, store)) in layers.iter().enumerate() {
            if store.schema() != schema {
                return Err(Error::corrupted(
                    store.path(),
                    format!(
                        "a patch of {} must hold {}, but it holds {}",
                        what.display(),
                        schema,
                        store.schema()
                    ),
                ));
            }
            if store.len() != rows.len() as u64 || rows.last().is_some_and(|&r| r >= len) {
                return Err(Error::corrupted(
                    store.path(),
                    format!(
                        "a patch of {} rows of a part of {len} must hold {} records below {len}, but it holds {}",
                        rows.len(),
                        rows.len(),
                        store.len()
                    ),
                ));
            }
            all.extend(
                rows.iter()
                    .enumerate()
                    .map(|(j, &r)| (r, layer as u32, j as u64)),
            );
        }
        // Each record once: its newest layer's.
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        all.dedup_by_key(|e| e.0);
        Ok(Layers {
            rows: all.iter().map(|e| e.0).collect(),
            at: all.iter().map(|e| (e.1, e.2)).collect(),
            stores: layers.into_iter().map(|(_, s)| s).collect(),
        })
    }

    /// The store and record holding the part's record `k`, when a layer
    /// holds it.
    #[inline]
    pub(crate) fn find(&self, k: u64) -> Option<(&Store, u64)> {
        let j = self.rows.binary_search(&k).ok()?;
        let (layer, at) = self.at[j];
        Some((&self.stores[layer as usize], at))
    }

    /// The place of the part's record `k` among the records the layers
    /// hold (what indexes [`Layers::decode`]), when a layer holds it.
    #[inline]
    pub(crate) fn place(&self, k: u64) -> Option<usize> {
        self.rows.binary_search(&k).ok()
    }

    /// The part's records in `lo..hi` that a layer holds, ascending, and
    /// the place of the first.
    pub(crate) fn rows_within(&self, lo: u64, hi: u64) -> (usize, &[u64]) {
        let a = self.rows.partition_point(|&r| r < lo);
        let b = self.rows.partition_point(|&r| r < hi);
        (a, &self.rows[a..b.max(a)])
    }

    /// The newest value of every record the layers hold, in their order,
    /// decoded once: `width` bytes each for a dense column (None: ragged).
    pub(crate) fn decode(&self, width: Option<usize>) -> Result<Decoded> {
        let n = self.rows.len();
        let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); self.stores.len()];
        for (j, &(layer, _)) in self.at.iter().enumerate() {
            by_layer[layer as usize].push(j);
        }
        let at_of = |js: &[usize]| js.iter().map(|&j| self.at[j].1).collect::<Vec<u64>>();
        let oom = |bytes: usize| Error::OutOfMemory {
            bytes: bytes as u64,
            what: format!("the patched values of {n} records"),
        };
        match width {
            Some(w) => {
                let mut buf = Buffer::try_new(n * w).ok_or_else(|| oom(n * w))?;
                let out = buf.as_mut_slice();
                for (store, js) in self.stores.iter().zip(&by_layer) {
                    if js.is_empty() {
                        continue;
                    }
                    let got = store.gather_dense(&at_of(js))?;
                    for (&j, v) in js.iter().zip(got.as_slice().chunks_exact(w)) {
                        out[j * w..(j + 1) * w].copy_from_slice(v);
                    }
                }
                Ok(Decoded::Dense(buf, w))
            }
            None => {
                let mut from = vec![(0usize, (0usize, 0usize)); n];
                let mut batches = Vec::new();
                for (store, js) in self.stores.iter().zip(&by_layer) {
                    if js.is_empty() {
                        continue;
                    }
                    let got = store.gather_ragged(&at_of(js))?;
                    for (&j, &span) in js.iter().zip(&got.spans) {
                        from[j] = (batches.len(), span);
                    }
                    batches.push(got);
                }
                let itemsize = self
                    .stores
                    .first()
                    .map_or(1, |s| s.schema().dtype.itemsize());
                let total: usize = from.iter().map(|(_, (_, n))| n.next_multiple_of(8)).sum();
                let mut buf = Buffer::try_new(total).ok_or_else(|| oom(total))?;
                let out = buf.as_mut_slice();
                let mut spans = Vec::with_capacity(n);
                let mut write = 0usize;
                for &(k, (start, len)) in &from {
                    out[write..write + len]
                        .copy_from_slice(&batches[k].buffer.as_slice()[start..start + len]);
                    spans.push((write, len));
                    write += len.next_multiple_of(8);
                }
                Ok(Decoded::Ragged(RaggedBatch::new(buf, spans, itemsize)))
            }
        }
    }

    pub(crate) fn stores(&self) -> &[Store] {
        &self.stores
    }

    pub(crate) fn into_stores(self) -> Vec<Store> {
        self.stores
    }
}

/// The newest values of a part's patched records, in their order
/// ([`Layers::decode`]).
pub(crate) enum Decoded {
    /// `.1` bytes each, end to end.
    Dense(Buffer, usize),
    Ragged(RaggedBatch),
}

impl Decoded {
    /// The bytes of the value at place `j`.
    #[inline]
    pub(crate) fn value(&self, j: usize) -> &[u8] {
        match self {
            Decoded::Dense(buf, w) => &buf.as_slice()[j * w..(j + 1) * w],
            Decoded::Ragged(batch) => {
                let (start, len) = batch.spans[j];
                &batch.buffer.as_slice()[start..start + len]
            }
        }
    }
}
