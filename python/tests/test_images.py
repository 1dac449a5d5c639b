"""Encoded images decoded natively (loaderx.images): exact PNG and WebP
decodes and JPEG decodes within the IDCT's rounding of PIL's, on the
photos scikit-image and scikit-learn ship; crops and flips drawn from each
record's seed; bad data that never stops a process; ImageFolder ingest."""

import io
import os

import numpy as np
import pytest

import loaderx
from loaderx import images

PIL = pytest.importorskip("PIL.Image")
skdata = pytest.importorskip("skimage.data")
sklearn_datasets = pytest.importorskip("sklearn.datasets")
pa = pytest.importorskip("pyarrow")


def photos() -> dict[str, np.ndarray]:
    """The bundled photos, RGB uint8, at ImageNet-like sizes (longer side
    500 pixels)."""
    out = {
        "astronaut": skdata.astronaut(),
        "chelsea": skdata.chelsea(),
        "coffee": skdata.coffee(),
        "rocket": skdata.rocket(),
    }
    for i, img in enumerate(sklearn_datasets.load_sample_images().images):
        out[f"sample{i}"] = img
    for name, a in out.items():
        im = PIL.fromarray(a).convert("RGB")
        s = 500 / max(im.size)
        out[name] = np.asarray(im.resize((round(im.size[0] * s), round(im.size[1] * s))))
    return out


PHOTOS = photos()


def encode(a: np.ndarray, fmt: str, mode: str | None = None, **kw) -> bytes:
    im = PIL.fromarray(a)
    if mode is not None:
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def pil_rgb(data: bytes) -> np.ndarray:
    return np.asarray(PIL.open(io.BytesIO(data)).convert("RGB"))


def whole(h: int, w: int, **kw) -> loaderx.Image:
    """Settings that decode a source of h × w as it is."""
    return loaderx.Image((h, w), crop="none", flip=0.0, layout="HWC", **kw)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P"])
def test_png_decodes_exactly_as_pil(mode):
    for name, a in list(PHOTOS.items())[:3]:
        data = encode(a, "PNG", mode)
        h, w = a.shape[:2]
        got = images.decode([data], whole(h, w))[0]
        np.testing.assert_array_equal(got, pil_rgb(data), err_msg=f"{name} {mode}")


def test_a_16_bit_png_keeps_the_high_byte():
    a = (np.arange(64 * 48, dtype=np.uint32).reshape(48, 64) * 21).astype(np.uint16)
    buf = io.BytesIO()
    PIL.fromarray(a).save(buf, "PNG")
    got = images.decode([buf.getvalue()], whole(48, 64))[0]
    want = (a >> 8).astype(np.uint8)
    np.testing.assert_array_equal(got, np.stack([want] * 3, axis=-1))


def test_lossless_webp_decodes_exactly():
    a = PHOTOS["chelsea"]
    data = encode(a, "WEBP", lossless=True)
    got = images.decode([data], whole(*a.shape[:2]))[0]
    np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize(
    "kw",
    [
        {"quality": 90, "subsampling": 0},
        {"quality": 85, "subsampling": 1},
        {"quality": 75, "subsampling": 2},
        {"quality": 90, "progressive": True},
    ],
    ids=["444", "422", "420", "progressive"],
)
def test_jpeg_decodes_within_the_idct_rounding_of_pil(kw):
    worst = []
    for name, a in PHOTOS.items():
        data = encode(a, "JPEG", **kw)
        got = images.decode([data], whole(*a.shape[:2]))[0].astype(np.int16)
        diff = np.abs(got - pil_rgb(data).astype(np.int16))
        worst.append((float(diff.mean()), int(diff.max()), name))
        assert diff.mean() <= 0.5, (name, kw, diff.mean(), diff.max())
    print(kw, "mean/max absolute difference to PIL:", max(worst))


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grayscale_and_cmyk_jpegs_become_rgb(mode):
    a = PHOTOS["coffee"]
    data = encode(a, "JPEG", mode, quality=92)
    got = images.decode([data], whole(*a.shape[:2]))[0].astype(np.int16)
    diff = np.abs(got - pil_rgb(data).astype(np.int16))
    assert got.shape == a.shape and diff.mean() <= 1.0, (mode, diff.mean())


