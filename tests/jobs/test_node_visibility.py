"""Inputs and an ``--out`` that a node of the cluster cannot see are refused before any unit.

A head node (no CPU: the driver's node) and one worker node run on this machine as separate
raylets (:mod:`ray_nodes`); the worker starts in a mount namespace of its own with an empty tmpfs
over the folder ``hidden/``, so that folder is, for that node, what a path on the driver's disk
is for a node on another machine: absent (a file) or another, empty folder (a folder). The CLI
joins the cluster:

* input files under ``hidden/``: exit 2, one line naming an input file, the worker's Ray node id
  and an object store; no unit ran (no unit record, no sample file) and ``--out`` is untouched;
* ``--out`` under ``hidden/`` (the folder exists on the node, empty: only the staging folder's
  ``job.json`` tells it from the driver's): exit 2, one line naming the staging folder and the
  node.

Without ``unshare`` and ``mount`` (not root, or a container that forbids them) those tests are
skipped, saying why. Every process started is stopped by PID in the end. What a node's task
answers (:meth:`NodeCheck.missing`) is also checked here, in this process, without Ray.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO
from ray_nodes import LocalCluster, can_hide_folders, clean_env, start_cluster

from offline_prelearner.jobs.commit import write_json_atomic
from offline_prelearner.jobs.preflight import NODE_CHECK_FILES, NodeCheck, _spread

ROWS = REPO / "datasets/cartpole-v1/rows"
JOB_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``hidden/`` and ``shown/``, each holding a copy of the CartPole rows in ``rows/``."""
    root = tmp_path_factory.mktemp("visibility")
    for name in ("hidden", "shown"):
        shutil.copytree(ROWS, root / name / "rows")
    return root / "hidden", root / "shown"


@pytest.fixture(scope="module")
def cluster(folders: tuple[Path, Path]) -> Iterator[LocalCluster]:
    why = can_hide_folders()
    if why is not None:
        pytest.skip(f"a node with a folder hidden from it needs a mount namespace: {why}")
    started = start_cluster([folders[0]])
    try:
        yield started
    finally:
        left = started.stop()
        assert not left, f"processes of the test cluster still alive after stopping it: {left}"


def _process(cluster: LocalCluster, data: Path, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "offline_prelearner", "process", str(data), "--out", str(out)]
    return subprocess.run(
        [*cmd, "--address", cluster.address, "--engine", "ray", "--json"],
        capture_output=True,
        text=True,
        env={**clean_env(), **cluster.auth_env},
        timeout=JOB_TIMEOUT_S,
        check=False,
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("offline-prelearner process: error: ")
    return lines[0]


def _no_unit_ran(out: Path) -> None:
    staging = out.parent / f".{out.name}.staging"
    assert not list(staging.glob("units/unit-*")), "a unit ran"
    assert not list(staging.glob("samples/*")), "a unit wrote"
    assert not out.exists()


@pytest.mark.ray
@pytest.mark.slow
def test_inputs_a_node_cannot_see_are_refused_before_any_unit(
    cluster: LocalCluster, folders: tuple[Path, Path], tmp_path: Path
) -> None:
    hidden, _ = folders
    out = tmp_path / "out"
    start = time.monotonic()
    line = _one_line(_process(cluster, hidden / "rows", out))
    print(f"refused in {time.monotonic() - start:.1f} s: {line}")
    assert f"the input '{hidden / 'rows'}/cartpole-v1-rows-0000" in line
    assert f"Ray node {cluster.node_ids['w0']}" in line
    assert "object store (s3://, gs://, az://) or a shared filesystem" in line
    _no_unit_ran(out)


@pytest.mark.ray
@pytest.mark.slow
def test_an_out_a_node_cannot_see_is_refused_before_any_unit(
    cluster: LocalCluster, folders: tuple[Path, Path]
) -> None:
    hidden, shown = folders
    out = hidden / "out"
    line = _one_line(_process(cluster, shown / "rows", out))
    assert f"staging folder '{hidden / '.out.staging'}'" in line
    assert f"Ray node {cluster.node_ids['w0']}" in line
    assert "object store" in line
    _no_unit_ran(out)


_STREAM = """
import sys
import offline_prelearner as op
from offline_prelearner.errors import ConfigError
try:
    next(iter(op.iter_learner_batches(sys.argv[1], {"ray": {"address": sys.argv[2]}})))
except ConfigError as e:
    print(e)
    sys.exit(2)
"""


@pytest.mark.ray
@pytest.mark.slow
def test_the_learner_stream_refuses_inputs_a_node_cannot_see(
    cluster: LocalCluster, folders: tuple[Path, Path]
) -> None:
    hidden, _ = folders
    proc = subprocess.run(
        [sys.executable, "-c", _STREAM, str(hidden / "rows"), cluster.address],
        capture_output=True,
        text=True,
        env={**clean_env(), **cluster.auth_env},
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"the input '{hidden / 'rows'}/cartpole-v1-rows-0000" in proc.stdout
    assert f"Ray node {cluster.node_ids['w0']}" in proc.stdout


# ============================================================================ what a node answers
def test_a_node_that_sees_the_inputs_and_the_staging_answers_nothing(tmp_path: Path) -> None:
    data = tmp_path / "a.parquet"
    data.write_bytes(b"x" * 10)
    staging = tmp_path / ".out.staging"
    staging.mkdir()
    write_json_atomic(staging / "job.json", {"job_id": "J1"})
    assert (
        NodeCheck([(str(data), 10), ("s3://bucket/b.parquet", 5)], str(staging), "J1").missing()
        is None
    )
    assert NodeCheck([(str(data), 10)]).missing() is None  # --out on a store: not looked at


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("absent", "the input '{data}' cannot be read (No such file or directory)"),
        ("resized", "the input '{data}' is another file (11 bytes there, 10 on the driver's node)"),
        ("other_job", "the job's staging folder '{staging}' (beside --out) is not the one"),
        ("no_staging", "the job's staging folder '{staging}' (beside --out) is not the one"),
    ],
)
def test_a_node_names_what_it_does_not_see(tmp_path: Path, case: str, said: str) -> None:
    data = tmp_path / "a.parquet"
    staging = tmp_path / ".out.staging"
    if case != "absent":
        data.write_bytes(b"x" * (11 if case == "resized" else 10))
    if case != "no_staging":
        staging.mkdir()
        write_json_atomic(staging / "job.json", {"job_id": "J2" if case == "other_job" else "J1"})
    missing = NodeCheck([(str(data), 10)], str(staging), "J1").missing()
    assert missing is not None and missing.startswith(said.format(data=data, staging=staging))


@pytest.mark.parametrize("n", [0, 1, 2, 63, 64, 65, 1000])
def test_a_node_looks_at_a_bounded_spread_of_the_inputs(n: int) -> None:
    items = [(f"f{k}", k) for k in range(n)]
    picked = _spread(items, NODE_CHECK_FILES)
    assert len(picked) == min(n, NODE_CHECK_FILES)
    assert len(set(picked)) == len(picked) and list(picked) == sorted(picked, key=items.index)
    if n:
        assert picked[0] == items[0] and picked[-1] == items[-1]
