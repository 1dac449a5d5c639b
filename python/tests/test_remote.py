"""Tables and stores on object storage, against moto's S3-compatible server
on 127.0.0.1 (and a fault proxy in front of it): reads are bit-exact with
the local table, requests are planned (no request per record, ranges
merged, cache hits free), writes appear whole, and every failure raises
the exception its kind calls for, naming the object and never a
credential."""

import io
import os
import threading

import numpy as np
import pytest
from remote_servers import FaultProxy, make_table, same_batch

import loaderx
from loaderx import _native

SECRET = "loaderx-test-secret-value"


def requests() -> int:
    return _native.remote_stats()["requests"]


def uri(s3, name="t"):
    return f"s3://{s3.bucket}/{s3.prefix}/{name}"


@pytest.fixture
def local_table(tmp_path):
    return make_table(str(tmp_path / "t"))


@pytest.fixture
def remote_table(s3, local_table):
    loaderx.copy_table(local_table, uri(s3), storage_options=s3.options())
    return uri(s3)


def test_copy_then_read_is_bit_exact(s3, local_table, remote_table):
    keys = s3.keys(s3.prefix)
    assert sorted(k.split("/", 1)[1] for k in keys) == sorted(
        f"t/{c}/{f}" for c in ("image", "tokens", "label") for f in ("meta.zr", "data.zr")
    )
    rng = np.random.default_rng(1)
    with (
        loaderx.open_table(remote_table, storage_options=s3.options()) as rt,
        loaderx.open_table(local_table) as lt,
    ):
        assert rt.remote and not lt.remote
        assert list(rt) == list(lt) and rt.num_rows == lt.num_rows
        for _ in range(3):
            idx = rng.integers(0, lt.num_rows, 64)
            same_batch({k: rt[k][idx] for k in rt}, {k: lt[k][idx] for k in lt})
        assert rt["image"][np.array([], dtype=np.int64)].shape == (0, 3, 8, 8)
        with pytest.raises(IndexError):
            rt["label"][[rt.num_rows]]


def test_open_costs_a_listing_and_one_round_of_fetches(s3, remote_table):
    before = requests()
    t = loaderx.open_table(remote_table, storage_options=s3.options())
    # manifest.json (absent), one listing, three meta.zr: nothing per record.
    assert requests() - before == 5
    t.close()


