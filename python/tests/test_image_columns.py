"""Image tables with their other columns: ``images.ingest_parquet`` takes
a Parquet path, a pyarrow Table or RecordBatchReader, or a polars
DataFrame; ``images.ingest_folder(columns=...)`` carries captions and
scores. Both write the source's columns in its order with the derived
columns (``height``, ``width``, ``path``) after them, the table lists them
in that order, and keep every value."""

import io
import os

import numpy as np
import pytest

from loaderx import images

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
PIL = pytest.importorskip("PIL.Image")

N = 7


def jpeg(i: int) -> bytes:
    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 256, (10 + i, 20 - i, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PIL.fromarray(pixels).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def source_table(struct: bool) -> "pa.Table":
    data = [jpeg(i) for i in range(N)]
    if struct:
        image = pa.array(
            [{"bytes": b, "path": f"img{i}.jpg"} for i, b in enumerate(data)],
            pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
        )
    else:
        image = pa.array(data, pa.binary())
    return pa.table(
        {
            "quality": pa.array(np.linspace(0, 1, N), pa.float64()),
            "caption": [f"a photo number {i}" for i in range(N)],
            "image": image,
            "label": pa.array(np.arange(N) % 3, pa.int64()),
        }
    )


def written_order(monkeypatch):
    """The schema each ingest hands the table writer, recorded."""
    seen = []
    from loaderx import table as table_module

    real = table_module._ingest_sharded

    def spy(source, *args, **kwargs):
        seen.append(source.schema.names)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(table_module, "_ingest_sharded", spy)
    return seen


def check_values(t, struct: bool):
    src = source_table(struct)
    ids = np.arange(N)
    assert t.num_rows == N
    assert t["quality"][ids].tolist() == src["quality"].to_pylist()
    assert t["caption"][ids] == src["caption"].to_pylist()
    assert t["label"][ids].tolist() == src["label"].to_pylist()
    assert t["image"][ids] == [jpeg(i) for i in range(N)]
    assert t["height"][ids].tolist() == [10 + i for i in range(N)]
    assert t["width"][ids].tolist() == [20 - i for i in range(N)]
    if struct:
        assert t["path"][ids] == [f"img{i}.jpg" for i in range(N)]


KINDS = ["parquet", "folder_of_parquet", "arrow_table", "record_batch_reader", "polars"]


@pytest.mark.parametrize("struct", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_ingest_parquet_takes_each_source_and_keeps_column_order_and_values(
    tmp_path, monkeypatch, kind, struct
):
    table = source_table(struct)
    if kind == "parquet":
        source = str(tmp_path / "src.parquet")
        pq.write_table(table, source, row_group_size=3)
    elif kind == "folder_of_parquet":
        os.makedirs(tmp_path / "parts")
        pq.write_table(table.slice(0, 4), tmp_path / "parts" / "a.parquet")
        pq.write_table(table.slice(4), tmp_path / "parts" / "b.parquet")
        source = tmp_path / "parts"
    elif kind == "arrow_table":
        source = table
    elif kind == "record_batch_reader":
        source = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=2))
    else:
        pl = pytest.importorskip("polars")
        source = pl.from_arrow(table)
    seen = written_order(monkeypatch)
    with images.ingest_parquet(source, str(tmp_path / "t"), workers=1) as t:
        check_values(t, struct)
        assert list(t) == seen[0]  # the table lists them in that order
    derived = ["height", "width"] + (["path"] if struct else [])
    assert seen == [["quality", "caption", "image", "label", *derived]]


