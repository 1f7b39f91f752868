"""Rows without a next-observation column (``next_obs_from: next_row``; LeRobot-style Parquet).

The reader's episodes, read in random batches, are checked against a plain-Python reference that
builds transitions from obs-only rows one row at a time; the ledger against the rule (terminated:
L steps; truncated: L - 1, the last row ``next_obs_unknown``; open: L - 1, the last row held).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.ledger import Ledger
from offline_prelearner.errors import ConfigError, EpisodeValidationError, SchemaError
from offline_prelearner.io.arrow_numpy import column_to_numpy
from offline_prelearner.io.formats.rows.reader import RowsReader
from offline_prelearner.io.schema import ColumnSchema, detect_schema, load_schema, nearest_preset

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENDS = ("terminated", "truncated", "open")


# ---------------------------------------------------------------------------------------------
# data and the plain-loop reference
# ---------------------------------------------------------------------------------------------
@st.composite
def obs_only_rows(draw: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of random episodes (lengths from 1, each ending terminated, truncated or open),
    interleaved at random but each episode's rows in step order."""
    n = draw(st.integers(1, 5))
    ends = {f"e{k}": draw(st.sampled_from(ENDS)) for k in range(n)}
    lengths = {e: draw(st.integers(1, 6)) for e in ends}
    queues = {e: list(range(lengths[e])) for e in ends}
    rows: list[dict[str, Any]] = []
    while any(queues.values()):
        e = draw(st.sampled_from(sorted(k for k, q in queues.items() if q)))
        t = queues[e].pop(0)
        last = t == lengths[e] - 1
        k = int(e[1:])
        rows.append(
            {
                "eps_id": e,
                "t": t,
                "obs": [float(100 * k + t), float(-t)],
                "actions": 10 * k + t,
                "rewards": float(t) / 2,
                "terminateds": last and ends[e] == "terminated",
                "truncateds": last and ends[e] == "truncated",
                "extra": 1000 * k + t,
            }
        )
    return rows, ends


