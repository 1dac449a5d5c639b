//! `loaderx._native.pack`: token records packed into fixed-length rows in
//! one native call (`loaderx::pack`).

use loaderx::pack::{place, PackOptions};
use numpy::{dtype, Element, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrays::{array_view, GatherBuffer};
use crate::errors::IntoPyResult;

/// Where the segment ids start in the output buffer of `n` tokens of `T`
/// (16-byte aligned; the positions follow them).
fn ids_at<T>(n: usize) -> usize {
    (n * std::mem::size_of::<T>()).next_multiple_of(16)
}

fn typed<'py, T>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    pad: &Bound<'py, PyAny>,
    options: &PackOptions,
) -> PyResult<Bound<'py, PyDict>>
where
    T: Element + Copy + Send + Sync + for<'a> FromPyObject<'a, 'py>,
{
    let arrays = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.extract::<PyReadonlyArray1<'py, T>>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "records must be 1-D arrays of one integer dtype (the first one's), \
                     but record {i} is not"
                ))
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let pad: T = pad.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "pad must be a value of the records' dtype, got {}",
            pad.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    let slices = arrays
        .iter()
        .map(|a| {
            a.as_slice()
                .map_err(|_| PyValueError::new_err("records must be contiguous"))
        })
        .collect::<PyResult<Vec<&[T]>>>()?;
    // The three outputs share one buffer from the engine's pool: a fresh
    // allocation of this size per call would be a fresh mapping whose pages
    // all fault in, which costs more than the packing.
    let (buf, placed) = py
        .detach(|| -> loaderx::Result<_> {
            let placed = place(&slices, options)?;
            let n = placed.len();
            let ids = ids_at::<T>(n);
            let mut buf = loaderx::Buffer::new(ids + 8 * n);
            let bytes = buf.as_mut_slice();
            let (head, tail) = bytes.split_at_mut(ids);
            let (ids_bytes, pos_bytes) = tail.split_at_mut(4 * n);
            // SAFETY: the buffer is 16-byte aligned and `ids` is a multiple
            // of 16, so each part is aligned for its type (itemsizes <= 8);
            // each part holds exactly `n` elements of it; integers have no
            // invalid bit patterns; the three parts do not overlap.
            let (tokens, segment_ids, positions) = unsafe {
                (
                    std::slice::from_raw_parts_mut(head.as_mut_ptr().cast::<T>(), n),
                    std::slice::from_raw_parts_mut(ids_bytes.as_mut_ptr().cast::<i32>(), n),
                    std::slice::from_raw_parts_mut(pos_bytes.as_mut_ptr().cast::<i32>(), n),
                )
            };
            placed.write(&slices, pad, tokens, segment_ids, positions);
            Ok((buf, placed))
        })
        .py()?;
    let n = placed.len();
    let shape = [placed.rows, options.seq_len];
    let owner = GatherBuffer::new(py, buf)?;
    let out = PyDict::new(py);
    let int32 = dtype::<i32>(py);
    out.set_item(
        "tokens",
        array_view(py, &owner, 0, &dtype::<T>(py), &shape)?,
    )?;
    out.set_item(
        "segment_ids",
        array_view(py, &owner, ids_at::<T>(n), &int32, &shape)?,
    )?;
    out.set_item(
        "positions",
        array_view(py, &owner, ids_at::<T>(n) + 4 * n, &int32, &shape)?,
    )?;
    out.set_item("dropped", placed.dropped)?;
    Ok(out)
}

/// Packs `records` (a list of 1-D arrays of the integer dtype `dtype`) into
/// rows of `seq_len`; see `loaderx::pack`.
#[pyfunction]
#[pyo3(signature = (records, dtype, seq_len, rows, pad, max_segments, split))]
#[allow(clippy::too_many_arguments)]
pub fn pack<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    dtype: &str,
    seq_len: usize,
    rows: Option<usize>,
    pad: &Bound<'py, PyAny>,
    max_segments: Option<usize>,
    split: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let options = PackOptions {
        seq_len,
        rows,
        max_segments,
        split,
    };
    match dtype {
        "int8" => typed::<i8>(py, records, pad, &options),
        "int16" => typed::<i16>(py, records, pad, &options),
        "int32" => typed::<i32>(py, records, pad, &options),
        "int64" => typed::<i64>(py, records, pad, &options),
        "uint8" => typed::<u8>(py, records, pad, &options),
        "uint16" => typed::<u16>(py, records, pad, &options),
        "uint32" => typed::<u32>(py, records, pad, &options),
        "uint64" => typed::<u64>(py, records, pad, &options),
        other => Err(PyTypeError::new_err(format!(
            "records must hold integer tokens, got dtype {other}"
        ))),
    }
}
