//! `loaderx._native.Store`: one native handle for both store contracts.
//!
//! The Python facade (`loaderx.zrecord`) validates inputs and normalises
//! keys; this layer turns the engine's byte-level API into NumPy arrays.
//! Every call that touches the disk or decodes records runs with the GIL
//! released. Gathers take a shared lock (many threads may gather at once);
//! append, delete, compact, sync and close take it exclusively.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{RwLock, RwLockWriteGuard};

use loaderx::schema::Kind;
use loaderx::schema::Logical;
use loaderx::table::Stream;
use loaderx::Packed;
use loaderx::{Codec, DType, Error, Schema};
use loaderx::{Indices, Records};
use numpy::{PyArrayDescr, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBytes, PyDict, PyList, PyTuple};

use crate::arrays::{array_view, GatherBuffer};
use crate::errors::IntoPyResult;
use crate::writer::{Sink, Writer};

mod pack;
mod parse;

pub use pack::PackedRecords;
pub(crate) use parse::parse_codec;
use parse::{parse_dtype, parse_kind, parse_logical};

/// What a handle reads: the core's column (its records, how the table
/// presents them, its validity stream).
pub(crate) type Column = loaderx::table::Column;

/// Fork safety: a `fork()`ed child inherits the lock's state but none of
/// the threads that held it, so in a child every read goes straight to the
/// engine through `engine` (the child may only read, so nothing mutates it)
/// and never touches the lock.
#[pyclass(frozen, module = "loaderx._native")]
pub struct Store {
    inner: RwLock<Option<Box<Column>>>,
    /// The boxed source; null once closed by its owner.
    engine: AtomicPtr<Column>,
    owner_pid: u32,
    /// Set when a forked child closes its copy of the handle.
    child_closed: AtomicBool,
    path: PathBuf,
    kind: Kind,
    dtype: DType,
    item_shape: Option<Vec<usize>>,
    codec: Codec,
    /// How the table presents the records (text, binary, tensors).
    logical: Logical,
    descr: Py<PyArrayDescr>,
    /// The writer queue of ragged appends (see `crate::writer`).
    writer: Writer,
}

