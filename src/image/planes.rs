//! The last step of every decoded image: the resized box, rows of
//! interleaved pixels (RGB, or RGBX as the JPEG decoder writes them), to the
//! output's layout, each row mirrored or not: the three planes of CHW, or
//! the RGB rows of HWC. Sixteen pixels at a time with byte shuffles where
//! the CPU has SSSE3 (every x86-64 CPU since 2006, checked once per call),
//! one sample at a time elsewhere and for a row's last `width % 16`.

/// Pixels handled per step.
const N: usize = 16;

/// Where output sample `j` (of `outs` outputs of 16 bytes each, 16 pixels'
/// worth) comes from in 16 input pixels of `stride` bytes: for CHW output
/// `o` is channel `o` of pixel `j`; for HWC, byte `16 o + j` of the 48
/// bytes of 16 RGB pixels. Mirrored if `flip`.
fn source(chw: bool, stride: usize, flip: bool, o: usize, j: usize) -> usize {
    let (k, ch) = if chw {
        (j, o)
    } else {
        ((16 * o + j) / 3, (16 * o + j) % 3)
    };
    stride * if flip { N - 1 - k } else { k } + ch
}

/// Splits `src` (rows of `width` pixels of `stride` bytes, RGB first) into
/// the planes `r`, `g`, `b` (rows of `width` samples), each row mirrored if
/// `flip`.
pub(super) fn to_chw(src: &[u8], width: usize, stride: usize, flip: bool, planes: [&mut [u8]; 3]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3, checked just above.
        return unsafe { ssse3::to_chw(src, width, stride, flip, planes) };
    }
    let [r, g, b] = planes;
    for (((r, g), b), row) in chw_rows(src, width, stride, [r, g, b]) {
        chw_tail(row, width, stride, flip, [r, g, b], 0);
    }
}

/// `src` (rows of `width` pixels of `stride` bytes, RGB first) as RGB rows
/// into `out`, each row mirrored if `flip`.
pub(super) fn to_hwc(src: &[u8], width: usize, stride: usize, flip: bool, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU has SSSE3, checked just above.
        return unsafe { ssse3::to_hwc(src, width, stride, flip, out) };
    }
    for (row_out, row) in out
        .chunks_exact_mut(width * 3)
        .zip(src.chunks_exact(width * stride))
    {
        hwc_tail(row, width, stride, flip, row_out, 0);
    }
}

type ChwRow<'a> = (((&'a mut [u8], &'a mut [u8]), &'a mut [u8]), &'a [u8]);

fn chw_rows<'a>(
    src: &'a [u8],
    width: usize,
    stride: usize,
    [r, g, b]: [&'a mut [u8]; 3],
) -> impl Iterator<Item = ChwRow<'a>> {
    r.chunks_exact_mut(width)
        .zip(g.chunks_exact_mut(width))
        .zip(b.chunks_exact_mut(width))
        .zip(src.chunks_exact(width * stride))
}

/// Pixel `j` of the output row: pixel `j` or `width - 1 - j` of the input.
fn input_pixel(width: usize, flip: bool, j: usize) -> usize {
    if flip {
        width - 1 - j
    } else {
        j
    }
}

fn chw_tail(
    row: &[u8],
    width: usize,
    stride: usize,
    flip: bool,
    [r, g, b]: [&mut [u8]; 3],
    from: usize,
) {
    for j in from..width {
        let p = stride * input_pixel(width, flip, j);
        (r[j], g[j], b[j]) = (row[p], row[p + 1], row[p + 2]);
    }
}

fn hwc_tail(row: &[u8], width: usize, stride: usize, flip: bool, out: &mut [u8], from: usize) {
    for j in from..width {
        let p = stride * input_pixel(width, flip, j);
        out[3 * j..3 * j + 3].copy_from_slice(&row[p..p + 3]);
    }
}

#[cfg(target_arch = "x86_64")]
mod ssse3 {
    use super::*;
    use std::arch::x86_64::*;

    /// The `pshufb` masks that make output `o` from input vector `v` (16
    /// bytes each): `masks[o][v]`, 0x80 (zero) where the byte comes from
    /// another input vector; OR-ing the shuffles of every `v` gives `o`.
    #[target_feature(enable = "ssse3")]
    fn masks(chw: bool, stride: usize, flip: bool) -> [[__m128i; 4]; 3] {
        std::array::from_fn(|o| {
            std::array::from_fn(|v| {
                let m: [u8; 16] = std::array::from_fn(|j| {
                    let at = source(chw, stride, flip, o, j);
                    if at / 16 == v {
                        (at % 16) as u8
                    } else {
                        0x80
                    }
                });
                // SAFETY: an unaligned 16-byte load of a 16-byte array.
                unsafe { _mm_loadu_si128(m.as_ptr().cast()) }
            })
        })
    }

    /// Output `o` of 16 pixels at `px` (`16 * stride` bytes readable).
    ///
    /// # Safety
    /// `px` must point at `16 * stride` readable bytes (`stride` 3 or 4).
    #[inline]
    #[target_feature(enable = "ssse3")]
    unsafe fn gather(px: *const u8, stride: usize, m: &[__m128i; 4]) -> __m128i {
        // SAFETY: `stride` vectors of 16 bytes are readable (the caller's).
        unsafe {
            let mut acc = _mm_or_si128(
                _mm_shuffle_epi8(_mm_loadu_si128(px.cast()), m[0]),
                _mm_shuffle_epi8(_mm_loadu_si128(px.add(16).cast()), m[1]),
            );
            acc = _mm_or_si128(
                acc,
                _mm_shuffle_epi8(_mm_loadu_si128(px.add(32).cast()), m[2]),
            );
            if stride == 4 {
                acc = _mm_or_si128(
                    acc,
                    _mm_shuffle_epi8(_mm_loadu_si128(px.add(48).cast()), m[3]),
                );
            }
            acc
        }
    }

