//! Evolving a sharded table without rewriting it: a plain table turned
//! into a versioned one in place, columns added beside the existing ones
//! ([`ColumnsWrite`]: one column group per shard), columns dropped. Each
//! commits one version through [`publish`]; none rewrites or re-uploads a
//! file an earlier version names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::commit::publish;
use super::root::Root;
use super::Finished;
use crate::io::Fs;
use crate::repr::{py_list, py_str};
use crate::schema::Logical;
use crate::table::files;
use crate::table::manifest::{
    in_shard, ColumnGroup, Manifest, ShardEntry, PATCH_ROWS_FILE, SELF_SHARD,
};
use crate::table::shard::{check_shard_agrees, shard_schema_in, ShardSchema};
use crate::table::types::validity_dir;
use crate::table::types::VALIDITY_DIR;
use crate::table::versions;
use crate::table::ColumnLayout;
use crate::{Error, Location, Result};

#[cfg(feature = "remote")]
use super::bucket;

/// Turns the plain table at `at` into a sharded, versioned one in place:
/// the table's directory becomes its first shard (`"."`), no byte copied,
/// and `manifest.json` (the commit point) makes it version 1. Returns the
/// manifest. `InvalidValue` when `at` is not a plain table (a sharded one
/// included).
pub fn make_versioned(at: &Location) -> Result<Manifest> {
    let root = Root::of(at)?;
    publish(&root, "create", &mut |root, current| {
        if current.is_some() {
            return Err(Error::InvalidValue(format!(
                "{} is a sharded table already",
                root.path().display()
            )));
        }
        files::check_complete(root.at.fs(), root.path())?;
        let schema = root.shard_schema(SELF_SHARD)?;
        let nullable: Vec<String> = schema
            .columns
            .iter()
            .filter(|(c, _)| {
                schema.nulls.contains(c)
                    || files::is_store(root.at.fs(), &validity_dir(root.path(), c))
            })
            .map(|(c, _)| c.clone())
            .collect();
        Ok(Manifest {
            columns: schema.columns.iter().map(|(c, _)| c.clone()).collect(),
            types: schema
                .columns
                .iter()
                .filter(|(_, s)| s.logical != Logical::Tensor)
                .map(|(c, s)| (c.clone(), s.logical))
                .collect(),
            nullable,
            columnar: columnar_of(&schema),
            shards: vec![ShardEntry {
                name: SELF_SHARD.into(),
                rows: schema.rows,
                // Listed by readers: the table's own prefix holds the
                // other shards too.
                objects: None,
                groups: Vec::new(),
                deleted: None,
            }],
            ..Manifest::default()
        })
    })
}

/// The columnar columns of `schema`, sorted.
pub(super) fn columnar_of(schema: &ShardSchema) -> Vec<String> {
    let mut out: Vec<String> = schema
        .columns
        .iter()
        .filter(|(_, s)| s.layout == crate::table::ColumnLayout::Columnar)
        .map(|(c, _)| c.clone())
        .collect();
    out.sort();
    out
}

/// The version `version` (None: the latest) of the sharded table at `at`,
/// read afresh.
pub(super) fn base_version(at: &Location, version: Option<u64>) -> Result<Manifest> {
    Ok(versions::planned_on(at, version)?.manifest)
}

/// A conflict between the version a commit was planned on and the one
/// committed meanwhile.
pub(super) fn conflict(at: &Path, base: &Manifest, current: &Manifest, what: String) -> Error {
    Error::CommitConflict(format!(
        "table {}: this commit was planned on version {}, but version {} was committed meanwhile and {what}",
        at.display(),
        base.version(),
        current.version()
    ))
}

/// Whether `current` holds exactly the shards (names and rows) of `base`.
fn same_shards(base: &Manifest, current: &Manifest) -> bool {
    base.shards.len() == current.shards.len()
        && base
            .shards
            .iter()
            .zip(&current.shards)
            .all(|(a, b)| a.name == b.name && a.rows == b.rows)
}

