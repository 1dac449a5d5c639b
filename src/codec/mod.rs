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

/// The largest block a zstd frame holds (RFC 8878, Block_Maximum_Size).
const MAX_BLOCK: usize = 128 << 10;

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

/// Appends `src` (under 4 GiB) to `out` as a zstd frame of raw blocks:
/// decoding it is a copy. A stream made of several frames (some
/// compressed, some raw) decodes, with one call, to their concatenation.
pub fn raw_frame(src: &[u8], out: &mut Vec<u8>) {
    debug_assert!(src.len() <= u32::MAX as usize);
    let mut head = [0u8; 9];
    let n = raw_frame_header(src.len(), &mut head);
    out.reserve(raw_frame_len(src.len()));
    out.extend_from_slice(&head[..n]);
    if src.is_empty() {
        out.extend_from_slice(&raw_block_header(0, true));
        return;
    }
    let blocks = src.len().div_ceil(MAX_BLOCK);
    for (i, block) in src.chunks(MAX_BLOCK).enumerate() {
        out.extend_from_slice(&raw_block_header(block.len(), i + 1 == blocks));
        out.extend_from_slice(block);
    }
}

/// Stored bytes of [`raw_frame`] of `n` bytes: its head, a three-byte
/// header per block of at most 128 KiB (one for an empty record), and
/// the bytes.
#[inline]
pub fn raw_frame_len(n: usize) -> usize {
    let head = match n {
        0..=0xFF => 6,
        0x100..=0x100FF => 7,
        _ => 9,
    };
    head + 3 * n.div_ceil(MAX_BLOCK).max(1) + n
}

/// Whether a location of `phys` stored bytes for `logic` logical bytes has
/// the size of a frame of raw blocks (the frame's bytes tell for sure, see
/// [`raw_frame_content`]).
#[inline]
pub fn has_raw_frame_size(phys: u32, logic: u32) -> bool {
    phys as usize == raw_frame_len(logic as usize)
}

/// Whether `src` is exactly the frame [`raw_frame`] makes of `n` bytes
/// (as libzstd does of a record it cannot shrink: no checksum, no
/// dictionary id, single segment): its length, its head, and every block
/// header, checked against `src`'s length before anything is read.
#[inline]
pub fn is_raw_frame(src: &[u8], n: usize) -> bool {
    if src.len() != raw_frame_len(n) {
        return false;
    }
    let mut head = [0u8; 9];
    let h = raw_frame_header(n, &mut head);
    if src.get(..h) != Some(&head[..h]) {
        return false;
    }
    let blocks = n.div_ceil(MAX_BLOCK).max(1);
    let mut at = h;
    for b in 0..blocks {
        let len = (n - b * MAX_BLOCK).min(MAX_BLOCK);
        if src.get(at..at + 3) != Some(&raw_block_header(len, b + 1 == blocks)[..]) {
            return false;
        }
        at += 3 + len;
    }
    at == src.len()
}

/// [`is_raw_frame`] of a stored frame of [`raw_frame_len`]`(n)` bytes read
/// piecewise: `read(at, buf)` fills `buf` with the frame's bytes from `at`
/// (false when it cannot); only the head and the block headers are read.
pub fn is_raw_frame_read(n: usize, mut read: impl FnMut(usize, &mut [u8]) -> bool) -> bool {
    let mut want = [0u8; 9];
    let h = raw_frame_header(n, &mut want);
    let mut got = [0u8; 9];
    if !read(0, &mut got[..h]) || got[..h] != want[..h] {
        return false;
    }
    let blocks = n.div_ceil(MAX_BLOCK).max(1);
    let mut at = h;
    for b in 0..blocks {
        let len = (n - b * MAX_BLOCK).min(MAX_BLOCK);
        let mut head = [0u8; 3];
        if !read(at, &mut head) || head != raw_block_header(len, b + 1 == blocks) {
            return false;
        }
        at += 3 + len;
    }
    true
}

/// Copies the content of a frame of raw blocks of exactly `dst.len()`
/// bytes into `dst`, no decoder involved; false (and `dst` untouched)
/// when `src` is not one.
#[inline]
pub fn copy_raw_frame(src: &[u8], dst: &mut [u8]) -> bool {
    let n = dst.len();
    if !is_raw_frame(src, n) {
        return false;
    }
    let h = raw_frame_len(n) - n - 3 * n.div_ceil(MAX_BLOCK).max(1);
    if n <= MAX_BLOCK {
        dst.copy_from_slice(&src[h + 3..]);
        return true;
    }
    let mut at = h;
    for out in dst.chunks_mut(MAX_BLOCK) {
        out.copy_from_slice(&src[at + 3..at + 3 + out.len()]);
        at += 3 + out.len();
    }
    true
}

