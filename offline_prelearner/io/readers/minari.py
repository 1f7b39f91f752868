"""Reader for Minari datasets (format ``minari``): step tables -> episodes, as Minari gives them.

Input is a step table (:func:`~offline_prelearner.io.datasets.minari.read_minari_file`: Minari's
arrow layout plus ``episode_id``, the dataset's metadata in the schema). Each run of rows with one
``episode_id`` is one episode, exactly as ``MinariDataset.iterate_episodes()`` returns it: the id,
``T + 1`` observations (the last one included), ``T`` actions and rewards (the padding row
dropped), and the flags of the last step -- ``terminated`` from ``terminations``, ``truncated``
from ``truncations``. Where Minari has both set (a terminal on a time limit's last step), the
episode is terminated (what bootstrapping needs; our episodes, like RLlib's, are one or the
other). An episode with neither flag is a not-done fragment. JPEG-encoded image leaves are decoded
with Pillow (imported on first use). Infos are not read.

Accounting: a **row is a step** (the padding row and the final observation are not rows), so
``rows_in`` is Minari's ``total_steps``. An episode with a flag set before its last step is
refused (reason ``inconsistent``), like any broken episode, under ``on_invalid``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ...config import ReadConfig
from ...episodes.episode_columns import EpisodeColumns
from ...episodes.ledger import EpisodeBatch
from ...errors import DecodeError, EpisodeValidationError, SchemaError, Where
from ..datasets.minari import METADATA_KEY, MinariMetadata, leaf_shape_dtype, space_from_minari
from ..datasets.optional import import_pil_image

__all__ = ["MinariReader", "decode_jpeg_column"]


class MinariReader:
    """Turns Minari step tables into episodes (see the module docstring)."""

    def __init__(self, config: ReadConfig | None = None) -> None:
        self.config = config if config is not None else ReadConfig(format="minari")
        self.metadata: MinariMetadata | None = None

    @property
    def observation_space(self) -> Any:
        """The dataset's observation space (after the first read)."""
        return None if self.metadata is None else space_from_minari(self.metadata.observation_space)

    @property
    def action_space(self) -> Any:
        """The dataset's action space (after the first read)."""
        return None if self.metadata is None else space_from_minari(self.metadata.action_space)

    def read(self, batch: Any, source: str | None = None) -> EpisodeBatch:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        if not isinstance(batch, pa.Table) or METADATA_KEY not in (batch.schema.metadata or {}):
            found = list(batch) if isinstance(batch, Mapping) else type(batch).__name__
            raise SchemaError(
                "the minari reader reads the step tables of io.sources.read_table (a Minari data "
                f"file with its metadata); found {found}",
                Where(file=source),
            )
        meta = MinariMetadata.from_json(batch.schema.metadata[METADATA_KEY])
        meta.check_supported()
        self.metadata = meta
        out = EpisodeBatch(on_invalid=self.config.on_invalid)
        if batch.num_rows == 0:
            return out
        eid = batch.column("episode_id").to_numpy()
        starts = np.flatnonzero(np.r_[True, eid[1:] != eid[:-1]])
        ends = np.r_[starts[1:], len(eid)]
        length = ends - starts - 1  # steps
        obs = _leaf(batch, "observations", meta.observation_space, source)
        act = _leaf(batch, "actions", meta.action_space, source)
        step = np.ones(len(eid), bool)
        step[ends - 1] = False  # the padding row of each episode
        actions = act[step]
        rewards = batch.column("rewards").to_numpy()[step]
        term = _flags(batch, "terminations")[step]
        trunc = _flags(batch, "truncations")[step]
        step_at = np.zeros(len(starts), np.int64)
        np.cumsum(length[:-1], out=step_at[1:])
        last = step_at + length - 1
        has = length > 0
        t_last = np.where(has, term[np.maximum(last, 0)], False)
        u_last = np.where(has, trunc[np.maximum(last, 0)], False)
        flagged = (term | trunc).astype(np.int64)
        n_flags = np.add.reduceat(flagged, step_at) if len(flagged) else np.zeros(len(starts))
        n_flags = np.where(has, n_flags, 0)
        bad = n_flags > (t_last | u_last)
        ids = eid[starts].tolist()
        out.ledger.rows_in += int(length.sum())
        keep = ~bad
        for i in np.flatnonzero(bad).tolist():
            t = int(np.flatnonzero((term | trunc)[step_at[i] : step_at[i] + length[i]])[0])
            err = EpisodeValidationError(
                f"episode ends (terminations/truncations) at step {t} of {length[i]}",
                Where(file=source, episode_id=ids[i], timestep=t),
                reason="inconsistent",
            )
            out.reject(
                err, int(length[i]), rows=batch.slice(int(starts[i]), int(ends[i] - starts[i]))
            )
        if keep.any():
            cols = EpisodeColumns(
                obs=obs,
                actions=actions,
                rewards=rewards,
                extras={},
                obs_at=starts.astype(np.int64),
                step_at=step_at,
                length=length.astype(np.int64),
                t_started=np.zeros(len(starts), np.int64),
                terminated=t_last.astype(bool),
                truncated=(u_last & ~t_last).astype(bool),
                ids=ids,
                agents=[None] * len(ids),
                modules=[None] * len(ids),
            )
            out.add_columns(cols if keep.all() else cols.select(keep))
        return out


def _flags(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    return col.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def _leaf(table: pa.Table, name: str, space: dict[str, Any], source: str | None) -> np.ndarray:
    """A Box/Discrete leaf column as ``[rows, *shape]`` of the space's dtype."""
    shape, dtype = leaf_shape_dtype(space)
    col = table.column(name)
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return decode_jpeg_column(arr, shape, source, name)
    if pa.types.is_fixed_size_list(arr.type):
        flat = arr.flatten()
        values = flat.fill_null(0).to_numpy() if flat.null_count else flat.to_numpy()
        return values.reshape(len(arr), *shape).astype(dtype, copy=False)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        values = arr.flatten().to_numpy()
        return values.reshape(len(arr), *shape).astype(dtype, copy=False)
    values = arr.fill_null(0).to_numpy() if arr.null_count else arr.to_numpy()
    if values.ndim != 1 + len(shape) and values.size == len(arr) * int(np.prod(shape)):
        values = values.reshape(len(arr), *shape)
    return values.astype(dtype, copy=False)


def decode_jpeg_column(
    arr: pa.Array, shape: tuple[int, ...], source: str | None, name: str = "observations"
) -> np.ndarray:
    """JPEG bytes per row (as Minari stores image leaves) as ``[rows, *shape]`` uint8."""
    image = import_pil_image(f"decoding the JPEG-encoded {name} of a Minari dataset")
    out = np.empty((len(arr), *shape), np.uint8)
    for i, blob in enumerate(arr.to_pylist()):
        try:
            frame = np.asarray(image.open(io.BytesIO(blob)))
        except Exception as e:  # Pillow raises many kinds on bad bytes
            raise DecodeError(
                f"not a JPEG image: {e}", Where(file=source, column=name, row=i), reason="bad_image"
            ) from None
        if frame.shape != shape:
            raise DecodeError(
                f"JPEG image has shape {frame.shape}, the space says {shape}",
                Where(file=source, column=name, row=i),
                reason="bad_image",
            )
        out[i] = frame
    return out
