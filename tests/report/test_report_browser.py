"""``offline-prelearner report`` opened in a real, offline, headless Chromium (``tests/browser.py``)
for each kind of input: the shipped dataset, files RLlib 2.60 wrote (rows with packed cells,
msgpack episodes, old-stack JSON), a Minari dataset, a D4RL file, multi-agent rows and image
observations. On each page: no console error and no network request, ``window.reportReady``,
every chart an ``<svg>`` holding the data marks its ``data-marks`` announces, the image frames
decoded, and every summary number equal to what ``offline-prelearner inspect --json`` (the real
CLI, a subprocess, the same arguments) prints for the same input; a screenshot of each page is
saved under the test's temp dir.

The README's screenshot is this module's picture of the shipped dataset's report:
``OFFLINE_PRELEARNER_SCREENSHOT=docs/report.png .venv/bin/pytest tests/report/test_report_browser.py
-k shipped`` writes it (1280 px wide, the first two screens).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from browser import HeadlessChromium, LoadedPage, charts, count_marks, launch_or_skip, text_width
from conftest import REPO, episodes_to_columns, make_episode, shared_data_dir, to_table

from offline_prelearner.cli import main

pytestmark = pytest.mark.slow

SCREENSHOT_ENV = "OFFLINE_PRELEARNER_SCREENSHOT"
SCREENSHOT_SIZE = (1280, 1600)  # the README's picture: 1280 wide, the first two screens
# The numbers a person reads first (issue 25); `rejected.<reason>` is added for every reason
# `inspect` counts. `seconds` is timed anew by each run, so only its presence is compared.
REQUIRED = ("format", "files", "rows", "episodes", "terminated", "truncated", "not_done",
            "timesteps", "duplicates", "seconds")  # fmt: skip
TIMED = {"seconds"}


@dataclass(frozen=True)
class Input:
    """One input of the test: how to make or find it, and the arguments both commands take."""

    name: str
    locate: Callable[[Path], Path]  # a scratch folder -> the path to report on (may skip)
    args: tuple[str, ...] = ()
    frames: bool = False  # an image leaf: the page shows sample frames
    modules: int = 0  # multi-agent: the number of modules / agents
    odd: bool = False  # the page must list an anomaly (constant rewards, rows rejected)


def _shipped(_: Path) -> Path:
    return REPO / "datasets" / "cartpole-v1" / "rows"


def _rllib(name: str) -> Callable[[Path], Path]:
    def locate(_: Path) -> Path:
        path = shared_data_dir() / name
        if not path.is_file():
            pytest.skip(
                f"RLlib 2.60 file {str(path)!r} is absent (set $OFFLINE_PRELEARNER_SHARED_DATA)"
            )
        return path

    return locate


def _minari(dataset_id: str, backend: str) -> Callable[[Path], Path]:
    def locate(root: Path) -> Path:
        from fixtures.conftest import require_minari
        from fixtures.make_minari import record_minari_dataset

        require_minari()
        return record_minari_dataset(root / "minari", dataset_id, backend).path

    return locate


def _lerobot(_: Path) -> Path:
    """A LeRobot v3.0 dataset LeRobot wrote: two cameras (AV1), decoded into frame strips."""
    return REPO / "tests" / "fixtures" / "lerobot" / "v30_av1"


def _d4rl(root: Path) -> Path:
    from fixtures.conftest import require_h5py
    from fixtures.make_minari import D4RL_VARIANTS, write_d4rl_file

    require_h5py()
    path = root / "d4rl_open_end.hdf5"  # a trailing episode without a done flag: rejected
    write_d4rl_file(path, D4RL_VARIANTS["d4rl_open_end"])
    return path


def _multi_agent(root: Path) -> Path:
    """Rows of 6 episode ids x 3 agents, agents with different returns, lengths and flags."""
    episodes = [
        make_episode(
            5 + 3 * k + 2 * a,
            id=f"ep{k}",
            agent_id=f"agent_{a}",
            terminated=(k + a) % 3 != 0,
            truncated=(k + a) % 3 == 0,
            seed=10 * k + a,
        )
        for k in range(6)
        for a in range(3)
    ]
    path = root / "multi_agent.parquet"
    pq.write_table(to_table(episodes_to_columns(episodes)), path)
    return path


def _hostile(root: Path) -> Path:
    """Rows with +inf and NaN in observations and a NaN reward (that episode is rejected)."""
    episodes = [make_episode(8, id=f"e{k}", seed=k) for k in range(6)]
    episodes[1].observations[3, 0] = np.inf
    episodes[2].observations[2, 1] = np.nan
    episodes[4].rewards[2] = np.nan
    path = root / "hostile.parquet"
    pq.write_table(to_table(episodes_to_columns(episodes)), path)
    return path


INPUTS = [
    Input("shipped", _shipped, odd=True),
    Input("rllib_rows_packed", _rllib("cartpole-v1_rows_compressed.parquet"), ("--legacy-pickle",)),
    Input("rllib_episodes", _rllib("cartpole-v1_episodes_msgpack.parquet")),
    Input("rllib_old_stack", _rllib("cartpole-v1_old_stack_json_uncompressed.json")),
    Input("minari", _minari("cartpole/random-v0", "arrow")),
    Input("d4rl", _d4rl, odd=True),
    Input("multi_agent", _multi_agent, modules=3),
    Input("minari_images", _minari("images/jpeg-v0", "hdf5"), frames=True),
    Input("hostile_values", _hostile, odd=True),
    Input("lerobot", _lerobot, frames=True, odd=True),  # a last frame with no next: rejected
]
BY_NAME = {i.name: i for i in INPUTS}


@dataclass
class Made:
    """One input's report (made by the CLI in this process) and ``inspect --json``'s dict."""

    path: Path
    html: Path
    inspected: dict[str, Any]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``inspect --json``'s dict with nested dicts' keys joined by dots (``rejected.not_done``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _arg(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (what the page shows)."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _inspect(path: Path, args: tuple[str, ...]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "offline_prelearner", "inspect", "--json", _arg(path), *args]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )


def selected(request: pytest.FixtureRequest) -> list[Input]:
    """The inputs the selected tests open (``-k shipped``: one), and always the shipped one."""
    names = {"shipped"}
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        if spec is not None and isinstance(spec.params.get("opened"), Input):
            names.add(spec.params["opened"].name)
    return [i for i in INPUTS if i.name in names]


@pytest.fixture(scope="module")
def made(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Made | str]:
    """Every selected input's report and ``inspect --json``, or why it is absent (a skip's
    reason). The ``inspect`` subprocesses run side by side while the reports are made here (the
    CLI's ``main`` in this process: the same code as the console script, one import)."""
    root = tmp_path_factory.mktemp("report_inputs")
    paths: dict[str, Path | str] = {}
    for i in selected(request):
        try:
            paths[i.name] = i.locate(root)
        except pytest.skip.Exception as e:
            paths[i.name] = str(e.msg)
    running = {
        name: _inspect(p, BY_NAME[name].args) for name, p in paths.items() if isinstance(p, Path)
    }
    out: dict[str, Made | str] = {n: p for n, p in paths.items() if isinstance(p, str)}
    try:
        for name, proc in running.items():
            path, html = paths[name], root / f"{name}.html"
            assert isinstance(path, Path)
            with contextlib.chdir(REPO):  # the shipped dataset by its relative path, as a user
                code = main(["report", _arg(path), "--out", str(html), *BY_NAME[name].args])
            assert code == 0, f"report {name} exited {code}"
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"inspect {name} exited {proc.returncode}: {stderr}"
            out[name] = Made(path, html, json.loads(stdout))
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadlessChromium]:
    yield from launch_or_skip(tmp_path_factory)


