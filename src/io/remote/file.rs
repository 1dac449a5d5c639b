//! An open remote object ([`RemoteFile`]), and [`fetch_many`], which reads
//! the byte ranges of several objects (a gather's shards) in one concurrent
//! round of planned requests (each range read by [`hedge::read`]), or
//! through the block cache.

use std::fs::TryLockError;
use std::io;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::{GetOptions, ObjectStore};

use super::hedge;
use super::object::Object;
use super::{cache, fetch, read_only, runtime, Runs};
use crate::io::StorageFile;

/// An open remote object (cheap to clone).
#[derive(Clone)]
pub(crate) struct RemoteFile(pub(super) Arc<Object>);

impl std::fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RemoteFile({}, {} bytes)",
            self.0.path.display(),
            self.0.pin.size
        )
    }
}

impl RemoteFile {
    pub(crate) fn size(&self) -> u64 {
        self.0.pin.size
    }

    /// What identifies the pinned version (its entity tag, else its
    /// `Last-Modified`), asking the server once if neither is known yet.
    fn identity(&self) -> io::Result<String> {
        let id = self.0.pin.identity();
        if !id.is_empty() {
            return Ok(id);
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
        Ok(self.0.pin.identity())
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
        runtime::io()?.block_on(async move { hedge::read(&obj, range, &hedge::Round::new()).await })
    }

    pub(crate) fn cache_key(&self) -> io::Result<String> {
        Ok(format!(
            "{}\n{}\n{}",
            self.0.path.display(),
            self.0.pin.size,
            self.identity()?
        ))
    }
}

impl StorageFile for RemoteFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.pin.size)
    }

    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        let end = at
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.0.pin.size);
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
        if let Some((from, tail)) = &self.0.tail {
            if at >= *from {
                buf.copy_from_slice(&tail[(at - from) as usize..(end - from) as usize]);
                return Ok(());
            }
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

/// A live fetch under way (see [`fetch_live`]): the ids of the ranges
/// that have landed, as they land. Dropping it cancels the requests still
/// in flight.
pub(crate) struct Arrivals {
    /// Behind a mutex only so that a gather's decoding threads may share
    /// the handle: one thread waits on it.
    rx: std::sync::Mutex<std::sync::mpsc::Receiver<Landed>>,
    /// How many ranges the fetch lands in all.
    pub(crate) ranges: usize,
    task: Option<tokio::task::AbortHandle>,
}

/// What the fetch task reports: a range's id once its bytes are in its
/// slot, or the job whose object failed and the error (the last report).
type Landed = std::result::Result<usize, (usize, io::Error)>;

/// A live fetch: each job's runs, and what lands.
pub(crate) type Live = (Vec<Runs>, Arrivals);

impl Arrivals {
    /// Blocks until at least one more range lands, then appends the ids of
    /// every range landed since the last call to `out`. On failure, the job
    /// whose object failed and the error.
    pub(crate) fn next(&self, out: &mut Vec<usize>) -> std::result::Result<(), (usize, io::Error)> {
        let rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let first = rx.recv().map_err(|_| {
            (
                0,
                io::Error::other("the fetch ended before every range landed"),
            )
        })?;
        out.push(first?);
        while let Ok(more) = rx.try_recv() {
            out.push(more?);
        }
        Ok(())
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts fetching the byte ranges of several objects (as [`fetch_many`])
/// without waiting for them: each object's [`Runs`] serve a merged range's
/// bytes once it has landed, and [`Arrivals`] says which have, so a gather
/// decodes the records that are here while later requests are still in
/// flight. `None` when an object reads through the block cache (whose
/// bookkeeping needs every block at once): use [`fetch_many`] then.
pub(crate) fn fetch_live(
    jobs: &[(&RemoteFile, &[Range<u64>])],
) -> std::result::Result<Option<Live>, (usize, io::Error)> {
    if jobs
        .iter()
        .any(|(f, _)| f.0.cache.is_some() && f.0.body.is_none())
    {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(jobs.len());
    // Per range id: its job and its index in that job's landing; its parts.
    let mut owner: Vec<(usize, usize)> = Vec::new();
    let mut parts: Vec<usize> = Vec::new();
    let mut landings: Vec<Option<Arc<fetch::Landing>>> = Vec::with_capacity(jobs.len());
    // (range id, part, object, bytes) of every request.
    let mut requests: Vec<(usize, usize, Arc<Object>, Range<u64>)> = Vec::new();
    for (j, (file, ranges)) in jobs.iter().enumerate() {
        let obj = &file.0;
        if let Some(body) = &obj.body {
            out.push(Runs::new(vec![(0, body.clone())]));
            landings.push(None);
            continue;
        }
        check_within(obj, ranges).map_err(|e| (j, e))?;
        let split = fetch::split_for(ranges, runtime::max_requests_now());
        let (merged, reqs) = fetch::plan(ranges, fetch::GAP, split);
        let base = owner.len();
        owner.extend((0..merged.len()).map(|at| (j, at)));
        parts.resize(owner.len(), 0);
        for r in reqs {
            let id = base + r.group;
            requests.push((id, parts[id], obj.clone(), r.range));
            parts[id] += 1;
        }
        let landing = Arc::new(fetch::Landing::new(merged, base));
        out.push(Runs::landing(landing.clone()));
        landings.push(Some(landing));
    }
    let (tx, rx) = std::sync::mpsc::channel::<Landed>();
    let ranges = owner.len();
    let task = if requests.is_empty() {
        None
    } else {
        let io = runtime::io().map_err(|e| (0, e))?;
        let max = io.max_requests;
        let round = Arc::new(hedge::Round::new());
        Some(io.spawn(async move {
            let mut pieces: Vec<Vec<Option<Bytes>>> =
                parts.iter().map(|&n| vec![None; n]).collect();
            let mut left = parts;
            let mut done = futures::stream::iter(requests.into_iter().map(|(id, part, obj, r)| {
                let round = round.clone();
                async move { (id, part, hedge::read(&obj, r, &round).await) }
            }))
            .buffer_unordered(max);
            while let Some((id, part, got)) = done.next().await {
                let (j, at) = owner[id];
                let bytes = match got {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        let _ = tx.send(Err((j, e)));
                        return;
                    }
                };
                pieces[id][part] = Some(bytes);
                left[id] -= 1;
                if left[id] > 0 {
                    continue;
                }
                let whole = std::mem::take(&mut pieces[id]).into_iter().flatten();
                if let Some(landing) = &landings[j] {
                    landing.land(at, fetch::join(whole.collect()));
                }
                if tx.send(Ok(id)).is_err() {
                    return; // the gather is gone
                }
            }
        }))
    };
    let arrivals = Arrivals {
        rx: std::sync::Mutex::new(rx),
        ranges,
        task,
    };
    Ok(Some((out, arrivals)))
}

/// Fails naming the object when a range lies past its end.
fn check_within(obj: &Object, ranges: &[Range<u64>]) -> io::Result<()> {
    match ranges.iter().find(|r| r.end > obj.pin.size) {
        Some(r) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: bytes {}..{} lie past the end of the object ({} bytes)",
                obj.path.display(),
                r.start,
                r.end,
                obj.pin.size
            ),
        )),
        None => Ok(()),
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
        check_within(obj, ranges).map_err(|e| (j, e))?;
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
        let round = Arc::new(hedge::Round::new());
        let futs: Vec<_> = requests
            .into_iter()
            .map(|(j, r)| {
                let obj = jobs[j].0 .0.clone();
                let round = round.clone();
                async move {
                    hedge::read(&obj, r, &round)
                        .await
                        .map(|b| (j, b))
                        .map_err(|e| (j, e))
                }
            })
            .collect();
        // The first failure ends the round (dropping the requests still in
        // flight), so a stalled server fails a gather once, not once per
        // wave of permits.
        let results: Vec<(usize, Bytes)> = io.block_on(
            futures::stream::iter(futs)
                .buffered(io.max_requests)
                .try_collect::<Vec<_>>(),
        )?;
        for (j, b) in results {
            fetched[j].push(b);
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
