"""``DataLoader(table, columns=[...])``: only those columns are gathered and
delivered, the table's version and view stay pinned in ``state_dict()``
with the columns, and ``from_state`` reopens the pinned version delivering
the same columns."""

import os

import numpy as np
import pytest

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.mixture import Mix

pa = pytest.importorskip("pyarrow")


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t")
    n = 120
    loaderx.ingest_sharded(
        pa.table(
            {
                "x": np.arange(n, dtype=np.int64),
                "y": np.arange(n, dtype=np.float32) * 0.5,
                "text": [f"row {i}" for i in range(n)],
                "big": pa.array([bytes([i % 251]) * 64 for i in range(n)], pa.binary()),
            }
        ),
        path,
        workers=1,
        shards=3,
    ).close()
    return path


def take(loader, k):
    return [next(loader) for _ in range(k)]


def same(got, want, columns):
    assert list(got) == columns
    for c in columns:
        a, b = got[c], want[c]
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), c
        else:
            assert a == b, c


@pytest.mark.parametrize("view", [None, "odd"])
def test_columns_deliver_the_full_loaders_batches_restricted_and_resume_pinned(table, view):
    with loaderx.open_table(table, readonly=False) as t:
        t.save_view("odd", "x % 2 = 1")
    columns = ["y", "x"]
    with loaderx.open_table(table, view=view) as t:
        with DataLoader(t, batch_size=8, seed=5, workers=0) as full:
            whole = take(full, 10)
        assert list(whole[0]) == ["x", "y", "text", "big"]  # the table's order
        with DataLoader(t, batch_size=8, seed=5, workers=0, columns=columns) as run:
            head = take(run, 4)
            state = run.state_dict()
            version = t.version
    assert state["columns"] == columns
    assert state["tables"] == [{"path": os.path.abspath(table), "version": version, "view": view}]
    for got, want in zip(head, whole):
        same(got, want, columns)
    if view == "odd":
        assert all(v % 2 == 1 for b in head for v in b["x"].tolist())
    # The table changes under the run; from_state reopens the pinned data.
    with loaderx.open_table(table, readonly=False) as t:
        t.delete("x < 30")
        t.append(
            {
                "x": np.arange(1000, 1010),
                "y": np.zeros(10, np.float32),
                "text": ["new"] * 10,
                "big": [b"z"] * 10,
            }
        )
    with DataLoader.from_state(state, workers=0) as resumed:
        assert resumed.step == 4
        assert resumed.state_dict()["columns"] == columns
        rest = take(resumed, 6)
    for got, want in zip(rest, whole[4:]):
        same(got, want, columns)


def test_columns_are_checked_against_the_state(table):
    with loaderx.open_table(table) as t:
        with DataLoader(t, batch_size=4, columns=["x"], workers=0) as run:
            next(run)
            state = run.state_dict()
        with DataLoader(t, batch_size=4, workers=0) as everything:
            assert "columns" not in everything.state_dict()
            with pytest.raises(ValueError, match=r"state\['columns'\] is \['x'\].*columns is None"):
                everything.load_state_dict(state)
        with DataLoader(t, batch_size=4, columns=["y"], workers=0) as other:
            with pytest.raises(ValueError, match=r"\['x'\].*\['y'\]"):
                other.load_state_dict(state)
        with DataLoader(t, batch_size=4, columns=["x"], workers=0) as again:
            again.load_state_dict(state)
            assert again.step == 1


def test_unknown_column_names_raise_naming_them_and_the_columns_there_are(table):
    with loaderx.open_table(table) as t:
        with pytest.raises(ValueError) as err:
            DataLoader(t, batch_size=4, columns=["x", "nope", "caption"])
        message = str(err.value)
        assert "['nope', 'caption']" in message
        assert "['x', 'y', 'text', 'big']" in message
        with pytest.raises(ValueError, match="more than once"):
            DataLoader(t, batch_size=4, columns=["x", "x"])
        with pytest.raises(ValueError, match="at least one"):
            DataLoader(t, batch_size=4, columns=[])
        with pytest.raises(TypeError, match="list of column names"):
            DataLoader(t, batch_size=4, columns="x")


def test_provenance_is_the_same_with_columns(table):
    with loaderx.open_table(table) as t:
        with (
            DataLoader(t, batch_size=8, seed=2) as full,
            DataLoader(t, batch_size=8, seed=2, columns=["text"]) as some,
        ):
            assert some.provenance(range(5)).equals(full.provenance(range(5)))
            assert next(some)["text"] == next(full)["text"]


def test_a_mix_delivers_the_columns_given_and_its_source_column(table, tmp_path):
    other = str(tmp_path / "u")
    loaderx.ingest_sharded(
        pa.table(
            {
                "x": np.arange(50, dtype=np.int64) + 500,
                "y": np.ones(50, np.float32),
                "text": ["u"] * 50,
                "big": [b"u"] * 50,
            }
        ),
        other,
        workers=1,
    ).close()
    with loaderx.open_table(table) as a, loaderx.open_table(other) as b:
        mix = Mix({"a": a, "b": b}, {"a": 1.0, "b": 1.0})
        with DataLoader(mix, batch_size=8, seed=1, workers=0) as full:
            whole = take(full, 6)
        with DataLoader(mix, batch_size=8, seed=1, workers=0, columns=["x"]) as run:
            head = take(run, 3)
            state = run.state_dict()
        with pytest.raises(ValueError, match=r"\['source'\].*its columns"):
            DataLoader(mix, batch_size=8, columns=["source"])
    assert state["columns"] == ["x"]
    for got, want in zip(head, whole):
        same(got, want, ["x", "source"])
    with DataLoader.from_state(state, workers=0) as resumed:
        rest = take(resumed, 3)
    for got, want in zip(rest, whole[3:]):
        same(got, want, ["x", "source"])
