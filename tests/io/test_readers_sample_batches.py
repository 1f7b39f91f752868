"""The ``sample_batches`` reader: old-stack JSON lines -> episodes, real and generated files."""

from __future__ import annotations

import base64
import itertools
import json
import pickle
from pathlib import Path
from typing import Any

import lz4.frame
import numpy as np
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from conftest import random_episodes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.config import ReadConfig
from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.stitch import stitch_fragments
from offline_prelearner.errors import DataError, DecodeError
from offline_prelearner.io.formats.sample_batches.reader import SampleBatchesReader
from offline_prelearner.io.readers import make_reader

UNCOMPRESSED = "cartpole-v1_old_stack_json_uncompressed.json"
COMPRESSED = "cartpole-v1_old_stack_json_compressed.json"


def reader(**kw: Any) -> SampleBatchesReader:
    dones = kw.pop("dones", "auto")
    return SampleBatchesReader(ReadConfig(format="sample_batches", **kw), dones=dones)


def pack(arr: np.ndarray) -> str:
    """RLlib's legacy compression, written here independently: base64(lz4(pickle))."""
    return base64.b64encode(lz4.frame.compress(pickle.dumps(arr))).decode("ascii")


# ---------------------------------------------------------------------------------------------
# a plain-loop writer and splitter (the references)
# ---------------------------------------------------------------------------------------------
def step_stream(episodes: list[Episode], with_t: bool = True) -> list[dict[str, Any]]:
    """Every step of every episode, one dict per step, episode after episode."""
    steps = []
    for ep in episodes:
        for k in range(len(ep)):
            s = {
                "obs": ep.observations[k].tolist(),
                "new_obs": ep.observations[k + 1].tolist(),
                "actions": ep.actions[k].tolist(),
                "rewards": float(ep.rewards[k]),
                "terminateds": bool(ep.terminated and k == len(ep) - 1),
                "truncateds": bool(ep.truncated and k == len(ep) - 1),
                "eps_id": ep.id,
                "agent_index": 0,
                "action_logp": float(ep.extras["action_logp"][k]) if ep.extras else 0.0,
            }
            if with_t:
                s["t"] = ep.t_started + k
            steps.append(s)
    return steps


def records_from(steps: list[dict[str, Any]], cuts: list[int]) -> list[dict[str, Any]]:
    """Cuts the step stream into SampleBatch records (column-wise lists) at ``cuts``."""
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(steps))), len(steps)]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        rec: dict[str, Any] = {"type": "SampleBatch"}
        for key in steps[lo]:
            rec[key] = [s[key] for s in steps[lo:hi]]
        out.append(rec)
    return out


