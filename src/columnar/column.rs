//! A columnar column of a table: the column files of its shards end to end
//! (as [`crate::Concat`] joins stores), optionally restricted to a
//! selection of rows (deletions, a view), read through [`Records`] like any
//! other column: numbers as dense scalars, text and bytes as ragged `uint8`
//! records, nulls through a validity view.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::decode::Decoded;
use super::file::ColumnFile;
use super::format::ValueKind;
use super::kept::kept;
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::io::Fs;
use crate::read::buffer::Buffer;
use crate::read::ragged::{encoded_len, write_prefix, RaggedBatch};
use crate::read::records::{check_dense_dst, ReadCounters, Records, Stats};
use crate::schema::{DType, Logical, Schema};
use crate::store::gather::{check_indices, Counters};

/// What a columnar column and its validity view share.
pub(crate) struct Inner {
    path: PathBuf,
    parts: Vec<ColumnFile>,
    /// Global row of each part's first row, then the total.
    starts: Vec<u64>,
    kind: ValueKind,
    /// Physical rows presented (None: all, in order).
    rows: Option<Arc<[u64]>>,
    counters: Counters,
}

/// A columnar column (see the module documentation).
pub struct Columnar {
    inner: Arc<Inner>,
    schema: Schema,
    logical: Logical,
    validity: Option<ValidityView>,
}

impl std::fmt::Debug for Columnar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Columnar")
            .field("path", &self.inner.path)
            .field("parts", &self.inner.parts.len())
            .field("len", &self.len())
            .finish()
    }
}

/// The Records schema of a column of `kind`.
pub fn schema_of(kind: ValueKind) -> Schema {
    match kind {
        ValueKind::Fixed(d) => Schema::dense(d, &[]).expect("a scalar schema"),
        ValueKind::Utf8 | ValueKind::Binary => Schema::ragged(DType::U8),
    }
}

/// How a table presents a column of `kind`.
pub fn logical_of(kind: ValueKind) -> Logical {
    match kind {
        ValueKind::Fixed(_) => Logical::Tensor,
        ValueKind::Utf8 => Logical::Utf8,
        ValueKind::Binary => Logical::Binary,
    }
}

impl Columnar {
    /// The column files in `dirs` on `fs`, end to end, presented as `path`
    /// (at least one; all of one kind), restricted to the physical rows
    /// `rows` when given.
    pub(crate) fn open(
        fs: &Fs,
        path: &Path,
        dirs: impl Iterator<Item = PathBuf>,
        rows: Option<Arc<[u64]>>,
    ) -> Result<Columnar> {
        let parts = dirs
            .map(|d| ColumnFile::open(fs, &d))
            .collect::<Result<Vec<_>>>()?;
        Columnar::from_parts(path, parts, rows)
    }

    /// The columnar column in the local directory `dir` (one file).
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Columnar> {
        let dir = dir.as_ref();
        Columnar::open(&Fs::Local, dir, std::iter::once(dir.to_path_buf()), None)
    }

    pub(crate) fn from_parts(
        path: &Path,
        parts: Vec<ColumnFile>,
        rows: Option<Arc<[u64]>>,
    ) -> Result<Columnar> {
        let Some(first) = parts.first() else {
            return Err(Error::InvalidValue(format!(
                "{}: a column needs at least one part",
                path.display()
            )));
        };
        let kind = first.footer().kind;
        if let Some(odd) = parts.iter().find(|p| p.footer().kind != kind) {
            return Err(Error::InvalidValue(format!(
                "{}: column file {} holds {:?} values, but {} holds {:?}",
                path.display(),
                odd.path().display(),
                odd.footer().kind,
                first.path().display(),
                kind
            )));
        }
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut at = 0u64;
        for p in &parts {
            starts.push(at);
            at += p.rows();
        }
        starts.push(at);
        if let Some(bad) = rows.as_ref().and_then(|r| r.iter().find(|&&r| r >= at)) {
            return Err(Error::InvalidValue(format!(
                "{}: a selection names row {bad}, but the column holds {at}",
                path.display()
            )));
        }
        let nullable = parts.iter().any(|p| p.footer().nullable);
        let inner = Arc::new(Inner {
            path: path.to_path_buf(),
            parts,
            starts,
            kind,
            rows,
            counters: Counters::default(),
        });
        Ok(Columnar {
            validity: nullable.then(|| ValidityView {
                inner: Arc::clone(&inner),
                schema: Schema::dense(DType::Bool, &[]).expect("a scalar schema"),
            }),
            schema: schema_of(kind),
            logical: logical_of(kind),
            inner,
        })
    }

