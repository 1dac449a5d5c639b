"""Plain tables: a directory of equal-length stores, one per column.

A plain table is a directory whose subdirectories holding ``meta.zr`` are its
columns, named after the subdirectories (the command line's ``--table DIR``
convention). :func:`open_table` opens every column and returns a
:class:`Table`, a read-only ``Mapping[str, stream]`` that works wherever a
dict of stores does: gathers, ``loaderx.arrow.table``, ``loaderx.sql``,
Parquet export and the DataLoader.

>>> import numpy as np, tempfile, os
>>> root = tempfile.mkdtemp()
>>> with DenseStore.create(os.path.join(root, "t", "x"), np.int64, ()) as s:
...     s.append(np.arange(4))
>>> with open_table(os.path.join(root, "t")) as t:
...     t.num_rows, list(t), t["x"][[3, 1]]
(4, ['x'], array([3, 1]))
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import numpy as np

from . import _native
from ._streams import StoreBase, check_path
from .zrecord import DenseStore, RaggedStore

__all__ = ["Table", "open_table"]


def open_store(path: str, readonly: bool = True):
    """Opens the store at ``path`` with the class of its kind."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no store at {path}: the path does not exist")
    native = _native.Store.open(path, None, readonly)
    kind = native.kind
    native.close()
    return (DenseStore if kind == "dense" else RaggedStore).open(path, readonly=readonly)


def column_names(path: str) -> list[str]:
    """The store subdirectories of a table directory, sorted."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"table directory {path} does not exist")
    names = sorted(d for d in os.listdir(path) if os.path.isfile(os.path.join(path, d, "meta.zr")))
    if not names:
        raise ValueError(f"table directory {path} holds no stores (no subdirectory with meta.zr)")
    return names


def open_columns(path: str, readonly: bool = True) -> dict:
    """Opens every store of a table directory, named by subdirectory."""
    streams = {}
    try:
        for name in column_names(path):
            streams[name] = open_store(os.path.join(path, name), readonly)
    except BaseException:
        for s in streams.values():
            s.close()
        raise
    return streams


class Table(Mapping):
    """The columns of a plain table: a read-only ``Mapping`` of column name to
    store (``DenseStore`` or ``RaggedStore``), all of ``num_rows`` records.

    Columns come in name order. ``close()`` (or leaving a ``with`` block)
    closes every column. Obtain one with :func:`open_table`.
    """

    def __init__(self, path: str, columns: dict):
        # Private: use open_table().
        self._path = path
        self._columns = columns
        self._num_rows = len(next(iter(columns.values()))) if columns else 0

    def _live(self) -> dict:
        if self._columns is None:
            raise ValueError(f"table {self._path!r} is closed")
        return self._columns

    def __getitem__(self, name: str) -> StoreBase:
        columns = self._live()
        try:
            return columns[name]
        except KeyError:
            raise KeyError(
                f"table {self._path!r} has no column {name!r}; columns: {list(columns)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    @property
    def path(self) -> str:
        """The table directory, as given to :func:`open_table`."""
        return self._path

    @property
    def num_rows(self) -> int:
        """The length every column shares."""
        self._live()
        return self._num_rows

    @property
    def readonly(self) -> bool:
        """Whether the columns were opened read-only."""
        return all(s.readonly for s in self._live().values())

    @property
    def closed(self) -> bool:
        return self._columns is None

    def close(self) -> None:
        """Closes every column. Idempotent."""
        columns, self._columns = self._columns, None
        if columns is None:
            return
        errors = []
        for s in columns.values():
            try:
                s.close()
            except Exception as exc:  # noqa: BLE001 - the first one is raised
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> Table:
        self._live()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass

    def __repr__(self) -> str:
        if self._columns is None:
            return f"<Table path={self._path!r} closed>"
        return (
            f"Table(path={self._path!r}, columns={list(self._columns)}, num_rows={self._num_rows})"
        )


def open_table(path, readonly: bool = True) -> Table:
    """Opens the plain table at ``path``: every store subdirectory is a column.

    Read-only by default (``readonly=True``: shared locks, so any number of
    processes, one per training rank say, open the same table at once);
    ``readonly=False`` opens writable columns. Raises FileNotFoundError when
    ``path`` is not a directory, ValueError when it holds no store or when the
    columns' lengths differ (naming both columns and lengths), and what
    :meth:`DenseStore.open` raises for a column.
    """
    path = check_path(path)
    if not isinstance(readonly, (bool, np.bool_)):
        raise TypeError(f"readonly must be a bool, got {type(readonly).__name__}")
    columns = open_columns(path, bool(readonly))
    lengths = {name: len(s) for name, s in columns.items()}
    first = next(iter(lengths))
    for name, n in lengths.items():
        if n != lengths[first]:
            for s in columns.values():
                s.close()
            raise ValueError(
                f"table {path}: columns must have equal lengths, but column {first!r} "
                f"has {lengths[first]} rows and column {name!r} has {n}"
            )
    return Table(path, columns)
