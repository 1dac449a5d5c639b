"""The differential SQL and polars suites, run long: random predicates
through ``loaderx.sql`` and ``loaderx.polars.scan_table`` on a columnar and
a records-layout table, each answer checked against DataFusion (and
polars) over the same rows in memory. Not a timing: a search for wrong
answers with more seeds than CI runs (python/tests/test_sql_differential.py
runs the same generators with fixed seeds).

    python benches/bench_sql_differential.py [--queries 20000] [--polars 2000] [--seed 100]

Every difference is printed with its seed and predicate; the exit status is
1 when there is one. A summary goes to ``benches/out/sql_differential.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import pyarrow as pa  # noqa: E402
from predicates import Polars, Sql, rows  # noqa: E402

import loaderx  # noqa: E402
import loaderx.polars  # noqa: E402

DEFAULT_OUT = Path(HERE) / "out"


def sql_run(tables: dict, data, seed: int, count: int, diffs: list) -> int:
    """``count`` predicates of ``seed`` on every table; the number the
    oracle answered."""
    gen = Sql(data, seed)
    answered = 0
    for k in range(count):
        where = gen.predicate()
        q = f"SELECT rid FROM t WHERE {where} ORDER BY rid"
        try:
            want = loaderx.sql(q, t=data)["rid"].to_pylist()
        except Exception:  # noqa: BLE001 - an evaluation error: no answer to compare
            continue
        answered += 1
        for label, t in tables.items():
            try:
                got = loaderx.sql(q, t=t)["rid"].to_pylist()
            except Exception as e:  # noqa: BLE001 - a difference too
                got = f"raised {type(e).__name__}: {e}"
            if got != want:
                diffs.append(
                    {"engine": "sql", "table": label, "seed": seed, "query": k, "where": where}
                )
                print(f"DIFFERENCE sql {label} seed {seed} query {k}: WHERE {where}", flush=True)
    return answered


def polars_run(tables: dict, data, seed: int, count: int, diffs: list) -> int:
    import polars as pl

    frame = pl.from_arrow(data)
    gen = Polars(pl, data, seed)
    answered = 0
    for k in range(count):
        p = gen.predicate()
        try:
            want = frame.filter(p)["rid"].sort().to_list()
        except Exception:  # noqa: BLE001 - polars refused it
            continue
        answered += 1
        for label, t in tables.items():
            try:
                got = loaderx.polars.scan_table(t).filter(p).select("rid").collect()
                got = got["rid"].sort().to_list()
            except Exception as e:  # noqa: BLE001 - a difference too
                got = f"raised {type(e).__name__}: {e}"
            if got != want:
                diffs.append(
                    {"engine": "polars", "table": label, "seed": seed, "query": k, "where": str(p)}
                )
                print(f"DIFFERENCE polars {label} seed {seed} query {k}: {p}", flush=True)
    return answered


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_sql_differential.py")
    p.add_argument("--queries", type=int, default=20_000, help="SQL predicates in all")
    p.add_argument("--polars", type=int, default=2_000, help="polars predicates in all")
    p.add_argument("--seed", type=int, default=100, help="first seed (CI uses 1..21)")
    p.add_argument("--per-seed", type=int, default=1_000)
    p.add_argument("--quick", action="store_true", help="200 SQL and 50 polars predicates")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.quick:
        args.queries, args.polars = 200, 50
    data = rows(pa)
    started = time.perf_counter()
    diffs: list = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for layout in ("columnar", "records"):
            paths[layout] = os.path.join(tmp, layout)
            loaderx.ingest_sharded(data, paths[layout], workers=2, shards=3, layout=layout).close()
        tables = {k: loaderx.open_table(v) for k, v in paths.items()}
        try:
            answered = {"sql": 0, "polars": 0}
            for engine, total, run in (
                ("sql", args.queries, sql_run),
                ("polars", args.polars, polars_run),
            ):
                seed, left = args.seed, total
                while left > 0:
                    n = min(args.per_seed, left)
                    answered[engine] += run(tables, data, seed, n, diffs)
                    print(
                        f"{engine} seed {seed}: {n} predicates, {len(diffs)} differences so far",
                        flush=True,
                    )
                    seed, left = seed + 1, left - n
        finally:
            for t in tables.values():
                t.close()
    summary = {
        "sql_predicates": args.queries,
        "polars_predicates": args.polars,
        "answered": answered,
        "tables": list(paths),
        "first_seed": args.seed,
        "differences": diffs,
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sql_differential.json").write_text(json.dumps(summary, indent=1))
    print(
        f"{args.queries} SQL and {args.polars} polars predicates "
        f"({answered['sql']} and {answered['polars']} answered by the oracle), "
        f"{len(diffs)} differences, {summary['seconds']} s"
    )
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
