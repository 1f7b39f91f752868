"""The README is the front page and its Python blocks run as written: the quickstart (install to a
training batch on the shipped dataset) in a fresh interpreter from the repository root, as a
newcomer pastes it, and the site's replay example the same way. The set-up commands are the ones
``.ci/run`` runs (and ``tests/test_wheel.py`` from the wheel); every link resolves to a file."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO

README = (REPO / "README.md").read_text()


def python_block(text: str, heading: str) -> str:
    """The first ```python block under a Markdown heading (any level) starting with ``heading``."""
    m = re.search(rf"^#+ {re.escape(heading)}.*?^```python\n(.*?)^```$", text, re.M | re.S)
    assert m, f"no python block under a heading '{heading}'"
    return m.group(1)


def run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_quickstart_reaches_a_training_batch() -> None:
    code = python_block(README, "Quickstart")
    assert len(code.splitlines()) <= 25  # a first screen, not a tutorial
    out = run(code)
    assert re.search(r"^222 episodes; Ledger\(rows_in=5000, rows_kept=5000,", out, re.M), out
    assert "'obs': (256, 4)" in out and "'n_step': (256,)" in out, out
    assert "MultiAgentBatch(env_steps=256, {'default_policy': 256 rows})" in out, out
    # the site's getting-started page shows the same block, not a copy that drifted
    site = (REPO / "docs" / "getting-started.md").read_text()
    assert python_block(site, "Quickstart") == code


def test_replay_example_runs() -> None:
    run(python_block((REPO / "docs" / "replay.md").read_text(), "Replay"))


def test_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) < 200
    # no dated benchmark logs or commit hashes: those live in docs/PERFORMANCE.md
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README)
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", README)
    assert "mkdocs serve" in README


def test_setup_commands_are_the_ones_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    block = re.search(r"^## Set-up: two commands.*?^```bash\n(.*?)^```$", README, re.M | re.S)
    assert block, "no bash block under '## Set-up: two commands'"
    commands = [line for line in block.group(1).splitlines() if line and line[0] != "#"]
    assert len(commands) == 2, commands
    one = re.search(r"^# README command 1\b.*\n(.*)$", ci, re.M)
    two = re.search(r"^# README command 2\b.*\n(.*)$", ci, re.M)
    assert one and two, "'# README command 1/2' comments missing from .ci/run"
    assert commands[0] == one.group(1)
    install, _, tests = commands[1].rpartition(" && ")
    assert install == two.group(1) and re.search(rf"^{re.escape(tests)}$", ci, re.M), commands[1]


def test_readme_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert {"docs/getting-started.md", "docs/cli.md", "docs/config.md"} <= set(local), local
    missing = [t for t in local if not (REPO / t).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    named = re.findall(r"`((?:docs|tests|benchmarks)/[\w./-]+\.\w+|LICENSE)`", README)
    assert not [n for n in named if not (REPO / n).exists()], named
