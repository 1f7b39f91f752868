"""Reservoir eviction: the buffer holds a uniform random sample of every episode ever added.

::

    buf = EpisodeReplayBuffer(100_000, eviction=Reservoir(seed=0))
    buf.add(stream_of_episodes)         # after 10M timesteps: ~1% of each part of the stream held

**Which episodes are held.** Vitter's algorithm R at the *episode* level, in its random-tag form:
every episode gets a key ``u`` in ``[0, 1)``, a hash of ``(seed, episode id)``, and the buffer
holds the episodes with the smallest keys that fit. Streaming, that is one number, the
``threshold``: the smallest key ever evicted or refused (1.0 until the buffer first fills).

* A new episode with ``u >= threshold`` is refused (counted in ``episodes_rejected`` /
  ``timesteps_rejected``, not in ``*_added``). Otherwise it is admitted and, while the held
  slots exceed the budget, the held episode with the largest key is evicted -- possibly the
  newcomer itself, which is then refused. Each eviction or refusal lowers the threshold to that key.
* So at every moment the held set is exactly ``{episodes with u < threshold}``, and it is the
  longest prefix, in key order, of *all* episodes ever added that fits the budget (a test checks
  this against a plain sort-and-cumsum reference).
* Keys are independent of lengths and of arrival order, so every episode ever added, and hence
  every timestep, has the same chance of being held: about ``budget / slots ever added``
  (exactly ``m / N`` for ``N`` equal-length episodes of which ``m`` fit, as in algorithm R; with
  mixed lengths an episode of ``s`` slots is held with probability about
  ``(budget - s) / (total - s)``, a bias of order ``s / budget``).
* Keys hash the id, so an episode is one item however it arrives: a fragment continuing a held
  episode is appended (its key may then push others out, or the episode itself), a fragment of
  a refused or evicted episode is refused too (its key is >= the threshold), and re-sending an
  evicted episode does not bring it back.

**Where they are stored.** The ring of :mod:`.storage.ring` writes only at its head, so admitted
episodes go to the head, and evicted ones leave holes behind it. The budget is ``capacity``
less a ``headroom`` fraction; when the head reaches the end of the ring, the held episodes are
*compacted* to its start (one vectorized, chunked gather per column, in place) and writing goes on
after them. With headroom ``h`` a compaction happens at most once per ``h * capacity`` admitted
slots; admissions themselves thin out as ``budget / total`` over a long stream.

A compaction re-places the episodes it moves. Samplers see them leave their old slots and arrive
at the new ones (records of kind ``"relocated"``); prioritized samplers therefore restart those
steps at the maximum priority. Episodes that did not move keep their slots, and their priorities.
Every held episode gets a new placement serial, so priority updates for samples drawn before a
compaction are dropped as stale.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import MAX_SEED, check_float, check_int
from ..episodes.episode import Episode
from ..errors import ConfigError, DataError, EpisodeValidationError, Where
from .samplers.base import ranges
from .storage.obs_leaves import same_obs
from .storage.ring import Change, EpisodeStorage, normalize_id

__all__ = ["Reservoir", "ReservoirStorage"]

_COUNTERS = ("episodes_rejected", "timesteps_rejected", "compactions", "episodes_relocated")
_CHUNK_BYTES = 16 << 20  # rows gathered per step of a compaction: bounded temporary memory


@dataclass(frozen=True)
class Reservoir:
    """Reservoir eviction for an :class:`~offline_prelearner.replay.EpisodeReplayBuffer`.

    Args:
        seed: Seeds the keys (an int in ``[0, 2**63)``); the same seed and ids give the same
            held set, whatever the order or batching of the adds.
        headroom: Fraction of the capacity kept free for writing between compactions, in
            ``[0, 0.9]``. The reservoir holds at most ``capacity - floor(capacity * headroom)``
            slots. 0 is allowed but compacts on almost every admission once full.
    """

    seed: int = 0
    headroom: float = 0.1

    def __post_init__(self) -> None:
        s, h = (v.item() if isinstance(v, np.generic) else v for v in (self.seed, self.headroom))
        object.__setattr__(self, "seed", check_int("seed", s, 0, MAX_SEED))
        object.__setattr__(self, "headroom", float(check_float("headroom", h, 0.0, 0.9)))

    def budget(self, capacity: int) -> int:
        """Slots the reservoir may hold in a ring of ``capacity`` slots.

        Args:
            capacity: The ring's slots.

        Returns:
            ``capacity - floor(capacity * headroom)``.
        """
        return capacity - math.floor(capacity * self.headroom)

    def key(self, eid: Any) -> float:
        """The episode's key in ``[0, 1)``: 53 bits of BLAKE2b over the seed and the normalized
        id (ints and strings hash apart: ``1`` and ``"1"`` are different episodes).

        Args:
            eid: An episode id (normalized as the storage keys it).

        Returns:
            A float in ``[0, 1)``; an episode is held while its key is below the threshold.
        """
        return self._key(normalize_id(eid))

    def _key(self, nid: int | str) -> float:
        """:meth:`key` of an id already normalized."""
        tag = b"i" if isinstance(nid, int) else b"s"
        data = self.seed.to_bytes(8, "little") + tag + str(nid).encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(data, digest_size=8).digest()
        return (int.from_bytes(digest, "little") >> 11) * 2.0**-53

    def make_storage(self, capacity: int) -> ReservoirStorage:
        """A :class:`ReservoirStorage` of ``capacity`` slots that follows this policy.

        Args:
            capacity: The ring's slots.

        Returns:
            A new, empty storage.
        """
        return ReservoirStorage(capacity, self)


class ReservoirStorage(EpisodeStorage):
    """:class:`EpisodeStorage` whose admissions and evictions follow a :class:`Reservoir`.

    Args:
        capacity: Slots of the ring (timesteps plus one final observation per episode).
        policy: The reservoir; its ``budget(capacity)`` must leave at least 2 slots.

    Raises:
        ConfigError: the budget leaves fewer than 2 slots.
    """

    def __init__(self, capacity: int, policy: Reservoir) -> None:
        super().__init__(capacity)
        self.policy = policy
        self.budget = policy.budget(self.capacity)
        if self.budget < 2:
            raise ConfigError(
                f"capacity {self.capacity} with headroom {policy.headroom} leaves "
                f"{self.budget} slots; the reservoir needs at least 2"
            )
        self.threshold = 1.0
        self.held_slots = 0  # sum of length + 1 over held episodes
        self._heap: list[tuple[float, int | str]] = []  # (-key, id) of every held episode
        for name in _COUNTERS:
            self.counters[name] = 0

    # ------------------------------------------------------------------ adding
    def add_episode(self, episode: Episode) -> Change:
        """Admits ``episode`` if its key is below the threshold (evicting the largest keys while
        over budget), or extends it if held; returns what changed.

        Args:
            episode: An episode, or a fragment continuing one (same id).

        Returns:
            The change record (kind ``"new"``, ``"appended"``, ``"rejected"``, ...): evicted
            episodes under ``removed_*``, episodes a compaction moved under ``side``.

        Raises:
            EpisodeValidationError: the episode needs more slots than the budget
                (``too_long``), or its columns do not match the storage's.
        """
        key = normalize_id(episode.id)
        idx = self.table.index_of(key)
        if not self.columns:
            self._allocate(episode)
        self._check_columns(episode)
        change = self._admit(episode, key) if idx is None else self._extend(episode, key, idx)
        change.key = key
        return change

    def _admit(self, ep: Episode, key: int | str) -> Change:
        need = len(ep) + 1
        if need > self.budget:
            raise self._too_long(ep.id, len(ep))
        u = self.policy._key(key)
        change = Change("new")
        if u >= self.threshold or not self._make_room(need, u, None, change):
            self.threshold = min(self.threshold, u)
            change.kind = "rejected"
            self.counters["episodes_rejected"] += 1
            self.counters["timesteps_rejected"] += len(ep)
            return change
        self._place(ep, key, change)
        heapq.heappush(self._heap, (-u, key))
        self.held_slots += need
        self.counters["episodes_added"] += 1
        self.counters["timesteps_added"] += len(ep)
        return change

    def _extend(self, ep: Episode, key: int | str, idx: int) -> Change:
        start, n, t0, term, trunc = self.table.get(idx)
        k = len(ep)
        grows = (
            k > 0
            and ep.t_started == t0 + n
            and not (term or trunc)
            and same_obs(self.columns, start + n, ep.observations, 0)
        )
        if not grows:  # duplicates, news of the end, and contradictions: the base decides
            return super()._continue(ep, idx)
        if n + k + 1 > self.budget:
            raise self._too_long(ep.id, n + k)
        u = self.policy._key(key)
        pre = Change("appended")
        if not self._make_room(k, u, key, pre):
            # The episode itself now has the largest key: it leaves, the fragment is refused.
            heapq.heappop(self._heap)
            self._evict(key, pre)
            self.threshold = min(self.threshold, u)
            pre.kind = "rejected"
            self.counters["timesteps_rejected"] += k
            return pre
        change = super()._continue(ep, idx)
        change.removed_start += pre.removed_start  # after the episode's own old place, if moved
        change.removed_length += pre.removed_length
        change.removed_done += pre.removed_done
        self.held_slots += k
        return change

    def _too_long(self, eid: Any, n: int) -> EpisodeValidationError:
        return EpisodeValidationError(
            f"episode of {n} steps needs {n + 1} slots but the reservoir holds at most "
            f"{self.budget} (capacity {self.capacity} less headroom {self.policy.headroom})",
            Where(episode_id=eid),
            reason="too_long",
        )

    def _make_room(self, need: int, u: float, own: int | str | None, change: Change) -> bool:
        """Evicts held episodes with keys above ``u`` (largest first) until ``need`` more slots
        fit the budget. False when the next one to go would be the newcomer (``own is None``)
        or the growing episode ``own`` itself."""
        heap = self._heap
        while self.held_slots + need > self.budget:
            if not heap:
                return False
            top_u, top_id = -heap[0][0], heap[0][1]
            if top_id == own or (own is None and top_u <= u):
                return False
            heapq.heappop(heap)
            self._evict(top_id, change)
            self.threshold = min(self.threshold, top_u)
        return True

    def _evict(self, key: int | str, change: Change) -> None:
        idx = self.table.index_of(key)
        assert idx is not None, "a held episode's key is missing from the table"
        start, n, _, term, trunc = self.table.get(idx)
        change.removed_start.append(start)
        change.removed_length.append(n)
        change.removed_done.append(term or trunc)
        self.table.kill(idx)
        self.held_slots -= n + 1
        self.counters["episodes_evicted"] += 1
        self.counters["timesteps_evicted"] += n

    # ------------------------------------------------------------------ placement
    def places_runs(self) -> bool:
        """False: admission draws a key per episode (see :meth:`add_episode`)."""
        return False

    def _place(self, ep: Episode, key: int | str, change: Change) -> None:
        if self.head + len(ep) + 1 > self.capacity:
            self._compact(change)
        super()._place(ep, key, change)

    def _compact(self, change: Change) -> None:
        """Moves every held episode to the start of the ring, in order, and rebuilds the table.
        Writes never wrap here, so placement order is slot order and every move goes left."""
        tab = self.table
        rows = np.flatnonzero(tab.view("alive"))
        starts = tab.view("start")[rows]
        lengths = tab.view("length")[rows]
        sizes = lengths + 1
        new_starts = np.cumsum(sizes) - sizes
        total = int(sizes.sum())
        src = ranges(starts, sizes)
        for col in self.columns.values():
            step = max(1024, _CHUNK_BYTES // max(1, col[:1].nbytes))
            for a in range(0, total, step):
                b = min(total, a + step)
                col[a:b] = col.take(src[a:b], axis=0)  # src[j] >= j: sources not yet overwritten
        first, arrays = tab.get_state()
        live = {f: v[rows] for f, v in arrays.items()}
        live["start"] = new_starts
        serial0 = first + tab.num_rows
        tab.set_state(serial0, live)
        self.head = total
        # Every placement got a new serial; the moved ones also new slots. One record each (an
        # unmoved one has no removal: samplers keep its slots, buffers re-key it).
        done = (live["terminated"] | live["truncated"]).tolist()
        ids = tab.view("ids").tolist()
        old_s, new_s, lens = starts.tolist(), new_starts.tolist(), lengths.tolist()
        moved = 0
        for i, (a, b, n, d) in enumerate(zip(old_s, new_s, lens, done, strict=True)):
            ch = Change("relocated", start=b, length=n, done=d, serial=serial0 + i, key=ids[i])
            if a != b:
                ch.removed_start, ch.removed_length, ch.removed_done = [a], [n], [d]
                moved += 1
            else:
                ch.prev_length, ch.prev_done = n, d
            change.side.append(ch)
        self.counters["compactions"] += 1
        self.counters["episodes_relocated"] += moved

    # ------------------------------------------------------------------ state
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The storage's state plus the policy and the current admission threshold."""
        meta, arrays = super().get_state()
        meta["reservoir"] = {"policy": repr(self.policy), "threshold": self.threshold}
        return meta, arrays

    def set_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Restores :meth:`get_state`'s state.

        Args:
            meta: The state's metadata, with the ``reservoir`` section.
            arrays: The state's arrays (the ring's columns and table).

        Raises:
            ConfigError: the state was saved under another policy (or FIFO eviction).
            DataError: a bad threshold, a wrapped table or a threshold not above every held
                key (a corrupt checkpoint).
        """
        res = meta.get("reservoir")
        if not isinstance(res, dict) or res.get("policy") != repr(self.policy):
            found = res.get("policy") if isinstance(res, dict) else "FIFO eviction"
            raise ConfigError(f"state was saved with {found}, this storage has {self.policy!r}")
        threshold = res.get("threshold")
        if not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise _corrupt("threshold", f"must be a number in [0, 1], found {threshold!r}")
        starts = np.asarray(arrays.get("tab/start", ()))
        if (np.diff(starts) <= 0).any():
            raise _corrupt("tab/start", "wraps the ring; a reservoir writes in slot order")
        super().set_state(meta, arrays)
        self.threshold = float(threshold)
        alive = self.alive
        ids = self.ids[alive]
        self._heap = [(-self.policy._key(i), i) for i in ids]
        heapq.heapify(self._heap)
        self.held_slots = int((self.lengths[alive] + 1).sum())
        if self.held_slots > self.budget:
            raise _corrupt(
                "tab/length", f"holds {self.held_slots} slots, the budget is {self.budget}"
            )
        if self._heap and -self._heap[0][0] >= self.threshold:
            raise _corrupt("threshold", f"{threshold} is not above every held episode's key")
        for name in _COUNTERS:
            self.counters.setdefault(name, 0)


def _corrupt(field: str, message: str) -> DataError:
    return DataError(
        f"reservoir {field} {message}", Where(column=field), reason="corrupt_checkpoint"
    )
