//! SQL over a sharded table opened through `loaderx::table`: a `WHERE` on a
//! nullable column across shard boundaries, text columns in the result.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use datafusion::prelude::SessionContext;
use loaderx::schema::{push_bytes_value, Logical};
use loaderx::table::{self, ColumnType, Table};
use loaderx::Packed;
use loaderx::{Codec, DType, Schema, Store};
use loaderx_datafusion::{Options, StoreTable};

/// Shard bounds: three shards of rows `0..40`.
const SPLITS: [u64; 4] = [0, 13, 25, 40];

/// `score` is null at every fourth row.
fn score(i: u64) -> Option<i64> {
    (!i.is_multiple_of(4)).then_some((i as i64 * 37) % 100)
}

fn dense(dir: &std::path::Path, name: &str, dtype: DType, bytes: &[u8]) {
    let mut s = Store::create(
        dir.join(name),
        Schema::dense(dtype, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    s.append_dense(bytes).unwrap();
    s.close().unwrap();
}

fn write_shard(dir: &std::path::Path, lo: u64, hi: u64) {
    let ids: Vec<u8> = (lo..hi).flat_map(|i| (i as i64).to_le_bytes()).collect();
    dense(dir, "id", DType::I64, &ids);
    let scores: Vec<u8> = (lo..hi)
        .flat_map(|i| score(i).unwrap_or(0).to_le_bytes())
        .collect();
    dense(dir, "score", DType::I64, &scores);
    let valid: Vec<u8> = (lo..hi).map(|i| u8::from(score(i).is_some())).collect();
    let mut v = Store::create(
        table::validity_dir(dir, "score"),
        Schema::dense(DType::Bool, &[]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    v.append_dense(&valid).unwrap();
    v.close().unwrap();
    let mut text = Store::create(
        dir.join("name"),
        Schema::ragged(DType::U8),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let mut packed = Packed::default();
    for i in lo..hi {
        push_bytes_value(&mut packed, format!("item-{i}").as_bytes());
    }
    text.append_ragged(&packed).unwrap();
    text.close().unwrap();
    let t = |logical, nullable| ColumnType { logical, nullable };
    table::write_types(
        dir,
        &[
            ("name".into(), t(Logical::Utf8, false)),
            ("score".into(), t(Logical::Tensor, true)),
        ],
    )
    .unwrap();
}

async fn query(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

#[tokio::test]
async fn where_over_a_sharded_table_opened_with_one_call() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let mut shards = Vec::new();
    for w in SPLITS.windows(2) {
        let shard = table::new_shard(&path).unwrap();
        write_shard(&shard, w[0], w[1]);
        shards.push(shard);
    }
    assert_eq!(table::commit_shards(&path, &shards).unwrap(), 40);

    let t = Table::open(&path, true).unwrap();
    assert!(t.is_sharded());
    let provider = StoreTable::from_table(t, Some("record_id".into()), Options::default()).unwrap();
    let ctx = SessionContext::new();
    ctx.register_table("t", std::sync::Arc::new(provider))
        .unwrap();

    let b = query(&ctx, "SELECT id, name FROM t WHERE score > 50 ORDER BY id").await;
    let want: Vec<i64> = (0..40)
        .filter(|&i| score(i).is_some_and(|s| s > 50))
        .map(|i| i as i64)
        .collect();
    let got: Vec<i64> = b
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(got, want);
    let names: Vec<String> = b
        .iter()
        .flat_map(|b| {
            let a = b.column(1).as_string::<i32>();
            (0..a.len())
                .map(|k| a.value(k).to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        names,
        want.iter().map(|i| format!("item-{i}")).collect::<Vec<_>>()
    );

    // Nulls come from the validity streams of every shard.
    let b = query(&ctx, "SELECT record_id FROM t WHERE score IS NULL").await;
    let n: usize = b.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(n, 10);
    let b = query(&ctx, "SELECT count(*) FROM t WHERE name LIKE 'item-3%'").await;
    assert_eq!(b[0].column(0).as_primitive::<Int64Type>().value(0), 11);
}
