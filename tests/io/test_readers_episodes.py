"""EpisodesReader: RLlib's msgpack episode records, the fast path against the general path.

The general path (``decode_episode`` = safe ``unpackb`` + ``Episode.from_state``, one record at a
time) is the plain-loop reference: every property test checks that the batch-vectorized fast path
gives the same episodes (values *and* dtypes) and the same rejections.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import msgpack
import msgpack_numpy
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import rllib_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.config import DecodeLimits, ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import layout_of
from offline_prelearner.errors import DataError, DecodeError, EpisodeValidationError, SchemaError
from offline_prelearner.io.codec import packb
from offline_prelearner.io.formats.episodes.reader import (
    ITEM,
    EpisodesReader,
    decode_episode,
    episodes_to_table,
)
from offline_prelearner.io.readers import make_reader
from offline_prelearner.spaces import space_to_dict

RLLIB_FILE = "cartpole-v1_episodes_msgpack.parquet"
RLLIB_PYTHON = rllib_python()
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------------
# helpers: RLlib's non-finalized state layout, comparisons
# --------------------------------------------------------------------------------------------
def rllib_state(
    ep: Episode,
    *,
    lookback: int = 0,
    finalized: bool = False,
    actions: str = "np",
    rewards: str = "float",
    flags: str = "np",
    infos: bool = False,
    spaces: tuple[Any, Any] = (None, None),
) -> dict[str, Any]:
    """``ep`` in the layout RLlib's recorder writes: per-step lists (or finalized arrays).

    ``lookback`` steps of made-up data are put in front of every buffer, as RLlib does when an
    episode is a continuation. ``actions``: ``np`` numpy scalars/arrays, ``py`` Python values.
    ``rewards``: ``float`` | ``int`` | ``np32`` | ``mixed`` (floats and one int).
    """
    n, lb = len(ep), lookback

    def steps(a: np.ndarray, extra: int) -> np.ndarray:
        pad = np.repeat(a[:1], lb, axis=0) if len(a) else a[:0]
        return np.concatenate([pad, a])[: lb + extra] if lb else a

    obs = steps(ep.observations, n + 1)
    act = steps(ep.actions, n)
    rew = steps(ep.rewards, n)
    if finalized:
        obs_data: Any = obs
        act_data: Any = act
        rew_data: Any = rew
    else:
        obs_data = list(obs)  # per-step numpy arrays (numpy scalars for 0-d observations)
        act_data = list(act) if actions == "np" else act.tolist()
        if rewards == "float":
            rew_data = [float(r) for r in rew]
        elif rewards == "int":
            rew_data = [round(float(r)) for r in rew]
        elif rewards == "np32":
            rew_data = list(rew.astype(np.float32))
        else:
            rew_data = [float(r) for r in rew]
            rew_data[-1] = 7
    info_list = [{"i": i} if infos and i % 2 == 0 else {} for i in range(lb + n + 1)]
    extras = {
        k: {
            "data": list(steps(v, n)) if not finalized else steps(v, n),
            "lookback": lb,
            "finalized": finalized,
            "space": None,
        }
        for k, v in ep.extras.items()
    }
    obs_space, act_space = (space_to_dict(s) for s in spaces)

    def flag(v: bool) -> Any:
        return np.bool_(v) if flags == "np" else bool(v)

    def buf(data: Any, space: Any) -> dict[str, Any]:
        return {"data": data, "lookback": lb, "finalized": finalized, "space": space}

    return {
        "id_": ep.id,
        "agent_id": ep.agent_id,
        "module_id": ep.module_id,
        "multi_agent_episode_id": None,
        "observations": buf(obs_data, obs_space),
        "actions": buf(act_data, act_space),
        "rewards": buf(rew_data, None),
        "infos": buf(info_list, None),
        "extra_model_outputs": extras,
        "is_terminated": flag(ep.terminated),
        "is_truncated": flag(ep.truncated),
        "t_started": ep.t_started,
        "t": ep.t_end,
        "_observation_space": obs_space,
        "_action_space": act_space,
        "_start_time": 12.5,
        "_last_step_time": 13.25,
        "custom_data": {},
    }


def pack_rllib(state: dict[str, Any]) -> bytes:
    """Serialized the way RLlib's recorder does it."""
    return msgpack.packb(state, default=msgpack_numpy.encode)


