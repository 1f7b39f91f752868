"""episodes_to_rows / write_rows: RLlib's recorder row layout, Ray's tensor layout, round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import shared_data_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import SchemaError
from offline_prelearner.io.formats.rows.writer import episodes_to_rows, tensor_field, write_rows

RLLIB_COLUMNS = [
    "eps_id",
    "agent_id",
    "module_id",
    "obs",
    "actions",
    "rewards",
    "new_obs",
    "terminateds",
    "truncateds",
]


def rllib_data_dir() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"RLlib 2.60 data not found at {path} (set OFFLINE_PRELEARNER_SHARED_DATA)")
    return path


def make_episode(
    eid: Any = "e0",
    n: int = 3,
    *,
    obs_shape: tuple[int, ...] = (4,),
    obs_dtype: Any = np.float32,
    terminated: bool = True,
    truncated: bool = False,
    t_started: int = 0,
    seed: int = 0,
    **kw: Any,
) -> Episode:
    rng = np.random.default_rng(seed)
    return Episode(
        id=eid,
        observations=rng.normal(size=(n + 1, *obs_shape)).astype(obs_dtype),
        actions=rng.integers(0, 2, size=n),
        rewards=rng.normal(size=n),
        terminated=terminated,
        truncated=truncated,
        t_started=t_started,
        **kw,
    )


def reference_rows(episodes: list[Episode], with_t: bool = True) -> list[dict[str, Any]]:
    """The row layout built one row at a time, from the module docstring's definition."""
    rows = []
    for ep in episodes:
        for i in range(len(ep)):
            last = i == len(ep) - 1
            row: dict[str, Any] = {
                "eps_id": str(ep.id),
                "agent_id": None if ep.agent_id is None else str(ep.agent_id),
                "module_id": None if ep.module_id is None else str(ep.module_id),
                "obs": ep.observations[i].reshape(-1).tolist()
                if ep.observations.ndim > 1
                else ep.observations[i].item(),
                "actions": ep.actions[i].item(),
                "rewards": float(ep.rewards[i]),
                "new_obs": ep.observations[i + 1].reshape(-1).tolist()
                if ep.observations.ndim > 1
                else ep.observations[i + 1].item(),
                "terminateds": bool(last and ep.terminated),
                "truncateds": bool(last and ep.truncated),
            }
            if with_t:
                row["t"] = ep.t_started + i
            for name, col in ep.extras.items():
                row[name] = col[i].reshape(-1).tolist() if col.ndim > 1 else col[i].item()
            if any(e.infos is not None for e in episodes):
                row["infos"] = None if ep.infos is None else json.dumps(ep.infos[i + 1])
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- layout
def test_layout_columns_types_and_done_flags() -> None:
    eps = [
        make_episode("a", 3),
        make_episode("b", 2, terminated=False, truncated=True, t_started=7, seed=1),
    ]
    table = episodes_to_rows(eps)
    assert table.column_names == [*RLLIB_COLUMNS, "t"]
    assert table.schema.field("eps_id").type == pa.string()
    assert table.schema.field("agent_id").type == pa.null()
    assert table.schema.field("module_id").type == pa.null()
    assert table.schema.field("rewards").type == pa.float64()
    assert table.schema.field("t").type == pa.int64()
    assert table.column("terminateds").to_pylist() == [False, False, True, False, False]
    assert table.column("truncateds").to_pylist() == [False, False, False, False, True]
    assert table.column("t").to_pylist() == [0, 1, 2, 7, 8]
    assert table.to_pylist() == reference_rows(eps)


def test_without_t_has_no_t_column() -> None:
    table = episodes_to_rows([make_episode()], with_t=False)
    assert table.column_names == RLLIB_COLUMNS


def test_obs_is_ray_tensor_layout() -> None:
    field = episodes_to_rows([make_episode()]).schema.field("obs")
    assert field.type == pa.large_list(pa.field("element", pa.float32()))
    assert field.metadata == {
        b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
        b"ARROW:extension:metadata": b"[4]",
    }


