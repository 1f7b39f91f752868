"""Random n-step samples with 4-frame stacks from video: ours vs LeRobot's own random access.

Issue 34's second target. One dataset written by LeRobot 0.4.4 itself (``LeRobotDataset.create``
with its defaults: one 96x96 camera, AV1, a keyframe every 2 frames (``--gop N``: every N, its
encoder's ``g``), 30 fps; ``--episodes`` episodes of ``--length`` frames) under
``.bench/lerobot-bench/`` (git-ignored); then, in
interleaved rounds (A B C, C B A, ...), each side in a fresh process, the same samples:

* ``ours``: an ``EpisodeReplayBuffer`` holding the episodes with frame references in the camera
  leaf (``reference_episodes``), unit ``FrameStack(4, NStep(3))``, uniform sampler seeded by the
  round; each batch of ``--batch`` samples is drawn and its references decoded by the
  ``DecodeVideoFrames`` connector (default cache, 256 MiB). A sample holds the 4-frame stacks of
  ``obs`` *and* ``new_obs`` (7 distinct frames), the states, the n-step return...
* ``ours_small_cache``: the same with a 16 MiB cache (about 600 frames: most GOPs decoded again).
* ``lerobot``: ``LeRobotDataset(..., video_backend="pyav", delta_timestamps={camera: [-3/fps,
  -2/fps, -1/fps, 0]})``, ``ds[i]`` for the same samples' start frames, one at a time (LeRobot's
  random access: one seek and decode per item; the 4 frames of ``obs`` only).

Timed: drawing and decoding (ours), ``__getitem__`` (LeRobot); not timed: opening the dataset,
filling the buffer (``setup_s``), hashing. Every side hashes each sample's 4-frame ``obs`` stack
(uint8 HWC; LeRobot's float CHW turned back by ``round(x * 255)``), and the run fails unless all
sides' hashes agree sample for sample: the same frames. JSON lines (``_common``): a header, one
line per round and side, the medians over rounds and the ratios (samples per second).

Run from the repository root with the main venv (it runs the LeRobot venv's python for the
dataset and the LeRobot side)::

    bash benchmarks/setup_lerobot.sh
    .venv/bin/python benchmarks/bench_lerobot_random.py --episodes 50 --length 200 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, alternate, emit, header, log, summarize_rounds

LEROBOT_PY = Path(os.environ.get("LEROBOT_PYTHON", REPO / ".bench/lerobot-venv/bin/python"))
CAMERA = "observation.images.cam"
FPS = 30
BENCH = "lerobot_random_nstep_stack4"
SMALL_CACHE = 16 << 20

_MAKE = r"""
import sys, numpy as np
from pathlib import Path
from lerobot.datasets.lerobot_dataset import LeRobotDataset
root = Path(sys.argv[1])
episodes, length, fps, gop = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if gop:  # a keyframe every `gop` frames instead of LeRobot's default (2)
    import functools
    import lerobot.datasets.lerobot_dataset as lrd
    lrd.encode_video_frames = functools.partial(lrd.encode_video_frames, g=gop)
feats = {"observation.state": {"dtype": "float32", "shape": (4,), "names": None},
         "action": {"dtype": "float32", "shape": (2,), "names": None},
         "observation.images.cam": {"dtype": "video", "shape": (96, 96, 3),
                                    "names": ["height", "width", "channels"]}}
ds = LeRobotDataset.create("bench/random96", fps=fps, features=feats, root=root, use_videos=True)
rng = np.random.default_rng(0)
y, x = np.mgrid[0:96, 0:96]
for e in range(episodes):
    for t in range(length):
        img = np.stack([(x + 3 * t + e) % 256, (y + 5 * t) % 256, (x + y + 7 * e) % 256], -1)
        r, c = (2 * t + 5 * e) % 72, (3 * t + e) % 72
        img[r:r + 24, c:c + 24] = (255, 40 * e % 256, 0)
        ds.add_frame({"observation.state": rng.normal(size=4).astype(np.float32),
                      "action": rng.normal(size=2).astype(np.float32),
                      "observation.images.cam": img.astype(np.uint8), "task": "t"})
    ds.save_episode()
