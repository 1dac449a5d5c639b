//! Tensor types of other libraries that cross the C Data Interface as
//! extension metadata, rewritten into the canonical types the rest of the
//! Arrow layer reads.
//!
//! Ray Data's fixed-shape tensor (`ray.data.arrow_tensor`, and `_v2` with
//! 64-bit offsets) stores each row's elements in a `List`/`LargeList` and
//! its shape, as a JSON list (`[2, 3]`), in the extension metadata. Every
//! row holds the same number of elements, so it is an
//! `arrow.fixed_shape_tensor` whose storage happens to carry offsets: this
//! module checks the offsets and re-wraps the same values buffer as a
//! `FixedSizeList` (no copy). Ray's variable-shaped tensor
//! (`ray.data.arrow_variable_shaped_tensor`) is already the ragged struct
//! `{data: LargeList<T>, shape: List<Int64>}` and needs nothing.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, FixedSizeListArray, OffsetSizeTrait};
use arrow_schema::{DataType, Field, FieldRef};

use super::gather::arrow_err;
use super::types::shape_json;
use super::{EXTENSION_METADATA, EXTENSION_NAME, FIXED_SHAPE_TENSOR};
use crate::error::{Error, Result};

const RAY_TENSOR: [&str; 2] = ["ray.data.arrow_tensor", "ray.data.arrow_tensor_v2"];

/// The item shape of a field of Ray's fixed-shape tensor type, if it is one.
fn ray_shape(field: &Field) -> Result<Option<Vec<u64>>> {
    let md = field.metadata();
    let Some(name) = md.get(EXTENSION_NAME) else {
        return Ok(None);
    };
    if !RAY_TENSOR.contains(&name.as_str()) {
        return Ok(None);
    }
    let json = md.get(EXTENSION_METADATA).map(String::as_str).unwrap_or("");
    let bad = || {
        Error::InvalidValue(format!(
            "column {:?}: {name} metadata {json:?} is not a shape (a JSON list of dimensions)",
            field.name()
        ))
    };
    let inner = json
        .trim()
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(bad)?;
    if inner.trim().is_empty() {
        return Ok(Some(Vec::new()));
    }
    inner
        .split(',')
        .map(|d| d.trim().parse::<u64>().map_err(|_| bad()))
        .collect::<Result<Vec<u64>>>()
        .map(Some)
}

/// `field` as the rest of the Arrow layer reads it: Ray's fixed-shape
/// tensor becomes `FixedSizeList<T>[prod(shape)]` with the canonical tensor
/// extension (a 0-d tensor the primitive `T`); any other field is returned
/// as it is.
pub(super) fn canonical_field(field: &FieldRef) -> Result<FieldRef> {
    let Some(shape) = ray_shape(field)? else {
        return Ok(Arc::clone(field));
    };
    let item = match field.data_type() {
        DataType::List(item) | DataType::LargeList(item) => Arc::clone(item),
        other => {
            return Err(Error::InvalidType(format!(
                "column {:?}: Ray's tensor type needs List or LargeList storage, got {other}",
                field.name()
            )))
        }
    };
    if shape.is_empty() {
        return Ok(Arc::new(Field::new(
            field.name(),
            item.data_type().clone(),
            field.is_nullable(),
        )));
    }
    let size = width(field.name(), &shape)?;
    let metadata = HashMap::from([
        (EXTENSION_NAME.to_string(), FIXED_SHAPE_TENSOR.to_string()),
        (EXTENSION_METADATA.to_string(), shape_json(&shape)),
    ]);
    Ok(Arc::new(
        Field::new(
            field.name(),
            DataType::FixedSizeList(item, size),
            field.is_nullable(),
        )
        .with_metadata(metadata),
    ))
}

fn width(name: &str, shape: &[u64]) -> Result<i32> {
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| i32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            Error::InvalidValue(format!(
                "column {name:?}: a tensor of shape {shape:?} has no Arrow fixed-size layout \
                 (its element count must be between 1 and 2^31 - 1)"
            ))
        })
}

