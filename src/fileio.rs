//! Every change the engine makes on disk goes through these functions: each
//! positional write, fsync, truncation, file creation and rename. With the
//! `fault-injection` feature (tests only) each of them is a numbered fault
//! point, so a crash test can kill the writer, or fail the call with an
//! errno, before any one of them (see [`fault`]). Without the feature they
//! are the plain system calls.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

#[inline]
fn point() -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    fault::point()?;
    Ok(())
}

/// A fault point before an fsync; `false` when the test asked to skip the
/// system call itself (see [`fault::skip_fsync`]).
#[inline]
fn sync_point() -> io::Result<bool> {
    point()?;
    #[cfg(feature = "fault-injection")]
    if fault::skips_fsync() {
        return Ok(false);
    }
    Ok(true)
}

pub(crate) fn pwrite(file: &File, buf: &[u8], at: u64) -> io::Result<()> {
    point()?;
    file.write_all_at(buf, at)
}

pub(crate) fn sync_data(file: &File) -> io::Result<()> {
    if sync_point()? {
        file.sync_data()?;
    }
    Ok(())
}

pub(crate) fn sync_all(file: &File) -> io::Result<()> {
    if sync_point()? {
        file.sync_all()?;
    }
    Ok(())
}

pub(crate) fn set_len(file: &File, len: u64) -> io::Result<()> {
    point()?;
    file.set_len(len)
}

/// Opens `path` for reading and writing, creating it when missing; with
/// `truncate` an existing file is emptied.
pub(crate) fn open_rw(path: &Path, truncate: bool) -> io::Result<File> {
    point()?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o644)
        .open(path)
}

/// fsyncs a directory, making the names created or renamed in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    if sync_point()? {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Renames `from` over `to` (replacing it).
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    point()?;
    std::fs::rename(from, to)
}

/// Renames `from` to `to`, failing with `AlreadyExists` rather than
/// replacing an existing `to` (where the filesystem supports it).
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    point()?;
    let cstr = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
    };
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: both arguments are valid NUL-terminated paths that outlive
    // the call; renameat2 only reads them.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // Filesystems without RENAME_NOREPLACE: the caller holds the
        // creation lock, so a plain rename is the same here.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => std::fs::rename(from, to),
        _ => Err(err),
    }
}

/// Fault injection for crash and I/O-error tests.
///
/// Fault points are numbered from 0 in the order the process reaches them.
/// A process is armed either by [`arm`] or, once at its first fault point,
/// from the environment: `LOADERX_FAULT_AT=k` and `LOADERX_FAULT=kill|enospc|eio`
/// (`kill` by default). `kill` sends SIGKILL to the process at point `k`
/// (nothing after it reaches the files, as with a real crash); `enospc`
/// fails point `k` and every later one, as a full disk does; `eio` fails
/// point `k` only.
///
/// `LOADERX_FAULT_SKIP_FSYNC=1` (or [`skip_fsync`]) keeps every fsync a fault
/// point but skips the system call: a SIGKILL never loses what is in the
/// page cache, so for process crashes fsync changes nothing observable, and
/// sweeps of thousands of children run in seconds instead of minutes.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use std::io;
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
    use std::sync::Once;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Mode {
        Kill = 0,
        Enospc = 1,
        Eio = 2,
    }

    static OPS: AtomicU64 = AtomicU64::new(0);
    static AT: AtomicU64 = AtomicU64::new(u64::MAX);
    static MODE: AtomicU8 = AtomicU8::new(Mode::Kill as u8);
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
                Ok("enospc") => Mode::Enospc,
                Ok("eio") => Mode::Eio,
                _ => Mode::Kill,
            };
            MODE.store(mode as u8, Ordering::SeqCst);
            AT.store(at, Ordering::SeqCst);
        });
    }

    /// Arms fault point `at` (counted from now) with `mode`.
    pub fn arm(at: u64, mode: Mode) {
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
            m if m == Mode::Kill as u8 && k == at => {
                // SAFETY: getpid and kill have no memory-safety preconditions.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                // SIGKILL is delivered before kill() returns to a
                // single-target self signal; never go on writing.
                loop {
                    std::thread::park();
                }
            }
            m if m == Mode::Enospc as u8 => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            m if m == Mode::Eio as u8 && k == at => Err(io::Error::from_raw_os_error(libc::EIO)),
            _ => Ok(()),
        }
    }
}
