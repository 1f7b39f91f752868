"""Shared fixtures and helpers for the whole test suite.

* ``REPO``, ``TESTS`` -- the repository root and this folder: the one place a test finds a file
  of the repository (``REPO / "datasets"``, ``"examples"``...), whatever folder the test sits in
  (``from conftest import REPO``).
* ``shared_data`` -- the folder of files RLlib 2.60 wrote (``shared/data/rllib-2.60`` next to the
  repository, or ``$OFFLINE_PRELEARNER_SHARED_DATA``); tests using it skip when it is absent.
* ``make_episode(...)`` -- an episode factory with distinct, recognisable observations (also a
  fixture of the same name).
* ``random_episodes(...)`` -- a Hypothesis strategy for lists of episodes that can share one
  dataset (same obs shape and dtype across episodes, unique ``(id, agent_id)``).
* ``episodes_to_columns(...)`` -- episodes as row columns (one transition per row) in RLlib's
  names, optionally with ``t``; ``to_table(...)`` turns such columns into an Arrow table.
* ``ray_local`` -- a session-wide local Ray instance (1 CPU, no dashboard) for ``ray`` tests.
* ``s3_store`` / ``azure_store`` -- a fresh, empty prefix on a real store (SeaweedFS's S3, Azurite)
  as a URI (``s3://bucket/<test>-<n>``, ``az://container/<test>-<n>``), with the store's
  variables set in ``os.environ`` for the test; ``.env`` holds them for what the test starts
  (``subprocess.run(..., env={**os.environ, **store.env})``; Ray workers started before the test
  do not see the test's environment: ``runtime_env={"env_vars": store.env}``). The servers
  (``s3_server``, ``azure_server``, one per session, ``tests/stores.py``) skip the test, saying
  what to install, where ``weed`` or Azurite is absent.

Import the plain helpers with ``from conftest import make_episode, random_episodes``.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SHARED_DATA_ENV = "OFFLINE_PRELEARNER_SHARED_DATA"


def shared_data_dir() -> Path:
    """Where the RLlib-written files are expected (may not exist)."""
    env = os.environ.get(SHARED_DATA_ENV)
    if env:
        return Path(env)
    return REPO.parent / "shared" / "data" / "rllib-2.60"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests using ``shared_data`` get the ``rllib_data`` marker (``-m "not rllib_data"``)."""
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.rllib_data)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(
            f"RLlib 2.60 data folder {str(path)!r} is absent (set ${SHARED_DATA_ENV} to its path)"
        )
    return path


# ---------------------------------------------------------------------------------------------
# episodes
# ---------------------------------------------------------------------------------------------
def make_episode(
    length: int = 5,
    *,
    id: Any = "ep",
    obs_shape: Sequence[int] = (3,),
    obs_dtype: Any = np.float32,
    act_shape: Sequence[int] = (),
    terminated: bool = True,
    truncated: bool = False,
    t_started: int = 0,
    agent_id: Any = None,
    module_id: Any = None,
    extras: Sequence[str] = (),
    infos: bool = False,
    seed: int = 0,
) -> Episode:
    """An episode of ``length`` steps; consecutive observations differ in every element.

    Observation ``k`` is a seeded random start plus ``k``. ``extras`` names per-step float
    columns; ``infos`` adds ``{"step": t}`` dicts (reset info first).
    """
    rng = np.random.default_rng(seed)
    start = (rng.standard_normal(tuple(obs_shape)) * 10).astype(obs_dtype)
    steps = np.arange(length + 1).reshape(-1, *([1] * len(obs_shape))).astype(obs_dtype)
    obs = start + steps  # consecutive observations differ in every element
    actions = rng.integers(0, 4, (length, *act_shape)).astype(np.int64)
    rewards = rng.standard_normal(length)
    ex = {name: rng.standard_normal(length) for name in extras}
    info_list = [{"step": t_started + k} for k in range(length + 1)] if infos else None
    return Episode(
        id=id,
        observations=obs,
        actions=actions,
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        agent_id=agent_id,
        module_id=module_id,
        t_started=t_started,
        extras=ex,
        infos=info_list,
    )


@pytest.fixture(name="make_episode")
def make_episode_fixture() -> Any:
    return make_episode


