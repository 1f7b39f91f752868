"""Streaming statistics for the report: exact moments, a bounded sample, and counts.

Each accumulator takes a chunk of values at a time (``[n, d]``: n values of d dimensions) and holds
only its summary, so a dataset of any size is summarised in bounded memory, a chunk at a time,
with numpy over the whole chunk (no Python loop per value):

* :class:`Moments`: per dimension the exact count, mean, variance, min and max of the finite values
  (chunks merged with Chan et al.'s parallel update of the mean and the sum of squared deviations,
  which a plain loop over the values equals), NaN and +/-inf counted apart.
* :class:`Sample`: a seeded uniform sample of at most ``k`` rows (reservoir sampling, Algorithm R
  with the chunk's replacements drawn as one vector), the histograms' input.
* :class:`OutOfBounds`: per dimension, how many values fall outside ``[low, high]``.
* :func:`histogram`: fixed bins over a known range, the bins with data
  (:func:`grouped_histogram`: per group, over the same bins).
* :func:`thin`: a long per-episode series cut to at most ``n`` points (means of equal runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Moments", "OutOfBounds", "Sample", "grouped_histogram", "histogram", "thin"]


def _as_2d(x: np.ndarray) -> np.ndarray:
    """``[n, ...]`` as ``[n, d]`` float64 (a scalar per value is one dimension)."""
    x = np.asarray(x)
    return x.reshape(len(x), int(np.prod(x.shape[1:]))).astype(np.float64, copy=False)


@dataclass
class Moments:
    """Exact per-dimension moments of every value seen, finite values only.

    Attributes:
        count: Finite values per dimension.
        mean: Their mean.
        m2: Their sum of squared deviations from the mean (``var = m2 / count``).
        min: Their minimum (``+inf`` before any).
        max: Their maximum (``-inf`` before any).
        nan: NaN values per dimension.
        posinf: ``+inf`` values per dimension.
        neginf: ``-inf`` values per dimension.
    """

    count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(0))
    min: np.ndarray = field(default_factory=lambda: np.zeros(0))
    max: np.ndarray = field(default_factory=lambda: np.zeros(0))
    nan: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    posinf: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    neginf: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def dims(self) -> int:
        """The number of dimensions (0 before the first chunk)."""
        return len(self.count)

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation per dimension (NaN where no finite value was seen)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(np.where(self.count > 0, self.m2 / self.count, np.nan))

    @property
    def constant(self) -> np.ndarray:
        """Per dimension: seen, every value finite and equal."""
        return np.asarray(
            (self.count > 0) & (self.min == self.max) & (self.nan + self.posinf + self.neginf == 0)
        )

    def update(self, values: np.ndarray) -> None:
        """Adds a chunk of values ``[n, ...]`` (the trailing axes are the dimensions).

        Args:
            values: The chunk; any real dtype.

        Raises:
            ValueError: Its number of dimensions differs from the chunks before.
        """
        x = _as_2d(values)
        if len(x) == 0:
            return
        if self.dims == 0:
            self._start(x.shape[1])
        elif x.shape[1] != self.dims:
            raise ValueError(f"a chunk of {x.shape[1]} dimensions after {self.dims}")
        finite = np.isfinite(x)
        if finite.all():
            n = np.full(x.shape[1], len(x), np.int64)
            mean = x.mean(axis=0)
            m2 = ((x - mean) ** 2).sum(axis=0)
            lo, hi = x.min(axis=0), x.max(axis=0)
        else:
            n = finite.sum(axis=0)
            xs = np.where(finite, x, 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = np.where(n > 0, xs.sum(axis=0) / np.maximum(n, 1), 0.0)
            m2 = (np.where(finite, x - mean, 0.0) ** 2).sum(axis=0)
            lo = np.where(finite, x, np.inf).min(axis=0)
            hi = np.where(finite, x, -np.inf).max(axis=0)
            self.nan += np.isnan(x).sum(axis=0)
            self.posinf += (x == np.inf).sum(axis=0)
            self.neginf += (x == -np.inf).sum(axis=0)
        self._merge(n, mean, m2)
        np.minimum(self.min, lo, out=self.min)
        np.maximum(self.max, hi, out=self.max)

    def _start(self, d: int) -> None:
        self.count = np.zeros(d, np.int64)
        self.mean = np.zeros(d)
        self.m2 = np.zeros(d)
        self.min = np.full(d, np.inf)
        self.max = np.full(d, -np.inf)
        self.nan = np.zeros(d, np.int64)
        self.posinf = np.zeros(d, np.int64)
        self.neginf = np.zeros(d, np.int64)

    def _merge(self, n: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> None:
        """Chan et al.: the moments of the union of what was seen and a chunk's."""
        total = self.count + n
        safe = np.maximum(total, 1)
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / safe)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / safe)
        self.count = total

    def merge(self, other: Moments) -> None:
        """Adds everything ``other`` saw (same dimensions, or either one empty).

        Args:
            other: Moments of other values.
        """
        if other.dims == 0:
            return
        if self.dims == 0:
            self._start(other.dims)
        self._merge(other.count, other.mean, other.m2)
        np.minimum(self.min, other.min, out=self.min)
        np.maximum(self.max, other.max, out=self.max)
        self.nan += other.nan
        self.posinf += other.posinf
        self.neginf += other.neginf


