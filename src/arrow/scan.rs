//! One scan of a table of equal-length streams, the one every reader runs:
//! projected columns, row ranges, a row limit, batches bounded in bytes and
//! rows, and an optional filter evaluated on a few (cheap) columns before
//! the projected columns are gathered for the rows that pass.
//!
//! The Arrow readers ([`super::TableReader`], [`super::ColumnReader`]), the
//! DataFusion provider (its predicate is the filter), the Python binding's
//! table scan (polars, Ray read tasks and pandas call it; a polars
//! predicate is the filter) and Parquet export all read through it.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{
    make_array, Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array,
};
use arrow_data::transform::MutableArrayData;
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, SchemaRef};

use crate::error::{Error, Result};
use crate::read::records::StoreAccess;
use crate::store;

use super::gather::{arrow_err, gather_array};
use super::types::table_schema;

/// Decides, for a batch of the filter's columns, which rows to keep (null
/// counts as false). Its errors end the scan and reach the caller as they
/// are (wrap a foreign error in `ArrowError::ExternalError`).
pub type Filter =
    Box<dyn FnMut(&RecordBatch) -> std::result::Result<BooleanArray, ArrowError> + Send>;

/// Rows the filter is evaluated on at once (its columns are cheap scalars,
/// so a few hundred KiB).
pub const FILTER_ROWS: usize = 1 << 15;

/// Rows sized at once when bounding a batch in bytes.
const BYTES_WINDOW: u64 = 1024;

struct Filtering {
    /// Indices into the scan's full schema, and their schema.
    columns: Vec<usize>,
    schema: SchemaRef,
    keep: Filter,
    rows: usize,
    /// Rows that passed but are not yet in an output batch: (row, chunk
    /// number, position in that chunk, logical bytes of its output row).
    pending: VecDeque<(u64, usize, usize, usize)>,
    /// The filter batches the pending rows came from (`chunks[0]` is
    /// chunk number `first_chunk`): projected columns that the filter read
    /// are taken from them rather than gathered again.
    chunks: VecDeque<RecordBatch>,
    first_chunk: usize,
}

/// A scan of `streams` (an optional UInt64 index column first, holding the
/// row number). Build it with [`Scan::new`] and the setters, then iterate.
pub struct Scan<S> {
    streams: Arc<[(String, S)]>,
    index: bool,
    schema: SchemaRef,
    len: u64,
    projection: Vec<usize>,
    out_schema: SchemaRef,
    /// Output bytes of a row's fixed-width columns, and the projected
    /// streams whose bytes vary per row.
    fixed_bytes: usize,
    ragged: Vec<usize>,
    max_bytes: usize,
    max_rows: usize,
    remaining: usize,
    ranges: Vec<Range<u64>>,
    /// The current range, and the next row within it.
    at: usize,
    pos: u64,
    filter: Option<Filtering>,
    /// Whether every column the scan reads is columnar (or the index):
    /// then it reads stripes of rows as whole arrays (see `next_stripe`).
    columnar: bool,
    /// A predicate evaluated on columnar chunks as they are stored, before
    /// anything else of a stripe is read: the stream index of each column
    /// it names, and the predicate.
    pred: Option<(Vec<(String, usize)>, crate::columnar::Pred)>,
    /// Estimated output bytes of a row of the projected columns (stripes).
    row_bytes: usize,
}

/// Rows of a filtered stripe at most (a few columnar chunks of each
/// column: the filter sees batches of this size).
const STRIPE_ROWS: u64 = 1 << 16;
/// Rows of any stripe at most (the byte bound usually ends it first).
const STRIPE_MAX_ROWS: u64 = 1 << 22;

fn to_arrow(e: Error) -> ArrowError {
    ArrowError::ExternalError(Box::new(e))
}

