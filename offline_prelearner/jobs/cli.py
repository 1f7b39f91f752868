"""``offline-prelearner``: the command line. Parses arguments, builds configs, calls the library.

Subcommands: ``process`` (the batch job), ``record`` (a gymnasium env -> RLlib-compatible
offline data) and ``inspect`` (what a dataset holds and whether it validates). Errors about
data print one line naming the file, column, episode and row, and exit with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..config import ReadConfig
from ..errors import ConfigError, DataError, OfflinePrelearnerError, cut, shown
from . import interrupts
from .console import JobProgress

__all__ = ["main"]


def _progress(i: int, n: int, name: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r  read {i}/{n} files ({100 * i // n}%)   ")
        if i == n:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _cmd_record(args: argparse.Namespace) -> int:
    from .record import record_env, write_recording

    rec = record_env(args.env, args.steps, policy=args.policy, seed=args.seed)
    files = write_recording(
        rec, args.out, fmt=args.format, rows_per_file=args.rows_per_file, layout=args.layout
    )
    summary = {
        "env": args.env,
        "format": args.format,
        "policy": args.policy,
        "seed": args.seed,
        "steps": sum(len(e) for e in rec.episodes),
        "episodes": len(rec.episodes),
        "files": files,
    }
    print(json.dumps(summary, indent=None if args.json else 2))
    return 0


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


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ..episodes.validate import ValidateConfig
    from .inspection import inspect_path

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
    validate = ValidateConfig(on_invalid=args.on_invalid, require_done=not args.allow_fragments)
    report = inspect_path(
        args.path,
        read,
        validate,
        quarantine_dir=args.quarantine_dir,
        progress=None if args.json else _progress,
    )
    d = report.to_dict()
    if args.json:
        print(json.dumps(d))
    else:
        _print_report(d)
    if d["rows"] and not d["episodes"] and d["rejected"]:
        rejections = report.batch.rejections
        first = f"; the first: {rejections[0].error}" if rejections else ""
        print(
            f"offline-prelearner inspect: error: every row was rejected ({d['rejected']}){first}",
            file=sys.stderr,
        )
        return 2
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert_path

    def progress(i: int, n: int, name: str, steps: int) -> None:
        if not args.json:
            sys.stderr.write(f"  converted {i}/{n} files, {steps} input rows read ({name})\n")
            sys.stderr.flush()

    read = ReadConfig(
        format="auto",  # rows, old-stack, Minari and D4RL data are detected
        schema=args.schema,
        legacy_pickle=args.legacy_pickle,
        max_episode_steps=args.max_episode_steps,
    )
    stats = convert_path(
        args.path,
        args.to,
        args.out,
        read,
        on_invalid=args.on_invalid,
        progress=progress,
        fragments=args.fragments,
        dones=args.dones,
        overwrite=args.overwrite,
        resume=args.resume,
        dataset_id=args.dataset_id,
        layout=args.layout,
        env_id=args.env_id,
    )
    print(json.dumps(stats, indent=None if args.json else 2))
    if args.to == "minari" and stats.get("env_spec") is None:
        sys.stderr.write(
            "offline-prelearner: the Minari dataset has no env_spec (the source has none): "
            "recover_environment() cannot make its env; pass --env-id ID to write one\n"
        )
    return 0


def _parse_set(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values parse as JSON where they can (``[1,3]``, ``true``, ``0.99``)."""
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


