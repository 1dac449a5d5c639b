//! `loaderx._native.Loader`: the prefetching half of the DataLoader.
//!
//! Producer threads (plain native threads, no GIL) compute each step's
//! indices with the sampler and gather every stream at them, up to `depth`
//! steps ahead; `next()` hands the batches over strictly in step order. The
//! Python `DataLoader` adds transforms and worker threads on top.

use std::sync::{Arc, Mutex, MutexGuard};

use loaderx::error::Kind;
use loaderx::prefetch::Prefetcher;
use loaderx::sampler::Sampler as Core;
use loaderx::{Buffer, Error, RaggedBatch};
use numpy::PyReadonlyArray1;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::to_py;
use crate::sampler::parse_mode;
use crate::store::Store;

enum Part {
    Dense(Buffer),
    Ragged(RaggedBatch),
    /// `output="arrow"`: the column, gathered straight into Arrow buffers.
    Arrow(arrow_schema::Field, arrow_array::ArrayRef),
}

type Batch = Result<Vec<Part>, Error>;

/// Everything a producer needs; shared by every producer thread.
struct Plan {
    stores: Vec<Py<Store>>,
    sampler: Core,
    /// This rank's slice of every global batch.
    rank: usize,
    local_batch: usize,
    /// Optional subset the sampler's positions map through.
    indices: Option<Vec<u64>>,
    /// Gather Arrow columns (named after the streams) instead of arrays.
    arrow_names: Option<Vec<String>>,
}

impl Plan {
    fn indices_at(&self, step: u64) -> Vec<u64> {
        let mut global = vec![0u64; self.sampler.batch_size()];
        self.sampler.fill_at(step, &mut global);
        let local = &global[self.rank * self.local_batch..(self.rank + 1) * self.local_batch];
        match &self.indices {
            Some(map) => local.iter().map(|&p| map[p as usize]).collect(),
            None => local.to_vec(),
        }
    }

    fn produce(&self, step: u64) -> Batch {
        let idx = self.indices_at(step);
        // An endless loader reads every page of a store sooner or later:
        // large records bypass the mapping (see `loaderx::store::streaming`).
        loaderx::store::streaming(|| self.gather(&idx))
    }

    fn gather(&self, idx: &[u64]) -> Batch {
        self.stores
            .iter()
            .enumerate()
            .map(|(k, s)| {
                s.get()
                    .engine_read(|e| match (&self.arrow_names, e.kind()) {
                        (Some(names), _) => Ok(Part::Arrow(
                            loaderx::arrow::field_for(e.schema(), &names[k]),
                            loaderx::arrow::gather_array(e, idx)?,
                        )),
                        (None, Kind::Dense) => e.gather_dense(idx).map(Part::Dense),
                        (None, Kind::Ragged) => e.gather_ragged(idx).map(Part::Ragged),
                    })
            })
            .collect()
    }
}

struct State {
    prefetcher: Option<Arc<Prefetcher<Batch>>>,
    /// Next step handed to the caller.
    step: u64,
    closed: bool,
}

/// Frozen, so a thread blocked in `next()` never keeps `close()` from
/// running; all mutable state sits behind one short-held mutex.
#[pyclass(frozen, module = "loaderx._native")]
pub struct Loader {
    names: Vec<String>,
    plan: Arc<Plan>,
    /// The process that created the loader (and its threads).
    pid: u32,
    state: Mutex<State>,
}

impl Loader {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = state.prefetcher.take() {
            if std::process::id() == self.pid {
                p.close();
            } else {
                // A fork()ed child has none of the producer threads: leak
                // the pipeline rather than join threads that do not exist.
                std::mem::forget(p);
            }
        }
    }
}

