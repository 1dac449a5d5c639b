//! Where a write goes ([`Root`]): a local directory or a prefix of a
//! bucket, and what the write path does there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::io::Fs;
use crate::table::files;
use crate::table::manifest::{
    shard_dir, shard_rel, Manifest, ShardEntry, MANIFEST_FILE, MANIFEST_LOCK,
};
use crate::table::shard::{
    column_spec_in, copy_as_ragged, ensure_validity, shard_schema_in, Contents, Open, ShardSchema,
};
use crate::table::types::validity_dir;
use crate::table::versions::{self, as_first_version, stamp, version_file_name, VERSIONS_DIR};
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

/// What a commit makes of the current manifest (None before the first
/// commit), given the root as this attempt sees it.
pub(super) type Next<'a> = &'a mut dyn FnMut(&Root, Option<&Manifest>) -> Result<Manifest>;

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
        // From the shard's listing and one read of each meta.zr, not by
        // opening every store again.
        let (schema, _) = self.schema_below(shard_rel(name), |dir| Error::Missing {
            path: dir.to_path_buf(),
            message: format!("shard directory {} does not exist", dir.display()),
        })?;
        Ok(schema)
    }

    /// The schema of the plain table at `rel` (a shard, or a group in
    /// one; "" for the root) and, in a bucket, its objects (relative to
    /// `rel`) and their sizes, from their listing and one read of each
    /// `meta.zr`. `missing(dir)` is the error when a bucket holds nothing
    /// there (a local table's is the directory's open error).
    #[allow(clippy::type_complexity)]
    pub(super) fn schema_below(
        &self,
        rel: &str,
        missing: impl FnOnce(&Path) -> Error,
    ) -> Result<(ShardSchema, Option<Vec<(String, u64)>>)> {
        let dir = if rel.is_empty() {
            self.path().to_path_buf()
        } else {
            self.path().join(rel)
        };
        match &self.kind {
            RootKind::Local(_) => {
                let _ = missing;
                Ok((shard_schema_in(self.at.fs(), &dir)?, None))
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                let objects = bucket::sizes_below(b, rel)?;
                if objects.is_empty() {
                    return Err(missing(&dir));
                }
                let schema = bucket::listed_schema(b, rel, &dir, &objects)?;
                Ok((schema, Some(objects)))
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
            let (spec, _, _) = column_spec_in(
                self.at.fs(),
                dir,
                &name,
                t,
                Some(m.layout(&name)),
                Open::Header,
            )?;
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
        match versions::latest(self.at.fs(), self.path())? {
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

    /// Uploads the local directory `dir` as `rel` (a shard, or a group in
    /// one); for a local table, where it already is, makes it durable
    /// instead. Returns a bucket's objects written (relative to `rel`) and
    /// their sizes.
    pub(super) fn upload(&self, dir: &Path, rel: &str) -> Result<Option<BTreeMap<String, u64>>> {
        match &self.kind {
            RootKind::Local(_) => {
                // It is in place already: made durable here, at once (its
                // fill may have deferred its fsyncs, see `deferring_syncs`).
                let _ = rel;
                crate::io::local::sync_tree(dir).map_err(|e| Error::io(dir, e))?;
                Ok(None)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => Ok(Some(bucket::upload_dir(b, dir, rel)?.into_iter().collect())),
        }
    }

    /// The local directory in which a write makes its new directories for
    /// the shard `shard` (its own directory, or the table's for
    /// [`SELF_SHARD`](crate::table::SELF_SHARD)): there for a local table; for a bucket, a new
    /// staging directory of `staging` (named for `what`), uploaded from.
    pub(super) fn work_dir(
        &self,
        staging: &files::StagingSet,
        what: &str,
        shard: &str,
    ) -> Result<PathBuf> {
        match &self.kind {
            RootKind::Local(dir) => {
                let _ = (staging, what);
                Ok(shard_dir(dir, shard))
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(_) => {
                let _ = shard;
                staging.make(what)
            }
        }
    }

    /// Removes the directory `dir` a write made in its
    /// [`work_dir`](Root::work_dir), once uploaded or given up (`failed`):
    /// a bucket's staging directory goes either way, a local table's
    /// directory (the shard or group itself) only when `failed`. Errors
    /// are ignored (`cleanup` reclaims what is left).
    pub(super) fn drop_work(&self, dir: &Path, failed: bool) {
        match &self.kind {
            RootKind::Local(_) => {
                if failed {
                    let _ = files::remove_dir_all(dir);
                }
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(_) => {
                let _ = failed;
                files::remove_staging(dir.parent().unwrap_or(dir))
            }
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

    /// The file `rel` (relative to the root), read afresh; None when
    /// absent.
    pub(super) fn read(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        match &self.kind {
            RootKind::Local(dir) => files::read_whole(&Fs::Local, &dir.join(rel)),
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::read(b, rel),
        }
    }

    /// Replaces the small file `rel` (relative to the root) at once: a
    /// local one is written as `tmp` beside it (`.<name>.<random>` when
    /// None), synced and renamed over it (its directory must exist); in a
    /// bucket, one write of the object.
    pub(super) fn overwrite(&self, rel: &str, tmp: Option<&str>, bytes: Vec<u8>) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => {
                let (parent, name) = local_file(dir, rel);
                let tmp = tmp.map_or_else(
                    || format!(".{name}.{}", files::random_hex(4)),
                    str::to_owned,
                );
                files::write_atomically(&parent, &name, &tmp, &bytes)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                let _ = tmp;
                bucket::overwrite(b, rel, bytes)
            }
        }
    }

    /// Writes the small file `rel` only if it is absent: false when it was
    /// there. Locally under the commit lock (which every writer of such a
    /// file holds): a look, then its directory made and the file written
    /// as [`overwrite`](Root::overwrite) does; in a bucket, a create-only
    /// write.
    pub(super) fn create(&self, rel: &str, tmp: Option<&str>, bytes: Vec<u8>) -> Result<bool> {
        match &self.kind {
            RootKind::Local(dir) => {
                if files::read_whole(&Fs::Local, &dir.join(rel))?.is_some() {
                    return Ok(false);
                }
                files::create_dir_all(&local_file(dir, rel).0)?;
                self.overwrite(rel, tmp, bytes)?;
                Ok(true)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                let _ = tmp;
                bucket::create(b, rel, bytes)
            }
        }
    }

    /// Makes the directory `rel` (relative to the root) and its parents
    /// where they are missing; nothing to do in a bucket.
    pub(super) fn make_dir(&self, rel: &str) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => files::create_dir_all(&dir.join(rel)),
            #[cfg(feature = "remote")]
            RootKind::Bucket(_) => {
                let _ = rel;
                Ok(())
            }
        }
    }

    /// Removes the files `rels` (relative to the root); those gone
    /// already are skipped. Locally one by one, each directory synced.
    pub(super) fn delete_files(&self, rels: &[String]) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => {
                for rel in rels {
                    let path = dir.join(rel);
                    let parent = path.parent().unwrap_or(dir);
                    files::remove_file_synced(&path, parent)?;
                }
                Ok(())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::delete_rels(b, rels),
        }
    }

    /// The bytes of the files `rels` (relative to the root) that exist.
    pub(super) fn file_sizes(&self, rels: &[String]) -> Result<u64> {
        let mut total = 0;
        match &self.kind {
            RootKind::Local(dir) => {
                for rel in rels {
                    total += files::file_len(&dir.join(rel)).unwrap_or(0);
                }
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                // One listing per directory of the files.
                let mut by_dir: BTreeMap<&str, Vec<&str>> = Default::default();
                for rel in rels {
                    let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
                    by_dir.entry(dir).or_default().push(name);
                }
                for (dir, names) in by_dir {
                    let sizes = bucket::sizes_below(b, dir)?;
                    for name in names {
                        total += sizes.iter().find(|(n, _)| n == name).map_or(0, |(_, s)| *s);
                    }
                }
            }
        }
        Ok(total)
    }

    /// Removes the directory `rel` (relative to the root: a shard, a group,
    /// a column's store) whole, if it is one; returns its bytes.
    pub(super) fn remove_tree(&self, rel: &str) -> Result<u64> {
        match &self.kind {
            RootKind::Local(dir) => {
                let tree = dir.join(rel);
                if !tree.is_dir() {
                    return Ok(0);
                }
                let bytes = files::tree_size(&tree)?;
                files::remove_dir_all(&tree)?;
                Ok(bytes)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => {
                let objects = bucket::sizes_below(b, rel)?;
                let bytes = objects.iter().map(|(_, s)| s).sum();
                let rels: Vec<String> = objects
                    .into_iter()
                    .map(|(r, _)| format!("{rel}/{r}"))
                    .collect();
                bucket::delete_rels(b, &rels)?;
                Ok(bytes)
            }
        }
    }

    /// Holds the commit lock of a local table (nothing in a bucket, whose
    /// writes of the table's files are conditional).
    pub(super) fn commit_lock(&self) -> Result<Option<files::CommitLock>> {
        match &self.kind {
            RootKind::Local(dir) => Ok(Some(files::CommitLock::acquire(dir, MANIFEST_LOCK)?)),
            #[cfg(feature = "remote")]
            RootKind::Bucket(_) => Ok(None),
        }
    }

    /// [`publish`](super::commit::publish): locally under the commit lock,
    /// the version file written before `manifest.json` (after it for a new
    /// table, whose commit point is its manifest); in a bucket with a
    /// conditional write retried while other committers win.
    pub(super) fn publish(&self, operation: &str, next: Next<'_>) -> Result<Manifest> {
        match &self.kind {
            RootKind::Local(dir) => {
                files::create_dir_all(dir)?;
                let _lock = files::CommitLock::acquire(dir, MANIFEST_LOCK)?;
                let current = versions::latest(&Fs::Local, dir)?;
                let manifest = stamp(
                    next(self, current.as_ref().map(|c| &c.manifest))?,
                    current.as_ref(),
                    operation,
                );
                let tmp =
                    |name: &str| format!(".{name}.{}.{}", std::process::id(), files::random_hex(4));
                let bytes = manifest.to_json();
                let vdir = dir.join(VERSIONS_DIR);
                let write_version = |m: &Manifest, bytes: &[u8]| {
                    files::create_dir_all(&vdir)?;
                    let name = version_file_name(m.version());
                    files::write_atomically(&vdir, &name, &tmp(&name), bytes)
                };
                match &current {
                    None => {
                        // A new table's commit point is its manifest.json (a
                        // version file alone is no table); its version 1
                        // follows.
                        files::write_atomically(dir, MANIFEST_FILE, &tmp(MANIFEST_FILE), &bytes)?;
                        write_version(&manifest, &bytes)?;
                    }
                    Some(current) => {
                        let own = vdir.join(version_file_name(current.manifest.version()));
                        if !files::exists(&Fs::Local, &own) {
                            let first = as_first_version(current);
                            write_version(&first, &first.to_json())?;
                        }
                        // The commit point: the new version's file.
                        write_version(&manifest, &bytes)?;
                        files::write_atomically(dir, MANIFEST_FILE, &tmp(MANIFEST_FILE), &bytes)?;
                    }
                }
                Ok(manifest)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket(b) => bucket::publish(b, operation, &mut |b, current| {
                next(&Root::in_bucket(b.clone()), current)
            }),
        }
    }

    /// The commit of a write planned on `planned` (a bucket's
    /// `manifest.json`, known without reading it again): see
    /// [`bucket::publish_planned`]. Returns the version made and what the
    /// commit learnt of it. A local table has no such plan: its commit is
    /// [`publish`](Root::publish)'s.
    #[cfg(feature = "remote")]
    pub(super) fn publish_planned(
        &self,
        operation: &str,
        planned: &bucket::Planned,
        next: Next<'_>,
    ) -> Result<(Manifest, Option<bucket::Planned>)> {
        match &self.kind {
            RootKind::Local(_) => {
                let _ = planned;
                Ok((self.publish(operation, next)?, None))
            }
            RootKind::Bucket(b) => {
                bucket::publish_planned(b, operation, planned, &mut |b, current| {
                    next(&Root::in_bucket(b.clone()), current)
                })
            }
        }
    }

    /// The `manifest.json` of version `version` that a write can be
    /// planned on without reading the bucket again at its commit: `known`
    /// (what an open or a commit learnt of it), else the bucket's, read
    /// now; None when it is of another version, or for a local table.
    #[cfg(feature = "remote")]
    pub(super) fn planned(
        &self,
        version: u64,
        known: Option<bucket::Planned>,
    ) -> Result<Option<bucket::Planned>> {
        match &self.kind {
            RootKind::Local(_) => {
                let _ = (version, known);
                Ok(None)
            }
            RootKind::Bucket(b) => {
                let planned = match known {
                    Some(planned) => Some(planned),
                    None => bucket::pointer(&b.fresh()?)?,
                };
                Ok(planned.filter(|p| p.manifest().version() == version))
            }
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

/// The directory and the name of the local file `rel` of the root `dir`.
fn local_file(dir: &Path, rel: &str) -> (PathBuf, String) {
    let path = dir.join(rel);
    let parent = path.parent().unwrap_or(dir).to_path_buf();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (parent, name)
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