def test_ingest_parquet_from_memory_names_the_source_in_errors_and_skips(tmp_path):
    table = source_table(False)
    bad = table.set_column(
        2, "image", pa.array([jpeg(0), b"nope", *[jpeg(i) for i in range(2, N)]])
    )
    with pytest.raises(ValueError, match=r"^the source row 1 is not a decodable image"):
        images.ingest_parquet(bad, str(tmp_path / "t"))
    assert not os.path.exists(tmp_path / "t" / "manifest.json")
    with images.ingest_parquet(bad, str(tmp_path / "t"), on_error="skip") as t:
        assert t.num_rows == N - 1 and t.metadata == {"skipped": ["source[1]"]}
        assert t["caption"][np.arange(2)] == ["a photo number 0", "a photo number 2"]
    with pytest.raises(TypeError, match="a pyarrow Table or RecordBatchReader, or a polars"):
        images.ingest_parquet(42, str(tmp_path / "u"))
    with pytest.raises(ValueError, match=r"column 'picture' is not in the source"):
        images.ingest_parquet(table, str(tmp_path / "u"), column="picture")


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "folder"
    paths = []
    for c in ("cat", "dog"):
        os.makedirs(root / c)
        for i in range(3):
            with open(root / c / f"{i}.jpg", "wb") as f:
                f.write(jpeg(i))
            paths.append(os.path.join(c, f"{i}.jpg"))
    return str(root), paths


def test_ingest_folder_carries_a_mapping_of_captions_and_scores(tmp_path, monkeypatch, folder):
    root, paths = folder
    columns = {
        p: {"caption": f"caption of {p}", "score": float(k) / 10} for k, p in enumerate(paths)
    }
    columns[paths[2]] = {"caption": "no score here"}  # a missing value is null
    seen = written_order(monkeypatch)
    with images.ingest_folder(root, str(tmp_path / "t"), workers=1, columns=columns) as t:
        ids = np.arange(len(paths))
        assert t["path"][ids] == paths
        assert t["caption"][ids] == [columns[p]["caption"] for p in paths]
        assert t["score"][ids].tolist()[:2] == [0.0, 0.1]
        assert t["label"][ids].tolist() == [0, 0, 0, 1, 1, 1]
        assert t["height"][ids].tolist() == [10, 11, 12] * 2
        assert t.metadata == {"classes": ["cat", "dog"]}
        assert list(t) == seen[0]  # the table lists them in that order
    assert seen == [["image", "label", "path", "caption", "score", "height", "width"]]


@pytest.mark.parametrize("kind", ["arrow_table", "dict", "polars"])
def test_ingest_folder_carries_a_table_with_a_path_column(tmp_path, monkeypatch, folder, kind):
    root, paths = folder
    order = list(reversed(paths))  # any row order: matched by path
    data = {
        "quality": [float(len(p)) + k for k, p in enumerate(order)],
        "path": order,
        "caption": [p.upper() for p in order],
    }
    if kind == "arrow_table":
        columns = pa.table(data)
    elif kind == "dict":
        columns = data
    else:
        pl = pytest.importorskip("polars")
        columns = pl.DataFrame(data)
    seen = written_order(monkeypatch)
    with images.ingest_folder(root, str(tmp_path / "t"), workers=1, columns=columns) as t:
        ids = np.arange(len(paths))
        at = {p: k for k, p in enumerate(order)}
        assert t["caption"][ids] == [p.upper() for p in paths]
        assert t["quality"][ids].tolist() == [data["quality"][at[p]] for p in paths]
    assert seen == [["image", "label", "path", "quality", "caption", "height", "width"]]


def test_ingest_folder_columns_must_match_the_files(tmp_path, folder):
    root, paths = folder
    some = {p: {"caption": "x"} for p in paths[1:]}
    with pytest.raises(ValueError, match=r"no entry for 1 of the 6 image files .* 'cat/0.jpg'"):
        images.ingest_folder(root, str(tmp_path / "t"), columns=some)
    extra = {**{p: {"caption": "x"} for p in paths}, "cat/9.jpg": {"caption": "y"}}
    with pytest.raises(ValueError, match=r"1 paths that are no image file .* 'cat/9.jpg'"):
        images.ingest_folder(root, str(tmp_path / "t"), columns=extra)
    with pytest.raises(ValueError, match=r"\['label'\] are columns ingest_folder writes"):
        images.ingest_folder(root, str(tmp_path / "t"), columns={"path": paths, "label": [0] * 6})
    with pytest.raises(ValueError, match="must have a 'path' column"):
        images.ingest_folder(root, str(tmp_path / "t"), columns={"file": paths})
    with pytest.raises(TypeError, match="columns must be"):
        images.ingest_folder(root, str(tmp_path / "t"), columns=[1, 2])
    assert not os.path.exists(tmp_path / "t")