#[pymethods]
impl Loader {
    /// `stores` and `names` align; `batch_size` is this rank's batch; the
    /// sampler draws global batches of `batch_size * world_size` over
    /// `len(indices)` (or the store length) and this rank takes slice `rank`.
    #[new]
    #[pyo3(signature = (stores, names, batch_size, mode, seed, start_step, indices, depth, producers, rank, world_size, arrow=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        stores: Vec<Py<Store>>,
        names: Vec<String>,
        batch_size: usize,
        mode: &str,
        seed: u64,
        start_step: u64,
        indices: Option<PyReadonlyArray1<'_, u64>>,
        depth: usize,
        producers: usize,
        rank: usize,
        world_size: usize,
        arrow: bool,
    ) -> PyResult<Loader> {
        if stores.is_empty() || stores.len() != names.len() {
            return Err(PyValueError::new_err(
                "streams must name at least one store",
            ));
        }
        if rank >= world_size {
            return Err(PyValueError::new_err(format!(
                "rank must be in 0..world_size ({world_size}), got {rank}"
            )));
        }
        let n = stores[0]
            .get()
            .engine_read(|e| Ok(e.len()))
            .map_err(to_py)?;
        let indices = indices
            .map(|a| a.as_slice().map(|s| s.to_vec()))
            .transpose()
            .map_err(|_| PyValueError::new_err("indices must be contiguous"))?;
        let space = indices.as_ref().map_or(n, |ix| ix.len() as u64);
        let global = batch_size
            .checked_mul(world_size)
            .ok_or_else(|| PyValueError::new_err("batch_size * world_size overflows"))?;
        let sampler = Core::new(space, global, parse_mode(mode)?, seed)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let plan = Arc::new(Plan {
            stores,
            sampler,
            rank,
            local_batch: batch_size,
            indices,
            arrow_names: arrow.then(|| names.clone()),
        });
        let producer_plan = Arc::clone(&plan);
        let prefetcher = py.detach(|| {
            Prefetcher::new(start_step, depth.max(1), producers.max(1), move |step| {
                producer_plan.produce(step)
            })
        });
        Ok(Loader {
            names,
            plan,
            pid: std::process::id(),
            state: Mutex::new(State {
                prefetcher: Some(Arc::new(prefetcher)),
                step: start_step,
                closed: false,
            }),
        })
    }

    /// The next batch as `{name: array | list}`; blocks (GIL released) until
    /// it is ready.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if std::process::id() != self.pid {
            return Err(PyValueError::new_err(
                "this loader's threads belong to the process that created it; create a new one here",
            ));
        }
        let prefetcher = {
            let st = self.lock();
            if st.closed {
                return Err(PyValueError::new_err("DataLoader is closed"));
            }
            st.prefetcher
                .clone()
                .expect("an open loader has a prefetcher")
        };
        let got = py.detach(|| prefetcher.next());
        let (step, produced) = got.ok_or_else(|| PyValueError::new_err("DataLoader is closed"))?;
        self.lock().step = step + 1;
        let parts = produced
            .map_err(|panic| PyRuntimeError::new_err(format!("prefetch worker failed: {panic}")))?
            .map_err(to_py)?;
        if self.plan.arrow_names.is_some() {
            let columns = parts
                .into_iter()
                .map(|p| match p {
                    Part::Arrow(field, array) => (field, array),
                    _ => unreachable!("an arrow loader gathers arrow columns"),
                })
                .collect();
            let batch = crate::arrow::record_batch(columns)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            return Ok(pyo3_arrow::PyRecordBatch::new(batch)
                .into_pyobject(py)?
                .into_any());
        }
        let batch = PyDict::new(py);
        for ((name, store), part) in self.names.iter().zip(&self.plan.stores).zip(parts) {
            let store = store.get();
            let value = match part {
                Part::Dense(buf) => store.dense_array(py, buf, Some(self.plan.local_batch))?,
                Part::Ragged(rb) => PyList::new(py, store.ragged_arrays(py, rb)?)?.into_any(),
                Part::Arrow(..) => unreachable!("a numpy loader gathers arrays"),
            };
            batch.set_item(name, value)?;
        }
        Ok(batch.into_any())
    }

    /// The step the next `next()` returns.
    #[getter]
    fn step(&self) -> u64 {
        self.lock().step
    }

    /// Indices of `step` (after the rank slice and the `indices` mapping).
    fn indices_at<'py>(&self, py: Python<'py>, step: u64) -> Bound<'py, numpy::PyArray1<u64>> {
        numpy::PyArray1::from_vec(py, self.plan.indices_at(step))
    }

    /// Stops and joins the producer threads. Idempotent.
    fn close(&self, py: Python<'_>) {
        let prefetcher = {
            let mut st = self.lock();
            st.closed = true;
            st.prefetcher.take()
        };
        if let Some(p) = prefetcher {
            if std::process::id() == self.pid {
                py.detach(|| p.close());
            } else {
                std::mem::forget(p);
            }
        }
    }

    #[getter]
    fn closed(&self) -> bool {
        self.lock().closed
    }
}
