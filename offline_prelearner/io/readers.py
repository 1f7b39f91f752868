"""Readers by format name, each loaded on first use. Each turns a batch into episodes.

A reader is any object with ``read(batch, source=None) -> EpisodeBatch`` (see
:class:`~.formats.base.Reader`), built from a :class:`~offline_prelearner.config.ReadConfig`.
``batch`` is an Arrow table or a dict of numpy columns (both Ray Data batch formats); ``source``
names the file, for error messages.

Built-in formats, one folder each under :mod:`.formats`: ``rows`` (one transition per row),
``episodes`` (msgpack episode records in an ``item`` column), ``sample_batches`` (RLlib's
old-stack SampleBatch / MultiAgentBatch records), ``minari`` (Minari datasets, any backend) and
``d4rl`` (D4RL HDF5 files). Register more with :func:`register_reader`.

The registry maps a format name to a small function that imports its reader and returns the
factory (Minari's storage registry, ``"hdf5": get_hdf5_storage``), so this module never imports
an implementation: a reader's module, and whatever it needs, loads only when that format is read,
and nothing a reader imports can close a cycle back through the registry.
:func:`available_formats` lists the names without loading anything.

``format="auto"`` gives an :class:`AutoReader`, which picks the reader from the first batch's
columns (:func:`detect_batch_format`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeAlias

import pyarrow as pa

from ..config import ReadConfig
from ..episodes.ledger import EpisodeBatch
from ..errors import UnsupportedFormatError
from .formats.base import Batch, Reader

__all__ = [
    "AutoReader",
    "Batch",
    "Reader",
    "ReaderFactory",
    "available_formats",
    "detect_batch_format",
    "make_reader",
    "register_reader",
]

#: What a format name stands for: ``factory(config) -> Reader`` (a reader class, usually).
ReaderFactory: TypeAlias = Callable[[ReadConfig], Reader]


def _rows() -> ReaderFactory:
    from .formats.rows.reader import RowsReader

    return RowsReader


def _episodes() -> ReaderFactory:
    from .formats.episodes.reader import EpisodesReader

    return EpisodesReader


def _sample_batches() -> ReaderFactory:
    from .formats.sample_batches.reader import SampleBatchesReader

    return SampleBatchesReader


def _minari() -> ReaderFactory:
    from .formats.minari.reader import MinariReader

    return MinariReader


def _d4rl() -> ReaderFactory:
    from .formats.d4rl.reader import D4RLReader

    return D4RLReader


_REGISTRY: dict[str, Callable[[], ReaderFactory]] = {
    "rows": _rows,  # one transition per row
    "episodes": _episodes,  # msgpack episode records in an ``item`` column
    "sample_batches": _sample_batches,  # RLlib's old-stack SampleBatch / MultiAgentBatch records
    "minari": _minari,  # Minari datasets (hdf5 / arrow / parquet), as io.sources reads them
    "d4rl": _d4rl,  # D4RL's flat HDF5 files
}


def register_reader(name: str) -> Callable[[Any], Any]:
    """Class decorator: ``@register_reader("myformat")`` makes ``format="myformat"`` build the
    class (any ``factory(config) -> Reader``). A name registered again is replaced.

    Args:
        name: The ``format`` name that selects the class.

    Returns:
        The decorator, which registers the class and returns it unchanged.
    """

    def deco(factory: Any) -> Any:
        _REGISTRY[name] = lambda: factory
        return factory

    return deco


def available_formats() -> list[str]:
    """Registered format names (nothing is imported to list them)."""
    return sorted(_REGISTRY)


def make_reader(config: ReadConfig) -> Reader:
    """The reader registered for ``config.format`` (``"auto"``: an :class:`AutoReader`).

    Args:
        config: The read section; ``config.format`` names the reader.

    Returns:
        A fresh reader built with ``config``.

    Raises:
        UnsupportedFormatError: No reader is registered under ``config.format``.
    """
    if config.format == "auto":
        return AutoReader(config)
    try:
        load = _REGISTRY[config.format]
    except KeyError:
        raise UnsupportedFormatError(
            f"no reader for format {config.format!r}; known formats: {sorted(_REGISTRY)}"
        ) from None
    return load()(config)


def detect_batch_format(column_names: list[str]) -> str:
    """``episodes`` (an ``item`` column), ``sample_batches`` (a ``type`` column of old-stack
    records) or ``rows``, from a batch's column names.

    Args:
        column_names: The top-level column names of one input batch, in any order.

    Returns:
        The format name to read the batch with: ``"episodes"``, ``"sample_batches"`` or
        ``"rows"`` (the fallback for anything else).
    """
    names = set(column_names)
    if names == {"item"} or ("item" in names and "obs" not in names):
        return "episodes"
    if "type" in names and ("count" in names or "policy_batches" in names or "obs" in names):
        return "sample_batches"
    return "rows"


class AutoReader:
    """Picks the reader from the first batch's columns, then keeps it (``format="auto"``).

    Args:
        config: The read settings; every one but ``format`` is passed on to the reader picked
            (built with ``format`` replaced by the detected one).
    """

    def __init__(self, config: ReadConfig) -> None:
        self.config = config
        self.reader: Reader | None = None

    def read(self, batch: Batch, source: str | None = None) -> EpisodeBatch:
        """Episodes of ``batch``, read by the reader of the format detected from the first batch's
        column names.

        Args:
            batch: One batch of input records (an Arrow table / record batch or a dict of numpy
                columns); the first one seen decides the format for all later ones.
            source: The file the batch came from, for error messages; None when unknown.

        Returns:
            The batch's episodes, as the picked reader returns them.

        Raises:
            DataError: The picked reader refused a row and ``config.on_invalid`` is ``"raise"``.
        """
        if self.reader is None:
            if isinstance(batch, pa.Table | pa.RecordBatch):
                names = list(batch.column_names)
            else:
                names = list(batch.keys())
            fmt = detect_batch_format(names)
            self.reader = make_reader(replace(self.config, format=fmt))
        return self.reader.read(batch, source)
