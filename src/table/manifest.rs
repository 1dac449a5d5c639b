//! `manifest.json`: which shards a sharded table holds, in which order (see
//! `docs/format.md`). Reading checks every rule of the format; a manifest
//! that breaks one is [`Error::Corrupted`] naming the manifest and the rule.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::files;
use super::types::VALIDITY_DIR;
use crate::io::Fs;
use crate::repr::{py_list, py_repr, py_str};
use crate::schema::Logical;
use crate::{Error, Result};

/// The manifest's file name inside a sharded table directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The commit lock's file name inside a sharded table directory.
pub const MANIFEST_LOCK: &str = ".manifest.lock";
/// What the manifest's `format` key holds.
pub const MANIFEST_FORMAT: &str = "loaderx.sharded_table";
/// The manifest's version when every column is stored as records.
const VERSION: u64 = 1;
/// Its version when some column is columnar: 3, whose column files may be
/// in column format version 3 (read in place), which releases before it
/// refuse; 2, written by those releases, is still read.
const VERSION_COLUMNAR: u64 = 3;
/// The version releases before column format 3 wrote with columnar columns.
const VERSION_COLUMNAR_2: u64 = 2;
/// Its version when some shard has a patch group (rows of records columns
/// edited in place, see [`ColumnGroup::patch`]): 4, which releases before
/// it refuse (they would read a patch as the whole column).
const VERSION_PATCHED: u64 = 4;
/// A patch group's file of the shard rows it holds, inside its directory.
pub const PATCH_ROWS_FILE: &str = "rows.u64";

/// One committed shard: a plain table directly inside the table directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShardEntry {
    pub name: String,
    pub rows: u64,
    /// The shard's files (paths relative to the shard, `/`-separated) and
    /// their sizes, recorded by writers to object stores so that a reader
    /// opens the shard without listing it. Optional: local commits leave
    /// it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<std::collections::BTreeMap<String, u64>>,
    /// Column groups added to the shard after it was written (by
    /// `add_columns`), in order: a column is read from the last group
    /// that lists it, else from the shard's own directory.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<ColumnGroup>,
    /// The shard's deleted rows, if any: a deletion file inside the shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<Deleted>,
}

/// A shard's deletion file: `rows` little-endian u64 row indices of the
/// shard, strictly increasing, each below the shard's rows (see
/// `docs/format.md`, "Deletions").
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Deleted {
    /// The file, relative to the shard.
    pub file: String,
    /// How many rows it deletes.
    pub rows: u64,
}

/// Columns added to a shard: a plain table directory inside the shard
/// (with the shard's rows) holding them; or, for a patch, new values of
/// some of the shard's rows of records columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ColumnGroup {
    /// The group's directory, relative to the shard.
    pub dir: String,
    /// The columns it holds.
    pub columns: Vec<String>,
    /// A patch's rows: the group is a plain table of this many rows, the
    /// shard's physical rows listed (strictly increasing) in its
    /// [`PATCH_ROWS_FILE`]; its columns (records layout) read those rows
    /// from it and every other row from below it. None: a whole group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<u64>,
}

impl ColumnGroup {
    /// A whole group (every row of the shard) of `columns` in `dir`.
    pub fn whole(dir: String, columns: Vec<String>) -> ColumnGroup {
        ColumnGroup {
            dir,
            columns,
            patch: None,
        }
    }
}

/// The shard name of a plain table turned into a sharded one in place:
/// the table directory itself is its first shard.
pub const SELF_SHARD: &str = ".";

/// The directory of the shard `name` of the table `dir`.
pub fn shard_dir(dir: &Path, name: &str) -> PathBuf {
    if name == SELF_SHARD {
        dir.to_path_buf()
    } else {
        dir.join(name)
    }
}

/// A shard's path relative to the table ("" for the table itself).
pub(crate) fn shard_rel(name: &str) -> &str {
    if name == SELF_SHARD {
        ""
    } else {
        name
    }
}