impl<S: StoreAccess> Scan<S> {
    /// Every column of every row, in batches of at most
    /// [`super::DEFAULT_BATCH_BYTES`]. The streams must have one length.
    pub fn new(
        streams: impl Into<Arc<[(String, S)]>>,
        index_column: Option<String>,
    ) -> Result<Scan<S>> {
        let streams = streams.into();
        let mut len = None;
        for (name, s) in streams.iter() {
            if index_column.as_deref() == Some(name.as_str()) {
                return Err(Error::InvalidValue(format!(
                    "stream {name:?} has the index column's name"
                )));
            }
            let n = s.with(|s| Ok(s.len()))?;
            match len {
                None => len = Some(n),
                Some(l) if l != n => {
                    return Err(Error::InvalidValue(format!(
                        "streams must all have the same length, but {name:?} has {n} records and {:?} has {l}",
                        streams[0].0
                    )))
                }
                _ => {}
            }
        }
        let schema = table_schema(&streams, index_column.as_deref())?;
        let len = len.unwrap_or(0);
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        let mut scan = Scan {
            index: index_column.is_some(),
            out_schema: Arc::clone(&schema),
            schema,
            streams,
            len,
            projection: Vec::new(),
            fixed_bytes: 0,
            ragged: Vec::new(),
            max_bytes: super::DEFAULT_BATCH_BYTES,
            max_rows: usize::MAX,
            remaining: usize::MAX,
            ranges: std::iter::once(0..len).collect(),
            at: 0,
            pos: 0,
            filter: None,
            columnar: false,
            pred: None,
            row_bytes: 8,
        };
        scan.set_projection(all)?;
        Ok(scan)
    }

    /// The table's schema (the index column first, when there is one).
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The schema of the batches.
    pub fn out_schema(&self) -> SchemaRef {
        Arc::clone(&self.out_schema)
    }

    /// Rows of the table.
    pub fn table_len(&self) -> u64 {
        self.len
    }

    /// The index in [`Scan::schema`] of column `name`.
    pub fn column_index(&self, name: &str) -> Result<usize> {
        self.schema.index_of(name).map_err(|_| {
            let names: Vec<&str> = self
                .schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            Error::InvalidValue(format!(
                "the table has no column {name:?}; columns: {names:?}"
            ))
        })
    }

    fn check_columns(&self, what: &str, columns: &[usize]) -> Result<()> {
        let n = self.schema.fields().len();
        match columns.iter().find(|&&c| c >= n) {
            Some(c) => Err(Error::InvalidValue(format!(
                "{what} names column {c}, but the table has {n} columns"
            ))),
            None => Ok(()),
        }
    }

    fn set_projection(&mut self, columns: Vec<usize>) -> Result<()> {
        self.check_columns("projection", &columns)?;
        let offset = usize::from(self.index);
        let mut fixed_bytes = 8;
        let mut ragged = Vec::new();
        for &c in &columns {
            if c >= offset {
                match self.streams[c - offset]
                    .1
                    .with(|s| Ok(s.schema().record_width()))?
                {
                    Some(w) => fixed_bytes += w as usize,
                    None => ragged.push(c - offset),
                }
            }
        }
        self.out_schema = Arc::new(
            self.schema
                .project(&columns)
                .map_err(|e| Error::InvalidValue(e.to_string()))?,
        );
        self.projection = columns;
        self.fixed_bytes = fixed_bytes;
        self.ragged = ragged;
        self.plan_stripes()
    }

    /// Whether every column read is columnar (or the index), and the bytes
    /// a row of the projection is expected to take then.
    fn plan_stripes(&mut self) -> Result<()> {
        let offset = usize::from(self.index);
        let mut columns: Vec<usize> = self.projection.clone();
        if let Some(f) = &self.filter {
            columns.extend(f.columns.iter().copied());
        }
        let mut all = true;
        let mut bytes = 8usize;
        for &c in &columns {
            if c < offset {
                continue;
            }
            let (is, per_row) = self.streams[c - offset].1.with(|s| {
                Ok(match s.columnar() {
                    Some(col) => (true, col.mean_value_bytes()),
                    None => (false, 0),
                })
            })?;
            all &= is;
            if self.projection.contains(&c) {
                bytes += per_row;
            }
        }
        self.columnar = all;
        self.row_bytes = bytes.max(1);
        Ok(())
    }

    /// Outputs the columns at `columns` (indices into [`Scan::schema`], in
    /// output order).
    pub fn project(mut self, columns: Vec<usize>) -> Result<Self> {
        self.set_projection(columns)?;
        Ok(self)
    }

    /// Reads only `ranges` (sorted, disjoint, within the table), in order.
    pub fn rows(mut self, ranges: Vec<Range<u64>>) -> Result<Self> {
        let mut end = 0;
        for r in &ranges {
            if r.start < end || r.end < r.start || r.end > self.len {
                return Err(Error::InvalidValue(format!(
                    "row ranges must be sorted, disjoint and within the table's {} rows, got {:?}",
                    self.len, ranges
                )));
            }
            end = r.end;
        }
        self.pos = ranges.first().map_or(0, |r| r.start);
        self.ranges = ranges;
        self.at = 0;
        Ok(self)
    }

