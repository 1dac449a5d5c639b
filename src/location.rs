//! [`Location`]: where a store or table lives, a local path or a remote
//! URI (`s3://`, `gs://`, `az://`, `abfs[s]://`, `http(s)://`) with its
//! storage options.
//!
//! ```no_run
//! use loaderx::table::Table;
//! use loaderx::Location;
//! let at = Location::parse(
//!     "s3://bucket/tables/train",
//!     &[("aws_region".into(), "eu-west-1".into())],
//! )?;
//! let table = Table::open_at(&at, true)?;
//! let rows = table.column("label").unwrap();
//! # Ok::<(), loaderx::Error>(())
//! ```

use std::path::{Path, PathBuf};

use crate::io::Fs;
use crate::{Error, Result};

/// A local path, or a remote location with its client options.
#[derive(Clone, Debug)]
pub struct Location {
    fs: Fs,
    /// The local path, or the remote URI (without options).
    path: PathBuf,
}

/// A local block cache for remote reads: a directory and its size bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheOptions {
    pub dir: PathBuf,
    pub bytes: u64,
}

/// The size of one cached block of a remote object (4 MiB): `cache_bytes`
/// must hold at least one.
#[cfg(feature = "remote")]
pub const CACHE_BLOCK: u64 = crate::io::remote::BLOCK_SIZE;

impl Location {
    /// A local path.
    pub fn local(path: impl Into<PathBuf>) -> Location {
        Location {
            fs: Fs::Local,
            path: path.into(),
        }
    }

    /// Parses `location`: a local path, a `file://` URI, or a remote URI
    /// configured by `options` (the `object_store` crate's key names, e.g.
    /// `aws_endpoint`, `aws_region`, `aws_access_key_id`; plus
    /// `max_retries` and `retry_timeout`) and the environment (`AWS_*`,
    /// `GOOGLE_*`, `AZURE_*`). Options are ignored for a local path.
    ///
    /// `InvalidValue` for a malformed URI, an unknown scheme or an unknown
    /// option key (naming it, never a value), or a scheme this build leaves
    /// out.
    pub fn parse(location: &str, options: &[(String, String)]) -> Result<Location> {
        Location::parse_cached(location, options, None)
    }

    /// [`Location::parse`] with a local block cache for remote reads
    /// (`cache` is refused for a local path, and must hold one block).
    pub fn parse_cached(
        location: &str,
        options: &[(String, String)],
        cache: Option<&CacheOptions>,
    ) -> Result<Location> {
        use crate::io::uri::{self, Parsed};
        // One parser in every build: a build without remote support refuses
        // a remote URI only after it parsed as one, and takes a file:// URI
        // by the same rules (an absolute path, no query).
        match uri::parse(location)? {
            Parsed::Local(path) => {
                if cache.is_some() {
                    return Err(Error::InvalidValue(format!(
                        "cache_dir is for remote locations, but {} is a local path",
                        path.display()
                    )));
                }
                Ok(Location::local(path))
            }
            #[cfg(feature = "remote")]
            Parsed::Remote(u) => {
                use crate::io::remote::{BlockCache, Remote};
                let cache = cache
                    .map(|c| BlockCache::open(&c.dir, c.bytes))
                    .transpose()?;
                let path = PathBuf::from(u.display());
                let remote = Remote::new(u, options, cache)?;
                Ok(Location {
                    fs: Fs::Remote(std::sync::Arc::new(remote)),
                    path,
                })
            }
            #[cfg(not(feature = "remote"))]
            Parsed::Remote(u) => {
                let _ = options;
                Err(Error::InvalidValue(format!(
                    "location {:?} is remote ({} storage), but this build of loaderx has no remote support (the cargo feature \"remote\")",
                    u.display(),
                    u.scheme.name()
                )))
            }
        }
    }

    /// The bytes of the file `name` directly inside this location (a table's
    /// `manifest.json`, say), None when there is none.
    pub fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>> {
        crate::table::read_file(&self.fs, &self.path.join(name))
    }

    /// Puts the local file `local` at this location, whole: for an object
    /// store with one request, or a multipart upload for a large file (the
    /// object appears whole or not at all). Returns its size.
    pub fn upload_file(&self, local: &Path) -> Result<u64> {
        let size = std::fs::metadata(local)
            .map_err(|e| Error::io(local, e))?
            .len();
        match &self.fs {
            Fs::Local => {
                std::fs::copy(local, &self.path).map_err(|e| Error::io(&self.path, e))?;
            }
            #[cfg(feature = "remote")]
            Fs::Remote(r) => {
                use crate::io::remote::upload::{transfer, Place, Transfer};
                if !r.writable() {
                    return Err(Error::InvalidValue(format!(
                        "{} is an http(s) location, which is read-only",
                        self.path.display()
                    )));
                }
                let key = r
                    .key_of(&self.path)
                    .map_err(|e| crate::io::io_error(&self.path, e))?;
                let t = Transfer {
                    from: Place::Local(local.to_path_buf()),
                    to: Place::Remote(r.clone(), key),
                    size,
                };
                transfer(std::slice::from_ref(&t), &|_| Ok(()))
                    .map_err(|e| crate::io::io_error(&self.path, e))?;
            }
        }
        Ok(size)
    }

