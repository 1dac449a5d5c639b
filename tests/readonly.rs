//! Read-only handles (docs/format.md, "Locking"): `Store::open_readonly`
//! takes a shared lock, so any number of read-only handles, in this process
//! or others, hold a store at once, while a writer and readers exclude each
//! other with `Error::Busy`. A read-only handle opens its files `O_RDONLY`,
//! refuses every write with `Error::ReadOnly` and writes nothing, not even
//! on close; a pending journal is applied in memory only, and one that
//! moves payload bytes refuses the read-only open until a writer recovers
//! the store.
//!
//! Other processes are this test binary re-executed with `--exact
//! readonly_child` and `LOADERX_RO_CHILD` set.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use loaderx::schema::Kind;
use loaderx::{Codec, DType, Error, Packed, Records, Schema, Store};

use common::assert_busy;

const CHILD_ENV: &str = "LOADERX_RO_CHILD";
const DIR_ENV: &str = "LOADERX_RO_DIR";

/// Dense records are `u8[96]` whose first 8 bytes are the record's id.
const WIDTH: usize = 96;

fn record(id: u64) -> Vec<u8> {
    let mut out = id.to_le_bytes().to_vec();
    out.extend((8..WIDTH).map(|k| (id.wrapping_mul(131) as usize + k / 3) as u8));
    out
}

fn records(ids: impl IntoIterator<Item = u64>) -> Vec<u8> {
    ids.into_iter().flat_map(record).collect()
}

fn create(dir: &Path, codec: Codec) -> Store {
    Store::create(
        dir,
        Schema::dense(DType::U8, &[WIDTH as u64]).unwrap(),
        codec,
        None,
    )
    .unwrap()
}

/// A closed dense zstd store of records `0..n`.
fn make_store(dir: &Path, n: u64) {
    let mut store = create(dir, Codec::Zstd);
    store.append_dense(&records(0..n)).unwrap();
    store.close().unwrap();
}

/// The ids of a dense store's records in index order, checking every byte.
fn ids(store: &Store) -> Vec<u64> {
    let all: Vec<u64> = (0..store.len()).collect();
    let buf = store.gather_dense(&all).unwrap();
    buf.as_slice()
        .chunks_exact(WIDTH)
        .map(|rec| {
            let id = u64::from_le_bytes(rec[..8].try_into().unwrap());
            assert_eq!(rec, record(id), "record of id {id}");
            id
        })
        .collect()
}

/// Every file of a store directory: its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let mtime = e.metadata().unwrap().modified().unwrap();
            (name, (fs::read(e.path()).unwrap(), mtime))
        })
        .collect()
}

#[track_caller]
fn assert_readonly<T: std::fmt::Debug>(r: Result<T, Error>, op: &str, dir: &Path) {
    match r {
        Err(e @ Error::ReadOnly { .. }) => {
            let msg = e.to_string();
            let Error::ReadOnly { op: got, path } = e else {
                unreachable!()
            };
            assert_eq!((got, path.as_path()), (op, dir));
            assert!(
                msg.contains(&format!("cannot {op}")) && msg.contains("read-only"),
                "{msg}"
            );
        }
        other => panic!("expected ReadOnly for {op}, got {other:?}"),
    }
}

// ------------------------------------------------------------ one process

#[test]
fn readers_share_the_store_and_exclude_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    make_store(&dir, 5);

    let a = Store::open_readonly(&dir).unwrap();
    let b = Store::open_readonly(&dir)
        .and_then(|s| s.require_kind(Kind::Dense))
        .unwrap();
    let c = Store::open_readonly(&dir).unwrap();
    assert!(a.is_readonly() && b.is_readonly());
    assert_eq!(ids(&a), [0, 1, 2, 3, 4]);
    assert_eq!(ids(&b), ids(&c));
    // A writer waits for every reader to go.
    assert_busy(Store::open(&dir), &dir);
    assert!(matches!(
        Store::create(&dir, Schema::ragged(DType::U8), Codec::Raw, None),
        Err(Error::AlreadyExists { .. })
    ));
    a.close().unwrap();
    drop(b);
    assert_busy(Store::open(&dir), &dir);
    c.close().unwrap();

    // And a writer excludes readers.
    let mut w = Store::open(&dir).unwrap();
    assert!(!w.is_readonly());
    assert_busy(Store::open_readonly(&dir), &dir);
    assert_busy(
        Store::open_readonly(&dir).and_then(|s| s.require_kind(Kind::Dense)),
        &dir,
    );
    w.append_dense(&record(5)).unwrap();
    w.close().unwrap();
    let r = Store::open_readonly(&dir).unwrap();
    assert_eq!(ids(&r), [0, 1, 2, 3, 4, 5]);

    assert!(matches!(
        Store::open_readonly(&dir).and_then(|s| s.require_kind(Kind::Ragged)),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(
        Store::open_readonly(tmp.path().join("missing")),
        Err(Error::NoStore { .. })
    ));
}

