//! A column read with patches laid over it that is not a concatenation of
//! stores: a columnar column (or its validity) whose shards hold patch
//! groups. Record `i` is physical record `rows[i]` (a selection, as a
//! [`crate::Concat`] has); a physical record that a part's patch layers
//! hold is read from its newest layer, every other from the base. The
//! base is read in one call per batch and each layer in one more; a batch
//! that no patch touches is the base's gather itself.
//!
//! What reads a column by its columnar files (scans by chunk, predicates
//! pruned by statistics, the SQL connector's statistics) does not see an
//! overlay as columnar, so it reads the column as it reads a records one:
//! the patched values are never missed, at the cost of the columnar fast
//! paths until a compaction folds the patches.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::patch::Layers;
use crate::codec::Codec;
use crate::columnar::{KeptDecoded, KeptValues};
use crate::error::{Error, Result};
use crate::read::buffer::Buffer;
use crate::read::ragged::RaggedBatch;
use crate::read::records::{check_dense_dst, dense_width, ReadCounters, Records, Stats};
use crate::schema::{DType, Logical, Schema};
use crate::store::gather::{check_indices, contiguous};
use crate::store::Store;

/// What an overlay lays its patches over.
pub type Base = Box<dyn Records + Send + Sync>;

/// A column with patches laid over it (see the module documentation).
pub struct Overlay {
    path: PathBuf,
    schema: Schema,
    logical: Logical,
    /// None: a validity stream whose base rows are all valid.
    base: Option<Base>,
    /// Physical record of each part's first record, then the total.
    starts: Vec<u64>,
    /// By part (None where a part has no patch).
    patches: Vec<Option<Layers>>,
    /// Each part's patched values, decoded on first read and kept under
    /// the process's one budget beside the columnar chunks.
    kept: KeptValues,
    rows: Option<Arc<[u64]>>,
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overlay")
            .field("path", &self.path)
            .field("parts", &(self.starts.len() - 1))
            .field(
                "patched",
                &self.patches.iter().filter(|p| p.is_some()).count(),
            )
            .field("selected", &self.rows.is_some())
            .finish()
    }
}

/// A patched record of a batch: its place in the batch, its part and its
/// place among the part's patched records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub pos: usize,
    pub part: u32,
    pub j: u32,
}

impl Overlay {
    /// `base` (every physical record, in parts of `part_rows` records)
    /// with `layers[s]` laid over part `s` (each a store and the part's
    /// records it holds, oldest first), presenting the physical records
    /// `rows` when given. `Corrupted` for a patch that does not fit its
    /// part (see [`Layers::new`]), `InvalidValue` for a selection past
    /// the end.
    pub fn new(
        base: Base,
        part_rows: &[u64],
        layers: Vec<Vec<(Vec<u64>, Store)>>,
        rows: Option<Arc<[u64]>>,
    ) -> Result<Overlay> {
        let (path, schema, logical) = (
            base.path().to_path_buf(),
            base.schema().clone(),
            base.logical(),
        );
        Overlay::build(path, schema, logical, Some(base), part_rows, layers, rows)
    }

    /// A validity stream (dense `bool`, presented as `path`) whose base
    /// records are all valid, with `layers` laid over it as in
    /// [`Overlay::new`].
    pub fn all_valid(
        path: &Path,
        part_rows: &[u64],
        layers: Vec<Vec<(Vec<u64>, Store)>>,
        rows: Option<Arc<[u64]>>,
    ) -> Result<Overlay> {
        let schema = Schema::dense(DType::Bool, &[])?;
        Overlay::build(
            path.to_path_buf(),
            schema,
            Logical::Tensor,
            None,
            part_rows,
            layers,
            rows,
        )
    }

