//! The write path for the Python package: `loaderx.ingest_sharded` and Ray's
//! datasink hand their shards to the core's [`TableWrite`], which names,
//! checks, uploads, commits and cleans up. Every call runs with the GIL
//! released.

use std::collections::HashMap;
use std::path::PathBuf;

use loaderx::arrow as la;
use loaderx::table::{ColumnLayout, Layouts, TableWrite, WriteMode, WrittenShard};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_arrow::input::AnyRecordBatch;

use crate::errors::IntoPyResult;
use crate::remote::location;

/// The layouts `layout=` asks for: None, "columnar", "records" or a dict
/// of column name to one of those.
pub(crate) fn parse_layouts(layout: Option<&Bound<'_, PyAny>>) -> PyResult<Layouts> {
    let bad = |got: &Bound<'_, PyAny>| -> PyResult<PyErr> {
        Ok(pyo3::exceptions::PyValueError::new_err(format!(
            "layout must be None, 'columnar', 'records' or a dict of column name to 'columnar' or 'records', got {}",
            got.repr()?
        )))
    };
    let one = |v: &Bound<'_, PyAny>| -> PyResult<ColumnLayout> {
        match v
            .extract::<String>()
            .ok()
            .and_then(|s| ColumnLayout::from_name(&s))
        {
            Some(l) => Ok(l),
            None => Err(bad(v)?),
        }
    };
    let mut out = Layouts::default();
    let Some(layout) = layout.filter(|l| !l.is_none()) else {
        return Ok(out);
    };
    if let Ok(d) = layout.cast::<pyo3::types::PyDict>() {
        for (k, v) in d.iter() {
            let Ok(name) = k.extract::<String>() else {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "layout's keys must be column names (str), got {}",
                    k.repr()?
                )));
            };
            out.columns.insert(name, one(&v)?);
        }
        return Ok(out);
    }
    out.all = Some(one(layout)?);
    Ok(out)
}

fn mode(create: bool) -> WriteMode {
    if create {
        WriteMode::Create
    } else {
        WriteMode::Append
    }
}

/// A write of shards to the table at `uri` (a new one with `create`, else
/// shards appended), picklable so that Ray's write tasks on any node write
/// shards of the same write: `loaderx::table::TableWrite`.
#[pyclass(name = "TableWrite", module = "loaderx._native", frozen)]
pub struct TableWriteHandle {
    inner: TableWrite,
    uri: String,
    options: Option<HashMap<String, String>>,
    create: bool,
    /// `layout=` as given (pickled with the write) and resolved against
    /// the table.
    layout: Py<PyAny>,
    layouts: Layouts,
}

impl TableWriteHandle {
    /// The core's write.
    pub(crate) fn write(&self) -> &TableWrite {
        &self.inner
    }
}

#[pymethods]
impl TableWriteHandle {
    #[new]
    #[pyo3(signature = (uri, storage_options=None, create=true, layout=None))]
    fn new(
        py: Python<'_>,
        uri: String,
        storage_options: Option<HashMap<String, String>>,
        create: bool,
        layout: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let asked = parse_layouts(layout.as_ref())?;
        let at = location(&uri, storage_options.clone(), None, None)?;
        let (inner, layouts) = py
            .detach(|| {
                let w = TableWrite::begin(&at, mode(create))?;
                let l = w.layouts(&asked)?;
                Ok((w, l))
            })
            .py()?;
        Ok(TableWriteHandle {
            inner,
            uri,
            options: storage_options,
            create,
            layout: layout.map_or_else(|| py.None(), Bound::unbind),
            layouts,
        })
    }

    /// The write `token` begun elsewhere (what unpickling calls).
    #[staticmethod]
    #[pyo3(signature = (uri, storage_options, create, token, existed, layout=None))]
    fn _resume(
        py: Python<'_>,
        uri: String,
        storage_options: Option<HashMap<String, String>>,
        create: bool,
        token: &str,
        existed: bool,
        layout: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let asked = parse_layouts(layout.as_ref())?;
        let at = location(&uri, storage_options.clone(), None, None)?;
        let inner = TableWrite::resume(&at, mode(create), token, existed).py()?;
        let layouts = py.detach(|| inner.layouts(&asked)).py()?;
        Ok(TableWriteHandle {
            inner,
            uri,
            options: storage_options,
            create,
            layout: layout.map_or_else(|| py.None(), Bound::unbind),
            layouts,
        })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let resume = slf.get_type().getattr("_resume")?;
        let args = (
            me.uri.clone(),
            me.options.clone(),
            me.create,
            me.inner.token().to_owned(),
            me.inner.existed(),
            me.layout.clone_ref(py),
        )
            .into_pyobject(py)?;
        PyTuple::new(py, [resume.into_any(), args.into_any()])
    }

    #[getter]
    fn token(&self) -> &str {
        self.inner.token()
    }

