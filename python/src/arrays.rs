//! Handing gathered buffers to NumPy without copying them.
//!
//! The gathered [`Buffer`] moves into a small owner object that becomes the
//! array's `base`; when NumPy drops the last view, the buffer goes back to the
//! engine's pool.

use std::os::raw::{c_int, c_void};

use loaderx::Buffer;
use numpy::npyffi::{self, npy_intp, NpyTypes, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pyo3::prelude::*;

/// Owns the memory behind arrays returned by a gather.
#[pyclass(frozen, module = "loaderx._native")]
pub struct GatherBuffer {
    buf: Buffer,
}

impl GatherBuffer {
    pub fn new(py: Python<'_>, buf: Buffer) -> PyResult<Bound<'_, GatherBuffer>> {
        Bound::new(py, GatherBuffer { buf })
    }
}

#[pymethods]
impl GatherBuffer {
    fn __len__(&self) -> usize {
        self.buf.len()
    }
}

/// A C-contiguous, writeable array of `descr` and `dims` over `offset..` of
/// `owner`'s buffer. The caller guarantees the span fits the buffer.
pub fn array_view<'py>(
    py: Python<'py>,
    owner: &Bound<'py, GatherBuffer>,
    offset: usize,
    descr: &Bound<'py, PyArrayDescr>,
    dims: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let itemsize = descr.itemsize();
    let bytes = dims.iter().product::<usize>() * itemsize;
    let buf = &owner.get().buf;
    if offset.checked_add(bytes).is_none_or(|end| end > buf.len()) {
        return Err(pyo3::exceptions::PySystemError::new_err(
            "internal error: array view past the end of its gather buffer",
        ));
    }
    // NumPy arrays have at most 64 dimensions (as ragged prefixes do).
    let mut shape = [0 as npy_intp; 64];
    if dims.len() > shape.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "a record of {} dimensions exceeds NumPy's limit of 64",
            dims.len()
        )));
    }
    for (s, &d) in shape.iter_mut().zip(dims) {
        *s = d as npy_intp;
    }
    let flags =
        npyffi::NPY_ARRAY_C_CONTIGUOUS | npyffi::NPY_ARRAY_WRITEABLE | npyffi::NPY_ARRAY_ALIGNED;
    // SAFETY: `offset..offset + bytes` lies inside the owner's buffer
    // (checked above) and is aligned for the dtype (buffers are 16-byte
    // aligned, ragged records start at multiples of 8, itemsizes are <= 8);
    // the array keeps `owner` alive as its base object, so the memory
    // outlives every view; `shape` holds `dims.len()` valid dimensions; the
    // two references the calls steal are handed over with into_*_ptr.
    unsafe {
        let data = buf.as_ptr().add(offset) as *mut c_void;
        let subtype = npyffi::get_type_object(py, NpyTypes::PyArray_Type);
        // NewFromDescr steals a reference to the descriptor.
        let descr_ptr = descr.clone().into_dtype_ptr();
        let arr = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr_ptr,
            dims.len() as c_int,
            shape.as_mut_ptr(),
            std::ptr::null_mut(),
            data,
            flags,
            std::ptr::null_mut(),
        );
        let arr = Bound::from_owned_ptr_or_err(py, arr)?;
        // SetBaseObject steals a reference to the owner.
        let base = owner.clone().into_any().into_ptr();
        if PY_ARRAY_API.PyArray_SetBaseObject(py, arr.as_ptr() as *mut npyffi::PyArrayObject, base)
            < 0
        {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}
