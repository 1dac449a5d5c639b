"""A loaderx table read through Grain: the table as a Grain data source,
shuffled and batched by Grain's own DataLoader.

    python examples/grain_source.py [--records N]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import loaderx
from loaderx.grain import DataSource


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1000)
    args = ap.parse_args()
    import grain.python as grain

    with tempfile.TemporaryDirectory(prefix="loaderx-grain-") as root:
        rng = np.random.default_rng(0)
        with loaderx.DenseStore.create(os.path.join(root, "image"), np.uint8, (3, 16, 16)) as s:
            s.append(rng.integers(0, 255, (args.records, 3, 16, 16), dtype=np.uint8))
        with loaderx.DenseStore.create(os.path.join(root, "label"), np.int64, ()) as s:
            s.append(rng.integers(0, 10, args.records))
        with loaderx.open_table(root) as table:
            source = DataSource(table)
            print(source)
            loader = grain.DataLoader(
                data_source=source,
                sampler=grain.IndexSampler(len(source), shuffle=True, seed=0, num_epochs=1),
                operations=[grain.Batch(batch_size=64, drop_remainder=True)],
                worker_count=0,
            )
            batches = list(loader)
            print(f"{len(batches)} batches of {batches[0]['image'].shape} images")
            assert len(batches) == args.records // 64
            assert batches[0]["label"].shape == (64,)


if __name__ == "__main__":
    main()
