"""The learner stream on several actors, rows without ``t``: episodes stay whole.

Ranges of files own the episodes whose first row they hold and read the rows of them that lie
in later ranges (jobs/stream/episode_ranges.py). Checked three ways: the planning functions
against plain loops (Hypothesis: random episode lengths, interleaved episodes, reused ids, file
and range cuts); the plan read range by range, one prelearner each, against one prelearner
reading every file in order and against episodes rebuilt from the rows by a plain loop; and the
real stream on Ray with 2 and 3 actors against 1 actor and that plain reference.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner import OfflinePreLearner, PreLearnerConfig
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.jobs.file_batches import FilePiece, iter_file_batches, read_groups
from offline_prelearner.jobs.stream.episode_ranges import episode_owners, plan_ranges, range_pieces


# ------------------------------------------------------------------ plain-loop references
def owners_loop(codes: list[int], done: list[bool], range_of: list[int]) -> list[int]:
    """One reader in file order: a key's episode is open from its first row to its done row."""
    open_: dict[int, int] = {}
    out = []
    for k, d, r in zip(codes, done, range_of, strict=True):
        out.append(open_.setdefault(k, r))
        if d:
            del open_[k]
    return out


def piece_rows(item: str | FilePiece, start: dict[str, int], rows: dict[str, int]) -> list[int]:
    """The input rows (file order, over all files) a plan's item reads."""
    if isinstance(item, str):
        return list(range(start[item], start[item] + rows[item]))
    return [start[item.path] + i for a, b in item.runs for i in range(a, b)]


@st.composite
def stream_layout(draw: Any) -> tuple[list[int], list[bool], list[int], list[int]]:
    """Rows of a recording: ``envs`` streams of episodes whose fragments interleave (ids
    sometimes reused after a done row), cut into files, the files into ranges."""
    envs = draw(st.integers(1, 3))
    codes: list[int] = []
    done: list[bool] = []
    current = [draw(st.integers(0, 4)) + 10 * e for e in range(envs)]
    for _ in range(draw(st.integers(1, 25))):  # fragments, each of one env's open episode
        e = draw(st.integers(0, envs - 1))
        n = draw(st.integers(1, 12))
        ends = draw(st.booleans())
        codes += [current[e]] * n
        done += [False] * (n - 1) + [ends]
        if ends:  # the next episode of this env: a fresh id, or an id used before
            current[e] = draw(st.integers(0, 4)) + 10 * e if draw(st.booleans()) else len(codes)
    n = len(codes)
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=8))) | {0, n})
    files = [b - a for a, b in itertools.pairwise(cuts)]  # zero-row files included
    fcuts = sorted(set(draw(st.lists(st.integers(0, len(files)), max_size=5))) | {0, len(files)})
    groups = [b - a for a, b in itertools.pairwise(fcuts) if b > a]
    return codes, done, files, groups


@given(stream_layout())
@settings(max_examples=300, deadline=None)
def test_owners_are_the_first_range_of_each_episode(layout: Any) -> None:
    codes, done, files, groups = layout
    file_range = np.repeat(np.arange(len(groups)), groups)
    range_of = np.repeat(file_range, files)
    got = episode_owners(np.array(codes, np.int64), np.array(done), range_of)
    assert got.tolist() == owners_loop(codes, done, range_of.tolist())


@given(stream_layout())
@settings(max_examples=300, deadline=None)
def test_each_range_reads_the_rows_it_owns_once_in_file_order(layout: Any) -> None:
    codes, done, files, groups = layout
    names = [f"f{i}" for i in range(len(files))]
    it = iter(names)
    named = [[next(it) for _ in range(g)] for g in groups]
    range_of = np.repeat(np.repeat(np.arange(len(groups)), groups), files)
    owner = np.array(owners_loop(codes, done, range_of.tolist()), np.int64)
    plan = range_pieces(named, files, owner)
    start = dict(zip(names, np.concatenate([[0], np.cumsum(files)]).tolist(), strict=False))
    rows = dict(zip(names, files, strict=True))
    seen = []
    for g, items in enumerate(plan):
        read = [r for item in items for r in piece_rows(item, start, rows)]
        assert read == np.flatnonzero(owner == g).tolist()  # its episodes, rows in file order
        assert all(not isinstance(i, FilePiece) or i.rows > 0 for i in items)
        seen += read
    assert sorted(seen) == list(range(len(codes)))  # every row once