def table_of(items: list[bytes | None]) -> pa.Table:
    return pa.table({ITEM: pa.array(items, type=pa.binary())})


def assert_same_episode(a: Episode, b: Episode, common: dict[str, Any] | None = None) -> None:
    """Equal ids, flags, t, infos, and columns equal in value, dtype and shape; ``common``: the
    dtypes of ``a``'s step columns (a batch holds actions, rewards and extras in the common
    type of its episodes', :func:`common_types`)."""
    assert (a.id, a.agent_id, a.module_id) == (b.id, b.agent_id, b.module_id)
    assert (a.terminated, a.truncated, a.t_started) == (b.terminated, b.truncated, b.t_started)
    assert a.infos == b.infos
    assert sorted(a.extras) == sorted(b.extras)
    c = common or {}

    def want(name: str, x: np.ndarray) -> np.ndarray:
        return x.astype(c[name]) if name in c else x

    pairs = [
        (a.observations, b.observations),
        (a.actions, want("actions", b.actions)),
        (a.rewards, want("rewards", b.rewards)),
    ]
    pairs += [(a.extras[k], want(k, b.extras[k])) for k in a.extras]
    for x, y in pairs:
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")


def common_types(eps: list[Episode]) -> dict[str, Any]:
    """The dtypes one batch holds ``eps``' actions, rewards and extras in."""
    if not eps:
        return {}
    out = {
        "actions": np.result_type(*(e.actions for e in eps)),
        "rewards": np.result_type(*(e.rewards for e in eps)),
    }
    out.update({k: np.result_type(*(e.extras[k] for e in eps)) for k in eps[0].extras})
    return out


def reference(items: list[bytes | None]) -> tuple[list[Episode], Counter[str]]:
    """The plain loop: each record through the general path."""
    kept, rejected = [], Counter()
    for item in items:
        if item is None:
            rejected["null_record"] += 1
            continue
        try:
            kept.append(decode_episode(item))
        except DataError as e:
            rejected[e.reason] += 1
    return kept, rejected


def one_layout(kept: list[Episode], rejected: Counter[str]) -> tuple[list[Episode], Counter[str]]:
    """The reader's rule on top of :func:`reference`: a batch holds one layout, the first kept
    record's (:func:`layout_of`); a record decoded into another (a corrupted byte can change an
    observation's dtype or shape) is refused as ``layout``."""
    if not kept:
        return kept, rejected
    first = layout_of(kept[0])
    same = [e for e in kept if layout_of(e) == first]
    if len(same) < len(kept):
        rejected = rejected + Counter({"layout": len(kept) - len(same)})
    return same, rejected


def read_skip(items: list[bytes | None], **kw: Any) -> Any:
    reader = EpisodesReader(ReadConfig(format="episodes", on_invalid="skip", **kw))
    return reader.read(table_of(items), "mem.parquet")


# --------------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------------
OBS_DTYPES = [np.float32, np.float64, np.int32, np.uint8, np.bool_, np.int16]


@st.composite
def episode_st(
    draw: Any,
    obs_shape: tuple[int, ...],
    obs_dtype: Any,
    act_shape: tuple[int, ...],
    extras: tuple[str, ...],
    k: int,
) -> Episode:
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    obs = (rng.standard_normal((n + 1, *obs_shape)) * 50).astype(obs_dtype)
    act = rng.integers(-40, 200, (n, *act_shape)).astype(np.int64)
    if draw(st.booleans()):
        act = act.astype(np.float32)
    flag = draw(st.sampled_from(["terminated", "truncated", "open"]))
    return Episode(
        id=draw(st.sampled_from([f"ep{k}", k, f"e{k}-" + "x" * 40])),
        observations=obs,
        actions=act,
        rewards=rng.standard_normal(n) * draw(st.sampled_from([1.0, 1000.0])),
        terminated=flag == "terminated",
        truncated=flag == "truncated",
        agent_id=draw(st.sampled_from([None, "a0", 3])),
        t_started=draw(st.sampled_from([0, 0, 7, 300])),
        extras={name: rng.standard_normal(n).astype(np.float32) for name in extras},
    )


