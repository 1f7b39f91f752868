"""Prioritized: proportional prioritized replay (Schaul et al. 2016) on sum and min segment trees.

Every valid start slot ``i`` holds a priority ``p_i > 0``; the trees hold ``p_i ** alpha`` per
storage slot, and every other slot (padding, the unfinished tail of a streaming episode, evicted
data) holds 0 in the sum tree and ``+inf`` in the min tree, so it is never drawn and never counts
as the minimum. A draw picks slot ``i`` with probability ``P(i) = p_i**alpha / sum_k p_k**alpha``.

Semantics at the edges:

* **New steps** (``on_add``) enter at the largest priority ever seen (1 before any update), so
  everything is replayed at least once with a high chance. Steps of a streaming episode become
  valid (and get that priority) when their window is complete; steps already valid keep theirs.
  An episode the storage had to *move* to continue it is re-added, so its steps restart at the
  maximum too.
* **Importance weights** ``w_i = (N * P(i)) ** -beta / max_j w_j``, where ``max_j w_j`` belongs to
  the least likely sampleable step (the min tree). ``N`` cancels, so ``w_i = (p_i**alpha /
  min_k p_k**alpha) ** -beta``: 1 for the least likely step, below 1 for the others, all ones at
  ``beta = 0``. ``beta`` may be changed between samples (annealing); it is saved with the state.
* **Stratified** sampling (default) splits the total mass into ``batch_size`` equal segments and
  draws one prefix uniformly in each, so a batch covers the distribution evenly; otherwise every
  prefix is uniform over the whole mass. Either way a batch is drawn with replacement.
* **update_priorities** takes the ``indices`` column of a sample (handles) and one TD error or
  priority per handle; the new priority is ``|x| + eps``. A handle whose episode was evicted or
  moved since it was sampled (the storage's placement serials say so) is ignored -- its slot may
  hold another step by now. Duplicate handles in one call: the last one wins. NaN or infinite
  values are an error and nothing is applied.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ...config import check_bool, check_eps, check_float
from ...errors import ConfigError, DataError, EmptyBufferError, Where
from .base import SamplerState, ValidStarts
from .segment_tree import MinTree, SumTree, fill_constant, write_where_positive

if TYPE_CHECKING:
    from ..storage.ring import EpisodeStorage

__all__ = ["Prioritized"]


class Prioritized:
    """Proportional prioritized sampling of valid start steps; see the module docstring.

    Args:
        alpha: How much priorities shape the distribution: 0 is uniform, 1 fully proportional.
        beta: Importance-weight exponent: 0 gives all-one weights, 1 fully corrects the bias.
        eps: Added to ``|td_error|`` so no step's priority reaches 0 (must be > 0).
        stratified: One draw per equal segment of the total mass (True) or plain draws.
    """

    def __init__(
        self, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, stratified: bool = True
    ) -> None:
        self._alpha = _number("alpha", alpha)
        self._eps = check_eps("eps", eps, self._alpha)  # the rule buffer.eps follows
        self._stratified = check_bool("stratified", stratified)
        self.beta = beta  # validated by the property
        self._sum: SumTree | None = None
        self._min: MinTree | None = None
        self.max_priority = 1.0  # largest |x| + eps applied so far; new steps enter with it
        self.updates_applied = 0
        self.updates_stale = 0
        self._arange = np.zeros(0)

    # alpha, eps and stratified are fixed: the stored priorities mean something only under them.
    @property
    def alpha(self) -> float:
        """Priority exponent: a slot is drawn with probability ``p_i**alpha / sum p**alpha``."""
        return self._alpha

    @property
    def eps(self) -> float:
        """Added to every priority, so no slot's chance is zero."""
        return self._eps

    @property
    def stratified(self) -> bool:
        """Whether draws are stratified (one per equal slice of the total mass)."""
        return self._stratified

    @property
    def beta(self) -> float:
        """Importance-weight exponent; may be set between samples (annealing)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = _number("beta", value)

    def __repr__(self) -> str:
        # The configuration a checkpoint must match. ``beta`` is left out on purpose: it is a
        # schedule value (annealed during training) and travels in the state instead.
        return f"Prioritized(alpha={self.alpha!r}, eps={self.eps!r}, stratified={self.stratified})"

    # ------------------------------------------------------------------ inspection
    @property
    def sum_tree(self) -> SumTree | None:
        """The tree of ``p_i ** alpha`` per slot (``None`` before anything was added)."""
        return self._sum

    @property
    def min_tree(self) -> MinTree | None:
        """Same values, ``+inf`` where a slot is not sampleable."""
        return self._min

    def probabilities(self, slots: npt.ArrayLike) -> np.ndarray:
        """``P(slot)`` of one draw, for each slot (0 for slots that are not valid starts).

        Args:
            slots: Storage slots, any shape of integers in ``0 .. capacity - 1``.

        Returns:
            float64 probabilities of the same shape (all zeros before anything was added).
        """
        if self._sum is None:
            return np.zeros(np.shape(slots))
        total = self._sum.total()
        values = self._sum.get(slots)
        return values / total if total > 0 else values

    def reserve(self, capacity: int) -> None:
        """Creates the trees for a storage of ``capacity`` slots now rather than on the first
        add (a prioritized buffer calls it when it is built, so the trees' memory -- 32 to 64
        bytes per slot -- is taken then, and a second storage of another capacity is refused
        then). Nothing happens if they exist for that capacity.

        Args:
            capacity: The storage's number of slots; the trees get one leaf per slot.

        Raises:
            ConfigError: the trees exist for another capacity.
        """
        self._trees(capacity)

    # ------------------------------------------------------------------ Sampler protocol
    def sample(
        self,
        storage: EpisodeStorage,
        batch_size: int,
        rng: np.random.Generator,
        valid: ValidStarts,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``batch_size`` slots drawn in proportion to ``p ** alpha``, with importance weights.

        Args:
            storage: Unused: the trees already hold a priority per slot.
            batch_size: How many slots to draw (with replacement; one per stratum when
                stratified).
            rng: The buffer's generator; one ``rng.random(batch_size)`` call per batch.
            valid: The valid starts; only its ``total`` is read (for the error message).

        Returns:
            int64 ``[batch_size]`` slots, and ``info`` with ``"weights"``: float32 importance
            weights, 1 for the least likely step (all ones at ``beta = 0``).

        Raises:
            EmptyBufferError: the trees hold no priority (nothing was added through ``on_add``).
        """
        tree, mins = self._sum, self._min
        total = 0.0 if tree is None else tree.total()
        if tree is None or mins is None or not total > 0.0:
            raise EmptyBufferError(
                f"prioritized sampler holds no priorities but {valid.total} steps are valid; "
                "were episodes added through the buffer (on_add)?"
            )
        if self._stratified:
            if self._arange.size != batch_size:
                self._arange = np.arange(batch_size, dtype=np.float64)
            prefixes = rng.random(batch_size)
            prefixes += self._arange
            prefixes *= total / batch_size
        else:
            prefixes = rng.random(batch_size)
            prefixes *= total
        slots, ratio = tree.find_with_values(prefixes)
        if self._beta == 0.0:
            weights = np.ones(batch_size, dtype=np.float32)
        else:
            ratio *= 1.0 / mins.min()
            weights = np.power(ratio, -self._beta).astype(np.float32)
        return slots, {"weights": weights}

    def on_add(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """New valid starts: they enter at the maximum priority seen so far.

        Args:
            storage: The storage; its ``capacity`` creates the trees on first use.
            slots: int64 slots that became valid starts.

        Raises:
            ConfigError: the trees exist for a storage of another capacity.
        """
        tree, mins = self._trees(storage.capacity)
        value = self.max_priority**self.alpha
        fill_constant(tree, mins, np.asarray(slots, dtype=np.int64).ravel(), value, value)

    def on_evict(self, storage: EpisodeStorage, slots: np.ndarray) -> None:
        """Slots that stopped being valid starts: never drawn again (until re-added).

        Args:
            storage: Unused: the trees are indexed by slot.
            slots: int64 slots to zero in the sum tree (``+inf`` in the min tree).
        """
        if self._sum is None or self._min is None:
            return
        idx = np.asarray(slots, dtype=np.int64).ravel()
        fill_constant(self._sum, self._min, idx, 0.0, math.inf)

    def update_priorities(
        self, storage: EpisodeStorage, handles: npt.ArrayLike, priorities: npt.ArrayLike
    ) -> int:
        """Sets ``p = |x| + eps`` for each sampled handle still current; returns how many were
        applied. Stale handles (evicted or moved since sampling) are skipped and counted in
        :attr:`updates_stale`.

        Args:
            storage: The storage that issued the handles; ``storage.resolve`` maps them to
                slots and says which are still current.
            handles: int64 handles, the ``indices`` column of a sample (any shape; raveled).
            priorities: One TD error or priority per handle (its sign is dropped); the last of
                duplicate handles wins.

        Returns:
            How many handles were current and applied.

        Raises:
            TypeError: ``handles`` are not integers (e.g. another column was passed).
            ValueError: lengths differ, or a value is NaN or infinite (nothing is applied).
        """
        handles = np.asarray(handles)
        if handles.dtype.kind not in "iu" and handles.size:
            raise TypeError(
                f"update_priorities: indices must be the int64 handles of a sample's "
                f"'indices' column, found dtype {handles.dtype}"
            )
        handles = handles.astype(np.int64, copy=False).ravel()
        values = np.asarray(priorities, dtype=np.float64).ravel()
        if values.shape != handles.shape:
            raise ValueError(
                f"update_priorities: {handles.size} indices but {values.size} priorities"
            )
        if handles.size == 0:
            return 0
        p = np.abs(values)
        p += self._eps
        with np.errstate(over="ignore"):  # an overflow is reported below, as an error
            leaf = p**self._alpha
        if not np.isfinite(leaf).all():
            bad = int(np.flatnonzero(~np.isfinite(leaf))[0])
            raise ValueError(
                f"update_priorities: priority {values[bad]!r} at position {bad} is not finite "
                f"(or overflows with alpha={self.alpha})"
            )
        tree, mins = self._sum, self._min
        if tree is None or mins is None:
            self.updates_stale += handles.size
            return 0
        slots, current = storage.resolve(handles)
        # Belt and braces: a handle must also name a slot that is sampleable right now, so a
        # forged or foreign handle can never make padding or an unfinished window drawable.
        applied, top_p = write_where_positive(tree, mins, slots, current, leaf, p)
        self.updates_stale += handles.size - applied
        self.updates_applied += applied
        if applied:
            self.max_priority = max(self.max_priority, top_p)
        return applied

    # ------------------------------------------------------------------ state
    def state(self) -> SamplerState:
        """Leaves of the sum tree (``p ** alpha`` per slot; the min tree follows from them), the
        maximum priority, ``beta`` and the update counters, as numpy arrays."""
        leaves = np.zeros(0) if self._sum is None else self._sum.values()
        return {
            "leaves": leaves,
            "max_priority": np.asarray(self.max_priority, dtype=np.float64),
            "beta": np.asarray(self._beta, dtype=np.float64),
            "alpha": np.asarray(self.alpha, dtype=np.float64),
            "counters": np.asarray([self.updates_applied, self.updates_stale], dtype=np.int64),
        }

    def check_restored(self, capacity: int, valid_slots: np.ndarray) -> None:
        """After a restore: the tree has one leaf per storage slot (or none yet), and a leaf is
        positive only at a valid start -- a tampered state never makes padding, free space or
        an unfinished window drawable.

        Args:
            capacity: The restored storage's number of slots.
            valid_slots: int64 slots that are valid starts in the restored storage.

        Raises:
            DataError: naming the field ``sampler/leaves``.
        """
        where = Where(column="sampler/leaves")
        if self._sum is None:
            return
        leaves = self._sum.values()
        if leaves.size != capacity:
            raise DataError(
                f"prioritized sampler has {leaves.size} leaves, the storage {capacity} slots", where
            )
        drawable = leaves > 0
        drawable[valid_slots] = False
        if drawable.any():
            bad = int(np.flatnonzero(drawable)[0])
            raise DataError(
                f"slot {bad} has priority {leaves[bad]!r} but is not a valid start", where
            )

    def set_state(self, state: SamplerState) -> None:
        """Restores :meth:`state` output.

        Args:
            state: ``leaves``, ``max_priority``, ``beta``, ``alpha`` and ``counters`` arrays,
                as :meth:`state` wrote them; empty leaves mean no trees yet.

        Raises:
            DataError: a field is missing or malformed, ``alpha`` differs from this sampler's (the
                leaves would mean other priorities), or a leaf is negative or not finite.
        """
        where = Where(column="sampler")
        try:
            leaves = np.asarray(state["leaves"], dtype=np.float64)
            max_priority = float(state["max_priority"])
            beta = float(state["beta"])
            alpha = float(state["alpha"])
            applied, stale = (int(c) for c in np.asarray(state["counters"]).ravel())
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"prioritized sampler state is malformed: {exc!r}", where) from None
        if alpha != self.alpha:
            raise DataError(
                f"prioritized sampler state was saved with alpha={alpha}, this sampler has "
                f"alpha={self.alpha}",
                where,
            )
        if leaves.ndim != 1 or not (math.isfinite(max_priority) and max_priority > 0):
            raise DataError(
                f"prioritized sampler state holds leaves of shape {leaves.shape} and "
                f"max_priority {max_priority}",
                where,
            )
        if leaves.size == 0:
            self._sum = self._min = None
        else:
            tree, mins = SumTree(leaves.size), MinTree(leaves.size)
            tree.set_state({"capacity": leaves.size, "values": leaves})
            mins.set_state(
                {"capacity": leaves.size, "values": np.where(leaves > 0, leaves, np.inf)}
            )
            self._sum, self._min = tree, mins
        self.max_priority = max_priority
        self.beta = beta
        self.updates_applied, self.updates_stale = applied, stale

    # ------------------------------------------------------------------ internals
    def _trees(self, capacity: int) -> tuple[SumTree, MinTree]:
        if self._sum is None or self._min is None:
            self._sum, self._min = SumTree(capacity), MinTree(capacity)
        elif self._sum.capacity != capacity:
            raise ConfigError(
                f"this Prioritized sampler serves a storage of capacity {self._sum.capacity}; "
                f"it cannot be shared with one of capacity {capacity}"
            )
        return self._sum, self._min


def _number(name: str, value: float) -> float:
    """The rule ``buffer.alpha`` / ``buffer.beta`` follow (numpy scalars accepted)."""
    v = value.item() if isinstance(value, np.generic) else value
    return float(check_float(name, v, 0.0, 10.0))
