"""Arrow hand-off of loaderx: Arrow batches against NumPy batches, and a whole
store as Arrow against a memory-mapped Arrow IPC file.

Part ``loader`` and ``store`` (both workloads, codecs raw and zstd):

- ``loader``: ``DataLoader({"x": store}, batch_size, transform=None,
  prefetch=1, workers=0, output=...)``, the time inside ``next()`` per batch
  for ``output="arrow"`` against ``output="numpy"``. With ``workers=0`` and
  no transform ``next()`` takes the native prefetcher's batch and, for Arrow,
  wraps it in a ``pyarrow.RecordBatch``; with ``prefetch=1`` one gather is in
  flight, so ``next()`` waits for about one gather. Both loaders use the same
  seed and therefore gather the same indices at every step.
- ``store``: ``store.to_arrow(idx)`` against ``store[idx]`` per batch over one
  seeded random plan: the plain gather path, no prefetcher, nothing overlapped.

Target: Arrow takes at most 1.1x the NumPy time per batch.

Part ``ipc`` (dense vision, raw codec): ``store.to_arrow()`` of the whole store
against reading the same records from an uncompressed Arrow IPC file through
``pa.ipc.open_file(pa.memory_map(path)).read_all()``, written with the same
chunk boundaries as ``to_arrow()``. The IPC read is a lazy zero-copy view of
the mapping, so it is reported four ways: the lazy view alone (nothing read),
touching one byte per page (faults the mapping in, nothing copied), copying
each chunk into process memory, and ``combine_chunks()`` (one contiguous
copy). loaderx is reported as ``to_arrow()`` (chunked, materialised),
``to_arrow().combine_chunks()`` and ``to_arrow(slice(None))`` (one contiguous
Array in one pass). Every variant records whether its result lies inside a
memory mapping of the files (a view) or in process memory (materialised).

Workloads (generators shared with bench_dense.py and bench_ragged.py):

- ``vision``: 2,500 x (3, 224, 224) uint8 in a DenseStore, batch 256, 50 batches.
- ``tokens``: 200,000 int32 records of 16..512 tokens in a RaggedStore,
  batch 256, 100 batches.

Every result is validated against the source records before timing. Run from
the repository root::

    .venv/bin/python benches/bench_arrow.py                 # both workloads, every part
    .venv/bin/python benches/bench_arrow.py --workload vision --only ipc
    .venv/bin/python benches/bench_arrow.py --quick         # seconds-long smoke run

The markdown tables go to stdout, progress to stderr and everything measured
to ``benches/out/arrow[-<workload>].json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import mmap
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

import _workloads as wl
from _common import StoreMappings, ValidationError, Workload, _check_array
from _machine import (
    _affinity,
    _rates,
    _repeat,
    describe_machine,
    format_machine,
    measure_batch_copy,
    measure_memcpy,
)
from _report import DEFAULT_OUT, GIB, MIB, format_records, log, workload_stats, write_json
from _workloads import index_plan

WORKLOADS = {
    "vision": Workload(
        name="vision",
        make=wl.dense_vision,
        **wl.VISION_SIZES,
        describe="vision: {records} CHW RGB uint8 images of (3, 224, 224) in a DenseStore, "
        "{logical_mib:.1f} MiB logical; batches of {batch_size}.",
    ),
    "tokens": Workload(
        name="tokens",
        make=wl.ragged_tokens,
        **wl.TOKEN_SIZES,
        describe="tokens: {records} int32 records of 16..512 synthetic GPT-2-vocabulary tokens "
        "in a RaggedStore, {logical_mib:.1f} MiB logical; batches of {batch_size}.",
    ),
}
PARTS = ("loader", "store", "ipc")
CODECS = ("raw", "zstd")
TARGET = 1.1  # Arrow time per batch / NumPy time per batch
VALIDATE_STEPS = 4  # loader steps checked against the source per loader


# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_arrow.py",
        description="Arrow batches vs NumPy batches (DataLoader and store gather), and a "
        "whole store as Arrow vs a memory-mapped Arrow IPC file.",
    )
    p.add_argument("--workload", choices=["all", *sorted(WORKLOADS)], default="all")
    p.add_argument("--records", type=int, help="records (workload default; one workload only)")
    p.add_argument("--batches", type=int, help="batches in the plan (one workload only)")
    p.add_argument("--batch-size", type=int, help="records per batch (one workload only)")
    p.add_argument("--codecs", default=",".join(CODECS), help="loader/store codecs (raw,zstd)")
    p.add_argument("--only", help="comma-separated subset of parts: " + ",".join(PARTS))
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0, help="data and plan seed (default 0)")
    p.add_argument(
        "--min-time",
        type=float,
        help="seconds of timed batches per variant and round (default 1.0; 0.2 with --quick)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="interleaved NumPy/Arrow rounds per comparison, pooled (default 2)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument(
        "--tmp", type=Path, default=Path("/tmp"), help="parent of the store directory (/tmp)"
    )
    args = p.parse_args(argv)

    args.workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    sizes = ("records", "batches", "batch_size")
    if args.workload == "all" and any(getattr(args, f) is not None for f in sizes):
        p.error("--records, --batches and --batch-size need a single --workload")
    args.parts = _subset(p, "--only", args.only, PARTS)
    args.codecs = _subset(p, "--codecs", args.codecs, CODECS)
    if args.min_time is None:
        args.min_time = 0.2 if args.quick else 1.0
    if args.rounds < 1:
        p.error("--rounds must be positive")
    for f in sizes:
        v = getattr(args, f)
        if v is not None and v < 1:
            p.error(f"--{f.replace('_', '-')} must be positive")
    return args


def _subset(p, flag: str, value: str | None, choices) -> list[str]:
    if not value:
        return list(choices)
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in choices]
    if unknown:
        p.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
    return [n for n in choices if n in names]


def geometry(args, w: Workload) -> tuple[int, int, int]:
    if args.quick:
        d = (w.quick_records, w.quick_batch_size, w.quick_batches)
    else:
        d = (w.records, w.batch_size, w.batches)
    return (args.records or d[0], args.batch_size or d[1], args.batches or d[2])


def check_requirements() -> None:
    missing = []
    for mod, dist in (("pyarrow", "pyarrow"), ("loaderx.arrow", "loaderx")):
        try:
            importlib.import_module(mod)
        except ImportError as e:
            missing.append(f"  needs Python package '{dist}' (import {mod}): {e}")
    if missing:
        sys.exit("error: missing packages\n" + "\n".join(missing))


# --------------------------------------------------------------------------
# Validation of Arrow results
# --------------------------------------------------------------------------


def _values_view(arr) -> np.ndarray:
    """The flat values of a FixedSizeList / tensor array, a view of its buffer."""
    storage = arr.storage if hasattr(arr, "storage") else arr
    return storage.flatten().to_numpy(zero_copy_only=True)


def check_arrow(arr, records, idx: np.ndarray, maps: StoreMappings | None, what: str, want_type):
    """An Arrow array of the store's mapped type holding exactly records[idx]."""
    import pyarrow as pa

    if not isinstance(arr, pa.Array):
        raise ValidationError(f"{what}: expected pyarrow.Array, got {type(arr).__name__}")
    if arr.type != want_type:
        raise ValidationError(f"{what}: type {arr.type} != {want_type}")
    if len(arr) != len(idx) or arr.null_count:
        raise ValidationError(f"{what}: {len(arr)} rows, {arr.null_count} nulls for {len(idx)}")
    if isinstance(records, np.ndarray):
        got = _values_view(arr).reshape(len(idx), *records.shape[1:])
        _check_array(got, records[idx], what)
    else:
        data, shape = arr.field("data"), arr.field("shape")
        picked = [records[i] for i in idx.tolist()]
        sizes = np.fromiter((r.size for r in picked), dtype=np.int64, count=len(picked))
        got_sizes = data.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
        if not np.array_equal(got_sizes, sizes):
            raise ValidationError(f"{what}: record sizes differ")
        want_shapes = np.concatenate([np.asarray(r.shape, dtype=np.int32) for r in picked])
        _check_array(shape.flatten().to_numpy(), want_shapes, f"{what} shapes")
        got = data.flatten().to_numpy(zero_copy_only=True)
        _check_array(got, np.concatenate(picked), what)
    if maps is not None:
        maps.check(got, what)


