//! One handle per store (docs/format.md, "Locking"): a second open, in this process or
//! another, fails with `Error::Busy` while the first handle lives; the lock
//! goes with close, drop or the death of the holder. And one `&Store`
//! serves gathers from many threads at once.
//!
//! Other processes are this test binary re-executed with `--exact
//! busy_child` and `LOADERX_BUSY_CHILD` set.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use loaderx::schema::Kind;
use loaderx::{dict, Codec, DType, Error, Packed, Records, Schema, Store};

const CHILD_ENV: &str = "LOADERX_BUSY_CHILD";
const DIR_ENV: &str = "LOADERX_BUSY_DIR";

use common::{assert_busy, u64x16_record as record, u64x16_store as open_store};

#[test]
fn store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
    assert_send_sync::<loaderx::RaggedBatch>();
    assert_send_sync::<loaderx::Buffer>();
}

#[test]
fn second_open_in_the_same_process_is_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut first = open_store(&dir, 10);

    // the handle from create holds the lock
    assert_busy(Store::open(&dir), &dir);
    assert_busy(
        Store::open(&dir).and_then(|s| s.require_kind(Kind::Dense)),
        &dir,
    );
    assert_busy(
        Store::open(&dir).and_then(|s| s.require_kind(Kind::Ragged)),
        &dir,
    );
    assert!(matches!(
        Store::create(&dir, Schema::ragged(DType::U8), Codec::Raw, None),
        Err(Error::AlreadyExists { .. })
    ));
    // from another thread too
    std::thread::scope(|s| {
        s.spawn(|| assert_busy(Store::open(&dir), &dir))
            .join()
            .unwrap();
    });

    // the first handle is unaffected by the failed opens
    first.append_dense(&record(10)).unwrap();
    first.sync().unwrap();
    assert_eq!(
        first.gather_dense(&[10u64, 0]).unwrap().as_slice(),
        [record(10), record(0)].concat()
    );
    assert_busy(Store::open(&dir), &dir);

    // close releases the lock
    first.close().unwrap();
    let second = Store::open(&dir).unwrap();
    assert_eq!(second.len(), 11);
    assert_busy(Store::open(&dir), &dir);
    // so does drop
    drop(second);
    let third = Store::open(&dir)
        .and_then(|s| s.require_kind(Kind::Dense))
        .unwrap();
    assert_busy(Store::open(&dir), &dir);
    drop(third);

    // a failed open (wrong kind) does not keep the lock either
    assert!(matches!(
        Store::open(&dir).and_then(|s| s.require_kind(Kind::Ragged)),
        Err(Error::WrongKind { .. })
    ));
    assert_eq!(Store::open(&dir).unwrap().len(), 11);
}

#[test]
fn locks_are_per_store() {
    let tmp = tempfile::tempdir().unwrap();
    let a = open_store(&tmp.path().join("a"), 3);
    let b = open_store(&tmp.path().join("b"), 4);
    assert_busy(Store::open(tmp.path().join("a")), &tmp.path().join("a"));
    assert_busy(Store::open(tmp.path().join("b")), &tmp.path().join("b"));
    drop(a);
    assert_eq!(Store::open(tmp.path().join("a")).unwrap().len(), 3);
    assert_busy(Store::open(tmp.path().join("b")), &tmp.path().join("b"));
    drop(b);
}

// ------------------------------------------------------ other processes

/// The child side; does nothing (and passes) unless `LOADERX_BUSY_CHILD`
/// is set.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn busy_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    match mode.as_str() {
        "expect-busy" => {
            assert_busy(Store::open(&dir), &dir);
            assert_busy(
                Store::open(&dir).and_then(|s| s.require_kind(Kind::Dense)),
                &dir,
            );
            println!("CHILD-BUSY-OK");
        }
        "expect-open" => {
            let mut store = Store::open(&dir).unwrap();
            let n = store.len();
            assert_eq!(store.read_record(0).unwrap(), record(0));
            store.append_dense(&record(n)).unwrap();
            store.close().unwrap();
            println!("CHILD-OPEN-OK {n}");
        }
        "hold" => {
            let _store = Store::open(&dir).unwrap();
            println!("CHILD-HOLDING");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn child(mode: &str, dir: &Path) -> Command {
    let mut cmd = common::rerun("busy_child");
    cmd.env(CHILD_ENV, mode).env(DIR_ENV, dir);
    cmd
}

fn run_child(mode: &str, dir: &Path) -> String {
    common::run_ok(&mut child(mode, dir), mode)
}

#[test]
fn second_open_from_another_process_is_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut store = open_store(&dir, 5);
    assert!(run_child("expect-busy", &dir).contains("CHILD-BUSY-OK"));

    // still busy after a sync, and the child changed nothing
    store.sync().unwrap();
    assert!(run_child("expect-busy", &dir).contains("CHILD-BUSY-OK"));
    assert_eq!(store.len(), 5);
    assert_eq!(store.gather_dense(&[4u64]).unwrap().as_slice(), record(4));

    // released on close: the child opens, appends record 5 and closes
    store.close().unwrap();
    assert!(run_child("expect-open", &dir).contains("CHILD-OPEN-OK 5"));
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.len(), 6);
    assert_eq!(store.gather_dense(&[5u64]).unwrap().as_slice(), record(5));

    // released on drop
    assert!(run_child("expect-busy", &dir).contains("CHILD-BUSY-OK"));
    drop(store);
    assert!(run_child("expect-open", &dir).contains("CHILD-OPEN-OK 6"));
    assert_eq!(Store::open(&dir).unwrap().len(), 7);
}

