//! Maintenance costs of the store engine: append+sync throughput (a sync
//! after every 1 MiB batch, and one sync after 64 MiB),
//! `delete(400 scattered keys)` + `sync()`, and `compact()` after deleting a
//! tenth of the records. Each is timed on stores built fresh in a temporary
//! directory (on the file system of `$TMPDIR`), fsyncs included.
//!
//! `cargo bench --bench maintenance -- [ROUNDS]` prints one JSON line per
//! measurement. It uses only the API that every release of the engine has,
//! so the same file builds against an older checkout for a same-run A/B
//! (`benches/maintenance_ab.sh`).

use std::time::Instant;

use loaderx::{Codec, DType, Records, Schema, Store};

fn records(n: usize, width: usize, seed: u64) -> Vec<u8> {
    // Compressible but distinct: a counter pattern with a per-record salt.
    let mut out = Vec::with_capacity(n * width);
    for i in 0..n {
        let salt = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i as u64) as u32;
        for k in 0..width / 4 {
            out.extend_from_slice(&(salt.wrapping_add((k / 7) as u32)).to_le_bytes());
        }
    }
    out
}

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn report(name: &str, codec: Codec, value: f64, unit: &str) {
    println!(r#"{{"bench": "{name}", "codec": "{codec}", "value": {value:.6}, "unit": "{unit}"}}"#);
}

/// Appends `batches` batches of 256 records of 4 KiB, syncing after each
/// (`per_batch`) or once at the end, as the store benchmarks' ingest does.
fn append_sync(codec: Codec, per_batch: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let width = 4096;
    let batch = records(256, width, 1);
    let schema = Schema::dense(DType::U8, &[width as u64]).unwrap();
    let mut store = Store::create(tmp.path().join("s"), schema, codec, None).unwrap();
    let batches = 64;
    let t = Instant::now();
    for _ in 0..batches {
        store.append_dense(&batch).unwrap();
        if per_batch {
            store.sync().unwrap();
        }
    }
    store.sync().unwrap();
    let secs = t.elapsed().as_secs_f64();
    report(
        if per_batch {
            "append_sync_each_mib"
        } else {
            "append_then_sync"
        },
        codec,
        (batches * batch.len()) as f64 / secs / (1 << 20) as f64,
        "MiB/s",
    );
}

/// `delete(400 scattered keys)` + `sync()` on a 200,000-record store, five
/// times in a row; reports the median.
fn delete_sync(codec: Codec) {
    let tmp = tempfile::tempdir().unwrap();
    let width = 64;
    let schema = Schema::dense(DType::U8, &[width as u64]).unwrap();
    let mut store = Store::create(tmp.path().join("s"), schema, codec, None).unwrap();
    store.append_dense(&records(200_000, width, 2)).unwrap();
    store.sync().unwrap();
    let mut rng = Lcg(7);
    let mut times = Vec::new();
    for _ in 0..5 {
        let keys: Vec<u64> = (0..400).map(|_| rng.below(store.len())).collect();
        let t = Instant::now();
        store.delete(&keys).unwrap();
        store.sync().unwrap();
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    report("delete400_sync", codec, times[2] * 1e3, "ms");
}

/// `compact()` of a 100,000-record, 100 MiB store after deleting every
/// tenth record (scattered holes from the front to the end).
fn compact(codec: Codec) {
    let tmp = tempfile::tempdir().unwrap();
    let width = 1024;
    let schema = Schema::dense(DType::U8, &[width as u64]).unwrap();
    let dir = tmp.path().join("s");
    let mut store = Store::create(&dir, schema, codec, None).unwrap();
    store.append_dense(&records(100_000, width, 3)).unwrap();
    let keys: Vec<u64> = (0..10_000u64).map(|i| i * 10).collect();
    store.delete(&keys).unwrap();
    store.close().unwrap();
    let mut store = Store::open(&dir).unwrap();
    let live = store.stats().live_bytes;
    let t = Instant::now();
    store.compact().unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(store.stats().reclaimable, 0);
    report("compact", codec, secs * 1e3, "ms");
    report(
        "compact_rate",
        codec,
        live as f64 / secs / (1 << 20) as f64,
        "MiB/s",
    );
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1);
    for _ in 0..rounds {
        for codec in [Codec::Raw, Codec::Zstd] {
            append_sync(codec, true);
            append_sync(codec, false);
            delete_sync(codec);
            compact(codec);
        }
    }
}
