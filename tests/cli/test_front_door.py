"""The front door: what a person sees of each job (a few lines; ``--json`` for scripts), ``inspect``
of every folder the jobs write, and the folders themselves as other readers open them.

One module-scoped set of outputs (the shipped CartPole rows processed and converted each way) is
shared by every test here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.cli import main

ROWS = REPO / "datasets/cartpole-v1/rows"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped rows processed (n_step 3) and converted to rows, episodes and Minari."""
    root = tmp_path_factory.mktemp("front")
    made = {name: root / name for name in ("samples", "rows", "episodes", "minari")}
    jobs = [
        ["process", ROWS, "--out", made["samples"], "--engine", "local", "--set", "n_step=3"],
        ["convert", ROWS, "--to", "rows", "--out", made["rows"]],
        ["convert", ROWS, "--to", "episodes", "--out", made["episodes"]],
        ["convert", ROWS, "--to", "minari", "--env-id", "CartPole-v1", "--out", made["minari"]],
    ]
    for argv in jobs:
        assert main([str(a) for a in [*argv, "--json"]]) == 0
    return made


# ------------------------------------------------------------------------------ the console
def test_process_says_a_few_lines_and_json_says_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    code, said, _ = run(capsys, "process", ROWS, "--out", out, "--engine", "local")
    assert code == 0
    lines = said.splitlines()
    assert 2 <= len(lines) <= 5, said
    assert lines[0].startswith(f"222 episodes, 5,000 rows -> 5,000 samples in {out} (")
    assert lines[0].endswith(" s); every row accounted for"), lines[0]
    assert lines[-1] == f"details: {out}/stats.json (or run with --json)"
    code, printed, _ = run(capsys, "process", ROWS, "--out", out, "--engine", "local", "--json",
                           "--overwrite")  # fmt: skip
    assert code == 0 and len(printed.splitlines()) == 1
    summary = json.loads(printed)
    got = (summary["rows_in"], summary["samples_written"], summary["out"])
    assert got == (5000, 5000, str(out))


def test_process_names_what_it_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "bad"
    data.mkdir()
    t = pq.read_table(ROWS / "cartpole-v1-rows-00000.parquet")
    rewards = t.column("rewards").to_numpy().copy()
    rewards[10] = np.nan
    t = t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards))
    pq.write_table(t, data / "part.parquet")
    argv = ["process", data, "--out", tmp_path / "o", "--engine", "local", "--on-invalid", "skip"]
    code, said, _ = run(capsys, *argv)
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    (reason,) = stats["rows_rejected"]
    n = stats["rows_rejected"][reason]
    lines = said.splitlines()
    assert code == 0 and len(lines) <= 5, said
    assert lines[0].endswith("every row accounted for"), lines
    assert lines[1] == f"rejected {n} rows ({reason} {n})", lines


def test_convert_says_a_few_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e"
    code, said, _ = run(capsys, "convert", ROWS, "--to", "episodes", "--out", out)
    lines = said.splitlines()
    assert code == 0 and 2 <= len(lines) <= 5, said
    assert lines[0].startswith(f"222 episodes, 5,000 rows -> 5,000 written as episodes (5 files) "
                               f"in {out} (")  # fmt: skip
    assert lines[0].endswith("every row accounted for")


def test_report_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "small.parquet"
    shutil.copy(ROWS / "cartpole-v1-rows-00000.parquet", small)
    code, printed, _ = run(capsys, "report", small, "--out", tmp_path / "r.html", "--json")
    assert code == 0 and len(printed.splitlines()) == 1
    done: dict[str, Any] = json.loads(printed)
    assert done["out"] == str(tmp_path / "r.html") and (tmp_path / "r.html").is_file()
    assert done["episodes"] == done["summary"]["episodes"] > 0
    assert "episode_return" in done["charts"] and isinstance(done["anomalies"], list)
    code, said, _ = run(capsys, "report", small, "--out", tmp_path / "r2.html")
    lines = said.splitlines()
    assert code == 0 and lines[0].startswith(f"wrote {tmp_path / 'r2.html'} ({done['episodes']} "
                                             "episodes, ")  # fmt: skip
    assert len(lines) == (2 if done["anomalies"] else 1)
