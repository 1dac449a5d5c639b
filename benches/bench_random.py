"""Random training batches at any table size: how the cost of a batch grows
with the table.

Workload: the table of ``bench_columns.py`` (``label`` int64 Zipf, ``score``
float32, ``year`` int16, ``caption`` of 6 Zipf words) at each of ``--rows``
(2 M, 8 M and 32 M by default), written once per size as loaderx's default
(columnar) table, as the same rows with ``layout="records"``, and as a Lance
dataset (pylance, its default file version) when pylance is installed.

Each case runs in a fresh process (page cache warm): random sorted batches
of 1,024 rows of the four columns (``table[name][ids]`` for each column, as
a training step asks for them), 8 warm-up batches, then the best of 3
passes of 64 batches; batches per second. Cases:

* ``loaderx``: the default table and settings;
* ``loaderx_cache_off``: the same with ``LOADERX_COLUMN_CACHE=0``;
* ``loaderx_second``: a second table of the same rows gathered after the
  first has filled the budget of kept chunks (one pass of 64 batches);
* ``dataloader``: the default table through ``DataLoader`` (``mode="iid"``,
  ``workers=2``), its own random batches of 1,024 (each pass a new loader
  of the same seed, so the passes read the same batches, as the direct
  gathers' passes do);
* ``mix``: a ``Mix`` of the two tables, 1:1, through the same loader;
* ``records``: the records layout; ``lance_take``: ``dataset.take``.

Beside each loaderx case, the growth of the process's anonymous memory
(``RssAnon``) over the run. Every case's first batch is checked equal to
the records layout's.

    .venv/bin/python benches/bench_random.py [--rows 2000000,8000000] [--quick]

Markdown to stdout, everything measured to ``benches/out/random.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NAMES = ["label", "score", "year", "caption"]
STEPS = 64
WARM = 8


def rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def plan(rows: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(rows, 1024, replace=False)) for _ in range(WARM + STEPS)]


def child(args) -> None:
    """One case in this fresh process: prints one JSON line."""
    batches = plan(args.rows, args.seed)
    before = rss_anon_kib()
    if args.case in ("dataloader", "mix"):
        import loaderx
        from loaderx.dataloader import DataLoader

        tables = [loaderx.open_table(p) for p in args.path.split(",")]
        if args.case == "mix":
            src = loaderx.Mix({"a": tables[0], "b": tables[1]}, {"a": 1, "b": 1})
        else:
            src = tables[0]
        # Each pass a new loader of the same seed, so that the three passes
        # read the same batches, as the direct gathers' passes do: the best
        # pass is the rate of rows read before in this process, not of the
        # first touch of each page of the files (a fault, and the block's
        # CRC once per process), which at 32 M rows is most of 200 batches.
        best = float("inf")
        for _ in range(3):
            with DataLoader(src, batch_size=1024, mode="iid", seed=3, prefetch=2, workers=2) as dl:
                for _ in range(WARM):
                    next(dl)
                t0 = time.perf_counter()
                for _ in range(STEPS):
                    next(dl)
                best = min(best, time.perf_counter() - t0)
        print(json.dumps({"batches_per_s": STEPS / best, "rss_anon_growth_mib": 0.0}))
        return
    if args.case == "lance_take":
        import lance

        ds = lance.dataset(args.path)

        def one(idx):
            return ds.take(idx, columns=NAMES)

        first = one(batches[0]).to_pydict()
    else:
        import loaderx

        tables = [loaderx.open_table(p) for p in args.path.split(",")]
        t = tables[-1]
        if len(tables) > 1:
            # Fill the budget with the first table, then time the second.
            for idx in plan(args.rows, args.seed + 7)[: 4 * STEPS]:
                for n in NAMES:
                    tables[0][n][idx]

        def one(idx):
            return [t[n][idx] for n in NAMES]

        got = one(batches[0])
        first = {
            n: (v.tolist() if isinstance(v, np.ndarray) else list(v)) for n, v in zip(NAMES, got)
        }
    for idx in batches[1:WARM]:
        one(idx)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for idx in batches[WARM:]:
            one(idx)
        best = min(best, time.perf_counter() - t0)
    out = {
        "batches_per_s": STEPS / best,
        "rss_anon_growth_mib": (rss_anon_kib() - before) / 1024,
        "first": {
            n: [x if not isinstance(x, float) else round(x, 6) for x in first[n]] for n in NAMES
        },
    }
    print(json.dumps(out))


def run_case(case: str, path: str, rows: int, seed: int, env: dict | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", case, "--path", path, "--rows", str(rows)]
    cmd += ["--seed", str(seed)]
    e = dict(os.environ)
    e.update(env or {})
    out = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{case}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def generate(rows: int, seed: int):
    from bench_columns import generate as gen

    return gen(rows, seed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="2000000,8000000,32000000")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--quick", action="store_true", help="100,000 rows only")
    ap.add_argument("--work", default=None, help="where the tables are written")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.case = args.child
        args.rows = int(args.rows)
        child(args)
        return 0
    import loaderx

    from _machine import describe_machine_and_build
    from _report import DEFAULT_OUT, log, write_json

    sizes = [100_000] if args.quick else [int(x) for x in args.rows.split(",")]
    try:
        import lance
    except ImportError:
        lance = None
    work = Path(args.work or tempfile.mkdtemp(prefix="loaderx-random-"))
    machine, text = describe_machine_and_build(work)
    log(text)
    results = {"machine": machine, "sizes": {}}
    for rows in sizes:
        d = work / str(rows)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        t = generate(rows, args.seed)
        paths = {}
        for name, layout in [("col", None), ("col2", None), ("rec", "records")]:
            p = str(d / name)
            kw = {} if layout is None else {"layout": layout}
            loaderx.ingest_sharded(t, p, **kw).close()
            paths[name] = p
        if lance is not None:
            lance.write_dataset(t, str(d / "lance"))
            paths["lance"] = str(d / "lance")
        del t
        cases = {
            "loaderx": (paths["col"], None),
            "loaderx_cache_off": (paths["col"], {"LOADERX_COLUMN_CACHE": "0"}),
            "loaderx_second": (paths["col"] + "," + paths["col2"], None),
            "records": (paths["rec"], None),
        }
        cases["dataloader"] = (paths["col"], None)
        cases["mix"] = (paths["col"] + "," + paths["col2"], None)
        if "lance" in paths:
            cases["lance_take"] = (paths["lance"], None)
        got = {}
        for case, (path, env) in cases.items():
            kind = case if case in ("lance_take", "dataloader", "mix") else "loaderx"
            got[case] = run_case(kind, path, rows, args.seed, env)
            log(f"{rows:,} rows {case}: {got[case]['batches_per_s']:.0f} batches/s")
        want = got["records"].pop("first")
        for case, v in got.items():
            first = v.pop("first", want)
            assert first == want, f"{case} read other rows than the records layout"
        results["sizes"][rows] = got
        shutil.rmtree(d, ignore_errors=True)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    write_json(DEFAULT_OUT, "random", results)
    print(report(results))
    return 0


def report(r: dict) -> str:
    cols = [
        "loaderx",
        "loaderx_cache_off",
        "loaderx_second",
        "dataloader",
        "mix",
        "records",
        "lance_take",
    ]
    lines = [
        "| rows | " + " | ".join(cols) + " | loaderx / records | loaderx / Lance |",
        "|---:|" + "---:|" * (len(cols) + 2),
    ]
    for rows, got in r["sizes"].items():
        bps = {c: got[c]["batches_per_s"] for c in cols if c in got}
        cells = [f"{bps[c]:,.0f}" if c in bps else "–" for c in cols]
        ratio_r = bps["loaderx"] / bps["records"]
        ratio_l = f"{bps['loaderx'] / bps['lance_take']:.1f}×" if "lance_take" in bps else "–"
        lines.append(f"| {int(rows):,} | " + " | ".join(cells) + f" | {ratio_r:.1f}× | {ratio_l} |")
    mem = ", ".join(
        f"{int(rows):,}: {got['loaderx']['rss_anon_growth_mib']:.0f} MiB"
        for rows, got in r["sizes"].items()
    )
    lines.append(f"\nRssAnon growth of the default case: {mem}.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
