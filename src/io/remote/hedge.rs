//! Reads that do not wait on a stalled request.
//!
//! One range of a gather is read by [`read`]: a ranged GET, and, when no
//! byte of it has arrived and the rest of its round (the other requests
//! of the same gather) has made no progress either for a short delay, a
//! duplicate of it (a hedged request); the first answer wins and the other
//! is dropped, which cancels it. The delay adapts:
//! [`ReadPolicy::hedge_multiple`] times the typical first-byte latency this
//! process has seen (a moving average over the requests that answered),
//! never less than [`ReadPolicy::hedge_min_delay`]. Counting the delay from
//! the round's last progress, not from the request's start, tells a stall
//! from a queue: a server that is busy answering the round's other
//! requests is slow, not stalled, and duplicating its queue would only
//! lengthen it. A body that breaks off or stops coming is resumed from the
//! byte it reached, not fetched again whole. A range that gets no byte for
//! [`ReadPolicy::read_timeout`] after its first request went out fails as
//! `TimedOut` (Python's `TimeoutError`), however many requests are still
//! waiting. Every request, first or duplicate, holds one of the process's
//! request permits while it is in flight ([`runtime::Io::limited`]).
//!
//! A duplicate is sent only while no request of the range has answered: a
//! slow body is not duplicated (it is resumed when it stops), and with no
//! stall nothing is sent twice.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use object_store::{GetOptions, GetRange};
use tokio::time::Instant;

use super::object::Object;
use super::policy::{record_first_byte, typical, ReadPolicy, FIRST_DELAY};
use super::{fetch, retry, runtime, BODY_BACKOFF, BODY_TRIES};

/// Requests in flight for one range at most (the first and duplicates).
const IN_FLIGHT: usize = 3;

/// Duplicates of one range at most, in all.
const HEDGES: u32 = 4;

impl ReadPolicy {
    /// The wait before a duplicate in `round`, where `n` requests are in
    /// flight: at least `hedge_multiple / 2` times `n` typical latencies,
    /// since a server that shares itself among them (as a busy one does)
    /// may take that long over each; and while none of them has answered,
    /// at least [`FIRST_DELAY`] unless the range is alone (a burst on
    /// connections not yet open answers late, and all at once).
    fn hedge_delay_in(&self, round: &Round) -> Duration {
        let mut d = self.hedge_delay();
        let n = round.in_flight.load(Ordering::Relaxed).max(1);
        if n > 1 && !round.answered_any() {
            d = d.max(FIRST_DELAY);
        }
        match typical() {
            Some(t) => d.max(t.mul_f64(n as f64 * self.hedge_multiple / 2.0)),
            None => d,
        }
    }
}

/// How one request of a range ended.
enum Outcome {
    /// No answer: the client's own retries ran out (or the request was
    /// refused for good).
    GaveUp(io::Error),
    /// Every byte from `from` to the end of the range.
    Done { from: u64, chunks: Vec<Bytes> },
    /// The bytes from `from` that came before the request failed.
    Broke {
        from: u64,
        chunks: Vec<Bytes>,
        error: io::Error,
        /// The object changed, is gone or refused us: no retry helps.
        fatal: bool,
    },
}

/// When something last happened: microseconds after a start.
struct Clock {
    started: Instant,
    last_us: AtomicU64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            started: Instant::now(),
            last_us: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let us = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.last_us.fetch_max(us, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.started + Duration::from_micros(self.last_us.load(Ordering::Relaxed))
    }
}

/// The requests of one gather (every range of every object it reads):
/// when any of them last answered or received bytes, and how many are in
/// flight.
pub(crate) struct Round {
    clock: Clock,
    in_flight: AtomicUsize,
}

