//! The process-wide worker pool that gathers and appends fan out over.
//!
//! Its size is three quarters of the CPUs available to the process, rounded
//! up (at least 1), or `LOADERX_THREADS` when set. The pool is fork-aware: a
//! `fork()`ed child (a torch DataLoader worker, say) inherits the parent's
//! pool bookkeeping but none of its threads, so the first use in a new
//! process builds a fresh pool instead of waiting forever on dead workers.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

pub const THREADS_ENV: &str = "LOADERX_THREADS";

/// The executor budget for this process (read once: finding the CPUs
/// available to a process reads cgroup files, far too slow for every gather).
pub fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(compute_budget)
}

fn compute_budget() -> usize {
    if let Some(n) = std::env::var(THREADS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (cpus * 3).div_ceil(4).max(1)
}

struct Pool {
    pid: u32,
    pool: rayon::ThreadPool,
}

static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

/// The worker pool of the calling process.
pub fn pool() -> &'static rayon::ThreadPool {
    let pid = std::process::id();
    let current = POOL.load(Ordering::Acquire);
    // SAFETY: every pointer stored in POOL comes from Box::into_raw and is
    // never freed (a pool left by a parent process is leaked on purpose), so
    // it is null or points to a live Pool for the rest of the process.
    if let Some(p) = unsafe { current.as_ref() } {
        if p.pid == pid {
            return &p.pool;
        }
    }
    let threads = budget();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("loaderx-{i}"))
        .build()
        .expect("building the loaderx worker pool");
    let fresh: *mut Pool = Box::into_raw(Box::new(Pool { pid, pool }));
    match POOL.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // The previous pool (if any) belongs to a parent process whose threads
        // do not exist here; it is deliberately leaked, never dropped.
        // SAFETY: `fresh` came from Box::into_raw above and is now owned by
        // POOL, which never frees it: the reference lives as long as the process.
        Ok(_) => unsafe { &(*fresh).pool },
        Err(winner) => {
            // Another thread of this process installed a pool first.
            // SAFETY: the exchange failed, so `fresh` was never published:
            // this thread still owns the box and no one else can see it.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `winner` is a pointer stored in POOL: from
            // Box::into_raw, never freed.
            unsafe { &(*winner).pool }
        }
    }
}

/// Number of threads of the current pool.
pub fn threads() -> usize {
    pool().current_num_threads()
}