    /// The input pixels behind output pixels `c..c + 16` of a row.
    fn chunk(row: &[u8], width: usize, stride: usize, flip: bool, c: usize) -> &[u8] {
        let at = stride * if flip { width - c - N } else { c };
        &row[at..at + stride * N]
    }

    /// [`super::to_chw`] sixteen pixels at a time.
    ///
    /// # Safety
    /// The CPU must support SSSE3.
    #[target_feature(enable = "ssse3")]
    pub(super) unsafe fn to_chw(
        src: &[u8],
        width: usize,
        stride: usize,
        flip: bool,
        planes: [&mut [u8]; 3],
    ) {
        assert!(stride == 3 || stride == 4, "RGB or RGBX pixels");
        let m = masks(true, stride, flip);
        let whole = width / N * N;
        for (((r, g), b), row) in chw_rows(src, width, stride, planes) {
            for c in (0..whole).step_by(N) {
                let px = chunk(row, width, stride, flip, c).as_ptr();
                for (o, plane) in [&mut *r, &mut *g, &mut *b].into_iter().enumerate() {
                    let dst = &mut plane[c..c + N];
                    // SAFETY: `chunk` is 16 pixels of `stride` bytes; `dst`
                    // is 16 bytes (c + 16 <= whole <= width).
                    unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), gather(px, stride, &m[o])) };
                }
            }
            chw_tail(row, width, stride, flip, [r, g, b], whole);
        }
    }

    /// [`super::to_hwc`] sixteen pixels at a time.
    ///
    /// # Safety
    /// The CPU must support SSSE3.
    #[target_feature(enable = "ssse3")]
    pub(super) unsafe fn to_hwc(
        src: &[u8],
        width: usize,
        stride: usize,
        flip: bool,
        out: &mut [u8],
    ) {
        assert!(stride == 3 || stride == 4, "RGB or RGBX pixels");
        let m = masks(false, stride, flip);
        let whole = width / N * N;
        for (row_out, row) in out
            .chunks_exact_mut(width * 3)
            .zip(src.chunks_exact(width * stride))
        {
            for c in (0..whole).step_by(N) {
                let px = chunk(row, width, stride, flip, c).as_ptr();
                for (o, m) in m.iter().enumerate() {
                    let dst = &mut row_out[3 * c + 16 * o..3 * c + 16 * o + 16];
                    // SAFETY: as in `to_chw`; `dst` is 16 bytes of the row
                    // (3 (c + 16) <= 3 width).
                    unsafe { _mm_storeu_si128(dst.as_mut_ptr().cast(), gather(px, stride, m)) };
                }
            }
            hwc_tail(row, width, stride, flip, row_out, whole);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts against the per-sample definition, for widths below,
    /// at and off the step, RGB and RGBX input, mirrored and not (on this
    /// CPU's path and on the one-sample-at-a-time path).
    #[test]
    fn layouts_match_the_per_sample_definition() {
        for width in [1, 5, 15, 16, 17, 33, 224] {
            for stride in [3, 4] {
                for flip in [false, true] {
                    let height = 3;
                    let src: Vec<u8> = (0..height * width * stride)
                        .map(|i| (i * 7 % 251) as u8)
                        .collect();
                    let want = |y: usize, x: usize, c: usize| {
                        src[(y * width + input_pixel(width, flip, x)) * stride + c]
                    };
                    let plane = height * width;
                    let mut chw = vec![0u8; 3 * plane];
                    let mut tail = vec![0u8; 3 * plane];
                    {
                        let (r, rest) = chw.split_at_mut(plane);
                        let (g, b) = rest.split_at_mut(plane);
                        to_chw(&src, width, stride, flip, [r, g, b]);
                        let (r, rest) = tail.split_at_mut(plane);
                        let (g, b) = rest.split_at_mut(plane);
                        for (((r, g), b), row) in chw_rows(&src, width, stride, [r, g, b]) {
                            chw_tail(row, width, stride, flip, [r, g, b], 0);
                        }
                    }
                    let mut hwc = vec![0u8; 3 * plane];
                    to_hwc(&src, width, stride, flip, &mut hwc);
                    let mut hwc_tail_only = vec![0u8; 3 * plane];
                    for (o, row) in hwc_tail_only
                        .chunks_exact_mut(width * 3)
                        .zip(src.chunks_exact(width * stride))
                    {
                        hwc_tail(row, width, stride, flip, o, 0);
                    }
                    for y in 0..height {
                        for x in 0..width {
                            for c in 0..3 {
                                let at = format!(
                                    "width {width} stride {stride} flip {flip} ({y}, {x}, {c})"
                                );
                                assert_eq!(
                                    chw[c * plane + y * width + x],
                                    want(y, x, c),
                                    "CHW {at}"
                                );
                                assert_eq!(
                                    tail[c * plane + y * width + x],
                                    want(y, x, c),
                                    "CHW per sample {at}"
                                );
                                assert_eq!(hwc[(y * width + x) * 3 + c], want(y, x, c), "HWC {at}");
                                assert_eq!(
                                    hwc_tail_only[(y * width + x) * 3 + c],
                                    want(y, x, c),
                                    "HWC per sample {at}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