@st.composite
def random_episodes(
    draw: Any,
    *,
    min_episodes: int = 1,
    max_episodes: int = 6,
    max_len: int = 8,
    agents: bool = True,
    any_start: bool = False,
    extras: Sequence[str] = (),
) -> list[Episode]:
    """Episodes that can live in one dataset: shared obs shape/dtype, unique ``(id, agent)``.

    Lengths include 1; flags cover terminated, truncated and not done; with ``agents`` some
    episodes share an id and differ by agent; with ``any_start`` ``t_started`` may be > 0.
    """
    n = draw(st.integers(min_episodes, max_episodes))
    obs_shape = draw(st.sampled_from([(), (1,), (3,), (2, 3)]))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.uint8]))
    seed0 = draw(st.integers(0, 10_000))
    pool = draw(st.sampled_from([[None, "a0", "a1"], [None, 0, 1]])) if agents else [None]
    out: list[Episode] = []
    keys: set[tuple[Any, Any]] = set()
    for k in range(n):
        eid = f"e{draw(st.integers(0, n))}" if agents else f"e{k}"
        agent = draw(st.sampled_from(pool))
        if (eid, agent) in keys:
            eid = f"u{k}"
        keys.add((eid, agent))
        flag = draw(st.sampled_from(["terminated", "truncated", "open"]))
        out.append(
            make_episode(
                draw(st.integers(1, max_len)),
                id=eid,
                obs_shape=obs_shape,
                obs_dtype=dtype,
                terminated=flag == "terminated",
                truncated=flag == "truncated",
                t_started=draw(st.integers(0, 5)) if any_start else 0,
                agent_id=agent,
                extras=extras,
                seed=seed0 + k,
            )
        )
    return out


def episodes_to_columns(
    episodes: Sequence[Episode], *, with_t: bool = False, order: Sequence[int] | None = None
) -> dict[str, np.ndarray]:
    """Episodes as row columns in RLlib's names (eps_id, agent_id, obs, new_obs, ...).

    Rows are listed episode by episode, or in ``order`` (a permutation of the row numbers of
    that listing). Extras become columns; infos become an ``infos`` object column.
    """
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "eps_id",
            "agent_id",
            "obs",
            "actions",
            "rewards",
            "new_obs",
            "terminateds",
            "truncateds",
        )
    }
    if with_t:
        cols["t"] = []
    extra_names = list(episodes[0].extras) if episodes else []
    for name in extra_names:
        cols[name] = []
    with_infos = bool(episodes) and episodes[0].infos is not None
    if with_infos:
        cols["infos"] = []
    for ep in episodes:
        n = len(ep)
        cols["eps_id"].extend([ep.id] * n)
        cols["agent_id"].extend([ep.agent_id] * n)
        cols["obs"].extend(ep.observations[:-1])
        cols["new_obs"].extend(ep.observations[1:])
        cols["actions"].extend(ep.actions)
        cols["rewards"].extend(ep.rewards)
        cols["terminateds"].extend([False] * (n - 1) + [ep.terminated])
        cols["truncateds"].extend([False] * (n - 1) + [ep.truncated])
        if with_t:
            cols["t"].extend(range(ep.t_started, ep.t_started + n))
        for name in extra_names:
            cols[name].extend(ep.extras[name])
        if with_infos:
            cols["infos"].extend((ep.infos or [])[1:])
    out: dict[str, np.ndarray] = {}
    for k, v in cols.items():
        if k in ("eps_id", "agent_id", "infos"):
            arr = np.empty(len(v), dtype=object)
            arr[:] = v
        elif k in ("obs", "new_obs") and not v:
            arr = np.empty((0, *episodes[0].observations.shape[1:]) if episodes else (0,))
        else:
            arr = np.asarray(v)
        out[k] = arr if order is None else arr[np.asarray(order, dtype=np.int64)]
    return out


def to_table(columns: dict[str, np.ndarray], tensor: str = "list") -> pa.Table:
    """Row columns as an Arrow table; multi-dim columns as nested lists.

    ``tensor="list"`` writes ``list<...>`` per dimension; ``"fixed"`` writes
    ``fixed_size_list``; ``"ray"`` writes a flat ``large_list`` with Ray's tensor-extension
    field metadata (what plain pyarrow sees in a file Ray wrote).
    """
    arrays, fields = [], []
    for name, values in columns.items():
        meta = None
        if values.dtype == object:
            arr = pa.array(list(values))
        elif values.ndim == 1:
            arr = pa.array(values)
        elif tensor == "ray":
            n = len(values)
            size = int(np.prod(values.shape[1:]))
            offsets = pa.array(np.arange(n + 1, dtype=np.int64) * size)
            arr = pa.LargeListArray.from_arrays(offsets, pa.array(values.reshape(-1)))
            meta = {
                b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
                b"ARROW:extension:metadata": str(list(values.shape[1:])).encode(),
            }
        else:
            arr = pa.array(np.ascontiguousarray(values).reshape(-1))
            for size in reversed(values.shape[1:]):
                if tensor == "fixed":
                    arr = pa.FixedSizeListArray.from_arrays(arr, size)
                else:
                    n_outer = len(arr) // size
                    offsets = pa.array(np.arange(n_outer + 1, dtype=np.int32) * size)
                    arr = pa.ListArray.from_arrays(offsets, arr)
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, metadata=meta))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


