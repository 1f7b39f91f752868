"""Inputs on every store: ``process``, ``inspect``, ``convert`` and the listing read ``s3://`` and
``az://`` prefixes (real SeaweedFS and Azurite servers, ``tests/stores.py``) exactly as the same
files on the local disk: the same samples, the same numbers, committed folders through their
manifests, globs in name order, and a bad store in one line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.io.sources import expand_paths
from offline_prelearner.io.stores import locate

DATA = REPO / "datasets" / "cartpole-v1"
STORES = ("s3_store", "azure_store")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Any:
    """A fresh prefix on each store (skips where its server cannot be installed)."""
    return request.getfixturevalue(request.param)


def upload(local: Path, uri: str) -> str:
    """Copies a local file or folder to ``uri``; returns ``uri``."""
    dest = locate(uri)
    if local.is_file():
        dest.write_bytes(local.read_bytes())
    else:
        pafs.copy_files(
            str(local),
            dest.path,
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=dest.fs,
        )
    return uri


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "offline_prelearner", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def samples(out: Path) -> list[Any]:
    return [pq.read_table(f) for f in sorted((out / "samples").glob("*.parquet"))]


def same_numbers(a: dict[str, Any], b: dict[str, Any]) -> None:
    drop = ("path", "per_file", "seconds", "quarantine_file")
    assert {k: v for k, v in a.items() if k not in drop} == {
        k: v for k, v in b.items() if k not in drop
    }
    assert [{**f, "file": os.path.basename(f["file"])} for f in a["per_file"]] == [
        {**f, "file": os.path.basename(f["file"])} for f in b["per_file"]
    ]


# ------------------------------------------------------------------ listing
def test_listing_and_globs_as_on_disk(store: Any) -> None:
    rows = upload(DATA / "rows", f"{store}/rows")
    local = expand_paths(str(DATA / "rows"))
    got = expand_paths(rows)
    assert got == [f"{rows}/{os.path.basename(f)}" for f in local]
    assert expand_paths(f"{rows}/*-0000[0-1].parquet") == got[:2]
    assert expand_paths(f"{store}/**/*00003.parquet") == [got[3]]
    assert expand_paths(got[2]) == [got[2]]
    locate(f"{rows}/_SUCCESS").write_bytes(b"")
    locate(f"{rows}/.hidden.parquet").write_bytes(b"x")
    assert expand_paths(rows) == got
    with pytest.raises(FileNotFoundError, match="no data files"):
        expand_paths(f"{rows}/*.json")


def test_committed_folder_read_through_its_manifest(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "episodes"
    done = cli("convert", str(DATA / "rows"), "--to", "episodes", "--out", str(out))
    assert done.returncode == 0, done.stderr
    remote = upload(out, f"{store}/episodes")
    locate(f"{remote}/stray.parquet").write_bytes((out / "stats.json").read_bytes())
    listed = [f"{remote}/episodes/{os.path.basename(f)}" for f in expand_paths(str(out))]
    assert expand_paths(remote) == listed  # the data under its folder, OUT/episodes
    assert expand_paths(f"{remote}/episodes/*.parquet") == listed
    with pytest.raises(Exception, match="does not list it"):
        expand_paths(f"{remote}/stray.parquet")


# ------------------------------------------------------------------ the commands
def test_process_and_inspect_read_a_store_as_a_disk(store: Any, tmp_path: Path) -> None:
    rows = upload(DATA / "rows", f"{store}/rows")
    for src, out in ((str(DATA / "rows"), tmp_path / "local"), (rows, tmp_path / "remote")):
        done = cli("process", src, "--out", str(out), "--engine", "local", env=store.env)
        assert done.returncode == 0, done.stderr
    a, b = samples(tmp_path / "local"), samples(tmp_path / "remote")
    assert a and len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))
    shown = [cli("inspect", p, "--json", env=store.env) for p in (str(DATA / "rows"), rows)]
    assert all(s.returncode == 0 for s in shown), shown[1].stderr
    same_numbers(json.loads(shown[0].stdout), json.loads(shown[1].stdout))


def test_convert_and_config_from_a_store(s3_store: Any, tmp_path: Path) -> None:
    episodes = upload(DATA / "episodes", f"{s3_store}/episodes")
    config = upload(_yaml(tmp_path), f"{s3_store}/c.yaml")
    done = cli("convert", episodes, "--to", "rows", "--out", str(tmp_path / "r"), env=s3_store.env)
    assert done.returncode == 0, done.stderr
    local = cli("convert", str(DATA / "episodes"), "--to", "rows", "--out", str(tmp_path / "l"))
    assert local.returncode == 0, local.stderr
    a = [pq.read_table(f) for f in sorted((tmp_path / "l" / "rows").glob("*.parquet"))]
    b = [pq.read_table(f) for f in sorted((tmp_path / "r" / "rows").glob("*.parquet"))]
    assert a and len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))
    out = tmp_path / "p"
    done = cli(
        "process", episodes, "--config", config, "--out", str(out), "--engine", "local",
        env=s3_store.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _yaml(tmp_path: Path) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text("seed: 7\n")
    return p


@pytest.mark.ray
def test_process_ray_engine_from_a_store(s3_store: Any, tmp_path: Path) -> None:
    rows = upload(DATA / "rows", f"{s3_store}/rows")
    for src, out in ((str(DATA / "rows"), tmp_path / "local"), (rows, tmp_path / "remote")):
        done = cli("process", src, "--out", str(out), "--engine", "ray", env=s3_store.env)
        assert done.returncode == 0, done.stderr
    a, b = samples(tmp_path / "local"), samples(tmp_path / "remote")
    assert a and len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------ the library's entry points
def test_run_pipeline_takes_a_config_on_a_store(s3_store: Any, tmp_path: Path) -> None:
    """``run_pipeline(path, config="s3://.../c.yaml")`` reads the file through the path layer:
    the same samples as the same config given as an object."""
    from offline_prelearner.config import PreLearnerConfig
    from offline_prelearner.jobs.batch.batch_job import run_pipeline

    cfg = PreLearnerConfig().with_updates({"n_step": 3, "seed": 7})
    cfg.save(tmp_path / "c.yaml")
    uri = upload(tmp_path / "c.yaml", f"{s3_store}/c.yaml")
    for config, out in ((cfg, tmp_path / "a"), (uri, tmp_path / "b")):
        run_pipeline(str(DATA / "rows"), config, out_dir=out, engine="local")
    a, b = samples(tmp_path / "a"), samples(tmp_path / "b")
    assert a and len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


def test_a_dict_config_is_made_a_config() -> None:
    """A plain dict (sections, flat fields, ``section.field``) is what the entry points turn
    into a config before they read it (it once failed with AttributeError in resolve_config)."""
    from offline_prelearner.jobs.preflight import job_config, prepare

    _, cfg, _ = prepare(str(DATA / "rows"), {"n_step": 3})
    assert cfg.sample.n_step == 3 and cfg.read.format == "rows"
    both = job_config({"seed": 4, "sample": {"n_step": 2}, "gamma": 0.5, "ray.block_mb": 8})
    assert (both.seed, both.sample.n_step, both.sample.gamma, both.ray.block_mb) == (4, 2, 0.5, 8)


_STREAMS = """
import json, sys, threading
from offline_prelearner.jobs.stream.learner_stream import iter_learner_batches
from offline_prelearner.jobs.stream.learner_stream import split_learner_batches

