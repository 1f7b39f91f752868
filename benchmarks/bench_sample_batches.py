"""Old-stack JSON -> episodes (``sample_batches`` reader), env steps/s, beside RLlib 2.60.

Data: ``cartpole_sample_batches`` (1,000,003 steps in 4,753 SampleBatch lines over 4 files; about a
quarter of the lines end mid-episode). Lines (same names on the RLlib side -> ratio lines):

* ``cartpole_sample_batches.map`` -- ``SampleBatchesReader.read(table)`` per file, where ``table``
  is the file read by ``pyarrow.json`` beforehand (one record per row, what ``ray.data.read_json``
  hands over), plus joining the episodes cut across lines/files (``stitch_fragments``) once at the
  end. Our output: every episode split, ordered and stitched (44,685 episodes).
* ``cartpole_sample_batches.read_map`` -- ``SampleBatchesReader.read_file(path)`` (parse + map) per
  file, plus stitching.

RLlib's side (``rllib_sample_batches.py``) times ``_map_sample_batch_to_episode``; see its
docstring for what it does (one episode per record, infos dropped so that it runs).

Usage: ``python benchmarks/bench_sample_batches.py [--data DIR] [--quick] [--repeats K]
[--no-rllib]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import _common as C
import pyarrow as pa
import pyarrow.json as pajson

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.ledger import EpisodeBatch
from offline_prelearner.episodes.stitch import stitch_fragments
from offline_prelearner.io.formats.sample_batches.reader import SampleBatchesReader

HERE = Path(__file__).resolve().parent
MAP, READ_MAP = "cartpole_sample_batches.map", "cartpole_sample_batches.read_map"


def _table(path: Path, limit: int | None) -> pa.Table:
    if limit is None:
        return pajson.read_json(path)
    with open(path, "rb") as fh:
        return pajson.read_json(pa.BufferReader(b"".join(fh.readline() for _ in range(limit))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument("--no-rllib", action="store_true", help="skip the RLlib side")
    args = parser.parse_args(argv)
    root = C.data_dir(args.data)
    files = sorted((root / "cartpole_sample_batches").glob("*.json"))
    limit = 300 if args.quick else None
    files = files[:1] if args.quick else files
    repeats = args.repeats or (1 if args.quick else 3)
    extra = {"digest": C.dataset_digest(root), "quick": args.quick}
    benches = [MAP, READ_MAP]
    if args.no_rllib:
        rllib = [{"bench": b, "impl": "rllib", "skipped": "--no-rllib"} for b in benches]
    else:
        a = ["--data", str(root)] + ["--quick"] * args.quick
        a += ["--repeats", str(args.repeats)] * bool(args.repeats)
        rllib = C.run_rllib(HERE / "rllib_sample_batches.py", a, benches)
    lines = [C.emit(x) for x in rllib]
    tables = [(f, _table(f, limit)) for f in files]
    counts: dict[str, int] = {}

    def map_pass() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        reader, total = SampleBatchesReader(ReadConfig(format="sample_batches")), EpisodeBatch()
        for f, t in tables:
            total.extend(reader.read(t, str(f)))
        out = stitch_fragments(total)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        counts.update(
            n=out.ledger.rows_in,
            episodes=len(out.episodes),
            not_done=sum(not e.is_done for e in out.episodes),
        )
        if not out.ledger.balanced() or out.ledger.rows_rejected:
            raise SystemExit(f"reader refused steps: {out.ledger.to_dict()}")
        return wall, cpu

    def read_map_pass() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        reader, total = SampleBatchesReader(ReadConfig(format="sample_batches")), EpisodeBatch()
        for f, _ in tables:
            if limit is None:
                total.extend(reader.read_file(f))
            else:
                total.extend(reader.read(_table(f, limit), str(f), first_line=1))
        stitch_fragments(total)
        return time.perf_counter() - t0, time.process_time() - c0

    for name, fn in ((MAP, map_pass), (READ_MAP, read_map_pass)):
        timing = C.time_repeats(fn, repeats, warmup=1)
        C.log(f"ours {name}: median {timing.median:.2f} s")
        lines.append(
            C.emit(
                C.record(
                    name,
                    "ours",
                    n=counts["n"],
                    timing=timing,
                    unit="steps/s",
                    episodes_out=counts["episodes"],
                    not_done_out=counts["not_done"],
                    files=len(files),
                    **extra,
                )
            )
        )
    lines += [C.emit(x) for x in C.ratio_lines(lines)]
    C.log("summary\n" + C.markdown_table(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
