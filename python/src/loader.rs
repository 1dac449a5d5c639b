//! `loaderx._native.Loader`: the core [`DataLoader`] as a Python class.
//!
//! The plan (sampler, subset, rank slice, gather, read policy), its
//! validation and the prefetching threads are the core's
//! (`loaderx::loader`); this class blocks with the GIL released and turns
//! each batch into `{name: ndarray | list}` or a `pyarrow.RecordBatch`. The
//! Python `DataLoader` adds transforms and worker threads on top. A mixture
//! (`Loader.mixture`) adds each row's source as a uint16 column.

use std::sync::{Arc, Mutex};

use loaderx::loader::{
    Batch, BatchColumn, DataLoader, Event, LoaderState, MixSource, MixWeights, Options, Output,
    Pin, Subset,
};
use numpy::{PyReadonlyArray1, PyReadonlyArray2};
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

/// Where each table source was read, as Python hands it over: per source
/// `(path, version, view)` or None.
type Pins = Vec<Option<(String, Option<u64>, Option<String>)>>;

fn pins(list: Option<Pins>) -> Option<Vec<Option<Pin>>> {
    list.map(|l| {
        l.into_iter()
            .map(|p| {
                p.map(|(path, version, view)| Pin {
                    path,
                    version,
                    view,
                })
            })
            .collect()
    })
}

/// A state's JSON, parsed and checked by the core.
fn parse(text: &str) -> PyResult<LoaderState> {
    LoaderState::from_json(text).py()
}

/// Checks a saved state (its keys, types and events) and returns it as the
/// core writes it (JSON).
#[pyfunction]
pub fn parse_state(text: &str) -> PyResult<String> {
    Ok(parse(text)?.to_json())
}

#[pyclass(frozen, module = "loaderx._native")]
pub struct Loader {
    /// The core loader; an edit of the plan swaps in the one it builds.
    inner: Mutex<Arc<DataLoader<Handle>>>,
    /// Text and binary columns as their records' uint8 arrays.
    raw: bool,
    /// A mixture's column of row sources (None: not added).
    source_column: Option<String>,
    /// Per stream, the shape of one decoded image (None: not decoded).
    decoded: Vec<Option<[usize; 3]>>,
}

/// `decode` as Python hands it over, `(column, image settings)`, in the
/// core's terms, and per stream of `names` the shape of one image.
#[allow(clippy::type_complexity)]
fn decode_of(
    names: &[String],
    decode: Option<Vec<(String, crate::image::Spec)>>,
) -> PyResult<(
    Vec<(String, loaderx::image::Image)>,
    Vec<Option<[usize; 3]>>,
)> {
    let mut out = Vec::new();
    let mut shapes = vec![None; names.len()];
    for (column, spec) in decode.unwrap_or_default() {
        let image = crate::image::image_of(&spec)?;
        if let Some(i) = names.iter().position(|n| *n == column) {
            shapes[i] = Some(image.shape());
        }
        out.push((column, image));
    }
    Ok((out, shapes))
}

