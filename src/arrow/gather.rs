//! Gathers as Arrow arrays: the gathered buffer becomes the Arrow values
//! buffer (zero-copy for numeric dtypes).

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeListArray, GenericListArray,
    PrimitiveArray, StringArray, StructArray,
};
use arrow_buffer::{BooleanBuffer, Buffer as ArrowBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field};

use crate::error::{Error, Result};
use crate::read::overlay::Hit;
use crate::read::records::{Indices, Records, Typed};
use crate::read::Overlay;
use crate::schema::Kind;
use crate::schema::{DType, Layout, Logical, Schema};

use super::types::{item_field, ragged_fields, tensor_fields, variable_tensor_field};

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

/// Hands an engine buffer to Arrow without copying it.
pub(crate) fn into_arrow_buffer(buf: crate::Buffer) -> ArrowBuffer {
    let len = buf.len();
    let ptr = NonNull::new(buf.as_ptr() as *mut u8).expect("buffers are never null");
    // SAFETY: `ptr` is valid for `len` bytes for as long as `buf` lives, and
    // Arrow keeps `buf` alive (as the owner) for as long as it uses `ptr`.
    unsafe { ArrowBuffer::from_custom_allocation(ptr, len, Arc::new(buf)) }
}

/// `elements` values of `dtype` held in `buf` as one primitive array.
pub(crate) fn values_array(dtype: DType, buf: ArrowBuffer, elements: usize) -> ArrayRef {
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

pub(super) fn arrow_err(e: ArrowError) -> Error {
    Error::InvalidValue(format!("arrow: {e}"))
}

pub(super) fn to_i32(v: usize, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::InvalidValue(format!(
            "{what} {v} exceeds the 32-bit offsets of an Arrow List; gather fewer records at a time"
        ))
    })
}

/// Gathers records `idx` of `store` as one Arrow array of [`field_for`](super::field_for)'s type.
pub fn gather_array<'i>(store: &dyn Records, idx: impl Into<Indices<'i>>) -> Result<ArrayRef> {
    let idx = idx.into().resolve(store.len())?;
    if let Some(c) = store.columnar() {
        // Rows in order are a scan (nothing kept); rows at random keep
        // their chunks decoded within the budget.
        return c.take_array(idx);
    }
    if let Some((o, base)) = store
        .overlay()
        .and_then(|o| o.base_columnar().map(|b| (o, b)))
    {
        return overlay_array(store, o, base, idx);
    }
    records_array(store, idx)
}

/// The columnar column at the base of whatever reads `store` by whole
/// arrays: the column itself, or the one its patches lie over.
pub fn array_base(store: &dyn Records) -> Option<&crate::columnar::Columnar> {
    store
        .columnar()
        .or_else(|| store.overlay().and_then(|o| o.base_columnar()))
}

/// Records `idx` of a columnar column with patches laid over it: the
/// base's array (slices of its chunks for a run of rows), with the
/// patched records laid over it in their places.
fn overlay_array(
    store: &dyn Records,
    o: &Overlay,
    base: &crate::columnar::Columnar,
    idx: &[u64],
) -> Result<ArrayRef> {
    let (phys, hits) = o.patched_places(idx)?;
    let array = base.take_array(&phys)?;
    lay_patches(store, o, array, &hits, |v| {
        v.patched_places(idx).map(|(_, h)| h)
    })
    .or_else(|e| match e {
        Fallback::Records => records_array(store, idx),
        Fallback::Err(e) => Err(e),
    })
}

/// Records `lo..hi` of a columnar column with patches laid over it and
/// no selection: [`overlay_array`] of a run of records, which the scans
/// of whole stripes read.
pub(crate) fn overlay_range(store: &dyn Records, lo: u64, hi: u64) -> Result<Option<ArrayRef>> {
    let Some((o, base)) = store
        .overlay()
        .and_then(|o| o.base_columnar().map(|b| (o, b)))
    else {
        return Ok(None);
    };
    if o.selection().is_some() || base.selection().is_some() {
        return Ok(None);
    }
    let hits = o.patched_range(lo, hi)?;
    let array = base.read_range(lo, hi)?;
    match lay_patches(store, o, array, &hits, |v| v.patched_range(lo, hi)) {
        Ok(a) => Ok(Some(a)),
        Err(Fallback::Records) => {
            let idx: Vec<u64> = (lo..hi).collect();
            records_array(store, &idx).map(Some)
        }
        Err(Fallback::Err(e)) => Err(e),
    }
}

/// Why [`lay_patches`] did not lay them: an error, or patches it cannot
/// lay from the decoded values alone (the caller reads as records).
enum Fallback {
    Records,
    Err(Error),
}

impl From<Error> for Fallback {
    fn from(e: Error) -> Fallback {
        Fallback::Err(e)
    }
}

