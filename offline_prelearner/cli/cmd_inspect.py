"""``offline-prelearner inspect``: what a dataset holds, and whether it validates."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..config import ReadConfig, ValidateConfig
from ..errors import ConfigError
from .options import FORMAT_HELP, MAX_STEPS_HELP, add_common, format_choices, out_path

__all__ = ["add_inspect", "add_reading", "inspect", "progress_bar", "reading"]


def add_inspect(sub: Any) -> None:
    """The ``inspect`` parser, added to ``sub`` (the top parser's sub-commands).

    Args:
        sub: The top parser's sub-parsers (what ``add_subparsers`` returned).
    """
    i = sub.add_parser("inspect", help="what a dataset holds, and a validation report")
    add_common(
        i,
        "skip",
        "what to do with rows that fail to read or validate (default: skip and count them in "
        "the report)",
    )
    add_reading(i)
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=inspect)


def add_reading(p: argparse.ArgumentParser) -> None:
    """What ``inspect`` and ``report`` take besides PATH, ``--legacy-pickle`` and
    ``--on-invalid``: the format, schema, D4RL's step limit, the quarantine folder, fragments.

    Args:
        p: The sub-command's parser; :func:`reading` turns what it parsed into configs.
    """
    p.add_argument("--format", choices=format_choices(), default="auto", help=FORMAT_HELP)
    p.add_argument("--max-episode-steps", type=int, default=None, help=MAX_STEPS_HELP)
    p.add_argument(
        "--schema",
        default=None,
        help="a preset name from schemas/ (rllib, rllib_compressed, d4rl, minari_transitions, "
        "...) or a schema JSON file (default: RLlib's column names)",
    )
    p.add_argument(
        "--quarantine-dir",
        type=out_path,
        default=None,
        help="with --on-invalid quarantine: where rejected rows are written",
    )
    p.add_argument(
        "--allow-fragments",
        action="store_true",
        help="keep episodes that never end within the data instead of rejecting them",
    )


def reading(args: argparse.Namespace) -> tuple[ReadConfig, ValidateConfig]:
    """The read and validate settings of ``inspect``'s (and ``report``'s) arguments.

    Args:
        args: The parsed arguments (:func:`add_reading`'s and :func:`add_common`'s).

    Returns:
        ``(read, validate)``.

    Raises:
        ConfigError: ``--on-invalid quarantine`` without a ``--quarantine-dir`` folder.
    """
    if args.on_invalid == "quarantine" and not args.quarantine_dir:
        raise ConfigError(
            "--on-invalid quarantine needs --quarantine-dir DIR for the rejected rows"
        )
    qdir = args.quarantine_dir
    if qdir and os.path.exists(qdir) and not os.path.isdir(qdir):
        raise ConfigError(f"--quarantine-dir {qdir!r} is a file; give a folder")
    read = ReadConfig(
        format=args.format,
        schema=args.schema,
        legacy_pickle=args.legacy_pickle,
        on_invalid=args.on_invalid,
        max_episode_steps=args.max_episode_steps,
    )
    validate = ValidateConfig(require_done=not args.allow_fragments)
    return read, validate


def progress_bar(i: int, n: int, name: str) -> None:
    """``read i/n files (p%)`` on one line of a terminal's stderr (nothing when not a terminal).

    Args:
        i: Files read so far.
        n: Files in all.
        name: The file just read.
    """
    if sys.stderr.isatty():
        sys.stderr.write(f"\r  read {i}/{n} files ({100 * i // n}%)   ")
        if i == n:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _fmt_stats(s: dict[str, float] | None) -> str:
    if not s:
        return "-"
    return f"min {s['min']:.4g}  mean {s['mean']:.4g}  max {s['max']:.4g}  std {s['std']:.4g}"


def _fmt_observation(obs: dict[str, Any] | None) -> str:
    """A plain observation's ``{shape, dtype}`` as it is; a composite one's leaves (``{"obs.<leaf
    path>": {shape, dtype}}``) a line each; ``-`` when no episode was kept to tell."""
    if obs is None:
        return "-"
    if set(obs) == {"shape", "dtype"}:
        return str(obs)
    width = max(map(len, obs), default=0)
    lines = [f"{len(obs)} leaves (composite)"]
    lines += [f"  {k:<{width}}  shape {v['shape']}  dtype {v['dtype']}" for k, v in obs.items()]
    return "\n".join(lines) + "\n"


def _print_report(d: dict[str, Any]) -> None:
    lines = [
        f"path        {d['path']}  ({d['files']} files)",
        f"format      {d['format']}   schema {d['schema']}",
        f"rows        {d['rows']}",
        f"episodes    {d['episodes']}  ({d['terminated']} terminated, {d['truncated']} truncated, "
        f"{d['not_done']} not done)",
        f"timesteps   {d['timesteps']}",
        f"observation {_fmt_observation(d['observation'])}   action {d['action'] or '-'}",
        f"extras      {', '.join(d['extras']) or '-'}",
        f"length      {_fmt_stats(d['length'])}",
        f"return      {_fmt_stats(d['return'])}",
        f"duplicates  {d['duplicates']} episodes ({d['duplicate_rows']} rows)",
        f"rejected    {d['rejected'] or 'none'}",
        f"accounting  rows in = kept + rejected + duplicate: "
        f"{'yes' if d['rows_balance'] else 'NO'}",
    ]
    lines += _dataset_lines(d)
    lines += _job_line(d.get("job"))
    if d["files_unreadable"]:
        lines.append(f"unreadable  {', '.join(d['files_unreadable'])}")
    if d["quarantine_file"]:
        lines.append(f"quarantine  {d['quarantine_file']}")
    for f in d["per_file"]:  # every input file: read = kept + rejected + duplicate
        error = f"  error: {f['error']}" if f["error"] else ""
        lines.append(
            f"file        {f['file']}  {f['format']}  read {f['rows_read']}  kept "
            f"{f['rows_kept']}  rejected {f['rows_rejected']}  duplicate "
            f"{f['rows_duplicate']}{error}"
        )
    print("\n".join(lines))


def _job_line(job: dict[str, Any] | None) -> list[str]:
    """Who wrote a committed folder: the command, its job id and when, from what."""
    if not job:
        return []
    what = f" --to {job['to']}" if job.get("to") else ""
    layout = f", layout {job['layout']}" if job.get("layout") else ""
    rows = f", {job['input_rows']:,} rows" if job.get("input_rows") is not None else ""
    return [
        f"job         {job['command']}{what} {job['job_id']} at {job['committed_at']} "
        f"(offline_prelearner {job['version']}; from {job['inputs']} {job['input_format']} "
        f"files{rows}{layout}; engine {job['engine']})"
    ]


def _print_samples(d: dict[str, Any]) -> None:
    """A ``process`` output, described (:func:`~..jobs.outputs.describe_samples`)."""
    sample, stats = d["sample"], d["stats"] or {}
    width = max(map(len, d["columns"]), default=0)
    lines = [
        f"path        {d['path']}  (samples 'process' wrote: {d['files']} files, "
        f"{d['bytes']:,} bytes)",
        f"rows        {d['rows']:,} samples"
        + (f" from {d['episodes']:,} episodes" if d["episodes"] is not None else ""),
        f"sampling    unit {sample['unit']}, n_step {sample['n_step']}, gamma {sample['gamma']}, "
        f"frame_stack {sample['frame_stack']}, sample_all {sample['sample_all']}",
        "n_step      "
        + (", ".join(f"{k}: {v:,} rows" for k, v in d["n_step"].items()) or "- (no n_step column)"),
        "modules     " + (", ".join(f"{k}: {v:,} rows" for k, v in d["modules"].items()) or "-"),
    ]
    if stats:
        lines.append(
            f"ledger      {stats['rows_in']:,} rows read -> {stats['samples_written']:,} samples; "
            f"every row accounted for: {'yes' if stats['rows_balance'] else 'NO'}"
        )
    lines += _job_line(d["job"])
    lines.append(f"columns     {len(d['columns'])}")
    lines += [
        f"  {k:<{width}}  shape {v['shape']}  dtype {v['dtype']}" for k, v in d["columns"].items()
    ]
    print("\n".join(lines))


def _dataset_lines(d: dict[str, Any]) -> list[str]:
    """What the dataset's metadata declares (a LeRobot dataset's ``info.json``), beside what was
    read: the episode count there and here."""
    about = d.get("dataset")
    if not about or "lerobot_version" not in about:
        return []
    read = d["episodes"] + sum(d["rejected_episodes"].values()) + d["duplicates"]
    declared = about.get("total_episodes")
    match = "matches" if declared == read else "DIFFERS"
    cams = ", ".join(
        f"{k} {'x'.join(map(str, c['shape']))} {c['codec'] or '?'}"
        for k, c in about["cameras"].items()
    )
    return [
        f"lerobot     {about['lerobot_version']}  fps {about['fps']:g}  robot "
        f"{about['robot_type'] or '-'}  info.json: {declared} episodes, "
        f"{about.get('total_frames')} frames ({match} the {read} episodes read)",
        f"cameras     {cams or '-'}",
        f"tasks       {'; '.join(repr(t) for t in about['tasks']) or '-'}",
    ]


def inspect(args: argparse.Namespace) -> int:
    """The ``inspect`` sub-command: reads the input as a job would (or describes the samples
    folder ``process`` wrote), prints what it found (or JSON with ``--json``) and returns the
    exit code.

    Args:
        args: The parsed ``inspect`` arguments (PATH, the reading options, ``--json``).

    Returns:
        0, or 2 when the input has rows and every one was rejected.

    Raises:
        ConfigError: ``--on-invalid quarantine`` without a ``--quarantine-dir`` folder.
    """
    from ..jobs.inspection import inspect_any

    read, validate = reading(args)
    d, report = inspect_any(
        args.path,
        read,
        validate,
        quarantine_dir=args.quarantine_dir,
        progress=None if args.json else progress_bar,
    )
    if args.json:
        print(json.dumps(d))
    elif report is None:
        _print_samples(d)
    else:
        _print_report(d)
    if report is not None and d["rows"] and not d["episodes"] and d["rejected"]:
        rejections = report.batch.rejections
        first = f"; the first: {rejections[0].error}" if rejections else ""
        print(
            f"offline-prelearner inspect: error: every row was rejected ({d['rejected']}){first}",
            file=sys.stderr,
        )
        return 2
    return 0
