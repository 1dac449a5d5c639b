//! Writing one columnar column: values arrive in batches of any size, are
//! cut into chunks of about [`CHUNK_BYTES`] of decoded values, encoded and
//! appended to a temporary file; [`ColumnWriter::finish`] writes the
//! footer, syncs the file and renames it into place (`column.zc` inside
//! the column's directory), so that the column exists whole or not at all.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::encode::{encode_chunk, Values};
use super::format::{Entry, Footer, ValueKind, COLUMN_FILE, MAGIC, VERSION};
use super::fsst;
use crate::error::{Error, Result};
use crate::io::local;

/// Decoded bytes of one chunk's values (a text chunk ends at the first
/// value that reaches it): small enough that a random read decodes little
/// more than it needs, large enough to compress well.
pub const CHUNK_BYTES: usize = 64 << 10;
/// At most this many rows in a chunk (booleans, empty text).
pub const CHUNK_ROWS: usize = 64 << 10;

/// A column being written (see the module documentation).
pub struct ColumnWriter {
    dir: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
    kind: ValueKind,
    compress: bool,
    nullable: bool,
    entries: Vec<Entry>,
    at: u64,
    rows: u64,
    /// Rows not yet in a chunk: numbers' bytes, or text's offsets and data.
    fixed: Vec<u8>,
    offsets: Vec<u64>,
    data: Vec<u8>,
    /// Their validity, once a null was seen (true: valid).
    valid: Vec<bool>,
    any_null: bool,
    out: Vec<u8>,
    /// Text and bytes: the symbol table trained on the first chunk (None
    /// before it, or when coding does not pay) and its bytes.
    coder: Option<fsst::Compressor>,
    symbols: Vec<u8>,
}

