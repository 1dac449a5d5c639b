//! A training loop in Rust, without Python: write a features store and a
//! labels store, train a logistic-regression classifier from endless,
//! prefetched batches, resume from a saved step bit-exactly, and evaluate on
//! one sequential pass.
//!
//!     cargo run -p loaderx --example loader

use std::sync::Arc;

use loaderx::loader::{Batch, BatchColumn, DataLoader, Options};
use loaderx::sampler::Mode;
use loaderx::{Codec, DType, Schema, Store};

const N: usize = 4096;
const DIM: usize = 16;

/// SplitMix64, for reproducible synthetic data.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The little-endian values of a dense column.
fn floats(column: &BatchColumn) -> Vec<f32> {
    match column {
        BatchColumn::Dense(buf) => buf
            .as_slice()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        _ => unreachable!("both streams are dense"),
    }
}

struct Model {
    w: [f32; DIM],
    b: f32,
}

impl Model {
    fn logit(&self, x: &[f32]) -> f32 {
        self.b + x.iter().zip(&self.w).map(|(x, w)| x * w).sum::<f32>()
    }

    /// One SGD step on a batch; returns the mean log loss before the step.
    fn step(&mut self, batch: &Batch, lr: f32) -> f32 {
        let (x, y) = (floats(&batch.columns[0]), floats(&batch.columns[1]));
        let mut grad = [0f32; DIM];
        let (mut grad_b, mut loss) = (0f32, 0f32);
        for (row, &label) in x.chunks_exact(DIM).zip(&y) {
            let p = 1.0 / (1.0 + (-self.logit(row)).exp());
            loss -= label * p.max(1e-7).ln() + (1.0 - label) * (1.0 - p).max(1e-7).ln();
            for (g, v) in grad.iter_mut().zip(row) {
                *g += (p - label) * v;
            }
            grad_b += p - label;
        }
        let n = y.len() as f32;
        for (w, g) in self.w.iter_mut().zip(grad) {
            *w -= lr * g / n;
        }
        self.b -= lr * grad_b / n;
        loss / n
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;

    // Synthetic data: label = 1 when a hidden linear function is positive.
    let mut rng = 42u64;
    let hidden: Vec<f32> = (0..DIM)
        .map(|_| (splitmix(&mut rng) % 2000) as f32 / 1000.0 - 1.0)
        .collect();
    let mut features = Vec::with_capacity(N * DIM * 4);
    let mut labels = Vec::with_capacity(N * 4);
    for _ in 0..N {
        let x: Vec<f32> = (0..DIM)
            .map(|_| (splitmix(&mut rng) % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let score: f32 = x.iter().zip(&hidden).map(|(a, b)| a * b).sum();
        features.extend(x.iter().flat_map(|v| v.to_le_bytes()));
        labels.extend(f32::from(u8::from(score > 0.0)).to_le_bytes());
    }
    let mut x = Store::create(
        dir.path().join("features"),
        Schema::dense(DType::F32, &[DIM as u64])?,
        Codec::Zstd,
        None,
    )?;
    x.append_dense(&features)?;
    x.sync()?;
    let mut y = Store::create(
        dir.path().join("label"),
        Schema::dense(DType::F32, &[])?,
        Codec::Raw,
        None,
    )?;
    y.append_dense(&labels)?;
    y.sync()?;

    // The loader's producer threads outlive any borrow: hand it Arc<Store>s.
    let streams = vec![
        ("features".to_string(), Arc::new(x)),
        ("label".to_string(), Arc::new(y)),
    ];
    let options = Options {
        batch_size: 64,
        mode: Mode::Cyclic,
        seed: 7,
        ..Options::default()
    };
    let mut model = Model {
        w: [0.0; DIM],
        b: 0.0,
    };
    let loader = DataLoader::new(streams.clone(), options.clone())?;
    let mut saved = None;
    for _ in 0..300 {
        let batch = loader.next()?;
        let loss = model.step(&batch, 0.5);
        if batch.step % 50 == 0 {
            println!("step {:>3}  loss {loss:.4}", batch.step);
        }
        if batch.step == 199 {
            // A checkpoint: the step to resume from (batches handed over).
            saved = Some(loader.step());
        }
    }
    let expect = loader.next()?;
    loader.close();

    // A new loader at the saved step yields exactly what the old one did.
    let start_step = saved.expect("step 199 was trained on");
    let resumed = DataLoader::new(
        streams.clone(),
        Options {
            start_step,
            ..options
        },
    )?;
    for _ in start_step..300 {
        resumed.next()?;
    }
    let again = resumed.next()?;
    assert_eq!(again.indices, expect.indices);
    assert_eq!(floats(&again.columns[0]), floats(&expect.columns[0]));
    println!(
        "resumed at step {start_step}: step {} is the same batch of {} records",
        again.step,
        again.indices.len()
    );

    // Evaluation: one sequential pass over every record.
    let eval = DataLoader::new(
        streams,
        Options {
            batch_size: 512,
            mode: Mode::Sequential,
            ..Options::default()
        },
    )?;
    let mut correct = 0usize;
    for _ in 0..N / 512 {
        let batch = eval.next()?;
        let (x, y) = (floats(&batch.columns[0]), floats(&batch.columns[1]));
        correct += x
            .chunks_exact(DIM)
            .zip(&y)
            .filter(|(row, &label)| (model.logit(row) > 0.0) == (label == 1.0))
            .count();
    }
    println!(
        "accuracy on all {N} records: {:.1}%",
        100.0 * correct as f32 / N as f32
    );
    Ok(())
}