#[test]
fn writes_on_a_readonly_handle_are_refused_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dense = tmp.path().join("dense");
    make_store(&dense, 6);
    let ragged = tmp.path().join("ragged");
    let mut r = Store::create(&ragged, Schema::ragged(DType::U8), Codec::Zstd, None).unwrap();
    let mut p = Packed::default();
    p.push(&[3], &[1, 2, 3]);
    r.append_ragged(&p).unwrap();
    r.close().unwrap();

    for dir in [&dense, &ragged] {
        let before = snapshot(dir);
        let mut s = Store::open_readonly(dir).unwrap();
        let stats = s.stats();
        assert_readonly(s.append_dense(&record(99)), "append", dir);
        // Refused before the input is looked at: even a malformed batch.
        assert_readonly(s.append_dense(&[1, 2, 3]), "append", dir);
        assert_readonly(s.append_ragged(&p), "append", dir);
        assert_readonly(s.delete(&[0u64]), "delete", dir);
        assert_readonly(s.delete::<u64>(&[]), "delete", dir);
        assert_readonly(s.compact(), "compact", dir);
        assert_readonly(s.sync(), "sync", dir);
        assert_eq!(s.stats(), stats);
        assert_eq!(s.read_record(0).unwrap().len(), s.logical_len(0).unwrap());
        s.close().unwrap();
        assert_eq!(snapshot(dir), before, "{}", dir.display());
    }
}

#[test]
fn close_of_a_readonly_handle_neither_syncs_nor_truncates() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut w = create(&dir, Codec::Raw);
    w.append_dense(&records(0..4)).unwrap();
    w.sync().unwrap();
    // Appended but never synced (as after a crash): data.zr holds bytes
    // past the committed tail, which a writer's close would trim.
    w.append_dense(&records(4..7)).unwrap();
    std::mem::forget(w);
    let data_len = fs::metadata(dir.join("data.zr")).unwrap().len();
    assert_eq!(data_len, 7 * WIDTH as u64);
    let before = snapshot(&dir);

    // The forgotten writer still holds its lock: read a copy.
    let copy = tmp.path().join("copy");
    fs::create_dir(&copy).unwrap();
    for name in before.keys() {
        fs::copy(dir.join(name), copy.join(name)).unwrap();
    }
    let before = snapshot(&copy);
    let r = Store::open_readonly(&copy).unwrap();
    assert_eq!(ids(&r), [0, 1, 2, 3]);
    assert_eq!(r.stats().data_bytes, 4 * WIDTH as u64);
    r.close().unwrap();
    let s = Store::open_readonly(&copy).unwrap();
    drop(s);
    assert_eq!(snapshot(&copy), before);
    // A writer's close trims the uncommitted bytes.
    Store::open(&copy).unwrap().close().unwrap();
    assert_eq!(
        fs::metadata(copy.join("data.zr")).unwrap().len(),
        4 * WIDTH as u64
    );
}

/// The access mode (`O_RDONLY` = 0, `O_RDWR` = 2) of every descriptor of
/// this process open on `file`.
fn access_modes(file: &Path) -> Vec<u32> {
    let file = fs::canonicalize(file).unwrap();
    let mut modes = Vec::new();
    for e in fs::read_dir("/proc/self/fd").unwrap() {
        let e = e.unwrap();
        if fs::read_link(e.path()).ok().as_deref() != Some(file.as_path()) {
            continue;
        }
        let info = fs::read_to_string(format!(
            "/proc/self/fdinfo/{}",
            e.file_name().to_str().unwrap()
        ))
        .unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        modes.push(flags & libc::O_ACCMODE as u32);
    }
    modes
}

