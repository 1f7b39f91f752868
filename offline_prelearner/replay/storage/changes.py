"""What an add did: the records a storage reports and buffers and samplers react to.

:class:`Change` describes what one :meth:`~.ring.EpisodeStorage.add_episode` did to one episode
(new, appended, moved, duplicate, ...) and what it evicted on the way. :class:`Placements`
describes a run of new episodes that :meth:`~.ring.EpisodeStorage.add_columns` placed together,
as arrays:
exactly the ``"new"`` changes their ``add`` calls would have returned
(:meth:`Placements.to_changes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Change", "Placements"]


@dataclass
class Change:
    """What one :meth:`~.ring.EpisodeStorage.add_episode` did, for samplers' hooks and counters.

    ``removed_*`` describe episodes whose slots stopped being usable (evicted, or the old place of
    a moved episode -- for kind ``"moved"`` always the first record), with their length and done
    flag at that moment. ``start``/``length``/``done`` describe the written episode afterwards;
    ``prev_length``/``prev_done`` its state before when it was extended in place
    (``prev_length`` is -1 when it was written fresh).
    ``key`` is the episode's normalized id. ``side`` holds records of *other* episodes the add
    re-placed on the way (a storage subclass that compacts its ring reports each moved episode
    there, as kind ``"relocated"``); a buffer handles them like changes of their own.
    """

    kind: str  # "new" | "appended" | "moved" | "duplicate" | "flagged" | "noop" | "relocated"
    removed_start: list[int] = field(default_factory=list)
    removed_length: list[int] = field(default_factory=list)
    removed_done: list[bool] = field(default_factory=list)
    start: int = -1
    length: int = 0
    done: bool = False
    prev_length: int = -1
    prev_done: bool = False
    serial: int = -1  # placement of the written episode
    key: int | str | None = None
    side: list[Change] = field(default_factory=list)


@dataclass
class Placements:
    """New episodes that one step of :meth:`~.ring.EpisodeStorage.add_columns` placed together:
    exactly what their ``add`` calls would have returned (a ``"new"`` :class:`Change` each), as
    arrays.

    ``removed_*`` hold the records their writes evicted, oldest first (the concatenation of the
    changes' lists); the other arrays hold one entry per episode, in the order they were added.
    """

    removed_start: np.ndarray
    removed_length: np.ndarray
    removed_done: np.ndarray
    start: np.ndarray
    length: np.ndarray
    done: np.ndarray
    serial: np.ndarray
    keys: list[int | str]

    def to_changes(self) -> list[Change]:
        """The per-episode :class:`Change` records (each eviction goes to the episode whose
        slots the evicted record started in)."""
        ends = self.start + self.length + 1
        owner = np.searchsorted(ends, self.removed_start, side="right").tolist()
        out = [
            Change("new", start=s, length=n, done=d, serial=x, key=k)
            for s, n, d, x, k in zip(
                self.start.tolist(),
                self.length.tolist(),
                self.done.tolist(),
                self.serial.tolist(),
                self.keys,
                strict=True,
            )
        ]
        removed = zip(
            self.removed_start.tolist(),
            self.removed_length.tolist(),
            self.removed_done.tolist(),
            strict=True,
        )
        for i, (s, n, d) in zip(owner, removed, strict=True):
            out[i].removed_start.append(s)
            out[i].removed_length.append(n)
            out[i].removed_done.append(d)
        return out
