"""Agents of one episode id mapped to ONE module: every agent's transitions come out once.

Two agents that share an episode id are two episodes (the rows reader, de-duplication and the
``sample_all`` pending fragments key them by ``(eps_id, agent_id)``). The buffers that
``sample_all`` and the buffer path fill per module keyed them by the episode id alone: the
second agent's episode was taken as a repeat of the first's (dropped, its steps silently lost)
or as an overlapping fragment of it ("fragment t=0..23 overlaps the stored steps"). Here real
Parquet rows of interleaved agents, cut at batch and file edges, go through ``sample_all``,
the buffer path and ``offline-prelearner process --engine local``, each against a plain-Python
reference: every agent's transitions once, none
missing, same content.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, make_episode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner import OfflinePreLearner
from offline_prelearner.errors import DataError
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.jobs.file_batches import iter_file_batches
from offline_prelearner.replay.shards.shard import ReplayShard

ONE_MODULE = {"a0": "m", "a1": "m", "a2": "m"}

Transition = tuple[Any, int, bytes, bytes, int, float]


def recording(seed: int, agents: int = 2, episodes: int = 4, with_t: bool = False) -> pa.Table:
    """Rows of ``agents`` agents sharing episode ids ``ep0..``, their fragments interleaved as a
    recorder writes them (each agent's rows in order, agents alternating at random)."""
    rng = np.random.default_rng(seed)
    streams = []
    for a in range(agents):
        lengths = rng.integers(1, 30, episodes).tolist()
        eps = [
            make_episode(n, id=f"ep{k}", agent_id=f"a{a}", seed=seed * 1000 + a * 100 + k)
            for k, n in enumerate(lengths)
        ]
        streams.append(episodes_to_rows(eps, with_t=with_t))
    at = [0] * agents
    parts = []
    while any(p < s.num_rows for p, s in zip(at, streams, strict=True)):
        a = int(rng.integers(0, agents))
        n = int(rng.integers(1, 25))
        if at[a] < streams[a].num_rows:
            parts.append(streams[a].slice(at[a], n))
            at[a] += n
    return pa.concat_tables(parts)


def reference(table: pa.Table) -> Counter[Transition]:
    """Every transition of every done episode of every agent, once: a plain loop over rows."""
    ids = table.column("eps_id").to_pylist()
    agents = table.column("agent_id").to_pylist()
    obs = table.column("obs").to_pylist()
    new_obs = table.column("new_obs").to_pylist()
    actions = table.column("actions").to_pylist()
    rewards = table.column("rewards").to_pylist()
    done = np.logical_or(table.column("terminateds"), table.column("truncateds")).tolist()
    open_: dict[tuple[Any, Any], list[Transition]] = {}
    out: Counter[Transition] = Counter()
    for i in range(table.num_rows):
        steps = open_.setdefault((ids[i], agents[i]), [])
        o = np.asarray(obs[i], np.float32).tobytes()
        n = np.asarray(new_obs[i], np.float32).tobytes()
        steps.append((ids[i], len(steps), o, n, int(actions[i]), float(rewards[i])))
        if done[i]:
            out.update(open_.pop((ids[i], agents[i])))
    assert not open_
    return out


def transitions(outputs: list[dict[str, Any]]) -> Counter[Transition]:
    out: Counter[Transition] = Counter()
    for o in outputs:
        obs = np.asarray(o["obs"], np.float32)
        new = np.asarray(o["new_obs"], np.float32)
        out.update(
            (e, int(t), obs[i].tobytes(), new[i].tobytes(), int(a), float(r))
            for i, (e, t, a, r) in enumerate(
                zip(o["eps_id"], o["t"], o["actions"], o["rewards"], strict=True)
            )
        )
    return out


def run(cls: type[OfflinePreLearner], batches: list[pa.Table]) -> list[dict[str, Any]]:
    p = cls(sample_all=True, seed=0, **{"modules.agent_to_module": ONE_MODULE})
    out = [o for b in batches for o in p(b)]
    assert p.stats()["pending_fragments"] == 0
    assert {str(o["module_id"][0]) for o in out} <= {"m"}
    return out


def cut(table: pa.Table, edges: list[int]) -> list[pa.Table]:
    e = [0, *sorted({c for c in edges if 0 < c < table.num_rows}), table.num_rows]
    return [table.slice(a, b - a) for a, b in itertools.pairwise(e)]


@pytest.mark.parametrize("cls", [OfflinePreLearner])
def test_two_agents_one_module_in_one_batch(cls: type[OfflinePreLearner]) -> None:
    # Same lengths for both agents: the second agent's episode was dropped as a repeat.
    eps = [make_episode(24, id="ep0", agent_id=a, seed=i) for i, a in enumerate(["a0", "a1"])]
    eps += [make_episode(n, id="ep1", agent_id=a, seed=9 + n) for n, a in [(10, "a0"), (6, "a1")]]
    table = episodes_to_rows(eps, with_t=False)
    got = transitions(run(cls, [table]))
    assert sum(got.values()) == table.num_rows == 64
    assert got == reference(table)
    # Different lengths: the second agent's episode was refused as an overlap.
    eps[1] = make_episode(26, id="ep0", agent_id="a1", seed=5)
    table = episodes_to_rows(eps, with_t=True)
    assert transitions(run(cls, [table])) == reference(table)


@pytest.mark.parametrize("cls", [OfflinePreLearner])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_across_batch_and_file_edges(
    tmp_path: Path, cls: type[OfflinePreLearner], seed: int
) -> None:
    table = recording(seed, agents=2 + seed % 2)
    files = []
    for k, part in enumerate(cut(table, list(range(37, table.num_rows, 37)))):
        files.append(str(tmp_path / f"part-{k:03d}.parquet"))
        pq.write_table(part, files[-1])
    want = reference(pq.read_table(tmp_path))
    assert len(files) >= 3
    for batch_size in (None, 11, 50):
        batches = [t for t, _ in iter_file_batches(files, batch_size)]
        got = transitions(run(cls, batches))
        assert sum(got.values()) == sum(want.values()) == table.num_rows
        assert got == want


def test_process_cli_local_engine(tmp_path: Path) -> None:
    table = recording(4, agents=3)
    src = tmp_path / "in"
    src.mkdir()
    for k, part in enumerate(cut(table, list(range(40, table.num_rows, 40)))):
        pq.write_table(part, src / f"part-{k:03d}.parquet")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable, "-m", "offline_prelearner", "process", str(src), "--out", str(out),
            "--engine", "local", "--set", "sample_all=true", "--set", "batch_size=90",
            "--set", "modules.agent_to_module=" + json.dumps(ONE_MODULE),
        ],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    samples = sorted((out / "samples").rglob("*.parquet"))  # not out/_index.parquet
    written = [pq.read_table(f).to_pydict() for f in samples]
    assert written
    got = transitions(written)
    assert sum(got.values()) == table.num_rows
    assert got == reference(table)


