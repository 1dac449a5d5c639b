"""Utilities: dictionary training for the ``zstd_dict`` codec."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from . import _native
from .zrecord import DenseStore, RaggedStore

__all__ = ["train_dict"]


def _sample_array(arr: np.ndarray, budget: int):
    if arr.ndim == 0:
        raise ValueError("source must hold records along axis 0, got a 0-d array")
    n = arr.shape[0]
    record = arr[0].nbytes if n else 0
    if n == 0 or record == 0:
        return b"", []
    stride = max(1, -(-n * record // budget))
    picked = np.arange(0, n, stride)[: max(1, budget // record)]
    sample = np.ascontiguousarray(arr[picked])
    return sample.tobytes(), [record] * len(picked)


def _sample_iterable(records, budget: int):
    # Strided sampling of a stream of unknown length: keep every stride-th
    # record; when the kept bytes exceed the budget, double the stride.
    kept: list[tuple[int, np.ndarray]] = []
    total = 0
    stride = 1
    for i, item in enumerate(records):
        if i % stride:
            continue
        a = np.ascontiguousarray(item)
        kept.append((i, a))
        total += a.nbytes
        while total > budget and len(kept) > 1:
            stride *= 2
            kept = [(j, x) for j, x in kept if j % stride == 0]
            total = sum(x.nbytes for _, x in kept)
    return b"".join(x.tobytes() for _, x in kept), [x.nbytes for _, x in kept]


def train_dict(
    source: np.ndarray | Iterable[np.ndarray] | DenseStore | RaggedStore, tier: str = "balanced"
) -> bytes:
    """Trains a zstd dictionary for ``codec="zstd_dict"`` stores.

    ``source`` is an ndarray (records along axis 0), an iterable of arrays or
    an open :class:`~loaderx.zrecord.DenseStore` / ``RaggedStore``. The
    dictionary trains on a strided sample of the records within the tier's
    byte budget (``DICT_TIERS[tier].sample_bytes``) and is at most the tier's
    size and a tenth of the sample. Train once on the settled data, then pass
    the bytes as ``dict_bytes`` to ``create``.

    Raises ValueError for an unknown tier or a sample too small to train on
    (fewer than 8 records or 1024 bytes).
    """
    if not isinstance(tier, str):
        raise ValueError(f"tier must be one of 'fast', 'balanced', 'max', got {tier!r}")
    # The tiers, the training and its minimums live in the core (loaderx::dict).
    _, budget = _native.dict_tier(tier)
    if isinstance(source, (DenseStore, RaggedStore)):
        samples, sizes = source._drain().dict_sample(budget)
    elif isinstance(source, np.ndarray):
        samples, sizes = _sample_array(source, budget)
    elif hasattr(source, "__iter__") and not isinstance(source, (str, bytes)):
        samples, sizes = _sample_iterable(source, budget)
    else:
        raise TypeError(
            "source must be an ndarray, an iterable of arrays or a store, "
            f"got {type(source).__name__}"
        )
    return _native.train_dict(samples, sizes, tier)
