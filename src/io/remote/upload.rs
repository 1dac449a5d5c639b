//! Writing to object stores: whole objects (conditional where a commit
//! needs it), and concurrent transfers of many files between any two
//! places, local or remote, with multipart uploads for large objects (each
//! checked for its size once assembled).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as Key;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
    WriteMultipart,
};

use super::{fetch, runtime, Remote};

/// Objects up to this size are written with one request (at most
/// [`OBJECTS_IN_FLIGHT`] of them in memory at once: 512 MiB, no more than
/// the parts of multipart uploads in flight may hold).
pub(crate) const SINGLE: u64 = 32 << 20;
/// Larger objects go up as a multipart upload of parts of this size.
pub(crate) const PART: u64 = 16 << 20;
/// Objects transferred at once by [`transfer`].
const OBJECTS_IN_FLIGHT: usize = 16;

/// What a conditional write found.
#[derive(Debug)]
pub(crate) enum Put {
    /// Written: the version the object now is, as the server named it.
    Done(UpdateVersion),
    /// `PutMode::Create` and an object was there, or `PutMode::Update` and
    /// the object was no longer the version given.
    Conflict,
}

impl Remote {
    /// Writes `bytes` as the object `key` with `mode`.
    pub(crate) fn put(&self, key: &str, bytes: Bytes, mode: PutMode) -> io::Result<Put> {
        let store = self.store()?;
        let k = Key::from(key);
        let r = self.block_on(async {
            store
                .put_opts(
                    &k,
                    PutPayload::from(bytes),
                    PutOptions {
                        mode,
                        ..Default::default()
                    },
                )
                .await
        })?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(r) => Ok(Put::Done(UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            })),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(Put::Conflict),
            Err(e) => Err(self.error(key, "writing", e)),
        }
    }

    /// The object `key` and the version to update it from, None when there
    /// is none.
    pub(crate) fn get_versioned(&self, key: &str) -> io::Result<Option<(Bytes, UpdateVersion)>> {
        let store = self.store()?;
        let k = Key::from(key);
        let r = self.block_on(async {
            match store.get_opts(&k, GetOptions::default()).await {
                Ok(res) => {
                    let meta = res.meta.clone();
                    res.bytes().await.map(|b| Some((b, meta)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(Some((bytes, meta))) => Ok(Some((
                bytes,
                UpdateVersion {
                    e_tag: meta.e_tag,
                    version: meta.version,
                },
            ))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.error(key, "reading", e)),
        }
    }

    /// Deletes the objects `keys` (missing ones are fine).
    pub(crate) fn delete(&self, keys: &[String]) -> io::Result<()> {
        let store = self.store()?;
        let io = runtime::io()?;
        let futs: Vec<_> = keys
            .iter()
            .map(|k| {
                let store = store.clone();
                let k = k.clone();
                async move {
                    let r = store.delete(&Key::from(k.as_str())).await;
                    (k, r)
                }
            })
            .collect();
        let results: Vec<_> = io.block_on(
            futures::stream::iter(futs)
                .buffer_unordered(OBJECTS_IN_FLIGHT)
                .collect::<Vec<_>>(),
        );
        for (k, r) in results {
            match r {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error(&k, "deleting", e)),
            }
        }
        Ok(())
    }

    /// The objects below `prefix` (a key; empty for the root): key and
    /// size, sorted, listed afresh.
    pub(crate) fn list_objects(&self, prefix: &str) -> io::Result<Vec<(String, u64)>> {
        Ok(self
            .list_dated(prefix)?
            .into_iter()
            .map(|(k, size, _)| (k, size))
            .collect())
    }

    /// [`Remote::list_objects`] with each object's last modification
    /// (milliseconds since the epoch, the store's clock).
    pub(crate) fn list_dated(&self, prefix: &str) -> io::Result<Vec<(String, u64, i64)>> {
        let store = self.store()?;
        let p = (!prefix.is_empty()).then(|| Key::from(prefix));
        let listed: Vec<object_store::ObjectMeta> = self
            .block_on(async {
                use futures::TryStreamExt;
                store.list(p.as_ref()).try_collect().await
            })?
            .map_err(|e| self.error(prefix, "listing", e))?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        let mut out: Vec<(String, u64, i64)> = listed
            .into_iter()
            .map(|m| {
                let modified = m.last_modified.timestamp_millis();
                (m.location.as_ref().to_owned(), m.size, modified)
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// One end of a transfer.
#[derive(Clone, Debug)]
pub(crate) enum Place {
    Local(PathBuf),
    Remote(Arc<Remote>, String),
}

impl Place {
    fn name(&self) -> String {
        match self {
            Place::Local(p) => p.display().to_string(),
            Place::Remote(r, k) => r.path_of(k).display().to_string(),
        }
    }
}

/// One object to copy: from, to, and its size.
#[derive(Clone, Debug)]
pub(crate) struct Transfer {
    pub from: Place,
    pub to: Place,
    pub size: u64,
}

/// Reads `range` of `place` (blocking for a local file).
async fn read_part(
    place: &Place,
    store: Option<&Arc<dyn ObjectStore>>,
    range: Range<u64>,
) -> io::Result<Bytes> {
    match (place, store) {
        (Place::Local(path), _) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let mut f = File::open(&path)?;
                f.seek(SeekFrom::Start(range.start))?;
                let mut buf = vec![0u8; (range.end - range.start) as usize];
                f.read_exact(&mut buf).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "{}: {e} (the file changed during the copy?)",
                            path.display()
                        ),
                    )
                })?;
                Ok(Bytes::from(buf))
            })
            .await
            .map_err(io::Error::other)?
        }
        (Place::Remote(remote, key), Some(store)) => {
            let opts = GetOptions {
                range: Some(object_store::GetRange::Bounded(range.clone())),
                ..Default::default()
            };
            fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
            let res = store
                .get_opts(&Key::from(key.as_str()), opts)
                .await
                .map_err(|e| remote.error(key, "reading", e))?;
            let bytes = res
                .bytes()
                .await
                .map_err(|e| remote.error(key, "reading", e))?;
            if bytes.len() as u64 != range.end - range.start {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "reading {}: got {} of {} bytes (the object changed during the copy?)",
                        remote.path_of(key).display(),
                        bytes.len(),
                        range.end - range.start
                    ),
                ));
            }
            Ok(bytes)
        }
        (Place::Remote(..), None) => Err(io::Error::other("no client for a remote source")),
    }
}

