//! Opening a table, plain or sharded, with one call: named columns that
//! gather, convert to Arrow and feed the [`crate::DataLoader`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files;
use super::manifest::{is_sharded_in, shard_dir, ShardEntry, MANIFEST_FILE};
use super::shard::column_names_in;
use super::types::{read_types_in, validity_dir};
use super::versions::{read_manifest_in, VersionRef};
use super::ColumnLayout;
use crate::columnar::{ColumnFile, Columnar};
use crate::io::Fs;
use crate::read::Overlay;
use crate::repr::{py_list, py_str};
use crate::schema::Kind;
use crate::schema::Logical;
use crate::Concat;
use crate::Location;
use crate::{check_validity, Records, StoreAccess};
use crate::{Buffer, Codec, Error, Result, Schema, Store};
use crate::{RaggedBatch, ReadCounters, Stats};

/// The records of a column: one store (a plain table's), or read-only
/// stores end to end (a sharded table's).
#[derive(Debug)]
// One per column, held for the column's life: boxing the store would buy
// nothing but an indirection on every gather.
#[allow(clippy::large_enum_variant)]
pub enum Stream {
    Store(Store),
    Concat(Concat),
    /// A columnar column (one file per shard, end to end).
    Columnar(Columnar),
    /// A columnar column (or its validity) with patches laid over it.
    Overlay(Overlay),
}

impl Stream {
    /// The records, as every reader takes them.
    pub fn records(&self) -> &dyn Records {
        match self {
            Stream::Store(s) => s,
            Stream::Concat(c) => c,
            Stream::Columnar(c) => c,
            Stream::Overlay(o) => o,
        }
    }

    /// The store, for writing (a plain table's writable column); None for
    /// the read-only kinds.
    pub fn store_mut(&mut self) -> Option<&mut Store> {
        match self {
            Stream::Store(s) => Some(s),
            _ => None,
        }
    }

    /// Each part's rows (a store's length, or every shard's).
    pub fn part_lengths(&self) -> Vec<u64> {
        match self {
            Stream::Store(s) => vec![s.len()],
            Stream::Concat(c) => c.parts().iter().map(Store::len).collect(),
            Stream::Columnar(c) => c.parts().iter().map(ColumnFile::rows).collect(),
            Stream::Overlay(o) => o.part_lengths(),
        }
    }

    pub fn close(self) -> Result<()> {
        match self {
            Stream::Store(s) => s.close(),
            Stream::Concat(c) => c.close(),
            Stream::Columnar(c) => c.close(),
            Stream::Overlay(_) => Ok(()),
        }
    }
}

/// A named column of a table: its records, how the table presents them
/// ([`Logical`]) and, for a nullable column, its validity stream. As
/// [`Records`] it reads as the table presents it (text, binary, nulls).
#[derive(Debug)]
pub struct Column {
    name: String,
    data: Stream,
    logical: Logical,
    validity: Option<Stream>,
}

impl Column {
    /// Checks that `data` can hold `logical` and that `validity` fits it.
    /// On failure both are closed.
    pub fn new(
        name: impl Into<String>,
        data: Stream,
        logical: Logical,
        validity: Option<Stream>,
    ) -> Result<Column> {
        let column = Column {
            name: name.into(),
            data,
            logical,
            validity,
        };
        let checked = column
            .logical
            .check(column.data.records().schema())
            .map_err(|e| {
                Error::InvalidValue(format!("{}: {e}", column.data.records().path().display()))
            })
            .and_then(|()| match &column.validity {
                Some(v) => check_validity(column.data.records(), v.records()),
                None => Ok(()),
            });
        match checked {
            Ok(()) => Ok(column),
            Err(e) => {
                let _ = column.close();
                Err(e)
            }
        }
    }

