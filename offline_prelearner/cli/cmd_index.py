"""``offline-prelearner index``: a dataset index beside a folder of data files, so that a job
over it plans from one file (``_index.parquet``, see :mod:`~..jobs.batch.index`)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

__all__ = ["add_index", "index"]


def add_index(sub: Any) -> None:
    """The ``index`` parser, added to ``sub`` (the top parser's sub-commands).

    Args:
        sub: The top parser's sub-parsers.
    """
    i = sub.add_parser(
        "index",
        help="write _index.parquet beside a dataset's files: a job over it plans from that file",
    )
    i.add_argument("path", help="the dataset's folder: a local path or a store URI (s3://...)")
    i.add_argument(
        "--schema",
        default=None,
        help="a preset name or schema JSON file naming the episode id columns (default: RLlib's)",
    )
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=index)


def index(args: argparse.Namespace) -> int:
    """The ``index`` sub-command: scans every data file of the folder once (many at once) and
    writes its index; prints what it wrote.

    Args:
        args: The parsed arguments.

    Returns:
        0.
    """
    from ..config import PreLearnerConfig, ReadConfig
    from ..jobs.batch.index import write_index

    start = time.perf_counter()
    config = PreLearnerConfig(read=ReadConfig(format="rows", schema=args.schema))
    done = write_index(args.path, config)
    seconds = time.perf_counter() - start
    if args.json:
        print(
            json.dumps(
                {
                    "index": done.index,
                    "files": done.files,
                    "rows": done.rows,
                    "episodes": done.episodes,
                    "bytes": done.bytes,
                    "seconds": round(seconds, 3),
                }
            )
        )
    else:
        print(
            f"wrote {done.index} ({done.files} files, {done.rows} rows, {done.episodes} "
            f"episodes, {done.bytes:,} bytes) in {seconds:.1f} s"
        )
    return 0
