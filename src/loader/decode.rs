//! Columns of encoded images decoded on the producer threads
//! ([`super::Options::decode`]): which streams are decoded, the decode of
//! one part of a batch with its records' seeds, and the batch columns the
//! decoded images become (arrays, or a fixed-shape tensor with Arrow
//! output), with `<name>_ok` under [`OnError::Zeros`].

use crate::error::{Error, Result};
use crate::image::{Image, OnError};
use crate::read::buffer::Buffer;
use crate::read::records::{Records, StoreAccess};
use crate::repr::{py_list, py_str};
use crate::schema::{Kind, Logical};

use super::{BatchColumn, Output};

/// Per stream, its decoding (`decode` checked: each names a binary stream
/// once, and a `<name>_ok` column would not clash with one).
pub(super) fn decoded_streams<S: StoreAccess>(
    streams: &[(String, S)],
    decode: &[(String, Image)],
) -> Result<Vec<Option<Image>>> {
    let names: Vec<&str> = streams.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = vec![None; streams.len()];
    for (column, image) in decode {
        let Some(i) = names.iter().position(|n| n == column) else {
            return Err(Error::InvalidValue(format!(
                "decode names column {}, which the streams do not have (streams: {})",
                py_str(column),
                py_list(&names)
            )));
        };
        if out[i].is_some() {
            return Err(Error::InvalidValue(format!(
                "decode names column {} twice",
                py_str(column)
            )));
        }
        let binary = streams[i]
            .1
            .with(|r| Ok(r.logical() == Logical::Binary && r.kind() == Kind::Ragged))?;
        if !binary {
            return Err(Error::InvalidValue(format!(
                "decode: column {} must be a binary column of encoded images",
                py_str(column)
            )));
        }
        let ok = format!("{column}_ok");
        if image.on_error == OnError::Zeros && names.contains(&ok.as_str()) {
            return Err(Error::InvalidValue(format!(
                "decode: column {}, with zeros for the images that do not decode, adds a \
                 column {}, which the streams have already",
                py_str(column),
                py_str(&ok)
            )));
        }
        out[i] = Some(image.clone());
    }
    Ok(out)
}

/// Decodes the images of `store` (a binary column) at `idx` into `out`
/// (`idx.len()` images end to end) and `ok`, each record's crop and flip
/// drawn from `record_seeds(seed, step, record)`.
pub(super) fn decode_part(
    store: &dyn Records,
    image: &Image,
    seed: u64,
    step: u64,
    idx: &[u64],
    out: &mut [u8],
    ok: &mut [bool],
) -> Result<()> {
    let values = store.gather_ragged(idx)?;
    let slices: Vec<&[u8]> = (0..values.len())
        .map(|i| values.record(i).payload)
        .collect();
    let mut seeds = vec![0u64; idx.len()];
    crate::sampler::record_seeds(&[seed], step, idx, &mut seeds);
    image.decode_batch(&slices, &seeds, idx, out, ok)?;
    Ok(())
}

/// A batch's decoded images `out` of the column `name` as `output` gives
/// them, and with [`OnError::Zeros`] the `ok` column: arrays (one bool byte
/// per row), or with Arrow output a fixed-shape tensor column and a boolean
/// column.
pub(super) fn image_columns(
    output: Output,
    #[cfg_attr(not(feature = "arrow"), allow(unused_variables))] name: &str,
    image: &Image,
    out: Buffer,
    ok: Vec<bool>,
) -> Result<(BatchColumn, Option<BatchColumn>)> {
    let zeros = image.on_error == OnError::Zeros;
    match output {
        #[cfg(feature = "arrow")]
        Output::Arrow => {
            let shape = image.shape().map(|d| d as u64);
            let (field, array) = crate::arrow::u8_tensors(name, &shape, out)?;
            let ok = zeros.then(|| {
                let field = arrow_schema::Field::new(
                    format!("{name}_ok"),
                    arrow_schema::DataType::Boolean,
                    false,
                );
                let array: arrow_array::ArrayRef =
                    std::sync::Arc::new(arrow_array::BooleanArray::from(ok));
                BatchColumn::Arrow(field, array)
            });
            Ok((BatchColumn::Arrow(field, array), ok))
        }
        Output::Arrays => {
            let ok = zeros.then(|| {
                let mut b = Buffer::new(ok.len());
                for (d, &o) in b.as_mut_slice().iter_mut().zip(&ok) {
                    *d = o as u8;
                }
                BatchColumn::Dense(b)
            });
            Ok((BatchColumn::Dense(out), ok))
        }
    }
}
