//! Columnar chunks as Arrow arrays: a chunk's rows are slices of its
//! decoded buffers (no copy), a range of rows the chunks it spans, and
//! rows at random gathered into new arrays.

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::types::*;
use arrow_array::{ArrayRef, BinaryArray, BooleanArray, PrimitiveArray, StringArray};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};

use super::column::{Columnar, Inner};
use super::decode::{decode_bytes_into, decode_fixed_into, Decoded};
use super::format::ValueKind;
use crate::error::{Error, Result};
use crate::schema::DType;
use crate::store::gather::contiguous;

/// The bytes `bytes` (inside `owner`) as an Arrow buffer that keeps
/// `owner` alive.
fn shared(owner: &Arc<Decoded>, bytes: &[u8]) -> Buffer {
    let ptr = NonNull::new(bytes.as_ptr() as *mut u8).unwrap_or(NonNull::dangling());
    // SAFETY: `bytes` lies inside `owner`'s buffers, which never change or
    // move while the Arc lives, and Arrow holds the Arc for as long as it
    // uses the pointer.
    unsafe { Buffer::from_custom_allocation(ptr, bytes.len(), Arc::clone(owner) as Arc<_>) }
}

/// The Arrow type of a column's values.
pub(crate) fn value_type(kind: ValueKind) -> arrow_schema::DataType {
    match kind {
        ValueKind::Fixed(d) => crate::arrow::arrow_type(d),
        ValueKind::Utf8 => arrow_schema::DataType::Utf8,
        ValueKind::Binary => arrow_schema::DataType::Binary,
    }
}

/// Numbers of `dtype` (not booleans), their little-endian bytes end to
/// end in `bytes`, as one array without nulls.
pub(crate) fn fixed_array(dtype: DType, bytes: MutableBuffer) -> ArrayRef {
    let n = bytes.len() / dtype.itemsize().max(1);
    crate::arrow::values_array(dtype, Buffer::from(bytes), n)
}

/// Rows `lo..hi` of the decoded chunk `d` as one array, sharing its
/// buffers.
pub fn chunk_array(d: &Arc<Decoded>, lo: usize, hi: usize) -> ArrayRef {
    let n = hi - lo;
    let nulls = d
        .validity
        .as_ref()
        .map(|v| NullBuffer::new(BooleanBuffer::new(shared(d, v), lo, n)))
        .filter(|n| n.null_count() > 0);
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
                return self.read_range(range.start, range.end);
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

/// Stored bytes of consecutive chunks: the first chunk, and the bytes.
type Run<'a> = (usize, std::borrow::Cow<'a, [u8]>);

/// A fixed-width piece's job: its piece, its stored bytes when they were
/// read, and where its values go.
type FixedJob<'a> = (Piece, Option<&'a [u8]>, &'a mut [u8]);

/// Chunks a read spans from which it decodes them in parallel.
const PARALLEL_CHUNKS: usize = 16;

/// One chunk's share of a read: part, chunk, and its rows `a..b`.
#[derive(Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) part: usize,
    pub(crate) chunk: usize,
    pub(crate) a: usize,
    pub(crate) b: usize,
}

impl Columnar {
    /// The chunks physical rows `lo..hi` span, each with its rows.
    pub(crate) fn pieces(&self, lo: u64, hi: u64) -> Vec<Piece> {
        let inner = self.inner();
        let starts = self.starts();
        let mut out = Vec::new();
        let mut at = lo;
        while at < hi {
            let part = starts.partition_point(|&s| s <= at) - 1;
            let file = &inner.parts()[part];
            let local_lo = at - starts[part];
            let local_hi = (hi - starts[part]).min(file.rows());
            let (c0, _) = file.locate(local_lo);
            let (c1, _) = file.locate(local_hi - 1);
            let cs = file.starts();
            for c in c0..=c1 {
                out.push(Piece {
                    part,
                    chunk: c,
                    a: (local_lo.max(cs[c]) - cs[c]) as usize,
                    b: (local_hi.min(cs[c + 1]) - cs[c]) as usize,
                });
            }
            at = starts[part] + local_hi;
        }
        out
    }

