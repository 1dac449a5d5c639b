"""Scalar and text columns stored as columns, against the engines people use
on Parquet.

Workload (generated, ``--rows`` rows, 4,000,000 by default): ``label``
int64 (Zipf-skewed, 1,000 classes), ``score`` float32 (uniform), ``year``
int16 (1950..2025) and ``caption`` (6 words of a 5,000-word Zipf
vocabulary), written once as a Parquet file (pyarrow, zstd), the way a user
of each tool writes it:

* **bytes per row** of loaderx's columnar table (``ingest_sharded`` of the
  Parquet file, the default layout), of the Parquet file and of Lance;
* **ingest** of the Parquet file: ``loaderx.ingest_sharded(path)`` against
  ``lance.write_dataset(pq.read_table(path))``;
* **SQL**: a point filter, a group-by aggregate, a ``LIKE`` scan and a range
  filter through ``loaderx.sql`` against DataFusion (datafusion-python)
  and DuckDB over the Parquet file;
* **polars**: the same queries through ``loaderx.polars.scan_table`` over
  a ``Table`` opened once against ``pl.scan_parquet``;
* **pandas**: ``Table.to_pandas()`` against ``pq.read_table(...).to_pandas()``
  (and Lance's ``to_table().to_pandas()``);
* **training batches**: 1,024 random rows of the four columns per batch
  through the ``DataLoader``, the columnar table against the same table
  written with ``layout="records"`` (every column a store, as before
  columnar columns existed) and Lance's ``take``.

Every result is checked equal across engines before its time counts. The
engines run interleaved, ``--rounds`` rounds; each timing is one call
repeated for at least ``--min-time`` seconds (its mean); a figure is the
best round (``median`` beside it in the JSON). Page cache warm.

    .venv/bin/python benches/bench_columns.py [--rows 4000000] [--quick]

The markdown table goes to stdout, everything measured to
``benches/out/columns.json``.
"""

from __future__ import annotations

import argparse
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

import loaderx  # noqa: E402

from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, log, write_json  # noqa: E402
from _timing import allocated_bytes  # noqa: E402
from _timing import mean_call_seconds as timed  # noqa: E402

QUERIES = {
    "point": "SELECT count(*) AS n FROM t WHERE label = 7",
    "group": "SELECT label, avg(score) AS s FROM t GROUP BY label",
    "like": "SELECT count(*) AS n FROM t WHERE caption LIKE '%harbor%'",
    "range": "SELECT max(year) AS y FROM t WHERE score > 0.99",
}


def polars_queries(pl):
    return {
        "point": lambda lf: lf.filter(pl.col("label") == 7).select(pl.len().alias("n")),
        "group": lambda lf: lf.group_by("label").agg(pl.col("score").mean().alias("s")),
        "like": lambda lf: lf.filter(pl.col("caption").str.contains("harbor")).select(
            pl.len().alias("n")
        ),
        "range": lambda lf: lf.filter(pl.col("score") > 0.99).select(
            pl.col("year").max().alias("y")
        ),
    }


