//! Evolving a table for the Python package: a plain table made versioned
//! in place, columns added (`_native.ColumnsWrite`, picklable for Ray's
//! tasks) and dropped, over `loaderx::table`. Every call runs with the GIL
//! released.

use std::collections::HashMap;

use loaderx::arrow as la;
use loaderx::table::{self, ColumnsWrite};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_arrow::input::AnyRecordBatch;

use crate::errors::IntoPyResult;
use crate::remote::location;

/// Turns the plain table at `uri` into a sharded, versioned one in place
/// (its directory becomes the first shard); returns its rows.
#[pyfunction]
#[pyo3(signature = (uri, storage_options=None))]
pub fn make_versioned(
    py: Python<'_>,
    uri: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    crate::remote::on(py, &uri, storage_options, |at| {
        table::make_versioned(at).map(|m| m.num_rows())
    })
}

/// Drops the columns `names` of the sharded table at `uri`, planned on its
/// version `version`; returns the new version.
#[pyfunction]
#[pyo3(signature = (uri, names, version=None, storage_options=None))]
pub fn drop_columns(
    py: Python<'_>,
    uri: String,
    names: Vec<String>,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    crate::remote::on(py, &uri, storage_options, |at| {
        table::drop_columns(at, &names, version).map(|m| m.version())
    })
}

/// Deletes the rows `ids` (record ids of version `version`) of the sharded
/// table at `uri`: `(new version, rows deleted)`.
#[pyfunction]
#[pyo3(signature = (uri, ids, version=None, storage_options=None))]
pub fn delete_rows(
    py: Python<'_>,
    uri: String,
    ids: PyReadonlyArray1<'_, u64>,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<(u64, u64)> {
    let ids = ids.as_slice()?;
    crate::remote::on(py, &uri, storage_options, |at| {
        table::delete_rows(at, version, ids).map(|(m, n)| (m.version(), n))
    })
}