/// Drops the columns `names` of the sharded table at `at` (planned on its
/// version `version`, None: the latest): one new version whose manifest
/// no longer names them; their files stay for the versions that do.
/// `InvalidValue` naming the column for a column the table does not have,
/// or when no column would be left.
pub fn drop_columns(at: &Location, names: &[String], version: Option<u64>) -> Result<Manifest> {
    let base = base_version(at, version)?;
    for name in names {
        if !base.columns.contains(name) {
            return Err(Error::InvalidValue(format!(
                "table {} has no column {} to drop (its columns: {})",
                at.path().display(),
                py_str(name),
                py_list(&base.columns)
            )));
        }
    }
    if base.columns.iter().all(|c| names.contains(c)) {
        return Err(Error::InvalidValue(format!(
            "dropping {} would leave table {} without columns",
            py_list(names),
            at.path().display()
        )));
    }
    publish(&Root::of(at)?, "drop_columns", &mut |root, current| {
        let current = current.expect("a sharded table has a version");
        if let Some(gone) = names.iter().find(|n| !current.columns.contains(n)) {
            return Err(conflict(
                root.path(),
                &base,
                current,
                format!("dropped column {} already", py_str(gone)),
            ));
        }
        if current.columns.iter().all(|c| names.contains(c)) {
            return Err(conflict(
                root.path(),
                &base,
                current,
                "dropping these columns now would leave it without columns".into(),
            ));
        }
        let keep = |c: &String| !names.contains(c);
        Ok(Manifest {
            columns: current
                .columns
                .iter()
                .filter(|c| keep(c))
                .cloned()
                .collect(),
            types: current
                .types
                .iter()
                .filter(|(c, _)| keep(c))
                .cloned()
                .collect(),
            nullable: current
                .nullable
                .iter()
                .filter(|c| keep(c))
                .cloned()
                .collect(),
            columnar: current
                .columnar
                .iter()
                .filter(|c| keep(c))
                .cloned()
                .collect(),
            // A column group left with no column is no longer listed, nor
            // are a bucket shard's objects of what the version no longer
            // reads (a dropped column's store in the shard's own directory,
            // an unlisted group), so that a cleanup can remove them once
            // older versions go.
            shards: current
                .shards
                .iter()
                .map(|s| {
                    let mut gone: Vec<String> = names
                        .iter()
                        .filter(|c| s.column_home(c).is_empty())
                        .flat_map(|c| [format!("{c}/"), format!("{VALIDITY_DIR}/{c}/")])
                        .collect();
                    gone.extend(
                        s.groups
                            .iter()
                            .filter(|g| !g.columns.iter().any(keep))
                            .map(|g| format!("{}/", g.dir)),
                    );
                    let mut s = s.clone();
                    s.groups.retain(|g| g.columns.iter().any(keep));
                    if let Some(objects) = s.objects.as_mut() {
                        objects.retain(|k, _| !gone.iter().any(|p| k.starts_with(p.as_str())));
                    }
                    s
                })
                .collect(),
            ..Manifest::default()
        })
    })
}

/// Columns added to every shard of a sharded table: each shard gets a
/// column group `_g-<token>` (a plain table of the shard's rows holding
/// the new columns), filled by any process ([`ColumnsWrite::new_group`],
/// [`ColumnsWrite::finish_group`]), then one commit makes them visible.
/// Nothing an earlier version names is rewritten.
#[derive(Debug)]
pub struct ColumnsWrite {
    pub(super) root: Root,
    pub(super) base: Manifest,
    token: String,
    /// The groups this process finished: shard, their schema and the
    /// objects uploaded (a bucket's), known without asking the bucket again
    /// at the commit.
    finished: Mutex<BTreeMap<usize, Finished>>,
    /// The patch groups this process finished (an edit's new values of
    /// some rows of records columns): by shard, as `finished`.
    patches: Mutex<BTreeMap<usize, Finished>>,
    /// Whether the groups hold columns the table has (compaction's
    /// columnar copies of records columns) rather than new ones.
    pub(super) replaces: bool,
    /// In a bucket, the `manifest.json` the write was planned on (when it
    /// named the version asked for): the commit then reads nothing again
    /// unless another commit came between.
    #[cfg(feature = "remote")]
    planned: Option<bucket::Planned>,
    /// In a bucket, what the commit learnt of the version it made.
    #[cfg(feature = "remote")]
    after: Mutex<Option<bucket::Planned>>,
    /// The local staging directories of a bucket's groups: what is left of
    /// them goes with the write.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    staging: files::StagingSet,
}

