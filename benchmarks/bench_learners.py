"""Many learners (issue 12): total rows/s of the learner stream split for 2 learners vs 1.

``ray.init(num_cpus=2)``, one prelearner actor (``num_cpus=1``) as in bench_pipeline.py, on the
CartPole rows made by make_data.sh with ``sample_all=true`` (every transition out once, so rows/s
is the honest figure). Each learner is a thread that iterates its share to the end and touches
``obs`` (a learner's read); the timed span is building the dataset, the split, and every share
drained. Benches:

* ``cartpole_rows.learners.iter`` -- ``iter_learner_batches`` (no split), one consumer.
* ``cartpole_rows.learners.split<N>`` -- ``split_learner_batches(..., num_learners=N)``, N threads;
  ``split<N>_recut`` -- the same with ``batch_rows=4096`` (the output re-cut into 4096-row blocks).
* ``.../ratio`` -- split2 / split1 total rows/s, with and without the re-cut (the issue's bar:
  >= 0.9, ``met``), and split2 / iter.

    python benchmarks/bench_learners.py [--quick] [--repeats 3] [--data DIR]
"""

from __future__ import annotations

import argparse
import threading
import time

import _common as C

import offline_prelearner as op


def drain(streams: list) -> int:
    counts = [0] * len(streams)

    def run(i: int) -> None:
        for batch in streams[i]:
            sb = batch["default_policy"]
            counts[i] += len(sb["obs"])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    args = parser.parse_args()
    files = [str(p) for p in C.parquet_files(C.data_dir(args.data) / "cartpole_rows")]
    files = files[:2] if args.quick else files
    repeats = args.repeats or (1 if args.quick else 3)
    config = op.PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 4096})

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    runs = {
        "iter": lambda: drain([op.iter_learner_batches(files, config)]),
        "split1": lambda: drain(op.split_learner_batches(files, config, 1)),
        "split2": lambda: drain(op.split_learner_batches(files, config, 2)),
        "split1_recut": lambda: drain(op.split_learner_batches(files, config, 1, batch_rows=4096)),
        "split2_recut": lambda: drain(op.split_learner_batches(files, config, 2, batch_rows=4096)),
    }
    rows: dict[str, int] = {}
    lines = {}
    for name, fn in runs.items():

        def timed(fn=fn, name=name) -> float:
            t0 = time.perf_counter()
            rows[name] = fn()
            return time.perf_counter() - t0

        timing = C.time_repeats(timed, repeats)
        C.log(f"{name}: {rows[name]} rows, median {timing.median:.2f} s")
        lines[name] = C.emit(
            C.record(
                f"cartpole_rows.learners.{name}",
                "ours",
                n=rows[name],
                timing=timing,
                unit="rows/s",
                files=len(files),
            )
        )
    ratio = lines["split2"]["throughput"] / lines["split1"]["throughput"]
    C.emit(
        {
            "bench": "cartpole_rows.learners.split2/split1",
            "impl": "ratio",
            "ratio": round(ratio, 3),
            "met": ratio >= 0.9,
        }
    )
    ratio = lines["split2_recut"]["throughput"] / lines["split1_recut"]["throughput"]
    C.emit(
        {
            "bench": "cartpole_rows.learners.split2_recut/split1_recut",
            "impl": "ratio",
            "ratio": round(ratio, 3),
            "met": ratio >= 0.9,
        }
    )
    ratio_iter = lines["split2"]["throughput"] / lines["iter"]["throughput"]
    C.emit(
        {
            "bench": "cartpole_rows.learners.split2/iter",
            "impl": "ratio",
            "ratio": round(ratio_iter, 3),
        }
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
