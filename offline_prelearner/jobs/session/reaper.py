"""Ends the local Ray instance a job started once the job's process is gone, however it went.

Ray's ``gcs_server`` and ``raylet`` die with the process that started them (``PR_SET_PDEATHSIG``),
but the raylet's own children do not: after a SIGKILL of the driver (or an exit while
``ray.init`` runs), its dashboard and runtime-env agents see the raylet die at once, then spend
~60 s reporting it to the GCS that died with it (a fixed RPC timeout, no setting). So:

* the driver marks the instance: every process Ray starts inherits ``OWNER_ENV=<id>`` in its
  environment (set by the driver around ``ray.init``, unique per job);
* this watchdog, started by the driver just before, follows the processes that carry the mark
  and all their descendants (every ~0.3 s: the agents and workers rename themselves, which
  overwrites the environment ``/proc/<pid>/environ`` shows, so the raylet's children are known by
  their parent), while it reads its stdin -- a pipe only the driver holds the other end of;
* at EOF (the driver exited, was killed, or crashed) it SIGKILLs what it followed, and what
  still carries the mark, until none is left (a few seconds at most).

A job that ends normally shuts Ray down first and this finds nothing. SIGINT, SIGTERM and SIGHUP
are ignored here: a Ctrl-C reaches the whole foreground process group, this watchdog included,
and its work begins when the driver is gone. Linux only (``/proc``); elsewhere the driver starts
none. This file runs as a script (``python -I reaper.py <id>``): standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

__all__ = ["OWNER_ENV", "Instance", "start"]

#: The environment variable that marks the processes of one job's Ray instance.
OWNER_ENV = "OFFLINE_PRELEARNER_RAY_OWNER"

#: How long the watchdog keeps killing (Ray may be starting a process as the driver dies).
REAP_SECONDS = 5.0
#: Seconds between two looks at the process table while the driver lives.
FOLLOW_SECONDS = 0.3


def supported() -> bool:
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def _table() -> dict[int, tuple[int, int, str]]:
    """For every process: its pid -> (parent pid, start time in clock ticks, state)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                f = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[int(name)] = (int(f[1]), int(f[19]), f[0].decode())
    return out


def _marked(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return needle in fh.read().split(b"\0")
    except OSError:
        return False


class Instance:
    """The processes of the Ray instance marked ``owner``: those that carry the mark when first
    seen (each new process's environment is read once), and all their descendants.

    Args:
        owner: The mark the driver put in ``OWNER_ENV`` for the instance it started.
    """

    def __init__(self, owner: str) -> None:
        self.needle = f"{OWNER_ENV}={owner}".encode()
        self.followed: dict[int, int] = {}  # pid -> start time
        self.checked: set[tuple[int, int]] = set()  # (pid, start) whose environ was read

    def follow(self) -> dict[int, tuple[int, int, str]]:
        """Looks at the process table: adds the marked processes and their descendants."""
        table = _table()
        me = os.getpid()
        for pid, (ppid, start, _) in table.items():  # each new process: its mark read once
            if pid == me or (pid, start) in self.checked:
                continue
            self.checked.add((pid, start))
            if ppid in self.followed or _marked(pid, self.needle):
                self.followed[pid] = start
        grew = True
        while grew:  # descendants whose parent was found later in this pass
            grew = False
            for pid, (ppid, start, _) in table.items():
                if pid != me and pid not in self.followed and ppid in self.followed:
                    self.followed[pid] = start
                    grew = True
        return table

    def alive(self) -> list[int]:
        """Pids of the followed processes still running (same start time, not a zombie)."""
        table = self.follow()
        return [
            pid
            for pid, start in self.followed.items()
            if pid in table and table[pid][1] == start and table[pid][2] not in ("Z", "X")
        ]

    def kill(self, seconds: float = REAP_SECONDS) -> int:
        """SIGKILLs the instance's processes until none is left or ``seconds`` passed; returns
        how many it killed.

        Args:
            seconds: How long to keep looking for (and killing) processes, default
                ``REAP_SECONDS``; new ones Ray starts meanwhile are killed too.

        Returns:
            How many distinct processes were sent SIGKILL.
        """
        deadline = time.monotonic() + seconds
        killed: set[int] = set()
        while True:
            pids = self.alive()
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

    Args:
        owner: The mark this process puts in ``OWNER_ENV`` for the Ray processes it starts.

    Returns:
        The watchdog process, or None (not Linux with ``/proc``, or it could not be started).
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
    instance = Instance(argv[0])
    with contextlib.suppress(OSError):
        while True:
            ready, _, _ = select.select([0], [], [], FOLLOW_SECONDS)
            if ready and not os.read(0, 4096):
                break  # EOF: the driver is gone
            instance.follow()
    instance.kill()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
