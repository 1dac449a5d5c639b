//! Patches of one part of a column: stores of new values of some of its
//! records (a shard's patch groups), oldest first, so that a later layer's
//! record wins. [`crate::Concat`] lays them over a store, and
//! [`super::overlay::Overlay`] over a columnar column; both look a record
//! up here (one binary search per record of a patched part).

use std::path::Path;

use crate::error::{Error, Result};
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

    /// The layer index and record holding the part's record `k`.
    #[inline]
    pub(crate) fn find_layer(&self, k: u64) -> Option<(usize, u64)> {
        let j = self.rows.binary_search(&k).ok()?;
        let (layer, at) = self.at[j];
        Some((layer as usize, at))
    }

    pub(crate) fn stores(&self) -> &[Store] {
        &self.stores
    }

    pub(crate) fn into_stores(self) -> Vec<Store> {
        self.stores
    }
}
