//! The conditional commit to a bucket: the latest version read afresh,
//! the version a write planned on, and the publication of a new one (a
//! version file, then the pointer `manifest.json`, each written only if
//! absent or unchanged).

use std::path::Path;

use bytes::Bytes;
use object_store::{PutMode, UpdateVersion};

use crate::io::io_error;
use crate::io::remote::upload::Put;
use crate::table::manifest::{parse_manifest, Manifest, MANIFEST_FILE};
use crate::table::versions::{self, version_rel, Resolved};
use crate::{Error, Location, Result};

use super::{key, parts, Bucket, Next, COMMIT_TRIES};

/// The latest version in the bucket, read afresh: `manifest.json` (its
/// bytes' entity tag kept for the conditional update of the pointer), then
/// the version files after it.
pub(crate) fn latest(root: &Bucket) -> Result<(Option<Resolved>, Option<UpdateVersion>)> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    let (pointer, tag) = match remote
        .get_versioned(&key(base, MANIFEST_FILE))
        .map_err(|e| io_error(&file, e))?
    {
        Some((bytes, tag)) => (
            Some(Resolved {
                manifest: parse_manifest(&file, &bytes)?,
                bytes: bytes.to_vec(),
            }),
            Some(tag),
        ),
        None => (None, None),
    };
    let latest = versions::forward(root.path(), pointer, &mut |rel| {
        Ok(remote
            .get_versioned(&key(base, rel))
            .map_err(|e| io_error(&root.path().join(rel), e))?
            .map(|(b, _)| b.to_vec()))
    })?;
    Ok((latest, tag))
}

/// The latest version as `manifest.json` names it, with that object's
/// entity tag: what a write planned in a bucket remembers, so that its
/// commit reads nothing again when no other commit came between
/// ([`publish_planned`]).
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub(crate) current: Resolved,
    tag: UpdateVersion,
    /// Whether version 1's file is known to be there (only version 1 can
    /// lack its file; a commit on it writes the file first otherwise).
    first_file: bool,
    /// When `manifest.json` was read or written so.
    learnt: std::time::Instant,
}

/// How long what a handle learnt of `manifest.json` is planned on without
/// reading it again: a commit on an older basis reads the latest first,
/// so that a cleanup that removed versions meanwhile is seen (see
/// docs/format.md on cleanups in a bucket).
pub(crate) const BASIS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

impl Planned {
    /// The version planned on.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.current.manifest
    }

    /// Whether it was learnt within [`BASIS_TTL`].
    pub(crate) fn recent(&self) -> bool {
        self.learnt.elapsed() < BASIS_TTL
    }

    /// What opening the table at `at` learnt of it, when that open fetched
    /// `manifest.json` whole with the version the server named and it is
    /// version `version` (not behind the version files): a commit planned
    /// on the open then reads nothing first. None for a local table, an
    /// http(s) one, a pinned version or a server that names no version.
    pub(crate) fn opened(at: &Location, version: u64) -> Option<Planned> {
        let crate::io::Fs::Remote(r) = at.fs() else {
            return None;
        };
        if !r.writable() {
            return None;
        }
        let base = r.key_of(at.path()).ok()?;
        let (bytes, tag) = r.versioned_body(&key(&base, MANIFEST_FILE))?;
        let manifest = parse_manifest(&at.path().join(MANIFEST_FILE), &bytes).ok()?;
        if manifest.version() != version {
            return None;
        }
        // The open listed the version files of a table at version 1.
        let first_file = version > 1 || r.knows(&key(&base, &version_rel(1)));
        Some(Planned {
            current: Resolved {
                manifest,
                bytes: bytes.to_vec(),
            },
            tag,
            first_file,
            learnt: std::time::Instant::now(),
        })
    }

    /// The version a commit made, with the version `manifest.json` became
    /// by its write (as the server named it).
    fn committed(manifest: &Manifest, tag: UpdateVersion) -> Planned {
        Planned {
            current: Resolved {
                manifest: manifest.clone(),
                bytes: manifest.to_json(),
            },
            tag,
            first_file: true,
            learnt: std::time::Instant::now(),
        }
    }
}

/// `manifest.json` alone, read afresh (one request), with its tag; None
/// when there is none. Version files after it are not looked for: a
/// commit from it finds them when it creates the next version's file.
pub(crate) fn pointer(root: &Bucket) -> Result<Option<Planned>> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    Ok(
        match remote
            .get_versioned(&key(base, MANIFEST_FILE))
            .map_err(|e| io_error(&file, e))?
        {
            Some((bytes, tag)) => Some(Planned {
                current: Resolved {
                    manifest: parse_manifest(&file, &bytes)?,
                    bytes: bytes.to_vec(),
                },
                tag,
                first_file: false,
                learnt: std::time::Instant::now(),
            }),
            None => None,
        },
    )
}

