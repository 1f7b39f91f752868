"""Reader for Minari datasets (format ``minari``): step tables -> episodes, as Minari gives them.

Input is a step table (:func:`~.dataset.read_minari_file`: Minari's arrow layout plus
``episode_id``, the dataset's metadata in the schema). Each run of rows with one ``episode_id`` is
one episode, exactly as ``MinariDataset.iterate_episodes()`` returns it: the id, ``T + 1``
observations (the last one included), ``T`` actions and rewards (the padding row dropped), and the
flags of the last step -- ``terminated`` from ``terminations``, ``truncated`` from ``truncations``.
Where Minari has both set (a terminal on a time limit's last step), the episode is terminated (what
bootstrapping needs; our episodes, like RLlib's, are one or the other). An episode with neither flag
is a not-done fragment. JPEG-encoded image leaves are decoded with Pillow (imported on first use).
Infos are not read. A dataset our ``convert`` wrote gives back the source's episode ids,
``t_started`` and extras (attrs ``source_id`` / ``t_started`` and datasets ``extras/<name>`` of an
episode group, which Minari ignores; :mod:`.writer`); any other dataset, Minari's ids and no extras.

**Composite observations** (Dict / Tuple spaces, nested): struct columns (the hdf5 backend's
nested groups arrive as the same struct, :mod:`.dataset`) become the flat
``{leaf path: [T + 1, ...]}`` maps of :mod:`offline_prelearner.episodes.observations`, each leaf
shaped and typed by its space; the batch's columns hold them as one record array (a field per
leaf path, :func:`~offline_prelearner.episodes.observations.to_records`).

**The dataset's own spaces are checked**, leaf by leaf, as one vector pass per leaf over the
batch (:class:`~offline_prelearner.episodes.validate.SpaceCheck`: shape, dtype kind, bounds):
an episode with a value outside its space is refused (reason ``out_of_space``) with an error
naming the file, the leaf (``obs.desired_goal``, ``obs``, ``actions``), the episode and the row,
under ``on_invalid``.

Accounting: a **row is a step** (the padding row and the final observation are not rows), so
``rows_in`` is Minari's ``total_steps``. An episode with a flag set before its last step is
refused (reason ``inconsistent``), like any broken episode, under ``on_invalid``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ....config import ReadConfig
from ....episodes import observations as O
from ....episodes.episode_columns import EpisodeColumns
from ....episodes.ledger import EpisodeBatch
from ....episodes.validate import Miss, SpaceCheck
from ....errors import DataError, DecodeError, EpisodeValidationError, SchemaError, Where
from ...optional import import_pil_image
from .dataset import (
    EXTRAS_KEY,
    METADATA_KEY,
    ORIGIN_KEY,
    MinariMetadata,
    is_composite,
    leaf_items,
    leaf_shape_dtype,
    space_from_minari,
)

__all__ = ["MinariReader", "decode_jpeg_column"]


class MinariReader:
    """Turns Minari step tables into episodes (see the module docstring).

    Args:
        config: The read settings (``on_invalid`` for refused episodes...); None means the
            defaults with ``format="minari"``.
    """

    def __init__(self, config: ReadConfig | None = None) -> None:
        self.config = config if config is not None else ReadConfig(format="minari")
        self.metadata: MinariMetadata | None = None
        self._checks: dict[str, SpaceCheck] = {}  # by column ("obs.<leaf>", "actions")
        self._checks_of: MinariMetadata | None = None

    @property
    def observation_space(self) -> Any:
        """The dataset's observation space (after the first read)."""
        return None if self.metadata is None else space_from_minari(self.metadata.observation_space)

    @property
    def action_space(self) -> Any:
        """The dataset's action space (after the first read)."""
        return None if self.metadata is None else space_from_minari(self.metadata.action_space)

    def read(self, batch: Any, source: str | None = None) -> EpisodeBatch:
        """Episodes of one Minari step table as ``io.sources.read_table`` gives it; raises
        :class:`SchemaError` for a table without the Minari metadata.

        Args:
            batch: The step table of one data file from
                :func:`~.dataset.read_minari_file` (a record batch of it is accepted too),
                with the dataset's metadata in its schema; rows of one episode are contiguous.
            source: The file named in errors; None when unknown.

        Returns:
            The table's episodes; steps of refused episodes (``inconsistent``,
            ``out_of_space``, ``bad_image``...) are in the ledger.

        Raises:
            SchemaError: ``batch`` is not a table with Minari metadata.
            UnsupportedFormatError: The dataset's spaces are not supported.
            DataError: An episode is refused and ``config.on_invalid`` is ``"raise"``.
        """
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
        out = EpisodeBatch()
        if batch.num_rows == 0:
            return out
        eid = batch.column("episode_id").to_numpy()
        starts = np.flatnonzero(np.r_[True, eid[1:] != eid[:-1]])
        ends = np.r_[starts[1:], len(eid)]
        length = ends - starts - 1  # steps
        obs = _observations(batch, meta.observation_space, source)
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
        t_started = _restore_origin(batch, ids)
        out.ledger.rows_in += int(length.sum())
        for i in np.flatnonzero(bad).tolist():
            t = int(np.flatnonzero((term | trunc)[step_at[i] : step_at[i] + length[i]])[0])
            err = EpisodeValidationError(
                f"episode ends (terminations/truncations) at step {t} of {length[i]}",
                Where(file=source, episode_id=ids[i], timestep=t),
                reason="inconsistent",
            )
            out.reject(
                err,
                int(length[i]),
                rows=batch.slice(int(starts[i]), int(ends[i] - starts[i])),
                policy=self.config.on_invalid,
            )
        for i, miss in self._space_misses(meta, obs, actions, starts, step_at, ids, bad, source):
            bad[i] = True
            out.reject(
                miss,
                int(length[i]),
                rows=batch.slice(int(starts[i]), int(ends[i] - starts[i])),
                policy=self.config.on_invalid,
            )
        keep = ~bad
        if not keep.any():
            return out
        cols = EpisodeColumns(
            obs=O.to_records(obs) if isinstance(obs, dict) else obs,
            actions=actions,
            rewards=rewards,
            extras=_extras(batch, step),
            obs_at=starts.astype(np.int64),
            step_at=step_at,
            length=length.astype(np.int64),
            t_started=t_started,
            terminated=t_last.astype(bool),
            truncated=(u_last & ~t_last).astype(bool),
            ids=ids,
            agents=[None] * len(ids),
            modules=[None] * len(ids),
        )
        out.add(cols if keep.all() else cols.select(keep))
        return out

    def _space_misses(
        self,
        meta: MinariMetadata,
        obs: np.ndarray | dict[str, np.ndarray],
        actions: np.ndarray,
        starts: np.ndarray,
        step_at: np.ndarray,
        ids: list[Any],
        skip: np.ndarray,
        source: str | None,
    ) -> list[tuple[int, DataError]]:
        """Each episode (not in ``skip``) with a value outside the dataset's own space, with the
        first such leaf, step and row: one vector pass per leaf over the whole batch."""
        if self._checks_of is not meta:
            self._checks_of = meta
            space = space_from_minari(meta.observation_space)
            self._checks = {
                ("obs." + p if p else "obs"): c
                for p, c in (SpaceCheck(space).leaves or {"": SpaceCheck(space)}).items()
            }
            self._checks["actions"] = SpaceCheck(space_from_minari(meta.action_space))
        leaves = obs if isinstance(obs, dict) else {"": obs}
        found: dict[int, DataError] = {}
        for column, check in self._checks.items():
            if column == "actions":
                x, at = actions, step_at
            else:
                x, at = leaves[column[4:]], starts
            rows = check.rows_ok(x)
            if rows is None:
                continue
            if isinstance(rows, Miss):  # the whole column: every episode
                bad_rows = at.copy()
                detail = rows.detail
            else:
                bad_rows = np.flatnonzero(~rows)
            # the episode of each bad row, then its first bad row
            ep_of = np.searchsorted(at, bad_rows, side="right") - 1
            first = np.unique(ep_of, return_index=True)
            for e, r in zip(first[0].tolist(), bad_rows[first[1]].tolist(), strict=True):
                if skip[e] or e in found:
                    continue
                if not isinstance(rows, Miss):
                    detail = (check(x[r : r + 1]) or Miss("value", "")).detail
                t = r - int(at[e])
                row = int(starts[e]) + t  # in the step table (the file, for one file)
                found[e] = EpisodeValidationError(
                    f"{column} at step {t} not in the dataset's space {check.space}: {detail}",
                    Where(file=source, column=column, episode_id=ids[e], row=row, timestep=t),
                    reason="out_of_space",
                )
        return sorted(found.items())


