//! `loaderx._native.Sampler`: one native call per batch of indices.

use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

use loaderx::sampler::weighted::AliasTable;
use loaderx::sampler::{Mode, Sampler as Core};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pub fn parse_mode(mode: &str) -> PyResult<Mode> {
    Mode::from_name(mode).ok_or_else(|| {
        PyValueError::new_err(format!(
            "mode must be 'sequential', 'iid' or 'cyclic', or 'blocked' with a block_size, \
             or 'weighted' with weights, got {mode:?}"
        ))
    })
}

/// The alias table of `weights` (a float64 array), built with the GIL
/// released; ValueError naming `weights` for a bad one.
pub fn alias_table(
    py: Python<'_>,
    weights: &PyReadonlyArray1<'_, f64>,
) -> PyResult<Arc<AliasTable>> {
    let w = weights
        .as_slice()
        .map_err(|_| PyValueError::new_err("weights must be a contiguous float64 array"))?;
    py.detach(|| AliasTable::new(w))
        .map(Arc::new)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Frozen, so Python threads share it without pyo3's runtime borrow
/// checking (which raises "Already borrowed" when threads race on a
/// free-threaded build): the batches are pure functions of the step, and the
/// step is an atomic, so concurrent `next()` calls each get a distinct step.
#[pyclass(frozen, module = "loaderx._native")]
pub struct Sampler {
    /// The plan; its own step is unused (see `step`).
    inner: Core,
    /// The step the next `next()` returns.
    step: AtomicU64,
}

impl Sampler {
    fn batch<'py>(&self, py: Python<'py>, step: u64) -> Bound<'py, PyArray1<i64>> {
        let b = self.inner.batch_size();
        // SAFETY: every element is written by fill_at before the array is used.
        let arr = unsafe { PyArray1::<i64>::new(py, [b], false) };
        {
            // SAFETY: the array was just created by this thread and no other
            // reference to its data exists while the view lives.
            let mut view = unsafe { arr.as_slice_mut().expect("a fresh array is contiguous") };
            // Indices are < 2^63, so the u64 and i64 bit patterns agree.
            let out: &mut [u64] = bytemuck_cast(&mut view);
            self.inner.fill_at(step, out);
        }
        arr
    }
}

fn bytemuck_cast<'a>(s: &'a mut &mut [i64]) -> &'a mut [u64] {
    // SAFETY: i64 and u64 have the same size and alignment.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u64, s.len()) }
}

#[pymethods]
impl Sampler {
    #[new]
    #[pyo3(signature = (n, batch_size, mode, seed=0, block_size=None, weights=None))]
    fn new(
        py: Python<'_>,
        n: u64,
        batch_size: usize,
        mode: &str,
        seed: u64,
        block_size: Option<u64>,
        weights: Option<PyReadonlyArray1<'_, f64>>,
    ) -> PyResult<Sampler> {
        let weights = weights.map(|w| alias_table(py, &w)).transpose()?;
        let inner = Core::with_options(n, batch_size, parse_mode(mode)?, seed, block_size, weights)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let step = AtomicU64::new(inner.step());
        Ok(Sampler { inner, step })
    }

    /// The batch of the current step; advances the step.
    fn next<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        // fetch_add wraps at 2^64 like the core's step.
        let step = self.step.fetch_add(1, Ordering::AcqRel);
        self.batch(py, step)
    }

    /// The batch of `step` (pure; the current step is unchanged).
    fn at<'py>(&self, py: Python<'py>, step: u64) -> Bound<'py, PyArray1<i64>> {
        self.batch(py, step)
    }

    #[getter]
    fn get_step(&self) -> u64 {
        self.step.load(Ordering::Acquire)
    }

    #[setter]
    fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Release)
    }

    #[getter]
    fn n(&self) -> u64 {
        self.inner.n()
    }

    #[getter]
    fn batch_size(&self) -> usize {
        self.inner.batch_size()
    }

    #[getter]
    fn mode(&self) -> &'static str {
        self.inner.mode().name()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    #[getter]
    fn block_size(&self) -> Option<u64> {
        self.inner.block_size()
    }
}

/// `loaderx::sampler::record_seeds` as one call over uint64 arrays: the
/// seed of each `indices[i]` at `step`, `seeds` holding one seed or one per
/// index. Computed with the GIL released.
#[pyfunction]
pub fn record_seeds<'py>(
    py: Python<'py>,
    seeds: PyReadonlyArray1<'py, u64>,
    step: u64,
    indices: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let seeds = seeds
        .as_slice()
        .map_err(|_| PyValueError::new_err("seeds must be a contiguous uint64 array"))?;
    let indices = indices
        .as_slice()
        .map_err(|_| PyValueError::new_err("indices must be a contiguous uint64 array"))?;
    if seeds.len() != 1 && seeds.len() != indices.len() {
        return Err(PyValueError::new_err(format!(
            "seeds must hold one seed or one per index ({}), got {}",
            indices.len(),
            seeds.len()
        )));
    }
    let out = py.detach(|| {
        let mut out = vec![0u64; indices.len()];
        loaderx::sampler::record_seeds(seeds, step, indices, &mut out);
        out
    });
    Ok(PyArray1::from_vec(py, out))
}
