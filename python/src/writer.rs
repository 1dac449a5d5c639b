//! The one-slot writer queue of a ragged store.
//!
//! `RaggedStore.append` packs a batch on the caller's thread (validation
//! happens there) and queues it here; a native writer thread compresses and
//! writes it while Python prepares the next batch. The slot holds one batch:
//! a second `submit` waits until the writer has taken the first, so batches
//! are written in the order they were queued. The first write error is kept,
//! later queued batches are dropped, and the error is raised by the next
//! `submit` or `drain`. `drain` waits until every queued batch is written;
//! `stop` refuses later batches and waits for the writer thread to end.
//!
//! The writer queue's part of fork safety lives here: a `pthread_atfork`
//! handler waits, before any fork, until every writer is idle (so a child
//! never inherits a store in the middle of an append), and a forked child,
//! which has none of the parent's threads and may only read the store,
//! never touches the queue's lock. The other parts live with what they
//! guard: the store refuses a forked child's writes and closes only its
//! own handle (`src/store/mod.rs`, `src/store/commit.rs`, and the
//! binding's `store/mod.rs`), the lock survives a child's close
//! (`src/io/lock.rs`), the worker pool and the remote runtime and clients
//! are remade in a child (`src/executor.rs`, `src/io/remote/runtime.rs`,
//! `src/io/remote/client.rs`), the buffer pool never waits on a lock held
//! at the fork (`src/read/buffer.rs`), and a loader refuses to step in a
//! child (`src/loader/mod.rs`). docs/guide/processes-threads.md says what
//! a user may do across a fork.
//!
//! The writer thread exists only while there is work: it ends once the slot
//! is empty, so an idle store holds no thread and no reference to itself.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, Weak};

use loaderx::Error;
use loaderx::Packed;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::errors::to_py;

/// What the writer thread writes its batches into: the store handle that
/// owns the writer (a frozen pyclass, so that the thread reaches it without
/// the GIL).
pub(crate) trait Sink:
    pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync + Send
{
    /// Appends a packed ragged batch; needs no GIL.
    fn write_packed(&self, packed: &Packed) -> Result<(), Error>;
}

#[derive(Default)]
struct State {
    /// The queued batch, not yet taken by the writer thread.
    slot: Option<Packed>,
    /// The writer thread is writing a batch it took.
    busy: bool,
    /// A writer thread exists (or is being started).
    running: bool,
    /// The first write error, until a caller takes it.
    error: Option<Error>,
    stopped: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until nothing is queued or being written.
    fn wait_idle(&self) -> MutexGuard<'_, State> {
        let mut st = self.lock();
        while st.slot.is_some() || st.busy {
            st = self.wait(st);
        }
        st
    }
}

/// The queue of one store handle.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    owner_pid: u32,
}

impl Writer {
    pub(crate) fn new() -> Writer {
        let shared = Arc::new(Shared::default());
        register(&shared);
        Writer {
            shared,
            owner_pid: std::process::id(),
        }
    }

    fn in_forked_child(&self) -> bool {
        std::process::id() != self.owner_pid
    }

    /// Queues `packed` for `store` (the handle owning this writer), waiting
    /// with the GIL released while the slot is full. Raises a pending write
    /// error instead of queueing, and ValueError once stopped.
    pub(crate) fn submit<S: Sink>(
        &self,
        py: Python<'_>,
        store: &Bound<'_, S>,
        packed: Packed,
        name: &str,
    ) -> PyResult<()> {
        if self.in_forked_child() {
            // Unreachable through the facade (the store refuses a child's
            // writes first); never touch the inherited lock.
            return Err(PyValueError::new_err(format!(
                "{name} was opened by process {}; this forked child may only read it",
                self.owner_pid
            )));
        }
        let shared = &self.shared;
        let start = py.detach(|| -> Result<bool, Result<Error, String>> {
            let mut st = shared.lock();
            loop {
                if st.stopped {
                    return Err(Err(format!("{name} is closed")));
                }
                if let Some(err) = st.error.take() {
                    return Err(Ok(err));
                }
                if st.slot.is_none() {
                    break;
                }
                st = shared.wait(st);
            }
            st.slot = Some(packed);
            let start = !st.running;
            st.running = true;
            Ok(start)
        });
        let start = match start {
            Ok(start) => start,
            Err(Ok(err)) => return Err(to_py(err)),
            Err(Err(closed)) => return Err(PyValueError::new_err(closed)),
        };
        if start {
            let owner = store.clone().unbind();
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("loaderx-ragged-writer".into())
                .spawn(move || run(owner, shared));
            if let Err(e) = spawned {
                let mut st = self.shared.lock();
                st.running = false;
                st.slot = None; // the batch is not written: say so now
                self.shared.changed.notify_all();
                return Err(PyOSError::new_err(format!(
                    "{name}: cannot start the writer thread: {e}"
                )));
            }
        }
        Ok(())
    }