impl ColumnsWrite {
    /// Groups of columnar copies of columns of `base` (the version a
    /// compaction is planned on): each group holds columns the table has.
    pub(super) fn replacing(at: &Location, base: Manifest) -> Result<ColumnsWrite> {
        let write = ColumnsWrite {
            root: Root::of(at)?,
            base,
            token: files::random_hex(6),
            finished: Mutex::default(),
            patches: Mutex::default(),
            staging: files::StagingSet::default(),
            replaces: true,
            #[cfg(feature = "remote")]
            planned: None,
            #[cfg(feature = "remote")]
            after: Mutex::default(),
        };
        write.root.hold_lease(&write.token)?;
        Ok(write)
    }

    /// Shard `i`'s group as written: its schema and (remote) objects,
    /// relative to the shard.
    pub(super) fn written_group(&self, i: usize) -> Result<Finished> {
        let fresh = Root::of(&self.root.at.fresh())?;
        self.read_group(&fresh, i)
    }

    /// The group's directory name (inside each shard).
    pub(super) fn group_dir(&self) -> String {
        self.group()
    }

    /// Plans new columns on version `version` (None: the latest) of the
    /// sharded table at `at`.
    pub fn begin(at: &Location, version: Option<u64>) -> Result<ColumnsWrite> {
        ColumnsWrite::begin_on(at, version, None)
    }

    /// [`ColumnsWrite::begin`] with what an open or a commit learnt of the
    /// table (`basis`): when it is of version `version` in a bucket, the
    /// write reads nothing of the bucket before its commit.
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub fn begin_on(
        at: &Location,
        version: Option<u64>,
        basis: Option<&super::Basis>,
    ) -> Result<ColumnsWrite> {
        #[cfg(feature = "remote")]
        if let Some(v) = version {
            // manifest.json with its tag (as the open or the last commit
            // left it, lately, else read now): when it is the version
            // asked for, the commit needs no read of the bucket.
            let root = Root::of(at)?;
            let known = basis
                .filter(|basis| basis.version() == v && basis.planned.recent())
                .map(|basis| basis.planned.clone());
            if let Some(planned) = root.planned(v, known)? {
                return Ok(ColumnsWrite {
                    root,
                    base: planned.manifest().clone(),
                    token: files::random_hex(6),
                    finished: Mutex::default(),
                    patches: Mutex::default(),
                    staging: files::StagingSet::default(),
                    replaces: false,
                    planned: Some(planned),
                    after: Mutex::default(),
                });
            }
        }
        let write = ColumnsWrite::resume(at, version, &files::random_hex(6))?;
        // In progress from now on (see TableWrite::begin).
        write.root.hold_lease(&write.token)?;
        Ok(write)
    }

