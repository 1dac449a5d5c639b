//! New column groups of a [`ColumnsWrite`] from Arrow data: one shard's
//! ([`write_group`]), or a whole table's new columns cut at the shards'
//! boundaries ([`write_groups`]).

use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};

use super::blocks::{ingest_streams, spread_over_deleted};
use super::ingest::from_arrow_error;
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::io::local::deferring_syncs;
use crate::table::{ColumnsWrite, Layouts};

/// A stream of record batches that may cross threads.
pub type Streams = Vec<Box<dyn RecordBatchReader + Send>>;

/// Writes `readers` (in order: the new values of shard `shard`'s live
/// rows) as the shard's new column group of `write`, laid over its
/// deleted rows ([`spread_over_deleted`]) when it has any.
pub fn write_group(
    write: &ColumnsWrite,
    shard: usize,
    mut readers: Streams,
    codec: Codec,
    layouts: &Layouts,
) -> Result<()> {
    let entry = write.base().shards.get(shard);
    if let Some(entry) = entry.filter(|e| e.rows != e.live_rows()) {
        let deleted = write.deleted(shard)?;
        let schema = readers
            .first()
            .map(|r| r.schema())
            .ok_or_else(|| Error::InvalidValue("sources must hold at least one stream".into()))?;
        let mut batches = Vec::new();
        for r in readers.drain(..) {
            for b in r {
                batches.push(b.map_err(|e| from_arrow_error(e, "reading new columns"))?);
            }
        }
        let spread = spread_over_deleted(schema.clone(), &batches, &deleted, entry.rows)?;
        readers.push(Box::new(RecordBatchIterator::new([Ok(spread)], schema)));
    }
    let dir = write.new_group(shard)?;
    // Nothing names the group before its commit: it is made durable once
    // it is whole (see `deferring_syncs`).
    deferring_syncs(|| {
        if let Err(e) = ingest_streams(readers, &dir, codec, None, layouts, false, &mut |_| {}) {
            write.drop_group(&dir);
            return Err(e);
        }
        write.finish_group(shard, &dir)
    })
}

/// Writes `readers` (in order: new values of the live rows `live` of shard
/// `shard`, strictly increasing positions among its live rows) as the
/// shard's patch of `write`: records columns of the table, those rows
/// only.
pub fn write_patch(
    write: &ColumnsWrite,
    shard: usize,
    readers: Streams,
    codec: Codec,
    live: &[u64],
) -> Result<()> {
    let dir = write.new_patch(shard)?;
    let layouts = Layouts::records();
    // As for a group: durable once whole.
    deferring_syncs(|| {
        if let Err(e) = ingest_streams(readers, &dir, codec, None, &layouts, false, &mut |_| {}) {
            write.drop_group(&dir);
            return Err(e);
        }
        write.finish_patch(shard, &dir, live)
    })
}

/// Cuts `reader` (the new columns of every live row of the table, in row
/// order) at the shards' boundaries and writes each shard's group
/// ([`write_group`]) on `workers` threads, each as soon as its rows are
/// read; a shard without live rows gets the new columns' types (nulls).
/// `InvalidValue` when the rows are not the table's live rows.
pub fn write_groups(
    write: &ColumnsWrite,
    reader: Box<dyn RecordBatchReader + Send>,
    codec: Codec,
    layouts: &Layouts,
    workers: usize,
) -> Result<()> {
    let schema = reader.schema();
    let sizes: Vec<u64> = write.base().shards.iter().map(|s| s.live_rows()).collect();
    let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<RecordBatch>)>(workers.max(1));
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..workers.max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((i, run)) = next else {
                            return Ok(());
                        };
                        let run = if run.is_empty() {
                            vec![RecordBatch::new_empty(schema.clone())]
                        } else {
                            run
                        };
                        let stream: Streams = vec![Box::new(RecordBatchIterator::new(
                            run.into_iter().map(Ok),
                            schema.clone(),
                        ))];
                        write_group(write, i, stream, codec, layouts)?;
                    }
                })
            })
            .collect();
        // A failed worker stops taking runs: the send then fails and the
        // cut stops; the worker's error is the one returned.
        let cut = cut_at(reader, &sizes, &mut |i, run| {
            tx.send((i, run))
                .map_err(|_| Error::InvalidState("a group writer stopped".into()))
        });
        drop(tx);
        let mut first: Option<Error> = None;
        for t in threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert(e);
                }
                Err(_) => {
                    first.get_or_insert(Error::WorkerPanicked("a group writer panicked".into()));
                }
            }
        }
        match (first, cut) {
            (Some(e), _) => Err(e),
            (None, cut) => cut,
        }
    })
}

