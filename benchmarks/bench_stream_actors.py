"""The pixel learner stream on N actors (issue 24): rows/s at each N, and what N actors cost.

The 100,017 pixel rows made by make_data.sh (84x84x4 uint8 frames, RLlib's layout, no ``t``
column: RLlib's recorder writes none) streamed by ``iter_learner_batches`` with
``ray.concurrency`` N (each actor ``num_cpus=1``, reading its own files). With N > 1 the files'
ranges own the episodes whose first row they hold and read the rows of them that lie in later
ranges (jobs/stream/episode_ranges.py), so every N delivers the same episodes, whole. The
learner is the driver: it iterates the stream to the end and touches ``obs``. Two counts, never
mixed:

* **rows read** -- input rows (the files' rows): what the actors decode.
* **rows delivered** -- rows that reach the learner (train batches' rows). With ``--mode
  sample_all`` (default) every transition of every ended episode, once (rows read less the rows
  of an episode still open at the end of the data); with ``--mode sampled`` the defaults of the
  learner stream: ``train_batch_size`` (256) samples from replay per ``ray.batch_size`` (4096)
  rows read.

Lines (JSON, one per measurement, then medians over interleaved rounds: N = 1, 2, ... then
reversed, so a change of the machine's speed hits every N):

* ``pixels_rows.stream.a<N>.rows_read`` / ``.rows_delivered`` -- throughput in rows/s of each
  count, the whole call timed (actor start, planning, reading, the learner's drain); extras
  ``same_as_a1`` (``sample_all``: the learner saw exactly the (episode, t) pairs it saw with one
  actor).
* ``pixels_rows.stream.plan`` -- the planning alone (the key columns of every file read on the
  driver, owners computed): seconds, and rows/s of that scan (the better of two calls after a
  first one, which pays imports and opens the footers: ``seconds_first``).
* ``pixels_rows.stream.a<N>/a1`` -- ratio lines (rows read per second), the scaling claim.
* ``--work``: ``pixels_rows.work.one_reader`` / ``.ranges`` -- rows read per CPU-second of the
  same work in this process without Ray (one prelearner over every file; the plan and a fresh
  prelearner per range, as N > 1 actors do it between them), and their ratio: what N > 1 costs
  in work, which is what bounds its scaling once each actor has a core.

On a machine with more cores pass ``--actors 1,2,4,8,16`` (and ``--num-cpus``); a 2-core
machine measures 1 and 2. make_data.sh's pixel files end at episode ends, so no rows are handed
over there; ``--recut 3000`` rewrites them into files of 3,000 rows first, cut anywhere, so
episodes cross the ranges and the hand-over is measured too (``file_pieces`` on the plan line).

    python benchmarks/bench_stream_actors.py [--actors 1,2] [--rounds 3] [--files K]
        [--mode sample_all|sampled] [--num-cpus C] [--recut ROWS] [--work] [--quick] [--data DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import _common as C

import offline_prelearner as op


def drain(files: list[str], config: op.PreLearnerConfig) -> tuple[int, set[tuple[Any, int]]]:
    """Iterates the stream to its end: rows delivered and the (episode id, t) pairs seen."""
    delivered = 0
    keys: set[tuple[Any, int]] = set()
    for batch in op.iter_learner_batches(files, config):
        sb = batch["default_policy"]
        obs = sb["obs"]
        delivered += len(obs)
        int(obs[:, 0, 0, 0].sum())  # the learner reads its batch
        keys.update(zip(sb["eps_id"].tolist(), sb["t"].tolist(), strict=True))
    return delivered, keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument(
        "--actors", default="1,2", help="actor counts to measure (default 1,2; 'none': no Ray run)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--files", type=int, default=None, help="the first K pixel files only")
    parser.add_argument("--mode", choices=("sample_all", "sampled"), default="sample_all")
    parser.add_argument("--num-cpus", type=int, default=None, help="ray.init's num_cpus")
    parser.add_argument(
        "--recut",
        type=int,
        default=None,
        help="rewrite the rows into files of this many rows first (episodes then cross files "
        "and ranges, so ranges hand rows over); written once under .bench/",
    )
    parser.add_argument(
        "--work",
        action="store_true",
        help="also the CPU work, in this process without Ray: one reader over every file vs "
        "the planned ranges one after another (the work of N > 1 actors, whoever runs them)",
    )
    args = parser.parse_args()
    counts = [] if args.actors == "none" else [int(a) for a in args.actors.split(",")]
    files = [str(p) for p in C.parquet_files(C.data_dir(args.data) / "pixels_rows")]
    files = files[: 4 if args.quick else args.files or len(files)]
    if args.recut:
        files = recut(files, args.recut)
    rounds = 1 if args.quick else args.repeats or args.rounds
    import pyarrow.parquet as pq

    rows_read = sum(pq.read_metadata(f).num_rows for f in files)
    base = {"sample_all": args.mode == "sample_all", "batch_size": 4096, "ray.read": "actor"}
    C.emit(C.header("bench_stream_actors.py", actors=counts, mode=args.mode, files=len(files)))

    C.emit(plan_line(files, base, rows_read))
    if args.work:
        for line in C.summarize_rounds(*work_lines(files, base, rows_read, rounds)):
            C.emit(line)
    if counts:
        stream_lines(files, base, counts, rows_read, rounds, args)


def stream_lines(
    files: list[str],
    base: dict[str, Any],
    counts: list[int],
    rows_read: int,
    rounds: int,
    args: argparse.Namespace,
) -> None:
    """The stream on Ray at each actor count, in interleaved rounds, and the ratio lines."""
    import ray

    ray.init(
        num_cpus=args.num_cpus or max(os.cpu_count() or 1, max(counts)),
        include_dashboard=False,
        log_to_driver=False,
    )
    seen: dict[int, set[tuple[Any, int]]] = {}

    def side(n: int) -> C.Side:
        def run(_round: int) -> list[dict[str, Any]]:
            config = op.PreLearnerConfig().with_updates({**base, "ray.concurrency": n})
            t0 = time.perf_counter()
            delivered, keys = drain(files, config)
            seconds = time.perf_counter() - t0
            seen.setdefault(n, keys)
            same = None if args.mode != "sample_all" or 1 not in seen else keys == seen[1]
            extra = {"actors": n, "files": len(files), "mode": args.mode, "same_as_a1": same}
            C.log(f"{n} actor(s): {rows_read} rows read, {delivered} delivered, {seconds:.1f} s")
            return [
                _line(f"pixels_rows.stream.a{n}.rows_read", rows_read, seconds, extra),
                _line(f"pixels_rows.stream.a{n}.rows_delivered", delivered, seconds, extra),
            ]

        return run

    lines = C.alternate([(f"a{n}", side(n)) for n in counts], rounds)
    for line in lines:
        C.emit(line)
    pairs = [
        (
            f"pixels_rows.stream.a{n}/a{counts[0]}",
            (f"pixels_rows.stream.a{n}.rows_read", "ours"),
            (f"pixels_rows.stream.a{counts[0]}.rows_read", "ours"),
        )
        for n in counts[1:]
    ]
    for line in C.summarize_rounds(lines, pairs):
        C.emit(line)
    ray.shutdown()


def work_lines(
    files: list[str], base: dict[str, Any], rows_read: int, rounds: int
) -> tuple[list[dict[str, Any]], list[Any]]:
    """CPU seconds of the same stream's work in one process, interleaved: one prelearner over
    every file in order (one actor) against the plan plus a fresh prelearner per range (what
    N > 1 actors do between them); rows read per CPU-second, and the ratio."""
    from offline_prelearner.jobs.file_batches import iter_file_batches, read_groups
    from offline_prelearner.jobs.stream.episode_ranges import plan_ranges

    config = op.PreLearnerConfig().with_updates({**base, "format": "rows"})

    def read(ranges: list[Any]) -> int:
        delivered = 0
        for items in ranges:
            p = op.OfflinePreLearner(config)
            for table, source in iter_file_batches(items, 4096):
                p.source = source
                delivered += sum(len(o["t"]) for o in p(table))
        return delivered

    def side(planned: bool) -> C.Side:
        def run(_round: int) -> list[dict[str, Any]]:
            c0, t0 = time.process_time(), time.perf_counter()
            groups = read_groups(files, 4096)
            ranges = (plan_ranges(groups, config) or groups) if planned else [files]
            delivered = read(ranges)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            name = "ranges" if planned else "one_reader"
            extra = {"wall_seconds": round(wall, 3), "rows_delivered": delivered}
            line = _line(f"pixels_rows.work.{name}", rows_read, cpu, extra)
            return [{**line, "unit": "rows read per CPU-second"}]

        return run

    lines = C.alternate([("one_reader", side(False)), ("ranges", side(True))], rounds)
    for line in lines:
        C.emit(line)
    pair = (
        "pixels_rows.work.ranges/one_reader",
        ("pixels_rows.work.ranges", "ours"),
        ("pixels_rows.work.one_reader", "ours"),
    )
    return lines, [pair]


def recut(files: list[str], rows: int) -> list[str]:
    """The rows of ``files`` (in order) rewritten into files of ``rows`` rows, cut anywhere (an
    episode crosses files), once, under ``.bench/``; their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = C.REPO / ".bench" / f"pixels_rows_recut{rows}_{len(files)}"
    if not (out / "_done").exists():
        out.mkdir(parents=True, exist_ok=True)
        table = pa.concat_tables([pq.read_table(f) for f in files])
        for k, start in enumerate(range(0, table.num_rows, rows)):
            pq.write_table(table.slice(start, rows), out / f"part-{k:05d}.parquet")
        (out / "_done").write_text("")
    return [str(p) for p in C.parquet_files(out)]


