//! Arrow views of stores, and Arrow arrays into stores.
//!
//! Mapping (README "Arrow"):
//! * dense, item_shape `()` → a primitive column of the dtype;
//! * dense, item_shape `S` → `FixedSizeList<T>[prod(S)]` carrying the
//!   canonical `arrow.fixed_shape_tensor` extension with `{"shape": S}`;
//! * ragged → `struct{data: List<T>, shape: List<Int32>}` (any ndim), or on
//!   request the canonical `arrow.variable_shape_tensor`
//!   (`struct{data: List<T>, shape: FixedSizeList<Int32>[ndim]}`) when every
//!   record of the batch has the same ndim.
//!
//! Numeric gathers are zero-copy: the gathered [`crate::Buffer`] becomes the
//! Arrow values buffer. `bool` is bit-packed in Arrow, so it is a copy.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, GenericListArray,
    OffsetSizeTrait, PrimitiveArray, RecordBatch, RecordBatchReader, StringArray, StructArray,
    UInt64Array,
};
use arrow_buffer::{BooleanBuffer, Buffer as ArrowBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{
    ArrowError, DataType, Field, FieldRef, Fields, Schema as ArrowSchema, SchemaRef,
};

use crate::codec::Codec;
use crate::error::{Error, Kind, Result};
use crate::ragged::Packed;
use crate::schema::{DType, Layout, Logical, Schema};
use crate::store::{self, Store};

/// Re-exported where Arrow readers and the connectors have always found it.
pub use crate::access::{Indices, Records, StoreAccess};

pub const EXTENSION_NAME: &str = "ARROW:extension:name";
pub const EXTENSION_METADATA: &str = "ARROW:extension:metadata";
pub const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";
pub const VARIABLE_SHAPE_TENSOR: &str = "arrow.variable_shape_tensor";
/// Default bound of one batch of a reader.
pub const DEFAULT_BATCH_BYTES: usize = 16 << 20;

/// The Arrow type of a dtype's elements.
pub fn arrow_type(dtype: DType) -> DataType {
    match dtype {
        DType::Bool => DataType::Boolean,
        DType::I8 => DataType::Int8,
        DType::I16 => DataType::Int16,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::U8 => DataType::UInt8,
        DType::U16 => DataType::UInt16,
        DType::U32 => DataType::UInt32,
        DType::U64 => DataType::UInt64,
        DType::F16 => DataType::Float16,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
    }
}

/// The dtype of an Arrow element type, if a store can hold it.
pub fn dtype_of(data_type: &DataType) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|d| &arrow_type(*d) == data_type)
}

fn item_field(dtype: DType) -> FieldRef {
    Arc::new(Field::new("item", arrow_type(dtype), true))
}

fn shape_json(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{{\"shape\":[{}]}}", dims.join(","))
}

fn ragged_fields(dtype: DType) -> Fields {
    Fields::from(vec![
        Field::new("data", DataType::List(item_field(dtype)), false),
        Field::new(
            "shape",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            false,
        ),
    ])
}

fn tensor_fields(dtype: DType, ndim: usize) -> Fields {
    Fields::from(vec![
        Field::new("data", DataType::List(item_field(dtype)), false),
        Field::new(
            "shape",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Int32, true)),
                ndim as i32,
            ),
            false,
        ),
    ])
}

/// The Arrow field of `records` as a table presents them: Utf8 or Binary
/// for text and binary columns, else [`field_for`] of their schema.
pub fn field_of(records: &dyn Records, name: &str) -> Field {
    let field = match records.logical() {
        Logical::Utf8 => Field::new(name, DataType::Utf8, false),
        Logical::Binary => Field::new(name, DataType::Binary, false),
        Logical::Tensor => field_for(records.schema(), name),
    };
    field.with_nullable(records.validity().is_some())
}

/// The validity of `records` at `idx` (None without a validity stream).
pub fn gather_nulls(records: &dyn Records, idx: &[u64]) -> Result<Option<NullBuffer>> {
    let Some(v) = records.validity() else {
        return Ok(None);
    };
    let bits = v.gather_dense(idx)?;
    let bytes = bits.as_slice();
    Ok(Some(NullBuffer::from(
        bytes.iter().map(|&b| b != 0).collect::<Vec<_>>(),
    )))
}

/// The Arrow field of a store's records (see the module docs).
pub fn field_for(schema: &Schema, name: &str) -> Field {
    match &schema.layout {
        Layout::Dense { item_shape } if item_shape.is_empty() => {
            Field::new(name, arrow_type(schema.dtype), false)
        }
        Layout::Dense { item_shape } => {
            let size = item_shape.iter().product::<u64>() as i32;
            Field::new(
                name,
                DataType::FixedSizeList(item_field(schema.dtype), size),
                false,
            )
            .with_metadata(HashMap::from([
                (EXTENSION_NAME.to_string(), FIXED_SHAPE_TENSOR.to_string()),
                (EXTENSION_METADATA.to_string(), shape_json(item_shape)),
            ]))
        }
        Layout::Ragged => Field::new(name, DataType::Struct(ragged_fields(schema.dtype)), false),
    }
}

fn variable_tensor_field(dtype: DType, ndim: usize, name: &str) -> Field {
    Field::new(name, DataType::Struct(tensor_fields(dtype, ndim)), false).with_metadata(
        HashMap::from([
            (
                EXTENSION_NAME.to_string(),
                VARIABLE_SHAPE_TENSOR.to_string(),
            ),
            (EXTENSION_METADATA.to_string(), "{}".to_string()),
        ]),
    )
}

