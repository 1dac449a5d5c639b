//! How a remote object's ranges are read: the storage options of hedging
//! and of the read timeout, and the typical first-byte latency that the
//! hedging delay follows (see `hedge.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a range is read: hedging and the timeout (storage options
/// `hedge`, `hedge_min_delay`, `hedge_multiple`, `read_timeout`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ReadPolicy {
    /// Whether a range that has not answered gets a duplicate request.
    pub(crate) hedge: bool,
    /// The least wait before a duplicate.
    pub(crate) hedge_min_delay: Duration,
    /// The wait before a duplicate, in typical first-byte latencies.
    pub(crate) hedge_multiple: f64,
    /// How long a range may go without a byte before it fails.
    pub(crate) read_timeout: Duration,
}

impl Default for ReadPolicy {
    fn default() -> ReadPolicy {
        ReadPolicy {
            hedge: true,
            hedge_min_delay: Duration::from_millis(50),
            hedge_multiple: 4.0,
            read_timeout: Duration::from_secs(30),
        }
    }
}

/// The wait before a duplicate when this process has seen no answer yet,
/// and the least wait while a round of several requests has had none.
pub(super) const FIRST_DELAY: Duration = Duration::from_millis(500);

/// The process's typical first-byte latency, in microseconds (0: none
/// seen yet): a moving average that weighs each new answer by 1/8.
static FIRST_BYTE_US: AtomicU64 = AtomicU64::new(0);

/// Records the first-byte latency of a ranged read that answered (the
/// small whole-object fetches of an open are not counted: they answer
/// faster than a gather's requests on connections not yet open).
pub(super) fn record_first_byte(d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    let _ = FIRST_BYTE_US.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some(if old == 0 {
            us
        } else {
            // old + (us - old) / 8, in signed arithmetic.
            (old as i128 + (us as i128 - old as i128) / 8).max(1) as u64
        })
    });
}

/// The typical first-byte latency so far, None before any answer.
pub(super) fn typical() -> Option<Duration> {
    match FIRST_BYTE_US.load(Ordering::Relaxed) {
        0 => None,
        us => Some(Duration::from_micros(us)),
    }
}

impl ReadPolicy {
    /// The wait before a duplicate now.
    pub(crate) fn hedge_delay(&self) -> Duration {
        match typical() {
            None => FIRST_DELAY.max(self.hedge_min_delay),
            Some(t) => t.mul_f64(self.hedge_multiple).max(self.hedge_min_delay),
        }
    }
}