    /// [`Column::new`] of a store column whose validity stream (when it
    /// has one) is the dense store at `validity` on `fs`, opened
    /// read-only; `data` is closed when it cannot be opened.
    pub(crate) fn with_validity_at(
        name: impl Into<String>,
        data: Store,
        logical: Logical,
        fs: &Fs,
        validity: Option<&Path>,
    ) -> Result<Column> {
        let validity = match validity {
            None => None,
            Some(at) => match Store::open_kind_at(fs, at, Kind::Dense, true) {
                Ok(v) => Some(Stream::Store(v)),
                Err(e) => {
                    let _ = data.close();
                    return Err(e);
                }
            },
        };
        Column::new(name, Stream::Store(data), logical, validity)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The column's own records (for a nullable column, placeholders at
    /// the nulls).
    pub fn data(&self) -> &Stream {
        &self.data
    }

    /// The records, for a write (a plain table's writable store).
    pub fn data_mut(&mut self) -> &mut Stream {
        &mut self.data
    }

    pub fn validity_stream(&self) -> Option<&Stream> {
        self.validity.as_ref()
    }

    /// `(name, records, logical type, validity)`, for a binding that keeps
    /// the parts in handles of its own.
    pub fn into_parts(self) -> (String, Stream, Logical, Option<Stream>) {
        (self.name, self.data, self.logical, self.validity)
    }

    /// Closes the records and the validity stream; the first error wins.
    pub fn close(self) -> Result<()> {
        let first = self.data.close();
        match self.validity {
            Some(v) => first.and(v.close()),
            None => first,
        }
    }
}

impl Records for Column {
    fn path(&self) -> &Path {
        self.data.records().path()
    }
    fn schema(&self) -> &Schema {
        self.data.records().schema()
    }
    fn codec(&self) -> Codec {
        self.data.records().codec()
    }
    fn len(&self) -> u64 {
        self.data.records().len()
    }
    fn logical_len(&self, i: u64) -> Option<usize> {
        self.data.records().logical_len(i)
    }
    fn stats(&self) -> Stats {
        self.data.records().stats()
    }
    fn read_counters(&self) -> ReadCounters {
        self.data.records().read_counters()
    }
    fn is_readonly(&self) -> bool {
        self.data.records().is_readonly()
    }
    fn checksum(&self) -> bool {
        self.data.records().checksum()
    }
    fn gather_dense_into(&self, idx: &[u64], dst: &mut [u8]) -> Result<()> {
        self.data.records().gather_dense_into(idx, dst)
    }
    fn gather_dense(&self, idx: &[u64]) -> Result<Buffer> {
        self.data.records().gather_dense(idx)
    }
    fn gather_ragged(&self, idx: &[u64]) -> Result<RaggedBatch> {
        self.data.records().gather_ragged(idx)
    }
    fn read_record(&self, i: u64) -> Result<Vec<u8>> {
        self.data.records().read_record(i)
    }
    fn logical(&self) -> Logical {
        self.logical
    }
    fn validity(&self) -> Option<&dyn Records> {
        match &self.validity {
            Some(v) => Some(v.records()),
            None => self.data.records().validity(),
        }
    }
    fn columnar(&self) -> Option<&crate::columnar::Columnar> {
        self.data.records().columnar()
    }
    fn stored_columnar(&self) -> bool {
        self.data.records().stored_columnar()
    }
    fn overlay(&self) -> Option<&Overlay> {
        self.data.records().overlay()
    }
}

impl StoreAccess for Column {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> Result<T>) -> Result<T> {
        f(self)
    }
}

/// One committed shard of an open sharded table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The shard's directory (a plain table).
    pub dir: PathBuf,
    pub rows: u64,
}

/// An open table, plain or sharded: named columns of one length.
#[derive(Debug)]
pub struct Table {
    location: Location,
    path: PathBuf,
    columns: Vec<Column>,
    shards: Option<Vec<Shard>>,
    num_rows: u64,
    version: Option<u64>,
}

/// Closes what an open that failed half-way had opened.
fn close_all(columns: Vec<Column>) {
    for c in columns {
        let _ = c.close();
    }
}

