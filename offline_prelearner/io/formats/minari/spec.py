"""Format ``minari`` as the registry knows it (:mod:`..registry`): a data file beside its
dataset's ``metadata.json``, read whole as a step table."""

from __future__ import annotations

import pyarrow as pa

from ....config import DecodeLimits
from ..registry import FileProbe, InputFormat, ReaderFactory
from .dataset import is_minari_file, read_minari_file


def _reader() -> ReaderFactory:
    from .reader import MinariReader

    return MinariReader


def _detect_file(probe: FileProbe) -> bool:
    return is_minari_file(probe.path)


def _read_table(path: str, limits: DecodeLimits) -> pa.Table:
    return read_minari_file(path)


#: Minari datasets (hdf5 / arrow / parquet backends), one data file at a time.
MINARI = InputFormat(
    "minari", _reader, detect_file=_detect_file, whole_file=True, read_table=_read_table
)