@pytest.mark.parametrize("subsampling", [0, 2], ids=["444", "420"])
def test_a_jpeg_crop_decodes_its_region_and_a_small_output_a_scaled_image(subsampling):
    a = np.asarray(PIL.fromarray(PHOTOS["astronaut"]).resize((500, 500)))
    data = encode(a, "JPEG", quality=85, subsampling=subsampling)
    full = PIL.open(io.BytesIO(data)).convert("RGB")
    # The centre box (31, 31, 438, 438) is decoded alone, its left edge
    # moved back to an iMCU column: the same pixels as PIL's whole decode,
    # so the resize matches PIL's within rounding.
    centre = loaderx.Image(224, crop="center", flip=0.0, layout="HWC")
    got = images.decode([data], centre)[0].astype(int)
    want = np.asarray(full.crop((31, 31, 469, 469)).resize((224, 224), PIL.BILINEAR))
    assert np.abs(got - want.astype(int)).mean() < 0.5
    # An output a quarter of the source or less is decoded at a DCT scale
    # (1/4 here): block averages instead of every pixel, then resized, so
    # close to PIL's resize of the whole image but not equal to it.
    for size in (100, 60):
        small = loaderx.Image(size, crop="none", flip=0.0, layout="HWC")
        got = images.decode([data], small)[0].astype(int)
        want = np.asarray(full.resize((size, size), PIL.BILINEAR)).astype(int)
        diff = np.abs(got - want)
        assert 0 < diff.mean() < 4.0, (size, diff.mean())
    # A random crop decodes the same as cropping the whole decode would, up
    # to the region's rounding: every box of a run of seeds (none twice the
    # output's size, so none scaled).
    rrc = loaderx.Image(224, scale=(0.08, 0.7), flip=0.0, layout="HWC")
    seeds = np.arange(16, dtype=np.uint64)
    got = images.decode([data] * 16, rrc, seeds=seeds).astype(int)
    png = encode(np.asarray(full), "PNG")
    want = images.decode([png] * 16, rrc, seeds=seeds).astype(int)
    assert np.abs(got - want).mean() < 1.0


def test_crops_and_flips_are_a_function_of_the_seed():
    a = PHOTOS["astronaut"]
    data = [encode(a, "PNG")] * 4
    img = loaderx.Image(64)
    seeds = np.array([1, 2, 1, 3], dtype=np.uint64)
    out = images.decode(data, img, seeds=seeds)
    assert out.shape == (4, 3, 64, 64) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0], out[2])
    assert not np.array_equal(out[0], out[1])
    np.testing.assert_array_equal(images.decode(data, img, seeds=seeds), out)
    # A flip mirrors the image; HWC holds the same pixels as CHW.
    plain = loaderx.Image(64, crop="none", flip=0.0)
    mirrored = loaderx.Image(64, crop="none", flip=1.0)
    np.testing.assert_array_equal(
        images.decode(data[:1], mirrored), images.decode(data[:1], plain)[..., ::-1]
    )
    hwc = images.decode(data[:1], loaderx.Image(64, crop="none", flip=0.0, layout="HWC"))
    np.testing.assert_array_equal(hwc[0], images.decode(data[:1], plain)[0].transpose(1, 2, 0))
    # The centre crop of a 500 × 500 image is its middle 438 × 438 pixels
    # (500 → 256, then 224): PIL's resize of that box, within rounding.
    centre = loaderx.Image(224, crop="center", flip=0.0, layout="HWC")
    got = images.decode(data[:1], centre)[0].astype(int)
    box = PIL.fromarray(a).crop((31, 31, 469, 469)).resize((224, 224), PIL.BILINEAR)
    assert np.abs(got - np.asarray(box).astype(int)).mean() < 0.5