    /// Raises the pending write error, if any, without waiting.
    pub(crate) fn raise_pending(&self) -> PyResult<()> {
        if self.in_forked_child() {
            return Ok(());
        }
        match self.shared.lock().error.take() {
            Some(err) => Err(to_py(err)),
            None => Ok(()),
        }
    }

    /// Waits (GIL released) until every queued batch is written, then
    /// raises the first write error, if any.
    pub(crate) fn drain(&self, py: Python<'_>) -> PyResult<()> {
        if self.in_forked_child() {
            return Ok(());
        }
        match py.detach(|| self.shared.wait_idle().error.take()) {
            Some(err) => Err(to_py(err)),
            None => Ok(()),
        }
    }

    /// Refuses later batches and waits (GIL released) until the writer
    /// thread has written what was queued and ended. Idempotent.
    pub(crate) fn stop(&self, py: Python<'_>) {
        if self.in_forked_child() {
            return;
        }
        let shared = &self.shared;
        py.detach(|| {
            let mut st = shared.lock();
            st.stopped = true;
            while st.running {
                st = shared.wait(st);
            }
        });
    }
}

/// The writer thread: writes queued batches until the slot is empty.
fn run<S: Sink>(owner: Py<S>, shared: Arc<Shared>) {
    let store = owner.get();
    loop {
        let packed = {
            let mut st = shared.lock();
            match st.slot.take() {
                Some(p) => {
                    st.busy = true;
                    shared.changed.notify_all(); // the slot is free
                    p
                }
                None => {
                    st.running = false;
                    shared.changed.notify_all();
                    break;
                }
            }
        };
        // A batch queued after an error is dropped: the caller sees the
        // error first and decides.
        let failed = shared.lock().error.is_some();
        let result = if failed {
            Ok(())
        } else {
            // The engine never panics on any input; should it anyway, the
            // queue must still end (stop() waits for it) and report it.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.write_packed(&packed)))
                .unwrap_or_else(|_| Err(Error::WorkerPanicked("the ragged writer panicked".into())))
        };
        drop(packed);
        let mut st = shared.lock();
        st.busy = false;
        if let Err(err) = result {
            st.error.get_or_insert(err);
        }
        shared.changed.notify_all();
    }
    // Dropping the handle needs no GIL: pyo3 defers the decref.
    drop(owner);
}

/// Every live writer of the process, for the before-fork handler.
static WRITERS: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

fn register(shared: &Arc<Shared>) {
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        // SAFETY: `before_fork` is an `extern "C" fn()` that never unwinds
        // (it only locks mutexes and waits on condition variables);
        // pthread_atfork just records the pointer.
        unsafe {
            libc::pthread_atfork(Some(before_fork), None, None);
        }
    });
    let mut all = WRITERS.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(shared));
}

/// Runs in the forking thread just before `fork()`: waits until no writer
/// is in the middle of a batch, so the child's image of each store is
/// consistent. Writer threads never need the GIL, so the wait cannot
/// deadlock against a forking thread that holds it.
extern "C" fn before_fork() {
    let live: Vec<Arc<Shared>> = {
        let all = WRITERS.lock().unwrap_or_else(|p| p.into_inner());
        all.iter().filter_map(Weak::upgrade).collect()
    };
    for shared in live {
        drop(shared.wait_idle());
    }
}
