"""Deterministic synthetic workloads for the store benchmarks.

Every generator is a pure function of its arguments: the same ``(n, seed)``
gives the same bytes on every machine, so every backend in a run (and every
run of a workload) sees identical records.

Vision: CHW RGB ``uint8`` images from a smooth spatial model — a few
low-frequency plane waves summed into one luminance field, mapped per channel
with its own offset and gain, quantised to steps of 4 grey levels, with a
sparse sprinkling of +-2 noise. zstd level 3 compresses such a record about
tenfold. Frequencies are fixed in cycles per 224 pixels, so a larger ragged
image shows more of the same texture instead of a smoother one, and the dense
and ragged workloads share one entropy model: image ``i`` draws the same field
parameters in both; only its height and width differ.

Tokens: a synthetic corpus of ``int32`` IDs over GPT-2's 50,257-entry
vocabulary. Ranks follow a Zipf-Mandelbrot law ``p(r) ~ 1 / (r + 2.7)``
(sampled through its closed-form continuous inverse CDF) and are mapped to IDs
by a fixed permutation; short spans repeat text from the previous few hundred
tokens, which gives zstd level 3 about a twofold ratio on 2 KiB records.
"""

from __future__ import annotations

import numpy as np

IMAGE_SHAPE = (3, 224, 224)
VOCAB_SIZE = 50257
TOKEN_BLOCK = 512

# Stream tags keep the random streams of different uses independent.
_IMAGE_STREAM = 0
_IMAGE_SIZE_STREAM = 1
_TOKEN_STREAM = 2
_TOKEN_LENGTH_STREAM = 3
_PLAN_STREAM = 4

# Vision model.
_WAVES = 3
_MAX_CYCLES = 1.2  # per 224 pixels
_MAX_AMPLITUDE = 30.0
_QUANT_STEP = 4
_NOISE_FRACTION = 0.005
_SIZE_SIGMA = 0.4  # lognormal sigma of H and W; median 224
_SIZE_RANGE = (64, 512)

# Token model.
_ZIPF_Q = 2.7
_SPAN_START_P = 0.1  # chance a position starts a repeated span
_SPAN_MEAN_EXTRA = 3  # span length is 1 + geometric(mean 3): 2 or more
_SPAN_MAX_DISTANCE = 256
_TOKEN_CHUNK = 1 << 20
_PERMUTATION_SEED = 50257

# Ragged token lengths: log-space split normal with median 129, p90 254
# (upper sigma) and a wider lower half chosen so the mean lands near 139.
_LENGTH_MEDIAN = 129.0
_LENGTH_SIGMA_UPPER = 0.5287
_LENGTH_SIGMA_LOWER = 0.9
_LENGTH_RANGE = (16, 512)


# Record counts and plan sizes shared by every benchmark of a workload
# (full run, then --quick).
VISION_SIZES = dict(
    records=2500, batch_size=256, batches=50, quick_records=64, quick_batch_size=16, quick_batches=4
)
TOKEN_SIZES = dict(
    records=200_000,
    batch_size=256,
    batches=100,
    quick_records=4000,
    quick_batch_size=64,
    quick_batches=8,
)


def _rng(seed: int, stream: int, *key: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *key])


def _image_into(rng: np.random.Generator, out: np.ndarray) -> None:
    """Fill ``out`` (3, H, W) uint8 with one image of the spatial model."""
    _, h, w = out.shape
    y = (np.arange(h, dtype=np.float32) / np.float32(224.0))[:, None]
    x = (np.arange(w, dtype=np.float32) / np.float32(224.0))[None, :]
    fy = rng.uniform(-_MAX_CYCLES, _MAX_CYCLES, _WAVES)
    fx = rng.uniform(-_MAX_CYCLES, _MAX_CYCLES, _WAVES)
    phase = rng.uniform(0.0, 2.0 * np.pi, _WAVES)
    amplitude = rng.uniform(0.3, 1.0, _WAVES) * _MAX_AMPLITUDE
    field = np.zeros((h, w), dtype=np.float32)
    for k in range(_WAVES):
        field += np.float32(amplitude[k]) * np.sin(
            np.float32(2 * np.pi * fy[k]) * y
            + np.float32(2 * np.pi * fx[k]) * x
            + np.float32(phase[k])
        )
    offset = rng.uniform(70.0, 180.0, 3).astype(np.float32)[:, None, None]
    gain = rng.uniform(0.6, 1.2, 3).astype(np.float32)[:, None, None]
    levels = np.floor((offset + gain * field) * np.float32(1.0 / _QUANT_STEP))
    np.clip(levels * np.float32(_QUANT_STEP), 0, 255, out=levels)
    out[...] = levels
    flat = out.reshape(-1)
    count = rng.binomial(flat.size, _NOISE_FRACTION)
    where = rng.integers(0, flat.size, count)
    noisy = flat[where].astype(np.int16) + rng.integers(-2, 3, count)
    flat[where] = np.clip(noisy, 0, 255)


