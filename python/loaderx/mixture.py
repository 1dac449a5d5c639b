"""Mixtures: one loader over several sources, each weighted.

:class:`Mix` names its sources (tables or dicts of streams with the same
columns) and their weights, fixed or a schedule (a function of the step).
``DataLoader(Mix(...), batch_size=..., mode=..., seed=...)`` then draws
every global batch (``batch_size * world_size`` records) with each source's
count planned so that its share follows the weights:

* **Counts.** Source ``i``'s target after ``k`` steps is ``T_i(k)``, the sum
  over the steps ``s < k`` of ``G * w_i(s) / sum(w(s))`` (``G`` the global
  batch; each share is held as a multiple of 2^-48, so the targets are
  exact and the same on every machine). Each step gives the records by
  *earliest deadline first*: a source's next record is due when its target
  passes it, and may be given once the target is within ``1 - 1/(2S-2)``
  of it (``S`` sources). With fixed weights, every source's count ``C_i(k)``
  after ``k`` steps is within one record of ``T_i(k)``: ``|C_i(k) - T_i(k)|
  < 1`` at every step, so over any window of steps the count is within two
  of the window's target. With a schedule, no source is ever a record ahead
  (``C_i(k) < T_i(k) + 1``) at any step, but a change of weights can leave a
  source more than one record behind for a while (by less than the other
  sources' leads together, ``S - 1``): which records are due first depends
  on the weights to come, and the rule only knows the current ones. The
  counts are a pure function of the weights (of every step up to ``k``):
  see :meth:`Mix.counts`.
* **Records.** Each source samples its own records with ``mode`` (its
  sampler seeded by :func:`source_seed` from the loader's seed and the
  source's name), continuing its own stream of records: with ``"cyclic"``
  a source visits each of its records once per cycle of its own length, so
  a small source repeats while a large one is still in its first pass.
  ``mode="weighted"`` takes per-record weights for every source
  (``DataLoader(..., weights={name: array or column})``).
* **Rows.** The global batch interleaves the sources evenly (source ``i``'s
  ``j``-th record of the step is placed by ``(j + 1/2) / c_i``); each rank
  keeps its equal slice of it, so every rank sees every source in
  proportion, and within a rank's batch the rows are grouped by source, in
  the order of ``sources`` (one gather per source and column). The column
  ``source_column`` (default ``"source"``; None leaves it out) holds each
  row's source as a uint16 position in ``sources``.

>>> import os, tempfile
>>> import numpy as np
>>> import loaderx
>>> from loaderx.dataloader import DataLoader
>>> root = tempfile.mkdtemp()
>>> def source(name, n):
...     s = loaderx.DenseStore.create(os.path.join(root, name), np.int64, ())
...     s.append(np.arange(n))
...     return {"x": s}
>>> web, books = source("web", 1000), source("books", 30)
>>> mix = Mix({"web": web, "books": books}, {"web": 3, "books": 1})
>>> with DataLoader(mix, batch_size=8, seed=1) as loader:
...     batches = [next(loader) for _ in range(10)]
>>> sorted(batches[0])
['source', 'x']
>>> counts = np.bincount(np.concatenate([b["source"] for b in batches]))
>>> counts.tolist()  # 3:1 of 80 records
[60, 20]
>>> mix.counts(batch_size=8, stop=2).tolist()  # per step, per source
[[6, 2], [6, 2]]

A schedule is a function of the step returning the weights:

>>> ramp = Mix({"web": web, "books": books},
...            lambda step: {"web": 1.0, "books": min(step, 10) / 10})
>>> ramp.weights_at(5)
{'web': 1.0, 'books': 0.5}
>>> for s in (web, books):
...     s["x"].close()
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Callable, Union

import numpy as np

from . import _native
from ._streams import StoreBase
from .zsampler import Mode, _as_int, check_weights

__all__ = ["Mix", "source_seed"]

#: Most sources of a mixture (a row's source is a uint16).
MAX_SOURCES = 1 << 16
_MAX_STEP = (1 << 64) - 1

Weights = Mapping[str, float]
Schedule = Callable[[int], Mapping[str, float]]


def source_seed(seed: int, name: str) -> int:
    """The seed of source ``name``'s sampler in a mixture loaded with
    ``seed``, a pure function of both. A mixture's per-record seeds
    (``TransformInfo.record_seeds``) are
    ``record_seeds(source_seed(seed, name), step, record)``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    return _native.source_seed(int(seed), name)


def _kind(store: StoreBase) -> str:
    """What must agree between sources: kind, dtype, shape and logical type."""
    kind = getattr(store, "_kind", "?")
    shape = f" item_shape {tuple(store.item_shape)}" if kind == "dense" else ""
    logical = getattr(store, "logical", "tensor")
    extra = "" if logical == "tensor" else f" ({logical})"
    return f"{kind} {np.dtype(store.dtype).name}{shape}{extra}"


