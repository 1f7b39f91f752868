"""Smoke test: ``python examples/apex_learner_loop.py`` runs and its printed figures hold up."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPT = REPO / "examples" / "apex_learner_loop.py"


def number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in output:\n{text}"
    return float(m.group(1).replace(",", ""))


def test_example_is_short() -> None:
    assert len(SCRIPT.read_text().splitlines()) < 100


@pytest.mark.ray
@pytest.mark.slow
def test_apex_learner_loop() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local Ray
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"failed:\n{out}\n{proc.stderr[-4000:]}"
    assert number(r"rows read (\d+)", out) == 5000  # the shipped dataset
    assert "balanced True" in out
    held = re.search(r"timesteps per shard \[(\d+), (\d+)\]\s+total (\d+)", out)
    assert held and int(held[1]) > 0 and int(held[2]) > 0
    assert int(held[1]) + int(held[2]) == int(held[3]) == number(r"kept (\d+)", out)
    assert number(r"samples per second ([\d,]+)", out) > 0
    # Every batch's TD errors went back: 1000 batches of 256, all applied (nothing evicted).
    assert number(r"priority updates applied (\d+)", out) == 256_000
    assert number(r"stale (\d+)", out) == 0
    assert number(r"last 100 ([\d.]+)", out) < number(r"loss first 20 steps ([\d.]+)", out)
