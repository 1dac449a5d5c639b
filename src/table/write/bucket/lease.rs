//! A bucket writer's lease: the object `_leases/<token>.json` its process
//! rewrites every minute, the multipart uploads it records, and aborting
//! the uploads no live writer holds.

use std::collections::BTreeSet;

use crate::io::io_error;
use crate::table::files;
use crate::table::versions::{self};
use crate::{Error, Result};

use super::{delete_rels, overwrite, parts, read, Bucket};

/// How often a writer to a bucket rewrites its lease object.
pub(crate) const LEASE_BEAT: std::time::Duration = std::time::Duration::from_secs(60);

/// The lease object of write `token`, relative to the table.
pub(crate) fn lease_rel(token: &str) -> String {
    format!("{}/{token}.json", files::LEASES_DIR)
}

/// A write's lease in a bucket: the object `_leases/<token>.json`,
/// written by a thread of the writing process [`LEASE_BEAT`] after the
/// write began and rewritten every beat until the lease is dropped (then
/// removed). A write shorter than a beat makes no request for it: what a
/// writer killed before its first beat left is younger than a beat too,
/// and a cleanup leaves nothing younger than an hour. A writer that dies
/// stops rewriting it, so an object not rewritten for
/// [`LEASE_TTL_MS`](super::history::LEASE_TTL_MS) is
/// a dead writer's (buckets have no locks a dead process gives back).
///
/// The object also lists the write's open multipart uploads (`uploads`:
/// each object's key and upload id, written before the upload's first
/// part), which a cleanup aborts when the lease is a dead writer's.
pub(crate) struct BucketLease {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    object: std::sync::Arc<LeaseObject>,
    beat: Option<std::thread::JoinHandle<()>>,
    root: Bucket,
    pid: u32,
}

/// A lease object and what it says: written whole, under its lock (a
/// beat never writes an older list of uploads over a newer one).
#[derive(Debug)]
pub(crate) struct LeaseObject {
    rel: String,
    /// The open uploads (key, id), under the lock every write holds.
    uploads: std::sync::Mutex<Vec<(String, String)>>,
    written: std::sync::atomic::AtomicBool,
}

/// What a lease object holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct LeaseBody {
    pid: u32,
    beat_ms: u64,
    #[serde(default)]
    uploads: Vec<Upload>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Upload {
    key: String,
    id: String,
}

