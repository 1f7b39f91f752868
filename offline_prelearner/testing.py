"""Contract tests for your own prelearner, sampler or connector (dm_env's test-mixin idea).

Two forms of the same checks:

* **pytest mixins.** Subclass one in a ``Test*`` class, say how to build your object, and pytest
  runs every contract test on it::

      from offline_prelearner.testing import PreLearnerContract

      class TestMyPreLearner(PreLearnerContract):
          def make_prelearner(self):
              return MyPreLearner(n_step=3, train_batch_size=32, seed=0)

  :class:`SamplerContract` (``make_sampler``) and :class:`ConnectorContract`
  (``make_connector``) work the same way. Each has a ``make_*`` default for its input data
  (small real episodes, see :func:`example_episodes`) that you override to feed your own.

* **plain functions** ``check_prelearner(factory, batch)``, ``check_sampler(factory)``,
  ``check_connector(factory)`` run all checks and return the names of those that applied; each
  ``check_*`` also runs alone. ``factory`` is a zero-argument callable returning a *fresh* object.

A broken contract raises :class:`ContractError` (an ``AssertionError``) saying what was expected
and what was found. pytest is imported only when a mixin test runs (to skip a check that does not
apply, such as priority feedback for a uniform buffer), never at import time.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from .connectors.base import Connector, ConnectorContext
from .episodes.episode import Episode
from .io.formats.rows.writer import episodes_to_rows
from .prelearner import OfflinePreLearner
from .replay.batch import MODULE_ID, SampleBatch
from .replay.replay_buffer import EpisodeReplayBuffer
from .replay.samplers.base import Sampler
from .replay.units.base import SampleUnit
from .replay.units.transition import Transition


def _pickle_roundtrip(obj: Any) -> Any:
    """Pickles and unpickles an object this process just built (what Ray does to ship it).

    These bytes never come from a file: the round trip tests picklability, it does not read data.
    """
    return pickle.Unpickler(io.BytesIO(pickle.dumps(obj))).load()


__all__ = [
    "REQUIRED_COLUMNS",
    "ConnectorContract",
    "ContractError",
    "PreLearnerContract",
    "SamplerContract",
    "check_connector",
    "check_prelearner",
    "check_sampler",
    "connector_input",
    "example_episodes",
    "example_rows",
    "example_sample_batch",
]

#: Columns every learner-ready output batch carries (besides what connectors add).
REQUIRED_COLUMNS = (
    MODULE_ID,
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
)


class ContractError(AssertionError):
    """An implementation breaks a contract; the message says which and how."""


def _require(ok: Any, msg: str) -> None:
    if not ok:
        raise ContractError(msg)


# =============================================================================================
# example data: small, real, deterministic
# =============================================================================================
def example_episodes(
    n: int = 8, *, seed: int = 0, obs_shape: tuple[int, ...] = (4,), fragment: bool = True
) -> list[Episode]:
    """``n`` episodes of lengths 1..~20 (terminated, one truncated, and with ``fragment`` one
    not-done last episode), float32 observations, int64 actions, float32 rewards."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 21, size=n)
    lengths[0] = 1  # the edge: a one-step episode
    out = []
    for i, length in enumerate(lengths.tolist()):
        obs = rng.normal(size=(length + 1, *obs_shape)).astype(np.float32)
        done = i < n - 1 or not fragment
        out.append(
            Episode(
                id=f"ep{seed}-{i}",
                observations=obs,
                actions=rng.integers(0, 2, size=length),
                rewards=rng.normal(size=length).astype(np.float32),
                terminated=done and i != 1,
                truncated=done and i == 1,
            )
        )
    return out


def example_rows(episodes: list[Episode] | None = None) -> pa.Table:
    """Episodes (default :func:`example_episodes`) as an Arrow table of rows, RLlib's layout."""
    return episodes_to_rows(example_episodes() if episodes is None else episodes)


def example_sample_batch(
    batch_size: int = 32, *, episodes: list[Episode] | None = None, seed: int = 0
) -> SampleBatch:
    """A real sampled batch (uniform, 1-step transitions) from ``episodes``."""
    eps = example_episodes(seed=seed) if episodes is None else episodes
    buf = EpisodeReplayBuffer(sum(len(e) + 1 for e in eps) + 1, seed=seed)
    buf.add(eps)
    return buf.sample(batch_size)


