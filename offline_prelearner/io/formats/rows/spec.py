"""Format ``rows`` as the registry knows it (:mod:`..registry`): the fallback, any Parquet file or
JSON lines of objects that no other format claims; any batch no other format claims."""

from __future__ import annotations

from ..registry import FileProbe, InputFormat, ReaderFactory


def _reader() -> ReaderFactory:
    from .reader import RowsReader

    return RowsReader


def _detect_file(probe: FileProbe) -> bool:
    if probe.is_json_lines:
        rec = probe.first_record
        return isinstance(rec, dict) and isinstance(rec.get("value", rec), dict)
    return probe.footer is not None


def _detect_batch(names: frozenset[str]) -> bool:
    return True


#: One transition per row (RLlib's recorder layout).
ROWS = InputFormat(
    "rows", _reader, detect_file=_detect_file, detect_batch=_detect_batch, fallback=True
)
