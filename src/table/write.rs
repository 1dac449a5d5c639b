//! The write path of sharded tables: every commit, local or remote, goes
//! through here.
//!
//! A write ([`TableWrite`]) names its shards `shard-<token>-<random>`, so
//! that what it leaves behind is recognisable as its own. Each shard is
//! filled as a plain table in a directory of its own: inside the table
//! directory when the table is local, in a temporary directory when it is
//! remote (then uploaded under its name and removed). No reader sees a
//! shard until a manifest names it. [`TableWrite::commit`] decides each
//! column's layout once over the shards of the write and the table (a
//! column dense in some shards and ragged in others is rewritten ragged
//! where it is dense, before anything is visible) and publishes the next
//! manifest through [`publish`], the one commit point:
//!
//! - locally, under the lock file `.manifest.lock`, the new `manifest.json`
//!   is written beside and renamed over the old one;
//! - in a bucket, `manifest.json` is replaced with a conditional write
//!   (`If-None-Match: *` for the first commit, `If-Match` the version read
//!   otherwise); a committer that lost the race reads the newer manifest,
//!   checks its shards against it again and retries, so concurrent
//!   committers on any hosts never lose each other's shards.
//!
//! On any error the write removes what it made ([`TableWrite::discard`]):
//! its uncommitted shards, and the table directory when the write created
//! it and nothing was committed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::files;
use super::manifest::MANIFEST_LOCK;
use super::manifest::{is_shard_name, parse_manifest, Manifest, ShardEntry, MANIFEST_FILE};
use super::repr::{py_list, py_str};
use super::shard::{check_shard_agrees, ensure_validity, shard_schema_in, ColumnSpec, ShardSchema};
use super::types::validity_dir;
use crate::io::Fs;
use crate::schema::Logical;
use crate::{Error, Location, Records, Result, Schema, Store};

/// What a write may find at its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// A new table: the destination must not exist, or be empty.
    Create,
    /// Shards added to the sharded table there (made by the first commit).
    Append,
}

/// One shard written by a [`TableWrite`], not yet committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenShard {
    /// The shard's directory name (below the table).
    pub name: String,
    /// Its rows.
    pub rows: u64,
}

/// A write of shards to the table at one location (see the module
/// documentation). Cheap to recreate in another process from its
/// [`token`](TableWrite::token) with [`TableWrite::resume`].
#[derive(Debug)]
pub struct TableWrite {
    root: Root,
    mode: WriteMode,
    token: String,
    existed: bool,
}

impl TableWrite {
    /// Starts a write to `dst`. With [`WriteMode::Create`] `dst` must not
    /// exist or be empty (`AlreadyExists` naming what it holds); with
    /// [`WriteMode::Append`] it must not be a plain table (`InvalidValue`).
    /// An `http(s)` location is read-only (`InvalidValue`).
    pub fn begin(dst: &Location, mode: WriteMode) -> Result<TableWrite> {
        let root = Root::of(dst)?;
        let existed = root.exists();
        let write = TableWrite {
            root,
            mode,
            token: files::random_hex(6),
            existed,
        };
        write.check_target()?;
        Ok(write)
    }