# ------------------------------------------------------------------ files on disk
def write_recording(folder: Path, seed: int, envs: int = 2, agents: bool = False) -> list[str]:
    """Rows without ``t`` as a recorder with ``envs`` environments writes them: fragments of the
    envs' episodes interleave; one long episode spans three or more files; files of 30-90 rows.
    With ``agents`` the envs are agents of shared episode ids (keys: episode id and agent)."""
    rng = np.random.default_rng(seed)
    rows: list[pa.Table] = []
    streams = []
    for e in range(envs):
        lengths = rng.integers(1, 40, 6).tolist()
        if e == 0:
            lengths.insert(2, 170)  # longer than three files
        eps = [
            make_episode(
                n,
                id=f"ep{k}" if agents else f"env{e}-ep{k}",
                agent_id=f"a{e}" if agents else None,
                seed=seed * 100 + e * 10 + k,
            )
            for k, n in enumerate(lengths)
        ]
        streams.append(episodes_to_rows(eps, with_t=False, layout="fast"))
    at = [0] * envs
    while any(a < s.num_rows for a, s in zip(at, streams, strict=True)):
        e = int(rng.integers(0, envs))
        n = int(rng.integers(5, 60))
        if at[e] < streams[e].num_rows:
            rows.append(streams[e].slice(at[e], n))
            at[e] += n
    table = pa.concat_tables(rows)
    assert "t" not in table.column_names
    files = []
    start = 0
    while start < table.num_rows:
        n = int(rng.integers(30, 90))
        path = folder / f"part-{len(files):03d}.parquet"
        pq.write_table(table.slice(start, n), path)
        files.append(str(path))
        start += n
    return files


def reference_transitions(files: list[str]) -> Counter[tuple[Any, ...]]:
    """Every transition of every done episode, by a plain loop over the rows in file order."""
    table = pa.concat_tables([pq.read_table(f) for f in files])
    ids = list(zip(table["eps_id"].to_pylist(), table["agent_id"].to_pylist(), strict=True))
    obs = table.column("obs").to_pylist()  # the fast layout: a cell is the row's raw bytes
    done = np.logical_or(table.column("terminateds"), table.column("truncateds"))
    open_: dict[Any, list[tuple[Any, ...]]] = {}
    out: Counter[tuple[Any, ...]] = Counter()
    for i, eid in enumerate(ids):
        steps = open_.setdefault(eid, [])
        steps.append((eid[0], len(steps), obs[i]))
        if done[i]:
            out.update(open_.pop(eid))
    return out


def transitions(outputs: list[dict[str, np.ndarray]]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for o in outputs:
        obs = np.asarray(o["obs"])
        out.update(
            (e, int(t), obs[i].tobytes())
            for i, (e, t) in enumerate(zip(o["eps_id"], o["t"], strict=True))
        )
    return out


def run_ranges(groups: list[Any], config: PreLearnerConfig) -> list[dict[str, np.ndarray]]:
    """Each range read by a prelearner of its own (as each actor of the stream would)."""
    outputs = []
    for items in groups:
        p = OfflinePreLearner(config)
        for table, source in iter_file_batches(items, config.ray.batch_size):
            p.source = source
            outputs += list(p(table))
    return outputs


@pytest.mark.parametrize(("seed", "agents"), [(0, False), (1, False), (2, False), (3, True)])
def test_planned_ranges_give_the_episodes_of_one_reader(
    tmp_path: Path, seed: int, agents: bool
) -> None:
    files = write_recording(tmp_path, seed, agents=agents)
    cfg = PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 60})
    if agents:  # a module per agent: one module's buffer takes one episode of an id at a time
        cfg = cfg.with_updates({"modules.agent_to_module": {"a0": "m0", "a1": "m1"}})
    groups = read_groups(files, 60)
    plan = plan_ranges(groups, cfg.with_updates({"format": "rows"}))
    assert plan is not None and len(plan) == len(groups) >= 4
    one = OfflinePreLearner(cfg)
    in_order = [o for table, _ in iter_file_batches(files, 60) for o in one(table)]
    expected = reference_transitions(files)
    assert transitions(in_order) == expected
    assert transitions(run_ranges(plan, cfg)) == expected
    # What the stream did without the plan: pieces of cut episodes lost or counted from t=0.
    assert transitions(run_ranges(groups, cfg)) != expected


def test_three_step_windows_cross_range_edges(tmp_path: Path) -> None:
    files = write_recording(tmp_path, 7)
    cfg = PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 60, "n_step": 3})
    plan = plan_ranges(read_groups(files, 60), cfg.with_updates({"format": "rows"}))
    assert plan is not None
    one = OfflinePreLearner(cfg)
    in_order = [o for table, _ in iter_file_batches(files, 60) for o in one(table)]

    def windows(outs: list[dict[str, np.ndarray]]) -> Counter[tuple[Any, ...]]:
        return Counter(
            (e, int(t), int(n), np.asarray(o["new_obs"])[i].tobytes())
            for o in outs
            for i, (e, t, n) in enumerate(zip(o["eps_id"], o["t"], o["n_step"], strict=True))
        )

    assert windows(run_ranges(plan, cfg)) == windows(in_order)


