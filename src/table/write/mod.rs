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

#[cfg(feature = "remote")]
mod bucket;
mod commit;
mod edit;
mod evolve;
mod hand;
mod history;
mod root;
mod rows;
mod split;

#[cfg(feature = "remote")]
pub(crate) use bucket::copy_leased;
#[cfg(feature = "remote")]
pub(crate) use commit::publish_at;
use commit::{next_manifest, publish};
pub use evolve::{drop_columns, make_versioned, ColumnsWrite};
pub use hand::{commit_shards, new_shard};
pub use history::{
    cleanup, cleanup_leaving, drop_view, list_versions, list_views, replace_view, save_view,
    save_view_set, tag, tags, untag, Leftovers,
};
use root::Root;

/// What opening a table in a bucket, or a commit to it, learnt of its
/// latest version: `manifest.json` as it was, with the version of that
/// object the server named. A write planned on it
/// ([`ColumnsWrite::begin_on`]) reads nothing of the bucket before its
/// commit; when another commit came between, the commit finds out as it
/// would anyway (its version's file exists) and checks against that one.
#[derive(Clone, Debug)]
pub struct Basis {
    #[cfg(feature = "remote")]
    planned: bucket::Planned,
    #[cfg(not(feature = "remote"))]
    never: std::convert::Infallible,
}

impl Basis {
    /// What the open of the table at `at`, at its latest version
    /// `version`, learnt: None for a local table, one over http(s), an
    /// open of another version, or a server that names no versions.
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub fn opened(at: &crate::Location, version: u64) -> Option<Basis> {
        #[cfg(feature = "remote")]
        return bucket::Planned::opened(at, version).map(|planned| Basis { planned });
        #[cfg(not(feature = "remote"))]
        None
    }

    /// The version it is of.
    pub fn version(&self) -> u64 {
        #[cfg(feature = "remote")]
        return self.planned.manifest().version();
        #[cfg(not(feature = "remote"))]
        match self.never {}
    }
}
pub use rows::{compact, delete_rows, delete_where};
pub use split::split;

use super::files;
use super::manifest::{is_shard_name, Manifest, MANIFEST_FILE, MANIFEST_LOCK, SELF_SHARD};
use super::shard::{ColumnSpec, ShardSchema};
use crate::repr::{py_list, py_str};
use crate::{Error, Location, Result};

/// The objects (name to size) known uploaded, by shard.
type Known = BTreeMap<String, BTreeMap<String, u64>>;

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
    /// The shards this process finished: their schema and (a bucket's)
    /// objects as uploaded, so that the commit need not ask again.
    finished: Mutex<BTreeMap<String, Finished>>,
    /// The table's latest version when the write began, and its columns
    /// (sorted): a commit made impossible by a change of columns since is
    /// a conflict, not bad input.
    planned: Option<(u64, Vec<String>)>,
    /// Table metadata this write's commit sets (see [`TableWrite::set_metadata`]).
    metadata: serde_json::Map<String, serde_json::Value>,
    /// The source's column order, which a new table keeps (see
    /// [`TableWrite::keep_order`]).
    order: Mutex<Option<Vec<String>>>,
    /// The local staging directories of a bucket's shards: what is left
    /// of them goes with the write.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    staging: files::StagingSet,
}

/// A shard or group as its writer checked it: its schema and, in a
/// bucket, its objects (relative to it) and their sizes. An object up to
/// 32 MiB goes up in one request whose length the server checks, a larger
/// one is checked for its size once assembled, so this is what the bucket
/// holds.
pub(super) type Finished = (ShardSchema, Option<BTreeMap<String, u64>>);

