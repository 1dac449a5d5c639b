"""Parallel ingest into a sharded table against the single-writer ingest.

For each workload (dense-vision uint8 (3, 224, 224) as an Arrow
``fixed_shape_tensor`` column plus an int64 label; ragged-tokens int32 as an
Arrow ``List`` column plus an int64 label) and codec (raw, zstd), from two
sources of the same rows:

* ``table`` — an in-memory pyarrow Table:
  single = ``loaderx.arrow.ingest(table, root)`` (one writer, one store per
  column); parallel = ``loaderx.ingest_sharded(table, root, workers=W)``.
* ``parquet`` — a Parquet file (row groups of about 64 MiB, uncompressed
  pages so the reader is not the bottleneck):
  single = ``loaderx.parquet.ingest(file, root)`` (the native streaming
  reader); parallel = ``loaderx.ingest_sharded(file, root, workers=W)``
  (row groups split among the workers).

Each run writes into a fresh directory after an ``os.sync()`` (so no run
pays for the previous one's writeback); the configurations are interleaved
over ``--rounds`` rounds and the median wall time is reported (records/s,
logical GiB/s). Every written table is validated (row count, and a sample
of rows bit-exact against the source) before its time counts.

Run from the repository root with the project venv::

    .venv/bin/python benches/bench_ingest.py
    .venv/bin/python benches/bench_ingest.py --quick   # seconds-long smoke run

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/ingest.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads as wl  # noqa: E402
from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, GIB, MIB, log, write_json  # noqa: E402

CODECS = ("raw", "zstd")
SOURCES = ("table", "parquet")


def vision(n: int, seed: int):
    img = wl.dense_vision(n, seed)
    width = int(np.prod(img.shape[1:]))
    storage = pa.FixedSizeListArray.from_arrays(pa.array(img.reshape(-1)), width)
    tensor = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.uint8(), img.shape[1:]), storage
    )
    label = np.arange(n, dtype=np.int64) % 1000
    return pa.table({"image": tensor, "label": label}), {"image": img, "label": label}


def tokens(n: int, seed: int):
    toks = wl.ragged_tokens(n, seed)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum([len(t) for t in toks], out=offsets[1:])
    values = pa.array(np.concatenate(toks).astype(np.int32))
    col = pa.ListArray.from_arrays(pa.array(offsets), values)
    label = np.arange(n, dtype=np.int64) % 1000
    return pa.table({"tokens": col, "label": label}), {"tokens": toks, "label": label}


WORKLOADS = {
    "vision": dict(gen=vision, records=2000, quick_records=120),
    "tokens": dict(gen=tokens, records=400_000, quick_records=20_000),
}


def check(table, want: dict, n: int, seed: int) -> None:
    """The written table holds the source rows: count and a sample bit-exact."""
    if table.num_rows != n:
        raise AssertionError(f"{table.path}: {table.num_rows} rows, want {n}")
    pick = np.random.default_rng(seed).integers(0, n, 64)
    for name, src in want.items():
        got = table[name][pick]
        if isinstance(src, list):
            ok = all(np.array_equal(g, src[i]) for g, i in zip(got, pick))
        else:
            ok = np.array_equal(got, src[pick])
        if not ok:
            raise AssertionError(f"{table.path}: column {name!r} differs from the source")


def run(kind: str, source: str, codec: str, src, dest: Path, workers: int):
    import loaderx
    import loaderx.arrow
    import loaderx.parquet

    t0 = time.perf_counter()
    if kind == "single":
        if source == "table":
            stores = loaderx.arrow.ingest(src, dest, codec=codec)
        else:
            stores = loaderx.parquet.ingest(src, dest, codec=codec)
        elapsed = time.perf_counter() - t0
        for s in stores.values():
            s.close()
        return elapsed, loaderx.open_table(dest)
    table = loaderx.ingest_sharded(src, dest, codec=codec, workers=workers)
    return time.perf_counter() - t0, table


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_ingest.py", description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=("all", *WORKLOADS), default="all")
    p.add_argument("--codecs", default="raw,zstd")
    p.add_argument("--sources", default="table,parquet")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--records", type=int, help="records per workload (workload default)")
    p.add_argument("--rounds", type=int, help="interleaved rounds, median reported (3; 1 quick)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON directory")
    p.add_argument("--tmp", type=Path, default=Path("/tmp"), help="parent of the tables (/tmp)")
    args = p.parse_args(argv)
    args.codecs = [c for c in args.codecs.split(",") if c]
    args.sources = [c for c in args.sources.split(",") if c]
    if any(c not in CODECS for c in args.codecs):
        p.error(f"--codecs: choose from {','.join(CODECS)}")
    if any(s not in SOURCES for s in args.sources):
        p.error(f"--sources: choose from {','.join(SOURCES)}")
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="loaderx-ingest-", dir=args.tmp))
    machine, machine_text = describe_machine_and_build(root, ("loaderx", "pyarrow"))
    times: dict[tuple, list[float]] = {}
    geometry = {}
    try:
        inputs = {}
        for name in args.workloads:
            w = WORKLOADS[name]
            n = args.records or (w["quick_records"] if args.quick else w["records"])
            log(f"{name}: generating {n} records")
            table, want = w["gen"](n, args.seed)
            path = root / f"{name}.parquet"
            rows_per_group = max(1, int(n * (64 * MIB) / max(1, table.nbytes)))
            pq.write_table(table, path, row_group_size=rows_per_group, compression="none")
            inputs[name] = {"table": table, "parquet": str(path), "want": want, "n": n}
            geometry[name] = {
                "records": n,
                "logical_bytes": int(table.nbytes),
                "parquet_row_groups": pq.ParquetFile(path).metadata.num_row_groups,
            }
        configs = [
            (name, source, codec, kind)
            for name in args.workloads
            for source in args.sources
            for codec in args.codecs
            for kind in ("single", "parallel")
        ]
        k = 0
        for r in range(args.rounds):
            order = configs[r % len(configs) :] + configs[: r % len(configs)]
            for cfg in order:
                name, source, codec, kind = cfg
                inp = inputs[name]
                dest = root / f"out-{k}"
                k += 1
                os.sync()  # each run starts with no dirty pages of the last one
                elapsed, table = run(kind, source, codec, inp[source], dest, args.workers)
                with table:
                    check(table, inp["want"], inp["n"], args.seed + k)
                shutil.rmtree(dest)
                times.setdefault(cfg, []).append(elapsed)
                log(f"round {r + 1}/{args.rounds} {'-'.join(cfg)}: {elapsed:.3f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)

    results = {}
    for (name, source, codec, kind), ts in times.items():
        med = statistics.median(ts)
        g = geometry[name]
        results["-".join((name, source, codec, kind))] = {
            "workload": name,
            "source": source,
            "codec": codec,
            "kind": kind,
            "seconds": ts,
            "median_s": med,
            "krecords_s": g["records"] / med / 1e3,
            "gib_s": g["logical_bytes"] / med / GIB,
        }
    head = [
        "workload",
        "source",
        "codec",
        "single GiB/s",
        "parallel GiB/s",
        "krec/s par.",
        "par./single",
    ]
    rows = [head, ["---"] * 3 + ["---:"] * 4]
    for name in args.workloads:
        for source in args.sources:
            for codec in args.codecs:
                s = results[f"{name}-{source}-{codec}-single"]
                p = results[f"{name}-{source}-{codec}-parallel"]
                p["vs_single"] = s["median_s"] / p["median_s"]
                rows.append(
                    [
                        name,
                        source,
                        codec,
                        f"{s['gib_s']:.3f}",
                        f"{p['gib_s']:.3f}",
                        f"{p['krecords_s']:.1f}",
                        f"{p['vs_single']:.2f}×",
                    ]
                )
    sizes = "; ".join(
        f"{k}: {g['records']} records, {g['logical_bytes'] / MIB:.0f} MiB"
        for k, g in geometry.items()
    )
    print(f"# Parallel ingest into a sharded table{' (quick: smoke, not results)' * args.quick}")
    print()
    print(machine_text)
    print()
    print(f"Workloads: {sizes}. {args.workers} workers; median of {args.rounds} rounds.")
    print()
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    print()
    print(
        "- single: loaderx.arrow.ingest (table) or loaderx.parquet.ingest (file), one writer.\n"
        "- parallel: loaderx.ingest_sharded, one shard per task on the worker threads, "
        "committed at once.\n"
        "- GiB/s: the source's Arrow bytes over the wall time, page cache warm."
    )
    payload = {
        "benchmark": "ingest",
        "quick": args.quick,
        "machine": machine,
        "config": {"workers": args.workers, "rounds": args.rounds, "seed": args.seed},
        "workloads": geometry,
        "results": results,
    }
    out = write_json(args.out, "ingest" + ("-quick" if args.quick else ""), payload)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
