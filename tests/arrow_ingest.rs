//! Arrow ingest refuses what a store could not read back: a utf8 column
//! whose bytes are not UTF-8 (Arrow does not validate arrays built from raw
//! buffers, e.g. through the C data interface) fails with `InvalidValue`
//! naming the column, and leaves no store behind.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, RecordBatchIterator, StringArray};
use arrow_buffer::Buffer;
use arrow_data::ArrayData;
use arrow_schema::{DataType, Field, Schema};
use loaderx::{Codec, Error};

fn unchecked_utf8(values: &[u8], offsets: &[i32]) -> ArrayRef {
    let data = ArrayData::builder(DataType::Utf8)
        .len(offsets.len() - 1)
        .add_buffer(Buffer::from_slice_ref(offsets))
        .add_buffer(Buffer::from_slice_ref(values));
    // SAFETY: the offsets are in bounds and increasing; only the UTF-8
    // validity of the values is left unchecked, which is what ingest must
    // catch (the array is never read as `&str` here).
    Arc::new(StringArray::from(unsafe { data.build_unchecked() }))
}

fn ingest(columns: Vec<(&str, ArrayRef)>, root: &std::path::Path) -> loaderx::Result<()> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), false))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap();
    let reader = RecordBatchIterator::new([Ok(batch)], schema);
    loaderx::arrow::ingest(reader, root, Codec::Zstd, None, &mut |_| {}).map(|_| ())
}

#[test]
fn invalid_utf8_is_refused_naming_the_column_and_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let bad = unchecked_utf8(b"ok\xff\xfefine", &[0, 2, 4, 8]);
    let n: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
    let err = ingest(vec![("n", n), ("caption", bad)], &root).unwrap_err();
    match &err {
        Error::InvalidValue(msg) => {
            assert!(
                msg.contains("\"caption\"") && msg.contains("UTF-8"),
                "{msg}"
            )
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(&root)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "ingest left {left:?} behind");
}

#[test]
fn valid_utf8_from_raw_buffers_ingests() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    let good = unchecked_utf8("okéfine".as_bytes(), &[0, 2, 4, 8]);
    ingest(vec![("caption", good)], &root).unwrap();
    assert!(root.join("caption").join("meta.zr").exists());
}
