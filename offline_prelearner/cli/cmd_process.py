"""``offline-prelearner process``: the batch job (:func:`~offline_prelearner.run_pipeline`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config import ENGINES, PreLearnerConfig
from ..errors import ConfigError
from .console import JobProgress
from .options import (
    FORMAT_HELP,
    MAX_STEPS_HELP,
    add_commit_flags,
    add_common,
    add_layout,
    format_choices,
    out_path,
)
from .summaries import process_lines

__all__ = ["add_process", "parse_set", "process"]


def add_process(sub: Any) -> None:
    """The ``process`` parser, added to ``sub`` (the top parser's sub-commands).

    Args:
        sub: The object ``argparse.ArgumentParser.add_subparsers()`` returned for the top
            parser; the new parser's ``func`` default is :func:`process`.
    """
    pr = sub.add_parser(
        "process",
        help="the batch job: read, build episodes, replay, sample, write learner-ready rows",
    )
    add_common(
        pr,
        "raise",
        "bad rows/episodes: stop with the reader's message (default), or count them "
        "(skip / quarantine) in stats.json",
    )
    pr.add_argument(
        "--out",
        type=out_path,
        required=True,
        help="output directory (samples/*.parquet, stats.json)",
    )
    pr.add_argument("--config", help="a PreLearnerConfig as JSON or YAML")
    pr.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config field (flat name or section.field); JSON values: "
        "--set n_step=[1,3] --set gamma=0.99 --set buffer.kind=prioritized",
    )
    pr.add_argument(
        "--prelearner", help="a custom OfflinePreLearner subclass as package.module:Class"
    )
    pr.add_argument("--format", choices=format_choices(), help=FORMAT_HELP)
    pr.add_argument("--schema", help="schema preset name or JSON file (rows format)")
    pr.add_argument("--max-episode-steps", type=int, default=None, help=MAX_STEPS_HELP)
    pr.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS or local)")
    add_commit_flags(pr)
    pr.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="where the units of work run: local (in this process), ray (Ray Data tasks, "
        "retried when a worker dies) or auto (local for inputs under 64 MiB without a "
        "cluster address; default)",
    )
    pr.add_argument(
        "--json",
        action="store_true",
        help="print the whole summary as one JSON line (default: a few lines for a person)",
    )
    add_layout(pr, "auto", "small arrays open in any tool, frames stay fast")
    pr.set_defaults(func=process)


def parse_set(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values parse as JSON where they can (``[1,3]``, ``true``, ``0.99``).

    Args:
        items: The ``--set`` values as given, each ``key=value``; the key is a flat config field
            or ``section.field``. A value that is not JSON stays the raw string; a later item
            overrides an earlier one with the same key.

    Returns:
        The overrides by key, for :meth:`PreLearnerConfig.with_updates`.

    Raises:
        ConfigError: An item has no ``=`` or an empty key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, found {item!r}")
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def _config_text(path: str) -> bytes:
    """``--config``'s bytes from the local disk or a store (at most one byte over the limit the
    config's parser refuses)."""
    from ..config.files import MAX_CONFIG_BYTES
    from ..io.stores import read_file

    return read_file(path, MAX_CONFIG_BYTES)


def process(args: argparse.Namespace) -> int:
    """Runs the batch job on ``args.path`` into ``args.out``; prints the summary. Returns 0.

    Args:
        args: The parsed ``process`` command line: ``path``, ``out``, ``config``, ``set``,
            ``format``, ``schema``, ``max_episode_steps``, ``prelearner``, ``engine``, ``address``,
            ``layout``, ``json`` (the whole summary as one JSON line; else a few lines) and the
            common and commit flags (``on_invalid``, ``legacy_pickle``, ``overwrite``,
            ``resume``). Flags left unset keep the config file's values.

    Returns:
        0; a failure raises, and :func:`~.exits.run_command` turns it into the exit status.
    """
    from ..jobs.batch.batch_job import run_pipeline

    config_text = _config_text(args.config) if args.config else None
    config = (
        PreLearnerConfig.loads(config_text, args.config)
        if config_text is not None
        else PreLearnerConfig()
    )
    updates = parse_set(args.set or [])
    if args.format:
        updates["format"] = args.format
    if args.schema:
        updates["schema"] = args.schema
    if args.max_episode_steps is not None:
        updates["max_episode_steps"] = args.max_episode_steps
    if args.legacy_pickle:
        updates["legacy_pickle"] = True
    if args.on_invalid != "raise":  # the default leaves a config file's choice alone
        updates["on_invalid"] = args.on_invalid
    if args.address:
        updates["address"] = args.address
    config = config.with_updates(updates) if updates else config
    # sample_all unset is the batch job's rule (every transition once; see the README's "What
    # sampling means"), resolved as run_pipeline resolves it; `--set sample_all=false` samples
    # from replay as RLlib does.
    config = config.for_job("batch")
    progress = JobProgress("process", enabled=not args.json)
    try:
        result = run_pipeline(
            args.path,
            config,
            out_dir=args.out,
            prelearner=args.prelearner,
            engine=args.engine,
            overwrite=args.overwrite,
            resume=args.resume,
            progress=progress,
            layout=args.layout,
        )
    finally:
        progress.close()  # a bar left drawn would swallow the start of an error's line
    if args.json:
        summary = result.job_stats.summary()
        summary["out"] = args.out
        print(json.dumps(summary))
    else:
        print("\n".join(process_lines(result.job_stats.to_dict(), args.out)))
    open_eps = result.job_stats.pending_fragments
    if open_eps and config.sample.sample_all:
        print(
            f"offline-prelearner process: note: {open_eps} episode(s) never ended (no terminated "
            "or truncated flag on their last row, and no rows after it): their steps are not "
            "written, as sample_all writes complete episodes (see pending_fragments in "
            "stats.json; mark such last rows truncated to keep them)",
            file=sys.stderr,
        )
    return 0
