//! Versions of sharded tables: every commit a new immutable version, older
//! ones opening as they were, a `manifest.json` that lags one behind (a
//! commit killed between its two writes) still opening the latest, a table
//! from before versions becoming versioned on its next commit, tags, and a
//! cleanup that removes only what no kept version needs.

use std::path::Path;

use loaderx::table::{self, Table, VersionRef, MANIFEST_FILE, VERSIONS_DIR};
use loaderx::Records;
use loaderx::{Codec, DType, Error, Location, Schema, Store};

/// A new shard of `table` holding `id` (i64 scalars `lo..hi`).
fn shard(table: &Path, lo: i64, hi: i64) -> std::path::PathBuf {
    let dir = table::new_shard(table).unwrap();
    let mut id = Store::create(
        dir.join("id"),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let ids: Vec<u8> = (lo..hi).flat_map(|i| i.to_le_bytes()).collect();
    id.append_dense(&ids).unwrap();
    id.close().unwrap();
    dir
}

fn commit(table: &Path, lo: i64, hi: i64) -> u64 {
    let s = shard(table, lo, hi);
    table::commit_shards(table, &[s]).unwrap()
}

fn ids_of(t: &Table) -> Vec<i64> {
    let col = t.column("id").unwrap();
    let idx: Vec<u64> = (0..col.len()).collect();
    let buf = col.gather_dense(&idx).unwrap();
    buf.as_slice()
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn open(path: &Path, want: VersionRef) -> loaderx::Result<Table> {
    Table::open_version(&Location::local(path), &want)
}

fn range(lo: i64, hi: i64) -> Vec<i64> {
    (lo..hi).collect()
}

/// A table of three versions: rows 0..10, then 10..15, then 15..30.
fn three_versions(path: &Path) {
    commit(path, 0, 10);
    commit(path, 10, 15);
    commit(path, 15, 30);
}

#[test]
fn every_commit_is_a_version_and_old_versions_open_as_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    three_versions(&path);
    let latest = Table::open(&path, true).unwrap();
    assert_eq!(latest.version(), Some(3));
    assert_eq!(ids_of(&latest), range(0, 30));
    for (v, hi) in [(1, 10), (2, 15), (3, 30)] {
        let t = open(&path, VersionRef::Number(v)).unwrap();
        assert_eq!(t.version(), Some(v));
        assert_eq!(ids_of(&t), range(0, hi), "version {v}");
    }
    let listed = table::list_versions(&Location::local(&path)).unwrap();
    let seen: Vec<(u64, u64, Option<&str>)> = listed
        .iter()
        .map(|m| (m.version(), m.num_rows(), m.operation.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1, 10, Some("create")),
            (2, 15, Some("append")),
            (3, 30, Some("append"))
        ]
    );
    assert!(listed.iter().all(|m| m.timestamp_ms.is_some()));
    // manifest.json is the latest version, byte for byte.
    let pointer = std::fs::read(path.join(MANIFEST_FILE)).unwrap();
    let v3 = std::fs::read(path.join(VERSIONS_DIR).join("00000000000000000003.json")).unwrap();
    assert_eq!(pointer, v3);
    let e = open(&path, VersionRef::Number(4)).unwrap_err().to_string();
    assert!(
        e.contains("no version 4")
            && e.contains("never committed")
            && e.contains("latest version is 3"),
        "{e}"
    );
    let e = open(&path, VersionRef::Number(0)).unwrap_err();
    assert!(matches!(e, Error::InvalidValue(_)), "{e}");
}

#[test]
fn a_lagging_manifest_still_opens_the_latest_and_the_next_commit_follows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    three_versions(&path);
    // A commit killed between its version file and manifest.json.
    let v2 = std::fs::read(path.join(VERSIONS_DIR).join("00000000000000000002.json")).unwrap();
    std::fs::write(path.join(MANIFEST_FILE), &v2).unwrap();
    let t = Table::open(&path, true).unwrap();
    assert_eq!((t.version(), ids_of(&t)), (Some(3), range(0, 30)));
    assert_eq!(commit(&path, 30, 31), 31);
    let t = Table::open(&path, true).unwrap();
    assert_eq!((t.version(), ids_of(&t)), (Some(4), range(0, 31)));
}

