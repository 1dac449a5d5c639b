"""Free-threaded CPython against the GIL build: the loader with CPU-heavy
per-sample transforms.

``bench_loader.py``'s ``loaderx-raw`` and ``loaderx-zstd`` pipelines with
the ``heavy`` transform (a per-sample crop and flip decided in Python; its
pixel work is NumPy copies, which release the GIL) and the ``augment``
transform (``heavy`` plus a random erasing decided in a pure-Python loop),
both on the DataLoader's transform threads, run under two interpreters built
from the same CPython source, one standard (GIL) and one free-threaded
(``--disable-gil``), each with its loaderx release wheel (abi3 and
``cp313t``/``cp314t``). On the GIL build the Python parts of the transform
threads take turns; without the GIL they run at once. Rounds are interleaved
(GIL, free-threaded, free-threaded, GIL, ...) so that a drift of the machine
hits both alike; each round is one ``bench_loader.py`` child run per
interpreter and worker count (``--rounds 1``), and the median over rounds is
reported, with the ratio free-threaded / GIL of batches/s and of peak PSS.

Set up the two virtualenvs with ``benches/bench_free_threaded.sh`` (which
then runs this script), or give them::

    python benches/bench_free_threaded.py --gil-python A/bin/python --ft-python B/bin/python

The markdown table goes to stdout, progress to stderr, everything measured to
``benches/out/free_threaded-<X.Y>.json`` (X.Y the free-threaded Python;
``-quick`` appended for --quick). Before the loader rounds it runs
``bench_python_threads.py`` (pure-Python draws on 1 and 2 threads, no
loaderx) under both interpreters, which shows what free threading costs on
one thread and gains on two with no I/O or NumPy in the way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _proc import child_env, run  # noqa: E402

HERE = Path(__file__).resolve().parent
PIPELINES = ("loaderx-raw", "loaderx-zstd")
TRANSFORMS = ("heavy", "augment")
FLAVOURS = ("gil", "ft")
# Each interpreter runs as it was built (no PYTHON_GIL override) on its own site-packages.
CHILD_ENV_DROP = ("PYTHON_GIL", "PYTHONPATH")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def describe(python: str) -> dict:
    code = (
        "import json, sys, sysconfig, loaderx._native as n;"
        "print(json.dumps({'version': sys.version.split()[0],"
        "'free_threaded': bool(sysconfig.get_config_var('Py_GIL_DISABLED')),"
        "'gil_enabled': sys._is_gil_enabled() if hasattr(sys, '_is_gil_enabled') else True,"
        "'extension': n.__file__.rsplit('/', 1)[-1]}))"
    )
    return json.loads(run([python, "-c", code]).stdout)


def run_once(python: str, workers: int, args, out_dir: Path) -> dict:
    """One bench_loader.py run (the pipelines and transforms, one round)."""
    cmd = [
        python,
        str(HERE / "bench_loader.py"),
        "--only",
        ",".join(args.pipelines),
        "--transform",
        ",".join(args.transforms),
        "--workers",
        str(workers),
        "--rounds",
        "1",
        "--out",
        str(out_dir),
    ]
    if args.quick:
        cmd.append("--quick")
    for flag in ("images", "batches", "memory_seconds"):
        v = getattr(args, flag)
        if v is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(v)]
    run(cmd, env=child_env(CHILD_ENV_DROP), capture=False)
    name = "loader-quick.json" if args.quick else "loader.json"
    payload = json.loads((out_dir / name).read_text())
    got = {}
    for key in _keys(args):
        r = payload["results"][key]
        if "error" in r:
            raise RuntimeError(f"{python} {key}: {r['error']}")
        cores = r["process_cpu_cores"]
        got[key] = {
            "batches_s": r["batches_s"],
            "peak_pss_mib": r["memory"]["peak_pss_mib"],
            "cpu_cores": cores["user"] + cores["system"],
            "cpu_system_cores": cores["system"],
        }
    return {"results": got, "machine": payload.get("machine")}


def python_threads(python: str, args) -> dict:
    """bench_python_threads.py under one interpreter: k draws/s per style/threads."""
    cmd = [python, str(HERE / "bench_python_threads.py"), "--threads", "1,2", "--json"]
    if args.quick:
        cmd += ["--draws", "50000", "--rounds", "1"]
    out = run(cmd, env=child_env(CHILD_ENV_DROP))
    return json.loads(out.stdout)["k_draws_s"]


def _keys(args) -> list[str]:
    return [f"{p}/{t}" for t in args.transforms for p in args.pipelines]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="bench_free_threaded.py", description=__doc__.split("\n")[0])
    p.add_argument("--gil-python", required=True, help="interpreter of the GIL build")
    p.add_argument("--ft-python", required=True, help="interpreter of the free-threaded build")
    p.add_argument("--workers", default="2,4", help="transform threads, comma-separated (2,4)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument(
        "--pipelines", default=",".join(PIPELINES), help="subset of " + ",".join(PIPELINES)
    )
    p.add_argument(
        "--transforms", default=",".join(TRANSFORMS), help="subset of " + ",".join(TRANSFORMS)
    )
    p.add_argument("--images", type=int, help="records (bench_loader's default 2500)")
    p.add_argument("--batches", type=int, help="batches per round (bench_loader's default 200)")
    p.add_argument("--memory-seconds", type=float, help="memory pass (bench_loader's 5 s)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--out", type=Path, default=HERE / "out", help="JSON directory")
    args = p.parse_args(argv)
    args.pipelines = [x for x in args.pipelines.split(",") if x]
    if not args.pipelines or any(x not in PIPELINES for x in args.pipelines):
        p.error(f"--pipelines must name some of {','.join(PIPELINES)}")
    args.transforms = [x for x in args.transforms.split(",") if x]
    if not args.transforms or any(x not in TRANSFORMS for x in args.transforms):
        p.error(f"--transforms must name some of {','.join(TRANSFORMS)}")
    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        p.error("--workers must be comma-separated ints")
    if not workers or min(workers) < 1 or args.rounds < 1:
        p.error("--workers must be >= 1 and --rounds >= 1")

    pythons = {"gil": args.gil_python, "ft": args.ft_python}
    info = {k: describe(v) for k, v in pythons.items()}
    if info["gil"]["free_threaded"] or not info["gil"]["gil_enabled"]:
        p.error(f"--gil-python is not a GIL build: {info['gil']}")
    if not info["ft"]["free_threaded"] or info["ft"]["gil_enabled"]:
        p.error(f"--ft-python does not run without the GIL: {info['ft']}")
    for k, v in info.items():
        log(f"{k}: Python {v['version']}, extension {v['extension']}")

    log("pure-Python draws on 1 and 2 threads (bench_python_threads.py)")
    pure = {k: python_threads(v, args) for k, v in pythons.items()}

    runs: dict = {k: {w: [] for w in workers} for k in FLAVOURS}
    machine = None
    with tempfile.TemporaryDirectory(prefix="loaderx-bench-ft-") as tmp:
        for r in range(args.rounds):
            order = FLAVOURS if r % 2 == 0 else FLAVOURS[::-1]
            for w in workers:
                for flavour in order:
                    log(f"round {r + 1}/{args.rounds}: {flavour}, {w} workers")
                    got = run_once(pythons[flavour], w, args, Path(tmp))
                    machine = machine or got["machine"]
                    runs[flavour][w].append(got["results"])

    summary = {}
    for key in _keys(args):
        for w in workers:
            row = {}
            for flavour in FLAVOURS:
                rs = [x[key] for x in runs[flavour][w]]
                row[flavour] = {
                    key: statistics.median(x[key] for x in rs)
                    for key in ("batches_s", "peak_pss_mib", "cpu_cores", "cpu_system_cores")
                }
                row[flavour]["rounds"] = rs
            row["batches_s_ratio"] = row["ft"]["batches_s"] / row["gil"]["batches_s"]
            row["pss_ratio"] = row["ft"]["peak_pss_mib"] / row["gil"]["peak_pss_mib"]
            summary[f"{key}/{w}"] = row

    ft_minor = ".".join(info["ft"]["version"].split(".")[:2])
    name = f"free_threaded-{ft_minor}" + ("-quick" if args.quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    config = {k: getattr(args, k) for k in ("rounds", "images", "batches", "quick", "transforms")}
    config["workers"] = workers
    path.write_text(
        json.dumps(
            {
                "name": name,
                "config": config,
                "interpreters": info,
                "machine": machine,
                "results": summary,
                "python_threads_k_draws_s": pure,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"## {name}\n")
    print(
        f"loaderx DataLoader, median of {args.rounds} interleaved rounds; "
        f"GIL: Python {info['gil']['version']} ({info['gil']['extension']}), "
        f"free-threaded: Python {info['ft']['version']} ({info['ft']['extension']}).\n"
    )
    print(
        "| pipeline | transform | workers | GIL batches/s | free-threaded batches/s | ratio | "
        "GIL PSS MiB | free-threaded PSS MiB | PSS ratio | CPU cores GIL / free-threaded "
        "(of which system) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for key, row in summary.items():
        pipeline, transform, w = key.split("/")
        gil, ft = row["gil"], row["ft"]
        print(
            f"| {pipeline} | {transform} | {w} | {gil['batches_s']:.2f} | {ft['batches_s']:.2f} "
            f"| {row['batches_s_ratio']:.2f}x | {gil['peak_pss_mib']:.0f} "
            f"| {ft['peak_pss_mib']:.0f} | {row['pss_ratio']:.2f}x "
            f"| {gil['cpu_cores']:.2f} ({gil['cpu_system_cores']:.2f}) / "
            f"{ft['cpu_cores']:.2f} ({ft['cpu_system_cores']:.2f}) |"
        )
    print(
        f"\nThis machine has {os.cpu_count()} CPUs; CPU cores are the benchmark process's "
        "(user + system) / wall over the timed rounds."
    )
    print(
        "\nPure Python without loaderx (bench_python_threads.py, splitmix64 draws, "
        f"best of {1 if args.quick else 3}; k draws/s):\n"
    )
    print("| style | threads | GIL | free-threaded | ratio |")
    print("|---|---:|---:|---:|---:|")
    for key in pure["gil"]:
        style, n = key.split("/")
        g, f = pure["gil"][key], pure["ft"][key]
        print(f"| {style} | {n} | {g:.0f} | {f:.0f} | {f / g:.2f}x |")
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