    /// What the column holds.
    pub fn kind(&self) -> ValueKind {
        self.inner.kind
    }

    /// The column files, one per shard, in order.
    pub fn parts(&self) -> &[ColumnFile] {
        &self.inner.parts
    }

    /// Global row of each part's first row, then the total.
    pub fn starts(&self) -> &[u64] {
        &self.inner.starts
    }

    /// The physical rows presented, when not all of them.
    pub fn selection(&self) -> Option<&Arc<[u64]>> {
        self.inner.rows.as_ref()
    }

    /// Mean bytes of a value as Arrow holds it (text: its bytes and
    /// offset), from the footers.
    pub fn mean_value_bytes(&self) -> usize {
        match self.inner.kind {
            ValueKind::Fixed(d) => d.itemsize(),
            _ => {
                let (bytes, rows) = self.inner.parts.iter().fold((0u64, 0u64), |(b, r), p| {
                    let vb: u64 = p
                        .footer()
                        .entries
                        .iter()
                        .map(|e| e.decoded_size() as u64)
                        .sum();
                    (b + vb, r + p.rows())
                });
                (bytes / rows.max(1)) as usize + 4
            }
        }
    }

    /// The validity stream, for a column some row of which may be null
    /// (sharing the column's files).
    pub fn validity_view(&self) -> Option<ValidityView> {
        self.validity.clone()
    }

    /// Whether some row may be null.
    pub fn nullable(&self) -> bool {
        self.validity.is_some()
    }

    /// Nothing to release: the files close with the column.
    pub fn close(self) -> Result<()> {
        Ok(())
    }

    #[cfg(any(feature = "arrow", test))]
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

impl Inner {
    pub(crate) fn len(&self) -> u64 {
        match &self.rows {
            Some(r) => r.len() as u64,
            None => self.starts[self.parts.len()],
        }
    }

    #[cfg(feature = "arrow")]
    pub(crate) fn parts(&self) -> &[ColumnFile] {
        &self.parts
    }

    #[cfg(feature = "arrow")]
    pub(crate) fn kind(&self) -> ValueKind {
        self.kind
    }

    #[cfg(feature = "arrow")]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(feature = "arrow")]
    #[inline]
    pub(crate) fn selection(&self) -> Option<&Arc<[u64]>> {
        self.rows.as_ref()
    }

    /// The physical row of row `i`.
    #[inline]
    pub(crate) fn physical(&self, i: u64) -> u64 {
        match &self.rows {
            Some(r) => r[i as usize],
            None => i,
        }
    }

    /// The part, chunk and place in the chunk of physical row `p`.
    #[inline]
    pub(crate) fn locate(&self, p: u64) -> (usize, usize, usize) {
        let part = self.starts.partition_point(|&s| s <= p) - 1;
        let (chunk, at) = self.parts[part].locate(p - self.starts[part]);
        (part, chunk, at)
    }

