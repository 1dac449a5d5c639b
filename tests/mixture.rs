//! Mixtures through the loader: each step takes the counts the mixture rule
//! plans, each source continues its own record stream, ranks take slices
//! of one global batch, a later start continues a run exactly, and a
//! schedule's weights are pushed step by step (a bad step fails with every
//! later one, and closing wakes a producer still waiting for weights).

use std::sync::Arc;
use std::time::Duration;

use loaderx::loader::{Batch, BatchColumn, DataLoader, MixSource, MixWeights, Options};
use loaderx::sampler::mixture::{self, Blend};
use loaderx::sampler::{Mode, Sampler};
use loaderx::{Codec, DType, Error, Packed, Records, Schema, Store};

/// A source whose record `i` holds `base + i`: `id` (dense u64) and `tok`
/// (ragged i32, `i % 5 + 1` copies).
struct Source {
    name: &'static str,
    base: u64,
    id: Arc<Store>,
    tok: Arc<Store>,
}

fn source(dir: &std::path::Path, name: &'static str, n: u64, base: u64) -> Source {
    let schema = Schema::dense(DType::U64, &[]).unwrap();
    let mut id = Store::create(dir.join(format!("{name}_id")), schema, Codec::Zstd, None).unwrap();
    let bytes: Vec<u8> = (0..n).flat_map(|i| (base + i).to_le_bytes()).collect();
    id.append_dense(&bytes).unwrap();
    let mut tok = Store::create(
        dir.join(format!("{name}_tok")),
        Schema::ragged(DType::I32),
        Codec::Raw,
        None,
    )
    .unwrap();
    let mut packed = Packed::default();
    for i in 0..n {
        let payload: Vec<u8> = (0..i % 5 + 1)
            .flat_map(|_| ((base + i) as i32).to_le_bytes())
            .collect();
        packed.push(&[i % 5 + 1], &payload);
    }
    tok.append_ragged(&packed).unwrap();
    Source {
        name,
        base,
        id: Arc::new(id),
        tok: Arc::new(tok),
    }
}

fn sources(dir: &std::path::Path) -> Vec<Source> {
    vec![
        source(dir, "web", 200, 0),
        source(dir, "books", 9, 10_000),
        source(dir, "code", 40, 20_000),
    ]
}

fn mix_sources(s: &[Source]) -> Vec<MixSource<Arc<Store>>> {
    s.iter()
        .map(|s| MixSource {
            name: s.name.to_string(),
            streams: vec![
                ("id".to_string(), Arc::clone(&s.id)),
                ("tok".to_string(), Arc::clone(&s.tok)),
            ],
            weights: None,
        })
        .collect()
}

const WEIGHTS: [f64; 3] = [5.0, 1.0, 2.0];

fn options(batch_size: usize, rank: usize, world_size: usize, start: u64) -> Options {
    Options {
        batch_size,
        mode: Mode::Cyclic,
        seed: 11,
        start_step: start,
        rank,
        world_size,
        ..Options::default()
    }
}

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

/// Rows as `(source, record)`, checked against both columns.
#[track_caller]
fn rows(batch: &Batch, s: &[Source]) -> Vec<(u16, u64)> {
    let sources = batch.sources.as_ref().expect("a mixed batch has sources");
    let BatchColumn::Ragged(tok) = &batch.columns[1] else {
        panic!("tok is ragged")
    };
    let out: Vec<(u16, u64)> = sources.iter().copied().zip(batch.indices.clone()).collect();
    for (j, (&(src, i), id)) in out.iter().zip(ids(batch)).enumerate() {
        let want = s[src as usize].base + i;
        assert_eq!(id, want, "row {j}");
        let rec = tok.record(j);
        assert_eq!(rec.shape(), vec![i % 5 + 1]);
        assert!(rec
            .payload
            .chunks_exact(4)
            .all(|v| i32::from_le_bytes(v.try_into().unwrap()) == want as i32));
    }
    out
}

