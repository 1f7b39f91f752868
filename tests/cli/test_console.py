"""The console is the product's face: our progress and one-line errors, not Ray's logs.

Each test runs the real command in a subprocess (its own Ray instance where it asks for one).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

pytestmark = [pytest.mark.slow]

ROWS = REPO / "datasets/cartpole-v1/rows"
CLI = [sys.executable, "-m", "offline_prelearner"]


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DATA_LOG_LEVEL")}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def _bad_copy(tmp: Path) -> tuple[Path, str]:
    """The shipped rows with one NaN reward in the middle file; returns (folder, episode id)."""
    folder = tmp / "bad"
    folder.mkdir()
    files = sorted(ROWS.glob("*.parquet"))
    for f in files:
        (folder / f.name).write_bytes(f.read_bytes())
    target = folder / files[2].name
    t = pq.read_table(target)
    rewards = t.column("rewards").to_numpy().copy()
    rewards[500] = np.nan
    pq.write_table(
        t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards)), target
    )
    return folder, str(t.column("eps_id")[500].as_py())


@pytest.mark.ray
def test_ray_engine_prints_our_lines_only(tmp_path: Path) -> None:
    r = _run("process", str(ROWS), "--out", str(tmp_path / "o"), "--engine", "ray")
    assert r.returncode == 0, r.stderr
    # stdout is the summary for a person: a few lines, the counts and the ledger in words
    said = r.stdout.splitlines()
    assert 1 <= len(said) <= 5, r.stdout
    assert said[0].startswith("222 episodes, 5,000 rows -> 5,000 samples in "), said
    assert said[0].endswith("every row accounted for"), said
    assert json.loads((tmp_path / "o" / "stats.json").read_text())["engine"] == "ray"
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) <= 2, r.stderr  # at most the progress line(s) of a pipe
    for noise in ("INFO", "WARNING", "(raylet)", "Traceback", "ray::"):
        assert noise not in r.stderr


@pytest.mark.ray
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_workers_data_error_is_one_line_naming_the_file(tmp_path: Path, engine: str) -> None:
    folder, episode = _bad_copy(tmp_path)
    r = _run("process", str(folder), "--out", str(tmp_path / "o"), "--engine", engine)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and "rows/s" not in ln]
    assert len(lines) == 1, r.stderr
    assert "cartpole-v1-rows-00002.parquet" in lines[0] and episode in lines[0]
    assert "rewards" in lines[0] and "nothing was committed" in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.ray
def test_verbose_shows_rays_own_lines(tmp_path: Path) -> None:
    r = _run("-v", "process", str(ROWS), "--out", str(tmp_path / "o"), "--engine", "ray")
    assert r.returncode == 0, r.stderr
    assert "Ray" in r.stderr or "ray" in r.stderr  # Ray's start-up / execution lines


def test_a_terminal_gets_one_progress_bar(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [*CLI, "process", str(ROWS), "--out", str(tmp_path / "o"), "--engine", "local"],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
        cwd=REPO,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    drawn = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0 and out.startswith(b"222 episodes, 5,000 rows -> 5,000 samples")
    assert "process:" in drawn and "/5.00k" in drawn and "%|" in drawn  # tqdm bar, Parquet total


def test_a_pipe_gets_a_line_not_a_bar(tmp_path: Path) -> None:
    r = _run("process", str(ROWS), "--out", str(tmp_path / "o"), "--engine", "local")
    assert r.returncode == 0
    assert "\r" not in r.stderr and "|" not in r.stderr
