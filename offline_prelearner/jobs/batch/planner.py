"""How the batch job plans: which scanner reads its inputs, then :func:`~.plan.plan_scans`.

* A folder whose dataset index (:mod:`.index`) is valid plans from that one file: each entry is
  checked against the listing (size and mtime); files changed, added since, or whose footer the
  index cannot vouch for under the job's ``read.limits`` are scanned afresh, and one line on
  stderr says how many.
* Otherwise every file is scanned (:mod:`.scan`): as Ray tasks over the cluster's nodes when the
  job runs on Ray, else by threads on this process.

Whichever way, the plan and the content fingerprints are the ones a serial scan gives.
"""

from __future__ import annotations

import os

from ...config import PreLearnerConfig
from ...io.sources import check_formats_of
from ...io.stores import is_remote
from ..commit import input_fingerprint
from .index import scans_from_index
from .plan import Plan, plan_scans
from .scan import RayScanner, Scanner, ScanSpec, ThreadScanner

__all__ = ["plan_job", "plans_on_ray"]


def plans_on_ray(engine: str, config: PreLearnerConfig) -> bool:
    """Whether the job's files are scanned by Ray tasks: the engine is ``ray``, or ``auto`` with
    a cluster named (``ray.address`` or ``RAY_ADDRESS``); ``auto`` without one chooses its
    engine from the plan (the input's size), so it plans on this process.

    Args:
        engine: The engine the caller asked for.
        config: The job's config (``ray.address``).

    Returns:
        True where planning runs on Ray.
    """
    if engine == "ray":
        return True
    return engine == "auto" and bool(config.ray.address or os.environ.get("RAY_ADDRESS"))


def plan_job(
    path: str | os.PathLike[str] | list[str],
    files: list[str],
    config: PreLearnerConfig,
    scanner: Scanner | None = None,
    *,
    check_formats: bool = False,
) -> tuple[Plan, tuple[str, ...]]:
    """The job's plan and each file's content fingerprint.

    Args:
        path: The input as the job was given it (a folder may carry a dataset index).
        files: Its data files, in name order (:func:`~offline_prelearner.io.sources.expand_paths`).
        config: The job's config.
        scanner: What scans files that no valid index entry covers (None: threads here).
        check_formats: Refuse a mix of formats from the scans' footers
            (:func:`~offline_prelearner.io.sources.check_formats_of`): the job's preflight
            left it to the scan, which reads every footer anyway.

    Returns:
        The plan (:func:`~.plan.plan_scans`) and the fingerprints, by file.

    Raises:
        DataError: As :func:`~.plan.plan_scans`; an index that is not one (naming it).
        UnsupportedFormatError: ``check_formats`` and the files hold more than one format.
    """
    scanner = scanner if scanner is not None else ThreadScanner()
    spec = ScanSpec.of(config)
    scans = scans_from_index(path, files, spec, scanner)
    if scans is None:
        scans = scanner.scan(files, spec)
    if check_formats and len(files) > 1:
        check_formats_of(files, [s.format for s in scans.files])
    plan = plan_scans(scans, config)
    fingerprints = tuple(
        s.fingerprint if s.fingerprint is not None else input_fingerprint(s.file.path)
        for s in scans.files
    )
    return plan, fingerprints


def ray_scanner(files: list[str]) -> Scanner:
    """The scanner of a job on Ray (the caller has connected to the cluster): Ray tasks where
    every node sees the files as the driver does (a store's files, or a cluster of one node);
    local paths on a cluster of several nodes are scanned here, by threads (the job's node
    check then names a node that does not see them, in one line, before any unit starts).

    Args:
        files: The job's input files.

    Returns:
        A :class:`~.scan.RayScanner` or a :class:`~.scan.ThreadScanner`.
    """
    from ..session.ray_session import import_ray

    nodes = [n for n in import_ray().nodes() if n.get("Alive")]
    if len(nodes) > 1 and not all(is_remote(f) for f in files):
        return ThreadScanner()
    return RayScanner()
