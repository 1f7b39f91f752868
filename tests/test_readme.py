"""The README's Python blocks run as written: the quickstart (install to a training batch on the
shipped dataset) and the replay example, each in a fresh interpreter from the repository root, as
a newcomer pastes them. The set-up commands are run by ``.ci/run`` and ``tests/test_wheel.py``."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO

README = (REPO / "README.md").read_text()


def python_block(section: str) -> str:
    """The first ```python block under the ``## `` heading that starts with ``section``."""
    m = re.search(rf"^## {re.escape(section)}.*?^```python\n(.*?)^```$", README, re.M | re.S)
    assert m, f"no python block under '## {section}' in README.md"
    return m.group(1)


def run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_quickstart_reaches_a_training_batch() -> None:
    code = python_block("Quickstart")
    assert len(code.splitlines()) <= 25  # a first screen, not a tutorial
    out = run(code)
    assert re.search(r"^222 episodes; Ledger\(rows_in=5000, rows_kept=5000,", out, re.M), out
    assert "'obs': (256, 4)" in out and "'n_step': (256,)" in out, out
    assert "MultiAgentBatch(env_steps=256, {'default_policy': 256 rows})" in out, out


def test_replay_example_runs() -> None:
    run(python_block("Replay"))


@pytest.mark.parametrize(
    "doc", ["docs/ARCHITECTURE.md", "docs/OUTPUTS.md", "docs/PERFORMANCE.md", "LICENSE"]
)
def test_the_files_the_readme_names_exist(doc: str) -> None:
    assert f"`{doc}`" in README
    assert (REPO / doc).is_file()
