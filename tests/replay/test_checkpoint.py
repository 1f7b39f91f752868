"""Checkpoints: identical next samples after a round trip; damaged checkpoints are errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, DecodeError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.units import FrameStack, NStep, Sequence, Transition


def episodes(n=30, seed=0, ids="str", prefix="ep"):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 15))
        out.append(
            Episode(
                id=f"{prefix}-{i}"
                if ids == "str"
                else i
                if ids == "int"
                else (f"{prefix}-{i}" if i % 2 else i),
                observations=rng.standard_normal((length + 1, 3)).astype(np.float32),
                actions=rng.integers(0, 4, length),
                rewards=rng.standard_normal(length),
                terminated=bool(i % 3 == 0),
                truncated=bool(i % 3 == 1),
                t_started=int(rng.integers(0, 5)),
                extras={"logp": rng.standard_normal(length).astype(np.float32)},
            )
        )
    return out


UNITS = [Transition(), NStep((1, 4), 0.9), Sequence(5, 2), FrameStack(3, NStep(2, 0.5))]


@pytest.mark.parametrize("unit", UNITS, ids=repr)
@pytest.mark.parametrize("ids", ["str", "int", "mixed"])
def test_round_trip_gives_identical_next_samples(tmp_path, unit, ids):
    eps = episodes(ids=ids)
    a = EpisodeReplayBuffer(150, unit=unit, seed=11)  # small: evictions and a wrap happened
    a.add(eps[:20])
    a.sample(13)
    a.save(tmp_path / "ckpt")
    b = EpisodeReplayBuffer(150, unit=unit, seed=999)
    b.load(tmp_path / "ckpt")
    assert b.stats() == a.stats()
    for _ in range(3):
        assert a.sample(17) == b.sample(17)
    # ...and they stay in step as data keeps arriving (same layout, same ids, same serials).
    a.add(eps[20:])
    b.add(eps[20:])
    assert a.sample(9) == b.sample(9)
    assert [e.id for e in a.storage.episodes()] == [e.id for e in b.storage.episodes()]


def test_get_state_set_state_in_memory():
    a = EpisodeReplayBuffer(300, unit=NStep(3, 0.9), seed=1)
    a.add(episodes())
    b = EpisodeReplayBuffer(300, unit=NStep(3, 0.9))
    b.set_state(a.get_state())
    assert a.sample(8) == b.sample(8)


def test_empty_buffer_round_trip(tmp_path):
    a = EpisodeReplayBuffer(50, seed=3)
    a.save(tmp_path / "c")
    b = EpisodeReplayBuffer(50)
    b.load(tmp_path / "c")
    eps = episodes(3)
    a.add(eps)
    b.add(eps)
    assert a.sample(5) == b.sample(5)


def test_save_is_atomic_and_replaces(tmp_path):
    a = EpisodeReplayBuffer(300, seed=0)
    a.add(episodes(5))
    a.save(tmp_path / "c")
    a.add(episodes(10, seed=1, prefix="more"))
    a.save(tmp_path / "c")  # replaces the earlier one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no temp dirs left behind
    b = EpisodeReplayBuffer(300)
    b.load(tmp_path / "c")
    assert b.stats() == a.stats()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a checkpoint"):
        a.save(tmp_path / "other")


@pytest.fixture
def ckpt(tmp_path):
    a = EpisodeReplayBuffer(300, unit=NStep(2, 0.9), seed=0)
    a.add(episodes())
    return a.save(tmp_path / "c")


def _largest_npy(path):
    return max(path.rglob("*.npy"), key=lambda p: p.stat().st_size)


def _load(path, unit=None):
    EpisodeReplayBuffer(300, unit=unit or NStep(2, 0.9)).load(path)


def test_truncated_file_is_an_error(ckpt):
    f = _largest_npy(ckpt)
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(DecodeError, match="truncated") as e:
        _load(ckpt)
    assert e.value.where.file == str(f)


def test_altered_file_is_an_error(ckpt):
    f = _largest_npy(ckpt)
    data = bytearray(f.read_bytes())
    data[-7] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(DecodeError, match="SHA-256"):
        _load(ckpt)


def test_missing_file_and_broken_manifest_are_errors(ckpt):
    f = _largest_npy(ckpt)
    f.unlink()
    with pytest.raises(DecodeError, match="missing"):
        _load(ckpt)
    (ckpt / "manifest.json").write_text('{"format": "offline_prelearner.replay_chec')
    with pytest.raises(DecodeError, match="not valid JSON"):
        _load(ckpt)
    (ckpt / "manifest.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(DecodeError, match="format"):
        _load(ckpt)
    (ckpt / "manifest.json").unlink()
    with pytest.raises(DecodeError, match="not a checkpoint"):
        _load(ckpt)


def test_manifest_pointing_outside_is_an_error(ckpt):
    m = json.loads((ckpt / "manifest.json").read_text())
    name = next(iter(m["arrays"]))
    m["arrays"][name]["file"] = "../escape.npy"
    (ckpt / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DecodeError, match="missing"):
        _load(ckpt)


def test_pickled_array_is_refused(ckpt):
    """A file swapped for an object array (a pickle inside .npy) is refused, even with a
    matching manifest entry."""
    m = json.loads((ckpt / "manifest.json").read_text())
    _name, entry = next(iter(m["arrays"].items()))
    obj = np.array([{"a": 1}], dtype=object)
    np.save(ckpt / entry["file"], obj, allow_pickle=True)
    import hashlib

    data = (ckpt / entry["file"]).read_bytes()
    entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (ckpt / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DecodeError, match="cannot be read"):
        _load(ckpt)


def test_loading_into_a_different_buffer_is_an_error(ckpt):
    with pytest.raises(ConfigError, match="unit"):
        _load(ckpt, unit=NStep(3, 0.9))
    with pytest.raises(ConfigError, match="capacity"):
        EpisodeReplayBuffer(301, unit=NStep(2, 0.9)).load(ckpt)
