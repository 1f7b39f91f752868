"""The browser harness itself (``tests/browser.py``) on hand-written pages: a vega-embed chart
(the JavaScript inlined from vl-convert, as the report inlines it) is counted mark by mark, and
a console error, an uncaught exception, a fetch, an image and a WebSocket to the network are
each caught; the browser leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import (
    CHROMIUM_ENV,
    HeadlessChromium,
    LoadedPage,
    OrphanProcessError,
    charts,
    count_marks,
    find_chromium,
    launch_or_skip,
    pids_naming,
    text_width,
    why_no_browser,
)

BARS = {
    "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
    "data": {"values": [{"a": "x", "n": 3}, {"a": "y", "n": 5}, {"a": "z", "n": 1}]},
    "layer": [
        {
            "mark": "bar",
            "encoding": {"x": {"field": "a"}, "y": {"field": "n", "type": "quantitative"}},
        },
        {"data": {"values": [{}]}, "mark": "rule", "encoding": {"y": {"datum": 4}}},
    ],
}
LINE = {
    "data": {"values": [{"i": i, "r": i * i} for i in range(10)]},
    "mark": {"type": "line", "point": True},
    "encoding": {
        "x": {"field": "i", "type": "quantitative"},
        "y": {"field": "r", "type": "quantitative"},
    },
}


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadlessChromium]:
    yield from launch_or_skip(tmp_path_factory)


@pytest.fixture(scope="module")
def vega_js(chromium: HeadlessChromium) -> str:
    vl_convert = pytest.importorskip(
        "vl_convert", reason="the report extra: pip install -e '.[report]'"
    )
    return vl_convert.javascript_bundle()


def page(tmp_path: Path, body: str, script: str = "", *, js: str = "") -> Path:
    path = tmp_path / "page.html"
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><script>{js}</script></head>"
        f"<body>{body}<script>{script}</script></body></html>"
    )
    return path


def embed(specs: dict[str, dict], marks: dict[str, int]) -> tuple[str, str]:
    """A body with one ``div.chart`` per spec, and the script the report runs on it."""
    body = "".join(
        f'<div class="chart" data-chart="{n}" data-marks="{marks[n]}"></div>' for n in specs
    )
    script = f"""
        const specs = {json.dumps(specs)};
        Promise.all(Object.entries(specs).map(([name, spec]) =>
            vegaEmbed(`div.chart[data-chart="${{name}}"]`, spec,
                      {{renderer: "svg", actions: false}})))
          .then(() => {{ window.reportReady = true; }})
          .catch((e) => {{ console.error(e); window.reportFailure = String(e); }});
    """
    return body, script


def test_a_vega_page_renders_offline_and_its_marks_are_counted(
    chromium: HeadlessChromium, vega_js: str, tmp_path: Path
) -> None:
    body, script = embed({"bars": BARS, "line": LINE}, {"bars": 3, "line": 1})
    loaded = chromium.open(page(tmp_path, body, script, js=vega_js))
    assert loaded.problems() == []
    assert loaded.evaluate("window.reportReady") is True
    assert [(c.name, c.expected_marks) for c in charts(loaded)] == [("bars", 3), ("line", 1)]
    assert all(c.svg_children > 10 for c in charts(loaded))
    # the bars are rects (drawn as <path>), the threshold a rule; axes are not data marks
    assert count_marks(loaded, "bars") == {"rect": 3, "rule": 1}
    assert count_marks(loaded, "line") == {"line": 1, "symbol": 10}
    assert count_marks(loaded, "absent") == {}
    assert text_width(loaded, "div.chart svg text") > 0  # the axis labels are drawn
    loaded.page.screenshot(path=tmp_path / "page.png")
    assert (tmp_path / "page.png").stat().st_size > 1000


def test_a_failing_spec_sets_report_error(
    chromium: HeadlessChromium, vega_js: str, tmp_path: Path
) -> None:
    body, script = embed({"bad": {"mark": "nonsense"}}, {"bad": 1})
    loaded = chromium.open(page(tmp_path, body, script, js=vega_js))
    assert "TypeError" in loaded.evaluate("window.reportFailure")
    assert loaded.console_errors and not loaded.network


def ready(script: str) -> str:
    return script + ";window.reportReady = true;"


def test_console_errors_are_caught(chromium: HeadlessChromium, tmp_path: Path) -> None:
    loaded = chromium.open(page(tmp_path, "", ready("console.error('deliberate')")))
    assert loaded.console_errors == ["deliberate"]
    assert loaded.problems() == ["console error: deliberate"]


def test_uncaught_exceptions_are_caught(chromium: HeadlessChromium, tmp_path: Path) -> None:
    loaded = chromium.open(page(tmp_path, "", "window.reportReady = true; null.x;"))
    assert len(loaded.page_errors) == 1 and "null" in loaded.page_errors[0]


def settle(loaded: LoadedPage) -> None:
    loaded.page.wait_for_function("() => window.settled === true", timeout=10_000)


@pytest.mark.parametrize(
    "script",
    [
        "fetch('http://example.invalid/data.json').then(() => window.got = 'through')"
        ".catch(() => window.got = 'blocked').finally(() => window.settled = true)",
        "const i = new Image();"
        "i.onerror = () => { window.got = 'blocked'; window.settled = true; };"
        "i.onload = () => { window.got = 'through'; window.settled = true; };"
        "i.src = 'https://example.invalid/x.png';",
    ],
    ids=["fetch", "image"],
)
def test_network_requests_are_caught_and_blocked(
    chromium: HeadlessChromium, tmp_path: Path, script: str
) -> None:
    loaded = chromium.open(page(tmp_path, "", ready(script)))
    settle(loaded)
    assert loaded.evaluate("window.got") == "blocked"
    assert [u.split("//")[1] for u in loaded.network] in (
        ["example.invalid/data.json"],
        ["example.invalid/x.png"],
    )
    assert any(p.startswith("network request (blocked): ") for p in loaded.problems())


def test_websockets_are_caught(chromium: HeadlessChromium, tmp_path: Path) -> None:
    script = (
        "const s = new WebSocket('ws://example.invalid/');"
        "s.onerror = s.onclose = () => window.settled = true;"
    )
    loaded = chromium.open(page(tmp_path, "", ready(script)))
    settle(loaded)
    assert loaded.network == ["ws://example.invalid/"]


def test_a_page_that_never_gets_ready_times_out(chromium: HeadlessChromium, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="Timeout"):
        chromium.open(page(tmp_path, "", ""), timeout_s=1)


def test_no_process_is_left_after_the_browser_closes(tmp_path: Path) -> None:
    reason = why_no_browser()
    if reason:
        pytest.skip(f"browser test: {reason}")
    executable = find_chromium()
    assert executable is not None
    with HeadlessChromium(executable, profile_root=tmp_path) as browser:
        browser.open(page(tmp_path, "", ready("")))
        running = browser.pids
        assert len(running) >= 2  # the browser and at least its renderer
        profile = browser._profile
    assert profile and pids_naming(profile) == []  # every process named its profile folder
    assert not Path(profile).exists()


def test_a_process_left_behind_is_killed_and_reported(tmp_path: Path) -> None:
    """The orphan check can fail: a process naming the profile folder outlives the browser."""
    reason = why_no_browser()
    if reason:
        pytest.skip(f"browser test: {reason}")
    executable = find_chromium()
    assert executable is not None
    browser = HeadlessChromium(executable, profile_root=tmp_path)
    browser.grace_s = 0.5
    orphan = pytest.raises(OrphanProcessError, match="left running after close")
    with orphan as caught, browser:
        assert browser._profile is not None
        argv = [sys.executable, "-c", "import time; time.sleep(60)", browser._profile]
        straggler = subprocess.Popen(argv)
    assert str(straggler.pid) in str(caught.value)
    assert straggler.wait(timeout=10) == -signal.SIGKILL


def test_why_no_browser_names_a_missing_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHROMIUM_ENV, "/nonexistent/chromium")
    assert find_chromium() is None
    assert why_no_browser() == f"${CHROMIUM_ENV}='/nonexistent/chromium' is not a file"


def test_text_width_is_zero_without_any_font(tmp_path: Path) -> None:
    """A machine with no font draws no words (the page still loads without an error): the
    report's tests check ``text_width`` so that such a machine fails them instead."""
    reason = why_no_browser()
    if reason:
        pytest.skip(f"browser test: {reason}")
    executable = find_chromium()
    assert executable is not None
    conf = tmp_path / "fonts.conf"
    conf.write_text(
        '<?xml version="1.0"?><fontconfig>'
        f"<dir>{tmp_path / 'no-fonts'}</dir><cachedir>{tmp_path / 'cache'}</cachedir>"
        "</fontconfig>"
    )
    html = page(tmp_path, "<h1>Dataset report</h1>", ready(""))
    env = {**os.environ, "FONTCONFIG_FILE": str(conf)}
    with HeadlessChromium(executable, profile_root=tmp_path, env=env) as browser:
        assert text_width(browser.open(html), "h1") == 0
    with HeadlessChromium(executable, profile_root=tmp_path) as browser:
        assert text_width(browser.open(html), "h1") > 50


def test_why_no_browser_names_a_missing_playwright_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    import browser

    monkeypatch.setattr(browser, "find_chromium", lambda: Path("chromium"))
    monkeypatch.setattr(browser, "_playwright_driver", lambda: None)
    monkeypatch.delenv(CHROMIUM_ENV, raising=False)
    assert why_no_browser() == "Playwright's driver is not installed: pip install -e '.[test]'"