#[pymethods]
impl Loader {
    /// `stores` and `names` align; `batch_size` is this rank's batch; the
    /// sampler draws global batches of `batch_size * world_size` over
    /// `len(indices)` (or the store length) and this rank takes slice `rank`.
    #[new]
    #[pyo3(signature = (stores, names, batch_size, mode, seed, start_step, indices, depth, producers, rank, world_size, arrow=false, raw=false, block_size=None, weights=None, pins=None, decode=None))]
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
        pins: Option<Pins>,
        decode: Option<Vec<(String, crate::image::Spec)>>,
    ) -> PyResult<Loader> {
        let (decode, decoded) = decode_of(&names, decode)?;
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
            events: Vec::new(),
            pins: self::pins(pins),
            decode,
        };
        let streams = names
            .into_iter()
            .zip(stores.into_iter().map(Handle))
            .collect();
        let inner = py.detach(|| DataLoader::new(streams, options)).py()?;
        Ok(Loader {
            inner: Mutex::new(Arc::new(inner)),
            raw,
            source_column: None,
            decoded,
        })
    }

    /// A loader over a mixture: `sources[i]` holds source `i`'s stores,
    /// aligned with `names`; `weights` one weight per source, or None for a
    /// schedule (then `push_weights` gives each step's, from step 0);
    /// `record_weights[i]` source `i`'s per-record weights (mode
    /// 'weighted'). `source_column` names the column of row sources (None:
    /// no such column).
    #[staticmethod]
    #[pyo3(signature = (sources, source_names, names, batch_size, mode, seed, start_step, depth, producers, rank, world_size, weights, record_weights=None, arrow=false, raw=false, block_size=None, source_column=None, pins=None, decode=None))]
    #[allow(clippy::too_many_arguments)]
    fn mixture(
        py: Python<'_>,
        sources: Vec<Vec<Py<Store>>>,
        source_names: Vec<String>,
        names: Vec<String>,
        batch_size: usize,
        mode: &str,
        seed: u64,
        start_step: u64,
        depth: usize,
        producers: usize,
        rank: usize,
        world_size: usize,
        weights: Option<Vec<f64>>,
        record_weights: Option<Vec<PyReadonlyArray1<'_, f64>>>,
        arrow: bool,
        raw: bool,
        block_size: Option<u64>,
        source_column: Option<String>,
        pins: Option<Pins>,
        decode: Option<Vec<(String, crate::image::Spec)>>,
    ) -> PyResult<Loader> {
        if sources.len() != source_names.len() {
            return Err(PyValueError::new_err(
                "sources and source_names must have the same length",
            ));
        }
        let record_weights = match record_weights {
            Some(w) if w.len() != sources.len() => {
                return Err(PyValueError::new_err(
                    "record_weights must hold one array per source",
                ))
            }
            Some(w) => w
                .iter()
                .map(|a| crate::sampler::alias_table(py, a).map(Some))
                .collect::<PyResult<Vec<Option<Arc<_>>>>>()?,
            None => vec![None; sources.len()],
        };
        let (decode, decoded) = decode_of(&names, decode)?;
        let mut mix = Vec::with_capacity(sources.len());
        for ((stores, name), weights) in sources.into_iter().zip(source_names).zip(record_weights) {
            if stores.len() != names.len() {
                return Err(PyValueError::new_err(format!(
                    "source {name:?} must hold one store per column ({}), got {}",
                    names.len(),
                    stores.len()
                )));
            }
            mix.push(MixSource {
                name,
                streams: names
                    .iter()
                    .cloned()
                    .zip(stores.into_iter().map(Handle))
                    .collect(),
                weights,
            });
        }
        let options = Options {
            batch_size,
            mode: parse_mode(mode)?,
            seed,
            block_size,
            weights: None,
            start_step,
            indices: None,
            prefetch: depth,
            producers,
            rank,
            world_size,
            output: if arrow { Output::Arrow } else { Output::Arrays },
            events: Vec::new(),
            pins: self::pins(pins),
            decode,
        };
        let weights = match weights {
            Some(w) => MixWeights::Fixed(w),
            None => MixWeights::Schedule,
        };
        let inner = py
            .detach(|| DataLoader::mixture(mix, weights, options))
            .py()?;
        Ok(Loader {
            inner: Mutex::new(Arc::new(inner)),
            raw,
            source_column,
            decoded,
        })
    }

    /// A scheduled mixture: the weights of the next steps, a
    /// `(steps, sources)` float64 array, in step order from
    /// `weights_pushed`. A refused row raises ValueError naming its step;
    /// that step's batch and every later one fail.
    fn push_weights(&self, py: Python<'_>, weights: PyReadonlyArray2<'_, f64>) -> PyResult<()> {
        let flat = weights
            .as_slice()
            .map_err(|_| PyValueError::new_err("weights must be a contiguous float64 array"))?;
        py.detach(|| self.get().push_weights(flat)).py()
    }

    /// A scheduled mixture: the next step (and every later one) fails
    /// with `why`.
    fn fail_weights(&self, why: String) -> PyResult<()> {
        self.get().fail_weights(why).py()
    }

    /// A scheduled mixture: the next step whose weights must be pushed
    /// (None for other loaders).
    #[getter]
    fn weights_pushed(&self) -> Option<u64> {
        self.get().weights_pushed()
    }

    /// The rows of `step`: `(records, sources)`, `sources` None unless a
    /// mixture (then `records` are within each row's source).
    #[allow(clippy::type_complexity)]
    fn rows_at<'py>(
        &self,
        py: Python<'py>,
        step: u64,
    ) -> PyResult<(
        Bound<'py, numpy::PyArray1<u64>>,
        Option<Bound<'py, numpy::PyArray1<u16>>>,
    )> {
        let (indices, sources) = py.detach(|| self.get().rows_at(step)).py()?;
        Ok((
            numpy::PyArray1::from_vec(py, indices),
            sources.map(|s| numpy::PyArray1::from_vec(py, s)),
        ))
    }

    /// The next batch as `{name: array | list}` (or an Arrow record batch);
    /// blocks (GIL released) until it is ready.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.get();
        let batch = py.detach(|| inner.next()).map_err(to_py)?;
        let column = self.source_column.as_deref();
        to_python(py, &inner, batch, self.raw, column, &self.decoded)
    }

    /// The step the next `next()` returns.
    #[getter]
    fn step(&self) -> u64 {
        self.get().step()
    }

    /// Indices of `step` (after the rank slice and the `indices` mapping).
    fn indices_at<'py>(
        &self,
        py: Python<'py>,
        step: u64,
    ) -> PyResult<Bound<'py, numpy::PyArray1<u64>>> {
        let indices = py.detach(|| self.get().indices_at(step)).py()?;
        Ok(numpy::PyArray1::from_vec(py, indices))
    }

    /// Every row of `steps` (uint64, any order) but the skipped ones, of
    /// `rank` or of every rank: `(steps, ranks, rows, records, sources)` as
    /// arrays (`sources` None unless a mixture), computed with the GIL
    /// released. A scheduled mixture takes its weights of steps
    /// `0..=max(steps)` in `schedule` (a `(steps, sources)` float64 array).
    #[pyo3(signature = (steps, rank=None, schedule=None))]
    fn provenance<'py>(
        &self,
        py: Python<'py>,
        steps: PyReadonlyArray1<'py, u64>,
        rank: Option<usize>,
        schedule: Option<PyReadonlyArray2<'py, f64>>,
    ) -> PyResult<Rows<'py>> {
        self.rows(py, steps, rank, schedule, true)
    }

    /// The run's state at `step` (the consumer's: the Python loader's
    /// transform threads take batches ahead of it), as JSON.
    fn state(&self, step: u64) -> String {
        let mut state = self.get().state();
        state.step = step;
        state.to_json()
    }

    /// Excludes `records` (of source `source` of a mixture) from `step` on
    /// (see `DataLoader::edited`): the loader goes on at `step`.
    #[pyo3(signature = (step, records, source=None))]
    fn exclude(
        &self,
        py: Python<'_>,
        step: u64,
        records: PyReadonlyArray1<'_, u64>,
        source: Option<String>,
    ) -> PyResult<()> {
        let records = records.as_slice()?.to_vec();
        self.swap(py, |l| {
            l.edited(Event::Exclude {
                step,
                records,
                source,
            })
        })
    }

    /// Steps past `n` steps from `step`.
    fn skip(&self, py: Python<'_>, step: u64, n: u64) -> PyResult<()> {
        self.swap(py, |l| l.edited(Event::Skip { step, n }))
    }

    /// Continues from a saved state (JSON), checked against this run.
    fn load_state(&self, py: Python<'_>, text: &str) -> PyResult<()> {
        let state = parse(text)?;
        self.swap(py, |l| l.resumed(&state))
    }

    /// Starts afresh at `step` with the plan's edits (a `fork()`ed child's
    /// loader: the parent's threads do not exist there).
    fn restart(&self, py: Python<'_>, step: u64) -> PyResult<()> {
        self.swap(py, |l| l.restarted(step))
    }

    /// The rows of `steps`, skipped or not (`provenance`'s columns).
    #[pyo3(signature = (steps, rank=None, schedule=None))]
    #[allow(clippy::type_complexity)]
    fn planned<'py>(
        &self,
        py: Python<'py>,
        steps: PyReadonlyArray1<'py, u64>,
        rank: Option<usize>,
        schedule: Option<PyReadonlyArray2<'py, f64>>,
    ) -> PyResult<Rows<'py>> {
        self.rows(py, steps, rank, schedule, false)
    }

    /// Stops and joins the producer threads. Idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.get().close());
    }

    #[getter]
    fn closed(&self) -> bool {
        self.get().is_closed()
    }
}

