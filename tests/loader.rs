//! The loader's plan (docs/guide/loader.md, "DataLoader"): step `k` gathers
//! `Sampler(len(indices) or n, B * world_size, mode, seed).at(k)`, mapped
//! through the subset, sliced for this rank, every stream at the same
//! indices; batches come out in step order however the producers are timed;
//! a loader started at step `k` continues a run bit-exactly; bad arguments
//! are typed errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loaderx::loader::{Batch, BatchColumn, DataLoader, Options, Subset};
use loaderx::sampler::{Mode, Sampler};
use loaderx::{Codec, DType, Error, Packed, Records, Schema, Store, StoreAccess};

const N: u64 = 300;
const MODES: [Mode; 3] = [Mode::Sequential, Mode::Iid, Mode::Cyclic];

/// Two aligned streams where record `i` encodes `i`: `id` (dense u64
/// scalars) and `tok` (ragged i32, `i % 7 + 1` copies of `i`).
struct Fixture {
    _dir: tempfile::TempDir,
    id: Arc<Store>,
    tok: Arc<Store>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    Fixture {
        id: Arc::new(id_store(&dir.path().join("id"), N)),
        tok: Arc::new(tok_store(&dir.path().join("tok"), N)),
        _dir: dir,
    }
}

fn id_store(path: &std::path::Path, n: u64) -> Store {
    let schema = Schema::dense(DType::U64, &[]).unwrap();
    let mut s = Store::create(path, schema, Codec::Zstd, None).unwrap();
    let bytes: Vec<u8> = (0..n).flat_map(u64::to_le_bytes).collect();
    s.append_dense(&bytes).unwrap();
    s
}

fn tok_store(path: &std::path::Path, n: u64) -> Store {
    let mut s = Store::create(path, Schema::ragged(DType::I32), Codec::Raw, None).unwrap();
    let mut packed = Packed::default();
    for i in 0..n {
        let len = i % 7 + 1;
        let payload: Vec<u8> = (0..len).flat_map(|_| (i as i32).to_le_bytes()).collect();
        packed.push(&[len], &payload);
    }
    s.append_ragged(&packed).unwrap();
    s
}

impl Fixture {
    fn streams(&self) -> Vec<(String, Arc<Store>)> {
        vec![
            ("id".to_string(), Arc::clone(&self.id)),
            ("tok".to_string(), Arc::clone(&self.tok)),
        ]
    }

    fn loader(&self, options: Options) -> DataLoader<Arc<Store>> {
        DataLoader::new(self.streams(), options).unwrap()
    }
}

fn options(mode: Mode, batch_size: usize, seed: u64) -> Options {
    Options {
        batch_size,
        mode,
        seed,
        ..Options::default()
    }
}

/// The `id` column of a batch.
fn ids(batch: &Batch) -> Vec<u64> {
    match &batch.columns[0] {
        BatchColumn::Dense(buf) => buf
            .as_slice()
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        other => panic!("id is dense, got {other:?}"),
    }
}

/// Every stream holds the records of `batch.indices`, in order.
#[track_caller]
fn assert_aligned(batch: &Batch) {
    assert_eq!(ids(batch), batch.indices);
    let BatchColumn::Ragged(tok) = &batch.columns[1] else {
        panic!("tok is ragged")
    };
    assert_eq!(tok.len(), batch.indices.len());
    for (j, &i) in batch.indices.iter().enumerate() {
        let rec = tok.record(j);
        assert_eq!(rec.shape(), vec![i % 7 + 1]);
        assert!(rec
            .payload
            .chunks_exact(4)
            .all(|v| i32::from_le_bytes(v.try_into().unwrap()) == i as i32));
    }
}

/// A batch's step, indices and the bytes of every column.
fn fingerprint(batch: &Batch) -> (u64, Vec<u64>, Vec<Vec<u8>>) {
    let bytes = batch
        .columns
        .iter()
        .map(|c| match c {
            BatchColumn::Dense(buf) => buf.as_slice().to_vec(),
            BatchColumn::Ragged(rb) => {
                let mut out = rb.buffer.as_slice().to_vec();
                for &(start, len) in &rb.spans {
                    out.extend((start as u64).to_le_bytes());
                    out.extend((len as u64).to_le_bytes());
                }
                out
            }
            #[allow(unreachable_patterns)]
            other => panic!("array output, got {other:?}"),
        })
        .collect();
    (batch.step, batch.indices.clone(), bytes)
}

