//! The Rust core without Python: write a dense and a ragged store, gather a
//! random batch with the sampler, delete and compact.
//!
//!     cargo run --release --example quickstart

use loaderx::sampler::{Mode, Sampler};
use loaderx::{Codec, DType, Packed, Records, Schema, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;

    // 1,000 records of (3, 8, 8) uint8; record i is filled with i % 251.
    let width = 3 * 8 * 8;
    let records: Vec<u8> = (0..1000u32)
        .flat_map(|i| std::iter::repeat_n((i % 251) as u8, width))
        .collect();
    let mut images = Store::create(
        dir.path().join("images"),
        Schema::dense(DType::U8, &[3, 8, 8])?,
        Codec::Zstd,
        None,
    )?;
    images.append_dense(&records)?; // compressed on all cores, written positionally
    images.sync()?; // the durability barrier

    // Ragged int32 token sequences, each with its own shape.
    let mut tokens = Store::create(
        dir.path().join("tokens"),
        Schema::ragged(DType::I32),
        Codec::Zstd,
        None,
    )?;
    let mut packed = Packed::default();
    for i in 0..1000u64 {
        let seq: Vec<u8> = (0..(i % 17 + 1) as i32)
            .flat_map(|t| t.to_le_bytes())
            .collect();
        packed.push(&[i % 17 + 1], &seq);
    }
    tokens.append_ragged(&packed)?;

    // Step 42 of a cyclic sampler is a pure function of (n, B, mode, seed, step).
    let sampler = Sampler::new(images.len(), 64, Mode::Cyclic, 7)?;
    let idx = sampler.at(42);
    let batch = images.gather_dense(&idx)?; // one buffer of 64 records
    for (k, &i) in idx.iter().enumerate() {
        assert!(batch.as_slice()[k * width..(k + 1) * width]
            .iter()
            .all(|&b| b == (i % 251) as u8));
    }
    let seqs = tokens.gather_ragged(&idx)?;
    let first = seqs.record(0);
    println!(
        "step 42: {} images, first record {} has tokens of shape {:?}",
        idx.len(),
        idx[0],
        first.shape()
    );

    // Delete swaps the last record into each hole; compact reclaims space.
    tokens.delete(&[0u64, 1, 2])?;
    println!("after delete:  {:?}", tokens.stats());
    tokens.compact()?;
    println!("after compact: {:?}", tokens.stats());
    tokens.close()?;
    images.close()?;
    Ok(())
}
