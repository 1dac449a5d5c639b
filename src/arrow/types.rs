//! The mapping between store schemas and Arrow types and fields.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Fields, Schema as ArrowSchema, SchemaRef};

use super::{EXTENSION_METADATA, EXTENSION_NAME, FIXED_SHAPE_TENSOR, VARIABLE_SHAPE_TENSOR};
use crate::error::{Error, Result};
use crate::read::records::{Records, StoreAccess};
use crate::schema::{DType, Layout, Logical, Schema};

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

pub(super) fn item_field(dtype: DType) -> FieldRef {
    Arc::new(Field::new("item", arrow_type(dtype), true))
}

pub(super) fn shape_json(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{{\"shape\":[{}]}}", dims.join(","))
}

pub(super) fn ragged_fields(dtype: DType) -> Fields {
    Fields::from(vec![
        Field::new("data", DataType::List(item_field(dtype)), false),
        Field::new(
            "shape",
            DataType::List(Arc::new(Field::new("item", DataType::Int32, true))),
            false,
        ),
    ])
}

pub(super) fn tensor_fields(dtype: DType, ndim: usize) -> Fields {
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

pub(super) fn variable_tensor_field(dtype: DType, ndim: usize, name: &str) -> Field {
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
pub(super) fn fixed_dims(dt: &DataType) -> (Vec<u64>, DataType) {
    let mut dims = Vec::new();
    let mut t = dt.clone();
    while let DataType::FixedSizeList(f, n) = t {
        dims.push(n as u64);
        t = f.data_type().clone();
    }
    (dims, t)
}

/// The `shape` of an `arrow.fixed_shape_tensor` field, if it is one.
pub(super) fn tensor_shape(field: &Field) -> Result<Option<Vec<u64>>> {
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
pub(super) fn parse_shape_json(json: &str) -> Option<Vec<u64>> {
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