def reference(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Transitions from obs-only rows, one row at a time: the next observation is the next row's
    obs of the episode; a terminated last row keeps its step (next obs: a copy of its own), a
    truncated or open last row is only the final observation. Episodes with no step are absent."""
    by_ep: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_ep.setdefault(r["eps_id"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for e, rs in by_ep.items():
        rs = sorted(rs, key=lambda r: r["t"])
        obs, act, rew, extra = [], [], [], []
        for i, r in enumerate(rs):
            obs.append(r["obs"])
            if i + 1 < len(rs) or r["terminateds"]:
                act.append(r["actions"])
                rew.append(r["rewards"])
                extra.append(r["extra"])
        last = rs[-1]
        if last["terminateds"]:
            obs.append(last["obs"])  # the copy stored where the next observation is irrelevant
        if not act:
            continue
        out[e] = {
            "obs": obs,
            "actions": act,
            "rewards": rew,
            "extra": extra,
            "terminated": bool(last["terminateds"]),
            "truncated": bool(last["truncateds"]),
            "t_started": 0,
        }
    return out


def to_batch(rows: list[dict[str, Any]], arrow: bool, with_t: bool) -> Any:
    cols = {k: [r[k] for r in rows] for k in rows[0] if with_t or k != "t"}
    if arrow:
        return pa.table(cols)
    return {k: np.asarray(v, dtype=np.float32 if k == "obs" else None) for k, v in cols.items()}


def stitched(episodes: list[Episode]) -> dict[str, Episode]:
    frags: dict[str, list[Episode]] = {}
    for ep in episodes:
        frags.setdefault(ep.id, []).append(ep)
    return {e: Episode.concat_fragments(fs) for e, fs in frags.items()}


# ---------------------------------------------------------------------------------------------
# property: any batching gives the reference's episodes, and the ledger balances
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(
    data=obs_only_rows(),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    arrow=st.booleans(),
    with_t=st.booleans(),
    shuffle=st.randoms(use_true_random=False),
)
def test_episodes_match_a_plain_loop_in_any_batching(
    data: tuple[list[dict[str, Any]], dict[str, str]],
    cuts: list[int],
    arrow: bool,
    with_t: bool,
    shuffle: Any,
) -> None:
    rows, ends = data
    bounds = sorted({0, len(rows), *(c for c in cuts if c < len(rows))})
    reader = RowsReader(ReadConfig(schema="rllib_obs_only", on_invalid="skip"))
    episodes: list[Episode] = []
    total = Ledger()
    for a, b in itertools.pairwise(bounds):
        part = rows[a:b]
        if with_t:  # with t, rows within a batch may come in any order
            part = shuffle.sample(part, len(part))
        got = reader.read(to_batch(part, arrow, with_t), source=f"part-{a}")
        assert got.ledger.balanced()
        assert got.ledger.rows_in == len(part)
        episodes.extend(got.episodes)
        total += got.ledger
    want = reference(rows)
    have = stitched(episodes)
    assert sorted(have) == sorted(want)
    for e, ref in want.items():
        ep = have[e]
        np.testing.assert_array_equal(ep.observations, np.asarray(ref["obs"], np.float32))
        assert ep.actions.tolist() == ref["actions"]
        assert ep.rewards.tolist() == ref["rewards"]
        assert ep.extras["extra"].tolist() == ref["extra"]
        assert (ep.terminated, ep.truncated, ep.t_started) == (
            ref["terminated"],
            ref["truncated"],
            ref["t_started"],
        )
    # the ledger: every row kept, or the last row of a truncated episode (next_obs_unknown),
    # or held (the last row of an episode still open), counted in rows_kept
    n_trunc = sum(1 for v in ends.values() if v == "truncated")
    n_open = sum(1 for v in ends.values() if v == "open")
    assert total.balanced() and total.rows_in == len(rows)
    assert total.rows_rejected.get("next_obs_unknown", 0) == n_trunc
    assert sum(total.rows_rejected.values()) == n_trunc
    assert total.rows_held == n_open
    assert set(reader.pending) == {(e, None) for e, v in ends.items() if v == "open"}
    steps = sum(len(v["actions"]) for v in want.values())
    assert total.rows_kept == steps + n_open
    # the end of the stream: held rows become next_obs_unknown (as D4RL drops an open end)
    total += reader.finish().ledger
    assert total.balanced() and total.rows_held == 0 and not reader.pending
    assert sum(total.rows_rejected.values()) == n_trunc + n_open
    assert total.rows_rejected.get("next_obs_unknown", 0) == n_trunc + n_open
    lengths = {e: sum(r["eps_id"] == e for r in rows) for e in ends}
    alone = sum(1 for e, v in ends.items() if v != "terminated" and lengths[e] == 1)
    assert total.episodes_rejected.get("next_obs_unknown", 0) == alone
    assert total.rows_kept == steps


# ---------------------------------------------------------------------------------------------
# examples
# ---------------------------------------------------------------------------------------------
def _rows(**cols: Any) -> pa.Table:
    return pa.table(cols)


def test_the_last_step_rule_in_one_batch() -> None:
    reader = RowsReader(ReadConfig(schema="rllib_obs_only", on_invalid="skip"))
    table = _rows(
        eps_id=["a", "a", "a", "b", "b", "c", "d", "d"],
        obs=[[0.0], [1.0], [2.0], [10.0], [11.0], [20.0], [30.0], [31.0]],
        actions=[0, 1, 2, 3, 4, 5, 6, 7],
        rewards=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        terminateds=[False, False, True, False, False, False, False, False],
        truncateds=[False, False, False, False, True, True, False, False],
    )
    got = reader.read(table, source="f.parquet")
    eps = {e.id: e for e in got.episodes}
    assert sorted(eps) == ["a", "b", "d"]  # c: one truncated row, no step
    assert eps["a"].observations.ravel().tolist() == [0, 1, 2, 2]  # terminated: a copy
    assert eps["a"].actions.tolist() == [0, 1, 2] and eps["a"].terminated
    assert eps["b"].observations.ravel().tolist() == [10, 11]  # truncated: last obs final
    assert eps["b"].actions.tolist() == [3] and eps["b"].truncated
    assert eps["d"].observations.ravel().tolist() == [30, 31] and not eps["d"].is_done
    led = got.ledger
    assert led.rows_rejected == {"next_obs_unknown": 2}  # b's and c's last rows
    assert led.episodes_rejected["next_obs_unknown"] == 1  # c
    assert led.rows_held == 1 and led.rows_kept == 6 and led.balanced()
    err = next(r.error for r in got.rejections if r.error.where.episode_id == "c")
    assert err.where.file == "f.parquet" and err.where.column == "truncateds"
    assert err.where.row == 5


def test_finish_names_the_held_rows() -> None:
    reader = RowsReader(ReadConfig(schema="rllib_obs_only", on_invalid="skip"))
    table = _rows(
        eps_id=["a", "a", "b"],
        obs=[[0.0], [1.0], [2.0]],
        actions=[0, 1, 2],
        rewards=[0.0, 1.0, 2.0],
        terminateds=[False, False, False],
    )
    reader.read(table.slice(0, 2), source="one.parquet")  # a: 1 step, row 1 held
    reader.read(table.slice(2), source="two.parquet")  # b: row 0 held, no step; a stays held
    end = reader.finish()
    assert end.ledger.rows_rejected == {"next_obs_unknown": 2} and end.ledger.rows_held == -2
    assert end.ledger.episodes_rejected == {"next_obs_unknown": 1} and end.ledger.balanced()
    where = {r.error.where.episode_id: r.error.where for r in end.rejections}
    assert (where["a"].file, where["a"].row) == ("one.parquet", 1)
    assert (where["b"].file, where["b"].row) == ("two.parquet", 0)
    assert not reader.pending and not reader.finish().rejections


def test_an_error_names_file_column_episode_and_row() -> None:
    reader = RowsReader(ReadConfig(schema="rllib_obs_only"))
    table = _rows(
        eps_id=["a", "a", "a"],
        obs=[[0.0], [1.0], [2.0]],
        actions=[0, 1, 2],
        rewards=[0.0, 1.0, 2.0],
        terminateds=[False, True, True],
        t=[0, 1, 2],
    )
    with pytest.raises(EpisodeValidationError) as e:
        reader.read(table, source="f.parquet")
    w = e.value.where
    assert (w.file, w.column, w.episode_id, w.row) == ("f.parquet", "terminateds", "a", 1)


def test_a_held_row_meets_a_batch_of_other_columns_in_one_line() -> None:
    reader = RowsReader(ReadConfig(schema="rllib_obs_only", on_invalid="skip"))
    first = _rows(eps_id=["a"], obs=[[0.0]], actions=[0], rewards=[0.0], terminateds=[False])
    reader.read(first, source="one.parquet")
    other = _rows(eps_id=["a"], obs=[[1.0]], actions=[1], rewards=[1.0], terminateds=[True], x=[1])
    got = reader.read(other, source="two.parquet")
    assert got.ledger.rows_rejected == {"missing_columns": 1} and got.ledger.balanced()
    assert set(reader.pending) == {("a", None)}  # still held
    strict = RowsReader(ReadConfig(schema="rllib_obs_only"))
    strict.read(first, source="one.parquet")
    with pytest.raises(SchemaError, match="differ from the previous batch"):
        strict.read(other, source="two.parquet")


# ---------------------------------------------------------------------------------------------
# schema
# ---------------------------------------------------------------------------------------------
LEROBOT = [
    "observation.state",
    "action",
    "episode_index",
    "frame_index",
    "timestamp",
    "next.reward",
    "next.done",
    "next.success",
    "index",
    "task_index",
]


def test_detection_picks_the_obs_only_presets() -> None:
    assert detect_schema(LEROBOT).name == "lerobot"
    plain = ["eps_id", "obs", "actions", "rewards", "terminateds", "truncateds"]
    assert detect_schema(plain).name == "rllib_obs_only"
    assert detect_schema([*plain, "new_obs"]).name == "rllib"  # a next-obs column: read it
    assert detect_schema(["observation.state", "action"]) is None  # no episode id, no reward


def test_detection_says_why_no_preset_fits() -> None:
    no_reward = [c for c in LEROBOT if c != "next.reward"]  # real-robot sets often have none
    assert detect_schema(no_reward) is None
    near, lacks = nearest_preset(no_reward)
    assert near is not None and near.name == "lerobot" and lacks == ["rewards"]
    with pytest.raises(SchemaError, match=r"nearest, 'lerobot', lacks only 'next\.reward'"):
        load_schema("rllib").check(no_reward, source="f.parquet")


def test_the_default_schema_on_obs_only_rows_names_the_preset_that_fits() -> None:
    with pytest.raises(SchemaError, match="fit preset 'lerobot': pass --schema lerobot"):
        load_schema("rllib").check(LEROBOT, source="f.parquet")


def test_next_obs_from_in_json() -> None:
    lerobot = load_schema("lerobot")
    assert lerobot.next_obs_from_next_row and lerobot.column("new_obs") is None
    again = ColumnSchema.from_json(lerobot.to_json())
    assert again == lerobot and again.to_dict()["next_obs_from"] == "next_row"
    assert "next_obs_from" not in load_schema("rllib").to_dict()
    base = {"name": "x", "columns": {"obs": "o", "actions": "a", "rewards": "r"}}
    with pytest.raises(ConfigError, match="next_obs_from must be"):
        ColumnSchema.from_dict({**base, "next_obs_from": "obs"})
    with pytest.raises(ConfigError, match="new_obs is mapped"):
        ColumnSchema.from_dict(
            {**base, "columns": {**base["columns"], "new_obs": "n"}, "next_obs_from": "next_row"}
        )


# ---------------------------------------------------------------------------------------------
# CLI on a LeRobot-style Parquet file
# ---------------------------------------------------------------------------------------------
def lerobot_file(
    path: Path, lengths: tuple[int, ...] = (5, 3, 4), split_at: int | None = None
) -> int:
    cols: dict[str, list[Any]] = {c: [] for c in LEROBOT}
    i = 0
    for ep, n in enumerate(lengths):
        for f in range(n):
            cols["observation.state"].append([float(ep), float(f)])
            cols["action"].append([0.1 * f, -0.1 * f])
            cols["episode_index"].append(ep)
            cols["frame_index"].append(f)
            cols["timestamp"].append(f / 10)
            cols["next.reward"].append(float(f == n - 1))
            cols["next.done"].append(f == n - 1)
            cols["next.success"].append(f == n - 1)
            cols["index"].append(i)
            cols["task_index"].append(0)
            i += 1
    vec = pa.list_(pa.float32())
    vectors = ("observation.state", "action")
    table = pa.table({c: pa.array(v, vec) if c in vectors else v for c, v in cols.items()})
    if split_at is None:
        pq.write_table(table, path, row_group_size=4)  # episodes cut across row groups
    else:  # two files in one folder, an episode cut between them
        path.mkdir()
        pq.write_table(table.slice(0, split_at), path / "part-0.parquet")
        pq.write_table(table.slice(split_at), path / "part-1.parquet")
    return i


def test_cli_inspect_and_process_a_lerobot_file(tmp_path: Path, capsys: Any) -> None:
    data = tmp_path / "lerobot.parquet"
    n = lerobot_file(data)  # 3 episodes of 5, 3 and 4 frames, every last one next.done
    assert main(["inspect", str(data), "--schema", "lerobot", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["rows"], report["episodes"], report["terminated"]) == (n, 3, 3)
    assert report["timesteps"] == n and report["rows_balance"]  # terminated: L steps each
    assert report["per_file"][0]["rows_kept"] == n
    assert report["extras"] == ["next.success", "task_index", "timestamp"]


def test_cli_process_stitches_episodes_cut_across_files_and_batches(
    tmp_path: Path, capsys: Any
) -> None:
    data = tmp_path / "lerobot"
    n = lerobot_file(data, split_at=10)  # episode 2: frames 0-1 in part-0, 2-3 in part-1
    out = tmp_path / "out"
    argv = ["process", str(data), "--schema", "lerobot", "--out", str(out), "--json"]
    assert main([*argv, "--set", "ray.batch_size=3"]) == 0  # batches of 3 rows
    stats = json.loads(capsys.readouterr().out)
    assert stats["rows_in"] == n and stats["rows_balance"] and stats["samples_written"] == n
    samples = pq.read_table(out / "samples")
    obs = column_to_numpy(samples, "obs")
    new_obs = column_to_numpy(samples, "new_obs")
    order = np.lexsort((samples.column("t").to_numpy(), samples.column("eps_id").to_numpy()))
    obs, new_obs = obs[order], new_obs[order]
    term = samples.column("terminateds").to_numpy(zero_copy_only=False)[order]
    # inside an episode: the next frame's observation.state; after the last: a copy of its own
    np.testing.assert_array_equal(new_obs[~term], obs[1:][~term[:-1]])
    np.testing.assert_array_equal(new_obs[term], obs[term])
    assert sorted(samples.column("eps_id").to_pylist()) == [0] * 5 + [1] * 3 + [2] * 4


def test_cli_default_schema_on_a_lerobot_file_names_the_preset(tmp_path: Path, capsys) -> None:
    data = tmp_path / "lerobot.parquet"
    lerobot_file(data)
    assert main(["inspect", str(data), "--on-invalid", "raise"]) != 0
    err = capsys.readouterr().err
    assert "--schema lerobot" in err


def test_fragments_read_by_two_readers_do_not_join_and_carry_nothing_wrong() -> None:
    """The documented limitation: the held row stays with the first reader."""
    rows = _rows(
        eps_id=["a"] * 6,
        t=list(range(6)),
        obs=[[float(i)] for i in range(6)],
        actions=list(range(6)),
        rewards=[0.0] * 6,
        terminateds=[False] * 5 + [True],
    )
    one = RowsReader(ReadConfig(schema="rllib_obs_only"))
    two = RowsReader(ReadConfig(schema="rllib_obs_only"))
    (first,) = one.read(rows.slice(0, 3), source="part-0").episodes
    (second,) = two.read(rows.slice(3), source="part-1").episodes
    assert first.actions.tolist() == [0, 1] and first.t_end == 2 and not first.is_done
    assert second.actions.tolist() == [3, 4, 5] and second.t_started == 3
    assert set(one.pending) == {("a", None)}  # step t=2 waits in the first reader
    with pytest.raises(EpisodeValidationError, match="do not continue"):
        Episode.concat_fragments([first, second])


def test_a_refused_batch_leaves_the_held_rows_held() -> None:
    reader = RowsReader(ReadConfig(schema="rllib_obs_only", on_invalid="skip"))
    cols = {"eps_id": ["a"], "actions": [0], "rewards": [0.0], "terminateds": [False]}
    reader.read(_rows(obs=[[0.0]], **cols), source="one.parquet")
    bad = reader.read(_rows(observation=[[1.0]], **cols), source="two.parquet")  # no obs
    assert bad.ledger.rows_rejected == {"missing_columns": 1} and bad.ledger.rows_held == 0
    end = {**cols, "actions": [1], "terminateds": [True]}
    got = reader.read(_rows(obs=[[1.0]], **end), source="three.parquet")
    (ep,) = got.episodes
    assert ep.observations.ravel().tolist() == [0.0, 1.0, 1.0] and ep.actions.tolist() == [0, 1]
    assert got.ledger.rows_held == -1 and got.ledger.rows_kept == 1 and got.ledger.balanced()
    assert not reader.pending


def test_cli_inspect_counts_truncated_and_open_last_rows(tmp_path: Path, capsys: Any) -> None:
    data = tmp_path / "rows.parquet"
    pq.write_table(
        _rows(
            eps_id=[1, 1, 1, 2, 2, 3, 4],
            obs=[[0.0], [1.0], [2.0], [10.0], [11.0], [20.0], [30.0]],
            actions=[0, 1, 2, 3, 4, 5, 6],
            rewards=[0.0] * 7,
            terminateds=[0, 0, 1, 0, 0, 0, 0],
            truncateds=[0, 0, 0, 0, 1, 0, 0],
        ),
        data,
    )
    argv = ["inspect", str(data), "--schema", "rllib_obs_only", "--json", "--on-invalid", "skip"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    # 1: 3 steps kept; 2: 1 step, its truncated last row next_obs_unknown; 3 and 4: one open row
    # each, held to the end of the data, then next_obs_unknown (whole episodes)
    assert report["timesteps"] == 4 and (report["terminated"], report["truncated"]) == (1, 1)
    assert report["rejected"] == {"next_obs_unknown": 3} and report["rows_balance"]
    assert report["per_file"][0]["rows_kept"] == 4
