"""MixInReplayBuffer: every batch holds all the new data, plus replayed old data by a fixed ratio.

::

    buf = MixInReplayBuffer(1_000_000, unit=NStep(3, 0.99), replay_ratio=0.75, seed=0)
    buf.add(fresh_episodes)             # e.g. 64 new timesteps
    batch = buf.sample()                # those 64 steps (rows 0..63) + 192 replayed (rows 64..)
    batch.info                          # {"new": 64, "replayed": 192}

**New** means: start steps that became sampleable since the previous ``sample`` call. For
``Transition`` units that is exactly the timesteps added since then; for windowed units (n-step,
sequences) a step of a still-streaming episode becomes new when its window is complete, i.e. when
the episode continues or ends (so windows are never cut short by a batch boundary). A step
evicted before the next sample never comes out; data added before ``learning_starts`` is reached
comes out in the first batch after it.

**The mix.** The batch holds every new step once, first, in placement order, then ``k`` steps
drawn by the sampler (``Uniform`` or ``Prioritized``, any :class:`Sampler`) from the *old* steps
only -- those already sampleable at the previous call -- expanded by the same unit. With
``r = replay_ratio``, ``k`` makes ``replayed / (replayed + new) = r``:

* ``0 < r < 1``: ``k = round(n_new * r / (1 - r))``, the rounding error carried to the next
  batch, so the running totals keep ``|replayed - r * total| < 1``; whenever ``n_new * r / (1 -
  r)`` is an integer the batch has exactly that many.
* ``r = 0``: only new steps (``k = 0``). ``r = 1``: only replay -- ``sample(batch_size)`` draws
  ``batch_size`` steps from everything held, new data included, like :class:`EpisodeReplayBuffer`.
* **No new data** (and ``r < 1``): :class:`EmptyBufferError`; a mix-in batch is built around new
  data, so there is none to build. **No old data** yet (the first batch): only the new steps come
  out and the replay owed for them is dropped, not carried.

``r < 1`` batches are sized by the data, so ``sample()`` takes no ``batch_size`` then (a
:class:`ConfigError` if given); ``r = 1`` requires one.

Rows carry ``weights`` (1 for new steps; the sampler's importance weights for replayed ones) and
``indices``; with a prioritized sampler :meth:`update_priorities` takes them as usual. New steps
are held out of the sampler only for the replay draw (``on_evict`` before it, ``on_add`` after),
so they re-enter a prioritized sampler at the maximum priority seen so far. The ratio, the
carried rounding error and the set of pending new steps are part of :meth:`get_state`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ..config import check_float
from ..errors import ConfigError, DataError, EmptyBufferError, Where
from .batch import SampleBatch
from .rate_limit import SampleToInsertRatio
from .replay_buffer import EpisodeReplayBuffer, _batch_size, expand_changes
from .reservoir import Reservoir
from .samplers.base import Sampler, UpdatableSampler, ValidStarts, ranges
from .storage.changes import Change, Placements
from .units.base import SampleUnit

__all__ = ["MixInReplayBuffer"]


class MixInReplayBuffer(EpisodeReplayBuffer):
    """All new steps on the next sample, plus replay at ``replay_ratio``; see the module docstring.

    Args:
        capacity: Slots of ring storage: timesteps plus one final observation per episode.
        sampler: Draws the replayed part (default ``Uniform()``; ``Prioritized(...)`` works).
        unit: What each step expands into (default ``Transition()``), for new and old alike.
        replay_ratio: ``replayed / (replayed + new)``, in ``[0, 1]``.
        seed, learning_starts, eviction, rate_limit: As for :class:`EpisodeReplayBuffer`.
    """

    def __init__(
        self,
        capacity: int,
        sampler: Sampler | None = None,
        unit: SampleUnit | None = None,
        *,
        replay_ratio: float = 0.5,
        seed: int | None = None,
        learning_starts: int = 0,
        eviction: Reservoir | None = None,
        rate_limit: SampleToInsertRatio | None = None,
    ) -> None:
        super().__init__(
            capacity,
            sampler,
            unit,
            seed=seed,
            learning_starts=learning_starts,
            eviction=eviction,
            rate_limit=rate_limit,
        )
        self._ratio = _ratio(replay_ratio)
        # Episodes with new steps: id -> how many valid starts it had at the last sample (0 for
        # an episode added since). Its new steps are the valid starts beyond that prefix.
        self._seen: dict[int | str, int] = {}
        self._debt = 0.0  # replay owed but not drawn (rounding), in [-0.5, 0.5]
        self.new_drawn = 0
        self.replayed_drawn = 0

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", replay_ratio={self._ratio})"

    @property
    def replay_ratio(self) -> float:
        """Share of replayed rows in a sample, ``replayed / (replayed + new)``."""
        return self._ratio

    # ------------------------------------------------------------------ tracking new steps
    def _notify(self, changes: list[Change | Placements]) -> None:
        records = expand_changes(changes)  # the loop below reads Change records
        super()._notify(list(records))
        seen = self._seen
        keys, lengths, done = [], [], []
        for ch in records:
            key = ch.key
            if key is None or ch.kind in ("duplicate", "noop", "rejected", "relocated"):
                continue
            if ch.kind == "new":
                seen[key] = 0
            elif key not in seen:  # appended / flagged / moved: new beyond what it had
                keys.append(key)
                if ch.kind == "moved":  # its first removed record is its old place
                    lengths.append(ch.removed_length[0])
                    done.append(False)
                else:
                    lengths.append(ch.prev_length)
                    done.append(ch.prev_done)
        if keys:
            before = self.unit.valid_starts(np.array(lengths, np.int64), np.array(done, bool))
            seen.update(zip(keys, np.asarray(before).tolist(), strict=True))

    def _split(self) -> tuple[ValidStarts, np.ndarray, np.ndarray]:
        """The valid starts now; per row how many of them are old (the rest are new); and the
        rows with new steps, ascending."""
        valid = self.valid_starts()
        old = valid.count.copy()
        row_of = self.storage.row_of_id
        rows = []
        for key, before in self._seen.items():
            row = row_of(key)
            if row is not None and before < old[row]:
                old[row] = before
                rows.append(row)
        return valid, old, np.sort(np.array(rows, np.int64))

    # ------------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None = None) -> SampleBatch:
        """All new steps, then replayed ones; see the module docstring for the exact counts.

        Args:
            batch_size: Rows to draw with ``replay_ratio = 1`` (replay only); must be None
                otherwise, where the new steps decide the size.

        Returns:
            The batch, new rows first; ``info["new"]`` and ``info["replayed"]`` count them.

        Raises:
            ConfigError: ``batch_size`` given with ``replay_ratio < 1``, or missing with 1.
            EmptyBufferError: before ``learning_starts``; with ``replay_ratio < 1`` when nothing
                new arrived since the last sample; with 1 when nothing is sampleable.
            RateLimitExceeded: the batch would break the buffer's rate limit (nothing drawn).
        """
        if self._ratio == 1.0:
            if batch_size is None:
                raise ConfigError("replay_ratio=1 draws only replay: pass sample(batch_size)")
            batch = super().sample(_batch_size(batch_size))
            self._seen.clear()
            self.replayed_drawn += len(batch)
            batch.info.update(new=0, replayed=len(batch))
            return batch
        if batch_size is not None:
            raise ConfigError(
                f"with replay_ratio={self._ratio} a batch holds all new steps plus their share "
                "of replay, so its size follows the data: call sample() without batch_size"
            )
        self._check_learning_starts()
        valid, old, new_rows = self._split()
        fresh = valid.count.take(new_rows) - old.take(new_rows)
        n_new = int(fresh.sum())
        if n_new == 0:
            raise EmptyBufferError(
                "no new data since the last sample: a mix-in batch (replay_ratio="
                f"{self._ratio}) is built around new steps; add episodes first"
            )
        n_old = valid.total - n_new
        debt = self._debt  # with no old data the replay owed now is dropped; the carry stays
        k = 0
        if self._ratio > 0.0 and n_old > 0:
            debt = self._debt + n_new * self._ratio / (1.0 - self._ratio)
            k = math.floor(debt + 0.5)
            debt -= k
        self._check_rate(n_new + k)
        new_slots = ranges(valid.first.take(new_rows) + old.take(new_rows), fresh)
        new_rows = np.repeat(new_rows, fresh)
        slots, rows, weights = new_slots, new_rows, None
        if k:
            sampler, st = self.sampler, self.storage
            # The replay sampler sees the old steps only: the new ones leave it for the draw
            # (for Uniform that is the `old` counts; prioritized trees need the hooks).
            sampler.on_evict(st, new_slots)
            try:
                r_slots, info = sampler.sample(
                    st, k, self.rng, ValidStarts(valid.first, old, valid.version)
                )
            finally:
                sampler.on_add(st, new_slots)
            r_rows = info.get("rows")
            if r_rows is None:
                r_rows = st.rows_of(r_slots)
            slots = np.concatenate([new_slots, r_slots])
            rows = np.concatenate([new_rows, r_rows])
            w = info.get("weights")
            if w is not None:
                weights = np.concatenate([np.ones(n_new, np.float32), np.asarray(w, np.float32)])
        batch = self._emit(slots, rows, weights)
        self._seen.clear()
        self._debt = debt
        self.new_drawn += n_new
        self.replayed_drawn += k
        batch.info.update(new=n_new, replayed=k)
        return batch

    def update_priorities(self, indices: npt.ArrayLike, priorities: npt.ArrayLike) -> int:
        """Forwards to a prioritized sampler (see ``PrioritizedEpisodeReplayBuffer``).

        Args:
            indices: int64 handles, the ``indices`` column of a sample.
            priorities: One TD error or priority per handle.

        Returns:
            How many handles were current and applied.

        Raises:
            TypeError: the sampler keeps no priorities.
        """
        if not isinstance(self.sampler, UpdatableSampler):
            raise TypeError(
                f"update_priorities needs a sampler with priorities, this buffer has "
                f"{self.sampler!r}"
            )
        return self.sampler.update_priorities(
            self.storage, np.asarray(indices), np.asarray(priorities)
        )

    # ------------------------------------------------------------------ stats and state
    def stats(self) -> dict[str, int]:
        """The base counters plus ``new_drawn``, ``replayed_drawn`` and ``new_pending`` (new
        steps the next sample will return)."""
        out = super().stats()
        valid, old, _ = self._split()
        out["new_drawn"] = self.new_drawn
        out["replayed_drawn"] = self.replayed_drawn
        out["new_pending"] = valid.total - int(old.sum())
        return out

    def get_state(self) -> dict[str, Any]:
        """The buffer's state plus which stored steps were already handed out as new."""
        state = super().get_state()
        _, old, _ = self._split()
        seen = np.full(self.storage.num_rows, -1, np.int64)
        for key in self._seen:
            row = self.storage.row_of_id(key)
            if row is not None:
                seen[row] = old[row]
        state["arrays"]["mixin/seen"] = seen
        state["meta"]["mixin"] = {
            "replay_ratio": self._ratio,
            "debt": self._debt,
            "new_drawn": self.new_drawn,
            "replayed_drawn": self.replayed_drawn,
        }
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`get_state`'s state.

        Args:
            state: ``{"meta", "arrays"}`` as :meth:`get_state` returned it, with the ``mixin``
                section and the ``mixin/seen`` array.

        Raises:
            ConfigError: a state not of a mix-in buffer, or saved with another
                ``replay_ratio``.
            DataError: ``mixin/seen`` does not fit the restored table.
        """
        mix = state["meta"].get("mixin")
        if not isinstance(mix, dict):
            raise ConfigError("state is not of a MixInReplayBuffer (no 'mixin' section)")
        if float(mix["replay_ratio"]) != self._ratio:
            raise ConfigError(
                f"state was saved with replay_ratio {mix['replay_ratio']}, this buffer has "
                f"{self._ratio}"
            )
        seen = np.asarray(state["arrays"].get("mixin/seen", np.zeros(0, np.int64)))
        super().set_state(state)
        if seen.shape != (self.storage.num_rows,) or seen.dtype.kind not in "iu":
            raise DataError(
                f"mixin/seen is {seen.dtype}{list(seen.shape)}, the table has "
                f"{self.storage.num_rows} rows",
                Where(column="mixin/seen"),
            )
        if (seen < -1).any() or (seen > self.valid_starts().count).any():
            raise DataError(
                "mixin/seen counts more old steps than a row holds", Where(column="mixin/seen")
            )
        ids = self.storage.ids
        self._seen = {ids[r]: int(seen[r]) for r in np.flatnonzero(seen >= 0)}
        self._debt = float(mix["debt"])
        self.new_drawn = int(mix["new_drawn"])
        self.replayed_drawn = int(mix["replayed_drawn"])


def _ratio(value: object) -> float:
    v = value.item() if isinstance(value, np.generic) else value
    return float(check_float("replay_ratio", v, 0.0, 1.0))  # the rule buffer.replay_ratio follows