def test_multi_dim_obs_are_flattened_in_c_order_with_shape_metadata() -> None:
    ep = make_episode(n=2, obs_shape=(2, 3))
    table = episodes_to_rows([ep])
    field = table.schema.field("new_obs")
    assert json.loads(field.metadata[b"ARROW:extension:metadata"]) == [2, 3]
    assert table.column("new_obs").to_pylist()[1] == ep.observations[2].ravel().tolist()


@pytest.mark.parametrize("shape", [(4,), (32, 32, 4)], ids=["small", "large"])
def test_obs_and_new_obs_for_small_and_large_observations(shape: tuple[int, ...]) -> None:
    # Large observations (>= 4 KB per step) take another gather path than small ones.
    eps = [
        make_episode("a", 3, obs_shape=shape),
        make_episode("b", 0, obs_shape=shape, seed=1),
        make_episode("c", 2, obs_shape=shape, seed=2, truncated=True, terminated=False),
    ]
    table = episodes_to_rows(eps)
    assert table.to_pylist() == reference_rows(eps)
    field = table.schema.field("obs")
    assert json.loads(field.metadata[b"ARROW:extension:metadata"]) == list(shape)


def test_scalar_obs_are_a_plain_column() -> None:
    ep = make_episode(n=3, obs_shape=())
    table = episodes_to_rows([ep])
    assert table.schema.field("obs").type == pa.float32()
    assert table.schema.field("obs").metadata is None
    assert table.column("obs").to_pylist() == ep.observations[:3].tolist()


def test_ids_are_strings_and_agent_module_ids_string_when_set() -> None:
    eps = [make_episode(7, 2, agent_id="x", module_id="m"), make_episode(8, 1, seed=2)]
    table = episodes_to_rows(eps)
    assert table.column("eps_id").to_pylist() == ["7", "7", "8"]
    assert table.schema.field("agent_id").type == pa.string()
    assert table.column("agent_id").to_pylist() == ["x", "x", None]
    assert table.column("module_id").to_pylist() == ["m", "m", None]


def test_extras_and_infos() -> None:
    ep = make_episode(
        n=2,
        extras={"action_logp": np.array([-0.1, -0.2]), "vf": np.ones((2, 2), np.float32)},
        infos=[{"reset": 1}, {"k": np.float32(0.5)}, {"k": np.arange(2)}],
    )
    other = make_episode(
        "b", 1, seed=3, extras={"vf": np.zeros((1, 2), np.float32), "action_logp": np.array([-1.0])}
    )
    table = episodes_to_rows([ep, other])
    assert table.column_names[-3:] == ["action_logp", "vf", "infos"]
    assert table.column("action_logp").to_pylist() == [-0.1, -0.2, -1.0]
    assert table.schema.field("vf").metadata[b"ARROW:extension:metadata"] == b"[2]"
    # Row i carries the info returned with new_obs; the reset info has no row.
    assert table.column("infos").to_pylist() == ['{"k": 0.5}', '{"k": [0, 1]}', None]


def test_zero_length_episode_writes_no_row() -> None:
    eps = [make_episode("a", 0), make_episode("b", 2, seed=1)]
    table = episodes_to_rows(eps)
    assert table.column("eps_id").to_pylist() == ["b", "b"]
    assert table.to_pylist() == reference_rows(eps)


def test_empty_input_gives_empty_table() -> None:
    table = episodes_to_rows([])
    assert table.num_rows == 0
    assert table.column_names == [*RLLIB_COLUMNS, "t"]


def test_mismatched_obs_shapes_name_episode_and_column() -> None:
    eps = [make_episode("a"), make_episode("b", obs_shape=(3,))]
    with pytest.raises(SchemaError, match=r"\(3,\) differs.*\(4,\).*column 'obs', episode 'b'"):
        episodes_to_rows(eps)


