"""Pretraining on a mixture: two token tables (web text and code) mixed
3:1, packed into 2048-token rows with segment ids, and resumed bit-exactly
mid-run; then the same mixture on a schedule that brings the code in
gradually.

    python examples/llm_mixture.py [--docs N] [--seq-len L] [--steps S]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import loaderx
from loaderx.dataloader import DataLoader


def make_table(path: str, docs: int, mean_len: float, vocab: tuple[int, int], seed: int) -> None:
    """A table with one ragged column of token documents."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(mean_len), 0.8, docs).astype(int), 8, 4096)
    with loaderx.RaggedStore.create(os.path.join(path, "tokens"), np.int32) as s:
        s.append(rng.integers(*vocab, n, dtype=np.int32) for n in lengths)


def pack_rows(seq_len: int):
    """The transform: a batch of documents into packed rows (documents
    longer than the room left are split across rows)."""

    def transform(batch):
        out = loaderx.pack(batch["tokens"], seq_len, split=True)
        # Which source each row's tokens came from, for the loss by domain.
        out["docs_by_source"] = np.bincount(batch["source"], minlength=2)
        return out

    return transform


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loaderx-mix-") as root:
        web_dir, code_dir = os.path.join(root, "web"), os.path.join(root, "code")
        # Code tokens live in a vocabulary range of their own, so that the
        # packed rows show where every token came from.
        make_table(web_dir, args.docs, 400, (1, 30_000), seed=0)
        make_table(code_dir, max(args.docs // 4, 16), 900, (30_000, 32_000), seed=1)
        with loaderx.open_table(web_dir) as web, loaderx.open_table(code_dir) as code:
            mix = loaderx.Mix({"web": web, "code": code}, {"web": 3, "code": 1})
            kw = dict(batch_size=32, seed=7, transform=pack_rows(args.seq_len), workers=2)
            with DataLoader(mix, **kw) as loader:
                run = [next(loader) for _ in range(args.steps)]
                state = loader.state_dict()
                after = [next(loader) for _ in range(3)]
            docs = np.sum([b["docs_by_source"] for b in run], axis=0)
            rows = sum(b["tokens"].shape[0] for b in run)
            code_share = np.mean(
                [(b["tokens"] >= 30_000).sum() / (b["segment_ids"] > 0).sum() for b in run]
            )
            print(
                f"{args.steps} steps: documents web {docs[0]}, code {docs[1]} "
                f"({docs[0] / docs[1]:.2f}:1); {rows} rows of {args.seq_len} tokens, "
                f"{code_share:.1%} of the tokens are code"
            )
            # Every step of 32 documents takes exactly 24 web and 8 code.
            assert (docs == [24 * args.steps, 8 * args.steps]).all(), docs
            # A new process would do the same: a fresh loader, then the state.
            with DataLoader(mix, **kw) as resumed:
                resumed.load_state_dict(state)
                again = [next(resumed) for _ in range(3)]
            for a, b in zip(after, again):
                for key in ("tokens", "segment_ids", "positions", "docs_by_source"):
                    assert a[key].tobytes() == b[key].tobytes(), key
            print(f"resumed at step {state['step']}: the next 3 batches are bit-exact")

            # A schedule: no code for the first steps, then a linear ramp to 3:1.
            def weights(step: int) -> dict[str, float]:
                return {"web": 3.0, "code": min(max(step - 4, 0) / 8, 1.0)}

            ramp = loaderx.Mix({"web": web, "code": code}, weights)
            counts = ramp.counts(batch_size=32, stop=args.steps)
            print("code documents per step:", counts[:, 1].tolist())
            with DataLoader(ramp, **kw) as loader:
                for k in range(args.steps):
                    assert (next(loader)["docs_by_source"] == counts[k]).all()
            with DataLoader(ramp, start_step=args.steps // 2, **kw) as loader:
                assert (next(loader)["docs_by_source"] == counts[args.steps // 2]).all()
            print("the scheduled mixture draws the planned counts, resumed or not")


if __name__ == "__main__":
    main()