def test_bad_data_raises_naming_the_record_or_becomes_zeros():
    good = encode(PHOTOS["chelsea"], "JPEG", quality=90)
    bad = [b"", b"not an image", good[: len(good) // 3], b"\x89PNG\r\n\x1a\n" + b"\0" * 40]
    for i, b in enumerate(bad):
        with pytest.raises(ValueError, match=f"record {i + 7}: not a decodable image"):
            images.decode([good, b], loaderx.Image(32), ids=[0, i + 7])
    out, ok = images.decode([good, *bad], loaderx.Image(32, on_error="zeros"))
    assert ok.tolist() == [True] + [False] * len(bad)
    assert out[0].any() and not out[1:].any()
    with pytest.raises(TypeError, match=r"values\[1\] must be bytes"):
        images.decode([good, 3], loaderx.Image(32))


def test_mutated_images_never_stop_the_process():
    rng = np.random.default_rng(5)
    sources = [
        encode(PHOTOS["rocket"], "JPEG", quality=80),
        encode(PHOTOS["rocket"], "JPEG", quality=80, progressive=True),
        encode(PHOTOS["coffee"][:64, :64], "PNG"),
        encode(PHOTOS["coffee"][:64, :64], "WEBP", quality=70),
    ]
    values = []
    for src in sources:
        for _ in range(60):
            b = bytearray(src)
            for _ in range(int(rng.integers(1, 12))):
                b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
            if rng.random() < 0.3:
                b = b[: int(rng.integers(1, len(b)))]
            values.append(bytes(b))
    out, ok = images.decode(values, loaderx.Image(48, on_error="zeros"))
    assert out.shape == (len(values), 3, 48, 48)
    assert not out[~ok].any()


def test_bad_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="crop must be"):
        loaderx.Image(224, crop="square")
    with pytest.raises(ValueError, match="scale must be"):
        loaderx.Image(224, scale=(0.5, 2.0))
    with pytest.raises(ValueError, match="ratio must be"):
        loaderx.Image(224, ratio=(2.0, 1.0))
    with pytest.raises(ValueError, match="flip must be"):
        loaderx.Image(224, flip=1.5)
    with pytest.raises(ValueError, match="layout must be"):
        loaderx.Image(224, layout="CWH")
    with pytest.raises(TypeError, match="size must be"):
        loaderx.Image("224")
    with pytest.raises(ValueError, match="size must be positive"):
        loaderx.Image((0, 4))
    assert loaderx.Image(224) == loaderx.Image((224, 224))
    assert "crop='random'" in repr(loaderx.Image(224))


def make_folder(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def test_ingest_folder_reads_an_imagefolder_tree(tmp_path):
    jpg = encode(PHOTOS["chelsea"], "JPEG", quality=90)
    png = encode(PHOTOS["coffee"][:40, :50], "PNG")
    webp = encode(PHOTOS["rocket"][:30, :20], "WEBP", lossless=True)
    root = tmp_path / "root"
    make_folder(
        root,
        {
            "zebra/b.JPG": jpg,
            "zebra/a.png": png,
            "zebra/notes.txt": b"not an image",
            "ant/deep/x.WebP": webp,
            "ant/y.jpeg": jpg,
            "bee/.keep": b"",
        },
    )
    t = images.ingest_folder(root, str(tmp_path / "t"), workers=2)
    try:
        assert t.metadata == {"classes": ["ant", "bee", "zebra"]}
        assert set(t) == {"image", "label", "height", "width", "path"}
        # torchvision's order: folders walked in sorted order, files sorted.
        assert t["path"][:] == ["ant/y.jpeg", "ant/deep/x.WebP", "zebra/a.png", "zebra/b.JPG"]
        assert t["label"][:].tolist() == [0, 0, 2, 2]
        assert t["height"][:].tolist() == [333, 30, 40, 333]
        assert t["width"][:].tolist() == [500, 20, 50, 500]
        assert t["image"][[0]][0] == jpg
        batch = images.decode(t["image"], whole(30, 20, on_error="zeros"))[0]
        assert batch.shape == (4, 30, 20, 3)
    finally:
        t.close()


def test_ingest_folder_refuses_an_undecodable_file_or_skips_it(tmp_path):
    good = encode(PHOTOS["coffee"][:32, :32], "PNG")
    broken = encode(PHOTOS["chelsea"], "JPEG", quality=90)[:2000]
    root = tmp_path / "root"
    make_folder(root, {"a/ok.png": good, "b/broken.jpg": broken, "b/ok.png": good})
    with pytest.raises(ValueError, match=r"^'b/broken.jpg' in .* is not a decodable image: ") as e:
        images.ingest_folder(root, str(tmp_path / "t"))
    # The error as raised: not wrapped by the Arrow stream that carried it.
    assert str(e.value).count("not a decodable image") == 1 and "Traceback" not in str(e.value)
    assert not os.path.exists(tmp_path / "t" / "manifest.json"), "nothing committed"
    with images.ingest_folder(root, str(tmp_path / "t"), on_error="skip") as t:
        assert t.num_rows == 2 and t["path"][:] == ["a/ok.png", "b/ok.png"]
        assert t.metadata == {"classes": ["a", "b"], "skipped": ["b/broken.jpg"]}
    with pytest.raises(FileNotFoundError):
        images.ingest_folder(tmp_path / "nowhere", str(tmp_path / "u"))
    with pytest.raises(ValueError, match="on_error must be"):
        images.ingest_folder(root, str(tmp_path / "u"), on_error="ignore")


@pytest.fixture
def pets(tmp_path):
    """A table of 12 photos in two classes, from ingest_folder."""
    root = tmp_path / "root"
    files = {}
    for i, (name, a) in enumerate(list(PHOTOS.items()) * 2):
        files[f"{'cat' if i % 2 else 'dog'}/{i:02d}-{name}.jpg"] = encode(a, "JPEG", quality=85)
    make_folder(root, files)
    return images.ingest_folder(root, str(tmp_path / "pets"), workers=2)


def test_the_loader_decodes_on_its_threads_and_resumes_exactly(pets):
    from loaderx.dataloader import DataLoader, record_seeds

    img = loaderx.Image(40)
    with pets as t, DataLoader(t, batch_size=4, seed=3, decode={"image": img}) as run:
        first = [next(run) for _ in range(3)]
        state = run.state_dict()
        want = [next(run) for _ in range(3)]
        assert state["decode"] == {
            "image": {
                "size": [40, 40],
                "crop": "random",
                "scale": [0.08, 1.0],
                "ratio": [0.75, 4 / 3],
                "flip": 0.5,
                "layout": "CHW",
                "on_error": "raise",
            }
        }
        b = first[1]
        assert b["image"].shape == (4, 3, 40, 40) and b["image"].dtype == np.uint8
        # The batch is images.decode of its records with their record seeds.
        ids = run.indices(1)
        values = t["image"][ids]
        again = images.decode(values, img, seeds=record_seeds(3, 1, ids))
        np.testing.assert_array_equal(b["image"], again)
        assert b["label"].tolist() == t["label"][ids].tolist()
        prov = run.provenance(range(2))
        assert prov.column_names[-2:] == ["image_box", "image_flip"]
        boxes = np.array(prov["image_box"].to_pylist())
        heights = t["height"][prov["record_id"].to_numpy()]
        assert (boxes[:, 0] + boxes[:, 2] <= heights).all() and (boxes[:, 2] > 0).all()
    with loaderx.open_table(t.path) as t2:
        with DataLoader(t2, batch_size=4, seed=3, decode={"image": img}) as resumed:
            resumed.load_state_dict(state)
            for w, g in zip(want, (next(resumed) for _ in range(3))):
                np.testing.assert_array_equal(w["image"], g["image"])
        other = {"image": loaderx.Image(40, flip=0.0)}
        with DataLoader(t2, batch_size=4, seed=3, decode=other) as wrong:
            with pytest.raises(ValueError, match=r"state\['decode'\] is"):
                wrong.load_state_dict(state)
        with DataLoader(t2, batch_size=4, seed=3) as plain:
            with pytest.raises(ValueError, match=r"state\['decode'\]"):
                plain.load_state_dict(state)
    with DataLoader.from_state(state, decode={"image": img}) as again:
        np.testing.assert_array_equal(next(again)["image"], want[0]["image"])


def test_grain_and_hugging_face_datasets_get_the_decoded_images(pets):
    """The hand-off the guide shows: Grain's pipeline over
    loaderx.grain.DataSource and a datasets.Dataset from loaderx.hf.to_hf
    decode their batches with images.decode (one call per batch) and get
    exactly the images of the table's bytes, with the labels beside."""
    grain = pytest.importorskip("grain.python")
    pytest.importorskip("datasets")
    from loaderx.grain import DataSource
    from loaderx.hf import to_hf

    center = loaderx.Image(48, crop="center", flip=0)
    rows = np.arange(pets.num_rows)
    raw = [bytes(v) for v in pets["image"][rows]]
    labels = pets["label"][rows]
    want = images.decode(raw, center)
    assert want.shape == (12, 3, 48, 48)

    def decode_batch(records):
        return {
            "image": images.decode([r["image"] for r in records], center),
            "label": np.array([r["label"] for r in records]),
        }

    source = DataSource(pets, columns=["image", "label"])
    batches = grain.MapDataset.source(source).batch(5, batch_fn=decode_batch)
    got = [batches[i] for i in range(len(batches))]
    assert [b["image"].shape[0] for b in got] == [5, 5, 2]
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in got]), want)
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in got]), labels)

    hf = to_hf(pets, columns=["image", "label"])
    hf.set_transform(lambda b: {"image": images.decode(b["image"], center), "label": b["label"]})
    part = hf[3:9]
    np.testing.assert_array_equal(part["image"], want[3:9])
    assert list(part["label"]) == labels[3:9].tolist()


