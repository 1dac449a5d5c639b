//! Where a write goes ([`Root`]): a local directory or a prefix of a
//! bucket, and what the write path does there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::io::Fs;
use crate::table::files;
use crate::table::manifest::{shard_dir, Manifest, ShardEntry};
use crate::table::shard::{column_spec_in, ensure_validity, shard_schema_in, ShardSchema};
use crate::table::types::validity_dir;
use crate::{Location, Records, Result, Schema, Store};

#[cfg(feature = "remote")]
use super::bucket;

/// A new shard's objects (recorded for a remote table) and the columns it
/// has validity streams for.
pub(super) type Contents = (Option<BTreeMap<String, u64>>, BTreeSet<String>);

/// Where a write goes: a local directory or a prefix of a bucket.
#[derive(Debug)]
pub(super) struct Root {
    pub(super) at: Location,
    pub(super) kind: RootKind,
}

#[derive(Debug)]
pub(super) enum RootKind {
    Local(PathBuf),
    #[cfg(feature = "remote")]
    Bucket {
        remote: std::sync::Arc<crate::io::remote::Remote>,
        base: String,
    },
}

impl Root {
    pub(super) fn of(at: &Location) -> Result<Root> {
        let kind = match at.fs() {
            Fs::Local => RootKind::Local(at.path().to_path_buf()),
            #[cfg(feature = "remote")]
            Fs::Remote(r) => {
                if !r.writable() {
                    return Err(crate::Error::InvalidValue(format!(
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

    pub(super) fn path(&self) -> &Path {
        self.at.path()
    }

    pub(super) fn exists(&self) -> bool {
        match &self.kind {
            RootKind::Local(dir) => dir.exists(),
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => true,
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
    pub(super) fn holds_stores(&self) -> Result<bool> {
        match &self.kind {
            RootKind::Local(dir) => {
                Ok(dir.is_dir() && !files::column_dirs(&Fs::Local, dir)?.is_empty())
            }
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => Ok(bucket::files(self)?
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
            RootKind::Bucket { .. } => {
                let rel = bucket::shard_rel(name);
                let objects = bucket::sizes_below(self, rel)?;
                if objects.is_empty() {
                    return Err(crate::Error::Missing {
                        path: dir.clone(),
                        message: format!("shard directory {} does not exist", dir.display()),
                    });
                }
                bucket::listed_schema(self, rel, &dir, &objects)
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
            RootKind::Bucket { .. } => bucket::shard_contents(self, name, reference, known),
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
            RootKind::Bucket { .. } => bucket::add_validity(self, entry, columns),
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
            RootKind::Bucket { .. } => Ok(Some(
                bucket::upload_dir(self, dir, name)?.into_iter().collect(),
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
            RootKind::Bucket { .. } => bucket::remove_shards(self, names),
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
            RootKind::Bucket { .. } => bucket::rewrite_ragged(self, shard, column),
        }
    }

    /// [`TableWrite::discard`] of the shards named `prefix*`.
    pub(super) fn discard(&self, prefix: &str, remove_table: bool) -> Result<Vec<String>> {
        match &self.kind {
            RootKind::Local(dir) => crate::table::shard::discard_shards(dir, prefix, remove_table),
            #[cfg(feature = "remote")]
            RootKind::Bucket { .. } => bucket::discard(self, prefix),
        }
    }
}

/// Bytes of dense records read per run of a rewrite as ragged.
const REWRITE_RUN_BYTES: usize = 16 << 20;

/// Writes every record of the dense store `dense` as a ragged store at
/// `dst` (the same codec and dictionary), in runs of about 16 MiB.
pub(super) fn copy_as_ragged(dense: &Store, dst: &Path) -> Result<()> {
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
    let step = (REWRITE_RUN_BYTES / width.max(1)).max(1) as u64;
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
