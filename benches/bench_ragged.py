"""Random batch gather of variable-shape records: loaderx RaggedStore against peers.

Workloads (identical records and index plan for every backend):

- ``vision``: the dense benchmark's CHW RGB uint8 image model with H and W
  independently lognormal (medians near 224), clipped to 64..512; 2,500
  records, 50 batches of 256 by default.
- ``tokens``: 200,000 one-dimensional int32 records of 16..512 tokens
  (median 129, mean about 139, p90 254) cut from the synthetic GPT-2-vocabulary
  stream; 100 batches of 256 by default.

Every backend must return an ordered list of arrays, each with its record's
exact dtype, shape and values. Run from the repository root, for example::

    .venv/bin/python benches/bench_ragged.py --workload tokens
    .venv/bin/python benches/bench_ragged.py --quick --only npy-mmap-raw,lmdb-raw

The markdown table goes to stdout, progress to stderr and everything measured
to ``benches/out/ragged-<workload>.json`` (``-quick`` appended for --quick).
"""

from __future__ import annotations

import _workloads as wl
from _backends import BACKENDS
from _common import Workload, run, validate_ragged

WORKLOADS = {
    "vision": Workload(
        name="vision",
        make=wl.ragged_vision,
        **wl.VISION_SIZES,
        describe="{records} CHW RGB uint8 images of (3, H, W), H and W lognormal in 64..512, "
        "{logical_mib:.1f} MiB logical; {batches} random batches of {batch_size}.",
    ),
    "tokens": Workload(
        name="tokens",
        make=wl.ragged_tokens,
        **wl.TOKEN_SIZES,
        describe="{records} int32 token records of 16..512 tokens from a synthetic "
        "GPT-2-vocabulary stream, {logical_mib:.1f} MiB logical; {batches} random batches "
        "of {batch_size}.",
    ),
}


def spec(records: list) -> dict:
    return {"dtype": records[0].dtype, "item_shape": None}


if __name__ == "__main__":
    run("ragged", WORKLOADS, BACKENDS, validate_ragged, spec)