/// Hands an engine buffer to Arrow without copying it.
fn into_arrow_buffer(buf: crate::Buffer) -> ArrowBuffer {
    let len = buf.len();
    let ptr = NonNull::new(buf.as_ptr() as *mut u8).expect("buffers are never null");
    // SAFETY: `ptr` is valid for `len` bytes for as long as `buf` lives, and
    // Arrow keeps `buf` alive (as the owner) for as long as it uses `ptr`.
    unsafe { ArrowBuffer::from_custom_allocation(ptr, len, Arc::new(buf)) }
}

/// `elements` values of `dtype` held in `buf` as one primitive array.
fn values_array(dtype: DType, buf: ArrowBuffer, elements: usize) -> ArrayRef {
    macro_rules! prim {
        ($t:ty) => {
            Arc::new(PrimitiveArray::<$t>::new(
                ScalarBuffer::new(buf, 0, elements),
                None,
            )) as ArrayRef
        };
    }
    match dtype {
        DType::Bool => {
            let bytes = &buf.as_slice()[..elements];
            Arc::new(BooleanArray::new(
                BooleanBuffer::collect_bool(elements, |i| bytes[i] != 0),
                None,
            ))
        }
        DType::I8 => prim!(Int8Type),
        DType::I16 => prim!(Int16Type),
        DType::I32 => prim!(Int32Type),
        DType::I64 => prim!(Int64Type),
        DType::U8 => prim!(UInt8Type),
        DType::U16 => prim!(UInt16Type),
        DType::U32 => prim!(UInt32Type),
        DType::U64 => prim!(UInt64Type),
        DType::F16 => prim!(Float16Type),
        DType::F32 => prim!(Float32Type),
        DType::F64 => prim!(Float64Type),
    }
}

fn arrow_err(e: ArrowError) -> Error {
    Error::InvalidValue(format!("arrow: {e}"))
}

fn to_i32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::InvalidValue(format!(
            "{what} {v} exceeds the 32-bit offsets of an Arrow List; gather fewer records at a time"
        ))
    })
}

/// Gathers records `idx` of `store` as one Arrow array of [`field_for`]'s type.
pub fn gather_array<'i>(store: &dyn Records, idx: impl Into<Indices<'i>>) -> Result<ArrayRef> {
    let idx = idx.into().resolve(store.len())?;
    let array = gather_values(store, idx)?;
    match gather_nulls(store, idx)? {
        Some(nulls) if nulls.null_count() > 0 => {
            let data = array
                .to_data()
                .into_builder()
                .nulls(Some(nulls))
                .build()
                .map_err(arrow_err)?;
            Ok(arrow_array::make_array(data))
        }
        _ => Ok(array),
    }
}

/// [`gather_array`] without the nulls.
fn gather_values(store: &dyn Records, idx: &[u64]) -> Result<ArrayRef> {
    if store.logical().is_bytes() {
        return gather_bytes_array(store, idx);
    }
    let schema = store.schema();
    match &schema.layout {
        Layout::Dense { item_shape } => {
            let buf = store.gather_dense(idx)?;
            let per = item_shape.iter().product::<u64>() as usize;
            let values = values_array(schema.dtype, into_arrow_buffer(buf), idx.len() * per);
            if item_shape.is_empty() {
                return Ok(values);
            }
            let list =
                FixedSizeListArray::try_new(item_field(schema.dtype), per as i32, values, None)
                    .map_err(arrow_err)?;
            Ok(Arc::new(list))
        }
        Layout::Ragged => {
            let (data, shapes, ndims) = gather_ragged_parts(store, idx)?;
            let mut shape_offsets = Vec::with_capacity(ndims.len() + 1);
            shape_offsets.push(0i32);
            let mut acc = 0usize;
            for &nd in &ndims {
                acc += nd;
                shape_offsets.push(to_i32(acc, "shape count")?);
            }
            let shape = GenericListArray::<i32>::try_new(
                Arc::new(Field::new("item", DataType::Int32, true)),
                OffsetBuffer::new(ScalarBuffer::from(shape_offsets)),
                Arc::new(PrimitiveArray::<Int32Type>::from(shapes)),
                None,
            )
            .map_err(arrow_err)?;
            let s = StructArray::try_new(
                ragged_fields(schema.dtype),
                vec![data, Arc::new(shape)],
                None,
            )
            .map_err(arrow_err)?;
            Ok(Arc::new(s))
        }
    }
}

/// Gathers a ragged store's records as `arrow.variable_shape_tensor`; every
/// record must share one ndim. Returns the array and its field.
pub fn gather_variable_shape_tensor<'i>(
    store: &dyn Records,
    idx: impl Into<Indices<'i>>,
    name: &str,
) -> Result<(ArrayRef, Field)> {
    if store.kind() != Kind::Ragged {
        return Err(Error::InvalidValue(
            "variable_shape_tensor is for ragged stores".into(),
        ));
    }
    let idx = idx.into().resolve(store.len())?;
    let dtype = store.schema().dtype;
    let (data, shapes, ndims) = gather_ragged_parts(store, idx)?;
    let ndim = ndims.first().copied().unwrap_or(1);
    if let Some(bad) = ndims.iter().position(|&n| n != ndim) {
        return Err(Error::InvalidValue(format!(
            "variable_shape_tensor needs one ndim per batch, but record {bad} has ndim {} and record 0 has ndim {ndim}",
            ndims[bad]
        )));
    }
    // With the length given: a batch of 0-d records has ndim 0, and a
    // FixedSizeList of size 0 cannot infer its length from its values.
    let shape = FixedSizeListArray::try_new_with_length(
        Arc::new(Field::new("item", DataType::Int32, true)),
        ndim as i32,
        Arc::new(PrimitiveArray::<Int32Type>::from(shapes)),
        None,
        ndims.len(),
    )
    .map_err(arrow_err)?;
    let s = StructArray::try_new(
        tensor_fields(dtype, ndim),
        vec![data, Arc::new(shape)],
        None,
    )
    .map_err(arrow_err)?;
    Ok((Arc::new(s), variable_tensor_field(dtype, ndim, name)))
}

