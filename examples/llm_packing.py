"""Feeding a language model: token documents drawn in proportion to a
quality weight, packed into fixed-length rows with segment ids, randomly
masked with per-record generators, and resumed bit-exactly mid-run.

    python examples/llm_packing.py [--docs N] [--seq-len L] [--steps S]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import loaderx
from loaderx.dataloader import DataLoader


def make_corpus(root: str, docs: int) -> None:
    """A ragged store of token documents and a dense store of their weights."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(300), 0.9, docs).astype(int), 8, 4096)
    with loaderx.RaggedStore.create(os.path.join(root, "tokens"), np.int32) as s:
        s.append(rng.integers(1, 32_000, n, dtype=np.int32) for n in lengths)
    # Longer documents weigh more, short ones still show up.
    with loaderx.DenseStore.create(os.path.join(root, "quality"), np.float32, ()) as s:
        s.append(np.sqrt(lengths).astype(np.float32))


def collate(seq_len: int):
    def transform(batch, info):
        # Mask 15 % of each document's tokens, drawn from that record's own
        # generator: the same masks on every resume and any worker count.
        docs = []
        for doc, seed in zip(batch["tokens"], info.record_seeds):
            doc = doc.copy()
            doc[np.random.default_rng(seed).random(len(doc)) < 0.15] = 0
            docs.append(doc)
        out = loaderx.pack(docs, seq_len, split=True)
        out["step"] = info.step
        return out

    return transform


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loaderx-llm-") as root:
        make_corpus(root, args.docs)
        with loaderx.open_table(root) as table:
            streams = {"tokens": table["tokens"]}
            kw = dict(
                batch_size=32,
                mode="weighted",
                weights=table["quality"],
                seed=7,
                transform=collate(args.seq_len),
                workers=2,
            )
            with DataLoader(streams, **kw) as loader:
                run = [next(loader) for _ in range(args.steps)]
                state = loader.state_dict()
                after = [next(loader) for _ in range(3)]
            rows = sum(b["tokens"].shape[0] for b in run)
            fill = np.mean([(b["segment_ids"] > 0).mean() for b in run])
            print(f"{args.steps} steps: {rows} rows of {args.seq_len} tokens, {fill:.1%} filled")
            # A new process would do the same: a fresh loader, then the state.
            with DataLoader(streams, **kw) as resumed:
                resumed.load_state_dict(state)
                again = [next(resumed) for _ in range(3)]
            for a, b in zip(after, again):
                assert a["step"] == b["step"]
                for key in ("tokens", "segment_ids", "positions"):
                    assert a[key].tobytes() == b[key].tobytes(), key
            print(f"resumed at step {state['step']}: the next 3 batches are bit-exact")


if __name__ == "__main__":
    main()