def test_mismatched_extras_name_episode() -> None:
    eps = [make_episode("a", 1, extras={"x": [1.0]}), make_episode("b", 1)]
    with pytest.raises(SchemaError, match=r"extra columns \[\].*\['x'\].*episode 'b'"):
        episodes_to_rows(eps)


def test_extra_colliding_with_a_layout_column_is_refused() -> None:
    with pytest.raises(SchemaError, match="collide"):
        episodes_to_rows([make_episode("a", 1, extras={"t": [5]})])


def test_dtypes_of_episodes_are_promoted() -> None:
    a = make_episode("a", 1)
    b = Episode(
        id="b",
        observations=np.zeros((2, 4), np.float32),
        actions=np.array([1], np.int32),
        rewards=np.array([1], np.int8),
        terminated=True,
    )
    table = episodes_to_rows([a, b])
    assert table.schema.field("actions").type == pa.int64()
    assert table.schema.field("rewards").type == pa.float64()


# ----------------------------------------------------------------------------- round trips
obs_shapes = st.sampled_from([(), (3,), (2, 2)])
obs_dtypes = st.sampled_from([np.float32, np.float64, np.int16, np.uint8])


@st.composite
def episode_lists(draw: st.DrawFn) -> list[Episode]:
    shape, dtype = draw(obs_shapes), draw(obs_dtypes)
    with_extra = draw(st.booleans())
    eps = []
    for k in range(draw(st.integers(1, 5))):
        n = draw(st.integers(0, 6))
        flag = draw(st.sampled_from(["terminated", "truncated", "ongoing"]))
        values = draw(
            st.lists(
                st.integers(0, 100),
                min_size=(n + 1) * int(np.prod(shape)),
                max_size=(n + 1) * int(np.prod(shape)),
            )
        )
        eps.append(
            Episode(
                id=f"e{k}",
                observations=np.array(values, dtype=dtype).reshape(n + 1, *shape),
                actions=np.array(
                    draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64
                ),
                rewards=np.array(
                    draw(st.lists(st.floats(-1e6, 1e6), min_size=n, max_size=n)), dtype=np.float64
                ),
                terminated=flag == "terminated",
                truncated=flag == "truncated",
                t_started=draw(st.integers(0, 1000)),
                agent_id=draw(st.sampled_from([None, "agent_0"])),
                extras={"logp": np.arange(n, dtype=np.float32).reshape(n, 1)}
                if with_extra
                else None,
                infos=[{"i": j} for j in range(n + 1)] if draw(st.booleans()) else None,
            )
        )
    return eps


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(eps=episode_lists(), with_t=st.booleans())
def test_rows_match_plain_loop_reference_and_survive_parquet(
    eps: list[Episode], with_t: bool, tmp_path: Path
) -> None:
    table = episodes_to_rows(eps, with_t=with_t)
    expected = reference_rows(eps, with_t)
    assert table.to_pylist() == expected
    path = write_rows(eps, tmp_path / "sub" / "rows.parquet", with_t=with_t)
    back = pq.read_table(path)
    assert _storage(back).to_pylist() == expected
    field = back.schema.field("obs")
    if isinstance(field.type, pa.ExtensionType):  # Ray imported earlier registered its tensor type
        assert field.type.extension_name == "ray.data.arrow_tensor_v2"
    else:
        assert field.metadata == table.schema.field("obs").metadata


def _storage(table: pa.Table) -> pa.Table:
    """The table with extension columns (Ray's tensors, once Ray is imported) as their storage."""
    cols = [
        pa.chunked_array([c.storage for c in col.chunks], col.type.storage_type)
        if isinstance(col.type, pa.ExtensionType)
        else col
        for col in table.columns
    ]
    return pa.table(cols, names=table.column_names)


