//! Parquet export and ingest for loaderx stores.
//!
//! Export streams a table of equal-length streams into one Parquet file:
//! record batches bounded in bytes, row groups bounded in bytes, zstd pages,
//! and the Arrow schema (with its tensor extension types) kept in the file's
//! metadata, so pyarrow, polars and DuckDB read the columns back as written.
//! The file appears only when complete (it is written beside the target and
//! renamed). Ingest streams a Parquet file back into one store per column.

mod export;
mod ingest;
mod sniff;

use std::path::Path;

use loaderx::Error;
use parquet::errors::ParquetError;

pub use export::{export, ExportOptions, ExportStats};
pub use ingest::{ingest, ingest_sharded};
pub use sniff::{key_value, row_count, sniff, Format};

/// A Parquet failure on the file `path`: an OS error it carries (a full
/// disk, a failing read) stays an I/O error naming `path`; anything else is
/// bad data.
fn parquet_err(path: &Path) -> impl Fn(ParquetError) -> Error + '_ {
    move |e| {
        loaderx::error::os_error_at(&e, path)
            .unwrap_or_else(|| Error::InvalidValue(format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loaderx::schema::Kind;
    use loaderx::Codec;
    use loaderx::Packed;
    use loaderx::{DType, Records, Schema, Store};
    use std::fs::File;
    use std::io;
    use std::sync::Arc;

    use parquet::file::reader::{ChunkReader, Length};

    use crate::ingest::{ingest_parquet, SourceBatches};
    use arrow_array::RecordBatch;
    use arrow_schema::ArrowError;
    use loaderx::arrow as la;
    use parquet::arrow::ArrowWriter;

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
        let err = ingest_parquet(
            chunks,
            &src,
            &root,
            Codec::Zstd,
            None,
            1024,
            &loaderx::table::Layouts::records(),
            &mut |_| {},
        )
        .unwrap_err();
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
