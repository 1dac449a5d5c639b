//! Shards: creating them, checking that they agree, and committing them to
//! a sharded table's manifest in one atomic rename.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::files;
use super::types::{validity_dir, ColumnLayout};
use crate::columnar::{ColumnFile, ValueKind};
use crate::io::Fs;
use crate::repr::{py_list, py_str, py_tuple};
use crate::schema::Kind;
use crate::schema::Logical;
use crate::{Codec, DType, Error, Records, Result, Schema, Store};

/// What every shard of a column must agree on: its schema as records
/// read it (kind, dtype, item shape), the logical type its table records
/// and its layout. Codecs may differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnSpec {
    pub schema: Schema,
    pub logical: Logical,
    pub layout: ColumnLayout,
}

impl ColumnSpec {
    /// A records-layout column of `schema` presented as `logical`.
    pub fn records(schema: Schema, logical: Logical) -> ColumnSpec {
        ColumnSpec {
            schema,
            logical,
            layout: ColumnLayout::Records,
        }
    }

    /// The columnar column of `kind`.
    pub fn columnar(kind: ValueKind) -> ColumnSpec {
        ColumnSpec {
            schema: crate::columnar::schema_of(kind),
            logical: crate::columnar::logical_of(kind),
            layout: ColumnLayout::Columnar,
        }
    }

    /// What a columnar column of this spec holds, if it can be one: dense
    /// scalars, text or bytes.
    pub fn value_kind(&self) -> Option<ValueKind> {
        match (&self.logical, self.schema.item_shape()) {
            (Logical::Utf8, _) => Some(ValueKind::Utf8),
            (Logical::Binary, _) => Some(ValueKind::Binary),
            (Logical::Tensor, Some([])) => Some(ValueKind::Fixed(self.schema.dtype)),
            _ => None,
        }
    }
}

impl std::fmt::Display for ColumnSpec {
    /// `utf8 values`, `dense <f4 item_shape (2, 3)` or `ragged <i2`, and
    /// `(columnar)` after a columnar column's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dtype = self.schema.dtype.numpy_str();
        if self.logical != Logical::Tensor {
            write!(f, "{} values", self.logical)?;
        } else {
            match self.schema.item_shape() {
                Some(shape) => write!(f, "dense {dtype} item_shape {}", py_tuple(shape))?,
                None => write!(f, "ragged {dtype}")?,
            }
        }
        if self.layout == ColumnLayout::Columnar {
            f.write_str(" (columnar)")?;
        }
        Ok(())
    }
}

/// The columns of one plain table (a shard), in name order, and its rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSchema {
    pub columns: Vec<(String, ColumnSpec)>,
    pub rows: u64,
    /// The columnar columns whose files hold nulls (a records column's
    /// nulls are its validity stream, which the shard's listing shows).
    pub nulls: BTreeSet<String>,
}

impl ShardSchema {
    pub(crate) fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|(n, _)| n.as_str()).collect()
    }
}

/// The store subdirectories of the plain table `dir`, sorted:
/// [`Error::Missing`] when `dir` is not a directory, `InvalidValue` when it
/// holds no store.
pub fn column_names(dir: &Path) -> Result<Vec<String>> {
    column_names_in(&Fs::Local, dir)
}

/// [`column_names`] of a table on `fs`.
pub(crate) fn column_names_in(fs: &Fs, dir: &Path) -> Result<Vec<String>> {
    if !files::is_dir(fs, dir) {
        return Err(Error::Missing {
            path: dir.to_path_buf(),
            message: format!("table directory {} does not exist", dir.display()),
        });
    }
    let names = files::column_dirs(fs, dir)?;
    if names.is_empty() {
        return Err(Error::InvalidValue(format!(
            "table directory {} holds no columns (no subdirectory with meta.zr or column.zc)",
            dir.display()
        )));
    }
    Ok(names)
}

/// The schema of the plain table `shard` (opened read-only, metadata only):
/// its columns must have equal lengths.
pub fn shard_schema(shard: &Path) -> Result<ShardSchema> {
    shard_schema_in(&Fs::Local, shard)
}

