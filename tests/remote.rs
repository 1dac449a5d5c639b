//! Tables on a remote location through `loaderx::Location`, served over
//! HTTP by a small server on 127.0.0.1 (`common::http`): a table opens with
//! one listing and one concurrent round of fetches, gathers, scans and the
//! DataLoader read exactly what the local table holds, gathers plan their
//! requests (merged near ranges, one request for a far record, none for a
//! cache hit), transient server errors are retried, and an object that
//! changes under an open table is `Corrupted`.

#![cfg(feature = "http")]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::http::HttpServer;
use loaderx::arrow::Scan;
use loaderx::loader::{BatchColumn as Batched, DataLoader, Options};
use loaderx::sampler::Mode;
use loaderx::table::{self, Table};
use loaderx::{CacheOptions, Codec, DType, Error, Location, Packed, Records, Schema, Store};

const N: u64 = 400;

/// A plain table in `dir`: `x` (dense, 64-byte records, zstd), `r` (ragged
/// i32, raw) and `y` (i64 scalars, raw).
fn plain_table(dir: &Path) {
    let mut x = Store::create(
        dir.join("x"),
        Schema::dense(DType::U8, &[64]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = (0..N * 64).map(|i| (i * 7 % 251) as u8).collect();
    x.append_dense(&bytes).unwrap();
    x.close().unwrap();
    let mut r = Store::create(dir.join("r"), Schema::ragged(DType::I32), Codec::Raw, None).unwrap();
    let mut packed = Packed::default();
    for i in 0..N {
        let vals: Vec<u8> = (0..(i % 9 + 1) as i32)
            .flat_map(|v| (v * i as i32).to_le_bytes())
            .collect();
        packed.push(&[i % 9 + 1], &vals);
    }
    r.append_ragged(&packed).unwrap();
    r.close().unwrap();
    let mut y = Store::create(
        dir.join("y"),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    let ys: Vec<u8> = (0..N as i64).flat_map(|v| (v * 3).to_le_bytes()).collect();
    y.append_dense(&ys).unwrap();
    y.close().unwrap();
}

fn served_table() -> (tempfile::TempDir, HttpServer) {
    let tmp = tempfile::tempdir().unwrap();
    plain_table(&tmp.path().join("t"));
    let server = HttpServer::start(tmp.path());
    (tmp, server)
}

fn open_remote(url: &str) -> Table {
    Table::open_at(&Location::parse(url, &[]).unwrap(), true).unwrap()
}

fn same_columns(a: &Table, b: &Table, idx: &[u64]) {
    for (ca, cb) in a.columns().iter().zip(b.columns()) {
        assert_eq!(ca.name(), cb.name());
        if ca.schema().record_width().is_some() {
            assert_eq!(
                ca.gather_dense(idx).unwrap().as_slice(),
                cb.gather_dense(idx).unwrap().as_slice(),
                "{}",
                ca.name()
            );
        } else {
            let ra = ca.gather_ragged(idx).unwrap();
            let rb = cb.gather_ragged(idx).unwrap();
            for k in 0..idx.len() {
                let (a, b) = (ra.record(k), rb.record(k));
                assert_eq!(a.payload, b.payload, "{}", ca.name());
                assert!(a.dims().eq(b.dims()), "{}", ca.name());
            }
        }
    }
}

#[test]
fn a_remote_table_reads_like_the_local_one() {
    let (tmp, server) = served_table();
    let local = Table::open(tmp.path().join("t"), true).unwrap();
    let remote = open_remote(&format!("{}/t", server.url));
    assert_eq!(remote.num_rows(), N);
    assert_eq!(remote.column_names(), local.column_names());
    // One listing, then every meta.zr at once; no request per record.
    assert_eq!(server.count("PROPFIND"), 1);
    assert_eq!(server.count("GET"), 4, "{:?}", server.requests());
    let idx: Vec<u64> = (0..120).map(|i| (i * 37 + 11) % N).collect();
    same_columns(&remote, &local, &idx);
    let all: Vec<u64> = (0..N).collect();
    same_columns(&remote, &local, &all);

    // The table scan and the DataLoader over the remote columns.
    let scan = |t: &Table| {
        let streams: Vec<(String, &table::Column)> = t
            .columns()
            .iter()
            .map(|c| (c.name().to_string(), c))
            .collect();
        let mut scan = Scan::new(streams, Some("record_id".into()))
            .unwrap()
            .max_rows(57);
        let mut batches = Vec::new();
        while let Some(b) = scan.next_batch().unwrap() {
            batches.push(b);
        }
        batches
    };
    assert_eq!(scan(&remote), scan(&local));
    let loader = |t: Table| {
        let shared: Vec<(String, Arc<table::Column>)> = t
            .into_columns()
            .into_iter()
            .map(|c| (c.name().to_string(), Arc::new(c)))
            .collect();
        let l = DataLoader::new(
            shared,
            Options {
                batch_size: 16,
                mode: Mode::Cyclic,
                seed: 9,
                ..Options::default()
            },
        )
        .unwrap();
        (0..6)
            .map(|_| {
                let b = l.next().unwrap();
                // Columns in name order: r, x, y.
                match &b.columns[1] {
                    Batched::Dense(x) => x.as_slice().to_vec(),
                    _ => panic!("x is dense"),
                }
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(loader(remote), loader(local));
}

#[test]
fn a_gather_merges_near_ranges_and_fetches_far_ones_alone() {
    let (tmp, server) = served_table();
    let remote = open_remote(&format!("{}/t", server.url));
    let y = remote.column("y").unwrap();
    server.reset();
    // 200 neighbouring 8-byte records: one request.
    let near: Vec<u64> = (100..300).rev().collect();
    let got = y.gather_dense(&near).unwrap();
    assert_eq!(server.count("GET"), 1, "{:?}", server.requests());
    let want: Vec<u8> = near
        .iter()
        .flat_map(|&i| (i as i64 * 3).to_le_bytes())
        .collect();
    assert_eq!(got.as_slice(), want.as_slice());
    drop(tmp);
}

#[test]
fn a_cache_serves_repeated_reads_without_requests() {
    let (tmp, server) = served_table();
    let cache = tmp.path().join("cache");
    let opts = CacheOptions {
        dir: cache.clone(),
        bytes: 64 << 20,
    };
    let at = Location::parse_cached(&format!("{}/t", server.url), &[], Some(&opts)).unwrap();
    let t = Table::open_at(&at, true).unwrap();
    let idx: Vec<u64> = (0..N).step_by(3).collect();
    let first = t.column("x").unwrap().gather_dense(&idx).unwrap();
    server.reset();
    let again = t.column("x").unwrap().gather_dense(&idx).unwrap();
    assert_eq!(server.requests().len(), 0);
    assert_eq!(first.as_slice(), again.as_slice());
    let small = CacheOptions {
        dir: cache,
        bytes: 1 << 20,
    };
    let err = Location::parse_cached(&format!("{}/t", server.url), &[], Some(&small)).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidValue(m) if m.contains("cache_bytes")),
        "{err}"
    );
}

#[test]
fn transient_errors_are_retried_and_lasting_ones_reported() {
    let tmp = tempfile::tempdir().unwrap();
    plain_table(&tmp.path().join("t"));
    let local = Table::open(tmp.path().join("t"), true).unwrap();
    // Every other ranged read answers 503 first.
    let flaky = HttpServer::with_rule(
        tmp.path(),
        Arc::new(|n, r| (r.range.is_some() && n % 2 == 0).then_some(503)),
    );
    let remote = open_remote(&format!("{}/t", flaky.url));
    let idx: Vec<u64> = (0..N).step_by(7).collect();
    same_columns(&remote, &local, &idx);
    assert!(flaky.requests().len() > 8);

    let down = HttpServer::with_rule(
        tmp.path(),
        Arc::new(|_, r| r.range.is_some().then_some(500)),
    );
    let opts = [
        ("max_retries".to_string(), "1".to_string()),
        ("retry_timeout".to_string(), "2s".to_string()),
    ];
    let t = Table::open_at(
        &Location::parse(&format!("{}/t", down.url), &opts).unwrap(),
        true,
    )
    .unwrap();
    let err = t.column("y").unwrap().gather_dense(&[0, 1]).unwrap_err();
    match &err {
        Error::Io { path, source } => {
            assert!(path.ends_with("y/data.zr"), "{}", path.display());
            assert_eq!(source.kind(), std::io::ErrorKind::NotConnected, "{source}");
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn an_object_replaced_under_an_open_table_is_corrupted() {
    let (tmp, server) = served_table();
    let remote = open_remote(&format!("{}/t", server.url));
    let data = tmp.path().join("t/y/data.zr");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes.reverse();
    // Same size, new ETag (the server's ETag includes the mtime).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&data, &bytes).unwrap();
    let err = remote
        .column("y")
        .unwrap()
        .gather_dense(&[1, 2])
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupted { file, .. } if file.ends_with("y/data.zr")),
        "{err:?}"
    );
}

#[test]
fn remote_locations_open_read_only_and_name_bad_uris() {
    let (_tmp, server) = served_table();
    let at = Location::parse(&format!("{}/t", server.url), &[]).unwrap();
    let err = Table::open_at(&at, false).unwrap_err();
    assert!(err.to_string().contains(&server.url), "{err}");
    let err = Store::open_at(&at.join("y"), false).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Refused {
                refusal: loaderx::error::Refusal::RemoteWritable,
                ..
            }
        ),
        "{err}"
    );
    let s = Store::open_at(&at.join("y"), true).unwrap();
    assert_eq!(s.len(), N);
    for bad in [
        "ftp://h/x",
        "s3:///x",
        "https://u:secret@h/x",
        "https://h/x?sig=secret",
    ] {
        let err = Location::parse(bad, &[]).unwrap_err();
        let credentials = bad.contains("secret");
        assert!(
            match err {
                Error::Refused {
                    refusal: loaderx::error::Refusal::CredentialsInUri,
                    ..
                } => credentials,
                Error::InvalidValue(_) => !credentials,
                _ => false,
            },
            "{bad}: {err}"
        );
        assert!(!err.to_string().contains("secret"), "{err}");
    }
    let err = Location::parse(&server.url, &[("no_such_option".into(), "v".into())]).unwrap_err();
    assert!(err.to_string().contains("no_such_option"), "{err}");
    let missing = Table::open_at(
        &Location::parse(&format!("{}/nothing", server.url), &[]).unwrap(),
        true,
    )
    .unwrap_err();
    assert!(matches!(missing, Error::Missing { .. }), "{missing:?}");
}

#[test]
fn a_sharded_manifest_with_its_objects_opens_without_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sh");
    let mut dirs = Vec::new();
    for (lo, rows) in [(0, 10), (10, 5)] {
        let shard = table::new_shard(&root).unwrap();
        common::int64_shard(&shard, lo, rows, false);
        dirs.push(shard);
    }
    table::commit_shards(&root, &dirs).unwrap();
    // Record each shard's objects in the manifest, as a remote writer does.
    let path = root.join("manifest.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for s in doc["shards"].as_array_mut().unwrap() {
        let dir = root.join(s["name"].as_str().unwrap());
        let mut objects = serde_json::Map::new();
        for e in walk(&dir) {
            let size = std::fs::metadata(dir.join(&e)).unwrap().len();
            objects.insert(e, size.into());
        }
        s["objects"] = objects.into();
    }
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let server = HttpServer::start(tmp.path());
    let t = open_remote(&format!("{}/sh", server.url));
    assert_eq!(t.num_rows(), 15);
    assert_eq!(server.count("PROPFIND"), 0, "{:?}", server.requests());
    let v = t
        .column("x")
        .unwrap()
        .gather_dense(&[14, 0, 9, 10])
        .unwrap();
    let want: Vec<u8> = [14i64, 0, 9, 10]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(v.as_slice(), want.as_slice());
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            out.extend(walk(&p).into_iter().map(|r| format!("{name}/{r}")));
        } else {
            out.push(name);
        }
    }
    out
}
