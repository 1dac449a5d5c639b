//! Scanning: the plan of one scan (projected columns, an early predicate
//! on cheap columns), its partitions over disjoint row ranges, and their
//! byte-bounded batches.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::SendableRecordBatchStream;
use loaderx::arrow::{self as la, StoreAccess};

use crate::rows::Rows;
use crate::{external, Table};

/// What one scan reads: projected columns, an optional early predicate.
pub(crate) struct ScanPlan<S> {
    pub(crate) table: Arc<Table<S>>,
    /// Indices into the table schema of the output columns.
    pub(crate) projection: Vec<usize>,
    pub(crate) out_schema: SchemaRef,
    /// Predicate over `filter_columns` (table schema indices), evaluated on
    /// a batch of exactly those columns.
    pub(crate) predicate: Option<(Arc<dyn PhysicalExpr>, Vec<usize>, SchemaRef)>,
    /// Output bytes per row of the fixed-width columns, and the ragged
    /// streams whose bytes vary per row.
    pub(crate) fixed_bytes: usize,
    pub(crate) ragged: Vec<usize>,
}

impl<S: StoreAccess + 'static> ScanPlan<S> {
    /// Gathers table columns `cols` at `ids` as a batch of `schema`.
    pub(crate) fn gather(
        &self,
        cols: &[usize],
        ids: &[u64],
        schema: &SchemaRef,
    ) -> Result<RecordBatch> {
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
    pub(crate) fn row_bytes(&self, row: u64) -> Result<usize> {
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
pub(crate) struct Partition<S> {
    pub(crate) plan: Arc<ScanPlan<S>>,
    pub(crate) rows: Rows,
    pub(crate) limit: Option<usize>,
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

pub(crate) struct PartitionIter<S> {
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
pub(crate) const PREDICATE_ROWS: usize = 1 << 15;

impl<S: StoreAccess + 'static> PartitionIter<S> {
    /// The next rows of the row set, in order: as many as fit `max_bytes`
    /// of output (`max_rows` at most), at least one.
    pub(crate) fn next_rows(
        &mut self,
        max_bytes: usize,
        max_rows: usize,
    ) -> Result<Option<Vec<u64>>> {
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
    pub(crate) fn refill(&mut self) -> Result<bool> {
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

    pub(crate) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
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
