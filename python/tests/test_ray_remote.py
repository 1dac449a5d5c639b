"""loaderx.ray against a bucket (moto's S3 server on 127.0.0.1): a dataset
written with write_table(uri) by tasks that share no filesystem, committed
once, and read back with read_table(uri) by tasks on two nodes that carry
the URI, the options and the pinned manifest."""

import time

import numpy as np
import pytest

import loaderx

ray = pytest.importorskip("ray")
import loaderx.ray as lray  # noqa: E402 - after the importorskip

N = 240


def test_write_then_read_a_bucket_on_two_nodes(ray_session, s3):
    from ray.cluster_utils import Cluster

    target = f"s3://{s3.bucket}/{s3.prefix}/table"
    opts = s3.options()
    ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.execution_options.preserve_order = True
        rng = np.random.default_rng(3)
        x = rng.standard_normal((N, 4)).astype(np.float32)
        ds = ray.data.from_items([{"x": x[i], "y": i} for i in range(N)]).repartition(4)
        assert lray.write_table(ds, target, storage_options=opts) == target
        keys = s3.keys(f"{s3.prefix}/table/")
        assert f"{s3.prefix}/table/manifest.json" in keys
        assert not any("loaderx-incomplete" in k for k in keys)

        def tag(batch):
            # Long enough that one node's single CPU cannot take every
            # block before the other node's is scheduled (both are asked).
            time.sleep(0.5)
            node = ray.get_runtime_context().get_node_id()
            return {**batch, "node": np.array([node] * len(batch["y"]))}

        read = lray.read_table(target, override_num_blocks=6, storage_options=opts)
        batches = list(read.map_batches(tag).iter_batches(batch_format="numpy", batch_size=None))
        assert len({n for b in batches for n in b["node"]}) == 2
        rid = np.concatenate([b["record_id"] for b in batches])
        order = np.argsort(rid)
        np.testing.assert_array_equal(rid[order], np.arange(N, dtype=np.uint64))
        got_x = np.concatenate([b["x"] for b in batches])[order]
        assert got_x.tobytes() == x.tobytes()
        assert np.concatenate([b["y"] for b in batches])[order].tolist() == list(range(N))

        # A failing write leaves nothing in the bucket.
        other = f"s3://{s3.bucket}/{s3.prefix}/failed"

        def boom(batch):
            if (batch["y"] >= N - 10).any():
                raise RuntimeError("boom")
            return batch

        with pytest.raises(Exception, match="boom"):
            lray.write_table(
                ray.data.from_items([{"y": i} for i in range(N)]).repartition(4).map_batches(boom),
                other,
                storage_options=opts,
            )
        assert s3.keys(f"{s3.prefix}/failed/") == []
        # A table that is there already is not overwritten.
        with pytest.raises(FileExistsError):
            lray.write_table(ds, target, storage_options=opts)
        with loaderx.open_table(target, storage_options=opts) as t:
            assert t.sharded and t.num_rows == N

        # An append as a version, then a column computed by one task per
        # shard, on both nodes, committed once.
        more = ray.data.from_items([{"x": x[i], "y": N + i} for i in range(20)]).repartition(2)
        lray.write_table(more, target, storage_options=opts, mode="append")

        def double(batch):
            node = ray.get_runtime_context().get_node_id()
            return {"y2": batch["y"] * 2, "node": [node] * len(batch["y"])}

        before = set(s3.keys(f"{s3.prefix}/table/"))
        version = lray.add_columns(target, double, read_columns=["y"], storage_options=opts)
        with loaderx.open_table(target, storage_options=opts) as t:
            assert t.version == version == 3 and t.num_rows == N + 20
            y = t["y"][np.arange(N + 20)]
            np.testing.assert_array_equal(t["y2"][np.arange(N + 20)], y * 2)
            assert len(set(t["node"][np.arange(N + 20)])) == 2
            shards = len(t.shards)
        # Nothing that was there was rewritten: only new objects (a group
        # per shard, the version and the manifest) were written.
        added = set(s3.keys(f"{s3.prefix}/table/")) - before
        assert all("/_g-" in k or "/_versions/" in k for k in added), added
        assert len({k.split("/_g-")[0] for k in added if "/_g-" in k}) == shards
    finally:
        ray.shutdown()
        cluster.shutdown()