#[test]
fn loader_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<DataLoader<Arc<Store>>>();
    assert_send_sync::<Batch>();
}

#[test]
fn batches_follow_the_sampler_and_streams_stay_aligned() {
    let f = fixture();
    for mode in MODES {
        let loader = f.loader(options(mode, 32, 4));
        let sampler = Sampler::new(N, 32, mode, 4).unwrap();
        for k in 0..20 {
            let batch = loader.next().unwrap();
            assert_eq!(batch.step, k);
            assert_eq!(batch.indices, sampler.at(k), "{mode} step {k}");
            assert_eq!(loader.indices_at(k).unwrap(), batch.indices);
            assert_aligned(&batch);
        }
        assert_eq!(loader.step(), 20);
    }
}

#[test]
fn rank_slices_are_disjoint_and_cover_the_global_batch() {
    let f = fixture();
    let (world, b) = (4usize, 8usize);
    for mode in MODES {
        let loaders: Vec<_> = (0..world)
            .map(|rank| {
                f.loader(Options {
                    rank,
                    world_size: world,
                    ..options(mode, b, 1)
                })
            })
            .collect();
        let global = Sampler::new(N, b * world, mode, 1).unwrap();
        for k in 0..12 {
            let parts: Vec<Batch> = loaders.iter().map(|l| l.next().unwrap()).collect();
            let want = global.at(k);
            for (rank, part) in parts.iter().enumerate() {
                assert_eq!(part.indices.len(), b);
                assert_eq!(
                    part.indices,
                    want[rank * b..(rank + 1) * b],
                    "{mode} rank {rank}"
                );
                assert_aligned(part);
            }
            let union: Vec<u64> = parts.iter().flat_map(|p| p.indices.clone()).collect();
            assert_eq!(union, want);
            if mode != Mode::Iid {
                // Without replacement, no record is on two ranks.
                let mut distinct = union.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), b * world, "{mode} step {k}");
            }
        }
    }
}

#[test]
fn the_subset_mapping_is_applied() {
    let f = fixture();
    // 60 distinct records, in no particular order.
    let subset: Vec<u64> = (0..60).map(|i| (i * 37 + 11) % N).collect();
    for mode in MODES {
        for (rank, world) in [(0, 1), (1, 3)] {
            let b = 5;
            let loader = f.loader(Options {
                indices: Some(subset.clone().into()),
                rank,
                world_size: world,
                ..options(mode, b, 7)
            });
            let positions = Sampler::new(subset.len() as u64, b * world, mode, 7).unwrap();
            let mut seen = Vec::new();
            for k in 0..12 {
                let batch = loader.next().unwrap();
                let want: Vec<u64> = positions.at(k)[rank * b..(rank + 1) * b]
                    .iter()
                    .map(|&p| subset[p as usize])
                    .collect();
                assert_eq!(batch.indices, want, "{mode} rank {rank} step {k}");
                assert_aligned(&batch);
                seen.extend(batch.indices);
            }
            if mode == Mode::Cyclic && world == 1 {
                // One cycle (60 / 5 steps) visits the subset exactly once.
                let mut cycle = seen[..60].to_vec();
                cycle.sort_unstable();
                let mut all = subset.clone();
                all.sort_unstable();
                assert_eq!(cycle, all);
            }
        }
    }
    // Signed subsets map the same way.
    let signed: Vec<i64> = subset.iter().map(|&i| i as i64).collect();
    let a = f.loader(Options {
        indices: Some(signed.into()),
        ..options(Mode::Iid, 4, 3)
    });
    let b = f.loader(Options {
        indices: Some(Subset::Unsigned(subset)),
        ..options(Mode::Iid, 4, 3)
    });
    for _ in 0..5 {
        assert_eq!(a.next().unwrap().indices, b.next().unwrap().indices);
    }
}

#[test]
fn a_loader_started_at_step_k_continues_a_run_that_never_stopped() {
    let f = fixture();
    let subset: Vec<u64> = (0..N).filter(|i| i % 3 != 0).collect();
    for mode in MODES {
        for indices in [None, Some(subset.clone())] {
            let base = Options {
                indices: indices.map(Subset::from),
                rank: 1,
                world_size: 2,
                prefetch: 3,
                producers: 3,
                ..options(mode, 16, 9)
            };
            let whole = f.loader(base.clone());
            let run: Vec<_> = (0..40)
                .map(|_| fingerprint(&whole.next().unwrap()))
                .collect();
            drop(whole);
            let resumed = f.loader(Options {
                start_step: 25,
                ..base
            });
            assert_eq!(resumed.step(), 25);
            for want in &run[25..] {
                assert_eq!(&fingerprint(&resumed.next().unwrap()), want, "{mode}");
            }
            assert_eq!(resumed.step(), 40);
        }
    }
}