/// Deletes the rows `plan(v)` names (record ids of version `v`: a
/// predicate's evaluation there), starting on version `version`; a
/// conflicting compaction makes the core plan again on the latest version
/// (`loaderx::table::delete_where`). `(new version, rows deleted)`; an
/// exception `plan` raises is raised as it is.
#[pyfunction]
#[pyo3(signature = (uri, plan, version=None, storage_options=None))]
pub fn delete_where(
    py: Python<'_>,
    uri: String,
    plan: Py<PyAny>,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<(u64, u64)> {
    let raised: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
    let mut planned = |v: u64| -> loaderx::Result<Vec<u64>> {
        Python::attach(|py| {
            let ids = plan.call1(py, (v,)).and_then(|ids| {
                Ok(ids
                    .extract::<PyReadonlyArray1<'_, u64>>(py)?
                    .as_slice()?
                    .to_vec())
            });
            ids.map_err(|e| {
                let msg = e.to_string();
                *raised.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                loaderx::Error::InvalidState(msg)
            })
        })
    };
    let result = crate::remote::on(py, &uri, storage_options, |at| {
        table::delete_where(at, version, &mut planned).map(|(m, n)| (m.version(), n))
    });
    if let Some(e) = raised.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    result
}

/// Rewrites the shards of the sharded table at `uri` whose deleted fraction
/// is at least `min_deleted`; the new version, None when none qualifies.
#[pyfunction]
#[pyo3(signature = (uri, min_deleted, storage_options=None))]
pub fn compact(
    py: Python<'_>,
    uri: String,
    min_deleted: f64,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Option<u64>> {
    crate::remote::on(py, &uri, storage_options, |at| {
        table::compact(at, min_deleted).map(|m| m.map(|m| m.version()))
    })
}

/// Saves the rows `ids` of version `version` of the sharded table at `uri`
/// as the view `name` (`replace`: in place of the view of that name):
/// `(version, rows)`.
#[pyfunction]
#[pyo3(signature = (uri, name, ids, version=None, storage_options=None, replace=false))]
pub fn save_view(
    py: Python<'_>,
    uri: String,
    name: String,
    ids: PyReadonlyArray1<'_, u64>,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
    replace: bool,
) -> PyResult<(u64, u64)> {
    let ids = ids.as_slice()?;
    crate::remote::on(py, &uri, storage_options, |at| {
        let view = if replace {
            table::replace_view(at, &name, version, ids)
        } else {
            table::save_view(at, &name, version, ids)
        };
        view.map(|v| (v.version, v.rows))
    })
}

/// Splits version `version` of the sharded table at `uri` into the views
/// `fractions` names (`loaderx::table::split`), saved at once:
/// `[(name, rows)]`.
#[pyfunction]
#[pyo3(signature = (uri, fractions, seed, by=None, version=None, storage_options=None))]
pub fn split(
    py: Python<'_>,
    uri: String,
    fractions: Vec<(String, f64)>,
    seed: u64,
    by: Option<String>,
    version: Option<u64>,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Vec<(String, u64)>> {
    crate::remote::on(py, &uri, storage_options, |at| {
        table::split(at, version, &fractions, seed, by.as_deref())
            .map(|views| views.into_iter().map(|v| (v.name, v.rows)).collect())
    })
}

/// `[(name, version, rows)]` of the views of the sharded table at `uri`.
#[pyfunction]
#[pyo3(signature = (uri, storage_options=None))]
pub fn list_views(
    py: Python<'_>,
    uri: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Vec<(String, u64, u64)>> {
    crate::remote::on(py, &uri, storage_options, |at| {
        table::list_views(at).map(|vs| {
            vs.into_iter()
                .map(|v| (v.name, v.version, v.rows))
                .collect()
        })
    })
}

/// Removes the view `name` of the sharded table at `uri`.
#[pyfunction]
#[pyo3(signature = (uri, name, storage_options=None))]
pub fn drop_view(
    py: Python<'_>,
    uri: String,
    name: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<()> {
    crate::remote::on(py, &uri, storage_options, |at| table::drop_view(at, &name))
}

/// New columns for every shard of the sharded table at `uri`, planned on
/// its version `version` (`loaderx::table::ColumnsWrite`): one group per
/// shard, written by any process, then one commit.
#[pyclass(name = "ColumnsWrite", module = "loaderx._native", frozen)]
pub struct ColumnsWriteHandle {
    inner: ColumnsWrite,
    uri: String,
    options: Option<HashMap<String, String>>,
}

#[pymethods]
impl ColumnsWriteHandle {
    #[new]
    #[pyo3(signature = (uri, storage_options=None, version=None, basis=None))]
    fn new(
        py: Python<'_>,
        uri: String,
        storage_options: Option<HashMap<String, String>>,
        version: Option<u64>,
        basis: Option<PyRef<'_, crate::table::TableBasis>>,
    ) -> PyResult<Self> {
        let at = location(&uri, storage_options.clone(), None, None)?;
        let basis = basis.map(|b| b.inner.clone());
        let inner = py
            .detach(|| ColumnsWrite::begin_on(&at, version, basis.as_ref()))
            .py()?;
        Ok(ColumnsWriteHandle {
            inner,
            uri,
            options: storage_options,
        })
    }

    /// The write `token` begun elsewhere on version `version` (what
    /// unpickling calls); `editing`: an edit's (its groups hold columns the
    /// table has).
    #[staticmethod]
    #[pyo3(signature = (uri, storage_options, version, token, editing=false))]
    fn _resume(
        py: Python<'_>,
        uri: String,
        storage_options: Option<HashMap<String, String>>,
        version: u64,
        token: String,
        editing: bool,
    ) -> PyResult<Self> {
        let at = location(&uri, storage_options.clone(), None, None)?;
        let inner = py
            .detach(|| {
                if editing {
                    ColumnsWrite::resume_editing(&at, version, &token)
                } else {
                    ColumnsWrite::resume(&at, Some(version), &token)
                }
            })
            .py()?;
        Ok(ColumnsWriteHandle {
            inner,
            uri,
            options: storage_options,
        })
    }

    /// An edit of rows (`Table.update`) planned on version `version`:
    /// groups of new values of columns the table has, in the shards it
    /// touches only.
    #[staticmethod]
    #[pyo3(signature = (uri, storage_options=None, version=None))]
    fn editing(
        py: Python<'_>,
        uri: String,
        storage_options: Option<HashMap<String, String>>,
        version: Option<u64>,
    ) -> PyResult<Self> {
        let at = location(&uri, storage_options.clone(), None, None)?;
        let inner = py.detach(|| ColumnsWrite::editing(&at, version)).py()?;
        Ok(ColumnsWriteHandle {
            inner,
            uri,
            options: storage_options,
        })
    }

    /// `{column: "records" | "columnar"}` of the version planned on.
    fn layouts(&self) -> HashMap<String, &'static str> {
        self.inner.layouts().into_iter().collect()
    }

    /// Commits an edit's groups as one version; `edited` maps each edited
    /// shard to the positions among its live rows that changed (uint64,
    /// ascending). Returns the version.
    fn commit_edit(
        &self,
        py: Python<'_>,
        edited: HashMap<usize, PyReadonlyArray1<'_, u64>>,
        operation: &str,
    ) -> PyResult<u64> {
        let edited: std::collections::BTreeMap<usize, Vec<u64>> = edited
            .into_iter()
            .map(|(i, rows)| Ok((i, rows.as_slice()?.to_vec())))
            .collect::<PyResult<_>>()?;
        py.detach(|| {
            self.inner
                .commit_edit(&edited, operation)
                .map(|m| m.version())
        })
        .py()
    }

    /// Commits a merge (`Table.merge_insert`) as one version: the groups
    /// written (`edited` as for `commit_edit`), the rows `delete` (record
    /// ids of the version planned on) deleted, and `insert`'s shards
    /// (a `TableWrite` and the names of its shards) appended. Returns the
    /// version.
    #[pyo3(signature = (edited, delete, insert=None))]
    fn commit_merge(
        &self,
        py: Python<'_>,
        edited: HashMap<usize, PyReadonlyArray1<'_, u64>>,
        delete: PyReadonlyArray1<'_, u64>,
        insert: Option<(PyRef<'_, crate::write::TableWriteHandle>, Vec<String>)>,
    ) -> PyResult<u64> {
        let edited: std::collections::BTreeMap<usize, Vec<u64>> = edited
            .into_iter()
            .map(|(i, rows)| Ok((i, rows.as_slice()?.to_vec())))
            .collect::<PyResult<_>>()?;
        let delete = delete.as_slice()?.to_vec();
        let insert = insert
            .as_ref()
            .map(|(w, names)| (w.write(), names.as_slice()));
        py.detach(|| {
            self.inner
                .commit_merge(&edited, &delete, insert)
                .map(|m| m.version())
        })
        .py()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let resume = slf.get_type().getattr("_resume")?;
        let args = (
            me.uri.clone(),
            me.options.clone(),
            me.inner.base().version(),
            me.inner.token().to_owned(),
            me.inner.is_edit(),
        )
            .into_pyobject(py)?;
        PyTuple::new(py, [resume.into_any(), args.into_any()])
    }

    /// The version the write is planned on.
    #[getter]
    fn version(&self) -> u64 {
        self.inner.base().version()
    }

    /// `[(shard name, rows, live rows)]` of the version planned on, in
    /// table order.
    fn shards(&self) -> Vec<(String, u64, u64)> {
        self.inner
            .base()
            .shards
            .iter()
            .map(|s| (s.name.clone(), s.rows, s.live_rows()))
            .collect()
    }

    /// The deleted rows of shard `shard` (uint64, ascending).
    fn deleted<'py>(&self, py: Python<'py>, shard: usize) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let rows = py.detach(|| self.inner.deleted(shard)).py()?;
        Ok(PyArray1::from_vec(py, rows))
    }

    /// Writes the Arrow streams `sources`, in order, as the new columns of
    /// shard `shard`: values of its live rows, laid over its deleted rows
    /// too (`loaderx::arrow::spread_over_deleted`) when it has any.
    #[pyo3(signature = (shard, sources, codec, layout=None))]
    fn write_group(
        &self,
        py: Python<'_>,
        shard: usize,
        sources: Vec<AnyRecordBatch>,
        codec: &str,
        layout: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let codec = crate::store::parse_codec(codec)?;
        let layouts = crate::write::parse_layouts(layout.as_ref())?;
        let readers = sources
            .into_iter()
            .map(|s| s.into_reader())
            .collect::<PyResult<Vec<_>>>()?;
        py.detach(|| la::write_group(&self.inner, shard, readers, codec, &layouts))
            .py()
    }

    /// Writes the Arrow streams `sources`, in order, as the patch of shard
    /// `shard`: new values of records columns of its live rows `rows`
    /// (uint64, strictly increasing positions among them), those rows only.
    fn write_patch(
        &self,
        py: Python<'_>,
        shard: usize,
        sources: Vec<AnyRecordBatch>,
        codec: &str,
        rows: PyReadonlyArray1<'_, u64>,
    ) -> PyResult<()> {
        let codec = crate::store::parse_codec(codec)?;
        let rows = rows.as_slice()?.to_vec();
        let readers = sources
            .into_iter()
            .map(|s| s.into_reader())
            .collect::<PyResult<Vec<_>>>()?;
        py.detach(|| la::write_patch(&self.inner, shard, readers, codec, &rows))
            .py()
    }

    /// Writes `source` (an Arrow stream of the new columns of every live
    /// row, in row order) as every shard's new column group, cut at the
    /// shards' boundaries in the core (`loaderx::arrow::write_groups`) and
    /// written on `workers` threads.
    #[pyo3(signature = (source, codec, layout=None, workers=1))]
    fn write_groups(
        &self,
        py: Python<'_>,
        source: AnyRecordBatch,
        codec: &str,
        layout: Option<Bound<'_, PyAny>>,
        workers: usize,
    ) -> PyResult<()> {
        let codec = crate::store::parse_codec(codec)?;
        let layouts = crate::write::parse_layouts(layout.as_ref())?;
        let reader = source.into_reader()?;
        py.detach(|| la::write_groups(&self.inner, reader, codec, &layouts, workers))
            .py()
    }

    /// Commits the new columns of every shard as one version; returns it.
    fn commit(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.commit().map(|m| m.version())).py()
    }

    /// What the commit learnt of the version it made (a `TableBasis`;
    /// None before the commit, for a local table, or when the server named
    /// no version).
    fn committed_basis(&self) -> Option<crate::table::TableBasis> {
        self.inner
            .committed_basis()
            .map(|inner| crate::table::TableBasis { inner })
    }

    /// Removes what this write made, unless it was committed.
    fn discard(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.discard()).py()
    }

    fn __repr__(&self) -> String {
        format!(
            "ColumnsWrite({:?}, version={})",
            self.uri,
            self.inner.base().version()
        )
    }
}

/// For each of `target`'s keys, the place of the same key in `source`
/// (-1 where it lacks it), and the first key `source` repeats (None when
/// none): the lookup behind the edits by key, without the GIL.
#[pyfunction]
pub fn key_index<'py>(
    py: Python<'py>,
    target: PyReadonlyArray1<'py, i64>,
    source: PyReadonlyArray1<'py, i64>,
) -> PyResult<(Bound<'py, PyArray1<i64>>, Option<i64>)> {
    let target = target.as_slice().map_err(|_| {
        pyo3::exceptions::PyValueError::new_err("target keys must be a contiguous int64 array")
    })?;
    let source = source.as_slice().map_err(|_| {
        pyo3::exceptions::PyValueError::new_err("source keys must be a contiguous int64 array")
    })?;
    match py.detach(|| table::key_index(target, source)) {
        Ok(index) => Ok((PyArray1::from_vec(py, index), None)),
        Err(key) => Ok((PyArray1::from_vec(py, Vec::new()), Some(key))),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ColumnsWriteHandle>()?;
    m.add_function(wrap_pyfunction!(key_index, m)?)?;
    m.add_function(wrap_pyfunction!(make_versioned, m)?)?;
    m.add_function(wrap_pyfunction!(drop_columns, m)?)?;
    m.add_function(wrap_pyfunction!(delete_rows, m)?)?;
    m.add_function(wrap_pyfunction!(delete_where, m)?)?;
    m.add_function(wrap_pyfunction!(compact, m)?)?;
    m.add_function(wrap_pyfunction!(save_view, m)?)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(list_views, m)?)?;
    m.add_function(wrap_pyfunction!(drop_view, m)?)?;
    Ok(())
}
