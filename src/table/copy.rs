//! Moving tables between locations: [`copy_table`] (any table, local or
//! remote, to an empty location). Committing shards is `write/`.
//!
//! A copy makes its destination a table only once every object is in
//! place. A local destination is filled under a temporary name beside it
//! and renamed in. A remote one first receives the marker
//! [`INCOMPLETE`](super::files::INCOMPLETE) (no reader opens a directory
//! holding it), then every object, concurrently (multipart uploads for
//! large ones, each checked for its size once assembled), then a sharded table's
//! `manifest.json` (recording each shard's objects and sizes, so readers
//! need not list), and finally the marker is removed. A copy killed at any
//! point leaves a destination that does not open as a table, and copying
//! again over it is allowed.
//!

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use object_store::PutMode;

use super::files::{self, INCOMPLETE};
use super::manifest::{Manifest, ShardEntry, MANIFEST_FILE, PATCH_ROWS_FILE, SELF_SHARD};
use super::versions::{version_file_name, VERSIONS_DIR};
use super::{Table, VALIDITY_DIR};
use crate::io::io_error;
use crate::io::remote::join_key;
use crate::io::remote::upload::{transfer, Transfer};
use crate::{Error, Location, Result};

/// Progress of a copy: called with the bytes copied so far and the total;
/// an error it returns stops the copy.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) -> Result<()> + Sync);

/// Whether the file `rel` of a plain table (or shard) with `columns`
/// belongs to it: its stores, their validity streams, `table.json`.
fn in_plain_table(rel: &str, columns: &BTreeSet<String>) -> bool {
    let mut parts = rel.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(super::TABLE_FILE), None, _) => true,
        (Some(VALIDITY_DIR), Some(col), Some(_)) => columns.contains(col),
        (Some(col), Some(_), None) => columns.contains(col),
        _ => false,
    }
}

/// Calls `progress` with running totals from a transfer's increments.
fn counting<'a>(
    total: u64,
    progress: Progress<'a>,
) -> impl Fn(u64) -> std::io::Result<()> + Sync + 'a {
    let done = AtomicU64::new(0);
    move |n| {
        let now = done.fetch_add(n, Ordering::Relaxed) + n;
        progress(now, total).map_err(|e| std::io::Error::other(StopCopy(e.to_string())))
    }
}

/// A progress callback's error, carried through a transfer.
#[derive(Debug)]
struct StopCopy(String);

impl std::fmt::Display for StopCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StopCopy {}

/// Files by relative path, with their sizes.
type Files = Vec<(String, u64)>;

/// What a copy of `table` takes: every file of a plain table, or each
/// file that the latest version of a sharded one reads (the manifest
/// apart), with sizes.
fn plan_copy(src: &Location, table: &Table) -> Result<(Files, Option<Manifest>)> {
    match table.shards() {
        None => {
            let columns: BTreeSet<String> = table
                .column_names()
                .into_iter()
                .map(str::to_owned)
                .collect();
            Ok((
                src.files_below()?
                    .into_iter()
                    .filter(|(rel, _)| in_plain_table(rel, &columns))
                    .collect(),
                None,
            ))
        }
        Some(_) => {
            // The version first, its files then: a version's files are in
            // place before it is committed, so a commit between the two
            // steps adds files this copy leaves out, never the reverse.
            let manifest = super::versions::read_manifest_in(src.fs(), src.path())?;
            let files: Files = src
                .files_below()?
                .into_iter()
                .filter(|(rel, _)| read_by(&manifest, rel))
                .collect();
            missing_column(&manifest, &files).map_or(Ok(()), |(shard, column)| {
                Err(Error::InvalidState(format!(
                    "{}: the files of column {column:?} of shard {shard:?} went away while the copy listed them (a cleanup removed the version being copied); copy again",
                    src.path().display()
                )))
            })?;
            Ok((files, Some(manifest)))
        }
    }
}

