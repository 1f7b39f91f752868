"""Hostile names and values cost a bounded amount (issue 20).

A file name that is not UTF-8, an episode id with a NUL byte or a megabyte of text, a YAML alias
bomb, a config integer far beyond any real job, a limit that is not a number: each is refused in
one line (exit 2), or written and read back exactly, never a traceback, a megabyte of output or
gigabytes of memory. The two that used to cost the most run in a subprocess whose time and peak
memory are measured.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner import cli
from offline_prelearner.config import (
    MAX_ALIAS_NODES,
    MAX_CONFIG_BYTES,
    MAX_LIMIT,
    BufferConfig,
    DecodeLimits,
    PreLearnerConfig,
    RayConfig,
    ReadConfig,
    SampleConfig,
    SequenceConfig,
)
from offline_prelearner.errors import ConfigError, Where, shown
from offline_prelearner.replay.replay_buffer import EpisodeReplayBuffer
from offline_prelearner.replay.storage.ring import EpisodeStorage

ROWS = sorted((REPO / "datasets" / "cartpole-v1" / "rows").glob("*.parquet"))

#: What a hostile input may cost at most (issue 20's "done when").
MAX_SECONDS = 600  # a hang guard only: the bounds tested are memory and the one line
MAX_RSS_BYTES = 1 << 30


def run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    """``cli.main`` in this process: exit status, stdout, the non-empty stderr lines."""
    capfd.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 1
    out, err = capfd.readouterr()
    return code, out, [ln for ln in err.splitlines() if ln.strip()]


def rows_with_ids(eps_id: str, n: int = 40) -> pa.Table:
    """The first ``n`` shipped rows, the first episode's (18 rows) renamed ``eps_id``."""
    table = pq.read_table(ROWS[0]).slice(0, n)
    ids = table.column("eps_id").to_pylist()
    first = ids[0]
    renamed = [eps_id if i == first else i for i in ids]
    return table.set_column(
        table.schema.get_field_index("eps_id"), "eps_id", pa.array(renamed, pa.string())
    )


# ------------------------------------------------------------------------------------------------
# shown: every value an error message holds
# ------------------------------------------------------------------------------------------------
def test_shown_is_repr_cut_with_the_full_length() -> None:
    assert shown("ab\x00cd") == "'ab\\x00cd'"
    assert shown("a\nb") == "'a\\nb'"  # one line, whatever the value holds
    long = shown("E" * (1 << 20))
    assert len(long) < 250 and long.endswith("… (1048576 chars)")
    assert shown(b"\xff" * 500).endswith("… (500 bytes)")
    assert shown(os.fsdecode(b"bad\xff.parquet")) == "'bad\\udcff.parquet'"
    assert shown(12) == "12"


class _Leaf:
    """A leaf that counts how often it is shown (the work ``shown`` does)."""

    calls = 0

    def __repr__(self) -> str:
        _Leaf.calls += 1
        return "lol"


def test_shown_of_an_alias_bomb_is_cheap() -> None:
    """A nested list shared 9 ways per level: its full repr would be 9**30 items long; shown
    walks a few levels and items of it (counted: the leaves it formats), whatever the clock."""
    bomb: Any = [_Leaf()]
    for _ in range(30):
        bomb = [bomb] * 9
    _Leaf.calls = 0
    text = shown(bomb)
    assert _Leaf.calls <= 100, _Leaf.calls
    assert len(text) <= 201


def test_where_shows_names_and_ids_cut() -> None:
    text = str(Where(file="d/" + "f" * 1000, episode_id="E" * 5000, row=3))
    assert len(text) < 600
    assert "(1002 chars)" in text and "(5000 chars)" in text and "row 3" in text


