"""A table as a PyTorch map-style dataset (``pip install 'loaderx[torch]'``).

:class:`Dataset` is a map-style dataset, what ``torch.utils.data.DataLoader``
takes, over a table (:func:`loaderx.open_table`) or a dict of equal-length
streams:

* ``len(ds)``; ``ds[i]`` is one record as ``{column: value}`` (a NumPy array
  or scalar, ``str`` for a text column, ``bytes`` for a binary one);
* ``ds.__getitems__(indices)`` reads a whole batch with one gather per
  column and returns the records as a list of ``{column: value}``, the form
  ``torch.utils.data.default_collate`` stacks. Torch's ``DataLoader`` calls
  it, instead of ``ds[i]`` once per record, whenever it batches
  (``batch_size=`` or ``batch_sampler=``);
* ``ds[indices]`` (a list or array of ints) reads a batch as ``{column:
  batch}``: with ``DataLoader(ds, sampler=BatchSampler(...),
  batch_size=None)`` torch hands each batch of indices to it and converts
  the arrays to tensors without collating record by record.

It works in ``DataLoader`` worker processes: forked workers read the
parent's open stores (a forked child reads them without locks), and under
``multiprocessing_context="spawn"`` (or ``forkserver``) the dataset pickles
by path and each worker reopens the table (or streams) read-only, so the
parent should hold them read-only too (:func:`loaderx.open_table`'s
default). Ragged columns give one array per record, which ``default_collate``
cannot stack unless they have one shape: pass a ``collate_fn`` (padding, or
:func:`loaderx.pack`) for those.

To feed Lightning (or any loop that checkpoints its data), hand it a
:class:`loaderx.dataloader.DataLoader` rather than a torch ``DataLoader``:
it has ``state_dict()`` and ``load_state_dict()``, which Lightning's Trainer
saves in its checkpoints and restores on resume; :func:`as_tensors` as its
``transform`` turns the batches into tensors. Wrapped in :class:`Epochs` it
also has a length, so that Lightning does not read a batch ahead of the
training step (which it does for iterables without one, and which would
put the saved step one past the steps trained). See the loader guide.

This module imports torch only when :func:`as_tensors` runs: the dataset
itself hands out NumPy arrays, which torch's collation turns into tensors.

>>> import numpy as np, os, tempfile, torch, loaderx
>>> from loaderx.torch import Dataset
>>> path = os.path.join(tempfile.mkdtemp(), "x")
>>> with loaderx.DenseStore.create(path, np.float32, (2,)) as s:
...     s.append(np.arange(20, dtype=np.float32).reshape(10, 2))
>>> with loaderx.DenseStore.open(path, readonly=True) as x:
...     ds = Dataset({"x": x})
...     batches = list(torch.utils.data.DataLoader(ds, batch_size=4))
...     len(ds), ds[3]["x"].tolist(), batches[0]["x"].shape, len(batches)
(10, [6.0, 7.0], torch.Size([4, 2]), 3)
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._source import Records
from ._streams import require

__all__ = ["Dataset", "Epochs", "as_tensors"]


class Dataset(Records):
    """A map-style dataset for torch over ``source``: a table or a ``{name:
    stream}`` dict of equal length. ``columns`` selects columns (None: all,
    in the source's order)."""

    _NAME = "loaderx.torch.Dataset"
    _NOUN = "dataset"

    def __getitem__(self, index: int | Sequence[int] | np.ndarray) -> dict[str, Any]:
        """One record (``index`` an int, negative from the end) or a batch
        (``index`` a sequence of ints: ``{column: batch}``)."""
        try:
            i = operator.index(index)
        except TypeError:
            if isinstance(index, (str, bytes)) or not hasattr(index, "__len__"):
                raise TypeError(
                    f"index must be an int or a sequence of ints, got {type(index).__name__}"
                ) from None
            return self._batch(self._keys(index, "indices"))
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise self._out_of_range(index)
        return self._record(i)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The records at ``indices``, one gather per column, as the list of
        ``{column: value}`` that ``default_collate`` stacks."""
        return self._record_list(self._keys(indices, "indices"))


class Epochs:
    """An endless :class:`~loaderx.dataloader.DataLoader` as passes of
    ``steps`` batches: each ``iter()`` yields the loader's next ``steps``
    batches (continuing where the previous pass stopped), ``len()`` is
    ``steps``, and ``state_dict()`` / ``load_state_dict()`` are the
    loader's. This is the shape of a train loader Lightning's Trainer
    expects: epochs of known length, and a state it saves and restores.

    >>> import numpy as np, os, tempfile, loaderx
    >>> from loaderx.dataloader import DataLoader
    >>> path = os.path.join(tempfile.mkdtemp(), "x")
    >>> with loaderx.DenseStore.create(path, np.int64, ()) as s:
    ...     s.append(np.arange(100))
    >>> with loaderx.DenseStore.open(path, readonly=True) as x:
    ...     with DataLoader({"x": x}, batch_size=10, seed=0) as loader:
    ...         epochs = Epochs(loader, steps=3)
    ...         first, second = list(epochs), list(epochs)
    ...         len(epochs), len(first), epochs.state_dict()["step"]
    (3, 3, 6)
    """

    def __init__(self, loader: Any, steps: int) -> None:
        for name in ("state_dict", "load_state_dict", "__next__"):
            if not callable(getattr(loader, name, None)):
                raise TypeError(
                    f"loader must be a loaderx DataLoader (with {name}), "
                    f"got {type(loader).__name__}"
                )
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an int >= 1 (batches per epoch), got {steps!r}")
        self.loader = loader
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Any:
        loader = self.loader
        for _ in range(self.steps):
            yield next(loader)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state (its ``step`` counts the batches handed out)."""
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues the loader from ``state``."""
        self.loader.load_state_dict(state)

    def __repr__(self) -> str:
        return f"Epochs({self.loader!r}, steps={self.steps})"


def as_tensors(batch: Any, *, pin_memory: bool = False) -> Any:
    """A loaderx batch with its NumPy arrays as torch tensors, sharing their
    memory (``torch.from_numpy``): a dict's values and a list's items are
    converted in turn; strings, bytes and None stay as they are. Use it as
    a :class:`~loaderx.dataloader.DataLoader` ``transform``.

    ``pin_memory=True`` puts each tensor in page-locked memory instead (one
    copy per array, as torch's own ``DataLoader(pin_memory=True)`` makes),
    so that ``.to("cuda", non_blocking=True)`` overlaps the copy with the
    GPU's work. Give it as ``functools.partial(as_tensors,
    pin_memory=True)`` with ``workers`` of 1 or more, so that the copy runs
    on the loader's transform threads, not in the training loop. It needs
    an accelerator torch can pin memory for (``ValueError`` otherwise).

    >>> import numpy as np
    >>> out = as_tensors({"x": np.arange(3), "tok": [np.ones(2)], "text": ["a"]})
    >>> out["x"], out["tok"][0].dtype, out["text"]
    (tensor([0, 1, 2]), torch.float64, ['a'])
    """
    torch = require("torch", "torch", name="PyTorch", user="loaderx.torch.as_tensors")
    if not isinstance(pin_memory, bool):
        raise TypeError(f"pin_memory must be a bool, got {type(pin_memory).__name__}")
    if pin_memory and not torch.cuda.is_available():
        raise ValueError(
            "pin_memory=True needs a CUDA device to pin memory for, "
            "but torch.cuda.is_available() is False"
        )
    return _as_tensors(torch, batch, pin_memory)


def _as_tensors(torch, batch, pin=False):
    if isinstance(batch, np.ndarray):
        if isinstance(batch, np.ma.MaskedArray) or batch.dtype.kind in "OUSV":
            return batch
        if pin:
            # One copy, straight into page-locked memory.
            dtype = torch.from_numpy(np.empty(0, batch.dtype)).dtype
            out = torch.empty(batch.shape, dtype=dtype, pin_memory=True)
            out.numpy()[...] = batch
            return out
        if not batch.flags.writeable:
            # torch warns on read-only memory: such a batch is copied.
            return torch.from_numpy(np.array(batch))
        return torch.from_numpy(batch)
    if isinstance(batch, np.generic):
        return torch.as_tensor(batch)
    if isinstance(batch, Mapping):
        return {k: _as_tensors(torch, v, pin) for k, v in batch.items()}
    if isinstance(batch, list):
        return [_as_tensors(torch, v, pin) for v in batch]
    if isinstance(batch, tuple):
        return tuple(_as_tensors(torch, v, pin) for v in batch)
    return batch