def _flags(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    return np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), bool)


def _observations(
    table: pa.Table, space: dict[str, Any], source: str | None
) -> np.ndarray | dict[str, np.ndarray]:
    """The observations column: one array for a leaf space; ``{leaf path: array}`` for a Dict /
    Tuple (a struct column, nested; Tuple positions are the fields ``"0"``, ``"1"``...)."""
    if not is_composite(space):
        return _leaf(table, "observations", space, source)
    col = table.column("observations")
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    out: dict[str, np.ndarray] = {}
    for path, leaf_space in leaf_items(space):
        node = arr
        for key in path.split("."):
            if not pa.types.is_struct(node.type) or node.type.get_field_index(key) < 0:
                found = [f.name for f in node.type] if pa.types.is_struct(node.type) else node.type
                raise SchemaError(
                    f"observations have no leaf {path!r} that the observation space names "
                    f"(found fields {found})",
                    Where(file=source, column=f"obs.{path}"),
                )
            node = node.field(key)
        out[path] = _array(node, f"obs.{path}", leaf_space, source)
    return out


def _leaf(table: pa.Table, name: str, space: dict[str, Any], source: str | None) -> np.ndarray:
    """A Box/Discrete leaf column as ``[rows, *shape]`` of the space's dtype."""
    col = table.column(name)
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return _array(arr, name, space, source)


