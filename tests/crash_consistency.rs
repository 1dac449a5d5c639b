//! Crash consistency (docs/format.md, "Durability"): a process killed with SIGKILL leaves a
//! store that reopens at its last `sync()`, with every synced record intact
//! and none of the later ones.
//!
//! The writer runs in a child process: this test binary re-executed with
//! `--exact crash_child` and `LOADERX_CRASH_CHILD` set. It prints a line
//! when it reaches the point the parent should kill it at.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use loaderx::{dict, Codec, DType, Packed, Records, Schema, Store};

const CHILD_ENV: &str = "LOADERX_CRASH_CHILD";
const DIR_ENV: &str = "LOADERX_CRASH_DIR";
const READY: &str = "LOADERX-CHILD-READY";

// ------------------------------------------------- deterministic contents

/// Record `i` of a scenario: the same bytes in parent and child.
fn dense_record(i: u64) -> Vec<u8> {
    // u32 [64, 16]: 4 KiB, compressible but distinct
    (0..64 * 16u64)
        .flat_map(|k| ((i * 7919 + k / 5) as u32 ^ (k as u32 & 3)).to_le_bytes())
        .collect()
}

fn ragged_record(i: u64) -> (Vec<u64>, Vec<u8>) {
    let shape: Vec<u64> = match i % 4 {
        0 => vec![],
        1 => vec![1 + i % 50],
        2 => vec![1 + i % 7, 33],
        _ => vec![2, 3, 1 + i % 5],
    };
    let n: u64 = shape.iter().product();
    let payload = (0..n)
        .flat_map(|k| ((i * 31 + k / 3) as f32).to_le_bytes())
        .collect();
    (shape, payload)
}

fn ragged_logical(i: u64) -> Vec<u8> {
    let (shape, payload) = ragged_record(i);
    let mut p = Packed::default();
    p.push(&shape, &payload);
    p.bytes
}

fn crash_dict() -> Vec<u8> {
    let recs: Vec<Vec<u8>> = (0..64).map(dense_record).collect();
    let sizes: Vec<usize> = recs.iter().map(Vec::len).collect();
    dict::train(&recs.concat(), &sizes, dict::tier("fast").unwrap()).unwrap()
}

/// Which store a scenario writes.
#[derive(Clone, Copy, Debug)]
struct Flavour {
    codec: Codec,
    dense: bool,
}

impl Flavour {
    fn parse(s: &str) -> Flavour {
        let (codec, kind) = s.split_once('/').unwrap();
        Flavour {
            codec: Codec::from_name(codec).unwrap(),
            dense: kind == "dense",
        }
    }

    fn name(self) -> String {
        format!(
            "{}/{}",
            self.codec,
            if self.dense { "dense" } else { "ragged" }
        )
    }

    fn create(self, dir: &Path) -> Store {
        let schema = if self.dense {
            Schema::dense(DType::U32, &[64, 16]).unwrap()
        } else {
            Schema::ragged(DType::F32)
        };
        let d = (self.codec == Codec::ZstdDict).then(crash_dict);
        Store::create(dir, schema, self.codec, d.as_deref()).unwrap()
    }

    fn record(self, i: u64) -> Vec<u8> {
        if self.dense {
            dense_record(i)
        } else {
            ragged_logical(i)
        }
    }

    /// Appends records `ids` as one batch.
    fn append(self, store: &mut Store, ids: impl Iterator<Item = u64>) {
        if self.dense {
            let bytes: Vec<u8> = ids.flat_map(dense_record).collect();
            store.append_dense(&bytes).unwrap();
        } else {
            let mut p = Packed::default();
            for i in ids {
                let (shape, payload) = ragged_record(i);
                p.push(&shape, &payload);
            }
            store.append_ragged(&p).unwrap();
        }
    }
}

/// The store contents at the last sync of each scenario, as record ids in
/// index order. Parent and child share this script.
fn synced_script(store: &mut Store, f: Flavour) -> Vec<u64> {
    let mut model: Vec<u64> = Vec::new();
    for batch in 0..4u64 {
        let ids = batch * 50..(batch + 1) * 50;
        model.extend(ids.clone());
        f.append(store, ids);
        if batch == 1 {
            store.sync().unwrap();
        }
    }
    // deletes (swap-last, descending) then more records, then the last sync
    let del = [3u64, 150, 199, 77];
    store.delete(&del).unwrap();
    let mut order = del.to_vec();
    order.sort_unstable_by(|a, b| b.cmp(a));
    for i in order {
        model.swap_remove(i as usize);
    }
    f.append(store, 1000..1010);
    model.extend(1000..1010);
    store.sync().unwrap();
    model
}

fn wait_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// The child side. Does nothing (and passes) unless `LOADERX_CRASH_CHILD`
/// is set; otherwise it never returns: it is killed by the parent.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mode, flavour) = spec.split_once(':').unwrap();
    let f = Flavour::parse(flavour);
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let mut store = f.create(&dir);
    let model = synced_script(&mut store, f);
    assert!(!model.is_empty());
    match mode {
        "after-sync" => {
            // unsynced work after the last sync: appends, a delete
            f.append(&mut store, 2000..2040);
            store.delete(&[0u64, 5]).unwrap();
            f.append(&mut store, 3000..3003);
            println!("{READY}");
            wait_forever();
        }
        "mid-append" => {
            // one large batch (8 MiB dense), built before the parent is told
            let (dense, packed) = if f.dense {
                let bytes: Vec<u8> = (10_000..12_000).flat_map(dense_record).collect();
                (bytes, Packed::default())
            } else {
                let mut p = Packed::default();
                for i in 10_000..30_000 {
                    let (shape, payload) = ragged_record(i);
                    p.push(&shape, &payload);
                }
                (Vec::new(), p)
            };
            println!("{READY}");
            // large appends, never synced, until killed (bounded in size)
            for _ in 0..64 {
                if f.dense {
                    store.append_dense(&dense).unwrap();
                } else {
                    store.append_ragged(&packed).unwrap();
                }
            }
            wait_forever();
        }
        other => panic!("unknown child mode {other}"),
    }
}

