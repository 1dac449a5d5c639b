"""polars ``scan_table`` benchmark: a selective filter over a vision table.

Workload: N CHW uint8 images (default 20,000 × (3, 64, 64)) plus an int64
label with ten classes; ``label == 3`` selects about 10 %. The query is

    scan(...).filter(pl.col("label") == 3).select("image").collect()

timed for three contenders, each on the same rows:

* ``scan_table`` — ``loaderx.polars.scan_table(path)``: the predicate runs on
  the labels first and images are gathered for the survivors only;
* ``no pushdown`` — ``scan_table(path, pushdown=False)``: every image and
  label is gathered and polars filters afterwards;
* ``scan_parquet`` — ``pl.scan_parquet`` over the table exported by
  ``loaderx.parquet.export`` (zstd pages, the tensor type kept).

Each scan is built from a path inside the timed call (as ``scan_parquet``
is), so the loaderx times include opening the table; one more row,
``scan_table (raw, open Table)``, scans a table opened once beforehand.

The loaderx contenders run on a table with raw images and on one with zstd
images. Every contender's result is validated against NumPy before timing;
timing is interleaved rounds (order rotated each round), each round the
mean of as many calls as fit in ``--min-time``, reported as the median
round. JSON goes to ``benches/out/polars.json``, a markdown table to stdout.

    python benches/bench_polars.py [--records 20000] [--shape 3,64,64] [--rounds 7] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import loaderx  # noqa: E402
import loaderx.parquet  # noqa: E402
import loaderx.polars  # noqa: E402
from loaderx.zrecord import DenseStore  # noqa: E402

import _machine  # noqa: E402
import _workloads  # noqa: E402
from _timing import mean_call_seconds as run_once  # noqa: E402

LABEL = 3


def images_of(df, shape) -> np.ndarray:
    """The ``image`` column as an (n, *shape) array, whatever polars typed it as."""
    import polars as pl

    col = df["image"]
    if isinstance(col.dtype, pl.Array):
        return col.to_numpy()
    arr = col.to_arrow()
    if hasattr(arr, "storage"):
        arr = arr.storage
    return arr.flatten().to_numpy().reshape(len(col), *shape)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--shape", default="3,64,64")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out"))
    ap.add_argument("--tmp", default="/tmp")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.min_time = 2000, 2, 0.05
    import polars as pl

    shape = tuple(int(x) for x in args.shape.split(","))
    rng = np.random.default_rng(args.seed)
    images = np.empty((args.records, *shape), np.uint8)
    for i in range(args.records):
        _workloads._image_into(_workloads._rng(args.seed, _workloads._IMAGE_STREAM, i), images[i])
    labels = rng.integers(0, 10, args.records).astype(np.int64)
    want = images[labels == LABEL]
    root = tempfile.mkdtemp(prefix="loaderx-bench-polars-", dir=args.tmp)
    report: dict = {
        "workload": f"{args.records} x {shape} uint8 image + int64 label (10 classes)",
        "query": f'filter(pl.col("label") == {LABEL}).select("image").collect()',
        "selectivity": len(want) / args.records,
    }
    try:
        report["machine"] = _machine.describe_machine(
            Path(root), packages=("loaderx", "polars", "pyarrow")
        )
        tables = {}
        for codec in ("raw", "zstd"):
            path = os.path.join(root, codec)
            with DenseStore.create(os.path.join(path, "image"), np.uint8, shape, codec=codec) as s:
                s.append(images)
            with DenseStore.create(os.path.join(path, "label"), np.int64, ()) as s:
                s.append(labels)
            tables[codec] = path
        parquet = os.path.join(root, "t.parquet")
        with loaderx.open_table(tables["raw"]) as t:
            loaderx.parquet.export(t, parquet)
        report["parquet_bytes"] = os.path.getsize(parquet)
        report["logical_bytes"] = images.nbytes + labels.nbytes

        def query(lf):
            return lf.filter(pl.col("label") == LABEL).select("image").collect()

        contenders = {}
        for codec, path in tables.items():
            contenders[f"scan_table ({codec})"] = lambda path=path: query(
                loaderx.polars.scan_table(path)
            )
            contenders[f"no pushdown ({codec})"] = lambda path=path: query(
                loaderx.polars.scan_table(path, pushdown=False)
            )
        contenders["scan_parquet"] = lambda: query(pl.scan_parquet(parquet))
        # Informational: an open Table saves the open at each collect.
        held = loaderx.open_table(tables["raw"])
        contenders["scan_table (raw, open Table)"] = lambda: query(loaderx.polars.scan_table(held))

        # Validate every contender, and count the image bytes each loaderx one reads.
        image_bytes = {}
        for name, fn in contenders.items():
            df = fn()
            assert df.columns == ["image"], (name, df.columns)
            got = images_of(df, shape)
            assert got.shape == want.shape and np.array_equal(got, want), name
        for codec, path in tables.items():
            with loaderx.open_table(path) as t:
                for tag, pd in (("scan_table", True), ("no pushdown", False)):
                    before = t["image"]._native.read_counters()[1]
                    query(loaderx.polars.scan_table(t, pushdown=pd))
                    image_bytes[f"{tag} ({codec})"] = t["image"]._native.read_counters()[1] - before

        names = list(contenders)
        rounds = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                rounds[name].append(run_once(contenders[name], args.min_time))
        med = {name: statistics.median(ts) for name, ts in rounds.items()}
        results = {}
        for name in names:
            codec = "zstd" if "zstd" in name else "raw"
            base = "scan_table" if name.startswith("scan_table") else name
            results[name] = {
                "seconds_median": med[name],
                "seconds_rounds": rounds[name],
                "image_bytes_read": image_bytes.get(base if base == name else f"{base} ({codec})"),
                "vs_no_pushdown": (
                    med[f"no pushdown ({codec})"] / med[name]
                    if name.startswith("scan_table")
                    else None
                ),
                "vs_scan_parquet": med["scan_parquet"] / med[name],
            }
        report["results"] = results
        targets = {
            codec: {
                "speedup_over_no_pushdown": results[f"scan_table ({codec})"]["vs_no_pushdown"],
                "speedup_over_scan_parquet": results[f"scan_table ({codec})"]["vs_scan_parquet"],
            }
            for codec in tables
        }
        for t in targets.values():
            t["met"] = t["speedup_over_no_pushdown"] >= 5 and t["speedup_over_scan_parquet"] >= 1
        report["targets"] = targets

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "polars.json").write_text(json.dumps(report, indent=2) + "\n")

        m = report["machine"]
        print(
            f"{report['workload']}; {report['query']} selects {len(want)} rows "
            f"({report['selectivity']:.1%}); {m['cpu_model']}, {m['logical_cpus']} CPUs; "
            f"{m['date_utc']}; median of {args.rounds} rounds\n"
        )
        print("| contender | ms | image bytes read | vs no pushdown | vs scan_parquet |")
        print("|---|---:|---:|---:|---:|")
        for name, r in results.items():
            ib = r["image_bytes_read"]
            vs_np = r["vs_no_pushdown"]
            print(
                f"| {name} | {r['seconds_median'] * 1e3:.1f} | "
                f"{'—' if ib is None else f'{ib / 2**20:.1f} MiB'} | "
                f"{'—' if vs_np is None else f'{vs_np:.2f}×'} | {r['vs_scan_parquet']:.2f}× |"
            )
        for codec, t in targets.items():
            print(
                f"\n{codec}: {t['speedup_over_no_pushdown']:.1f}× over no pushdown (target ≥ 5×), "
                f"{t['speedup_over_scan_parquet']:.2f}× scan_parquet (target ≥ 1.0×): "
                f"{'met' if t['met'] else 'NOT met'}",
                end="",
            )
        print()
    finally:
        if "held" in locals():
            held.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
