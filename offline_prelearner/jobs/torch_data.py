"""The output as a torch dataset: what ``torch.utils.data.DataLoader`` takes.

Two kinds, one entry (:func:`torch_dataset`):

* **A samples folder** (what ``process`` wrote, or any folder of Parquet samples): map-style,
  :class:`SampleDataset`. The columns are read once into numpy (:func:`~..io.samples.read_samples`)
  and indexed per request: an int gives one row's tensors (the DataLoader's default collate stacks
  them), a list, array or slice of indices gives a whole batch in one numpy gather (hand the
  DataLoader a ``BatchSampler`` as ``sampler`` and ``batch_size=None``). Workers (``num_workers``)
  each index their own copy of the arrays (forked: shared pages).
* **The learner stream** (recorded experience, processed on the fly by Ray): iterable,
  :class:`~.torch_stream.LearnerStreamDataset`, train batches of ``sample.train_batch_size`` rows
  as :func:`~offline_prelearner.iter_learner_batches` makes them. The stream is already parallel
  (Ray's tasks and actors): the DataLoader consumes it in its own process (``num_workers=0``,
  ``batch_size=None``); a worker process would start a second job, so it is refused.

Tensors come from :func:`~..io.samples.to_torch`: numbers and bools only (ids and strings, which
torch cannot hold, are left out unless named, then refused).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..errors import ConfigError
from ..io.manifest import SAMPLES
from ..io.samples import read_samples, to_torch
from .outputs import committed_output
from .preflight import ConfigLike

if TYPE_CHECKING:
    import torch

__all__ = ["SampleDataset", "torch_dataset"]

Kind = Literal["auto", "samples", "stream"]


class SampleDataset:
    """A map-style torch dataset over the rows of a samples folder (see the module docstring).

    Args:
        path: The folder (or file, or list), local or a store's URI, as
            :func:`~..io.samples.read_samples` takes it.
        columns: The columns to serve (default: every numeric or bool column).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        columns: Sequence[str] | None = None,
    ) -> None:
        arrays = read_samples(path, columns)
        if columns is None:
            columns = [n for n, a in arrays.items() if a.dtype.kind in "biuf"]
        self.columns = list(columns)
        self.arrays = {n: arrays[n] for n in self.columns}
        self.rows = len(next(iter(self.arrays.values()))) if self.arrays else 0

    def __len__(self) -> int:
        """The number of rows."""
        return self.rows

    def __getitem__(
        self, index: int | slice | Sequence[int] | np.ndarray
    ) -> dict[str, torch.Tensor]:
        """One row's tensors (an int), or a batch's (a slice, or a sequence or array of ints).

        Args:
            index: A row number (negative counts from the end), a slice, or row numbers.

        Returns:
            ``{column: tensor}``: per-row shapes for an int, ``[n, *shape]`` for a batch.

        Raises:
            IndexError: A row number outside ``[-len, len)``.
        """
        if isinstance(index, int | np.integer):
            if not -self.rows <= index < self.rows:
                raise IndexError(f"row {index} of a dataset of {self.rows} rows")
            picked = {n: np.asarray(a[index]) for n, a in self.arrays.items()}
        elif isinstance(index, slice):
            picked = {n: a[index] for n, a in self.arrays.items()}
        else:
            rows = np.asarray(index, dtype=np.int64)
            picked = {n: a[rows] for n, a in self.arrays.items()}  # one gather per column
        return to_torch(picked, self.columns)


def torch_dataset(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    columns: Sequence[str] | None = None,
    kind: Kind = "auto",
    config: ConfigLike = None,
    prelearner: Any = None,
) -> Any:
    """A torch dataset of the output: map-style over a samples folder, iterable over the learner
    stream (see the module docstring and docs/api.md, "Torch").

    Args:
        path: A samples folder (what ``process`` wrote) for ``kind="samples"``; recorded
            experience (any input the jobs read) for ``kind="stream"``. Local paths or store URIs.
        columns: The columns served as tensors (default: every numeric or bool column).
        kind: ``"samples"`` (map-style), ``"stream"`` (iterable) or ``"auto"``: ``"samples"``
            where ``path`` is a ``process`` output, else ``"stream"``.
        config: The learner stream's config (``kind="stream"`` only): a
            :class:`~offline_prelearner.PreLearnerConfig`, a dict of its fields, or a file.
        prelearner: The learner stream's prelearner (``kind="stream"`` only).

    Returns:
        A :class:`SampleDataset` or a :class:`~.torch_stream.LearnerStreamDataset` (a
        ``torch.utils.data.IterableDataset``).

    Raises:
        ConfigError: ``config`` or ``prelearner`` given for samples, or an unknown ``kind``.
        ImportError: torch is not installed (with the command that installs it).
    """
    if kind == "auto":
        manifest = committed_output(path) if isinstance(path, str | os.PathLike) else None
        kind = "samples" if manifest is not None and manifest.content == SAMPLES else "stream"
    if kind == "samples":
        if config is not None or prelearner is not None:
            raise ConfigError(
                "torch_dataset: config and prelearner shape the learner stream; samples are "
                "served as they were written (give kind='stream' and the recorded data instead)"
            )
        _torch()
        return SampleDataset(path, columns)
    if kind == "stream":
        _torch()
        from .torch_stream import LearnerStreamDataset

        return LearnerStreamDataset(path, config, prelearner=prelearner, columns=columns)
    raise ConfigError(f"torch_dataset: kind must be 'auto', 'samples' or 'stream', found {kind!r}")


def _torch() -> None:
    """Imports torch, or says how to install it."""
    try:
        import torch  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "torch_dataset needs PyTorch: pip install torch (see https://pytorch.org for the "
            "build that fits your machine)"
        ) from None
