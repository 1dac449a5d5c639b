//! Tables through `loaderx::table`: a sharded table with a text and a
//! nullable column built shard by shard, committed, opened with one call,
//! gathered across shard boundaries, read as Arrow and by the DataLoader;
//! and every manifest rule a broken manifest can break.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::Array;
use loaderx::loader::{BatchColumn as Batched, DataLoader, Options};
use loaderx::sampler::Mode;
use loaderx::schema::{push_bytes_value, Logical};
use loaderx::table::{self, ColumnType, Table};
use loaderx::Packed;
use loaderx::Records;
use loaderx::{Codec, DType, Error, Schema, Store};

/// Shard bounds: four shards (the second empty), of either codec.
const SPLITS: [u64; 5] = [0, 7, 7, 20, 31];
const N: u64 = 31;

fn caption(i: u64) -> String {
    if i.is_multiple_of(5) {
        String::new()
    } else {
        format!("row {i} é")
    }
}

/// `label` is null at every third row (only in the shards that hold any).
fn label(i: u64) -> Option<i32> {
    (!i.is_multiple_of(3)).then_some(i as i32 * 10)
}

/// Writes rows `lo..hi` as a plain table into `dir`: `id` (dense i64),
/// `caption` (utf8) and `label` (i32 scalars, nullable unless `nulls` is
/// false, in which case its rows are all present).
fn write_shard(dir: &Path, lo: u64, hi: u64, codec: Codec, nulls: bool) {
    let mut id = Store::create(
        dir.join("id"),
        Schema::dense(DType::I64, &[]).unwrap(),
        codec,
        None,
    )
    .unwrap();
    let ids: Vec<u8> = (lo..hi).flat_map(|i| (i as i64).to_le_bytes()).collect();
    id.append_dense(&ids).unwrap();
    id.close().unwrap();

    let mut text =
        Store::create(dir.join("caption"), Schema::ragged(DType::U8), codec, None).unwrap();
    let mut packed = Packed::default();
    for i in lo..hi {
        push_bytes_value(&mut packed, caption(i).as_bytes());
    }
    if !packed.is_empty() {
        text.append_ragged(&packed).unwrap();
    }
    text.close().unwrap();

    let mut lab = Store::create(
        dir.join("label"),
        Schema::dense(DType::I32, &[]).unwrap(),
        codec,
        None,
    )
    .unwrap();
    let values: Vec<u8> = (lo..hi)
        .flat_map(|i| label(i).unwrap_or(0).to_le_bytes())
        .collect();
    lab.append_dense(&values).unwrap();
    lab.close().unwrap();

    let mut types = vec![(
        "caption".to_string(),
        ColumnType {
            logical: Logical::Utf8,
            nullable: false,
        },
    )];
    if nulls {
        let mut v = Store::create(
            table::validity_dir(dir, "label"),
            Schema::dense(DType::Bool, &[]).unwrap(),
            Codec::Zstd,
            None,
        )
        .unwrap();
        let valid: Vec<u8> = (lo..hi).map(|i| u8::from(label(i).is_some())).collect();
        v.append_dense(&valid).unwrap();
        v.close().unwrap();
        types.push((
            "label".into(),
            ColumnType {
                logical: Logical::Tensor,
                nullable: true,
            },
        ));
    }
    table::write_types(dir, &types).unwrap();
}

/// A sharded table of rows `0..N` in four shards (the second empty), committed
/// in two commits; the last shard has no nulls (and no validity stream).
fn sharded(root: &Path) -> (PathBuf, Vec<PathBuf>) {
    let path = root.join("sharded");
    let mut shards = Vec::new();
    for (k, w) in SPLITS.windows(2).enumerate() {
        let shard = table::new_shard(&path).unwrap();
        let codec = [Codec::Raw, Codec::Zstd][k % 2];
        write_shard(&shard, w[0], w[1], codec, k != 3);
        shards.push(shard);
    }
    assert_eq!(table::commit_shards(&path, &shards[..2]).unwrap(), 7);
    assert_eq!(table::commit_shards(&path, &shards[2..]).unwrap(), N);
    (path, shards)
}

