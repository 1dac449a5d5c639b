//! Arrow arrays into store records: dense bytes, packed ragged records and
//! text or binary values.

use std::borrow::Cow;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, GenericListArray, OffsetSizeTrait};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field};

use crate::error::{Error, Result};
use crate::read::ragged::Packed;
use crate::schema::{DType, Layout, Logical, Schema};

use super::types::{arrow_type, fixed_dims, logical_of, tensor_shape};

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
    if logical_of(array.data_type()) == Logical::Utf8 {
        // Arrow arrays built from raw buffers (pyarrow's `from_buffers`, an
        // FFI import) are not validated; a value that is not UTF-8 would
        // ingest silently and the column would then read as corrupted.
        array.to_data().validate_full().map_err(|e| {
            Error::InvalidValue(format!(
                "column {:?} is utf8, but the array does not hold valid UTF-8 ({e})",
                field.name()
            ))
        })?;
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
        let rec = crate::read::ragged::parse(packed.record(i), 1).map_err(Error::InvalidValue)?;
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

pub(super) fn no_nulls(array: &dyn Array, what: &str) -> Result<()> {
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
pub(super) fn element_bytes<'a>(
    array: &'a dyn Array,
    dtype: DType,
    what: &str,
) -> Result<Cow<'a, [u8]>> {
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
pub(super) fn struct_shapes(shape: &dyn Array) -> Result<Vec<Vec<u64>>> {
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

pub(super) fn pack_list<O: OffsetSizeTrait>(
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
