"""A new input format is one module plus one ``register_format`` call.

The format here lives in a throwaway module under ``tmp_path`` (nothing in offline_prelearner
names it): ``.tcsv`` files, CSV text with one transition per line and the observation spread over
``o0..o3`` (the next one over ``n0..n3``). Its reader rebuilds the rows layout and hands the
table to the rows reader. Once the module is imported, ``inspect`` and ``process`` (library and
CLI) detect it from the files alone and make the same samples as the Parquet files it was
written from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner import InputFormat, register_format, run_pipeline
from offline_prelearner.cli import main
from offline_prelearner.errors import UnsupportedFormatError
from offline_prelearner.io.formats.registry import _FORMATS, input_formats, whole_file_formats
from offline_prelearner.io.readers import available_formats, detect_batch_format
from offline_prelearner.io.sources import detect_format, expand_paths, format_of
from offline_prelearner.jobs.inspection import inspect_path

ROWS = REPO / "datasets/cartpole-v1/rows"

PLUGIN = '''
"""A user's format: transitions as CSV text, one folder of ``.tcsv`` files."""

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from offline_prelearner import InputFormat, OfflinePreLearner, register_format
from offline_prelearner.io.formats.rows.reader import RowsReader


class CsvPreLearner(OfflinePreLearner):
    """The user's prelearner, named on the command line: importing it registers the format."""


class TransitionsCsvReader:
    """``o0..o3`` / ``n0..n3`` -> ``obs`` / ``new_obs`` columns of 4, names as the rows
    layout has them; then the rows reader."""

    def __init__(self, config):
        self.config = config
        self.rows = RowsReader(config)

    def read(self, batch, source=None):
        t = batch if isinstance(batch, pa.Table) else pa.table(dict(batch))
        table = pa.table({
            "eps_id": t.column("episode").cast(pa.string()),
            "t": t.column("t"),
            "obs": _vectors(t, "o"),
            "new_obs": _vectors(t, "n"),
            "actions": t.column("action"),
            "rewards": t.column("reward").cast(pa.float64()),
            "terminateds": t.column("terminated"),
            "truncateds": t.column("truncated"),
        })
        return self.rows.read(table, source)


def _vectors(t, prefix):
    x = np.stack([t.column(f"{prefix}{i}").to_numpy() for i in range(4)], axis=1)
    return pa.FixedSizeListArray.from_arrays(pa.array(x.astype(np.float32).ravel()), 4)


SEEN = []


def detect(probe):
    SEEN.append(probe.path)
    return probe.path.endswith(".tcsv")


def read_table(path, limits):
    return pacsv.read_csv(path)


