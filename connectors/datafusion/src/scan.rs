//! Scanning: the plan of one scan (projected columns, an early predicate
//! on cheap columns) and its partitions over disjoint row ranges, each run
//! by the core's [`loaderx::arrow::Scan`] with the predicate as its filter.

use std::fmt;
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use loaderx::arrow::{Filter, Scan, StoreAccess, FILTER_ROWS};

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
    pub(crate) predicate: Option<(Arc<dyn PhysicalExpr>, Vec<usize>)>,
    /// The same filters as the core evaluates them on stored chunks, when
    /// it understands them all: used where the scan can (every column it
    /// reads columnar), the predicate otherwise.
    pub(crate) native: Option<loaderx::columnar::Pred>,
    /// Rows of an output batch at most.
    pub(crate) batch_rows: usize,
}

/// The predicate as the core scan's filter.
fn filter(expr: Arc<dyn PhysicalExpr>) -> Filter {
    Box::new(move |batch: &RecordBatch| {
        let keep = || -> Result<BooleanArray> {
            let mask = expr.evaluate(batch)?.into_array(batch.num_rows())?;
            mask.as_any()
                .downcast_ref::<BooleanArray>()
                .cloned()
                .ok_or_else(|| {
                    DataFusionError::Internal("a predicate did not give booleans".into())
                })
        };
        keep().map_err(|e| ArrowError::ExternalError(Box::new(e)))
    })
}

/// The core scan's error as DataFusion's: the predicate's own errors come
/// back as they were, the store's as `External` (the binding finds them).
fn from_scan(e: ArrowError) -> DataFusionError {
    match e {
        ArrowError::ExternalError(inner) => match inner.downcast::<DataFusionError>() {
            Ok(df) => *df,
            Err(other) => DataFusionError::External(other),
        },
        other => DataFusionError::ArrowError(Box::new(other), None),
    }
}

impl<S: StoreAccess + 'static> ScanPlan<S> {
    /// The core scan of `rows`.
    fn scan(&self, rows: &Rows, limit: Option<usize>) -> loaderx::Result<Scan<S>> {
        let t = &self.table;
        let mut scan = Scan::new(Arc::clone(&t.streams), t.index_column.clone())?
            .project(self.projection.clone())?
            .rows(rows.0.clone())?
            .max_bytes(t.options.batch_bytes)
            .max_rows(self.batch_rows);
        if let Some(limit) = limit {
            scan = scan.limit(limit);
        }
        if let Some(pred) = &self.native {
            if scan.native_filter(pred.clone())? {
                return Ok(scan);
            }
        }
        if let Some((expr, cols)) = &self.predicate {
            scan = scan.filter(cols.clone(), filter(Arc::clone(expr)), FILTER_ROWS)?;
        }
        Ok(scan)
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
        let batches: Box<dyn Iterator<Item = Result<RecordBatch>> + Send> =
            match self.plan.scan(&self.rows, self.limit) {
                Ok(scan) => Box::new(scan.map(|b| b.map_err(from_scan))),
                Err(e) => Box::new(std::iter::once(Err(external(e)))),
            };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.plan.out_schema),
            futures::stream::iter(batches),
        ))
    }
}

/// A scan whose row count is known exactly (no filters): the streaming
/// scan itself, with statistics that say so.
#[derive(Debug)]
pub(crate) struct Counted {
    inner: Arc<StreamingTableExec>,
    rows: usize,
}

impl Counted {
    pub(crate) fn new(inner: Arc<StreamingTableExec>, rows: usize) -> Counted {
        Counted { inner, rows }
    }
}

impl DisplayAs for Counted {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.fmt_as(t, f)?;
        write!(f, ", rows={}", self.rows)
    }
}

impl ExecutionPlan for Counted {
    fn name(&self) -> &str {
        "LoaderxScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "a loaderx scan has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        let schema = self.inner.schema();
        Ok(Arc::new(match partition {
            None => Statistics {
                num_rows: Precision::Exact(self.rows),
                ..Statistics::new_unknown(&schema)
            },
            Some(_) => Statistics::new_unknown(&schema),
        }))
    }
}