def test_any_error_line_of_the_cli_is_cut(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A message built elsewhere with a long value (here an import error naming a 5,000-char
    module) is cut by the CLI to 2,000 characters and its length."""
    module = "m" * 5000
    argv = ["process", str(ROWS[0]), "--out", str(tmp_path / "o"), "--engine", "local"]
    argv += ["--json", "--prelearner", f"{module}:Cls"]
    code, _, err = run(argv, capfd)
    assert code == 2 and len(err) == 1, err
    assert len(err[0]) < 2200 and "chars)" in err[0], len(err[0])


# ------------------------------------------------------------------------------------------------
# file names that are not UTF-8
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def non_utf8_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(ROWS[0], folder / "good.parquet")
    bad = os.path.join(os.fsencode(folder), b"zz-bad\xff\xfe.parquet")
    shutil.copy(os.fsencode(ROWS[1]), bad)
    assert any(not n.isascii() for n in os.listdir(folder))
    return folder


@pytest.mark.parametrize("command", ["inspect", "inspect-human", "process", "convert"])
def test_a_file_name_that_is_not_utf8_is_one_line(
    command: str, non_utf8_folder: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """It crashed the CLI (UnicodeEncodeError in pyarrow, exit 1); Arrow opens UTF-8 paths only,
    so the listing refuses the name in one line that shows its bytes."""
    out = str(tmp_path / "out")
    argv = {
        "inspect": ["inspect", str(non_utf8_folder), "--json"],
        "inspect-human": ["inspect", str(non_utf8_folder)],
        "process": ["process", str(non_utf8_folder), "--out", out, "--engine", "local", "--json"],
        "convert": ["convert", str(non_utf8_folder), "--to", "rows", "--out", out, "--json"],
    }[command]
    code, _, err = run(argv, capfd)
    assert code == 2 and len(err) == 1, err
    assert "b'zz-bad\\xff\\xfe.parquet'" in err[0] and "not valid UTF-8" in err[0]
    assert "zz-bad\\udcff\\udcfe.parquet'" in err[0]  # the path, as repr shows it
    assert "--on-invalid" not in err[0]  # which files are the input: no policy skips that
    assert not os.path.exists(out)


@pytest.mark.parametrize("command", ["process", "convert", "record", "inspect"])
def test_an_output_name_that_is_not_utf8_is_one_line(
    command: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``--out`` (or ``--quarantine-dir``) of bytes that are not UTF-8 was a pyarrow traceback
    after the job had run; now an argument error before it starts."""
    out = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"out\xff"))
    argv = {
        "process": ["process", str(ROWS[0]), "--out", out, "--engine", "local", "--json"],
        "convert": ["convert", str(ROWS[0]), "--to", "rows", "--out", out, "--json"],
        "record": ["record", "CartPole-v1", "--steps", "10", "--out", out, "--json"],
        "inspect": ["inspect", str(ROWS[0]), "--on-invalid", "quarantine", "--quarantine-dir", out],
    }[command]
    code, _, err = run(argv, capfd)
    assert code == 2 and len(err) == 1, err
    assert "out\\xff'" in err[0] and "not valid UTF-8" in err[0], err[0]
    assert not os.path.exists(out)


# ------------------------------------------------------------------------------------------------
# episode ids of any bytes
# ------------------------------------------------------------------------------------------------
NUL_ID = "ab\x00cd"


def eps_ids(folder: Path) -> set[str]:
    """The episode ids of a folder's data files (not ``_index.parquet``: names starting with
    ``_`` are not data, as pyarrow and Ray Data read a folder)."""
    files = [f for f in sorted(folder.rglob("*.parquet")) if not f.name.startswith("_")]
    return {i for f in files for i in pq.read_table(f)["eps_id"].to_pylist()}


def test_a_nul_byte_in_eps_id_round_trips_through_rows_and_episodes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(rows_with_ids(NUL_ID), src / "nul.parquet")
    want = eps_ids(src)
    assert NUL_ID in want
    rows, episodes, back = tmp_path / "rows", tmp_path / "episodes", tmp_path / "back"
    for argv in (
        ["convert", str(src), "--to", "rows", "--out", str(rows), "--json"],
        ["convert", str(src), "--to", "episodes", "--out", str(episodes), "--json"],
        ["convert", str(episodes), "--to", "rows", "--out", str(back), "--json"],
    ):
        code, _, err = run(argv, capfd)
        assert code == 0 and err == [], err
    assert eps_ids(rows) == want
    assert eps_ids(back) == want


def test_a_nul_byte_in_eps_id_is_refused_by_minari_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """It was h5py's ValueError traceback (exit 1): HDF5 string attributes end at NUL."""
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(rows_with_ids(NUL_ID), src / "nul.parquet")
    out = tmp_path / "m"
    code, _, err = run(["convert", str(src), "--to", "minari", "--out", str(out), "--json"], capfd)
    assert code == 2 and len(err) == 1, err
    assert "episode 'ab\\x00cd'" in err[0] and "NUL" in err[0] and "--to rows" in err[0]
    assert not out.exists()


