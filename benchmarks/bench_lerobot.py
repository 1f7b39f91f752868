"""Decoded camera frames per second: our lerobot reader vs LeRobot's own ``LeRobotDataset``.

Issue 34's first target: a batch job over a LeRobot dataset with one 96x96 camera decodes >= 10x
the frames a second of iterating LeRobot's own ``LeRobotDataset`` through a torch ``DataLoader``,
the same frames, the same number of worker processes, the same machine. One dataset written by
LeRobot 0.4.4 itself (one 96x96 camera, AV1, LeRobot's default codec; ``--episodes`` episodes of
``--length`` frames) under ``.bench/lerobot-bench/``; then, in interleaved rounds (the order
alternating), the same frames decoded by

* ``ours``: the dataset's data files in pieces of whole episodes, as the batch job cuts them
  (``split_lerobot_file``), each read with ``read_lerobot_episodes`` (each episode decoded in
  order with PyAV, one seek) and turned into episodes by the reader; with ``--workers N`` (N >
  0) the pieces go to N worker processes (a ``ProcessPoolExecutor``, pieces small enough that
  there are 4 a worker), which return the frames;
* ``lerobot``: ``LeRobotDataset(..., video_backend="pyav")`` iterated in index order through a
  torch ``DataLoader(batch_size=1, num_workers=N)``, every item (N = 0: in the main process, as
  ``ours`` with N = 0).

Only the reading is timed (``ours``: the pieces read and their episodes built; ``lerobot``: each
``next()`` of the loader). Outside the clock every frame of both is hashed (blake2b of its uint8
HWC pixels; LeRobot's float ``[0, 1]`` CHW turned back with ``round(x * 255)``) and the two are
compared frame by frame, keyed by (episode, frame index): ``frames_equal`` in each line. One JSON
line per round and side (with the 1-minute load average when it started), then the medians.
Run from the repository root with the main venv (it calls the LeRobot venv's python for the
LeRobot side and to write the dataset)::

    bash benchmarks/setup_lerobot.sh
    .venv/bin/python benchmarks/bench_lerobot.py --episodes 20 --length 100 --rounds 3 --workers 0

``$LEROBOT_PYTHON`` names another LeRobot venv's python.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
LEROBOT_PY = Path(os.environ.get("LEROBOT_PYTHON", REPO / ".bench/lerobot-venv/bin/python"))
CAM = "observation.images.cam"

_MAKE = r"""
import sys, numpy as np
from pathlib import Path
from lerobot.datasets.lerobot_dataset import LeRobotDataset
root, episodes, length = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
feats = {"observation.state": {"dtype": "float32", "shape": (4,), "names": None},
         "action": {"dtype": "float32", "shape": (2,), "names": None},
         "observation.images.cam": {"dtype": "video", "shape": (96, 96, 3),
                                    "names": ["height", "width", "channels"]}}
ds = LeRobotDataset.create("bench/cam96", fps=30, features=feats, root=root, use_videos=True)
rng = np.random.default_rng(0)
y, x = np.mgrid[0:96, 0:96]
for e in range(episodes):
    for t in range(length):
        img = np.stack([(x + 3 * t + e) % 256, (y + 5 * t) % 256, (x + y + e) % 256], -1)
        ds.add_frame({"observation.state": rng.normal(size=4).astype(np.float32),
                      "action": rng.normal(size=2).astype(np.float32),
                      "observation.images.cam": img.astype(np.uint8), "task": "t"})
    ds.save_episode()
