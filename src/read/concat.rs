//! Stores end to end: the column of a sharded table.
//!
//! A [`Concat`] presents read-only stores of one schema as one sequence of
//! records: global record `i` is record `i - start(s)` of the store `s`
//! whose range holds it. A gather resolves every index to its store in the
//! same pass that decodes it (one native call per batch however many shards
//! the batch touches), writing each record straight into its place.

use std::path::{Path, PathBuf};

use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::read::ragged::RaggedBatch;
use crate::read::records::{ReadCounters, Records, Stats, StoreAccess};
use crate::schema::Schema;
use crate::store::gather::{self, Counters, Source};
use crate::store::Store;

use super::patch::Layers;

/// Read-only stores of one schema, end to end (see the module documentation).
pub struct Concat {
    /// What errors and Arrow fields name (a sharded table's column).
    path: PathBuf,
    parts: Vec<Store>,
    /// `starts[s]` is the global index of part `s`'s first record;
    /// `starts[parts.len()]` is the total.
    starts: Vec<u64>,
    schema: Schema,
    coded: bool,
    counters: Counters,
    /// A selection of the records (a table's rows left by deletions, or a
    /// view's): record `i` is physical record `rows[i]`. None: every
    /// record, in order.
    rows: Option<std::sync::Arc<[u64]>>,
    /// New values of some records of some parts (a shard's patch groups),
    /// by part; empty when no part has any.
    patches: Vec<Option<Layers>>,
}

impl std::fmt::Debug for Concat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Concat")
            .field("path", &self.path)
            .field("parts", &self.parts.len())
            .field("len", &self.len())
            .field("selected", &self.rows.is_some())
            .field(
                "patched",
                &self.patches.iter().filter(|p| p.is_some()).count(),
            )
            .finish()
    }
}

impl Concat {
    /// Joins `parts` (at least one, all of one schema) under the name
    /// `path`. Any part may be empty; codecs may differ.
    pub fn new(path: impl Into<PathBuf>, parts: Vec<Store>) -> Result<Concat> {
        let path = path.into();
        let Some(first) = parts.first() else {
            return Err(Error::InvalidValue(format!(
                "{}: a concatenation needs at least one store",
                path.display()
            )));
        };
        let schema = first.schema().clone();
        for p in &parts[1..] {
            if *p.schema() != schema {
                return Err(Error::InvalidValue(format!(
                    "{}: store {} holds {}, but store {} holds {}; every part must share one schema",
                    path.display(),
                    p.path().display(),
                    p.schema(),
                    first.path().display(),
                    schema
                )));
            }
        }
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut total = 0u64;
        for p in &parts {
            starts.push(total);
            total += p.len();
        }
        starts.push(total);
        Ok(Concat {
            path,
            coded: parts.iter().any(|p| p.codec() != Codec::Raw),
            parts,
            starts,
            schema,
            counters: Counters::default(),
            rows: None,
            patches: Vec::new(),
        })
    }

    /// Lays `layers` over part `part`: each a store of new values and the
    /// part's records it holds (strictly increasing, as many as the store
    /// has), oldest first, so that a later layer's record wins. A gather
    /// then reads a patched record from its layer (one binary search per
    /// record of a patched part). `Corrupted` naming the store for one of
    /// another schema, another length or a record past the part's end.
    pub fn patch(mut self, part: usize, layers: Vec<(Vec<u64>, Store)>) -> Result<Concat> {
        if layers.is_empty() {
            return Ok(self);
        }
        let len = self.parts[part].len();
        let layers = Layers::new(&self.path, &self.schema, len, layers)?;
        self.coded |= layers.stores().iter().any(|s| s.codec() != Codec::Raw);
        if self.patches.is_empty() {
            self.patches = (0..self.parts.len()).map(|_| None).collect();
        }
        self.patches[part] = Some(layers);
        Ok(self)
    }

    /// The same stores presenting only the physical records `rows`, in
    /// that order (record `i` is physical record `rows[i]`): how a table
    /// skips deleted rows and how a view selects its rows, with one lookup
    /// per record inside the gather. `InvalidValue` for a record past the
    /// stores' end.
    pub fn select(mut self, rows: std::sync::Arc<[u64]>) -> Result<Concat> {
        let total = self.starts[self.parts.len()];
        if let Some(bad) = rows.iter().find(|&&r| r >= total) {
            return Err(Error::InvalidValue(format!(
                "{}: a selection names record {bad}, but the stores hold {total}",
                self.path.display()
            )));
        }
        self.rows = Some(rows);
        Ok(self)
    }

    /// The stores, in order.
    pub fn parts(&self) -> &[Store] {
        &self.parts
    }

