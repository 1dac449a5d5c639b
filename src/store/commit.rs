//! Committing: sync (the durability barrier), the journal that makes a
//! commit atomic, and close.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::format::journal::{Journal, Move};
use crate::format::{self, Header, RecordLoc};
use crate::io::StorageFile;
use crate::read::records::Records;

use super::{io_at, Store};

impl Store {
    /// Durability barrier: after it returns, a crash reopens the store at
    /// exactly this state; a crash during it, at this state or the last one.
    pub fn sync(&mut self) -> Result<()> {
        self.check_writable("sync")?;
        let len = self.len();
        if !self.header_dirty && self.dirty_slots.is_empty() && self.unsynced_from >= len {
            return Ok(());
        }
        self.commit(Vec::new(), Vec::new()).map(drop)
    }

    /// Commits the in-memory state, plus `moves` of `payload` bytes into
    /// data.zr, and returns the payload buffer for reuse. A failure marks
    /// the handle failed: the state on disk is then the last commit or
    /// this one, and only a reopen tells which.
    pub(super) fn commit(&mut self, moves: Vec<Move>, payload: Vec<u8>) -> Result<Vec<u8>> {
        let result = self.commit_inner(moves, payload);
        if let Err(e) = &result {
            self.fail(e);
        }
        result
    }

    fn commit_inner(&mut self, moves: Vec<Move>, payload: Vec<u8>) -> Result<Vec<u8>> {
        let len = self.len();
        let committed = self.committed_len;
        self.data.sync_data().map_err(io_at(&self.data_path))?;
        // Slots past the committed table are referenced by nothing on disk:
        // they are written in place.
        if len > committed {
            self.write_locs(committed, len)?;
        }
        // Committed slots that change go through the journal.
        let rewrites: Vec<(u64, RecordLoc)> = self
            .dirty_slots
            .iter()
            .copied()
            .chain(self.unsynced_from..committed.min(len))
            .filter(|&i| i < committed.min(len))
            .collect::<BTreeSet<u64>>()
            .into_iter()
            .map(|i| (i, self.locs[i as usize]))
            .collect();
        let payload = if rewrites.is_empty() && moves.is_empty() {
            if len > committed {
                // The new entries reach the disk before the header that
                // commits them.
                self.meta.sync_data().map_err(io_at(&self.meta_path))?;
            }
            self.write_header(None)?;
            payload
        } else {
            let journal = Journal {
                length: len,
                tail_offset: self.tail,
                locs: rewrites,
                moves,
                payload,
            };
            let at = format::meta_size_for(committed.max(len)).expect("table size fits u64");
            let (prefix, crc) = journal.encode_parts();
            let meta_err = io_at(&self.meta_path);
            self.meta
                .write_all_at(&prefix, at)
                .and_then(|_| {
                    self.meta
                        .write_all_at(&journal.payload, at + prefix.len() as u64)
                })
                .and_then(|_| {
                    let end = at + prefix.len() as u64 + journal.payload.len() as u64;
                    self.meta.write_all_at(&crc, end)
                })
                .and_then(|_| self.meta.sync_data())
                .map_err(&meta_err)?;
            // The commit point: one header write names the journal.
            self.write_header(Some(at))?;
            self.apply_journal(&journal)?;
            journal.payload
        };
        self.committed_len = len;
        self.unsynced_from = len;
        self.dirty_slots.clear();
        self.header_dirty = false;
        Ok(payload)
    }

    /// Writes the header for the in-memory length and tail (naming a
    /// pending journal or none) and makes it durable.
    pub(super) fn write_header(&self, journal: Option<u64>) -> Result<()> {
        let header = Header {
            length: self.len(),
            tail_offset: self.tail,
            schema_length: self.schema.encode().len() as u32,
            codec: self.codec,
            journal,
        };
        self.meta
            .write_all_at(&header.encode(), 0)
            .and_then(|_| self.meta.sync_data())
            .map_err(io_at(&self.meta_path))
    }

