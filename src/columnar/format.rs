//! The bytes of `column.zc`: the file header, the footer that indexes the
//! chunks, and each chunk's entry with its checksum and statistics (see
//! `docs/format.md`, "Columnar columns").
//!
//! ```text
//! 0        8          magic "LXCOLUMN"
//! 8        ..         chunks, back to back, in row order
//! D        S          version 3, text and bytes: the symbol table (S bytes)
//! F        32 + 96 n  footer: header, then one entry per chunk
//! end-16   4          footer_len u32 (= 32 + 96 n)
//! end-12   4          CRC-32 (IEEE) of the footer
//! end-8    8          magic "LXCOLEND"
//! ```

use crate::schema::DType;

/// The file's first eight bytes.
pub const MAGIC: &[u8; 8] = b"LXCOLUMN";
/// The file's last eight bytes.
pub const END_MAGIC: &[u8; 8] = b"LXCOLEND";
/// The name of a columnar column's one file, inside the column's directory.
pub const COLUMN_FILE: &str = "column.zc";
/// The format version this release writes: every stream raw, read in
/// place by a random read (see `docs/format.md`, "Random access").
/// Versions 1 (zstd streams) and 2 (packed chunks) are still read.
pub const VERSION: u8 = 3;
/// Bytes of a checksummed block of a version 3 chunk: a random read checks
/// the blocks it touches, each once per process.
pub const BLOCK: usize = 4096;
/// Rows of a group of a version 3 text chunk: a random read finds a value
/// from its group's start, summing at most `GROUP - 1` lengths.
pub const GROUP: usize = 64;
/// The number of [`BLOCK`]-aligned blocks of a file that bytes
/// `at..at + n` overlap (0 for none).
pub fn blocks_of(at: u64, n: u64) -> u64 {
    match n {
        0 => 0,
        _ => (at + n - 1) / BLOCK as u64 - at / BLOCK as u64 + 1,
    }
}

/// The CRC-32 of each [`BLOCK`]-aligned block of the file that `bytes`
/// (at file offset `at`) overlap, over its part of `bytes`.
pub fn block_crcs(at: u64, bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    let first = (BLOCK - (at % BLOCK as u64) as usize).min(bytes.len());
    let (head, rest) = bytes.split_at(first);
    std::iter::once(head)
        .filter(|h| !h.is_empty())
        .chain(rest.chunks(BLOCK))
        .map(crc32fast::hash)
}

/// The most bytes of a symbol table (one count, the lengths, 8 bytes a
/// symbol).
pub const MAX_SYMBOLS_LEN: usize = 1 + 255 * 9;
/// Bytes of the footer's header.
pub const HEADER_LEN: usize = 32;
/// Bytes of one chunk entry.
pub const ENTRY_LEN: usize = 96;
/// Bytes of the trailer (footer length, footer CRC, end magic).
pub const TRAILER_LEN: usize = 16;
/// The most rows a chunk may hold (writers cut at 64 Ki rows).
pub const MAX_CHUNK_ROWS: u32 = 1 << 20;
/// The most a zstd frame decodes to per stored byte (4 bytes hold a
/// 128 KiB run-length block): a larger claim is corrupt, and refusing it
/// bounds what a damaged file can make a reader allocate.
const MAX_RATIO: u64 = 32768;

/// Bytes of one statistics bound.
pub const BOUND_LEN: usize = 24;
/// Bytes a bound holds (a text value's prefix, or a number's 8 bytes).
pub const BOUND_DATA: usize = BOUND_LEN - 2;

/// What a column's values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// Numbers or booleans of a dtype, one per row.
    Fixed(DType),
    /// UTF-8 text, one value per row.
    Utf8,
    /// Bytes, one value per row.
    Binary,
}

impl ValueKind {
    pub(crate) fn tag(self) -> u8 {
        match self {
            ValueKind::Fixed(_) => 0,
            ValueKind::Utf8 => 1,
            ValueKind::Binary => 2,
        }
    }

