//! Crash-point sweeps of every way a table evolves: a child process runs
//! one operation (a plain table made versioned, columns added, a column
//! dropped, rows deleted, rows edited, a merge, a compaction, a view saved,
//! a cleanup) and is
//! SIGKILLed at each of its file operations in turn (the `fault-injection`
//! build's `kill` mode). After every kill the table opens as the old
//! version or the new one, never anything else, every version it had opens
//! as it was, and the operation then succeeds when run again.

#![cfg(feature = "fault-injection")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use loaderx::columnar::{ColumnWriter, ValueKind};
use loaderx::fault::{self, Fault};
use loaderx::table::{self, ColumnsWrite, Table, TableWrite, VersionRef, WriteMode};
use loaderx::{Codec, DType, Location, Records, Schema, Store};

const CHILD_DIR: &str = "LOADERX_TEST_EVOLVE_DIR";
const CHILD_AT: &str = "LOADERX_TEST_EVOLVE_AT";
const CHILD_OP: &str = "LOADERX_TEST_EVOLVE_OP";

/// Every column of a table, read whole (int64 columns).
type Content = BTreeMap<String, Vec<i64>>;

fn content(t: &Table) -> Content {
    t.columns()
        .iter()
        .map(|c| {
            let idx: Vec<u64> = (0..c.len()).collect();
            let buf = c.gather_dense(&idx).unwrap();
            let values = buf
                .as_slice()
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                .collect();
            (c.name().to_owned(), values)
        })
        .collect()
}

fn at(path: &Path) -> Location {
    Location::local(path)
}

/// The version and content of the latest version, then of every version.
fn state(path: &Path) -> (u64, Content, BTreeMap<u64, Content>) {
    let t = Table::open(path, true).unwrap();
    let (v, latest) = (t.version().unwrap_or(0), content(&t));
    let mut all = BTreeMap::new();
    if t.version().is_some() {
        for m in table::list_versions(&at(path)).unwrap() {
            let old = Table::open_version(&at(path), &VersionRef::Number(m.version())).unwrap();
            all.insert(m.version(), content(&old));
        }
    }
    (v, latest, all)
}