    /// The size of the file or object at this location, None when there is
    /// none.
    pub fn file_size(&self) -> Result<Option<u64>> {
        use crate::io::{Storage, StorageFile};
        match self.fs.open(&self.path, false) {
            Ok(f) => Ok(Some(
                f.len().map_err(|e| crate::io::io_error(&self.path, e))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::io::io_error(&self.path, e)),
        }
    }

    /// Whether `location` names a remote object store (not a local path or
    /// a `file://` URI); nothing is checked beyond the scheme.
    pub fn is_remote_uri(location: &str) -> bool {
        crate::io::uri::names_remote(location)
    }

    pub fn is_remote(&self) -> bool {
        self.fs.is_remote()
    }

    /// The local path, or the remote URI (what messages name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The location `name` below this one.
    pub fn join(&self, name: &str) -> Location {
        Location {
            fs: self.fs.clone(),
            path: self.path.join(name),
        }
    }

    pub(crate) fn fs(&self) -> &Fs {
        &self.fs
    }

    /// The same location with nothing learned about it yet (no listings or
    /// fetched objects remembered; a remote one gets a new client and no
    /// cache): what a commit reads afresh on each attempt.
    pub fn fresh(&self) -> Location {
        match &self.fs {
            Fs::Local => self.clone(),
            #[cfg(feature = "remote")]
            Fs::Remote(r) => Location {
                fs: Fs::Remote(std::sync::Arc::new(r.fresh())),
                path: self.path.clone(),
            },
        }
    }

    /// A writable open of a remote location is refused: `InvalidValue`
    /// naming the URI.
    pub(crate) fn check_readonly(&self, readonly: bool, what: &str) -> Result<()> {
        if self.is_remote() && !readonly {
            return Err(Error::Refused {
                refusal: crate::error::Refusal::RemoteWritable,
                message: format!(
                    "{} is a remote location: a {what} there opens read-only; write locally and upload with copy_table",
                    self.path.display()
                ),
            });
        }
        Ok(())
    }

    /// Before a remote store opens: one listing of its objects and one
    /// round of concurrent fetches of its `meta.zr` and `dict.zr`.
    pub(crate) fn warm_store(&self) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Fs::Remote(r) = &self.fs {
            let key = crate::io::remote::setup(&self.path, r.key_of(&self.path))?;
            crate::io::remote::setup(&self.path, r.list_prefix(&key))?;
            let keys = [format!("{key}/meta.zr"), format!("{key}/dict.zr")];
            let present: Vec<String> = keys.into_iter().filter(|k| r.knows(k)).collect();
            crate::io::remote::setup(&self.path, r.prefetch(&present))?;
        }
        Ok(())
    }

    /// Before a remote table opens: its manifest (one request), then one
    /// listing of the table, or of each shard whose objects the manifest
    /// does not record (concurrently), then one concurrent round of
    /// fetches of every `table.json`, `meta.zr` and `dict.zr`. What the
    /// open then reads comes from memory.
    pub(crate) fn warm_table(&self) -> Result<()> {
        self.warm_table_pinned(None)
    }