@st.composite
def rllib_batch(draw: Any) -> tuple[list[Episode], list[bytes]]:
    """Episodes of one dataset and their records, in RLlib's layouts with varied encodings."""
    obs_shape = draw(st.sampled_from([(), (1,), (4,), (2, 3), (0,)]))
    obs_dtype = draw(st.sampled_from(OBS_DTYPES))
    act_shape = draw(st.sampled_from([(), (), (2,)]))
    extras = draw(st.sampled_from([(), ("logp",), ("logp", "vf")]))
    n = draw(st.integers(1, 6))
    eps = [draw(episode_st(obs_shape, obs_dtype, act_shape, extras, k)) for k in range(n)]
    style = {
        "actions": draw(st.sampled_from(["np", "py"])),
        "rewards": draw(st.sampled_from(["float", "int", "np32", "mixed"])),
        "flags": draw(st.sampled_from(["np", "py"])),
        "infos": draw(st.booleans()),
    }
    items = []
    for ep in eps:
        per = dict(
            style,
            lookback=draw(st.sampled_from([0, 0, 1, 3])),
            finalized=draw(st.sampled_from([False, False, False, True])),
        )
        if draw(st.integers(0, 5)) == 0:  # an odd one out within the batch
            per["rewards"] = draw(st.sampled_from(["float", "int", "mixed"]))
        items.append(pack_rllib(rllib_state(ep, **per)))
    return eps, items


# --------------------------------------------------------------------------------------------
# the files RLlib 2.60 wrote
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rllib_table(shared_data: Path) -> pa.Table:
    return pq.read_table(shared_data / RLLIB_FILE)


@pytest.mark.rllib_data
def test_rllib_file_decodes_twelve_done_episodes(rllib_table: pa.Table) -> None:
    reader = make_reader(ReadConfig(format="episodes"))
    assert isinstance(reader, EpisodesReader)
    out = reader.read(rllib_table, RLLIB_FILE)
    eps = out.episodes
    assert len(eps) == 12 and out.source_rows.tolist() == [1] * 12
    assert out.ledger.rows_in == 12 and out.ledger.balanced()
    # What RLlib 2.60's own SingleAgentEpisode.from_state gives for this file (the data README's
    # "lengths 11-49" is not what the file holds).
    assert [len(e) for e in eps] == [27, 27, 68, 11, 21, 19, 34, 18, 33, 15, 42, 9]
    for e in eps:
        assert e.is_done
        assert e.observations.shape == (len(e) + 1, 4) and e.observations.dtype == np.float32
        assert e.actions.dtype == np.int64 and set(np.unique(e.actions)) <= {0, 1}
        assert np.all(e.rewards == 1.0)  # CartPole pays 1 per step
        assert e.infos is None  # RLlib wrote only empty infos
        assert e.t_started == 0
    assert len({e.id for e in eps}) == 12


@pytest.mark.rllib_data
def test_rllib_file_fast_path_equals_general_path(rllib_table: pa.Table) -> None:
    out = EpisodesReader().read(rllib_table)
    items = rllib_table.column(ITEM).to_pylist()
    ref, rejected = reference(items)
    assert not rejected
    for a, b in zip(out.episodes, ref, strict=True):
        assert_same_episode(a, b)


@pytest.mark.rllib_data
def test_rllib_layout_takes_the_fast_path(
    rllib_table: pa.Table, monkeypatch: Any, make_episode: Any
) -> None:
    """A guard for the speed: uniform RLlib records never reach the per-record general path."""
    import offline_prelearner.io.formats.episodes.reader as module

    general: list[bytes] = []
    real = module.decode_episode

    def spy(item: bytes, limits: Any = None) -> Episode:
        general.append(item)
        return real(item)

    monkeypatch.setattr(module, "decode_episode", spy)
    EpisodesReader().read(rllib_table)
    ours = [make_episode(n, id=n, obs_shape=(2,), extras=("logp",)) for n in (1, 15, 16, 300)]
    for kw in ({}, {"lookback": 2}, {"finalized": True}, {"infos": True}, {"flags": "py"}):
        EpisodesReader().read(table_of([pack_rllib(rllib_state(e, **kw)) for e in ours]))
    assert general == []


@pytest.mark.rllib_data
def test_rllib_file_spaces(rllib_table: pa.Table) -> None:
    reader = EpisodesReader()
    assert reader.observation_space is None
    reader.read(rllib_table)
    obs, act = reader.observation_space, reader.action_space
    assert isinstance(obs, gym.spaces.Box) and obs.shape == (4,) and obs.dtype == np.float32
    assert isinstance(act, gym.spaces.Discrete) and act.n == 2
    assert reader.observation_space is obs  # decoded once, cached


