"""Connectors: small named transforms over episodes (before the buffer) and sampled batches.

See :mod:`.base` for the two hook points and the pipeline, :mod:`.registry` for names and specs.
A connector declares the points it acts at (``touches``: ``"episodes"``, ``"batches"``); the
pipeline runs each hook only on the connectors that declare it, so a batch-only connector never
touches the episodes on their way to the buffer.

Built-ins, by registered name:

* ``returns_to_go`` -- :class:`DiscountedReturns`: per-step discounted returns-to-go (episodes);
* ``gae`` -- :class:`GAE`: advantages and value targets from a value column (episodes);
* ``normalize_obs`` -- :class:`NormalizeObservations`: running mean/std normalisation (batches);
* ``flatten_obs`` -- :class:`FlattenObservations`: ``[B, ...] -> [B, n]`` (batches);
* ``one_hot_actions`` -- :class:`OneHotActions` (batches);
* ``cast`` -- :class:`CastDtypes` (batches).
"""

from __future__ import annotations

from .base import DEFAULT_CONTEXT, Connector, ConnectorContext, ConnectorPipeline
from .builtin import CastDtypes, FlattenObservations, NormalizeObservations, OneHotActions
from .registry import (
    ConnectorSpec,
    available_connectors,
    build_connector,
    build_pipeline,
    register_connector,
)
from .returns import GAE, DiscountedReturns, discounted_cumsum
from .stats import RunningMeanStd

__all__ = [
    "DEFAULT_CONTEXT",
    "GAE",
    "CastDtypes",
    "Connector",
    "ConnectorContext",
    "ConnectorPipeline",
    "ConnectorSpec",
    "DiscountedReturns",
    "FlattenObservations",
    "NormalizeObservations",
    "OneHotActions",
    "RunningMeanStd",
    "available_connectors",
    "build_connector",
    "build_pipeline",
    "discounted_cumsum",
    "register_connector",
]
