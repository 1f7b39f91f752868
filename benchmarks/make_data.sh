#!/usr/bin/env bash
# Writes the standard benchmark datasets (shared/bench/make_data.py; see shared/bench/README.md)
# with the RLlib venv's python (make benchmarks/setup_rllib.sh first: the generator needs
# ray[rllib]==2.60.0 for RLlib's episode class).
#
#   bash benchmarks/make_data.sh [--force] [make_data.py arguments...]
#
# Generator: $OFFLINE_PRELEARNER_SHARED/bench/make_data.py, default <repo>/../shared.
# Output: $OFFLINE_PRELEARNER_BENCH_DATA, default <repo>/.bench/data (git-ignored); the
# benchmarks read the same variable and default.
# Python: $RLLIB_PYTHON, default the venv of setup_rllib.sh
# ($OFFLINE_PRELEARNER_RLLIB_VENV, default <repo>/.bench/rllib-venv).
#
# Skips when the output's manifest.json already carries the expected digest
# ($OFFLINE_PRELEARNER_BENCH_DIGEST, default 7b51efd8b452b6c5: the generator's defaults) and
# lists all four datasets. About 200 s on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
shared="${OFFLINE_PRELEARNER_SHARED:-$repo/../shared}"
out="${OFFLINE_PRELEARNER_BENCH_DATA:-$repo/.bench/data}"
venv="${OFFLINE_PRELEARNER_RLLIB_VENV:-$repo/.bench/rllib-venv}"
python="${RLLIB_PYTHON:-$venv/bin/python}"
digest="${OFFLINE_PRELEARNER_BENCH_DIGEST:-7b51efd8b452b6c5}"
generator="$shared/bench/make_data.py"

force=0
args=()
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) args+=("$arg") ;;
    esac
done

have() {
    [ -f "$out/manifest.json" ] && "${PYTHON:-python3}" - "$out/manifest.json" "$digest" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
want = {"cartpole_rows", "cartpole_episodes", "cartpole_sample_batches", "pixels_rows"}
sys.exit(0 if m.get("digest") == sys.argv[2] and want <= set(m.get("datasets", {})) else 1)
EOF
}

if [ "$force" = 0 ] && [ "${#args[@]}" = 0 ] && have; then
    echo "[make_data] $out already holds digest $digest: nothing to do"
    exit 0
fi
if [ ! -f "$generator" ]; then
    echo "[make_data] no generator at $generator (set OFFLINE_PRELEARNER_SHARED to the shared/ folder)" >&2
    exit 1
fi
if [ ! -x "$python" ]; then
    echo "[make_data] no RLlib python at $python: run benchmarks/setup_rllib.sh (or set RLLIB_PYTHON)" >&2
    exit 1
fi
mkdir -p "$out"
echo "[make_data] $python $generator --out $out ${args[*]:-}"
"$python" "$generator" --out "$out" "${args[@]}"
if [ "${#args[@]}" = 0 ] && ! have; then
    echo "[make_data] $out/manifest.json does not carry digest $digest" >&2
    exit 1
fi
