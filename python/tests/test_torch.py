"""loaderx.torch with real PyTorch: the map-style Dataset (records, batched
``__getitems__`` through torch's DataLoader, fork and spawn workers,
pickling by path), ``as_tensors``, and the checkpoint contract a Lightning
Trainer relies on (``state_dict()`` saved with ``torch.save``, loaded with
``torch.load(weights_only=True)`` into ``load_state_dict()``)."""

import pickle
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import loaderx  # noqa: E402
from loaderx.dataloader import DataLoader  # noqa: E402
from loaderx.torch import Dataset, as_tensors  # noqa: E402

N = 60


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    """A table whose record i holds i in every column: `id`, `img` (dense
    2x3) and `tok` (ragged, i % 4 + 1 values)."""
    root = tmp_path_factory.mktemp("torch") / "table"
    ids = np.arange(N, dtype=np.int64)
    with loaderx.DenseStore.create(root / "id", np.int64, ()) as s:
        s.append(ids)
    with loaderx.DenseStore.create(root / "img", np.float32, (2, 3)) as s:
        s.append(np.broadcast_to(ids[:, None, None].astype(np.float32), (N, 2, 3)).copy())
    with loaderx.RaggedStore.create(root / "tok", np.int32) as s:
        s.append(np.full(i % 4 + 1, i, np.int32) for i in range(N))
    return str(root)


@pytest.fixture
def table(table_path):
    with loaderx.open_table(table_path) as t:
        yield t


def check_batch(batch):
    ids = batch["id"]
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int64
    assert torch.equal(batch["img"], ids[:, None, None].float().expand(-1, 2, 3))


def test_records_and_batches(table):
    ds = Dataset(table)
    assert len(ds) == N and ds.columns == ["id", "img", "tok"]
    rec = ds[7]
    assert rec["id"] == 7 and rec["img"].shape == (2, 3) and (rec["tok"] == 7).all()
    assert ds[-1]["id"] == N - 1
    batch = ds[[3, 1, 3]]
    assert batch["id"].tolist() == [3, 1, 3] and len(batch["tok"]) == 3
    items = ds.__getitems__(np.array([5, 0]))
    assert [r["id"] for r in items] == [5, 0] and items[0]["tok"].tolist() == [5, 5]
    only = Dataset(table, columns=["img"])
    assert list(only[0]) == ["img"]
    with pytest.raises(IndexError, match=f"record {N} is out of range"):
        ds[N]
    with pytest.raises(IndexError, match="record -1 is out of range"):
        ds.__getitems__([0, -1])
    with pytest.raises(TypeError, match="index must be an int or a sequence of ints"):
        ds[1.5]
    with pytest.raises(TypeError, match="sequence of ints"):
        ds.__getitems__([0.5])
    with pytest.raises(ValueError, match="no column 'nope'"):
        Dataset(table, columns=["nope"])
    with pytest.raises(TypeError, match="a table or a dict of streams"):
        Dataset([1, 2])