def _line(bench: str, n: int, seconds: float, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "bench": bench,
        "impl": "ours",
        "throughput": round(n / seconds, 1),
        "unit": "rows/s",
        "seconds": round(seconds, 3),
        "peak_mem_mb": None,
        "n": n,
        **extra,
    }


def plan_line(files: list[str], base: dict[str, Any], rows_read: int) -> dict[str, Any]:
    """The planning alone: the files' key columns read on the driver and the owners computed."""
    from offline_prelearner.jobs.file_batches import read_groups
    from offline_prelearner.jobs.stream.episode_ranges import plan_ranges

    config = op.PreLearnerConfig().with_updates({**base, "format": "rows", "ray.concurrency": 2})
    groups = read_groups(files, 4096)
    times = []
    for _ in range(3):  # the first pays imports and opens the footers (in a job, the preflight)
        t0 = time.perf_counter()
        plan = plan_ranges(groups, config)
        times.append(time.perf_counter() - t0)
    pieces = 0 if plan is None else sum(not isinstance(i, str) for g in plan for i in g)
    extra = {
        "ranges": len(groups),
        "file_pieces": pieces,
        "seconds_first": round(times[0], 3),
        "unit_note": "rows scanned per second, the better of the 2 calls after the first",
    }
    return _line("pixels_rows.stream.plan", rows_read, sorted(times[1:])[0], extra)


if __name__ == "__main__":
    main()
