#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then runs pytest.
#   - Debian packages from scripts/apt-packages.txt (through apt-get when run as root)
#   - .venv with this package and its dev extra
#   - .tools/checkov: checkov in its own environment (its pins conflict with Ray's)
#   - whatever scripts/setup.d/*.sh prepare (cached under .tools/ and .rehearsal/)
# Extra arguments go to pytest, e.g. ./scripts/test.sh -m "not slow".
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

log "checkov tool environment (.tools/checkov)"
if ! cmp -s scripts/checkov-requirements.txt .tools/checkov/requirements.txt 2>/dev/null; then
    rm -rf .tools/checkov
    "$PYTHON" -m venv .tools/checkov
    .tools/checkov/bin/python -m pip install -q --disable-pip-version-check \
        -r scripts/checkov-requirements.txt
    cp scripts/checkov-requirements.txt .tools/checkov/requirements.txt
fi

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
# collection order: the end-to-end tests on the session's rehearsal cluster, those that boot a
# cluster of their own (scaling mode ray, autostop), and every other test. The end-to-end lanes
# mostly wait (booting containers, Ray's and autostop's idle timeouts), the host lane mostly
# computes. scripts/lanes.py prints the background lanes' logs and one closing line for all.
LANES=.pytest_cache/lanes
OWN_CLUSTERS=(tests/e2e/test_autoscale.py tests/e2e/test_autostop.py)
rm -rf "$LANES" && mkdir -p "$LANES"
log "pytest, three lanes: tests/e2e ($LANES/e2e.log), ${OWN_CLUSTERS[*]} ($LANES/clusters.log), the rest"
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
lane "${OWN_CLUSTERS[@]}" --junitxml="$LANES/clusters.xml" >"$LANES/clusters.log" 2>&1 &
clusters=$!
# Ctrl-C or a failed host lane never leaves the others running (SIGINT: their clusters go down).
trap 'kill -INT "$e2e" "$clusters" 2>/dev/null || true' EXIT
rc_host=0
.venv/bin/python -m pytest --ignore=tests/e2e --junitxml="$LANES/host.xml" || rc_host=$?
rc_e2e=0
wait "$e2e" || rc_e2e=$?
rc_clusters=0
wait "$clusters" || rc_clusters=$?
trap - EXIT
exec .venv/bin/python scripts/lanes.py --log "$LANES/e2e.log" --log "$LANES/clusters.log" \
    "host=$rc_host:$LANES/host.xml" "e2e=$rc_e2e:$LANES/e2e.xml" \
    "clusters=$rc_clusters:$LANES/clusters.xml"
