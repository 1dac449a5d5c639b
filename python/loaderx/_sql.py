"""``loaderx.sql``: SQL over stores through an embedded DataFusion session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from . import _native
from ._streams import check_table, require_pyarrow, require_sql
from ._typing import Streams

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["sql"]


def _tables(tables: Mapping[str, Mapping], index_column: str | None):
    """The native table specs ``[(name, natives, names, index_column)]``."""
    specs = []
    for name, streams in tables.items():
        natives, names = check_table(name, streams, index_column)
        specs.append((name, natives, names, index_column))
    return specs


def sql(query: str, **tables: Streams) -> pa.Table:
    """Runs a SQL query over stores and returns a ``pyarrow.Table``.

    Each keyword names a table: a dict of equal-length streams (open
    ``DenseStore`` / ``RaggedStore``), or Arrow data in memory (a
    ``pyarrow.Table``, a polars DataFrame: anything with
    ``__arrow_c_stream__``, such as ``DataLoader.provenance``'s table),
    queried as it is. Every table of streams also has a UInt64
    ``record_id`` column first. Joins across tables work. Scans read only
    the projected streams; ``record_id`` ranges and IN-lists touch only
    those rows; predicates on scalar streams are evaluated before heavy
    streams are gathered, and those are gathered for the surviving rows only.

    >>> import os, tempfile
    >>> import numpy as np
    >>> import loaderx
    >>> train = os.path.join(tempfile.mkdtemp(), "train")
    >>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
    >>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
    >>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
    >>> labels.append(np.arange(12) % 4)
    >>> streams = {"image": images, "label": labels}
    >>> t = loaderx.sql("SELECT label, count(*) AS n FROM train GROUP BY label ORDER BY label",
    ...                 train=streams)
    >>> t.to_pydict()
    {'label': [0, 1, 2, 3], 'n': [3, 3, 3, 3]}
    >>> q = "SELECT record_id FROM train WHERE label = 3 ORDER BY record_id"
    >>> ids = loaderx.sql(q, train=streams)["record_id"]
    >>> ids.to_pylist()
    [3, 7, 11]
    >>> from loaderx.dataloader import DataLoader
    >>> with DataLoader(streams, batch_size=2, indices=ids) as loader:
    ...     sorted(next(loader)["label"].tolist())
    [3, 3]
    >>> images.close(); labels.close()
    """
    pa = require_pyarrow()
    require_sql()
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if not tables:
        raise ValueError("give at least one table, e.g. loaderx.sql(query, t={'x': store})")
    # Arrow data (a pyarrow or polars table: anything with an Arrow stream
    # that is not a table of streams) is queried as it is, without record_id.
    arrow = {
        k: v
        for k, v in tables.items()
        if not isinstance(v, Mapping) and hasattr(v, "__arrow_c_stream__")
    }
    stores = {k: v for k, v in tables.items() if k not in arrow}
    return pa.table(_native.sql(query, _tables(stores, "record_id"), True, list(arrow.items())))
