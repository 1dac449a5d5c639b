//! `loaderx._native.pack`: token records packed into fixed-length rows in
//! one native call (`loaderx::pack`).

use loaderx::pack::{pack as core_pack, PackOptions};
use numpy::{Element, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::IntoPyResult;

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
    let packed = py.detach(|| core_pack(&slices, pad, options)).py()?;
    let shape = [packed.rows, options.seq_len];
    let out = PyDict::new(py);
    out.set_item(
        "tokens",
        PyArray1::from_vec(py, packed.tokens).reshape(shape)?,
    )?;
    out.set_item(
        "segment_ids",
        PyArray1::from_vec(py, packed.segment_ids).reshape(shape)?,
    )?;
    out.set_item(
        "positions",
        PyArray1::from_vec(py, packed.positions).reshape(shape)?,
    )?;
    out.set_item("dropped", packed.dropped)?;
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
