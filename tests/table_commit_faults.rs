//! A shard commit failing at each of its file operations in turn (injected
//! EIO, `fault-injection` builds): the table then opens with the old shard
//! set, never anything else, and the next commit succeeds. One test per
//! binary, since fault points are counted process-wide.

#![cfg(feature = "fault-injection")]

mod common;

use loaderx::fault::{self, Fault};
use loaderx::table::{self, Table};

#[test]
fn a_commit_failing_at_any_step_leaves_the_old_table() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    let first = table::new_shard(&path).unwrap();
    common::int64_shard(&first, 0, 5, true);
    assert_eq!(table::commit_shards(&path, &[first]).unwrap(), 5);
    let before = std::fs::read(path.join(table::MANIFEST_FILE)).unwrap();
    // Without nulls: the commit gives it an all-valid stream, then the manifest.
    let extra = table::new_shard(&path).unwrap();
    common::int64_shard(&extra, 0, 3, false);
    let mut at = 0;
    loop {
        fault::arm(at, Fault::Eio);
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
