"""Untrusted Parquet (issue 20): bombs are refused from their footer, fast and small, by every
reader; real data passes; files whose columns disagree get the same answer on both engines.

The bombs come from the corpus makers (``corpus/make_corpus.py``, "issue 20: Parquet bombs"):
a dictionary bomb (11 KB -> 2 GB), a page bomb of zstd zeros (55 KB -> 1 GiB) and a forged row
count (5e9 rows in 2 KB), plus a footer whose row count disagrees with its row groups.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from corpus import make_corpus as mc

from offline_prelearner.config import DEFAULT_LIMITS, PreLearnerConfig
from offline_prelearner.errors import DataError
from offline_prelearner.io.parquet_guard import (
    SMALL_FILE_BYTES,
    check_drift,
    check_files,
    decoded_bytes,
    open_parquet,
)

BOMBS = {
    "parquet_dictionary_bomb": "max_parquet_expansion",
    "parquet_page_bomb": "max_parquet_expansion",
    "parquet_forged_row_count": "max_parquet_row_group_bytes",
    "parquet_footer_claims_rows": "claims 5000000000 rows",
}

# Every reader of a Parquet file, in a fresh process capped at 5 GB of address space (a bomb
# that got through would fail there, not take the machine): each refusal and the peak RSS (the
# bound is memory, not seconds: a loaded machine is slow, not wrong).
_PROBE = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (5 << 30, 5 << 30))
def peak():
    # VmHWM: this program's peak RSS. getrusage's ru_maxrss also counts the forking process's
    # pages (Linux keeps the high-water mark across exec), the pytest process's ~230 MB here.
    try:
        with open("/proc/self/status") as fh:
            return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmHWM:")) / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def attempt(read):
    try:
        read()
        got = None
    except DataError as e:
        got = str(e)
    except BaseException as e:
        got = f"{type(e).__name__}: {e}"
    return {"error": got}

from offline_prelearner.errors import DataError
from offline_prelearner.io.parquet_guard import open_parquet

path = sys.argv[1]
out = {"open_parquet": attempt(lambda: open_parquet(path)), "guard_peak_mb": peak()}

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.io.samples import read_samples
from offline_prelearner.io.sources import read_table
from offline_prelearner.jobs.file_batches import iter_file_batches, parquet_chunks
from offline_prelearner.jobs.convert.relayout import relayout_rows
from offline_prelearner.jobs.batch.plan import plan_units

readers = {
    "read_table": lambda: read_table(path),
    "read_table_keys": lambda: read_table(path, columns=["obs"] if "page" in path else None),
    "parquet_chunks": lambda: list(parquet_chunks(path, 1024)),
    "read_samples": lambda: read_samples(path),
    "iter_file_batches": lambda: list(iter_file_batches([path], 256)),
    "plan_units": lambda: plan_units([path], PreLearnerConfig()),
    "relayout": lambda: relayout_rows([path], sys.argv[2], "fast"),
}
out["imported_mb"] = peak()
out.update({name: attempt(read) for name, read in readers.items()})
out["readers_peak_mb"] = peak()
print(json.dumps(out))
"""


@pytest.mark.parametrize("make", sorted(BOMBS))
def test_a_parquet_bomb_is_refused_by_every_reader_within_200_mb(tmp_path: Path, make: str) -> None:
    path = mc.MAKERS[make](tmp_path)
    assert path.stat().st_size < 100_000  # KBs that claim (or hold) gigabytes
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path), str(tmp_path / "relayout")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    readers = ("open_parquet", "read_table", "read_table_keys", "parquet_chunks", "read_samples")
    for reader in (*readers, "iter_file_batches"):
        error = got[reader]["error"]
        assert error is not None and error.startswith("refused Parquet file"), (reader, error)
        assert path.name in error and BOMBS[make] in error and "\n" not in error, (reader, error)
    assert got["plan_units"]["error"] == got["read_table"]["error"]  # the driver's check
    assert got["relayout"]["error"] is not None and path.name in got["relayout"]["error"]
    # The whole process, the guard alone (Python and pyarrow are ~90 MB of it), then what the
    # refusals of every reader added to the package's imports (~230 MB: gymnasium, numpy...).
    assert got["guard_peak_mb"] < 200, got
    assert got["readers_peak_mb"] - got["imported_mb"] < 50, got


def test_a_bomb_refusal_names_the_row_group_column_and_claim(tmp_path: Path) -> None:
    path = mc.parquet_forged_row_count(tmp_path)
    with pytest.raises(DataError) as e:
        open_parquet(str(path))
    assert e.value.reason == "unreadable_file"  # counted per file under skip / quarantine
    assert e.value.where.file == str(path) and e.value.where.column == "rewards"
    assert "row group 0 of 1 (5,000,000,000 rows)" in str(e.value)
    (tmp_path / "m").mkdir()
    mismatch = mc.parquet_footer_claims_rows(tmp_path / "m")
    with pytest.raises(DataError, match="claims 5000000000 rows, its 1 row group"):
        open_parquet(str(mismatch))


