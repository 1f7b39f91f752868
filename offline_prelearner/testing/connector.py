"""The connector contract: a connector keeps the rows, leaves its inputs alone and round-trips.

:func:`check_connector` runs every check below on a factory of fresh connectors;
:class:`ConnectorContract` runs them as pytest tests.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..connectors.base import Connector, ConnectorContext
from ..episodes.episode import Episode
from ..episodes.episode_columns import EpisodeColumns
from ..replay.batch import SampleBatch
from .contract import ContractError, diff_columns, pickle_roundtrip, require, snapshot
from .examples import example_episodes, example_sample_batch

__all__ = [
    "ConnectorContract",
    "ConnectorFactory",
    "check_connector",
    "check_connector_pickles",
    "check_connector_rows_and_inputs",
    "check_connector_state",
    "connector_input",
]


ConnectorFactory = Callable[[], Connector]


def _columns_snapshot(columns: EpisodeColumns) -> dict[str, Any]:
    """A copy of every array of a table of episodes, to compare after a call."""
    arrays = {
        "obs": columns.obs,
        "actions": columns.actions,
        "rewards": columns.rewards,
        "length": columns.length,
        "t_started": columns.t_started,
        "terminated": columns.terminated,
        "truncated": columns.truncated,
        **{f"extra:{k}": v for k, v in columns.extras.items()},
    }
    return {k: np.array(v, copy=True) for k, v in arrays.items()}


def connector_input(
    factory: ConnectorFactory,
    episodes: list[Episode] | None = None,
    batch_size: int = 32,
) -> tuple[SampleBatch, ConnectorContext]:
    """A sampled batch of episodes that went through a fresh connector's ``on_episodes`` (so
    columns it adds there are present), and a context with a seeded generator.

    Args:
        factory: Returns a fresh connector on each call (the checks build several).
        episodes: The episodes (default :func:`example_episodes`).
        batch_size: Rows to sample.

    Returns:
        The batch and the context.
    """
    eps = list(example_episodes() if episodes is None else episodes)
    out = factory().on_episodes(EpisodeColumns.from_episodes(eps))
    require(
        isinstance(out, EpisodeColumns),
        f"on_episodes returned {type(out).__name__}, expected EpisodeColumns",
    )
    return example_sample_batch(batch_size, episodes=list(out.iter_episodes())), _context()


def _context() -> ConnectorContext:
    return ConnectorContext(module_id="default_policy", rng=np.random.default_rng(0))


def _apply(c: Connector, batch: SampleBatch) -> SampleBatch:
    out = c(batch, _context())
    require(isinstance(out, SampleBatch), f"the connector returned {type(out).__name__}")
    return out


def check_connector_rows_and_inputs(
    factory: ConnectorFactory, batch: SampleBatch, episodes: list[Episode] | None = None
) -> None:
    """Returns a SampleBatch of as many rows; changes neither its input batch nor (in
    ``on_episodes``) its input episodes, and keeps every episode there.

    Args:
        factory: Returns a fresh connector on each call (the checks build several).
        batch: A sampled batch the connector accepts (see :func:`connector_input`); it is not
            changed.
        episodes: The episodes for ``on_episodes`` (default :func:`example_episodes`).
    """
    eps = list(example_episodes() if episodes is None else episodes)
    columns = EpisodeColumns.from_episodes(eps)
    before_eps = _columns_snapshot(columns)
    out_eps = factory().on_episodes(columns)
    require(
        isinstance(out_eps, EpisodeColumns),
        f"on_episodes returned {type(out_eps).__name__}, expected EpisodeColumns",
    )
    n_eps = len(columns)
    require(len(out_eps) == n_eps, f"on_episodes got {n_eps} episodes, gave {len(out_eps)}")
    diff = diff_columns(before_eps, _columns_snapshot(columns))
    require(not diff, f"on_episodes changed its input episodes in place: columns {diff}")
    before, n = snapshot(batch.to_dict()), len(batch)
    out = _apply(factory(), batch)
    require(len(out) == n, f"{n} rows in, {len(out)} out")
    diff = diff_columns(before, batch.to_dict())
    require(not diff, f"the connector changed its input batch in place: columns {diff}")


def check_connector_state(factory: ConnectorFactory, batch: SampleBatch) -> None:
    """The connector is deterministic given the context's generator, and ``get_state()`` after a
    batch, given to a fresh connector, makes it act the same.

    Args:
        factory: Returns a fresh connector on each call (the checks build several).
        batch: A sampled batch the connector accepts (see :func:`connector_input`); it is not
            changed.

    Raises:
        ContractError: naming the broken rule.
    """
    diff = diff_columns(_apply(factory(), batch).to_dict(), _apply(factory(), batch).to_dict())
    require(not diff, f"two fresh connectors differ in columns {diff} (hidden randomness?)")
    a = factory()
    _apply(a, batch)
    state = a.get_state()
    require(isinstance(state, Mapping), f"get_state() returned {type(state).__name__}")
    b = factory()
    b.set_state(pickle_roundtrip(state))
    diff = diff_columns(_apply(copy.deepcopy(a), batch).to_dict(), _apply(b, batch).to_dict())
    require(not diff, f"a connector restored from get_state() differs in columns {diff}")


def check_connector_pickles(factory: ConnectorFactory, batch: SampleBatch) -> None:
    """The connector pickles (Ray ships it inside the prelearner's config) and its copy acts
    the same.

    Args:
        factory: Returns a fresh connector on each call (the checks build several).
        batch: A sampled batch the connector accepts (see :func:`connector_input`); it is not
            changed.

    Raises:
        ContractError: naming the broken rule.
    """
    c = factory()
    try:
        c2 = pickle_roundtrip(c)
    except Exception as e:
        raise ContractError(f"{c!r} does not pickle ({type(e).__name__}: {e})") from None
    diff = diff_columns(_apply(c, batch).to_dict(), _apply(c2, batch).to_dict())
    require(not diff, f"the unpickled connector differs in columns {diff}")


def check_connector(factory: ConnectorFactory, episodes: list[Episode] | None = None) -> list[str]:
    """Runs every connector check on :func:`connector_input`; returns their names.

    Args:
        factory: Returns a fresh connector on each call (the checks build several).
        episodes: The episodes the connector sees in ``on_episodes``; default
            :func:`~.examples.example_episodes`. They are not changed.

    Returns:
        The names of the checks that passed, in the order they ran.

    Raises:
        ContractError: naming the broken rule.
    """
    batch, _ = connector_input(factory, episodes)
    check_connector_rows_and_inputs(factory, batch, episodes)
    check_connector_state(factory, batch)
    check_connector_pickles(factory, batch)
    return ["check_connector_rows_and_inputs", "check_connector_state", "check_connector_pickles"]


class ConnectorContract:
    """pytest mixin: override :meth:`make_connector` (and :meth:`make_episodes`)."""

    def make_connector(self) -> Connector:
        """A fresh connector; override it (the default raises)."""
        raise NotImplementedError("override make_connector() to return a fresh connector")

    def make_episodes(self) -> list[Episode]:
        """The episodes the connector sees in ``on_episodes``; default :func:`example_episodes`."""
        return example_episodes()

    def make_batch(self) -> SampleBatch:
        """A sampled batch of :meth:`make_episodes` after a fresh connector's ``on_episodes``."""
        return connector_input(self.make_connector, self.make_episodes())[0]

    def test_rows_and_inputs(self) -> None:
        """Runs :func:`check_connector_rows_and_inputs`."""
        check_connector_rows_and_inputs(
            self.make_connector, self.make_batch(), self.make_episodes()
        )

    def test_state_round_trip(self) -> None:
        """Runs :func:`check_connector_state`."""
        check_connector_state(self.make_connector, self.make_batch())

    def test_pickles(self) -> None:
        """Runs :func:`check_connector_pickles`."""
        check_connector_pickles(self.make_connector, self.make_batch())
