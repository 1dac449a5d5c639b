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

and, for more threads, each count against 1 thread.

    .venv/bin/python benches/bench_threads.py --threads 1,2
    .venv/bin/python benches/bench_threads.py --threads 1,2,4,8,16 --workloads dense-tokens
    .venv/bin/python benches/bench_threads.py --quick        # seconds-long smoke run

The markdown table goes to stdout and the whole sweep to
``benches/out/threads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import DEFAULT_OUT, log, write_json  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
WORKLOADS = {
    "dense-vision": ("bench_dense.py", "vision"),
    "dense-tokens": ("bench_dense.py", "tokens"),
    "ragged-vision": ("bench_ragged.py", "vision"),
    "ragged-tokens": ("bench_ragged.py", "tokens"),
}
BACKENDS = "zrecord-raw,zrecord-zstd,python-zstandard"


def run_one(workload: str, threads: int, args, out: Path) -> dict:
    script, name = WORKLOADS[workload]
    cmd = [sys.executable, str(BENCH_DIR / script), "--workload", name, "--only", BACKENDS]
    cmd += ["--out", str(out), "--rounds", str(args.rounds)]
    if args.quick:
        cmd.append("--quick")
    env = {**os.environ, "LOADERX_THREADS": str(threads)}
    log(f"{workload}, LOADERX_THREADS={threads}: {' '.join(cmd[1:])}")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{workload} at {threads} threads failed:\n{r.stderr[-3000:]}")
    kind = "dense" if script == "bench_dense.py" else "ragged"
    path = out / f"{kind}-{name}{'-quick' if args.quick else ''}.json"
    payload = json.loads(path.read_text())
    path.unlink()
    return payload


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_threads.py", description=__doc__.split("\n")[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (1,2)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--rounds", type=int, default=3, help="rounds of each run (3)")
    p.add_argument("--quick", action="store_true", help="seconds-long smoke run (not results)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    try:
        threads = sorted({int(t) for t in args.threads.split(",") if t.strip()})
    except ValueError:
        p.error("--threads must be comma-separated integers")
    if not threads or threads[0] < 1:
        p.error("--threads must be positive")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if any(w not in WORKLOADS for w in workloads):
        p.error(f"--workloads: choose from {','.join(WORKLOADS)}")

    sweep: dict[str, dict[int, dict]] = {}
    machine = None
    with tempfile.TemporaryDirectory(prefix="loaderx-threads-") as tmp:
        for w in workloads:
            for t in threads:
                payload = run_one(w, t, args, Path(tmp))
                machine = machine or payload["machine"]
                res = payload["results"]
                sweep.setdefault(w, {})[t] = {
                    name: {
                        "krecords_s": res[name]["gather"]["krecords_s"],
                        "gib_s": res[name]["gather"]["gib_s"],
                    }
                    for name in ("zrecord-raw", "zrecord-zstd", "python-zstandard")
                }

    def rate(w, t, name):
        return sweep[w][t][name]["krecords_s"]

    head = ["workload", "backend"] + [f"{t} thr krec/s" for t in threads]
    head += [f"{t} vs 1" for t in threads if t != 1]
    rows = [head, ["---", "---"] + ["---:"] * (len(head) - 2)]
    proxies = {}
    for w in workloads:
        for name in ("zrecord-raw", "zrecord-zstd"):
            row = [w, name] + [f"{rate(w, t, name):,.1f}" for t in threads]
            if 1 in threads:
                row += [f"{rate(w, t, name) / rate(w, 1, name):.2f}×" for t in threads if t != 1]
            rows.append(row)
        if 1 in threads:
            # python-zstandard's loop is one core whatever LOADERX_THREADS says:
            # its median over the sweep's runs.
            pz = sorted(rate(w, t, "python-zstandard") for t in threads)[(len(threads) - 1) // 2]
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
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    if proxies:
        print()
        ph = ["workload", "zstd 1 thr / python-zstandard (≥ 1.0)"]
        if 2 in threads:
            ph += ["zstd 2 / 1 thr (≥ 1.7)", "raw 2 / 1 thr (≥ 0.95)"]
        prow = [ph, ["---"] + ["---:"] * (len(ph) - 1)]
        for w, v in proxies.items():
            r = [w, f"{v['zstd_1_thread_vs_python_zstandard']:.2f}×"]
            if 2 in threads:
                r += [f"{v['zstd_2_vs_1']:.2f}×", f"{v['raw_2_vs_1']:.2f}×"]
            prow.append(r)
        print("\n".join("| " + " | ".join(r) + " |" for r in prow))
    payload = {
        "benchmark": "threads",
        "quick": args.quick,
        "machine": machine,
        "threads": threads,
        "rounds": args.rounds,
        "sweep": {w: {str(t): v for t, v in d.items()} for w, d in sweep.items()},
        "proxies": proxies,
    }
    log(f"wrote {write_json(args.out, 'threads' + ('-quick' if args.quick else ''), payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
