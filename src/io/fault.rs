//! Fault injection for crash and I/O-error tests.
//!
//! Fault points are numbered from 0 in the order the process reaches them.
//! A process is armed either by [`arm`] or, once at its first fault point,
//! from the environment: `LOADERX_FAULT_AT=k` and `LOADERX_FAULT=kill|enospc|eio`
//! (`kill` by default). `kill` sends SIGKILL to the process at point `k`
//! (nothing after it reaches the files, as with a real crash); `enospc`
//! fails point `k` and every later one, as a full disk does; `eio` fails
//! point `k` only.
//!
//! `LOADERX_FAULT_SKIP_FSYNC=1` (or [`skip_fsync`]) keeps every fsync a fault
//! point but skips the system call: a SIGKILL never loses what is in the
//! page cache, so for process crashes fsync changes nothing observable, and
//! sweeps of thousands of children run in seconds instead of minutes.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Once;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
/// What an armed fault point does: SIGKILL the process, or fail the write
/// with ENOSPC (from that point on) or EIO (at that point).
pub enum Fault {
    Kill = 0,
    Enospc = 1,
    Eio = 2,
}

static OPS: AtomicU64 = AtomicU64::new(0);
static AT: AtomicU64 = AtomicU64::new(u64::MAX);
static MODE: AtomicU8 = AtomicU8::new(Fault::Kill as u8);
static FROM_ENV: Once = Once::new();
static SKIP_FSYNC: AtomicBool = AtomicBool::new(false);

/// Skips (or performs again) the fsync system calls of this process.
pub fn skip_fsync(skip: bool) {
    load_env();
    SKIP_FSYNC.store(skip, Ordering::SeqCst);
}

pub(crate) fn skips_fsync() -> bool {
    SKIP_FSYNC.load(Ordering::Relaxed)
}

fn load_env() {
    FROM_ENV.call_once(|| {
        if std::env::var_os("LOADERX_FAULT_SKIP_FSYNC").is_some_and(|v| v == "1") {
            SKIP_FSYNC.store(true, Ordering::SeqCst);
        }
        let Some(at) = std::env::var("LOADERX_FAULT_AT")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            return;
        };
        let mode = match std::env::var("LOADERX_FAULT").as_deref() {
            Ok("enospc") => Fault::Enospc,
            Ok("eio") => Fault::Eio,
            _ => Fault::Kill,
        };
        MODE.store(mode as u8, Ordering::SeqCst);
        AT.store(at, Ordering::SeqCst);
    });
}

/// Arms fault point `at` (counted from now) with `mode`.
pub fn arm(at: u64, mode: Fault) {
    load_env();
    OPS.store(0, Ordering::SeqCst);
    MODE.store(mode as u8, Ordering::SeqCst);
    AT.store(at, Ordering::SeqCst);
}

/// Disarms and resets the count.
pub fn disarm() {
    load_env();
    AT.store(u64::MAX, Ordering::SeqCst);
    OPS.store(0, Ordering::SeqCst);
}

/// Fault points reached since the last [`arm`] / [`disarm`].
pub fn ops() -> u64 {
    OPS.load(Ordering::SeqCst)
}

pub(crate) fn point() -> io::Result<()> {
    load_env();
    let k = OPS.fetch_add(1, Ordering::SeqCst);
    let at = AT.load(Ordering::SeqCst);
    if k < at {
        return Ok(());
    }
    match MODE.load(Ordering::SeqCst) {
        m if m == Fault::Kill as u8 && k == at => {
            // SAFETY: getpid and kill have no memory-safety preconditions.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            // SIGKILL is delivered before kill() returns to a
            // single-target self signal; never go on writing.
            loop {
                std::thread::park();
            }
        }
        m if m == Fault::Enospc as u8 => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
        m if m == Fault::Eio as u8 && k == at => Err(io::Error::from_raw_os_error(libc::EIO)),
        _ => Ok(()),
    }
}
