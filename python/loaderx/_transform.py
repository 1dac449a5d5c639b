"""What a two-parameter transform receives: the batch's step, rank, rows
and random generators keyed by them (:class:`TransformInfo`), and the
per-record seeds behind them (:func:`record_seeds`). Re-exported by
:mod:`loaderx.dataloader`."""

from __future__ import annotations

import inspect
import operator

import numpy as np
import numpy.typing as npt

from . import _native
from .zsampler import _as_int

__all__ = ["TransformInfo", "record_seeds"]

_MASK = (1 << 64) - 1


def record_seeds(seed: int, step: int, indices: npt.ArrayLike) -> np.ndarray:
    """One uint64 per record index: ``mix64(key + (i + 1) * G)`` with
    ``key = mix64(mix64(seed ^ D) + step * G)`` (SplitMix64's finalizer and
    gamma, ``D`` a fixed domain constant), so it is a pure function of
    ``(seed, step, i)``. ``np.random.default_rng(s)`` of one is that record's
    generator at that step. (A mixture's records use their source's seed,
    :func:`loaderx.mixture.source_seed`, as ``seed``.) Computed by the
    native core (``loaderx::sampler::record_seeds``), one call per array."""
    seed = _as_int("seed", seed, 0, _MASK)
    return _row_record_seeds(np.array([seed], dtype=np.uint64), step, indices)


def _row_record_seeds(seeds: np.ndarray, step: int, indices: npt.ArrayLike) -> np.ndarray:
    """:func:`record_seeds` with one seed, or a seed per row (uint64)."""
    idx = np.asarray(indices, dtype=np.uint64)
    seeds = np.ascontiguousarray(seeds, dtype=np.uint64).reshape(-1)
    # The step wraps modulo 2^64, as the core's arithmetic does.
    step = operator.index(step) & _MASK
    out = _native.record_seeds(seeds, step, np.ascontiguousarray(idx).reshape(-1))
    return out.reshape(idx.shape)


class TransformInfo:
    """What a two-parameter transform receives beside the batch.

    ``step`` and ``rank`` are the batch's; ``indices`` the global record
    index of each row (uint64, after ``indices=`` mapping); ``rng`` a
    ``numpy.random.Generator`` on Philox keyed by ``(seed, step, rank)``;
    ``record_seeds`` one uint64 per row, a pure function of ``(seed, step,
    record index)`` (see :func:`record_seeds`). Each is the same on every
    run, resume and worker count.

    For a :class:`~loaderx.mixture.Mix`, ``indices`` are each row's record within
    its source, ``sources`` each row's source (uint16 positions, as in the
    source column; None otherwise), and ``record_seeds`` a pure function of
    ``(seed, step, source name, record)``: ``record_seeds(source_seed(seed,
    name), step, record)``."""

    __slots__ = (
        "step",
        "rank",
        "indices",
        "sources",
        "_seed",
        "_seeds",
        "_rng",
        "_record_seeds",
    )

    def __init__(
        self,
        step: int,
        rank: int,
        seed: int,
        indices: np.ndarray,
        sources: np.ndarray | None = None,
        source_seeds: np.ndarray | None = None,
    ) -> None:
        self.step = step
        self.rank = rank
        self.indices = indices
        self.sources = sources
        self._seed = seed
        self._seeds = source_seeds
        self._rng = None
        self._record_seeds = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            entropy = np.random.SeedSequence([self._seed, self.step, self.rank])
            self._rng = np.random.Generator(np.random.Philox(entropy))
        return self._rng

    @property
    def record_seeds(self) -> np.ndarray:
        if self._record_seeds is None:
            if self.sources is None or self._seeds is None:
                self._record_seeds = record_seeds(self._seed, self.step, self.indices)
            else:
                seeds = self._seeds[self.sources.astype(np.intp)]
                self._record_seeds = _row_record_seeds(seeds, self.step, self.indices)
        return self._record_seeds

    def __repr__(self) -> str:
        return f"TransformInfo(step={self.step}, rank={self.rank}, rows={len(self.indices)})"


def _takes_info(transform) -> bool:
    """Whether ``transform`` has two positional parameters (batch, info)."""
    try:
        params = inspect.signature(transform).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return False
    return len(positional) >= 2 and all(
        p.default is inspect.Parameter.empty for p in positional[:2]
    )