/// Lends a store, sleeping on every fourth call, and logs when each call
/// started and finished (as tickets of two counters).
struct Uneven {
    store: Arc<Store>,
    starts: Arc<AtomicU64>,
    ends: Arc<AtomicU64>,
    log: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl StoreAccess for Uneven {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> loaderx::Result<T>) -> loaderx::Result<T> {
        let start = self.starts.fetch_add(1, Ordering::SeqCst);
        if start % 4 == 1 {
            std::thread::sleep(Duration::from_millis(40));
        }
        let out = f(&*self.store);
        let end = self.ends.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push((start, end));
        out
    }
}

#[test]
fn batches_come_in_step_order_when_producers_finish_out_of_order() {
    let f = fixture();
    let log = Arc::new(Mutex::new(Vec::new()));
    let uneven = Uneven {
        store: Arc::clone(&f.id),
        starts: Arc::new(AtomicU64::new(0)),
        ends: Arc::new(AtomicU64::new(0)),
        log: Arc::clone(&log),
    };
    let loader = DataLoader::new(
        vec![("id".to_string(), uneven)],
        Options {
            prefetch: 8,
            producers: 4,
            ..options(Mode::Iid, 8, 5)
        },
    )
    .unwrap();
    let sampler = Sampler::new(N, 8, Mode::Iid, 5).unwrap();
    for k in 0..40 {
        let batch = loader.next().unwrap();
        assert_eq!(batch.step, k);
        assert_eq!(batch.indices, sampler.at(k));
        assert_eq!(ids(&batch), batch.indices);
    }
    loader.close();
    // The producers did finish out of order: a call that started earlier
    // ended after one that started later.
    let log = log.lock().unwrap();
    let overtaken = log
        .iter()
        .any(|&(s1, e1)| log.iter().any(|&(s2, e2)| s1 < s2 && e1 > e2));
    assert!(overtaken, "{log:?}");
}

/// Lends a store; call number `fail_at` fails with an I/O error and call
/// number `panic_at` panics (call 0 is the loader reading the length).
struct Faulty {
    store: Arc<Store>,
    calls: AtomicU64,
    fail_at: u64,
    panic_at: u64,
    delay: Duration,
}

impl Faulty {
    fn new(store: &Arc<Store>) -> Faulty {
        Faulty {
            store: Arc::clone(store),
            calls: AtomicU64::new(0),
            fail_at: u64::MAX,
            panic_at: u64::MAX,
            delay: Duration::ZERO,
        }
    }
}

impl StoreAccess for Faulty {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> loaderx::Result<T>) -> loaderx::Result<T> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call > 0 {
            std::thread::sleep(self.delay);
        }
        if call == self.fail_at {
            return Err(Error::Io {
                path: "/faulty/data.zr".into(),
                source: std::io::Error::from_raw_os_error(5),
            });
        }
        if call == self.panic_at {
            panic!("boom at call {call}");
        }
        f(&*self.store)
    }
}

#[test]
fn a_failed_gather_is_the_error_of_its_step_and_the_loader_goes_on() {
    let f = fixture();
    // One producer claims steps in order: call k + 1 gathers step k.
    let faulty = Faulty {
        fail_at: 3,
        panic_at: 5,
        ..Faulty::new(&f.id)
    };
    let loader = DataLoader::new(
        vec![("id".to_string(), faulty)],
        Options {
            producers: 1,
            ..options(Mode::Sequential, 4, 0)
        },
    )
    .unwrap();
    assert_eq!(loader.next().unwrap().indices, [0, 1, 2, 3]);
    assert_eq!(loader.next().unwrap().indices, [4, 5, 6, 7]);
    match loader.next() {
        Err(Error::Io { path, source }) => {
            assert!(path.ends_with("data.zr"));
            assert_eq!(source.raw_os_error(), Some(5));
        }
        other => panic!("step 2 fails with its I/O error, got {other:?}"),
    }
    assert_eq!(loader.step(), 3);
    assert_eq!(loader.next().unwrap().indices, [12, 13, 14, 15]);
    match loader.next() {
        Err(e @ Error::WorkerPanicked(_)) => {
            assert!(e.to_string().contains("boom at call 5"), "{e}")
        }
        other => panic!("step 4 panicked, got {other:?}"),
    }
    assert_eq!(loader.next().unwrap().indices, [20, 21, 22, 23]);
}

