"""Sample-to-insert rate limiting: at most so many sampled rows per inserted timestep.

::

    buf = EpisodeReplayBuffer(100_000, rate_limit=SampleToInsertRatio(8.0), learning_starts=1000)
    buf.add(episodes)
    try:
        batch = buf.sample(256)
    except RateLimitExceeded as e:      # an EmptyBufferError: "collect more, then sample again"
        ...                             # e.missing says how many more timesteps to insert

The idea is Reverb's ``SampleToInsertRatio``, without its blocking (a buffer here lives in one
thread of one process, so waiting would wait forever). The rule, checked before each sample::

    samples_drawn + batch_rows
        <= max_samples_per_insert * (timesteps_added - learning_starts) + burst

* ``samples_drawn`` counts rows handed out (a sequence counts once, however long); a call that
  would cross the line **raises** :class:`RateLimitExceeded` and draws nothing -- it never hands
  out a smaller batch, so batch shapes stay fixed and the caller decides what to do.
* ``timesteps_added`` counts timesteps stored (duplicates, and episodes a reservoir rejected, earn
  nothing). Timesteps before ``learning_starts`` earn no credit, as in Reverb, where the credit
  starts at ``min_size_to_sample``: otherwise the first sample after the warm-up could draw
  ``ratio * learning_starts`` rows in a burst.
* ``burst`` is extra allowance (Reverb's ``error_buffer``, one-sided): rows that may be drawn
  ahead of the inserts.

Only the sampling side is limited; inserts are never refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import MAX_STEPS, check_float, check_int
from ..errors import RateLimitExceeded

__all__ = ["RateLimitExceeded", "SampleToInsertRatio"]


@dataclass(frozen=True)
class SampleToInsertRatio:
    """At most ``max_samples_per_insert`` sampled rows per inserted timestep (plus ``burst``).

    Args:
        max_samples_per_insert: A positive, finite number (e.g. 0.25: one row per four steps;
            8.0: eight rows per step).
        burst: Rows that may be drawn beyond the ratio (an int >= 0).
    """

    max_samples_per_insert: float
    burst: int = 0

    def __post_init__(self) -> None:
        r, b = (
            v.item() if isinstance(v, np.generic) else v
            for v in (self.max_samples_per_insert, self.burst)
        )
        r = check_float("max_samples_per_insert", r, 0.0, 1e12, lo_open=True)
        object.__setattr__(self, "max_samples_per_insert", float(r))
        object.__setattr__(self, "burst", check_int("burst", b, 0, MAX_STEPS))

    def allowed(self, samples_drawn: int, timesteps_added: int, learning_starts: int) -> int:
        """Rows that may still be drawn (never negative).

        Args:
            samples_drawn: Rows handed out so far.
            timesteps_added: Timesteps stored so far.
            learning_starts: Timesteps that earn no credit (the warm-up).

        Returns:
            ``floor(ratio * max(0, added - learning_starts) + burst) - drawn``, at least 0.
        """
        credit = max(0, timesteps_added - learning_starts) * self.max_samples_per_insert
        return max(0, math.floor(credit + self.burst + 1e-9) - samples_drawn)

    def check(
        self, rows: int, samples_drawn: int, timesteps_added: int, learning_starts: int
    ) -> None:
        """Raises :class:`RateLimitExceeded` unless ``rows`` more rows are allowed.

        Args:
            rows: Rows the next sample would draw.
            samples_drawn: Rows handed out so far.
            timesteps_added: Timesteps stored so far.
            learning_starts: Timesteps that earn no credit (the warm-up).

        Raises:
            RateLimitExceeded: the rows would cross the line; ``allowed`` and ``missing`` (the
                timesteps to add first) are on the error.
        """
        allowed = self.allowed(samples_drawn, timesteps_added, learning_starts)
        if rows <= allowed:
            return
        # Smallest number of further timesteps whose credit covers the request.
        need = samples_drawn + rows - self.burst
        steps = max(0, math.ceil(need / self.max_samples_per_insert - 1e-9))
        missing = max(1, learning_starts + steps - timesteps_added)
        raise RateLimitExceeded(
            f"sampling {rows} rows would exceed max_samples_per_insert="
            f"{self.max_samples_per_insert:g} (burst {self.burst}): {timesteps_added} timesteps "
            f"added (learning_starts={learning_starts}) allow {allowed} more rows after the "
            f"{samples_drawn} drawn; add about {missing} timesteps first",
            allowed=allowed,
            missing=missing,
        )
