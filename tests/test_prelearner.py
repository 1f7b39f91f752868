"""OfflinePreLearner in one process (no Ray): the chain, its hooks, sample_all, priorities."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import ConfigError, EpisodeValidationError
from offline_prelearner.prelearner import OfflinePreLearner
from offline_prelearner.replay.batch import MultiAgentBatch

ROWS = sorted((REPO / "datasets/cartpole-v1/rows").glob("*.parquet"))
EPISODES = sorted((REPO / "datasets/cartpole-v1/episodes").glob("*.parquet"))
REQUIRED = {
    "module_id",
    "eps_id",
    "t",
    "obs",
    "actions",
    "rewards",
    "new_obs",
    "terminateds",
    "truncateds",
    "n_step",
    "weights",
}


def run_all(p: OfflinePreLearner, files: list[Path] = ROWS) -> list[dict[str, np.ndarray]]:
    out = []
    for f in files:
        out += list(p(pq.read_table(f)))
    return out


def test_each_batch_yields_a_train_batch_with_the_learner_columns() -> None:
    p = OfflinePreLearner(train_batch_size=32, n_step=3, gamma=0.9)
    outs = run_all(p)
    assert len(outs) == len(ROWS)
    for o in outs:
        assert set(o) >= REQUIRED and all(len(v) == 32 for v in o.values())
        assert set(o["module_id"]) == {"default_policy"}
        assert o["obs"].shape == (32, 4) and o["new_obs"].shape == (32, 4)
        assert ((o["n_step"] >= 1) & (o["n_step"] <= 3)).all()
        # A window shorter than 3 happens only where it reaches the episode's end.
        short = o["n_step"] < 3
        assert (o["terminateds"][short] | o["truncateds"][short]).all()
    st = p.stats()
    assert st["ledger"]["rows_in"] == 5000 and st["ledger"]["balanced"]
    assert st["buffers"]["default_policy"]["episodes_held"] == 222  # fragments joined
    ma = MultiAgentBatch.from_rows(outs[0])
    assert list(ma) == ["default_policy"] and len(ma["default_policy"]) == 32


def test_sample_all_emits_every_transition_once_in_order() -> None:
    p = OfflinePreLearner(sample_all=True, n_step=2, gamma=0.5)
    outs = run_all(p)
    eps = np.concatenate([o["eps_id"] for o in outs])
    t = np.concatenate([o["t"] for o in outs])
    assert len(eps) == 5000 and len(set(zip(eps, t, strict=True))) == 5000
    assert p.stats()["pending_fragments"] == 0
    # Against a plain loop over the source rows: 2-step discounted rewards within each episode.
    table = pa.concat_tables([pq.read_table(f) for f in ROWS]).to_pydict()
    by_ep: dict[str, list[tuple[int, float, bool]]] = {}
    for e, tt, r, d in zip(
        table["eps_id"], table["t"], table["rewards"], table["terminateds"], strict=True
    ):
        by_ep.setdefault(e, []).append((tt, r, d))
    expected = {}
    for e, steps in by_ep.items():
        steps.sort()
        for i, (tt, r, _) in enumerate(steps):
            nxt = steps[i + 1][1] if i + 1 < len(steps) else None
            expected[(e, tt)] = r + (0.5 * nxt if nxt is not None else 0.0)
    rewards = np.concatenate([o["rewards"] for o in outs])
    got = {(e, int(tt)): float(r) for e, tt, r in zip(eps, t, rewards, strict=True)}
    assert got == pytest.approx(expected)
    # Episode order: t increases within each episode's run of rows.
    for e in list(by_ep)[:20]:
        ts = t[eps == e]
        assert (np.diff(ts) == 1).all()


def test_msgpack_episodes_go_through_the_same_chain() -> None:
    p = OfflinePreLearner(train_batch_size=16)  # format "auto": the item column says episodes
    (out,) = run_all(p, EPISODES)
    assert len(out["obs"]) == 16
    assert p.stats()["ledger"]["rows_in"] == 222  # one record per episode


def test_modules_not_trained_are_dropped() -> None:
    p = OfflinePreLearner(modules_to_train=["someone_else"])
    assert run_all(p, ROWS[:1]) == []
    assert p.stats()["buffers"]["default_policy"]["timesteps_held"] == 1000


def test_a_subclass_overrides_one_hook() -> None:
    """The episode hooks take the batch's episodes as columns: a change on the columns as a
    whole, one made an episode at a time (``map_episodes``), and a routing of its own
    (``module_of``) each reach every sample."""

    class Clipped(OfflinePreLearner):
        def postprocess_episodes(self, columns):
            return dataclasses.replace(columns, rewards=np.clip(columns.rewards, 0, 0.25))

    class ClippedOneByOne(OfflinePreLearner):
        def postprocess_episodes(self, columns):
            def clip(ep):
                ep = copy.copy(ep)
                ep.rewards = np.clip(ep.rewards, 0, 0.25)
                return ep

            return columns.map_episodes(clip)

    for cls in (Clipped, ClippedOneByOne):
        out = run_all(cls(train_batch_size=64), ROWS[:1])[0]
        assert (out["rewards"] == 0.25).all()

    class Routed(Clipped):
        def module_of(self, columns):
            return ["elsewhere"] * len(columns)

    assert set(next(iter(Routed(train_batch_size=8)(pq.read_table(ROWS[0]))))["module_id"]) == {
        "elsewhere"
    }


def test_batch_only_connectors_leave_the_episodes_alone() -> None:
    """Connectors that only touch sampled batches hand ``postprocess_episodes`` its columns back
    as they came (and still run on every sample); an episode connector adds its column."""
    kept: list[bool] = []

    class Spy(OfflinePreLearner):
        def postprocess_episodes(self, columns):
            out = super().postprocess_episodes(columns)
            kept.append(out is columns)
            return out

    batch_only = ["normalize_obs", {"name": "cast", "mapping": {"rewards": "float64"}}]
    out = run_all(Spy(train_batch_size=64, connectors=batch_only), ROWS[:1])[0]
    assert kept == [True] and out["rewards"].dtype == np.float64
    assert abs(float(out["obs"].mean())) < 1.0  # normalised
    kept.clear()
    out = run_all(Spy(train_batch_size=64, connectors=["returns_to_go"]), ROWS[:1])[0]
    assert kept == [False] and "returns_to_go" in out


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("updates", [{}, {"n_step": 3}], ids=["uniform", "nstep3"])
def test_the_custom_example_column_matches_a_per_episode_reference(updates: dict) -> None:
    """examples/custom_prelearner.py adds its column on the columns as a whole; a plain
    reference built one episode at a time (``map_episodes``) gives the same rows, column for
    column, across batch edges that cut episodes into fragments."""
    shaped = _example("custom_prelearner")
    angle = shaped.ANGLE_LIMIT

    class Reference(OfflinePreLearner):
        def postprocess_episodes(self, columns):
            def add(ep):
                ep = copy.copy(ep)
                after = ep.observations[1:, 2]
                value = np.array([1.0 - abs(float(a)) / angle for a in after], np.float32)
                ep.extras = {**ep.extras, "shaped_rewards": value}
                return ep

            return super().postprocess_episodes(columns).map_episodes(add)

    fast = shaped.ShapedReward(train_batch_size=64, seed=0, **updates)
    slow = Reference(train_batch_size=64, seed=0, **updates)
    table = pq.read_table(ROWS[0])
    for start in range(0, table.num_rows, 700):  # batch edges cut episodes: fragments too
        part = table.slice(start, 700)
        got, want = list(fast(part)), list(slow(part))
        assert len(got) == len(want) == 1
        assert "shaped_rewards" in got[0]
        for k in want[0]:
            if k == "shaped_rewards":  # float32 on columns, float64 in the reference
                np.testing.assert_allclose(got[0][k], want[0][k], rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(got[0][k], want[0][k], err_msg=k)
    assert fast.stats() == slow.stats()


def test_prioritized_buffer_takes_priority_updates() -> None:
    p = OfflinePreLearner(**{"buffer.kind": "prioritized", "train_batch_size": 64, "seed": 1})
    out = run_all(p, ROWS[:1])[0]
    applied = p.update_priorities(out["indices"], np.full(64, 1000.0))
    assert applied == 64
    later = list(p(pq.read_table(ROWS[0])))  # same episodes again: duplicates, nothing new added
    boosted = set(zip(out["eps_id"], out["t"], strict=True))
    drawn = list(zip(later[0]["eps_id"], later[0]["t"], strict=True))
    # 64 of ~1000 steps at 1000**0.6 = 63 hold ~80% of the mass (at 100, half: a coin flip)
    assert sum(d in boosted for d in drawn) > 32
    uniform = OfflinePreLearner()
    run_all(uniform, ROWS[:1])
    with pytest.raises(ConfigError, match="prioritized"):
        uniform.update_priorities(out["indices"], np.ones(64))


def test_bad_rows_raise_or_are_counted(tmp_path: Path) -> None:
    t = pq.read_table(ROWS[0])
    rewards = t.column("rewards").to_numpy().copy()
    rewards[5] = np.nan
    bad = t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards))
    with pytest.raises(EpisodeValidationError, match="reward"):
        list(OfflinePreLearner()(bad))
    p = OfflinePreLearner(on_invalid="skip")
    list(p(bad))
    led = p.stats()["ledger"]
    assert led["rows_rejected"] == {"nan_reward": led["rows_in"] - led["rows_kept"]}
    assert led["balanced"] and led["rows_rejected"]["nan_reward"] > 0


def test_config_from_dict_file_and_updates(tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates({"n_step": [1, 3], "train_batch_size": 8})
    path = tmp_path / "c.yaml"
    cfg.save(path)
    p = OfflinePreLearner(str(path))
    assert p.config == cfg
    out = run_all(p, ROWS[:1])[0]
    assert set(np.unique(out["n_step"])) <= {1, 2, 3}
    assert OfflinePreLearner(cfg.to_dict()).config == cfg
    pickle.loads(pickle.dumps(p.config))  # Ray ships the config to actors


def test_same_seed_same_samples() -> None:
    a = run_all(OfflinePreLearner(seed=5), ROWS[:2])
    b = run_all(OfflinePreLearner(seed=5), ROWS[:2])
    for x, y in zip(a, b, strict=True):
        assert all(np.array_equal(x[k], y[k]) for k in x)


def test_a_record_batch_is_taken_like_a_table() -> None:
    """pyarrow's own batch type (what ``ParquetFile.iter_batches`` yields) goes in as it is."""
    rows = REPO / "datasets/cartpole-v1/rows"
    rb = next(pq.ParquetFile(sorted(rows.glob("*.parquet"))[0]).iter_batches(batch_size=500))
    a = list(OfflinePreLearner(sample_all=True)(rb))
    b = list(OfflinePreLearner(sample_all=True)(pa.Table.from_batches([rb])))
    assert len(a) == len(b) == 1 and len(a[0]["obs"]) > 0
    assert all((a[0][k] == b[0][k]).all() for k in ("obs", "actions", "rewards"))