def _pixel_rows(path: Path, n: int = 512) -> Path:
    """84x84x4 uint8 frame stacks in Ray's tensor layout, zstd, as the standard pixel set is
    written (``shared/bench/make_data.py``): a cart and a pole drawn on a black frame."""
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.normal(0, 1.5, n)).astype(int) % 70
    frames = np.zeros((n, 84, 84), np.uint8)
    for i, cx in enumerate(x):
        frames[i, 60:66, cx : cx + 14] = 255  # the cart
        frames[i, 30:60, cx + 6 : cx + 8] = 180  # the pole
        frames[i, 66:68, :] = 90  # the ground
    obs = np.stack([frames[np.maximum(np.arange(n) - k, 0)] for k in (3, 2, 1, 0)], axis=-1)
    flat = pa.array(obs.reshape(-1))
    offsets = pa.array(np.arange(n + 1, dtype=np.int64) * obs[0].size)
    meta = {
        b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
        b"ARROW:extension:metadata": b"[84, 84, 4]",
    }
    table = pa.table(
        {
            "eps_id": pa.array([f"{i // 200:032x}" for i in range(n)]),
            "obs": pa.LargeListArray.from_arrays(offsets, flat),
            "actions": pa.array(rng.integers(0, 2, n)),
            "rewards": pa.array(np.ones(n)),
        }
    )
    table = table.cast(
        pa.schema([f.with_metadata(meta) if f.name == "obs" else f for f in table.schema])
    )
    pq.write_table(table, path, use_dictionary=["eps_id"], compression="zstd")
    return path


def _expansion(path: Path) -> float:
    meta = pq.read_metadata(path)
    return (
        sum(c.bytes for rg in decoded_bytes(meta) for c in rg if not c.loose) / path.stat().st_size
    )


def test_real_data_passes_with_room_to_spare(tmp_path: Path) -> None:
    files = sorted((REPO / "datasets").glob("*/*/*.parquet"))
    assert len(files) >= 9
    for f in files:
        open_parquet(str(f))  # no refusal
        assert _expansion(f) < 10
    pixels = _pixel_rows(tmp_path / "pixels.parquet")
    pf = open_parquet(str(pixels))
    assert pf.metadata.num_rows == 512
    # The default is far above what frames compress to (the standard 100k-row pixel set: 198x
    # at most per file), and a pixel file above the 64 MiB exemption is judged by the ratio.
    ratio = _expansion(pixels)
    assert 20 < ratio < DEFAULT_LIMITS.max_parquet_expansion / 5, ratio
    assert sum(c.bytes for rg in decoded_bytes(pf.metadata) for c in rg) < SMALL_FILE_BYTES


def test_the_shipped_rllib_files_pass(shared_data: Path) -> None:
    for f in sorted(shared_data.glob("*.parquet")):
        open_parquet(str(f))


def test_limits_come_from_the_config(tmp_path: Path) -> None:
    """``read.limits`` reaches the readers: a 1 MB row-group limit refuses the pixel rows in
    planning (the driver) and in the unit's read; the default takes them."""
    from offline_prelearner.jobs.batch.plan import plan_units
    from offline_prelearner.jobs.file_batches import parquet_chunks

    pixels = str(_pixel_rows(tmp_path / "pixels.parquet", n=64))
    tight = PreLearnerConfig().with_updates(
        {"read.limits": {"max_parquet_row_group_bytes": 1 << 20}}
    )
    with pytest.raises(DataError, match="above max_parquet_row_group_bytes=1048576"):
        plan_units([pixels], tight)
    with pytest.raises(DataError, match="above max_parquet_row_group_bytes=1048576"):
        next(parquet_chunks(pixels, 16, limits=tight.read.limits))
    assert plan_units([pixels], PreLearnerConfig()).files[0].rows == 64
    check_files([pixels])


def test_inspect_and_convert_take_the_limits_of_their_read_config(tmp_path: Path) -> None:
    """``inspect_path`` and ``convert_path`` read with ``read.limits`` too (they read with the
    defaults before): the same tight row-group limit refuses the pixel rows there."""
    from offline_prelearner.config import DecodeLimits, ReadConfig
    from offline_prelearner.jobs.convert import convert_path
    from offline_prelearner.jobs.inspection import inspect_path

    (tmp_path / "in").mkdir()
    pixels = _pixel_rows(tmp_path / "in" / "pixels.parquet", n=64)
    tight = ReadConfig(
        format="auto", on_invalid="raise", limits=DecodeLimits(max_parquet_row_group_bytes=1 << 20)
    )
    for run in (
        lambda: inspect_path(pixels.parent, tight),
        lambda: convert_path(pixels.parent, "episodes", tmp_path / "eps", tight),
        lambda: convert_path(pixels.parent, "minari", tmp_path / "mds", tight),
    ):
        with pytest.raises(DataError, match="above max_parquet_row_group_bytes=1048576"):
            run()


# ------------------------------------------------------------------------------------------------
# schema drift
# ------------------------------------------------------------------------------------------------
def _schema(**cols: Any) -> pa.Schema:
    return pa.schema([c if isinstance(c, pa.Field) else pa.field(n, c) for n, c in cols.items()])


