//! Gathers large enough to fan out over the worker pool (many chunks,
//! claimed by whichever thread is free) return exactly what one-record reads
//! return, in any index order and with duplicates, from concurrent callers,
//! and fail cleanly when one record in a late chunk is corrupt.

use std::os::unix::fs::FileExt;

use loaderx::{Codec, DType, Error, Packed, Records, Schema, Store};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const N: u64 = 3000;
const WIDTH: usize = 2048;

fn dense_store(dir: &std::path::Path, codec: Codec) -> Store {
    let data: Vec<u8> = (0..N as usize * WIDTH)
        .map(|i| ((i / WIDTH) as u64 * 31 + (i % 97) as u64) as u8)
        .collect();
    let mut s = Store::create(
        dir.join(format!("dense-{codec}")),
        Schema::dense(DType::U8, &[WIDTH as u64]).unwrap(),
        codec,
        None,
    )
    .unwrap();
    s.append_dense(&data).unwrap();
    s.sync().unwrap();
    s
}

fn ragged_store(dir: &std::path::Path, codec: Codec) -> Store {
    let mut rng = Rng(7);
    let mut packed = Packed::default();
    for i in 0..N {
        let len = 4 + (rng.next() % 500) as usize;
        let payload: Vec<u8> = (0..len * 4)
            .map(|k| (i as usize * 13 + k / 3) as u8)
            .collect();
        packed.push(&[len as u64], &payload);
    }
    let mut s = Store::create(
        dir.join(format!("ragged-{codec}")),
        Schema::ragged(DType::I32),
        codec,
        None,
    )
    .unwrap();
    s.append_ragged(&packed).unwrap();
    s.sync().unwrap();
    s
}

fn plan(rng: &mut Rng, batch: usize) -> Vec<u64> {
    (0..batch).map(|_| rng.next() % N).collect()
}

fn check(store: &Store, idx: &[u64], what: &str) {
    if store.schema().record_width().is_some() {
        let buf = store.gather_dense(idx).unwrap();
        for (k, &i) in idx.iter().enumerate() {
            assert!(
                buf.as_slice()[k * WIDTH..(k + 1) * WIDTH] == store.read_record(i).unwrap()[..],
                "{what}: record {i} at {k} of {}",
                idx.len()
            );
        }
    } else {
        let batch = store.gather_ragged(idx).unwrap();
        assert_eq!(batch.len(), idx.len());
        for (k, &i) in idx.iter().enumerate() {
            let (start, len) = batch.spans[k];
            assert_eq!(start % 8, 0);
            assert!(
                batch.buffer.as_slice()[start..start + len] == store.read_record(i).unwrap()[..],
                "{what}: record {i} at {k} of {}",
                idx.len()
            );
        }
    }
}

#[test]
fn fanned_out_gathers_equal_record_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(99);
    for codec in [Codec::Raw, Codec::Zstd] {
        for store in [
            dense_store(dir.path(), codec),
            ragged_store(dir.path(), codec),
        ] {
            for batch in [1usize, 2, 7, 64, 256, 1000, 5000] {
                let idx = plan(&mut rng, batch);
                check(&store, &idx, &format!("{codec} batch {batch}"));
            }
            // Every record once, in order, and all one record repeated.
            check(&store, &(0..N).collect::<Vec<_>>(), &format!("{codec} all"));
            check(&store, &vec![N / 2; 700], &format!("{codec} repeated"));
        }
    }
}

#[test]
fn concurrent_callers_fan_out_over_one_pool() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [
        dense_store(dir.path(), Codec::Zstd),
        ragged_store(dir.path(), Codec::Raw),
    ];
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let stores = &stores;
            s.spawn(move || {
                let mut rng = Rng(1000 + t);
                for round in 0..20 {
                    let store = &stores[(t as usize + round) % 2];
                    let batch = 64 + (rng.next() % 900) as usize;
                    let idx = plan(&mut rng, batch);
                    check(store, &idx, &format!("thread {t} round {round}"));
                }
            });
        }
    });
}

#[test]
fn a_corrupt_record_in_a_late_chunk_fails_the_gather_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let store = dense_store(dir.path(), Codec::Zstd);
    let bad = 2500u64;
    let loc = store.loc(bad).unwrap();
    drop(store);
    // Break the frame's magic number.
    let data = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("dense-zstd/data.zr"))
        .unwrap();
    data.write_all_at(&[0xA5; 4], loc.offset).unwrap();
    drop(data);
    let store = Store::open_readonly(dir.path().join("dense-zstd")).unwrap();
    let mut idx: Vec<u64> = (0..1000).collect();
    idx.push(bad);
    match store.gather_dense(&idx) {
        Err(Error::Corrupted { file, invariant }) => {
            assert!(file.ends_with("data.zr"), "{file:?}");
            assert!(invariant.contains("record 2500"), "{invariant}");
        }
        other => panic!("expected Corrupted, got {:?}", other.map(|b| b.len())),
    }
    // The store stays usable for every other record.
    check(&store, &(0..1000).collect::<Vec<_>>(), "after the failure");
}
