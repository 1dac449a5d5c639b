//! A run's state in the core: `DataLoader::state()` saved as JSON, parsed
//! back and resumed (`load_state`, `from_state`) goes on bit-exactly after
//! exclusions and skips, for streams, mixtures and pinned tables; and the
//! states Python saved before the state moved into the core
//! (tests/data/loader_states) still load and continue exactly as the run
//! that saved them did.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loaderx::loader::{
    Batch, BatchColumn, DataLoader, Event, LoaderState, MixSource, MixWeights, Options, Pin,
};
use loaderx::sampler::Mode;
use loaderx::table::{self, Column, Table, VersionRef};
use loaderx::{Codec, DType, Error, Location, Schema, Store};
use serde_json::Value;

/// A store of int64 scalars `offset..offset + n`.
fn store(dir: &Path, n: u64, offset: i64) -> Arc<Store> {
    let mut s = Store::create(
        dir,
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    let bytes: Vec<u8> = (0..n as i64)
        .flat_map(|i| (offset + i).to_le_bytes())
        .collect();
    s.append_dense(&bytes).unwrap();
    Arc::new(s)
}

fn values(batch: &Batch) -> Vec<i64> {
    match &batch.columns[0] {
        BatchColumn::Dense(buf) => buf
            .as_slice()
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => panic!("expected a dense column, got {other:?}"),
    }
}

/// A batch as the fixtures write it: `v`, and `source` for a mixture.
fn row(batch: &Batch) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("v".into(), values(batch).into());
    if let Some(s) = &batch.sources {
        m.insert("source".into(), s.clone().into());
    }
    Value::Object(m)
}

fn next_rows<S: loaderx::StoreAccess>(loader: &DataLoader<S>, k: usize) -> Vec<Value> {
    (0..k).map(|_| row(&loader.next().unwrap())).collect()
}

fn options(batch_size: usize, mode: Mode, seed: u64) -> Options {
    Options {
        batch_size,
        mode,
        seed,
        prefetch: 2,
        ..Options::default()
    }
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/loader_states")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn stream_of(dir: &Path, name: &str, desc: &Value) -> Vec<(String, Arc<Store>)> {
    let n = desc["v"]["n"].as_u64().unwrap();
    let offset = desc["v"]["offset"].as_i64().unwrap();
    vec![("v".to_string(), store(&dir.join(name), n, offset))]
}

/// A sharded table of one int64 column `v` holding `0..50`, in two shards.
fn table_of_50(dir: &Path) -> PathBuf {
    let path = dir.join("table");
    let mut shards = Vec::new();
    for (lo, hi) in [(0i64, 25i64), (25, 50)] {
        let shard = table::new_shard(&path).unwrap();
        let mut s = Store::create(
            shard.join("v"),
            Schema::dense(DType::I64, &[]).unwrap(),
            Codec::Zstd,
            None,
        )
        .unwrap();
        let bytes: Vec<u8> = (lo..hi).flat_map(i64::to_le_bytes).collect();
        s.append_dense(&bytes).unwrap();
        s.close().unwrap();
        shards.push(shard);
    }
    table::commit_shards(&path, &shards).unwrap();
    path
}

/// A table's columns, as a loader takes them.
type Columns = Vec<(String, Arc<Column>)>;

/// Opens a pinned table as `from_state` asks: its columns and where it read.
fn open_pin(pin: &Pin) -> loaderx::Result<(Columns, Pin)> {
    let location = Location::local(&pin.path);
    let t = match (&pin.view, pin.version) {
        (Some(view), _) => Table::open_view(&location, view)?,
        (None, Some(v)) => Table::open_version(&location, &VersionRef::Number(v))?,
        (None, None) => Table::open(&pin.path, true)?,
    };
    let read = Pin {
        path: pin.path.clone(),
        version: t.version(),
        view: pin.view.clone(),
    };
    let columns = t
        .into_columns()
        .into_iter()
        .map(|c| (c.name().to_string(), Arc::new(c)))
        .collect();
    Ok((columns, read))
}

