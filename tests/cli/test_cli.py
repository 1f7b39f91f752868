"""The command line, end to end on real files: record -> inspect, RLlib's files, bad input."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO

from offline_prelearner.cli import build_parser, main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, "inspect", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    code, _out, err = run(
        capsys,
        "record",
        "CartPole-v1",
        "--steps",
        "400",
        "--out",
        str(tmp_path / "rows"),
        "--seed",
        "3",
        "--json",
    )
    assert code == 0, err
    return tmp_path / "rows"


def test_record_then_inspect_accounts_for_every_step(recorded: Path, capsys) -> None:
    d = inspect_json(capsys, str(recorded))
    assert d["format"] == "rows"
    assert d["rows"] == 400 and d["timesteps"] == 400
    assert d["episodes"] == len(d["episode_stats"]) > 1
    assert d["terminated"] + d["truncated"] == d["episodes"]
    assert d["rejected"] == {} and d["duplicates"] == 0 and d["rows_balance"]
    assert sum(e["len"] for e in d["episode_stats"]) == 400
    # CartPole pays 1 per step: an episode's return is its length.
    assert all(e["return"] == e["len"] for e in d["episode_stats"])
    assert d["observation"] == {"shape": [4], "dtype": "float32"}


def test_record_is_deterministic_in_the_seed(tmp_path: Path, capsys) -> None:
    for name in ("a", "b"):
        assert (
            run(
                capsys,
                "record",
                "CartPole-v1",
                "--steps",
                "120",
                "--out",
                str(tmp_path / name),
                "--seed",
                "7",
            )[0]
            == 0
        )
    ta = pq.read_table(next((tmp_path / "a").glob("*.parquet")))
    tb = pq.read_table(next((tmp_path / "b").glob("*.parquet")))
    assert ta.equals(tb)


def test_episodes_split_over_files_are_joined(tmp_path: Path, capsys) -> None:
    args = ["CartPole-v1", "--steps", "300", "--seed", "1", "--policy", "heuristic"]
    run(capsys, "record", *args, "--out", str(tmp_path / "one"))
    run(capsys, "record", *args, "--out", str(tmp_path / "many"), "--rows-per-file", "37")
    assert len(list((tmp_path / "many").glob("*.parquet"))) == 9
    one = inspect_json(capsys, str(tmp_path / "one"))
    many = inspect_json(capsys, str(tmp_path / "many"))
    assert many["episode_stats"] == one["episode_stats"]
    assert many["rows_balance"] and many["rejected"] == {}


def test_record_and_inspect_msgpack_episodes(tmp_path: Path, capsys) -> None:
    assert (
        run(
            capsys,
            "record",
            "CartPole-v1",
            "--steps",
            "250",
            "--out",
            str(tmp_path),
            "--format",
            "episodes",
        )[0]
        == 0
    )
    d = inspect_json(capsys, str(tmp_path))
    assert d["format"] == "episodes"
    assert d["timesteps"] == 250 and d["rows"] == d["episodes"]


def test_inspect_glob_and_human_output(recorded: Path, capsys) -> None:
    code, out, _ = run(capsys, "inspect", str(recorded / "*.parquet"))
    assert code == 0
    assert "episodes" in out and "rows in = kept + rejected + duplicate: yes" in out


def test_inspect_human_output_when_every_row_is_rejected(tmp_path: Path, capsys) -> None:
    """No episode kept: the report still prints (``-`` for what no episode could tell), then the
    one-line refusal; no traceback."""
    n = 5
    pq.write_table(
        pa.table(
            {
                "eps_id": ["a"] * n,
                "obs": [[0.0] * 4] * n,
                "new_obs": [[0.0] * 4] * n,
                "actions": [0] * n,
                "rewards": [float("nan")] * n,
                "terminateds": [False] * (n - 1) + [True],
                "truncateds": [False] * n,
            }
        ),
        tmp_path / "nan.parquet",
    )
    code, out, err = run(capsys, "inspect", str(tmp_path), "--on-invalid", "skip")
    assert code == 2 and "Traceback" not in err
    assert "observation -   action -" in out and "rejected    {'nan_reward': 5}" in out
    assert err.strip().splitlines()[-1].endswith("[column 'rewards', episode 'a', t=0]")


def test_heuristic_beats_random(tmp_path: Path, capsys) -> None:
    rets = {}
    for policy in ("random", "heuristic"):
        run(
            capsys,
            "record",
            "CartPole-v1",
            "--steps",
            "1000",
            "--out",
            str(tmp_path / policy),
            "--policy",
            policy,
        )
        rets[policy] = inspect_json(capsys, str(tmp_path / policy))["return"]["mean"]
    assert rets["heuristic"] > 2 * rets["random"]


def test_heuristic_for_unknown_env_is_a_clear_error(tmp_path: Path, capsys) -> None:
    code, _, err = run(
        capsys,
        "record",
        "FrozenLake-v1",
        "--steps",
        "10",
        "--out",
        str(tmp_path),
        "--policy",
        "heuristic",
    )
    assert code == 2 and "no heuristic policy for 'FrozenLake-v1'" in err


# ---------------------------------------------------------------- the shipped dataset
def test_shipped_dataset_matches_its_note(capsys) -> None:
    d = inspect_json(capsys, str(REPO / "datasets/cartpole-v1/rows"))
    note = (REPO / "datasets/cartpole-v1/README.md").read_text()
    assert f"{d['rows']} rows" in note and f"{d['episodes']} episodes" in note
    assert d["rejected"] == {} and d["rows_balance"]
    e = inspect_json(capsys, str(REPO / "datasets/cartpole-v1/episodes"))
    assert e["format"] == "episodes"
    assert e["episode_stats"] == d["episode_stats"]


# ---------------------------------------------------------------- RLlib's own files
@pytest.mark.rllib_data
def test_inspect_rllib_rows(shared_data: Path, capsys) -> None:
    d = inspect_json(capsys, str(shared_data / "cartpole-v1_rows_uncompressed.parquet"))
    assert (d["format"], d["rows"], d["episodes"], d["timesteps"]) == ("rows", 295, 12, 295)
    assert d["rejected"] == {} and d["terminated"] + d["truncated"] == 12
    assert "weights_seq_no" in d["extras"]


@pytest.mark.rllib_data
def test_inspect_rllib_compressed_rows_needs_legacy_flag(shared_data: Path, capsys) -> None:
    f = str(shared_data / "cartpole-v1_rows_compressed.parquet")
    code, _, err = run(
        capsys, "inspect", f, "--schema", "rllib_compressed", "--on-invalid", "raise"
    )
    assert code == 2 and "legacy" in err.lower() and "obs" in err
    d = inspect_json(capsys, f, "--schema", "rllib_compressed", "--legacy-pickle")
    assert d["rows"] == 234 and d["timesteps"] == 234 and d["rejected"] == {}
    assert d["observation"] == {"shape": [4], "dtype": "float32"}


@pytest.mark.rllib_data
def test_inspect_rllib_msgpack_episodes(shared_data: Path, capsys) -> None:
    d = inspect_json(capsys, str(shared_data / "cartpole-v1_episodes_msgpack.parquet"))
    assert (d["format"], d["episodes"]) == ("episodes", 12)
    # The lengths and flags RLlib's own SingleAgentEpisode.from_state reports for this file.
    assert [e["len"] for e in d["episode_stats"]] == [27, 27, 68, 11, 21, 19, 34, 18, 33, 15, 42, 9]
    assert d["terminated"] == 12 and d["truncated"] == 0


@pytest.mark.rllib_data
def test_inspect_a_directory_of_rllib_files_of_one_format(
    shared_data: Path, tmp_path: Path, capsys
) -> None:
    for name in ("b.parquet", "a.parquet"):
        shutil.copy(shared_data / "cartpole-v1_rows_uncompressed.parquet", tmp_path / name)
    d = inspect_json(capsys, str(tmp_path))
    # The second copy holds the same episode ids: counted as duplicates, not silently merged.
    assert d["rows"] == 590 and d["episodes"] == 12
    assert d["duplicates"] == 12 and d["duplicate_rows"] == 295 and d["rows_balance"]


# ---------------------------------------------------------------- bad input
def test_missing_path(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "inspect", str(tmp_path / "nope"))
    assert code == 2 and "nope" in err


def test_not_a_parquet_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "data.parquet"
    bad.write_text("this is not parquet\n")
    code, _, err = run(capsys, "inspect", str(bad))
    assert code == 2 and "data.parquet" in err


def test_unreadable_file_among_good_ones_is_listed_under_skip(recorded: Path, capsys) -> None:
    (recorded / "zz-broken.parquet").write_bytes(b"PAR1 garbage")
    d = inspect_json(capsys, str(recorded))
    assert d["files_unreadable"] == [str(recorded / "zz-broken.parquet")]
    assert d["rows"] == 400
    code, _, err = run(capsys, "inspect", str(recorded), "--on-invalid", "raise")
    assert code == 2 and "zz-broken.parquet" in err


def test_empty_file(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty.parquet").write_bytes(b"")
    code, _, err = run(capsys, "inspect", str(tmp_path / "empty.parquet"))
    assert code == 2 and "empty.parquet" in err


def test_nan_rewards_are_counted_under_skip_and_quarantined(
    recorded: Path, tmp_path: Path, capsys
) -> None:
    f = next(recorded.glob("*.parquet"))
    t = pq.read_table(f)
    rewards = t.column("rewards").to_numpy().copy()
    eps = t.column("eps_id").to_numpy()
    bad_id = eps[0]
    rewards[np.flatnonzero(eps == bad_id)[1]] = np.nan
    t = t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards))
    pq.write_table(t, f)
    n_bad = int((eps == bad_id).sum())
    d = inspect_json(capsys, str(recorded))
    assert d["rejected"] == {"nan_reward": n_bad} and d["rows_balance"]
    assert d["timesteps"] == 400 - n_bad
    qdir = tmp_path / "q"
    d = inspect_json(
        capsys, str(recorded), "--on-invalid", "quarantine", "--quarantine-dir", str(qdir)
    )
    q = pq.read_table(d["quarantine_file"])
    assert q.num_rows == n_bad and set(q.column("_reject_reason").to_pylist()) == {"nan_reward"}
    code, _, err = run(capsys, "inspect", str(recorded), "--on-invalid", "raise")
    assert code == 2 and bad_id in err and "reward" in err


def test_missing_columns_are_all_named(recorded: Path, capsys) -> None:
    f = next(recorded.glob("*.parquet"))
    t = pq.read_table(f).rename_columns(
        [{"obs": "observation", "rewards": "reward"}.get(c, c) for c in pq.read_schema(f).names]
    )
    pq.write_table(t, f)
    code, _, err = run(capsys, "inspect", str(f), "--on-invalid", "raise")
    assert code == 2
    assert "obs" in err and "rewards" in err and "observation" in err and "reward" in err
    assert os.path.basename(f) in err


def test_process_says_which_episodes_never_ended(tmp_path: Path, capsys) -> None:
    """50 rows, the last episode without a done flag: ``sample_all`` writes the 40 steps of the
    complete episodes, and the console says why 10 are missing (never silently)."""
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.io.formats.rows.writer import episodes_to_rows

    rng = np.random.default_rng(0)
    eps = [
        Episode(
            id=f"ep{i}",
            observations=rng.normal(size=(11, 3)).astype(np.float32),
            actions=rng.integers(0, 2, 10),
            rewards=rng.normal(size=10),
            terminated=i < 4,
        )
        for i in range(5)
    ]
    data = tmp_path / "rows"
    data.mkdir()
    pq.write_table(episodes_to_rows(eps), data / "part-000.parquet")
    assert main(["process", str(data), "--out", str(tmp_path / "out"), "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert (summary["rows_in"], summary["samples_written"], summary["pending_fragments"]) == (
        50,
        40,
        1,
    )
    assert "1 episode(s) never ended" in err and "truncated" in err
    # the last one marked truncated: all 50 steps written, no note
    last = eps[4]
    eps[4] = Episode(
        id=last.id,
        observations=last.observations,
        actions=last.actions,
        rewards=last.rewards,
        truncated=True,
    )
    pq.write_table(episodes_to_rows(eps), data / "part-000.parquet")
    assert main(["process", str(data), "--out", str(tmp_path / "out2"), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["samples_written"] == 50 and "never ended" not in err


# ---------------------------------------------------------------- the first minutes
def test_version_is_the_installed_distributions(capsys) -> None:
    from importlib.metadata import version

    from offline_prelearner import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    out, _ = capsys.readouterr()
    assert exit_info.value.code == 0
    assert out.strip() == f"offline-prelearner {version('offline_prelearner')}"
    assert __version__ == version("offline_prelearner")  # the source, as installed


def _parsers() -> dict[str, argparse.ArgumentParser]:
    top = build_parser()
    (sub,) = (a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"": top, **sub.choices}


def test_every_help_ends_with_examples_that_parse(capsys) -> None:
    commands = _parsers()
    assert set(commands) == {"", "record", "process", "inspect", "report", "convert", "index"}
    for command in commands:
        with pytest.raises(SystemExit):
            main([command, "--help"] if command else ["--help"])
        out, _ = capsys.readouterr()
        examples = out[out.index("\nExamples:\n") :].splitlines()[2:]
        commands = [ln.split()[1] for ln in examples if "COMMAND" not in ln]
        assert commands and all(c == (command or c) for c in commands), out
        for line in examples:
            if "COMMAND --help" in line:  # the top level's pointer to each command's help
                continue
            argv = shlex.split(line)
            assert argv[0] == "offline-prelearner"
            build_parser().parse_args(argv[1:])  # an example that no longer parses fails


def test_every_option_has_help() -> None:
    for command, parser in _parsers().items():
        for action in parser._actions:
            if action.option_strings:
                assert action.help and action.help != argparse.SUPPRESS, (command, action.dest)


def test_process_max_episode_steps_ends_d4rl_episodes(tmp_path: Path, capsys) -> None:
    """A D4RL file without ``timeouts``: ``process --max-episode-steps 4`` cuts its 12 steps into
    3 truncated episodes as ``inspect`` does (the last step of each dropped: no next
    observation); without it the 12 steps are one episode that never ended."""
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(0)
    path = tmp_path / "no-timeouts.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = rng.normal(size=(12, 3)).astype(np.float32)
        f["actions"] = rng.normal(size=(12, 1)).astype(np.float32)
        f["rewards"] = np.ones(12, dtype=np.float32)
        f["terminals"] = np.zeros(12, dtype=bool)
    argv = ["process", str(path), "--json", "--max-episode-steps", "4"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr()[0])
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    inspected = inspect_json(capsys, str(path), "--max-episode-steps", "4")
    assert summary["episodes_kept"] == inspected["episodes"] == inspected["truncated"] == 3
    assert summary["samples_written"] == inspected["timesteps"] == 9
    assert stats["config"]["read"]["max_episode_steps"] == 4
    assert main([*argv[:-2], "--out", str(tmp_path / "out-no-limit")]) == 0
    summary = json.loads(capsys.readouterr()[0])
    assert (summary["pending_fragments"], summary["samples_written"]) == (1, 0)
    code, _, err = run(capsys, *argv[:-1], "0", "--out", str(tmp_path / "out-0"))
    assert code == 2 and "max_episode_steps" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env_id", "suggested"),
    [("UnknownEnv-v0", None), ("cartpole-v1", "CartPole-v1"), ("CartPole-v9", "CartPole-v1")],
)
def test_record_unknown_env_is_one_line_with_close_ids(
    tmp_path: Path, capsys, env_id: str, suggested: str | None
) -> None:
    out = tmp_path / "rec"
    code, _, err = run(capsys, "record", env_id, "--steps", "10", "--out", str(out))
    assert code == 2 and not out.exists()
    (line,) = err.strip().splitlines()
    assert line.startswith("offline-prelearner record: error: unknown gymnasium env")
    assert repr(env_id) in line and "pprint_registry" in line
    if suggested is None:
        assert "did you mean" not in line
    else:
        assert f"did you mean {suggested}" in line


# ---------------------------------------------------------------- choices from one place
def test_format_choices_come_from_the_reader_registry(tmp_path: Path, capsys) -> None:
    """A reader registered by the user's code is a ``--format`` the CLI accepts and runs."""
    from offline_prelearner.io import readers
    from offline_prelearner.io.formats.registry import _FORMATS
    from offline_prelearner.io.formats.rows.reader import RowsReader

    out = str(tmp_path / "out")
    argv = ["process", str(REPO / "datasets/cartpole-v1/rows"), "--out", out, "--json"]
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args([*argv, "--format", "my_rows"])
    assert refused.value.code == 2
    assert "invalid choice: 'my_rows'" in capsys.readouterr().err

    @readers.register_reader("my_rows")
    class MyRows(RowsReader):
        pass

    try:
        assert main([*argv, "--format", "my_rows"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert (summary["format"], summary["rows_in"]) == ("my_rows", 5000)
        assert summary["samples_written"] == 5000  # sample_all: the batch job's rule
        inspect = build_parser().parse_args(["inspect", out, "--format", "my_rows"])
        assert inspect.format == "my_rows"
    finally:
        _FORMATS.pop("my_rows")


def test_engine_layout_and_policy_choices_are_the_configs_literals(capsys) -> None:
    from offline_prelearner.config import ENGINES, LAYOUTS, ON_INVALID

    base = ["process", "data", "--out", "out"]
    for engine in ENGINES:
        assert build_parser().parse_args([*base, "--engine", engine]).engine == engine
    for layout in LAYOUTS:
        assert build_parser().parse_args([*base, "--layout", layout]).layout == layout
    for policy in ON_INVALID:
        assert build_parser().parse_args([*base, "--on-invalid", policy]).on_invalid == policy
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--engine", "cluster"])
    assert "--engine: invalid choice: 'cluster'" in capsys.readouterr().err


# ---------------------------------------------------------------- one sample_all default
@pytest.mark.parametrize(
    "sample", [{"n_step": 3}, {"n_step": 3, "sample_all": False, "train_batch_size": 64}]
)
def test_the_library_and_the_cli_write_the_same_for_the_same_config(
    tmp_path: Path, capsys, sample: dict
) -> None:
    """One config file, with and without ``sample_all``: ``run_pipeline`` and ``process`` write
    the same samples (unset, both write every transition once; false, both draw from replay)."""
    from offline_prelearner import run_pipeline

    data = str(REPO / "datasets/cartpole-v1/rows")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"sample": sample, "seed": 5}))
    lib = run_pipeline(data, str(config), out_dir=tmp_path / "lib")
    assert main(["process", data, "--config", str(config), "--out", str(tmp_path / "cli")]) == 0
    capsys.readouterr()
    cli = json.loads((tmp_path / "cli" / "stats.json").read_text())
    every = "sample_all" not in sample
    assert lib.stats["samples_written"] == cli["samples_written"]
    assert (lib.stats["samples_written"] == 5000) is every  # 5000 rows, every episode complete
    assert lib.stats["samples_rule"] == cli["samples_rule"]
    assert cli["samples_rule"].startswith("sample_all") is every

    def samples(root: Path) -> pa.Table:
        return pa.concat_tables(pq.read_table(p) for p in sorted((root / "samples").glob("*")))

    assert samples(tmp_path / "lib").equals(samples(tmp_path / "cli"))