    /// The write `token` to `dst` that [`begin`](TableWrite::begin) started
    /// (in another process, say), `existed` as it found the destination.
    pub fn resume(
        dst: &Location,
        mode: WriteMode,
        token: &str,
        existed: bool,
    ) -> Result<TableWrite> {
        if token.len() < 8 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::InvalidValue(format!(
                "token must be a write's token (at least 8 hex digits), got {}",
                py_str(token)
            )));
        }
        Ok(TableWrite {
            root: Root::of(dst)?,
            mode,
            token: token.to_owned(),
            existed,
        })
    }

    /// The token naming this write's shards.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the destination existed when the write began.
    pub fn existed(&self) -> bool {
        self.existed
    }

    pub fn mode(&self) -> WriteMode {
        self.mode
    }

    /// The destination.
    pub fn location(&self) -> &Location {
        &self.root.at
    }

    fn prefix(&self) -> String {
        format!("shard-{}-", self.token)
    }

    fn ours(&self, name: &str) -> bool {
        name.starts_with(&self.prefix())
    }

    /// `AlreadyExists` unless a new table may go to the destination (for
    /// [`WriteMode::Create`]: nothing there but this write's shards and the
    /// commit lock); `InvalidValue` for a plain table there.
    fn check_target(&self) -> Result<()> {
        let held = self.root.entries()?;
        if self.mode == WriteMode::Create {
            if let Some(why) = self.root.not_a_directory() {
                return Err(Error::AlreadyExists {
                    path: self.root.path().to_path_buf(),
                    reason: why,
                });
            }
            let others: Vec<&String> = held
                .iter()
                .filter(|e| !self.ours(e) && e.as_str() != MANIFEST_LOCK)
                .collect();
            if !others.is_empty() {
                let shown: Vec<&String> = others.iter().copied().take(3).collect();
                return Err(Error::AlreadyExists {
                    path: self.root.path().to_path_buf(),
                    reason: format!(
                        "{} is not empty (it holds {}{}): a new table goes to a new or empty location",
                        self.root.path().display(),
                        py_list(&shown),
                        if others.len() > 3 { " ..." } else { "" }
                    ),
                });
            }
        } else if !held.iter().any(|e| e == MANIFEST_FILE) && self.root.holds_stores()? {
            return Err(plain_table(self.root.path()));
        }
        Ok(())
    }

    /// A new, empty shard directory of this write, to fill as a plain
    /// table and hand to [`finish_shard`](TableWrite::finish_shard): inside
    /// a local table's directory (created if needed), in a new temporary
    /// directory for a remote table.
    pub fn new_shard(&self) -> Result<PathBuf> {
        let parent = match &self.root.kind {
            RootKind::Local(dir) => dir.clone(),
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => {
                let tmp =
                    std::env::temp_dir().join(format!("loaderx-shard-{}", files::random_hex(6)));
                files::create_dir_all(&tmp)?;
                tmp
            }
        };
        files::create_dir_all(&parent)?;
        loop {
            let shard = parent.join(format!("{}{}", self.prefix(), files::random_hex(8)));
            if files::create_dir(&shard)? {
                return Ok(shard);
            }
        }
    }

    /// Checks the filled shard `dir` (made by [`new_shard`](TableWrite::new_shard)):
    /// a plain table whose columns have equal lengths; a remote one is then
    /// uploaded under its name and removed locally. On error the shard is
    /// removed (locally and from the bucket).
    pub fn finish_shard(&self, dir: &Path) -> Result<WrittenShard> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| self.ours(n))
            .ok_or_else(|| {
                Error::InvalidValue(format!(
                    "{} is not a shard of this write (made by new_shard)",
                    dir.display()
                ))
            })?;
        let done = super::shard::shard_schema(dir).and_then(|schema| {
            self.root.upload_shard(dir, &name)?;
            Ok(WrittenShard {
                name: name.clone(),
                rows: schema.rows,
            })
        });
        self.drop_local(dir, done.is_err());
        if done.is_err() {
            let _ = self.root.remove_shards(&[name]);
        }
        done
    }

    /// Removes the local directory of a remote shard (uploaded or failed),
    /// or of a local shard that failed.
    fn drop_local(&self, dir: &Path, failed: bool) {
        match &self.root.kind {
            RootKind::Local(_) => {
                if failed {
                    let _ = files::remove_dir_all(dir);
                }
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => {
                let _ = files::remove_dir_all(dir.parent().unwrap_or(dir));
            }
        }
    }

    /// One shard: a new shard directory filled by `fill`, then finished.
    pub fn write_shard<T>(
        &self,
        fill: impl FnOnce(&Path) -> Result<T>,
    ) -> Result<(WrittenShard, T)> {
        let dir = self.new_shard()?;
        match fill(&dir) {
            Ok(v) => Ok((self.finish_shard(&dir)?, v)),
            Err(e) => {
                self.drop_local(&dir, true);
                Err(e)
            }
        }
    }

    /// One shard per task of `tasks`, filled by `fill` on `workers` threads
    /// (tasks are drawn from `tasks` one at a time, so a one-pass source
    /// holds at most `workers` tasks in memory). Returns the shards in task
    /// order. On the first error no further task starts and every shard
    /// written is removed.
    pub fn write_shards<I, F>(&self, tasks: I, workers: usize, fill: F) -> Result<Vec<WrittenShard>>
    where
        I: Iterator + Send,
        F: Fn(I::Item, &Path) -> Result<()> + Sync,
    {
        let source = Mutex::new(tasks.enumerate());
        let failed = AtomicBool::new(false);
        let results: Mutex<Vec<(usize, Result<WrittenShard>)>> = Mutex::new(Vec::new());
        let work = || loop {
            if failed.load(Ordering::Relaxed) {
                return;
            }
            let next = source.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((at, task)) = next else { return };
            let r = self.write_shard(|dir| fill(task, dir)).map(|(s, ())| s);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            results
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((at, r));
        };
        std::thread::scope(|s| {
            for _ in 1..workers.max(1) {
                s.spawn(work);
            }
            work();
        });
        let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
        results.sort_by_key(|(at, _)| *at);
        let mut written = Vec::with_capacity(results.len());
        let mut error = None;
        for (_, r) in results {
            match r {
                Ok(s) => written.push(s),
                Err(e) => error = error.or(Some(e)),
            }
        }
        if let Some(e) = error {
            let names: Vec<String> = written.into_iter().map(|s| s.name).collect();
            let _ = self.root.remove_shards(&names);
            return Err(e);
        }
        Ok(written)
    }

    /// Commits this write's shards `names`, in order, and returns the
    /// table's rows after the commit. Each column's layout is decided over
    /// these shards and the table's (dense where every shard holds one item
    /// shape, ragged otherwise; a shard's dense column is rewritten ragged
    /// where needed). On error every shard of this write is removed and the
    /// table is as it was; after a commit, the shards of this write that it
    /// did not name (a retried task's) are removed.
    pub fn commit(&self, names: &[String]) -> Result<u64> {
        let done = self.commit_inner(names);
        let _ = self.discard();
        done
    }

    fn commit_inner(&self, names: &[String]) -> Result<u64> {
        check_names(names, true)?;
        if let Some(other) = names.iter().find(|n| !self.ours(n)) {
            return Err(Error::InvalidValue(format!(
                "shard {} is not a shard of this write",
                py_str(other)
            )));
        }
        if self.mode == WriteMode::Create {
            self.check_target()?;
        }
        let mut schemas = Vec::with_capacity(names.len());
        for name in names {
            schemas.push(self.root.shard_schema(name)?);
        }
        self.reconcile(names, &mut schemas)?;
        let new: Vec<(String, ShardSchema)> = names.iter().cloned().zip(schemas).collect();
        let create = self.mode == WriteMode::Create;
        let manifest = publish(&self.root, &mut |root, current| {
            if create && current.is_some() {
                return Err(Error::AlreadyExists {
                    path: self.root.path().to_path_buf(),
                    reason: format!(
                        "{} is not empty (another writer made a table there): a new table goes to a new or empty location",
                        self.root.path().display()
                    ),
                });
            }
            next_manifest(root, current, &new)
        })?;
        Ok(manifest.num_rows())
    }

    /// Makes the column layouts of the shards `names` (with `schemas`)
    /// agree with each other and the table's: a column dense here and
    /// ragged there becomes ragged in every shard of this write.
    fn reconcile(&self, names: &[String], schemas: &mut [ShardSchema]) -> Result<()> {
        let Some(first) = schemas.first().cloned() else {
            return Ok(());
        };
        for (name, schema) in names.iter().zip(schemas.iter()).skip(1) {
            if schema.names() != first.names() {
                return Err(Error::InvalidValue(format!(
                    "every block must have the same columns, but shard {} has {} and shard {} has {}",
                    py_str(name),
                    py_list(&schema.names()),
                    py_str(&names[0]),
                    py_list(&first.names())
                )));
            }
        }
        let reference = Root::of(&self.root.at.fresh())?.reference_schema()?;
        for (c, (column, _)) in first.columns.iter().enumerate() {
            let mut specs: Vec<ColumnSpec> = Vec::with_capacity(schemas.len() + 1);
            if let Some(spec) = reference
                .as_ref()
                .and_then(|r| r.columns.iter().find(|(n, _)| n == column))
            {
                specs.push(spec.1.clone());
            }
            specs.extend(schemas.iter().map(|s| s.columns[c].1.clone()));
            let merged = ColumnSpec::merge(column, &specs)?;
            for (name, schema) in names.iter().zip(schemas.iter_mut()) {
                if schema.columns[c].1 != merged && merged.schema.item_shape().is_none() {
                    self.root.rewrite_ragged(name, column)?;
                    schema.columns[c].1 = merged.clone();
                }
            }
        }
        Ok(())
    }

    /// Removes what this write left uncommitted: its shards that the
    /// manifest does not name and, when nothing was committed and the write
    /// created the local table directory, the directory. A manifest that
    /// cannot be read leaves everything as it is. Returns the shards
    /// removed.
    pub fn discard(&self) -> Result<Vec<String>> {
        self.root.discard(&self.prefix(), !self.existed)
    }
}

