"""Format ``lerobot`` as the registry knows it (:mod:`..registry`): a data file of a dataset whose
root holds ``meta/info.json``, read as a step table with its cameras decoded; a batch job reads
it in pieces of whole episodes (:func:`~.dataset.split_lerobot_file`), a unit each."""

from __future__ import annotations

import pyarrow as pa

from ....config import DecodeLimits
from ..registry import FileProbe, InputFormat, ReaderFactory
from .dataset import is_lerobot_file, read_lerobot_episodes, read_lerobot_file, split_lerobot_file


def _reader() -> ReaderFactory:
    from .reader import LeRobotReader

    return LeRobotReader


def _detect_file(probe: FileProbe) -> bool:
    return is_lerobot_file(probe.path)


def _read_table(path: str, limits: DecodeLimits) -> pa.Table:
    return read_lerobot_file(path, limits)


#: LeRobot datasets (v3.0, v2.1), one data file at a time, in pieces of whole episodes.
LEROBOT = InputFormat(
    "lerobot",
    _reader,
    detect_file=_detect_file,
    whole_file=True,
    read_table=_read_table,
    split_file=split_lerobot_file,
    read_episodes=read_lerobot_episodes,
)