ds.finalize()
"""

_LEROBOT = r"""
import sys, time, json, hashlib, torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("bench/cam96", root=sys.argv[1], video_backend="pyav")
workers = int(sys.argv[2])
loader = torch.utils.data.DataLoader(ds, batch_size=1, num_workers=workers, shuffle=False)
items, seconds = [], 0.0
it = iter(loader)
while True:
    t0 = time.perf_counter()
    try:
        item = next(it)
    except StopIteration:
        seconds += time.perf_counter() - t0
        break
    seconds += time.perf_counter() - t0
    img = item["observation.images.cam"][0]
    u8 = (img * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
    key = f"{int(item['episode_index'][0])}:{int(item['frame_index'][0])}"
    items.append((key, hashlib.blake2b(u8.tobytes(), digest_size=8).hexdigest()))
print(json.dumps({"frames": len(items), "seconds": seconds, "digests": dict(items)}))
"""


def _digests(eid: np.ndarray, fidx: np.ndarray, frames: np.ndarray) -> dict[str, str]:
    return {
        f"{int(e)}:{int(f)}": hashlib.blake2b(img.tobytes(), digest_size=8).hexdigest()
        for e, f, img in zip(eid, fidx, frames, strict=True)
    }


def _read_piece(path: str, keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One piece read as the batch job reads it (step table, then episodes); its frames."""
    sys.path.insert(0, str(REPO))
    from offline_prelearner.config import DEFAULT_LIMITS, ReadConfig
    from offline_prelearner.io.formats.composite import struct_leaves
    from offline_prelearner.io.formats.lerobot.dataset import read_lerobot_episodes
    from offline_prelearner.io.readers import make_reader

    table, _ = read_lerobot_episodes(path, DEFAULT_LIMITS, keys)
    make_reader(ReadConfig(format="lerobot")).read(table, source=path)
    frames = struct_leaves(table.column("obs"), "obs")["images.cam"]
    return (
        table.column("episode_index").to_numpy(),
        table.column("frame_index").to_numpy(),
        frames,
    )


def ours(root: Path, workers: int) -> dict[str, Any]:
    """Our side, timed (see the module docstring).

    Args:
        root: The dataset.
        workers: Worker processes; 0: this process.

    Returns:
        ``frames``, ``seconds`` and the frames' ``digests``.
    """
    sys.path.insert(0, str(REPO))
    for name in ("io.formats.composite", "io.readers"):  # imported before the clock
        importlib.import_module(f"offline_prelearner.{name}")
    from offline_prelearner.config import DEFAULT_LIMITS
    from offline_prelearner.io.formats.lerobot.dataset import load_meta, split_lerobot_file
    from offline_prelearner.io.sources import expand_paths

    files = expand_paths(str(root))
    meta = load_meta(root)
    piece_bytes = None
    if workers:  # about 4 pieces a worker (the job's default piece holds this whole dataset)
        total = int(meta.info["total_frames"]) * 96 * 96 * 3
        piece_bytes = max(1, math.ceil(total / (4 * workers)))
    pieces = [(f, p) for f in files for p in split_lerobot_file(f, DEFAULT_LIMITS, piece_bytes)]
    got: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    t0 = time.perf_counter()
    if workers:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            got = list(pool.map(_read_piece, *zip(*pieces, strict=True)))
    else:
        got = [_read_piece(f, p) for f, p in pieces]
    seconds = time.perf_counter() - t0
    digests: dict[str, str] = {}
    for eid, fidx, frames in got:
        digests.update(_digests(eid, fidx, frames))
    return {"frames": sum(len(g[0]) for g in got), "seconds": seconds, "digests": digests}


def lerobot(root: Path, workers: int) -> dict[str, Any]:
    """LeRobot's side, in its venv (see the module docstring).

    Args:
        root: The dataset.
        workers: The ``DataLoader``'s ``num_workers``.

    Returns:
        ``frames``, ``seconds`` and the frames' ``digests``.
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [str(LEROBOT_PY), "-c", _LEROBOT, str(root), str(workers)],
        capture_output=True, text=True, check=True, env=env, cwd="/",
    )  # fmt: skip
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0, help="worker processes, both sides")
    args = ap.parse_args()
    root = REPO / f".bench/lerobot-bench/cam96-{args.episodes}x{args.length}"
    if not (root / "meta/info.json").is_file():
        subprocess.run(
            [str(LEROBOT_PY), "-c", _MAKE, str(root), str(args.episodes), str(args.length)],
            check=True, capture_output=True, cwd="/", env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
    rates: dict[str, list[float]] = {"ours": [], "lerobot": []}
    loads: list[float] = []
    all_equal = True
    sides = (("ours", ours), ("lerobot", lerobot))
    for r in range(args.rounds):
        got: dict[str, dict[str, Any]] = {}
        for side, run in sides if r % 2 == 0 else sides[::-1]:
            load = os.getloadavg()[0]
            loads.append(load)
            got[side] = run(root, args.workers)
            rate = got[side]["frames"] / got[side]["seconds"]
            rates[side].append(rate)
            line = {"bench": "lerobot_decode", "round": r, "side": side,
                    "workers": args.workers, "frames": got[side]["frames"],
                    "seconds": round(got[side]["seconds"], 3),
                    "frames_per_s": round(rate, 1), "load1": round(load, 2)}  # fmt: skip
            print(json.dumps(line), flush=True)
        a, b = got["ours"]["digests"], got["lerobot"]["digests"]
        same = sum(a.get(k) == v for k, v in b.items())
        equal = a.keys() == b.keys() and same == len(b)
        all_equal &= equal
        print(json.dumps({"bench": "lerobot_decode", "round": r, "frames_equal": equal,
                          "frames_compared": len(b), "frames_differing": len(b) - same}),
              flush=True)  # fmt: skip
    med = {k: statistics.median(v) for k, v in rates.items()}
    summary: dict[str, Any] = {
        "bench": "lerobot_decode",
        "episodes": args.episodes,
        "length": args.length,
        "camera": "96x96 av1",
        "workers": args.workers,
        "rounds": args.rounds,
    }
    summary.update({f"median_frames_per_s_{k}": round(v, 1) for k, v in med.items()})
    summary["speedup"] = round(med["ours"] / med["lerobot"], 2)
    summary["frames_equal"] = all_equal
    summary["load1_median"] = round(statistics.median(loads), 2)
    print(json.dumps(summary), flush=True)
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
