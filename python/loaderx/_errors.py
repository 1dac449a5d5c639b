"""Exceptions raised by stores and tables (re-exported by :mod:`loaderx.zrecord`
and :mod:`loaderx`).

Both are created by the native extension, which raises them, and are named
``loaderx.zrecord.StoreBusy`` and ``loaderx.zrecord.Corrupted``; both derive
from ``OSError``.

``CommitConflict`` (``loaderx.CommitConflict``, a ``RuntimeError``) is
raised when a concurrent commit to a table makes a commit impossible.
"""

from ._native import CommitConflict, Corrupted, StoreBusy

__all__ = ["StoreBusy", "Corrupted", "CommitConflict"]
