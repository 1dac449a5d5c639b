"""Tables on Google Cloud Storage, read from ``gs://`` through fake-gcs-server
(the emulator ``object_store``'s own CI uses) on 127.0.0.1: a plain and a
sharded table open, gather bit-exactly like the local ones, feed the loader
and answer SQL. The emulator lists an object's ETag unquoted and answers a
GET with it quoted: the two are one entity tag. Tables are uploaded with
the emulator's JSON API, which is all of its write side that works (it
refuses the XML-API uploads loaderx's writes use), so writing to ``gs://``
is not tested here."""

import numpy as np
import pytest
from remote_servers import make_table, same_batch

import loaderx
from loaderx import _native


@pytest.fixture
def local_table(tmp_path):
    return make_table(str(tmp_path / "t"))


@pytest.fixture
def gs_table(gcs, local_table):
    return gcs.upload_dir(local_table, f"{gcs.prefix}/t")


def test_a_table_on_gcs_reads_like_the_local_one(gcs, gs_table, local_table):
    with (
        loaderx.open_table(gs_table, storage_options=gcs.options()) as rt,
        loaderx.open_table(local_table) as lt,
    ):
        assert rt.remote and list(rt) == list(lt) and rt.num_rows == lt.num_rows
        rng = np.random.default_rng(3)
        for _ in range(3):
            idx = rng.integers(0, lt.num_rows, 64)
            same_batch({k: rt[k][idx] for k in rt}, {k: lt[k][idx] for k in lt})


def test_the_loader_and_sql_on_a_gcs_table(gcs, gs_table, local_table):
    pytest.importorskip("pyarrow")
    from loaderx.dataloader import DataLoader

    with (
        loaderx.open_table(gs_table, storage_options=gcs.options()) as rt,
        loaderx.open_table(local_table) as lt,
    ):
        kw = dict(batch_size=16, mode="cyclic", seed=5, world_size=2, rank=1)
        with DataLoader(rt, **kw) as a, DataLoader(lt, **kw) as b:
            for _ in range(4):
                same_batch(next(a), next(b))
        q = "SELECT label, COUNT(*) AS n FROM t WHERE label > 3 GROUP BY label ORDER BY label"
        assert loaderx.sql(q, t=rt).equals(loaderx.sql(q, t=lt))


def test_a_sharded_table_on_gcs_opens_from_its_manifest(gcs, tmp_path):
    pa = pytest.importorskip("pyarrow")
    data = pa.table({"x": np.arange(1000, dtype=np.int64), "y": np.arange(1000) * 0.5})
    local = str(tmp_path / "sharded")
    loaderx.ingest_sharded(data, local, workers=1, shards=4).close()
    uri = gcs.upload_dir(local, f"{gcs.prefix}/sh")
    with loaderx.open_table(uri, storage_options=gcs.options()) as t:
        assert t.sharded and t.num_rows == 1000 and len(t.shards) == 4
        idx = np.array([0, 999, 500, 250, 251])
        assert t["x"][idx].tolist() == idx.tolist()
        assert t["y"][idx].tolist() == (idx * 0.5).tolist()


def test_an_object_rewritten_under_an_open_gcs_table_is_corrupted(gcs, gs_table, local_table):
    with loaderx.open_table(gs_table, storage_options=gcs.options()) as t:
        t["image"][[0]]
        with open(f"{local_table}/image/data.zr", "rb") as f:
            body = f.read()
        # The same size, other bytes: another entity tag.
        gcs.put(f"{gcs.prefix}/t/image/data.zr", body[::-1])
        with pytest.raises(loaderx.Corrupted, match="image/data.zr"):
            t["image"][[0, 1, 2]]


def test_reads_of_an_unchanged_gcs_table_make_no_extra_requests(gcs, gs_table):
    with loaderx.open_table(gs_table, storage_options=gcs.options()) as t:
        before = _native.remote_stats()["requests"]
        t["label"][[1, 2, 3]]
        # One ranged GET: the listing's unquoted tag pinned the version the
        # GET's quoted one names, so no request fails and none is repeated.
        assert _native.remote_stats()["requests"] - before == 1


def test_an_edited_table_on_gcs_reads_its_edits(gcs, tmp_path):
    """Edits (a column group per edited shard, a merge's appended shard and
    deletion files) read from a bucket as locally, at each version."""
    pa = pytest.importorskip("pyarrow")
    n = 300
    ids = np.arange(n, dtype=np.int64)
    data = pa.table({"id": ids, "label": ids % 7, "caption": [f"c{i}" for i in ids]})
    local = str(tmp_path / "edited")
    loaderx.ingest_sharded(data, local, workers=1, shards=3).close()
    with loaderx.open_table(local, readonly=False) as t:
        t.update("id % 10 = 3", {"label": 70, "caption": "edited"})
        t.merge_insert({"id": np.array([5, 1000]), "label": np.array([55, 1])}, "id")
        t.delete([0])
    uri = gcs.upload_dir(local, f"{gcs.prefix}/edited")
    for version in (1, 2, 3, 4):
        with (
            loaderx.open_table(uri, storage_options=gcs.options(), version=version) as rt,
            loaderx.open_table(local, version=version) as lt,
        ):
            assert rt.num_rows == lt.num_rows
            idx = np.arange(lt.num_rows)
            same_batch({k: rt[k][idx] for k in rt}, {k: lt[k][idx] for k in lt})
            q = "SELECT label, count(*) AS n FROM t GROUP BY label ORDER BY label"
            assert loaderx.sql(q, t=rt).equals(loaderx.sql(q, t=lt))
