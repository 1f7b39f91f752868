"""Batched validation (``Validator.validate``) against a loop of ``Validator.check`` calls.

The reference is the per-episode algorithm: ``check`` on every episode in order, raising at the
first failure under ``"raise"``, else rejecting the failures in order. Random mixes of good and
bad episodes (too short, empty, negative ``t``, not done, NaN/inf rewards or observations, other
obs shapes and dtypes, out-of-space observations and actions, float64 observations for a float32
space) over several batches must give the same kept episodes, rejections (reasons, messages,
rows), ledger, expected observation spec and warnings.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.config import ValidateConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns, layout_of
from offline_prelearner.episodes.ledger import EpisodeBatch, Ledger
from offline_prelearner.episodes.validate import Validator
from offline_prelearner.errors import EpisodeValidationError
from offline_prelearner.io.quarantine import quarantine_rows

KINDS = [
    "good", "good", "good", "good", "short", "empty", "bad_t", "open", "nan_reward",
    "inf_reward", "int_reward", "nan_obs", "shape", "dtype64", "int_obs", "obs_out",
    "act_out", "act_float",
]  # fmt: skip


def episode(kind: str, k: int, n: int) -> Episode:
    rng = np.random.default_rng(k)
    n = 0 if kind == "empty" else 1 if kind == "short" else n
    obs = rng.uniform(-1, 1, size=(n + 1, 4)).astype(np.float32)
    actions: np.ndarray = rng.integers(0, 2, size=n)
    rewards: np.ndarray = np.ones(n)
    if kind == "nan_reward" and n:
        rewards[rng.integers(n)] = np.nan
    if kind == "inf_reward" and n:
        rewards[-1] = -np.inf
    if kind == "int_reward":
        rewards = np.ones(n, np.int64)
    if kind == "nan_obs":
        obs[rng.integers(n + 1), rng.integers(4)] = np.nan
    if kind == "shape":
        obs = rng.uniform(-1, 1, size=(n + 1, 3)).astype(np.float32)
    if kind == "dtype64":
        obs = obs.astype(np.float64)
    if kind == "int_obs":
        obs = np.zeros((n + 1, 4), np.int64)
    if kind == "obs_out":
        obs[rng.integers(n + 1), 0] = 5.0
    if kind == "act_out" and n:
        actions[rng.integers(n)] = 7
    if kind == "act_float":
        actions = actions.astype(np.float32)
    ep = Episode(
        id=f"{kind}-{k}",
        observations=obs,
        actions=actions,
        rewards=rewards,
        terminated=kind != "open",
        t_started=3,
    )
    if kind == "bad_t":  # the constructor refuses it; decoders build episodes unchecked
        ep.t_started = -1
    return ep


def reference(v: Validator, batch: EpisodeBatch) -> EpisodeBatch:
    """The per-episode algorithm, built on ``Validator.check``."""
    policy = v.on_invalid
    keep: list[bool] = []
    failed: list[tuple[int, EpisodeValidationError]] = []
    for i, ep in enumerate(batch.episodes):
        error = v.check(ep)
        if error is not None and policy == "raise":
            raise error
        keep.append(error is None)
        if error is not None:
            failed.append((i, error))
    for i, error in failed:
        refused = batch.episodes[i] if policy == "quarantine" else None
        batch.reject(error, int(batch.source_rows[i]), episode=refused, policy=policy)
    batch.keep_only(keep)
    return batch


def _rows_of(rejection: Any) -> int | None:
    """How many rows the quarantine file would hold for a rejection (None: nothing kept)."""
    rows = quarantine_rows(rejection)
    return None if rows is None else rows.num_rows


def outcome(v: Validator, fn: Any, batch: EpisodeBatch) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(v, batch)
            raised = None
        except EpisodeValidationError as e:
            raised = (e.reason, str(e))
    return {
        "raised": raised,
        "kept": [e.id for e in batch.episodes],
        "rows": list(batch.source_rows),
        "ledger": batch.ledger.to_dict(),
        "rejections": [
            (r.error.reason, str(r.error), r.num_rows, _rows_of(r)) for r in batch.rejections
        ],
        "expected": v.expected_obs,
        "warnings": [(w.category, str(w.message)) for w in caught],
    }


@st.composite
def validate_configs(draw: st.DrawFn) -> dict[str, Any]:
    """ValidateConfig keyword arguments: every policy, check and space combination."""
    cfg: dict[str, Any] = {
        "on_invalid": draw(st.sampled_from(["skip", "quarantine", "raise"])),
        "require_done": draw(st.booleans()),
        "check_finite_rewards": draw(st.booleans()),
        "check_finite_obs": draw(st.booleans()),
        "min_length": draw(st.integers(0, 3)),
    }
    if draw(st.booleans()):
        cfg["observation_space"] = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    if draw(st.booleans()):
        cfg["action_space"] = gym.spaces.Discrete(2)
    return cfg


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, Any], list[list[Episode]]]:
    cfg = draw(validate_configs())
    return cfg, draw_batches(draw, KINDS, episode, max_len=8, max_size=25)


def draw_batches(
    draw: st.DrawFn,
    kinds: list[str],
    make: Callable[[str, int, int], Episode],
    max_len: int,
    max_size: int,
) -> list[list[Episode]]:
    """One to three batches of episodes ``make(kind, k, length)``, numbered across batches."""
    spec = st.lists(st.tuples(st.sampled_from(kinds), st.integers(1, max_len)), max_size=max_size)
    batches = draw(st.lists(spec, min_size=1, max_size=3))
    k = 0
    out = []
    for b in batches:
        out.append([make(kind, k := k + 1, n) for kind, n in b])
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_batched_validation_equals_checking_each_episode(
    case: tuple[dict[str, Any], list[list[Episode]]],
) -> None:
    batched_equals_each_episode(*case)


def batched_equals_each_episode(cfg: dict[str, Any], batches: list[list[Episode]]) -> None:
    """The batched validation and the per-episode reference, fed the same batches in turn,
    keep, reject, warn and raise alike (until the first raise)."""
    fast, slow = validator(cfg), validator(cfg)
    for eps in (run for b in batches for run in layout_runs(b)):
        rows = [len(e) + 1 for e in eps]
        a, b = (
            EpisodeBatch(EpisodeColumns.from_episodes(eps), rows, Ledger(rows_in=sum(rows)))
            for _ in "ab"
        )
        got = outcome(fast, Validator.validate, a)
        want = outcome(slow, reference, b)
        assert got == want
        if got["raised"]:
            break


def validator(cfg: dict[str, Any]) -> Validator:
    """A validator of the checks in ``cfg`` and its ``on_invalid`` policy (given beside them)."""
    checks = dict(cfg)
    policy = checks.pop("on_invalid", "raise")
    return Validator(ValidateConfig(**checks), policy)


def layout_runs(eps: list[Episode]) -> list[list[Episode]]:
    """``eps`` cut where the layout changes: a batch holds one layout (a reader refuses another
    within a batch), so a mix of layouts reaches validation as consecutive batches."""
    runs: list[list[Episode]] = []
    for ep in eps:
        if runs and layout_of(runs[-1][-1]) == layout_of(ep):
            runs[-1].append(ep)
        else:
            runs.append([ep])
    return runs


def test_a_clean_batch_never_calls_check() -> None:
    """The vectorized checks clear good episodes without the per-episode path."""
    calls = []

    class Counting(Validator):
        def check(self, ep: Episode) -> EpisodeValidationError | None:
            calls.append(ep.id)
            return super().check(ep)

    v = Counting(
        ValidateConfig(
            check_finite_obs=True,
            observation_space=gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
            action_space=gym.spaces.Discrete(2),
        ),
        "skip",
    )
    eps = [episode("good", k, 5) for k in range(20)] + [episode("nan_reward", 99, 5)]
    batch = v.validate(
        EpisodeBatch(EpisodeColumns.from_episodes(eps), [6] * 21, Ledger(rows_in=126))
    )
    assert calls == ["good-0", "nan_reward-99"]
    assert len(batch.episodes) == 20 and batch.ledger.balanced()
