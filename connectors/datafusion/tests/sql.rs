//! SQL over stores checked against references computed directly, and read
//! counters proving what each query touched.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::RecordBatch;
use datafusion::prelude::SessionContext;
use loaderx::Packed;
use loaderx::{Codec, DType, Records, Schema, Store};
use loaderx_datafusion::{Options, StoreTable};

const N: u64 = 1000;

struct Fixture {
    _dir: tempfile::TempDir,
    label: Arc<Store>,
    image: Arc<Store>,
    tokens: Arc<Store>,
    labels: Vec<i64>,
}

/// label[i] = (i * 7) % 10; image[i] = 48 bytes of (i % 251); tokens[i] =
/// i % 5 + 1 int32 values equal to i.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let labels: Vec<i64> = (0..N as i64).map(|i| (i * 7) % 10).collect();
    let mut label = Store::create(
        dir.path().join("label"),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    label.append_dense(&bytes).unwrap();
    let mut image = Store::create(
        dir.path().join("image"),
        Schema::dense(DType::U8, &[3, 4, 4]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    let img: Vec<u8> = (0..N)
        .flat_map(|i| std::iter::repeat_n((i % 251) as u8, 48))
        .collect();
    image.append_dense(&img).unwrap();
    let mut tokens = Store::create(
        dir.path().join("tokens"),
        Schema::ragged(DType::I32),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let mut packed = Packed::default();
    for i in 0..N {
        let n = (i % 5 + 1) as usize;
        let payload: Vec<u8> = std::iter::repeat_n(i as i32, n)
            .flat_map(|v| v.to_le_bytes())
            .collect();
        packed.push(&[n as u64], &payload);
    }
    tokens.append_ragged(&packed).unwrap();
    Fixture {
        _dir: dir,
        label: Arc::new(label),
        image: Arc::new(image),
        tokens: Arc::new(tokens),
        labels,
    }
}

fn table(f: &Fixture, options: Options) -> Arc<StoreTable<Arc<Store>>> {
    Arc::new(
        StoreTable::try_new(
            vec![
                ("label".to_string(), Arc::clone(&f.label)),
                ("image".to_string(), Arc::clone(&f.image)),
                ("tokens".to_string(), Arc::clone(&f.tokens)),
            ],
            Some("record_id".to_string()),
            options,
        )
        .unwrap(),
    )
}

async fn query(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

fn u64s(batches: &[RecordBatch], col: usize) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| b.column(col).as_primitive::<UInt64Type>().values().to_vec())
        .collect()
}

fn i64s(batches: &[RecordBatch], col: usize) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(col).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn context(f: &Fixture) -> SessionContext {
    let ctx = SessionContext::new();
    ctx.register_table("t", table(f, Options::default()))
        .unwrap();
    ctx
}

#[tokio::test]
async fn count_group_by_and_order_by_match_the_reference() {
    let f = fixture();
    let ctx = context(&f);
    let b = query(&ctx, "SELECT count(*) FROM t").await;
    assert_eq!(i64s(&b, 0), vec![N as i64]);
    let b = query(
        &ctx,
        "SELECT label, count(*) AS n FROM t GROUP BY label ORDER BY label",
    )
    .await;
    let mut expect = [0i64; 10];
    for &l in &f.labels {
        expect[l as usize] += 1;
    }
    assert_eq!(i64s(&b, 0), (0..10).collect::<Vec<_>>());
    assert_eq!(i64s(&b, 1), expect.to_vec());
    let b = query(
        &ctx,
        "SELECT record_id FROM t ORDER BY label DESC, record_id LIMIT 5",
    )
    .await;
    let mut order: Vec<u64> = (0..N).collect();
    order.sort_by_key(|&i| (-f.labels[i as usize], i));
    assert_eq!(u64s(&b, 0), order[..5].to_vec());
}

#[tokio::test]
async fn record_id_ranges_and_in_lists_are_exact_and_read_only_those_rows() {
    let f = fixture();
    let ctx = context(&f);
    let before = f.label.read_counters().records;
    let b = query(
        &ctx,
        "SELECT record_id, label FROM t WHERE record_id >= 100 AND record_id < 110 ORDER BY record_id",
    )
    .await;
    assert_eq!(u64s(&b, 0), (100..110).collect::<Vec<_>>());
    assert_eq!(i64s(&b, 1), f.labels[100..110].to_vec());
    assert_eq!(
        f.label.read_counters().records - before,
        10,
        "only the range was read"
    );

    let before = f.label.read_counters().records;
    let b = query(
        &ctx,
        "SELECT record_id, label FROM t WHERE record_id IN (5, 999, 3, 5, 5000) ORDER BY record_id",
    )
    .await;
    assert_eq!(u64s(&b, 0), vec![3, 5, 999]);
    assert_eq!(i64s(&b, 1), vec![f.labels[3], f.labels[5], f.labels[999]]);
    assert_eq!(f.label.read_counters().records - before, 3);

    let b = query(
        &ctx,
        "SELECT record_id FROM t WHERE record_id BETWEEN 990 AND 2000 ORDER BY record_id",
    )
    .await;
    assert_eq!(u64s(&b, 0), (990..1000).collect::<Vec<_>>());
    let b = query(&ctx, "SELECT count(*) FROM t WHERE 10 > record_id").await;
    assert_eq!(i64s(&b, 0), vec![10]);
}

#[tokio::test]
async fn projection_reads_only_projected_streams() {
    let f = fixture();
    let ctx = context(&f);
    let (i0, t0) = (f.image.read_counters(), f.tokens.read_counters());
    let b = query(&ctx, "SELECT label, count(*) FROM t GROUP BY label").await;
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
    assert_eq!(f.image.read_counters(), i0, "image is not projected");
    assert_eq!(f.tokens.read_counters(), t0, "tokens are not projected");
    let l0 = f.label.read_counters();
    query(&ctx, "SELECT count(*) FROM t").await;
    assert_eq!(f.label.read_counters(), l0, "count(*) reads no store");
}

#[tokio::test]
async fn late_materialization_gathers_heavy_streams_for_survivors_only() {
    let f = fixture();
    let ctx = context(&f);
    let survivors = f.labels.iter().filter(|&&l| l == 3).count() as u64;
    let (i0, l0) = (f.image.read_counters(), f.label.read_counters());
    let b = query(
        &ctx,
        "SELECT record_id, image, tokens FROM t WHERE label = 3",
    )
    .await;
    let ids = u64s(&b, 0);
    assert_eq!(ids.len() as u64, survivors);
    assert!(ids.iter().all(|&i| f.labels[i as usize] == 3));
    assert_eq!(f.image.read_counters().records - i0.records, survivors);
    assert_eq!(
        f.label.read_counters().records - l0.records,
        N,
        "the predicate read every label once"
    );
    // the gathered images are the right ones
    for batch in &b {
        let ids = batch.column(0).as_primitive::<UInt64Type>();
        let img = batch.column(1).as_fixed_size_list();
        for k in 0..batch.num_rows() {
            let v = img.value(k);
            let v = v.as_primitive::<arrow_array::types::UInt8Type>();
            assert!(v.values().iter().all(|&x| x as u64 == ids.value(k) % 251));
        }
    }
    // without pushdown the heavy stream is read for every row
    let ctx2 = SessionContext::new();
    ctx2.register_table(
        "t",
        table(
            &f,
            Options {
                pushdown: false,
                ..Options::default()
            },
        ),
    )
    .unwrap();
    let i1 = f.image.read_counters();
    let b2 = query(&ctx2, "SELECT record_id, image FROM t WHERE label = 3").await;
    assert_eq!(
        b2.iter().map(|b| b.num_rows()).sum::<usize>() as u64,
        survivors
    );
    assert_eq!(f.image.read_counters().records - i1.records, N);
}

#[tokio::test]
async fn joins_of_two_tables() {
    let f = fixture();
    let ctx = context(&f);
    // a second table: the label stream again under another name
    let other = StoreTable::try_new(
        vec![("lab".to_string(), Arc::clone(&f.label))],
        Some("rid".to_string()),
        Options::default(),
    )
    .unwrap();
    ctx.register_table("u", Arc::new(other)).unwrap();
    let b = query(&ctx, "SELECT t.record_id, u.lab FROM t JOIN u ON t.record_id = u.rid WHERE t.label = 1 ORDER BY t.record_id").await;
    let expect: Vec<u64> = (0..N).filter(|&i| f.labels[i as usize] == 1).collect();
    assert_eq!(u64s(&b, 0), expect);
    assert!(i64s(&b, 1).iter().all(|&l| l == 1));
}

#[tokio::test]
async fn limit_and_byte_bounded_batches() {
    let f = fixture();
    let ctx = SessionContext::new();
    ctx.register_table(
        "t",
        table(
            &f,
            Options {
                batch_bytes: 4096,
                ..Options::default()
            },
        ),
    )
    .unwrap();
    let b = query(&ctx, "SELECT image FROM t").await;
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), N as usize);
    assert!(
        b.iter().all(|b| b.num_rows() * 48 <= 4096),
        "every batch within the byte bound"
    );
    // with a predicate: survivors are batched up to the bound as well
    let b = query(&ctx, "SELECT image FROM t WHERE label = 3").await;
    let survivors = f.labels.iter().filter(|&&l| l == 3).count();
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), survivors);
    assert!(b.iter().all(|b| b.num_rows() * 48 <= 4096));
    assert!(
        b.len() < survivors,
        "survivors of many predicate chunks share batches"
    );
    let b = query(&ctx, "SELECT record_id FROM t WHERE label = 3 LIMIT 5").await;
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 5);
    let i0 = f.image.read_counters();
    let b = query(&ctx, "SELECT image FROM t LIMIT 7").await;
    assert_eq!(b.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
    assert!(
        f.image.read_counters().records - i0.records < N / 2,
        "the limit stops the scan early"
    );
}

#[test]
fn unequal_lengths_are_rejected() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let mut short = Store::create(
        dir.path().join("s"),
        Schema::dense(DType::U8, &[]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    short.append_dense(&[1, 2, 3]).unwrap();
    let err = StoreTable::try_new(
        vec![
            ("label".to_string(), Arc::clone(&f.label)),
            ("s".to_string(), Arc::new(short)),
        ],
        None,
        Options::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("same length"), "{err}");
}
