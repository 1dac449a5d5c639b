"""A writable ``Table`` shows its own commits (DESIGN §16): every pair of
evolution, view, tag and edit calls chained on one ``Table`` object gives
what the same two calls give with the table opened afresh between them."""

import itertools

import numpy as np
import pyarrow as pa
import pytest

import loaderx


def _last(t) -> str:
    """The newest column: what the previous call may just have added."""
    return list(t)[-1]


def _append(t, k):
    n = 6
    src = {c: np.arange(n, dtype=np.int64) * (k + 1) + 1000 * k for c in t}
    t.append(src)


def _add_columns(t, k):
    t.add_columns({f"c{k}": (np.arange(t.num_rows, dtype=np.int64) * 7 + k) % 11})


def _delete(t, k):
    t.delete(f"{_last(t)} % 5 = {k}")


def _drop_columns(t, k):
    t.drop_columns(_last(t))


def _compact(t, k):
    t.compact(min_deleted=0.0)


def _split(t, k):
    t.split({f"a{k}": 0.5, f"b{k}": 0.5}, seed=k, by=_last(t))


def _save_view(t, k):
    t.save_view(f"v{k}", f"{_last(t)} % 3 = 0")


def _tag(t, k):
    t.tag(f"t{k}")


def _update(t, k):
    t.update(f"{_last(t)} % 4 = 1", {_last(t): 100 + k})


def _merge_insert(t, k):
    keys = np.array([0, 3, 5000 + k], dtype=np.int64)
    t.merge_insert({c: keys if c == "id" else keys * 0 + 77 + k for c in t}, on="id")


def _add_columns_on(t, k):
    keys = np.arange(t.num_rows, dtype=np.int64)[::-2]
    t.add_columns({"id": col_of(t, "id")[keys], f"j{k}": keys * 3}, on="id")


def col_of(t, name):
    return t[name][np.arange(t.num_rows)]


CALLS = {
    "append": _append,
    "add_columns": _add_columns,
    "delete": _delete,
    "drop_columns": _drop_columns,
    "compact": _compact,
    "split": _split,
    "save_view": _save_view,
    "tag": _tag,
    "update": _update,
    "merge_insert": _merge_insert,
    "add_columns_on": _add_columns_on,
}


def _new(path):
    n = 40
    ids = np.arange(n, dtype=np.int64)
    src = pa.table({"id": ids, "x": ids * 3 % 17, "y": ids % 6})
    loaderx.ingest_sharded(src, path, shards=2).close()


def _what(path) -> dict:
    """Everything a fresh open shows: the latest version's rows, every
    view's version and rows, the tags."""
    with loaderx.open_table(path) as t:
        out = {
            "version": t.version,
            "columns": {c: np.asarray(t[c][:]).tolist() for c in t},
            "tags": t.tags(),
            "views": t.views(),
        }
        names = list(out["views"])
    for name in names:
        with loaderx.open_table(path, view=name) as v:
            out[f"view {name}"] = {c: np.asarray(v[c][:]).tolist() for c in v}
    return out


@pytest.mark.parametrize("first,second", list(itertools.product(CALLS, repeat=2)))
def test_a_second_call_on_one_handle_sees_the_first_ones_commit(tmp_path, first, second):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _new(one)
    _new(two)
    # On one handle, the two calls in a row.
    with loaderx.open_table(one, readonly=False) as t:
        CALLS[first](t, 1)
        CALLS[second](t, 2)
        shown = (t.version, t.num_rows, list(t))
    # The table opened afresh for each call.
    for k, call in ((1, first), (2, second)):
        with loaderx.open_table(two, readonly=False) as t:
            CALLS[call](t, k)
    got, want = _what(one), _what(two)
    assert got == want
    assert shown == (want["version"], len(want["columns"]["id"]), list(want["columns"]))


def test_a_split_by_the_column_its_own_handle_just_added(tmp_path):
    """The case a user met: add_columns then split(by=) on one handle."""
    path = str(tmp_path / "t")
    _new(path)
    with loaderx.open_table(path, readonly=False) as t:
        t.add_columns({"doc": np.arange(t.num_rows) // 7})
        sizes = t.split({"a": 0.5, "b": 0.5}, seed=1, by="doc")
        assert sum(sizes.values()) == t.num_rows
        assert {v["version"] for v in t.views().values()} == {t.version}
