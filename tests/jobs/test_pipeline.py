"""The batch job on a real local Ray instance: stats.json, sample_all, caps, CLI, grouping."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.cli import main
from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import ConfigError
from offline_prelearner.jobs.batch.batch_job import run_pipeline
from offline_prelearner.jobs.stream.learner_stream import iter_learner_batches
from offline_prelearner.prelearner import OfflinePreLearner
from offline_prelearner.replay.batch import MultiAgentBatch

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROWS = REPO / "datasets/cartpole-v1/rows"
EPISODES = REPO / "datasets/cartpole-v1/episodes"


def _samples(out: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(out / "samples")
    return {c: table.column(c).to_numpy() for c in ("eps_id", "t", "rewards", "n_step")}


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_batch_job_writes_samples_and_balanced_stats(
    ray_local: Any, tmp_path: Path, engine: str
) -> None:
    cfg = PreLearnerConfig().with_updates(  # replay sampling (the batch job's default: all)
        {"n_step": 3, "train_batch_size": 100, "batch_size": 1000, "sample_all": False}
    )
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path, engine=engine)
    st = json.loads((tmp_path / "stats.json").read_text())
    assert st["engine"] == engine
    if engine == "ray":
        assert st["ray_cluster"]["nodes"] >= 1 and st["ray_cluster"]["cpus"] > 0
    assert st == json.loads(json.dumps(res.stats))
    manifest = json.loads((tmp_path / "_manifest.json").read_text())
    assert manifest["complete"] and manifest["samples_written"] == st["samples_written"]
    assert sorted(f["name"] for f in manifest["files"]) == sorted(
        p.name for p in (tmp_path / "samples").iterdir()
    )
    assert st["rows_in"] == 5000 and st["rows_balance"] and st["rows_rejected"] == {}
    assert st["files_read"] == 5 and st["format"] == "rows"
    assert st["samples_written"] == 100 * st["batches"] and st["batches"] >= 5
    table = pq.read_table(tmp_path / "samples")
    ma = MultiAgentBatch.from_rows(table)
    sb = ma["default_policy"]
    assert len(sb) == st["samples_written"] and sb["obs"].shape[1:] == (4,)
    assert (sb["n_step"] <= 3).all()


def test_sample_all_writes_each_transition_once(ray_local: Any, tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 700})
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path)
    s = _samples(tmp_path)
    assert res.stats["samples_written"] == 5000 == len(s["eps_id"])
    assert len(set(zip(s["eps_id"], s["t"], strict=True))) == 5000
    assert res.stats["pending_fragments"] == 0


def test_num_samples_caps_the_output(ray_local: Any, tmp_path: Path) -> None:
    cfg = PreLearnerConfig().with_updates({"num_samples": 300, "train_batch_size": 256})
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path)
    assert res.stats["samples_written"] == 300


def test_units_in_parallel_on_ray_write_what_one_process_writes(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One unit per file: episodes cut by file boundaries are read by the unit of their first file.
    monkeypatch.setenv("OFFLINE_PRELEARNER_UNIT_MIN_ROWS", "1")
    cfg = PreLearnerConfig().with_updates({"sample_all": True, "n_step": 2, "concurrency": 2})
    res = run_pipeline(ROWS, cfg, out_dir=tmp_path / "ray", engine="ray")
    run_pipeline(ROWS, cfg, out_dir=tmp_path / "local", engine="local")
    assert res.stats["units"] == 5 and res.stats["rows_in"] == 5000 and res.stats["rows_balance"]
    s = _samples(tmp_path / "ray")
    assert len(set(zip(s["eps_id"], s["t"], strict=True))) == 5000
    files = [
        json.loads((tmp_path / d / "_manifest.json").read_text())["files"] for d in ("ray", "local")
    ]
    assert files[0] == files[1]  # names, rows and sha256: the same bytes


def test_learner_iterates_batches_from_msgpack_episodes(ray_local: Any) -> None:
    cfg = PreLearnerConfig().with_updates({"format": "episodes", "train_batch_size": 64})
    batches = list(iter_learner_batches(EPISODES, cfg))
    assert batches and all(isinstance(b, MultiAgentBatch) for b in batches)
    assert sum(len(b["default_policy"]) for b in batches) % 64 == 0


def test_cli_process_with_set_values(ray_local: Any, tmp_path: Path, capsys) -> None:
    code = main(
        [
            "process",
            str(ROWS),
            "--out",
            str(tmp_path),
            "--set",
            "n_step=[1,3]",
            "--set",
            "gamma=0.5",
            "--set",
            "train_batch_size=50",
            "--json",
        ]
    )
    # Ray may print its own warnings to stdout (the raylet's); our JSON is the last line.
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["rows_in"] == 5000 and out["rows_balance"]
    st = json.loads((tmp_path / "stats.json").read_text())
    assert st["config"]["sample"]["n_step"] == [1, 3] and st["config"]["sample"]["gamma"] == 0.5
    assert set(np.unique(_samples(tmp_path)["n_step"])) <= {1, 2, 3}


def test_cli_process_bad_set_is_a_clear_error(tmp_path: Path, capsys) -> None:
    code = main(["process", str(ROWS), "--out", str(tmp_path), "--set", "n_stepp=3"])
    assert code == 2 and "did you mean n_step" in capsys.readouterr().err


# ---------------------------------------------------------------- correctness against the input
def _episodes_by_id(rows_dir: Path) -> dict[str, dict[str, list]]:
    """The input episodes, rebuilt by a plain loop over the rows (ordered by t)."""
    table = pq.read_table(rows_dir).to_pydict()
    eps: dict[str, dict[str, list]] = {}
    order = sorted(range(len(table["t"])), key=lambda i: (table["eps_id"][i], table["t"][i]))
    for i in order:
        e = eps.setdefault(
            table["eps_id"][i], {k: [] for k in ("t", "r", "obs", "new_obs", "term", "trunc")}
        )
        e["t"].append(table["t"][i])
        e["r"].append(table["rewards"][i])
        e["obs"].append(table["obs"][i])
        e["new_obs"].append(table["new_obs"][i])
        e["term"].append(table["terminateds"][i])
        e["trunc"].append(table["truncateds"][i])
    return eps


def test_every_output_row_matches_a_plain_loop_n_step(ray_local: Any, tmp_path: Path) -> None:
    gamma, n = 0.9, 3
    cfg = PreLearnerConfig().with_updates(
        {"n_step": n, "gamma": gamma, "train_batch_size": 200, "batch_size": 1000, "seed": 3}
    )
    run_pipeline(ROWS, cfg, out_dir=tmp_path)
    # Read as a learner does (the job writes tensors in the fast layout; from_rows decodes it).
    sb = MultiAgentBatch.from_rows(pq.read_table(tmp_path / "samples"))["default_policy"]
    out = {k: list(sb[k]) for k in sb}
    eps = _episodes_by_id(ROWS)
    assert len(out["eps_id"]) >= 1000
    for i in range(len(out["eps_id"])):
        e, t = eps[out["eps_id"][i]], out["t"][i]
        k = e["t"].index(t)
        steps = min(n, len(e["t"]) - k)
        reward = sum(gamma**j * e["r"][k + j] for j in range(steps))
        assert out["n_step"][i] == steps
        assert out["rewards"][i] == pytest.approx(reward, rel=1e-6)
        assert out["obs"][i] == pytest.approx(e["obs"][k])
        assert out["new_obs"][i] == pytest.approx(e["new_obs"][k + steps - 1])
        last = k + steps - 1 == len(e["t"]) - 1
        assert out["terminateds"][i] == (last and e["term"][-1])
        assert out["truncateds"][i] == (last and e["trunc"][-1])


# ---------------------------------------------------------------- RLlib's own files
@pytest.mark.rllib_data
@pytest.mark.parametrize(
    ("name", "fmt", "rows_in"),
    [
        ("cartpole-v1_rows_uncompressed.parquet", "rows", 295),
        ("cartpole-v1_episodes_msgpack.parquet", "episodes", 12),
        ("cartpole-v1_old_stack_json_uncompressed.json", "sample_batches", 295),
    ],
)
def test_rllib_recorded_files_end_to_end(
    ray_local: Any, shared_data: Path, tmp_path: Path, name: str, fmt: str, rows_in: int
) -> None:
    cfg = PreLearnerConfig().with_updates({"format": "auto", "sample_all": True})
    res = run_pipeline(shared_data / name, cfg, out_dir=tmp_path, engine="ray")
    assert res.stats["format"] == fmt and res.stats["rows_in"] == rows_in
    # sample_all: one sample per timestep (the msgpack file's 12 episodes hold 324 steps).
    assert res.stats["samples_written"] == (324 if fmt == "episodes" else 295)
    assert res.stats["rows_balance"] and res.stats["pending_fragments"] == 0


# ---------------------------------------------------------------- plug-ins and errors
PLUGIN = """
import dataclasses
from offline_prelearner import OfflinePreLearner