impl Table {
    /// Opens the table at `path`, plain or sharded (one holding
    /// `manifest.json`).
    ///
    /// A plain table's columns are its store subdirectories in name order,
    /// typed as its `table.json` records, opened read-only (shared locks)
    /// or, with `readonly == false`, writable. A sharded table opens
    /// read-only only: each column is a [`Concat`] of that column's store in
    /// every committed shard, typed and nullable as the manifest records.
    ///
    /// Errors: [`Error::Missing`] when `path` is not a directory;
    /// `InvalidValue` when it holds no store, when columns' lengths differ
    /// (naming both columns and lengths), when shards disagree on a
    /// column's schema, for a sharded table with no committed shard or
    /// opened with `readonly == false`; [`Error::Corrupted`] naming
    /// `manifest.json` and the rule for a manifest that is malformed, names
    /// a missing shard or disagrees with a shard's columns or rows; and
    /// what opening a store raises.
    pub fn open(path: impl AsRef<Path>, readonly: bool) -> Result<Table> {
        Table::open_in(Location::local(path.as_ref()), readonly)
    }

    /// Opens the table at `location`: [`Table::open`] of a local path, or a
    /// remote table, which opens read-only only (`InvalidValue` naming the
    /// URI otherwise). A remote open costs one listing of the table (or of
    /// each shard the manifest does not describe, concurrently) and one
    /// concurrent round of fetches of every store's `meta.zr` and
    /// `dict.zr`; no request depends on the number of records.
    pub fn open_at(location: &Location, readonly: bool) -> Result<Table> {
        location.check_readonly(readonly, "table")?;
        super::warm::warm(location, None, false)?;
        Table::open_in(location.clone(), readonly)
    }

    /// [`Table::open_at`] of the latest version, read-only, by a handle
    /// that may commit new versions from it: a table in a bucket at
    /// version 1 is opened with one listing of its version files in place
    /// of the request for version 2's file, which also tells a commit from
    /// it whether version 1's file is there ([`super::Basis::opened`]).
    pub fn open_to_write(location: &Location) -> Result<Table> {
        super::warm::warm(location, None, true)?;
        Table::open_in(location.clone(), true)
    }

    fn open_in(location: Location, readonly: bool) -> Result<Table> {
        let fs = location.fs().clone();
        let path = location.path().to_path_buf();
        let path = path.as_path();
        if super::files::is_dir(&fs, path) && is_sharded_in(&fs, path) {
            if !readonly {
                return Err(Error::InvalidValue(format!(
                    "sharded table {} opens read-only, got a writable open: its shards are written whole, so new data goes into new shards",
                    path.display()
                )));
            }
            return Table::open_sharded(location.clone(), None);
        }
        super::files::check_complete(&fs, path)?;
        let columns = open_columns_in(&fs, path, readonly, None)?;
        let num_rows = columns[0].len();
        if let Some(odd) = columns.iter().find(|c| c.len() != num_rows) {
            let msg = format!(
                "table {}: columns must have equal lengths, but column {} has {num_rows} rows and column {} has {}",
                path.display(),
                py_str(columns[0].name()),
                py_str(odd.name()),
                odd.len()
            );
            close_all(columns);
            return Err(Error::InvalidValue(msg));
        }
        Ok(Table {
            location: location.clone(),
            path: path.to_path_buf(),
            columns,
            shards: None,
            num_rows,
            version: None,
        })
    }

    /// Opens the sharded table at `location` as the manifest `manifest`
    /// (the bytes of a `manifest.json` read earlier) describes it, not as
    /// the one there now says: Ray's read tasks pin the shards the driver
    /// planned with, whatever is committed meanwhile.
    pub fn open_pinned(location: &Location, manifest: &[u8]) -> Result<Table> {
        location.check_readonly(true, "table")?;
        let file = location.path().join(MANIFEST_FILE);
        let parsed = super::manifest::parse_manifest(&file, manifest)?;
        super::warm::warm(location, Some(manifest), false)?;
        Table::open_sharded(location.clone(), Some(parsed))
    }

    /// Opens version `want` of the sharded table at `location`, read-only
    /// (see `versions::resolve` for what an unknown version or
    /// tag raises). The latest opens as [`Table::open_at`] opens it.
    pub fn open_version(location: &Location, want: &VersionRef) -> Result<Table> {
        if *want == VersionRef::Latest {
            return Table::open_at(location, true);
        }
        location.check_readonly(true, "table")?;
        let resolved = super::versions::resolve(location.fs(), location.path(), want)?;
        Table::open_pinned(location, &resolved.bytes)
    }