SPEC = register_format(InputFormat(
    "transitions_csv",
    lambda: TransitionsCsvReader,
    detect_file=detect,
    whole_file=True,
    read_table=read_table,
))
'''


def _write_tcsv(t: pa.Table, out: Path) -> None:
    """Rows-layout steps as a ``.tcsv`` file (float64 text: exact for float32)."""
    cols = {"episode": t.column("eps_id"), "t": t.column("t")}
    for name, prefix in (("obs", "o"), ("new_obs", "n")):
        x = np.asarray(t.column(name).to_pylist(), dtype=np.float32).astype(np.float64)
        cols |= {f"{prefix}{i}": pa.array(x[:, i]) for i in range(4)}
    cols |= {
        "action": t.column("actions"),
        "reward": t.column("rewards"),
        "terminated": t.column("terminateds"),
        "truncated": t.column("truncateds"),
    }
    pacsv.write_csv(pa.table(cols), out)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The user's module, importable from ``tmp_path`` and imported; unregistered afterwards."""
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "tcsv_format.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(pkg))
    assert "transitions_csv" not in available_formats()
    import tcsv_format  # type: ignore[import-not-found]

    yield tcsv_format
    _FORMATS.pop("transitions_csv")
    sys.modules.pop("tcsv_format")


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    """The first two CartPole rows files, as Parquet and as ``.tcsv``, one folder each. A
    ``.tcsv`` file is read whole (its format's ``whole_file``), so it holds whole episodes:
    the first, those that begin in the first Parquet file; the second, the rest."""
    parquet, tcsv = tmp_path / "parquet", tmp_path / "tcsv"
    parquet.mkdir()
    tcsv.mkdir()
    srcs = sorted(ROWS.glob("*.parquet"))[:2]
    for src in srcs:
        (parquet / src.name).write_bytes(src.read_bytes())
    first = pq.read_table(srcs[0])
    steps = pa.concat_tables([first, pq.read_table(srcs[1])])
    in_first = pc.is_in(steps.column("eps_id"), value_set=pc.unique(first.column("eps_id")))
    _write_tcsv(steps.filter(in_first), tcsv / "part-0.tcsv")
    _write_tcsv(steps.filter(pc.invert(in_first)), tcsv / "part-1.tcsv")
    return parquet, tcsv


def test_the_registry_holds_the_built_ins_in_detection_order() -> None:
    names = [s.name for s in input_formats()]
    assert names[-1] == "rows"  # the fallback, last
    assert names[:5] == ["minari", "d4rl", "lerobot", "episodes", "sample_batches"]
    assert whole_file_formats()[:3] == ("minari", "d4rl", "lerobot")
    assert available_formats() == sorted(names)


def test_a_new_format_is_detected_read_inspected_and_processed(
    plugin, data: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    parquet, tcsv = data
    files = expand_paths(str(tcsv))
    assert [Path(f).suffix for f in files] == [".tcsv", ".tcsv"]

    # Before the registration's place in the order: no built-in claims a .tcsv file.
    assert detect_format(files) == "transitions_csv"
    assert plugin.SEEN, "the format's detect_file was asked"
    assert "transitions_csv" in whole_file_formats() and "transitions_csv" in available_formats()
    # Parquet input is still rows: the new format's detection only claims its own files.
    assert format_of(expand_paths(str(parquet))[0]) == "rows"
    # A batch is never claimed by a format without detect_batch.
    assert detect_batch_format(["episode", "t", "o0"]) == "rows"

    # inspect: the same episodes and steps as the Parquet files they were written from.
    got, want = inspect_path(tcsv), inspect_path(parquet)
    assert (got.format, want.format) == ("transitions_csv", "rows")
    assert int(got.batch.source_rows.sum()) == int(want.batch.source_rows.sum()) == 2000
    assert len(got.batch) == len(want.batch) > 0
    g, w = got.to_dict(), want.to_dict()
    for d in (g, w):
        for k in ("path", "format", "schema", "seconds", "per_file", "files_unreadable"):
            d.pop(k, None)
    assert g == w
    assert not got.files_unreadable

    # process: the same samples.
    a = run_pipeline(tcsv, out_dir=tmp_path / "out_tcsv", engine="local")
    b = run_pipeline(parquet, out_dir=tmp_path / "out_parquet", engine="local")
    ta, tb = pq.read_table(a.files_written), pq.read_table(b.files_written)
    assert ta.num_rows == tb.num_rows == 2000
    key = [("eps_id", "ascending"), ("t", "ascending")]
    ta, tb = ta.sort_by(key), tb.sort_by(key)
    for col in ("eps_id", "t", "actions", "rewards", "terminateds", "truncateds"):
        assert ta.column(col).to_pylist() == tb.column(col).to_pylist(), col
    for col in ("obs", "new_obs"):
        np.testing.assert_array_equal(
            np.asarray(ta.column(col).to_pylist()), np.asarray(tb.column(col).to_pylist())
        )

    # The CLI (in this process, where the module is imported) detects it too.
    capsys.readouterr()
    assert main(["inspect", str(tcsv), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "transitions_csv"
    out = tmp_path / "out_cli"
    assert main(["process", str(tcsv), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["format"], summary["rows_in"], summary["samples_written"]) == (
        "transitions_csv",
        2000,
        2000,
    )


def test_a_new_format_is_unknown_until_registered(data: tuple[Path, Path]) -> None:
    _, tcsv = data
    with pytest.raises(UnsupportedFormatError, match=r"cannot detect the format of .*\.tcsv"):
        detect_format(expand_paths(str(tcsv)))


def test_register_format_replaces_a_name_in_its_place(plugin) -> None:
    before = [s.name for s in input_formats()]
    spec = InputFormat("transitions_csv", plugin.SPEC.reader, detect_file=None)
    try:
        register_format(spec)
        assert [s.name for s in input_formats()] == before
        assert "transitions_csv" not in whole_file_formats()
    finally:
        register_format(plugin.SPEC)


def test_the_cli_detects_a_format_its_prelearner_module_registers(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    """A user's format reaches the command line through ``--prelearner``: its module is
    imported before the files are detected, in a fresh process that never imported it."""
    _, tcsv = data
    site = tmp_path / "site"
    site.mkdir()
    (site / "tcsv_format.py").write_text(textwrap.dedent(PLUGIN))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "offline_prelearner", "process", str(tcsv), "--out", str(out)]
    cmd += ["--prelearner", "tcsv_format:CsvPreLearner", "--engine", "local", "--json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["format"], summary["rows_in"], summary["samples_written"]) == (
        "transitions_csv",
        2000,
        2000,
    )
    # Without the module, the same files are refused in one line.
    cmd = [*cmd[: cmd.index("--prelearner")], "--engine", "local"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "cannot detect the format" in done.stderr
