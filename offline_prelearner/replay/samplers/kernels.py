"""The compiled loops of the replay buffer, with their numpy equivalents.

The segment trees' hot paths -- the prefix-sum descent of a batch of prefixes, and the batched
leaf write with its parent recompute -- are a few thousand dependent scalar steps per batch. numpy
runs them one level at a time (a dozen calls per level, about a microsecond each, however small
the batch); a compiled loop pays only for the memory it touches (256 draws from a 1M-slot tree:
~3 us when the tree is in the cache, ~30 us when its lower levels are not; PER sample + update of
256 went from ~1.6M to ~2.6M samples/s, ``benchmarks/README.md``). The loops here are written
once, in plain Python over numpy arrays, and compiled with numba (``njit``, ``cache=True``: the
machine code is kept in ``__pycache__`` -- or numba's user cache when that is read-only -- so a
process compiles only if no earlier one did; ``nogil=True``: a Ray actor's other threads run
meanwhile).

**Same results on both backends, bit for bit.** The numpy path (in :mod:`.segment_tree` and
:mod:`.prioritized`) is the fallback when numba cannot be imported, and the reference the
tests hold the kernels to. Every kernel does exactly the float operations of its numpy equivalent,
in the same order (a parent is ``left + right`` of its two children, recomputed, never
incremented; a descent subtracts the left child's sum when it goes right), so the trees, the drawn
slots and the weights are identical, and the sample stream of a seed does not depend on whether
numba is installed. What stays in numpy on both paths: the random draws (the generator is the
buffer's) and ``x ** alpha`` / ``x ** -beta`` (numpy's ``power`` may use a vectorized libm whose
last bit differs from the scalar ``pow`` a compiled loop calls).

Choosing the backend: ``OFFLINE_PRELEARNER_NUMBA=0`` (or ``false``/``no``/``off``) in the
environment makes the numpy path the default, without importing numba; :func:`use` switches it
for the trees created inside a ``with`` block (tests run both). A tree keeps the backend it was
created with. numba is imported on the first tree that uses it, not at import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["available", "backend", "compiled", "use"]

_ENV = "OFFLINE_PRELEARNER_NUMBA"


# -- the loops (plain Python; compiled on first use) -----------------------------------------------


def _find(
    tree: np.ndarray,
    cum: np.ndarray,
    width: int,
    levels: int,
    prefixes: np.ndarray,
    out_leaf: np.ndarray,
    out_value: np.ndarray,
) -> None:
    """``SumTree._find``: for each prefix, the leaf (``out_leaf``, index into the leaves) and its
    value (``out_value``). ``cum[k]`` is the sum of the first ``k`` nodes of the stored top level
    (``width`` nodes from heap index ``width``); ``levels`` levels lie below it.

    The descent runs level by level over the whole batch, not prefix by prefix: a big tree does
    not fit in the cache, and the loads of one level are independent of each other, so the CPU
    overlaps their misses (one prefix's path is a chain of dependent misses).
    """
    n = prefixes.size
    size = width << levels
    p = np.empty(n, dtype=np.float64)
    node = out_leaf
    for i in range(n):
        p0 = max(prefixes[i], 0.0)
        # searchsorted(cum[1:], p0, side="right"), clipped to the last top node
        lo, hi = 0, width
        while lo < hi:
            mid = (lo + hi) >> 1
            if cum[1 + mid] <= p0:
                lo = mid + 1
            else:
                hi = mid
        top = min(lo, width - 1)
        p[i] = p0 - cum[top]
        node[i] = top + width
    for _ in range(levels):
        for i in range(n):
            k = node[i] << 1
            left = tree[k]
            if p[i] >= left:
                p[i] -= left
                k += 1
            node[i] = k
    last_with_mass = -1
    for i in range(n):
        k = node[i]
        if tree[k] <= 0.0:
            # Rounding ran past the last leaf with mass of a node: redo this prefix, never
            # entering a node without mass (SumTree._guarded_find).
            if last_with_mass < 0:
                last_with_mass = width - 1
                while last_with_mass > 0 and not tree[width + last_with_mass] > 0.0:
                    last_with_mass -= 1
            p0 = max(prefixes[i], 0.0)
            lo, hi = 0, width
            while lo < hi:
                mid = (lo + hi) >> 1
                if cum[1 + mid] <= p0:
                    lo = mid + 1
                else:
                    hi = mid
            top = min(lo, last_with_mass)
            q = p0 - cum[top]
            k = top + width
            for _ in range(levels):
                k <<= 1
                left = tree[k]
                if q >= left and tree[k + 1] > 0.0:
                    q -= left
                    k += 1
        out_value[i] = tree[k]
        out_leaf[i] = k - size


def _cumsum(values: np.ndarray, out: np.ndarray) -> None:
    """``np.cumsum(values, out=out)``: a running sum, left to right, as numpy's (which is not
    pairwise: the same additions in the same order, so the same bits)."""
    acc = 0.0
    for i in range(values.size):
        acc += values[i]
        out[i] = acc


def _recompute(tree: np.ndarray, pos: np.ndarray, n: int, levels: int, is_min: bool) -> None:
    """Recomputes the ``levels`` ancestors of the ``n`` nodes ``pos[:n]`` (heap indices on one
    level, any order, repeats allowed) from their children, level by level; ``pos`` is
    overwritten. A parent equal to the one just before it is skipped, so sorted nodes (a run of
    new steps) touch each ancestor once -- a run of ``k`` leaves costs about ``2k`` node updates,
    not ``k`` per level -- while scattered ones (sampled slots) rarely share one. Near the top,
    where a level has few nodes compared with the nodes left, it is recomputed whole instead
    (cheaper, and the same result: every node is a function of its children)."""
    level_width = 0
    if n > 0:
        level_width = 1
        while level_width <= pos[0]:
            level_width <<= 1
        level_width >>= 1  # nodes on the level of pos (a power of two)
    for _ in range(levels):
        level_width >>= 1
        if level_width <= 8 * n:
            for node in range(level_width, 2 * level_width):
                a, b = tree[2 * node], tree[2 * node + 1]
                if is_min:
                    tree[node] = b if b < a else a
                else:
                    tree[node] = a + b
            continue
        m = 0
        for k in range(n):
            node = pos[k] >> 1
            if m > 0 and pos[m - 1] == node:
                continue  # the same parent as the one just recomputed
            pos[m] = node
            m += 1
            a, b = tree[2 * node], tree[2 * node + 1]
            if is_min:
                tree[node] = b if b < a else a
            else:
                tree[node] = a + b
        n = m


def _write(
    tree: np.ndarray, leaves: np.ndarray, values: np.ndarray, size: int, levels: int, is_min: bool
) -> None:
    """``tree[size + leaves[k]] = values[k]`` in order (so a repeated leaf keeps its *last*
    value), then the ``levels`` stored levels above the leaves recomputed."""
    n = leaves.size
    pos = np.empty(n, dtype=np.int64)
    for k in range(n):
        pos[k] = leaves[k] + size
        tree[pos[k]] = values[k]
    _recompute(tree, pos, n, levels, is_min)


def _fill(
    sums: np.ndarray,
    mins: np.ndarray,
    leaves: np.ndarray,
    sum_value: float,
    min_value: float,
    size: int,
    levels: int,
) -> None:
    """``sums[size + leaves[k]] = sum_value`` and ``mins[size + leaves[k]] = min_value`` for
    every ``k`` (any order, repeats allowed: every write is the same value), then the ``levels``
    stored levels above the leaves recomputed in both trees. The prioritized sampler's ``on_add``
    (new steps at the maximum priority) and ``on_evict`` (0 and ``+inf``): one pass over the
    leaves, and each ancestor recomputed once when the leaves are sorted (see
    :func:`_recompute`)."""
    n = leaves.size
    pos = np.empty(n, dtype=np.int64)
    for k in range(n):
        p = leaves[k] + size
        sums[p] = sum_value
        mins[p] = min_value
        pos[k] = p
    if n:
        _recompute(sums, pos.copy(), n, levels, False)
        _recompute(mins, pos, n, levels, True)


def _apply_priorities(
    sums: np.ndarray,
    mins: np.ndarray,
    slots: np.ndarray,
    current: np.ndarray,
    leaf: np.ndarray,
    p: np.ndarray,
    size: int,
    capacity: int,
    levels: int,
) -> tuple[int, float]:
    """``Prioritized.update_priorities`` after its checks: writes ``leaf[k]`` into both trees at
    ``slots[k]`` for every handle still current whose slot is in range and sampleable (sum-tree
    leaf > 0), the last write winning, and recomputes the parents. Returns ``(applied, max of
    p over the applied)``. Checking each slot just before its write sees the same leaves as
    checking all first: a written value is > 0 and the slot already was."""
    n = slots.size
    pos = np.empty(n, dtype=np.int64)
    applied = 0
    top_p = 0.0
    for k in range(n):
        s = slots[k]
        if not current[k] or s < 0 or s >= capacity or not sums[size + s] > 0.0:
            continue
        sums[size + s] = leaf[k]
        mins[size + s] = leaf[k]
        pos[applied] = size + s
        applied += 1
        top_p = max(top_p, p[k])
    if applied:
        _recompute(sums, pos[:applied].copy(), applied, levels, False)
        _recompute(mins, pos, applied, levels, True)
    return applied, top_p


_LOOPS: dict[str, Callable[..., Any]] = {
    "find": _find,
    "cumsum": _cumsum,
    "write": _write,
    "fill": _fill,
    "apply_priorities": _apply_priorities,
}


# -- backend choice -------------------------------------------------------------------------------


def _env_allows() -> bool:
    return os.environ.get(_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


_numba: SimpleNamespace | None = None
_numba_error: str | None = None
_lock = threading.Lock()  # a Ray actor's threads may create their first trees together
_default = "numba" if _env_allows() else "numpy"


def available() -> bool:
    """Whether the compiled kernels can be used (numba importable and not turned off)."""
    return _load() is not None


def backend() -> str:
    """``"numba"`` or ``"numpy"``: the backend a tree created now will use."""
    return "numba" if _default == "numba" and available() else "numpy"


def compiled(name: str | None = None) -> SimpleNamespace | None:
    """The compiled kernels (``find``, ``cumsum``, ``write``, ``fill``, ``apply_priorities``) if the
    backend ``name`` (default: the current one) is numba and numba is available, else ``None``
    (use the numpy path).

    Args:
        name: ``"numba"`` or ``"numpy"``; None means the backend in force now (see :func:`use`).

    Returns:
        A namespace of the compiled kernels, or None for the numpy path.
    """
    return _load() if (name or _default) == "numba" else None


@contextmanager
def use(name: str) -> Iterator[None]:
    """Within the block, trees are created with backend ``name`` (``"numba"`` or ``"numpy"``).

    Args:
        name: The backend for trees created inside the block; the previous one is restored on
            exit, also on an exception.

    Yields:
        Nothing; the backend holds while the block runs.

    Raises:
        ValueError: an unknown name.
        ImportError: ``"numba"`` when it cannot be imported (or the environment turned it off).
    """
    global _default
    if name not in ("numba", "numpy"):
        raise ValueError(f"backend must be 'numba' or 'numpy', found {name!r}")
    if name == "numba" and _load() is None:
        raise ImportError(f"the numba backend is unavailable: {_numba_error}")
    before, _default = _default, name
    try:
        yield
    finally:
        _default = before


def _load() -> SimpleNamespace | None:
    """Imports numba and wraps the loops, once (compilation itself happens per signature on the
    first call, or is loaded from the cache)."""
    global _numba, _numba_error
    if _numba is not None or _numba_error is not None:
        return _numba
    with _lock:
        if _numba is None and _numba_error is None:
            _numba, _numba_error = _wrap()
    return _numba


def _wrap() -> tuple[SimpleNamespace | None, str | None]:
    """``(the compiled loops, None)``, or ``(None, why not)``."""
    global _recompute
    if not _env_allows():
        return None, f"{_ENV}={os.environ.get(_ENV)} in the environment"
    try:
        import numba
    except ImportError as exc:  # the numpy path takes over
        return None, repr(exc)
    try:
        numba.njit(cache=True)(_cumsum)  # fails at once where no cache folder is writable
        jit = numba.njit(cache=True, nogil=True)
    except RuntimeError:  # then every process compiles (about 2 s), rather than failing
        jit = numba.njit(nogil=True)
    _recompute = jit(_recompute)  # called from the other loops: compiled first, by name
    return SimpleNamespace(**{name: jit(fn) for name, fn in _LOOPS.items()}), None