class Sample:
    """A seeded uniform sample of at most ``k`` of the rows seen (reservoir sampling).

    Every row seen has the same chance ``k / seen`` to be held; the same chunks and seed give the
    same sample.

    Args:
        k: The most rows held.
        seed: The generator's seed.
    """

    def __init__(self, k: int = 10_000, seed: int = 0) -> None:
        self.k = k
        self.seen = 0
        self.rows: np.ndarray | None = None
        self._held = 0
        self._rng = np.random.default_rng(seed)

    @property
    def values(self) -> np.ndarray:
        """The rows held, ``[min(k, seen), ...]`` (an empty float array before any)."""
        return np.zeros(0) if self.rows is None else self.rows[: self._held]

    def update(self, values: np.ndarray) -> None:
        """Offers a chunk of rows ``[n, ...]``.

        Args:
            values: The chunk (the same trailing shape and dtype every time).
        """
        values = np.asarray(values)
        n = len(values)
        if n == 0:
            return
        if self.rows is None:
            self.rows = np.empty((self.k, *values.shape[1:]), values.dtype)
        take = min(n, self.k - self._held)  # filling up: the first k rows are held as they come
        if take:
            self.rows[self._held : self._held + take] = values[:take]
            self._held += take
        rest = n - take
        if rest:
            # Row i (0-based over all rows seen) replaces slot j ~ U[0, i] when j < k.
            idx = np.arange(self.seen + take, self.seen + n)
            j = (self._rng.random(rest) * (idx + 1)).astype(np.int64)
            hit = j < self.k
            self.rows[j[hit]] = values[take:][hit]
        self.seen += n


@dataclass
class OutOfBounds:
    """Per dimension, how many values fall below ``low`` or above ``high`` (NaN counts as in).

    Args:
        low: Per-dimension lower bounds (broadcast to the values' dimensions).
        high: Per-dimension upper bounds.
    """

    low: np.ndarray
    high: np.ndarray
    count: np.ndarray | None = None

    def update(self, values: np.ndarray) -> None:
        """Counts a chunk ``[n, ...]`` (its trailing shape is the bounds').

        Args:
            values: One chunk of the column, ``[n, ...]``; its per-row values are flattened to
                the bounds' dimensions, and each one outside them adds one to its count.
        """
        x = _as_2d(values)
        low = np.broadcast_to(np.asarray(self.low, np.float64).reshape(-1), x.shape[1:])
        high = np.broadcast_to(np.asarray(self.high, np.float64).reshape(-1), x.shape[1:])
        out = ((x < low) | (x > high)).sum(axis=0)
        self.count = out if self.count is None else self.count + out


def histogram(
    values: np.ndarray, lo: float, hi: float, bins: int = 30, *, integer: bool = False
) -> list[tuple[float, float, int]]:
    """``(left, right, count)`` of the bins of ``values`` that hold any, over ``[lo, hi]``.

    Args:
        values: The values (non-finite ones are left out).
        lo: The range's lower end (the exact minimum, not the sample's).
        hi: Its upper end.
        bins: The most bins.
        integer: Integer values: one bin per integer where ``hi - lo < bins``, and bin edges
            at half-integers.

    Returns:
        The non-empty bins, left to right.
    """
    v = np.asarray(values, np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0 or not (np.isfinite(lo) and np.isfinite(hi)):
        return []
    edges = _edges(lo, hi, bins, integer)
    counts, edges = np.histogram(np.clip(v, edges[0], edges[-1]), edges)
    keep = np.flatnonzero(counts)
    return [(float(edges[i]), float(edges[i + 1]), int(counts[i])) for i in keep.tolist()]


def _edges(lo: float, hi: float, bins: int, integer: bool) -> np.ndarray:
    if integer and hi - lo < bins:
        return np.arange(np.floor(lo) - 0.5, np.ceil(hi) + 1.0, 1.0)
    if hi == lo:
        return np.array([lo - 0.5, hi + 0.5])  # one value: one bin around it
    return np.linspace(lo, hi, bins + 1)


def grouped_histogram(
    values: np.ndarray,
    codes: np.ndarray,
    lo: float,
    hi: float,
    bins: int = 30,
    *,
    integer: bool = False,
) -> list[tuple[float, float, int, int]]:
    """:func:`histogram` per group, over the same bins: ``(left, right, count, group code)`` of
    every (bin, group) that holds any value.

    Args:
        values: The values (non-finite ones are left out).
        codes: Each value's group, an integer from 0.
        lo: The range's lower end.
        hi: Its upper end.
        bins: The most bins.
        integer: As for :func:`histogram`.

    Returns:
        The non-empty (bin, group) cells, by bin then group.
    """
    v = np.asarray(values, np.float64).reshape(-1)
    ok = np.isfinite(v)
    v, g = v[ok], np.asarray(codes, np.int64).reshape(-1)[ok]
    if v.size == 0 or not (np.isfinite(lo) and np.isfinite(hi)):
        return []
    edges = _edges(lo, hi, bins, integer)
    nb = len(edges) - 1
    at = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, nb - 1)  # last bin: closed
    counts = np.bincount(at * (g.max() + 1) + g, minlength=nb * (g.max() + 1))
    counts = counts.reshape(nb, g.max() + 1)
    cells = np.argwhere(counts)
    return [
        (float(edges[b]), float(edges[b + 1]), int(counts[b, k]), int(k)) for b, k in cells.tolist()
    ]


def thin(y: np.ndarray, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """A series cut to at most ``n`` points: the means of ``n`` runs of equal length (the last
    run shorter), each at the middle index of its run; a series of ``n`` or fewer points as it is.

    Args:
        y: The series (one value per episode, in episode order).
        n: The most points.

    Returns:
        ``(x, y)``: the index of each point and its value.
    """
    y = np.asarray(y, np.float64)
    if len(y) <= n:
        return np.arange(len(y), dtype=np.float64), y
    run = -(-len(y) // n)
    starts = np.arange(0, len(y), run)
    sums = np.add.reduceat(y, starts)
    sizes = np.diff(np.append(starts, len(y)))
    return starts + (sizes - 1) / 2.0, sums / sizes
