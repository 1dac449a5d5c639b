//! Object stores behind the seam: [`Remote`] is a location on s3, gs, az or
//! http(s) (through the `object_store` crate), read-only, and
//! [`RemoteFile`] one object in it (`object.rs`).
//!
//! What a remote open costs is planned, not incidental. A table open lists
//! its prefix once (or takes the objects a sharded manifest records) and
//! fetches every store's `meta.zr` and `dict.zr` concurrently
//! ([`Remote::list_prefix`], [`Remote::prefetch`]); the engine's ordinary
//! open code then reads them from memory. Object sizes and ETags are pinned
//! when first seen: a later response for another version of the object is
//! [`ObjectChanged`] (the store reports it as `Corrupted`), never mixed
//! bytes. Gathers do not read through [`StorageFile::read_exact_at`] (one
//! request per record): they hand every record range of a batch to
//! [`RemoteFile::fetch`], which plans few large concurrent requests
//! (`fetch.rs`) or reads through the local block cache (`cache.rs`).

mod cache;
pub(crate) mod client;
pub(crate) mod fetch;
mod file;
mod hedge;
mod object;
#[cfg(feature = "aws")]
pub(crate) mod open_uploads;
mod policy;
pub(crate) mod retry;
mod runtime;
pub(crate) mod upload;
mod version;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{GetOptions, ObjectStore, UpdateVersion};

pub(crate) use cache::BlockCache;
/// Bytes per cached block of a remote object.
pub(crate) const BLOCK_SIZE: u64 = cache::BLOCK;
use super::uri::{self, RemoteUri};
use client::{Client, ClientConfig};
pub(crate) use fetch::Runs;
pub(crate) use file::{fetch_live, fetch_many, Arrivals, RemoteFile};
pub(crate) use object::Object;
use version::{Pin, Seen};

use super::{EntryKind, Storage, StorageFile};
use crate::{Error, Result};

/// A remote object that is no longer the version an open handle pinned: its
/// size or ETag differs (it was rewritten, or replaced, under the reader).
#[derive(Debug)]
pub(crate) struct ObjectChanged(pub String);

impl std::fmt::Display for ObjectChanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ObjectChanged {}

fn changed(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, ObjectChanged(msg))
}

fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "remote locations are read-only here (tables are written locally and uploaded whole)",
    )
}

/// What this location has learned about its objects: listings, small
/// objects fetched at open, and objects known to be absent.
#[derive(Default)]
struct Known {
    objects: HashMap<String, Seen>,
    /// Key prefixes (ending in `/`, or empty for everything) whose objects
    /// are all in `objects`.
    covered: Vec<String>,
    bodies: HashMap<String, Bytes>,
    /// The version each fetched body is (what a conditional update of the
    /// object names): a table's `manifest.json` fetched at open, say.
    updates: HashMap<String, UpdateVersion>,
    /// The last bytes of larger objects fetched at open (a column file's
    /// footer): where they start, and the bytes.
    tails: HashMap<String, (u64, Bytes)>,
    absent: HashSet<String>,
}

impl Known {
    fn is_covered(&self, key: &str) -> bool {
        self.covered.iter().any(|c| key.starts_with(c.as_str()))
    }
}

/// A remote location: a client for its root and what is known of it.
pub(crate) struct Remote {
    client: Client,
    known: Mutex<Known>,
    cache: Option<Arc<BlockCache>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.client.config.uri().display())
    }
}

/// Failed requests (a body cut short, a connection reset) a ranged read
/// survives; the last one's error is the read's.
const BODY_TRIES: u32 = 4;

/// The base of [`retry::backoff`] before a read tries again after such a
/// failure.
const BODY_BACKOFF: Duration = Duration::from_millis(50);