    /// The stored bytes of the chunks of `pieces` that are not kept: one
    /// read per part (its first such chunk, and the bytes from there).
    fn stored_of(&self, pieces: &[Piece]) -> Result<Vec<Option<Run<'_>>>> {
        let inner = self.inner();
        let mut out = Vec::with_capacity(inner.parts().len());
        for (p, file) in inner.parts().iter().enumerate() {
            let missing: Vec<usize> = pieces
                .iter()
                .filter(|x| x.part == p && !file.is_kept(x.chunk))
                .map(|x| x.chunk)
                .collect();
            out.push(match (missing.first(), missing.last()) {
                (Some(&a), Some(&b)) => Some((a, file.stored(a, b + 1)?)),
                _ => None,
            });
        }
        Ok(out)
    }

    /// Physical rows `lo..hi` as one array: the chunks they span read in
    /// one read per part (a remote part in one request) and decoded
    /// straight into the array's buffers (in parallel on the executor's
    /// threads when they are many), kept chunks copied; nothing is kept.
    pub fn read_range(&self, lo: u64, hi: u64) -> Result<ArrayRef> {
        use rayon::prelude::*;
        let inner = self.inner();
        if lo >= hi {
            return self.take_array(&[]);
        }
        crate::store::gather::check_indices(&[hi - 1], self.starts()[inner.parts().len()])?;
        let pieces = self.pieces(lo, hi);
        let stored = self.stored_of(&pieces)?;
        let n = (hi - lo) as usize;
        let corrupt = |p: &Piece, why: String| {
            Error::corrupted(
                inner.parts()[p.part].path(),
                format!("chunk {}: {why}", p.chunk),
            )
        };
        // Each piece's chunk's stored bytes, when they were read (not for
        // chunks kept when the read was planned).
        let sources: Vec<Option<&[u8]>> = pieces
            .iter()
            .map(|p| {
                let file = &inner.parts()[p.part];
                let (first, bytes) = stored[p.part].as_ref()?;
                let entries = &file.footer().entries;
                let base = if *first == 0 {
                    0
                } else {
                    entries[*first].offset
                };
                let e = &entries[p.chunk];
                let at = e.offset.checked_sub(base)? as usize;
                bytes.get(at..at + e.stored_len() as usize)
            })
            .collect();
        let parallel = pieces.len() >= PARALLEL_CHUNKS;
        match inner.kind() {
            ValueKind::Fixed(DType::Bool) => {
                let arrays = pieces
                    .iter()
                    .map(|p| {
                        let file = &inner.parts()[p.part];
                        let d = match file.kept_arc(p.chunk) {
                            Some(d) => d,
                            None => file.chunk_arc(p.chunk)?,
                        };
                        Ok(chunk_array(&d, p.a, p.b))
                    })
                    .collect::<Result<Vec<_>>>()?;
                concat(&arrays)
            }
            ValueKind::Fixed(dtype) => {
                let w = dtype.itemsize();
                // A batch buffer (recycled through the engine's pool, so a
                // scan's next batch lands in warm memory), every byte of
                // which the pieces below write.
                let mut out = alloc_batch(n * w)?;
                let mut jobs: Vec<FixedJob<'_>> = Vec::with_capacity(pieces.len());
                let mut rest = out.as_mut_slice();
                for (p, src) in pieces.iter().zip(&sources) {
                    let (dst, tail) = rest.split_at_mut((p.b - p.a) * w);
                    jobs.push((*p, *src, dst));
                    rest = tail;
                }
                let run =
                    |(p, src, dst): (Piece, Option<&[u8]>, &mut [u8])| -> Result<Option<Vec<u8>>> {
                        let file = &inner.parts()[p.part];
                        let e = &file.footer().entries[p.chunk];
                        match (src, p.a == 0 && p.b == e.rows as usize) {
                            (Some(bytes), true) => decode_fixed_into(dtype, e, bytes, dst)
                                .map_err(|why| corrupt(&p, why)),
                            _ => {
                                let d = match file.kept_arc(p.chunk) {
                                    Some(d) => d,
                                    None => file.chunk_arc(p.chunk)?,
                                };
                                dst.copy_from_slice(&d.values.as_slice()[p.a * w..p.b * w]);
                                Ok(d.validity.as_ref().map(|v| slice_bits(v, p.a, p.b)))
                            }
                        }
                    };
                let validity: Vec<Result<Option<Vec<u8>>>> = if parallel {
                    crate::executor::pool().install(|| jobs.into_par_iter().map(run).collect())
                } else {
                    jobs.into_iter().map(run).collect()
                };
                let validity = validity.into_iter().collect::<Result<Vec<_>>>()?;
                let array =
                    crate::arrow::values_array(dtype, crate::arrow::into_arrow_buffer(out), n);
                with_nulls(array, nulls_of(&pieces, &validity, n))
            }
            kind => {
                // Whole chunks' value bytes come from their entries; a
                // partial or kept chunk is decoded (or taken) first.
                let mut partial: Vec<Option<Arc<Decoded>>> = vec![None; pieces.len()];
                let mut sizes = Vec::with_capacity(pieces.len());
                for (k, p) in pieces.iter().enumerate() {
                    let file = &inner.parts()[p.part];
                    let e = &file.footer().entries[p.chunk];
                    let whole = p.a == 0 && p.b == e.rows as usize;
                    if whole && sources[k].is_some() {
                        sizes.push(e.decoded_size() as usize);
                    } else {
                        let d = match file.kept_arc(p.chunk) {
                            Some(d) => d,
                            None => file.chunk_arc(p.chunk)?,
                        };
                        sizes.push((d.offsets[p.b] - d.offsets[p.a]) as usize);
                        partial[k] = Some(d);
                    }
                }
                let total: usize = sizes.iter().sum();
                if total > i32::MAX as usize {
                    return Err(Error::InvalidValue(format!(
                        "{} rows of {} hold {total} bytes, more than an Arrow array of 32-bit offsets holds; read fewer rows at a time",
                        n,
                        inner.path().display()
                    )));
                }
                let mut values = alloc_batch(total)?;
                let mut offsets = vec![0i32; n + 1];
                let mut jobs = Vec::with_capacity(pieces.len());
                let (mut vrest, mut orest) = (values.as_mut_slice(), &mut offsets[1..]);
                let mut base = 0i32;
                for (((p, size), d), src) in pieces.iter().zip(&sizes).zip(partial).zip(&sources) {
                    let (vdst, vtail) = vrest.split_at_mut(*size);
                    let (odst, otail) = orest.split_at_mut(p.b - p.a);
                    // A decoded chunk, or the stored bytes of a whole one.
                    let job = match d {
                        Some(d) => Source::Decoded(d),
                        None => Source::Stored(src.unwrap_or_default()),
                    };
                    jobs.push((*p, job, vdst, odst, base));
                    base += *size as i32;
                    vrest = vtail;
                    orest = otail;
                }
                type Job<'a> = (Piece, Source<'a>, &'a mut [u8], &'a mut [i32], i32);
                let run = |(p, job, vdst, odst, base): Job<'_>| -> Result<Option<Vec<u8>>> {
                    match job {
                        Source::Stored(bytes) => {
                            let file = &inner.parts()[p.part];
                            let e = &file.footer().entries[p.chunk];
                            decode_bytes_into(kind, e, bytes, file.symbols(), vdst, odst, base)
                                .map_err(|why| corrupt(&p, why))
                        }
                        Source::Decoded(d) => {
                            let from = d.offsets[p.a];
                            vdst.copy_from_slice(
                                &d.values.as_slice()[from as usize..d.offsets[p.b] as usize],
                            );
                            for (o, &x) in odst.iter_mut().zip(&d.offsets[p.a + 1..=p.b]) {
                                *o = base + (x - from);
                            }
                            Ok(d.validity.as_ref().map(|v| slice_bits(v, p.a, p.b)))
                        }
                    }
                };
                let validity: Vec<Result<Option<Vec<u8>>>> = if parallel {
                    crate::executor::pool().install(|| jobs.into_par_iter().map(run).collect())
                } else {
                    jobs.into_iter().map(run).collect()
                };
                let validity = validity.into_iter().collect::<Result<Vec<_>>>()?;
                let nulls = nulls_of(&pieces, &validity, n);
                // SAFETY: each chunk's offsets were checked to rise to its
                // values' size, and its values to be UTF-8 on character
                // boundaries (text); joined end to end they stay so.
                let offsets = unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) };
                let values = crate::arrow::into_arrow_buffer(values);
                Ok(if kind == ValueKind::Utf8 {
                    // SAFETY: as above.
                    Arc::new(unsafe { StringArray::new_unchecked(offsets, values, nulls) })
                } else {
                    // SAFETY: as above.
                    Arc::new(unsafe { BinaryArray::new_unchecked(offsets, values, nulls) })
                })
            }
        }
    }
}