/// `(steps, ranks, rows, records, sources)` of listed rows.
type Rows<'py> = (
    Bound<'py, numpy::PyArray1<u64>>,
    Bound<'py, numpy::PyArray1<u32>>,
    Bound<'py, numpy::PyArray1<u32>>,
    Bound<'py, numpy::PyArray1<u64>>,
    Option<Bound<'py, numpy::PyArray1<u16>>>,
);

impl Loader {
    /// The core loader now.
    fn get(&self) -> Arc<DataLoader<Handle>> {
        Arc::clone(&self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replaces the core loader with `build(current)`'s and closes the old
    /// one; on error nothing changes.
    fn swap(
        &self,
        py: Python<'_>,
        build: impl FnOnce(&DataLoader<Handle>) -> loaderx::Result<DataLoader<Handle>>,
    ) -> PyResult<()> {
        let current = self.get();
        let next = Arc::new(build(&current).py()?);
        let old = std::mem::replace(
            &mut *self.inner.lock().unwrap_or_else(|e| e.into_inner()),
            next,
        );
        py.detach(|| old.close());
        Ok(())
    }

    fn rows<'py>(
        &self,
        py: Python<'py>,
        steps: PyReadonlyArray1<'py, u64>,
        rank: Option<usize>,
        schedule: Option<PyReadonlyArray2<'py, f64>>,
        skip_skipped: bool,
    ) -> PyResult<Rows<'py>> {
        let steps = steps
            .as_slice()
            .map_err(|_| PyValueError::new_err("steps must be a contiguous uint64 array"))?;
        let schedule = schedule
            .as_ref()
            .map(|s| {
                s.as_slice().map_err(|_| {
                    PyValueError::new_err("schedule must be a contiguous float64 array")
                })
            })
            .transpose()?;
        let inner = self.get();
        let p = py
            .detach(|| match skip_skipped {
                true => inner.provenance(steps, rank, schedule),
                false => inner.planned(steps, rank, schedule),
            })
            .py()?;
        Ok((
            numpy::PyArray1::from_vec(py, p.steps),
            numpy::PyArray1::from_vec(py, p.ranks),
            numpy::PyArray1::from_vec(py, p.rows),
            numpy::PyArray1::from_vec(py, p.records),
            p.sources.map(|s| numpy::PyArray1::from_vec(py, s)),
        ))
    }
}

