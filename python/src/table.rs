//! Tables for the Python package: `loaderx.open_table`, `new_shard` and
//! `commit_shards` over `loaderx::table`. Every call that touches the disk
//! runs with the GIL released; each column comes back as a `Store` handle.
//! A commit is the core's whole: shards checked, the lock taken, the
//! manifest replaced atomically.

use std::collections::HashMap;
use std::path::PathBuf;

use loaderx::table::{self, Column, Table, VersionRef};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::IntoPyResult;
use crate::store::Store;

/// `[(name, Store)]`: a table's columns as handles, in order.
type Columns = Vec<(String, Store)>;
/// `[(directory, rows)]`: a sharded table's shards, in order.
type Shards = Vec<(PathBuf, u64)>;
/// What `open_table` returns: columns, shards, version and basis.
type Opened = (Columns, Option<Shards>, Option<u64>, Option<TableBasis>);

/// `[(name, Store)]` of `columns`, in order; on failure every column is
/// closed.
fn handles(py: Python<'_>, columns: Vec<Column>) -> PyResult<Columns> {
    let mut out = Vec::with_capacity(columns.len());
    let mut rest = columns.into_iter();
    for column in rest.by_ref() {
        let name = column.name().to_owned();
        match Store::wrap(py, column) {
            Ok(handle) => out.push((name, handle)),
            Err(e) => {
                for c in rest {
                    let _ = c.close();
                }
                for (_, h) in out {
                    let _ = h.close(py);
                }
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// Which version `version` names: None (the latest), an int or a tag.
fn version_ref(version: Option<&Bound<'_, PyAny>>) -> PyResult<VersionRef> {
    let Some(v) = version else {
        return Ok(VersionRef::Latest);
    };
    if let Ok(name) = v.extract::<String>() {
        return Ok(VersionRef::Tag(name));
    }
    match v.extract::<u64>() {
        Ok(n) if !v.is_instance_of::<pyo3::types::PyBool>() => Ok(VersionRef::Number(n)),
        _ => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "version must be None, a version number (int) or a tag name (str), got {}",
            v.repr()?
        ))),
    }
}

/// What an open of a table in a bucket, or a commit to it, learnt of its
/// latest version (`loaderx::table::Basis`): opaque, passed to the next
/// write planned on that version so that it reads nothing first.
#[pyclass(name = "TableBasis", module = "loaderx._native", frozen)]
pub struct TableBasis {
    pub(crate) inner: table::Basis,
}

#[pymethods]
impl TableBasis {
    /// The version it is of.
    #[getter]
    fn version(&self) -> u64 {
        self.inner.version()
    }

    fn __repr__(&self) -> String {
        format!("TableBasis(version={})", self.inner.version())
    }
}

/// Opens the table at `path` (a local path or a URI with its
/// `storage_options` and optional block cache), plain or sharded (at
/// `version`: None for the latest, an int or a tag): `(columns, shards,
/// version, basis)` with `columns` `[(name, Store)]` in table order,
/// `shards` `[(directory, rows)]` for a sharded table (None for a plain
/// one), the version it opened (None for a plain table) and, for the
/// latest version of a table in a bucket, what the open learnt of it
/// (a `TableBasis`, else None). `to_write`: the handle may commit new
/// versions (`readonly=False`; see `Table::open_to_write`).
#[pyfunction]
#[pyo3(signature = (path, readonly, storage_options=None, cache_dir=None, cache_bytes=None, pinned=None, version=None, view=None, to_write=false))]
#[allow(clippy::too_many_arguments)]
pub fn open_table(
    py: Python<'_>,
    path: String,
    readonly: bool,
    storage_options: Option<HashMap<String, String>>,
    cache_dir: Option<PathBuf>,
    cache_bytes: Option<u64>,
    pinned: Option<Vec<u8>>,
    version: Option<Bound<'_, PyAny>>,
    view: Option<String>,
    to_write: bool,
) -> PyResult<Opened> {
    let want = version_ref(version.as_ref())?;
    let at =
        py.detach(|| crate::remote::location(&path, storage_options, cache_dir, cache_bytes))?;
    let t = py
        .detach(|| match (&pinned, &want) {
            _ if view.is_some() => Table::open_view(&at, view.as_deref().unwrap_or_default()),
            (Some(manifest), _) => Table::open_pinned(&at, manifest),
            (None, VersionRef::Latest) if to_write && at.is_remote() => Table::open_to_write(&at),
            (None, VersionRef::Latest) => Table::open_at(&at, readonly),
            (None, want) => Table::open_version(&at, want),
        })
        .py()?;
    let shards = t
        .shards()
        .map(|s| s.iter().map(|s| (s.dir.clone(), s.rows)).collect());
    let v = t.version();
    let basis = match (v, &pinned, &want) {
        (Some(v), None, VersionRef::Latest) if view.is_none() => table::Basis::opened(&at, v),
        _ => None,
    }
    .map(|inner| TableBasis { inner });
    Ok((handles(py, t.into_columns())?, shards, v, basis))
}

/// The manifest bytes of version `version` (None: the latest) of the
/// sharded table at `path`: what Ray's read tasks pin.
#[pyfunction]
#[pyo3(signature = (path, storage_options=None, version=None))]
pub fn table_manifest(
    py: Python<'_>,
    path: String,
    storage_options: Option<HashMap<String, String>>,
    version: Option<Bound<'_, PyAny>>,
) -> PyResult<Vec<u8>> {
    let want = version_ref(version.as_ref())?;
    crate::remote::on(py, &path, storage_options, |at| {
        table::versions::resolve_at(at, &want).map(|r| r.bytes)
    })
}

/// `[{"version", "timestamp_ms", "operation", "num_rows"}]` of every
/// version of the sharded table at `path`, oldest first.
#[pyfunction]
#[pyo3(signature = (path, storage_options=None))]
pub fn table_versions(
    py: Python<'_>,
    path: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Bound<'_, PyList>> {
    let listed = crate::remote::on(py, &path, storage_options, table::list_versions)?;
    let out = PyList::empty(py);
    for m in listed {
        let d = PyDict::new(py);
        d.set_item("version", m.version())?;
        d.set_item("timestamp_ms", m.timestamp_ms)?;
        d.set_item("operation", m.operation.as_deref().unwrap_or("create"))?;
        d.set_item("num_rows", m.num_rows())?;
        out.append(d)?;
    }
    Ok(out)
}

/// `[(name, version)]` of the tags of the sharded table at `path`.
#[pyfunction]
#[pyo3(signature = (path, storage_options=None))]
pub fn table_tags(
    py: Python<'_>,
    path: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Vec<(String, u64)>> {
    crate::remote::on(py, &path, storage_options, table::tags)
}

/// Tags version `version` (None: the latest) of the sharded table at
/// `path` as `name`; returns the version tagged.
#[pyfunction]
#[pyo3(signature = (path, name, version=None, storage_options=None))]
pub fn table_tag(
    py: Python<'_>,
    path: String,
    name: String,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    crate::remote::on(py, &path, storage_options, |at| {
        table::tag(at, &name, version)
    })
}

/// Removes the tag `name` of the sharded table at `path`.
#[pyfunction]
#[pyo3(signature = (path, name, storage_options=None))]
pub fn table_untag(
    py: Python<'_>,
    path: String,
    name: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<()> {
    crate::remote::on(py, &path, storage_options, |at| table::untag(at, &name))
}

/// The table metadata of version `version` (None: the latest) of the
/// table at `path`, as JSON (`{}` for a plain table).
#[pyfunction]
#[pyo3(signature = (path, version=None, storage_options=None))]
pub fn table_metadata(
    py: Python<'_>,
    path: String,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<String> {
    crate::remote::on(py, &path, storage_options, |at| {
        table::metadata(at, version).map(|m| serde_json::Value::Object(m).to_string())
    })
}

/// Removes old versions of the sharded table at `path` and what only they
/// need (see `loaderx::table::cleanup`); returns the bytes freed.
/// `_leftover_min_age_ms` lowers the hour that dead writers' leftovers are
/// kept at least, `_lease_ttl_ms` the 15 minutes after which a bucket's
/// lease object not rewritten is a dead writer's: for the tests of that
/// reclaim only.
#[pyfunction]
#[pyo3(signature = (path, older_than_ms, keep_last, storage_options=None, _leftover_min_age_ms=None, _lease_ttl_ms=None))]
pub fn table_cleanup(
    py: Python<'_>,
    path: String,
    older_than_ms: u64,
    keep_last: u64,
    storage_options: Option<HashMap<String, String>>,
    _leftover_min_age_ms: Option<u64>,
    _lease_ttl_ms: Option<u64>,
) -> PyResult<u64> {
    crate::remote::on(py, &path, storage_options, |at| {
        if _leftover_min_age_ms.is_none() && _lease_ttl_ms.is_none() {
            return table::cleanup(at, older_than_ms, keep_last);
        }
        let mut leftover = table::Leftovers::default();
        if let Some(ms) = _leftover_min_age_ms {
            leftover.min_age = std::time::Duration::from_millis(ms);
        }
        if let Some(ms) = _lease_ttl_ms {
            leftover.lease_ttl = std::time::Duration::from_millis(ms);
        }
        table::cleanup_leaving(at, older_than_ms, keep_last, leftover)
    })
}

/// The columns of the plain table `path` (all, or those of `names`), typed
/// as its table file records, without the equal-length check.
#[pyfunction]
#[pyo3(signature = (path, readonly=true, names=None))]
pub fn open_columns(
    py: Python<'_>,
    path: PathBuf,
    readonly: bool,
    names: Option<Vec<String>>,
) -> PyResult<Columns> {
    let columns = py
        .detach(|| table::open_columns(&path, readonly, names.as_deref()))
        .py()?;
    handles(py, columns)
}

/// The columnar column in the local directory `path` (holding
/// `column.zc`) as a read-only handle: what `loaderx info`, `stats` and
/// `verify` open there.
#[pyfunction]
pub fn open_columnar(py: Python<'_>, path: PathBuf) -> PyResult<Store> {
    let column = py
        .detach(|| {
            let c = loaderx::columnar::Columnar::open_dir(&path)?;
            let logical = loaderx::columnar::logical_of(c.kind());
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Column::new(name, table::Stream::Columnar(c), logical, None)
        })
        .py()?;
    Store::wrap(py, column)
}

/// Bytes of decoded columnar chunks this process keeps now (within
/// `LOADERX_COLUMN_CACHE`).
#[pyfunction]
pub fn columnar_kept_bytes() -> u64 {
    loaderx::columnar::kept_bytes()
}

/// The column subdirectories of a table directory, sorted.
#[pyfunction]
pub fn column_names(py: Python<'_>, path: PathBuf) -> PyResult<Vec<String>> {
    py.detach(|| table::column_names(&path)).py()
}

/// Whether `path` is a sharded table (holds a manifest).
#[pyfunction]
pub fn is_sharded(py: Python<'_>, path: PathBuf) -> bool {
    py.detach(|| table::is_sharded(&path))
}

/// The checked manifest of the sharded table at `path`: `{"columns": [...],
/// "shards": [{"name": ..., "rows": ...}, ...], "types": {column: "utf8" |
/// "binary"}, "nullable": [...]}`.
#[pyfunction]
pub fn read_manifest(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let m = py.detach(|| table::read_manifest(&path)).py()?;
    let d = PyDict::new(py);
    d.set_item("columns", &m.columns)?;
    let shards = PyList::empty(py);
    for s in &m.shards {
        let e = PyDict::new(py);
        e.set_item("name", &s.name)?;
        e.set_item("rows", s.rows)?;
        shards.append(e)?;
    }
    d.set_item("shards", shards)?;
    let types = PyDict::new(py);
    for (c, l) in &m.types {
        types.set_item(c, l.name())?;
    }
    d.set_item("types", types)?;
    d.set_item("nullable", &m.nullable)?;
    Ok(d)
}

/// Creates a new, empty, uniquely named shard directory inside the table
/// directory `path` (created if needed) and returns its path.
#[pyfunction]
pub fn new_shard(py: Python<'_>, path: PathBuf) -> PyResult<PathBuf> {
    py.detach(|| table::new_shard(&path)).py()
}

/// Appends the shard directories `shards` to the manifest of the table at
/// `path` (see `loaderx::table::commit_shards`); returns the table's rows.
#[pyfunction]
pub fn commit_shards(py: Python<'_>, path: PathBuf, shards: Vec<PathBuf>) -> PyResult<u64> {
    py.detach(|| table::commit_shards(&path, &shards)).py()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open_table, m)?)?;
    m.add_class::<TableBasis>()?;
    m.add_function(wrap_pyfunction!(table_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(table_versions, m)?)?;
    m.add_function(wrap_pyfunction!(table_tags, m)?)?;
    m.add_function(wrap_pyfunction!(table_tag, m)?)?;
    m.add_function(wrap_pyfunction!(table_untag, m)?)?;
    m.add_function(wrap_pyfunction!(table_cleanup, m)?)?;
    m.add_function(wrap_pyfunction!(table_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(open_columns, m)?)?;
    m.add_function(wrap_pyfunction!(column_names, m)?)?;
    m.add_function(wrap_pyfunction!(open_columnar, m)?)?;
    m.add_function(wrap_pyfunction!(columnar_kept_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(is_sharded, m)?)?;
    m.add_function(wrap_pyfunction!(read_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(new_shard, m)?)?;
    m.add_function(wrap_pyfunction!(commit_shards, m)?)?;
    m.add("MANIFEST", table::MANIFEST_FILE)?;
    m.add("MANIFEST_LOCK", table::MANIFEST_LOCK)?;
    m.add("VALIDITY", table::VALIDITY_DIR)?;
    Ok(())
}
