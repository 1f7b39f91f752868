"""offline_prelearner.rllib inside RLlib's own loop (BC, MARWIL, CQL), against RLlib's prelearner.

Each case runs ``tests/rllib_loop.py`` under RLlib's interpreter (the venv
``benchmarks/setup_rllib.sh`` builds, which installs this checkout editable); without it the tests
skip with that reason. Most cases, and RLlib's pytest on tests/rllib_contract, run in one process
(the ``grouped`` fixture) on one Ray of 4 logical CPUs; BC's comparison with RLlib's prelearner
runs alone, on 2 CPUs, and the block of docs/rllib.md as a user runs it: RLlib's default 2
actors, Ray on 4 CPUs. The cases run one map_batches actor unless they say otherwise.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import rllib_python

REPO = Path(__file__).resolve().parents[1]
RLLIB_PYTHON = rllib_python()
LOOP = REPO / "tests" / "rllib_loop.py"
RESULT = "rllib_loop result: "  # what starts rllib_loop.py's line of the result (its RESULT)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(900),  # the first test to ask for `grouped` runs its cases (~2-3 min)
    pytest.mark.skipif(
        not RLLIB_PYTHON.is_file(),
        reason=f"no RLlib venv at {RLLIB_PYTHON} (benchmarks/setup_rllib.sh, or RLLIB_PYTHON)",
    ),
]


#: Run by RLlib's interpreter: the packages the venv must hold, found without importing them
#: (importing RLlib costs ~5 s; ``find_spec`` of a top-level name imports nothing).
_VENV_CHECK = """
import importlib.util, pathlib
find = importlib.util.find_spec
ray = find("ray")
missing = [m for m in ("torch", "gymnasium", "offline_prelearner") if find(m) is None]
if ray is None or not any(
    (pathlib.Path(p) / "rllib" / "__init__.py").is_file() for p in ray.submodule_search_locations
):
    missing.append("ray[rllib]")
