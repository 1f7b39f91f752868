"""The rows reader: vectorized grouping checked against a plain-loop reference, real RLlib files,
streams across batches, bad input under raise / skip / quarantine, and Ray Data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import episodes_to_columns, make_episode, random_episodes, to_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import DecodeError, EpisodeValidationError, SchemaError
from offline_prelearner.io.arrow_numpy import column_to_numpy
from offline_prelearner.io.formats.rows.reader import RowsReader

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
UNCOMPRESSED = "cartpole-v1_rows_uncompressed.parquet"
COMPRESSED = "cartpole-v1_rows_compressed.parquet"


# ---------------------------------------------------------------------------------------------
# plain-loop reference
# ---------------------------------------------------------------------------------------------
def reference(cols: dict[str, np.ndarray], with_t: bool) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Groups rows one by one with dicts and sorts by t: what the reader must produce."""
    groups: dict[tuple[Any, Any], list[int]] = {}
    for i in range(len(cols["rewards"])):
        agent = cols["agent_id"][i] if "agent_id" in cols else None
        groups.setdefault((cols["eps_id"][i], agent), []).append(i)
    out = {}
    for key, idx in groups.items():
        if with_t:
            idx = sorted(idx, key=lambda i: cols["t"][i])
        last = idx[-1]
        term = bool(cols["terminateds"][last])
        extras = [
            k
            for k in cols
            if k
            not in (
                "eps_id",
                "agent_id",
                "obs",
                "new_obs",
                "actions",
                "rewards",
                "terminateds",
                "truncateds",
                "t",
                "infos",
                "module_id",
            )
        ]
        out[key] = {
            "obs": np.stack([cols["obs"][i] for i in idx] + [cols["new_obs"][last]]),
            "actions": np.stack([cols["actions"][i] for i in idx]),
            "rewards": np.array([cols["rewards"][i] for i in idx]),
            "terminated": term,
            "truncated": bool(cols["truncateds"][last]) and not term,
            "t_started": int(cols["t"][idx[0]]) if with_t else 0,
            "extras": {k: np.array([cols[k][i] for i in idx]) for k in extras},
        }
    return out


def by_key(episodes: Sequence[Episode]) -> dict[tuple[Any, Any], Episode]:
    out = {(e.id, e.agent_id): e for e in episodes}
    assert len(out) == len(episodes), "duplicate (id, agent) among episodes"
    return out


def assert_matches(got: Sequence[Episode], ref: dict[tuple[Any, Any], dict[str, Any]]) -> None:
    eps = by_key(got)
    assert set(eps) == set(ref)
    for key, r in ref.items():
        e = eps[key]
        np.testing.assert_array_equal(e.observations, r["obs"])
        assert e.observations.dtype == r["obs"].dtype
        np.testing.assert_array_equal(e.actions, r["actions"])
        np.testing.assert_array_equal(e.rewards, r["rewards"])
        assert (e.terminated, e.truncated) == (r["terminated"], r["truncated"])
        assert e.t_started == r["t_started"]
        assert set(e.extras) == set(r["extras"])
        for k, v in r["extras"].items():
            np.testing.assert_array_equal(e.extras[k], v)


def assert_same_episode(a: Episode, b: Episode) -> None:
    assert (a.id, a.agent_id, a.t_started, a.terminated, a.truncated) == (
        b.id,
        b.agent_id,
        b.t_started,
        b.terminated,
        b.truncated,
    )
    np.testing.assert_array_equal(a.observations, b.observations)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert set(a.extras) == set(b.extras)
    for k in a.extras:
        np.testing.assert_array_equal(a.extras[k], b.extras[k])


def interleaving(episodes: Sequence[Episode], labels: Sequence[int]) -> list[int]:
    """Row order (rows listed episode by episode) that follows episode ``labels`` in turn."""
    starts = np.concatenate(([0], np.cumsum([len(e) for e in episodes])[:-1]))
    taken = [0] * len(episodes)
    order = []
    for k in labels:
        order.append(int(starts[k]) + taken[k])
        taken[k] += 1
    return order


def as_batch(cols: dict[str, np.ndarray], fmt: str) -> Any:
    return cols if fmt == "numpy" else to_table(cols, tensor=fmt)


