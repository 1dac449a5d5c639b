//! A DataFusion [`TableProvider`] over loaderx tables: stores and columnar
//! columns.
//!
//! A table is a list of named, equal-length streams (open stores or a
//! table's columns, shared — never reopened) plus an optional UInt64
//! `record_id` column. Scans push down:
//!
//! * **projection** — only the projected streams are read;
//! * **limit** — a partition stops once it has produced enough rows;
//! * **record_id predicates** — comparisons, `BETWEEN`, `IN` lists and
//!   their `AND`s and `OR`s become an exact set of row ranges, so only
//!   those rows are touched;
//! * **late materialization** — predicates over cheap columns (record_id,
//!   columnar columns, scalar stores, text and bytes) are evaluated first,
//!   on those columns only, and the heavy streams are gathered for the
//!   surviving rows alone;
//! * **one predicate** — each filter is translated once into the core's
//!   predicate ([`native`]); the core alone decides which chunks may hold a
//!   matching row (they alone are read), which rows match when every column
//!   the filter reads is columnar (evaluated on the chunks as stored), and
//!   whether that answer is exact. A filter the core answers inexactly is
//!   applied again by DataFusion to the rows kept.
//!
//! Output batches are bounded in bytes, and partitions scan disjoint row
//! ranges in parallel.

mod native;
mod rows;
mod scan;

use std::fmt;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use loaderx::arrow::{self as la, StoreAccess};

/// Default byte bound of one output batch: the core readers' bound.
pub const BATCH_BYTES: usize = la::DEFAULT_BATCH_BYTES;

/// Rows of an output batch, in DataFusion's `batch_size`s: its operators
/// (hash aggregates, joins) work best on batches of about that many rows.
pub const BATCH_SIZE_FACTOR: usize = 8;

/// Scan behaviour switches (all on by default; benchmarks turn them off).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Accept filters (record_id ranges and cheap-column predicates).
    pub pushdown: bool,
    /// Upper bound of one output batch, in logical bytes.
    pub batch_bytes: usize,
    /// Upper bound of one output batch, in rows (None: the session's
    /// `batch_size` times [`BATCH_SIZE_FACTOR`]).
    pub batch_rows: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pushdown: true,
            batch_bytes: BATCH_BYTES,
            batch_rows: None,
        }
    }
}

struct Table<S> {
    streams: Arc<[(String, S)]>,
    index_column: Option<String>,
    schema: SchemaRef,
    len: u64,
    /// Per stream: cheap to read for a predicate ([`la::is_cheap`]).
    cheap: Vec<bool>,
    /// Per stream: what a columnar column holds (the core evaluates
    /// filters on it); None for a store.
    columnar: Vec<Option<loaderx::columnar::ValueKind>>,
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
        let mut columnar = Vec::with_capacity(streams.len());
        for (name, s) in &streams {
            if index_column.as_deref() == Some(name.as_str()) {
                return Err(loaderx::Error::InvalidValue(format!(
                    "stream {name:?} collides with the index column"
                )));
            }
            let (n, scalar, stored) =
                s.with(|s| Ok((s.len(), la::is_cheap(s), s.columnar().map(|c| c.kind()))))?;
            cheap.push(scalar);
            columnar.push(stored);
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
                streams: streams.into(),
                index_column,
                schema,
                len: len.unwrap_or(0),
                cheap,
                columnar,
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

    /// What a column named `name` holds, when it is columnar.
    fn kind(&self, name: &str) -> Option<loaderx::columnar::ValueKind> {
        let i = self.streams.iter().position(|(n, _)| n == name)?;
        self.columnar[i]
    }

    /// Whether the core evaluates `p` itself: it is all understood and
    /// every column it reads is columnar.
    fn native(&self, p: &Pred) -> bool {
        !p.has_unknown() && p.columns().iter().all(|c| self.kind(c).is_some())
    }

    /// The rows `p` may select, by the chunk statistics of the columnar
    /// columns it reads and the row numbers the index column names; None
    /// when it may select any.
    fn may_rows(&self, p: &Pred) -> loaderx::Result<Option<Rows>> {
        let got = p.may_rows_with(&mut |leaf| {
            if let Some(ix) = self.index_column.as_deref() {
                if let Some(r) = index_rows(leaf, ix, self.len) {
                    return Ok(Some(r.0));
                }
            }
            let Some((_, s)) = self.streams.iter().find(|(n, _)| n == leaf.columns()[0]) else {
                return Ok(None);
            };
            s.with(|r| {
                Ok(r.columnar()
                    .filter(|c| loaderx::Records::len(*c) == self.len)
                    .map(|c| c.may_rows(leaf)))
            })
        })?;
        Ok(got.map(Rows))
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

use loaderx::columnar::Pred;
use rows::{index_rows, Rows};
use scan::{Partition, ScanPlan};

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
                let p = native::pred(f, &t.schema);
                let on_index = t
                    .index_column
                    .as_deref()
                    .is_some_and(|ix| index_rows(&p, ix, t.len).is_some());
                // Row ranges of the index are exact; the core's own
                // evaluation is exact where it says so; any other filter
                // of cheap columns is DataFusion's own, evaluated during
                // the scan.
                if on_index {
                    TableProviderFilterPushDown::Exact
                } else if !t.cheap_only(f) {
                    TableProviderFilterPushDown::Unsupported
                } else if t.native(&p) && !p.exact(&|c| t.kind(c)) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Exact
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
        let mut preds: Vec<Pred> = Vec::new();
        for f in filters {
            let p = native::pred(f, &t.schema);
            match t
                .index_column
                .as_deref()
                .and_then(|ix| index_rows(&p, ix, t.len))
            {
                Some(r) => rows = rows.intersect(&r),
                None => {
                    // Chunks whose statistics rule the predicate out.
                    if let Some(r) = t.may_rows(&p).map_err(external)? {
                        rows = rows.intersect(&r);
                    }
                    rest.push(f.clone());
                    preds.push(p);
                }
            }
        }
        // The core's own evaluation when it understands every filter.
        let native =
            (!preds.is_empty() && preds.iter().all(|p| t.native(p))).then(|| Pred::and(preds));
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
                let df_schema = DFSchema::try_from(schema)?;
                let phys = state.create_physical_expr(expr, &df_schema)?;
                Some((phys, cols))
            }
        };
        let plan = Arc::new(ScanPlan {
            table: Arc::clone(t),
            projection,
            out_schema: Arc::clone(&out_schema),
            predicate,
            native,
            batch_rows: t
                .options
                .batch_rows
                .unwrap_or(state.config().batch_size() * BATCH_SIZE_FACTOR),
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
        let exec = Arc::new(StreamingTableExec::try_new(
            out_schema,
            partitions,
            None,
            Vec::new(),
            false,
            limit,
        )?);
        if !filters.is_empty() {
            return Ok(exec);
        }
        // Without filters the rows are known: DataFusion answers count(*)
        // from them.
        let rows = match limit {
            Some(l) => (l as u64).min(t.len),
            None => t.len,
        };
        Ok(Arc::new(scan::Counted::new(exec, rows as usize)))
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
