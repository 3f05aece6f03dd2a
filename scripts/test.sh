#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then runs pytest.
#   - Debian packages from scripts/apt-packages.txt (through apt-get when run as root)
#   - .venv with this package and its dev extra
#   - .tools/checkov: checkov in its own environment (its pins conflict with Ray's), a link to
#     ~/.cache/azure-ray-rl/checkov-<key>, built once per requirements file and Python
#   - whatever scripts/setup.d/*.sh prepare (cached under .tools/ and .rehearsal/)
# Without arguments: the suite in three lanes (see below). With arguments: one pytest run with
# them, e.g. ./scripts/test.sh tests/unit -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*" >&2; }

mapfile -t APT_PACKAGES < <(grep -v -E '^\s*(#|$)' scripts/apt-packages.txt)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "apt-get install ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # No service may start at install time (there is no init system to own it here).
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        rm -f /usr/sbin/policy-rc.d
    fi
else
    log "not root (or no apt-get): skipping Debian packages ${APT_PACKAGES[*]}"
fi

log "Python environment (.venv)"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"

# Built once per machine and requirements file, outside the checkout (a fresh clone, as CI's,
# reuses it), and linked as .tools/checkov.
CHECKOV_KEY=$(cat scripts/checkov-requirements.txt <("$PYTHON" -VV) | sha256sum | cut -c1-16)
CHECKOV_ENV="${XDG_CACHE_HOME:-$HOME/.cache}/azure-ray-rl/checkov-$CHECKOV_KEY"
log "checkov tool environment (.tools/checkov -> $CHECKOV_ENV)"
if [ ! -x "$CHECKOV_ENV/complete" ]; then
    rm -rf "$CHECKOV_ENV"
    "$PYTHON" -m venv "$CHECKOV_ENV"
    "$CHECKOV_ENV/bin/python" -m pip install -q --disable-pip-version-check \
        -r scripts/checkov-requirements.txt
    install -m 0755 /dev/null "$CHECKOV_ENV/complete"
fi
mkdir -p .tools
[ -L .tools/checkov ] || rm -rf .tools/checkov
ln -sfn "$CHECKOV_ENV" .tools/checkov

# Further set-up steps (one file per concern, e.g. tool downloads), in name order.
for step in scripts/setup.d/*.sh; do
    [ -e "$step" ] || continue
    log "$step"
    bash "$step"
done

export RAYDRIVER_CHECKOV="$ROOT/.tools/checkov/bin/checkov"
if [ $# -gt 0 ]; then
    log "pytest $*"
    exec .venv/bin/python -m pytest "$@"
fi

# The whole suite in three lanes side by side, each running its tests one at a time in
# collection order: the end-to-end tests on the session's rehearsal cluster; the e2e tests that
# boot clusters of their own (scaling mode ray, autostop), then the system tests and the wheel
# test; and the unit tests. The end-to-end tests mostly wait (booting containers, Ray's and
# autostop's idle timeouts), the unit tests mostly compute. scripts/lanes.py prints the
# background lanes' logs and one closing line for all.
LANES=.pytest_cache/lanes
OWN_CLUSTERS=(tests/e2e/test_autoscale.py tests/e2e/test_autostop.py)
SIDE=("${OWN_CLUSTERS[@]}" tests/system tests/unit/test_wheel.py)
rm -rf "$LANES" && mkdir -p "$LANES"
log "pytest, three lanes: tests/e2e ($LANES/e2e.log); ${SIDE[*]} ($LANES/side.log); the rest"
# A background command of a script ignores SIGINT, and so would every process it starts
# (Python keeps an ignored SIGINT: no KeyboardInterrupt); the e2e tests stop the driver with
# Ctrl-C as a user does, so each lane gets SIGINT back before pytest starts. Only ever run in
# the background (`lane ... &`): it replaces its shell with pytest, so $! is pytest itself.
lane() {
    trap - INT QUIT
    exec .venv/bin/python -m pytest "$@"
}
lane tests/e2e "${OWN_CLUSTERS[@]/#/--ignore=}" \
    --junitxml="$LANES/e2e.xml" >"$LANES/e2e.log" 2>&1 &
e2e=$!
lane "${SIDE[@]}" --junitxml="$LANES/side.xml" >"$LANES/side.log" 2>&1 &
side=$!
# Ctrl-C or a failed host lane never leaves the others running (SIGINT: their clusters go down).
trap 'kill -INT "$e2e" "$side" 2>/dev/null || true' EXIT
rc_unit=0
.venv/bin/python -m pytest --ignore=tests/e2e "${SIDE[@]/#/--ignore=}" \
    --junitxml="$LANES/unit.xml" || rc_unit=$?
rc_e2e=0
wait "$e2e" || rc_e2e=$?
rc_side=0
wait "$side" || rc_side=$?
trap - EXIT
exec .venv/bin/python scripts/lanes.py --log "$LANES/e2e.log" --log "$LANES/side.log" \
    "unit=$rc_unit:$LANES/unit.xml" "e2e=$rc_e2e:$LANES/e2e.xml" "side=$rc_side:$LANES/side.xml"