    /// The dtype byte: a fixed column's dtype, `uint8` for text and bytes.
    pub(crate) fn dtype(self) -> DType {
        match self {
            ValueKind::Fixed(d) => d,
            ValueKind::Utf8 | ValueKind::Binary => DType::U8,
        }
    }

    pub fn is_bytes(self) -> bool {
        !matches!(self, ValueKind::Fixed(_))
    }

    pub(crate) fn from_tags(kind: u8, dtype: u8) -> Option<ValueKind> {
        let d = *DType::ALL.get(dtype as usize)?;
        match kind {
            0 => Some(ValueKind::Fixed(d)),
            1 if d == DType::U8 => Some(ValueKind::Utf8),
            2 if d == DType::U8 => Some(ValueKind::Binary),
            _ => None,
        }
    }
}

/// The dtype's code in the header: its place in [`DType::ALL`].
pub(crate) fn dtype_code(d: DType) -> u8 {
    DType::ALL
        .iter()
        .position(|&x| x == d)
        .expect("every dtype is listed") as u8
}

/// How a chunk's values stream is laid out (entry byte 40).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// The values as they are (little-endian, the dtype's width), or the
    /// value bytes of a text or bytes column.
    Plain = 0,
    /// The values' bytes transposed: every value's byte 0, then every
    /// value's byte 1, ... (a byte shuffle, which zstd compresses better).
    Shuffled = 1,
    /// Integers minus the chunk's minimum as unsigned integers of the
    /// entry's width (1, 2 or 4 bytes; fewer than the dtype's), shuffled
    /// when wider than one byte.
    Narrowed = 2,
    /// Booleans, one bit each, least significant bit first (Arrow's order).
    Bits = 3,
    /// Integers minus the chunk's minimum packed at the entry's width in
    /// bits (1 to 32; fewer than the dtype's), value `i` at bits
    /// `i * width ..`, least significant bit first.
    Packed = 4,
    /// Version 3 text and bytes: groups of [`GROUP`] rows, each its rows'
    /// lengths packed at the entry's width in bits, then their codes (the
    /// file's symbol table's, or the bytes themselves without one); the
    /// index stream holds every group's start.
    Grouped = 5,
}

impl Encoding {
    fn from_tag(t: u8) -> Option<Encoding> {
        Some(match t {
            0 => Encoding::Plain,
            1 => Encoding::Shuffled,
            2 => Encoding::Narrowed,
            3 => Encoding::Bits,
            4 => Encoding::Packed,
            5 => Encoding::Grouped,
            _ => return None,
        })
    }
}

/// A statistics bound: a number's 8 bytes, or a prefix of a text or bytes
/// value (`exact` when it is the whole value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bound {
    pub len: u8,
    pub exact: bool,
    pub data: [u8; BOUND_DATA],
}

impl Bound {
    pub fn bytes(&self) -> &[u8] {
        &self.data[..self.len as usize]
    }

    /// A number's bound (8 bytes: i64, u64 or f64 by the column's dtype).
    pub fn number(v: [u8; 8]) -> Bound {
        let mut data = [0u8; BOUND_DATA];
        data[..8].copy_from_slice(&v);
        Bound {
            len: 8,
            exact: true,
            data,
        }
    }

    /// The 8 bytes of a number's bound.
    pub fn number_bytes(&self) -> [u8; 8] {
        self.data[..8].try_into().expect("8 bytes")
    }

    /// A lower bound of the values, from the smallest: its first bytes.
    pub fn lower(v: &[u8]) -> Bound {
        let n = v.len().min(BOUND_DATA);
        let mut data = [0u8; BOUND_DATA];
        data[..n].copy_from_slice(&v[..n]);
        Bound {
            len: n as u8,
            exact: n == v.len(),
            data,
        }
    }

