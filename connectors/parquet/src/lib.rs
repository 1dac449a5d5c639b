//! Parquet export and ingest for loaderx stores.
//!
//! Export streams a table of equal-length streams into one Parquet file:
//! record batches bounded in bytes, row groups bounded in bytes, zstd pages,
//! and the Arrow schema (with its tensor extension types) kept in the file's
//! metadata, so pyarrow, polars and DuckDB read the columns back as written.
//! The file appears only when complete (it is written beside the target and
//! renamed). Ingest streams a Parquet file back into one store per column.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use arrow_array::RecordBatchReader;
use loaderx::arrow::{self as la, StoreAccess};
use loaderx::error::{Cause, Kind};
use loaderx::{Codec, Error, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::ArrowError;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{ChunkReader, Length};
use rayon::prelude::*;

/// Export settings.
#[derive(Clone, Copy, Debug)]
pub struct ExportOptions {
    /// Upper bound of one row group, in logical (uncompressed) bytes.
    pub row_group_bytes: usize,
    /// zstd level of the pages.
    pub zstd_level: i32,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            // Small row groups encode ~3x faster: parquet's per-value level
            // and value buffers for a group stay small enough for the
            // allocator to reuse, instead of fresh pages every group.
            row_group_bytes: 4 << 20,
            zstd_level: 3,
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

/// A Parquet failure on the file `path`: an OS error it carries (a full
/// disk, a failing read) stays an I/O error naming `path`; anything else is
/// bad data.
fn parquet_err(path: &Path) -> impl Fn(ParquetError) -> Error + '_ {
    move |e| {
        loaderx::error::os_error_at(&e, path)
            .unwrap_or_else(|| Error::InvalidValue(format!("{}: {e}", path.display())))
    }
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
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(None)
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

/// What a file to import holds, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Parquet,
    /// The Arrow IPC file format (`.arrow`, `.feather` v2).
    IpcFile,
    /// The Arrow IPC stream format (`.arrows`).
    IpcStream,
}

fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

/// Recognises a Parquet file (`PAR1`), an Arrow IPC file (`ARROW1`) or an
/// Arrow IPC stream (a continuation marker) by its magic bytes.
pub fn sniff(path: &Path) -> Result<Format> {
    let mut head = [0u8; 8];
    let n = open(path)?.read(&mut head).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let head = &head[..n];
    if head.starts_with(b"PAR1") {
        Ok(Format::Parquet)
    } else if head.starts_with(b"ARROW1") {
        Ok(Format::IpcFile)
    } else if head.starts_with(&[0xFF, 0xFF, 0xFF, 0xFF]) {
        Ok(Format::IpcStream)
    } else {
        Err(Error::InvalidValue(format!(
            "{}: expected a Parquet file (PAR1) or an Arrow IPC file (ARROW1) or stream, \
             found the bytes {head:02x?}",
            path.display()
        )))
    }
}

/// Rows of a Parquet file (from its footer); `None` for Arrow IPC, whose row
/// counts are spread over the batches.
pub fn row_count(path: &Path) -> Result<Option<u64>> {
    match sniff(path)? {
        Format::Parquet => {
            let builder =
                ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(parquet_err(path))?;
            Ok(Some(
                builder.metadata().file_metadata().num_rows().max(0) as u64
            ))
        }
        // Batch lengths live in each batch's header, not in the footer.
        Format::IpcFile | Format::IpcStream => Ok(None),
    }
}

/// [`parquet_err`] for the Arrow IPC reader.
fn ipc_err(path: &Path) -> impl Fn(ArrowError) -> Error + '_ {
    move |e| {
        loaderx::error::os_error_at(&e, path)
            .unwrap_or_else(|| Error::InvalidValue(format!("{}: {e}", path.display())))
    }
}

/// The batches of a source file, with a read failure reported as the
/// [`Error::Io`] of that file (`loaderx::arrow::ingest` keeps its class).
struct SourceBatches<R> {
    inner: R,
    path: PathBuf,
    /// The errno of a failed read the reader itself reports only as text
    /// (the Parquet reader flattens its errors into strings).
    failed: Option<Arc<ReadFailure>>,
}

impl<R> SourceBatches<R> {
    fn new(inner: R, path: &Path) -> Self {
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
        Format::Parquet => ingest_parquet(file, path, root, codec, dict, batch_rows, progress),
        Format::IpcFile => {
            let reader = FileReader::try_new(BufReader::new(file), None).map_err(ipc_err(path))?;
            make_root(root)?;
            la::ingest(
                SourceBatches::new(reader, path),
                root,
                codec,
                dict,
                progress,
            )
        }
        Format::IpcStream => {
            let reader =
                StreamReader::try_new(BufReader::new(file), None).map_err(ipc_err(path))?;
            make_root(root)?;
            la::ingest(
                SourceBatches::new(reader, path),
                root,
                codec,
                dict,
                progress,
            )
        }
    }
}