@pytest.fixture
def opened(
    request: pytest.FixtureRequest, chromium: HeadlessChromium, made: dict[str, Made | str]
) -> Iterator[tuple[Input, Made, LoadedPage]]:
    i: Input = request.param
    m = made[i.name]
    if isinstance(m, str):
        pytest.skip(m)
    page = chromium.open(m.html)
    try:
        yield i, m, page
    finally:
        page.page.close()


def summary(page: LoadedPage) -> dict[str, str]:
    return dict(
        page.evaluate(
            "() => [...document.querySelectorAll('dl#summary dd[data-key]')]"
            ".map((dd) => [dd.dataset.key, dd.dataset.value])"
        )
    )


def check_summary(page: LoadedPage, inspected: dict[str, Any]) -> None:
    on_page = summary(page)
    truth = flatten(inspected)
    required = set(REQUIRED) | {k for k in truth if k.startswith("rejected.")}
    assert required <= set(on_page), f"missing from the summary: {sorted(required - set(on_page))}"
    for key, text in on_page.items():
        assert key in truth, f"summary key {key!r} is not a key of inspect --json"
        want = truth[key]
        if key in TIMED:
            assert float(text) > 0
        elif isinstance(want, str):
            assert text == want, key
        else:
            assert json.loads(text) == want, f"{key}: page {text!r}, inspect --json {want!r}"


