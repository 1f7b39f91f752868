"""The learner stream with epochs (``epoch_learner_batches``) on Ray and the shipped CartPole rows:
every sample once per epoch, an order that is a function of (seed, epoch) whatever the number of
actors, and a stream stopped (or killed) mid-epoch that resumes, with as many learners or other
numbers of them, into one uninterrupted epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner import epoch_learner_batches
from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.stream.epochs import EpochStream

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = REPO / "datasets/cartpole-v1/rows"
CONFIG = {"sample_all": True}
SHUFFLE_ROWS = 2500  # 5 files of 1000 rows: 3 windows (2 + 2 + 1 units)
Key = tuple[str, int]


def _stream(**kw: Any) -> EpochStream:
    config = {**CONFIG, **kw.pop("config", {})}
    kw = {"seed": 11, "shuffle_rows": SHUFFLE_ROWS, **kw}
    return epoch_learner_batches(kw.pop("path", ROWS), config, **kw)


def _batches(stream: EpochStream, stop: int | None = None) -> list[list[Key]]:
    """The keys of each batch the stream hands out (``stop`` batches, or to the end)."""
    out = []
    for batch in stream:
        sb = batch["default_policy"]
        out.append(list(zip(sb["eps_id"].tolist(), sb["t"].tolist(), strict=True)))
        if len(out) == stop:
            break
    return out


def _rounds(per_learner: list[list[list[Key]]]) -> list[list[Key]]:
    """The learners' batches in global order: round after round, learner 0 first."""
    out = []
    for k in range(max(map(len, per_learner))):
        out += [m[k] for m in per_learner if k < len(m)]
    return out


@pytest.fixture(scope="module")
def epoch0_batches(ray_local: Any) -> list[Any]:
    """One uninterrupted epoch 0, one task at a time: its SampleBatches."""
    return [batch["default_policy"] for batch in _stream()]


@pytest.fixture(scope="module")
def epoch0(epoch0_batches: list[Any]) -> list[list[Key]]:
    """The keys of each batch of epoch 0."""
    return [
        list(zip(sb["eps_id"].tolist(), sb["t"].tolist(), strict=True)) for sb in epoch0_batches
    ]


def test_an_epoch_is_every_row_once_as_a_plain_loop_reads_them(epoch0_batches: list[Any]) -> None:
    expected = {}  # (eps_id, t) -> (action, reward, obs): each row of complete episodes
    for f in sorted(ROWS.iterdir()):
        for row in pq.read_table(f).to_pylist():
            expected[row["eps_id"], row["t"]] = (row["actions"], row["rewards"], row["obs"])
    seen = {}
    sizes = []
    for sb in epoch0_batches:
        sizes.append(len(sb))
        for e, t, a, r, o in zip(
            sb["eps_id"], sb["t"], sb["actions"], sb["rewards"], sb["obs"], strict=True
        ):
            assert (e, int(t)) not in seen
            seen[e, int(t)] = (int(a), float(r), o)
    assert seen.keys() == expected.keys()
    for k, (a, r, o) in seen.items():
        assert (a, r) == expected[k][:2]
        np.testing.assert_allclose(o, expected[k][2], rtol=1e-6)
    assert sizes[:-1] == [256] * (len(sizes) - 1) and 0 < sizes[-1] <= 256
    # Shuffled across files: the first batch holds samples of several files' episodes.
    assert len({e for e, _ in list(seen)[:256]}) > 5


def test_the_order_is_the_seeds_and_epochs_whatever_the_concurrency(
    epoch0: list[list[Key]],
) -> None:
    assert _batches(_stream(config={"ray.concurrency": 2})) == epoch0
    other = _batches(_stream(epoch=1))
    assert other != epoch0
    assert Counter(k for b in other for k in b) == Counter(k for b in epoch0 for k in b)


def test_one_learner_stopped_and_resumed_is_one_epoch(epoch0: list[list[Key]]) -> None:
    stream = _stream()
    first = _batches(stream, stop=9)
    state = json.loads(json.dumps(stream.state_dict()))
    assert state["batches"] == 9 and state["window"] >= 1  # the first window is not read again
    again = _stream()
    again.load_state_dict(state)
    assert first + _batches(again) == epoch0


def test_three_learners_resume_as_three_or_two(epoch0: list[list[Key]]) -> None:
    streams = [_stream(num_learners=3, rank=r) for r in range(3)]
    first = [_batches(s, stop=3) for s in streams]
    states = [s.state_dict() for s in streams]
    assert {s["batches"] for s in states} == {9}  # the group's position, whichever learner
    # The same group from learner 0's state, and an elastic resume with fewer from learner 2's.
    for learners, state in ((3, states[0]), (2, states[2])):
        rest = []
        for r in range(learners):
            s = _stream(num_learners=learners, rank=r)
            s.load_state_dict(state)
            rest.append(_batches(s))
        assert _rounds(first) + _rounds(rest) == epoch0


def test_a_state_of_another_dataset_or_config_is_refused_in_one_line(ray_local: Any) -> None:
    state = _stream().state_dict()
    files = sorted(str(f) for f in ROWS.iterdir())
    for other in (
        _stream(path=files[:4]),
        _stream(config={"train_batch_size": 128}),
        _stream(shuffle_rows=5000),
    ):
        with pytest.raises(ConfigError, match="another dataset or config") as e:
            other.load_state_dict(state)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="seed 11"):
        _stream(seed=12).load_state_dict(state)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"config": {"sample_all": False}}, "sample_all"),
        ({"config": {"num_samples": 10}}, "num_samples"),
        ({"rank": 2, "num_learners": 2}, "rank"),
        ({"shuffle_rows": 0}, "shuffle_rows"),
    ],
)
def test_refused_settings(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _stream(**kw)


LEARNER = """
import json, os, sys, time
from offline_prelearner import epoch_learner_batches
out = sys.argv[1]
stream = epoch_learner_batches({rows!r}, {config!r}, seed=11, shuffle_rows={shuffle})
seen = []
for batch in stream:
    sb = batch["default_policy"]
    seen.append(list(zip(sb["eps_id"].tolist(), sb["t"].tolist())))
    if len(seen) == 9:  # a checkpoint: the batches trained on and the stream's state
        with open(out + ".tmp", "w") as f:
            json.dump({{"seen": seen, "state": stream.state_dict()}}, f)
        os.replace(out + ".tmp", out)
    if len(seen) > 9:
        time.sleep(0.5)  # training on, until killed
"""


def test_a_learner_killed_after_its_checkpoint_resumes_in_a_new_process(
    epoch0: list[list[Key]], ray_local: Any, tmp_path: Path
) -> None:
    script = tmp_path / "learner.py"
    script.write_text(LEARNER.format(rows=str(ROWS), config=CONFIG, shuffle=SHUFFLE_ROWS))
    checkpoint = tmp_path / "checkpoint.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address,  # join the tests' Ray
    }
    proc = subprocess.Popen([sys.executable, str(script), str(checkpoint)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert checkpoint.exists(), f"the learner wrote no checkpoint (exit {proc.poll()})"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    saved = json.loads(checkpoint.read_text())
    stream = _stream()
    stream.load_state_dict(saved["state"])
    seen = [[(e, t) for e, t in b] for b in saved["seen"]]
    assert seen + _batches(stream) == epoch0