    /// Finds every row `idx` (in `0..len`) and how it is read: a number
    /// in place when its file reads so and few rows of the chunk are asked
    /// for; else from its chunk kept decoded; text in place on the same
    /// terms, unless `keep` and the file's chunks fit
    /// half the budget and this one fits beside those kept (then decoded
    /// and kept without evicting another); else from its chunk decoded
    /// once per call (and kept when `keep`, evicting by recency).
    pub(crate) fn resolve(&self, idx: &[u64], keep: bool) -> Result<Resolved<'_>> {
        check_indices(idx, self.len())?;
        let located: Vec<(u32, u32, u32)> = idx
            .iter()
            .map(|&i| {
                let (part, chunk, at) = self.locate(self.physical(i));
                (part as u32, chunk as u32, at as u32)
            })
            .collect();
        // Rows of one chunk side by side: as they come when `idx` rises
        // (a sampler's batches), else in an order sorted by chunk.
        let chunk_of = |p: usize| (located[p].0, located[p].1);
        let order: Option<Vec<u32>> = (!located
            .windows(2)
            .all(|w| (w[0].0, w[0].1) <= (w[1].0, w[1].1)))
        .then(|| {
            let mut o: Vec<u32> = (0..located.len() as u32).collect();
            o.sort_unstable_by_key(|&p| chunk_of(p as usize));
            o
        });
        let at = |g: usize| order.as_ref().map_or(g, |o| o[g] as usize);
        // The process's kept chunks, looked up once a call.
        let k = kept();
        let numbers = matches!(self.kind, ValueKind::Fixed(_));
        let mut owned: Vec<Arc<Decoded>> = Vec::new();
        let mut rows = vec![(Where::Owned(0), 0u32); located.len()];
        let mut g = 0;
        while g < located.len() {
            let (part, chunk) = chunk_of(at(g));
            let mut end = g + 1;
            while end < located.len() && chunk_of(at(end)) == (part, chunk) {
                end += 1;
            }
            let file = &self.parts[part as usize];
            let c = chunk as usize;
            let sparse = ((end - g) as u64) * SPARSE < file.footer().entries[c].rows as u64;
            let w = if numbers && sparse && file.direct() {
                // A number read in place is one load from the file, less
                // than finding its chunk among the kept ones (measured:
                // half the time, at any table size), and keeps no memory.
                Where::Direct(file, chunk)
            } else if let Some(d) = file.kept_in(k, c) {
                owned.push(d);
                Where::Owned(owned.len() as u32 - 1)
            } else if file.direct()
                && sparse
                && (!keep || !file.keeps_for_random(k) || !file.has_room(k, c))
            {
                Where::Direct(file, chunk)
            } else if file.direct() && sparse {
                // Kept beside the others, never in their place.
                owned.push(file.chunk_into_room(c)?);
                Where::Owned(owned.len() as u32 - 1)
            } else {
                owned.push(file.chunk(c, keep)?);
                Where::Owned(owned.len() as u32 - 1)
            };
            for j in g..end {
                let p = at(j);
                rows[p] = (w, located[p].2);
            }
            g = end;
        }
        Ok(Resolved { owned, rows })
    }

    fn gather_fixed(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        let ValueKind::Fixed(dtype) = self.kind else {
            return Err(not_dense(&self.path));
        };
        let w = dtype.itemsize();
        check_dense_dst(idx.len(), w, dst.len())?;
        let r = self.resolve(idx, true)?;
        r.prefetch_rows();
        for (pos, out) in dst.chunks_exact_mut(w).enumerate() {
            r.copy_fixed(pos, w, out)?;
        }
        self.counters.add(idx.len(), dst.len());
        Ok(())
    }

    fn validity_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        let r = self.resolve(idx, true)?;
        for (pos, out) in dst.iter_mut().enumerate() {
            *out = u8::from(r.is_valid(pos)?);
        }
        Ok(())
    }

    /// Text or bytes rows `idx`: their values end to end and `len + 1`
    /// offsets (a null row's value empty).
    pub(crate) fn gather_values(&self, idx: &[u64], keep: bool) -> Result<(Vec<u8>, Vec<usize>)> {
        self.gather_values_valid(idx, keep)
            .map(|(values, offsets, _)| (values, offsets))
    }

    /// [`Inner::gather_values`] and each row's validity (None when no
    /// row's chunk holds a null).
    pub(crate) fn gather_values_valid(&self, idx: &[u64], keep: bool) -> Result<GatheredValues> {
        let r = self.resolve(idx, keep)?;
        r.prefetch_rows();
        r.prefetch_groups();
        let mut values = Vec::new();
        let mut offsets = Vec::with_capacity(idx.len() + 1);
        offsets.push(0);
        for pos in 0..r.len() {
            r.push_value(pos, &mut values)?;
            offsets.push(values.len());
        }
        let valid = match (0..r.len()).any(|pos| r.may_be_null(pos)) {
            true => Some(
                (0..r.len())
                    .map(|pos| r.is_valid(pos))
                    .collect::<Result<_>>()?,
            ),
            false => None,
        };
        Ok((values, offsets, valid))
    }
}

/// Text or bytes rows gathered: their values end to end, `len + 1`
/// offsets, and each row's validity (None: no row's chunk holds a null).
pub(crate) type GatheredValues = (Vec<u8>, Vec<usize>, Option<Vec<bool>>);

