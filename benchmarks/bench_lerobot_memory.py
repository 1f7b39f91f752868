"""Peak memory of the batch job over a LeRobot v3.0 dataset, 100 vs 1,000 episodes (issue 34).

A v3.0 dataset packs its episodes into one data file and one video a camera; the batch job reads
it in pieces of whole episodes (``split_lerobot_file``: at most ``PIECE_BYTES`` of decoded frames
a piece, a unit each), so its peak memory should not grow with the number of episodes. This
writes synthetic datasets in LeRobot's v3.0 layout (``meta/info.json``, ``meta/episodes``,
``meta/tasks.parquet``, one data file, one H.264 video: one 96x96 camera, PyAV's libx264 with
LeRobot's ``g=2``, ``crf=30``) under ``.bench/lerobot-memory/``, then runs
``offline-prelearner process <root> --engine local`` on each in a fresh process and reads that
process's peak RSS (``ru_maxrss`` of the waited-for child). ``--before PATH`` runs the same job
from another checkout too (``/path/to/base``: the whole data file decoded at once), in the same
rounds. One JSON line per run, then one per (tree, episodes) with the medians::

    python benchmarks/bench_lerobot_memory.py --episodes 100 1000 --length 50 --rounds 2

Units run in the job's own process under ``--engine local`` (what ``ru_maxrss`` sees); under Ray
each unit runs in a worker, the same code on the same pieces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
CAM = "observation.images.cam"
SIDE = 96
FPS = 30


def write_dataset(root: Path, episodes: int, length: int) -> None:
    """A LeRobot v3.0 dataset: ``episodes`` episodes of ``length`` frames, one 96x96 camera
    (H.264), a 4-float state and a 2-float action, all in one data file and one video.

    Args:
        root: The dataset's folder (replaced).
        episodes: How many episodes.
        length: Frames an episode.
    """
    import av

    shutil.rmtree(root, ignore_errors=True)
    for d in ("meta/episodes/chunk-000", "data/chunk-000", f"videos/{CAM}/chunk-000"):
        (root / d).mkdir(parents=True)
    n = episodes * length
    eid = np.repeat(np.arange(episodes, dtype=np.int64), length)
    fidx = np.tile(np.arange(length, dtype=np.int64), episodes)
    rng = np.random.default_rng(0)
    state = rng.normal(size=(n, 4)).astype(np.float32)
    action = rng.normal(size=(n, 2)).astype(np.float32)
    data = pa.table(
        {
            "observation.state": pa.FixedSizeListArray.from_arrays(state.ravel(), 4),
            "action": pa.FixedSizeListArray.from_arrays(action.ravel(), 2),
            "timestamp": (fidx / FPS).astype(np.float32),
            "frame_index": fidx,
            "episode_index": eid,
            "index": np.arange(n, dtype=np.int64),
            "task_index": np.zeros(n, np.int64),
        }
    )
    pq.write_table(data, root / "data/chunk-000/file-000.parquet")
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    with av.open(str(root / f"videos/{CAM}/chunk-000/file-000.mp4"), "w") as out:
        stream = out.add_stream("libx264", rate=FPS, options={"g": "2", "crf": "30"})
        stream.width = stream.height = SIDE
        stream.pix_fmt = "yuv420p"
        for k in range(n):
            e, t = int(eid[k]), int(fidx[k])
            img = np.stack([(x + 3 * t + e) % 256, (y + 5 * t) % 256, (x + y + 7 * e) % 256], -1)
            frame = av.VideoFrame.from_ndarray(img.astype(np.uint8), format="rgb24")
            frame.pts = k
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    start = np.arange(episodes, dtype=np.int64) * length
    pq.write_table(
        pa.table(
            {
                "episode_index": np.arange(episodes, dtype=np.int64),
                "tasks": pa.array([["move"]] * episodes, pa.list_(pa.string())),
                "length": np.full(episodes, length, np.int64),
                "data/chunk_index": np.zeros(episodes, np.int64),
                "data/file_index": np.zeros(episodes, np.int64),
                "dataset_from_index": start,
                "dataset_to_index": start + length,
                f"videos/{CAM}/chunk_index": np.zeros(episodes, np.int64),
                f"videos/{CAM}/file_index": np.zeros(episodes, np.int64),
                f"videos/{CAM}/from_timestamp": start / FPS,
                f"videos/{CAM}/to_timestamp": (start + length) / FPS,
            }
        ),
        root / "meta/episodes/chunk-000/file-000.parquet",
    )
    pq.write_table(
        pa.table({"task_index": np.zeros(1, np.int64), "task": ["move"]}),
        root / "meta/tasks.parquet",
    )
    feats = {
        "observation.state": {"dtype": "float32", "shape": [4], "names": None},
        "action": {"dtype": "float32", "shape": [2], "names": None},
        CAM: {
            "dtype": "video",
            "shape": [SIDE, SIDE, 3],
            "names": ["height", "width", "channels"],
            "info": {"video.fps": FPS, "video.codec": "h264", "video.pix_fmt": "yuv420p"},
        },
        **{k: {"dtype": "int64", "shape": [1], "names": None} for k in ("frame_index",)},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    info = {
        "codebase_version": "v3.0",
        "robot_type": "synthetic",
        "total_episodes": episodes,
        "total_frames": n,
        "total_tasks": 1,
        "chunks_size": 1000,
        "fps": FPS,
        "splits": {"train": f"0:{episodes}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": feats,
    }
    (root / "meta/info.json").write_text(json.dumps(info, indent=2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--length", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", type=Path, default=None, help="another checkout to compare")
    args = ap.parse_args()
    (REPO / ".bench").mkdir(exist_ok=True)
    roots = {}
    for e in args.episodes:
        root = REPO / f".bench/lerobot-memory/cam96-h264-{e}x{args.length}"
        if not (root / "meta/info.json").is_file():
            t0 = time.perf_counter()
            write_dataset(root, e, args.length)
            took = round(time.perf_counter() - t0, 1)
            print(json.dumps({"wrote": str(root.relative_to(REPO)), "seconds": took}), flush=True)
        roots[e] = root
    trees = {"this": REPO, **({"before": args.before.resolve()} if args.before else {})}
    got: dict[tuple[str, int], list[float]] = {}
    for r in range(args.rounds):
        for e, root in roots.items():
            for name, tree in trees.items():
                load = os.getloadavg()[0]
                res = measure(tree, root)
                got.setdefault((name, e), []).append(res["peak_rss_mib"])
                line = {"bench": "lerobot_memory", "round": r, "tree": name, "episodes": e}
                print(json.dumps({**line, "frames": e * args.length, **res,
                                  "load1": round(load, 2)}), flush=True)  # fmt: skip
    for (name, e), v in got.items():
        print(json.dumps({"bench": "lerobot_memory", "tree": name, "episodes": e,
                          "frames": e * args.length,
                          "median_peak_rss_mib": round(statistics.median(v), 1),
                          "runs": len(v)}), flush=True)  # fmt: skip
    return 0


def measure(tree: Path, root: Path) -> dict[str, float]:
    """Runs the batch job from ``tree`` over ``root`` in a fresh process; its peak RSS is the
    child's ``ru_maxrss``, read through ``wait4``.

    Args:
        tree: The checkout whose package runs.
        root: The dataset.

    Returns:
        ``peak_rss_mib``, ``wall_s``, ``units`` and ``samples``.
    """
    with tempfile.TemporaryDirectory(dir=REPO / ".bench") as tmp:
        argv = [sys.executable, "-m", "offline_prelearner", "process", str(root)]
        argv += ["--out", f"{tmp}/out", "--engine", "local", "--json"]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        t0 = time.perf_counter()
        with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
            proc = subprocess.Popen(argv, stdout=so, stderr=se, env=env, cwd=tmp)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - t0
            so.seek(0)
            se.seek(0)
            out, err = so.read().decode(), se.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"process failed ({proc.returncode}): {err[-2000:]}")
    stats = json.loads(out.strip().splitlines()[-1])
    return {
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "wall_s": round(wall, 2),
        "units": stats.get("units"),
        "samples": stats.get("samples_written"),
    }


if __name__ == "__main__":
    sys.exit(main())
