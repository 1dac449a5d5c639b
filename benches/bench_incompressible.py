"""Incompressible records: a table of random float16 embeddings written and
gathered with the default codec (zstd, whose records that do not pay are
frames of raw blocks) against ``codec="raw"`` and Lance, in one run.

* ``write``: 400,000 rows of a 384-float16 embedding (standard normal
  values, which zstd cannot shrink) and an int64 label, written with
  ``loaderx.ingest_sharded`` (default codec, then ``codec="raw"``) and with
  ``lance.write_dataset``; each figure is the median wall time over
  ``--rounds`` runs after one warm-up, every run into a new directory, and
  every written table is opened and checked (row count, one row's bytes).
* ``gather``: random batches of 256 embeddings from a ``DenseStore`` of the
  same rows, codec ``zstd`` against ``raw``, A/B interleaved in one run on
  identical index plans (every batch of both checked against the source
  before timing); rates in batches per second, best of ``--rounds`` timed
  loops of at least one second each.

Prints one JSON object (machine, build, figures and the ratios the issue
names: zstd/Lance and zstd/raw write time, zstd/raw gather rate) and writes
it to ``--out``.

    python benches/bench_incompressible.py --rows 400000 --rounds 3 --out /tmp/i.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DIM = 384
BATCH = 256


def _table(rows: int, seed: int):
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((rows, DIM), dtype=np.float32).astype(np.float16)
    label = rng.integers(0, 1000, rows, dtype=np.int64)
    table = pa.table(
        {
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), DIM),
            "label": pa.array(label),
        }
    )
    return table, emb, label


def bench_write(root: Path, table, emb, rounds: int, workers: int | None) -> dict:
    import lance

    import loaderx

    rows = table.num_rows
    probe = rows // 3
    runs = {"n": 0}

    def fresh(name: str) -> Path:
        runs["n"] += 1
        return root / f"{name}-{runs['n']}"

    def check_loaderx(path: Path) -> None:
        t = loaderx.open_table(path)
        try:
            assert t.num_rows == rows, (t.num_rows, rows)
            got = np.asarray(t["embedding"][[probe]]).reshape(-1)
            assert got.tobytes() == emb[probe].tobytes()
        finally:
            t.close()

    def write_loaderx(codec: str | None):
        def go():
            path = fresh(f"loaderx-{codec or 'default'}")
            kw = {} if codec is None else {"codec": codec}
            loaderx.ingest_sharded(table, path, workers=workers, **kw).close()
            check_loaderx(path)
            shutil.rmtree(path)

        return go

    def write_lance():
        path = fresh("lance")
        lance.write_dataset(table, str(path))
        ds = lance.dataset(str(path))
        assert ds.count_rows() == rows
        got = ds.take([probe], columns=["embedding"]).column(0)[0].values
        assert np.asarray(got).astype(np.float16).tobytes() == emb[probe].tobytes()
        shutil.rmtree(path)

    out = {}
    # Interleaved: a round of each in turn, so drift hits all three alike.
    samples = {"default": [], "raw": [], "lance": []}
    fns = {"default": write_loaderx(None), "raw": write_loaderx("raw"), "lance": write_lance}
    for fn in fns.values():
        fn()  # warm-up
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t)
    for name, s in samples.items():
        out[f"{name}_s"] = statistics.median(s)
        out[f"{name}_rounds_s"] = s
    out["default_over_lance"] = out["default_s"] / out["lance_s"]
    out["default_over_raw"] = out["default_s"] / out["raw_s"]
    # Size of what the default codec wrote.
    path = root / "size-probe"
    loaderx.ingest_sharded(table, path, workers=workers).close()
    stores = [m.parent for m in path.rglob("meta.zr") if m.parent.name == "embedding"]
    out["default_embedding_bytes"] = sum((s / "data.zr").stat().st_size for s in stores)
    out["logical_embedding_bytes"] = emb.nbytes
    shutil.rmtree(path)
    return out


def bench_gather(root: Path, emb, rounds: int, seed: int) -> dict:
    from loaderx.zrecord import DenseStore

    stores = {}
    for codec in ("zstd", "raw"):
        path = root / f"gather-{codec}"
        with DenseStore.create(path, np.float16, (DIM,), codec=codec) as ds:
            for start in range(0, len(emb), 65536):
                ds.append(emb[start : start + 65536])
        stores[codec] = DenseStore.open(path)
    st = stores["zstd"].stats()
    rng = np.random.default_rng(seed)
    plan = [rng.integers(0, len(emb), BATCH) for _ in range(512)]
    for idx in plan[:32]:
        for s in stores.values():
            got = s[idx]
            assert got.tobytes() == emb[idx].tobytes()

    def loop(s) -> float:
        n = 0
        t = time.perf_counter()
        while True:
            for idx in plan:
                s[idx]
            n += len(plan)
            dt = time.perf_counter() - t
            if dt >= 1.0:
                return n / dt

    best = {"zstd": 0.0, "raw": 0.0}
    for _ in range(rounds):
        for codec in ("zstd", "raw"):
            best[codec] = max(best[codec], loop(stores[codec]))
    for s in stores.values():
        s.close()
    return {
        "zstd_batches_per_s": best["zstd"],
        "raw_batches_per_s": best["raw"],
        "zstd_over_raw": best["zstd"] / best["raw"],
        "zstd_raw_records": st["raw_records"],
        "zstd_records": st["records"],
        "zstd_data_bytes": st["data_bytes"],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_incompressible.py", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="write,gather")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    only = args.only.split(",")

    from _machine import describe_machine_and_build

    root = Path(tempfile.mkdtemp(prefix="loaderx-incompressible-"))
    try:
        machine, text = describe_machine_and_build(root)
        print(text, file=sys.stderr)
        table, emb, _ = _table(args.rows, args.seed)
        result = {
            "machine": machine,
            "rows": args.rows,
            "dim": DIM,
            "date": time.strftime("%Y-%m-%d"),
        }
        if "write" in only:
            result["write"] = bench_write(root, table, emb, args.rounds, args.workers)
        if "gather" in only:
            result["gather"] = bench_gather(root, emb, args.rounds, args.seed)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