/// A chunk asked for by fewer than one in this many of its rows is read
/// in place rather than decoded, once keeping it would evict another.
const SPARSE: u64 = 8;

/// Where a resolved row's chunk is.
#[derive(Clone, Copy)]
enum Where<'a> {
    /// Decoded (kept or for this read): its place in `owned`.
    Owned(u32),
    /// Read in place from the file (its chunk).
    Direct(&'a ColumnFile, u32),
}

/// Rows of a read, each with its chunk and its place there.
pub(crate) struct Resolved<'a> {
    owned: Vec<Arc<Decoded>>,
    rows: Vec<(Where<'a>, u32)>,
}

impl Resolved<'_> {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    #[inline]
    fn decoded<'b>(&'b self, w: &'b Where<'_>) -> Option<&'b Decoded> {
        match w {
            Where::Owned(s) => Some(&*self.owned[*s as usize]),
            Where::Direct(..) => None,
        }
    }

    /// Loads ahead what reading each row in place starts from (see
    /// [`ColumnFile::prefetch_row`]).
    pub(crate) fn prefetch_rows(&self) {
        for (w, at) in &self.rows {
            if let Where::Direct(f, c) = w {
                f.prefetch_row(*c as usize, *at as usize);
            }
        }
    }

    /// Then, for text, each row's group ([`ColumnFile::prefetch_group`]).
    pub(crate) fn prefetch_groups(&self) {
        for (w, at) in &self.rows {
            if let Where::Direct(f, c) = w {
                f.prefetch_group(*c as usize, *at as usize);
            }
        }
    }

    /// Whether row `pos` holds a value.
    #[inline]
    pub(crate) fn is_valid(&self, pos: usize) -> Result<bool> {
        let (w, at) = &self.rows[pos];
        match (self.decoded(w), w) {
            (Some(d), _) => Ok(d.is_valid(*at as usize)),
            (None, Where::Direct(f, c)) => f.direct_valid(*c as usize, *at as usize),
            _ => unreachable!("a row is decoded or read in place"),
        }
    }

    /// Whether row `pos`'s chunk holds a null.
    #[inline]
    pub(crate) fn may_be_null(&self, pos: usize) -> bool {
        let (w, _) = &self.rows[pos];
        match (self.decoded(w), w) {
            (Some(d), _) => d.null_count > 0,
            (None, Where::Direct(f, c)) => f.footer().entries[*c as usize].null_count > 0,
            _ => unreachable!("a row is decoded or read in place"),
        }
    }

    /// Number `pos`'s `w` bytes (booleans: one byte, 0 or 1) into `out`.
    #[inline]
    pub(crate) fn copy_fixed(&self, pos: usize, w: usize, out: &mut [u8]) -> Result<()> {
        let (wh, at) = &self.rows[pos];
        match (self.decoded(wh), wh) {
            (Some(d), _) => {
                d.copy_fixed(*at as usize, w, out);
                Ok(())
            }
            (None, Where::Direct(f, c)) => f.direct_fixed(*c as usize, *at as usize, w, out),
            _ => unreachable!("a row is decoded or read in place"),
        }
    }

    /// Appends text or bytes row `pos`'s value to `out`.
    #[inline]
    pub(crate) fn push_value(&self, pos: usize, out: &mut Vec<u8>) -> Result<()> {
        let (wh, at) = &self.rows[pos];
        match (self.decoded(wh), wh) {
            (Some(d), _) => {
                out.extend_from_slice(d.value(*at as usize));
                Ok(())
            }
            (None, Where::Direct(f, c)) => f.direct_bytes(*c as usize, *at as usize, out),
            _ => unreachable!("a row is decoded or read in place"),
        }
    }
}

fn not_dense(path: &Path) -> Error {
    Error::InvalidValue(format!(
        "{} is a column of text or bytes (a ragged store), not a dense store",
        path.display()
    ))
}

/// A text or bytes value as a ragged record's logical bytes: the 1-D
/// record of its bytes, or the 0-d record `0` for an empty value.
fn record_len(v: &[u8]) -> usize {
    if v.is_empty() {
        encoded_len(0, 1)
    } else {
        encoded_len(1, v.len())
    }
}

fn write_record(v: &[u8], out: &mut [u8]) {
    if v.is_empty() {
        write_prefix(&[], &mut out[..8]);
        out[8] = 0;
    } else {
        write_prefix(&[v.len() as u64], &mut out[..16]);
        out[16..].copy_from_slice(v);
    }
}

