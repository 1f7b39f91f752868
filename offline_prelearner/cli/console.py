"""What a job shows while it runs: a progress bar on a terminal, a line every few seconds in a pipe.

::

    process  62%|██████▎   | 620k/1.00M rows [00:02<00:01, 301k rows/s, samples=620k]

The bar is tqdm's (rows read of rows total from the Parquet footers, rate, ETA); in a pipe or a
log file, where a redrawn bar is noise, a plain line is written every ``interval`` seconds and
once at the end. Everything goes to stderr: stdout carries only the summary.
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

__all__ = ["JobProgress"]


class JobProgress:
    """A ``progress(rows_done, rows_total, samples)`` callback for :func:`run_pipeline`.

    Args:
        label: Shown before the bar (the subcommand).
        stream: Where to draw (stderr).
        interval: Seconds between lines when ``stream`` is not a terminal.
        enabled: False draws nothing (``--json`` runs, tests).
    """

    def __init__(
        self, label: str, stream: IO[str] | None = None, interval: float = 5.0, enabled: bool = True
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar: Any = None
        self.start = time.monotonic()
        self.last_line = self.start
        self.rows = 0

    def __call__(self, rows: int, total: int | None, samples: int) -> None:
        """Reports progress: redraws the bar on a terminal, else writes one line every ``interval``
        seconds; nothing when disabled."""
        if not self.enabled:
            return
        if self.tty:
            self._draw(rows, total, samples)
        else:
            now = time.monotonic()
            if now - self.last_line >= self.interval:
                self.last_line = now
                self._line(rows, total, samples, now)
        self.rows = rows

    def _draw(self, rows: int, total: int | None, samples: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            width = _columns(self.stream)
            self.bar = tqdm(
                total=total,
                desc=self.label,
                unit=" rows",
                unit_scale=True,
                file=self.stream,
                dynamic_ncols=width is None,
                ncols=width,
                leave=False,
            )
        self.bar.update(rows - self.rows)
        self.bar.set_postfix_str(f"samples={samples:,}", refresh=False)

    def _line(self, rows: int, total: int | None, samples: int, now: float) -> None:
        seconds = max(now - self.start, 1e-9)
        of = f" of {total:,}" if total else ""
        pct = f" ({100 * rows / total:.0f}%)" if total else ""
        self.stream.write(
            f"{self.label}: {rows:,}{of} rows{pct}, {rows / seconds:,.0f} rows/s, "
            f"{samples:,} samples, {seconds:.0f} s\n"
        )
        self.stream.flush()

    def close(self) -> None:
        """Removes the bar (the summary follows)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _columns(stream: IO[str]) -> int | None:
    """None when the terminal reports its width (tqdm follows it), else 100: a terminal of
    unknown size (a bare pseudo-terminal) reports 0 columns, and tqdm would draw nothing."""
    try:
        return None if os.get_terminal_size(stream.fileno()).columns > 0 else 100
    except (OSError, ValueError, AttributeError):
        return 100
