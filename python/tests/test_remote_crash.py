"""Writes to a bucket are atomic against SIGKILL at any instant, shown by a
crash-point sweep: a child process copies a table (or commits shards) to
moto's S3 server through a proxy that SIGKILLs the child when request k
arrives, for every k of the write. After each kill the destination opens
as the old table or the new one, exactly, or not as a table at all; never
as part of one. Writing again then succeeds."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from remote_servers import FaultProxy

import loaderx

CHILD_COPY = textwrap.dedent(
    """
    import json, sys, loaderx
    src, dst, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    loaderx.copy_table(src, dst, storage_options=opts)
    print("done")
    """
)

CHILD_INGEST = textwrap.dedent(
    """
    import json, sys, numpy as np, pyarrow as pa, loaderx
    dst, opts, start = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    t = loaderx.ingest_sharded(pa.table({"v": np.arange(start, start + 20)}), dst,
                               workers=1, shards=2, storage_options=opts)
    t.close()
    print("done")
    """
)


def run_child(code: str, args: list[str], proxy: FaultProxy, kill_at: int | None) -> int:
    """Runs the child; with ``kill_at``, the proxy SIGKILLs it when request
    ``kill_at`` (counted from 0) arrives. Returns the requests it made."""
    holder = {}

    def rule(n, r):
        if kill_at is not None and n == kill_at and "pid" in holder:
            os.kill(holder["pid"], signal.SIGKILL)
            return "stall"
        return None

    proxy.reset_counts()
    proxy.rule = rule
    proxy.stall_seconds = 0.5
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    holder["pid"] = child.pid
    out, err = child.communicate(timeout=120)
    if kill_at is None:
        assert child.returncode == 0, err.decode()[-2000:]
    else:
        assert child.returncode in (-signal.SIGKILL, 0), err.decode()[-2000:]
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
        total = run_child(
            CHILD_COPY, [src, f"s3://{s3.bucket}/{s3.prefix}/dry", json.dumps(opts)], proxy, None
        )
        assert total >= 6
        seen = {"table": 0, "none": 0}
        for k in range(total):
            dst = f"s3://{s3.bucket}/{s3.prefix}/k{k}"
            run_child(CHILD_COPY, [src, dst, json.dumps(opts)], proxy, k)
            proxy.rule = lambda n, r: None
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
        run_child(CHILD_INGEST, [dry, json.dumps(opts), "0"], proxy, None)
        total = run_child(CHILD_INGEST, [dry, json.dumps(opts), "20"], proxy, None)
        assert total >= 6
        outcomes = set()
        for k in range(total):
            dst = f"s3://{s3.bucket}/{s3.prefix}/k{k}"
            run_child(CHILD_INGEST, [dst, json.dumps(opts), "0"], proxy, None)
            run_child(CHILD_INGEST, [dst, json.dumps(opts), "20"], proxy, k)
            proxy.rule = lambda n, r: None
            with loaderx.open_table(dst, storage_options=s3.options()) as t:
                values = t["v"][np.arange(t.num_rows)].tolist()
            assert values in (list(range(20)), list(range(40))), (k, values)
            outcomes.add(len(values))
            # The next commit works.
            run_child(CHILD_INGEST, [dst, json.dumps(opts), "100"], proxy, None)
            with loaderx.open_table(dst, storage_options=s3.options()) as t:
                assert t.num_rows == len(values) + 20
        assert outcomes == {20, 40}
    finally:
        proxy.stop()
