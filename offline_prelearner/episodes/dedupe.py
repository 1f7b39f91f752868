"""De-duplication, the stage after validation: episodes whose steps were already seen are dropped.

:class:`Deduplicator` removes them with ``EpisodeBatch.keep_only`` and counts them in the ledger
(``rows_duplicate``, ``episodes_duplicate``), so the batch's ledger still balances. Copies of rows
*within* one batch of the rows format are the rows reader's (:mod:`offline_prelearner.io.formats.
rows.duplicates`); this stage sees episodes, across batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import MAX_STEPS, check_int
from .episode_columns import EpisodeColumns
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
    With ``any_order`` (the paths that join whole episodes by ``t``, whatever order their
    fragments arrive in: ``sample.sample_all`` and RLlib's ``to_learner="episodes"``) a fragment
    is a duplicate only where its steps overlap steps kept for its key; the spans kept are
    remembered per key, merged where they touch (one span per episode once it is whole).

    Memory is one dict entry per key. With ``max_ids`` the oldest keys (by first sight) are
    forgotten beyond that many, FIFO; a forgotten episode that comes back is kept again.

    Args:
        max_ids: Most keys remembered (the oldest forgotten first); None remembers all.
        any_order: Fragments may arrive in any ``t`` order (see above).
    """

    def __init__(self, max_ids: int | None = None, *, any_order: bool = False) -> None:
        check_int("max_ids", max_ids, 1, MAX_STEPS, none_ok=True)
        self.max_ids = max_ids
        self.any_order = any_order
        self._t_end: dict[tuple[Any, Any], int] = {}
        #: any_order: per key, the spans kept, ``[start, end, start, end, ...]`` sorted, apart.
        self._spans: dict[tuple[Any, Any], list[int]] = {}

    def __len__(self) -> int:
        """Number of keys remembered."""
        return len(self._spans if self.any_order else self._t_end)

    def _seen(self, key: tuple[Any, Any], t_started: int, t_end: int) -> bool:
        if self.any_order:
            return self._overlaps(key, t_started, t_end)
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

    def _overlaps(self, key: tuple[Any, Any], a: int, b: int) -> bool:
        """any_order: whether ``[a, b)`` overlaps a span kept for ``key``; if not, it is kept."""
        spans = self._spans.get(key)
        if spans is None:
            self._spans[key] = [a, b]
            if self.max_ids is not None and len(self._spans) > self.max_ids:
                del self._spans[next(iter(self._spans))]
            return False
        if a == b:
            return False
        pairs = list(zip(spans[0::2], spans[1::2], strict=True))
        if any(s < b and a < e and s < e for s, e in pairs):  # an empty span shares no step
            return True
        pairs.append((a, b))
        pairs.sort()
        merged = [pairs[0][0], pairs[0][1]]
        for s, e in pairs[1:]:
            if s <= merged[-1]:
                merged[-1] = max(merged[-1], e)
            else:
                merged += [s, e]
        self._spans[key] = merged
        return False

    def keep(self, cols: EpisodeColumns) -> np.ndarray:
        """Per episode of ``cols``: True where it is not a duplicate; what is kept is remembered.

        When the batch's keys are distinct and nothing is forgotten, the keys never seen (all but
        an episode continued across batches, usually) are remembered in one ``dict.update`` and
        only the keys seen before are walked; otherwise every episode is walked in order (a
        dict lookup each, no episode object).

        Args:
            cols: The batch's episodes.

        Returns:
            A bool per episode.
        """
        keys = list(zip(cols.ids, cols.agents, strict=True))
        t1 = cols.t_end.tolist()
        if self.max_ids is not None or len(set(keys)) != len(keys):
            # FIFO forgetting, or a key twice: every episode in order
            seen, t0 = self._seen, cols.t_started.tolist()
            keep = [not seen(k, a, b) for k, a, b in zip(keys, t0, t1, strict=True)]
            return np.array(keep, bool)
        memory: dict[tuple[Any, Any], Any] = self._spans if self.any_order else self._t_end
        known = set(filter(memory.__contains__, keys))  # (keys() & keys copies all keys)
        fresh = dict(zip(keys, t1, strict=True))
        out = np.ones(len(keys), bool)
        if known:  # distinct keys: the known ones (few) walked alone, in any order
            at = dict(zip(keys, range(len(keys)), strict=True))
            for k in known:
                i = at[k]
                out[i] = not self._seen(k, int(cols.t_started[i]), fresh.pop(k))
        if self.any_order:
            t0 = cols.t_started.tolist()
            new = zip(keys, t0, t1, strict=True)
            self._spans.update({k: [a, b] for k, a, b in new if k in fresh})
        else:
            self._t_end.update(fresh)
        return out

    def dedupe(self, batch: EpisodeBatch) -> EpisodeBatch:
        """Removes duplicates from ``batch`` and counts them (rows and episodes).

        Args:
            batch: The batch, changed in place.

        Returns:
            ``batch``.
        """
        _, dropped_rows = batch.keep_only(self.keep(batch.columns))
        batch.ledger.rows_duplicate += int(dropped_rows.sum())
        batch.ledger.episodes_duplicate += len(dropped_rows)
        return batch