    /// The write `token` planned on version `version` of the table at `at`
    /// (in another process: a Ray task's).
    pub fn resume(at: &Location, version: Option<u64>, token: &str) -> Result<ColumnsWrite> {
        if token.len() < 8 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::InvalidValue(format!(
                "token must be the hex token of a write, got {}",
                py_str(token)
            )));
        }
        let base = base_version(at, version)?;
        Ok(ColumnsWrite {
            root: Root::of(at)?,
            base,
            token: token.to_owned(),
            finished: Mutex::default(),
            patches: Mutex::default(),
            staging: files::StagingSet::default(),
            replaces: false,
            #[cfg(feature = "remote")]
            planned: None,
            #[cfg(feature = "remote")]
            after: Mutex::default(),
        })
    }

    /// What the commit learnt of the version it made (in a bucket, when
    /// it moved `manifest.json` and the server named the version it
    /// became): the basis of a next write on that version.
    pub fn committed_basis(&self) -> Option<super::Basis> {
        #[cfg(feature = "remote")]
        return self
            .after
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(|planned| super::Basis { planned });
        #[cfg(not(feature = "remote"))]
        None
    }

    /// The write's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The version the write is planned on.
    pub fn base(&self) -> &Manifest {
        &self.base
    }

    /// The deleted rows of shard `i` of the version planned on: its new
    /// columns need a value there too (never read), so that every store
    /// of the shard keeps the shard's rows.
    pub fn deleted(&self, i: usize) -> Result<Vec<u64>> {
        let shard = self.shard(i)?;
        let at = self.root.at.fresh();
        crate::table::manifest::read_deleted(at.fs(), at.path(), shard)
            .map_err(|e| versions::lost_to_cleanup(&at, self.base.version(), e))
    }

    pub(super) fn group(&self) -> String {
        format!("_g-{}", self.token)
    }

    /// The directory name of the write's patch groups (inside each shard).
    pub(super) fn patch_group(&self) -> String {
        format!("_g-{}-p", self.token)
    }

    fn shard(&self, i: usize) -> Result<&ShardEntry> {
        self.base.shards.get(i).ok_or_else(|| {
            Error::InvalidIndex(format!(
                "shard must be in 0..{}, got {i}",
                self.base.shards.len()
            ))
        })
    }

    /// A new, empty directory for shard `i`'s new columns: fill it as a
    /// plain table of the shard's rows, then [`finish_group`]. Inside the
    /// shard for a local table, a temporary directory for a remote one.
    ///
    /// [`finish_group`]: ColumnsWrite::finish_group
    pub fn new_group(&self, i: usize) -> Result<PathBuf> {
        let shard = self.shard(i)?;
        let dir = self
            .root
            .work_dir(&self.staging, "group", &shard.name)?
            .join(self.group());
        if dir.exists() {
            files::remove_dir_all(&dir)?; // a retried task's
        }
        files::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Checks shard `i`'s filled group `dir` (its rows are the shard's,
    /// its columns new to the table) and, for a remote table, uploads it
    /// into the shard and removes the local copy (which goes on error too).
    pub fn finish_group(&self, i: usize, dir: &Path) -> Result<()> {
        let checked = self.shard(i).and_then(|shard| {
            let schema = shard_schema_in(&Fs::Local, dir)?;
            self.check_group(shard, &schema)?;
            Ok((shard, schema))
        });
        let (schema, objects) = self.upload_group(checked, dir, self.group())?;
        self.finished().insert(i, (schema, objects));
        Ok(())
    }

    /// A new, empty directory for a patch of shard `i` (new values of some
    /// of its rows, of columns the table has, written as records columns
    /// whatever their layout): fill it as a plain table of those rows, then
    /// [`finish_patch`].
    ///
    /// [`finish_patch`]: ColumnsWrite::finish_patch
    pub fn new_patch(&self, i: usize) -> Result<PathBuf> {
        let shard = self.shard(i)?;
        let dir = self
            .root
            .work_dir(&self.staging, "group", &shard.name)?
            .join(self.patch_group());
        if dir.exists() {
            files::remove_dir_all(&dir)?;
        }
        files::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Checks shard `i`'s filled patch `dir`: its rows are the shard's live
    /// rows `live` (strictly increasing positions among them, in that
    /// order), its columns columns of the table written as records (nulls
    /// only in a nullable one). Writes the rows file (physical rows) and an
    /// all-valid validity stream for each column written without one that
    /// can hold null (all but dense tensors), then uploads it as
    /// [`ColumnsWrite::finish_group`] does.
    pub fn finish_patch(&self, i: usize, dir: &Path, live: &[u64]) -> Result<()> {
        let checked = (|| {
            let shard = self.shard(i)?;
            let schema = shard_schema_in(&Fs::Local, dir)?;
            if schema.rows != live.len() as u64 {
                return Err(Error::InvalidValue(format!(
                    "the new values of shard {} hold {} rows, but the patch names {}",
                    py_str(&shard.name),
                    schema.rows,
                    live.len()
                )));
            }
            if live.is_empty() || live.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::InvalidValue(format!(
                    "a patch of shard {} needs rows strictly increasing, at least one",
                    py_str(&shard.name)
                )));
            }
            if *live.last().unwrap() >= shard.live_rows() {
                return Err(Error::InvalidIndex(format!(
                    "a patch of shard {} names row {}, but the shard has {} rows",
                    py_str(&shard.name),
                    live.last().unwrap(),
                    shard.live_rows()
                )));
            }
            for (c, spec) in &schema.columns {
                if !self.base.columns.contains(c) || spec.layout != ColumnLayout::Records {
                    return Err(Error::InvalidValue(format!(
                        "a patch holds columns of table {} as records, got column {}",
                        self.root.path().display(),
                        py_str(c)
                    )));
                }
                let nulls = files::exists(&Fs::Local, &validity_dir(dir, c));
                if nulls && !self.base.is_nullable(c) {
                    return Err(Error::InvalidValue(format!(
                        "column {} of table {} cannot hold null (it has no nulls), but the new values of shard {} hold nulls",
                        py_str(c),
                        self.root.path().display(),
                        py_str(&shard.name)
                    )));
                }
                // Every column that can hold null gets a validity stream,
                // nullable or not yet: a later commit may make it nullable,
                // and its patches must then say their rows are valid.
                let dense_tensor = spec.schema.item_shape().is_some_and(|s| !s.is_empty());
                if !dense_tensor {
                    crate::table::shard::ensure_validity(dir, c, schema.rows)?;
                }
            }
            let gone = self.deleted(i)?;
            let rows = crate::table::manifest::physical(&gone, live.iter().copied());
            files::write_atomically(
                dir,
                PATCH_ROWS_FILE,
                &format!(".{PATCH_ROWS_FILE}.tmp"),
                &crate::table::manifest::deletion_bytes(&rows),
            )?;
            Ok((shard, schema))
        })();
        let (schema, objects) = self.upload_group(checked, dir, self.patch_group())?;
        self.patches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(i, (schema, objects));
        Ok(())
    }

    /// Shard `i`'s whole group and patch as written (each None where
    /// there is none): as this process finished them, or as another one
    /// (a task of a distributed edit) left them in the table; at least
    /// one of them (`InvalidValue` otherwise).
    pub(super) fn written_edit(&self, i: usize) -> Result<(Option<Finished>, Option<Finished>)> {
        let patch = self
            .patches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&i)
            .cloned();
        let whole = self.finished().get(&i).cloned();
        if whole.is_some() || patch.is_some() {
            return Ok((whole, patch));
        }
        let fresh = Root::of(&self.root.at.fresh())?;
        let shard = &self.base.shards[i];
        let read = |group: String| match fresh.schema_below(&in_shard(&shard.name, &group), |p| {
            Error::Missing {
                path: p.to_path_buf(),
                message: String::new(),
            }
        }) {
            Ok((schema, objects)) => Ok(Some((
                schema,
                objects.map(|o| {
                    o.into_iter()
                        .map(|(r, n)| (format!("{group}/{r}"), n))
                        .collect()
                }),
            ))),
            Err(Error::Missing { .. }) => Ok(None),
            Err(e) => Err(e),
        };
        let (whole, patch) = (read(self.group())?, read(self.patch_group())?);
        if whole.is_none() && patch.is_none() {
            return Err(Error::InvalidValue(format!(
                "shard {} has no new values of this edit: every edited shard needs them before the commit",
                py_str(&shard.name)
            )));
        }
        Ok((whole, patch))
    }

    /// After the checks of a filled group `dir` (`checked`: its shard and
    /// what they found, or their error, on which the directory goes): for
    /// a remote table, uploads it into the shard as `group` and removes the
    /// local copy (which goes on error too); returns what the checks found
    /// and the objects uploaded, relative to the shard.
    fn upload_group<T>(
        &self,
        checked: Result<(&ShardEntry, T)>,
        dir: &Path,
        group: String,
    ) -> Result<(T, Option<BTreeMap<String, u64>>)> {
        let (shard, found) = match checked {
            Ok(c) => c,
            Err(e) => {
                self.drop_group(dir);
                return Err(e);
            }
        };
        let done = self.root.upload(dir, &in_shard(&shard.name, &group));
        self.root.drop_work(dir, false);
        let objects = done?.map(|objects| {
            objects
                .into_iter()
                .map(|(r, n)| (format!("{group}/{r}"), n))
                .collect()
        });
        Ok((found, objects))
    }

    /// Removes the group directory `dir` (made by
    /// [`new_group`](ColumnsWrite::new_group)) that will not be finished:
    /// a remote table's local staging directory, a local table's group in
    /// its shard. Errors are ignored (`cleanup` reclaims what is left).
    pub fn drop_group(&self, dir: &Path) {
        self.root.drop_work(dir, true);
    }

    pub(super) fn finished(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Finished>> {
        self.finished.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_group(&self, shard: &ShardEntry, schema: &ShardSchema) -> Result<()> {
        if schema.rows != shard.rows {
            return Err(Error::InvalidValue(format!(
                "the new columns of shard {} have {} rows, but the shard has {}",
                py_str(&shard.name),
                schema.rows,
                shard.rows
            )));
        }
        if self.replaces {
            if let Some((c, _)) = schema
                .columns
                .iter()
                .find(|(c, _)| !self.base.columns.contains(c))
            {
                return Err(Error::InvalidValue(format!(
                    "column {} is not in table {}",
                    py_str(c),
                    self.root.path().display()
                )));
            }
        } else if let Some((c, _)) = schema
            .columns
            .iter()
            .find(|(c, _)| self.base.columns.contains(c))
        {
            return Err(Error::InvalidValue(format!(
                "column {} is in table {} already (drop it first to replace it)",
                py_str(c),
                self.root.path().display()
            )));
        }
        Ok(())
    }

    /// Shard `i`'s group as committed: its schema and (remote) objects.
    /// A group this process finished is taken as it checked and uploaded
    /// it ([`Finished`]); another process's is read from the bucket: its
    /// listing and each `meta.zr`.
    fn read_group(&self, root: &Root, i: usize) -> Result<Finished> {
        if let Some(done) = self.finished().get(&i) {
            return Ok(done.clone());
        }
        let shard = &self.base.shards[i];
        let group = self.group();
        let (schema, objects) = root.schema_below(&in_shard(&shard.name, &group), |_| {
            Error::InvalidValue(format!(
                "shard {} has no new columns of this write: every shard needs them before the commit",
                py_str(&shard.name)
            ))
        })?;
        Ok((
            schema,
            objects.map(|objects| {
                objects
                    .into_iter()
                    .map(|(r, n)| (format!("{group}/{r}"), n))
                    .collect()
            }),
        ))
    }

    /// Commits the new columns of every shard as one version; returns it.
    /// `CommitConflict` when a version committed meanwhile changed the
    /// shards or added a column of the same name; a version that only
    /// added or dropped other columns is taken as it is.
    pub fn commit(&self) -> Result<Manifest> {
        if self.base.shards.is_empty() {
            return Err(Error::InvalidValue(format!(
                "table {} has no shards to add columns to",
                self.root.path().display()
            )));
        }
        let fresh = Root::of(&self.root.at.fresh())?;
        let mut groups = Vec::with_capacity(self.base.shards.len());
        for i in 0..self.base.shards.len() {
            let (schema, objects) = self.read_group(&fresh, i)?;
            self.check_group(&self.base.shards[i], &schema)?;
            if let Some((first_name, first)) = groups
                .first()
                .map(|(s, _): &(ShardSchema, _)| (self.base.shards[0].name.clone(), s.clone()))
            {
                check_shard_agrees(&self.base.shards[i].name, &schema, &first_name, &first)?;
            }
            groups.push((schema, objects));
        }
        let new: Vec<String> = groups[0].0.columns.iter().map(|(c, _)| c.clone()).collect();
        let group = self.group();
        let base = &self.base;
        let mut next = |root: &Root, current: Option<&Manifest>| {
            let current = current.expect("a sharded table has a version");
            if !same_shards(base, current) {
                return Err(conflict(
                    root.path(),
                    base,
                    current,
                    "changed the table's shards (their rows have no values in the new columns)"
                        .into(),
                ));
            }
            if let Some(c) = new.iter().find(|c| current.columns.contains(c)) {
                return Err(conflict(
                    root.path(),
                    base,
                    current,
                    format!("added a column {} too", py_str(c)),
                ));
            }
            let mut shards = current.shards.clone();
            let mut nullable: BTreeSet<String> = current.nullable.iter().cloned().collect();
            let mut has: Vec<BTreeSet<String>> = Vec::with_capacity(shards.len());
            for (entry, (schema, objects)) in shards.iter_mut().zip(&groups) {
                entry
                    .groups
                    .push(ColumnGroup::whole(group.clone(), new.clone()));
                if let (Some(all), Some(mine)) = (entry.objects.as_mut(), objects) {
                    all.extend(mine.iter().map(|(k, v)| (k.clone(), *v)));
                }
                // A bucket's group was listed: its validity stores are
                // known without asking again.
                let valid: BTreeSet<String> = schema
                    .columns
                    .iter()
                    .filter(|(c, _)| match objects {
                        Some(listed) => {
                            listed.contains_key(&format!("{group}/.validity/{c}/meta.zr"))
                        }
                        None => files::is_store(root.at.fs(), &entry.validity_path(root.path(), c)),
                    })
                    .map(|(c, _)| c.clone())
                    .chain(schema.nulls.iter().cloned())
                    .collect();
                nullable.extend(valid.iter().cloned());
                has.push(valid);
            }
            let added_columnar = columnar_of(&groups[0].0);
            for (entry, valid) in shards.iter_mut().zip(&has) {
                let missing: Vec<&String> = new
                    .iter()
                    .filter(|c| {
                        nullable.contains(*c) && !valid.contains(*c) && !added_columnar.contains(*c)
                    })
                    .collect();
                if !missing.is_empty() {
                    root.add_validity(entry, &missing)?;
                }
            }
            let mut types = current.types.clone();
            types.extend(
                groups[0]
                    .0
                    .columns
                    .iter()
                    .filter(|(_, s)| s.logical != Logical::Tensor)
                    .map(|(c, s)| (c.clone(), s.logical)),
            );
            let mut columns = current.columns.clone();
            columns.extend(new.iter().cloned());
            let mut columnar = current.columnar.clone();
            columnar.extend(added_columnar.iter().cloned());
            columnar.sort();
            Ok(Manifest {
                columns,
                types,
                nullable: nullable.into_iter().collect(),
                columnar,
                shards,
                ..Manifest::default()
            })
        };
        #[cfg(feature = "remote")]
        if let Some(planned) = &self.planned {
            // Planned on a bucket's manifest.json (see begin_on).
            let (made, after) = self
                .root
                .publish_planned("add_columns", planned, &mut next)?;
            *self.after.lock().unwrap_or_else(|e| e.into_inner()) = after;
            return Ok(made);
        }
        let done = publish(&self.root, "add_columns", &mut next);
        if done.is_ok() {
            // What it made is named by a version now.
            self.root.release_lease();
        }
        done
    }

    /// Removes what this write made in every shard, unless a version
    /// names it (it was committed).
    pub fn discard(&self) -> Result<()> {
        self.root.release_lease();
        let (group, patch) = (self.group(), self.patch_group());
        if let Some(latest) =
            versions::latest(&self.root.at.fresh().fs().clone(), self.root.path())?
        {
            if latest
                .manifest
                .shards
                .iter()
                .any(|s| s.groups.iter().any(|g| g.dir == group || g.dir == patch))
            {
                return Ok(());
            }
        }
        for shard in &self.base.shards {
            self.root.remove_tree(&in_shard(&shard.name, &group))?;
            if self.replaces {
                // An edit's patches.
                self.root.remove_tree(&in_shard(&shard.name, &patch))?;
            }
        }
        Ok(())
    }
}
