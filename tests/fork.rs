//! The lock and `fork()` (docs/format.md, "Locking"): a forked child shares the parent's
//! descriptor of `meta.zr`, and with it the `flock`, but must not keep the
//! store locked once the parent closes it (persistent torch DataLoader
//! workers outlive many such closes). The child may still read; it never
//! writes, and its close neither writes nor releases the parent's lock.
//!
//! Forked children run only a few store calls and raw syscalls, then
//! `_exit`: they never return into the (multithreaded) test harness. Other
//! processes are this test binary re-executed with `--exact other_process`
//! and `LOADERX_FORK_CHILD` set.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use loaderx::{Error, Records, Store};

const CHILD_ENV: &str = "LOADERX_FORK_CHILD";
const DIR_ENV: &str = "LOADERX_FORK_DIR";
const TIMEOUT: Duration = Duration::from_secs(60);

use common::{u64x16_record as record, u64x16_records as records};

/// A dense uint64 [16] zstd store of `n` synced records, left open.
fn open_store(dir: &Path, n: u64) -> Store {
    let mut store = common::u64x16_store(dir, n);
    store.sync().unwrap();
    store
}

#[track_caller]
fn assert_busy<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::Busy(_))), "expected Busy, got {r:?}");
}

// ------------------------------------------------------ other processes

/// The re-executed side; does nothing (and passes) unless
/// `LOADERX_FORK_CHILD` is set.
#[test]
#[ignore = "a child process entry point: its parent test runs it"]
fn other_process() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    match mode.as_str() {
        "expect-busy" => assert_busy(Store::open(&dir)),
        "expect-open" => Store::open(&dir).unwrap().close().unwrap(),
        other => panic!("unknown mode {other}"),
    }
    println!("OTHER-PROCESS-OK");
}

/// Opens the store from another process, which expects `mode`.
#[track_caller]
fn other_process_opens(mode: &str, dir: &Path) {
    let out = common::rerun("other_process")
        .env(CHILD_ENV, mode)
        .env(DIR_ENV, dir)
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OTHER-PROCESS-OK"),
        "other process ({mode}) failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ------------------------------------------------------- forked children

/// One end of a pipe; closed on drop.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once.
        unsafe { libc::close(self.0) };
    }
}

fn pipe() -> (Fd, Fd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (Fd(fds[0]), Fd(fds[1]))
}

/// Writes one byte (async-signal-safe: usable in a forked child).
fn send(fd: &Fd, byte: u8) -> bool {
    // SAFETY: writes one byte from a live local.
    unsafe { libc::write(fd.0, (&byte as *const u8).cast(), 1) == 1 }
}

/// Reads one byte, blocking (for the forked child).
fn recv_blocking(fd: &Fd) -> Option<u8> {
    let mut byte = 0u8;
    // SAFETY: reads one byte into a live local.
    (unsafe { libc::read(fd.0, (&mut byte as *mut u8).cast(), 1) } == 1).then_some(byte)
}

/// Reads one byte within the timeout (for the parent).
#[track_caller]
fn recv(fd: &Fd) -> u8 {
    let mut pfd = libc::pollfd {
        fd: fd.0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, TIMEOUT.as_millis() as libc::c_int) };
    assert_eq!(ready, 1, "the forked child did not answer in time");
    recv_blocking(fd).expect("the forked child exited without answering")
}

/// A forked child; killed and reaped on drop, so no test leaves one behind.
struct Forked {
    pid: libc::pid_t,
    reaped: bool,
}

impl Forked {
    /// Forks; the child runs `f` and `_exit`s with its result.
    fn spawn(f: impl FnOnce() -> i32) -> Forked {
        // SAFETY: the child only runs `f` (store calls that take no lock a
        // harness thread could hold, and raw syscalls) and then `_exit`s,
        // never returning into the harness or running its destructors.
        match unsafe { libc::fork() } {
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            0 => {
                let code = f();
                // SAFETY: ends the child at once, as fork's child must.
                unsafe { libc::_exit(code) }
            }
            pid => Forked { pid, reaped: false },
        }
    }