/// `array` (the base's values of some records) with the patched values
/// `hits` of `o` laid over it, their nulls from the validity's own
/// patches (`validity_hits` of the validity overlay).
fn lay_patches(
    store: &dyn Records,
    o: &Overlay,
    array: ArrayRef,
    hits: &[Hit],
    validity_hits: impl Fn(&Overlay) -> Result<Vec<Hit>>,
) -> std::result::Result<ArrayRef, Fallback> {
    let validity = match store.validity() {
        None => None,
        Some(v) => match v.overlay() {
            Some(vo) => Some((vo, validity_hits(vo)?)),
            // A validity that is not an overlay over a patched column.
            None => return Err(Fallback::Records),
        },
    };
    if let Some((_, vh)) = &validity {
        // Every patch writes the values and the validity of the same
        // rows: anything else is read as records.
        if vh.len() != hits.len() || vh.iter().zip(hits).any(|(a, b)| a.pos != b.pos) {
            return Err(Fallback::Records);
        }
    }
    if hits.is_empty() {
        return Ok(array);
    }
    let values = o.patched(hits)?;
    let patched = match &validity {
        None => records_array(&values, &(0..hits.len() as u64).collect::<Vec<_>>())?,
        Some((vo, vh)) => {
            let bits = vo.patched(vh)?;
            let typed = Typed::new(&values, store.logical())?.with_validity(&bits)?;
            records_array(&typed, &(0..hits.len() as u64).collect::<Vec<_>>())?
        }
    };
    if patched.data_type() != array.data_type() {
        return Err(Fallback::Err(Error::InvalidValue(format!(
            "{}: patches read as {}, but the column reads as {}",
            store.path().display(),
            patched.data_type(),
            array.data_type()
        ))));
    }
    if let Some(a) = lay_fixed(&array, &patched, hits)? {
        return Ok(a);
    }
    let mut at: Vec<(usize, usize)> = (0..array.len()).map(|i| (0, i)).collect();
    for (k, h) in hits.iter().enumerate() {
        at[h.pos] = (1, k);
    }
    arrow_select::interleave::interleave(&[array.as_ref(), patched.as_ref()], &at)
        .map_err(|e| Fallback::Err(arrow_err(e)))
}

/// [`lay_patches`] for fixed-width values: the base's values copied
/// once, the patched ones written over them in place (None for other
/// types).
fn lay_fixed(array: &ArrayRef, patched: &ArrayRef, hits: &[Hit]) -> Result<Option<ArrayRef>> {
    let Some(w) = array.data_type().primitive_width() else {
        return Ok(None);
    };
    let (a, p) = (array.to_data(), patched.to_data());
    let n = a.len();
    let src = &a.buffers()[0].as_slice()[a.offset() * w..(a.offset() + n) * w];
    let new = &p.buffers()[0].as_slice()[p.offset() * w..(p.offset() + p.len()) * w];
    let mut values = arrow_buffer::MutableBuffer::new(n * w);
    values.extend_from_slice(src);
    let out = values.as_slice_mut();
    for (k, h) in hits.iter().enumerate() {
        out[h.pos * w..(h.pos + 1) * w].copy_from_slice(&new[k * w..(k + 1) * w]);
    }
    let nulls = if a.nulls().is_none() && p.nulls().is_none() {
        None
    } else {
        let mut bits = arrow_buffer::BooleanBufferBuilder::new(n);
        match a.nulls() {
            Some(nb) => bits.append_buffer(nb.inner()),
            None => bits.append_n(n, true),
        }
        for (k, h) in hits.iter().enumerate() {
            bits.set_bit(h.pos, p.is_valid(k));
        }
        Some(NullBuffer::new(bits.finish()))
    };
    let data = arrow_data::ArrayData::builder(array.data_type().clone())
        .len(n)
        .add_buffer(values.into())
        .nulls(nulls)
        .build()
        .map_err(arrow_err)?;
    Ok(Some(arrow_array::make_array(data)))
}

/// [`gather_array`] of a column read as records.
fn records_array(store: &dyn Records, idx: &[u64]) -> Result<ArrayRef> {
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

/// `values`, uint8 tensors of `shape` end to end, as the column `name`
/// of a dense uint8 store of that item shape reads in Arrow (a
/// `FixedSizeList<UInt8>` with the `arrow.fixed_shape_tensor` extension),
/// without a copy.
pub fn u8_tensors(name: &str, shape: &[u64], values: crate::Buffer) -> Result<(Field, ArrayRef)> {
    let schema = Schema {
        dtype: DType::U8,
        layout: Layout::Dense {
            item_shape: shape.to_vec(),
        },
    };
    let per = shape.iter().product::<u64>() as usize;
    let rows = values.len() / per.max(1);
    let flat = values_array(DType::U8, into_arrow_buffer(values), rows * per);
    let list = FixedSizeListArray::try_new_with_length(
        item_field(DType::U8),
        per as i32,
        flat,
        None,
        rows,
    )
    .map_err(arrow_err)?;
    Ok((super::field_for(&schema, name), Arc::new(list)))
}

/// [`gather_array`] without the nulls.
pub(super) fn gather_values(store: &dyn Records, idx: &[u64]) -> Result<ArrayRef> {
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
pub(super) fn pack_down(mut buffer: crate::Buffer, moves: &[(usize, usize)]) -> crate::Buffer {
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
pub(super) fn gather_bytes_array(store: &dyn Records, idx: &[u64]) -> Result<ArrayRef> {
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

/// Gathers ragged records and lays their payloads end to end in the gathered
/// buffer itself (moving each payload down over the shape prefixes), so that
/// buffer becomes the `data` child's values. Returns the `List<T>` data
/// array, every record's dims (flattened, as i32) and each record's ndim.
pub(super) fn gather_ragged_parts(
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