/// Where a piece of a text read comes from.
enum Source<'a> {
    /// A whole chunk's stored bytes, decoded into place.
    Stored(&'a [u8]),
    /// A chunk decoded already (kept, or a partial one), copied.
    Decoded(Arc<Decoded>),
}

/// A buffer of `len` bytes for a read's output.
fn alloc_batch(len: usize) -> Result<crate::Buffer> {
    crate::Buffer::try_new(len).ok_or_else(|| Error::OutOfMemory {
        bytes: len as u64,
        what: "a read of a columnar column".into(),
    })
}

/// Bits `a..b` of `bits` as bits of their own.
fn slice_bits(bits: &[u8], a: usize, b: usize) -> Vec<u8> {
    let mut out = vec![0u8; (b - a).div_ceil(8)];
    for i in a..b {
        if bits[i / 8] & (1 << (i % 8)) != 0 {
            out[(i - a) / 8] |= 1 << ((i - a) % 8);
        }
    }
    out
}

/// The nulls of a read of `n` rows from the pieces' validity bits (None:
/// a piece without nulls); None when no row is null.
fn nulls_of(pieces: &[Piece], validity: &[Option<Vec<u8>>], n: usize) -> Option<NullBuffer> {
    if validity.iter().all(Option::is_none) {
        return None;
    }
    let mut b = arrow_buffer::BooleanBufferBuilder::new(n);
    for (p, v) in pieces.iter().zip(validity) {
        let rows = p.b - p.a;
        match v {
            // A whole chunk's bits (from its start), or a sliced copy.
            Some(bits) => b.append_packed_range(0..rows, bits),
            None => b.append_n(rows, true),
        }
    }
    Some(NullBuffer::new(b.finish())).filter(|nb| nb.null_count() > 0)
}