/// The refusal to put shards into a plain table.
fn plain_table(path: &Path) -> Error {
    Error::InvalidValue(format!(
        "{} is a plain table (it holds stores directly); shards go into a directory of their own",
        path.display()
    ))
}

/// Checks shard names before anything is read or written.
fn check_names(shards: &[String], at_least_one: bool) -> Result<()> {
    if at_least_one && shards.is_empty() {
        return Err(Error::InvalidValue(
            "shards must name at least one shard, got none".into(),
        ));
    }
    for name in shards {
        if !is_shard_name(name) {
            return Err(Error::InvalidValue(format!(
                "shard name {} must be a plain directory name",
                py_str(name)
            )));
        }
    }
    if shards.iter().collect::<BTreeSet<_>>().len() != shards.len() {
        return Err(Error::InvalidValue(format!(
            "shards names a shard twice: {}",
            py_list(shards)
        )));
    }
    Ok(())
}

/// Commits the shard directories `names` (inside `at`, written by any
/// writer) to the sharded table there, in order, through the one commit
/// point; returns the table's rows after the commit.
pub(crate) fn commit_names(at: &Location, names: &[String]) -> Result<u64> {
    check_names(names, false)?;
    let root = Root::of(at)?;
    if !root.exists() {
        return Err(Error::Missing {
            path: root.path().to_path_buf(),
            message: format!("table directory {} does not exist", root.path().display()),
        });
    }
    let mut new = Vec::with_capacity(names.len());
    for name in names {
        new.push((name.clone(), root.shard_schema(name)?));
    }
    let manifest = publish(&root, &mut |root, current| {
        next_manifest(root, current, &new)
    })?;
    Ok(manifest.num_rows())
}