    /// Applies a committed journal in place (its moves into data.zr, its
    /// locations into the table), then clears it from the header. Applying
    /// it twice is the same as once.
    pub(super) fn apply_journal(&self, journal: &Journal) -> Result<()> {
        if !journal.moves.is_empty() {
            for (dest, bytes) in journal.moves_with_bytes() {
                self.data
                    .write_all_at(bytes, dest)
                    .map_err(io_at(&self.data_path))?;
            }
            self.data.sync_data().map_err(io_at(&self.data_path))?;
        }
        let slots = &journal.locs;
        let mut k = 0;
        while k < slots.len() {
            let mut j = k + 1;
            while j < slots.len() && slots[j].0 == slots[j - 1].0 + 1 {
                j += 1;
            }
            let run: Vec<RecordLoc> = slots[k..j].iter().map(|&(_, loc)| loc).collect();
            self.meta
                .write_all_at(&format::encode_locs(&run), format::loc_position(slots[k].0))
                .map_err(io_at(&self.meta_path))?;
            k = j;
        }
        self.meta.sync_data().map_err(io_at(&self.meta_path))?;
        self.write_header(None)
    }

    fn write_locs(&self, from: u64, to: u64) -> Result<()> {
        // Bounded chunks keep the encoding buffer small for huge tables.
        const CHUNK: u64 = 1 << 16;
        let mut i = from;
        while i < to {
            let j = (i + CHUNK).min(to);
            let bytes = format::encode_locs(&self.locs[i as usize..j as usize]);
            self.meta
                .write_all_at(&bytes, format::loc_position(i))
                .map_err(io_at(&self.meta_path))?;
            i = j;
        }
        Ok(())
    }

    /// Marks the handle failed after a write of committed state failed.
    pub(super) fn fail(&mut self, e: &Error) {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
    }

    /// Syncs, trims both files to their committed size and releases the lock.
    /// A read-only handle writes nothing and only releases its shared lock.
    /// In a forked child it only releases this process's handle.
    pub fn close(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        // A forked child never writes; a failed handle leaves the disk at
        // its last commit, which the next open recovers; a read-only handle
        // never writes at all.
        if !self.is_owner() || self.failed.is_some() || self.readonly {
            return Ok(());
        }
        self.closed = false;
        self.sync()?;
        let data_len = self.data.len().map_err(io_at(&self.data_path))?;
        if data_len != self.tail {
            self.data
                .set_len(self.tail)
                .and_then(|_| self.data.sync_all())
                .map_err(io_at(&self.data_path))?;
        }
        let meta_len = self.meta.len().map_err(io_at(&self.meta_path))?;
        if Some(meta_len) != format::meta_size_for(self.len()) {
            self.truncate_meta()?;
        }
        self.closed = true;
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort: a handle dropped without close() still reaches disk.
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use crate::codec::Codec;
    use crate::error::Error;
    use crate::read::records::Records;
    use crate::store::testing::{bytes_store, header_on_disk};
    use crate::store::Store;

    #[test]
    fn appends_reach_the_header_only_at_sync() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let mut s = bytes_store(&dir, 2, Codec::Raw);
        s.append_dense(&[9]).unwrap();
        assert_eq!(header_on_disk(&dir).length, 2);
        s.sync().unwrap();
        let h = header_on_disk(&dir);
        assert_eq!((h.length, h.tail_offset, h.journal), (3, 3, None));
    }

    #[test]
    fn a_rewrite_of_committed_slots_goes_through_the_journal() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let mut s = bytes_store(&dir, 4, Codec::Raw);
        s.delete(&[0u64]).unwrap();
        s.sync().unwrap();
        // Applied and cleared: the header names no journal, and the table
        // holds the new location.
        let h = header_on_disk(&dir);
        assert_eq!((h.length, h.journal), (3, None));
        drop(s);
        let s = Store::open(&dir).unwrap();
        assert_eq!(s.gather_dense(&[0, 1, 2]).unwrap().as_slice(), &[3, 1, 2]);
    }

    #[test]
    fn a_failed_handle_refuses_writes_and_close_leaves_the_last_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        let mut s = bytes_store(&dir, 2, Codec::Raw);
        s.append_dense(&[5]).unwrap();
        s.fail(&Error::InvalidState("injected".into()));
        let err = s.sync().unwrap_err();
        assert!(
            err.to_string()
                .contains("an earlier write failed (injected)"),
            "{err}"
        );
        s.close().unwrap();
        assert_eq!(Store::open(&dir).unwrap().len(), 2);
    }
}
