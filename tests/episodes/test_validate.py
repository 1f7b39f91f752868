"""Validator and Deduplicator: every check both ways, policies, ledger balance, dedup reference."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.dedupe import Deduplicator
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns, layout_of
from offline_prelearner.episodes.ledger import EpisodeBatch, Ledger
from offline_prelearner.episodes.validate import (
    OddDataWarning,
    ValidateConfig,
    Validator,
)
from offline_prelearner.errors import ConfigError, EpisodeValidationError
from offline_prelearner.io.formats.rows.writer import episodes_to_rows
from offline_prelearner.io.quarantine import quarantine_rows, write_quarantine


def make_episode(
    eid: Any = "e0",
    n: int = 4,
    *,
    obs: np.ndarray | None = None,
    actions: np.ndarray | None = None,
    rewards: np.ndarray | None = None,
    terminated: bool = True,
    truncated: bool = False,
    t_started: int = 0,
    agent_id: Any = None,
) -> Episode:
    """An episode in CartPole's layout: obs float32 [n+1, 4] in [-1, 1), actions in {0, 1}."""
    rng = np.random.default_rng(n + 31 * t_started)
    return Episode(
        id=eid,
        observations=obs
        if obs is not None
        else rng.uniform(-1, 1, size=(n + 1, 4)).astype(np.float32),
        actions=actions if actions is not None else rng.integers(0, 2, size=n),
        rewards=rewards if rewards is not None else np.ones(n),
        terminated=terminated,
        truncated=truncated,
        t_started=t_started,
        agent_id=agent_id,
    )


def numbered(ep: Episode, i: int) -> Episode:
    """``ep`` with its place in a stream as its module id (what a test follows it by)."""
    return Episode(**{**{k: getattr(ep, k) for k in Episode.__slots__}, "module_id": i})


def make_batch(episodes: list[Episode], source_rows: list[int] | None = None) -> EpisodeBatch:
    rows = source_rows if source_rows is not None else [len(e) for e in episodes]
    return EpisodeBatch(EpisodeColumns.from_episodes(episodes), rows, Ledger(rows_in=sum(rows)))


def run(episodes: list[Episode], policy: str = "skip", **cfg: Any) -> EpisodeBatch:
    return Validator(ValidateConfig(**cfg), policy).validate(make_batch(episodes))


def reasons(batch: EpisodeBatch) -> dict[str, int]:
    return dict(batch.ledger.episodes_rejected)


def the_error(episode: Episode, **cfg: Any) -> EpisodeValidationError:
    with pytest.raises(EpisodeValidationError) as info:
        Validator(ValidateConfig(**cfg)).validate(make_batch([episode]))
    return info.value


BOX4 = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("require_done", 1),
        ("check_finite_rewards", "yes"),
        ("check_finite_obs", None),
        ("observation_space", (4,)),
        ("action_space", 2),
        ("min_length", -1),
        ("min_length", 1.5),
        ("min_length", True),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        ValidateConfig(**{field: value})


def test_the_policy_is_checked_where_the_validator_is_given_it() -> None:
    with pytest.raises(ConfigError, match="on_invalid"):
        Validator(ValidateConfig(), "ignore")  # type: ignore[arg-type]


def test_config_defaults() -> None:
    cfg = ValidateConfig()
    assert (cfg.require_done, cfg.check_finite_rewards) == (True, True)
    assert (cfg.check_finite_obs, cfg.check_finite_actions) == (True, True)  # issue 36
    assert (cfg.min_length, Validator(cfg).on_invalid) == (1, "raise")


# ----------------------------------------------------------------------------- each check
def test_good_episodes_pass_every_check() -> None:
    eps = [make_episode("a"), make_episode("b", truncated=True, terminated=False)]
    out = run(
        eps,
        "raise",
        observation_space=BOX4,
        action_space=gym.spaces.Discrete(2),
        check_finite_obs=True,
    )
    assert [e.id for e in out.episodes] == ["a", "b"]
    assert out.ledger.rows_kept == 8 and out.ledger.balanced()