    /// [`Location::warm_table`], with the manifest's bytes given (pinned)
    /// rather than fetched.
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub(crate) fn warm_table_pinned(&self, manifest: Option<&[u8]>) -> Result<()> {
        #[cfg(feature = "remote")]
        if let Fs::Remote(r) = &self.fs {
            use crate::io::remote::setup;
            let at = &self.path;
            let key = setup(at, r.key_of(at))?;
            let join = |k: &str| crate::io::remote::join_key(&key, k);
            let shard_key = |name: &str| {
                if name == crate::table::manifest::SELF_SHARD {
                    key.clone()
                } else {
                    join(name)
                }
            };
            let manifest_key = join(crate::table::MANIFEST_FILE);
            let raw = match manifest {
                Some(bytes) => {
                    r.pin_body(&manifest_key, bytes);
                    r.body(&manifest_key)
                }
                None => {
                    setup(at, r.prefetch(std::slice::from_ref(&manifest_key)))?;
                    match r.body(&manifest_key) {
                        Some(pointer) => Some(latest_version(r, at, &join, pointer)?),
                        None => None,
                    }
                }
            };
            let prefixes: Vec<String> = match raw {
                Some(raw) => {
                    let shards = crate::table::manifest::listed_objects(&raw);
                    let mut unlisted = Vec::new();
                    for (name, objects) in shards {
                        let prefix = shard_key(&name);
                        match objects {
                            // A plain table turned sharded in place is the
                            // table's own prefix: listed, never assumed.
                            Some(_) if name == crate::table::manifest::SELF_SHARD => {
                                unlisted.push(prefix)
                            }
                            Some(objs) => {
                                let objs: Vec<(String, u64)> = objs
                                    .into_iter()
                                    .map(|(k, size)| (format!("{prefix}/{k}"), size))
                                    .collect();
                                r.assume_listed(&prefix, &objs);
                            }
                            None => unlisted.push(prefix),
                        }
                    }
                    setup(at, r.list_prefixes(&unlisted))?;
                    manifest_shard_prefixes(&raw, &shard_key)
                }
                None => {
                    setup(at, r.list_prefix(&key))?;
                    vec![key.clone()]
                }
            };
            let mut wanted = Vec::new();
            for prefix in prefixes {
                for k in r.known_keys(&prefix) {
                    let name = k.rsplit('/').next().unwrap_or("");
                    if matches!(name, "meta.zr" | "dict.zr" | "table.json") {
                        wanted.push((k, None));
                    } else if name == crate::columnar::COLUMN_FILE {
                        // A column file's footer, not its chunks.
                        wanted.push((k, Some(crate::columnar::OPEN_TAIL_BYTES)));
                    }
                }
            }
            setup(at, r.prefetch_parts(&wanted))?;
        }
        Ok(())
    }
}

/// The bytes of the latest version given `manifest.json`'s (`pointer`):
/// the pointer, or the version files after it, each looked for with one
/// request that is kept (opening then reads them from memory). A pointer
/// that does not parse is returned as it is (opening reports it).
#[cfg(feature = "remote")]
fn latest_version(
    r: &crate::io::remote::Remote,
    at: &Path,
    join: &dyn Fn(&str) -> String,
    pointer: bytes::Bytes,
) -> Result<bytes::Bytes> {
    let file = at.join(crate::table::MANIFEST_FILE);
    let Ok(m) = crate::table::manifest::parse_manifest(&file, &pointer) else {
        return Ok(pointer);
    };
    let (mut raw, mut v) = (pointer, m.version());
    loop {
        let k = join(&crate::table::versions::version_rel(v + 1));
        crate::io::remote::setup(at, r.prefetch(std::slice::from_ref(&k)))?;
        match r.body(&k) {
            Some(b) => (raw, v) = (b, v + 1),
            None => return Ok(raw),
        }
    }
}

/// The key prefixes of the shards a manifest names (`join` makes a key of
/// a name below the table).
#[cfg(feature = "remote")]
fn manifest_shard_prefixes(raw: &[u8], join: &dyn Fn(&str) -> String) -> Vec<String> {
    crate::table::manifest::listed_objects(raw)
        .into_iter()
        .map(|(name, _)| join(&name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same rules with and without remote support: a `file://` URI
    /// needs an absolute path and takes no query; a remote URI is parsed
    /// (and refused when malformed) before a build without remote support
    /// refuses it for that.
    #[test]
    fn file_uris_follow_one_rule_in_every_build() {
        let at = Location::parse("file:///data/t", &[]).unwrap();
        assert!(!at.is_remote());
        assert_eq!(at.path(), Path::new("/data/t"));
        assert_eq!(
            Location::parse("file://localhost/data", &[])
                .unwrap()
                .path(),
            Path::new("/data")
        );
        for bad in ["file://data/t", "file:///data/t?x=1"] {
            let e = Location::parse(bad, &[]).unwrap_err().to_string();
            assert!(e.contains("file://"), "{bad}: {e}");
        }
        let e = Location::parse("ftp://host/x", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown scheme"), "{e}");
        let e = Location::parse("s3://b/../x", &[]).unwrap_err().to_string();
        assert!(e.contains("'..'"), "{e}");
        assert!(Location::is_remote_uri("s3://b/x") && !Location::is_remote_uri("file:///x"));
        #[cfg(not(feature = "remote"))]
        {
            let e = Location::parse("s3://b/x", &[]).unwrap_err().to_string();
            assert!(
                e.contains("no remote support") && e.contains("s3://b/x"),
                "{e}"
            );
        }
    }
}