@pytest.mark.rllib_data
def test_rllib_file_as_numpy_batch(rllib_table: pa.Table) -> None:
    col = np.empty(rllib_table.num_rows, dtype=object)
    col[:] = rllib_table.column(ITEM).to_pylist()
    from_numpy = EpisodesReader().read({ITEM: col})
    from_arrow = EpisodesReader().read(rllib_table)
    for a, b in zip(from_numpy.episodes, from_arrow.episodes, strict=True):
        assert_same_episode(a, b)


# --------------------------------------------------------------------------------------------
# fast path == general path
# --------------------------------------------------------------------------------------------
@FUZZ
@given(rllib_batch())
def test_fast_path_equals_general_path(batch: tuple[list[Episode], list[bytes]]) -> None:
    eps, items = batch
    reader = EpisodesReader()
    for _ in range(2):  # the second pass runs on the layouts learned in the first
        out = reader.read(table_of(items))
        ref, rejected = reference(items)
        assert not rejected and out.ledger.balanced()
        common = common_types(ref)
        for a, b, orig in zip(out.episodes, ref, eps, strict=True):
            assert_same_episode(a, b, common)
            assert np.array_equal(a.observations, orig.observations)
            assert np.array_equal(a.actions, orig.actions.astype(common["actions"]))
            assert (a.id, a.t_started, a.terminated) == (orig.id, orig.t_started, orig.terminated)


@FUZZ
@given(rllib_batch(), st.data())
def test_corrupted_records_are_handled_like_the_general_path(
    batch: tuple[list[Episode], list[bytes]], data: st.DataObject
) -> None:
    _, items = batch
    reader = EpisodesReader(ReadConfig(format="episodes", on_invalid="skip"))
    reader.read(table_of(items))  # learn the layouts first: corruption must not fool them
    bad: list[bytes | None] = list(items)
    for _ in range(data.draw(st.integers(1, 3))):
        row = data.draw(st.integers(0, len(bad) - 1))
        rec = bytearray(bad[row] or b"")
        how = data.draw(st.sampled_from(["flip", "truncate", "insert", "null"]))
        if how == "null" or not rec:
            bad[row] = None
            continue
        at = data.draw(st.integers(0, len(rec) - 1))
        if how == "flip":
            rec[at] ^= data.draw(st.integers(1, 255))
        elif how == "truncate":
            del rec[at:]
        else:
            rec[at:at] = bytes([data.draw(st.integers(0, 255))])
        bad[row] = bytes(rec)
    out = reader.read(table_of(bad))
    ref, rejected = one_layout(*reference(bad))
    assert out.ledger.balanced() and out.ledger.rows_in == len(bad)
    assert Counter(r.reason for r in out.rejections) == rejected
    assert len(out.episodes) == len(ref)
    common = common_types(ref)
    for a, b in zip(out.episodes, ref, strict=True):
        assert_same_episode(a, b, common)


def test_finalized_records_written_by_us_round_trip(tmp_path: Path, make_episode: Any) -> None:
    eps = [
        make_episode(5, id="a", extras=("logp",), infos=True),
        make_episode(1, id="b", truncated=True, terminated=False, t_started=9),
        make_episode(3, id="c", obs_shape=(2, 2), obs_dtype=np.uint8, terminated=False),
    ]
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    path = tmp_path / "eps.parquet"
    pq.write_table(episodes_to_table(eps, space, gym.spaces.Discrete(4)), path)
    table = pq.read_table(path)
    reader = EpisodesReader()
    for k, want in enumerate(eps):  # three layouts: a batch holds one, so one record a batch
        (got,) = reader.read(table.slice(k, 1), str(path)).episodes
        assert_same_episode(got, want)
    assert reader.observation_space == space  # the last record's space
    assert reader.action_space == gym.spaces.Discrete(4)