def test_a_gather_plans_its_requests(s3, tmp_path):
    # 2,000 records of 4 KiB: the batch's sorted ranges merge where they are
    # close, so a batch of 400 costs far fewer requests than records.
    local = str(tmp_path / "big")
    with loaderx.DenseStore.create(os.path.join(local, "x"), np.uint8, (4096,), codec="raw") as s:
        s.append(np.random.default_rng(0).integers(0, 255, (2000, 4096), dtype=np.uint8))
    loaderx.copy_table(local, uri(s3, "big"), storage_options=s3.options())
    proxy = FaultProxy(s3.endpoint)
    try:
        # Counts the plan's requests: no hedged duplicates on a slow machine.
        opts = s3.options(endpoint=proxy.url, hedge="false")
        with (
            loaderx.open_table(uri(s3, "big"), storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            proxy.reset_counts()
            idx = np.random.default_rng(2).integers(0, 2000, 400)
            assert np.array_equal(rt["x"][idx], lt["x"][idx])
            gets = proxy.count("GET")
            # The batch spans nearly the whole 8 MiB object: merged, then
            # split into parts of 256 KiB (the least split; the batch's
            # bytes over 64 in flight would be smaller): about 32 requests.
            assert 16 <= gets <= 34, gets
            # Far apart records are separate requests, one each at most.
            proxy.reset_counts()
            far = np.array([0, 1999, 1000])
            assert np.array_equal(rt["x"][far], lt["x"][far])
            assert proxy.count("GET") == 3
    finally:
        proxy.stop()


def _far_apart_table(path):
    # 800 records of about 4 KiB in zstd, dense and ragged, appended one at
    # a time (so data.zr holds them in index order): every 80th record is
    # 10 ranges too far apart to merge (about 320 KiB apart), so 10
    # requests per column that land in any order.
    rng = np.random.default_rng(5)
    with (
        loaderx.DenseStore.create(os.path.join(path, "x"), np.uint8, (4096,)) as x,
        loaderx.RaggedStore.create(os.path.join(path, "r"), np.int32) as r,
    ):
        for _ in range(800):
            x.append(rng.integers(0, 255, (1, 4096), dtype=np.uint8))
            r.append([rng.integers(0, 1 << 30, 1000, dtype=np.int32)])
    return path


def test_ranges_that_land_out_of_order_decode_exactly(s3, tmp_path):
    # A gather decodes each range's records as soon as it lands, while the
    # others are in flight: delays that reorder the landings change nothing.
    local = _far_apart_table(str(tmp_path / "far"))
    loaderx.copy_table(local, uri(s3, "far"), storage_options=s3.options())
    hits = {"n": 0}

    def rule(n, r):
        if r.method == "GET" and r.range and r.path.endswith("data.zr"):
            hits["n"] += 1
            return ("delay", 0.05 * (hits["n"] % 4))
        return None

    proxy = FaultProxy(s3.endpoint, rule)
    try:
        opts = s3.options(endpoint=proxy.url, hedge="false")
        with (
            loaderx.open_table(uri(s3, "far"), storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            for seed in range(3):
                idx = np.random.default_rng(seed).permutation(np.arange(0, 800, 80))
                proxy.reset_counts()
                same_batch({k: rt[k][idx] for k in rt}, {k: lt[k][idx] for k in lt})
                assert proxy.count("GET") == 20
        assert hits["n"] == 60
    finally:
        proxy.stop()


def test_a_request_failing_mid_batch_fails_the_batch_and_frees_its_slots(s3, tmp_path):
    # One request of 10 is refused while the others land and decode: the
    # batch raises, and the requests it had in flight give back their
    # places under the process's limit (64): after more failed batches than
    # that could absorb, a batch still completes.
    local = _far_apart_table(str(tmp_path / "far"))
    loaderx.copy_table(local, uri(s3, "far"), storage_options=s3.options())
    failing = {"on": True, "n": 0}

    def rule(n, r):
        if failing["on"] and r.method == "GET" and r.range and r.path.endswith("data.zr"):
            failing["n"] += 1
            return "403" if failing["n"] % 10 == 7 else ("delay", 0.02)
        return None

    proxy = FaultProxy(s3.endpoint, rule)
    try:
        opts = s3.options(endpoint=proxy.url)
        idx = np.arange(0, 800, 80)
        with (
            loaderx.open_table(uri(s3, "far"), storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            for _ in range(16):
                with pytest.raises(PermissionError, match="x/data.zr"):
                    rt["x"][idx]
            failing["on"] = False
            done = {}
            reader = threading.Thread(target=lambda: done.setdefault("x", rt["x"][idx]))
            reader.start()
            reader.join(60)
            assert not reader.is_alive(), "a batch after failed ones never completed"
            assert np.array_equal(done["x"], lt["x"][idx])
    finally:
        proxy.stop()


def test_the_cache_serves_repeats_without_requests(s3, remote_table, local_table, tmp_path):
    cache = str(tmp_path / "cache")
    idx = np.arange(0, 300, 7)
    with (
        loaderx.open_table(
            remote_table, storage_options=s3.options(), cache_dir=cache, cache_bytes=64 << 20
        ) as rt,
        loaderx.open_table(local_table) as lt,
    ):
        first = {k: rt[k][idx] for k in rt}
        before = _native.remote_stats()
        again = {k: rt[k][idx] for k in rt}
        after = _native.remote_stats()
        assert after["requests"] == before["requests"]
        assert after["cache_hits"] > before["cache_hits"]
        same_batch(first, again)
        same_batch(again, {k: lt[k][idx] for k in lt})
    blocks = [f for _, _, fs in os.walk(cache) for f in fs if f.endswith(".blk")]
    assert blocks
    # A later open (another run) reuses the blocks.
    with loaderx.open_table(
        remote_table, storage_options=s3.options(), cache_dir=cache, cache_bytes=64 << 20
    ) as rt:
        before = _native.remote_stats()
        same_batch({k: rt[k][idx] for k in rt}, first)
        after = _native.remote_stats()
        assert after["cache_misses"] == before["cache_misses"]


def test_a_damaged_cache_block_is_refetched_not_served(s3, remote_table, local_table, tmp_path):
    cache = str(tmp_path / "cache")
    opts = dict(storage_options=s3.options(), cache_dir=cache, cache_bytes=64 << 20)
    with loaderx.open_table(remote_table, **opts) as rt:
        rt["image"][[0, 1]]
    blocks = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if f.endswith(".blk")]
    for b in blocks:
        with open(b, "r+b") as f:
            f.seek(10)
            f.write(b"\xff\xfe\xfd")
    with loaderx.open_table(remote_table, **opts) as rt, loaderx.open_table(local_table) as lt:
        assert np.array_equal(rt["image"][[0, 1]], lt["image"][[0, 1]])


def test_a_cache_smaller_than_a_block_is_refused(s3, remote_table, tmp_path):
    with pytest.raises(ValueError, match="cache_bytes"):
        loaderx.open_table(
            remote_table,
            storage_options=s3.options(),
            cache_dir=str(tmp_path / "c"),
            cache_bytes=1 << 20,
        )
    with pytest.raises(ValueError, match="local path"):
        loaderx.open_table(str(tmp_path), cache_dir=str(tmp_path / "c"))


def test_eviction_keeps_the_cache_near_its_budget(s3, tmp_path):
    # 24 MiB of records over six 4 MiB blocks, a cache of two blocks.
    local = str(tmp_path / "wide")
    with loaderx.DenseStore.create(
        os.path.join(local, "x"), np.uint8, (1 << 20,), codec="raw"
    ) as s:
        s.append(np.random.default_rng(3).integers(0, 255, (24, 1 << 20), dtype=np.uint8))
    loaderx.copy_table(local, uri(s3, "wide"), storage_options=s3.options())
    cache = str(tmp_path / "cache")
    budget = 2 * (_native.CACHE_BLOCK + 4)
    with (
        loaderx.open_table(
            uri(s3, "wide"), storage_options=s3.options(), cache_dir=cache, cache_bytes=budget
        ) as rt,
        loaderx.open_table(local) as lt,
    ):
        for i in range(24):
            assert np.array_equal(rt["x"][[i]], lt["x"][[i]])
    held = sum(
        os.path.getsize(os.path.join(d, f))
        for d, _, fs in os.walk(cache)
        for f in fs
        if f.endswith(".blk")
    )
    assert held <= budget


def test_remote_locations_open_read_only(s3, remote_table):
    # readonly=False gives a handle that may evolve the table; its columns
    # stay read-only streams.
    with loaderx.open_table(remote_table, readonly=False, storage_options=s3.options()) as t:
        assert not t.readonly and all(c.readonly for c in t.values())
    store = f"{remote_table}/label"
    with pytest.raises(ValueError, match="read-only"):
        loaderx.DenseStore.open(store, storage_options=s3.options())
    with loaderx.DenseStore.open(store, readonly=True, storage_options=s3.options()) as s:
        assert len(s) == 300 and s[[5]].tolist() == [5]
        with pytest.raises(io.UnsupportedOperation):
            s.append(np.array([1]))
    with pytest.raises(ValueError, match="ragged"):
        loaderx.RaggedStore.open(store, readonly=True, storage_options=s3.options())


def test_bad_locations_and_options_name_the_culprit(s3, remote_table):
    with pytest.raises(ValueError, match="unknown scheme"):
        loaderx.open_table("ftp://host/t")
    with pytest.raises(ValueError, match="no bucket"):
        loaderx.open_table("s3:///t", storage_options=s3.options())
    with pytest.raises(ValueError, match="nonsense_key"):
        loaderx.open_table(remote_table, storage_options={**s3.options(), "nonsense_key": SECRET})
    with pytest.raises(TypeError, match="aws_region"):
        loaderx.open_table(remote_table, storage_options={**s3.options(), "aws_region": object()})
    with pytest.raises(ValueError) as e:
        loaderx.open_table("https://user:hunter22@example.invalid/t")
    assert "hunter22" not in str(e.value)
    with pytest.raises(FileNotFoundError, match=f"{s3.prefix}/nothing"):
        loaderx.open_table(uri(s3, "nothing"), storage_options=s3.options())


def test_credentials_never_appear(s3, remote_table):
    opts = s3.options()
    with loaderx.open_table(remote_table, storage_options=opts) as t:
        assert SECRET not in repr(t) and SECRET not in repr(t["image"])
    proxy = FaultProxy(s3.endpoint, rule=lambda n, r: "403")
    try:
        with pytest.raises(PermissionError) as e:
            loaderx.open_table(remote_table, storage_options=s3.options(endpoint=proxy.url))
        assert SECRET not in str(e.value) and "loaderx-test-key" not in str(e.value)
        assert remote_table in str(e.value)
    finally:
        proxy.stop()


def test_an_object_that_changes_under_an_open_table_is_corrupted(s3, remote_table):
    with loaderx.open_table(remote_table, storage_options=s3.options()) as t:
        key = f"{s3.prefix}/t/image/data.zr"
        body = s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        s3.client().put_object(Bucket=s3.bucket, Key=key, Body=body[::-1])
        with pytest.raises(loaderx.Corrupted, match="data.zr"):
            t["image"][[0, 1, 2]]
        # The same size and another ETag: still refused, never mixed bytes.
        assert len(body) == len(body[::-1])


@pytest.mark.parametrize("fault", ["503", "500", "reset", "short"])
def test_transient_faults_are_retried_and_reads_stay_exact(s3, remote_table, local_table, fault):
    hits = {"n": 0}

    def rule(n, r):
        # Every other ranged GET of data fails once.
        if r.method == "GET" and r.range and r.path.endswith("data.zr"):
            hits["n"] += 1
            if hits["n"] % 2 == 1:
                return fault
        return None

    proxy = FaultProxy(s3.endpoint, rule)
    try:
        opts = s3.options(endpoint=proxy.url)
        with (
            loaderx.open_table(remote_table, storage_options=opts) as rt,
            loaderx.open_table(local_table) as lt,
        ):
            for seed in range(4):
                idx = np.random.default_rng(seed).integers(0, 300, 32)
                same_batch({k: rt[k][idx] for k in rt}, {k: lt[k][idx] for k in lt})
        assert hits["n"] >= 8
    finally:
        proxy.stop()


def test_a_server_that_keeps_failing_raises_connection_error(s3, remote_table):
    with loaderx.open_table(remote_table, storage_options=s3.options()) as t:
        pass
    proxy = FaultProxy(s3.endpoint, rule=lambda n, r: "503" if r.range else None)
    try:
        opts = s3.options(endpoint=proxy.url, max_retries="2", retry_timeout="5")
        with loaderx.open_table(remote_table, storage_options=opts) as t:
            with pytest.raises(ConnectionError) as e:
                t["image"][[0]]
        assert "image/data.zr" in str(e.value) and SECRET not in str(e.value)
    finally:
        proxy.stop()


def test_a_stalled_server_raises_timeout_error(s3, remote_table):
    proxy = FaultProxy(s3.endpoint, rule=lambda n, r: "stall" if r.range else None)
    proxy.stall_seconds = 20
    try:
        opts = s3.options(endpoint=proxy.url, timeout="1s", max_retries="1", retry_timeout="3")
        with loaderx.open_table(remote_table, storage_options=opts) as t:
            with pytest.raises(TimeoutError) as e:
                t["label"][[0]]
        assert "label/data.zr" in str(e.value)
    finally:
        proxy.stop()


def test_large_objects_copy_in_one_request_or_as_multipart_uploads(s3, tmp_path):
    """An object up to 32 MiB goes up in one PUT (even one larger than a
    16 MiB part), a larger one as a multipart upload; both land whole and
    read back bit for bit, and copy back down the same."""
    pa = pytest.importorskip("pyarrow")
    rng = np.random.default_rng(3)
    # Raw 4 KiB records: data.zr of 20 MiB (one PUT) and 40 MiB (multipart).
    for name, rows in (("single", 5 * 1024), ("multi", 10 * 1024)):
        values = rng.integers(0, 256, (rows, 4096), dtype=np.uint8)
        src = tmp_path / name
        loaderx.arrow.ingest(
            pa.table({"x": pa.FixedShapeTensorArray.from_numpy_ndarray(values)}),
            str(src),
            codec="raw",
        )
        proxy = FaultProxy(s3.endpoint)
        try:
            loaderx.copy_table(
                str(src), uri(s3, name), storage_options=s3.options(endpoint=proxy.url)
            )
            data = f"/{s3.bucket}/{s3.prefix}/{name}/x/data.zr"
            puts = [
                r for r in proxy.requests if r.method in ("PUT", "POST") and r.path.startswith(data)
            ]
        finally:
            proxy.stop()
        size = (src / "x" / "data.zr").stat().st_size
        assert dict(s3.sizes(f"{s3.prefix}/{name}/"))[f"{s3.prefix}/{name}/x/data.zr"] == size
        if name == "single":
            assert size > 16 << 20 and len(puts) == 1
        else:
            # Create, three 16 MiB parts, complete.
            assert size > 32 << 20 and len(puts) == 5, [(r.method, r.path) for r in puts]
        with loaderx.open_table(uri(s3, name), storage_options=s3.options()) as t:
            idx = rng.integers(0, rows, 64)
            assert np.array_equal(t["x"][idx], values[idx])
        back = tmp_path / f"{name}-back"
        loaderx.copy_table(uri(s3, name), str(back), storage_options=s3.options())
        assert (back / "x" / "data.zr").read_bytes() == (src / "x" / "data.zr").read_bytes()


def test_sharded_tables_copy_with_their_objects_and_open_without_listing(s3, tmp_path):
    pa = pytest.importorskip("pyarrow")
    data = pa.table({"x": np.arange(1000, dtype=np.int64), "y": np.arange(1000) * 0.5})
    local = str(tmp_path / "sharded")
    loaderx.ingest_sharded(data, local, workers=2, shards=4).close()
    loaderx.copy_table(local, uri(s3, "sh"), storage_options=s3.options())
    import json

    manifest = json.loads(
        s3.client().get_object(Bucket=s3.bucket, Key=f"{s3.prefix}/sh/manifest.json")["Body"].read()
    )
    # x and y are columnar: one column file each.
    assert all(set(s["objects"]) >= {"x/column.zc", "y/column.zc"} for s in manifest["shards"])
    proxy = FaultProxy(s3.endpoint)
    try:
        with loaderx.open_table(uri(s3, "sh"), storage_options=s3.options(endpoint=proxy.url)) as t:
            assert t.sharded and t.num_rows == 1000
            assert proxy.count("GET", f"/{s3.bucket}?list-type") == 0
            assert t["x"][[0, 999, 500]].tolist() == [0, 999, 500]
    finally:
        proxy.stop()


def test_ingest_sharded_to_a_bucket_and_concurrent_committers(s3, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import concurrent.futures as cf

    target = uri(s3, "ingested")

    def ingest(k):
        data = pa.table({"v": np.full(50, k, dtype=np.int64)})
        t = loaderx.ingest_sharded(data, target, workers=1, shards=2, storage_options=s3.options())
        t.close()

    with cf.ThreadPoolExecutor(4) as ex:
        list(ex.map(ingest, range(6)))
    with loaderx.open_table(target, storage_options=s3.options()) as t:
        assert t.num_rows == 300
        values = t["v"][np.arange(300)]
        assert sorted(np.bincount(values).tolist()) == [50] * 6


def test_an_interrupted_copy_leaves_no_table_and_can_be_redone(s3, local_table):
    target = uri(s3, "interrupted")
    calls = {"n": 0}

    def stop(done, total):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("stop here")

    with pytest.raises(KeyboardInterrupt):
        loaderx.copy_table(local_table, target, storage_options=s3.options(), progress=stop)
    with pytest.raises(ValueError, match="interrupted copy"):
        loaderx.open_table(target, storage_options=s3.options())
    loaderx.copy_table(local_table, target, storage_options=s3.options())
    with loaderx.open_table(target, storage_options=s3.options()) as t:
        assert t.num_rows == 300
    with pytest.raises(FileExistsError):
        loaderx.copy_table(local_table, target, storage_options=s3.options())


def test_copy_from_a_bucket_to_a_local_path(s3, remote_table, local_table, tmp_path):
    back = str(tmp_path / "back")
    seen = []
    n = loaderx.copy_table(
        remote_table, back, storage_options=s3.options(), progress=lambda d, t: seen.append((d, t))
    )
    assert seen[-1] == (n, n)
    with loaderx.open_table(back) as b, loaderx.open_table(local_table) as lt:
        idx = np.arange(300)
        same_batch({k: b[k][idx] for k in b}, {k: lt[k][idx] for k in lt})


def test_the_loader_on_a_remote_table_matches_the_local_one(s3, remote_table, local_table):
    from loaderx.dataloader import DataLoader

    with (
        loaderx.open_table(remote_table, storage_options=s3.options()) as rt,
        loaderx.open_table(local_table) as lt,
    ):
        kw = dict(batch_size=16, mode="cyclic", seed=5, world_size=2, rank=1)
        with DataLoader(rt, **kw) as a, DataLoader(lt, **kw) as b:
            for _ in range(5):
                same_batch(next(a), next(b))
        with DataLoader(rt, start_step=3, **kw) as a, DataLoader(lt, start_step=3, **kw) as b:
            same_batch(next(a), next(b))


def test_a_forked_child_reads_a_remote_table(s3, remote_table, local_table):
    import multiprocessing as mp

    t = loaderx.open_table(remote_table, storage_options=s3.options())
    t["label"][[1, 2]]  # the parent's runtime and client exist before the fork
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child():
        try:
            q.put(t["label"][[7, 8, 9]].tolist())
            with loaderx.open_table(remote_table, storage_options=s3.options()) as again:
                q.put(again["label"][[3]].tolist())
        except BaseException as exc:  # noqa: BLE001
            q.put(repr(exc))

    p = ctx.Process(target=child)
    p.start()
    got = [q.get(timeout=60), q.get(timeout=60)]
    p.join(60)
    assert got == [[7, 8, 9], [3]]
    t.close()


# -- everything on top works unchanged on a remote table -----------------------


def test_arrow_sql_polars_pandas_on_a_remote_table(s3, remote_table, local_table):
    pa = pytest.importorskip("pyarrow")
    opts = s3.options()
    with (
        loaderx.open_table(remote_table, storage_options=opts) as rt,
        loaderx.open_table(local_table) as lt,
    ):
        assert loaderx.arrow.table(rt).read_all().equals(loaderx.arrow.table(lt).read_all())
        q = "SELECT label, COUNT(*) AS n FROM t WHERE label > 3 GROUP BY label ORDER BY label"
        assert loaderx.sql(q, t=rt).equals(loaderx.sql(q, t=lt))
        pd = pytest.importorskip("pandas")
        a, b = rt.to_pandas(), lt.to_pandas()
        assert list(a.columns) == list(b.columns)
        assert a["label"].tolist() == b["label"].tolist()
        assert all(np.array_equal(x, y) for x, y in zip(a["image"], b["image"]))
        del pd
    pl = pytest.importorskip("polars")
    lazy = loaderx.polars.scan_table(remote_table, storage_options=opts)
    got = lazy.filter(pl.col("label") == 7).select("record_id", "label").collect()
    want = (
        loaderx.polars.scan_table(local_table)
        .filter(pl.col("label") == 7)
        .select("record_id", "label")
        .collect()
    )
    assert got.equals(want)
    del pa


def test_parquet_export_to_a_path_and_to_a_bucket(s3, remote_table, local_table, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    opts = s3.options()
    out = str(tmp_path / "t.parquet")
    with loaderx.open_table(remote_table, storage_options=opts) as rt:
        assert loaderx.parquet.export(rt, out) == 300
        target = f"{uri(s3, 'export')}/t.parquet"
        assert loaderx.parquet.export(rt, target, storage_options=opts) == 300
    body = s3.client().get_object(Bucket=s3.bucket, Key=f"{s3.prefix}/export/t.parquet")
    remote_bytes = body["Body"].read()
    with open(out, "rb") as f:
        assert f.read() == remote_bytes
    assert pq.read_table(out).num_rows == 300


def test_the_cli_reads_and_copies_remote_tables(s3, remote_table, local_table, tmp_path, capsys):
    import json

    from loaderx.cli import main

    opt = [f"--storage-option={k}={v}" for k, v in s3.options().items()]
    assert main(["info", f"{remote_table}/label", "--json", *opt]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["length"] == 300 and info["kind"] == "dense"
    q = "SELECT SUM(label) AS s FROM t"
    assert main(["sql", q, "--table", f"t={remote_table}", "--json", *opt]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [{"s": int((np.arange(300) % 10).sum())}]
    back = str(tmp_path / "copied")
    assert main(["copy", remote_table, back, "--json", *opt]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"] > 0
    with loaderx.open_table(back) as t:
        assert t.num_rows == 300
    out = f"{uri(s3, 'cli')}/t.parquet"
    assert main(["export", "--table", remote_table, "--out", out, "--json", *opt]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 300
    # A missing object is one line on stderr naming it.
    assert main(["info", f"{uri(s3, 'nothing')}/x", *opt]) == 1
    err = capsys.readouterr().err
    assert "nothing/x" in err and SECRET not in err


def test_a_pinned_manifest_ignores_later_commits(s3, tmp_path):
    pa = pytest.importorskip("pyarrow")
    from loaderx.table import _open_pinned

    target = uri(s3, "pinned")
    opts = s3.options()
    loaderx.ingest_sharded(
        pa.table({"v": np.arange(10)}), target, workers=1, shards=1, storage_options=opts
    ).close()
    pinned = _native.read_table_file(target, "manifest.json", opts)
    loaderx.ingest_sharded(
        pa.table({"v": np.arange(5)}), target, workers=1, shards=1, storage_options=opts
    ).close()
    with _open_pinned(target, pinned, opts) as t:
        assert t.num_rows == 10
    with loaderx.open_table(target, storage_options=opts) as t:
        assert t.num_rows == 15


def test_refused_credentials_raise_permission_error(local_table):
    from remote_servers import start_s3_with_auth

    server = start_s3_with_auth()
    try:
        good = {
            "aws_endpoint": server.endpoint,
            "aws_region": "us-east-1",
            "aws_access_key_id": server.key_id,
            "aws_secret_access_key": server.secret,
            "aws_allow_http": "true",
        }
        target = "s3://loaderx-auth/t"
        loaderx.copy_table(local_table, target, storage_options=good)
        with loaderx.open_table(target, storage_options=good) as t:
            assert t.num_rows == 300
        wrong = {**good, "aws_secret_access_key": "not-the-secret-at-all"}
        with pytest.raises(PermissionError) as e:
            loaderx.open_table(target, storage_options=wrong)
        text = str(e.value)
        assert target in text
        for secret in (server.secret, "not-the-secret-at-all", server.key_id):
            assert secret not in text
        with pytest.raises(PermissionError):
            loaderx.copy_table(local_table, "s3://loaderx-auth/u", storage_options=wrong)
    finally:
        server.stop()


def test_adapters_over_a_remote_table_pickle_with_their_options(s3, remote_table, local_table):
    import pickle

    pytest.importorskip("torch")
    from loaderx.torch import Dataset

    with loaderx.open_table(remote_table, storage_options=s3.options()) as t:
        ds = Dataset(t)
        assert SECRET not in repr(ds)
        again = pickle.loads(pickle.dumps(ds))
        with loaderx.open_table(local_table) as lt:
            for k in (0, 17, 299):
                a, b = again[k], {c: lt[c][[k]] for c in lt}
                assert np.array_equal(a["image"], b["image"][0])
                assert a["label"] == b["label"][0]


def test_stats_of_a_store_in_a_bucket_count_raw_frames_without_reading_records(s3, tmp_path):
    # Records zstd cannot shrink are stored as frames of raw blocks; a
    # store in a bucket counts them from its index, asking for no record.
    local = str(tmp_path / "emb")
    rng = np.random.default_rng(9)
    rows = rng.integers(0, 255, (60, 4096), dtype=np.uint8)
    rows[1::2] = 7  # every other record compresses
    with loaderx.DenseStore.create(os.path.join(local, "x"), np.uint8, (4096,)) as s:
        s.append(rows)
    loaderx.copy_table(local, uri(s3, "emb"), storage_options=s3.options())
    proxy = FaultProxy(s3.endpoint)
    try:
        opts = s3.options(endpoint=proxy.url)
        with (
            loaderx.open_table(uri(s3, "emb"), storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            want = lt["x"].stats()["raw_records"]
            assert 0 < want < 60
            proxy.reset_counts()
            assert rt["x"].stats()["raw_records"] == want
            assert proxy.count("GET") == 0
            assert np.array_equal(rt["x"][np.arange(60)], rows)
    finally:
        proxy.stop()