/// [`shard_schema`] of a shard on `fs`.
pub(crate) fn shard_schema_in(fs: &Fs, shard: &Path) -> Result<ShardSchema> {
    if !files::is_dir(fs, shard) {
        return Err(Error::Missing {
            path: shard.to_path_buf(),
            message: format!("shard directory {} does not exist", shard.display()),
        });
    }
    let names = files::column_dirs(fs, shard)?;
    if names.is_empty() {
        return Err(Error::InvalidValue(format!(
            "shard {} holds no columns (no subdirectory with meta.zr or column.zc)",
            shard.display()
        )));
    }
    let types = super::types::read_types_in(fs, shard)?;
    let mut columns = Vec::with_capacity(names.len());
    let mut lengths = Vec::with_capacity(names.len());
    let mut nulls = BTreeSet::new();
    for name in names {
        let t = types.get(&name).copied().unwrap_or_default();
        let (spec, rows, has_nulls) = column_spec_in(fs, shard, &name, t, None, Open::Full)?;
        lengths.push(rows);
        if has_nulls {
            nulls.insert(name.clone());
        }
        columns.push((name, spec));
    }
    for ((name, _), &n) in columns.iter().zip(&lengths) {
        if n != lengths[0] {
            return Err(Error::InvalidValue(format!(
                "shard {}: columns must have equal lengths, but column {} has {} rows and column {} has {n}",
                shard.display(),
                py_str(&columns[0].0),
                lengths[0],
                py_str(name)
            )));
        }
    }
    Ok(ShardSchema {
        columns,
        rows: lengths[0],
        nulls,
    })
}

/// How much of a records column [`column_spec_in`] reads: its store's
/// header page only (a committed shard's column, whose schema is all that
/// is wanted), or the whole store, every location checked (a new shard's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Open {
    Header,
    Full,
}

/// The spec and rows of column `name` of the plain table `dir`, typed as
/// its table file's `t` says (metadata only), and whether it is a columnar
/// column whose file holds nulls. The layout is the directory's: a
/// columnar column holds `column.zc` (its file says what it holds), a
/// store `meta.zr`; `expect` (a manifest's) must match it. `Corrupted`
/// naming the column's file when it contradicts `expect` or `t`.
pub(crate) fn column_spec_in(
    fs: &Fs,
    dir: &Path,
    name: &str,
    t: super::ColumnType,
    expect: Option<ColumnLayout>,
    open: Open,
) -> Result<(ColumnSpec, u64, bool)> {
    let at = dir.join(name);
    let layout = layout_of(fs, &at, expect)?;
    match layout {
        ColumnLayout::Columnar => {
            let file = ColumnFile::open(fs, &at)?;
            let spec = ColumnSpec::columnar(file.footer().kind);
            check_columnar(&file, t)?;
            Ok((spec, file.rows(), file.footer().nullable))
        }
        ColumnLayout::Records => {
            let (schema, rows) = match open {
                Open::Header => Store::peek(fs, &at)?,
                Open::Full => {
                    let store = Store::open_with(fs, &at, true)?;
                    let found = (store.schema().clone(), store.len());
                    store.close()?;
                    found
                }
            };
            t.logical
                .check(&schema)
                .map_err(|e| Error::InvalidValue(format!("{}: {e}", at.display())))?;
            Ok((ColumnSpec::records(schema, t.logical), rows, false))
        }
    }
}

/// The layout of the column directory `at`: what it holds, which must be
/// `expect` when given (`Corrupted` naming the missing file otherwise).
pub(crate) fn layout_of(fs: &Fs, at: &Path, expect: Option<ColumnLayout>) -> Result<ColumnLayout> {
    let columnar = crate::columnar::is_column_dir(fs, at);
    let found = if columnar {
        ColumnLayout::Columnar
    } else {
        ColumnLayout::Records
    };
    match expect {
        Some(want) if want != found => {
            let missing = match want {
                ColumnLayout::Columnar => crate::columnar::COLUMN_FILE,
                ColumnLayout::Records => "meta.zr",
            };
            Err(Error::corrupted(
                &at.join(missing),
                format!(
                    "the table stores column {} as {want}, but this file is missing",
                    at.display()
                ),
            ))
        }
        _ => Ok(found),
    }
}

