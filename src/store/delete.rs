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

#[cfg(test)]
mod tests {
    use crate::codec::Codec;
    use crate::read::records::Records;
    use crate::store::testing::bytes_store;

    #[test]
    fn deletes_swap_the_last_record_in_descending_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = bytes_store(&tmp.path().join("s"), 5, Codec::Raw);
        // 3 first: 4 moves into slot 3; then 1: 4 (now last) moves into 1.
        s.delete(&[1u64, 3, 3]).unwrap();
        assert_eq!(s.gather_dense(&[0, 1, 2]).unwrap().as_slice(), &[0, 4, 2]);
        assert_eq!(s.stats().live_bytes, 3);
        assert_eq!(s.stats().reclaimable, 2);
        assert!(!s.packed_dense);
        assert_eq!(s.dirty_slots.iter().copied().collect::<Vec<_>>(), vec![1]);
        s.sync().unwrap();
        assert!(s.dirty_slots.is_empty());
    }

    #[test]
    fn an_index_out_of_range_deletes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = bytes_store(&tmp.path().join("s"), 3, Codec::Raw);
        let err = s.delete(&[0i64, -1]).unwrap_err();
        assert!(
            matches!(err, crate::Error::IndexOutOfRange { index: -1, len: 3 }),
            "{err:?}"
        );
        assert_eq!(s.len(), 3);
        assert!(s.dirty_slots.is_empty());
    }
}
