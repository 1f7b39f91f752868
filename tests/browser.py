"""A real, headless Chromium for the tests that open a page: Debian's ``chromium`` driven through
Playwright's Python API (never a browser Playwright downloads), offline.

* ``find_chromium()`` -- the executable: ``$OFFLINE_PRELEARNER_CHROMIUM``, else
  ``/usr/bin/chromium``, else ``chromium`` on ``PATH``; ``why_no_browser()`` says, in one line,
  why a browser test cannot run here (``None`` when it can).
* ``HeadlessChromium`` -- a context manager: one browser (a fresh profile folder), many pages.
  ``open(path)`` loads a file, waits for ``window.reportReady`` (or ``window.reportFailure``) and
  returns a ``LoadedPage`` with what the page did: console errors, uncaught exceptions and every
  request it tried that is not ``file:``/``data:``/``about:``/``blob:`` (each such request is
  aborted: a page must work with no network). Leaving the block closes the browser and checks,
  by the profile folder every process of this browser names, that none is left running (any
  that is, is killed by its PID and reported as ``OrphanProcessError``).
* ``launch_or_skip(tmp_path_factory)`` -- what a test module's ``chromium`` fixture yields
  from (``yield from launch_or_skip(tmp_path_factory)``): the browser, or a skip with the
  reason. (A module fixture, not a ``tests/report/conftest.py``: a second plain ``conftest``
  module would take the name ``conftest`` from ``tests/conftest.py``, which tests import.)
* ``text_width(page, selector)`` -- how wide the text was drawn (0: no font on the machine, the
  page would show no words).
* ``count_marks(page, chart)`` -- what vega drew in one chart's ``<svg>``: items per data mark
  (``g.role-mark`` groups: ``mark-rect`` -> ``path``, ``mark-symbol`` -> ``path``,
  ``mark-line`` -> one ``path`` per line, ``mark-rule`` -> ``line``, ``mark-text`` -> ``text``,
  ``mark-image`` -> ``image``); axes, legends and titles are not data marks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_ENV = "OFFLINE_PRELEARNER_CHROMIUM"
DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
INSTALL_HINT = "apt-get install chromium (Debian), or set $" + CHROMIUM_ENV
# Headless, no GPU, and nothing that reaches out on its own (sync, updates, QUIC); as root (CI
# containers) Chromium's sandbox cannot start, hence --no-sandbox. Every host name resolves to
# nothing, so even a request the page routing missed cannot leave the machine.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")
# The page's failure is `reportFailure`, not `reportError`: that name is a built-in function of
# every window (HTML's reportError()), so it would always look set.
READY = """() => window.reportReady === true || window.reportFailure !== undefined"""


class OrphanProcessError(AssertionError):
    """Chromium processes were still running after the browser was closed."""


def find_chromium() -> Path | None:
    """The Chromium executable the browser tests use, or ``None`` where there is none."""
    env = os.environ.get(CHROMIUM_ENV)
    if env:
        return Path(env) if Path(env).is_file() else None
    if DEBIAN_CHROMIUM.is_file():
        return DEBIAN_CHROMIUM
    found = shutil.which("chromium")
    return Path(found) if found else None


def _playwright_driver() -> Path | None:
    try:
        from playwright._impl._driver import compute_driver_executable
    except ImportError:
        return None
    node, _cli = compute_driver_executable()
    return Path(node) if Path(node).is_file() else None


def why_no_browser() -> str | None:
    """One line saying why a browser test cannot run here, or ``None`` when it can."""
    env = os.environ.get(CHROMIUM_ENV)
    if env and not Path(env).is_file():
        return f"${CHROMIUM_ENV}={env!r} is not a file"
    if find_chromium() is None:
        return f"no Chromium found (/usr/bin/chromium or chromium on PATH): {INSTALL_HINT}"
    if _playwright_driver() is None:
        return "Playwright's driver is not installed: pip install -e '.[test]'"
    return None


@dataclass
class LoadedPage:
    """One page the browser opened and what it did (the lists grow while the page lives)."""

    url: str
    page: Any  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)  # non-local URLs it tried (all aborted)

    def problems(self) -> list[str]:
        """Every console error, uncaught exception and network attempt, one line each."""
        return (
            [f"console error: {e}" for e in self.console_errors]
            + [f"page error: {e}" for e in self.page_errors]
            + [f"network request (blocked): {u}" for u in self.network]
        )

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        """``page.evaluate`` on this page."""
        return self.page.evaluate(expression, arg)


def pids_naming(marker: str) -> list[int]:
    """PIDs of the processes whose command line names ``marker`` (this browser's profile)."""
    me = os.getpid()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


class _Driver:
    """Playwright's driver, one per process while any browser is open (its sync API runs one
    event loop per thread, so two browsers open at once share it)."""

    instance: Any = None
    users = 0

    @classmethod
    def acquire(cls) -> Any:
        if cls.instance is None:
            from playwright.sync_api import sync_playwright

            cls.instance = sync_playwright().start()
        cls.users += 1
        return cls.instance

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users == 0:
            cls.instance.stop()
            cls.instance = None


class HeadlessChromium:
    """Debian's Chromium, headless and offline, for one ``with`` block.

    Leaving the block closes the browser, waits up to ``grace_s`` for its processes to end, then
    kills any left (by PID) and raises ``OrphanProcessError`` naming them.

    Args:
        executable: the Chromium to run (``find_chromium()``).
        viewport: the pages' size in CSS pixels (width, height).
        profile_root: where the fresh profile folder goes (a temp folder by default).
        env: the browser's environment (default: this process's).
    """

    def __init__(
        self,
        executable: Path,
        *,
        viewport: tuple[int, int] = (1280, 800),
        profile_root: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.executable = executable
        self.env = env
        self.viewport = viewport
        self._profile_root = profile_root
        self._profile: str | None = None
        self._playwright: Any = None
        self._context: Any = None
        self.pages: list[LoadedPage] = []
        self.grace_s = 5.0

    def __enter__(self) -> HeadlessChromium:
        self._profile = tempfile.mkdtemp(prefix="op-chromium-", dir=self._profile_root)
        self._playwright = _Driver.acquire()
        try:
            self._context = self._playwright.chromium.launch_persistent_context(
                self._profile,
                executable_path=str(self.executable),
                headless=True,
                args=list(CHROMIUM_ARGS),
                viewport={"width": self.viewport[0], "height": self.viewport[1]},
                env=self.env,
            )
            self._context.route("**/*", self._route)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The PIDs of this browser's processes now running."""
        return pids_naming(self._profile) if self._profile else []

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(LOCAL_SCHEMES):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def open(
        self, path: str | os.PathLike[str], *, wait: bool = True, timeout_s: float = 20
    ) -> LoadedPage:
        """Open a local file (or a URL) in a new page.

        Args:
            path: an HTML file, or a URL as it is.
            wait: wait until ``window.reportReady`` is true or ``window.reportFailure`` is set.
            timeout_s: how long to wait for the load and for ``reportReady``.

        Returns:
            The page, with what it logged and tried so far.
        """
        url = str(path) if "://" in str(path) else Path(path).resolve().as_uri()
        page = self._context.new_page()
        loaded = LoadedPage(url, page)
        page.on("console", lambda m: m.type == "error" and loaded.console_errors.append(m.text))
        page.on("pageerror", lambda e: loaded.page_errors.append(str(e)))

        def request(r: Any) -> None:
            if not r.url.startswith(LOCAL_SCHEMES):
                loaded.network.append(r.url)

        page.on("request", request)
        page.on("websocket", lambda ws: loaded.network.append(ws.url))
        self.pages.append(loaded)
        page.goto(url, wait_until="load", timeout=timeout_s * 1000)
        if wait:
            page.wait_for_function(READY, timeout=timeout_s * 1000)
        return loaded

    def close(self) -> None:
        """Close the browser, then kill (by PID) and report any of its processes left."""
        try:
            if self._context is not None:
                self._context.close()
        finally:
            self._context = None
            if self._playwright is not None:
                _Driver.release()
                self._playwright = None
            left = self._reap()
            if self._profile:
                shutil.rmtree(self._profile, ignore_errors=True)
                self._profile = None
        if left:
            raise OrphanProcessError(f"Chromium processes left running after close: {left}")

    def _reap(self) -> list[int]:
        """Wait for this browser's processes to end; kill those still there; return them."""
        if not self._profile:
            return []
        deadline = time.monotonic() + self.grace_s
        while (left := self.pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left


def launch_or_skip(factory: Any) -> Iterator[HeadlessChromium]:
    """Start one browser for a test module's fixture, or skip the test, saying why.

    Args:
        factory: pytest's ``tmp_path_factory`` (the profile folder goes under it).

    Returns:
        A generator that yields the started browser once and closes it after.
    """
    import pytest

    reason = why_no_browser()
    if reason:
        pytest.skip(f"browser test: {reason}")
    executable = find_chromium()
    assert executable is not None
    with HeadlessChromium(executable, profile_root=factory.mktemp("chromium")) as browser:
        yield browser


def text_width(page: LoadedPage, selector: str) -> float:
    """The drawn width of the first ``selector``'s text in CSS pixels: 0 where Chromium has no
    font to draw it with (a machine without any: ``apt-get install fonts-dejavu-core``).

    Args:
        page: an opened page.
        selector: a CSS selector (an HTML element or an SVG ``text``).

    Returns:
        The width (0.0 where nothing matches).
    """
    return page.evaluate(
        """(sel) => {
            const el = document.querySelector(sel);
            if (!el) return 0;
            const range = document.createRange();
            range.selectNodeContents(el);
            return range.getBoundingClientRect().width;
        }""",
        selector,
    )


def count_marks(page: LoadedPage, chart: str) -> dict[str, int]:
    """What vega drew as data in ``div.chart[data-chart=chart]``: items per mark type.

    Args:
        page: an opened page.
        chart: the chart's ``data-chart`` name.

    Returns:
        ``{"rect": 12, "rule": 1, ...}``: the items of each ``g.role-mark`` group in the chart's
        ``<svg>`` by mark type (empty when the chart has no ``<svg>``).
    """
    return page.evaluate(
        """(name) => {
            const div = document.querySelector(`div.chart[data-chart="${name}"]`);
            const counts = {};
            if (!div) return counts;
            for (const g of div.querySelectorAll("svg g.role-mark")) {
                const type = [...g.classList].find((c) => c.startsWith("mark-"));
                if (!type || type === "mark-group") continue;
                const key = type.slice(5);
                counts[key] = (counts[key] || 0) + g.children.length;
            }
            return counts;
        }""",
        chart,
    )


@dataclass(frozen=True)
class Chart:
    """One ``div.chart`` of a page as the browser shows it."""

    name: str
    expected_marks: int | None  # data-marks, where set
    svg_children: int  # elements inside its <svg> (0: nothing drawn, -1: no <svg>)


def charts(page: LoadedPage) -> list[Chart]:
    """Every ``div.chart`` on the page, in order.

    Args:
        page: an opened page.

    Returns:
        One ``Chart`` per ``div.chart``.
    """
    rows = page.evaluate(
        """() => [...document.querySelectorAll("div.chart")].map((div) => {
            const svg = div.querySelector("svg");
            return [div.dataset.chart ?? "", div.dataset.marks ?? null,
                    svg ? svg.querySelectorAll("*").length : -1];
        })"""
    )
    return [Chart(n, None if m is None else int(m), k) for n, m, k in rows]
