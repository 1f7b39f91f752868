"""``offline-prelearner record``: a gymnasium env -> RLlib-compatible offline data."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .options import add_layout, out_path

__all__ = ["add_record", "record"]


def add_record(sub: Any) -> None:
    """The ``record`` parser, added to ``sub`` (the top parser's sub-commands).

    Args:
        sub: The top parser's sub-parsers (what ``add_subparsers`` returned).
    """
    r = sub.add_parser("record", help="record a gymnasium env into RLlib-compatible offline data")
    r.add_argument("env", help="gymnasium env id, e.g. CartPole-v1")
    r.add_argument("--steps", type=int, required=True, help="env steps to record")
    r.add_argument("--out", type=out_path, required=True, help="output directory")
    r.add_argument(
        "--format",
        choices=["rows", "episodes"],
        default="rows",
        help="rows: one transition per row (RLlib's recorder layout, plus t); "
        "episodes: msgpack episode records (default: rows)",
    )
    r.add_argument(
        "--policy",
        choices=["random", "heuristic"],
        default="random",
        help="random: the action space's samples (default); heuristic: a simple fixed policy "
        "that beats random (CartPole, MountainCar, Acrobot, Pendulum)",
    )
    r.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the env's resets, the policy and the episode ids: the same seed records "
        "the same data (default: 0)",
    )
    r.add_argument(
        "--rows-per-file",
        type=int,
        default=0,
        help="split rows data into files of this many rows, cutting through episodes "
        "like RLlib's recorder (default: one file)",
    )
    r.add_argument("--json", action="store_true", help="print the summary on one line")
    add_layout(r, "rllib", "a recording is a dataset RLlib may read")
    r.set_defaults(func=record)


def record(args: argparse.Namespace) -> int:
    """Records ``args.steps`` env steps and writes them; prints the summary.

    Args:
        args: The parsed ``record`` arguments: the env id, ``--steps``, ``--out``, the policy,
            seed, format, rows per file and layout.

    Returns:
        0 (a failure raises, and the CLI turns it into its one line and exit code).
    """
    from ..jobs.record import record as record_to

    summary = record_to(
        args.env,
        args.steps,
        args.out,
        fmt=args.format,
        policy=args.policy,
        seed=args.seed,
        rows_per_file=args.rows_per_file,
        layout=args.layout,
    )
    print(json.dumps(summary, indent=None if args.json else 2))
    return 0