    fn open_sharded(location: Location, pinned: Option<super::Manifest>) -> Result<Table> {
        Table::open_selected(location, pinned, None)
    }

    /// Opens the view `name` of the sharded table at `location`: the
    /// version it was made from, restricted to its rows (record ids
    /// `0..len` in the order of the version), read-only.
    pub fn open_view(location: &Location, name: &str) -> Result<Table> {
        location.check_readonly(true, "table")?;
        let fs = location.fs();
        let view = super::versions::view(fs, location.path(), name)?;
        let resolved =
            super::versions::resolve(fs, location.path(), &VersionRef::Number(view.version))?;
        let ids = view.read_rows(fs, location.path())?;
        let file = location.path().join(super::versions::view_rel(name));
        let parsed = resolved.manifest;
        super::warm::warm(location, Some(&resolved.bytes), false)?;
        Table::open_selected(location.clone(), Some(parsed), Some((&file, ids)))
    }

    /// [`Table::open_sharded`] presenting only the rows `view` (record ids
    /// of the version, strictly increasing), when given.
    fn open_selected(
        location: Location,
        pinned: Option<super::Manifest>,
        view: Option<(&Path, Vec<u64>)>,
    ) -> Result<Table> {
        let fs = location.fs().clone();
        let path = location.path();
        // The manifest is written last (after every shard, by a commit or a
        // copy), so a sharded table needs no completeness check.
        let manifest = match pinned {
            Some(m) => {
                super::manifest::check_shards_present(&fs, path, &m)?;
                m
            }
            None => read_manifest_in(&fs, path)?,
        };
        if manifest.shards.is_empty() {
            return Err(Error::InvalidValue(format!(
                "sharded table {} has no committed shards",
                path.display()
            )));
        }
        let file = path.join(MANIFEST_FILE);
        let dirs: Vec<PathBuf> = manifest
            .shards
            .iter()
            .map(|s| shard_dir(path, &s.name))
            .collect();
        let patches = Patches::read(&fs, path, &manifest.shards)?;
        for (shard, dir) in manifest.shards.iter().zip(&dirs) {
            // Every column the manifest names, where the shard keeps it (a
            // shard may hold more: columns a later version dropped).
            let mut present = column_names_in(&fs, dir)?;
            for g in &shard.groups {
                present.extend(column_names_in(&fs, &dir.join(&g.dir))?);
            }
            let missing = manifest.columns.iter().any(|c| {
                let at = shard.column_path(path, c);
                match manifest.layout(c) {
                    ColumnLayout::Records => !files::is_store(&fs, &at),
                    ColumnLayout::Columnar => !crate::columnar::is_column_dir(&fs, &at),
                }
            });
            if missing {
                present.sort();
                present.dedup();
                return Err(Error::corrupted(
                    &file,
                    format!(
                        "shard {} holds columns {}, but the manifest names {}",
                        py_str(&shard.name),
                        py_list(&present),
                        py_list(&manifest.columns)
                    ),
                ));
            }
        }
        let (selection, shard_rows) = selection(&fs, path, &manifest, view)?;
        let mut columns: Vec<Column> = Vec::with_capacity(manifest.columns.len());
        for name in &manifest.columns {
            let opened = (|| {
                let col = path.join(name);
                let parts = manifest.shards.iter().map(|s| s.column_path(path, name));
                let data = match manifest.layout(name) {
                    ColumnLayout::Records => {
                        let layers = patches.layers(&manifest.shards, name, false);
                        concat(&fs, &col, parts, None, layers, selection.as_ref())?
                    }
                    ColumnLayout::Columnar if patches.any(&manifest.shards, name) => {
                        let (data, validity, _) = patched_columnar(
                            &fs,
                            &col,
                            parts,
                            manifest.is_nullable(name),
                            patches.layers(&manifest.shards, name, false),
                            patches.layers(&manifest.shards, name, true),
                            selection.as_ref(),
                        )?;
                        let held = data.records().logical();
                        if held != manifest.logical(name) {
                            let _ = data.close();
                            return Err(Error::corrupted(
                                &file,
                                format!(
                                    "it says column {} is {}, but its column files hold {held} values",
                                    py_str(name),
                                    manifest.logical(name),
                                ),
                            ));
                        }
                        let parts = data.part_lengths();
                        let column = Column::new(name, data, manifest.logical(name), validity)?;
                        return check_part_rows(&file, &manifest.shards, name, parts, column);
                    }
                    ColumnLayout::Columnar => {
                        let c = Columnar::open(&fs, &col, parts, selection.clone())?;
                        if c.logical() != manifest.logical(name) {
                            return Err(Error::corrupted(
                                &file,
                                format!(
                                    "it says column {} is {}, but its column files hold {:?} values",
                                    py_str(name),
                                    manifest.logical(name),
                                    c.kind()
                                ),
                            ));
                        }
                        Stream::Columnar(c)
                    }
                };
                let validity = if manifest.has_validity(name) {
                    let mut vname = col.clone().into_os_string();
                    vname.push(".validity");
                    match concat(
                        &fs,
                        Path::new(&vname),
                        manifest.shards.iter().map(|s| s.validity_path(path, name)),
                        Some(Kind::Dense),
                        patches.layers(&manifest.shards, name, true),
                        selection.as_ref(),
                    ) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            let _ = data.close();
                            return Err(e);
                        }
                    }
                } else {
                    None
                };
                let parts = data.part_lengths();
                let column = Column::new(name, data, manifest.logical(name), validity)?;
                check_part_rows(&file, &manifest.shards, name, parts, column)
            })();
            match opened {
                Ok(c) => columns.push(c),
                Err(e) => {
                    close_all(columns);
                    return Err(e);
                }
            }
        }
        Ok(Table {
            location: location.clone(),
            path: path.to_path_buf(),
            num_rows: shard_rows.iter().sum(),
            version: Some(manifest.version()),
            columns,
            shards: Some(
                manifest
                    .shards
                    .iter()
                    .zip(dirs)
                    .zip(shard_rows)
                    .map(|((_, dir), rows)| Shard { dir, rows })
                    .collect(),
            ),
        })
    }

    /// The table directory (or URI), as given to [`Table::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the table lives.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The version a sharded table opened at; None for a plain table.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// The length every column shares.
    pub fn num_rows(&self) -> u64 {
        self.num_rows
    }

    /// Columns in table order (name order for a plain table, the
    /// manifest's for a sharded one).
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    pub fn column_names(&self) -> Vec<&str> {
        self.columns.iter().map(Column::name).collect()
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn is_sharded(&self) -> bool {
        self.shards.is_some()
    }

    /// The committed shards of a sharded table, in order; `None` for a
    /// plain table.
    pub fn shards(&self) -> Option<&[Shard]> {
        self.shards.as_deref()
    }

    /// The columns, handed to the caller (who closes them).
    pub fn into_columns(self) -> Vec<Column> {
        self.columns
    }

    /// Closes every column; the first error wins.
    pub fn close(self) -> Result<()> {
        let mut first = Ok(());
        for c in self.columns {
            let r = c.close();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// `column` (as opened, its part lengths `parts`) once its parts' rows
/// are the manifest's (`file`) shards' rows; else `Corrupted`, `column`
/// closed.
fn check_part_rows(
    file: &Path,
    shards: &[ShardEntry],
    name: &str,
    parts: Vec<u64>,
    column: Column,
) -> Result<Column> {
    for (shard, n) in shards.iter().zip(parts) {
        if n != shard.rows {
            let _ = column.close();
            return Err(Error::corrupted(
                file,
                format!(
                    "the manifest says shard {} has {} rows, but shard {} column {} has {n} rows",
                    py_str(&shard.name),
                    shard.rows,
                    py_str(&shard.name),
                    py_str(name)
                ),
            ));
        }
    }
    Ok(column)
}

/// Patch layers opened, by part: each a store and the part's records it holds.
type OpenLayers = Vec<Vec<(Vec<u64>, Store)>>;

/// Opens the patch layers `layers` (by part: a store's path and the part's
/// records it holds), as stores of `kind` when given.
fn open_layers(
    fs: &Fs,
    layers: Vec<Vec<(PathBuf, Arc<Vec<u64>>)>>,
    kind: Option<Kind>,
) -> Result<OpenLayers> {
    layers
        .into_iter()
        .map(|part| {
            part.into_iter()
                .map(|(p, rows)| {
                    let store = match kind {
                        Some(k) => Store::open_kind_at(fs, &p, k, true)?,
                        None => Store::open_with(fs, &p, true)?,
                    };
                    Ok((rows.as_ref().clone(), store))
                })
                .collect()
        })
        .collect()
}

/// The columnar column `name` (its files at `parts`, one per shard) with
/// the patch layers `data` laid over it, and, for a column some row of
/// which may be null (`nullable`, or a file says so), its validity with
/// the layers `validity` laid over it, both presenting `selection`; and
/// what its files hold.
fn patched_columnar(
    fs: &Fs,
    name: &Path,
    parts: impl Iterator<Item = PathBuf>,
    nullable: bool,
    data: Vec<Vec<(PathBuf, Arc<Vec<u64>>)>>,
    validity: Vec<Vec<(PathBuf, Arc<Vec<u64>>)>>,
    selection: Option<&Arc<[u64]>>,
) -> Result<(Stream, Option<Stream>, crate::columnar::ValueKind)> {
    let base = Columnar::open(fs, name, parts, None)?;
    let kind = base.kind();
    let part_rows: Vec<u64> = base.parts().iter().map(ColumnFile::rows).collect();
    let view = base.validity_view();
    let nullable = nullable || view.is_some();
    let data = Overlay::new(
        Box::new(base),
        &part_rows,
        open_layers(fs, data, None)?,
        selection.cloned(),
    )?;
    if !nullable {
        return Ok((Stream::Overlay(data), None, kind));
    }
    let layers = open_layers(fs, validity, Some(Kind::Dense))?;
    let validity = match view {
        Some(v) => Overlay::new(Box::new(v), &part_rows, layers, selection.cloned())?,
        None => {
            let mut vname = name.to_path_buf().into_os_string();
            vname.push(".validity");
            Overlay::all_valid(Path::new(&vname), &part_rows, layers, selection.cloned())?
        }
    };
    Ok((Stream::Overlay(data), Some(Stream::Overlay(validity)), kind))
}

/// Columnar column `column` of the one shard `shard` of the sharded table
/// `table` on `fs` (`nullable` as its manifest says), every row, its
/// patches laid over it: what a compaction copies, and what its files hold.
pub(crate) fn shard_columnar(
    fs: &Fs,
    table: &Path,
    shard: &ShardEntry,
    column: &str,
    nullable: bool,
    logical: Logical,
) -> Result<(Column, crate::columnar::ValueKind)> {
    let at = shard.column_path(table, column);
    let shards = std::slice::from_ref(shard);
    let patches = Patches::read(fs, table, shards)?;
    if !patches.any(shards, column) {
        let data = Columnar::open(fs, &at, std::iter::once(at.clone()), None)?;
        let kind = data.kind();
        return Ok((
            Column::new(column, Stream::Columnar(data), logical, None)?,
            kind,
        ));
    }
    let (data, validity, kind) = patched_columnar(
        fs,
        &at,
        std::iter::once(at.clone()),
        nullable,
        patches.layers(shards, column, false),
        patches.layers(shards, column, true),
        None,
    )?;
    Ok((Column::new(column, data, logical, validity)?, kind))
}

/// Read-only stores at `parts`, joined as the stream `name`, with each
/// part's patch layers (`layers[s]`: a patch store's path and the part's
/// records it holds, oldest first).
fn concat(
    fs: &Fs,
    name: &Path,
    parts: impl Iterator<Item = PathBuf>,
    kind: Option<Kind>,
    layers: Vec<Vec<(PathBuf, Arc<Vec<u64>>)>>,
    selection: Option<&Arc<[u64]>>,
) -> Result<Stream> {
    let open = |p: &Path| match kind {
        Some(k) => Store::open_kind_at(fs, p, k, true),
        None => Store::open_with(fs, p, true),
    };
    let stores = parts.map(|p| open(&p)).collect::<Result<Vec<_>>>()?;
    let mut joined = Concat::new(name, stores)?;
    for (s, layers) in layers.into_iter().enumerate() {
        if layers.is_empty() {
            continue;
        }
        let opened = layers
            .into_iter()
            .map(|(p, rows)| Ok((rows.as_ref().clone(), open(&p)?)))
            .collect::<Result<Vec<_>>>();
        joined = match opened {
            Ok(l) => joined.patch(s, l)?,
            Err(e) => {
                let _ = joined.close();
                return Err(e);
            }
        };
    }
    Ok(Stream::Concat(match selection {
        Some(rows) => joined.select(rows.clone())?,
        None => joined,
    }))
}

/// Records column `column` of the one shard `shard` of the sharded table
/// `table` on `fs` (its validity streams when `validity`), every row, its
/// patches laid over it: what a compaction copies.
pub(crate) fn shard_records(
    fs: &Fs,
    table: &Path,
    shard: &ShardEntry,
    column: &str,
    validity: bool,
) -> Result<Concat> {
    let shards = std::slice::from_ref(shard);
    let patches = Patches::read(fs, table, shards)?;
    let (at, kind) = if validity {
        (shard.validity_path(table, column), Some(Kind::Dense))
    } else {
        (shard.column_path(table, column), None)
    };
    let name = at.clone();
    match concat(
        fs,
        &name,
        std::iter::once(at),
        kind,
        patches.layers(shards, column, validity),
        None,
    )? {
        Stream::Concat(c) => Ok(c),
        _ => unreachable!("concat joins stores"),
    }
}

/// The rows of every patch group of a manifest's shards, read once per
/// open (each group's rows file).
pub(crate) struct Patches {
    table: PathBuf,
    /// By shard, by group directory.
    rows: Vec<std::collections::BTreeMap<String, Arc<Vec<u64>>>>,
}

impl Patches {
    pub(crate) fn read(fs: &Fs, table: &Path, shards: &[ShardEntry]) -> Result<Patches> {
        let rows = shards
            .iter()
            .map(|s| {
                s.groups
                    .iter()
                    .filter(|g| g.patch.is_some())
                    .map(|g| {
                        let rows = super::manifest::read_patch_rows(fs, table, s, g)?;
                        Ok((g.dir.clone(), Arc::new(rows)))
                    })
                    .collect::<Result<_>>()
            })
            .collect::<Result<_>>()?;
        Ok(Patches {
            table: table.to_path_buf(),
            rows,
        })
    }

    /// Whether any shard patches `column`.
    fn any(&self, shards: &[ShardEntry], column: &str) -> bool {
        shards.iter().any(|s| !s.column_patches(column).is_empty())
    }

    /// For each shard, the patch layers of `column` (its validity streams
    /// when `validity`): each store's path and the shard's rows it holds.
    pub(crate) fn layers(
        &self,
        shards: &[ShardEntry],
        column: &str,
        validity: bool,
    ) -> Vec<Vec<(PathBuf, Arc<Vec<u64>>)>> {
        shards
            .iter()
            .zip(&self.rows)
            .map(|(s, rows)| {
                s.column_patches(column)
                    .into_iter()
                    .map(|g| {
                        let dir = shard_dir(&self.table, &s.name).join(&g.dir);
                        let at = if validity {
                            validity_dir(&dir, column)
                        } else {
                            dir.join(column)
                        };
                        (at, rows[&g.dir].clone())
                    })
                    .collect()
            })
            .collect()
    }
}

/// The physical rows a sharded table presents (None: all of them) and
/// each shard's count of them.
type Selection = (Option<Arc<[u64]>>, Vec<u64>);

/// The physical rows a sharded table presents (None: all of them, in
/// order) and how many of them each shard holds: the rows its deletion
/// files leave, then, for a view, the rows `view` selects of those
/// (record ids, strictly increasing; `Corrupted` naming the view's file
/// for one past the version's rows).
fn selection(
    fs: &Fs,
    path: &Path,
    manifest: &super::Manifest,
    view: Option<(&Path, Vec<u64>)>,
) -> Result<Selection> {
    let deleted: Vec<Vec<u64>> = manifest
        .shards
        .iter()
        .map(|s| super::manifest::read_deleted(fs, path, s))
        .collect::<Result<_>>()?;
    let mut starts = Vec::with_capacity(manifest.shards.len() + 1);
    let mut at = 0u64;
    for s in &manifest.shards {
        starts.push(at);
        at += s.rows;
    }
    starts.push(at);
    let live: Option<Vec<u64>> = deleted.iter().any(|d| !d.is_empty()).then(|| {
        let mut live = Vec::with_capacity(manifest.num_rows() as usize);
        for ((s, gone), start) in manifest.shards.iter().zip(&deleted).zip(&starts) {
            let mut next = gone.iter().peekable();
            for r in 0..s.rows {
                if next.peek() == Some(&&r) {
                    next.next();
                } else {
                    live.push(start + r);
                }
            }
        }
        live
    });
    let rows: Option<Vec<u64>> = match view {
        None => live,
        Some((file, ids)) => {
            let n = manifest.num_rows();
            if let Some(bad) = ids.iter().find(|&&i| i >= n) {
                return Err(Error::corrupted(
                    file,
                    format!("it selects record {bad}, but its version has {n} rows"),
                ));
            }
            Some(match &live {
                Some(live) => ids.iter().map(|&i| live[i as usize]).collect(),
                None => ids,
            })
        }
    };
    let per_shard = match &rows {
        None => manifest.shards.iter().map(|s| s.rows).collect(),
        Some(rows) => starts
            .windows(2)
            .map(|w| {
                let lo = rows.partition_point(|&r| r < w[0]);
                let hi = rows.partition_point(|&r| r < w[1]);
                (hi - lo) as u64
            })
            .collect(),
    };
    Ok((rows.map(Arc::from), per_shard))
}

/// Opens the columns of the plain table `dir` (every store subdirectory,
/// or those of `names`), typed as its `table.json` records, with their
/// validity streams; on failure none stays open.
pub fn open_columns(dir: &Path, readonly: bool, names: Option<&[String]>) -> Result<Vec<Column>> {
    open_columns_in(&Fs::Local, dir, readonly, names)
}

fn open_columns_in(
    fs: &Fs,
    dir: &Path,
    readonly: bool,
    names: Option<&[String]>,
) -> Result<Vec<Column>> {
    let names = match names {
        Some(n) => n.to_vec(),
        None => column_names_in(fs, dir)?,
    };
    let types = read_types_in(fs, dir)?;
    let mut out: Vec<Column> = Vec::with_capacity(names.len());
    for name in names {
        let t = types.get(&name).copied().unwrap_or_default();
        let opened = (|| {
            let at = dir.join(&name);
            if !super::files::exists(fs, &at) {
                return Err(Error::NoStore {
                    path: at,
                    reason: "the path does not exist".into(),
                });
            }
            if super::shard::layout_of(fs, &at, None)? == ColumnLayout::Columnar {
                let c = Columnar::open(fs, &at, std::iter::once(at.clone()), None)?;
                super::shard::check_columnar(&c.parts()[0], t)?;
                let logical = c.logical();
                return Column::new(name.clone(), Stream::Columnar(c), logical, None);
            }
            let data = Store::open_with(fs, &at, readonly)?;
            let validity = t.nullable.then(|| validity_dir(dir, &name));
            Column::with_validity_at(name.clone(), data, t.logical, fs, validity.as_deref())
        })();
        match opened {
            Ok(c) => out.push(c),
            Err(e) => {
                close_all(out);
                return Err(e);
            }
        }
    }
    Ok(out)
}
