//! A DataFusion [`TableProvider`] over loaderx stores.
//!
//! A table is a list of named, equal-length streams (open stores, shared —
//! never reopened) plus an optional UInt64 `record_id` column. Scans push
//! down:
//!
//! * **projection** — only the projected streams are read;
//! * **limit** — a partition stops once it has produced enough rows;
//! * **record_id predicates** — comparisons, `BETWEEN`, `IN` lists and
//!   their conjunctions become an exact set of row ranges, so only those
//!   rows are touched;
//! * **late materialization** — predicates over cheap columns (record_id and
//!   dense scalar streams) are evaluated first, on those columns only, and the
//!   heavy streams are gathered for the surviving rows alone.
//!
//! Output batches are bounded in bytes, and partitions scan disjoint row
//! ranges in parallel.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{
    Between, BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use loaderx::arrow::{self as la, StoreAccess};

/// Default byte bound of one output batch.
pub const BATCH_BYTES: usize = 16 << 20;

/// Scan behaviour switches (all on by default; benchmarks turn them off).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Accept filters (record_id ranges and cheap-column predicates).
    pub pushdown: bool,
    /// Upper bound of one output batch, in logical bytes.
    pub batch_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pushdown: true,
            batch_bytes: BATCH_BYTES,
        }
    }
}

struct Table<S> {
    streams: Vec<(String, S)>,
    index_column: Option<String>,
    schema: SchemaRef,
    len: u64,
    /// Per stream: a dense scalar store (cheap to read for a predicate).
    cheap: Vec<bool>,
    options: Options,
}

/// A table of loaderx streams for DataFusion.
pub struct StoreTable<S: StoreAccess + 'static> {
    inner: Arc<Table<S>>,
}

impl<S: StoreAccess + 'static> fmt::Debug for StoreTable<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreTable")
            .field("columns", &self.inner.schema.fields().len())
            .field("rows", &self.inner.len)
            .finish()
    }
}

fn external(e: loaderx::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

impl<S: StoreAccess + 'static> StoreTable<S> {
    /// A table of `streams` (all of one length), with a UInt64 index column
    /// first when `index_column` names it.
    pub fn try_new(
        streams: Vec<(String, S)>,
        index_column: Option<String>,
        options: Options,
    ) -> loaderx::Result<StoreTable<S>> {
        if streams.is_empty() {
            return Err(loaderx::Error::InvalidValue(
                "a table needs at least one stream".into(),
            ));
        }
        let mut len = None;
        let mut cheap = Vec::with_capacity(streams.len());
        for (name, s) in &streams {
            if index_column.as_deref() == Some(name.as_str()) {
                return Err(loaderx::Error::InvalidValue(format!(
                    "stream {name:?} collides with the index column"
                )));
            }
            let (n, scalar) = s.with(|s| {
                Ok((
                    s.len(),
                    s.schema().item_shape().is_some_and(|sh| sh.is_empty()),
                ))
            })?;
            cheap.push(scalar);
            match len {
                None => len = Some(n),
                Some(l) if l != n => {
                    return Err(loaderx::Error::InvalidValue(format!(
                        "streams must all have the same length, but {name:?} has {n} records and {:?} has {l}",
                        streams[0].0
                    )))
                }
                _ => {}
            }
        }
        let schema = la::table_schema(&streams, index_column.as_deref())?;
        Ok(StoreTable {
            inner: Arc::new(Table {
                streams,
                index_column,
                schema,
                len: len.unwrap_or(0),
                cheap,
                options,
            }),
        })
    }
}

impl StoreTable<loaderx::table::Column> {
    /// The columns of a table opened with [`loaderx::table::Table::open`]
    /// (plain or sharded), in table order, typed as the table records
    /// them (text, binary, nulls).
    pub fn from_table(
        table: loaderx::table::Table,
        index_column: Option<String>,
        options: Options,
    ) -> loaderx::Result<Self> {
        let streams = table
            .into_columns()
            .into_iter()
            .map(|c| (c.name().to_string(), c))
            .collect();
        StoreTable::try_new(streams, index_column, options)
    }
}