fn manifest_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path.join(table::MANIFEST_FILE)).unwrap()
}

#[test]
fn a_sharded_table_opens_with_one_call_and_gathers_across_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, shards) = sharded(tmp.path());
    // The commit gave the shard without nulls an all-valid validity stream.
    assert!(table::validity_dir(&shards[3], "label")
        .join("meta.zr")
        .is_file());
    let m = table::read_manifest(&path).unwrap();
    assert_eq!(m.columns, ["caption", "id", "label"]);
    assert_eq!(m.nullable, ["label"]);
    assert_eq!(m.types, [("caption".to_string(), Logical::Utf8)]);
    let rows: Vec<u64> = m.shards.iter().map(|s| s.rows).collect();
    assert_eq!(rows, [7, 0, 13, 11]);

    let t = Table::open(&path, true).unwrap();
    assert!(t.is_sharded());
    assert_eq!(t.num_rows(), N);
    assert_eq!(t.column_names(), ["caption", "id", "label"]);
    let dirs: Vec<&Path> = t
        .shards()
        .unwrap()
        .iter()
        .map(|s| s.dir.as_path())
        .collect();
    assert_eq!(
        dirs,
        shards.iter().map(PathBuf::as_path).collect::<Vec<_>>()
    );

    // Indices on both sides of every boundary, out of order, repeated.
    let idx: Vec<u64> = vec![30, 0, 6, 7, 19, 20, 6, 29, 13];
    let id = t.column("id").unwrap();
    assert!(id.is_readonly());
    let got = loaderx::arrow::gather_array(id, &idx).unwrap();
    let got: Vec<i64> = got.as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(got, idx.iter().map(|&i| i as i64).collect::<Vec<_>>());

    let cap = t.column("caption").unwrap();
    assert_eq!(cap.logical(), Logical::Utf8);
    let got = loaderx::arrow::gather_array(cap, &idx).unwrap();
    let got = got.as_string::<i32>();
    for (k, &i) in idx.iter().enumerate() {
        assert_eq!(got.value(k), caption(i), "row {i}");
    }

    let lab = t.column("label").unwrap();
    assert!(lab.validity().is_some());
    let got = loaderx::arrow::gather_array(lab, &idx).unwrap();
    let got = got.as_primitive::<Int32Type>();
    for (k, &i) in idx.iter().enumerate() {
        // Rows 20.. are the shard without nulls: all valid.
        let want = if i >= 20 {
            Some(label(i).unwrap_or(0))
        } else {
            label(i)
        };
        assert_eq!(got.is_valid(k).then(|| got.value(k)), want, "row {i}");
    }

    // A record batch and the DataLoader over the same columns.
    let streams: Vec<(String, &table::Column)> = t
        .columns()
        .iter()
        .map(|c| (c.name().to_string(), c))
        .collect();
    let batch = loaderx::arrow::record_batch(&streams, &idx, Some("record_id")).unwrap();
    assert_eq!(batch.num_rows(), idx.len());
    assert_eq!(batch.num_columns(), 4);
    drop(streams);
    let shared: Vec<(String, Arc<table::Column>)> = t
        .into_columns()
        .into_iter()
        .map(|c| (c.name().to_string(), Arc::new(c)))
        .collect();
    let loader = DataLoader::new(
        shared,
        Options {
            batch_size: 8,
            mode: Mode::Iid,
            seed: 3,
            ..Options::default()
        },
    )
    .unwrap();
    for _ in 0..5 {
        let b = loader.next().unwrap();
        let Batched::Dense(ids) = &b.columns[1] else {
            panic!("id is dense");
        };
        let ids: Vec<u64> = ids
            .as_slice()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u64)
            .collect();
        assert_eq!(ids, b.indices);
    }
    loader.close();
    drop(loader);
}

