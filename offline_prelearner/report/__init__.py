"""``offline-prelearner report``: one HTML page to read before training on a dataset.

``report(path, out)`` reads the dataset as ``inspect`` does, gathers streaming statistics over
the kept episodes and writes a self-contained page (Vega-Lite charts rendered by vega-embed,
the JavaScript inlined: it opens offline). The modules, one idea each: :mod:`.stats` (streaming
accumulators), :mod:`.collect` (episodes -> accumulators), :mod:`.anomalies` (the words at the
top), :mod:`.charts` (Vega-Lite specs), :mod:`.sections` (which charts), :mod:`.frames` (image
observations as PNG), :mod:`.page` (the HTML and its contract), :mod:`.build` (the whole).
"""

from .build import REPORT_EXTRA, ReportResult, report

__all__ = ["REPORT_EXTRA", "ReportResult", "report"]