def test_finalized_records_written_by_us_take_the_columnar_match(make_episode: Any) -> None:
    """A guard for the speed: records of our own writer (one array record per buffer) are
    matched as columns after the first is walked, and decode as the general path does."""
    from offline_prelearner.io.formats.episodes.decoder import decode_batch
    from offline_prelearner.io.formats.episodes.scanner import EpisodeScanner

    eps = [make_episode(n, id=str(n), extras=("logp",)) for n in (1, 3, 15, 16, 300)]
    items = episodes_to_table(eps).column(ITEM).to_pylist()
    buf = b"".join(items)
    offsets = np.cumsum([0, *map(len, items)]).tolist()
    groups, out, _ = decode_batch(
        EpisodeScanner(DecodeLimits()), buf, offsets, np.ones(len(items), bool)
    )
    assert [rows.tolist() for rows, _ in groups] == [[1, 2, 3, 4]]
    assert isinstance(out[0], Episode) and out[1:] == [None] * 4
    got = [out[0], *groups[0][1].iter_episodes()]
    for a, b in zip(got, reference(items)[0], strict=True):
        assert_same_episode(a, b)


@pytest.mark.parametrize("policy", ["skip", "raise"])
def test_a_record_of_another_layout_is_refused_by_the_batch(make_episode: Any, policy: str) -> None:
    """A batch holds one layout (the first episode's): a record of another observation shape
    is refused under the reader's policy, naming both episodes, its row and the shapes."""
    eps = [
        make_episode(4, id="a"),
        make_episode(2, id="odd", obs_shape=(2, 2)),
        make_episode(3, id="b"),
    ]
    table = table_of([pack_rllib(rllib_state(e)) for e in eps])
    reader = EpisodesReader(ReadConfig(format="episodes", on_invalid=policy))
    if policy == "raise":
        with pytest.raises(EpisodeValidationError, match=r"float32\[2, 2\].*'a'") as e:
            reader.read(table, "f.parquet")
        assert (e.value.reason, e.value.where.episode_id, e.value.where.row) == (
            "obs_shape",
            "odd",
            1,
        )
        return
    out = reader.read(table, "f.parquet")
    assert [e.id for e in out.episodes] == ["a", "b"]
    assert out.ledger.rows_rejected == {"obs_shape": 1} and out.ledger.balanced()


def test_sliced_chunked_and_large_binary_columns(make_episode: Any) -> None:
    eps = [make_episode(k + 1, id=f"e{k}", seed=k) for k in range(6)]
    items = [pack_rllib(rllib_state(e)) for e in eps]
    chunked = pa.Table.from_batches(
        [table_of(items[:2]).to_batches()[0], table_of(items[2:]).to_batches()[0]]
    )
    large = pa.table({ITEM: pa.array(items, type=pa.large_binary())})
    batches = table_of(items).to_batches()
    assert len(batches) == 1
    for table, expect in [
        (batches[0], eps),
        (table_of(items).slice(2, 3), eps[2:5]),
        (chunked, eps),
        (large, eps),
        (table_of([]), []),
    ]:
        out = EpisodesReader().read(table)
        assert len(out.episodes) == len(expect)
        for a, b in zip(out.episodes, expect, strict=True):
            assert_same_episode(a, b)


def test_more_layouts_than_the_scanner_learns(make_episode: Any, monkeypatch: Any) -> None:
    """Twelve layouts (other extras) in one stream: eight are learned, the rest are walked (a
    batch holds one column layout, so each record is its own batch to one reader)."""
    import offline_prelearner.io.formats.episodes.reader as module

    eps = [make_episode(3 + k % 4, id=f"e{k}", seed=k, extras=(f"x{k % 12}",)) for k in range(40)]
    items = [pack_rllib(rllib_state(e)) for e in eps]
    general: list[bytes] = []
    real = module.decode_episode
    monkeypatch.setattr(module, "decode_episode", lambda b, lim=None: general.append(b) or real(b))
    for _ in range(2):
        reader = EpisodesReader()
        for item, want in zip(items, eps, strict=True):
            (got,) = reader.read(table_of([item])).episodes
            assert_same_episode(got, want)
    assert general == []


def test_nonempty_infos_survive_and_empty_ones_are_dropped(make_episode: Any) -> None:
    ep = make_episode(4, id="i", infos=True)
    out = EpisodesReader().read(
        table_of(
            [pack_rllib(rllib_state(ep, infos=True)), pack_rllib(rllib_state(ep, infos=False))]
        )
    )
    with_infos, without = out.episodes
    assert with_infos.infos == [{"i": 0}, {}, {"i": 2}, {}, {"i": 4}]
    assert without.infos is None


def test_lookback_is_dropped(make_episode: Any) -> None:
    ep = make_episode(4, id="lb", extras=("logp",), t_started=3)
    for finalized in (False, True):
        state = rllib_state(ep, lookback=2, finalized=finalized)
        assert len(state["observations"]["data"]) == 2 + 5
        out = EpisodesReader().read(table_of([pack_rllib(state)]))
        assert_same_episode(out.episodes[0], ep)


