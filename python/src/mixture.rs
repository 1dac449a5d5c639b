//! `loaderx._native.mix_counts` and `source_seed`: the mixture rule
//! (`loaderx::sampler::mixture`) as pure functions, for `loaderx.Mix`.

use loaderx::sampler::mixture::{self, Blend};
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The counts of steps `start..stop` of a mixture drawing `global` records a
/// step, as a `(stop - start, sources)` int64 array. `weights` holds one
/// row of weights per step from step 0 (at least `stop` rows), or a single
/// row used at every step. The rule runs from step 0 (with the GIL
/// released); a refused row raises ValueError naming its step.
#[pyfunction]
#[pyo3(signature = (weights, global_batch, start, stop))]
pub fn mix_counts<'py>(
    py: Python<'py>,
    weights: PyReadonlyArray2<'py, f64>,
    global_batch: u64,
    start: u64,
    stop: u64,
) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let shape = weights.shape();
    let (rows, sources) = (shape[0], shape[1]);
    let flat = weights
        .as_slice()
        .map_err(|_| PyValueError::new_err("weights must be a contiguous float64 array"))?;
    if stop < start {
        return Err(PyValueError::new_err(format!(
            "stop must be >= start, got start={start}, stop={stop}"
        )));
    }
    if rows != 1 && (rows as u64) < stop {
        return Err(PyValueError::new_err(format!(
            "weights must hold one row per step up to stop ({stop}) or a single row, got {rows}"
        )));
    }
    let counts = py.detach(|| -> Result<Vec<i64>, String> {
        let mut blend = Blend::new(sources, global_batch).map_err(|e| e.to_string())?;
        let fixed = if rows == 1 {
            Some(mixture::shares(flat).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let mut out = Vec::with_capacity((stop - start) as usize * sources);
        for step in 0..stop {
            let shares = match &fixed {
                Some(s) => s.clone(),
                None => {
                    let row = &flat[step as usize * sources..(step as usize + 1) * sources];
                    mixture::shares(row).map_err(|e| format!("step {step}: {e}"))?
                }
            };
            let c = blend.advance(&shares).map_err(|e| e.to_string())?;
            if step >= start {
                out.extend(c.into_iter().map(i64::from));
            }
        }
        Ok(out)
    });
    let counts = counts.map_err(PyValueError::new_err)?;
    let arr = numpy::PyArray1::from_vec(py, counts);
    arr.reshape([(stop - start) as usize, sources])
}

/// The seed of source `name`'s sampler in a mixture seeded `seed`.
#[pyfunction]
pub fn source_seed(seed: u64, name: &str) -> u64 {
    mixture::source_seed(seed, name)
}
