//! The row path of a scan: rows gathered in byte-bounded runs, a filter
//! evaluated on its columns first and the projected columns gathered for
//! the rows it keeps.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_data::transform::MutableArrayData;
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, SchemaRef};

use crate::error::{Error, Result};
use crate::read::records::StoreAccess;
use crate::store;

use crate::arrow::gather::{arrow_err, gather_array};

use super::{to_arrow, Scan, BYTES_WINDOW};

impl<S: StoreAccess> Scan<S> {
    /// Column `c` of the rows `ids` (record ids, ascending).
    pub(super) fn gather_one(&self, c: usize, ids: &[u64]) -> Result<ArrayRef> {
        let offset = usize::from(self.index);
        if c < offset {
            return Ok(Arc::new(UInt64Array::from(ids.to_vec())));
        }
        self.streams[c - offset].1.with(|s| gather_array(s, ids))
    }

    /// Gathers the columns at `columns` at rows `ids` as a batch of `schema`.
    pub(super) fn gather(
        &self,
        columns: &[usize],
        ids: &[u64],
        schema: &SchemaRef,
    ) -> Result<RecordBatch> {
        let offset = usize::from(self.index);
        // A scan touches the whole table over time: keep large records out
        // of the process's mapped pages.
        let arrays = store::streaming(|| {
            columns
                .iter()
                .map(|&c| -> Result<ArrayRef> {
                    if c < offset {
                        Ok(Arc::new(UInt64Array::from(ids.to_vec())))
                    } else {
                        self.streams[c - offset].1.with(|s| gather_array(s, ids))
                    }
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let opts = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &opts).map_err(arrow_err)
    }

    /// The output batch of rows that passed the filter: the projected
    /// columns the filter read come from its batches, the rest are gathered.
    pub(super) fn assemble(&mut self, taken: &[(u64, usize, usize, usize)]) -> Result<RecordBatch> {
        let ids: Vec<u64> = taken.iter().map(|t| t.0).collect();
        let f = self.filter.as_ref().expect("a filter");
        let gathered: Vec<usize> = self
            .projection
            .iter()
            .copied()
            .filter(|c| !f.columns.contains(c))
            .collect();
        let schema = Arc::new(
            self.schema
                .project(&gathered)
                .map_err(|e| Error::InvalidValue(e.to_string()))?,
        );
        let mut gathered = self
            .gather(&gathered, &ids, &schema)?
            .columns()
            .to_vec()
            .into_iter();
        let f = self.filter.as_mut().expect("a filter");
        let mut arrays = Vec::with_capacity(self.projection.len());
        for c in &self.projection {
            match f.columns.iter().position(|fc| fc == c) {
                Some(j) => {
                    arrays.push(take_runs(&f.chunks, f.first_chunk, j, taken).map_err(arrow_err)?)
                }
                None => arrays.push(gathered.next().expect("one gathered column per place")),
            }
        }
        // Drop the chunks no pending row refers to any more.
        let keep_from = f
            .pending
            .front()
            .map_or(f.first_chunk + f.chunks.len(), |p| p.1);
        while f.first_chunk < keep_from && !f.chunks.is_empty() {
            f.chunks.pop_front();
            f.first_chunk += 1;
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(ids.len()));
        RecordBatch::try_new_with_options(Arc::clone(&self.out_schema), arrays, &opts)
            .map_err(arrow_err)
    }

    /// Logical bytes of the output rows `rows`: one call into each ragged
    /// stream for all of them (a binding's stream takes its lock per call).
    pub(super) fn rows_bytes(&self, rows: impl Iterator<Item = u64> + Clone) -> Result<Vec<usize>> {
        let mut bytes: Vec<usize> = rows.clone().map(|_| self.fixed_bytes).collect();
        for &i in &self.ragged {
            self.streams[i].1.with(|s| {
                for (b, row) in bytes.iter_mut().zip(rows.clone()) {
                    *b += s.logical_len(row).unwrap_or(0);
                }
                Ok(())
            })?;
        }
        Ok(bytes)
    }

    /// The next rows of the row ranges, in order: as many as fit `max_bytes`
    /// of output (`max_rows` at most; one at least), or None at the end.
    pub(super) fn next_rows(
        &mut self,
        max_bytes: usize,
        max_rows: usize,
    ) -> Result<Option<Vec<u64>>> {
        let mut ids = Vec::new();
        let mut bytes = 0usize;
        let bounded = max_bytes != usize::MAX;
        while self.at < self.ranges.len() {
            let end = self.ranges[self.at].end;
            while self.pos < end {
                // Row sizes a window at a time; the window's unused tail is
                // sized again by the next call.
                let room = (max_rows - ids.len().min(max_rows)).max(1) as u64;
                let window = (end - self.pos).min(room).min(BYTES_WINDOW);
                let sizes = if bounded {
                    self.rows_bytes(self.pos..self.pos + window)?
                } else {
                    vec![0; window as usize]
                };
                for b in sizes {
                    if !ids.is_empty() && (bytes + b > max_bytes || ids.len() >= max_rows) {
                        return Ok(Some(ids));
                    }
                    bytes += b;
                    ids.push(self.pos);
                    self.pos += 1;
                }
            }
            self.at += 1;
            if let Some(r) = self.ranges.get(self.at) {
                self.pos = r.start;
            }
        }
        Ok((!ids.is_empty()).then_some(ids))
    }

    /// Runs the filter on the next rows and queues those that pass; false
    /// once the row ranges are exhausted.
    pub(super) fn refill(&mut self) -> std::result::Result<bool, ArrowError> {
        let Some(rows) = self.filter.as_ref().map(|f| f.rows) else {
            return Ok(false);
        };
        let Some(ids) = self.next_rows(usize::MAX, rows).map_err(to_arrow)? else {
            return Ok(false);
        };
        let f = self.filter.as_ref().expect("a filter");
        let batch = self.gather(&f.columns, &ids, &f.schema).map_err(to_arrow)?;
        let f = self.filter.as_mut().expect("a filter");
        let mask = (f.keep)(&batch)?;
        if mask.len() != ids.len() {
            return Err(ArrowError::ComputeError(format!(
                "the scan's filter gave {} values for a batch of {} rows",
                mask.len(),
                ids.len()
            )));
        }
        let kept: Vec<(usize, u64)> = ids
            .into_iter()
            .zip(mask.iter())
            .enumerate()
            .filter_map(|(at, (id, keep))| keep.unwrap_or(false).then_some((at, id)))
            .collect();
        let sizes = self
            .rows_bytes(kept.iter().map(|&(_, id)| id))
            .map_err(to_arrow)?;
        let f = self.filter.as_mut().expect("a filter");
        let chunk = f.first_chunk + f.chunks.len();
        let before = f.pending.len();
        f.pending.extend(
            kept.into_iter()
                .zip(sizes)
                .map(|((at, id), b)| (id, chunk, at, b)),
        );
        if f.pending.len() > before {
            f.chunks.push_back(batch);
        } else if f.chunks.is_empty() {
            f.first_chunk += 1;
        } else {
            // Keep chunk numbers dense: an empty placeholder for a chunk
            // no row came from.
            f.chunks
                .push_back(RecordBatch::new_empty(Arc::clone(&f.schema)));
        }
        Ok(true)
    }
}

/// Column `column` of the filter batches at the rows `taken` (in order),
/// copied run by run.
fn take_runs(
    chunks: &VecDeque<RecordBatch>,
    first_chunk: usize,
    column: usize,
    taken: &[(u64, usize, usize, usize)],
) -> std::result::Result<ArrayRef, ArrowError> {
    let lo = taken[0].1 - first_chunk;
    let hi = taken[taken.len() - 1].1 - first_chunk;
    let data: Vec<ArrayData> = (lo..=hi)
        .map(|c| chunks[c].column(column).to_data())
        .collect();
    let mut out = MutableArrayData::new(data.iter().collect(), false, taken.len());
    let mut i = 0;
    while i < taken.len() {
        let (_, chunk, start, _) = taken[i];
        let mut end = start + 1;
        while i + 1 < taken.len() && taken[i + 1].1 == chunk && taken[i + 1].2 == end {
            end += 1;
            i += 1;
        }
        out.try_extend(chunk - first_chunk - lo, start, end)?;
        i += 1;
    }
    Ok(make_array(out.freeze()))
}