impl LeaseObject {
    fn body(uploads: &[(String, String)]) -> Vec<u8> {
        let body = LeaseBody {
            pid: std::process::id(),
            beat_ms: versions::now_ms(),
            uploads: uploads
                .iter()
                .map(|(key, id)| Upload {
                    key: key.clone(),
                    id: id.clone(),
                })
                .collect(),
        };
        let mut out = serde_json::to_vec(&body).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Writes the object afresh.
    fn write(&self, root: &Bucket) -> Result<()> {
        let uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        overwrite(root, &self.rel, Self::body(&uploads))?;
        self.written
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Records the upload `id` of the object `key` as open (written to the
    /// object before this returns) or as closed (left for the next beat:
    /// aborting a completed upload changes nothing).
    pub(crate) fn record(
        &self,
        root: &Bucket,
        key: &str,
        id: &str,
        open: bool,
    ) -> std::io::Result<()> {
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        if !open {
            uploads.retain(|(k, i)| !(k == key && i == id));
            return Ok(());
        }
        uploads.push((key.to_owned(), id.to_owned()));
        match overwrite(root, &self.rel, Self::body(&uploads)) {
            Ok(()) => {
                self.written
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                uploads.pop();
                Err(std::io::Error::other(e.to_string()))
            }
        }
    }
}

/// Aborts the multipart uploads the dead writers' lease objects `rels`
/// list (an object that does not parse lists none).
pub(crate) fn abort_uploads(root: &Bucket, rels: &[String]) -> Result<()> {
    for rel in rels {
        let Some(raw) = read(root, rel)? else {
            continue;
        };
        let Ok(body) = serde_json::from_slice::<LeaseBody>(&raw) else {
            continue;
        };
        for u in body.uploads {
            root.remote
                .abort_upload(&u.key, &u.id)
                .map_err(|e| io_error(&root.path().join(rel), e))?;
        }
    }
    Ok(())
}

/// Aborts the multipart uploads open below `root` that the service says
/// were created at least `min_age` ago, that no lease object of the `live`
/// writes (tokens) lists, and whose key (relative to `root`) `spared` does
/// not keep: uploads of writers killed before they recorded them, or
/// whose lease objects are gone. Of a table at the root of its bucket,
/// only those below its shards and groups. Nothing where the service's
/// uploads cannot be listed (see `Remote::open_uploads`; the documented
/// bucket lifecycle rule covers them). Returns how many were aborted.
pub(crate) fn abort_unheld_uploads(
    root: &Bucket,
    live: &BTreeSet<String>,
    spared: &dyn Fn(&str) -> bool,
    min_age: std::time::Duration,
) -> Result<usize> {
    let (remote, base) = parts(root);
    let prefix = if base.is_empty() {
        String::new()
    } else {
        format!("{base}/")
    };
    let Some(open) = remote
        .open_uploads(&prefix, min_age)
        .map_err(|e| io_error(root.path(), e))?
    else {
        return Ok(0);
    };
    if open.is_empty() {
        return Ok(0);
    }
    let mut held = BTreeSet::new();
    for token in live {
        let Some(raw) = read(root, &lease_rel(token))? else {
            continue;
        };
        if let Ok(body) = serde_json::from_slice::<LeaseBody>(&raw) {
            held.extend(body.uploads.into_iter().map(|u| u.id));
        }
    }
    let mut aborted = 0;
    let unheld = open.iter().filter(|(key, id)| {
        let rel = key.strip_prefix(prefix.as_str()).unwrap_or(key);
        // A table at the root of its bucket owns only its shards and
        // groups there, not every upload of the bucket.
        let ours = !base.is_empty() || rel.starts_with("shard-") || rel.starts_with("_g-");
        ours && !held.contains(id) && !spared(rel)
    });
    for (key, id) in unheld {
        remote
            .abort_upload(key, id)
            .map_err(|e| io_error(root.path(), e))?;
        aborted += 1;
    }
    Ok(aborted)
}

impl BucketLease {
    /// Takes the lease of write `token` in `root`: starts the thread that
    /// writes its object every beat, and records the write's uploads in it.
    pub(crate) fn take(root: &Bucket, token: &str) -> Result<BucketLease> {
        let object = std::sync::Arc::new(LeaseObject {
            rel: lease_rel(token),
            uploads: Default::default(),
            written: Default::default(),
        });
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let (flag, bucket, beating) = (stop.clone(), root.clone(), object.clone());
        let beat = std::thread::Builder::new()
            .name("loaderx-lease".into())
            .spawn(move || {
                let (lock, cv) = &*flag;
                let mut stopped = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (s, _) = cv
                        .wait_timeout(stopped, LEASE_BEAT)
                        .unwrap_or_else(|e| e.into_inner());
                    stopped = s;
                    if *stopped {
                        return;
                    }
                    // A failed beat is retried at the next one.
                    let _ = beating.write(&bucket);
                }
            })
            .map_err(|e| Error::io(root.path(), e))?;
        *root.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(object.clone());
        Ok(BucketLease {
            stop,
            object,
            beat: Some(beat),
            root: root.clone(),
            pid: std::process::id(),
        })
    }
}

impl Drop for BucketLease {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A fork()ed child: the beating thread is the parent's.
            if let Some(beat) = self.beat.take() {
                std::mem::forget(beat);
            }
            return;
        }
        *self.stop.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.stop.1.notify_all();
        if let Some(beat) = self.beat.take() {
            let _ = beat.join();
        }
        *self.root.lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if self
            .object
            .written
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            let _ = delete_rels(&self.root, std::slice::from_ref(&self.object.rel));
        }
    }
}
