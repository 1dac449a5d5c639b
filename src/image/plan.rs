//! Where a decoded record's pixels come from: the crop box and the flip,
//! drawn from the record's seed.
//!
//! A record's draws are a SplitMix64 stream from its seed (the loader's
//! per-record seed, `sampler::record_seed(seed, step, record)`): uniform
//! floats are the top 53 bits of a draw over 2^53, integers in `0..n` are
//! `floor(u * n)` of one. [`Crop::Random`] is torchvision's
//! `RandomResizedCrop.get_params`: up to ten tries of an area fraction
//! `U(scale)` and a log-uniform aspect ratio in `ratio`, a box of `w =
//! round(sqrt(area * aspect))` by `h = round(sqrt(area / aspect))` that fits
//! placed uniformly; failing that, the centred largest box of the ratio's
//! clamp. The flip is one more draw below `flip`.

use super::Image;
use crate::error::{Error, Result};

/// Which part of the source an image is made of.
#[derive(Clone, Debug, PartialEq)]
pub enum Crop {
    /// torchvision's random-resized-crop: a box of `scale` (area
    /// fraction, low and high) and `ratio` (width / height, low and high).
    Random {
        scale: (f64, f64),
        ratio: (f64, f64),
    },
    /// Evaluation: the shorter side resized to `size / 0.875` (256 for
    /// 224), then the centre `size` (one resize of the matching box).
    Center,
    /// The whole image, resized to the output size.
    Whole,
}

impl Crop {
    pub(super) fn check(&self) -> Result<()> {
        if let Crop::Random { scale, ratio } = self {
            let ok_scale = scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0;
            if !ok_scale {
                return Err(Error::InvalidValue(format!(
                    "scale must be (low, high) with 0 < low <= high <= 1, got ({}, {})",
                    scale.0, scale.1
                )));
            }
            let ok_ratio = ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite();
            if !ok_ratio {
                return Err(Error::InvalidValue(format!(
                    "ratio must be (low, high) with 0 < low <= high, got ({}, {})",
                    ratio.0, ratio.1
                )));
            }
        }
        Ok(())
    }

    /// The name `loaderx.Image(crop=...)` takes.
    pub fn name(&self) -> &'static str {
        match self {
            Crop::Random { .. } => "random",
            Crop::Center => "center",
            Crop::Whole => "none",
        }
    }
}

/// A record's crop box in source pixels and its flip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    pub y: u32,
    pub x: u32,
    pub h: u32,
    pub w: u32,
    pub flip: bool,
}

/// A record's stream of draws.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `0..n` (`n >= 1`).
    fn below(&mut self, n: u32) -> u32 {
        ((self.unit() * n as f64) as u32).min(n.saturating_sub(1))
    }
}

/// Python's `round` of a non-negative float (halves to even).
fn round_even(v: f64) -> f64 {
    let r = v.round();
    if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - v.signum()
    } else {
        r
    }
}

pub(super) fn place(image: &Image, src_h: u32, src_w: u32, seed: u64) -> Placement {
    let mut draws = Draws(seed);
    let (h, w) = (src_h, src_w);
    let mut place = match &image.crop {
        Crop::Whole => Placement {
            y: 0,
            x: 0,
            h,
            w,
            flip: false,
        },
        Crop::Center => {
            let short = image.height.min(image.width) as f64;
            let resized = (short / 0.875).floor();
            let f = resized / h.min(w) as f64;
            let ch = (round_even(image.height as f64 / f) as u32).clamp(1, h);
            let cw = (round_even(image.width as f64 / f) as u32).clamp(1, w);
            Placement {
                y: (h - ch) / 2,
                x: (w - cw) / 2,
                h: ch,
                w: cw,
                flip: false,
            }
        }
        Crop::Random { scale, ratio } => random_box(&mut draws, h, w, *scale, *ratio),
    };
    place.flip = image.flip > 0.0 && draws.unit() < image.flip;
    place
}