/// The one commit point of every table: replaces the manifest of `at` with
/// what `next` makes of the current one (None before the first commit),
/// atomically. Locally under the commit lock, in a bucket with a
/// conditional write retried (with `next` called again) while other
/// committers win. Returns the manifest written.
pub(crate) fn publish_at(
    at: &Location,
    next: &mut dyn FnMut(Option<&Manifest>) -> Result<Manifest>,
) -> Result<Manifest> {
    publish(&Root::of(at)?, &mut |_, current| next(current))
}

/// What a commit makes of the current manifest (None before the first
/// commit), given the root as this attempt sees it.
type Next<'a> = &'a mut dyn FnMut(&Root, Option<&Manifest>) -> Result<Manifest>;

fn publish(root: &Root, next: Next<'_>) -> Result<Manifest> {
    match &root.kind {
        RootKind::Local(dir) => {
            files::create_dir_all(dir)?;
            let _lock = files::CommitLock::acquire(dir, MANIFEST_LOCK)?;
            let file = dir.join(MANIFEST_FILE);
            let current = match files::read_whole(&Fs::Local, &file)? {
                Some(raw) => Some(parse_manifest(&file, &raw)?),
                None => None,
            };
            let manifest = next(root, current.as_ref())?;
            let tmp = format!(
                ".{MANIFEST_FILE}.{}.{}",
                std::process::id(),
                files::random_hex(4)
            );
            files::write_atomically(dir, MANIFEST_FILE, &tmp, &manifest.to_json())?;
            Ok(manifest)
        }
        #[cfg(feature = "remote")]
        RootKind::Bucket { .. } => bucket::publish(root, next),
    }
}

