"""Exceptions raised by stores (re-exported by :mod:`loaderx.zrecord`)."""

__all__ = ["StoreBusy", "Corrupted"]


class StoreBusy(OSError):
    """Another handle, in this or another process, holds the store's lock.

    A writer holds a store alone: ``DenseStore.open(path)`` takes a
    non-blocking exclusive lock on ``meta.zr`` for the handle's lifetime.
    Read-only handles (``open(path, readonly=True)``) take a shared lock:
    they coexist with each other, in any processes, but not with a writer.
    Close the other handle, open read-only, or share one handle (a dict of
    open stores can feed any number of loaders and SQL queries in one
    process).
    """


class Corrupted(OSError):
    """A store on disk breaks an invariant of the format.

    The message names the file (``meta.zr``, ``data.zr`` or ``dict.zr``) and
    the broken invariant. Stores are rebuildable training data: rebuild it
    from its source.
    """


StoreBusy.__module__ = "loaderx.zrecord"
Corrupted.__module__ = "loaderx.zrecord"