impl Records for Columnar {
    fn path(&self) -> &Path {
        &self.inner.path
    }
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn codec(&self) -> Codec {
        match self.inner.parts.first() {
            Some(p) if p.footer().compressed => Codec::Zstd,
            _ => Codec::Raw,
        }
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn logical_len(&self, i: u64) -> Option<usize> {
        if i >= self.len() {
            return None;
        }
        match self.inner.kind {
            ValueKind::Fixed(d) => Some(d.itemsize()),
            _ => {
                let (v, _) = self.inner.gather_values(&[i], true).ok()?;
                Some(record_len(&v))
            }
        }
    }
    fn stats(&self) -> Stats {
        let data: u64 = self.inner.parts.iter().map(ColumnFile::data_bytes).sum();
        Stats {
            records: self.len(),
            live_bytes: data,
            data_bytes: data,
            reclaimable: 0,
            raw_records: 0,
        }
    }
    fn read_counters(&self) -> ReadCounters {
        self.inner.counters.get()
    }
    fn is_readonly(&self) -> bool {
        true
    }
    fn checksum(&self) -> bool {
        true
    }
    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        self.inner.gather_fixed(idx, dst)
    }
    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        if !self.inner.kind.is_bytes() {
            return Err(Error::InvalidValue(format!(
                "{} is a column of numbers (a dense store), not a ragged store",
                self.inner.path.display()
            )));
        }
        let (values, offsets) = self.inner.gather_values(idx, true)?;
        let value = |pos: usize| &values[offsets[pos]..offsets[pos + 1]];
        let mut spans = Vec::with_capacity(idx.len());
        let mut total = 0usize;
        for pos in 0..idx.len() {
            let n = record_len(value(pos));
            spans.push((total, n));
            total += n.next_multiple_of(8);
        }
        let mut buf = Buffer::try_new(total).ok_or_else(|| Error::OutOfMemory {
            bytes: total as u64,
            what: format!("a gather of {} records", idx.len()),
        })?;
        let out = buf.as_mut_slice();
        for (pos, &(start, n)) in spans.iter().enumerate() {
            write_record(value(pos), &mut out[start..start + n]);
        }
        let bytes = spans.iter().map(|s| s.1).sum();
        self.inner.counters.add(idx.len(), bytes);
        Ok(RaggedBatch::new(buf, spans, 1))
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        match self.inner.kind {
            ValueKind::Fixed(d) => {
                let mut out = vec![0u8; d.itemsize()];
                self.inner.gather_fixed(&[i], &mut out)?;
                Ok(out)
            }
            _ => {
                let (v, _) = self.inner.gather_values(&[i], true)?;
                let mut out = vec![0u8; record_len(&v)];
                write_record(&v, &mut out);
                Ok(out)
            }
        }
    }
    fn logical(&self) -> Logical {
        self.logical
    }
    fn validity(&self) -> Option<&dyn Records> {
        self.validity.as_ref().map(|v| v as &dyn Records)
    }
    fn columnar(&self) -> Option<&Columnar> {
        Some(self)
    }
}

/// The validity of a nullable columnar column, as a validity stream: dense
/// `bool` scalars, false for a null row.
#[derive(Clone)]
pub struct ValidityView {
    inner: Arc<Inner>,
    schema: Schema,
}

impl Records for ValidityView {
    fn path(&self) -> &Path {
        &self.inner.path
    }
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn codec(&self) -> Codec {
        Codec::Zstd
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn logical_len(&self, i: u64) -> Option<usize> {
        (i < self.len()).then_some(1)
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
        true
    }
    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        if dst.len() != idx.len() {
            return Err(Error::InvalidValue(format!(
                "a gather of {} validity bits needs {} bytes, got {}",
                idx.len(),
                idx.len(),
                dst.len()
            )));
        }
        self.inner.validity_into(idx, dst)
    }
    fn gather_ragged(&self, _idx: &[u64]) -> Result<RaggedBatch> {
        Err(Error::InvalidValue(format!(
            "the validity of {} is dense, not ragged",
            self.inner.path.display()
        )))
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        let mut out = vec![0u8; 1];
        self.inner.validity_into(&[i], &mut out)?;
        Ok(out)
    }
}