def test_a_megabyte_eps_id_makes_a_short_error_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """It made a 1 MB error line."""
    src = tmp_path / "src"
    src.mkdir()
    table = rows_with_ids("E" * (1 << 20))
    rewards = table.column("rewards").to_pylist()
    rewards[5] = float("nan")
    table = table.set_column(
        table.schema.get_field_index("rewards"), "rewards", pa.array(rewards, pa.float64())
    )
    pq.write_table(table, src / "big-id.parquet")
    argv = ["process", str(src), "--out", str(tmp_path / "o"), "--engine", "local", "--json"]
    code, _, err = run(argv, capfd)
    assert code == 2 and len(err) == 1, err
    assert len(err[0]) < 1000, len(err[0])
    assert "(1048576 chars)" in err[0] and "big-id.parquet" in err[0] and "t=5" in err[0]


# ------------------------------------------------------------------------------------------------
# config files: size, nesting, aliases
# ------------------------------------------------------------------------------------------------
def alias_bomb(levels: int = 9) -> str:
    """The "billion laughs" in one config value: 9 aliases per level, 9**levels strings."""
    items = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "sample:\n  n_step: [" + ", ".join(items) + "]\n"


def test_a_yaml_alias_bomb_is_refused_at_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    tracemalloc.start()  # the bound is memory: the expansion is refused, never built
    try:
        with pytest.raises(ConfigError) as e:
            PreLearnerConfig.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak  # 9**9 strings expanded would be gigabytes
    msg = str(e.value)
    assert "bomb.yaml" in msg and "line 2, column" in msg and str(MAX_ALIAS_NODES) in msg


def test_yaml_anchors_of_real_configs_still_load(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "read: &r {format: rows, on_invalid: skip}\n"
        "sample:\n  unit: sequence\n  n_step: &n [1, 3]\n  seq_len: &s 7\n  burn_in: *s\n"
        "buffer: {capacity: 1000}\n"
    )
    config = PreLearnerConfig.load(path)
    assert config.sample.sequence is not None  # seq_len / burn_in: the old, flat spelling
    assert config.sample.n_step == (1, 3) and config.sample.sequence.burn_in == 7
    assert config.read.format == "rows" and config.read.on_invalid == "skip"


def test_a_yaml_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("sample:\n  n_step: &a [1, *a]\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml.*line 2, column 18: alias \*a repeats"):
        PreLearnerConfig.load(path)


def test_a_config_file_with_a_read_section_loads(tmp_path: Path) -> None:
    """A ``read:`` section (a dict) was an AttributeError: the default ``validate`` section was
    built from ``self.read`` before the sections were."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"read": {"format": "rows", "on_invalid": "skip"}}))
    config = PreLearnerConfig.load(path)
    assert isinstance(config.read, ReadConfig) and config.read.on_invalid == "skip"


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_config_files_too_large_or_too_deep_are_one_line(tmp_path: Path, suffix: str) -> None:
    big = tmp_path / f"big{suffix}"
    big.write_text(
        "# " + "x" * MAX_CONFIG_BYTES + "\n" if suffix == ".yaml" else " " * (MAX_CONFIG_BYTES + 1)
    )
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        PreLearnerConfig.load(big)
    deep = tmp_path / f"deep{suffix}"
    deep.write_text(("a: " if suffix == ".yaml" else "") + "[" * 200_000 + "]" * 200_000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        PreLearnerConfig.load(deep)


# ------------------------------------------------------------------------------------------------
# config integers and limits: bounded before anything is allocated
# ------------------------------------------------------------------------------------------------
BOUNDS = [
    (SampleConfig, "train_batch_size", 1 << 22),
    (SampleConfig, "num_samples", 10**12),
    (SequenceConfig, "seq_len", 100_000),
    (SequenceConfig, "burn_in", 100_000),
    (SampleConfig, "frame_stack", 256),
    (SampleConfig, "n_step", 10_000),
    (BufferConfig, "capacity", 10**10),
    (BufferConfig, "learning_starts", 10**10),
    (RayConfig, "batch_size", 10**7),
    (RayConfig, "concurrency", 10_000),
    (RayConfig, "footer_readers", 10_000),
    (RayConfig, "read_threads", 1024),
    (RayConfig, "block_mb", 65_536),
    (ReadConfig, "max_episode_steps", 10**10),
]


@pytest.mark.parametrize(("cls", "name", "hi"), BOUNDS, ids=[b[1] for b in BOUNDS])
def test_config_integers_have_an_upper_bound(cls: type, name: str, hi: int) -> None:
    assert getattr(cls(**{name: hi}), name) == hi
    with pytest.raises(ConfigError, match=rf"\.{name} must be an integer in \[\d+, {hi}\], found"):
        cls(**{name: hi + 1})


def test_an_n_step_range_has_the_same_bound() -> None:
    assert SampleConfig(n_step=[1, 10_000]).n_step == (1, 10_000)
    with pytest.raises(ConfigError, match=r"hi <= 10000, found \[1, 10001\]"):
        SampleConfig(n_step=[1, 10_001])


def test_the_objects_a_config_builds_use_the_same_validators() -> None:
    """One validator per setting: the storage's capacity and a sample's batch size are held to
    the config's bounds when built or called directly (10**12 was a MemoryError traceback)."""
    with pytest.raises(ConfigError, match=r"capacity \(timesteps\) must be an integer in \[2, "):
        EpisodeStorage(10**12)
    assert EpisodeStorage(np.int64(100)).capacity == 100
    buffer = EpisodeReplayBuffer(100)
    with pytest.raises(ConfigError, match=r"batch_size must be an integer in \[1, 4194304\]"):
        buffer.sample(10**12)


