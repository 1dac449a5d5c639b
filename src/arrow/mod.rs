//! Arrow views of stores, and Arrow arrays into stores.
//!
//! Mapping (the user's view of it: docs/guide/arrow.md, "Stores as Arrow
//! arrays"):
//! * dense, item_shape `()` → a primitive column of the dtype;
//! * dense, item_shape `S` → `FixedSizeList<T>[prod(S)]` carrying the
//!   canonical `arrow.fixed_shape_tensor` extension with `{"shape": S}`;
//! * ragged → `struct{data: List<T>, shape: List<Int32>}` (any ndim), or on
//!   request the canonical `arrow.variable_shape_tensor`
//!   (`struct{data: List<T>, shape: FixedSizeList<Int32>[ndim]}`) when every
//!   record of the batch has the same ndim.
//!
//! Numeric gathers are zero-copy: the gathered [`crate::Buffer`] becomes the
//! Arrow values buffer. `bool` is bit-packed in Arrow, so it is a copy.

mod blocks;
mod foreign;
mod gather;
mod groups;
mod ingest;
mod packing;
mod readers;
mod scan;
mod sharded;
mod types;

pub use blocks::{ingest_streams, spec_of_field, spread_over_deleted};
pub use gather::{gather_array, gather_nulls, gather_variable_shape_tensor, u8_tensors};
pub(crate) use gather::{into_arrow_buffer, values_array};
pub use groups::{write_group, write_groups, write_patch, Streams};
pub use ingest::{from_arrow_error, ingest, ingest_table};
pub use packing::{bytes_pack, check_utf8, ragged_pack, with_dense_bytes};
pub use readers::{record_batch, ColumnReader, TableReader};
pub use scan::{Filter, Scan, FILTER_ROWS};
pub use sharded::ingest_shards;
pub use types::{
    arrow_type, dtype_of, field_for, field_of, logical_of, schema_for_field, table_schema,
};

/// Re-exported where Arrow readers and the connectors have always found it.
pub use crate::read::records::{Indices, Records, StoreAccess};

pub const EXTENSION_NAME: &str = "ARROW:extension:name";
pub const EXTENSION_METADATA: &str = "ARROW:extension:metadata";
pub const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";
pub const VARIABLE_SHAPE_TENSOR: &str = "arrow.variable_shape_tensor";
/// Default bound of one batch of a reader.
pub const DEFAULT_BATCH_BYTES: usize = 16 << 20;

/// Whether a predicate on `records` is cheap to evaluate before anything
/// else is read (the one rule of the SQL provider and the polars scan): a
/// columnar column, a column of scalars, or a text or binary column.
pub fn is_cheap(records: &dyn Records) -> bool {
    records.columnar().is_some()
        || records.logical().is_bytes()
        || records.schema().item_shape().is_some_and(|s| s.is_empty())
}

#[cfg(test)]
mod tests {
    use arrow_array::{Array, StructArray};
    use arrow_schema::DataType;

    use super::types::{parse_shape_json, shape_json};
    use super::*;
    use crate::{Codec, DType, Packed, Schema, Store};

    #[test]
    fn new_values_are_laid_over_deleted_rows() {
        use arrow_array::{Int64Array, RecordBatch};
        use std::sync::Arc;
        let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "x",
            DataType::Int64,
            true,
        )]));
        let batch = |v: Vec<i64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(v))]).unwrap()
        };
        // Rows 0 and 3 and 4 deleted of 6: live rows 1, 2, 5 hold 10, 20, 30.
        let got = spread_over_deleted(
            schema.clone(),
            &[batch(vec![10]), batch(vec![20, 30])],
            &[0, 3, 4],
            6,
        )
        .unwrap();
        let x = got.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(x.values().to_vec(), [10, 10, 20, 20, 20, 30]);
        // No live row: nulls.
        let got = spread_over_deleted(schema.clone(), &[], &[0, 1], 2).unwrap();
        assert_eq!(got.column(0).null_count(), 2);
        // A count that does not match the live rows is refused.
        let err = spread_over_deleted(schema.clone(), &[batch(vec![1])], &[0], 3).unwrap_err();
        assert!(err.to_string().contains("has 2 live rows"), "{err}");
    }

    #[test]
    fn shape_json_round_trip() {
        assert_eq!(
            parse_shape_json(&shape_json(&[3, 224, 224])),
            Some(vec![3, 224, 224])
        );
        assert_eq!(
            parse_shape_json("{\"shape\": [2, 3], \"dim_names\": [\"a\",\"b\"]}"),
            Some(vec![2, 3])
        );
        assert_eq!(parse_shape_json("{}"), None);
        assert_eq!(parse_shape_json("{\"shape\":[-1]}"), None);
    }

    #[test]
    fn variable_shape_tensor_of_scalar_records() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = Store::create(
            tmp.path().join("s"),
            Schema::ragged(DType::I32),
            Codec::Raw,
            None,
        )
        .unwrap();
        let mut packed = Packed::default();
        packed.push(&[], &7i32.to_le_bytes());
        packed.push(&[], &9i32.to_le_bytes());
        store.append_ragged(&packed).unwrap();
        let (array, _) = gather_variable_shape_tensor(&store, &[0u64, 1], "x").unwrap();
        assert_eq!(array.len(), 2);
        let s = array.as_any().downcast_ref::<StructArray>().unwrap();
        assert_eq!(s.column(1).len(), 2);
    }

    #[test]
    fn every_dtype_maps_back() {
        for d in DType::ALL {
            assert_eq!(dtype_of(&arrow_type(d)), Some(d));
        }
        assert_eq!(dtype_of(&DataType::Utf8), None);
    }
}
