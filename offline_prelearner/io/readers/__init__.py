"""Readers: one decoder per input format, by name. Each turns a batch into episodes.

A reader is any object with ``read(batch, source=None) -> EpisodeBatch`` (see
:class:`~.base.Reader`), built from a :class:`~offline_prelearner.config.ReadConfig`. ``batch``
is an Arrow table or a dict of numpy columns (both Ray Data batch formats); ``source`` names the
file, for error messages.

Built-in formats: ``rows`` (:mod:`.rows`, one transition per row), ``episodes``
(:mod:`.episodes`, msgpack episode records in an ``item`` column), ``sample_batches``
(:mod:`.sample_batches`, RLlib's old-stack SampleBatch / MultiAgentBatch records), ``minari``
(:mod:`.minari`, Minari datasets, any backend) and ``d4rl`` (:mod:`.d4rl`, D4RL HDF5 files), the
last two over the tables :mod:`..datasets` reads. The registry
(:mod:`.registry`) loads each on first use; register more with :func:`register_reader`.
"""

from __future__ import annotations

from .base import Batch, Reader
from .registry import (
    AutoReader,
    ReaderFactory,
    available_formats,
    detect_batch_format,
    make_reader,
    register_reader,
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
