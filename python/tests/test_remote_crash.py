"""Writes to a bucket are atomic against SIGKILL at any instant, shown by a
crash-point sweep: a forked child copies a table (or commits shards) to
moto's S3 server through a proxy that SIGKILLs the child when request k
arrives, for every k of the write. After each kill the destination opens
as the old table or the new one, exactly, or not as a table at all; never
as part of one. Writing again then succeeds."""

import multiprocessing as mp
import os
import signal

import numpy as np
import pytest
from remote_servers import FaultProxy

import loaderx


def copy_child(go, src, dst, opts):
    go.wait()
    loaderx.copy_table(src, dst, storage_options=opts)


def ingest_child(go, dst, opts, start):
    import pyarrow as pa

    go.wait()
    t = loaderx.ingest_sharded(
        pa.table({"v": np.arange(start, start + 20)}),
        dst,
        workers=1,
        shards=2,
        storage_options=opts,
    )
    t.close()


def run_child(
    target, args, proxy: FaultProxy, kill_at: int | None, writes_only: bool = False
) -> int:
    """Runs ``target(*args)`` in a forked child (a warm copy of this process:
    no interpreter start per crash point); with ``kill_at``, the proxy
    SIGKILLs the child when request ``kill_at`` (counted from 0; with
    ``writes_only``, write request ``kill_at``) arrives. Returns the
    requests (or write requests) it made."""
    ctx = mp.get_context("fork")
    go = ctx.Event()
    holder = {"writes": 0}

    def rule(n, r):
        if writes_only:
            if r.method in ("GET", "HEAD"):
                return None
            n = holder["writes"]
            holder["writes"] += 1
        if kill_at is not None and n == kill_at:
            os.kill(holder["pid"], signal.SIGKILL)
            return "stall"
        return None

    proxy.reset_counts()
    proxy.rule = rule
    proxy.stall_seconds = 0.2
    child = ctx.Process(target=target, args=(go, *args))
    child.start()
    holder["pid"] = child.pid
    go.set()  # the child makes its first request only now
    child.join(120)
    if kill_at is None:
        assert child.exitcode == 0, child.exitcode
    else:
        assert child.exitcode in (-signal.SIGKILL, 0), child.exitcode
    proxy.rule = lambda n, r: None
    if writes_only:
        return sum(r.method not in ("GET", "HEAD") for r in proxy.requests)
    return len(proxy.requests)


def make_table(path):
    with loaderx.DenseStore.create(os.path.join(path, "x"), np.int64, ()) as s:
        s.append(np.arange(50))
    with loaderx.RaggedStore.create(os.path.join(path, "r"), np.int16) as s:
        s.append([np.full(i % 4 + 1, i, np.int16) for i in range(50)])
    return path


def test_a_copy_killed_at_any_request_leaves_no_partial_table(s3, tmp_path):
    src = make_table(str(tmp_path / "src"))
    proxy = FaultProxy(s3.endpoint)
    try:
        opts = s3.options(endpoint=proxy.url)
        total = run_child(copy_child, (src, f"s3://{s3.bucket}/{s3.prefix}/dry", opts), proxy, None)
        assert total >= 6
        seen = {"table": 0, "none": 0}
        for k in range(total):
            dst = f"s3://{s3.bucket}/{s3.prefix}/k{k}"
            run_child(copy_child, (src, dst, opts), proxy, k)
            try:
                with loaderx.open_table(dst, storage_options=s3.options()) as t:
                    assert t.num_rows == 50 and list(t) == ["r", "x"]
                    assert t["x"][np.arange(50)].tolist() == list(range(50))
                    seen["table"] += 1
            except (ValueError, FileNotFoundError):
                seen["none"] += 1
            # Copying again over what the kill left succeeds.
            if seen["table"] == 0 or k % 3 == 0:
                try:
                    loaderx.copy_table(src, dst, storage_options=s3.options())
                except FileExistsError:
                    # Only a complete table refuses a second copy.
                    with loaderx.open_table(dst, storage_options=s3.options()) as t:
                        assert t.num_rows == 50
                with loaderx.open_table(dst, storage_options=s3.options()) as t:
                    assert t.num_rows == 50
        assert seen["none"] > 0
    finally:
        proxy.stop()