/// A path below the table: `rest` in shard `shard`'s directory.
pub(crate) fn in_shard(shard: &str, rest: &str) -> String {
    if shard == SELF_SHARD {
        rest.to_owned()
    } else {
        format!("{shard}/{rest}")
    }
}

impl ShardEntry {
    /// The rows left after deletions.
    pub fn live_rows(&self) -> u64 {
        self.rows - self.deleted.as_ref().map_or(0, |d| d.rows)
    }

    /// The directory holding column `column` of this shard, relative to
    /// the shard: the last whole group that lists it, or the shard itself
    /// (""). Patches over it: [`ShardEntry::column_patches`].
    pub fn column_home(&self, column: &str) -> &str {
        self.groups
            .iter()
            .rev()
            .find(|g| g.patch.is_none() && g.columns.iter().any(|c| c == column))
            .map_or("", |g| g.dir.as_str())
    }

    /// The patch groups over column `column`'s home (see
    /// [`ShardEntry::column_home`]), oldest first: a later patch's rows
    /// win.
    pub fn column_patches(&self, column: &str) -> Vec<&ColumnGroup> {
        let mut patches = Vec::new();
        for g in &self.groups {
            if !g.columns.iter().any(|c| c == column) {
                continue;
            }
            if g.patch.is_some() {
                patches.push(g);
            } else {
                patches.clear();
            }
        }
        patches
    }

    /// Whether any group is a patch.
    pub fn has_patches(&self) -> bool {
        self.groups.iter().any(|g| g.patch.is_some())
    }

    /// The store directory of column `column` of this shard, in the table
    /// `table`.
    pub fn column_path(&self, table: &Path, column: &str) -> PathBuf {
        let home = shard_dir(table, &self.name);
        match self.column_home(column) {
            "" => home.join(column),
            group => home.join(group).join(column),
        }
    }

    /// The validity stream of column `column` of this shard (beside its
    /// store: in the same group).
    pub fn validity_path(&self, table: &Path, column: &str) -> PathBuf {
        let home = shard_dir(table, &self.name);
        match self.column_home(column) {
            "" => super::types::validity_dir(&home, column),
            group => super::types::validity_dir(&home.join(group), column),
        }
    }
}

/// A checked manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Column names, in table order.
    pub columns: Vec<String>,
    /// Committed shards, in table order.
    pub shards: Vec<ShardEntry>,
    /// The text and binary columns (every other column holds tensors).
    pub types: Vec<(String, Logical)>,
    /// The columns that may hold nulls, sorted: a records column has a
    /// validity stream in every shard, a columnar one keeps them in its
    /// files.
    pub nullable: Vec<String>,
    /// The columnar columns, sorted (every other column is stored as
    /// records).
    pub columnar: Vec<String>,
    /// The table version this manifest is (1, 2, ...); None in a manifest
    /// written before tables had versions, which is version 1.
    pub table_version: Option<u64>,
    /// When the version was committed, in milliseconds since the Unix
    /// epoch (UTC); None in a manifest written before tables had versions.
    pub timestamp_ms: Option<u64>,
    /// What made the version (`create`, `append`, `copy`, ...).
    pub operation: Option<String>,
    /// The table's own key-value metadata (`Table.metadata`: an image
    /// table's class names, say), carried from version to version.
    pub metadata: serde_json::Map<String, Value>,
}

impl Manifest {
    /// The logical type of `column`.
    pub fn logical(&self, column: &str) -> Logical {
        self.types
            .iter()
            .find(|(c, _)| c == column)
            .map_or(Logical::Tensor, |(_, l)| *l)
    }

    pub fn is_nullable(&self, column: &str) -> bool {
        self.nullable.iter().any(|c| c == column)
    }

    /// How `column` is stored.
    pub fn layout(&self, column: &str) -> super::ColumnLayout {
        if self.columnar.iter().any(|c| c == column) {
            super::ColumnLayout::Columnar
        } else {
            super::ColumnLayout::Records
        }
    }

    /// Whether `column` has validity streams: a nullable records column.
    pub fn has_validity(&self, column: &str) -> bool {
        self.is_nullable(column) && self.layout(column) == super::ColumnLayout::Records
    }