/// A multipart object is checked for its size once assembled (a single
/// request's length is the server's to check).
async fn check_size(
    t: &Transfer,
    remote: &Remote,
    key: &str,
    store: &Arc<dyn ObjectStore>,
) -> io::Result<()> {
    let head = store
        .head(&Key::from(key))
        .await
        .map_err(|e| remote.error(key, "checking", e))?;
    fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
    if head.size != t.size {
        return Err(io::Error::other(format!(
            "{}: the store holds {} bytes after the upload, expected {}",
            remote.path_of(key).display(),
            head.size,
            t.size
        )));
    }
    Ok(())
}

/// What a writer records of its multipart uploads while they are open, so
/// that a cleanup can abort those it left when it was killed (an open
/// upload's parts are stored, and billed, until it is completed or
/// aborted): `(key, id, true)` once the upload is made and before its
/// first part (an error aborts the upload), `(key, id, false)` once it is
/// completed or aborted.
pub(crate) type Journal<'a> = dyn Fn(&str, &str, bool) -> io::Result<()> + Sync + 'a;

/// Parts of one object uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;

/// Uploads `t` (to the object `key` of `remote`) as a multipart upload
/// by id, recorded in `journal` (if any) while it is open.
async fn upload_by_id(
    t: &Transfer,
    src_store: Option<&Arc<dyn ObjectStore>>,
    (remote, key): (&Remote, &str),
    by_id: Arc<dyn MultipartStore>,
    parts: Vec<Range<u64>>,
    journal: Option<&Journal<'_>>,
    progress: &(dyn Fn(u64) -> io::Result<()> + Sync),
) -> io::Result<()> {
    let journal = |open: bool, id: &str| journal.map_or(Ok(()), |j| j(key, id, open));
    let k = Key::from(key);
    let id = by_id
        .create_multipart(&k)
        .await
        .map_err(|e| remote.error(key, "writing", e))?;
    fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = journal(true, &id) {
        let _ = by_id.abort_multipart(&k, &id).await;
        return Err(e);
    }
    let sent = async {
        let (k, id, by_id) = (&k, &id, &by_id);
        let sends = parts.into_iter().enumerate().map(|(i, r)| async move {
            let n = r.end - r.start;
            let bytes = read_part(&t.from, src_store, r).await?;
            let part = by_id
                .put_part(k, id, i, PutPayload::from(bytes))
                .await
                .map_err(|e| remote.error(key, "writing", e))?;
            fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
            progress(n)?;
            Ok::<_, io::Error>(part)
        });
        let done: Vec<PartId> = futures::stream::iter(sends)
            .buffered(PARTS_IN_FLIGHT)
            .try_collect()
            .await?;
        by_id
            .complete_multipart(k, id, done)
            .await
            .map_err(|e| remote.error(key, "writing", e))?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        Ok::<_, io::Error>(())
    }
    .await;
    if sent.is_err() {
        let _ = by_id.abort_multipart(&k, &id).await;
    }
    // Closed: a completed upload's id aborts as no upload at all.
    let _ = journal(false, &id);
    sent
}

