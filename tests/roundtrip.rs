//! Round trips through every codec, layout and dtype: write, close, reopen,
//! gather in random order with duplicates, compare bytes. Also empty and
//! large (multi-lane) gathers, delete + compact and the stats accounting.

mod common;

use std::path::Path;

use loaderx::dict;
use loaderx::executor;
use loaderx::schema::Kind;
use loaderx::Packed;
use loaderx::{Codec, DType, Schema, Stats, Store};
use loaderx::{Indices, Records};

// ------------------------------------------------------------------ helpers

/// SplitMix64: a small deterministic generator for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// `n` elements of `dtype`: mostly small values (compressible), sometimes
/// arbitrary bit patterns (NaNs, extremes); bools are 0 or 1.
fn elements(dtype: DType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let size = dtype.itemsize();
    let mut out = Vec::with_capacity(n * size);
    for _ in 0..n {
        if dtype == DType::Bool {
            out.push(rng.below(2) as u8);
        } else if rng.below(8) == 0 {
            out.extend_from_slice(&rng.next().to_le_bytes()[..size]);
        } else {
            out.extend_from_slice(&rng.below(40).to_le_bytes()[..size]);
        }
    }
    out
}

/// A ragged record's logical bytes: `[u64 ndim][u64 dim]*ndim[payload]`.
fn ragged_logical(shape: &[u64], payload: &[u8]) -> Vec<u8> {
    let mut out = (shape.len() as u64).to_le_bytes().to_vec();
    for d in shape {
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(payload);
    out
}

/// Random ragged records (shape, payload): ndim 0..=3, 0-d ones included.
fn ragged_records(dtype: DType, n: usize, max_dim: u64, rng: &mut Rng) -> Vec<(Vec<u64>, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let ndim = if i % 5 == 0 { 0 } else { rng.below(4) as usize };
            let shape: Vec<u64> = (0..ndim).map(|_| 1 + rng.below(max_dim)).collect();
            let count = shape.iter().product::<u64>() as usize;
            let payload = elements(dtype, count, rng);
            (shape, payload)
        })
        .collect()
}

fn pack(records: &[(Vec<u64>, Vec<u8>)]) -> Packed {
    let mut p = Packed::default();
    for (shape, payload) in records {
        p.push(shape, payload);
    }
    p
}

/// A dictionary trained on (a strided sample of) `records`; falls back to
/// generic training data when the records are too few or too small to
/// train on (tiny scalar stores).
fn dict_for(records: &[Vec<u8>]) -> Vec<u8> {
    let tier = dict::tier("fast").unwrap();
    let plan = dict::sample_plan(records.len(), |i| records[i].len(), tier.sample_bytes);
    let sizes: Vec<usize> = plan.iter().map(|&i| records[i].len()).collect();
    let total: usize = sizes.iter().sum();
    if plan.len() >= dict::MIN_SAMPLES && total >= dict::MIN_SAMPLE_BYTES {
        let samples: Vec<u8> = plan.iter().flat_map(|&i| records[i].clone()).collect();
        return dict::train(&samples, &sizes, tier).unwrap();
    }
    let mut rng = Rng(99);
    let generic: Vec<Vec<u8>> = (0..200)
        .map(|_| elements(DType::U16, 100, &mut rng))
        .collect();
    let sizes: Vec<usize> = generic.iter().map(Vec::len).collect();
    dict::train(&generic.concat(), &sizes, tier).unwrap()
}

fn create(dir: &Path, schema: Schema, codec: Codec, train_on: &[Vec<u8>]) -> Store {
    let d = (codec == Codec::ZstdDict).then(|| dict_for(train_on));
    Store::create(dir, schema, codec, d.as_deref()).unwrap()
}

/// Every index once, shuffled, plus random duplicates.
fn index_plan(len: usize, extra: usize, rng: &mut Rng) -> Vec<u64> {
    let mut idx: Vec<u64> = (0..len as u64).collect();
    if len > 0 {
        idx.extend((0..extra).map(|_| rng.below(len as u64)));
    }
    rng.shuffle(&mut idx);
    idx
}

fn check_dense(store: &Store, expected: &[Vec<u8>], rng: &mut Rng, what: &str) {
    assert_eq!(store.len(), expected.len() as u64, "{what}: len");
    let width = store.schema().record_width().unwrap() as usize;
    let idx = index_plan(expected.len(), expected.len() + 3, rng);
    let want: Vec<u8> = idx
        .iter()
        .flat_map(|&i| expected[i as usize].clone())
        .collect();
    let got = store.gather_dense(&idx).unwrap();
    assert_eq!(got.len(), idx.len() * width, "{what}: gather size");
    assert!(
        got.as_slice() == want,
        "{what}: gather_dense(u64) bytes differ"
    );

    // the other index types and gather_dense_into a dirty buffer
    let idx_i64: Vec<i64> = idx.iter().rev().map(|&i| i as i64).collect();
    let want_rev: Vec<u8> = idx_i64
        .iter()
        .flat_map(|&i| expected[i as usize].clone())
        .collect();
    assert!(
        Indices::from(&idx_i64)
            .resolve(store.len())
            .and_then(|i| store.gather_dense(i))
            .unwrap()
            .as_slice()
            == want_rev,
        "{what}: i64"
    );
    let mut dst = vec![0xEEu8; idx.len() * width];
    store.gather_dense_into(&idx, &mut dst).unwrap();
    assert!(dst == want, "{what}: gather_dense_into");

    for (i, rec) in expected.iter().enumerate() {
        assert_eq!(
            &store.read_record(i as u64).unwrap(),
            rec,
            "{what}: read_record({i})"
        );
        assert_eq!(store.logical_len(i as u64), Some(width));
    }
}

fn check_ragged(store: &Store, expected: &[(Vec<u64>, Vec<u8>)], rng: &mut Rng, what: &str) {
    assert_eq!(store.len(), expected.len() as u64, "{what}: len");
    let idx = index_plan(expected.len(), expected.len() + 3, rng);
    let batch = store.gather_ragged(&idx).unwrap();
    assert_eq!(batch.len(), idx.len(), "{what}: batch len");
    let buf = batch.buffer.as_slice();
    for (k, &i) in idx.iter().enumerate() {
        let (shape, payload) = &expected[i as usize];
        let (start, len) = batch.spans[k];
        assert_eq!(start % 8, 0, "{what}: span {k} is 8-byte aligned");
        assert_eq!(
            &buf[start..start + len],
            &ragged_logical(shape, payload)[..],
            "{what}: record {i}"
        );
        let rec = batch.record(k);
        assert_eq!(&rec.shape(), shape, "{what}: shape of record {i}");
        assert_eq!(rec.ndim(), shape.len());
        assert_eq!(rec.payload, &payload[..], "{what}: payload of record {i}");
    }
    let idx_i64: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
    let again = Indices::from(&idx_i64)
        .resolve(store.len())
        .and_then(|i| store.gather_ragged(i))
        .unwrap();
    assert_eq!(again.spans, batch.spans);
    assert!(again.buffer.as_slice() == buf, "{what}: i64 gather");
    for (i, (shape, payload)) in expected.iter().enumerate() {
        let logical = ragged_logical(shape, payload);
        assert_eq!(
            store.read_record(i as u64).unwrap(),
            logical,
            "{what}: read_record({i})"
        );
        assert_eq!(store.logical_len(i as u64), Some(logical.len()));
    }
}

fn assert_stats_consistent(store: &Store) -> Stats {
    let s = store.stats();
    let phys: u64 = (0..store.len())
        .map(|i| store.loc(i).unwrap().phys_length as u64)
        .sum();
    assert_eq!(s.records, store.len());
    assert_eq!(s.live_bytes, phys);
    assert!(s.data_bytes >= s.live_bytes);
    assert_eq!(s.reclaimable, s.data_bytes - s.live_bytes);
    if store.codec() == Codec::Raw {
        let logic: u64 = (0..store.len())
            .map(|i| store.logical_len(i).unwrap() as u64)
            .sum();
        assert_eq!(s.live_bytes, logic, "raw stores store logical bytes");
    }
    s
}