/// A column's name: its directory's.
fn name_of(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn closed_error(path: &std::path::Path) -> PyErr {
    PyValueError::new_err(format!("store {} is closed", path.display()))
}

impl Store {
    /// The handle of `column` (checked by [`Column::new`]).
    pub(crate) fn wrap(py: Python<'_>, column: Column) -> PyResult<Store> {
        let mut engine = Box::new(column);
        let schema = engine.schema().clone();
        let logical = engine.logical();
        let path = engine.path().to_path_buf();
        let codec = engine.codec();
        let engine_ptr: *mut Column = &mut *engine;
        let descr = PyArrayDescr::new(py, schema.dtype.numpy_str())?.unbind();
        Ok(Store {
            path,
            kind: schema.kind(),
            dtype: schema.dtype,
            item_shape: schema
                .item_shape()
                .map(|s| s.iter().map(|&d| d as usize).collect()),
            codec,
            logical,
            descr,
            inner: RwLock::new(Some(engine)),
            engine: AtomicPtr::new(engine_ptr),
            owner_pid: std::process::id(),
            child_closed: AtomicBool::new(false),
            writer: Writer::new(),
        })
    }

    fn in_forked_child(&self) -> bool {
        std::process::id() != self.owner_pid
    }

    fn write(&self) -> PyResult<RwLockWriteGuard<'_, Option<Box<Column>>>> {
        if self.in_forked_child() {
            return Err(PyValueError::new_err(format!(
                "store {} was opened by process {}; this forked child may only read it",
                self.path.display(),
                self.owner_pid
            )));
        }
        let guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(closed_error(&self.path));
        }
        Ok(guard)
    }

    /// Runs `f` on the open engine under the shared lock (or, in a forked
    /// child, directly). Needs no GIL: prefetch threads read through it.
    pub(crate) fn engine_read<T>(
        &self,
        f: impl FnOnce(&dyn Records) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.column_read(|c| f(c))
    }

    /// [`Store::engine_read`], lending the column's records themselves.
    pub(crate) fn source_read<T>(
        &self,
        f: impl FnOnce(&loaderx::table::Stream) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.column_read(|c| f(c.data()))
    }

    /// [`Store::engine_read`], lending the whole column.
    fn column_read<T>(&self, f: impl FnOnce(&Column) -> Result<T, Error>) -> Result<T, Error> {
        let closed = || Error::InvalidState(format!("store {} is closed", self.path.display()));
        if self.in_forked_child() {
            let ptr = self.engine.load(Ordering::Acquire);
            if ptr.is_null() || self.child_closed.load(Ordering::Acquire) {
                return Err(closed());
            }
            // SAFETY: the pointer is the live boxed engine of the parent's
            // image; a child never mutates or frees it (writes are refused).
            return f(unsafe { &*ptr });
        }
        let guard = self.inner.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_deref() {
            Some(engine) => f(engine),
            None => Err(closed()),
        }
    }

    fn read_engine<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T, Error>) -> PyResult<T> {
        self.engine_read(f).py()
    }

    /// Runs `f` on the open engine with the GIL released, for reading.
    fn with_read<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&dyn Records) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.read_engine(f))
    }

    /// Runs `f` on the open engine with the GIL released, under the exclusive lock.
    pub(crate) fn with_write<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut loaderx::Store) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self.write()?;
            let column = guard.as_mut().unwrap();
            f(writable(column, &self.path, "write").py()?).py()
        })
    }

    pub(crate) fn dense_array<'py>(
        &self,
        py: Python<'py>,
        buf: loaderx::Buffer,
        leading: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shape = self.item_shape.as_deref().unwrap_or(&[]);
        let mut dims = Vec::with_capacity(shape.len() + 1);
        dims.extend(leading);
        dims.extend_from_slice(shape);
        let owner = GatherBuffer::new(py, buf)?;
        array_view(py, &owner, 0, self.descr.bind(py), &dims)
    }

    pub(crate) fn logical_type(&self) -> Logical {
        self.logical
    }

    /// A gathered batch of a nullable column with its nulls: a dense batch
    /// becomes a `numpy.ma.MaskedArray` (whole rows masked), a list holds
    /// None at each null.
    pub(crate) fn with_nulls<'py>(
        &self,
        py: Python<'py>,
        value: Bound<'py, PyAny>,
        valid: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(list) = value.cast::<PyList>() {
            for (i, &v) in valid.iter().enumerate() {
                if v == 0 {
                    list.set_item(i, py.None())?;
                }
            }
            return Ok(value);
        }
        let np = py.import("numpy")?;
        let mask: Vec<bool> = valid.iter().map(|&v| v == 0).collect();
        let mut row_shape = vec![valid.len()];
        row_shape.extend(std::iter::repeat_n(
            1,
            self.item_shape.as_ref().map_or(0, Vec::len),
        ));
        let mask = np
            .call_method1("array", (mask,))?
            .call_method1("reshape", (PyTuple::new(py, row_shape)?,))?;
        let mask = np.call_method1("broadcast_to", (mask, value.getattr("shape")?))?;
        np.getattr("ma")?
            .getattr("MaskedArray")?
            .call((value,), Some(&[("mask", mask)].into_py_dict(py)?))
    }

    /// Whether the table presents the records as text or bytes.
    pub(crate) fn is_bytes(&self) -> bool {
        self.logical.is_bytes()
    }

    /// The values of a gathered text (`str`) or binary (`bytes`) batch.
    pub(crate) fn bytes_values<'py>(
        &self,
        py: Python<'py>,
        batch: loaderx::RaggedBatch,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let mut out = Vec::with_capacity(batch.len());
        for i in 0..batch.len() {
            let rec = batch.record(i);
            let value = loaderx::schema::bytes_value(&rec).map_err(|e| {
                crate::errors::to_py(Error::corrupted(&self.path, format!("record {i}: {e}")))
            })?;
            out.push(match self.logical {
                Logical::Utf8 => {
                    let text = std::str::from_utf8(value).map_err(|e| {
                        crate::errors::to_py(Error::corrupted(
                            &self.path,
                            format!("a utf8 column holds a value that is not UTF-8: {e}"),
                        ))
                    })?;
                    pyo3::types::PyString::new(py, text).into_any()
                }
                _ => PyBytes::new(py, value).into_any(),
            });
        }
        Ok(out)
    }

    pub(crate) fn ragged_arrays<'py>(
        &self,
        py: Python<'py>,
        batch: loaderx::RaggedBatch,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        // Flat per-batch tables (no allocation per record).
        let n = batch.len();
        let mut starts = Vec::with_capacity(n);
        let mut ndims = Vec::with_capacity(n);
        let mut dims = Vec::with_capacity(n * 2);
        for i in 0..n {
            let r = batch.record(i);
            starts.push(batch.spans[i].0 + r.payload_offset());
            ndims.push(r.ndim());
            dims.extend(r.dims().map(|d| d as usize));
        }
        let owner = GatherBuffer::new(py, batch.buffer)?;
        let descr = self.descr.bind(py);
        let mut out = Vec::with_capacity(n);
        let mut at = 0;
        for (start, nd) in starts.into_iter().zip(ndims) {
            out.push(array_view(py, &owner, start, descr, &dims[at..at + nd])?);
            at += nd;
        }
        Ok(out)
    }
}

