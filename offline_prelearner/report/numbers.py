"""Numbers as a person reads them: rounded, with thousands separators.

The page shows every number through :func:`human` (``22.52``, ``7,971``, never
``22.52252252252252``); the charts' data go through :func:`round_sig` and :func:`round_to_step`,
so a tooltip shows what a person would write down. Exact values stay where a program reads them
(``data-value`` in the summary, :class:`~offline_prelearner.report.ReportResult`).
"""

from __future__ import annotations

import math

__all__ = ["SIGNIFICANT", "human", "round_sig", "round_to_step"]

#: Significant digits shown of a float.
SIGNIFICANT = 4


def round_sig(x: float, digits: int = SIGNIFICANT) -> float:
    """``x`` rounded to ``digits`` significant digits (NaN, inf and 0 as they are).

    Args:
        x: The number.
        digits: Significant digits kept, at least 1.

    Returns:
        The rounded float.
    """
    if not math.isfinite(x) or x == 0:
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def round_to_step(x: float, step: float) -> float:
    """``x`` with the decimals that tell apart values ``step`` apart (a tenth of ``step`` kept):
    bin edges keep their order and stay distinct.

    Args:
        x: The number.
        step: The spacing of the values ``x`` belongs to (a bin's width); not positive or not
            finite: :func:`round_sig`.

    Returns:
        The rounded float.
    """
    if not (math.isfinite(step) and step > 0) or not math.isfinite(x):
        return round_sig(x)
    decimals = max(0, 1 - math.floor(math.log10(step)))
    return round(x, decimals)


def human(x: object) -> str:
    """A value as the page writes it.

    Integers get thousands separators (``7,971``); a float is written with
    :data:`SIGNIFICANT` significant digits (``22.52``, ``0.6667``), without an exponent from
    1e-4 to 1e15 (``12,346`` for 12345.6), integral floats as integers (``4``); NaN and inf as
    ``NaN``, ``inf``, ``-inf``; None as ``-``; booleans as ``yes`` / ``no``; anything else as
    ``str`` gives it.

    Args:
        x: The value.

    Returns:
        The text.
    """
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        a = abs(x)
        if a >= 1e15 or (0 < a < 1e-4):
            return f"{x:.{SIGNIFICANT - 1}e}"
        if a >= 10 ** (SIGNIFICANT - 1) or x == int(x):
            return f"{round(x):,}"
        return f"{round_sig(x):g}"
    return str(x)