/// Lays the `(start, len)` runs of a gathered ragged buffer end to end at
/// its start and cuts it there: the payloads without their shape prefixes.
fn pack_down(mut buffer: crate::Buffer, moves: &[(usize, usize)]) -> crate::Buffer {
    let bytes = buffer.as_mut_slice();
    let mut write = 0usize;
    for &(start, len) in moves {
        // Payloads only ever move down (every record has a prefix of at
        // least 8 bytes), so copy_within never overwrites unread bytes.
        bytes.copy_within(start..start + len, write);
        write += len;
    }
    buffer.truncate(write);
    buffer
}

/// Gathers the values of a text or binary column as one Utf8 / Binary
/// array, laying the values end to end in the gathered buffer itself.
fn gather_bytes_array(store: &dyn Records, idx: &[u64]) -> Result<ArrayRef> {
    let logical = store.logical();
    let batch = store.gather_ragged(idx)?;
    let mut offsets = Vec::with_capacity(batch.len() + 1);
    offsets.push(0i32);
    let mut moves = Vec::with_capacity(batch.len());
    let mut total = 0usize;
    for i in 0..batch.len() {
        let rec = batch.record(i);
        let value = crate::schema::bytes_value(&rec).map_err(|e| {
            Error::corrupted(
                store.path(),
                format!("gathered record {i} of a {logical} column: {e}"),
            )
        })?;
        let start = batch.spans[i].0 + rec.payload_offset();
        moves.push((start, value.len()));
        total += value.len();
        offsets.push(to_i32(total, "value bytes")?);
    }
    let buffer = pack_down(batch.buffer, &moves);
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    let values = into_arrow_buffer(buffer);
    Ok(match logical {
        Logical::Utf8 => Arc::new(StringArray::try_new(offsets, values, None).map_err(|e| {
            Error::corrupted(
                store.path(),
                format!("a utf8 column holds a value that is not UTF-8: {e}"),
            )
        })?),
        _ => Arc::new(BinaryArray::new(offsets, values, None)),
    })
}

/// Packs the values of a string or binary Arrow array (any offset width or
/// view) as text/binary records; nulls are refused.
pub fn bytes_pack(array: &dyn Array, field: &Field, nulls: Option<&NullBuffer>) -> Result<Packed> {
    if nulls.is_none() && array.logical_null_count() > 0 {
        return Err(Error::InvalidValue(format!(
            "column {:?}: the array holds {} nulls; stores hold no nulls",
            field.name(),
            array.null_count()
        )));
    }
    let mut packed = Packed::with_capacity(array.len(), 0);
    macro_rules! pack {
        ($arr:expr) => {{
            let a = $arr;
            for i in 0..a.len() {
                let v: &[u8] = if nulls.is_some_and(|n| n.is_null(i)) {
                    &[]
                } else {
                    a.value(i).as_ref()
                };
                crate::schema::push_bytes_value(&mut packed, v);
            }
        }};
    }
    match array.data_type() {
        DataType::Utf8 => pack!(array.as_string::<i32>()),
        DataType::LargeUtf8 => pack!(array.as_string::<i64>()),
        DataType::Utf8View => pack!(array.as_string_view()),
        DataType::Binary => pack!(array.as_binary::<i32>()),
        DataType::LargeBinary => pack!(array.as_binary::<i64>()),
        DataType::BinaryView => pack!(array.as_binary_view()),
        DataType::FixedSizeBinary(_) => pack!(array.as_fixed_size_binary()),
        other => {
            return Err(Error::InvalidType(format!(
                "column {:?}: expected a string or binary array, got {other}",
                field.name()
            )))
        }
    }
    Ok(packed)
}

/// Checks that every packed record is a text value of valid UTF-8 (for
/// appending bytes to a utf8 column).
pub fn check_utf8(packed: &Packed, column: &str) -> Result<()> {
    for i in 0..packed.len() {
        let rec = crate::ragged::parse(packed.record(i), 1).map_err(Error::InvalidValue)?;
        let value = crate::schema::bytes_value(&rec)
            .map_err(|e| Error::InvalidValue(format!("column {column:?}, value {i}: {e}")))?;
        if let Err(e) = std::str::from_utf8(value) {
            return Err(Error::InvalidValue(format!(
                "column {column:?} is utf8, but value {i} is not valid UTF-8 ({e})"
            )));
        }
    }
    Ok(())
}

/// The logical type a column of Arrow type `data_type` becomes: text for
/// Utf8 / LargeUtf8 / Utf8View, binary for Binary / LargeBinary /
/// BinaryView / FixedSizeBinary, else tensor.
pub fn logical_of(data_type: &DataType) -> Logical {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Logical::Utf8,
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => Logical::Binary,
        _ => Logical::Tensor,
    }
}