// ------------------------------------------------------------------ parent

/// A child process that is killed when the guard drops (so that a failing
/// parent never leaves a sleeping child behind).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(mode: &str, f: Flavour, dir: &Path) -> ChildGuard {
    let child = common::rerun("crash_child")
        .env(CHILD_ENV, format!("{mode}:{}", f.name()))
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    ChildGuard(child)
}

/// Reads the child's stdout until the ready line; panics if it exits first.
fn wait_ready(ChildGuard(child): &mut ChildGuard) {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains(READY) => break,
            Some(Ok(_)) => continue,
            _ => {
                let status = child.wait().unwrap();
                panic!("child exited before it was ready: {status}");
            }
        }
    }
    // keep draining so the child never blocks on a full pipe
    std::thread::spawn(move || for _ in lines {});
}

fn kill(ChildGuard(child): &mut ChildGuard) {
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child died of SIGKILL: {status}"
    );
}

/// The store after the crash: exactly the synced records, intact, and
/// fully usable.
fn verify_recovered(dir: &Path, f: Flavour) {
    // the expected contents, from the same script on a scratch store
    let scratch = tempfile::tempdir().unwrap();
    let mut reference = f.create(&scratch.path().join("s"));
    let model = synced_script(&mut reference, f);
    let ref_stats = reference.stats();
    drop(reference);

    let meta_len_before = std::fs::metadata(dir.join("meta.zr")).unwrap().len();
    let mut store = Store::open(dir).unwrap();
    assert_eq!(
        store.len(),
        model.len() as u64,
        "{}: reopened at the last sync",
        f.name()
    );
    // the same records, deletions and garbage as at the last sync
    assert_eq!(store.stats(), ref_stats, "{}", f.name());
    assert!(meta_len_before >= 4096 + 16 * store.len());
    let check = |store: &Store, model: &[u64]| {
        for (i, &id) in model.iter().enumerate() {
            assert_eq!(
                store.read_record(i as u64).unwrap(),
                f.record(id),
                "{}: record {i}",
                f.name()
            );
        }
        let idx: Vec<u64> = (0..model.len() as u64).rev().collect();
        if f.dense {
            let got = store.gather_dense(&idx).unwrap();
            let want: Vec<u8> = idx
                .iter()
                .flat_map(|&i| dense_record(model[i as usize]))
                .collect();
            assert!(got.as_slice() == want, "{}: gather", f.name());
        } else {
            let got = store.gather_ragged(&idx).unwrap();
            for (k, &i) in idx.iter().enumerate() {
                let (s, l) = got.spans[k];
                assert_eq!(
                    got.buffer.as_slice()[s..s + l],
                    ragged_logical(model[i as usize])
                );
            }
        }
    };
    check(&store, &model);

    // the recovered store takes new records over the abandoned tail
    let mut model = model;
    f.append(&mut store, 5000..5020);
    model.extend(5000..5020);
    check(&store, &model);
    let tail = store.stats().data_bytes;
    store.close().unwrap();
    assert_eq!(std::fs::metadata(dir.join("data.zr")).unwrap().len(), tail);
    let mut store = Store::open(dir).unwrap();
    check(&store, &model);
    store.compact().unwrap();
    check(&store, &model);
}

fn data_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("data.zr")).unwrap().len()
}

/// tail_offset as the header on disk says.
fn synced_tail(dir: &Path) -> u64 {
    let meta = std::fs::read(dir.join("meta.zr")).unwrap();
    u64::from_le_bytes(meta[8..16].try_into().unwrap())
}

const FLAVOURS: [Flavour; 4] = [
    Flavour {
        codec: Codec::Raw,
        dense: true,
    },
    Flavour {
        codec: Codec::Zstd,
        dense: true,
    },
    Flavour {
        codec: Codec::ZstdDict,
        dense: false,
    },
    Flavour {
        codec: Codec::Raw,
        dense: false,
    },
];

#[test]
fn killed_right_after_sync() {
    let tmp = tempfile::tempdir().unwrap();
    for f in FLAVOURS {
        let dir = tmp.path().join(f.name().replace('/', "-"));
        let mut child = spawn_child("after-sync", f, &dir);
        wait_ready(&mut child);
        kill(&mut child);
        // the unsynced appends reached data.zr but not the header
        assert!(data_len(&dir) > synced_tail(&dir));
        verify_recovered(&dir, f);
    }
}

#[test]
fn killed_in_the_middle_of_a_large_append() {
    let tmp = tempfile::tempdir().unwrap();
    for (k, f) in FLAVOURS.into_iter().enumerate() {
        let dir = tmp.path().join(f.name().replace('/', "-"));
        let mut child = spawn_child("mid-append", f, &dir);
        wait_ready(&mut child);
        // wait until unsynced payload reaches data.zr, then kill a little
        // later, while the appends go on
        let tail = synced_tail(&dir);
        let start = Instant::now();
        while data_len(&dir) <= tail {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the child never appended"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(3 + 11 * k as u64));
        kill(&mut child);
        assert_eq!(
            synced_tail(&dir),
            tail,
            "nothing was synced after the ready line"
        );
        assert!(data_len(&dir) > tail);
        verify_recovered(&dir, f);
    }
}
