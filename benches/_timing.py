"""Timing of the store benchmarks: the gather timer and the interleaved rounds.

Also the disk usage of a store (allocated blocks).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from _machine import measure_memcpy
from _report import GIB, log


class Gathers(Protocol):
    """What the rounds time of a backend: its gather of a batch of ids."""

    def gather(self, idx: np.ndarray) -> object: ...


# --------------------------------------------------------------------------
# Timing, disk
# --------------------------------------------------------------------------


def allocated_bytes(path: Path) -> int:
    """Allocated blocks (st_blocks * 512), summed over every file under ``path``."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_blocks * 512
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(d, f)).st_blocks * 512
    return total


def timed_gather(
    gather: Callable[[np.ndarray], object],
    plan: Sequence[np.ndarray],
    plan_bytes: Sequence[int],
    min_time: float,
) -> dict:
    """Repeat the complete plan until ``min_time`` has elapsed; time every batch.

    Only the gather call is timed; dropping the previous result happens
    between timings. The cyclic garbage collector is paused, as timeit does.
    """
    latencies: list[float] = []
    passes = 0
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        while True:
            for idx in plan:
                t0 = time.perf_counter()
                out = gather(idx)
                latencies.append(time.perf_counter() - t0)
                del out
            passes += 1
            if time.perf_counter() - start >= min_time:
                break
        wall = time.perf_counter() - start
    finally:
        if gc_was_enabled:
            gc.enable()
    lat = np.asarray(latencies)
    seconds = float(lat.sum())
    records = passes * sum(len(i) for i in plan)
    nbytes = passes * int(sum(plan_bytes))
    return {
        "passes": passes,
        "batches": len(latencies),
        "records": records,
        "bytes": nbytes,
        "seconds": seconds,
        "wall_seconds": wall,
        "gib_s": nbytes / seconds / GIB,
        "krecords_s": records / seconds / 1e3,
        "p50_ms": float(np.percentile(lat, 50)) * 1e3,
        "p95_ms": float(np.percentile(lat, 95)) * 1e3,
        "p99_ms": float(np.percentile(lat, 99)) * 1e3,
    }


def timed_rounds(
    opened: dict[str, Gathers],
    plan: list[np.ndarray],
    plan_bytes: list[int],
    min_time: float,
    rounds: int,
    memcpy_bytes: int,
    memcpy_threads: Sequence[int],
) -> tuple[dict[str, list[dict]], list[dict]]:
    """Times every open backend in ``rounds`` interleaved rounds.

    This VM's memory bandwidth drifts by tens of percent from minute to
    minute, so timing one backend after another would compare different
    machines. Instead each round times every backend once (the whole plan,
    repeated for ``min_time``), in an order rotated by one each round, and
    measures the memcpy limit alongside; each backend then reports its median
    round.
    """
    names = list(opened)
    per: dict[str, list[dict]] = {n: [] for n in names}
    memcpy: list[dict] = []
    for r in range(rounds):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            log(f"round {r + 1}/{rounds}: {name}: gather")
            per[name].append(timed_gather(opened[name].gather, plan, plan_bytes, min_time))
        memcpy.append(measure_memcpy(memcpy_bytes, memcpy_threads, min(min_time, 0.5)))
    return per, memcpy


def median_round(rounds: list[dict]) -> dict:
    """The round with the median gather rate (the lower middle of an even count)."""
    ordered = sorted(rounds, key=lambda g: g["gib_s"])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds_gib_s"] = [g["gib_s"] for g in rounds]
    return chosen


def mean_call_seconds(fn, min_time: float) -> float:
    """Mean seconds of one call of ``fn``, called again until at least
    ``min_time`` seconds have passed (after a garbage collection)."""
    gc.collect()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return dt / n
