"""Versions of sharded tables, locally and in a bucket (the S3-compatible
server on 127.0.0.1): every commit a version, older versions opening as
they were, tags, cleanup (model-checked over random histories), the
commit's requests and a lagging ``manifest.json``."""

import datetime
import json
import os
import random

import numpy as np
import pytest

import loaderx

pa = pytest.importorskip("pyarrow")


def batch(lo, hi):
    return pa.table(
        {"id": np.arange(lo, hi, dtype=np.int64), "s": [f"r{i}" for i in range(lo, hi)]}
    )


def ids(t):
    return t["id"][np.arange(t.num_rows)].tolist()


def uri(s3, name="t"):
    return f"s3://{s3.bucket}/{s3.prefix}/{name}"


def three_versions(path, **kw):
    for lo, hi in [(0, 10), (10, 15), (15, 30)]:
        loaderx.ingest_sharded(batch(lo, hi), path, workers=1, shards=1, **kw).close()


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    """A new table location and its storage options, on disk and in the
    bucket."""
    if request.param == "local":
        return str(tmp_path / "t"), {}
    s3 = request.getfixturevalue("s3")
    return uri(s3), {"storage_options": s3.options()}


def test_each_commit_is_a_version_and_old_ones_open_as_they_were(where):
    path, kw = where
    three_versions(path, **kw)
    with loaderx.open_table(path, **kw) as t:
        assert t.version == 3 and ids(t) == list(range(30))
        assert "version=3" in repr(t)
        listed = t.versions()
    assert [(v["version"], v["num_rows"], v["operation"]) for v in listed] == [
        (1, 10, "create"),
        (2, 15, "append"),
        (3, 30, "append"),
    ]
    now = datetime.datetime.now(datetime.timezone.utc)
    for v in listed:
        assert v["timestamp"].tzinfo is not None
        assert abs((now - v["timestamp"]).total_seconds()) < 600
    assert listed[0]["timestamp"] <= listed[1]["timestamp"] <= listed[2]["timestamp"]
    for version, hi in [(1, 10), (2, 15), (3, 30)]:
        with loaderx.open_table(path, version=version, **kw) as t:
            assert t.version == version and ids(t) == list(range(hi))
            assert t["s"][[hi - 1]] == [f"r{hi - 1}"]
    with pytest.raises(ValueError, match=r"no version 7 .*never committed.*latest version is 3"):
        loaderx.open_table(path, version=7, **kw)


def test_tags_open_and_are_written_once(where):
    path, kw = where
    three_versions(path, **kw)
    with loaderx.open_table(path, version=1, **kw) as old:
        assert old.tag("baseline") == 1  # default: the handle's version
    with loaderx.open_table(path, **kw) as t:
        assert t.tag("head") == 3
        assert t.tag("middle", 2) == 2
        assert t.tags() == {"baseline": 1, "head": 3, "middle": 2}
        with pytest.raises(ValueError, match=r"already has tag 'head' \(version 3\)"):
            t.tag("head", 1)
        with pytest.raises(ValueError, match="tag name"):
            t.tag("12")
        with pytest.raises(ValueError, match="no version 9"):
            t.tag("later", 9)
        t.untag("middle")
        assert t.tags() == {"baseline": 1, "head": 3}
        with pytest.raises(
            ValueError, match=r"no tag 'middle' \(its tags: \['baseline', 'head'\]\)"
        ):
            t.untag("middle")
    with loaderx.open_table(path, version="baseline", **kw) as t:
        assert t.version == 1 and ids(t) == list(range(10))
    with pytest.raises(ValueError, match="no tag 'nope'"):
        loaderx.open_table(path, version="nope", **kw)


def test_bad_version_arguments_name_the_argument(tmp_path):
    path = str(tmp_path / "t")
    three_versions(path)
    for bad, exc in [(0, ValueError), (-1, ValueError), (True, TypeError), (1.0, TypeError)]:
        with pytest.raises(exc, match="version"):
            loaderx.open_table(path, version=bad)
    with pytest.raises(ValueError, match="read-only"):
        loaderx.open_table(path, readonly=False, version=1)
    with loaderx.open_table(path) as t:
        with pytest.raises(TypeError, match="older_than"):
            t.cleanup(older_than=7)
        with pytest.raises(ValueError, match="keep_last"):
            t.cleanup(keep_last=0)
        with pytest.raises(ValueError, match="older_than"):
            t.cleanup(older_than=datetime.timedelta(seconds=-1))


def test_a_plain_table_has_no_versions(tmp_path):
    path = str(tmp_path / "plain")
    for s in loaderx.arrow.ingest(batch(0, 5), path).values():
        s.close()
    with loaderx.open_table(path) as t:
        assert t.version is None and t.versions() == [] and t.tags() == {}
        with pytest.raises(ValueError, match="plain table"):
            t.tag("x")
        with pytest.raises(ValueError, match="plain table"):
            t.cleanup()