/// The manifest after appending the shards `new` (names and schemas) to
/// `current`: each checked against the table's first shard and not
/// already committed, every shard given the validity streams that the
/// nullable columns need, a remote shard's objects recorded.
fn next_manifest(
    root: &Root,
    current: Option<&Manifest>,
    new: &[(String, ShardSchema)],
) -> Result<Manifest> {
    let empty = Manifest::default();
    if current.is_none() && root.holds_stores()? {
        return Err(plain_table(root.path()));
    }
    let current = current.unwrap_or(&empty);
    let mut entries: Vec<ShardEntry> = current.shards.clone();
    let old = entries.len();
    let (ref_name, reference) = match current.shards.first() {
        Some(first) => (first.name.clone(), root.shard_schema(&first.name)?),
        None => match new.first() {
            Some((name, schema)) => (name.clone(), schema.clone()),
            None => return Ok(current.clone()),
        },
    };
    let mut nullable: BTreeSet<String> = current.nullable.iter().cloned().collect();
    let mut validity: Vec<BTreeSet<String>> = vec![BTreeSet::new(); old];
    for (name, schema) in new {
        if current.shards.iter().any(|s| &s.name == name) {
            return Err(Error::InvalidValue(format!(
                "shard {} is already committed to {}",
                py_str(name),
                root.path().display()
            )));
        }
        check_shard_agrees(name, schema, &ref_name, &reference)?;
        let (objects, has) = root.shard_contents(name, &reference)?;
        nullable.extend(has.iter().cloned());
        validity.push(has);
        entries.push(ShardEntry {
            name: name.clone(),
            rows: schema.rows,
            objects,
        });
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        // Old shards have streams for the old nullable columns.
        let has = if i < old {
            &current.nullable.iter().cloned().collect()
        } else {
            &validity[i]
        };
        let missing: Vec<&String> = nullable.iter().filter(|c| !has.contains(*c)).collect();
        if !missing.is_empty() {
            root.add_validity(entry, &missing)?;
        }
    }
    Ok(Manifest {
        columns: reference.columns.iter().map(|(c, _)| c.clone()).collect(),
        shards: entries,
        types: reference
            .columns
            .iter()
            .filter(|(_, s)| s.logical != Logical::Tensor)
            .map(|(c, s)| (c.clone(), s.logical))
            .collect(),
        nullable: nullable.into_iter().collect(),
    })
}

/// A new shard's objects (recorded for a remote table) and the columns it
/// has validity streams for.
type Contents = (Option<BTreeMap<String, u64>>, BTreeSet<String>);

/// Where a write goes: a local directory or a prefix of a bucket.
#[derive(Debug)]
struct Root {
    at: Location,
    kind: RootKind,
}

#[derive(Debug)]
enum RootKind {
    Local(PathBuf),
    #[cfg(feature = "remote")]
    Bucket {
        remote: std::sync::Arc<crate::io::remote::Remote>,
        base: String,
    },
}

impl Root {
    fn of(at: &Location) -> Result<Root> {
        let kind = match at.fs() {
            Fs::Local => RootKind::Local(at.path().to_path_buf()),
            #[cfg(feature = "remote")]
            Fs::Remote(r) => {
                if !r.writable() {
                    return Err(Error::InvalidValue(format!(
                        "{} is an http(s) location, which is read-only",
                        at.path().display()
                    )));
                }
                let base = r
                    .key_of(at.path())
                    .map_err(|e| crate::io::io_error(at.path(), e))?;
                RootKind::Bucket {
                    remote: r.clone(),
                    base,
                }
            }
        };
        Ok(Root {
            at: at.clone(),
            kind,
        })
    }

    fn path(&self) -> &Path {
        self.at.path()
    }

    fn exists(&self) -> bool {
        match &self.kind {
            RootKind::Local(dir) => dir.exists(),
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => true,
        }
    }

