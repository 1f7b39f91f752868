"""Issue 36: a local Ray that does not start in time is one line (exit 2), not a 33-line
traceback (exit 1). Provoking the timeout for real costs Ray's own 30 s wait on a loaded machine,
so the line is checked on the exceptions Ray 2.x raises, as it raises them."""

from __future__ import annotations

import pytest

from offline_prelearner.errors import ConfigError, OfflinePrelearnerError
from offline_prelearner.jobs.session.ray_session import _start_failure, _start_timed_out

# What ray/_private/node.py and ray/_private/services.py raise when the raylet or the object
# store does not come up within Ray's wait.
NODE = Exception(
    "The current node timed out during startup. This could happen because some of the raylet "
    "failed to startup or the GCS has become overloaded."
)
SERVICES = TimeoutError(
    "Timed out after 30 seconds while waiting for node to startup. Did not find socket name "
    "/tmp/ray/session_x/sockets/plasma_store in the list of object store socket names."
)


@pytest.mark.parametrize("error", [NODE, SERVICES])
def test_a_start_timeout_is_one_line_saying_what_to_do(error: Exception) -> None:
    assert _start_timed_out(error)
    line = _start_failure(error)
    assert "\n" not in line
    assert line.startswith(f"Ray did not start: {type(error).__name__}: ")
    assert "--engine local" in line and "ray.address" in line
    assert issubclass(ConfigError, OfflinePrelearnerError)  # the CLI's exit 2, one line


def test_other_start_failures_keep_their_traceback() -> None:
    """A failure that is not a timeout is not ours to word: it stays a bug report (exit 1)."""
    assert not _start_timed_out(ValueError("bad _system_config key"))
    assert not _start_timed_out(RuntimeError("raylet crashed: see its log"))