    /// Global index of each part's first record, then the total.
    pub fn starts(&self) -> &[u64] {
        &self.starts
    }

    /// The part holding record `i < len` and the index there.
    #[inline]
    fn locate(&self, i: u64) -> (&Store, u64) {
        let i = match &self.rows {
            Some(rows) => rows[i as usize],
            None => i,
        };
        // The last start <= i that begins a non-empty part.
        self.locate_physical(i)
    }

    /// The part holding physical record `i` and the index there.
    #[inline]
    fn locate_physical(&self, i: u64) -> (&Store, u64) {
        let s = self.starts[1..].partition_point(|&end| end <= i);
        let k = i - self.starts[s];
        if let Some(Some(p)) = self.patches.get(s) {
            if let Some(found) = p.find(k) {
                return found;
            }
        }
        (&self.parts[s], k)
    }

    /// Every store, parts and patches.
    fn stores(&self) -> impl Iterator<Item = &Store> {
        self.parts.iter().chain(
            self.patches
                .iter()
                .flatten()
                .flat_map(|p| p.stores().iter()),
        )
    }

    /// A gather's source over the physical records (a selection is mapped
    /// before the gather, see [`Concat::physical`]).
    fn source<'a>(&'a self) -> Source<'a, impl Fn(u64) -> (&'a Store, u64) + Sync + 'a> {
        Source {
            schema: &self.schema,
            len: self.starts[self.parts.len()],
            coded: self.coded,
            path: &self.path,
            remote: self.stores().any(Store::is_remote),
            counters: &self.counters,
            locate: move |i| self.locate_physical(i),
        }
    }

    /// `idx` as physical records: checked against the selection and mapped
    /// through it in one pass (independent lookups, so the memory system
    /// overlaps their misses), or `idx` itself without a selection.
    fn physical<'i>(&self, idx: &'i [u64]) -> Result<std::borrow::Cow<'i, [u64]>> {
        match &self.rows {
            None => Ok(std::borrow::Cow::Borrowed(idx)),
            Some(rows) => {
                gather::check_indices(idx, rows.len() as u64)?;
                Ok(std::borrow::Cow::Owned(
                    idx.iter().map(|&i| rows[i as usize]).collect(),
                ))
            }
        }
    }

    /// Closes every part (read-only parts write nothing).
    pub fn close(self) -> Result<()> {
        let mut first = Ok(());
        let patches = self
            .patches
            .into_iter()
            .flatten()
            .flat_map(Layers::into_stores);
        for p in self.parts.into_iter().chain(patches) {
            let r = p.close();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Records for Concat {
    fn path(&self) -> &Path {
        &self.path
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The first part's codec (parts may differ; each decodes its own).
    fn codec(&self) -> Codec {
        self.parts[0].codec()
    }

    fn len(&self) -> u64 {
        match &self.rows {
            Some(rows) => rows.len() as u64,
            None => self.starts[self.parts.len()],
        }
    }

    fn logical_len(&self, i: u64) -> Option<usize> {
        (i < self.len()).then(|| {
            let (s, k) = self.locate(i);
            s.logical_len(k).unwrap_or(0)
        })
    }

    fn stats(&self) -> Stats {
        self.parts.iter().fold(Stats::of_records(0), |a, p| {
            let s = p.stats();
            Stats {
                records: a.records + s.records,
                live_bytes: a.live_bytes + s.live_bytes,
                data_bytes: a.data_bytes + s.data_bytes,
                reclaimable: a.reclaimable + s.reclaimable,
                raw_records: a.raw_records + s.raw_records,
            }
        })
    }

    fn read_counters(&self) -> ReadCounters {
        self.counters.get()
    }

    fn is_readonly(&self) -> bool {
        true
    }

    fn checksum(&self) -> bool {
        self.stores().all(Store::checksum)
    }

    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        gather::dense_into(&self.source(), &self.physical(idx)?, dst)
    }

    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        gather::ragged(&self.source(), &self.physical(idx)?)
    }

    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        gather::check_indices(&[i], self.len())?;
        let (s, k) = self.locate(i);
        s.read_record(k)
    }
}

impl StoreAccess for &Concat {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::DType;

    fn dense(dir: &Path, name: &str, values: std::ops::Range<i64>, codec: Codec) -> Store {
        let mut s = Store::create(
            dir.join(name),
            Schema::dense(DType::I64, &[2]).unwrap(),
            codec,
            None,
        )
        .unwrap();
        let bytes: Vec<u8> = values
            .flat_map(|v| [v, -v])
            .flat_map(|v| v.to_le_bytes())
            .collect();
        s.append_dense(&bytes).unwrap();
        s.close().unwrap();
        Store::open_readonly(dir.join(name)).unwrap()
    }

