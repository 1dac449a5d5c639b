"""Inspect stores with DuckDB SQL, then train on the records a query selected.

Builds three equal-length streams: images (a ``DenseStore`` of uint8
(3, 32, 32)), labels (a ``DenseStore`` of int64 scalars) and captions as token
sequences (a ``RaggedStore`` of int32). ``loaderx.arrow.table`` exposes them
to DuckDB as an Arrow table with a UInt64 ``record_id`` column first:

* an image column is ``arrow.fixed_shape_tensor`` (DuckDB sees
  ``UTINYINT[3072]``, the flattened record);
* a ragged column is ``struct{data: List<int32>, shape: List<int32>}``, so
  ``len(tokens.data)`` is a sequence's length and ``tokens.shape`` its shape.

``loaderx.arrow.table`` returns a lazy ``pyarrow.RecordBatchReader``: records
are gathered as DuckDB scans it, every stream in the dict is read (keep the
dict to the streams the query needs), and it can be scanned once. A small
table that several queries share is read into memory first with
``pa.table(reader)``.

The ``record_id`` values a query returns go straight to
``DataLoader(indices=...)``, which then samples only those records.

    python examples/duckdb_inspect.py [--records 2000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import duckdb
import numpy as np
import pyarrow as pa

import loaderx.arrow
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore

CLASSES = 10
KEEP_LABELS = (3, 7)
MIN_TOKENS = 16


def build_stores(root: str, n: int, seed: int = 0) -> dict:
    """images, label and tokens stores of n records each, opened for reading."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n).astype(np.int64)
    # Images whose brightness depends on the label, plus a little noise.
    base = (40 + 18 * labels).astype(np.int16)[:, None, None, None]
    noise = rng.integers(-8, 9, (n, 3, 32, 32), dtype=np.int16)
    images = np.clip(base + noise, 0, 255).astype(np.uint8)
    lengths = np.clip(rng.lognormal(np.log(20), 0.6, n), 2, 96).astype(np.int64)
    flat = rng.integers(0, 5000, int(lengths.sum()), dtype=np.int32)
    tokens = np.split(flat, np.cumsum(lengths)[:-1])

    with DenseStore.create(os.path.join(root, "image"), np.uint8, (3, 32, 32)) as s:
        s.append(images)
    with DenseStore.create(os.path.join(root, "label"), np.int64, ()) as s:
        s.append(labels)
    with RaggedStore.create(os.path.join(root, "tokens"), np.int32) as s:
        s.append(tokens)
    return {
        "image": DenseStore.open(os.path.join(root, "image")),
        "label": DenseStore.open(os.path.join(root, "label")),
        "tokens": RaggedStore.open(os.path.join(root, "tokens")),
    }


def show(title: str, rel: duckdb.DuckDBPyRelation) -> list[tuple]:
    rows = rel.fetchall()
    print(f"\n{title}\n  columns: {', '.join(rel.columns)}")
    for row in rows:
        print("  " + "  ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--dir", default=None, help="where to write stores (default: a temp dir)")
    args = ap.parse_args()

    root = args.dir or tempfile.mkdtemp(prefix="loaderx-duckdb-")
    streams = build_stores(root, args.records)
    image, label, tokens = streams["image"], streams["label"], streams["tokens"]
    con = duckdb.connect()
    try:
        print(f"stores under {root}")
        for name, store in streams.items():
            print(f"  {name}: {store!r}")

        # Labels are small and queried twice: read them into an Arrow table.
        con.register("labels", pa.table(loaderx.arrow.table({"label": label})))
        show(
            "records per label",
            con.sql("SELECT label, count(*) AS n FROM labels GROUP BY label ORDER BY label"),
        )

        # A lazy reader scans once; only the streams in its dict are gathered.
        con.register("captions", loaderx.arrow.table({"label": label, "tokens": tokens}))
        show(
            "token sequence lengths per label (len(tokens.data))",
            con.sql(
                "SELECT label, count(*) AS n, min(len(tokens.data)) AS min_len, "
                "avg(len(tokens.data)) AS mean_len, max(len(tokens.data)) AS max_len "
                "FROM captions GROUP BY label ORDER BY label"
            ),
        )

        con.register("pixels", loaderx.arrow.table({"image": image, "label": label}))
        show(
            "mean pixel value per label (the image column is UTINYINT[3072])",
            con.sql(
                "SELECT label, avg(list_avg(image::UTINYINT[])) AS mean_pixel "
                "FROM pixels GROUP BY label ORDER BY label LIMIT 4"
            ),
        )

        # The selection: labels 3 and 7 whose caption has at least MIN_TOKENS.
        keep = ", ".join(map(str, KEEP_LABELS))
        con.register("captions2", loaderx.arrow.table({"label": label, "tokens": tokens}))
        selected = con.sql(
            f"SELECT record_id, label, len(tokens.data) AS n_tokens, tokens.shape AS shape "
            f"FROM captions2 WHERE label IN ({keep}) AND len(tokens.data) >= {MIN_TOKENS} "
            f"ORDER BY record_id"
        ).fetchnumpy()
        ids = selected["record_id"]
        ids_by_label = con.sql(
            f"SELECT record_id FROM labels WHERE label IN ({keep})"
        ).fetchnumpy()["record_id"]
        # The same selection in NumPy, from plain store reads.
        all_labels = label[:]
        all_lengths = np.array([len(t) for t in tokens[:]])
        want = np.flatnonzero(np.isin(all_labels, KEEP_LABELS) & (all_lengths >= MIN_TOKENS))
        assert np.array_equal(ids, want), "SQL selection differs from the NumPy one"
        assert np.array_equal(
            np.sort(ids_by_label), np.flatnonzero(np.isin(all_labels, KEEP_LABELS))
        )
        print(
            f"\nselected {len(ids)} record_ids ({ids.dtype}) with label in {KEEP_LABELS} and "
            f">= {MIN_TOKENS} tokens (of {len(ids_by_label)} with those labels); "
            f"first: {ids[:8].tolist()}, shapes {[s.tolist() for s in selected['shape'][:3]]}"
        )

        # Train only on the selection: the loader maps sampled positions through ids.
        with DataLoader(streams, batch_size=32, indices=ids, seed=1, workers=0) as loader:
            for step in range(5):
                batch = next(loader)
                lens = [len(t) for t in batch["tokens"]]
                assert set(batch["label"].tolist()) <= set(KEEP_LABELS)
                assert min(lens) >= MIN_TOKENS
                print(
                    f"step {step}: image {batch['image'].shape} {batch['image'].dtype}, "
                    f"labels {np.bincount(batch['label'], minlength=CLASSES)[list(KEEP_LABELS)]}"
                    f" (of {KEEP_LABELS}), tokens {min(lens)}..{max(lens)}"
                )

        # Arrow batches are Arrow tables too: DuckDB queries one directly.
        with DataLoader(
            streams, batch_size=64, indices=ids, seed=2, workers=0, output="arrow"
        ) as loader:
            batch = next(loader)
        con.register("batch", batch)
        show(
            f"one output='arrow' batch ({batch.num_rows} rows, columns {batch.schema.names})",
            con.sql(
                "SELECT label, count(*) AS n, avg(len(tokens.data)) AS mean_len "
                "FROM batch GROUP BY label ORDER BY label"
            ),
        )
    finally:
        con.close()
        for store in streams.values():
            store.close()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