def _array(arr: pa.Array, name: str, space: dict[str, Any], source: str | None) -> np.ndarray:
    shape, dtype = leaf_shape_dtype(space)
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return decode_jpeg_column(arr, shape, source, name)
    try:  # zero_copy_only=False: bool leaves (MultiBinary) are bit-packed in Arrow
        if pa.types.is_fixed_size_list(arr.type):
            flat = arr.flatten()
            flat = flat.fill_null(0) if flat.null_count else flat
            values = flat.to_numpy(zero_copy_only=False)
            return np.asarray(values.reshape(len(arr), *shape), dtype)
        if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
            values = arr.flatten().to_numpy(zero_copy_only=False)
            return np.asarray(values.reshape(len(arr), *shape), dtype)
        arr = arr.fill_null(0) if arr.null_count else arr
        values = arr.to_numpy(zero_copy_only=False)
        if values.ndim != 1 + len(shape) and values.size == len(arr) * int(np.prod(shape)):
            values = values.reshape(len(arr), *shape)
        if values.shape[1:] != shape:
            raise ValueError(f"per-step shape {values.shape[1:]}")
        return np.asarray(values, dtype)
    except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(
            f"{name} ({arr.type}) does not hold {shape}-shaped {dtype} steps as its space "
            f"says: {e}",
            Where(file=source, column=name),
        ) from None


def decode_jpeg_column(
    arr: pa.Array, shape: tuple[int, ...], source: str | None, name: str = "observations"
) -> np.ndarray:
    """JPEG bytes per row (as Minari stores image leaves) as ``[rows, *shape]`` uint8.

    Args:
        arr: A binary Arrow array, one JPEG image per row (no nulls).
        shape: The step shape the space declares, e.g. ``(84, 84, 3)``; every decoded image
            must have exactly this shape.
        source: The file named in errors; None when unknown.
        name: The column or leaf named in errors and in the Pillow install hint.

    Returns:
        uint8 ``[len(arr), *shape]``.

    Raises:
        UnsupportedFormatError: Pillow is not installed.
        DecodeError: A row is not a decodable image or has another shape (reason
            ``bad_image``, naming the row).
    """
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


def _restore_origin(batch: pa.Table, ids: list[Any]) -> np.ndarray:
    """The episodes' ``t_started``; ``ids`` (Minari's) replaced in place by the source ids where
    the step table carries them (:data:`ORIGIN_KEY`; one lookup per episode, as Minari's episodes
    are groups)."""
    t_started = np.zeros(len(ids), np.int64)
    raw = (batch.schema.metadata or {}).get(ORIGIN_KEY)
    if raw is None:
        return t_started
    origin = json.loads(raw)
    for i, k in enumerate(ids):
        got = origin.get(str(k))
        if got is not None:
            if got[0] is not None:
                ids[i] = got[0]
            t_started[i] = int(got[1])
    return t_started


def _extras(batch: pa.Table, step: np.ndarray) -> dict[str, np.ndarray]:
    """The ``extras.<name>`` columns of a dataset our convert wrote, ``[steps, *shape]`` (the
    padding rows dropped by ``step``)."""
    raw = (batch.schema.metadata or {}).get(EXTRAS_KEY)
    if raw is None:
        return {}
    out: dict[str, np.ndarray] = {}
    for name, shape in json.loads(raw).items():
        col = batch.column(f"extras.{name}").combine_chunks()
        if pa.types.is_fixed_size_list(col.type):
            col = col.flatten()
        values = col.to_numpy(zero_copy_only=False)
        out[name] = values.reshape(len(step), *shape)[step]
    return out
