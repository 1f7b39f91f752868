"""NStep: each sampled step expands into an n-step transition, truncated at the episode's end.

Semantics at the end of an episode, exactly:

* the window of ``n`` steps stops at the episode's last step: ``n_step`` is the number of steps
  actually taken, ``m = min(n, L - k)`` for a start at step ``k`` of an episode of ``L`` steps;
* ``rewards`` is ``sum(gamma**j * r[k + j] for j < m)``;
* ``new_obs`` is the observation after the last step taken, ``obs[k + m]``;
* ``terminateds`` is true only if the window reaches a terminated end (then do not bootstrap);
  ``truncateds`` likewise for a truncated end (bootstrap from ``new_obs``, the final
  observation, with ``gamma**n_step``).

``n`` is an int or an inclusive range ``(lo, hi)``; a range draws ``n`` per sample, uniformly from
``lo..hi`` *including* ``hi``. An unfinished episode offers only starts whose whole ``hi``-step
window is stored (``L - hi + 1`` of them); its last steps become valid starts when it continues or
ends, so a window is never cut short by a fragment boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...config import check_float, check_n_step
from ...episodes import columns as C
from ...errors import ConfigError
from ..batch import SampleBatch
from ..storage.obs_leaves import obs_names, output_names
from .base import AllSteps, episode_columns, stack_index

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = ["FixedNStepTable", "NStep"]


#: The n-step sums may overflow float64 (rewards near the float maximum): numpy's warning is
#: silenced here because the job checks every value it writes and refuses or counts it in one
#: line (``OfflinePreLearner.check_output``, ``samples_nonfinite``).
_OVERFLOW_CHECKED = np.errstate(over="ignore")


@dataclass(frozen=True)
class NStep:
    """n-step transitions with discount ``gamma``; ``n`` an int or an inclusive ``(lo, hi)``.

    Attributes:
        n: Steps per transition, an int in ``[1, MAX_N_STEP]`` or an inclusive ``(lo, hi)``
            range drawn per sample; a window stops at its episode's end.
        gamma: Discount in ``[0, 1]``.

    Raises:
        ConfigError: ``n`` or ``gamma`` out of range.
    """

    n: int | tuple[int, int] = 1
    gamma: float = 0.99

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_n_step("n", self.n))  # the rule sample.n_step follows
        object.__setattr__(self, "gamma", check_float("gamma", self.gamma, 0.0, 1.0))

    @property
    def bounds(self) -> tuple[int, int]:
        """``(lo, hi)``, inclusive; ``(n, n)`` for a fixed n."""
        return self.n if isinstance(self.n, tuple) else (self.n, self.n)

    def valid_starts(self, lengths: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Per episode, the steps whose longest window is stored (every step once the episode is
        done).

        Args:
            lengths: int stored steps of each episode (``[episodes]``).
            done: bool per episode, True when it terminated or was truncated (its last stored
                step is its last step).

        Returns:
            int64 ``[episodes]``: how many of each episode's first steps may start a sample.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        hi = self.bounds[1]
        return np.where(done, lengths, np.maximum(lengths - hi + 1, 0))

    def step_table(self) -> FixedNStepTable | None:
        """A :class:`FixedNStepTable` for an int ``n > 1`` (returns precomputed at add time),
        else None (a range of ``n`` draws per sample; ``n = 1`` is a transition)."""
        if isinstance(self.n, int) and self.n > 1:
            return FixedNStepTable(self)
        return None

    @_OVERFLOW_CHECKED
    def expand(
        self,
        slots: np.ndarray,
        rows: np.ndarray,
        storage: EpisodeStorage,
        rng: np.random.Generator,
        frames: int | None = None,
    ) -> SampleBatch:
        """The n-step transitions from ``slots``, with ``n`` drawn per sample from the range when it
        is one.

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.
            rng: Draws ``n`` per sample from ``lo..hi`` when ``n`` is a range; unused for an int.
            frames: None for plain observations, or ``k``: ``obs`` and ``new_obs`` as
                ``[B, k, *obs_shape]`` stacks.

        Returns:
            A batch of ``B`` n-step transitions; ``n_step`` holds the steps actually taken.
        """
        lo, hi = self.bounds
        b = len(slots)
        last = storage.last_and_t_base()[0].take(rows)
        remaining = last - slots + 1  # >= 1
        n = lo if lo == hi else rng.integers(lo, hi + 1, size=b)
        m = np.minimum(n, remaining)
        reached_end = m == remaining

        out = episode_columns(storage, slots, rows)
        rew_col = storage.columns["rewards"]
        if hi == 1:
            ret = out[C.REWARDS]
        elif hi <= 8:  # a loop over window positions (not samples): fewer temporaries
            ret = out[C.REWARDS].astype(np.float64)
            for j in range(1, hi):
                r = rew_col.take(slots + j, mode="clip")  # past the ring: the zero pad row
                r[m <= j] = 0
                ret += r * (self.gamma**j)
        else:
            pos = np.arange(hi, dtype=np.int64)
            window = rew_col.take(slots.reshape(-1, 1) + pos, mode="clip")
            window = np.where(pos < m.reshape(-1, 1), window, 0.0)
            ret = window @ (self.gamma ** pos.astype(np.float64))
        out[C.REWARDS] = ret.astype(np.result_type(rew_col.dtype, np.float32), copy=False)

        end = slots + m
        if frames is None:
            obs_at, new_at = slots, end
        elif hi == 1:
            start = storage.starts.take(rows)
            both_at = stack_index(slots + 1, start, frames + 1)
        else:
            start = storage.starts.take(rows)
            obs_at, new_at = stack_index(slots, start, frames), stack_index(end, start, frames)
        for ring in obs_names(storage.columns):  # one gather per leaf (plain: the one "obs")
            obs_col = storage.columns[ring]
            obs_name, new_name = output_names(ring)
            if frames is not None and hi == 1:
                both = obs_col.take(both_at, axis=0)
                out[obs_name], out[new_name] = both[:, :-1], both[:, 1:]
            else:
                out[obs_name] = obs_col.take(obs_at, axis=0)
                out[new_name] = obs_col.take(new_at, axis=0)
        out[C.TERMINATEDS] = storage.terminated.take(rows) & reached_end
        out[C.TRUNCATEDS] = storage.truncated.take(rows) & reached_end
        out[C.N_STEP] = m.astype(np.int32)
        return SampleBatch._trusted(out)

    @_OVERFLOW_CHECKED
    def expand_all(self, steps: AllSteps) -> SampleBatch | None:
        """Every step of whole episodes as an n-step transition, straight from their columns:
        what a buffer holding just them gives for the same steps drawn in order
        (:class:`~.base.ExpandsAll`; :class:`FixedNStepTable`'s sums for an int ``n > 1``, in
        its order). None for a range of ``n``, which draws per sample.

        Args:
            steps: The rows of whole, done episodes (:class:`~.base.AllSteps`), in table order.

        Returns:
            One n-step transition per row of ``steps``, or None for a range of ``n``.
        """
        if not isinstance(self.n, int):
            return None
        c, ep, n = steps.columns, steps.episode, self.n
        out = steps.common()
        m = np.minimum(n, steps.remaining)
        reached = m == steps.remaining
        rew = c.rewards
        dtype = np.result_type(rew.dtype, np.float32)
        ret = out[C.REWARDS]
        if n > 1:
            at = steps.step_index()
            ret = ret.astype(np.float64)
            for j in range(1, n):
                r = rew.take(at + j, mode="clip")  # past the window: zeroed below
                r[m <= j] = 0
                ret += r * (self.gamma**j)
        out[C.REWARDS] = ret.astype(dtype, copy=False)
        out[C.OBS] = steps.observations()
        out[C.NEW_OBS] = steps.observations(m)
        term = c.terminated.take(ep) & reached
        trunc = c.truncated.take(ep) & reached
        out[C.TERMINATEDS] = term
        out[C.TRUNCATEDS] = trunc & ~term if n > 1 else trunc
        out[C.N_STEP] = m.astype(np.int32)
        return SampleBatch._trusted(out)


class FixedNStepTable:
    """The fixed-``n`` fast path of :class:`NStep`: per stored step, the n-step return, the
    number of steps taken and how the window ends (inside, terminated, truncated), computed once (a
    vectorized pass over the steps that just became valid starts) instead of at every sample.

    ``NStep(n).step_table()`` gives one for an int ``n > 1``; the buffer holds it and feeds it
    the slots that become valid starts (:meth:`on_add`, the same slots its sampler gets). A valid
    start's window is stored whole, so its values are final -- except at the tail of an unfinished
    episode, whose last window "reaches the end" only until a fragment joins, and whose end flags
    change when it is flagged done: the buffer passes the ``n - 1`` valid starts before the new
    ones again (:meth:`refresh_from`), and they are recomputed. Evicted slots are never drawn,
    and are recomputed when reused. :meth:`expand` gives exactly what ``NStep.expand`` gives
    (the range path stays for ``(lo, hi)`` and frame stacks). Costs 9 bytes per slot.

    Args:
        unit: The :class:`NStep` whose values are cached; its ``n`` must be an int.

    Raises:
        ConfigError: ``unit.n`` is a range.
    """

    def __init__(self, unit: NStep) -> None:
        if not isinstance(unit.n, int):
            raise ConfigError(f"FixedNStepTable needs an int n, found {unit.n!r}")
        self.unit = unit
        self.n = unit.n
        self.returns = np.zeros(0, np.float32)
        self.steps = np.zeros(0, np.int32)  # steps taken, m = min(n, steps left)
        # How the window ends: 0 inside the episode (or at the stored end of an unfinished one),
        # 1 at a terminated end, 2 at a truncated end.
        self.end = np.zeros(0, np.int8)

    def refresh_from(self, first: np.ndarray) -> np.ndarray:
        """Where recomputation starts for a placement whose valid starts grew from slot
        ``first``: ``n - 1`` slots earlier (their windows may have stopped reaching the end).

        Args:
            first: int64 slot of each placement's first new valid start.

        Returns:
            ``first - (n - 1)``, elementwise.
        """
        return first - (self.n - 1)

    @_OVERFLOW_CHECKED
    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Computes the values of ``slots`` (valid starts of the storage as it is now).

        Args:
            storage: The storage as it is now; a new capacity or reward dtype reallocates the
                cache (``capacity + 1`` entries, the last for the pad slot).
            slots: int64 valid starts to (re)compute.
        """
        if len(slots) == 0:
            return
        rew_col = storage.columns["rewards"]
        size = storage.capacity + 1
        dtype = np.result_type(rew_col.dtype, np.float32)
        if len(self.returns) != size or self.returns.dtype != dtype:
            self.returns = np.zeros(size, dtype)
            self.steps = np.zeros(size, np.int32)
            self.end = np.zeros(size, np.int8)
        rows = storage.rows_of(slots)
        last = storage.last_and_t_base()[0].take(rows)
        remaining = last - slots + 1
        m = np.minimum(self.n, remaining)
        ret = rew_col.take(slots).astype(np.float64)
        for j in range(1, self.n):  # the same sums, in the same order, as NStep.expand
            r = rew_col.take(slots + j, mode="clip")
            r[m <= j] = 0
            ret += r * (self.unit.gamma**j)
        self.returns[slots] = ret.astype(dtype, copy=False)
        self.steps[slots] = m
        reached = m == remaining
        end = storage.terminated.take(rows) & reached
        self.end[slots] = np.where(end, 1, 2 * (storage.truncated.take(rows) & reached))

    def rebuild(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Recomputes everything from scratch for the valid starts ``slots`` (after a restore).

        Args:
            storage: The restored storage.
            slots: int64 every valid start of the restored storage.
        """
        self.returns = np.zeros(0, self.returns.dtype)
        self.on_add(storage, slots)

    def expand(self, slots: np.ndarray, rows: np.ndarray, storage: EpisodeStorage) -> SampleBatch:
        """``NStep(n).expand`` from the precomputed values: gathers only.

        Args:
            slots: int64 ``[B]`` start slots, valid starts of ``storage`` as it is now.
            rows: int64 ``[B]`` table rows of those slots (their episodes).
            storage: The storage to gather from.

        Returns:
            A batch of ``B`` n-step transitions, equal to what ``NStep(n).expand`` gives.
        """
        cols = storage.columns
        m = self.steps.take(slots)
        end = self.end.take(slots)
        out = {
            C.ACTIONS: cols["actions"].take(slots, axis=0),
            C.REWARDS: self.returns.take(slots),
        }
        for name in storage.extra_names:
            out[name] = cols["extras/" + name].take(slots, axis=0)
        out[C.EPS_ID] = storage.ids.take(rows)
        out[C.T] = storage.last_and_t_base()[1].take(rows) + slots
        new_at = slots + m
        for ring in obs_names(cols):  # one gather per leaf (plain: the one "obs")
            obs_name, new_name = output_names(ring)
            out[obs_name] = cols[ring].take(slots, axis=0)
            out[new_name] = cols[ring].take(new_at, axis=0)
        out[C.TERMINATEDS] = end == 1
        out[C.TRUNCATEDS] = end == 2
        out[C.N_STEP] = m
        return SampleBatch._trusted(out)
