"""Decoded camera frames per second: our lerobot reader vs LeRobot's own ``LeRobotDataset``.

A first cut of issue 34's first target. One dataset written by LeRobot 0.4.4 itself (one 96x96
camera, AV1, ``--episodes`` episodes of ``--length`` frames) under ``.bench/lerobot-bench/``;
then, in interleaved rounds, the same frames decoded by

* ``ours``: every data file through ``io.sources.read_table`` (the lerobot format: each episode
  decoded sequentially with PyAV, one seek) and the reader -> episodes (frames in the episodes);
* ``lerobot``: ``LeRobotDataset(..., video_backend="pyav")`` iterated in index order through a
  torch ``DataLoader(batch_size=1, num_workers=0)`` (one process, as ours here), every item.

One JSON line per round and side, then the medians. Run from the repository root with the main
venv (it calls the LeRobot venv's python for the LeRobot side and to write the dataset)::

    bash benchmarks/setup_lerobot.sh
    .venv/bin/python benchmarks/bench_lerobot.py --episodes 20 --length 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LEROBOT_PY = Path(
    os.environ.get("LEROBOT_PYTHON", REPO / ".bench/lerobot-venv/bin/python")
)  # fmt: skip

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
import sys, time, json, torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("bench/cam96", root=sys.argv[1], video_backend="pyav")
loader = torch.utils.data.DataLoader(ds, batch_size=1, num_workers=0, shuffle=False)
t0 = time.perf_counter(); n = 0
for item in loader:
    n += item["observation.images.cam"].shape[0]
print(json.dumps({"frames": n, "seconds": time.perf_counter() - t0}))
"""


def ours(root: Path) -> dict[str, float]:
    sys.path.insert(0, str(REPO))
    from offline_prelearner.config import ReadConfig
    from offline_prelearner.io.readers import make_reader
    from offline_prelearner.io.sources import expand_paths, read_table

    t0 = time.perf_counter()
    reader = make_reader(ReadConfig(format="lerobot"))
    n = 0
    for f in expand_paths(str(root)):
        table = read_table(f)
        n += table.num_rows
        reader.read(table, source=f)
    return {"frames": n, "seconds": time.perf_counter() - t0}


def lerobot(root: Path) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [str(LEROBOT_PY), "-c", _LEROBOT, str(root)],
        capture_output=True, text=True, check=True, env=env, cwd="/",
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    root = REPO / f".bench/lerobot-bench/cam96-{args.episodes}x{args.length}"
    if not (root / "meta/info.json").is_file():
        subprocess.run(
            [str(LEROBOT_PY), "-c", _MAKE, str(root), str(args.episodes), str(args.length)],
            check=True, capture_output=True, cwd="/", env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
    rates: dict[str, list[float]] = {"ours": [], "lerobot": []}
    for r in range(args.rounds):
        for side, run in (("ours", ours), ("lerobot", lerobot)):
            got = run(root)
            rate = got["frames"] / got["seconds"]
            rates[side].append(rate)
            line = {"bench": "lerobot_decode", "round": r, "side": side, **got}
            print(json.dumps({**line, "frames_per_s": round(rate, 1)}), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    summary = {"bench": "lerobot_decode", "episodes": args.episodes, "length": args.length}
    summary.update({f"median_frames_per_s_{k}": round(v, 1) for k, v in med.items()})
    summary["speedup"] = round(med["ours"] / med["lerobot"], 2)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
