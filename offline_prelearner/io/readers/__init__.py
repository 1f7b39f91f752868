"""Readers: one decoder per input format, registered by name. Each turns a batch into episodes.

A reader is any object with ``read(batch, source=None) -> EpisodeBatch`` (see :class:`Reader`),
built from a :class:`~offline_prelearner.config.ReadConfig`. ``batch`` is an Arrow table or a dict
of numpy columns (both Ray Data batch formats); ``source`` names the file, for error messages.

Built-in formats: ``rows`` (one transition per row), ``episodes`` (msgpack episode records in an
``item`` column), ``sample_batches`` (RLlib's old-stack SampleBatch / MultiAgentBatch records).
Register more with :func:`register_reader`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeAlias, runtime_checkable

import numpy as np
import pyarrow as pa

from ...config import ReadConfig
from ...episodes.ledger import EpisodeBatch
from ...errors import UnsupportedFormatError

__all__ = [
    "AutoReader",
    "Batch",
    "Reader",
    "available_formats",
    "detect_batch_format",
    "make_reader",
    "register_reader",
]

Batch: TypeAlias = pa.Table | Mapping[str, np.ndarray]


@runtime_checkable
class Reader(Protocol):
    """Turns one batch of input records into episodes, accounting for every row."""

    config: ReadConfig

    def read(self, batch: Batch, source: str | None = None) -> EpisodeBatch: ...


_REGISTRY: dict[str, Callable[[ReadConfig], Reader]] = {}


def register_reader(name: str) -> Callable[[Any], Any]:
    """Class decorator: ``@register_reader("myformat")`` makes ``format="myformat"`` work."""

    def deco(factory: Any) -> Any:
        _REGISTRY[name] = factory
        return factory

    return deco


def available_formats() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def make_reader(config: ReadConfig) -> Reader:
    """The reader registered for ``config.format``."""
    _load_builtins()
    if config.format == "auto":
        return AutoReader(config)
    try:
        factory = _REGISTRY[config.format]
    except KeyError:
        raise UnsupportedFormatError(
            f"no reader for format {config.format!r}; known formats: {sorted(_REGISTRY)}"
        ) from None
    return factory(config)


def detect_batch_format(column_names: list[str]) -> str:
    """``episodes`` (an ``item`` column), ``sample_batches`` (a ``type`` column of old-stack
    records) or ``rows``, from a batch's column names."""
    names = set(column_names)
    if names == {"item"} or ("item" in names and "obs" not in names):
        return "episodes"
    if "type" in names and ("count" in names or "policy_batches" in names or "obs" in names):
        return "sample_batches"
    return "rows"


class AutoReader:
    """Picks the reader from the first batch's columns, then keeps it (``format="auto"``)."""

    def __init__(self, config: ReadConfig) -> None:
        self.config = config
        self.reader: Reader | None = None

    def read(self, batch: Batch, source: str | None = None) -> EpisodeBatch:
        if self.reader is None:
            names = list(batch.column_names if isinstance(batch, pa.Table) else batch.keys())
            fmt = detect_batch_format(names)
            self.reader = make_reader(replace(self.config, format=fmt))
        return self.reader.read(batch, source)


def _load_builtins() -> None:
    from . import episodes, rows, sample_batches  # noqa: F401  (registration side effect)
