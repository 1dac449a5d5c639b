//! Training samples for the `zstd_dict` codec, read from records.

use crate::codec::dict::sample_plan;
use crate::error::Result;
use crate::read::records::Records;

/// A strided sample of a store's records (their logical bytes, back to back,
/// and each one's size) within `budget` bytes, for [`crate::dict::train`].
pub fn sample_store(store: &dyn Records, budget: usize) -> Result<(Vec<u8>, Vec<usize>)> {
    let n = store.len() as usize;
    let plan = sample_plan(n, |i| store.logical_len(i as u64).unwrap_or(0), budget);
    let mut bytes = Vec::new();
    let mut sizes = Vec::with_capacity(plan.len());
    for i in plan {
        let rec = store.read_record(i as u64)?;
        sizes.push(rec.len());
        bytes.extend_from_slice(&rec);
    }
    Ok((bytes, sizes))
}
