"""Exceptions raised by stores (re-exported by :mod:`loaderx.zrecord`)."""

__all__ = ["StoreBusy", "Corrupted"]


class StoreBusy(OSError):
    """Another handle, in this or another process, holds the store's lock.

    A store is opened by one handle at a time: ``DenseStore.open`` takes a
    non-blocking exclusive lock on ``meta.zr`` for the handle's lifetime.
    Close the other handle, or share it (a dict of open stores can feed any
    number of loaders and SQL queries in one process).
    """


class Corrupted(OSError):
    """A store on disk breaks an invariant of the format.

    The message names the file (``meta.zr``, ``data.zr`` or ``dict.zr``) and
    the broken invariant. Stores are rebuildable training data: rebuild it
    from its source.
    """


StoreBusy.__module__ = "loaderx.zrecord"
Corrupted.__module__ = "loaderx.zrecord"
