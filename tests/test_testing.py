"""offline_prelearner.testing: the contracts pass on our built-ins and fail on broken versions.

Each contract is applied as a user would (a ``Test*`` class mixing it in) to our own prelearner,
samplers and connectors; then every check is shown to fail, with a message naming the breach, on
an implementation broken in exactly that way.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from offline_prelearner import testing as T
from offline_prelearner.connectors.base import DEFAULT_CONTEXT, Connector, ConnectorContext
from offline_prelearner.connectors.registry import build_connector
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.prelearner import OfflinePreLearner
from offline_prelearner.replay.batch import MultiAgentBatch, SampleBatch
from offline_prelearner.replay.samplers import Prioritized, Uniform
from offline_prelearner.replay.units import NStep, Sequence


# =============================================================================================
# the contracts on our own implementations
# =============================================================================================
class TestDefaultPreLearner(T.PreLearnerContract):
    def make_prelearner(self) -> OfflinePreLearner:
        return OfflinePreLearner(train_batch_size=16, seed=0)


class TestNStepPrioritizedPreLearner(T.PreLearnerContract):
    def make_prelearner(self) -> OfflinePreLearner:
        return OfflinePreLearner(
            n_step=[1, 3], train_batch_size=16, seed=3, **{"buffer.kind": "prioritized"}
        )


class TestSampleAllWithConnectors(T.PreLearnerContract):
    def make_prelearner(self) -> OfflinePreLearner:
        return OfflinePreLearner(
            sample_all=True, connectors=["returns_to_go", "normalize_obs"], seed=0
        )


class TestMultiModulePreLearner(T.PreLearnerContract):
    def make_prelearner(self) -> OfflinePreLearner:
        return OfflinePreLearner(
            train_batch_size=8,
            seed=1,
            **{"agent_to_module": {"a0": "m0", "a1": "m1"}, "modules_to_train": ["m1"]},
        )

    def make_batch(self) -> Any:
        eps = T.example_episodes(6)
        for i, ep in enumerate(eps):
            ep.agent_id = f"a{i % 2}"
        return T.example_rows(eps)


class TestUniformSampler(T.SamplerContract):
    def make_sampler(self) -> Uniform:
        return Uniform()


class TestPrioritizedSampler(T.SamplerContract):
    def make_sampler(self) -> Prioritized:
        return Prioritized(alpha=0.7, beta=0.5)

    def make_unit(self) -> NStep:
        return NStep(3, 0.9)


class TestUniformSequences(T.SamplerContract):
    def make_sampler(self) -> Uniform:
        return Uniform()

    def make_unit(self) -> Sequence:
        return Sequence(4, burn_in=1)


@pytest.mark.parametrize(
    "spec",
    [
        "returns_to_go",
        {"name": "returns_to_go", "gamma": 0.5, "incomplete": "mark"},
        "normalize_obs",
        "flatten_obs",
        {"name": "one_hot_actions", "n": 2},
        {"name": "one_hot_actions", "n": 2, "replace": True},
        {"name": "cast", "mapping": {"obs": "float16", "rewards": "float64"}},
    ],
    ids=str,
)
class TestBuiltinConnectors(T.ConnectorContract):
    @pytest.fixture(autouse=True)
    def _spec(self, spec: Any) -> None:
        self.spec = spec

    def make_connector(self) -> Connector:
        return build_connector(self.spec)


class TestGAE(T.ConnectorContract):
    def make_connector(self) -> Connector:
        return build_connector({"name": "gae", "gamma": 0.9, "lambda_": 0.8})

    def make_episodes(self) -> list[Episode]:
        eps = T.example_episodes()
        for ep in eps:
            ep.extras["vf_preds"] = np.linspace(0.0, 1.0, len(ep), dtype=np.float32)
        return eps


def test_importing_testing_does_not_import_pytest() -> None:
    code = "import sys, offline_prelearner.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_check_functions_report_what_ran() -> None:
    rows = T.example_rows()
    ran = T.check_prelearner(lambda: OfflinePreLearner(train_batch_size=4), rows)
    assert "check_prelearner_priorities" not in ran and len(ran) == 5
    prio = {"buffer.kind": "prioritized"}
    ran = T.check_prelearner(lambda: OfflinePreLearner(train_batch_size=4, **prio), rows)
    assert ran[-1] == "check_prelearner_priorities"
    assert T.check_sampler(Uniform) == ["check_sampler_valid_slots", "check_sampler_state"]
    assert len(T.check_connector(lambda: build_connector("normalize_obs"))) == 3


def test_example_data_is_real() -> None:
    eps = T.example_episodes(5, fragment=True)
    assert len(eps[0]) == 1 and eps[1].truncated and not eps[-1].is_done
    rows = T.example_rows(eps)
    assert rows.num_rows == sum(len(e) for e in eps)
    batch = T.example_sample_batch(10, episodes=eps[:-1])
    assert len(batch) == 10 and {"obs", "new_obs", "weights"} <= set(batch.keys())


# =============================================================================================
# broken prelearners: each contract fails
# =============================================================================================
ROWS = T.example_rows()


class NoModuleId(OfflinePreLearner):
    def to_output(self, batch: MultiAgentBatch) -> Any:
        for out in super().to_output(batch):
            del out["module_id"]
            yield out


class HalfBatch(OfflinePreLearner):
    def sample(self) -> MultiAgentBatch:
        b = super().sample()
        return MultiAgentBatch({m: sb[: len(sb) // 2] for m, sb in b.policy_batches.items()}, 0)


class LosesAnEpisode(OfflinePreLearner):
    def validate(self, episodes: EpisodeBatch) -> EpisodeBatch:
        eb = super().validate(episodes)
        eb.columns, eb.source_rows = eb.columns.select(np.arange(1, len(eb))), eb.source_rows[1:]
        eb.sync()
        return eb


class GlobalRandomness(OfflinePreLearner):
    def postprocess_episodes(self, columns: EpisodeColumns) -> EpisodeColumns:
        noise = np.random.random(len(columns.actions)).astype(np.float32)  # noqa: NPY002
        return dataclasses.replace(columns, extras={**columns.extras, "noise": noise})


class NeedsMoreThanConfig(OfflinePreLearner):
    def __init__(self, config: Any = None, *, scale: float, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.scale = scale


class SplitsWhenTold(OfflinePreLearner):
    """Splits each output in two when built with ``split=True``, which its config does not hold."""

    def __init__(self, config: Any = None, *, split: bool = False, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.split = split

    def to_output(self, batch: MultiAgentBatch) -> Any:
        for out in super().to_output(batch):
            if not self.split:
                yield out
                continue
            half = len(out["module_id"]) // 2
            yield {k: v[:half] for k, v in out.items()}
            yield {k: v[half:] for k, v in out.items()}


class DropsAModule(OfflinePreLearner):
    def sample(self) -> MultiAgentBatch:
        b = super().sample()
        return MultiAgentBatch({m: sb for m, sb in b.policy_batches.items() if m != "m1"}, 0)


TWO_AGENTS = T.example_episodes(6)
for _i, _ep in enumerate(TWO_AGENTS):
    _ep.agent_id = f"a{_i % 2}"
TWO_AGENT_ROWS = T.example_rows(TWO_AGENTS)


def test_pickles_check_fails_on_a_different_number_of_outputs() -> None:
    with pytest.raises(
        T.ContractError, match="rebuilt prelearner gives 1 outputs, the factory's 2"
    ):
        T.check_prelearner_pickles(lambda: SplitsWhenTold(split=True, seed=0), ROWS)
    T.check_prelearner_pickles(lambda: SplitsWhenTold(seed=0), ROWS)  # the same when not told


def test_batch_size_check_fails_on_a_trained_module_with_no_rows() -> None:
    def make(cls: Any) -> Any:
        return lambda: cls(
            train_batch_size=8,
            seed=1,
            **{"agent_to_module": {"a0": "m0", "a1": "m1"}, "modules_to_train": ["m0", "m1"]},
        )

    T.check_prelearner_batch_size(make(OfflinePreLearner), TWO_AGENT_ROWS)
    with pytest.raises(T.ContractError, match=re.escape("train_batch_size=8, found {'m1': 0}")):
        T.check_prelearner_batch_size(make(DropsAModule), TWO_AGENT_ROWS)


def test_ledger_check_refuses_a_batch_with_no_columns() -> None:
    with pytest.raises(T.ContractError, match="a dict with no columns"):
        T.check_prelearner_ledger(lambda: OfflinePreLearner(seed=0), {})


class IgnoresPriorities(OfflinePreLearner):
    def update_priorities(self, indices: Any, priorities: Any, module_id: Any = None) -> int:
        return 0


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    [
        (lambda: NoModuleId(seed=0), T.check_prelearner_output, "lacks columns \\['module_id'"),
        (lambda: HalfBatch(train_batch_size=16), T.check_prelearner_batch_size, "16"),
        (lambda: LosesAnEpisode(), T.check_prelearner_ledger, "does not balance"),
        (lambda: GlobalRandomness(), T.check_prelearner_deterministic, "noise"),
        (lambda: OfflinePreLearner(seed=None), T.check_prelearner_deterministic, "set a seed"),
        (lambda: NeedsMoreThanConfig(scale=2.0), T.check_prelearner_pickles, "config alone"),
        (
            lambda: IgnoresPriorities(**{"buffer.kind": "prioritized"}),
            T.check_prelearner_priorities,
            "applied 0",
        ),
    ],
    ids=[
        "output",
        "batch_size",
        "ledger",
        "determinism",
        "seed",
        "pickle",
        "priorities",
    ],
)
def test_prelearner_contract_fails_on_broken(factory: Any, check: Any, message: str) -> None:
    with pytest.raises(T.ContractError, match=message):
        check(factory, ROWS)


def test_prelearner_contract_fails_for_a_local_class() -> None:
    class Local(OfflinePreLearner):  # Ray workers cannot import this by name
        pass

    with pytest.raises(T.ContractError, match="does not pickle"):
        T.check_prelearner_pickles(lambda: Local(), ROWS)


def test_the_mixin_form_fails_too() -> None:
    class Broken(T.PreLearnerContract):
        def make_prelearner(self) -> OfflinePreLearner:
            return LosesAnEpisode()

    with pytest.raises(T.ContractError, match="does not balance"):
        Broken().test_ledger_balances()
    with pytest.raises(NotImplementedError, match="make_prelearner"):
        T.PreLearnerContract().test_output_columns()


# =============================================================================================
# broken samplers
# =============================================================================================
class DrawsPadding(Uniform):
    """Returns the padding slot after each drawn episode (its final observation)."""

    def sample(self, storage: Any, batch_size: int, rng: Any, valid: Any) -> Any:
        slots, info = super().sample(storage, batch_size, rng, valid)
        rows = storage.rows_of(slots)
        return storage.starts[rows] + storage.lengths[rows], info


class Int32Slots(Uniform):
    def sample(self, storage: Any, batch_size: int, rng: Any, valid: Any) -> Any:
        slots, info = super().sample(storage, batch_size, rng, valid)
        return slots.astype(np.int32), info


class RemembersEvicted(Uniform):
    """Keeps every slot ever added and never forgets evicted ones."""

    def __init__(self) -> None:
        super().__init__()
        self.known = np.zeros(0, np.int64)

    def on_add(self, storage: Any, slots: Any) -> None:
        self.known = np.union1d(self.known, slots)

    def sample(self, storage: Any, batch_size: int, rng: Any, valid: Any) -> Any:
        return rng.choice(self.known, batch_size), {}


class OwnGenerator(Uniform):
    """Ignores the generator it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.own = np.random.default_rng()

    def sample(self, storage: Any, batch_size: int, rng: Any, valid: Any) -> Any:
        return super().sample(storage, batch_size, self.own, valid)