def test_not_done_is_rejected_unless_fragments_are_allowed() -> None:
    ep = make_episode("frag", 3, terminated=False, t_started=5)
    err = the_error(ep)
    assert err.reason == "not_done"
    assert "episode 'frag'" in str(err) and "t=8" in str(err)
    assert len(run([ep], require_done=False).episodes) == 1


def test_negative_t_started_is_rejected() -> None:
    ep = make_episode("neg")
    ep.t_started = -2  # Episode refuses this at construction; a mutated one must still be caught
    err = the_error(ep)
    assert err.reason == "bad_t" and err.where.column == "t" and err.where.episode_id == "neg"


def test_too_short_and_min_length() -> None:
    err = the_error(make_episode("s", 2), min_length=3)
    assert err.reason == "too_short" and "2 steps" in str(err) and "min_length=3" in str(err)
    assert len(run([make_episode("s", 3)], min_length=3).episodes) == 1
    assert reasons(run([make_episode("z", 0)])) == {"too_short": 1}


def test_zero_length_episode_with_min_length_zero_warns_once() -> None:
    v = Validator(ValidateConfig(min_length=0))
    with pytest.warns(OddDataWarning, match="no steps"):
        out = v.validate(make_batch([make_episode("z", 0)], [1]))
    assert len(out.episodes) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v.validate(make_batch([make_episode("z2", 0)], [1]))  # the second one is silent


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_reward_names_episode_and_first_timestep(bad: float) -> None:
    rewards = np.ones(5)
    rewards[[2, 4]] = bad
    err = the_error(make_episode("r", 5, rewards=rewards, t_started=10))
    assert err.reason == "nan_reward"
    assert (err.where.episode_id, err.where.column, err.where.timestep) == ("r", "rewards", 12)
    assert "t=12" in str(err)


def test_non_finite_reward_passes_when_check_is_off_and_int_rewards_pass() -> None:
    rewards = np.array([1.0, np.nan])
    assert len(run([make_episode("r", 2, rewards=rewards)], check_finite_rewards=False).episodes)
    assert len(run([make_episode("i", 2, rewards=np.array([1, 2]))], "raise").episodes) == 1


def test_obs_shape_must_agree_with_the_first_episode_accepted() -> None:
    """A batch holds one layout (a reader refuses another within a batch); the next batch's
    observations must have the shape of the first episode accepted."""
    odd = make_episode("b", obs=np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="different layouts"):
        make_batch([make_episode("a"), odd])
    v = Validator(ValidateConfig())
    v.validate(make_batch([make_episode("a")]))
    with pytest.raises(EpisodeValidationError) as info:
        v.validate(make_batch([odd]))
    err = info.value
    assert err.reason == "obs_shape" and err.where.episode_id == "b" and err.where.column == "obs"
    assert "(3,)" in str(err) and "expected (4,)" in str(err) and "episode 'a'" in str(err)


def test_obs_shape_and_dtype_must_agree_with_the_first_batch_seen() -> None:
    v = Validator(ValidateConfig(), "skip")
    v.validate(make_batch([make_episode("a")]))
    assert v.expected_obs == ((4,), np.dtype(np.float32))
    later = [
        make_episode("ok"),
        make_episode("shape", obs=np.zeros((5, 4, 1), np.float32)),
        make_episode("dtype", obs=np.zeros((5, 4), np.float64)),
    ]
    outs = [v.validate(make_batch([ep])) for ep in later]  # one layout a batch
    assert [e.id for out in outs for e in out.episodes] == ["ok"]
    assert [reasons(out) for out in outs] == [{}, {"obs_shape": 1}, {"obs_dtype": 1}]
    msgs = {r.reason: str(r.error) for out in outs for r in out.rejections}
    assert "float64" in msgs["obs_dtype"] and "expected float32" in msgs["obs_dtype"]
    assert "episode 'dtype'" in msgs["obs_dtype"]


