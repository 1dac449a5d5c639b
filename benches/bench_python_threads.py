"""Pure-Python throughput on 1 and N threads: what an interpreter gives a
Python-bound transform, without loaderx.

Each thread draws splitmix64 numbers in a pure-Python loop, in two styles:
``inline`` (the arithmetic written out in the loop) and ``called`` (one
function call per draw, as ``bench_loader.py``'s transforms do). The figure
is thousands of draws per second summed over the threads, best of
``--rounds``. Run it under a GIL build and a free-threaded build of the same
CPython to see what free threading costs on one thread and gains on several;
``bench_free_threaded.py`` does that and prints both. Standard library only,
so it runs on any interpreter::

    python benches/bench_python_threads.py [--threads 1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

MASK = (1 << 64) - 1


def _step(state: int) -> tuple[int, int]:
    # bench_loader._splitmix64, written again so that this file needs only
    # the standard library (bench_loader imports numpy).
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def draw_called(n: int, seed: int) -> int:
    state, acc = seed, 0
    for _ in range(n):
        state, z = _step(state)
        acc ^= z
    return acc


def draw_inline(n: int, seed: int) -> int:
    state, acc = seed, 0
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        acc ^= z ^ (z >> 31)
    return acc


STYLES = {"inline": draw_inline, "called": draw_called}


def measure(fn, threads: int, draws: int) -> float:
    """Thousands of draws per second over ``threads`` threads, each ``draws``."""
    results: list[int | None] = [None] * threads
    barrier = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        barrier.wait()
        results[i] = fn(draws, i + 1)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if any(r is None for r in results):
        raise RuntimeError("a thread did not finish its draws")
    return threads * draws / wall / 1000.0


def run(threads: list[int], draws: int, rounds: int) -> dict:
    out = {}
    for style, fn in STYLES.items():
        fn(10_000, 1)  # warm the specialising interpreter
        for n in threads:
            out[f"{style}/{n}"] = max(measure(fn, n, draws) for _ in range(rounds))
    return out


def describe() -> dict:
    gil = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
    return {"version": sys.version.split()[0], "gil_enabled": gil}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="bench_python_threads.py", description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (1,2)")
    p.add_argument("--draws", type=int, default=1_000_000, help="draws per thread (1,000,000)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; the best is kept (3)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)
    try:
        threads = [int(x) for x in args.threads.split(",") if x]
    except ValueError:
        p.error(f"--threads must be comma-separated ints, got {args.threads!r}")
    if not threads or min(threads) < 1:
        p.error(f"--threads must be >= 1, got {args.threads!r}")
    if args.draws < 1 or args.rounds < 1:
        p.error(f"--draws and --rounds must be >= 1, got {args.draws} and {args.rounds}")
    info = describe()
    got = run(threads, args.draws, args.rounds)
    if args.json:
        print(json.dumps({"interpreter": info, "threads": threads, "k_draws_s": got}))
        return
    print(f"Python {info['version']}, GIL enabled: {info['gil_enabled']}\n")
    print("| style | " + " | ".join(f"{n} thread(s) k draws/s" for n in threads) + " |")
    print("|---|" + "---:|" * len(threads))
    for style in STYLES:
        print(f"| {style} | " + " | ".join(f"{got[f'{style}/{n}']:.0f}" for n in threads) + " |")


if __name__ == "__main__":
    main()