def check_numpy(out, records, idx: np.ndarray, maps: StoreMappings | None, what: str) -> None:
    if isinstance(records, np.ndarray):
        _check_array(out, records[idx], what)
        if maps is not None:
            maps.check(out, what)
        return
    if not isinstance(out, list) or len(out) != len(idx):
        raise ValidationError(f"{what}: expected a list of {len(idx)} arrays")
    for j, i in enumerate(idx.tolist()):
        _check_array(out[j], records[i], f"{what} position {j} (record {i})")
        if maps is not None:
            maps.check(out[j], f"{what} position {j}")


def check_batch(batch, output: str, records, idx, maps, what: str, want_type) -> None:
    if output == "numpy":
        if not isinstance(batch, dict) or list(batch) != ["x"]:
            raise ValidationError(f"{what}: expected {{'x': ...}}, got {type(batch).__name__}")
        check_numpy(batch["x"], records, idx, maps, what)
        return
    import pyarrow as pa

    if not isinstance(batch, pa.RecordBatch) or batch.schema.names != ["x"]:
        raise ValidationError(f"{what}: expected a RecordBatch with column x, got {batch!r}")
    check_arrow(batch.column(0), records, idx, maps, what, want_type)


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def time_batches(fetch: Callable[[int], object], period: int, min_time: float) -> list[float]:
    """Calls ``fetch(k)`` for k = 0, 1, ... in whole periods until ``min_time``
    has passed; returns each call's latency. The previous result is dropped
    between timings; the cyclic garbage collector is paused."""
    lat: list[float] = []
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        k = 0
        while True:
            t0 = time.perf_counter()
            out = fetch(k)
            lat.append(time.perf_counter() - t0)
            del out
            k += 1
            if k % period == 0 and time.perf_counter() - start >= min_time:
                break
    finally:
        if enabled:
            gc.enable()
    return lat