    /// Stops after `rows` output rows (counted after the filter).
    pub fn limit(mut self, rows: usize) -> Self {
        self.remaining = rows;
        self
    }

    /// Bounds each batch to about `bytes` of logical payload (one row at
    /// least).
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes.max(1);
        self
    }

    /// Bounds each batch to `rows` rows.
    pub fn max_rows(mut self, rows: usize) -> Self {
        self.max_rows = rows.max(1);
        self
    }

    /// Keeps only the rows `keep` accepts. It sees batches of the columns
    /// at `columns` (indices into [`Scan::schema`]) of up to `rows` rows
    /// ([`FILTER_ROWS`] is a good size); the projected columns are then
    /// gathered for the rows that pass only.
    pub fn filter(mut self, columns: Vec<usize>, keep: Filter, rows: usize) -> Result<Self> {
        self.check_columns("the filter", &columns)?;
        let schema = Arc::new(
            self.schema
                .project(&columns)
                .map_err(|e| Error::InvalidValue(e.to_string()))?,
        );
        self.filter = Some(Filtering {
            columns,
            schema,
            keep,
            rows: rows.max(1),
            pending: VecDeque::new(),
            chunks: VecDeque::new(),
            first_chunk: 0,
        });
        self.plan_stripes()?;
        Ok(self)
    }

    /// Keeps only the rows `pred` accepts (see [`crate::columnar::Pred`]),
    /// evaluated on the stored chunks of the columnar columns it names
    /// before the projected columns are read for the rows that pass. It
    /// applies when every column the scan reads is columnar and unselected
    /// (no deleted rows, no view); otherwise, or when a column it names is
    /// not such a column, it is not applied at all (returns false): the
    /// caller then filters the rows itself.
    pub fn native_filter(&mut self, pred: crate::columnar::Pred) -> Result<bool> {
        let mut named = Vec::new();
        for c in pred.columns() {
            let Ok(i) = self.schema.index_of(c) else {
                return Ok(false);
            };
            let offset = usize::from(self.index);
            if i < offset {
                return Ok(false);
            }
            let plain = self.streams[i - offset]
                .1
                .with(|s| Ok(s.columnar().is_some_and(|col| col.selection().is_none())))?;
            if !plain {
                return Ok(false);
            }
            named.push((c.to_owned(), i - offset));
        }
        let offset = usize::from(self.index);
        let unselected =
            self.projection
                .iter()
                .filter(|&&c| c >= offset)
                .try_fold(true, |ok, &c| {
                    self.streams[c - offset].1.with(|s| {
                        Ok(ok && s.columnar().is_some_and(|col| col.selection().is_none()))
                    })
                })?;
        if !self.columnar || !unselected || self.filter.is_some() {
            return Ok(false);
        }
        self.pred = Some((named, pred));
        Ok(true)
    }

    /// Whether the native filter the scan applies keeps exactly the rows
    /// where it holds ([`crate::columnar::Pred::exact`]); false without one.
    pub fn native_exact(&self) -> Result<bool> {
        let Some((named, pred)) = &self.pred else {
            return Ok(false);
        };
        let mut kinds = Vec::with_capacity(named.len());
        for (name, i) in named {
            let kind = self.streams[*i]
                .1
                .with(|s| Ok(s.columnar().map(|c| c.kind())))?;
            kinds.push((name.as_str(), kind));
        }
        Ok(pred.exact(&|c| kinds.iter().find(|(n, _)| *n == c).and_then(|(_, k)| *k)))
    }

    /// The next stripe of the row ranges: at most `rows` rows, within one
    /// range; None at the end.
    fn take_stripe(&mut self, rows: u64) -> Option<Range<u64>> {
        while self.at < self.ranges.len() {
            let end = self.ranges[self.at].end;
            if self.pos < end {
                let lo = self.pos;
                let hi = end.min(lo + rows.max(1));
                self.pos = hi;
                return Some(lo..hi);
            }
            self.at += 1;
            if let Some(r) = self.ranges.get(self.at) {
                self.pos = r.start;
            }
        }
        None
    }

    /// Column `c` (an index into the schema) of rows `rows` as one array.
    fn stripe_column(&self, c: usize, rows: &Range<u64>) -> Result<ArrayRef> {
        let offset = usize::from(self.index);
        if c < offset {
            return Ok(Arc::new(UInt64Array::from_iter_values(rows.clone())));
        }
        self.streams[c - offset].1.with(|s| {
            let Some(col) = s.columnar() else {
                return gather_array(s, &rows.clone().collect::<Vec<u64>>());
            };
            match col.selection() {
                None => col.read_range(rows.start, rows.end),
                Some(_) => {
                    let ids: Vec<u64> = rows.clone().collect();
                    col.take_array(&ids)
                }
            }
        })
    }

    /// The next batch of a scan of columnar columns: stripes of rows read
    /// as whole arrays (slices of the decoded chunks), filtered by the
    /// filter's mask when there is one; empty stripes are skipped.
    fn next_stripe(&mut self) -> std::result::Result<Option<RecordBatch>, ArrowError> {
        let bound = (self.max_bytes / self.row_bytes).max(1) as u64;
        loop {
            if self.remaining == 0 {
                return Ok(None);
            }
            let cap = if self.filter.is_some() {
                STRIPE_ROWS
            } else {
                STRIPE_MAX_ROWS
            };
            let mut rows = cap.min(bound).min(self.max_rows as u64);
            if self.filter.is_none() {
                rows = rows.min(self.remaining as u64);
            }
            let Some(stripe) = self.take_stripe(rows) else {
                return Ok(None);
            };
            let n = (stripe.end - stripe.start) as usize;
            let mut filtered: Vec<(usize, ArrayRef)> = Vec::new();
            // Columns whose rows kept are read already (filtered).
            let mut done: Vec<(usize, ArrayRef)> = Vec::new();
            let mask = match self.filter.as_ref().map(|f| f.columns.clone()) {
                None if self.pred.is_some() => 'mask: {
                    let (named, pred) = self.pred.as_ref().expect("a predicate");
                    let offset = usize::from(self.index);
                    // One comparison of a column the batch projects: its
                    // rows kept and their values in one pass (a narrowed
                    // chunk compared as stored, only the rows kept widened).
                    let single = match pred {
                        crate::columnar::Pred::Cmp(c) => Some(&c.column),
                        crate::columnar::Pred::Text(name, ..) => Some(name),
                        _ => None,
                    };
                    if let Some(name) = single {
                        let i = named.iter().find(|(c, _)| c == name).map_or(0, |(_, i)| *i);
                        if self.projection.contains(&(i + offset)) {
                            let got = self.streams[i].1.with(|s| match s.columnar() {
                                Some(col) => {
                                    col.filter_range(stripe.start, stripe.end, pred).map(Some)
                                }
                                None => Ok(None),
                            });
                            if let Some((bits, kept)) = got.map_err(to_arrow)? {
                                done.push((i + offset, kept));
                                break 'mask Some(BooleanArray::new(bits, None));
                            }
                        }
                    }
                    // A column the batch projects is read whole anyway: its
                    // comparisons run on what is read (read once); the
                    // others on the stored chunks.
                    let mut read: Vec<(usize, ArrayRef)> = Vec::new();
                    let mut failed = None;
                    let bits = pred.eval_with(n, &mut |leaf| {
                        let name = leaf.columns()[0];
                        let i = named.iter().find(|(c, _)| c == name).map_or(0, |(_, i)| *i);
                        if self.projection.contains(&(i + offset)) {
                            // No chunk of the stripe can match: nothing read.
                            if let crate::columnar::Pred::Cmp(c) = leaf {
                                let may = self.streams[i].1.with(|s| {
                                    Ok(s.columnar().is_none_or(|col| {
                                        col.may_match(stripe.start, stripe.end, c)
                                    }))
                                })?;
                                if !may {
                                    return Ok(arrow_buffer::BooleanBuffer::new_unset(n));
                                }
                            }
                            let array = match read.iter().find(|(c, _)| *c == i + offset) {
                                Some((_, a)) => Arc::clone(a),
                                None => {
                                    let a = self.stripe_column(i + offset, &stripe)?;
                                    read.push((i + offset, Arc::clone(&a)));
                                    a
                                }
                            };
                            return crate::columnar::compare_array(array.as_ref(), leaf);
                        }
                        self.streams[i].1.with(|s| match s.columnar() {
                            Some(col) => leaf.eval_leaf(col, stripe.start, stripe.end),
                            // Changed under the scan: every row passes.
                            None => Ok(arrow_buffer::BooleanBuffer::new_set(n)),
                        })
                    });
                    let bits = match bits {
                        Ok(b) => b,
                        Err(e) => {
                            failed = Some(e);
                            arrow_buffer::BooleanBuffer::new_unset(0)
                        }
                    };
                    if let Some(e) = failed {
                        return Err(to_arrow(e));
                    }
                    filtered = read;
                    Some(BooleanArray::new(bits, None))
                }
                None => None,
                Some(columns) => {
                    for &c in &columns {
                        filtered.push((c, self.stripe_column(c, &stripe).map_err(to_arrow)?));
                    }
                    let f = self.filter.as_mut().expect("a filter");
                    let batch = RecordBatch::try_new_with_options(
                        Arc::clone(&f.schema),
                        filtered.iter().map(|(_, a)| Arc::clone(a)).collect(),
                        &RecordBatchOptions::new().with_row_count(Some(n)),
                    )?;
                    let mask = (f.keep)(&batch)?;
                    if mask.len() != n {
                        return Err(ArrowError::ComputeError(format!(
                            "the scan's filter gave {} values for a batch of {n} rows",
                            mask.len()
                        )));
                    }
                    // Null counts as false.
                    let mask = match mask.nulls() {
                        Some(nulls) => BooleanArray::new(mask.values() & nulls.inner(), None),
                        None => mask,
                    };
                    Some(mask)
                }
            };
            let kept = mask.as_ref().map_or(n, |m| m.true_count());
            if kept == 0 {
                continue;
            }
            let mut arrays = Vec::with_capacity(self.projection.len());
            let offset = usize::from(self.index);
            for &c in &self.projection {
                if let Some((_, a)) = done.iter().find(|(dc, _)| *dc == c) {
                    arrays.push(Arc::clone(a));
                    continue;
                }
                let a = match filtered.iter().find(|(fc, _)| *fc == c) {
                    Some((_, a)) => Arc::clone(a),
                    // The index column of the rows kept, made as such.
                    None if c < offset && kept < n => {
                        let m = mask.as_ref().expect("a mask");
                        let ids = m.values().set_indices().map(|i| stripe.start + i as u64);
                        arrays.push(Arc::new(UInt64Array::from_iter_values(ids)) as ArrayRef);
                        continue;
                    }
                    None if mask.is_some() && kept <= n / 4096 => {
                        // Very few rows pass (fewer than chunks): gather just those.
                        let m = mask.as_ref().expect("a mask");
                        let ids: Vec<u64> = m
                            .values()
                            .set_indices()
                            .map(|i| stripe.start + i as u64)
                            .collect();
                        arrays.push(self.gather_one(c, &ids).map_err(to_arrow)?);
                        continue;
                    }
                    None => self.stripe_column(c, &stripe).map_err(to_arrow)?,
                };
                arrays.push(match &mask {
                    Some(m) if kept < n => arrow_select::filter::filter(a.as_ref(), m)?,
                    _ => a,
                });
            }
            let batch = RecordBatch::try_new_with_options(
                Arc::clone(&self.out_schema),
                arrays,
                &RecordBatchOptions::new().with_row_count(Some(kept)),
            )?;
            let batch = if kept > self.remaining {
                batch.slice(0, self.remaining)
            } else {
                batch
            };
            self.remaining -= batch.num_rows();
            return Ok(Some(batch));
        }
    }

    /// Column `c` of the rows `ids` (record ids, ascending).
    fn gather_one(&self, c: usize, ids: &[u64]) -> Result<ArrayRef> {
        let offset = usize::from(self.index);
        if c < offset {
            return Ok(Arc::new(UInt64Array::from(ids.to_vec())));
        }
        self.streams[c - offset].1.with(|s| gather_array(s, ids))
    }

    /// Gathers the columns at `columns` at rows `ids` as a batch of `schema`.
    fn gather(&self, columns: &[usize], ids: &[u64], schema: &SchemaRef) -> Result<RecordBatch> {
        let offset = usize::from(self.index);
        // A scan touches the whole table over time: keep large records out
        // of the process's mapped pages.
        let arrays = store::streaming(|| {
            columns
                .iter()
                .map(|&c| -> Result<ArrayRef> {
                    if c < offset {
                        Ok(Arc::new(UInt64Array::from(ids.to_vec())))
                    } else {
                        self.streams[c - offset].1.with(|s| gather_array(s, ids))
                    }
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let opts = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &opts).map_err(arrow_err)
    }

    /// The output batch of rows that passed the filter: the projected
    /// columns the filter read come from its batches, the rest are gathered.
    fn assemble(&mut self, taken: &[(u64, usize, usize, usize)]) -> Result<RecordBatch> {
        let ids: Vec<u64> = taken.iter().map(|t| t.0).collect();
        let f = self.filter.as_ref().expect("a filter");
        let gathered: Vec<usize> = self
            .projection
            .iter()
            .copied()
            .filter(|c| !f.columns.contains(c))
            .collect();
        let schema = Arc::new(
            self.schema
                .project(&gathered)
                .map_err(|e| Error::InvalidValue(e.to_string()))?,
        );
        let mut gathered = self
            .gather(&gathered, &ids, &schema)?
            .columns()
            .to_vec()
            .into_iter();
        let f = self.filter.as_mut().expect("a filter");
        let mut arrays = Vec::with_capacity(self.projection.len());
        for c in &self.projection {
            match f.columns.iter().position(|fc| fc == c) {
                Some(j) => {
                    arrays.push(take_runs(&f.chunks, f.first_chunk, j, taken).map_err(arrow_err)?)
                }
                None => arrays.push(gathered.next().expect("one gathered column per place")),
            }
        }
        // Drop the chunks no pending row refers to any more.
        let keep_from = f
            .pending
            .front()
            .map_or(f.first_chunk + f.chunks.len(), |p| p.1);
        while f.first_chunk < keep_from && !f.chunks.is_empty() {
            f.chunks.pop_front();
            f.first_chunk += 1;
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        RecordBatch::try_new_with_options(Arc::clone(&self.out_schema), arrays, &opts)
            .map_err(arrow_err)
    }

    /// Logical bytes of the output rows `rows`: one call into each ragged
    /// stream for all of them (a binding's stream takes its lock per call).
    fn rows_bytes(&self, rows: impl Iterator<Item = u64> + Clone) -> Result<Vec<usize>> {
        let mut bytes: Vec<usize> = rows.clone().map(|_| self.fixed_bytes).collect();
        for &i in &self.ragged {
            self.streams[i].1.with(|s| {
                for (b, row) in bytes.iter_mut().zip(rows.clone()) {
                    *b += s.logical_len(row).unwrap_or(0);
                }
                Ok(())
            })?;
        }
        Ok(bytes)
    }

    /// The next rows of the row ranges, in order: as many as fit `max_bytes`
    /// of output (`max_rows` at most; one at least), or None at the end.
    fn next_rows(&mut self, max_bytes: usize, max_rows: usize) -> Result<Option<Vec<u64>>> {
        let mut ids = Vec::new();
        let mut bytes = 0usize;
        let bounded = max_bytes != usize::MAX;
        while self.at < self.ranges.len() {
            let end = self.ranges[self.at].end;
            while self.pos < end {
                // Row sizes a window at a time; the window's unused tail is
                // sized again by the next call.
                let room = (max_rows - ids.len().min(max_rows)).max(1) as u64;
                let window = (end - self.pos).min(room).min(BYTES_WINDOW);
                let sizes = if bounded {
                    self.rows_bytes(self.pos..self.pos + window)?
                } else {
                    vec![0; window as usize]
                };
                for b in sizes {
                    if !ids.is_empty() && (bytes + b > max_bytes || ids.len() >= max_rows) {
                        return Ok(Some(ids));
                    }
                    bytes += b;
                    ids.push(self.pos);
                    self.pos += 1;
                }
            }
            self.at += 1;
            if let Some(r) = self.ranges.get(self.at) {
                self.pos = r.start;
            }
        }
        Ok((!ids.is_empty()).then_some(ids))
    }

    /// Runs the filter on the next rows and queues those that pass; false
    /// once the row ranges are exhausted.
    fn refill(&mut self) -> std::result::Result<bool, ArrowError> {
        let Some(rows) = self.filter.as_ref().map(|f| f.rows) else {
            return Ok(false);
        };
        let Some(ids) = self.next_rows(usize::MAX, rows).map_err(to_arrow)? else {
            return Ok(false);
        };
        let f = self.filter.as_ref().expect("a filter");
        let batch = self.gather(&f.columns, &ids, &f.schema).map_err(to_arrow)?;
        let f = self.filter.as_mut().expect("a filter");
        let mask = (f.keep)(&batch)?;
        if mask.len() != ids.len() {
            return Err(ArrowError::ComputeError(format!(
                "the scan's filter gave {} values for a batch of {} rows",
                mask.len(),
                ids.len()
            )));
        }
        let kept: Vec<(usize, u64)> = ids
            .into_iter()
            .zip(mask.iter())
            .enumerate()
            .filter_map(|(at, (id, keep))| keep.unwrap_or(false).then_some((at, id)))
            .collect();
        let sizes = self
            .rows_bytes(kept.iter().map(|&(_, id)| id))
            .map_err(to_arrow)?;
        let f = self.filter.as_mut().expect("a filter");
        let chunk = f.first_chunk + f.chunks.len();
        let before = f.pending.len();
        f.pending.extend(
            kept.into_iter()
                .zip(sizes)
                .map(|((at, id), b)| (id, chunk, at, b)),
        );
        if f.pending.len() > before {
            f.chunks.push_back(batch);
        } else if f.chunks.is_empty() {
            f.first_chunk += 1;
        } else {
            // Keep chunk numbers dense: an empty placeholder for a chunk
            // no row came from.
            f.chunks
                .push_back(RecordBatch::new_empty(Arc::clone(&f.schema)));
        }
        Ok(true)
    }

    /// The next batch, or None at the end.
    pub fn next_batch(&mut self) -> std::result::Result<Option<RecordBatch>, ArrowError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        if self.columnar {
            return self.next_stripe();
        }
        let max_rows = self.max_rows.min(self.remaining);
        let ids = if self.filter.is_none() {
            match self.next_rows(self.max_bytes, max_rows).map_err(to_arrow)? {
                Some(ids) => ids,
                None => return Ok(None),
            }
        } else {
            // The projected columns are gathered for the rows that passed,
            // in batches as large as the bounds allow (few, large gathers).
            let mut taken = Vec::new();
            let mut bytes = 0usize;
            loop {
                while let Some(&row) = self.filter.as_ref().and_then(|f| f.pending.front()) {
                    let b = row.3;
                    if !taken.is_empty() && (bytes + b > self.max_bytes || taken.len() >= max_rows)
                    {
                        break;
                    }
                    bytes += b;
                    taken.push(row);
                    self.filter.as_mut().and_then(|f| f.pending.pop_front());
                }
                let queued = self.filter.as_ref().is_some_and(|f| !f.pending.is_empty());
                if queued || taken.len() >= max_rows || !self.refill()? {
                    break; // the batch is full, or the row ranges are exhausted
                }
            }
            if taken.is_empty() {
                return Ok(None);
            }
            let batch = self.assemble(&taken).map_err(to_arrow)?;
            self.remaining -= taken.len();
            return Ok(Some(batch));
        };
        self.remaining -= ids.len();
        self.gather(&self.projection, &ids, &self.out_schema)
            .map(Some)
            .map_err(to_arrow)
    }
}

/// Column `column` of the filter batches at the rows `taken` (in order),
/// copied run by run.
fn take_runs(
    chunks: &VecDeque<RecordBatch>,
    first_chunk: usize,
    column: usize,
    taken: &[(u64, usize, usize, usize)],
) -> std::result::Result<ArrayRef, ArrowError> {
    let lo = taken[0].1 - first_chunk;
    let hi = taken[taken.len() - 1].1 - first_chunk;
    let data: Vec<ArrayData> = (lo..=hi)
        .map(|c| chunks[c].column(column).to_data())
        .collect();
    let mut out = MutableArrayData::new(data.iter().collect(), false, taken.len());
    let mut i = 0;
    while i < taken.len() {
        let (_, chunk, start, _) = taken[i];
        let mut end = start + 1;
        while i + 1 < taken.len() && taken[i + 1].1 == chunk && taken[i + 1].2 == end {
            end += 1;
            i += 1;
        }
        out.try_extend(chunk - first_chunk - lo, start, end)?;
        i += 1;
    }
    Ok(make_array(out.freeze()))
}

impl<S: StoreAccess> Iterator for Scan<S> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.next_batch().transpose();
        if matches!(next, Some(Err(_))) {
            self.remaining = 0; // an error ends the scan
        }
        next
    }
}

