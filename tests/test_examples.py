"""Smoke tests: every script in examples/ runs as ``python examples/X.py`` and prints its result.

Each runs in a subprocess from the repository root, as a user would run it, and the assertions
read the numbers it prints (not just the exit code).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO


def run_example(name: str, env: dict[str, str] | None = None, timeout: int = 240) -> str:
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / name)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


def number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in output:\n{text}"
    return float(m.group(1))


def test_examples_use_only_the_public_api() -> None:
    """An example imports the package as ``import offline_prelearner as op`` and uses only the
    names in ``op.__all__``: what it shows, a user can write."""
    import ast

    import offline_prelearner as op

    for path in sorted((REPO / "examples").glob("*.py")):
        tree = ast.parse(path.read_text())
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "offline_prelearner"
            ):
                raise AssertionError(f"{path.name}:{node.lineno}: from-import of the package")
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("offline_prelearner"):
                        assert a.name == "offline_prelearner", f"{path.name}: imports {a.name}"
                        aliases.add(a.asname or a.name)
        for node in ast.walk(tree):
            used = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if used and node.value.id in aliases:
                assert node.attr in op.__all__, f"{path.name}:{node.lineno}: op.{node.attr}"


def test_examples_are_short() -> None:
    scripts = sorted((REPO / "examples").glob("*.py"))
    assert {p.name for p in scripts} >= {
        "batch_job.py",
        "custom_prelearner.py",
        "old_stack_conversion.py",
        "learner_loop.py",
        "behaviour_cloning.py",
    }
    for p in scripts:
        assert len(p.read_text().splitlines()) < 100, p.name


@pytest.mark.ray
@pytest.mark.slow
def test_batch_job() -> None:
    out = run_example("batch_job.py")
    assert number(r"rows read\s+(\d+)", out) == 5000  # the shipped dataset's rows
    assert "rejected 0, duplicate 0" in out
    # 5000 rows in batches of 1000 -> 5 batches x 128 samples
    assert number(r"samples written\s+(\d+)", out) == 640
    assert "(640 rows on disk)" in out
    assert "n_step in data  [1, 2, 3]" in out
    assert "rows balance    True" in out
    assert "module_id" in out


@pytest.mark.ray
@pytest.mark.slow
def test_custom_prelearner() -> None:
    out = run_example("custom_prelearner.py")
    assert "in-process      64 rows; columns include shaped_rewards: True" in out
    assert number(r"in-process.*max error (\S+)", out) < 1e-6
    assert number(r"batch job\s+(\d+) rows written", out) > 0
    assert "from 5000 rows read; rows balance True" in out
    assert number(r"batch job.*max error (\S+)", out) < 1e-6


def test_old_stack_conversion() -> None:
    """Runs in a fresh clone: the old-stack sample it converts ships in datasets/."""
    out = run_example("old_stack_conversion.py")
    assert out.count("6 records, 85 steps in, 85 out, 6 episodes, balanced True") == 2
    assert "6 episodes from rows, 6 from episodes; identical: True" in out
    assert "compressed       85 steps, 6 episodes" in out
    assert "n_step values [1, 2, 3]" in out


@pytest.mark.slow
def test_learner_loop() -> None:
    out = run_example("learner_loop.py")
    first = number(r"loss first 20 steps (\S+)", out)
    last = number(r"last 100 (\S+)", out)
    assert last < first / 2
    assert number(r"priority updates applied (\d+)", out) > 0
    greedy, random = number(r"return greedy (\S+)", out), number(r"random (\S+)", out)
    assert random < 40  # CartPole's random policy lasts ~22 steps
    assert greedy > 2 * random


@pytest.mark.ray
@pytest.mark.slow
def test_behaviour_cloning_beats_random() -> None:
    out = run_example("behaviour_cloning.py")
    assert number(r"transitions\s+(\d+)", out) == 3000  # every transition of the dataset, once
    cloned = number(r"return cloned\s+([\d.]+)", out)
    random = number(r"return random\s+([\d.]+)", out)
    assert cloned > 3 * random and cloned >= 200


@pytest.mark.ray
@pytest.mark.slow
def test_two_learners_share_the_stream_and_learn() -> None:
    out = run_example("two_learners.py")
    shares = re.search(r"rows per learner \[(\d+), (\d+)\]", out)
    assert shares and int(shares.group(1)) > 0 and int(shares.group(2)) > 0, out
    assert number(r"total (\d+)", out) == 5000  # every 3-step transition once, between the two
    greedy, random = number(r"return greedy (\S+)", out), number(r"random (\S+)", out)
    assert greedy > 2 * random