    /// The table version (a manifest from before versions is version 1).
    pub fn version(&self) -> u64 {
        self.table_version.unwrap_or(1)
    }

    /// The rows of every shard together, deleted rows left out.
    pub fn num_rows(&self) -> u64 {
        self.shards.iter().map(ShardEntry::live_rows).sum()
    }

    /// The manifest's bytes (UTF-8 JSON, one-space indents, a final newline).
    pub(crate) fn to_json(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Doc<'a> {
            format: &'a str,
            version: u64,
            columns: &'a [String],
            shards: &'a [ShardEntry],
            #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
            types: serde_json::Map<String, Value>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            nullable: &'a [String],
            #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
            layouts: serde_json::Map<String, Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            table_version: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            timestamp: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            operation: Option<&'a str>,
            #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
            metadata: &'a serde_json::Map<String, Value>,
        }
        let doc = Doc {
            format: MANIFEST_FORMAT,
            version: if self.shards.iter().any(ShardEntry::has_patches) {
                VERSION_PATCHED
            } else if self.columnar.is_empty() {
                VERSION
            } else {
                VERSION_COLUMNAR
            },
            columns: &self.columns,
            shards: &self.shards,
            types: self
                .types
                .iter()
                .map(|(c, l)| (c.clone(), Value::String(l.name().into())))
                .collect(),
            nullable: &self.nullable,
            layouts: self
                .columnar
                .iter()
                .map(|c| (c.clone(), Value::String("columnar".into())))
                .collect(),
            table_version: self.table_version,
            timestamp: self.timestamp_ms,
            operation: self.operation.as_deref(),
            metadata: &self.metadata,
        };
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        doc.serialize(&mut ser)
            .expect("a manifest of strings and integers serialises");
        out.push(b'\n');
        out
    }
}

/// Whether `dir` is a sharded table (holds a manifest).
pub fn is_sharded(dir: &Path) -> bool {
    is_sharded_in(&Fs::Local, dir)
}

pub(crate) fn is_sharded_in(fs: &Fs, dir: &Path) -> bool {
    files::is_file(fs, &dir.join(MANIFEST_FILE))
}

