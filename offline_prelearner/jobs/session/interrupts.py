"""Ctrl-C and SIGTERM for the command line: one handler, whatever the job is doing.

What a SIGINT or SIGTERM does depends on the phase the job is in, never on where the main thread
happens to be:

* **starting** (Python imports the package, before :func:`install`): one line, exit 128 + n at
  once; nothing has begun (:func:`exit_at_once_while_starting`, run when this module is
  imported, which the package does first; it does nothing unless the process is the CLI).
* **running** (planning, ``ray.init``, the units, the accounting): :class:`Interrupted` is raised
  in the main thread; the CLI prints its one line and exits 130 / 143, nothing committed.
* **committing** (:func:`commit_point`: the manifest and the move into place): held; the commit
  runs to its end, and a job that committed exits 0 (it is complete: interrupting it then would
  report a failure that did not happen).
* **closing** (:func:`closing`: the job is over, Ray is being shut down): recorded, never raised;
  the exit code is the job's.

Only the first signal is raised; later ones are recorded, so a second Ctrl-C cannot break the
cleanup of the first. Without :func:`install` (a library caller) nothing here changes how signals
behave: :func:`commit_point` is a plain block.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ...errors import Interrupted

__all__ = [
    "Interrupted",
    "claim_report",
    "closing",
    "commit_point",
    "committed",
    "exit_at_once_while_starting",
    "install",
    "received",
]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    installed = False
    first: int | None = None  # the first signal that arrived
    raised = False
    holding = 0
    committed = False
    closing = False
    code: int | None = None  # the exit status, once the job is over
    on_stuck: Callable[[int], None] | None = None
    report = threading.Lock()  # one line, whether the main thread or the watch writes it
    unraisablehook: Callable[[Any], None] = sys.unraisablehook


_state = _State()

#: Seconds the main thread gets to act on a signal before the watch ends the process for it.
GRACE_SECONDS = 2.0


def _on_signal(signum: int, frame: Any) -> None:
    if _state.first is None:
        _state.first = signum
    if _state.raised or _state.holding or _state.committed or _state.closing:
        return
    _state.raised = True
    raise Interrupted(signum)


def install(on_stuck: Callable[[int], None] | None = None) -> dict[int, Any]:
    """Puts the handler in place for SIGINT and SIGTERM (main thread); returns the handlers it
    replaced (for :func:`restore`).

    Args:
        on_stuck: For the program itself (not a library caller): ``on_stuck(signum)`` writes the
            interrupt's line and ends the process. Python runs a signal handler only when the
            main thread is between bytecodes; one waiting in native code (``ray.init`` waiting
            for a GCS that the same SIGTERM stopped, ~30 s) would sit on it. A watch thread woken
            by the signal itself (``signal.set_wakeup_fd``) calls ``on_stuck`` when the main
            thread has not acted within GRACE_SECONDS, and ends a cleanup that outlasts them
            (Ray's shutdown) with the job's own exit status.
    """
    previous: dict[int, Any] = {s: signal.getsignal(s) for s in SIGNALS}
    for attr in ("first", "raised", "holding", "committed", "closing", "code"):
        setattr(_state, attr, getattr(_State, attr))
    _state.report = threading.Lock()
    _state.on_stuck = on_stuck
    _state.installed = True
    _state.unraisablehook = sys.unraisablehook
    sys.unraisablehook = _unraisable
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    if on_stuck is not None:
        _start_watch()
    return previous


def _unraisable(info: Any) -> None:
    """Python swallows an exception raised where it cannot propagate -- a fork hook (logging's,
    while Ray starts a process), a ``__del__``, a weakref callback -- and prints it as "Exception
    ignored". :class:`Interrupted` raised there is not lost: the signal is sent again to this
    process, to be raised at the next place that can take it."""
    exc = getattr(info, "exc_value", None)
    if isinstance(exc, Interrupted) and not (_state.closing or _state.committed):
        _state.raised = False  # sent from a thread a moment later: the hook has returned then
        again = threading.Timer(0.05, os.kill, (os.getpid(), exc.signum))
        again.daemon = True
        again.start()
        return
    _state.unraisablehook(info)


def _start_watch() -> None:
    read, write = os.pipe()
    os.set_blocking(write, False)
    try:
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(read)
        os.close(write)
        return
    threading.Thread(target=_watch, args=(read,), name="interrupt-watch", daemon=True).start()


def _watch(fd: int) -> None:
    while True:
        try:
            got = os.read(fd, 64)
        except OSError:
            return
        if not got:
            return
        caught = [b for b in got if b in SIGNALS]
        if caught:
            time.sleep(GRACE_SECONDS)
            _act_for_the_main_thread(caught[0])


def _act_for_the_main_thread(signum: int) -> None:
    """The process is still here GRACE_SECONDS after a signal: do what the main thread would
    (whose handler may not even have run: it runs between bytecodes)."""
    if _state.first is None:
        _state.first = signum
    signum = _state.first
    if _state.holding or (_state.committed and not _state.closing):
        return  # a commit runs to its end; after it, the job finishes as it would have
    if _state.closing:
        if _state.code is not None:
            _hard_exit(_state.code)  # the cleanup (Ray's shutdown) outlasts the grace
        return
    if _state.on_stuck is not None:
        _state.on_stuck(signum)  # writes the line (unless the main thread did), ends the process
    _hard_exit(128 + signum)


def _hard_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def claim_report() -> bool:
    """True for the first caller only: it writes the interrupt's one line (the main thread, or
    the watch acting for it); another caller writes nothing."""
    return _state.report.acquire(blocking=False)


def restore(previous: dict[int, Any]) -> None:
    """Gives SIGINT and SIGTERM back to the handlers :func:`install` replaced.

    Args:
        previous: What :func:`install` returned: signal number to the handler it replaced.
    """
    for s, h in previous.items():
        signal.signal(s, h)
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _state.unraisablehook
    _state.installed = False


def handler() -> Any:
    """The handler :func:`install` puts in place (to put it back where a library replaced it)."""
    return _on_signal


def received() -> int | None:
    """The first signal that arrived since :func:`install` (None: none did)."""
    return _state.first


def committed() -> bool:
    """Whether the job passed its :func:`commit_point` (its output is complete)."""
    return _state.committed


def closing(code: int) -> None:
    """From now on a signal is recorded and never raised: the job is over with exit status
    ``code``, its cleanup runs (and a signal during it that it outlasts ends it with ``code``).

    Args:
        code: The exit status the job ended with (the command's result; 1 when it raised),
            used if a signal ends the cleanup.
    """
    _state.code = code
    _state.closing = True


class commit_point:
    """The block that commits a job's output: a signal arriving inside waits for its end.

    If the block ends normally the job has committed: from then on signals are recorded and not
    raised (the job exits 0). If it raises, its error unwinds as usual and the CLI reports the
    signal that arrived meanwhile (:func:`received`) as the interrupt it was.
    """

    def __enter__(self) -> None:
        _state.holding += 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _state.holding -= 1
        if kind is None and not _state.holding:
            _state.committed = True


def exit_at_once_while_starting() -> None:
    """While this process is the CLI and still importing: a signal ends it at once, in one line.

    Called first thing when the package is imported; does nothing unless the process runs
    ``offline-prelearner`` (the console script or ``python -m offline_prelearner``), so a library
    import never touches signal handlers. :func:`install` replaces the handler.
    """
    orig = list(getattr(sys, "orig_argv", []))
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script != "offline-prelearner" and orig[1:3] != ["-m", "offline_prelearner"]:
        return
    try:
        for s in SIGNALS:
            if signal.getsignal(s) in (signal.default_int_handler, signal.SIG_DFL):
                signal.signal(s, _exit_now)
    except ValueError:  # not the main thread: leave signals alone
        pass


def _exit_now(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    os.write(
        2, f"offline-prelearner: interrupted by {name} while starting; nothing was done\n".encode()
    )
    os._exit(128 + signum)


exit_at_once_while_starting()  # on import: the package imports this module first
