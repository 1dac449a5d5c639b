"""The endless, step-based DataLoader.

A :class:`DataLoader` composes a dict of streams (``DenseStore`` and
``RaggedStore`` of equal length), draws each step's indices with a
:class:`~loaderx.zsampler.Sampler` and gathers every stream at the same
indices. Gathers run ahead on native threads with the GIL released (up to
``prefetch`` steps); the optional ``transform`` runs on ``workers`` Python
threads; batches come out strictly in step order whatever the thread timing.

There are no epochs: iterate as long as training runs, and resume bit-exactly
with ``start_step=loader.state_dict()["step"]``.

>>> import os, tempfile
>>> import numpy as np
>>> import loaderx
>>> train = os.path.join(tempfile.mkdtemp(), "train")
>>> images = loaderx.DenseStore.create(os.path.join(train, "image"), np.uint8, (3, 8, 8))
>>> images.append(np.zeros((12, 3, 8, 8), np.uint8))
>>> labels = loaderx.DenseStore.create(os.path.join(train, "label"), np.int64, ())
>>> labels.append(np.arange(12) % 4)
>>> from loaderx.dataloader import DataLoader
>>> loader = DataLoader({"image": images, "label": labels}, batch_size=4, seed=7)
>>> batch = next(loader)
>>> batch["image"].shape, batch["label"].shape
((4, 3, 8, 8), (4,))
>>> state = loader.state_dict()
>>> state["step"]
1
>>> following = next(loader)["label"]
>>> loader.close()
>>> with DataLoader({"image": images, "label": labels}, batch_size=4, seed=7,
...                 start_step=state["step"]) as resumed:
...     bool((next(resumed)["label"] == following).all())
True
>>> images.close(); labels.close()
"""

from __future__ import annotations

import enum
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from . import _native
from ._streams import Closing, check_streams, index_array, require_pyarrow
from ._transform import TransformInfo, _takes_info, record_seeds
from .mixture import Mix, source_seed
from .zrecord import DenseStore, RaggedStore
from .zsampler import Mode, _as_int, _as_mode, check_block_size, check_weights

__all__ = ["DataLoader", "TransformInfo", "record_seeds"]

_OUTPUTS = ("numpy", "arrow")
# Native threads gathering ahead; each gather itself fans out over the
# store worker pool, so two are enough to keep it busy.
_PRODUCERS = 2
# Steps of a schedule's weights evaluated and pushed to the native loader at
# once (the schedule is a pure function of the step, so earlier is fine).
_PUSH_AHEAD = 32


class _Failure:
    """A step whose gather or transform raised; re-raised by its ``next()``."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


def _plain(value):
    """``json.dumps``'s fallback for a state: NumPy values as Python's."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(
        f"a state holds plain data (ints, strs, lists, dicts), got {type(value).__name__}"
    )


def _state_json(state: Mapping[str, Any]) -> str:
    """A state (a :meth:`DataLoader.state_dict`) as the JSON the core parses."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping (a state_dict()), got {type(state).__name__}")
    return json.dumps(dict(state), default=_plain)


def _check_columns(columns: Any, available: list[str]) -> list[str] | None:
    """A loader's ``columns=``: None, or a non-empty list of distinct names
    among ``available`` (ValueError naming the unknown ones and those there
    are)."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a list of column names or None, got {columns!r}")
    columns = list(columns)
    bad = [c for c in columns if not isinstance(c, str)]
    if bad:
        raise TypeError(f"columns must be a list of str, got {bad[0]!r} in {columns!r}")
    if not columns:
        raise ValueError("columns must name at least one column, got []")
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise ValueError(f"columns names {repeated} more than once, got {columns!r}")
    unknown = [c for c in columns if c not in available]
    if unknown:
        raise ValueError(
            f"columns {unknown} are not columns of the source; its columns: {available}"
        )
    return columns


