"""Read-only opens shared across processes: aggregate random-gather throughput
and memory of N processes reading one store at once.

One ``DenseStore`` per workload (dense-vision uint8 (3, 224, 224), dense-tokens
int32[512]) and codec (raw, zstd). For each N in ``--procs`` the parent spawns
N processes (``multiprocessing.get_context("spawn")``); each opens the store
with ``DenseStore.open(path, readonly=True)`` (all N hold it at once, under the
shared lock), gathers one batch of its own seeded plan and checks it against
the source records, then waits at a common barrier. After it every process
gathers random batches of its plan for ``--seconds`` (nothing reads ``/proc``
meanwhile), meets a second barrier, and gathers for ``--memory-seconds`` more
while the parent samples each process's ``Pss`` and ``Rss`` from
``/proc/<pid>/smaps_rollup`` every 50 ms.

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_readonly.py
    .venv/bin/python benches/bench_readonly.py --workload vision --codecs raw
    .venv/bin/python benches/bench_readonly.py --quick      # seconds-long smoke run

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/readonly.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads as wl  # noqa: E402
from _machine import describe_machine_and_build  # noqa: E402
from _proc import MemorySampler  # noqa: E402
from _report import DEFAULT_OUT, GIB, MIB, _rate, log, write_json  # noqa: E402

WORKLOADS = {
    "vision": dict(gen=wl.dense_vision, dtype=np.uint8, shape=wl.IMAGE_SHAPE, **wl.VISION_SIZES),
    "tokens": dict(gen=wl.dense_tokens, dtype=np.int32, shape=(wl.TOKEN_BLOCK,), **wl.TOKEN_SIZES),
}
CODECS = ("raw", "zstd")
SAMPLE_S = 0.05
MEMORY_KEYS = ("Pss", "Rss", "Pss_Anon", "Pss_File")  # per process, bytes in the JSON


# --------------------------------------------------------------------------
# Worker (a spawned process)
# --------------------------------------------------------------------------


def _worker(path, plan, want, start, mem_start, seconds, mem_seconds, results, rank):
    """Opens ``path`` read-only, validates ``plan[0]`` against ``want``, then
    gathers the plan in a loop for ``seconds`` after ``start`` and for
    ``mem_seconds`` after ``mem_start`` (two barriers shared with the parent)."""
    try:
        from loaderx.zrecord import DenseStore

        store = DenseStore.open(path, readonly=True)
        if not store.readonly:
            raise AssertionError("store not opened read-only")
        got = store[plan[0]]
        if not isinstance(got, np.ndarray) or got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(
                f"rank {rank}: got {type(got).__name__} {getattr(got, 'shape', None)}, "
                f"want {want.dtype} {want.shape}"
            )
        if not np.array_equal(got, want):
            raise AssertionError(f"rank {rank}: validation batch differs from the source")
        del got, want
        results.put(("ready", rank, None))
    except BaseException as exc:  # report, then let the barrier break
        results.put(("error", rank, f"{type(exc).__name__}: {exc}"))
        start.abort()
        return

    def gather(duration: float) -> dict:
        nbytes = records = batches = 0
        k = 0
        t0 = time.monotonic()
        end = t0 + duration
        while True:
            out = store[plan[k]]
            nbytes += out.nbytes
            records += len(out)
            batches += 1
            k = (k + 1) % len(plan)
            t1 = time.monotonic()
            if t1 >= end:
                break
        return {"t0": t0, "t1": t1, "bytes": nbytes, "records": records, "batches": batches}

    start.wait()
    timed = gather(seconds)
    mem_start.wait()
    gather(mem_seconds)
    store.close()
    results.put(("done", rank, timed))


# --------------------------------------------------------------------------
# Parent
# --------------------------------------------------------------------------


def run_once(ctx, path: Path, plans, wants, args) -> dict:
    n = len(plans)
    start = ctx.Barrier(n + 1)
    mem_start = ctx.Barrier(n + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(
                str(path),
                plans[r],
                wants[r],
                start,
                mem_start,
                args.seconds,
                args.memory_seconds,
                results,
                r,
            ),
        )
        for r in range(n)
    ]
    for p in procs:
        p.start()
    try:
        for _ in range(n):
            kind, rank, payload = results.get(timeout=300)
            if kind == "error":
                raise RuntimeError(f"worker {rank}: {payload}")
        start.wait(timeout=60)
        mem_start.wait(timeout=args.seconds + 120)
        # Memory window: every process gathers; sample each one's smaps_rollup.
        mem = MemorySampler([p.pid for p in procs], interval=SAMPLE_S, keys=MEMORY_KEYS)
        mem.sample_for(args.memory_seconds)
        samples = mem.samples
        peak = [{k: v * 1024 for k, v in r.items()} for r in mem.per_root_peak]
        peak_sum_pss = (mem.peak_pss or {}).get("Pss", 0) * 1024
        peak_sum_rss = mem.peak_rss_kib * 1024
        timed = [None] * n
        for _ in range(n):
            kind, rank, payload = results.get(timeout=args.memory_seconds + 120)
            if kind == "error":
                raise RuntimeError(f"worker {rank}: {payload}")
            timed[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for p in procs:
        if p.exitcode != 0:
            raise RuntimeError(f"worker pid {p.pid} exited with {p.exitcode}")
    span = max(t["t1"] for t in timed) - min(t["t0"] for t in timed)
    total_bytes = sum(t["bytes"] for t in timed)
    total_records = sum(t["records"] for t in timed)
    return {
        "procs": n,
        "span_s": span,
        "bytes": total_bytes,
        "records": total_records,
        "gib_s": total_bytes / span / GIB,
        "krecords_s": total_records / span / 1e3,
        "per_process": timed,
        "memory": {
            "samples": samples,
            "per_process_peak": peak,
            "peak_sum_pss": peak_sum_pss,
            "peak_sum_rss": peak_sum_rss,
        },
    }


def build_store(root: Path, name: str, codec: str, records: np.ndarray) -> Path:
    from loaderx.zrecord import DenseStore

    path = root / f"{name}-{codec}"
    store = DenseStore.create(path, records.dtype, records.shape[1:], codec=codec)
    chunk = max(1, (64 << 20) // records[0].nbytes)
    for lo in range(0, len(records), chunk):
        store.append(records[lo : lo + chunk])
    store.close()
    # Warm the page cache so every round reads the same (cached) pages.
    for f in path.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(16 << 20):
                    pass
    return path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_readonly.py",
        description="N processes gathering from one store opened read-only at once.",
    )
    p.add_argument("--workload", choices=("all", *WORKLOADS), default="all")
    p.add_argument("--codecs", default="raw,zstd", help="comma-separated: raw,zstd")
    p.add_argument("--procs", default="1,2", help="comma-separated process counts (1,2)")
    p.add_argument("--records", type=int, help="records per store (workload default)")
    p.add_argument("--batch-size", type=int, help="records per batch (workload default)")
    p.add_argument("--batches", type=int, help="batches in each process's plan")
    p.add_argument("--seconds", type=float, help="timed gather window (3.0; 0.3 with --quick)")
    p.add_argument(
        "--memory-seconds", type=float, help="memory-sampling window (1.0; 0.3 with --quick)"
    )
    p.add_argument("--rounds", type=int, help="interleaved rounds, median reported (3; 1 quick)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument("--tmp", type=Path, default=Path("/tmp"), help="parent of the stores (/tmp)")
    args = p.parse_args(argv)
    args.codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    if not args.codecs or any(c not in CODECS for c in args.codecs):
        p.error(f"--codecs: choose from {','.join(CODECS)}")
    try:
        args.procs = sorted({int(x) for x in args.procs.split(",") if x.strip()})
    except ValueError:
        p.error("--procs must be comma-separated integers")
    if not args.procs or min(args.procs) < 1:
        p.error("--procs must be positive")
    q = args.quick
    args.seconds = args.seconds if args.seconds is not None else (0.3 if q else 3.0)
    args.memory_seconds = (
        args.memory_seconds if args.memory_seconds is not None else (0.3 if q else 1.0)
    )
    args.rounds = args.rounds or (1 if q else 3)
    args.workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    return args


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = mp.get_context("spawn")
    root = Path(tempfile.mkdtemp(prefix="loaderx-readonly-", dir=args.tmp))
    machine, machine_text = describe_machine_and_build(root, ("loaderx",))
    configs = []  # (workload, codec, path, procs, plans, wants)
    geometry = {}
    try:
        for name in args.workloads:
            w = WORKLOADS[name]
            n = args.records or (w["quick_records"] if args.quick else w["records"])
            bs = args.batch_size or (w["quick_batch_size"] if args.quick else w["batch_size"])
            nb = args.batches or (w["quick_batches"] if args.quick else w["batches"])
            log(f"{name}: generating {n} records")
            records = w["gen"](n, args.seed)
            geometry[name] = {
                "records": n,
                "batch_size": bs,
                "batches_per_plan": nb,
                "dtype": str(records.dtype),
                "item_shape": list(records.shape[1:]),
                "store_logical_bytes": int(records.nbytes),
            }
            # Process r of every run uses plan seed seed + 1 + r.
            plans = [wl.index_plan(n, bs, nb, args.seed + 1 + r) for r in range(max(args.procs))]
            wants = [records[plan[0]] for plan in plans]
            for codec in args.codecs:
                log(f"{name}-{codec}: writing the store")
                path = build_store(root, name, codec, records)
                for k in args.procs:
                    configs.append((name, codec, path, k, plans[:k], wants[:k]))
            del records

        rounds: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            order = configs[r % len(configs) :] + configs[: r % len(configs)]
            for name, codec, path, k, plans, wants in order:
                key = f"{name}-{codec}-n{k}"
                res = run_once(ctx, path, plans, wants, args)
                rounds.setdefault(key, []).append(res)
                log(
                    f"round {r + 1}/{args.rounds} {key}: {res['gib_s']:.3f} GiB/s, "
                    f"{res['krecords_s']:.1f} krec/s"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)

    results = {}
    for name, codec, _path, k, _p, _w in configs:
        key = f"{name}-{codec}-n{k}"
        rs = rounds[key]
        med = sorted(rs, key=lambda x: x["gib_s"])[len(rs) // 2]
        results[key] = {
            "workload": name,
            "codec": codec,
            "procs": k,
            "median": med,
            "rounds_gib_s": [x["gib_s"] for x in rs],
            "median_gib_s": statistics.median(x["gib_s"] for x in rs),
        }
    for res in results.values():
        base = results.get(f"{res['workload']}-{res['codec']}-n1")
        res["scaling_vs_n1"] = (
            res["median"]["gib_s"] / base["median"]["gib_s"] if base and res["procs"] != 1 else None
        )
        mem = res["median"]["memory"]
        rss = mem["peak_sum_rss"]
        res["sum_pss_vs_sum_rss"] = mem["peak_sum_pss"] / rss if rss else None

    head = [
        "store",
        "procs",
        "GiB/s",
        "krec/s",
        "rounds GiB/s",
        "vs N=1",
        "PSS per proc MiB",
        "RSS per proc MiB",
        "Σ PSS MiB",
        "Σ RSS MiB",
        "Σ PSS / Σ RSS",
    ]
    rows = [head, ["---", "---:"] + ["---:"] * (len(head) - 2)]
    for res in results.values():
        m = res["median"]
        mem = m["memory"]
        rows.append(
            [
                f"{res['workload']}-{res['codec']}",
                str(res["procs"]),
                _rate(m["gib_s"]),
                f"{m['krecords_s']:.1f}",
                ", ".join(_rate(v) for v in res["rounds_gib_s"]),
                _x(res["scaling_vs_n1"]),
                ", ".join(f"{p['Pss'] / MIB:.0f}" for p in mem["per_process_peak"]),
                ", ".join(f"{p['Rss'] / MIB:.0f}" for p in mem["per_process_peak"]),
                f"{mem['peak_sum_pss'] / MIB:.0f}",
                f"{mem['peak_sum_rss'] / MIB:.0f}",
                _x(res["sum_pss_vs_sum_rss"]),
            ]
        )
    table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    sizes = "; ".join(
        f"{k}: {g['records']} × {g['dtype']} {tuple(g['item_shape'])} "
        f"({g['store_logical_bytes'] / MIB:.0f} MiB), batch {g['batch_size']}"
        for k, g in geometry.items()
    )
    print(f"# Read-only opens shared across processes{' (quick: smoke, not results)' * args.quick}")
    print()
    print(machine_text)
    print()
    print(f"Workloads: {sizes}. Timed window {args.seconds:g} s, median of {args.rounds} rounds.")
    print()
    print(table)
    print()
    print(
        "- GiB/s, krec/s: logical bytes / records returned by all processes together, "
        "over the span from the first process's start to the last one's end.\n"
        "- vs N=1: the aggregate rate against one process on the same store.\n"
        "- PSS / RSS: each process's peak during the memory window (after the timed one); "
        "Σ: the peak of the per-sample sums. Shared page-cache pages of the store's mapped "
        "files count once in Σ PSS but once per process in Σ RSS."
    )
    payload = {
        "benchmark": "readonly",
        "quick": args.quick,
        "machine": machine,
        "config": {
            "codecs": args.codecs,
            "procs": args.procs,
            "seconds": args.seconds,
            "memory_seconds": args.memory_seconds,
            "rounds": args.rounds,
            "seed": args.seed,
            "sample_interval_s": SAMPLE_S,
        },
        "workloads": geometry,
        "results": results,
    }
    out = write_json(args.out, "readonly" + ("-quick" if args.quick else ""), payload)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