def test_rejected_episode_does_not_set_the_expected_obs() -> None:
    bad = make_episode("bad", obs=np.zeros((5, 3), np.float32), terminated=False)
    v = Validator(ValidateConfig(), "skip")
    first = v.validate(make_batch([bad]))
    out = v.validate(make_batch([make_episode("good")]))
    assert reasons(first) == {"not_done": 1} and v.expected_obs == ((4,), np.dtype(np.float32))
    assert [e.id for e in out.episodes] == ["good"] and reasons(out) == {}


def test_non_finite_obs_rejected_only_when_asked() -> None:
    obs = np.zeros((5, 4), np.float32)
    obs[3, 1] = np.nan
    ep = make_episode("n", obs=obs, t_started=100)
    err = the_error(ep, check_finite_obs=True)
    assert err.reason == "nan_obs" and err.where.timestep == 103 and err.where.column == "obs"
    assert the_error(ep).reason == "nan_obs"  # on by default since issue 36
    # Off, NaN is legal, also inside a bounded Box.
    assert len(run([ep], "raise", observation_space=BOX4, check_finite_obs=False).episodes) == 1


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("where", [0, 3, 5])  # first, middle, the final observation
def test_the_vector_finite_check_finds_each_bad_observation(split: bool, where: int) -> None:
    """Issue 36: observations are checked where they lie (no gather), in both layouts (one
    ``[n+1]`` run per episode, or ``[n]`` steps plus a separate final observation); the
    episode holding the NaN is the one rejected, its neighbours kept."""
    obs = np.zeros((6, 4), np.float32)  # make_episode's dtype and shape
    obs[where, 2] = np.inf if where == 5 else np.nan
    eps = [make_episode("a", 5), make_episode("b", 5, obs=obs), make_episode("c", 5)]
    cols = EpisodeColumns.from_episodes(eps, split=split)
    validator = Validator(ValidateConfig(), "skip")
    validator.validate(make_batch([make_episode("first")]))  # fixes the obs spec: vector path
    out = validator.validate(EpisodeBatch(cols, [5, 5, 5], Ledger()))
    assert [out.columns.episode(i).id for i in range(len(out.columns))] == ["a", "c"]
    assert reasons(out) == {"nan_obs": 1}


def test_a_nan_float_action_is_rejected_by_default() -> None:
    actions = np.zeros((4, 2), np.float32)
    actions[2, 1] = np.nan
    err = the_error(make_episode("f", actions=actions, t_started=10))
    assert err.reason == "nan_action" and err.where.timestep == 12
    assert err.where.column == "actions"
    ok = run([make_episode("f", actions=actions)], "raise", check_finite_actions=False)
    assert len(ok.episodes) == 1


def test_obs_outside_box_names_timestep_index_and_bounds() -> None:
    obs = np.zeros((5, 4), np.float32)
    obs[2, 3] = 1.5
    err = the_error(make_episode("o", obs=obs, t_started=1), observation_space=BOX4)
    assert err.reason == "out_of_space" and err.where.timestep == 3
    assert "index (3,)" in str(err) and "1.5" in str(err) and "[-1.0, 1.0]" in str(err)


def test_obs_shape_differing_from_the_space() -> None:
    err = the_error(make_episode("o"), observation_space=gym.spaces.Box(-1, 1, (3,), np.float32))
    assert err.reason == "obs_shape" and "(4,)" in str(err) and "(3,)" in str(err)


def test_float_obs_for_an_integer_box_is_an_obs_dtype_error() -> None:
    space = gym.spaces.Box(0, 255, (4,), np.uint8)
    assert the_error(make_episode("f"), observation_space=space).reason == "obs_dtype"


def test_float64_obs_for_a_float32_space_warns_once_and_passes() -> None:
    v = Validator(ValidateConfig(observation_space=BOX4))
    ep = make_episode("d", obs=np.zeros((5, 4), np.float64))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v.validate(make_batch([ep, make_episode("d2", obs=np.zeros((3, 4), np.float64), n=2)]))
        v.validate(make_batch([make_episode("d3", obs=np.ones((3, 4), np.float64), n=2)]))
    odd = [w for w in caught if issubclass(w.category, OddDataWarning)]
    assert len(odd) == 1 and "float64" in str(odd[0].message) and "float32" in str(odd[0].message)


