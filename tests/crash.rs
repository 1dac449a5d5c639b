//! Crash-point sweeps: every change on disk is atomic against SIGKILL at any
//! instant, and an injected ENOSPC or EIO surfaces as an I/O error and
//! leaves a store that reopens at its last sync (or at the one in flight).
//!
//! Every write, fsync, truncation, creation and rename of the engine is a
//! numbered fault point (feature `fault-injection`, see
//! `loaderx::fault`). For each scenario and store flavour, a child
//! process (this test binary re-executed with `--exact sweep_child`) first
//! runs the operation unharmed and reports how many fault points it
//! reached; then, for every k, a fresh copy of the starting store is handed
//! to a child that is killed with SIGKILL before its k-th fault point (or
//! whose k-th call fails with ENOSPC / EIO). The parent reopens each copy:
//! it must hold exactly the records of the state before the operation or of
//! the state after it, byte for byte, and be fully usable.
//!
//! A second test kills a writer doing random appends, deletes, syncs and
//! compactions at random instants, 100 times over one long-lived store.

#![cfg(feature = "fault-injection")]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use loaderx::{
    fault, set_compact_steps_for_tests, Codec, DType, Error, Packed, Records, Schema, Store,
};

const SCENARIO_ENV: &str = "LOADERX_SWEEP_SCENARIO";
const DIR_ENV: &str = "LOADERX_SWEEP_DIR";
const SEED_ENV: &str = "LOADERX_RANDOM_SEED";
/// Small compaction steps, so a compaction of a few KiB takes many steps of
/// both kinds: carried in the journal while the free space below is under
/// `COMPACT_DIRECT`, copied into it after.
const COMPACT_STEP: u64 = 700;
const COMPACT_DIRECT: u64 = 400;

// ------------------------------------------------- self-identifying records

/// Dense records are `u8[96]` whose first 8 bytes are the record's id.
const WIDTH: usize = 96;

fn record_bytes(id: u64, len: usize) -> Vec<u8> {
    let mut out = id.to_le_bytes().to_vec();
    out.extend((8..len).map(|k| (id.wrapping_mul(131) as usize + k / 3) as u8));
    out
}

/// The record of `id` in the mixed store: two in three are noise after
/// their id (zstd cannot shrink them: frames of raw blocks), the third a
/// compressible one.
fn mixed_bytes(id: u64, len: usize) -> Vec<u8> {
    let mut out = id.to_le_bytes().to_vec();
    if id.is_multiple_of(3) {
        out.resize(len, (id % 251) as u8);
        return out;
    }
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    out.extend((8..len).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 24) as u8
    }));
    out
}

fn ragged_len(id: u64) -> usize {
    8 + (id % 41) as usize * 3
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavour {
    DenseRaw,
    DenseZstd,
    RaggedZstd,
    /// Compressed frames and frames of raw blocks side by side.
    DenseZstdMixed,
}

impl Flavour {
    const ALL: [Flavour; 4] = [
        Flavour::DenseRaw,
        Flavour::DenseZstd,
        Flavour::RaggedZstd,
        Flavour::DenseZstdMixed,
    ];

    fn name(self) -> &'static str {
        match self {
            Flavour::DenseRaw => "dense-raw",
            Flavour::DenseZstd => "dense-zstd",
            Flavour::RaggedZstd => "ragged-zstd",
            Flavour::DenseZstdMixed => "dense-zstd-mixed",
        }
    }

    fn parse(s: &str) -> Flavour {
        Flavour::ALL.into_iter().find(|f| f.name() == s).unwrap()
    }

    fn create(self, dir: &Path) -> Result<Store, Error> {
        match self {
            Flavour::DenseRaw => Store::create(
                dir,
                Schema::dense(DType::U8, &[WIDTH as u64]).unwrap(),
                Codec::Raw,
                None,
            ),
            Flavour::DenseZstd | Flavour::DenseZstdMixed => Store::create(
                dir,
                Schema::dense(DType::U8, &[WIDTH as u64]).unwrap(),
                Codec::Zstd,
                None,
            ),
            Flavour::RaggedZstd => Store::create(dir, Schema::ragged(DType::U8), Codec::Zstd, None),
        }
    }

    fn append(self, store: &mut Store, ids: impl IntoIterator<Item = u64>) -> Result<(), Error> {
        if self == Flavour::RaggedZstd {
            let mut p = Packed::default();
            for id in ids {
                let len = ragged_len(id);
                p.push(&[len as u64], &record_bytes(id, len));
            }
            store.append_ragged(&p)
        } else {
            let bytes: Vec<u8> = ids
                .into_iter()
                .flat_map(|id| self.dense_bytes(id))
                .collect();
            store.append_dense(&bytes)
        }
    }

    fn dense_bytes(self, id: u64) -> Vec<u8> {
        match self {
            Flavour::DenseZstdMixed => mixed_bytes(id, WIDTH),
            _ => record_bytes(id, WIDTH),
        }
    }

    /// The ids of the store's records in index order, checking every byte.
    fn ids(self, store: &Store) -> Vec<u64> {
        let all: Vec<u64> = (0..store.len()).collect();
        let id_of = |rec: &[u8]| u64::from_le_bytes(rec[..8].try_into().unwrap());
        if self == Flavour::RaggedZstd {
            let batch = store.gather_ragged(&all).unwrap();
            (0..batch.len())
                .map(|i| {
                    let rec = batch.record(i);
                    let payload = rec.payload;
                    let id = id_of(payload);
                    assert_eq!(rec.shape(), vec![ragged_len(id) as u64]);
                    assert_eq!(payload, record_bytes(id, ragged_len(id)), "record {i}");
                    id
                })
                .collect()
        } else {
            if self == Flavour::DenseZstdMixed && store.len() >= 3 {
                let raw = store.stats().raw_records;
                assert!(raw > 0 && raw < store.len(), "{raw} of {} raw", store.len());
            }
            let buf = store.gather_dense(&all).unwrap();
            buf.as_slice()
                .chunks_exact(WIDTH)
                .enumerate()
                .map(|(i, rec)| {
                    let id = id_of(rec);
                    assert_eq!(rec, self.dense_bytes(id), "record {i}");
                    id
                })
                .collect()
        }
    }
}