#[test]
fn plain_tables_open_through_the_same_call() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plain");
    write_shard(&dir, 0, 9, Codec::Zstd, true);
    let t = Table::open(&dir, false).unwrap();
    assert!(!t.is_sharded() && t.shards().is_none());
    assert_eq!(t.num_rows(), 9);
    assert_eq!(t.column_names(), ["caption", "id", "label"]);
    assert!(!t.column("id").unwrap().is_readonly());
    // A writable open holds the columns' locks.
    assert!(matches!(Table::open(&dir, true), Err(Error::Busy(_))));
    t.close().unwrap();

    // Unequal lengths: named, and nothing stays open.
    let mut extra = Store::open(dir.join("id")).unwrap();
    extra.append_dense(&7i64.to_le_bytes()).unwrap();
    extra.close().unwrap();
    let err = Table::open(&dir, true).unwrap_err().to_string();
    assert!(
        err.contains("equal lengths")
            && err.contains("'caption' has 9 rows")
            && err.contains("'id' has 10"),
        "{err}"
    );
    Store::open(dir.join("id")).unwrap().close().unwrap();

    let missing = Table::open(tmp.path().join("missing"), true).unwrap_err();
    assert!(matches!(&missing, Error::Missing { .. }), "{missing}");
    assert!(missing.to_string().contains("does not exist"));
    std::fs::create_dir(tmp.path().join("empty")).unwrap();
    let empty = Table::open(tmp.path().join("empty"), true).unwrap_err();
    assert!(empty.to_string().contains("holds no columns"), "{empty}");
}

#[test]
fn sharded_tables_refuse_writable_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, _) = sharded(tmp.path());
    let err = Table::open(&path, false).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidValue(m) if m.contains("opens read-only")),
        "{err}"
    );
}

