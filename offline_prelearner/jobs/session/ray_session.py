"""The Ray session: one per process, started on first use and shut down by the CLI on every exit.

:func:`init_ray` joins the cluster the user named (after a fast check that something listens
there) or starts a local instance that a watchdog (:mod:`.reaper`) ends with this process; Ray's
console output is muted unless :data:`VERBOSE`; the caller's SIGTERM handler survives
``ray.init``. :func:`shutdown_ray` ends what :func:`init_ray` started; where the process ends with
its job (:data:`ONE_JOB`, the CLI), :func:`release_ray` lets go of it as soon as the job's output
is committed, without waiting for Ray's shutdown. :func:`ray_log_dir` names its log folder.
:func:`data_context` is the Ray Data settings of the learner stream
(:mod:`..stream.learner_stream`), :func:`worker_env` the runtime_env both jobs give their workers.

Ray is imported only in ``jobs/`` (here, and the modules that drive it) and ``replay/shards/``,
and only when a job runs: importing this module imports no Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...config import PreLearnerConfig
from ...errors import ConfigError
from ...prelearner import OfflinePreLearner
from . import reaper

__all__ = [
    "ONE_JOB",
    "VERBOSE",
    "check_cluster_address",
    "data_context",
    "import_ray",
    "init_ray",
    "local_ray_watched",
    "ray_log_dir",
    "ray_watched",
    "release_ray",
    "shutdown_ray",
    "worker_env",
]


def import_ray() -> Any:
    """The ``ray`` module, imported on first use (importing this package imports no Ray)."""
    import ray

    return ray


_STARTED_RAY = False
_LOG_DIR: str | None = None
_OWNER: str | None = None  # the mark of the local instance this process started (reaper.py)
_REAPER: Any = None  # its watchdog process, held for the life of this process

_RELEASED = False  # the local instance was left to its watchdog (release_ray)

#: Show Ray's own log lines on the console (the CLI's ``-v``). Off: Ray's INFO/WARNING lines and
#: its "(raylet) ..." error lines stay in the session's log folder (:func:`ray_log_dir`).
VERBOSE = True

#: This process runs one job and ends after it (the CLI sets it): the job lets go of Ray once its
#: output is committed (:func:`release_ray`). Off (a library caller): Ray stays up for the caller.
ONE_JOB = False


def init_ray(config: PreLearnerConfig) -> None:
    """Connects to the cluster the user named (``ray.address`` or ``RAY_ADDRESS``), else starts
    a fresh local instance -- never one found in a ``ray_current_cluster`` file a past
    ``ray start`` left behind (``address="local"``): a job joins no cluster it was not told to.

    A named address that does not answer is refused within CLUSTER_PROBE_SECONDS, in one line.
    A local instance is marked and watched (:mod:`.reaper`): whatever ends this process, no Ray
    process it started outlives it by more than a few seconds. Signals stay the CLI's
    (:mod:`.interrupts`): ``ray.init`` installs a SIGTERM handler of its own, which is kept out.

    Args:
        config: The job's config; its ``ray.address`` names the cluster (None: ``RAY_ADDRESS``,
            else a new local instance). Nothing happens when Ray is already initialized.

    Raises:
        ConfigError: a named cluster does not answer, or refuses the connection.
    """
    global _STARTED_RAY, _LOG_DIR, _OWNER, _REAPER
    ray = import_ray()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"log_to_driver": False}
    if not VERBOSE:
        kwargs["logging_level"] = logging.ERROR
        _mute_ray_driver_prints()
    address = config.ray.address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_cluster_address(address)
    else:
        kwargs["include_dashboard"] = False
        # No usage report from an instance that lives for one job (read by the GCS it starts).
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        _OWNER = f"{os.getpid()}-{secrets.token_hex(8)}"
        _REAPER = reaper.start(_OWNER)  # before the mark: the watchdog is not marked itself
        os.environ[reaper.OWNER_ENV] = _OWNER  # inherited by every process Ray starts
    _STARTED_RAY = True
    try:
        with _our_sigterm_handler():
            ctx = ray.init(address=address or "local", **kwargs)
    except Exception as e:
        if address and isinstance(e, ConnectionError | RuntimeError):
            raise ConfigError(_connect_failure(address, e)) from None
        if not address and _start_timed_out(e):
            with contextlib.suppress(Exception):
                ray.shutdown()  # what started of it (the reaper ends the rest)
            raise ConfigError(_start_failure(e)) from None
        raise
    finally:
        os.environ.pop(reaper.OWNER_ENV, None)
    with contextlib.suppress(AttributeError, KeyError, TypeError):
        _LOG_DIR = os.path.join(ctx.address_info["session_dir"], "logs")


@contextlib.contextmanager
def _our_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the SIGTERM handler with one that calls ``sys.exit(15)`` (a bare
    exit, mid-start); the caller's stays in place: Ray's setter is skipped for the call (a
    private name: if it moves, Ray's exit is read as the SIGTERM it was), and the caller's
    handler is installed again after it (Ray's C++ core adds one of its own)."""
    main = threading.current_thread() is threading.main_thread()
    on_term: Any = signal.getsignal(signal.SIGTERM) if main else None
    utils: Any = None
    with contextlib.suppress(ImportError):
        import ray._private.utils as utils
    setter = getattr(utils, "set_sigterm_handler", None)
    if setter is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    except SystemExit as e:
        if e.code != signal.SIGTERM or on_term in (None, signal.SIG_DFL, signal.SIG_IGN):
            raise
        on_term(signal.SIGTERM, None)  # the caller's handler decides (the CLI's raises)
        raise
    finally:
        if setter is not None:
            utils.set_sigterm_handler = setter
        if main and on_term is not None:
            # Always, even when Python's table still holds it: Ray's core worker installs a C
            # failure-signal handler for SIGTERM that prints "*** SIGTERM received ***" and a
            # stack before passing the signal on; this puts Python's own C handler back.
            signal.signal(signal.SIGTERM, on_term)