def test_a_corrupt_image_in_the_loader_raises_naming_it_or_is_zeros(tmp_path):
    from loaderx.dataloader import DataLoader

    good = encode(PHOTOS["coffee"][:60, :80], "JPEG", quality=90)
    values = [good, good, b"\xff\xd8\xff broken", good]
    path = str(tmp_path / "t")
    loaderx.ingest_sharded(
        pa.table({"image": pa.array(values, pa.binary()), "label": np.arange(4)}),
        path,
        workers=1,
        layout={"image": "records"},
    ).close()
    with loaderx.open_table(path) as t:
        with DataLoader(
            t, batch_size=4, mode="sequential", decode={"image": loaderx.Image(16)}, workers=0
        ) as run:
            with pytest.raises(ValueError, match="record 2: not a decodable image"):
                next(run)
        zeros = {"image": loaderx.Image(16, on_error="zeros")}
        with DataLoader(t, batch_size=4, mode="sequential", decode=zeros) as run:
            b = next(run)
            assert list(b) == ["image", "label", "image_ok"]
            assert b["image_ok"].tolist() == [True, True, False, True]
            assert not b["image"][2].any() and b["image"][3].any()
        with pytest.raises(ValueError, match="decode names column 'img'"):
            DataLoader(t, batch_size=2, decode={"img": loaderx.Image(16)})
        with pytest.raises(ValueError, match="must be a binary column"):
            DataLoader(t, batch_size=2, decode={"label": loaderx.Image(16)})
        with pytest.raises(TypeError, match="must be a loaderx.Image"):
            DataLoader(t, batch_size=2, decode={"image": 16})


