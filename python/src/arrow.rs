//! Arrow across the boundary: stores as Arrow arrays and streams (through the
//! Arrow C Data Interface, via pyo3-arrow), and Arrow data into stores.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_schema::{ArrowError, Field, FieldRef};
use loaderx::arrow::{self as la, StoreAccess};
use loaderx::schema::Kind;
use loaderx::Error;
use loaderx::Packed;
use loaderx::Records;
use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use pyo3_arrow::ffi::{to_schema_pycapsule, to_stream_pycapsule, ArrayIterator};
use pyo3_arrow::input::{AnyArray, AnyRecordBatch};
use pyo3_arrow::{PyArray, PyField, PyRecordBatch, PySchema};

use crate::errors::{wrapped, IntoPyResult};
use crate::store::{PackedRecords, Store};
use loaderx::error::{cause, Cause};

/// A store handle readers can hold after the call returns.
pub struct Handle(pub Py<Store>);

impl Clone for Handle {
    /// Another reference to the same store (a loader's edit rebuilds its
    /// plan over the same stores).
    fn clone(&self) -> Handle {
        Python::attach(|py| Handle(self.0.clone_ref(py)))
    }
}

impl StoreAccess for Handle {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T, Error>) -> Result<T, Error> {
        self.0.get().engine_read(f)
    }
}

fn arrow_py(e: ArrowError) -> PyErr {
    // A scan filter's Python exception comes back as it was raised.
    let e = match e {
        ArrowError::ExternalError(inner) => match inner.downcast::<PyErr>() {
            Ok(err) => return *err,
            Err(inner) => ArrowError::ExternalError(inner),
        },
        other => other,
    };
    if let Some(err) = wrapped(&e) {
        return err;
    }
    match e {
        ArrowError::ExternalError(inner) => PyValueError::new_err(inner.to_string()),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// Errors of a reader handed to Python through the Arrow C stream interface,
/// which carries only an errno-like code and a message: an I/O failure
/// (including a corrupted or busy store) becomes `ArrowError::IoError`,
/// which the stream reports as EIO and pyarrow raises as `OSError`, instead
/// of EINVAL (`ArrowInvalid`, a `ValueError`).
struct IoClassed<I>(I);

impl<I, T> Iterator for IoClassed<I>
where
    I: Iterator<Item = Result<T, ArrowError>>,
{
    type Item = Result<T, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.0.next()?.map_err(io_classed))
    }
}

impl<I: arrow_array::RecordBatchReader> arrow_array::RecordBatchReader for IoClassed<I> {
    fn schema(&self) -> arrow_schema::SchemaRef {
        self.0.schema()
    }
}

fn io_classed(e: ArrowError) -> ArrowError {
    let io = match cause(&e) {
        Some(Cause::Os(_)) => true,
        Some(Cause::Store(err)) => matches!(
            err,
            Error::Io { .. } | Error::Corrupted { .. } | Error::Busy(_)
        ),
        None => false,
    };
    if !io {
        return e;
    }
    let msg = match &e {
        ArrowError::ExternalError(inner) => inner.to_string(),
        other => other.to_string(),
    };
    ArrowError::IoError(msg, std::io::Error::other(e))
}

/// The Arrow field of a store's records, as an `arrow_schema` capsule.
#[pyfunction]
pub fn arrow_field<'py>(
    py: Python<'py>,
    store: &Bound<'py, Store>,
    name: &str,
) -> PyResult<Bound<'py, PyCapsule>> {
    let field = store
        .get()
        .engine_read(|e| Ok(la::field_of(e, name)))
        .py()?;
    Ok(to_schema_pycapsule(py, &field)?)
}

/// The whole store as an array stream of byte-bounded chunks.
#[pyfunction]
#[pyo3(signature = (store, name, requested_schema=None, max_bytes=la::DEFAULT_BATCH_BYTES))]
pub fn arrow_stream<'py>(
    py: Python<'py>,
    store: Py<Store>,
    name: &str,
    requested_schema: Option<Bound<'py, PyCapsule>>,
    max_bytes: usize,
) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = la::ColumnReader::new(Handle(store), name, max_bytes).py()?;
    let field = reader.field();
    let iter = ArrayIterator::new(IoClassed(reader), field);
    Ok(to_stream_pycapsule(py, Box::new(iter), requested_schema)?)
}

