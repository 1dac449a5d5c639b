//! Shards filled by hand: [`new_shard`] makes an empty shard directory,
//! the user fills it as a plain table, [`commit_shards`] makes it visible
//! through the one commit point.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use crate::io::Fs;
use crate::repr::{py_list, py_str};
use crate::table::files;
use crate::table::manifest::is_shard_name;
use crate::{Error, Result};

/// Creates a new, empty, uniquely named shard directory inside the table
/// directory `table` (created if needed) and returns its path. Fill it as
/// a plain table, then make it visible with [`commit_shards`]; until then
/// no reader sees it.
pub fn new_shard(table: &Path) -> Result<PathBuf> {
    files::create_dir_all(table)?;
    loop {
        let shard = table.join(format!("shard-{}", files::random_hex(8)));
        if files::create_dir(&shard)? {
            return Ok(shard);
        }
        // 64 random bits collided: draw again.
    }
}

/// `path` with `.` and `..` resolved lexically (Python's `normpath`),
/// absolute.
fn normalize(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Python's `realpath`: symlinks resolved where the path exists.
fn real(path: &Path) -> PathBuf {
    files::canonical(path).unwrap_or_else(|| normalize(path))
}

/// Appends the shard directories `shards` (directly inside the table
/// directory `table`, in order) to the table's manifest in one atomic
/// rename, creating the manifest on the first commit. Returns the table's
/// row count after the commit.
///
/// Every shard is checked first (a plain table whose columns have equal
/// lengths, the same column names and the same [`ColumnSpec`](crate::table::ColumnSpec)s as the
/// table's), so a rejected commit changes nothing. Commits from several
/// processes serialise on the lock file `.manifest.lock`. A column with a
/// validity stream in any shard is nullable in all: shards without one get
/// an all-valid stream before the manifest names them.
pub fn commit_shards(table: &Path, shards: &[PathBuf]) -> Result<u64> {
    let names = shard_names(table, shards)?;
    super::commit::commit_names(&crate::Location::local(table), &names)
}

/// The names of the shard directories `shards`, checked: each directly
/// inside the table directory `table` (which must exist), a plain
/// directory name, none twice. `InvalidValue` (or [`Error::Missing`] for
/// the table) naming the argument otherwise.
fn shard_names(table: &Path, shards: &[PathBuf]) -> Result<Vec<String>> {
    let mut names = Vec::with_capacity(shards.len());
    for s in shards {
        let norm = normalize(s);
        let parent = norm.parent().unwrap_or(Path::new("/"));
        if real(parent) != real(table) {
            return Err(Error::InvalidValue(format!(
                "shard {} must be a directory directly inside the table {}",
                s.display(),
                table.display()
            )));
        }
        let name = norm
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_shard_name(&name) {
            return Err(Error::InvalidValue(format!(
                "shard name {} must be a plain directory name",
                py_str(&name)
            )));
        }
        names.push(name);
    }
    if names.iter().collect::<BTreeSet<_>>().len() != names.len() {
        return Err(Error::InvalidValue(format!(
            "shards names a shard twice: {}",
            py_list(&names)
        )));
    }
    if !files::is_dir(&Fs::Local, table) {
        return Err(Error::Missing {
            path: table.to_path_buf(),
            message: format!("table directory {} does not exist", table.display()),
        });
    }
    Ok(names)
}