#[test]
fn a_readonly_handle_opens_its_files_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    make_store(&dir, 3);
    let (meta, data) = (dir.join("meta.zr"), dir.join("data.zr"));
    {
        let r = Store::open_readonly(&dir).unwrap();
        assert_eq!(access_modes(&meta), [libc::O_RDONLY as u32]);
        assert_eq!(access_modes(&data), [libc::O_RDONLY as u32]);
        assert_eq!(ids(&r), [0, 1, 2]);
    }
    let w = Store::open(&dir).unwrap();
    assert_eq!(access_modes(&meta), [libc::O_RDWR as u32]);
    assert_eq!(access_modes(&data), [libc::O_RDWR as u32]);
    drop(w);
    assert!(access_modes(&meta).is_empty());
}

// ------------------------------------------------------ other processes

/// The child side; does nothing (and passes) unless `LOADERX_RO_CHILD`
/// is set.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn readonly_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    match mode.as_str() {
        "read" => {
            let store = Store::open_readonly(&dir).unwrap();
            println!("CHILD-READ {:?}", ids(&store));
        }
        "expect-busy" => {
            assert_busy(Store::open(&dir), &dir);
            assert_busy(Store::open_readonly(&dir), &dir);
            println!("CHILD-BUSY-OK");
        }
        "expect-writer-busy" => {
            assert_busy(Store::open(&dir), &dir);
            println!("CHILD-WRITER-BUSY-OK");
        }
        "hold-readonly" => {
            let _store = Store::open_readonly(&dir).unwrap();
            println!("CHILD-HOLDING");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn child(mode: &str, dir: &Path) -> Command {
    let mut cmd = common::rerun("readonly_child");
    cmd.env(CHILD_ENV, mode).env(DIR_ENV, dir);
    cmd
}

fn run_child(mode: &str, dir: &Path) -> String {
    common::run_ok(&mut child(mode, dir), mode)
}

#[test]
fn readers_in_several_processes_share_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    make_store(&dir, 4);

    let holder = common::spawn_ready(&mut child("hold-readonly", &dir), "CHILD-HOLDING");
    // Another process holds it read-only: this one reads too, a third
    // process reads while both do, and no writer gets in anywhere.
    let here = Store::open_readonly(&dir).unwrap();
    assert_eq!(ids(&here), [0, 1, 2, 3]);
    assert!(run_child("read", &dir).contains("CHILD-READ [0, 1, 2, 3]"));
    assert!(run_child("expect-writer-busy", &dir).contains("CHILD-WRITER-BUSY-OK"));
    assert_busy(Store::open(&dir), &dir);
    drop(here);
    // This process's reader is gone, the other's still counts.
    assert_busy(Store::open(&dir), &dir);
    holder.kill();

    // A writer here keeps readers out of other processes.
    let mut w = Store::open(&dir).unwrap();
    assert!(run_child("expect-busy", &dir).contains("CHILD-BUSY-OK"));
    w.append_dense(&record(4)).unwrap();
    w.close().unwrap();
    assert!(run_child("read", &dir).contains("CHILD-READ [0, 1, 2, 3, 4]"));
}

// ------------------------------------------------------ pending journals

#[cfg(feature = "fault-injection")]
mod pending_journal {
    //! A writer killed before each of its fault points in turn (see
    //! tests/crash.rs) leaves, at some of them, a header naming a pending
    //! journal. Every such copy must open read-only without a byte changing
    //! and show exactly what a writable open (on another copy) recovers;
    //! where the journal moves payload bytes (a compaction step that
    //! carried its records in the journal) the read-only open must refuse
    //! with `Corrupted`, and work after a writable open recovered it.

    use super::*;
    use loaderx::fault;
    use loaderx::set_compact_steps_for_tests;

    const SCENARIO_ENV: &str = "LOADERX_RO_JOURNAL_SCENARIO";

    /// The child: runs the scenario on the store at `LOADERX_RO_DIR` with
    /// the fault point armed from the environment, prints `OPS n` and
    /// exits without running destructors.
    #[test]
    #[ignore = "a child process entry point: its parent test runs it"]
    fn journal_child() {
        let Ok(scenario) = std::env::var(SCENARIO_ENV) else {
            return;
        };
        set_compact_steps_for_tests(700, 400);
        let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
        let mut store = Store::open(&dir).unwrap();
        match scenario.as_str() {
            "delete-sync" => {
                store.delete(&[5u64, 17, 40, 0, 69, 33, 34, 35]).unwrap();
                store.sync().unwrap();
            }
            "compact" => store.compact().unwrap(),
            other => panic!("unknown scenario {other}"),
        }
        println!("OPS {}", fault::ops());
        std::process::exit(0);
    }

