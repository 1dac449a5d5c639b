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
from collections.abc import Sequence
from typing import SupportsIndex

from ._source import Records

__all__ = ["DataSource"]


class DataSource(Records):
    """Grain's ``RandomAccessDataSource`` over ``source``: a table or a
    ``{name: stream}`` dict of equal length. ``columns`` selects columns
    (None: all, in the source's order)."""

    _NAME = "loaderx.grain.DataSource"
    _NOUN = "source"

    def __getitem__(self, record_key: SupportsIndex) -> dict:
        i = operator.index(record_key)
        if not 0 <= i < self._len:
            raise self._out_of_range(i)
        return self._record(i)

    def __getitems__(self, record_keys: Sequence[int]) -> list[dict]:
        return self._record_list(self._keys(record_keys, "record_keys"))