#[test]
fn a_table_from_before_versions_is_version_1_until_its_next_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    commit(&path, 0, 10);
    // What a manifest looked like before versions: no version keys and no
    // version files.
    let raw = std::fs::read(path.join(MANIFEST_FILE)).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    for k in ["table_version", "timestamp", "operation"] {
        doc.as_object_mut().unwrap().remove(k);
    }
    std::fs::write(path.join(MANIFEST_FILE), serde_json::to_vec(&doc).unwrap()).unwrap();
    std::fs::remove_dir_all(path.join(VERSIONS_DIR)).unwrap();

    let t = Table::open(&path, true).unwrap();
    assert_eq!(t.version(), Some(1));
    assert_eq!(
        ids_of(&open(&path, VersionRef::Number(1)).unwrap()),
        range(0, 10)
    );
    let listed = table::list_versions(&Location::local(&path)).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].version(), listed[0].timestamp_ms), (1, None));

    commit(&path, 10, 12);
    assert_eq!(Table::open(&path, true).unwrap().version(), Some(2));
    assert_eq!(
        ids_of(&open(&path, VersionRef::Number(1)).unwrap()),
        range(0, 10)
    );
    let listed = table::list_versions(&Location::local(&path)).unwrap();
    assert_eq!(
        listed.iter().map(|m| m.version()).collect::<Vec<_>>(),
        [1, 2]
    );
}