def _cmd_process(args: argparse.Namespace) -> int:
    from ..config import PreLearnerConfig
    from .pipeline import run_pipeline

    config = PreLearnerConfig.load(args.config) if args.config else PreLearnerConfig()
    updates = _parse_set(args.set or [])
    chosen = "sample_all" in updates or "sample.sample_all" in updates
    if not chosen and not (args.config and "sample_all" in Path(args.config).read_text()):
        # The batch job prepares a dataset: every transition once (see the README's "What
        # sampling means"); `--set sample_all=false` samples from replay as RLlib does.
        updates["sample_all"] = True
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
    st = result.stats
    summary = {
        k: st[k]
        for k in (
            "files_read",
            "files_rejected",
            "format",
            "rows_in",
            "episodes_kept",
            "fragments",
            "pending_fragments",
            "rows_rejected",
            "episodes_duplicate",
            "samples_written",
            "samples_rule",
            "engine",
            "units",
            "units_reused",
            "wall_seconds",
            "rows_per_second",
            "rows_balance",
        )
    }
    summary["out"] = args.out
    print(json.dumps(summary, indent=None if args.json else 2))
    open_eps = st["pending_fragments"]
    if open_eps and config.sample.sample_all:
        print(
            f"offline-prelearner process: note: {open_eps} episode(s) never ended (no terminated "
            "or truncated flag on their last row, and no rows after it): their steps are not "
            "written, as sample_all writes complete episodes (see pending_fragments in "
            "stats.json; mark such last rows truncated to keep them)",
            file=sys.stderr,
        )
    return 0


_PATH_HELP = "a file, a directory (read recursively, name order) or a glob"


def _out_path(text: str) -> str:
    """An output folder (argparse ``type``): Arrow writes only UTF-8 paths, so a name with other
    bytes (which Python holds as surrogates) is an argument error, not a traceback at the end."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{shown(os.fsencode(text))} is not valid UTF-8, and Arrow writes only UTF-8 paths: "
            "choose another name"
        ) from None
    return text


_LEGACY_HELP = (
    "decode RLlib's legacy base64(lz4(pickle)) columns with the restricted unpickler "
    "(numpy arrays and plain builtins only)"
)


def _add_common(p: argparse.ArgumentParser, on_invalid: str | None, on_invalid_help: str) -> None:
    """The options every data-reading subcommand shares: PATH, --legacy-pickle, --on-invalid."""
    p.add_argument("path", help=_PATH_HELP)
    p.add_argument("--legacy-pickle", action="store_true", help=_LEGACY_HELP)
    if on_invalid is not None:
        p.add_argument(
            "--on-invalid",
            choices=["raise", "skip", "quarantine"],
            default=on_invalid,
            help=on_invalid_help,
        )


def _add_layout(p: argparse.ArgumentParser, default: str, why: str) -> None:
    p.add_argument(
        "--layout",
        choices=["auto", "lists", "fast", "rllib"],
        default=default,
        help="array columns (obs, new_obs...): lists = plain Arrow lists, numbers in pandas, "
        "polars, Hugging Face datasets and torch; fast = fixed-size binary cells, written and read "
        "5-6x faster from 4 KiB cells, as arrays by offline-prelearner only; auto = fast for "
        "cells of 1 KiB or more, else lists; rllib = Ray's tensor extension, which RLlib and "
        f"Ray Data's numpy batches read as tensors (default {default}: {why})",
    )


def _add_commit_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a non-empty --out, only once this job has succeeded",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse the work an interrupted or failed run of the same job committed "
        "(checked against the inputs' sizes and mtimes)",
    )


class _OneLineParser(argparse.ArgumentParser):
    """An argument error is one line (``prog: error: ...``, exit 2), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_FORMATS = ["auto", "rows", "episodes", "sample_batches", "minari", "d4rl"]
_FORMAT_HELP = (
    "the input format: rows (one transition per row), episodes (msgpack episode records), "
    "sample_batches (RLlib's old stack), minari, d4rl; auto (default) detects it from the data"
)
_MAX_STEPS_HELP = (
    "D4RL files without `timeouts`: end an episode (truncated) after this many steps, as "
    "D4RL's sequence_dataset does with the env's time limit"
)


