//! The byte-exact persistent layout of `meta.zr`: a 32-byte [`Header`] at
//! offset 0, the MsgPack schema at 32, zero padding to 4096, then one 16-byte
//! [`RecordLoc`] per record. Every integer is little-endian.

pub(crate) mod journal;

use crate::codec::Codec;

pub const META_FILE: &str = "meta.zr";
pub const DATA_FILE: &str = "data.zr";
pub const DICT_FILE: &str = "dict.zr";

/// Size of the static page at the front of `meta.zr`.
pub const PAGE_SIZE: u64 = 4096;
pub const HEADER_SIZE: usize = 32;
/// Bytes available to the schema inside the static page.
pub const SCHEMA_CAPACITY: usize = PAGE_SIZE as usize - HEADER_SIZE;
pub const LOC_SIZE: u64 = 16;
/// The largest logical record, in bytes.
pub const MAX_RECORD_BYTES: u64 = 1 << 31;

/// Position of record `i`'s location entry in `meta.zr`.
pub fn loc_position(i: u64) -> u64 {
    PAGE_SIZE + LOC_SIZE * i
}

/// Bytes `meta.zr` needs to hold `length` record locations, or `None` on overflow.
pub fn meta_size_for(length: u64) -> Option<u64> {
    length.checked_mul(LOC_SIZE)?.checked_add(PAGE_SIZE)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Number of committed records.
    pub length: u64,
    /// Committed end of payload in `data.zr`.
    pub tail_offset: u64,
    /// Bytes of MsgPack schema following the header (1..=4064).
    pub schema_length: u32,
    pub codec: Codec,
    /// Format extension 1: the offset in `meta.zr` of a committed journal
    /// that has not been applied to the record table yet (see the journal
    /// in `docs/format.md`). `None` in every store with nothing pending,
    /// which keeps bytes 20..31 zero, as every store without the extension
    /// has them.
    pub journal: Option<u64>,
}

/// Header byte 20 when a committed journal is pending.
pub const EXT_JOURNAL: u8 = 1;

impl Header {
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out[0..8].copy_from_slice(&self.length.to_le_bytes());
        out[8..16].copy_from_slice(&self.tail_offset.to_le_bytes());
        out[16..20].copy_from_slice(&self.schema_length.to_le_bytes());
        // bytes 20..31 are reserved and stay zero, except while a committed
        // journal is pending: byte 20 is EXT_JOURNAL, bytes 21..29 its offset.
        if let Some(at) = self.journal {
            out[20] = EXT_JOURNAL;
            out[21..29].copy_from_slice(&at.to_le_bytes());
        }
        out[31] = self.codec as u8;
        out
    }

    /// Decodes and validates a header; the error names the broken invariant.
    pub fn decode(bytes: &[u8; HEADER_SIZE]) -> Result<Header, String> {
        let length = u64::from_le_bytes(bytes[0..8].try_into().unwrap());
        let tail_offset = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let schema_length = u32::from_le_bytes(bytes[16..20].try_into().unwrap());
        let journal = match bytes[20] {
            0 if bytes[21..31].iter().all(|&b| b == 0) => None,
            0 => return Err("header bytes 20..31 are reserved and must be zero".into()),
            EXT_JOURNAL if bytes[29..31].iter().all(|&b| b == 0) => {
                let at = u64::from_le_bytes(bytes[21..29].try_into().unwrap());
                let table_end = meta_size_for(length).ok_or_else(|| {
                    format!("header length {length} overflows the record table")
                })?;
                if at < table_end {
                    return Err(format!(
                        "reserved header byte 20 marks a pending journal, but its offset {at} overlaps the record table (ends at {table_end})"
                    ));
                }
                Some(at)
            }
            EXT_JOURNAL => return Err("header bytes 29..31 are reserved and must be zero".into()),
            other => {
                return Err(format!(
                    "header byte 20 is {other}: reserved bytes must be zero (or 1 for a pending journal)"
                ))
            }
        };
        let codec = Codec::from_tag(bytes[31])
            .ok_or_else(|| format!("unknown codec tag {} in header byte 31", bytes[31]))?;
        if schema_length == 0 || schema_length as usize > SCHEMA_CAPACITY {
            return Err(format!(
                "schema_length {schema_length} is outside 1..={SCHEMA_CAPACITY}"
            ));
        }
        Ok(Header {
            length,
            tail_offset,
            schema_length,
            codec,
            journal,
        })
    }
}

