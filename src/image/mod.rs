//! Encoded images to training tensors: JPEG, PNG and WebP decoded
//! natively, cropped, resized and flipped by a plan drawn from each
//! record's seed.
//!
//! An [`Image`] says what a decoded record becomes: `height × width` RGB
//! `u8`, in `CHW` or `HWC` layout, from a crop box of the source
//! ([`Crop`]): torchvision's random-resized-crop, the evaluation centre
//! crop, or the whole image. The box and the flip are a pure function of
//! the source size and the record's seed ([`Image::plan`]), so they can be
//! listed without reading a byte of the image, and a resumed run draws
//! them again exactly.
//!
//! Decoders: libjpeg-turbo ([`jpeg`]: baseline, progressive and
//! lossless, every subsampling, grayscale and CMYK converted to RGB; a
//! crop reads only its region, at a DCT scale where the box is much
//! larger than the output), `zune-png` (every bit depth;
//! 16-bit samples keep their high byte; palettes expanded; alpha dropped)
//! and `image-webp` (lossy and lossless). The crop box is resized with a
//! separable bilinear filter whose support widens with the reduction (as
//! PIL's and torchvision's antialiased resize), by `fast_image_resize`.
//! EXIF orientation is not applied (PIL and torchvision do not by
//! default). A decoder that fails, on any input, is an error naming the
//! record; a decoder that panics is caught and reported the same way.

mod jpeg;
mod plan;
mod planes;

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use fast_image_resize as fr;

use crate::error::{Error, Result};
pub use plan::{Crop, Placement};

/// The largest source image decoded, in pixels (a 8192 × 8192 photo):
/// what a corrupt header cannot make the decoder allocate beyond.
pub const MAX_PIXELS: u64 = 1 << 26;

/// The layout of a decoded batch's images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageLayout {
    /// Channels first: `(3, height, width)` per image (the seed's layout).
    Chw,
    /// Channels last: `(height, width, 3)`.
    Hwc,
}

impl ImageLayout {
    pub fn name(self) -> &'static str {
        match self {
            ImageLayout::Chw => "CHW",
            ImageLayout::Hwc => "HWC",
        }
    }
}

/// What a record that cannot be decoded becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// An error naming the record.
    Raise,
    /// A zero image, and `false` in the batch's `<column>_ok` column.
    Zeros,
}

/// How a column of encoded images is decoded (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub height: u32,
    pub width: u32,
    pub crop: Crop,
    /// The probability of a horizontal flip.
    pub flip: f64,
    pub layout: ImageLayout,
    pub on_error: OnError,
}

/// The encodings read, by their first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Jpeg,
    Png,
    Webp,
}

fn format_of(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some(Format::Webp)
    } else {
        None
    }
}

/// Why `bytes` are not an image, as messages say it.
fn not_an_image(why: impl std::fmt::Display) -> Error {
    Error::InvalidValue(format!("not a decodable image: {why}"))
}

/// Runs a decoder, turning a panic into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(not_an_image(
            "the decoder failed on it (a malformed stream)",
        ))
    })
}

fn check_size(w: usize, h: usize) -> Result<(u32, u32)> {
    if w == 0 || h == 0 {
        return Err(not_an_image(format!("it is {w} × {h} pixels")));
    }
    if (w as u64) * (h as u64) > MAX_PIXELS {
        return Err(not_an_image(format!(
            "it is {w} × {h} pixels, more than the {MAX_PIXELS} decoded at most"
        )));
    }
    Ok((h as u32, w as u32))
}

fn png_options() -> zune_core::options::DecoderOptions {
    zune_core::options::DecoderOptions::default()
        .png_set_strip_to_8bit(true)
        .png_set_add_alpha_channel(false)
        .png_set_confirm_crc(true)
        .set_strict_mode(true)
        .set_max_width(1 << 16)
        .set_max_height(1 << 16)
}

/// The `(height, width)` of an encoded image, read from its header only.
pub fn dimensions(bytes: &[u8]) -> Result<(u32, u32)> {
    guarded(|| match format_of(bytes) {
        Some(Format::Jpeg) => jpeg::header(bytes).map(|h| (h.height, h.width)),
        Some(Format::Png) => {
            let cursor = zune_core::bytestream::ZCursor::new(bytes);
            let mut d = zune_png::PngDecoder::new_with_options(cursor, png_options());
            d.decode_headers()
                .map_err(|e| not_an_image(format!("{e:?}")))?;
            let (w, h) = d
                .dimensions()
                .ok_or_else(|| not_an_image("no PNG header"))?;
            check_size(w, h)
        }
        Some(Format::Webp) => {
            let d = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes))
                .map_err(|e| not_an_image(format!("{e}")))?;
            let (w, h) = d.dimensions();
            check_size(w as usize, h as usize)
        }
        None => Err(not_an_image(
            "it starts like no JPEG, PNG or WebP file".to_string(),
        )),
    })
}

