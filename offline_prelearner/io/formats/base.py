"""What a reader is: an object that turns one batch of input records into episodes.

A reader is any object with ``read(batch, source=None) -> EpisodeBatch`` (:class:`Reader`), built
from a :class:`~offline_prelearner.config.ReadConfig`. ``batch`` is an Arrow table or a dict of
numpy columns (both Ray Data batch formats, :data:`Batch`); ``source`` names the file, for error
messages. Every input row ends up in the returned batch's ledger: kept, rejected or duplicate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeAlias, runtime_checkable

import numpy as np
import pyarrow as pa

from ...config import ReadConfig
from ...episodes.ledger import EpisodeBatch

__all__ = ["Batch", "Reader"]

Batch: TypeAlias = pa.Table | pa.RecordBatch | Mapping[str, np.ndarray]


@runtime_checkable
class Reader(Protocol):
    """Turns one batch of input records into episodes, accounting for every row."""

    config: ReadConfig

    def read(self, batch: Batch, source: str | None = None) -> EpisodeBatch:
        """Episodes from one input ``batch`` (a table or dict of columns); ``source`` names the file
        in errors.

        Args:
            batch: One batch of input records: an Arrow table / record batch, or a dict of numpy
                columns (the two Ray Data batch formats).
            source: The file the batch came from, named in error messages and in the ledger;
                None when unknown.

        Returns:
            The batch's episodes, with a ledger that accounts for every input row (kept,
            rejected or duplicate).

        Raises:
            DataError: A row or episode is invalid and ``config.on_invalid`` is ``"raise"``.
        """