fn dense_case(tmp: &Path, codec: Codec, dtype: DType, shape: &[u64], n: usize) {
    let what = format!("dense {codec} {dtype} {shape:?}");
    let mut rng = Rng(n as u64 * 31 + dtype.itemsize() as u64 + codec as u64 * 7);
    let count = shape.iter().product::<u64>() as usize;
    let recs: Vec<Vec<u8>> = (0..n).map(|_| elements(dtype, count, &mut rng)).collect();
    let dir = tmp.join(format!("dense-{codec}-{dtype}-{}", shape.len()));
    let schema = Schema::dense(dtype, shape).unwrap();
    let mut store = create(&dir, schema.clone(), codec, &recs);
    // batches of 1, n/2 and the rest, plus an empty append (a no-op)
    store.append_dense(&recs[0]).unwrap();
    store.append_dense(&[]).unwrap();
    store.append_dense(&recs[1..n / 2].concat()).unwrap();
    store.append_dense(&recs[n / 2..].concat()).unwrap();
    check_dense(&store, &recs, &mut rng, &format!("{what} (before close)"));
    store.close().unwrap();

    let store = Store::open(&dir)
        .and_then(|s| s.require_kind(Kind::Dense))
        .unwrap();
    assert_eq!(store.schema(), &schema);
    assert_eq!(store.codec(), codec);
    assert_eq!(store.kind(), Kind::Dense);
    check_dense(&store, &recs, &mut rng, &what);
    let s = assert_stats_consistent(&store);
    assert_eq!(s.reclaimable, 0, "{what}: a fresh store has no garbage");
}

fn ragged_case(tmp: &Path, codec: Codec, dtype: DType, n: usize) {
    let what = format!("ragged {codec} {dtype}");
    let mut rng = Rng(n as u64 * 17 + dtype.itemsize() as u64 + codec as u64 * 5);
    let recs = ragged_records(dtype, n, 6, &mut rng);
    assert!(
        recs.iter().any(|(s, _)| s.is_empty()),
        "0-d records included"
    );
    let logical: Vec<Vec<u8>> = recs.iter().map(|(s, p)| ragged_logical(s, p)).collect();
    let dir = tmp.join(format!("ragged-{codec}-{dtype}"));
    let mut store = create(&dir, Schema::ragged(dtype), codec, &logical);
    store.append_ragged(&pack(&recs[..1])).unwrap();
    store.append_ragged(&Packed::default()).unwrap();
    store.append_ragged(&pack(&recs[1..n / 3])).unwrap();
    store.append_ragged(&pack(&recs[n / 3..])).unwrap();
    check_ragged(&store, &recs, &mut rng, &format!("{what} (before close)"));
    store.close().unwrap();

    let store = Store::open(&dir)
        .and_then(|s| s.require_kind(Kind::Ragged))
        .unwrap();
    assert_eq!(store.schema(), &Schema::ragged(dtype));
    assert_eq!(store.codec(), codec);
    check_ragged(&store, &recs, &mut rng, &what);
    let s = assert_stats_consistent(&store);
    assert_eq!(s.reclaimable, 0);
}

// -------------------------------------------------------------------- tests

#[test]
fn dense_round_trip_every_codec_and_dtype() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for dtype in DType::ALL {
            dense_case(tmp.path(), codec, dtype, &[3, 5], 90);
        }
    }
}

#[test]
fn dense_scalar_round_trip_every_codec_and_dtype() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for dtype in DType::ALL {
            dense_case(tmp.path(), codec, dtype, &[], 70);
        }
    }
}

#[test]
fn dense_higher_rank_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        dense_case(tmp.path(), codec, DType::F32, &[2, 3, 4, 1], 40);
    }
}

#[test]
fn ragged_round_trip_every_codec_and_dtype() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for dtype in DType::ALL {
            ragged_case(tmp.path(), codec, dtype, 80);
        }
    }
}

#[test]
fn ragged_zero_dim_records_only() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for dtype in [DType::Bool, DType::U8, DType::F16, DType::F64] {
            let mut rng = Rng(5);
            let recs: Vec<(Vec<u64>, Vec<u8>)> = (0..40)
                .map(|_| (vec![], elements(dtype, 1, &mut rng)))
                .collect();
            let logical: Vec<Vec<u8>> = recs.iter().map(|(s, p)| ragged_logical(s, p)).collect();
            let dir = tmp.path().join(format!("zd-{codec}-{dtype}"));
            let mut store = create(&dir, Schema::ragged(dtype), codec, &logical);
            store.append_ragged(&pack(&recs)).unwrap();
            store.close().unwrap();
            let store = Store::open(&dir).unwrap();
            for i in 0..40u64 {
                assert_eq!(store.logical_len(i), Some(8 + dtype.itemsize()));
            }
            check_ragged(&store, &recs, &mut rng, &format!("0-d {codec} {dtype}"));
        }
    }
}