def _tensor(shape: str) -> pa.Field:
    return pa.field(
        "obs",
        pa.large_list(pa.float32()),
        metadata={
            b"ARROW:extension:name": b"ray.data.arrow_tensor_v2",
            b"ARROW:extension:metadata": shape.encode(),
        },
    )


@pytest.mark.parametrize(
    ("a", "b", "refused"),
    [
        (pa.int32(), pa.int64(), None),
        (pa.float32(), pa.float64(), None),
        (pa.int64(), pa.float64(), None),
        (pa.string(), pa.large_string(), None),
        (pa.null(), pa.string(), None),  # RLlib's unset agent_id beside a set one
        (pa.int64(), pa.string(), "is int64 in 'a.parquet' and string in 'b.parquet'"),
        (pa.float32(), pa.list_(pa.float32()), "cannot join"),
    ],
)
def test_drift_rule_for_types(a: pa.DataType, b: pa.DataType, refused: str | None) -> None:
    schemas: list[pa.Schema | None] = [_schema(eps_id=pa.string(), x=a), None, _schema(x=b)]
    files = ["a.parquet", "empty.parquet", "b.parquet"]
    if refused is None:
        check_drift(files, schemas)
        check_drift(files[::-1], schemas[::-1])
        return
    with pytest.raises(DataError, match=refused) as e:
        check_drift(files, schemas)
    assert e.value.reason == "schema_drift" and e.value.where.column == "x"
    assert e.value.where.file == "b.parquet"


def test_drift_rule_for_shapes() -> None:
    check_drift(["a", "b"], [_schema(obs=_tensor("[4]")), _schema(obs=_tensor("[4]"))])
    with pytest.raises(
        DataError, match=r"column 'obs' holds cells of shape \(4,\) in 'a' and \(5,\) in 'b'"
    ):
        check_drift(["a", "b"], [_schema(obs=_tensor("[4]")), _schema(obs=_tensor("[5]"))])


_DRIFT = [
    "drift_obs_shape",
    "drift_actions_int_string",
    "drift_rewards_float32",
    "drift_rewards_int64",
]


def _outcome(path: Path, out: Path, engine: str) -> dict[str, Any]:
    from offline_prelearner.jobs.batch.batch_job import run_pipeline

    try:
        res = run_pipeline(str(path), PreLearnerConfig(), out_dir=out, engine=engine)
    except DataError as e:
        return {"error": type(e).__name__, "line": str(e), "out": out.exists()}
    samples = pq.read_table(out / "samples")
    assert res.stats["engine"] == engine
    keep = ("rows_in", "rows_balance", "samples_written", "files_rejected", "episodes_kept")
    return {"stats": {k: res.stats.get(k) for k in keep}, "samples": samples}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [*_DRIFT, "parquet_forged_row_count", "renamed_column_in_one_file", "parquet_duplicate_column"],
)
def test_both_engines_give_the_same_answer(ray_local: Any, tmp_path: Path, make: str) -> None:
    """``process`` over files that disagree (or a bomb): the same refusal line on both engines
    (from planning, on the driver), or the same stats and samples. On d952779 the obs shape
    was refused by the local engine and a traceback (exit 1) on Ray; integer and string actions
    a traceback on both. On ed48b1c a column renamed in one file (``reward``) was a null value
    in a double column, without the file on Ray; a column twice in a file a KeyError
    traceback."""
    (tmp_path / "in").mkdir()
    path = mc.MAKERS[make](tmp_path / "in")
    local = _outcome(path, tmp_path / "local", "local")
    ray = _outcome(path, tmp_path / "ray", "ray")
    if "error" in local:
        assert local == ray
        assert local["out"] is False
        return
    assert local["stats"] == ray["stats"]
    assert local["stats"]["rows_in"] == 976 and local["stats"]["rows_balance"]
    assert local["samples"].equals(ray["samples"])


@pytest.mark.ray
@pytest.mark.slow
def test_ray_data_reader_never_opens_a_bomb(ray_local: Any, tmp_path: Path) -> None:
    """The learner stream's Ray Data read (``group_by_episode``) checks the footers on the
    driver before ``read_parquet``, and so does the stream whose actors read their files."""
    from offline_prelearner.jobs.stream.learner_stream import _read, iter_learner_batches

    bomb = str(mc.parquet_dictionary_bomb(tmp_path))
    good = str(sorted((REPO / "datasets/cartpole-v1/rows").glob("*.parquet"))[0])
    with pytest.raises(DataError, match=r"dictionary-bomb\.parquet"):
        _read(ray_local, [good, bomb], PreLearnerConfig())
    assert _read(ray_local, [good], PreLearnerConfig()).count() == pq.read_metadata(good).num_rows
    # The learner stream whose actors read their own files: refused on the driver too.
    with pytest.raises(DataError, match=r"dictionary-bomb\.parquet"):
        next(iter(iter_learner_batches([good, bomb], PreLearnerConfig())))
