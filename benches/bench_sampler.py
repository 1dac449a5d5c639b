"""Sampler benchmark: loaderx's ``Sampler`` against NumPy's ``Generator``.

Index batches per second of ``loaderx.zsampler.Sampler`` in IID and CYCLIC
mode over an index space of 1,000,000, batch sizes 64, 256, 1024 and 4096,
against NumPy's ``Generator``: IID is ``rng.integers(0, n, size=B)``; CYCLIC
is one ``rng.permutation(n)`` per epoch, amortised over the epoch's
``n // B`` batches (batch ``k`` is a slice of the permutation).

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_sampler.py
    .venv/bin/python benches/bench_sampler.py --quick     # seconds-long smoke run

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/sampler.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import argparse
import functools
import gc
import tempfile
import time
from pathlib import Path

import numpy as np

from _machine import describe_machine_and_build
from _report import DEFAULT_OUT, _target_cell, _x, log, write_json

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

SAMPLER_N = 1_000_000
SAMPLER_BATCH_SIZES = (64, 256, 1024, 4096)
SAMPLER_MODES = ("iid", "cyclic")
# Target of the IID row: loaderx batches/s over NumPy's.
SAMPLER_IID_TARGET = 1.5

DEFAULTS = {
    # name: (full run, --quick)
    "min_time": (1.0, 0.05),
}


# --------------------------------------------------------------------------
# Sampler
# --------------------------------------------------------------------------


class NumpyCyclic:
    """Without replacement, NumPy-style: one permutation per epoch, sliced."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n = n
        self.batch_size = batch_size
        self.per_epoch = n // batch_size
        self.rng = np.random.default_rng(seed)
        self.perm = None
        self.k = self.per_epoch  # the first call draws the first permutation

    def next(self) -> np.ndarray:
        if self.k == self.per_epoch:
            self.perm = self.rng.permutation(self.n)
            self.k = 0
        b = self.batch_size
        out = self.perm[self.k * b : (self.k + 1) * b]
        self.k += 1
        return out


def _check_indices(batch: object, n: int, batch_size: int, what: str) -> None:
    if not isinstance(batch, np.ndarray):
        raise AssertionError(f"{what}: expected numpy.ndarray, got {type(batch).__name__}")
    if batch.dtype != np.int64 or batch.shape != (batch_size,):
        raise AssertionError(f"{what}: got {batch.dtype} {batch.shape}, want int64 ({batch_size},)")
    if batch.min() < 0 or batch.max() >= n:
        raise AssertionError(f"{what}: index out of 0..{n - 1}: {batch.min()}..{batch.max()}")


def _check_cycle(batches: list[np.ndarray], n: int, what: str) -> None:
    """One cycle of batches: no index twice."""
    flat = np.concatenate(batches)
    distinct = np.unique(flat).size
    if distinct != flat.size:
        raise AssertionError(f"{what}: {flat.size - distinct} repeated indices within one cycle")


def validate_sampler(mode: str, n: int, batch_size: int, seed: int) -> None:
    """Shapes, dtypes, range, purity of ``at`` and (cyclic) one full cycle, both sides."""
    from loaderx.zsampler import Sampler

    lx = Sampler(n, batch_size, Sampler.Mode[mode.upper()], seed=seed)
    first = lx.next()
    what = f"loaderx {mode} B={batch_size}"
    _check_indices(first, n, batch_size, what)
    if not np.array_equal(lx.at(0), first) or lx.step != 1:
        raise AssertionError(f"{what}: at(0) differs from the first next(), or step != 1")
    if mode == "iid":
        _check_indices(np.random.default_rng(seed).integers(0, n, size=batch_size), n,
                       batch_size, f"numpy {mode} B={batch_size}")  # fmt: skip
        return
    per_epoch = n // batch_size
    _check_cycle([lx.at(k) for k in range(per_epoch)], n, what)
    ref = NumpyCyclic(n, batch_size, seed)
    cycle = [ref.next() for _ in range(per_epoch)]
    _check_indices(cycle[0], n, batch_size, f"numpy {mode} B={batch_size}")
    _check_cycle(cycle, n, f"numpy {mode} B={batch_size}")


def _calls_per_second(fn, chunk: int, min_time: float) -> float:
    """Calls ``fn`` in chunks of ``chunk`` until ``min_time`` has passed."""
    calls = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(chunk):
            fn()
        calls += chunk
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return calls / elapsed