# --------------------------------------------------------------------------------------------
# errors: where, policy, ledger
# --------------------------------------------------------------------------------------------
def test_corrupt_record_names_file_column_row_and_episode(make_episode: Any) -> None:
    good = pack_rllib(rllib_state(make_episode(3, id="good")))
    cut = pack_rllib(rllib_state(make_episode(30, id="broken")))[:-10]
    with pytest.raises(DecodeError) as info:
        EpisodesReader().read(table_of([good, cut]), "data/part-0.parquet")
    where = info.value.where
    assert (where.file, where.column, where.row, where.episode_id) == (
        "data/part-0.parquet",
        "item",
        1,
        "broken",
    )
    assert "data/part-0.parquet" in str(info.value) and "row 1" in str(info.value)


def test_garbage_record_has_no_episode_id() -> None:
    with pytest.raises(DecodeError) as info:
        EpisodesReader().read(table_of([b"\xc1\xc1"]), "f")
    assert info.value.where.row == 0 and info.value.where.episode_id is None
    assert info.value.reason == "bad_msgpack"


def test_empty_records_after_a_learned_layout(make_episode: Any) -> None:
    reader = EpisodesReader(ReadConfig(format="episodes", on_invalid="skip"))
    reader.read(table_of([pack_rllib(rllib_state(make_episode(2)))]))
    out = reader.read(table_of([b"", b""]))
    assert [r.reason for r in out.rejections] == ["bad_msgpack", "bad_msgpack"]


def test_skip_and_quarantine_account_for_every_row(make_episode: Any) -> None:
    eps = [make_episode(4, id=f"e{k}", seed=k) for k in range(4)]
    items: list[bytes | None] = [pack_rllib(rllib_state(e)) for e in eps]
    items[1] = b"not msgpack at all"
    items[2] = None
    for policy in ("skip", "quarantine"):
        reader = EpisodesReader(ReadConfig(format="episodes", on_invalid=policy))
        out = reader.read(table_of(items), "f.parquet")
        assert [e.id for e in out.episodes] == ["e0", "e3"]
        led = out.ledger
        assert led.rows_in == 4 and led.rows_kept == 2 and led.balanced()
        assert sum(led.rows_rejected.values()) == 2 and led.rows_rejected["null_record"] == 1
        rows = [r.rows for r in out.rejections]
        if policy == "skip":
            assert rows == [None, None]
        else:
            assert [r.column(ITEM).to_pylist() for r in rows] == [[items[1]], [None]]


def test_quarantine_of_a_numpy_batch_keeps_the_row(make_episode: Any) -> None:
    col = np.empty(2, dtype=object)
    col[:] = [pack_rllib(rllib_state(make_episode(2))), b"\x93\x01"]
    reader = EpisodesReader(ReadConfig(format="episodes", on_invalid="quarantine"))
    out = reader.read({ITEM: col, "other": np.array([5, 6])})
    (rej,) = out.rejections
    assert rej.rows is not None and rej.rows.to_pylist() == [{ITEM: b"\x93\x01", "other": 6}]


def test_invalid_episode_is_rejected_with_its_field(make_episode: Any) -> None:
    state = rllib_state(make_episode(3, id="bad-t"))
    state["t"] = 99
    with pytest.raises(DataError) as info:
        EpisodesReader().read(table_of([pack_rllib(state)]), "f")
    assert info.value.reason == "inconsistent"
    assert info.value.where.column == "item" and info.value.where.episode_id == "bad-t"
    assert "field 't'" in str(info.value)


def test_ragged_observations_are_an_error_not_a_guess(make_episode: Any) -> None:
    state = rllib_state(make_episode(3, id="ragged"))
    state["observations"]["data"][2] = np.zeros(5, np.float32)
    out = read_skip([pack_rllib(state)])
    assert not out.episodes and out.rejections[0].error.where.episode_id == "ragged"


def test_mixed_dtypes_decode_like_numpy_would(make_episode: Any) -> None:
    state = rllib_state(make_episode(3, id="mix"))
    state["observations"]["data"][1] = state["observations"]["data"][1].astype(np.float64)
    (ep,) = EpisodesReader().read(table_of([pack_rllib(state)])).episodes
    assert ep.observations.dtype == np.float64  # np.stack upcasts; the fast path steps aside


