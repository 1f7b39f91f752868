"""How a command ends: the exit status and the one line that says why.

0 done; 2 bad data, config or arguments (our errors, with the file, column, episode and row);
3 the job's own I/O failed or a Ray worker was lost for good; 128 + N interrupted by signal N
(:mod:`~..jobs.session.interrupts`). Every failure names what was committed (nothing)
and what ``--resume`` may reuse.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import threading
import time
from typing import NoReturn

from ..errors import DataError, OfflinePrelearnerError, cut
from ..jobs.session import interrupts, ray_session
from ..jobs.session.ray_session import local_ray_watched, ray_log_dir, shutdown_ray

__all__ = ["exit_now", "interrupted", "report_interrupt", "run_command", "shutdown"]


def _nothing_committed(args: argparse.Namespace) -> str:
    d = ray_log_dir()
    logs = f" (Ray's logs: {d})" if d else ""
    out = getattr(args, "out", None)
    if out is None or args.command not in ("process", "convert"):
        return logs
    from ..jobs.staging import staging_for

    n = staging_for(out).committed_units()  # a local staging folder, or a store's _staging/
    kept = f"; {n} finished unit(s) kept for --resume" if n else ""
    return f"; nothing was committed to {out}{kept}{logs}"


def run_command(args: argparse.Namespace) -> int:
    """The subcommand, and the one line for whatever stopped it; returns the exit status.

    Args:
        args: The parsed command line; ``args.func`` is the subcommand, called with ``args``,
            and ``args.command`` names it in the error line. ``args.out`` (``process`` and
            ``convert``) is where the line says what was committed and what ``--resume`` keeps.

    Returns:
        The subcommand's own status; 2 for our errors (bad data, config or arguments) and a
        missing file; 3 for a failure of the job's own I/O or a Ray worker lost for good;
        128 + N after signal N.

    Raises:
        Exception: Anything else (our bug), unchanged, for the traceback.
    """
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return report_interrupt(args)
    except (OfflinePrelearnerError, FileNotFoundError) as e:
        if interrupted():  # the error is the interrupt's doing (a Ray process it stopped)
            return report_interrupt(args)
        print(
            f"offline-prelearner {args.command}: error: {cut(str(e))}{_hint(args, e)}"
            f"{_nothing_committed(args)}",
            file=sys.stderr,
        )
        return 2
    except OSError as e:
        if interrupted():
            return report_interrupt(args)
        # The job's own I/O failed (disk full, file too large, read-only, no permission): one
        # line, exit 3 like a lost worker (1 is for our bugs, 2 for bad data or arguments).
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        msg = lines[-1] if lines else type(e).__name__  # Ray-wrapped: its traceback's last line
        code = errno.errorcode.get(e.errno or 0)
        print(
            f"offline-prelearner {args.command}: error: I/O failure"
            f"{f' ({code})' if code else ''}: {msg}{_nothing_committed(args)}",
            file=sys.stderr,
        )
        return 3
    except Exception as e:
        if interrupted():
            return report_interrupt(args)
        # A worker's error arrives wrapped by Ray (RayTaskError, UserCodeException ...): show the
        # reader's one-line message (file, column, episode, row), not Ray's stack traces.
        ours = _our_error(e)
        if ours is None:
            lost = _worker_lost(e)
            if lost is None:
                raise
            print(
                f"offline-prelearner {args.command}: error: {lost}{_nothing_committed(args)}",
                file=sys.stderr,
            )
            return 3
        print(
            f"offline-prelearner {args.command}: error: {cut(str(ours))}{_hint(args, ours)}"
            f"{_nothing_committed(args)}",
            file=sys.stderr,
        )
        return 2


def interrupted() -> bool:
    """A signal arrived and the job had not committed: it ends as the interrupt it is."""
    return interrupts.received() is not None and not interrupts.committed()


def report_interrupt(args: argparse.Namespace, signum: int | None = None) -> int:
    """Writes the interrupt's one line (once: the watch of :mod:`~..jobs.session.interrupts` may be
    writing it for a main thread stuck in native code); returns the exit status, 128 + the
    signal.

    Args:
        args: The parsed command line: ``args.command`` names the command in the line, and
            ``args.out`` is where it says nothing was committed.
        signum: The signal's number; None (or 0) takes the one :mod:`~..jobs.session.interrupts`
            received, and SIGINT where none was (a ``KeyboardInterrupt`` raised by other means).

    Returns:
        128 + the signal's number. Where the watch thread writes the line instead, the main
        thread first sleeps twice the grace period, as the watch ends the process meanwhile.
    """
    signum = signum or interrupts.received() or signal.SIGINT
    if not interrupts.claim_report():  # the other thread writes it
        if threading.current_thread() is threading.main_thread():
            time.sleep(2 * interrupts.GRACE_SECONDS)  # the watch ends the process meanwhile
        return 128 + signum
    name = signal.Signals(signum).name
    print(
        f"offline-prelearner {args.command}: interrupted by {name}{_nothing_committed(args)}",
        file=sys.stderr,
    )
    return 128 + signum


def exit_now(code: int) -> NoReturn:
    """Ends the process now: flushed output, no interpreter teardown (see :func:`main`).

    Args:
        code: The exit status, as :func:`run_command` returns it (0, 2, 3 or 128 + N).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _hint(args: argparse.Namespace, e: BaseException) -> str:
    """What to do about a data refusal under ``--on-invalid raise``: the option that counts it."""
    if not isinstance(e, DataError) or getattr(args, "on_invalid", None) != "raise":
        return ""
    from ..io.sources import LISTING_REASONS

    if e.reason in LISTING_REASONS:  # which files are the input: no policy counts those
        return ""
    what = "records" if args.command == "convert" else "rows"
    return f"; pass --on-invalid skip (or quarantine) to count and drop such {what}"


def shutdown() -> None:
    """Stops the Ray instance the job started (no worker of ours outlives the command).

    The program itself (:data:`~..jobs.session.ray_session.ONE_JOB`), which ends with
    ``os._exit`` next, leaves a local instance to its watchdog (:mod:`~..jobs.session.reaper`),
    which ends it once the process is gone, instead of waiting for ``ray.shutdown()`` (seconds;
    more than ten on many cores): whatever the exit status, no Ray process outlives it by more
    than a few seconds. A cluster's connection is closed as before.
    """
    if ray_session.ONE_JOB and local_ray_watched():
        return
    shutdown_ray()


def _worker_lost(e: BaseException) -> str | None:
    """One line for a job that lost a worker or node for good (Ray gave up retrying)."""
    names = {type(c).__name__ for c in _chain(e)}
    lost = {
        "ActorDiedError",
        "RayActorError",
        "WorkerCrashedError",
        "NodeDiedError",
        "ObjectLostError",
        "OwnerDiedError",
        "ActorUnavailableError",
    }
    hit = names & lost
    if not hit:
        return None
    return f"a Ray worker died and could not be replaced ({sorted(hit)[0]})"


def _chain(e: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [e]
    while todo:
        cur = todo.pop()
        if cur is None or any(cur is s for s in seen):
            continue
        seen.append(cur)
        todo += [getattr(cur, "cause", None), cur.__cause__, cur.__context__]
    return seen


def _our_error(e: BaseException) -> BaseException | None:
    """The first OfflinePrelearnerError in ``e``'s chain of causes, if any."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OfflinePrelearnerError):
            return cur
        todo += [getattr(cur, "cause", None), cur.__cause__, cur.__context__]
    return None
