//! Export: a table of equal-length streams into one Parquet file, row
//! groups encoded in parallel and appended in order, the file renamed into
//! place when complete.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use loaderx::arrow::{self as la, StoreAccess};
use loaderx::{Error, Result};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use rayon::prelude::*;

use crate::parquet_err;

/// Export settings.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Upper bound of one row group, in logical (uncompressed) bytes.
    pub row_group_bytes: usize,
    /// zstd level of the pages.
    pub zstd_level: i32,
    /// Key-value metadata written into the file's footer.
    pub key_value: Vec<(String, String)>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            // Small row groups encode ~3x faster: parquet's per-value level
            // and value buffers for a group stay small enough for the
            // allocator to reuse, instead of fresh pages every group.
            row_group_bytes: 4 << 20,
            zstd_level: 3,
            key_value: Vec::new(),
        }
    }
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportStats {
    pub rows: u64,
    pub row_groups: usize,
    /// Logical bytes read from the stores.
    pub logical_bytes: u64,
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export".into());
    path.with_file_name(format!(".{name}.{}.partial", std::process::id()))
}

/// Exports `streams` (one column each, `index_column` first when named) to
/// the Parquet file `path`. `progress` sees the rows written so far.
///
/// Row groups are encoded in parallel (one per worker thread at a time) and
/// appended in order, so memory stays bounded by a few row groups.
pub fn export<S: StoreAccess>(
    streams: Vec<(String, S)>,
    path: &Path,
    index_column: Option<String>,
    options: ExportOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportStats> {
    // One record batch per row group: a row group is bounded in logical bytes.
    let group_bytes = options.row_group_bytes.max(1);
    let mut reader = la::TableReader::new(streams, index_column, group_bytes)?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    let level = ZstdLevel::try_new(options.zstd_level)
        .map_err(|e| Error::InvalidValue(format!("zstd level {}: {e}", options.zstd_level)))?;
    // Dictionary encoding and per-page statistics cost more than they give
    // on tensor columns of many small values; chunk statistics stay.
    let key_value: Vec<KeyValue> = options
        .key_value
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(None)
        .set_key_value_metadata((!key_value.is_empty()).then_some(key_value))
        .build();
    let tmp = temp_path(path);
    // Failures name the file the caller asked for; the temporary one is
    // removed on any error.
    let file = File::create(&tmp).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let perr = parquet_err(path);
    let result = (|| -> Result<ExportStats> {
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props)).map_err(&perr)?;
        let (mut file_writer, factory) = writer.into_serialized_writer().map_err(&perr)?;
        let mut stats = ExportStats {
            rows: 0,
            row_groups: 0,
            logical_bytes: 0,
        };
        let lanes = loaderx::executor::budget().max(1);
        loop {
            // A wave of up to `lanes` row groups, read in order...
            let mut wave: Vec<RecordBatch> = Vec::with_capacity(lanes);
            for batch in reader.by_ref().take(lanes) {
                wave.push(batch.map_err(|e| loaderx::arrow::from_arrow_error(e, ""))?);
            }
            if wave.is_empty() {
                break;
            }
            // ...encoded in parallel...
            let first = stats.row_groups;
            let encoded: Vec<Result<Vec<ArrowColumnChunk>>> =
                loaderx::executor::pool().install(|| {
                    wave.par_iter()
                        .enumerate()
                        .map(|(k, batch)| encode_group(&factory, first + k, &schema, batch, &perr))
                        .collect()
                });
            // ...and appended in order.
            for (batch, chunks) in wave.iter().zip(encoded) {
                let mut group = file_writer.next_row_group().map_err(&perr)?;
                for chunk in chunks? {
                    chunk.append_to_row_group(&mut group).map_err(&perr)?;
                }
                group.close().map_err(&perr)?;
                stats.rows += batch.num_rows() as u64;
                stats.row_groups += 1;
                stats.logical_bytes += batch.get_array_memory_size() as u64;
                progress(stats.rows);
            }
        }
        file_writer.close().map_err(&perr)?;
        Ok(stats)
    })();
    match result {
        Ok(stats) => {
            std::fs::rename(&tmp, path).map_err(|e| Error::Io {
                path: path.to_path_buf(),
                source: e,
            })?;
            Ok(stats)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Encodes every column of one row group.
fn encode_group(
    factory: &ArrowRowGroupWriterFactory,
    index: usize,
    schema: &arrow_schema::SchemaRef,
    batch: &RecordBatch,
    perr: &impl Fn(parquet::errors::ParquetError) -> Error,
) -> Result<Vec<ArrowColumnChunk>> {
    let writers = factory.create_column_writers(index).map_err(perr)?;
    let mut writers = writers.into_iter();
    let mut chunks = Vec::new();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        for leaf in compute_leaves(field, column).map_err(perr)? {
            let mut w = writers.next().ok_or_else(|| {
                Error::InvalidValue("parquet: more leaves than column writers".into())
            })?;
            w.write(&leaf).map_err(perr)?;
            chunks.push(w.close().map_err(perr)?);
        }
    }
    Ok(chunks)
}
