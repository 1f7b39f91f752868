"""The learner stream as a ``torch.utils.data.IterableDataset`` (imported with torch, on use).

:func:`~.torch_data.torch_dataset` gives it for recorded experience: each item is one train
batch (``sample.train_batch_size`` rows, the last may be shorter) as ``{column: tensor}``, cut
from the stream as :func:`~offline_prelearner.iter_learner_batches` cuts it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import ConfigError
from ..io.samples import to_torch
from .preflight import ConfigLike, job_config

__all__ = ["LearnerStreamDataset"]


class LearnerStreamDataset(IterableDataset[dict[str, torch.Tensor]]):  # type: ignore[misc, unused-ignore]
    """Train batches of the learner stream as tensors; each iteration runs the stream once.

    Args:
        path: Recorded experience: a file, a folder, a glob, a store URI, or a list of these.
        config: The stream's config (as :func:`~offline_prelearner.iter_learner_batches`).
        prelearner: The prelearner each task runs (default: the config's, else the base class).
        columns: The columns served (default: every numeric or bool column).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        config: ConfigLike = None,
        *,
        prelearner: Any = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        self.path = path if isinstance(path, str | os.PathLike) else [os.fspath(p) for p in path]
        self.config = job_config(config)  # refused here, before a DataLoader starts
        self.prelearner = prelearner
        self.columns = None if columns is None else list(columns)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """Runs the stream; yields one ``{column: tensor}`` per train batch.

        Raises:
            ConfigError: Iterated in a DataLoader worker process (the stream is parallel
                already; a worker would run the whole job again).
        """
        if get_worker_info() is not None:
            raise ConfigError(
                "the learner stream runs its own parallel job on Ray: give the DataLoader "
                "num_workers=0 (and batch_size=None: each item is a train batch already)"
            )
        from .stream.learner_stream import build_dataset, train_batches

        ds = build_dataset(self.path, self.config, prelearner=self.prelearner)
        blocks = ds.iter_batches(batch_format="numpy", batch_size=None)
        for rows in train_batches(blocks, self.config.sample.train_batch_size):
            yield to_torch(rows, self.columns)
