"""``DataLoader.from_state(state)`` restores what the state holds (decode
settings, columns, batch size, mode, seed, block size, a Mix's sources and
weights); a keyword argument that disagrees with the state raises naming it
and both values; the transform, which a state cannot hold, is asked for
again."""

import os

import numpy as np
import pytest

import loaderx
from loaderx import images
from loaderx.dataloader import DataLoader
from loaderx.mixture import Mix

pa = pytest.importorskip("pyarrow")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for c in ("cat", "dog", "owl"):
        os.makedirs(root / c)
        for i in range(12):
            h, w = int(rng.integers(24, 48)), int(rng.integers(24, 48))
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            PIL.fromarray(pixels).save(root / c / f"{i:02d}.jpg", quality=90)
    path = str(tmp_path_factory.mktemp("tables") / "pets")
    images.ingest_folder(str(root), path, workers=1).close()
    return path


DECODE = {"image": loaderx.Image(16, scale=(0.3, 1.0), flip=0.5)}
COLUMNS = ["image", "label"]


def run(loader, k):
    return [{c: v.copy() for c, v in next(loader).items()} for _ in range(k)]


def test_from_state_with_no_kwargs_resumes_a_decoded_run_on_some_columns_bit_exactly(pets):
    kw = dict(batch_size=6, seed=11, mode="iid", decode=DECODE, columns=COLUMNS, workers=0)
    with loaderx.open_table(pets) as t:
        with DataLoader(t, **kw) as whole:
            want = run(whole, 8)
        with DataLoader(t, **kw) as first:
            head = run(first, 3)
            state = first.state_dict()
    assert state["columns"] == COLUMNS
    assert state["decode"] == {"image": DECODE["image"]._settings()}
    assert state["mode"] == "iid" and state["batch_size"] == 6 and "transform" not in state
    # A new table version changes nothing in the resumed run.
    with loaderx.open_table(pets, readonly=False) as t:
        t.delete("label = 0")
    with DataLoader.from_state(state) as resumed:
        assert resumed.step == 3
        assert resumed.state_dict() == {**state, "step": resumed.step}
        rest = run(resumed, 5)
    got = head + rest
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == COLUMNS
        assert g["image"].shape == (6, 3, 16, 16) and g["image"].dtype == np.uint8
        for c in COLUMNS:
            assert g[c].tobytes() == w[c].tobytes()


@pytest.mark.parametrize(
    "arg, value, theirs",
    [
        ("seed", 12, "11"),
        ("mode", "cyclic", "'iid'"),
        ("batch_size", 5, "6"),
        ("start_step", 9, "2"),
        ("block_size", 4, "None"),
        ("columns", ["image"], "['image', 'label']"),
        ("decode", {"image": loaderx.Image(16, crop="center")}, "'crop': 'random'"),
    ],
)
def test_a_kwarg_that_disagrees_with_the_state_raises_naming_it_and_both_values(
    pets, arg, value, theirs
):
    with loaderx.open_table(pets) as t:
        with DataLoader(
            t, batch_size=6, seed=11, mode="iid", decode=DECODE, columns=COLUMNS, workers=0
        ) as first:
            run(first, 2)
            state = first.state_dict()
    with pytest.raises(ValueError) as err:
        DataLoader.from_state(state, **{arg: value})
    message = str(err.value)
    assert f"{arg}=" in message and theirs in message, message
    assert repr(value) in message or str(value) in message, message


def test_kwargs_that_agree_with_the_state_are_taken(pets):
    with loaderx.open_table(pets) as t:
        with DataLoader(t, batch_size=6, seed=11, decode=DECODE, columns=COLUMNS) as first:
            run(first, 2)
            state = first.state_dict()
            following = next(first)["image"].copy()
    same = dict(
        batch_size=6,
        seed=11,
        mode="cyclic",
        start_step=2,
        columns=list(COLUMNS),
        decode={"image": loaderx.Image(16, scale=(0.3, 1.0), flip=0.5)},
    )
    with DataLoader.from_state(state, **same) as resumed:
        assert next(resumed)["image"].tobytes() == following.tobytes()


def test_a_run_with_a_transform_asks_for_it_again(pets):
    def collate(batch):
        return batch["image"].astype(np.float32).mean(axis=(1, 2, 3)) + batch["label"]

    with loaderx.open_table(pets) as t:
        with DataLoader(
            t, batch_size=4, seed=2, decode=DECODE, columns=COLUMNS, transform=collate
        ) as first:
            next(first)
            state = first.state_dict()
            following = next(first)
    assert state["transform"] is True
    with pytest.raises(ValueError, match="pass transform= again"):
        DataLoader.from_state(state)
    with DataLoader.from_state(state, transform=collate) as resumed:
        assert next(resumed).tobytes() == following.tobytes()


def test_a_resume_on_other_ranks_changes_the_per_rank_batch_with_world_size(pets):
    with loaderx.open_table(pets) as t, DataLoader(t, batch_size=8, seed=3, columns=["label"]) as a:
        next(a)
        state = a.state_dict()
        following = next(a)["label"].copy()
    parts = []
    for r in range(2):
        with DataLoader.from_state(state, batch_size=4, rank=r, world_size=2) as resumed:
            parts.append(next(resumed)["label"])
    assert np.concatenate(parts).tobytes() == following.tobytes()


def test_a_mix_restores_its_sources_weights_and_columns(pets, tmp_path):
    other = str(tmp_path / "other")
    loaderx.copy_table(pets, other)
    with loaderx.open_table(pets) as a, loaderx.open_table(other) as b:
        mix = Mix({"a": a, "b": b}, {"a": 3.0, "b": 1.0})
        kw = dict(batch_size=8, seed=4, decode=DECODE, columns=COLUMNS, workers=0)
        with DataLoader(mix, **kw) as whole:
            want = run(whole, 4)
        with DataLoader(mix, **kw) as first:
            head = run(first, 2)
            state = first.state_dict()
    assert state["sources"] == ["a", "b"] and state["mix_weights"] == {"a": 3.0, "b": 1.0}
    with DataLoader.from_state(state) as resumed:
        rest = run(resumed, 2)
    for g, w in zip(head + rest, want):
        assert list(g) == [*COLUMNS, "source"]
        for c in g:
            assert g[c].tobytes() == w[c].tobytes()


def test_the_cli_lists_the_records_of_a_run_with_a_transform_decode_and_columns(pets, tmp_path):
    import json

    import pyarrow.parquet as pq

    from loaderx.cli import main

    with loaderx.open_table(pets) as t:
        with DataLoader(
            t, batch_size=4, seed=5, decode=DECODE, columns=["image"], transform=lambda b: b
        ) as run:
            next(run)
            state = run.state_dict()
            want = run.provenance(range(0, 3))
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    out = tmp_path / "p.parquet"
    assert main(["provenance", str(state_file), "--steps", "0:3", "--out", str(out)]) == 0
    listed = pq.read_table(out)
    assert listed["record_id"].to_pylist() == want["record_id"].to_pylist()
    assert listed["image_box"].to_pylist() == want["image_box"].to_pylist()
