"""RLlib's own training loop with offline_prelearner.rllib; run by tests/test_rllib.py.

Runs under RLlib's interpreter (the venv benchmarks/setup_rllib.sh builds, with this checkout
installed editable): ``python tests/rllib_loop.py CASE ARGS...``. The last line printed is the
case's result as JSON; the test asserts on it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks._rllib import greedy_return  # PYTHONPATH is the repository (test_rllib.py)

#: What starts the line of the result (JSON) on stdout: Ray's driver prints lines of its own
#: there at any moment (the raylet's warnings), before or after it.
RESULT = "rllib_loop result: "


def _ray(num_cpus: int = 2) -> None:
    """Ray for a case: its own (``num_cpus`` logical CPUs) when the case runs alone; in
    :func:`many`, the one Ray all its cases share (4 CPUs), already started."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def _spaces(env_id: str) -> tuple[Any, Any]:
    env = gym.make(env_id)
    return env.observation_space, env.action_space


def _losses(result: dict[str, Any]) -> dict[str, float]:
    learner = result["learners"]["default_policy"]
    return {k: float(v) for k, v in learner.items() if "loss" in k}


def bc(data: str, iterations: str) -> dict[str, Any]:
    """BC with RLlib's prelearner and with ours, same data, seed and iterations: the greedy
    return evaluated after each of the last half of the iterations (one evaluation is noisy)."""
    from ray.rllib.algorithms.bc import BCConfig

    from offline_prelearner.rllib import RLlibPreLearner

    _ray()
    obs_space, act_space = _spaces("CartPole-v1")
    n = int(iterations)
    out: dict[str, Any] = {}
    for side in ("rllib", "ours"):
        config = (
            BCConfig()
            .environment(observation_space=obs_space, action_space=act_space)
            .learners(num_learners=0)
            .offline_data(
                input_=[os.path.abspath(data)],
                dataset_num_iters_per_learner=5,
                map_batches_kwargs={"concurrency": 1},
            )
            .training(train_batch_size_per_learner=256, lr=1e-2)
            .debugging(seed=0)
        )
        if side == "ours":
            config = config.offline_data(prelearner_class=RLlibPreLearner.configure())
        algo = config.build_algo()
        returns = []
        for i in range(n):
            result = algo.train()
            if i >= n // 2:
                returns.append(greedy_return(algo))
        out[side] = {"returns": returns, "losses": _losses(result)}
        algo.stop()
    return out


def marwil_cql(cartpole: str, pendulum: str, iterations: str) -> dict[str, Any]:
    """MARWIL on CartPole (GAE over the real episodes), CQL on Pendulum (3-step): losses."""
    from ray.rllib.algorithms.cql import CQLConfig
    from ray.rllib.algorithms.marwil import MARWILConfig

    from offline_prelearner.rllib import RLlibPreLearner

    _ray()
    out: dict[str, Any] = {}
    obs_space, act_space = _spaces("CartPole-v1")
    marwil = (
        MARWILConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .learners(num_learners=0)
        .offline_data(
            input_=[os.path.abspath(cartpole)],
            dataset_num_iters_per_learner=2,
            map_batches_kwargs={"concurrency": 1},
            prelearner_class=RLlibPreLearner.configure(to_learner="episodes"),
        )
        .training(train_batch_size_per_learner=256, beta=1.0)
        .debugging(seed=0)
    )
    obs_space, act_space = _spaces("Pendulum-v1")
    cql = (
        CQLConfig()
        .environment("Pendulum-v1")  # CQL's setup builds a local EnvRunner
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
        .offline_data(
            input_=[os.path.abspath(pendulum)],
            dataset_num_iters_per_learner=2,
            map_batches_kwargs={"concurrency": 1},
            prelearner_class=RLlibPreLearner.configure(),
        )
        .training(train_batch_size_per_learner=128, n_step=3, lr=None)
        .debugging(seed=0)
    )
    for name, config in (("marwil", marwil), ("cql", cql)):
        algo = config.build_algo()
        losses = []
        for _ in range(int(iterations)):
            losses.append(_losses(algo.train()))
        out[name] = losses
        algo.stop()
    return out


