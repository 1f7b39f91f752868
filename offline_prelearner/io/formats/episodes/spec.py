"""Format ``episodes`` as the registry knows it (:mod:`..registry`): a Parquet file whose binary
``item`` column holds msgpack episode records; a batch with an ``item`` column and no ``obs``."""

from __future__ import annotations

import pyarrow as pa

from ..registry import FileProbe, InputFormat, ReaderFactory


def _reader() -> ReaderFactory:
    from .reader import EpisodesReader

    return EpisodesReader


def _detect_file(probe: FileProbe) -> bool:
    schema = probe.schema
    if schema is None or "item" not in schema.names:
        return False
    item_type = schema.field("item").type
    return bool(pa.types.is_binary(item_type) or pa.types.is_large_binary(item_type))


def _detect_batch(names: frozenset[str]) -> bool:
    return "item" in names and "obs" not in names


#: msgpack episode records in an ``item`` column.
EPISODES = InputFormat("episodes", _reader, detect_file=_detect_file, detect_batch=_detect_batch)