def _number(value) -> float | None:
    """``value`` as a float, or None when it is not a real number."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return float(value)


class Mix:
    """Sources and their weights, for a :class:`~loaderx.dataloader.DataLoader`.

    Bad sources and fixed weights raise ValueError naming them; a
    schedule's bad weights raise ValueError naming the step, from the
    ``next()`` of that step.

    Parameters
    ----------
    sources:
        ``{name: table or {column: stream}}``: each a
        :class:`~loaderx.Table` or a dict of equal-length ``DenseStore`` /
        ``RaggedStore``, every source with the same column names and kinds
        (dense or ragged, dtype, item shape, text or binary). Row sources
        are positions in this order.
    weights:
        ``{name: weight}`` with one finite, non-negative number per source
        (not all zero), or a schedule: a function ``step -> {name: weight}``
        called once per step, in step order, from step 0 (a loader that
        starts at step ``k`` calls it for the steps ``0..k`` too, since the
        counts depend on every earlier step). A schedule must be a pure
        function of the step, so that a resumed run sees the same weights.
    source_column:
        The name of the column of row sources (uint16), or None for none.
    """

    def __init__(
        self,
        sources: Mapping[str, Mapping[str, StoreBase]],
        weights: Weights | Schedule,
        *,
        source_column: str | None = "source",
    ) -> None:
        if not isinstance(sources, Mapping):
            raise TypeError(
                f"sources must be a dict of name -> table or dict of streams, "
                f"got {type(sources).__name__}"
            )
        if not sources:
            raise ValueError("sources must name at least one source")
        if len(sources) > MAX_SOURCES:
            raise ValueError(f"a mixture takes at most {MAX_SOURCES} sources, got {len(sources)}")
        names = list(sources)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"source names must be str, got {name!r}")
            if not isinstance(sources[name], Mapping):
                raise TypeError(
                    f"sources[{name!r}] must be a table or a dict of streams, "
                    f"got {type(sources[name]).__name__}"
                )
        columns = list(sources[names[0]])
        if not columns:
            raise ValueError(f"source {names[0]!r} has no columns")
        lengths = {}
        for name in names:
            streams = sources[name]
            theirs = list(streams)
            if sorted(theirs) != sorted(columns):
                missing = [c for c in columns if c not in streams]
                extra = [c for c in theirs if c not in columns]
                raise ValueError(
                    f"every source of a mixture must have the same columns: source {name!r} "
                    f"lacks {missing} and has {extra} beside source {names[0]!r}'s {columns}"
                )
            for column in columns:
                store = streams[column]
                if not isinstance(store, StoreBase):
                    raise TypeError(
                        f"sources[{name!r}][{column!r}] must be a DenseStore or RaggedStore, "
                        f"got {type(store).__name__}"
                    )
            for column in columns:
                ours, theirs_kind = _kind(sources[names[0]][column]), _kind(streams[column])
                if ours != theirs_kind:
                    raise ValueError(
                        f"column {column!r} differs between sources {names[0]!r} ({ours}) "
                        f"and {name!r} ({theirs_kind})"
                    )
            sizes = {column: len(streams[column]) for column in columns}
            if len(set(sizes.values())) != 1:
                detail = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise ValueError(
                    f"the streams of source {name!r} must all have the same length, got {detail}"
                )
            lengths[name] = next(iter(sizes.values()))
            if lengths[name] == 0:
                raise ValueError(f"source {name!r} is empty: nothing to sample")
        if source_column is not None:
            if not isinstance(source_column, str):
                raise TypeError(
                    f"source_column must be a str or None, got {type(source_column).__name__}"
                )
            if source_column in columns:
                raise ValueError(
                    f"source_column {source_column!r} collides with a column of the sources"
                )
        self._sources = {name: sources[name] for name in names}
        self._names = names
        self._columns = columns
        self._lengths = lengths
        self._source_column = source_column
        if callable(weights) and not isinstance(weights, Mapping):
            self._schedule: Schedule | None = weights
            self._fixed = None
        else:
            self._schedule = None
            self._fixed = np.asarray(self._check(weights, None), dtype=np.float64)

    # -- weights -----------------------------------------------------------

    def _check(self, weights, step: int | None) -> np.ndarray | list[float]:
        """``weights`` as a row of floats in source order (ValueError naming
        the step, when given, and the sources otherwise)."""
        # The common case, once per step of a schedule: a dict of every
        # source to plain numbers, all fine. Anything else takes the checks
        # below, which say what is wrong.
        if type(weights) is dict and len(weights) == len(self._names):
            try:
                row = [weights[name] for name in self._names]
            except KeyError:
                row = None
            if (
                row is not None
                and all(type(v) is float or type(v) is int for v in row)
                and all(0 <= v < math.inf for v in row)
                and any(row)
            ):
                return row
        at = "" if step is None else f" at step {step}"
        what = "weights" if step is None else "the schedule's weights"
        if not isinstance(weights, Mapping):
            raise (TypeError if step is None else ValueError)(
                f"{what}{at} must be a dict of source name -> weight"
                + ("" if step is not None else " or a function of the step")
                + f", got {type(weights).__name__}"
            )
        unknown = [k for k in weights if k not in self._sources]
        if unknown:
            raise ValueError(
                f"{what}{at} name unknown sources {unknown}; the sources are {self._names}"
            )
        missing = [k for k in self._names if k not in weights]
        if missing:
            raise ValueError(f"{what}{at} lack sources {missing}; give every source a weight")
        row = np.empty(len(self._names))
        for i, name in enumerate(self._names):
            value = _number(weights[name])
            if value is None or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"{what}{at} must be finite numbers >= 0, got {weights[name]!r} "
                    f"for source {name!r}"
                )
            row[i] = value
        if not row.any():
            raise ValueError(f"{what}{at} are all zero; at least one source needs weight")
        return row

    def _row(self, step: int) -> np.ndarray | list[float]:
        """The weights of ``step`` in source order."""
        if self._schedule is None:
            return self._fixed
        return self._check(self._schedule(step), step)

    def _record_weights(self, mode: Mode, weights) -> list[np.ndarray] | None:
        """A mixture's per-record weights, one array per source in source order
        (mode ``"weighted"`` only: ``{source name: array or column}``)."""
        if mode is not Mode.WEIGHTED:
            check_weights(mode, weights)  # refuses weights outside mode "weighted"
            return None
        if weights is None:
            raise ValueError(
                "weights must be given for mode 'weighted': {source name: one weight per record}, "
                "got None"
            )
        if not isinstance(weights, Mapping):
            raise TypeError(
                "weights of a Mix must be a dict of source name -> per-record weights, "
                f"got {type(weights).__name__}"
            )
        unknown = [k for k in weights if k not in self.lengths]
        missing = [k for k in self.names if k not in weights]
        if unknown or missing:
            raise ValueError(
                f"weights must name every source of the Mix ({self.names}) once: "
                f"unknown {unknown}, missing {missing}"
            )
        out = []
        for name in self.names:
            w = check_weights(mode, weights[name])
            if len(w) != self.lengths[name]:
                raise ValueError(
                    f"weights[{name!r}] must hold one weight per record of source {name!r} "
                    f"({self.lengths[name]}), got {len(w)}"
                )
            out.append(w)
        return out

    def weights_at(self, step: int) -> dict[str, float]:
        """The weights of ``step`` (the fixed ones, or the schedule's,
        checked: ValueError naming the step when they are bad)."""
        step = _as_int("step", step, 0, _MAX_STEP)
        return dict(zip(self._names, map(float, self._row(step))))

    def counts(self, batch_size: int, stop: int, start: int = 0) -> np.ndarray:
        """Records each source gives at the steps ``start..stop`` of a
        loader whose global batch is ``batch_size`` (``batch_size *
        world_size`` of the loader): an int64 array of shape ``(stop -
        start, len(sources))``, the same counts a loader's ``source``
        column shows. A schedule is evaluated at the steps ``0..stop``."""
        batch_size = _as_int("batch_size", batch_size, 1)
        start = _as_int("start", start, 0, _MAX_STEP)
        stop = _as_int("stop", stop, 0, _MAX_STEP)
        if stop < start:
            raise ValueError(f"stop must be >= start, got start={start}, stop={stop}")
        if self._schedule is None:
            rows = self._fixed[None, :]
        else:
            rows = np.empty((stop, len(self._names)))
            for k in range(stop):
                rows[k] = self._row(k)
        return _native.mix_counts(np.ascontiguousarray(rows), batch_size, start, stop)

    # -- what it holds -----------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The sources' names, in order (a row's source is its position here)."""
        return list(self._names)

    @property
    def sources(self) -> dict[str, Mapping[str, StoreBase]]:
        """``{name: table or streams}`` as given."""
        return dict(self._sources)

    @property
    def columns(self) -> list[str]:
        """The columns every source has (in the first source's order)."""
        return list(self._columns)

    @property
    def lengths(self) -> dict[str, int]:
        """Records per source."""
        return dict(self._lengths)

    @property
    def source_column(self) -> str | None:
        """The column of row sources (None: not added)."""
        return self._source_column

    @property
    def weights(self) -> Union[dict[str, float], Schedule]:
        """The fixed weights, or the schedule."""
        if self._schedule is not None:
            return self._schedule
        return dict(zip(self._names, self._fixed.tolist()))

    @property
    def scheduled(self) -> bool:
        """Whether the weights are a schedule (a function of the step)."""
        return self._schedule is not None

    def __repr__(self) -> str:
        weights = "schedule" if self._schedule is not None else repr(self.weights)
        return (
            f"Mix(sources={self._lengths}, weights={weights}, "
            f"source_column={self._source_column!r})"
        )