impl Remote {
    /// The location `uri` with `options` (checked here: a bad key is an
    /// `InvalidValue` naming it) and an optional block cache.
    pub(crate) fn new(
        uri: RemoteUri,
        options: &[(String, String)],
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Remote> {
        Ok(Remote {
            client: Client::new(ClientConfig::new(uri, options)?),
            known: Mutex::new(Known::default()),
            cache,
        })
    }

    /// This location again, with its options but nothing learned of it (no
    /// listings, bodies or cache).
    pub(crate) fn fresh(&self) -> Remote {
        Remote {
            client: Client::new(self.client.config.clone()),
            known: Mutex::new(Known::default()),
            cache: None,
        }
    }

    pub(crate) fn uri(&self) -> &RemoteUri {
        self.client.config.uri()
    }

    /// Whether objects can be written here (not over plain http(s)).
    pub(crate) fn writable(&self) -> bool {
        self.uri().scheme != uri::Scheme::Http
    }

    /// The display path (the URI) of `key`.
    pub(crate) fn path_of(&self, key: &str) -> PathBuf {
        let root = &self.uri().root;
        if key.is_empty() {
            PathBuf::from(root)
        } else {
            PathBuf::from(format!("{root}/{key}"))
        }
    }

    /// The key of the display path `path` (a URI below this root).
    pub(crate) fn key_of(&self, path: &Path) -> io::Result<String> {
        let s = path.to_str().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "a remote path must be UTF-8")
        })?;
        let root = &self.uri().root;
        let rest = s.strip_prefix(root.as_str()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{s} is not below {root}"),
            )
        })?;
        Ok(rest
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect::<Vec<_>>()
            .join("/"))
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store(&self) -> io::Result<Arc<dyn ObjectStore>> {
        self.client.get()
    }

    /// The client as a store of multipart uploads by id, where the service
    /// has them (not HTTP).
    fn multipart(&self) -> io::Result<Option<Arc<dyn object_store::multipart::MultipartStore>>> {
        self.client.multipart()
    }

    /// An `io::Error` for a failed request about `key`: its kind from the
    /// error (see [`client::error_kind`]), its message naming the object
    /// and never a credential.
    pub(crate) fn error(&self, key: &str, what: &str, e: object_store::Error) -> io::Error {
        if let object_store::Error::Precondition { .. } = e {
            return changed(format!(
                "{} changed while open (its ETag no longer matches the version this handle pinned)",
                self.path_of(key).display()
            ));
        }
        let kind = client::error_kind(&e);
        let detail = self.client.config.secrets.scrub(&e.to_string());
        io::Error::new(
            kind,
            format!(
                "{what} {}: {} ({detail})",
                self.path_of(key).display(),
                client::describe(kind)
            ),
        )
    }

    /// Runs `fut` on the process's I/O runtime.
    pub(crate) fn block_on<F>(&self, fut: F) -> io::Result<F::Output>
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        Ok(runtime::io()?.block_on(fut))
    }

    /// Lists every object below `prefix` (a key; empty for the root) in one
    /// paginated listing and remembers them all.
    pub(crate) fn list_prefix(&self, prefix: &str) -> io::Result<()> {
        let store = self.store()?;
        let dir = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        if self.known().is_covered(&dir) {
            return Ok(());
        }
        let p = (!prefix.is_empty()).then(|| Key::from(prefix));
        let listed: Vec<object_store::ObjectMeta> = self
            .block_on(async { store.list(p.as_ref()).try_collect().await })?
            .map_err(|e| self.error(prefix, "listing", e))?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        let mut known = self.known();
        for m in listed {
            known
                .objects
                .insert(m.location.as_ref().to_owned(), Seen::of(&m));
        }
        known.covered.push(dir);
        Ok(())
    }

    /// Lists several prefixes concurrently (a sharded table's shards).
    pub(crate) fn list_prefixes(&self, prefixes: &[String]) -> io::Result<()> {
        let store = self.store()?;
        let todo: Vec<String> = {
            let known = self.known();
            prefixes
                .iter()
                .filter(|p| !known.is_covered(&format!("{p}/")))
                .cloned()
                .collect()
        };
        let io = runtime::io()?;
        let futs: Vec<_> = todo
            .into_iter()
            .map(|p| {
                let store = store.clone();
                async move {
                    let key = Key::from(p.as_str());
                    let r: object_store::Result<Vec<object_store::ObjectMeta>> =
                        store.list(Some(&key)).try_collect().await;
                    (p, r)
                }
            })
            .collect();
        let results = io.all(futs);
        let mut known = self.known();
        for (p, r) in results {
            let p = p.as_str();
            fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
            let listed = r.map_err(|e| self.error(p, "listing", e))?;
            for m in listed {
                known
                    .objects
                    .insert(m.location.as_ref().to_owned(), Seen::of(&m));
            }
            known.covered.push(format!("{p}/"));
        }
        Ok(())
    }

    /// Records objects and their sizes that a manifest lists, as if listed
    /// (`prefix` is then covered: nothing else is below it).
    pub(crate) fn assume_listed(&self, prefix: &str, objects: &[(String, u64)]) {
        let mut known = self.known();
        for (key, size) in objects {
            known
                .objects
                .entry(key.clone())
                .or_insert(Seen::sized(*size));
        }
        known.covered.push(format!("{prefix}/"));
    }

    /// Takes `bytes` as the whole object `key` (a pinned manifest): reads
    /// of it are served from memory.
    pub(crate) fn pin_body(&self, key: &str, bytes: &[u8]) {
        let mut known = self.known();
        known
            .objects
            .insert(key.to_owned(), Seen::sized(bytes.len() as u64));
        known
            .bodies
            .insert(key.to_owned(), Bytes::copy_from_slice(bytes));
        known.updates.remove(key);
    }

    /// The whole object `key`, if it was fetched by [`Remote::prefetch`].
    pub(crate) fn body(&self, key: &str) -> Option<Bytes> {
        self.known().bodies.get(key).cloned()
    }

    /// [`Remote::body`] with the version of the object it is, when the
    /// server named one (an entity tag or a generation): what a
    /// conditional update of `key` from these bytes sends.
    pub(crate) fn versioned_body(&self, key: &str) -> Option<(Bytes, UpdateVersion)> {
        let known = self.known();
        let update = known.updates.get(key)?;
        Some((known.bodies.get(key)?.clone(), update.clone()))
    }

    /// Whether `key` is an object this location knows of (from a listing).
    pub(crate) fn knows(&self, key: &str) -> bool {
        self.known().objects.contains_key(key)
    }

    /// The keys of known objects below `prefix/`.
    pub(crate) fn known_keys(&self, prefix: &str) -> Vec<String> {
        let dir = format!("{prefix}/");
        let mut keys: Vec<String> = self
            .known()
            .objects
            .keys()
            .filter(|k| prefix.is_empty() || k.starts_with(&dir))
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Fetches the whole objects `keys` concurrently and keeps them, so
    /// opening reads them from memory. Keys a listing says are absent cost
    /// nothing; a missing one is remembered as absent.
    pub(crate) fn prefetch(&self, keys: &[String]) -> io::Result<()> {
        let keys: Vec<(String, Option<u64>)> = keys.iter().map(|k| (k.clone(), None)).collect();
        self.prefetch_parts(&keys)
    }

    /// [`Remote::prefetch`] of whole objects (`None`) and of the last `n`
    /// bytes of others (`Some(n)`: the whole object when it is no larger,
    /// else one ranged request of an object whose size is known), all in
    /// one concurrent round. Reads of a tail's range are then served from
    /// memory.
    pub(crate) fn prefetch_parts(&self, keys: &[(String, Option<u64>)]) -> io::Result<()> {
        let store = self.store()?;
        let todo: Vec<(String, Option<Seen>, Option<u64>)> = {
            let known = self.known();
            keys.iter()
                .filter(|(k, _)| {
                    !known.bodies.contains_key(k)
                        && !known.tails.contains_key(k)
                        && !known.absent.contains(k)
                })
                .filter(|(k, _)| known.objects.contains_key(k) || !known.is_covered(k))
                .map(|(k, n)| {
                    let seen = known.objects.get(k).cloned();
                    // A tail of an object whose size is unknown, or that
                    // covers it whole, is the whole object.
                    let start = match (n, &seen) {
                        (Some(n), Some(seen)) if seen.size > *n => Some(seen.size - n),
                        _ => None,
                    };
                    (k.clone(), seen, start)
                })
                .collect()
        };
        if todo.is_empty() {
            return Ok(());
        }
        let io = runtime::io()?;
        let futs: Vec<_> = todo
            .into_iter()
            .map(|(k, listed, start)| {
                let store = store.clone();
                let size = listed.as_ref().map(|l| l.size);
                async move {
                    let listed = listed.map(|l| Pin::new(&l));
                    let opts = GetOptions {
                        if_match: listed.as_ref().and_then(Pin::if_match),
                        range: match (start, size) {
                            (Some(from), Some(end)) => {
                                Some(object_store::GetRange::Bounded(from..end))
                            }
                            _ => None,
                        },
                        ..Default::default()
                    };
                    let r = match store.get_opts(&Key::from(k.as_str()), opts).await {
                        Ok(res) => {
                            let meta = res.meta.clone();
                            res.bytes().await.map(|b| (meta, b))
                        }
                        Err(e) => Err(e),
                    };
                    (k, listed, start, r)
                }
            })
            .collect();
        let results = io.all(futs);
        let mut known = self.known();
        for (k, listed, start, r) in results {
            let k = &k;
            fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok((meta, body)) => {
                    fetch::stats()
                        .bytes
                        .fetch_add(body.len() as u64, Ordering::Relaxed);
                    let seen = Seen {
                        size: match start {
                            Some(_) => meta.size,
                            None => body.len() as u64,
                        },
                        ..Seen::of(&meta)
                    };
                    if let Some(Err(d)) = listed.as_ref().map(|l| l.check(&seen)) {
                        drop(known);
                        return Err(changed(version::describe(&self.path_of(k), &d)));
                    }
                    if let Some(from) = start {
                        if from + body.len() as u64 != seen.size {
                            drop(known);
                            return Err(changed(format!(
                                "{}: a read of its last {} bytes returned {}",
                                self.path_of(k).display(),
                                seen.size - from,
                                body.len()
                            )));
                        }
                        known.objects.insert(k.clone(), seen);
                        known.tails.insert(k.clone(), (from, body));
                        continue;
                    }
                    known.objects.insert(k.clone(), seen);
                    known.bodies.insert(k.clone(), body);
                    if meta.e_tag.is_some() || meta.version.is_some() {
                        known.updates.insert(
                            k.clone(),
                            UpdateVersion {
                                e_tag: meta.e_tag,
                                version: meta.version,
                            },
                        );
                    }
                }
                Err(object_store::Error::NotFound { .. }) => {
                    known.absent.insert(k.clone());
                }
                Err(e) => {
                    drop(known);
                    return Err(self.error(k, "reading", e));
                }
            }
        }
        Ok(())
    }

    /// Size and version of `key`: known, or asked for with one HEAD.
    fn meta(&self, key: &str) -> io::Result<Seen> {
        {
            let known = self.known();
            if let Some(m) = known.objects.get(key) {
                return Ok(m.clone());
            }
            if known.absent.contains(key) || known.is_covered(key) {
                return Err(self.not_found(key));
            }
        }
        let store = self.store()?;
        let k = Key::from(key);
        let head = self.block_on(async {
            store
                .get_opts(
                    &k,
                    GetOptions {
                        head: true,
                        ..Default::default()
                    },
                )
                .await
        })?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        match head {
            Ok(res) => {
                let m = Seen::of(&res.meta);
                self.known().objects.insert(key.to_owned(), m.clone());
                Ok(m)
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.known().absent.insert(key.to_owned());
                Err(self.not_found(key))
            }
            Err(e) => Err(self.error(key, "reading", e)),
        }
    }

    fn not_found(&self, key: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: no such object", self.path_of(key).display()),
        )
    }

    /// Opens the object `key` (read-only).
    fn open_key(&self, key: &str) -> io::Result<RemoteFile> {
        let meta = self.meta(key)?;
        let (body, tail) = {
            let known = self.known();
            (
                known.bodies.get(key).cloned(),
                known.tails.get(key).cloned(),
            )
        };
        let store = self.store()?;
        Ok(RemoteFile(Arc::new(Object {
            store,
            path: self.path_of(key),
            key: Key::from(key),
            pin: Pin::new(&meta),
            body,
            tail,
            cache: self.cache.clone(),
            secrets: self.client.config.secrets.clone(),
            reads: self.client.config.reads,
        })))
    }
}

