"""``offline-prelearner report``: one HTML page about a dataset, to read before training."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config import SampleConfig
from .cmd_inspect import add_reading, progress_bar, reading
from .options import add_common, out_path
from .summaries import report_lines

__all__ = ["add_report", "report"]


def add_report(sub: Any) -> None:
    """The ``report`` parser, added to ``sub`` (the top parser's sub-commands).

    Args:
        sub: The top parser's sub-parsers.
    """
    r = sub.add_parser(
        "report",
        help="one self-contained HTML page about a dataset: summary, anomalies, charts, files",
    )
    add_common(
        r,
        "skip",
        "what to do with rows that fail to read or validate (default: skip and count them on "
        "the page)",
    )
    add_reading(r)
    r.add_argument("--out", required=True, type=out_path, help="the HTML file to write")
    r.add_argument(
        "--png",
        metavar="DIR",
        type=out_path,
        default=None,
        help="also write each chart as DIR/<chart>.png (for a paper or an issue)",
    )
    r.add_argument(
        "--gamma",
        type=float,
        default=SampleConfig.gamma,
        help="discount of the discounted return shown beside each episode's return, in [0, 1] "
        f"(default: {SampleConfig.gamma}, the n-step samples')",
    )
    r.add_argument(
        "--json",
        action="store_true",
        help="print one JSON line (the page, its charts, anomalies and inspect's summary) "
        "instead of a line for a person",
    )
    r.set_defaults(func=report)


def report(args: argparse.Namespace) -> int:
    """The ``report`` sub-command: reads the input as ``inspect`` does, writes the page (and the
    PNGs) and returns the exit code.

    Args:
        args: The parsed arguments (``--json``: one JSON line, the page's path, charts,
            anomalies and ``inspect --json``'s summary; else a line or two for a person).

    Returns:
        0, or 2 when every row was rejected (the page is written all the same).

    Raises:
        ConfigError: vl-convert-python is missing, ``--on-invalid quarantine`` has no
            ``--quarantine-dir``, or ``--gamma`` is outside ``[0, 1]``.
    """
    from ..report import report as write_report

    read, validate = reading(args)
    done = write_report(
        args.path,
        args.out,
        read,
        validate,
        png_dir=args.png,
        quarantine_dir=args.quarantine_dir,
        progress=progress_bar,
        gamma=args.gamma,
    )
    d = done.summary
    about = {
        "out": str(done.out),
        "episodes": d["episodes"],
        "charts": done.charts,
        "anomalies": done.anomalies,
        "png_dir": args.png,
        "pngs": [str(p) for p in done.pngs],
        "seconds": round(done.seconds, 3),
        "summary": d,
    }
    print(json.dumps(about) if args.json else "\n".join(report_lines(about)))
    if d["rows"] and not d["episodes"] and d["rejected"]:
        print(
            f"offline-prelearner report: error: every row was rejected ({d['rejected']})",
            file=sys.stderr,
        )
        return 2
    return 0