def test_write_rows_schema_matches_rllib_file(tmp_path: Path) -> None:
    ref = pq.read_schema(rllib_data_dir() / "cartpole-v1_rows_uncompressed.parquet")
    eps = [
        Episode(
            id="c6b6647a77654464b1effd7460dc26ba",
            observations=np.zeros((4, 4), np.float32),
            actions=np.array([1, 0, 1]),
            rewards=np.ones(3),
            terminated=True,
        )
    ]
    ours = pq.read_schema(write_rows(eps, tmp_path / "rows.parquet", with_t=False))
    for name in RLLIB_COLUMNS:
        assert ours.field(name).equals(ref.field(name), check_metadata=True), name


def test_tensor_field_metadata_is_json_shape() -> None:
    field = tensor_field("x", pa.int8(), (84, 84, 3))
    assert json.loads(field.metadata[b"ARROW:extension:metadata"]) == [84, 84, 3]


def read_back_with_rows_reader(path: str) -> dict[Any, Episode]:
    pytest.importorskip("offline_prelearner.io.formats.rows.reader")
    from offline_prelearner.config import ReadConfig
    from offline_prelearner.io.readers import make_reader

    batch = make_reader(ReadConfig(format="rows")).read(pq.read_table(path), source=path)
    assert batch.ledger.balanced() and batch.ledger.rows_kept == pq.read_metadata(path).num_rows
    return {(e.id, e.agent_id): e for e in batch.episodes}


def test_round_trip_through_rows_reader(tmp_path: Path) -> None:
    eps = [
        make_episode("a", 4, extras={"logp": np.linspace(-1, 0, 4), "h": np.ones((4, 2, 2))}),
        make_episode(
            "b",
            3,
            truncated=True,
            terminated=False,
            seed=1,
            t_started=2,
            extras={"logp": np.zeros(3), "h": np.zeros((3, 2, 2))},
        ),
        make_episode(
            "b", 2, agent_id="p1", seed=2, extras={"logp": np.ones(2), "h": np.ones((2, 2, 2))}
        ),
    ]
    got = read_back_with_rows_reader(write_rows(eps, tmp_path / "rows.parquet"))
    assert sorted(got, key=str) == sorted(((e.id, e.agent_id) for e in eps), key=str)
    for ep in eps:
        back = got[(ep.id, ep.agent_id)]
        np.testing.assert_array_equal(back.observations, ep.observations)
        np.testing.assert_array_equal(back.actions, ep.actions)
        np.testing.assert_array_equal(back.rewards, ep.rewards)
        assert sorted(back.extras) == ["h", "logp"]
        for name, col in ep.extras.items():
            np.testing.assert_array_equal(back.extras[name], col)
        flags = (back.terminated, back.truncated, back.t_started)
        assert flags == (ep.terminated, ep.truncated, ep.t_started)


def test_infos_round_trip_through_rows_reader(tmp_path: Path) -> None:
    ep = make_episode("a", 2, infos=[{}, {"k": 1}, {"k": 2}])
    got = read_back_with_rows_reader(write_rows([ep], tmp_path / "rows.parquet"))
    assert got[("a", None)].infos == ep.infos


# ----------------------------------------------------------------------------- Ray
@pytest.mark.ray
def test_ray_reads_obs_as_tensor_column_like_rllib_file(ray_local: Any, tmp_path: Path) -> None:
    eps = [make_episode("a", 5), make_episode("b", 3, seed=1)]
    path = write_rows(eps, tmp_path / "rows.parquet")
    ds = ray_local.data.read_parquet(str(path))
    obs_type = ds.schema().base_schema.field("obs").type
    assert getattr(obs_type, "shape", None) == (4,)
    batch = ds.take_batch(8, batch_format="numpy")
    assert batch["obs"].shape == (8, 4)
    np.testing.assert_array_equal(batch["obs"][:5], eps[0].observations[:-1])
    ref = shared_data_dir() / "cartpole-v1_rows_uncompressed.parquet"
    if ref.exists():  # RLlib's own file reads back as the same tensor type
        ref_type = ray_local.data.read_parquet(str(ref)).schema().base_schema.field("obs").type
        assert ref_type == obs_type