def shard_dirs(path):
    return sorted(
        n for n in os.listdir(path) if not n.startswith((".", "_")) and n != "manifest.json"
    )


def test_cleanup_keeps_every_kept_version_readable_over_random_histories(tmp_path):
    """Model check: random appends, tags and cleanups; every version the
    model keeps opens with exactly its rows, every removed one is refused,
    and no shard survives that no kept version names."""
    for seed in range(6):
        rng = random.Random(seed)
        path = str(tmp_path / f"t{seed}")
        model = {}  # version -> number of rows
        rows = 0
        tags = {}
        for _ in range(rng.randint(3, 7)):
            n = rng.randint(1, 5)
            loaderx.ingest_sharded(batch(rows, rows + n), path, workers=1, shards=1).close()
            rows += n
            model[max(model, default=0) + 1] = rows
            with loaderx.open_table(path) as t:
                if rng.random() < 0.3:
                    v = rng.choice(sorted(model))
                    name = f"tag{len(tags)}"
                    t.tag(name, v)
                    tags[name] = v
                if tags and rng.random() < 0.2:
                    name = rng.choice(sorted(tags))
                    t.untag(name)
                    del tags[name]
                if rng.random() < 0.4:
                    keep_last = rng.randint(1, 3)
                    t.cleanup(older_than=datetime.timedelta(0), keep_last=keep_last)
                    top = max(model)
                    model = {
                        v: r for v, r in model.items() if v > top - keep_last or v in tags.values()
                    }
        with loaderx.open_table(path) as t:
            assert [v["version"] for v in t.versions()] == sorted(model)
            assert t.tags() == tags
        for v in range(1, max(model) + 1):
            if v in model:
                with loaderx.open_table(path, version=v) as t:
                    assert ids(t) == list(range(model[v]))
            else:
                with pytest.raises(ValueError, match="removed by a cleanup"):
                    loaderx.open_table(path, version=v)
        # Appends never drop a shard, so every shard stays (each is in the
        # latest version); the manifest of each kept version names only
        # shards that exist.
        assert len(shard_dirs(path)) == max(model)


def test_cleanup_in_a_bucket_removes_old_version_objects(s3):
    path = uri(s3)
    opts = s3.options()
    three_versions(path, storage_options=opts)
    prefix = f"{s3.prefix}/t/_versions/"
    assert len(s3.keys(prefix)) == 3
    with loaderx.open_table(path, storage_options=opts) as t:
        t.tag("first", 1)
        freed = t.cleanup(older_than=datetime.timedelta(0))
        assert freed > 0
        assert [v["version"] for v in t.versions()] == [1, 3]
    assert len(s3.keys(prefix)) == 2
    with loaderx.open_table(path, version="first", storage_options=opts) as t:
        assert ids(t) == list(range(10))


def test_opening_the_latest_costs_one_request_more_than_the_manifest_alone(s3):
    """The latest opens with manifest.json and one look for the version
    after it; an older version with its own file instead (and then its own
    shards' metadata, as the latest does)."""
    from remote_servers import FaultProxy

    path = uri(s3)
    three_versions(path, storage_options=s3.options())
    proxy = FaultProxy(s3.endpoint)
    base = f"/{s3.bucket}/{s3.prefix}/t/"
    try:
        opts = s3.options(endpoint=proxy.url)
        table_level = {}
        for version, shards in [(None, 3), (1, 1)]:
            proxy.reset_counts()
            loaderx.open_table(path, version=version, storage_options=opts).close()
            shard_reads = proxy.count("GET", base + "shard-")
            table_level[version] = proxy.count() - shard_reads
            # Each shard: the footer of each column's file (2 columnar
            # columns: no table file is needed).
            assert shard_reads == 2 * shards
        assert proxy.count("GET", base + "_versions/00000000000000000001.json") == 1
        # manifest.json + the look for version 4; version 1's file alone.
        assert table_level == {None: 2, 1: 1}
    finally:
        proxy.stop()


