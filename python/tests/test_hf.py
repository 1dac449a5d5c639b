"""loaderx.hf with the real Hugging Face datasets package: a table as a
datasets.Dataset (Table.to_hf) and a dataset ingested as a table, tensor,
ragged, text and null columns round-tripping."""

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")

import loaderx  # noqa: E402
import loaderx.hf  # noqa: E402

N = 12


def _ragged2(i):
    return np.arange((i % 3 + 1) * 4, dtype=np.int16).reshape(i % 3 + 1, 4) + i


@pytest.fixture
def table(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    with loaderx.DenseStore.create(root / "img", np.float32, (2, 3)) as s:
        s.append(np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3))
    with loaderx.DenseStore.create(root / "vec", np.uint8, (5,)) as s:
        s.append(np.arange(N * 5, dtype=np.uint8).reshape(N, 5))
    with loaderx.RaggedStore.create(root / "tok", np.int32) as s:
        s.append(np.arange(i % 4 + 1, dtype=np.int32) + i for i in range(N))
    with loaderx.RaggedStore.create(root / "grid", np.int16) as s:
        s.append(_ragged2(i) for i in range(N))
    loaderx.arrow.ingest(
        pa.table(
            {
                "caption": pa.array([None if i == 3 else f"record {i}" for i in range(N)]),
                "label": pa.array([None if i == 5 else i % 7 for i in range(N)], pa.int64()),
            }
        ),
        str(root),
    )
    with loaderx.open_table(root) as t:
        yield t


def test_to_hf_types_and_values(table):
    ds = table.to_hf()
    f = ds.features
    assert f["img"] == datasets.Array2D(shape=(2, 3), dtype="float32")
    assert f["vec"] == datasets.List(datasets.Value("uint8"), length=5)
    assert f["tok"] == datasets.List(datasets.Value("int32"))
    assert f["grid"] == datasets.Array2D(shape=(None, 4), dtype="int16")
    assert f["caption"] == datasets.Value("large_string")
    assert len(ds) == N
    rows = ds.with_format("numpy")
    np.testing.assert_array_equal(rows[4]["img"], np.arange(24, 30, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(rows[7]["tok"], np.arange(4, dtype=np.int32) + 7)
    np.testing.assert_array_equal(rows[5]["grid"], _ragged2(5))
    plain = ds[3]
    assert plain["caption"] is None and ds[5]["label"] is None and ds[2]["caption"] == "record 2"
    assert table.to_hf(columns=["label"]).column_names == ["label"]


def test_a_dataset_ingests_back_into_the_same_table(table, tmp_path):
    ds = table.to_hf()
    path = loaderx.hf.ingest(ds, tmp_path / "back")
    with loaderx.open_table(path) as back:
        assert sorted(back) == sorted(table)
        for name in table:
            a, b = table[name], back[name]
            assert a.dtype == b.dtype and type(a) is type(b), name
            if isinstance(a, loaderx.DenseStore):
                assert a.item_shape == b.item_shape, name
            for i in range(N):
                x, y = a[i], b[i]
                if isinstance(x, np.ndarray):
                    assert x.shape == y.shape and x.tobytes() == y.tobytes(), (name, i)
                else:
                    assert x == y, (name, i)


def test_a_dataset_built_by_datasets_itself_ingests(tmp_path):
    ds = datasets.Dataset.from_dict(
        {"text": ["a", "bb", "ccc"], "ids": [[1, 2], [3], [4, 5, 6]], "y": [0.5, 1.5, 2.5]}
    )
    path = loaderx.hf.ingest(ds, tmp_path / "t")
    with loaderx.open_table(path) as t:
        assert t["text"][1] == "bb"
        np.testing.assert_array_equal(t["ids"][2], [4, 5, 6])
        assert float(t["y"][0]) == 0.5


def test_columns_without_a_datasets_type_are_refused(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    with loaderx.RaggedStore.create(root / "mixed", np.int32) as s:
        s.append([np.zeros(3, np.int32), np.zeros((2, 2), np.int32)])
    with loaderx.open_table(root) as t, pytest.raises(ValueError, match="'mixed'.*differ in ndim"):
        t.to_hf()
    with pytest.raises(TypeError, match="datasets.Dataset"):
        loaderx.hf.ingest({"a": [1]}, tmp_path / "x")


def test_a_column_without_a_store_mapping_leaves_nothing(tmp_path):
    ds = datasets.Dataset.from_dict({"nested": [[[1], [2, 3]], [[4]]], "y": [1, 2]})
    with pytest.raises(TypeError, match='"nested"'):
        loaderx.hf.ingest(ds, tmp_path / "t")
    assert not (tmp_path / "t").exists()