def summarize(lat: list[float], nbytes: int, records: int) -> dict:
    a = np.asarray(lat)
    seconds = float(a.sum())
    return {
        "batches": len(lat),
        "records": records,
        "bytes": nbytes,
        "seconds": seconds,
        "ms_per_batch": seconds / len(lat) * 1e3,
        "gib_s": nbytes / seconds / GIB,
        "krecords_s": records / seconds / 1e3,
        "p50_ms": float(np.percentile(a, 50)) * 1e3,
        "p95_ms": float(np.percentile(a, 95)) * 1e3,
    }


def _sizes(records) -> np.ndarray:
    if isinstance(records, np.ndarray):
        return np.full(len(records), records[0].nbytes, dtype=np.int64)
    return np.fromiter((r.nbytes for r in records), dtype=np.int64, count=len(records))


def compare(rounds: int, run_one: Callable[[str, int], dict]) -> dict:
    """Interleaved rounds numpy, arrow, numpy, arrow, ...; pooled per output."""
    pooled: dict[str, list] = {"numpy": [], "arrow": []}
    for r in range(rounds):
        for output in ("numpy", "arrow"):
            pooled[output].append(run_one(output, r))
    out = {}
    for output, parts in pooled.items():
        lat = [x for p in parts for x in p["latencies"]]
        out[output] = summarize(
            lat, sum(p["bytes"] for p in parts), sum(p["records"] for p in parts)
        )
        out[output]["round_ms_per_batch"] = [float(np.mean(p["latencies"])) * 1e3 for p in parts]
    ratio = out["arrow"]["ms_per_batch"] / out["numpy"]["ms_per_batch"]
    out["arrow_over_numpy_time"] = ratio
    out["meets_target"] = ratio <= TARGET
    return out


# --------------------------------------------------------------------------
# Part loader / store
# --------------------------------------------------------------------------


def build_store(path: Path, records, codec: str):
    from loaderx.zrecord import DenseStore, RaggedStore

    if isinstance(records, np.ndarray):
        with DenseStore.create(path, records.dtype, records.shape[1:], codec=codec) as s:
            s.append(records)
        return DenseStore.open(path)
    with RaggedStore.create(path, records[0].dtype, codec=codec) as s:
        s.append(records)
    return RaggedStore.open(path)