@pytest.mark.parametrize(
    ("space", "good", "bad", "bad_step"),
    [
        (gym.spaces.Discrete(2), [0, 1, 1], [0, 1, 2], 2),
        (gym.spaces.Discrete(3, start=-1), [-1, 0, 1], [-1, -2, 0], 1),
        (gym.spaces.MultiDiscrete([2, 3]), [[1, 2], [0, 0], [1, 1]], [[1, 2], [2, 0], [0, 0]], 1),
        (gym.spaces.MultiBinary(2), [[0, 1], [1, 1], [0, 0]], [[0, 1], [1, 1], [0, 2]], 2),
        (
            gym.spaces.Box(-2, 2, (2,), np.float32),
            [[0, 1], [2, -2], [1, 1]],
            [[3, 0], [0, 0], [0, 0]],
            0,
        ),
    ],
)
def test_actions_in_space(
    space: gym.Space[Any], good: list[Any], bad: list[Any], bad_step: int
) -> None:
    dtype = np.float32 if isinstance(space, gym.spaces.Box) else np.int64
    ok = make_episode("ok", 3, actions=np.array(good, dtype))
    assert len(run([ok], "raise", action_space=space).episodes) == 1
    err = the_error(
        make_episode("bad", 3, actions=np.array(bad, dtype), t_started=4), action_space=space
    )
    assert err.reason == "out_of_space"
    assert (err.where.column, err.where.episode_id, err.where.timestep) == (
        "actions",
        "bad",
        4 + bad_step,
    )


@st.composite
def spaces_and_values(draw: st.DrawFn) -> tuple[gym.Space[Any], np.ndarray]:
    kind = draw(st.sampled_from(["discrete", "multi_discrete", "multi_binary", "box"]))
    n = draw(st.integers(1, 6))
    if kind == "discrete":
        start, size = draw(st.integers(-3, 3)), draw(st.integers(1, 4))
        values = st.integers(start - 2, start + size + 1)
        return gym.spaces.Discrete(size, start=start), np.array(
            draw(st.lists(values, min_size=n, max_size=n)), np.int64
        )
    if kind == "multi_discrete":
        nvec = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        dtype = draw(st.sampled_from([np.int8, np.int64]))
        flat = draw(st.lists(st.integers(-1, 5), min_size=n * len(nvec), max_size=n * len(nvec)))
        space = gym.spaces.MultiDiscrete(nvec, dtype=dtype)
        return space, np.array(flat, dtype).reshape(n, len(nvec))
    if kind == "multi_binary":
        m = draw(st.integers(1, 3))
        flat = draw(st.lists(st.integers(0, 2), min_size=n * m, max_size=n * m))
        return gym.spaces.MultiBinary(m), np.array(flat, np.int8).reshape(n, m)
    shape = draw(st.sampled_from([(), (2,), (2, 2)]))
    size = int(np.prod(shape))
    f32 = st.floats(-8, 8, width=32)
    low = np.array(draw(st.lists(f32, min_size=size, max_size=size)), np.float32).reshape(shape)
    width = np.array(
        draw(st.lists(st.floats(0, 8, width=32), min_size=size, max_size=size)), np.float32
    ).reshape(shape)
    space = gym.spaces.Box(low, low + width, shape, np.float32)
    flat = draw(st.lists(f32, min_size=n * size, max_size=n * size))
    return space, np.array(flat, np.float32).reshape(n, *shape)


