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
    /// Where the layers hold many of the part's records: one bit a record
    /// (set where patched) and the patched records before each word, so
    /// that a lookup is a load and a popcount, not a binary search.
    bits: Option<(Vec<u64>, Vec<u32>)>,
}

/// Patched records, at least one in this many of a part's, for a part's
/// layers to keep a bitmap of them (a bitmap costs about 0.19 bytes a
/// record of the part; the binary search of fewer is cheap anyway).
const BITMAP_DENSITY: u64 = 256;

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
        let rows: Vec<u64> = all.iter().map(|e| e.0).collect();
        let bits = (rows.len() as u64 * BITMAP_DENSITY >= len && rows.len() < u32::MAX as usize)
            .then(|| {
                let mut words = vec![0u64; len.div_ceil(64) as usize];
                for &r in &rows {
                    words[(r / 64) as usize] |= 1 << (r % 64);
                }
                let mut before = Vec::with_capacity(words.len());
                let mut n = 0u32;
                for w in &words {
                    before.push(n);
                    n += w.count_ones();
                }
                (words, before)
            });
        Ok(Layers {
            rows,
            at: all.iter().map(|e| (e.1, e.2)).collect(),
            stores: layers.into_iter().map(|(_, s)| s).collect(),
            bits,
        })
    }

    /// The store and record holding the part's record `k`, when a layer
    /// holds it.
    #[inline]
    pub(crate) fn find(&self, k: u64) -> Option<(&Store, u64)> {
        let j = self.place(k)?;
        let (layer, at) = self.at[j];
        Some((&self.stores[layer as usize], at))
    }

    /// The place of the part's record `k` among the records the layers
    /// hold (what indexes [`Layers::decode`]), when a layer holds it.
    #[inline]
    pub(crate) fn place(&self, k: u64) -> Option<usize> {
        match &self.bits {
            Some((words, before)) => {
                let w = *words.get((k / 64) as usize)?;
                let bit = k % 64;
                (w >> bit & 1 == 1).then(|| {
                    before[(k / 64) as usize] as usize
                        + (w & ((1 << bit) - 1)).count_ones() as usize
                })
            }
            None => self.rows.binary_search(&k).ok(),
        }
    }

    /// The part's records in `lo..hi` that a layer holds, ascending, and
    /// the place of the first.
    pub(crate) fn rows_within(&self, lo: u64, hi: u64) -> (usize, &[u64]) {
        let a = self.rows.partition_point(|&r| r < lo);
        let b = self.rows.partition_point(|&r| r < hi);
        (a, &self.rows[a..b.max(a)])
    }

    /// The layer and record holding the value at place `j`.
    #[inline]
    pub(crate) fn at(&self, j: usize) -> (usize, u64) {
        let (layer, at) = self.at[j];
        (layer as usize, at)
    }

    /// The newest value of every record the layers hold, in their order,
    /// end to end, as [`crate::columnar::KeptValues`] keeps them: `width`
    /// bytes each for a dense column (None: ragged, then with the offsets
    /// of the values, each its prefix and payload); None when they are too
    /// large for 32-bit offsets.
    pub(crate) fn decode(
        &self,
        width: Option<usize>,
    ) -> Result<Option<(crate::columnar::Aligned, Vec<i32>, usize)>> {
        let n = self.rows.len();
        let mut by_layer: Vec<Vec<usize>> = vec![Vec::new(); self.stores.len()];
        for (j, &(layer, _)) in self.at.iter().enumerate() {
            by_layer[layer as usize].push(j);
        }
        let at_of = |js: &[usize]| js.iter().map(|&j| self.at[j].1).collect::<Vec<u64>>();
        let what = format!("the patched values of {n} records");
        match width {
            Some(w) => {
                let mut values = crate::columnar::aligned(n * w, &what)?;
                let out = values.as_mut_slice();
                for (store, js) in self.stores.iter().zip(&by_layer) {
                    if js.is_empty() {
                        continue;
                    }
                    let got = store.gather_dense(&at_of(js))?;
                    for (&j, v) in js.iter().zip(got.as_slice().chunks_exact(w)) {
                        out[j * w..(j + 1) * w].copy_from_slice(v);
                    }
                }
                Ok(Some((values, Vec::new(), n)))
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
                let total: usize = from.iter().map(|(_, (_, len))| len).sum();
                if total > i32::MAX as usize {
                    return Ok(None);
                }
                let mut values = crate::columnar::aligned(total, &what)?;
                let out = values.as_mut_slice();
                let mut offsets = Vec::with_capacity(n + 1);
                offsets.push(0i32);
                let mut write = 0usize;
                for &(k, (start, len)) in &from {
                    out[write..write + len]
                        .copy_from_slice(&batches[k].buffer.as_slice()[start..start + len]);
                    write += len;
                    offsets.push(write as i32);
                }
                Ok(Some((values, offsets, n)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;
    use crate::schema::DType;

    fn layer(dir: &Path, name: &str, rows: &[u64]) -> (Vec<u64>, Store) {
        let schema = Schema::dense(DType::I64, &[]).unwrap();
        let mut s = Store::create(dir.join(name), schema, Codec::Zstd, None).unwrap();
        let bytes: Vec<u8> = rows
            .iter()
            .flat_map(|&r| (r as i64).to_le_bytes())
            .collect();
        s.append_dense(&bytes).unwrap();
        s.close().unwrap();
        (rows.to_vec(), Store::open_readonly(dir.join(name)).unwrap())
    }

    #[test]
    fn places_agree_whether_found_by_bitmap_or_by_binary_search() {
        let tmp = tempfile::tempdir().unwrap();
        let schema = Schema::dense(DType::I64, &[]).unwrap();
        let dense: Vec<u64> = (0..1000).filter(|r| r % 3 == 0 || r % 7 == 0).collect();
        let sparse = [5u64, 64, 65, 999_999];
        for (len, rows, bitmap) in [(1000u64, &dense[..], true), (1_000_000, &sparse[..], false)] {
            let name = format!("p{len}");
            let l = Layers::new(
                tmp.path(),
                &schema,
                len,
                vec![layer(tmp.path(), &name, rows)],
            )
            .unwrap();
            assert_eq!(l.bits.is_some(), bitmap);
            let mut j = 0;
            for k in 0..len.min(2000) {
                match rows.binary_search(&k) {
                    Ok(want) => {
                        assert_eq!(l.place(k), Some(want));
                        j += 1;
                    }
                    Err(_) => assert_eq!(l.place(k), None, "{k}"),
                }
            }
            assert!(j > 0);
            assert_eq!(l.place(len - 1), rows.binary_search(&(len - 1)).ok());
            assert_eq!(l.place(len), None);
            let (first, within) = l.rows_within(60, 70);
            assert_eq!(
                within,
                rows.iter()
                    .copied()
                    .filter(|r| (60..70).contains(r))
                    .collect::<Vec<_>>()
            );
            assert_eq!(first, rows.partition_point(|&r| r < 60));
        }
    }
}