/// One thread's buffers for the image it decodes: the decoded region, the
/// resized box and the resizer's own intermediate rows (kept from image to
/// image: no allocation or zeroing per record).
#[derive(Default)]
struct Scratch {
    source: Vec<u8>,
    resized: Vec<u8>,
    resizer: fr::Resizer,
}

impl Scratch {
    /// What a thread keeps between images: 32 MiB, enough for an
    /// 8-megapixel region of RGBX; a larger one (up to [`MAX_PIXELS`]) is
    /// freed after use.
    const KEEP: usize = 4 << 23;

    fn shrink(&mut self) {
        if self.source.capacity() > Self::KEEP {
            self.source = Vec::new();
        }
        if self.resizer.size_of_internal_buffers() > Self::KEEP {
            self.resizer.reset_internal_buffers();
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A decoded source image: RGB, row after row.
pub struct Rgb {
    pub height: u32,
    pub width: u32,
    pub pixels: Vec<u8>,
}

/// `pixels` of `channels` samples each as RGB (gray replicated, alpha
/// dropped).
fn to_rgb(pixels: Vec<u8>, channels: usize) -> Vec<u8> {
    match channels {
        3 => pixels,
        1 => pixels.iter().flat_map(|&g| [g, g, g]).collect(),
        2 => pixels
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        _ => pixels
            .chunks_exact(channels)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
    }
}

/// Decodes an encoded image whole, to RGB.
pub fn decode_rgb(bytes: &[u8]) -> Result<Rgb> {
    let (height, width) = dimensions(bytes)?;
    let want = height as usize * width as usize * 3;
    let pixels = guarded(|| match format_of(bytes) {
        Some(Format::Jpeg) => {
            let mut out = Vec::new();
            jpeg::decode_region(bytes, |h, w| ((0, 0, h, w), 1), &mut out)?;
            Ok(to_rgb(out, 4))
        }
        Some(Format::Png) => {
            let cursor = zune_core::bytestream::ZCursor::new(bytes);
            let mut d = zune_png::PngDecoder::new_with_options(cursor, png_options());
            let out = d.decode().map_err(|e| not_an_image(format!("{e:?}")))?;
            let channels = d
                .colorspace()
                .map(|c| c.num_components())
                .ok_or_else(|| not_an_image("no PNG colour type"))?;
            match out {
                zune_core::result::DecodingResult::U8(v) => Ok(to_rgb(v, channels)),
                _ => Err(not_an_image("a PNG sample depth not reduced to 8 bits")),
            }
        }
        Some(Format::Webp) => {
            let mut d = image_webp::WebPDecoder::new(std::io::Cursor::new(bytes))
                .map_err(|e| not_an_image(format!("{e}")))?;
            let len = d
                .output_buffer_size()
                .ok_or_else(|| not_an_image("a WebP image too large"))?;
            let channels = if d.has_alpha() { 4 } else { 3 };
            let mut out = vec![0u8; len];
            d.read_image(&mut out)
                .map_err(|e| not_an_image(format!("{e}")))?;
            Ok(to_rgb(out, channels))
        }
        None => Err(not_an_image("an unknown format")),
    })?;
    if pixels.len() != want {
        return Err(not_an_image(format!(
            "it decoded to {} bytes, not {height} × {width} × 3",
            pixels.len()
        )));
    }
    Ok(Rgb {
        height,
        width,
        pixels,
    })
}

impl Image {
    /// Checks the settings: a positive output size, a crop's scale within
    /// `0 < lo <= hi <= 1` and ratio within `0 < lo <= hi`, `flip` in
    /// `0..=1`. `InvalidValue` naming the setting otherwise.
    pub fn new(
        height: u32,
        width: u32,
        crop: Crop,
        flip: f64,
        layout: ImageLayout,
        on_error: OnError,
    ) -> Result<Image> {
        if height == 0 || width == 0 || (height as u64) * (width as u64) > MAX_PIXELS {
            return Err(Error::InvalidValue(format!(
                "size must be positive and at most {MAX_PIXELS} pixels, got ({height}, {width})"
            )));
        }
        crop.check()?;
        if !(0.0..=1.0).contains(&flip) {
            return Err(Error::InvalidValue(format!(
                "flip must be a probability in [0, 1], got {flip}"
            )));
        }
        Ok(Image {
            height,
            width,
            crop,
            flip,
            layout,
            on_error,
        })
    }

    /// The settings as a run's state keeps them (`{"size", "crop",
    /// "scale", "ratio", "flip", "layout", "on_error"}`, `scale` and
    /// `ratio` for a random crop only).
    pub fn to_value(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("size".into(), serde_json::json!([self.height, self.width]));
        m.insert("crop".into(), self.crop.name().into());
        if let Crop::Random { scale, ratio } = &self.crop {
            m.insert("scale".into(), serde_json::json!([scale.0, scale.1]));
            m.insert("ratio".into(), serde_json::json!([ratio.0, ratio.1]));
        }
        m.insert("flip".into(), self.flip.into());
        m.insert("layout".into(), self.layout.name().into());
        let on_error = match self.on_error {
            OnError::Raise => "raise",
            OnError::Zeros => "zeros",
        };
        m.insert("on_error".into(), on_error.into());
        serde_json::Value::Object(m)
    }

    /// The shape of one decoded image in its layout: `[3, height, width]`
    /// or `[height, width, 3]`.
    pub fn shape(&self) -> [usize; 3] {
        let (h, w) = (self.height as usize, self.width as usize);
        match self.layout {
            ImageLayout::Chw => [3, h, w],
            ImageLayout::Hwc => [h, w, 3],
        }
    }

    /// Bytes of one decoded image.
    pub fn image_len(&self) -> usize {
        3 * self.height as usize * self.width as usize
    }

    /// The crop box and flip of a source of `src_h × src_w` pixels for the
    /// record whose seed is `seed` (see [`Crop`]).
    pub fn plan(&self, src_h: u32, src_w: u32, seed: u64) -> Placement {
        plan::place(self, src_h, src_w, seed)
    }

    /// Decodes `bytes`, crops, resizes and flips them as planned for
    /// `seed`, into `out` ([`Image::image_len`] bytes, in the layout). A
    /// JPEG is decoded only over the planned box (at a DCT scale where the
    /// box is at least twice the output's size); other formats whole.
    pub fn decode_into(&self, bytes: &[u8], seed: u64, out: &mut [u8]) -> Result<Placement> {
        assert_eq!(out.len(), self.image_len(), "one image's bytes");
        SCRATCH.with(|cell| {
            let scratch = &mut *cell.borrow_mut();
            if format_of(bytes) == Some(Format::Jpeg) {
                // The plan is drawn from the header the decode reads.
                let mut place = Placement::default();
                let region = guarded(|| {
                    jpeg::decode_region(
                        bytes,
                        |src_h, src_w| {
                            place = self.plan(src_h, src_w, seed);
                            let d = jpeg::scale_for(place.h, place.w, self.height, self.width);
                            ((place.y, place.x, place.h, place.w), d)
                        },
                        &mut scratch.source,
                    )
                });
                let rendered = region.and_then(|region| {
                    let source = (region.height, region.width, 4, scratch.source.as_slice());
                    let buffers = (&mut scratch.resizer, &mut scratch.resized);
                    self.render(source, region.boxed, place.flip, buffers, out)
                });
                scratch.shrink();
                rendered.map(|()| place)
            } else {
                let src = decode_rgb(bytes)?;
                let place = self.plan(src.height, src.width, seed);
                let boxed = (
                    place.x as f64,
                    place.y as f64,
                    place.w as f64,
                    place.h as f64,
                );
                let source = (src.height, src.width, 3, src.pixels.as_slice());
                let buffers = (&mut scratch.resizer, &mut scratch.resized);
                let rendered = self.render(source, boxed, place.flip, buffers, out);
                scratch.shrink();
                rendered.map(|()| place)
            }
        })
    }

    /// The box `(x, y, w, h)` of `source` (`height, width, bytes per
    /// pixel, pixels`: RGB, or RGBX as the JPEG decoder writes them) resized
    /// to the output size (by the thread's `resizer`, through `resized`,
    /// both kept for the next image), flipped if asked, into `out` in the
    /// layout.
    fn render(
        &self,
        (src_h, src_w, stride, pixels): (u32, u32, usize, &[u8]),
        (bx, by, bw, bh): (f64, f64, f64, f64),
        flip: bool,
        (resizer, resized): (&mut fr::Resizer, &mut Vec<u8>),
        out: &mut [u8],
    ) -> Result<()> {
        let (oh, ow) = (self.height, self.width);
        let pixel = if stride == 4 {
            fr::PixelType::U8x4
        } else {
            fr::PixelType::U8x3
        };
        let src_view = fr::images::ImageRef::new(src_w, src_h, pixels, pixel)
            .map_err(|e| not_an_image(format!("{e}")))?;
        // Straight into `out` where nothing is left to do after the resize;
        // through `resized` (kept for the next image: no zeroing or
        // allocation per image once it has grown) where a flip, RGBX or the
        // planes of CHW are.
        let direct = self.layout == ImageLayout::Hwc && !flip && stride == 3;
        if !direct {
            resized.resize(oh as usize * ow as usize * stride, 0);
        }
        let dst_buf: &mut [u8] = if direct { out } else { resized.as_mut_slice() };
        {
            let mut dst = fr::images::Image::from_slice_u8(ow, oh, dst_buf, pixel)
                .map_err(|e| Error::InvalidValue(format!("{e}")))?;
            // RGBX's fourth byte is padding, not alpha.
            let options = fr::ResizeOptions::new()
                .resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear))
                .crop(bx, by, bw, bh)
                .use_alpha(false);
            resizer
                .resize(&src_view, &mut dst, &options)
                .map_err(|e| Error::InvalidValue(format!("resizing an image: {e}")))?;
        }
        if direct {
            return Ok(());
        }
        let ow = ow as usize;
        match self.layout {
            ImageLayout::Hwc => planes::to_hwc(resized, ow, stride, flip, out),
            ImageLayout::Chw => {
                let plane = self.height as usize * ow;
                let (r, rest) = out.split_at_mut(plane);
                let (g, b) = rest.split_at_mut(plane);
                planes::to_chw(resized, ow, stride, flip, [r, g, b]);
            }
        }
        Ok(())
    }

    /// Decodes a batch: `values[i]` with seed `seeds[i]` into image `i` of
    /// `out`, on the worker pool. With [`OnError::Zeros`] a record that
    /// fails is a zero image and `false` in `ok`; with [`OnError::Raise`]
    /// the first failure (in row order) is the error, its message naming
    /// `ids[i]`, the record's id.
    pub fn decode_batch(
        &self,
        values: &[&[u8]],
        seeds: &[u64],
        ids: &[u64],
        out: &mut [u8],
        ok: &mut [bool],
    ) -> Result<Vec<Placement>> {
        use rayon::prelude::*;
        let n = values.len();
        assert!(
            seeds.len() == n && ids.len() == n && ok.len() == n,
            "one seed, id and flag per value"
        );
        assert_eq!(out.len(), n * self.image_len(), "one image per value");
        let results: Vec<Result<Placement>> = crate::executor::pool().install(|| {
            out.par_chunks_mut(self.image_len())
                .zip(values.par_iter())
                .zip(seeds.par_iter())
                .map(|((dst, v), &seed)| self.decode_into(v, seed, dst))
                .collect()
        });
        let mut places = Vec::with_capacity(n);
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(p) => {
                    ok[i] = true;
                    places.push(p);
                }
                Err(e) if self.on_error == OnError::Zeros => {
                    let _ = e;
                    ok[i] = false;
                    out[i * self.image_len()..(i + 1) * self.image_len()].fill(0);
                    places.push(Placement::default());
                }
                Err(e) => {
                    return Err(Error::InvalidValue(format!(
                        "record {}: {}",
                        ids[i],
                        message(&e)
                    )))
                }
            }
        }
        Ok(places)
    }
}

