"""Format ``d4rl`` as the registry knows it (:mod:`..registry`): an ``.hdf5``/``.h5`` file, read
whole as a step table."""

from __future__ import annotations

import pyarrow as pa

from ....config import DecodeLimits
from ..registry import FileProbe, InputFormat, ReaderFactory
from .dataset import is_d4rl_file, read_d4rl_file


def _reader() -> ReaderFactory:
    from .reader import D4RLReader

    return D4RLReader


def _detect_file(probe: FileProbe) -> bool:
    return is_d4rl_file(probe.path)


def _read_table(path: str, limits: DecodeLimits) -> pa.Table:
    return read_d4rl_file(path)


#: D4RL's flat HDF5 files.
D4RL = InputFormat(
    "d4rl", _reader, detect_file=_detect_file, whole_file=True, read_table=_read_table
)