class Counting(Dataset):
    """Counts how torch's fetcher reads (single-process loading only)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.single = 0
        self.batched = 0

    def __getitem__(self, index):
        self.single += 1
        return super().__getitem__(index)

    def __getitems__(self, indices):
        self.batched += 1
        return super().__getitems__(indices)


def test_torch_batches_through_getitems_one_gather_per_column(table):
    ds = Counting(table, columns=["id", "img"])
    loader = torch.utils.data.DataLoader(
        ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    seen = []
    for batch in loader:
        check_batch(batch)
        seen += batch["id"].tolist()
    assert sorted(seen) == list(range(N))
    # One __getitems__ per batch (8 batches of N=60), never one read per record.
    assert (ds.batched, ds.single) == (8, 0)


def test_batched_getitem_with_a_batch_sampler(table):
    ds = Dataset(table, columns=["id", "img"])
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(ds), batch_size=16, drop_last=False
    )
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None)
    batches = list(loader)
    assert [len(b["id"]) for b in batches] == [16, 16, 16, 12]
    for b in batches:
        check_batch(b)
    assert torch.cat([b["id"] for b in batches]).tolist() == list(range(N))


def _pad(samples):
    """A collate for the ragged column: pad to the longest record."""
    tok = torch.nn.utils.rnn.pad_sequence(
        [torch.from_numpy(s["tok"]) for s in samples], batch_first=True
    )
    ids = torch.tensor([int(s["id"]) for s in samples])
    return {"id": ids, "tok": tok}


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_fork_and_spawn_read_every_record_once(table, context):
    ds = Dataset(table, columns=["id", "img"])
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=7,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=context,
        generator=torch.Generator().manual_seed(1),
        timeout=120,
    )
    seen = []
    for batch in loader:
        check_batch(batch)
        seen += batch["id"].tolist()
    assert sorted(seen) == list(range(N))
    # The ragged column with a collate of its own, in workers too.
    tok = torch.utils.data.DataLoader(
        Dataset(table, columns=["id", "tok"]),
        batch_size=5,
        num_workers=2,
        multiprocessing_context=context,
        collate_fn=_pad,
        timeout=120,
    )
    for batch in tok:
        for i, row in zip(batch["id"].tolist(), batch["tok"]):
            assert row[: i % 4 + 1].tolist() == [i] * (i % 4 + 1)
            assert (row[i % 4 + 1 :] == 0).all()


def test_pickles_by_path(table, table_path):
    ds = Dataset(table, columns=["id", "tok"])
    again = pickle.loads(pickle.dumps(ds))
    assert (
        repr(again)
        == repr(ds)
        == (f"loaderx.torch.Dataset(table={table_path!r}, columns=['id', 'tok'], len={N})")
    )
    assert again[9]["id"] == 9 and again[9]["tok"].tolist() == [9, 9]
    streams = Dataset({"x": table["img"]})
    assert pickle.loads(pickle.dumps(streams))[2]["x"].tolist() == [[2.0] * 3] * 2


def test_as_tensors_shares_memory_and_keeps_text():
    x = np.arange(4)
    out = as_tensors({"x": x, "tok": [np.ones(2), np.zeros(1)], "text": ["a", None], "n": 3})
    out["x"][0] = 10
    assert x[0] == 10  # the same memory
    assert [t.shape for t in out["tok"]] == [torch.Size([2]), torch.Size([1])]
    assert out["text"] == ["a", None] and out["n"] == 3
    ro = np.arange(3)
    ro.flags.writeable = False
    assert as_tensors(ro).tolist() == [0, 1, 2]  # copied, without a warning
    assert as_tensors(np.int64(5)).item() == 5


def test_as_tensors_pins_memory_where_asked_and_only_where_it_can():
    batch = {"image": np.arange(24, dtype=np.uint8).reshape(2, 3, 2, 2), "text": ["a", "b"]}
    with pytest.raises(TypeError, match="pin_memory must be a bool, got str"):
        as_tensors(batch, pin_memory="yes")
    if torch.cuda.is_available():
        out = as_tensors(batch, pin_memory=True)
        assert out["image"].is_pinned() and out["image"].dtype == torch.uint8
        assert out["image"].numpy().tolist() == batch["image"].tolist()
        out["image"][0] = 0  # a copy: the batch itself is untouched
        assert batch["image"][0, 0, 0, 1] == 1 and out["text"] == ["a", "b"]
        on_gpu = out["image"].to("cuda", non_blocking=True)
        assert on_gpu.cpu().numpy()[1].tolist() == batch["image"][1].tolist()
    else:
        with pytest.raises(ValueError, match=r"pin_memory=True needs a CUDA device.*False"):
            as_tensors(batch, pin_memory=True)
    assert not as_tensors(batch)["image"].is_pinned()


@runtime_checkable
class Stateful(Protocol):
    """What Lightning's CombinedLoader checks before saving a loader's
    state in a checkpoint (state_dict and load_state_dict)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@pytest.mark.parametrize("mix", [False, True])
def test_a_loader_checkpoints_through_torch_save_and_resumes_exactly(table, tmp_path, mix):
    streams = table
    if mix:
        streams = loaderx.Mix(
            {"a": table, "b": {k: table[k] for k in table}},
            lambda step: {"a": 1, "b": 1 + step % 3},
        )
    kw = dict(batch_size=6, seed=3, transform=as_tensors, workers=2)
    with DataLoader(streams, **kw) as loader:
        assert isinstance(loader, Stateful)
        for _ in range(5):
            check_batch(next(loader))
        torch.save({"global_step": 5, "loader": loader.state_dict()}, tmp_path / "ckpt.pt")
        want = [next(loader) for _ in range(4)]
    # A new process would do the same: a fresh loader, the checkpoint
    # loaded with torch's safe loader, then load_state_dict.
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    with DataLoader(streams, **kw) as resumed:
        resumed.load_state_dict(ckpt["loader"])
        got = [next(resumed) for _ in range(4)]
    for a, b in zip(want, got):
        for key in a:
            if isinstance(a[key], torch.Tensor):
                assert torch.equal(a[key], b[key]), key
            else:
                assert all(torch.equal(x, y) for x, y in zip(a[key], b[key])), key


def test_epochs_hand_a_loader_to_a_trainer_without_reading_ahead(table):
    """What Lightning does with a train loader of known length: iterate a
    pass of len() batches per epoch, save state_dict() after a step,
    load_state_dict() on resume; the saved step is the steps trained."""
    from loaderx.torch import Epochs

    kw = dict(batch_size=5, seed=2, transform=as_tensors)
    with DataLoader(table, **kw) as loader:
        epochs = Epochs(loader, steps=4)
        assert len(epochs) == 4 and isinstance(epochs, Stateful)
        trained = []
        for _ in range(2):  # two epochs
            for batch in epochs:
                trained.append(batch["id"])
        assert epochs.state_dict()["step"] == len(trained) == 8
        it = iter(epochs)
        trained.append(next(it)["id"])
        state = epochs.state_dict()  # a checkpoint after the 9th step
        assert state["step"] == 9
        rest = [b["id"] for b in it]
    with DataLoader(table, **kw) as fresh:
        whole = [next(fresh)["id"] for _ in range(12)]
    assert all(torch.equal(a, b) for a, b in zip(trained + rest, whole))
    with DataLoader(table, **kw) as again:
        resumed = Epochs(again, steps=4)
        resumed.load_state_dict(state)
        assert torch.equal(next(iter(resumed))["id"], whole[9])
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        Epochs(loader, steps=0)
    with pytest.raises(TypeError, match="loaderx DataLoader"):
        Epochs([1, 2], steps=2)