#[test]
fn close_wakes_a_blocked_next_and_is_idempotent() {
    let f = fixture();
    let slow = Faulty {
        delay: Duration::from_millis(300),
        ..Faulty::new(&f.id)
    };
    let loader =
        DataLoader::new(vec![("id".to_string(), slow)], options(Mode::Cyclic, 4, 0)).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| loader.next());
        std::thread::sleep(Duration::from_millis(50));
        loader.close();
        match waiter.join().unwrap() {
            Err(e @ Error::InvalidState(_)) => assert!(e.to_string().contains("closed"), "{e}"),
            other => panic!("a closed loader hands out nothing, got {other:?}"),
        }
    });
    assert!(loader.is_closed());
    loader.close();
    assert!(matches!(loader.next(), Err(Error::InvalidState(_))));
    assert_eq!(loader.step(), 0);
}

#[cfg(feature = "arrow")]
#[test]
fn arrow_output_gathers_named_arrow_columns() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;

    let f = fixture();
    let loader = f.loader(Options {
        output: loaderx::loader::Output::Arrow,
        ..options(Mode::Sequential, 6, 0)
    });
    let batch = loader.next().unwrap();
    let names: Vec<_> = batch
        .columns
        .iter()
        .map(|c| match c {
            BatchColumn::Arrow(field, array) => {
                assert_eq!(array.len(), 6);
                field.name().clone()
            }
            other => panic!("arrow output, got {other:?}"),
        })
        .collect();
    assert_eq!(names, ["id", "tok"]);
    let BatchColumn::Arrow(_, id) = &batch.columns[0] else {
        unreachable!()
    };
    assert_eq!(
        id.as_primitive::<UInt64Type>().values(),
        &[0, 1, 2, 3, 4, 5]
    );
}

#[track_caller]
fn rejected<S: StoreAccess + 'static>(streams: Vec<(String, S)>, options: Options) -> Error {
    match DataLoader::new(streams, options) {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    }
}

#[track_caller]
fn assert_invalid_value(e: Error, message: &str) {
    match &e {
        Error::InvalidValue(m) => assert_eq!(m, message),
        other => panic!("expected InvalidValue({message:?}), got {other:?}"),
    }
}

#[test]
fn bad_arguments_are_typed_errors_naming_the_argument() {
    let f = fixture();
    let bad = |o: Options| rejected(f.streams(), o);
    let base = || options(Mode::Cyclic, 8, 0);

    assert_invalid_value(
        rejected(Vec::<(String, Arc<Store>)>::new(), base()),
        "streams must hold at least one store",
    );
    let dir = tempfile::tempdir().unwrap();
    let short = Arc::new(id_store(&dir.path().join("short"), 10));
    let mut streams = f.streams();
    streams.push(("short".into(), Arc::clone(&short)));
    assert_invalid_value(
        rejected(streams, base()),
        "streams must all have the same length, got id=300, tok=300, short=10",
    );
    let empty = Arc::new(id_store(&dir.path().join("empty"), 0));
    assert_invalid_value(
        rejected(vec![("e".into(), empty)], base()),
        "streams are empty: nothing to sample",
    );

    for (o, message) in [
        (
            Options {
                batch_size: 0,
                ..base()
            },
            "batch_size must be >= 1, got 0",
        ),
        (
            Options {
                world_size: 0,
                ..base()
            },
            "world_size must be >= 1, got 0",
        ),
        (
            Options {
                rank: 2,
                world_size: 2,
                ..base()
            },
            "rank must be in 0..1, got 2",
        ),
        (
            Options {
                prefetch: 0,
                ..base()
            },
            "prefetch must be >= 1, got 0",
        ),
        (
            Options {
                producers: 0,
                ..base()
            },
            "producers must be >= 1, got 0",
        ),
        (
            Options {
                indices: Some(Vec::<u64>::new().into()),
                ..base()
            },
            "indices must not be empty",
        ),
        (
            Options {
                batch_size: 101,
                world_size: 3,
                ..base()
            },
            "batch_size * world_size (303) exceeds the stream length 300: \
             cyclic sampling draws without replacement",
        ),
        (
            Options {
                batch_size: 4,
                indices: Some(vec![1u64, 2, 3].into()),
                ..base()
            },
            "batch_size * world_size (4) exceeds the indices length 3: \
             cyclic sampling draws without replacement",
        ),
        (
            Options {
                batch_size: usize::MAX,
                world_size: 2,
                ..base()
            },
            "batch_size * world_size overflows",
        ),
    ] {
        assert_invalid_value(bad(o), message);
    }

    for (indices, bad_index) in [
        (Subset::from(vec![0u64, N]), "300"),
        (Subset::from(vec![5i64, -3, 400]), "-3"),
        (Subset::from(vec![u64::MAX]), "18446744073709551615"),
    ] {
        match bad(Options {
            indices: Some(indices),
            ..base()
        }) {
            Error::InvalidIndex(m) => assert_eq!(
                m,
                format!("indices holds {bad_index}, out of range for streams of length 300")
            ),
            other => panic!("expected InvalidIndex, got {other:?}"),
        }
    }

    // With replacement, a batch may be larger than the index space.
    for mode in [Mode::Iid, Mode::Sequential] {
        let loader = f.loader(Options {
            indices: Some(vec![5u64, 6].into()),
            ..options(mode, 8, 0)
        });
        let batch = loader.next().unwrap();
        assert!(batch.indices.iter().all(|i| [5, 6].contains(i)));
        assert_aligned(&batch);
    }
}

