"""The table of benches/ab.sh: the figures of the benches' --out JSON files
under ``OUT/<side>/round-<k>/``, the median over rounds per side, and the
head/base ratio.

    python benches/_ab.py OUT [--base LABEL] [--head LABEL]

Standard library only. Prints a markdown table (metric, base median, head
median, head/base) and writes every figure, per round, to ``OUT/ab.json``.
Each metric names its unit; for ``ms`` and ``MiB`` lower is better, for the
rates higher. A metric a side did not produce (its bench failed there) shows
"—".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

SIDES = ("base", "head")


def _store(payload: dict) -> dict[str, float]:
    """bench_dense.py / bench_ragged.py: gather GiB/s of every backend."""
    name = payload["name"].removesuffix("-quick")
    out = {}
    for backend, r in payload.get("results", {}).items():
        gib_s = (r.get("gather") or {}).get("gib_s")
        if gib_s is not None:
            out[f"{name} {backend} gather GiB/s"] = gib_s
    return out


def _ingest(payload: dict) -> dict[str, float]:
    """bench_ingest.py: GiB/s of each workload, source, codec and writer."""
    return {f"ingest {key} GiB/s": r["gib_s"] for key, r in payload["results"].items()}


def _loader(payload: dict) -> dict[str, float]:
    """bench_loader.py: batches/s and peak PSS of every loaderx pipeline."""
    out = {}
    for key, r in payload["results"].items():
        if not key.startswith("loaderx") or "error" in r:
            continue
        out[f"loader {key} batches/s"] = r["batches_s"]
        out[f"loader {key} peak PSS MiB"] = r["memory"]["peak_pss_mib"]
    return out


def _sql(payload: dict) -> dict[str, float]:
    """bench_sql.py: the filter scans with and without pushdown, raw and zstd
    images, the GROUP BY, and the Parquet export."""
    out = {}
    for part, codec in (("filter", "raw"), ("filter_zstd", "zstd")):
        f = payload.get(part) or {}
        for key, label in (
            ("seconds_pushdown", "pushdown"),
            ("seconds_no_pushdown", "no pushdown"),
        ):
            if key in f:
                out[f"sql filter ({codec}, {label}) ms"] = f[key] * 1e3
    g = (payload.get("duckdb_parquet") or {}).get("loaderx_group_by_seconds")
    if g is not None:
        out["sql group by ms"] = g * 1e3
    e = (payload.get("export") or {}).get("loaderx_gib_s")
    if e is not None:
        out["parquet export GiB/s"] = e
    return out


def metrics(path: Path) -> dict[str, float]:
    """The A/B figures of one bench's JSON file (by its name), {} for others."""
    name = path.name
    if name.startswith(("dense-", "ragged-")):
        read = _store
    elif name.startswith("ingest"):
        read = _ingest
    elif name.startswith("loader"):
        read = _loader
    elif name.startswith("sql"):
        read = _sql
    else:
        return {}
    return read(json.loads(path.read_text()))


def collect(out: Path) -> dict[str, dict[str, list[float]]]:
    """side -> metric -> one value per round (in round order)."""
    got: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    for side in SIDES:
        rounds = sorted((out / side).glob("round-*"), key=lambda p: int(p.name.split("-", 1)[1]))
        for rd in rounds:
            for path in sorted(rd.glob("*.json")):
                for key, value in metrics(path).items():
                    got[side].setdefault(key, []).append(float(value))
    return got


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def summarise(got: dict) -> list[dict]:
    """One row per metric (in the order first seen): medians and the ratio."""
    keys = list(dict.fromkeys([*got["base"], *got["head"]]))
    rows = []
    for key in keys:
        med = {s: statistics.median(got[s][key]) if got[s].get(key) else None for s in SIDES}
        ratio = med["head"] / med["base"] if med["base"] and med["head"] is not None else None
        rows.append(
            {
                "metric": key,
                "base_median": med["base"],
                "head_median": med["head"],
                "head_over_base": ratio,
                "base_rounds": got["base"].get(key, []),
                "head_rounds": got["head"].get(key, []),
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| metric | base median | head median | head/base |", "| --- | ---: | ---: | ---: |"]
    for r in rows:
        ratio = "—" if r["head_over_base"] is None else f"{r['head_over_base']:.3f}×"
        lines.append(
            f"| {r['metric']} | {_fmt(r['base_median'])} | {_fmt(r['head_median'])} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="_ab.py", description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="the A/B directory (OUT/base, OUT/head)")
    p.add_argument("--base", default="base", help="label of the base build")
    p.add_argument("--head", default="head", help="label of the head build")
    args = p.parse_args(argv)
    got = collect(args.out)
    rows = summarise(got)
    if not rows:
        print(f"_ab.py: no bench JSON under {args.out}/base or {args.out}/head", file=sys.stderr)
        return 1
    n = {s: len(list((args.out / s).glob("round-*"))) for s in SIDES}
    print(f"## A/B: {args.base} against {args.head}\n")
    print(f"Median of {n['base']} base and {n['head']} head rounds, interleaved.\n")
    print(table(rows))
    (args.out / "ab.json").write_text(
        json.dumps({"base": args.base, "head": args.head, "rows": rows}, indent=2) + "\n"
    )
    print(f"\nJSON: {args.out / 'ab.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