def run_store_part(store, records, plan, plan_bytes, maps, args, want_type) -> dict:
    log(f"  store: validate {len(plan)} planned batches, both paths")
    for b, idx in enumerate(plan):
        check_numpy(store[idx], records, idx, maps, f"store[idx] batch {b}")
        check_arrow(store.to_arrow(idx), records, idx, maps, f"to_arrow(idx) batch {b}", want_type)
    maps.refresh()
    gather = {"numpy": store.__getitem__, "arrow": store.to_arrow}

    def run_one(output: str, r: int) -> dict:
        log(f"  store: time {output} (round {r + 1})")
        fn = gather[output]
        lat = time_batches(lambda k: fn(plan[k % len(plan)]), len(plan), args.min_time)
        passes = len(lat) // len(plan)
        return {
            "latencies": lat,
            "bytes": passes * int(sum(plan_bytes)),
            "records": passes * sum(len(i) for i in plan),
        }

    return compare(args.rounds, run_one)


def run_loader_part(store, records, sizes, batch_size, period, maps, args, want_type) -> dict:
    from loaderx.dataloader import DataLoader
    from loaderx.zsampler import Sampler

    n = len(records)
    sampler = Sampler(n, batch_size, Sampler.Mode.CYCLIC, seed=args.seed)

    def loader(output: str):
        return DataLoader(
            {"x": store},
            batch_size=batch_size,
            transform=None,
            mode="cyclic",
            seed=args.seed,
            prefetch=1,
            workers=0,
            output=output,
        )

    def run_one(output: str, r: int) -> dict:
        with loader(output) as ld:
            # Validate the first steps (round 1), or just warm up (later rounds).
            for step in range(VALIDATE_STEPS):
                batch = next(ld)
                if r == 0:
                    idx = sampler.at(step)
                    maps.refresh()
                    check_batch(
                        batch, output, records, idx, maps, f"{output} step {step}", want_type
                    )
                del batch
            log(f"  loader: time {output} (round {r + 1})")
            first = ld.step
            lat = time_batches(lambda k: next(ld), period, args.min_time)
        steps = range(first, first + len(lat))
        return {
            "latencies": lat,
            "bytes": int(sum(int(sizes[sampler.at(s)].sum()) for s in steps)),
            "records": len(lat) * batch_size,
        }

    return compare(args.rounds, run_one)


# --------------------------------------------------------------------------
# Part ipc
# --------------------------------------------------------------------------


