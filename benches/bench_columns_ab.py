"""Same-run A/B of ``bench_columns.py``'s SQL and polars queries between two
builds of loaderx: the median of interleaved rounds of each query, and the
head/base ratio.

Each side is a Python interpreter with its build importable (a virtualenv,
or a wrapper script setting ``PYTHONPATH``). The workload is
``bench_columns.generate`` (``--rows`` rows), written once as a Parquet
file; each side ingests it with its own build (``ingest_sharded``, the
default layout, as ``bench_columns.py`` does) into its own table, so that
a base that cannot read the head's format still runs. Then ``--rounds``
rounds, base and head alternating (the first side alternates too), each a
fresh process that opens its table once and times every query of
``bench_columns.QUERIES`` through ``loaderx.sql`` and of
``bench_columns.polars_queries`` through ``loaderx.polars.scan_table``
(after one call that warms up and gives the answer, the mean of one call
repeated for ``--min-time`` seconds; answers checked equal between the
sides).

    python benches/bench_columns_ab.py --base PYTHON --head PYTHON
        [--rows 4000000] [--rounds 5] [--min-time 0.3] [--tmp DIR]

Prints a markdown table (query, base median, head median, head/base) and
writes every figure to ``benches/out/columns_ab.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def child(args) -> int:
    """One side's work, in that side's interpreter."""
    from bench_columns import QUERIES, canonical, polars_queries  # noqa: PLC0415

    import loaderx

    if args.child == "ingest":
        loaderx.ingest_sharded(args.parquet, args.table).close()
        return 0
    import polars as pl

    import loaderx.polars

    from _timing import mean_call_seconds as timed  # noqa: PLC0415

    out = {}
    with loaderx.open_table(args.table) as table:
        for name, q in QUERIES.items():
            fn = lambda q=q: loaderx.sql(q, t=table)  # noqa: E731
            res = canonical(fn())  # the first call (warm-up) gives the answer
            out[f"sql {name}"] = {"s": timed(fn, args.min_time), "result": res}
        for name, q in polars_queries(pl).items():
            fn = lambda q=q: q(loaderx.polars.scan_table(table)).collect()  # noqa: E731
            res = canonical(fn().to_arrow())  # warm-up
            out[f"polars {name}"] = {"s": timed(fn, args.min_time), "result": res}
    print(json.dumps(out))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_columns_ab.py")
    p.add_argument("--base", help="the base side's Python")
    p.add_argument("--head", help="the head side's Python")
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    p.add_argument("--out", type=Path, default=HERE / "out")
    p.add_argument("--child", choices=["ingest", "time"], help=argparse.SUPPRESS)
    p.add_argument("--parquet", help=argparse.SUPPRESS)
    p.add_argument("--table", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    if not (args.base and args.head):
        p.error("--base and --head are required")
    import pyarrow.parquet as pq
    from bench_columns import generate  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="loaderx-columns-ab-", dir=args.tmp))
    parquet = work / "data.parquet"
    pq.write_table(generate(args.rows, args.seed), parquet, compression="zstd")
    sides = {"base": args.base, "head": args.head}
    me = [str(Path(__file__).resolve())]
    for side, py in sides.items():
        table = work / side
        subprocess.run(
            [py, *me, "--child", "ingest", "--parquet", str(parquet), "--table", str(table)],
            check=True,
        )
    got: dict = {"base": [], "head": []}
    for r in range(args.rounds):
        order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
        for side in order:
            cmd = [sides[side], *me, "--child", "time", "--table", str(work / side)]
            cmd += ["--min-time", str(args.min_time)]
            run = subprocess.run(cmd, check=True, capture_output=True, text=True)
            got[side].append(json.loads(run.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}/{args.rounds} {side} done", file=sys.stderr)
    rows = []
    for q in got["head"][0]:
        want = got["base"][0][q]["result"]
        for side in got:
            for one in got[side]:
                if one[q]["result"] != want:
                    raise SystemExit(f"{q}: {side} answered {one[q]['result']!r}, base {want!r}")
        base = statistics.median(one[q]["s"] for one in got["base"])
        head = statistics.median(one[q]["s"] for one in got["head"])
        rows.append((q, base, head, head / base))
    print("| query | base median | head median | head / base |")
    print("|---|---:|---:|---:|")
    for q, base, head, ratio in rows:
        print(f"| {q} | {base * 1e3:.2f} ms | {head * 1e3:.2f} ms | {ratio:.3f}× |")
    args.out.mkdir(parents=True, exist_ok=True)
    figures = {
        "rows": args.rows,
        "rounds": args.rounds,
        "queries": {q: {"base_s": b, "head_s": h, "ratio": x} for q, b, h, x in rows},
        "all": {s: [{q: v["s"] for q, v in one.items()} for one in got[s]] for s in got},
    }
    (args.out / "columns_ab.json").write_text(json.dumps(figures, indent=1) + "\n")
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
