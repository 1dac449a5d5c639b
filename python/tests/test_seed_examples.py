"""Every Python example of the original API document, run as written in a temp dir.

Each test first creates the inputs an example assumes (``data.npy``,
``images``, ``seqs`` ...) and then runs the example's code unchanged.
"""

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.zrecord import DenseStore


@pytest.fixture
def npy_files(in_tmp):
    rng = np.random.default_rng(0)
    np.save("data.npy", rng.integers(0, 255, (600, 3, 16, 16), dtype=np.uint8))
    np.save("label.npy", rng.integers(0, 10, 600).astype(np.int64))
    return in_tmp


def test_quick_start(npy_files):
    import numpy as np

    from loaderx.dataloader import DataLoader
    from loaderx.zrecord import DenseStore

    data = np.load('data.npy', mmap_mode='r')
    label = np.load('label.npy', mmap_mode='r')
    with DenseStore.create('train_data', data.dtype, data.shape[1:]) as ds:
        ds.append(data)
    with DenseStore.create('train_label', label.dtype, label.shape[1:]) as ds:
        ds.append(label)

    data_store = DenseStore.open('train_data')
    label_store = DenseStore.open('train_label')
    loader = DataLoader({'data': data_store, 'label': label_store},
                        transform=lambda batch: batch)
    for i, batch in enumerate(loader):
        if i >= 256:
            break

    print(batch['data'].shape)
    print(batch['label'].shape)

    loader.close()
    data_store.close()
    label_store.close()

    assert batch['data'].shape == (256, 3, 16, 16)
    assert batch['label'].shape == (256,)


def test_creating_a_dense_store(npy_files):
    import numpy as np

    from loaderx.zrecord import DenseStore

    data = np.load('data.npy', mmap_mode='r')
    with DenseStore.create('train_data', data.dtype, data.shape[1:]) as ds:
        ds.append(data)

    ds = DenseStore.open('train_data')
    batch = ds[:]
    ds.close()

    np.testing.assert_array_equal(batch, data)


def test_records_dense(in_tmp):
    import numpy as np

    from loaderx.zrecord import DenseStore

    data = np.arange(64, dtype=np.float32).reshape(8, 2, 4)
    with DenseStore.create('data', data.dtype, data.shape[1:]) as ds:
        ds.append(data)
    ds = DenseStore.open('data')
    out = ds[0, 5, 2]                          # (3, 2, 4) — shape from the persisted schema
    ds.close()

    assert out.shape == (3, 2, 4)
    np.testing.assert_array_equal(out, data[[0, 5, 2]])


def test_records_ragged(in_tmp):
    from loaderx.zrecord import RaggedStore

    seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
    with RaggedStore.create('tokens', np.int32) as rs:
        rs.append(seqs)                       # dtype explicit; each record keeps its shape
    rs = RaggedStore.open('tokens')

    records = rs[0, 2, 4]                # list of ndarray — one per record, exact shapes
    rs.close()
    lengths = np.array([len(r) for r in records])
    padded = np.zeros((len(records), lengths.max()), dtype=records[0].dtype)
    for i, r in enumerate(records):
        padded[i, :len(r)] = r             # (B, max_len) — your policy, your loop

    np.testing.assert_array_equal(padded, [[0, 1, 2, 0, 0], [0, 1, 2, 3, 0], [0, 1, 2, 3, 4]])


def test_dataloader_collate(in_tmp):
    with DenseStore.create('dense_tokens', np.int32, (16,)) as s:
        s.append(np.arange(100 * 16, dtype=np.int32).reshape(100, 16))
    with DenseStore.create('labelset', np.int64, ()) as s:
        s.append(np.arange(100, dtype=np.int64))
    dense_tokens = DenseStore.open('dense_tokens')
    labelset = DenseStore.open('labelset')

    def collate(batch):
        return {'input_ids': batch['tokens'], 'label': batch['label']}

    loader = DataLoader({'tokens': dense_tokens, 'label': labelset}, batch_size=32,
                        transform=collate)
    batch = next(loader)
    loader.close()

    assert batch['input_ids'].shape == (32, 16)
    np.testing.assert_array_equal(batch['input_ids'][:, 0], batch['label'] * 16)
    dense_tokens.close()
    labelset.close()


