//! The process-wide worker pool that gathers and appends fan out over.
//!
//! Its size is three quarters of the CPUs available to the process, rounded
//! up (at least 1), or `LOADERX_THREADS` when set. The pool is fork-aware: a
//! `fork()`ed child (a torch DataLoader worker, say) inherits the parent's
//! pool bookkeeping but none of its threads, so the first use in a new
//! process builds a fresh pool instead of waiting forever on dead workers.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use crate::per_process::PerProcess;

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

static POOL: PerProcess<rayon::ThreadPool> = PerProcess::new();

/// The worker pool of the calling process.
pub fn pool() -> &'static rayon::ThreadPool {
    let made = POOL.get_or_try_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(budget())
            .thread_name(|i| format!("loaderx-{i}"))
            .build()
    });
    made.expect("building the loaderx worker pool")
}

/// Number of threads of the current pool.
pub fn threads() -> usize {
    pool().current_num_threads()
}

/// What the chunks of a fan-out do, for its cost model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Copying stored bytes (raw records).
    Copy = 0,
    /// Decoding frames (compressed records).
    Decode = 1,
}

/// The running cost model that decides whether a batch is worth waking
/// pool workers for: smoothed nanoseconds per KiB of output of each kind of
/// work (measured on the calling thread, alone or not) and smoothed
/// nanoseconds from asking a worker to join until it starts (measured by the
/// workers). A batch fans out when doing it alone is predicted to take longer
/// than a wake-up (a worker that comes later finds nothing left and costs
/// the caller only the call that woke it); one batch in [`PROBE_EVERY`] that would not fans
/// out anyway, so the wake-up estimate follows a pool that gets less busy.
struct Model {
    ns_per_kib: [AtomicU64; 2],
    wake_ns: AtomicU64,
    declined: AtomicU64,
}

static MODEL: Model = Model {
    // Starting guesses: a copy at 10 GB/s, a decode at 1 GB/s, 20 µs wake-ups.
    ns_per_kib: [AtomicU64::new(100), AtomicU64::new(1000)],
    wake_ns: AtomicU64::new(20_000),
    declined: AtomicU64::new(0),
};

const PROBE_EVERY: u64 = 32;

/// The fan-out cost model's current estimates (for diagnostics and the
/// benchmarks): nanoseconds per KiB of output copied and decoded on one
/// thread, and nanoseconds until an asked pool worker starts. Hidden: a
/// diagnostic of the executor's internals, not product API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct FanOutModel {
    pub copy_ns_per_kib: u64,
    pub decode_ns_per_kib: u64,
    pub wake_ns: u64,
}

/// A snapshot of the fan-out cost model of this process.
#[doc(hidden)]
pub fn fan_out_model() -> FanOutModel {
    FanOutModel {
        copy_ns_per_kib: MODEL.ns_per_kib[Work::Copy as usize].load(Ordering::Relaxed),
        decode_ns_per_kib: MODEL.ns_per_kib[Work::Decode as usize].load(Ordering::Relaxed),
        wake_ns: MODEL.wake_ns.load(Ordering::Relaxed),
    }
}

/// Moves a smoothed value an eighth of the way to `sample`, taken as at
/// most four times the value (so one preempted worker or one page fault
/// storm does not swing the model), and racing updates may lose one
/// another's step: harmless for an estimate.
fn smooth(value: &AtomicU64, sample: u64) {
    let old = value.load(Ordering::Relaxed);
    let sample = sample.min(old.saturating_mul(4));
    let new = if sample >= old {
        old + (sample - old) / 8
    } else {
        old - (old - sample) / 8
    };
    value.store(new.max(1), Ordering::Relaxed);
}

/// The wake-up estimate falls halfway to a faster sample and rises a
/// sixteenth of the way to a slower one. Workers that sleep because batches
/// stay on their callers wake slowly, and a mean of those would keep
/// batches on their callers for good; the fast wake-ups of a pool in use
/// are what a batch that fans out gets.
fn smooth_wake(sample: u64) {
    let value = &MODEL.wake_ns;
    let old = value.load(Ordering::Relaxed);
    let new = if sample >= old {
        old + (sample.min(old.saturating_mul(4)) - old) / 16
    } else {
        old - (old - sample) / 2
    };
    value.store(new.max(1), Ordering::Relaxed);
}

