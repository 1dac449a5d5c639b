//! Several Arrow streams written as one table (`ingest_streams`, what a Ray
//! write task runs): each column's store is decided over every stream's
//! schema, Ray's fixed-shape tensor type is read through its metadata, and
//! a stream that disagrees on dtype, logical type or column names is
//! refused before anything is written.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, FixedSizeListArray, Float32Array, Int64Array, LargeListArray, RecordBatch,
    RecordBatchIterator, RecordBatchReader, StringArray, UInt16Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Schema};
use loaderx::arrow::ingest_streams;
use loaderx::table::ColumnSpec;
use loaderx::{Codec, DType, Error, Records, Store};

type Reader = Box<dyn RecordBatchReader + Send>;

fn stream(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Reader {
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
    Box::new(RecordBatchIterator::new([Ok(batch)], schema))
}

/// A column of `n` rows of `width` u16 values (row `i` holds `i`), as a
/// FixedSizeList.
fn fixed(n: usize, width: i32) -> (Field, ArrayRef) {
    let item = Arc::new(Field::new("item", DataType::UInt16, false));
    let values = UInt16Array::from_iter_values((0..n).flat_map(|i| vec![i as u16; width as usize]));
    let list = FixedSizeListArray::new(Arc::clone(&item), width, Arc::new(values), None);
    let field = Field::new("v", DataType::FixedSizeList(item, width), false);
    (field, Arc::new(list))
}

/// Ray's fixed-shape tensor (`ray.data.arrow_tensor_v2`): `n` rows of shape
/// `(2, 3)` in a LargeList, the shape in the extension metadata.
fn ray_tensor(n: usize) -> (Field, ArrayRef) {
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let values = Float32Array::from_iter_values((0..n * 6).map(|v| v as f32));
    let offsets = OffsetBuffer::<i64>::from_lengths(std::iter::repeat_n(6, n));
    let list = LargeListArray::new(Arc::clone(&item), offsets, Arc::new(values), None);
    let field = Field::new("x", DataType::LargeList(item), true).with_metadata(HashMap::from([
        (
            "ARROW:extension:name".to_string(),
            "ray.data.arrow_tensor_v2".to_string(),
        ),
        ("ARROW:extension:metadata".to_string(), "[2, 3]".to_string()),
    ]));
    (field, Arc::new(list))
}

fn ids(range: std::ops::Range<i64>) -> (Field, ArrayRef) {
    let a = Int64Array::from_iter_values(range);
    (Field::new("id", DataType::Int64, false), Arc::new(a))
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    left.sort();
    left
}

#[test]
fn shapes_that_differ_between_streams_make_a_ragged_store_of_each_rows_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("t");
    let (fa, a) = fixed(3, 2);
    let (fb, b) = fixed(2, 4);
    let (fx1, x1) = ray_tensor(3);
    let (fx2, x2) = ray_tensor(2);
    let (fi1, i1) = ids(0..3);
    let (fi2, i2) = ids(3..5);
    // The second stream orders its columns differently: matched by name.
    let readers = vec![
        stream(vec![fi1, fa, fx1], vec![i1, a, x1]),
        stream(vec![fx2, fb, fi2], vec![x2, b, i2]),
    ];
    let (rows, specs) = ingest_streams(
        readers,
        &root,
        Codec::Raw,
        None,
        &loaderx::table::Layouts::records(),
        false,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(rows, 5);
    let names: Vec<&str> = specs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "v", "x"]);
    assert_eq!(specs[1].1.schema, loaderx::Schema::ragged(DType::U16));
    assert_eq!(
        specs[2].1.schema,
        loaderx::Schema::dense(DType::F32, &[2, 3]).unwrap()
    );

    let v = Store::open_readonly(root.join("v")).unwrap();
    assert_eq!(v.len(), 5);
    let batch = v.gather_ragged(&[0, 1, 2, 3, 4]).unwrap();
    for i in 0..5usize {
        // Each stream numbers its own rows from 0.
        let (width, value) = if i < 3 { (2, i) } else { (4, i - 3) };
        let rec = batch.record(i);
        assert_eq!(rec.shape(), vec![width as u64], "record {i}");
        let want: Vec<u8> = (0..width)
            .flat_map(|_| (value as u16).to_le_bytes())
            .collect();
        assert_eq!(rec.payload, &want[..], "record {i}");
    }
    let x = Store::open_readonly(root.join("x")).unwrap();
    let got = x.gather_dense(&[4]).unwrap();
    let want: Vec<u8> = (6..12).flat_map(|v| (v as f32).to_le_bytes()).collect();
    assert_eq!(got.as_slice(), &want[..]);
    let id = Store::open_readonly(root.join("id")).unwrap();
    assert_eq!(
        id.gather_dense(&[3]).unwrap().as_slice(),
        3i64.to_le_bytes()
    );
}

