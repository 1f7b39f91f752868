"""Old-stack RLlib data (JSON SampleBatch lines) -> new-stack rows and msgpack episodes, read back.

Run from the repository root::

    python examples/old_stack_conversion.py

It converts the small old-stack sample shipped in ``datasets/cartpole-v1-old-stack`` (6 CartPole
episodes laid out as RLlib's old-stack ``JsonWriter`` writes them, plain and with packed
``obs``; its ``make_old_stack.py`` says how they were made). The same from the command line::

    offline-prelearner convert datasets/cartpole-v1-old-stack/old_stack.json --to rows --out DIR
    offline-prelearner convert datasets/cartpole-v1-old-stack/old_stack_compressed.json \
        --to episodes --out DIR --legacy-pickle
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import offline_prelearner as op

DATA = Path(__file__).resolve().parents[1] / "datasets" / "cartpole-v1-old-stack"
PLAIN = DATA / "old_stack.json"
COMPRESSED = DATA / "old_stack_compressed.json"


def read_back(files: list[str], fmt: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{episode id: (observations, rewards)} as the new-stack reader sees the written files."""
    batch = op.make_reader(op.ReadConfig(format=fmt)).read(pq.read_table(files))
    return {str(ep.id): (ep.observations, ep.rewards) for ep in batch.episodes}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        as_rows = op.convert_path(PLAIN, "rows", out / "rows")
        as_eps = op.convert_path(PLAIN, "episodes", out / "episodes")
        for s in (as_rows, as_eps):
            print(
                f"convert -> {s['to']:8s} {s['records_read']} records, {s['rows_in']} steps in, "
                f"{s['rows_out']} out, {s['episodes_written']} episodes, balanced {s['balanced']}"
            )
        rows = read_back([str(out / "rows" / f) for f in as_rows["files_written"]], "rows")
        eps = read_back([str(out / "episodes" / f) for f in as_eps["files_written"]], "episodes")
        same = rows.keys() == eps.keys() and all(
            np.array_equal(rows[k][0], eps[k][0]) and np.array_equal(rows[k][1], eps[k][1])
            for k in rows
        )
        print(
            f"read back        {len(rows)} episodes from rows, {len(eps)} from episodes; "
            f"identical: {same}"
        )

        # Compressed columns are pickles: decoded only on request, by a restricted unpickler.
        legacy = op.ReadConfig(format="sample_batches", legacy_pickle=True)
        s = op.convert_path(COMPRESSED, "episodes", out / "compressed", legacy)
        print(
            f"compressed       {s['rows_out']} steps, {s['episodes_written']} episodes "
            f"(legacy_pickle=True)"
        )

        # The converted rows are real episodes now: 3-step returns, cut at each episode's end.
        prelearner = op.OfflinePreLearner(n_step=3, sample_all=True, train_batch_size=64, seed=0)
        table = pq.read_table([str(out / "rows" / f) for f in as_rows["files_written"]])
        sample = next(iter(prelearner(table)))
        print(
            f"prelearner       {len(sample['obs'])} samples, n_step values "
            f"{sorted(set(sample['n_step'].tolist()))}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
