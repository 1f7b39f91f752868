"""The report's sections, from the collected statistics: which charts, in what order, and the
observation table.

Chart ids (``data-chart`` in the page, the file names of ``--png``): ``episode_length``,
``episode_return``, ``episode_discounted_return``, ``return_by_episode``, ``episodes_by_module``
(multi-agent data), ``actions`` (discrete) or ``actions_<d>`` (continuous, per dimension),
``obs_<leaf>_<d>`` (per observation dimension), ``reward_step``, ``reward_episode``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .anomalies import channel_counts, dim_name
from .charts import Chart, bars, binned, chart_id, points
from .collect import SAMPLED_DIMS, Collector, LeafStats
from .stats import grouped_histogram, histogram, thin

__all__ = ["Section", "observation_rows", "sections"]

#: The most points of the return-by-episode chart (longer recordings: means of equal runs).
MAX_POINTS = 2000


@dataclass(frozen=True)
class Section:
    """A heading, a sentence on what its charts are for, and the charts."""

    title: str
    about: str
    charts: list[Chart]


def _integer(a: np.ndarray) -> bool:
    return a.dtype.kind in "iub" or bool(a.size and np.all(a == np.round(a)))


def _hist(
    name: str,
    title: str,
    values: np.ndarray,
    x_title: str,
    lo: float,
    hi: float,
    groups: tuple[np.ndarray, list[str]] | None = None,
) -> Chart:
    if groups is None:
        return binned(name, title, histogram(values, lo, hi, integer=_integer(values)), x_title)
    cells = grouped_histogram(values, groups[0], lo, hi, integer=_integer(values))
    return binned(name, f"{title}, per module", cells, x_title, groups=groups[1])


def _episodes(c: Collector) -> Section:
    lens, rets = c.episode_lengths, c.episode_returns
    charts = []
    if len(lens):
        names = c.group_names
        codes = c.episode_groups
        per = (codes, names) if len(names) > 1 else None
        charts.append(
            _hist("episode_length", "Episode length", lens, "steps", lens.min(), lens.max(), per)
        )
        finite = rets[np.isfinite(rets)]
        if finite.size:
            lo, hi = finite.min(), finite.max()
            charts.append(_hist("episode_return", "Episode return", rets, "return", lo, hi, per))
            disc = c.episode_discounted_returns
            fin = disc[np.isfinite(disc)]
            charts.append(
                _hist(
                    "episode_discounted_return",
                    f"Discounted return (gamma = {c.gamma:g})",
                    disc,
                    "discounted return",
                    fin.min(),
                    fin.max(),
                    per,
                )
            )
        if len(names) > 1:
            xs, ys, gs = [], [], []
            for k, g in enumerate(names):  # per module: its own episodes, thinned
                idx = np.flatnonzero(codes == k)
                x, y = thin(rets[idx], MAX_POINTS // len(names) or 1)
                xs.append(np.interp(x, np.arange(len(idx)), idx) if len(idx) else x)
                ys.append(y)
                gs += [g] * len(y)
            charts.append(
                points(
                    "return_by_episode",
                    "Return by episode, per module (drift across the recording)",
                    np.concatenate(xs),
                    np.concatenate(ys),
                    ("episode (recording order)", "return"),
                    gs,
                )
            )
            mean = {g: float(rets[codes == k].mean()) for k, g in enumerate(names)}
            charts.append(
                bars("episodes_by_module", "Mean return per module", mean, "module", "mean return")
            )
        else:
            x, y = thin(rets, MAX_POINTS)
            run = (
                ""
                if len(rets) <= MAX_POINTS
                else f" (means of {-(-len(rets) // MAX_POINTS)} episodes)"
            )
            charts.append(
                points(
                    "return_by_episode",
                    f"Return by episode{run} (drift across the recording)",
                    x,
                    y,
                    ("episode (recording order)", "return"),
                )
            )
    return Section(
        "Episodes",
        "How long episodes are, what they return, and whether returns change over the recording.",
        charts,
    )


def _dims(leaf: LeafStats, prefix: str) -> list[Chart]:
    """A histogram per sampled dimension of a leaf, over its exact range."""
    if leaf.sample is None or leaf.moments.dims == 0:
        return []
    sample = leaf.sample.values.reshape(len(leaf.sample.values), -1)
    m = leaf.moments
    note = (
        ""
        if leaf.sample.seen <= leaf.sample.k
        else f" (a sample of {leaf.sample.k} of {leaf.sample.seen})"
    )
    oob = leaf.out_of_space
    out = []
    for d in range(min(m.dims, SAMPLED_DIMS)):
        name = chart_id(f"{prefix}_{d}") if m.dims > 1 or leaf.shape else chart_id(prefix)
        declared = ""
        if oob is not None:  # the declared space's bounds of this dimension
            lo = np.broadcast_to(oob.low.reshape(-1), (m.dims,))[d]
            hi = np.broadcast_to(oob.high.reshape(-1), (m.dims,))[d]
            declared = f" (declared [{lo:.4g}, {hi:.4g}])"
        out.append(
            _hist(
                name,
                f"{dim_name(leaf, d)}{declared}{note}",
                sample[:, d],
                dim_name(leaf, d),
                m.min[d],
                m.max[d],
            )
        )
    return out


def _actions(c: Collector) -> Section:
    counts = c.discrete_actions
    charts = []
    if counts is not None:
        space = "" if c.action_space is None else f" (declared: {c.action_space})"
        charts.append(bars("actions", f"Steps per action{space}", counts, "action", "steps"))
    elif c.actions is not None:
        charts += _dims(c.actions, "actions")
    return Section(
        "Actions",
        "Which actions the behaviour policy took: a bar per discrete action, a histogram per "
        "dimension of continuous ones (their range against the declared space in the table).",
        charts,
    )


def _observations(c: Collector) -> Section:
    charts = []
    for leaf in c.leaves.values():
        charts += _dims(leaf, leaf.name.replace(".", "_"))
    return Section(
        "Observations",
        "Per observation leaf and dimension: the range, constant dimensions, NaN and inf, values "
        "outside the declared space; a histogram per dimension.",
        charts,
    )


def _rewards(c: Collector) -> Section:
    charts = []
    r = c.rewards
    if r is not None and r.sample is not None and r.moments.dims:
        m = r.moments
        charts.append(
            _hist("reward_step", "Reward per step", r.sample.values, "reward", m.min[0], m.max[0])
        )
        lens, rets = c.episode_lengths, c.episode_returns
        with np.errstate(invalid="ignore", divide="ignore"):
            per = rets / np.maximum(lens, 1)
        finite = per[np.isfinite(per)]
        if finite.size:
            charts.append(
                _hist(
                    "reward_episode",
                    "Mean reward per step, per episode",
                    per,
                    "mean reward",
                    finite.min(),
                    finite.max(),
                )
            )
    return Section(
        "Rewards", "The reward of each step, and each episode's mean reward per step.", charts
    )


def sections(c: Collector) -> list[Section]:
    """The page's chart sections, in order.

    Args:
        c: The collected statistics.

    Returns:
        Episodes, actions, observations, rewards.
    """
    out = [_episodes(c), _actions(c), _observations(c), _rewards(c)]
    seen: set[str] = set()
    for s in out:  # ids are unique in the page (two leaves whose names differ only in "." / "_")
        for i, ch in enumerate(s.charts):
            name, k = ch.name, 1
            while name in seen:
                k += 1
                name = f"{ch.name}_{k}"
            seen.add(name)
            if name != ch.name:
                s.charts[i] = replace(ch, name=name)
    return out


def _leaf_rows(leaf: LeafStats) -> list[dict[str, Any]]:
    m = leaf.moments
    counts = channel_counts(leaf)
    std = m.std
    const = m.constant
    return [
        {
            "name": dim_name(leaf, d),
            "dtype": leaf.dtype,
            "min": float(m.min[d]),
            "mean": float(m.mean[d]) if m.count[d] else float("nan"),
            "max": float(m.max[d]),
            "std": float(std[d]),
            "nan": int(m.nan[d]),
            "inf": int(m.posinf[d] + m.neginf[d]),
            "constant": bool(const[d]),
            "out_of_space": None if counts is None else int(counts[d]),
        }
        for d in range(m.dims)
    ]


#: The most rows of the observation table (a wide leaf shows its first dimensions).
MAX_ROWS = 256


def observation_rows(c: Collector) -> list[dict[str, Any]]:
    """The observation table: a row per leaf dimension (per channel for images), then the
    actions' and the rewards', at most :data:`MAX_ROWS`.

    Args:
        c: The collected statistics.

    Returns:
        Rows of ``name, dtype, min, mean, max, std, nan, inf, constant, out_of_space`` (None:
        no declared space).
    """
    rows: list[dict[str, Any]] = []
    for leaf in [*c.leaves.values(), c.actions, c.rewards]:
        if leaf is not None:
            rows += _leaf_rows(leaf)[: MAX_ROWS - len(rows)]
    return rows
