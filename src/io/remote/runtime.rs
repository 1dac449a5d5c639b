//! The runtime that drives remote requests, and the process-wide bound on
//! requests in flight.
//!
//! One tokio runtime per process, made on first use, with two I/O threads
//! (requests wait on the network, not on the CPU; decoding runs on the
//! caller's threads and the executor). A gather blocks on it with the GIL
//! released. A `fork()`ed child (a torch DataLoader worker) inherits none
//! of its threads: the first request in the child sees another process id
//! and makes a runtime of its own; the parent's, unusable there, is leaked
//! rather than dropped (dropping it would wait for threads that do not
//! exist in the child). Clients are remade the same way (`client.rs`),
//! both through [`PerProcess`].

use crate::per_process::PerProcess;
use std::future::Future;

use tokio::sync::Semaphore;

/// Requests in flight in one process unless `LOADERX_REMOTE_REQUESTS` says
/// otherwise: S3 serves thousands of GETs per second per prefix, and 64
/// requests of a few hundred KiB each at 20 ms keep about a GiB/s moving.
pub(crate) const DEFAULT_REQUESTS: usize = 64;

pub(crate) struct Io {
    runtime: tokio::runtime::Runtime,
    /// One permit per request in flight, shared by every remote location
    /// of the process (taken only by [`Io::limited`]).
    permits: Semaphore,
    pub(crate) max_requests: usize,
}

static IO: PerProcess<Io> = PerProcess::new();

/// `LOADERX_REMOTE_REQUESTS`, or the default (an invalid value is ignored).
fn max_requests() -> usize {
    std::env::var("LOADERX_REMOTE_REQUESTS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_REQUESTS)
}

/// The process's bound on requests in flight (without making the runtime).
pub(crate) fn max_requests_now() -> usize {
    IO.get().map_or_else(max_requests, |io| io.max_requests)
}

/// This process's runtime, made (or remade after a fork) on first use.
pub(crate) fn io() -> std::io::Result<&'static Io> {
    IO.get_or_try_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("loaderx-io")
            .enable_all()
            .build()?;
        let max = max_requests();
        Ok(Io {
            runtime,
            permits: Semaphore::new(max),
            max_requests: max,
        })
    })
}

impl Io {
    /// Runs `fut` (one request: sending it and reading its body) holding
    /// one of the process's request permits: the one place a request
    /// takes a permit, so at most [`Io::max_requests`] are in flight
    /// whatever issued them (listings, open-time fetches, gathers, cache
    /// fills, duplicates of a slow request).
    pub(crate) async fn limited<F: Future>(&self, fut: F) -> F::Output {
        // The semaphore is never closed: acquiring cannot fail.
        let _permit = self.permits.acquire().await;
        fut.await
    }

    /// Runs `futs` (one request each) concurrently, each through
    /// [`Io::limited`], and returns their outputs in completion order.
    pub(crate) fn all<F>(&self, futs: Vec<F>) -> Vec<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        use futures::StreamExt;
        self.block_on(
            futures::stream::iter(futs.into_iter().map(|f| self.limited(f)))
                .buffer_unordered(self.max_requests)
                .collect::<Vec<_>>(),
        )
    }

    /// Starts `fut` on this runtime's threads; the handle cancels it.
    pub(crate) fn spawn<F>(&self, fut: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.runtime.spawn(fut).abort_handle()
    }

    /// Runs `fut` to completion on this runtime from a thread outside it.
    /// From inside another runtime (a DataFusion scan calls gathers from its
    /// own tokio threads), a scoped thread blocks instead, since a runtime
    /// thread may not block on another runtime.
    pub(crate) fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| {
                s.spawn(|| self.runtime.block_on(fut))
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
        } else {
            self.runtime.block_on(fut)
        }
    }
}