impl TableWrite {
    /// Starts a write to `dst`. With [`WriteMode::Create`] `dst` must not
    /// exist or be empty (`AlreadyExists` naming what it holds); with
    /// [`WriteMode::Append`] it must not be a plain table (`InvalidValue`).
    /// An `http(s)` location is read-only (`InvalidValue`).
    pub fn begin(dst: &Location, mode: WriteMode) -> Result<TableWrite> {
        let root = Root::of(dst)?;
        let existed = root.exists();
        let mut write = TableWrite {
            root,
            mode,
            token: files::random_hex(6),
            existed,
            finished: Mutex::default(),
            staging: files::StagingSet::default(),
            planned: None,
            metadata: Default::default(),
            order: Default::default(),
        };
        write.check_target()?;
        if mode == WriteMode::Append && existed {
            write.planned = write.latest_columns()?;
        }
        // In progress from now on: what it makes is its own until it
        // commits or discards (the processes that resume it fill shards
        // under this lease).
        write.root.hold_lease(&write.token)?;
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
            finished: Mutex::default(),
            staging: files::StagingSet::default(),
            planned: None,
            metadata: Default::default(),
            order: Default::default(),
        })
    }

    /// Plans this append on `version` (the version its rows were made
    /// for, such as the version a table handle shows) instead of the
    /// latest: when a later version changed the columns, the commit raises
    /// `CommitConflict` naming both versions rather than refusing the
    /// rows' columns, and when a cleanup removed `version` meanwhile.
    /// `InvalidValue` for a version the table never had.
    pub fn plan_on(&mut self, version: u64) -> Result<()> {
        let resolved = super::versions::planned_on(&self.root.at, Some(version))?;
        let mut cols = resolved.manifest.columns.clone();
        cols.sort();
        self.planned = Some((version, cols));
        Ok(())
    }

    /// Sets the table metadata `key` to `value` in the version this write
    /// commits (`Table.metadata`; the other keys stay as they were).
    pub fn set_metadata(&mut self, key: &str, value: serde_json::Value) {
        self.metadata.insert(key.to_owned(), value);
    }

    /// The order of the source's columns (its schema's): a new table's
    /// first commit lists its columns so, where they are the columns its
    /// shards hold (else in name order, as shards list them). A table
    /// that has rows keeps its order; columns added later come last.
    pub fn keep_order(&self, names: Vec<String>) {
        *self.order.lock().unwrap_or_else(|e| e.into_inner()) = Some(names);
    }

    /// The latest version and its columns (sorted), if the table has one.
    fn latest_columns(&self) -> Result<Option<(u64, Vec<String>)>> {
        let at = self.root.at.fresh();
        Ok(super::versions::latest(at.fs(), at.path())?.map(|l| {
            let mut cols = l.manifest.columns.clone();
            cols.sort();
            (l.manifest.version(), cols)
        }))
    }

    /// `asked` with the layouts of the columns the table has already (its
    /// latest version's), which those columns keep.
    pub fn layouts(&self, asked: &super::Layouts) -> Result<super::Layouts> {
        let mut out = asked.clone();
        let at = self.root.at.fresh();
        if let Some(latest) = super::versions::latest(at.fs(), at.path())? {
            let m = &latest.manifest;
            out.existing = m.columns.iter().map(|c| (c.clone(), m.layout(c))).collect();
        }
        Ok(out)
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
                .filter(|e| {
                    !self.ours(e) && e.as_str() != MANIFEST_LOCK && e.as_str() != files::LEASES_DIR
                })
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
        let parent = self.root.work_dir(&self.staging, "shard", SELF_SHARD)?;
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
            let objects = self.root.upload(dir, &name)?;
            let rows = schema.rows;
            self.finished().insert(name.clone(), (schema, objects));
            Ok(WrittenShard {
                name: name.clone(),
                rows,
            })
        });
        self.drop_local(dir, done.is_err());
        if done.is_err() {
            let _ = self.root.remove_shards(&[name]);
        }
        done
    }

    fn finished(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Finished>> {
        self.finished.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Shard `name` as this process finished it, if it did.
    pub(super) fn written(&self, name: &str) -> Option<Finished> {
        self.finished().get(name).cloned()
    }

    /// Removes the local directory of a remote shard (uploaded or failed),
    /// or of a local shard that failed.
    fn drop_local(&self, dir: &Path, failed: bool) {
        self.root.drop_work(dir, failed);
    }

    /// One shard: a new shard directory filled by `fill`, then finished.
    pub fn write_shard<T>(
        &self,
        fill: impl FnOnce(&Path) -> Result<T>,
    ) -> Result<(WrittenShard, T)> {
        let dir = self.new_shard()?;
        // Nothing names the shard before its commit: it is made durable
        // once whole, by `finish_shard` (see `deferring_syncs`).
        match crate::io::local::deferring_syncs(|| fill(&dir)) {
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
        let (new, known) = self.prepare(names)?;
        let manifest = publish(&self.root, "append", &mut |root, current| {
            self.next_with(root, current, &new, &known)
        })?;
        Ok(manifest.num_rows())
    }

    /// Checks this write's shards `names` and decides their columns'
    /// layouts: their schemas, and the objects known uploaded (a bucket's),
    /// for [`TableWrite::next_with`].
    fn prepare(&self, names: &[String]) -> Result<(Vec<(String, ShardSchema)>, Known)> {
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
            schemas.push(match self.written(name) {
                Some((schema, _)) => schema,
                None => self.root.shard_schema(name)?,
            });
        }
        self.reconcile(names, &mut schemas)?;
        let known: Known = names
            .iter()
            .filter_map(|n| Some((n.clone(), self.written(n)?.1?)))
            .collect();
        Ok((names.iter().cloned().zip(schemas).collect(), known))
    }

    /// The manifest after `current` (None: the first) with the shards
    /// `new` appended: `CommitConflict` when the rows were made for columns
    /// a commit since changed, `AlreadyExists` when a new table's
    /// destination got a table meanwhile.
    fn next_with(
        &self,
        root: &Root,
        current: Option<&Manifest>,
        new: &[(String, ShardSchema)],
        known: &Known,
    ) -> Result<Manifest> {
        if let (Some(current), Some((version, columns)), Some((_, first))) =
            (current, &self.planned, new.first())
        {
            let mut now = current.columns.clone();
            now.sort();
            let mine: Vec<String> = first.names().iter().map(|c| c.to_string()).collect();
            if now != *columns && mine == *columns && current.version() != *version {
                return Err(Error::CommitConflict(format!(
                    "table {}: these rows were written for version {version} (columns {}), but version {} was committed meanwhile with columns {}",
                    root.path().display(),
                    py_list(columns),
                    current.version(),
                    py_list(&current.columns)
                )));
            }
        }
        if self.mode == WriteMode::Create && current.is_some() {
            return Err(Error::AlreadyExists {
                path: self.root.path().to_path_buf(),
                reason: format!(
                    "{} is not empty (another writer made a table there): a new table goes to a new or empty location",
                    self.root.path().display()
                ),
            });
        }
        let mut next = next_manifest(root, current, new, known)?;
        next.metadata.extend(self.metadata.clone());
        if current.is_none_or(|c| c.shards.is_empty()) {
            let order = self.order.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(order) = order.as_ref() {
                let kept: Vec<String> = order
                    .iter()
                    .filter(|c| next.columns.contains(c))
                    .cloned()
                    .collect();
                let mut a = kept.clone();
                let mut b = next.columns.clone();
                a.sort();
                a.dedup();
                b.sort();
                if a == b && kept.len() == b.len() {
                    next.columns = kept;
                }
            }
        }
        Ok(next)
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
                    // Its objects changed: the commit lists them.
                    self.finished().remove(name);
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
        self.root.release_lease();
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