/// Where one record lives in `data.zr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordLoc {
    /// Absolute offset in `data.zr`.
    pub offset: u64,
    /// Stored (possibly compressed) size.
    pub phys_length: u32,
    /// Original (decoded) size.
    pub logic_length: u32,
}

impl RecordLoc {
    pub fn encode_into(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.phys_length.to_le_bytes());
        out[12..16].copy_from_slice(&self.logic_length.to_le_bytes());
    }

    pub fn decode(bytes: &[u8]) -> RecordLoc {
        RecordLoc {
            offset: u64::from_le_bytes(bytes[0..8].try_into().unwrap()),
            phys_length: u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
            logic_length: u32::from_le_bytes(bytes[12..16].try_into().unwrap()),
        }
    }

    /// End of the stored bytes, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.phys_length as u64)
    }
}

/// Encodes a run of locations into their on-disk bytes.
pub fn encode_locs(locs: &[RecordLoc]) -> Vec<u8> {
    let mut out = vec![0u8; locs.len() * LOC_SIZE as usize];
    for (loc, chunk) in locs.iter().zip(out.chunks_exact_mut(LOC_SIZE as usize)) {
        loc.encode_into(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            length: 7,
            tail_offset: 1234,
            schema_length: 33,
            codec: Codec::ZstdDict,
            journal: None,
        };
        let bytes = h.encode();
        assert_eq!(bytes[31], 2);
        assert_eq!(Header::decode(&bytes).unwrap(), h);
    }

    #[test]
    fn header_rejects_bad_fields() {
        let h = Header {
            length: 0,
            tail_offset: 0,
            schema_length: 10,
            codec: Codec::Raw,
            journal: None,
        };
        let mut b = h.encode();
        b[31] = 9;
        assert!(Header::decode(&b).unwrap_err().contains("unknown codec"));
        let mut b = h.encode();
        b[25] = 1;
        assert!(Header::decode(&b).unwrap_err().contains("reserved"));
        let mut b = h.encode();
        b[20] = 7;
        assert!(Header::decode(&b).unwrap_err().contains("byte 20"));
        // A pending journal must lie past the record table.
        let mut b = h.encode();
        b[20] = EXT_JOURNAL;
        b[21..29].copy_from_slice(&100u64.to_le_bytes());
        assert!(Header::decode(&b).unwrap_err().contains("overlaps"));
        let mut b = h.encode();
        b[16..20].copy_from_slice(&4065u32.to_le_bytes());
        assert!(Header::decode(&b).unwrap_err().contains("schema_length"));
        let mut b = h.encode();
        b[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert!(Header::decode(&b).unwrap_err().contains("schema_length"));
    }

    #[test]
    fn header_with_pending_journal_round_trips() {
        let h = Header {
            length: 3,
            tail_offset: 99,
            schema_length: 12,
            codec: Codec::Zstd,
            journal: Some(5000),
        };
        let bytes = h.encode();
        assert_eq!(bytes[20], EXT_JOURNAL);
        assert_eq!(Header::decode(&bytes).unwrap(), h);
        let clean = Header { journal: None, ..h }.encode();
        assert!(clean[20..31].iter().all(|&b| b == 0));
    }

    #[test]
    fn loc_round_trip() {
        let loc = RecordLoc {
            offset: u64::MAX - 5,
            phys_length: 17,
            logic_length: 99,
        };
        let mut b = [0u8; 16];
        loc.encode_into(&mut b);
        assert_eq!(RecordLoc::decode(&b), loc);
        assert_eq!(loc.end(), None);
    }
}
