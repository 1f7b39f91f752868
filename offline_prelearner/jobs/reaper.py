"""Ends the local Ray instance a job started once the job's process is gone, however it went.

Ray's ``gcs_server`` and ``raylet`` die with the process that started them (``PR_SET_PDEATHSIG``),
but the raylet's own children do not: after a SIGKILL of the driver, its dashboard and
runtime-env agents see the raylet die at once, then spend ~60 s reporting it to the GCS that died
with it (a fixed RPC timeout, no setting), and its workers linger until they notice. So:

* the driver marks the instance: every process Ray starts inherits ``OWNER_ENV=<id>`` in its
  environment (set by the driver around ``ray.init``, unique per job);
* this watchdog, started by the driver just before, reads its stdin -- a pipe only the driver
  holds the other end of -- until EOF: the driver exited, was killed, or crashed;
* it then SIGKILLs every process whose environment carries the mark (``/proc/<pid>/environ``:
  what a process was started with), again until none is left, for at most a few seconds.

A job that ends normally shuts Ray down itself first and this finds nothing. SIGINT, SIGTERM and
SIGHUP are ignored here: a Ctrl-C reaches the whole foreground process group, this watchdog
included, and its work begins when the driver is gone. Linux only (``/proc``); elsewhere the
driver starts none. This file runs as a script (``python -I reaper.py <id>``): standard library
only, nothing imported from the package.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

__all__ = ["OWNER_ENV", "kill_marked", "marked_pids", "start"]

#: The environment variable that marks the processes of one job's Ray instance.
OWNER_ENV = "OFFLINE_PRELEARNER_RAY_OWNER"

#: How long the watchdog keeps killing marked processes (Ray may still be starting one).
REAP_SECONDS = 5.0


def supported() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def marked_pids(owner: str) -> list[int]:
    """Live processes (not zombies) started with ``OWNER_ENV=owner``, other than this one."""
    needle = f"{OWNER_ENV}={owner}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        if needle in env and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def kill_marked(owner: str, seconds: float = REAP_SECONDS) -> int:
    """SIGKILLs the processes marked ``owner`` until none is left or ``seconds`` passed; returns
    how many it killed."""
    deadline = time.monotonic() + seconds
    killed: set[int] = set()
    while True:
        pids = marked_pids(owner)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if not pids or time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.05)


def start(owner: str) -> subprocess.Popen[bytes] | None:
    """Starts the watchdog for the instance marked ``owner``; None where it cannot run.

    The returned process holds the read end of a pipe whose write end this process keeps (not
    inherited by anything else it starts): it must stay referenced for the job's lifetime.
    """
    if not supported():
        return None
    read, write = os.pipe()  # both non-inheritable: Ray's processes never hold the write end
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), owner],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError:
        os.close(write)
        return None
    finally:
        os.close(read)
    proc._offline_prelearner_pipe = write  # type: ignore[attr-defined]  # closed at our exit
    return proc


def _main(argv: list[str]) -> int:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    owner = argv[0]
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    kill_marked(owner)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
