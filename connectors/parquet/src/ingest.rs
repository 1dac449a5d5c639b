//! Ingest: a Parquet or Arrow IPC file into one new store per column, a
//! failed read reported as the I/O error of the file it came from.

use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;

use arrow_array::RecordBatch;
use arrow_array::RecordBatchReader;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::ArrowError;
use loaderx::arrow::{self as la};
use loaderx::error::Cause;
use loaderx::schema::Kind;
use loaderx::table::{Layouts, TableWrite, WrittenShard};
use loaderx::{Codec, Error, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{ChunkReader, Length};

use crate::parquet_err;
use crate::sniff::{open, sniff, Format};

/// [`parquet_err`] for the Arrow IPC reader.
fn ipc_err(path: &Path) -> impl Fn(ArrowError) -> Error + '_ {
    move |e| {
        loaderx::error::os_error_at(&e, path)
            .unwrap_or_else(|| Error::InvalidValue(format!("{}: {e}", path.display())))
    }
}

/// The batches of a source file, with a read failure reported as the
/// [`Error::Io`] of that file (`loaderx::arrow::ingest` keeps its class).
pub(crate) struct SourceBatches<R> {
    inner: R,
    path: PathBuf,
    /// The errno of a failed read the reader itself reports only as text
    /// (the Parquet reader flattens its errors into strings).
    failed: Option<Arc<ReadFailure>>,
}

impl<R> SourceBatches<R> {
    pub(crate) fn new(inner: R, path: &Path) -> Self {
        SourceBatches {
            inner,
            path: path.to_path_buf(),
            failed: None,
        }
    }
}

impl<R: RecordBatchReader> Iterator for SourceBatches<R> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next()?;
        Some(item.map_err(|e| {
            let os = loaderx::error::os_error_at(&e, &self.path).or_else(|| {
                let code = self.failed.as_ref()?.errno()?;
                Some(Error::Io {
                    path: self.path.clone(),
                    source: io::Error::from_raw_os_error(code),
                })
            });
            match os {
                Some(err) => ArrowError::ExternalError(Box::new(err)),
                None => e,
            }
        }))
    }
}

impl<R: RecordBatchReader> RecordBatchReader for SourceBatches<R> {
    fn schema(&self) -> arrow_schema::SchemaRef {
        self.inner.schema()
    }
}

/// The first OS error (errno) a [`Tracked`] reader met.
#[derive(Default)]
struct ReadFailure(Mutex<Option<i32>>);

impl ReadFailure {
    fn note(&self, err: &(dyn std::error::Error + 'static)) {
        if let Some(Cause::Os(io)) = loaderx::error::cause(err) {
            if let Some(code) = io.raw_os_error() {
                let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(code);
            }
        }
    }

    fn errno(&self) -> Option<i32> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A [`ChunkReader`] that remembers the errno of a failed read, which the
/// Parquet record batch reader would otherwise turn into text.
struct Tracked<C> {
    inner: C,
    failed: Arc<ReadFailure>,
}

impl<C: Length> Length for Tracked<C> {
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

impl<C: ChunkReader> ChunkReader for Tracked<C> {
    type T = TrackedRead<C::T>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        match self.inner.get_read(start) {
            Ok(inner) => Ok(TrackedRead {
                inner,
                failed: Arc::clone(&self.failed),
            }),
            Err(e) => {
                self.failed.note(&e);
                Err(e)
            }
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        self.inner.get_bytes(start, length).inspect_err(|e| {
            self.failed.note(e);
        })
    }
}

struct TrackedRead<R> {
    inner: R,
    failed: Arc<ReadFailure>,
}

impl<R: Read> Read for TrackedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            self.failed.note(e);
        })
    }
}

/// Ingests the Parquet or Arrow IPC file `path` (see [`sniff`]) into one new
/// store per column under `root/<column>` (see `loaderx::arrow::ingest` for
/// the column mapping and the all-or-nothing guarantee).
pub fn ingest(
    path: &Path,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    batch_rows: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, Kind)>> {
    let format = sniff(path)?;
    let file = open(path)?;
    match format {
        Format::Parquet => ingest_parquet(
            file,
            path,
            root,
            codec,
            dict,
            batch_rows,
            &Layouts::records(),
            progress,
        ),
        Format::IpcFile | Format::IpcStream => {
            let file = BufReader::new(file);
            let reader: Box<dyn RecordBatchReader> = if format == Format::IpcFile {
                Box::new(FileReader::try_new(file, None).map_err(ipc_err(path))?)
            } else {
                Box::new(StreamReader::try_new(file, None).map_err(ipc_err(path))?)
            };
            ingest_ipc(
                reader,
                path,
                root,
                codec,
                dict,
                &Layouts::records(),
                progress,
            )
        }
    }
}

