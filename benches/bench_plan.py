"""Runs pinned to their data: listing a run's records, and a loader whose
plan excludes records.

* ``provenance``: ``DataLoader.provenance`` of ``--steps`` steps of a
  global batch of ``--batch`` rows (cyclic, over 10 million records), in
  calls of ``--chunk`` steps each (a million steps of 1,024 rows is about
  a billion rows: 24 GB as one table, more than a small machine holds), with
  10 % of the records excluded at step 0 and without. Figure: record ids
  listed per second (the target: >= 50 M/s on 2 cores).
* ``loader``: the loader's batches per second (cyclic, batch ``--batch``,
  ``workers=0``, numpy output) over a store of ``--records`` records of
  64 float32 (256 bytes, zstd), with 10 % of the records excluded against
  none (the target: within 3 %). The two runs alternate (which one goes
  first alternates too), ``--rounds`` times each; the figure is the ratio
  of the medians.

    python benches/bench_plan.py --out benches/out/plan.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import loaderx
from loaderx.dataloader import DataLoader

HERE = Path(__file__).resolve().parent


def provenance(args) -> dict:
    n = 10_000_000
    root = tempfile.mkdtemp(prefix="loaderx-plan-")
    try:
        ids = loaderx.DenseStore.create(os.path.join(root, "id"), np.uint8, (), codec="raw")
        ids.append(np.zeros(n, np.uint8))
        out = {}
        rng = np.random.default_rng(0)
        banned = rng.choice(n, n // 10, replace=False)
        for label, exclude in (("none", None), ("10% excluded", banned)):
            with DataLoader({"id": ids}, batch_size=args.batch, workers=0, prefetch=1) as run:
                if exclude is not None:
                    run.exclude(exclude)
                run.provenance(range(0, 10))  # warm
                t0 = time.perf_counter()
                rows = 0
                for start in range(0, args.steps, args.chunk):
                    table = run.provenance(range(start, min(args.steps, start + args.chunk)))
                    rows += table.num_rows
                    del table
                dt = time.perf_counter() - t0
            out[label] = {"rows": rows, "seconds": dt, "ids_per_s": rows / dt}
        ids.close()
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def loader(args) -> dict:
    root = tempfile.mkdtemp(prefix="loaderx-plan-")
    try:
        n = args.records
        store = loaderx.DenseStore.create(os.path.join(root, "x"), np.float32, (64,))
        rng = np.random.default_rng(1)
        for lo in range(0, n, 100_000):
            store.append(rng.standard_normal((min(100_000, n - lo), 64)).astype(np.float32))
        banned = rng.choice(n, n // 10, replace=False)
        times = {"none": [], "10% excluded": []}
        for k in range(args.rounds):
            # Alternate which goes first, so that drift favours neither.
            for label in list(times)[:: 1 if k % 2 == 0 else -1]:
                with DataLoader({"x": store}, batch_size=args.batch, seed=3, workers=0) as run:
                    if label != "none":
                        run.exclude(banned)
                    for _ in range(20):  # warm
                        next(run)
                    t0 = time.perf_counter()
                    for _ in range(args.loader_steps):
                        next(run)
                    times[label].append(args.loader_steps / (time.perf_counter() - t0))
        store.close()
        med = {k: statistics.median(v) for k, v in times.items()}
        return {
            "batches_per_s": med,
            "runs": times,
            "ratio_excluded_vs_none": med["10% excluded"] / med["none"],
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--chunk", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--loader-steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", choices=["provenance", "loader"], default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "args": vars(args),
    }
    if args.only in (None, "provenance"):
        result["provenance"] = provenance(args)
        for label, r in result["provenance"].items():
            print(
                f"provenance {args.steps} steps x {args.batch} ({label}): "
                f"{r['seconds']:.2f} s, {r['ids_per_s'] / 1e6:.1f} M ids/s"
            )
    if args.only in (None, "loader"):
        result["loader"] = loader(args)
        med = result["loader"]["batches_per_s"]
        print(
            f"loader batch {args.batch}: none {med['none']:.0f} batches/s, 10% excluded "
            f"{med['10% excluded']:.0f} batches/s "
            f"({result['loader']['ratio_excluded_vs_none']:.3f}x)"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
