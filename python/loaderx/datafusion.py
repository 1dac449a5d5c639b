"""Stores as tables of datafusion-python (``pip install 'loaderx[datafusion]'``).

>>> import os, tempfile
>>> import numpy as np
>>> import loaderx
>>> train = os.path.join(tempfile.mkdtemp(), "train")
>>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
>>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
>>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
>>> labels.append(np.arange(12) % 4)
>>> from datafusion import SessionContext
>>> from loaderx.datafusion import TableProvider
>>> ctx = SessionContext()
>>> ctx.register_table("train", TableProvider({"image": images, "label": labels}))
>>> q = "SELECT label, count(*) AS n FROM train GROUP BY label ORDER BY label"
>>> ctx.sql(q).to_arrow_table().to_pydict()
{'label': [0, 1, 2, 3], 'n': [3, 3, 3, 3]}
>>> images.close(); labels.close()
"""

from __future__ import annotations

from . import _native
from ._streams import check_index_column, drain_streams, require_sql
from ._typing import Streams

__all__ = ["TableProvider"]


class TableProvider:
    """A DataFusion table over equal-length streams (shared open stores).

    ``index_column`` names the UInt64 row-number column placed first
    (``None`` for none). It implements ``__datafusion_table_provider__`` for
    ``datafusion.SessionContext().register_table(name, provider)``; the
    same pushdowns as :func:`loaderx.sql` apply.
    """

    def __init__(self, streams: Streams, index_column: str | None = "record_id") -> None:
        require_sql()
        natives, names = drain_streams(streams)
        check_index_column(index_column, names)
        self._names = names
        self._index_column = index_column
        self._native = _native.FfiTableProvider(natives, names, index_column)

    def __datafusion_table_provider__(self, session):
        return self._native.__datafusion_table_provider__(session)

    def __repr__(self) -> str:
        cols = ([self._index_column] if self._index_column else []) + self._names
        return f"TableProvider(columns={cols})"
