"""Training through RLlib 2.60's ``Algorithm.train()``: RLlib's prelearner against ours (issue 32).

Run ONLY by the RLlib venv's python (``benchmarks/setup_rllib.sh`` builds it), from the
repository root::

    PYTHONPATH=$PWD .bench/rllib-venv/bin/python benchmarks/bench_rllib_train.py

Sides: ``rllib`` (RLlib's own ``OfflinePreLearner``, the class OfflineData uses when none is
given) and ``ours`` (``offline_prelearner.rllib.RLlibPreLearner.configure(...)`` as
``prelearner_class``). Algorithms, one learner in the driver (``num_learners=0``),
``train_batch_size_per_learner=256`` (CQL 128), 5 learner updates per iteration, ``--iterations``
(50) timed iterations after the first (CQL ``--cql-iterations``, 5):

* ``bc``: ``datasets/cartpole-v1-heuristic/rows`` (3,000 rows, 6 episodes), ``lr=1e-2``; ours
  ``configure()``. BC's default ``materialize_mapped_data=True`` maps the whole dataset through
  the prelearner once, inside the first iteration; later iterations only iterate the
  materialized result, so the prelearner is not in the timed iterations at all.
* ``marwil``: ``datasets/cartpole-v1/rows`` (5,000 rows, 222 episodes), ``beta=1.0``; ours
  ``configure(to_learner="episodes")``. MARWIL streams (``materialize_mapped_data=False``): the
  prelearner runs on every pass over the data, and each new pass starts Ray Data's
  ``map_batches`` actors again (one iteration of seconds per pass).
* ``cql``: a Pendulum-v1 set recorded once per benchmark run into a temporary folder with this
  project's CLI (``record Pendulum-v1 --steps 3000 --policy random --seed 0 --rows-per-file
  1000``), batch 128 (its update costs ~0.2-0.4 s per 128 rows on a CPU), ``lr=None``; ours
  ``configure()``; only in the settings ``--cql-settings`` names (default ``defaults``).
  RLlib 2.60's CQL needs ``lr=None``: its config keeps the base ``lr=3e-4`` next to
  ``actor_lr``/``critic_lr``/``alpha_lr``, and ``build_algo()`` then fails in SAC's
  ``validate()`` ("Basic learning rate parameter `lr` is not `None`"). CQL also maps its data
  once (``materialize_mapped_data=True``, AlgorithmConfig's default).

``dataset_num_iters_per_learner`` is 5 for all three: RLlib's default is ``None`` (one pass over
the data per update call), and with a local learner (``num_learners=0``) MARWIL's, BC's (MARWIL's
subclass) and CQL's ``validate()`` refuse ``None`` ("the number of iterations per learner ...
has to be defined"), so it must be set.

Settings (``--settings``):

* ``defaults``: ``map_batches_kwargs`` not set, so RLlib's default ``concurrency`` of 2 prelearner
  actors; Ray started with ``num_cpus=4``. On the 2-core machine these figures come from,
  ``num_cpus=2`` makes RLlib's default hang with either prelearner: the two actors hold both
  CPUs and the read tasks never get one.
* ``c1``: ``map_batches_kwargs={"concurrency": 1}``, Ray with ``num_cpus=2``.
* ``materialized``: RLlib's defaults plus ``materialize_mapped_data=True`` (Ray with
  ``num_cpus=4``): what changes MARWIL (BC and CQL have it already). OfflineData builds the
  prelearners once, with the module state of the first ``sample()`` call, and every later pass
  maps the same data with the same state, so holding the mapped result changes nothing a
  Learner sees except the restart of the actors at each pass (and, for a sampling prelearner,
  which random draws repeat). Not in the default ``--settings``.

Interleaved rounds (``--repeats``, default 3): each round runs every (algorithm, setting, side)
once, the side order reversed every other round; **each run is a fresh subprocess** (its own
Ray: two algorithms in one Ray can deadlock for CPUs). JSON lines (``_common.py``):

* ``rllib_train.<algo>.<setting>`` per side (``impl`` ``rllib`` / ``ours``), medians over rounds:
  ``throughput`` = ``steps_per_s``: RLlib's ``learners/__all_modules__/num_env_steps_trained``
  summed over ``--iterations`` timed iterations after the first, over their wall time;
  ``median_iteration_steps_per_s`` (the same from each run's median iteration);
  ``real_transitions_per_s`` = ``steps_per_s * real_fraction``; ``first_iteration_s``
  (``build_algo()`` + the first ``train()``: Ray Data's start and, for BC and CQL with
  ``materialize_mapped_data=True``, the whole prelearner pass); ``ray_init_s``; per-round lists
  (``*_rounds``); for ``bc`` ``greedy_return`` (mean over the rounds' seeds) and
  ``greedy_return_by_seed``: the greedy mean return on CartPole-v1 (5 episodes, seeds 100-104)
  after the run's training (round ``r`` trains with seed ``--seeds[r % len(seeds)]``, both sides
  the same seed, so 3 rounds cover seeds 0, 1, 2).
* ``rllib_train.<algo>.real_fraction`` per side: the share of learner-batch rows that are real
  dataset transitions (rows whose ``loss_mask`` is true where the batch has one; MARWIL's
  ``AddOneTsToEpisodesAndTruncate`` adds one padding row per episode, and RLlib's prelearner makes
  every row a one-step episode), from the side's prelearner class run over the whole dataset in
  batches of the train batch size outside Ray (built as OfflineData builds it), once per
  benchmark run.
* ``rllib_train.<algo>.<setting>.run`` per side and round: that run's figures, with each timed
  iteration's seconds and steps (``iteration_s``, ``iteration_steps``) and ``build_s``.
* ``rllib_train.<algo>.<setting>`` ``impl`` ``ratio``: ours / rllib of the medians and per round
  (``ratio_rounds``), for ``steps_per_s``, ``real_transitions_per_s``,
  ``median_iteration_steps_per_s`` and ``first_iteration_s`` (there rllib / ours: > 1 means ours
  starts faster).
* ``--profile``: the timed iterations run under cProfile in the driver (slower: the profile's
  runs are not the throughput figures), and a line ``rllib_train.<algo>.<setting>.profile`` per
  side splits their wall time into ``learner_update_s`` (``TorchLearner._update``),
  ``data_wait_s`` (``MiniBatchRayDataIterator.__iter__``: waiting for and unpacking Ray Data's
  next batch, the prelearner's actors run meanwhile) and ``rest_s``.

A run that fails or hangs (``--timeout`` per run) gives a ``skipped`` line with the reason and the
tail of its stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
import numpy as np
from _rllib import greedy_return

ALGOS = ("bc", "marwil", "cql")
SETTINGS = ("defaults", "c1", "materialized")
SIDES = ("rllib", "ours")
#: --paired's sides: ours_data is our prelearner with RLlibOfflineData as offline_data_class.
PAIRED_SIDES = ("rllib", "ours", "ours_data")
BATCH = 256
#: CQL's batch (as tests/test_rllib.py): its update costs ~10 GFLOP per 256 rows on the CPU.
CQL_BATCH = 128
UPDATES = 5
ROWS = {
    "bc": "datasets/cartpole-v1-heuristic/rows",
    "marwil": "datasets/cartpole-v1/rows",
}
#: Ray's CPUs per setting (see the module docstring for why ``defaults`` needs 4).
NUM_CPUS = {"defaults": 4, "c1": 2, "materialized": 4}


# ----------------------------------------------------------------------------- configs


def _config(algo: str, setting: str, side: str, data: str, seed: int = 0) -> Any:
    """The algorithm's config for one (setting, side): the only place the sides differ."""
    import gymnasium as gym

    from offline_prelearner.rllib import RLlibPreLearner

    kwargs: dict[str, Any] = {
        "input_": [str(Path(data).resolve())],
        "dataset_num_iters_per_learner": UPDATES,
    }
    if setting == "c1":
        kwargs["map_batches_kwargs"] = {"concurrency": 1}
    if setting == "materialized":
        kwargs["materialize_mapped_data"] = True
    config: Any
    if algo == "bc":
        from ray.rllib.algorithms.bc import BCConfig

        env = gym.make("CartPole-v1")
        config = (
            BCConfig()  # type: ignore[no-untyped-call]
            .environment(observation_space=env.observation_space, action_space=env.action_space)
            .training(train_batch_size_per_learner=BATCH, lr=1e-2)
        )
        ours = RLlibPreLearner.configure()
    elif algo == "marwil":
        from ray.rllib.algorithms.marwil import MARWILConfig

        env = gym.make("CartPole-v1")
        config = (
            MARWILConfig()  # type: ignore[no-untyped-call]
            .environment(observation_space=env.observation_space, action_space=env.action_space)
            .training(train_batch_size_per_learner=BATCH, beta=1.0)
        )
        ours = RLlibPreLearner.configure(to_learner="episodes")
    else:
        from ray.rllib.algorithms.cql import CQLConfig

        config = (
            CQLConfig()  # type: ignore[no-untyped-call]
            .environment("Pendulum-v1")  # CQL's setup builds a local EnvRunner
            .env_runners(num_env_runners=0)
            .training(train_batch_size_per_learner=CQL_BATCH, lr=None)
        )
        ours = RLlibPreLearner.configure()
    if side in ("ours", "ours_data"):
        kwargs["prelearner_class"] = ours
    if side == "ours_data":
        from offline_prelearner.rllib import RLlibOfflineData

        kwargs["offline_data_class"] = RLlibOfflineData
    return config.learners(num_learners=0).offline_data(**kwargs).debugging(seed=seed)