impl<S: StoreAccess + 'static> Table<S> {
    fn is_index(&self, name: &str) -> bool {
        self.index_column.as_deref() == Some(name)
    }

    fn offset(&self) -> usize {
        usize::from(self.index_column.is_some())
    }

    /// Whether `expr` only reads cheap columns (and so is evaluated early).
    fn cheap_only(&self, expr: &Expr) -> bool {
        let cols = expr.column_refs();
        !cols.is_empty()
            && cols.iter().all(|c| {
                self.is_index(&c.name)
                    || self
                        .streams
                        .iter()
                        .position(|(n, _)| n == &c.name)
                        .is_some_and(|i| self.cheap[i])
            })
    }
}

// ------------------------------------------------------------ row sets

/// Sorted, disjoint ranges of rows.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rows(Vec<Range<u64>>);

impl Rows {
    /// `lo..hi`, or nothing when empty.
    fn span(lo: u64, hi: u64) -> Rows {
        let mut v = Vec::with_capacity(1);
        if lo < hi {
            v.push(lo..hi);
        }
        Rows(v)
    }

    fn all(len: u64) -> Rows {
        Rows::span(0, len)
    }

    fn intersect(&self, other: &Rows) -> Rows {
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.0.len() && j < other.0.len() {
            let a = &self.0[i];
            let b = &other.0[j];
            let lo = a.start.max(b.start);
            let hi = a.end.min(b.end);
            if lo < hi {
                out.push(lo..hi);
            }
            if a.end < b.end {
                i += 1;
            } else {
                j += 1;
            }
        }
        Rows(out)
    }

    fn count(&self) -> u64 {
        self.0.iter().map(|r| r.end - r.start).sum()
    }

    /// Splits into at most `parts` pieces of about equal row counts.
    fn split(&self, parts: usize) -> Vec<Rows> {
        let total = self.count();
        let parts = (parts.max(1) as u64).min(total.max(1));
        let per = total.div_ceil(parts).max(1);
        let mut out = vec![Rows(vec![])];
        let mut room = per;
        for r in &self.0 {
            let mut start = r.start;
            while start < r.end {
                let take = (r.end - start).min(room);
                out.last_mut().unwrap().0.push(start..start + take);
                start += take;
                room -= take;
                if room == 0 {
                    out.push(Rows(vec![]));
                    room = per;
                }
            }
        }
        out.retain(|r| !r.0.is_empty());
        out
    }
}

fn literal_u64(e: &Expr) -> Option<i128> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::UInt64(Some(x)) => Some(*x as i128),
            ScalarValue::UInt32(Some(x)) => Some(*x as i128),
            ScalarValue::UInt16(Some(x)) => Some(*x as i128),
            ScalarValue::UInt8(Some(x)) => Some(*x as i128),
            ScalarValue::Int64(Some(x)) => Some(*x as i128),
            ScalarValue::Int32(Some(x)) => Some(*x as i128),
            ScalarValue::Int16(Some(x)) => Some(*x as i128),
            ScalarValue::Int8(Some(x)) => Some(*x as i128),
            _ => None,
        },
        Expr::Cast(c) => literal_u64(&c.expr),
        Expr::TryCast(c) => literal_u64(&c.expr),
        _ => None,
    }
}

fn is_column(e: &Expr, name: &str) -> bool {
    match e {
        Expr::Column(c) => c.name == name,
        Expr::Cast(c) => is_column(&c.expr, name),
        Expr::TryCast(c) => is_column(&c.expr, name),
        _ => false,
    }
}