impl Remote {
    /// Aborts the multipart upload `id` of the object `key`, which a killed
    /// writer left open; done already when the service knows no such
    /// upload (completed or aborted since). Nothing to do for a service
    /// without uploads by id.
    pub(crate) fn abort_upload(&self, key: &str, id: &str) -> io::Result<()> {
        let Some(by_id) = self.multipart()? else {
            return Ok(());
        };
        let k = Key::from(key);
        let id = id.to_owned();
        let r = self.block_on(async { by_id.abort_multipart(&k, &id).await })?;
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(key, "aborting the upload of", e)),
        }
    }
}

/// An open multipart upload: its key and id.
pub(crate) type OpenUpload = (String, String);

impl Remote {
    /// The multipart uploads open below the key prefix `prefix` that the
    /// service says were created at least `min_age` ago; None where the
    /// service's uploads cannot be listed (only S3's can: `object_store`
    /// lists none, and loaderx lists S3's itself).
    pub(crate) fn open_uploads(
        &self,
        prefix: &str,
        min_age: std::time::Duration,
    ) -> io::Result<Option<Vec<OpenUpload>>> {
        #[cfg(feature = "aws")]
        if let Some(lister) = self.client.upload_lister()? {
            let listed = self
                .block_on(async { lister.list(prefix, min_age).await })?
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.uri().display())))?;
            fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
            return Ok(listed);
        }
        let _ = (prefix, min_age);
        Ok(None)
    }
}

