"""Sum and min segment trees, updated and searched a whole batch at a time.

Both trees are complete binary trees stored in one flat ``float64`` array of ``2 * size`` entries,
where ``size`` is ``capacity`` rounded up to a power of two: node ``i`` has children ``2i`` and
``2i + 1`` and leaf ``j`` is node ``size + j``. Leaves past ``capacity`` are padding and hold the
neutral element (0 for sums, ``+inf`` for minima), so they never count.

Every operation takes a batch of indices and runs one numpy step per tree *level*, never one Python
step per item. numpy costs about a microsecond per call whatever the batch, so the number of levels
is what matters. The top levels are therefore not maintained: the tree stops at its widest level
of at most ``top_width`` nodes (2048 by default), and a prefix sum (for the min tree: the minimum)
over that level stands in for everything above it. It is recomputed, once, on the first query
after an update -- one ``cumsum`` over 2048 numbers instead of eleven levels of gathers per
search and per update. A tree of at most ``top_width`` leaves is just that prefix sum.

- ``update`` writes the leaves, then recomputes the parents of the touched leaves level by level
  from their children. Nothing is ever added to or subtracted from a stored sum, so there is no
  drift: after any sequence of updates every node (and the total) equals what a from-scratch build
  of the same leaves holds, bit for bit (the property tests check exactly that).
- ``fill_constant`` writes one value per tree at many indices (new steps entering at the maximum
  priority, evicted ones leaving): the leaves, then each stored ancestor once per level, so
  adding a run of ``k`` consecutive steps costs about ``2k`` node updates per tree.
- ``SumTree.find_prefixsum`` finds the top-level node of every prefix with one ``searchsorted``,
  then descends from there for all prefixes at once.

Memory: ``16 * size`` bytes per tree (``size`` as above, so 16 to 32 bytes per leaf).

Both operations also exist as compiled loops (:mod:`.kernels`, numba), used when numba is
importable: the same float operations in the same order, so the trees and every search result
are identical on both backends, bit for bit. A tree keeps the backend it was created with.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import DataError, Where
from . import kernels

__all__ = [
    "MinTree",
    "SumTree",
    "fill_constant",
    "last_writes",
    "write_unique",
    "write_where_positive",
]

ArrayLike = npt.ArrayLike
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def last_writes(indices: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """``(unique sorted indices, the value of each one's last occurrence)``: a batch of writes with
    repeated indices reduced to the writes that win, deterministically.

    Args:
        indices: int64 leaf indices of a batch of writes, in write order, repeats allowed.
        values: float64 value of each write, as long as ``indices``.

    Returns:
        The unique indices in ascending order, and for each the value of its last write (the
        inputs themselves when they are already unique and sorted).
    """
    n = indices.size
    if n < 2 or (indices[1:] > indices[:-1]).all():  # already unique and sorted: common
        return indices, values
    order = np.argsort(indices, kind="stable")
    idx = indices[order]
    last = np.empty(n, dtype=bool)
    np.not_equal(idx[1:], idx[:-1], out=last[:-1])
    last[-1] = True
    if not last.all():
        order = order[last]
        idx = idx[last]
    return idx, values[order]


def write_unique(
    trees: Sequence[_SegmentTree], indices: IntArray, values: Sequence[FloatArray]
) -> None:
    """Writes ``values[k]`` into ``trees[k]`` at the same ``indices``, then fixes the parents.

    Unchecked, for callers that keep several trees over the same slots (a sum and a min tree):
    ``indices`` unique, sorted and in range (see :func:`last_writes`), values admissible, and all
    trees of one capacity and top width. Sharing the walk up the levels saves its index math.

    A sparse level gathers the child pairs of the touched parents; once a level is narrow enough
    that recomputing it whole is as cheap, it and everything above it are recomputed whole.

    Args:
        trees: The trees to write, all of one capacity and top width (and one backend: the
            first tree's kernels are used for all).
        indices: int64 leaf indices, unique, sorted and in ``0 .. capacity - 1``.
        values: One float64 array per tree, each as long as ``indices``, admissible in its tree
            (finite and >= 0 for a sum tree, not NaN for a min tree).
    """
    if indices.size == 0:
        return
    first = trees[0]
    jit = first._kernels
    if jit is not None:
        levels = first._depth - first._top
        for tree, vals in zip(trees, values, strict=True):
            jit.write(tree._tree, indices, vals, first._size, levels, tree._is_min)
            tree._stale = True
        return
    pos = indices + first._size
    for tree, vals in zip(trees, values, strict=True):
        tree._tree[pos] = vals
        tree._stale = True
    level, dense = first._depth, 8 * pos.size
    while level > first._top:
        level -= 1
        if (1 << level) <= dense:
            for tree in trees:
                tree._rebuild_levels(level)
            return
        pos = pos >> 1
        for tree in trees:
            kids = tree._pairs.take(pos, axis=0)
            tree._tree[pos] = tree._combine(kids[:, 0], kids[:, 1])


def fill_constant(
    sums: SumTree, mins: MinTree, indices: IntArray, sum_value: float, min_value: float
) -> None:
    """Writes ``sum_value`` into the sum tree and ``min_value`` into the min tree at every index,
    then fixes the parents: new steps entering at one priority, or evicted ones leaving.

    Unchecked: ``indices`` in range (any order, repeats allowed: every write is the same value,
    so none can win over another), values admissible, both trees of one capacity and top width.
    Each stored ancestor of the indices is recomputed once per tree when ``indices`` are sorted
    (they are sorted here if not), so a run of ``k`` new steps costs about ``2k`` node updates
    per tree rather than ``k`` per level.

    Args:
        sums: The sum tree.
        mins: The min tree over the same slots.
        indices: int64 leaf indices in ``0 .. capacity - 1``, any order, repeats allowed.
        sum_value: The value written into the sum tree (a priority ``p ** alpha``, or 0 to
            make a slot undrawable).
        min_value: The value written into the min tree (the same priority, or ``+inf``).
    """
    if indices.size == 0:
        return
    jit = sums._kernels
    if jit is not None:
        jit.fill(
            sums._tree,
            mins._tree,
            indices,
            sum_value,
            min_value,
            sums._size,
            sums._depth - sums._top,
        )
        sums._stale = mins._stale = True
        return
    if indices.size > 1 and not (indices[1:] >= indices[:-1]).all():
        indices = np.sort(indices)
    pos = indices + sums._size
    sums._tree[pos] = sum_value
    mins._tree[pos] = min_value
    sums._stale = mins._stale = True
    level = sums._depth
    while level > sums._top:
        level -= 1
        pos = pos >> 1
        if pos.size > 1:  # sorted: a parent shared by neighbours is recomputed once
            pos = pos[np.concatenate(([True], pos[1:] != pos[:-1]))]
        if (1 << level) <= 8 * pos.size:
            sums._rebuild_levels(level)
            mins._rebuild_levels(level)
            return
        for tree in (sums, mins):
            kids = tree._pairs.take(pos, axis=0)
            tree._tree[pos] = tree._combine(kids[:, 0], kids[:, 1])


def write_where_positive(
    sums: SumTree,
    mins: MinTree,
    indices: IntArray,
    keep: npt.NDArray[np.bool_],
    values: FloatArray,
    keys: FloatArray,
) -> tuple[int, float]:
    """Writes ``values[k]`` into both trees at ``indices[k]`` where ``keep[k]``, the index is
    inside the trees and the sum tree's leaf there is positive now (a leaf that can be drawn);
    a repeated index keeps its last write. The parents are fixed.

    Unchecked, for a prioritized sampler's feedback: ``values`` admissible in both trees
    (finite, > 0), ``keep``, ``values`` and ``keys`` as long as ``indices`` (which may hold
    anything: those outside the trees are skipped), both trees of one capacity and top width.
    ``keep`` may be changed in place.

    Args:
        sums: The sum tree (its current leaves decide which slots are drawable).
        mins: The min tree over the same slots.
        indices: int64 leaf indices, any values (those outside ``0 .. capacity - 1`` skipped).
        keep: Whether each write is wanted (False: a stale handle); may be changed in place.
        values: float64 value written at each index (``p ** alpha``), finite and > 0.
        keys: float64 number reported per write (the priority ``p``), whose maximum over the
            applied writes is returned.

    Returns:
        ``(how many were written, the largest ``keys[k]`` among them)``; ``(0, 0.0)`` if none.
    """
    jit = sums._kernels
    if jit is not None:  # the same checks and writes, fused in one compiled loop
        applied, top = jit.apply_priorities(
            sums._tree,
            mins._tree,
            indices,
            keep,
            values,
            keys,
            sums._size,
            sums._capacity,
            sums._depth - sums._top,
        )
        sums._stale = mins._stale = True
        return int(applied), float(top) if applied else 0.0
    if indices.size == 0:
        return 0, 0.0
    if indices.min() < 0 or indices.max() >= sums._capacity:
        inside = (indices >= 0) & (indices < sums._capacity)
        keep &= inside
        indices = np.where(inside, indices, 0)
    keep &= sums._get_unchecked(indices) > 0.0
    applied = int(np.count_nonzero(keep))
    if applied < indices.size:
        indices, values, keys = indices[keep], values[keep], keys[keep]
    if applied == 0:
        return 0, 0.0
    idx, vals = last_writes(indices, values)
    write_unique((sums, mins), idx, (vals, vals))
    return applied, float(keys.max())


class _SegmentTree(ABC):
    """Shared machinery; subclasses fix the combining operation and its neutral element.

    Args:
        capacity: Number of leaves, any int >= 1 (padded internally to a power of two).
        top_width: Widest stored level (a power of two); a tuning knob, see the module docstring.
            Results do not depend on it except through the rounding of sums.
    """

    _neutral: float = 0.0
    _kind: str = "segment"
    _is_min: bool = False

    def __init__(self, capacity: int, *, top_width: int = 2048) -> None:
        for name, value in (("capacity", capacity), ("top_width", top_width)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an int, found {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, found {value}")
        if top_width & (top_width - 1):
            raise ValueError(f"top_width must be a power of two, found {top_width}")
        self._capacity = int(capacity)
        self._depth = (self._capacity - 1).bit_length()  # level of the leaves; the root is 0
        self._size = 1 << self._depth
        self._top = min(self._depth, int(top_width).bit_length() - 1)  # shallowest stored level
        self._width = 1 << self._top  # nodes on that level: heap indices width .. 2 * width - 1
        # Zeros come from calloc: the pages of a sum tree are touched only where it is written.
        if self._neutral == 0.0:
            self._tree = np.zeros(2 * self._size, dtype=np.float64)
        else:
            self._tree = np.full(2 * self._size, self._neutral, dtype=np.float64)
        # Row p of this view is (tree[2p], tree[2p + 1]): the two children of node p.
        self._pairs = self._tree.reshape(self._size, 2)
        self._stale = True  # the summary of the top level needs recomputing
        self._kernels = kernels.compiled()  # None: the numpy path

    # -- subclass hooks -------------------------------------------------------------------------

    @staticmethod
    @abstractmethod
    def _combine(a: FloatArray, b: FloatArray) -> FloatArray:
        """Combines two children into their parent (sum or minimum)."""

    @abstractmethod
    def _check_values(self, values: FloatArray, what: str) -> None:
        """Raises on values this tree cannot hold."""

    @abstractmethod
    def _refresh(self) -> None:
        """Recomputes the summary of the top level (prefix sums, or the minimum)."""

    # -- public API -------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Number of leaves (indices ``0 .. capacity - 1``)."""
        return self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes held by the tree array (``16 * capacity`` rounded up to a power of two)."""
        return int(self._tree.nbytes)

    def update(self, indices: ArrayLike, values: ArrayLike) -> None:
        """Sets ``leaf[indices[k]] = values[k]`` for the whole batch, then fixes the parents.

        ``values`` may be a scalar (broadcast to every index). When an index occurs more than once
        in the batch, the value at its *last* occurrence wins, always (numpy's own fancy
        assignment leaves that order unspecified, so it is resolved here explicitly).

        Raises:
            IndexError: an index is outside ``0 .. capacity - 1``.
            ValueError: shapes differ, or a value is not admissible for this tree (NaN; for a
                sum tree also negative or infinite).
        """
        idx = self._indices(indices)
        vals = np.asarray(values, dtype=np.float64)
        if vals.ndim == 0:
            vals = np.full(idx.shape, vals, dtype=np.float64)
        vals = vals.ravel()
        if vals.shape != idx.shape:
            raise ValueError(
                f"update: {idx.size} indices but {vals.size} values; they must pair one to one"
            )
        self._check_values(vals, "update")
        self._write(idx, vals)

    def get(self, indices: ArrayLike) -> FloatArray:
        """Leaf values at ``indices`` (any shape; the result has the same shape)."""
        arr = np.asarray(indices)
        idx = self._indices(arr)
        return self._tree.take(idx + self._size).reshape(arr.shape)

    def values(self) -> FloatArray:
        """A copy of all ``capacity`` leaves."""
        out: FloatArray = self._tree[self._size : self._size + self._capacity].copy()
        return out

    def get_state(self) -> dict[str, Any]:
        """Plain state (an int and one array): the leaves. Parents are rebuilt on load."""
        return {"capacity": self._capacity, "values": self.values()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores leaves from :meth:`get_state` and rebuilds every parent from them.

        Raises:
            DataError: the state is for another capacity, is truncated, or holds inadmissible
                values (a tampered checkpoint is an error, not a silently different tree).
        """
        where = Where(column=f"{self._kind}_tree")
        try:
            capacity = int(state["capacity"])
            values = np.asarray(state["values"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{self._kind} tree state is malformed: {exc!r}", where) from None
        if capacity != self._capacity:
            raise DataError(
                f"{self._kind} tree state is for capacity {capacity}, this tree has "
                f"capacity {self._capacity}",
                where,
            )
        if values.shape != (self._capacity,):
            raise DataError(
                f"{self._kind} tree state holds values of shape {values.shape}, expected "
                f"({self._capacity},)",
                where,
            )
        try:
            self._check_values(values, "set_state")
        except ValueError as exc:
            raise DataError(str(exc), where) from None
        self._tree[self._size : self._size + self._capacity] = values
        self._tree[self._size + self._capacity :] = self._neutral
        self._rebuild_levels(self._depth - 1)
        self._stale = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self._capacity})"

    def __getstate__(self) -> dict[str, Any]:
        # The compiled loops are not data: a pickled tree names its backend, and the process
        # that loads it takes its own loops (the numpy path if numba is unavailable there).
        state = self.__dict__.copy()
        state["_kernels"] = state["_kernels"] is not None
        del state["_pairs"]  # a view: rebuilt from the tree array, not pickled as a copy
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        compiled = state.pop("_kernels")
        self.__dict__.update(state)
        self._pairs = self._tree.reshape(self._size, 2)
        self._kernels = kernels.compiled("numba") if compiled else None

    # -- internals --------------------------------------------------------------------------------

    def _indices(self, indices: ArrayLike) -> IntArray:
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            if idx.size == 0:
                return np.empty(0, dtype=np.int64)
            raise TypeError(f"indices must be integers, found dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            bad = idx[(idx < 0) | (idx >= self._capacity)][0]
            raise IndexError(f"index {bad} is outside the tree (capacity {self._capacity})")
        return idx

    def _write(self, idx: IntArray, vals: FloatArray) -> None:
        """Unchecked batch write: ``idx`` in range, ``vals`` admissible, same length."""
        if self._kernels is not None:  # writes in order: the last one wins without a sort
            write_unique((self,), idx, (vals,))
            return
        idx, vals = last_writes(idx, vals)
        self._write_unique(idx, vals)

    def _write_unique(self, idx: IntArray, vals: FloatArray) -> None:
        """Unchecked batch write of indices that are unique and sorted (see :func:`last_writes`)."""
        write_unique((self,), idx, (vals,))

    def _get_unchecked(self, idx: IntArray) -> FloatArray:
        return self._tree.take(idx + self._size)

    def _rebuild_levels(self, level: int) -> None:
        """Recomputes whole levels ``level, level - 1, ..., top`` from the level below each."""
        tree, pairs, combine = self._tree, self._pairs, self._combine
        for lvl in range(level, self._top - 1, -1):
            lo, hi = 1 << lvl, 2 << lvl
            kids = pairs[lo:hi]
            tree[lo:hi] = combine(kids[:, 0], kids[:, 1])


class SumTree(_SegmentTree):
    """Sums of non-negative leaves, with a batched prefix-sum search.

    Args:
        capacity: Number of leaves, any int >= 1 (padded internally to a power of two).
        top_width: Widest stored level (a power of two, default 2048); a tuning knob, see the
            module docstring. Results do not depend on it except through the rounding of sums.

    Example:
        >>> t = SumTree(5)
        >>> t.update([0, 1, 3], [1.0, 2.0, 3.0])
        >>> t.total(), t.find_prefixsum([0.0, 1.0, 2.9, 3.0, 99.0]).tolist()
        (6.0, [0, 1, 1, 3, 3])
    """

    _neutral = 0.0
    _kind = "sum"

    @staticmethod
    def _combine(a: FloatArray, b: FloatArray) -> FloatArray:
        return np.add(a, b)

    def _check_values(self, values: FloatArray, what: str) -> None:
        if values.size and not (np.isfinite(values).all() and values.min() >= 0.0):
            bad = values[~(np.isfinite(values) & (values >= 0.0))][0]
            raise ValueError(f"{what}: sum-tree values must be finite and >= 0, found {bad!r}")

    def __init__(self, capacity: int, *, top_width: int = 2048) -> None:
        super().__init__(capacity, top_width=top_width)
        # _cum[k] = sum of the first k top-level nodes; _cum[-1] is the total.
        self._cum = np.zeros(self._width + 1, dtype=np.float64)

    def _refresh(self) -> None:
        top = self._tree[self._width : 2 * self._width]
        if self._kernels is not None:
            self._kernels.cumsum(top, self._cum[1:])
        else:
            np.cumsum(top, out=self._cum[1:])
        self._stale = False

    def total(self) -> float:
        """Sum of all leaves."""
        if self._stale:
            self._refresh()
        return float(self._cum[-1])

    def find_prefixsum(self, prefixes: ArrayLike) -> IntArray:
        """For each prefix ``p``, the leaf whose cumulative range ``[c_{i-1}, c_i)`` holds ``p``.

        Semantics, with ``c = cumsum(leaves)``: the smallest ``i`` with ``c[i] > p``, which is
        ``np.searchsorted(c, p, side="right")``. So a prefix exactly on a boundary ``c[i-1]``
        selects leaf ``i`` (the one *starting* there), and a leaf of zero mass is never returned.
        At the edges: a negative prefix counts as 0 (the first leaf with mass); a prefix ``>=``
        the total selects the last leaf with mass (floating-point rounding can push ``u * total``
        onto the total). The search subtracts partial sums, so near a boundary the answer may
        differ from a float ``cumsum`` over the leaves by the rounding of the sums involved; it is
        exact when the sums are (e.g. integers or dyadic fractions).

        Args:
            prefixes: Prefix masses, any shape of numbers (not NaN).

        Returns:
            ``int64`` leaf indices, the same shape as ``prefixes``.

        Raises:
            ValueError: the tree holds no mass (nothing can be selected), or a prefix is NaN.
        """
        arr = np.asarray(prefixes, dtype=np.float64)
        if not self.total() > 0.0:
            raise ValueError("find_prefixsum on a sum tree with total 0: no leaf has mass")
        if np.isnan(arr).any():
            raise ValueError("find_prefixsum: prefixes must not be NaN")
        return self._find(arr.ravel())[0].reshape(arr.shape)

    def find_with_values(self, prefixes: FloatArray) -> tuple[IntArray, FloatArray]:
        """:meth:`find_prefixsum` for a sampler's draws, with the leaves' values: ``(leaf
        indices, their values)``, one per prefix.

        Unchecked, for a hot loop: ``prefixes`` a 1-d ``float64`` array without NaN (e.g. ``u *
        total()``), and ``total() > 0`` (check it first). ``prefixes`` is not modified.

        Args:
            prefixes: 1-d float64 prefix masses in ``[0, total())`` (out-of-range values land
                on the first or last leaf with mass).

        Returns:
            int64 leaf indices and their float64 leaf values, one per prefix.
        """
        return self._find(prefixes)

    def _find(self, prefixes: FloatArray) -> tuple[IntArray, FloatArray]:
        """Unchecked search (total > 0, no NaN): ``(leaf indices, their values)``. ``prefixes``
        is not modified."""
        if self._stale:
            self._refresh()
        tree, cum, width = self._tree, self._cum, self._width
        if self._kernels is not None:
            leaf = np.empty(prefixes.size, dtype=np.int64)
            value = np.empty(prefixes.size, dtype=np.float64)
            self._kernels.find(tree, cum, width, self._depth - self._top, prefixes, leaf, value)
            return leaf, value
        p = np.maximum(prefixes, 0.0)
        # The top-level node holding each prefix, then the prefix relative to that node.
        top = np.searchsorted(cum[1:], p, side="right")
        np.minimum(top, width - 1, out=top)
        p -= cum.take(top)
        node = top + width
        for _ in range(self._depth - self._top):
            node <<= 1
            left = tree.take(node)
            right = np.greater_equal(p, left)
            p -= left * right
            node += right
        # Rounding (or a prefix >= total) can run past the last leaf with mass of a node into the
        # zero-mass leaves on its right edge. Rare; redo those with a search that never enters a
        # node without mass.
        values = tree.take(node)
        bad = values <= 0.0
        if bad.any():
            node[bad] = self._guarded_find(prefixes[bad])
            values = tree.take(node)
        return node - self._size, values

    def _guarded_find(self, prefixes: FloatArray) -> IntArray:
        tree, cum, width = self._tree, self._cum, self._width
        p = np.maximum(prefixes, 0.0)
        top = np.searchsorted(cum[1:], p, side="right")
        np.minimum(top, np.flatnonzero(tree[width : 2 * width] > 0.0)[-1], out=top)
        p -= cum.take(top)
        node = top + width
        for _ in range(self._depth - self._top):
            node <<= 1
            left = tree.take(node)
            right = (p >= left) & (tree.take(node + 1) > 0.0)
            p -= left * right
            node += right
        return node


class MinTree(_SegmentTree):
    """Minimum of the leaves. Empty and padding leaves hold ``+inf``, so they never win.

    Args:
        capacity: Number of leaves, any int >= 1 (padded internally to a power of two).
        top_width: Widest stored level (a power of two, default 2048); a tuning knob, see the
            module docstring. Results do not depend on it except through the rounding of sums.
    """

    _neutral = float("inf")
    _kind = "min"
    _is_min = True

    @staticmethod
    def _combine(a: FloatArray, b: FloatArray) -> FloatArray:
        return np.minimum(a, b)

    def _check_values(self, values: FloatArray, what: str) -> None:
        if np.isnan(values).any():
            raise ValueError(f"{what}: min-tree values must not be NaN")

    def __init__(self, capacity: int, *, top_width: int = 2048) -> None:
        super().__init__(capacity, top_width=top_width)
        self._min = float("inf")

    def _refresh(self) -> None:
        self._min = float(self._tree[self._width : 2 * self._width].min())
        self._stale = False

    def min(self) -> float:
        """Minimum over all leaves (``inf`` when every leaf is empty)."""
        if self._stale:
            self._refresh()
        return self._min
