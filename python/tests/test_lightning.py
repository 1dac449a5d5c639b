"""A loaderx DataLoader fed to a real Lightning Trainer through
``loaderx.torch.Epochs``: the Trainer iterates passes of ``len()`` batches,
saves the loader's ``state_dict()`` in its checkpoints and, resumed from a
checkpoint taken mid-epoch, restores it with ``load_state_dict()``, so the
resumed run trains on exactly the batches the uninterrupted run would have."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

import loaderx  # noqa: E402
from loaderx.dataloader import DataLoader  # noqa: E402
from loaderx.torch import Epochs, as_tensors  # noqa: E402

N, BATCH, STEPS_PER_EPOCH = 64, 4, 5


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    """Record i holds i in `id` and a 3-vector of i in `x`."""
    root = tmp_path_factory.mktemp("lightning") / "table"
    ids = np.arange(N, dtype=np.int64)
    with loaderx.DenseStore.create(root / "id", np.int64, ()) as s:
        s.append(ids)
    with loaderx.DenseStore.create(root / "x", np.float32, (3,)) as s:
        s.append(np.repeat(ids[:, None], 3, axis=1).astype(np.float32))
    return str(root)


class Model(L.LightningModule):
    """Records the ids of every batch it trains on."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["id"].tolist())
        assert torch.equal(batch["x"][:, 0].long(), batch["id"])
        return self.layer(batch["x"] / N).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(max_steps, callbacks=()):
    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=list(callbacks),
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )


def loader(table_path):
    return DataLoader(
        loaderx.open_table(table_path), batch_size=BATCH, seed=7, transform=as_tensors
    )


def test_a_trainer_resumes_mid_epoch_on_the_batches_it_would_have_trained(table_path, tmp_path):
    total = 2 * STEPS_PER_EPOCH + 2  # two epochs and part of a third
    with loader(table_path) as reference:
        want = [next(reference)["id"].tolist() for _ in range(total)]

    ckpt = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}"
    )
    with loader(table_path) as first:
        model = Model()
        trainer(total, [ckpt]).fit(model, train_dataloaders=Epochs(first, STEPS_PER_EPOCH))
        # Lightning trained on the loader's batches in order, reading none
        # ahead: the loader stands at the step the trainer reached.
        assert model.seen == want
        assert first.state_dict()["step"] == total

    # Step 9 lies inside the second epoch (steps 6-10): resume there.
    path = tmp_path / "step=9.ckpt"
    saved = torch.load(path, weights_only=False)
    assert saved["global_step"] == 9
    with loader(table_path) as second:
        model = Model()
        trainer(total).fit(
            model, train_dataloaders=Epochs(second, STEPS_PER_EPOCH), ckpt_path=str(path)
        )
        assert model.seen == want[9:]
        assert second.state_dict()["step"] == total
