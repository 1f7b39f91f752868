"""The anomalies a person should read first, in words ("obs[2] is constant").

Each check looks at the inspection's counts or the collected statistics and says what is odd,
with the numbers; nothing here changes the data or the counts. Each :class:`Finding` also names
the table rows it explains (``cells``: a dimension's name in the observation table, a file in
the files table): the page highlights exactly those rows, so every highlighted row is listed
under the anomalies.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .collect import Collector, LeafStats
from .drift import Drift
from .numbers import human

__all__ = ["Finding", "anomalies", "dim_name"]

#: Dimensions (or files) named one by one in a sentence; more are counted ("and 3 more").
NAMED = 16


@dataclass(frozen=True)
class Finding:
    """One anomaly.

    Attributes:
        text: The sentence.
        cells: The table rows it explains: dimension names of the observation table
            (``obs[2]``, ``obs.pixels[channel 1]``, ``actions``, ``rewards``) and files of the
            files table (their paths as the table shows them).
    """

    text: str
    cells: tuple[str, ...] = ()


def _n(k: int, one: str, many: str | None = None) -> str:
    return f"{k:,} {one if k == 1 else (many or one + 's')}"


def _g(x: float) -> str:
    return human(float(x))


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


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


def _counts(d: dict[str, Any]) -> list[Finding]:
    out = []
    if d["not_done"]:
        verb = "ends" if d["not_done"] == 1 else "end"
        out.append(Finding(f"{_n(d['not_done'], 'episode')} {verb} without a done flag"))
    for reason, rows in d["rejected"].items():
        eps = d["rejected_episodes"].get(reason, 0)
        out.append(Finding(f"{_n(rows, 'row')} rejected: {reason} ({_n(eps, 'episode')})"))
    if d["duplicates"]:
        dup = (
            f"{_n(d['duplicates'], 'duplicate episode')} dropped ({_n(d['duplicate_rows'], 'row')})"
        )
        out.append(Finding(dup))
    if d["files_unreadable"]:
        files = list(d["files_unreadable"])
        names = _names([os.path.basename(f) for f in files])
        out.append(Finding(f"{_n(len(files), 'file')} could not be read: {names}", tuple(files)))
    lossy = [
        f
        for f in d.get("per_file", [])
        if not f["error"] and (f["rows_rejected"] or f["rows_duplicate"])
    ]
    if lossy:
        each = [
            f"{os.path.basename(f['file'])} ("
            + ", ".join(
                f"{_n(f[k], 'row')} {w}"
                for k, w in (("rows_rejected", "rejected"), ("rows_duplicate", "duplicate"))
                if f[k]
            )
            + ")"
            for f in lossy
        ]
        out.append(
            Finding(
                f"{_n(len(lossy), 'file')} lost rows: {_names(each)}",
                tuple(f["file"] for f in lossy),
            )
        )
    if not d["rows_balance"]:
        out.append(Finding("rows do not balance: rows in != kept + rejected + duplicate"))
    if d["rows"] and not d["episodes"]:
        out.append(Finding("no episode was kept"))
    return out


def channel_counts(leaf: LeafStats) -> np.ndarray | None:
    """Values outside the declared space per table row of the leaf: per dimension, or per
    channel of an image (its pixels summed); None where no space bounds the leaf.

    Args:
        leaf: The leaf's statistics.

    Returns:
        One count per row of the observation table, or None.
    """
    oob = leaf.out_of_space
    if oob is None or oob.count is None:
        return None
    if leaf.image:
        per_channel: np.ndarray = np.asarray(oob.count).reshape(-1, max(leaf.moments.dims, 1))
        return np.asarray(per_channel.sum(axis=0))
    return np.asarray(oob.count)


def _constant(leaf: LeafStats) -> list[Finding]:
    m = leaf.moments
    const = np.flatnonzero(m.constant).tolist()
    if not const:
        return []
    names = [dim_name(leaf, d) for d in const]
    if leaf.name == "rewards":
        return [Finding(f"every reward is {_g(m.min[0])}", tuple(names))]
    if leaf.image and len(const) == m.dims:
        return [Finding(f"{leaf.name} is constant ({_g(m.min[0])}) in every frame", tuple(names))]
    tail = " in every frame" if leaf.image else ""
    if len(const) <= 4:
        return [
            Finding(f"{n} is constant ({_g(m.min[d])}){tail}", (n,))
            for n, d in zip(names, const, strict=True)
        ]
    return [
        Finding(
            f"{leaf.name}: {len(const)} of {m.dims} dimensions are constant: {_names(names)}",
            tuple(names),
        )
    ]


def _leaf(leaf: LeafStats, *, constant: bool = True) -> list[Finding]:
    m = leaf.moments
    out = _constant(leaf) if constant else []
    for d in np.flatnonzero(m.nan + m.posinf + m.neginf).tolist():
        parts = [(m.nan[d], "NaN"), (m.posinf[d], "+inf"), (m.neginf[d], "-inf")]
        held = " and ".join(f"{k:,} {w}" for k, w in parts if k)
        out.append(Finding(f"{dim_name(leaf, d)} holds {held}", (dim_name(leaf, d),)))
    counts = channel_counts(leaf)
    if counts is not None and counts.any():
        where = np.flatnonzero(counts).tolist()
        names = [dim_name(leaf, d) for d in where]
        oob = leaf.out_of_space
        assert oob is not None
        if leaf.image or len(where) > 4:
            total = _n(int(counts.sum()), "value")
            out.append(
                Finding(
                    f"{leaf.name}: {total} outside the declared space, in {_names(names)}",
                    tuple(names),
                )
            )
        else:
            lo = np.broadcast_to(oob.low.reshape(-1), counts.shape)
            hi = np.broadcast_to(oob.high.reshape(-1), counts.shape)
            out += [
                Finding(
                    f"{n}: {_n(int(counts[d]), 'value')} outside the declared "
                    f"space [{_g(lo[d])}, {_g(hi[d])}]",
                    (n,),
                )
                for n, d in zip(names, where, strict=True)
            ]
    return out


def _actions(c: Collector) -> list[Finding]:
    counts = c.discrete_actions
    if counts is None or c.actions is None:
        return []
    unused = [k for k, v in counts.items() if v == 0]
    used = [k for k, v in counts.items() if v]
    if len(used) == 1:
        return [Finding(f"only one action is ever taken: {used[0]}", (dim_name(c.actions, 0),))]
    if unused:
        shown = ", ".join(map(str, unused[:8])) + (" ..." if len(unused) > 8 else "")
        return [Finding(f"{_n(len(unused), 'action')} of the declared space never taken: {shown}")]
    return []


def anomalies(d: dict[str, Any], c: Collector, drifts: list[Drift] | None = None) -> list[Finding]:
    """Everything odd about a dataset, one sentence each, the most serious first.

    Args:
        d: ``inspect --json``'s dict for the dataset.
        c: The statistics collected over its kept episodes.
        drifts: The verdicts on the per-episode series (:func:`~.drift.drift`); each one found
            is a sentence.

    Returns:
        The findings (empty: nothing odd).
    """
    out = _counts(d)
    for leaf in c.leaves.values():
        out += _leaf(leaf)
    if c.actions is not None:  # discrete ones: "only one action" says a constant one
        out += _leaf(c.actions, constant=c.discrete_actions is None)
    out += _actions(c)
    if c.rewards is not None:
        out += _leaf(c.rewards)
    out += [Finding(v.sentence()) for v in drifts or [] if v.found]
    return out