/// Gathers ragged records and lays their payloads end to end in the gathered
/// buffer itself (moving each payload down over the shape prefixes), so that
/// buffer becomes the `data` child's values. Returns the `List<T>` data
/// array, every record's dims (flattened, as i32) and each record's ndim.
fn gather_ragged_parts(
    store: &dyn Records,
    idx: &[u64],
) -> Result<(ArrayRef, Vec<i32>, Vec<usize>)> {
    let dtype = store.schema().dtype;
    let itemsize = dtype.itemsize();
    let batch = store.gather_ragged(idx)?;
    let mut shapes = Vec::new();
    let mut ndims = Vec::with_capacity(batch.len());
    let mut offsets = Vec::with_capacity(batch.len() + 1);
    offsets.push(0i32);
    let mut moves = Vec::with_capacity(batch.len());
    let mut elements = 0usize;
    for i in 0..batch.len() {
        let rec = batch.record(i);
        ndims.push(rec.ndim());
        for d in rec.dims() {
            shapes.push(to_i32(d as usize, "dimension")?);
        }
        let start = batch.spans[i].0 + rec.payload_offset();
        moves.push((start, rec.payload.len()));
        elements += rec.payload.len() / itemsize;
        offsets.push(to_i32(elements, "element count")?);
    }
    let buffer = pack_down(batch.buffer, &moves);
    let values = values_array(dtype, into_arrow_buffer(buffer), elements);
    let data = GenericListArray::<i32>::try_new(
        item_field(dtype),
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        values,
        None,
    )
    .map_err(arrow_err)?;
    Ok((Arc::new(data), shapes, ndims))
}

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
fn rows_within<S: StoreAccess>(
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

// ---------------------------------------------------------------- Arrow → store

/// What a store made from an Arrow field looks like (for ingest).
pub fn schema_for_field(field: &Field) -> Result<Schema> {
    let dt = field.data_type();
    if logical_of(dt).is_bytes() {
        return Ok(Schema::ragged(DType::U8));
    }
    let unsupported = || {
        Error::InvalidType(format!(
            "column {:?} of Arrow type {dt} has no store mapping (supported: a primitive, \
             FixedSizeList, List/LargeList or struct{{data, shape}} of bool, int, uint or float; \
             or text (Utf8, LargeUtf8, Utf8View) or bytes (Binary, LargeBinary, BinaryView, \
             FixedSizeBinary))",
            field.name()
        ))
    };
    let elem = |t: &DataType| dtype_of(t).ok_or_else(unsupported);
    match dt {
        DataType::FixedSizeList(..) => {
            let (dims, leaf) = fixed_dims(dt);
            let dtype = elem(&leaf)?;
            let shape = match tensor_shape(field)? {
                Some(shape) => shape,
                None => dims,
            };
            Schema::dense(dtype, &shape)
        }
        DataType::List(f) | DataType::LargeList(f) => Ok(Schema::ragged(elem(f.data_type())?)),
        DataType::Struct(fields) => match fields.find("data") {
            Some((_, f)) => match f.data_type() {
                DataType::List(item) | DataType::LargeList(item)
                    if fields.find("shape").is_some() =>
                {
                    Ok(Schema::ragged(elem(item.data_type())?))
                }
                _ => Err(unsupported()),
            },
            None => Err(unsupported()),
        },
        other => Ok(Schema::dense(elem(other)?, &[])?),
    }
}

/// Dims of (possibly nested) fixed-size lists and their leaf type.
fn fixed_dims(dt: &DataType) -> (Vec<u64>, DataType) {
    let mut dims = Vec::new();
    let mut t = dt.clone();
    while let DataType::FixedSizeList(f, n) = t {
        dims.push(n as u64);
        t = f.data_type().clone();
    }
    (dims, t)
}

/// The `shape` of an `arrow.fixed_shape_tensor` field, if it is one.
fn tensor_shape(field: &Field) -> Result<Option<Vec<u64>>> {
    let md = field.metadata();
    if md.get(EXTENSION_NAME).map(String::as_str) != Some(FIXED_SHAPE_TENSOR) {
        return Ok(None);
    }
    let json = md.get(EXTENSION_METADATA).map(String::as_str).unwrap_or("");
    parse_shape_json(json).map(Some).ok_or_else(|| {
        Error::InvalidValue(format!(
            "column {:?}: arrow.fixed_shape_tensor metadata {json:?} has no readable \"shape\"",
            field.name()
        ))
    })
}

/// Reads `"shape": [..]` from the tensor extension's JSON metadata.
fn parse_shape_json(json: &str) -> Option<Vec<u64>> {
    let at = json.find("\"shape\"")?;
    let rest = &json[at + 7..];
    let open = rest.find('[')?;
    let close = rest[open..].find(']')? + open;
    if !rest[..open].trim_start().starts_with(':') {
        return None;
    }
    let inner = &rest[open + 1..close];
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|d| d.trim().parse::<u64>().ok())
        .collect()
}

fn no_nulls(array: &dyn Array, what: &str) -> Result<()> {
    if array.logical_null_count() > 0 {
        return Err(Error::InvalidValue(format!(
            "{what} holds {} nulls; stores hold no nulls",
            array.logical_null_count()
        )));
    }
    Ok(())
}