class ForgetsState(Prioritized):
    def set_state(self, state: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("factory", "check", "message"),
    [
        (DrawsPadding, T.check_sampler_valid_slots, "not valid start slots"),
        (Int32Slots, T.check_sampler_valid_slots, "must be int64"),
        (RemembersEvicted, T.check_sampler_valid_slots, "after eviction.*not valid"),
        (OwnGenerator, T.check_sampler_state, "same generator state gave different"),
        (ForgetsState, T.check_sampler_state, "restored from state"),
    ],
    ids=["padding", "dtype", "eviction", "own_rng", "state"],
)
def test_sampler_contract_fails_on_broken(factory: Any, check: Any, message: str) -> None:
    with pytest.raises(T.ContractError, match=message):
        check(factory)


# =============================================================================================
# broken connectors
# =============================================================================================
class ScalesInPlace(Connector):
    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        batch["rewards"] *= 2
        return batch


class AddsColumnToInput(Connector):
    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        batch["double"] = batch["rewards"] * 2
        return batch


class DropsRows(Connector):
    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        return batch[: len(batch) // 2]


class ZeroesEpisodeRewards(Connector):
    touches = frozenset({"episodes"})

    def on_episodes(
        self, columns: EpisodeColumns, ctx: ConnectorContext = DEFAULT_CONTEXT
    ) -> EpisodeColumns:
        columns.rewards[:] = 0
        return columns


class Counter(Connector):
    """Adds how many batches it saw; keeps the count in its state, but set_state drops it."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        self.seen += 1
        out = SampleBatch(batch.to_dict())
        out["seen"] = np.full(len(batch), self.seen)
        return out

    def get_state(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def set_state(self, state: Any) -> None:
        pass


class GlobalNoise(Connector):
    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        out = SampleBatch(batch.to_dict())
        out["noise"] = np.random.random(len(batch))  # noqa: NPY002
        return out


class HoldsALambda(Connector):
    def __init__(self) -> None:
        self.fn = lambda x: x


@pytest.mark.parametrize(
    ("cls", "check", "message"),
    [
        (ScalesInPlace, T.check_connector_rows_and_inputs, "input batch in place.*rewards"),
        (AddsColumnToInput, T.check_connector_rows_and_inputs, "input batch in place.*double"),
        (DropsRows, T.check_connector_rows_and_inputs, "32 rows in, 16 out"),
        (ZeroesEpisodeRewards, T.check_connector_rows_and_inputs, "input episode.*rewards"),
        (Counter, T.check_connector_state, "restored from get_state"),
        (GlobalNoise, T.check_connector_state, "hidden randomness"),
        (HoldsALambda, T.check_connector_pickles, "does not pickle"),
    ],
    ids=["in_place", "adds_to_input", "rows", "episodes", "state", "randomness", "pickle"],
)
def test_connector_contract_fails_on_broken(cls: Any, check: Any, message: str) -> None:
    batch = T.example_sample_batch(32)
    with pytest.raises(T.ContractError, match=message):
        check(cls, batch)