def loop_split(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reference: walk every step; a new episode starts where eps_id changes or after a done."""
    eps: list[dict[str, Any]] = []
    open_: dict[Any, dict[str, Any]] = {}
    for rec in records:
        for k in range(len(rec["obs"])):
            eid = rec["eps_id"][k]
            ep = open_.get(eid)
            if ep is None:
                ep = open_[eid] = {"id": eid, "obs": [rec["obs"][k]], "actions": [], "rewards": []}
                eps.append(ep)
            ep["obs"].append(rec["new_obs"][k])
            ep["actions"].append(rec["actions"][k])
            ep["rewards"].append(rec["rewards"][k])
            ep["terminated"] = rec["terminateds"][k]
            ep["truncated"] = rec["truncateds"][k]
            if ep["terminated"] or ep["truncated"]:
                del open_[eid]
    return eps


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def read_all(files: list[Path], **kw: Any) -> list[Episode]:
    r = reader(**kw)
    batch = None
    for f in files:
        b = r.read_file(f)
        assert b.ledger.balanced()
        if batch is None:
            batch = b
        else:
            batch.extend(b)
    assert batch is not None
    return stitch_fragments(batch).episodes


def assert_same(got: list[Episode], want: list[dict[str, Any]]) -> None:
    assert [e.id for e in got] == [w["id"] for w in want]
    for e, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(e.observations, np.asarray(w["obs"]))
        np.testing.assert_array_equal(e.actions, np.asarray(w["actions"]))
        np.testing.assert_array_equal(e.rewards, np.asarray(w["rewards"]))
        assert (e.terminated, e.truncated) == (bool(w["terminated"]), bool(w["truncated"]))


# ---------------------------------------------------------------------------------------------
# real files written by RLlib's old JsonWriter
# ---------------------------------------------------------------------------------------------
def test_real_files_uncompressed_and_compressed_agree(shared_data: Path) -> None:
    plain = reader().read_file(shared_data / UNCOMPRESSED)
    packed = reader(legacy_pickle=True).read_file(shared_data / COMPRESSED)
    for b in (plain, packed):
        assert len(b.episodes) == 12 and b.ledger.balanced() and b.ledger.rows_in == 295
        assert all(e.terminated and not e.truncated and e.t_started == 0 for e in b.episodes)
    for a, c in zip(plain.episodes, packed.episodes, strict=True):
        assert a.id == c.id and len(a) == len(c)
        np.testing.assert_array_equal(a.actions, c.actions)
        np.testing.assert_array_equal(a.rewards, c.rewards)
        assert c.observations.dtype == np.float32  # the pickle keeps the dtype; JSON cannot
        np.testing.assert_array_equal(a.observations.astype(np.float32), c.observations)
        assert sorted(a.extras) == ["action_logp", "action_prob", "unroll_id"]
        assert a.agent_id is None and a.module_id is None and a.infos is None


def test_real_file_via_arrow_batch_matches_file_path(shared_data: Path) -> None:
    """A Ray-Data-like batch (pyarrow.json table, one record per row) gives the same episodes."""
    table = pajson.read_json(shared_data / COMPRESSED)
    a = reader(legacy_pickle=True).read(table, "x")
    b = reader(legacy_pickle=True).read_file(shared_data / COMPRESSED)
    assert [len(e) for e in a.episodes] == [len(e) for e in b.episodes]
    for x, y in zip(a.episodes, b.episodes, strict=True):
        np.testing.assert_array_equal(x.observations, y.observations)


def test_real_file_shares_reset_observations_with_new_stack(shared_data: Path) -> None:
    """Not the same recording (random actions differ), but the same env seeds: every episode
    starts from the new-stack file's reset observation -- a check that obs decode correctly."""
    new = make_reader(ReadConfig(format="episodes")).read(
        pq.read_table(shared_data / "cartpole-v1_episodes_msgpack.parquet")
    )
    old = reader(legacy_pickle=True).read_file(shared_data / COMPRESSED)
    for o, n in zip(old.episodes, new.episodes, strict=True):
        np.testing.assert_array_equal(o.observations[0], n.observations[0])
    assert [len(e) for e in old.episodes] != [len(e) for e in new.episodes]


def test_compressed_without_legacy_pickle_says_how(shared_data: Path) -> None:
    for policy in ("raise", "skip"):
        with pytest.raises(DecodeError, match="--legacy-pickle") as info:
            reader(on_invalid=policy).read_file(shared_data / COMPRESSED)
        assert info.value.where.column == "obs"


def test_registered() -> None:
    from offline_prelearner.io.formats.sample_batches import reader  # noqa: F401

    assert isinstance(make_reader(ReadConfig(format="sample_batches")), SampleBatchesReader)


# ---------------------------------------------------------------------------------------------
# generated: several episodes per batch, episodes across batches and files
# ---------------------------------------------------------------------------------------------
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    eps=random_episodes(agents=False, extras=("action_logp",), max_episodes=5),
    cuts=st.lists(st.integers(1, 40), max_size=6),
    files=st.integers(1, 3),
    with_t=st.booleans(),
    compress=st.booleans(),
)
def test_generated_streams_match_loop_reference(
    tmp_path: Path, eps: list[Episode], cuts: list[int], files: int, with_t: bool, compress: bool
) -> None:
    records = records_from(step_stream(eps, with_t), cuts)
    want = loop_split(records)
    if compress:
        for r in records:
            r["obs"] = pack(np.asarray(r["obs"]))
    per = -(-len(records) // files)
    paths = []
    for k in range(files):
        chunk = records[k * per : (k + 1) * per]
        if chunk:
            paths.append(write_lines(tmp_path / f"f{with_t}{compress}{k}-{len(paths)}.json", chunk))
    got = read_all(paths, legacy_pickle=compress)
    assert_same(got, want)
    assert_same(
        got,
        [  # and the episodes we started from
            {
                "id": e.id,
                "obs": e.observations,
                "actions": e.actions,
                "rewards": e.rewards,
                "terminated": e.terminated,
                "truncated": e.truncated,
            }
            for e in eps
        ],
    )
    for e, orig in zip(got, eps, strict=True):
        np.testing.assert_array_equal(e.extras["action_logp"], orig.extras["action_logp"])


def test_one_batch_with_several_episodes_gives_several(tmp_path: Path, make_episode: Any) -> None:
    eps = [make_episode(4, id=f"e{i}", seed=i, extras=("action_logp",)) for i in range(3)]
    f = write_lines(tmp_path / "a.json", records_from(step_stream(eps), []))
    got = reader().read_file(f).episodes
    assert [(e.id, len(e)) for e in got] == [("e0", 4), ("e1", 4), ("e2", 4)]


def test_episode_never_ending_is_a_not_done_fragment(tmp_path: Path, make_episode: Any) -> None:
    ep = make_episode(6, id="open", terminated=False, extras=("action_logp",))
    f = write_lines(tmp_path / "a.json", records_from(step_stream([ep]), [2, 4]))
    (got,) = read_all([f])
    assert len(got) == 6 and not got.is_done


def test_multi_agent_batch(tmp_path: Path) -> None:
    """One episode per (policy, eps_id, agent_index); module_id is the policy id."""

    def cols(agent: int, n: int, base: float) -> dict[str, Any]:
        obs = (np.arange(n + 1, dtype=np.float64) + base)[:, None].repeat(2, 1)
        return {
            "obs": obs[:-1].tolist(),
            "new_obs": obs[1:].tolist(),
            "actions": [agent] * n,
            "rewards": [float(agent)] * n,
            "terminateds": [False] * (n - 1) + [True],
            "truncateds": [False] * n,
            "eps_id": [7] * n,
            "agent_index": [agent] * n,
            "t": list(range(n)),
        }

    rec = {
        "type": "MultiAgentBatch",
        "count": 5,
        "policy_batches": {"p0": cols(0, 3, 0.0), "p1": cols(1, 5, 100.0)},
    }
    f = write_lines(tmp_path / "ma.json", [{"value": rec}])
    got = sorted(reader().read_file(f).episodes, key=lambda e: e.module_id)
    assert [(e.id, e.agent_id, e.module_id, len(e)) for e in got] == [
        (7, 0, "p0", 3),
        (7, 1, "p1", 5),
    ]
    assert got[1].observations[0, 0] == 100.0


@pytest.mark.parametrize(
    ("rule", "info", "want"),
    [
        ("auto", {}, (True, False)),
        ("auto", {"TimeLimit.truncated": True}, (False, True)),
        ("terminated", {"TimeLimit.truncated": True}, (True, False)),
        ("truncated", {}, (False, True)),
    ],
)
def test_dones_only(
    tmp_path: Path, rule: str, info: dict[str, Any], want: tuple[bool, bool]
) -> None:
    rec = {
        "type": "SampleBatch",
        "obs": [[0.0], [1.0]],
        "new_obs": [[1.0], [2.0]],
        "actions": [0, 1],
        "rewards": [1.0, 1.0],
        "dones": [False, True],
        "eps_id": [3, 3],
        "infos": [{}, info],
    }
    (ep,) = reader(dones=rule).read_file(write_lines(tmp_path / "d.json", [rec])).episodes
    assert (ep.terminated, ep.truncated) == want


def test_parquet_one_record_per_row(tmp_path: Path, shared_data: Path) -> None:
    table = pajson.read_json(shared_data / UNCOMPRESSED).drop_columns(["infos"])
    pq.write_table(table, tmp_path / "sb.parquet")  # Parquet cannot hold the empty infos structs
    got = reader().read_file(tmp_path / "sb.parquet")
    assert len(got.episodes) == 12 and got.ledger.rows_in == 295


# ---------------------------------------------------------------------------------------------
# bad input: an error naming file, line and column -- or a counted skip
# ---------------------------------------------------------------------------------------------
GOOD = {
    "type": "SampleBatch",
    "obs": [[0.0], [1.0]],
    "new_obs": [[1.0], [2.0]],
    "actions": [0, 1],
    "rewards": [1.0, 1.0],
    "terminateds": [False, True],
    "eps_id": [1, 1],
    "t": [0, 1],
}


class _Evil:
    def __reduce__(self) -> Any:
        import os

        return (os.system, ("true",))


def _bad(kind: str) -> tuple[Any, str | None, str]:
    """(the bad line, the column named, the reason) for each kind of bad input."""
    r = dict(GOOD, eps_id=[2, 2])
    if kind == "malformed":
        return '{"type": "SampleBatch", "obs": [[0.0]', None, "bad_json"
    if kind == "missing_type":
        return {k: v for k, v in r.items() if k != "type"}, None, "missing_type"
    if kind == "unknown_type":
        return dict(r, type="Episode"), "type", "unknown_type"
    if kind == "unequal":
        return dict(r, rewards=[1.0]), "rewards", "unequal_lengths"
    if kind == "lacks_column":
        return {k: v for k, v in r.items() if k != "t"}, "t", "columns_differ"
    if kind == "not_base64":
        return dict(r, obs="not base64!!"), "obs", "bad_base64"
    if kind == "not_lz4":
        return dict(r, obs=base64.b64encode(b"hello").decode()), "obs", "corrupt_lz4"
    if kind == "evil_pickle":
        raw = base64.b64encode(lz4.frame.compress(pickle.dumps(_Evil()))).decode()
        return dict(r, obs=raw), "obs", "refused_pickle"
    raise AssertionError(kind)


KINDS = [
    "malformed",
    "missing_type",
    "unknown_type",
    "unequal",
    "lacks_column",
    "not_base64",
    "not_lz4",
    "evil_pickle",
]


@pytest.mark.parametrize("kind", KINDS)
def test_bad_record_raises_naming_file_line_column(tmp_path: Path, kind: str) -> None:
    line, column, reason = _bad(kind)
    path = tmp_path / "bad.json"
    text = json.dumps(GOOD) + "\n" + (line if isinstance(line, str) else json.dumps(line)) + "\n"
    path.write_text(text + json.dumps(dict(GOOD, eps_id=[3, 3])) + "\n")
    with pytest.raises(DataError) as info:
        reader(legacy_pickle=True).read_file(path)
    err = info.value
    assert err.reason == reason
    assert err.where.file == str(path) and err.where.row == 2 and "line 2" in str(err)
    assert err.where.column == column


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ["skip", "quarantine"])
def test_bad_record_is_counted_under_skip(tmp_path: Path, kind: str, policy: str) -> None:
    line, _, reason = _bad(kind)
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(GOOD) + "\n" + (line if isinstance(line, str) else json.dumps(line)) + "\n"
    )
    r = reader(legacy_pickle=True, on_invalid=policy)
    got = r.read_file(path)
    assert [e.id for e in got.episodes] == [1]
    assert r.records_read == 2 and r.records_rejected == {reason: 1}
    assert got.ledger.balanced()
    if policy == "quarantine":
        assert got.rejections[0].rows is not None
        assert "_record" in got.rejections[0].rows.column_names


def test_eps_id_in_some_rows_only_names_line_and_step(tmp_path: Path) -> None:
    bad = dict(GOOD, eps_id=[5, None])
    path = write_lines(tmp_path / "n.json", [GOOD, bad])
    with pytest.raises(DataError) as info:
        reader().read_file(path)
    assert "line 2" in str(info.value) and info.value.where.column == "eps_id"
    got = reader(on_invalid="skip").read_file(path)
    assert [e.id for e in got.episodes] == [1] and got.ledger.balanced()
    assert sum(got.ledger.rows_rejected.values()) == 2


def test_arrow_batch_errors_name_record_index() -> None:
    table = pa.Table.from_pylist([GOOD, dict(GOOD, eps_id=[2, 2], rewards=[1.0])])
    with pytest.raises(DataError, match="record 1 of the batch") as info:
        reader().read(table, "batch.json")
    assert info.value.where.column == "rewards"
