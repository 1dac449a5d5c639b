//! The one write path (`loaderx::table::TableWrite`) on local tables: shards
//! written on several threads and committed in task order, the target
//! checks of a new table and of an append, a column's layout decided over
//! every shard (dense here and there of two shapes becomes ragged), and
//! what a failed or abandoned write leaves (nothing of its own).

use std::path::Path;

use loaderx::table::{self, Table, TableWrite, WriteMode};
use loaderx::Records;
use loaderx::{Codec, DType, Error, Location, Schema, Store};

/// A plain table in `dir`: `id` (i64 scalars `lo..hi`) and `v` (u8 tensors
/// of `shape`, every byte the row's id).
fn fill(dir: &Path, lo: u64, hi: u64, shape: &[u64]) -> loaderx::Result<()> {
    let mut id = Store::create(
        dir.join("id"),
        Schema::dense(DType::I64, &[])?,
        Codec::Zstd,
        None,
    )?;
    let ids: Vec<u8> = (lo..hi).flat_map(|i| (i as i64).to_le_bytes()).collect();
    id.append_dense(&ids)?;
    id.close()?;
    let mut v = Store::create(
        dir.join("v"),
        Schema::dense(DType::U8, shape)?,
        Codec::Zstd,
        None,
    )?;
    let width: u64 = shape.iter().product();
    let bytes: Vec<u8> = (lo..hi)
        .flat_map(|i| vec![i as u8; width as usize])
        .collect();
    v.append_dense(&bytes)?;
    v.close()
}

fn ids(path: &Path) -> Vec<i64> {
    let t = Table::open(path, true).unwrap();
    let col = t.column("id").unwrap();
    let idx: Vec<u64> = (0..col.len()).collect();
    let buf = col.gather_dense(&idx).unwrap();
    buf.as_slice()
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn entries(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn shards_are_written_in_parallel_and_committed_in_task_order() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let write = TableWrite::begin(&Location::local(&path), WriteMode::Create).unwrap();
    assert!(!write.existed());
    let tasks: Vec<(u64, u64)> = (0..7).map(|k| (k * 5, k * 5 + 5)).collect();
    let written = write
        .write_shards(tasks.into_iter(), 3, |(lo, hi), dir| {
            fill(dir, lo, hi, &[2])
        })
        .unwrap();
    assert_eq!(written.len(), 7);
    assert!(written
        .iter()
        .all(|s| s.rows == 5 && s.name.starts_with(&format!("shard-{}-", write.token()))));
    // A retried task's shard that the commit does not name goes after it.
    let (stray, ()) = write.write_shard(|dir| fill(dir, 0, 1, &[2])).unwrap();
    let names: Vec<String> = written.iter().map(|s| s.name.clone()).collect();
    assert_eq!(write.commit(&names).unwrap(), 35);
    assert_eq!(ids(&path), (0..35).collect::<Vec<i64>>());
    assert!(!path.join(&stray.name).exists());
    let manifest = table::read_manifest(&path).unwrap();
    assert_eq!(
        manifest
            .shards
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>(),
        names
    );
}

#[test]
fn a_new_table_needs_an_empty_target_and_an_append_a_sharded_one() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("notes.txt"), b"x").unwrap();
    let err = TableWrite::begin(&Location::local(&full), WriteMode::Create).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert!(err.to_string().contains("not empty") && err.to_string().contains("notes.txt"));
    assert_eq!(entries(&full), ["notes.txt"]);

    let plain = tmp.path().join("plain");
    fill(&plain, 0, 3, &[]).unwrap();
    let err = TableWrite::begin(&Location::local(&plain), WriteMode::Append).unwrap_err();
    assert!(
        matches!(err, Error::InvalidValue(_)) && err.to_string().contains("plain table"),
        "{err}"
    );

    // An append to a sharded table adds a version of rows after its own.
    let path = tmp.path().join("t");
    for (lo, hi) in [(0, 4), (4, 9)] {
        let write = TableWrite::begin(&Location::local(&path), WriteMode::Append).unwrap();
        let (shard, ()) = write.write_shard(|dir| fill(dir, lo, hi, &[2])).unwrap();
        assert_eq!(write.commit(&[shard.name]).unwrap(), hi);
    }
    assert_eq!(ids(&path), (0..9).collect::<Vec<i64>>());
    // A new table is refused there now, and nothing changes.
    let err = TableWrite::begin(&Location::local(&path), WriteMode::Create).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert_eq!(ids(&path), (0..9).collect::<Vec<i64>>());
}

#[test]
fn a_column_dense_of_two_shapes_becomes_ragged_in_every_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let write = TableWrite::begin(&Location::local(&path), WriteMode::Create).unwrap();
    let shapes: Vec<Vec<u64>> = vec![vec![2], vec![3, 1], vec![2]];
    let mut names = Vec::new();
    for (k, shape) in shapes.iter().enumerate() {
        let lo = k as u64 * 4;
        let (shard, ()) = write
            .write_shard(|dir| fill(dir, lo, lo + 4, shape))
            .unwrap();
        names.push(shard.name);
    }
    assert_eq!(write.commit(&names).unwrap(), 12);
    let t = Table::open(&path, true).unwrap();
    let v = t.column("v").unwrap();
    assert_eq!(v.schema().item_shape(), None, "v must be ragged");
    let id = t.column("id").unwrap();
    assert_eq!(id.schema().item_shape(), Some(&[][..]), "id stays dense");
    for i in 0..12u64 {
        let width = shapes[(i / 4) as usize].iter().product::<u64>() as usize;
        let rec = v.read_record(i).unwrap();
        assert!(rec.ends_with(&vec![i as u8; width]), "record {i}: {rec:?}");
    }
    // No leftover of the rewrite in any shard.
    for name in &names {
        assert!(entries(&path.join(name))
            .iter()
            .all(|e| !e.starts_with('.')));
    }
}

