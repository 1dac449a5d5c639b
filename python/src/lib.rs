//! `loaderx._native`: the private extension module behind the `loaderx`
//! Python package. Its API is internal; the package's modules are the public
//! surface.

mod arrays;
mod arrow;
mod errors;
mod evolve;
mod image;
mod loader;
mod mixture;
mod pack;
mod parquet;
mod remote;
mod sampler;
#[cfg(feature = "sql")]
mod sql;
mod store;
mod table;
mod write;
mod writer;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPyResult;

/// Trains a zstd dictionary on concatenated samples.
#[pyfunction]
fn train_dict<'py>(
    py: Python<'py>,
    samples: Vec<u8>,
    sizes: Vec<usize>,
    tier: &str,
) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
    let tier = loaderx::dict::tier(tier).py()?;
    let dict = py
        .detach(|| loaderx::dict::train(&samples, &sizes, tier))
        .py()?;
    Ok(pyo3::types::PyBytes::new(py, &dict))
}

/// One tier by name: `(dict_size, sample_bytes)`; ValueError naming the
/// tiers for any other name.
#[pyfunction]
fn dict_tier(tier: &str) -> PyResult<(usize, usize)> {
    let t = loaderx::dict::tier(tier).py()?;
    Ok((t.dict_size, t.sample_bytes))
}

/// The dictionary tiers: name → (dict_size, sample_bytes).
fn dict_tiers(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for t in loaderx::dict::DICT_TIERS {
        d.set_item(t.name, (t.dict_size, t.sample_bytes))?;
    }
    Ok(d)
}

/// `{column: (type, nullable)}`: the column types a table directory's
/// `table.json` records (empty without one); type is "tensor", "utf8" or
/// "binary".
#[pyfunction]
fn table_types(py: Python<'_>, dir: std::path::PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let types = loaderx::table::read_types(&dir).py()?;
    let d = PyDict::new(py);
    for (name, t) in types {
        d.set_item(name, (t.logical.name(), t.nullable))?;
    }
    Ok(d)
}

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<store::Store>()?;
    m.add_class::<store::PackedRecords>()?;
    m.add_class::<arrays::GatherBuffer>()?;
    m.add_class::<sampler::Sampler>()?;
    m.add_class::<loader::Loader>()?;
    image::register(m)?;
    m.add_function(wrap_pyfunction!(loader::parse_state, m)?)?;
    m.add_function(wrap_pyfunction!(pack::pack, m)?)?;
    m.add_function(wrap_pyfunction!(mixture::mix_counts, m)?)?;
    m.add_function(wrap_pyfunction!(mixture::source_seed, m)?)?;
    m.add_function(wrap_pyfunction!(sampler::record_seeds, m)?)?;
    m.add_function(wrap_pyfunction!(train_dict, m)?)?;
    m.add_function(wrap_pyfunction!(dict_tier, m)?)?;
    m.add_function(wrap_pyfunction!(table_types, m)?)?;
    table::register(m)?;
    remote::register(m)?;
    write::register(m)?;
    evolve::register(m)?;
    m.add_function(wrap_pyfunction!(arrow::arrow_field, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::arrow_stream, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::arrow_gather, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::table_scan, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::arrow_chunks, m)?)?;
    m.add_class::<arrow::BatchReader>()?;
    m.add_class::<arrow::ArrayReader>()?;
    m.add_function(wrap_pyfunction!(arrow::arrow_append, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::arrow_ingest, m)?)?;
    m.add("DICT_TIERS", dict_tiers(m.py())?)?;
    m.add("MIN_DICT_SAMPLE_BYTES", loaderx::dict::MIN_SAMPLE_BYTES)?;
    m.add("BATCH_BYTES", loaderx::arrow::DEFAULT_BATCH_BYTES)?;
    m.add("FILTER_ROWS", loaderx::arrow::FILTER_ROWS)?;
    m.add_function(wrap_pyfunction!(parquet::parquet_export, m)?)?;
    m.add_function(wrap_pyfunction!(parquet::parquet_key_value, m)?)?;
    m.add_function(wrap_pyfunction!(parquet::parquet_ingest, m)?)?;
    m.add_function(wrap_pyfunction!(parquet::parquet_rows, m)?)?;
    #[cfg(feature = "sql")]
    {
        m.add_function(wrap_pyfunction!(sql::sql, m)?)?;
        m.add_class::<sql::FfiTableProvider>()?;
    }
    m.add("HAS_SQL", cfg!(feature = "sql"))?;
    Ok(())
}
