"""``offline-prelearner``: the top parser, one sub-command each, and :func:`main`."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from ..jobs.session import interrupts, ray_session
from .cmd_convert import add_convert
from .cmd_index import add_index
from .cmd_inspect import add_inspect
from .cmd_process import add_process
from .cmd_record import add_record
from .cmd_report import add_report
from .exits import exit_now, interrupted, report_interrupt, run_command, shutdown
from .options import OneLineParser, epilog, package_version

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``offline-prelearner`` parser: ``--version``, ``-v`` and the sub-commands, each with
    its ``Examples:``; a parsed sub-command's ``func(args)`` runs it."""
    p = OneLineParser(
        prog="offline-prelearner",
        description="Offline RL data: recorded experience -> episodes -> learner-ready batches.",
        epilog=epilog(""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {package_version()}",
        help="print the installed version and exit",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Ray's own log lines live (by default they go to its session log folder, "
        "named when a job fails)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for add in (add_record, add_process, add_inspect, add_report, add_convert, add_index):
        add(sub)
    for command, parser in sub.choices.items():
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = epilog(command)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``offline-prelearner``; returns its exit status.

    SIGINT and SIGTERM take one path whatever the job is doing (:mod:`~..jobs.session.interrupts`):
    before the commit, one line and exit 130 / 143 with nothing committed; during the commit, the
    commit finishes and the job exits 0; after it, nothing changes the exit status.

    Without ``argv`` this is the program (the console script, ``python -m offline_prelearner``):
    once Ray was involved it ends the process itself after its cleanup (``os._exit``: Ray's
    threads and exit hooks cannot turn a finished job into a crash or a late signal into a
    traceback), keeping its signal handler to the end; it leaves its local Ray instance to the
    watchdog (:mod:`~..jobs.session.reaper`) instead of a shutdown that waits. With
    ``argv`` (a test, a notebook) it returns, and gives the signal handlers back.

    Args:
        argv: The arguments (without the program name); None: ``sys.argv[1:]``, as the program.

    Returns:
        The exit status.
    """
    args = build_parser().parse_args(argv)
    _our_warnings_in_one_line()
    if not args.verbose:
        # Read by Ray Data when it sets up its loggers (on import): INFO lines stay in its files.
        os.environ.setdefault("RAY_DATA_LOG_LEVEL", "ERROR")
    from ..replay.storage.memory import for_worker_process

    for_worker_process()  # the CLI's process runs our jobs: see replay/storage/memory.py
    ray_session.VERBOSE = args.verbose
    program = argv is None
    ray_session.ONE_JOB = program  # Ray is let go of once the output is committed
    previous = interrupts.install(
        on_stuck=(lambda n: exit_now(report_interrupt(args, n))) if program else None
    )
    code = 1
    try:
        code = run_command(args)
    finally:
        interrupts.closing(code)  # from here a signal is recorded, never raised
        if not (program and interrupted() and ray_session.ray_watched()):
            shutdown()
        if not program:
            interrupts.restore(previous)
    if program and "ray" in sys.modules:
        exit_now(code)
    return code


def _our_warnings_in_one_line() -> None:
    """This package's warnings reach the console as ``offline-prelearner: warning: ...``, one
    line each; other libraries' keep Python's format, until a signal arrived.

    After SIGINT / SIGTERM the job's line is the interrupt's; what other libraries warn while the
    job unwinds is an echo of the interrupt itself (a Cython extension whose import the signal
    cut short: "Cython module failed to patch module with custom type"), not news about the data,
    so it is not printed."""
    shown = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *rest: object, **kw: object) -> None:
        if category.__module__.startswith("offline_prelearner"):
            print(f"offline-prelearner: warning: {message}", file=sys.stderr)
        elif interrupts.received() is None:
            shown(message, category, *rest, **kw)  # type: ignore[arg-type]

    if getattr(shown, "__module__", None) != __name__:
        warnings.showwarning = show