impl<S: StoreAccess> arrow_array::RecordBatchReader for Scan<S> {
    fn schema(&self) -> SchemaRef {
        self.out_schema()
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, UInt64Type};

    use super::*;
    use crate::{Codec, DType, Packed, Schema, Store};

    /// `x` = row * 10 (dense i64), `t` = row + 1 bytes per record (ragged u8).
    type Streams = Vec<(String, Arc<Store>)>;

    fn table(n: i64) -> (tempfile::TempDir, Streams) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let schema = Schema::dense(DType::I64, &[]).unwrap();
        let mut x = Store::create(dir.join("x"), schema, Codec::Raw, None).unwrap();
        let v: Vec<u8> = (0..n).flat_map(|i| (i * 10).to_le_bytes()).collect();
        x.append_dense(&v).unwrap();
        let mut t =
            Store::create(dir.join("t"), Schema::ragged(DType::U8), Codec::Zstd, None).unwrap();
        let mut p = Packed::default();
        for i in 0..n {
            p.push(&[i as u64 + 1], &vec![i as u8; i as usize + 1]);
        }
        t.append_ragged(&p).unwrap();
        (
            tmp,
            vec![("x".into(), Arc::new(x)), ("t".into(), Arc::new(t))],
        )
    }

    fn ids(batches: &[RecordBatch]) -> Vec<u64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<UInt64Type>().values().to_vec())
            .collect()
    }

    #[test]
    fn projection_ranges_limit_and_bounds() {
        let (_tmp, t) = table(100);
        let scan = Scan::new(t.clone(), Some("record_id".into())).unwrap();
        assert_eq!(scan.schema().fields().len(), 3);
        let tc = scan.column_index("t").unwrap();
        assert!(scan
            .column_index("nope")
            .unwrap_err()
            .to_string()
            .contains("no column \"nope\""));
        let batches: Vec<RecordBatch> = scan
            .project(vec![0, tc])
            .unwrap()
            .rows(vec![5..20, 40..90])
            .unwrap()
            .limit(30)
            .max_rows(7)
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert!(batches
            .iter()
            .all(|b| b.num_rows() <= 7 && b.num_columns() == 2));
        let want: Vec<u64> = (5..20).chain(40..55).collect();
        assert_eq!(ids(&batches), want);

        // Byte bound: ragged rows of ~i+1 bytes plus 8 of the index.
        let scan = Scan::new(t, Some("record_id".into())).unwrap();
        let batches: Vec<RecordBatch> = scan
            .max_bytes(200)
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(ids(&batches), (0..100).collect::<Vec<u64>>());
        assert!(batches.len() > 10);
        assert!(batches[1..].iter().all(|b| b.num_rows() < 20));
    }

    #[test]
    fn filter_sees_its_columns_and_keeps_what_it_accepts() {
        let (_tmp, t) = table(1000);
        let scan = Scan::new(t, Some("record_id".into())).unwrap();
        let x = scan.column_index("x").unwrap();
        let keep: Filter = Box::new(|b: &RecordBatch| {
            assert_eq!(b.num_columns(), 1);
            let x = b.column(0).as_primitive::<Int64Type>();
            Ok(x.iter().map(|v| v.map(|v| v % 70 == 0)).collect())
        });
        let batches: Vec<RecordBatch> = scan
            .filter(vec![x], keep, 64)
            .unwrap()
            .rows(vec![0..500, 600..1000])
            .unwrap()
            .max_rows(4)
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let want: Vec<u64> = (0..1000u64)
            .filter(|i| i % 7 == 0 && !(500..600).contains(i))
            .collect();
        assert_eq!(ids(&batches), want);
        assert!(batches
            .iter()
            .all(|b| b.num_rows() <= 4 && b.num_columns() == 3));

        // The filter's error ends the scan as it is.
        let (_tmp, t) = table(10);
        let scan = Scan::new(t, None).unwrap();
        let fail: Filter = Box::new(|_| Err(ArrowError::ComputeError("nope".into())));
        let mut scan = scan.filter(vec![0], fail, 4).unwrap();
        assert!(matches!(scan.next(), Some(Err(ArrowError::ComputeError(m))) if m == "nope"));
        assert!(scan.next().is_none());
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn bad_arguments() {
        let (_tmp, t) = table(10);
        let scan = || Scan::new(t.clone(), None).unwrap();
        assert!(scan().project(vec![2]).is_err());
        assert!(scan().rows(vec![5..8, 6..9]).is_err());
        assert!(scan().rows(vec![5..11]).is_err());
        let mut streams = t.clone();
        streams.truncate(1);
        assert!(Scan::new(streams, Some("x".into())).is_err());
        // An empty row set reads nothing.
        assert_eq!(scan().rows(vec![]).unwrap().count(), 0);
    }
}