#[test]
fn each_step_takes_the_planned_counts_from_each_sources_own_stream() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let loader = DataLoader::mixture(
        mix_sources(&s),
        MixWeights::Fixed(WEIGHTS.to_vec()),
        options(13, 0, 1, 0),
    )
    .unwrap();
    let shares = mixture::shares(&WEIGHTS).unwrap();
    let mut blend = Blend::new(3, 13).unwrap();
    let streams: Vec<Sampler> = s
        .iter()
        .map(|src| {
            let n = src.id.len();
            Sampler::new(n, 1, Mode::Cyclic, mixture::source_seed(11, src.name)).unwrap()
        })
        .collect();
    for step in 0..60 {
        let first = blend.drawn().to_vec();
        let counts = blend.advance(&shares).unwrap();
        let batch = loader.next().unwrap();
        assert_eq!(batch.step, step);
        let got = rows(&batch, &s);
        // Grouped by source, in source order, each continuing its stream.
        let mut at = 0;
        for (i, &c) in counts.iter().enumerate() {
            let mut want = vec![0; c as usize];
            streams[i].fill_stream(first[i], &mut want);
            let part: Vec<(u16, u64)> = want.into_iter().map(|r| (i as u16, r)).collect();
            assert_eq!(&got[at..at + c as usize], part.as_slice(), "step {step}");
            at += c as usize;
        }
    }
    // The small source (9 records) went round several cycles, each a
    // permutation of its records.
    let mut books = vec![0; 9 * 4];
    streams[1].fill_stream(0, &mut books);
    for cycle in books.chunks(9) {
        let mut c = cycle.to_vec();
        c.sort_unstable();
        assert_eq!(c, (0..9).collect::<Vec<_>>());
    }
    loader.close();
}

#[test]
fn ranks_slice_one_global_batch_and_a_later_start_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let make = |b, r, w, start| {
        DataLoader::mixture(
            mix_sources(&s),
            MixWeights::Fixed(WEIGHTS.to_vec()),
            options(b, r, w, start),
        )
        .unwrap()
    };
    let whole = make(24, 0, 1, 0);
    let global: Vec<Vec<(u16, u64)>> = (0..12).map(|_| rows(&whole.next().unwrap(), &s)).collect();
    for world in [2, 3, 4] {
        let ranks: Vec<_> = (0..world).map(|r| make(24 / world, r, world, 5)).collect();
        for (step, want) in global.iter().enumerate().skip(5) {
            let mut union = Vec::new();
            for (r, ld) in ranks.iter().enumerate() {
                let got = rows(&ld.next().unwrap(), &s);
                assert_eq!(got.len(), 24 / world);
                // Each rank sees every source about in proportion.
                let web = got.iter().filter(|(src, _)| *src == 0).count();
                assert!(
                    web * 8 >= got.len() * 5 - 16,
                    "rank {r} of {world}: {got:?}"
                );
                union.extend(got);
            }
            let (mut union, mut want) = (union, want.clone());
            union.sort_unstable();
            want.sort_unstable();
            assert_eq!(union, want, "world {world}, step {step}");
        }
    }
    // indices_at / rows_at without gathering.
    let (idx, src) = whole.rows_at(3).unwrap();
    let want = &global[3];
    assert_eq!(src.unwrap(), want.iter().map(|r| r.0).collect::<Vec<_>>());
    assert_eq!(idx, want.iter().map(|r| r.1).collect::<Vec<_>>());
}

#[test]
fn a_schedule_is_pushed_step_by_step_and_a_bad_step_fails_every_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let schedule = |k: u64| vec![1.0, if k < 4 { 0.0 } else { 1.0 }, 1.0];
    let loader =
        DataLoader::mixture(mix_sources(&s), MixWeights::Schedule, options(6, 0, 1, 2)).unwrap();
    assert_eq!(loader.weights_pushed(), Some(0));
    // History first: the counts of step 2 depend on steps 0 and 1.
    let rows_of = |from: u64, to: u64| -> Vec<f64> { (from..to).flat_map(schedule).collect() };
    loader.push_weights(&rows_of(0, 8)).unwrap();
    let mut blend = Blend::new(3, 6).unwrap();
    for k in 0..2 {
        blend
            .advance(&mixture::shares(&schedule(k)).unwrap())
            .unwrap();
    }
    for k in 2..8 {
        let counts = blend
            .advance(&mixture::shares(&schedule(k)).unwrap())
            .unwrap();
        let b = loader.next().unwrap();
        let got: Vec<u32> = (0..3u16)
            .map(|i| {
                b.sources
                    .as_ref()
                    .unwrap()
                    .iter()
                    .filter(|&&x| x == i)
                    .count() as u32
            })
            .collect();
        assert_eq!(got, counts, "step {k}");
        if k < 4 {
            assert_eq!(got[1], 0);
        }
    }
    // Step 8 is refused (negative), step 9 would be fine: both fail.
    let err = loader
        .push_weights(&[1.0, -1.0, 1.0, 1.0, 1.0, 1.0])
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidValue(ref m) if m.contains("step 8")),
        "{err}"
    );
    for k in 8..10 {
        let err = loader.next().unwrap_err();
        assert!(
            matches!(err, Error::InvalidValue(ref m) if m.contains(&format!("step {k}")) && m.contains("step 8")),
            "{err}"
        );
    }
    loader.close();
}