/// `array` with `nulls`.
fn with_nulls(array: ArrayRef, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    match nulls {
        None => Ok(array),
        Some(nb) => {
            let data = array
                .to_data()
                .into_builder()
                .nulls(Some(nb))
                .build()
                .map_err(|e| Error::InvalidValue(format!("arrow: {e}")))?;
            Ok(arrow_array::make_array(data))
        }
    }
}

/// `idx` as a range when it counts up by one.
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
    let n = idx.len();
    let kind = inner.kind();
    if kind.is_bytes() {
        let (values, offs, valid) = inner.gather_values_valid(idx, keep)?;
        let nulls = valid.map(NullBuffer::from).filter(|nb| nb.null_count() > 0);
        let mut offsets = Vec::with_capacity(n + 1);
        for &o in &offs {
            offsets.push(i32::try_from(o).map_err(|_| {
                Error::InvalidValue(format!(
                    "a gather of {n} values of {} takes more than 2 GiB; gather fewer at a time",
                    inner.path().display()
                ))
            })?);
        }
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        let values = Buffer::from_vec(values);
        return Ok(if kind == ValueKind::Utf8 {
            // Whole values of checked chunks (or values checked as read
            // in place) are UTF-8.
            Arc::new(
                StringArray::try_new(offsets, values, nulls)
                    .map_err(|e| Error::InvalidValue(format!("arrow: {e}")))?,
            )
        } else {
            Arc::new(BinaryArray::new(offsets, values, nulls))
        });
    }
    let r = inner.resolve(idx, keep)?;
    r.prefetch_rows();
    let nulls = nulls_of_rows(&r, n)?;
    match kind {
        ValueKind::Fixed(DType::Bool) => {
            let mut bytes = vec![0u8; n];
            for (i, b) in bytes.iter_mut().enumerate() {
                r.copy_fixed(i, 1, std::slice::from_mut(b))?;
            }
            let bits = BooleanBuffer::collect_bool(n, |i| bytes[i] == 1);
            Ok(Arc::new(BooleanArray::new(bits, nulls)))
        }
        ValueKind::Fixed(dtype) => {
            let w = dtype.itemsize();
            // Arrow's own allocation: aligned for every dtype.
            let mut bytes = MutableBuffer::from_len_zeroed(n * w);
            for (i, out) in bytes.as_slice_mut().chunks_exact_mut(w).enumerate() {
                r.copy_fixed(i, w, out)?;
            }
            let buf: Buffer = bytes.into();
            with_nulls(crate::arrow::values_array(dtype, buf, n), nulls)
        }
        _ => unreachable!("text and bytes are gathered above"),
    }
}

/// The nulls of the resolved rows `r` (None when none is null).
fn nulls_of_rows(r: &super::column::Resolved<'_>, n: usize) -> Result<Option<NullBuffer>> {
    if !(0..n).any(|i| r.may_be_null(i)) {
        return Ok(None);
    }
    let valid = (0..n)
        .map(|i| r.is_valid(i))
        .collect::<Result<Vec<bool>>>()?;
    Ok(Some(NullBuffer::from(valid)).filter(|nb| nb.null_count() > 0))
}
