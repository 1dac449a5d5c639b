"""Text column round trip: loaderx against pyarrow's own IPC file.

One Utf8 column of generated captions (words from a Zipf-like vocabulary,
10 to 60 words each). For each codec:

* write: ``loaderx.arrow.ingest(table, dir, codec=...)`` against
  ``pyarrow.ipc.new_file`` (uncompressed for raw, zstd-compressed buffers
  for zstd) of the same table, each followed by an fsync of the output;
* read: ``store.to_arrow()`` (the whole column as a ChunkedArray) against
  ``pa.ipc.open_file(pa.memory_map(...)).read_all()``, page cache warm, and
  a random gather of 256 values (``store.to_arrow(idx)`` against
  ``take`` on the IPC column combined into one array beforehand, untimed:
  pyarrow's take on the chunked column is far slower).

Every result is checked equal to the source before its time counts; each
figure is the median of ``--rounds`` interleaved rounds.

    .venv/bin/python benches/bench_text.py [--rows 1000000] [--quick]

The markdown table goes to stdout, everything measured to
``benches/out/text.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe_machine_and_build  # noqa: E402
from _report import DEFAULT_OUT, MIB, log, write_json  # noqa: E402


def captions(n: int, seed: int) -> pa.Array:
    rng = np.random.default_rng(seed)
    vocab = np.array(
        [
            "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 10)))
            for _ in range(5000)
        ]
    )
    ranks = np.minimum(rng.zipf(1.3, size=n * 35), len(vocab)) - 1
    lengths = rng.integers(10, 61, n)
    out, at = [], 0
    for k in lengths:
        out.append(" ".join(vocab[ranks[at : at + k]]))
        at += k
        if at + 60 > len(ranks):
            at = 0
    return pa.array(out, pa.string())


def fsync_tree(path: str) -> None:
    for d, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_text.py")
    p.add_argument("--rows", type=int)
    p.add_argument("--rounds", type=int)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--tmp", type=Path, default=Path("/tmp"))
    args = p.parse_args(argv)
    rows = args.rows or (20_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 3)

    import loaderx
    import loaderx.arrow

    root = tempfile.mkdtemp(prefix="loaderx-text-", dir=args.tmp)
    machine, machine_text = describe_machine_and_build(Path(root), ("loaderx", "pyarrow"))
    log(f"generating {rows} captions")
    col = captions(rows, args.seed)
    table = pa.table({"caption": col})
    nbytes = col.nbytes
    idx_plan = [np.random.default_rng(args.seed + k).integers(0, rows, 256) for k in range(50)]
    times: dict[str, list[float]] = {}

    def timed(key, fn):
        t0 = time.perf_counter()
        out = fn()
        times.setdefault(key, []).append(time.perf_counter() - t0)
        return out

    try:
        for r in range(rounds):
            for codec in ("raw", "zstd"):
                d = os.path.join(root, f"lx-{codec}-{r}")
                f = os.path.join(root, f"ipc-{codec}-{r}.arrow")

                def lx_write(d=d, codec=codec):
                    for s in loaderx.arrow.ingest(table, d, codec=codec).values():
                        s.close()
                    fsync_tree(d)

                def ipc_write(f=f, codec=codec):
                    opts = pa.ipc.IpcWriteOptions(compression=None if codec == "raw" else "zstd")
                    with pa.OSFile(f, "wb") as sink:
                        with pa.ipc.new_file(sink, table.schema, options=opts) as w:
                            w.write_table(table, max_chunksize=64 * 1024)
                    fd = os.open(f, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)

                order = [("loaderx", lx_write), ("ipc", ipc_write)]
                for name, fn in order if r % 2 == 0 else order[::-1]:
                    os.sync()
                    timed(f"write-{name}-{codec}", fn)
                with loaderx.open_table(d) as t:
                    s = t["caption"]
                    got = timed(f"read-loaderx-{codec}", s.to_arrow)
                    if not got.combine_chunks().equals(col):
                        raise AssertionError("loaderx read differs from the source")
                    ipc = timed(
                        f"read-ipc-{codec}",
                        lambda f=f: pa.ipc.open_file(pa.memory_map(f)).read_all(),
                    )
                    if not ipc["caption"].combine_chunks().equals(col):
                        raise AssertionError("IPC read differs from the source")
                    for i in idx_plan[:2]:
                        if s.to_arrow(i).to_pylist() != col.take(pa.array(i)).to_pylist():
                            raise AssertionError("loaderx gather differs from the source")

                    def lx_gather(s=s):
                        for i in idx_plan:
                            s.to_arrow(i)

                    # One contiguous array, made outside the timing (a take
                    # on the chunked column is far slower in pyarrow).
                    flat = ipc["caption"].combine_chunks()

                    def ipc_gather(flat=flat):
                        for i in idx_plan:
                            flat.take(pa.array(i))

                    timed(f"gather-loaderx-{codec}", lx_gather)
                    timed(f"gather-ipc-{codec}", ipc_gather)
                    del ipc, flat
                shutil.rmtree(d)
                os.unlink(f)
                log(f"round {r + 1}/{rounds} {codec} done")
    finally:
        shutil.rmtree(root, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    head = ["operation", "codec", "loaderx MiB/s", "pyarrow IPC MiB/s", "loaderx / IPC"]
    lines = [head, ["---", "---", "---:", "---:", "---:"]]
    results = {}
    for op in ("write", "read", "gather"):
        for codec in ("raw", "zstd"):
            a, b = med[f"{op}-loaderx-{codec}"], med[f"{op}-ipc-{codec}"]
            size = nbytes if op != "gather" else len(idx_plan) * 256 * (nbytes / rows)
            results[f"{op}-{codec}"] = {
                "loaderx_s": a,
                "ipc_s": b,
                "ratio": b / a,
                "loaderx_mib_s": size / a / MIB,
                "ipc_mib_s": size / b / MIB,
            }
            lines.append(
                [op, codec, f"{size / a / MIB:.0f}", f"{size / b / MIB:.0f}", f"{b / a:.2f}×"]
            )
    print(f"# Text column round trip{' (quick: smoke, not results)' * args.quick}")
    print()
    print(machine_text)
    print()
    print(f"{rows} captions, {nbytes / MIB:.0f} MiB of Arrow; median of {rounds} rounds.")
    print()
    print("\n".join("| " + " | ".join(r) + " |" for r in lines))
    print()
    print(
        "- write: ingest (loaderx) or IPC file write, then fsync.\n"
        "- read: the whole column as Arrow (loaderx to_arrow; IPC memory-mapped read_all).\n"
        "- gather: 50 batches of 256 random values as Arrow (to_arrow(idx); take on the IPC "
        "column combined into one array beforehand, untimed)."
    )
    payload = {
        "benchmark": "text",
        "quick": args.quick,
        "machine": machine,
        "config": {"rows": rows, "rounds": rounds, "arrow_bytes": nbytes},
        "results": results,
    }
    log(f"wrote {write_json(args.out, 'text' + ('-quick' if args.quick else ''), payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
