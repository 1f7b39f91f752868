"""The sampler contract: a sampler draws only valid start slots and restores its state exactly.

:func:`check_sampler` runs every check below on a factory of fresh samplers;
:class:`SamplerContract` runs them as pytest tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..episodes.episode import Episode
from ..replay.replay_buffer import EpisodeReplayBuffer
from ..replay.samplers.base import Sampler
from ..replay.units.base import SampleUnit
from ..replay.units.transition import Transition
from .contract import ContractError, pickle_roundtrip, require
from .examples import example_episodes

__all__ = [
    "SamplerContract",
    "SamplerFactory",
    "check_sampler",
    "check_sampler_state",
    "check_sampler_valid_slots",
]


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
    require(
        isinstance(slots, np.ndarray) and slots.dtype == np.int64 and slots.shape == (n,),
        f"{what}: slots must be int64 of shape ({n},), found "
        f"{getattr(slots, 'dtype', type(slots))} {getattr(slots, 'shape', '')}",
    )
    bad = np.setdiff1d(slots, valid.slots())
    require(not len(bad), f"{what}: slots {bad[:8].tolist()} are not valid start slots")
    require(isinstance(info, Mapping), f"{what}: info must be a dict, found {type(info)}")
    for k, v in info.items():
        require(
            isinstance(v, np.ndarray) and v.shape[:1] == (n,),
            f"{what}: info[{k!r}] must be an array with {n} rows, found "
            f"{getattr(v, 'shape', type(v))}",
        )
    if "weights" in info:
        w = info["weights"]
        require(
            w.dtype.kind == "f" and np.isfinite(w).all() and (w > 0).all(),
            f"{what}: weights must be finite positive floats, found {w[:8]}",
        )
    if "rows" in info:
        require(
            np.array_equal(info["rows"], buf.storage.rows_of(slots)),
            f"{what}: info['rows'] are not the table rows of the slots",
        )


def check_sampler_valid_slots(
    factory: SamplerFactory,
    episodes: list[Episode] | None = None,
    unit: SampleUnit | None = None,
) -> None:
    """Draws are int64 valid start slots (never padding, an unfinished tail or evicted data),
    info arrays have one row per draw; also after evictions.

    Args:
        factory: Returns a fresh sampler on each call (the checks build several buffers).
        episodes: The episodes to fill the buffers with; default
            :func:`~.examples.example_episodes`. Enough of them that half the buffer's
            capacity cannot hold them all (the eviction check needs it).
        unit: The sample unit of the buffers; default 1-step :class:`Transition`.

    Raises:
        ContractError: naming the broken rule.
    """
    eps = example_episodes() if episodes is None else episodes
    buf = _filled_buffer(factory, unit, eps, None)
    _check_draw(buf, 64, "after add")
    _check_draw(buf, 1, "one draw")
    small = _filled_buffer(factory, unit, eps[: len(eps) // 2], sum(len(e) + 1 for e in eps) // 2)
    small.add(eps[len(eps) // 2 :])  # evicts the oldest episodes
    require(small.stats()["episodes_evicted"] > 0, "test setup: nothing was evicted")
    _check_draw(small, 64, "after eviction")


def check_sampler_state(
    factory: SamplerFactory,
    episodes: list[Episode] | None = None,
    unit: SampleUnit | None = None,
) -> None:
    """``state()`` is flat numpy arrays; a fresh sampler given it draws the same slots from the
    same generator state; the same generator state gives the same draws (no hidden randomness).

    Args:
        factory: Returns a fresh sampler on each call (the checks build several buffers).
        episodes: The episodes to fill the buffers with; default
            :func:`~.examples.example_episodes`. Enough of them that half the buffer's
            capacity cannot hold them all (the eviction check needs it).
        unit: The sample unit of the buffers; default 1-step :class:`Transition`.

    Raises:
        ContractError: naming the broken rule.
    """
    eps = example_episodes() if episodes is None else episodes
    buf = _filled_buffer(factory, unit, eps, None)
    drawn = buf.sample(16)  # let the sampler build whatever it caches
    if hasattr(buf.sampler, "update_priorities"):  # make the state say something
        buf.sampler.update_priorities(buf.storage, drawn["indices"], np.linspace(0.1, 5, 16))
    state = buf.sampler.state()
    require(isinstance(state, Mapping), f"state() must be a mapping, found {type(state)}")
    bad = sorted(k for k, v in state.items() if not isinstance(v, np.ndarray))
    require(not bad, f"state() values must be numpy arrays; {bad} are not")
    other = factory()
    other.set_state(pickle_roundtrip(dict(state)))
    valid = buf.valid_starts()
    a, _ = buf.sampler.sample(buf.storage, 64, np.random.default_rng(7), valid)
    a2, _ = buf.sampler.sample(buf.storage, 64, np.random.default_rng(7), valid)
    require(np.array_equal(a, a2), "the same generator state gave different draws")
    try:
        b, _ = other.sample(buf.storage, 64, np.random.default_rng(7), valid)
    except Exception as e:
        raise ContractError(
            f"a sampler restored from state() cannot sample ({type(e).__name__}: {e})"
        ) from None
    require(np.array_equal(a, b), "a sampler restored from state() draws differently")


def check_sampler(
    factory: SamplerFactory,
    episodes: list[Episode] | None = None,
    unit: SampleUnit | None = None,
) -> list[str]:
    """Runs every sampler check; returns their names.

    Args:
        factory: Returns a fresh sampler on each call (the checks build several buffers).
        episodes: The episodes to fill the buffers with; default
            :func:`~.examples.example_episodes`. Enough of them that half the buffer's
            capacity cannot hold them all (the eviction check needs it).
        unit: The sample unit of the buffers; default 1-step :class:`Transition`.

    Returns:
        The names of the checks that passed, in the order they ran.

    Raises:
        ContractError: naming the broken rule.
    """
    check_sampler_valid_slots(factory, episodes, unit)
    check_sampler_state(factory, episodes, unit)
    return ["check_sampler_valid_slots", "check_sampler_state"]


class SamplerContract:
    """pytest mixin: override :meth:`make_sampler` (and ``make_unit``/``make_episodes``)."""

    def make_sampler(self) -> Sampler:
        """A fresh sampler; override it (the default raises)."""
        raise NotImplementedError("override make_sampler() to return a fresh sampler")

    def make_unit(self) -> SampleUnit:
        """The sample unit the buffer draws with; default 1-step :class:`Transition`."""
        return Transition()

    def make_episodes(self) -> list[Episode]:
        """The episodes the buffer holds; default :func:`example_episodes`."""
        return example_episodes()

    def test_valid_slots_only(self) -> None:
        """Runs :func:`check_sampler_valid_slots`."""
        check_sampler_valid_slots(self.make_sampler, self.make_episodes(), self.make_unit())

    def test_state_round_trip(self) -> None:
        """Runs :func:`check_sampler_state`."""
        check_sampler_state(self.make_sampler, self.make_episodes(), self.make_unit())
