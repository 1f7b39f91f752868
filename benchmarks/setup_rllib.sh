#!/usr/bin/env bash
# Builds the RLlib reference venv that the benchmarks' RLlib side (benchmarks/rllib_*.py) and the
# dataset generator (benchmarks/make_data.sh) run under.
#
#   bash benchmarks/setup_rllib.sh
#
# Where: $OFFLINE_PRELEARNER_RLLIB_VENV, default <repo>/.bench/rllib-venv (git-ignored). The
# benchmarks find its python there by default (override with $RLLIB_PYTHON).
# Python: $PYTHON, default python3 (3.11 is what the figures were taken with).
#
# torch is installed FIRST and pinned, so that ray[rllib] finds it satisfied: a CPU build of
# torch==2.13.0 can lie in pip's --find-links on a machine (pip prefers the local "+cpu" build);
# left to itself pip would pull the multi-GB CUDA build. Override with $TORCH_SPEC.
#
# Idempotent: when the venv already imports the pinned ray, rllib, torch and the packages the
# scripts need, it does nothing (pass --force to reinstall the packages).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${OFFLINE_PRELEARNER_RLLIB_VENV:-$repo/.bench/rllib-venv}"
python="${PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.13.0}"
ray_version="2.60.0"
# make_data.py: gymnasium (via ray[rllib]), msgpack + msgpack-numpy (episodes), pyarrow.
# rllib_pipeline.py: aiohttp (Ray's read_parquet imports fsspec's HTTP filesystem).
# h5py: Minari's and D4RL's HDF5 files. pytest, pytest-timeout, hypothesis: RLlib's contract
# tests run under this interpreter's pytest, which loads tests/conftest.py and pyproject's timeout.
extras=(aiohttp msgpack msgpack-numpy h5py pytest pytest-timeout hypothesis)

force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup_rllib.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

ready() {
    [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$ray_version" <<'EOF' 2>/dev/null
import sys
import aiohttp, h5py, hypothesis, msgpack, msgpack_numpy, gymnasium, pytest, pytest_timeout, torch  # noqa: F401
import ray, ray.rllib  # noqa: F401
import offline_prelearner.rllib  # noqa: F401  (this checkout, editable: the tests in RLlib's loop)
sys.exit(0 if ray.__version__ == sys.argv[1] else 1)
EOF
}

if [ "$force" = 0 ] && ready; then
    echo "[setup_rllib] ready: $venv/bin/python (ray $ray_version, $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "[setup_rllib] creating $venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
echo "[setup_rllib] installing $torch_spec"
"${pip[@]}" "$torch_spec"
echo "[setup_rllib] installing ray[rllib]==$ray_version ${extras[*]}"
"${pip[@]}" "ray[rllib]==$ray_version" "${extras[@]}"
# This checkout, editable, so that RLlib's loop can run offline_prelearner.rllib
# (tests/test_rllib.py) and the package finds its schema presets; its other dependencies come too.
echo "[setup_rllib] installing this checkout (editable)"
"${pip[@]}" -e "$repo"
if ! ready; then
    echo "[setup_rllib] $venv/bin/python still cannot import ray $ray_version / rllib / torch" >&2
    exit 1
fi
echo "[setup_rllib] ready: $venv/bin/python ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
