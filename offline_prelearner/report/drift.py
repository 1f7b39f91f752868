"""Whether a per-episode series (returns, lengths) drifts over the recording, for any number of
episodes, and how much the verdict can be trusted.

The test is Spearman's rank correlation rho between the episodes' recording order and the series,
two-sided, at :data:`ALPHA`. Its p-value comes from the permutation distribution of rho under a
random order: every order for up to :data:`EXACT_UP_TO` episodes, :data:`PERMUTATIONS` seeded
orders up to :data:`SAMPLED_UP_TO`, the normal approximation (rho sqrt(n - 1)) beyond. The same
distribution gives the *critical* |rho|: the smallest correlation the test can tell from chance with
this many episodes, which the page puts in words when episodes are few.

A drift is reported when the trend is significant *and* material: the means of the first and
last :attr:`Drift.ends` episodes differ by more than the series' standard deviation and by more
than 20 % of the larger mean's magnitude (a large recording makes any tiny trend significant).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .numbers import human, round_sig

__all__ = [
    "ALPHA",
    "EXACT_UP_TO",
    "FEW_EPISODES",
    "MIN_EPISODES",
    "PERMUTATIONS",
    "SAMPLED_UP_TO",
    "Drift",
    "drift",
]

#: Significance level of the trend test (two-sided).
ALPHA = 0.05
#: Under this many episodes no order can be told from chance at :data:`ALPHA` (with 4
#: episodes the most extreme rho, ±1, has a two-sided p of 2/24): drift is not judged.
MIN_EPISODES = 5
#: Under this many episodes the page says what the test can and cannot see.
FEW_EPISODES = 100
#: Every permutation is enumerated up to this many episodes (7! = 5,040).
EXACT_UP_TO = 7
#: Seeded permutations drawn up to :data:`SAMPLED_UP_TO` episodes.
PERMUTATIONS = 2000
#: Beyond this many episodes the normal approximation of rho's distribution is used.
SAMPLED_UP_TO = 300
#: A material drift: the ends' means differ by more than this share of the larger magnitude.
MATERIAL = 0.2


@dataclass(frozen=True)
class Drift:
    """The verdict on one series.

    Attributes:
        series: What the values are, as the page says it (``returns``, ``episode lengths``).
        episodes: The finite values judged.
        ends: Episodes averaged at each end (a tenth, at least ``min(10, n // 3)``).
        first: Mean of the first ``ends`` episodes (NaN: not judged).
        last: Mean of the last ``ends`` episodes.
        rho: Spearman's rho of recording order and value (None: not judged).
        p: Its two-sided p-value.
        critical: The smallest |rho| significant at :data:`ALPHA` with this many episodes (None:
            none is).
        found: A significant and material drift.
    """

    series: str
    episodes: int
    ends: int
    first: float
    last: float
    rho: float | None
    p: float | None
    critical: float | None
    found: bool

    @property
    def judged(self) -> bool:
        """Whether there were enough episodes to judge at all."""
        return self.rho is not None

    def sentence(self) -> str:
        """The anomaly, in words (meaningful where :attr:`found`).

        Returns:
            ``returns drift from 75.38 to 444.6 over the recording (...)``.
        """
        return (
            f"{self.series} drift from {human(self.first)} to {human(self.last)} over the "
            f"recording (means of the {_ends(self.ends)}; Spearman's "
            f"rho = {self.rho:.2f}, {_p(self.p)}, {self.episodes} episodes)"
        )

    def verdict(self) -> str:
        """What the test found, in one sentence, whatever it found.

        Returns:
            The sentence.
        """
        if not self.judged:
            return f"Drift of {self.series} is not judged: {self.power()}"
        what = "a drift" if self.found else "no drift"
        if not self.found and self.p is not None and self.p < ALPHA:
            what = "a trend too small to matter"
        return (
            f"{self.series.capitalize()} over {self.episodes} episodes: Spearman's "
            f"rho = {self.rho:.2f} ({_p(self.p)}), means of the {_ends(self.ends)} "
            f"{human(self.first)} and {human(self.last)}: {what}."
        )

    def power(self) -> str | None:
        """What the test can see with this many episodes, in words; None from
        :data:`FEW_EPISODES` episodes on (it sees any material drift).

        Returns:
            The sentence, or None.
        """
        n = self.episodes
        if not self.judged or self.critical is None:
            return (
                f"{n} episode{'' if n == 1 else 's'} are too few for any order to be told "
                f"from chance at {ALPHA:.0%} (at least {MIN_EPISODES} are needed)."
            )
        if n >= FEW_EPISODES:
            return None
        c = self.critical
        strength = (
            "a nearly steady rise or fall"
            if c >= 0.8
            else "a strong trend"
            if c >= 0.5
            else "a moderate trend"
            if c >= 0.3
            else "a weak trend"
        )
        return (
            f"With {n} episodes the test tells a trend from chance ({ALPHA:.0%}) only from "
            f"Spearman's |rho| ≥ {c:.2f} between recording order and {self.series} ({strength}); "
            "a weaker drift may go unseen."
        )

    def to_dict(self) -> dict[str, Any]:
        """The verdict as a JSON-able dict (numbers to 4 significant digits, NaN means as
        None), with its sentences.

        Returns:
            The fields, ``judged``, ``verdict`` and ``power``.
        """
        out = asdict(self)
        for k in ("first", "last", "rho", "p", "critical"):  # rounded as the page writes them
            v = out[k]
            out[k] = None if v is None or not math.isfinite(v) else round_sig(v)
        return {**out, "judged": self.judged, "verdict": self.verdict(), "power": self.power()}


def _ends(k: int) -> str:
    return "first and last episode" if k == 1 else f"first and last {k} episodes"


def _p(p: float | None) -> str:
    if p is None:
        return "p unknown"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def ranks(v: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their mean rank (as Spearman's rho wants).

    Args:
        v: The values (1-D, finite).

    Returns:
        The ranks, float64.
    """
    order = np.argsort(v, kind="stable")
    s = v[order]
    new = np.r_[True, s[1:] != s[:-1]]
    starts = np.flatnonzero(new)
    stops = np.r_[starts[1:], len(v)]
    mean_rank = (starts + stops - 1) / 2.0 + 1.0
    out = np.empty(len(v))
    out[order] = mean_rank[np.cumsum(new) - 1]
    return out


def _null(a: np.ndarray, b: np.ndarray, seed: int) -> np.ndarray | None:
    """|rho| of ``a`` against every (or :data:`PERMUTATIONS` seeded) reorderings of ``b``; None
    beyond :data:`SAMPLED_UP_TO` values (the normal approximation serves)."""
    n = len(a)
    if n <= EXACT_UP_TO:
        orders = np.array(list(itertools.permutations(range(n))))
        return np.asarray(np.abs(b[orders] @ a))
    if n <= SAMPLED_UP_TO:
        rng = np.random.default_rng(seed)
        return np.asarray(np.abs(rng.permuted(np.tile(b, (PERMUTATIONS, 1)), axis=1) @ a))
    return None


def drift(values: np.ndarray, series: str = "returns", seed: int = 0) -> Drift:
    """Judges a per-episode series for drift over the recording (the module's test).

    Args:
        values: One value per episode, in recording order; non-finite ones are left out.
        series: What the values are, for the sentences (``returns``, ``episode lengths``).
        seed: Seed of the sampled permutations (the same data give the same verdict).

    Returns:
        The verdict; not judged (``rho`` None) under :data:`MIN_EPISODES` finite values.
    """
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    n = len(v)
    if n < MIN_EPISODES:
        nan = float("nan")
        return Drift(series, n, 0, nan, nan, None, None, None, False)
    k = max(n // 10, min(10, n // 3))
    first, last = float(v[:k].mean()), float(v[-k:].mean())
    a = ranks(v) - (n + 1) / 2.0
    b = np.arange(n) - (n - 1) / 2.0
    norm_a, norm_b = float(np.sqrt(a @ a)), float(np.sqrt(b @ b))
    if norm_a == 0:  # every value equal: no order to speak of
        return Drift(series, n, k, first, last, 0.0, 1.0, _critical(None, n), False)
    a, b = a / norm_a, b / norm_b
    rho = float(a @ b)
    null = _null(a, b, seed)
    if null is None:
        p = math.erfc(abs(rho) * math.sqrt(n - 1) / math.sqrt(2.0))
    else:
        extra = int(n > EXACT_UP_TO)  # a sampled null counts the order seen as one of its draws
        p = float(((null >= abs(rho) - 1e-12).sum() + extra) / (len(null) + extra))
    gap = abs(last - first)
    found = p < ALPHA and gap > v.std() and gap > MATERIAL * max(abs(first), abs(last))
    return Drift(series, n, k, first, last, rho, p, _critical(null, n), found)


def _critical(null: np.ndarray | None, n: int) -> float | None:
    """The smallest |rho| whose two-sided p is at most :data:`ALPHA` (None: none is)."""
    if n > SAMPLED_UP_TO or (null is None and n > EXACT_UP_TO):
        return 1.959964 / math.sqrt(n - 1)
    if null is None:  # a constant series of few values: the null of its size
        b = np.arange(n) - (n - 1) / 2.0
        b = b / np.sqrt(b @ b)
        null = _null(b, b, 0)
        assert null is not None
    values, counts = np.unique(np.round(null, 12), return_counts=True)
    tail = np.cumsum(counts[::-1])[::-1] / len(null)  # P(|rho| >= value)
    ok = np.flatnonzero(tail <= ALPHA)
    return float(values[ok[0]]) if len(ok) else None
