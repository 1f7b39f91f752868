"""The prelearner contract: what a learner-ready output batch holds, and how a prelearner behaves.

:func:`check_prelearner` runs every check below on a factory of fresh prelearners and one input
batch; :class:`PreLearnerContract` runs them as pytest tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from ..prelearner import OfflinePreLearner
from ..replay.batch import MODULE_ID
from .contract import ContractError, diff_columns, pickle_roundtrip, require
from .examples import example_rows

__all__ = [
    "REQUIRED_COLUMNS",
    "PreLearnerContract",
    "PreLearnerFactory",
    "check_prelearner",
    "check_prelearner_batch_size",
    "check_prelearner_deterministic",
    "check_prelearner_ledger",
    "check_prelearner_output",
    "check_prelearner_pickles",
    "check_prelearner_priorities",
]


#: Columns every learner-ready output batch carries (besides what connectors add).
REQUIRED_COLUMNS = (
    MODULE_ID,
    "eps_id",
    "t",
    "obs",
    "actions",
    "rewards",
    "new_obs",
    "terminateds",
    "truncateds",
    "n_step",
    "weights",
)

PreLearnerFactory = Callable[[], OfflinePreLearner]


def _run(pl: OfflinePreLearner, batch: Any) -> list[dict[str, np.ndarray]]:
    out = pl(batch)
    require(
        not isinstance(out, dict), "__call__ must yield output batches (a generator), not return"
    )
    return list(out)


def _num_rows(batch: Any) -> int:
    if isinstance(batch, pa.Table):
        rows: int = batch.num_rows
        return rows
    require(batch, "the input batch is a dict with no columns: give rows (example_rows())")
    return len(next(iter(batch.values())))


def check_prelearner_output(factory: PreLearnerFactory, batch: Any) -> None:
    """Every output is a dict of numpy columns of one row count, with :data:`REQUIRED_COLUMNS`.

    Args:
        factory: Returns a fresh prelearner on each call (its config fixes the seed).
        batch: One input batch as Ray Data hands it over: an Arrow table or a dict of columns.

    Raises:
        ContractError: No output, or an output that is not such a dict (missing columns, columns
            without a row axis or of different lengths, Python objects other than strings).
    """
    outputs = _run(factory(), batch)
    require(outputs, "the prelearner produced no output for the batch (learning_starts?)")
    for i, out in enumerate(outputs):
        require(isinstance(out, dict), f"output {i} is a {type(out).__name__}, expected a dict")
        missing = [c for c in REQUIRED_COLUMNS if c not in out]
        require(not missing, f"output {i} lacks columns {missing}; has {sorted(out)}")
        rows = {k: len(v) for k, v in out.items() if isinstance(v, np.ndarray) and v.ndim}
        bad = sorted(set(out) - set(rows))
        require(not bad, f"output {i}: columns {bad} are not numpy arrays with a row axis")
        require(len(set(rows.values())) == 1, f"output {i}: columns differ in rows: {rows}")
        kinds = {k: v.dtype for k, v in out.items() if v.dtype.kind == "O" and k != MODULE_ID}
        for k in kinds:  # object columns travel pickled; only strings are acceptable
            require(
                all(isinstance(x, str) for x in out[k]),
                f"output {i}: column {k!r} holds Python objects other than strings",
            )


def check_prelearner_batch_size(factory: PreLearnerFactory, batch: Any) -> None:
    """Each trained module gets ``train_batch_size`` rows per input batch (not with
    ``sample_all``); untrained modules get none.

    Args:
        factory: Returns a fresh prelearner on each call (its config fixes the seed).
        batch: One input batch as Ray Data hands it over: an Arrow table or a dict of columns.

    Raises:
        ContractError: No rows at all, rows of a module outside ``modules_to_train``, or a
            module (one with rows, or any of ``modules_to_train``) whose row count is not
            ``train_batch_size``.
    """
    pl = factory()
    outputs = _run(pl, batch)
    per_module: dict[str, int] = {}
    for out in outputs:
        for m, n in zip(*np.unique(out[MODULE_ID].astype(str), return_counts=True), strict=True):
            per_module[str(m)] = per_module.get(str(m), 0) + int(n)
    require(per_module, "the prelearner produced no rows for the batch")
    wanted = pl.config.modules.modules_to_train
    if wanted is not None:
        extra = sorted(set(per_module) - set(wanted))
        require(not extra, f"modules {extra} are not in modules_to_train {list(wanted)}")
    if not pl.config.sample.sample_all:
        n = pl.config.sample.train_batch_size
        counts = {**dict.fromkeys(map(str, wanted or ()), 0), **per_module}  # 0: no rows at all
        wrong = {m: k for m, k in counts.items() if k != n}
        require(not wrong, f"rows per module should be train_batch_size={n}, found {wrong}")


def check_prelearner_ledger(factory: PreLearnerFactory, batch: Any) -> None:
    """``stats()["ledger"]`` counts every input row: rows_in = kept + rejected + duplicate.

    Args:
        factory: Returns a fresh prelearner on each call (its config fixes the seed).
        batch: One input batch as Ray Data hands it over: an Arrow table or a dict of columns.

    Raises:
        ContractError: ``rows_in`` differs from the batch's row count, the ledger does not
            balance, or ``batch`` is a dict with no columns (no row count to hold it to).
    """
    pl = factory()
    _run(pl, batch)
    led = pl.stats()["ledger"]
    n = _num_rows(batch)
    require(led["rows_in"] == n, f"ledger rows_in is {led['rows_in']}, the batch has {n} rows")
    accounted = led["rows_kept"] + sum(led["rows_rejected"].values()) + led["rows_duplicate"]
    require(
        accounted == led["rows_in"],
        f"ledger does not balance: rows_in {led['rows_in']} != kept {led['rows_kept']} + "
        f"rejected {dict(led['rows_rejected'])} + duplicate {led['rows_duplicate']}",
    )


def check_prelearner_deterministic(factory: PreLearnerFactory, batch: Any) -> None:
    """Two fresh prelearners (a fixed seed) give identical outputs, batch after batch.

    Args:
        factory: Returns a fresh prelearner on each call; its ``config.seed`` must be set.
        batch: One input batch (an Arrow table or a dict of columns), fed twice to each.

    Raises:
        ContractError: ``config.seed`` is None, or the two give different numbers of outputs or
            columns that differ (bytes, dtype or shape).
    """
    a, b = factory(), factory()
    require(a.config.seed is not None, "config.seed is None: set a seed for reproducible runs")
    for step in range(2):
        out_a, out_b = _run(a, batch), _run(b, batch)
        require(len(out_a) == len(out_b), f"call {step}: {len(out_a)} vs {len(out_b)} outputs")
        for i, (x, y) in enumerate(zip(out_a, out_b, strict=True)):
            diff = diff_columns(x, y)
            require(not diff, f"call {step}, output {i}: columns {diff} differ between runs")


def check_prelearner_pickles(factory: PreLearnerFactory, batch: Any) -> None:
    """What Ray ships to its workers -- the class (by reference) and ``config`` -- pickles, and
    ``cls(config=...)`` rebuilt from them behaves like the factory's instance.

    Args:
        factory: Returns a fresh prelearner on each call (its config fixes the seed).
        batch: One input batch as Ray Data hands it over: an Arrow table or a dict of columns.

    Raises:
        ContractError: The class or its config does not pickle, the class unpickles as another,
            ``cls(config=...)`` fails, or the rebuilt prelearner's outputs differ (in number
            or in columns).
    """
    pl = factory()
    cls = type(pl)
    try:
        cls2 = pickle_roundtrip(cls)
        config = pickle_roundtrip(pl.config)
    except Exception as e:
        raise ContractError(
            f"{cls.__qualname__} or its config does not pickle ({type(e).__name__}: {e}); Ray "
            f"workers import the class by name: define it at module level of an importable module"
        ) from None
    require(cls2 is cls, f"{cls.__qualname__} unpickles as another class {cls2!r}")
    try:
        rebuilt = cls2(config=config)
    except Exception as e:
        raise ContractError(
            f"{cls.__qualname__}(config=...) fails ({type(e).__name__}: {e}); Ray builds the "
            f"prelearner from the config alone (fn_constructor_kwargs)"
        ) from None
    out_a, out_b = _run(pl, batch), _run(rebuilt, batch)
    require(
        len(out_a) == len(out_b),
        f"the rebuilt prelearner gives {len(out_b)} outputs, the factory's {len(out_a)}: "
        "everything that shapes the output must be in the config (Ray rebuilds from it alone)",
    )
    for i, (x, y) in enumerate(zip(out_a, out_b, strict=True)):
        diff = diff_columns(x, y)
        require(not diff, f"output {i}: columns {diff} differ after rebuilding from the pickle")


def check_prelearner_priorities(factory: PreLearnerFactory, batch: Any) -> bool:
    """With an updatable (prioritized) sampler, ``update_priorities`` takes the ``indices`` of a
    sample and applies them. Returns False (nothing checked) for other samplers.

    Args:
        factory: Returns a fresh prelearner on each call (its config fixes the seed).
        batch: One input batch as Ray Data hands it over: an Arrow table or a dict of columns.

    Returns:
        True when at least one buffer's sampler takes priorities (and the check ran), else
        False.

    Raises:
        ContractError: An output lacks ``indices``, ``update_priorities`` applied none (or more
            than it was given) of a module's fresh handles, or no output follows the update.
    """
    pl = factory()
    outputs = _run(pl, batch)
    updatable = {m for m, b in pl.buffers.items() if hasattr(b.sampler, "update_priorities")}
    if not updatable:
        return False
    for out in outputs:
        for m in sorted(set(out[MODULE_ID].astype(str)) & updatable):
            sel = out[MODULE_ID].astype(str) == m
            require("indices" in out, "output has no 'indices' column to send priorities back")
            idx = out["indices"][sel]
            td = np.linspace(0.1, 2.0, len(idx))
            applied = pl.update_priorities(idx, td, module_id=m)
            require(
                isinstance(applied, int) and 1 <= applied <= len(idx),
                f"update_priorities for {m!r} applied {applied!r} of {len(idx)} fresh handles",
            )
    again = _run(pl, batch)
    require(again, "no output after update_priorities")
    return True


def check_prelearner(factory: PreLearnerFactory, batch: Any) -> list[str]:
    """Runs every prelearner check; returns the names of those that applied.

    Args:
        factory: Returns a fresh prelearner on each call (its config fixes the seed).
        batch: One input batch as Ray Data hands it over: an Arrow table or a dict of columns.

    Returns:
        The names of the checks that ran, in order (``check_prelearner_priorities`` only
        where a sampler takes priorities).

    Raises:
        ContractError: The first check that fails, with its message.
    """
    done = []
    for fn in (
        check_prelearner_output,
        check_prelearner_batch_size,
        check_prelearner_ledger,
        check_prelearner_deterministic,
        check_prelearner_pickles,
    ):
        fn(factory, batch)
        done.append(fn.__name__)
    if check_prelearner_priorities(factory, batch):
        done.append("check_prelearner_priorities")
    return done


class PreLearnerContract:
    """pytest mixin: override :meth:`make_prelearner` (and :meth:`make_batch` for your data)."""

    def make_prelearner(self) -> OfflinePreLearner:
        """A fresh prelearner with a fixed seed."""
        raise NotImplementedError("override make_prelearner() to return your prelearner")

    def make_batch(self) -> Any:
        """One input batch as Ray Data hands it over (an Arrow table or a dict of arrays)."""
        return example_rows()

    def test_output_columns(self) -> None:
        """Runs :func:`check_prelearner_output`."""
        check_prelearner_output(self.make_prelearner, self.make_batch())

    def test_rows_per_module(self) -> None:
        """Runs :func:`check_prelearner_batch_size`."""
        check_prelearner_batch_size(self.make_prelearner, self.make_batch())

    def test_ledger_balances(self) -> None:
        """Runs :func:`check_prelearner_ledger`."""
        check_prelearner_ledger(self.make_prelearner, self.make_batch())

    def test_deterministic_with_seed(self) -> None:
        """Runs :func:`check_prelearner_deterministic`."""
        check_prelearner_deterministic(self.make_prelearner, self.make_batch())

    def test_pickles_for_ray(self) -> None:
        """Runs :func:`check_prelearner_pickles`."""
        check_prelearner_pickles(self.make_prelearner, self.make_batch())

    def test_update_priorities(self) -> None:
        """Runs :func:`check_prelearner_priorities`; skipped where nothing takes priorities."""
        if not check_prelearner_priorities(self.make_prelearner, self.make_batch()):
            import pytest

            pytest.skip("no prioritized buffer: nothing takes priorities")
