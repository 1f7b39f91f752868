"""spaces: gymnasium spaces <-> RLlib's dict layout, and safe decoding of untrusted space dicts."""

from __future__ import annotations

import base64
import io
import json
import os
import zlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import msgpack
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.errors import DecodeError
from offline_prelearner.spaces import space_from_dict, space_to_dict

SPACES = [
    gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    gym.spaces.Box(np.array([0, -np.inf]), np.array([1, np.inf]), dtype=np.float64),
    gym.spaces.Box(0, 255, (84, 84, 4), np.uint8),
    gym.spaces.Discrete(2),
    gym.spaces.Discrete(5, start=-2),
    gym.spaces.MultiBinary(4),
    gym.spaces.MultiBinary([2, 3]),
    gym.spaces.MultiDiscrete([3, 4, 5]),
    gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,))]),
    gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-5, 5, (2,)),
            "id": gym.spaces.Discrete(7),
            "nested": gym.spaces.Tuple([gym.spaces.MultiBinary(2)]),
        }
    ),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_round_trip_through_json(space: gym.Space[Any]) -> None:
    d = space_to_dict(space)
    back = space_from_dict(json.loads(json.dumps(d)))  # JSON-able, as RLlib stores them
    assert back == space
    assert str(back) == str(space)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=6),
    st.floats(0, 1e3),
    st.sampled_from([np.float32, np.float64, np.int32]),
)
def test_box_bounds_round_trip(low: list[float], width: float, dtype: Any) -> None:
    lo = np.asarray(low, dtype=dtype)
    space = gym.spaces.Box(lo, (lo + np.asarray(width)).astype(dtype), dtype=dtype)
    back = space_from_dict(space_to_dict(space))
    assert back.dtype == space.dtype and back.shape == space.shape
    assert np.array_equal(back.low, space.low) and np.array_equal(back.high, space.high)


def test_none_passes_through() -> None:
    assert space_to_dict(None) is None and space_from_dict(None) is None


@pytest.mark.rllib_data
def test_spaces_rllib_wrote(shared_data: Path) -> None:
    item = pq.read_table(shared_data / "cartpole-v1_episodes_msgpack.parquet").column("item")[0]
    state = msgpack.unpackb(item.as_py(), raw=False)
    obs = space_from_dict(state["_observation_space"])
    act = space_from_dict(state["_action_space"])
    assert isinstance(obs, gym.spaces.Box) and obs.shape == (4,) and obs.dtype == np.float32
    assert obs.high[0] == pytest.approx(4.8) and obs.high[1] == np.inf
    assert act == gym.spaces.Discrete(2)
    reward_space = space_from_dict(state["rewards"]["space"])
    assert isinstance(reward_space, gym.spaces.Box) and reward_space.shape == ()


def pickled_npy(path: Path) -> str:
    """An .npy payload holding a pickled object array whose unpickling creates ``path``."""

    class Mkdir:
        def __reduce__(self) -> Any:
            return (os.mkdir, (str(path),))

    buf = io.BytesIO()
    np.save(buf, np.array([Mkdir()], dtype=object), allow_pickle=True)
    return base64.b64encode(zlib.compress(buf.getvalue())).decode()


def test_pickled_space_arrays_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    d = space_to_dict(SPACES[0])
    d["low"] = pickled_npy(marker)
    with pytest.raises(DecodeError) as info:
        space_from_dict(d)
    assert info.value.reason == "bad_space"
    assert not marker.exists()
    # Control: RLlib's way of loading (allow_pickle=True) would have run it.
    np.load(io.BytesIO(zlib.decompress(base64.b64decode(d["low"]))), allow_pickle=True)
    assert marker.exists()


def test_zlib_bomb_in_a_space_is_refused() -> None:
    d = space_to_dict(SPACES[0])
    d["low"] = base64.b64encode(zlib.compress(b"\0" * (80 << 20))).decode()
    with pytest.raises(DecodeError) as info:
        space_from_dict(d)
    assert info.value.reason == "size_limit"


def test_an_npz_archive_in_a_space_is_refused() -> None:
    # np.load hands back an archive, not an array, for .npz bytes: refused in one line.
    d = space_to_dict(SPACES[0])
    buf = io.BytesIO()
    np.savez(buf, low=np.zeros(3, np.float32))
    d["low"] = base64.b64encode(zlib.compress(buf.getvalue())).decode()
    with pytest.raises(DecodeError, match="npz") as info:
        space_from_dict(d)
    assert info.value.reason == "bad_space"


@pytest.mark.parametrize(
    "d",
    [
        {"space": "box", "low": "!!", "high": "!!", "shape": [1], "dtype": "<f4"},
        {
            "space": "box",
            "low": base64.b64encode(zlib.compress(b"junk")).decode(),
            "high": "",
            "shape": [1],
            "dtype": "<f4",
        },
        {"space": "box", "shape": [1], "dtype": "<f4"},
        {"space": "discrete"},
        {"space": "discrete", "n": "many"},
        {"space": "multi-discrete", "nvec": "", "dtype": "<i8"},
        {"space": "tuple", "spaces": [{"no": "space"}]},
        {"space": "warp-drive"},
        {"no": "space"},
        "box",
        [1, 2],
    ],
)
def test_bad_space_dicts(d: Any) -> None:
    with pytest.raises(DecodeError):
        space_from_dict(d)


def test_unsupported_space_to_dict() -> None:
    with pytest.raises(DecodeError, match="Text"):
        space_to_dict(gym.spaces.Text(5))
