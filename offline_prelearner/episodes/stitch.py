"""Joining fragments of one episode that arrived in different batches or files.

Readers emit what one batch holds; an episode recorded across several files arrives as several
fragments with the same id whose ``t`` ranges follow each other. :func:`stitch_fragments` joins
them (``EpisodeColumns.join_fragments`` checks that ``t`` continues and the boundary observation
repeats); fragments that cannot be joined are rejected through the caller's policy, never
silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

import numpy as np

from ..config import OnInvalid
from ..errors import DataError, EpisodeValidationError, Where
from .episode_columns import EpisodeColumns
from .ledger import EpisodeBatch

__all__ = ["settle_open_episodes", "stitch_fragments"]


def stitch_fragments(batch: EpisodeBatch, on_invalid: OnInvalid = "raise") -> EpisodeBatch:
    """A new batch in which fragments sharing ``(id, agent_id)`` are joined (first-seen order).

    Only chains that continue (``t_started`` equal to the previous fragment's end, previous not
    done) are joined. Overlapping copies stay separate, for the de-duplicator to count; a chain
    whose boundary observations disagree is rejected under ``on_invalid``. A batch whose keys are
    all distinct (the usual case) is returned as it is.

    Args:
        batch: The episodes read so far.
        on_invalid: The reading stage's policy (``ReadConfig.on_invalid``) for a chain that
            cannot be joined.

    Returns:
        The stitched batch (``batch`` itself when nothing needed joining).
    """
    cols, src = batch.columns, batch.source_rows
    keys = batch.episode_keys()
    if len(set(keys)) == len(keys):
        return batch
    groups: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, key in enumerate(keys):  # only batches with repeated keys get here
        groups[key].append(i)
    t0, t1, done = cols.t_started.tolist(), cols.t_end.tolist(), cols.done.tolist()
    # In first-seen order: runs of episodes kept as they are (one compact part per run), and
    # each joined chain a part of its own; every row is copied once.
    parts: list[EpisodeColumns] = []
    run: list[int] = []
    rows: list[int] = []
    out = EpisodeBatch(ledger=batch.ledger, rejections=batch.rejections)
    out.declared_spaces = batch.declared_spaces
    for idx in groups.values():
        for chain in _chains(sorted(idx, key=lambda i: (t0[i], i)), t0, t1, done):
            n = int(src[chain].sum())
            if len(chain) == 1:
                run.append(chain[0])
                rows.append(n)
                continue
            try:
                joined = EpisodeColumns.join_fragments([cols.select(np.array([i])) for i in chain])
            except DataError as e:
                out.reject(e, n, episodes=1, policy=on_invalid)
                continue
            if run:
                parts.append(cols.take(np.array(run)))
                run = []
            parts.append(joined)
            rows.append(n)
    if run:
        parts.append(cols.take(np.array(run)))
    out.add(EpisodeColumns.concat(parts), rows)
    return out


def _chains(order: list[int], t0: list[int], t1: list[int], done: list[bool]) -> list[list[int]]:
    """Splits fragments (sorted by t_started) into runs that continue one another."""
    chains: list[list[int]] = []
    for i in order:
        for chain in chains:
            last = chain[-1]
            if not done[last] and t0[i] == t1[last]:
                chain.append(i)
                break
        else:
            chains.append([i])
    return chains


def settle_open_episodes(batch: EpisodeBatch, policy: str, on_invalid: str) -> int:
    """What a conversion does with the episodes that never end within the data, once their
    fragments are joined.

    Under ``policy="reject"`` each is refused (reason ``not_done``): quarantined under
    ``on_invalid="quarantine"``, otherwise skipped and counted (an open end is what
    ``fragments="reject"`` asks to drop, not bad data to stop the job for). Any other policy keeps
    them as not-done episodes.

    Args:
        batch: The stitched episodes, changed in place.
        policy: The conversion's ``fragments`` policy (``"reject"`` drops open episodes).
        on_invalid: The conversion's ``on_invalid`` (``"quarantine"`` keeps what is dropped).

    Returns:
        How many episodes never end.
    """
    done = batch.columns.done
    n_open = int((~done).sum())
    if policy == "reject" and n_open:
        dropped, rows = batch.keep_only(done)
        how: Literal["skip", "quarantine"] = "quarantine" if on_invalid == "quarantine" else "skip"
        for ep, r in zip(dropped.iter_episodes(), rows.tolist(), strict=True):  # error path
            err = EpisodeValidationError(
                f"episode never ends within the data (last step t={ep.t_end - 1}); "
                "fragments='keep' writes it as a not-done episode",
                Where(episode_id=ep.id, timestep=ep.t_end),
                reason="not_done",
            )
            batch.reject(err, r, episode=ep, policy=how)
    return n_open