/// Whether a record of `logic` bytes that zstd compressed to `frame`
/// bytes pays for its decoding: the frame is smaller than the record's
/// frame of raw blocks ([`raw_frame_len`]) by at least a sixteenth of the
/// record (so a small record whose frame beats the raw one by less keeps
/// the raw one, and one whose frame is much smaller stays compressed).
#[inline]
pub fn pays(logic: usize, frame: usize) -> bool {
    let raw = raw_frame_len(logic);
    frame < raw && 16 * (raw - frame) >= logic
}

/// Records a zstd store compresses fully between two checks while its
/// records do not pay: every record whose index is a multiple of this is
/// compressed, so content that turns compressible is noticed.
pub const RECHECK_EVERY: u64 = 64;

/// Consecutive records that do not pay before a store stops compressing
/// (but for the checks of [`RECHECK_EVERY`]): one odd record among
/// compressible ones changes nothing.
pub const MISSES_TO_SKIP: u32 = 4;

/// The write path's running verdict on whether zstd pays for a store's
/// records (see [`encode_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Records compressed fully in a row that did not pay.
    misses: u32,
}

impl Verdict {
    /// Whether records are stored raw without compressing them first.
    pub fn skips(self) -> bool {
        self.misses >= MISSES_TO_SKIP
    }
}