# =============================================================================================
# comparisons
# =============================================================================================
def _equal(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _diff_columns(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of columns that differ (or exist on one side only)."""
    return sorted(k for k in set(a) | set(b) if k not in a or k not in b or not _equal(a[k], b[k]))


def _snapshot(batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in batch.items()}


# =============================================================================================
# prelearner
# =============================================================================================
PreLearnerFactory = Callable[[], OfflinePreLearner]


def _run(pl: OfflinePreLearner, batch: Any) -> list[dict[str, np.ndarray]]:
    out = pl(batch)
    _require(
        not isinstance(out, dict), "__call__ must yield output batches (a generator), not return"
    )
    return list(out)


def _num_rows(batch: Any) -> int:
    if isinstance(batch, pa.Table):
        return batch.num_rows
    return len(next(iter(batch.values())))


def check_prelearner_output(factory: PreLearnerFactory, batch: Any) -> None:
    """Every output is a dict of numpy columns of one row count, with :data:`REQUIRED_COLUMNS`."""
    outputs = _run(factory(), batch)
    _require(outputs, "the prelearner produced no output for the batch (learning_starts?)")
    for i, out in enumerate(outputs):
        _require(isinstance(out, dict), f"output {i} is a {type(out).__name__}, expected a dict")
        missing = [c for c in REQUIRED_COLUMNS if c not in out]
        _require(not missing, f"output {i} lacks columns {missing}; has {sorted(out)}")
        rows = {k: len(v) for k, v in out.items() if isinstance(v, np.ndarray) and v.ndim}
        bad = sorted(set(out) - set(rows))
        _require(not bad, f"output {i}: columns {bad} are not numpy arrays with a row axis")
        _require(len(set(rows.values())) == 1, f"output {i}: columns differ in rows: {rows}")
        kinds = {k: v.dtype for k, v in out.items() if v.dtype.kind == "O" and k != MODULE_ID}
        for k in kinds:  # object columns travel pickled; only strings are acceptable
            _require(
                all(isinstance(x, str) for x in out[k]),
                f"output {i}: column {k!r} holds Python objects other than strings",
            )


def check_prelearner_batch_size(factory: PreLearnerFactory, batch: Any) -> None:
    """Each trained module gets ``train_batch_size`` rows per input batch (not with
    ``sample_all``); untrained modules get none."""
    pl = factory()
    outputs = _run(pl, batch)
    per_module: dict[str, int] = {}
    for out in outputs:
        for m, n in zip(*np.unique(out[MODULE_ID].astype(str), return_counts=True), strict=True):
            per_module[str(m)] = per_module.get(str(m), 0) + int(n)
    _require(per_module, "the prelearner produced no rows for the batch")
    wanted = pl.config.modules.modules_to_train
    if wanted is not None:
        extra = sorted(set(per_module) - set(wanted))
        _require(not extra, f"modules {extra} are not in modules_to_train {list(wanted)}")
    if not pl.config.sample.sample_all:
        n = pl.config.sample.train_batch_size
        wrong = {m: k for m, k in per_module.items() if k != n}
        _require(not wrong, f"rows per module should be train_batch_size={n}, found {wrong}")


def check_prelearner_ledger(factory: PreLearnerFactory, batch: Any) -> None:
    """``stats()["ledger"]`` counts every input row: rows_in = kept + rejected + duplicate."""
    pl = factory()
    _run(pl, batch)
    led = pl.stats()["ledger"]
    n = _num_rows(batch)
    _require(led["rows_in"] == n, f"ledger rows_in is {led['rows_in']}, the batch has {n} rows")
    accounted = led["rows_kept"] + sum(led["rows_rejected"].values()) + led["rows_duplicate"]
    _require(
        accounted == led["rows_in"],
        f"ledger does not balance: rows_in {led['rows_in']} != kept {led['rows_kept']} + "
        f"rejected {dict(led['rows_rejected'])} + duplicate {led['rows_duplicate']}",
    )


def check_prelearner_deterministic(factory: PreLearnerFactory, batch: Any) -> None:
    """Two fresh prelearners (a fixed seed) give identical outputs, batch after batch."""
    a, b = factory(), factory()
    _require(a.config.seed is not None, "config.seed is None: set a seed for reproducible runs")
    for step in range(2):
        out_a, out_b = _run(a, batch), _run(b, batch)
        _require(len(out_a) == len(out_b), f"call {step}: {len(out_a)} vs {len(out_b)} outputs")
        for i, (x, y) in enumerate(zip(out_a, out_b, strict=True)):
            diff = _diff_columns(x, y)
            _require(not diff, f"call {step}, output {i}: columns {diff} differ between runs")


def check_prelearner_pickles(factory: PreLearnerFactory, batch: Any) -> None:
    """What Ray ships to its workers -- the class (by reference) and ``config`` -- pickles, and
    ``cls(config=...)`` rebuilt from them behaves like the factory's instance."""
    pl = factory()
    cls = type(pl)
    try:
        cls2 = _pickle_roundtrip(cls)
        config = _pickle_roundtrip(pl.config)
    except Exception as e:
        raise ContractError(
            f"{cls.__qualname__} or its config does not pickle ({type(e).__name__}: {e}); Ray "
            f"workers import the class by name: define it at module level of an importable module"
        ) from None
    _require(cls2 is cls, f"{cls.__qualname__} unpickles as another class {cls2!r}")
    try:
        rebuilt = cls2(config=config)
    except Exception as e:
        raise ContractError(
            f"{cls.__qualname__}(config=...) fails ({type(e).__name__}: {e}); Ray builds the "
            f"prelearner from the config alone (fn_constructor_kwargs)"
        ) from None
    for i, (x, y) in enumerate(zip(_run(pl, batch), _run(rebuilt, batch), strict=True)):
        diff = _diff_columns(x, y)
        _require(not diff, f"output {i}: columns {diff} differ after rebuilding from the pickle")


def check_prelearner_columnar(factory: PreLearnerFactory, batch: Any) -> None:
    """A batch the reader gives as columns yields the same rows on the columnar path
    (``postprocess_columns``) as on the episode path (``postprocess_episodes``, ``module_of``,
    ``add_to_buffers``): a prelearner that changes episodes says what it does on columns, or
    returns None from ``postprocess_columns``."""
    fast, slow = factory(), factory()
    _require(fast.config.seed is not None, "config.seed is None: set a seed to compare paths")
    slow.postprocess_columns = lambda columns: None  # type: ignore[method-assign]
    for step in range(2):
        out_f, out_s = _run(fast, batch), _run(slow, batch)
        _require(
            len(out_f) == len(out_s),
            f"call {step}: {len(out_f)} outputs on the columnar path, {len(out_s)} on the "
            "episode path",
        )
        for i, (x, y) in enumerate(zip(out_f, out_s, strict=True)):
            diff = _diff_columns(x, y)
            _require(
                not diff,
                f"call {step}, output {i}: columns {diff} differ between the columnar path "
                "(postprocess_columns) and the episode path (postprocess_episodes, module_of, "
                "add_to_buffers); make the same change in postprocess_columns, or return None "
                "there",
            )


def check_prelearner_priorities(factory: PreLearnerFactory, batch: Any) -> bool:
    """With an updatable (prioritized) sampler, ``update_priorities`` takes the ``indices`` of a
    sample and applies them. Returns False (nothing checked) for other samplers."""
    pl = factory()
    outputs = _run(pl, batch)
    updatable = {m for m, b in pl.buffers.items() if hasattr(b.sampler, "update_priorities")}
    if not updatable:
        return False
    for out in outputs:
        for m in sorted(set(out[MODULE_ID].astype(str)) & updatable):
            sel = out[MODULE_ID].astype(str) == m
            _require("indices" in out, "output has no 'indices' column to send priorities back")
            idx = out["indices"][sel]
            td = np.linspace(0.1, 2.0, len(idx))
            applied = pl.update_priorities(idx, td, module_id=m)
            _require(
                isinstance(applied, int) and 1 <= applied <= len(idx),
                f"update_priorities for {m!r} applied {applied!r} of {len(idx)} fresh handles",
            )
    again = _run(pl, batch)
    _require(again, "no output after update_priorities")
    return True


def check_prelearner(factory: PreLearnerFactory, batch: Any) -> list[str]:
    """Runs every prelearner check; returns the names of those that applied."""
    done = []
    for fn in (
        check_prelearner_output,
        check_prelearner_batch_size,
        check_prelearner_ledger,
        check_prelearner_deterministic,
        check_prelearner_columnar,
        check_prelearner_pickles,
    ):
        fn(factory, batch)
        done.append(fn.__name__)
    if check_prelearner_priorities(factory, batch):
        done.append("check_prelearner_priorities")
    return done


class PreLearnerContract:
    """pytest mixin: override :meth:`make_prelearner` (and :meth:`make_batch` for your data)."""

    def make_prelearner(self) -> OfflinePreLearner:
        """A fresh prelearner with a fixed seed."""
        raise NotImplementedError("override make_prelearner() to return your prelearner")

    def make_batch(self) -> Any:
        """One input batch as Ray Data hands it over (an Arrow table or a dict of arrays)."""
        return example_rows()

    def test_output_columns(self) -> None:
        check_prelearner_output(self.make_prelearner, self.make_batch())

    def test_rows_per_module(self) -> None:
        check_prelearner_batch_size(self.make_prelearner, self.make_batch())

    def test_ledger_balances(self) -> None:
        check_prelearner_ledger(self.make_prelearner, self.make_batch())

    def test_deterministic_with_seed(self) -> None:
        check_prelearner_deterministic(self.make_prelearner, self.make_batch())

    def test_columnar_path_matches_episode_path(self) -> None:
        check_prelearner_columnar(self.make_prelearner, self.make_batch())

    def test_pickles_for_ray(self) -> None:
        check_prelearner_pickles(self.make_prelearner, self.make_batch())

    def test_update_priorities(self) -> None:
        if not check_prelearner_priorities(self.make_prelearner, self.make_batch()):
            import pytest

            pytest.skip("no prioritized buffer: nothing takes priorities")


# =============================================================================================
# sampler
# =============================================================================================
SamplerFactory = Callable[[], Sampler]


def _filled_buffer(
    factory: SamplerFactory, unit: SampleUnit | None, episodes: list[Episode], capacity: int | None
) -> EpisodeReplayBuffer:
    cap = capacity or sum(len(e) + 1 for e in episodes) + 1
    buf = EpisodeReplayBuffer(cap, factory(), unit or Transition(), seed=0)
    buf.add(episodes)
    return buf


def _check_draw(buf: EpisodeReplayBuffer, n: int, what: str) -> None:
    valid = buf.valid_starts()
    slots, info = buf.sampler.sample(buf.storage, n, np.random.default_rng(1), valid)
    _require(
        isinstance(slots, np.ndarray) and slots.dtype == np.int64 and slots.shape == (n,),
        f"{what}: slots must be int64 of shape ({n},), found "
        f"{getattr(slots, 'dtype', type(slots))} {getattr(slots, 'shape', '')}",
    )
    bad = np.setdiff1d(slots, valid.slots())
    _require(not len(bad), f"{what}: slots {bad[:8].tolist()} are not valid start slots")
    _require(isinstance(info, Mapping), f"{what}: info must be a dict, found {type(info)}")
    for k, v in info.items():
        _require(
            isinstance(v, np.ndarray) and v.shape[:1] == (n,),
            f"{what}: info[{k!r}] must be an array with {n} rows, found "
            f"{getattr(v, 'shape', type(v))}",
        )
    if "weights" in info:
        w = info["weights"]
        _require(
            w.dtype.kind == "f" and np.isfinite(w).all() and (w > 0).all(),
            f"{what}: weights must be finite positive floats, found {w[:8]}",
        )
    if "rows" in info:
        _require(
            np.array_equal(info["rows"], buf.storage.rows_of(slots)),
            f"{what}: info['rows'] are not the table rows of the slots",
        )


def check_sampler_valid_slots(
    factory: SamplerFactory,
    episodes: list[Episode] | None = None,
    unit: SampleUnit | None = None,
) -> None:
    """Draws are int64 valid start slots (never padding, an unfinished tail or evicted data),
    info arrays have one row per draw; also after evictions."""
    eps = example_episodes() if episodes is None else episodes
    buf = _filled_buffer(factory, unit, eps, None)
    _check_draw(buf, 64, "after add")
    _check_draw(buf, 1, "one draw")
    small = _filled_buffer(factory, unit, eps[: len(eps) // 2], sum(len(e) + 1 for e in eps) // 2)
    small.add(eps[len(eps) // 2 :])  # evicts the oldest episodes
    _require(small.stats()["episodes_evicted"] > 0, "test setup: nothing was evicted")
    _check_draw(small, 64, "after eviction")


def check_sampler_state(
    factory: SamplerFactory,
    episodes: list[Episode] | None = None,
    unit: SampleUnit | None = None,
) -> None:
    """``state()`` is flat numpy arrays; a fresh sampler given it draws the same slots from the
    same generator state; the same generator state gives the same draws (no hidden randomness)."""
    eps = example_episodes() if episodes is None else episodes
    buf = _filled_buffer(factory, unit, eps, None)
    drawn = buf.sample(16)  # let the sampler build whatever it caches
    if hasattr(buf.sampler, "update_priorities"):  # make the state say something
        buf.sampler.update_priorities(buf.storage, drawn["indices"], np.linspace(0.1, 5, 16))
    state = buf.sampler.state()
    _require(isinstance(state, Mapping), f"state() must be a mapping, found {type(state)}")
    bad = sorted(k for k, v in state.items() if not isinstance(v, np.ndarray))
    _require(not bad, f"state() values must be numpy arrays; {bad} are not")
    other = factory()
    other.set_state(_pickle_roundtrip(dict(state)))
    valid = buf.valid_starts()
    a, _ = buf.sampler.sample(buf.storage, 64, np.random.default_rng(7), valid)
    a2, _ = buf.sampler.sample(buf.storage, 64, np.random.default_rng(7), valid)
    _require(np.array_equal(a, a2), "the same generator state gave different draws")
    try:
        b, _ = other.sample(buf.storage, 64, np.random.default_rng(7), valid)
    except Exception as e:
        raise ContractError(
            f"a sampler restored from state() cannot sample ({type(e).__name__}: {e})"
        ) from None
    _require(np.array_equal(a, b), "a sampler restored from state() draws differently")


def check_sampler(
    factory: SamplerFactory,
    episodes: list[Episode] | None = None,
    unit: SampleUnit | None = None,
) -> list[str]:
    """Runs every sampler check; returns their names."""
    check_sampler_valid_slots(factory, episodes, unit)
    check_sampler_state(factory, episodes, unit)
    return ["check_sampler_valid_slots", "check_sampler_state"]


class SamplerContract:
    """pytest mixin: override :meth:`make_sampler` (and ``make_unit``/``make_episodes``)."""

    def make_sampler(self) -> Sampler:
        raise NotImplementedError("override make_sampler() to return a fresh sampler")

    def make_unit(self) -> SampleUnit:
        return Transition()

    def make_episodes(self) -> list[Episode]:
        return example_episodes()

    def test_valid_slots_only(self) -> None:
        check_sampler_valid_slots(self.make_sampler, self.make_episodes(), self.make_unit())

    def test_state_round_trip(self) -> None:
        check_sampler_state(self.make_sampler, self.make_episodes(), self.make_unit())


# =============================================================================================
# connector
# =============================================================================================
ConnectorFactory = Callable[[], Connector]


def _episode_snapshot(episodes: list[Episode]) -> list[dict[str, Any]]:
    return [
        {
            "obs": ep.observations.copy(),
            "actions": ep.actions.copy(),
            "rewards": ep.rewards.copy(),
            "flags": (ep.terminated, ep.truncated, ep.t_started),
            **{f"extra:{k}": v.copy() for k, v in ep.extras.items()},
        }
        for ep in episodes
    ]


def _episode_state(ep: Episode) -> dict[str, Any]:
    return _episode_snapshot([ep])[0]


def connector_input(
    factory: ConnectorFactory,
    episodes: list[Episode] | None = None,
    batch_size: int = 32,
) -> tuple[SampleBatch, ConnectorContext]:
    """A sampled batch of episodes that went through a fresh connector's ``on_episodes`` (so
    columns it adds there are present), and a context with a seeded generator."""
    eps = factory().on_episodes(list(example_episodes() if episodes is None else episodes))
    return example_sample_batch(batch_size, episodes=eps), _context()


def _context() -> ConnectorContext:
    return ConnectorContext(module_id="default_policy", rng=np.random.default_rng(0))


def _apply(c: Connector, batch: SampleBatch) -> SampleBatch:
    out = c(batch, _context())
    _require(isinstance(out, SampleBatch), f"the connector returned {type(out).__name__}")
    return out


def check_connector_rows_and_inputs(
    factory: ConnectorFactory, batch: SampleBatch, episodes: list[Episode] | None = None
) -> None:
    """Returns a SampleBatch of as many rows; changes neither its input batch nor (in
    ``on_episodes``) its input episodes."""
    eps = list(example_episodes() if episodes is None else episodes)
    before_eps = _episode_snapshot(eps)
    out_eps = factory().on_episodes(eps)
    _require(isinstance(out_eps, list), f"on_episodes returned {type(out_eps).__name__}")
    _require(all(isinstance(e, Episode) for e in out_eps), "on_episodes returned non-Episodes")
    for i, (ep, snap) in enumerate(zip(eps, before_eps, strict=True)):
        diff = _diff_columns(snap, _episode_state(ep))
        _require(not diff, f"on_episodes changed input episode {i} ({ep.id!r}) in place: {diff}")
    before, n = _snapshot(batch.to_dict()), len(batch)
    out = _apply(factory(), batch)
    _require(len(out) == n, f"{n} rows in, {len(out)} out")
    diff = _diff_columns(before, batch.to_dict())
    _require(not diff, f"the connector changed its input batch in place: columns {diff}")


def check_connector_state(factory: ConnectorFactory, batch: SampleBatch) -> None:
    """The connector is deterministic given the context's generator, and ``get_state()`` after a
    batch, given to a fresh connector, makes it act the same."""
    diff = _diff_columns(_apply(factory(), batch).to_dict(), _apply(factory(), batch).to_dict())
    _require(not diff, f"two fresh connectors differ in columns {diff} (hidden randomness?)")
    a = factory()
    _apply(a, batch)
    state = a.get_state()
    _require(isinstance(state, Mapping), f"get_state() returned {type(state).__name__}")
    b = factory()
    b.set_state(_pickle_roundtrip(state))
    diff = _diff_columns(_apply(copy.deepcopy(a), batch).to_dict(), _apply(b, batch).to_dict())
    _require(not diff, f"a connector restored from get_state() differs in columns {diff}")


def check_connector_pickles(factory: ConnectorFactory, batch: SampleBatch) -> None:
    """The connector pickles (Ray ships it inside the prelearner's config) and its copy acts
    the same."""
    c = factory()
    try:
        c2 = _pickle_roundtrip(c)
    except Exception as e:
        raise ContractError(f"{c!r} does not pickle ({type(e).__name__}: {e})") from None
    diff = _diff_columns(_apply(c, batch).to_dict(), _apply(c2, batch).to_dict())
    _require(not diff, f"the unpickled connector differs in columns {diff}")


def check_connector(factory: ConnectorFactory, episodes: list[Episode] | None = None) -> list[str]:
    """Runs every connector check on :func:`connector_input`; returns their names."""
    batch, _ = connector_input(factory, episodes)
    check_connector_rows_and_inputs(factory, batch, episodes)
    check_connector_state(factory, batch)
    check_connector_pickles(factory, batch)
    return ["check_connector_rows_and_inputs", "check_connector_state", "check_connector_pickles"]


class ConnectorContract:
    """pytest mixin: override :meth:`make_connector` (and :meth:`make_episodes`)."""

    def make_connector(self) -> Connector:
        raise NotImplementedError("override make_connector() to return a fresh connector")

    def make_episodes(self) -> list[Episode]:
        return example_episodes()

    def make_batch(self) -> SampleBatch:
        return connector_input(self.make_connector, self.make_episodes())[0]

    def test_rows_and_inputs(self) -> None:
        check_connector_rows_and_inputs(
            self.make_connector, self.make_batch(), self.make_episodes()
        )

    def test_state_round_trip(self) -> None:
        check_connector_state(self.make_connector, self.make_batch())

    def test_pickles(self) -> None:
        check_connector_pickles(self.make_connector, self.make_batch())
