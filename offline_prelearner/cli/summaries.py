"""What ``process``, ``convert`` and ``report`` print on stdout for a person: a few lines.

``--json`` prints the whole summary instead, on one line, for scripts. A ``process`` run::

    222 episodes, 5,000 rows -> 5,000 samples in out/cartpole (0.4 s); every row accounted for
    details: out/cartpole/stats.json (or run with --json)

The ledger's promise is said in words: "every row accounted for" where rows read = kept +
rejected + duplicate; where it does not balance, the line says so and where to look.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["convert_lines", "process_lines", "report_lines"]


def _n(count: int, noun: str) -> str:
    """``1 episode`` / ``5,000 episodes``."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"


def _reasons(counts: Mapping[str, int]) -> str:
    """``{"nan": 3, "out_of_space": 1}`` -> ``nan 3, out_of_space 1``."""
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))


def _ledger(balanced: bool, rejected: Mapping[str, int], duplicate: int, where: str) -> list[str]:
    """The accounting said in words: what was refused, and whether every row is accounted for."""
    lines = []
    if rejected:
        lines.append(f"rejected {_n(sum(rejected.values()), 'row')} ({_reasons(rejected)})")
    if duplicate:
        lines.append(f"dropped {_n(duplicate, 'duplicate row')} (episodes seen before)")
    if not balanced:
        lines.append(f"rows NOT accounted for: rows read != kept + rejected + duplicate ({where})")
    return lines


def process_lines(stats: Mapping[str, Any], out: str) -> list[str]:
    """The human summary of a ``process`` run (at most 5 lines).

    Args:
        stats: The job's stats (:meth:`~offline_prelearner.jobs.records.JobStats.to_dict`, what
            ``stats.json`` holds).
        out: The output folder as the user gave it.

    Returns:
        The lines, without newlines.
    """
    accounted = "every row accounted for" if stats["rows_balance"] else "see below"
    head = (
        f"{_n(stats['episodes_kept'], 'episode')}, {_n(stats['rows_in'], 'row')} -> "
        f"{_n(stats['samples_written'], 'sample')} in {out} ({stats['wall_seconds']:.1f} s); "
        f"{accounted}"
    )
    lines = [head]
    lines += _ledger(
        bool(stats["rows_balance"]),
        stats.get("rows_rejected") or {},
        int(stats.get("rows_duplicate") or 0),
        f"{out}/stats.json",
    )
    reused = int(stats.get("units_reused") or 0)
    if reused:
        lines.append(f"resumed: {reused:,} of {stats['units']:,} units reused from the last run")
    lines.append(f"details: {out}/stats.json (or run with --json)")
    return lines[:5]


def convert_lines(stats: Mapping[str, Any], out: str) -> list[str]:
    """The human summary of a ``convert`` run (at most 5 lines).

    Args:
        stats: The job's stats (what ``stats.json`` holds).
        out: The output folder as the user gave it.

    Returns:
        The lines, without newlines.
    """
    balanced = bool(stats["balanced"])
    rows_in = int(stats["rows_in"])
    written = int(stats.get("rows_out", rows_in))
    episodes = stats.get("episodes_written")  # a rows -> rows relayout builds no episodes
    what = f"{_n(int(episodes), 'episode')}, " if episodes is not None else ""
    layout = f", layout {stats['layout']}" if stats.get("layout") else ""
    head = (
        f"{what}{_n(rows_in, 'row')} -> {written:,} written as {stats['to']} "
        f"({_n(len(stats['files_written']), 'file')}{layout}) in {out} "
        f"({stats['seconds']:.1f} s); {'every row accounted for' if balanced else 'see below'}"
    )
    lines = [head]
    lines += _ledger(
        balanced,
        stats.get("rows_rejected") or {},
        int(stats.get("rows_duplicate") or 0),
        f"{out}/stats.json",
    )
    if stats.get("quarantine_file"):
        lines.append(f"quarantined rows: {stats['quarantine_file']}")
    lines.append(f"details: {out}/stats.json (or run with --json)")
    return lines[:5]


def report_lines(done: Mapping[str, Any]) -> list[str]:
    """The human summary of a ``report`` run (one or two lines).

    Args:
        done: What ``report --json`` prints of the run (``out``, ``episodes``, ``charts``,
            ``anomalies``, ``pngs``, ``seconds``).

    Returns:
        The lines, without newlines.
    """
    lines = [
        f"wrote {done['out']} ({_n(done['episodes'], 'episode')}, "
        f"{_n(len(done['charts']), 'chart')}, {_n(len(done['anomalies']), 'anomaly')}) in "
        f"{done['seconds']:.1f} s"
        + (f"; {len(done['pngs'])} PNGs in {done['png_dir']}" if done.get("png_dir") else "")
    ]
    if done["anomalies"]:
        lines.append(f"first anomaly: {done['anomalies'][0]}")
    return lines
