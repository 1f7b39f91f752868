"""Bad and hostile inputs for the command line, generated on demand (see README.md here).

Every maker is a small function ``maker(d: Path) -> Path``: it writes one input into the empty
folder ``d`` and returns the path to give the command. Some also write a config file, a schema
or an ``out`` file into ``d`` (the case's command names them as ``{tmp}/...``). A pickle payload
that runs would create ``d / MARKER``; the tests check that it never exists.

The good data comes from the shipped dataset (``datasets/cartpole-v1``) and, for the makers that
call :func:`rllib_file`, from the files RLlib 2.60 wrote (``../shared/data/rllib-2.60`` or
``$OFFLINE_PRELEARNER_SHARED_DATA``); those raise :class:`SourceMissing` when the folder is absent.

Run ``python tests/corpus/make_corpus.py OUT_DIR`` to write every case into ``OUT_DIR/<maker>/``
and look at the files by hand. Only numpy, pyarrow, msgpack and lz4 are used: nothing here
imports the package under test.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lz4.frame
import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[2]
ROWS = REPO / "datasets" / "cartpole-v1" / "rows"
EPISODES = REPO / "datasets" / "cartpole-v1" / "episodes" / "cartpole-v1-episodes-00000.parquet"
MARKER = "PWNED"  # what a pickle payload creates if it ever runs
SHARED_DATA_ENV = "OFFLINE_PRELEARNER_SHARED_DATA"

Maker = Callable[[Path], Path]
MAKERS: dict[str, Maker] = {}


class SourceMissing(Exception):
    """A maker needs the RLlib-written files and they are absent (the test skips)."""


def maker(fn: Maker) -> Maker:
    MAKERS[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------------------------------------
# sources and helpers
# ---------------------------------------------------------------------------------------------
def rllib_file(name: str) -> Path:
    env = os.environ.get(SHARED_DATA_ENV)
    folder = Path(env) if env else REPO.parent / "shared" / "data" / "rllib-2.60"
    path = folder / name
    if not path.is_file():
        raise SourceMissing(f"{path} is absent (set ${SHARED_DATA_ENV})")
    return path


def shipped_rows(d: Path, name: str = "data") -> Path:
    """The 5 shipped rows files (5000 rows, 222 episodes) copied into ``d/name``."""
    out = d / name
    out.mkdir()
    for f in sorted(ROWS.glob("*.parquet")):
        shutil.copy(f, out / f.name)
    return out


def clean_rows(n_episodes: int = 4) -> list[dict[str, Any]]:
    """Rows of the first ``n_episodes`` complete episodes of the shipped data (with ``t``)."""
    rows = pq.read_table(sorted(ROWS.glob("*.parquet"))[0]).to_pylist()
    ids = list(dict.fromkeys(r["eps_id"] for r in rows))[:n_episodes]
    return [r for r in rows if r["eps_id"] in ids]


def rows_schema() -> pa.Schema:
    return pq.read_schema(sorted(ROWS.glob("*.parquet"))[0])


def write_rows(rows: list[dict[str, Any]], path: Path, schema: pa.Schema | None = None) -> Path:
    """Rows as Parquet with the shipped column types (``schema=None``) or ``schema``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if schema is None and rows and set(rows[0]) <= set(rows_schema().names):
        keep = [n for n in rows_schema().names if n in rows[0]]
        schema = pa.schema([rows_schema().field(n) for n in keep])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def write_untyped(rows: list[dict[str, Any]], path: Path) -> Path:
    """Rows as Parquet with the types pyarrow infers (for cases that change a column's type)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def episode_items() -> list[bytes]:
    return pq.read_table(EPISODES).column("item").to_pylist()[:6]


def write_items(items: list[Any], path: Path, type_: pa.DataType | None = None) -> Path:
    """An episodes file: one ``item`` column (binary unless ``type_`` says otherwise)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"item": pa.array(items, type=type_ or pa.binary())}), path)
    return path


def state(item: bytes) -> dict[str, Any]:
    """An episode record as plain msgpack (msgpack-numpy arrays stay as their raw maps)."""
    return msgpack.unpackb(item, raw=False, strict_map_key=False)


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def nd(array: np.ndarray) -> dict[bytes, Any]:
    """A msgpack-numpy array record."""
    return {
        b"nd": True,
        b"type": array.dtype.str,
        b"kind": b"",
        b"shape": list(array.shape),
        b"data": array.tobytes(),
    }


class RunsOnLoad:
    """Unpickling this creates ``path`` (a directory): evidence that a payload ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return (os.mkdir, (self.path,))


class HugeArray:
    """A pickle asking numpy for a 1 TiB array (a declared-size bomb in a few bytes)."""

    def __reduce__(self) -> Any:
        import numpy._core.multiarray as multiarray  # the name numpy's own pickles use

        return (multiarray._reconstruct, (np.ndarray, (1 << 40,), b"b"))


def legacy_cell(obj: Any) -> str:
    """RLlib's packed column value: base64(lz4(pickle(obj)))."""
    return base64.b64encode(lz4.frame.compress(pickle.dumps(obj))).decode()


def lz4_msgpack_cell(array: np.ndarray) -> bytes:
    """This project's column codec: lz4.frame(msgpack-numpy(array))."""
    return lz4.frame.compress(packb(nd(array)), store_size=True)