/// A columnar column agrees with its table file's entry `t`: the same
/// logical type when the entry names one, never nullable (a columnar
/// column keeps its nulls in its file).
pub(crate) fn check_columnar(file: &ColumnFile, t: super::ColumnType) -> Result<()> {
    let logical = crate::columnar::logical_of(file.footer().kind);
    if t.nullable || (t.logical != Logical::Tensor && t.logical != logical) {
        return Err(Error::corrupted(
            file.path(),
            format!(
                "it holds {} values, but the table file says the column is {}{}",
                logical,
                t.logical,
                if t.nullable {
                    " with a validity stream"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(())
}

/// Checks that the shard `name` (of `schema`) agrees with the shard
/// `reference` (of `want`): the same column names, and per column the same
/// [`ColumnSpec`]. `InvalidValue` naming both shards and what differs.
pub fn check_shard_agrees(
    name: &str,
    schema: &ShardSchema,
    reference: &str,
    want: &ShardSchema,
) -> Result<()> {
    if schema.names() != want.names() {
        return Err(Error::InvalidValue(format!(
            "shard {} has columns {}, but shard {} has {}: every shard must have the same columns",
            py_str(name),
            py_list(&schema.names()),
            py_str(reference),
            py_list(&want.names())
        )));
    }
    for ((col, spec), (_, other)) in schema.columns.iter().zip(&want.columns) {
        if spec != other {
            return Err(Error::InvalidValue(format!(
                "column {}: shard {} holds {spec}, but shard {} holds {other}; shards must agree",
                py_str(col),
                py_str(name),
                py_str(reference)
            )));
        }
    }
    Ok(())
}

/// Gives `shard` an all-valid validity stream for `column` unless it has
/// one (which must then hold `rows` bool rows).
pub(crate) fn ensure_validity(shard: &Path, column: &str, rows: u64) -> Result<()> {
    let v = validity_dir(shard, column);
    if files::is_store(&Fs::Local, &v) {
        let store = Store::open_readonly(&v).and_then(|s| s.require_kind(Kind::Dense))?;
        let (n, dtype) = (store.len(), store.schema().dtype);
        store.close()?;
        if n != rows || dtype != DType::Bool {
            return Err(Error::InvalidValue(format!(
                "shard {}: the validity stream of column {} holds {n} {} rows, expected {rows} bool rows",
                shard.display(),
                py_str(column),
                dtype.numpy_str()
            )));
        }
        return Ok(());
    }
    if files::exists(&Fs::Local, &v) {
        files::remove_dir_all(&v)?; // not a store: something half-made
    }
    // Filled beside and renamed into place, so that a commit failing (or
    // killed) half-way leaves no short stream for the next one to trip on.
    // Stored raw: a row's byte, where a zstd frame of it takes ten.
    let parent = v.parent().expect("a validity stream has a parent");
    let tmp = parent.join(format!(".{column}.{}", files::random_hex(4)));
    let mut store = Store::create(&tmp, Schema::dense(DType::Bool, &[])?, Codec::Raw, None)?;
    let filled = if rows > 0 {
        store.append_dense(&vec![1u8; rows as usize])
    } else {
        Ok(())
    };
    let closed = store.close();
    let placed = filled
        .and(closed)
        .and_then(|()| files::rename_synced(&tmp, &v, parent));
    if placed.is_err() {
        let _ = files::remove_dir_all(&tmp);
    }
    placed
}

impl ColumnSpec {
    /// One spec for the column `column` from several shards' or streams'
    /// specs, the first taken as the expected one: dense when all are dense
    /// of one item shape, else ragged of their common dtype. `InvalidType`
    /// when the logical types (text, bytes, tensors) or the dtypes differ.
    pub fn merge(column: &str, specs: &[ColumnSpec]) -> Result<ColumnSpec> {
        let Some(first) = specs.first() else {
            return Err(Error::InvalidValue(format!(
                "column {column:?}: no stream to take its type from"
            )));
        };
        let describe = |spec: &ColumnSpec| {
            if spec.logical.is_bytes() {
                format!("{} values", spec.logical.name())
            } else {
                format!("{} tensors", spec.schema.dtype.name())
            }
        };
        for spec in &specs[1..] {
            if spec.layout != first.layout {
                return Err(Error::InvalidValue(format!(
                    "column {column:?}: stored as {} (the first block's) and as {} in a later block; a column has one layout",
                    first.layout, spec.layout
                )));
            }
            if spec.logical != first.logical
                && (spec.logical.is_bytes() || first.logical.is_bytes())
            {
                return Err(Error::InvalidType(format!(
                    "column {column:?}: expected {} (the first block's), found {} in a later block",
                    describe(first),
                    describe(spec)
                )));
            }
            if spec.schema.dtype != first.schema.dtype {
                return Err(Error::InvalidType(format!(
                    "column {column:?}: expected dtype {} (the first block's), found {} in a later \
                     block",
                    first.schema.dtype.name(),
                    spec.schema.dtype.name()
                )));
            }
        }
        if specs.iter().all(|s| s.schema == first.schema) {
            return Ok(first.clone());
        }
        Ok(ColumnSpec {
            schema: Schema::ragged(first.schema.dtype),
            logical: first.logical,
            layout: first.layout,
        })
    }
}

/// A new shard's objects (recorded for a remote table) and the columns it
/// has validity streams for.
pub(crate) type Contents = (Option<BTreeMap<String, u64>>, BTreeSet<String>);

/// Bytes of dense records read per run of a rewrite as ragged.
const REWRITE_RUN_BYTES: usize = 16 << 20;

/// Writes every record of the dense store `dense` as a ragged store at
/// `dst` (the same codec and dictionary), in runs of about 16 MiB.
pub(crate) fn copy_as_ragged(dense: &Store, dst: &Path) -> Result<()> {
    use crate::read::ragged::Packed;

    let schema = dense.schema().clone();
    let shape: Vec<u64> = schema.item_shape().unwrap_or(&[]).to_vec();
    let width = schema.dtype.itemsize() * shape.iter().product::<u64>() as usize;
    let mut out = Store::create(
        dst,
        Schema::ragged(schema.dtype),
        dense.codec(),
        dense.dictionary(),
    )?;
    let n = dense.len();
    let step = (REWRITE_RUN_BYTES / width.max(1)).max(1) as u64;
    let mut buf = Vec::new();
    let filled = (|| {
        let mut lo = 0u64;
        while lo < n {
            let hi = (lo + step).min(n);
            let idx: Vec<u64> = (lo..hi).collect();
            buf.resize(idx.len() * width, 0);
            dense.gather_dense_into(&idx, &mut buf)?;
            let mut packed = Packed::layout(idx.iter().map(|_| (shape.as_slice(), width)));
            for (i, payload) in packed.payloads_mut().into_iter().enumerate() {
                payload.copy_from_slice(&buf[i * width..(i + 1) * width]);
            }
            out.append_ragged(&packed)?;
            lo = hi;
        }
        Ok(())
    })();
    let closed = out.close();
    filled.and(closed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_all_valid_stream_is_a_raw_bool_store_of_the_rows_and_is_kept_when_it_fits() {
        let tmp = tempfile::tempdir().unwrap();
        ensure_validity(tmp.path(), "c", 1000).unwrap();
        let v = validity_dir(tmp.path(), "c");
        let store = Store::open_readonly(&v).unwrap();
        assert_eq!((store.len(), store.codec()), (1000, Codec::Raw));
        assert_eq!(store.schema().dtype, DType::Bool);
        assert!((0..1000).all(|i| store.read_record(i).unwrap() == [1u8]));
        drop(store);
        // A row's byte, no frame around it.
        assert_eq!(std::fs::metadata(v.join("data.zr")).unwrap().len(), 1000);
        // Present and of the rows: left as it is; of other rows: refused.
        ensure_validity(tmp.path(), "c", 1000).unwrap();
        let wrong = ensure_validity(tmp.path(), "c", 999);
        assert!(matches!(wrong, Err(Error::InvalidValue(_))), "{wrong:?}");
    }
}