def test_a_kind_setting_for_another_kind_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    data, out = str(REPO / "datasets/cartpole-v1/rows"), str(tmp_path / "out")
    code, _out, err = run(capsys, "process", data, "--out", out, "--set", "alpha=0.7")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "buffer.prioritized is set but buffer.kind is 'uniform'" in err
    assert not (tmp_path / "out").exists()


def test_after_a_signal_other_libraries_warnings_are_not_printed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that cuts a Cython extension's import short makes Cython warn ("failed to patch
    module with custom type"): the console keeps the interrupt's one line, and the warnings the
    job printed before the signal."""
    import signal
    import sys
    import warnings

    from offline_prelearner.cli import app
    from offline_prelearner.errors import OddDataWarning
    from offline_prelearner.jobs.session import interrupts

    def python_format(
        message: object, category: type[Warning], *rest: object, **kw: object
    ) -> None:
        print(f"{category.__name__}: {message}", file=sys.stderr)

    monkeypatch.setattr(warnings, "showwarning", python_format)
    app._our_warnings_in_one_line()
    previous = interrupts.install()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("before the signal", RuntimeWarning, stacklevel=1)
            with pytest.raises(interrupts.Interrupted):
                signal.raise_signal(signal.SIGINT)
            warnings.warn("Cython module failed to patch module", RuntimeWarning, stacklevel=1)
            warnings.warn("ours, still shown", OddDataWarning, stacklevel=1)
    finally:
        interrupts.closing(130)
        interrupts.restore(previous)
    err = capsys.readouterr().err
    assert "before the signal" in err
    assert "Cython" not in err
    assert "offline-prelearner: warning: ours, still shown" in err