impl ColumnWriter {
    /// Starts the column `kind` in the directory `dir` (created, with its
    /// parents; it must not hold a column already): `compress` codes text
    /// and bytes with a symbol table trained on the first chunk where that
    /// makes them smaller (numbers are stored raw either way: a random
    /// read finds each in place).
    pub fn create(dir: &Path, kind: ValueKind, compress: bool) -> Result<ColumnWriter> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let target = dir.join(COLUMN_FILE);
        if target.exists() {
            return Err(Error::AlreadyExists {
                path: dir.to_path_buf(),
                reason: format!("a column already exists here ({COLUMN_FILE})"),
            });
        }
        let tmp = dir.join(format!(".{COLUMN_FILE}.{}", crate::io::random_hex(4)));
        let file = local::open_rw(&tmp, true).map_err(|e| Error::io(&tmp, e))?;
        local::pwrite(&file, MAGIC, 0).map_err(|e| Error::io(&tmp, e))?;
        Ok(ColumnWriter {
            dir: dir.to_path_buf(),
            tmp,
            file: Some(file),
            kind,
            compress,
            nullable: false,
            entries: Vec::new(),
            at: MAGIC.len() as u64,
            rows: 0,
            fixed: Vec::new(),
            offsets: vec![0],
            data: Vec::new(),
            valid: Vec::new(),
            any_null: false,
            out: Vec::new(),
            coder: None,
            symbols: Vec::new(),
        })
    }

    pub fn kind(&self) -> ValueKind {
        self.kind
    }

    /// Rows written so far (chunked or pending).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn pending(&self) -> usize {
        match self.kind {
            ValueKind::Fixed(d) => self.fixed.len() / d.itemsize(),
            _ => self.offsets.len() - 1,
        }
    }

    /// Rows per chunk of numbers.
    fn fixed_rows(&self) -> usize {
        match self.kind {
            ValueKind::Fixed(crate::DType::Bool) => CHUNK_ROWS,
            ValueKind::Fixed(d) => (CHUNK_BYTES / d.itemsize()).min(CHUNK_ROWS),
            _ => CHUNK_ROWS,
        }
    }

    fn note_validity(&mut self, n: usize, valid: Option<&dyn Fn(usize) -> bool>) {
        match valid {
            Some(v) => {
                if !self.any_null {
                    if (0..n).all(v) {
                        return;
                    }
                    self.any_null = true;
                    self.nullable = true;
                    self.valid = vec![true; self.pending() - n];
                }
                self.valid.extend((0..n).map(v));
            }
            None if self.any_null => self.valid.extend(std::iter::repeat_n(true, n)),
            None => {}
        }
    }

    /// Appends numbers: `bytes` holds whole values of the column's dtype,
    /// little-endian (booleans one byte each, nonzero true); `valid(i)` is
    /// false for a null row (its value is ignored).
    pub fn push_fixed(
        &mut self,
        bytes: &[u8],
        valid: Option<&dyn Fn(usize) -> bool>,
    ) -> Result<()> {
        let ValueKind::Fixed(dtype) = self.kind else {
            return Err(Error::InvalidType(format!(
                "column {} holds {:?} values, not numbers",
                self.dir.display(),
                self.kind
            )));
        };
        let w = dtype.itemsize();
        debug_assert_eq!(bytes.len() % w, 0);
        let n = bytes.len() / w;
        let per = self.fixed_rows();
        let mut done = 0;
        while done < n {
            let take = (per - self.pending()).min(n - done);
            self.fixed
                .extend_from_slice(&bytes[done * w..(done + take) * w]);
            let shifted = valid.map(|v| move |i: usize| v(done + i));
            self.note_validity(take, shifted.as_ref().map(|f| f as &dyn Fn(usize) -> bool));
            done += take;
            self.rows += take as u64;
            if self.pending() == per {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Appends text or bytes values: `value(i)` for `i < n`; `valid(i)` is
    /// false for a null row (its value is ignored). Text must be UTF-8.
    pub fn push_bytes<'v>(
        &mut self,
        n: usize,
        value: &dyn Fn(usize) -> &'v [u8],
        valid: Option<&dyn Fn(usize) -> bool>,
    ) -> Result<()> {
        if !self.kind.is_bytes() {
            return Err(Error::InvalidType(format!(
                "column {} holds numbers, not text or bytes",
                self.dir.display()
            )));
        }
        for i in 0..n {
            let ok = valid.is_none_or(|v| v(i));
            let v = if ok { value(i) } else { &[][..] };
            if self.kind == ValueKind::Utf8 && ok && std::str::from_utf8(v).is_err() {
                let name = self
                    .dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(Error::InvalidValue(format!(
                    "column {name:?} is utf8, but row {} does not hold valid UTF-8",
                    self.rows
                )));
            }
            if v.len() > i32::MAX as usize - CHUNK_BYTES {
                return Err(Error::InvalidValue(format!(
                    "row {} of column {} holds {} bytes; a columnar value holds less than 2 GiB (store large values in a records column)",
                    self.rows,
                    self.dir.display(),
                    v.len()
                )));
            }
            self.data.extend_from_slice(v);
            self.offsets.push(self.data.len() as u64);
            let row_valid = move |_: usize| ok;
            self.note_validity(1, valid.map(|_| &row_valid as &dyn Fn(usize) -> bool));
            self.rows += 1;
            if self.data.len() >= CHUNK_BYTES || self.pending() >= CHUNK_ROWS {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Encodes the pending rows as one chunk and appends it to the file.
    fn flush(&mut self) -> Result<()> {
        let rows = self.pending();
        if rows == 0 {
            return Ok(());
        }
        let values = match self.kind {
            ValueKind::Fixed(_) => Values::Fixed(&self.fixed),
            _ => Values::Bytes {
                offsets: &self.offsets,
                data: &self.data,
            },
        };
        let valid = self.any_null.then_some(&self.valid[..]);
        if self.entries.is_empty() && self.kind.is_bytes() && self.compress {
            // The first chunk's values train the file's symbol table.
            let mut sample = Vec::new();
            let mut bytes = 0;
            for i in (0..rows).filter(|&i| valid.is_none_or(|v| v[i])) {
                let v = &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize];
                sample.push(v);
                bytes += v.len();
                if bytes >= fsst::TRAIN_BYTES {
                    break;
                }
            }
            if let Some((table, coder)) = fsst::train(&sample) {
                self.symbols = table;
                self.coder = Some(coder);
            }
        }
        self.out.clear();
        let mut e = encode_chunk(
            self.kind,
            rows,
            values,
            valid,
            self.coder.as_ref(),
            self.at,
            &mut self.out,
        )?;
        e.offset = self.at;
        let file = self.file.as_ref().expect("open until finished");
        local::pwrite(file, &self.out, self.at).map_err(|e| Error::io(&self.tmp, e))?;
        self.at += self.out.len() as u64;
        self.entries.push(e);
        self.fixed.clear();
        self.offsets.truncate(1);
        self.data.clear();
        self.valid.clear();
        self.any_null = false;
        Ok(())
    }

    /// Writes the last chunk and the footer, syncs the file and renames it
    /// into place; returns the rows written. On error nothing is left.
    pub fn finish(mut self) -> Result<u64> {
        let done = self.finish_inner();
        if done.is_err() {
            self.file = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
        done
    }

    fn finish_inner(&mut self) -> Result<u64> {
        self.flush()?;
        let footer = Footer {
            version: VERSION,
            kind: self.kind,
            compressed: self.compress,
            nullable: self.nullable,
            rows: self.rows,
            entries: std::mem::take(&mut self.entries),
            symbols_len: self.symbols.len() as u16,
            symbols: self.symbols.clone(),
        };
        let bytes = footer.encode(self.at);
        let file = self.file.take().expect("open until finished");
        let io = |e| Error::io(&self.tmp, e);
        local::pwrite(&file, &self.symbols, self.at).map_err(io)?;
        let at = self.at + self.symbols.len() as u64;
        local::pwrite(&file, &bytes, at).map_err(io)?;
        local::sync_all(&file).map_err(io)?;
        drop(file);
        let target = self.dir.join(COLUMN_FILE);
        local::rename_noreplace(&self.tmp, &target).map_err(|e| Error::io(&target, e))?;
        local::sync_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        Ok(self.rows)
    }

    /// Gives up: removes the temporary file.
    pub fn discard(mut self) {
        self.file = None;
        let _ = std::fs::remove_file(&self.tmp);
    }
}

impl Drop for ColumnWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Rows read per step by [`write_records`].
const COPY_ROWS: usize = 1 << 16;

/// Writes rows `rows` of `src` (numbers, text or bytes read through
/// [`Records`], with their nulls) as a new columnar column of `kind` in
/// `dir`: how compaction copies a column's live rows and how a records
/// column becomes columnar. Returns the rows written.
pub(crate) fn write_records(
    src: &dyn crate::Records,
    kind: ValueKind,
    rows: &[u64],
    dir: &Path,
    compress: bool,
) -> Result<u64> {
    let mut w = ColumnWriter::create(dir, kind, compress)?;
    for run in rows.chunks(COPY_ROWS) {
        let valid = match src.validity() {
            Some(v) => Some(v.gather_dense(run)?),
            None => None,
        };
        let ok = valid.as_ref().map(|v| {
            let v = v.as_slice();
            move |i: usize| v[i] != 0
        });
        let ok = ok.as_ref().map(|f| f as &dyn Fn(usize) -> bool);
        match kind {
            ValueKind::Fixed(_) => {
                let bytes = src.gather_dense(run)?;
                w.push_fixed(bytes.as_slice(), ok)?;
            }
            ValueKind::Utf8 | ValueKind::Binary => {
                let batch = src.gather_ragged(run)?;
                let values = (0..batch.len())
                    .map(|i| {
                        crate::schema::bytes_value(&batch.record(i))
                            .map_err(|e| Error::corrupted(src.path(), e))
                    })
                    .collect::<Result<Vec<&[u8]>>>()?;
                w.push_bytes(values.len(), &|i| values[i], ok)?;
            }
        }
    }
    w.finish()
}