#[test]
fn streams_that_disagree_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("t");
    let text: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
    let (fi, i) = ids(0..3);
    let readers = vec![
        stream(vec![fi.clone()], vec![i.clone()]),
        stream(vec![Field::new("id", DataType::Utf8, false)], vec![text]),
    ];
    let err = ingest_streams(
        readers,
        &root,
        Codec::Raw,
        None,
        &loaderx::table::Layouts::records(),
        false,
        &mut |_| {},
    )
    .unwrap_err();
    let Error::InvalidType(msg) = &err else {
        panic!("expected InvalidType, got {err:?}")
    };
    assert!(
        msg.contains("column \"id\": expected int64 tensors"),
        "{msg}"
    );
    assert!(msg.contains("found utf8 values in a later block"), "{msg}");

    let floats: ArrayRef = Arc::new(Float32Array::from(vec![1.0f32]));
    let readers = vec![
        stream(vec![fi.clone()], vec![i.clone()]),
        stream(
            vec![Field::new("id", DataType::Float32, false)],
            vec![floats],
        ),
    ];
    let err = ingest_streams(
        readers,
        &root,
        Codec::Raw,
        None,
        &loaderx::table::Layouts::records(),
        false,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidType(m) if m.contains("expected dtype int64") && m.contains("found float32")),
        "{err:?}"
    );

    let (fo, o) = ids(0..3);
    let fo = Field::new("other", fo.data_type().clone(), false);
    let readers = vec![stream(vec![fi], vec![i]), stream(vec![fo], vec![o])];
    let err = ingest_streams(
        readers,
        &root,
        Codec::Raw,
        None,
        &loaderx::table::Layouts::records(),
        false,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidValue(m) if m.contains("same columns")),
        "{err:?}"
    );
    assert!(entries(&root).is_empty(), "left {:?}", entries(&root));
}

#[test]
fn a_null_row_in_a_tensor_column_is_refused_unless_allowed_and_nothing_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("t");
    let item = Arc::new(Field::new("item", DataType::Int64, true));
    let values = Int64Array::from(vec![1, 2, 3]);
    let offsets = OffsetBuffer::<i32>::from_lengths([2, 0, 1]);
    let nulls = arrow_buffer::NullBuffer::from(vec![true, false, true]);
    let list: ArrayRef = Arc::new(arrow_array::ListArray::new(
        Arc::clone(&item),
        offsets,
        Arc::new(values),
        Some(nulls),
    ));
    let field = Field::new("y", DataType::List(item), true);
    let readers = || vec![stream(vec![field.clone()], vec![Arc::clone(&list)])];
    let err = ingest_streams(
        readers(),
        &root,
        Codec::Raw,
        None,
        &loaderx::table::Layouts::records(),
        false,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidValue(m) if m.contains("column \"y\": expected no nulls") && m.contains("found 1")),
        "{err:?}"
    );
    assert!(entries(&root).is_empty(), "left {:?}", entries(&root));
    // Allowed, the null row gets a validity stream as in any ingest.
    let (rows, _) = ingest_streams(
        readers(),
        &root,
        Codec::Raw,
        None,
        &loaderx::table::Layouts::records(),
        true,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(rows, 3);
    assert!(entries(&root).contains(&".validity".to_string()));
}

#[test]
fn merged_specs_keep_one_shape_and_fall_back_to_ragged() {
    let dense = |shape: &[u64]| ColumnSpec {
        schema: loaderx::Schema::dense(DType::U16, shape).unwrap(),
        logical: loaderx::Logical::Tensor,
        layout: loaderx::table::ColumnLayout::Records,
    };
    assert_eq!(
        ColumnSpec::merge("v", &[dense(&[2]), dense(&[2])]).unwrap(),
        dense(&[2])
    );
    let merged = ColumnSpec::merge("v", &[dense(&[2]), dense(&[]), dense(&[3, 1])]).unwrap();
    assert_eq!(merged.schema, loaderx::Schema::ragged(DType::U16));
    assert!(ColumnSpec::merge("v", &[]).is_err());
}