    #[test]
    fn gathers_across_parts_in_one_call() {
        let tmp = tempfile::tempdir().unwrap();
        let parts = vec![
            dense(tmp.path(), "a", 0..5, Codec::Raw),
            dense(tmp.path(), "empty", 0..0, Codec::Zstd),
            dense(tmp.path(), "b", 5..12, Codec::Zstd),
        ];
        let c = Concat::new(tmp.path().join("x"), parts).unwrap();
        assert_eq!(c.len(), 12);
        assert_eq!(c.starts(), &[0, 5, 5, 12]);
        let idx = [11u64, 0, 4, 5, 7, 4];
        let buf = c.gather_dense(&idx).unwrap();
        let got: Vec<i64> = buf
            .as_slice()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let want: Vec<i64> = idx.iter().flat_map(|&i| [i as i64, -(i as i64)]).collect();
        assert_eq!(got, want);
        assert_eq!(c.read_counters().records, 6);
        assert!(matches!(
            c.gather_dense(&[12u64]),
            Err(Error::IndexOutOfRange { index: 12, len: 12 })
        ));
        assert_eq!(c.read_record(6).unwrap(), {
            let mut v = 6i64.to_le_bytes().to_vec();
            v.extend((-6i64).to_le_bytes());
            v
        });
    }

    fn values(c: &Concat, idx: &[u64]) -> Vec<i64> {
        let buf = c.gather_dense(idx).unwrap();
        buf.as_slice()
            .chunks_exact(16)
            .map(|b| i64::from_le_bytes(b[..8].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn patches_replace_their_records_and_the_newest_wins() {
        let tmp = tempfile::tempdir().unwrap();
        let parts = vec![
            dense(tmp.path(), "a", 0..5, Codec::Raw),
            dense(tmp.path(), "b", 5..12, Codec::Zstd),
        ];
        let old = dense(tmp.path(), "p1", 100..103, Codec::Zstd);
        let new = dense(tmp.path(), "p2", 200..202, Codec::Raw);
        let c = Concat::new(tmp.path().join("x"), parts)
            .unwrap()
            .patch(1, vec![(vec![0, 3, 6], old), (vec![3, 4], new)])
            .unwrap();
        // Part 1's record 0 is global 5, 3 is 8, 4 is 9, 6 is 11.
        let all: Vec<u64> = (0..12).collect();
        assert_eq!(
            values(&c, &all),
            vec![0, 1, 2, 3, 4, 100, 6, 7, 200, 201, 10, 102]
        );
        assert_eq!(values(&c, &[11, 8, 0, 5]), vec![102, 200, 0, 100]);
        let mut want = 201i64.to_le_bytes().to_vec();
        want.extend((-201i64).to_le_bytes());
        assert_eq!(c.read_record(9).unwrap(), want);
        // A selection (deleted rows) maps through to the patched records.
        let c = c.select(std::sync::Arc::from(vec![8u64, 11, 2])).unwrap();
        assert_eq!(values(&c, &[0, 1, 2]), vec![200, 102, 2]);
        c.close().unwrap();
    }

    #[test]
    fn a_patch_must_fit_its_part() {
        let tmp = tempfile::tempdir().unwrap();
        dense(tmp.path(), "a", 0..5, Codec::Raw).close().unwrap();
        let base = || {
            Concat::new(
                "col",
                vec![Store::open_readonly(tmp.path().join("a")).unwrap()],
            )
            .unwrap()
        };
        let short = dense(tmp.path(), "s", 0..2, Codec::Raw);
        let err = base().patch(0, vec![(vec![1, 2, 3], short)]).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let past = dense(tmp.path(), "p", 0..1, Codec::Raw);
        let err = base().patch(0, vec![(vec![5], past)]).unwrap_err();
        assert!(err.to_string().contains("below 5"), "{err}");
        let other = Store::create(
            tmp.path().join("f"),
            Schema::dense(DType::F32, &[2]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        let err = base().patch(0, vec![(vec![], other)]).unwrap_err();
        assert!(
            err.to_string().contains("a patch of col must hold"),
            "{err}"
        );
    }

    #[test]
    fn parts_must_share_a_schema() {
        let tmp = tempfile::tempdir().unwrap();
        let a = dense(tmp.path(), "a", 0..2, Codec::Raw);
        let b = Store::create(
            tmp.path().join("b"),
            Schema::dense(DType::F32, &[2]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        let err = Concat::new("col", vec![a, b]).unwrap_err().to_string();
        assert!(err.contains("every part must share one schema"), "{err}");
        assert!(Concat::new("col", vec![]).is_err());
    }
}
