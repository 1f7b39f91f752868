"""The two backends of the replay kernels, as pytest parameters: the numpy fallback always, the
numba-compiled loops when numba is importable (and not turned off by OFFLINE_PRELEARNER_NUMBA=0).
Test modules parametrize a module-scoped autouse fixture over :data:`BACKENDS` and enter
``kernels.use(name)``, so every tree they create runs on that backend."""

from __future__ import annotations

import pytest

from offline_prelearner.replay.samplers import kernels

BACKENDS = [
    "numpy",
    pytest.param(
        "numba",
        marks=pytest.mark.skipif(not kernels.available(), reason="numba is unavailable"),
    ),
]