def read(batch: Any, source: str | None = "f.parquet", **config: Any) -> Any:
    return RowsReader(ReadConfig(**config)).read(batch, source)


# ---------------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data(), fmt=st.sampled_from(["numpy", "list", "fixed", "ray"]))
def test_shuffled_rows_with_t_equal_reference(data: Any, fmt: str) -> None:
    eps = data.draw(random_episodes(any_start=True, extras=("logp",)))
    n = sum(len(e) for e in eps)
    order = data.draw(st.permutations(range(n)))
    cols = episodes_to_columns(eps, with_t=True, order=order)
    out = read(as_batch(cols, fmt))
    assert_matches(out.episodes, reference(cols, with_t=True))
    got = by_key(out.episodes)
    for e in eps:
        assert_same_episode(got[(e.id, e.agent_id)], e)
    assert out.ledger.balanced() and out.ledger.rows_kept == n


@SETTINGS
@given(data=st.data(), fmt=st.sampled_from(["numpy", "list", "ray"]))
def test_interleaved_rows_without_t_equal_reference(data: Any, fmt: str) -> None:
    eps = data.draw(random_episodes(extras=("logp",)))
    labels = data.draw(st.permutations([k for k, e in enumerate(eps) for _ in range(len(e))]))
    cols = episodes_to_columns(eps, order=interleaving(eps, labels))
    out = read(as_batch(cols, fmt))
    assert_matches(out.episodes, reference(cols, with_t=False))
    got = by_key(out.episodes)
    for e in eps:
        assert_same_episode(got[(e.id, e.agent_id)], e)


@SETTINGS
@given(data=st.data())
def test_stream_split_across_batches_stitches(data: Any) -> None:
    """Without t, a reader continues episodes across calls; fragments join to the originals."""
    eps = data.draw(random_episodes(max_len=6))
    labels = data.draw(st.permutations([k for k, e in enumerate(eps) for _ in range(len(e))]))
    cols = episodes_to_columns(eps, order=interleaving(eps, labels))
    n = len(cols["rewards"])
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    reader = RowsReader()
    fragments: dict[tuple[Any, Any], list[Episode]] = {}
    for lo, hi in zip([0, *cuts], [*cuts, n], strict=True):
        part = {k: v[lo:hi] for k, v in cols.items()}
        out = reader.read(part, "stream")
        assert out.ledger.balanced() and out.ledger.rows_in == hi - lo
        for e in out.episodes:
            fragments.setdefault((e.id, e.agent_id), []).append(e)
    assert set(fragments) == {(e.id, e.agent_id) for e in eps}
    for e in eps:
        joined = Episode.concat_fragments(fragments[(e.id, e.agent_id)])
        assert_same_episode(joined, e)
    assert set(reader.pending) == {(e.id, e.agent_id) for e in eps if not e.is_done}


@SETTINGS
@given(data=st.data())
def test_d4rl_split_at_done_flags(data: Any) -> None:
    eps = data.draw(random_episodes(agents=False, max_episodes=5))
    for e in eps[:-1]:  # episodes in a done-split file end done; the last may be open
        if not e.is_done:
            e.terminated = True
    cols = episodes_to_columns(eps)
    d4rl = {
        "observations": cols["obs"],
        "next_observations": cols["new_obs"],
        "actions": cols["actions"],
        "rewards": cols["rewards"],
        "terminals": cols["terminateds"],
        "timeouts": cols["truncateds"],
    }
    n = len(cols["rewards"])
    cut = data.draw(st.integers(0, n))
    reader = RowsReader(ReadConfig(schema="d4rl"))
    got: dict[Any, list[Episode]] = {}
    for lo, hi in ((0, cut), (cut, n)):
        out = reader.read({k: v[lo:hi] for k, v in d4rl.items()}, "d.hdf5")
        for e in out.episodes:
            got.setdefault(e.id, []).append(e)
    assert list(got) == [f"d.hdf5:{k}" for k in range(len(eps))]
    for k, e in enumerate(eps):
        joined = Episode.concat_fragments(got[f"d.hdf5:{k}"])
        np.testing.assert_array_equal(joined.observations, e.observations)
        np.testing.assert_array_equal(joined.rewards, e.rewards)
        assert (joined.terminated, joined.truncated) == (e.terminated, e.truncated)