def test_nothing_to_plan_with_t_or_one_range(tmp_path: Path) -> None:
    eps = [make_episode(50, id=f"e{k}") for k in range(3)]
    table = episodes_to_rows(eps, layout="fast")  # with t
    for i in range(3):
        pq.write_table(table.slice(i * 50 + 25, 50), tmp_path / f"p{i}.parquet")
    files = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    cfg = PreLearnerConfig().with_updates({"format": "rows"})
    assert plan_ranges([[f] for f in files], cfg) is None  # t joins the pieces instead
    assert plan_ranges([files], cfg) is None


# ------------------------------------------------------------------ the real stream on Ray
@pytest.mark.ray
@pytest.mark.slow  # three streams, each starting its actors: ~56 s on 2 busy cores
def test_stream_on_two_and_three_actors_sees_the_episodes_of_one(
    ray_local: Any, tmp_path: Path
) -> None:
    from offline_prelearner.jobs.stream.learner_stream import iter_learner_batches

    files = write_recording(tmp_path, 11, envs=2)
    expected = reference_transitions(files)
    seen = {}
    for actors in (1, 2, 3):
        cfg = PreLearnerConfig().with_updates(
            {"sample_all": True, "batch_size": 60, "ray.concurrency": actors, "ray.read": "actor"}
        )
        outs = []
        for b in iter_learner_batches(str(tmp_path), cfg):
            sb = b["default_policy"]
            outs.append({k: np.asarray(sb[k]) for k in ("eps_id", "t", "obs")})
        seen[actors] = transitions(outs)
    # Without the plan, 3 actors lost 194 of these 390 transitions and made 75 wrong ones.
    assert seen[1] == expected
    assert seen[2] == expected
    assert seen[3] == expected


def test_an_unreadable_file_is_the_readers_to_count_or_refuse(tmp_path: Path) -> None:
    from offline_prelearner.errors import DataError

    files = write_recording(tmp_path, 5)
    Path(files[0]).write_bytes(b"not parquet at all")
    Path(files[2]).write_bytes(b"not parquet either")
    groups = read_groups(files, 60)
    cfg = PreLearnerConfig().with_updates({"format": "rows", "on_invalid": "skip"})
    plan = plan_ranges(groups, cfg)
    assert plan is not None
    for bad in (files[0], files[2]):  # read whole by their ranges: the reader rejects them
        assert [bad] in [[i for i in g if i == bad] for g in plan]
    with pytest.raises(DataError, match="part-000"):
        plan_ranges(groups, cfg.with_updates({"on_invalid": "raise"}))


@pytest.mark.parametrize("layout", ["rllib", "fast"])  # list cells (read 512 rows at a time) or not
@pytest.mark.parametrize(
    "runs", [((0, 7),), ((7, 1300),), ((3, 5), (10, 20), (600, 1300)), ((0, 1300),)]
)
def test_a_file_piece_reads_its_rows(tmp_path: Path, layout: str, runs: Any) -> None:
    table = episodes_to_rows(
        [make_episode(100, id=f"e{k}", seed=k) for k in range(13)], with_t=False, layout=layout
    )
    path = str(tmp_path / "f.parquet")
    pq.write_table(table, path, row_group_size=400)
    piece = FilePiece(path, runs)
    for size in (64, 4096):
        got = pa.concat_tables([t for t, _ in iter_file_batches([piece], size)])
        want = table.take(np.concatenate([np.arange(a, b) for a, b in runs]))
        assert got.num_rows == piece.rows and got.equals(want.cast(got.schema))


def test_the_reading_actor_refuses_no_groups_and_a_group_past_the_end(tmp_path: Path) -> None:
    """No groups is refused when the actor is made; a task naming a group past the end in one
    line, read ahead or not (it read nothing, or raised IndexError)."""
    from offline_prelearner.errors import ConfigError
    from offline_prelearner.jobs.stream.learner_stream import ReadingPreLearnerActor

    files = write_recording(tmp_path, 0)
    config = PreLearnerConfig().with_updates({"sample_all": True, "seed": 0})
    with pytest.raises(ConfigError, match="needs the job's file groups; none given"):
        ReadingPreLearnerActor(OfflinePreLearner, config, [])
    groups = read_groups(files, 200)
    for ahead in (True, False):
        actor = ReadingPreLearnerActor(OfflinePreLearner, config, groups, read_ahead=ahead)
        assert list(actor(pa.table({"group": [0]})))  # group 0 is read and sampled
        task = pa.table({"group": [len(groups)]})
        with pytest.raises(ConfigError, match=f"file group {len(groups)} does not exist"):
            list(actor(task))