# ---------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------
def folders_of_tests() -> list[Path]:
    """``tests/`` and every folder below it that holds test modules (imported by basename)."""
    return [TESTS, *sorted({p.parent for p in TESTS.glob("*/**/test_*.py")})]


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A local Ray instance for the whole session (4 logical CPUs, no dashboard).

    Functions and classes passed to Ray from a test module must be importable by workers; the
    tests folder is put on their PYTHONPATH.
    """
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        # Workers unpickle functions defined in test modules by module name: let them import
        # tests/ (conftest) and each folder of test modules like the driver does.
        path = os.pathsep.join(
            p for p in (*map(str, folders_of_tests()), os.environ.get("PYTHONPATH")) if p
        )
        ray.init(
            num_cpus=4,  # logical: the prelearner actor holds one, reads and writes need more
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"PYTHONPATH": path}},
        )
    yield ray
    if started:
        ray.shutdown()


def rllib_python() -> Path:
    """RLlib's interpreter for the oracle tests: ``$RLLIB_PYTHON``, else the venv that
    ``benchmarks/setup_rllib.sh`` builds (``$OFFLINE_PRELEARNER_RLLIB_VENV`` or
    ``<repo>/.bench/rllib-venv``). Tests that need it skip when it is absent."""
    if os.environ.get("RLLIB_PYTHON"):
        return Path(os.environ["RLLIB_PYTHON"])
    venv = os.environ.get("OFFLINE_PRELEARNER_RLLIB_VENV") or str(REPO / ".bench" / "rllib-venv")
    return Path(venv) / "bin" / "python"


# ---------------------------------------------------------------------------------------------
# object stores (servers in tests/stores.py)
# ---------------------------------------------------------------------------------------------
class StoreURI(str):
    """A store prefix's URI (a ``str``) that also carries ``env``: the variables a process
    needs to reach the store (already set in this test's ``os.environ``)."""

    env: dict[str, str]

    def __new__(cls, uri: str, env: dict[str, str]) -> StoreURI:
        self = super().__new__(cls, uri)
        self.env = dict(env)
        return self


_STORE_PREFIXES = itertools.count()


def _start_server(kind: type[Any], root: Path) -> Iterator[Any]:
    from stores import ServerMissing

    try:
        server = kind(root)
    except ServerMissing as e:
        pytest.skip(str(e))
    with server:
        yield server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """SeaweedFS's S3 gateway for the session (``tests/stores.py``'s ``SeaweedS3``)."""
    from stores import SeaweedS3

    yield from _start_server(SeaweedS3, tmp_path_factory.mktemp("seaweedfs"))


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Azurite's blob service for the session (``tests/stores.py``'s ``AzuriteBlob``)."""
    from stores import AzuriteBlob

    yield from _start_server(AzuriteBlob, tmp_path_factory.mktemp("azurite"))


def _store_prefix(request: pytest.FixtureRequest, scheme: str, bucket: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:60]
    return f"{scheme}://{bucket}/{name}-{next(_STORE_PREFIXES)}"


@pytest.fixture
def s3_store(
    s3_server: Any, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> StoreURI:
    """A fresh prefix ``s3://bucket/<test>-<n>`` on SeaweedFS, the AWS_* variables set."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return StoreURI(_store_prefix(request, "s3", s3_server.bucket), s3_server.env)


@pytest.fixture
def azure_store(
    azure_server: Any, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> StoreURI:
    """A fresh prefix ``az://container/<test>-<n>`` on Azurite, the connection string set."""
    for name in ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in azure_server.env.items():
        monkeypatch.setenv(name, value)
    return StoreURI(_store_prefix(request, "az", azure_server.container), azure_server.env)