# ---------------------------------------------------------------------------------------------
# real data written by RLlib 2.60
# ---------------------------------------------------------------------------------------------
def test_rllib_uncompressed_rows(shared_data: Any) -> None:
    table = pq.read_table(shared_data / UNCOMPRESSED)
    out = read(table, UNCOMPRESSED)
    assert len(out.episodes) == 12 and all(e.is_done for e in out.episodes)
    assert sum(len(e) for e in out.episodes) == 295
    assert out.ledger.balanced() and out.ledger.rows_kept == 295
    for e in out.episodes:
        assert e.observations.shape == (len(e) + 1, 4) and e.observations.dtype == np.float32
        assert set(e.extras) == {"weights_seq_no"} and e.t_started == 0
    cols = {n: column_to_numpy(table, n) for n in table.column_names}
    assert_matches(out.episodes, reference(cols, with_t=False))
    # the same rows as a dict of numpy columns (Ray's "numpy" batch format)
    assert_matches(read(cols).episodes, reference(cols, with_t=False))


def test_rllib_compressed_rows_need_legacy_pickle(shared_data: Any) -> None:
    table = pq.read_table(shared_data / COMPRESSED)
    out = read(table, COMPRESSED, schema="rllib_compressed", legacy_pickle=True)
    assert len(out.episodes) == 12 and all(e.is_done for e in out.episodes)
    assert sum(len(e) for e in out.episodes) == 234 == out.ledger.rows_kept
    assert all(e.observations.shape == (len(e) + 1, 4) for e in out.episodes)
    # declared compressed but not allowed: refused under every policy, telling what to pass
    for policy in ("raise", "skip"):
        with pytest.raises(DecodeError, match="--legacy-pickle") as exc:
            read(table, COMPRESSED, schema="rllib_compressed", on_invalid=policy)
        assert exc.value.where.file == COMPRESSED
    # read with RLlib's default schema: the packed cells are recognised from the data, refused
    # in one line naming the column and the flag, and decoded when the user turns it on
    with pytest.raises(DecodeError, match="--legacy-pickle") as exc:
        read(table, COMPRESSED)
    assert exc.value.where.column == "obs" and "output_compress_columns" in str(exc.value)
    auto = read(table, COMPRESSED, legacy_pickle=True)
    assert [len(e) for e in auto.episodes] == [len(e) for e in out.episodes]


# ---------------------------------------------------------------------------------------------
# semantics
# ---------------------------------------------------------------------------------------------
def three_episodes(**kw: Any) -> list[Episode]:
    return [
        make_episode(4, id="A", seed=1, **kw),
        make_episode(5, id="B", seed=2, **kw),
        make_episode(3, id="C", seed=3, **kw),
    ]


def test_infos_module_id_and_multi_agent() -> None:
    eps = [
        make_episode(3, id="E", agent_id="a", infos=True, seed=1),
        make_episode(2, id="E", agent_id="b", infos=True, seed=2),
    ]
    cols = episodes_to_columns(eps)
    cols["module_id"] = np.array(["m_a"] * 3 + ["m_b"] * 2, dtype=object)
    for fmt in ("numpy", "list"):
        got = by_key(read(as_batch(cols, fmt)).episodes)
        a, b = got[("E", "a")], got[("E", "b")]
        assert a.module_id == "m_a" and b.module_id == "m_b"
        assert a.infos == [{}, {"step": 1}, {"step": 2}, {"step": 3}]
        assert len(b) == 2 and b.id == "E"


def test_infos_as_json_text() -> None:
    cols = episodes_to_columns([make_episode(2, id="A", infos=True), make_episode(2, id="B")])
    text = np.array(['{"step": 1}', '{"step": 2}', None, "{}"], dtype=object)
    got = by_key(read({**cols, "infos": text}).episodes)
    assert got[("A", None)].infos == [{}, {"step": 1}, {"step": 2}]
    assert got[("B", None)].infos == [{}, {}, {}]
    text[3] = "not json"
    out = read({**cols, "infos": text}, on_invalid="skip")
    assert [e.id for e in out.episodes] == ["A"] and out.ledger.rows_rejected == {"bad_infos": 2}


def test_both_flags_set_means_terminated_and_int_flags_accepted() -> None:
    cols = episodes_to_columns([make_episode(2, id="A")])
    cols["truncateds"] = np.array([0, 1])
    cols["terminateds"] = np.array([0, 1])
    (e,) = read(cols).episodes
    assert e.terminated and not e.truncated


