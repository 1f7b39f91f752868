"""The batch job against a separate, multi-process Ray cluster (``ray start --head``).

``offline-prelearner process PATH --out DIR --address ADDR`` (or ``RAY_ADDRESS=ADDR``) must run
the job on that cluster unchanged, and say so in ``stats.json["ray_cluster"]``; an address where
no cluster runs must be a prompt one-line error.

The module-scoped :func:`cluster` fixture starts its own head node (2 CPUs, no dashboard, every
port chosen free, a short private ``--temp-dir``, token authentication with a private token) with
``ray start --block`` in a new process group, and stops exactly that cluster: it kills, by PID,
the processes of that group and those whose environment holds the private token (the workers,
which the raylet puts in sessions of their own), until none is left. It never runs ``ray stop``,
which would kill every Ray process on the machine (the session's ``ray_local``, other people's
jobs).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import REPO
from ray_nodes import free_ports

import offline_prelearner as op

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = REPO / "datasets/cartpole-v1/rows"
ROWS_IN = 5000  # rows in the shipped CartPole dataset
CLUSTER_CPUS = 2
START_TIMEOUT_S = 90.0
JOB_TIMEOUT_S = 180.0
#: A hang guard for a job whose address has no cluster (``ray.init`` alone would retry for ~14
#: minutes; the pipeline checks the address with a TCP connect first and fails in seconds): far
#: above that, so a loaded machine never fails it.
NO_CLUSTER_TIMEOUT_S = 180.0


# ---------------------------------------------------------------------------------------------
# the cluster
# ---------------------------------------------------------------------------------------------
@dataclass
class Cluster:
    """A running head node: its GCS address (``host:port``) and what identifies its processes."""

    address: str
    port: int
    temp_dir: str
    proc: subprocess.Popen[bytes]
    log: Path
    auth_env: dict[str, str]  # what a client needs in its environment to be let in

    def pids(self) -> list[int]:
        """Live processes of this cluster: its process group (``ray start``, GCS, raylet, agents)
        and every process whose environment holds this cluster's private auth token (the
        workers: the raylet starts each in a session of its own and retitles it ``ray::...``).
        """
        token = f"RAY_AUTH_TOKEN={self.auth_env['RAY_AUTH_TOKEN']}".encode()
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            pid = int(entry)
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue  # exited, not yet reaped
                in_group = os.getpgid(pid) == self.proc.pid
                if not in_group:
                    with open(f"/proc/{pid}/environ", "rb") as fh:
                        if token not in fh.read().split(b"\0"):
                            continue
            except (OSError, IndexError):
                continue
            out.append(pid)
        return out


def _ray_executable() -> str:
    ray = Path(sys.executable).with_name("ray")
    if not ray.is_file():
        pytest.skip(f"no `ray` executable next to {sys.executable}")
    return str(ray)


def _wait_started(proc: subprocess.Popen[bytes], log: Path, temp_dir: str) -> str:
    """Waits for ``ray start --block`` to report the head node up; returns its GCS address."""
    deadline = time.monotonic() + START_TIMEOUT_S
    address_file = Path(temp_dir) / "ray_current_cluster"
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if proc.poll() is not None:
            raise RuntimeError(f"`ray start` exited with code {proc.returncode}:\n{text[-3000:]}")
        if "Ray runtime started" in text and address_file.is_file():
            address = address_file.read_text().strip()
            if address:
                return address
        time.sleep(0.25)
    raise RuntimeError(f"the Ray head node did not start in {START_TIMEOUT_S:.0f} s")


def _stop(cluster: Cluster) -> list[int]:
    """Kills only this cluster's processes (SIGKILL: a test cluster needs no graceful drain, and
    Ray's processes take ~15 s to act on SIGTERM); returns those still alive (should be none)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        pids = cluster.pids()  # re-identified on every round, so a reused PID is never hit
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    if cluster.proc.poll() is None:
        cluster.proc.kill()
    cluster.proc.wait(timeout=10)
    return cluster.pids()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A separate 2-CPU Ray head node for this module, stopped (and checked gone) at the end."""
    ray = _ray_executable()
    # Token authentication (Ray's default for a local cluster once ~/.ray/auth_token exists),
    # with a token of our own so ~/.ray is neither read nor written. Clients must send it.
    token_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    # Unix socket paths are limited to ~107 bytes: a short directory under /tmp, not tmp_path.
    temp_dir = tempfile.mkdtemp(prefix="opl-", dir="/tmp")
    log = Path(temp_dir) / "ray-start.log"
    port, client, dash, agent, agent_grpc, env_agent, metrics, node_mgr, obj_mgr = free_ports(9)
    cmd = [
        ray,
        "start",
        "--head",
        f"--port={port}",
        f"--num-cpus={CLUSTER_CPUS}",
        "--num-gpus=0",
        f"--temp-dir={temp_dir}",
        "--include-dashboard=false",
        f"--dashboard-port={dash}",  # the minimal dashboard process starts anyway
        "--disable-usage-stats",
        "--object-store-memory=200000000",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={env_agent}",
        f"--metrics-export-port={metrics}",
        f"--node-manager-port={node_mgr}",
        f"--object-manager-port={obj_mgr}",
        "--block",
    ]
    if importlib.util.find_spec("grpc") is not None:  # Ray Client installed: it starts a server
        cmd.append(f"--ray-client-server-port={client}")  # (default port 10001: may be taken)
    env = {**_clean_env(), **token_env}
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    started = Cluster("", port, temp_dir, proc, log, token_env)
    try:
        started.address = _wait_started(proc, log, temp_dir)
        yield started
    finally:
        left = _stop(started)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"processes of the test cluster still alive after stopping it: {left}"


# ---------------------------------------------------------------------------------------------
# running the CLI
# ---------------------------------------------------------------------------------------------
def _clean_env() -> dict[str, str]:
    """This environment without Ray's address and authentication settings."""
    drop = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _process(
    out: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = JOB_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``python -m offline_prelearner process ROWS --out OUT ARGS`` in a fresh process,
    its environment this one's without Ray's settings, plus ``env``."""
    env = {**_clean_env(), **(env or {})}
    cmd = [
        sys.executable,
        "-m",
        "offline_prelearner",
        "process",
        str(ROWS),
        "--out",
        str(out),
    ]
    return subprocess.run(
        [*cmd, "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _check_job(proc: subprocess.CompletedProcess[str], out: Path, cluster: Cluster) -> None:
    """Exit 0, a balanced ledger, the samples on disk, and the cluster named in stats.json."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])  # Ray may print above it
    stats: dict[str, Any] = json.loads((out / "stats.json").read_text())
    assert stats["rows_in"] == summary["rows_in"] == ROWS_IN
    rejected = sum(stats["rows_rejected"].values())
    assert stats["rows_in"] == stats["rows_kept"] + rejected + stats["rows_duplicate"]
    assert stats["rows_balance"] and summary["rows_balance"]
    files = sorted((out / "samples").glob("*.parquet"))
    written = sum(pq.read_metadata(f).num_rows for f in files)
    assert written == stats["samples_written"] == summary["samples_written"] > 0
    # The job writes tensors in the fast layout; a learner reads them through from_rows.
    batch = op.MultiAgentBatch.from_rows(pq.read_table(files[0]))
    assert batch["default_policy"]["obs"].shape[1:] == (4,)
    # Proof that the job ran on this cluster, not on a fresh local instance.
    assert stats["ray_cluster"] == {
        "address": cluster.address,
        "nodes": 1,
        "cpus": CLUSTER_CPUS,
    }


def test_process_with_address_runs_on_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    proc = _process(
        tmp_path, "--address", cluster.address, "--set", "n_step=3", env=cluster.auth_env
    )
    _check_job(proc, tmp_path, cluster)


def test_process_with_ray_address_env_runs_on_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    env = {"RAY_ADDRESS": cluster.address, **cluster.auth_env}
    proc = _process(tmp_path, "--set", "sample_all=true", env=env)
    _check_job(proc, tmp_path, cluster)
    assert json.loads((tmp_path / "stats.json").read_text())["samples_written"] == ROWS_IN


def test_process_without_a_cluster_is_a_prompt_one_line_error(tmp_path: Path) -> None:
    (port,) = free_ports(1)  # nothing listens there
    start = time.monotonic()
    proc = _process(tmp_path, "--address", f"127.0.0.1:{port}", timeout=NO_CLUSTER_TIMEOUT_S)
    assert time.monotonic() - start < NO_CLUSTER_TIMEOUT_S
    assert proc.returncode != 0
    errors = [x for x in proc.stderr.splitlines() if "offline-prelearner process: error" in x]
    assert len(errors) == 1 and str(port) in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "stats.json").exists()


def test_process_without_the_clusters_token_is_a_one_line_error(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Ray 2.60 sends a token to an explicit address only with RAY_AUTH_MODE=token set (it never
    # enables token auth by itself for an explicit address), so this is what a user meets first.
    # Ray tries the GCS RAY_NUM_REDIS_GET_RETRIES times (20 by default, ~1 s apart) before it
    # gives up, on a rejected token as on a GCS still starting: the same error after 3 tries, not
    # 20 (the wait measured 21 s of this test's 22 on the 2-core CI machine).
    env = {"RAY_NUM_REDIS_GET_RETRIES": "3"}
    proc = _process(tmp_path, "--address", cluster.address, env=env, timeout=JOB_TIMEOUT_S)
    assert proc.returncode != 0
    errors = [x for x in proc.stderr.splitlines() if "offline-prelearner process: error" in x]
    assert len(errors) == 1 and "RAY_AUTH" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
