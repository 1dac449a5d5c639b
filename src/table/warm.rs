//! The remote open plan of a table: before a table in a bucket opens, the
//! requests that fetch what the open reads, so that the open itself reads
//! from memory (see [`warm`]).

use crate::{Location, Result};

/// Before a remote table opens: its manifest (one request; the version
/// files after it, one request each, as [`super::versions`] walks them;
/// with `to_write`, for a manifest of version 1 in a bucket, one listing
/// of the version files in place of the request for version 2's, which
/// also says whether version 1's file is there for a commit from this
/// open),
/// then one listing of the table, or of each shard whose objects the
/// manifest does not record (concurrently), then one concurrent round of
/// fetches of every `table.json`, `meta.zr`, `dict.zr` and patch rows file
/// and of each columnar file's footer. With `manifest` (pinned bytes) the manifest is
/// not fetched. Nothing for a local table.
#[cfg_attr(not(feature = "remote"), allow(unused_variables))]
pub(crate) fn warm(location: &Location, manifest: Option<&[u8]>, to_write: bool) -> Result<()> {
    #[cfg(feature = "remote")]
    if let crate::io::Fs::Remote(r) = location.fs() {
        remote::warm(r, location.path(), manifest, to_write)?;
    }
    Ok(())
}

#[cfg(feature = "remote")]
mod remote {
    use std::path::Path;

    use crate::io::remote::{join_key, setup, Remote};
    use crate::table::manifest::{listed_objects, parse_manifest, SELF_SHARD};
    use crate::table::versions::{self, Resolved, VERSIONS_DIR};
    use crate::table::MANIFEST_FILE;
    use crate::Result;

    pub(super) fn warm(
        r: &Remote,
        at: &Path,
        manifest: Option<&[u8]>,
        to_write: bool,
    ) -> Result<()> {
        let key = setup(at, r.key_of(at))?;
        let join = |k: &str| join_key(&key, k);
        let shard_key = |name: &str| {
            if name == SELF_SHARD {
                key.clone()
            } else {
                join(name)
            }
        };
        let manifest_key = join(MANIFEST_FILE);
        let raw: Option<Vec<u8>> = match manifest {
            Some(bytes) => {
                r.pin_body(&manifest_key, bytes);
                Some(bytes.to_vec())
            }
            None => {
                setup(at, r.prefetch(std::slice::from_ref(&manifest_key)))?;
                match r.body(&manifest_key) {
                    Some(pointer) => Some(latest(r, at, &join, pointer.to_vec(), to_write)?),
                    None => None,
                }
            }
        };
        let prefixes: Vec<String> = match raw {
            Some(raw) => {
                let shards = listed_objects(&raw);
                let mut unlisted = Vec::new();
                let mut prefixes = Vec::with_capacity(shards.len());
                for (name, objects) in shards {
                    let prefix = shard_key(&name);
                    prefixes.push(prefix.clone());
                    match objects {
                        // A plain table turned sharded in place is the
                        // table's own prefix: listed, never assumed.
                        Some(_) if name == SELF_SHARD => unlisted.push(prefix),
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
                prefixes
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
                if matches!(name, "meta.zr" | "dict.zr" | "table.json")
                    || name == crate::table::manifest::PATCH_ROWS_FILE
                {
                    wanted.push((k, None));
                } else if name == crate::columnar::COLUMN_FILE {
                    // A column file's footer, not its chunks.
                    wanted.push((k, Some(crate::columnar::OPEN_TAIL_BYTES)));
                }
            }
        }
        setup(at, r.prefetch_parts(&wanted))
    }

    /// The bytes of the latest version given `manifest.json`'s (`pointer`),
    /// walked as [`versions::forward`] walks them, each version file looked
    /// for with one request that is kept (the open then reads them from
    /// memory). A pointer that does not parse is returned as it is (the
    /// open reports it).
    fn latest(
        r: &Remote,
        at: &Path,
        join: &dyn Fn(&str) -> String,
        pointer: Vec<u8>,
        to_write: bool,
    ) -> Result<Vec<u8>> {
        let file = at.join(MANIFEST_FILE);
        let Ok(manifest) = parse_manifest(&file, &pointer) else {
            return Ok(pointer);
        };
        if to_write && manifest.version() == 1 && r.writable() {
            // Only version 1 can lack its file: one listing of the version
            // files, in place of the request for version 2's, also says
            // whether it is there (a commit from this open then need not
            // write it; see `write::Basis::opened`). Readers keep the
            // request: a listing costs more.
            setup(at, r.list_prefix(&join(VERSIONS_DIR)))?;
        }
        let current = Resolved {
            bytes: pointer,
            manifest,
        };
        let latest = versions::forward(at, Some(current), &mut |rel| {
            let k = join(rel);
            setup(at, r.prefetch(std::slice::from_ref(&k)))?;
            Ok(r.body(&k).map(|b| b.to_vec()))
        })?;
        Ok(latest.map(|l| l.bytes).unwrap_or_default())
    }
}
