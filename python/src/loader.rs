//! `loaderx._native.Loader`: the core [`DataLoader`] as a Python class.
//!
//! The plan (sampler, subset, rank slice, gather, read policy), its
//! validation and the prefetching threads are the core's
//! (`loaderx::loader`); this class blocks with the GIL released and turns
//! each batch into `{name: ndarray | list}` or a `pyarrow.RecordBatch`. The
//! Python `DataLoader` adds transforms and worker threads on top.

use loaderx::loader::{Batch, Column, DataLoader, Options, Output, Subset};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::arrow::Handle;
use crate::errors::{to_py, IntoPyResult};
use crate::sampler::parse_mode;
use crate::store::Store;

/// `indices` as the Python layer hands it over: int64 or uint64.
#[derive(FromPyObject)]
enum IndexArray<'py> {
    Unsigned(PyReadonlyArray1<'py, u64>),
    Signed(PyReadonlyArray1<'py, i64>),
}

impl IndexArray<'_> {
    fn to_subset(&self) -> PyResult<Subset> {
        let contiguous = |_| PyValueError::new_err("indices must be contiguous");
        Ok(match self {
            IndexArray::Unsigned(a) => a.as_slice().map_err(contiguous)?.to_vec().into(),
            IndexArray::Signed(a) => a.as_slice().map_err(contiguous)?.to_vec().into(),
        })
    }
}

#[pyclass(frozen, module = "loaderx._native")]
pub struct Loader {
    inner: DataLoader<Handle>,
    /// Text and binary columns as their records' uint8 arrays.
    raw: bool,
}

#[pymethods]
impl Loader {
    /// `stores` and `names` align; `batch_size` is this rank's batch; the
    /// sampler draws global batches of `batch_size * world_size` over
    /// `len(indices)` (or the store length) and this rank takes slice `rank`.
    #[new]
    #[pyo3(signature = (stores, names, batch_size, mode, seed, start_step, indices, depth, producers, rank, world_size, arrow=false, raw=false, block_size=None, weights=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        stores: Vec<Py<Store>>,
        names: Vec<String>,
        batch_size: usize,
        mode: &str,
        seed: u64,
        start_step: u64,
        indices: Option<IndexArray<'_>>,
        depth: usize,
        producers: usize,
        rank: usize,
        world_size: usize,
        arrow: bool,
        raw: bool,
        block_size: Option<u64>,
        weights: Option<numpy::PyReadonlyArray1<'_, f64>>,
    ) -> PyResult<Loader> {
        let weights = weights
            .map(|w| crate::sampler::alias_table(py, &w))
            .transpose()?;
        if stores.len() != names.len() {
            return Err(PyValueError::new_err(
                "streams must name at least one store",
            ));
        }
        let options = Options {
            batch_size,
            mode: parse_mode(mode)?,
            seed,
            block_size,
            weights,
            start_step,
            indices: indices.map(|a| a.to_subset()).transpose()?,
            prefetch: depth,
            producers,
            rank,
            world_size,
            output: if arrow { Output::Arrow } else { Output::Arrays },
        };
        let streams = names
            .into_iter()
            .zip(stores.into_iter().map(Handle))
            .collect();
        let inner = py.detach(|| DataLoader::new(streams, options)).py()?;
        Ok(Loader { inner, raw })
    }

    /// The next batch as `{name: array | list}` (or an Arrow record batch);
    /// blocks (GIL released) until it is ready.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let batch = py.detach(|| self.inner.next()).map_err(to_py)?;
        to_python(py, &self.inner, batch, self.raw)
    }

    /// The step the next `next()` returns.
    #[getter]
    fn step(&self) -> u64 {
        self.inner.step()
    }

    /// Indices of `step` (after the rank slice and the `indices` mapping).
    fn indices_at<'py>(&self, py: Python<'py>, step: u64) -> Bound<'py, numpy::PyArray1<u64>> {
        numpy::PyArray1::from_vec(py, self.inner.indices_at(step))
    }

    /// Stops and joins the producer threads. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }
}

fn to_python<'py>(
    py: Python<'py>,
    loader: &DataLoader<Handle>,
    batch: Batch,
    raw: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mut columns = batch.columns.into_iter().peekable();
    if let Some(Column::Arrow(..)) = columns.peek() {
        let columns = columns
            .map(|c| match c {
                Column::Arrow(field, array) => (field, array),
                _ => unreachable!("an arrow loader gathers arrow columns"),
            })
            .collect();
        let batch = crate::arrow::record_batch(columns)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        return Ok(pyo3_arrow::PyRecordBatch::new(batch)
            .into_pyobject(py)?
            .into_any());
    }
    let dict = PyDict::new(py);
    for (((name, handle), column), valid) in
        loader.streams().iter().zip(columns).zip(batch.validity)
    {
        let store = handle.0.get();
        let value = match column {
            Column::Dense(buf) => store.dense_array(py, buf, Some(loader.batch_size()))?,
            Column::Ragged(rb) if store.is_bytes() && !raw => {
                PyList::new(py, store.bytes_values(py, rb)?)?.into_any()
            }
            Column::Ragged(rb) => PyList::new(py, store.ragged_arrays(py, rb)?)?.into_any(),
            Column::Arrow(..) => unreachable!("a numpy loader gathers arrays"),
        };
        let value = match valid {
            Some(v) => store.with_nulls(py, value, v.as_slice())?,
            None => value,
        };
        dict.set_item(name, value)?;
    }
    Ok(dict.into_any())
}