def run_ipc_part(records: np.ndarray, root: Path, args) -> dict:
    import pyarrow as pa

    logical = int(records.nbytes)
    root.mkdir(parents=True)
    log("ipc: build the raw store and the IPC file with the same chunk boundaries")
    store = build_store(root / "image", records, "raw")
    try:
        chunked = store.to_arrow()
        bounds = np.cumsum([0] + [len(c) for c in chunked.chunks]).tolist()
        want_type = chunked.type
        del chunked
        path = root / "image.arrow"
        schema = pa.schema([pa.field("image", want_type, nullable=False)])
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                arr = pa.FixedShapeTensorArray.from_numpy_ndarray(records[lo:hi])
                writer.write_batch(pa.record_batch([arr.cast(want_type)], schema=schema))
        maps = StoreMappings(root)
        page = mmap.PAGESIZE

        def ipc_column():
            return pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all().column(0)

        def touch(col):
            total = 0
            for c in col.chunks:
                total += int(_values_view(c)[::page].sum())
            return col, total

        def copy_chunks(col):
            # A copy through pyarrow's memory pool, as loaderx's buffers come
            # from its own pool: a fresh np.array would add page faults that
            # are the allocator's, not the format's.
            return [pa.concat_arrays([c]) for c in col.chunks]

        variants = {
            "zrecord to_arrow()": (lambda: store.to_arrow(), "materialised, chunked"),
            "zrecord to_arrow().combine_chunks()": (
                lambda: store.to_arrow().combine_chunks(),
                "materialised, then copied into one Array",
            ),
            "zrecord to_arrow(slice(None))": (
                lambda: store.to_arrow(slice(None)),
                "materialised, one Array in one pass",
            ),
            "ipc read_all() (lazy)": (ipc_column, "zero-copy view of the mapping; nothing read"),
            "ipc read_all() + touch each page": (
                lambda: touch(ipc_column()),
                f"view; one byte per {page // 1024} KiB page read (page faults), nothing copied",
            ),
            "ipc read_all() + copy each chunk": (
                lambda: copy_chunks(ipc_column()),
                "materialised, chunked (pa.concat_arrays([chunk]) copies each chunk)",
            ),
            "ipc read_all().combine_chunks()": (
                lambda: ipc_column().combine_chunks(),
                "one contiguous Array (a copy when there is more than one chunk)",
            ),
        }

        log("ipc: validate every variant")
        flat = records.reshape(-1)
        view_of_file = {}
        for name, (fn, _) in variants.items():
            out = fn()
            maps.refresh()
            arrays = _result_arrays(out)
            view = False
            pos = 0
            for a in arrays:
                if isinstance(a, pa.Array):
                    if a.type != want_type:
                        raise ValidationError(f"{name}: type {a.type} != {want_type}")
                    a = _values_view(a)
                _check_array(a.reshape(-1), flat[pos : pos + a.size], name)
                pos += a.size
                try:
                    maps.check(a, name)
                except ValidationError:
                    view = True
            if pos != flat.size:
                raise ValidationError(f"{name}: {pos} of {flat.size} bytes")
            view_of_file[name] = view
            del out, arrays

        results = {}
        for name, (fn, what) in variants.items():
            log(f"ipc: time {name}")

            def once(fn=fn) -> None:
                fn()

            reps = _repeat(once, args.min_time)
            results[name] = {
                "what": what,
                "view_of_mapped_file": view_of_file[name],
                "best_s": min(reps),
                "median_s": float(np.median(reps)),
                **_rates(logical, reps),
            }
    finally:
        store.close()
    best = {k: v["best_gib_s"] for k, v in results.items()}
    ratios = {
        "to_arrow_vs_ipc_copy_each_chunk": best["zrecord to_arrow()"]
        / best["ipc read_all() + copy each chunk"],
        "to_arrow_slice_vs_ipc_combine_chunks": best["zrecord to_arrow(slice(None))"]
        / best["ipc read_all().combine_chunks()"],
        "to_arrow_combine_vs_ipc_combine_chunks": best["zrecord to_arrow().combine_chunks()"]
        / best["ipc read_all().combine_chunks()"],
        "to_arrow_vs_ipc_touch_pages": best["zrecord to_arrow()"]
        / best["ipc read_all() + touch each page"],
        "to_arrow_vs_ipc_lazy": best["zrecord to_arrow()"] / best["ipc read_all() (lazy)"],
    }
    return {
        "records": len(records),
        "logical_bytes": logical,
        "chunks": len(bounds) - 1,
        "chunk_rows": np.diff(bounds).tolist(),
        "arrow_type": str(want_type),
        "variants": results,
        "ratios": ratios,
    }


def _result_arrays(out) -> list:
    """The arrays of a variant's result, in record order."""
    import pyarrow as pa

    if isinstance(out, tuple):  # (column, touched sum)
        out = out[0]
    if isinstance(out, pa.ChunkedArray):
        return list(out.chunks)
    if isinstance(out, list):
        return out
    return [out]


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _ms(v: float) -> str:
    return f"{v:.3f}" if v < 1 else f"{v:.2f}"


def format_comparison(rows: list[tuple[str, str, str, dict]]) -> str:
    head = [
        "workload",
        "codec",
        "path",
        "numpy ms/batch",
        "arrow ms/batch",
        "numpy GiB/s",
        "arrow GiB/s",
        "numpy p95 ms",
        "arrow p95 ms",
        "arrow/numpy time",
        f"≤ {TARGET}×",
    ]
    out = [head, ["---", "---", "---"] + ["---:"] * (len(head) - 4) + [":---:"]]
    for workload, codec, path, r in rows:
        n, a = r["numpy"], r["arrow"]
        out.append(
            [
                workload,
                codec,
                path,
                _ms(n["ms_per_batch"]),
                _ms(a["ms_per_batch"]),
                f"{n['gib_s']:.2f}",
                f"{a['gib_s']:.2f}",
                _ms(n["p95_ms"]),
                _ms(a["p95_ms"]),
                f"{r['arrow_over_numpy_time']:.2f}×",
                "yes" if r["meets_target"] else "**no**",
            ]
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in out)