/// Swap-last delete applied to a model of the ids.
fn model_delete(model: &mut Vec<u64>, idx: &[u64]) {
    let mut order = idx.to_vec();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.dedup();
    for i in order {
        model.swap_remove(i as usize);
    }
}

// ----------------------------------------------------------------- scenarios

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    AppendSync,
    DeleteSync,
    DeleteLastAppendSync,
    DeleteAppendSync,
    AppendClose,
    Compact,
    CompactPending,
    Create,
}

impl Scenario {
    const ALL: [Scenario; 8] = [
        Scenario::AppendSync,
        Scenario::DeleteSync,
        Scenario::DeleteLastAppendSync,
        Scenario::DeleteAppendSync,
        Scenario::AppendClose,
        Scenario::Compact,
        Scenario::CompactPending,
        Scenario::Create,
    ];

    fn name(self) -> String {
        format!("{self:?}")
    }

    fn parse(s: &str) -> Scenario {
        Scenario::ALL.into_iter().find(|c| c.name() == s).unwrap()
    }

    /// Builds the starting store (in the parent).
    fn prepare(self, f: Flavour, dir: &Path) {
        if self == Scenario::Create {
            return;
        }
        let mut store = f.create(dir).unwrap();
        f.append(&mut store, 0..40).unwrap();
        store.sync().unwrap();
        f.append(&mut store, 40..70).unwrap();
        if matches!(self, Scenario::Compact | Scenario::CompactPending) {
            // Holes everywhere: at the front, scattered, and the tail.
            store
                .delete(&[0u64, 3, 4, 11, 20, 21, 22, 35, 50, 61, 69])
                .unwrap();
        }
        store.close().unwrap();
    }

    /// Runs the operation (in a child). The store is never dropped (a drop
    /// closes, which syncs): the child exits right after the operation, as
    /// if it crashed then.
    fn run(self, f: Flavour, dir: &Path) -> Result<(), Error> {
        if self == Scenario::Create {
            return f.create(dir).map(std::mem::forget);
        }
        let mut store = Store::open(dir)?;
        let result = self.op(f, &mut store);
        match (self, result) {
            (Scenario::AppendClose, Ok(())) => store.close(),
            (_, result) => {
                std::mem::forget(store);
                result
            }
        }
    }