#: The ``Examples:`` epilog of each command's ``--help`` (key ``""``: the top level). Every line
#: after the prompt parses with :func:`build_parser` (tests/test_cli.py holds them to that).
_EXAMPLES: dict[str, list[str]] = {
    "": [
        "record CartPole-v1 --steps 5000 --out data/cp --policy heuristic --seed 0",
        "inspect data/cp",
        "process data/cp --out out/cp --set n_step=3",
        "convert old/ --to rows --out new/",
    ],
    "record": [
        "record CartPole-v1 --steps 5000 --out data/cp --policy heuristic --seed 0",
        "record Pendulum-v1 --steps 2000 --out data/pendulum --format episodes",
        "record CartPole-v1 --steps 5000 --out data/cp-split --rows-per-file 500",
    ],
    "process": [
        "process datasets/cartpole-v1/rows --out out/cartpole --set n_step=3",
        "process data/ --out out/ --set 'n_step=[1,3]' --set gamma=0.99",
        "process data/ --out out/ --set buffer.kind=prioritized --set sample_all=false",
        "process hopper-medium-v0.hdf5 --out out/hopper --max-episode-steps 1000",
        "process data/ --out out/ --address ray://head:10001 --prelearner my_pkg.mod:MyPreLearner",
    ],
    "inspect": [
        "inspect data/cp",
        "inspect 'data/*.parquet' --json",
        "inspect data/ --on-invalid quarantine --quarantine-dir q/",
        "inspect transitions.parquet --schema d4rl",
        "inspect hopper-medium-v0.hdf5 --max-episode-steps 1000",
        "inspect cartpole/random-v0",
    ],
    "convert": [
        "convert old/ --to rows --out new/",
        "convert pixels/ --to rows --layout fast --out pixels-fast/",
        "convert hopper-medium-v2.hdf5 --to minari --out datasets/d4rl/hopper-medium-v2",
        "convert datasets/cartpole-v1/rows --to minari --env-id CartPole-v1 --out mr/cp/rows-v0",
        "convert mr/cp/rows-v0 --to episodes --out cp-episodes/",
    ],
}


def _epilog(command: str) -> str | None:
    """``Examples:`` and one command line per example (a ``--help`` pointer at the top level)."""
    examples = [f"  offline-prelearner {line}" for line in _EXAMPLES.get(command, [])]
    if not examples:
        return None
    if not command:
        examples.append("  offline-prelearner COMMAND --help   (a command's options and examples)")
    return "\n".join(["Examples:", *examples])


