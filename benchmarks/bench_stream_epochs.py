"""The learner stream with epochs (issue 33): its speed against a bare Ray Data read, its resume
time, and how well it shuffles.

Makes (or reuses, ``--data DIR``) ``--rows`` CartPole-sized rows in ``--files`` Parquet files in
RLlib's row layout (``bench_scaling.make_rows``: episodes of 5-59 steps cut across files), starts
``ray.init(num_cpus=--num-cpus)`` once, and prints JSON lines (``_common.py``; the first is the
header: CPU model, cores, load, commit, the command):

* ``epochs.read_iter`` -- the floor: ``ray.data.read_parquet(files).iter_batches(
  batch_format="numpy", batch_size=None)``, every row counted (rows/s).
* ``epochs.stream.s<S>`` -- ``epoch_learner_batches(files, {"sample_all": true}, seed=0,
  epoch=round, shuffle_rows=S)`` iterated to the end of the epoch by the driver (the learner):
  the whole call timed (planning, Ray Data's tasks, the learner's ``MultiAgentBatch`` objects);
  ``throughput`` is input rows per second (``samples`` says how many reached the learner, every
  transition of every ended episode once); ``first_batch_s`` the time to the first batch.
  ``--concurrency`` sets ``ray.concurrency`` (tasks computing windows at once).
* ``epochs.iter_learner_batches`` (``--with-current``) -- today's learner stream, ``sample_all``,
  for comparison (file order, no epochs).
* ``epochs.stream/read_iter`` -- the ratio of the medians (and of each round's pair): the issue's
  target is >= 0.8.

Each round runs every side once, the order reversed every other round (``_common.alternate``);
figures are medians over ``--rounds``.

* ``epochs.resume`` -- a stream stopped halfway through an epoch, its ``state_dict`` saved; then
  a new stream built, the state loaded and the first batch taken: ``in_process_s`` (Ray already
  up: planning, the window task, the first batch) and ``new_process_s`` (a fresh Python process
  that starts its own Ray: what a learner restarting after a crash waits; from the process's
  start to its first batch; it starts its own Ray), ``attached_process_s`` (a fresh process
  that joins the running cluster through ``RAY_ADDRESS``, as a learner restarted by Ray Train or
  a re-run driver does: the cluster and its warm workers outlive the learner), medians over
  ``--rounds``; the target is <= 10 s.
* ``epochs.shuffle`` -- shuffle quality of the batches a learner sees, one line per order:
  ``same_episode`` (the chance that two samples of one train batch come from the same
  episode, averaged over batches) and ``adjacent_same_episode`` (the share of consecutive
  samples, in the order the learner gets them, from the same episode: a lag-1 autocorrelation of
  episode ids). Orders: the stream at each ``--shuffle-rows`` S, ``global`` (every sample of
  the epoch permuted at once: the expectation, computed from the episodes' lengths) and
  ``iter_learner_batches`` (today's stream).

Usage: ``python benchmarks/bench_stream_epochs.py [--rows 1000003] [--files 50] [--rounds 3]
[--shuffle-rows 4096,65536] [--concurrency 2] [--num-cpus 2] [--with-current] [--data DIR]
[--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
from bench_scaling import make_rows

REPO = Path(__file__).resolve().parent.parent
#: The work runs in Ray's worker processes: the driver's peak says nothing; not measured here.
NO_PEAK: dict[str, Any] = {"peak_mem_mb": None}


def data_for(args: argparse.Namespace) -> list[str]:
    """The input files: ``--data``, else made once under ``.bench/epochs/``."""
    data = Path(args.data) if args.data else REPO / f".bench/epochs/rows-{args.rows}-{args.files}"
    if not any(data.glob("*.parquet")):
        C.log(f"writing {args.rows} rows in {args.files} files to {data}")
        make_rows(data, args.rows, args.files)
    return [str(f) for f in sorted(data.glob("*.parquet"))]


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {"sample_all": True, "ray.concurrency": args.concurrency}


def bare(files: list[str]) -> dict[str, Any]:
    import ray

    start = time.perf_counter()
    n = 0
    for block in ray.data.read_parquet(files).iter_batches(batch_format="numpy", batch_size=None):
        n += len(next(iter(block.values())))
    seconds = time.perf_counter() - start
    return {"n": n, "seconds": seconds, "throughput": n / seconds, "unit": "rows/s", **NO_PEAK}


def stream(files: list[str], args: argparse.Namespace, shuffle: int, epoch: int) -> dict[str, Any]:
    import offline_prelearner as op

    start = time.perf_counter()
    s = op.epoch_learner_batches(files, config(args), seed=0, epoch=epoch, shuffle_rows=shuffle)
    first = None
    samples = 0
    for batch in s:
        if first is None:
            first = time.perf_counter() - start
        samples += batch.env_steps
    seconds = time.perf_counter() - start
    rows = args.rows
    return {
        "n": rows,
        "seconds": seconds,
        "throughput": rows / seconds,
        "unit": "rows/s",
        "samples": samples,
        "first_batch_s": round(first or 0.0, 3),
        "windows": len(s.order.windows),
        **NO_PEAK,
    }


def current(files: list[str], args: argparse.Namespace) -> dict[str, Any]:
    import offline_prelearner as op

    start = time.perf_counter()
    samples = sum(b.env_steps for b in op.iter_learner_batches(files, config(args)))
    seconds = time.perf_counter() - start
    return {
        "n": args.rows,
        "seconds": seconds,
        "throughput": args.rows / seconds,
        "unit": "rows/s",
        "samples": samples,
        **NO_PEAK,
    }


RESUMER = """
import json, sys, time
start = time.perf_counter()
import offline_prelearner as op
from offline_prelearner.jobs.session.ray_session import init_ray
files, cfg, shuffle, state = json.loads(sys.argv[1])
imported = time.perf_counter()
init_ray(op.PreLearnerConfig())
ray_up = time.perf_counter()
s = op.epoch_learner_batches(files, cfg, seed=0, epoch=state["epoch"], shuffle_rows=shuffle)
s.load_state_dict(state)
next(iter(s))
end = time.perf_counter()
print(json.dumps({"first_batch_s": end - start, "import_s": imported - start,
                  "ray_init_s": ray_up - imported, "stream_s": end - ray_up}))
