//! Lazy readers: record batches of many streams, and one column's chunks,
//! each bounded in bytes.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader, UInt64Array};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Schema as ArrowSchema, SchemaRef};

use crate::error::Result;
use crate::read::records::StoreAccess;

use super::gather::{arrow_err, gather_array};
use super::scan::Scan;
use super::types::field_of;

/// A record batch of `streams` gathered at `idx`, with an optional UInt64
/// index column first.
pub fn record_batch<S: StoreAccess>(
    streams: &[(String, S)],
    idx: &[u64],
    index_column: Option<&str>,
) -> Result<RecordBatch> {
    let mut fields = Vec::with_capacity(streams.len() + 1);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(streams.len() + 1);
    if let Some(name) = index_column {
        fields.push(Field::new(name, DataType::UInt64, false));
        columns.push(Arc::new(UInt64Array::from(idx.to_vec())));
    }
    for (name, store) in streams {
        let (field, column) = store.with(|s| Ok((field_of(s, name), gather_array(s, idx)?)))?;
        fields.push(field);
        columns.push(column);
    }
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns).map_err(arrow_err)
}

/// Reads a table of equal-length streams in order as byte-bounded record
/// batches: a [`Scan`] of every column and row.
pub struct TableReader<S: StoreAccess> {
    scan: Scan<S>,
}

impl<S: StoreAccess> TableReader<S> {
    pub fn new(
        streams: Vec<(String, S)>,
        index_column: Option<String>,
        max_bytes: usize,
    ) -> Result<TableReader<S>> {
        Ok(TableReader {
            scan: Scan::new(streams, index_column)?.max_bytes(max_bytes),
        })
    }
}

impl<S: StoreAccess> Iterator for TableReader<S> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.scan.next()
    }
}

impl<S: StoreAccess> RecordBatchReader for TableReader<S> {
    fn schema(&self) -> SchemaRef {
        self.scan.out_schema()
    }
}

/// Reads one store as byte-bounded arrays (ChunkedArray semantics): a
/// [`Scan`] of its one column.
pub struct ColumnReader<S: StoreAccess> {
    scan: Scan<S>,
    field: FieldRef,
}

impl<S: StoreAccess> ColumnReader<S> {
    pub fn new(store: S, name: &str, max_bytes: usize) -> Result<ColumnReader<S>> {
        let scan = Scan::new(vec![(name.to_string(), store)], None)?.max_bytes(max_bytes);
        let field = Arc::clone(&scan.out_schema().fields()[0]);
        Ok(ColumnReader { scan, field })
    }

    pub fn field(&self) -> FieldRef {
        Arc::clone(&self.field)
    }
}

impl<S: StoreAccess> Iterator for ColumnReader<S> {
    type Item = std::result::Result<ArrayRef, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.scan.next()?.map(|b| Arc::clone(b.column(0))))
    }
}