#[test]
fn empty_gathers_and_empty_appends() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let mut rng = Rng(1);
        let train: Vec<Vec<u8>> = (0..50)
            .map(|_| elements(DType::I32, 64, &mut rng))
            .collect();
        // dense, empty store then a non-empty one
        let dir = tmp.path().join(format!("d-{codec}"));
        let mut store = create(
            &dir,
            Schema::dense(DType::I32, &[4]).unwrap(),
            codec,
            &train,
        );
        let none: [u64; 0] = [];
        assert!(store.gather_dense(&none).unwrap().is_empty());
        store.gather_dense_into(&none, &mut []).unwrap();
        store.append_dense(&[]).unwrap();
        assert_eq!(store.len(), 0);
        assert_eq!(store.stats().data_bytes, 0);
        store.append_dense(&train[0]).unwrap();
        let before = store.stats();
        store.append_dense(&[]).unwrap();
        assert_eq!(store.stats(), before);
        assert!(store.gather_dense(&none).unwrap().is_empty());
        assert!(Indices::from(&[0i64; 0])
            .resolve(store.len())
            .and_then(|i| store.gather_dense(i))
            .unwrap()
            .is_empty());
        store.close().unwrap();
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.len(), 16);
        assert!(store.gather_dense(&[]).unwrap().is_empty());
        drop(store);

        // ragged
        let dir = tmp.path().join(format!("r-{codec}"));
        let mut store = create(&dir, Schema::ragged(DType::I32), codec, &train);
        let b = store.gather_ragged(&none).unwrap();
        assert!(b.is_empty() && b.buffer.is_empty() && b.spans.is_empty());
        store.append_ragged(&Packed::default()).unwrap();
        assert_eq!(store.len(), 0);
        store
            .append_ragged(&pack(&[(vec![2], vec![1, 0, 0, 0, 2, 0, 0, 0])]))
            .unwrap();
        let before = store.stats();
        store.append_ragged(&Packed::default()).unwrap();
        assert_eq!(store.stats(), before);
        assert!(store.gather_ragged(&none).unwrap().is_empty());
        store.close().unwrap();
        let store = Store::open(&dir).unwrap();
        assert!(Indices::from(&[0i64; 0])
            .resolve(store.len())
            .and_then(|i| store.gather_ragged(i))
            .unwrap()
            .is_empty());
        assert_eq!(store.len(), 1);
    }
}

const FAN_OUT_CHILD: &str = "LOADERX_TEST_FAN_OUT_CHILD";

/// Gathers of several MiB, which the engine splits into contiguous blocks
/// of the index list on several worker threads.
fn large_gathers() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let mut rng = Rng(77 + codec as u64);
        // dense: 97 records of 48 KiB (u16 [96, 256])
        let shape = [96u64, 256];
        let recs: Vec<Vec<u8>> = (0..97)
            .map(|_| elements(DType::U16, 96 * 256, &mut rng))
            .collect();
        let dir = tmp.path().join(format!("big-dense-{codec}"));
        let mut store = create(
            &dir,
            Schema::dense(DType::U16, &shape).unwrap(),
            codec,
            &recs,
        );
        store.append_dense(&recs.concat()).unwrap();
        store.close().unwrap();
        let store = Store::open(&dir).unwrap();
        // 211 records, ~9.9 MiB, in random order with duplicates
        let idx: Vec<u64> = (0..211).map(|_| rng.below(97)).collect();
        let got = store.gather_dense(&idx).unwrap();
        assert_eq!(got.len(), 211 * 96 * 256 * 2);
        for (k, &i) in idx.iter().enumerate() {
            let w = recs[0].len();
            assert!(
                got.as_slice()[k * w..(k + 1) * w] == recs[i as usize][..],
                "{codec}: slot {k}"
            );
        }
        let mut dst = vec![0u8; got.len()];
        store.gather_dense_into(&idx, &mut dst).unwrap();
        assert!(dst == got.as_slice());
        // a gather whose size does not divide evenly among the lanes
        let odd: Vec<u64> = idx[..101].to_vec();
        let got = store.gather_dense(&odd).unwrap();
        let want: Vec<u8> = odd.iter().flat_map(|&i| recs[i as usize].clone()).collect();
        assert!(got.as_slice() == want);
        drop(store);

        // ragged: records of 1..=40 KiB, gathered ~9 MiB at a time
        let recs: Vec<(Vec<u64>, Vec<u8>)> = (0..150)
            .map(|_| {
                let shape = vec![1 + rng.below(40), 1024];
                let payload = elements(DType::U8, (shape[0] * 1024) as usize, &mut rng);
                (shape, payload)
            })
            .collect();
        let logical: Vec<Vec<u8>> = recs.iter().map(|(s, p)| ragged_logical(s, p)).collect();
        let dir = tmp.path().join(format!("big-ragged-{codec}"));
        let mut store = create(&dir, Schema::ragged(DType::U8), codec, &logical);
        store.append_ragged(&pack(&recs)).unwrap();
        store.close().unwrap();
        let store = Store::open(&dir).unwrap();
        let idx: Vec<u64> = (0..600).map(|_| rng.below(150)).collect();
        let batch = store.gather_ragged(&idx).unwrap();
        assert!(batch.buffer.len() > 4 << 20, "a multi-MiB gather");
        for (k, &i) in idx.iter().enumerate() {
            let (s, l) = batch.spans[k];
            assert_eq!(s % 8, 0);
            assert!(
                batch.buffer.as_slice()[s..s + l] == logical[i as usize][..],
                "{codec}: ragged slot {k}"
            );
        }
    }
}