ds.finalize()
"""

_LEROBOT = r"""
import sys, time, json, hashlib, numpy as np, torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
root, starts, out, fps, cam = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
t0 = time.perf_counter()
ds = LeRobotDataset("bench/random96", root=root, video_backend="pyav",
                    delta_timestamps={cam: [-3 / fps, -2 / fps, -1 / fps, 0.0]})
setup = time.perf_counter() - t0
idx = np.load(starts)
digests = np.empty(len(idx), np.uint64)
seconds = cpu = 0.0
for j, i in enumerate(idx.tolist()):
    t0, c0 = time.perf_counter(), time.process_time()
    item = ds[i]
    seconds += time.perf_counter() - t0
    cpu += time.process_time() - c0
    x = (item[cam] * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()
    digests[j] = int.from_bytes(hashlib.blake2b(x.tobytes(), digest_size=8).digest(), "little")
np.save(out, digests)
print(json.dumps({"n": len(idx), "seconds": seconds, "cpu_seconds": cpu, "setup_s": setup}))
"""


def _digest(stack: np.ndarray) -> int:
    return int.from_bytes(hashlib.blake2b(stack.tobytes(), digest_size=8).digest(), "little")


def worker_ours(args: argparse.Namespace) -> dict[str, Any]:
    """One side of ours in this process: fill the buffer, draw and decode, hash."""
    sys.path.insert(0, str(REPO))
    from offline_prelearner import EpisodeReplayBuffer, FrameStack, NStep
    from offline_prelearner.connectors.video_frames import DecodeVideoFrames
    from offline_prelearner.io.formats.lerobot.frames import reference_episodes

    t0 = time.perf_counter()
    buf = EpisodeReplayBuffer(
        args.episodes * (args.length + 1), unit=FrameStack(4, NStep(3)), seed=args.round
    )
    for cols in reference_episodes(args.root):
        buf.add(cols)
    decode = DecodeVideoFrames(args.root, cache_bytes=args.cache_bytes)
    setup = time.perf_counter() - t0
    leaf = f"obs.{CAMERA.removeprefix('observation.')}"
    starts, digests, seconds, cpu = [], [], 0.0, 0.0
    for _ in range(args.batches):
        t0, c0 = time.perf_counter(), time.process_time()
        refs = buf.sample(args.batch)
        seconds += time.perf_counter() - t0
        cpu += time.process_time() - c0
        starts.append(refs[leaf][:, -1].copy())  # each sample's start frame (LeRobot index)
        if args.draw_only:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        batch = decode(refs)
        seconds += time.perf_counter() - t0
        cpu += time.process_time() - c0
        digests += [_digest(s) for s in batch[leaf]]
    if args.starts_out:
        np.save(args.starts_out, np.concatenate(starts))
    if args.digests_out:
        np.save(args.digests_out, np.asarray(digests, np.uint64))
    s = decode.frames.stats
    return {
        "n": args.batches * args.batch,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "setup_s": round(setup, 3),
        "cache_bytes": args.cache_bytes,
        "frames_decoded": s.decoded,
        "frames_requested": s.requested,
        "seeks": s.seeks,
        "gop_hits": s.hits,
        "gop_misses": s.misses,
        "peak_cached_mb": round(s.peak_cached_bytes / 2**20, 1),
    }


def _run_ours(root: Path, args: argparse.Namespace, r: int, cache: int, digests: Path) -> dict:
    cmd = [
        sys.executable, __file__, "--worker", "--root", str(root), "--round", str(r),
        "--episodes", str(args.episodes), "--length", str(args.length),
        "--batch", str(args.batch), "--batches", str(args.batches),
        "--cache-bytes", str(cache), "--digests-out", str(digests),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def _line(impl: str, got: dict[str, Any]) -> dict[str, Any]:
    return {
        "bench": BENCH,
        "impl": impl,
        "throughput": round(got["n"] / got["seconds"], 1),
        "unit": "samples/s",
        "seconds": round(got["seconds"], 3),
        "peak_mem_mb": None,
        "cpu_samples_per_s": round(got["n"] / got["cpu_seconds"], 1),
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in got.items() if k != "seconds"},
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--length", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--gop", type=int, default=0, help="a keyframe every GOP frames (0: LeRobot's default, 2)"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cache-bytes", type=int, default=256 << 20, help=argparse.SUPPRESS)
    ap.add_argument("--starts-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--draw-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--digests-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker_ours(args)), flush=True)
        return 0

    gop = f"-g{args.gop}" if args.gop else ""
    root = REPO / f".bench/lerobot-bench/random96-{args.episodes}x{args.length}{gop}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if not (root / "meta/info.json").is_file():
        log(f"writing the dataset with LeRobot: {root}")
        make = [str(LEROBOT_PY), "-c", _MAKE, str(root), str(args.episodes), str(args.length)]
        make += [str(FPS), str(args.gop)]
        subprocess.run(make, check=True, capture_output=True, cwd="/", env=env)
    sizes = {"episodes": args.episodes, "length": args.length, "batch": args.batch}
    sizes.update(batches=args.batches, rounds=args.rounds)
    camera = f"96x96 AV1, a keyframe every {args.gop or 2} frames, 30 fps"
    emit(header(__file__, **sizes, camera=camera))
    tmp = Path(tempfile.mkdtemp(prefix="bench_lerobot_random_"))
    starts = {}
    for r in range(args.rounds):  # the rounds' samples, drawn once (the seed fixes them)
        starts[r] = tmp / f"starts_{r}.npy"
        cmd = [sys.executable, __file__, "--worker", "--root", str(root), "--round", str(r),
               "--episodes", str(args.episodes), "--length", str(args.length), "--batch",
               str(args.batch), "--batches", str(args.batches), "--draw-only",
               "--starts-out", str(starts[r])]  # fmt: skip
        subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)

    def side(impl: str):  # type: ignore[no-untyped-def]
        def run(r: int) -> list[dict[str, Any]]:
            digests = tmp / f"{impl}_{r}.npy"
            log(f"round {r}: {impl}")
            if impl == "lerobot":
                cmd = [str(LEROBOT_PY), "-c", _LEROBOT, str(root), str(starts[r]), str(digests),
                       str(FPS), CAMERA]  # fmt: skip
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env,
                                     cwd="/")  # fmt: skip
                got = json.loads(out.stdout.strip().splitlines()[-1])
            else:
                cache = 256 << 20 if impl == "ours" else SMALL_CACHE
                got = _run_ours(root, args, r, cache, digests)
            return [emit(_line(impl, got))]

        return run

    lines = alternate([(s, side(s)) for s in ("ours", "ours_small_cache", "lerobot")], args.rounds)
    for r in range(args.rounds):
        want = np.load(tmp / f"lerobot_{r}.npy")
        for impl in ("ours", "ours_small_cache"):
            if not np.array_equal(np.load(tmp / f"{impl}_{r}.npy"), want):
                raise SystemExit(f"round {r}: {impl}'s frames differ from LeRobot's")
    emit({"bench": BENCH, "impl": "data", "frames_equal": True, "samples_checked": len(lines)
          and args.rounds * args.batch * args.batches})  # fmt: skip
    pairs = [
        ("ours/lerobot", (BENCH, "ours"), (BENCH, "lerobot")),
        ("ours_small_cache/lerobot", (BENCH, "ours_small_cache"), (BENCH, "lerobot")),
    ]
    summary = summarize_rounds(lines, pairs)
    for line in summary:
        emit(line)
    cpu = {x["impl"]: x["cpu_samples_per_s"] for x in summary if "cpu_samples_per_s" in x}
    for impl in ("ours", "ours_small_cache"):  # process CPU time: steadier on a shared machine
        ratio = round(cpu[impl] / cpu["lerobot"], 2)
        emit({"bench": f"{impl}/lerobot", "impl": "ratio", "ratio_cpu": ratio, "cpu": cpu})
    return 0


if __name__ == "__main__":
    sys.exit(main())
