#!/usr/bin/env bash
# Set up and run the main job: creates .venv, installs the package with its local extra (RLlib,
# torch: what jobs on local Ray import), and trains PPO on CartPole through
# `python -m driver job submit` on a local Ray head (no cloud, no SSH).
# Arguments after the script name go to the training script, e.g. ./scripts/quickstart.sh --seed 3
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: Python >= 3.10 is needed ($PYTHON is $("$PYTHON" -V 2>&1))" >&2
    exit 2
fi
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    else
        echo "error: $PYTHON cannot create virtual environments: install python3-venv" >&2
        exit 2
    fi
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[local]"
exec .venv/bin/python -m driver job submit examples/cartpole/train.py -- "$@"
