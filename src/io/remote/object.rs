//! One remote object ([`RemoteFile`]), pinned at the size and ETag it had
//! when first seen, and [`fetch_many`], which reads the byte ranges of
//! several objects (a gather's shards) in one concurrent round of planned
//! requests, or through the block cache.

use std::fs::TryLockError;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path as Key;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::{
    backoff, cache, changed, client, fetch, read_only, runtime, BlockCache, Runs, BODY_TRIES,
};
use crate::io::StorageFile;

/// One remote object, pinned at its size and ETag.
pub(crate) struct Object {
    pub(super) store: Arc<dyn ObjectStore>,
    /// Its URI, as messages name it.
    pub(super) path: PathBuf,
    pub(super) key: Key,
    pub(super) size: u64,
    /// The version every read must return: from the listing, or the first
    /// response when the listing gave none.
    pub(super) etag: OnceLock<String>,
    /// The whole object, when it was fetched at open (meta.zr, dict.zr).
    pub(super) body: Option<Bytes>,
    pub(super) cache: Option<Arc<BlockCache>>,
    pub(super) secrets: client::Secrets,
}

/// An open remote object (cheap to clone).
#[derive(Clone)]
pub(crate) struct RemoteFile(pub(super) Arc<Object>);

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RemoteFile({}, {} bytes)",
            self.0.path.display(),
            self.0.size
        )
    }
}

impl Object {
    fn error(&self, what: &str, e: object_store::Error) -> io::Error {
        if let object_store::Error::Precondition { .. } = e {
            return changed(format!(
                "{} changed while open (its ETag no longer matches the version this handle pinned)",
                self.path.display()
            ));
        }
        let kind = client::error_kind(&e);
        io::Error::new(
            kind,
            format!(
                "{what} {}: {} ({})",
                self.path.display(),
                client::describe(kind),
                self.secrets.scrub(&e.to_string())
            ),
        )
    }

    /// Checks a response's object against the pinned version (pinning its
    /// ETag if none was known).
    fn check_version(&self, meta: &object_store::ObjectMeta) -> io::Result<()> {
        if meta.size != self.size {
            return Err(changed(format!(
                "{} changed while open: it is {} bytes now, {} when opened",
                self.path.display(),
                meta.size,
                self.size
            )));
        }
        if let Some(got) = &meta.e_tag {
            let pinned = self.etag.get_or_init(|| got.clone());
            if pinned != got {
                return Err(changed(format!(
                    "{} changed while open (its ETag is no longer the one pinned at open)",
                    self.path.display()
                )));
            }
        }
        Ok(())
    }

    /// The bytes `range` of this version of the object, retried (with
    /// backoff and jitter) when the body comes back short or breaks off.
    async fn get_range(&self, range: Range<u64>) -> io::Result<Bytes> {
        let want = range.end - range.start;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let opts = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                if_match: self.etag.get().cloned(),
                ..Default::default()
            };
            fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
            let failure = match self.store.get_opts(&self.key, opts).await {
                Ok(res) => {
                    self.check_version(&res.meta)?;
                    match res.bytes().await {
                        Ok(b) if b.len() as u64 == want => {
                            fetch::stats().bytes.fetch_add(want, Ordering::Relaxed);
                            return Ok(b);
                        }
                        Ok(b) => io::Error::new(
                            io::ErrorKind::ConnectionReset,
                            format!(
                                "reading {} bytes {}..{}: the server sent {} of {want} bytes (retries exhausted)",
                                self.path.display(),
                                range.start,
                                range.end,
                                b.len()
                            ),
                        ),
                        Err(e) => self.error("reading", e),
                    }
                }
                Err(e) => return Err(self.error("reading", e)),
            };
            let transient = matches!(
                failure.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::UnexpectedEof
            );
            if !transient || attempt >= BODY_TRIES {
                return Err(failure);
            }
            fetch::stats().retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff(attempt)).await;
        }
    }
}

impl RemoteFile {
    pub(crate) fn size(&self) -> u64 {
        self.0.size
    }

    /// The pinned ETag, asking the server once if none is known yet.
    pub(crate) fn etag(&self) -> io::Result<Option<String>> {
        if let Some(e) = self.0.etag.get() {
            return Ok(Some(e.clone()));
        }
        let head = runtime::io()?.block_on(async {
            self.0
                .store
                .get_opts(
                    &self.0.key,
                    GetOptions {
                        head: true,
                        ..Default::default()
                    },
                )
                .await
        });
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        let res = head.map_err(|e| self.0.error("reading", e))?;
        self.0.check_version(&res.meta)?;
        Ok(self.0.etag.get().cloned())
    }

    /// Fetches the byte ranges `ranges` of the object (any order; every
    /// range within the object) as [`Runs`]: through the block cache when
    /// the location has one, else as planned concurrent range requests.
    pub(crate) fn fetch(&self, ranges: &[Range<u64>]) -> io::Result<Runs> {
        let mut runs = fetch_many(&[(self, ranges)]).map_err(|(_, e)| e)?;
        Ok(runs.pop().unwrap_or_default())
    }

    /// The bytes `range` in one request (a cache block another process
    /// failed to fetch).
    pub(crate) fn fetch_block(&self, range: Range<u64>) -> io::Result<Bytes> {
        let obj = self.0.clone();
        runtime::io()?.block_on(async move { obj.get_range(range).await })
    }

