"""The report page: one self-contained HTML file (scripts, specs and data inline; no network).

The page's contract, which the browser tests read:

* each chart is ``<div class="chart" data-chart="NAME" data-marks="N"></div>``: NAME its stable id
  (:mod:`.sections`), N the data marks it draws (bars, points; absent where unknown);
* the summary is ``<dl id="summary">`` with one ``<dd data-key="KEY" data-value="VALUE">TEXT</dd>``
  per number: KEY a key of ``inspect --json``'s dict (nested keys joined with dots:
  ``rejected.bad_order``, ``length.mean``), VALUE the value as JSON writes it (a plain number,
  floats as Python's repr, ``true``/``false``), strings as they are (``format``, ``schema``), TEXT
  the value as a person reads it (:func:`~.numbers.human`: ``22.52``, ``5,000``, ``yes``);
  ``seconds`` is this run's reading time (another ``inspect`` run takes its own), every other
  value is the same in any run; a nested dict's keys appear only when it holds any
  (``rejected.*`` only for rejected rows);
* the dataset card is ``<dl id="dataset-card">``, one ``<dd data-key="KEY">TEXT</dd>`` per entry
  (:mod:`.card`: ``dataset_id``, ``env_id``, ``algorithm``, ``fps``, ``cameras``...);
* the anomalies are ``<ul id="anomalies">``, one ``<li data-cells="JSON">`` each, JSON the list of
  table rows it explains (:class:`~.anomalies.Finding`); a row of ``<table
  id="observation-stats">`` (by its name) or of ``<table id="per-file">`` (by its file) is
  highlighted (``class=bad``) exactly when an anomaly names it;
* the drift verdicts are ``<p class="drift" data-series="returns|lengths">``, each followed,
  when episodes are few, by ``<p class="power">`` (what the test can see); the returns are
  ``<table id="returns">`` (the return and the discounted return, ``data-gamma`` its gamma);
* once every chart has rendered (every ``vegaEmbed`` promise resolved) the page sets
  ``window.reportReady = true``; a failure goes to ``console.error`` and ``window.reportFailure``.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from .anomalies import Finding
from .card import LABELS, card_text
from .charts import Chart
from .drift import Drift
from .numbers import human
from .sections import Section

__all__ = ["SUMMARY_KEYS", "render", "summary_items"]

_CLOSE = re.compile(r"</(script)", re.IGNORECASE)

#: The summary's keys (of ``inspect --json``), in the order shown, with their labels; nested
#: dicts (``rejected``, ``length``...) are flattened below their key.
SUMMARY_KEYS = {
    "format": "format",
    "schema": "schema",
    "files": "files",
    "rows": "rows read",
    "episodes": "episodes kept",
    "terminated": "terminated",
    "truncated": "truncated",
    "not_done": "never ended",
    "timesteps": "timesteps",
    "duplicates": "duplicate episodes",
    "duplicate_rows": "duplicate rows",
    "rejected": "rows rejected",
    "rejected_episodes": "episodes rejected",
    "rows_balance": "every row accounted for",
    "length": "episode length",
    "return": "episode return",
    "seconds": "seconds to read and check",
}


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def summary_items(d: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(key, label, value, text)`` of the summary, from ``inspect --json``'s dict: the value
    as JSON writes it, the text as a person reads it.

    Args:
        d: The dict.

    Returns:
        One item per number (nested dicts flattened: ``rejected.bad_order``).
    """
    out = []
    for key, label in SUMMARY_KEYS.items():
        v = d.get(key)
        if isinstance(v, dict):
            out += [(f"{key}.{k}", f"{label}: {k}", _value(x), human(x)) for k, x in v.items()]
        elif v is not None:
            out.append((key, label, _value(v), human(v)))
    return out


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _script_safe(text: str) -> str:
    """Text that cannot end the ``<script>`` element it sits in (``</script`` and ``<!--`` are
    escaped; in JSON and in JavaScript strings the escaped forms read as the originals)."""
    return _CLOSE.sub(r"<\\/\1", text).replace("<!--", "<\\u0021--")


