//! `table.json`: the column types a table records beside its stores.
//!
//! A plain table is a directory of stores, one per column. Stores carry a
//! dtype and shape but not how a table presents them; a column that is text
//! or binary ([`Logical`]) is recorded in `table.json` in the table
//! directory (see `docs/format.md`):
//!
//! ```json
//! {"format": "loaderx.table", "version": 1,
//!  "columns": {"caption": {"type": "utf8"}, "label": {"type": "tensor", "nullable": true}}}
//! ```
//!
//! Columns it does not name are tensors without nulls. A nullable column's
//! validity (one `bool` per row, false for null) is the dense store
//! `.validity/<column>` beside the columns. A columnar column (a directory
//! holding `column.zc`) needs no entry: its file says what it holds and
//! keeps its own nulls. The file is replaced atomically (written beside,
//! fsynced, renamed, directory fsynced).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::files;
use crate::io::Fs;
use crate::repr::{py_list, py_str};
use crate::schema::Logical;
use crate::{Error, Result};

/// The table file's name inside a table directory.
pub const TABLE_FILE: &str = "table.json";
const FORMAT: &str = "loaderx.table";
const VERSION: u64 = 1;

#[derive(Serialize, Deserialize)]
struct ColumnEntry {
    #[serde(rename = "type")]
    logical: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    nullable: bool,
}

/// How a table stores a column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ColumnLayout {
    /// A Zrecord store: one frame per row (tensors, large binary values).
    #[default]
    Records,
    /// One `column.zc`: chunks of many values (scalars, text, small bytes).
    Columnar,
}

impl ColumnLayout {
    pub fn name(self) -> &'static str {
        match self {
            ColumnLayout::Records => "records",
            ColumnLayout::Columnar => "columnar",
        }
    }

    pub fn from_name(name: &str) -> Option<ColumnLayout> {
        match name {
            "records" => Some(ColumnLayout::Records),
            "columnar" => Some(ColumnLayout::Columnar),
            _ => None,
        }
    }
}

impl std::fmt::Display for ColumnLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a write asks of its columns' layouts (the `layout=` of the table
/// writers), resolved per column by [`Layouts::resolve`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layouts {
    /// One layout for every column that can have it (None: the default).
    pub all: Option<ColumnLayout>,
    /// Layouts asked for by column name (over `all`).
    pub columns: BTreeMap<String, ColumnLayout>,
    /// The layouts of the table's columns already (an existing column
    /// keeps its own).
    pub existing: BTreeMap<String, ColumnLayout>,
}

impl Layouts {
    /// Every column as records (the ingests that return stores).
    pub fn records() -> Layouts {
        Layouts {
            all: Some(ColumnLayout::Records),
            ..Layouts::default()
        }
    }

    /// `InvalidValue` naming a column asked for that the write does not
    /// have (`names`: the write's columns).
    pub fn check_names<S: AsRef<str>>(&self, names: &[S]) -> Result<()> {
        if let Some(odd) = self
            .columns
            .keys()
            .find(|c| !names.iter().any(|n| n.as_ref() == c.as_str()))
        {
            let all: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
            return Err(Error::InvalidValue(format!(
                "layout names column {}, which the data does not have (its columns: {})",
                py_str(odd),
                py_list(&all)
            )));
        }
        Ok(())
    }

    /// The layout of column `name`, whose values are `kind` (None for
    /// tensors, which are always records). Unless asked otherwise, a
    /// column the table has keeps its layout, and a new column of numbers,
    /// booleans or text is columnar (bytes stay records: they are mostly
    /// encoded images and audio, read one by one). `InvalidValue` naming
    /// the column when a layout asked for by name cannot hold its values,
    /// or when a layout asked for differs from the table's.
    pub fn resolve(
        &self,
        name: &str,
        kind: Option<crate::columnar::ValueKind>,
    ) -> Result<ColumnLayout> {
        use crate::columnar::ValueKind;
        let named = self.columns.get(name).copied();
        let asked = named.or(self.all);
        let existing = self.existing.get(name).copied();
        let fits = |l: ColumnLayout| l == ColumnLayout::Records || kind.is_some();
        match (asked, existing) {
            (Some(a), Some(e)) if a != e && (named.is_some() || fits(a)) => {
                Err(Error::Refused {
                    refusal: crate::error::Refusal::LayoutKept,
                    message: format!(
                        "column {} is stored as {e} in the table, but layout asks for {a}; a column keeps its layout",
                        py_str(name)
                    ),
                })
            }
            (_, Some(e)) => Ok(e),
            (Some(ColumnLayout::Columnar), None) if kind.is_none() => {
                if named.is_some() {
                    Err(Error::InvalidValue(format!(
                        "layout asks for column {} to be columnar, but it holds tensors; columnar columns hold numbers, booleans, text or bytes, one per row",
                        py_str(name)
                    )))
                } else {
                    Ok(ColumnLayout::Records)
                }
            }
            (Some(a), None) => Ok(a),
            (None, None) => Ok(match kind {
                Some(ValueKind::Fixed(_) | ValueKind::Utf8) => ColumnLayout::Columnar,
                _ => ColumnLayout::Records,
            }),
        }
    }
}