#[test]
fn large_gathers_fan_out() {
    large_gathers();
}

/// The same large gathers with a pool wider than the machine (five lanes),
/// run in a child process so the environment variable sizes its pool.
#[test]
fn large_gathers_fan_out_over_five_threads() {
    if std::env::var_os(FAN_OUT_CHILD).is_some() {
        assert_eq!(executor::budget(), 5);
        assert_eq!(executor::threads(), 5);
        large_gathers();
        return;
    }
    let out = common::rerun("large_gathers_fan_out_over_five_threads")
        .env(FAN_OUT_CHILD, "1")
        .env(executor::THREADS_ENV, "5")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

/// Delete with swap-last in descending order, as the engine specifies.
fn model_delete<T>(model: &mut Vec<T>, idx: &[u64]) {
    let mut order = idx.to_vec();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.dedup();
    for i in order {
        model.swap_remove(i as usize);
    }
}

#[test]
fn delete_then_compact_preserves_index_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        for dense in [true, false] {
            let what = format!("{codec} dense={dense}");
            let mut rng = Rng(1234 + codec as u64);
            let n = 60;
            let dir = tmp.path().join(format!("dc-{codec}-{dense}"));
            let (mut store, mut model_d, mut model_r) = if dense {
                let recs: Vec<Vec<u8>> =
                    (0..n).map(|_| elements(DType::I16, 40, &mut rng)).collect();
                let mut s = create(
                    &dir,
                    Schema::dense(DType::I16, &[40]).unwrap(),
                    codec,
                    &recs,
                );
                s.append_dense(&recs[..30].concat()).unwrap();
                s.sync().unwrap();
                s.append_dense(&recs[30..].concat()).unwrap();
                (s, recs, Vec::new())
            } else {
                let recs = ragged_records(DType::I16, n, 9, &mut rng);
                let logical: Vec<Vec<u8>> =
                    recs.iter().map(|(s, p)| ragged_logical(s, p)).collect();
                let mut s = create(&dir, Schema::ragged(DType::I16), codec, &logical);
                s.append_ragged(&pack(&recs)).unwrap();
                (s, Vec::new(), recs)
            };
            let check = |store: &Store,
                         d: &[Vec<u8>],
                         r: &[(Vec<u64>, Vec<u8>)],
                         rng: &mut Rng,
                         w: &str| {
                if dense {
                    check_dense(store, d, rng, w)
                } else {
                    check_ragged(store, r, rng, w)
                }
            };
            let before = assert_stats_consistent(&store);
            assert_eq!(before.reclaimable, 0);

            // delete: unsorted, with duplicates, including the last and first
            let del = [59u64, 3, 17, 3, 0, 44, 58, 17, 30];
            let freed: u64 = {
                let mut u = del.to_vec();
                u.sort();
                u.dedup();
                u.iter()
                    .map(|&i| store.loc(i).unwrap().phys_length as u64)
                    .sum()
            };
            store.delete(&del).unwrap();
            if dense {
                model_delete(&mut model_d, &del);
            } else {
                model_delete(&mut model_r, &del);
            }
            assert_eq!(store.len(), 53);
            check(
                &store,
                &model_d,
                &model_r,
                &mut rng,
                &format!("{what} after delete"),
            );
            let s = assert_stats_consistent(&store);
            assert_eq!(
                s.data_bytes, before.data_bytes,
                "delete does not shrink data"
            );
            assert_eq!(s.reclaimable, freed);
            assert_eq!(s.live_bytes, before.live_bytes - freed);

            // the deletions survive a reopen, then compact
            store.close().unwrap();
            let mut store = Store::open(&dir).unwrap();
            check(
                &store,
                &model_d,
                &model_r,
                &mut rng,
                &format!("{what} reopened"),
            );
            assert_eq!(store.stats(), s);
            let old: Vec<u64> = (0..store.len())
                .map(|i| store.loc(i).unwrap().offset)
                .collect();
            let first_hole = {
                // records entirely below the first freed byte stay in place
                let mut offs: Vec<(u64, u32)> = (0..store.len())
                    .map(|i| {
                        let l = store.loc(i).unwrap();
                        (l.offset, l.phys_length)
                    })
                    .collect();
                offs.sort();
                let mut pos = 0;
                for (o, p) in offs {
                    if o != pos {
                        break;
                    }
                    pos += p as u64;
                }
                pos
            };
            store.compact().unwrap();
            for (i, &o) in old.iter().enumerate() {
                let new = store.loc(i as u64).unwrap().offset;
                assert!(
                    new <= o,
                    "{what}: compact moved record {i} up ({o} -> {new})"
                );
                if o < first_hole {
                    assert_eq!(new, o, "{what}: record {i} was already in place");
                }
            }
            check(
                &store,
                &model_d,
                &model_r,
                &mut rng,
                &format!("{what} compacted"),
            );
            let c = assert_stats_consistent(&store);
            assert_eq!(c.reclaimable, 0);
            assert_eq!(c.live_bytes, s.live_bytes);
            assert_eq!(c.data_bytes, c.live_bytes);
            assert_eq!(
                std::fs::metadata(dir.join("data.zr")).unwrap().len(),
                c.data_bytes
            );
            assert_eq!(
                std::fs::metadata(dir.join("meta.zr")).unwrap().len(),
                4096 + 16 * store.len()
            );

            // compacting again is a no-op; appends after compact land at the tail
            store.compact().unwrap();
            assert_eq!(store.stats(), c);
            if dense {
                let extra = elements(DType::I16, 80, &mut rng);
                store.append_dense(&extra).unwrap();
                model_d.push(extra[..80].to_vec());
                model_d.push(extra[80..].to_vec());
            } else {
                let extra = ragged_records(DType::I16, 3, 9, &mut rng);
                store.append_ragged(&pack(&extra)).unwrap();
                model_r.extend(extra);
            }
            store.close().unwrap();
            let store = Store::open(&dir).unwrap();
            check(
                &store,
                &model_d,
                &model_r,
                &mut rng,
                &format!("{what} final"),
            );
            assert_eq!(assert_stats_consistent(&store).reclaimable, 0);
        }
    }
}

