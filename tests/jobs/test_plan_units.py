"""The plan's columnar ownership (plan.py) against the per-key loop it replaced, kept here as
the slow reference: the same units and parts for any spread of episodes over files; the units
read every row once (run.py's ``read_part``), and each unit's record names its CPU seconds."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_reference import _check_inputs as _reference_check_inputs

from offline_prelearner import run_pipeline
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.jobs.batch import plan as P
from offline_prelearner.jobs.batch.run import read_unit, units_by_node
from offline_prelearner.jobs.batch.scan import row_keys
from offline_prelearner.jobs.records import UnitRecord

CONFIG = PreLearnerConfig().with_updates({"format": "rows"})
IDS = ["a", "b", "c", "10", "9", "é", ""]


def reference_units(files: list[str], min_rows: int) -> tuple[P.Unit, ...]:
    """The plan's units as the per-key Python loop computed them (before the columnar plan)."""
    inputs, refused, _ = _reference_check_inputs(files, CONFIG)
    keys = P._key_columns(CONFIG, pq.read_schema(files[0]).names)
    unit_of = P._group_files(inputs, min_rows)
    n_units = unit_of[-1] + 1
    owner: dict[str, int] = {}
    foreign: list[list[str]] = [[] for _ in files]
    ahead: list[dict[int, tuple[list[str], int]]] = [{} for _ in range(n_units)]
    for j, f in enumerate(files):
        if inputs[j].rows == 0 or j in refused:
            continue
        k = row_keys(pq.read_table(f, columns=list(keys)), keys)
        if not len(k):
            continue
        last = (
            pa.table({"k": k, "i": pa.array(np.arange(len(k), dtype=np.int64))})
            .group_by("k", use_threads=False)
            .aggregate([("i", "max")])
        )
        here = unit_of[j]
        for key, stop in zip(
            last.column("k").to_pylist(), last.column("i_max").to_numpy(), strict=True
        ):
            o = owner.setdefault(key, here)
            if o != here:
                foreign[j].append(key)
                got, end = ahead[o].get(j, ([], 0))
                got.append(key)
                ahead[o][j] = (got, max(end, int(stop) + 1))
    units = []
    for u in range(n_units):
        parts = [
            P.Part(i, drop=tuple(sorted(foreign[i]))) for i in range(len(files)) if unit_of[i] == u
        ]
        for j in sorted(ahead[u]):
            got, end = ahead[u][j]
            parts.append(P.Part(j, stop=end, keep=tuple(sorted(got))))
        units.append(P.Unit(u, tuple(parts)))
    return tuple(units)


def _write(folder: Path, spread: list[list[tuple[str, int | None]]], agents: bool) -> list[str]:
    paths = []
    for i, rows in enumerate(spread):
        cols: dict[str, pa.Array] = {
            "eps_id": pa.array([e for e, _ in rows], pa.string()),
            "obs": pa.array(np.arange(len(rows), dtype=np.float32)),
        }
        if agents:
            cols["agent_id"] = pa.array([a for _, a in rows], pa.int64())
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(pa.table(cols), path)
        paths.append(str(path))
    return paths


ROW = st.tuples(st.sampled_from(IDS), st.one_of(st.none(), st.integers(0, 2)))


@settings(max_examples=60, deadline=None)
@given(
    spread=st.lists(st.lists(ROW, max_size=12), min_size=1, max_size=6),
    agents=st.booleans(),
    min_rows=st.integers(1, 10),
)
def test_columnar_plan_matches_the_per_key_loop(
    spread: list[list[tuple[str, int | None]]], agents: bool, min_rows: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = _write(Path(tmp), spread, agents)
        plan = P.plan_units(files, CONFIG, min_rows=min_rows)
        assert plan.key_columns == (("eps_id", "agent_id") if agents else ("eps_id",))
        assert plan.units == reference_units(files, min_rows)


def test_an_episode_cut_over_three_units_is_read_by_its_first() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spread = [[("x", None), ("y", None)], [("y", None), ("z", None), ("y", None)]]
        files = _write(Path(tmp), [*spread, [("z", None), ("y", None), ("w", None)]], False)
        units = P.plan_units(files, CONFIG, min_rows=1).units
    assert units[0].parts == (
        P.Part(0),
        P.Part(1, stop=3, keep=("y",)),
        P.Part(2, stop=2, keep=("y",)),
    )
    assert units[1].parts == (P.Part(1, drop=("y",)), P.Part(2, stop=1, keep=("z",)))
    assert units[2].parts == (P.Part(2, drop=("y", "z")),)


@settings(max_examples=40, deadline=None)
@given(
    spread=st.lists(st.lists(ROW, max_size=12), min_size=1, max_size=5),
    min_rows=st.integers(1, 10),
    batch=st.integers(1, 5),
)
def test_units_read_every_row_once_and_each_episode_in_one_unit(
    spread: list[list[tuple[str, int | None]]], min_rows: int, batch: int
) -> None:
    # read_part filters for dropped episodes only up to the end of their look-aheads.
    with tempfile.TemporaryDirectory() as tmp:
        files = _write(Path(tmp), spread, False)
        plan = P.plan_units(files, CONFIG, min_rows=min_rows)
        read: list[tuple[int, int]] = []
        unit_of_key: dict[str, set[int]] = {}
        for unit in plan.units:
            for chunk, file_idx, rows in read_unit(plan, unit, batch):
                read += zip(file_idx.tolist(), rows.tolist(), strict=True)
                for key in chunk.column("eps_id").to_pylist():
                    unit_of_key.setdefault(key, set()).add(unit.index)
    assert sorted(read) == [(i, r) for i, rows in enumerate(spread) for r in range(len(rows))]
    assert all(len(units) == 1 for units in unit_of_key.values())


def test_each_node_names_the_cpu_seconds_its_units_took(tmp_path: Path) -> None:
    rows = REPO / "datasets/cartpole-v1/rows"
    stats = run_pipeline(rows, {"sample": {"sample_all": True}}, out_dir=tmp_path / "out").stats
    [node] = stats["nodes"]
    assert 0 < node["cpu_seconds"] < stats["wall_seconds"] * 4
    bare = {"job_id": "J", "inputs": [], "files": [], "samples": 0, "stats": {"ledger": {}}}
    records = [
        UnitRecord.from_dict({**bare, "unit": 0, "cpu_seconds": 0.25}, "test"),
        UnitRecord.from_dict({**bare, "unit": 1, "cpu_seconds": 0.5}, "test"),
        UnitRecord.from_dict({**bare, "unit": 2}, "test"),
    ]
    assert units_by_node(records)[0]["cpu_seconds"] == 0.75
