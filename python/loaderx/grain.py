"""A table as a Grain data source (``pip install 'loaderx[grain]'``).

:class:`DataSource` implements Grain's ``RandomAccessDataSource`` protocol
over a table (:func:`loaderx.open_table`) or a dict of equal-length
streams: ``len()``, a thread-safe ``source[i]`` (one record as ``{column:
value}``), a batched ``source.__getitems__(keys)`` (one gather per column
for the whole batch) and a ``repr`` that names the data and not the
process, so it is stable across runs for Grain's checkpoints. It pickles by
path, reopening the streams read-only, so Grain's worker processes can use
it. Grain is not imported by this module: any Grain version that reads
``RandomAccessDataSource`` objects takes it.

>>> import numpy as np, os, tempfile, loaderx
>>> from loaderx.grain import DataSource
>>> path = os.path.join(tempfile.mkdtemp(), "labels")
>>> with loaderx.DenseStore.create(path, np.int64, ()) as s:
...     s.append(np.arange(10) * 10)
>>> with loaderx.DenseStore.open(path, readonly=True) as labels:
...     source = DataSource({"label": labels})
...     len(source), int(source[3]["label"]), [int(r["label"]) for r in source.__getitems__([1, 2])]
(10, 30, [10, 20])
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._streams import check_streams

__all__ = ["DataSource"]


def _reopen(spec):
    from .table import open_store, open_table

    kind, path, columns, *options = spec
    if kind == "table":
        # A remote table's storage options travel with it (a spawned worker
        # needs its credentials); they are never shown in a repr.
        table = open_table(path, readonly=True, storage_options=options[0] if options else None)
        return DataSource(table, columns=columns, _owned=table)
    streams = {name: open_store(p, readonly=True) for name, p in columns}
    return DataSource(streams, _owned=list(streams.values()))


class DataSource:
    """Grain's ``RandomAccessDataSource`` over ``source``: a table or a
    ``{name: stream}`` dict of equal length. ``columns`` selects columns
    (None: all, in the source's order)."""

    def __init__(
        self,
        source: Mapping[str, Any],
        columns: Sequence[str] | None = None,
        *,
        _owned: Any = None,
    ) -> None:
        if not isinstance(source, Mapping):
            raise TypeError(
                f"source must be a table or a dict of streams, got {type(source).__name__}"
            )
        names = list(source) if columns is None else list(columns)
        unknown = [c for c in names if c not in source]
        if unknown:
            raise ValueError(f"source has no column {unknown[0]!r}; columns: {list(source)}")
        if not names:
            raise ValueError("columns must name at least one column (or be None for all)")
        streams = {name: source[name] for name in names}
        check_streams(streams)
        lengths = {len(s) for s in streams.values()}
        if len(lengths) != 1:
            detail = ", ".join(f"{k}={len(v)}" for k, v in streams.items())
            raise ValueError(f"streams must all have the same length, got {detail}")
        self._source = source
        self._streams = streams
        self._len = lengths.pop()
        self._owned = _owned  # what _reopen opened, closed with this source

    def __len__(self) -> int:
        return self._len

    def _key(self, key) -> int:
        i = operator.index(key)
        if not 0 <= i < self._len:
            raise IndexError(f"record {i} is out of range for a source of {self._len} records")
        return i

    def __getitem__(self, record_key) -> dict:
        i = self._key(record_key)
        return {name: s[i] for name, s in self._streams.items()}

    def __getitems__(self, record_keys: Sequence[int]) -> list[dict]:
        keys = np.asarray(record_keys)
        if keys.ndim != 1 or (keys.size and keys.dtype.kind not in "iu"):
            raise TypeError(f"record_keys must be a sequence of ints, got {record_keys!r}")
        if keys.size and (keys.min() < 0 or keys.max() >= self._len):
            bad = int(keys[(keys < 0) | (keys >= self._len)][0])
            raise IndexError(f"record {bad} is out of range for a source of {self._len} records")
        columns = {name: s[keys] for name, s in self._streams.items()}
        return [{name: col[j] for name, col in columns.items()} for j in range(len(keys))]

    def _spec(self):
        path = getattr(self._source, "path", None)
        if path is not None and hasattr(self._source, "shards"):
            options = getattr(self._source, "_storage_options", None)
            return ("table", path, list(self._streams), options)
        return ("streams", None, [(name, s.path) for name, s in self._streams.items()])

    def __reduce__(self):
        return (_reopen, (self._spec(),))

    def __repr__(self) -> str:
        kind, path, columns, *_ = self._spec()
        if kind == "table":
            return f"loaderx.grain.DataSource(table={path!r}, columns={columns}, len={self._len})"
        streams = {name: p for name, p in columns}
        return f"loaderx.grain.DataSource(streams={streams!r}, len={self._len})"