def _spaces(algo: str) -> tuple[Any, Any]:
    import gymnasium as gym

    env = gym.make("Pendulum-v1" if algo == "cql" else "CartPole-v1")
    return env.observation_space, env.action_space


# ----------------------------------------------------------------------------- child: one run


def _profile_split(prof: cProfile.Profile, wall: float) -> dict[str, float]:
    """Seconds of the timed iterations in the learner's update, in the data wait, and the rest.

    Cumulative times: ``TorchLearner._update`` (forward, loss, backward, optimizer step) and the
    generator ``MiniBatchRayDataIterator.__iter__`` (each resume: Ray Data's iterator hands the
    next batch, waiting for it if the prelearner's actors have none ready, then RLlib unpacks it).
    """
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    update = wait = 0.0
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items():
        if name == "_update" and path.endswith("torch_learner.py"):
            update += ct
        elif name == "__iter__" and path.endswith("minibatch_utils.py"):
            wait += ct
    return {
        "learner_update_s": round(update, 3),
        "data_wait_s": round(wait, 3),
        "rest_s": round(wall - update - wait, 3),
    }


def _child_run(job: dict[str, Any]) -> dict[str, Any]:
    """One (algo, setting, side) run in this fresh process: the figures as one dict."""
    import ray

    algo_name, setting, side = job["algo"], job["setting"], job["side"]
    t0 = time.perf_counter()
    ray.init(num_cpus=NUM_CPUS[setting], include_dashboard=False, log_to_driver=False)
    ray_init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    algo = _config(algo_name, setting, side, job["data"], job["seed"]).build_algo()
    build_s = time.perf_counter() - t0
    algo.train()
    first = time.perf_counter() - t0
    prof = cProfile.Profile() if job["profile"] else None
    walls, steps = [], []
    if prof is not None:
        prof.enable()
    cpu0 = time.process_time()
    for _ in range(job["iterations"]):
        t1 = time.perf_counter()
        result = algo.train()
        walls.append(time.perf_counter() - t1)
        steps.append(int(result["learners"]["__all_modules__"]["num_env_steps_trained"]))
    cpu = time.process_time() - cpu0
    if prof is not None:
        prof.disable()
    out: dict[str, Any] = {
        "cpu_s": cpu,
        "ray_init_s": ray_init_s,
        "build_s": build_s,
        "first_iteration_s": first,
        "walls": walls,
        "steps": steps,
    }
    if prof is not None:
        out["profile"] = _profile_split(prof, sum(walls))
    if algo_name == "bc":
        out["greedy_return"] = greedy_return(algo)
    algo.stop()
    ray.shutdown()
    return out


