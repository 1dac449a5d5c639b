//! Model-based property test: random sequences of append / delete /
//! compact / sync / close+reopen / drop+reopen against a `Vec<Vec<u8>>`
//! model, for dense and ragged stores under every codec and dtype. Every
//! record is checked after every step.

use std::path::Path;
use std::sync::OnceLock;

use loaderx::{dict, Codec, DType, Packed, Records, Schema, Store};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// One record to append: a shape (ragged stores only) and a content seed.
#[derive(Clone, Debug)]
struct RecordSpec {
    shape: Vec<u64>,
    seed: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<RecordSpec>),
    /// Indices as arbitrary numbers, taken modulo the length.
    Delete(Vec<u64>),
    Compact,
    Sync,
    /// `close()` then `open()`.
    Reopen,
    /// Drop the handle without `close()` (it syncs on drop), then `open()`.
    DropReopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let record = (prop::collection::vec(1u64..5, 0..=3), any::<u64>())
        .prop_map(|(shape, seed)| RecordSpec { shape, seed });
    prop_oneof![
        5 => prop::collection::vec(record, 0..7).prop_map(Op::Append),
        3 => prop::collection::vec(any::<u64>(), 0..5).prop_map(Op::Delete),
        1 => Just(Op::Compact),
        1 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => Just(Op::DropReopen),
    ]
}

/// `n` bytes of record content: runs of repeated bytes and noise, so that
/// compressed records vary in size.
fn content(seed: u64, n: usize, dtype: DType) -> Vec<u8> {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = next();
        let run = 1 + (r % 9) as usize;
        let byte = if dtype == DType::Bool {
            (r >> 8) as u8 & 1
        } else {
            (r >> 8) as u8
        };
        let noisy = r & (1 << 20) != 0;
        for k in 0..run.min(n - out.len()) {
            out.push(if noisy && dtype != DType::Bool {
                byte.wrapping_add(k as u8)
            } else {
                byte
            });
        }
    }
    out
}

fn shared_dict() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        let recs: Vec<Vec<u8>> = (0..300u64)
            .map(|i| content(i, 64 + (i as usize % 50), DType::U8))
            .collect();
        let sizes: Vec<usize> = recs.iter().map(Vec::len).collect();
        dict::train(&recs.concat(), &sizes, dict::tier("fast").unwrap()).unwrap()
    })
}

/// The logical bytes of a record in a store of `schema`.
fn logical(schema: &Schema, spec: &RecordSpec) -> Vec<u8> {
    let itemsize = schema.dtype.itemsize();
    match schema.item_shape() {
        Some(_) => content(
            spec.seed,
            schema.record_width().unwrap() as usize,
            schema.dtype,
        ),
        None => {
            let n = spec.shape.iter().product::<u64>() as usize * itemsize;
            let mut out = (spec.shape.len() as u64).to_le_bytes().to_vec();
            for d in &spec.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&content(spec.seed, n, schema.dtype));
            out
        }
    }
}

struct Harness {
    dir: std::path::PathBuf,
    store: Option<Store>,
    schema: Schema,
    codec: Codec,
    model: Vec<Vec<u8>>,
    /// Stored bytes freed by deletes since the last compact.
    garbage: u64,
}

impl Harness {
    fn store(&self) -> &Store {
        self.store.as_ref().unwrap()
    }