def bench_sampler_case(mode: str, batch_size: int, args) -> dict:
    from loaderx.zsampler import Sampler

    n = SAMPLER_N
    validate_sampler(mode, n, batch_size, args.seed)
    lx = Sampler(n, batch_size, Sampler.Mode[mode.upper()], seed=args.seed)
    if mode == "iid":
        rng = np.random.default_rng(args.seed)
        numpy_next = functools.partial(rng.integers, 0, n, size=batch_size)
        chunk = 256
    else:
        numpy_next = NumpyCyclic(n, batch_size, args.seed).next
        chunk = n // batch_size  # whole epochs: every permutation is paid in full
    contenders = {"loaderx": lx.next, "numpy": numpy_next}
    for fn in contenders.values():  # warm-up
        _calls_per_second(fn, chunk, min(0.1, args.min_time))
    reps: dict[str, list[float]] = {k: [] for k in contenders}
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(args.reps):  # interleaved, so drift hits both sides alike
            for name, fn in contenders.items():
                reps[name].append(_calls_per_second(fn, chunk, args.min_time))
    finally:
        if was_enabled:
            gc.enable()
    lx_bps = float(np.median(reps["loaderx"]))
    np_bps = float(np.median(reps["numpy"]))
    ratio = lx_bps / np_bps
    target = SAMPLER_IID_TARGET if mode == "iid" else None
    return {
        "mode": mode,
        "batch_size": batch_size,
        "loaderx_batches_s": lx_bps,
        "numpy_batches_s": np_bps,
        "loaderx_mindices_s": lx_bps * batch_size / 1e6,
        "numpy_mindices_s": np_bps * batch_size / 1e6,
        "ratio_loaderx_vs_numpy": ratio,
        "target_ratio": target,
        "target_met": None if target is None else ratio >= target,
        "reps_batches_s": reps,
    }


def format_sampler_table(rows: list[dict]) -> str:
    head = [
        "mode",
        "batch",
        "loaderx batches/s",
        "NumPy batches/s",
        "loaderx Mindex/s",
        "NumPy Mindex/s",
        "loaderx/NumPy",
        "target",
    ]
    out = [head, ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---"]]
    for r in rows:
        target = r["target_ratio"]
        out.append(
            [
                r["mode"].upper(),
                str(r["batch_size"]),
                f"{r['loaderx_batches_s']:,.0f}",
                f"{r['numpy_batches_s']:,.0f}",
                f"{r['loaderx_mindices_s']:.1f}",
                f"{r['numpy_mindices_s']:.1f}",
                _x(r["ratio_loaderx_vs_numpy"]),
                "—" if target is None else _target_cell(r["target_met"], f"≥ {target:g}×"),
            ]
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in out)


SAMPLER_NOTES = """\
- loaderx: `Sampler(n, B, mode, seed).next()`, a fresh int64 array per call.
- NumPy IID: `rng.integers(0, n, size=B)` on `np.random.default_rng(seed)`.
- NumPy CYCLIC: `rng.permutation(n)` once per epoch, batch k is the slice
  `perm[k*B:(k+1)*B]` (a view); timing runs whole epochs of `n // B` batches
  on both sides, so the permutation is amortised exactly.
- batches/s: median over the repetitions, each at least the minimum time;
  loaderx and NumPy repetitions alternate. The cyclic garbage collector is
  paused while timing. Mindex/s = batches/s × B / 1e6."""


def run_sampler(args) -> dict:
    run_name = "sampler" + ("-quick" if args.quick else "")
    machine, machine_text = describe_machine_and_build(Path(tempfile.gettempdir()))
    rows = []
    for batch_size in SAMPLER_BATCH_SIZES:
        for mode in SAMPLER_MODES:
            log(f"sampler: {mode} B={batch_size}")
            rows.append(bench_sampler_case(mode, batch_size, args))
    config = {
        "kind": "sampler",
        "quick": args.quick,
        "n": SAMPLER_N,
        "batch_sizes": list(SAMPLER_BATCH_SIZES),
        "modes": list(SAMPLER_MODES),
        "seed": args.seed,
        "min_time_s": args.min_time,
        "reps": args.reps,
    }
    payload = {"name": run_name, "config": config, "machine": machine, "results": rows}
    path = write_json(args.out, run_name, payload)
    print(f"## {run_name}\n")
    print(
        f"Index batches over 0..{SAMPLER_N:,}, loaderx `Sampler` against NumPy's "
        f"`Generator`; median of {args.reps} repetitions of at least {args.min_time:g} s.\n"
    )
    print("Machine:\n" + machine_text + "\n")
    print(format_sampler_table(rows) + "\n")
    print(SAMPLER_NOTES + "\n")
    print(f"JSON: {path}\n")
    return payload


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_sampler.py",
        description="Sampler benchmark of loaderx against NumPy.",
    )
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument(
        "--tmp",
        type=Path,
        default=Path("/tmp"),
        help="parent of the data directory (/tmp; the sampler writes none)",
    )
    p.add_argument(
        "--min-time", type=float, help="seconds per repetition (default 1.0; 0.05 with --quick)"
    )
    p.add_argument("--reps", type=int, default=3, help="repetitions, median reported (default 3)")
    args = p.parse_args(argv)
    if args.min_time is None:
        args.min_time = DEFAULTS["min_time"][1 if args.quick else 0]
    if args.reps < 1:
        p.error("--reps must be positive")
    if args.min_time <= 0:
        p.error("--min-time must be > 0")
    return args


def main(argv=None) -> None:
    run_sampler(parse_args(argv))


if __name__ == "__main__":
    main()