    fn op(self, f: Flavour, store: &mut Store) -> Result<(), Error> {
        match self {
            Scenario::AppendSync => {
                f.append(store, 100..110)?;
                f.append(store, 110..130)?;
                store.sync()
            }
            Scenario::DeleteSync => {
                store.delete(&[5u64, 17, 40, 0, 69, 33, 34, 35])?;
                store.sync()
            }
            Scenario::DeleteLastAppendSync => {
                store.delete(&[69u64, 68, 67])?;
                f.append(store, 100..105)?;
                store.sync()
            }
            Scenario::DeleteAppendSync => {
                store.delete(&[1u64, 9, 25, 44, 58, 60])?;
                f.append(store, 100..107)?;
                store.delete(&[2u64, 66])?;
                store.sync()
            }
            Scenario::AppendClose => f.append(store, 100..125),
            Scenario::Compact => store.compact(),
            Scenario::CompactPending => {
                // compact() first commits what is pending.
                store.delete(&[7u64, 8])?;
                f.append(store, 100..104)?;
                store.compact()
            }
            Scenario::Create => unreachable!(),
        }
    }
}

// --------------------------------------------------------------- the child

/// The child side: does nothing unless `LOADERX_SWEEP_SCENARIO` is set. It
/// runs the scenario on the store at `LOADERX_SWEEP_DIR` with the fault
/// point armed from the environment, prints `OPS n` (fault points reached)
/// and `RESULT ...`, and exits without running destructors (a crash right
/// after the operation).
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn sweep_child() {
    let Ok(spec) = std::env::var(SCENARIO_ENV) else {
        return;
    };
    set_compact_steps_for_tests(COMPACT_STEP, COMPACT_DIRECT);
    let (scenario, flavour) = spec.split_once(':').unwrap();
    let (scenario, f) = (Scenario::parse(scenario), Flavour::parse(flavour));
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let result = scenario.run(f, &dir);
    println!("OPS {}", fault::ops());
    match result {
        Ok(()) => println!("RESULT ok"),
        Err(Error::Io { source, path }) => {
            println!(
                "RESULT io {} {}",
                source.raw_os_error().unwrap_or(-1),
                path.display()
            );
        }
        Err(other) => println!("RESULT other {other}"),
    }
    std::process::exit(0);
}

struct Outcome {
    killed: bool,
    ops: Option<u64>,
    result: String,
}

fn run_child(scenario: Scenario, f: Flavour, dir: &Path, fault: Option<(u64, &str)>) -> Outcome {
    let mut cmd = common::rerun("sweep_child");
    cmd.env(SCENARIO_ENV, format!("{}:{}", scenario.name(), f.name()))
        .env(DIR_ENV, dir)
        .env_remove("LOADERX_FAULT_AT")
        .env_remove("LOADERX_FAULT")
        .env("LOADERX_FAULT_SKIP_FSYNC", "1")
        // One worker thread: parallel compression places frames in
        // completion order, which moves compaction's step boundaries, so
        // only a single thread makes every run reach the same fault points.
        .env("LOADERX_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((k, mode)) = fault {
        cmd.env("LOADERX_FAULT_AT", k.to_string())
            .env("LOADERX_FAULT", mode);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = |tag: &str| {
        stdout
            .lines()
            // The harness may print "test sweep_child ... " on the same line.
            .find_map(|l| l.split_once(tag).map(|(_, rest)| rest.to_string()))
    };
    let killed = out.status.signal() == Some(libc::SIGKILL);
    assert!(
        killed || out.status.success(),
        "child {scenario:?} {f:?} {fault:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Outcome {
        killed,
        ops: line("OPS ").map(|n| n.parse().unwrap()),
        result: line("RESULT ").unwrap_or_default(),
    }
}

// -------------------------------------------------------------- the parent

/// What a store directory holds: `None` when there is no store.
fn observe(dir: &Path, f: Flavour) -> Option<Vec<u64>> {
    match Store::open(dir) {
        Ok(store) => {
            let stats = store.stats();
            assert!(stats.live_bytes <= stats.data_bytes, "{stats:?}");
            assert_eq!(stats.reclaimable, stats.data_bytes - stats.live_bytes);
            Some(f.ids(&store))
        }
        Err(Error::NoStore { .. }) => None,
        Err(e) => panic!("{}: the store does not reopen: {e}", dir.display()),
    }
}

/// The store reopened after the crash is fully usable, and once closed it
/// is byte-exact with the seed's format: nothing pending, files trimmed, no
/// file but the store's own.
fn check_usable(dir: &Path, f: Flavour, state: &Option<Vec<u64>>) {
    let mut store = match state {
        Some(_) => Store::open(dir).unwrap_or_else(|e| panic!("{}: reopen: {e}", dir.display())),
        // A create that was killed leaves no store, and create works again.
        None => f
            .create(dir)
            .unwrap_or_else(|e| panic!("{}: create again: {e}", dir.display())),
    };
    let mut model = state.clone().unwrap_or_default();
    f.append(&mut store, [9000]).unwrap();
    model.push(9000);
    if model.len() > 2 {
        store.delete(&[1u64]).unwrap();
        model_delete(&mut model, &[1]);
    }
    store.close().unwrap();
    let store = Store::open(dir).unwrap();
    assert_eq!(f.ids(&store), model);
    store.compact_for_check();
    let meta = fs::read(dir.join("meta.zr")).unwrap();
    assert!(
        meta[20..31].iter().all(|&b| b == 0),
        "header extension left set"
    );
    assert_eq!(meta.len() as u64, 4096 + 16 * model.len() as u64);
    let tail = u64::from_le_bytes(meta[8..16].try_into().unwrap());
    assert_eq!(fs::metadata(dir.join("data.zr")).unwrap().len(), tail);
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["data.zr", "meta.zr"], "{}", dir.display());
}