def test_arrow_output_gives_a_fixed_shape_tensor_column(tmp_path):
    from loaderx.dataloader import DataLoader

    good = encode(PHOTOS["coffee"][:60, :80], "JPEG", quality=90)
    path = str(tmp_path / "t")
    values = [good, b"broken", good, good]
    loaderx.ingest_sharded(
        pa.table({"image": pa.array(values, pa.binary()), "label": np.arange(4)}),
        path,
        workers=1,
        layout={"image": "records"},
    ).close()
    img = {"image": loaderx.Image((12, 16), layout="HWC", on_error="zeros")}
    with loaderx.open_table(path) as t:
        with (
            DataLoader(t, batch_size=4, seed=1, decode=img) as arrays,
            DataLoader(t, batch_size=4, seed=1, decode=img, output="arrow") as arrow,
        ):
            for _ in range(2):
                a, b = next(arrays), next(arrow)
                assert b.schema.names == ["image", "label", "image_ok"]
                field = b.schema.field("image")
                # pyarrow reads the canonical extension as a tensor type.
                assert isinstance(field.type, pa.FixedShapeTensorType)
                assert field.type.shape == [12, 16, 3] and field.type.value_type == pa.uint8()
                tensors = b.column("image").to_numpy_ndarray()
                np.testing.assert_array_equal(tensors, a["image"])
                assert b.column("image_ok").to_pylist() == a["image_ok"].tolist()
                assert b.column("label").to_pylist() == a["label"].tolist()


