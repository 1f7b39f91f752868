"""Readers by format name, each loaded on first use. Each turns a batch into episodes.

A reader is any object with ``read(batch, source=None) -> EpisodeBatch`` (see
:class:`~.formats.base.Reader`), built from a :class:`~offline_prelearner.config.ReadConfig`.
``batch`` is an Arrow table or a dict of numpy columns (both Ray Data batch formats); ``source``
names the file, for error messages.

Built-in formats, one folder each under :mod:`.formats`: ``rows`` (one transition per row),
``episodes`` (msgpack episode records in an ``item`` column), ``sample_batches`` (RLlib's
old-stack SampleBatch / MultiAgentBatch records), ``minari`` (Minari datasets, any backend) and
``d4rl`` (D4RL HDF5 files). Register more with :func:`~.formats.registry.register_format` (a
format that is detected too) or :func:`register_reader` (a reader by name only).

Each registered :class:`~.formats.registry.InputFormat` holds a small function that imports its
reader and returns the factory (Minari's storage registry, ``"hdf5": get_hdf5_storage``), so
this module never imports an implementation: a reader's module, and whatever it needs, loads
only when that format is read, and nothing a reader imports can close a cycle back through the
registry. :func:`available_formats` lists the names without loading anything.

``format="auto"`` gives an :class:`AutoReader`, which picks the reader from the first batch's
columns (:func:`detect_batch_format`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa

from ..config import ReadConfig
from ..episodes.ledger import EpisodeBatch
from ..errors import UnsupportedFormatError
from .formats.base import Batch, Reader
from .formats.registry import (
    InputFormat,
    ReaderFactory,
    input_format,
    input_formats,
    register_format,
)

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


def register_reader(name: str) -> Callable[[Any], Any]:
    """Class decorator: ``@register_reader("myformat")`` makes ``format="myformat"`` build the
    class (any ``factory(config) -> Reader``): an :class:`~.formats.registry.InputFormat` with no
    detection (:func:`~.formats.registry.register_format` declares one that is detected). A name
    registered again is replaced.

    Args:
        name: The ``format`` name that selects the class.

    Returns:
        The decorator, which registers the class and returns it unchanged.
    """

    def deco(factory: Any) -> Any:
        register_format(InputFormat(name, lambda: factory))
        return factory

    return deco


def available_formats() -> list[str]:
    """Registered format names, sorted (nothing is imported to list them).

    Returns:
        The names of the registered formats.
    """
    return sorted(spec.name for spec in input_formats())


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
    spec = input_format(config.format)
    if spec is None:
        raise UnsupportedFormatError(
            f"no reader for format {config.format!r}; known formats: {available_formats()}"
        )
    return spec.reader()(config)


def detect_batch_format(column_names: list[str]) -> str:
    """The first registered format whose ``detect_batch`` claims a batch's column names:
    ``episodes`` (an ``item`` column without ``obs``), ``sample_batches`` (a ``type`` column of
    old-stack records), a user's format, or ``rows`` (the fallback).

    Args:
        column_names: The top-level column names of one input batch, in any order.

    Returns:
        The format name to read the batch with.

    Raises:
        UnsupportedFormatError: No registered format claims the columns (none does with
            ``rows`` registered).
    """
    names = frozenset(column_names)
    for spec in input_formats():
        if spec.detect_batch is not None and spec.detect_batch(names):
            return spec.name
    raise UnsupportedFormatError(f"no registered format reads a batch of columns {sorted(names)}")


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
