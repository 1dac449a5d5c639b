"""Reads that do not wait on a stalled request, through the fault proxy in
front of the S3 server at 20 ms of latency: a range whose first byte has
not come after a short adaptive delay gets a duplicate request (the first
answer wins), a body that breaks off is resumed from the byte it reached,
and a server that stops answering altogether raises ``TimeoutError``. No
test here asserts a time: they assert exact bytes, and request counts
only where those do not depend on timing."""

import numpy as np
import pytest
from remote_servers import FaultProxy, make_table, same_batch

import loaderx
from loaderx import _native

COLUMNS = ("image", "tokens", "label")


def stats():
    return _native.remote_stats()


@pytest.fixture
def tables(s3, tmp_path):
    local = make_table(str(tmp_path / "t"), rows=2000)
    remote = f"s3://{s3.bucket}/{s3.prefix}/t"
    loaderx.copy_table(local, remote, storage_options=s3.options())
    return local, remote


def batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [np.sort(rng.choice(2000, 32, replace=False)) for _ in range(n)]


def ranged(r):
    return r.method == "GET" and r.range is not None


def test_without_faults_no_request_is_duplicated(s3, tables):
    local, remote = tables
    proxy = FaultProxy(s3.endpoint)
    proxy.latency = 0.02
    try:
        counts = {}
        for hedge in ("false", "true"):
            # A floor far above this server's latency: with nothing stalled,
            # no request waits that long, so none is duplicated.
            opts = s3.options(endpoint=proxy.url, hedge=hedge, hedge_min_delay="2s")
            with (
                loaderx.open_table(remote, storage_options=opts) as rt,
                loaderx.open_table(local) as lt,
            ):
                proxy.reset_counts()
                before = stats()
                for idx in batches(4):
                    same_batch({k: rt[k][idx] for k in COLUMNS}, {k: lt[k][idx] for k in COLUMNS})
                after = stats()
            counts[hedge] = proxy.count("GET")
            assert after["hedges"] == before["hedges"]
            assert after["requests"] - before["requests"] == counts[hedge]
        assert counts["true"] == counts["false"] > 0
    finally:
        proxy.stop()


def stalled_every(k):
    """A rule that stalls every ``k``-th ranged GET (no byte for 40 s, then
    the connection closes)."""
    seen = {"n": 0}

    def rule(n, r):
        if ranged(r):
            seen["n"] += 1
            if seen["n"] % k == 0:
                return "stall"
        return None

    return rule


@pytest.mark.parametrize("every", [5, 2])
def test_gathers_complete_exactly_when_requests_stall(s3, tables, every):
    local, remote = tables
    proxy = FaultProxy(s3.endpoint)
    proxy.latency = 0.02
    proxy.stall_seconds = 40
    try:
        opts = s3.options(endpoint=proxy.url)
        with (
            loaderx.open_table(remote, storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            proxy.rule = stalled_every(every)
            before = stats()
            for idx in batches(6, seed=every):
                same_batch({k: rt[k][idx] for k in COLUMNS}, {k: lt[k][idx] for k in COLUMNS})
            after = stats()
        # The stalled requests were duplicated, not waited out.
        assert after["hedges"] > before["hedges"]
    finally:
        proxy.rule = lambda n, r: None
        proxy.stop()


@pytest.mark.parametrize("fault", ["short", "stall_body"])
def test_a_body_that_stops_is_resumed_from_the_byte_it_reached(s3, tables, fault):
    local, remote = tables
    cut = {"n": 0}

    def rule(n, r):
        # The first ranged GET of image data sends half its body, then
        # resets ("short") or sends nothing more for 30 s ("stall_body").
        if ranged(r) and r.path.endswith("image/data.zr") and cut["n"] == 0:
            cut["n"] += 1
            return fault
        return None

    proxy = FaultProxy(s3.endpoint)
    proxy.stall_seconds = 30
    try:
        opts = s3.options(endpoint=proxy.url)
        with (
            loaderx.open_table(remote, storage_options=opts) as rt,
            loaderx.open_table(local) as lt,
        ):
            proxy.reset_counts()
            proxy.rule = rule
            idx = np.arange(0, 2000, 50)
            assert np.array_equal(rt["image"][idx], lt["image"][idx])
        gets = [r for r in proxy.requests if ranged(r) and r.path.endswith("image/data.zr")]
        first = gets[0].range
        start, end = (int(x) for x in first.removeprefix("bytes=").split("-"))
        # A later request for that range starts past its first byte (where
        # the body stopped) and ends where it ended.
        resumed = [
            r.range
            for r in gets[1:]
            if r.range.endswith(f"-{end}") and not r.range.startswith(f"bytes={start}-")
        ]
        assert resumed, [r.range for r in gets]
    finally:
        proxy.rule = lambda n, r: None
        proxy.stop()


def test_a_server_that_stops_answering_raises_timeout_error(s3, tables):
    local, remote = tables
    proxy = FaultProxy(s3.endpoint)
    proxy.stall_seconds = 30
    try:
        opts = s3.options(endpoint=proxy.url, read_timeout="2s")
        with loaderx.open_table(remote, storage_options=opts) as rt:
            proxy.rule = lambda n, r: "stall" if ranged(r) else None
            with pytest.raises(TimeoutError) as e:
                rt["label"][[0, 1, 2]]
        assert "label/data.zr" in str(e.value) and "read_timeout" in str(e.value)
    finally:
        proxy.rule = lambda n, r: None
        proxy.stop()


def test_bad_read_options_name_the_key(s3, tables):
    _, remote = tables
    for key, value in (
        ("hedge", "sometimes"),
        ("hedge_min_delay", "soon"),
        ("hedge_multiple", "0.5"),
        ("read_timeout", "0"),
    ):
        with pytest.raises(ValueError, match=key) as e:
            loaderx.open_table(remote, storage_options=s3.options(**{key: value}))
        assert value in str(e.value)
