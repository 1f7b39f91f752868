"""Reader for msgpack episode records (RLlib's ``output_write_episodes=True`` format).

Each cell of the binary column ``item`` holds one episode: msgpack (with msgpack-numpy arrays) of
``SingleAgentEpisode.get_state()``. One record is one input row in the ledger.

Decoding runs on two paths that give the same episodes:

* the fast path (:mod:`.decoder`) learns a dataset's record layouts by walking one record
  of each (:mod:`.scanner`), matches them against the whole batch with numpy, and decodes
  every per-step list of the batch at once, after checking byte for byte that each element has
  the layout of its template and that lengths, flags and ``t`` are consistent;
* the general path, :func:`decode_episode` = :func:`~offline_prelearner.io.codec.unpackb` +
  :meth:`Episode.from_state`, takes every record the fast path declines (other layouts, corrupt or
  refused data) and is the one that raises errors.

A record that cannot be decoded raises :class:`~offline_prelearner.errors.DecodeError` (or
:class:`~offline_prelearner.errors.EpisodeValidationError` when it decodes to an inconsistent
episode) naming the file, column ``item``, the row and, when it could be read, the episode id; under
``on_invalid="skip"``/``"quarantine"`` it is counted instead, with the row kept for quarantine.
MultiAgentEpisode states are refused (reason ``unsupported_multi_agent``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from ....config import DEFAULT_LIMITS, DecodeLimits, ReadConfig
from ....episodes import observations as O
from ....episodes.episode import Episode
from ....episodes.episode_columns import EpisodeColumns, layout_of
from ....episodes.ledger import EpisodeBatch
from ....errors import DataError, DecodeError, EpisodeValidationError, SchemaError, Where
from ....spaces import space_from_dict
from ...codec import packb, unpackb
from .decoder import decode_batch
from .layout import Fallback
from .scanner import EpisodeScanner

__all__ = ["ITEM", "EpisodesReader", "decode_episode", "episodes_to_table"]

_Batch: TypeAlias = "pa.Table | pa.RecordBatch | Mapping[str, Any]"

#: The column RLlib writes episode records to.
ITEM = "item"


def decode_episode(item: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Episode:
    """Decodes one record with the general path: safe msgpack decoding, then ``from_state``.

    Args:
        item: One msgpack episode record (an ``item`` cell): RLlib's
            ``SingleAgentEpisode.get_state()`` dict.
        limits: Size bounds for the message and each array in it.

    Returns:
        The episode the record holds.

    Raises:
        DecodeError: The record is above a limit, is not valid msgpack, or its state does not
            describe an episode.
    """
    return Episode.from_state(unpackb(bytes(item), limits))


def episodes_to_table(
    episodes: Iterable[Episode], observation_space: Any = None, action_space: Any = None
) -> pa.Table:
    """Episodes as a table with one binary ``item`` column of msgpack episode states.

    RLlib's ``SingleAgentEpisode.from_state(msgpack.unpackb(item, object_hook=m.decode))`` reads
    the records (their buffers are written finalized, as numpy arrays).

    Args:
        episodes: The episodes to write, one record each, in order.
        observation_space: A gymnasium space stored in every record's state (RLlib's
            ``_observation_space``); None stores none.
        action_space: The same for ``_action_space``.

    Returns:
        A table with one row per episode and one binary ``item`` column.
    """
    items = [packb(ep.get_state(observation_space, action_space)) for ep in episodes]
    return pa.table({ITEM: pa.array(items, type=pa.binary())})


class EpisodesReader:
    """Turns batches with an ``item`` column of msgpack episode records into episodes.

    The reader keeps what it learned about a dataset's record layouts between batches, so use one
    reader per dataset (per worker). :attr:`observation_space` / :attr:`action_space` are the spaces
    of the last record read, decoded on first access.

    Args:
        config: The read settings (``on_invalid``, ``limits``...); None means the defaults with
            ``format="episodes"``.
    """

    def __init__(self, config: ReadConfig | None = None) -> None:
        self.config = config if config is not None else ReadConfig(format="episodes")
        self._scanner = EpisodeScanner(self.config.limits)
        self._space_bytes: dict[str, bytes] = {}
        self._space_cache: dict[bytes, Any] = {}

    # ---------------------------------------------------------------- spaces
    def _space(self, key: str) -> Any:
        raw = self._space_bytes.get(key)
        if raw is None:
            return None
        if raw not in self._space_cache:
            if len(self._space_cache) > 64:
                self._space_cache.clear()
            self._space_cache[raw] = space_from_dict(unpackb(raw, self.config.limits))
        return self._space_cache[raw]

    def _declared(self) -> tuple[Any, Any]:
        """The spaces the records declare, for the validator. A space this package cannot
        rebuild (a custom space class) declares nothing checkable: it is left out, as before."""
        out = []
        for key in ("_observation_space", "_action_space"):
            try:
                out.append(self._space(key))
            except (DataError, ValueError, TypeError, KeyError):
                out.append(None)
        return out[0], out[1]

    @property
    def observation_space(self) -> Any:
        """The gymnasium observation space of the last record read (None if it had none)."""
        return self._space("_observation_space")

    @property
    def action_space(self) -> Any:
        """The gymnasium action space of the last record read (None if it had none)."""
        return self._space("_action_space")

    # ---------------------------------------------------------------- reading
    def read(self, batch: _Batch, source: str | None = None) -> EpisodeBatch:
        """Decodes every record of ``batch``; each record is one input row of the ledger.

        Records decode one at a time (msgpack); the batch's episodes become columns once, at
        the end. A batch holds one layout: a record whose episode differs from the batch's
        first (another observation shape or dtype, other action or extra columns) is refused
        under ``on_invalid`` (reason ``obs_shape``, ``obs_dtype`` or ``layout``), naming both.

        Args:
            batch: An Arrow table or record batch with the ``item`` column.
            source: The file the batch came from, for error messages.

        Returns:
            The batch's episodes as columns, with its ledger and rejections.
        """
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        buf, offsets, valid = _item_buffer(batch, source)
        n = len(offsets) - 1
        out = EpisodeBatch()
        out.ledger.rows_in += n
        bounds = offsets.tolist()
        groups, built, spaces = decode_batch(self._scanner, buf, bounds, valid)
        if spaces:
            self._space_bytes.update(spaces)
        held = np.zeros(n, bool)  # rows a group holds
        for rows, _ in groups:
            held[rows] = True
        kept: list[tuple[int, Episode]] = []
        for row in np.flatnonzero(~held).tolist():  # the records no learned layout took
            done = built[row]
            seen_id = done.episode_id if isinstance(done, Fallback) else None
            result: Episode | DataError = (
                done
                if isinstance(done, Episode)
                else self._general(buf[bounds[row] : bounds[row + 1]], bool(valid[row]))
            )
            if isinstance(result, Episode):
                kept.append((row, result))
            else:
                error = _locate(result, Where(file=source, column=ITEM, row=row), seen_id)
                out.reject(
                    error, 1, rows=_row_table(batch, row), episodes=1, policy=self.config.on_invalid
                )
        cols = self._columns(out, batch, groups, kept, source)
        out.add(cols, np.ones(len(cols), np.int64))
        out.declared_spaces = self._declared()
        return out

    def _columns(
        self,
        out: EpisodeBatch,
        batch: pa.Table,
        groups: list[tuple[np.ndarray, EpisodeColumns]],
        kept: list[tuple[int, Episode]],
        source: str | None,
    ) -> EpisodeColumns:
        """The batch's episodes as one table in record order: the decoder's groups and the
        records decoded one by one, joined once (episodes of another layout than the first
        record's refused, see :meth:`_one_layout`)."""
        rows = [r for r, _ in groups] + [np.array([r for r, _ in kept], np.int64)]
        try:
            one = EpisodeColumns.from_episodes([e for _, e in kept])
            cols = EpisodeColumns.concat([*(c for _, c in groups), one], promote=True)
        except ValueError:  # another layout in the batch (rare): one look per record
            every = [
                (int(r), e) for g, c in groups for r, e in zip(g, c.iter_episodes(), strict=True)
            ]
            every = sorted(every + kept, key=lambda x: x[0])
            return EpisodeColumns.from_episodes(self._one_layout(out, batch, every, source))
        order = np.argsort(np.concatenate(rows), kind="stable")
        return cols if bool(np.all(order[1:] > order[:-1])) else cols.select(order)

    def _one_layout(
        self,
        out: EpisodeBatch,
        batch: pa.Table,
        kept: list[tuple[int, Episode]],
        source: str | None,
    ) -> list[Episode]:
        """The episodes of the first one's layout; each other one is refused under
        ``on_invalid`` (its record kept under quarantine), naming both episodes."""
        layout = layout_of(kept[0][1])
        same: list[Episode] = []
        for row, ep in kept:  # the error path: one look per record
            if layout_of(ep) == layout:
                same.append(ep)
                continue
            error = _locate(
                _other_layout(ep, kept[0][1]), Where(file=source, column=ITEM, row=row), None
            )
            out.reject(
                error, 1, rows=_row_table(batch, row), episodes=1, policy=self.config.on_invalid
            )
        return same

    def _general(self, item: bytes, valid: bool) -> Episode | DataError:
        """The general path for one record: its episode, or the error that rejects it (the
        record's spaces are kept, as the fast path keeps them)."""
        if not valid:
            return DecodeError("episode record is null", reason="null_record")
        try:
            state = unpackb(bytes(item), self.config.limits)
            episode = Episode.from_state(state)
        except DataError as err:
            return err
        for key in ("_observation_space", "_action_space"):
            space = state.get(key) if isinstance(state, dict) else None
            if space is not None:
                self._space_bytes[key] = packb(space)
        return episode


def _other_layout(ep: Episode, first: Episode) -> DataError:
    """The error refusing ``ep``, whose layout differs from the batch's ``first`` episode."""

    def show(e: Episode) -> str:
        obs = {k: f"{v.dtype}{list(v.shape[1:])}" for k, v in O.leaves(e.observations).items()}
        extras = {k: f"{v.dtype}{list(v.shape[1:])}" for k, v in e.extras.items()}
        act = f"{e.actions.dtype}{list(e.actions.shape[1:])}"
        return f"obs {obs}, actions {act}, rewards {e.rewards.dtype}, extras {extras}"

    a, b = layout_of(ep)[0], layout_of(first)[0]
    reason = "layout" if a == b else "obs_dtype" if len(a) == 2 and a[0] == b[0] else "obs_shape"
    return EpisodeValidationError(
        f"episode layout ({show(ep)}) differs from the batch's, set by episode {first.id!r} "
        f"({show(first)}); one batch holds one layout",
        Where(episode_id=ep.id),
        reason=reason,
    )


def _locate(err: DataError, where: Where, episode_id: Any) -> DataError:
    """The error at ``where`` (column ``item``); the field it was about moves into the message."""
    field = err.where.column
    message = err.message if field in (None, ITEM) else f"{err.message} (field {field!r})"
    eid = err.where.episode_id if err.where.episode_id is not None else episode_id
    located = Where(
        file=where.file, column=ITEM, episode_id=eid, row=where.row, timestep=err.where.timestep
    )
    return type(err)(message, located, reason=err.reason)


# --------------------------------------------------------------------------------------------
# the item column as one buffer + offsets
# --------------------------------------------------------------------------------------------
def _item_buffer(batch: _Batch, source: str | None) -> tuple[bytes, np.ndarray, np.ndarray]:
    """All records of ``batch`` as one bytes object, ``n + 1`` offsets and a non-null mask."""
    where = Where(file=source, column=ITEM)
    if isinstance(batch, pa.Table):
        if ITEM not in batch.column_names:
            raise SchemaError(
                f"episode records need a binary column {ITEM!r}; found columns "
                f"{batch.column_names}",
                where,
            )
        return _arrow_buffer(batch.column(ITEM), where)
    if not isinstance(batch, Mapping) or ITEM not in batch:
        found: Any = list(batch) if isinstance(batch, Mapping) else type(batch).__name__
        raise SchemaError(f"episode records need a binary column {ITEM!r}; found {found}", where)
    return _numpy_buffer(batch[ITEM], where)


def _arrow_buffer(
    col: pa.ChunkedArray | pa.Array, where: Where
) -> tuple[bytes, np.ndarray, np.ndarray]:
    if not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        raise SchemaError(f"column {ITEM!r} must be binary, found {col.type}", where)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n = len(col)
    off_type = np.int64 if pa.types.is_large_binary(col.type) else np.int32
    bufs = col.buffers()
    if n == 0 or bufs[1] is None:
        return b"", np.zeros(n + 1, dtype=np.int64), np.zeros(n, dtype=bool)
    offsets = np.frombuffer(bufs[1], dtype=off_type)[col.offset : col.offset + n + 1]
    offsets = offsets.astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    data = b"" if bufs[2] is None else bufs[2].slice(first, last - first).to_pybytes()
    valid = (
        np.ones(n, dtype=bool)
        if col.null_count == 0
        else ~col.is_null().to_numpy(zero_copy_only=False)
    )
    return data, offsets - first, valid


def _numpy_buffer(col: Any, where: Where) -> tuple[bytes, np.ndarray, np.ndarray]:
    arr = np.asarray(col, dtype=object) if not isinstance(col, np.ndarray) else col
    if arr.dtype.kind == "S":
        raise SchemaError(
            f"column {ITEM!r} is a fixed-width bytes array, which drops trailing "
            "zero bytes of records; pass an object array of bytes",
            where,
        )
    if arr.dtype != object or arr.ndim != 1:
        raise SchemaError(
            f"column {ITEM!r} must be a 1-d array of bytes, found dtype "
            f"{arr.dtype} and shape {arr.shape}",
            where,
        )
    null: np.ndarray = np.equal(arr, None).astype(np.bool_)  # type: ignore[call-overload]
    cells = np.where(null, b"", arr) if null.any() else arr
    try:
        data = b"".join(cells)
    except TypeError:
        kinds = np.array([not isinstance(c, bytes | bytearray | memoryview) for c in cells])
        row = int(np.flatnonzero(kinds)[0])
        raise SchemaError(
            f"column {ITEM!r} must hold bytes, found {type(cells[row]).__name__}",
            Where(file=where.file, column=ITEM, row=row),
        ) from None
    lengths = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return data, offsets, np.logical_not(null)


def _row_table(batch: _Batch, row: int) -> pa.Table:
    """Row ``row`` of ``batch`` as a one-row table (what quarantine keeps)."""
    if isinstance(batch, pa.Table):
        return batch.slice(row, 1)
    cols = {}
    for name, values in batch.items():
        try:
            cols[name] = pa.array([values[row]])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            cols[name] = pa.array([repr(values[row])])
    return pa.table(cols)