def test_old_stack_dones_read_as_terminateds() -> None:
    cols = episodes_to_columns(three_episodes(), with_t=True)
    old = {
        "eps_id": cols["eps_id"],
        "agent_index": np.zeros(12, np.int64),
        "obs": cols["obs"],
        "new_obs": cols["new_obs"],
        "actions": cols["actions"],
        "rewards": cols["rewards"],
        "dones": cols["terminateds"],
        "t": cols["t"],
        "action_logp": cols["rewards"] * 0,
    }
    out = read(to_table(old), schema="rllib_old_stack")
    assert [len(e) for e in out.episodes] == [4, 5, 3]
    assert all(e.terminated and e.agent_id == 0 for e in out.episodes)
    assert set(out.episodes[0].extras) == {"action_logp"}


def test_empty_batch() -> None:
    cols = episodes_to_columns(three_episodes())
    out = read({k: v[:0] for k, v in cols.items()})
    assert out.episodes == [] and out.ledger.rows_in == 0 and out.ledger.balanced()


def test_stream_discontinuity_between_batches() -> None:
    cols = episodes_to_columns([make_episode(6, id="A", seed=1)])
    reader = RowsReader()
    first = reader.read({k: v[:3] for k, v in cols.items()}, "s")
    assert not first.episodes[0].is_done and ("A", None) in reader.pending
    later = {k: v[4:] for k, v in cols.items()}  # row 3 is lost
    with pytest.raises(EpisodeValidationError, match="earlier batch") as exc:
        reader.read(later, "s")
    assert exc.value.where.episode_id == "A" and exc.value.where.row == 0


def test_stream_after_rejected_fragment_is_rejected_too() -> None:
    cols = episodes_to_columns([make_episode(6, id="A", seed=1), make_episode(2, id="B")])
    cols["terminateds"][1] = True  # done mid-episode in A's first fragment
    reader = RowsReader(ReadConfig(on_invalid="skip"))
    first = reader.read({k: v[:3] for k, v in cols.items()})
    assert first.episodes == [] and first.ledger.rows_rejected == {"done_mid_episode": 3}
    second = reader.read({k: v[3:] for k, v in cols.items()})
    assert [e.id for e in second.episodes] == ["B"]
    assert second.ledger.rows_rejected == {"after_rejected": 3} and second.ledger.balanced()
    assert reader.pending == {}


# ---------------------------------------------------------------------------------------------
# bad input: raise names column / episode / row; skip and quarantine count and balance
# ---------------------------------------------------------------------------------------------
def _base(with_t: bool = False) -> dict[str, np.ndarray]:
    return episodes_to_columns(three_episodes(), with_t=with_t)  # rows: A 0-3, B 4-8, C 9-11


def _ragged_obs() -> pa.Table:
    table = to_table(_base())
    obs = table.column("obs").to_pylist()
    obs[6] = obs[6][:2]  # a row of episode B
    return table.set_column(table.schema.get_field_index("obs"), "obs", pa.array(obs))


def _string_rewards() -> pa.Table:
    table = to_table(_base())
    rewards = pa.array([str(r) for r in table.column("rewards").to_pylist()])
    return table.set_column(table.schema.get_field_index("rewards"), "rewards", rewards)


def _null_reward() -> pa.Table:
    table = to_table(_base())
    rewards = table.column("rewards").to_pylist()
    rewards[10] = None
    return table.set_column(table.schema.get_field_index("rewards"), "rewards", pa.array(rewards))


def _t_gap() -> dict[str, np.ndarray]:
    cols = _base(with_t=True)
    keep = np.array([i != 6 for i in range(12)])  # B loses its t=2
    return {k: v[keep] for k, v in cols.items()}


def _t_repeat() -> dict[str, np.ndarray]:
    cols = _base(with_t=True)
    cols["t"][6] = 1  # B: t = 0 1 1 3 4
    return cols


def _swapped() -> dict[str, np.ndarray]:
    cols = _base()
    order = np.array([0, 1, 2, 3, 4, 5, 7, 6, 8, 9, 10, 11])  # B's rows 6 and 7 swapped
    return {k: v[order] for k, v in cols.items()}