class Doubled(OfflinePreLearner):
    def postprocess_episodes(self, columns):
        return dataclasses.replace(columns, rewards=columns.rewards * 2.0)
"""


def test_cli_custom_prelearner_by_import_path(
    ray_local: Any, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_plugins.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    code = main(
        [
            "process",
            str(ROWS),
            "--out",
            str(out),
            "--prelearner",
            "my_plugins:Doubled",
            "--set",
            "train_batch_size=64",
            "--json",
        ]
    )
    assert code == 0, capsys.readouterr().err
    rewards = pq.read_table(out / "samples").column("rewards").to_numpy()
    assert set(np.unique(rewards)) == {2.0}  # CartPole pays 1 per step; the subclass doubled it


def test_cli_bad_data_under_raise_prints_the_readers_message(
    ray_local: Any, tmp_path: Path, capsys
) -> None:
    import pyarrow as pa

    t = pq.read_table(next(ROWS.glob("*.parquet")))
    rewards = t.column("rewards").to_numpy().copy()
    rewards[7] = np.nan
    bad_id = t.column("eps_id")[7].as_py()
    pq.write_table(
        t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards)),
        tmp_path / "bad.parquet",
    )
    code = main(
        [
            "process",
            str(tmp_path / "bad.parquet"),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "on_invalid=raise",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and bad_id in err and "reward" in err
    assert "Traceback" not in err.splitlines()[-1]


def test_bad_config_fails_before_ray_starts(tmp_path: Path) -> None:
    from offline_prelearner.errors import ConfigError

    cfg = PreLearnerConfig(connectors=("no_such_connector",))
    with pytest.raises(ConfigError, match="no_such_connector"):
        run_pipeline(ROWS, cfg, out_dir=tmp_path)


def test_footer_readers_scale_with_the_number_of_files() -> None:
    from offline_prelearner.jobs.stream.learner_stream import footer_readers

    cfg = PreLearnerConfig()
    assert [footer_readers(cfg, n) for n in (1, 10, 11, 95, 320, 10_000)] == [1, 1, 2, 10, 32, 32]
    assert footer_readers(cfg.with_updates({"ray.footer_readers": 5}), 1000) == 5
    with pytest.raises(ConfigError, match=r"ray\.footer_readers"):
        cfg.with_updates({"ray.footer_readers": 0})


def test_read_sets_footer_actors_only_for_the_call_and_respects_the_user(
    ray_local: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from offline_prelearner.jobs.stream.learner_stream import FOOTER_ACTORS_ENV, _read

    seen: list[str | None] = []
    real = ray.data.read_parquet

    def spy(files: Any, **kw: Any) -> Any:
        seen.append(os.environ.get(FOOTER_ACTORS_ENV))
        return real(files, **kw)

    monkeypatch.setattr(ray.data, "read_parquet", spy)
    monkeypatch.delenv(FOOTER_ACTORS_ENV, raising=False)
    files = sorted(str(p) for p in ROWS.glob("*.parquet"))
    assert _read(ray, files, PreLearnerConfig()).count() == 5000
    assert FOOTER_ACTORS_ENV not in os.environ
    monkeypatch.setenv(FOOTER_ACTORS_ENV, "3")
    _read(ray, files, PreLearnerConfig())
    assert seen == ["1", "3"]


def test_arrow_blocks_match_what_ray_builds_from_the_dicts(ray_local: Any) -> None:
    from ray.data.block import BlockAccessor

    from offline_prelearner.jobs.stream.learner_stream import to_arrow_block

    table = pq.read_table(sorted(ROWS.glob("*.parquet")))
    pre = OfflinePreLearner(PreLearnerConfig().with_updates({"read.format": "rows", "n_step": 3}))
    outs = [o for start in (0, 1000) for o in pre(table.slice(start, 1000))]
    assert outs
    for out in outs:
        ours, rays = to_arrow_block(out), BlockAccessor.batch_to_block(out)
        assert ours.schema == rays.schema
        assert ours.equals(rays)
    mixed = {"eps_id": np.array(["a", 1], dtype=object), "t": np.arange(2)}
    assert to_arrow_block(mixed) is mixed  # Ray converts what has no single Arrow type


def test_an_address_where_no_cluster_listens_fails_in_seconds() -> None:
    import socket
    import time

    from offline_prelearner.jobs.session.ray_session import check_cluster_address

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ConfigError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        check_cluster_address(f"127.0.0.1:{port}", timeout=2.0)
    assert time.monotonic() - start < 120  # a hang guard (ray.init would retry for minutes)
    with pytest.raises(ConfigError, match="must be host:port"):
        check_cluster_address("nonsense")
    for left_to_ray in ("auto", "local", "ray://head:10001"):
        check_cluster_address(left_to_ray)
    with socket.socket() as s:  # something listens: passes
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_cluster_address(f"127.0.0.1:{s.getsockname()[1]}")


def test_datasets_carry_their_settings_and_leave_the_callers_context_alone(ray_local: Any) -> None:
    import ray

    from offline_prelearner.jobs.stream.learner_stream import build_dataset

    ctx = ray.data.DataContext.get_current()
    before = (ctx.execution_options.preserve_order, ctx.target_max_block_size)
    cfg = PreLearnerConfig().with_updates({"ray.block_mb": 3, "ray.read": "ray"})
    ds = build_dataset(ROWS, cfg)
    assert ds.context.target_max_block_size == 3 * 2**20
    # The actors read their own files: the only blocks are outputs, never cut inside a batch.
    ds_actor = build_dataset(ROWS, cfg.with_updates({"ray.read": "actor"}))
    assert ds_actor.context.target_max_block_size == 256 * 2**20
    assert ds.context.execution_options.preserve_order
    assert (ctx.execution_options.preserve_order, ctx.target_max_block_size) == before
    assert ds.count() > 0
