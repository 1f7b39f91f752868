"""The anomalies a person should read first, in words ("obs[2] is constant").

Each check looks at the inspection's counts or the collected statistics and says what is odd,
with the numbers; nothing here changes the data or the counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .collect import Collector, LeafStats

__all__ = ["DRIFT_EPISODES", "anomalies", "dim_name", "drift"]

#: Episodes needed before drift is judged (a tenth at each end, at least 10 episodes each).
DRIFT_EPISODES = 100


def _n(k: int, one: str, many: str | None = None) -> str:
    return f"{k} {one if k == 1 else (many or one + 's')}"


def _g(x: float) -> str:
    return f"{x:.4g}"


def dim_name(leaf: LeafStats, d: int) -> str:
    """``obs[2]``, ``obs.pos[1]``, ``actions[0]``; a scalar leaf is its name alone; an image's
    dimension is its channel (``obs[channel 1]``).

    Args:
        leaf: The column's statistics (its name, per-row shape, whether it is an image).
        d: A flat dimension index into the per-row shape (C order), or the channel of an image.

    Returns:
        The dimension as the page names it.
    """
    if leaf.image:
        return f"{leaf.name}[channel {d}]" if leaf.moments.dims > 1 else leaf.name
    if leaf.shape == ():
        return leaf.name
    if len(leaf.shape) == 1:
        return f"{leaf.name}[{d}]"
    return f"{leaf.name}[{', '.join(map(str, np.unravel_index(d, leaf.shape)))}]"


def drift(values: np.ndarray) -> tuple[float, float] | None:
    """``(mean of the first tenth, mean of the last tenth)`` of a per-episode series where they
    differ by more than the series' standard deviation, and by more than 20 % of the larger
    one's magnitude; None otherwise, or under :data:`DRIFT_EPISODES` episodes.

    Args:
        values: One value per episode, in recording order.

    Returns:
        The two means, or None.
    """
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if len(v) < DRIFT_EPISODES:
        return None
    k = len(v) // 10
    first, last = float(v[:k].mean()), float(v[-k:].mean())
    gap = abs(last - first)
    if gap > v.std() and gap > 0.2 * max(abs(first), abs(last)):
        return first, last
    return None


def _counts(d: dict[str, Any]) -> list[str]:
    out = []
    if d["not_done"]:
        verb = "ends" if d["not_done"] == 1 else "end"
        out.append(f"{_n(d['not_done'], 'episode')} {verb} without a done flag")
    for reason, rows in d["rejected"].items():
        eps = d["rejected_episodes"].get(reason, 0)
        out.append(f"{_n(rows, 'row')} rejected: {reason} ({_n(eps, 'episode')})")
    if d["duplicates"]:
        out.append(
            f"{_n(d['duplicates'], 'duplicate episode')} dropped ({_n(d['duplicate_rows'], 'row')})"
        )
    if d["files_unreadable"]:
        out.append(f"{_n(len(d['files_unreadable']), 'file')} could not be read")
    if not d["rows_balance"]:
        out.append("rows do not balance: rows in != kept + rejected + duplicate")
    if d["rows"] and not d["episodes"]:
        out.append("no episode was kept")
    return out


def _leaf(leaf: LeafStats) -> list[str]:
    m = leaf.moments
    out = []
    const = np.flatnonzero(m.constant)
    if len(const) and leaf.name == "rewards":
        out.append(f"every reward is {_g(m.min[0])}")
    elif len(const) and not leaf.image:
        if len(const) <= 4:
            out += [f"{dim_name(leaf, d)} is constant ({_g(m.min[d])})" for d in const.tolist()]
        else:
            out.append(f"{leaf.name}: {len(const)} of {m.dims} dimensions are constant")
    elif len(const) == m.dims and m.dims:
        out.append(f"{leaf.name} is constant ({_g(m.min[0])}) in every frame")
    for d in np.flatnonzero(m.nan + m.posinf + m.neginf).tolist():
        parts = [(m.nan[d], "NaN"), (m.posinf[d], "+inf"), (m.neginf[d], "-inf")]
        held = " and ".join(f"{k} {w}" for k, w in parts if k)
        out.append(f"{dim_name(leaf, d)} holds {held}")
    oob = leaf.out_of_space
    if oob is not None and oob.count is not None and oob.count.any():
        where = np.flatnonzero(oob.count)
        if leaf.image or len(where) > 4:
            out.append(
                f"{leaf.name}: {_n(int(oob.count.sum()), 'value')} outside the declared space"
            )
        else:
            lo = np.broadcast_to(oob.low.reshape(-1), oob.count.shape)
            hi = np.broadcast_to(oob.high.reshape(-1), oob.count.shape)
            out += [
                f"{dim_name(leaf, d)}: {_n(int(oob.count[d]), 'value')} outside the declared "
                f"space [{_g(lo[d])}, {_g(hi[d])}]"
                for d in where.tolist()
            ]
    return out


def _actions(c: Collector) -> list[str]:
    counts = c.discrete_actions
    if counts is None:
        return []
    unused = [k for k, v in counts.items() if v == 0]
    out = []
    used = [k for k, v in counts.items() if v]
    if len(used) == 1 and len(counts) > 1:
        out.append(f"only one action is ever taken: {used[0]}")
    elif unused:
        shown = ", ".join(map(str, unused[:8])) + (" ..." if len(unused) > 8 else "")
        out.append(f"{_n(len(unused), 'action')} of the declared space never taken: {shown}")
    return out


def anomalies(d: dict[str, Any], c: Collector) -> list[str]:
    """Everything odd about a dataset, one sentence each, the most serious first.

    Args:
        d: ``inspect --json``'s dict for the dataset.
        c: The statistics collected over its kept episodes.

    Returns:
        The sentences (empty: nothing odd).
    """
    out = _counts(d)
    for leaf in c.leaves.values():
        out += _leaf(leaf)
    if c.actions is not None:
        discrete = c.discrete_actions is not None  # "only one action" says it for those
        out += [s for s in _leaf(c.actions) if not (discrete and "is constant" in s)]
    out += _actions(c)
    if c.rewards is not None:
        out += _leaf(c.rewards)
    returns = drift(c.episode_returns)
    if returns is not None:
        out.append(f"returns drift from {_g(returns[0])} to {_g(returns[1])} over the recording")
    lengths = drift(c.episode_lengths)
    if lengths is not None:
        out.append(
            f"episode lengths drift from {_g(lengths[0])} to {_g(lengths[1])} over the recording"
        )
    return out
