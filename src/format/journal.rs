//! The commit journal (format extension 1): how a change that rewrites
//! committed state becomes atomic.
//!
//! An append-only sync never touches committed bytes: new payloads go past
//! `tail_offset`, new locations past the committed table, and the one
//! 32-byte header write commits them. A sync after deletes rewrites slots of
//! the committed table, and a compaction step moves committed payloads; done
//! in place, a crash halfway would leave a mix of old and new state. Such a
//! change is first written, whole, as a journal past the record table in
//! `meta.zr` and made durable; the header write that commits the new length
//! and tail also records the journal's offset (header byte 20 = 1, bytes
//! 21..29 the offset). Only then is the journal applied in place: payload
//! moves into `data.zr`, location entries into the table. Clearing the
//! header's journal field ends it. An open that finds a pending journal
//! applies it again (every step is idempotent: a move's bytes come from the
//! journal, not from `data.zr`), so a store reopens either at the state
//! before the change or after it, whatever instant a crash hit.
//!
//! Layout (little-endian), at the offset the header names:
//!
//! ```text
//! 0    8   magic "ZRJRNL01"
//! 8    8   length        u64  equals the header's length
//! 16   8   tail_offset   u64  equals the header's tail_offset
//! 24   8   n_locs        u64
//! 32   8   n_moves       u64
//! 40   8   payload_len   u64  sum of the moves' lengths
//! 48   24*n_locs         slot u64, then the slot's RecordLoc (16 bytes)
//! ..   16*n_moves        dest u64 (offset in data.zr), len u64
//! ..   payload_len       the moved bytes, in move order
//! ..   4                 CRC-32 (IEEE) of every byte before it
//! ```

use crate::format::{RecordLoc, LOC_SIZE};

pub const MAGIC: &[u8; 8] = b"ZRJRNL01";
pub const HEAD_SIZE: u64 = 48;
const ENTRY_SIZE: u64 = 8 + LOC_SIZE;
const MOVE_SIZE: u64 = 16;
const CRC_SIZE: u64 = 4;

/// One run of payload bytes to write at `dest` in `data.zr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub dest: u64,
    pub len: u64,
}

/// A decoded (or to-be-written) journal.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Journal {
    pub length: u64,
    pub tail_offset: u64,
    /// `(slot, location)` pairs, slots ascending.
    pub locs: Vec<(u64, RecordLoc)>,
    pub moves: Vec<Move>,
    /// The moves' bytes, back to back.
    pub payload: Vec<u8>,
}

/// The counts in a journal's fixed head, from which its size follows.
#[derive(Clone, Copy, Debug)]
pub struct Head {
    pub length: u64,
    pub tail_offset: u64,
    pub n_locs: u64,
    pub n_moves: u64,
    pub payload_len: u64,
}

impl Head {
    /// Decodes the fixed head; `room` is how many bytes the file holds from
    /// the journal's start, so that no count can ask for more than that.
    pub fn decode(bytes: &[u8; HEAD_SIZE as usize], room: u64) -> Result<Head, String> {
        if &bytes[0..8] != MAGIC {
            return Err("the pending journal does not start with its magic bytes".into());
        }
        let u = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let head = Head {
            length: u(8),
            tail_offset: u(16),
            n_locs: u(24),
            n_moves: u(32),
            payload_len: u(40),
        };
        match head.size() {
            Some(size) if size <= room => Ok(head),
            _ => Err(format!(
                "the pending journal ({} locations, {} moves, {} payload bytes) runs past the end of the file ({room} bytes left)",
                head.n_locs, head.n_moves, head.payload_len
            )),
        }
    }

    /// The journal's whole size in bytes, or `None` on overflow.
    pub fn size(&self) -> Option<u64> {
        HEAD_SIZE
            .checked_add(self.n_locs.checked_mul(ENTRY_SIZE)?)?
            .checked_add(self.n_moves.checked_mul(MOVE_SIZE)?)?
            .checked_add(self.payload_len)?
            .checked_add(CRC_SIZE)
    }
}

impl Journal {
    /// Everything but the payload and the checksum, and the checksum (over
    /// the prefix and the payload): written as three runs, the payload
    /// straight from its buffer.
    pub fn encode_parts(&self) -> (Vec<u8>, [u8; 4]) {
        let mut out = Vec::with_capacity(
            HEAD_SIZE as usize
                + self.locs.len() * ENTRY_SIZE as usize
                + self.moves.len() * MOVE_SIZE as usize,
        );
        out.extend_from_slice(MAGIC);
        for v in [
            self.length,
            self.tail_offset,
            self.locs.len() as u64,
            self.moves.len() as u64,
            self.payload.len() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let mut entry = [0u8; LOC_SIZE as usize];
        for (slot, loc) in &self.locs {
            out.extend_from_slice(&slot.to_le_bytes());
            loc.encode_into(&mut entry);
            out.extend_from_slice(&entry);
        }
        for m in &self.moves {
            out.extend_from_slice(&m.dest.to_le_bytes());
            out.extend_from_slice(&m.len.to_le_bytes());
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out);
        crc.update(&self.payload);
        (out, crc.finalize().to_le_bytes())
    }

    /// The whole journal as one buffer.
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let (mut out, crc) = self.encode_parts();
        out.extend_from_slice(&self.payload);
        out.extend_from_slice(&crc);
        out
    }