"""


def resume(files: list[str], args: argparse.Namespace, shuffle: int) -> dict[str, Any]:
    import offline_prelearner as op

    s = op.epoch_learner_batches(files, config(args), seed=0, epoch=0, shuffle_rows=shuffle)
    half = args.rows // 2 // 256
    for k, _ in enumerate(s):
        if k + 1 == half:
            break
    state = json.loads(json.dumps(s.state_dict()))
    start = time.perf_counter()
    again = op.epoch_learner_batches(files, config(args), seed=0, epoch=0, shuffle_rows=shuffle)
    again.load_state_dict(state)
    next(iter(again))
    in_process = time.perf_counter() - start
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    arg = json.dumps([files, config(args), shuffle, state])
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", RESUMER, arg], env=env, capture_output=True, text=True, check=True
    )
    spawn = time.perf_counter() - t0
    inner = json.loads(out.stdout.strip().splitlines()[-1])
    # A learner that restarts on a cluster that outlived it (Ray Train, a driver re-run with
    # RAY_ADDRESS): a new process, the cluster and its warm workers already there.
    import ray

    env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", RESUMER, arg], env=env, capture_output=True, text=True, check=True
    )
    attached = time.perf_counter() - t0
    joined = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "in_process_s": in_process,
        "new_process_s": spawn,
        **inner,
        "attached_process_s": attached,
        "attached_ray_init_s": joined["ray_init_s"],
        "attached_stream_s": joined["stream_s"],
        "state": state,
    }


def quality(episodes: list[np.ndarray]) -> dict[str, float]:
    """Shuffle quality of batches of episode ids (see the module docstring)."""
    same = []
    for ids in episodes:
        n = len(ids)
        if n > 1:
            c = np.array(list(Counter(ids.tolist()).values()), dtype=np.float64)
            same.append(float((c * (c - 1)).sum() / (n * (n - 1))))
    seq = np.concatenate(episodes)
    return {
        "same_episode": round(statistics.fmean(same), 6),
        "adjacent_same_episode": round(float(np.mean(seq[1:] == seq[:-1])), 6),
        "batches": len(episodes),
    }


def episodes_of(batches: Any) -> list[np.ndarray]:
    return [np.asarray(b["default_policy"]["eps_id"]).astype(str) for b in batches]


def global_quality(files: list[str]) -> dict[str, float]:
    """The expectation under a full permutation: two samples share an episode with probability
    sum L(L-1) / (N(N-1)), whether in one batch or adjacent."""
    ids = np.concatenate([pq.read_table(f, columns=["eps_id"])["eps_id"].to_numpy() for f in files])
    lengths = np.array(list(Counter(ids.tolist()).values()), dtype=np.float64)
    n = lengths.sum()
    p = float((lengths * (lengths - 1)).sum() / (n * (n - 1)))
    return {"same_episode": round(p, 6), "adjacent_same_episode": round(p, 6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_003)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shuffle-rows", default="4096,65536")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--with-current", action="store_true")
    parser.add_argument("--data", default=None)
    parser.add_argument("--quick", action="store_true", help="100k rows, one round")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.files, args.rounds = 100_003, 10, 1
    sizes = [int(x) for x in args.shuffle_rows.split(",")]
    C.emit(C.header("bench_stream_epochs.py", argv=sys.argv[1:], command=" ".join(sys.argv)))
    files = data_for(args)
    import ray

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    default = 1 << 16 if 1 << 16 in sizes else sizes[-1]

    sides: list[tuple[str, Any]] = [
        ("read_iter", lambda r: [{"bench": "epochs.read_iter", "impl": "ray", **bare(files)}]),
        (
            "stream",
            lambda r: [
                {
                    "bench": f"epochs.stream.s{default}",
                    "impl": "ours",
                    **stream(files, args, default, r),
                }
            ],
        ),
    ]
    if args.with_current:
        sides.append(
            (
                "current",
                lambda r: [
                    {"bench": "epochs.iter_learner_batches", "impl": "ours", **current(files, args)}
                ],
            )
        )
    for name, side in sides:  # untimed: imports, Ray's workers, the files in the page cache
        C.log(f"warm-up: {name}")
        side(0)
    lines = C.alternate(sides, args.rounds)
    pairs = [
        (
            "epochs.stream/read_iter",
            (f"epochs.stream.s{default}", "ours"),
            ("epochs.read_iter", "ray"),
        )
    ]
    for line in C.summarize_rounds(lines, pairs):
        if line.get("impl") == "ratio":
            line["met"] = line["ratio"] >= 0.8
        C.emit(line)

    resumes = [resume(files, args, default) for _ in range(args.rounds)]
    new_process = statistics.median(r["new_process_s"] for r in resumes)
    C.emit(
        {
            "bench": "epochs.resume",
            "impl": "ours",
            "n": len(resumes),
            "seconds": round(new_process, 3),
            "throughput": None,
            "unit": "s to the first batch",
            **NO_PEAK,
            "in_process_s": round(statistics.median(r["in_process_s"] for r in resumes), 3),
            "new_process_s": round(statistics.median(r["new_process_s"] for r in resumes), 3),
            **{
                f"new_process_{k}": round(statistics.median(r[k] for r in resumes), 3)
                for k in ("import_s", "ray_init_s", "stream_s")
            },
            **{
                k: round(statistics.median(r[k] for r in resumes), 3)
                for k in ("attached_process_s", "attached_ray_init_s", "attached_stream_s")
            },
            "rounds": len(resumes),
            "state": resumes[-1]["state"],
            "met": new_process <= 10,
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
    )

    import offline_prelearner as op

    for s in [*sizes, args.rows * 2]:
        st = op.epoch_learner_batches(files, config(args), seed=0, epoch=0, shuffle_rows=s)
        name = "all" if s >= args.rows else str(s)
        q = quality(episodes_of(st))
        C.emit(
            {
                "bench": f"epochs.shuffle.stream.s{name}",
                "impl": "data",
                "shuffle_rows": s,
                "windows": len(st.order.windows),
                **q,
            }
        )
    C.emit({"bench": "epochs.shuffle.global", "impl": "data", **global_quality(files)})
    q = quality(episodes_of(op.iter_learner_batches(files, config(args))))
    C.emit({"bench": "epochs.shuffle.iter_learner_batches", "impl": "data", **q})


if __name__ == "__main__":
    main()