@settings(max_examples=300, deadline=None)
@given(case=spaces_and_values(), t_started=st.integers(0, 50))
def test_space_checks_match_contains_per_step(
    case: tuple[gym.Space[Any], np.ndarray], t_started: int
) -> None:
    space, actions = case
    first_bad = next(
        (i for i in range(len(actions)) if not space.contains(np.asarray(actions[i]))), None
    )
    ep = make_episode("h", len(actions), actions=actions, t_started=t_started)
    out = run([ep], action_space=space)
    if first_bad is None:
        assert len(out.episodes) == 1
    else:
        (rej,) = out.rejections
        assert rej.reason == "out_of_space"
        assert rej.error.where.timestep == t_started + first_bad


def test_float_actions_for_discrete_are_out_of_space() -> None:
    ep = make_episode("f", 2, actions=np.array([0.0, 1.0]))
    err = the_error(ep, action_space=gym.spaces.Discrete(2))
    assert err.reason == "out_of_space" and "integer" in str(err)


def test_exotic_space_falls_back_to_contains() -> None:
    space = gym.spaces.Text(max_length=3)
    ok = make_episode("t", 2, actions=np.array(["ab", "c"]))
    assert len(run([ok], "raise", action_space=space).episodes) == 1
    err = the_error(make_episode("t", 2, actions=np.array(["ab", "toolong"])), action_space=space)
    assert err.reason == "out_of_space" and err.where.timestep == 1


# ----------------------------------------------------------------------------- policies
BAD_KINDS = ("not_done", "nan_reward", "too_short", "obs_shape", "out_of_space")


def episode_of_kind(kind: str, k: int, n: int) -> Episode:
    eid = f"{kind}-{k}"
    if kind == "not_done":
        return make_episode(eid, n, terminated=False)
    if kind == "nan_reward":
        return make_episode(eid, n, rewards=np.full(n, np.nan))
    if kind == "too_short":
        return make_episode(eid, 0)
    if kind == "obs_shape":
        return make_episode(eid, n, obs=np.zeros((n + 1, 2), np.float32))
    if kind == "out_of_space":
        return make_episode(eid, n, actions=np.full(n, 5))
    return make_episode(eid, n)


def test_skip_counts_by_reason_and_keeps_no_rows() -> None:
    eps = [
        make_episode("g"),
        episode_of_kind("not_done", 0, 3),
        episode_of_kind("nan_reward", 0, 2),
    ]
    out = Validator(ValidateConfig(action_space=gym.spaces.Discrete(2)), "skip").validate(
        make_batch(eps, [4, 3, 2])
    )
    assert out.ledger.rows_rejected == {"not_done": 3, "nan_reward": 2}
    assert out.ledger.rows_kept == 4 and out.ledger.balanced()
    assert all(r.rows is None and r.episode is None for r in out.rejections)


def test_the_policy_is_the_validators_not_the_datas() -> None:
    batch = make_batch([episode_of_kind("not_done", 0, 2)])
    assert not hasattr(batch, "on_invalid")  # the data carries no policy (DESIGN.md)
    out = Validator(ValidateConfig(), "skip").validate(batch)
    assert reasons(out) == {"not_done": 1}


