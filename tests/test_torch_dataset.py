"""The output as torch datasets (``op.torch_dataset``), consumed by ``torch.utils.data.DataLoader``
with worker processes; and the documented TorchRL recipe (docs/api.md, "Torch"), where TorchRL is
importable. Skipped where torch is absent (CI installs a CPU build)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO

import offline_prelearner as op
from offline_prelearner.errors import ConfigError

torch = pytest.importorskip("torch")
from torch.utils.data import BatchSampler, DataLoader, RandomSampler  # noqa: E402

ROWS = REPO / "datasets/cartpole-v1/rows"


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("torch") / "out"
    op.run_pipeline(ROWS, {"n_step": 3}, out_dir=out, engine="local")
    return out


def test_a_samples_folder_is_map_style_and_loads_with_workers(samples: Path) -> None:
    ds = op.torch_dataset(samples)
    want = op.read_samples(samples)
    assert len(ds) == 5000 and "eps_id" not in ds.columns  # strings are left out
    row = ds[7]
    assert row["obs"].shape == (4,) and torch.equal(row["obs"], torch.tensor(want["obs"][7]))
    loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2)
    batches = list(loader)
    assert batches[0]["obs"].shape == (256, 4) and batches[0]["obs"].dtype == torch.float32
    assert sum(len(b["rewards"]) for b in batches) == 5000
    got = torch.cat([b["rewards"] for b in batches]).sum().item()
    assert got == pytest.approx(float(want["rewards"].sum()))
    # a batch per request: one numpy gather per column, no per-row collate
    sampler = BatchSampler(RandomSampler(ds), batch_size=1000, drop_last=False)
    whole = list(DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2))
    assert [len(b["obs"]) for b in whole] == [1000] * 5
    seen = np.sort(torch.cat([b["indices"] for b in whole]).numpy())
    np.testing.assert_array_equal(seen, np.sort(want["indices"]))


def test_samples_take_no_stream_settings(samples: Path) -> None:
    with pytest.raises(ConfigError, match="kind='stream'"):
        op.torch_dataset(samples, config={"n_step": 3})


@pytest.mark.ray
def test_the_learner_stream_is_iterable(ray_local: Any) -> None:
    one_file = ROWS / "cartpole-v1-rows-00000.parquet"  # 1,000 rows, its last episode open
    config = {"n_step": 3, "sample_all": True, "train_batch_size": 200}
    stream = op.torch_dataset(one_file, config=config, columns=["obs", "actions", "n_step"])
    assert isinstance(stream, torch.utils.data.IterableDataset)
    batches = list(DataLoader(stream, batch_size=None))
    ended = op.inspect(one_file)["timesteps"]  # of its complete episodes (the open one skipped)
    assert sum(len(b["obs"]) for b in batches) == ended  # sample_all: every transition once
    assert set(batches[0]) == {"obs", "actions", "n_step"} and len(batches[0]["obs"]) == 200


def test_a_torchrl_replay_buffer_fills_from_the_output(samples: Path) -> None:
    """The recipe of docs/api.md: the samples as one TensorDict, extended into a buffer."""
    pytest.importorskip("torchrl")
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    cols = op.to_torch(op.read_samples(samples))
    data = TensorDict(cols, batch_size=[len(cols["obs"])])
    buffer = ReplayBuffer(storage=LazyTensorStorage(len(data)), batch_size=64)
    buffer.extend(data)
    batch = buffer.sample()
    assert len(buffer) == 5000 and batch["obs"].shape == (64, 4)
