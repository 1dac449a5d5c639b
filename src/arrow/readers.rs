//! Lazy readers: record batches of many streams, and one column's chunks,
//! each bounded in bytes.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader, UInt64Array};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Schema as ArrowSchema, SchemaRef};

use crate::error::{Error, Result};
use crate::read::records::StoreAccess;
use crate::store;

use super::gather::{arrow_err, gather_array};
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

/// The Arrow schema of a table of `streams`.
pub fn table_schema<S: StoreAccess>(
    streams: &[(String, S)],
    index_column: Option<&str>,
) -> Result<SchemaRef> {
    let mut fields = Vec::with_capacity(streams.len() + 1);
    if let Some(name) = index_column {
        fields.push(Field::new(name, DataType::UInt64, false));
    }
    for (name, store) in streams {
        fields.push(store.with(|s| Ok(field_of(s, name)))?);
    }
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// Rows `start..` that fit `max_bytes` of logical payload across `streams`
/// (at least one row).
pub(super) fn rows_within<S: StoreAccess>(
    streams: &[(String, S)],
    start: u64,
    end: u64,
    max_bytes: usize,
) -> Result<u64> {
    let mut widths = Vec::with_capacity(streams.len());
    let mut ragged = Vec::new();
    for (i, (_, s)) in streams.iter().enumerate() {
        match s.with(|s| Ok(s.schema().record_width()))? {
            Some(w) => widths.push(w as usize),
            None => ragged.push(i),
        }
    }
    let fixed: usize = widths.iter().sum::<usize>() + 8;
    if ragged.is_empty() {
        return Ok(((max_bytes / fixed.max(1)) as u64).clamp(1, end - start));
    }
    let mut bytes = 0usize;
    let mut row = start;
    while row < end {
        let mut r = fixed;
        for &i in &ragged {
            r += streams[i].1.with(|s| Ok(s.logical_len(row).unwrap_or(0)))?;
        }
        if bytes + r > max_bytes && row > start {
            break;
        }
        bytes += r;
        row += 1;
    }
    Ok(row - start)
}

/// Reads a table of equal-length streams in order as byte-bounded record batches.
pub struct TableReader<S: StoreAccess> {
    streams: Vec<(String, S)>,
    schema: SchemaRef,
    index_column: Option<String>,
    next: u64,
    end: u64,
    max_bytes: usize,
}

impl<S: StoreAccess> TableReader<S> {
    pub fn new(
        streams: Vec<(String, S)>,
        index_column: Option<String>,
        max_bytes: usize,
    ) -> Result<TableReader<S>> {
        let mut len = None;
        for (name, s) in &streams {
            let n = s.with(|s| Ok(s.len()))?;
            match len {
                None => len = Some(n),
                Some(l) if l != n => {
                    return Err(Error::InvalidValue(format!(
                        "streams must all have the same length, but {name:?} has {n} records and the first has {l}"
                    )))
                }
                _ => {}
            }
        }
        let schema = table_schema(&streams, index_column.as_deref())?;
        Ok(TableReader {
            end: len.unwrap_or(0),
            streams,
            schema,
            index_column,
            next: 0,
            max_bytes: max_bytes.max(1),
        })
    }

    fn read_next(&mut self) -> Result<RecordBatch> {
        let rows = rows_within(&self.streams, self.next, self.end, self.max_bytes)?;
        let idx: Vec<u64> = (self.next..self.next + rows).collect();
        self.next += rows;
        store::streaming(|| record_batch(&self.streams, &idx, self.index_column.as_deref()))
    }
}

impl<S: StoreAccess> Iterator for TableReader<S> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        Some(
            self.read_next()
                .map_err(|e| ArrowError::ExternalError(Box::new(e))),
        )
    }
}

impl<S: StoreAccess> RecordBatchReader for TableReader<S> {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// Reads one store as byte-bounded arrays (ChunkedArray semantics).
pub struct ColumnReader<S: StoreAccess> {
    store: S,
    field: FieldRef,
    next: u64,
    end: u64,
    max_bytes: usize,
}

impl<S: StoreAccess> ColumnReader<S> {
    pub fn new(store: S, name: &str, max_bytes: usize) -> Result<ColumnReader<S>> {
        let (field, end) = store.with(|s| Ok((field_of(s, name), s.len())))?;
        Ok(ColumnReader {
            store,
            field: Arc::new(field),
            next: 0,
            end,
            max_bytes: max_bytes.max(1),
        })
    }

    pub fn field(&self) -> FieldRef {
        Arc::clone(&self.field)
    }
}

impl<S: StoreAccess> Iterator for ColumnReader<S> {
    type Item = std::result::Result<ArrayRef, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.end {
            return None;
        }
        let one = [(String::new(), &self.store)];
        let result = rows_within(&one, self.next, self.end, self.max_bytes).and_then(|rows| {
            let idx: Vec<u64> = (self.next..self.next + rows).collect();
            self.next += rows;
            self.store.with(|s| gather_array(s, &idx))
        });
        Some(result.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}
