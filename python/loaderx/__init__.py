"""loaderx: a persistent record store (Zrecord) and an endless, step-based
sampler and prefetch loader for single-machine training.

Modules:

* :mod:`loaderx.zrecord` — ``DenseStore``, ``RaggedStore``, ``DICT_TIERS``,
  ``StoreBusy``, ``Corrupted``.
* :mod:`loaderx.utils` — ``train_dict`` for the ``zstd_dict`` codec.
"""

from .zrecord import DICT_TIERS, Corrupted, DenseStore, RaggedStore, StoreBusy

__all__ = ["DenseStore", "RaggedStore", "DICT_TIERS", "StoreBusy", "Corrupted"]
