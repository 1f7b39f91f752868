"""What a stream of row batches leaves open between two batches, held for the next one.

The rows reader reads one batch at a time (it lives in a Ray actor) and :class:`OpenEpisodes` is
the state it keeps across them, and nothing else:

* **Pending episodes** (data without ``t``): an episode that ended not done waits for its
  continuation, keyed ``(episode id, agent id)`` -> its next ``t`` and last observation, or a
  poisoned marker when a fragment of it was rejected (its later rows cannot be placed). The next
  batch's first fragment of it starts at that ``t`` and, with ``check_continuity``, must start
  at that observation (:meth:`OpenEpisodes.resume`); done episodes leave (:meth:`OpenEpisodes.
  track`).
* **Held rows** (``next_obs_from: next_row``): the last row of an episode open at the end of a
  batch has no next observation yet; it is kept, in the batch's own form (an Arrow table or numpy
  columns), with where it came from, and leads the next batch (:meth:`OpenEpisodes.carry_in`).
  At the end of the stream :meth:`OpenEpisodes.finish` counts the rows still held as rejected,
  ``next_obs_unknown``.

The reader decides which episodes stay open; this object keeps them, hands them back, and says
which are pending (:attr:`OpenEpisodes.pending`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ....episodes.episode_columns import EpisodeColumns
from ....episodes.ledger import EpisodeBatch
from ....errors import DataError, SchemaError, Where
from .frame import ColumnBatch, Groups, Verdicts, rows_differ

__all__ = ["OpenEpisodes"]

_POISONED = "rejected"  # pending marker: an earlier fragment of this episode was rejected
_HELD = "held"  # pending marker (next_row): the episode's last row waits for the next batch

#: Where a held row came from: its file, its row there, whether its episode has no fragment yet.
Origin = tuple[str | None, int | None, bool]


class OpenEpisodes:
    """The episodes a stream of row batches leaves open; see the module docstring.

    Args:
        obs_column: the data's observation column, named by the errors on a held row or a
            continuation that does not fit.
    """

    def __init__(self, obs_column: str | None) -> None:
        self.obs_column = obs_column
        # (episode id, agent id) -> (next t, last obs) | _POISONED. Used only without `t`.
        self._pending: dict[tuple[Any, Any], Any] = {}
        # next_row only: the last rows of episodes open at the end of the last batch (an Arrow
        # table or a dict of numpy columns, as the batches come), their keys and their origins.
        self._held: pa.Table | dict[str, np.ndarray] | None = None
        self._held_keys: list[tuple[Any, Any]] = []
        self._held_from: list[Origin] = []
        self._carried_from: list[Origin] = []  # the origins of the rows leading this batch

    # ------------------------------------------------------------------ pending episodes
    @property
    def pending(self) -> Mapping[tuple[Any, Any], Any]:
        """Episodes that ended not done, awaiting their continuation (a copy).

        Keyed ``(episode id, agent id)``; this includes every episode whose last row is held.
        """
        out: dict[tuple[Any, Any], Any] = {k: _HELD for k in self._held_keys}
        out.update(self._pending)
        return out

    @property
    def has_pending(self) -> bool:
        """Whether an episode (data without ``t``) waits for its continuation."""
        return bool(self._pending)

    def poison(self, key: tuple[Any, Any]) -> None:
        """A fragment of episode ``key`` was rejected: its later rows cannot be placed.

        Args:
            key: ``(episode id, agent id)`` of the episode (agent id None where rows carry
                none); its continuation in later batches is refused too.
        """
        self._pending[key] = _POISONED

    def close(self, key: tuple[Any, Any]) -> None:
        """Episode ``key`` ended (done): nothing more of it is awaited.

        Args:
            key: ``(episode id, agent id)`` of the episode; a key not pending is ignored.
        """
        self._pending.pop(key, None)

    def track(self, cols: EpisodeColumns, good: np.ndarray) -> None:
        """Keeps the not-done episodes of a batch (data without ``t``) until they continue.

        Args:
            cols: the batch's episodes.
            good: per episode, whether it was kept (a rejected one is poisoned).
        """
        pending, done = self._pending, cols.done
        if pending:
            keys = dict(zip(zip(cols.ids, cols.agents, strict=True), done.tolist(), strict=True))
            for key in [k for k in pending if keys.get(k)]:
                del pending[key]
        if done.all():
            return
        for e in np.flatnonzero(~done).tolist():  # at most one or two per batch
            key = (cols.ids[e], cols.agents[e])
            if not good[e]:
                pending[key] = _POISONED
            else:
                pending[key] = (int(cols.t_end[e]), cols.final_obs(e).copy())

    def resume(
        self,
        gr: Groups,
        obs: np.ndarray,
        v: Verdicts,
        t_started: np.ndarray,
        check_continuity: bool,
    ) -> None:
        """Episodes of a batch that continue a pending one start where it stopped.

        Sets ``t_started`` of each continuing episode to the pending one's next ``t``; flags an
        episode whose earlier fragment was rejected (``after_rejected``) and, with
        ``check_continuity``, one whose first ``obs`` is not the last observation seen
        (``discontinuous``).

        Args:
            gr: the batch's episodes.
            obs: the batch's ``obs`` rows (frame order).
            v: the batch's verdicts, where the flags go.
            t_started: per episode, its first ``t`` (updated in place).
            check_continuity: whether to compare the first ``obs`` with the last one seen.
        """
        pending = self._pending
        index = dict(zip(zip(gr.ids, gr.agents, strict=True), range(len(gr.ids)), strict=True))
        hits = sorted(e for key in pending if (e := index.get(key)) is not None)
        for e in hits:  # the episodes that continue a pending one (few), in episode order
            prev = pending[(gr.ids[e], gr.agents[e])]
            at = gr.starts[e : e + 1]
            if isinstance(prev, str):  # _POISONED
                v.flag(
                    at,
                    "an earlier fragment of this episode was rejected; its later rows "
                    "cannot be placed",
                    None,
                    reason="after_rejected",
                )
                continue
            t_started[e] = prev[0]
            first = int(gr.first[e])
            if check_continuity and rows_differ(obs[first : first + 1], prev[1][None])[0]:
                v.flag(
                    at,
                    "first row's obs differs from the last new_obs of this episode's "
                    "fragment in an earlier batch (batches out of order?)",
                    self.obs_column,
                    reason="discontinuous",
                )

    # ------------------------------------------------------------------ held rows (next_row)
    @property
    def holds_rows(self) -> bool:
        """Whether rows wait to lead the next batch."""
        return self._held is not None

    @property
    def carried_from(self) -> list[Origin]:
        """Where each row that leads the current batch came from (in order)."""
        return self._carried_from

    def carry_in(self, frame: ColumnBatch, source: str | None) -> tuple[ColumnBatch, int]:
        """The held rows followed by ``frame``'s rows, as one frame; the held rows are handed over.

        Args:
            frame: the next batch; it needs the columns of the batch the rows were held from.
            source: the batch's file, for errors.

        Returns:
            The joined frame and the number of held rows that lead it (the reader counts
            ``rows_held`` down by that many). :attr:`carried_from` then says where they came from.

        Raises:
            SchemaError: the batch has other columns (``missing_columns``) or column types Arrow
                cannot unify with the held rows' (``bad_type``); the rows stay held.
        """
        joined = self._joined(frame, source)
        carried = len(self._held_keys)
        self._carried_from = self._held_from
        self._held, self._held_keys, self._held_from = None, [], []
        return joined, carried

    def _joined(self, frame: ColumnBatch, source: str | None) -> ColumnBatch:
        """The held rows followed by ``frame``'s rows, as one frame (same columns needed)."""
        held = self._held
        assert held is not None
        names = list(held.column_names) if isinstance(held, pa.Table) else list(held)
        if sorted(names) != sorted(frame.names):
            raise SchemaError(
                f"this batch's columns {frame.names} differ from the previous batch's {names}, "
                "whose open episodes' last rows wait for their next observation here (rows "
                "without a next-observation column)",
                Where(file=source),
                reason="missing_columns",
            )
        if isinstance(frame.raw(names[0]), np.ndarray):  # numpy batches
            if isinstance(held, pa.Table):
                hb = ColumnBatch(held, source)
                held = {k: hb.to_numpy(k) for k in names}
            return ColumnBatch(
                {k: np.concatenate([held[k], frame.raw(k)]) for k in frame.names}, source
            )
        if not isinstance(held, pa.Table):
            held = ColumnBatch(held, source).take(np.arange(len(self._held_keys)))
        table = pa.Table.from_arrays([frame.raw(k) for k in frame.names], names=frame.names)
        if held.column_names != frame.names:
            held = held.select(frame.names)
        try:
            if held.schema.equals(table.schema):  # the usual case: no promotion to work out
                joined = pa.concat_tables([held, table])
            else:
                joined = pa.concat_tables([held, table], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise SchemaError(
                f"this batch's column types differ from the previous batch's, whose open "
                f"episodes' last rows wait for their next observation here: {e}",
                Where(file=source),
                reason="bad_type",
            ) from None
        return ColumnBatch(joined, source)

    def hold(
        self,
        frame: ColumnBatch,
        members: np.ndarray,
        keys: list[tuple[Any, Any]],
        rows: np.ndarray,
        alone: np.ndarray,
        source: str | None,
    ) -> None:
        """Keeps the last rows of open episodes to lead the next batch (in the batch's own form).

        Args:
            frame: the batch (carried rows first).
            members: the frame rows to hold, one per open episode.
            keys: their episodes' keys.
            rows: their rows in the batch read (negative: a carried row, held again).
            alone: per row, whether its episode has no step in this batch (the row is all of it).
            source: the batch's file.
        """
        came: list[Origin] = []
        carried = self._carried_from
        for r, only in zip(rows.tolist(), alone.tolist(), strict=True):  # one or two per batch
            if r < 0:  # a carried row held again: its origin, alone if it was and still is
                file, row, was_alone = carried[r + len(carried)]
                came.append((file, row, was_alone and only))
            else:
                came.append((source, r, only))
        self._held_from = came
        self._held_keys = keys
        if not len(members):
            self._held = None
        elif isinstance(frame.raw(frame.names[0]), np.ndarray):
            self._held = {k: frame.raw(k)[members] for k in frame.names}
        else:
            self._held = frame.take(members)

    def finish(self) -> EpisodeBatch:
        """The end of the stream: the rows still held get no next observation.

        Returns:
            A batch with no episode that moves each held row from ``rows_held`` to
            ``rows_rejected``, reason ``next_obs_unknown`` (its episode too when the row was all
            of it). Nothing is held or pending for those episodes afterwards.
        """
        out = EpisodeBatch()
        for key, (file, row, alone) in zip(self._held_keys, self._held_from, strict=True):
            err = DataError(
                "the data ends before this open episode's next row: its last row's obs closes "
                "the episode's last fragment, its action and reward are not used",
                Where(file=file, column=self.obs_column, episode_id=key[0], row=row),
                reason="next_obs_unknown",
            )
            out.reject(err, 1, episodes=int(alone), policy="skip")
            self._pending.pop(key, None)
        out.ledger.rows_held -= len(self._held_keys)
        out.sync()
        self._held, self._held_keys, self._held_from = None, [], []
        return out
