//! The table file: column types a table records beside its stores.
//!
//! A plain table is a directory of stores, one per column. Stores carry a
//! dtype and shape but not how a table presents them; a column that is text
//! or binary ([`Logical`]) is recorded in `table.json` in the table
//! directory (see `docs/format.md`):
//!
//! ```json
//! {"format": "loaderx.table", "version": 1, "columns": {"caption": {"type": "utf8"}}}
//! ```
//!
//! Columns it does not name are tensors. The file is replaced atomically
//! (written beside, fsynced, renamed, directory fsynced).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fileio;
use crate::schema::Logical;

/// The table file's name inside a table directory.
pub const TABLE_FILE: &str = "table.json";
const FORMAT: &str = "loaderx.table";
const VERSION: u64 = 1;

#[derive(Serialize, Deserialize)]
struct ColumnEntry {
    #[serde(rename = "type")]
    logical: String,
}

#[derive(Serialize, Deserialize)]
struct TableFile {
    format: String,
    version: u64,
    columns: BTreeMap<String, ColumnEntry>,
}

/// The column types recorded in `dir`'s table file (empty without one).
pub fn read_types(dir: &Path) -> Result<BTreeMap<String, Logical>> {
    let path = dir.join(TABLE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(Error::io(&path, e)),
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
            Some(l) => Ok((name, l)),
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

/// Records `types` in `dir`'s table file, merged over what it holds
/// ([`Logical::Tensor`] removes a column's entry). Atomic.
pub fn write_types(dir: &Path, types: &[(String, Logical)]) -> Result<()> {
    let mut all = read_types(dir)?;
    for (name, logical) in types {
        match logical {
            Logical::Tensor => all.remove(name),
            l => all.insert(name.clone(), *l),
        };
    }
    let path = dir.join(TABLE_FILE);
    if all.is_empty() {
        return match std::fs::remove_file(&path) {
            Ok(()) => fileio::sync_dir(dir).map_err(|e| Error::io(dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&path, e)),
        };
    }
    let file = TableFile {
        format: FORMAT.into(),
        version: VERSION,
        columns: all
            .into_iter()
            .map(|(n, l)| {
                (
                    n,
                    ColumnEntry {
                        logical: l.name().into(),
                    },
                )
            })
            .collect(),
    };
    let mut json = serde_json::to_vec_pretty(&file)
        .map_err(|e| Error::InvalidValue(format!("table file: {e}")))?;
    json.push(b'\n');
    let tmp = dir.join(format!(".{TABLE_FILE}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&json)?;
        fileio::sync_all(&f)?;
        fileio::rename(&tmp, &path)?;
        fileio::sync_dir(dir)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(&path, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_round_trip_and_merge() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_types(tmp.path()).unwrap().is_empty());
        write_types(
            tmp.path(),
            &[
                ("caption".into(), Logical::Utf8),
                ("png".into(), Logical::Binary),
            ],
        )
        .unwrap();
        write_types(tmp.path(), &[("png".into(), Logical::Tensor)]).unwrap();
        let got = read_types(tmp.path()).unwrap();
        assert_eq!(
            got,
            BTreeMap::from([("caption".to_string(), Logical::Utf8)])
        );
        write_types(tmp.path(), &[("caption".into(), Logical::Tensor)]).unwrap();
        assert!(!tmp.path().join(TABLE_FILE).exists());
        std::fs::write(tmp.path().join(TABLE_FILE), b"{\"format\": 1}").unwrap();
        let err = read_types(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("table.json") && err.contains("not a table file"),
            "{err}"
        );
    }
}
