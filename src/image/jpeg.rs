//! JPEG through libjpeg-turbo's TurboJPEG API (`turbojpeg-sys`, built from
//! its bundled source and linked statically, so the wheel needs no system
//! library): the header alone, and a decode of one region of the image at
//! a DCT scale of 1, 1/2, 1/4 or 1/8. A random crop reads only the rows
//! and the iMCU columns its box covers; a box much larger than the output
//! is decoded at the largest scale that still gives at least the output's
//! pixels, as DALI and PIL's draft mode do.
//!
//! Each thread keeps one decompressor (no allocation per image), made
//! again after a failure. Every
//! libjpeg warning is an error (`TJPARAM_STOPONWARNING`): a truncated or
//! corrupt stream fails, as PIL's does, instead of decoding to grey.

use std::cell::RefCell;
use std::ffi::CStr;

use turbojpeg_sys as tj;

use super::{not_an_image, MAX_PIXELS};
use crate::error::Result;

/// What the header says.
#[derive(Clone, Copy, Debug)]
pub(super) struct Header {
    pub height: u32,
    pub width: u32,
    /// The iMCU width of the full-size image, in pixels; `None` where the
    /// subsampling is not one TurboJPEG names (no column cropping then).
    mcu_width: Option<u32>,
    cmyk: bool,
    lossless: bool,
}

/// One thread's decompressor.
struct Handle(tj::tjhandle);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

thread_local! {
    static HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// The largest number of progressive scans decoded: a crafted file with
/// thousands of tiny scans cannot make a decode take minutes.
const SCAN_LIMIT: i32 = 500;

/// The error TurboJPEG holds for `h`'s last call.
fn error_of(h: tj::tjhandle) -> crate::error::Error {
    // SAFETY: tj3GetErrorStr returns a NUL-terminated string it owns (a
    // static one for a null handle); it is copied before the next call.
    let msg = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(h)) };
    not_an_image(msg.to_string_lossy().trim())
}

/// Runs `f` with this thread's decompressor, made on first use.
fn with_handle<T>(f: impl FnOnce(tj::tjhandle) -> Result<T>) -> Result<T> {
    HANDLE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            // SAFETY: plain FFI calls; a null handle is checked.
            let h = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as i32) };
            if h.is_null() {
                return Err(not_an_image("libjpeg-turbo could not start a decompressor"));
            }
            let handle = Handle(h);
            let settings = [
                (tj::TJPARAM_TJPARAM_STOPONWARNING, 1),
                (tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT),
                (tj::TJPARAM_TJPARAM_MAXPIXELS, MAX_PIXELS as i32),
            ];
            for (param, value) in settings {
                // SAFETY: a live handle and a parameter TurboJPEG defines.
                if unsafe { tj::tj3Set(h, param as i32, value) } != 0 {
                    return Err(error_of(h));
                }
            }
            *slot = Some(handle);
        }
        let result = f(slot.as_ref().expect("made above").0);
        if result.is_err() {
            // A decompressor that failed may keep part of its state (a
            // half-read header, a pending warning): the next image gets a
            // fresh one.
            *slot = None;
        }
        result
    })
}

/// The iMCU width of a TurboJPEG subsampling (`tjMCUWidth`, which the
/// library keeps in its header, not its symbols).
fn mcu_width(subsamp: i32) -> Option<u32> {
    const WIDTHS: [u32; 7] = [8, 16, 16, 8, 8, 32, 8];
    usize::try_from(subsamp)
        .ok()
        .and_then(|i| WIDTHS.get(i).copied())
}

/// Reads the header of `bytes` into `h`.
fn read_header(h: tj::tjhandle, bytes: &[u8]) -> Result<Header> {
    // SAFETY: the pointer and length describe `bytes`, which outlives the
    // call; the handle is live.
    let rc = unsafe { tj::tj3DecompressHeader(h, bytes.as_ptr(), bytes.len() as _) };
    if rc != 0 {
        return Err(error_of(h));
    }
    // SAFETY: reading parameters of a live handle.
    let get = |p: tj::TJPARAM| unsafe { tj::tj3Get(h, p as i32) };
    let (width, height) = (
        get(tj::TJPARAM_TJPARAM_JPEGWIDTH),
        get(tj::TJPARAM_TJPARAM_JPEGHEIGHT),
    );
    let (height, width) = super::check_size(width.max(0) as usize, height.max(0) as usize)?;
    let colorspace = get(tj::TJPARAM_TJPARAM_COLORSPACE);
    Ok(Header {
        height,
        width,
        mcu_width: mcu_width(get(tj::TJPARAM_TJPARAM_SUBSAMP)),
        cmyk: colorspace == tj::TJCS_TJCS_CMYK as i32 || colorspace == tj::TJCS_TJCS_YCCK as i32,
        lossless: get(tj::TJPARAM_TJPARAM_LOSSLESS) == 1,
    })
}

/// The header of a JPEG stream.
pub(super) fn header(bytes: &[u8]) -> Result<Header> {
    with_handle(|h| read_header(h, bytes))
}