def _prelearner(cls: Any, config: Any, env_id: str) -> Any:
    """A prelearner as OfflineData builds one (config, spaces, module_spec), without Ray Data."""
    spaces = _spaces(env_id)
    spec = config.get_multi_rl_module_spec(spaces={"default_policy": spaces})
    return cls(config=config, spaces=spaces, module_spec=spec)


def _batches(path: str) -> list[dict[str, np.ndarray]]:
    """Each file of a rows folder as one numpy batch, in name order (Ray Data's numpy layout)."""
    out = []
    for f in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        table = pq.read_table(f)
        batch = {}
        for name in table.column_names:
            col = table.column(name).to_numpy(zero_copy_only=False)
            if col.dtype == object and len(col) and isinstance(col[0], np.ndarray):
                col = np.stack(col)
            batch[name] = col
        out.append(batch)
    return out


def learner_columns(pendulum: str, out_json: str, own_piece: str = "") -> dict[str, Any]:
    """CQL's learner batch (3-step) for every transition of the data, column by column, written
    to ``out_json`` for the test to hold against the batch job's output; ``bulk``: whether the
    samples went to the connector as columns (RLlib's default pieces only). ``own_piece``
    non-empty: a user's own (pass-through) piece in the pipeline, so one episode per sample."""
    from ray.rllib.algorithms.cql import CQLConfig
    from ray.rllib.connectors.connector_v2 import ConnectorV2

    class OwnPiece(ConnectorV2):
        def __call__(self, *, batch: Any, **kwargs: Any) -> Any:
            return batch

    from offline_prelearner.rllib import RLlibPreLearner

    obs_space, act_space = _spaces("Pendulum-v1")
    config = (
        CQLConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .training(train_batch_size_per_learner=128, n_step=3, gamma=0.99)
    )
    if own_piece:
        config = config.training(learner_connector=lambda *spaces: OwnPiece())
    cls = RLlibPreLearner.configure({"sample_all": True})
    pre = _prelearner(cls, config, "Pendulum-v1")
    cols: dict[str, list[np.ndarray]] = {}
    for batch in _batches(pendulum):
        flat = pre(batch)  # one dict, RLlib's contract ({} while nothing is ready)
        for key, value in flat.items():
            cols.setdefault(key, []).append(np.asarray(value))
    joined = {k: np.concatenate(v).tolist() for k, v in cols.items()}
    with open(out_json, "w") as fh:
        json.dump(joined, fh)
    rows = len(next(iter(joined.values())))
    return {"columns": sorted(joined), "rows": rows, "bulk": pre._bulk_ok()}


def split_episode(path: str) -> dict[str, Any]:
    """Rows of episodes cut across files: the episodes each prelearner hands the connector."""
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    from offline_prelearner.rllib import RLlibPreLearner

    obs_space, act_space = _spaces("CartPole-v1")
    config = (
        MARWILConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .training(train_batch_size_per_learner=64)
    )
    rllib = _prelearner(OfflinePreLearner, config, "CartPole-v1")
    cls = RLlibPreLearner.configure(to_learner="episodes")
    ours, learner_side = (_prelearner(cls, config, "CartPole-v1") for _ in range(2))
    out: dict[str, Any] = {"rllib": [], "ours": [], "ours_batch_rows": []}
    for batch in _batches(path):
        eps = rllib._map_to_episodes(batch)["episodes"]
        out["rllib"] += [[e.id_, len(e)] for e in eps]
        mine = ours.rllib_episodes(batch)
        out["ours"] += [[e.id_, len(e), bool(e.is_terminated), bool(e.is_truncated)] for e in mine]
        # What the Learner receives from the same batches (MARWIL's connectors, GAE included).
        flat = learner_side(batch)
        if flat:
            adv = np.asarray(flat["default_policy/advantages"])
            out["ours_batch_rows"].append([len(adv), bool(np.isfinite(adv).all())])
    return out