def _mute_ray_driver_prints() -> None:
    """Ray prints worker-death notices ("(raylet) A worker died ...") to the driver's stdout
    whatever its options say; they are in the session's logs, and a retried unit is not news.
    Ray 2.60 offers no switch, so its printer is replaced (a private name: skipped if absent)."""
    with contextlib.suppress(ImportError, AttributeError):
        import ray._private.worker as worker

        if hasattr(worker, "print_to_stdstream"):
            worker.print_to_stdstream = lambda *args, **kwargs: None


def _mute_ray_data_console() -> None:
    """Ray Data logs a job it aborts (a worker that died for good) at ERROR with stack traces, on
    the console as well as in ``ray-data.log``: its console handler is silenced (the file keeps
    the records; the CLI's one line names the log folder). Called by :func:`data_context`, so a
    job that uses no Ray Data (the batch job) never imports it (seconds, on every worker too)."""
    import ray.data  # noqa: F401  (sets up its loggers on import)

    for h in logging.getLogger("ray.data").handlers:
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            h.setLevel(logging.CRITICAL + 1)


def ray_log_dir() -> str | None:
    """The log folder of the Ray session this module started (None if it started none)."""
    return _LOG_DIR


def shutdown_ray() -> None:
    """Shuts down the Ray instance this module started (the CLI calls it on every exit), then
    ends any process of a local instance still alive (marked, :mod:`.reaper`). Nothing to do
    after :func:`release_ray` left the local instance to its watchdog."""
    global _STARTED_RAY
    if _RELEASED:
        return
    if _STARTED_RAY and "ray" in sys.modules:
        sys.modules["ray"].shutdown()
    _STARTED_RAY = False
    if _OWNER is not None and reaper.supported():
        reaper.Instance(_OWNER).kill(seconds=2.0)


def release_ray() -> None:
    """Lets go of Ray after a job whose process ends with it (:data:`ONE_JOB`; else nothing).

    A local instance is left to its watchdog (:mod:`.reaper`), which ends every process of it
    once this process has exited: nothing here waits (``ray.shutdown()`` spends seconds, on many
    cores more than ten, joining Ray's threads in a process that is about to exit). Without a
    watchdog (not Linux) it is shut down as before. A cluster the job joined is disconnected from,
    and keeps running. The process must then end without calling Ray again (the CLI exits with
    ``os._exit`` after its last line).
    """
    global _RELEASED
    if not ONE_JOB or not _STARTED_RAY:
        return
    if local_ray_watched():
        _RELEASED = True
        return
    shutdown_ray()


def local_ray_watched() -> bool:
    """Whether this process started a local Ray instance and its watchdog runs: the process's
    exit alone then ends that instance (:mod:`.reaper`)."""
    return _OWNER is not None and _REAPER is not None and _REAPER.poll() is None


def ray_watched() -> bool:
    """Whether this process's exit alone ends the Ray processes it started: none were started
    here (none, or a cluster's), or the local instance's watchdog runs (:mod:`.reaper`). The CLI
    then leaves an interrupted job's instance to it instead of a shutdown that waits."""
    return _OWNER is None or (_REAPER is not None and _REAPER.poll() is None)


#: Seconds a named cluster address gets to accept a connection before the job is refused.
CLUSTER_PROBE_SECONDS = 2.0


def check_cluster_address(
    address: str, timeout: float = CLUSTER_PROBE_SECONDS, found_by: str = ""
) -> None:
    """Fails fast when nothing listens at a ``host:port`` cluster address.

    ``ray.init(address=...)`` retries an absent cluster for ~14 minutes before it raises; a TCP
    connect to the GCS port says the same in seconds. ``auto`` is probed at the address Ray
    would pick (the ``ray_current_cluster`` file of the last ``ray start``: a stale one names a
    dead cluster); ``local`` and ``ray://`` client addresses are left to Ray.

    Args:
        address: ``host:port`` of the cluster's GCS, ``auto``, ``local`` or a ``ray://`` URL.
        timeout: Seconds the TCP connect may take (default :data:`CLUSTER_PROBE_SECONDS`).
        found_by: Appended to the address in the error (how ``auto`` found it); default none.

    Raises:
        ConfigError: nothing accepts a connection at ``address`` within ``timeout`` seconds.
    """
    if address == "auto":
        found = _auto_address()
        if found is not None:  # else Ray says in one line that it found no cluster
            check_cluster_address(found, timeout, " (found by 'auto': a past `ray start` left it)")
        return
    if address == "local" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"Ray address {address!r} must be host:port (or auto, or ray://...)")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConfigError(
            f"no Ray cluster answers at {address}{found_by} ({e.strerror or e}); start one with "
            "`ray start --head`, fix --address / RAY_ADDRESS, or leave both unset to run locally"
        ) from None


