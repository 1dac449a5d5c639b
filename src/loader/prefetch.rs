//! An ordered, bounded prefetch pipeline.
//!
//! Producer threads claim steps in increasing order and compute them ahead of
//! the consumer; the consumer receives results strictly in step order
//! whatever the thread timing. At most `depth` steps are claimed beyond the
//! one the consumer waits for, so memory is bounded by what is in flight.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// What a producer hands over: its value, or the message of a panic.
pub type Produced<T> = Result<T, String>;

struct State<T> {
    ready: BTreeMap<u64, Produced<T>>,
    /// Next step a producer will claim.
    claimed: u64,
    /// Step the consumer receives next.
    consumer: u64,
    stop: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when a result lands.
    landed: Condvar,
    /// Signalled when the consumer advances or the pipeline stops.
    advanced: Condvar,
    depth: u64,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Prefetcher<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<T: Send + 'static> Prefetcher<T> {
    /// Starts `producers` threads computing `produce(step)` for steps
    /// `start, start+1, ...`, at most `depth` (≥ 1) ahead of the consumer.
    pub fn new<F>(start: u64, depth: usize, producers: usize, produce: F) -> Prefetcher<T>
    where
        F: Fn(u64) -> T + Send + Sync + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ready: BTreeMap::new(),
                claimed: start,
                consumer: start,
                stop: false,
            }),
            landed: Condvar::new(),
            advanced: Condvar::new(),
            depth: depth.max(1) as u64,
        });
        let produce = Arc::new(produce);
        let threads = (0..producers.max(1))
            .map(|i| {
                let shared = Arc::clone(&shared);
                let produce = Arc::clone(&produce);
                std::thread::Builder::new()
                    .name(format!("loaderx-prefetch-{i}"))
                    .spawn(move || producer_loop(&shared, &*produce))
                    .expect("spawning a prefetch thread")
            })
            .collect();
        Prefetcher {
            shared,
            threads: Mutex::new(threads),
        }
    }

    /// The step the next call to [`Prefetcher::next`] returns.
    #[cfg(test)]
    fn step(&self) -> u64 {
        self.shared.lock().consumer
    }

    /// Number of producer threads still attached.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.threads.lock().map(|t| t.len()).unwrap_or(0)
    }

    /// Blocks until the next step's result is ready and returns it with its
    /// step number; `None` once the pipeline is stopped.
    pub fn next(&self) -> Option<(u64, Produced<T>)> {
        let mut st = self.shared.lock();
        loop {
            if st.stop {
                return None;
            }
            let step = st.consumer;
            if let Some(value) = st.ready.remove(&step) {
                st.consumer += 1;
                drop(st);
                self.shared.advanced.notify_all();
                return Some((step, value));
            }
            st = self
                .shared
                .landed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Stops the producers, wakes any waiting consumer and joins every thread.
    /// Idempotent.
    pub fn close(&self) {
        {
            let mut st = self.shared.lock();
            st.stop = true;
            st.ready.clear();
        }
        self.shared.advanced.notify_all();
        self.shared.landed.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl<T: Send + 'static> Drop for Prefetcher<T> {
    fn drop(&mut self) {
        self.close();
    }
}

fn producer_loop<T, F: Fn(u64) -> T>(shared: &Shared<T>, produce: &F) {
    loop {
        let step = {
            let mut st = shared.lock();
            while !st.stop && st.claimed >= st.consumer + shared.depth {
                st = shared.advanced.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.stop {
                return;
            }
            st.claimed += 1;
            st.claimed - 1
        };
        let value = catch_unwind(AssertUnwindSafe(|| produce(step))).map_err(|p| {
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a prefetch worker panicked".to_string())
        });
        let mut st = shared.lock();
        if st.stop {
            return;
        }
        st.ready.insert(step, value);
        drop(st);
        shared.landed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    #[test]
    fn in_order_whatever_the_timing() {
        let p = Prefetcher::new(5, 4, 3, |s| {
            // later steps finish first
            std::thread::sleep(Duration::from_micros((10 - s % 10) * 200));
            s * 2
        });
        for want in 5..60 {
            let (step, v) = p.next().unwrap();
            assert_eq!(step, want);
            assert_eq!(v.unwrap(), want * 2);
        }
        assert_eq!(p.step(), 60);
    }

    #[test]
    fn bounded_ahead_of_the_consumer() {
        let max_claimed = Arc::new(AtomicU64::new(0));
        let m = Arc::clone(&max_claimed);
        let p = Prefetcher::new(0, 3, 2, move |s| {
            m.fetch_max(s, Ordering::SeqCst);
            s
        });
        std::thread::sleep(Duration::from_millis(50));
        // consumer at 0, depth 3: steps 0, 1, 2 at most
        assert!(max_claimed.load(Ordering::SeqCst) <= 2);
        assert_eq!(p.next().unwrap().1.unwrap(), 0);
        std::thread::sleep(Duration::from_millis(50));
        assert!(max_claimed.load(Ordering::SeqCst) <= 3);
    }

    #[test]
    fn panics_become_errors_and_close_joins() {
        let p = Prefetcher::new(0, 2, 2, |s| {
            if s == 1 {
                panic!("boom at {s}");
            }
            s
        });
        assert_eq!(p.next().unwrap().1.unwrap(), 0);
        let (step, err) = p.next().unwrap();
        assert_eq!(step, 1);
        assert!(err.unwrap_err().contains("boom at 1"));
        assert_eq!(p.next().unwrap().1.unwrap(), 2);
        p.close();
        assert_eq!(p.threads(), 0);
        assert!(p.next().is_none());
        p.close();
    }
}