/// Copies one object, part by part; returns the bytes written.
async fn copy_one(
    t: &Transfer,
    progress: &(dyn Fn(u64) -> io::Result<()> + Sync),
    journal: Option<&Journal<'_>>,
) -> io::Result<()> {
    let src_store = match &t.from {
        Place::Remote(r, _) => Some(r.store()?),
        Place::Local(_) => None,
    };
    let parts: Vec<Range<u64>> = (0..t.size.div_ceil(PART))
        .map(|i| i * PART..((i + 1) * PART).min(t.size))
        .collect();
    match &t.to {
        Place::Local(path) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = File::create(path)?;
            for r in parts {
                let n = r.end - r.start;
                let bytes = read_part(&t.from, src_store.as_ref(), r).await?;
                f.write_all(&bytes)?;
                progress(n)?;
            }
            f.sync_all()?;
            let got = f.metadata()?.len();
            if got != t.size {
                return Err(io::Error::other(format!(
                    "{}: wrote {got} bytes, expected {}",
                    path.display(),
                    t.size
                )));
            }
        }
        Place::Remote(remote, key) => {
            let store = remote.store()?;
            let k = Key::from(key.as_str());
            if t.size <= SINGLE {
                let bytes = match t.size {
                    0 => Bytes::new(),
                    n => read_part(&t.from, src_store.as_ref(), 0..n).await?,
                };
                fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
                store
                    .put_opts(&k, PutPayload::from(bytes), PutOptions::default())
                    .await
                    .map_err(|e| remote.error(key, "writing", e))?;
                progress(t.size)?;
            } else if let Some(by_id) = remote.multipart()? {
                upload_by_id(
                    t,
                    src_store.as_ref(),
                    (remote, key),
                    by_id,
                    parts,
                    journal,
                    progress,
                )
                .await?;
                check_size(t, remote, key, &store).await?;
            } else {
                // A service without uploads by id.
                let upload = store
                    .put_multipart_opts(&k, Default::default())
                    .await
                    .map_err(|e| remote.error(key, "writing", e))?;
                let mut w = WriteMultipart::new_with_chunk_size(upload, PART as usize);
                let written = async {
                    for r in parts {
                        let n = r.end - r.start;
                        w.wait_for_capacity(4)
                            .await
                            .map_err(|e| remote.error(key, "writing", e))?;
                        let bytes = read_part(&t.from, src_store.as_ref(), r).await?;
                        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
                        w.put(bytes);
                        progress(n)?;
                    }
                    Ok::<_, io::Error>(())
                }
                .await;
                match written {
                    Ok(()) => {
                        w.finish()
                            .await
                            .map_err(|e| remote.error(key, "writing", e))?;
                    }
                    Err(e) => {
                        let _ = w.abort().await;
                        return Err(e);
                    }
                }
                check_size(t, remote, key, &store).await?;
            }
        }
    }
    Ok(())
}

/// Copies every object of `transfers`, several at once, calling
/// `progress(bytes)` as bytes land (on the calling thread). The first
/// failure (or error from `progress`) stops the copy and is returned,
/// naming its object.
///
/// Large objects go up as multipart uploads by id where the service has
/// them, each recorded in `journal` (if any) while it is open.
pub(crate) fn transfer(
    transfers: &[Transfer],
    progress: &(dyn Fn(u64) -> io::Result<()> + Sync),
    journal: Option<&Journal<'_>>,
) -> io::Result<()> {
    if transfers.is_empty() {
        return Ok(());
    }
    let io = runtime::io()?;
    let futs: Vec<_> = transfers
        .iter()
        .map(|t| copy_named(t, progress, journal))
        .collect();
    io.block_on(async move {
        let mut stream = futures::stream::iter(futs).buffer_unordered(OBJECTS_IN_FLIGHT);
        while let Some(r) = stream.next().await {
            r?;
        }
        Ok(())
    })
}

/// [`copy_one`], its error naming both ends when it names neither.
async fn copy_named(
    t: &Transfer,
    progress: &(dyn Fn(u64) -> io::Result<()> + Sync),
    journal: Option<&Journal<'_>>,
) -> io::Result<()> {
    copy_one(t, progress, journal).await.map_err(|e| {
        let text = e.to_string();
        if text.contains(&t.from.name()) || text.contains(&t.to.name()) {
            e
        } else {
            io::Error::new(
                e.kind(),
                format!("copying {} to {}: {text}", t.from.name(), t.to.name()),
            )
        }
    })
}