def dense_vision(n: int, seed: int) -> np.ndarray:
    """``n`` images of shape (3, 224, 224) as one (n, 3, 224, 224) uint8 array."""
    out = np.empty((n, *IMAGE_SHAPE), dtype=np.uint8)
    for i in range(n):
        _image_into(_rng(seed, _IMAGE_STREAM, i), out[i])
    return out


def ragged_vision_sizes(n: int, seed: int) -> np.ndarray:
    """(n, 2) int64 of (H, W), independently lognormal, clipped to 64..512."""
    rng = _rng(seed, _IMAGE_SIZE_STREAM)
    hw = np.rint(224.0 * np.exp(rng.normal(0.0, _SIZE_SIGMA, (n, 2))))
    return np.clip(hw, *_SIZE_RANGE).astype(np.int64)


def ragged_vision(n: int, seed: int) -> list[np.ndarray]:
    """``n`` images of shape (3, H, W); image ``i`` uses dense image ``i``'s field."""
    records = []
    for i, (h, w) in enumerate(ragged_vision_sizes(n, seed)):
        img = np.empty((3, int(h), int(w)), dtype=np.uint8)
        _image_into(_rng(seed, _IMAGE_STREAM, i), img)
        records.append(img)
    return records


def _token_permutation() -> np.ndarray:
    return np.random.default_rng(_PERMUTATION_SEED).permutation(VOCAB_SIZE).astype(np.int32)


def _token_chunk(rng: np.random.Generator, n: int, rank_to_id: np.ndarray) -> np.ndarray:
    # Continuous Zipf-Mandelbrot with exponent 1: F(r) = ln(1 + r/q) / ln(1 + V/q).
    u = rng.random(n)
    ranks = _ZIPF_Q * np.expm1(u * np.log1p(VOCAB_SIZE / _ZIPF_Q))
    base = rank_to_id[np.minimum(ranks.astype(np.int64), VOCAB_SIZE - 1)]

    # Repeated spans: position p of a span copies position p - distance.
    source = np.arange(n, dtype=np.int64)
    starts = np.flatnonzero(rng.random(n) < _SPAN_START_P)
    lengths = 1 + rng.geometric(1.0 / _SPAN_MEAN_EXTRA, starts.size)
    distance = lengths + rng.integers(1, _SPAN_MAX_DISTANCE, starts.size)
    span = np.repeat(np.arange(starts.size), lengths)
    within = np.arange(span.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    target = starts[span] + within
    origin = target - distance[span]
    keep = (target < n) & (origin >= 0)
    source[target[keep]] = origin[keep]
    # Chase copy chains to their roots so every copy repeats the final text.
    while True:
        chased = source[source]
        if np.array_equal(chased, source):
            break
        source = chased
    return base[source]


def token_stream(total: int, seed: int) -> np.ndarray:
    """``total`` int32 token IDs in 0..50256."""
    rank_to_id = _token_permutation()
    out = np.empty(total, dtype=np.int32)
    for c, start in enumerate(range(0, total, _TOKEN_CHUNK)):
        stop = min(start + _TOKEN_CHUNK, total)
        chunk = _token_chunk(_rng(seed, _TOKEN_STREAM, c), _TOKEN_CHUNK, rank_to_id)
        out[start:stop] = chunk[: stop - start]
    return out


def dense_tokens(n: int, seed: int) -> np.ndarray:
    """The packed stream cut into ``n`` records of int32[512]."""
    return token_stream(n * TOKEN_BLOCK, seed).reshape(n, TOKEN_BLOCK)


def ragged_token_lengths(n: int, seed: int) -> np.ndarray:
    z = _rng(seed, _TOKEN_LENGTH_STREAM).standard_normal(n)
    sigma = np.where(z < 0, _LENGTH_SIGMA_LOWER, _LENGTH_SIGMA_UPPER)
    lengths = np.rint(_LENGTH_MEDIAN * np.exp(z * sigma))
    return np.clip(lengths, *_LENGTH_RANGE).astype(np.int64)


def ragged_tokens(n: int, seed: int) -> list[np.ndarray]:
    """``n`` one-dimensional int32 records of 16..512 tokens cut from the stream."""
    lengths = ragged_token_lengths(n, seed)
    stream = token_stream(int(lengths.sum()), seed)
    return np.split(stream, np.cumsum(lengths)[:-1])


def index_plan(n: int, batch_size: int, batches: int, seed: int) -> list[np.ndarray]:
    """Random int64 batches; distinct indices within a batch when it fits in n."""
    rng = _rng(seed, _PLAN_STREAM, n, batch_size)
    replace = batch_size > n
    return [
        rng.choice(n, size=batch_size, replace=replace).astype(np.int64) for _ in range(batches)
    ]
