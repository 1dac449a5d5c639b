"""Writes the loader states kept here as test data.

Each file is a ``DataLoader.state_dict()`` saved by loaderx 0.1.0 before the
state moved into the core, with the batches the run gave next
(``"expect"``), so that a resumed run can be compared bit for bit. The
streams are rebuilt from their description (``"streams"``): column ``v`` of
int64 values ``offset + arange(n)``. A table's path is written as
``{table}`` (the test puts its own copy there). Run from the repository
root: ``python tests/data/loader_states/make.py``.
"""

import json
import os
import tempfile

import numpy as np
import pyarrow as pa

import loaderx
from loaderx import Mix
from loaderx.dataloader import DataLoader

HERE = os.path.dirname(os.path.abspath(__file__))


def store(root, name, n, offset):
    s = loaderx.DenseStore.create(os.path.join(root, name, "v"), np.int64, ())
    s.append(offset + np.arange(n, dtype=np.int64))
    return s


def save(name, loader, streams, steps_before, edits, table=None):
    for k in range(steps_before):
        for at, edit in edits:
            if at == k:
                edit(loader)
        next(loader)
    state = loader.state_dict()
    expect = []
    for _ in range(6):
        batch = loader.next()
        row = {"v": batch["v"].tolist()}
        if "source" in batch:
            row["source"] = batch["source"].tolist()
        expect.append(row)
    if table is not None:
        for pin in state["tables"]:
            pin["path"] = "{table}"
    out = {"state": state, "streams": streams, "expect": expect}
    with open(os.path.join(HERE, f"{name}.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def main():
    root = tempfile.mkdtemp()
    v = store(root, "plain", 60, 0)
    with DataLoader({"v": v}, batch_size=4, seed=11, workers=0) as run:
        save(
            "cyclic_edits",
            run,
            {"v": {"n": 60, "offset": 0}},
            7,
            [(3, lambda r: r.exclude([5, 6, 7, 40])), (5, lambda r: r.skip(2))],
        )
    with DataLoader(
        {"v": v}, batch_size=3, mode="blocked", block_size=8, seed=5, workers=0
    ) as run:
        save("blocked", run, {"v": {"n": 60, "offset": 0}}, 4, [(2, lambda r: r.exclude([9]))])
    a, b = store(root, "a", 40, 0), store(root, "b", 30, 1000)
    mix = Mix({"a": {"v": a}, "b": {"v": b}}, {"a": 3.0, "b": 1.0})
    with DataLoader(mix, batch_size=6, seed=2, workers=0) as run:
        save(
            "mix_edits",
            run,
            {"a": {"v": {"n": 40, "offset": 0}}, "b": {"v": {"n": 30, "offset": 1000}}},
            6,
            [(2, lambda r: r.exclude([1, 2], source="b")), (4, lambda r: r.skip(1))],
        )
    path = os.path.join(root, "table")
    loaderx.ingest_sharded(
        pa.table({"v": np.arange(50, dtype=np.int64)}), path, workers=1, shards=2
    ).close()
    with loaderx.open_table(path) as t, DataLoader(t, batch_size=5, seed=3, workers=0) as run:
        save(
            "table_edits",
            run,
            {"v": {"n": 50, "offset": 0, "shards": 2}},
            5,
            [(1, lambda r: r.exclude([0, 49])), (3, lambda r: r.skip(3))],
            table=True,
        )


if __name__ == "__main__":
    main()