/// The store of `column` for a write `op`: refused for a nullable column
/// (its validity is not kept in step), a sharded or columnar one.
fn writable<'c>(
    column: &'c mut Column,
    path: &std::path::Path,
    op: &'static str,
) -> Result<&'c mut loaderx::Store, Error> {
    if column.validity_stream().is_some() {
        return Err(Error::NullableReadOnly {
            op,
            path: path.to_path_buf(),
        });
    }
    column
        .data_mut()
        .store_mut()
        .ok_or_else(|| Error::ShardedReadOnly {
            op,
            path: path.to_path_buf(),
        })
}

/// The validity of a nullable column's records at `idx` (None otherwise).
fn validity_at(s: &dyn Records, idx: &[i64]) -> Result<Option<loaderx::Buffer>, Error> {
    s.validity()
        .map(|v| v.gather_dense(Indices::from(idx).resolve(v.len())?))
        .transpose()
}

#[pymethods]
impl Store {
    /// Creates a store. `dtype` is NumPy's `dtype.str`; `item_shape` is
    /// given for dense stores and `None` for ragged ones.
    #[staticmethod]
    #[pyo3(signature = (path, dtype, item_shape, codec, dict_bytes=None, checksum=false))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dtype: &str,
        item_shape: Option<Vec<u64>>,
        codec: &str,
        dict_bytes: Option<Vec<u8>>,
        checksum: bool,
    ) -> PyResult<Store> {
        let dtype = parse_dtype(dtype)?;
        let codec = parse_codec(codec)?;
        let schema = match item_shape {
            Some(shape) => Schema::dense(dtype, &shape).py()?,
            None => Schema::ragged(dtype),
        };
        let engine = py
            .detach(|| {
                loaderx::Store::create_with_checksum(
                    &path,
                    schema,
                    codec,
                    dict_bytes.as_deref(),
                    checksum,
                )
            })
            .py()?;
        Store::wrap(
            py,
            Column::new(name_of(&path), Stream::Store(engine), Logical::Tensor, None).py()?,
        )
    }

    /// Opens a store; `kind` ("dense" / "ragged") insists on one contract.
    /// With `readonly` the handle takes a shared lock and refuses writes.
    #[staticmethod]
    #[pyo3(signature = (path, kind=None, readonly=false, logical=None, validity=None, storage_options=None))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        kind: Option<&str>,
        readonly: bool,
        logical: Option<&str>,
        validity: Option<PathBuf>,
        storage_options: Option<std::collections::HashMap<String, String>>,
    ) -> PyResult<Store> {
        let kind = parse_kind(kind)?;
        let logical = parse_logical(logical)?;
        let remote = path
            .to_str()
            .filter(|p| loaderx::Location::is_remote_uri(p))
            .map(|p| crate::remote::location(p, storage_options, None, None))
            .transpose()?;
        let engine = py
            .detach(|| match (&remote, kind, readonly) {
                (Some(at), kind, readonly) => {
                    let store = loaderx::Store::open_at(at, readonly)?;
                    match kind {
                        Some(k) if store.kind() != k => {
                            let actual = store.kind();
                            let _ = store.close();
                            Err(Error::WrongKind {
                                path: path.clone(),
                                expected: k,
                                actual,
                            })
                        }
                        _ => Ok(store),
                    }
                }
                (None, Some(k), false) => {
                    loaderx::Store::open(&path).and_then(|s| s.require_kind(k))
                }
                (None, Some(k), true) => {
                    loaderx::Store::open_readonly(&path).and_then(|s| s.require_kind(k))
                }
                (None, None, false) => loaderx::Store::open(&path),
                (None, None, true) => loaderx::Store::open_readonly(&path),
            })
            .py()?;
        let validity = match validity {
            Some(v) => match py.detach(|| {
                loaderx::Store::open_readonly(&v).and_then(|s| s.require_kind(Kind::Dense))
            }) {
                Ok(v) => Some(Stream::Store(v)),
                Err(e) => {
                    let _ = engine.close();
                    return Err(crate::errors::to_py(e));
                }
            },
            None => None,
        };
        let column = Column::new(name_of(&path), Stream::Store(engine), logical, validity);
        Store::wrap(py, column.py()?)
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn kind(&self) -> String {
        self.kind.to_string()
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.numpy_str()
    }

    #[getter]
    fn item_shape<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.item_shape
            .as_ref()
            .map(|s| PyTuple::new(py, s))
            .transpose()
    }

    #[getter]
    fn codec(&self) -> &'static str {
        self.codec.name()
    }

    /// "tensor", "utf8" or "binary": how the table presents the records.
    #[getter]
    fn logical(&self) -> &'static str {
        self.logical.name()
    }

    /// Whether zstd frames written through this handle carry a checksum.
    #[getter]
    fn checksum(&self) -> PyResult<bool> {
        self.read_engine(|e| Ok(e.checksum()))
    }

    /// Whether the handle was opened read-only.
    #[getter]
    fn readonly(&self) -> PyResult<bool> {
        self.read_engine(|e| Ok(e.is_readonly()))
    }

    /// Raises `io.UnsupportedOperation` naming `op` ("append", "delete",
    /// "compact", "sync") when the handle is read-only: the facade checks
    /// this before validating (and, for ragged stores, queueing) a write.
    pub(crate) fn require_writable(&self, op: &str) -> PyResult<()> {
        let op = match op {
            "append" => "append",
            "delete" => "delete",
            "compact" => "compact",
            "sync" => "sync",
            other => {
                return Err(PyValueError::new_err(format!(
                    "op must be 'append', 'delete', 'compact' or 'sync', got {other:?}"
                )))
            }
        };
        self.column_read(|c| match c.data() {
            _ if c.validity_stream().is_some() => Err(Error::NullableReadOnly {
                op,
                path: self.path.clone(),
            }),
            Stream::Store(e) => e.check_not_readonly(op),
            _ => Err(Error::ShardedReadOnly {
                op,
                path: self.path.clone(),
            }),
        })
        .py()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.read_engine(|_| Ok(())).is_err()
    }

    /// The record count of each joined store (one entry for a plain store).
    #[getter]
    fn part_lengths(&self) -> PyResult<Vec<u64>> {
        self.source_read(|s| Ok(s.part_lengths())).py()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.read_engine(|e| Ok(e.len() as usize))
    }

    /// Appends dense records given as the raw bytes of a C-contiguous
    /// `(n, *item_shape)` array of the store's dtype.
    fn append_dense(&self, py: Python<'_>, data: PyReadonlyArray1<'_, u8>) -> PyResult<()> {
        let bytes = data
            .as_slice()
            .map_err(|_| PyValueError::new_err("data must be C-contiguous"))?;
        self.with_write(py, |s| s.append_dense(bytes))
    }

    /// Validates and packs ragged records (any iterable of arrays of the
    /// store's dtype, each nonempty) into one owned buffer.
    fn pack(&self, py: Python<'_>, records: &Bound<'_, PyAny>) -> PyResult<PackedRecords> {
        pack::pack(py, self.descr.bind(py), self.dtype, records)
    }

    /// Queues a packed ragged batch (see `pack`) for the writer thread; the
    /// batch object is left empty. Waits while the queue's one slot is
    /// full; raises a pending write error instead of queueing.
    fn submit_packed(slf: &Bound<'_, Self>, batch: &Bound<'_, PackedRecords>) -> PyResult<()> {
        let packed = std::mem::take(&mut *batch.get().lock());
        let store = slf.get();
        let name = format!("RaggedStore '{}'", store.path.display());
        store.writer.submit(slf.py(), slf, packed, &name)
    }

    /// Waits until every queued batch is written; raises the first write
    /// error, if any.
    fn drain_writes(&self, py: Python<'_>) -> PyResult<()> {
        self.writer.drain(py)
    }

    /// Raises the pending write error, if any, without waiting.
    fn raise_pending_write(&self) -> PyResult<()> {
        self.writer.raise_pending()
    }

    /// Refuses later batches and waits for the writer thread to end.
    fn stop_writes(&self, py: Python<'_>) {
        self.writer.stop(py)
    }

    /// Gathers records at `idx`: dense → one `(k, *item_shape)` array,
    /// ragged → a list of arrays.
    fn gather<'py>(
        &self,
        py: Python<'py>,
        idx: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let idx = idx
            .as_slice()
            .map_err(|_| PyValueError::new_err("indices must be contiguous"))?;
        // One call under the lock: the records and, for a nullable column,
        // their validity.
        let (value, valid) = match self.kind {
            Kind::Dense => {
                let (buf, valid) = self.with_read(py, |s| {
                    Ok((
                        s.gather_dense(Indices::from(idx).resolve(s.len())?)?,
                        validity_at(s, idx)?,
                    ))
                })?;
                (self.dense_array(py, buf, Some(idx.len()))?, valid)
            }
            Kind::Ragged => {
                let (batch, valid) = self.with_read(py, |s| {
                    Ok((
                        s.gather_ragged(Indices::from(idx).resolve(s.len())?)?,
                        validity_at(s, idx)?,
                    ))
                })?;
                let values = if self.logical.is_bytes() {
                    self.bytes_values(py, batch)?
                } else {
                    self.ragged_arrays(py, batch)?
                };
                (PyList::new(py, values)?.into_any(), valid)
            }
        };
        match valid {
            Some(v) => self.with_nulls(py, value, v.as_slice()),
            None => Ok(value),
        }
    }

    /// Whether the column has a validity stream (may hold nulls).
    #[getter]
    fn nullable(&self) -> PyResult<bool> {
        self.read_engine(|e| Ok(e.validity().is_some()))
    }

    /// "columnar" for a columnar column (chunks of many values), else
    /// "records".
    #[getter]
    fn layout(&self) -> PyResult<&'static str> {
        self.read_engine(|e| {
            Ok(if e.stored_columnar() {
                "columnar"
            } else {
                "records"
            })
        })
    }

    /// Whether a predicate on the column is cheap to evaluate before the
    /// other columns are read (the core's one rule: columnar, scalar, text
    /// and binary columns).
    #[getter]
    fn cheap(&self) -> PyResult<bool> {
        self.read_engine(|e| Ok(loaderx::arrow::is_cheap(e)))
    }

    /// One record: dense → an `item_shape` array, ragged → one array; a
    /// null record → None.
    fn get<'py>(&self, py: Python<'py>, index: i64) -> PyResult<Bound<'py, PyAny>> {
        let idx = [index];
        let valid = self.with_read(py, |s| validity_at(s, &idx[..]))?;
        if valid.is_some_and(|v| v.as_slice()[0] == 0) {
            return Ok(py.None().into_bound(py));
        }
        match self.kind {
            Kind::Dense => {
                let buf = self.with_read(py, |s| {
                    s.gather_dense(Indices::from(&idx).resolve(s.len())?)
                })?;
                self.dense_array(py, buf, None)
            }
            Kind::Ragged if self.logical.is_bytes() => {
                let batch = self.with_read(py, |s| {
                    s.gather_ragged(Indices::from(&idx).resolve(s.len())?)
                })?;
                Ok(self.bytes_values(py, batch)?.remove(0))
            }
            Kind::Ragged => {
                let batch = self.with_read(py, |s| {
                    s.gather_ragged(Indices::from(&idx).resolve(s.len())?)
                })?;
                Ok(self.ragged_arrays(py, batch)?.remove(0))
            }
        }
    }

    /// Deletes records (swap-last; duplicates delete once).
    fn delete(&self, py: Python<'_>, idx: PyReadonlyArray1<'_, i64>) -> PyResult<()> {
        let idx = idx
            .as_slice()
            .map_err(|_| PyValueError::new_err("indices must be contiguous"))?;
        self.with_write(py, |s| s.delete(idx))
    }

    /// `(records, bytes)` gathered through this handle so far.
    fn read_counters(&self) -> PyResult<(u64, u64)> {
        let c = self.read_engine(|e| Ok(e.read_counters()))?;
        Ok((c.records, c.bytes))
    }

    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        self.with_write(py, |s| s.compact())
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with_write(py, |s| s.sync())
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.read_engine(|e| Ok(e.stats()))?;
        let d = PyDict::new(py);
        d.set_item("records", st.records)?;
        d.set_item("live_bytes", st.live_bytes)?;
        d.set_item("data_bytes", st.data_bytes)?;
        d.set_item("reclaimable", st.reclaimable)?;
        d.set_item("raw_records", st.raw_records)?;
        Ok(d)
    }

    /// Syncs and releases the handle (a read-only one writes nothing);
    /// idempotent. In a forked child it only
    /// marks this process's copy closed (the parent still owns the store).
    pub(crate) fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.in_forked_child() {
            self.child_closed.store(true, Ordering::Release);
            return Ok(());
        }
        // Queued batches are written first (a writer error is the facade's
        // to raise, from drain_writes, before it closes).
        self.writer.stop(py);
        py.detach(|| {
            let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
            self.engine.store(std::ptr::null_mut(), Ordering::Release);
            match guard.take() {
                Some(engine) => engine.close().py(),
                None => Ok(()),
            }
        })
    }

    /// A strided sample of the records' logical bytes for dictionary
    /// training: `(concatenated bytes, sizes)` within `budget` bytes.
    fn dict_sample<'py>(
        &self,
        py: Python<'py>,
        budget: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, Vec<usize>)> {
        let (bytes, sizes) = self.with_read(py, |s| loaderx::sample_store(s, budget))?;
        Ok((PyBytes::new(py, &bytes), sizes))
    }
}

impl Sink for Store {
    /// Appends a packed ragged batch under the exclusive lock; needs no GIL
    /// (the writer thread calls it).
    fn write_packed(&self, packed: &Packed) -> Result<(), Error> {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let column = guard.as_mut().ok_or_else(|| {
            Error::InvalidState(format!("store {} is closed", self.path.display()))
        })?;
        writable(column, &self.path, "write")?.append_ragged(packed)
    }
}