trait CompactForCheck {
    fn compact_for_check(self);
}

impl CompactForCheck for Store {
    /// A full compaction of the recovered store keeps every record.
    fn compact_for_check(mut self) {
        let before = self.len();
        self.compact().unwrap();
        assert_eq!(self.len(), before);
        assert_eq!(self.stats().reclaimable, 0);
        self.close().unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    if !from.exists() {
        return;
    }
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[derive(Default, Debug)]
struct Tally {
    points: u64,
    before: u64,
    after: u64,
}

/// Sweeps every fault point of one scenario and flavour in `mode`
/// (`kill`, `enospc` or `eio`).
fn sweep(scenario: Scenario, f: Flavour, mode: &str) -> Tally {
    let root = tempfile::Builder::new()
        .prefix(&format!("{scenario:?}-{}-{mode}-", f.name()))
        .tempdir()
        .unwrap();
    let base = root.path().join("base");
    scenario.prepare(f, &base);
    let before = observe(&base, f);
    let reference = root.path().join("reference");
    copy_dir(&base, &reference);
    let clean = run_child(scenario, f, &reference, None);
    assert_eq!(clean.result, "ok", "{scenario:?} {f:?} unharmed");
    let ops = clean.ops.unwrap();
    let after = observe(&reference, f);
    let mut tally = Tally::default();
    for k in 0..ops {
        let dir = root.path().join(format!("k{k}"));
        let store_dir = if scenario == Scenario::Create {
            // create makes the directory itself
            dir.join("store")
        } else {
            copy_dir(&base, &dir);
            dir.clone()
        };
        let outcome = run_child(scenario, f, &store_dir, Some((k, mode)));
        match mode {
            "kill" => assert!(outcome.killed, "{scenario:?} {f:?}: not killed at {k}"),
            "enospc" | "eio" => {
                let errno = if mode == "enospc" {
                    libc::ENOSPC
                } else {
                    libc::EIO
                };
                assert!(
                    outcome.result.starts_with(&format!("io {errno} ")),
                    "{scenario:?} {f:?} {mode} at point {k}/{ops}: {}",
                    outcome.result
                );
            }
            _ => unreachable!(),
        }
        let state = observe(&store_dir, f);
        if state == before {
            tally.before += 1;
        } else if state == after {
            tally.after += 1;
        } else {
            panic!(
                "{scenario:?} {f:?} {mode} at point {k}/{ops}: the store holds {state:?}, \
                 neither the state before ({before:?}) nor after ({after:?})"
            );
        }
        check_usable(&store_dir, f, &state);
        tally.points += 1;
        let _ = fs::remove_dir_all(&dir);
    }
    assert!(tally.points > 0);
    tally
}

/// The parent's tests run one at a time: a child spawned by one test holds
/// copies of every descriptor the parent has open until it execs, and so,
/// for that instant, the lock of any store another test thread has open.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sweep_all(mode: &str, scenarios: &[Scenario]) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fault::skip_fsync(true);
    let mut report = BTreeMap::new();
    for &scenario in scenarios {
        for f in Flavour::ALL {
            let t = sweep(scenario, f, mode);
            report.insert(format!("{scenario:?}/{}", f.name()), t);
        }
    }
    let total: u64 = report.values().map(|t| t.points).sum();
    for (name, t) in &report {
        eprintln!(
            "{mode:>6} {name:<34} {:>4} points: {:>4} before, {:>4} after",
            t.points, t.before, t.after
        );
    }
    eprintln!("{mode}: {total} fault points, every outcome the state before or after");
}

#[test]
fn kill_at_every_fault_point() {
    sweep_all("kill", &Scenario::ALL);
}

#[test]
fn enospc_at_every_fault_point() {
    sweep_all("enospc", &Scenario::ALL);
}

#[test]
fn eio_at_every_fault_point() {
    sweep_all(
        "eio",
        &[
            Scenario::AppendSync,
            Scenario::DeleteAppendSync,
            Scenario::Compact,
        ],
    );
}

// ------------------------------------------------------- random SIGKILLs

/// The random writer: opens the store (creating it on the first cycle) and
/// runs random operations until it is killed. Before a committing call it
/// writes the state that call commits to `pending`; when the call returns,
/// it renames `pending` to `committed`.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn random_worker() {
    let Ok(seed) = std::env::var(SEED_ENV) else {
        return;
    };
    set_compact_steps_for_tests(4 << 10, 1 << 10);
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let store_dir = dir.join("store");
    let f = Flavour::RaggedZstd;
    let mut rng = XorShift(seed.parse::<u64>().unwrap() | 1);
    let mut store = match Store::open(&store_dir) {
        Ok(s) => s,
        Err(Error::NoStore { .. }) => f.create(&store_dir).unwrap(),
        Err(e) => panic!("{e}"),
    };
    let mut model = f.ids(&store);
    let mut next_id = model.iter().max().map_or(0, |m| m + 1) + rng.below(1000) * 1000;
    let save = |name: &str, model: &[u64]| {
        let text: Vec<String> = model.iter().map(u64::to_string).collect();
        fs::write(dir.join("tmp"), text.join(" ")).unwrap();
        fs::rename(dir.join("tmp"), dir.join(name)).unwrap();
    };
    loop {
        match rng.below(10) {
            0..=4 => {
                let n = 1 + rng.below(40);
                f.append(&mut store, next_id..next_id + n).unwrap();
                model.extend(next_id..next_id + n);
                next_id += n;
            }
            5..=6 if !model.is_empty() => {
                let k = 1 + rng.below(8);
                let idx: Vec<u64> = (0..k).map(|_| rng.below(model.len() as u64)).collect();
                store.delete(&idx).unwrap();
                model_delete(&mut model, &idx);
            }
            7..=8 => {
                save("pending", &model);
                store.sync().unwrap();
                fs::rename(dir.join("pending"), dir.join("committed")).unwrap();
            }
            _ => {
                save("pending", &model);
                store.compact().unwrap();
                fs::rename(dir.join("pending"), dir.join("committed")).unwrap();
            }
        }
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn read_model(path: &Path) -> Option<Vec<u64>> {
    match fs::read_to_string(path) {
        Ok(text) => Some(
            text.split_whitespace()
                .map(|t| t.parse().unwrap())
                .collect(),
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn random_kills_on_one_long_lived_store() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fault::skip_fsync(true);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let f = Flavour::RaggedZstd;
    let mut rng = XorShift(0x5EED_1234);
    let mut committed: Option<Vec<u64>> = None;
    let (mut at_pending, mut at_committed) = (0, 0);
    for cycle in 0..100u64 {
        let mut child = common::rerun("random_worker")
            .env(SEED_ENV, (cycle * 7919 + 13).to_string())
            .env("LOADERX_FAULT_SKIP_FSYNC", "1")
            .env(DIR_ENV, dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(2_000 + rng.below(40_000)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "cycle {cycle}: {status}"
        );
        let committed_file = read_model(&dir.join("committed"));
        let pending = read_model(&dir.join("pending"));
        let last = committed_file.or_else(|| committed.clone());
        let state = observe(&dir.join("store"), f);
        match (&state, &last, &pending) {
            // killed before the store was first created
            (None, None, _) => {}
            (Some(s), _, Some(p)) if s == p => at_pending += 1,
            (Some(s), Some(c), _) if s == c => at_committed += 1,
            // killed before the first sync of a fresh store
            (Some(s), None, _) if s.is_empty() => at_committed += 1,
            _ => panic!(
                "cycle {cycle}: the store holds {state:?}; last committed {last:?}, in flight {pending:?}"
            ),
        }
        committed = state;
        if let Some(c) = &committed {
            let text: Vec<String> = c.iter().map(u64::to_string).collect();
            fs::write(dir.join("committed"), text.join(" ")).unwrap();
        }
        let _ = fs::remove_file(dir.join("pending"));
    }
    eprintln!(
        "random SIGKILLs: 100 cycles, {at_committed} at the last committed state, {at_pending} at the one in flight"
    );
    let store = Store::open(dir.join("store")).unwrap();
    assert!(!store.is_empty(), "the writers made progress");
}