/// Records at `idx` as one Arrow array (with its field).
#[pyfunction]
#[pyo3(signature = (store, idx, name, variable_shape_tensor=false))]
pub fn arrow_gather(
    py: Python<'_>,
    store: &Bound<'_, Store>,
    idx: PyReadonlyArray1<'_, i64>,
    name: &str,
    variable_shape_tensor: bool,
) -> PyResult<PyArray> {
    let idx = idx
        .as_slice()
        .map_err(|_| PyValueError::new_err("indices must be contiguous"))?;
    let store = store.get();
    let (array, field) = py
        .detach(|| {
            store.engine_read(|e| {
                if variable_shape_tensor {
                    la::gather_variable_shape_tensor(e, idx, name)
                } else {
                    Ok((la::gather_array(e, idx)?, la::field_of(e, name)))
                }
            })
        })
        .py()?;
    PyArray::try_new(array, Arc::new(field)).map_err(arrow_py)
}

/// The batches of the core's table scan over `stores` (named `names`; a
/// UInt64 `index_column` holding the row number first when named):
/// `columns` (None: all, the index column included), rows `start..end`, at
/// most `limit` rows, batches of at most `max_bytes` (None: one batch) and
/// `max_rows`. With
/// `filter`, a callable given a batch of `filter_columns` (`filter_rows`
/// rows at most) that returns a boolean Arrow array, only the rows it
/// keeps are read; its exceptions reach the caller as raised. `predicate`
/// (JSON, see `loaderx::columnar::Pred::from_json`) is evaluated on the
/// stored chunks when every column read is columnar: the rows it rejects
/// are never read (a caller may get rows it rejects too: it filters them).
/// With `predicate_exact`, a scan the core cannot apply `predicate` to, or
/// whose answer the core does not say is exact, is None (the caller reads
/// what its own filter needs instead).
#[pyfunction]
#[pyo3(signature = (
    stores, names, index_column, columns=None, start=0, end=None, limit=None,
    max_bytes=Some(la::DEFAULT_BATCH_BYTES), max_rows=None, filter_columns=None, filter=None,
    filter_rows=la::FILTER_ROWS, predicate=None, predicate_exact=false,
))]
#[allow(clippy::too_many_arguments)]
pub fn table_scan(
    stores: Vec<Py<Store>>,
    names: Vec<String>,
    index_column: Option<String>,
    columns: Option<Vec<String>>,
    start: u64,
    end: Option<u64>,
    limit: Option<usize>,
    max_bytes: Option<usize>,
    max_rows: Option<usize>,
    filter_columns: Option<Vec<String>>,
    filter: Option<Py<PyAny>>,
    filter_rows: usize,
    predicate: Option<String>,
    predicate_exact: bool,
) -> PyResult<Option<BatchReader>> {
    let streams: Vec<(String, Handle)> = names
        .into_iter()
        .zip(stores.into_iter().map(Handle))
        .collect();
    let mut scan = la::Scan::new(streams, index_column).py()?;
    let indices = |scan: &la::Scan<Handle>, names: Vec<String>| -> PyResult<Vec<usize>> {
        names.iter().map(|n| scan.column_index(n).py()).collect()
    };
    if let Some(columns) = columns {
        let cols = indices(&scan, columns)?;
        scan = scan.project(cols).py()?;
    }
    let len = scan.table_len();
    let end = end.unwrap_or(len);
    if start > end || end > len {
        return Err(PyValueError::new_err(format!(
            "rows {start}..{end} are not within the table's {len} rows"
        )));
    }
    scan = scan
        .rows(std::iter::once(start..end).collect())
        .py()?
        .max_bytes(max_bytes.unwrap_or(usize::MAX));
    if let Some(limit) = limit {
        scan = scan.limit(limit);
    }
    if let Some(rows) = max_rows {
        scan = scan.max_rows(rows);
    }
    if let Some(keep) = filter {
        let cols = indices(&scan, filter_columns.unwrap_or_default())?;
        scan = scan.filter(cols, python_filter(keep), filter_rows).py()?;
    }
    if let Some(text) = predicate {
        // Applied when every column it reads is columnar; the caller
        // applies its full predicate to what comes back either way.
        let pred = loaderx::columnar::Pred::from_json(&text).py()?;
        let applied = scan.native_filter(pred).py()?;
        if predicate_exact && !(applied && scan.native_exact().py()?) {
            return Ok(None);
        }
    }
    Ok(Some(BatchReader {
        schema: scan.out_schema(),
        reader: Mutex::new(Some(Box::new(scan))),
    }))
}

