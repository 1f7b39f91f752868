"""Accounting for every input row: what was kept, rejected (by reason) or dropped as a duplicate.

Readers, validation and de-duplication all pass an :class:`EpisodeBatch` along: the episodes built
so far, how many input rows each came from, and a :class:`Ledger` that must always balance::

    rows_in == rows_kept + sum(rows_rejected.values()) + rows_duplicate

``rows_kept`` counts the rows held by the episodes plus ``rows_held``: rows a reader keeps for its
next batch (rows without a next-observation column: an episode's last row, open at the end of a
batch, waits for the next row's observation). A row is counted in the batch it came in; the batch
that uses a held row counts ``rows_held`` down by one and the row with its episode, so summed over a
stream ``rows_held`` is the rows still waiting.

A policy (:data:`~offline_prelearner.config.OnInvalid`) decides what happens to bad data:
``"raise"`` raises the :class:`~offline_prelearner.errors.DataError`; ``"skip"`` counts it;
``"quarantine"`` counts it and keeps what was refused -- the input rows a reader refused, or the
episode validation refused -- in a :class:`Rejection`, for
:func:`~offline_prelearner.io.quarantine.write_quarantine`. The policy belongs to the stage that
applies it -- one setting, ``read.on_invalid`` (:class:`~offline_prelearner.config.ReadConfig`),
for the readers and for validation, where it is given to the
:class:`~offline_prelearner.episodes.validate.Validator` as its second argument -- and the stage
passes it to :meth:`EpisodeBatch.reject`; the data carries none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..config import OnInvalid
from ..errors import DataError
from .episode import Episode
from .episode_columns import EpisodeColumns

__all__ = [
    "EpisodeBatch",
    "Ledger",
    "Rejection",
]


@dataclass
class Rejection:
    """Input refused for one reason. Under quarantine it keeps what was refused: ``rows`` (an
    Arrow table of the input rows, when a reader refused them) or ``episode`` (when a whole
    episode was refused after it was built); the quarantine writer turns an episode into rows."""

    error: DataError
    num_rows: int
    rows: pa.Table | None = None
    episode: Episode | None = None

    @property
    def reason(self) -> str:
        """The short reason code of the error (``"missing_column"``, ``"nan"``...)."""
        return self.error.reason


@dataclass
class Ledger:
    """Counters over input rows and episodes. Add with ``+=``; check with :meth:`balanced`.

    Attributes:
        rows_in: Input rows read.
        rows_kept: Rows of the episodes kept.
        rows_duplicate: Rows dropped as duplicates.
        rows_rejected: Rows refused, by reason tag.
        episodes_kept: Episodes kept.
        episodes_duplicate: Episodes dropped as duplicates.
        episodes_rejected: Episodes refused, by reason tag.
        fragments: Pieces of episodes kept (see the comment on the field).
        rows_held: Rows a reader holds for its next batch (see the comment on the field).
    """

    rows_in: int = 0
    rows_kept: int = 0
    rows_duplicate: int = 0
    rows_rejected: Counter[str] = field(default_factory=Counter)
    episodes_kept: int = 0
    episodes_duplicate: int = 0
    episodes_rejected: Counter[str] = field(default_factory=Counter)
    #: Pieces kept: an episode cut across input batches is one episode and several fragments
    #: (within one batch the two are equal; a prelearner counts each episode once).
    fragments: int = 0
    #: Rows a reader holds for its next batch, counted in ``rows_kept`` (a batch that uses them
    #: counts them down; see the module docstring). Listed by :meth:`to_dict` only when non-zero.
    rows_held: int = 0

    def balanced(self) -> bool:
        """Whether every input row is accounted for: kept, rejected for a reason, or a duplicate."""
        return (
            self.rows_in == self.rows_kept + sum(self.rows_rejected.values()) + self.rows_duplicate
        )

    def __iadd__(self, other: Ledger) -> Ledger:
        self.rows_in += other.rows_in
        self.rows_kept += other.rows_kept
        self.rows_duplicate += other.rows_duplicate
        self.rows_rejected.update(other.rows_rejected)
        self.episodes_kept += other.episodes_kept
        self.episodes_duplicate += other.episodes_duplicate
        self.episodes_rejected.update(other.episodes_rejected)
        self.fragments += other.fragments
        self.rows_held += other.rows_held
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ledger:
        """Inverse of :meth:`to_dict` (``balanced`` is derived, not read).

        Args:
            d: A dict as :meth:`to_dict` writes it (a manifest's or report's ledger, read back
                from JSON): the row and episode counters as ints, ``rows_rejected`` and
                ``episodes_rejected`` as ``{reason: count}``. ``fragments`` (absent: equal to
                ``episodes_kept``) and ``rows_held`` (absent: 0) may be missing, as in ledgers
                written before they existed.

        Returns:
            The ledger.

        Raises:
            KeyError: One of the other counters is missing.
        """
        return cls(
            rows_in=d["rows_in"],
            rows_kept=d["rows_kept"],
            rows_duplicate=d["rows_duplicate"],
            rows_rejected=Counter(d["rows_rejected"]),
            episodes_kept=d["episodes_kept"],
            episodes_duplicate=d["episodes_duplicate"],
            episodes_rejected=Counter(d["episodes_rejected"]),
            fragments=d.get("fragments", d["episodes_kept"]),
            rows_held=d.get("rows_held", 0),
        )

    def to_dict(self) -> dict[str, Any]:
        """The counters as a JSON-able dict (rejections sorted by reason)."""
        out: dict[str, Any] = {
            "rows_in": self.rows_in,
            "rows_kept": self.rows_kept,
            "rows_duplicate": self.rows_duplicate,
            "rows_rejected": dict(sorted(self.rows_rejected.items())),
            "episodes_kept": self.episodes_kept,
            "episodes_duplicate": self.episodes_duplicate,
            "episodes_rejected": dict(sorted(self.episodes_rejected.items())),
            "fragments": self.fragments,
            "balanced": self.balanced(),
        }
        if self.rows_held:
            out["rows_held"] = self.rows_held
        return out


class EpisodeBatch:
    """Episodes on their way through read -> validate -> dedup, with the rows they account for.

    The episodes are one :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns`
    (:attr:`columns`, possibly empty); every stage works on it as vectors. ``source_rows[i]`` is
    the number of input rows episode ``i`` was built from (its length for row data, 1 for a
    msgpack episode record). The ledger's ``rows_kept``/``episodes_kept`` are derived from the
    episodes still held, so stages only record what they remove.

    Args:
        columns: The episodes kept (default: none).
        source_rows: Input rows each episode was built from, one per episode (default: each
            episode's length).
        ledger: The counters so far (default: a new :class:`Ledger`).
        rejections: The episodes or rows refused so far, with their errors.
    """

    def __init__(
        self,
        columns: EpisodeColumns | None = None,
        source_rows: Sequence[int] | np.ndarray | None = None,
        ledger: Ledger | None = None,
        rejections: list[Rejection] | None = None,
    ) -> None:
        self.columns = EpisodeColumns.empty() if columns is None else columns
        rows = self.columns.length if source_rows is None else source_rows
        self.source_rows: np.ndarray = np.asarray(rows, np.int64)
        if columns is not None and len(self.source_rows) != len(self.columns):
            raise ValueError(
                f"{len(self.source_rows)} source_rows for {len(self.columns)} episodes"
            )
        self.ledger = Ledger() if ledger is None else ledger
        self.rejections: list[Rejection] = [] if rejections is None else rejections
        #: ``(observation space, action space)`` the data itself declares (a msgpack record's
        #: spaces), None where it declares none; the validator enforces them where its config
        #: declares no space of its own.
        self.declared_spaces: tuple[Any, Any] = (None, None)
        self.sync()

    def __repr__(self) -> str:
        return f"EpisodeBatch(episodes={len(self)}, ledger={self.ledger})"

    # ------------------------------------------------------------------ what is held
    @property
    def episodes(self) -> list[Episode]:
        """The episodes as read-only :class:`Episode` views, built on each access (for user
        code and tests; the pipeline works on :attr:`columns`)."""
        return list(self.columns.iter_episodes())

    def __len__(self) -> int:
        return len(self.columns)

    def add(
        self, columns: EpisodeColumns, source_rows: Sequence[int] | np.ndarray | None = None
    ) -> None:
        """Appends kept episodes and counts them in the ledger.

        Args:
            columns: The episodes, in the layout of those held (step columns of other numeric
                types are held in the common type, see :meth:`EpisodeColumns.concat`).
            source_rows: Input rows each was built from (default: each one's length).
        """
        rows = columns.length if source_rows is None else np.asarray(source_rows, np.int64)
        if len(self.columns):
            self.columns = EpisodeColumns.concat([self.columns, columns], promote=True)
            rows = np.concatenate([self.source_rows, rows])
        else:  # a reader's one add: nothing to join
            self.columns = columns
        self.source_rows = rows
        self.sync()

    def sync(self) -> None:
        """Recomputes the kept counters from the episodes held."""
        rows = self.source_rows
        led, n = self.ledger, len(rows)
        led.rows_kept = (int(rows.sum()) if n else 0) + led.rows_held
        led.episodes_kept = led.fragments = n

    def episode_keys(self) -> list[tuple[Any, Any]]:
        """``(episode id, agent id)`` of each episode held, in order."""
        return list(zip(self.columns.ids, self.columns.agents, strict=True))

    def reject(
        self,
        error: DataError,
        num_rows: int,
        rows: pa.Table | None = None,
        episodes: int = 1,
        *,
        policy: OnInvalid,
        episode: Episode | None = None,
    ) -> None:
        """Applies ``policy`` (the calling stage's ``on_invalid``) to bad data that is *not* held:
        raise, or count it (and, under quarantine, keep the refused ``rows`` or ``episode``).

        Args:
            error: What is wrong, naming file, column, episode and row where known.
            num_rows: Input rows refused.
            rows: The refused input rows (kept under quarantine).
            episodes: Episodes refused.
            policy: ``"raise"``, ``"skip"`` or ``"quarantine"``.
            episode: The refused episode, when one was built (kept under quarantine).
        """
        if policy == "raise":
            raise error
        self.ledger.rows_rejected[error.reason] += num_rows
        self.ledger.episodes_rejected[error.reason] += episodes
        if policy == "quarantine":
            self.rejections.append(Rejection(error, num_rows, rows, episode))
        else:
            self.rejections.append(Rejection(error, num_rows))

    def keep_only(self, keep: np.ndarray | Sequence[bool]) -> tuple[EpisodeColumns, np.ndarray]:
        """Drops the episodes whose ``keep`` entry is False.

        Args:
            keep: One bool per episode held.

        Returns:
            The dropped episodes (columns sharing the arrays) and their source rows.
        """
        mask = np.asarray(keep, bool)
        if mask.all():
            return EpisodeColumns.empty(), np.zeros(0, np.int64)
        dropped = self.columns.select(~mask), self.source_rows[~mask]
        self.columns = self.columns.select(mask)
        self.source_rows = self.source_rows[mask]
        self.sync()
        return dropped

    def extend(self, other: EpisodeBatch) -> None:
        """Appends another batch (episodes, ledger, rejections).

        Args:
            other: The batch to append; its episodes share this batch's layout.
        """
        self.ledger += other.ledger
        self.rejections.extend(other.rejections)
        self.add(other.columns, other.source_rows)
