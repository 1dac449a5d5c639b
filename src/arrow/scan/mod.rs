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

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};

use crate::error::{Error, Result};
use crate::read::records::StoreAccess;

use super::types::table_schema;

mod rows;
mod stripe;

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
            // A columnar column, or one with patches laid over it (read by
            // whole arrays too).
            let (is, per_row) = self.streams[c - offset].1.with(|s| {
                Ok(match crate::arrow::gather::array_base(s) {
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
