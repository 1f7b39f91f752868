"""Seeds at the edges (``replay/build.py``): each module of one run draws its own stream, the same
in every process."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from buffer_helpers import make_episode

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.replay.build import _stable_hash, build_buffer

PAIRS = [("learner_a", "learner_b"), ("default_policy", "default_policy_2")]


def _draws(module_id: str) -> np.ndarray:
    buf = build_buffer(PreLearnerConfig.coerce({"seed": 7}), module_id)
    buf.add([make_episode(i, 30, seed=i) for i in range(4)])
    return np.asarray(buf.sample(64)["obs"])


@pytest.mark.parametrize(("a", "b"), PAIRS)
def test_modules_sharing_a_prefix_draw_different_streams(a: str, b: str) -> None:
    # The hash read only the first 8 bytes of the id: these pairs got one stream.
    assert _stable_hash(a) != _stable_hash(b)
    assert not np.array_equal(_draws(a), _draws(b))
    np.testing.assert_array_equal(_draws(a), _draws(a))


def test_module_seed_is_the_same_in_another_process() -> None:
    ids = [m for pair in PAIRS for m in pair]
    code = (
        "from offline_prelearner.replay.build import _stable_hash as h;"
        f"print([h(m) for m in {ids!r}])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str([_stable_hash(m) for m in ids])
    assert all(0 <= _stable_hash(m) < 2**62 for m in ids)


# ------------------------------------------------------------------ the typed sections, built
def test_each_buffer_kind_is_built_from_its_own_section() -> None:
    from offline_prelearner import MixInReplayBuffer, Prioritized, Reservoir, Uniform

    base = PreLearnerConfig()
    prio = build_buffer(base.with_updates({"kind": "prioritized", "alpha": 0.7, "eps": 1e-3}), "m")
    assert isinstance(prio.sampler, Prioritized)
    assert (prio.sampler.alpha, prio.sampler.beta, prio.sampler.eps) == (0.7, 0.4, 1e-3)
    mixin = build_buffer(base.with_updates({"kind": "mixin", "replay_ratio": 0.25}), "m")
    assert isinstance(mixin, MixInReplayBuffer) and mixin.replay_ratio == 0.25
    res = build_buffer(base.with_updates({"kind": "reservoir"}), "m")
    assert isinstance(res.eviction, Reservoir) and isinstance(res.sampler, Uniform)
    uni = build_buffer(base, "m")
    assert type(uni.sampler) is Uniform and uni.eviction is None
    assert not isinstance(uni, MixInReplayBuffer)


@pytest.mark.parametrize(
    ("sample", "want"),
    [
        ({}, "Transition"),
        ({"n_step": 3}, "NStep"),
        ({"unit": "sequence", "sample.sequence": {"seq_len": 5, "burn_in": 2}}, "Sequence"),
        ({"unit": "sequence", "n_step": 3, "frame_stack": 2}, "FrameStack"),
    ],
)
def test_the_unit_follows_the_sample_section(sample: dict, want: str) -> None:
    from offline_prelearner.replay.build import build_unit

    config = PreLearnerConfig().with_updates(sample)
    unit = build_unit(config.sample)
    assert type(unit).__name__ == want
    inner = getattr(unit, "unit", unit)
    if config.sample.sequence is not None:  # a sequence unit: n_step does not apply
        seq = config.sample.sequence
        assert type(inner).__name__ == "Sequence"
        assert (inner.length, inner.burn_in) == (seq.seq_len, seq.burn_in)
    buf = build_buffer(config, "m")
    buf.add([make_episode(i, 30, seed=i) for i in range(4)])
    batch = buf.sample(8)
    if want == "Sequence":
        assert np.asarray(batch["obs"]).shape[:2] == (8, 7)  # burn_in + seq_len steps