/// A Python callable as a scan filter: it runs with the GIL, once per
/// batch of the filter's columns.
fn python_filter(keep: Py<PyAny>) -> la::Filter {
    Box::new(move |batch: &arrow_array::RecordBatch| {
        Python::attach(|py| -> PyResult<BooleanArray> {
            let out = keep.call1(py, (PyRecordBatch::new(batch.clone()),))?;
            let array: PyArray = out.extract(py)?;
            array
                .as_ref()
                .as_any()
                .downcast_ref::<BooleanArray>()
                .cloned()
                .ok_or_else(|| {
                    PyTypeError::new_err(format!(
                        "a scan filter must return a boolean Arrow array, got one of type {}",
                        array.as_ref().data_type()
                    ))
                })
        })
        .map_err(|e| ArrowError::ExternalError(Box::new(e)))
    })
}

/// The next item of the reader in `slot`; at the end the reader is
/// dropped (releasing its store handles) and every later call gives None.
fn next_or_release<I: Iterator>(slot: &Mutex<Option<I>>) -> Option<I::Item> {
    let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
    let next = guard.as_mut().and_then(Iterator::next);
    if next.is_none() {
        *guard = None;
    }
    next
}

/// The batches of a lazy reader, one native call each (the GIL released
/// around the gather). The Python facade wraps it in a
/// `pyarrow.RecordBatchReader` over a generator, not the C stream interface:
/// that interface carries only an errno and a message, so a `Corrupted` or
/// `StoreBusy` raised while reading would reach the caller as a bare
/// `OSError`; through `read_next` it keeps its class.
#[pyclass(frozen, module = "loaderx._native")]
pub struct BatchReader {
    schema: arrow_schema::SchemaRef,
    reader: Mutex<Option<Box<dyn arrow_array::RecordBatchReader + Send>>>,
}

#[pymethods]
impl BatchReader {
    /// The batches' schema (an Arrow PyCapsule object).
    #[getter]
    fn schema(&self) -> PySchema {
        PySchema::new(Arc::clone(&self.schema))
    }

    /// The next batch, or None at the end (after which it stays None).
    fn read_next(&self, py: Python<'_>) -> PyResult<Option<PyRecordBatch>> {
        let next = py.detach(|| next_or_release(&self.reader));
        match next {
            None => Ok(None),
            Some(Ok(batch)) => Ok(Some(PyRecordBatch::new(batch))),
            Some(Err(e)) => Err(arrow_py(e)),
        }
    }
}

/// The chunks of a whole store, one native call each; see [`BatchReader`]
/// for why the facade reads them this way.
#[pyclass(frozen, module = "loaderx._native")]
pub struct ArrayReader {
    field: FieldRef,
    reader: Mutex<Option<la::ColumnReader<Handle>>>,
}

#[pymethods]
impl ArrayReader {
    /// The chunks' field (an Arrow PyCapsule object).
    #[getter]
    fn field(&self) -> PyField {
        PyField::new(Arc::clone(&self.field))
    }

    /// The next chunk, or None at the end.
    fn read_next(&self, py: Python<'_>) -> PyResult<Option<PyArray>> {
        let next = py.detach(|| next_or_release(&self.reader));
        match next {
            None => Ok(None),
            Some(Ok(array)) => Ok(Some(
                PyArray::try_new(array, Arc::clone(&self.field)).map_err(arrow_py)?,
            )),
            Some(Err(e)) => Err(arrow_py(e)),
        }
    }
}

