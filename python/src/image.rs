//! `loaderx.images`' native half: image settings, batch decoding with the
//! GIL released, and the reading of image files for an ingest
//! (`loaderx::image`).

use std::path::PathBuf;

use loaderx::image::{Crop, Image, ImageLayout, OnError};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::errors::IntoPyResult;

/// `loaderx.Image`'s settings as Python hands them over: `(height, width,
/// crop, (scale_lo, scale_hi), (ratio_lo, ratio_hi), flip, layout,
/// on_error)`.
pub type Spec = (
    u32,
    u32,
    String,
    (f64, f64),
    (f64, f64),
    f64,
    String,
    String,
);

/// The core settings of `spec`, checked there (ValueError naming the one
/// refused).
pub fn image_of(spec: &Spec) -> PyResult<Image> {
    let (h, w, crop, scale, ratio, flip, layout, on_error) = spec;
    let crop = match crop.as_str() {
        "random" => Crop::Random {
            scale: *scale,
            ratio: *ratio,
        },
        "center" => Crop::Center,
        "none" => Crop::Whole,
        other => {
            return Err(PyValueError::new_err(format!(
                "crop must be 'random', 'center' or 'none', got {other:?}"
            )))
        }
    };
    let layout = match layout.as_str() {
        "CHW" => ImageLayout::Chw,
        "HWC" => ImageLayout::Hwc,
        other => {
            return Err(PyValueError::new_err(format!(
                "layout must be 'CHW' or 'HWC', got {other:?}"
            )))
        }
    };
    let on_error = match on_error.as_str() {
        "raise" => OnError::Raise,
        "zeros" => OnError::Zeros,
        other => {
            return Err(PyValueError::new_err(format!(
                "on_error must be 'raise' or 'zeros', got {other:?}"
            )))
        }
    };
    Image::new(*h, *w, crop, *flip, layout, on_error).py()
}

/// Checks `spec` (what `loaderx.Image` calls).
#[pyfunction]
pub fn image_check(spec: Spec) -> PyResult<()> {
    image_of(&spec).map(|_| ())
}

/// The items of `values`, each checked to be bytes (an encoded image):
/// `TypeError` naming the first that is not.
fn encoded_values<'py>(values: Bound<'py, PyList>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.cast_into::<PyBytes>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "values[{i}] must be bytes (an encoded image)"
                ))
            })
        })
        .collect()
}

/// Decodes `values` (a list of bytes) as `spec` says, record `i` with seed
/// `seeds[i]` (its id `ids[i]` in messages), with the GIL released:
/// `(images, ok)`, `images` uint8 `(n, 3, h, w)` or `(n, h, w, 3)`.
#[pyfunction]
pub fn image_decode<'py>(
    py: Python<'py>,
    values: Bound<'py, PyList>,
    spec: Spec,
    seeds: PyReadonlyArray1<'py, u64>,
    ids: PyReadonlyArray1<'py, u64>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    let image = image_of(&spec)?;
    let held = encoded_values(values)?;
    let slices: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
    let seeds = seeds.as_slice()?;
    let ids = ids.as_slice()?;
    if seeds.len() != slices.len() || ids.len() != slices.len() {
        return Err(PyValueError::new_err(format!(
            "seeds must hold one seed per value ({}), got {}",
            slices.len(),
            seeds.len()
        )));
    }
    let n = slices.len();
    let mut out = vec![0u8; n * image.image_len()];
    let mut ok = vec![false; n];
    py.detach(|| image.decode_batch(&slices, seeds, ids, &mut out, &mut ok))
        .py()?;
    let (h, w) = (image.height as usize, image.width as usize);
    let shape = match image.layout {
        ImageLayout::Chw => [n, 3, h, w],
        ImageLayout::Hwc => [n, h, w, 3],
    };
    let array = PyArray1::from_vec(py, out).reshape(shape)?.into_any();
    Ok((array, PyArray1::from_vec(py, ok)))
}

/// The crop boxes and flips `spec` draws for sources of `heights ×
/// widths` with `seeds`: `(boxes (n, 4) int64 of y, x, h, w; flips)`.
#[pyfunction]
pub fn image_plan<'py>(
    py: Python<'py>,
    spec: Spec,
    heights: PyReadonlyArray1<'py, i64>,
    widths: PyReadonlyArray1<'py, i64>,
    seeds: PyReadonlyArray1<'py, u64>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArray1<bool>>)> {
    let image = image_of(&spec)?;
    let (hs, ws, ss) = (heights.as_slice()?, widths.as_slice()?, seeds.as_slice()?);
    let mut boxes = Vec::with_capacity(hs.len() * 4);
    let mut flips = Vec::with_capacity(hs.len());
    for ((&h, &w), &s) in hs.iter().zip(ws).zip(ss) {
        let p = if h > 0 && w > 0 {
            image.plan(h as u32, w as u32, s)
        } else {
            Default::default()
        };
        boxes.extend([p.y as i64, p.x as i64, p.h as i64, p.w as i64]);
        flips.push(p.flip);
    }
    let n = flips.len();
    Ok((
        PyArray1::from_vec(py, boxes).reshape([n, 4])?.into_any(),
        PyArray1::from_vec(py, flips),
    ))
}

/// Reads the image files `paths` on the worker pool, with the GIL
/// released: per file its bytes, height and width (read from its header),
/// or the reason it is not a decodable image (a full decode checks it).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn image_read_files<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
) -> PyResult<Vec<(Option<Bound<'py, PyBytes>>, i32, i32, Option<String>)>> {
    let read: Vec<Result<(Vec<u8>, u32, u32), String>> = py.detach(|| {
        use rayon::prelude::*;
        loaderx::executor::pool().install(|| {
            paths
                .par_iter()
                .map(|p| {
                    let bytes = std::fs::read(p).map_err(|e| e.to_string())?;
                    let (h, w) = loaderx::image::dimensions(&bytes).map_err(|e| e.to_string())?;
                    loaderx::image::decode_rgb(&bytes).map_err(|e| e.to_string())?;
                    Ok((bytes, h, w))
                })
                .collect()
        })
    });
    Ok(read
        .into_iter()
        .map(|r| match r {
            Ok((bytes, h, w)) => (Some(PyBytes::new(py, &bytes)), h as i32, w as i32, None),
            Err(why) => (None, 0, 0, Some(why)),
        })
        .collect())
}

/// Checks encoded images `values` (a list of bytes) on the worker pool,
/// with the GIL released: per value its height and width (from its
/// header), or the reason it is not a decodable image (a full decode
/// checks it).
#[pyfunction]
pub fn image_check_values(
    py: Python<'_>,
    values: Bound<'_, PyList>,
) -> PyResult<Vec<(i32, i32, Option<String>)>> {
    let held = encoded_values(values)?;
    let slices: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
    Ok(py.detach(|| {
        use rayon::prelude::*;
        loaderx::executor::pool().install(|| {
            slices
                .par_iter()
                .map(|b| {
                    let checked = loaderx::image::dimensions(b)
                        .and_then(|d| loaderx::image::decode_rgb(b).map(|_| d));
                    match checked {
                        Ok((h, w)) => (h as i32, w as i32, None),
                        Err(e) => (0, 0, Some(e.to_string())),
                    }
                })
                .collect()
        })
    }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(image_check, m)?)?;
    m.add_function(wrap_pyfunction!(image_decode, m)?)?;
    m.add_function(wrap_pyfunction!(image_plan, m)?)?;
    m.add_function(wrap_pyfunction!(image_read_files, m)?)?;
    m.add_function(wrap_pyfunction!(image_check_values, m)?)?;
    Ok(())
}