    /// Decodes a whole journal (`bytes` is exactly `head.size()` long) and
    /// checks it against the header that committed it: checksum, slots below
    /// `length`, moves inside `tail_offset`, and the payload accounted for.
    pub fn decode(bytes: &[u8], head: &Head) -> Result<Journal, String> {
        let (body, crc) = bytes.split_at(bytes.len() - CRC_SIZE as usize);
        let stored = u32::from_le_bytes(crc.try_into().unwrap());
        if crc32fast::hash(body) != stored {
            return Err("the pending journal fails its CRC-32 check".into());
        }
        let mut at = HEAD_SIZE as usize;
        let mut locs = Vec::with_capacity(head.n_locs as usize);
        for _ in 0..head.n_locs {
            let slot = u64::from_le_bytes(body[at..at + 8].try_into().unwrap());
            let loc = RecordLoc::decode(&body[at + 8..at + ENTRY_SIZE as usize]);
            if slot >= head.length {
                return Err(format!(
                    "the pending journal rewrites slot {slot} of a {}-record table",
                    head.length
                ));
            }
            locs.push((slot, loc));
            at += ENTRY_SIZE as usize;
        }
        let mut moves = Vec::with_capacity(head.n_moves as usize);
        let mut total = 0u64;
        for _ in 0..head.n_moves {
            let u = |k: usize| u64::from_le_bytes(body[k..k + 8].try_into().unwrap());
            let m = Move {
                dest: u(at),
                len: u(at + 8),
            };
            match m.dest.checked_add(m.len) {
                Some(end) if end <= head.tail_offset => {}
                _ => {
                    return Err(format!(
                        "the pending journal moves {} bytes to offset {}, past tail_offset {}",
                        m.len, m.dest, head.tail_offset
                    ))
                }
            }
            total = total.saturating_add(m.len);
            moves.push(m);
            at += MOVE_SIZE as usize;
        }
        if total != head.payload_len {
            return Err(format!(
                "the pending journal's moves cover {total} bytes but it holds {}",
                head.payload_len
            ));
        }
        Ok(Journal {
            length: head.length,
            tail_offset: head.tail_offset,
            locs,
            moves,
            payload: body[at..].to_vec(),
        })
    }

    /// The moves with their bytes.
    pub fn moves_with_bytes(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut at = 0usize;
        self.moves.iter().map(move |m| {
            let bytes = &self.payload[at..at + m.len as usize];
            at += m.len as usize;
            (m.dest, bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Journal {
        Journal {
            length: 10,
            tail_offset: 500,
            locs: vec![(
                3,
                RecordLoc {
                    offset: 40,
                    phys_length: 7,
                    logic_length: 9,
                },
            )],
            moves: vec![Move { dest: 40, len: 3 }, Move { dest: 90, len: 2 }],
            payload: vec![1, 2, 3, 4, 5],
        }
    }

    fn head_of(bytes: &[u8]) -> Result<Head, String> {
        Head::decode(bytes[..48].try_into().unwrap(), bytes.len() as u64)
    }

    #[test]
    fn round_trip() {
        let j = sample();
        let bytes = j.encode();
        let head = head_of(&bytes).unwrap();
        assert_eq!(head.size(), Some(bytes.len() as u64));
        let back = Journal::decode(&bytes, &head).unwrap();
        assert_eq!(back, j);
        let moved: Vec<_> = back.moves_with_bytes().collect();
        assert_eq!(moved, vec![(40, &[1u8, 2, 3][..]), (90, &[4u8, 5][..])]);
    }

    #[test]
    fn rejects_damage() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            let res = head_of(&b).and_then(|h| {
                if h.size() != Some(b.len() as u64) {
                    return Err("size".into());
                }
                Journal::decode(&b, &h)
            });
            assert!(res.is_err(), "flip at byte {i} went unnoticed");
        }
        // Counts that ask for more than the file holds.
        let mut b = bytes.clone();
        b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(head_of(&b).unwrap_err().contains("past the end"));
    }

    #[test]
    fn rejects_slots_and_moves_out_of_range() {
        let mut j = sample();
        j.locs[0].0 = 10;
        let b = j.encode();
        assert!(Journal::decode(&b, &head_of(&b).unwrap())
            .unwrap_err()
            .contains("slot 10"));
        let mut j = sample();
        j.moves[1].dest = 499;
        let b = j.encode();
        assert!(Journal::decode(&b, &head_of(&b).unwrap())
            .unwrap_err()
            .contains("past tail_offset"));
    }
}
