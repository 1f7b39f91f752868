"""Format ``sample_batches`` as the registry knows it (:mod:`..registry`): JSON lines whose
records are typed ``SampleBatch`` / ``MultiAgentBatch``, or a Parquet file with a ``type`` column
beside ``policy_batches`` or ``count``."""

from __future__ import annotations

from ..registry import FileProbe, InputFormat, ReaderFactory

_TYPES = ("SampleBatch", "MultiAgentBatch")


def _reader() -> ReaderFactory:
    from .reader import SampleBatchesReader

    return SampleBatchesReader


def _detect_file(probe: FileProbe) -> bool:
    if probe.is_json_lines:
        rec = probe.first_record
        if not isinstance(rec, dict):
            return False
        if set(rec) == {"value"} and not isinstance(rec["value"], dict):
            return True  # a broken wrapped record: this format's reader refuses its line
        rec = rec.get("value", rec)  # some old writers wrapped records as {"value": {...}}
        return isinstance(rec, dict) and rec.get("type") in _TYPES
    schema = probe.schema
    if schema is None:
        return False
    names = set(schema.names)
    return "type" in names and ("policy_batches" in names or "count" in names)


def _detect_batch(names: frozenset[str]) -> bool:
    return "type" in names and ("count" in names or "policy_batches" in names or "obs" in names)


#: RLlib's old-stack SampleBatch / MultiAgentBatch records.
SAMPLE_BATCHES = InputFormat(
    "sample_batches", _reader, detect_file=_detect_file, detect_batch=_detect_batch
)