rows, config, local = sys.argv[1:4]
shares = split_learner_batches(rows, config, 2, batch_rows=500)
seen = [[] for _ in shares]

def drain(i):
    for batch in shares[i]:
        sb = batch["default_policy"]
        seen[i] += zip(sb["eps_id"].tolist(), sb["t"].tolist(), strict=True)

threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(shares))]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=300)
keys = [k for share in seen for k in share]
stream = iter_learner_batches(local, {"n_step": 3, "sample_all": True, "batch_size": 500})
print(json.dumps({"rows": len(keys), "distinct": len(set(keys)),
                  "stream": sum(len(b["default_policy"]) for b in stream)}))
"""


@pytest.mark.ray
def test_learner_split_from_a_store(s3_store: Any, tmp_path: Path) -> None:
    """``split_learner_batches`` on a store's prefix with its config on the store: the shares
    together see every row once; ``iter_learner_batches`` takes a plain dict config. (A fresh
    process: its Ray workers get the store's settings from the environment.)"""
    from offline_prelearner.config import PreLearnerConfig

    rows = upload(DATA / "rows", f"{s3_store}/rows")
    PreLearnerConfig().with_updates({"sample_all": True, "batch_size": 500}).save(
        tmp_path / "c.yaml"
    )
    config = upload(tmp_path / "c.yaml", f"{s3_store}/c.yaml")
    done = subprocess.run(
        [sys.executable, "-c", _STREAMS, rows, config, str(DATA / "rows")],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=REPO,
        env={**os.environ, **s3_store.env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"rows": 5000, "distinct": 5000, "stream": 5000}


# ------------------------------------------------------------------ whole-file formats
def test_minari_and_d4rl_from_a_store(s3_store: Any, tmp_path_factory: Any) -> None:
    from fixtures import sessions

    from offline_prelearner.config import ValidateConfig
    from offline_prelearner.jobs.inspection import inspect_path

    ends_open = ValidateConfig(require_done=False)  # d4rl_open_end's last episode has no end

    paths = [Path(sessions.d4rl_cases(tmp_path_factory)["d4rl_open_end"].path)]
    backends: dict[str, Path] = {}
    for case in sessions.minari_cases(tmp_path_factory).values():
        if not case.features:
            backends.setdefault(case.data_format, Path(case.path))
    paths += backends.values()  # one plain dataset of each backend: hdf5, arrow, parquet
    for n, local in enumerate(paths):
        remote = upload(local, f"{s3_store}/{n}/{local.name}")
        a, b = (inspect_path(p, validate=ends_open).to_dict() for p in (str(local), remote))
        same_numbers(a, b)


def test_minari_output_committed_to_s3_inspects_as_on_disk(
    s3_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Minari output committed to a store lists its data files through its manifest (under
    the job's files_dir), not data/metadata.json: inspect reads the numbers the same output on
    disk gives."""
    from offline_prelearner.jobs.convert.config import ConvertConfig
    from offline_prelearner.jobs.convert.path import convert
    from offline_prelearner.jobs.inspection import inspect_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = ConvertConfig(to="minari", env_id="CartPole-v1")
    local, remote = str(tmp_path / "minari"), f"{s3_store}/minari"
    for out in (local, remote):
        convert(str(DATA / "episodes"), out, config)
    files = expand_paths(remote)
    assert [f.rsplit("/", 1)[-1] for f in files] == ["main_data.hdf5"]
    a, b = (inspect_path(p).to_dict() for p in (local, remote))
    same_numbers(a, b)


# ------------------------------------------------------------------ bad stores
@pytest.mark.parametrize(
    ("where", "env", "said"),
    [
        ("s3://no-such-bucket-q/x", {}, "no such bucket"),
        ("{store}/nothing-here", {}, "no data files"),
        ("{store}/rows", {"AWS_SECRET_ACCESS_KEY": "wrong"}, "credentials"),
        ("{store}/rows", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "cannot be reached"),
    ],
)
def test_a_bad_store_is_one_line_and_exit_2(
    s3_store: Any, where: str, env: dict[str, str], said: str
) -> None:
    upload(DATA / "rows", f"{s3_store}/rows")
    t0 = time.monotonic()
    done = cli("inspect", where.format(store=s3_store), env={**s3_store.env, **env})
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert time.monotonic() - t0 < 120  # a hang guard: a store client's retries go on for minutes


def test_a_minari_dataset_on_a_store_declares_its_spaces(s3_store: Any, tmp_path: Path) -> None:
    """The ``data`` folder of a Minari file on a store stays its URI, so its metadata is read:
    a report holds the data to the declared action space as on disk (Discrete(3), one action
    never taken)."""
    import gymnasium as gym
    import numpy as np

    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.io.formats.minari.dataset import data_dir_of, read_metadata
    from offline_prelearner.io.formats.minari.writer import write_minari_dataset
    from offline_prelearner.report.build import report

    pytest.importorskip("h5py")
    eps = [
        Episode(
            id=k,
            observations=np.arange(5 * 2, dtype=np.float32).reshape(5, 2),
            actions=np.array([0, 1, 0, 1]),
            rewards=np.ones(4, np.float32),
            terminated=True,
        )
        for k in range(3)
    ]
    write_minari_dataset(tmp_path / "ds", eps, "ns/three-v0", action_space=gym.spaces.Discrete(3))
    remote = upload(tmp_path / "ds", f"{s3_store}/ds")
    [file] = expand_paths(remote)
    data = data_dir_of(file)
    assert data is not None and str(data) == f"{remote}/data"
    assert read_metadata(data).action_space["n"] == 3
    got = {}
    for name, path in (("local", str(tmp_path / "ds")), ("remote", remote)):
        got[name] = report(path, tmp_path / f"{name}.html").anomalies
    assert any("never taken" in a for a in got["local"]), got["local"]
    assert got["remote"] == got["local"]
