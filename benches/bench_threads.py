"""Thread sweep of the store gathers: each executor size in its own process.

The executor's size is read once per process (``LOADERX_THREADS``, default
3/4 of the CPUs), so for every thread count in ``--threads`` this runs
``bench_dense.py`` / ``bench_ragged.py`` in a fresh process with
``LOADERX_THREADS`` set, limited to zrecord-raw, zrecord-zstd and the
python-zstandard one-core decode loop over the same frames, and collects
their JSON. It reports records/s per thread count and the per-thread
proxies that hold on any machine (checked in the same sweep):

* zstd on 1 thread against python-zstandard's one-core loop (≥ 1.0×),
* zstd on 2 threads against zstd on 1 (≥ 1.7×),
* raw on 2 threads against raw on 1 (≥ 0.95×),

and, for more threads, each count against 1 thread. ``default`` in
``--threads`` runs without ``LOADERX_THREADS`` (3/4 of the CPUs) and adds
the peers of the many-core targets (npy-mmap on dense-tokens, Arrow IPC on
ragged-tokens); their table compares, at that thread count, raw gathers
with those peers and with memcpy on all threads, and zstd gathers with the
executor's threads × one core's decode rate of the same records (all
measured in the same run).

    .venv/bin/python benches/bench_threads.py --threads 1,2
    .venv/bin/python benches/bench_threads.py --threads 1,2,4,8,16,default
    .venv/bin/python benches/bench_threads.py --quick        # seconds-long smoke run

The markdown table goes to stdout and the whole sweep to
``benches/out/threads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _proc import run  # noqa: E402
from _report import DEFAULT_OUT, log, write_json  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
WORKLOADS = {
    "dense-vision": ("bench_dense.py", "vision"),
    "dense-tokens": ("bench_dense.py", "tokens"),
    "ragged-vision": ("bench_ragged.py", "vision"),
    "ragged-tokens": ("bench_ragged.py", "tokens"),
}
OURS = ("zrecord-raw", "zrecord-zstd")
ZSTD_LOOP = "python-zstandard"
# Peers of the many-core targets, run at the default thread count only.
PEERS = {"dense-tokens": "npy-mmap-raw", "ragged-tokens": "arrow-ipc-raw"}
DEFAULT = 0  # the key of the run without LOADERX_THREADS


def default_threads() -> int:
    """The executor's default size here: 3/4 of the CPUs this process may use."""
    cpus = len(os.sched_getaffinity(0))
    return max(1, -(-cpus * 3 // 4))


def label(t: int) -> str:
    return f"default ({default_threads()})" if t == DEFAULT else str(t)


def case_name(workload: str, batch: int | None) -> str:
    return workload if batch is None else f"{workload} (batch {batch})"


def run_one(workload: str, batch: int | None, threads: int, args, out: Path) -> dict:
    script, name = WORKLOADS[workload]
    backends = [*OURS, ZSTD_LOOP]
    if threads == DEFAULT and batch is None and workload in PEERS:
        backends.append(PEERS[workload])
    cmd = [sys.executable, str(BENCH_DIR / script), "--workload", name]
    cmd += ["--only", ",".join(backends), "--out", str(out), "--rounds", str(args.rounds)]
    if batch is not None:
        cmd += ["--batch-size", str(batch)]
    if args.quick:
        cmd.append("--quick")
    env = dict(os.environ)
    env.pop("LOADERX_THREADS", None)
    # numpy's OpenBLAS starts a thread per CPU at import, and those threads
    # were seen spinning (blas_thread_server in a profile) although nothing
    # calls BLAS: on a small machine they take cycles from the gather
    # threads under test. The benchmarks call no BLAS.
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if threads != DEFAULT:
        env["LOADERX_THREADS"] = str(threads)
    log(f"{case_name(workload, batch)}, LOADERX_THREADS={label(threads)}: {' '.join(cmd[1:])}")
    run(cmd, env=env, what=f"{case_name(workload, batch)} at {label(threads)} threads")
    kind = "dense" if script == "bench_dense.py" else "ragged"
    path = out / f"{kind}-{name}{'-quick' if args.quick else ''}.json"
    payload = json.loads(path.read_text())
    path.unlink()
    return payload


def parse_threads(text: str) -> list[int]:
    out = set()
    for t in text.split(","):
        t = t.strip()
        if not t:
            continue
        out.add(DEFAULT if t == "default" else int(t))
    return sorted(out, key=lambda t: (t == DEFAULT, t))


def table(rows: list[list[str]]) -> str:
    head = rows[0]
    lines = [head, ["---"] + ["---:"] * (len(head) - 1), *rows[1:]]
    return "\n".join("| " + " | ".join(r) + " |" for r in lines)


def targets_at_default(sweep: dict, limits: dict) -> list[list[str]]:
    """The many-core targets, from the run at the default thread count."""
    n = default_threads()
    rows = [["target", "measured", "against", "ratio", "goal"]]
    for w, runs in sweep.items():
        res = runs.get(DEFAULT)
        if res is None or w not in WORKLOADS:
            continue
        lim = limits[w]
        if w in PEERS and PEERS[w] in res:
            ours, peer = res["zrecord-raw"]["krecords_s"], res[PEERS[w]]["krecords_s"]
            goal = "≥ 1.5" if w == "dense-tokens" else "≥ 5"
            rows.append(
                [
                    f"{w} raw vs {PEERS[w]}",
                    f"{ours:,.0f} krec/s",
                    f"{peer:,.0f} krec/s",
                    f"{ours / peer:.2f}×",
                    goal,
                ]
            )
        decode = lim["zstd"]["decode_krecords_s"]
        ours = res["zrecord-zstd"]["krecords_s"]
        rows.append(
            [
                f"{w} zstd vs {n} × one core's decode",
                f"{ours:,.1f} krec/s",
                f"{n} × {decode:,.1f} krec/s",
                f"{ours / (n * decode):.2f}×",
                "≥ 0.8",
            ]
        )
        if w == "dense-vision":
            mc = lim["memcpy"][lim["memcpy_all_threads"]]["best_gib_s"]
            ours = res["zrecord-raw"]["gib_s"]
            rows.append(
                [
                    f"{w} raw vs memcpy on {lim['memcpy_all_threads']} threads",
                    f"{ours:.2f} GiB/s",
                    f"{mc:.2f} GiB/s",
                    f"{ours / mc:.2f}×",
                    "≥ 0.9",
                ]
            )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_threads.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--threads",
        default="1,2",
        help="comma-separated thread counts; 'default' runs without LOADERX_THREADS "
        "and adds the peers of the many-core targets (1,2)",
    )
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument(
        "--batch-sizes",
        default="",
        help="comma-separated batch sizes to sweep too (default: each workload's own, 256)",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of each run (3)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    try:
        threads = parse_threads(args.threads)
    except ValueError:
        p.error("--threads must be comma-separated integers or 'default'")
    if not threads or any(t < 0 for t in threads):
        p.error("--threads must be positive")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if any(w not in WORKLOADS for w in workloads):
        p.error(f"--workloads: choose from {','.join(WORKLOADS)}")

    try:
        batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()] or [None]
    except ValueError:
        p.error("--batch-sizes must be comma-separated integers")
    cases = [(w, b) for w in workloads for b in batches]

    sweep: dict[str, dict[int, dict]] = {}
    limits: dict[str, dict] = {}
    machine = None
    with tempfile.TemporaryDirectory(prefix="loaderx-threads-") as tmp:
        for w, b in cases:
            for t in threads:
                payload = run_one(w, b, t, args, Path(tmp))
                machine = machine or payload["machine"]
                limits.setdefault(case_name(w, b), payload["limits"])
                res = payload["results"]
                sweep.setdefault(case_name(w, b), {})[t] = {
                    name: {
                        "krecords_s": res[name]["gather"]["krecords_s"],
                        "gib_s": res[name]["gather"]["gib_s"],
                    }
                    for name in res
                }

    def rate(w, t, name):
        return sweep[w][t][name]["krecords_s"]

    head = ["workload", "backend"] + [f"{label(t)} thr krec/s" for t in threads]
    head += [f"{label(t)} vs 1" for t in threads if t != 1]
    rows = [head]
    proxies = {}
    for w in sweep:
        for name in OURS:
            row = [w, name] + [f"{rate(w, t, name):,.1f}" for t in threads]
            if 1 in threads:
                row += [f"{rate(w, t, name) / rate(w, 1, name):.2f}×" for t in threads if t != 1]
            rows.append(row)
        if 1 in threads:
            # python-zstandard's loop is one core whatever LOADERX_THREADS says:
            # its median over the sweep's runs.
            pz = sorted(rate(w, t, ZSTD_LOOP) for t in threads)[(len(threads) - 1) // 2]
            proxies[w] = {
                "zstd_1_thread_vs_python_zstandard": rate(w, 1, "zrecord-zstd") / pz,
                "python_zstandard_krecords_s": pz,
            }
            if 2 in threads:
                proxies[w]["zstd_2_vs_1"] = rate(w, 2, "zrecord-zstd") / rate(w, 1, "zrecord-zstd")
                proxies[w]["raw_2_vs_1"] = rate(w, 2, "zrecord-raw") / rate(w, 1, "zrecord-raw")

    print(f"# Thread sweep{' (quick: smoke, not results)' * args.quick}\n")
    print(
        f"Machine: {machine['cpu_model']}, {machine['logical_cpus']} logical CPUs, load average "
        f"{machine['load_average']} at the first run's start; {machine['date_utc']}. "
        "Each thread count in its own process "
        f"(LOADERX_THREADS); {args.rounds} rounds each, the median reported.\n"
    )
    print(table(rows))
    if proxies:
        print()
        ph = ["workload", "zstd 1 thr / python-zstandard (≥ 1.0)"]
        if 2 in threads:
            ph += ["zstd 2 / 1 thr (≥ 1.7)", "raw 2 / 1 thr (≥ 0.95)"]
        prow = [ph]
        for w, v in proxies.items():
            r = [w, f"{v['zstd_1_thread_vs_python_zstandard']:.2f}×"]
            if 2 in threads:
                r += [f"{v['zstd_2_vs_1']:.2f}×", f"{v['raw_2_vs_1']:.2f}×"]
            prow.append(r)
        print(table(prow))
    targets = targets_at_default(sweep, limits)
    if len(targets) > 1:
        print(f"\nMany-core targets at the default thread count ({default_threads()}):\n")
        print(table(targets))
    payload = {
        "benchmark": "threads",
        "quick": args.quick,
        "machine": machine,
        "threads": [label(t) for t in threads],
        "default_threads": default_threads(),
        "rounds": args.rounds,
        "sweep": {w: {label(t): v for t, v in d.items()} for w, d in sweep.items()},
        "limits": limits,
        "proxies": proxies,
        "targets": targets,
    }
    log(f"wrote {write_json(args.out, 'threads' + ('-quick' if args.quick else ''), payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