/// The batches of `reader` cut into runs of `sizes` rows, handed to
/// `each(i, run)` in order as each is complete (a run of 0 rows is empty).
/// `InvalidValue` when its rows are not `sum(sizes)`.
pub(crate) fn cut_at(
    reader: impl Iterator<Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>>,
    sizes: &[u64],
    each: &mut dyn FnMut(usize, Vec<RecordBatch>) -> Result<()>,
) -> Result<()> {
    let total: u64 = sizes.iter().sum();
    let (mut run, mut have, mut i, mut seen) = (Vec::new(), 0u64, 0usize, 0u64);
    // Runs of 0 rows before the first batch's rows.
    while i < sizes.len() && sizes[i] == 0 {
        each(i, Vec::new())?;
        i += 1;
    }
    for batch in reader {
        let mut batch = batch.map_err(|e| from_arrow_error(e, "reading new columns"))?;
        seen += batch.num_rows() as u64;
        if seen > total {
            return Err(Error::InvalidValue(format!(
                "the new columns have more rows than the table ({total})"
            )));
        }
        while batch.num_rows() > 0 {
            let take = (sizes[i] - have).min(batch.num_rows() as u64) as usize;
            run.push(batch.slice(0, take));
            have += take as u64;
            batch = batch.slice(take, batch.num_rows() - take);
            while i < sizes.len() && have == sizes[i] {
                each(i, std::mem::take(&mut run))?;
                have = 0;
                i += 1;
            }
        }
    }
    if seen != total {
        return Err(Error::InvalidValue(format!(
            "the new columns have {seen} rows, but the table has {total}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::cut_at;
    use arrow_array::{Int64Array, RecordBatch};
    use std::sync::Arc;

    #[test]
    fn runs_follow_the_sizes_whatever_the_batches() {
        let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "x",
            arrow_schema::DataType::Int64,
            false,
        )]));
        let batch = |lo: i64, hi: i64| {
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from((lo..hi).collect::<Vec<_>>()))],
            )
            .unwrap()
        };
        let input = vec![Ok(batch(0, 4)), Ok(batch(4, 5)), Ok(batch(5, 9))];
        let mut runs: Vec<(usize, Vec<i64>)> = Vec::new();
        cut_at(input.into_iter(), &[0, 3, 0, 5, 1, 0], &mut |i, run| {
            let v = run
                .iter()
                .flat_map(|b| {
                    let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    a.values().to_vec()
                })
                .collect();
            runs.push((i, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            runs,
            vec![
                (0, vec![]),
                (1, vec![0, 1, 2]),
                (2, vec![]),
                (3, vec![3, 4, 5, 6, 7]),
                (4, vec![8]),
                (5, vec![]),
            ]
        );
        let err = cut_at(vec![Ok(batch(0, 3))].into_iter(), &[2], &mut |_, _| Ok(())).unwrap_err();
        assert!(
            err.to_string().contains("more rows than the table (2)"),
            "{err}"
        );
        let err = cut_at(vec![Ok(batch(0, 1))].into_iter(), &[2], &mut |_, _| Ok(())).unwrap_err();
        assert!(
            err.to_string().contains("have 1 rows, but the table has 2"),
            "{err}"
        );
    }
}
