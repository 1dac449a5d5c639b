"""Normalisation of record keys (int, sequence, array, slice, bool mask)."""

from __future__ import annotations

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max

KEY_FORMS = "an int, a tuple or list of ints, an integer array, a slice or a boolean mask"


def normalize(key, length) -> tuple[int | np.ndarray, bool]:
    """Turns ``key`` into ``(index, is_scalar)``.

    ``length`` is a zero-argument callable returning the store length; it is
    only called for forms that need it (slices and masks). Scalars are range
    checked here; index arrays are range checked by the native gather.
    """
    if isinstance(key, (bool, np.bool_)):
        raise TypeError(f"key must be {KEY_FORMS}, got bool")
    if isinstance(key, (int, np.integer)):
        k = int(key)
        n = length()
        if k < 0 or k >= n:
            raise IndexError(f"index {k} is out of range for a store of length {n}")
        return k, True
    if isinstance(key, slice):
        return np.arange(*key.indices(length()), dtype=np.int64), False
    if isinstance(key, (float, str, bytes, dict, set)) or key is None:
        raise TypeError(f"key must be {KEY_FORMS}, got {type(key).__name__}")
    try:
        arr = key if isinstance(key, np.ndarray) else np.asarray(key)
    except Exception as exc:  # noqa: BLE001 - any conversion failure is a bad key
        raise TypeError(f"key must be {KEY_FORMS}, got {type(key).__name__}") from exc
    if arr.ndim == 0:
        if arr.dtype.kind in "iu":
            return normalize(int(arr), length)
        raise TypeError(f"key must be {KEY_FORMS}, got a 0-d array of dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"index arrays must be one-dimensional, got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b":
        n = length()
        if arr.shape[0] != n:
            raise IndexError(
                f"boolean mask has length {arr.shape[0]}, expected {n} (the store length)"
            )
        return np.flatnonzero(arr).astype(np.int64, copy=False), False
    if kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > _INT64_MAX:
        bad = int(arr.max())
        raise IndexError(f"index {bad} is out of range for a store of length {length()}")
    if kind in "iu":
        return np.ascontiguousarray(arr, dtype=np.int64), False
    if arr.size == 0:
        return np.empty(0, dtype=np.int64), False
    raise TypeError(f"key must be {KEY_FORMS}, got an array of dtype {arr.dtype}")
