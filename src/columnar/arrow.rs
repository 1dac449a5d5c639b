//! Columnar chunks as Arrow arrays: a chunk's rows are slices of its
//! decoded buffers (no copy), a range of rows the chunks it spans, and
//! rows at random gathered into new arrays.

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{ArrayRef, BinaryArray, BooleanArray, PrimitiveArray, StringArray};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};

use super::column::{Columnar, Inner};
use super::decode::Decoded;
use super::format::ValueKind;
use crate::error::{Error, Result};
use crate::schema::DType;

/// The bytes `bytes` (inside `owner`) as an Arrow buffer that keeps
/// `owner` alive.
fn shared(owner: &Arc<Decoded>, bytes: &[u8]) -> Buffer {
    let ptr = NonNull::new(bytes.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
    // SAFETY: `bytes` lies inside `owner`'s buffers, which never change or
    // move while the Arc lives, and Arrow holds the Arc for as long as it
    // uses the pointer.
    unsafe { Buffer::from_custom_allocation(ptr, bytes.len(), Arc::clone(owner) as Arc<_>) }
}

/// Rows `lo..hi` of the decoded chunk `d` as one array, sharing its
/// buffers.
pub fn chunk_array(d: &Arc<Decoded>, lo: usize, hi: usize) -> ArrayRef {
    let n = hi - lo;
    let nulls = d.validity.as_ref().map(|v| {
        NullBuffer::new(BooleanBuffer::new(shared(d, v), lo, n))
    }).filter(|n| n.null_count() > 0);
    let values = d.values.as_slice();
    macro_rules! prim {
        ($t:ty) => {
            Arc::new(PrimitiveArray::<$t>::new(
                ScalarBuffer::new(shared(d, values), lo, n),
                nulls,
            )) as ArrayRef
        };
    }
    match d.kind {
        ValueKind::Fixed(dtype) => match dtype {
            DType::Bool => Arc::new(BooleanArray::new(
                BooleanBuffer::new(shared(d, values), lo, n),
                nulls,
            )),
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
        },
        kind => {
            // SAFETY: i32 has no invalid bit patterns; the slice covers the
            // offsets exactly.
            let offsets_bytes = unsafe {
                std::slice::from_raw_parts(d.offsets.as_ptr().cast::<u8>(), d.offsets.len() * 4)
            };
            let offsets = ScalarBuffer::<i32>::new(shared(d, offsets_bytes), lo, n + 1);
            // SAFETY: the decoder checked that the offsets start at 0, never
            // decrease and end at the values' length.
            let offsets = unsafe { OffsetBuffer::new_unchecked(offsets) };
            let data = shared(d, values);
            if kind == ValueKind::Utf8 {
                // SAFETY: the decoder checked the values are UTF-8 and each
                // offset falls on a character boundary.
                Arc::new(unsafe { StringArray::new_unchecked(offsets, data, nulls) })
            } else {
                // SAFETY: as above (offsets within the values).
                Arc::new(unsafe { BinaryArray::new_unchecked(offsets, data, nulls) })
            }
        }
    }
}

impl Columnar {
    /// Rows `idx` (in `0..len`) as one Arrow array (the column's Arrow
    /// type: the dtype, Utf8 or Binary; nulls where the rows are null).
    /// Rows that run in order within a chunk are taken as slices; a whole
    /// run inside one chunk shares its buffers.
    /// A run in order reads its chunks without keeping them (a scan);
    /// rows at random keep theirs decoded within the budget.
    pub fn take_array(&self, idx: &[u64]) -> Result<ArrayRef> {
        let inner = self.inner();
        if let Some(range) = contiguous(idx) {
            if inner.selection().is_none() {
                crate::store::gather::check_indices(&[range.end - 1], inner.len())?;
                let pieces = self.range_arrays(range.start, range.end, false)?;
                return concat(&pieces);
            }
        }
        gather(inner, idx, true)
    }

    /// Rows `lo..hi` (in `0..len`, no selection applied: physical rows)
    /// as the slices of the chunks they span, in order.
    pub fn range_arrays(&self, lo: u64, hi: u64, keep: bool) -> Result<Vec<ArrayRef>> {
        let inner = self.inner();
        let mut out = Vec::new();
        if lo >= hi {
            return Ok(out);
        }
        let starts = self.starts();
        let mut at = lo;
        while at < hi {
            let part = starts.partition_point(|&s| s <= at) - 1;
            let file = &inner.parts()[part];
            let local_lo = at - starts[part];
            let local_hi = (hi - starts[part]).min(file.rows());
            let (c0, _) = file.locate(local_lo);
            let (c1, _) = file.locate(local_hi - 1);
            let chunks = file.chunks_arc(c0, c1 + 1, keep)?;
            let cs = file.starts();
            for (k, d) in chunks.iter().enumerate() {
                let c = c0 + k;
                let a = local_lo.max(cs[c]) - cs[c];
                let b = local_hi.min(cs[c + 1]) - cs[c];
                out.push(chunk_array(d, a as usize, b as usize));
            }
            at = starts[part] + local_hi;
        }
        Ok(out)
    }
}

/// `idx` as a range when it counts up by one.
fn contiguous(idx: &[u64]) -> Option<std::ops::Range<u64>> {
    let first = *idx.first()?;
    let last = *idx.last()?;
    (last - first + 1 == idx.len() as u64 && idx.windows(2).all(|w| w[1] == w[0] + 1))
        .then_some(first..last + 1)
}

/// One array of `pieces` (the piece itself when there is one).
pub fn concat(pieces: &[ArrayRef]) -> Result<ArrayRef> {
    match pieces {
        [one] => Ok(Arc::clone(one)),
        _ => {
            let refs: Vec<&dyn arrow_array::Array> = pieces.iter().map(|a| a.as_ref()).collect();
            arrow_select::concat::concat(&refs)
                .map_err(|e| Error::InvalidValue(format!("arrow: {e}")))
        }
    }
}

/// Rows `idx` gathered into new arrays.
fn gather(inner: &Inner, idx: &[u64], keep: bool) -> Result<ArrayRef> {
    let r = inner.resolve(idx, keep)?;
    let n = idx.len();
    let any_null = (0..n).any(|i| {
        let (d, at) = r.get(i);
        d.null_count > 0 && !d.is_valid(at)
    });
    let nulls = any_null.then(|| {
        NullBuffer::from(
            (0..n)
                .map(|i| {
                    let (d, at) = r.get(i);
                    d.is_valid(at)
                })
                .collect::<Vec<bool>>(),
        )
    });
    match inner.kind() {
        ValueKind::Fixed(DType::Bool) => {
            let bits = BooleanBuffer::collect_bool(n, |i| {
                let (d, at) = r.get(i);
                (d.values.as_slice()[at / 8] >> (at % 8)) & 1 == 1
            });
            Ok(Arc::new(BooleanArray::new(bits, nulls)))
        }
        ValueKind::Fixed(dtype) => {
            let w = dtype.itemsize();
            // Arrow's own allocation: aligned for every dtype.
            let mut bytes = MutableBuffer::from_len_zeroed(n * w);
            for (i, out) in bytes.as_slice_mut().chunks_exact_mut(w).enumerate() {
                let (d, at) = r.get(i);
                d.copy_fixed(at, w, out);
            }
            let buf: Buffer = bytes.into();
            let array = crate::arrow::values_array(dtype, buf, n);
            Ok(match nulls {
                None => array,
                Some(nb) => {
                    let data = array
                        .to_data()
                        .into_builder()
                        .nulls(Some(nb))
                        .build()
                        .map_err(|e| Error::InvalidValue(format!("arrow: {e}")))?;
                    arrow_array::make_array(data)
                }
            })
        }
        kind => {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let mut total = 0usize;
            for i in 0..n {
                let (d, at) = r.get(i);
                total += d.value(at).len();
                let o = i32::try_from(total).map_err(|_| {
                    Error::InvalidValue(format!(
                        "a gather of {n} values of {} takes more than 2 GiB; gather fewer at a time",
                        inner.path().display()
                    ))
                })?;
                offsets.push(o);
            }
            let mut values = Vec::with_capacity(total);
            for i in 0..n {
                let (d, at) = r.get(i);
                values.extend_from_slice(d.value(at));
            }
            let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
            let values = Buffer::from_vec(values);
            Ok(if kind == ValueKind::Utf8 {
                // SAFETY: whole values of checked chunks are UTF-8.
                Arc::new(unsafe { StringArray::new_unchecked(offsets, values, nulls) })
            } else {
                Arc::new(BinaryArray::new(offsets, values, nulls))
            })
        }
    }
}
