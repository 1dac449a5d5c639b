"""What the framework adapters (:mod:`loaderx.torch`, :mod:`loaderx.grain`)
share: a table or a dict of equal-length streams seen as records, read
whole batches at a time, pickled by path (a spawned worker reopens the data
read-only; a remote table's storage options travel along, never shown)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ._streams import check_streams


def _reopen(cls, spec):
    """Unpickles a :class:`Records` subclass ``cls`` from its ``_spec()``."""
    from .table import open_store, open_table

    kind, path, columns, *options = spec
    if kind == "table":
        table = open_table(path, readonly=True, storage_options=options[0] if options else None)
        return cls(table, columns=columns, _owned=table)
    streams = {name: open_store(p, readonly=True) for name, p in columns}
    return cls(streams, _owned=list(streams.values()))


class Records:
    """The records of ``source`` (a table or a ``{name: stream}`` dict of
    equal length), restricted to ``columns`` (None: all, in order)."""

    _NAME: ClassVar[str]  # the public class name, for the repr
    _NOUN: ClassVar[str]  # what messages call it ("dataset", "source")

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
        self._owned = _owned  # what _reopen opened, closed with this object

    def __len__(self) -> int:
        return self._len

    def _out_of_range(self, index) -> IndexError:
        return IndexError(
            f"record {index} is out of range for a {self._NOUN} of {self._len} records"
        )

    def _keys(self, indices, argument: str) -> np.ndarray:
        """``indices`` as a 1-D int64 array within ``0..len`` (TypeError
        naming ``argument``; IndexError naming the first key outside)."""
        keys = np.asarray(indices)
        if keys.ndim != 1 or (keys.size and keys.dtype.kind not in "iu"):
            raise TypeError(f"{argument} must be a sequence of ints, got {indices!r}")
        keys = keys.astype(np.int64, copy=False)
        if keys.size and (keys.min() < 0 or keys.max() >= self._len):
            raise self._out_of_range(int(keys[(keys < 0) | (keys >= self._len)][0]))
        return keys

    def _batch(self, keys: np.ndarray) -> dict[str, Any]:
        """``{column: batch}``: one gather per column."""
        return {name: s[keys] for name, s in self._streams.items()}

    def _record_list(self, keys: np.ndarray) -> list[dict[str, Any]]:
        """The records at ``keys`` as a list of ``{column: value}``, read
        with one gather per column."""
        columns = self._batch(keys)
        return [{name: col[j] for name, col in columns.items()} for j in range(len(keys))]

    def _record(self, i: int) -> dict[str, Any]:
        return {name: s[i] for name, s in self._streams.items()}

    @property
    def columns(self) -> list[str]:
        """The columns, in order."""
        return list(self._streams)

    def _spec(self):
        path = getattr(self._source, "path", None)
        if path is not None and hasattr(self._source, "shards"):
            options = getattr(self._source, "_storage_options", None)
            return ("table", path, list(self._streams), options)
        return ("streams", None, [(name, s.path) for name, s in self._streams.items()])

    def __reduce__(self):
        return (_reopen, (type(self), self._spec()))

    def __repr__(self) -> str:
        kind, path, columns, *_ = self._spec()
        if kind == "table":
            return f"{self._NAME}(table={path!r}, columns={columns}, len={self._len})"
        streams = {name: p for name, p in columns}
        return f"{self._NAME}(streams={streams!r}, len={self._len})"