#[test]
fn a_lock_held_by_another_process_goes_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    open_store(&dir, 3).close().unwrap();

    let holder = common::spawn_ready(&mut child("hold", &dir), "CHILD-HOLDING");
    assert_busy(Store::open(&dir), &dir);
    assert!(matches!(
        Store::create(&dir, Schema::ragged(DType::U8), Codec::Raw, None),
        Err(Error::AlreadyExists { .. })
    ));
    holder.kill();
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.len(), 3);
}

// ----------------------------------------------------- concurrent gathers

fn dict_for(recs: &[Vec<u8>]) -> Vec<u8> {
    let sizes: Vec<usize> = recs.iter().map(Vec::len).collect();
    dict::train(&recs.concat(), &sizes, dict::tier("fast").unwrap()).unwrap()
}

/// A small deterministic index stream per thread.
fn indices(seed: u64, count: usize, len: u64) -> Vec<u64> {
    let mut s = seed;
    (0..count)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) % len
        })
        .collect()
}

#[test]
fn concurrent_dense_gathers() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        // 600 records of 8 KiB (u16 [64, 64])
        let recs: Vec<Vec<u8>> = (0..600u64)
            .map(|i| {
                (0..4096u64)
                    .flat_map(|k| ((i * 13 + k / 7) as u16).to_le_bytes())
                    .collect()
            })
            .collect();
        let dir = tmp.path().join(format!("d-{codec}"));
        let d = (codec == Codec::ZstdDict).then(|| dict_for(&recs[..100]));
        let mut store = Store::create(
            &dir,
            Schema::dense(DType::U16, &[64, 64]).unwrap(),
            codec,
            d.as_deref(),
        )
        .unwrap();
        store.append_dense(&recs.concat()).unwrap();
        store.close().unwrap();
        let store = Store::open(&dir).unwrap();
        let store = &store;
        let recs = &recs;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for round in 0..12u64 {
                        // small gathers and multi-MiB ones (which fan out themselves)
                        let count = if round % 4 == 0 {
                            700
                        } else {
                            1 + (round * 7 + t) as usize % 40
                        };
                        let idx = indices(t * 100 + round, count, 600);
                        let want: Vec<u8> =
                            idx.iter().flat_map(|&i| recs[i as usize].clone()).collect();
                        if round % 2 == 0 {
                            let got = store.gather_dense(&idx).unwrap();
                            assert!(got.as_slice() == want, "{codec}: thread {t} round {round}");
                        } else {
                            let mut dst = vec![0u8; want.len()];
                            store.gather_dense_into(&idx, &mut dst).unwrap();
                            assert!(dst == want, "{codec}: thread {t} round {round} (into)");
                        }
                        let i = idx[0];
                        assert_eq!(store.read_record(i).unwrap(), recs[i as usize]);
                    }
                });
            }
        });
    }
}

#[test]
fn concurrent_ragged_gathers() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let mut packed = Packed::default();
        for i in 0..500u64 {
            let shape: Vec<u64> = match i % 3 {
                0 => vec![],
                1 => vec![1 + i % 300],
                _ => vec![1 + i % 40, 25],
            };
            let n: u64 = shape.iter().product();
            let payload: Vec<u8> = (0..n)
                .flat_map(|k| ((i + k / 4) as i32).to_le_bytes())
                .collect();
            packed.push(&shape, &payload);
        }
        let logical: Vec<Vec<u8>> = (0..packed.len())
            .map(|i| packed.record(i).to_vec())
            .collect();
        let dir = tmp.path().join(format!("r-{codec}"));
        let d = (codec == Codec::ZstdDict).then(|| dict_for(&logical));
        let mut store =
            Store::create(&dir, Schema::ragged(DType::I32), codec, d.as_deref()).unwrap();
        store.append_ragged(&packed).unwrap();
        store.close().unwrap();
        let store = Store::open(&dir).unwrap();
        let (store, logical) = (&store, &logical);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for round in 0..10u64 {
                        let count = if round % 3 == 0 {
                            2000
                        } else {
                            1 + round as usize * 5
                        };
                        let idx = indices(t * 1000 + round, count, 500);
                        let batch = store.gather_ragged(&idx).unwrap();
                        assert_eq!(batch.len(), idx.len());
                        for (k, &i) in idx.iter().enumerate() {
                            let (start, len) = batch.spans[k];
                            assert!(
                                batch.buffer.as_slice()[start..start + len]
                                    == logical[i as usize][..],
                                "{codec}: thread {t} round {round} slot {k}"
                            );
                        }
                    }
                });
            }
        });
    }
}
