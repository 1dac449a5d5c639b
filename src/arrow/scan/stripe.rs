//! The stripe path of a scan of columnar columns: stripes of rows read as
//! whole arrays (slices of the decoded chunks), a predicate evaluated by
//! the core on the stored chunks.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt64Array};
use arrow_schema::ArrowError;

use crate::error::Result;
use crate::read::records::StoreAccess;

use crate::arrow::gather::gather_array;

use super::{to_arrow, Scan, STRIPE_MAX_ROWS, STRIPE_ROWS};

impl<S: StoreAccess> Scan<S> {
    /// The next stripe of the row ranges: at most `rows` rows, within one
    /// range; None at the end.
    pub(super) fn take_stripe(&mut self, rows: u64) -> Option<Range<u64>> {
        while self.at < self.ranges.len() {
            let end = self.ranges[self.at].end;
            if self.pos < end {
                let lo = self.pos;
                let hi = end.min(lo + rows.max(1));
                self.pos = hi;
                return Some(lo..hi);
            }
            self.at += 1;
            if let Some(r) = self.ranges.get(self.at) {
                self.pos = r.start;
            }
        }
        None
    }

    /// Column `c` (an index into the schema) of rows `rows` as one array.
    pub(super) fn stripe_column(&self, c: usize, rows: &Range<u64>) -> Result<ArrayRef> {
        let offset = usize::from(self.index);
        if c < offset {
            return Ok(Arc::new(UInt64Array::from_iter_values(rows.clone())));
        }
        self.streams[c - offset].1.with(|s| {
            let Some(col) = s.columnar() else {
                // A columnar column with patches: its chunks' slices with
                // the patched values laid over them.
                if let Some(a) = crate::arrow::gather::overlay_range(s, rows.start, rows.end)? {
                    return Ok(a);
                }
                return gather_array(s, &rows.clone().collect::<Vec<u64>>());
            };
            match col.selection() {
                None => col.read_range(rows.start, rows.end),
                Some(_) => {
                    let ids: Vec<u64> = rows.clone().collect();
                    col.take_array(&ids)
                }
            }
        })
    }

