//! Where a write goes ([`Root`]): a local directory or a prefix of a
//! bucket, and what the write path does there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::io::Fs;
use crate::table::files;
use crate::table::manifest::{shard_dir, Manifest, ShardEntry, MANIFEST_FILE, MANIFEST_LOCK};
use crate::table::shard::{
    column_spec_in, copy_as_ragged, ensure_validity, shard_schema_in, Contents, ShardSchema,
};
use crate::table::types::validity_dir;
use crate::{Error, Location, Result, Store};

#[cfg(feature = "remote")]
use super::bucket;

/// Where a write goes: a local directory or a prefix of a bucket.
#[derive(Debug)]
pub(super) struct Root {
    pub(super) at: Location,
    pub(super) kind: RootKind,
    /// This process's lease of the write in progress, taken before its
    /// first shard or group directory is made.
    lease: std::sync::Mutex<Option<Held>>,
}

/// A lease this process holds: a locked file, or a bucket's lease object
/// it keeps rewriting. Dropping it gives it back.
enum Held {
    Local(#[allow(dead_code)] files::Lease),
    #[cfg(feature = "remote")]
    Bucket(#[allow(dead_code)] bucket::BucketLease),
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

#[derive(Debug)]
pub(super) enum RootKind {
    Local(PathBuf),
    #[cfg(feature = "remote")]
    Bucket(bucket::Bucket),
}

impl Root {
    pub(super) fn of(at: &Location) -> Result<Root> {
        let kind = match at.fs() {
            Fs::Local => RootKind::Local(at.path().to_path_buf()),
            #[cfg(feature = "remote")]
            Fs::Remote(_) => RootKind::Bucket(bucket::Bucket::of(at)?),
        };
        Ok(Root {
            at: at.clone(),
            kind,
            lease: Default::default(),
        })
    }

    /// The root of the bucket place `b`.
    #[cfg(feature = "remote")]
    pub(super) fn in_bucket(b: bucket::Bucket) -> Root {
        Root {
            at: b.at.clone(),
            kind: RootKind::Bucket(b),
            lease: Default::default(),
        }
    }

    /// Marks the write `token` in progress before it makes a shard or
    /// group directory (or objects) there: a lease this process holds
    /// until [`release_lease`](Root::release_lease) or its end (a locked
    /// file; in a bucket, an object it keeps rewriting), so that `cleanup`
    /// leaves the write's directories alone while it lives.
    pub(super) fn hold_lease(&self, token: &str) -> Result<()> {
        let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        if lease.is_none() {
            *lease = Some(match &self.kind {
                RootKind::Local(dir) => Held::Local(files::write_lease(dir, token)?),
                #[cfg(feature = "remote")]
                RootKind::Bucket(b) => Held::Bucket(bucket::BucketLease::take(b, token)?),
            });
        }
        Ok(())
    }

    /// Gives this process's lease back (the write committed or discarded
    /// what it made), removing the leases directory when it is empty.
    pub(super) fn release_lease(&self) {
        let lease = self.lease.lock().unwrap_or_else(|e| e.into_inner()).take();
        if lease.is_some() {
            drop(lease);
            match &self.kind {
                RootKind::Local(dir) => {
                    let _ = files::remove_dir(&dir.join(files::LEASES_DIR));
                }
                #[cfg(feature = "remote")]
                RootKind::Bucket(_) => {}
            }
        }
    }

    pub(super) fn path(&self) -> &Path {
        self.at.path()
    }

    pub(super) fn exists(&self) -> bool {
        match &self.kind {
            RootKind::Local(dir) => dir.exists(),
            #[cfg(feature = "remote")]
            RootKind::Bucket(_) => true,
        }
    }

    /// Why a new table cannot go here whatever it holds, if so.
    pub(super) fn not_a_directory(&self) -> Option<String> {
        match &self.kind {
            RootKind::Local(dir) if dir.exists() && !dir.is_dir() => Some(format!(
                "{} exists and is not a directory: a new table goes to a new or empty directory",
                dir.display()
            )),
            _ => None,
        }
    }

    /// The names directly below the root (for a bucket: the first path
    /// component of every object below it).
    pub(super) fn entries(&self) -> Result<Vec<String>> {
        match &self.kind {
            RootKind::Local(dir) => {
                if !dir.is_dir() {
                    return Ok(Vec::new());
                }
                files::list(dir)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                let mut names: Vec<String> = bucket::files(b)?
                    .into_iter()
                    .map(|(rel, _)| rel.split('/').next().unwrap_or_default().to_owned())
                    .collect();
                names.sort();
                names.dedup();
                Ok(names)
            }
        }
    }

    /// Whether the root holds stores directly (is a plain table).
    pub(super) fn holds_stores(&self) -> Result<bool> {
        match &self.kind {
            RootKind::Local(dir) => {
                Ok(dir.is_dir() && !files::column_dirs(&Fs::Local, dir)?.is_empty())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => Ok(bucket::files(b)?
                .iter()
                .any(|(rel, _)| rel.split('/').nth(1) == Some(crate::format::META_FILE))),
        }
    }

    pub(super) fn shard_schema(&self, name: &str) -> Result<ShardSchema> {
        let dir = shard_dir(self.path(), name);
        match &self.kind {
            RootKind::Local(_) => shard_schema_in(self.at.fs(), &dir),
            // From the shard's listing and one read of each meta.zr, not
            // by opening every store again.
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                let rel = bucket::shard_rel(name);
                let objects = bucket::sizes_below(b, rel)?;
                if objects.is_empty() {
                    return Err(crate::Error::Missing {
                        path: dir.clone(),
                        message: format!("shard directory {} does not exist", dir.display()),
                    });
                }
                bucket::listed_schema(b, rel, &dir, &objects)
            }
        }
    }

    /// The schema every shard of the version `m` has (its first shard's
    /// columns, by name, where the shard keeps them); None for a version
    /// without shards.
    pub(super) fn version_schema(&self, m: &Manifest) -> Result<Option<ShardSchema>> {
        let Some(first) = m.shards.first() else {
            return Ok(None);
        };
        let mut names = m.columns.clone();
        names.sort();
        let mut columns = Vec::with_capacity(names.len());
        for name in names {
            let t = crate::table::ColumnType {
                logical: m.logical(&name),
                nullable: false,
            };
            let home = first.column_path(self.path(), &name);
            let dir = home.parent().unwrap_or(self.path());
            let (spec, _, _) = column_spec_in(self.at.fs(), dir, &name, t, Some(m.layout(&name)))?;
            columns.push((name, spec));
        }
        Ok(Some(ShardSchema {
            columns,
            rows: first.rows,
            nulls: Default::default(),
        }))
    }

    /// The schema of the table's latest version, if it has shards.
    pub(super) fn reference_schema(&self) -> Result<Option<ShardSchema>> {
        match crate::table::versions::latest(self.at.fs(), self.path())? {
            Some(l) => self.version_schema(&l.manifest),
            None => Ok(None),
        }
    }

    /// A new shard's objects (recorded in a remote table's manifest) and
    /// the columns of `reference` it has validity streams for. `known`: its
    /// objects as this process uploaded them (not listed again).
    pub(super) fn shard_contents(
        &self,
        name: &str,
        reference: &ShardSchema,
        known: Option<&BTreeMap<String, u64>>,
    ) -> Result<Contents> {
        match &self.kind {
            RootKind::Local(dir) => {
                let _ = known;
                let shard = dir.join(name);
                let has = reference
                    .columns
                    .iter()
                    .filter(|(c, _)| files::is_store(&Fs::Local, &validity_dir(&shard, c)))
                    .map(|(c, _)| c.clone())
                    .collect();
                Ok((None, has))
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::shard_contents(b, name, reference, known),
        }
    }

    /// Gives the shard `entry` all-valid validity streams for `columns`
    /// (records columns: a columnar column keeps its nulls in its file).
    pub(super) fn add_validity(&self, entry: &mut ShardEntry, columns: &[&String]) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => {
                let shard = crate::table::manifest::shard_dir(dir, &entry.name);
                for column in columns {
                    // Beside the column's store: in its group, if any.
                    ensure_validity(&shard.join(entry.column_home(column)), column, entry.rows)?;
                }
                Ok(())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::add_validity(b, entry, columns),
        }
    }

    /// Uploads the local shard `dir` as the shard `name` (nothing to do for
    /// a local table, where it already is); returns a bucket's objects
    /// written and their sizes.
    pub(super) fn upload_shard(
        &self,
        dir: &Path,
        name: &str,
    ) -> Result<Option<BTreeMap<String, u64>>> {
        match &self.kind {
            RootKind::Local(_) => {
                let _ = (dir, name);
                Ok(None)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => Ok(Some(
                bucket::upload_dir(b, dir, name)?.into_iter().collect(),
            )),
        }
    }

    /// Removes the (uncommitted) shards `names`.
    pub(super) fn remove_shards(&self, names: &[String]) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => {
                for name in names {
                    let shard = dir.join(name);
                    if shard.exists() {
                        files::remove_dir_all(&shard)?;
                    }
                }
                Ok(())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::remove_shards(b, names),
        }
    }

    /// Rewrites the dense column `column` of the uncommitted shard `shard`
    /// as a ragged store of the same records, each of the dense item shape.
    pub(super) fn rewrite_ragged(&self, shard: &str, column: &str) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => {
                let col = dir.join(shard).join(column);
                let parent = dir.join(shard);
                let tmp = parent.join(format!(".ragged-{column}"));
                let old = parent.join(format!(".dense-{column}"));
                let dense = Store::open_readonly(&col)?;
                let made = copy_as_ragged(&dense, &tmp);
                let _ = dense.close();
                if let Err(e) = made {
                    let _ = files::remove_dir_all(&tmp);
                    return Err(e);
                }
                files::rename_synced(&col, &old, &parent)?;
                files::rename_synced(&tmp, &col, &parent)?;
                files::remove_dir_all(&old)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::rewrite_ragged(b, shard, column),
        }
    }

    /// [`TableWrite::discard`] of the shards named `prefix*`.
    pub(super) fn discard(&self, prefix: &str, remove_table: bool) -> Result<Vec<String>> {
        match &self.kind {
            RootKind::Local(dir) => discard_shards(dir, prefix, remove_table),
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::discard(b, prefix),
        }
    }
}

/// Removes what an abandoned write left in the table directory `table`:
/// the shard directories whose names start with `prefix` and that the
/// manifest does not name (a failed write's, a retried task's). When the
/// table has no manifest and nothing is left but the commit lock, the lock
/// goes too, and with `remove_table` the then empty directory. A manifest
/// that cannot be read leaves everything as it is (it is not this write's
/// to judge). Returns the shard directories removed.
fn discard_shards(table: &Path, prefix: &str, remove_table: bool) -> Result<Vec<String>> {
    if prefix.is_empty() {
        return Err(Error::InvalidValue(
            "prefix must name the write's shards, got an empty string".into(),
        ));
    }
    if !files::is_dir(&Fs::Local, table) {
        return Ok(Vec::new());
    }
    let has_manifest = files::is_file(&Fs::Local, &table.join(MANIFEST_FILE));
    let committed: Vec<String> = if has_manifest {
        match crate::table::read_manifest(table) {
            Ok(m) => m.shards.into_iter().map(|s| s.name).collect(),
            Err(_) => return Ok(Vec::new()),
        }
    } else {
        Vec::new()
    };
    let mut removed = Vec::new();
    for name in files::list(table)? {
        if name.starts_with(prefix) && !committed.contains(&name) {
            let dir = table.join(&name);
            if files::is_dir(&Fs::Local, &dir) {
                files::remove_dir_all(&dir)?;
                removed.push(name);
            }
        }
    }
    if !has_manifest {
        // A commit killed while writing the first manifest leaves its
        // temporary file (never a committed state): removed under the lock,
        // so that no live commit loses its own.
        let tmp = format!(".{MANIFEST_FILE}.");
        if files::list(table)?.iter().any(|n| n.starts_with(&tmp)) {
            let _lock = files::CommitLock::acquire(table, MANIFEST_LOCK)?;
            if !files::is_file(&Fs::Local, &table.join(MANIFEST_FILE)) {
                for name in files::list(table)? {
                    if name.starts_with(&tmp) {
                        files::remove_file(&table.join(name))?;
                    }
                }
            }
        }
        // Leases of this write's other processes that are gone (its own
        // were given back before the discard).
        files::reclaim_leases_now(table);
        let left = files::list(table)?;
        if left == [MANIFEST_LOCK] {
            files::remove_file(&table.join(MANIFEST_LOCK))?;
        }
        if remove_table && files::list(table)?.is_empty() {
            files::remove_dir(table)?;
        }
    }
    Ok(removed)
}
