//! The image decoders (`loaderx::image`): every fixture in
//! tests/data/images decodes to its size, and a bounded, deterministic fuzz
//! of each decoder entry point (header, whole decode, crop decode, batch)
//! over mutated and truncated copies never panics, aborts or hangs: each
//! either decodes or fails with `InvalidValue` saying it is not a
//! decodable image.

#![cfg(feature = "image")]

use std::path::Path;

use loaderx::image::{self, Crop, Image, ImageLayout, OnError};
use loaderx::Error;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRunner};

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/images");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e != "md"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    assert_eq!(out.len(), 9, "the fixtures");
    out
}

fn random_crop(layout: ImageLayout, on_error: OnError) -> Image {
    let crop = Crop::Random {
        scale: (0.08, 1.0),
        ratio: (0.75, 4.0 / 3.0),
    };
    Image::new(16, 20, crop, 0.5, layout, on_error).unwrap()
}

#[test]
fn every_fixture_decodes_to_its_size_in_either_layout() {
    for (name, bytes) in fixtures() {
        assert_eq!(image::dimensions(&bytes).unwrap(), (32, 48), "{name}");
        let rgb = image::decode_rgb(&bytes).unwrap();
        assert_eq!(
            (rgb.height, rgb.width, rgb.pixels.len()),
            (32, 48, 32 * 48 * 3)
        );
        assert!(rgb.pixels.iter().any(|&p| p > 0), "{name}");
        let (chw, hwc) = (
            random_crop(ImageLayout::Chw, OnError::Raise),
            random_crop(ImageLayout::Hwc, OnError::Raise),
        );
        let mut a = vec![0u8; chw.image_len()];
        let mut b = vec![0u8; hwc.image_len()];
        let pa = chw.decode_into(&bytes, 7, &mut a).unwrap();
        let pb = hwc.decode_into(&bytes, 7, &mut b).unwrap();
        assert_eq!(pa, pb, "{name}: the plan is the layout's either way");
        for y in 0..16 {
            for x in 0..20 {
                for c in 0..3 {
                    assert_eq!(a[c * 320 + y * 20 + x], b[(y * 20 + x) * 3 + c], "{name}");
                }
            }
        }
    }
}

fn is_refusal(r: &loaderx::Result<impl std::fmt::Debug>) -> bool {
    match r {
        Ok(_) => true,
        Err(Error::InvalidValue(m)) => m.contains("not a decodable image"),
        Err(_) => false,
    }
}

#[test]
fn mutated_and_truncated_images_never_panic_abort_or_hang() {
    let sources = fixtures();
    let image = random_crop(ImageLayout::Chw, OnError::Raise);
    let zeros = random_crop(ImageLayout::Hwc, OnError::Zeros);
    let config = Config {
        cases: 400,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        proptest::test_runner::TestRng::from_seed(RngAlgorithm::ChaCha, &[9; 32]),
    );
    let case = (
        0..sources.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..24),
        proptest::option::of(any::<prop::sample::Index>()),
        any::<u64>(),
    );
    runner
        .run(&case, |(which, flips, cut, seed)| {
            let mut bytes = sources[which].1.clone();
            for (at, v) in flips {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len()));
            }
            let dims = image::dimensions(&bytes);
            prop_assert!(is_refusal(&dims), "{dims:?}");
            let whole = image::decode_rgb(&bytes).map(|r| r.pixels.len());
            prop_assert!(is_refusal(&whole), "{whole:?}");
            let mut out = vec![0u8; image.image_len()];
            let one = image.decode_into(&bytes, seed, &mut out);
            prop_assert!(is_refusal(&one), "{one:?}");
            let values = [bytes.as_slice(), sources[0].1.as_slice()];
            let mut batch = vec![0u8; 2 * zeros.image_len()];
            let mut ok = [false; 2];
            let placed = zeros.decode_batch(&values, &[seed, 1], &[5, 6], &mut batch, &mut ok);
            prop_assert!(placed.is_ok() && ok[1]);
            if !ok[0] {
                prop_assert!(batch[..zeros.image_len()].iter().all(|&b| b == 0));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_batch_that_fails_names_the_record() {
    let image = random_crop(ImageLayout::Chw, OnError::Raise);
    let good = &fixtures()[0].1;
    let values = [good.as_slice(), b"nothing like an image".as_slice()];
    let mut out = vec![0u8; 2 * image.image_len()];
    let mut ok = [false; 2];
    match image.decode_batch(&values, &[1, 2], &[40, 41], &mut out, &mut ok) {
        Err(Error::InvalidValue(m)) => {
            assert!(m.starts_with("record 41: not a decodable image"), "{m}")
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
}