#[test]
fn states_saved_by_the_python_loader_before_still_load_and_go_on_exactly() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["cyclic_edits", "blocked"] {
        let f = fixture(name);
        let state = LoaderState::from_json(&f["state"].to_string()).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&state.to_json()).unwrap(),
            f["state"],
            "{name}: the core writes the state as the Python loader did"
        );
        let streams = stream_of(dir.path(), name, &f["streams"]);
        let mut loader = DataLoader::new(
            streams,
            Options {
                block_size: state.block_size,
                ..options(state.batch_size, state.mode, state.seed)
            },
        )
        .unwrap();
        loader.load_state(&state).unwrap();
        assert_eq!(loader.step(), state.step);
        let want: Vec<Value> = f["expect"].as_array().unwrap().clone();
        assert_eq!(next_rows(&loader, want.len()), want, "{name}");
    }

    let f = fixture("mix_edits");
    let state: LoaderState = serde_json::from_value(f["state"].clone()).unwrap();
    assert_eq!(
        state.sources.as_deref(),
        Some(&["a".to_string(), "b".to_string()][..])
    );
    let sources = ["a", "b"]
        .iter()
        .map(|&name| MixSource {
            name: name.to_string(),
            streams: stream_of(dir.path(), name, &f["streams"][name]),
            weights: None,
        })
        .collect();
    let weights = MixWeights::Fixed(state.mix_weights.clone().unwrap());
    let mut loader = DataLoader::mixture(
        sources,
        weights,
        options(state.batch_size, state.mode, state.seed),
    )
    .unwrap();
    loader.load_state(&state).unwrap();
    assert_eq!(
        next_rows(&loader, 6),
        f["expect"].as_array().unwrap().clone()
    );

    // A pinned table: from_state reopens it at the pinned version.
    let f = fixture("table_edits");
    let path = table_of_50(dir.path());
    let text = f["state"]
        .to_string()
        .replace("{table}", path.to_str().unwrap());
    let state = LoaderState::from_json(&text).unwrap();
    let other_batch = Options {
        batch_size: 10,
        ..Options::default()
    };
    let loader = DataLoader::from_state(&state, open_pin, other_batch).unwrap();
    assert_eq!(loader.step(), state.step);
    assert_eq!(loader.batch_size(), 10, "the batch size is the options'");
    drop(loader);
    let loader = DataLoader::from_state(
        &state,
        open_pin,
        Options {
            batch_size: state.batch_size,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(
        next_rows(&loader, 6),
        f["expect"].as_array().unwrap().clone()
    );
}

/// Runs `loader` for `steps` steps, making `edits` (at the step given) on
/// the way; the batches' rows.
fn run<S: loaderx::StoreAccess + Clone>(
    loader: &mut DataLoader<S>,
    steps: u64,
    edits: &[(u64, Event)],
) -> Vec<Value> {
    let mut out = Vec::new();
    while loader.step() < steps {
        for (at, e) in edits {
            if *at == loader.step() {
                match e {
                    Event::Exclude {
                        records, source, ..
                    } => loader.exclude(records, source.as_deref()).unwrap(),
                    Event::Skip { n, .. } => loader.skip(*n).unwrap(),
                }
            }
        }
        if loader.step() < steps {
            out.push(row(&loader.next().unwrap()));
        }
    }
    out
}

#[test]
fn a_saved_state_reopens_and_continues_bit_exactly_after_an_exclusion_and_a_skip() {
    let dir = tempfile::tempdir().unwrap();
    let v = store(&dir.path().join("v"), 60, 0);
    let streams = || vec![("v".to_string(), Arc::clone(&v))];
    let exclude = |records: Vec<u64>| Event::Exclude {
        step: 0,
        records,
        source: None,
    };
    let edits = [
        (3, exclude(vec![5, 6, 7, 40, 40])),
        (5, Event::Skip { step: 0, n: 2 }),
        (11, exclude(vec![0, 1])),
    ];
    for mode in [Mode::Sequential, Mode::Iid, Mode::Cyclic] {
        let whole = run(
            &mut DataLoader::new(streams(), options(4, mode, 11)).unwrap(),
            20,
            &edits,
        );
        let mut first = DataLoader::new(streams(), options(4, mode, 11)).unwrap();
        let head = run(&mut first, 9, &edits);
        let text = first.state().to_json();
        drop(first);
        let state = LoaderState::from_json(&text).unwrap();
        assert_eq!(state.step, 9);
        assert_eq!(
            state.events,
            vec![
                Event::Exclude {
                    step: 3,
                    records: vec![5, 6, 7, 40, 40],
                    source: None
                },
                Event::Skip { step: 5, n: 2 },
            ]
        );
        let mut resumed = DataLoader::new(streams(), options(4, mode, 11)).unwrap();
        resumed.load_state(&state).unwrap();
        let tail = run(&mut resumed, 20, &edits[2..]);
        assert_eq!([head, tail].concat(), whole, "{mode:?}");
        // Skipped steps give nothing in provenance; what was drawn is listed.
        let steps: Vec<u64> = (0..20).collect();
        let listed = resumed.provenance(&steps, None, None).unwrap();
        assert!(listed.steps.iter().all(|s| !(5..7).contains(s)));
        assert_eq!(listed.steps.len(), 18 * 4);
        assert_eq!(resumed.planned(&[5], None, None).unwrap().records.len(), 4);
    }
}

#[test]
fn a_mixture_and_a_pinned_table_resume_from_their_saved_states() {
    let dir = tempfile::tempdir().unwrap();
    let a = store(&dir.path().join("a"), 40, 0);
    let b = store(&dir.path().join("b"), 30, 1000);
    let mix = || {
        DataLoader::mixture(
            vec![
                MixSource {
                    name: "a".into(),
                    streams: vec![("v".into(), Arc::clone(&a))],
                    weights: None,
                },
                MixSource {
                    name: "b".into(),
                    streams: vec![("v".into(), Arc::clone(&b))],
                    weights: None,
                },
            ],
            MixWeights::Fixed(vec![3.0, 1.0]),
            options(6, Mode::Cyclic, 2),
        )
        .unwrap()
    };
    let edits = [
        (
            2,
            Event::Exclude {
                step: 0,
                records: vec![1, 2],
                source: Some("b".into()),
            },
        ),
        (4, Event::Skip { step: 0, n: 1 }),
    ];
    let whole = run(&mut mix(), 14, &edits);
    let mut first = mix();
    let head = run(&mut first, 7, &edits);
    let state = LoaderState::from_json(&first.state().to_json()).unwrap();
    assert_eq!(state.mix_weights, Some(vec![3.0, 1.0]));
    let mut resumed = mix();
    resumed.load_state(&state).unwrap();
    assert_eq!([head, run(&mut resumed, 14, &[])].concat(), whole);
    // An exclusion naming no source of the mixture, or a source of a loader
    // that is not one, is refused and changes nothing.
    let step = resumed.step();
    match resumed.exclude(&[1], Some("c")) {
        Err(Error::InvalidValue(m)) => {
            assert!(
                m.contains("source must name a source of the Mix (['a', 'b']), got 'c'"),
                "{m}"
            )
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    assert_eq!((resumed.step(), resumed.state().events.len()), (step, 2));

    // A table pinned at version 1 resumes there after the table moved on.
    let path = table_of_50(dir.path());
    let open = |t: &Table| -> Vec<(String, Arc<Column>)> {
        let t = Table::open_version(&Location::local(t.path()), &VersionRef::Number(1)).unwrap();
        t.into_columns()
            .into_iter()
            .map(|c| (c.name().to_string(), Arc::new(c)))
            .collect()
    };
    let latest = Table::open(&path, true).unwrap();
    let pinned = Options {
        pins: Some(vec![Some(Pin {
            path: path.to_str().unwrap().to_string(),
            version: Some(1),
            view: None,
        })]),
        ..options(5, Mode::Cyclic, 3)
    };
    let edits = [(
        1,
        Event::Exclude {
            step: 0,
            records: vec![0, 49],
            source: None,
        },
    )];
    let whole = run(
        &mut DataLoader::new(open(&latest), pinned.clone()).unwrap(),
        12,
        &edits,
    );
    let mut first = DataLoader::new(open(&latest), pinned.clone()).unwrap();
    let head = run(&mut first, 5, &edits);
    let state = LoaderState::from_json(&first.state().to_json()).unwrap();
    drop(first);
    // The table changes: a third shard.
    let shard = table::new_shard(&path).unwrap();
    let mut s = Store::create(
        shard.join("v"),
        Schema::dense(DType::I64, &[]).unwrap(),
        Codec::Zstd,
        None,
    )
    .unwrap();
    s.append_dense(&77i64.to_le_bytes()).unwrap();
    s.close().unwrap();
    table::commit_shards(&path, &[shard]).unwrap();
    // The state's seed and mode replace the options'.
    let mut resumed = DataLoader::from_state(&state, open_pin, options(5, Mode::Iid, 0)).unwrap();
    assert_eq!([head, run(&mut resumed, 12, &[])].concat(), whole);
    // Against the latest version, load_state names both pins.
    let mut other = DataLoader::new(
        Table::open(&path, true)
            .unwrap()
            .into_columns()
            .into_iter()
            .map(|c| (c.name().to_string(), Arc::new(c)))
            .collect(),
        Options {
            pins: Some(vec![Some(Pin {
                path: path.to_str().unwrap().to_string(),
                version: Some(2),
                view: None,
            })]),
            ..options(5, Mode::Cyclic, 3)
        },
    )
    .unwrap();
    match other.load_state(&state) {
        Err(Error::InvalidValue(m)) => assert!(
            m.contains("'version': 1") && m.contains("'version': 2"),
            "{m}"
        ),
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    // A state of another seed or mode is refused, naming the key.
    let mut wrong = state.clone();
    wrong.seed = 4;
    match other.load_state(&wrong) {
        Err(Error::InvalidValue(m)) => {
            assert!(
                m.contains("state['seed'] is 4, but this loader's seed is 3"),
                "{m}"
            )
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    // A state without tables does not reopen anything.
    let mut bare = state.clone();
    bare.tables = None;
    match DataLoader::from_state(&bare, open_pin, Options::default()) {
        Err(Error::InvalidValue(m)) => assert!(m.contains("pins no table"), "{m}"),
        other => panic!("expected InvalidValue, got {:?}", other.map(|_| ())),
    }
}