    /// Why a new table cannot go here whatever it holds, if so.
    fn not_a_directory(&self) -> Option<String> {
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
    fn entries(&self) -> Result<Vec<String>> {
        match &self.kind {
            RootKind::Local(dir) => {
                if !dir.is_dir() {
                    return Ok(Vec::new());
                }
                files::list(dir)
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => {
                let mut names: Vec<String> = bucket::files(self)?
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
    fn holds_stores(&self) -> Result<bool> {
        match &self.kind {
            RootKind::Local(dir) => {
                Ok(dir.is_dir() && !files::store_names(&Fs::Local, dir)?.is_empty())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => Ok(bucket::files(self)?
                .iter()
                .any(|(rel, _)| rel.split('/').nth(1) == Some(crate::format::META_FILE))),
        }
    }

    fn shard_schema(&self, name: &str) -> Result<ShardSchema> {
        shard_schema_in(self.at.fs(), &self.path().join(name))
    }

    /// The schema of the table's first committed shard, if any.
    fn reference_schema(&self) -> Result<Option<ShardSchema>> {
        let file = self.path().join(MANIFEST_FILE);
        let Some(raw) = files::read_whole(self.at.fs(), &file)? else {
            return Ok(None);
        };
        match parse_manifest(&file, &raw)?.shards.first() {
            Some(first) => Ok(Some(self.shard_schema(&first.name)?)),
            None => Ok(None),
        }
    }

    /// A new shard's objects (recorded in a remote table's manifest) and
    /// the columns of `reference` it has validity streams for.
    fn shard_contents(&self, name: &str, reference: &ShardSchema) -> Result<Contents> {
        match &self.kind {
            RootKind::Local(dir) => {
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
            RootKind::Bucket { .. } => bucket::shard_contents(self, name, reference),
        }
    }

    /// Gives the shard `entry` all-valid validity streams for `columns`.
    fn add_validity(&self, entry: &mut ShardEntry, columns: &[&String]) -> Result<()> {
        match &self.kind {
            RootKind::Local(dir) => {
                let shard = dir.join(&entry.name);
                for column in columns {
                    ensure_validity(&shard, column, entry.rows)?;
                }
                Ok(())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => bucket::add_validity(self, entry, columns),
        }
    }

    /// Uploads the local shard `dir` as the shard `name` (nothing to do for
    /// a local table, where it already is).
    fn upload_shard(&self, dir: &Path, name: &str) -> Result<()> {
        match &self.kind {
            RootKind::Local(_) => {
                let _ = (dir, name);
                Ok(())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => bucket::upload_dir(self, dir, name).map(|_| ()),
        }
    }

    /// Removes the (uncommitted) shards `names`.
    fn remove_shards(&self, names: &[String]) -> Result<()> {
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
            RootKind::Bucket { .. } => bucket::remove_shards(self, names),
        }
    }

    /// Rewrites the dense column `column` of the uncommitted shard `shard`
    /// as a ragged store of the same records, each of the dense item shape.
    fn rewrite_ragged(&self, shard: &str, column: &str) -> Result<()> {
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
            RootKind::Bucket { .. } => bucket::rewrite_ragged(self, shard, column),
        }
    }

    /// [`TableWrite::discard`] of the shards named `prefix*`.
    fn discard(&self, prefix: &str, remove_table: bool) -> Result<Vec<String>> {
        match &self.kind {
            RootKind::Local(dir) => super::shard::discard_shards(dir, prefix, remove_table),
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => bucket::discard(self, prefix),
        }
    }
}

/// Writes every record of the dense store `dense` as a ragged store at
/// `dst` (the same codec and dictionary), in runs of about 16 MiB.
fn copy_as_ragged(dense: &Store, dst: &Path) -> Result<()> {
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
    let step = (crate::arrow::DEFAULT_BATCH_BYTES / width.max(1)).max(1) as u64;
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
        })
    }
}

/// The remote half of the write path: uploads, listings, deletes and the
/// conditional commit.
#[cfg(feature = "remote")]
mod bucket {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use bytes::Bytes;
    use object_store::PutMode;

    use super::super::copy::walk;
    use super::super::files;
    use super::super::manifest::{parse_manifest, Manifest, ShardEntry, MANIFEST_FILE};
    use super::super::shard::{ensure_validity, ShardSchema};
    use super::super::VALIDITY_DIR;
    use super::{copy_as_ragged, Contents, Root, RootKind};
    use crate::io::io_error;
    use crate::io::remote::upload::{transfer, Place, Put, Transfer};
    use crate::{Error, Result, Store};

    /// Most attempts of a commit that keep losing the race to other
    /// committers.
    const COMMIT_TRIES: u32 = 50;

    fn parts(root: &Root) -> (&std::sync::Arc<crate::io::remote::Remote>, &str) {
        match &root.kind {
            RootKind::Bucket { remote, base } => (remote, base),
            RootKind::Local(_) => unreachable!("a bucket operation on a local root"),
        }
    }

    pub(super) fn key(base: &str, rel: &str) -> String {
        if base.is_empty() || rel.is_empty() {
            format!("{base}{rel}")
        } else {
            format!("{base}/{rel}")
        }
    }

    /// Every object below `root` (relative paths and sizes), listed afresh.
    pub(super) fn files(root: &Root) -> Result<Vec<(String, u64)>> {
        below(root, "")
    }

    /// The objects below `rel` of `root`, relative to `rel`.
    fn below(root: &Root, rel: &str) -> Result<Vec<(String, u64)>> {
        let (remote, base) = parts(root);
        let prefix = key(base, rel);
        let strip = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        let listed = remote
            .list_objects(&prefix)
            .map_err(|e| io_error(root.path(), e))?;
        Ok(listed
            .into_iter()
            .filter_map(|(k, size)| k.strip_prefix(strip.as_str()).map(|r| (r.to_owned(), size)))
            .collect())
    }

    /// Uploads every file below the local directory `local` as `rel/...`
    /// of `root`; returns the paths written (relative to `rel`).
    pub(super) fn upload_dir(root: &Root, local: &Path, rel: &str) -> Result<Vec<String>> {
        let (remote, base) = parts(root);
        let listed = walk(local)?;
        let transfers: Vec<Transfer> = listed
            .iter()
            .map(|(r, size)| Transfer {
                from: Place::Local(local.join(r)),
                to: Place::Remote(remote.clone(), key(base, &format!("{rel}/{r}"))),
                size: *size,
            })
            .collect();
        let at = root.path().join(rel);
        transfer(&transfers, &|_| Ok(())).map_err(|e| io_error(&at, e))?;
        Ok(listed.into_iter().map(|(r, _)| r).collect())
    }

    fn delete(root: &Root, rels: &[String]) -> Result<()> {
        if rels.is_empty() {
            return Ok(());
        }
        let (remote, base) = parts(root);
        let keys: Vec<String> = rels.iter().map(|r| key(base, r)).collect();
        remote.delete(&keys).map_err(|e| io_error(root.path(), e))
    }

    pub(super) fn remove_shards(root: &Root, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let doomed: Vec<String> = files(root)?
            .into_iter()
            .filter(|(rel, _)| names.iter().any(|n| rel.split('/').next() == Some(n)))
            .map(|(rel, _)| rel)
            .collect();
        delete(root, &doomed)
    }

    pub(super) fn discard(root: &Root, prefix: &str) -> Result<Vec<String>> {
        let (remote, base) = parts(root);
        let file = root.path().join(MANIFEST_FILE);
        let committed: BTreeSet<String> = match remote
            .get_versioned(&key(base, MANIFEST_FILE))
            .map_err(|e| io_error(&file, e))?
        {
            Some((raw, _)) => match parse_manifest(&file, &raw) {
                Ok(m) => m.shards.into_iter().map(|s| s.name).collect(),
                Err(_) => return Ok(Vec::new()), // not this write's to judge
            },
            None => BTreeSet::new(),
        };
        let mut removed: Vec<String> = Vec::new();
        let mut doomed = Vec::new();
        for (rel, _) in files(root)? {
            let shard = rel.split('/').next().unwrap_or_default();
            if shard.starts_with(prefix) && !committed.contains(shard) {
                if removed.last().map(String::as_str) != Some(shard) {
                    removed.push(shard.to_owned());
                }
                doomed.push(rel);
            }
        }
        delete(root, &doomed)?;
        removed.dedup();
        Ok(removed)
    }

    pub(super) fn shard_contents(
        root: &Root,
        name: &str,
        reference: &ShardSchema,
    ) -> Result<Contents> {
        let objects: BTreeMap<String, u64> = below(root, name)?.into_iter().collect();
        if objects.is_empty() {
            return Err(Error::InvalidValue(format!(
                "shard {name:?} is not in {}: upload it before committing it",
                root.path().display()
            )));
        }
        let has = reference
            .columns
            .iter()
            .filter(|(c, _)| objects.contains_key(&format!("{VALIDITY_DIR}/{c}/meta.zr")))
            .map(|(c, _)| c.clone())
            .collect();
        Ok((Some(objects), has))
    }

    /// Makes all-valid validity streams locally, uploads them into the
    /// shard and records their objects.
    pub(super) fn add_validity(
        root: &Root,
        entry: &mut ShardEntry,
        columns: &[&String],
    ) -> Result<()> {
        let tmp = std::env::temp_dir().join(format!("loaderx-validity-{}", files::random_hex(6)));
        let made = (|| -> Result<Vec<(String, u64)>> {
            let shard = tmp.join(&entry.name);
            files::create_dir_all(&shard.join(VALIDITY_DIR))?;
            for column in columns {
                ensure_validity(&shard, column, entry.rows)?;
            }
            upload_dir(root, &shard, &entry.name)?;
            walk(&shard)
        })();
        let _ = std::fs::remove_dir_all(&tmp);
        let made = made?;
        if let Some(objects) = entry.objects.as_mut() {
            objects.extend(made);
        }
        Ok(())
    }

    pub(super) fn rewrite_ragged(root: &Root, shard: &str, column: &str) -> Result<()> {
        let rel = format!("{shard}/{column}");
        let tmp = std::env::temp_dir().join(format!("loaderx-ragged-{}", files::random_hex(6)));
        let local = tmp.join(column);
        let done = (|| {
            files::create_dir_all(&tmp)?;
            let dense = Store::open_at(&root.at.join(&rel), true)?;
            let made = copy_as_ragged(&dense, &local);
            let _ = dense.close();
            made?;
            let before: BTreeSet<String> = below(root, &rel)?.into_iter().map(|(r, _)| r).collect();
            let after: BTreeSet<String> = upload_dir(root, &local, &rel)?.into_iter().collect();
            let stale: Vec<String> = before
                .difference(&after)
                .map(|r| format!("{rel}/{r}"))
                .collect();
            delete(root, &stale)
        })();
        let _ = std::fs::remove_dir_all(&tmp);
        done
    }

    /// [`super::publish`] in a bucket: conditional writes of the manifest.
    pub(super) fn publish(root: &Root, next: super::Next<'_>) -> Result<Manifest> {
        let file = root.path().join(MANIFEST_FILE);
        for attempt in 0..COMMIT_TRIES {
            // What this attempt learns of the bucket is its own.
            let fresh = Root::of(&root.at.fresh())?;
            let (remote, base) = parts(&fresh);
            let manifest_key = key(base, MANIFEST_FILE);
            let current = remote
                .get_versioned(&manifest_key)
                .map_err(|e| io_error(&file, e))?;
            let (current, mode) = match current {
                Some((bytes, version)) => (
                    Some(parse_manifest(&file, &bytes)?),
                    PutMode::Update(version),
                ),
                None => (None, PutMode::Create),
            };
            let manifest = next(&fresh, current.as_ref())?;
            match remote
                .put(&manifest_key, Bytes::from(manifest.to_json()), mode)
                .map_err(|e| unsupported_conditional(&file, e))?
            {
                Put::Done => return Ok(manifest),
                Put::Conflict => std::thread::sleep(backoff(attempt)),
            }
        }
        Err(Error::io(
            &file,
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{COMMIT_TRIES} commits lost the race to other committers"),
            ),
        ))
    }

    /// Backoff with jitter before commit attempt `attempt + 1`.
    fn backoff(attempt: u32) -> std::time::Duration {
        let wait = 20u64 << attempt.min(6);
        let jitter = (u64::from(std::process::id()).wrapping_mul(2_654_435_761) >> 7)
            .wrapping_add(u64::from(attempt) * 7919)
            % wait;
        std::time::Duration::from_millis(wait + jitter)
    }

    /// A store without conditional writes cannot take a commit safely.
    fn unsupported_conditional(file: &Path, e: std::io::Error) -> Error {
        if e.kind() == std::io::ErrorKind::Unsupported {
            return Error::InvalidValue(format!(
                "{}: this object store does not support conditional writes (If-Match / If-None-Match), so a commit could silently drop another committer's shards; loaderx refuses to commit there",
                file.display()
            ));
        }
        io_error(file, e)
    }
}