    pub(crate) fn cache_key(&self) -> io::Result<String> {
        Ok(format!(
            "{}\n{}\n{}",
            self.0.path.display(),
            self.0.size,
            self.etag()?.unwrap_or_default()
        ))
    }
}

impl StorageFile for RemoteFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.size)
    }

    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        let end = at
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.0.size);
        let Some(end) = end else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: read past the end of the object", self.0.path.display()),
            ));
        };
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(body) = &self.0.body {
            buf.copy_from_slice(&body[at as usize..end as usize]);
            return Ok(());
        }
        let runs = self.fetch(std::slice::from_ref(&(at..end)))?;
        let bytes = runs
            .slice(at, buf.len())
            .ok_or_else(|| io::Error::other("a fetch did not cover its range"))?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    unsafe fn map(&self, _len: usize) -> Option<memmap2::Mmap> {
        None
    }

    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn sync_data(&self) -> io::Result<()> {
        Err(read_only())
    }

    fn sync_all(&self) -> io::Result<()> {
        Err(read_only())
    }

    fn try_lock(&self, shared: bool) -> std::result::Result<(), TryLockError> {
        // Readers of an object store need no lock; nothing here writes.
        if shared {
            Ok(())
        } else {
            Err(TryLockError::Error(read_only()))
        }
    }

    fn lock(&self) -> io::Result<()> {
        Err(read_only())
    }

    fn unlock(&self) -> io::Result<()> {
        Ok(())
    }
}

/// How one object's ranges are read by [`fetch_many`].
enum Plan {
    Ready(Runs),
    Direct {
        merged: Vec<Range<u64>>,
        groups: Vec<usize>,
    },
    Cached(cache::Pending),
}

/// Fetches the byte ranges of several objects (a gather's stores: the
/// shards of a column) in one concurrent round of requests; each object's
/// bytes as [`Runs`], in the order of `jobs`. On failure, the job whose
/// object failed and the error.
pub(crate) fn fetch_many(
    jobs: &[(&RemoteFile, &[Range<u64>])],
) -> std::result::Result<Vec<Runs>, (usize, io::Error)> {
    let mut plans = Vec::with_capacity(jobs.len());
    // (job, range) of every request, in the order they are fetched.
    let mut requests: Vec<(usize, Range<u64>)> = Vec::new();
    for (j, (file, ranges)) in jobs.iter().enumerate() {
        let obj = &file.0;
        if let Some(body) = &obj.body {
            plans.push(Plan::Ready(Runs::new(vec![(0, body.clone())])));
            continue;
        }
        if let Some(r) = ranges.iter().find(|r| r.end > obj.size) {
            let e = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: bytes {}..{} lie past the end of the object ({} bytes)",
                    obj.path.display(),
                    r.start,
                    r.end,
                    obj.size
                ),
            );
            return Err((j, e));
        }
        if let Some(cache) = &obj.cache {
            let pending = cache.plan(file, ranges).map_err(|e| (j, e))?;
            requests.extend(pending.requests.iter().map(|r| (j, r.clone())));
            plans.push(Plan::Cached(pending));
        } else {
            let split = fetch::split_for(ranges, runtime::max_requests_now());
            let (merged, reqs) = fetch::plan(ranges, fetch::GAP, split);
            requests.extend(reqs.iter().map(|r| (j, r.range.clone())));
            plans.push(Plan::Direct {
                merged,
                groups: reqs.iter().map(|r| r.group).collect(),
            });
        }
    }
    let mut fetched: Vec<Vec<Bytes>> = vec![Vec::new(); jobs.len()];
    if !requests.is_empty() {
        let io = runtime::io().map_err(|e| (0, e))?;
        let futs: Vec<_> = requests
            .into_iter()
            .map(|(j, r)| {
                let obj = jobs[j].0 .0.clone();
                let permits = io.permits.clone();
                async move {
                    let got = match permits.acquire_owned().await {
                        Ok(_permit) => obj.get_range(r).await,
                        Err(_) => Err(io::Error::other("the request limiter closed")),
                    };
                    (j, got)
                }
            })
            .collect();
        let results: Vec<(usize, io::Result<Bytes>)> = io.block_on(
            futures::stream::iter(futs)
                .buffered(io.max_requests)
                .collect::<Vec<_>>(),
        );
        for (j, r) in results {
            fetched[j].push(r.map_err(|e| (j, e))?);
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for ((j, plan), parts) in plans.into_iter().enumerate().zip(fetched) {
        out.push(match plan {
            Plan::Ready(runs) => runs,
            Plan::Direct { merged, groups } => {
                let mut joined: Vec<Vec<Bytes>> = vec![Vec::new(); merged.len()];
                for (g, b) in groups.into_iter().zip(parts) {
                    joined[g].push(b);
                }
                Runs::new(
                    merged
                        .iter()
                        .zip(joined)
                        .map(|(m, p)| (m.start, fetch::join(p)))
                        .collect(),
                )
            }
            Plan::Cached(pending) => match &jobs[j].0 .0.cache {
                Some(cache) => {
                    let file = jobs[j].0;
                    cache
                        .finish(pending, parts, |r| file.fetch_block(r))
                        .map_err(|e| (j, e))?
                }
                None => Runs::default(),
            },
        });
    }
    Ok(out)
}
