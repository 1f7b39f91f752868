"""Minari (hdf5 / arrow / parquet) and D4RL reader benchmarks for ``bench_readers.py``.

Synthetic CartPole-sized data (float32 observations of 4, int64 actions, 200-step episodes,
``--quick``: 20,000 steps, else 1,000,000) written in each layout under a temporary folder:
hdf5 with :func:`~offline_prelearner.io.formats.minari.writer.write_minari_dataset`, arrow and
parquet as Minari 0.5.4 writes them (a folder per episode, ``part-0.<fmt>``, T + 1 rows with the
step columns padded; see tests/fixtures/MINARI_NOTES.md), D4RL as one flat HDF5 file.

Per layout two lines: ``<name>.read_map`` ``ours`` (``read_table`` + the reader, every file, steps
out) and ``raw`` (h5py / pyarrow reading the same arrays and nothing else), then a ``ratio`` line
(``ours / raw``; the issue-12 target is >= 0.5, and >= 1M steps/s).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.io.formats.minari.writer import write_minari_dataset
from offline_prelearner.io.readers import make_reader
from offline_prelearner.io.sources import expand_paths, read_table

EPISODE_STEPS = 200
#: Overrides the number of steps (a multiple of 200), e.g. on a loaded machine.
STEPS_ENV = "OFFLINE_PRELEARNER_BENCH_FIELD_STEPS"
OBS_DIM = 4
LAYOUTS = ("hdf5", "arrow", "parquet", "d4rl")


def _episodes(steps: int) -> list[Episode]:
    rng = np.random.default_rng(0)
    out = []
    for k in range(steps // EPISODE_STEPS):
        t = EPISODE_STEPS
        out.append(
            Episode(
                id=k,
                observations=rng.standard_normal((t + 1, OBS_DIM)).astype(np.float32),
                actions=rng.integers(0, 2, t).astype(np.int64),
                rewards=np.ones(t),
                terminated=k % 2 == 0,
                truncated=k % 2 == 1,
            )
        )
    return out


def _space_meta(fmt: str, n_eps: int, steps: int) -> dict[str, Any]:
    box = {"type": "Box", "dtype": "float32", "shape": [OBS_DIM],
           "low": [-np.inf] * OBS_DIM, "high": [np.inf] * OBS_DIM}  # fmt: skip
    return {
        "dataset_id": f"bench/{fmt}-v0",
        "minari_version": "0.5.4",
        "data_format": fmt,
        "jpeg_encoding": True,
        "total_episodes": n_eps,
        "total_steps": steps,
        "observation_space": json.dumps(box),
        "action_space": json.dumps({"type": "Discrete", "dtype": "int64", "start": 0, "n": 2}),
    }


def _write_arrow_layout(folder: Path, eps: list[Episode], fmt: str) -> None:
    data = folder / "data"
    data.mkdir(parents=True)
    for ep in eps:
        t = len(ep)
        pad = lambda a: np.concatenate([a, np.zeros((1, *a.shape[1:]), a.dtype)])  # noqa: E731
        term, trunc = np.zeros(t, bool), np.zeros(t, bool)
        term[-1], trunc[-1] = ep.terminated, ep.truncated
        flat = ep.observations.reshape(-1)
        table = pa.table({
            "observations": pa.FixedSizeListArray.from_arrays(pa.array(flat), OBS_DIM),
            "actions": pad(ep.actions), "rewards": pad(ep.rewards),
            "terminations": pad(term), "truncations": pad(trunc),
        })  # fmt: skip
        d = data / str(ep.id)
        d.mkdir()
        if fmt == "arrow":
            with (
                pa.OSFile(str(d / "part-0.arrow"), "wb") as sink,
                pa.ipc.new_file(sink, table.schema) as w,
            ):
                w.write_table(table)
        else:
            pq.write_table(table, d / "part-0.parquet")
        (d / "metadata.json").write_text(json.dumps({"id": ep.id, "total_steps": t}))
    (data / "metadata.json").write_text(json.dumps(_space_meta(fmt, len(eps), len(eps) * 200)))


def _write_d4rl(path: Path, eps: list[Episode]) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f["observations"] = np.concatenate([e.observations[:-1] for e in eps])
        f["next_observations"] = np.concatenate([e.observations[1:] for e in eps])
        f["actions"] = np.concatenate([e.actions for e in eps])
        f["rewards"] = np.concatenate([e.rewards for e in eps]).astype(np.float32)
        ends = np.zeros(sum(len(e) for e in eps), bool)
        ends[np.cumsum([len(e) for e in eps]) - 1] = True
        kinds = np.repeat([e.terminated for e in eps], [len(e) for e in eps])
        f["terminals"] = ends & kinds
        f["timeouts"] = ends & ~kinds


def _raw(layout: str, files: list[str]) -> Callable[[], Any]:
    """Reads the same arrays with h5py / pyarrow and does nothing else."""
    if layout == "d4rl":

        def d4rl() -> Any:
            import h5py

            with h5py.File(files[0], "r") as f:
                return [f[k][()] for k in ("observations", "next_observations", "actions",
                                           "rewards", "terminals", "timeouts")]  # fmt: skip

        return d4rl
    if layout == "hdf5":

        def hdf5() -> Any:
            import h5py

            out = []
            with h5py.File(files[0], "r") as f:
                for g in f.values():
                    out.append([g[k][()] for k in ("observations", "actions", "rewards",
                                                   "terminations", "truncations")])  # fmt: skip
            return out

        return hdf5
    if layout == "arrow":

        def arrow() -> Any:
            out = []
            for p in files:
                with pa.memory_map(p) as src:
                    out.append(pa.ipc.open_file(src).read_all())
            return out

        return arrow
    return lambda: [pq.read_table(p) for p in files]


def _ours(files: list[str], fmt: str, batch_rows: int = 4096) -> Callable[[], Any]:
    """Every file through ``read_table`` and the reader; Minari's small episode files batched
    up to ``batch_rows`` rows first, as the batch job's units do
    (``jobs/batch/run.read_unit``)."""

    def run() -> int:
        reader = make_reader(ReadConfig(format=fmt))
        steps = 0
        held: list[pa.Table] = []
        n = 0
        for i, f in enumerate(files):
            table = read_table(f)
            held.append(table)
            n += table.num_rows
            if n >= batch_rows or i == len(files) - 1:
                batch = held[0] if len(held) == 1 else pa.concat_tables(held)
                steps += sum(reader.read(batch).source_rows)
                held, n = [], 0
        return steps

    return run


def _dropped(fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` timed whole (time_repeats reads a returned number as the elapsed time)."""

    def run() -> None:
        fn()

    return run


