//! What a file to import holds (Parquet, Arrow IPC file or stream), from
//! its magic bytes, and a Parquet file's row count from its footer.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use loaderx::{Error, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::parquet_err;

/// What a file to import holds, from its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Parquet,
    /// The Arrow IPC file format (`.arrow`, `.feather` v2).
    IpcFile,
    /// The Arrow IPC stream format (`.arrows`).
    IpcStream,
}

pub(crate) fn open(path: &Path) -> Result<File> {
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

/// The value of key `key` in a Parquet file's key-value metadata (its
/// footer), None when the file has no such key.
pub fn key_value(path: &Path, key: &str) -> Result<Option<String>> {
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(parquet_err(path))?;
    Ok(builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == key))
        .and_then(|e| e.value.clone()))
}