def format_ipc(ipc: dict) -> str:
    head = ["variant", "result", "view of file", "best s", "median s", "GiB/s (best)"]
    out = [head, ["---", "---", ":---:", "---:", "---:", "---:"]]
    for name, v in ipc["variants"].items():
        out.append(
            [
                name,
                v["what"],
                "yes" if v["view_of_mapped_file"] else "no",
                f"{v['best_s']:.4f}",
                f"{v['median_s']:.4f}",
                f"{v['best_gib_s']:.2f}",
            ]
        )
    r = ipc["ratios"]
    notes = [
        f"{ipc['records']} records, {ipc['logical_bytes'] / MIB:.1f} MiB, "
        f"{ipc['chunks']} chunk(s) of {sorted(set(ipc['chunk_rows']))} rows in both; "
        f"type {ipc['arrow_type']}.",
        "Ratios (loaderx GiB/s over IPC GiB/s, best reps):",
        f"- like for like, materialised chunked: to_arrow() / IPC copy each chunk = "
        f"{r['to_arrow_vs_ipc_copy_each_chunk']:.2f}×",
        f"- like for like, one contiguous Array: to_arrow(slice(None)) / IPC combine_chunks() = "
        f"{r['to_arrow_slice_vs_ipc_combine_chunks']:.2f}×; "
        f"to_arrow().combine_chunks() / IPC combine_chunks() = "
        f"{r['to_arrow_combine_vs_ipc_combine_chunks']:.2f}× (two copies against one)",
        f"- against a view that is not materialised: to_arrow() / IPC touch each page = "
        f"{r['to_arrow_vs_ipc_touch_pages']:.2f}×, to_arrow() / IPC lazy = "
        f"{r['to_arrow_vs_ipc_lazy']:.3g}×",
    ]
    table = "\n".join("| " + " | ".join(row) + " |" for row in out)
    return table + "\n\n" + "\n".join(notes)


