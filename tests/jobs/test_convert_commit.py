"""``convert`` as a commit: staged output, refused or replaced ``--out``, per-file units, resume.

Inputs are real old-stack records (RLlib 2.60's JsonWriter, ``shared/data/rllib-2.60``) cut into
batches and files so that episodes cross file boundaries, as ``truncate_episodes`` data does, and
a generated single-worker stream big enough to interrupt.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from test_convert import assert_same_episodes, read_back

from offline_prelearner.cli import main
from offline_prelearner.config import ReadConfig
from offline_prelearner.errors import DataError, DecodeError
from offline_prelearner.io.formats.sample_batches.reader import SampleBatchesReader
from offline_prelearner.jobs.batch.index import INDEX_FILE
from offline_prelearner.jobs.commit import MANIFEST_FILE, STATS_FILE
from offline_prelearner.jobs.convert import convert_path
from offline_prelearner.jobs.ownership import CommitError, staging_path

PLAIN = "cartpole-v1_old_stack_json_uncompressed.json"
PACKED = "cartpole-v1_old_stack_json_compressed.json"
BAD_LINE = "{not json\n"


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------
def real_records(shared_data: Path, name: str = PLAIN) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (shared_data / name).read_text().splitlines()]


def cut(rec: dict[str, Any], *at: int) -> list[dict[str, Any]]:
    """A record split into batches at steps ``at`` (every per-step column sliced)."""
    bounds = [0, *at, len(rec["obs"])]
    steps = {k: v for k, v in rec.items() if k != "type"}
    return [
        {"type": rec["type"], **{k: v[a:b] for k, v in steps.items()}}
        for a, b in itertools.pairwise(bounds)
    ]


def write_files(folder: Path, files: list[list[dict[str, Any]]], t: bool = True) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, recs in enumerate(files):
        p = folder / f"output-{i:02d}.json"
        lines = [json.dumps({k: v for k, v in r.items() if t or k != "t"}) for r in recs]
        p.write_text("".join(line + "\n" for line in lines))
        paths.append(p)
    return paths


def crossing_files(shared_data: Path, folder: Path, t: bool = True) -> list[Path]:
    """The 12 real episodes (r0..r11) in 6 files; r1, r2, r4 and r7 cross file boundaries, r1
    over three files, r2 from the unit of output-02 into output-03::

        00: r0 r1[:5]   01: r1[5:9]   02: r1[9:] r2[:10]   03: r2[10:] r3 r4[:4]
        04: r4[4:] r5 r6 r7[:3]       05: r7[3:] r8 r9 r10 r11
    """
    r = real_records(shared_data)
    r1, r2, r4, r7 = cut(r[1], 5, 9), cut(r[2], 10), cut(r[4], 4), cut(r[7], 3)
    layout = [
        [r[0], r1[0]],
        [r1[1]],
        [r1[2], r2[0]],
        [r2[1], r[3], r4[0]],
        [r4[1], r[5], r[6], r7[0]],
        [r7[1], *r[8:]],
    ]
    return write_files(folder, layout, t)


def restreamed(shared_data: Path, folder: Path, seed: int, n_files: int, t: bool = True) -> None:
    """The real steps as one stream, cut into batches and files at random (batches hold parts of
    several episodes, as old-stack ``truncate_episodes`` batches do)."""
    recs = real_records(shared_data)
    rng = np.random.default_rng(seed)
    cols = {k: [x for r in recs for x in r[k]] for k in recs[0] if k != "type"}
    n = len(cols["obs"])
    cuts = [0, *sorted(rng.choice(np.arange(1, n), 3 * n_files, replace=False).tolist()), n]
    batches = [
        {"type": "SampleBatch", **{k: v[a:b] for k, v in cols.items()}}
        for a, b in itertools.pairwise(cuts)
    ]
    at = [0, *sorted(rng.choice(np.arange(1, len(batches)), n_files - 1, replace=False)), None]
    write_files(folder, [batches[a:b] for a, b in itertools.pairwise(at)], t)


def stream_files(folder: Path, n_files: int, steps_per_file: int, seed: int = 0) -> None:
    """One worker's stream of CartPole-like episodes (20-60 steps) in 500-step batches."""
    rng = np.random.default_rng(seed)
    n = n_files * steps_per_file
    lens = rng.integers(20, 60, size=n // 20 + 1)
    ep = np.repeat(np.arange(len(lens)), lens)[:n]
    t = np.arange(n) - np.repeat(np.cumsum(lens) - lens, lens)[:n]
    end = t == lens[ep] - 1
    o = rng.normal(size=(n + len(lens), 4)).round(6)  # an episode of k steps has k + 1 obs
    at = np.arange(n) + ep
    folder.mkdir(parents=True)
    for i in range(n_files):
        lines = []
        for a in range(i * steps_per_file, (i + 1) * steps_per_file, 500):
            s = slice(a, a + 500)
            rec = {
                "type": "SampleBatch",
                "obs": o[at[s]].tolist(),
                "new_obs": o[at[s] + 1].tolist(),
                "actions": rng.integers(0, 2, 500).tolist(),
                "rewards": [1.0] * 500,
                "terminateds": end[s].tolist(),
                "truncateds": [False] * 500,
                "eps_id": (ep[s] + 1000).tolist(),
                "t": t[s].tolist(),
            }
            lines.append(json.dumps(rec) + "\n")
        (folder / f"output-{i:03d}.json").write_text("".join(lines))


# ---------------------------------------------------------------------------------------------
# outputs
# ---------------------------------------------------------------------------------------------
def output(out: Path) -> dict[str, bytes]:
    """Every file of a committed output except stats, manifest and index (which hold times),
    by name."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in (STATS_FILE, MANIFEST_FILE, INDEX_FILE)
    }


def assert_same_output(got: Path, want: Path) -> None:
    g, w = output(got), output(want)
    assert sorted(g) == sorted(w)
    assert all(g[k] == w[k] for k in w), [k for k in w if g[k] != w[k]]
    mg, mw = (json.loads((p / MANIFEST_FILE).read_text()) for p in (got, want))
    assert mg["files"] == mw["files"] and mg["quarantine"] == mw["quarantine"]


def manifests_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(MANIFEST_FILE)]


def counts(stats: dict[str, Any]) -> dict[str, Any]:
    drop = ("seconds", "steps_per_s", "units_reused", "out_dir", "quarantine_file", "input")
    return {k: v for k, v in stats.items() if k not in drop}


def break_file(path: Path) -> bytes:
    """Puts a malformed line in the middle of ``path``; returns the good bytes."""
    good = path.read_bytes()
    lines = good.decode().splitlines(keepends=True)
    path.write_text("".join([*lines[:1], BAD_LINE, *lines[1:]]))
    return good


# ---------------------------------------------------------------------------------------------
# the commit
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("to", ["rows", "episodes"])
def test_units_stitch_across_files_and_the_manifest_lists_every_file(
    tmp_path: Path, shared_data: Path, to: str
) -> None:
    crossing_files(shared_data, tmp_path / "in")
    out = tmp_path / "out"
    stats = convert_path(tmp_path / "in", to, out)
    want = SampleBatchesReader().read_file(shared_data / PLAIN).episodes
    assert_same_episodes(read_back(out, to), want)  # whole episodes, in first-seen order
    assert stats["units"] == 6 and stats["units_reused"] == 0
    assert stats["episodes_written"] == 12 and stats["fragments"] == 0 and stats["balanced"]
    assert stats["rows_in"] == stats["rows_out"] == 295
    assert json.loads((out / STATS_FILE).read_text()) == stats
    m = json.loads((out / MANIFEST_FILE).read_text())
    assert m["complete"] and m["config"]["to"] == to and m["files_dir"] == to  # OUT/<to>/
    assert [f"{to}/{f['name']}" for f in m["files"]] == stats["files_written"]
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet"))
    assert written == sorted(["_index.parquet", *stats["files_written"]])  # the index: after
    assert sum(f["rows"] for f in m["files"]) == (295 if to == "rows" else 12)
    # the index, written after the commit, describes the files the manifest lists
    index = pq.read_table(out / INDEX_FILE)
    assert sorted(index.column("path").to_pylist()) == sorted(stats["files_written"])
    assert [i["path"] for i in m["inputs"]] == sorted(str(p) for p in (tmp_path / "in").iterdir())
    # output-01 holds only a piece of r1 (owned by output-00's unit): its unit writes nothing
    assert not any(n.startswith(f"{to}/{to}-00001-") for n in stats["files_written"])
    assert not staging_path(out).exists()


def test_a_later_fragment_of_a_finished_episode_is_an_episode_of_its_own(tmp_path: Path) -> None:
    def rec(ts: list[int], done: bool) -> dict[str, Any]:
        n = len(ts)
        return {
            "type": "SampleBatch",
            "obs": [[float(t)] for t in ts],
            "new_obs": [[float(t + 1)] for t in ts],
            "actions": [0] * n,
            "rewards": [1.0] * n,
            "terminateds": [False] * (n - 1) + [done],
            "truncateds": [False] * n,
            "eps_id": [7] * n,
            "t": ts,
        }

    # episode 7 ends in file 0; file 2 repeats its last steps (a copy written twice)
    write_files(
        tmp_path / "in", [[rec([0, 1, 2], False)], [rec([3, 4], True)], [rec([3, 4], True)]]
    )
    stats = convert_path(tmp_path / "in", "rows", tmp_path / "out")
    eps = read_back(tmp_path / "out", "rows")
    assert [(len(e), e.t_started, e.terminated) for e in eps] == [(5, 0, True), (2, 3, True)]
    assert stats["units"] == 3 and stats["episodes_written"] == 2 and stats["balanced"]


def test_non_empty_out_is_refused_with_one_line(
    tmp_path: Path, shared_data: Path, capsys: Any
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(CommitError, match="--overwrite") as info:
        convert_path(shared_data / PLAIN, "rows", out)
    assert "\n" not in str(info.value)
    argv = ["convert", str(shared_data / PLAIN), "--to", "rows", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not empty" in err and "--overwrite" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert not staging_path(out).exists()


def test_overwrite_replaces_the_old_output_only_on_success(
    tmp_path: Path, shared_data: Path
) -> None:
    paths = crossing_files(shared_data, tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    (out / "rows-00000-00000.parquet").write_bytes(b"old rows")
    before = output(out)
    good = break_file(paths[3])
    with pytest.raises(DataError, match="line 2"):
        convert_path(tmp_path / "in", "rows", out, overwrite=True)
    assert output(out) == before and not manifests_under(tmp_path)
    paths[3].write_bytes(good)
    stats = convert_path(tmp_path / "in", "rows", out, overwrite=True)
    assert sorted(output(out)) == sorted(stats["files_written"])  # nothing of the old output
    assert (out / MANIFEST_FILE).is_file() and not staging_path(out).exists()
    assert not list(tmp_path.glob(".out.replaced-*"))


def test_cli_overwrite(tmp_path: Path, shared_data: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    argv = ["convert", str(shared_data / PLAIN), "--to", "episodes", "--out", str(out), "--json"]
    assert main([*argv, "--overwrite"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["episodes_written"] == 12 and not (out / "old.txt").exists()


def test_a_corrupt_file_in_the_middle_leaves_out_untouched(
    tmp_path: Path, shared_data: Path, capsys: Any
) -> None:
    paths = crossing_files(shared_data, tmp_path / "in")
    break_file(paths[3])
    out = tmp_path / "out"
    with pytest.raises(DataError, match="line 2") as info:
        convert_path(tmp_path / "in", "rows", out)
    assert info.value.where.file == str(paths[3])
    assert not out.exists() and not manifests_under(tmp_path)
    staged = staging_path(out)
    assert not (staged / STATS_FILE).exists()
    # units 0 and 1 were complete once output-02 was read; unit 2 waits for r2's end in 03
    assert sorted(p.name for p in (staged / "units").iterdir()) == [
        "unit-00000.json",
        "unit-00001.json",
    ]
    argv = ["convert", str(tmp_path / "in"), "--to", "rows", "--out", str(out), "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 2" in err
    assert "nothing was committed" in err and "2 finished unit(s) kept for --resume" in err
    assert not out.exists() and not manifests_under(tmp_path)


# ---------------------------------------------------------------------------------------------
# resume
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("to", "t", "reused"), [("rows", True, 3), ("episodes", True, 3), ("rows", False, 0)]
)
def test_resume_after_a_failure_is_byte_identical(
    tmp_path: Path, shared_data: Path, to: str, t: bool, reused: int
) -> None:
    paths = crossing_files(shared_data, tmp_path / "in", t=t)
    clean = convert_path(tmp_path / "in", to, tmp_path / "clean")
    good = break_file(paths[4])
    with pytest.raises(DataError):
        convert_path(tmp_path / "in", to, tmp_path / "out")
    paths[4].write_bytes(good)
    stats = convert_path(tmp_path / "in", to, tmp_path / "out", resume=True)
    # units 0-2 were committed (unit 2 after reading r2's end in output-03); the resume reads
    # from output-03 and drops the piece of r2 there, which unit 2 already wrote
    assert stats["units_reused"] == reused
    assert counts(stats) == counts(clean)
    assert_same_output(tmp_path / "out", tmp_path / "clean")


@pytest.mark.parametrize(("t", "reused"), [(True, 3), (False, 2)])
def test_resume_without_t_restarts_where_the_reader_held_nothing(
    tmp_path: Path, shared_data: Path, t: bool, reused: int
) -> None:
    r = real_records(shared_data)
    r1, r3, r4 = cut(r[1], 5), cut(r[3], 10), cut(r[4], 5)
    layout = [[r[0], r1[0]], [r1[1], r[2]], [r3[0]], [r3[1], r4[0]], [r4[1], r[5]], r[6:]]
    paths = write_files(tmp_path / "in", layout, t=t)
    clean = convert_path(tmp_path / "in", "rows", tmp_path / "clean")
    good = break_file(paths[4])
    with pytest.raises(DataError):
        convert_path(tmp_path / "in", "rows", tmp_path / "out")
    # units 0-2 were committed (unit 2 when r3 ended in file 3); without t, the reader still
    # held r3 after file 2, so a resume cannot start at file 3 with a fresh reader: it redoes 2
    units = staging_path(tmp_path / "out") / "units"
    assert len(list(units.iterdir())) == 3
    paths[4].write_bytes(good)
    stats = convert_path(tmp_path / "in", "rows", tmp_path / "out", resume=True)
    assert stats["units_reused"] == reused
    assert counts(stats) == counts(clean)
    assert_same_output(tmp_path / "out", tmp_path / "clean")


@pytest.mark.parametrize("t", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resume_from_every_failure_point_matches_a_clean_run(
    tmp_path: Path, shared_data: Path, seed: int, t: bool
) -> None:
    """Random batches and files; each file in turn fails, then is fixed and the job resumed."""
    src = tmp_path / "in"
    restreamed(shared_data, src, seed, n_files=6, t=t)
    clean = convert_path(src, "rows", tmp_path / "clean")
    assert clean["episodes_written"] == 12 and clean["balanced"]
    want = SampleBatchesReader().read_file(shared_data / PLAIN).episodes
    got = read_back(tmp_path / "clean", "rows")
    assert_same_episodes(got, want)
    paths = sorted(src.iterdir())
    for b, p in enumerate(paths):
        out = tmp_path / f"out{b}"
        good = break_file(p)
        with pytest.raises(DataError):
            convert_path(src, "rows", out)
        p.write_bytes(good)
        stats = convert_path(src, "rows", out, resume=True)
        assert stats["units_reused"] <= b
        assert counts(stats) == counts(clean)
        assert_same_output(out, tmp_path / "clean")


def test_resume_redoes_the_units_of_a_changed_input(tmp_path: Path, shared_data: Path) -> None:
    paths = crossing_files(shared_data, tmp_path / "in")
    convert_path(tmp_path / "in", "rows", tmp_path / "clean")
    good = break_file(paths[4])
    with pytest.raises(DataError):
        convert_path(tmp_path / "in", "rows", tmp_path / "out")
    paths[4].write_bytes(good)
    st = paths[2].stat()  # output-02 is an input of units 0 (r1's end) and 2
    os.utime(paths[2], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    stats = convert_path(tmp_path / "in", "rows", tmp_path / "out", resume=True)
    assert stats["units_reused"] == 0
    assert_same_output(tmp_path / "out", tmp_path / "clean")


def test_resume_redoes_a_unit_whose_staged_file_was_damaged(
    tmp_path: Path, shared_data: Path
) -> None:
    paths = crossing_files(shared_data, tmp_path / "in")
    convert_path(tmp_path / "in", "rows", tmp_path / "clean")
    good = break_file(paths[4])
    with pytest.raises(DataError):
        convert_path(tmp_path / "in", "rows", tmp_path / "out")
    paths[4].write_bytes(good)
    staged = staging_path(tmp_path / "out") / "rows" / "rows-00002-00000.parquet"
    staged.write_bytes(staged.read_bytes()[:-10])
    stats = convert_path(tmp_path / "in", "rows", tmp_path / "out", resume=True)
    assert stats["units_reused"] == 2
    assert_same_output(tmp_path / "out", tmp_path / "clean")


def test_resume_with_quarantine_merges_reused_and_new_refusals(
    tmp_path: Path, shared_data: Path
) -> None:
    paths = crossing_files(shared_data, tmp_path / "in")
    break_file(paths[1])
    break_file(paths[5])
    clean = convert_path(tmp_path / "in", "rows", tmp_path / "clean", on_invalid="quarantine")
    assert clean["records_rejected"] == {"bad_json": 2}
    assert clean["quarantine_file"] == str(tmp_path / "clean" / "quarantine" / "quarantine.parquet")
    good = paths[4].read_bytes()
    # a compressed record without --legacy-pickle fails under every policy
    paths[4].write_text((shared_data / PACKED).read_text().splitlines()[0] + "\n")
    with pytest.raises(DecodeError, match="--legacy-pickle"):
        convert_path(tmp_path / "in", "rows", tmp_path / "out", on_invalid="quarantine")
    paths[4].write_bytes(good)
    stats = convert_path(
        tmp_path / "in", "rows", tmp_path / "out", on_invalid="quarantine", resume=True
    )
    assert stats["units_reused"] == 3 and counts(stats) == counts(clean)
    assert_same_output(tmp_path / "out", tmp_path / "clean")
    import pyarrow.parquet as pq

    q = pq.read_table(stats["quarantine_file"])
    assert q.column("_reject_reason").to_pylist() == ["bad_json", "bad_json"]


def test_a_unit_that_wrote_open_episodes_is_redone_when_a_file_follows(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = real_records(shared_data)
    head, tail = cut(r[1], 6)
    src = tmp_path / "in"
    write_files(src, [[r[0], head]])  # r1 never ends within output-00
    with monkeypatch.context() as m:  # every unit committed, then the job commit fails

        def fail(*args: Any, **kwargs: Any) -> None:
            raise OSError("disk full")

        m.setattr("offline_prelearner.jobs.commit.LocalStaging.commit", fail)
        with pytest.raises(OSError, match="disk full"):
            convert_path(src, "rows", tmp_path / "out")
        with pytest.raises(OSError, match="disk full"):
            convert_path(src, "rows", tmp_path / "same")
    assert convert_path(src, "rows", tmp_path / "same", resume=True)["units_reused"] == 1
    assert convert_path(src, "rows", tmp_path / "same-clean")["fragments"] == 1
    assert_same_output(tmp_path / "same", tmp_path / "same-clean")
    (src / "output-01.json").write_text(json.dumps(tail) + "\n")  # r1 ends after all
    stats = convert_path(src, "rows", tmp_path / "out", resume=True)
    assert stats["units_reused"] == 0 and stats["fragments"] == 0
    convert_path(src, "rows", tmp_path / "clean")
    assert_same_output(tmp_path / "out", tmp_path / "clean")


def test_resume_refuses_another_config_with_one_line(
    tmp_path: Path, shared_data: Path, capsys: Any
) -> None:
    paths = crossing_files(shared_data, tmp_path / "in")
    break_file(paths[4])
    with pytest.raises(DataError):
        convert_path(tmp_path / "in", "rows", tmp_path / "out")
    with pytest.raises(CommitError, match="another config") as info:
        convert_path(tmp_path / "in", "rows", tmp_path / "out", rows_per_file=7, resume=True)
    assert "\n" not in str(info.value)
    argv = ["convert", str(tmp_path / "in"), "--to", "episodes", "--out", str(tmp_path / "out")]
    assert main([*argv, "--resume", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another config" in err
    assert len(list((staging_path(tmp_path / "out") / "units").iterdir())) == 3  # kept


def test_resume_without_an_interrupted_job_is_refused(tmp_path: Path, shared_data: Path) -> None:
    with pytest.raises(CommitError, match="no interrupted job"):
        convert_path(shared_data / PLAIN, "rows", tmp_path / "out", resume=True)


def test_reads_legacy_compressed_as_one_unit(tmp_path: Path, shared_data: Path) -> None:
    read = ReadConfig(format="sample_batches", legacy_pickle=True)
    stats = convert_path(shared_data / PACKED, "episodes", tmp_path / "out", read)
    assert stats["units"] == 1
    assert stats["files_written"] == ["episodes/episodes-00000-00000.parquet"]


# ---------------------------------------------------------------------------------------------
# a real SIGINT
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigint_mid_run_exits_130_commits_nothing_and_resumes(tmp_path: Path, capsys: Any) -> None:
    src = tmp_path / "in"
    stream_files(src, n_files=40, steps_per_file=10_000)
    out = tmp_path / "out"
    units = staging_path(out) / "units"
    cmd = [sys.executable, "-m", "offline_prelearner", "convert", str(src)]
    proc = subprocess.Popen(
        [*cmd, "--to", "rows", "--out", str(out), "--json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (units.is_dir() and any(units.glob("unit-*.json"))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no unit was committed in 120 s"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "interrupted by SIGINT" in lines[0] and "nothing was committed" in lines[0]
    assert not out.exists() and not manifests_under(tmp_path)
    kept = len(list(units.glob("unit-*.json")))
    assert 1 <= kept < 40

    argv = ["convert", str(src), "--to", "rows", "--out", str(out), "--json", "--resume"]
    assert main(argv) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["units_reused"] >= 1 and stats["rows_in"] == 400_000 and stats["balanced"]
    clean = convert_path(src, "rows", tmp_path / "clean")
    assert counts(stats) == counts(clean)
    assert_same_output(out, tmp_path / "clean")


@pytest.mark.parametrize(
    ("to", "kwargs"),
    [("episodes", {}), ("rows", {"layout": "fast"}), ("minari", {})],
    ids=["per-file units", "relayout", "whole dataset"],
)
def test_every_conversion_commits_inside_the_commit_point(
    tmp_path: Path, to: str, kwargs: dict[str, Any]
) -> None:
    """A signal during the manifest write and the move into place waits for their end, and the
    job counts as committed from then on (a Ctrl-C after it exits 0): every job that stages its
    output, convert's three kinds included, passes ``LocalStaging.commit``'s commit point."""
    from offline_prelearner.jobs.session import interrupts

    previous = interrupts.install()
    try:
        assert not interrupts.committed()
        convert_path(REPO / "datasets" / "cartpole-v1" / "rows", to, tmp_path / "out", **kwargs)
        assert interrupts.committed() and (tmp_path / "out" / MANIFEST_FILE).is_file()
    finally:
        interrupts.restore(previous)