    fn run(scenario: &str, dir: &Path, kill_at: Option<u64>) -> Option<u64> {
        let mut cmd = common::rerun("pending_journal::journal_child");
        cmd.env(SCENARIO_ENV, scenario)
            .env(DIR_ENV, dir)
            .env_remove("LOADERX_FAULT")
            .env_remove("LOADERX_FAULT_AT")
            .env("LOADERX_FAULT_SKIP_FSYNC", "1")
            .env("LOADERX_THREADS", "1");
        if let Some(k) = kill_at {
            cmd.env("LOADERX_FAULT_AT", k.to_string())
                .env("LOADERX_FAULT", "kill");
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGKILL),
            "child {scenario} at {kill_at:?}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.split_once("OPS ").map(|(_, n)| n.trim().parse().unwrap()))
    }

    /// The moves count of the journal the header names as pending, if any.
    fn pending_moves(dir: &Path) -> Option<u64> {
        let meta = fs::read(dir.join("meta.zr")).unwrap();
        if meta[20] != 1 {
            return None;
        }
        let at = u64::from_le_bytes(meta[21..29].try_into().unwrap()) as usize;
        assert_eq!(&meta[at..at + 8], b"ZRJRNL01");
        Some(u64::from_le_bytes(
            meta[at + 32..at + 40].try_into().unwrap(),
        ))
    }

    fn copy_dir(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for e in fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }

    /// Sweeps every kill point of `scenario`; returns how many copies had
    /// a pending journal without moves and how many with moves.
    fn sweep(scenario: &str) -> (u32, u32) {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        let mut s = create(&base, Codec::Raw);
        s.append_dense(&records(0..70)).unwrap();
        if scenario == "compact" {
            s.delete(&[0u64, 3, 4, 11, 20, 21, 22, 35, 50, 61, 69])
                .unwrap();
        }
        s.close().unwrap();
        let clean = tmp.path().join("clean");
        copy_dir(&base, &clean);
        let ops = run(scenario, &clean, None).expect("the unharmed child reports its fault points");
        let (mut locs_only, mut with_moves) = (0, 0);
        for k in 0..ops {
            let dir = tmp.path().join(format!("k{k}"));
            copy_dir(&base, &dir);
            run(scenario, &dir, Some(k));
            let Some(moves) = pending_moves(&dir) else {
                continue;
            };
            // What a writer recovers, on a copy.
            let recovered = tmp.path().join(format!("k{k}-writer"));
            copy_dir(&dir, &recovered);
            let want = ids(&Store::open(&recovered).unwrap());

            let before = snapshot(&dir);
            match Store::open_readonly(&dir) {
                Ok(r) if moves == 0 => {
                    assert_eq!(ids(&r), want, "{scenario} killed at {k}");
                    assert_eq!(r.len(), want.len() as u64);
                    r.close().unwrap();
                    locs_only += 1;
                }
                Err(e @ Error::Corrupted { .. }) if moves > 0 => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("meta.zr")
                            && msg.contains("read-only")
                            && msg.contains("a writable open recovers it"),
                        "{msg}"
                    );
                    with_moves += 1;
                }
                other => panic!("{scenario} killed at {k} ({moves} moves): {other:?}"),
            }
            assert_eq!(snapshot(&dir), before, "{scenario} killed at {k}");
            assert_eq!(pending_moves(&dir), Some(moves));
            // A writable open applies the journal; readers then see it all.
            Store::open(&dir).unwrap().close().unwrap();
            assert_eq!(pending_moves(&dir), None);
            assert_eq!(ids(&Store::open_readonly(&dir).unwrap()), want);
        }
        eprintln!("{scenario}: {ops} points, {locs_only} pending without moves, {with_moves} with");
        (locs_only, with_moves)
    }

    #[test]
    fn readonly_open_of_an_interrupted_sync_applies_its_journal_in_memory() {
        let (locs_only, with_moves) = sweep("delete-sync");
        assert!(locs_only > 0, "no kill point left a pending journal");
        assert_eq!(with_moves, 0);
    }

    #[test]
    fn readonly_open_of_an_interrupted_compaction_step_is_refused_or_served() {
        let (locs_only, with_moves) = sweep("compact");
        assert!(locs_only > 0, "no direct compaction step was left pending");
        assert!(
            with_moves > 0,
            "no journalled compaction step was left pending"
        );
    }
}
