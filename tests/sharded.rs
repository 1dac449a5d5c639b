//! A sharded table's column ([`Concat`]) reads exactly like one store
//! holding the same records: gathers, the loader (every mode, rank slices,
//! subsets, resume) and the Arrow readers give the same bytes.

use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatchReader;
use loaderx::arrow::TableReader;
use loaderx::loader::{Batch, BatchColumn, DataLoader, Options, Subset};
use loaderx::sampler::Mode;
use loaderx::Concat;
use loaderx::Packed;
use loaderx::{Codec, DType, Error, Schema, Store};
use loaderx::{Indices, Records};

const N: u64 = 300;
/// Where the shards split `0..N` (one shard empty).
const SPLITS: [u64; 5] = [0, 90, 90, 211, N];

fn id_store(path: &Path, ids: std::ops::Range<u64>, codec: Codec) -> Store {
    let schema = Schema::dense(DType::U64, &[2]).unwrap();
    let mut s = Store::create(path, schema, codec, None).unwrap();
    let bytes: Vec<u8> = ids
        .flat_map(|i| [i, i * 3])
        .flat_map(u64::to_le_bytes)
        .collect();
    s.append_dense(&bytes).unwrap();
    s
}

fn tok_store(path: &Path, ids: std::ops::Range<u64>, codec: Codec) -> Store {
    let mut s = Store::create(path, Schema::ragged(DType::I32), codec, None).unwrap();
    let mut packed = Packed::default();
    for i in ids {
        let len = i % 7 + 1;
        let payload: Vec<u8> = (0..len)
            .flat_map(|k| (i as i32 - k as i32).to_le_bytes())
            .collect();
        packed.push(&[len], &payload);
    }
    if !packed.is_empty() {
        s.append_ragged(&packed).unwrap();
    }
    s
}

struct Fixture {
    _dir: tempfile::TempDir,
    whole: Vec<(String, Arc<Store>)>,
    sharded: Vec<(String, Arc<Concat>)>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let whole = vec![
        (
            "id".to_string(),
            Arc::new(id_store(&root.join("id"), 0..N, Codec::Zstd)),
        ),
        (
            "tok".to_string(),
            Arc::new(tok_store(&root.join("tok"), 0..N, Codec::Raw)),
        ),
    ];
    let mut ids = Vec::new();
    let mut toks = Vec::new();
    for (s, w) in SPLITS.windows(2).enumerate() {
        let codec = if s % 2 == 0 { Codec::Raw } else { Codec::Zstd };
        let shard = root.join(format!("shard-{s}"));
        id_store(&shard.join("id"), w[0]..w[1], codec)
            .close()
            .unwrap();
        tok_store(&shard.join("tok"), w[0]..w[1], codec)
            .close()
            .unwrap();
        ids.push(Store::open_readonly(shard.join("id")).unwrap());
        toks.push(Store::open_readonly(shard.join("tok")).unwrap());
    }
    let sharded = vec![
        (
            "id".to_string(),
            Arc::new(Concat::new(root.join("t/id"), ids).unwrap()),
        ),
        (
            "tok".to_string(),
            Arc::new(Concat::new(root.join("t/tok"), toks).unwrap()),
        ),
    ];
    Fixture {
        _dir: dir,
        whole,
        sharded,
    }
}

fn bytes(batch: &Batch) -> (Vec<u64>, Vec<Vec<u8>>) {
    let cols = batch
        .columns
        .iter()
        .map(|c| match c {
            BatchColumn::Dense(buf) => buf.as_slice().to_vec(),
            BatchColumn::Ragged(rb) => (0..rb.len())
                .flat_map(|j| {
                    let (s, l) = rb.spans[j];
                    rb.buffer.as_slice()[s..s + l].to_vec()
                })
                .collect(),
            #[allow(unreachable_patterns)]
            other => panic!("array output, got {other:?}"),
        })
        .collect();
    (batch.indices.clone(), cols)
}

#[test]
fn gathers_match_one_store() {
    let f = fixture();
    let idx: Vec<u64> = (0..2000u64).map(|k| (k * 7919 + 13) % N).collect();
    for ((_, w), (_, s)) in f.whole.iter().zip(&f.sharded) {
        assert_eq!(s.len(), N);
        assert!(Records::is_readonly(&**s));
        match w.kind() {
            loaderx::schema::Kind::Dense => assert_eq!(
                w.gather_dense(&idx).unwrap().as_slice(),
                s.gather_dense(&idx).unwrap().as_slice()
            ),
            loaderx::schema::Kind::Ragged => {
                let (a, b) = (
                    w.gather_ragged(&idx).unwrap(),
                    s.gather_ragged(&idx).unwrap(),
                );
                assert_eq!(a.spans, b.spans);
                assert_eq!(a.buffer.as_slice(), b.buffer.as_slice());
            }
        }
        for i in [0, 89, 90, 210, 211, N - 1] {
            assert_eq!(w.read_record(i).unwrap(), s.read_record(i).unwrap());
            assert_eq!(w.logical_len(i), Records::logical_len(&**s, i));
        }
        assert_eq!(Records::logical_len(&**s, N), None);
        assert!(matches!(
            Indices::from(&[-1i64])
                .resolve(s.len())
                .and_then(|idx| s.gather_dense(idx)),
            Err(Error::IndexOutOfRange { index: -1, .. }) | Err(Error::InvalidValue(_))
        ));
    }
}

#[test]
fn the_loader_reads_shards_like_one_store() {
    let f = fixture();
    let subset: Vec<u64> = (0..N).filter(|i| i % 3 != 1).collect();
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        for (rank, world, indices) in [
            (0, 1, None),
            (1, 3, None),
            (0, 2, Some(Subset::Unsigned(subset.clone()))),
        ] {
            let options = || Options {
                batch_size: 16,
                mode,
                seed: 7,
                rank,
                world_size: world,
                start_step: 3,
                indices: indices.clone(),
                ..Options::default()
            };
            let a = DataLoader::new(f.whole.clone(), options()).unwrap();
            let b = DataLoader::new(f.sharded.clone(), options()).unwrap();
            for _ in 0..12 {
                let (x, y) = (a.next().unwrap(), b.next().unwrap());
                assert_eq!(x.step, y.step);
                assert_eq!(bytes(&x), bytes(&y), "{mode:?} rank {rank}/{world}");
            }
        }
    }
}

#[test]
fn arrow_readers_cross_shard_boundaries() {
    let f = fixture();
    // Small batches so reader chunks start and end inside shards.
    let a: Vec<_> = TableReader::new(f.whole.clone(), Some("record_id".into()), 1000)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let reader = TableReader::new(f.sharded.clone(), Some("record_id".into()), 1000).unwrap();
    let schema = reader.schema();
    let b: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    assert_eq!(schema, a[0].schema());
    assert!(b.len() > 3, "{} batches", b.len());
    let cat = |v: &[arrow_array::RecordBatch]| {
        arrow_select::concat::concat_batches(&v[0].schema(), v).unwrap()
    };
    assert_eq!(cat(&a), cat(&b));
}