/// `array` (of `field`) in the layout of [`canonical_field`]`(field)`: for
/// Ray's fixed-shape tensor, the same values re-wrapped after checking that
/// every row holds `prod(shape)` elements.
pub(super) fn canonical_array(field: &Field, array: &ArrayRef) -> Result<ArrayRef> {
    let Some(shape) = ray_shape(field)? else {
        return Ok(Arc::clone(array));
    };
    let name = field.name();
    let size = if shape.is_empty() {
        1
    } else {
        width(name, &shape)?
    };
    let (values, item) = match array.data_type() {
        DataType::List(item) => (uniform(name, array.as_list::<i32>(), size)?, item),
        DataType::LargeList(item) => (uniform(name, array.as_list::<i64>(), size)?, item),
        other => {
            return Err(Error::InvalidType(format!(
                "column {name:?}: Ray's tensor type needs List or LargeList storage, got {other}"
            )))
        }
    };
    if shape.is_empty() {
        return Ok(values);
    }
    let list = FixedSizeListArray::try_new(Arc::clone(item), size, values, array.nulls().cloned())
        .map_err(arrow_err)?;
    Ok(Arc::new(list))
}

/// The values of `list`'s rows, after checking each row holds `size` of them.
fn uniform<O: OffsetSizeTrait>(
    name: &str,
    list: &arrow_array::GenericListArray<O>,
    size: i32,
) -> Result<ArrayRef> {
    let offsets = list.value_offsets();
    let size = size as usize;
    for (i, w) in offsets.windows(2).enumerate() {
        let n = w[1].as_usize() - w[0].as_usize();
        if n != size {
            return Err(Error::InvalidValue(format!(
                "column {name:?}: row {i} of a fixed-shape tensor holds {n} elements, \
                 its shape needs {size}"
            )));
        }
    }
    let first = offsets[0].as_usize();
    Ok(list.values().slice(first, list.len() * size))
}

#[cfg(test)]
mod tests {
    use arrow_array::{Float32Array, LargeListArray};
    use arrow_buffer::OffsetBuffer;

    use super::*;

    fn ray_field(shape: &str) -> FieldRef {
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        Arc::new(
            Field::new("x", DataType::LargeList(item), true).with_metadata(HashMap::from([
                (EXTENSION_NAME.into(), "ray.data.arrow_tensor_v2".into()),
                (EXTENSION_METADATA.into(), shape.into()),
            ])),
        )
    }

    fn ray_array(lengths: &[usize]) -> ArrayRef {
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let n: usize = lengths.iter().sum();
        let values = Float32Array::from_iter_values((0..n).map(|v| v as f32));
        let offsets = OffsetBuffer::<i64>::from_lengths(lengths.iter().copied());
        Arc::new(LargeListArray::new(item, offsets, Arc::new(values), None))
    }

    #[test]
    fn a_ray_tensor_becomes_a_fixed_shape_tensor_over_the_same_values() {
        let field = ray_field("[2, 3]");
        let canonical = canonical_field(&field).unwrap();
        assert!(matches!(
            canonical.data_type(),
            DataType::FixedSizeList(_, 6)
        ));
        assert_eq!(
            canonical.metadata().get(EXTENSION_NAME).map(String::as_str),
            Some(FIXED_SHAPE_TENSOR)
        );
        let array = ray_array(&[6, 6]);
        let sliced = array.slice(1, 1);
        let out = canonical_array(&field, &sliced).unwrap();
        let out = out.as_fixed_size_list();
        assert_eq!(out.len(), 1);
        let vals = out
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .unwrap();
        assert_eq!(
            vals.values().to_vec(),
            (6..12).map(|v| v as f32).collect::<Vec<_>>()
        );
        // Other fields pass through untouched.
        let plain = Arc::new(Field::new("y", DataType::Int64, false));
        assert_eq!(canonical_field(&plain).unwrap(), plain);
    }

    #[test]
    fn a_ray_tensor_whose_rows_differ_or_whose_shape_is_unreadable_is_refused() {
        let field = ray_field("[2, 3]");
        let err = canonical_array(&field, &ray_array(&[6, 5])).unwrap_err();
        assert!(
            err.to_string()
                .contains("row 1 of a fixed-shape tensor holds 5 elements"),
            "{err}"
        );
        let err = canonical_field(&ray_field("{\"shape\": 2}")).unwrap_err();
        assert!(err.to_string().contains("is not a shape"), "{err}");
        let err = canonical_field(&ray_field("[0, 3]")).unwrap_err();
        assert!(
            err.to_string().contains("no Arrow fixed-size layout"),
            "{err}"
        );
    }

    #[test]
    fn a_zero_d_ray_tensor_becomes_its_primitive_values() {
        let field = ray_field("[]");
        assert_eq!(
            canonical_field(&field).unwrap().data_type(),
            &DataType::Float32
        );
        let out = canonical_array(&field, &ray_array(&[1, 1, 1])).unwrap();
        assert_eq!(out.data_type(), &DataType::Float32);
        assert_eq!(out.len(), 3);
    }
}
