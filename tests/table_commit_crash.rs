//! Crash-point sweep of a shard commit: a child process commits a shard
//! and is SIGKILLed at each of the commit's file operations in turn (the
//! `fault-injection` build's `kill` mode). After every kill the table opens
//! with the old shard set or the new one (version 1 or 2; version 1 opens
//! as it was either way), never anything else, its rows intact, and a
//! fresh commit of the same shard (or a later one) then succeeds.

#![cfg(feature = "fault-injection")]

mod common;

use std::path::{Path, PathBuf};

use loaderx::fault::{self, Fault};
use loaderx::table::{self, Table, VersionRef};
use loaderx::Records;

const CHILD_DIR: &str = "LOADERX_TEST_COMMIT_DIR";
const CHILD_AT: &str = "LOADERX_TEST_COMMIT_AT";

/// The table's column `x`, read whole.
fn ids(path: &Path) -> Vec<i64> {
    column_x(&Table::open(path, true).unwrap())
}

fn column_x(t: &Table) -> Vec<i64> {
    let x = t.column("x").unwrap();
    let idx: Vec<u64> = (0..x.len()).collect();
    let buf = x.gather_dense(&idx).unwrap();
    buf.as_slice()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs the child test `name` on the table at `path` (in the environment
/// variable `var`), killed at fault point `at`: whether it was killed (it
/// must otherwise have succeeded).
fn run_child(name: &str, var: &str, path: &Path, at: u64) -> bool {
    let status = common::rerun(name)
        .env(var, path)
        .env(CHILD_AT, at.to_string())
        .output()
        .unwrap();
    let killed = std::os::unix::process::ExitStatusExt::signal(&status.status) == Some(9);
    assert!(
        killed || status.status.success(),
        "step {at}: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    killed
}

/// The child: commits the one uncommitted shard of the table in
/// `$LOADERX_TEST_COMMIT_DIR`, killed at its fault point
/// `$LOADERX_TEST_COMMIT_AT`. A no-op when run as a plain test.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn commit_child() {
    let (Some(dir), Some(at)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_AT)) else {
        return;
    };
    let path = PathBuf::from(dir);
    let at: u64 = at.to_str().unwrap().parse().unwrap();
    let extra = std::fs::read_to_string(path.join("extra")).unwrap();
    std::fs::remove_file(path.join("extra")).unwrap();
    fault::skip_fsync(true); // a SIGKILL never loses the page cache
    fault::arm(at, Fault::Kill);
    table::commit_shards(&path, &[path.join(extra)]).unwrap();
    fault::disarm();
}

#[test]
fn a_commit_killed_at_any_step_leaves_the_old_or_the_new_table() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    let first = table::new_shard(&pristine).unwrap();
    common::int64_shard(&first, 0, 5, true);
    table::commit_shards(&pristine, &[first]).unwrap();
    // Without nulls: the commit first gives it an all-valid stream.
    let extra = table::new_shard(&pristine).unwrap();
    common::int64_shard(&extra, 100, 3, false);
    let name = extra.file_name().unwrap().to_str().unwrap().to_owned();
    let old: Vec<i64> = (0..5).collect();
    let new: Vec<i64> = (0..5).chain(100..103).collect();

    let (mut killed_old, mut killed_new) = (0, 0);
    for at in 0.. {
        assert!(at < 500, "the commit never completes");
        let path = tmp.path().join(format!("try-{at}"));
        common::copy_tree(&pristine, &path);
        std::fs::write(path.join("extra"), &name).unwrap();
        let killed = run_child("commit_child", CHILD_DIR, &path, at);
        let got = ids(&path);
        assert!(got == old || got == new, "step {at}: {got:?}");
        if !killed {
            assert_eq!(got, new, "step {at}: the commit returned");
            break;
        }
        // The old table is version 1 and the new one version 2; version 1
        // opens as it was either way.
        let version = Table::open(&path, true).unwrap().version();
        assert_eq!(version, Some(if got == old { 1 } else { 2 }), "step {at}");
        let v1 = Table::open_version(&loaderx::Location::local(&path), &VersionRef::Number(1));
        assert_eq!(column_x(&v1.unwrap()), old, "step {at}");
        if got == old {
            killed_old += 1;
            // What the killed commit left behind never blocks the next one.
            let rows = table::commit_shards(&path, &[path.join(&name)]).unwrap();
            assert_eq!((rows, ids(&path)), (8, new.clone()), "step {at}");
        } else {
            killed_new += 1;
            // Nor a later commit.
            let later = table::new_shard(&path).unwrap();
            common::int64_shard(&later, 200, 1, false);
            assert_eq!(
                table::commit_shards(&path, &[later]).unwrap(),
                9,
                "step {at}"
            );
            assert_eq!(Table::open(&path, true).unwrap().version(), Some(3));
        }
        std::fs::remove_dir_all(&path).unwrap();
    }
    // Killed before the manifest's rename and after it, at several steps.
    assert!(
        killed_old >= 4 && killed_new >= 1,
        "{killed_old} {killed_new}"
    );
}