#[test]
fn exclusions_take_effect_at_their_step_and_provenance_lists_what_was_gathered() {
    use loaderx::loader::Event;
    let f = fixture();
    let banned: Vec<u64> = (0..N).filter(|i| i % 10 == 3).collect();
    // A subset too: exclusions name records, the loader finds their positions.
    let subset: Vec<u64> = (0..N).rev().step_by(2).collect();
    for indices in [None, Some(Subset::from(subset.clone()))] {
        for mode in MODES {
            let plain = f.loader(Options {
                indices: indices.clone(),
                ..options(mode, 8, 5)
            });
            let with_exclusion = || Options {
                indices: indices.clone(),
                events: vec![Event::Exclude {
                    step: 4,
                    source: None,
                    records: banned.clone(),
                }],
                ..options(mode, 8, 5)
            };
            let edited = f.loader(with_exclusion());
            for step in 0..40u64 {
                let (a, b) = (plain.next().unwrap(), edited.next().unwrap());
                assert_aligned(&b);
                if step < 4 {
                    assert_eq!(ids(&a), ids(&b), "{mode:?}: before the exclusion");
                } else {
                    assert!(
                        ids(&b).iter().all(|r| !banned.contains(r)),
                        "{mode:?} step {step}: {:?}",
                        ids(&b)
                    );
                }
                if let Some(Subset::Unsigned(s)) = &indices {
                    assert!(ids(&b).iter().all(|r| s.contains(r)));
                }
            }
            let steps: Vec<u64> = (0..40).collect();
            let listed = edited.provenance(&steps, None, None).unwrap();
            let again = f.loader(with_exclusion());
            let gathered: Vec<u64> = (0..40).flat_map(|_| ids(&again.next().unwrap())).collect();
            assert_eq!(listed.records, gathered, "{mode:?}");
            assert_eq!(listed.steps[8..16], [1u64; 8]);
            assert_eq!(listed.rows[..8], [0, 1, 2, 3, 4, 5, 6, 7]);
        }
    }
    // An id outside the streams, everything excluded, out of order: typed errors.
    let bad = |events: Vec<Event>| {
        rejected(
            f.streams(),
            Options {
                events,
                ..options(Mode::Cyclic, 8, 5)
            },
        )
    };
    let ex = |step, records: Vec<u64>| Event::Exclude {
        step,
        source: None,
        records,
    };
    let says = |e: Error, what: &str| match e {
        Error::InvalidValue(m) => assert!(m.contains(what), "{m:?} lacks {what:?}"),
        other => panic!("expected InvalidValue, got {other:?}"),
    };
    says(
        bad(vec![ex(0, vec![N])]),
        "record_ids holds 300, not a record of the streams (300 records)",
    );
    says(
        bad(vec![ex(0, (0..N - 7).collect())]),
        "leaves 7, fewer than a global batch of 8",
    );
    says(
        bad(vec![ex(5, vec![1]), ex(2, vec![2])]),
        "events come in step order: an event at step 2 after step 5",
    );
}