    fn build(
        path: PathBuf,
        schema: Schema,
        logical: Logical,
        base: Option<Base>,
        part_rows: &[u64],
        layers: Vec<Vec<(Vec<u64>, Store)>>,
        rows: Option<Arc<[u64]>>,
    ) -> Result<Overlay> {
        if layers.len() != part_rows.len() {
            return Err(Error::InvalidValue(format!(
                "{}: patches of {} parts over a column of {}",
                path.display(),
                layers.len(),
                part_rows.len()
            )));
        }
        let mut starts = Vec::with_capacity(part_rows.len() + 1);
        let mut at = 0u64;
        for &n in part_rows {
            starts.push(at);
            at += n;
        }
        starts.push(at);
        if let Some(b) = &base {
            if b.len() != at {
                return Err(Error::InvalidValue(format!(
                    "{}: a base of {} records under parts of {at}",
                    path.display(),
                    b.len()
                )));
            }
        }
        if let Some(bad) = rows.as_ref().and_then(|r| r.iter().find(|&&r| r >= at)) {
            return Err(Error::InvalidValue(format!(
                "{}: a selection names record {bad}, but the column holds {at}",
                path.display()
            )));
        }
        let patches = layers
            .into_iter()
            .zip(part_rows)
            .map(|(l, &n)| {
                if l.is_empty() {
                    Ok(None)
                } else {
                    Layers::new(&path, &schema, n, l).map(Some)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let kept = KeptValues::new(patches.len());
        Ok(Overlay {
            path,
            schema,
            logical,
            base,
            starts,
            patches,
            kept,
            rows,
        })
    }

    /// The columnar column the patches lie over, when they lie over one
    /// (not a validity): what reads the overlay by whole arrays.
    pub fn base_columnar(&self) -> Option<&crate::columnar::Columnar> {
        self.base.as_ref()?.columnar()
    }

    /// The records `idx` as physical records, and those of them a patch
    /// layer holds, by place in `idx` (ascending). A run of consecutive
    /// physical records finds them by part (two binary searches a part),
    /// others one by one.
    pub fn patched_places<'a>(&self, idx: &'a [u64]) -> Result<(Cow<'a, [u64]>, Vec<Hit>)> {
        check_indices(idx, self.len())?;
        let phys: Cow<'a, [u64]> = match &self.rows {
            Some(rows) => Cow::Owned(idx.iter().map(|&i| rows[i as usize]).collect()),
            None => Cow::Borrowed(idx),
        };
        let hits = match contiguous(&phys) {
            Some(range) => self.hits_within(range.start, range.end),
            None => self.hits_of(&phys),
        };
        Ok((phys, hits))
    }

    /// The patched records among physical records `lo..hi`, by place from
    /// `lo`.
    fn hits_within(&self, lo: u64, hi: u64) -> Vec<Hit> {
        let mut out = Vec::new();
        let first = self.starts[1..].partition_point(|&end| end <= lo);
        for s in first..self.starts.len() - 1 {
            let (start, end) = (self.starts[s], self.starts[s + 1]);
            if start >= hi {
                break;
            }
            if let Some(layers) = &self.patches[s] {
                let (a, rows) = layers.rows_within(lo.max(start) - start, hi.min(end) - start);
                out.extend(rows.iter().enumerate().map(|(k, &r)| Hit {
                    pos: (start + r - lo) as usize,
                    part: s as u32,
                    j: (a + k) as u32,
                }));
            }
        }
        out
    }

    /// The patched records among physical records `phys`, by place.
    fn hits_of(&self, phys: &[u64]) -> Vec<Hit> {
        phys.iter()
            .enumerate()
            .filter_map(|(pos, &p)| {
                self.hit(p).map(|(part, j)| Hit {
                    pos,
                    part,
                    j: j as u32,
                })
            })
            .collect()
    }

    /// The overlay reading its patches without keeping their values.
    #[cfg(test)]
    fn keeping_nothing(mut self) -> Overlay {
        self.kept = KeptValues::none(self.patches.len());
        self
    }

    /// The physical records the overlay presents, when not every one in
    /// order.
    pub fn selection(&self) -> Option<&Arc<[u64]>> {
        self.rows.as_ref()
    }

    /// The patched records among records `lo..hi` of an overlay without a
    /// selection, by place from `lo`.
    pub fn patched_range(&self, lo: u64, hi: u64) -> Result<Vec<Hit>> {
        if self.rows.is_some() || lo > hi || hi > self.len() {
            return Err(Error::InvalidValue(format!(
                "{}: a range of records {lo}..{hi} of an overlay of {} records{}",
                self.path.display(),
                self.len(),
                if self.rows.is_some() {
                    " with a selection"
                } else {
                    ""
                }
            )));
        }
        Ok(self.hits_within(lo, hi))
    }

    /// The records `hits` holds (of this overlay) as records of their own,
    /// record `k` the value of hit `k`.
    pub fn patched<'a>(&'a self, hits: &[Hit]) -> Result<Patched<'a>> {
        Ok(Patched {
            of: self,
            values: self.values(hits)?,
        })
    }

    /// The newest values of the patched records `hits`: from their parts'
    /// kept values (decoded on first use), or, where the budget does not
    /// keep them, gathered from the patch stores for this read alone.
    fn values(&self, hits: &[Hit]) -> Result<Values> {
        let width = match self.schema.layout {
            crate::schema::Layout::Dense { .. } => Some(dense_width(&self.path, &self.schema)?),
            crate::schema::Layout::Ragged => None,
        };
        let mut out = Values {
            at: vec![(0, 0, 0); hits.len()],
            sources: Vec::new(),
        };
        let mut order: Vec<usize> = (0..hits.len()).collect();
        order.sort_by_key(|&k| hits[k].part);
        for run in order.chunk_by(|&a, &b| hits[a].part == hits[b].part) {
            let part = hits[run[0]].part;
            let layers = self.patches[part as usize]
                .as_ref()
                .expect("a hit names a patched part");
            if let Some(d) = self.kept.get_or_make(part, || layers.decode(width))? {
                let src = out.sources.len() as u32;
                for &k in run {
                    let j = hits[k].j as usize;
                    out.at[k] = match width {
                        Some(w) => (src, j * w, w),
                        None => {
                            let (a, b) = (d.offsets[j] as usize, d.offsets[j + 1] as usize);
                            (src, a, b - a)
                        }
                    };
                }
                out.sources.push(Source::Kept(d));
                continue;
            }
            // Not kept: this read's records, gathered layer by layer.
            let mut by_layer: Vec<(usize, usize)> = run
                .iter()
                .map(|&k| (layers.at(hits[k].j as usize).0, k))
                .collect();
            by_layer.sort_unstable();
            for same in by_layer.chunk_by(|a, b| a.0 == b.0) {
                let store = &layers.stores()[same[0].0];
                let ats: Vec<u64> = same
                    .iter()
                    .map(|&(_, k)| layers.at(hits[k].j as usize).1)
                    .collect();
                let src = out.sources.len() as u32;
                match width {
                    Some(w) => {
                        let got = store.gather_dense(&ats)?;
                        for (i, &(_, k)) in same.iter().enumerate() {
                            out.at[k] = (src, i * w, w);
                        }
                        out.sources.push(Source::Dense(got));
                    }
                    None => {
                        let got = store.gather_ragged(&ats)?;
                        for (&(_, k), &(start, n)) in same.iter().zip(&got.spans) {
                            out.at[k] = (src, start, n);
                        }
                        out.sources.push(Source::Ragged(got));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Records in each part.
    pub fn part_lengths(&self) -> Vec<u64> {
        self.starts.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The physical record behind record `i < len`.
    #[inline]
    fn physical(&self, i: u64) -> u64 {
        match &self.rows {
            Some(rows) => rows[i as usize],
            None => i,
        }
    }

    /// The part of a patched physical record and its place among the
    /// part's patched records.
    #[inline]
    fn hit(&self, p: u64) -> Option<(u32, usize)> {
        let s = self.starts[1..].partition_point(|&end| end <= p);
        let layers = self.patches.get(s)?.as_ref()?;
        let j = layers.place(p - self.starts[s])?;
        Some((s as u32, j))
    }

    /// The store and record holding physical record `p`, when a patch
    /// layer holds it.
    fn find(&self, p: u64) -> Option<(&Store, u64)> {
        let s = self.starts[1..].partition_point(|&end| end <= p);
        self.patches.get(s)?.as_ref()?.find(p - self.starts[s])
    }

    /// `idx` as physical records, and the patched ones among them.
    fn resolve(&self, idx: &[u64]) -> Result<(Vec<u64>, Vec<Hit>)> {
        check_indices(idx, self.len())?;
        let phys: Vec<u64> = idx.iter().map(|&i| self.physical(i)).collect();
        let hits = self.hits_of(&phys);
        Ok((phys, hits))
    }
}

impl Records for Overlay {
    fn path(&self) -> &Path {
        &self.path
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn codec(&self) -> Codec {
        self.base.as_ref().map_or(Codec::Zstd, |b| b.codec())
    }

    fn len(&self) -> u64 {
        match &self.rows {
            Some(rows) => rows.len() as u64,
            None => self.starts[self.starts.len() - 1],
        }
    }

    fn logical_len(&self, i: u64) -> Option<usize> {
        if i >= self.len() {
            return None;
        }
        let p = self.physical(i);
        match (self.find(p), &self.base) {
            (Some((store, at)), _) => store.logical_len(at),
            (None, Some(b)) => b.logical_len(p),
            (None, None) => Some(1),
        }
    }

    fn stats(&self) -> Stats {
        match &self.base {
            Some(b) => b.stats(),
            None => Stats::of_records(self.len()),
        }
    }

    fn read_counters(&self) -> ReadCounters {
        self.base
            .as_ref()
            .map_or_else(ReadCounters::default, |b| b.read_counters())
    }

    fn is_readonly(&self) -> bool {
        true
    }

    fn checksum(&self) -> bool {
        self.base.as_ref().is_none_or(|b| b.checksum())
            && self
                .patches
                .iter()
                .flatten()
                .all(|l| l.stores().iter().all(Store::checksum))
    }

    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        let w = dense_width(&self.path, &self.schema)?;
        check_dense_dst(idx.len(), w, dst.len())?;
        let (phys, hits) = self.resolve(idx)?;
        match &self.base {
            Some(b) => b.gather_dense_into(&phys, dst)?,
            None => dst.fill(1),
        }
        let values = self.values(&hits)?;
        for (k, h) in hits.iter().enumerate() {
            dst[h.pos * w..(h.pos + 1) * w].copy_from_slice(values.value(k));
        }
        Ok(())
    }

    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        let Some(base) = &self.base else {
            return Err(Error::InvalidValue(format!(
                "the validity of {} is dense, not ragged",
                self.path.display()
            )));
        };
        let (phys, hits) = self.resolve(idx)?;
        if hits.is_empty() {
            return base.gather_ragged(&phys);
        }
        let mut patched = vec![false; phys.len()];
        for h in &hits {
            patched[h.pos] = true;
        }
        let rest: Vec<u64> = phys
            .iter()
            .zip(&patched)
            .filter(|(_, &p)| !p)
            .map(|(&p, _)| p)
            .collect();
        let rest = base.gather_ragged(&rest)?;
        let values = self.values(&hits)?;
        // Each record's bytes, by place in the batch.
        let mut from: Vec<&[u8]> = Vec::with_capacity(phys.len());
        let mut next = rest.spans.iter();
        let mut hit = hits.iter().enumerate().peekable();
        for pos in 0..phys.len() {
            match hit.peek() {
                Some(&(k, h)) if h.pos == pos => {
                    from.push(values.value(k));
                    hit.next();
                }
                _ => {
                    let &(start, n) = next.next().expect("one span per base record");
                    from.push(&rest.buffer.as_slice()[start..start + n]);
                }
            }
        }
        RaggedBatch::pack(&from, self.schema.dtype.itemsize())
    }

    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        check_indices(&[i], self.len())?;
        let p = self.physical(i);
        match (self.find(p), &self.base) {
            (Some((store, at)), _) => store.read_record(at),
            (None, Some(b)) => b.read_record(p),
            (None, None) => Ok(vec![1]),
        }
    }

    fn logical(&self) -> Logical {
        self.logical
    }

    fn stored_columnar(&self) -> bool {
        self.base.as_ref().is_some_and(|b| b.stored_columnar())
    }

    fn overlay(&self) -> Option<&Overlay> {
        Some(self)
    }
}

/// The newest values of some patched records, resolved for one read:
/// value `k` is bytes `at[k].1..` (`at[k].2` of them) of source `at[k].0`.
struct Values {
    at: Vec<(u32, usize, usize)>,
    sources: Vec<Source>,
}

/// Where [`Values`] found some values: a part's kept values, or a
/// gather from one patch store.
enum Source {
    Kept(std::sync::Arc<KeptDecoded>),
    Dense(Buffer),
    Ragged(RaggedBatch),
}

impl Values {
    #[inline]
    fn value(&self, k: usize) -> &[u8] {
        let (src, start, n) = self.at[k];
        let bytes = match &self.sources[src as usize] {
            Source::Kept(d) => d.values.as_slice(),
            Source::Dense(b) => b.as_slice(),
            Source::Ragged(r) => r.buffer.as_slice(),
        };
        &bytes[start..start + n]
    }
}

/// Some patched records of an overlay as records of their own (record
/// `k`: the newest value of hit `k`), read from the decoded patches: what
/// readers that read the base by whole arrays lay over it.
pub struct Patched<'a> {
    of: &'a Overlay,
    values: Values,
}

impl Patched<'_> {
    fn value(&self, k: u64) -> Result<&[u8]> {
        Ok(self.values.value(k as usize))
    }
}

impl Records for Patched<'_> {
    fn path(&self) -> &Path {
        &self.of.path
    }

    fn schema(&self) -> &Schema {
        &self.of.schema
    }

    fn codec(&self) -> Codec {
        self.of.codec()
    }

    fn len(&self) -> u64 {
        self.values.at.len() as u64
    }

    fn logical_len(&self, i: u64) -> Option<usize> {
        self.values.at.get(i as usize).map(|a| a.2)
    }

    fn stats(&self) -> Stats {
        Stats::of_records(self.len())
    }

    fn read_counters(&self) -> ReadCounters {
        ReadCounters::default()
    }

    fn is_readonly(&self) -> bool {
        true
    }

    fn checksum(&self) -> bool {
        self.of.checksum()
    }

    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        let w = dense_width(&self.of.path, &self.of.schema)?;
        check_indices(idx, self.len())?;
        check_dense_dst(idx.len(), w, dst.len())?;
        for (out, &k) in dst.chunks_exact_mut(w).zip(idx) {
            out.copy_from_slice(self.value(k)?);
        }
        Ok(())
    }

    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        check_indices(idx, self.len())?;
        let values = idx
            .iter()
            .map(|&k| self.value(k))
            .collect::<Result<Vec<_>>>()?;
        RaggedBatch::pack(&values, self.of.schema.dtype.itemsize())
    }

    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        check_indices(&[i], self.len())?;
        Ok(self.value(i)?.to_vec())
    }

    fn logical(&self) -> Logical {
        self.of.logical
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::ragged::Packed;
    use crate::Concat;

    fn dense(dir: &Path, name: &str, values: &[i64]) -> Store {
        let mut s = Store::create(
            dir.join(name),
            Schema::dense(DType::I64, &[]).unwrap(),
            Codec::Zstd,
            None,
        )
        .unwrap();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        s.append_dense(&bytes).unwrap();
        s.close().unwrap();
        Store::open_readonly(dir.join(name)).unwrap()
    }

    fn text(dir: &Path, name: &str, values: &[&str]) -> Store {
        let mut s =
            Store::create(dir.join(name), Schema::ragged(DType::U8), Codec::Zstd, None).unwrap();
        let mut packed = Packed::with_capacity(values.len(), 64);
        for v in values {
            packed.push(&[v.len() as u64], v.as_bytes());
        }
        s.append_ragged(&packed).unwrap();
        s.close().unwrap();
        Store::open_readonly(dir.join(name)).unwrap()
    }

    fn numbers(o: &Overlay, idx: &[u64]) -> Vec<i64> {
        o.gather_dense(idx)
            .unwrap()
            .as_slice()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn patched_records_come_from_their_newest_layer_and_the_rest_from_the_base() {
        let tmp = tempfile::tempdir().unwrap();
        let base = Concat::new(
            tmp.path().join("col"),
            vec![
                dense(tmp.path(), "a", &[0, 1, 2, 3, 4]),
                dense(tmp.path(), "b", &[5, 6, 7, 8, 9, 10, 11]),
            ],
        )
        .unwrap();
        let layers = vec![
            vec![],
            vec![
                (vec![0, 3, 6], dense(tmp.path(), "p1", &[100, 103, 106])),
                (vec![3, 4], dense(tmp.path(), "p2", &[203, 204])),
            ],
        ];
        let o = Overlay::new(Box::new(base), &[5, 7], layers, None).unwrap();
        assert_eq!(o.len(), 12);
        assert_eq!(
            numbers(&o, &[11, 0, 5, 8, 9, 4, 5]),
            [106, 0, 100, 203, 204, 4, 100]
        );
        // Twice: the second read from the kept values.
        assert_eq!(numbers(&o, &[8, 9, 5]), [203, 204, 100]);
        assert_eq!(o.read_record(8).unwrap(), 203i64.to_le_bytes());
        assert!(!o.stored_columnar());
        assert!(matches!(
            o.gather_dense(&[12]),
            Err(Error::IndexOutOfRange { index: 12, len: 12 })
        ));
    }

    #[test]
    fn patched_places_of_a_run_and_of_scattered_records_agree() {
        let tmp = tempfile::tempdir().unwrap();
        let base = Concat::new(
            tmp.path().join("col"),
            vec![
                dense(tmp.path(), "a", &[0, 1, 2, 3, 4]),
                dense(tmp.path(), "b", &[5, 6, 7, 8, 9, 10, 11]),
                dense(tmp.path(), "c", &[12, 13]),
            ],
        )
        .unwrap();
        let layers = vec![
            vec![(vec![4], dense(tmp.path(), "p0", &[104]))],
            vec![
                (vec![0, 3, 6], dense(tmp.path(), "p1", &[100, 103, 106])),
                (vec![3, 4], dense(tmp.path(), "p2", &[203, 204])),
            ],
            vec![(vec![1], dense(tmp.path(), "p3", &[113]))],
        ];
        let o = Overlay::new(Box::new(base), &[5, 7, 2], layers, None).unwrap();
        // Patched physical records: 4, 5, 8, 9, 11, 13.
        let run: Vec<u64> = (3..14).collect();
        let pos = |hits: &[Hit]| hits.iter().map(|h| h.pos).collect::<Vec<_>>();
        let (phys, hits) = o.patched_places(&run).unwrap();
        assert_eq!(&*phys, &run[..]);
        assert_eq!(pos(&hits), [1, 2, 5, 6, 8, 10]);
        // Part 1's patched records 0, 3, 4, 6 are its places 0..4.
        assert_eq!(
            hits[2],
            Hit {
                pos: 5,
                part: 1,
                j: 1
            }
        );
        let scattered = [13, 0, 5, 4, 12];
        let (_, by_one) = o.patched_places(&scattered).unwrap();
        assert_eq!(pos(&by_one), [0, 2, 3]);
        assert_eq!(
            by_one[0],
            Hit {
                pos: 0,
                part: 2,
                j: 0
            }
        );
        assert_eq!(numbers(&o, &scattered), [113, 0, 100, 104, 12]);
        let (_, none) = o.patched_places(&[0, 1, 2]).unwrap();
        assert!(none.is_empty());
        assert!(o.patched_places(&[14]).is_err());
        // Through a selection: records 0..4 are physical 3, 4, 6, 11.
        let base = Concat::new(
            tmp.path().join("col2"),
            vec![dense(tmp.path(), "d", &(0..14).collect::<Vec<_>>())],
        )
        .unwrap();
        let rows: Arc<[u64]> = vec![3, 4, 6, 11].into();
        let layers = vec![vec![(vec![4, 11], dense(tmp.path(), "p4", &[1, 2]))]];
        let o = Overlay::new(Box::new(base), &[14], layers, Some(rows)).unwrap();
        let (phys, hits) = o.patched_places(&[0, 1, 2, 3]).unwrap();
        assert_eq!(&*phys, &[3, 4, 6, 11]);
        assert_eq!(pos(&hits), [1, 3]);
    }

    #[test]
    fn a_selection_maps_through_to_the_patched_records() {
        let tmp = tempfile::tempdir().unwrap();
        let base = dense(tmp.path(), "a", &[0, 1, 2, 3]);
        let layers = vec![vec![(vec![2], dense(tmp.path(), "p", &[22]))]];
        let rows: Arc<[u64]> = vec![0, 2, 3].into();
        let o = Overlay::new(Box::new(base), &[4], layers, Some(rows)).unwrap();
        assert_eq!(o.len(), 3);
        assert_eq!(numbers(&o, &[1, 2, 0]), [22, 3, 0]);
    }

    #[test]
    fn ragged_batches_keep_their_records_in_batch_order() {
        for keep in [true, false] {
            ragged_batches_in_batch_order(keep);
        }
    }

    #[test]
    fn patches_read_alike_when_their_values_are_not_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let make = |keep: bool| {
            let base = Concat::new(
                tmp.path().join(format!("col{keep}")),
                vec![dense(tmp.path(), &format!("a{keep}"), &[0, 1, 2, 3, 4, 5])],
            )
            .unwrap();
            let layers = vec![vec![
                (
                    vec![1, 4],
                    dense(tmp.path(), &format!("p{keep}"), &[11, 14]),
                ),
                (
                    vec![4, 5],
                    dense(tmp.path(), &format!("q{keep}"), &[24, 25]),
                ),
            ]];
            let o = Overlay::new(Box::new(base), &[6], layers, None).unwrap();
            if keep {
                o
            } else {
                o.keeping_nothing()
            }
        };
        let (kept, not) = (make(true), make(false));
        let idx = [5, 0, 4, 1, 4, 3];
        assert_eq!(numbers(&kept, &idx), [25, 0, 24, 11, 24, 3]);
        assert_eq!(numbers(&not, &idx), numbers(&kept, &idx));
        let (_, hits) = not.patched_places(&idx).unwrap();
        let p = not.patched(&hits).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p.read_record(1).unwrap(), 24i64.to_le_bytes());
    }

    fn ragged_batches_in_batch_order(keep: bool) {
        let tmp = tempfile::tempdir().unwrap();
        let base = text(tmp.path(), "a", &["zero", "one", "two", "three"]);
        let layers = vec![vec![(
            vec![1, 3],
            text(tmp.path(), "p", &["a much longer first value", "3"]),
        )]];
        let o = Overlay::new(Box::new(base), &[4], layers, None).unwrap();
        let o = if keep { o } else { o.keeping_nothing() };
        let batch = o.gather_ragged(&[3, 0, 1, 2, 1]).unwrap();
        let got: Vec<&[u8]> = (0..batch.len()).map(|i| batch.record(i).payload).collect();
        let want: [&[u8]; 5] = [
            b"3",
            b"zero",
            b"a much longer first value",
            b"two",
            b"a much longer first value",
        ];
        assert_eq!(got, want);
        // Spans ascend through the buffer, as readers that pack payloads
        // down in place need.
        assert!(batch.spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
        let untouched = o.gather_ragged(&[0, 2]).unwrap();
        assert_eq!(untouched.record(1).payload, b"two");
    }

    #[test]
    fn an_all_valid_base_takes_its_layers_nulls() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = Store::create(
            tmp.path().join("v"),
            Schema::dense(DType::Bool, &[]).unwrap(),
            Codec::Zstd,
            None,
        )
        .unwrap();
        s.append_dense(&[0, 1]).unwrap();
        s.close().unwrap();
        let v = Store::open_readonly(tmp.path().join("v")).unwrap();
        let o = Overlay::all_valid(
            Path::new("col.validity"),
            &[2, 3],
            vec![vec![], vec![(vec![0, 2], v)]],
            None,
        )
        .unwrap();
        assert_eq!(
            o.gather_dense(&[0, 1, 2, 3, 4]).unwrap().as_slice(),
            [1, 1, 0, 1, 1]
        );
        assert!(o.gather_ragged(&[0]).is_err());
    }

    #[test]
    fn patches_that_do_not_fit_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        dense(tmp.path(), "a", &[0, 1, 2]).close().unwrap();
        let base = || Box::new(Store::open_readonly(tmp.path().join("a")).unwrap()) as Base;
        let past = vec![vec![(vec![3], dense(tmp.path(), "p", &[9]))]];
        let err = Overlay::new(base(), &[3], past, None).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let wrong = vec![vec![(vec![0], text(tmp.path(), "t", &["x"]))]];
        assert!(Overlay::new(base(), &[3], wrong, None).is_err());
        assert!(Overlay::new(base(), &[2], vec![vec![]], None).is_err());
        let rows: Arc<[u64]> = vec![3].into();
        assert!(Overlay::new(base(), &[3], vec![vec![]], Some(rows)).is_err());
    }
}