def test_writable_stores(in_tmp):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (2048, 28, 28), dtype=np.uint8)
    single_image = images[7]
    i = 0
    seq_a, seq_b, seq_c = (np.arange(n, dtype=np.int32) for n in (5, 9, 2))

    from loaderx.zrecord import DenseStore, RaggedStore

    ds = DenseStore.create('mnist/x', dtype=np.uint8, item_shape=(28, 28))
    ds.append(images[i:i + 1024])        # synchronous native batch; returns None
    ds.append(single_image[None])        # one sample is batch_size 1 — add the axis yourself
    ds[:4]                               # read path is direct

    tok = RaggedStore.create('tokens', dtype=np.int32)
    tok.append([seq_a, seq_b, seq_c])

    assert len(ds) == 1025 and len(tok) == 3
    np.testing.assert_array_equal(ds[:4], images[:4])
    np.testing.assert_array_equal(ds[1024], single_image)
    before = ds[:]

    ds.delete(np.arange(0, len(ds), 2))   # swap-last: index space stays dense, survivors reindex
    ds.stats()                            # {'records', 'live_bytes', 'data_bytes', 'reclaimable'}
    ds.compact()                          # reclaim the deleted bytes, in place — offline only
    after_len = len(ds)
    survivors = ds[:]
    ds.close()
    tok.close()

    assert after_len == 512
    kept = {r.tobytes() for r in before[1::2]}
    assert {r.tobytes() for r in survivors} == kept


def test_codec_notes_train_dict(in_tmp):
    rng = np.random.default_rng(2)
    base = rng.integers(0, 40, 256).astype(np.int32)
    settled_array = np.stack([np.roll(base, k) for k in range(2000)])
    data = settled_array
    token_generator = (np.roll(base, k)[: 16 + k % 200] for k in range(500))

    from loaderx.utils import train_dict
    from loaderx.zrecord import DenseStore, RaggedStore

    # train once on the settled data — a standalone, reusable artifact
    d = train_dict(settled_array, tier="balanced")

    # then any new store can install it and append explicitly
    with RaggedStore.create('tokens', np.int32, codec='zstd_dict', dict_bytes=d) as ds:
        ds.append(token_generator)
    with DenseStore.create('data', data.dtype, data.shape[1:],
                           codec='zstd_dict', dict_bytes=d) as ds:
        ds.append(data)

    with RaggedStore.open('tokens') as rs:
        assert len(rs) == 500 and rs[499].shape == (16 + 499 % 200,)
    with DenseStore.open('data') as ds:
        np.testing.assert_array_equal(ds[:], data)


def test_codec_rewrite(in_tmp):
    from loaderx.utils import train_dict
    from loaderx.zrecord import DenseStore

    with DenseStore.create("src", np.float32, (8,)) as s:
        s.append(np.random.default_rng(3).standard_normal((300, 8)).astype(np.float32).round(1))

    with DenseStore.open("src") as s, \
         DenseStore.create("dst", dtype=s.dtype, item_shape=s.item_shape,
                           codec="zstd_dict", dict_bytes=train_dict(s)) as d:
        d.append(s[:])                             # ndarray -> dense append

    with DenseStore.open("src") as s, DenseStore.open("dst") as d:
        np.testing.assert_array_equal(s[:], d[:])


def test_multi_stream_stores(in_tmp):
    rng = np.random.default_rng(4)
    joint = rng.standard_normal((400, 3, 10, 5)).astype(np.float32)
    label = rng.integers(0, 60, 400).astype(np.int64)
    seqs = [np.arange(1 + k % 30, dtype=np.int32) for k in range(400)]

    from loaderx.dataloader import DataLoader
    from loaderx.zrecord import DenseStore, RaggedStore

    root = "xsub/train"
    with DenseStore.create(root + "/joint", joint.dtype, joint.shape[1:]) as s:
        s.append(joint)
    with DenseStore.create(root + "/label", label.dtype, label.shape[1:]) as s:
        s.append(label)
    with RaggedStore.create(root + "/token", np.int32) as s:
        s.append(seqs)

    streams = {
        "joint": DenseStore.open(root + "/joint"),
        "label": DenseStore.open(root + "/label"),
        "token": RaggedStore.open(root + "/token"),
    }
    streams["joint"][0, 5, 2]            # each stream keeps its own index API
    loader = DataLoader(streams, batch_size=256)
    batch = next(loader)                  # {name: values}, index-aligned

    loader.close()
    for stream in streams.values():
        stream.close()

    assert batch["joint"].shape == (256, 3, 10, 5)
    assert len(batch["token"]) == 256
    # index-aligned: recover each record's index from the label/joint pair
    for j, lab, tok in zip(batch["joint"], batch["label"], batch["token"]):
        k = int(np.flatnonzero((joint == j).all(axis=(1, 2, 3)))[0])
        assert label[k] == lab and np.array_equal(seqs[k], tok)


def test_zsampler(in_tmp):
    from loaderx.zsampler import Sampler

    sampler = Sampler(1_000_000, 256, Sampler.Mode.IID, seed=42)
    indices = sampler.next()

    assert indices.shape == (256,) and indices.dtype == np.int64
    assert indices.min() >= 0 and indices.max() < 1_000_000