#[test]
fn a_failed_task_leaves_nothing_and_a_new_directory_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let write = TableWrite::begin(&Location::local(&path), WriteMode::Create).unwrap();
    let err = write
        .write_shards((0..6u64).map(|k| (k * 3, k * 3 + 3)), 2, |(lo, hi), dir| {
            if lo == 9 {
                return Err(Error::InvalidValue("task 3 failed".into()));
            }
            fill(dir, lo, hi, &[])
        })
        .unwrap_err();
    assert!(err.to_string().contains("task 3 failed"));
    // Only the write's lease, held until it is discarded.
    assert_eq!(entries(&path), ["_leases"]);
    write.discard().unwrap();
    assert!(!path.exists());

    // A commit that fails (columns of two dtypes) removes every shard of
    // the write and leaves the existing directory empty.
    std::fs::create_dir(&path).unwrap();
    let write = TableWrite::begin(&Location::local(&path), WriteMode::Create).unwrap();
    let (a, ()) = write.write_shard(|dir| fill(dir, 0, 2, &[])).unwrap();
    let (b, ()) = write
        .write_shard(|dir| {
            let mut id = Store::create(
                dir.join("id"),
                Schema::dense(DType::F64, &[])?,
                Codec::Raw,
                None,
            )?;
            id.append_dense(&[0u8; 16])?;
            id.close()?;
            let mut v = Store::create(
                dir.join("v"),
                Schema::dense(DType::U8, &[])?,
                Codec::Raw,
                None,
            )?;
            v.append_dense(&[0u8; 2])?;
            v.close()
        })
        .unwrap();
    let err = write.commit(&[a.name, b.name]).unwrap_err();
    assert!(matches!(err, Error::InvalidType(_)), "{err}");
    assert!(err.to_string().contains("expected dtype int64"), "{err}");
    assert!(
        path.exists() && entries(&path).is_empty(),
        "{:?}",
        entries(&path)
    );
}

#[test]
fn discard_removes_only_this_writes_uncommitted_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let first = TableWrite::begin(&Location::local(&path), WriteMode::Append).unwrap();
    let (kept, ()) = first.write_shard(|dir| fill(dir, 0, 2, &[])).unwrap();
    first.commit(std::slice::from_ref(&kept.name)).unwrap();
    let mine = TableWrite::begin(&Location::local(&path), WriteMode::Append).unwrap();
    let theirs = TableWrite::begin(&Location::local(&path), WriteMode::Append).unwrap();
    let (a, ()) = mine.write_shard(|dir| fill(dir, 2, 3, &[])).unwrap();
    let (b, ()) = theirs.write_shard(|dir| fill(dir, 2, 3, &[])).unwrap();
    // Resumed elsewhere from its token, the write knows its own shards.
    let resumed = TableWrite::resume(
        &Location::local(&path),
        WriteMode::Append,
        mine.token(),
        true,
    )
    .unwrap();
    assert_eq!(resumed.discard().unwrap(), std::slice::from_ref(&a.name));
    assert!(!path.join(&a.name).exists() && path.join(&b.name).exists());
    assert!(path.join(&kept.name).exists());
    assert_eq!(ids(&path), vec![0, 1]);
    // A shard of another write is not this write's to commit.
    let err = mine.commit(&[b.name]).unwrap_err();
    assert!(
        err.to_string().contains("not a shard of this write"),
        "{err}"
    );
    assert!(TableWrite::resume(&Location::local(&path), WriteMode::Append, "../x", true).is_err());
}

#[test]
fn an_append_made_impossible_by_a_concurrent_change_of_columns_is_a_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let at = Location::local(&path);
    let first = TableWrite::begin(&at, WriteMode::Create).unwrap();
    let (s, ()) = first.write_shard(|dir| fill(dir, 0, 4, &[])).unwrap();
    first.commit(&[s.name]).unwrap();
    // An append begins on version 1 (column x)...
    let write = TableWrite::begin(&at, WriteMode::Append).unwrap();
    let (s, ()) = write.write_shard(|dir| fill(dir, 4, 8, &[])).unwrap();
    // ...while another writer adds a column (version 2).
    let cw = table::ColumnsWrite::begin(&at, None).unwrap();
    let dir = cw.new_group(0).unwrap();
    fill_named(&dir, "y", 4);
    cw.finish_group(0, &dir).unwrap();
    cw.commit().unwrap();
    let err = write.commit(&[s.name]).unwrap_err();
    assert!(matches!(err, Error::CommitConflict(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("version 1") && msg.contains("version 2"),
        "{msg}"
    );
    // Nothing of the append is left, and the table is version 2.
    let t = Table::open(&path, true).unwrap();
    assert_eq!((t.version(), t.num_rows()), (Some(2), 4));
}

/// A store of `rows` int64 zeros named `name` in `dir`.
fn fill_named(dir: &Path, name: &str, rows: usize) {
    let mut s = Store::create(
        dir.join(name),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    s.append_dense(&vec![0u8; rows * 8]).unwrap();
    s.close().unwrap();
}