def generate(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    label = (np.minimum(rng.zipf(1.2, n), 1000) - 1).astype(np.int64)
    score = rng.random(n, dtype=np.float32)
    year = rng.integers(1950, 2026, n).astype(np.int16)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    vocab = np.array(
        ["".join(rng.choice(letters, rng.integers(3, 9))) for _ in range(5000)] + ["harbor"]
    )
    ranks = np.minimum(rng.zipf(1.3, size=n * 6), len(vocab)) - 1
    words = vocab[ranks].reshape(n, 6)
    caption = pa.array([" ".join(w) for w in words], pa.string())
    return pa.table({"label": label, "score": score, "year": year, "caption": caption})


def canonical(table: pa.Table) -> list:
    """A query result, rounded and sorted, for comparing engines."""
    rows = []
    for r in table.to_pylist():
        rows.append(tuple(round(v, 4) if isinstance(v, float) else v for v in r.values()))
    return sorted(rows)


def rounds(cases: dict, n_rounds: int, min_time: float) -> dict:
    """Interleaved rounds of every case: ``{name: {best, median, all}}``."""
    got: dict = {k: [] for k in cases}
    for _ in range(n_rounds):
        for name, fn in cases.items():
            got[name].append(timed(fn, min_time))
    return {k: {"best": min(v), "median": statistics.median(v), "all": v} for k, v in got.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_columns.py")
    p.add_argument("--rows", type=int)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = p.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 4_000_000)
    min_time = 0.05 if args.quick else args.min_time
    work = Path(tempfile.mkdtemp(prefix="bench-columns-", dir=args.tmp))
    try:
        results = run(rows, args, min_time, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["machine"] = describe_machine_and_build(args.tmp)
    path = write_json(args.out, "columns", results)
    print(report(results))
    log(f"wrote {path}")
    return 0


def run(rows: int, args, min_time: float, work: Path) -> dict:
    import datafusion
    import duckdb
    import polars as pl

    import loaderx.polars

    try:
        import lance
    except ImportError:
        lance = None
    log(f"generating {rows} rows")
    data = generate(rows, args.seed)
    parquet = work / "t.parquet"
    out: dict = {"rows": rows, "rounds": args.rounds}

    # Writes: Parquet (the source), loaderx's ingest of it, Lance's.
    t0 = time.perf_counter()
    pq.write_table(data, parquet, compression="zstd")
    out["write_parquet_s"] = time.perf_counter() - t0
    col = work / "columnar"
    t0 = time.perf_counter()
    loaderx.ingest_sharded(str(parquet), str(col)).close()
    out["ingest_loaderx_s"] = time.perf_counter() - t0
    rec = work / "records"
    loaderx.ingest_sharded(str(parquet), str(rec), layout="records").close()
    if lance is not None:
        lance_dir = work / "lance"
        t0 = time.perf_counter()
        lance.write_dataset(pq.read_table(parquet), str(lance_dir))
        out["ingest_lance_s"] = time.perf_counter() - t0
    out["bytes_per_row"] = {
        "loaderx": allocated_bytes(col) / rows,
        "loaderx_records": allocated_bytes(rec) / rows,
        "parquet": allocated_bytes(parquet) / rows,
        **({"lance": allocated_bytes(lance_dir) / rows} if lance is not None else {}),
    }
    log(f"bytes per row {out['bytes_per_row']}")

    table = loaderx.open_table(str(col))
    ctx = datafusion.SessionContext()
    ctx.register_parquet("t", str(parquet))
    con = duckdb.connect()

    # SQL.
    sql = {}
    for name, q in QUERIES.items():
        cases = {
            "loaderx": lambda q=q: loaderx.sql(q, t=table),
            "datafusion": lambda q=q: ctx.sql(q).to_arrow_table(),
            "duckdb": lambda q=q: con.sql(q.replace("FROM t", f"FROM '{parquet}'")).arrow(),
        }
        want = canonical(cases["datafusion"]())
        for engine, fn in cases.items():
            got = fn()
            got = got.read_all() if hasattr(got, "read_all") else got
            assert canonical(got) == want, (name, engine)
        sql[name] = rounds(cases, args.rounds, min_time)
        log(
            f"sql {name}: "
            + ", ".join(f"{k} {v['best'] * 1e3:.1f} ms" for k, v in sql[name].items())
        )
    out["sql"] = sql

    # polars.
    pol = {}
    for name, q in polars_queries(pl).items():
        cases = {
            "loaderx": lambda q=q: q(loaderx.polars.scan_table(table)).collect(),
            "scan_parquet": lambda q=q: q(pl.scan_parquet(parquet)).collect(),
        }
        want = cases["scan_parquet"]().sort(pl.all())
        got = cases["loaderx"]().sort(pl.all())
        assert got.equals(want), name
        pol[name] = rounds(cases, args.rounds, min_time)
        log(
            f"polars {name}: "
            + ", ".join(f"{k} {v['best'] * 1e3:.1f} ms" for k, v in pol[name].items())
        )
    out["polars"] = pol

    # pandas.
    cases = {
        "loaderx": lambda: table.to_pandas(index_column=None),
        "parquet": lambda: pq.read_table(parquet).to_pandas(),
    }
    if lance is not None:
        ds = lance.dataset(str(lance_dir))
        cases["lance"] = lambda: ds.to_table().to_pandas()
    a, b = cases["loaderx"](), cases["parquet"]()
    assert a.shape == b.shape and (a["label"].to_numpy() == b["label"].to_numpy()).all()
    assert list(a["caption"][:1000]) == list(b["caption"][:1000])
    out["pandas"] = rounds(cases, args.rounds, max(min_time, 0.5))
    log("pandas: " + ", ".join(f"{k} {v['best'] * 1e3:.0f} ms" for k, v in out["pandas"].items()))

    # Training batches: 1,024 random rows of the four columns per step.
    out["batches"] = batches(
        table, rec, lance_dir if lance is not None else None, rows, args, min_time
    )
    table.close()
    return out


def batches(table, rec: Path, lance_dir, rows: int, args, min_time: float) -> dict:
    from loaderx.dataloader import DataLoader

    names = ["label", "score", "year", "caption"]
    records = loaderx.open_table(str(rec))
    steps = 64
    rng = np.random.default_rng(args.seed + 1)
    plan = [np.sort(rng.choice(rows, 1024, replace=False)) for _ in range(steps)]

    def through(t):
        def run():
            with DataLoader(
                {n: t[n] for n in names}, batch_size=1024, mode="iid", seed=3, prefetch=2, workers=1
            ) as dl:
                for _ in range(steps):
                    next(dl)

        return run

    # The same rows from both layouts.
    for idx in plan[:4]:
        for n in names:
            a, b = table[n][idx], records[n][idx]
            assert (a == b).all() if isinstance(a, np.ndarray) else a == b
    cases = {"loaderx": through(table), "loaderx_records": through(records)}
    if lance_dir is not None:
        import lance

        ds = lance.dataset(str(lance_dir))
        it = iter(range(10**9))

        def take():
            for _ in range(steps):
                ds.take(plan[next(it) % steps], columns=names)

        cases["lance_take"] = take
    got = rounds(cases, args.rounds, min_time)
    records.close()
    for v in got.values():
        v["batches_per_s"] = steps / v["best"]
    log("batches: " + ", ".join(f"{k} {v['batches_per_s']:.0f}/s" for k, v in got.items()))
    return got


def report(r: dict) -> str:
    ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
    x = lambda a, b: f"{a / b:.2f}×"  # noqa: E731
    lines = [f"**{r['rows']:,} rows**, best of {r['rounds']} interleaved rounds\n"]
    bpr = r["bytes_per_row"]
    lines += [
        "| | loaderx (columnar) | loaderx (records) | Parquet | Lance | loaderx / Parquet |",
        "|---|---:|---:|---:|---:|---:|",
        f"| bytes per row | {bpr['loaderx']:.1f} | {bpr['loaderx_records']:.1f} | "
        f"{bpr['parquet']:.1f} | {bpr.get('lance', float('nan')):.1f} | "
        f"{x(bpr['loaderx'], bpr['parquet'])} |",
    ]
    if "ingest_lance_s" in r:
        lines.append(
            f"| ingest of the Parquet file | {r['ingest_loaderx_s']:.2f} s | | | "
            f"{r['ingest_lance_s']:.2f} s | "
            f"loaderx / Lance {x(r['ingest_loaderx_s'], r['ingest_lance_s'])} |"
        )
    lines += [
        "",
        "| query | loaderx.sql | DataFusion (Parquet) | DuckDB (Parquet) "
        "| ÷ DataFusion | ÷ DuckDB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, v in r["sql"].items():
        a, d, k = v["loaderx"]["best"], v["datafusion"]["best"], v["duckdb"]["best"]
        lines.append(f"| {name} | {ms(a)} | {ms(d)} | {ms(k)} | {x(a, d)} | {x(a, k)} |")
    geo = lambda e: statistics.geometric_mean(v[e]["best"] for v in r["sql"].values())  # noqa: E731
    lines.append(
        f"| geometric mean | {ms(geo('loaderx'))} | {ms(geo('datafusion'))} | {ms(geo('duckdb'))} "
        f"| {x(geo('loaderx'), geo('datafusion'))} | {x(geo('loaderx'), geo('duckdb'))} |"
    )
    lines += ["", "| query | scan_table | pl.scan_parquet | ratio |", "|---|---:|---:|---:|"]
    for name, v in r["polars"].items():
        a, b = v["loaderx"]["best"], v["scan_parquet"]["best"]
        lines.append(f"| {name} | {ms(a)} | {ms(b)} | {x(a, b)} |")
    pd_ = r["pandas"]
    lines += [
        "",
        f"`Table.to_pandas()` {ms(pd_['loaderx']['best'])}, `pq.read_table().to_pandas()` "
        f"{ms(pd_['parquet']['best'])} ({x(pd_['loaderx']['best'], pd_['parquet']['best'])})"
        + (f", Lance {ms(pd_['lance']['best'])}" if "lance" in pd_ else ""),
    ]
    b = r["batches"]
    lines += [
        "",
        "Training batches (1,024 random rows of the four columns): "
        + ", ".join(f"{k} {v['batches_per_s']:.0f}/s" for k, v in b.items()),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