#[test]
fn bad_commits_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, shards) = sharded(tmp.path());
    let before = manifest_bytes(&path);
    let check = |shards: &[PathBuf], want: &str| {
        let err = table::commit_shards(&path, shards).unwrap_err().to_string();
        assert!(err.contains(want), "{want:?} not in {err:?}");
        assert_eq!(manifest_bytes(&path), before);
    };
    // A shard whose id column holds another dtype.
    let odd = table::new_shard(&path).unwrap();
    write_shard(&odd, 0, 3, Codec::Raw, true);
    std::fs::remove_dir_all(odd.join("id")).unwrap();
    let mut s = Store::create(
        odd.join("id"),
        Schema::dense(DType::F64, &[2]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    s.append_dense(&[0u8; 48]).unwrap();
    s.close().unwrap();
    check(std::slice::from_ref(&odd), "column 'id': shard");
    check(
        std::slice::from_ref(&odd),
        "holds dense <f8 item_shape (2,), but shard",
    );
    // Missing a column.
    let fewer = table::new_shard(&path).unwrap();
    write_shard(&fewer, 0, 3, Codec::Raw, false);
    std::fs::remove_dir_all(fewer.join("id")).unwrap();
    check(
        std::slice::from_ref(&fewer),
        "has columns ['caption', 'label'], but shard",
    );
    check(&shards[1..2], "already committed");
    check(&[tmp.path().join("elsewhere")], "directly inside the table");
    let missing = table::commit_shards(&path, &[path.join("missing")]).unwrap_err();
    assert!(matches!(&missing, Error::Missing { .. }), "{missing}");
    let good = table::new_shard(&path).unwrap();
    write_shard(&good, 0, 2, Codec::Zstd, true);
    check(&[good.clone(), good.clone()], "twice");
    // A plain table is no place for shards.
    let plain = tmp.path().join("plain");
    write_shard(&plain, 0, 2, Codec::Raw, false);
    let err = table::commit_shards(&plain, &[]).unwrap_err().to_string();
    assert!(err.contains("plain table"), "{err}");
    // The good shard still commits.
    assert_eq!(table::commit_shards(&path, &[good]).unwrap(), N + 2);
    // No temporary file is left behind.
    let left: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".manifest.json"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn broken_manifests_fail_to_open_naming_the_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, shards) = sharded(tmp.path());
    let file = path.join(table::MANIFEST_FILE);
    let good = manifest_bytes(&path);
    let doc: serde_json::Value = serde_json::from_slice(&good).unwrap();
    let first = doc["shards"][0]["name"].as_str().unwrap().to_string();
    let with = |key: &str, v: serde_json::Value| {
        let mut d = doc.clone();
        d[key] = v;
        serde_json::to_vec(&d).unwrap()
    };
    let mut bad_rows = doc.clone();
    bad_rows["shards"][0]["rows"] = 8.into();
    let cases: Vec<(Vec<u8>, String)> = vec![
        (b"{not json".to_vec(), "not valid JSON".into()),
        (with("format", "other".into()), "'format'".into()),
        (
            with("version", 5.into()),
            "version must be 1, 2, 3 or 4 (this release reads those), got 5".into(),
        ),
        (
            {
                // A patch of more rows than its shard has, or of none.
                let mut d = doc.clone();
                d["shards"][0]["groups"] =
                    serde_json::json!([{"dir": "_g-00aa11bb22cc-p", "columns": ["id"], "patch": 8}]);
                serde_json::to_vec(&d).unwrap()
            },
            "optional \"patch\": rows (at most the shard's, at least 1)".into(),
        ),
        (
            {
                let mut d = doc.clone();
                d["shards"][0]["groups"] =
                    serde_json::json!([{"dir": "_g-00aa11bb22cc-p", "columns": ["id"], "patch": 0}]);
                serde_json::to_vec(&d).unwrap()
            },
            "'groups' that are not a list".into(),
        ),
        (
            {
                // A patch whose rows file is not there.
                let mut d = doc.clone();
                d["shards"][0]["groups"] =
                    serde_json::json!([{"dir": "_g-00aa11bb22cc-p", "columns": ["id"], "patch": 2}]);
                serde_json::to_vec(&d).unwrap()
            },
            "names patch group '_g-00aa11bb22cc-p', whose rows.u64 is missing".into(),
        ),
        (
            // Columnar layouts need a version 2 or 3 manifest.
            with("layouts", serde_json::json!({"id": "columnar"})),
            "'layouts' must map column names to 'columnar'".into(),
        ),
        (with("columns", "id".into()), "'columns' must be a list".into()),
        (
            with("columns", serde_json::json!(["id", "id"])),
            "names a column twice: ['id', 'id']".into(),
        ),
        (with("shards", 3.into()), "'shards' must be a list".into()),
        (
            with("shards", serde_json::json!([{"name": "../x", "rows": 1}])),
            "shard 0 must have a plain directory 'name', got '../x'".into(),
        ),
        (
            with("shards", serde_json::json!([doc["shards"][1], doc["shards"][1]])),
            "listed twice".into(),
        ),
        (
            with("shards", serde_json::json!([{"name": first, "rows": -1}])),
            "non-negative integer 'rows', got -1".into(),
        ),
        (
            with("types", serde_json::json!({"caption": "text"})),
            "'types' must map".into(),
        ),
        (
            with("nullable", serde_json::json!(["nope"])),
            "'nullable' must list".into(),
        ),
        (
            {
                let mut d = doc.clone();
                d["columns"] = serde_json::json!(["caption", "id", "label", "nope"]);
                d["nullable"] = serde_json::json!([]);
                serde_json::to_vec(&d).unwrap()
            },
            "holds columns ['caption', 'id', 'label'], but the manifest names ['caption', 'id', 'label', 'nope']".into(),
        ),
        (
            serde_json::to_vec(&bad_rows).unwrap(),
            format!("the manifest says shard '{first}' has 8 rows, but shard '{first}' column 'caption' has 7 rows"),
        ),
    ];
    for (bytes, want) in cases {
        std::fs::write(&file, &bytes).unwrap();
        let err = Table::open(&path, true).unwrap_err();
        assert!(matches!(&err, Error::Corrupted { .. }), "{want}: {err}");
        let msg = err.to_string();
        assert!(
            msg.contains("manifest.json") && msg.contains(&want),
            "{want:?} not in {msg:?}"
        );
    }
    // A shard the manifest names is missing; a nullable column's stream too.
    std::fs::write(&file, &good).unwrap();
    let moved = shards[2].with_extension("moved");
    std::fs::rename(&shards[2], &moved).unwrap();
    let err = Table::open(&path, true).unwrap_err().to_string();
    let name = shards[2].file_name().unwrap().to_str().unwrap();
    assert!(
        err.contains(&format!("names shard '{name}', but")) && err.contains("is missing"),
        "{err}"
    );
    std::fs::rename(&moved, &shards[2]).unwrap();
    let v = table::validity_dir(&shards[3], "label");
    std::fs::rename(&v, v.with_extension("moved")).unwrap();
    let err = Table::open(&path, true).unwrap_err().to_string();
    assert!(
        err.contains("column 'label' is nullable, but shard"),
        "{err}"
    );
    std::fs::rename(v.with_extension("moved"), &v).unwrap();
    // No committed shard at all.
    std::fs::write(&file, with("shards", serde_json::json!([]))).unwrap();
    let err = Table::open(&path, true).unwrap_err().to_string();
    assert!(err.contains("no committed shards"), "{err}");
    std::fs::write(&file, &good).unwrap();
    assert_eq!(Table::open(&path, true).unwrap().num_rows(), N);
    // Without a manifest, reading one says so.
    let err = table::read_manifest(tmp.path()).unwrap_err();
    assert!(matches!(&err, Error::Missing { .. }), "{err}");
}

