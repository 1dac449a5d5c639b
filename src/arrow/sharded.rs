//! Arrow sources ingested as shards of a table, on the write's threads
//! ([`TableWrite::write_shards`]): each source one shard, or one one-pass
//! stream cut into runs of about `run_bytes`.

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_schema::SchemaRef;

use super::ingest::{from_arrow_error, ingest_table};
use crate::codec::Codec;
use crate::error::Result;
use crate::table::{Layouts, TableWrite, WrittenShard};

/// A source of one shard.
type Source = Box<dyn RecordBatchReader + Send>;

/// Writes `sources` as shards of `write` on `workers` threads (see
/// [`ingest`](super::ingest) for the column mapping): one shard per source, or, with
/// `run_bytes` and one source, one shard per run of consecutive batches of
/// about that many bytes (at least one shard, maybe empty; at most
/// `workers` runs in memory), each column laid out as `layouts` resolves
/// it. Returns the shards in source order; on error none is left.
pub fn ingest_shards(
    write: &TableWrite,
    sources: Vec<Source>,
    run_bytes: Option<usize>,
    workers: usize,
    codec: Codec,
    dict: Option<&[u8]>,
    layouts: &Layouts,
) -> Result<Vec<WrittenShard>> {
    let fill = |reader: Source, dir: &std::path::Path| {
        ingest_table(reader, dir, codec, dict, layouts, &mut |_| {}).map(|_| ())
    };
    match (run_bytes, sources.len()) {
        (Some(run_bytes), 1) => {
            let reader = sources.into_iter().next().expect("one source");
            let runs = Runs {
                schema: reader.schema(),
                reader,
                run_bytes: run_bytes.max(1),
                any: false,
                done: false,
            };
            write.write_shards(runs, workers, |run: Result<Run>, dir| {
                let (schema, run) = run?;
                fill(
                    Box::new(RecordBatchIterator::new(run.into_iter().map(Ok), schema)),
                    dir,
                )
            })
        }
        _ => write.write_shards(sources.into_iter(), workers, fill),
    }
}

/// A run of batches and their schema.
type Run = (SchemaRef, Vec<RecordBatch>);

/// Runs of consecutive batches of a one-pass stream.
struct Runs {
    reader: Source,
    schema: SchemaRef,
    run_bytes: usize,
    any: bool,
    done: bool,
}

impl Iterator for Runs {
    type Item = Result<Run>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (mut run, mut size) = (Vec::new(), 0usize);
        loop {
            match self.reader.next() {
                Some(Ok(batch)) => {
                    size += batch.get_array_memory_size();
                    run.push(batch);
                    if size >= self.run_bytes {
                        self.any = true;
                        return Some(Ok((Arc::clone(&self.schema), run)));
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(from_arrow_error(e, "reading the source: ")));
                }
                None => {
                    self.done = true;
                    if run.is_empty() && self.any {
                        return None;
                    }
                    self.any = true;
                    return Some(Ok((Arc::clone(&self.schema), run)));
                }
            }
        }
    }
}
