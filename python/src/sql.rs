//! SQL over stores: an embedded DataFusion session (`loaderx.sql`) and the
//! `__datafusion_table_provider__` capsule for datafusion-python.

use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use loaderx_datafusion::{Options, StoreTable};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use pyo3_arrow::PyTable;

use crate::arrow::Handle;
use crate::errors::{is_os_error, wrapped, IntoPyResult};
use crate::store::Store;

static RUNTIME: loaderx::executor::PerProcess<tokio::runtime::Runtime> =
    loaderx::executor::PerProcess::new();

/// The tokio runtime of this process. Like the store worker pool it is
/// fork-aware: a child builds its own instead of waiting on its parent's
/// (absent) threads.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    RUNTIME.get_or_try_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(loaderx::executor::budget())
            .thread_name("loaderx-sql")
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("starting the SQL runtime: {e}")))
    })
}

/// Maps a DataFusion error to the exception a user expects: the loaderx
/// error or OS error it wraps (at any depth) keeps its class.
pub fn df_error(e: DataFusionError) -> PyErr {
    match e {
        DataFusionError::Context(msg, inner) => {
            let err = df_error(*inner);
            if is_os_error(&err) {
                // Keep errno and filename (the message names the file).
                return err;
            }
            Python::attach(|py| {
                let text = format!("{msg}: {}", err.value(py));
                PyErr::from_type(err.get_type(py), text)
            })
        }
        other => match wrapped(&other) {
            Some(err) => err,
            None => match other {
                DataFusionError::External(inner) => PyValueError::new_err(inner.to_string()),
                DataFusionError::IoError(io) => PyOSError::new_err(io.to_string()),
                other => PyValueError::new_err(format!("SQL: {other}")),
            },
        },
    }
}

type TableSpec = (String, Vec<Py<Store>>, Vec<String>, Option<String>);

fn build(
    stores: Vec<Py<Store>>,
    names: Vec<String>,
    index_column: Option<String>,
    pushdown: bool,
) -> PyResult<StoreTable<Handle>> {
    let streams = names
        .into_iter()
        .zip(stores.into_iter().map(Handle))
        .collect();
    let options = Options {
        pushdown,
        ..Options::default()
    };
    StoreTable::try_new(streams, index_column, options).py()
}

/// Runs `query` over the given tables (`(name, stores, stream names,
/// index column)`), returning the whole result as an Arrow table.
#[pyfunction]
#[pyo3(signature = (query, tables, pushdown=true, arrow_tables=Vec::new()))]
pub fn sql(
    py: Python<'_>,
    query: &str,
    tables: Vec<TableSpec>,
    pushdown: bool,
    arrow_tables: Vec<(String, PyTable)>,
) -> PyResult<PyTable> {
    let ctx = SessionContext::new();
    for (name, stores, names, index) in tables {
        let table = build(stores, names, index, pushdown)?;
        ctx.register_table(name.as_str(), Arc::new(table))
            .map_err(df_error)?;
    }
    // Arrow data held in memory (a provenance table, say), as it is.
    for (name, table) in arrow_tables {
        let (batches, schema) = table.into_inner();
        let table =
            datafusion::datasource::MemTable::try_new(schema, vec![batches]).map_err(df_error)?;
        ctx.register_table(name.as_str(), Arc::new(table))
            .map_err(df_error)?;
    }
    let rt = runtime()?;
    let (batches, schema) = py
        .detach(|| {
            rt.block_on(async {
                let df = ctx.sql(query).await?;
                let schema = Arc::new(df.schema().as_arrow().clone());
                let batches = df.collect().await?;
                Ok::<_, DataFusionError>((batches, schema))
            })
        })
        .map_err(df_error)?;
    let schema = batches.first().map(|b| b.schema()).unwrap_or(schema);
    PyTable::try_new(batches, schema)
}

/// A table of streams for datafusion-python's `SessionContext.register_table`.
#[pyclass(frozen, module = "loaderx._native")]
pub struct FfiTableProvider {
    table: Arc<StoreTable<Handle>>,
}

#[pymethods]
impl FfiTableProvider {
    #[new]
    #[pyo3(signature = (stores, names, index_column, pushdown=true))]
    fn new(
        stores: Vec<Py<Store>>,
        names: Vec<String>,
        index_column: Option<String>,
        pushdown: bool,
    ) -> PyResult<Self> {
        Ok(FfiTableProvider {
            table: Arc::new(build(stores, names, index_column, pushdown)?),
        })
    }

    /// The `datafusion_table_provider` capsule (datafusion-python 55).
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let codec_obj = if session.hasattr("__datafusion_logical_extension_codec__")? {
            session.call_method0("__datafusion_logical_extension_codec__")?
        } else {
            session
        };
        let capsule = codec_obj.cast::<PyCapsule>().map_err(|_| {
            PyTypeError::new_err(
                "session must be a datafusion SessionContext or its logical extension codec capsule",
            )
        })?;
        let ptr = capsule
            .pointer_checked(Some(c"datafusion_logical_extension_codec"))
            .map_err(|_| {
                PyTypeError::new_err("not a datafusion_logical_extension_codec capsule")
            })?;
        // SAFETY: the capsule's name guarantees its payload type.
        let codec = unsafe { &*(ptr.as_ptr() as *const FFI_LogicalExtensionCodec) }.clone();
        let provider = FFI_TableProvider::new_with_ffi_codec(
            Arc::clone(&self.table) as _,
            true,
            Some(runtime()?.handle().clone()),
            codec,
        );
        PyCapsule::new_with_value(py, provider, c"datafusion_table_provider")
    }
}