/// The element bytes of a primitive (or boolean) array, after checking its
/// type is `dtype`. Borrowed from the array except for bit-packed bools.
fn element_bytes<'a>(array: &'a dyn Array, dtype: DType, what: &str) -> Result<Cow<'a, [u8]>> {
    if array.data_type() != &arrow_type(dtype) {
        return Err(Error::InvalidType(format!(
            "{what}: Arrow type {}, expected {} (the store's dtype {dtype})",
            array.data_type(),
            arrow_type(dtype)
        )));
    }
    no_nulls(array, what)?;
    macro_rules! raw {
        ($t:ty) => {
            // The values buffer is already sliced to the array's window.
            Cow::Borrowed(array.as_primitive::<$t>().values().inner().as_slice())
        };
    }
    Ok(match dtype {
        DType::Bool => Cow::Owned(array.as_boolean().values().iter().map(u8::from).collect()),
        DType::I8 => raw!(Int8Type),
        DType::I16 => raw!(Int16Type),
        DType::I32 => raw!(Int32Type),
        DType::I64 => raw!(Int64Type),
        DType::U8 => raw!(UInt8Type),
        DType::U16 => raw!(UInt16Type),
        DType::U32 => raw!(UInt32Type),
        DType::U64 => raw!(UInt64Type),
        DType::F16 => raw!(Float16Type),
        DType::F32 => raw!(Float32Type),
        DType::F64 => raw!(Float64Type),
    })
}

/// Calls `f` with the bytes of dense records taken from an Arrow array that
/// matches the store's schema (no copy for numeric dtypes).
pub fn with_dense_bytes<T>(
    schema: &Schema,
    array: &dyn Array,
    field: &Field,
    f: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    let Layout::Dense { item_shape } = &schema.layout else {
        return Err(Error::InvalidValue("a dense store was expected".into()));
    };
    let dtype = schema.dtype;
    no_nulls(array, "the array")?;
    if item_shape.is_empty() {
        if let DataType::FixedSizeList(..) = array.data_type() {
            return Err(Error::InvalidType(format!(
                "a dense store of scalars takes a primitive array, got Arrow type {}",
                array.data_type()
            )));
        }
        return f(&element_bytes(array, dtype, "the array")?);
    }
    let (dims, leaf) = fixed_dims(array.data_type());
    if dims.is_empty() {
        return Err(Error::InvalidType(format!(
            "a dense store of item_shape {item_shape:?} takes a FixedSizeList (or fixed_shape_tensor) array, got Arrow type {}",
            array.data_type()
        )));
    }
    if leaf != arrow_type(dtype) {
        return Err(Error::InvalidType(format!(
            "the array's elements are {leaf}, expected {} (the store's dtype {dtype})",
            arrow_type(dtype)
        )));
    }
    let want: u64 = item_shape.iter().product();
    let got: u64 = dims.iter().product();
    if got != want {
        return Err(Error::InvalidValue(format!(
            "the array's records have {got} elements ({dims:?}), but item_shape {item_shape:?} needs {want}"
        )));
    }
    if let Some(shape) = tensor_shape(field)? {
        if &shape != item_shape {
            return Err(Error::InvalidValue(format!(
                "the tensor's shape {shape:?} differs from the store's item_shape {item_shape:?}"
            )));
        }
    }
    // Each level's values() is already sliced to the parent's window.
    let mut leaf_array: ArrayRef = array.as_fixed_size_list().values().clone();
    while let DataType::FixedSizeList(..) = leaf_array.data_type() {
        no_nulls(leaf_array.as_ref(), "the array's values")?;
        let next = leaf_array.as_fixed_size_list().values().clone();
        leaf_array = next;
    }
    f(&element_bytes(
        leaf_array.as_ref(),
        dtype,
        "the array's values",
    )?)
}

/// Packs ragged records from an Arrow array: List / LargeList (1-D records),
/// the ragged struct or variable_shape_tensor, FixedSizeList / tensors
/// (records of the fixed shape) and primitives (0-d records).
pub fn ragged_pack(dtype: DType, array: &dyn Array, field: &Field) -> Result<Packed> {
    if dtype == DType::U8 && logical_of(array.data_type()).is_bytes() {
        // Strings and byte strings into a uint8 store: one value per record.
        return bytes_pack(array, field, None);
    }
    no_nulls(array, "the array")?;
    match array.data_type() {
        DataType::List(_) => {
            let l = array.as_list::<i32>();
            pack_list(dtype, l, None, None)
        }
        DataType::LargeList(_) => {
            let l = array.as_list::<i64>();
            pack_list(dtype, l, None, None)
        }
        DataType::Struct(_) => {
            let s = array.as_struct();
            let (data, shape) = match (s.column_by_name("data"), s.column_by_name("shape")) {
                (Some(d), Some(sh)) => (d, sh),
                _ => {
                    return Err(Error::InvalidType(format!(
                        "a struct array must have fields data and shape, got {}",
                        array.data_type()
                    )))
                }
            };
            no_nulls(data.as_ref(), "the data field")?;
            no_nulls(shape.as_ref(), "the shape field")?;
            let shapes = struct_shapes(shape.as_ref())?;
            match data.data_type() {
                DataType::List(_) => pack_list(dtype, data.as_list::<i32>(), Some(&shapes), None),
                DataType::LargeList(_) => {
                    pack_list(dtype, data.as_list::<i64>(), Some(&shapes), None)
                }
                other => Err(Error::InvalidType(format!(
                    "the data field must be a List or LargeList, got {other}"
                ))),
            }
        }
        DataType::FixedSizeList(..) => {
            let (dims, _) = fixed_dims(array.data_type());
            let shape = tensor_shape(field)?.unwrap_or(dims);
            let schema = Schema::dense(dtype, &shape)?;
            let width = schema.record_width().unwrap() as usize;
            with_dense_bytes(&schema, array, field, |bytes| {
                let extra = array.len() * 8 * (1 + shape.len());
                let mut packed = Packed::with_capacity(array.len(), bytes.len() + extra);
                for rec in bytes.chunks_exact(width) {
                    packed.push(&shape, rec);
                }
                Ok(packed)
            })
        }
        _ => {
            let bytes = element_bytes(array, dtype, "the array")?;
            let size = dtype.itemsize();
            let mut packed = Packed::with_capacity(array.len(), bytes.len() + array.len() * 8);
            for rec in bytes.chunks_exact(size) {
                packed.push(&[], rec);
            }
            Ok(packed)
        }
    }
}