#[test]
fn shards_that_disagree_on_a_schema_fail_to_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, _) = sharded(tmp.path());
    // A shard listed by hand (not through commit_shards) whose id differs.
    let odd = table::new_shard(&path).unwrap();
    write_shard(&odd, 0, 2, Codec::Raw, true);
    std::fs::remove_dir_all(odd.join("id")).unwrap();
    let mut s = Store::create(
        odd.join("id"),
        Schema::dense(DType::F64, &[]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    s.append_dense(&[0u8; 16]).unwrap();
    s.close().unwrap();
    let file = path.join(table::MANIFEST_FILE);
    let mut doc: serde_json::Value = serde_json::from_slice(&manifest_bytes(&path)).unwrap();
    let name = odd.file_name().unwrap().to_str().unwrap();
    doc["shards"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": name, "rows": 2}));
    std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();
    let err = Table::open(&path, true).unwrap_err().to_string();
    assert!(
        err.contains("dense float64 item_shape") && err.contains("share one schema"),
        "{err}"
    );
}

#[test]
fn a_sharded_table_scans_with_a_filter_on_its_cheap_columns() {
    use arrow_array::types::UInt64Type;
    use loaderx::arrow::{Filter, Scan};

    let tmp = tempfile::tempdir().unwrap();
    let (path, _) = sharded(tmp.path());
    let t = Table::open(&path, true).unwrap();
    let streams: Vec<(String, table::Column)> = t
        .into_columns()
        .into_iter()
        .map(|c| (c.name().to_string(), c))
        .collect();
    let scan = Scan::new(streams, Some("record_id".into())).unwrap();
    let (label_col, caption_col) = (
        scan.column_index("label").unwrap(),
        scan.column_index("caption").unwrap(),
    );
    // label > 100 (null rows fail), over rows 3..29, which span every shard.
    let keep: Filter = Box::new(|b| {
        let x = b.column(0).as_primitive::<Int32Type>();
        Ok(x.iter().map(|v| v.map(|v| v > 100)).collect())
    });
    let batches: Vec<_> = scan
        .project(vec![0, caption_col])
        .unwrap()
        .rows(std::iter::once(3..29).collect())
        .unwrap()
        .filter(vec![label_col], keep, 5)
        .unwrap()
        .max_rows(4)
        .collect::<Result<_, _>>()
        .unwrap();
    let mut got = Vec::new();
    for b in &batches {
        assert!(b.num_rows() <= 4);
        let ids = b.column(0).as_primitive::<UInt64Type>();
        let caps = b.column(1).as_string::<i32>();
        for k in 0..b.num_rows() {
            assert_eq!(caps.value(k), caption(ids.value(k)));
            got.push(ids.value(k));
        }
    }
    // Rows 20.. sit in the shard without nulls, where a missing label is 0.
    let want: Vec<u64> = (3..29)
        .filter(|&i| match i {
            20.. => label(i).unwrap_or(0) > 100,
            _ => label(i).is_some_and(|v| v > 100),
        })
        .collect();
    assert_eq!(got, want);
}

#[test]
fn an_abandoned_writes_shards_are_discarded_and_committed_ones_kept() {
    use loaderx::table::{TableWrite, WriteMode};
    use loaderx::Location;

    let tmp = tempfile::tempdir().unwrap();
    let (path, shards) = sharded(tmp.path());
    let before = manifest_bytes(&path);
    // A write's shards (named by its token): two left over (a failed
    // task's, a retried one's), plus another write's shard.
    let names = |p: &Path| -> Vec<String> {
        let m = table::read_manifest(p).unwrap();
        m.shards.into_iter().map(|s| s.name).collect()
    };
    let committed = names(&path);
    let mine = |k: u32| path.join(format!("shard-0000aaaa-{k:06}"));
    for k in 0..2 {
        write_shard(&mine(k), 0, 3, Codec::Raw, false);
    }
    let other = path.join("shard-0000bbbb-000000");
    write_shard(&other, 0, 3, Codec::Raw, false);
    let write = |p: &Path, token: &str, existed: bool| {
        TableWrite::resume(&Location::local(p), WriteMode::Append, token, existed).unwrap()
    };
    let removed = write(&path, "0000aaaa", false).discard().unwrap();
    assert_eq!(removed, ["shard-0000aaaa-000000", "shard-0000aaaa-000001"]);
    assert!(!mine(0).exists() && !mine(1).exists() && other.exists());
    for s in &shards {
        assert!(s.exists(), "committed shard {} was removed", s.display());
    }
    // The table directory holds a manifest: it stays, whatever the write
    // found when it began.
    assert_eq!(manifest_bytes(&path), before);
    assert_eq!(names(&path), committed);
    assert_eq!(
        write(&path, "0000bbbb", true).discard().unwrap(),
        ["shard-0000bbbb-000000"]
    );
    assert_eq!(names(&path), committed);

    // No manifest: the write's shards, then the lock and, when the write
    // made the directory, the directory go.
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    write_shard(
        &fresh.join("shard-0000cccc-000000"),
        0,
        3,
        Codec::Raw,
        false,
    );
    std::fs::write(fresh.join(table::MANIFEST_LOCK), b"").unwrap();
    write(&fresh, "0000cccc", true).discard().unwrap();
    assert!(fresh.exists() && std::fs::read_dir(&fresh).unwrap().next().is_none());
    std::fs::write(fresh.join(table::MANIFEST_LOCK), b"").unwrap();
    write(&fresh, "0000cccc", false).discard().unwrap();
    assert!(!fresh.exists());
    // Anything else in the directory keeps it.
    std::fs::create_dir(&fresh).unwrap();
    std::fs::write(fresh.join("notes.txt"), b"x").unwrap();
    write(&fresh, "0000cccc", false).discard().unwrap();
    assert!(fresh.join("notes.txt").exists());
}