    fn is_alive(&mut self) -> bool {
        let mut status = 0;
        // SAFETY: polls our own child without blocking.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r == self.pid {
            self.reaped = true;
        }
        r == 0
    }

    /// Waits for the child to exit; its exit code.
    #[track_caller]
    fn exit_code(mut self) -> i32 {
        let deadline = Instant::now() + TIMEOUT;
        let mut status = 0;
        loop {
            // SAFETY: polls our own child without blocking.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                self.reaped = true;
                assert!(libc::WIFEXITED(status), "child died: status {status}");
                return libc::WEXITSTATUS(status);
            }
            assert_eq!(r, 0, "waitpid: {}", std::io::Error::last_os_error());
            assert!(Instant::now() < deadline, "the forked child did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signals and reaps our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

const READ_OK: u8 = 1;
const WRITE_REFUSED: u8 = 2;

#[test]
fn a_forked_child_does_not_keep_the_lock_after_the_parent_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let store = open_store(&dir, 10);
    let (ready_r, ready_w) = pipe();
    let (go_r, go_w) = pipe();
    let (done_r, done_w) = pipe();

    // The child holds its copy of the handle (and of meta.zr's descriptor)
    // for its whole life: it is killed at the end of the test.
    let child_store = &store;
    let mut child = Forked::spawn(|| {
        send(&ready_w, 0);
        if recv_blocking(&go_r).is_none() {
            return 1;
        }
        let mut report = 0;
        if child_store.read_record(3).is_ok_and(|r| r == record(3))
            && child_store
                .gather_dense(&[9u64, 0])
                .is_ok_and(|b| b.as_slice() == [record(9), record(0)].concat())
        {
            report |= READ_OK;
        }
        send(&done_w, report);
        // stay alive, holding the descriptor, until killed
        let _ = recv_blocking(&go_r);
        0
    });
    recv(&ready_r);

    // While the parent holds the store: busy here and in another process.
    assert_busy(Store::open(&dir));
    other_process_opens("expect-busy", &dir);

    // The parent closes: the lock goes although the child holds a copy.
    store.close().unwrap();
    assert!(child.is_alive());
    let mut reopened = Store::open(&dir).unwrap();
    assert_busy(Store::open(&dir));
    other_process_opens("expect-busy", &dir);
    reopened.append_dense(&record(10)).unwrap();
    reopened.sync().unwrap();

    // The child still reads its copy.
    send(&go_w, 0);
    assert_eq!(recv(&done_r) & READ_OK, READ_OK);
    assert!(child.is_alive());

    drop(reopened);
    other_process_opens("expect-open", &dir);
    assert_eq!(Store::open(&dir).unwrap().len(), 11);
    drop(child);
}

#[test]
fn a_forked_childs_writes_and_close_change_nothing_and_keep_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut store = open_store(&dir, 10);
    // unsynced records: a sync or trim by the child would show on disk
    store.append_dense(&records(10..12)).unwrap();
    let files = || {
        (
            std::fs::read(dir.join("meta.zr")).unwrap(),
            std::fs::read(dir.join("data.zr")).unwrap(),
        )
    };
    let before = files();

    let (done_r, done_w) = pipe();
    let mut slot = Some(store);
    let child = Forked::spawn(|| {
        let mut store = slot.take().unwrap();
        let mut report = 0;
        let refused = |r: Result<(), Error>| matches!(r, Err(Error::InvalidState(m)) if m.contains("forked child may only read"));
        if refused(store.append_dense(&record(99)))
            && refused(store.delete(&[0u64]))
            && refused(store.compact())
            && refused(store.sync())
        {
            report |= WRITE_REFUSED;
        }
        if store.read_record(11).is_ok_and(|r| r == record(11)) && store.close().is_ok() {
            report |= READ_OK;
        }
        send(&done_w, report);
        0
    });
    assert_eq!(recv(&done_r), READ_OK | WRITE_REFUSED);
    assert_eq!(child.exit_code(), 0);
    let mut store = slot.take().unwrap();

    // The child's close and exit left the files and the parent's lock alone.
    assert!(
        files() == before,
        "the forked child changed the store's files"
    );
    assert_busy(Store::open(&dir));
    other_process_opens("expect-busy", &dir);

    store.append_dense(&record(12)).unwrap();
    store.close().unwrap();
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.len(), 13);
    assert_eq!(
        store.gather_dense(&[12u64, 11]).unwrap().as_slice(),
        [record(12), record(11)].concat()
    );
}