/// A reader of a whole store's byte-bounded chunks (see [`ArrayReader`]).
#[pyfunction]
#[pyo3(signature = (store, name, max_bytes=la::DEFAULT_BATCH_BYTES))]
pub fn arrow_chunks(store: Py<Store>, name: &str, max_bytes: usize) -> PyResult<ArrayReader> {
    let reader = la::ColumnReader::new(Handle(store), name, max_bytes).py()?;
    Ok(ArrayReader {
        field: reader.field(),
        reader: Mutex::new(Some(reader)),
    })
}

/// Every chunk of an Arrow array / chunked array / stream, with its field.
fn chunks(py: Python<'_>, data: AnyArray) -> PyResult<(Vec<ArrayRef>, FieldRef)> {
    let reader = data.into_reader()?;
    let field = reader.field();
    let chunks = py
        .detach(|| reader.collect::<Result<Vec<_>, ArrowError>>())
        .map_err(arrow_py)?;
    Ok((chunks, field))
}

fn pack_all(dtype: loaderx::DType, chunks: &[ArrayRef], field: &Field) -> Result<Packed, Error> {
    let mut all = Packed::default();
    for chunk in chunks {
        let p = la::ragged_pack(dtype, chunk.as_ref(), field)?;
        if all.is_empty() {
            all = p;
            continue;
        }
        let base = all.bytes.len();
        all.bytes.extend_from_slice(&p.bytes);
        all.bounds.extend(p.bounds[1..].iter().map(|b| b + base));
    }
    Ok(all)
}

/// Appends Arrow data to a store. Every chunk is validated before anything
/// is written. Dense stores are written here; for ragged stores the packed
/// batch is returned for the writer queue.
#[pyfunction]
pub fn arrow_append(
    py: Python<'_>,
    store: &Bound<'_, Store>,
    data: AnyArray,
) -> PyResult<Option<PackedRecords>> {
    let store = store.get();
    store.require_writable("append")?;
    let (chunks, field) = chunks(py, data)?;
    let schema = store.engine_read(|e| Ok(e.schema().clone())).py()?;
    match schema.kind() {
        Kind::Dense => {
            // Validate all chunks first: a rejected append changes nothing.
            for c in &chunks {
                la::with_dense_bytes(&schema, c.as_ref(), &field, |_| Ok(())).py()?;
            }
            store.with_write(py, |e| {
                for c in &chunks {
                    la::with_dense_bytes(&schema, c.as_ref(), &field, |b| e.append_dense(b))?;
                }
                Ok(())
            })?;
            Ok(None)
        }
        Kind::Ragged => {
            let utf8 = store.logical_type() == loaderx::schema::Logical::Utf8;
            let packed = py
                .detach(|| {
                    let packed = pack_all(schema.dtype, &chunks, &field)?;
                    if utf8 {
                        la::check_utf8(&packed, field.name())?;
                    }
                    Ok::<_, Error>(packed)
                })
                .py()?;
            Ok(Some(PackedRecords::from(packed)))
        }
    }
}

/// Streams every batch of `source` into one new store per column under
/// `root` (see `loaderx::arrow::ingest`). Returns `[(column, kind)]`.
#[pyfunction]
#[pyo3(signature = (source, root, codec="zstd", dict_bytes=None))]
pub fn arrow_ingest(
    py: Python<'_>,
    source: AnyRecordBatch,
    root: PathBuf,
    codec: &str,
    dict_bytes: Option<Vec<u8>>,
) -> PyResult<Vec<(String, String)>> {
    let codec = crate::store::parse_codec(codec)?;
    let reader = source.into_reader()?;
    let made = py
        .detach(|| la::ingest(reader, &root, codec, dict_bytes.as_deref(), &mut |_| {}))
        .py()?;
    Ok(made.into_iter().map(|(n, k)| (n, k.to_string())).collect())
}

/// Converts one batch of gathered Arrow columns to a record batch object.
pub fn record_batch(
    columns: Vec<(Field, ArrayRef)>,
) -> Result<arrow_array::RecordBatch, ArrowError> {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    arrow_array::RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), arrays)
}
