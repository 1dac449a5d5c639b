"""loaderx.sql, the datafusion-python provider, and their pushdowns."""

import numpy as np
import pytest

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore, RaggedStore

pa = pytest.importorskip("pyarrow")

N = 400


@pytest.fixture
def train(root):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (N, 3, 8, 8), dtype=np.uint8)
    label = rng.integers(0, 10, N).astype(np.int64)
    weight = rng.standard_normal(N).astype(np.float32)
    toks = [np.full(i % 6 + 1, i, np.int32) for i in range(N)]
    with DenseStore.create(root / "image", np.uint8, (3, 8, 8), codec="raw") as s:
        s.append(img)
    with DenseStore.create(root / "label", np.int64, ()) as s:
        s.append(label)
    with DenseStore.create(root / "weight", np.float32, ()) as s:
        s.append(weight)
    with RaggedStore.create(root / "tokens", np.int32) as s:
        s.append(toks)
    streams = {
        "image": DenseStore.open(root / "image"),
        "label": DenseStore.open(root / "label"),
        "weight": DenseStore.open(root / "weight"),
        "tokens": RaggedStore.open(root / "tokens"),
    }
    yield streams, img, label, weight, toks
    for s in streams.values():
        s.close()


def reads(store):
    return store._live().read_counters()[0]


def test_aggregates_equal_numpy(train):
    streams, img, label, weight, _ = train
    t = loaderx.sql(
        "SELECT label, count(*) AS n, sum(weight) AS w FROM train GROUP BY label ORDER BY label",
        train=streams,
    )
    assert isinstance(t, pa.Table)
    labels, counts = np.unique(label, return_counts=True)
    assert t["label"].to_pylist() == labels.tolist()
    assert t["n"].to_pylist() == counts.tolist()
    np.testing.assert_allclose(
        t["w"].to_numpy(), [weight[label == v].astype(np.float64).sum() for v in labels], rtol=1e-5
    )
    top = loaderx.sql("SELECT record_id FROM t ORDER BY weight DESC LIMIT 5", t=streams)
    assert top["record_id"].to_pylist() == np.argsort(-weight, kind="stable")[:5].tolist()


def test_record_ids_feed_the_loader(train):
    streams, img, label, _, _ = train
    ids = loaderx.sql("SELECT record_id FROM t WHERE label = 3", t=streams)["record_id"]
    assert ids.type == pa.uint64()
    assert sorted(ids.to_pylist()) == np.flatnonzero(label == 3).tolist()
    with DataLoader(streams, batch_size=4, mode="iid", indices=ids) as loader:
        for _ in range(5):
            b = next(loader)
            assert (b["label"] == 3).all()


def test_pushdowns_are_visible_in_read_counters(train):
    streams, img, label, _, _ = train
    before = {k: reads(s) for k, s in streams.items()}
    loaderx.sql("SELECT label, count(*) FROM t GROUP BY label", t=streams)
    after = {k: reads(s) for k, s in streams.items()}
    assert after["image"] == before["image"] and after["tokens"] == before["tokens"]
    assert after["label"] - before["label"] == N
    # late materialization: images only for survivors
    survivors = int((label == 7).sum())
    i0 = reads(streams["image"])
    out = loaderx.sql("SELECT record_id, image FROM t WHERE label = 7", t=streams)
    assert out.num_rows == survivors
    assert reads(streams["image"]) - i0 == survivors
    got = out["image"].combine_chunks().to_numpy_ndarray()
    np.testing.assert_array_equal(got, img[out["record_id"].to_numpy()])
    # record_id ranges touch only those rows
    l0 = reads(streams["label"])
    r = loaderx.sql(
        "SELECT label FROM t WHERE record_id BETWEEN 10 AND 19 ORDER BY record_id", t=streams
    )
    assert r["label"].to_pylist() == label[10:20].tolist()
    assert reads(streams["label"]) - l0 == 10


def test_joins_across_tables(train, root):
    streams, _, label, _, _ = train
    names = np.array([f"class-{i}" for i in range(10)])
    with DenseStore.create(root / "class_id", np.int64, ()) as s:
        s.append(np.arange(10, dtype=np.int64))
    with DenseStore.create(root / "class_size", np.int32, ()) as s:
        s.append(np.array([len(n) for n in names], np.int32))
    classes = {
        "class_id": DenseStore.open(root / "class_id"),
        "class_size": DenseStore.open(root / "class_size"),
    }
    t = loaderx.sql(
        "SELECT t.record_id, c.class_size FROM t JOIN c ON t.label = c.class_id "
        "WHERE t.record_id < 20 ORDER BY t.record_id",
        t={"label": streams["label"]},
        c=classes,
    )
    assert t["record_id"].to_pylist() == list(range(20))
    assert t["class_size"].to_pylist() == [len(names[v]) for v in label[:20]]
    for s in classes.values():
        s.close()


def test_tensor_columns_survive_select_star(train):
    streams, img, _, _, toks = train
    t = loaderx.sql("SELECT * FROM t WHERE record_id IN (3, 5) ORDER BY record_id", t=streams)
    assert t.column_names == ["record_id", "image", "label", "weight", "tokens"]
    assert isinstance(t.schema.field("image").type, pa.FixedShapeTensorType)
    np.testing.assert_array_equal(t["image"].combine_chunks().to_numpy_ndarray(), img[[3, 5]])
    assert t["tokens"].to_pylist()[1]["data"] == toks[5].tolist()


def test_bad_queries_and_tables(train, root):
    streams, *_ = train
    with pytest.raises(ValueError, match="nope"):
        loaderx.sql("SELECT nope FROM t", t=streams)
    with pytest.raises(ValueError, match="other"):
        loaderx.sql("SELECT * FROM other", t=streams)
    with DenseStore.create(root / "short", np.int64, ()) as s:
        s.append(np.arange(3))
    short = DenseStore.open(root / "short")
    with pytest.raises(ValueError, match="same length"):
        loaderx.sql("SELECT count(*) FROM t", t={"label": streams["label"], "short": short})
    short.close()
    with pytest.raises(TypeError, match="dict"):
        loaderx.sql("SELECT 1", t=[streams["label"]])
    with pytest.raises(ValueError, match="at least one table"):
        loaderx.sql("SELECT 1")


def test_datafusion_python_register_table(train):
    datafusion = pytest.importorskip("datafusion")
    from loaderx.datafusion import TableProvider

    streams, img, label, _, _ = train
    ctx = datafusion.SessionContext()
    ctx.register_table("train", TableProvider(streams))
    n = ctx.sql("SELECT count(*) AS n FROM train").to_arrow_table()["n"][0].as_py()
    assert n == N
    t = ctx.sql(
        "SELECT record_id, image FROM train WHERE label = 2 ORDER BY record_id"
    ).to_arrow_table()
    expect = np.flatnonzero(label == 2)
    assert t["record_id"].to_pylist() == expect.tolist()
    np.testing.assert_array_equal(t["image"].combine_chunks().to_numpy_ndarray(), img[expect])
    assert isinstance(t.schema.field("image").type, pa.FixedShapeTensorType)
    no_index = TableProvider({"label": streams["label"]}, index_column=None)
    ctx.register_table("labels", no_index)
    cols = ctx.sql("SELECT * FROM labels LIMIT 1").to_arrow_table().column_names
    assert cols == ["label"]