fn to_python<'py>(
    py: Python<'py>,
    loader: &DataLoader<Handle>,
    batch: Batch,
    raw: bool,
    source_column: Option<&str>,
    decoded: &[Option<[usize; 3]>],
) -> PyResult<Bound<'py, PyAny>> {
    let sources = batch.sources.filter(|_| source_column.is_some());
    let mut columns = batch.columns.into_iter().peekable();
    if let Some(BatchColumn::Arrow(..)) = columns.peek() {
        let mut columns: Vec<_> = columns
            .map(|c| match c {
                BatchColumn::Arrow(field, array) => (field, array),
                _ => unreachable!("an arrow loader gathers arrow columns"),
            })
            .collect();
        if let (Some(name), Some(sources)) = (source_column, sources) {
            columns.push((
                arrow_schema::Field::new(name, arrow_schema::DataType::UInt16, false),
                Arc::new(arrow_array::UInt16Array::from(sources)) as arrow_array::ArrayRef,
            ));
        }
        for (_, column) in batch.extra {
            if let BatchColumn::Arrow(field, array) = column {
                columns.push((field, array));
            }
        }
        let batch = crate::arrow::record_batch(columns)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        return Ok(pyo3_arrow::PyRecordBatch::new(batch)
            .into_pyobject(py)?
            .into_any());
    }
    let dict = PyDict::new(py);
    let u8_descr = numpy::dtype::<u8>(py);
    for (i, (((name, handle), column), valid)) in loader
        .streams()
        .iter()
        .zip(columns)
        .zip(batch.validity)
        .enumerate()
    {
        if let Some(Some(shape)) = decoded.get(i) {
            // Decoded images: uint8 (B, 3, H, W) or (B, H, W, 3).
            if let BatchColumn::Dense(buf) = column {
                let rows = buf.len() / shape.iter().product::<usize>().max(1);
                let owner = crate::arrays::GatherBuffer::new(py, buf)?;
                let dims = [rows, shape[0], shape[1], shape[2]];
                let array = crate::arrays::array_view(py, &owner, 0, &u8_descr, &dims)?;
                dict.set_item(name, array)?;
                continue;
            }
            return Err(pyo3::exceptions::PySystemError::new_err(
                "internal error: a decoded column came back not dense",
            ));
        }
        let store = handle.0.get();
        let value = match column {
            BatchColumn::Dense(buf) => store.dense_array(py, buf, Some(loader.batch_size()))?,
            BatchColumn::Ragged(rb) if store.is_bytes() && !raw => {
                PyList::new(py, store.bytes_values(py, rb)?)?.into_any()
            }
            BatchColumn::Ragged(rb) => PyList::new(py, store.ragged_arrays(py, rb)?)?.into_any(),
            BatchColumn::Arrow(..) => unreachable!("a numpy loader gathers arrays"),
        };
        let value = match valid {
            Some(v) => store.with_nulls(py, value, v.as_slice())?,
            None => value,
        };
        dict.set_item(name, value)?;
    }
    if let (Some(name), Some(sources)) = (source_column, sources) {
        dict.set_item(name, numpy::PyArray1::from_vec(py, sources))?;
    }
    for (name, column) in batch.extra {
        if let BatchColumn::Dense(buf) = column {
            let ok: Vec<bool> = buf.as_slice().iter().map(|&b| b != 0).collect();
            dict.set_item(name, numpy::PyArray1::from_vec(py, ok))?;
        }
    }
    Ok(dict.into_any())
}