def _done_mid() -> dict[str, np.ndarray]:
    cols = _base()
    cols["terminateds"][5] = True  # B's second row
    return cols


# name -> (batch, error type, reason, episode rejected, batch row, column, rows rejected)
BAD = {
    "ragged_obs": (_ragged_obs, SchemaError, "ragged", "B", 6, "obs", 5),
    "null_reward": (_null_reward, SchemaError, "null_value", "C", 10, "rewards", 3),
    "t_gap": (_t_gap, EpisodeValidationError, "t_not_consecutive", "B", 6, "t", 4),
    "t_repeat": (_t_repeat, EpisodeValidationError, "t_not_consecutive", "B", 6, "t", 5),
    "continuity": (_swapped, EpisodeValidationError, "discontinuous", "B", 6, "obs", 5),
    "done_mid": (_done_mid, EpisodeValidationError, "done_mid_episode", "B", 5, "terminateds", 5),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_episode_raises_with_location(case: str) -> None:
    make, etype, reason, eid, row, column, _ = BAD[case]
    with pytest.raises(etype) as exc:
        read(make(), "bad.parquet")
    w = exc.value.where
    assert (w.file, w.episode_id, w.row, w.column) == ("bad.parquet", eid, row, column)
    assert exc.value.reason == reason
    for part in ("bad.parquet", f"episode {eid!r}", f"row {row}", f"column {column!r}"):
        assert part in str(exc.value)


@pytest.mark.parametrize("policy", ["skip", "quarantine"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_episode_is_rejected_and_counted(case: str, policy: str) -> None:
    make, _, reason, eid, _, _, n_bad = BAD[case]
    batch = make()
    out = read(batch, on_invalid=policy)
    n = batch.num_rows if isinstance(batch, pa.Table) else len(batch["rewards"])
    assert eid not in {e.id for e in out.episodes}
    assert len(out.episodes) == 2
    assert out.ledger.rows_rejected == {reason: n_bad} and out.ledger.episodes_rejected[reason] == 1
    assert out.ledger.rows_in == n and out.ledger.balanced()
    (rej,) = out.rejections
    if policy == "quarantine":
        assert rej.rows is not None and rej.rows.num_rows == n_bad
        assert set(rej.rows.column("eps_id").to_pylist()) == {eid}
    else:
        assert rej.rows is None


def test_missing_and_renamed_columns_listed_at_once() -> None:
    cols = _base()
    cols["observation"] = cols.pop("obs")
    cols["reward"] = cols.pop("rewards")
    del cols["truncateds"]
    with pytest.raises(SchemaError) as exc:
        read(cols, "x.parquet")
    msg = str(exc.value)
    for part in ("'obs'", "'observation'", "'rewards'", "'reward'", "'truncateds'", "x.parquet"):
        assert part in msg
    out = read(cols, on_invalid="skip")
    assert out.ledger.rows_rejected == {"missing_columns": 12} and out.ledger.balanced()


def test_string_rewards_name_the_column() -> None:
    with pytest.raises(SchemaError, match=r"'rewards'.*strings") as exc:
        read(_string_rewards(), "x.parquet")
    assert exc.value.where.column == "rewards"
    out = read(_string_rewards(), on_invalid="skip")
    assert out.episodes == [] and out.ledger.rows_rejected == {"bad_type": 12}


def test_several_bad_episodes_in_one_batch_all_counted() -> None:
    cols = _done_mid()
    cols["terminateds"][0] = True  # A too
    obs = list(cols["obs"])
    obs[10] = obs[10][:1]  # and C's obs is ragged
    ragged = np.empty(12, dtype=object)
    ragged[:] = obs
    cols["obs"] = ragged
    out = read(cols, on_invalid="skip")
    assert out.episodes == []
    assert out.ledger.rows_rejected == {"ragged": 3, "done_mid_episode": 9}
    assert out.ledger.balanced()


# ---------------------------------------------------------------------------------------------
# Ray Data
# ---------------------------------------------------------------------------------------------
def _summarize(batch: Any) -> dict[str, np.ndarray]:
    """map_batches body: read one batch and return one row per episode."""
    if isinstance(batch, pa.Table):
        obs_kind = f"arrow:{getattr(batch.schema.field('obs').type, 'extension_name', 'plain')}"
    else:
        obs_kind = f"numpy:{batch['obs'].dtype}:{batch['obs'].ndim}"
    out = RowsReader().read(batch, "ray")
    eps = out.episodes
    return {
        "id": np.array([e.id for e in eps], dtype=object),
        "length": np.array([len(e) for e in eps]),
        "done": np.array([e.is_done for e in eps]),
        "obs_shape": np.array([str(e.observations.shape[1:]) for e in eps], dtype=object),
        "obs_kind": np.array([obs_kind] * len(eps), dtype=object),
    }


@pytest.mark.ray
@pytest.mark.parametrize("batch_format", ["pyarrow", "numpy"])
def test_reader_inside_ray_map_batches(ray_local: Any, shared_data: Any, batch_format: str) -> None:
    ds = ray_local.data.read_parquet(str(shared_data / UNCOMPRESSED))
    rows = ds.map_batches(_summarize, batch_format=batch_format, batch_size=None).take_all()
    assert len(rows) == 12 and sum(r["length"] for r in rows) == 295
    assert all(r["done"] for r in rows) and {r["obs_shape"] for r in rows} == {"(4,)"}
    kinds = {r["obs_kind"] for r in rows}
    # Ray hands tensor columns over as its extension type, or as [n, 4] ndarrays
    assert kinds == (
        {"arrow:ray.data.arrow_tensor_v2"} if batch_format == "pyarrow" else {"numpy:float32:2"}
    )


class _StatefulReader:
    """A map_batches actor: one reader for the whole stream, as the prelearner holds it."""

    def __init__(self) -> None:
        self.reader = RowsReader()

    def __call__(self, batch: Any) -> dict[str, np.ndarray]:
        eps = self.reader.read(batch, "ray").episodes
        return {
            "id": np.array([e.id for e in eps], dtype=object),
            "t_started": np.array([e.t_started for e in eps]),
            "length": np.array([len(e) for e in eps]),
            "done": np.array([e.is_done for e in eps]),
        }


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_stateful_reader_actor_stitches_small_batches(ray_local: Any, shared_data: Any) -> None:
    ctx = ray_local.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # rows without t: batches must come in order
    ds = ray_local.data.read_parquet(str(shared_data / UNCOMPRESSED))
    # num_cpus=0: with one CPU, an actor holding it would starve the read tasks.
    rows = ds.map_batches(
        _StatefulReader, batch_format="numpy", batch_size=50, concurrency=1, num_cpus=0
    ).take_all()
    lengths: dict[str, int] = {}
    for r in sorted(rows, key=lambda r: (r["id"], r["t_started"])):
        assert r["t_started"] == lengths.get(r["id"], 0)  # fragments continue where they left
        lengths[r["id"]] = r["t_started"] + r["length"]
    assert len(lengths) == 12 and sum(lengths.values()) == 295
    assert sum(r["done"] for r in rows) == 12


def test_nan_ids_from_ray_numpy_format_are_null() -> None:
    """Ray's "numpy" format turns all-null agent_id/module_id columns into float NaN."""
    cols = episodes_to_columns([make_episode(6, id="A", seed=1)])
    cols["agent_id"] = np.full(6, np.nan, np.float32)
    cols["module_id"] = np.full(6, np.nan, np.float32)
    reader = RowsReader()
    (a,) = reader.read({k: v[:4] for k, v in cols.items()}).episodes
    assert a.agent_id is None and a.module_id is None and ("A", None) in reader.pending
    (b,) = reader.read({k: v[4:] for k, v in cols.items()}).episodes
    assert b.t_started == 4 and b.is_done and reader.pending == {}


def test_truncated_mid_episode_names_the_truncateds_column() -> None:
    cols = _base()
    cols["truncateds"][9] = True  # C's first row
    with pytest.raises(EpisodeValidationError, match="2 more rows follow") as exc:
        read(cols)
    assert (exc.value.where.column, exc.value.where.episode_id, exc.value.where.row) == (
        "truncateds",
        "C",
        9,
    )


def test_registered_as_rows_format() -> None:
    from offline_prelearner.io.readers import Reader, make_reader

    reader = make_reader(ReadConfig(format="rows", schema="d4rl"))
    assert isinstance(reader, RowsReader) and isinstance(reader, Reader)
    assert reader.schema.name == "d4rl"