/// Writes a store of int64 `values` at `dir`.
fn int64_store(dir: &Path, values: &[i64]) {
    let mut s = Store::create(
        dir,
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    s.append_dense(&bytes).unwrap();
    s.close().unwrap();
}

/// Writes a columnar column of int64 `values` named `name` in the plain
/// table `dir` (its file says what it is: no table file needed).
fn int64_columnar(dir: &Path, name: &str, values: &[i64]) {
    let mut w = ColumnWriter::create(&dir.join(name), ValueKind::Fixed(DType::I64), true).unwrap();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.push_fixed(&bytes, None).unwrap();
    w.finish().unwrap();
}

/// Adds the column `name` (each row's `x` times `k`) to the latest version.
fn add_column(path: &Path, name: &str, k: i64) {
    add_column_as(path, name, k, false)
}

/// [`add_column`], the new column columnar when `columnar`.
fn add_column_as(path: &Path, name: &str, k: i64, columnar: bool) {
    let w = ColumnsWrite::begin(&at(path), None).unwrap();
    let t = Table::open(path, true).unwrap();
    let x = content(&t).remove("x").unwrap();
    let mut at_row = 0usize;
    for (i, shard) in w.base().shards.clone().iter().enumerate() {
        let dir = w.new_group(i).unwrap();
        // Deleted rows need a value too (never read).
        let gone = w.deleted(i).unwrap();
        let mut values = Vec::new();
        for r in 0..shard.rows {
            if gone.contains(&r) {
                values.push(-1);
            } else {
                values.push(x[at_row] * k);
                at_row += 1;
            }
        }
        if columnar {
            int64_columnar(&dir, name, &values);
        } else {
            int64_store(&dir.join(name), &values);
        }
        w.finish_group(i, &dir).unwrap();
    }
    w.commit().unwrap();
}

/// Plans an edit of the latest version of the table at `path`: column
/// `y` of live row 1 of shard 0 set to 999, as a group of that shard.
fn edit_y(path: &Path) -> (ColumnsWrite, BTreeMap<usize, Vec<u64>>) {
    let w = ColumnsWrite::editing(&at(path), None).unwrap();
    let y = content(&Table::open(path, true).unwrap())
        .remove("y")
        .unwrap();
    let gone = w.deleted(0).unwrap();
    let (mut values, mut live) = (Vec::new(), 0usize);
    for r in 0..w.base().shards[0].rows {
        if gone.contains(&r) {
            values.push(-1); // deleted rows need a value too (never read)
        } else {
            values.push(if live == 1 { 999 } else { y[live] });
            live += 1;
        }
    }
    let dir = w.new_group(0).unwrap();
    int64_store(&dir.join("y"), &values);
    w.finish_group(0, &dir).unwrap();
    (w, BTreeMap::from([(0usize, vec![1u64])]))
}

/// [`edit_y`] as a patch of shard 0: the new value of live row 1 only.
fn patch_y(path: &Path) -> (ColumnsWrite, BTreeMap<usize, Vec<u64>>) {
    let w = ColumnsWrite::editing(&at(path), None).unwrap();
    let dir = w.new_patch(0).unwrap();
    int64_store(&dir.join("y"), &[999]);
    w.finish_patch(0, &dir, &[1]).unwrap();
    (w, BTreeMap::from([(0usize, vec![1u64])]))
}

/// Runs operation `op` on the table at `path`.
fn run_op(op: &str, path: &Path) {
    match op {
        "update" | "patch" => {
            let (w, edited) = if op == "patch" {
                patch_y(path)
            } else {
                edit_y(path)
            };
            w.commit_edit(&edited, "update").unwrap();
        }
        "merge" | "merge_patch" => {
            // The edit, record id 3 deleted and a shard of one row
            // appended, as one version.
            let (w, edited) = if op == "merge_patch" {
                patch_y(path)
            } else {
                edit_y(path)
            };
            let rows = TableWrite::begin(&at(path), WriteMode::Append).unwrap();
            let (shard, ()) = rows
                .write_shard(|dir| {
                    int64_store(&dir.join("x"), &[300]);
                    int64_store(&dir.join("y"), &[600]);
                    Ok(())
                })
                .unwrap();
            w.commit_merge(&edited, &[3], Some((&rows, &[shard.name])))
                .unwrap();
        }
        "make_versioned" => {
            table::make_versioned(&at(path)).unwrap();
        }
        "add" => add_column(path, "z", 3),
        "add_columnar" => add_column_as(path, "z", 3, true),
        "append_columnar" => {
            let s = table::new_shard(path).unwrap();
            int64_columnar(&s, "x", &[200, 201, 202]);
            table::commit_shards(path, &[s]).unwrap();
        }
        "drop" => {
            table::drop_columns(&at(path), &["y".into()], None).unwrap();
        }
        "delete" => {
            table::delete_rows(&at(path), None, &[1, 5]).unwrap();
        }
        "compact" => {
            table::compact(&at(path), 0.0).unwrap().unwrap();
        }
        "view" => {
            table::save_view(&at(path), "some", None, &[0, 2]).unwrap();
        }
        "split" => {
            let fractions = [
                ("train".into(), 0.5),
                ("val".into(), 0.25),
                ("test".into(), 0.25),
            ];
            table::split(&at(path), None, &fractions, 7, None).unwrap();
        }
        "drop_split" => table::drop_view(&at(path), "val").unwrap(),
        "replace_view" => {
            table::replace_view(&at(path), "val", None, &[0, 1]).unwrap();
        }
        "cleanup" => {
            table::cleanup(&at(path), 0, 1).unwrap();
        }
        other => panic!("unknown op {other}"),
    }
}

/// The child: runs `$LOADERX_TEST_EVOLVE_OP` on the table in
/// `$LOADERX_TEST_EVOLVE_DIR`, killed at fault point
/// `$LOADERX_TEST_EVOLVE_AT`. A no-op when run as a plain test.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn evolve_child() {
    let (Some(dir), Some(at), Some(op)) = (
        std::env::var_os(CHILD_DIR),
        std::env::var_os(CHILD_AT),
        std::env::var_os(CHILD_OP),
    ) else {
        return;
    };
    let at: u64 = at.to_str().unwrap().parse().unwrap();
    fault::skip_fsync(true); // a SIGKILL never loses the page cache
    fault::arm(at, Fault::Kill);
    run_op(op.to_str().unwrap(), &PathBuf::from(dir));
    fault::disarm();
}

