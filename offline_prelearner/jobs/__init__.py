"""Jobs: what the command line runs, and the Ray wiring under it, in three rooms.

* :mod:`.session` -- the Ray session: start or join, mute, check the cluster, signals, shut down;
* :mod:`.batch` -- the batch job: plan units of work, run them on an engine, commit;
* :mod:`.stream` -- the learner stream: prelearner actors, train batches, splits (and Ape-X);
* :mod:`.convert` -- every format to every format, resumable by unit.

Shared by them: :mod:`.preflight` (what every job does first: files, format, spaces, the
prelearner class), :mod:`.ownership` (a job's claim on ``--out``: its lock, its id),
:mod:`.commit` (stage, verify, move into place, write the manifest last; the batch job and
``convert`` commit the same way), :mod:`.file_batches` (Parquet read in batches, by the
batch job's units, the stream's actors and ``convert``), :mod:`.dataset_info` (a dataset's
spaces and ids, for preflight and ``convert``). Two jobs stand alone: :mod:`.inspection` (read,
check and count a dataset without writing it) and :mod:`.record` (record a gymnasium env).

The command line that drives them is :mod:`offline_prelearner.cli`.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Modules reachable as attributes of ``jobs`` (``from offline_prelearner.jobs import
#: batch_job``), as before the jobs were grouped in rooms: the public API names them as the
#: modules defining ``run_pipeline``, ``iter_learner_batches`` and ``feed_shards``.
_MOVED = {
    "batch_job": ".batch.batch_job",
    "learner_stream": ".stream.learner_stream",
    "apex": ".stream.apex",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return importlib.import_module(_MOVED[name], __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