def _package_version() -> str:
    """The installed distribution's version (what pip installed), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("offline_prelearner")
    except PackageNotFoundError:
        from .._version import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(
        prog="offline-prelearner",
        description="Offline RL data: recorded experience -> episodes -> learner-ready batches.",
        epilog=_epilog(""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {_package_version()}",
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

    r = sub.add_parser("record", help="record a gymnasium env into RLlib-compatible offline data")
    r.add_argument("env", help="gymnasium env id, e.g. CartPole-v1")
    r.add_argument("--steps", type=int, required=True, help="env steps to record")
    r.add_argument("--out", type=_out_path, required=True, help="output directory")
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
    _add_layout(r, "rllib", "a recording is a dataset RLlib may read")
    r.set_defaults(func=_cmd_record)

    pr = sub.add_parser(
        "process",
        help="the batch job: read, build episodes, replay, sample, write learner-ready rows",
    )
    _add_common(
        pr,
        "raise",
        "bad rows/episodes: stop with the reader's message (default), or count them "
        "(skip / quarantine) in stats.json",
    )
    pr.add_argument(
        "--out",
        type=_out_path,
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
    pr.add_argument("--format", choices=_FORMATS, help=_FORMAT_HELP)
    pr.add_argument("--schema", help="schema preset name or JSON file (rows format)")
    pr.add_argument("--max-episode-steps", type=int, default=None, help=_MAX_STEPS_HELP)
    pr.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS or local)")
    _add_commit_flags(pr)
    pr.add_argument(
        "--engine",
        choices=["auto", "local", "ray"],
        default="auto",
        help="where the units of work run: local (in this process), ray (Ray Data tasks, "
        "retried when a worker dies) or auto (local for inputs under 64 MiB without a "
        "cluster address; default)",
    )
    pr.add_argument("--json", action="store_true", help="print the summary on one line")
    _add_layout(pr, "auto", "small arrays open in any tool, frames stay fast")
    pr.set_defaults(func=_cmd_process)

    i = sub.add_parser("inspect", help="what a dataset holds, and a validation report")
    _add_common(
        i,
        "skip",
        "what to do with rows that fail to read or validate (default: skip and count them in "
        "the report)",
    )
    i.add_argument("--format", choices=_FORMATS, default="auto", help=_FORMAT_HELP)
    i.add_argument("--max-episode-steps", type=int, default=None, help=_MAX_STEPS_HELP)
    i.add_argument(
        "--schema",
        default=None,
        help="a preset name from schemas/ (rllib, rllib_compressed, d4rl, minari_transitions, "
        "...) or a schema JSON file (default: RLlib's column names)",
    )
    i.add_argument(
        "--quarantine-dir",
        type=_out_path,
        default=None,
        help="with --on-invalid quarantine: where rejected rows are written",
    )
    i.add_argument(
        "--allow-fragments",
        action="store_true",
        help="keep episodes that never end within the data instead of rejecting them",
    )
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=_cmd_inspect)

    c = sub.add_parser(
        "convert",
        help="convert data: rows, msgpack episodes and Minari to each other; old-stack "
        "batches and D4RL to any of them",
        description="Converts PATH (detected: rows or msgpack episodes Parquet, old-stack\n"
        "SampleBatch JSON/Parquet, a Minari dataset, a D4RL HDF5 file) to --to rows |\n"
        "episodes | minari, committed to --out. rows, episodes and minari convert to each\n"
        "other and back to the same episodes (Minari keeps no infos or agent ids);\n"
        "old-stack and D4RL are input only. The env spec written is --env-id's, else the\n"
        "source's (Minari's metadata, or the one a previous convert wrote).",
    )
    _add_common(
        c,
        "raise",
        "bad records/episodes: stop (default), count them, or count and write them to "
        "OUT/quarantine/",
    )
    c.add_argument(
        "--to",
        choices=["rows", "episodes", "minari"],
        required=True,
        help="rows: RLlib's recorder row layout plus t; episodes: msgpack episode records; "
        "minari: a Minari dataset (OUT/data/main_data.hdf5 + metadata.json)",
    )
    c.add_argument(
        "--env-id",
        default=None,
        metavar="ID",
        help="a gymnasium env id (e.g. CartPole-v1): its registered spec is written with the "
        "data (Minari's env_spec, so recover_environment() works), and its spaces where the "
        "source has none and the data fits them (default: the source's spec, if any)",
    )
    c.add_argument(
        "--dataset-id",
        default=None,
        help="--to minari: the dataset id written (default: OUT's parent/name, so "
        "--out ROOT/ns/name-v0 is minari.load_dataset('ns/name-v0') with "
        "MINARI_DATASETS_PATH=ROOT)",
    )
    c.add_argument("--max-episode-steps", type=int, default=None, help=_MAX_STEPS_HELP)
    c.add_argument(
        "--out",
        type=_out_path,
        required=True,
        help="output directory (rows-*/episodes-*.parquet, stats.json, _manifest.json); "
        "must be absent or empty",
    )
    _add_commit_flags(c)
    c.add_argument(
        "--fragments",
        choices=["keep", "reject"],
        default="keep",
        help="episodes that never end within the data: write them not done (default) or "
        "reject them (counted as not_done)",
    )
    c.add_argument(
        "--dones",
        choices=["auto", "terminated", "truncated"],
        default="auto",
        help="legacy `dones` without `terminateds`: auto = truncated where the info says "
        "TimeLimit.truncated, else terminated",
    )
    c.add_argument(
        "--schema",
        default=None,
        help="column schema of rows / old-stack input (default: rllib / rllib_old_stack)",
    )
    c.add_argument("--json", action="store_true", help="print the stats on one line")
    _add_layout(
        c,
        "rllib",
        "--to rows output is a dataset RLlib may read; rows input in another layout "
        "is rewritten file by file",
    )
    c.set_defaults(func=_cmd_convert)
    for command, parser in sub.choices.items():
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = _epilog(command)
    return p


def _nothing_committed(args: argparse.Namespace) -> str:
    logs = ""
    if "offline_prelearner.jobs.pipeline" in sys.modules:
        d = sys.modules["offline_prelearner.jobs.pipeline"].ray_log_dir()
        logs = f" (Ray's logs: {d})" if d else ""
    out = getattr(args, "out", None)
    if out is None or args.command not in ("process", "convert"):
        return logs
    from .commit import Staging

    staging = Staging(out, {})
    n = staging.committed_units()
    kept = f"; {n} finished unit(s) kept for --resume" if n else ""
    return f"; nothing was committed to {out}{kept}{logs}"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``offline-prelearner``; returns its exit status.

    SIGINT and SIGTERM take one path whatever the job is doing (:mod:`.interrupts`): before the
    commit, one line and exit 130 / 143 with nothing committed; during the commit, the commit
    finishes and the job exits 0; after it, nothing changes the exit status.

    Without ``argv`` this is the program (the console script, ``python -m offline_prelearner``):
    once Ray was involved it ends the process itself after its cleanup (``os._exit``: Ray's
    threads and exit hooks cannot turn a finished job into a crash or a late signal into a
    traceback), keeping its signal handler to the end; an interrupted job leaves its local Ray
    instance to the watchdog (:mod:`.reaper`) instead of a shutdown that waits. With ``argv`` (a
    test, a notebook) it returns, and gives the signal handlers back.
    """
    args = build_parser().parse_args(argv)
    if not args.verbose:
        # Read by Ray Data when it sets up its loggers (on import): INFO lines stay in its files.
        os.environ.setdefault("RAY_DATA_LOG_LEVEL", "ERROR")
    from ..replay.memory import for_worker_process
    from . import pipeline

    for_worker_process()  # the CLI's process runs our jobs: see replay/memory.py
    pipeline.VERBOSE = args.verbose
    program = argv is None
    previous = interrupts.install(
        on_stuck=(lambda n: _exit(_report_interrupt(args, n))) if program else None
    )
    code = 1
    try:
        code = _run(args)
    finally:
        interrupts.closing(code)  # from here a signal is recorded, never raised
        if not (program and _interrupted() and pipeline.ray_watched()):
            _shutdown()
        if not program:
            interrupts.restore(previous)
    if program and "ray" in sys.modules:
        _exit(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """The subcommand, and the one line for whatever stopped it; returns the exit status."""
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return _report_interrupt(args)
    except (OfflinePrelearnerError, FileNotFoundError) as e:
        if _interrupted():  # the error is the interrupt's doing (a Ray process it stopped)
            return _report_interrupt(args)
        print(
            f"offline-prelearner {args.command}: error: {cut(str(e))}{_hint(args, e)}"
            f"{_nothing_committed(args)}",
            file=sys.stderr,
        )
        return 2
    except OSError as e:
        if _interrupted():
            return _report_interrupt(args)
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
        if _interrupted():
            return _report_interrupt(args)
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


def _interrupted() -> bool:
    """A signal arrived and the job had not committed: it ends as the interrupt it is."""
    return interrupts.received() is not None and not interrupts.committed()


def _report_interrupt(args: argparse.Namespace, signum: int | None = None) -> int:
    """Writes the interrupt's one line (once: the watch of :mod:`.interrupts` may be writing it
    for a main thread stuck in native code); returns the exit status, 128 + the signal."""
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


def _exit(code: int) -> NoReturn:
    """Ends the process now: flushed output, no interpreter teardown (see :func:`main`)."""
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


def _shutdown() -> None:
    """Stops the Ray instance the job started (no worker of ours outlives the command)."""
    if "offline_prelearner.jobs.pipeline" in sys.modules:
        sys.modules["offline_prelearner.jobs.pipeline"].shutdown_ray()


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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