fn run_child(op: &str, path: &Path, at: u64) -> bool {
    let status = common::rerun("evolve_child")
        .env(CHILD_DIR, path)
        .env(CHILD_AT, at.to_string())
        .env(CHILD_OP, op)
        .output()
        .unwrap();
    let killed = std::os::unix::process::ExitStatusExt::signal(&status.status) == Some(9);
    assert!(
        killed || status.status.success(),
        "{op} step {at}: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    killed
}

/// A sharded table: `x` 0..5 and 100..103 in two shards (version 1),
/// then column `y` = 2x (version 2), then row 2 deleted (version 3), then
/// row 0 (version 4: a cleanup removes version 3's deletion file).
fn sharded(path: &Path) {
    let mut shards = Vec::new();
    for (from, rows) in [(0, 5), (100, 3)] {
        let s = table::new_shard(path).unwrap();
        common::int64_shard(&s, from, rows, false);
        shards.push(s);
    }
    table::commit_shards(path, &shards).unwrap();
    add_column(path, "y", 2);
    table::delete_rows(&at(path), None, &[2]).unwrap();
    table::delete_rows(&at(path), None, &[0]).unwrap();
}

/// Sweeps `op` over every fault point of a copy of `pristine`.
fn sweep(op: &str, pristine: &Path, tmp: &Path) {
    let (old_v, old, old_all) = state(pristine);
    let (mut killed_old, mut killed_new) = (0, 0);
    let mut new: Option<(u64, Content)> = None;
    for step in 0.. {
        assert!(step < 2000, "{op} never completes");
        let path = tmp.join(format!("{op}-{step}"));
        common::copy_tree(pristine, &path);
        let killed = run_child(op, &path, step);
        let (v, got, all) = state(&path);
        if v == old_v && got == old {
            killed_old += 1;
        } else {
            // The new version: one past the old one, the same every time.
            assert_eq!(v, old_v + 1, "{op} step {step}: version");
            match &new {
                Some((nv, n)) => assert_eq!((&v, &got), (nv, n), "{op} step {step}"),
                None => new = Some((v, got.clone())),
            }
            killed_new += killed as usize;
        }
        // Every older version opens as it was (a cleanup removes some,
        // never changes one).
        for (version, c) in &all {
            if let Some(was) = old_all.get(version) {
                assert_eq!(c, was, "{op} step {step}: version {version}");
            }
        }
        if op != "cleanup" {
            assert!(
                old_all.keys().all(|k| all.contains_key(k)),
                "{op} step {step}"
            );
        }
        if op == "split" || op == "drop_split" {
            // No split, or all of it: disjoint views covering every row;
            // a view dropped from one, or not.
            let names: Vec<String> = table::list_views(&at(&path))
                .unwrap()
                .into_iter()
                .map(|v| v.name)
                .collect();
            let all = ["test", "train", "val"].map(String::from).to_vec();
            let rest = ["test", "train"].map(String::from).to_vec();
            match op {
                "split" => assert!(
                    names.is_empty() || names == all,
                    "{op} step {step}: {names:?}"
                ),
                _ => assert!(names == all || names == rest, "{op} step {step}: {names:?}"),
            }
            if names == all {
                let mut rows: Vec<i64> = names
                    .iter()
                    .flat_map(|n| content(&Table::open_view(&at(&path), n).unwrap())["x"].clone())
                    .collect();
                rows.sort_unstable();
                let mut latest = old["x"].clone();
                latest.sort_unstable();
                assert_eq!(rows, latest, "{op} step {step}");
            }
            if !killed {
                assert_eq!(names, if op == "split" { all } else { rest }, "{op}");
            }
        }
        if op == "replace_view" {
            // The split's three views, val the old one or the new one.
            let names: Vec<String> = table::list_views(&at(&path))
                .unwrap()
                .into_iter()
                .map(|v| v.name)
                .collect();
            assert_eq!(names, ["test", "train", "val"], "{op} step {step}");
            let val = content(&Table::open_view(&at(&path), "val").unwrap())["x"].clone();
            let was = content(&Table::open_view(&at(pristine), "val").unwrap())["x"].clone();
            assert!(val == was || val == [1, 3], "{op} step {step}: {val:?}");
            if !killed {
                assert_eq!(val, [1, 3], "{op}");
            }
        }
        if op == "view" {
            // No view, or the whole view.
            let views = table::list_views(&at(&path)).unwrap();
            if let Some(v) = views.first() {
                let t = Table::open_view(&at(&path), &v.name).unwrap();
                assert_eq!(content(&t)["x"], [1, 4], "{op} step {step}");
            } else {
                assert!(killed, "{op} step {step}: no view after it returned");
            }
        }
        if !killed {
            let versioned = !matches!(
                op,
                "view" | "cleanup" | "split" | "drop_split" | "replace_view"
            );
            assert!(new.is_some() || !versioned, "{op}: it changed nothing");
            std::fs::remove_dir_all(&path).unwrap();
            break;
        }
        let view_saved =
            matches!(op, "view" | "split") && !table::list_views(&at(&path)).unwrap().is_empty();
        let view_dropped = op == "drop_split"
            && !table::list_views(&at(&path))
                .unwrap()
                .iter()
                .any(|v| v.name == "val");
        if v == old_v && !view_saved && !view_dropped {
            // What the killed operation left never blocks running it again.
            run_op(op, &path);
            let (v2, _, _) = state(&path);
            assert!(
                v2 == old_v + 1
                    || matches!(
                        op,
                        "view" | "cleanup" | "split" | "drop_split" | "replace_view"
                    ),
                "{op} step {step}: rerun"
            );
        }
        std::fs::remove_dir_all(&path).unwrap();
    }
    assert!(killed_old >= 1, "{op}: {killed_old} {killed_new}");
}

#[test]
fn every_evolution_killed_at_any_step_leaves_the_old_version_or_the_new() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    sharded(&pristine);
    for op in [
        "add",
        "drop",
        "delete",
        "compact",
        "view",
        "split",
        "cleanup",
        "update",
        "merge",
        "patch",
        "merge_patch",
    ] {
        sweep(op, &pristine, tmp.path());
    }
    // A compaction folding a patch.
    let patched = tmp.path().join("patched");
    common::copy_tree(&pristine, &patched);
    run_op("patch", &patched);
    let again = tmp.path().join("again");
    std::fs::create_dir(&again).unwrap();
    sweep("compact", &patched, &again);
    // What the edits commit: y of live row 1 is 999; the merge also
    // deleted record id 3 (x = 100) and appended x = 300.
    for (op, x, y) in [
        (
            "update",
            vec![1, 3, 4, 100, 101, 102],
            vec![2, 999, 8, 200, 202, 204],
        ),
        (
            "merge",
            vec![1, 3, 4, 101, 102, 300],
            vec![2, 999, 8, 202, 204, 600],
        ),
        (
            "patch",
            vec![1, 3, 4, 100, 101, 102],
            vec![2, 999, 8, 200, 202, 204],
        ),
        (
            "merge_patch",
            vec![1, 3, 4, 101, 102, 300],
            vec![2, 999, 8, 202, 204, 600],
        ),
    ] {
        let path = tmp.path().join(format!("{op}-done"));
        common::copy_tree(&pristine, &path);
        run_op(op, &path);
        let got = content(&Table::open(&path, true).unwrap());
        assert_eq!((&got["x"], &got["y"]), (&x, &y), "{op}");
    }
    // A view dropped from a split: the other views stay whatever the kill.
    let split = tmp.path().join("split");
    common::copy_tree(&pristine, &split);
    run_op("split", &split);
    sweep("drop_split", &split, tmp.path());
    // A view of the split saved again in place.
    sweep("replace_view", &split, tmp.path());
    // A plain table made versioned in place.
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    int64_store(&plain.join("x"), &[7, 8, 9]);
    sweep("make_versioned", &plain, tmp.path());
    // A cleanup that removes a dropped column's store from a shard's own
    // directory (here the table's: a plain table made versioned).
    let dropped = tmp.path().join("dropped");
    std::fs::create_dir_all(&dropped).unwrap();
    int64_store(&dropped.join("x"), &[7, 8, 9]);
    int64_store(&dropped.join("w"), &[1, 2, 3]);
    table::make_versioned(&at(&dropped)).unwrap();
    table::drop_columns(&at(&dropped), &["w".into()], None).unwrap();
    sweep("cleanup", &dropped, tmp.path());
    run_op("cleanup", &dropped);
    assert!(!dropped.join("w").exists() && dropped.join("x").exists());
}

/// A table whose `x` is columnar: two shards (0..5, 100..103), then row 1
/// deleted.
fn columnar_table(path: &Path) {
    let mut shards = Vec::new();
    for (from, rows) in [(0i64, 5i64), (100, 3)] {
        let s = table::new_shard(path).unwrap();
        int64_columnar(&s, "x", &(from..from + rows).collect::<Vec<_>>());
        shards.push(s);
    }
    table::commit_shards(path, &shards).unwrap();
    table::delete_rows(&at(path), None, &[1]).unwrap();
}

#[test]
fn columnar_writes_killed_at_any_step_leave_the_old_version_or_the_new() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    sharded(&pristine);
    // A columnar column group added to records shards; the compaction of
    // `every_evolution...` converts records columns to columnar.
    sweep("add_columnar", &pristine, tmp.path());
    let columnar = tmp.path().join("columnar");
    columnar_table(&columnar);
    // A columnar shard appended, rows deleted, and a compaction copying the
    // live rows of columnar columns.
    for op in ["append_columnar", "delete", "compact"] {
        sweep(op, &columnar, tmp.path());
    }
}