#[test]
fn tags_name_versions_once() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    three_versions(&path);
    let at = Location::local(&path);
    assert_eq!(table::tag(&at, "baseline", Some(1)).unwrap(), 1);
    assert_eq!(table::tag(&at, "head", None).unwrap(), 3);
    assert_eq!(
        table::tags(&at).unwrap(),
        [("baseline".to_owned(), 1), ("head".to_owned(), 3)]
    );
    let t = open(&path, VersionRef::Tag("baseline".into())).unwrap();
    assert_eq!((t.version(), ids_of(&t)), (Some(1), range(0, 10)));

    let e = table::tag(&at, "baseline", Some(2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("already has tag 'baseline' (version 1)"), "{e}");
    for bad in ["", "7", "a/b"] {
        let e = table::tag(&at, bad, None).unwrap_err();
        assert!(matches!(e, Error::InvalidValue(_)), "{bad:?}: {e}");
    }
    let e = table::tag(&at, "future", Some(9)).unwrap_err().to_string();
    assert!(e.contains("no version 9"), "{e}");
    let e = open(&path, VersionRef::Tag("nope".into()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no tag 'nope'") && e.contains("'baseline', 'head'"),
        "{e}"
    );

    table::untag(&at, "baseline").unwrap();
    assert_eq!(table::tags(&at).unwrap(), [("head".to_owned(), 3)]);
    let e = table::untag(&at, "baseline").unwrap_err().to_string();
    assert!(e.contains("no tag 'baseline'"), "{e}");
    // A tag name can be used again once removed.
    table::tag(&at, "baseline", Some(2)).unwrap();
    assert_eq!(
        open(&path, VersionRef::Tag("baseline".into()))
            .unwrap()
            .version(),
        Some(2)
    );
}

/// Replaces the latest version of the table by one naming only the shards
/// `keep` of it (what a compaction commits), as version `v`.
fn commit_only(path: &Path, keep: &[&str], v: u64) {
    let raw = std::fs::read(path.join(MANIFEST_FILE)).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let shards: Vec<serde_json::Value> = doc["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| keep.contains(&s["name"].as_str().unwrap()))
        .cloned()
        .collect();
    doc["shards"] = serde_json::Value::Array(shards);
    doc["table_version"] = v.into();
    let bytes = serde_json::to_vec(&doc).unwrap();
    std::fs::write(
        path.join(VERSIONS_DIR).join(format!("{v:020}.json")),
        &bytes,
    )
    .unwrap();
    std::fs::write(path.join(MANIFEST_FILE), &bytes).unwrap();
}

fn shard_names(path: &Path) -> Vec<String> {
    let raw = std::fs::read(path.join(MANIFEST_FILE)).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    doc["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn cleanup_removes_only_what_no_kept_version_or_tag_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    three_versions(&path); // shards a (v1), b (v2), c (v3)
    let names = shard_names(&path);
    let (a, b, c) = (&names[0], &names[1], &names[2]);
    commit_only(&path, &[c], 4); // v4: only c
    let at = Location::local(&path);
    table::tag(&at, "two", Some(2)).unwrap();
    // Nothing is old enough yet.
    assert_eq!(table::cleanup(&at, 60_000, 1).unwrap(), 0);
    assert_eq!(table::list_versions(&at).unwrap().len(), 4);
    let e = table::cleanup(&at, 0, 0).unwrap_err().to_string();
    assert!(e.contains("keep_last"), "{e}");

    // Versions 1 and 3 go; 2 is tagged (it needs a and b), 4 is the latest.
    let freed = table::cleanup(&at, 0, 1).unwrap();
    let left: Vec<u64> = table::list_versions(&at)
        .unwrap()
        .iter()
        .map(|m| m.version())
        .collect();
    assert_eq!(left, [2, 4]);
    assert!(freed > 0);
    assert!(path.join(a).is_dir() && path.join(b).is_dir() && path.join(c).is_dir());
    assert_eq!(
        ids_of(&open(&path, VersionRef::Number(2)).unwrap()),
        range(0, 15)
    );
    let e = open(&path, VersionRef::Number(1)).unwrap_err().to_string();
    assert!(e.contains("removed by a cleanup"), "{e}");

    // Untagged, version 2 goes, and with it the shards only it named.
    table::untag(&at, "two").unwrap();
    let freed = table::cleanup(&at, 0, 1).unwrap();
    assert!(freed > 0);
    assert!(!path.join(a).exists() && !path.join(b).exists());
    assert_eq!(ids_of(&Table::open(&path, true).unwrap()), range(15, 30));
    assert!(!path.join("_cleanup.json").exists());
}

#[test]
fn an_interrupted_cleanup_is_finished_by_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    three_versions(&path);
    let names = shard_names(&path);
    commit_only(&path, &[&names[2]], 4);
    // What a cleanup killed after writing its list leaves.
    std::fs::write(
        path.join("_cleanup.json"),
        format!(
            "{{\"files\": [\"{VERSIONS_DIR}/00000000000000000001.json\"], \"shards\": [\"{}\"]}}",
            names[0]
        ),
    )
    .unwrap();
    // keep_last=4 keeps every version this time: only the pending list is
    // finished.
    let freed = table::cleanup(&Location::local(&path), 0, 4).unwrap();
    assert!(freed > 0);
    assert!(!path.join(&names[0]).exists() && path.join(&names[1]).exists());
    assert!(!path.join("_cleanup.json").exists());
    let left: Vec<u64> = table::list_versions(&Location::local(&path))
        .unwrap()
        .iter()
        .map(|m| m.version())
        .collect();
    assert_eq!(left, [2, 3, 4]);
    // A pending list naming anything but version files and shards is
    // refused.
    std::fs::write(
        path.join("_cleanup.json"),
        "{\"files\": [\"manifest.json\"], \"shards\": []}",
    )
    .unwrap();
    let e = table::cleanup(&Location::local(&path), 0, 1).unwrap_err();
    assert!(matches!(e, Error::Corrupted { .. }), "{e}");
    assert!(path.join(MANIFEST_FILE).exists());
}

#[test]
fn a_cleanup_removes_the_temporary_files_of_killed_commits_and_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    three_versions(&path);
    let at = Location::local(&path);
    table::tag(&at, "best", Some(2)).unwrap();
    // What commits and tags killed before their rename leave: a version
    // file's temporary (half written), the manifest's, a tag's, a pending
    // cleanup list's.
    let temps = [
        path.join(VERSIONS_DIR)
            .join(".00000000000000000004.json.123.abcd"),
        path.join(".manifest.json.123.abcd"),
        path.join(table::TAGS_DIR).join(".other.ab12"),
        path.join("._cleanup.json.ab12"),
    ];
    for t in &temps {
        std::fs::write(t, b"{\"vers").unwrap();
    }
    table::cleanup(&at, 0, 3).unwrap();
    for t in &temps {
        assert!(!t.exists(), "{} is left", t.display());
    }
    // The versions, the tag and the commit lock stay; the next commit works.
    assert_eq!(table::list_versions(&at).unwrap().len(), 3);
    assert_eq!(table::tags(&at).unwrap(), [("best".to_string(), 2)]);
    assert!(path.join(table::MANIFEST_LOCK).exists());
    commit(&path, 30, 31);
    assert_eq!(table::list_versions(&at).unwrap().len(), 4);
    assert_eq!(
        ids_of(&open(&path, VersionRef::Latest).unwrap()),
        range(0, 31)
    );
}

#[test]
fn a_split_saves_its_views_as_one_set_and_a_cleanup_removes_what_a_killed_one_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    commit(&path, 0, 10);
    let at = Location::local(&path);
    let fractions = [("train".to_string(), 0.7), ("test".to_string(), 0.3)];
    let views = table::split(&at, None, &fractions, 5, None).unwrap();
    assert_eq!(
        views
            .iter()
            .map(|v| (v.name.as_str(), v.rows))
            .collect::<Vec<_>>(),
        [("train", 7), ("test", 3)]
    );
    let set = views[0].set.clone().unwrap();
    assert!(views.iter().all(|v| v.set.as_ref() == Some(&set)));
    // One commit point: the set's file; no view file of its own.
    let sets = path.join(table::VIEWS_DIR).join("_sets");
    assert!(sets.join(format!("{set}.json")).is_file());
    assert!(!path.join(table::VIEWS_DIR).join("train.json").exists());
    let mut rows: Vec<i64> = ["train", "test"]
        .iter()
        .flat_map(|n| ids_of(&Table::open_view(&at, n).unwrap()))
        .collect();
    rows.sort_unstable();
    assert_eq!(rows, range(0, 10));
    // The same names again, or any of them, are refused, naming them.
    match table::split(&at, None, &fractions, 5, None) {
        Err(Error::InvalidValue(m)) => assert!(m.contains("views ['test', 'train']"), "{m}"),
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    match table::split(&at, None, &[("a".into(), 0.6), ("b".into(), 0.6)], 5, None) {
        Err(Error::InvalidValue(m)) => assert!(m.contains("fractions must sum to 1"), "{m}"),
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    // A view dropped from the set: the other stays, in a new set.
    let test_rows = ids_of(&Table::open_view(&at, "test").unwrap());
    table::drop_view(&at, "train").unwrap();
    let left = table::list_views(&at).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].name, "test");
    assert_ne!(left[0].set.as_ref(), Some(&set));
    assert_eq!(ids_of(&Table::open_view(&at, "test").unwrap()), test_rows);
    // What a killed save leaves (a row file no view names, a temporary
    // file) goes with the next cleanup; the views stay.
    let stray = path.join(table::VIEWS_DIR).join("gone-abcd.u64");
    std::fs::write(&stray, 7u64.to_le_bytes()).unwrap();
    let tmp = sets.join(".split-x.json.1234");
    std::fs::write(&tmp, b"{").unwrap();
    table::cleanup(&at, 0, 1).unwrap();
    assert!(!stray.exists() && !tmp.exists());
    assert_eq!(ids_of(&Table::open_view(&at, "test").unwrap()), test_rows);
    table::drop_view(&at, "test").unwrap();
    assert!(table::list_views(&at).unwrap().is_empty());
}