@pytest.mark.parametrize("value", ["lots", True, 1.5, 0, -1, MAX_LIMIT + 1, None, [1]])
def test_decode_limits_are_numbers_in_range(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"read\.limits\.max_decompressed_bytes must be an int"):
        DecodeLimits(max_decompressed_bytes=value)
    assert DecodeLimits(max_decompressed_bytes=MAX_LIMIT).max_decompressed_bytes == MAX_LIMIT


def test_a_non_numeric_limit_is_one_line_naming_the_field(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """It was accepted (and compared with byte counts deep in a reader)."""
    argv = ["process", str(ROWS[0]), "--out", str(tmp_path / "o"), "--engine", "local"]
    argv += ["--json", "--set", 'read.limits={"max_decompressed_bytes":"lots"}']
    code, _, err = run(argv, capfd)
    assert code == 2 and len(err) == 1, err
    assert "read.limits.max_decompressed_bytes" in err[0] and "'lots'" in err[0]


# ------------------------------------------------------------------------------------------------
# measured: time and peak memory of the two that cost the most
# ------------------------------------------------------------------------------------------------
#: Runs the command as ITS child and writes that child's exit status and peak RSS (KiB). A
#: process's ``ru_maxrss`` starts at its parent's RSS when it was forked (Linux keeps the old
#: memory's high-water mark across exec): measured straight from a pytest of 1.4 GB, a command
#: that peaks at 100 MB reads 1.4 GB. A small launcher in between makes the figure the command's.
_LAUNCHER = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
open(sys.argv[1], "w").write(f"{code} {peak}")
"""


def run_measured(argv: list[str], cwd: Path) -> tuple[int, list[str], float, int]:
    """``python -m offline_prelearner ARGV`` in a subprocess: exit status, stderr lines, wall
    seconds and peak RSS in bytes (the command's own, through :data:`_LAUNCHER`; killed, with
    its launcher, past :data:`MAX_SECONDS`)."""
    err_path, measured = cwd / "stderr.txt", cwd / "measured.txt"
    command = [sys.executable, "-m", "offline_prelearner", *argv]
    start = time.perf_counter()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(measured), *command],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "RAY_DATA_LOG_LEVEL": "ERROR"},
            start_new_session=True,
        )
        try:
            proc.wait(timeout=MAX_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = time.perf_counter() - start
    lines = [ln for ln in err_path.read_text().splitlines() if ln.strip()]
    if not measured.exists():  # killed past MAX_SECONDS: the time says it
        return proc.returncode, lines, seconds, 0
    code, peak_kib = (int(x) for x in measured.read_text().split())
    return code, lines, seconds, peak_kib * 1024


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("yaml-alias-bomb", ("bomb.yaml", "line 2, column", "alias bomb")),
        ("train-batch-size-10e12", ("sample.train_batch_size", "4194304", "1000000000000")),
    ],
)
def test_the_costly_cases_are_bounded(
    tmp_path: Path, case: str, fragments: tuple[str, ...]
) -> None:
    """The alias bomb ran past 120 s and 2.4 GB; train_batch_size=10**12 was a MemoryError
    traceback. Each is one line now, in < 1 GB (MAX_SECONDS only stops a hang)."""
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    argv = ["process", str(ROWS[0]), "--out", str(tmp_path / "o"), "--engine", "local", "--json"]
    if case == "yaml-alias-bomb":
        argv += ["--config", "bomb.yaml"]
    else:
        argv += ["--set", "train_batch_size=1000000000000", "--set", "sample_all=false"]
    code, err, seconds, rss = run_measured(argv, tmp_path)
    assert 0 < rss < MAX_RSS_BYTES, (seconds, rss)  # 0: killed past the hang guard
    assert code == 2 and len(err) == 1, err
    assert all(f in err[0] for f in fragments), err[0]