/// [`publish`] of a write planned on `planned`: when no other commit came
/// between, the commit is the next version's file (created only if
/// absent) and the conditional move of `manifest.json`, with nothing read
/// again; the writes are those of [`publish`], in its order (version 1's
/// file is not written again when the plan knows it is there). When the
/// next version's file exists already (another commit won, or
/// `manifest.json` lagged behind the latest), [`publish`] takes over: it
/// reads the latest and calls `next` on it again. Returns the version made
/// and, when this commit moved `manifest.json` and the server named the
/// version it became, the plan of a next commit on it.
pub(crate) fn publish_planned(
    root: &Bucket,
    operation: &str,
    planned: &Planned,
    next: Next<'_>,
) -> Result<(Manifest, Option<Planned>)> {
    let current = &planned.current;
    let manifest = versions::stamp(
        next(root, Some(&current.manifest))?,
        Some(current),
        operation,
    );
    match commit_on(
        root,
        current,
        Some(planned.tag.clone()),
        planned.first_file,
        &manifest,
    )? {
        Commit::Made(tag) => {
            let after = tag.map(|tag| Planned::committed(&manifest, tag));
            Ok((manifest, after))
        }
        Commit::Lost => publish(root, operation, next).map(|m| (m, None)),
    }
}

/// [`super::publish`] in a bucket: the new version's file is created only
/// if absent (the commit point: a committer that loses the race reads the
/// winner's version and tries again), then `manifest.json` is moved to it
/// only if it is still what this commit read (so it never moves back; when
/// a later commit moved it first, it is already past this version).
pub(crate) fn publish(root: &Bucket, operation: &str, next: Next<'_>) -> Result<Manifest> {
    let file = root.path().join(MANIFEST_FILE);
    for attempt in 0..COMMIT_TRIES {
        // What this attempt learns of the bucket is its own.
        let fresh = root.fresh()?;
        let (remote, base) = parts(&fresh);
        let (current, tag) = latest(&fresh)?;
        let manifest = versions::stamp(
            next(&fresh, current.as_ref().map(|c| &c.manifest))?,
            current.as_ref(),
            operation,
        );
        let bytes = Bytes::from(manifest.to_json());
        let Some(current) = current else {
            // A new table's commit point is its manifest.json, created only
            // if absent; its version 1 follows.
            match remote
                .put(&key(base, MANIFEST_FILE), bytes.clone(), PutMode::Create)
                .map_err(|e| unsupported_conditional(&file, e))?
            {
                Put::Done(_) => {
                    remote
                        .put(&key(base, &version_rel(1)), bytes, PutMode::Create)
                        .map_err(|e| unsupported_conditional(&file, e))?;
                    return Ok(manifest);
                }
                Put::Conflict => {
                    lost(attempt);
                    continue;
                }
            }
        };
        match commit_on(&fresh, &current, tag, false, &manifest)? {
            Commit::Made(_) => return Ok(manifest),
            Commit::Lost => lost(attempt),
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

/// The commit of `manifest`, the version after `current`, whose
/// `manifest.json` had entity tag `tag`: version 1's file first when
/// `current` is version 1 and `first_file` does not say it is there (only it can lack its file: a table from before
/// versions, or a first commit killed before writing it; whoever writes it
/// writes the same version), then the new version's file, created only if
/// absent (the commit point: Conflict when another commit took the
/// version), then `manifest.json` moved to it only if it is still `tag`
/// (lost only to a later commit, which moved the pointer past this version
/// already).
fn commit_on(
    root: &Bucket,
    current: &Resolved,
    tag: Option<UpdateVersion>,
    first_file: bool,
    manifest: &Manifest,
) -> Result<Commit> {
    let (remote, base) = parts(root);
    let file = root.path().join(MANIFEST_FILE);
    if current.manifest.version() == 1 && !first_file {
        let first = versions::as_first_version(current);
        remote
            .put(
                &key(base, &version_rel(1)),
                Bytes::from(first.to_json()),
                PutMode::Create,
            )
            .map_err(|e| unsupported_conditional(&file, e))?;
    }
    let bytes = Bytes::from(manifest.to_json());
    let vkey = key(base, &version_rel(manifest.version()));
    if let Put::Conflict = remote
        .put(&vkey, bytes.clone(), PutMode::Create)
        .map_err(|e| unsupported_conditional(&file, e))?
    {
        return Ok(Commit::Lost);
    }
    let mode = match tag {
        Some(tag) => PutMode::Update(tag),
        None => PutMode::Create,
    };
    Ok(
        match remote
            .put(&key(base, MANIFEST_FILE), bytes, mode)
            .map_err(|e| unsupported_conditional(&file, e))?
        {
            Put::Done(tag) => Commit::Made(Some(tag)),
            // A later commit moved it past this version already.
            Put::Conflict => Commit::Made(None),
        },
    )
}

/// What [`commit_on`] did.
enum Commit {
    /// Another commit took the version first.
    Lost,
    /// The version is committed; with the version `manifest.json` became
    /// when this commit moved it.
    Made(Option<UpdateVersion>),
}

/// Waits before attempt `attempt + 1` of a commit that lost a race.
fn lost(attempt: u32) {
    std::thread::sleep(crate::io::remote::retry::backoff(
        attempt,
        std::time::Duration::from_millis(20),
    ));
}

/// A store without conditional writes cannot take a commit safely.
pub(super) fn unsupported_conditional(file: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::Unsupported {
        return Error::InvalidValue(format!(
            "{}: this object store does not support conditional writes (If-Match / If-None-Match), so a commit could silently drop another committer's shards; loaderx refuses to commit there",
            file.display()
        ));
    }
    io_error(file, e)
}