def _num(x: Any) -> str:
    if isinstance(x, bool):
        return "yes" if x else ""
    return human(x)


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}
h1{font-size:22px;margin-bottom:4px} h2{margin-top:32px;border-bottom:1px solid #ddd}
.path{color:#666;word-break:break-all}
#anomalies li{color:#8a1f11} p.none{color:#2a6b2a}
dl#summary{display:grid;grid-template-columns:max-content auto;gap:2px 16px}
dl#summary dt{color:#555} dl#summary dd{margin:0;font-variant-numeric:tabular-nums}
.charts{display:flex;flex-wrap:wrap;gap:16px} figure{margin:0} figcaption{font-weight:600}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
td:first-child,th:first-child{text-align:left} tr.bad td{background:#fdecea}
dl#dataset-card{display:grid;grid-template-columns:max-content auto;gap:2px 16px}
dl#dataset-card dt{color:#555} dl#dataset-card dd{margin:0} p.power{color:#555}
.frames img{image-rendering:pixelated;width:96px;margin:2px;border:1px solid #ccc}
"""

#: Renders every chart, then says so (``window.reportReady``) or says what failed.
_JS = """
(function () {
  function fail(e) {
    var msg = String((e && e.message) || e);
    console.error('report: ' + msg);
    window.reportFailure = msg;
  }
  try {
    var specs = JSON.parse(document.getElementById('report-specs').textContent);
    var divs = Array.prototype.slice.call(document.querySelectorAll('div.chart'));
    Promise.all(divs.map(function (el) {
      return vegaEmbed(el, specs[el.getAttribute('data-chart')], {renderer: 'svg', actions: false});
    })).then(function () { window.reportReady = true; }, fail);
  } catch (e) { fail(e); }
})();
"""


def _chart(c: Chart) -> str:
    marks = "" if c.marks is None else f' data-marks="{c.marks}"'
    return (
        f"<figure><figcaption>{_e(c.title)}</figcaption>"
        f'<div class="chart" data-chart="{_e(c.name)}"{marks}></div></figure>'
    )


def _summary(d: dict[str, Any]) -> str:
    rows = "".join(
        f'<dt>{_e(label)}</dt><dd data-key="{_e(key)}" data-value="{_e(value)}">{_e(text)}</dd>'
        for key, label, value, text in summary_items(d)
    )
    return f'<dl id="summary">{rows}</dl>'


def _card(items: dict[str, Any]) -> str:
    rows = "".join(
        f'<dt>{_e(LABELS.get(k, k))}</dt><dd data-key="{_e(k)}">{_e(card_text(k, v))}</dd>'
        for k, v in items.items()
    )
    return f'<dl id="dataset-card">{rows}</dl>'


def _anomalies(items: list[Finding]) -> str:
    if not items:
        return '<ul id="anomalies"></ul><p class="none">Nothing odd found.</p>'
    return (
        '<ul id="anomalies">'
        + "".join(
            f'<li data-cells="{_e(json.dumps(list(a.cells)))}">{_e(a.text)}</li>' for a in items
        )
        + "</ul>"
    )


def _drift(drifts: dict[str, Drift]) -> str:
    out = []
    for key, v in drifts.items():
        out.append(f'<p class="drift" data-series="{_e(key)}">{_e(v.verdict())}</p>')
        power = v.power() if v.judged else None
        if power is not None:
            out.append(f'<p class="power" data-series="{_e(key)}">{_e(power)}</p>')
    return "".join(out)


def _returns(returns: dict[str, dict[str, float] | None], gamma: float) -> str:
    cols = ["", "min", "mean", "max", "std"]
    labels = {"return": "return", "discounted_return": f"discounted return (gamma = {gamma:g})"}
    rows = [[labels[k], *(s[c] for c in cols[1:])] for k, s in returns.items() if s is not None]
    table = _table("returns", cols, rows, [False] * len(rows))
    return table.replace('<table id="returns">', f'<table id="returns" data-gamma="{gamma:g}">')


def _table(table_id: str, cols: list[str], rows: list[list[Any]], bad: list[bool]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join(
        f"<tr{' class=bad' if b else ''}>" + "".join(f"<td>{_e(_num(v))}</td>" for v in r) + "</tr>"
        for r, b in zip(rows, bad, strict=True)
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _worst_first(per_file: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def badness(f: dict[str, Any]) -> tuple[Any, ...]:
        lost = f["rows_rejected"] + f["rows_duplicate"]
        return (f["error"] is None, -lost / max(f["rows_read"], 1), -lost, f["file"])

    return sorted(per_file, key=badness)


def _per_file(per_file: list[dict[str, Any]], flagged: set[str]) -> str:
    cols = ["file", "format", "rows_read", "rows_kept", "rows_rejected", "rows_duplicate", "error"]
    files = _worst_first(per_file)
    rows = [[f[c] for c in cols] for f in files]
    return _table("per-file", cols, rows, [f["file"] in flagged for f in files])


def _observations(rows: list[dict[str, Any]], flagged: set[str]) -> str:
    cols = ["name", "dtype", "min", "mean", "max", "std", "nan", "inf", "constant", "out_of_space"]
    bad = [r["name"] in flagged for r in rows]
    return _table("observation-stats", cols, [[r[c] for c in cols] for r in rows], bad)


def _frames(frames: dict[str, list[str]]) -> str:
    return "".join(
        f'<div class="frames" data-leaf="{_e(leaf)}"><p>{_e(leaf)}: sample frames across the '
        f"recording</p>"
        + "".join(f'<img alt="{_e(leaf)} frame" src="{u}">' for u in uris)
        + "</div>"
        for leaf, uris in frames.items()
    )


def render(
    d: dict[str, Any],
    anomalies: list[Finding],
    sections: list[Section],
    observation_rows: list[dict[str, Any]],
    frames: dict[str, list[str]],
    javascript: str,
    *,
    card: dict[str, Any],
    drifts: dict[str, Drift],
    returns: dict[str, dict[str, float] | None],
    gamma: float,
) -> str:
    """The page.

    Args:
        d: ``inspect --json``'s dict (the summary and the per-file table).
        anomalies: The findings for the top; the table rows they name are highlighted.
        sections: The chart sections.
        observation_rows: The observation table (:func:`~.sections.observation_rows`).
        frames: Per image leaf, ``data:`` URIs of sample frames.
        javascript: The Vega, Vega-Lite and vega-embed bundle, inlined.
        card: The dataset card (:func:`~.card.card`).
        drifts: The drift verdicts by series (``returns``, ``lengths``).
        returns: ``return`` and ``discounted_return`` statistics (min, mean, max, std), None
            where no episode was kept.
        gamma: The discounted return's discount.

    Returns:
        The HTML text.
    """
    specs = {c.name: c.spec for s in sections for c in s.charts}
    flagged = {cell for a in anomalies for cell in a.cells}
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>offline-prelearner report: {_e(d['path'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<h1>Dataset report</h1><p class="path">{_e(d["path"])}</p>',
        "<h2>Anomalies</h2>",
        _anomalies(anomalies),
        "<h2>Dataset</h2><p>What the dataset declares about itself, and its spaces.</p>",
        _card(card),
        "<h2>Summary</h2>",
        _summary(d),
    ]
    for s in sections:
        if not s.charts and s.title != "Observations":
            continue
        parts.append(f"<h2>{_e(s.title)}</h2><p>{_e(s.about)}</p>")
        if s.title == "Episodes":
            parts += [_returns(returns, gamma), _drift(drifts)]
        if s.title == "Observations":
            parts += [_observations(observation_rows, flagged), _frames(frames)]
        parts.append('<div class="charts">' + "".join(_chart(c) for c in s.charts) + "</div>")
    parts += [
        "<h2>Files</h2><p>Every input file, the worst first: rows read (counted as the summary "
        "counts them: the columns add up to its numbers), kept, rejected, duplicate, and the "
        "error that made it unreadable.</p>",
        _per_file(d["per_file"], flagged),
        '<script type="application/json" id="report-specs">'
        f"{_script_safe(json.dumps(specs))}</script>",
        f"<script>{_script_safe(javascript)}</script>",
        f"<script>{_JS}</script>",
        "</body></html>",
    ]
    return "\n".join(parts)
