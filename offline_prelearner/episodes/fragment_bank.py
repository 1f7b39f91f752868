"""Fragments of episodes still open, joined by ``t`` whatever order they arrive in.

Ray Data hands a prelearner its batches in no promised order (``preserve_order`` is off), and with
more than one ``map_batches`` actor the fragments of one episode cut at a batch edge land in
different actors. :class:`OpenFragments` holds the fragments of episodes not complete yet, keyed
``(episode id, agent id)``, and says when one is:

* **Complete** means its fragments cover ``t`` contiguously from ``t = 0`` (the episode's first
  step: RLlib's convention, ``SingleAgentEpisode.t_started == 0`` for a fresh episode) to a done
  step. The joined episode (``EpisodeColumns.join_fragments``: ``t`` continues and each fragment
  starts with the previous one's last observation, else an error naming the episode and ``t``)
  is handed back once and its fragments leave. A fragment that follows a done one stays held.
* **An episode recorded from a later t** (data whose first fragment of an episode has
  ``t_started > 0``: a recording that began mid-episode, or an episode whose earlier fragment was
  rejected) is never complete: nothing says no earlier fragment is still to come, so its
  fragments stay held and counted (``len()``), rather than a partial episode going out as whole.
* **A duplicate** is a fragment whose steps overlap steps held for its key: it is dropped and
  counted (:attr:`OpenFragments.duplicates`), never joined. (Overlap with steps already handed
  back is the prelearner's :class:`~offline_prelearner.episodes.dedupe.Deduplicator`'s, which
  sees every fragment of its stream; the bank forgets an episode once complete, see below.)

Without a ``t`` column a reader numbers an episode's fragments in arrival order (``t_started``
counts on from 0), so the same rule is then the arrival-order rule: fragments are assumed to
arrive in order.

:class:`FragmentBank` is the place the fragments of every prelearner of one ``map_batches`` stage
meet (``offline_prelearner.rllib`` serves it as one named Ray actor): each caller deposits the
fragments it could not complete and gets back the episodes its deposit completed, each exactly
once. A completed episode's fragments are cleared at once, so a later epoch (RLlib runs the map
again, in new actors) never meets them: after a full epoch the bank holds only fragments that
can never complete (a gap in ``t``, no done step, no ``t = 0``), and a later epoch's copies of
those overlap them and are counted as duplicates, never joined into anything emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .episode_columns import EpisodeColumns

__all__ = ["FragmentBank", "OpenFragments"]

Key = tuple[Any, Any]


class OpenFragments:
    """The fragments of episodes not complete yet, joined by ``t`` (see the module docstring).

    Per key, a list of one-episode tables sorted by ``t_started``; only the few fragments cut at
    batch edges ever get here, so the bookkeeping is per fragment.
    """

    def __init__(self) -> None:
        self._held: dict[Key, list[EpisodeColumns]] = {}
        #: Fragments dropped because their steps overlap steps held for their key.
        self.duplicates = 0

    def __len__(self) -> int:
        """Fragments held."""
        return sum(len(v) for v in self._held.values())

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __iter__(self) -> Iterator[Key]:
        return iter(self._held)

    @property
    def rows(self) -> int:
        """Steps held, over every fragment."""
        return sum(int(p.length[0]) for v in self._held.values() for p in v)

    def add(self, key: Key, part: EpisodeColumns) -> EpisodeColumns | None:
        """Holds one fragment; returns its episode joined when it is now complete.

        Args:
            key: ``(episode id, agent id)`` of the fragment.
            part: The fragment, as a table of exactly one episode.

        Returns:
            The joined episode (a one-episode table, its fragments no longer held) when the
            fragments of ``key`` now cover ``t`` from 0 to a done step; else None (the fragment
            is held, or dropped as a duplicate and counted).

        Raises:
            EpisodeValidationError: the fragments that cover the episode do not continue one
                another (the first observation of one is not the last of the previous); they
                are no longer held.
        """
        a = int(part.t_started[0])
        b = a + int(part.length[0])
        held = self._held.get(key)
        if held is None:
            if a == 0 and bool(part.done[0]):
                return part  # a whole episode: nothing to join
            self._held[key] = [part]
            return None
        starts = [int(p.t_started[0]) for p in held]
        ends = [s + int(p.length[0]) for s, p in zip(starts, held, strict=True)]
        if a < b and any(s < b and a < e for s, e in zip(starts, ends, strict=True)):
            self.duplicates += 1
            return None
        at = int(np.searchsorted(starts, a, side="right"))
        held.insert(at, part)
        run = _complete_run(held)
        if run is None:
            return None
        if run == len(held):
            del self._held[key]
        else:
            self._held[key] = held[run:]
        return EpisodeColumns.join_fragments(held[:run])

    def drain(self) -> list[tuple[Key, EpisodeColumns]]:
        """Every fragment held, with its key, in key order; nothing is held afterwards.

        Returns:
            ``(key, one-episode table)`` per fragment.
        """
        out = [(k, p) for k, v in self._held.items() for p in v]
        self._held = {}
        return out


def _complete_run(held: list[EpisodeColumns]) -> int | None:
    """How many of ``held`` (sorted by ``t_started``) make a complete episode from ``t = 0``:
    contiguous fragments up to the first done one; None when they do not (yet)."""
    if int(held[0].t_started[0]) != 0:
        return None
    end = 0
    for i, p in enumerate(held):
        if int(p.t_started[0]) != end:
            return None
        if bool(p.done[0]):
            return i + 1
        end += int(p.length[0])
    return None


class FragmentBank:
    """Where the prelearners of one ``map_batches`` stage leave the fragments each cannot
    complete (one Ray actor serves it; see the module docstring).

    Calls run one at a time (a Ray actor's default), so the deposit that completes an episode is
    the only one that gets it back.
    """

    def __init__(self) -> None:
        self._open = OpenFragments()
        self._counters = {"deposits": 0, "fragments": 0, "episodes_completed": 0}

    def deposit(
        self, parts: Iterable[tuple[Key, EpisodeColumns]]
    ) -> tuple[list[EpisodeColumns], int]:
        """Holds fragments and hands back the episodes they complete.

        Args:
            parts: ``(key, one-episode table)`` per fragment, as :meth:`OpenFragments.drain`
                gives them.

        Returns:
            The episodes these fragments completed (one table each, each handed out once) and
            how many of the fragments were dropped as duplicates.
        """
        before = self._open.duplicates
        done: list[EpisodeColumns] = []
        for key, part in parts:
            self._counters["fragments"] += 1
            joined = self._open.add(key, part)
            if joined is not None:
                done.append(joined)
        self._counters["deposits"] += 1
        self._counters["episodes_completed"] += len(done)
        return done, self._open.duplicates - before

    def stats(self) -> dict[str, int]:
        """What the bank has seen: deposits, fragments, episodes completed, duplicates, and the
        fragments (and their steps) it holds now."""
        return {
            **self._counters,
            "duplicates": self._open.duplicates,
            "held_fragments": len(self._open),
            "held_rows": self._open.rows,
        }
