"""Joining fragments of one episode that arrived in different batches or files.

Readers emit what one batch holds; an episode recorded across several files arrives as several
fragments with the same id whose ``t`` ranges follow each other. :func:`stitch_fragments` joins them
(``Episode.concat_fragments`` checks that ``t`` continues and the boundary observation repeats);
fragments that cannot be joined are rejected through the caller's policy, never silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

from ..config import OnInvalid
from ..errors import DataError, EpisodeValidationError, Where
from .episode import Episode
from .ledger import EpisodeBatch

__all__ = ["settle_open_episodes", "stitch_fragments"]


def stitch_fragments(batch: EpisodeBatch, on_invalid: OnInvalid = "raise") -> EpisodeBatch:
    """A new batch in which fragments sharing ``(id, agent_id)`` are joined (first-seen order).

    Only chains that continue (``t_started`` equal to the previous fragment's end, previous not
    done) are joined. Overlapping copies stay separate, for the de-duplicator to count; a chain
    whose boundary observations disagree is rejected under ``on_invalid`` (the reading stage's
    policy: ``ReadConfig.on_invalid``).
    """
    groups: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, ep in enumerate(batch.episodes):
        groups[(ep.id, ep.agent_id)].append(i)
    out = EpisodeBatch(ledger=batch.ledger, rejections=batch.rejections)
    out.declared_spaces = batch.declared_spaces
    eps, src = batch.episodes, batch.source_rows
    for idx in groups.values():
        if len(idx) == 1:
            out.add(eps[idx[0]], src[idx[0]])
            continue
        for chain in _chains(sorted(idx, key=lambda i: (eps[i].t_started, i)), eps):
            rows = sum(src[i] for i in chain)
            try:
                joined = Episode.concat_fragments(eps[i] for i in chain)
            except DataError as e:
                out.reject(e, rows, episodes=1, policy=on_invalid)
                continue
            out.add(joined, rows)
    return out


def _chains(order: list[int], eps: list[Episode]) -> list[list[int]]:
    """Splits fragments (sorted by t_started) into runs that continue one another."""
    chains: list[list[int]] = []
    for i in order:
        for chain in chains:
            last = eps[chain[-1]]
            if not last.is_done and eps[i].t_started == last.t_end:
                chain.append(i)
                break
        else:
            chains.append([i])
    return chains


def settle_open_episodes(batch: EpisodeBatch, policy: str, on_invalid: str) -> int:
    """What a conversion does with the episodes that never end within the data, once their
    fragments are joined; returns how many there are.

    Under ``policy="reject"`` each is refused (reason ``not_done``): quarantined under
    ``on_invalid="quarantine"``, otherwise skipped and counted (an open end is what
    ``fragments="reject"`` asks to drop, not bad data to stop the job for). Any other policy keeps
    them as not-done episodes.
    """
    open_ = [not e.is_done for e in batch.episodes]
    if policy == "reject" and any(open_):
        dropped, rows = batch.keep_only([not o for o in open_])
        how: Literal["skip", "quarantine"] = "quarantine" if on_invalid == "quarantine" else "skip"
        for ep, r in zip(dropped, rows, strict=True):
            err = EpisodeValidationError(
                f"episode never ends within the data (last step t={ep.t_end - 1}); "
                "fragments='keep' writes it as a not-done episode",
                Where(episode_id=ep.id, timestep=ep.t_end),
                reason="not_done",
            )
            batch.reject(err, r, episode=ep, policy=how)
    return sum(open_)
