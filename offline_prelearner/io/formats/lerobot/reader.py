"""Reader for LeRobot datasets (format ``lerobot``): step tables -> episodes.

The step table of a data file (:func:`~.dataset.read_lerobot_file`) is rows with observations
only, read by the rows reader with :data:`~.dataset.STEP_SCHEMA`: episodes by
``episode_index``, steps in ``frame_index`` order, each step's next observation the next
frame's (cameras included), the last frame by D4RL's rule (terminated where ``next.done`` says
so: ``L`` steps; else truncated: ``L - 1`` steps and the last frame the final observation, its
action counted ``rows_rejected["next_obs_unknown"]``). :attr:`LeRobotReader.about` says what
the dataset's metadata declares (cameras, fps, codecs, tasks), for ``inspect``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ....config import ReadConfig
from ....episodes.ledger import EpisodeBatch
from ..base import Batch
from ..rows.reader import RowsReader
from .dataset import STEP_SCHEMA, _root_of_file, load_meta

__all__ = ["LeRobotReader"]


class LeRobotReader(RowsReader):
    """Turns LeRobot step tables into episodes (see the module docstring).

    Args:
        config: The read settings (``on_invalid``, ``limits``...); its ``schema`` is replaced by
            :data:`~.dataset.STEP_SCHEMA`. None means the defaults with ``format="lerobot"``.
    """

    def __init__(self, config: ReadConfig | None = None) -> None:
        config = config if config is not None else ReadConfig(format="lerobot")
        super().__init__(dataclasses.replace(config, schema=STEP_SCHEMA))
        self._root: str | None = None

    def read(self, batch: Batch, source: str | None = None) -> EpisodeBatch:
        """Episodes of one step table (see :meth:`RowsReader.read`); ``source``, the data file,
        tells :attr:`about` which dataset it is.

        Args:
            batch: The step table of one data file.
            source: The data file; None when unknown.

        Returns:
            The table's episodes, every frame accounted for in the ledger.
        """
        if source is not None and self._root is None:
            root = _root_of_file(source)
            self._root = None if root is None else str(root)
        return super().read(batch, source)

    @property
    def about(self) -> dict[str, Any] | None:
        """What the dataset's metadata declares (:meth:`~.dataset.LeRobotMeta.describe`), once
        a data file has been read; None before."""
        return None if self._root is None else load_meta(self._root).describe()