def _child_paired(job: dict[str, Any]) -> dict[str, Any]:
    """Three sides in one process, timed in turns block by block.

    For the algorithms that map their data once (``materialize_mapped_data=True``: BC and CQL at
    RLlib's defaults) a timed iteration is the Learner and the path its batches take, never a
    prelearner call, so the sides' algorithms can share one Ray (each maps its data in its first
    ``train()``; its map actors are gone afterwards) and take turns: ``rllib`` (RLlib's
    prelearner and OfflineData), ``ours`` (our prelearner, RLlib's OfflineData: Ray Data's
    iterator hands every batch) and ``ours_data`` (our prelearner and
    :class:`~offline_prelearner.rllib.RLlibOfflineData`: the batches from memory), the order
    rotated every block of ``block`` iterations, so every figure is paired with the others under
    the same load. Blocks, not single iterations: Ray Data's iterator prefetches in a thread, so
    a side's next batch would be made during the other sides' turns; a block leaves that to its
    first batch. The driver's CPU seconds per block (all threads) are the load-robust figure.
    """
    import ray

    algo_name = job["algo"]
    ray.init(num_cpus=NUM_CPUS["defaults"], include_dashboard=False, log_to_driver=False)
    algos = {}
    for side in PAIRED_SIDES:
        algos[side] = _config(algo_name, "defaults", side, job["data"], job["seed"]).build_algo()
        algos[side].train()
    order = list(PAIRED_SIDES)
    walls: dict[str, list[float]] = {k: [] for k in order}
    steps: dict[str, list[int]] = {k: [] for k in order}
    cpu: dict[str, list[float]] = {k: [] for k in order}
    block = job["block"]
    for i in range(max(1, job["iterations"] // block)):
        k = i % len(order)
        turn = order[k:] + order[:k]
        for side in turn:
            n = 0
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(block):
                result = algos[side].train()
                n += int(result["learners"]["__all_modules__"]["num_env_steps_trained"])
            walls[side].append(time.perf_counter() - t0)
            cpu[side].append(time.process_time() - c0)
            steps[side].append(n)
    for a in algos.values():
        a.stop()
    ray.shutdown()
    return {"walls": walls, "steps": steps, "cpu_s": cpu}


def _paired_lines(algo: str, got: dict[str, Any], command: str) -> list[dict[str, Any]]:
    """The paired run's lines: per side the median block, and the ratios of the medians."""
    lines: list[dict[str, Any]] = []
    rate: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for side, walls in got["walls"].items():
        steps = got["steps"][side]
        rate[side] = _median([s / w for s, w in zip(steps, walls, strict=True)])
        cpu[side] = _median([c / s for c, s in zip(got["cpu_s"][side], steps, strict=True)])
        line = C.record(
            f"rllib_train.{algo}.paired",
            side,
            n=int(sum(steps)),
            timing=C.Timing((sum(walls),)),
            unit="env_steps/s",
            blocks=len(walls),
            median_block_steps_per_s=round(rate[side], 1),
            block_steps_per_s=[round(s / w, 1) for s, w in zip(steps, walls, strict=True)],
            median_block_cpu_ms_per_1k_steps=round(1e6 * cpu[side], 1),
        )
        line.update(loadavg_1m=got["loadavg_1m"], command=command)
        lines.append(line)
    lines.append(
        {
            "bench": f"rllib_train.{algo}.paired",
            "impl": "ratio",
            "ratio": round(rate["ours_data"] / rate["rllib"], 3),
            "ratio_ours_data": round(rate["ours_data"] / rate["rllib"], 3),
            "ratio_ours": round(rate["ours"] / rate["rllib"], 3),
            "ratio_cpu_per_step_ours_data": round(cpu["rllib"] / cpu["ours_data"], 3),
            "ratio_cpu_per_step_ours": round(cpu["rllib"] / cpu["ours"], 3),
            "loadavg_1m": got["loadavg_1m"],
            "command": command,
        }
    )
    return lines


def _raw_batches(path: str, size: int) -> list[dict[str, np.ndarray]]:
    """The rows as numpy batches of ``size`` in file order (the last one shorter), vectors
    stacked: what ``map_batches(batch_size=train_batch_size_per_learner)`` hands a prelearner."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(pq.read_table(f) for f in C.parquet_files(Path(path)))
    cols: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name).to_numpy(zero_copy_only=False)
        if col.dtype == object and len(col) and isinstance(col[0], np.ndarray):
            col = np.stack(col)
        cols[name] = col
    n = table.num_rows
    return [{k: v[i : i + size] for k, v in cols.items()} for i in range(0, n, size)]


def _child_fraction(job: dict[str, Any]) -> dict[str, Any]:
    """Each side's share of real transitions among its learner-batch rows (no Ray)."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    algo = job["algo"]
    batches = _raw_batches(job["data"], CQL_BATCH if algo == "cql" else BATCH)
    out: dict[str, Any] = {"rows_in": int(sum(len(b[next(iter(b))]) for b in batches))}
    for side in SIDES:
        config = _config(algo, "c1", side, job["data"])
        cls = config.prelearner_class or OfflinePreLearner
        spaces = _spaces(algo)
        spec = config.get_multi_rl_module_spec(spaces={"default_policy": spaces})
        pre = cls(config=config, spaces=spaces, module_spec=spec)
        rows = real = 0
        for batch in batches:
            got = pre(batch)
            for flat in [got] if isinstance(got, dict) else list(got):
                if not flat:
                    continue
                mask = flat.get(f"default_policy/{Columns.LOSS_MASK}")
                n = len(flat[f"default_policy/{Columns.OBS}"])
                rows += n
                real += n if mask is None else int(np.count_nonzero(mask))
        out[side] = {"rows_out": rows, "real_rows": real, "real_fraction": real / max(rows, 1)}
    return out


# ----------------------------------------------------------------------------- parent


def _kill_session(pid: int) -> None:
    """Kills every process of the session a timed-out child led (Ray's raylet, workers too)."""
    victims = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == pid:  # field 6 of stat: the session id
            victims.append(int(entry))
    for victim in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def _spawn(job: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Runs ``job`` in a fresh interpreter (own session); its result, or None and why."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(job)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            proc.communicate()
            return None, f"no result after {timeout:.0f} s (killed){_tail(err)}"
        _kill_session(proc.pid)  # Ray processes the child's exit left behind, if any
        results = [x for x in stdout.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not results:
            return None, f"exited with code {proc.returncode}{_tail(err)}"
        return json.loads(results[-1]), ""


def _tail(fh: Any, lines: int = 6) -> str:
    """The last lines of a child's stderr that are not Ray's progress bars."""
    fh.seek(0)
    kept = [x.strip() for x in fh.read().splitlines() if x.strip() and "Running" not in x]
    return ": " + " | ".join(kept[-lines:]) if kept else ""


def _record_pendulum(folder: Path) -> str:
    """The CQL data: 3,000 random Pendulum-v1 steps in files of 1,000 rows (this project's CLI)."""
    out = folder / "pendulum-v1" / "rows"
    subprocess.run(
        [
            *(sys.executable, "-m", "offline_prelearner", "record", "Pendulum-v1"),
            *("--steps", "3000", "--out", str(out), "--policy", "random", "--seed", "0"),
            *("--rows-per-file", "1000"),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return str(out)


def _settings(algo: str, args: argparse.Namespace) -> list[str]:
    """The settings ``algo`` runs in (CQL's are ``--cql-settings`` within ``--settings``)."""
    if algo != "cql":
        return list(args.settings)
    return [s for s in args.settings if s in args.cql_settings]


def _round_line(algo: str, setting: str, side: str, run: dict[str, Any]) -> Any:
    """One run's own line (one round): its timed iterations, first iteration and start-up."""
    walls, steps = run["walls"], run["steps"]
    line = C.record(
        f"rllib_train.{algo}.{setting}.run",
        side,
        n=int(sum(steps)),
        timing=C.Timing((sum(walls),)),
        unit="env_steps/s",
        round=run["round"],
        seed=run["seed"],
        iteration_s=[round(w, 3) for w in walls],
        iteration_steps=steps,
        first_iteration_s=round(run["first_iteration_s"], 2),
        build_s=round(run["build_s"], 2),
        ray_init_s=round(run["ray_init_s"], 2),
    )
    line["loadavg_1m"] = run["loadavg_1m"]
    line["cpu_s"] = round(run["cpu_s"], 3)
    if "greedy_return" in run:
        line["greedy_return"] = round(run["greedy_return"], 1)
    return line


def _run_once(job: dict[str, Any], r: int, timeout: float, command: str) -> Any:
    """Runs one job in a fresh process and emits its round line (and profile); its result."""
    algo, setting, side = job["algo"], job["setting"], job["side"]
    t0 = time.perf_counter()
    got, why = _spawn(job, timeout)
    C.log(f"  {time.perf_counter() - t0:.0f} s{'' if got else ': ' + why}")
    if got is None:
        C.emit(
            {
                "bench": f"rllib_train.{algo}.{setting}",
                "impl": side,
                "skipped": why,
                "round": r,
                "loadavg_1m": round(os.getloadavg()[0], 2),
                "command": command,
            }
        )
        return None
    got.update(round=r, seed=job["seed"])
    C.emit({**_round_line(algo, setting, side, got), "command": command})
    if job["profile"]:
        C.emit(
            {
                "bench": f"rllib_train.{algo}.{setting}.profile",
                "impl": "fit",
                "side": side,
                "round": r,
                "wall_s": round(sum(got["walls"]), 3),
                **got["profile"],
                "loadavg_1m": got["loadavg_1m"],
                "command": command,
            }
        )
    return got


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _run_line(algo: str, setting: str, side: str, runs: list[dict[str, Any]], frac: float) -> Any:
    """The side's line over its rounds (medians), from each round's child result."""
    per: dict[str, list[Any]] = {
        "steps_per_s": [],
        "median_iteration_steps_per_s": [],
        "first_iteration_s": [],
        "ray_init_s": [],
        "loadavg": [],
    }
    for run in runs:
        walls, steps = run["walls"], run["steps"]
        per["steps_per_s"].append(sum(steps) / sum(walls))
        rates = [s / w for s, w in zip(steps, walls, strict=True)]
        per["median_iteration_steps_per_s"].append(_median(rates))
        per["first_iteration_s"].append(run["first_iteration_s"])
        per["ray_init_s"].append(run["ray_init_s"])
        per["loadavg"].append(run["loadavg_1m"])
    seconds = [sum(r["walls"]) for r in runs]
    n = int(_median([sum(r["steps"]) for r in runs]))
    line = C.record(
        f"rllib_train.{algo}.{setting}",
        side,
        n=n,
        timing=C.Timing(tuple(seconds)),
        unit="env_steps/s",
        rounds=len(runs),
        iterations=len(runs[0]["walls"]),
        real_fraction=round(frac, 4),
    )
    steps = _median(per["steps_per_s"])
    line.update(
        throughput=round(steps, 1),
        steps_per_s=round(steps, 1),
        median_iteration_steps_per_s=round(_median(per["median_iteration_steps_per_s"]), 1),
        real_transitions_per_s=round(steps * frac, 1),
        first_iteration_s=round(_median(per["first_iteration_s"]), 2),
        ray_init_s=round(_median(per["ray_init_s"]), 2),
        steps_per_s_rounds=[round(x, 1) for x in per["steps_per_s"]],
        first_iteration_s_rounds=[round(x, 2) for x in per["first_iteration_s"]],
        loadavg_rounds=per["loadavg"],
    )
    if algo == "bc":
        by_seed = {str(r["seed"]): round(r["greedy_return"], 1) for r in runs}
        line["greedy_return"] = round(float(np.mean([r["greedy_return"] for r in runs])), 1)
        line["greedy_return_by_seed"] = by_seed
    return line


def _ratio_line(bench: str, ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> Any:
    """ours / rllib per metric: of the medians and per round (rounds both sides ran)."""
    both = sorted({r["round"] for r in ours} & {r["round"] for r in theirs})
    o = {r["round"]: r for r in ours}
    t = {r["round"]: r for r in theirs}
    line: dict[str, Any] = {"bench": bench, "impl": "ratio", "rounds": len(both)}

    def rate(run: dict[str, Any]) -> float:
        return float(sum(run["steps"]) / sum(run["walls"]))

    def med_it(run: dict[str, Any]) -> float:
        return _median([s / w for s, w in zip(run["steps"], run["walls"], strict=True)])

    metrics = {
        "steps_per_s": (rate, False),
        "real_transitions_per_s": (lambda run: rate(run) * run["real_fraction"], False),
        "median_iteration_steps_per_s": (med_it, False),
        "first_iteration_s": (lambda run: float(run["first_iteration_s"]), True),
    }
    for name, (fn, inverse) in metrics.items():
        per = [(fn(t[r]) / fn(o[r])) if inverse else (fn(o[r]) / fn(t[r])) for r in both]
        a = _median([fn(o[r]) for r in both])
        b = _median([fn(t[r]) for r in both])
        line[f"ratio_{name}"] = round((b / a) if inverse else (a / b), 3)
        line[f"ratio_{name}_median_of_rounds"] = round(_median(per), 3)
        line[f"ratio_{name}_rounds"] = [round(x, 3) for x in per]
    line["ratio"] = line["ratio_steps_per_s"]
    line["loadavg_rounds"] = [[t[r]["loadavg_1m"], o[r]["loadavg_1m"]] for r in both]
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    C.add_common_args(parser)
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=["defaults", "c1"])
    parser.add_argument(
        "--iterations", type=int, default=50, help="timed iterations after the first (50)"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="BC's seed per round, cycled"
    )
    parser.add_argument(
        "--cql-settings",
        nargs="+",
        choices=SETTINGS,
        default=["defaults"],
        help="CQL's settings, of those --settings names (default: defaults only)",
    )
    parser.add_argument("--cql-iterations", type=int, default=5, help="CQL's timed iterations (5)")
    parser.add_argument(
        "--sides",
        nargs="+",
        choices=PAIRED_SIDES,
        default=list(SIDES),
        help="rllib, ours, ours_data (our prelearner + RLlibOfflineData); default rllib ours",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the timed iterations")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run (300)")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="BC/CQL at RLlib's defaults: rllib, ours and ours_data (+ RLlibOfflineData) in one "
        "process, timed in turns block by block (robust to a loaded machine); lines per round",
    )
    parser.add_argument(
        "--block", type=int, default=5, help="--paired: iterations a side runs in a turn (5)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        job = json.loads(args.child)
        if job.get("fraction"):
            got = _child_fraction(job)
        elif job.get("paired"):
            got = _child_paired(job)
        else:
            got = _child_run(job)
        got["loadavg_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(got), flush=True)
        return 0
    if args.quick:
        args.iterations = args.cql_iterations = 2
    rounds = args.repeats or (1 if args.quick else 3)
    os.environ.setdefault("RAY_DATA_LOG_LEVEL", "ERROR")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    command = shlex.join(sys.orig_argv)
    C.emit(
        C.header(
            "bench_rllib_train.py",
            command=command,
            rounds=rounds,
            iterations=args.iterations,
            algos=args.algos,
            settings=args.settings,
            seeds=args.seeds,
            cql_settings=args.cql_settings,
            cql_iterations=args.cql_iterations,
            num_cpus=NUM_CPUS,
            profile=args.profile,
        )
    )
    with tempfile.TemporaryDirectory(prefix="bench_rllib_train-") as tmp:
        data = dict(ROWS)
        if "cql" in args.algos:
            C.log("recording Pendulum-v1 (3,000 steps) for CQL")
            data["cql"] = _record_pendulum(Path(tmp))
        if args.paired:
            for r in range(rounds):
                for algo in args.algos:
                    C.log(f"round {r + 1}/{rounds}: {algo} paired")
                    iterations = args.cql_iterations if algo == "cql" else args.iterations
                    job = {
                        "paired": True,
                        "algo": algo,
                        "data": data[algo],
                        "seed": args.seeds[r % len(args.seeds)] if algo == "bc" else 0,
                        "iterations": iterations,
                        "block": args.block,
                    }
                    got, why = _spawn(job, args.timeout)
                    if got is None:
                        C.emit({"bench": f"rllib_train.{algo}.paired", "skipped": why})
                        continue
                    for line in _paired_lines(algo, got, command):
                        C.emit({**line, "round": r})
            return 0
        fractions: dict[str, dict[str, float]] = {}
        for algo in args.algos:
            C.log(f"{algo}: real fraction of learner rows, each side, outside Ray")
            share, why = _spawn({"fraction": True, "algo": algo, "data": data[algo]}, args.timeout)
            fractions[algo] = {}
            for side in SIDES:
                line: dict[str, Any] = {"bench": f"rllib_train.{algo}.real_fraction", "impl": side}
                if share is None:
                    line["skipped"] = why
                    fractions[algo][side] = float("nan")
                else:
                    fractions[algo][side] = share[side]["real_fraction"]
                    line.update({"impl": "data", "side": side, "rows_in": share["rows_in"]})
                    line.update(share[side])
                    line["real_fraction"] = round(line["real_fraction"], 4)
                line.update(loadavg_1m=round(os.getloadavg()[0], 2), command=command)
                C.emit(line)
            # ours_data: our prelearner (the same learner rows), RLlibOfflineData
            fractions[algo]["ours_data"] = fractions[algo]["ours"]
        runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in range(rounds):
            seed = args.seeds[r % len(args.seeds)]
            for algo in args.algos:
                for setting in _settings(algo, args):
                    order = args.sides if r % 2 == 0 else args.sides[::-1]
                    for side in order:
                        C.log(f"round {r + 1}/{rounds}: {algo} {setting} {side}")
                        job = {
                            "algo": algo,
                            "setting": setting,
                            "side": side,
                            "data": data[algo],
                            "seed": seed if algo == "bc" else 0,
                            "iterations": args.cql_iterations if algo == "cql" else args.iterations,
                            "profile": args.profile,
                        }
                        got = _run_once(job, r, args.timeout, command)
                        if got is not None:
                            got["real_fraction"] = fractions[algo][side]
                            runs.setdefault((algo, setting, side), []).append(got)
    for algo in args.algos:
        for setting in _settings(algo, args):
            bench = f"rllib_train.{algo}.{setting}"
            for side in args.sides:
                if runs.get((algo, setting, side)):
                    frac = fractions[algo][side]
                    line = _run_line(algo, setting, side, runs[algo, setting, side], frac)
                    line["command"] = command
                    C.emit(line)
            theirs = runs.get((algo, setting, "rllib"))
            for side in args.sides:
                if side != "rllib" and theirs and runs.get((algo, setting, side)):
                    ratio = _ratio_line(bench, runs[algo, setting, side], theirs)
                    ratio.update(side=side, command=command)
                    C.emit(ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