fn make_root(root: &Path) -> Result<()> {
    std::fs::create_dir_all(root).map_err(|e| Error::Io {
        path: root.to_path_buf(),
        source: e,
    })
}

/// [`ingest`] of the Parquet data `chunks`, read from the file `path`.
fn ingest_parquet<C: ChunkReader + 'static>(
    chunks: C,
    path: &Path,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    batch_rows: usize,
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
    la::ingest(source, root, codec, dict, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loaderx::Packed;
    use loaderx::{DType, Records, Schema, Store};

    /// Ten raw (2, 3) uint8 records holding 0..60, at `dir/img`.
    fn image_store(dir: &Path) -> Store {
        let mut img = Store::create(
            dir.join("img"),
            Schema::dense(DType::U8, &[2, 3]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        img.append_dense(&(0..60u8).collect::<Vec<_>>()).unwrap();
        img
    }

    #[test]
    fn export_and_ingest_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let img = image_store(dir.path());
        let mut tok = Store::create(
            dir.path().join("tok"),
            Schema::ragged(DType::I32),
            Codec::Zstd,
            None,
        )
        .unwrap();
        let mut p = Packed::default();
        for i in 0..10u64 {
            let v: Vec<u8> = (0..=i as i32).flat_map(|x| x.to_le_bytes()).collect();
            p.push(&[i + 1], &v);
        }
        tok.append_ragged(&p).unwrap();
        let out = dir.path().join("t.parquet");
        let mut seen = 0;
        let stats = export(
            vec![("img".to_string(), &img), ("tok".to_string(), &tok)],
            &out,
            Some("record_id".into()),
            ExportOptions::default(),
            &mut |r| seen = r,
        )
        .unwrap();
        assert_eq!((stats.rows, seen), (10, 10));
        assert_eq!(row_count(&out).unwrap(), Some(10));
        let made = ingest(
            &out,
            &dir.path().join("back"),
            Codec::Zstd,
            None,
            4,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(
            made,
            vec![
                ("record_id".to_string(), Kind::Dense),
                ("img".to_string(), Kind::Dense),
                ("tok".to_string(), Kind::Ragged)
            ]
        );
        let back = Store::open(dir.path().join("back/img")).unwrap();
        assert_eq!(back.schema().item_shape(), Some(&[2u64, 3][..]));
        assert_eq!(back.read_record(9).unwrap(), img.read_record(9).unwrap());
        let back = Store::open(dir.path().join("back/tok")).unwrap();
        assert_eq!(back.read_record(7).unwrap(), tok.read_record(7).unwrap());
    }

    #[test]
    fn failed_export_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let a = Store::create(
            dir.path().join("a"),
            Schema::dense(DType::U8, &[]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        let mut b = Store::create(
            dir.path().join("b"),
            Schema::dense(DType::U8, &[]).unwrap(),
            Codec::Raw,
            None,
        )
        .unwrap();
        b.append_dense(&[1]).unwrap();
        let out = dir.path().join("x.parquet");
        let err = export(
            vec![("a".into(), &a), ("b".into(), &b)],
            &out,
            None,
            ExportOptions::default(),
            &mut |_| {},
        );
        assert!(err.is_err());
        assert!(!out.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn ingest_reads_arrow_ipc_files_and_streams() {
        use arrow_array::{ArrayRef, Int64Array, RecordBatch};
        use arrow_ipc::writer::{FileWriter, StreamWriter};

        let dir = tempfile::tempdir().unwrap();
        let img = image_store(dir.path());
        let idx: Vec<u64> = (0..10).collect();
        let image = la::gather_array(&img, &idx).unwrap();
        let label: ArrayRef =
            Arc::new(Int64Array::from((0..10).map(|i| i * 3).collect::<Vec<_>>()));
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            la::field_for(img.schema(), "image"),
            arrow_schema::Field::new("label", arrow_schema::DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![image, label]).unwrap();

        let file = dir.path().join("t.arrow");
        let mut w = FileWriter::try_new(File::create(&file).unwrap(), &schema).unwrap();
        w.write(&batch.slice(0, 4)).unwrap();
        w.write(&batch.slice(4, 6)).unwrap();
        w.finish().unwrap();
        let stream = dir.path().join("t.arrows");
        let mut w = StreamWriter::try_new(File::create(&stream).unwrap(), &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();

        assert_eq!(sniff(&file).unwrap(), Format::IpcFile);
        assert_eq!(sniff(&stream).unwrap(), Format::IpcStream);
        assert_eq!(row_count(&file).unwrap(), None);
        for (src, name) in [(&file, "from-file"), (&stream, "from-stream")] {
            let root = dir.path().join(name);
            let mut rows = 0;
            let made = ingest(src, &root, Codec::Zstd, None, 1024, &mut |r| rows = r).unwrap();
            assert_eq!(
                made,
                vec![
                    ("image".to_string(), Kind::Dense),
                    ("label".to_string(), Kind::Dense)
                ]
            );
            assert_eq!(rows, 10, "{name}: progress counts every row");
            let back = Store::open(root.join("image")).unwrap();
            assert_eq!(back.len(), 10);
            for i in 0..10 {
                assert_eq!(back.read_record(i).unwrap(), img.read_record(i).unwrap());
            }
            let labels = Store::open(root.join("label")).unwrap();
            assert_eq!(labels.read_record(7).unwrap(), 21i64.to_le_bytes());
        }
    }

    /// Parquet bytes whose reads fail with `errno` below `fail_below`.
    struct FailingChunks {
        bytes: bytes::Bytes,
        fail_below: u64,
        errno: i32,
    }

    impl Length for FailingChunks {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }
    }

    impl ChunkReader for FailingChunks {
        type T = <bytes::Bytes as ChunkReader>::T;

        fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
            if start < self.fail_below {
                return Err(io::Error::from_raw_os_error(self.errno).into());
            }
            self.bytes.get_read(start)
        }

        fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
            if start < self.fail_below {
                return Err(io::Error::from_raw_os_error(self.errno).into());
            }
            self.bytes.get_bytes(start, length)
        }
    }

    fn assert_io_error(err: Error, path: &Path, errno: i32) {
        match err {
            Error::Io { path: p, source } => {
                assert_eq!(p, path);
                assert_eq!(source.raw_os_error(), Some(errno), "{source}");
            }
            other => panic!("expected an I/O error on {}, got {other:?}", path.display()),
        }
    }

    #[test]
    fn a_failing_parquet_read_is_an_io_error_naming_the_file() {
        use arrow_array::{ArrayRef, Int64Array};

        let dir = tempfile::tempdir().unwrap();
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
        let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        // Everything before the footer (the column chunks) fails to read.
        let n = buf.len();
        let meta_len = u32::from_le_bytes(buf[n - 8..n - 4].try_into().unwrap()) as u64;
        let chunks = FailingChunks {
            bytes: bytes::Bytes::from(buf),
            fail_below: n as u64 - 8 - meta_len,
            errno: 5, // EIO
        };
        let src = dir.path().join("src.parquet");
        let root = dir.path().join("out");
        let err =
            ingest_parquet(chunks, &src, &root, Codec::Zstd, None, 1024, &mut |_| {}).unwrap_err();
        assert_io_error(err, &src, 5);
        assert!(
            std::fs::read_dir(&root).map_or(true, |mut d| d.next().is_none()),
            "no store is left behind"
        );
    }

    #[test]
    fn a_failing_source_batch_is_an_io_error_naming_the_file() {
        use arrow_array::{ArrayRef, Int64Array, RecordBatchIterator};

        let dir = tempfile::tempdir().unwrap();
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10));
        let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
        let schema = batch.schema();
        let failing = ArrowError::IoError(
            "reading a batch".into(),
            io::Error::from_raw_os_error(5), // EIO
        );
        let reader = RecordBatchIterator::new([Ok(batch), Err(failing)], schema);
        let src = dir.path().join("src.arrows");
        let root = dir.path().join("out");
        let err = la::ingest(
            SourceBatches::new(reader, &src),
            &root,
            Codec::Zstd,
            None,
            &mut |_| {},
        )
        .unwrap_err();
        assert_io_error(err, &src, 5);
        assert!(!root.join("v").exists(), "the partial store is removed");
    }

    #[test]
    fn export_to_a_missing_directory_names_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let img = image_store(dir.path());
        let out = dir.path().join("missing/t.parquet");
        let err = export(
            vec![("img".to_string(), &img)],
            &out,
            None,
            ExportOptions::default(),
            &mut |_| {},
        )
        .unwrap_err();
        assert_io_error(err, &out, 2); // ENOENT
    }

    #[test]
    fn ingest_refuses_a_file_of_another_format() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("t.csv");
        std::fs::write(&csv, b"a,b\n1,2\n").unwrap();
        let err = ingest(
            &csv,
            &dir.path().join("out"),
            Codec::Zstd,
            None,
            16,
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("expected a Parquet file"), "{err}");
        assert!(!dir.path().join("out").exists(), "nothing is created");
    }
}
