//! Ragged records packed for appending: the records of one append checked
//! (dtype, nonempty, under the record limit) and copied, without the GIL
//! and in parallel, into one owned buffer of shape prefixes and payloads.

use loaderx::{DType, Packed};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A ragged batch packed for appending (shape prefixes and payloads).
#[pyclass(frozen, module = "loaderx._native")]
pub struct PackedRecords {
    /// Taken (left empty) when the batch is queued for writing.
    packed: std::sync::Mutex<Packed>,
}

impl From<Packed> for PackedRecords {
    fn from(packed: Packed) -> Self {
        PackedRecords {
            packed: std::sync::Mutex::new(packed),
        }
    }
}

impl PackedRecords {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Packed> {
        self.packed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PackedRecords {
    fn __len__(&self) -> usize {
        self.lock().len()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.lock().bytes.len()
    }
}

/// Validates and packs ragged `records` (any iterable of arrays of
/// `dtype`, described by `descr`, each nonempty) into one owned buffer.
pub(crate) fn pack(
    py: Python<'_>,
    descr: &Bound<'_, PyArrayDescr>,
    dtype: DType,
    records: &Bound<'_, PyAny>,
) -> PyResult<PackedRecords> {
    let np = py.import("numpy")?;
    let generic = np.getattr("generic")?;
    let mut arrays: Vec<Bound<'_, PyUntypedArray>> = Vec::new();
    for (i, item) in records.try_iter()?.enumerate() {
        let item = item?;
        let arr = match item.cast::<PyUntypedArray>() {
            Ok(a) => a.clone(),
            // A NumPy scalar is a 0-d record.
            Err(_) if item.is_instance(&generic)? => np
                .call_method1("asarray", (&item,))?
                .cast_into::<PyUntypedArray>()?,
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "records[{i}] must be a numpy.ndarray of dtype {}, got {}",
                    dtype,
                    item.get_type().name()?
                )))
            }
        };
        if !arr.dtype().is_equiv_to(descr) {
            return Err(PyTypeError::new_err(format!(
                "records[{i}] has dtype {}, expected {} (the store's dtype)",
                arr.dtype(),
                dtype
            )));
        }
        if arr.len() == 0 && arr.ndim() > 0 || arr.shape().contains(&0) {
            return Err(PyValueError::new_err(format!(
                "records[{i}] has shape {:?} with zero elements; ragged records must be nonempty",
                arr.shape()
            )));
        }
        let nbytes = arr.shape().iter().product::<usize>() * dtype.itemsize();
        if nbytes as u64 + 8 * (1 + arr.ndim() as u64) > loaderx::MAX_RECORD_BYTES {
            return Err(PyValueError::new_err(format!(
                "records[{i}] is {nbytes} bytes, over the 2 GiB record limit"
            )));
        }
        let arr = if arr.is_c_contiguous() {
            arr
        } else {
            np.call_method1("ascontiguousarray", (arr,))?
                .cast_into::<PyUntypedArray>()?
        };
        arrays.push(arr);
    }
    let shapes: Vec<Vec<u64>> = arrays
        .iter()
        .map(|a| a.shape().iter().map(|&d| d as u64).collect())
        .collect();
    let itemsize = dtype.itemsize();
    let sizes: Vec<usize> = arrays
        .iter()
        .map(|a| a.shape().iter().product::<usize>() * itemsize)
        .collect();
    // Source pointers as integers, so the copy can run without the GIL;
    // `arrays` keeps every source alive until it is done.
    let sources: Vec<usize> = arrays
        .iter()
        // SAFETY: `a` is a live NumPy array (held by `arrays`); reading
        // its data pointer field does not dereference the data.
        .map(|a| unsafe { (*a.as_array_ptr()).fields.data as usize })
        .collect();
    let packed = py.detach(|| {
        let mut packed = Packed::layout(
            shapes
                .iter()
                .map(|s| s.as_slice())
                .zip(sizes.iter().copied()),
        );
        let mut payloads = packed.payloads_mut();
        loaderx::executor::pool().install(|| {
            use rayon::prelude::*;
            payloads
                .par_iter_mut()
                .zip(sources.par_iter())
                .with_min_len(16)
                .for_each(|(dst, &src)| {
                    // SAFETY: each source is a live C-contiguous array of
                    // exactly dst.len() bytes (checked above).
                    let src = unsafe { std::slice::from_raw_parts(src as *const u8, dst.len()) };
                    dst.copy_from_slice(src);
                });
        });
        drop(payloads);
        packed
    });
    drop(arrays);
    Ok(PackedRecords::from(packed))
}
