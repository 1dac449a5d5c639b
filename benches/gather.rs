//! Criterion micro-benchmarks of the Rust core: random batch gathers per
//! codec, ragged gathers, and the sampler. The peer comparisons (npy-mmap,
//! LMDB, Arrow IPC, Lance, HDF5, python-zstandard, torch, Grain) are the
//! Python scripts next to this file.
//!
//!     cargo bench -p loaderx --bench gather

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use loaderx::sampler::{Mode, Sampler};
use loaderx::{Codec, DType, Packed, Records, Schema, Store};

const RECORDS: u64 = 2048;
const BATCH: usize = 256;

/// Smooth (compressible) (3, 64, 64) images.
fn images() -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORDS as usize * 3 * 64 * 64);
    for i in 0..RECORDS {
        for c in 0..3u64 {
            for y in 0..64u64 {
                for x in 0..64u64 {
                    out.push(((x + y + c * 40 + i) % 256) as u8);
                }
            }
        }
    }
    out
}

fn dense(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let data = images();
    let idx = Sampler::new(RECORDS, BATCH, Mode::Iid, 1).unwrap().at(0);
    let mut group = c.benchmark_group("gather_dense_3x64x64");
    group.throughput(Throughput::Bytes((BATCH * 3 * 64 * 64) as u64));
    for codec in [Codec::Raw, Codec::Zstd] {
        let mut s = Store::create(
            dir.path().join(codec.to_string()),
            Schema::dense(DType::U8, &[3, 64, 64]).unwrap(),
            codec,
            None,
        )
        .unwrap();
        s.append_dense(&data).unwrap();
        s.sync().unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(codec), &s, |b, s| {
            b.iter(|| black_box(s.gather_dense(&idx).unwrap()))
        });
    }
    group.finish();
}

fn ragged(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut packed = Packed::default();
    for i in 0..RECORDS {
        let n = 16 + (i * 7919) % 497;
        let seq: Vec<u8> = (0..n as i32)
            .flat_map(|t| (t % 5000).to_le_bytes())
            .collect();
        packed.push(&[n], &seq);
    }
    let idx = Sampler::new(RECORDS, BATCH, Mode::Iid, 2).unwrap().at(0);
    let mut group = c.benchmark_group("gather_ragged_tokens");
    group.throughput(Throughput::Elements(BATCH as u64));
    for codec in [Codec::Raw, Codec::Zstd] {
        let mut s = Store::create(
            dir.path().join(codec.to_string()),
            Schema::ragged(DType::I32),
            codec,
            None,
        )
        .unwrap();
        s.append_ragged(&packed).unwrap();
        s.sync().unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(codec), &s, |b, s| {
            b.iter(|| black_box(s.gather_ragged(&idx).unwrap()))
        });
    }
    group.finish();
}

fn sampler(c: &mut Criterion) {
    let mut group = c.benchmark_group("sampler_1M_b256");
    let mut out = vec![0u64; 256];
    for mode in [Mode::Iid, Mode::Cyclic] {
        let s = Sampler::new(1 << 20, 256, mode, 3).unwrap();
        let mut step = 0u64;
        group.bench_function(mode.name(), |b| {
            b.iter(|| {
                step += 1;
                s.fill_at(step, &mut out);
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, dense, ragged, sampler);
criterion_main!(benches);