/// The exact row set a predicate on the index column selects, if it is one
/// of the forms pushed down (comparisons, BETWEEN, IN lists, AND of these).
fn index_rows(expr: &Expr, index: &str, len: u64) -> Option<Rows> {
    let clamp = |lo: i128, hi: i128| -> Rows {
        let lo = lo.clamp(0, len as i128) as u64;
        let hi = hi.clamp(0, len as i128) as u64;
        Rows::span(lo, hi)
    };
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if *op == Operator::And => {
            let a = index_rows(left, index, len)?;
            let b = index_rows(right, index, len)?;
            Some(a.intersect(&b))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (v, op) = if is_column(left, index) {
                (literal_u64(right)?, *op)
            } else if is_column(right, index) {
                (literal_u64(left)?, op.swap()?)
            } else {
                return None;
            };
            Some(match op {
                Operator::Eq => clamp(v, v + 1),
                Operator::Lt => clamp(0, v),
                Operator::LtEq => clamp(0, v + 1),
                Operator::Gt => clamp(v + 1, len as i128),
                Operator::GtEq => clamp(v, len as i128),
                _ => return None,
            })
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) if is_column(expr, index) => {
            let lo = literal_u64(low)?;
            let hi = literal_u64(high)?;
            Some(clamp(lo, hi + 1))
        }
        Expr::InList(list) if !list.negated && is_column(&list.expr, index) => {
            let mut ids: Vec<u64> = Vec::with_capacity(list.list.len());
            for e in &list.list {
                let v = literal_u64(e)?;
                if v >= 0 && v < len as i128 {
                    ids.push(v as u64);
                }
            }
            ids.sort_unstable();
            ids.dedup();
            let mut ranges: Vec<Range<u64>> = Vec::new();
            for id in ids {
                match ranges.last_mut() {
                    Some(r) if r.end == id => r.end += 1,
                    _ => ranges.push(id..id + 1),
                }
            }
            Some(Rows(ranges))
        }
        _ => None,
    }
}

// ------------------------------------------------------------ scanning

/// What one scan reads: projected columns, an optional early predicate.
struct ScanPlan<S> {
    table: Arc<Table<S>>,
    /// Indices into the table schema of the output columns.
    projection: Vec<usize>,
    out_schema: SchemaRef,
    /// Predicate over `filter_columns` (table schema indices), evaluated on
    /// a batch of exactly those columns.
    predicate: Option<(Arc<dyn PhysicalExpr>, Vec<usize>, SchemaRef)>,
    /// Output bytes per row of the fixed-width columns, and the ragged
    /// streams whose bytes vary per row.
    fixed_bytes: usize,
    ragged: Vec<usize>,
}

impl<S: StoreAccess + 'static> ScanPlan<S> {
    /// Gathers table columns `cols` at `ids` as a batch of `schema`.
    fn gather(&self, cols: &[usize], ids: &[u64], schema: &SchemaRef) -> Result<RecordBatch> {
        let t = &self.table;
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(cols.len());
        for &c in cols {
            if c < t.offset() {
                arrays.push(Arc::new(UInt64Array::from(ids.to_vec())));
            } else {
                let (_, store) = &t.streams[c - t.offset()];
                // A scan touches the whole table over time: keep large
                // records out of the process's mapped pages.
                let column = loaderx::streaming(|| store.with(|s| la::gather_array(s, ids)));
                arrays.push(column.map_err(external)?);
            }
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(schema),
            arrays,
            &opts,
        )?)
    }

    /// Logical bytes of one output row, for bounding batches.
    fn row_bytes(&self, row: u64) -> Result<usize> {
        let mut bytes = self.fixed_bytes;
        for &i in &self.ragged {
            let (_, s) = &self.table.streams[i];
            bytes += s
                .with(|s| Ok(s.logical_len(row).unwrap_or(0)))
                .map_err(external)?;
        }
        Ok(bytes)
    }
}

/// One partition: a row set scanned in order.
struct Partition<S> {
    plan: Arc<ScanPlan<S>>,
    rows: Rows,
    limit: Option<usize>,
}

impl<S: StoreAccess + 'static> fmt::Debug for Partition<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorePartition(rows={})", self.rows.count())
    }
}

