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
