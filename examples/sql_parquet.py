"""SQL over stores, a training subset chosen by a query, Parquet round trip
and the command line.

1. Writes a table of three equal-length streams (images, labels, captions)
   and a small lookup table of class names' weights.
2. Summarises it with ``loaderx.sql`` (GROUP BY, a join), then selects the
   ``record_id`` of every image of two classes and trains on just those with
   ``DataLoader(indices=...)``.
3. Registers the same streams with datafusion-python when it is installed.
4. Exports the table to Parquet, reads it back with pyarrow, ingests it into
   new stores, and runs the ``loaderx`` command on the result.

    python examples/sql_parquet.py [--records 2000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow.parquet as pq

import loaderx
import loaderx.datafusion
import loaderx.parquet
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore


def write(root: str, n: int) -> None:
    rng = np.random.default_rng(0)
    label = rng.integers(0, 10, n).astype(np.int64)
    image = (rng.integers(0, 40, (n, 3, 16, 16)) + label[:, None, None, None] * 20).astype(np.uint8)
    t = os.path.join(root, "train")
    with DenseStore.create(os.path.join(t, "image"), np.uint8, (3, 16, 16)) as s:
        s.append(image)
    with DenseStore.create(os.path.join(t, "label"), np.int64, ()) as s:
        s.append(label)
    with RaggedStore.create(os.path.join(t, "caption"), np.int32) as s:
        s.append(rng.integers(0, 1000, rng.integers(3, 30), dtype=np.int32) for _ in range(n))
    c = os.path.join(root, "classes")
    with DenseStore.create(os.path.join(c, "label"), np.int64, ()) as s:
        s.append(np.arange(10, dtype=np.int64))
    with DenseStore.create(os.path.join(c, "weight"), np.float32, ()) as s:
        s.append(np.linspace(0.5, 1.5, 10, dtype=np.float32))


def open_table(path: str) -> dict:
    out = {}
    for name in sorted(os.listdir(path)):
        kind = json.loads(cli("info", os.path.join(path, name), "--json"))["kind"]
        cls = DenseStore if kind == "dense" else RaggedStore
        out[name] = cls.open(os.path.join(path, name))
    return out


def cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "loaderx", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"loaderx {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--dir", help="where to write (default: a temp dir)")
    args = ap.parse_args()
    if args.dir:
        run(args.dir, args.records)
    else:
        with tempfile.TemporaryDirectory(prefix="loaderx-sql-") as root:
            run(root, args.records)


def run(root: str, n: int) -> None:
    write(root, n)
    train = open_table(os.path.join(root, "train"))
    classes = open_table(os.path.join(root, "classes"))

    counts = loaderx.sql(
        "SELECT label, count(*) AS n FROM train GROUP BY label ORDER BY label", train=train
    )
    labels = train["label"][:]
    assert counts["n"].to_pylist() == np.bincount(labels, minlength=10).tolist()
    print("records per label:", dict(zip(counts["label"].to_pylist(), counts["n"].to_pylist())))

    weighted = loaderx.sql(
        "SELECT sum(c.weight) AS w, count(*) AS n FROM train t JOIN classes c ON t.label = c.label",
        train=train,
        classes=classes,
    )
    w, rows = weighted["w"][0].as_py(), weighted["n"][0].as_py()
    assert rows == n and abs(w - np.linspace(0.5, 1.5, 10)[labels].sum()) < 1e-3 * n
    print(f"join: {rows} rows, total class weight {w:.1f}")

    ids = loaderx.sql("SELECT record_id FROM train WHERE label IN (1, 3)", train=train)["record_id"]
    with DataLoader(train, batch_size=64, indices=ids, mode="iid", seed=5) as loader:
        for _ in range(20):
            batch = next(loader)
            assert set(batch["label"].tolist()) <= {1, 3}
    print(f"trained 20 steps on the {len(ids)} records the query selected")

    try:
        from datafusion import SessionContext
    except ImportError:
        print(
            "datafusion-python is not installed, so that part is left out "
            "(pip install 'loaderx[datafusion]')"
        )
    else:
        ctx = SessionContext()
        ctx.register_table("train", loaderx.datafusion.TableProvider(train))
        got = ctx.sql("SELECT count(*) AS n FROM train WHERE label = 3").to_arrow_table()
        assert got["n"][0].as_py() == int((labels == 3).sum())
        print(f"datafusion-python counts {got['n'][0]} records of label 3")

    out = os.path.join(root, "train.parquet")
    rows = loaderx.parquet.export(train, out)
    table = pq.read_table(out)
    assert table.column_names == ["caption", "image", "label"]
    assert np.array_equal(table["image"].combine_chunks().to_numpy_ndarray(), train["image"][:])
    print(f"exported {rows} rows; pyarrow reads image as {table.schema.field('image').type}")

    back = loaderx.parquet.ingest(out, os.path.join(root, "restored"))
    assert np.array_equal(back["label"][:], labels)
    for s in [*back.values(), *train.values(), *classes.values()]:
        s.close()

    info = json.loads(cli("info", os.path.join(root, "restored", "image"), "--json"))
    verify = json.loads(cli("verify", os.path.join(root, "restored", "caption"), "--json"))
    print(f"loaderx info: {info}")
    print(f"loaderx verify: {verify}")
    print(cli("sql", "SELECT count(*) AS n FROM t", "--table", f"t={root}/restored").strip())


if __name__ == "__main__":
    main()
