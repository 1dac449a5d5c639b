"""Bad inputs raise specific exceptions and leave the store as it was."""

import os

import numpy as np
import pytest

from loaderx.zrecord import Corrupted, DenseStore, RaggedStore, StoreBusy

from conftest import snapshot


@pytest.fixture
def dense(root):
    path = root / "d"
    with DenseStore.create(path, np.float32, (2, 4)) as ds:
        ds.append(np.arange(24, dtype=np.float32).reshape(3, 2, 4))
    ds = DenseStore.open(path)
    yield ds
    ds.close()


@pytest.fixture
def ragged(root):
    path = root / "r"
    with RaggedStore.create(path, np.int32) as rs:
        rs.append([np.arange(3, dtype=np.int32), np.arange(5, dtype=np.int32)])
    rs = RaggedStore.open(path)
    yield rs
    rs.close()


def unchanged(store, fn, exc, match=None):
    """Runs fn expecting exc; the store's files must be byte-identical after a sync."""
    store.sync()
    before = snapshot(store._path)
    n = len(store)
    with pytest.raises(exc, match=match):
        fn()
    store.sync()
    assert len(store) == n
    assert snapshot(store._path) == before


def test_dense_append_wrong_dtype(dense):
    unchanged(dense, lambda: dense.append(np.zeros((2, 2, 4), np.float64)), TypeError, "float64")
    unchanged(
        dense, lambda: dense.append(np.zeros((2, 2, 4), ">f4")), TypeError, "expected float32"
    )
    unchanged(dense, lambda: dense.append([[1.0]]), TypeError, "numpy.ndarray")


def test_dense_append_wrong_item_shape(dense):
    unchanged(
        dense, lambda: dense.append(np.zeros((2, 4, 2), np.float32)), ValueError, r"\(n, 2, 4\)"
    )
    unchanged(dense, lambda: dense.append(np.zeros((2, 4), np.float32)), ValueError, "shape")
    unchanged(dense, lambda: dense.append(np.zeros((2, 4), np.float32)), ValueError, "got")


def test_index_out_of_range_and_negative_scalars(dense, ragged):
    for store in (dense, ragged):
        n = len(store)
        with pytest.raises(IndexError, match=f"index {n} is out of range"):
            store[n]
        with pytest.raises(IndexError, match="index -1 is out of range"):
            store[-1]
        with pytest.raises(IndexError, match="out of range"):
            store[[0, n]]
        with pytest.raises(IndexError, match="out of range"):
            store[np.array([-2])]
        with pytest.raises(IndexError, match="out of range"):
            store[np.array([2**63], dtype=np.uint64)]
        with pytest.raises(IndexError, match="boolean mask has length"):
            store[np.ones(n + 1, dtype=bool)]
        unchanged(store, lambda s=store, n=n: s.delete([0, n + 5]), IndexError, "out of range")
        unchanged(store, lambda s=store: s.delete(-1), IndexError, "out of range")


def test_bad_key_types(dense):
    for key in (1.5, "a", None, True, np.array([1.0, 2.0])):
        with pytest.raises(TypeError, match="key must be"):
            dense[key]
    with pytest.raises(ValueError, match="one-dimensional"):
        dense[np.zeros((2, 2), np.int64)]


def test_ragged_rejects_empty_records_and_wrong_dtype(ragged):
    unchanged(ragged, lambda: ragged.append([np.zeros(0, np.int32)]), ValueError, "nonempty")
    unchanged(
        ragged,
        lambda: ragged.append([np.ones(2, np.int32), np.zeros((3, 0), np.int32)]),
        ValueError,
        r"records\[1\]",
    )
    unchanged(ragged, lambda: ragged.append([np.ones(2, np.int64)]), TypeError, "int64")
    unchanged(ragged, lambda: ragged.append([[1, 2]]), TypeError, "numpy.ndarray")
    unchanged(ragged, lambda: ragged.append(5), TypeError, "iterable")


def test_create_on_existing_store(dense, root):
    dense.close()
    before = snapshot(root / "d")
    with pytest.raises(FileExistsError):
        DenseStore.create(root / "d", np.float32, (2, 4))
    with pytest.raises(FileExistsError):
        RaggedStore.create(root / "d", np.float32)
    assert snapshot(root / "d") == before
    (root / "afile").write_bytes(b"x")
    with pytest.raises(FileExistsError):
        DenseStore.create(root / "afile", np.uint8, ())


