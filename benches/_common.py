"""The store benchmarks' driver: workloads, backends, validation and the run.

A run has one workload and a list of backends. Each backend writes the same
records (timed), is validated against the source on every record and on every
batch of the random plan (untimed; this also warms the page cache). Then
every backend, still open, gathers the plan repeatedly for at least
``min_time`` seconds in each of several interleaved rounds (the order rotates
each round, and memcpy is measured in every round too); each reports its
median round, so a drift of the machine's memory bandwidth during the run
does not favour whichever backend ran at a good moment. Throughputs are
logical: uncompressed NumPy payload bytes returned by the public API divided by
the time spent inside the gather calls. The physical limits (memcpy on 1, 2 and
all threads; single-core zstd level-3 decode of the workload's own records) are
measured in the same process so that the ratios in the table compare numbers
taken under the same conditions.

The machine description and physical limits live in ``_machine.py``, the
gather timer and the interleaved rounds in ``_timing.py``, units, JSON and the
table in ``_report.py``.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import importlib
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from _machine import _read, describe_machine, format_limits, format_machine, measure_limits
from _plot import check_target as check_plot_target
from _plot import plot
from _report import (
    DEFAULT_OUT,
    GIB,
    MIB,
    TABLE_NOTES,
    compute_ratios,
    format_records,
    format_table,
    log,
    workload_stats,
    write_json,
)
from _timing import allocated_bytes, median_round, timed_rounds
from _workloads import index_plan

# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


class ValidationError(AssertionError):
    pass


class StoreMappings:
    """Address ranges of this process's mappings of files under one directory.

    A gather result whose data lies inside one of them is a lazy view of the
    store, not a result materialised in process memory.
    """

    def __init__(self, root: Path):
        self.root = str(Path(root).resolve())
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.refresh()

    def refresh(self) -> None:
        ranges = []
        for line in (_read("/proc/self/maps") or "").splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(self.root + "/"):
                a, b = parts[0].split("-")
                ranges.append((int(a, 16), int(b, 16)))
        ranges.sort()
        self.starts = [a for a, _ in ranges]
        self.ends = [b for _, b in ranges]

    def check(self, arr: np.ndarray, what: str) -> None:
        if arr.nbytes == 0 or not self.starts:
            return
        lo = arr.__array_interface__["data"][0]
        hi = lo + arr.nbytes
        k = bisect.bisect_right(self.starts, hi - 1) - 1
        if k >= 0 and self.ends[k] > lo:
            raise ValidationError(f"{what}: result is a view of a memory-mapped store file")


def _check_array(got: object, want: np.ndarray, what: str) -> None:
    if not isinstance(got, np.ndarray) or isinstance(got, np.memmap):
        raise ValidationError(f"{what}: expected numpy.ndarray, got {type(got).__name__}")
    if got.dtype != want.dtype:
        raise ValidationError(f"{what}: dtype {got.dtype} != {want.dtype}")
    if got.shape != want.shape:
        raise ValidationError(f"{what}: shape {got.shape} != {want.shape}")
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        raise ValidationError(f"{what}: values differ at {len(bad)} positions, first {bad[0]}")


def validate_dense(
    out: object, records: np.ndarray, idx: np.ndarray, maps: StoreMappings | None, what: str
) -> None:
    want = records[idx]
    _check_array(out, want, what)
    if maps is not None:
        maps.check(out, what)


def validate_ragged(
    out: object,
    records: Sequence[np.ndarray],
    idx: np.ndarray,
    maps: StoreMappings | None,
    what: str,
) -> None:
    if not isinstance(out, list):
        raise ValidationError(f"{what}: expected list of arrays, got {type(out).__name__}")
    if len(out) != len(idx):
        raise ValidationError(f"{what}: {len(out)} arrays for {len(idx)} indices")
    for j, i in enumerate(idx.tolist()):
        _check_array(out[j], records[i], f"{what} position {j} (record {i})")
        if maps is not None:
            maps.check(out[j], f"{what} position {j} (record {i})")


# --------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------


class Backend:
    """One store under test. Subclasses name their codec in ``name``.

    Life cycle: ``prepare`` (untimed, reusable input preparation), ``build``
    (timed: the public write path), ``finish`` (untimed: final durability
    barrier, close, reopen for reading), ``gather`` and ``disk_bytes``,
    ``close``.
    """

    name = "?"
    # (import name, pip distribution) pairs this backend needs; all are
    # imported before anything is timed, so no import lands in a timer.
    requires: tuple[tuple[str, str], ...] = ()

    def __init__(self, root: Path, dtype: np.dtype, item_shape: tuple[int, ...] | None):
        self.root = Path(root)
        self.dtype = np.dtype(dtype)
        self.item_shape = item_shape  # None for ragged workloads
        self.root.mkdir(parents=True)

    def prepare(self, records) -> None:
        pass

    def build(self, records) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def gather(self, idx: np.ndarray):
        raise NotImplementedError

    def disk_bytes(self) -> int:
        return allocated_bytes(self.root)

    def close(self) -> None:
        pass


def check_requirements(backends: Sequence[type[Backend]]) -> None:
    """Import every package the selected backends need; exit naming any missing."""
    missing = []
    needed = [("zstandard", "zstandard", "the zstd limit measurement")]
    for b in backends:
        needed += [(mod, dist, b.name) for mod, dist in b.requires]
    seen = set()
    for mod, dist, who in needed:
        if (mod, who) in seen:
            continue
        seen.add((mod, who))
        try:
            importlib.import_module(mod)
        except ImportError as e:
            missing.append(f"  {who}: needs Python package '{dist}' (import {mod}): {e}")
    if missing:
        hint = (
            "peers: pip install -r requirements/bench.txt; loaderx: build it into the "
            "venv (maturin develop / pip install .). Use --only to run a subset."
        )
        sys.exit("error: missing packages\n" + "\n".join(missing) + "\n" + hint)


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


@dataclass
class Workload:
    """One workload: how to make its records, and its default geometry."""

    name: str
    make: Callable[[int, int], object]
    records: int
    batch_size: int
    batches: int
    quick_records: int
    quick_batch_size: int
    quick_batches: int
    describe: str = ""
    extra: dict = field(default_factory=dict)


def parse_args(
    kind: str, workloads: dict[str, Workload], backends: dict[str, type[Backend]], argv=None
) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"bench_{kind}.py",
        description=f"Random-gather benchmark of {kind} record stores against peers.",
        epilog="Write timing: each backend's public build path is timed; reusable input "
        "preparation (zstd_dict's dictionary training) is not, nor is the final "
        "bulk durability barrier of Zrecord (sync/close), which happens after the "
        "timer; LMDB's commit, which fsyncs by default, is inside it. Compare "
        "durability with a dedicated benchmark, not this column.",
    )
    p.add_argument("--workload", choices=sorted(workloads), default="vision")
    p.add_argument("--records", type=int, help="number of records (workload default)")
    p.add_argument("--batches", type=int, help="batches in the random plan")
    p.add_argument("--batch-size", type=int, help="records per batch")
    p.add_argument(
        "--only",
        help="comma-separated subset of backends: " + ",".join(backends),
    )
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0, help="data and plan seed (default 0)")
    p.add_argument(
        "--min-time",
        type=float,
        help="seconds of repeated plan per backend (default 1.0; 0.2 with --quick)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        help="interleaved timing rounds; each backend reports its median round "
        "(default 5; 1 with --quick)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument(
        "--tmp", type=Path, default=Path("/tmp"), help="parent of the store directory (/tmp)"
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also draw the gather throughputs as a bar chart, FILE.svg or FILE.png "
        "(needs matplotlib; benches/plot.py replots a saved JSON)",
    )
    args = p.parse_args(argv)
    if args.plot is not None:
        try:
            check_plot_target(args.plot)
        except (ImportError, ValueError) as e:
            p.error(f"--plot: {e}")
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in backends]
        if unknown:
            p.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(backends)}")
        args.selected = [n for n in backends if n in names]
    else:
        args.selected = list(backends)
    wl = workloads[args.workload]
    if args.quick:
        args.records = args.records or wl.quick_records
        args.batch_size = args.batch_size or wl.quick_batch_size
        args.batches = args.batches or wl.quick_batches
        args.min_time = args.min_time if args.min_time is not None else 0.2
        args.rounds = args.rounds or 1
    else:
        args.records = args.records or wl.records
        args.batch_size = args.batch_size or wl.batch_size
        args.batches = args.batches or wl.batches
        args.min_time = args.min_time if args.min_time is not None else 1.0
        args.rounds = args.rounds or 5
    for flag in ("records", "batch_size", "batches", "rounds"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    return args


def _sizes(records) -> np.ndarray:
    if isinstance(records, np.ndarray):
        return np.full(len(records), records[0].nbytes if len(records) else 0, dtype=np.int64)
    return np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))


def build_backend(
    cls: type[Backend],
    root: Path,
    records,
    plan: list[np.ndarray],
    validate: Callable,
    spec: dict,
    logical_bytes: int,
) -> tuple[Backend, dict]:
    """Writes (timed) and validates one backend; returns it open, for timing."""
    name = cls.name
    # A throw-away store of a few records first, so one-time library set-up
    # (lazy initialisation, first-call caches) stays out of the write timer.
    warm = cls(root.with_name(root.name + ".warm-up"), **spec)
    try:
        sample = records[: min(len(records), 32)]
        warm.prepare(sample)
        warm.build(sample)
        warm.finish()
    finally:
        warm.close()
        shutil.rmtree(warm.root, ignore_errors=True)

    backend = cls(root, **spec)
    try:
        log(f"{name}: prepare")
        backend.prepare(records)
        gc.collect()
        log(f"{name}: write")
        t0 = time.perf_counter()
        backend.build(records)
        write_s = time.perf_counter() - t0
        backend.finish()
        disk = backend.disk_bytes()
        if name.endswith("-raw") and disk < 0.95 * logical_bytes:
            log(f"warning: {name} occupies {disk / logical_bytes:.2f} of the logical bytes")

        log(f"{name}: validate every record and every planned batch")
        maps = StoreMappings(root)
        n = len(records)
        step = max(len(plan[0]), 1)
        for lo in range(0, n, step):
            idx = np.arange(lo, min(lo + step, n), dtype=np.int64)
            out = backend.gather(idx)
            if lo == 0:
                maps.refresh()
            validate(out, records, idx, maps, f"{name} sweep {lo}")
        maps.refresh()
        for b, idx in enumerate(plan):
            out = backend.gather(idx)
            validate(out, records, idx, maps, f"{name} plan batch {b}")
        del out
    except BaseException:
        backend.close()
        raise
    return backend, {
        "write_s": write_s,
        "write_gib_s": logical_bytes / write_s / GIB,
        "disk_bytes": disk,
        "logical_over_disk": logical_bytes / disk if disk else None,
        "validated_records": n,
        "validated_batches": len(plan),
    }


def run(
    kind: str,
    workloads: dict[str, Workload],
    backends: dict[str, type[Backend]],
    validate: Callable,
    spec_of: Callable[[object], dict],
    argv=None,
) -> dict:
    args = parse_args(kind, workloads, backends, argv)
    selected = [backends[n] for n in args.selected]
    check_requirements(selected)
    wl = workloads[args.workload]
    run_name = f"{kind}-{wl.name}" + ("-quick" if args.quick else "")

    log(f"{run_name}: generating {args.records} records (seed {args.seed})")
    t0 = time.perf_counter()
    records = wl.make(args.records, args.seed)
    gen_s = time.perf_counter() - t0
    plan = index_plan(args.records, args.batch_size, args.batches, args.seed)
    sizes = _sizes(records)
    plan_bytes = [int(sizes[idx].sum()) for idx in plan]
    logical = int(sizes.sum())

    store_dir = Path(tempfile.mkdtemp(prefix=f"loaderx-bench-{run_name}-", dir=args.tmp))
    try:
        machine = describe_machine(store_dir)
        if machine["store_filesystem"]["type"] in ("tmpfs", "ramfs"):
            log(f"warning: {store_dir} is on {machine['store_filesystem']['type']}, not a disk")
        limits = measure_limits(records, int(np.mean(plan_bytes)), quick=args.quick)
        results: dict[str, dict] = {}
        opened: dict[str, Backend] = {}
        try:
            for cls in selected:
                opened[cls.name], results[cls.name] = build_backend(
                    cls, store_dir / cls.name, records, plan, validate, spec_of(records), logical
                )
            per, memcpy = timed_rounds(
                opened,
                plan,
                plan_bytes,
                args.min_time,
                args.rounds,
                (32 if args.quick else 512) << 20,
                [int(t) for t in limits["memcpy"]],
            )
        finally:
            for backend in opened.values():
                backend.close()
        for name, rounds in per.items():
            results[name]["gather"] = median_round(rounds)
        # The memcpy limit, like the backends: the median round's best rep.
        for t, v in limits["memcpy"].items():
            bests = [m[t]["best_gib_s"] for m in memcpy]
            v["before_rounds_best_gib_s"] = v["best_gib_s"]
            v["rounds_best_gib_s"] = bests
            v["best_gib_s"] = sorted(bests)[(len(bests) - 1) // 2]
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)

    ratios = compute_ratios(results, limits)
    config = {
        "kind": kind,
        "workload": wl.name,
        "quick": args.quick,
        "records": args.records,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "seed": args.seed,
        "min_time_s": args.min_time,
        "rounds": args.rounds,
        "logical_bytes": logical,
        "logical_mib": logical / MIB,
        "mean_batch_bytes": float(np.mean(plan_bytes)),
        "generate_s": gen_s,
        "backends": args.selected,
        **wl.extra,
        **workload_stats(records),
    }
    config["describe"] = wl.describe.format(**config)
    payload = {
        "name": run_name,
        "config": config,
        "machine": machine,
        "limits": limits,
        "results": results,
        "ratios": ratios,
    }
    path = write_json(args.out, run_name, payload)

    print(f"## {run_name}\n")
    print(config["describe"])
    print(format_records(config) + "\n")
    print("Machine:\n" + format_machine(machine) + "\n")
    print("Limits measured in this run:\n" + format_limits(limits) + "\n")
    print(format_table(results, ratios, logical) + "\n")
    print(TABLE_NOTES + "\n")
    print(f"JSON: {path}")
    if args.plot is not None:
        print(f"Chart: {plot(payload, args.plot)}")
    return payload