/// The plan of one batch of `chunks` chunks and `bytes` bytes of output:
/// how many pool workers may join, and the clock of the calling thread.
pub(crate) struct FanOut {
    work: Work,
    bytes: usize,
    chunks: usize,
    helpers: usize,
    /// Predicted nanoseconds of one chunk done alone.
    chunk_ns: u64,
    start: Instant,
}

impl FanOut {
    /// Plans a batch: no helpers when the executor has one thread, when
    /// there is one chunk or no byte to produce, or when the batch is
    /// predicted to take less than a wake-up alone.
    pub(crate) fn plan(work: Work, bytes: usize, chunks: usize) -> FanOut {
        let alone_ns = (bytes as u64 / 1024)
            .saturating_mul(MODEL.ns_per_kib[work as usize].load(Ordering::Relaxed));
        let mut helpers = budget().saturating_sub(1).min(chunks.saturating_sub(1));
        if bytes == 0 {
            helpers = 0;
        } else if helpers > 0 && alone_ns < MODEL.wake_ns.load(Ordering::Relaxed) {
            let declined = MODEL.declined.fetch_add(1, Ordering::Relaxed);
            if declined % PROBE_EVERY != PROBE_EVERY - 1 {
                helpers = 0;
            }
        }
        FanOut {
            work,
            bytes,
            chunks,
            helpers,
            chunk_ns: alone_ns / chunks.max(1) as u64,
            start: Instant::now(),
        }
    }

    /// A plan that always fans out (tests of the fan-out itself).
    #[cfg(test)]
    fn forced(chunks: usize) -> FanOut {
        FanOut {
            work: Work::Copy,
            bytes: 0,
            chunks,
            helpers: budget().saturating_sub(1).min(chunks.saturating_sub(1)),
            chunk_ns: u64::MAX / 2,
            start: Instant::now(),
        }
    }

    /// Whether pool workers may join (else the caller does it all alone).
    pub(crate) fn fans_out(&self) -> bool {
        self.helpers > 0
    }

    /// Records the time of a batch done alone by the calling thread.
    pub(crate) fn done_alone(self) {
        self.learn(self.start.elapsed(), self.bytes);
    }

    fn learn(&self, busy: Duration, bytes: usize) {
        if let Some(sample) = (busy.as_nanos() as u64).checked_div(bytes as u64 / 1024) {
            smooth(&MODEL.ns_per_kib[self.work as usize], sample);
        }
    }
}