def test_quarantine_keeps_the_episode_rows_with_the_reason(tmp_path: Path) -> None:
    bad = episode_of_kind("out_of_space", 0, 3)
    nan = episode_of_kind("nan_reward", 0, 2)
    out = run([make_episode("g"), bad, nan], "quarantine", action_space=gym.spaces.Discrete(2))
    assert [r.reason for r in out.rejections] == ["out_of_space", "nan_reward"]
    # Validation hands back the refused episode; the quarantine writer makes it rows.
    refused = out.rejections[0].episode
    assert refused is not None and out.rejections[0].rows is None
    assert refused.id == bad.id and np.array_equal(refused.actions, bad.actions)
    rows = quarantine_rows(out.rejections[0])
    assert rows is not None and rows.equals(episodes_to_rows([bad]))
    path = write_quarantine(out.rejections, tmp_path / "q")
    back = pq.read_table(path)
    assert back.column("eps_id").to_pylist() == ["out_of_space-0"] * 3 + ["nan_reward-0"] * 2
    assert back.column("_reject_reason").to_pylist() == ["out_of_space"] * 3 + ["nan_reward"] * 2
    assert "episode 'out_of_space-0'" in back.column("_reject_message")[0].as_py()
    obs = np.stack(back.column("obs").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(obs[:3], bad.observations[:-1])
    np.testing.assert_array_equal(back.column("actions").to_numpy()[:3], bad.actions)
    assert np.isnan(back.column("rewards").to_numpy()[3:]).all()
    assert back.column("t").to_pylist() == [0, 1, 2, 0, 1]


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kinds=st.lists(st.sampled_from(("good", "good", *BAD_KINDS)), max_size=12),
    lengths=st.lists(st.integers(1, 5), min_size=12, max_size=12),
    source_rows=st.lists(st.integers(0, 7), min_size=13, max_size=13),
    dup=st.lists(st.booleans(), min_size=12, max_size=12),
    policy=st.sampled_from(["skip", "quarantine"]),
)
def test_ledger_balances_on_random_mixes(
    kinds: list[str],
    lengths: list[int],
    source_rows: list[int],
    dup: list[bool],
    policy: str,
    tmp_path: Path,
) -> None:
    # A good episode first fixes the expected obs shape, so each kind's reason is known.
    kinds = ["good", *kinds]
    eps = [episode_of_kind(k, i, lengths[i % 12]) for i, k in enumerate(kinds)]
    rows = source_rows[: len(eps)]
    # Some good episodes come twice (same id and t range): duplicates for the dedup stage.
    extra = [
        (e, r)
        for e, r, k, d in zip(eps, rows, kinds, [*dup, False], strict=False)
        if k == "good" and d
    ]
    held = eps + [e for e, _ in extra]
    held_rows = rows + [r for _, r in extra]
    cfg = ValidateConfig(action_space=gym.spaces.Discrete(2))
    v, d, led = Validator(cfg, policy), Deduplicator(), Ledger()
    kept: list[Any] = []
    rejections = []
    # A batch holds one layout: the good episodes' batch first, then each other layout's.
    for lay in dict.fromkeys(layout_of(e) for e in held):
        pick = [i for i, e in enumerate(held) if layout_of(e) == lay]
        out = d.dedupe(
            v.validate(make_batch([held[i] for i in pick], [held_rows[i] for i in pick]))
        )
        led += out.ledger
        kept += [e.id for e in out.episodes]
        rejections += out.rejections

    assert led.balanced()
    assert led.rows_in == led.rows_kept + sum(led.rows_rejected.values()) + led.rows_duplicate
    expect_rows: dict[str, int] = {}
    for k, r in zip(kinds, rows, strict=True):
        if k != "good":
            expect_rows[k] = expect_rows.get(k, 0) + r
    assert dict(led.rows_rejected) == {k: v for k, v in expect_rows.items()}
    assert led.episodes_duplicate == len(extra)
    assert led.rows_duplicate == sum(r for _, r in extra)
    assert kept == [e.id for e, k in zip(eps, kinds, strict=True) if k == "good"]
    if policy == "quarantine":
        path = write_quarantine(rejections, tmp_path / "q")
        n_rows = sum(len(e) for e, k in zip(eps, kinds, strict=True) if k != "good")
        assert (0 if path is None else pq.read_metadata(path).num_rows) == n_rows


# ----------------------------------------------------------------------------- dedup
def test_exact_duplicates_within_and_across_batches() -> None:
    d = Deduplicator()
    first = d.dedupe(
        make_batch([make_episode("a"), make_episode("b"), make_episode("a")], [4, 4, 9])
    )
    assert [e.id for e in first.episodes] == ["a", "b"]
    assert (first.ledger.rows_duplicate, first.ledger.episodes_duplicate) == (9, 1)
    assert first.ledger.balanced()
    second = d.dedupe(make_batch([make_episode("b"), make_episode("c")]))
    assert [e.id for e in second.episodes] == ["c"] and second.ledger.episodes_duplicate == 1


