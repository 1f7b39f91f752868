"""``offline-prelearner convert``: rows, episodes, Minari to each other; old-stack and D4RL in."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config import ReadConfig
from ..io.formats.lerobot.writer import VIDEO_CODECS
from .options import MAX_STEPS_HELP, add_commit_flags, add_common, add_layout, out_path
from .summaries import convert_lines

__all__ = ["add_convert", "convert"]


def add_convert(sub: Any) -> None:
    """The ``convert`` parser, added to ``sub`` (the top parser's sub-commands).

    Args:
        sub: The top parser's sub-parsers (what ``add_subparsers`` returned).
    """
    c = sub.add_parser(
        "convert",
        help="convert data: rows, msgpack episodes and Minari to each other; old-stack "
        "batches, D4RL and LeRobot to any of them; any of them to LeRobot",
        description="Converts PATH (detected: rows or msgpack episodes Parquet, old-stack\n"
        "SampleBatch JSON/Parquet, a Minari dataset, a D4RL HDF5 file, a LeRobot dataset)\n"
        "to --to rows | episodes | minari | lerobot, committed to --out. rows, episodes and\n"
        "minari convert to each other and back to the same episodes (Minari keeps no infos\n"
        "or agent ids), and so does lerobot with --video-codec lossless (ids renumbered; a\n"
        "terminated episode keeps no terminal observation); old-stack and D4RL are input\n"
        "only. The env spec written is --env-id's, else the\n"
        "source's (Minari's metadata, or the one a previous convert wrote).",
    )
    add_common(
        c,
        "raise",
        "bad records/episodes: stop (default), count them, or count and write them to "
        "OUT/quarantine/",
    )
    c.add_argument(
        "--to",
        choices=["rows", "episodes", "minari", "lerobot"],
        required=True,
        help="rows: RLlib's recorder row layout plus t; episodes: msgpack episode records; "
        "minari: a Minari dataset (OUT/data/main_data.hdf5 + metadata.json); lerobot: a "
        "LeRobot v3.0 dataset rooted at OUT (meta/, data/, videos/: image observations as "
        "video), which LeRobotDataset(repo_id, root=OUT) opens",
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
    c.add_argument(
        "--fps",
        type=int,
        default=None,
        help="--to lerobot: the dataset's frames per second (a frame's timestamp is its index "
        "over fps; default: a LeRobot source's, else 30)",
    )
    c.add_argument(
        "--video-codec",
        choices=list(VIDEO_CODECS),
        default="av1",
        help="--to lerobot: how image observations are encoded: av1 = LeRobot's default "
        "(libsvtav1, lossy), h264 (libx264, lossy), lossless = H.264 RGB at qp 0 (frames read "
        "back bit for bit, larger files)",
    )
    c.add_argument("--max-episode-steps", type=int, default=None, help=MAX_STEPS_HELP)
    c.add_argument(
        "--out",
        type=out_path,
        required=True,
        help="output directory (rows/ or episodes/ with the data files, or the Minari or LeRobot "
        "dataset's own layout; stats.json, _manifest.json); must be absent or empty",
    )
    add_commit_flags(c)
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
    c.add_argument(
        "--json",
        action="store_true",
        help="print the whole stats as one JSON line (default: a few lines for a person)",
    )
    add_layout(
        c,
        "rllib",
        "--to rows output is a dataset RLlib may read; rows input in another layout "
        "is rewritten file by file",
    )
    c.set_defaults(func=convert)


def convert(args: argparse.Namespace) -> int:
    """Converts ``args.path`` to ``args.to`` into ``args.out``; prints the stats.

    Args:
        args: The parsed ``convert`` arguments: the input, ``--to``, ``--out``, the reading
            options, the commit flags (``--overwrite``, ``--resume``) and ``--json`` (the whole
            stats as one JSON line; else a few lines).

    Returns:
        0 (a failure raises, and the CLI turns it into its one line and exit code).
    """
    from ..jobs.convert.config import ConvertConfig
    from ..jobs.convert.path import convert

    def progress(i: int, n: int, name: str, steps: int) -> None:
        if not args.json:
            sys.stderr.write(f"  converted {i}/{n} files, {steps} input rows read ({name})\n")
            sys.stderr.flush()

    read = ReadConfig(
        format="auto",  # rows, old-stack, Minari and D4RL data are detected
        schema=args.schema,
        legacy_pickle=args.legacy_pickle,
        max_episode_steps=args.max_episode_steps,
        on_invalid=args.on_invalid,
    )
    config = ConvertConfig(
        args.to,
        read,
        fragments=args.fragments,
        dones=args.dones,
        layout=args.layout,
        env_id=args.env_id,
        dataset_id=args.dataset_id,
        fps=args.fps,
        video_codec=args.video_codec,
    )
    stats = convert(
        args.path, args.out, config, progress, overwrite=args.overwrite, resume=args.resume
    )
    print(json.dumps(stats) if args.json else "\n".join(convert_lines(stats, args.out)))
    if args.to == "minari" and stats.get("env_spec") is None:
        sys.stderr.write(
            "offline-prelearner: the Minari dataset has no env_spec (the source has none): "
            "recover_environment() cannot make its env; pass --env-id ID to write one\n"
        )
    return 0
