"""The order of an epoch of the learner stream, and a learner's place in it (no Ray here).

An epoch is every sample of the dataset once (``sample.sample_all``), in an order that is a
function of ``(seed, epoch)`` alone, whatever the number of Ray actors or learners:

1. The **shards** are the batch job's units (:func:`~..batch.plan.plan_units`): each owns whole
   episodes, so its samples depend on no other unit (its prelearner is seeded by the unit's
   index, :func:`~..batch.run.unit_seed`, so they are the same in every epoch).
2. Epoch ``e`` permutes the units with a generator seeded by ``(seed, e)``
   (:meth:`EpochOrder.build`); consecutive shuffled units form **windows** of at most
   ``shuffle_rows`` input rows (a unit larger than that is a window of its own): the window is
   the shuffle buffer, and what bounds a window task's memory.
3. The samples of window ``w`` (its units' outputs, in order) are permuted by ``(seed, e, w)``
   (:meth:`EpochOrder.permutation`); the epoch's sample sequence is the windows one after the
   other, cut into train batches of ``sample.train_batch_size`` (only the epoch's last batch may
   be shorter).
4. With ``R`` learners, learner ``r`` takes the global batches ``P0 + r, P0 + r + R, ...`` from
   the position ``P0`` it started at (0 for a fresh epoch): which learner trains on what is
   arithmetic, not timing.

A learner's place is a :class:`StreamState`: the group's position ``batches`` (every global batch
before it taken, none after, when the learners have all taken the same number, as at a
data-parallel checkpoint step) and a hint, ``(window, skip)``: batch ``batches`` starts ``skip``
samples into window ``window``, so a resume re-reads that window and none before it. The hint is
what :class:`Cursor` knows from the windows it has seen; resuming from it needs no count of the
samples of earlier windows.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config import PreLearnerConfig, check_int
from ...errors import ConfigError
from ..batch.plan import Plan

__all__ = ["Cursor", "EpochOrder", "StreamState", "plan_fingerprint", "unit_rows"]

#: The version of :meth:`StreamState.to_dict`'s layout; a state of another version is refused.
STATE_VERSION = 1
#: Domain tags of the generators' seeds (a unit order and a window's permutation never share one).
_UNITS, _WINDOW = 0, 1


def unit_rows(plan: Plan, default: int) -> list[int]:
    """About how many input rows each unit of ``plan`` reads (what sizes the windows).

    Args:
        plan: The plan; a part read whole counts its file's rows from the footer, a look-ahead
            its ``stop`` (an upper bound), a part that drops episodes its whole file.
        default: The rows of a part whose file has no footer count (JSON lines).

    Returns:
        One count per unit, in unit order; the same for the same plan, which is all the order
        needs.
    """
    out = []
    for unit in plan.units:
        n = 0
        for part in unit.parts:
            rows = plan.files[part.file].rows
            n += part.stop if part.stop is not None else (default if rows is None else rows)
        out.append(n)
    return out


@dataclass(frozen=True)
class EpochOrder:
    """The windows of one epoch: unit indices, shuffled by ``(seed, epoch)``, grouped.

    Attributes:
        seed: The stream's seed.
        epoch: The epoch (0, 1, ...).
        windows: Per window, the indices of its units, in the order their samples are joined.
    """

    seed: int
    epoch: int
    windows: tuple[tuple[int, ...], ...]

    @classmethod
    def build(cls, rows: Sequence[int], seed: int, epoch: int, shuffle_rows: int) -> EpochOrder:
        """The order of epoch ``epoch``.

        Args:
            rows: Input rows per unit (:func:`unit_rows`); the number of units is its length.
            seed: The stream's seed, 0 or more.
            epoch: The epoch, 0 or more.
            shuffle_rows: A window holds consecutive shuffled units up to this many rows; a
                unit larger than that is a window alone.

        Returns:
            The order; units of zero rows are still placed (their samples, if any, count).
        """
        check_int("seed", seed, 0, 2**63 - 1)
        check_int("epoch", epoch, 0, 2**31 - 1)
        check_int("shuffle_rows", shuffle_rows, 1, 2**62)
        units = np.random.default_rng([seed, epoch, _UNITS]).permutation(len(rows))
        windows: list[tuple[int, ...]] = []
        held: list[int] = []
        held_rows = 0
        for u in units.tolist():
            if held and held_rows + rows[u] > shuffle_rows:
                windows.append(tuple(held))
                held, held_rows = [], 0
            held.append(u)
            held_rows += rows[u]
        if held:
            windows.append(tuple(held))
        return cls(seed, epoch, tuple(windows))

    def permutation(self, window: int, samples: int) -> np.ndarray:
        """The order of window ``window``'s samples: ``out[i]`` is the index, in the window's
        joined unit outputs, of the ``i``-th sample the window hands on.

        Args:
            window: The window's index in :attr:`windows`.
            samples: How many samples its units produced.

        Returns:
            A permutation of ``range(samples)`` (int64), a function of (seed, epoch, window).
        """
        rng = np.random.default_rng([self.seed, self.epoch, _WINDOW, window])
        return rng.permutation(samples)


def plan_fingerprint(plan: Plan, config: PreLearnerConfig, shuffle_rows: int, name: str) -> str:
    """What a stream's order is computed from, as 16 hex digits: a state saved by one stream is
    loaded only by a stream of the same fingerprint.

    The files (paths relative to their common folder, so a dataset copied elsewhere whole keeps
    its fingerprint; sizes and footer rows, not times), the units' parts, the config less its
    ``ray`` section (the number of actors, CPUs and blocks change nothing; ``ray.batch_size``,
    which cuts a unit's input, does), ``shuffle_rows`` and the prelearner class's name.

    Args:
        plan: The stream's plan.
        config: The stream's resolved config.
        shuffle_rows: The stream's window size.
        name: The prelearner class, ``module:qualname``.

    Returns:
        The fingerprint.
    """
    paths = [f.path for f in plan.files]
    root = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
    settings = config.to_dict()
    settings.pop("ray", None)
    h = hashlib.sha256()
    h.update(
        json.dumps([settings, config.ray.batch_size, shuffle_rows, name], default=str).encode()
    )
    for f in plan.files:
        h.update(json.dumps([os.path.relpath(f.path, root), f.size, f.rows]).encode())
    for unit in plan.units:
        h.update(json.dumps([[p.file, p.stop, p.keep, list(p.drop)] for p in unit.parts]).encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class StreamState:
    """A learner's place in the epoch stream, as it checkpoints it with its model.

    Attributes:
        fingerprint: The stream's :func:`plan_fingerprint`; another stream refuses the state.
        seed: The stream's seed.
        epoch: The epoch it is in.
        batches: The group's position: global batches ``[0, batches)`` were taken.
        window: Batch ``batches`` starts in this window or a later one
            (``len(windows)``: past the end).
        skip: ... ``skip`` samples after the start of ``window`` (it may run into later
            windows where the learner had not seen them).
    """

    fingerprint: str
    seed: int
    epoch: int
    batches: int = 0
    window: int = 0
    skip: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The state as a small JSON-able dict (``version`` first)."""
        return {
            "version": STATE_VERSION,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "epoch": self.epoch,
            "batches": self.batches,
            "window": self.window,
            "skip": self.skip,
        }

    @classmethod
    def from_dict(cls, d: Any, fingerprint: str, seed: int) -> StreamState:
        """The state in ``d``, checked against the stream that loads it.

        Args:
            d: What :meth:`to_dict` wrote (after a JSON round trip).
            fingerprint: The loading stream's fingerprint.
            seed: The loading stream's seed.

        Returns:
            The state.

        Raises:
            ConfigError: ``d`` is not such a dict, is of another version, or names another
                fingerprint or seed (one line, naming both).
        """
        keys = ("version", "fingerprint", "seed", "epoch", "batches", "window", "skip")
        if not isinstance(d, dict) or sorted(d) != sorted(keys):
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ConfigError(f"a learner stream state is a dict with keys {list(keys)}; got {got}")
        if d["version"] != STATE_VERSION:
            raise ConfigError(
                f"learner stream state version {d['version']!r}; this version reads {STATE_VERSION}"
            )
        if d["fingerprint"] != fingerprint:
            raise ConfigError(
                f"this learner stream state belongs to another dataset or config (fingerprint "
                f"{d['fingerprint']!r}; this stream's is {fingerprint!r}): same files, config, "
                "prelearner and shuffle_rows are needed to resume"
            )
        if d["seed"] != seed:
            raise ConfigError(
                f"this learner stream state has seed {d['seed']!r}; this stream's is {seed}"
            )
        for k in ("epoch", "batches", "window", "skip"):
            check_int(f"state[{k!r}]", d[k], 0, 2**62)
        return cls(fingerprint, seed, d["epoch"], d["batches"], d["window"], d["skip"])


class Cursor:
    """Cuts one learner's train batches out of the epoch's windows, from a :class:`StreamState`,
    and knows the state after the batches it has handed out.

    Args:
        start: Where to start: the windows fed to :meth:`batches` begin at ``start.window``.
        rows: Samples per train batch (``sample.train_batch_size``).
        num_learners: Learners sharing the global batches (``R``).
        rank: This learner (``r``, ``0 <= r < R``): it takes ``start.batches + r + k*R``.
        num_windows: Windows in the epoch (for the state once every window was seen).
    """

    def __init__(
        self, start: StreamState, rows: int, num_learners: int, rank: int, num_windows: int
    ) -> None:
        self.start = start
        self.rows = rows
        self.num_learners = num_learners
        self.rank = rank
        self.num_windows = num_windows
        self.taken = 0  # batches handed to this learner
        # (window, where it starts, in samples after the start of ``start.window``)
        self.seen: list[tuple[int, int]] = [(start.window, 0)]

    def state(self) -> StreamState:
        """The state after the batches handed out so far (see the module docstring).

        Returns:
            ``batches`` = the start's plus ``taken * num_learners``; the hint from the last
            window seen that starts at or before that batch.
        """
        s = self.start
        batches = s.batches + self.taken * self.num_learners
        at = s.skip + (batches - s.batches) * self.rows
        k = bisect.bisect_right([x for _, x in self.seen], at) - 1
        window, begins = self.seen[k]
        return StreamState(s.fingerprint, s.seed, s.epoch, batches, window, at - begins)

    def batches(
        self, blocks: Iterable[tuple[np.ndarray, dict[str, np.ndarray]]]
    ) -> Iterator[dict[str, np.ndarray]]:
        """This learner's train batches.

        Args:
            blocks: ``(windows, columns)`` in stream order from ``start.window`` on: each
                sample's window index (non-decreasing) and the samples' columns.

        Yields:
            Dicts of columns, ``rows`` samples each but the epoch's last; the batch counts as
            taken (in :meth:`state`) once it is handed out.
        """
        drop = self.start.skip
        b = self.start.batches  # the global batch being filled
        held: list[dict[str, np.ndarray]] = []
        n_held = 0
        at = 0  # samples seen, from the start of start.window
        for windows, cols in blocks:
            n = len(windows)
            if n:
                firsts = np.flatnonzero(np.diff(windows, prepend=self.seen[-1][0]))
                self.seen += [(int(windows[i]), at + int(i)) for i in firsts]
            at += n
            i = min(drop, n)
            drop -= i
            while i < n:
                take = min(self.rows - n_held, n - i)
                mine = (b - self.start.batches) % self.num_learners == self.rank
                if mine:
                    held.append({k: v[i : i + take] for k, v in cols.items()})
                n_held += take
                i += take
                if n_held == self.rows:
                    if mine:
                        self.taken += 1
                        yield _joined(held)
                    b, held, n_held = b + 1, [], 0
        self.seen.append((self.num_windows, at))
        if n_held and (b - self.start.batches) % self.num_learners == self.rank:
            self.taken += 1
            yield _joined(held)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One batch from its pieces (a view where it lies in one block)."""
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