impl<S: StoreAccess + 'static> PartitionStream for Partition<S> {
    fn schema(&self) -> &SchemaRef {
        &self.plan.out_schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let iter = PartitionIter {
            plan: Arc::clone(&self.plan),
            ranges: self.rows.0.clone(),
            at: 0,
            pos: self.rows.0.first().map_or(0, |r| r.start),
            remaining: self.limit.unwrap_or(usize::MAX),
            pending: std::collections::VecDeque::new(),
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.plan.out_schema),
            futures::stream::iter(iter),
        ))
    }
}

struct PartitionIter<S> {
    plan: Arc<ScanPlan<S>>,
    ranges: Vec<Range<u64>>,
    /// Current range and position within the whole row set.
    at: usize,
    pos: u64,
    /// Rows still allowed by the limit.
    remaining: usize,
    /// Rows that passed the predicate but are not yet in an output batch.
    pending: std::collections::VecDeque<u64>,
}

/// Rows whose predicate is evaluated at once (predicate columns are cheap
/// scalars, so this is a few hundred KiB).
const PREDICATE_ROWS: usize = 1 << 15;

impl<S: StoreAccess + 'static> PartitionIter<S> {
    /// The next rows of the row set, in order: as many as fit `max_bytes`
    /// of output (`max_rows` at most), at least one.
    fn next_rows(&mut self, max_bytes: usize, max_rows: usize) -> Result<Option<Vec<u64>>> {
        while self.at < self.ranges.len() && self.pos >= self.ranges[self.at].end {
            self.at += 1;
            if let Some(r) = self.ranges.get(self.at) {
                self.pos = r.start;
            }
        }
        if self.at >= self.ranges.len() {
            return Ok(None);
        }
        let mut ids = Vec::new();
        let mut bytes = 0usize;
        while self.at < self.ranges.len() {
            let end = self.ranges[self.at].end;
            while self.pos < end {
                let b = self.plan.row_bytes(self.pos)?;
                if !ids.is_empty() && (bytes + b > max_bytes || ids.len() >= max_rows) {
                    return Ok(Some(ids));
                }
                bytes += b;
                ids.push(self.pos);
                self.pos += 1;
            }
            self.at += 1;
            match self.ranges.get(self.at) {
                Some(r) => self.pos = r.start,
                None => break,
            }
        }
        Ok(Some(ids))
    }

    /// Evaluates the predicate on the next rows and queues the survivors;
    /// false once the row set is exhausted.
    fn refill(&mut self) -> Result<bool> {
        let Some((expr, cols, schema)) = &self.plan.predicate else {
            return Ok(false);
        };
        let (expr, cols, schema) = (Arc::clone(expr), cols.clone(), Arc::clone(schema));
        let Some(ids) = self.next_rows(usize::MAX, PREDICATE_ROWS)? else {
            return Ok(false);
        };
        // Late materialization: the predicate reads only its cheap columns.
        let batch = self.plan.gather(&cols, &ids, &schema)?;
        let mask = expr.evaluate(&batch)?.into_array(batch.num_rows())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Internal("a predicate did not give booleans".into()))?;
        self.pending.extend(
            ids.into_iter()
                .zip(mask.iter())
                .filter_map(|(id, keep)| keep.unwrap_or(false).then_some(id)),
        );
        Ok(true)
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let max = self.plan.table.options.batch_bytes;
        let ids = if self.plan.predicate.is_none() {
            match self.next_rows(max, self.remaining)? {
                Some(ids) => ids,
                None => return Ok(None),
            }
        } else {
            // Heavy columns are gathered for survivors only, in batches as
            // large as the byte bound allows (few, large gathers).
            let mut ids = Vec::new();
            let mut bytes = 0usize;
            loop {
                while let Some(&id) = self.pending.front() {
                    let b = self.plan.row_bytes(id)?;
                    if !ids.is_empty() && (bytes + b > max || ids.len() >= self.remaining) {
                        break;
                    }
                    bytes += b;
                    ids.push(id);
                    self.pending.pop_front();
                }
                if !self.pending.is_empty() || ids.len() >= self.remaining {
                    break; // the batch is full
                }
                if !self.refill()? {
                    break; // the row set is exhausted
                }
            }
            if ids.is_empty() {
                return Ok(None);
            }
            ids
        };
        self.remaining -= ids.len();
        let out = self
            .plan
            .gather(&self.plan.projection, &ids, &self.plan.out_schema)?;
        Ok(Some(out))
    }
}