/// Per-record shapes from a `shape` child: List<Int32|Int64> or FixedSizeList<Int32|Int64>.
fn struct_shapes(shape: &dyn Array) -> Result<Vec<Vec<u64>>> {
    let dims = |a: &dyn Array| -> Result<Vec<u64>> {
        let out: Option<Vec<u64>> = match a.data_type() {
            DataType::Int32 => a
                .as_primitive::<Int32Type>()
                .values()
                .iter()
                .map(|&v| u64::try_from(v).ok())
                .collect(),
            DataType::Int64 => a
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .map(|&v| u64::try_from(v).ok())
                .collect(),
            other => {
                return Err(Error::InvalidType(format!(
                    "shape values must be Int32 or Int64, got {other}"
                )))
            }
        };
        out.ok_or_else(|| Error::InvalidValue("a shape holds a negative dimension".into()))
    };
    match shape.data_type() {
        DataType::List(_) => {
            let l = shape.as_list::<i32>();
            (0..l.len()).map(|i| dims(l.value(i).as_ref())).collect()
        }
        DataType::LargeList(_) => {
            let l = shape.as_list::<i64>();
            (0..l.len()).map(|i| dims(l.value(i).as_ref())).collect()
        }
        DataType::FixedSizeList(..) => {
            let l = shape.as_fixed_size_list();
            (0..l.len()).map(|i| dims(l.value(i).as_ref())).collect()
        }
        other => Err(Error::InvalidType(format!(
            "the shape field must be a List or FixedSizeList of integers, got {other}"
        ))),
    }
}

fn pack_list<O: OffsetSizeTrait>(
    dtype: DType,
    list: &GenericListArray<O>,
    shapes: Option<&[Vec<u64>]>,
    nulls: Option<&NullBuffer>,
) -> Result<Packed> {
    let values = list.values();
    let offsets = list.value_offsets();
    let first = offsets[0].as_usize();
    let last = offsets[list.len()].as_usize();
    let window = values.slice(first, last - first);
    let bytes = element_bytes(window.as_ref(), dtype, "the list values")?;
    let size = dtype.itemsize();
    let mut packed = Packed::with_capacity(list.len(), bytes.len() + list.len() * 16);
    let zero = [0u8; 8];
    for i in 0..list.len() {
        if nulls.is_some_and(|n| n.is_null(i)) {
            // A null row's placeholder: the 0-d record 0.
            packed.push(&[], &zero[..size]);
            continue;
        }
        let a = offsets[i].as_usize() - first;
        let b = offsets[i + 1].as_usize() - first;
        if a == b {
            return Err(Error::InvalidValue(format!(
                "record {i} is empty; ragged records must be nonempty"
            )));
        }
        let payload = &bytes[a * size..b * size];
        match shapes {
            Some(shapes) => {
                let shape = &shapes[i];
                let n: u64 = shape.iter().product();
                if n != (b - a) as u64 {
                    return Err(Error::InvalidValue(format!(
                        "record {i}: shape {shape:?} holds {n} elements but its data has {}",
                        b - a
                    )));
                }
                packed.push(shape, payload);
            }
            None => packed.push(&[(b - a) as u64], payload),
        }
    }
    Ok(packed)
}

/// The loaderx error an Arrow error carries (a store read failing inside a
/// batch stream, an I/O failure a connector reports) with its class kept;
/// any other Arrow error becomes `InvalidValue`, its message after
/// `context`. The one unwrapping of `ArrowError` for the core and the
/// connectors.
pub fn from_arrow_error(e: ArrowError, context: &str) -> Error {
    match e {
        ArrowError::ExternalError(inner) => match inner.downcast::<Error>() {
            Ok(err) => *err,
            Err(other) => {
                Error::InvalidValue(format!("{context}{}", ArrowError::ExternalError(other)))
            }
        },
        other => Error::InvalidValue(format!("{context}{other}")),
    }
}

/// Names the column in a validation error.
fn in_column(e: Error, column: &str) -> Error {
    match e {
        Error::InvalidValue(m) => Error::InvalidValue(format!("column {column:?}: {m}")),
        Error::InvalidType(m) => Error::InvalidType(format!("column {column:?}: {m}")),
        other => other,
    }
}

fn column_dir(root: &Path, name: &str) -> Result<PathBuf> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::InvalidValue(format!(
            "column name {name:?} cannot name a store directory"
        )));
    }
    Ok(root.join(name))
}