def _auto_address() -> str | None:
    """The ``host:port`` Ray resolves ``address="auto"`` to, or None (none found, or Ray's
    private resolver moved: then Ray resolves it itself)."""
    quiet = logging.getLogger("ray._private.services")  # "Found multiple active Ray instances"
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the console is ours: Ray's warning is not our one line
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address("auto")
    except Exception:  # no cluster found, or the private name moved
        return None
    finally:
        quiet.setLevel(level)
    return found if isinstance(found, str) and found else None


def _start_timed_out(error: BaseException) -> bool:
    """Whether a local ``ray.init`` failed because its processes did not come up in time (Ray
    raises a bare Exception, "The current node timed out during startup", or a TimeoutError)."""
    return isinstance(error, TimeoutError) or "timed out" in str(error).lower()


def _start_failure(error: BaseException) -> str:
    """One line for a local Ray that did not start in time: Ray's reason, and what to do (the
    command exits 2: nothing was read, and the remedy is the user's choice of engine or
    cluster, as for a cluster that cannot be reached).

    Args:
        error: What ``ray.init`` raised.

    Returns:
        The line, without the command's prefix.
    """
    return (
        f"Ray did not start: {type(error).__name__}: {_gist(error)} (a loaded machine starts "
        "Ray's processes slowly); run again when it is less loaded, use --engine local, or "
        "give ray.address of a running cluster"
    )


def _connect_failure(address: str, error: BaseException) -> str:
    """One line for a failed ``ray.init(address=...)``: the chain of causes, and what to do."""
    chain: list[BaseException] = [error]
    while True:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    msg = f"could not connect to the Ray cluster at {address}: " + " <- ".join(
        f"{type(e).__name__}: {_gist(e)}" for e in chain
    )
    text = " ".join(str(e) for e in chain).lower()
    if "auth" in text or "token" in text:
        msg += (
            "; the cluster requires a token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or "
            "RAY_AUTH_TOKEN_PATH) to the cluster's token"
        )
    return msg


def _gist(error: BaseException) -> str:
    """An exception's message in one line: its first line, or for a message that carries a
    traceback, that traceback's last line (the error itself)."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[-1] if "Traceback (most recent call last)" in lines[0] else lines[0]


def worker_env(cls: type) -> dict[str, Any] | None:
    """A runtime_env that lets Ray workers import ``cls`` when its module is only on the driver's
    path (a user's ``my_prelearners.py`` next to the data, not an installed package).

    Args:
        cls: The prelearner class the workers will build.

    Returns:
        ``{"env_vars": {"PYTHONPATH": ...}}`` with the root of ``cls``'s package first, or None
        where workers import it anyway (the default class, ``__main__``, an installed package).
    """
    if cls is OfflinePreLearner or cls.__module__ == "__main__":  # __main__: pickled by value
        return None
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file or "site-packages" in file:
        return None
    depth = cls.__module__.count(".")
    root = Path(file).resolve().parents[depth]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


@contextlib.contextmanager
def data_context(ray: Any, config: PreLearnerConfig, min_block_bytes: int = 0) -> Iterator[None]:
    """The Ray Data settings of our datasets, set only while they are built (each dataset keeps
    a copy of the context it was built under; the caller's own context is left as it was): rows in
    file order, ``ray.block_mb`` blocks (at least ``min_block_bytes``), no progress bars of Ray's
    own unless :data:`VERBOSE`.

    Args:
        ray: The imported ``ray`` module.
        config: The job's config (``ray.block_mb`` sets the target block size).
        min_block_bytes: The smallest target block size the job needs (whole train batches
            per block); default 0 keeps ``ray.block_mb``.

    Yields:
        Nothing; the settings hold inside the block and are put back after it.
    """
    if not VERBOSE:
        _mute_ray_data_console()
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.target_max_block_size)
    saved_bars = ctx.enable_progress_bars
    ctx.execution_options.preserve_order = True
    ctx.target_max_block_size = config.ray.block_mb * 2**20
    # A job whose blocks must stay whole (the learner stream's train batches) names their size.
    ctx.target_max_block_size = max(ctx.target_max_block_size, min_block_bytes)
    if not VERBOSE:
        ctx.enable_progress_bars = False  # the CLI draws its own
    try:
        yield
    finally:
        ctx.execution_options.preserve_order, ctx.target_max_block_size = saved
        ctx.enable_progress_bars = saved_bars
