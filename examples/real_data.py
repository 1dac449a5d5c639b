"""Real data in and out: a table of text, bytes, images of many sizes and
labels with missing values, round-tripped through SQL, Parquet (pyarrow and
DuckDB), a lazy polars scan and a DataLoader that decodes PNG bytes.

The data ships inside two packages (no download): scikit-learn's 1,797
handwritten 8x8 digits and scikit-image's sample photographs (RGB and
grayscale, each its own size). Every check compares with the source arrays
bit for bit.

    python examples/real_data.py [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile

import duckdb
import imageio.v3 as iio
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import skimage.data
from sklearn.datasets import load_digits

import loaderx
import loaderx.arrow
import loaderx.parquet
import loaderx.polars
from loaderx.dataloader import DataLoader

PHOTOS = ["astronaut", "camera", "chelsea", "coffee", "coins", "rocket", "moon", "page", "text"]


def photos_table() -> tuple[pa.Table, list[np.ndarray]]:
    """One row per photograph: the pixels (ragged uint8, its own shape), the
    PNG bytes, a text description and a label (None for grayscale)."""
    images = [getattr(skimage.data, name)() for name in PHOTOS]
    pngs = [iio.imwrite("<bytes>", im, extension=".png") for im in images]
    doc = [getattr(skimage.data, name).__doc__.strip().splitlines()[0] for name in PHOTOS]
    shapes = [list(im.shape) for im in images]
    flat = pa.array(np.concatenate([im.reshape(-1) for im in images]))
    offsets = np.zeros(len(images) + 1, dtype=np.int64)
    np.cumsum([im.size for im in images], out=offsets[1:])
    pixels = pa.StructArray.from_arrays(
        [
            pa.LargeListArray.from_arrays(pa.array(offsets), flat),
            pa.array(shapes, pa.list_(pa.int32())),
        ],
        ["data", "shape"],
    )
    label = [len(im.shape) == 3 and im.shape[2] or None for im in images]
    table = pa.table(
        {
            "name": pa.array(PHOTOS),
            "description": pa.array(doc),
            "pixels": pixels,
            "png": pa.array(pngs, pa.binary()),
            "channels": pa.array(label, pa.int64()),
        }
    )
    return table, images


def digits_table() -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The digits: a dense (8, 8) image and its label, every 100th label
    missing, and a text column."""
    d = load_digits()
    images = d.images.astype(np.uint8)  # values 0..16
    labels = d.target.astype(np.int64)
    valid = np.arange(len(labels)) % 100 != 7
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(images)
    table = pa.table(
        {
            "image": tensor,
            "label": pa.array(labels, mask=~valid),
            "text": pa.array([f"digit {v}" if ok else "" for v, ok in zip(labels, valid)]),
        }
    )
    return table, images, np.where(valid, labels, -1)


def main(out: str) -> None:
    photos, images = photos_table()
    digits, digit_images, labels = digits_table()
    for s in loaderx.arrow.ingest(photos, os.path.join(out, "photos"), codec="raw").values():
        s.close()
    for s in loaderx.arrow.ingest(digits, os.path.join(out, "digits")).values():
        s.close()

    with (
        loaderx.open_table(os.path.join(out, "photos")) as p,
        loaderx.open_table(os.path.join(out, "digits")) as d,
    ):
        # Gathers: exact pixels, str, bytes, None for a missing label.
        for i, im in enumerate(p["pixels"][:]):
            assert np.array_equal(im, images[i]) and im.shape == images[i].shape
        assert p["name"][:] == PHOTOS and p["channels"][1] is None
        assert np.array_equal(d["image"][:], digit_images)

        # SQL over text, bytes and nulls.
        rgb = loaderx.sql(
            "SELECT name FROM p WHERE channels = 3 AND png IS NOT NULL ORDER BY name",
            p=p,
        )
        print("RGB photos (SQL):", rgb["name"].to_pylist())
        counts = loaderx.sql(
            "SELECT label, count(*) AS n FROM d WHERE label IS NOT NULL "
            "GROUP BY label ORDER BY label",
            d=d,
        )
        assert counts["n"].to_pylist() == [int((labels == k).sum()) for k in range(10)]
        missing = loaderx.sql("SELECT count(*) AS n FROM d WHERE label IS NULL", d=d)["n"][0]
        assert missing.as_py() == int((labels == -1).sum())

        # Parquet out, read back by pyarrow and DuckDB.
        path = os.path.join(out, "photos.parquet")
        loaderx.parquet.export(p, path)
        back = pq.read_table(path)
        assert back["png"].to_pylist() == photos["png"].to_pylist()
        assert back["channels"].to_pylist() == photos["channels"].to_pylist()
        n = duckdb.sql(f"SELECT count(*) FROM '{path}' WHERE description LIKE '%ray%'").fetchall()
        print("photos whose description mentions 'ray' (DuckDB):", n[0][0])

        # polars, lazily: the filter runs on the label before any image is read.
        sevens = (
            loaderx.polars.scan_table(d)
            .filter(pl.col("label") == 7)
            .select("record_id", "image")
            .collect()
        )
        want = np.flatnonzero(labels == 7)
        assert sevens["record_id"].to_list() == want.tolist()
        assert np.array_equal(sevens["image"].to_numpy(), digit_images[want])
        print(f"digits labelled 7 (polars scan_table): {len(sevens)}")

        # A loader whose transform decodes the PNG bytes.
        def decode(batch):
            return [iio.imread(io.BytesIO(b)) for b in batch["png"]], batch["name"]

        with DataLoader(p, batch_size=3, mode="sequential", transform=decode, workers=2) as dl:
            for _ in range(3):
                decoded, names = next(dl)
                for im, name in zip(decoded, names):
                    assert np.array_equal(im, images[PHOTOS.index(name)])
        print(f"decoded {len(PHOTOS)} PNGs in the loader: bit-exact")
        with DataLoader(d, batch_size=256, mode="iid", seed=0) as dl:
            b = next(dl)
            assert isinstance(b["label"], np.ma.MaskedArray)
        print(
            f"tables: photos {p.num_rows} rows ({', '.join(p)}), "
            f"digits {d.num_rows} rows ({', '.join(d)}); all checks bit-exact"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="directory for the tables (default: a temporary one)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="loaderx-real-")
    try:
        main(out)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