impl Round {
    pub(crate) fn new() -> Round {
        Round {
            clock: Clock::new(),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn answered_any(&self) -> bool {
        self.clock.last_us.load(Ordering::Relaxed) > 0
    }
}

/// Counts a request in flight in its round while it lives (dropping a
/// cancelled request's future counts it out too).
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn new(n: &'a AtomicUsize) -> InFlight<'a> {
        n.fetch_add(1, Ordering::Relaxed);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one request reports as it goes: to its range (sent, answered,
/// bytes) and to its round (answered, bytes).
struct Progress<'a> {
    range: &'a Clock,
    round: &'a Round,
}

impl Progress<'_> {
    /// A request went out: the range's clock starts at its first one (a
    /// later duplicate is not progress).
    fn sent(&self) {
        let us = u64::try_from(self.range.started.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = self
            .range
            .last_us
            .compare_exchange(0, us, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn arrived(&self) {
        self.range.touch();
        self.round.clock.touch();
    }
}

fn transient(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::TimedOut
            | io::ErrorKind::NotConnected
            | io::ErrorKind::UnexpectedEof
    )
}

/// One ranged GET of `from..end` of `obj` and its body, holding a request
/// permit. `answered` is set when the response's headers arrive.
async fn request(
    obj: &Object,
    from: u64,
    end: u64,
    answered: &AtomicBool,
    progress: &Progress<'_>,
    stall: Duration,
) -> Outcome {
    let io = match runtime::io() {
        Ok(io) => io,
        Err(error) => {
            return Outcome::Broke {
                from,
                chunks: Vec::new(),
                error,
                fatal: true,
            }
        }
    };
    io.limited(async {
        let opts = GetOptions {
            range: Some(GetRange::Bounded(from..end)),
            if_match: obj.pin.if_match(),
            ..Default::default()
        };
        fetch::stats().requests.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        progress.sent();
        let _in_flight = InFlight::new(&progress.round.in_flight);
        let res = match obj.store.get_opts(&obj.key, opts).await {
            Ok(res) => res,
            // The client retried what was worth retrying (up to
            // max_retries and retry_timeout): this request is done for,
            // though a sibling may still answer.
            Err(e) => return Outcome::GaveUp(obj.error("reading", e)),
        };
        record_first_byte(sent.elapsed());
        answered.store(true, Ordering::Relaxed);
        progress.arrived();
        if let Err(error) = obj.check_version(&res.meta) {
            return Outcome::Broke {
                from,
                chunks: Vec::new(),
                error,
                fatal: true,
            };
        }
        let mut body = res.into_stream();
        let mut chunks = Vec::new();
        let mut got = 0u64;
        loop {
            match tokio::time::timeout(stall, body.next()).await {
                Ok(Some(Ok(b))) => {
                    got += b.len() as u64;
                    fetch::stats()
                        .bytes
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    progress.arrived();
                    chunks.push(b);
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    let error = obj.error("reading", e);
                    let fatal = !transient(error.kind());
                    return Outcome::Broke {
                        from,
                        chunks,
                        error,
                        fatal,
                    };
                }
                Err(_) => {
                    return Outcome::Broke {
                        from,
                        chunks,
                        error: io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                            "reading {} bytes {from}..{end}: the body stopped after {got} bytes",
                            obj.path.display()
                        ),
                        ),
                        fatal: false,
                    }
                }
            }
        }
        if from + got == end {
            Outcome::Done { from, chunks }
        } else {
            Outcome::Broke {
                from,
                chunks,
                error: io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    format!(
                        "reading {} bytes {from}..{end}: the server sent {got} of {} bytes",
                        obj.path.display(),
                        end - from
                    ),
                ),
                fatal: false,
            }
        }
    })
    .await
}

/// Appends to `have` the bytes of `chunks` (which start at `from`) past
/// `reached`, and returns the new `reached`.
fn keep(have: &mut Vec<Bytes>, reached: u64, from: u64, chunks: Vec<Bytes>) -> u64 {
    let mut at = from;
    let mut reached = reached;
    for c in chunks {
        let end = at + c.len() as u64;
        if end > reached {
            have.push(c.slice((reached.max(at) - at) as usize..));
            reached = end;
        }
        at = end;
    }
    reached
}

/// The bytes `range` of `obj`'s pinned version, one of the ranges of
/// `round`: hedged, resumed and bounded in time as the module says.
pub(crate) async fn read(obj: &Object, range: Range<u64>, round: &Round) -> io::Result<Bytes> {
    let policy = obj.reads;
    let clock = Clock::new();
    let progress = Progress {
        range: &clock,
        round,
    };
    let mut have: Vec<Bytes> = Vec::new();
    let mut reached = range.start;
    let mut failures = 0u32;
    let mut last_error: Option<io::Error> = None;
    // The requests in flight, each with its answered flag.
    let mut running = FuturesUnordered::new();
    let mut answered: Vec<(usize, Arc<AtomicBool>)> = Vec::new();
    let mut next_id = 0usize;
    // A body that stops coming is given up after this long (and resumed).
    let stall = (policy.hedge_delay() * 8)
        .max(Duration::from_secs(1))
        .min(policy.read_timeout);
    let mut launch = |from: u64,
                      running: &mut FuturesUnordered<_>,
                      answered: &mut Vec<(usize, Arc<AtomicBool>)>| {
        let id = next_id;
        next_id += 1;
        let flag = Arc::new(AtomicBool::new(false));
        answered.push((id, flag.clone()));
        let progress = &progress;
        let end = range.end;
        running.push(async move {
            let out = request(obj, from, end, &flag, progress, stall).await;
            (id, out)
        });
        Instant::now()
    };
    let mut launched = launch(reached, &mut running, &mut answered);
    let mut hedges = 0u32;
    loop {
        // Nothing counts against the timeout before a request went out
        // (the range may wait for a permit behind other gathers).
        let idle_at =
            (clock.last_us.load(Ordering::Relaxed) > 0).then(|| clock.last() + policy.read_timeout);
        let hedge_at = policy
            .hedge
            .then(|| launched.max(round.clock.last()) + policy.hedge_delay_in(round));
        let wake = match (idle_at, hedge_at) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => Instant::now() + policy.read_timeout,
        };
        match tokio::time::timeout_at(wake, running.next()).await {
            Ok(Some((id, outcome))) => {
                answered.retain(|(i, _)| *i != id);
                match outcome {
                    Outcome::GaveUp(error) => {
                        let transient = transient(error.kind());
                        if running.is_empty() || !transient {
                            return Err(error);
                        }
                        last_error = Some(error);
                    }
                    Outcome::Done { from, chunks } => {
                        keep(&mut have, reached, from, chunks);
                        return Ok(fetch::join(have));
                    }
                    Outcome::Broke {
                        from,
                        chunks,
                        error,
                        fatal,
                    } => {
                        reached = keep(&mut have, reached, from, chunks);
                        if reached == range.end {
                            return Ok(fetch::join(have));
                        }
                        if fatal {
                            return Err(error);
                        }
                        failures += 1;
                        if failures >= BODY_TRIES {
                            return Err(error);
                        }
                        last_error = Some(error);
                        if running.is_empty() {
                            fetch::stats().retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(retry::backoff(failures, BODY_BACKOFF)).await;
                            launched = launch(reached, &mut running, &mut answered);
                        }
                    }
                }
            }
            Ok(None) => {
                // Nothing in flight (cannot happen: a failure relaunches).
                return Err(last_error.unwrap_or_else(|| io::Error::other("a read ended early")));
            }
            Err(_) => {
                let now = Instant::now();
                if idle_at.is_some_and(|at| now >= at) {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "reading {} bytes {}..{}: the server did not answer in time (no byte for {:?}; storage option \"read_timeout\")",
                            obj.path.display(),
                            range.start,
                            range.end,
                            policy.read_timeout
                        ),
                    ));
                }
                if hedge_at.is_some_and(|at| now >= at) {
                    let none_answered = answered.iter().all(|(_, a)| !a.load(Ordering::Relaxed));
                    if none_answered && running.len() < IN_FLIGHT && hedges < HEDGES {
                        hedges += 1;
                        fetch::stats().hedges.fetch_add(1, Ordering::Relaxed);
                        launched = launch(reached, &mut running, &mut answered);
                    } else {
                        // Wait a whole delay again before looking.
                        launched = now;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_bytes_start_where_the_last_ones_ended() {
        let mut have = Vec::new();
        let b = |s: &'static [u8]| Bytes::from_static(s);
        let r = keep(&mut have, 10, 10, vec![b(b"abc"), b(b"de")]);
        assert_eq!(r, 15);
        // A request from an earlier offset adds only what is new.
        let r = keep(&mut have, r, 12, vec![b(b"cdefg")]);
        assert_eq!(r, 17);
        let r = keep(&mut have, r, 10, vec![b(b"abcde")]);
        assert_eq!(r, 17);
        assert_eq!(fetch::join(have).as_ref(), b"abcdefg");
    }

    #[test]
    fn the_hedge_delay_has_a_floor_and_follows_latency() {
        let p = ReadPolicy {
            hedge_min_delay: Duration::from_millis(50),
            hedge_multiple: 4.0,
            ..ReadPolicy::default()
        };
        for _ in 0..64 {
            record_first_byte(Duration::from_millis(30));
        }
        let d = p.hedge_delay();
        assert!(
            d >= Duration::from_millis(100) && d <= Duration::from_millis(140),
            "{d:?}"
        );
        for _ in 0..64 {
            record_first_byte(Duration::from_millis(1));
        }
        assert_eq!(p.hedge_delay(), Duration::from_millis(50));
    }
}