def test_object_dtype_record_is_refused_and_never_unpickled(
    tmp_path: Path, make_episode: Any
) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self) -> Any:
            return (os.mkdir, (str(marker),))

    evil = {
        b"nd": True,
        b"type": "|O",
        b"kind": b"O",
        b"shape": [3],
        b"data": pickle.dumps(Payload()),
    }
    state = rllib_state(make_episode(3, id="evil"))
    state["observations"]["data"][1] = evil
    item = pack_rllib(state)
    out = read_skip([item])
    assert not out.episodes and out.rejections[0].reason == "refused_pickle"
    assert not marker.exists()
    # The payload is live: RLlib's own decoding would have run it.
    msgpack.unpackb(item, object_hook=msgpack_numpy.decode)
    assert marker.exists()


def test_multi_agent_states_are_refused() -> None:
    item = packb({"id_": "ma", "agent_episodes": {"a0": {}}, "observations": {}})
    out = read_skip([item])
    (rej,) = out.rejections
    assert rej.reason == "unsupported_multi_agent" and rej.error.where.episode_id == "ma"


def test_size_limit(make_episode: Any) -> None:
    item = pack_rllib(rllib_state(make_episode(20)))
    out = read_skip([item], limits=DecodeLimits(max_message_bytes=len(item) - 1))
    assert out.rejections[0].reason == "size_limit"
    out = read_skip([item], limits=DecodeLimits(max_message_bytes=len(item)))
    assert len(out.episodes) == 1


def test_schema_errors() -> None:
    with pytest.raises(SchemaError, match="binary column 'item'"):
        EpisodesReader().read(pa.table({"obs": [1]}), "f")
    with pytest.raises(SchemaError, match="must be binary"):
        EpisodesReader().read(pa.table({ITEM: ["text"]}), "f")
    with pytest.raises(SchemaError, match="fixed-width"):
        EpisodesReader().read({ITEM: np.array([b"ab"])})
    with pytest.raises(SchemaError, match="must hold bytes") as info:
        EpisodesReader().read({ITEM: np.array([b"ab", "text"], dtype=object)})
    assert info.value.where.row == 1


# --------------------------------------------------------------------------------------------
# RLlib reads what we write (oracle, in RLlib's own venv)
# --------------------------------------------------------------------------------------------
ORACLE = """
import json, sys, msgpack, msgpack_numpy, pyarrow.parquet as pq
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
out = []
for item in pq.read_table(sys.argv[1]).column("item").to_pylist():
    ep = SingleAgentEpisode.from_state(msgpack.unpackb(item, object_hook=msgpack_numpy.decode))
    out.append({"id": ep.id_, "len": len(ep), "return": float(ep.get_return()),
                "terminated": bool(ep.is_terminated), "truncated": bool(ep.is_truncated),
                "t_started": ep.t_started, "obs0": ep.get_observations(0).tolist(),
                "space": str(ep.observation_space)})
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not RLLIB_PYTHON.exists(), reason=f"RLlib venv absent ({RLLIB_PYTHON})")
def test_rllib_reads_episodes_we_write(tmp_path: Path, make_episode: Any) -> None:
    eps = [
        make_episode(
            k + 2,
            id=f"ep{k}",
            seed=k,
            terminated=k % 2 == 0,
            truncated=k % 2 == 1,
            extras=("action_logp",),
        )
        for k in range(4)
    ]
    path = tmp_path / "ours.parquet"
    pq.write_table(
        episodes_to_table(
            eps, gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Discrete(4)
        ),
        path,
    )
    script = tmp_path / "oracle.py"
    script.write_text(ORACLE)
    proc = subprocess.run(
        [str(RLLIB_PYTHON), str(script), str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "RAY_DEDUP_LOGS": "0"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [g["id"] for g in got] == [e.id for e in eps]
    for g, e in zip(got, eps, strict=True):
        assert g["len"] == len(e)
        assert g["return"] == pytest.approx(e.total_reward)
        assert (g["terminated"], g["truncated"]) == (e.terminated, e.truncated)
        assert g["t_started"] == e.t_started
        assert np.allclose(g["obs0"], e.observations[0])
        assert "Box" in g["space"]
    assert sys.executable  # the oracle ran in the other interpreter, not this one
