"""loaderx.grain.DataSource through Grain's own DataLoader (the real
package): records, batches, workers, pickling and a stable repr."""

import pickle

import numpy as np
import pytest

import loaderx
from loaderx.grain import DataSource

grain = pytest.importorskip("grain.python")

N = 40


@pytest.fixture
def table(tmp_path):
    pa = pytest.importorskip("pyarrow")
    path = tmp_path / "t"
    loaderx.arrow.ingest(
        pa.table(
            {
                "label": pa.array(np.arange(N) % 7),
                "caption": pa.array([f"record {i}" for i in range(N)]),
                "tokens": pa.array([list(range(i % 5 + 1)) for i in range(N)]),
            }
        ),
        str(path),
    )
    with loaderx.open_table(path) as t:
        yield t


def test_grain_dataloader_reads_every_record_in_its_order(table):
    source = DataSource(table)
    assert len(source) == N
    sampler = grain.IndexSampler(N, shuffle=True, seed=3, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)
    records = list(loader)
    assert sorted(int(r["label"]) for r in records) == sorted(np.arange(N) % 7)
    order = [int(r["caption"].split()[1]) for r in records]
    assert sorted(order) == list(range(N)) and order != list(range(N))  # shuffled, all once
    for r in records:
        i = int(r["caption"].split()[1])
        assert int(r["label"]) == i % 7
        np.testing.assert_array_equal(r["tokens"], np.arange(i % 5 + 1))


def test_grain_workers_get_a_pickled_source(table):
    source = DataSource(table, columns=["label", "caption"])
    sampler = grain.IndexSampler(N, shuffle=False, seed=0, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=2)
    got = sorted(int(r["caption"].split()[1]) for r in loader)
    assert got == list(range(N))


def test_batched_reads_pickling_repr_and_errors(table):
    source = DataSource(table)
    rows = source.__getitems__([5, 0, 5])
    assert [r["caption"] for r in rows] == ["record 5", "record 0", "record 5"]
    np.testing.assert_array_equal(rows[0]["tokens"], np.arange(1))
    again = pickle.loads(pickle.dumps(source))
    assert again[7]["caption"] == "record 7" and len(again) == N
    assert repr(again) == repr(source)
    assert repr(source) == (
        f"loaderx.grain.DataSource(table={table.path!r}, "
        "columns=['caption', 'label', 'tokens'], len=40)"
    )
    with pytest.raises(IndexError, match="record 40 is out of range"):
        source[N]
    with pytest.raises(IndexError, match="record -1 is out of range"):
        source.__getitems__([0, -1])
    with pytest.raises(ValueError, match="no column 'nope'"):
        DataSource(table, columns=["nope"])
    with pytest.raises(TypeError, match="table or a dict of streams"):
        DataSource([1, 2])