    /// An upper bound of the values, from the largest: the value itself
    /// when it fits, else its first bytes with the last byte below 0xFF
    /// raised by one (and what follows dropped). None when no prefix can
    /// be raised (every byte 0xFF).
    pub fn upper(v: &[u8]) -> Option<Bound> {
        if v.len() <= BOUND_DATA {
            return Some(Bound::lower(v));
        }
        let mut prefix = v[..BOUND_DATA].to_vec();
        while let Some(last) = prefix.pop() {
            if last < 0xFF {
                prefix.push(last + 1);
                let mut b = Bound::lower(&prefix);
                b.exact = false;
                return Some(b);
            }
        }
        None
    }

    fn write(&self, out: &mut [u8]) {
        out[0] = self.len;
        out[1] = u8::from(self.exact);
        out[2..BOUND_LEN].copy_from_slice(&self.data);
    }

    fn read(b: &[u8]) -> Option<Bound> {
        let len = b[0];
        if len as usize > BOUND_DATA || b[1] > 1 {
            return None;
        }
        let data: [u8; BOUND_DATA] = b[2..BOUND_LEN].try_into().ok()?;
        if data[len as usize..].iter().any(|&x| x != 0) {
            return None;
        }
        Some(Bound {
            len,
            exact: b[1] == 1,
            data,
        })
    }
}

/// Entry flag bits (byte 43).
pub const FLAG_VALIDITY_ZSTD: u8 = 1;
pub const FLAG_VALUES_ZSTD: u8 = 2;
pub const FLAG_LENGTHS_ZSTD: u8 = 4;
pub const FLAG_MIN: u8 = 8;
pub const FLAG_MAX: u8 = 16;
const FLAGS_KNOWN: u8 = 31;

/// One chunk's entry in the footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Entry {
    /// Where its stored bytes start in the file.
    pub offset: u64,
    pub rows: u32,
    pub null_count: u32,
    /// CRC-32 (IEEE) of its stored bytes.
    pub crc: u32,
    /// Stored bytes of its three streams, in this order in the file (in
    /// version 3 the third is the index: text's group starts, then the
    /// CRC-32 of every [`BLOCK`] of the bytes before the CRCs).
    pub validity_len: u32,
    pub values_len: u32,
    pub lengths_len: u32,
    /// Decoded bytes of the values and lengths streams.
    pub values_size: u32,
    pub lengths_size: u32,
    pub encoding: u8,
    /// Bytes per stored value (the narrowed width, the dtype's, 0 for bits
    /// and for text or bytes); bits per value when packed.
    pub width: u8,
    /// Bytes per stored length (text and bytes: 1, 2 or 4; else 0).
    pub lengths_width: u8,
    pub flags: u8,
    /// Version 3 text and bytes: the values' bytes once decoded (their
    /// codes take `values_size` with the group lengths); else 0.
    pub text_size: u32,
    pub min: Bound,
    pub max: Bound,
}

impl Entry {
    /// Stored bytes of the chunk.
    pub fn stored_len(&self) -> u64 {
        self.validity_len as u64 + self.values_len as u64 + self.lengths_len as u64
    }

    /// Bytes of the values once decoded (text: their bytes end to end).
    pub fn decoded_size(&self) -> u32 {
        match self.encoding() {
            Encoding::Grouped => self.text_size,
            _ => self.values_size,
        }
    }

    /// Version 3: the groups of a text chunk.
    pub fn groups(&self) -> usize {
        (self.rows as usize).div_ceil(GROUP)
    }

    /// Version 3: bytes of the chunk the block checksums cover (everything
    /// but the checksums), and the number of blocks: the file's
    /// [`BLOCK`]-aligned blocks those bytes overlap, so that checking the
    /// block of a value read at random reads one page of the file.
    pub fn checked_len(&self, kind: ValueKind) -> (u64, u64) {
        let starts = match kind {
            ValueKind::Fixed(_) => 0,
            _ => 4 * (self.groups() as u64 + 1),
        };
        let n = self.validity_len as u64 + self.values_len as u64 + starts;
        (n, blocks_of(self.offset, n))
    }

    pub fn encoding(&self) -> Encoding {
        Encoding::from_tag(self.encoding).expect("checked when the footer was read")
    }