def test_fragments_later_are_kept_overlapping_are_dropped() -> None:
    d = Deduplicator()
    parts = [
        make_episode("x", 4, terminated=False),
        make_episode("x", 3, t_started=4),
        make_episode("x", 2, t_started=5),
        make_episode("x", 1, t_started=7),
    ]
    out = d.dedupe(make_batch(parts))
    assert [e.t_started for e in out.episodes] == [0, 4, 7]
    assert out.ledger.rows_duplicate == 2


def test_same_id_other_agent_is_not_a_duplicate() -> None:
    out = Deduplicator().dedupe(
        make_batch([make_episode("a", agent_id="p0"), make_episode("a", agent_id="p1")])
    )
    assert len(out.episodes) == 2


def test_max_ids_forgets_oldest_first() -> None:
    d = Deduplicator(max_ids=2)
    d.dedupe(make_batch([make_episode(k) for k in "abc"]))  # 'a' is forgotten
    assert len(d) == 2
    assert [e.id for e in d.dedupe(make_batch([make_episode("a")])).episodes] == ["a"]
    # 'a' came back and pushed out 'b'; 'c' is still remembered.
    assert [
        e.id for e in d.dedupe(make_batch([make_episode("c"), make_episode("b")])).episodes
    ] == ["b"]


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_max_ids_must_be_positive_int(bad: Any) -> None:
    with pytest.raises(ConfigError, match="max_ids"):
        Deduplicator(max_ids=bad)


def reference_dedup(stream: list[tuple[str, str, int, int]], max_ids: int | None) -> list[bool]:
    """Plain loop over (id, agent, t_started, length): kept or not, with FIFO forgetting."""
    kept_history: list[tuple[tuple[str, str], int]] = []  # (key, t_end) of kept episodes
    remembered: list[tuple[str, str]] = []  # keys in order of first sight since last forgotten
    out = []
    for eid, agent, start, length in stream:
        key = (eid, agent)
        ends = [end for k, end in kept_history if k == key] if key in remembered else []
        dup = bool(ends) and start < max(ends)
        out.append(not dup)
        if dup:
            continue
        if key not in remembered:
            kept_history = [(k, e) for k, e in kept_history if k != key]
            remembered.append(key)
            if max_ids is not None and len(remembered) > max_ids:
                remembered.pop(0)
        kept_history.append((key, start + length))
    return out


streams = st.lists(
    st.tuples(
        st.sampled_from("abcd"), st.sampled_from(["p", "q"]), st.integers(0, 12), st.integers(0, 5)
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(
    stream=streams,
    cuts=st.lists(st.integers(0, 40), max_size=4),
    max_ids=st.one_of(st.none(), st.integers(1, 6)),
)
def test_dedup_matches_plain_loop_reference(
    stream: list[tuple[str, str, int, int]], cuts: list[int], max_ids: int | None
) -> None:
    eps = [numbered(make_episode(e, n, agent_id=a, t_started=s), i)
           for i, (e, a, s, n) in enumerate(stream)]  # fmt: skip
    d = Deduplicator(max_ids=max_ids)
    kept: list[int] = []
    bounds = [0, *sorted(c for c in cuts if c < len(eps)), len(eps)]
    for lo, hi in itertools.pairwise(bounds):  # the stream split into batches
        out = d.dedupe(make_batch(eps[lo:hi]))
        assert out.ledger.balanced()
        kept.extend(out.columns.modules)  # each episode's place in the stream
    expected = [i for i, k in enumerate(reference_dedup(stream, max_ids)) if k]
    assert kept == expected


@settings(max_examples=100, deadline=None)
@given(stream=streams)
def test_dedup_is_idempotent(stream: list[tuple[str, str, int, int]]) -> None:
    eps = [numbered(make_episode(e, n, agent_id=a, t_started=s), i)
           for i, (e, a, s, n) in enumerate(stream)]  # fmt: skip
    once = Deduplicator().dedupe(make_batch(eps))
    twice = Deduplicator().dedupe(make_batch(once.episodes))
    assert twice.columns.modules == once.columns.modules
    assert twice.ledger.episodes_duplicate == 0
