//! The one backoff of the remote layer: how long to wait before the next
//! try of something that failed in a way worth retrying (a ranged read
//! whose body broke off, a conditional commit that lost a race). The
//! `object_store` client retries single requests itself, with its own
//! backoff; this one is for the loops loaderx runs around them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The wait before try `attempt + 1` (`attempt` counts the tries made so
/// far: 1, 2, ..): `base << attempt` (doubling, capped at `base << 6`),
/// plus a jitter drawn uniformly below that much again, so processes and
/// threads that failed together do not retry in lockstep.
pub(crate) fn backoff(attempt: u32, base: Duration) -> Duration {
    let step = base.saturating_mul(1u32 << attempt.min(6));
    let nanos = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
    step + Duration::from_nanos(jitter() % nanos.max(1))
}

/// A pseudo-random draw that differs between processes, threads and calls
/// (SplitMix64 over the process id, the clock and a counter).
fn jitter() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64 ^ d.as_secs());
    let mut z = (u64::from(std::process::id()) << 32)
        ^ clock
        ^ CALLS
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_jitter_and_is_capped() {
        let base = Duration::from_millis(20);
        for attempt in 1..12u32 {
            let step = base * (1 << attempt.min(6));
            for _ in 0..50 {
                let d = backoff(attempt, base);
                assert!(d >= step && d < step * 2, "{attempt}: {d:?}");
            }
        }
        // Draws differ (jitter), so racing committers spread out.
        let draws: std::collections::HashSet<Duration> =
            (0..20).map(|_| backoff(3, base)).collect();
        assert!(draws.len() > 1);
        assert_eq!(backoff(1, Duration::ZERO), Duration::ZERO);
    }
}
