"""Sequence packing: :func:`loaderx.pack`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _native
from .zsampler import _as_int

__all__ = ["pack"]

_INTEGERS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


def pack(
    records: Sequence,
    seq_len: int,
    rows: int | None = None,
    *,
    pad: int = 0,
    max_segments: int | None = None,
    split: bool = False,
) -> dict:
    """Packs token ``records`` (1-D integer arrays of one dtype, e.g. a
    ragged column of a loader batch) into rows of ``seq_len`` tokens, first
    fit decreasing, in one native call.

    Returns ``{"tokens", "segment_ids", "positions"}``, each of shape
    ``(rows, seq_len)`` (tokens in the records' dtype, the others int32),
    and ``"dropped"``, the tokens left out. ``segment_ids`` numbers the
    records of a row from 1 (0 is padding, whose tokens are ``pad``);
    ``positions`` restarts at 0 in each segment. Records go longest first
    into the first row with room; ``rows=None`` opens as many rows as they
    need, a fixed ``rows`` drops what does not fit, and ``split=True`` cuts
    a record across the rows with room instead (and a record longer than
    ``seq_len`` across new rows). ``max_segments`` caps the segments per row.
    A step's packing depends on its batch only, so a loader stays stateless
    with ``pack`` in its transform.

    >>> import numpy as np, loaderx
    >>> out = loaderx.pack([np.array([5, 6, 7]), np.array([8, 9]), np.array([4])], 4)
    >>> out["tokens"].tolist(), out["segment_ids"].tolist(), out["dropped"]
    ([[5, 6, 7, 4], [8, 9, 0, 0]], [[1, 1, 1, 2], [1, 1, 0, 0]], 0)
    >>> out["positions"].tolist()
    [[0, 1, 2, 0], [0, 1, 0, 0]]
    """
    if isinstance(records, np.ndarray) and records.dtype != object:
        raise TypeError(
            "records must be a sequence of 1-D arrays (one per record), got one ndarray; "
            "pass list(array) for its rows"
        )
    if not isinstance(records, (list, tuple, np.ndarray)):
        raise TypeError(f"records must be a list of 1-D arrays, got {type(records).__name__}")
    seq_len = _as_int("seq_len", seq_len, 1, (1 << 31) - 1)
    if rows is not None:
        rows = _as_int("rows", rows, 0)
    if max_segments is not None:
        max_segments = _as_int("max_segments", max_segments, 1)
    if not isinstance(split, (bool, np.bool_)):
        raise TypeError(f"split must be a bool, got {type(split).__name__}")
    records = list(records)
    first = records[0] if records else np.zeros(0, np.int64)
    dtype = first.dtype if isinstance(first, np.ndarray) else np.asarray(first).dtype
    if dtype.name not in _INTEGERS:
        raise TypeError(f"records must hold integer tokens, got dtype {dtype}")
    if isinstance(pad, bool) or not isinstance(pad, (int, np.integer)):
        raise TypeError(f"pad must be an int, got {type(pad).__name__}")
    info = np.iinfo(dtype)
    if not info.min <= int(pad) <= info.max:
        raise ValueError(
            f"pad must fit the records' dtype {dtype} ({info.min}..{info.max}), got {pad}"
        )
    args = (dtype.name, seq_len, rows, int(pad), max_segments, bool(split))
    try:
        # The native call checks every record's type itself: no Python per
        # record when they are arrays of one dtype (a loader batch).
        return _native.pack(records, *args)
    except (TypeError, ValueError):
        pass
    records = [np.ascontiguousarray(r) for r in records]
    for i, r in enumerate(records):
        if r.dtype != dtype or r.ndim != 1:
            raise TypeError(
                f"records must be 1-D arrays of one dtype ({dtype}), but record {i} is "
                f"{r.ndim}-D {r.dtype}"
            )
    return _native.pack(records, *args)
