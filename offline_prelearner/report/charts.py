"""The report's charts as Vega-Lite specs (plain dicts), each with the number of marks it draws.

Vega-Lite, because one spec is both the interactive chart in the page (vega-embed, tooltips on
every mark, its data inline as JSON) and the PNG of ``--png`` (``vl_convert.vegalite_to_png``,
no browser). Data are binned here, in numpy, so a spec holds a few hundred values at most
whatever the dataset's size, and the number of marks a chart draws is known (``marks``: the
browser tests count them). The values are rounded as a person would write them (:mod:`.numbers`):
a tooltip shows ``22.52``, not ``22.52252252252252``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .numbers import round_sig, round_to_step

__all__ = ["Chart", "bars", "binned", "chart_id", "points"]

WIDTH = 320
HEIGHT = 180


@dataclass(frozen=True)
class Chart:
    """One chart of the page.

    Attributes:
        name: Its stable id (``data-chart`` in the page, the PNG's file name).
        title: What it shows, in words (the heading above it).
        spec: The Vega-Lite spec.
        marks: The data marks it draws (bars, points), None where unknown.
    """

    name: str
    title: str
    spec: dict[str, Any]
    marks: int | None


def chart_id(text: str) -> str:
    """``text`` as a chart id: letters, digits and ``_`` (``obs.pos[1]`` -> ``obs_pos_1``).

    Args:
        text: A chart's title or a dimension's name.

    Returns:
        The id; ``"chart"`` when nothing of ``text`` is left.
    """
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_") or "chart"


def _num(x: float, step: float | None = None) -> float | int | None:
    """A float for JSON, rounded (to the decimals that tell values ``step`` apart, else to
    four significant digits); None for NaN / inf, which JSON cannot hold."""
    if isinstance(x, int | np.integer):  # a count stays an integer
        return int(x)
    if not np.isfinite(x):
        return None
    return round_sig(float(x)) if step is None else round_to_step(float(x), step)


def _spec(values: list[dict[str, Any]], mark: dict[str, Any], encoding: dict[str, Any]) -> Any:
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "data": {"values": values},
        "mark": {**mark, "tooltip": True},
        "encoding": encoding,
    }


def binned(
    name: str,
    title: str,
    bins: list[tuple[float, float, int]] | list[tuple[float, float, int, int]],
    x_title: str,
    y_title: str = "count",
    groups: list[str] | None = None,
) -> Chart:
    """A histogram of pre-binned data: one bar per ``(left, right, count)``; with ``groups``,
    bars stacked per ``(left, right, count, group code)``, one colour per group.

    Args:
        name: The chart id.
        title: The heading.
        bins: The bins with data (:func:`~.stats.histogram`, :func:`~.stats.grouped_histogram`).
        x_title: The x axis' title.
        y_title: The y axis' title.
        groups: The group names by code (multi-agent data: modules), or None.

    Returns:
        The chart; one mark per bin (per bin and group).
    """
    values = [
        {
            "from": _num(b[0], b[1] - b[0]),
            "to": _num(b[1], b[1] - b[0]),
            "count": b[2],
            **({} if groups is None else {"group": groups[b[3]]}),  # type: ignore[misc]
        }
        for b in bins
    ]
    enc: dict[str, Any] = {
        "x": {"field": "from", "type": "quantitative", "bin": {"binned": True}, "title": x_title},
        "x2": {"field": "to"},
        "y": {"field": "count", "type": "quantitative", "title": y_title},
    }
    if groups is not None:
        enc["color"] = {"field": "group", "type": "nominal", "title": "module"}
    return Chart(name, title, _spec(values, {"type": "bar"}, enc), len(values))


def bars(name: str, title: str, counts: Mapping[Any, float], x_title: str, y_title: str) -> Chart:
    """One bar per category (every category listed, a zero-height bar for a zero).

    Args:
        name: The chart id.
        title: The heading.
        counts: ``{category: value}`` in the order drawn.
        x_title: The x axis' title.
        y_title: The y axis' title.

    Returns:
        The chart; one mark per category.
    """
    values = [{"category": str(k), "value": _num(v)} for k, v in counts.items()]
    enc = {
        "x": {"field": "category", "type": "nominal", "sort": None, "title": x_title},
        "y": {"field": "value", "type": "quantitative", "title": y_title},
    }
    return Chart(name, title, _spec(values, {"type": "bar"}, enc), len(values))


def points(
    name: str,
    title: str,
    x: np.ndarray,
    y: np.ndarray,
    titles: tuple[str, str],
    groups: list[str] | None = None,
) -> Chart:
    """A scatter of ``(x, y)``, coloured by group where ``groups`` (one per point) is given.

    Args:
        name: The chart id.
        title: The heading.
        x: The x values.
        y: The y values.
        titles: The axes' titles.
        groups: A group name per point (a legend), or None.

    Returns:
        The chart; one mark per point with a finite y.
    """
    values = [
        {"x": _num(a, 1.0), "y": _num(b), **({} if groups is None else {"group": g})}
        for a, b, g in zip(x.tolist(), y.tolist(), groups or [""] * len(x), strict=True)
        if np.isfinite(b)
    ]
    enc: dict[str, Any] = {
        "x": {"field": "x", "type": "quantitative", "title": titles[0]},
        "y": {"field": "y", "type": "quantitative", "title": titles[1]},
    }
    if groups is not None:
        enc["color"] = {"field": "group", "type": "nominal", "title": "module"}
    mark = {"type": "point", "filled": True, "size": 40 if len(values) <= 300 else 12}
    return Chart(name, title, _spec(values, mark, enc), len(values))