impl Storage for Remote {
    type File = RemoteFile;

    fn open(&self, path: &Path, writable: bool) -> io::Result<RemoteFile> {
        if writable {
            return Err(read_only());
        }
        self.open_key(&self.key_of(path)?)
    }

    fn create(&self, _: &Path, _: bool) -> io::Result<RemoteFile> {
        Err(read_only())
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let key = self.key_of(path)?;
        if let Some(b) = self.known().bodies.get(&key) {
            return Ok(b.to_vec());
        }
        let file = self.open_key(&key)?;
        let mut out = vec![0u8; file.0.pin.size as usize];
        file.read_exact_at(&mut out, 0)?;
        Ok(out)
    }

    fn create_dir_all(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn remove(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn rename_noreplace(&self, _: &Path, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn sync_dir(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        let key = self.key_of(path)?;
        let dir = if key.is_empty() {
            String::new()
        } else {
            format!("{key}/")
        };
        {
            let known = self.known();
            if known.objects.contains_key(&key) {
                return Ok(Some(EntryKind::File));
            }
            if known.objects.keys().any(|k| k.starts_with(&dir)) {
                return Ok(Some(EntryKind::Dir));
            }
            if known.is_covered(&key) || known.is_covered(&dir) {
                return Ok(None);
            }
        }
        // One delimited listing says whether anything is below `key`.
        let store = self.store()?;
        let prefix = (!key.is_empty()).then(|| Key::from(key.as_str()));
        let listed = self.block_on(async { store.list_with_delimiter(prefix.as_ref()).await })?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        let listed = listed.map_err(|e| self.error(&key, "listing", e))?;
        if !listed.objects.is_empty() || !listed.common_prefixes.is_empty() {
            return Ok(Some(EntryKind::Dir));
        }
        match self.meta(&key) {
            Ok(_) => Ok(Some(EntryKind::File)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        let key = self.key_of(dir)?;
        let prefix = if key.is_empty() {
            String::new()
        } else {
            format!("{key}/")
        };
        let from_known = |known: &Known| {
            let mut names: Vec<OsString> = known
                .objects
                .keys()
                .filter_map(|k| k.strip_prefix(prefix.as_str()))
                .filter_map(|rest| rest.split('/').next())
                .filter(|n| !n.is_empty())
                .map(OsString::from)
                .collect();
            names.sort();
            names.dedup();
            names
        };
        {
            let known = self.known();
            if known.is_covered(&prefix) {
                return Ok(from_known(&known));
            }
        }
        let store = self.store()?;
        let p = (!key.is_empty()).then(|| Key::from(key.as_str()));
        let listed = self.block_on(async { store.list_with_delimiter(p.as_ref()).await })?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        let listed = listed.map_err(|e| self.error(&key, "listing", e))?;
        let mut names = Vec::new();
        for c in &listed.common_prefixes {
            if let Some(n) = c.filename() {
                names.push(OsString::from(n));
            }
        }
        let mut known = self.known();
        for m in listed.objects {
            if let Some(n) = m.location.filename() {
                names.push(OsString::from(n));
            }
            known
                .objects
                .insert(m.location.as_ref().to_owned(), Seen::of(&m));
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn create_dir(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn remove_dir(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn remove_dir_all(&self, _: &Path) -> io::Result<()> {
        Err(read_only())
    }

    fn rename(&self, _: &Path, _: &Path) -> io::Result<()> {
        Err(read_only())
    }
}

/// The engine error of an I/O failure at `path`: a remote object that
/// changed under an open handle is [`Error::Corrupted`], the rest
/// [`Error::Io`].
/// The object key of `rel` below the key prefix `base` (either may be
/// empty): the one way a bucket key is joined.
pub(crate) fn join_key(base: &str, rel: &str) -> String {
    if base.is_empty() || rel.is_empty() {
        format!("{base}{rel}")
    } else {
        format!("{base}/{rel}")
    }
}

pub(crate) fn to_error(path: &Path, e: io::Error) -> Error {
    if let Some(c) = e.get_ref().and_then(|i| i.downcast_ref::<ObjectChanged>()) {
        return Error::corrupted(path, c.0.clone());
    }
    Error::io(path, e)
}

/// Counters of remote reads in this process: requests, bytes fetched,
/// duplicates of stalled requests (hedges), cache hits and misses
/// (blocks), retries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteStats {
    pub requests: u64,
    /// Of `requests`, the duplicates of a range that had not answered.
    pub hedges: u64,
    pub bytes: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub retries: u64,
}

/// This process's [`RemoteStats`] so far.
pub fn remote_stats() -> RemoteStats {
    let s = fetch::stats();
    RemoteStats {
        requests: s.requests.load(Ordering::Relaxed),
        hedges: s.hedges.load(Ordering::Relaxed),
        bytes: s.bytes.load(Ordering::Relaxed),
        cache_hits: s.cache_hits.load(Ordering::Relaxed),
        cache_misses: s.cache_misses.load(Ordering::Relaxed),
        retries: s.retries.load(Ordering::Relaxed),
    }
}

/// Builds the [`Result`] of a remote setup step.
pub(crate) fn setup<T>(path: &Path, r: io::Result<T>) -> Result<T> {
    r.map_err(|e| to_error(path, e))
}