    pub fn min(&self) -> Option<&Bound> {
        (self.flags & FLAG_MIN != 0).then_some(&self.min)
    }

    pub fn max(&self) -> Option<&Bound> {
        (self.flags & FLAG_MAX != 0).then_some(&self.max)
    }

    fn write(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.rows.to_le_bytes());
        out[12..16].copy_from_slice(&self.null_count.to_le_bytes());
        out[16..20].copy_from_slice(&self.crc.to_le_bytes());
        out[20..24].copy_from_slice(&self.validity_len.to_le_bytes());
        out[24..28].copy_from_slice(&self.values_len.to_le_bytes());
        out[28..32].copy_from_slice(&self.lengths_len.to_le_bytes());
        out[32..36].copy_from_slice(&self.values_size.to_le_bytes());
        out[36..40].copy_from_slice(&self.lengths_size.to_le_bytes());
        out[40] = self.encoding;
        out[41] = self.width;
        out[42] = self.lengths_width;
        out[43] = self.flags;
        out[44..48].copy_from_slice(&self.text_size.to_le_bytes());
        self.min.write(&mut out[48..48 + BOUND_LEN]);
        self.max.write(&mut out[72..72 + BOUND_LEN]);
    }

    fn read(b: &[u8]) -> Option<Entry> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        if b[43] & !FLAGS_KNOWN != 0 {
            return None;
        }
        Encoding::from_tag(b[40])?;
        Some(Entry {
            offset: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            rows: u32_at(8),
            null_count: u32_at(12),
            crc: u32_at(16),
            validity_len: u32_at(20),
            values_len: u32_at(24),
            lengths_len: u32_at(28),
            values_size: u32_at(32),
            lengths_size: u32_at(36),
            encoding: b[40],
            width: b[41],
            lengths_width: b[42],
            flags: b[43],
            text_size: u32_at(44),
            min: Bound::read(&b[48..48 + BOUND_LEN])?,
            max: Bound::read(&b[72..72 + BOUND_LEN])?,
        })
    }
}

/// The footer: what the column holds and where each chunk is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Footer {
    /// The format version (1 to [`VERSION`]).
    pub version: u8,
    pub kind: ValueKind,
    /// 0 raw, 1 zstd: whether the writer compressed the streams (each
    /// entry's flags say which streams are).
    pub compressed: bool,
    /// Whether the column may hold nulls (its writer saw at least one).
    pub nullable: bool,
    pub rows: u64,
    pub entries: Vec<Entry>,
    /// Version 3 text and bytes: bytes of the symbol table between the
    /// chunks and the footer (0: none, the codes are the bytes).
    pub symbols_len: u16,
    /// The symbol table's bytes when writing (empty when read: the file
    /// keeps them parsed).
    pub symbols: Vec<u8>,
}

/// Why a footer is not one: the broken rule.
pub type Broken = String;

impl Footer {
    /// The footer's bytes followed by the trailer; `data_end` is where the
    /// chunks end (the footer's offset).
    pub fn encode(&self, data_end: u64) -> Vec<u8> {
        let n = self.entries.len();
        let footer_len = HEADER_LEN + ENTRY_LEN * n;
        let mut out = vec![0u8; footer_len + TRAILER_LEN];
        out[0] = self.version;
        out[1] = self.kind.tag();
        out[2] = dtype_code(self.kind.dtype());
        out[3] = u8::from(self.compressed);
        out[4] = u8::from(self.nullable);
        out[5..7].copy_from_slice(&self.symbols_len.to_le_bytes());
        out[8..16].copy_from_slice(&self.rows.to_le_bytes());
        out[16..24].copy_from_slice(&(n as u64).to_le_bytes());
        out[24..32].copy_from_slice(&data_end.to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            let at = HEADER_LEN + ENTRY_LEN * i;
            e.write(&mut out[at..at + ENTRY_LEN]);
        }
        let crc = self.crc(&out[..footer_len]);
        out[footer_len..footer_len + 4].copy_from_slice(&(footer_len as u32).to_le_bytes());
        out[footer_len + 4..footer_len + 8].copy_from_slice(&crc.to_le_bytes());
        out[footer_len + 8..].copy_from_slice(END_MAGIC);
        out
    }

