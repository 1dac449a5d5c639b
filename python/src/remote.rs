//! Remote locations for the Python package: `storage_options` and the
//! block cache turned into a [`Location`], `copy_table`, the remote shard
//! commit and the process's remote read counters. Every call that touches
//! a location runs with the GIL released.

use std::collections::HashMap;
use std::path::PathBuf;

use loaderx::{CacheOptions, Location};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{to_py, IntoPyResult};

/// `storage_options` as the core takes them (sorted, so messages and
/// clients are the same from run to run).
pub fn options(storage_options: Option<HashMap<String, String>>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = storage_options.unwrap_or_default().into_iter().collect();
    out.sort();
    out
}

/// The location `path` (a local path or a URI) with its options and cache.
pub fn location(
    path: &str,
    storage_options: Option<HashMap<String, String>>,
    cache_dir: Option<PathBuf>,
    cache_bytes: Option<u64>,
) -> PyResult<Location> {
    let cache = match (cache_dir, cache_bytes) {
        (Some(dir), Some(bytes)) => Some(CacheOptions { dir, bytes }),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "cache_dir and cache_bytes go together",
            ))
        }
    };
    Location::parse_cached(path, &options(storage_options), cache.as_ref()).py()
}

/// Runs `f` on the location `uri` (with `storage_options`) with the GIL
/// released: one call of the native table API.
pub fn on<T: Send>(
    py: Python<'_>,
    uri: &str,
    storage_options: Option<HashMap<String, String>>,
    f: impl FnOnce(&Location) -> loaderx::Result<T> + Send,
) -> PyResult<T> {
    py.detach(|| {
        let at = location(uri, storage_options, None, None)?;
        f(&at).py()
    })
}

/// Copies the table at `src` to `dst` (see `loaderx::table::copy_table`);
/// `progress(done, total)` is called with bytes as they land, and an
/// exception it raises stops the copy. Returns the bytes copied.
#[pyfunction]
#[pyo3(signature = (src, dst, storage_options=None, progress=None))]
pub fn copy_table(
    py: Python<'_>,
    src: String,
    dst: String,
    storage_options: Option<HashMap<String, String>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<u64> {
    let src = location(&src, storage_options.clone(), None, None)?;
    let dst = location(&dst, storage_options, None, None)?;
    let raised: std::sync::Mutex<Option<PyErr>> = std::sync::Mutex::new(None);
    let report = |done: u64, total: u64| -> loaderx::Result<()> {
        let Some(cb) = &progress else {
            return Ok(());
        };
        Python::attach(|py| match cb.call1(py, (done, total)) {
            Ok(_) => Ok(()),
            Err(e) => {
                let msg = e.to_string();
                *raised.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                Err(loaderx::Error::InvalidState(msg))
            }
        })
    };
    let result = py.detach(|| loaderx::table::copy_table(&src, &dst, &report));
    if let Some(e) = raised.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    result.map_err(to_py)
}

/// Uploads the local file `local` as the object `uri` (one request, or a
/// multipart upload for a large file); returns its size.
#[pyfunction]
#[pyo3(signature = (local, uri, storage_options=None))]
pub fn upload_file(
    py: Python<'_>,
    local: PathBuf,
    uri: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<u64> {
    let at = location(&uri, storage_options, None, None)?;
    py.detach(|| at.upload_file(&local)).py()
}

/// The size of the file or object `uri`, None when there is none.
#[pyfunction]
#[pyo3(signature = (uri, storage_options=None))]
pub fn file_size(
    py: Python<'_>,
    uri: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Option<u64>> {
    let at = location(&uri, storage_options, None, None)?;
    py.detach(|| at.file_size()).py()
}

/// The bytes of the file `name` directly inside `path` (a table's
/// `manifest.json`), None when there is none.
#[pyfunction]
#[pyo3(signature = (path, name, storage_options=None))]
pub fn read_table_file<'py>(
    py: Python<'py>,
    path: String,
    name: String,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<Option<Bound<'py, pyo3::types::PyBytes>>> {
    let at = location(&path, storage_options, None, None)?;
    let bytes = py.detach(|| at.read_file(&name)).py()?;
    Ok(bytes.map(|b| pyo3::types::PyBytes::new(py, &b)))
}

/// Whether `path` names a remote location (a URI whose scheme is not
/// `file`).
#[pyfunction]
pub fn is_remote(path: &str) -> bool {
    Location::is_remote_uri(path)
}

/// This process's remote read counters: requests (hedges among them),
/// bytes, cache hits and misses (blocks), retries.
#[pyfunction]
pub fn remote_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = loaderx::remote_stats();
    let d = PyDict::new(py);
    d.set_item("requests", s.requests)?;
    d.set_item("hedges", s.hedges)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("cache_hits", s.cache_hits)?;
    d.set_item("cache_misses", s.cache_misses)?;
    d.set_item("retries", s.retries)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(copy_table, m)?)?;
    m.add_function(wrap_pyfunction!(is_remote, m)?)?;
    m.add_function(wrap_pyfunction!(upload_file, m)?)?;
    m.add_function(wrap_pyfunction!(file_size, m)?)?;
    m.add_function(wrap_pyfunction!(read_table_file, m)?)?;
    m.add_function(wrap_pyfunction!(remote_stats, m)?)?;
    m.add("CACHE_BLOCK", loaderx::CACHE_BLOCK)?;
    Ok(())
}