impl<S: StoreAccess + 'static> Iterator for PartitionIter<S> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

#[async_trait]
impl<S: StoreAccess + 'static> TableProvider for StoreTable<S> {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.inner.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        let t = &self.inner;
        Ok(filters
            .iter()
            .map(|f| {
                if !t.options.pushdown {
                    return TableProviderFilterPushDown::Unsupported;
                }
                let on_index = t
                    .index_column
                    .as_deref()
                    .is_some_and(|ix| index_rows(f, ix, t.len).is_some());
                // Both kinds are evaluated exactly during the scan.
                if on_index || t.cheap_only(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let t = &self.inner;
        let projection: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..t.schema.fields().len()).collect(),
        };
        let out_schema = Arc::new(t.schema.project(&projection)?);
        // Exact row ranges from index predicates; everything else that was
        // pushed down is a cheap-column predicate evaluated per batch.
        let mut rows = Rows::all(t.len);
        let mut rest: Vec<Expr> = Vec::new();
        for f in filters {
            match t
                .index_column
                .as_deref()
                .and_then(|ix| index_rows(f, ix, t.len))
            {
                Some(r) => rows = rows.intersect(&r),
                None => rest.push(f.clone()),
            }
        }
        let predicate = match rest.into_iter().reduce(|a, b| a.and(b)) {
            None => None,
            Some(expr) => {
                let mut cols: Vec<usize> = expr
                    .column_refs()
                    .iter()
                    .map(|c| t.schema.index_of(&c.name))
                    .collect::<std::result::Result<_, _>>()?;
                cols.sort_unstable();
                cols.dedup();
                let schema = Arc::new(t.schema.project(&cols)?);
                let df_schema = DFSchema::try_from(Arc::clone(&schema))?;
                let phys = state.create_physical_expr(expr, &df_schema)?;
                Some((phys, cols, schema))
            }
        };
        let mut fixed_bytes = 8;
        let mut ragged = Vec::new();
        for &c in &projection {
            if c >= t.offset() {
                let i = c - t.offset();
                match t.streams[i]
                    .1
                    .with(|s| Ok(s.schema().record_width()))
                    .map_err(external)?
                {
                    Some(w) => fixed_bytes += w as usize,
                    None => ragged.push(i),
                }
            }
        }
        let plan = Arc::new(ScanPlan {
            table: Arc::clone(t),
            projection,
            out_schema: Arc::clone(&out_schema),
            predicate,
            fixed_bytes,
            ragged,
        });
        let parts = state.config().target_partitions().max(1);
        let partitions: Vec<Arc<dyn PartitionStream>> = rows
            .split(parts)
            .into_iter()
            .map(|r| {
                Arc::new(Partition {
                    plan: Arc::clone(&plan),
                    rows: r,
                    limit,
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        let partitions = if partitions.is_empty() {
            vec![Arc::new(Partition {
                plan: Arc::clone(&plan),
                rows: Rows(vec![]),
                limit,
            }) as Arc<dyn PartitionStream>]
        } else {
            partitions
        };
        Ok(Arc::new(StreamingTableExec::try_new(
            out_schema,
            partitions,
            None,
            Vec::new(),
            false,
            limit,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_sets() {
        let a = Rows(vec![0..10, 20..30]);
        let b = Rows::span(5, 25);
        assert_eq!(a.intersect(&b), Rows(vec![5..10, 20..25]));
        let parts = Rows(vec![0..10, 20..30]).split(3);
        assert_eq!(parts.iter().map(Rows::count).sum::<u64>(), 20);
        assert!(parts.len() <= 3);
        assert!(Rows::all(0).split(4).is_empty());
    }
}
