//! The binding's names for the engine's enums: codecs, logical types,
//! store kinds and NumPy dtype strings, each refused with the accepted
//! values named.

use loaderx::schema::Kind;
use loaderx::schema::Logical;
use loaderx::{Codec, DType};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

pub(crate) fn parse_codec(codec: &str) -> PyResult<Codec> {
    Codec::from_name(codec).ok_or_else(|| {
        PyValueError::new_err(format!(
            "codec must be one of 'raw', 'zstd', 'zstd_dict', got {codec:?}"
        ))
    })
}

pub(crate) fn parse_logical(logical: Option<&str>) -> PyResult<Logical> {
    match logical {
        None => Ok(Logical::Tensor),
        Some(name) => Logical::from_name(name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "logical must be 'tensor', 'utf8' or 'binary', got {name:?}"
            ))
        }),
    }
}

pub(crate) fn parse_kind(kind: Option<&str>) -> PyResult<Option<Kind>> {
    match kind {
        None => Ok(None),
        Some("dense") => Ok(Some(Kind::Dense)),
        Some("ragged") => Ok(Some(Kind::Ragged)),
        Some(other) => Err(PyValueError::new_err(format!(
            "kind must be 'dense' or 'ragged', got {other:?}"
        ))),
    }
}

pub(crate) fn parse_dtype(dtype: &str) -> PyResult<DType> {
    DType::from_numpy_str(dtype).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "dtype must be bool, int8-int64, uint8-uint64 or float16/32/64 (little-endian), got {dtype:?}"
        ))
    })
}