#[test]
fn closing_wakes_a_producer_waiting_for_weights() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let loader = Arc::new(
        DataLoader::mixture(mix_sources(&s), MixWeights::Schedule, options(4, 0, 1, 0)).unwrap(),
    );
    let waiter = {
        let l = Arc::clone(&loader);
        std::thread::spawn(move || l.next())
    };
    std::thread::sleep(Duration::from_millis(50));
    loader.close();
    assert!(matches!(
        waiter.join().unwrap(),
        Err(Error::InvalidState(_))
    ));
}

#[test]
fn sources_that_differ_or_bad_options_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let fixed = || MixWeights::Fixed(WEIGHTS.to_vec());
    let message = |r: Result<DataLoader<Arc<Store>>, Error>| match r {
        Err(Error::InvalidValue(m)) => m,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    };
    // Columns in another order.
    let mut swapped = mix_sources(&s);
    swapped[2].streams.reverse();
    let m = message(DataLoader::mixture(swapped, fixed(), options(4, 0, 1, 0)));
    assert!(m.contains("\"code\"") && m.contains("same columns"), "{m}");
    // A column of another kind.
    let mut kinds = mix_sources(&s);
    kinds[1].streams[1].1 = Arc::clone(&s[1].id);
    let m = message(DataLoader::mixture(kinds, fixed(), options(4, 0, 1, 0)));
    assert!(
        m.contains("\"tok\"") && m.contains("\"books\"") && m.contains("ragged int32"),
        "{m}"
    );
    // Bad weights name the source's position.
    let m = message(DataLoader::mixture(
        mix_sources(&s),
        MixWeights::Fixed(vec![1.0, f64::NAN, 1.0]),
        options(4, 0, 1, 0),
    ));
    assert!(m.contains("source 1"), "{m}");
    let m = message(DataLoader::mixture(
        mix_sources(&s),
        MixWeights::Fixed(vec![0.0; 3]),
        options(4, 0, 1, 0),
    ));
    assert!(m.contains("not all be zero"), "{m}");
    let mut o = options(4, 0, 1, 0);
    o.indices = Some(vec![0u64, 1].into());
    assert!(message(DataLoader::mixture(mix_sources(&s), fixed(), o)).contains("indices"));
    let mut o = options(4, 0, 1, 0);
    o.mode = Mode::Weighted;
    let m = message(DataLoader::mixture(mix_sources(&s), fixed(), o));
    assert!(m.contains("\"web\"") && m.contains("weighted"), "{m}");
    // A fixed mixture takes no pushed weights.
    let ld = DataLoader::mixture(mix_sources(&s), fixed(), options(4, 0, 1, 0)).unwrap();
    assert!(matches!(
        ld.push_weights(&[1.0; 3]),
        Err(Error::InvalidState(_))
    ));
    assert_eq!(ld.weights_pushed(), None);
    assert_eq!(
        ld.source_names().unwrap(),
        vec!["web".to_string(), "books".into(), "code".into()]
    );
}

#[cfg(feature = "arrow")]
#[test]
fn arrow_batches_join_the_sources_columns() {
    use arrow_array::cast::AsArray;
    let dir = tempfile::tempdir().unwrap();
    let s = sources(dir.path());
    let mut o = options(16, 0, 1, 0);
    o.output = loaderx::loader::Output::Arrow;
    let arrow =
        DataLoader::mixture(mix_sources(&s), MixWeights::Fixed(WEIGHTS.to_vec()), o).unwrap();
    let arrays = DataLoader::mixture(
        mix_sources(&s),
        MixWeights::Fixed(WEIGHTS.to_vec()),
        options(16, 0, 1, 0),
    )
    .unwrap();
    for _ in 0..5 {
        let (a, b) = (arrow.next().unwrap(), arrays.next().unwrap());
        let BatchColumn::Arrow(field, id) = &a.columns[0] else {
            panic!("arrow output")
        };
        assert_eq!(field.name(), "id");
        let id: Vec<u64> = id
            .as_primitive::<arrow_array::types::UInt64Type>()
            .values()
            .to_vec();
        assert_eq!(id, ids(&b));
        let BatchColumn::Arrow(_, tok) = &a.columns[1] else {
            panic!("arrow output")
        };
        assert_eq!(tok.len(), 16);
        assert_eq!(a.sources, b.sources);
    }
}