print(" ".join(missing))
"""


@pytest.fixture(scope="module", autouse=True)
def _rllib_venv_has_this_checkout() -> None:
    """The RLlib venv holds RLlib, torch and gymnasium, and finds this checkout's package
    (setup_rllib.sh installs them; PYTHONPATH is this checkout). An import that fails in it
    fails the tests, naming the error, rather than skipping them."""
    proc = subprocess.run(
        [str(RLLIB_PYTHON), "-c", _VENV_CHECK],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    missing = proc.stdout.strip()
    if proc.returncode or missing:
        pytest.skip(
            f"{RLLIB_PYTHON} lacks {missing or proc.stderr.strip().splitlines()[-1:]} (run "
            "benchmarks/setup_rllib.sh)"
        )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO)  # this checkout, whichever one the venv has installed
    env["RAY_DATA_LOG_LEVEL"] = "ERROR"
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _run(*args: str, timeout: int = 600) -> Any:
    """A case of rllib_loop.py in RLlib's venv; its last line, as JSON."""
    proc = subprocess.run(
        [str(RLLIB_PYTHON), str(LOOP), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(),
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Ray's driver prints lines of its own on stdout too (the raylet's warnings), at any moment.
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    assert found, f"no result line in the output:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(found[-1].removeprefix(RESULT))


#: The cases that run together in one RLlib process (the ``grouped`` fixture): RLlib's import
#: and the interpreter's start-up paid once, not once a test.
GROUPED = {
    "cover_1": ["cover", "datasets/cartpole-v1/rows", "1", "2"],
    "cover_default": ["cover", "datasets/cartpole-v1/rows", "default", "2"],
    "cover_dead": ["cover", "datasets/cartpole-v1/rows", "default", "2", "dead"],
    "sharing": ["sharing", "datasets/cartpole-v1/rows"],
    "packed": ["packed", "{shared_data}/cartpole-v1_rows_compressed.parquet"],
}


@pytest.fixture(scope="module")
def grouped(
    shared_data: Path, pendulum: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The results of :data:`GROUPED` and of the cases whose inputs are made here (the split
    episode's files, a Minari dataset, the learner columns' files), by name (each
    ``{"result"}`` or ``{"error"}``)."""
    cases = {
        name: [a.replace("{shared_data}", str(shared_data)) for a in args]
        for name, args in GROUPED.items()
    }
    split = tmp_path_factory.mktemp("split")
    cases["split_episode"] = ["split_episode", str(split)]
    _split_episode_files(split)
    columns = tmp_path_factory.mktemp("learner_columns")
    for own in ("", "own"):
        out = columns / f"learner{own}.json"
        cases[f"learner_columns{own}"] = ["learner_columns", str(pendulum), str(out), own]
    try:
        from fixtures.make_minari import record_minari_dataset
    except ImportError:  # minari is in the test extra; without it the test skips
        pass
    else:
        made = record_minari_dataset(tmp_path_factory.mktemp("minari"), "cartpole/random-v0",
                                     "arrow", seed=0)  # fmt: skip
        cases["minari"] = ["minari", str(made.path / "data")]
    # Training cases too: one RLlib import for all (each process of its own cost ~10 s more).
    # Not BC's comparison with RLlib's prelearner: both sides train from torch's global seed,
    # which earlier cases in the process would move.
    cases["marwil_cql"] = ["marwil_cql", "datasets/cartpole-v1/rows", str(pendulum), "2"]
    cases["marwil_exact"] = ["marwil_exact", "datasets/cartpole-v1/rows", "default", "6"]
    cases["remote_learner"] = ["remote_learner", "datasets/cartpole-v1-heuristic/rows", "3"]
    cases["marwil_exact_held"] = [
        "marwil_exact", "datasets/cartpole-v1/rows", "default", "6", "held"
    ]  # fmt: skip
    # RLlib's contract (tests/rllib_contract) by RLlib's pytest, last, in this process too.
    cases["contract"] = ["contract", "tests/rllib_contract"]
    got = dict(_run("many", json.dumps(cases), timeout=900))
    got["learner_columns_dir"] = columns
    return got


def _split_episode_files(folder: Path) -> list[int]:
    """Three CartPole episodes in two files, the second cut in two (as RLlib's recorder cuts
    them); the episodes' lengths."""
    table = pq.read_table(REPO / "datasets/cartpole-v1/rows/cartpole-v1-rows-00000.parquet")
    ids = table.column("eps_id").to_pylist()
    first = list(dict.fromkeys(ids))[:3]
    lengths = [ids.count(e) for e in first]
    table = table.slice(0, sum(lengths))
    cut = lengths[0] + lengths[1] // 2
    pq.write_table(table.slice(0, cut), folder / "part-0.parquet")
    pq.write_table(table.slice(cut), folder / "part-1.parquet")
    return lengths


def _grouped(grouped: dict[str, Any], name: str) -> Any:
    got = grouped[name]
    if "error" in got:
        pytest.fail(f"{name} raised in RLlib's venv:\n{got['error']}")
    return got["result"]


def _cli(*args: str) -> None:
    proc = subprocess.run(
        [str(RLLIB_PYTHON), "-m", "offline_prelearner", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 Pendulum-v1 steps (5 episodes of 200) in files of 300 rows that cut episodes."""
    out = tmp_path_factory.mktemp("pendulum") / "rows"
    _cli(
        "record", "Pendulum-v1", "--steps", "1000", "--out", str(out),
        "--policy", "random", "--seed", "0", "--rows-per-file", "300",
    )  # fmt: skip
    return out


def test_bc_trains_in_rllibs_loop_at_least_as_well_as_rllibs_prelearner() -> None:
    # The heuristic CartPole set (6 episodes of 500 steps): cloning it can beat random (~22).
    # 20 iterations of 5 updates (256 samples); the mean greedy return over the last 10.
    got = _run("bc", "datasets/cartpole-v1-heuristic/rows", "20")
    ours, rllib = np.mean(got["ours"]["returns"]), np.mean(got["rllib"]["returns"])
    assert ours >= rllib, got
    assert ours > 4 * 22, got
    assert all(math.isfinite(v) for v in got["ours"]["losses"].values()), got


def test_marwil_and_cql_train_with_finite_losses(grouped: dict[str, Any]) -> None:
    got = _grouped(grouped, "marwil_cql")
    for name in ("marwil", "cql"):
        assert len(got[name]) == 2, got
        for losses in got[name]:
            assert losses, (name, got)
            assert all(isinstance(v, float) and math.isfinite(v) for v in losses.values()), got


@pytest.fixture(scope="module")
def pendulum_job(pendulum: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``process --set n_step=3 --set gamma=0.99`` on :func:`pendulum`: its samples folder (one
    run for both learner batches that are held against it)."""
    out = tmp_path_factory.mktemp("pendulum_job") / "job"
    _cli("process", str(pendulum), "--out", str(out), "--set", "n_step=3", "--set", "gamma=0.99")
    return out / "samples"


@pytest.mark.parametrize("own_piece", [False, True], ids=["columns", "episode_per_sample"])
def test_the_learner_batch_holds_the_batch_jobs_transitions(
    grouped: dict[str, Any], pendulum_job: Path, own_piece: bool
) -> None:
    # CQL with n_step=3: every transition once (sample_all) through RLlib's learner connector,
    # against `process --set n_step=3` on the same files, column by column (rows in any order).
    # With RLlib's default pieces only, the samples go in as columns; with a piece of the user's
    # own in the pipeline, as one episode each (RLlib's way): the same batch either way.
    own = "own" if own_piece else ""
    learner_json = grouped["learner_columns_dir"] / f"learner{own}.json"
    got = _grouped(grouped, f"learner_columns{own}")
    assert got["bulk"] is not own_piece, got
    learner = {
        k.removeprefix("default_policy/"): np.asarray(v)
        for k, v in json.loads(learner_json.read_text()).items()
    }
    job_table = pa.concat_tables(pq.read_table(f) for f in sorted(pendulum_job.glob("*.parquet")))
    job = {}
    for name in ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "n_step"):
        col = job_table.column(name).to_pylist()
        job[name] = np.asarray(col)
    assert len(job["rewards"]) == len(learner["rewards"]) == 1000

    def order(cols: dict[str, np.ndarray]) -> np.ndarray:
        keys = np.concatenate([cols["obs"], cols["actions"].reshape(len(cols["obs"]), -1)], 1)
        return np.lexsort(keys.T[::-1])

    a, b = order(job), order(learner)
    for name, col in job.items():
        np.testing.assert_allclose(
            np.asarray(learner[name], np.float64)[b],
            np.asarray(col, np.float64)[a],
            rtol=1e-6,
            err_msg=name,
        )
    assert set(np.unique(learner["n_step"])) <= {1, 2, 3}
    assert (learner["n_step"] < 3).sum() == 2 * 5  # the last two steps of each of 5 episodes


def test_rows_of_an_episode_cut_across_files(grouped: dict[str, Any]) -> None:
    # Three CartPole episodes, the second cut in two files (as RLlib's recorder cuts them).
    table = pq.read_table(REPO / "datasets/cartpole-v1/rows/cartpole-v1-rows-00000.parquet")
    ids = table.column("eps_id").to_pylist()
    first = list(dict.fromkeys(ids))[:3]
    lengths = [ids.count(e) for e in first]
    got = _grouped(grouped, "split_episode")
    # RLlib's own prelearner: one one-step episode per row (its documented behaviour).
    assert [n for _, n in got["rllib"]] == [1] * sum(lengths)
    # Ours: the three real episodes, the cut one joined across the files, each once, done.
    assert [(e, n) for e, n, _, _ in got["ours"]] == list(zip(first, lengths, strict=True))
    assert all(term for *_, term, _ in got["ours"])
    # And MARWIL's learner batch from the same files: the episodes of each call (+1 step each,
    # RLlib's AddOneTsToEpisodesAndTruncate), advantages finite.
    assert got["ours_batch_rows"] == [
        [lengths[0] + 1, True],
        [lengths[1] + lengths[2] + 2, True],
    ]


def test_rllibs_packed_recording_trains_with_the_legacy_pickle_opt_in(
    grouped: dict[str, Any],
) -> None:
    # RLlib's own recorder with its default compression: obs/new_obs are base64(lz4(pickle))
    # strings, decoded only with read.legacy_pickle (RLlib's settings are not taken as consent).
    got = _grouped(grouped, "packed")
    assert got["trained"] == 2 * 64, got
    assert got["losses"] and all(math.isfinite(v) for v in got["losses"].values()), got


def test_a_minari_dataset_trains_inside_rllib(grouped: dict[str, Any]) -> None:
    # No Ray Data reader knows Minari's files: RLlib reads them as binary files with their paths
    # (input_read_method="read_binary_files") and our reader reads the paths (arrow backend,
    # one file per episode; 12 CartPole episodes).
    pytest.importorskip("minari")
    got = _grouped(grouped, "minari")
    assert got["trained"] == 2 * 32, got
    assert got["losses"] and all(math.isfinite(v) for v in got["losses"].values()), got


def test_the_readme_config_trains(tmp_path: Path) -> None:
    # The "Inside RLlib" block of docs/rllib.md as a user copies it, RLlib's defaults untouched (its
    # map_batches concurrency: 2 actors); its iteration and one more for the losses. The prelude
    # is what a 2-core machine needs: 2 actors of 1 CPU each plus Ray Data's read tasks; with
    # num_cpus=2 the actors hold both CPUs and the first read task never starts (that page's
    # "Settings that matter").
    page = (REPO / "docs" / "rllib.md").read_text()
    m = re.search(r"^# Inside RLlib.*?^```python\n(.*?)^```$", page, re.M | re.S)
    assert m, "no python block under '# Inside RLlib' in docs/rllib.md"
    script = tmp_path / "readme_rllib.py"
    script.write_text(
        "import ray\nray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)\n"
        + m.group(1)
        + "print('concurrency', algo.offline_data.map_batches_kwargs['concurrency'])\n"
        + "print(sorted(algo.train()['learners']['default_policy']))\nalgo.stop()\n"
    )
    proc = subprocess.run(
        [str(RLLIB_PYTHON), str(script)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=_env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "concurrency 2\n" in proc.stdout, proc.stdout  # RLlib's default: 2 actors
    assert "policy_loss" in proc.stdout


def test_rllibs_offline_prelearner_contract(grouped: dict[str, Any]) -> None:
    # tests/rllib_contract, run by RLlib's own interpreter and pytest (in the grouped process):
    # RLlib 2.60's class and ours against the contract RLlib's offline stack relies on, on data
    # RLlib writes itself. Every test passes; none skips.
    got = _grouped(grouped, "contract")
    assert got["exit"] == 0 and not got["failed"], "\n".join(got["failed"]) or got
    assert got["passed"] > 0 and not got["skipped"], got


@pytest.mark.parametrize("concurrency", ["1", "default"])
def test_whole_episodes_reach_the_learner_once_at_any_concurrency(
    grouped: dict[str, Any], concurrency: str
) -> None:
    # MARWIL's prelearner with to_learner="episodes" in Ray Data's map_batches (blocks reach
    # the actors in no promised order; RLlib's default runs 2 actors, which split episodes cut
    # at batch edges between them): two passes, each delivering every one of the 5,000 steps
    # of the 222 episodes as a real learner row, once.
    got = _grouped(grouped, f"cover_{concurrency}")
    assert got["rows"] == 5000, got
    assert got["passes"] == [{"real": 5000, "distinct": 5000}] * 2, got
    if concurrency == "default":
        assert got["concurrency"] == 2, got
        # Every fragment an actor could not complete went to the bank and came back joined:
        # nothing stays there between the passes.
        assert got["bank"]["held_fragments"] == 0 and got["bank"]["duplicates"] == 0, got
        assert got["bank"]["episodes_completed"] > 0, got
    else:
        assert got["bank"] is None, got  # one actor: no bank


def test_a_later_pass_never_joins_what_an_earlier_pass_left_in_the_bank(
    grouped: dict[str, Any],
) -> None:
    # The longest episode loses its done row: it never completes, so its fragments stay in
    # the bank after the first pass. The second pass (new actors) delivers the same rows; its
    # copies of the stuck fragments are counted as duplicates, never joined into an episode.
    got = _grouped(grouped, "cover_dead")
    real = got["rows"] - got["dead_rows"]
    assert got["passes"] == [{"real": real, "distinct": real}] * 2, got
    bank = got["bank"]
    assert bank["held_rows"] == got["dead_rows"] > 0, got
    assert bank["duplicates"] == bank["held_fragments"] > 0, got


def test_marwil_value_targets_are_exact_at_rllibs_default_concurrency(
    grouped: dict[str, Any],
) -> None:
    # MARWIL through Algorithm.train() with RLlib's default map_batches concurrency (2 actors):
    # every learner row's value target equals the discounted return of a plain loop over the
    # raw rows, except the rows of the one truncated episode (7 steps), whose targets bootstrap
    # from the value function by design; after 6 iterations every step has been trained on.
    got = _grouped(grouped, "marwil_exact")
    assert got["rows"] == 5000, got
    assert got["covered"] == 5000, got
    assert got["truncated_rows"] == 7, got
    assert got["exact"] == got["trained"] - got["trained_truncated"], got


def test_marwil_with_rllib_offline_data_trains_on_held_exact_episodes(
    grouped: dict[str, Any],
) -> None:
    # MARWIL at its defaults (materialize_mapped_data=False, RLlib's 2 map actors) with both of
    # our classes: RLlibOfflineData maps the whole episodes once (5,000 rows -> 5,222 learner
    # rows, MARWIL's one extra step per episode), the Learner trains from the held batches, and
    # every value target is still the plain loop's discounted return (6 iterations of 5 x 256
    # rows: more than a pass, so the second pass is the held list again).
    got = _grouped(grouped, "marwil_exact_held")
    assert got["held"] is True, got
    assert got["mapped_rows"] == 5_000 + 222, got
    assert got["rows"] == 5000 and got["covered"] == 5000, got
    assert got["trained"] > 5000, got
    assert got["exact"] == got["trained"] - got["trained_truncated"], got


def test_a_remote_learner_cuts_the_held_batches_in_its_own_process(
    grouped: dict[str, Any],
) -> None:
    # num_learners=1: the Learner is a Ray actor; RLlibOfflineData's iterator reaches it pickled
    # as the mapped dataset and the actor cuts its 256-row batches there (3,072 mapped rows: 12),
    # then trains 5 of them per iteration.
    got = _grouped(grouped, "remote_learner")
    assert got["trained"] == [5 * 256] * 3, got
    ((kind, lists, pid),) = got["remote"]
    assert kind == "_HeldBatches" and lists == [12], got
    assert pid != got["driver_pid"], got


def test_the_effective_map_batches_concurrency_and_t_are_read_as_rllib_sets_them(
    grouped: dict[str, Any],
) -> None:
    # RLlib's OfflineData runs the class in (its default_map_batches_kwargs | the config's
    # map_batches_kwargs) actors: 2 by default, max(2, num_learners), an autoscaling pool at
    # its max. Only rows with t share fragments between actors (without t: the warning).
    got = _grouped(grouped, "sharing")
    assert got["concurrency"] == {"default": 2, "one": 1, "autoscaling": 4, "three_learners": 3}
    assert got["with_t"] is True and got["without_t"] is False, got
