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
        super::read_whole(&self.fs, &self.path.join(name))
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
                transfer(std::slice::from_ref(&t), &|_| Ok(()), None)
                    .map_err(|e| crate::io::io_error(&self.path, e))?;
            }
        }
        Ok(size)
    }

    /// Every file below this location, as a relative path (`/`-separated)
    /// and a size: walked locally (none where the directory is missing),
    /// listed remotely.
    #[cfg(feature = "remote")]
    pub(crate) fn files_below(&self) -> Result<Vec<(String, u64)>> {
        match &self.fs {
            Fs::Local => {
                if !self.path.exists() {
                    return Ok(Vec::new());
                }
                super::local::walk(&self.path)
            }
            Fs::Remote(r) => {
                let key = r
                    .key_of(&self.path)
                    .map_err(|e| crate::io::io_error(&self.path, e))?;
                let listed = r
                    .list_objects(&key)
                    .map_err(|e| crate::io::io_error(&self.path, e))?;
                let strip = if key.is_empty() {
                    String::new()
                } else {
                    format!("{key}/")
                };
                Ok(listed
                    .into_iter()
                    .filter_map(|(k, size)| {
                        k.strip_prefix(strip.as_str()).map(|r| (r.to_owned(), size))
                    })
                    .collect())
            }
        }
    }

    /// The file `rel` below this location as one end of a transfer.
    #[cfg(feature = "remote")]
    pub(crate) fn place(&self, rel: &str) -> crate::io::remote::upload::Place {
        use crate::io::remote::upload::Place;
        match &self.fs {
            Fs::Local => Place::Local(self.path.join(rel)),
            Fs::Remote(r) => {
                let base = r.key_of(&self.path).unwrap_or_default();
                Place::Remote(r.clone(), crate::io::remote::join_key(&base, rel))
            }
        }
    }

    /// The remote root of this location and its key, if it is remote.
    #[cfg(feature = "remote")]
    pub(crate) fn remote_root(
        &self,
    ) -> Result<Option<(std::sync::Arc<crate::io::remote::Remote>, String)>> {
        match &self.fs {
            Fs::Local => Ok(None),
            Fs::Remote(r) => {
                let key = r
                    .key_of(&self.path)
                    .map_err(|e| crate::io::io_error(&self.path, e))?;
                Ok(Some((r.clone(), key)))
            }
        }
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
    /// fetched objects remembered; a remote one no block cache, and the
    /// process's shared client for its options): what a commit reads
    /// afresh on each attempt.
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