/// Runs `work(c)` once for every chunk `c` of `plan`, on the calling thread
/// and on as many pool workers as join while chunks remain.
///
/// The caller never waits to start: it claims chunks itself from the first
/// instant, and asks one or two pool workers to join; each worker that wakes
/// while enough work is left asks up to three more (so a large batch has a
/// dozen threads on it after two wake-ups), up to `budget() - 1` workers in
/// all. Chunks are claimed one at a time from a shared counter, so a worker
/// that wakes late (after the caller has claimed everything) finds nothing
/// to do and the caller does not wait for it: a batch costs at most what one
/// thread costs plus one wake-up call, a large one spreads over every
/// thread that is free, and uneven chunks (frames that decode at different
/// speeds) balance themselves. The caller returns once every claimed chunk
/// is done.
///
/// The first error is returned (chunks not yet started are skipped after
/// it); a panic in any chunk is resumed on the caller once the others stop.
pub(crate) fn for_each_chunk<F>(plan: FanOut, work: F) -> crate::Result<()>
where
    F: Fn(usize) -> crate::Result<()> + Sync,
{
    let chunks = plan.chunks;
    if !plan.fans_out() {
        let r = (0..chunks).try_for_each(work);
        plan.done_alone();
        return r;
    }
    let work: &(dyn Fn(usize) -> crate::Result<()> + Sync + '_) = &work;
    // SAFETY: only the lifetime bound is erased. The pointer is called only
    // by a thread that claimed a chunk (`next < chunks`), and this function
    // does not return (nor unwind) before every claimed chunk is done
    // (`done == chunks`, see `Fanout::wait`); after that no claim succeeds,
    // so no call through the pointer outlives `work`.
    let work: *const (dyn Fn(usize) -> crate::Result<()> + Sync + 'static) = unsafe {
        std::mem::transmute(work as *const (dyn Fn(usize) -> crate::Result<()> + Sync + '_))
    };
    let fanout = std::sync::Arc::new(Fanout {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        chunks,
        spare: AtomicUsize::new(plan.helpers),
        chunk_ns: plan.chunk_ns,
        work: WorkPtr(work),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        waiter: std::thread::current(),
    });
    fanout.recruit(if chunks >= 8 { 2 } else { 1 });
    let (ran, busy) = fanout.claim_all();
    if ran > 0 {
        plan.learn(busy, plan.bytes / chunks * ran);
    }
    fanout.wait();
    fanout.finish()
}

/// What a failed chunk left: its error, or the payload of its panic.
enum Failure {
    Error(crate::Error),
    Panic(Box<dyn std::any::Any + Send>),
}

struct WorkPtr(*const (dyn Fn(usize) -> crate::Result<()> + Sync + 'static));

// SAFETY: the pointee is `Sync` (callable from any thread through a shared
// reference) and is only called while the caller of `for_each_chunk` keeps
// it alive (see there).
unsafe impl Send for WorkPtr {}
// SAFETY: as above.
unsafe impl Sync for WorkPtr {}

/// One `for_each_chunk` call, shared by the caller and the workers it asked.
struct Fanout {
    /// Next chunk to claim (may run past `chunks`: then nothing is left).
    next: AtomicUsize,
    /// Chunks finished (run, skipped after a failure, or panicked).
    done: AtomicUsize,
    chunks: usize,
    /// Workers that may still be asked to join.
    spare: AtomicUsize,
    /// Predicted nanoseconds of one chunk on one thread.
    chunk_ns: u64,
    work: WorkPtr,
    failed: AtomicBool,
    error: Mutex<Option<Failure>>,
    /// The calling thread, unparked when the last chunk is done.
    waiter: std::thread::Thread,
}

impl Fanout {
    /// Asks up to `n` more pool workers to join while at least two chunks
    /// are unclaimed (one for this thread, one for the newcomer) and they
    /// are predicted to take longer than a wake-up.
    fn recruit(self: &std::sync::Arc<Self>, n: usize) {
        for _ in 0..n {
            let left = self
                .chunks
                .saturating_sub(self.next.load(Ordering::Relaxed));
            if left < 2
                || (left as u64).saturating_mul(self.chunk_ns)
                    < MODEL.wake_ns.load(Ordering::Relaxed)
            {
                return;
            }
            let took = self
                .spare
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1));
            if took.is_err() {
                return;
            }
            let me = std::sync::Arc::clone(self);
            let asked = Instant::now();
            pool().spawn(move || {
                smooth_wake(asked.elapsed().as_nanos() as u64);
                me.recruit(3);
                me.claim_all();
            });
        }
    }

    /// Claims and runs chunks until none is left; returns how many this
    /// thread ran and for how long.
    fn claim_all(&self) -> (usize, Duration) {
        let start = Instant::now();
        let mut ran = 0;
        loop {
            let c = self.next.fetch_add(1, Ordering::Relaxed);
            if c >= self.chunks {
                return (ran, start.elapsed());
            }
            ran += 1;
            if !self.failed.load(Ordering::Relaxed) {
                // SAFETY: chunk `c < chunks` is claimed and not yet done, so
                // the caller of `for_each_chunk` is still inside it and
                // `work` is alive (see there).
                let work = unsafe { &*self.work.0 };
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(c)));
                let failure = match outcome {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(Failure::Error(e)),
                    Err(payload) => Some(Failure::Panic(payload)),
                };
                if let Some(f) = failure {
                    self.failed.store(true, Ordering::Relaxed);
                    let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
                    slot.get_or_insert(f);
                }
            }
            // Release: this chunk's writes happen before the caller's
            // acquire load of `done` sees them.
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.chunks {
                self.waiter.unpark();
            }
        }
    }

    /// Blocks the caller until every chunk is done.
    fn wait(&self) {
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < self.chunks {
            if spins < 1 << 12 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                // Spurious wake-ups just loop; the last chunk unparks.
                std::thread::park();
            }
        }
    }

    fn finish(&self) -> crate::Result<()> {
        let failure = self.error.lock().unwrap_or_else(|e| e.into_inner()).take();
        match failure {
            None => Ok(()),
            Some(Failure::Error(e)) => Err(e),
            Some(Failure::Panic(payload)) => std::panic::resume_unwind(payload),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn small_batches_stay_on_the_caller_and_large_ones_fan_out() {
        // A 1 KiB copy is predicted far below a wake-up: at most the odd
        // probe (one plan in PROBE_EVERY, shared with concurrent tests) fans out.
        let fanned = (0..PROBE_EVERY)
            .filter(|_| FanOut::plan(Work::Copy, 1024, 4).fans_out())
            .count();
        assert!(
            fanned <= 2,
            "{fanned} of {PROBE_EVERY} tiny batches fanned out"
        );
        // A TiB to decode always does, when there is a pool to fan out to.
        let large = FanOut::plan(Work::Decode, 1 << 40, 1000);
        assert_eq!(large.fans_out(), budget() > 1);
        assert!(
            !FanOut::plan(Work::Decode, 1 << 40, 1).fans_out(),
            "one chunk"
        );
    }

    #[test]
    fn every_chunk_runs_exactly_once() {
        for chunks in [0usize, 1, 2, 3, 7, 64, 1000] {
            let counts: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
            for_each_chunk(FanOut::forced(chunks), |c| {
                counts[c].fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
            assert!(
                counts.iter().all(|n| n.load(Ordering::Relaxed) == 1),
                "{chunks} chunks"
            );
        }
    }

    #[test]
    fn slow_chunks_spread_over_the_pool() {
        let threads = Mutex::new(HashSet::new());
        for_each_chunk(FanOut::forced(16), |_| {
            threads.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_millis(5));
            Ok(())
        })
        .unwrap();
        let used = threads.lock().unwrap().len();
        assert!(
            used <= budget(),
            "{used} threads for a budget of {}",
            budget()
        );
        if budget() > 1 {
            assert!(used >= 2, "16 chunks of 5 ms stayed on one thread");
        }
    }

    #[test]
    fn the_first_error_is_returned_and_later_chunks_are_skipped() {
        let ran = AtomicUsize::new(0);
        let err = for_each_chunk(FanOut::forced(10_000), |c| {
            ran.fetch_add(1, Ordering::Relaxed);
            if c == 3 {
                Err(crate::Error::InvalidValue("chunk 3".into()))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(err.to_string().contains("chunk 3"), "{err}");
        assert!(ran.load(Ordering::Relaxed) < 10_000);
    }

    #[test]
    fn a_panicking_chunk_panics_the_caller_after_the_others_stop() {
        let running = AtomicUsize::new(0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for_each_chunk(FanOut::forced(64), |c| {
                running.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(200));
                running.fetch_sub(1, Ordering::SeqCst);
                if c == 1 {
                    panic!("chunk 1 failed");
                }
                Ok(())
            })
        }));
        let payload = outcome.unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"chunk 1 failed"));
        // No chunk is still running once the caller has unwound.
        assert_eq!(running.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn concurrent_callers_each_get_their_own_chunks() {
        std::thread::scope(|s| {
            for t in 0..8usize {
                s.spawn(move || {
                    for round in 0..50usize {
                        let chunks = 1 + (t * 7 + round) % 40;
                        let sum = AtomicUsize::new(0);
                        for_each_chunk(FanOut::forced(chunks), |c| {
                            sum.fetch_add(c + 1, Ordering::Relaxed);
                            Ok(())
                        })
                        .unwrap();
                        assert_eq!(sum.into_inner(), chunks * (chunks + 1) / 2);
                    }
                });
            }
        });
    }
}
