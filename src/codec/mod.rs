//! The three record codecs and the per-thread zstd contexts ("lanes") that
//! compress and decompress records.
//!
//! Every record is an independent frame. Each thread keeps one compression
//! context, one decompression context and one staging buffer for its whole
//! life, so a gather or append never pays context setup per record. A
//! dictionary is immutable and shared by every thread.

use std::cell::RefCell;
use std::fmt;

use zstd::zstd_safe::{self, CCtx, DCtx};

pub mod dict;

pub use dict::Dictionary;

/// zstd level of the `zstd` codec.
pub const ZSTD_LEVEL: i32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Codec {
    Raw = 0,
    Zstd = 1,
    ZstdDict = 2,
}

impl Codec {
    pub const ALL: [Codec; 3] = [Codec::Raw, Codec::Zstd, Codec::ZstdDict];

    pub fn from_tag(tag: u8) -> Option<Codec> {
        match tag {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::ZstdDict),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Zstd => "zstd",
            Codec::ZstdDict => "zstd_dict",
        }
    }

    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL.into_iter().find(|c| c.name() == name)
    }

    pub fn is_compressed(self) -> bool {
        self != Codec::Raw
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One thread's reusable codec state.
struct Lane {
    cctx: Option<CCtx<'static>>,
    dctx: Option<DCtx<'static>>,
    /// Compressed bytes of the record being read.
    staging: Vec<u8>,
    /// Compressed frame of the record being written.
    frame: Vec<u8>,
}

thread_local! {
    static LANE: RefCell<Lane> = const {
        RefCell::new(Lane { cctx: None, dctx: None, staging: Vec::new(), frame: Vec::new() })
    };
}

fn zstd_error(code: usize) -> String {
    zstd_safe::get_error_name(code).to_string()
}

/// Records of at most this many bytes: zstd stores them as one raw block.
const TINY: usize = 8;

/// The frame zstd (level 3, no checksum, no dictionary) makes of a record
/// of at most [`TINY`] bytes, built directly: libzstd does not try to
/// compress below 7 bytes, stores literals this few as they are, and a
/// sequence could not save the two bytes it asks a block to gain, nor is a
/// first block ever run-length coded; so the frame is the magic number, a
/// single-segment header with a one-byte content size, and one last raw
/// block. Tested byte for byte against libzstd (`tiny_frames_are_zstds`).
/// For a column of 8-byte scalars this is most of the write's time saved.
#[inline]
fn tiny_frame(src: &[u8], out: &mut [u8; 9 + TINY]) -> usize {
    debug_assert!(src.len() <= TINY);
    let n = src.len();
    let head = raw_frame_header(n, out);
    out[head..head + 3].copy_from_slice(&raw_block_header(n, true));
    out[head + 3..head + 3 + n].copy_from_slice(src);
    head + 3 + n
}

/// Writes the head of a single-segment zstd frame of `n` bytes without a
/// checksum into `out`: the magic number, the frame header descriptor and
/// the content size in the fewest bytes the format allows (1, 2 or 4);
/// returns its length.
#[inline]
fn raw_frame_header(n: usize, out: &mut [u8]) -> usize {
    out[..4].copy_from_slice(&0xFD2F_B528u32.to_le_bytes());
    match n {
        0..=0xFF => {
            out[4] = 0x20; // single segment, one-byte content size
            out[5] = n as u8;
            6
        }
        0x100..=0x100FF => {
            out[4] = 0x60; // two bytes, holding the size minus 256
            out[5..7].copy_from_slice(&((n - 0x100) as u16).to_le_bytes());
            7
        }
        _ => {
            out[4] = 0xA0; // four bytes
            out[5..9].copy_from_slice(&(n as u32).to_le_bytes());
            9
        }
    }
}

/// The three-byte header of a raw block of `n` bytes, `last` or not.
#[inline]
fn raw_block_header(n: usize, last: bool) -> [u8; 3] {
    let block = u32::from(last) | ((n as u32) << 3);
    let b = block.to_le_bytes();
    [b[0], b[1], b[2]]
}

/// Compresses `src` with the calling thread's context into the thread's
/// output buffer and hands the frame to `f`. With `checksum` the frame
/// carries zstd's content checksum (XXH64), which every decoder verifies.
pub fn compress_with<R>(
    codec: Codec,
    dict: Option<&Dictionary>,
    checksum: bool,
    src: &[u8],
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, String> {
    if codec == Codec::Zstd && !checksum && src.len() <= TINY {
        let mut frame = [0u8; 9 + TINY];
        let n = tiny_frame(src, &mut frame);
        return Ok(f(&frame[..n]));
    }
    LANE.with(|lane| {
        let mut lane = lane.borrow_mut();
        let lane = &mut *lane;
        let out = &mut lane.frame;
        out.clear();
        out.reserve(zstd_safe::compress_bound(src.len()));
        let cctx = lane.cctx.get_or_insert_with(CCtx::create);
        let cdict = match (codec, dict) {
            (Codec::Zstd, _) => None,
            (Codec::ZstdDict, Some(d)) => match d.cdict() {
                Some(cdict) => Some(cdict),
                None => return Err("zstd cannot load the dictionary for compression".into()),
            },
            _ => return Err(format!("codec {codec} does not compress")),
        };
        let written = if checksum {
            // The one-shot calls below take no frame parameters: set them
            // on the context (reset first: the context is shared by every
            // store this thread writes).
            cctx.reset(zstd_safe::ResetDirective::SessionAndParameters)
                .map_err(zstd_error)?;
            cctx.set_parameter(zstd_safe::CParameter::ChecksumFlag(checksum))
                .map_err(zstd_error)?;
            match cdict {
                Some(cdict) => cctx.ref_cdict(cdict).map_err(zstd_error)?,
                None => cctx
                    .set_parameter(zstd_safe::CParameter::CompressionLevel(ZSTD_LEVEL))
                    .map_err(zstd_error)?,
            };
            let written = cctx.compress2(out, src);
            cctx.reset(zstd_safe::ResetDirective::SessionAndParameters)
                .map_err(zstd_error)?;
            written
        } else {
            match cdict {
                Some(cdict) => cctx.compress_using_cdict(out, src, cdict),
                None => cctx.compress(out, src, ZSTD_LEVEL),
            }
        };
        written.map_err(zstd_error)?;
        Ok(f(out))
    })
}

/// Whether a stored zstd frame (its first bytes) carries a content
/// checksum: bit 2 of the frame header descriptor after the magic number.
pub fn frame_has_checksum(head: &[u8]) -> bool {
    const MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
    head.len() >= 5 && head[..4] == MAGIC && head[4] & 0x04 != 0
}

/// Decodes one stored record held in memory (`src`, e.g. a slice of the
/// mapped data file) into `dst` of exactly its logical size. Inlined: a raw
/// record is one copy on the gather's per-record path.
#[inline]
pub fn decode_slice(
    codec: Codec,
    dict: Option<&Dictionary>,
    src: &[u8],
    dst: &mut [u8],
) -> Result<(), String> {
    if codec == Codec::Raw {
        if src.len() != dst.len() {
            return Err(raw_length_error(dst.len(), src.len()));
        }
        dst.copy_from_slice(src);
        return Ok(());
    }
    decode_frame(codec, dict, src, dst)
}

#[cold]
fn raw_length_error(logical: usize, stored: usize) -> String {
    format!("a raw record of {logical} bytes has a location of {stored} bytes")
}

/// [`decode_slice`] of a zstd frame.
fn decode_frame(
    codec: Codec,
    dict: Option<&Dictionary>,
    src: &[u8],
    dst: &mut [u8],
) -> Result<(), String> {
    LANE.with(|lane| {
        let mut lane = lane.borrow_mut();
        let dctx = lane.dctx.get_or_insert_with(DCtx::create);
        let result = match (codec, dict) {
            (Codec::Zstd, _) => dctx.decompress(dst, src),
            (Codec::ZstdDict, Some(d)) => dctx.decompress_using_ddict(dst, src, d.ddict()),
            _ => return Err(format!("codec {codec} has no dictionary")),
        };
        frame_result(result, dst.len())
    })
}

/// Decodes the zstd frame `src` (no dictionary) into `dst`'s spare
/// capacity with the calling thread's context; it must decode to exactly
/// `expected` bytes.
pub fn decode_into_buf<B: zstd_safe::WriteBuf + ?Sized>(
    src: &[u8],
    dst: &mut B,
    expected: usize,
) -> Result<(), String> {
    LANE.with(|lane| {
        let mut lane = lane.borrow_mut();
        let dctx = lane.dctx.get_or_insert_with(DCtx::create);
        frame_result(dctx.decompress(dst, src), expected)
    })
}

fn frame_result(result: Result<usize, usize>, expected: usize) -> Result<(), String> {
    match result {
        Ok(n) if n == expected => Ok(()),
        Ok(n) => Err(format!(
            "a frame decodes to {n} bytes, but its location records {expected}"
        )),
        Err(code) => Err(format!("zstd frame does not decode ({})", zstd_error(code))),
    }
}

/// Why a record could not be decoded.
pub enum DecodeError {
    /// Reading the stored bytes failed.
    Read(crate::Error),
    /// The stored bytes are not a valid frame of the record's size.
    Frame(String),
}

/// Decodes one stored record into `dst`, which must be exactly its logical
/// size. `read` fills the buffer it is given (the destination itself for raw
/// records, the thread's staging buffer otherwise) with the stored bytes.
pub fn decode_into(
    codec: Codec,
    dict: Option<&Dictionary>,
    phys_len: usize,
    dst: &mut [u8],
    read: impl FnOnce(&mut [u8]) -> crate::Result<()>,
) -> Result<(), DecodeError> {
    if codec == Codec::Raw {
        return read(dst).map_err(DecodeError::Read);
    }
    LANE.with(|lane| {
        let mut lane = lane.borrow_mut();
        let lane = &mut *lane;
        if lane.staging.len() < phys_len {
            lane.staging.resize(phys_len, 0);
        }
        let src = &mut lane.staging[..phys_len];
        read(src).map_err(DecodeError::Read)?;
        let dctx = lane.dctx.get_or_insert_with(DCtx::create);
        let result = match (codec, dict) {
            (Codec::Zstd, _) => dctx.decompress(dst, src),
            (Codec::ZstdDict, Some(d)) => dctx.decompress_using_ddict(dst, src, d.ddict()),
            _ => {
                return Err(DecodeError::Frame(format!(
                    "codec {codec} has no dictionary"
                )))
            }
        };
        frame_result(result, dst.len()).map_err(DecodeError::Frame)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What libzstd itself makes of `src` (the path records above
    /// [`TINY`] bytes take).
    fn libzstd(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(src.len()));
        CCtx::create().compress(&mut out, src, ZSTD_LEVEL).unwrap();
        out
    }

    #[test]
    fn tiny_frames_are_zstds() {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        for n in 0..=TINY {
            // Every byte value repeated, runs, counters, small integers.
            for b in 0..=255u8 {
                patterns.push(vec![b; n]);
            }
            patterns.push((0..n as u8).collect());
            patterns.push((0..n as u8).map(|i| i % 2).collect());
            patterns.push((0..n as u8).map(|i| i % 3 * 7).collect());
            for v in [
                1u64,
                3,
                255,
                256,
                65535,
                1 << 40,
                u64::MAX,
                0xABAB_ABAB_ABAB_ABAB,
            ] {
                patterns.push(v.to_le_bytes()[..n].to_vec());
            }
        }
        // And many pseudo-random ones of every length.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for k in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = k % (TINY + 1);
            // Low-entropy bytes too: values from a small alphabet.
            let alphabet = [2u64, 4, 256][k % 3];
            let bytes: Vec<u8> = (0..n).map(|i| ((x >> (i * 8)) % alphabet) as u8).collect();
            patterns.push(bytes);
        }
        for src in &patterns {
            let mut frame = [0u8; 9 + TINY];
            let n = tiny_frame(src, &mut frame);
            assert_eq!(&frame[..n], &libzstd(src)[..], "input {src:02x?}");
        }
        // Above the bound zstd does compress some inputs: the bound matters.
        let mut frame = [0u8; 9 + TINY];
        assert_ne!(libzstd(&[0u8; 16]).len(), 9 + 16);
        assert_eq!(tiny_frame(&[0u8; 8], &mut frame), 17);
        // compress_with takes the short path and gives the same frame.
        let got = compress_with(Codec::Zstd, None, false, &[7u8; 8], |f| f.to_vec()).unwrap();
        assert_eq!(got, libzstd(&[7u8; 8]));
        // With a checksum, the long path.
        let sum = compress_with(Codec::Zstd, None, true, &[7u8; 8], |f| f.to_vec()).unwrap();
        assert!(frame_has_checksum(&sum));
    }
}
