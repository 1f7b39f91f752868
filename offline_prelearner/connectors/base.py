"""Connectors: small named transforms at two hook points, and the ordered pipeline that runs them.

A :class:`Connector` declares which of the two points of the data flow it acts at
(:attr:`Connector.touches`)::

    episodes ──on_episodes──▶ buffer ──sample──▶ SampleBatch ──__call__(batch, ctx)──▶ learner

* ``"episodes"``: ``on_episodes(columns, ctx) -> columns`` runs before the episodes enter the
  buffer, on the batch's episodes held as one
  :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`. It is where whole-episode
  quantities are computed (returns-to-go, GAE advantages), over the concatenated steps with the
  episodes' boundaries (``columns.step_rows()``, ``columns.length``), not step by step: a per-step
  column added to ``columns.extras`` is stored by the buffer and gathered at the sampled ``t`` by
  every unit (transition, n-step, sequence) at no further cost. Code that wants one episode at a
  time uses :meth:`~offline_prelearner.episodes.episode_columns.EpisodeColumns.map_episodes`. The
  episodes may belong to several modules, so ``ctx.module_id`` is ``None`` here; ``ctx.gamma``
  is the run's discount (what ``gamma=None`` in the return connectors means).
* ``"batches"``: ``__call__(batch, ctx) -> batch`` runs on every sampled batch (normalise,
  flatten, one-hot, cast). ``ctx`` is a small frozen :class:`ConnectorContext` (module id,
  spaces, gamma, rng).

A pipeline runs each hook only on the connectors that declare it
(:attr:`ConnectorPipeline.touches_episodes`, :attr:`ConnectorPipeline.touches_batches`), and
refuses a connector that overrides a hook it does not declare (it would never run). Connectors
may keep state (running statistics) exposed as ``get_state() -> dict`` of numpy arrays and JSON
values, restored by ``set_state``.

Connectors are named: a :class:`ConnectorPipeline` addresses them by ``name`` (unique within one
pipeline). Building connectors from specs (a registered name, a dict, ``"pkg.mod:Name"``) is
:mod:`.registry`'s business; this module knows no implementation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from ..episodes.episode_columns import EpisodeColumns
from ..errors import ConfigError
from ..replay.batch import SampleBatch

__all__ = ["DEFAULT_CONTEXT", "Connector", "ConnectorContext", "ConnectorPipeline", "Touches"]

#: What a connector acts on: the episodes before the buffer, or the sampled batches.
Touches = Literal["episodes", "batches"]


@dataclass(frozen=True)
class ConnectorContext:
    """What a connector may know about the batch it transforms, besides its columns.

    Attributes:
        module_id: The module the batch is for (``None`` in single-agent use).
        observation_space: The module's observation space (a gymnasium space) if known; a
            connector that needs it and finds ``None`` says so.
        action_space: The module's action space if known.
        gamma: The run's discount (n-step returns; return connectors built with
            ``gamma=None``).
        rng: A generator for connectors that draw randomness (augmentation); ``None`` if the
            caller gives none. Never use global numpy randomness: it breaks seeded runs.
    """

    module_id: Any = None
    observation_space: Any = None
    action_space: Any = None
    gamma: float = 0.99
    rng: np.random.Generator | None = None


#: The context used where the caller gives none.
DEFAULT_CONTEXT = ConnectorContext()


class Connector:
    """Base class of connectors; both hooks are no-ops. Override the one(s) you declare.

    ``name`` names the connector in a pipeline; a class sets its default (the built-ins: their
    registered name; :func:`~.registry.register_connector` sets it for a class that does not),
    else the class name is used; it may be set per instance.

    ``touches`` declares the hooks the connector acts in: ``{"batches"}`` by default (its
    ``__call__``), ``{"episodes"}`` for one that works on episodes before the buffer (its
    ``on_episodes``), or both.
    """

    name: str = ""
    touches: ClassVar[frozenset[Touches]] = frozenset({"batches"})

    def on_episodes(
        self, columns: EpisodeColumns, ctx: ConnectorContext = DEFAULT_CONTEXT
    ) -> EpisodeColumns:
        """Transforms the episodes of one batch before they enter the buffer (a connector that
        declares ``"episodes"`` in :attr:`touches`).

        Args:
            columns: The batch's episodes as shared columns. Never change their arrays in
                place: return a new object (``dataclasses.replace(columns, extras={...})`` shares
                the rest).
            ctx: The run's context (``gamma``; ``module_id`` is None: several modules' episodes).

        Returns:
            The episodes to buffer.
        """
        return columns

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext) -> SampleBatch:
        """Transforms one sampled batch (the rows of one module).

        Args:
            batch: The sampled rows.
            ctx: The module's context.

        Returns:
            The batch for the learner.
        """
        return batch

    def get_state(self) -> dict[str, Any]:
        """State to checkpoint: numpy arrays and JSON values only (no pickle needed)."""
        return {}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores what :meth:`get_state` returned.

        The base connector keeps no state, so it accepts only an empty mapping; a stateful
        subclass overrides this.

        Args:
            state: A mapping from :meth:`get_state` (state key to numpy array or JSON value).

        Raises:
            ConfigError: ``state`` has keys (this connector keeps no state to restore).
        """
        if state:
            raise ConfigError(
                f"connector {self.name!r} keeps no state, found state keys {sorted(state)}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


_TOUCHES: frozenset[str] = frozenset({"episodes", "batches"})


def _name_of(c: Connector) -> str:
    return c.name or type(c).__name__


class ConnectorPipeline:
    """An ordered list of connectors with unique names; both hooks run them in order.

    Args:
        connectors: The connectors, in the order they run.

    Raises:
        ConfigError: An item is not a connector, or two share a name.
    """

    def __init__(self, connectors: Iterable[Connector] = ()) -> None:
        self._items: list[Connector] = []
        for c in connectors:
            self.append(c)

    # ------------------------------------------------------------------ running
    @property
    def touches_episodes(self) -> bool:
        """Whether any connector works on episodes (``on_episodes``)."""
        return any("episodes" in c.touches for c in self._items)

    @property
    def touches_batches(self) -> bool:
        """Whether any connector works on sampled batches (``__call__``)."""
        return any("batches" in c.touches for c in self._items)

    def on_episodes(
        self, columns: EpisodeColumns, ctx: ConnectorContext | None = None
    ) -> EpisodeColumns:
        """Runs ``on_episodes`` of every connector that touches episodes, in order.

        Args:
            columns: The batch's episodes.
            ctx: The context (None: the default context).

        Returns:
            The episodes after the last such connector.
        """
        ctx = ctx if ctx is not None else DEFAULT_CONTEXT
        for c in self._items:
            if "episodes" not in c.touches:
                continue
            columns = c.on_episodes(columns, ctx)
            if not isinstance(columns, EpisodeColumns):
                raise TypeError(
                    f"connector {_name_of(c)!r}.on_episodes returned {type(columns).__name__}, "
                    f"expected EpisodeColumns"
                )
        return columns

    def __call__(self, batch: SampleBatch, ctx: ConnectorContext | None = None) -> SampleBatch:
        """Runs every connector that touches batches on ``batch``, in order.

        Args:
            batch: The sampled rows of one module.
            ctx: The context (None: the default context).

        Returns:
            The batch after the last such connector.
        """
        ctx = ctx if ctx is not None else DEFAULT_CONTEXT
        for c in self._items:
            if "batches" not in c.touches:
                continue
            batch = c(batch, ctx)
            if not isinstance(batch, SampleBatch):
                raise TypeError(
                    f"connector {_name_of(c)!r} returned {type(batch).__name__}, expected a "
                    f"SampleBatch"
                )
        return batch

    # ------------------------------------------------------------------ editing
    @property
    def names(self) -> list[str]:
        """The connectors' names, in pipeline order."""
        return [_name_of(c) for c in self._items]

    def _check_new(self, c: Connector) -> None:
        if not isinstance(c, Connector):
            raise ConfigError(f"not a Connector: {c!r} ({type(c).__name__})")
        touches = c.touches
        if not (isinstance(touches, frozenset) and touches and touches <= _TOUCHES):
            raise ConfigError(
                f"connector {_name_of(c)!r}: touches must be a non-empty frozenset of "
                f"{sorted(_TOUCHES)}, found {touches!r}"
            )
        for hook, point in (("on_episodes", "episodes"), ("__call__", "batches")):
            own = getattr(type(c), hook) is not getattr(Connector, hook)
            if own and point not in touches:
                raise ConfigError(
                    f"connector {_name_of(c)!r} defines {hook} but its touches "
                    f"{sorted(touches)} lacks {point!r}, so it would never run; declare "
                    f"touches = frozenset({{{point!r}, ...}})"
                )
        if _name_of(c) in self.names:
            raise ConfigError(
                f"the pipeline already has a connector named {_name_of(c)!r}; give the new one "
                f"another name (set .name, or 'as' in a spec dict)"
            )

    def _index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ConfigError(
                f"no connector named {name!r}; the pipeline has {self.names}"
            ) from None

    def append(self, connector: Connector) -> None:
        """Adds ``connector`` at the end of the pipeline.

        Args:
            connector: The connector to run after all the present ones; its name (``.name``, or
                its class name where that is empty) must not be in :attr:`names` yet.

        Raises:
            ConfigError: ``connector`` is not a :class:`Connector`, its ``touches`` is not a
                non-empty frozenset of ``"episodes"`` / ``"batches"``, it overrides a hook its
                ``touches`` does not declare, or its name is taken.
        """
        self._check_new(connector)
        self._items.append(connector)

    def insert_before(self, name: str, connector: Connector) -> None:
        """Inserts ``connector`` right before the one named ``name``.

        Args:
            name: The name of a connector already in the pipeline (one of :attr:`names`).
            connector: The connector to insert; checked as in :meth:`append`.

        Raises:
            ConfigError: No connector is named ``name``, or ``connector`` is refused as in
                :meth:`append`.
        """
        i = self._index(name)
        self._check_new(connector)
        self._items.insert(i, connector)

    def remove(self, name: str) -> Connector:
        """Removes and returns the connector named ``name``.

        Args:
            name: The name of a connector in the pipeline (one of :attr:`names`).

        Returns:
            The removed connector.

        Raises:
            ConfigError: No connector is named ``name``.
        """
        return self._items.pop(self._index(name))

    def __getitem__(self, name: str) -> Connector:
        return self._items[self._index(name)]

    def __iter__(self) -> Iterator[Connector]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ConnectorPipeline({self.names})"

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, dict[str, Any]]:
        """``{name: state}`` for every connector that keeps state."""
        return {_name_of(c): s for c in self._items if (s := c.get_state())}

    def set_state(self, state: Mapping[str, Mapping[str, Any]]) -> None:
        """Restores what :meth:`get_state` returned: each named connector gets its own state.

        Args:
            state: ``{connector name: that connector's state}``; a connector of the pipeline not
                named here keeps its present state.

        Raises:
            ConfigError: ``state`` names a connector not in the pipeline (or a connector refuses
                its state).
        """
        unknown = sorted(set(state) - set(self.names))
        if unknown:
            raise ConfigError(f"state for connectors {unknown} not in the pipeline {self.names}")
        for c in self._items:
            if _name_of(c) in state:
                c.set_state(state[_name_of(c)])
