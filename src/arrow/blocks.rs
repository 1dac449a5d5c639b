//! Several Arrow streams written as one table, when their schemas may
//! disagree on a tensor column's shape (Ray's blocks do: each block types
//! its tensors by its own rows).
//!
//! Each column's store is decided from every stream's schema before a row
//! is written ([`ColumnSpec::merge`]): dense when every stream holds tensors of
//! one item shape, ragged when they differ (the dense blocks' records are
//! then written as ragged records of their shape). Dtypes and logical
//! types must agree.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{FieldRef, Schema as ArrowSchema};

use super::foreign::{canonical_array, canonical_field};
use super::gather::arrow_err;
use super::ingest::{from_arrow_error, write_columns, Planned};
use super::types::{logical_of, schema_for_field};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::schema::Layout;
use crate::table::{ColumnSpec, Layouts};

/// The store the Arrow field `field` becomes (Ray's tensor types
/// included); `InvalidType` naming the column for a type with none.
pub fn spec_of_field(field: &FieldRef) -> Result<ColumnSpec> {
    let field = canonical_field(field)?;
    Ok(ColumnSpec::records(
        schema_for_field(&field)?,
        logical_of(field.data_type()),
    ))
}

fn is_scalar(spec: &ColumnSpec) -> bool {
    matches!(&spec.schema.layout, Layout::Dense { item_shape } if item_shape.is_empty())
}

/// Writes every batch of `readers`, in order, as one table under `root`
/// (one new store per column, as [`super::ingest`] does), each column's
/// store merged over every reader's schema ([`ColumnSpec::merge`]). Columns are
/// matched by name (the first reader's order is the table's); every reader
/// must have the same names. Each column is laid out as `layouts`
/// resolves it. Unless `tensor_nulls`, a null row in a column that is not
/// a scalar, text or bytes column is refused. On any error nothing this
/// call created is left. Returns the rows written and each column's spec.
pub fn ingest_streams(
    readers: Vec<Box<dyn RecordBatchReader + Send>>,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    layouts: &Layouts,
    tensor_nulls: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<(u64, Vec<(String, ColumnSpec)>)> {
    let Some(head) = readers.first() else {
        return Err(Error::InvalidValue(
            "there is no stream to write (give at least one)".into(),
        ));
    };
    let names: Vec<String> = head
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    // Per reader, the index of each table column in its schema.
    let mut order: Vec<Vec<usize>> = Vec::with_capacity(readers.len());
    let mut specs: Vec<Vec<ColumnSpec>> = vec![Vec::with_capacity(readers.len()); names.len()];
    for reader in &readers {
        let schema = reader.schema();
        let mut theirs: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        theirs.sort();
        if theirs != sorted {
            return Err(Error::InvalidValue(format!(
                "every block must have the same columns, but one has {theirs:?} and another \
                 {sorted:?}"
            )));
        }
        let at: Vec<usize> = names.iter().map(|n| schema.index_of(n).unwrap()).collect();
        for (c, &i) in at.iter().enumerate() {
            specs[c].push(spec_of_field(&schema.fields()[i])?);
        }
        order.push(at);
    }
    layouts.check_names(&names)?;
    let mut merged: Vec<ColumnSpec> = names
        .iter()
        .zip(&specs)
        .map(|(n, s)| ColumnSpec::merge(n, s))
        .collect::<Result<_>>()?;
    for (name, spec) in names.iter().zip(merged.iter_mut()) {
        spec.layout = layouts.resolve(name, spec.value_kind())?;
    }
    let plan: Vec<Planned> = names
        .iter()
        .zip(&merged)
        .map(|(name, spec)| Planned {
            name: name.clone(),
            logical: spec.logical,
            schema: spec.schema.clone(),
            layout: spec.layout,
        })
        .collect();
    let check_nulls: Vec<bool> = merged
        .iter()
        .map(|s| !tensor_nulls && !is_scalar(s) && !s.logical.is_bytes())
        .collect();
    // Each reader's columns in table order, in the layout the stores read.
    let mut canonical = Vec::with_capacity(readers.len());
    for (reader, at) in readers.iter().zip(&order) {
        let schema = reader.schema();
        let fields = at
            .iter()
            .map(|&i| {
                let f = canonical_field(&schema.fields()[i])?;
                Ok(Arc::new(f.as_ref().clone().with_nullable(true)))
            })
            .collect::<Result<Vec<FieldRef>>>()?;
        canonical.push(Arc::new(ArrowSchema::new(fields)));
    }
    let (names_ref, check_nulls) = (&names, &check_nulls);
    let batches =
        readers
            .into_iter()
            .zip(order)
            .zip(canonical)
            .flat_map(move |((reader, at), out)| {
                let schema = reader.schema();
                reader.map(move |batch| {
                    let batch = batch.map_err(|e| from_arrow_error(e, "reading the source: "))?;
                    let mut columns = Vec::with_capacity(at.len());
                    for (c, &i) in at.iter().enumerate() {
                        let column = canonical_array(&schema.fields()[i], batch.column(i))?;
                        let nulls = column.logical_null_count();
                        if check_nulls[c] && nulls > 0 {
                            return Err(Error::InvalidValue(format!(
                                "column {:?}: expected no nulls in the rows of a tensor column, \
                             found {nulls}",
                                names_ref[c]
                            )));
                        }
                        columns.push(column);
                    }
                    RecordBatch::try_new(Arc::clone(&out), columns).map_err(arrow_err)
                })
            });
    let rows = write_columns(&plan, batches, root, codec, dict, progress)?;
    Ok((rows, names.into_iter().zip(merged).collect()))
}

/// A shard's new values for its live rows (`batches`, in row order) laid
/// over all `rows` of the shard, whose deleted rows are `deleted`
/// (ascending): what a column group holds. A deleted row repeats the value
/// of the live row before it (the first live row's for leading ones; it is
/// never read), or, in a shard without live rows, is null.
pub fn spread_over_deleted(
    schema: arrow_schema::SchemaRef,
    batches: &[RecordBatch],
    deleted: &[u64],
    rows: u64,
) -> Result<RecordBatch> {
    use arrow_array::{new_null_array, UInt64Array};
    let live: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if live + deleted.len() as u64 != rows {
        return Err(Error::InvalidValue(format!(
            "the new columns have {live} rows, but the shard has {} live rows",
            rows - deleted.len() as u64
        )));
    }
    let arrow = |e| from_arrow_error(e, "laying new columns over a shard's deleted rows");
    if live == 0 {
        let columns = schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), rows as usize))
            .collect();
        return RecordBatch::try_new(schema, columns).map_err(arrow);
    }
    let values = arrow_select::concat::concat_batches(&schema, batches).map_err(arrow)?;
    // Physical row p takes the live value numbered (live rows before p),
    // clamped to the first and last.
    let mut take = Vec::with_capacity(rows as usize);
    let mut gone = deleted.iter().peekable();
    let mut seen = 0u64;
    for p in 0..rows {
        if gone.next_if(|&&d| d == p).is_some() {
            take.push(seen.saturating_sub(1));
        } else {
            take.push(seen);
            seen += 1;
        }
    }
    arrow_select::take::take_record_batch(&values, &UInt64Array::from(take)).map_err(arrow)
}