fn random_box(d: &mut Draws, h: u32, w: u32, scale: (f64, f64), ratio: (f64, f64)) -> Placement {
    let area = h as f64 * w as f64;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * d.uniform(scale.0, scale.1);
        let aspect = d.uniform(lr0, lr1).exp();
        let cw = round_even((target * aspect).sqrt());
        let ch = round_even((target / aspect).sqrt());
        if cw > 0.0 && ch > 0.0 && cw <= w as f64 && ch <= h as f64 {
            let (ch, cw) = (ch as u32, cw as u32);
            let y = d.below(h - ch + 1);
            let x = d.below(w - cw + 1);
            return Placement {
                y,
                x,
                h: ch,
                w: cw,
                flip: false,
            };
        }
    }
    // The centred largest box of the ratio's clamp.
    let in_ratio = w as f64 / h as f64;
    let (cw, ch) = if in_ratio < ratio.0 {
        (w, (round_even(w as f64 / ratio.0) as u32).clamp(1, h))
    } else if in_ratio > ratio.1 {
        ((round_even(h as f64 * ratio.1) as u32).clamp(1, w), h)
    } else {
        (w, h)
    };
    Placement {
        y: (h - ch) / 2,
        x: (w - cw) / 2,
        h: ch,
        w: cw,
        flip: false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ImageLayout, OnError};
    use super::*;

    fn image(crop: Crop, flip: f64) -> Image {
        Image::new(224, 224, crop, flip, ImageLayout::Chw, OnError::Raise).unwrap()
    }

    #[test]
    fn random_boxes_fit_follow_the_scale_and_ratio_and_are_a_function_of_the_seed() {
        let img = image(
            Crop::Random {
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0),
            },
            0.5,
        );
        let mut flips = 0;
        for seed in 0..2000u64 {
            let p = img.plan(375, 500, seed);
            assert!(
                p.h >= 1 && p.w >= 1 && p.y + p.h <= 375 && p.x + p.w <= 500,
                "{p:?}"
            );
            let frac = (p.h * p.w) as f64 / (375.0 * 500.0);
            assert!((0.06..=1.0).contains(&frac), "{p:?} {frac}");
            let aspect = p.w as f64 / p.h as f64;
            assert!((0.7..=1.4).contains(&aspect), "{p:?}");
            assert_eq!(img.plan(375, 500, seed), p);
            flips += p.flip as u32;
        }
        assert!((850..1150).contains(&flips), "{flips}");
        assert_ne!(img.plan(375, 500, 1), img.plan(375, 500, 2));
    }

    #[test]
    fn the_centre_crop_is_the_evaluation_box_and_the_whole_crop_the_image() {
        let c = image(Crop::Center, 0.0).plan(375, 500, 7);
        // 375 → 256: the box is 224 * 375 / 256 = 328 pixels, centred.
        assert_eq!((c.h, c.w), (328, 328));
        assert_eq!((c.y, c.x), ((375 - 328) / 2, (500 - 328) / 2));
        assert!(!c.flip);
        let whole = image(Crop::Whole, 0.0).plan(375, 500, 7);
        assert_eq!((whole.y, whole.x, whole.h, whole.w), (0, 0, 375, 500));
        // A box that cannot fit falls back to the ratio's largest centred box.
        let tall = Image::new(
            8,
            8,
            Crop::Random {
                scale: (1.0, 1.0),
                ratio: (1.0, 1.0),
            },
            0.0,
            ImageLayout::Hwc,
            OnError::Raise,
        )
        .unwrap()
        .plan(10, 100, 3);
        assert_eq!((tall.y, tall.x, tall.h, tall.w), (0, 45, 10, 10));
    }

    #[test]
    fn bad_settings_are_refused_naming_them() {
        let says = |r: Result<Image>, what: &str| match r {
            Err(Error::InvalidValue(m)) => assert!(m.contains(what), "{m}"),
            other => panic!("{other:?}"),
        };
        let mk = |scale, ratio, flip| {
            Image::new(
                4,
                4,
                Crop::Random { scale, ratio },
                flip,
                ImageLayout::Chw,
                OnError::Raise,
            )
        };
        says(mk((0.0, 1.0), (0.75, 1.3), 0.5), "scale must be");
        says(mk((0.5, 1.5), (0.75, 1.3), 0.5), "scale must be");
        says(mk((0.5, 1.0), (1.3, 0.75), 0.5), "ratio must be");
        says(mk((0.5, 1.0), (0.75, 1.3), 1.5), "flip must be");
        says(
            Image::new(0, 4, Crop::Whole, 0.0, ImageLayout::Chw, OnError::Raise),
            "size must be",
        );
    }
}