def test_a_mix_decodes_each_sources_images_with_its_record_seeds(tmp_path):
    from loaderx._transform import _row_record_seeds
    from loaderx.dataloader import DataLoader
    from loaderx.mixture import Mix, source_seed

    tables = {}
    for k, names in enumerate((("astronaut", "chelsea", "coffee"), ("rocket", "sample0"))):
        path = str(tmp_path / f"t{k}")
        blobs = [encode(PHOTOS[n], "JPEG", quality=85) for n in names]
        loaderx.ingest_sharded(
            pa.table(
                {
                    "image": pa.array(blobs, pa.binary()),
                    "height": pa.array([PHOTOS[n].shape[0] for n in names], pa.int32()),
                    "width": pa.array([PHOTOS[n].shape[1] for n in names], pa.int32()),
                }
            ),
            path,
            workers=1,
            layout={"image": "records"},
        ).close()
        tables[f"s{k}"] = loaderx.open_table(path)
    img = loaderx.Image(24)
    mix = Mix(tables, {"s0": 1.0, "s1": 1.0})
    try:
        with DataLoader(mix, batch_size=4, seed=5, decode={"image": img}) as run:
            batches = [next(run) for _ in range(3)]
            prov = run.provenance(range(3))
            state = run.state_dict()
            after = next(run)
        for step, b in enumerate(batches):
            assert b["image"].shape == (4, 3, 24, 24)
            rows = prov.filter(pa.compute.equal(prov["step"], step))
            ids = rows["record_id"].to_numpy()
            sources = b["source"]
            seeds = np.array([source_seed(5, f"s{s}") for s in sources], dtype=np.uint64)
            for i, (s, rec) in enumerate(zip(sources, ids)):
                value = tables[f"s{s}"]["image"][[int(rec)]]
                seed = _row_record_seeds(seeds[i : i + 1], step, [rec])
                np.testing.assert_array_equal(
                    b["image"][i], images.decode(value, img, seeds=seed)[0]
                )
            boxes = np.array(rows["image_box"].to_pylist())
            assert (boxes[:, 2] > 0).all() and (boxes[:, 3] > 0).all()
        with DataLoader(
            Mix(tables, {"s0": 1.0, "s1": 1.0}), batch_size=4, seed=5, decode={"image": img}
        ) as again:
            again.load_state_dict(state)
            np.testing.assert_array_equal(next(again)["image"], after["image"])
    finally:
        for t in tables.values():
            t.close()