def test_a_commit_killed_at_any_request_leaves_the_old_or_the_new_table(s3):
    pytest.importorskip("pyarrow")
    proxy = FaultProxy(s3.endpoint)
    try:
        opts = s3.options(endpoint=proxy.url)
        dry = f"s3://{s3.bucket}/{s3.prefix}/dry"
        run_child(ingest_child, (dry, opts, 0), proxy, None)
        total = run_child(ingest_child, (dry, opts, 20), proxy, None)
        assert total >= 6
        outcomes = set()
        for k in range(total):
            dst = f"s3://{s3.bucket}/{s3.prefix}/k{k}"
            run_child(ingest_child, (dst, opts, 0), proxy, None)
            run_child(ingest_child, (dst, opts, 20), proxy, k)
            with loaderx.open_table(dst, storage_options=s3.options()) as t:
                values = t["v"][np.arange(t.num_rows)].tolist()
            assert values in (list(range(20)), list(range(40))), (k, values)
            outcomes.add(len(values))
            # The next commit works.
            run_child(ingest_child, (dst, opts, 100), proxy, None)
            with loaderx.open_table(dst, storage_options=s3.options()) as t:
                assert t.num_rows == len(values) + 20
        assert outcomes == {20, 40}
    finally:
        proxy.stop()


def evolve_child(go, dst, opts, op):
    go.wait()
    with loaderx.open_table(dst, readonly=False, storage_options=opts) as t:
        if op == "add":
            t.add_columns({"y": t["v"][np.arange(t.num_rows)] * 2}, workers=1)
        elif op == "delete":
            t.delete([1, 25])
        elif op == "compact":
            t.compact(min_deleted=0.0)
        elif op == "view":
            t.save_view("some", [0, 3])
        else:
            raise AssertionError(op)


def _evolved(dst, opts):
    """A table of 40 rows in three shards (version 1), one row deleted
    (version 2)."""
    import pyarrow as pa

    loaderx.ingest_sharded(
        pa.table({"v": np.arange(40)}), dst, workers=1, shards=3, storage_options=opts
    ).close()
    with loaderx.open_table(dst, readonly=False, storage_options=opts) as t:
        t.delete([5])


def _content(dst, opts, **kw):
    with loaderx.open_table(dst, storage_options=opts, **kw) as t:
        return t.version, {c: np.asarray(t[c][np.arange(t.num_rows)]).tolist() for c in t}


@pytest.mark.parametrize("op", ["add", "delete", "compact", "view"])
def test_an_evolution_killed_at_any_request_leaves_the_old_or_the_new_version(s3, op):
    pytest.importorskip("pyarrow")
    plain = s3.options()
    proxy = FaultProxy(s3.endpoint)
    try:
        opts = s3.options(endpoint=proxy.url)
        dry = f"s3://{s3.bucket}/{s3.prefix}/dry-{op}"
        _evolved(dry, plain)
        old = _content(dry, plain)
        v1 = _content(dry, plain, version=1)
        # Killed at every write request (reads change nothing).
        total = run_child(evolve_child, (dry, opts, op), proxy, None, writes_only=True)
        new = _content(dry, plain)
        assert total >= 2
        seen = set()
        for k in range(total):
            dst = f"s3://{s3.bucket}/{s3.prefix}/{op}-k{k}"
            _evolved(dst, plain)
            run_child(evolve_child, (dst, opts, op), proxy, k, writes_only=True)
            got = _content(dst, plain)
            if op == "view":
                views = loaderx.open_table(dst, storage_options=plain).views()
                assert got == old and views in ({}, {"some": {"version": 2, "num_rows": 2}})
                seen.add(bool(views))
                if views:
                    continue
            else:
                assert got in (old, new), (k, got)
                seen.add(got == new)
            # Older versions are as they were, and the operation runs again.
            assert _content(dst, plain, version=1) == v1
            if got == old:
                run_child(evolve_child, (dst, plain, op), proxy, None)
                after = _content(dst, plain)
                assert after == new or (op == "view" and after == old), (k, after)
        # A view is complete only once its last write has landed, which a
        # kill at that write prevents.
        assert seen == ({False} if op == "view" else {False, True})
    finally:
        proxy.stop()