def _xxh32(data: bytes, seed: int = 0) -> int:
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    n, i = len(data), 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed, (seed - p1) & m]
        while i + 16 <= n:
            for k in range(4):
                lane = struct.unpack_from("<I", data, i + 4 * k)[0]
                v[k] = (rotl((v[k] + lane * p2) & m, 13) * p1) & m
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 4 <= n:
        h = (rotl((h + struct.unpack_from("<I", data, i)[0] * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h = ((h ^ (h >> 15)) * p2) & m
    h = ((h ^ (h >> 13)) * p3) & m
    return h ^ (h >> 16)


def lz4_declaring(size: int) -> bytes:
    """A valid little lz4 frame whose header declares ``size`` bytes of content."""
    frame = bytearray(lz4.frame.compress(b"\0" * 16, store_size=True))
    frame[6:14] = struct.pack("<Q", size)  # FLG, BD at 4, 5; content size at 6..13; HC at 14
    frame[14] = (_xxh32(bytes(frame[4:14])) >> 8) & 0xFF
    return bytes(frame)


def old_stack_lines(n_episodes: int = 3) -> list[dict[str, Any]]:
    """Old-stack SampleBatch records (one episode per line) built from the shipped rows."""
    rows = clean_rows(n_episodes)
    out: list[dict[str, Any]] = []
    for k, eid in enumerate(dict.fromkeys(r["eps_id"] for r in rows)):
        ep = [r for r in rows if r["eps_id"] == eid]
        rec: dict[str, Any] = {"type": "SampleBatch"}
        for col in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "t"):
            rec[col] = [r[col] for r in ep]
        rec["eps_id"] = [1000 + k] * len(ep)
        rec["agent_index"] = [0] * len(ep)
        out.append(rec)
    return out


def _plain(o: Any) -> Any:
    """numpy values as JSON: with ray.data imported (an earlier test), pyarrow's ``to_pylist``
    gives tensor cells as arrays."""
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def write_lines(lines: list[Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (ln if isinstance(ln, str) else json.dumps(ln, default=_plain) for ln in lines)
    path.write_text("".join(t + "\n" for t in text))
    return path


def schema_file(d: Path, compression: dict[str, str]) -> Path:
    cols = ["eps_id", "agent_id", "module_id", "obs", "actions", "rewards", "new_obs"]
    cols += ["terminateds", "truncateds", "t", "infos"]
    spec = {
        "name": "corpus",
        "description": "corpus case",
        "columns": {c: c for c in cols},
        "required": ["eps_id", "obs", "actions", "rewards", "new_obs", "terminateds", "truncateds"],
        "compression": compression,
        "ignore": [],
        "dones": None,
    }
    path = d / "schema.json"
    path.write_text(json.dumps(spec))
    return path


def packed_rows(d: Path, cell: Callable[[Any, int], Any], column: str = "obs") -> Path:
    """Clean rows whose ``column`` holds ``cell(value, row)`` strings/bytes (packed cells)."""
    rows = clean_rows(2)
    for k, r in enumerate(rows):
        r[column] = cell(np.asarray(r[column], dtype=np.float32), k)
    return write_untyped(rows, d / "packed.parquet")


# ---------------------------------------------------------------------------------------------
# the "Why": inputs accepted silently or refused with a traceback
# ---------------------------------------------------------------------------------------------
@maker
def rllib_rows_and_old_stack_json(d: Path) -> Path:
    """RLlib's rows Parquet and an old-stack JSON-lines file in one folder (both RLlib's own)."""
    out = d / "data"
    out.mkdir()
    for name in (
        "cartpole-v1_rows_uncompressed.parquet",
        "cartpole-v1_old_stack_json_uncompressed.json",
    ):
        shutil.copy(rllib_file(name), out / name)
    return out


@maker
def rows_and_old_stack_json(d: Path) -> Path:
    """Shipped rows Parquet plus an old-stack JSON-lines file we write (no RLlib files needed)."""
    out = shipped_rows(d)
    write_lines(old_stack_lines(), out / "zz-recorded.json")
    return out


@maker
def rows_and_episodes(d: Path) -> Path:
    """Rows Parquet and msgpack-episode Parquet in one folder."""
    out = shipped_rows(d)
    shutil.copy(EPISODES, out / "zz-recorded.parquet")
    return out


@maker
def zero_byte_parquet_last(d: Path) -> Path:
    out = shipped_rows(d)
    (out / "zz-empty.parquet").write_bytes(b"")
    return out


@maker
def zero_byte_parquet_first(d: Path) -> Path:
    out = shipped_rows(d)
    (out / "00-empty.parquet").write_bytes(b"")
    return out


@maker
def zero_byte_parquet_alone(d: Path) -> Path:
    path = d / "empty.parquet"
    path.write_bytes(b"")
    return path


@maker
def t_contradicts_obs(d: Path) -> Path:
    """Two rows of one episode swap their ``t``: the t order puts new_obs[t] != obs[t+1]."""
    rows = clean_rows()
    rows[3]["t"], rows[4]["t"] = rows[4]["t"], rows[3]["t"]
    return write_rows(rows, d / "swapped-t.parquet")


@maker
def order_contradicts_obs_without_t(d: Path) -> Path:
    """The control: the same swap with no ``t`` column (the row order is the only order)."""
    rows = clean_rows()
    rows[3], rows[4] = rows[4], rows[3]
    for r in rows:
        del r["t"]
    return write_rows(rows, d / "swapped-rows.parquet")


@maker
def text_named_parquet_last(d: Path) -> Path:
    out = shipped_rows(d)
    (out / "zz-notes.parquet").write_text("these are my notes, not a Parquet file\n")
    return out


@maker
def text_named_parquet_first(d: Path) -> Path:
    out = shipped_rows(d)
    (out / "00-notes.parquet").write_text("these are my notes, not a Parquet file\n")
    return out


@maker
def invalid_yaml_config(d: Path) -> Path:
    (d / "config.yaml").write_text("sample:\n  n_step: 3\n gamma: [0.99\n")
    return shipped_rows(d)


@maker
def old_stack_value_42(d: Path) -> Path:
    """Three good old-stack lines, then ``{"value": 42}`` on line 4."""
    return write_lines([*old_stack_lines(), {"value": 42}], d / "value42.json")


@maker
def old_stack_value_42_alone(d: Path) -> Path:
    return write_lines([{"value": 42}], d / "value42.json")


@maker
def out_is_a_file_rows(d: Path) -> Path:
    (d / "out").write_text("I am a file\n")
    return shipped_rows(d)


@maker
def out_is_a_file_old_stack(d: Path) -> Path:
    (d / "out").write_text("I am a file\n")
    return write_lines(old_stack_lines(), d / "old.json")


@maker
def shipped_rows_as_is(d: Path) -> Path:
    """The shipped 5000 rows (222 episodes, 5 files cutting through episodes)."""
    return shipped_rows(d)


# ---------------------------------------------------------------------------------------------
# Parquet rows: structure, types, values, episode contracts
# ---------------------------------------------------------------------------------------------
@maker
def truncated_parquet_alone(d: Path) -> Path:
    raw = sorted(ROWS.glob("*.parquet"))[0].read_bytes()
    path = d / "cut.parquet"
    path.write_bytes(raw[: len(raw) // 2])
    return path


@maker
def truncated_parquet_among_good(d: Path) -> Path:
    out = shipped_rows(d)
    raw = (out / "cartpole-v1-rows-00004.parquet").read_bytes()
    (out / "zz-cut.parquet").write_bytes(raw[: len(raw) - 100])
    return out


@maker
def random_bytes_parquet(d: Path) -> Path:
    path = d / "noise.parquet"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    return path


@maker
def zero_row_parquet(d: Path) -> Path:
    return write_rows([], d / "no-rows.parquet", schema=rows_schema())


@maker
def rewards_as_strings(d: Path) -> Path:
    rows = clean_rows()
    for r in rows:
        r["rewards"] = str(r["rewards"])
    return write_untyped(rows, d / "str-rewards.parquet")


@maker
def actions_as_strings(d: Path) -> Path:
    rows = clean_rows()
    for r in rows:
        r["actions"] = "left" if r["actions"] == 0 else "right"
    return write_untyped(rows, d / "str-actions.parquet")


@maker
def terminateds_as_strings(d: Path) -> Path:
    rows = clean_rows()
    for r in rows:
        r["terminateds"] = "yes" if r["terminateds"] else "no"
    return write_untyped(rows, d / "str-dones.parquet")


@maker
def missing_eps_id(d: Path) -> Path:
    rows = clean_rows()
    for r in rows:
        del r["eps_id"]
    return write_rows(rows, d / "no-eps-id.parquet")


@maker
def missing_obs_and_new_obs(d: Path) -> Path:
    rows = clean_rows()
    for r in rows:
        r["observation"] = r.pop("obs")
        del r["new_obs"]
    return write_untyped(rows, d / "no-obs.parquet")


@maker
def null_eps_id(d: Path) -> Path:
    rows = clean_rows()
    rows[5]["eps_id"] = None
    return write_rows(rows, d / "null-eps-id.parquet")


@maker
def null_obs_cell(d: Path) -> Path:
    rows = clean_rows()
    rows[5]["obs"] = None
    return write_rows(rows, d / "null-obs.parquet")


@maker
def nan_reward(d: Path) -> Path:
    rows = clean_rows()
    rows[5]["rewards"] = float("nan")
    return write_rows(rows, d / "nan-reward.parquet")


@maker
def inf_reward(d: Path) -> Path:
    rows = clean_rows()
    rows[5]["rewards"] = float("inf")
    return write_rows(rows, d / "inf-reward.parquet")


@maker
def nan_reward_among_good(d: Path) -> Path:
    """A NaN reward in the first episode of an extra file next to the shipped ones."""
    out = shipped_rows(d)
    rows = clean_rows(2)
    for r in rows:
        r["eps_id"] = "nan-" + r["eps_id"]
    rows[5]["rewards"] = float("nan")
    write_rows(rows, out / "zz-nan.parquet")
    return out


@maker
def obs_shape_changes_mid_episode(d: Path) -> Path:
    rows = clean_rows()
    rows[5]["obs"] = rows[5]["obs"][:3]
    return write_rows(rows, d / "shape.parquet")


@maker
def duplicate_eps_t_different_content(d: Path) -> Path:
    """Row (episode, t=3) twice: the second copy has another action and reward."""
    rows = clean_rows()
    twin = dict(rows[3])
    twin["actions"] = 1 - twin["actions"]
    twin["rewards"] = 5.0
    return write_rows([*rows, twin], d / "twin.parquet")


@maker
def duplicate_file(d: Path) -> Path:
    """The same clean file twice under two names: every row a duplicate of another."""
    out = d / "data"
    rows = clean_rows()
    write_rows(rows, out / "a.parquet")
    write_rows(rows, out / "b.parquet")
    return out


@maker
def done_mid_episode(d: Path) -> Path:
    rows = clean_rows()
    rows[5]["terminateds"] = True
    return write_rows(rows, d / "done-early.parquet")


@maker
def terminated_and_truncated_same_step(d: Path) -> Path:
    """gymnasium's TimeLimit can set both on the last step: legal, read as terminated."""
    rows = clean_rows()
    for r in rows:
        if r["terminateds"]:
            r["truncateds"] = True
    return write_rows(rows, d / "both.parquet")


@maker
def negative_t(d: Path) -> Path:
    rows = clean_rows()
    ep = rows[0]["eps_id"]
    for r in rows:
        if r["eps_id"] == ep:
            r["t"] -= 5
    return write_rows(rows, d / "negative-t.parquet")


@maker
def float_t(d: Path) -> Path:
    rows = clean_rows()
    for r in rows:
        r["t"] = r["t"] + 0.5
    return write_untyped(rows, d / "float-t.parquet")


@maker
def t_gap(d: Path) -> Path:
    """One row of the first episode removed: t jumps 2 -> 4."""
    rows = clean_rows()
    del rows[3]
    return write_rows(rows, d / "t-gap.parquet")


@maker
def non_data_file_among_good(d: Path) -> Path:
    out = shipped_rows(d)
    (out / "notes.txt").write_text("recorded on my laptop\n")
    return out


@maker
def dangling_symlink_parquet(d: Path) -> Path:
    out = shipped_rows(d)
    (out / "zz-gone.parquet").symlink_to(d / "nowhere.parquet")
    return out


@maker
def unreadable_file(d: Path) -> Path:
    out = shipped_rows(d)
    path = out / "zz-locked.parquet"
    shutil.copy(out / "cartpole-v1-rows-00000.parquet", path)
    path.chmod(0)
    return out


@maker
def no_data_files(d: Path) -> Path:
    out = d / "data"
    out.mkdir()
    (out / "_SUCCESS").write_text("")
    (out / ".hidden.parquet").write_bytes(b"")
    return out


@maker
def empty_dir(d: Path) -> Path:
    out = d / "data"
    out.mkdir()
    return out


@maker
def glob_matching_nothing(d: Path) -> Path:
    shipped_rows(d)
    return d / "data" / "*.jsonl"


@maker
def missing_path(d: Path) -> Path:
    return d / "no-such-folder"


# ---------------------------------------------------------------------------------------------
# packed (compressed) columns
# ---------------------------------------------------------------------------------------------
@maker
def legacy_packed_rows(d: Path) -> Path:
    """Our own RLlib-style packed obs: base64(lz4(pickle(float32 array))) (no --legacy-pickle)."""
    return packed_rows(d, lambda v, k: legacy_cell(v))


@maker
def rllib_compressed_rows(d: Path) -> Path:
    path = d / "cartpole-v1_rows_compressed.parquet"
    shutil.copy(rllib_file(path.name), path)
    return path


@maker
def legacy_pickle_runs_code(d: Path) -> Path:
    """One packed cell is a pickle that would create d/PWNED (not a numpy array)."""
    return packed_rows(d, lambda v, k: legacy_cell(RunsOnLoad(d / MARKER) if k == 5 else v))


@maker
def legacy_pickle_not_an_array(d: Path) -> Path:
    """One packed cell is a pickled OrderedDict: admitted by the unpickler, but not an array."""
    from collections import OrderedDict

    return packed_rows(d, lambda v, k: legacy_cell(OrderedDict(a=1) if k == 5 else v))


@maker
def legacy_pickle_foreign_class(d: Path) -> Path:
    """One packed cell is a pickled fractions.Fraction: a global outside the allow list."""
    from fractions import Fraction

    return packed_rows(d, lambda v, k: legacy_cell(Fraction(1, 3) if k == 5 else v))


@maker
def legacy_pickle_huge_array(d: Path) -> Path:
    return packed_rows(d, lambda v, k: legacy_cell(HugeArray() if k == 5 else v))


@maker
def legacy_lz4_bomb(d: Path) -> Path:
    """A packed cell that inflates to 8 MiB of zeros, its size undeclared (the command sets a
    1 MiB limit): the decompressor itself must stop."""
    bomb = base64.b64encode(lz4.frame.compress(b"\0" * (8 << 20), store_size=False)).decode()
    return packed_rows(d, lambda v, k: bomb if k == 5 else legacy_cell(v))


@maker
def lz4_msgpack_bomb(d: Path) -> Path:
    """This project's codec, declared in a schema; one cell inflates to 8 MiB, size undeclared."""
    schema_file(d, {"obs": "lz4_msgpack"})
    bomb = lz4.frame.compress(b"\0" * (8 << 20), store_size=False)
    return packed_rows(d, lambda v, k: bomb if k == 5 else lz4_msgpack_cell(v))


@maker
def lz4_declared_size_bomb(d: Path) -> Path:
    """One cell is a 40-byte lz4 frame whose header declares 1 TiB (default limits)."""
    schema_file(d, {"obs": "lz4_msgpack"})
    bomb = lz4_declaring(1 << 40)
    return packed_rows(d, lambda v, k: bomb if k == 5 else lz4_msgpack_cell(v))


# ---------------------------------------------------------------------------------------------
# msgpack episodes
# ---------------------------------------------------------------------------------------------
@maker
def good_episodes(d: Path) -> Path:
    return write_items(episode_items(), d / "good-episodes.parquet")


@maker
def episodes_corrupt_bytes(d: Path) -> Path:
    items = episode_items()
    bad = bytearray(items[2])
    bad[10:40] = b"\xc1" * 30  # 0xc1 is never used by msgpack
    items[2] = bytes(bad)
    return write_items(items, d / "corrupt.parquet")


@maker
def episodes_truncated_record(d: Path) -> Path:
    items = episode_items()
    items[2] = items[2][: len(items[2]) // 2]
    return write_items(items, d / "cut-record.parquet")


@maker
def episodes_object_dtype_pickle(d: Path) -> Path:
    """Observations as an object-dtype msgpack-numpy record holding a pickle that creates PWNED."""
    items = episode_items()
    st = state(items[2])
    st["observations"]["data"] = {
        b"nd": True,
        b"type": "|O",
        b"kind": b"O",
        b"shape": [1],
        b"data": pickle.dumps(RunsOnLoad(d / MARKER)),
    }
    items[2] = packb(st)
    return write_items(items, d / "object-dtype.parquet")


@maker
def episodes_declared_size_bomb(d: Path) -> Path:
    """Observations declare shape (2**40, 4) float32 and carry 16 bytes."""
    items = episode_items()
    st = state(items[2])
    rec = nd(np.zeros(4, np.float32))
    rec[b"shape"] = [1 << 40, 4]
    st["observations"]["data"] = rec
    items[2] = packb(st)
    return write_items(items, d / "shape-bomb.parquet")


@maker
def episodes_bin_header_bomb(d: Path) -> Path:
    """A record that is one msgpack bin32 header claiming 4 GiB, followed by 8 bytes."""
    items = episode_items()
    items[2] = b"\xc6\xff\xff\xff\xff" + b"\0" * 8
    return write_items(items, d / "bin-bomb.parquet")


@maker
def episodes_lengths_disagree(d: Path) -> Path:
    """Rewards of one episode have 3 entries fewer than its actions."""
    items = episode_items()
    st = state(items[2])
    rec = st["rewards"]["data"]
    n = rec[b"shape"][0] - 3
    rec[b"shape"] = [n]
    rec[b"data"] = rec[b"data"][: 8 * n]
    items[2] = packb(st)
    return write_items(items, d / "lengths.parquet")


@maker
def episodes_nan_reward(d: Path) -> Path:
    items = episode_items()
    st = state(items[2])
    rewards = np.frombuffer(st["rewards"]["data"][b"data"], np.float64).copy()
    rewards[3] = np.nan
    st["rewards"]["data"] = nd(rewards)
    items[2] = packb(st)
    return write_items(items, d / "nan.parquet")


@maker
def episodes_not_msgpack(d: Path) -> Path:
    items = episode_items()
    items[2] = b"this record is plain text, not msgpack"
    return write_items(items, d / "text-record.parquet")


@maker
def episodes_record_not_a_map(d: Path) -> Path:
    items = episode_items()
    items[2] = packb([1, 2, 3])
    return write_items(items, d / "list-record.parquet")


@maker
def episodes_multi_agent(d: Path) -> Path:
    items = episode_items()
    items[2] = packb({"id_": "ma", "agent_episodes": {}, "agent_to_module_mapping": {}})
    return write_items(items, d / "multi-agent.parquet")


@maker
def episodes_item_as_text(d: Path) -> Path:
    """An ``item`` column of strings: not msgpack records."""
    return write_items(["episode one", "episode two"], d / "item-text.parquet", pa.string())


# ---------------------------------------------------------------------------------------------
# old-stack JSON lines
# ---------------------------------------------------------------------------------------------
@maker
def old_stack_good(d: Path) -> Path:
    return write_lines(old_stack_lines(), d / "old.json")


@maker
def json_non_object_line(d: Path) -> Path:
    lines: list[Any] = old_stack_lines()
    lines.insert(1, [1, 2, 3])
    return write_lines(lines, d / "list-line.json")


@maker
def json_broken_line(d: Path) -> Path:
    lines: list[Any] = old_stack_lines()
    text = json.dumps(lines[2], default=_plain)
    lines[2] = text[: len(text) // 2]
    return write_lines(lines, d / "broken-line.json")


@maker
def json_empty_file(d: Path) -> Path:
    path = d / "empty.json"
    path.write_text("")
    return path


@maker
def json_unknown_type(d: Path) -> Path:
    lines = old_stack_lines()
    lines[1]["type"] = "TrajectoryBatch"
    return write_lines(lines, d / "unknown-type.json")


@maker
def json_ragged_columns(d: Path) -> Path:
    lines = old_stack_lines()
    lines[1]["rewards"] = lines[1]["rewards"][:-2]
    return write_lines(lines, d / "ragged.json")


@maker
def json_missing_obs(d: Path) -> Path:
    lines = old_stack_lines()
    for ln in lines:
        del ln["obs"]
    return write_lines(lines, d / "no-obs.json")


@maker
def json_compressed_old_stack(d: Path) -> Path:
    path = d / "cartpole-v1_old_stack_json_compressed.json"
    shutil.copy(rllib_file(path.name), path)
    return path


@maker
def json_compressed_pickle_runs_code(d: Path) -> Path:
    """An old-stack line whose packed obs column is a pickle that would create PWNED."""
    lines = old_stack_lines()
    lines[1]["obs"] = legacy_cell(RunsOnLoad(d / MARKER))
    return write_lines(lines, d / "pickle-obs.json")


# ---------------------------------------------------------------------------------------------
# configuration and arguments (good data; the case's command carries the bad part)
# ---------------------------------------------------------------------------------------------
@maker
def good_rows(d: Path) -> Path:
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def yaml_config_not_a_mapping(d: Path) -> Path:
    (d / "config.yaml").write_text("- n_step: 3\n- gamma: 0.9\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_unknown_section(d: Path) -> Path:
    (d / "config.yaml").write_text("sampling:\n  n_step: 3\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_bad_value(d: Path) -> Path:
    (d / "config.yaml").write_text("sample:\n  n_step: -2\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_invalid_json(d: Path) -> Path:
    (d / "config.json").write_text('{"sample": {"n_step": 3,}}\n')
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def schema_invalid_json(d: Path) -> Path:
    (d / "schema.json").write_text('{"name": "broken", "columns": {')
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def out_not_empty(d: Path) -> Path:
    (d / "out").mkdir()
    (d / "out" / "keep.txt").write_text("earlier results\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def out_parent_is_a_file(d: Path) -> Path:
    (d / "blocker").write_text("a file where a folder should be\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def quarantine_dir_is_a_file(d: Path) -> Path:
    (d / "q").write_text("a file\n")
    return nan_reward(d)


# ---------------------------------------------------------------------------------------------
# issue 20: hostile names and values (each costs a bounded amount: one short line, or kept)
# ---------------------------------------------------------------------------------------------
def renamed_first_episode(eps_id: str) -> list[dict[str, Any]]:
    """The clean rows (4 episodes, 59 rows) with the first episode's id replaced by ``eps_id``."""
    rows = clean_rows()
    first = rows[0]["eps_id"]
    for r in rows:
        if r["eps_id"] == first:
            r["eps_id"] = eps_id
    return rows


@maker
def non_utf8_file_name(d: Path) -> Path:
    """A good file whose name is not UTF-8 (bytes ``ff fe``) beside a good one: Python lists it
    with surrogates, which Arrow cannot open."""
    out = d / "data"
    write_rows(clean_rows(2), out / "good.parquet")
    bad = os.path.join(os.fsencode(out), b"zz-bad\xff\xfe.parquet")
    with open(bad, "wb") as fh:
        fh.write((out / "good.parquet").read_bytes())
    return out


@maker
def eps_id_with_nul(d: Path) -> Path:
    """The first episode's id holds a NUL byte (``ab\\x00cd``): HDF5 strings end there."""
    return write_rows(renamed_first_episode("ab\x00cd"), d / "nul-id.parquet")


@maker
def eps_id_of_a_megabyte(d: Path) -> Path:
    """A 1 MiB episode id, and a NaN reward at t=5 of that episode to name it in an error."""
    rows = renamed_first_episode("E" * (1 << 20))
    rows[5]["rewards"] = float("nan")
    return write_rows(rows, d / "big-id.parquet")


def _alias_bomb(levels: int = 9) -> str:
    """The "billion laughs" in one config value: 9 aliases per level, 9**levels strings."""
    items = ['&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "sample:\n  n_step: [" + ", ".join(items) + "]\n"


@maker
def yaml_alias_bomb(d: Path) -> Path:
    """A 500-byte config whose aliases expand to 9**9 values (ran past 120 s and 2.4 GB)."""
    (d / "config.yaml").write_text(_alias_bomb())
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def yaml_recursive_alias(d: Path) -> Path:
    """An alias inside the node its anchor names: a list that holds itself."""
    (d / "config.yaml").write_text("sample:\n  n_step: &a [1, *a]\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_too_large(d: Path) -> Path:
    """A 2 MiB config file (a comment): a config is a few KiB."""
    (d / "config.yaml").write_text("# " + "x" * (2 << 20) + "\nsample:\n  n_step: 3\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_nested_too_deeply(d: Path) -> Path:
    """100,000 nested JSON lists: Python's parser runs out of recursion."""
    (d / "config.json").write_text('{"seed": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_huge_train_batch_size(d: Path) -> Path:
    """train_batch_size 10**12 in a config file (was a MemoryError traceback)."""
    (d / "config.yaml").write_text("sample:\n  train_batch_size: 1000000000000\n")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def config_read_section(d: Path) -> Path:
    """A config file with a ``read:`` section (was an AttributeError traceback)."""
    (d / "config.yaml").write_text("read:\n  format: rows\n  on_invalid: skip\n")
    return nan_reward(d)


# ---------------------------------------------------------------------------------------------
# issue 20: Parquet bombs (files of KBs whose footer claims, or whose pages hold, gigabytes),
# and files of one input whose columns disagree
# ---------------------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def forge_parquet_count(path: Path, old: int, new: int, fields: int) -> Path:
    """Rewrites, in the footer of the Parquet file ``path``, the first ``fields`` Thrift i64
    fields holding ``old`` (compact protocol: zigzag varints) to hold ``new``, and the footer's
    length. In the order pyarrow writes them: the file's row count, then per row group its row
    count and each column's value count."""
    raw = path.read_bytes()
    assert raw[-4:] == b"PAR1"
    n = struct.unpack("<I", raw[-8:-4])[0]
    footer = raw[-8 - n : -8]
    pattern, forged = _varint(old << 1), _varint(new << 1)  # zigzag of a non-negative i64
    out, i, done = bytearray(), 0, 0
    while i < len(footer):
        hit = footer.startswith(pattern, i)
        if hit and done < fields and i and footer[i - 1] & 0x0F == 6:  # an i64 field header
            out += forged
            i += len(pattern)
            done += 1
            continue
        out.append(footer[i])
        i += 1
    assert done == fields, (done, fields)
    path.write_bytes(raw[: -8 - n] + bytes(out) + struct.pack("<I", len(out)) + b"PAR1")
    return path


@maker
def parquet_dictionary_bomb(d: Path) -> Path:
    """11 KB: an ``eps_id`` column whose one dictionary entry (10 KB of 'x') 200,000 rows index
    (2 GB as strings), beside plain rows columns."""
    n = 200_000
    ids = pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array(["x" * 10_000]))
    table = pa.table({"eps_id": ids, "rewards": np.zeros(n), "actions": np.zeros(n, np.int64)})
    path = d / "dictionary-bomb.parquet"
    pq.write_table(table, path, compression="zstd", store_schema=False)
    return path


@maker
def parquet_page_bomb(d: Path) -> Path:
    """55 KB of zstd pages of zeros: 1,024 observations of 1 MiB each (1 GiB decoded), in
    row groups of 16 (what the writer holds at once: 16 MiB)."""
    chunk = pa.table({"obs": pa.array([bytes(1 << 20)] * 16, pa.binary())})
    path = d / "page-bomb.parquet"
    with pq.ParquetWriter(
        path, chunk.schema, compression="zstd", use_dictionary=False, write_statistics=False
    ) as w:
        for _ in range(64):
            w.write_table(chunk)
    return path


@maker
def parquet_forged_row_count(d: Path) -> Path:
    """4,321 rows of CartPole-like columns; the footer's file, row group and column counts
    forged to 5e9 (readers allocate by the claimed count)."""
    n, cols = 4321, 3
    table = pa.table(
        {
            "eps_id": np.repeat(np.arange(n // 20 + 1), 20)[:n].astype(str),
            "rewards": np.ones(n),
            "actions": np.zeros(n, np.int64),
        }
    )
    path = d / "forged-rows.parquet"
    pq.write_table(table, path)
    return forge_parquet_count(path, n, 5_000_000_000, 2 + cols)


@maker
def parquet_footer_claims_rows(d: Path) -> Path:
    """Good rows whose footer claims 5e9 rows; its row group holds what it holds."""
    path = write_rows(clean_rows(), d / "claims-rows.parquet")
    n = pq.read_metadata(path).num_rows
    return forge_parquet_count(path, n, 5_000_000_000, 1)


def _shipped_halves() -> tuple[pa.Table, pa.Table]:
    """The first shipped rows file to its last episode's end, cut between episodes in two."""
    table = pq.read_table(sorted(ROWS.glob("*.parquet"))[0])
    done = np.flatnonzero(
        np.asarray(table.column("terminateds")) | np.asarray(table.column("truncateds"))
    )
    table = table.slice(0, int(done[-1]) + 1)
    ids = table.column("eps_id").to_pylist()
    cut = ids.index(ids[len(ids) // 2])  # where the middle row's episode starts
    return table.slice(0, cut), table.slice(cut)


def _with_column(table: pa.Table, name: str, field: pa.Field, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), field, values)


def _drifting(d: Path, second: pa.Table) -> Path:
    """The input folder ``d/data``: the first half as ``a.parquet``, ``second`` as ``b``."""
    first, _ = _shipped_halves()
    (d / "data").mkdir()
    pq.write_table(first, d / "data" / "a.parquet")
    pq.write_table(second, d / "data" / "b.parquet")
    return d / "data"


@maker
def drift_obs_shape(d: Path) -> Path:
    """Two files of one input: observations of shape (4,), then (5,) (a zero appended)."""
    _, second = _shipped_halves()
    for name in ("obs", "new_obs"):
        field, column = second.schema.field(name), second.column(name).combine_chunks()
        meta = {**(field.metadata or {}), b"ARROW:extension:metadata": b"[5]"}
        if isinstance(field.type, pa.ExtensionType):  # Ray's tensor type, registered here
            meta[b"ARROW:extension:name"] = field.type.extension_name.encode()
            field, column = pa.field(name, field.type.storage_type), column.storage
        flat = pc.list_flatten(column).to_numpy().reshape(-1, 4)
        wide = np.concatenate([flat, np.zeros((len(flat), 1), flat.dtype)], axis=1)
        offsets = pa.array(np.arange(len(wide) + 1, dtype=np.int64) * 5)
        second = _with_column(
            second,
            name,
            field.with_metadata(meta),
            pa.LargeListArray.from_arrays(offsets, pa.array(wide.reshape(-1))),
        )
    return _drifting(d, second)


@maker
def drift_actions_int_string(d: Path) -> Path:
    """Two files of one input: int64 actions, then the same actions as strings."""
    _, second = _shipped_halves()
    actions = pc.cast(second.column("actions"), pa.string())
    return _drifting(d, _with_column(second, "actions", pa.field("actions", pa.string()), actions))


@maker
def drift_rewards_float32(d: Path) -> Path:
    """Two files of one input: float64 rewards, then float32 (a widening: accepted)."""
    _, second = _shipped_halves()
    rewards = pc.cast(second.column("rewards"), pa.float32())
    return _drifting(d, _with_column(second, "rewards", pa.field("rewards", pa.float32()), rewards))


@maker
def drift_rewards_int64(d: Path) -> Path:
    """Two files of one input: float64 rewards, then int64 (joined as float64: accepted)."""
    _, second = _shipped_halves()
    rewards = pc.cast(second.column("rewards"), pa.int64())
    return _drifting(d, _with_column(second, "rewards", pa.field("rewards", pa.int64()), rewards))


# ---------------------------------------------------------------------------------------------
# issue 36: the last hostile inputs (no hang, no traceback, no silent inf or lossy id)
# ---------------------------------------------------------------------------------------------
_UNBLOCK = """
import os, sys, time
fifo, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        break
    except OSError:  # ENXIO: no reader yet (or ever: the fix refuses it unopened)
        time.sleep(0.5)
        continue
    os.close(fd)
"""


def _unblock_fifo(fifo: Path, seconds: float = 300) -> None:
    """A watchdog for ``seconds``: whenever a reader opens ``fifo``, a writer opens and closes
    it, so a reader blocked in ``open`` sees end-of-file and a regression fails instead of
    hanging the suite. A process of its own: the blocked reader may hold the GIL."""
    import subprocess

    subprocess.Popen(
        [sys.executable, "-c", _UNBLOCK, str(fifo), str(seconds)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    _unblock_fifo(path)
    return path


@maker
def manifest_lists_fifo(d: Path) -> Path:
    """A committed dataset folder whose ``_manifest.json`` lists a FIFO (recorded as 0 bytes)
    beside a good file: opening the FIFO to read blocks until a writer comes."""
    out = d / "data"
    good = write_rows(clean_rows(2), out / "good.parquet")
    _fifo(out / "zz-pipe.parquet")
    files = [
        {"name": "good.parquet", "rows": 34, "bytes": good.stat().st_size},
        {"name": "zz-pipe.parquet", "rows": 0, "bytes": 0},
    ]
    manifest = {"content": "dataset", "files_dir": "", "files": files}
    (out / "_manifest.json").write_text(json.dumps(manifest))
    return out


@maker
def fifo_named_directly(d: Path) -> Path:
    """A FIFO given as the input path."""
    return _fifo(d / "pipe.parquet")


@maker
def fifo_in_folder(d: Path) -> Path:
    """A FIFO with a data file's name in a folder of good files."""
    out = d / "data"
    write_rows(clean_rows(2), out / "good.parquet")
    _fifo(out / "zz-pipe.parquet")
    return out


@maker
def fifo_as_config(d: Path) -> Path:
    """A FIFO given as the config file."""
    _fifo(d / "config.yaml")
    return write_rows(clean_rows(), d / "good.parquet")


@maker
def parquet_duplicate_column(d: Path) -> Path:
    """Two columns named ``rewards`` in one Parquet file."""
    table = pa.Table.from_pylist(clean_rows(), schema=rows_schema())
    table = table.append_column("rewards", table.column("rewards"))
    path = d / "twice.parquet"
    pq.write_table(table, path)
    return path


@maker
def rewards_near_float_max(d: Path) -> Path:
    """Finite rewards of 1e308: three summed (n_step=3) overflow float64 to inf."""
    rows = clean_rows()
    for r in rows:
        r["rewards"] = 1e308
    return write_rows(rows, d / "huge-rewards.parquet")


@maker
def nan_obs(d: Path) -> Path:
    """A NaN in the first observation of the first episode (row 0: no step before it)."""
    rows = clean_rows()
    rows[0]["obs"] = [rows[0]["obs"][0], float("nan"), *rows[0]["obs"][2:]]
    return write_rows(rows, d / "nan-obs.parquet")


@maker
def inf_new_obs(d: Path) -> Path:
    """An infinite value in the last next-observation of the first episode (row 17, t=17)."""
    rows = clean_rows()
    rows[17]["new_obs"] = [float("inf"), *rows[17]["new_obs"][1:]]
    return write_rows(rows, d / "inf-new-obs.parquet")


@maker
def nan_action(d: Path) -> Path:
    """Float actions (a Box action space) with a NaN at row 5."""
    rows = clean_rows()
    for r in rows:
        r["actions"] = [float(r["actions"])]
    rows[5]["actions"] = [float("nan")]
    return write_untyped(rows, d / "nan-action.parquet")


@maker
def renamed_column_in_one_file(d: Path) -> Path:
    """Two files of one input: ``rewards`` in the first, ``reward`` in the second."""
    first, second = _shipped_halves()
    second = second.rename_columns(["reward" if n == "rewards" else n for n in second.column_names])
    (d / "data").mkdir()
    pq.write_table(first, d / "data" / "a.parquet")
    pq.write_table(second, d / "data" / "b.parquet")
    return d / "data"


@maker
def ragged_list_obs(d: Path) -> Path:
    """Observations as lists of lists (a (2, 2) grid per step); the one at row 41 has a row of
    three values."""
    rows = clean_rows()
    for r in rows:
        o, n = r["obs"], r["new_obs"]
        r["obs"], r["new_obs"] = [o[:2], o[2:]], [n[:2], n[2:]]
    rows[41]["obs"] = [rows[41]["obs"][0], [*rows[41]["obs"][1], 0.5]]
    return write_untyped(rows, d / "ragged-obs.parquet")


@maker
def garbled_parquet_footer(d: Path) -> Path:
    """A good file whose footer's bytes are overwritten (its length and magic kept)."""
    path = write_rows(clean_rows(), d / "garbled.parquet")
    raw = bytearray(path.read_bytes())
    n = struct.unpack("<I", raw[-8:-4])[0]
    start = len(raw) - 8 - n
    raw[start + 8 : start + 40] = b"\xff" * 32
    path.write_bytes(bytes(raw))
    return path


@maker
def json_lines_named_parquet(d: Path) -> Path:
    """Old-stack JSON lines in a file named ``.parquet``."""
    return write_lines(old_stack_lines(), d / "lines.parquet")


@maker
def binary_eps_ids(d: Path) -> Path:
    """A binary ``eps_id`` column: two episodes whose ids differ only in non-UTF-8 bytes
    (``ff 31`` and ``fe 31``: both are U+FFFD '1' once decoded with replacement)."""
    rows = clean_rows()
    ids = list(dict.fromkeys(r["eps_id"] for r in rows))
    names = {ids[0]: b"\xff1", ids[1]: b"\xfe1"}
    for r in rows:
        r["eps_id"] = names.get(r["eps_id"], r["eps_id"].encode())
    schema = rows_schema()
    schema = schema.set(schema.get_field_index("eps_id"), pa.field("eps_id", pa.binary()))
    return write_rows(rows, d / "binary-ids.parquet", schema)


@maker
def episodes_is_terminated_text(d: Path) -> Path:
    """An episode record whose ``is_terminated`` is the string ``"yes"``."""
    items = episode_items()
    st = state(items[2])
    st["is_terminated"] = "yes"
    items[2] = packb(st)
    return write_items(items, d / "yes.parquet")


@maker
def old_stack_corrupt_lz4(d: Path) -> Path:
    """Old-stack lines with packed (base64 lz4) obs; line 2's is a corrupt lz4 frame."""
    lines = old_stack_lines()
    for ln in lines:
        ln["obs"] = legacy_cell(np.asarray(ln["obs"], np.float32))
    frame = bytearray(lz4.frame.compress(pickle.dumps(np.zeros((15, 4), np.float32))))
    frame[20:40] = b"\xff" * 20
    lines[1]["obs"] = base64.b64encode(bytes(frame)).decode()
    return write_lines(lines, d / "corrupt-lz4.json")


def main(argv: list[str]) -> int:
    """Writes every case into ``OUT_DIR/<maker>/`` (skipping those whose RLlib files are absent)."""
    if len(argv) != 1:
        print("usage: python tests/corpus/make_corpus.py OUT_DIR", file=sys.stderr)
        return 2
    root = Path(argv[0])
    for name, make in MAKERS.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=False)
        try:
            print(f"{name}: {make(d)}")
        except SourceMissing as e:
            print(f"{name}: skipped ({e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
