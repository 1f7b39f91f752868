#!/usr/bin/env bash
# Builds the LeRobot reference venv: the one that writes the LeRobot test datasets
# (tests/fixtures/lerobot/make_datasets.py) and decodes their frames with LeRobot's own loader.
#
#   bash benchmarks/setup_lerobot.sh
#
# Where: $OFFLINE_PRELEARNER_LEROBOT_VENV, default <repo>/.bench/lerobot-venv (git-ignored).
# Python: $PYTHON, default python3 (3.11 is what the fixtures were written with).
#
# lerobot 0.4.4 (the newest on PyPI when written; it writes datasets in format v3.0). Its loader
# decodes video with torchcodec when that is installed, else with torchvision's VideoReader on
# PyAV ("pyav" backend). We install it WITHOUT its dependencies (wandb, diffusers, rerun, opencv,
# torchcodec... are for training and robots), then only what lerobot.datasets imports, so the
# loader's backend is "pyav": PyAV, the decoder this package uses too.
#
# torch: lerobot 0.4.4 needs torch < 2.11 and torchvision < 0.26, and its "pyav" backend needs
# torchvision.io.VideoReader, which torchvision 0.25+ no longer has. On x86_64 the only wheels of
# that pair PyPI has are CUDA builds (pip installs the nvidia-* libraries beside them, ~3 GB;
# they run on the CPU); the local CPU build of torch 2.13.0 cannot be used, as no torchvision
# that imports beside it has VideoReader. Override with $TORCH_SPEC.
#
# numpy < 2.4: lerobot 0.4.4 hands 1-element arrays to float() (a TypeError from numpy 2.4 on).
#
# LEROBOT_VERSION=0.3.3 (with OFFLINE_PRELEARNER_LEROBOT_VENV=.bench/lerobot021-venv) builds the
# venv that writes format v2.1: its pins (torch < 2.8, datasets <= 3.6) are overridden by the
# same torch as above and datasets 3.6 (its writer and loader run with them).
#
# Idempotent: when the venv already imports lerobot's dataset module with the pinned version, it
# does nothing (pass --force to reinstall the packages).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${OFFLINE_PRELEARNER_LEROBOT_VENV:-$repo/.bench/lerobot-venv}"
python="${PYTHON:-python3}"
torch_spec="${TORCH_SPEC:-torch==2.9.1 torchvision==0.24.1}"
lerobot_version="${LEROBOT_VERSION:-0.4.4}"
# What lerobot.datasets imports (lerobot 0.4.4's own pins), plus what the fixture script uses.
datasets_spec="datasets>=4.0.0,<5.0.0"
case "$lerobot_version" in 0.3.*) datasets_spec="datasets>=2.19.0,<=3.6.0" ;; esac
deps=(
    "$datasets_spec" "huggingface-hub>=0.34.2,<0.36.0" "av>=15.0.0,<16.0.0"
    "jsonlines>=4.0.0,<5.0.0" "packaging>=24.2,<26.0" "draccus==0.10.0" "einops>=0.8.0,<0.9.0"
    "termcolor>=2.4.0,<4.0.0" "deepdiff>=7.0.1,<9.0.0" "gymnasium>=1.1.1,<2.0.0"
    "accelerate>=1.10.0,<2.0.0" pandas pillow
    "numpy<2.4" pyarrow fsspec
)

force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup_lerobot.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

ready() {
    [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$lerobot_version" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
import av, torch, torchvision  # noqa: F401
from torchvision.io import VideoReader  # noqa: F401  (LeRobot's "pyav" backend)
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401
sys.exit(0 if version("lerobot") == sys.argv[1] else 1)
EOF
}

if [ "$force" = 0 ] && ready; then
    echo "[setup_lerobot] ready: $venv/bin/python (lerobot $lerobot_version)"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "[setup_lerobot] creating $venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
echo "[setup_lerobot] installing $torch_spec"
# shellcheck disable=SC2086  # two requirements in one variable
"${pip[@]}" $torch_spec
echo "[setup_lerobot] installing lerobot==$lerobot_version (no dependencies) and ${deps[*]}"
"${pip[@]}" --no-deps "lerobot==$lerobot_version"
"${pip[@]}" "${deps[@]}"
if ! ready; then
    echo "[setup_lerobot] $venv/bin/python still cannot import lerobot $lerobot_version's datasets" >&2
    "$venv/bin/python" -c "from lerobot.datasets.lerobot_dataset import LeRobotDataset" >&2 || true
    exit 1
fi
echo "[setup_lerobot] ready: $venv/bin/python (lerobot $lerobot_version)"
