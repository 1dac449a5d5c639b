"""``loaderx.parquet.export`` keeps ``Table.metadata`` in the Parquet file's
key-value metadata under ``loaderx.metadata`` (JSON), and
``ingest_sharded`` of such a file restores it."""

import json
import os

import numpy as np
import pytest

import loaderx
import loaderx.parquet

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
PIL = pytest.importorskip("PIL.Image")

KEY = b"loaderx.metadata"


@pytest.fixture
def pets(tmp_path):
    root = tmp_path / "folder"
    for c, shade in (("cat", 30), ("dog", 200)):
        os.makedirs(root / c)
        for i in range(3):
            PIL.fromarray(np.full((8 + i, 10, 3), shade + i, np.uint8)).save(root / c / f"{i}.png")
    return loaderx.images.ingest_folder(str(root), str(tmp_path / "pets"), workers=1)


def test_export_then_ingest_sharded_keeps_the_metadata(pets, tmp_path):
    out = str(tmp_path / "pets.parquet")
    with pets as t:
        assert t.metadata == {"classes": ["cat", "dog"]}
        assert loaderx.parquet.export(t, out) == 6
        want = {c: t[c][np.arange(6)] for c in ("label", "height", "path")}
    assert loaderx.parquet.METADATA_KEY == "loaderx.metadata"
    kv = pq.read_metadata(out).metadata
    assert json.loads(kv[KEY]) == {"classes": ["cat", "dog"]}
    assert b"ARROW:schema" in kv  # the writer's own keys are kept
    back = pq.read_table(out)
    assert back.num_rows == 6 and sorted(back.column_names) == sorted(
        ["image", "label", "height", "width", "path"]
    )
    assert back["label"].to_pylist() == want["label"].tolist()
    assert back["path"].to_pylist() == list(want["path"])
    with loaderx.ingest_sharded(out, str(tmp_path / "again"), workers=1) as again:
        assert again.metadata == {"classes": ["cat", "dog"]}
        assert again["height"][np.arange(6)].tolist() == want["height"].tolist()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_view_exports_its_tables_metadata_and_streams_export_none(pets, tmp_path):
    with pets as t:
        path = t.path
    with loaderx.open_table(path, readonly=False) as t:
        t.split({"train": 0.5, "val": 0.5}, seed=1)
    with loaderx.open_table(path, view="val") as val:
        n = loaderx.parquet.export(val, str(tmp_path / "val.parquet"))
        loaderx.parquet.export(dict(val), str(tmp_path / "plain.parquet"))
    assert n == 3
    assert json.loads(pq.read_metadata(str(tmp_path / "val.parquet")).metadata[KEY]) == {
        "classes": ["cat", "dog"]
    }
    assert KEY not in pq.read_metadata(str(tmp_path / "plain.parquet")).metadata
    with loaderx.ingest_sharded(str(tmp_path / "plain.parquet"), str(tmp_path / "p")) as p:
        assert p.metadata == {}


def test_a_parquet_file_written_elsewhere_carrying_the_key_restores_it(tmp_path):
    """The key read from any writer's footer (pyarrow's, which also holds
    other keys), through the parquet crate."""
    path = str(tmp_path / "many.parquet")
    table = pa.table({"a": np.arange(1000), "b": [f"s{i}" for i in range(1000)]})
    many = {f"key{i}": f"value{i}" for i in range(20)}
    many["loaderx.metadata"] = json.dumps({"x": [1, 2]})
    pq.write_table(table.replace_schema_metadata(many), path, row_group_size=300)
    with loaderx.ingest_sharded(path, str(tmp_path / "t"), workers=1) as t:
        assert t.metadata == {"x": [1, 2]}
        assert t.num_rows == 1000


def test_metadata_that_is_not_json_raises_naming_the_key(tmp_path):
    path = str(tmp_path / "bad.parquet")
    bad = pa.table({"a": [1, 2]}).replace_schema_metadata({"loaderx.metadata": "{not json"})
    pq.write_table(bad, path)
    with pytest.raises(ValueError, match=r"'loaderx.metadata' that is not JSON"):
        loaderx.ingest_sharded(path, str(tmp_path / "t"), workers=1)
    assert not os.path.exists(tmp_path / "t")


def test_a_pyarrow_source_carrying_the_key_restores_it(tmp_path):
    source = pa.table({"a": [1, 2, 3]}).replace_schema_metadata(
        {"loaderx.metadata": json.dumps({"classes": ["x"]})}
    )
    with loaderx.ingest_sharded(source, str(tmp_path / "t"), workers=1) as t:
        assert t.metadata == {"classes": ["x"]}