/// The directory (relative to the table) that `column` of `shard` is
/// read from: the last group listing it, else the shard's own.
fn column_dir(shard: &ShardEntry, column: &str) -> String {
    let within = match shard.column_home(column) {
        "" => column.to_owned(),
        group => format!("{group}/{column}"),
    };
    if shard.name == SELF_SHARD {
        within
    } else {
        format!("{}/{within}", shard.name)
    }
}

/// Whether the file `rel` of a sharded table is one that `manifest` reads:
/// in a shard it names, a file of the shard's own columns, of one of its
/// column groups (a patch's rows file too), or its deletion file.
fn read_by(manifest: &Manifest, rel: &str) -> bool {
    let columns: BTreeSet<String> = manifest.columns.iter().cloned().collect();
    let in_shard = |s: &ShardEntry, rest: &str| {
        in_plain_table(rest, &columns)
            || s.deleted.as_ref().is_some_and(|d| d.file == rest)
            || s.groups.iter().any(|g| {
                let cols: BTreeSet<String> = g
                    .columns
                    .iter()
                    .filter(|c| columns.contains(*c))
                    .cloned()
                    .collect();
                rest.strip_prefix(g.dir.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                    .is_some_and(|r| {
                        in_plain_table(r, &cols) || (g.patch.is_some() && r == PATCH_ROWS_FILE)
                    })
            })
    };
    if let Some((name, rest)) = rel.split_once('/') {
        if let Some(s) = manifest.shards.iter().find(|s| s.name == name) {
            return in_shard(s, rest);
        }
    }
    manifest
        .shards
        .iter()
        .find(|s| s.name == SELF_SHARD)
        .is_some_and(|s| in_shard(s, rel))
}

/// A (shard, column) of `manifest` that none of `files` holds, if any.
fn missing_column(manifest: &Manifest, files: &Files) -> Option<(String, String)> {
    let dirs: BTreeSet<&str> = files
        .iter()
        .filter_map(|(rel, _)| rel.rsplit_once('/').map(|(d, _)| d))
        .collect();
    manifest.shards.iter().find_map(|s| {
        manifest.columns.iter().find_map(|c| {
            let dir = column_dir(s, c);
            (!dirs.contains(dir.as_str())).then(|| (s.name.clone(), c.clone()))
        })
    })
}

/// Copies the table at `src` (plain or sharded, any location) to `dst`,
/// which must not exist, be empty, or hold an interrupted copy. Returns the
/// bytes copied. See the module documentation for what a reader of `dst`
/// sees meanwhile.
///
/// `AlreadyExists` when `dst` holds anything else; what opening `src`
/// raises; `InvalidValue` when `dst` is an `http(s)` location (read-only).
pub fn copy_table(src: &Location, dst: &Location, progress: Progress<'_>) -> Result<u64> {
    let table = Table::open_at(src, true)?;
    let planned = plan_copy(src, &table);
    let _ = table.close();
    let (files, manifest) = planned?;
    let total: u64 = files.iter().map(|f| f.1).sum();
    let existing = dst.files_below()?;
    let interrupted = existing.iter().any(|(rel, _)| rel == INCOMPLETE);
    if !existing.is_empty() && !interrupted {
        return Err(Error::AlreadyExists {
            path: dst.path().to_path_buf(),
            reason: "the destination of a copy must be new or empty".into(),
        });
    }
    progress(0, total)?;
    let count = counting(total, progress);
    let stopped = |e: std::io::Error, at: &Path| -> Error {
        match e.get_ref().and_then(|i| i.downcast_ref::<StopCopy>()) {
            Some(s) => Error::InvalidState(format!(
                "the copy was stopped by its progress callback: {}",
                s.0
            )),
            None => io_error(at, e),
        }
    };
    // The one branch of a copy on where its destination is: a local one is
    // filled under a temporary name and renamed in, a bucket has no rename
    // and is marked incomplete until every object is in place (see the
    // module documentation).
    match dst.remote_root()? {
        None => {
            // Filled under a temporary name beside it, then renamed in.
            let target = dst.path();
            let parent = target
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            files::create_dir_all(parent)?;
            let name = target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = parent.join(format!(".{name}.copy-{}", files::random_hex(6)));
            let staged = Location::local(&tmp);
            let transfers: Vec<Transfer> = files
                .iter()
                .map(|(rel, size)| Transfer {
                    from: src.place(rel),
                    to: staged.place(rel),
                    size: *size,
                })
                .collect();
            let done = (|| {
                transfer(&transfers, &count, None).map_err(|e| stopped(e, src.path()))?;
                if let Some(m) = &manifest {
                    // The copy's first version, then its pointer.
                    let bytes = super::versions::stamp(m.clone(), None, "copy").to_json();
                    let vdir = tmp.join(VERSIONS_DIR);
                    files::create_dir_all(&vdir)?;
                    files::write_atomically(&vdir, &version_file_name(1), ".version.copy", &bytes)?;
                    files::write_atomically(&tmp, MANIFEST_FILE, ".manifest.copy", &bytes)?;
                }
                if target.exists() {
                    // An empty directory (checked above) is replaced.
                    files::remove_dir(target)?;
                }
                files::rename_synced(&tmp, target, parent)
            })();
            if done.is_err() {
                let _ = files::remove_dir_all(&tmp);
            }
            done?;
        }
        Some((remote, base)) => {
            if !remote.writable() {
                return Err(Error::InvalidValue(format!(
                    "{} is an http(s) location, which is read-only: copy to a local path or an object store",
                    dst.path().display()
                )));
            }
            let at = dst.path();
            let marker = join_key(&base, INCOMPLETE);
            remote
                .put(
                    &marker,
                    Bytes::from_static(b"copy in progress\n"),
                    PutMode::Overwrite,
                )
                .map_err(|e| io_error(at, e))?;
            let transfers: Vec<Transfer> = files
                .iter()
                .map(|(rel, size)| Transfer {
                    from: src.place(rel),
                    to: dst.place(rel),
                    size: *size,
                })
                .collect();
            // The lease objects an interrupted copy left: the uploads they
            // list are aborted, and the objects removed with its others.
            let leases = format!("{}/", files::LEASES_DIR);
            let dead: Vec<String> = existing
                .iter()
                .filter(|(rel, _)| rel.starts_with(&leases))
                .map(|(rel, _)| rel.clone())
                .collect();
            super::write::copy_leased(dst, interrupted, &dead, &transfers, &count)?
                .map_err(|e| stopped(e, src.path()))?;
            // What an interrupted copy left that this one did not write.
            let ours: BTreeSet<&str> = files.iter().map(|f| f.0.as_str()).collect();
            let stale: Vec<String> = existing
                .iter()
                .filter(|(rel, _)| {
                    rel != INCOMPLETE && rel != MANIFEST_FILE && !ours.contains(rel.as_str())
                })
                .map(|(rel, _)| join_key(&base, rel))
                .collect();
            remote.delete(&stale).map_err(|e| io_error(at, e))?;
            if let Some(mut m) = manifest {
                for shard in &mut m.shards {
                    let prefix = format!("{}/", shard.name);
                    shard.objects = Some(
                        files
                            .iter()
                            .filter_map(|(rel, size)| {
                                rel.strip_prefix(prefix.as_str())
                                    .map(|r| (r.to_owned(), *size))
                            })
                            .collect(),
                    );
                }
                // Through the one commit point (a conditional write over
                // what an interrupted copy may have left).
                super::publish_at(dst, "copy", &mut |_| Ok(m.clone()))?;
            }
            remote.delete(&[marker]).map_err(|e| io_error(at, e))?;
        }
    }
    Ok(total)
}
