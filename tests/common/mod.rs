//! Helpers shared by the integration tests: re-running one test of the
//! current test binary as a child process, and the records, stores and
//! dictionaries several tests build.

// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

pub mod http;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use loaderx::schema::Logical;
use loaderx::table::{self, ColumnType};
use loaderx::{dict, Codec, DType, Error, Schema, Store};

/// This test binary, set up to run exactly the test `name` (a path such as
/// `module::test` for a nested one) on one thread with its output shown,
/// whether or not it is ignored: the child process entry points are
/// `#[ignore]`d, so that a plain run does not count them as tests.
/// Callers add the environment that makes the test act as the child.
pub fn rerun(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        name,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// Runs `cmd` (a child `what`) to completion and returns its stdout;
/// panics with both outputs unless it exits successfully.
#[track_caller]
pub fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A child process killed and reaped when dropped, so that a failing
/// assertion in the parent leaves no process behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl KillOnDrop {
    /// Kills the child and waits for it, panicking if either fails.
    pub fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

/// Spawns `cmd` with its stdout piped and returns once it has printed a
/// line containing `ready` (a child that holds something until killed);
/// panics if it exits first.
pub fn spawn_ready(cmd: &mut Command, ready: &str) -> KillOnDrop {
    let mut child = KillOnDrop(cmd.stdout(Stdio::piped()).spawn().unwrap());
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains(ready) => return child,
            Some(Ok(_)) => {}
            _ => panic!("child exited before {ready:?}: {:?}", child.0.wait()),
        }
    }
}

/// `r` is `Error::Busy` naming `dir`, with a message that says so.
#[track_caller]
pub fn assert_busy<T: std::fmt::Debug>(r: Result<T, Error>, dir: &Path) {
    match r {
        Err(e @ Error::Busy(_)) => {
            assert!(e.to_string().contains("busy"), "{e}");
            let Error::Busy(path) = e else { unreachable!() };
            assert_eq!(path, dir);
        }
        other => panic!("expected Busy, got {other:?}"),
    }
}

/// A 128-byte `uint64[16]` record: `i * 1000 + k` for `k` in `0..16`.
pub fn u64x16_record(i: u64) -> Vec<u8> {
    (0..16u64)
        .flat_map(|k| (i * 1000 + k).to_le_bytes())
        .collect()
}

/// Records `ids` of [`u64x16_record`], back to back.
pub fn u64x16_records(ids: std::ops::Range<u64>) -> Vec<u8> {
    ids.flat_map(u64x16_record).collect()
}

/// A dense `uint64[16]` zstd store of records `0..n` ([`u64x16_record`]),
/// appended but not synced, left open.
pub fn u64x16_store(dir: &Path, n: u64) -> Store {
    let mut store = Store::create(
        dir,
        Schema::dense(DType::U64, &[16]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    store.append_dense(&u64x16_records(0..n)).unwrap();
    store
}

/// A `fast` zstd dictionary trained on 300 patterned 120-byte records;
/// `seed` shifts the pattern (0 and 1 give different dictionaries).
pub fn trained_dict(seed: u32) -> Vec<u8> {
    let mut samples = Vec::new();
    let mut sizes = Vec::new();
    for i in 0..300u32 {
        let rec: Vec<u8> = (0..120u32)
            .map(|j| ((i * 13 + j * j + seed) % 41) as u8 + if j % 5 == 0 { 120 } else { 0 })
            .collect();
        sizes.push(rec.len());
        samples.extend_from_slice(&rec);
    }
    dict::train(&samples, &sizes, dict::tier("fast").unwrap()).unwrap()
}

/// Copies the directory tree `from` to `to` (created), files and
/// subdirectories alike.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A plain table in `dir` of one `int64` column `x` holding
/// `from..from + rows`, nullable (with an all-valid validity stream and a
/// table file saying so) or not.
pub fn int64_shard(dir: &Path, from: i64, rows: i64, nullable: bool) {
    let mut s = Store::create(
        dir.join("x"),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = (from..from + rows).flat_map(i64::to_le_bytes).collect();
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

/// `n` bytes of xorshift noise from `seed`: data that zstd cannot shrink.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