def bench_field_formats(quick: bool, repeats: int, extra: dict[str, Any]) -> list[dict[str, Any]]:
    steps = int(os.environ.get(STEPS_ENV) or (20_000 if quick else 1_000_000))
    eps = _episodes(steps)
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench_minari_") as tmp:
        root = Path(tmp)
        for layout in LAYOUTS:
            if layout == "hdf5":
                write_minari_dataset(root / "hdf5", eps, "bench/hdf5-v0")
                path, fmt = root / "hdf5", "minari"
            elif layout == "d4rl":
                path, fmt = root / "d4rl.hdf5", "d4rl"
                _write_d4rl(path, eps)
            else:
                path, fmt = root / layout, "minari"
                _write_arrow_layout(path, eps, layout)
            files = expand_paths(str(path))
            got = _ours(files, fmt)()
            if got != steps:
                raise SystemExit(f"{layout}: the reader kept {got} of {steps} steps")
            name = f"minari_{layout}" if layout != "d4rl" else "d4rl_hdf5"
            ours = C.time_repeats(_dropped(_ours(files, fmt)), repeats)
            raw = C.time_repeats(_dropped(_raw(layout, files)), repeats)
            counts = {"episodes": len(eps), "files": len(files), **extra}
            a = C.record(f"{name}.read_map", "ours", n=steps, timing=ours, unit="steps/s", **counts)
            b = C.record(f"{name}.read_map", "raw", n=steps, timing=raw, unit="steps/s", **counts)
            lines += [C.emit(a), C.emit(b)]
            lines.append(C.emit({
                "bench": f"{name}.read_map", "impl": "ratio", "vs": "raw",
                "ratio": round(a["throughput"] / b["throughput"], 2),
                "ratio_best": round(a["throughput_best"] / b["throughput_best"], 2),
                "unit": "steps/s", "n_ours": steps, "n_rllib": None,
            }))  # fmt: skip
            C.log(f"{name}: ours {a['throughput']:,.0f} steps/s, raw {b['throughput']:,.0f}")
    return lines
