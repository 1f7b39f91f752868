"""The package as a user installs it: the wheel, in a fresh venv, run from another folder.

Everything else in the suite runs against the editable install of this checkout, where files the
package reads relative to the repository (the schema presets in ``schemas/``) are found whether or
not they are package data. Here the wheel is built from a copy of the checkout's files (what a
fresh clone holds; the checkout itself is not written to), installed into a new venv, and the
README's first command, ``inspect`` and a ``--schema d4rl`` preset run there, from a working
directory outside the repository.

To stay fast, the wheel is installed ``--no-deps`` and the dependencies come from this venv's
``site-packages`` through a ``.pth`` line (a directory line only adds that directory to
``sys.path``; the editable install's own ``.pth`` hook there is not run). ``.ci/run`` does the
honest version: the wheel with its dependencies into ``.venv-wheel``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

PACKAGE = "offline_prelearner"


def _sh(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _checkout_files() -> list[str]:
    """The checkout's files a fresh clone (plus uncommitted work) holds: nothing git ignores."""
    out = _sh("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    return sorted({f for f in out.split("\0") if f and (REPO / f).is_file()})


def test_pyproject_lists_every_package() -> None:
    """``packages`` in pyproject.toml is explicit (a mapped folder cannot be found by
    ``packages.find``): a sub-package left out of it would be missing from the wheel."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / PACKAGE).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert config["package-dir"] == {f"{PACKAGE}.schemas": "schemas"}
    assert set(config["packages"]) == found | {f"{PACKAGE}.schemas"}, (
        "add the new package to [tool.setuptools] packages in pyproject.toml"
    )


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the built wheel, a fresh venv holding it)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("builds from the checkout's files: needs git and a git checkout")
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for name in _checkout_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    _sh(sys.executable, "-m", "pip", "wheel", src, "--no-deps", "-q", "-w", root / "dist", cwd=root)
    (wheel,) = (root / "dist").glob(f"{PACKAGE}-*.whl")
    venv = root / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    python = venv / "bin" / "python"
    _sh(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        wheel,
        cwd=root,
    )
    site = Path(
        _sh(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root
        ).strip()
    )
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (site / "_test_wheel_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return wheel, venv


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RAY_DATA_LOG_LEVEL"] = "ERROR"
    return env


@pytest.mark.slow
def test_wheel_holds_the_package_and_its_presets(wheel_venv: tuple[Path, Path]) -> None:
    wheel, _ = wheel_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    presets = sorted(p.name for p in (REPO / "schemas").glob("*.json"))
    assert {f"{PACKAGE}/schemas/{p}" for p in presets} <= names
    outputs = sorted(p.name for p in (REPO / PACKAGE / "io" / "json_schemas").glob("*.json"))
    assert len(outputs) == 3 and {f"{PACKAGE}/io/json_schemas/{p}" for p in outputs} <= names
    modules = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / PACKAGE).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules <= names, sorted(modules - names)
    assert not any(n.startswith(("schemas/", "tests/", "datasets/")) for n in names)


@pytest.mark.slow
def test_installed_wheel_runs_the_readme_from_elsewhere(
    wheel_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    _, venv = wheel_venv
    python, cli = venv / "bin" / "python", venv / "bin" / "offline-prelearner"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env()

    # the package imported is the wheel's, in the new venv: not this checkout
    probe = (
        "import json, offline_prelearner as op; from offline_prelearner.io.schema import "
        "available_schemas, load_schema, schemas_dir; op.OfflinePreLearner(); "
        "from offline_prelearner.io.output_schema import output_schema; "
        "print(json.dumps([op.__file__, str(schemas_dir()), available_schemas(), "
        "load_schema('d4rl').name, output_schema('manifest')['title']]))"
    )
    file, presets_dir, presets, d4rl, manifest_schema = json.loads(
        _sh(python, "-c", probe, cwd=elsewhere, env=env)
    )
    assert manifest_schema == "_manifest.json: a committed output"  # the output schemas' data
    inside = venv.resolve()
    assert Path(file).resolve().is_relative_to(inside), file
    assert Path(presets_dir).resolve().is_relative_to(inside), presets_dir
    assert presets == sorted(p.stem for p in (REPO / "schemas").glob("*.json")) and d4rl == "d4rl"
    assert _sh(cli, "--version", cwd=elsewhere, env=env).split() == [
        "offline-prelearner",
        version(PACKAGE),
    ]

    # the README's first command, from another working directory
    rows = REPO / "datasets" / "cartpole-v1" / "rows"
    out = tmp_path / "out"
    _sh(cli, "process", rows, "--out", out, "--set", "n_step=3", cwd=elsewhere, env=env)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rows_in"] > 0 and stats["samples_written"] > 0 and stats["rows_balance"]
    assert (out / "_manifest.json").is_file() and list((out / "samples").glob("*.parquet"))

    report = json.loads(_sh(cli, "inspect", rows, "--json", cwd=elsewhere, env=env))
    assert report["format"] == "rows" and report["rows"] == stats["rows_in"]

    # a preset by name: D4RL-style columns, two episodes (a terminal, then a timeout)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(7, 3)).astype(np.float32)
    d4rl_rows = pa.table(
        {
            "observations": list(obs[:-1]),
            "actions": rng.integers(0, 2, 6),
            "rewards": np.ones(6),
            "next_observations": list(obs[1:]),
            "terminals": [False, False, True, False, False, False],
            "timeouts": [False, False, False, False, False, True],
        }
    )
    pq.write_table(d4rl_rows, elsewhere / "d4rl.parquet")
    report = json.loads(
        _sh(cli, "inspect", "d4rl.parquet", "--schema", "d4rl", "--json", cwd=elsewhere, env=env)
    )
    assert (report["episodes"], report["terminated"], report["truncated"]) == (2, 1, 1)