/// Encodes record `index` of a store (`src`) as the frame it is stored
/// as and hands it to `f`: the codec's output when it saves at least a
/// sixteenth ([`pays`]), else a frame of raw blocks ([`raw_frame`]), which
/// reads as a copy. While records do not pay (`verdict`), only every
/// [`RECHECK_EVERY`]th record is compressed, to check. Frames with a
/// checksum are always libzstd's (a raw frame carries none).
pub fn encode_with<R>(
    codec: Codec,
    dict: Option<&Dictionary>,
    checksum: bool,
    verdict: &mut Verdict,
    index: u64,
    src: &[u8],
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, String> {
    if checksum || (codec == Codec::Zstd && src.len() <= TINY) {
        return compress_with(codec, dict, checksum, src, f);
    }
    if verdict.skips() && !index.is_multiple_of(RECHECK_EVERY) {
        return Ok(with_raw_frame(src, f));
    }
    let mut f = Some(f);
    let kept = compress_with(codec, dict, false, src, |frame| {
        if pays(src.len(), frame.len()) {
            f.take().map(|f| f(frame))
        } else {
            None
        }
    })?;
    if let Some(r) = kept {
        verdict.misses = 0;
        return Ok(r);
    }
    verdict.misses = verdict.misses.saturating_add(1);
    // `f` is untouched when the frame did not pay; called here, outside
    // the lane the compression borrowed.
    f.map(|f| with_raw_frame(src, f))
        .ok_or_else(|| "the frame was handed on and not kept".to_string())
}

/// Builds the raw frame of `src` in the thread's frame buffer and hands it to `f`.
fn with_raw_frame<R>(src: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    LANE.with(|lane| {
        let mut lane = lane.borrow_mut();
        let out = &mut lane.frame;
        out.clear();
        raw_frame(src, out);
        f(out)
    })
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
    // A record zstd did not pay for: its bytes are in the frame as they are.
    if copy_raw_frame(src, dst) {
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
        if copy_raw_frame(src, dst) {
            return Ok(());
        }
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

    /// Pseudo-random bytes (xorshift): what zstd cannot shrink.
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn raw_frames_decode_to_their_bytes_and_concatenate() {
        let sizes = [
            0usize,
            1,
            8,
            9,
            255,
            256,
            0x100FF,
            0x10100,
            MAX_BLOCK,
            MAX_BLOCK + 1,
            300_001,
        ];
        let mut stream = Vec::new();
        let mut whole = Vec::new();
        for (k, &n) in sizes.iter().enumerate() {
            let src: Vec<u8> = (0..n).map(|i| (i * 31 + k) as u8).collect();
            let mut frame = Vec::new();
            raw_frame(&src, &mut frame);
            // Raw: its head and block headers beside the bytes.
            assert_eq!(
                frame.len(),
                src.len()
                    + [6, 7, 9][(n > 0xFF) as usize + (n > 0x100FF) as usize]
                    + 3 * n.div_ceil(MAX_BLOCK).max(1)
            );
            assert_eq!(frame.len(), raw_frame_len(n));
            assert!(is_raw_frame(&frame, n), "{n} bytes");
            let mut out = Vec::with_capacity(n);
            decode_into_buf(&frame, &mut out, n).unwrap();
            assert_eq!(out, src, "{n} bytes");
            // The copy reads what libzstd reads.
            let mut copied = vec![0xEEu8; n];
            assert!(copy_raw_frame(&frame, &mut copied));
            assert_eq!(copied, src, "{n} bytes");
            if n <= TINY {
                let mut tiny = [0u8; 9 + TINY];
                let t = tiny_frame(&src, &mut tiny);
                assert_eq!(&tiny[..t], &frame[..]);
            }
            // A compressed frame between raw ones.
            stream.extend_from_slice(&frame);
            compress_with(Codec::Zstd, None, false, &vec![k as u8; 1000], |f| {
                stream.extend_from_slice(f)
            })
            .unwrap();
            whole.extend_from_slice(&src);
            whole.extend_from_slice(&vec![k as u8; 1000]);
        }
        let mut out = Vec::with_capacity(whole.len());
        decode_into_buf(&stream, &mut out, whole.len()).unwrap();
        assert!(out == whole);
    }

    #[test]
    fn libzstd_stores_noise_as_the_same_raw_frame() {
        for n in [
            9usize, 100, 255, 256, 768, 4096, 0x100FF, 0x10100, MAX_BLOCK, 300_001,
        ] {
            let src = noise(n, n as u64);
            let mut frame = Vec::new();
            raw_frame(&src, &mut frame);
            assert_eq!(libzstd(&src), frame, "{n} bytes");
        }
    }

    #[test]
    fn only_exact_raw_frames_are_copied() {
        let src = noise(300_001, 7);
        let mut frame = Vec::new();
        raw_frame(&src, &mut frame);
        let mut dst = vec![0u8; src.len()];
        // Wrong logical size, truncated, one byte too many.
        assert!(!copy_raw_frame(&frame, &mut dst[..300_000]));
        assert!(!copy_raw_frame(&frame[..frame.len() - 1], &mut dst));
        let mut longer = frame.clone();
        longer.push(0);
        assert!(!copy_raw_frame(&longer, &mut dst));
        // Any changed byte of the head or of a block header.
        let heads = [0usize, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
        let second = 9 + 3 + MAX_BLOCK;
        for at in heads.into_iter().chain(second..second + 3) {
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[at] ^= 1 << bit;
                assert!(!copy_raw_frame(&bad, &mut dst), "byte {at} bit {bit}");
            }
        }
        assert!(dst.iter().all(|&b| b == 0), "nothing copied");
        // A compressed frame is not raw, and a checksummed one neither.
        let c = libzstd(&vec![3u8; 5000]);
        assert!(!is_raw_frame(&c, 5000));
        let sum = compress_with(Codec::Zstd, None, true, &src[..5000], |f| f.to_vec()).unwrap();
        assert!(!is_raw_frame(&sum, 5000));
        // Random garbage of every short length never panics.
        for n in 0..64 {
            for len in 0..40 {
                let g = noise(len, (n * 64 + len) as u64);
                let mut d = vec![0u8; n];
                let _ = copy_raw_frame(&g, &mut d);
            }
        }
    }

    #[test]
    fn records_that_do_not_pay_are_stored_raw() {
        let mut v = Verdict::default();
        let enc = |v: &mut Verdict, i: u64, src: &[u8]| {
            encode_with(Codec::Zstd, None, false, v, i, src, |f| f.to_vec()).unwrap()
        };
        // Compressible: zstd's frame.
        let text = b"the quick brown fox jumps over the lazy dog ".repeat(20);
        assert_eq!(enc(&mut v, 0, &text), libzstd(&text));
        assert!(!v.skips());
        // Noise: raw, and after a few the store stops compressing.
        for i in 1..=MISSES_TO_SKIP as u64 {
            let f = enc(&mut v, i, &noise(768, i));
            assert!(is_raw_frame(&f, 768));
        }
        assert!(v.skips());
        // Skipping: compressible records are stored raw too, but for the
        // checks, which notice them and resume compressing.
        let f = enc(&mut v, RECHECK_EVERY + 1, &text);
        assert!(is_raw_frame(&f, text.len()));
        assert!(v.skips());
        let f = enc(&mut v, 2 * RECHECK_EVERY, &text);
        assert_eq!(f, libzstd(&text));
        assert!(!v.skips());
        // A frame that saves just under a sixteenth is raw; the boundary.
        // (1600 bytes: a raw frame of 1610.)
        assert!(pays(1600, 1510) && !pays(1600, 1511) && !pays(10, 19) && pays(10, 18));
        // With checksums, always libzstd's frame.
        let mut v = Verdict { misses: 99 };
        let f = encode_with(Codec::Zstd, None, true, &mut v, 1, &noise(768, 1), |f| {
            f.to_vec()
        })
        .unwrap();
        assert!(frame_has_checksum(&f));
    }
}
