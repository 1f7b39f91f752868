"""A Ray cluster of separate nodes on this machine, for the multi-node tests (not a test module).

:func:`start_cluster` starts a head node and worker nodes with ``ray start ... --block``, each in
a process group of its own, each a raylet of its own (the head with no CPU, so units run only on
the workers; each worker one CPU and a custom resource naming it). A worker may be given a
folder it cannot see: it starts in a mount namespace of its own (``unshare --mount``) with an
empty tmpfs mounted over that folder, as a node on another machine would find a path of the
driver's disk (:func:`can_hide_folders` says whether this machine lets a test do that).

Every process of a node carries ``OPL_TEST_NODE=<its mark>`` in its environment (Ray's workers
inherit the raylet's), which is how :meth:`Node.pids` finds them, and how
:meth:`LocalCluster.stop` kills exactly this cluster, by PID, never with ``ray stop`` (which
would kill every Ray process on the machine). Clients need :attr:`LocalCluster.auth_env` (a
private token: ``~/.ray`` is neither read nor written).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 120.0
MARK = "OPL_TEST_NODE"
#: The GCS declares a node dead after this many missed health checks of this period: seconds,
#: not Ray's default ~15-30 s, so a killed node is noticed while the test waits.
HEALTH_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


#: A process in a mount namespace of its own: what it mounts, no other process sees.
UNSHARE = ["unshare", "--mount", "--propagation", "private"]


def can_hide_folders() -> str | None:
    """None if this process may start a node with a folder hidden from it, else why not."""
    try:
        done = subprocess.run(
            [*UNSHARE, "sh", "-c", "mount -t tmpfs opl-probe /mnt"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare could not run: {e}"
    if done.returncode != 0:
        return f"unshare --mount / mount -t tmpfs refused: {done.stderr.strip()[:200]}"
    return None


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free right now (held open together, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def clean_env() -> dict[str, str]:
    """This environment without Ray's address and authentication settings."""
    drop = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _ray() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _proc_environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False  # exited, not yet reaped
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entry in fh.read().split(b"\0")
    except (OSError, IndexError):
        return False


@dataclass
class Node:
    """One node: its ``ray start --block`` process, its log, its mark."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    mark: str

    def pids(self) -> list[int]:
        """Live processes of this node (``ray start``, raylet, agents, workers)."""
        entry = f"{MARK}={self.mark}".encode()
        return [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit() and int(p) != os.getpid() and _proc_environ_has(int(p), entry)
        ]

    def raylet(self) -> tuple[int, str] | None:
        """The raylet's PID and Ray node id (from its command line), None while it is not up."""
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    if fh.read().strip() != "raylet":
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    args = fh.read().decode().split("\0")
            except OSError:
                continue
            for a in args:
                if a.startswith("--node_id="):
                    return pid, a.split("=", 1)[1]
        return None

    def wait_started(self, deadline: float) -> str:
        """Waits for ``ray start`` to report the node up; returns its Ray node id."""
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"`ray start` of {self.name} exited with code {self.proc.returncode}:\n"
                    f"{text[-3000:]}"
                )
            if "Ray runtime started" in text:
                found = self.raylet()
                if found is not None:
                    return found[1]
            time.sleep(0.25)
        raise RuntimeError(f"the Ray node {self.name} did not start in {START_TIMEOUT_S:.0f} s")

    def kill(self) -> list[int]:
        """SIGKILLs this node's processes until none is left; returns those still alive."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pids = self.pids()  # found again each round, so a reused PID is never hit
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        return self.pids()


@dataclass
class LocalCluster:
    """A head node and worker nodes; :attr:`node_ids` by node name (``head``, ``w0``...)."""

    temp_dir: str
    auth_env: dict[str, str]
    address: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    node_ids: dict[str, str] = field(default_factory=dict)

    def _start(self, name: str, args: list[str], hide: Path | None = None) -> Node:
        agent, grpc_port, env_agent, metrics, node_mgr, obj_mgr = free_ports(6)
        cmd = [
            _ray(),
            "start",
            *args,
            "--num-gpus=0",
            "--disable-usage-stats",
            "--object-store-memory=100000000",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={grpc_port}",
            f"--runtime-env-agent-port={env_agent}",
            f"--metrics-export-port={metrics}",
            f"--node-manager-port={node_mgr}",
            f"--object-manager-port={obj_mgr}",
            "--block",
        ]
        if hide is not None:
            mount = f"mount -t tmpfs opl-hidden {shlex.quote(str(hide))}"
            cmd = [*UNSHARE, "sh", "-c", f"{mount} && exec {shlex.join(cmd)}"]
        mark = f"{os.path.basename(self.temp_dir)}-{name}"
        env = {**clean_env(), **self.auth_env, **HEALTH_ENV, MARK: mark}
        log = Path(self.temp_dir) / f"{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        node = Node(name, proc, log, mark)
        self.nodes[name] = node
        return node

    def _wait_sockets(self, n: int, deadline: float) -> None:
        """Waits for the ``n``-th raylet's sockets (``ray start`` names them by counting the
        files there: two nodes started at once would take the same name)."""
        while time.monotonic() < deadline:
            found = list(Path(self.temp_dir).glob(f"session_*/sockets/plasma_store.{n}"))
            if found and found[0].with_name(f"raylet.{n}").exists():
                return
            time.sleep(0.1)

    def stop(self) -> list[int]:
        """Kills every node of the cluster, workers first; returns PIDs still alive (none)."""
        left: list[int] = []
        for name in reversed(list(self.nodes)):
            left += self.nodes[name].kill()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return left


def start_cluster(workers: list[Path | None], head_cpus: int = 0) -> LocalCluster:
    """A head node (``head_cpus`` CPUs) and one worker node per entry of ``workers`` (one CPU
    and the resource ``w<k>`` each), which sees the entry's folder, if any, as an empty one.
    The caller stops it (:meth:`LocalCluster.stop`) in a ``finally``; a start that fails stops
    what it started, and is tried once more (on a loaded machine ``ray start`` may give up
    waiting for its own GCS: "Failed to get node info ... Deadline Exceeded")."""
    try:
        return _start_cluster(workers, head_cpus)
    except RuntimeError:
        return _start_cluster(workers, head_cpus)


def _start_cluster(workers: list[Path | None], head_cpus: int) -> LocalCluster:
    # Unix socket paths are limited to ~107 bytes: a short directory under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="opl-mn-", dir="/tmp")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    cluster = LocalCluster(temp_dir, auth)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        port, dash = free_ports(2)
        head = cluster._start(
            "head",
            [
                "--head",
                f"--port={port}",
                f"--num-cpus={head_cpus}",
                f"--temp-dir={temp_dir}",
                "--include-dashboard=false",
                f"--dashboard-port={dash}",
            ],
        )
        cluster.node_ids["head"] = head.wait_started(deadline)
        cluster.address = (Path(temp_dir) / "ray_current_cluster").read_text().strip()
        for k, hide in enumerate(workers):
            args = [f"--address={cluster.address}", "--num-cpus=1", f'--resources={{"w{k}": 1}}']
            cluster._start(f"w{k}", args, hide)
            cluster._wait_sockets(k + 1, deadline)
        for k in range(len(workers)):
            cluster.node_ids[f"w{k}"] = cluster.nodes[f"w{k}"].wait_started(deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster
