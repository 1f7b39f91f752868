"""``report``: ``inspect``'s reading and checks, then the statistics, charts and the page.

The dataset is read, stitched, validated and de-duplicated by
:func:`~offline_prelearner.jobs.inspection.inspect_path`, the code ``inspect`` runs, so the
page's summary is ``inspect --json``'s dict and cannot differ from it. The kept episodes then
pass once, a bounded chunk at a time, through the streaming accumulators (:mod:`.collect`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ReadConfig, ValidateConfig
from ..config.checks import check_float
from ..errors import ConfigError
from ..io.sources import expand_paths
from ..jobs.inspection import inspect_path
from .anomalies import anomalies
from .card import card
from .collect import GAMMA, Collector, chunks
from .drift import Drift, drift
from .frames import png_data_uri
from .numbers import round_sig
from .page import render
from .sections import observation_rows, sections

__all__ = ["REPORT_EXTRA", "ReportResult", "report"]

#: What installs the report's one dependency.
REPORT_EXTRA = "pip install 'offline-prelearner[report]'"


def _vl_convert() -> Any:
    try:
        return importlib.import_module("vl_convert")
    except ImportError:
        raise ConfigError(
            f"the report needs vl-convert-python, which is not installed: {REPORT_EXTRA}"
        ) from None


#: Where the JavaScript bundle is kept between runs (building it takes 1-10 s; reading it, ms).
CACHE_ENV = "OFFLINE_PRELEARNER_CACHE_DIR"


def _cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "offline_prelearner"


@functools.lru_cache(maxsize=1)
def _javascript() -> str:
    """Vega, Vega-Lite and vega-embed in one script: vl-convert builds it (1-10 s), once per
    vl-convert version, into the cache folder (``$OFFLINE_PRELEARNER_CACHE_DIR``, default
    ``~/.cache/offline_prelearner``); a folder that cannot be written is no cache."""
    vlc = _vl_convert()
    path = _cache_dir() / f"vega-bundle-vl-convert-{getattr(vlc, '__version__', 'unknown')}.js"
    with contextlib.suppress(OSError):
        text = path.read_text(encoding="utf-8")
        if _BUNDLE_END in text[-500:]:
            return text
    text = str(vlc.javascript_bundle())
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # whole or absent: a reader never sees half a bundle
    return text


#: What vl-convert's bundle ends with (it sets the global the page calls); a cached file that
#: does not is built again.
_BUNDLE_END = "window.vegaEmbed="


@dataclass(frozen=True)
class ReportResult:
    """What :func:`report` wrote.

    Attributes:
        out: The HTML file.
        summary: ``inspect --json``'s dict for the dataset (the page's summary).
        anomalies: The sentences at the top of the page.
        charts: The chart ids, in page order.
        pngs: The PNG files written (``png_dir``), one per chart.
        seconds: The whole report's time (``summary["seconds"]`` is the reading's).
        card: The dataset card (:func:`~.card.card`: Minari's or LeRobot's metadata, spaces).
        drift: The drift verdicts, ``{"returns": ..., "lengths": ...}``
            (:meth:`~.drift.Drift.to_dict`: rho, p, the ends' means, the verdict and, when
            episodes are few, the test's power in words).
        gamma: The discount of the discounted return.
        returns: ``{"return": stats, "discounted_return": stats}`` over the kept episodes
            (``min``, ``mean``, ``max``, ``std``; None where none was kept).
    """

    out: Path
    summary: dict[str, Any]
    anomalies: list[str]
    charts: list[str]
    pngs: list[Path] = field(default_factory=list)
    seconds: float = 0.0
    card: dict[str, Any] = field(default_factory=dict)
    drift: dict[str, dict[str, Any]] = field(default_factory=dict)
    gamma: float = GAMMA
    returns: dict[str, dict[str, float] | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """What was written, as a JSON-able dict (paths as strings).

        Returns:
            The fields by name.
        """
        return {
            "out": str(self.out),
            "summary": self.summary,
            "anomalies": self.anomalies,
            "charts": self.charts,
            "pngs": [str(p) for p in self.pngs],
            "seconds": round(self.seconds, 4),
            "card": self.card,
            "drift": self.drift,
            "gamma": self.gamma,
            "returns": self.returns,
        }


def _stats(a: np.ndarray) -> dict[str, float] | None:
    """min, mean, max, std of the finite values, rounded as the page writes them (None: none)."""
    a = a[np.isfinite(a)]
    if a.size == 0:
        return None
    return {
        "min": round_sig(float(a.min())),
        "mean": round_sig(float(a.mean())),
        "max": round_sig(float(a.max())),
        "std": round_sig(float(a.std())),
    }


def _declared(files: list[str]) -> tuple[Any, Any]:
    """The spaces the files declare: a Minari dataset's metadata, or what ``convert`` wrote into
    Parquet metadata; ``(None, None)`` where they declare none or declare it in a form not read."""
    from ..io.formats.minari.dataset import data_dir_of, read_metadata, space_from_minari
    from ..jobs.dataset_info import info_of_files

    try:
        data_dir = data_dir_of(files[0]) if files else None
        if data_dir is not None:
            meta = read_metadata(data_dir)
            return space_from_minari(meta.observation_space), space_from_minari(meta.action_space)
        info = info_of_files(files)
        return info.observation_space, info.action_space
    except (ValueError, KeyError):  # malformed or unsupported (SchemaError, bad JSON, a space
        return None, None  # type not read): no declaration; a file that cannot be read raises


def _spaces(
    files: list[str], validate: ValidateConfig, declared: tuple[Any, Any]
) -> tuple[Any, Any]:
    """The observation and action spaces to hold the data against: the config's, else the data's
    own (a msgpack record's, a Minari dataset's, a ``convert``'s metadata)."""
    obs, act = _declared(files)
    obs = validate.observation_space or declared[0] or obs
    act = validate.action_space or declared[1] or act
    return obs, act


def report(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    read: ReadConfig | None = None,
    validate: ValidateConfig | None = None,
    *,
    png_dir: str | os.PathLike[str] | None = None,
    quarantine_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    gamma: float = GAMMA,
) -> ReportResult:
    """Writes one self-contained HTML page about the dataset under ``path`` (no network fetch:
    the scripts, the chart specs and their data are inline): the summary ``inspect`` gives, the
    anomalies in words, episode lengths and returns (and their drift), actions, observations per
    leaf and dimension, rewards, and the per-file accounting; above them the dataset card
    (Minari's or LeRobot's metadata, the spaces).

    Args:
        path: A file, a folder or a glob, in any format this package reads.
        out: The HTML file to write (its folder is created).
        read: How to read (format, schema, ``on_invalid``...), as for ``inspect``; default:
            detect the format, and skip (and count) what fails, as ``inspect`` does.
        validate: How to validate, as for ``inspect`` (default: every check; what fails follows
            ``read.on_invalid``).
        png_dir: Also write each chart as ``<chart id>.png`` into this folder.
        quarantine_dir: With ``on_invalid="quarantine"``: where rejected rows go.
        progress: ``progress(i, n, file)`` after each file read (``inspect``'s progress).
        gamma: The discount of the discounted return shown beside each episode's return
            (``sum_t gamma**t * r_t``), in ``[0, 1]``; default 0.99, the n-step samples'.

    Returns:
        What was written, and the summary.

    Raises:
        ConfigError: vl-convert-python is not installed (``pip install
            'offline-prelearner[report]'``), or ``gamma`` is outside ``[0, 1]``.
        DataError: Bad input under ``on_invalid="raise"`` (naming file, column, episode, row).
    """
    start = time.perf_counter()
    gamma = check_float("gamma", gamma, 0.0, 1.0)
    vlc = _vl_convert()  # before the reading: a missing extra is one line, at once
    javascript = _javascript()
    read = read or ReadConfig(format="auto", on_invalid="skip")
    validate = validate or ValidateConfig()
    found = inspect_path(path, read, validate, quarantine_dir=quarantine_dir, progress=progress)
    d = found.to_dict()
    episodes = found.batch.columns
    files = expand_paths(os.fspath(path))
    obs_space, act_space = _spaces(files, validate, found.batch.declared_spaces)
    c = Collector(len(episodes), obs_space, act_space, gamma=gamma)
    for chunk in chunks(episodes):
        c.add(chunk)
    drifts: dict[str, Drift] = {
        "returns": drift(c.episode_returns, "returns"),
        "lengths": drift(c.episode_lengths, "episode lengths"),
    }
    findings = anomalies(d, c, list(drifts.values()))
    parts = sections(c)
    frames = {
        name: [png_data_uri(f) for f in leaf.frames]
        for name, leaf in c.leaves.items()
        if leaf.frames
    }
    d_page = {k: v for k, v in d.items() if k != "episode_stats"}
    about = card(d_page, files, obs_space, act_space)
    returns = {
        "return": _stats(c.episode_returns),
        "discounted_return": _stats(c.episode_discounted_returns),
    }
    text = render(
        d_page,
        findings,
        parts,
        observation_rows(c),
        frames,
        javascript,
        card=about,
        drifts=drifts,
        returns=returns,
        gamma=gamma,
    )
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    charts = [ch for s in parts for ch in s.charts]
    pngs = []
    if png_dir is not None:
        folder = Path(png_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for ch in charts:
            png = folder / f"{ch.name}.png"
            png.write_bytes(vlc.vegalite_to_png(ch.spec, scale=2))
            pngs.append(png)
    return ReportResult(
        out=target,
        summary=d_page,
        anomalies=[f.text for f in findings],
        charts=[ch.name for ch in charts],
        pngs=pngs,
        seconds=time.perf_counter() - start,
        card=about,
        drift={k: v.to_dict() for k, v in drifts.items()},
        gamma=gamma,
        returns=returns,
    )