#[test]
fn delete_everything_and_compact_to_empty() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in [Codec::Raw, Codec::Zstd] {
        let dir = tmp.path().join(codec.name());
        let mut store = Store::create(&dir, Schema::ragged(DType::U8), codec, None).unwrap();
        store
            .append_ragged(&pack(&[(vec![3], vec![1, 2, 3]), (vec![], vec![9])]))
            .unwrap();
        store.delete(&[1u64, 0, 1]).unwrap();
        assert_eq!(store.len(), 0);
        let s = store.stats();
        assert_eq!((s.records, s.live_bytes), (0, 0));
        assert_eq!(s.reclaimable, s.data_bytes);
        store.compact().unwrap();
        assert_eq!(
            store.stats(),
            Stats {
                records: 0,
                live_bytes: 0,
                data_bytes: 0,
                reclaimable: 0,
                raw_records: 0
            }
        );
        store.close().unwrap();
        assert_eq!(std::fs::metadata(dir.join("data.zr")).unwrap().len(), 0);
        assert_eq!(std::fs::metadata(dir.join("meta.zr")).unwrap().len(), 4096);
        let store = Store::open(&dir).unwrap();
        assert!(store.is_empty());
    }
}

#[test]
fn stats_accounting() {
    let tmp = tempfile::tempdir().unwrap();
    for codec in Codec::ALL {
        let mut rng = Rng(8);
        let recs: Vec<Vec<u8>> = (0..50)
            .map(|_| elements(DType::U32, 100, &mut rng))
            .collect();
        let dir = tmp.path().join(codec.name());
        let mut store = create(
            &dir,
            Schema::dense(DType::U32, &[100]).unwrap(),
            codec,
            &recs,
        );
        assert_eq!(
            store.stats(),
            Stats {
                records: 0,
                live_bytes: 0,
                data_bytes: 0,
                reclaimable: 0,
                raw_records: 0
            }
        );
        store.append_dense(&recs.concat()).unwrap();
        let s = assert_stats_consistent(&store);
        assert_eq!(s.records, 50);
        assert_eq!(s.data_bytes, s.live_bytes, "a fresh store has no gaps");
        if codec == Codec::Raw {
            assert_eq!(s.live_bytes, 50 * 400);
            assert_eq!(s.raw_records, 50);
        } else {
            assert!(s.live_bytes < 50 * 400, "{codec} compresses small values");
            assert_eq!(s.raw_records, 0, "{codec} compresses every record");
        }
        store.sync().unwrap();
        assert_eq!(
            std::fs::metadata(dir.join("data.zr")).unwrap().len(),
            s.data_bytes
        );

        let freed: u64 = [4u64, 9]
            .iter()
            .map(|&i| store.loc(i).unwrap().phys_length as u64)
            .sum();
        store.delete(&[9u64, 4]).unwrap();
        let d = assert_stats_consistent(&store);
        assert_eq!(d.records, 48);
        assert_eq!(d.live_bytes, s.live_bytes - freed);
        assert_eq!(d.data_bytes, s.data_bytes);
        assert_eq!(d.reclaimable, freed);

        // the same accounting after a reopen
        store.close().unwrap();
        let mut store = Store::open(&dir).unwrap();
        assert_eq!(store.stats(), d);
        store.compact().unwrap();
        let c = store.stats();
        assert_eq!(
            c,
            Stats {
                records: 48,
                live_bytes: d.live_bytes,
                data_bytes: d.live_bytes,
                reclaimable: 0,
                raw_records: d.raw_records
            }
        );
        store.close().unwrap();
        assert_eq!(Store::open(&dir).unwrap().stats(), c);
    }
}