NOTES = f"""\
- loader: time inside next() of DataLoader({{"x": store}}, transform=None,
  prefetch=1, workers=0); the Arrow loader also wraps the native batch in a
  pyarrow.RecordBatch there. Both outputs gather the same indices (same seed);
  rounds alternate numpy, arrow and are pooled. With prefetch=1 the next gather
  starts as soon as next() takes a batch, so per-batch time ≈ one gather.
- store: store[idx] against store.to_arrow(idx) over one random plan, nothing
  overlapped: the plain gather path and its hand-off.
- GiB/s is logical (uncompressed payload bytes / time inside the calls); p95 is
  one batch's latency. Target: arrow/numpy time ≤ {TARGET}×.
- ipc: see the notes under that table; every variant was validated against the
  source records, and "view of file" says whether its result lies inside a
  memory mapping of the store or IPC file (lazy) or in process memory."""


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def main(argv=None) -> dict:
    args = parse_args(argv)
    check_requirements()
    import pyarrow as pa

    single = args.workload if args.workload != "all" else ""
    run_name = "arrow" + (f"-{single}" if single else "") + ("-quick" if args.quick else "")
    store_dir = Path(tempfile.mkdtemp(prefix=f"loaderx-bench-{run_name}-", dir=args.tmp))
    results: dict = {}
    configs: dict = {}
    rows = []
    ipc = None
    try:
        machine = describe_machine(store_dir)
        if machine["store_filesystem"]["type"] in ("tmpfs", "ramfs"):
            log(f"warning: {store_dir} is on {machine['store_filesystem']['type']}, not a disk")
        cpus = len(_affinity())
        lim_time = 0.1 if args.quick else 0.5
        log("limits: memcpy")
        limits = {
            "memcpy": measure_memcpy(
                (32 if args.quick else 512) << 20, sorted({1, 2, cpus}), lim_time
            )
        }
        for name in args.workloads:
            w = WORKLOADS[name]
            n, batch_size, batches = geometry(args, w)
            log(f"{name}: generating {n} records (seed {args.seed})")
            t0 = time.perf_counter()
            records = w.make(n, args.seed)
            gen_s = time.perf_counter() - t0
            sizes = _sizes(records)
            plan = index_plan(n, batch_size, batches, args.seed)
            plan_bytes = [int(sizes[idx].sum()) for idx in plan]
            config = {
                "records": n,
                "batch_size": batch_size,
                "batches": batches,
                "logical_bytes": int(sizes.sum()),
                "logical_mib": float(sizes.sum()) / MIB,
                "mean_batch_bytes": float(np.mean(plan_bytes)),
                "generate_s": gen_s,
                **workload_stats(records),
            }
            config["describe"] = w.describe.format(**config)
            configs[name] = config
            if "loader" in args.parts or "store" in args.parts:
                if "batch_copy" not in limits:
                    limits["batch_copy"] = measure_batch_copy(int(np.mean(plan_bytes)), lim_time)
                results[name] = {}
                for codec in args.codecs:
                    log(f"{name}-{codec}: build the store")
                    path = store_dir / f"{name}-{codec}"
                    store = build_store(path, records, codec)
                    try:
                        maps = StoreMappings(path)
                        want_type = pa.field(store).type
                        res = results[name][codec] = {}
                        if "loader" in args.parts:
                            res["loader"] = run_loader_part(
                                store, records, sizes, batch_size, batches, maps, args, want_type
                            )
                            rows.append((name, codec, "loader next()", res["loader"]))
                        if "store" in args.parts:
                            res["store"] = run_store_part(
                                store, records, plan, plan_bytes, maps, args, want_type
                            )
                            rows.append((name, codec, "store gather", res["store"]))
                    finally:
                        store.close()
                        shutil.rmtree(path, ignore_errors=True)
            if "ipc" in args.parts and name == "vision":
                ipc = run_ipc_part(records, store_dir / "ipc", args)
                shutil.rmtree(store_dir / "ipc", ignore_errors=True)
            del records
            gc.collect()
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)

    payload = {
        "name": run_name,
        "config": {
            "quick": args.quick,
            "seed": args.seed,
            "min_time_s": args.min_time,
            "rounds": args.rounds,
            "parts": args.parts,
            "codecs": args.codecs,
            "target_arrow_over_numpy_time": TARGET,
            "loader": {"transform": None, "prefetch": 1, "workers": 0, "mode": "cyclic"},
            "workloads": configs,
        },
        "machine": machine,
        "limits": limits,
        "results": results,
        "ipc": ipc,
    }
    json_path = write_json(args.out, run_name, payload)

    print(f"## {run_name}\n")
    for config in configs.values():
        print(config["describe"])
        print(format_records(config))
    print("\nMachine:\n" + format_machine(machine) + "\n")
    mc = ", ".join(f"{t} thread(s) {v['best_gib_s']:.2f}" for t, v in limits["memcpy"].items())
    print(f"Limits measured in this run: memcpy (np.copyto, best rep, GiB/s): {mc}")
    if "batch_copy" in limits:
        bc = limits["batch_copy"]
        print(
            f"- one {bc['batch_bytes'] / MIB:.1f} MiB batch copied on 1 thread: reused buffer "
            f"{bc['prefaulted']['best_gib_s']:.2f} GiB/s, fresh np.empty "
            f"{bc['fresh']['best_gib_s']:.2f} GiB/s"
        )
    if rows:
        print("\n### Arrow vs NumPy batches\n")
        print(format_comparison(rows) + "\n")
        print(NOTES + "\n")
    if ipc is not None:
        print("### Whole dense-vision store (raw) as Arrow vs a memory-mapped Arrow IPC file\n")
        print(format_ipc(ipc) + "\n")
    print(f"JSON: {json_path}")
    return payload


if __name__ == "__main__":
    main()