def test_open_missing(root):
    with pytest.raises(FileNotFoundError):
        DenseStore.open(root / "nope")
    os.makedirs(root / "empty_dir")
    with pytest.raises(FileNotFoundError, match="meta.zr"):
        RaggedStore.open(root / "empty_dir")


def test_open_wrong_kind(dense, ragged, root):
    dense.close()
    ragged.close()
    with pytest.raises(ValueError, match="ragged"):
        DenseStore.open(root / "r")
    with pytest.raises(ValueError, match="dense"):
        RaggedStore.open(root / "d")
    # the failed open released its lock
    DenseStore.open(root / "d").close()
    RaggedStore.open(root / "r").close()


def test_zstd_dict_without_dict_bytes_writes_nothing(root):
    with pytest.raises(ValueError, match="dict_bytes"):
        DenseStore.create(root / "x", np.uint8, (4,), codec="zstd_dict")
    with pytest.raises(ValueError, match="dict_bytes"):
        RaggedStore.create(root / "y", np.uint8, codec="zstd_dict")
    assert not (root / "x").exists() and not (root / "y").exists()
    with pytest.raises(ValueError, match="dict_bytes"):
        DenseStore.create(root / "z", np.uint8, (4,), codec="zstd", dict_bytes=b"abc")
    assert not (root / "z").exists()


def test_unsupported_dtypes_and_shapes(root):
    for dt in (np.complex64, "M8[ns]", "U4", object, [("a", "i4")], "(2,)i4", ">i4", "S3"):
        with pytest.raises(TypeError):
            DenseStore.create(root / "x", dt, (2,))
        with pytest.raises(TypeError):
            RaggedStore.create(root / "x", dt)
    with pytest.raises(ValueError, match="positive"):
        DenseStore.create(root / "x", np.uint8, (3, 0))
    with pytest.raises(ValueError, match="codec"):
        DenseStore.create(root / "x", np.uint8, (3,), codec="gzip")
    with pytest.raises(TypeError, match="path"):
        DenseStore.create(3.5, np.uint8, (3,))
    assert not (root / "x").exists()


def test_closed_store_raises_value_error(dense):
    dense.close()
    for fn in (
        lambda: dense[0],
        lambda: len(dense),
        lambda: dense.append(np.zeros((1, 2, 4), np.float32)),
        dense.stats,
        dense.sync,
        dense.compact,
        lambda: dense.delete(0),
        lambda: dense.dtype,
        lambda: dense.item_shape,
        lambda: dense.codec,
    ):
        with pytest.raises(ValueError, match="closed"):
            fn()
    assert "closed" in repr(dense)


def test_store_busy_in_process(dense, root):
    with pytest.raises(StoreBusy):
        DenseStore.open(root / "d")
    assert issubclass(StoreBusy, OSError)


def test_corrupted_store_is_catchable_and_names_the_file(dense, root):
    dense.close()
    meta = root / "d" / "meta.zr"
    raw = bytearray(meta.read_bytes())
    raw[31] = 7  # unknown codec
    meta.write_bytes(bytes(raw))
    with pytest.raises(Corrupted, match="meta.zr") as info:
        DenseStore.open(root / "d")
    assert "codec" in str(info.value)
    assert isinstance(info.value, OSError)
    raw[31] = 1
    meta.write_bytes(bytes(raw[: 4096 + 16]))  # table shorter than length
    with pytest.raises(Corrupted, match="meta.zr"):
        DenseStore.open(root / "d")


def test_corrupted_data_surfaces_on_read(dense, root):
    dense.close()
    data = root / "d" / "data.zr"
    raw = bytearray(data.read_bytes())
    raw[:] = b"\x00" * len(raw)
    data.write_bytes(bytes(raw))
    with DenseStore.open(root / "d") as ds:
        with pytest.raises(Corrupted, match="data.zr"):
            ds[0]
    os.remove(data)
    with pytest.raises(Corrupted, match="data.zr"):
        DenseStore.open(root / "d")


def test_python_hints_come_from_the_kind_of_refusal(tmp_path):
    """Refusals whose remedy is the package's to name: the ValueError
    carries the Python hint chosen by the core's error kind."""
    import loaderx
    from loaderx.utils import train_dict

    with pytest.raises(ValueError, match=r"at least 8 records .*\(give loaderx.train_dict more"):
        train_dict(np.zeros((3, 4), np.uint8))
    with pytest.raises(ValueError, match=r"storage_options is where they go") as info:
        loaderx.open_table("https://user:secret@127.0.0.1:9/t")
    assert "secret" not in str(info.value)