/// Resident kilobytes of this process's mappings of `file` (from smaps).
fn mapped_rss_kib(file: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = file.to_str().unwrap();
    let mut inside = false;
    let mut total = 0;
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if head.contains('-') && !head.ends_with(':') {
            inside = line.ends_with(name);
        } else if inside && head == "Rss:" {
            total += line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    total
}

#[test]
fn large_records_read_through_the_mapping_except_when_streaming() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng(99);
    let width = 96 << 10; // above the large-record threshold
    let recs: Vec<Vec<u8>> = (0..40)
        .map(|_| elements(DType::U8, width, &mut rng))
        .collect();
    let schema = Schema::dense(DType::U8, &[width as u64]).unwrap();
    let all: Vec<u64> = (0..40).rev().collect();
    let want: Vec<u8> = all.iter().flat_map(|&i| recs[i as usize].clone()).collect();
    for streaming in [true, false] {
        let dir = tmp.path().join(format!("large-{streaming}"));
        let mut store = create(&dir, schema.clone(), Codec::Raw, &[]);
        store.append_dense(&recs.concat()).unwrap();
        store.sync().unwrap();
        let data = dir.canonicalize().unwrap().join("data.zr");
        assert_eq!(mapped_rss_kib(&data), 0, "nothing is mapped before a read");
        let got = if streaming {
            loaderx::streaming(|| store.gather_dense(&all).unwrap())
        } else {
            store.gather_dense(&all).unwrap()
        };
        assert!(
            got.as_slice() == want,
            "streaming={streaming}: bytes differ"
        );
        let rss = mapped_rss_kib(&data);
        if streaming {
            assert_eq!(rss, 0, "streaming gathers leave no large record mapped");
        } else {
            assert!(
                rss >= 40 * 96,
                "direct gathers read through the mapping ({rss} KiB)"
            );
        }
        check_dense(
            &store,
            &recs,
            &mut rng,
            &format!("large records, streaming={streaming}"),
        );
    }
}