fn message(e: &Error) -> String {
    match e {
        Error::InvalidValue(m) => m.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG region is resized as RGBX and a PNG or WebP image as RGB:
    /// both give the same samples for the same pixels, in both layouts,
    /// flipped or not.
    #[test]
    fn rgbx_and_rgb_sources_render_the_same() {
        let (h, w) = (97u32, 131u32);
        let rgb: Vec<u8> = (0..(h * w * 3) as usize)
            .map(|i| (i * 37 % 253) as u8)
            .collect();
        let rgbx: Vec<u8> = rgb
            .chunks_exact(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect();
        for layout in [ImageLayout::Chw, ImageLayout::Hwc] {
            let image = Image::new(40, 56, Crop::Whole, 0.5, layout, OnError::Raise)
                .expect("valid settings");
            for flip in [false, true] {
                let boxed = (7.25, 3.5, 101.0, 80.5);
                let mut resizer = fr::Resizer::new();
                let mut scratch = Vec::new();
                let mut a = vec![0u8; image.image_len()];
                let mut b = vec![0u8; image.image_len()];
                image
                    .render(
                        (h, w, 3, &rgb),
                        boxed,
                        flip,
                        (&mut resizer, &mut scratch),
                        &mut a,
                    )
                    .unwrap();
                image
                    .render(
                        (h, w, 4, &rgbx),
                        boxed,
                        flip,
                        (&mut resizer, &mut scratch),
                        &mut b,
                    )
                    .unwrap();
                assert_eq!(a, b, "{layout:?}, flip {flip}");
            }
        }
    }
}
