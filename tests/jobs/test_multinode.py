"""The batch job on a cluster of separate nodes: units on every node, a node lost mid-job.

A head node (no CPU) and two worker nodes (one CPU each) run on this machine as separate raylets
(``ray start --head`` and two ``ray start --address=...``, :mod:`ray_nodes`). The CLI joins the
cluster (``offline-prelearner process ... --address``) over 12 files of CartPole rows, one unit
each (``OFFLINE_PRELEARNER_UNIT_MIN_ROWS``), ``sample_all`` so the output does not depend on the
seed, and a clean ``--engine local`` run is the reference:

* the units land on both worker nodes (``stats.json["nodes"]``: the node each unit record named,
  against the node ids the raylets were started with), and the output equals the reference: the
  manifest's files (name, rows, sha256) and the sample rows;
* one worker node's raylet SIGKILLed once the first unit records are in the staging folder (the
  node is gone: its workers and agents end with it): the job either exits 0 with the reference's
  output, or exits 3 with one line on stderr and nothing committed (no ``--out``, no manifest).

How records name their node (:func:`unit_node`, :func:`units_by_node`, records written before
they did included) is checked in this process, without Ray. Every process the tests start is
stopped by PID (:meth:`ray_nodes.LocalCluster.stop`, the CLI by
its process group).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from ray_nodes import LocalCluster, clean_env, start_cluster

from offline_prelearner.jobs.batch.run import unit_node, units_by_node
from offline_prelearner.jobs.records import UnitRecord

SOURCE = REPO / "datasets/cartpole-v1/rows"  # 5,000 rows, 5 files
N_FILES = 12
COPIES_PER_FILE = 2  # 10,000 rows a file, 120,000 in all: a unit takes ~0.5 s on a busy core
JOB_TIMEOUT_S = 240.0


# ============================================================================ data and runs
@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 files, each 4 copies of the shipped CartPole rows under distinct episode ids."""
    folder = tmp_path_factory.mktemp("multinode") / "rows"
    folder.mkdir()
    src = pa.concat_tables(pq.read_table(p) for p in sorted(SOURCE.glob("*.parquet")))
    ids = src.column("eps_id")
    for n in range(N_FILES):
        copies = []
        for k in range(COPIES_PER_FILE):
            new_ids = pc.binary_join_element_wise(ids, pa.scalar(f"{n}-{k}"), "-")
            copies.append(src.set_column(0, "eps_id", new_ids))
        pq.write_table(pa.concat_tables(copies), folder / f"rows-{n:05d}.parquet")
    return folder


def _cli(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "offline_prelearner",
        "process",
        str(data),
        "--out",
        str(out),
        "--set",
        "sample_all=true",
        "--json",
        *extra,
    ]


def _env(cluster: LocalCluster | None = None) -> dict[str, str]:
    env = {**clean_env(), "OFFLINE_PRELEARNER_UNIT_MIN_ROWS": "1"}  # one unit per file
    return {**env, **(cluster.auth_env if cluster is not None else {})}


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=JOB_TIMEOUT_S, check=False
    )


def _files(out: Path) -> list[tuple[str, int, str]]:
    manifest = json.loads((out / "_manifest.json").read_text())
    return [(f["name"], f["rows"], f["sha256"]) for f in manifest["files"]]


def _rows(out: Path) -> pa.Table:
    return pa.concat_tables(pq.read_table(p) for p in sorted((out / "samples").glob("*.parquet")))