def packed(path: str) -> dict[str, Any]:
    """BC for one iteration on RLlib's own packed recording (``obs``/``new_obs`` as
    base64(lz4(pickle)) strings) with ``read.legacy_pickle`` opted in: the losses."""
    from ray.rllib.algorithms.bc import BCConfig

    from offline_prelearner.rllib import RLlibPreLearner

    _ray()
    obs_space, act_space = _spaces("CartPole-v1")
    config = (
        BCConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .learners(num_learners=0)
        .offline_data(
            input_=[os.path.abspath(path)],
            dataset_num_iters_per_learner=2,
            map_batches_kwargs={"concurrency": 1},
            prelearner_class=RLlibPreLearner.configure({"read.legacy_pickle": True}),
        )
        .training(train_batch_size_per_learner=64)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    result = algo.train()
    algo.stop()
    trained = result["learners"]["__all_modules__"]["num_env_steps_trained"]
    return {"losses": _losses(result), "trained": float(trained)}


def minari(data_dir: str) -> dict[str, Any]:
    """BC for one iteration on a Minari dataset (arrow backend, one file per episode), read by
    Ray Data as binary files with their paths and by our reader from the paths."""
    from ray.rllib.algorithms.bc import BCConfig

    from offline_prelearner.rllib import RLlibPreLearner

    _ray()
    obs_space, act_space = _spaces("CartPole-v1")
    config = (
        BCConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .learners(num_learners=0)
        .offline_data(
            input_=[os.path.abspath(data_dir)],
            input_read_method="read_binary_files",
            input_read_method_kwargs={"include_paths": True, "file_extensions": ["arrow"]},
            dataset_num_iters_per_learner=2,
            map_batches_kwargs={"concurrency": 1},
            prelearner_class=RLlibPreLearner.configure({"read.format": "minari"}),
        )
        .training(train_batch_size_per_learner=32)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    result = algo.train()
    algo.stop()
    trained = result["learners"]["__all_modules__"]["num_env_steps_trained"]
    return {"losses": _losses(result), "trained": float(trained)}


def marwil_exact(
    data: str, concurrency: str, iterations: str, data_class: str = "rllib"
) -> dict[str, Any]:
    """MARWIL through Algorithm.train() with ``to_learner="episodes"`` at ``concurrency``
    map_batches actors ("default": RLlib's own default, 2), with RLlib's ``OfflineData``
    (``data_class`` "rllib") or ``RLlibOfflineData`` ("held": mapped once, the Learner's batches
    from memory; ``held`` says whether the Learner's iterator was the held one, ``mapped_rows``
    counts a pass's learner rows): every learner row's value target
    (the rows with the loss mask) against the discounted return of a plain loop over the raw
    rows, matched by observation. The learner records what ``compute_loss_for_module`` gets;
    the rows of a truncated episode (``trained_truncated`` of those trained) bootstrap from the
    value function, by design."""
    from ray.rllib.algorithms.marwil import MARWILConfig
    from ray.rllib.algorithms.marwil.torch.marwil_torch_learner import MARWILTorchLearner
    from ray.rllib.core.columns import Columns
    from ray.rllib.evaluation.postprocessing import Postprocessing

    from offline_prelearner.rllib import RLlibOfflineData, RLlibPreLearner, _HeldBatches

    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Recording(MARWILTorchLearner):  # type: ignore[misc]
        def compute_loss_for_module(self, *, module_id, config=None, batch, fwd_out):  # type: ignore[no-untyped-def]
            mask = batch.get(Columns.LOSS_MASK)
            obs = batch[Columns.OBS].cpu().numpy()
            vt = batch[Postprocessing.VALUE_TARGETS].cpu().numpy()
            keep = np.ones(len(vt), bool) if mask is None else mask.cpu().numpy().astype(bool)
            seen.append((obs[keep], vt[keep]))
            return super().compute_loss_for_module(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )

    _ray(4)
    obs_space, act_space = _spaces("CartPole-v1")
    kwargs = {} if concurrency == "default" else {"concurrency": int(concurrency)}
    config = (
        MARWILConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .learners(num_learners=0)
        .offline_data(
            input_=[os.path.abspath(data)],
            dataset_num_iters_per_learner=5,
            map_batches_kwargs=kwargs,
            prelearner_class=RLlibPreLearner.configure(to_learner="episodes"),
            **({"offline_data_class": RLlibOfflineData} if data_class == "held" else {}),
        )
        .training(train_batch_size_per_learner=256, beta=1.0, gamma=0.99, learner_class=Recording)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    for _ in range(int(iterations)):
        algo.train()
    held = isinstance(algo.learner_group._learner.iterator._iterator, _HeldBatches)
    mapped_rows = algo.offline_data.data.count() if held else None
    algo.stop()
    # The plain loop: rows grouped by episode in file order, returns-to-go backwards.
    table = pq.ParquetDataset(sorted(glob.glob(os.path.join(data, "*.parquet")))).read()
    ids = table.column("eps_id").to_pylist()
    obs = np.stack(table.column("obs").to_numpy(zero_copy_only=False)).astype(np.float32)
    rewards = table.column("rewards").to_numpy()
    truncated = set(np.asarray(ids, dtype=object)[table.column("truncateds").to_numpy()].tolist())
    cut: set[bytes] = {obs[i].tobytes() for i, e in enumerate(ids) if e in truncated}
    want: dict[bytes, float] = {}
    by_episode: dict[Any, list[int]] = {}
    for i, e in enumerate(ids):
        by_episode.setdefault(e, []).append(i)
    for rows in by_episode.values():
        g = 0.0
        for i in reversed(rows):
            g = float(rewards[i]) + 0.99 * g
            want[obs[i].tobytes()] = g
    trained = exact = trained_truncated = 0
    covered: set[bytes] = set()
    for o, vt in seen:
        for row, v in zip(o.astype(np.float32), vt, strict=True):
            key = row.tobytes()
            trained += 1
            trained_truncated += int(key in cut)
            covered.add(key)
            exact += int(
                key in want and math.isclose(float(v), want[key], rel_tol=1e-4, abs_tol=1e-4)
            )
    return {
        "trained": trained,
        "exact": exact,
        "covered": len(covered),
        "rows": len(want),
        "trained_truncated": trained_truncated,  # rows of truncated episodes: bootstrapped
        "truncated_rows": len(cut),
        "held": held,
        "mapped_rows": mapped_rows,
    }


def cover(data: str, concurrency: str, epochs: str, dead: str = "") -> dict[str, Any]:
    """MARWIL's prelearner with ``to_learner="episodes"`` in ``Dataset.map_batches`` over a
    materialized dataset, at ``concurrency`` actors ("default": RLlib's, 2), for ``epochs``
    passes (each runs the map again, in new actors): per pass the learner rows that are real
    steps (loss mask) and how many distinct observations they hold; then the fragment bank's
    stats (None where there is none). ``dead`` non-empty: the data's longest episode loses its
    done row first, so it never completes and its fragments stay in the bank."""
    import ray
    from ray.rllib.algorithms.marwil import MARWILConfig

    from offline_prelearner.rllib import RLlibPreLearner

    _ray(4)
    table = pq.ParquetDataset(sorted(glob.glob(os.path.join(data, "*.parquet")))).read()
    removed = 0
    if dead:
        ids = np.asarray(table.column("eps_id").to_pylist(), dtype=object)
        names, counts = np.unique(ids, return_counts=True)
        longest = names[np.argmax(counts)]
        t = table.column("t").to_numpy()
        keep = ~((ids == longest) & (t == t[ids == longest].max()))
        table = table.filter(pa.array(keep))
        removed = int(counts.max())
    obs_space, act_space = _spaces("CartPole-v1")
    kwargs = {} if concurrency == "default" else {"concurrency": int(concurrency)}
    config = (
        MARWILConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .offline_data(map_batches_kwargs=kwargs)
        .training(train_batch_size_per_learner=256, beta=1.0)
    )
    spec = config.get_multi_rl_module_spec(spaces={"default_policy": (obs_space, act_space)})
    cls = RLlibPreLearner.configure(to_learner="episodes")
    effective = kwargs.get("concurrency", max(2, config.num_learners))  # RLlib's default
    ds = ray.data.from_arrow(table).repartition(5).materialize()
    mapped = ds.map_batches(
        cls,
        fn_constructor_kwargs={"config": config, "module_spec": spec},
        batch_size=256,
        concurrency=effective,
        zero_copy_batch=True,
    )
    passes = []
    for _ in range(int(epochs)):
        real, keys = 0, set()
        for b in mapped.iter_batches(batch_size=256):
            m = b["default_policy/loss_mask"].astype(bool)
            real += int(m.sum())
            keys.update(o.astype(np.float32).tobytes() for o in b["default_policy/obs"][m])
        passes.append({"real": real, "distinct": len(keys)})
    try:
        bank = ray.get_actor(cls.fragment_bank, namespace="offline_prelearner")
        stats = ray.get(bank.stats.remote())
    except ValueError:
        stats = None
    return {
        "passes": passes,
        "rows": table.num_rows,
        "dead_rows": removed - 1 if dead else 0,
        "concurrency": effective,
        "bank": stats,
    }


def sharing(data: str) -> dict[str, Any]:
    """Where ``to_learner="episodes"`` shares fragments between actors, without Ray: the
    concurrency a prelearner reads from RLlib's config (OfflineData's defaults merged with
    ``map_batches_kwargs``) and whether a batch's rows carry ``t``."""
    from ray.rllib.algorithms.marwil import MARWILConfig

    from offline_prelearner.rllib import RLlibPreLearner, _carries_t

    obs_space, act_space = _spaces("CartPole-v1")
    cls = RLlibPreLearner.configure(to_learner="episodes")
    out: dict[str, Any] = {"concurrency": {}}
    for name, kwargs, learners in [
        ("default", {}, 0),
        ("one", {"concurrency": 1}, 0),
        ("autoscaling", {"concurrency": (1, 4)}, 0),
        ("three_learners", {}, 3),
    ]:
        config = (
            MARWILConfig()
            .environment(observation_space=obs_space, action_space=act_space)
            .learners(num_learners=learners)
            .offline_data(map_batches_kwargs=kwargs)
        )
        out["concurrency"][name] = _prelearner(cls, config, "CartPole-v1").concurrency
    batch = _batches(data)[0]
    read = _prelearner(cls, config, "CartPole-v1").prelearner.config.read
    out["with_t"] = _carries_t(read, batch)
    out["without_t"] = _carries_t(read, {k: v for k, v in batch.items() if k != "t"})
    return out


def contract(folder: str) -> dict[str, Any]:
    """The tests of ``folder`` (tests/rllib_contract) run by RLlib's pytest in this process:
    pytest's exit code, how many passed, and the node ids of those that were skipped or failed
    (with the end of each failure's report); expected failures (xfail) are in none of these."""
    import pytest

    class Tally:
        def __init__(self) -> None:
            self.passed = 0
            self.skipped: list[str] = []
            self.failed: list[str] = []

        def pytest_runtest_logreport(self, report: Any) -> None:
            if hasattr(report, "wasxfail"):  # xfailed or xpassed: pytest's summary, not these
                return
            if report.skipped:
                self.skipped.append(report.nodeid)
            elif report.failed:
                self.failed.append(
                    f"{report.nodeid} ({report.when}):\n{report.longreprtext[-1500:]}"
                )
            elif report.when == "call":
                self.passed += 1

    tally = Tally()
    code = pytest.main(["-q", "-p", "no:cacheprovider", folder], plugins=[tally])
    return {
        "exit": int(code),
        "passed": tally.passed,
        "skipped": tally.skipped,
        "failed": tally.failed,
    }


def remote_learner(data: str, iterations: str) -> dict[str, Any]:
    """BC with both of our classes and one remote Learner (``num_learners=1``): the Learner
    actor receives the held iterator pickled as the dataset and cuts its batches in its own
    process. What each iteration trained, and what the Learner actor's iterator holds."""
    from ray.rllib.algorithms.bc import BCConfig

    from offline_prelearner.rllib import RLlibOfflineData, RLlibPreLearner

    _ray(4)
    obs_space, act_space = _spaces("CartPole-v1")
    config = (
        BCConfig()
        .environment(observation_space=obs_space, action_space=act_space)
        .training(train_batch_size_per_learner=256, lr=1e-2)
        .learners(num_learners=1)
        .offline_data(
            input_=[os.path.abspath(data)],
            dataset_num_iters_per_learner=5,
            map_batches_kwargs={"concurrency": 1},
            prelearner_class=RLlibPreLearner.configure(),
            offline_data_class=RLlibOfflineData,
        )
        .debugging(seed=0)
    )
    algo = config.build_algo()
    trained = [
        int(algo.train()["learners"]["__all_modules__"]["num_env_steps_trained"])
        for _ in range(int(iterations))
    ]

    def iterator(learner: Any) -> tuple[str, list[int], int]:
        held = learner.iterator._iterator
        lists = getattr(held, "_lists", {})
        return type(held).__name__, [len(v) for v in lists.values()], os.getpid()

    remote = [r.get() for r in algo.learner_group.foreach_learner(iterator)]
    algo.stop()
    return {"trained": trained, "remote": remote, "driver_pid": os.getpid()}


CASES = {
    "remote_learner": remote_learner,
    "contract": contract,
    "marwil_exact": marwil_exact,
    "cover": cover,
    "sharing": sharing,
    "bc": bc,
    "marwil_cql": marwil_cql,
    "learner_columns": learner_columns,
    "split_episode": split_episode,
    "packed": packed,
    "minari": minari,
}


def many(cases: str) -> dict[str, Any]:
    """Several cases in this one process (RLlib imported once) and one Ray (4 logical CPUs,
    started once: each start and shutdown costs ~5 s, and its idle workers serve the next case's
    tasks): ``cases`` is a JSON object ``{name: [case, *args]}``; each name maps to
    ``{"result": ...}`` or, where the case raised, ``{"error": its traceback}`` (the others
    still run). The cases share nothing else: each builds its own algorithm, dataset and
    prelearner class (a class of its own, so a fragment bank of its own)."""
    import traceback

    import ray

    _ray(4)
    out: dict[str, Any] = {}
    for name, (case, *args) in json.loads(cases).items():
        try:
            out[name] = {"result": CASES[case](*args)}
        except Exception:
            out[name] = {"error": traceback.format_exc()[-4000:]}
        # What a case's own Ray took down with it: its fragment banks (detached actors, one per
        # prelearner class with to_learner="episodes"). Ray Data's own named actors stay.
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == "offline_prelearner":
                with contextlib.suppress(ValueError):
                    ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]))
    return out


if __name__ == "__main__":
    result = many(sys.argv[2]) if sys.argv[1] == "many" else CASES[sys.argv[1]](*sys.argv[2:])

    def _clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return repr(x)
        return x

    print(RESULT + json.dumps(result, default=_clean), flush=True)