/// Whether `name` is a shard name the format allows:
/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,254}`.
pub fn is_shard_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 255
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

fn bad(file: &Path, what: impl Into<String>) -> Error {
    Error::corrupted(file, what)
}

/// Python's `==` against the integer 1 (`1`, `1.0` and `true` all are).
fn is_one(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() == Some(1.0),
        _ => false,
    }
}

/// Checks that every shard `manifest` names is in the table `dir`, with a
/// validity stream for each nullable column: [`Error::Corrupted`] naming
/// the manifest and the missing shard or stream.
pub(crate) fn check_shards_present(fs: &Fs, dir: &Path, manifest: &Manifest) -> Result<()> {
    let file = dir.join(MANIFEST_FILE);
    for shard in &manifest.shards {
        let shard_dir = shard_dir(dir, &shard.name);
        if !files::is_dir(fs, &shard_dir) {
            return Err(bad(
                &file,
                format!(
                    "it names shard {}, but {} is missing",
                    py_str(&shard.name),
                    shard_dir.display()
                ),
            ));
        }
    }
    for column in manifest
        .nullable
        .iter()
        .filter(|c| manifest.has_validity(c))
    {
        for shard in &manifest.shards {
            if !files::is_store(fs, &shard.validity_path(dir, column)) {
                return Err(bad(
                    &file,
                    format!(
                        "column {} is nullable, but shard {} has no validity stream {VALIDITY_DIR}/{column}",
                        py_str(column),
                        py_str(&shard.name)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The manifest in `raw` (the bytes of `file`), checked against every rule
/// of the format that needs no other file: [`Error::Corrupted`] naming
/// `file` and the rule otherwise.
pub(crate) fn parse_manifest(file: &Path, raw: &[u8]) -> Result<Manifest> {
    let file = file.to_path_buf();
    let doc: Value =
        serde_json::from_slice(raw).map_err(|e| bad(&file, format!("not valid JSON ({e})")))?;
    let Some(doc) = doc.as_object() else {
        return Err(bad(
            &file,
            format!("the 'format' key must be {}", py_str(MANIFEST_FORMAT)),
        ));
    };
    if doc.get("format").and_then(Value::as_str) != Some(MANIFEST_FORMAT) {
        return Err(bad(
            &file,
            format!("the 'format' key must be {}", py_str(MANIFEST_FORMAT)),
        ));
    }
    let version = doc.get("version").unwrap_or(&Value::Null);
    let columnar_version = matches!(
        version.as_u64(),
        Some(VERSION_COLUMNAR | VERSION_COLUMNAR_2 | VERSION_PATCHED)
    );
    if !is_one(version) && !columnar_version {
        return Err(bad(
            &file,
            format!(
                "version must be {VERSION}, {VERSION_COLUMNAR_2}, {VERSION_COLUMNAR} or {VERSION_PATCHED} (this release reads those), got {}",
                py_repr(version)
            ),
        ));
    }
    let columns: Vec<String> = match doc.get("columns") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|c| c.as_str().filter(|c| !c.is_empty()).map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(&file, "'columns' must be a list of column names"))?,
        _ => return Err(bad(&file, "'columns' must be a list of column names")),
    };
    let mut unique = columns.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != columns.len() {
        return Err(bad(
            &file,
            format!("'columns' names a column twice: {}", py_list(&columns)),
        ));
    }
    let Some(Value::Array(shards)) = doc.get("shards") else {
        return Err(bad(&file, "'shards' must be a list"));
    };
    let known = |c: &str| columns.iter().any(|k| k == c);
    let types = match doc.get("types") {
        None => Vec::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(c, t)| match t.as_str() {
                Some("utf8") if known(c) => Some((c.clone(), Logical::Utf8)),
                Some("binary") if known(c) => Some((c.clone(), Logical::Binary)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad(&file, "'types' must map column names to 'utf8' or 'binary'"))?,
        Some(_) => {
            return Err(bad(
                &file,
                "'types' must map column names to 'utf8' or 'binary'",
            ))
        }
    };
    let nullable: Vec<String> = match doc.get("nullable") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|c| c.as_str().filter(|c| known(c)).map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(&file, "'nullable' must list column names"))?,
        Some(_) => return Err(bad(&file, "'nullable' must list column names")),
    };
    let layouts_rule =
        "'layouts' must map column names to 'columnar' (in a version 2 or 3 manifest)";
    let mut columnar: Vec<String> = match doc.get("layouts") {
        None => Vec::new(),
        Some(Value::Object(m)) if columnar_version => m
            .iter()
            .map(|(c, l)| (known(c) && l.as_str() == Some("columnar")).then(|| c.clone()))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(&file, layouts_rule))?,
        Some(_) => return Err(bad(&file, layouts_rule)),
    };
    columnar.sort();
    let table_version = match doc.get("table_version") {
        None => None,
        Some(v) => Some(v.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
            bad(
                &file,
                format!(
                    "'table_version' must be a positive integer, got {}",
                    py_repr(v)
                ),
            )
        })?),
    };
    let timestamp_ms = match doc.get("timestamp") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            bad(
                &file,
                format!(
                    "'timestamp' must be milliseconds since the Unix epoch, got {}",
                    py_repr(v)
                ),
            )
        })?),
    };
    let operation = match doc.get("operation") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => {
            return Err(bad(
                &file,
                format!("'operation' must be a string, got {}", py_repr(v)),
            ))
        }
    };
    let metadata = match doc.get("metadata") {
        None => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => {
            return Err(bad(
                &file,
                format!("'metadata' must be an object, got {}", py_repr(v)),
            ))
        }
    };
    let mut out: Vec<ShardEntry> = Vec::with_capacity(shards.len());
    for (i, s) in shards.iter().enumerate() {
        let name = s.get("name").unwrap_or(&Value::Null);
        let rows = s.get("rows").unwrap_or(&Value::Null);
        let Some(name) = name
            .as_str()
            .filter(|n| is_shard_name(n) || (*n == SELF_SHARD && i == 0))
        else {
            return Err(bad(
                &file,
                format!(
                    "shard {i} must have a plain directory 'name', got {}",
                    py_repr(name)
                ),
            ));
        };
        let Some(rows) = rows.as_u64() else {
            return Err(bad(
                &file,
                format!(
                    "shard {} must have a non-negative integer 'rows', got {}",
                    py_str(name),
                    py_repr(rows)
                ),
            ));
        };
        if out.iter().any(|s| s.name == name) {
            return Err(bad(
                &file,
                format!("shard {} is listed twice", py_str(name)),
            ));
        }
        let objects = match s.get("objects") {
            None => None,
            Some(v) => Some(parse_objects(v).ok_or_else(|| {
                bad(
                    &file,
                    format!(
                        "shard {} has an 'objects' that is not a map of relative file paths to sizes",
                        py_str(name)
                    ),
                )
            })?),
        };
        let groups = match s.get("groups") {
            None => Vec::new(),
            Some(v) => parse_groups(v)
                .filter(|gs| gs.iter().all(|g| g.patch.is_none_or(|n| n <= rows)))
                .ok_or_else(|| {
                bad(
                    &file,
                    format!(
                        "shard {} has 'groups' that are not a list of {{\"dir\": plain directory name, \"columns\": [column names], optional \"patch\": rows (at most the shard's, at least 1)}}",
                        py_str(name)
                    ),
                )
            })?,
        };
        let deleted = match s.get("deleted") {
            None => None,
            Some(v) => Some(
                parse_deleted(v)
                    .filter(|d| d.rows <= rows)
                    .ok_or_else(|| {
                        bad(
                            &file,
                            format!(
                                "shard {} has a 'deleted' that is not {{\"file\": plain file name, \"rows\": at most its rows}}",
                                py_str(name)
                            ),
                        )
                    })?,
            ),
        };
        out.push(ShardEntry {
            name: name.to_owned(),
            rows,
            objects,
            groups,
            deleted,
        });
    }
    Ok(Manifest {
        columns,
        shards: out,
        types,
        nullable,
        columnar,
        table_version,
        timestamp_ms,
        operation,
        metadata,
    })
}

/// A shard entry's `deleted`.
fn parse_deleted(v: &Value) -> Option<Deleted> {
    Some(Deleted {
        file: v
            .get("file")?
            .as_str()
            .filter(|f| is_shard_name(f))?
            .to_owned(),
        rows: v.get("rows")?.as_u64()?,
    })
}

/// The deleted rows of shard `entry` of the table `dir` on `fs`, read from
/// its deletion file and checked ([`Error::Corrupted`] naming the file and
/// the rule otherwise); empty when it has none.
pub(crate) fn read_deleted(fs: &Fs, dir: &Path, entry: &ShardEntry) -> Result<Vec<u64>> {
    let Some(d) = &entry.deleted else {
        return Ok(Vec::new());
    };
    read_row_file(
        fs,
        &shard_dir(dir, &entry.name).join(&d.file),
        d.rows,
        Some(entry.rows),
        &|| {
            bad(
                &dir.join(MANIFEST_FILE),
                format!(
                    "shard {} names deletion file {}, which is missing",
                    py_str(&entry.name),
                    py_str(&d.file)
                ),
            )
        },
    )
}

/// A row file (a deletion file, a view's rows): `count` little-endian u64
/// values, strictly increasing, each below `below` when given;
/// [`Error::Corrupted`] naming the file and the rule otherwise, `missing()`
/// when it is not there.
pub(crate) fn read_row_file(
    fs: &Fs,
    file: &Path,
    count: u64,
    below: Option<u64>,
    missing: &dyn Fn() -> Error,
) -> Result<Vec<u64>> {
    let raw = files::read_object(fs, file)?.ok_or_else(missing)?;
    if raw.len() as u64 != count * 8 {
        return Err(bad(
            file,
            format!(
                "it must hold {count} values ({} bytes), but it has {} bytes",
                count * 8,
                raw.len()
            ),
        ));
    }
    let rows: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let increasing = rows.windows(2).all(|w| w[0] < w[1]);
    let inside = match below {
        Some(n) => rows.last().is_none_or(|&r| r < n),
        None => true,
    };
    if !increasing || !inside {
        return Err(bad(
            file,
            match below {
                Some(n) => format!("values must be strictly increasing and below {n}"),
                None => "values must be strictly increasing".to_owned(),
            },
        ));
    }
    Ok(rows)
}

/// The physical rows of a shard with `gone` deleted that its live rows
/// `live` (ascending) are.
pub(crate) fn physical(gone: &[u64], live: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut gone = gone.iter().peekable();
    // `phys` is the physical row of live row `idx` once deleted rows are
    // skipped.
    let (mut idx, mut phys) = (0u64, 0u64);
    for want in live {
        loop {
            while gone.next_if(|&&g| g == phys).is_some() {
                phys += 1;
            }
            if idx == want {
                break;
            }
            idx += 1;
            phys += 1;
        }
        out.push(phys);
    }
    out
}

/// A deletion file's bytes for the sorted, unique `rows`.
pub(crate) fn deletion_bytes(rows: &[u64]) -> Vec<u8> {
    rows.iter().flat_map(|r| r.to_le_bytes()).collect()
}

/// A shard entry's `groups`.
fn parse_groups(v: &Value) -> Option<Vec<ColumnGroup>> {
    v.as_array()?
        .iter()
        .map(|g| {
            let dir = g.get("dir")?.as_str().filter(|d| is_shard_name(d))?;
            let columns = g
                .get("columns")?
                .as_array()?
                .iter()
                .map(|c| c.as_str().filter(|c| !c.is_empty()).map(str::to_owned))
                .collect::<Option<Vec<_>>>()?;
            let patch = match g.get("patch") {
                None => None,
                Some(n) => Some(n.as_u64().filter(|&n| n > 0)?),
            };
            Some(ColumnGroup {
                dir: dir.to_owned(),
                columns,
                patch,
            })
        })
        .collect()
}

/// The shard rows (physical, strictly increasing) that the patch group
/// `group` of shard `entry` of the table `dir` holds, read from its rows
/// file and checked ([`Error::Corrupted`] naming the file and the rule).
pub(crate) fn read_patch_rows(
    fs: &Fs,
    dir: &Path,
    entry: &ShardEntry,
    group: &ColumnGroup,
) -> Result<Vec<u64>> {
    let count = group.patch.unwrap_or(0);
    let file = shard_dir(dir, &entry.name)
        .join(&group.dir)
        .join(PATCH_ROWS_FILE);
    read_row_file(fs, &file, count, Some(entry.rows), &|| {
        bad(
            &dir.join(MANIFEST_FILE),
            format!(
                "shard {} names patch group {}, whose {PATCH_ROWS_FILE} is missing",
                py_str(&entry.name),
                py_str(&group.dir)
            ),
        )
    })
}

/// A shard entry's `objects`: relative paths (plain segments, no `..`) to
/// sizes.
fn parse_objects(v: &Value) -> Option<std::collections::BTreeMap<String, u64>> {
    let map = v.as_object()?;
    map.iter()
        .map(|(k, size)| {
            let plain =
                !k.is_empty() && k.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
            plain.then_some(())?;
            Some((k.clone(), size.as_u64()?))
        })
        .collect()
}

/// A shard's name and the objects its manifest entry records, if any.
#[cfg(feature = "remote")]
pub(crate) type ShardObjects = (String, Option<Vec<(String, u64)>>);

#[cfg(feature = "remote")]
/// The shards a manifest's bytes name, each with the objects it records
/// (None when it records none); none when the manifest does not parse
/// (opening the table then reports its fault, through the same reader).
pub(crate) fn listed_objects(raw: &[u8]) -> Vec<ShardObjects> {
    match parse_manifest(Path::new(MANIFEST_FILE), raw) {
        Ok(m) => m
            .shards
            .into_iter()
            .map(|s| (s.name, s.objects.map(|o| o.into_iter().collect())))
            .collect(),
        Err(_) => Vec::new(),
    }
}
