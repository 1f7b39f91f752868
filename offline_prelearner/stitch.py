"""Joining fragments of one episode that arrived in different batches or files.

Readers emit what one batch holds; an episode recorded across several files arrives as several
fragments with the same id whose ``t`` ranges follow each other. :func:`stitch_fragments` joins them
(``Episode.concat_fragments`` checks that ``t`` continues and the boundary observation repeats);
fragments that cannot be joined are rejected through the batch's policy, never silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .episode import Episode
from .errors import DataError
from .report import EpisodeBatch

__all__ = ["stitch_fragments"]


def stitch_fragments(batch: EpisodeBatch) -> EpisodeBatch:
    """A new batch in which fragments sharing ``(id, agent_id)`` are joined (first-seen order)."""
    groups: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, ep in enumerate(batch.episodes):
        groups[(ep.id, ep.agent_id)].append(i)
    out = EpisodeBatch(ledger=batch.ledger, rejections=batch.rejections, on_invalid=batch.on_invalid)
    for idx in groups.values():
        rows = sum(batch.source_rows[i] for i in idx)
        if len(idx) == 1:
            out.add(batch.episodes[idx[0]], rows)
            continue
        try:
            joined = Episode.concat_fragments(batch.episodes[i] for i in idx)
        except DataError as e:
            out.reject(e, rows, episodes=1)
            continue
        out.add(joined, rows)
    out.sync()
    return out