def check_charts(page: LoadedPage, i: Input) -> None:
    drawn = charts(page)
    assert len(drawn) >= 6, [c.name for c in drawn]  # lengths, returns, drift, actions, rewards
    for c in drawn:
        assert c.svg_children > 0, f"chart {c.name!r}: no <svg>, or an empty one"
        marks = count_marks(page, c.name)
        assert sum(marks.values()) > 0, f"chart {c.name!r} drew no data mark"
        if c.expected_marks is not None:
            assert sum(marks.values()) == c.expected_marks, f"chart {c.name!r}: {marks}"
    if i.modules:
        by_module = [c for c in drawn if c.name == "episodes_by_module"]
        assert by_module and count_marks(page, "episodes_by_module") == {"rect": i.modules}


def check_tables(page: LoadedPage, inspected: dict[str, Any], i: Input) -> None:
    files = page.evaluate(
        "() => [...document.querySelectorAll('table#per-file tbody tr')]"
        ".map((tr) => tr.cells[0].textContent)"
    )
    assert sorted(files) == sorted(f["file"] for f in inspected["per_file"])
    anomalies = page.evaluate("() => document.querySelectorAll('ul#anomalies li').length")
    assert page.evaluate("() => document.querySelector('ul#anomalies') !== null")
    assert anomalies >= 1 if i.odd else anomalies >= 0
    frames = page.evaluate(
        "() => [...document.querySelectorAll('.frames img')]"
        ".map((img) => img.complete && img.naturalWidth > 0)"
    )
    assert (len(frames) > 0) == i.frames and all(frames), frames


def screenshot(page: LoadedPage, path: Path, *, full: bool = True) -> None:
    width, height = SCREENSHOT_SIZE
    page.page.screenshot(
        path=path,
        full_page=True,
        clip=None if full else {"x": 0, "y": 0, "width": width, "height": height},
    )


@pytest.mark.parametrize("opened", INPUTS, ids=[i.name for i in INPUTS], indirect=True)
def test_the_report_opens_offline_with_every_chart_and_inspects_numbers(
    opened: tuple[Input, Made, LoadedPage], tmp_path: Path
) -> None:
    i, m, page = opened
    assert page.problems() == []
    assert page.evaluate("() => window.reportReady") is True
    for text in ("h1", "div.chart svg text"):  # words are drawn (a font is installed)
        assert text_width(page, text) > 0, (
            f"no text drawn in {text}: apt-get install fonts-dejavu-core"
        )
    check_summary(page, m.inspected)
    check_charts(page, i)
    check_tables(page, m.inspected, i)
    screenshot(page, tmp_path / f"{i.name}.png")
    assert (tmp_path / f"{i.name}.png").stat().st_size > 10_000
    target = os.environ.get(SCREENSHOT_ENV)
    if target and i.name == "shipped":
        screenshot(page, Path(target), full=False)


def test_the_shipped_reports_numbers_are_the_datasets(
    chromium: HeadlessChromium, made: dict[str, Made | str]
) -> None:
    """The comparison above is not vacuous: the shipped dataset's numbers are known."""
    m = made["shipped"]
    assert isinstance(m, Made)
    d = m.inspected
    assert (d["rows"], d["timesteps"], d["files"]) == (5000, 5000, 5)
    assert d["episodes"] == d["terminated"] + d["truncated"] + d["not_done"] > 100
    assert np.isclose(d["length"]["mean"] * d["episodes"], d["timesteps"])


@pytest.mark.parametrize(
    ("old", "new", "check"),
    [
        ('data-key="rows" data-value="5000"', 'data-key="rows" data-value="4999"', "summary"),
        ('data-key="files" ', 'data-key="files_on_disk" ', "summary"),
        (
            'data-chart="episode_length" data-marks="',
            'data-chart="episode_length" data-marks="1',
            "charts",
        ),
    ],
    ids=["a wrong number", "a key inspect has not", "one mark too many"],
)
def test_a_tampered_page_fails_the_checks(
    chromium: HeadlessChromium,
    made: dict[str, Made | str],
    tmp_path: Path,
    old: str,
    new: str,
    check: str,
) -> None:
    """The checks can fail: the shipped report, edited in one place, does not pass them."""
    m = made["shipped"]
    assert isinstance(m, Made)
    text = m.html.read_text()
    assert text.count(old) == 1
    (tmp_path / "tampered.html").write_text(text.replace(old, new))
    page = chromium.open(tmp_path / "tampered.html")
    try:
        assert page.problems() == []
        with pytest.raises(AssertionError):
            if check == "summary":
                check_summary(page, m.inspected)
            else:
                check_charts(page, BY_NAME["shipped"])
    finally:
        page.page.close()