    /// The next batch of a scan of columnar columns: stripes of rows read
    /// as whole arrays (slices of the decoded chunks), filtered by the
    /// filter's mask when there is one; empty stripes are skipped.
    pub(super) fn next_stripe(&mut self) -> std::result::Result<Option<RecordBatch>, ArrowError> {
        let bound = (self.max_bytes / self.row_bytes).max(1) as u64;
        loop {
            if self.remaining == 0 {
                return Ok(None);
            }
            let cap = if self.filter.is_some() {
                STRIPE_ROWS
            } else {
                STRIPE_MAX_ROWS
            };
            let mut rows = cap.min(bound).min(self.max_rows as u64);
            if self.filter.is_none() {
                rows = rows.min(self.remaining as u64);
            }
            let Some(stripe) = self.take_stripe(rows) else {
                return Ok(None);
            };
            let n = (stripe.end - stripe.start) as usize;
            let mut filtered: Vec<(usize, ArrayRef)> = Vec::new();
            // Columns whose rows kept are read already (filtered).
            let mut done: Vec<(usize, ArrayRef)> = Vec::new();
            let mask = match self.filter.as_ref().map(|f| f.columns.clone()) {
                None if self.pred.is_some() => 'mask: {
                    let (named, pred) = self.pred.as_ref().expect("a predicate");
                    let offset = usize::from(self.index);
                    // One comparison of a column the batch projects: its
                    // rows kept and their values in one pass (a narrowed
                    // chunk compared as stored, only the rows kept widened).
                    let single = match pred {
                        crate::columnar::Pred::Cmp(c) => Some(&c.column),
                        crate::columnar::Pred::Text(name, ..) => Some(name),
                        _ => None,
                    };
                    if let Some(name) = single {
                        let i = named.iter().find(|(c, _)| c == name).map_or(0, |(_, i)| *i);
                        if self.projection.contains(&(i + offset)) {
                            let got = self.streams[i].1.with(|s| match s.columnar() {
                                Some(col) => {
                                    col.filter_range(stripe.start, stripe.end, pred).map(Some)
                                }
                                None => Ok(None),
                            });
                            if let Some((bits, kept)) = got.map_err(to_arrow)? {
                                done.push((i + offset, kept));
                                break 'mask Some(BooleanArray::new(bits, None));
                            }
                        }
                    }
                    // A column the batch projects is read whole anyway: its
                    // comparisons run on what is read (read once); the
                    // others on the stored chunks.
                    let mut read: Vec<(usize, ArrayRef)> = Vec::new();
                    let mut failed = None;
                    let bits = pred.eval_with(n, &mut |leaf| {
                        let name = leaf.columns()[0];
                        let i = named.iter().find(|(c, _)| c == name).map_or(0, |(_, i)| *i);
                        if self.projection.contains(&(i + offset)) {
                            // No chunk of the stripe can match: nothing read.
                            if let crate::columnar::Pred::Cmp(c) = leaf {
                                let may = self.streams[i].1.with(|s| {
                                    Ok(s.columnar().is_none_or(|col| {
                                        col.may_match(stripe.start, stripe.end, c)
                                    }))
                                })?;
                                if !may {
                                    return Ok(arrow_buffer::BooleanBuffer::new_unset(n));
                                }
                            }
                            let array = match read.iter().find(|(c, _)| *c == i + offset) {
                                Some((_, a)) => Arc::clone(a),
                                None => {
                                    let a = self.stripe_column(i + offset, &stripe)?;
                                    read.push((i + offset, Arc::clone(&a)));
                                    a
                                }
                            };
                            return crate::columnar::compare_array(array.as_ref(), leaf);
                        }
                        self.streams[i].1.with(|s| match s.columnar() {
                            Some(col) => leaf.eval_leaf(col, stripe.start, stripe.end),
                            // Changed under the scan: every row passes.
                            None => Ok(arrow_buffer::BooleanBuffer::new_set(n)),
                        })
                    });
                    let bits = match bits {
                        Ok(b) => b,
                        Err(e) => {
                            failed = Some(e);
                            arrow_buffer::BooleanBuffer::new_unset(0)
                        }
                    };
                    if let Some(e) = failed {
                        return Err(to_arrow(e));
                    }
                    filtered = read;
                    Some(BooleanArray::new(bits, None))
                }
                None => None,
                Some(columns) => {
                    for &c in &columns {
                        filtered.push((c, self.stripe_column(c, &stripe).map_err(to_arrow)?));
                    }
                    let f = self.filter.as_mut().expect("a filter");
                    let batch = RecordBatch::try_new_with_options(
                        Arc::clone(&f.schema),
                        filtered.iter().map(|(_, a)| Arc::clone(a)).collect(),
                        &RecordBatchOptions::new().with_row_count(Some(n)),
                    )?;
                    let mask = (f.keep)(&batch)?;
                    if mask.len() != n {
                        return Err(ArrowError::ComputeError(format!(
                            "the scan's filter gave {} values for a batch of {n} rows",
                            mask.len()
                        )));
                    }
                    // Null counts as false.
                    let mask = match mask.nulls() {
                        Some(nulls) => BooleanArray::new(mask.values() & nulls.inner(), None),
                        None => mask,
                    };
                    Some(mask)
                }
            };
            let kept = mask.as_ref().map_or(n, |m| m.true_count());
            if kept == 0 {
                continue;
            }
            let mut arrays = Vec::with_capacity(self.projection.len());
            let offset = usize::from(self.index);
            for &c in &self.projection {
                if let Some((_, a)) = done.iter().find(|(dc, _)| *dc == c) {
                    arrays.push(Arc::clone(a));
                    continue;
                }
                let a = match filtered.iter().find(|(fc, _)| *fc == c) {
                    Some((_, a)) => Arc::clone(a),
                    // The index column of the rows kept, made as such.
                    None if c < offset && kept < n => {
                        let m = mask.as_ref().expect("a mask");
                        let ids = m.values().set_indices().map(|i| stripe.start + i as u64);
                        arrays.push(Arc::new(UInt64Array::from_iter_values(ids)) as ArrayRef);
                        continue;
                    }
                    None if mask.is_some() && kept <= n / 4096 => {
                        // Very few rows pass (fewer than chunks): gather just those.
                        let m = mask.as_ref().expect("a mask");
                        let ids: Vec<u64> = m
                            .values()
                            .set_indices()
                            .map(|i| stripe.start + i as u64)
                            .collect();
                        arrays.push(self.gather_one(c, &ids).map_err(to_arrow)?);
                        continue;
                    }
                    None => self.stripe_column(c, &stripe).map_err(to_arrow)?,
                };
                arrays.push(match &mask {
                    Some(m) if kept < n => arrow_select::filter::filter(a.as_ref(), m)?,
                    _ => a,
                });
            }
            let batch = RecordBatch::try_new_with_options(
                Arc::clone(&self.out_schema),
                arrays,
                &RecordBatchOptions::new().with_row_count(Some(kept)),
            )?;
            let batch = if kept > self.remaining {
                batch.slice(0, self.remaining)
            } else {
                batch
            };
            self.remaining -= batch.num_rows();
            return Ok(Some(batch));
        }
    }
}