@st.composite
def interleavings(draw: Any) -> tuple[pa.Table, list[int], int]:
    table = recording(
        draw(st.integers(0, 10_000)),
        agents=draw(st.integers(1, 3)),
        episodes=draw(st.integers(1, 4)),
        with_t=draw(st.booleans()),
    )
    cuts = draw(st.lists(st.integers(1, max(1, table.num_rows - 1)), max_size=6))
    return table, cuts, draw(st.sampled_from([1, 3]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interleavings())
def test_random_interleavings_and_cuts(case: tuple[pa.Table, list[int], int]) -> None:
    table, cuts, n_step = case
    want = reference(table)
    for cls in (OfflinePreLearner,):
        p = cls(sample_all=True, seed=0, n_step=n_step, **{"modules.agent_to_module": ONE_MODULE})
        out = [o for b in cut(table, cuts) for o in p(b)]
        if n_step == 1:
            assert transitions(out) == want
        else:  # n-step rewards differ from the rows': count and first observations
            pairs = [zip(o["eps_id"], o["t"], strict=True) for o in out]
            got = Counter((e, int(t)) for z in pairs for e, t in z)
            assert got == Counter((w[0], w[1]) for w in want.elements())
            assert sum(len(o["obs"]) for o in out) == table.num_rows


@pytest.mark.parametrize("cls", [OfflinePreLearner])
def test_buffer_path_keys_episodes_by_agent(cls: type[OfflinePreLearner]) -> None:
    table = recording(7, agents=3)
    p = cls(seed=0, train_batch_size=64, **{"modules.agent_to_module": ONE_MODULE})
    for b in cut(table, list(range(29, table.num_rows, 29))):
        list(p(b))
    buf = p.buffers["m"]
    assert len(buf) == table.num_rows  # every agent's steps held, none taken as a repeat
    keys = set(zip(table["eps_id"].to_pylist(), table["agent_id"].to_pylist(), strict=True))
    assert buf.storage.num_episodes == len(keys)
    sample = p.sample()["m"]
    assert set(sample["eps_id"].tolist()) <= set(table["eps_id"].to_pylist())
    steps = {(w[0], w[1], w[2]) for w in reference(table)}
    obs = np.asarray(sample["obs"], np.float32)
    assert all(
        (e, int(t), obs[i].tobytes()) in steps
        for i, (e, t) in enumerate(zip(sample["eps_id"], sample["t"], strict=True))
    )


def test_agents_after_agentless_episodes_in_one_buffer_is_an_error() -> None:
    """A buffer keyed by episode id alone cannot take agents' episodes: a clear error, not a
    silent merge of two agents' steps."""
    p = OfflinePreLearner(seed=0)
    list(p(episodes_to_rows([make_episode(5, id="ep0")])))
    rows = episodes_to_rows([make_episode(5, id="ep0", agent_id="a0", seed=1)])
    with pytest.raises(DataError, match="module 'default_policy': episodes with agent ids"):
        list(p(rows))


@pytest.mark.parametrize("as_columns", [False, True])
def test_replay_shard_keys_episodes_by_agent(tmp_path: Path, as_columns: bool) -> None:
    """A replay shard (the Ape-X feeder's buffer) holds both agents' episodes of one id, samples
    carry the real ids, and a checkpoint keeps the keying."""
    table = recording(11, agents=2)
    p = OfflinePreLearner(seed=0)
    episodes = p.validate(p.map_to_episodes(table))
    assert episodes.columns is not None
    items: list[Any] = [episodes.columns] if as_columns else list(episodes.episodes)
    shard = ReplayShard({"seed": 0}, shard=0)
    shard.add(items)
    assert len(shard.buffer) == table.num_rows
    rows = shard.sample(64).columns
    assert set(np.asarray(rows["eps_id"]).tolist()) <= set(table["eps_id"].to_pylist())
    shard.save(tmp_path / "ck")
    again = ReplayShard({"seed": 0}, shard=0)
    again.load(tmp_path / "ck")
    assert again.agent_keyed and len(again.buffer) == table.num_rows
    assert set(np.asarray(again.sample(64).columns["eps_id"]).tolist()) <= set(
        table["eps_id"].to_pylist()
    )