/// What the table file records of a column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColumnType {
    pub logical: Logical,
    /// Whether the column has a validity stream (`.validity/<column>`).
    pub nullable: bool,
}

impl ColumnType {
    fn is_plain(&self) -> bool {
        *self == ColumnType::default()
    }
}

/// The directory of the validity stream of `column` in table `dir`.
pub fn validity_dir(dir: &Path, column: &str) -> std::path::PathBuf {
    dir.join(VALIDITY_DIR).join(column)
}

/// Where a table keeps its validity streams.
pub const VALIDITY_DIR: &str = ".validity";

#[derive(Serialize, Deserialize)]
struct TableFile {
    format: String,
    version: u64,
    columns: BTreeMap<String, ColumnEntry>,
}

/// The column types recorded in `dir`'s table file (empty without one).
pub fn read_types(dir: &Path) -> Result<BTreeMap<String, ColumnType>> {
    read_types_in(&Fs::Local, dir)
}

/// [`read_types`] of a table on `fs`.
pub(crate) fn read_types_in(fs: &Fs, dir: &Path) -> Result<BTreeMap<String, ColumnType>> {
    let path = dir.join(TABLE_FILE);
    let Some(bytes) = files::read(fs, &path, u64::MAX)? else {
        return Ok(BTreeMap::new());
    };
    let file: TableFile = serde_json::from_slice(&bytes)
        .map_err(|e| Error::corrupted(&path, format!("not a table file: {e}")))?;
    if file.format != FORMAT {
        return Err(Error::corrupted(
            &path,
            format!("'format' must be {FORMAT:?}, got {:?}", file.format),
        ));
    }
    if file.version != VERSION {
        return Err(Error::corrupted(
            &path,
            format!("version must be {VERSION}, got {}", file.version),
        ));
    }
    file.columns
        .into_iter()
        .map(|(name, entry)| match Logical::from_name(&entry.logical) {
            Some(logical) => Ok((
                name,
                ColumnType {
                    logical,
                    nullable: entry.nullable,
                },
            )),
            None => Err(Error::corrupted(
                &path,
                format!(
                    "column {name:?} has type {:?}; expected \"tensor\", \"utf8\" or \"binary\"",
                    entry.logical
                ),
            )),
        })
        .collect()
}

/// Records `types` in `dir`'s table file, merged over what it holds (a
/// plain tensor type removes a column's entry). Atomic.
pub fn write_types(dir: &Path, types: &[(String, ColumnType)]) -> Result<()> {
    let mut all = read_types(dir)?;
    for (name, t) in types {
        if t.is_plain() {
            all.remove(name);
        } else {
            all.insert(name.clone(), *t);
        }
    }
    let path = dir.join(TABLE_FILE);
    if all.is_empty() {
        return files::remove_file_synced(&path, dir);
    }
    let file = TableFile {
        format: FORMAT.into(),
        version: VERSION,
        columns: all
            .into_iter()
            .map(|(n, t)| {
                (
                    n,
                    ColumnEntry {
                        logical: t.logical.name().into(),
                        nullable: t.nullable,
                    },
                )
            })
            .collect(),
    };
    let mut json = serde_json::to_vec_pretty(&file)
        .map_err(|e| Error::InvalidValue(format!("table file: {e}")))?;
    json.push(b'\n');
    let tmp = format!(".{TABLE_FILE}.{}", std::process::id());
    files::write_atomically(dir, TABLE_FILE, &tmp, &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_round_trip_and_merge() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_types(tmp.path()).unwrap().is_empty());
        let t = |logical, nullable| ColumnType { logical, nullable };
        write_types(
            tmp.path(),
            &[
                ("caption".into(), t(Logical::Utf8, false)),
                ("png".into(), t(Logical::Binary, false)),
                ("label".into(), t(Logical::Tensor, true)),
            ],
        )
        .unwrap();
        write_types(tmp.path(), &[("png".into(), ColumnType::default())]).unwrap();
        let got = read_types(tmp.path()).unwrap();
        assert_eq!(
            got,
            BTreeMap::from([
                ("caption".to_string(), t(Logical::Utf8, false)),
                ("label".to_string(), t(Logical::Tensor, true)),
            ])
        );
        let text = std::fs::read_to_string(tmp.path().join(TABLE_FILE)).unwrap();
        assert!(text.contains("\"nullable\": true") && !text.contains("\"nullable\": false"));
        write_types(
            tmp.path(),
            &[
                ("caption".into(), ColumnType::default()),
                ("label".into(), ColumnType::default()),
            ],
        )
        .unwrap();
        assert!(!tmp.path().join(TABLE_FILE).exists());
        std::fs::write(tmp.path().join(TABLE_FILE), b"{\"format\": 1}").unwrap();
        let err = read_types(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("table.json") && err.contains("not a table file"),
            "{err}"
        );
    }
}
