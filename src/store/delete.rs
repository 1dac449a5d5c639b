//! Deleting records: swap-last, in descending index order.

use crate::error::{Error, Result};
use crate::read::records::Records;

use super::{RecordIndex, Store};

impl Store {
    /// Deletes records by swapping the last record into each hole, in
    /// descending index order. Duplicates delete once.
    pub fn delete<I: RecordIndex>(&mut self, idx: &[I]) -> Result<()> {
        self.check_writable("delete")?;
        check_record_indices(idx, self.len())?;
        let mut order: Vec<u64> = idx.iter().map(|i| i.to_u64().unwrap()).collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        order.dedup();
        for &i in &order {
            if i + 1 != self.len() {
                self.packed_dense = false;
            }
            let removed = self.locs.swap_remove(i as usize);
            self.live_bytes -= removed.phys_length as u64;
            if i < self.len() {
                self.dirty_slots.insert(i);
            }
        }
        let len = self.len();
        self.dirty_slots.split_off(&len);
        self.unsynced_from = self.unsynced_from.min(len);
        if !order.is_empty() {
            self.header_dirty = true;
        }
        Ok(())
    }
}

/// Fails with `IndexOutOfRange` on the first index outside `0..len` (a
/// negative one included).
fn check_record_indices<I: RecordIndex>(idx: &[I], len: u64) -> Result<()> {
    for &i in idx {
        match i.to_u64() {
            Some(u) if u < len => {}
            _ => {
                return Err(Error::IndexOutOfRange {
                    index: i.as_i128(),
                    len,
                })
            }
        }
    }
    Ok(())
}