/// A decoded region: `height × width` RGBX pixels (four bytes each, the
/// fourth padding: the resize's fastest pixel), and where the asked box
/// lies in them (`x`, `y`, `w`, `h`, in the region's pixels, fractional
/// where the scale divides a box edge).
pub(super) struct Region {
    pub height: u32,
    pub width: u32,
    pub boxed: (f64, f64, f64, f64),
}

/// The scale `1/d` (`d` in 1, 2, 4, 8) that a box of `bh × bw` source
/// pixels can be decoded at while still giving at least `oh × ow` pixels.
pub(super) fn scale_for(bh: u32, bw: u32, oh: u32, ow: u32) -> u32 {
    let mut d = 1;
    while d < 8 && bh / (2 * d) >= oh && bw / (2 * d) >= ow {
        d *= 2;
    }
    d
}

/// Decodes the box `(y, x, h, w)` (source pixels) of `bytes` at scale
/// `1/d`, both chosen by `choose` from the source's height and width (read
/// from the header once), into `out` (RGBX, resized to fit), reading only
/// the rows and iMCU columns the box covers. A lossless JPEG is decoded
/// whole at full size (TurboJPEG neither scales nor crops those).
pub(super) fn decode_region(
    bytes: &[u8],
    choose: impl FnOnce(u32, u32) -> ((u32, u32, u32, u32), u32),
    out: &mut Vec<u8>,
) -> Result<Region> {
    with_handle(|h| {
        let hd = read_header(h, bytes)?;
        let ((by, bx, bh, bw), d) = choose(hd.height, hd.width);
        if by.saturating_add(bh) > hd.height
            || bx.saturating_add(bw) > hd.width
            || bh == 0
            || bw == 0
        {
            return Err(not_an_image(format!(
                "the box ({by}, {bx}, {bh}, {bw}) is not inside its {} × {} pixels",
                hd.height, hd.width
            )));
        }
        let d = if hd.lossless { 1 } else { d };
        let scaled = |v: u32| v.div_ceil(d);
        let (sh, sw) = (scaled(hd.height), scaled(hd.width));
        // The region: the box's rows and columns at the scale, its left edge
        // moved back to an iMCU column boundary.
        let (fx0, fy0) = (bx as f64 / d as f64, by as f64 / d as f64);
        let (fx1, fy1) = ((bx + bw) as f64 / d as f64, (by + bh) as f64 / d as f64);
        let (x0, y0) = (fx0.floor() as u32, fy0.floor() as u32);
        let (x1, y1) = ((fx1.ceil() as u32).min(sw), (fy1.ceil() as u32).min(sh));
        let crop = !hd.lossless && hd.mcu_width.is_some();
        let (rx, ry, rw, rh) = if crop {
            let step = hd.mcu_width.expect("checked").div_ceil(d);
            let rx = x0 / step * step;
            (rx, y0, x1 - rx, y1 - y0)
        } else {
            (0, 0, sw, sh)
        };
        // SAFETY: a live handle; the factor is one TurboJPEG lists.
        let rc = unsafe {
            tj::tj3SetScalingFactor(
                h,
                tj::tjscalingfactor {
                    num: 1,
                    denom: d as i32,
                },
            )
        };
        if rc != 0 {
            return Err(error_of(h));
        }
        let region = if crop {
            tj::tjregion {
                x: rx as i32,
                y: ry as i32,
                w: rw as i32,
                h: rh as i32,
            }
        } else {
            tj::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            }
        };
        // SAFETY: as above; the region lies in the scaled image.
        if unsafe { tj::tj3SetCroppingRegion(h, region) } != 0 {
            return Err(error_of(h));
        }
        let pixels = rw as usize * rh as usize;
        let format = if hd.cmyk {
            tj::TJPF_TJPF_CMYK
        } else {
            tj::TJPF_TJPF_RGBX
        };
        // Grown once per thread, never zeroed again: every byte below is
        // written by the decode.
        out.resize(pixels * 4, 0);
        // SAFETY: `out` holds rh rows of rw pixels of 4 bytes,
        // which is what TurboJPEG writes for this scale and region with a
        // pitch of 0 (rows packed); `bytes` outlives the call.
        let rc = unsafe {
            tj::tj3Decompress8(
                h,
                bytes.as_ptr(),
                bytes.len() as _,
                out.as_mut_ptr(),
                0,
                format,
            )
        };
        if rc != 0 {
            return Err(error_of(h));
        }
        if hd.cmyk {
            cmyk_to_rgbx(out);
        }
        Ok(Region {
            height: rh,
            width: rw,
            boxed: (fx0 - rx as f64, fy0 - ry as f64, fx1 - fx0, fy1 - fy0),
        })
    })
}

/// CMYK samples as libjpeg gives them (Adobe's inverted convention, as
/// PIL reads them too) to RGBX, in place, the way PIL converts them to RGB:
/// `R = C·K / 255`.
fn cmyk_to_rgbx(px: &mut [u8]) {
    for p in px.chunks_exact_mut(4) {
        let k = p[3] as u32;
        let mul = |a: u8| ((a as u32 * k + 127) / 255) as u8;
        (p[0], p[1], p[2], p[3]) = (mul(p[0]), mul(p[1]), mul(p[2]), 255);
    }
}