def hf_parquet(path, rows: list[tuple[bytes | None, str, int]], **kw) -> None:
    """A Parquet file as Hugging Face ``datasets`` writes an image dataset:
    ``image`` a struct {bytes, path}, ``label`` a ClassLabel (its names in
    the schema's ``huggingface`` metadata) and a caption."""
    import json

    import pyarrow.parquet as pq

    image = pa.array(
        [{"bytes": b, "path": p} for b, p, _ in rows],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )
    features = {
        "image": {"_type": "Image"},
        "label": {"names": ["cat", "dog"], "_type": "ClassLabel"},
        "caption": {"dtype": "string", "_type": "Value"},
    }
    table = pa.table(
        {
            "caption": [f"photo {i}" for i in range(len(rows))],
            "image": image,
            "label": pa.array([label for *_, label in rows], pa.int64()),
        }
    ).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, path, **kw)


def test_ingest_parquet_reads_hugging_face_image_datasets(tmp_path):
    jpg = encode(PHOTOS["chelsea"], "JPEG", quality=90)
    png = encode(PHOTOS["coffee"][:40, :50], "PNG")
    folder = tmp_path / "data"
    folder.mkdir()
    hf_parquet(folder / "train-00000.parquet", [(jpg, "a.jpg", 1), (png, "b.png", 0)])
    hf_parquet(folder / "train-00001.parquet", [(png, "c.png", 1)], row_group_size=1)
    t = images.ingest_parquet(folder, str(tmp_path / "t"), workers=2)
    try:
        assert t.metadata == {"classes": ["cat", "dog"]}
        assert sorted(t) == ["caption", "height", "image", "label", "path", "width"]
        assert t["caption"][:] == ["photo 0", "photo 1", "photo 0"]
        assert t["path"][:] == ["a.jpg", "b.png", "c.png"]
        assert t["label"][:].tolist() == [1, 0, 1]
        assert t["height"][:].tolist() == [333, 40, 40]
        assert t["width"][:].tolist() == [500, 50, 50]
        assert t["image"][[0, 2]] == [jpg, png]
        decoded = images.decode(t["image"][[1]], whole(40, 50))
        assert np.array_equal(decoded[0], pil_rgb(png))
    finally:
        t.close()


def test_ingest_parquet_refuses_a_bad_image_or_skips_it(tmp_path):
    good = encode(PHOTOS["coffee"][:32, :32], "PNG")
    broken = encode(PHOTOS["chelsea"], "JPEG", quality=90)[:2000]
    src = tmp_path / "train.parquet"
    hf_parquet(src, [(good, "ok.png", 0), (broken, "broken.jpg", 1), (None, "gone.png", 1)])
    with pytest.raises(
        ValueError, match=r"^'.*train.parquet' row 1 \(path 'broken.jpg'\) is not a dec"
    ) as e:
        images.ingest_parquet(src, str(tmp_path / "t"))
    assert str(e.value).count("not a decodable image") == 1 and "Traceback" not in str(e.value)
    assert not os.path.exists(tmp_path / "t" / "manifest.json"), "nothing committed"
    with images.ingest_parquet(src, str(tmp_path / "t"), on_error="skip") as t:
        assert t.num_rows == 1 and t["path"][:] == ["ok.png"]
        assert t.metadata["skipped"] == ["train.parquet[1]", "train.parquet[2]"]
    with pytest.raises(ValueError, match="column 'picture' is not in"):
        images.ingest_parquet(src, str(tmp_path / "u"), column="picture")
    with pytest.raises(TypeError, match="column 'caption' must be binary or a struct"):
        images.ingest_parquet(src, str(tmp_path / "u"), column="caption")
    with pytest.raises(FileNotFoundError):
        images.ingest_parquet(tmp_path / "nowhere.parquet", str(tmp_path / "u"))
    # A second file whose label is another type: refused as raised, nothing committed.
    import pyarrow.parquet as pq

    other = tmp_path / "more.parquet"
    table = pq.read_table(src).slice(0, 1)
    pq.write_table(table.set_column(2, "label", pa.array(["cat"])), other)
    with pytest.raises(ValueError, match=r"^'.*more.parquet' has columns .* every file must have"):
        images.ingest_parquet([src, other], str(tmp_path / "u"), on_error="skip")
    assert not os.path.exists(tmp_path / "u")