class DataLoader(Closing):
    """Endless loader over a dict of equal-length streams.

    Parameters
    ----------
    streams:
        ``{name: DenseStore | RaggedStore}`` (a table, say); every stream is
        gathered at the same indices, so record ``i`` lines up across them.
        Or a :class:`~loaderx.mixture.Mix` of sources: each global batch then takes
        every source's share of records (see :mod:`loaderx.mixture`) and
        carries the column of row sources.
    batch_size:
        Records per batch (per rank when ``world_size > 1``).
    transform:
        ``f(batch) -> value``, the collate step: receives ``{name: ndarray |
        list[ndarray]}`` (or a ``pyarrow.RecordBatch`` with ``output="arrow"``)
        and its return value is what ``next()`` yields. Runs on ``workers``
        threads; an exception is raised by the ``next()`` of the failing step.
        A transform with two positional parameters is called as
        ``f(batch, info)`` with a :class:`TransformInfo` (the step, the rank,
        the rows' record indices and random generators keyed by them), so
        random augmentations are the same on every resume and worker count.
    mode:
        ``"sequential"``, ``"iid"``, ``"cyclic"``, ``"blocked"`` or a
        ``Sampler.Mode``.
    seed, start_step:
        Step ``k`` gathers ``Sampler(len(indices) or n, B, mode, seed).at(k)``;
        pass ``start_step=state_dict()["step"]`` to resume exactly.
    indices:
        Optional subset to sample from (any integer array, e.g. the
        ``record_id`` column of a SQL result).
    prefetch:
        Steps gathered ahead of the consumer, counting those being
        transformed (bounds memory: about ``max(prefetch, workers + 1)``
        batches are in flight).
    workers:
        Transform threads (0 runs the transform in ``next()``).
    output:
        ``"numpy"`` or ``"arrow"`` (``pyarrow.RecordBatch`` batches).
    raw:
        With ``output="numpy"``, a text (utf8) column of a table yields a
        ``list`` of ``str`` and a binary column a ``list`` of ``bytes``;
        ``raw=True`` yields their records' ``uint8`` arrays instead (an
        empty value is the 0-d array ``0``).
    rank, world_size:
        For data parallel training: every rank draws the same global batch
        of ``batch_size * world_size`` indices (same seed) and keeps the
        ``rank``-th equal, disjoint slice.
    weights:
        For ``mode="weighted"`` (required there, refused by the other modes):
        one weight per record of the streams (an array, or a DenseStore of
        scalars such as a table column); records are drawn with replacement
        in proportion. With ``indices``, the subset's records keep their
        weights. For a :class:`~loaderx.mixture.Mix`, ``{source name: weights}``
        with one entry per source.
    block_size:
        Records per block for ``mode="blocked"`` (required there, refused by
        the other modes): each global batch draws from a few blocks of that
        many consecutive records (of ``indices`` when given), so a cache of a
        few blocks serves a whole cycle with each block read about once.
    decode:
        ``{column: loaderx.Image(...)}``: each binary column of encoded
        images arrives decoded on the native threads, uint8 ``(B, 3, H, W)``
        (or ``(B, H, W, 3)``), cropped and flipped as each row's record seed
        draws (see :mod:`loaderx.images`); with ``on_error="zeros"`` a bool
        column ``<column>_ok`` comes last. With ``output="arrow"`` the
        column is a fixed-shape tensor column; a :class:`~loaderx.mixture.Mix`
        decodes each source's column. Kept in :meth:`state_dict`.
    columns:
        A list of column names: only those are gathered and delivered, in
        the order given (the others are never read). A table source keeps
        its version and view pin, so :meth:`from_state` reopens the same
        data and delivers the same columns; :meth:`state_dict` records them
        as ``"columns"``. For a :class:`~loaderx.mixture.Mix`, names among
        the columns every source has (the source column is added as
        before). None (the default) delivers every column. ValueError
        naming the unknown names and the columns there are.
    """

    def __init__(
        self,
        streams: Mapping[str, DenseStore | RaggedStore] | Mix,
        batch_size: int = 256,
        transform: Callable[[Any], Any] | None = None,
        mode: str | Mode = "cyclic",
        seed: int = 0,
        start_step: int = 0,
        indices: npt.ArrayLike | None = None,
        prefetch: int = 4,
        workers: int = 4,
        output: str = "numpy",
        *,
        rank: int = 0,
        world_size: int = 1,
        raw: bool = False,
        block_size: int | None = None,
        weights: npt.ArrayLike | DenseStore | Mapping[str, Any] | None = None,
        decode: Mapping[str, Any] | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        self._closed = True  # until fully constructed
        if decode is not None:
            from .images import _decode_specs

            decode = _decode_specs(decode)
        mix = streams if isinstance(streams, Mix) else None
        if mix is None and not isinstance(streams, Mapping):
            check_streams(streams)  # raises the TypeError naming what was given
        columns = _check_columns(columns, mix.columns if mix is not None else list(streams))
        if mix is None:
            selected = streams if columns is None else {k: streams[k] for k in columns}
            check_streams(selected)
            lengths = {name: len(store) for name, store in selected.items()}
            if len(set(lengths.values())) != 1:
                detail = ", ".join(f"{k}={v}" for k, v in lengths.items())
                raise ValueError(f"streams must all have the same length, got {detail}")
            n = next(iter(lengths.values()))
            if n == 0:
                raise ValueError("streams are empty: nothing to sample")
        batch_size = _as_int("batch_size", batch_size, 1)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        mode = _as_mode(mode)
        block_size = check_block_size(mode, block_size)
        if mix is not None:
            weights = mix._record_weights(mode, weights)
            if indices is not None:
                raise ValueError(
                    "indices does not apply to a Mix: give a subset as a source of its own "
                    "(a dict of streams over those records), got indices"
                )
        else:
            weights = check_weights(mode, weights)
            if weights is not None and len(weights) != n:
                raise ValueError(
                    f"weights must hold one weight per record of the streams ({n}), "
                    f"got {len(weights)}"
                )
        seed = _as_int("seed", seed, 0, (1 << 64) - 1)
        start_step = _as_int("start_step", start_step, 0, (1 << 64) - 1)
        prefetch = _as_int("prefetch", prefetch, 1)
        workers = _as_int("workers", workers, 0)
        world_size = _as_int("world_size", world_size, 1)
        rank = _as_int("rank", rank, 0)
        if output not in _OUTPUTS:
            raise ValueError(f"output must be 'numpy' or 'arrow', got {output!r}")
        if output == "arrow":
            self._to_arrow = require_pyarrow().record_batch
        else:
            self._to_arrow = None
        if indices is not None:
            indices = index_array(indices)
            if weights is not None:
                # The subset's records keep their weights (bounds are checked
                # natively; an out-of-range index raises IndexError there).
                inside = indices[(indices >= 0) & (indices < n)].astype(np.int64)
                if len(inside) == len(indices):
                    weights = np.ascontiguousarray(weights[inside])
        if not isinstance(raw, (bool, np.bool_)):
            raise TypeError(f"raw must be a bool, got {type(raw).__name__}")

        self._raw = bool(raw)
        self._mix = mix
        # The source itself stays referenced: a table opened in the call
        # (DataLoader(open_table(path))) would otherwise be collected, and
        # collecting a table closes its columns.
        self._source = streams
        self._owned: list = []  # tables from_state opened (closed with the loader)
        # Where each table source's data is pinned (path, version, view).
        sources = [mix.sources[n] for n in mix.names] if mix is not None else [streams]
        pins = [s._pin() if hasattr(s, "_pin") else None for s in sources]
        self._pins = pins if any(p is not None for p in pins) else None
        self._columns = columns
        if mix is None:
            self._streams = dict(selected)
            self._names = list(selected)
            self._source_seeds = None
        else:
            self._streams = None
            self._names = mix.columns if columns is None else list(columns)
            self._source_seeds = np.array(
                [source_seed(seed, name) for name in mix.names], dtype=np.uint64
            )
        self._batch_size = batch_size
        self._transform = transform
        self._info = transform is not None and _takes_info(transform)
        self._mode = mode
        self._block_size = block_size
        self._weights = weights
        self._seed = seed
        self._indices = indices
        self._prefetch = prefetch
        self._workers = workers if transform is not None else 0
        self._rank = rank
        self._world_size = world_size
        self._output = output
        self._decode = decode
        self._step = start_step
        self._start()
        self._closed = False

    # -- machinery ---------------------------------------------------------

    def _start(self):
        """Creates the native loader (it checks ``rank`` against
        ``world_size``, ``indices`` against the streams and a cyclic global
        batch against the index space) and the transform threads at
        ``self._step``."""
        self._pid = os.getpid()
        # Transform workers each hold a batch too: together with the
        # native queue, about `prefetch` gathered batches are in flight.
        self._depth = max(1, self._prefetch - self._workers)
        if self._mix is not None:
            mix = self._mix
            self._native = _native.Loader.mixture(
                [[mix.sources[name][c]._drain() for c in self._names] for name in mix.names],
                mix.names,
                self._names,
                self._batch_size,
                self._mode.value,
                self._seed,
                self._step,
                self._depth,
                _PRODUCERS,
                self._rank,
                self._world_size,
                None if mix.scheduled else mix._fixed.tolist(),
                self._weights,
                self._output == "arrow",
                self._raw,
                self._block_size,
                mix.source_column,
                self._pins,
                self._decode,
            )
        else:
            self._native = _native.Loader(
                [self._streams[k]._drain() for k in self._names],
                self._names,
                self._batch_size,
                self._mode.value,
                self._seed,
                self._step,
                self._indices,
                self._depth,
                _PRODUCERS,
                self._rank,
                self._world_size,
                self._output == "arrow",
                self._raw,
                self._block_size,
                self._weights,
                self._pins,
                self._decode,
            )
        failed = self._schedule()
        if failed is not None:
            self._native.close()
            raise failed
        self._cond = threading.Condition()
        self._fetch_lock = threading.Lock()
        self._results: dict[int, Any] = {}
        self._fetch_step = self._step
        self._start_threads()

    def _start_threads(self) -> None:
        self._stop = False
        self._threads = [
            threading.Thread(target=self._work, name=f"loaderx-transform-{i}", daemon=True)
            for i in range(self._workers)
        ]
        for t in self._threads:
            t.start()

    def _stop_threads(self) -> None:
        """Stops and joins the transform threads (each finishes the batch
        it is fetching)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._pid == os.getpid():
            for t in self._threads:
                t.join()
        self._threads = []

    def _schedule(self) -> BaseException | None:
        """A scheduled mixture's weights, pushed to a (new) native loader
        from step 0 to a little beyond the prefetch window; the schedule's
        error when it failed before the current step."""
        self._schedule_error: tuple[int, BaseException] | None = None
        if self._mix is None or not self._mix.scheduled:
            return None
        self._push_weights(self._step + self._depth + 1)
        failed = self._schedule_error
        return failed[1] if failed is not None and failed[0] < self._step else None

    def _push_weights(self, until: int) -> None:
        """Pushes the schedule's weights of the steps before ``until`` (in
        chunks, one native call each). The first step whose weights are bad
        (or whose schedule call raises) is recorded: its ``next()`` raises
        that error, and nothing after it is pushed."""
        if self._schedule_error is not None:
            return
        mix = self._mix
        pushed = self._native.weights_pushed
        while pushed < until:
            # Whole chunks ahead, so that most steps push nothing.
            n = min(max(until - pushed, _PUSH_AHEAD), 4096)
            rows = np.empty((n, len(mix.names)))
            for j in range(n):
                try:
                    rows[j] = mix._row(pushed + j)
                except BaseException as exc:  # noqa: BLE001 - raised by next() of that step
                    if j:
                        self._native.push_weights(rows[:j])
                    self._schedule_error = (pushed + j, exc)
                    self._native.fail_weights(f"{type(exc).__name__}: {exc}")
                    return
            self._native.push_weights(rows)
            pushed += n

    def _next_native(self, step: int):
        """The native loader's batch of ``step`` (the next one it hands over)."""
        if self._mix is not None and self._mix.scheduled:
            self._push_weights(step + self._depth + 1)
            try:
                return self._native.next()
            except ValueError:
                failed = self._schedule_error
                if failed is not None and failed[0] == step:
                    raise failed[1] from None
                raise
        return self._native.next()

    def _apply(self, batch, step: int):
        """``batch`` through the transform (with its info when it takes one)."""
        if self._info:
            indices, sources = self._native.rows_at(step)
            info = TransformInfo(step, self._rank, self._seed, indices, sources, self._source_seeds)
            return self._transform(batch, info)
        return self._transform(batch)

    def _produce(self):
        """One batch from the native prefetcher, converted and transformed."""
        batch = self._next_native(self._step)
        if self._to_arrow is not None:
            batch = self._to_arrow(batch)
        if self._transform is not None:
            batch = self._apply(batch, self._step)
        return batch

    def _work(self):
        while True:
            with self._cond:
                # Each worker fetches at most one batch ahead of the
                # consumer's window, so gathered batches in flight (native
                # queue, workers, finished results) stay near
                # max(prefetch, workers + 1).
                while not self._stop and self._fetch_step - self._step >= self._workers:
                    self._cond.wait()
                if self._stop:
                    return
            with self._fetch_lock:
                if self._stop:
                    return
                step = self._fetch_step
                try:
                    batch = self._next_native(step)
                except BaseException as exc:  # noqa: BLE001 - raised by next() of this step
                    batch = _Failure(exc)
                self._fetch_step += 1
            if not isinstance(batch, _Failure):
                try:
                    if self._to_arrow is not None:
                        batch = self._to_arrow(batch)
                    batch = self._apply(batch, step)
                except BaseException as exc:  # noqa: BLE001
                    batch = _Failure(exc)
            with self._cond:
                self._results[step] = batch
                self._cond.notify_all()

    def _check_process(self):
        if self._pid != os.getpid():
            # A fork()ed child (a torch DataLoader worker, say) inherits no
            # threads: start afresh here from the same step, with the plan's
            # edits. The parent's native loader is dropped safely (it leaks
            # its thread handles).
            self._pid = os.getpid()
            self._threads = []
            self._cond = threading.Condition()
            self._fetch_lock = threading.Lock()
            self._results = {}
            self._fetch_step = self._step
            self._native.restart(self._step)
            failed = self._schedule()
            if failed is not None:
                raise failed
            self._start_threads()

    # -- public API --------------------------------------------------------

    def __iter__(self) -> DataLoader:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise ValueError("DataLoader is closed")
        self._check_process()
        if not self._threads:
            step = self._step
            try:
                return self._produce()
            finally:
                if self._native.step > step:
                    self._step = step + 1
        with self._cond:
            while self._step not in self._results:
                if self._closed:
                    raise ValueError("DataLoader is closed")
                self._cond.wait()
            result = self._results.pop(self._step)
            self._step += 1
            self._cond.notify_all()
        if isinstance(result, _Failure):
            raise result.exc
        return result

    next = __next__

    def state_dict(self) -> dict:
        """``{"step", "seed", "mode", "batch_size"}`` (and ``"block_size"``
        for ``mode="blocked"``; for a :class:`~loaderx.mixture.Mix`
        ``"sources"``, its source names, and ``"mix_weights"``, its fixed
        weights or None for a schedule; ``"tables"`` when a source is a
        :class:`loaderx.Table`: per source its ``{"path", "version",
        "view"}``, None for a dict of streams, never storage options;
        ``"events"`` once the plan is edited: the :meth:`exclude` and
        :meth:`skip` calls in order, ``{"step", "exclude", "source"}`` and
        ``{"step", "skip"}``): ``step`` counts batches handed to the caller
        (not prefetched ones) and the steps skipped. Plain data, fit for
        ``json.dump``; the core's ``LoaderState`` writes it. With
        ``columns=``, ``"columns"``: the names delivered, in order; with a
        transform, ``"transform": True`` (a flag, not the code:
        :meth:`from_state` asks for it again)."""
        state = json.loads(self._native.state(self._step))
        if self._columns is not None:
            state["columns"] = list(self._columns)
        if self._transform is not None:
            state["transform"] = True
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from what :meth:`state_dict` returned: the next batch is
        the one of ``state["step"]``, exactly, with the state's edits
        (:meth:`exclude`, :meth:`skip`) replayed. The seed and the mode (and a
        blocked loader's ``block_size``, a mixture's source names, the
        pinned tables) must be this loader's (ValueError naming the key
        otherwise); ``batch_size`` and ``world_size`` may differ, so a run
        resumes on a different number of ranks (the union of the ranks'
        batches is the same global batch when ``batch_size * world_size``
        is). Batches already prefetched are dropped. The core checks and
        replays the state. The state's ``"columns"`` must be this loader's
        ``columns`` (absent for a loader delivering every column)."""
        text = _state_json(state)
        theirs = state.get("columns")
        if theirs != self._columns:
            raise ValueError(
                f"state['columns'] is {theirs!r}, but this loader's columns is "
                f"{self._columns!r}: a run resumes with the columns it was made with"
            )
        self._edit(lambda: self._native.load_state(text))

    def _edit(self, apply: Callable[[], None]) -> None:
        """Runs ``apply``, a native edit of the plan, with the transform
        threads stopped: on success the native loader is a new one at its
        new step (prefetched batches dropped); on error nothing changed and
        the threads go on."""
        if self._closed:
            raise ValueError("DataLoader is closed")
        self._check_process()
        self._stop_threads()
        try:
            apply()
        except BaseException:
            self._start_threads()
            raise
        self._results.clear()
        self._step = self._fetch_step = self._native.step
        self._schedule()  # a schedule that fails again fails its step's next()
        self._start_threads()

    def exclude(self, record_ids: npt.ArrayLike, *, source: str | None = None) -> None:
        """From the next step on, the records ``record_ids`` are never drawn
        (record ids of the streams or table, or of source ``source`` of a
        :class:`~loaderx.mixture.Mix`). Cyclic and blocked modes finish the
        cycle under way without them and then cover every other record
        once per cycle; sequential goes on with the next record; iid and
        weighted draw as if their weight were zero. The exclusion is kept in
        :meth:`state_dict` at this step and replayed exactly on resume, on
        any number of ranks (call it on every rank with the same ids).
        ValueError for an id outside the records, and when nothing (or, for
        cyclic and blocked, less than a global batch) would be left to
        draw; then nothing changes."""
        if self._closed:
            raise ValueError("DataLoader is closed")
        ids = index_array(record_ids, "record_ids", ids=True)
        if ids.size:
            self._edit(lambda: self._native.exclude(self._step, ids, source))

    def skip(self, n: int) -> None:
        """Steps past the next ``n`` steps without reading them: the next
        ``next()`` returns step ``step + n``. Kept in :meth:`state_dict` (its
        ``step`` counts the skipped steps) and left out of
        :meth:`provenance`."""
        if self._closed:
            raise ValueError("DataLoader is closed")
        n = _as_int("n", n, 0, (1 << 64) - 1 - self._step)
        if n:
            self._edit(lambda: self._native.skip(self._step, n))

    @property
    def events(self) -> list[dict]:
        """The plan's edits so far, in order (as :meth:`state_dict` keeps them)."""
        return self.state_dict().get("events", [])

    def indices(
        self, step: int, *, rank: int | None = None
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The records of ``step``, without reading data: the global batch
        (every rank's rows, rank after rank) or, with ``rank``, that rank's
        rows — record ids of the streams or table, as ``next()`` gathers
        them at that step (whether or not the step was skipped). For a
        :class:`~loaderx.mixture.Mix`, ``(sources, record_ids)``: each row's
        source (uint16 positions, as in the source column) and its record
        within that source."""
        if self._closed:
            raise ValueError("DataLoader is closed")
        step = _as_int("step", step, 0, (1 << 64) - 1)
        steps = np.array([step], dtype=np.uint64)
        _, _, _, records, sources = self._native.planned(steps, *self._rows(steps, rank))
        if self._mix is None:
            return records
        return sources, records

    def _rows(self, steps: np.ndarray, rank: int | None) -> tuple:
        """The native listing's ``rank`` and ``schedule`` arguments."""
        if rank is not None:
            rank = _as_int("rank", rank, 0, self._world_size - 1)
        schedule = None
        if self._mix is not None and self._mix.scheduled and steps.size:
            top = int(steps.max())
            schedule = np.array([self._mix._row(k) for k in range(top + 1)], dtype=np.float64)
        return rank, schedule

    def provenance(self, steps: range | int | npt.ArrayLike, *, rank: int | None = None) -> Any:
        """Which records each of ``steps`` gave, as a ``pyarrow.Table``:
        ``step`` (uint64), ``rank`` and ``row`` (uint32: the row within
        that rank's batch), ``source`` for a :class:`~loaderx.mixture.Mix`
        (the source's name, dictionary-encoded) and ``record_id`` (uint64,
        the record id of the table or streams, or within the source), one
        row per record, in step, rank and row order. ``steps`` is a
        ``range``, an int or an array of ints; steps that :meth:`skip`
        stepped past gave nothing and are left out. Every rank's rows unless
        ``rank`` is given. Computed natively, no data read; join it to the
        table with :func:`loaderx.sql` on ``record_id``."""
        if self._closed:
            raise ValueError("DataLoader is closed")
        pa = require_pyarrow()
        if isinstance(steps, range) and steps.step == 1 and steps.start >= 0:
            arr = np.arange(steps.start, max(steps.start, steps.stop), dtype=np.uint64)
        else:
            arr = index_array(np.atleast_1d(steps), "steps", ids=True)
        step_col, ranks, rows, records, sources = self._native.provenance(
            arr, *self._rows(arr, rank)
        )
        columns = {
            "step": pa.array(step_col, pa.uint64()),
            "rank": pa.array(ranks, pa.uint32()),
            "row": pa.array(rows, pa.uint32()),
        }
        if sources is not None:
            columns["source"] = pa.DictionaryArray.from_arrays(
                pa.array(sources, pa.uint16()), pa.array(self._mix.names, pa.string())
            )
        columns["record_id"] = pa.array(records, pa.uint64())
        if self._decode:
            from .images import _provenance

            columns.update(_provenance(self, step_col, records, sources))
        return pa.table(columns)

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], *, storage_options: dict | None = None, **kwargs: Any
    ) -> DataLoader:
        """A loader over the tables :meth:`state_dict` pinned, reopened at
        the versions and views it read (local or remote, with
        ``storage_options``), continuing at the saved step bit-exactly with
        the state's edits.

        What the state holds is restored from it: the seed, the mode, the
        block size, the batch size, the decode settings (``decode=``), the
        columns (``columns=``), a :class:`~loaderx.mixture.Mix`'s source
        names and fixed weights, and the step. ``kwargs`` may give them
        again: one that disagrees with the state raises ``ValueError``
        naming the argument and both values (``start_step`` is the state's
        ``step``). The exception is ``batch_size`` together with
        ``world_size``: a resume on another number of ranks keeps the
        global batch by changing the per-rank batch (see
        :meth:`load_state_dict`).

        The transform is code, not state: the state records only whether
        the run had one, and a run that had one must be given
        ``transform=`` again (ValueError otherwise). So is a schedule of a Mix
        (``schedule=``), and the other arguments that are not kept
        (``output``, ``rank``, ``world_size``, ``workers``, ``prefetch``,
        ``raw``, a weighted run's ``weights``) go in ``kwargs`` as well;
        ``source_column=`` as in :class:`~loaderx.mixture.Mix`. The loader
        closes the tables it opened when it closes. ValueError for a state
        with a source that is not a table (rebuild the loader and call
        :meth:`load_state_dict`)."""
        from .images import Image
        from .table import open_table

        # The core checks the state (keys, types, events) and writes it out;
        # the keys it does not keep are the Python loader's own.
        if isinstance(state, Mapping):
            columns = state.get("columns")
            had_transform = state.get("transform")
        else:
            columns = had_transform = None
        state = json.loads(_native.parse_state(_state_json(state)))
        tables = state.get("tables")
        if not tables or any(t is None for t in tables):
            raise ValueError(
                "state pins no table for some source (a loader over a dict of streams): build "
                "the loader and call load_state_dict"
            )
        if had_transform is not None and not isinstance(had_transform, bool):
            raise ValueError(f"state['transform'] must be a bool, got {had_transform!r}")
        transform = kwargs.get("transform")
        if had_transform and transform is None:
            raise ValueError(
                "the saved run had a transform, and a state keeps no code: pass transform= "
                "again (the same function) to resume it"
            )
        cls._agree(state, columns, kwargs)
        names = state.get("sources")
        schedule = kwargs.pop("schedule", None)
        source_column = kwargs.pop("source_column", "source")
        if names is None and (schedule is not None or source_column != "source"):
            raise ValueError("schedule and source_column apply to a Mix's state only")
        if names is not None and len(names) != len(tables):
            raise ValueError(
                f"state['sources'] names {len(names)} sources but state['tables'] pins "
                f"{len(tables)}"
            )
        weights = state.get("mix_weights")
        if names is not None and (weights is None) == (schedule is None):
            raise ValueError(
                "state is a Mix's with a schedule: give the same schedule again as schedule="
                if weights is None
                else "state holds the Mix's fixed weights: schedule= does not apply"
            )
        decode = state.get("decode")
        if decode and kwargs.get("decode") is None:
            kwargs["decode"] = {
                name: Image._from_settings(name, settings) for name, settings in decode.items()
            }
        opened = []
        try:
            for pin in tables:
                # A view names its own version (the state's check compares them).
                version = None if pin["view"] is not None else pin["version"]
                opened.append(
                    open_table(
                        pin["path"],
                        version=version,
                        view=pin["view"],
                        storage_options=storage_options,
                    )
                )
            if names is None:
                source = opened[0]
            else:
                source = Mix(
                    dict(zip(names, opened)),
                    schedule if schedule is not None else weights,
                    source_column=source_column,
                )
            kwargs.setdefault("batch_size", state["batch_size"])
            kwargs.setdefault("columns", columns)
            kwargs.update(
                mode=state["mode"],
                seed=state["seed"],
                start_step=state["step"],
                block_size=state.get("block_size"),
            )
            loader = cls(source, **kwargs)
            if columns is not None:
                state["columns"] = columns
            try:
                loader.load_state_dict(state)
            except BaseException:
                loader.close()
                raise
        except BaseException:
            for table in opened:
                table.close()
            raise
        loader._owned = opened
        return loader

    @staticmethod
    def _agree(state: dict, columns: list | None, kwargs: dict) -> None:
        """Checks that each of ``kwargs`` the state also holds says what the
        state says (ValueError naming the argument and both values)."""

        def disagree(arg, given, theirs, key=None):
            raise ValueError(
                f"{arg} comes from the state: state[{key or arg!r}] is {theirs!r}, got "
                f"{arg}={given!r}"
            )

        if "seed" in kwargs:
            given = _as_int("seed", kwargs["seed"], 0, (1 << 64) - 1)
            if given != state["seed"]:
                disagree("seed", kwargs["seed"], state["seed"])
        if "mode" in kwargs:
            if _as_mode(kwargs["mode"]).value != state["mode"]:
                disagree("mode", kwargs["mode"], state["mode"])
        if "block_size" in kwargs:
            given = kwargs["block_size"]
            if given is not None:
                given = _as_int("block_size", given, 1)
            if given != state.get("block_size"):
                disagree("block_size", kwargs["block_size"], state.get("block_size"))
        if "start_step" in kwargs:
            given = _as_int("start_step", kwargs["start_step"], 0, (1 << 64) - 1)
            if given != state["step"]:
                disagree("start_step", kwargs["start_step"], state["step"], "step")
        if "batch_size" in kwargs and "world_size" not in kwargs:
            given = _as_int("batch_size", kwargs["batch_size"], 1)
            if given != state["batch_size"]:
                disagree("batch_size", kwargs["batch_size"], state["batch_size"])
        if "columns" in kwargs:
            given = kwargs["columns"]
            if (None if given is None else list(given)) != columns:
                disagree("columns", given, columns)
        if kwargs.get("decode") is not None:
            from .images import _decode_specs

            _decode_specs(kwargs["decode"])  # the TypeError for what is not an Image
            given = {name: image._settings() for name, image in kwargs["decode"].items()}
            # The state's JSON numbers are floats where the settings' are.
            if json.loads(json.dumps(given)) != state.get("decode", {}):
                disagree("decode", kwargs["decode"], state.get("decode", {}))

    @property
    def step(self) -> int:
        """The step the next ``next()`` returns."""
        return self._step

    def close(self) -> None:
        """Stops prefetching and joins every thread. Idempotent; the streams
        stay open (they belong to the caller)."""
        if self._closed:
            return
        self._closed = True
        self._shutdown()
        owned, self._owned = getattr(self, "_owned", []), []
        for table in owned:
            table.close()

    def _shutdown(self) -> None:
        """Stops the native prefetcher and joins the transform threads."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._native.close()
        if self._pid == os.getpid():
            for t in self._threads:
                t.join()
        self._threads = []
        self._results.clear()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"step={self._step}"
        what = (
            f"streams={self._names}"
            if self._mix is None
            else f"mix={self._mix.names}, columns={self._names}"
        )
        return (
            f"DataLoader({what}, batch_size={self._batch_size}, "
            f"mode={self._mode.value!r}, seed={self._seed}, "
            + ("" if self._block_size is None else f"block_size={self._block_size}, ")
            + f"{state})"
        )
