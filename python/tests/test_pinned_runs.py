"""Runs pinned to their data: a loader over a table records where it reads
(path, version, view; never storage options), refuses to resume on other
data, and ``DataLoader.from_state`` reopens exactly that data and goes on
bit-exactly after the table has changed."""

import json
import os

import numpy as np
import pytest

import loaderx
from loaderx.dataloader import DataLoader

pa = pytest.importorskip("pyarrow")


def batches(loader, k):
    return [next(loader)["x"].copy() for _ in range(k)]


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(
        pa.table({"x": np.arange(100, dtype=np.int64)}), path, workers=1, shards=3
    ).close()
    return path


def test_the_state_names_the_version_and_resume_goes_on_bit_exactly(table, tmp_path):
    with loaderx.open_table(table) as t, DataLoader(t, batch_size=8, seed=3) as run:
        whole = batches(run, 12)
    with loaderx.open_table(table) as t, DataLoader(t, batch_size=8, seed=3) as first:
        head = batches(first, 5)
        state = first.state_dict()
    assert state["tables"] == [{"path": os.path.abspath(table), "version": 1, "view": None}]
    # The table changes under the run: rows deleted, rows appended.
    with loaderx.open_table(table, readonly=False) as t:
        t.delete("x < 10")
        t.append({"x": np.arange(1000, 1050)})
    with loaderx.open_table(table) as latest, DataLoader(latest, batch_size=8, seed=3) as other:
        with pytest.raises(ValueError, match=r"'version': 1.*'version': 3"):
            other.load_state_dict(state)
    with DataLoader.from_state(state) as resumed:
        assert resumed.step == 5
        rest = batches(resumed, 7)
    for got, want in zip(head + rest, whole):
        assert got.tobytes() == want.tobytes()


def test_a_view_is_pinned_too_and_from_state_takes_the_loader_arguments(table):
    with loaderx.open_table(table, readonly=False) as t:
        t.save_view("even", "x % 2 = 0")
    with loaderx.open_table(table, view="even") as v:
        with DataLoader(v, batch_size=4, seed=1, rank=1, world_size=2) as run:
            whole = batches(run, 6)
        with DataLoader(v, batch_size=4, seed=1, rank=1, world_size=2) as first:
            head = batches(first, 2)
            state = first.state_dict()
    assert state["tables"][0]["view"] == "even" and state["tables"][0]["version"] == 1
    with DataLoader.from_state(state, rank=1, world_size=2) as resumed:
        rest = batches(resumed, 4)
    assert all(v % 2 == 0 for b in head + rest for v in b.tolist())
    for got, want in zip(head + rest, whole):
        assert got.tobytes() == want.tobytes()
    with pytest.raises(ValueError, match="seed comes from the state"):
        DataLoader.from_state(state, seed=2)


def test_states_without_a_table_do_not_reopen(table):
    with loaderx.open_table(table) as t:
        streams = dict(t)
        with DataLoader(streams, batch_size=4) as loader:
            state = loader.state_dict()
    assert "tables" not in state
    with pytest.raises(ValueError, match="pins no table"):
        DataLoader.from_state(state)


def test_from_state_reopens_a_pinned_version_in_a_bucket_without_keeping_credentials(s3):
    path = f"s3://{s3.bucket}/{s3.prefix}/t"
    opts = s3.options()
    loaderx.ingest_sharded(
        pa.table({"x": np.arange(80, dtype=np.int64)}),
        path,
        workers=1,
        shards=2,
        storage_options=opts,
    ).close()
    with loaderx.open_table(path, storage_options=opts) as t:
        with DataLoader(t, batch_size=8, seed=6, workers=0) as whole:
            want = batches(whole, 10)
        with DataLoader(t, batch_size=8, seed=6, workers=0) as first:
            head = batches(first, 4)
            first.exclude([0, 1])
            state = first.state_dict()
    assert state["tables"] == [{"path": path, "version": 1, "view": None}]
    for value in opts.values():
        if len(str(value)) > 3:
            assert str(value) not in json.dumps(state)
    with loaderx.open_table(path, readonly=False, storage_options=opts) as t:
        t.delete("x >= 40")
        t.append({"x": np.arange(500, 520)})
    with DataLoader.from_state(state, storage_options=opts, workers=0) as resumed:
        assert resumed.step == 4
        rest = batches(resumed, 6)
    for got, want_batch in zip(head, want):
        assert got.tobytes() == want_batch.tobytes()
    # After the exclusion: version 1's rows (those deleted since included,
    # the appended ones never) without records 0 and 1.
    drawn = [v for b in rest for v in b.tolist()]
    assert all(2 <= v < 80 for v in drawn)
    assert any(v >= 40 for v in drawn)
