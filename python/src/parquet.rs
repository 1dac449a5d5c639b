//! Parquet export and ingest (`loaderx.parquet`).

use std::path::PathBuf;

use loaderx_parquet::{self as lp, ExportOptions};
use pyo3::prelude::*;

use crate::arrow::Handle;
use crate::errors::IntoPyResult;
use crate::store::Store;

/// Calls the Python progress callback (if any) from native code; a callback
/// error is reported once the native work has finished.
fn reporter(callback: Option<Py<PyAny>>) -> impl FnMut(u64) {
    move |rows| {
        if let Some(cb) = &callback {
            Python::attach(|py| {
                if let Err(e) = cb.call1(py, (rows,)) {
                    e.write_unraisable(py, None);
                }
            });
        }
    }
}

/// Exports streams to one Parquet file; returns `(rows, row_groups)`.
#[pyfunction]
#[pyo3(signature = (stores, names, path, index_column=None, row_group_bytes=None, progress=None, key_value=None))]
#[allow(clippy::too_many_arguments)]
pub fn parquet_export(
    py: Python<'_>,
    stores: Vec<Py<Store>>,
    names: Vec<String>,
    path: PathBuf,
    index_column: Option<String>,
    row_group_bytes: Option<usize>,
    progress: Option<Py<PyAny>>,
    key_value: Option<Vec<(String, String)>>,
) -> PyResult<(u64, usize)> {
    let streams: Vec<(String, Handle)> = names
        .into_iter()
        .zip(stores.into_iter().map(Handle))
        .collect();
    let mut options = ExportOptions::default();
    if let Some(b) = row_group_bytes {
        options.row_group_bytes = b;
    }
    options.key_value = key_value.unwrap_or_default();
    let mut report = reporter(progress);
    let stats = py
        .detach(|| lp::export(streams, &path, index_column, options, &mut report))
        .py()?;
    Ok((stats.rows, stats.row_groups))
}

/// The value of `key` in the Parquet file `path`'s key-value metadata.
#[pyfunction]
pub fn parquet_key_value(py: Python<'_>, path: PathBuf, key: &str) -> PyResult<Option<String>> {
    py.detach(|| lp::key_value(&path, key)).py()
}

/// Ingests a Parquet file into one store per column; returns `[(column, kind)]`.
#[pyfunction]
#[pyo3(signature = (path, root, codec="zstd", dict_bytes=None, progress=None))]
pub fn parquet_ingest(
    py: Python<'_>,
    path: PathBuf,
    root: PathBuf,
    codec: &str,
    dict_bytes: Option<Vec<u8>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Vec<(String, String)>> {
    let codec = crate::store::parse_codec(codec)?;
    let mut report = reporter(progress);
    let made = py
        .detach(|| {
            lp::ingest(
                &path,
                &root,
                codec,
                dict_bytes.as_deref(),
                8192,
                &mut report,
            )
        })
        .py()?;
    Ok(made.into_iter().map(|(n, k)| (n, k.to_string())).collect())
}

/// Rows of a Parquet file, from its footer; `None` for Arrow IPC.
#[pyfunction]
pub fn parquet_rows(py: Python<'_>, path: PathBuf) -> PyResult<Option<u64>> {
    py.detach(|| lp::row_count(&path)).py()
}