def test_bucket_commits_do_not_ask_again_for_what_this_process_uploaded(s3):
    """Shards and column groups written by the committing process are
    committed from what it uploaded: no listing, HEAD or metadata read of
    them; each object is one PUT. Their entries in the version name the
    objects that are there."""
    from remote_servers import FaultProxy

    path = uri(s3)
    proxy = FaultProxy(s3.endpoint)
    base = f"/{s3.bucket}/{s3.prefix}/t/"
    try:
        opts = s3.options(endpoint=proxy.url)
        loaderx.ingest_sharded(batch(0, 40), path, shards=3, storage_options=opts).close()
        assert proxy.count("HEAD") == 0
        # Only the opening of the table it returns reads its shards: the
        # footer of each column's file.
        assert proxy.count("GET", base + "shard-") == 3 * 2
        for r in proxy.requests:
            assert "list-type" not in r.path or "shard-" not in r.path, r.path
        shard_puts = proxy.count("PUT", base + "shard-")
        with loaderx.open_table(path, readonly=False, storage_options=opts) as t:
            proxy.reset_counts()
            t.add_columns({"y": np.arange(40, dtype=np.int64)})
            puts = proxy.count("PUT", base + "shard-")
            # One group per shard: one columnar column (column.zc) each.
            assert puts == 3
            assert proxy.count("HEAD") == 0
            assert proxy.count("GET", base + "shard-") == 0
            assert all("list-type" not in r.path for r in proxy.requests)
            # The version planned on is the open's (manifest.json with its
            # tag, and the listing of the version files that shows version
            # 1's is there): version 2 and the conditional move of
            # manifest.json, nothing read at the commit.
            assert proxy.count() - puts == 2
        objects = {k.removeprefix(f"{s3.prefix}/t/") for k in s3.keys(f"{s3.prefix}/t/")}
        groups = {k for k in objects if "/_g-" in k}
        assert len(groups) == 3
        assert shard_puts == len({k for k in objects if k.startswith("shard-")} - groups)
        manifest = json.loads(
            s3.client()
            .get_object(Bucket=s3.bucket, Key=f"{s3.prefix}/t/manifest.json")["Body"]
            .read()
        )
        named = {f"{sh['name']}/{o}" for sh in manifest["shards"] for o in sh["objects"]}
        assert named == {k for k in objects if k.startswith("shard-")}
    finally:
        proxy.stop()
    with loaderx.open_table(path, storage_options=s3.options()) as t:
        assert t.num_rows == 40
        assert t["y"][np.arange(40)].tolist() == list(range(40))


def test_a_lagging_manifest_opens_the_latest_in_a_bucket(s3):
    """A commit killed between its version object and manifest.json: the
    pointer is one behind; readers and the next commit follow the
    version objects."""
    path = uri(s3)
    opts = s3.options()
    three_versions(path, storage_options=opts)
    client = s3.client()
    base = f"{s3.prefix}/t"
    v2 = client.get_object(Bucket=s3.bucket, Key=f"{base}/_versions/{2:020}.json")["Body"].read()
    client.put_object(Bucket=s3.bucket, Key=f"{base}/manifest.json", Body=v2)
    with loaderx.open_table(path, storage_options=opts) as t:
        assert t.version == 3 and ids(t) == list(range(30))
    loaderx.ingest_sharded(batch(30, 32), path, workers=1, shards=1, storage_options=opts).close()
    with loaderx.open_table(path, storage_options=opts) as t:
        assert t.version == 4 and ids(t) == list(range(32))
    pointer = json.loads(
        client.get_object(Bucket=s3.bucket, Key=f"{base}/manifest.json")["Body"].read()
    )
    assert pointer["table_version"] == 4


def test_a_copy_starts_at_version_1(tmp_path):
    pytest.importorskip("pyarrow")
    src = str(tmp_path / "src")
    three_versions(src)
    dst = str(tmp_path / "dst")
    loaderx.copy_table(src, dst)
    with loaderx.open_table(dst) as t:
        assert t.version == 1 and ids(t) == list(range(30))
        assert [(v["version"], v["operation"]) for v in t.versions()] == [(1, "copy")]


def test_the_command_line_lists_tags_cleans_up_and_queries_a_version(tmp_path, capsys):
    from loaderx.cli import main

    path = str(tmp_path / "t")
    three_versions(path)
    assert main(["tag", path, "first", "--version", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"tag": "first", "version": 1}
    assert main(["versions", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(v["version"], v["num_rows"], v["tags"]) for v in out["versions"]] == [
        (1, 10, ["first"]),
        (2, 15, []),
        (3, 30, []),
    ]
    assert main(["sql", "SELECT count(*) AS n FROM t", "--table", f"t={path}@first", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [{"n": 10}]
    assert main(["sql", "SELECT max(id) AS m FROM t", "--table", f"t={path}@2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [{"m": 14}]
    assert main(["cleanup", path, "--older-than", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["removed_versions"] == [2] and out["kept_versions"] == [1, 3]
    assert out["bytes_freed"] > 0
    assert main(["tag", path, "first", "--delete"]) == 0
    capsys.readouterr()
    assert main(["tag", path, "first", "--delete"]) == 1
    assert "no tag 'first'" in capsys.readouterr().err
    assert main(["sql", "SELECT 1", "--table", f"t={path}@2"]) == 1
    assert "removed by a cleanup" in capsys.readouterr().err