@pytest.fixture(scope="module")
def reference(dataset: Path) -> Path:
    out = dataset.parent / "reference"
    proc = _run(_cli(dataset, out, "--engine", "local"), _env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["units"] == N_FILES and stats["rows_in"] == N_FILES * COPIES_PER_FILE * 5000
    # The local engine names its own host, and no Ray node.
    assert [(n["ray_node_id"], len(n["units"])) for n in stats["nodes"]] == [(None, N_FILES)]
    assert stats["nodes"][0]["host"]
    return out


def _assert_same_output(out: Path, reference: Path) -> None:
    assert _files(out) == _files(reference)
    assert _rows(out).equals(_rows(reference))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    started = start_cluster([None, None])
    try:
        yield started
    finally:
        left = started.stop()
        assert not left, f"processes of the test cluster still alive after stopping it: {left}"


# ============================================================================ the tests
@pytest.mark.ray
@pytest.mark.slow
def test_units_run_on_every_worker_node_and_the_output_is_a_clean_runs(
    cluster: LocalCluster, dataset: Path, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = _run(_cli(dataset, out, "--address", cluster.address), _env(cluster))
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats: dict[str, Any] = json.loads((out / "stats.json").read_text())
    assert stats["engine"] == "ray" and stats["ray_cluster"]["nodes"] == 3
    by_node = {n["ray_node_id"]: n["units"] for n in stats["nodes"]}
    workers = {cluster.node_ids["w0"], cluster.node_ids["w1"]}
    assert set(by_node) == workers, (by_node, cluster.node_ids)  # both workers, not the head
    assert sorted(u for units in by_node.values() for u in units) == list(range(N_FILES))
    assert all(n["ip"] and n["host"] for n in stats["nodes"])
    _assert_same_output(out, reference)


SCAN_ON_CLUSTER = """
import json, sys
import ray
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.jobs.batch.scan import RayScanner, ScanSpec, ThreadScanner
ray.init(address=sys.argv[1], log_to_driver=False)
files = sys.argv[2:]
spec = ScanSpec.of(PreLearnerConfig().with_updates({"format": "rows"}))
got = RayScanner(batch=2).scan(files, spec)
same = got.files == ThreadScanner().scan(files, spec).files
print(json.dumps({"nodes": got.nodes, "same": same}))
"""


@pytest.mark.ray
@pytest.mark.slow
def test_planning_scans_run_as_tasks_on_every_worker_node(
    cluster: LocalCluster, dataset: Path
) -> None:
    """The plan's scans as Ray tasks (what a job over a store's files runs) spread over the
    worker nodes, and scan what threads on the driver scan."""
    files = [str(p) for p in sorted(dataset.glob("*.parquet"))]
    cmd = [sys.executable, "-c", SCAN_ON_CLUSTER, cluster.address, *files]
    proc = _run(cmd, _env(cluster))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["same"] is True
    assert set(got["nodes"]) == {cluster.node_ids["w0"], cluster.node_ids["w1"]}, got
    assert sum(got["nodes"].values()) == N_FILES


@contextlib.contextmanager
def _job(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The CLI in a process group of its own; killed (the group) if still running at the end."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.ray
@pytest.mark.slow
def test_a_worker_node_killed_mid_job_gives_the_clean_output_or_exit_3(
    cluster: LocalCluster, dataset: Path, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    units = tmp_path / ".out.staging" / "units"
    victim = cluster.nodes["w1"]
    raylet = victim.raylet()
    assert raylet is not None
    cmd = _cli(dataset, out, "--address", cluster.address)
    with _job(cmd, _env(cluster), tmp_path / "stderr.log") as proc:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not list(units.glob("unit-*.json")):
            assert proc.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no unit finished"
            time.sleep(0.02)
        os.kill(raylet[0], signal.SIGKILL)  # the node is lost, its workers with it
        finished_before = len(list(units.glob("unit-*.json")))
        assert proc.poll() is None, "the job ended before the node was lost"
        proc.wait(timeout=JOB_TIMEOUT_S)
    stderr = (tmp_path / "stderr.log").read_text()
    assert finished_before < N_FILES
    if proc.returncode == 0:
        _assert_same_output(out, reference)
        stats = json.loads((out / "stats.json").read_text())
        assert sorted(u for n in stats["nodes"] for u in n["units"]) == list(range(N_FILES))
    else:
        assert proc.returncode == 3, stderr[-3000:]
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("offline-prelearner process: error"), lines
        assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    print(f"node lost after {finished_before} unit(s): exit {proc.returncode}")


#: A unit record as the oldest resumable staging holds it: no node, no CPU time.
BARE_RECORD = {"unit": 0, "job_id": "J", "inputs": [], "files": [], "samples": 0,
               "stats": {"ledger": {}}}  # fmt: skip


def test_units_by_node_takes_records_with_and_without_a_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without Ray in the process, the host alone (an earlier test of the same pytest process may
    # have left a Ray session up: hide the module, as a process that never imported it is).
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    here = unit_node()
    assert set(here) == {"host"} and here["host"]
    a = {"ray_node_id": "a" * 56, "ip": "10.0.0.7", "host": "m1"}
    records = [
        UnitRecord.from_dict(r, "test")
        for r in (
            {**BARE_RECORD, "unit": 2, "node": a},
            {**BARE_RECORD, "unit": 0, "node": here},
            {**BARE_RECORD, "unit": 1},  # written before records named their node (a --resume)
            {**BARE_RECORD, "unit": 3, "node": a},
        )
    ]
    assert units_by_node(records) == [
        {"ray_node_id": None, "ip": None, "host": here["host"], "units": [0]},
        {"ray_node_id": None, "ip": None, "host": None, "units": [1]},
        {**a, "units": [2, 3]},
    ]


def test_two_processes_of_one_pid_never_share_a_temporary_name() -> None:
    # As two nodes' workers can (each machine, or container, counts its own PIDs): two
    # interpreters, each the first process of a PID namespace of its own, so both are PID 1.
    code = (
        "import os; from offline_prelearner.jobs.commit import tmp_tag; "
        "print(os.getpid(), tmp_tag())"
    )
    cmd = ["unshare", "--pid", "--fork", sys.executable, "-c", code]
    tags = []
    for _ in range(2):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            pytest.skip(f"no PID namespace for a test here: {done.stderr.strip()[:200]}")
        pid, tag = done.stdout.split()
        assert pid == "1" and tag.startswith("1-")
        tags.append(tag)
    assert tags[0] != tags[1]