const WRITE_DIR: &str = "LOADERX_TEST_WRITE_DIR";

/// A shard of a write: `x` (int64 `from..from + rows`, via the common
/// helper) and `v` (u8 tensors of `width` bytes, each its row's `x`).
fn write_shard(dir: &Path, from: i64, rows: i64, width: usize) -> loaderx::Result<()> {
    use loaderx::{Codec, DType, Schema, Store};
    common::int64_shard(dir, from, rows, false);
    let mut v = Store::create(
        dir.join("v"),
        Schema::dense(DType::U8, &[width as u64])?,
        Codec::Zstd,
        None,
    )?;
    let bytes: Vec<u8> = (from..from + rows)
        .flat_map(|i| vec![i as u8; width])
        .collect();
    v.append_dense(&bytes)?;
    v.close()
}

/// The child: commits the write whose token and shards the files `token`
/// and `shards` in `$LOADERX_TEST_WRITE_DIR/..` name, killed at its fault
/// point `$LOADERX_TEST_COMMIT_AT`. A no-op when run as a plain test.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn write_child() {
    use loaderx::table::{TableWrite, WriteMode};
    let (Some(dir), Some(at)) = (std::env::var_os(WRITE_DIR), std::env::var_os(CHILD_AT)) else {
        return;
    };
    let path = PathBuf::from(dir);
    let at: u64 = at.to_str().unwrap().parse().unwrap();
    let meta = path.parent().unwrap();
    let token = std::fs::read_to_string(meta.join("token")).unwrap();
    let names: Vec<String> = std::fs::read_to_string(meta.join("shards"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let write = TableWrite::resume(
        &loaderx::Location::local(&path),
        WriteMode::Create,
        &token,
        false,
    )
    .unwrap();
    fault::skip_fsync(true);
    fault::arm(at, Fault::Kill);
    write.commit(&names).unwrap();
    fault::disarm();
}

/// A new table's commit through the write path, whose shards disagree on
/// a column's shape (so it is rewritten ragged before the manifest names
/// them), killed at every step: the target is no table at all or the whole
/// new one; what a killed write leaves, the write's discard removes, and a
/// new write to the same place then succeeds.
#[test]
fn a_write_killed_at_any_step_leaves_no_table_or_the_new_one() {
    use loaderx::table::{TableWrite, WriteMode};
    use loaderx::Location;

    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    std::fs::create_dir(&pristine).unwrap();
    let write = TableWrite::begin(&Location::local(pristine.join("t")), WriteMode::Create).unwrap();
    let (a, ()) = write.write_shard(|d| write_shard(d, 0, 4, 2)).unwrap();
    let (b, ()) = write.write_shard(|d| write_shard(d, 10, 3, 3)).unwrap();
    std::fs::write(pristine.join("token"), write.token()).unwrap();
    std::fs::write(pristine.join("shards"), format!("{}\n{}", a.name, b.name)).unwrap();
    let new: Vec<i64> = (0..4).chain(10..13).collect();

    let (mut killed_before, mut killed_after) = (0, 0);
    for at in 0.. {
        assert!(at < 1000, "the commit never completes");
        let root = tmp.path().join(format!("try-{at}"));
        common::copy_tree(&pristine, &root);
        let path = root.join("t");
        let killed = run_child("write_child", WRITE_DIR, &path, at);
        let opened = Table::open(&path, true);
        if let Ok(t) = &opened {
            assert_eq!(
                t.column("v").unwrap().schema().item_shape(),
                None,
                "step {at}"
            );
        }
        drop(opened);
        if !killed {
            assert_eq!(ids(&path), new, "step {at}: the commit returned");
            break;
        }
        if table::is_sharded(&path) {
            killed_after += 1;
            assert_eq!(ids(&path), new, "step {at}");
        } else {
            killed_before += 1;
            // The write's discard removes everything it made, and a new
            // write to the same place succeeds.
            let token = std::fs::read_to_string(root.join("token")).unwrap();
            let resumed =
                TableWrite::resume(&Location::local(&path), WriteMode::Create, &token, false)
                    .unwrap();
            resumed.discard().unwrap();
            assert!(
                !path.exists(),
                "step {at}: {:?}",
                std::fs::read_dir(&path)
                    .map(|d| d.map(|e| e.unwrap().file_name()).collect::<Vec<_>>())
            );
            let again = TableWrite::begin(&Location::local(&path), WriteMode::Create).unwrap();
            let (s, ()) = again.write_shard(|d| write_shard(d, 0, 2, 2)).unwrap();
            assert_eq!(again.commit(&[s.name]).unwrap(), 2, "step {at}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
    assert!(
        killed_before >= 4 && killed_after >= 1,
        "{killed_before} {killed_after}"
    );
}
