"""What the sub-commands' parsers share: PATH and the options every reader takes, the layout and
commit flags, one-line argument errors, and each command's ``Examples:``."""

from __future__ import annotations

import argparse
import os
from typing import NoReturn

from ..config import LAYOUTS, ON_INVALID
from ..errors import shown
from ..io.readers import available_formats

__all__ = [
    "FORMAT_HELP",
    "MAX_STEPS_HELP",
    "OneLineParser",
    "add_commit_flags",
    "add_common",
    "add_layout",
    "epilog",
    "format_choices",
    "out_path",
    "package_version",
]

PATH_HELP = "a file, a directory (read recursively, name order) or a glob"


def out_path(text: str) -> str:
    """An output folder (argparse ``type``): Arrow writes only UTF-8 paths, so a name with other
    bytes (which Python holds as surrogates) is an argument error, not a traceback at the end.

    Args:
        text: The folder as given.

    Returns:
        ``text``.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not valid UTF-8.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{shown(os.fsencode(text))} is not valid UTF-8, and Arrow writes only UTF-8 paths: "
            "choose another name"
        ) from None
    return text


LEGACY_HELP = (
    "decode RLlib's legacy base64(lz4(pickle)) columns with the restricted unpickler "
    "(numpy arrays and plain builtins only)"
)


def add_common(p: argparse.ArgumentParser, on_invalid: str | None, on_invalid_help: str) -> None:
    """The options every data-reading subcommand shares: PATH, --legacy-pickle, --on-invalid.

    Args:
        p: The sub-command's parser.
        on_invalid: ``--on-invalid``'s default; None: no ``--on-invalid``.
        on_invalid_help: ``--on-invalid``'s help.
    """
    p.add_argument("path", help=PATH_HELP)
    p.add_argument("--legacy-pickle", action="store_true", help=LEGACY_HELP)
    if on_invalid is not None:
        p.add_argument(
            "--on-invalid",
            choices=ON_INVALID,
            default=on_invalid,
            help=on_invalid_help,
        )


def add_layout(p: argparse.ArgumentParser, default: str, why: str) -> None:
    """Adds ``--layout`` (the layout of array columns written) to ``p``.

    Args:
        p: The sub-command's parser.
        default: The layout when ``--layout`` is not given.
        why: The reason for that default, for the help.
    """
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=default,
        help="array columns (obs, new_obs...): lists = plain Arrow lists, numbers in pandas, "
        "polars, Hugging Face datasets and torch; fast = fixed-size binary cells, written and read "
        "5-6x faster from 4 KiB cells, as arrays by offline-prelearner only; auto = fast for "
        "cells of 1 KiB or more, else lists; rllib = Ray's tensor extension, which RLlib and "
        f"Ray Data's numpy batches read as tensors (default {default}: {why})",
    )


def add_commit_flags(p: argparse.ArgumentParser) -> None:
    """Adds ``--overwrite`` and ``--resume`` (how a job treats a non-empty ``--out``).

    Args:
        p: The sub-command's parser.
    """
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


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line (``prog: error: ...``, exit 2), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        """Exits with status 2 after one line naming the error and pointing at ``--help``.

        Args:
            message: argparse's message.
        """
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def format_choices() -> list[str]:
    """``--format``'s choices: ``auto`` and every format registered with
    :func:`~offline_prelearner.io.readers.register_reader` when the parser is built (the built-in
    readers and any a user's code registered before calling :func:`~.app.main`).

    Returns:
        The format names.
    """
    return ["auto", *available_formats()]


FORMAT_HELP = (
    "the input format: rows (one transition per row), episodes (msgpack episode records), "
    "sample_batches (RLlib's old stack), minari, d4rl, lerobot (a LeRobot dataset's root), or any "
    "registered with register_reader; "
    "auto (default) detects it from the data"
)
MAX_STEPS_HELP = (
    "D4RL files without `timeouts`: end an episode (truncated) after this many steps, as "
    "D4RL's sequence_dataset does with the env's time limit"
)


#: The ``Examples:`` epilog of each command's ``--help`` (key ``""``: the top level). Every line
#: after the prompt parses with :func:`build_parser` (tests/cli/test_cli.py holds them to that).
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
        "process data/ --out out/ --set buffer.kind=prioritized --set buffer.prioritized.alpha=0.7",
        "process data/ --out out/ --config c.yaml --set sample_all=false",
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
    "report": [
        "report data/cp --out cp.html",
        "report hopper-medium-v0.hdf5 --max-episode-steps 1000 --out hopper.html --png figs/",
        "report data/ --on-invalid quarantine --quarantine-dir q/ --out data.html",
    ],
    "convert": [
        "convert old/ --to rows --out new/",
        "convert pixels/ --to rows --layout fast --out pixels-fast/",
        "convert hopper-medium-v2.hdf5 --to minari --out datasets/d4rl/hopper-medium-v2",
        "convert datasets/cartpole-v1/rows --to minari --env-id CartPole-v1 --out mr/cp/rows-v0",
        "convert mr/cp/rows-v0 --to episodes --out cp-episodes/",
    ],
    "index": [
        "index data/cp",
        "index s3://bucket/recordings --json",
    ],
}


def epilog(command: str) -> str | None:
    """``Examples:`` and one command line per example (a ``--help`` pointer at the top level).

    Args:
        command: The sub-command (``""``: the top level).

    Returns:
        The epilog, or None for a command without examples.
    """
    examples = [f"  offline-prelearner {line}" for line in _EXAMPLES.get(command, [])]
    if not examples:
        return None
    if not command:
        examples.append("  offline-prelearner COMMAND --help   (a command's options and examples)")
    return "\n".join(["Examples:", *examples])


def package_version() -> str:
    """The installed distribution's version (what pip installed), else the source tree's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("offline_prelearner")
    except PackageNotFoundError:
        from .._version import __version__

        return __version__