    fn store_mut(&mut self) -> &mut Store {
        self.store.as_mut().unwrap()
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Append(specs) => {
                let recs: Vec<Vec<u8>> = specs.iter().map(|s| logical(&self.schema, s)).collect();
                if self.schema.item_shape().is_some() {
                    self.store_mut().append_dense(&recs.concat()).unwrap();
                } else {
                    let mut p = Packed::default();
                    for (spec, rec) in specs.iter().zip(&recs) {
                        p.push(&spec.shape, &rec[8 * (1 + spec.shape.len())..]);
                    }
                    prop_assert_eq!(&p.bytes, &recs.concat());
                    self.store_mut().append_ragged(&p).unwrap();
                }
                self.model.extend(recs);
            }
            Op::Delete(picks) => {
                if self.model.is_empty() {
                    // nothing to pick from: any index is out of range
                    let r = self.store_mut().delete(&[0u64]);
                    let out_of_range = matches!(r, Err(loaderx::Error::IndexOutOfRange { .. }));
                    prop_assert!(out_of_range, "delete on an empty store: {:?}", r);
                    return Ok(());
                }
                let idx: Vec<u64> = picks.iter().map(|p| p % self.model.len() as u64).collect();
                let mut order = idx.clone();
                order.sort_unstable_by(|a, b| b.cmp(a));
                order.dedup();
                for &i in &order {
                    self.garbage += self.store().loc(i).unwrap().phys_length as u64;
                }
                self.store_mut().delete(&idx).unwrap();
                for &i in &order {
                    self.model.swap_remove(i as usize);
                }
            }
            Op::Compact => {
                self.store_mut().compact().unwrap();
                self.garbage = 0;
                let s = self.store().stats();
                prop_assert_eq!(s.reclaimable, 0);
                prop_assert_eq!(s.data_bytes, s.live_bytes);
                prop_assert_eq!(file_len(&self.dir, "data.zr"), s.data_bytes);
                prop_assert_eq!(
                    file_len(&self.dir, "meta.zr"),
                    4096 + 16 * self.model.len() as u64
                );
            }
            Op::Sync => {
                self.store_mut().sync().unwrap();
                let s = self.store().stats();
                let meta = std::fs::read(self.dir.join("meta.zr")).unwrap();
                prop_assert_eq!(
                    u64::from_le_bytes(meta[0..8].try_into().unwrap()),
                    s.records
                );
                prop_assert_eq!(
                    u64::from_le_bytes(meta[8..16].try_into().unwrap()),
                    s.data_bytes
                );
            }
            Op::Reopen | Op::DropReopen => {
                let store = self.store.take().unwrap();
                let before = store.stats();
                if matches!(op, Op::Reopen) {
                    store.close().unwrap();
                } else {
                    drop(store);
                }
                // closed: data.zr is exactly tail_offset, meta.zr exactly the table
                prop_assert_eq!(file_len(&self.dir, "data.zr"), before.data_bytes);
                prop_assert_eq!(file_len(&self.dir, "meta.zr"), 4096 + 16 * before.records);
                let store = Store::open(&self.dir).unwrap();
                prop_assert_eq!(store.stats(), before);
                prop_assert_eq!(store.schema(), &self.schema);
                prop_assert_eq!(store.codec(), self.codec);
                self.store = Some(store);
            }
        }
        Ok(())
    }

    fn check(&self, step: usize) -> Result<(), TestCaseError> {
        let store = self.store();
        let n = self.model.len();
        prop_assert_eq!(store.len(), n as u64, "step {}", step);
        for (i, rec) in self.model.iter().enumerate() {
            let got = store.read_record(i as u64).unwrap();
            prop_assert_eq!(&got, rec, "step {}: record {}", step, i);
        }
        // everything in reverse order, plus duplicates of the ends
        let mut idx: Vec<u64> = (0..n as u64).rev().collect();
        if n > 0 {
            idx.extend([0, n as u64 - 1, 0]);
        }
        if self.schema.item_shape().is_some() {
            let got = store.gather_dense(&idx).unwrap();
            let want: Vec<u8> = idx
                .iter()
                .flat_map(|&i| self.model[i as usize].clone())
                .collect();
            prop_assert!(got.as_slice() == want, "step {}: gather_dense", step);
        } else {
            let got = store.gather_ragged(&idx).unwrap();
            prop_assert_eq!(got.len(), idx.len());
            for (k, &i) in idx.iter().enumerate() {
                let (start, len) = got.spans[k];
                prop_assert_eq!(start % 8, 0);
                prop_assert_eq!(
                    &got.buffer.as_slice()[start..start + len],
                    &self.model[i as usize][..],
                    "step {}: gather_ragged slot {}",
                    step,
                    k
                );
            }
        }
        // stats
        let s = store.stats();
        let phys: u64 = (0..n as u64)
            .map(|i| store.loc(i).unwrap().phys_length as u64)
            .sum();
        prop_assert_eq!(s.records, n as u64);
        prop_assert_eq!(s.live_bytes, phys);
        prop_assert_eq!(s.reclaimable, self.garbage, "step {}: reclaimable", step);
        prop_assert_eq!(s.data_bytes, s.live_bytes + s.reclaimable);
        if self.codec == Codec::Raw {
            let logical: u64 = self.model.iter().map(|r| r.len() as u64).sum();
            prop_assert_eq!(s.live_bytes, logical);
        }
        Ok(())
    }
}

fn file_len(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).unwrap().len()
}

fn run(codec: Codec, schema: Schema, ops: &[Op]) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let dict = (codec == Codec::ZstdDict).then(shared_dict);
    let store = Store::create(&dir, schema.clone(), codec, dict).unwrap();
    let mut h = Harness {
        dir,
        store: Some(store),
        schema,
        codec,
        model: Vec::new(),
        garbage: 0,
    };
    h.check(0)?;
    for (step, op) in ops.iter().enumerate() {
        h.apply(op)?;
        h.check(step + 1)?;
    }
    // and once more from a fresh open
    h.apply(&Op::Reopen)?;
    h.check(ops.len() + 1)
}

fn config() -> Config {
    Config {
        cases: 192,
        failure_persistence: None,
        ..Config::default()
    }
}

fn codec_strategy() -> impl Strategy<Value = Codec> {
    prop::sample::select(Codec::ALL.to_vec())
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn dense_store_matches_model(
        codec in codec_strategy(),
        dtype in dtype_strategy(),
        item_shape in prop::collection::vec(1u64..5, 0..=2),
        ops in prop::collection::vec(op_strategy(), 1..30),
    ) {
        run(codec, Schema::dense(dtype, &item_shape).unwrap(), &ops)?;
    }

    #[test]
    fn ragged_store_matches_model(
        codec in codec_strategy(),
        dtype in dtype_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..30),
    ) {
        run(codec, Schema::ragged(dtype), &ops)?;
    }
}

/// Every codec, explicitly, with a fixed long sequence (the random cases
/// above pick codecs at random).
#[test]
fn every_codec_fixed_sequence() {
    let rec = |seed: u64, shape: &[u64]| RecordSpec {
        shape: shape.to_vec(),
        seed,
    };
    let ops = vec![
        Op::Append((0..10).map(|s| rec(s, &[2, 3])).collect()),
        Op::Delete(vec![0, 9, 5, 5]),
        Op::Sync,
        Op::Append(vec![rec(100, &[]), rec(101, &[4])]),
        Op::Reopen,
        Op::Delete(vec![3]),
        Op::Compact,
        Op::Append(vec![rec(200, &[1, 1, 1])]),
        Op::DropReopen,
        Op::Delete((0..20).map(|k| k * 7).collect()),
        Op::Compact,
        Op::Append(vec![rec(300, &[3])]),
    ];
    for codec in Codec::ALL {
        run(codec, Schema::dense(DType::I16, &[3]).unwrap(), &ops).unwrap();
        run(codec, Schema::ragged(DType::F32), &ops).unwrap();
    }
}