/// Streams every batch of `reader` into one new store per column under
/// `root/<column>`, with memory bounded by one batch. FixedSizeList (with or
/// without the tensor extension) becomes a dense store, List/LargeList a
/// ragged store of 1-D records, the ragged struct a ragged store, a primitive
/// a dense store of scalars, a string or binary column a ragged uint8 store
/// of its values (typed in the table file). Null rows are allowed (not
/// nulls inside a row's tensor): a column with any gets a validity stream
/// (`.validity/<column>`, see [`crate::table`]) and a placeholder record in
/// each null row; a column without costs nothing extra. `progress` sees the
/// rows written so far. On any error the stores created by this call are
/// removed. Returns each column's name and store kind; the stores are
/// closed.
pub fn ingest(
    reader: impl RecordBatchReader,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, Kind)>> {
    use crate::table::{self, ColumnType};

    let arrow_schema = reader.schema();
    let mut plan = Vec::new();
    for field in arrow_schema.fields() {
        let dir = column_dir(root, field.name())?;
        let schema = schema_for_field(field)?;
        for d in [dir.clone(), table::validity_dir(root, field.name())] {
            if d.join(crate::format::META_FILE).exists() {
                return Err(Error::AlreadyExists {
                    path: d,
                    reason: format!("a store already exists here (column {:?})", field.name()),
                });
            }
        }
        plan.push((Arc::clone(field), dir, schema));
    }
    // Column types go to the table file first, so a column that exists
    // never lacks its type; validity streams are recorded as they appear.
    let mut recorded: Vec<(String, ColumnType)> = plan
        .iter()
        .map(|(f, _, _)| {
            let logical = logical_of(f.data_type());
            (
                f.name().clone(),
                ColumnType {
                    logical,
                    nullable: false,
                },
            )
        })
        .filter(|(_, t)| t.logical.is_bytes())
        .collect();
    if !recorded.is_empty() {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        table::write_types(root, &recorded)?;
    }
    let validity_codec = if codec == Codec::Raw {
        Codec::Raw
    } else {
        Codec::Zstd
    };
    let mut stores: Vec<Store> = Vec::with_capacity(plan.len());
    let mut validity: Vec<Option<Store>> = plan.iter().map(|_| None).collect();
    let written = || -> Result<()> {
        for (_, dir, schema) in &plan {
            stores.push(Store::create(dir, schema.clone(), codec, dict)?);
        }
        let mut rows = 0u64;
        for batch in reader {
            let batch = batch.map_err(|e| from_arrow_error(e, "reading the source: "))?;
            for (c, ((field, _, schema), (store, column))) in plan
                .iter()
                .zip(stores.iter_mut().zip(batch.columns()))
                .enumerate()
            {
                let nulls = column.logical_nulls().filter(|n| n.null_count() > 0);
                if nulls.is_some() && validity[c].is_none() {
                    // The first null of this column: its validity stream
                    // starts with every earlier row valid.
                    let name = field.name().clone();
                    let t = ColumnType {
                        logical: logical_of(field.data_type()),
                        nullable: true,
                    };
                    std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
                    table::write_types(root, &[(name.clone(), t)])?;
                    recorded.retain(|(n, _)| *n != name);
                    recorded.push((name.clone(), t));
                    let schema = Schema::dense(DType::Bool, &[])?;
                    let mut v = Store::create(
                        table::validity_dir(root, &name),
                        schema,
                        validity_codec,
                        None,
                    )?;
                    v.append_dense(&vec![1u8; rows as usize])?;
                    validity[c] = Some(v);
                }
                if let Some(v) = validity[c].as_mut() {
                    let bits: Vec<u8> = match &nulls {
                        Some(n) => n.iter().map(u8::from).collect(),
                        None => vec![1u8; column.len()],
                    };
                    v.append_dense(&bits)?;
                }
                append_column(store, schema, field, column, nulls.as_ref())
                    .map_err(|e| in_column(e, field.name()))?;
            }
            rows += batch.num_rows() as u64;
            progress(rows);
        }
        Ok(())
    };
    match written() {
        Ok(()) => {
            for s in stores {
                s.close()?;
            }
            for v in validity.into_iter().flatten() {
                v.close()?;
            }
            Ok(plan
                .iter()
                .map(|(f, _, s)| (f.name().clone(), s.kind()))
                .collect())
        }
        Err(e) => {
            // Nothing half-written: drop what this call created.
            let created = stores.len();
            drop(stores);
            for (_, dir, _) in plan.iter().take(created) {
                let _ = std::fs::remove_dir_all(dir);
            }
            for ((f, _, _), v) in plan.iter().zip(validity) {
                if let Some(v) = v {
                    drop(v);
                    let _ = std::fs::remove_dir_all(table::validity_dir(root, f.name()));
                }
            }
            let _ = std::fs::remove_dir(root.join(table::VALIDITY_DIR));
            if !recorded.is_empty() {
                let plain: Vec<_> = recorded
                    .iter()
                    .map(|(n, _)| (n.clone(), ColumnType::default()))
                    .collect();
                let _ = table::write_types(root, &plain);
            }
            Err(e)
        }
    }
}

