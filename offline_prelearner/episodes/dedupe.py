"""De-duplication, the stage after validation: episodes whose steps were already seen are dropped.

:class:`Deduplicator` removes them with ``EpisodeBatch.keep_only`` and counts them in the ledger
(``rows_duplicate``, ``episodes_duplicate``), so the batch's ledger still balances. Copies of rows
*within* one batch of the rows format are the rows reader's (:mod:`offline_prelearner.io.formats.
rows.duplicates`); this stage sees episodes, across batches.
"""

from __future__ import annotations

from typing import Any

from ..config import MAX_STEPS, check_int
from .episode import Episode
from .ledger import EpisodeBatch

__all__ = ["Deduplicator"]


class Deduplicator:
    """Drops episodes whose steps were already seen; keep one per pipeline (e.g. in a Ray actor).

    An episode is keyed by ``(id, agent_id)``. It is a duplicate when its key was seen before
    (earlier in the batch or in an earlier batch) and it starts before the end of what was seen
    (``t_started < t_end_seen``): an exact copy, or a fragment overlapping one already kept. A later
    fragment of the same episode (``t_started >= t_end_seen``) is kept and extends ``t_end_seen``.

    Edges: fragments must arrive in ``t`` order; an earlier fragment arriving after a later one
    counts as a duplicate. Zero-length episodes cover no step and are never duplicates.

    Memory is one dict entry per key. With ``max_ids`` the oldest keys (by first sight) are
    forgotten beyond that many, FIFO; a forgotten episode that comes back is kept again.

    Args:
        max_ids: Most keys remembered (the oldest forgotten first); None remembers all.
    """

    def __init__(self, max_ids: int | None = None) -> None:
        check_int("max_ids", max_ids, 1, MAX_STEPS, none_ok=True)
        self.max_ids = max_ids
        self._t_end: dict[tuple[Any, Any], int] = {}

    def __len__(self) -> int:
        """Number of keys remembered."""
        return len(self._t_end)

    def is_duplicate(self, ep: Episode) -> bool:
        """Whether ``ep`` overlaps what was seen; remembers it when it does not."""
        return self._seen((ep.id, ep.agent_id), ep.t_started, ep.t_end)

    def _seen(self, key: tuple[Any, Any], t_started: int, t_end: int) -> bool:
        seen = self._t_end.get(key)
        if seen is not None:
            if t_started < seen:
                return True
            self._t_end[key] = max(seen, t_end)
            return False
        self._t_end[key] = t_end
        if self.max_ids is not None and len(self._t_end) > self.max_ids:
            del self._t_end[next(iter(self._t_end))]
        return False

    def _keep_columns(self, keys: list[tuple[Any, Any]], cols: Any) -> list[bool]:
        """Per episode of ``cols`` (``keys`` theirs): not a duplicate. Keys never seen and
        distinct within the batch (all but an episode continued across batches, usually) are
        remembered in one ``dict.update``; the rest take :meth:`_seen` one by one, in order."""
        t0, t1 = cols.t_started.tolist(), cols.t_end.tolist()
        known = set(filter(self._t_end.__contains__, keys))  # (keys() & keys copies all keys)
        if self.max_ids is not None or len(set(keys)) != len(keys):
            known = set(keys)  # FIFO forgetting, or a key twice: every episode in order
        if known:
            seen = self._seen
            keep = [
                not (k in known and seen(k, a, b)) for k, a, b in zip(keys, t0, t1, strict=True)
            ]
            fresh = [(k, b) for k, b in zip(keys, t1, strict=True) if k not in known]
        else:
            keep, fresh = [True] * len(keys), list(zip(keys, t1, strict=True))
        self._t_end.update(fresh)
        return keep

    def dedupe(self, batch: EpisodeBatch) -> EpisodeBatch:
        """Removes duplicates from ``batch`` and counts them (rows and episodes); returns it."""
        cols = batch.columns
        if cols is not None:  # the same walk over plain values, no objects built
            keep = self._keep_columns(list(zip(cols.ids, cols.agents, strict=True)), cols)
        else:
            keep = [not self.is_duplicate(ep) for ep in batch.episodes]
        _, dropped_rows = batch.keep_only(keep)
        batch.ledger.rows_duplicate += sum(dropped_rows)
        batch.ledger.episodes_duplicate += len(dropped_rows)
        return batch