    /// The CRC-32 the trailer records: of the symbol table (set with
    /// in `symbols`) then the footer's bytes.
    fn crc(&self, footer: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&self.symbols);
        h.update(footer);
        h.finalize()
    }

    /// The footer length a trailer (the file's last 16 bytes) records, after
    /// checking its magic.
    pub fn footer_len(trailer: &[u8]) -> Result<(usize, u32), Broken> {
        if trailer.len() != TRAILER_LEN || &trailer[8..] != END_MAGIC {
            return Err("the file does not end with the magic \"LXCOLEND\" (truncated?)".into());
        }
        let len = u32::from_le_bytes(trailer[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(trailer[4..8].try_into().expect("4 bytes"));
        if len < HEADER_LEN || !(len - HEADER_LEN).is_multiple_of(ENTRY_LEN) {
            return Err(format!(
                "the trailer records a footer of {len} bytes, which is not 32 + 96 * chunks"
            ));
        }
        Ok((len, crc))
    }

    /// Parses and checks the footer `bytes` (with `crc` from the trailer) of
    /// a file of `file_len` bytes: every rule that needs no chunk's bytes
    /// (the symbol table's own are [`super::fsst::Symbols::parse`]'s).
    /// `symbols`: the bytes of the symbol table the footer's bytes 5 and 6
    /// give the length of, which the CRC-32 covers before the footer.
    pub fn decode(bytes: &[u8], crc: u32, file_len: u64, symbols: &[u8]) -> Result<Footer, Broken> {
        let mut h = crc32fast::Hasher::new();
        h.update(symbols);
        h.update(bytes);
        if h.finalize() != crc {
            return Err("the footer's CRC-32 does not match its bytes".into());
        }
        let version = bytes[0];
        if !(1..=VERSION).contains(&version) {
            return Err(format!(
                "format version {version} is not one this release reads (it reads versions 1 to {VERSION})"
            ));
        }
        let kind = ValueKind::from_tags(bytes[1], bytes[2]).ok_or_else(|| {
            format!(
                "the footer's value kind {} and dtype code {} name no column type",
                bytes[1], bytes[2]
            )
        })?;
        let symbols_len = u16::from_le_bytes([bytes[5], bytes[6]]);
        if bytes[3] > 1 || bytes[4] > 1 || bytes[7] != 0 {
            return Err("the footer's codec, nullable or reserved bytes are invalid".into());
        }
        if symbols_len != 0 && (version < 3 || !kind.is_bytes()) {
            return Err(format!(
                "the footer records a symbol table of {symbols_len} bytes, which a version {version} column of {kind:?} does not have"
            ));
        }
        if symbols_len as usize > MAX_SYMBOLS_LEN {
            return Err(format!(
                "the footer records a symbol table of {symbols_len} bytes, more than {MAX_SYMBOLS_LEN}"
            ));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let rows = u64_at(8);
        let n = u64_at(16);
        let data_end = u64_at(24);
        if n != ((bytes.len() - HEADER_LEN) / ENTRY_LEN) as u64 {
            return Err(format!(
                "the footer lists {n} chunks but holds {} entries",
                (bytes.len() - HEADER_LEN) / ENTRY_LEN
            ));
        }
        let footer_at = file_len.saturating_sub((bytes.len() + TRAILER_LEN) as u64);
        if data_end.checked_add(symbols_len as u64) != Some(footer_at) {
            return Err(format!(
                "the chunks end at byte {data_end} and a symbol table of {symbols_len} bytes follows, but the footer starts at byte {footer_at}"
            ));
        }
        let footer = Footer {
            version,
            symbols_len,
            symbols: Vec::new(),
            kind,
            compressed: bytes[3] == 1,
            nullable: bytes[4] == 1,
            rows,
            entries: Vec::with_capacity(n as usize),
        };
        let mut footer = footer;
        let mut at = MAGIC.len() as u64;
        let mut total = 0u64;
        for i in 0..n as usize {
            let b = &bytes[HEADER_LEN + ENTRY_LEN * i..HEADER_LEN + ENTRY_LEN * (i + 1)];
            let e = Entry::read(b).ok_or_else(|| {
                format!("chunk {i}'s entry has invalid flags, encoding or bounds")
            })?;
            footer
                .check_entry(&e)
                .map_err(|why| format!("chunk {i}: {why}"))?;
            if version < 2 && e.encoding() == Encoding::Packed {
                return Err(format!(
                    "chunk {i} is packed, which format version {version} does not have"
                ));
            }
            if (version < 3) == (e.encoding() == Encoding::Grouped) && kind.is_bytes() {
                return Err(format!(
                    "chunk {i} has encoding {}, which a version {version} column of text or bytes does not have",
                    e.encoding
                ));
            }
            if e.offset != at {
                return Err(format!(
                    "chunk {i} starts at byte {}, but the chunk before it ends at byte {at}",
                    e.offset
                ));
            }
            at = at.saturating_add(e.stored_len());
            total = total.saturating_add(e.rows as u64);
            footer.entries.push(e);
        }
        if at != data_end {
            return Err(format!(
                "the chunks end at byte {at}, but the footer says {data_end}"
            ));
        }
        if total != rows {
            return Err(format!(
                "the chunks hold {total} rows, but the footer says {rows}"
            ));
        }
        Ok(footer)
    }

    /// Rows 1 to [`MAX_CHUNK_ROWS`], at most as many nulls, and nulls only
    /// in a nullable column (every version).
    fn check_rows(&self, e: &Entry) -> Result<(), Broken> {
        if e.rows == 0 || e.rows > MAX_CHUNK_ROWS {
            return Err(format!(
                "it holds {} rows; a chunk holds 1 to {MAX_CHUNK_ROWS}",
                e.rows
            ));
        }
        if e.null_count > e.rows {
            return Err(format!("{} nulls in {} rows", e.null_count, e.rows));
        }
        if e.null_count > 0 && !self.nullable {
            return Err("it holds nulls, but the column is not nullable".into());
        }
        Ok(())
    }

    /// The rules of one entry that hold whatever its bytes are.
    fn check_entry(&self, e: &Entry) -> Result<(), Broken> {
        if self.version >= 3 {
            return self.check_entry_v3(e);
        }
        if e.text_size != 0 {
            return Err("its reserved bytes 44 to 48 are not zero".into());
        }
        self.check_rows(e)?;
        let validity_size = (e.rows as u64).div_ceil(8);
        if (e.null_count == 0) != (e.validity_len == 0) {
            return Err("a chunk has a validity stream exactly when it holds nulls".into());
        }
        let stream = |stored: u32, size: u64, flag: u8, what: &str| -> Result<(), Broken> {
            let zstd = e.flags & flag != 0;
            if zstd && !self.compressed {
                return Err(format!("its {what} are compressed in a raw column"));
            }
            if !zstd && stored as u64 != size {
                return Err(format!(
                    "its uncompressed {what} take {stored} bytes, expected {size}"
                ));
            }
            if zstd && stored == 0 {
                return Err(format!("its compressed {what} are empty"));
            }
            if zstd && size > stored as u64 * MAX_RATIO {
                return Err(format!(
                    "its {what} claim to decode to {size} bytes from {stored}, more than zstd can"
                ));
            }
            Ok(())
        };
        if e.null_count > 0 {
            stream(
                e.validity_len,
                validity_size,
                FLAG_VALIDITY_ZSTD,
                "validity bits",
            )?;
        } else if e.flags & FLAG_VALIDITY_ZSTD != 0 {
            return Err("it has no validity stream, but flags one as compressed".into());
        }
        let rows = e.rows as u64;
        let has_stats = e.flags & (FLAG_MIN | FLAG_MAX);
        match self.kind {
            ValueKind::Fixed(dtype) => {
                let w = dtype.itemsize() as u8;
                let (ok, size) = match e.encoding() {
                    Encoding::Bits => (dtype == DType::Bool && e.width == 0, rows.div_ceil(8)),
                    Encoding::Plain => (dtype != DType::Bool && e.width == w, rows * w as u64),
                    Encoding::Shuffled => (
                        dtype != DType::Bool && w > 1 && e.width == w,
                        rows * w as u64,
                    ),
                    Encoding::Narrowed => (
                        is_integer(dtype)
                            && matches!(e.width, 1 | 2 | 4)
                            && e.width < w
                            && has_stats == FLAG_MIN | FLAG_MAX,
                        rows * e.width as u64,
                    ),
                    Encoding::Packed => (
                        is_integer(dtype)
                            && (1..=32).contains(&e.width)
                            && e.width < 8 * w
                            && has_stats == FLAG_MIN | FLAG_MAX,
                        (rows * e.width as u64).div_ceil(8),
                    ),
                    Encoding::Grouped => (false, 0),
                };
                if !ok {
                    return Err(format!(
                        "encoding {} of width {} does not fit a {dtype} column (or lacks its minimum)",
                        e.encoding, e.width
                    ));
                }
                if e.values_size as u64 != size {
                    return Err(format!(
                        "its values decode to {} bytes, expected {size}",
                        e.values_size
                    ));
                }
                if e.lengths_len != 0 || e.lengths_size != 0 || e.lengths_width != 0 {
                    return Err("a column of numbers has no lengths stream".into());
                }
                check_number_bounds(e)?;
            }
            ValueKind::Utf8 | ValueKind::Binary => {
                if e.encoding() != Encoding::Plain || e.width != 0 {
                    return Err("text and bytes are stored plain".into());
                }
                if !matches!(e.lengths_width, 1 | 2 | 4)
                    || e.lengths_size as u64 != rows * e.lengths_width as u64
                {
                    return Err(format!(
                        "its lengths take {} bytes of width {}, expected {} rows",
                        e.lengths_size, e.lengths_width, e.rows
                    ));
                }
                if e.values_size > i32::MAX as u32 {
                    return Err(format!(
                        "its values take {} bytes, more than 2 GiB",
                        e.values_size
                    ));
                }
                stream(
                    e.lengths_len,
                    e.lengths_size as u64,
                    FLAG_LENGTHS_ZSTD,
                    "lengths",
                )?;
                check_text_bounds(e)?;
            }
        }
        stream(
            e.values_len,
            e.values_size as u64,
            FLAG_VALUES_ZSTD,
            "values",
        )?;
        Ok(())
    }
}

impl Footer {
    /// The rules of a version 3 entry: every stream raw, numbers plain,
    /// packed or bits, text grouped, the index exactly its size.
    fn check_entry_v3(&self, e: &Entry) -> Result<(), Broken> {
        self.check_rows(e)?;
        if e.flags & (FLAG_VALIDITY_ZSTD | FLAG_VALUES_ZSTD | FLAG_LENGTHS_ZSTD) != 0 {
            return Err("a version 3 chunk's streams are raw, but it flags one compressed".into());
        }
        let rows = e.rows as u64;
        let validity = if e.null_count > 0 {
            rows.div_ceil(8)
        } else {
            0
        };
        if e.validity_len as u64 != validity {
            return Err(format!(
                "its validity bits take {} bytes, expected {validity}",
                e.validity_len
            ));
        }
        if e.values_len != e.values_size || e.lengths_len != e.lengths_size {
            return Err("a version 3 chunk's streams are stored as they decode".into());
        }
        let has_stats = e.flags & (FLAG_MIN | FLAG_MAX);
        let (_, blocks) = e.checked_len(self.kind);
        let mut index = 4 * blocks;
        match self.kind {
            ValueKind::Fixed(dtype) => {
                let w = dtype.itemsize() as u8;
                let (ok, size) = match e.encoding() {
                    Encoding::Bits => (dtype == DType::Bool && e.width == 0, rows.div_ceil(8)),
                    Encoding::Plain => (dtype != DType::Bool && e.width == w, rows * w as u64),
                    Encoding::Packed => (
                        is_integer(dtype)
                            && (1..=32).contains(&e.width)
                            && e.width < 8 * w
                            && has_stats == FLAG_MIN | FLAG_MAX,
                        (rows * e.width as u64).div_ceil(8),
                    ),
                    _ => (false, 0),
                };
                if !ok || e.lengths_width != 0 {
                    return Err(format!(
                        "encoding {} of width {} does not fit a version 3 {dtype} column (or lacks its minimum)",
                        e.encoding, e.width
                    ));
                }
                if e.values_size as u64 != size || e.text_size != 0 {
                    return Err(format!(
                        "its values take {} bytes, expected {size}",
                        e.values_size
                    ));
                }
                check_number_bounds(e)?;
            }
            ValueKind::Utf8 | ValueKind::Binary => {
                if e.encoding() != Encoding::Grouped || e.width > 32 || e.lengths_width != 0 {
                    return Err(format!(
                        "encoding {} of width {} does not fit a version 3 column of text or bytes",
                        e.encoding, e.width
                    ));
                }
                if e.values_size > i32::MAX as u32 || e.text_size > i32::MAX as u32 {
                    return Err(format!(
                        "its values take {} bytes ({} decoded), more than 2 GiB",
                        e.values_size, e.text_size
                    ));
                }
                index += 4 * (e.groups() as u64 + 1);
                check_text_bounds(e)?;
            }
        }
        if e.lengths_size as u64 != index {
            return Err(format!(
                "its index takes {} bytes, expected {index}",
                e.lengths_size
            ));
        }
        Ok(())
    }
}

/// A chunk of numbers has its exact 8-byte minimum and maximum exactly
/// when not every row is null (every version).
fn check_number_bounds(e: &Entry) -> Result<(), Broken> {
    let has_stats = e.flags & (FLAG_MIN | FLAG_MAX);
    let all_null = e.null_count == e.rows;
    if all_null == (has_stats != 0) || (!all_null && has_stats != FLAG_MIN | FLAG_MAX) {
        return Err(
            "a chunk of numbers has its minimum and maximum exactly when not every row is null"
                .into(),
        );
    }
    if has_stats != 0 && (e.min.len != 8 || e.max.len != 8 || !e.min.exact || !e.max.exact) {
        return Err("a number's bounds are its 8 exact bytes".into());
    }
    Ok(())
}

/// A chunk of text or bytes has no bounds when every row is null, and a
/// lower bound otherwise (every version).
fn check_text_bounds(e: &Entry) -> Result<(), Broken> {
    let has_stats = e.flags & (FLAG_MIN | FLAG_MAX);
    if e.null_count == e.rows && has_stats != 0 {
        return Err("a chunk of nulls has no bounds".into());
    }
    if e.null_count < e.rows && e.flags & FLAG_MIN == 0 {
        return Err("a chunk with values has a lower bound".into());
    }
    Ok(())
}

pub(crate) fn is_integer(d: DType) -> bool {
    !matches!(d, DType::Bool | DType::F16 | DType::F32 | DType::F64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_of_text() {
        let b = Bound::lower(b"abc");
        assert!(b.exact && b.bytes() == b"abc");
        let long = [b'a'; 30];
        let lo = Bound::lower(&long);
        assert!(!lo.exact && lo.bytes() == &long[..BOUND_DATA]);
        let hi = Bound::upper(&long).unwrap();
        let mut want = vec![b'a'; BOUND_DATA - 1];
        want.push(b'b');
        assert!(!hi.exact && hi.bytes() == &want[..]);
        let mut ff = vec![b'a'; 3];
        ff.extend([0xFF; 25]);
        assert_eq!(Bound::upper(&ff).unwrap().bytes(), b"aab");
        assert!(Bound::upper(&[0xFF; 30]).is_none());
    }
}