/// Appends one batch's `column` to `store`; `nulls` marks its null rows,
/// which get a placeholder record (zeros; an empty value for text).
fn append_column(
    store: &mut Store,
    schema: &Schema,
    field: &Field,
    column: &ArrayRef,
    nulls: Option<&NullBuffer>,
) -> Result<()> {
    let logical = logical_of(field.data_type());
    if let DataType::FixedSizeList(..) = column.data_type() {
        if column.as_fixed_size_list().values().logical_null_count() > 0 {
            // Names the row whose tensor holds a null (unless its row is null).
            let valid = NullBuffer::new_valid(column.len());
            strip_row_nulls(column.as_ref(), nulls.unwrap_or(&valid))?;
        }
    }
    let Some(nulls) = nulls else {
        return match schema.kind() {
            _ if logical.is_bytes() => bytes_pack(column.as_ref(), field, None)
                .and_then(|packed| store.append_ragged(&packed)),
            Kind::Dense => {
                with_dense_bytes(schema, column.as_ref(), field, |b| store.append_dense(b))
            }
            Kind::Ragged => ragged_pack(schema.dtype, column.as_ref(), field)
                .and_then(|packed| store.append_ragged(&packed)),
        };
    };
    let stripped = strip_row_nulls(column.as_ref(), nulls)?;
    match schema.kind() {
        _ if logical.is_bytes() => bytes_pack(stripped.as_ref(), field, Some(nulls))
            .and_then(|packed| store.append_ragged(&packed)),
        Kind::Dense => with_dense_bytes(schema, stripped.as_ref(), field, |b| {
            let width = b.len() / column.len().max(1);
            let mut bytes = b.to_vec();
            for (i, valid) in nulls.iter().enumerate() {
                if !valid {
                    bytes[i * width..(i + 1) * width].fill(0);
                }
            }
            store.append_dense(&bytes)
        }),
        Kind::Ragged => {
            let dtype = schema.dtype;
            let packed = match stripped.data_type() {
                DataType::List(_) => pack_list(dtype, stripped.as_list::<i32>(), None, Some(nulls)),
                DataType::LargeList(_) => {
                    pack_list(dtype, stripped.as_list::<i64>(), None, Some(nulls))
                }
                DataType::Struct(_) => {
                    // The ragged struct: its children's values in null rows
                    // are placeholders too.
                    let s = stripped.as_struct();
                    let (Some(data), Some(shape)) =
                        (s.column_by_name("data"), s.column_by_name("shape"))
                    else {
                        return Err(Error::InvalidType(format!(
                            "a struct array must have fields data and shape, got {}",
                            stripped.data_type()
                        )));
                    };
                    let data = strip_row_nulls(data.as_ref(), nulls)?;
                    let shape = strip_row_nulls(shape.as_ref(), nulls)?;
                    let shapes = struct_shapes(shape.as_ref())?;
                    match data.data_type() {
                        DataType::List(_) => {
                            pack_list(dtype, data.as_list::<i32>(), Some(&shapes), Some(nulls))
                        }
                        DataType::LargeList(_) => {
                            pack_list(dtype, data.as_list::<i64>(), Some(&shapes), Some(nulls))
                        }
                        other => Err(Error::InvalidType(format!(
                            "the data field must be a List or LargeList, got {other}"
                        ))),
                    }
                }
                other => Err(Error::InvalidType(format!(
                    "a ragged column takes List, LargeList or struct{{data, shape}}, got {other}"
                ))),
            };
            packed.and_then(|packed| store.append_ragged(&packed))
        }
    }
}

/// `array` without its row nulls (the rows stay, their values become
/// placeholders). Nulls inside a fixed-size row (a tensor element) are
/// refused: only whole rows may be null.
fn strip_row_nulls(array: &dyn Array, nulls: &NullBuffer) -> Result<ArrayRef> {
    if let DataType::FixedSizeList(f, size) = array.data_type() {
        let list = array.as_fixed_size_list();
        let values = list.values();
        let size_u = *size as usize;
        let child_nulls = values.logical_nulls().filter(|n| n.null_count() > 0);
        let values = match child_nulls {
            None => Arc::clone(values),
            Some(cn) => {
                if let Some(j) = cn.iter().enumerate().find_map(|(j, valid)| {
                    (!valid && nulls.is_valid(j / size_u.max(1))).then_some(j)
                }) {
                    return Err(Error::InvalidValue(format!(
                        "row {} holds a null inside its tensor (element {}); only whole rows may be null",
                        j / size_u.max(1),
                        j % size_u.max(1)
                    )));
                }
                // Every child null lies in a null row: those elements are
                // placeholders too.
                let row_of = |j: usize| nulls.is_valid(j / size_u.max(1));
                let expanded = NullBuffer::from((0..values.len()).map(row_of).collect::<Vec<_>>());
                strip_row_nulls(values.as_ref(), &expanded)?
            }
        };
        let out =
            FixedSizeListArray::try_new(Arc::clone(f), *size, values, None).map_err(arrow_err)?;
        return Ok(Arc::new(out));
    }
    let data = array
        .to_data()
        .into_builder()
        .nulls(None)
        .build()
        .map_err(arrow_err)?;
    Ok(arrow_array::make_array(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_json_round_trip() {
        assert_eq!(
            parse_shape_json(&shape_json(&[3, 224, 224])),
            Some(vec![3, 224, 224])
        );
        assert_eq!(
            parse_shape_json("{\"shape\": [2, 3], \"dim_names\": [\"a\",\"b\"]}"),
            Some(vec![2, 3])
        );
        assert_eq!(parse_shape_json("{}"), None);
        assert_eq!(parse_shape_json("{\"shape\":[-1]}"), None);
    }

    #[test]
    fn variable_shape_tensor_of_scalar_records() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = Store::create(
            tmp.path().join("s"),
            Schema::ragged(DType::I32),
            Codec::Raw,
            None,
        )
        .unwrap();
        let mut packed = Packed::default();
        packed.push(&[], &7i32.to_le_bytes());
        packed.push(&[], &9i32.to_le_bytes());
        store.append_ragged(&packed).unwrap();
        let (array, _) = gather_variable_shape_tensor(&store, &[0u64, 1], "x").unwrap();
        assert_eq!(array.len(), 2);
        let s = array.as_any().downcast_ref::<StructArray>().unwrap();
        assert_eq!(s.column(1).len(), 2);
    }

    #[test]
    fn every_dtype_maps_back() {
        for d in DType::ALL {
            assert_eq!(dtype_of(&arrow_type(d)), Some(d));
        }
        assert_eq!(dtype_of(&DataType::Utf8), None);
    }
}