    /// Writes the Arrow streams `sources`, in order, as one shard (each
    /// column's store decided over every stream's schema, as Ray's blocks
    /// need: `loaderx::arrow::ingest_streams`); returns `(name, rows)`.
    fn write_streams(
        &self,
        py: Python<'_>,
        sources: Vec<AnyRecordBatch>,
        codec: &str,
    ) -> PyResult<(String, u64)> {
        let codec = crate::store::parse_codec(codec)?;
        let readers = sources
            .into_iter()
            .map(|s| s.into_reader())
            .collect::<PyResult<Vec<_>>>()?;
        let (shard, _) = py
            .detach(|| {
                self.inner.write_shard(|dir| {
                    la::ingest_streams(readers, dir, codec, None, &self.layouts, false, &mut |_| {})
                })
            })
            .py()?;
        Ok((shard.name, shard.rows))
    }

    /// The column order a new table keeps (its source's).
    fn keep_order(&self, names: Vec<String>) {
        self.inner.keep_order(names)
    }

    /// Commits this write's shards `names`, in order; returns the table's
    /// rows. On error this write's shards are removed.
    fn commit(&self, py: Python<'_>, names: Vec<String>) -> PyResult<u64> {
        py.detach(|| self.inner.commit(&names)).py()
    }

    /// Removes what this write left uncommitted; returns the shards removed.
    fn discard(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        py.detach(|| self.inner.discard()).py()
    }

    fn __repr__(&self) -> String {
        format!("TableWrite({:?})", self.uri)
    }
}

/// Ingests `sources` into the table at `uri` (new, or sharded: the shards
/// are appended) on `workers` threads and commits them at once: a Parquet
/// file (`parquet`, split by row groups into `shards`), several Arrow
/// streams (one shard each), or one stream cut into runs of `run_bytes`.
/// With `base`, the rows were made for that version (`Table.append`'s):
/// a concurrent change of columns is a `CommitConflict`; `metadata` (a JSON
/// object, or a callable returning one once every row is read) is set in
/// the table metadata of the version committed. Returns the
/// table's rows; on error nothing is committed or left.
#[pyfunction]
#[pyo3(signature = (uri, storage_options, codec, dict_bytes, workers, shards=None, parquet=None, sources=None, run_bytes=None, layout=None, base=None, metadata=None))]
#[allow(clippy::too_many_arguments)]
pub fn ingest_sharded(
    py: Python<'_>,
    uri: String,
    storage_options: Option<HashMap<String, String>>,
    codec: &str,
    dict_bytes: Option<Vec<u8>>,
    workers: usize,
    shards: Option<usize>,
    parquet: Option<PathBuf>,
    sources: Option<Vec<AnyRecordBatch>>,
    run_bytes: Option<usize>,
    layout: Option<Bound<'_, PyAny>>,
    base: Option<u64>,
    metadata: Option<Py<PyAny>>,
) -> PyResult<u64> {
    let codec = crate::store::parse_codec(codec)?;
    let asked = parse_layouts(layout.as_ref())?;
    let at = location(&uri, storage_options, None, None)?;
    let readers = sources
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.into_reader())
        .collect::<PyResult<Vec<_>>>()?;
    py.detach(|| {
        let mut write = TableWrite::begin(&at, WriteMode::Append)?;
        if let Some(version) = base {
            // The rows were made for that version (a table handle's).
            if let Err(e) = write.plan_on(version) {
                let _ = write.discard();
                return Err(e);
            }
        }
        if let Some(r) = readers.first() {
            // A new table keeps the source's column order.
            write.keep_order(
                r.schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect(),
            );
        }
        let dict = dict_bytes.as_deref();
        let written: loaderx::Result<Vec<WrittenShard>> =
            write.layouts(&asked).and_then(|layouts| match &parquet {
                Some(path) => loaderx_parquet::ingest_sharded(
                    &write, path, shards, workers, codec, dict, &layouts,
                ),
                None => {
                    la::ingest_shards(&write, readers, run_bytes, workers, codec, dict, &layouts)
                }
            });
        let names: Vec<String> = match written {
            Ok(w) => w.into_iter().map(|s| s.name).collect(),
            Err(e) => {
                let _ = write.discard();
                return Err(e);
            }
        };
        if let Some(f) = &metadata {
            // Asked for now that every row is read (a callable may say
            // what the reading found).
            match Python::attach(|py| metadata_of(py, f)) {
                Ok(m) => m.into_iter().for_each(|(k, v)| write.set_metadata(&k, v)),
                Err(e) => {
                    let _ = write.discard();
                    return Err(loaderx::Error::InvalidValue(e.to_string()));
                }
            }
        }
        write.commit(&names)
    })
    .py()
}

/// The table metadata `f` gives: a JSON object, or a callable returning one.
fn metadata_of(
    py: Python<'_>,
    f: &Py<PyAny>,
) -> PyResult<serde_json::Map<String, serde_json::Value>> {
    let f = f.bind(py);
    let text: String = if f.is_callable() {
        f.call0()?.extract()?
    } else {
        f.extract()?
    };
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "metadata must be a JSON object, got {text:?}"
        ))),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TableWriteHandle>()?;
    m.add_function(wrap_pyfunction!(ingest_sharded, m)?)?;
    Ok(())
}
