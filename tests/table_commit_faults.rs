//! A shard commit failing at each of its file operations in turn (injected
//! EIO, `fault-injection` builds): the table then opens with the old shard
//! set, never anything else, and the next commit succeeds. One test per
//! binary, since fault points are counted process-wide.

#![cfg(feature = "fault-injection")]

use std::path::Path;

use loaderx::fault::{self, Mode};
use loaderx::schema::Logical;
use loaderx::table::{self, ColumnType, Table};
use loaderx::{Codec, DType, Schema, Store};

fn write_shard(dir: &Path, rows: u64, nullable: bool) {
    let mut s = Store::create(
        dir.join("x"),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = (0..rows as i64).flat_map(i64::to_le_bytes).collect();
    s.append_dense(&bytes).unwrap();
    s.close().unwrap();
    if nullable {
        let mut v = Store::create(
            table::validity_dir(dir, "x"),
            Schema::dense(DType::Bool, &[]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        v.append_dense(&vec![1u8; rows as usize]).unwrap();
        v.close().unwrap();
        let t = ColumnType {
            logical: Logical::Tensor,
            nullable: true,
        };
        table::write_types(dir, &[("x".into(), t)]).unwrap();
    }
}

#[test]
fn a_commit_failing_at_any_step_leaves_the_old_table() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let first = table::new_shard(&path).unwrap();
    write_shard(&first, 5, true);
    assert_eq!(table::commit_shards(&path, &[first]).unwrap(), 5);
    let before = std::fs::read(path.join(table::MANIFEST_FILE)).unwrap();
    // Without nulls: the commit gives it an all-valid stream, then the manifest.
    let extra = table::new_shard(&path).unwrap();
    write_shard(&extra, 3, false);
    let mut at = 0;
    loop {
        fault::arm(at, Mode::Eio);
        let result = table::commit_shards(&path, std::slice::from_ref(&extra));
        fault::disarm();
        let t = Table::open(&path, true).unwrap();
        match result {
            // Past the rename only the directory's fsync can fail: the
            // new manifest is in place, its durability unconfirmed.
            Err(e) if t.num_rows() == 8 => {
                assert!(e.to_string().contains("manifest.json"), "step {at}: {e}");
                break;
            }
            Err(e) => {
                assert!(at < 500, "the commit keeps failing: {e}");
                assert_eq!(t.num_rows(), 5, "step {at}: {e}");
                assert_eq!(
                    std::fs::read(path.join(table::MANIFEST_FILE)).unwrap(),
                    before,
                    "step {at}"
                );
            }
            Ok(rows) => {
                assert_eq!((rows, t.num_rows()), (8, 8));
                break;
            }
        }
        t.close().unwrap();
        at += 1;
    }
    // Fault points of the validity stream and of the manifest's write.
    assert!(at >= 4, "only {at} steps");
    let left: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".manifest.json."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