/// Ingests the Parquet file `path` as shards of `write` on `workers`
/// threads: its row groups in `shards` runs of consecutive groups (default
/// two per worker, fewer when the file has fewer groups), each read by the
/// worker that writes its shard. An Arrow IPC file is one shard. Returns
/// the shards in file order, each column laid out as `layouts` resolves
/// it; on error none is left.
pub fn ingest_sharded(
    write: &TableWrite,
    path: &Path,
    shards: Option<usize>,
    workers: usize,
    codec: Codec,
    dict: Option<&[u8]>,
    layouts: &Layouts,
) -> Result<Vec<WrittenShard>> {
    match sniff(path)? {
        Format::Parquet => {}
        Format::IpcFile => {
            return write.write_shards(std::iter::once(()), 1, |(), dir| {
                let reader = FileReader::try_new(BufReader::new(open(path)?), None)
                    .map_err(ipc_err(path))?;
                ingest_ipc(reader, path, dir, codec, dict, layouts, &mut |_| {}).map(|_| ())
            })
        }
        Format::IpcStream => {
            return write.write_shards(std::iter::once(()), 1, |(), dir| {
                let reader = StreamReader::try_new(BufReader::new(open(path)?), None)
                    .map_err(ipc_err(path))?;
                ingest_ipc(reader, path, dir, codec, dict, layouts, &mut |_| {}).map(|_| ())
            })
        }
    }
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(parquet_err(path))?;
    // A new table keeps the file's column order.
    write.keep_order(
        builder
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
    );
    let groups = builder.metadata().num_row_groups();
    let parts = shards.unwrap_or(2 * workers.max(1)).clamp(1, groups.max(1));
    let (base, extra) = (groups / parts, groups % parts);
    let mut runs = Vec::with_capacity(parts);
    let mut at = 0;
    for k in 0..parts {
        let n = base + usize::from(k < extra);
        runs.push((at..at + n).collect::<Vec<usize>>());
        at += n;
    }
    write.write_shards(runs.into_iter(), workers, |picked, dir| {
        let failed = Arc::new(ReadFailure::default());
        let chunks = Tracked {
            inner: open(path)?,
            failed: Arc::clone(&failed),
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(chunks)
            .map_err(parquet_err(path))?
            .with_row_groups(picked)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(parquet_err(path))?;
        let source = SourceBatches {
            failed: Some(failed),
            ..SourceBatches::new(reader, path)
        };
        la::ingest_table(source, dir, codec, dict, layouts, &mut |_| {}).map(|_| ())
    })
}

/// Rows per batch read from a Parquet file by [`ingest_sharded`].
const BATCH_ROWS: usize = 16384;

/// [`ingest`] of the batches of an Arrow IPC reader over the file `path`.
fn ingest_ipc<R: RecordBatchReader>(
    reader: R,
    path: &Path,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    layouts: &Layouts,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, Kind)>> {
    make_root(root)?;
    la::ingest_table(
        SourceBatches::new(reader, path),
        root,
        codec,
        dict,
        layouts,
        progress,
    )
}

fn make_root(root: &Path) -> Result<()> {
    std::fs::create_dir_all(root).map_err(|e| Error::Io {
        path: root.to_path_buf(),
        source: e,
    })
}

/// [`ingest`] of the Parquet data `chunks`, read from the file `path`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ingest_parquet<C: ChunkReader + 'static>(
    chunks: C,
    path: &Path,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    batch_rows: usize,
    layouts: &Layouts,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, Kind)>> {
    let failed = Arc::new(ReadFailure::default());
    let chunks = Tracked {
        inner: chunks,
        failed: Arc::clone(&failed),
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(chunks)
        .map_err(parquet_err(path))?
        .with_batch_size(batch_rows.max(1))
        .build()
        .map_err(parquet_err(path))?;
    make_root(root)?;
    let source = SourceBatches {
        failed: Some(failed),
        ..SourceBatches::new(reader, path)
    };
    la::ingest_table(source, root, codec, dict, layouts, progress)
}
