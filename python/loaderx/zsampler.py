"""Zsampler: step-addressed index batches.

Every batch is a pure function of ``(n, batch_size, mode, seed, step)``, so a
run resumes exactly by seeking to a step — there is no epoch to track.

>>> from loaderx.zsampler import Sampler
>>> s = Sampler(1_000_000, 256, Sampler.Mode.IID, seed=42)
>>> batch = s.next()
>>> batch.shape, batch.dtype
((256,), dtype('int64'))
>>> bool((s.at(0) == batch).all()), s.step
(True, 1)

Modes:

* ``SEQUENTIAL`` — element ``j`` of step ``k`` is ``(k*B + j) mod n``: a
  sliding window over a circular index space.
* ``IID`` — uniform with replacement, unbiased (Lemire's method with
  rejection) from a counter-based generator keyed by ``(seed, step)``.
* ``CYCLIC`` — without replacement: cycle ``c = k // (n // B)`` walks a fresh
  keyed Feistel permutation of ``0..n`` (cycle-walked from the next power of
  two), so each cycle visits ``n - n % B`` distinct records and the remainder
  is dropped (a different one each cycle). ``B > n`` raises ValueError.
* ``BLOCKED`` — cycles like ``CYCLIC`` (same length, same dropped
  remainder), but each batch draws from a few blocks of ``block_size``
  consecutive records: every cycle shuffles the order of the blocks, then the
  records within windows of ``max(2, ceil(B / block_size))`` blocks, and
  rotates the whole by a keyed offset. A batch touches at most two windows,
  so a reader whose cache holds a few blocks fetches each block about once
  per cycle. ``block_size`` is required in this mode and refused in the
  others.
* ``WEIGHTED`` — with replacement, record ``i`` drawn with probability
  ``weights[i] / sum(weights)`` (Walker's alias method, built once; one draw
  is integer arithmetic). ``weights`` (one finite, non-negative number per
  record, not all zero) is required in this mode and refused in the others.

>>> s = Sampler(1000, 10, "blocked", seed=3, block_size=100)
>>> cycle = np.concatenate([s.at(k) for k in range(100)])
>>> bool((np.sort(cycle) == np.arange(1000)).all())
True
>>> len(np.unique(s.at(0) // 100)) <= 4
True
>>> w = Sampler(4, 10_000, "weighted", seed=0, weights=[1, 0, 3, 0])
>>> np.bincount(w.at(0), minlength=4)[[1, 3]].tolist()
[0, 0]
"""

from __future__ import annotations

import enum
import operator

import numpy as np
import numpy.typing as npt

from . import _native

__all__ = ["Sampler", "Mode"]

_MAX_N = 1 << 63
_MAX_SEED = (1 << 64) - 1


class Mode(enum.Enum):
    """Sampling modes (also accepted by name: ``"sequential"``, ``"iid"``,
    ``"cyclic"``, ``"blocked"``, ``"weighted"``)."""

    SEQUENTIAL = "sequential"
    IID = "iid"
    CYCLIC = "cyclic"
    BLOCKED = "blocked"
    WEIGHTED = "weighted"


def _as_mode(mode) -> Mode:
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, str):
        try:
            return Mode(mode.lower())
        except ValueError:
            pass
    raise ValueError(
        "mode must be 'sequential', 'iid' or 'cyclic', or 'blocked' with a block_size, "
        f"or 'weighted' with weights (or a Sampler.Mode), got {mode!r}"
    )


def _as_int(name: str, value, lo: int, hi: int | None = None) -> int:
    """``value`` as an int in ``lo..hi`` (no upper bound when ``hi`` is None)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if v < lo or (hi is not None and v > hi):
        bound = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ValueError(f"{name} must be {bound}, got {v}")
    return v


def check_block_size(mode: Mode, block_size) -> int | None:
    """``block_size`` checked against ``mode``: an int ``>= 1`` for
    ``"blocked"``, None for the other modes (ValueError naming it otherwise)."""
    if mode is Mode.BLOCKED:
        if block_size is None:
            raise ValueError(
                "block_size must be given for mode 'blocked' (records per block, >= 1), got None"
            )
        # A block larger than the index space is one block: clamp.
        return min(_as_int("block_size", block_size, 1), _MAX_N)
    if block_size is not None:
        raise ValueError(
            f"block_size applies only to mode 'blocked', but mode is {mode.value!r} "
            f"(got block_size={block_size!r})"
        )
    return None


def check_weights(mode: Mode, weights) -> np.ndarray | None:
    """``weights`` checked against ``mode``: a 1-D float64 array for
    ``"weighted"`` (a DenseStore of scalars is read whole), None for the other
    modes (ValueError or TypeError naming it otherwise). Its values and length
    are checked natively."""
    if mode is not Mode.WEIGHTED:
        if weights is not None:
            raise ValueError(f"weights apply only to mode 'weighted', but mode is {mode.value!r}")
        return None
    if weights is None:
        raise ValueError(
            "weights must be given for mode 'weighted' (one weight per record), got None"
        )
    if hasattr(weights, "_kind") and hasattr(weights, "dtype"):  # a store (a table column)
        if weights._kind != "dense" or getattr(weights, "item_shape", None) != ():
            raise ValueError("weights must be a dense store of scalars (one per record)")
        weights = weights[:]
    arr = np.asarray(weights)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"weights must be numbers, got an array of {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"weights must be 1-D (one weight per record), got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float64)


class Sampler:
    """Index batches over ``0..n``: ``next()``, ``at(step)`` and a settable
    ``step``. See the module docstring for the modes; ``block_size`` (records
    per block) is for ``"blocked"`` only, ``weights`` (one per record) for
    ``"weighted"`` only."""

    Mode = Mode

    def __init__(
        self,
        n: int,
        batch_size: int,
        mode: Mode | str,
        seed: int = 0,
        *,
        block_size: int | None = None,
        weights: npt.ArrayLike | None = None,
    ) -> None:
        n = _as_int("n", n, 1, _MAX_N)
        batch_size = _as_int("batch_size", batch_size, 1, 1 << 40)
        mode = _as_mode(mode)
        seed = _as_int("seed", seed, 0, _MAX_SEED)
        block_size = check_block_size(mode, block_size)
        weights = check_weights(mode, weights)
        self._mode = mode
        self._native = _native.Sampler(n, batch_size, mode.value, seed, block_size, weights)

    def next(self) -> np.ndarray:
        """The int64 batch of the current step; then ``step += 1``."""
        return self._native.next()

    def at(self, step: int) -> np.ndarray:
        """The batch of ``step`` (pure: the current step is unchanged)."""
        return self._native.at(_as_int("step", step, 0, _MAX_SEED))

    @property
    def step(self) -> int:
        return self._native.step

    @step.setter
    def step(self, value: int) -> None:
        self._native.step = _as_int("step", value, 0, _MAX_SEED)

    @property
    def n(self) -> int:
        return self._native.n

    @property
    def batch_size(self) -> int:
        return self._native.batch_size

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def seed(self) -> int:
        return self._native.seed

    @property
    def block_size(self) -> int | None:
        """Records per block (``"blocked"`` only; None otherwise)."""
        return self._native.block_size

    def __repr__(self) -> str:
        blocks = "" if self.block_size is None else f", block_size={self.block_size}"
        return (
            f"Sampler(n={self.n}, batch_size={self.batch_size}, "
            f"mode=Sampler.Mode.{self._mode.name}, seed={self.seed}{blocks}, step={self.step})"
        )
