#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then runs pytest.
#   - Debian packages from scripts/apt-packages.txt (through apt-get when run as root)
#   - .venv with this package and its dev extra (a link to ~/.cache/azure-ray-rl/venv-<key>,
#     built once per machine and dependency set, where the checkout has no .venv of its own)
#   - .tools/checkov: checkov in its own environment (its pins conflict with Ray's), a link to
#     ~/.cache/azure-ray-rl/checkov-<key>, built once per requirements file and Python
#   - whatever scripts/setup.d/*.sh prepare (cached under .tools/ and .rehearsal/)
# Without arguments: the suite in five lanes (see below). With arguments: one pytest run with
# them, e.g. ./scripts/test.sh tests/unit -m "not slow".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*" >&2; }
# What is built once per machine and kept between clones (environments, mypy's cache).
MACHINE_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/azure-ray-rl"

# The machine's load through the run, from the start of the set-up: the 1-minute load average
# and the busy CPU time every 10 s (scripts/lanes.py sums them up at the end). It ends with this
# script's process.
STARTED=$(date +%s)
LOAD_LOG=$(mktemp)
(while kill -0 $$ 2>/dev/null; do
    # and the machine's CPU time so far (/proc/stat's jiffies): busy (user, nice, system, irq,
    # softirq), the kernel's part of it (system, irq, softirq), and what the host took (steal)
    echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg) $(awk '/^cpu /{print $2+$3+$4+$7+$8, $4+$7+$8, $9}' /proc/stat)"
    sleep 10
done) >"$LOAD_LOG" 2>/dev/null &
load_pid=$!

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

# The tools (checkov's environment, then scripts/setup.d) are set up in the background while
# .venv is brought up to date: on a fresh machine each installs for a minute or more, mostly on
# one core. They use the system Python, never .venv. Their output is printed once both are done.
tools() {
    # Built once per machine and requirements file, outside the checkout (a fresh clone, as CI's,
    # reuses it), and linked as .tools/checkov.
    CHECKOV_KEY=$(cat scripts/checkov-requirements.txt <("$PYTHON" -VV) | sha256sum | cut -c1-16)
    CHECKOV_ENV="$MACHINE_CACHE/checkov-$CHECKOV_KEY"
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
        PYTHON="$PYTHON" bash "$step"
    done
}
TOOLS_LOG=$(mktemp)
tools >"$TOOLS_LOG" 2>&1 &
tools_pid=$!
# What the rehearsal clusters of the e2e tests boot from (the Debian image through debootstrap,
# the torch index, the mirror tool: ~1.5 min once per machine, mostly waiting on downloads) is
# built meanwhile too, as root, with the system Python, when it has what nodekit's image code
# imports (PyYAML); else, or if it fails, the first cluster's `up` builds it as ever. For the
# whole suite also the node image the clusters boot from (--bake: ~2 min once per install
# digest), so that the lanes' clusters do not wait for one of them to bake it, and every
# cluster's PyPI mirror starts with what that bake fetched.
PREPARE_LOG=$(mktemp)
prepare_pid=
PREPARE=(prepare)
[ $# -eq 0 ] && PREPARE+=(--bake)
if [ "$(id -u)" = 0 ] && command -v debootstrap >/dev/null && "$PYTHON" -c 'import yaml' 2>/dev/null
then
    PYTHONPATH="$ROOT/python" "$PYTHON" -m nodekit rehearse "${PREPARE[@]}" >"$PREPARE_LOG" 2>&1 &
    prepare_pid=$!
fi
trap 'kill "$tools_pid" $prepare_pid 2>/dev/null || true; rm -f "$TOOLS_LOG" "$PREPARE_LOG"' EXIT

# .venv: a checkout's own environment (a real folder, e.g. a developer's) is brought up to date
# in place. Otherwise (a fresh clone, as CI's) it links to an environment built once per machine
# and dependency set, outside the checkout (installing torch and Ray into a new one takes minutes),
# into which only this checkout's own package is installed again (editable, without its
# dependencies: seconds). The key: pyproject.toml's build system and dependencies, the Python, and
# pip's configuration with the constraint files it names (what decides what gets installed).
# Environments unused for 3 days are removed.
PIP=(-m pip install -q --disable-pip-version-check)
if [ -d .venv ] && [ ! -L .venv ]; then
    log "Python environment (.venv, this checkout's own)"
    .venv/bin/python "${PIP[@]}" -e ".[dev]"
else
    VENV_KEY=$({
        "$PYTHON" -c 'import json, sys, tomllib; d = tomllib.load(open("pyproject.toml", "rb")); \
            p = d["project"]; json.dump([d["build-system"], p["dependencies"], \
            p.get("optional-dependencies"), p.get("requires-python")], sys.stdout, sort_keys=True)'
        "$PYTHON" -VV
        "$PYTHON" -m pip config list 2>/dev/null || true
        "$PYTHON" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.constraint='\(.*\)'$/\1/p" \
            | tr ' ' '\n' | xargs -r cat 2>/dev/null || true
    } | sha256sum | cut -c1-16)
    VENV_ENV="$MACHINE_CACHE/venv-$VENV_KEY"
    log "Python environment (.venv -> $VENV_ENV)"
    if [ ! -x "$VENV_ENV/complete" ]; then
        rm -rf "$VENV_ENV"
        "$PYTHON" -m venv "$VENV_ENV"
        "$VENV_ENV/bin/python" "${PIP[@]}" -e ".[dev]"
        install -m 0755 /dev/null "$VENV_ENV/complete"
    else
        "$VENV_ENV/bin/python" "${PIP[@]}" --no-deps -e .
    fi
    touch "$VENV_ENV"
    find "$(dirname "$VENV_ENV")" -maxdepth 1 -name 'venv-*' ! -newermt '3 days ago' \
        -exec rm -rf {} +
    rm -rf .venv && ln -s "$VENV_ENV" .venv
fi

rc_tools=0
wait "$tools_pid" || rc_tools=$?
cat "$TOOLS_LOG" >&2
if [ -n "$prepare_pid" ]; then
    log "python -m nodekit rehearse ${PREPARE[*]} (in the background since the start)"
    wait "$prepare_pid" || echo "(not prepared: the clusters' up builds it)" >&2
    cat "$PREPARE_LOG" >&2
fi
rm -f "$TOOLS_LOG" "$PREPARE_LOG"
trap - EXIT
if [ "$rc_tools" != 0 ]; then
    echo "setting up the tools failed (exit $rc_tools): see above" >&2
    exit "$rc_tools"
fi

export RAYDRIVER_CHECKOV="$ROOT/.tools/checkov/bin/checkov"
# mypy's incremental cache checks each module against its source's hash, whatever folder the
# clone is in: the machine's serves every clean clone (test_lint: ~1.5 s of CPU, not ~35).
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$MACHINE_CACHE/mypy}"
log "set up in $(($(date +%s) - STARTED)) s"
if [ $# -gt 0 ]; then
    kill "$load_pid" 2>/dev/null || true
    rm -f "$LOAD_LOG"
    log "pytest $*"
    exec .venv/bin/python -m pytest "$@"
fi

# The whole suite in five lanes side by side, each running its tests one at a time. Which
# test file goes where is planned by scripts/lanes.py (--plan) from what each file cost in a
# whole run (tests/lane_costs.json, refreshed with --record): the files that need a rehearsal
# cluster stay with it (e2e: the session's cluster; autoscale: scaling mode ray; autostop:
# tests/system, then its idle periods), and every other file goes, longest first, to whichever
# of the unit and bench lanes has the least so far; there, the files that mostly wait run
# first and the CPU-bound ones last, once the cluster lanes leave the cores. The unit lane
# runs here, its output live; the others log to $LANES/. scripts/lanes.py prints the
# background lanes' logs and one closing line for all. How long each lane took, and the load:
# benchmarks/README.md.
LANES=.pytest_cache/lanes
rm -rf "$LANES" && mkdir -p "$LANES"
mapfile -t PLAN < <(.venv/bin/python scripts/lanes.py --plan)
# Each lane's CPU, exactly, where the machine allows it (root, a cgroup v1 cpuacct hierarchy):
# a group per lane that its pytest joins first, so that everything it starts (Ray, the
# rehearsal clusters' nodes) is counted in it; RAYDRIVER_LANE_CPU lets tests/conftest.py put
# each test's share in the lane's report. scripts/lanes.py reads them at the end.
CPU_GROUPS=
CPUACCT=/sys/fs/cgroup/cpuacct
if [ "$(id -u)" = 0 ] && [ -f "$CPUACCT/cpuacct.usage" ] && mkdir -p "$CPUACCT/azure-ray-rl-tests-$$" 2>/dev/null
then
    CPU_GROUPS=$CPUACCT/azure-ray-rl-tests-$$
fi
# Joins lane $1's group (this shell, before it becomes pytest: never in a subshell of it) and
# sets LANE_CPU to the variable to give it.
cpu_group() {
    LANE_CPU=RAYDRIVER_LANE_CPU=
    if [ -n "$CPU_GROUPS" ] && mkdir -p "$CPU_GROUPS/$1" 2>/dev/null \
        && echo "$BASHPID" >"$CPU_GROUPS/$1/cgroup.procs" 2>/dev/null; then
        LANE_CPU=RAYDRIVER_LANE_CPU=$CPU_GROUPS/$1/cpuacct.usage
    fi
}
# A background command of a script ignores SIGINT, and so would every process it starts
# (Python keeps an ignored SIGINT: no KeyboardInterrupt); the e2e tests stop the driver with
# Ctrl-C as a user does, so each lane gets SIGINT back before pytest starts. Only ever run in
# the background (`lane NAME ... &`): it replaces its shell with pytest, so $! is pytest itself.
lane() {
    trap - INT QUIT
    cpu_group "$1"
    shift
    exec env "$LANE_CPU" "$@"
}
NAMES=()
PIDS=()
for line in "${PLAN[@]:1}"; do
    IFS='|' read -r name vars files <<<"$line"
    read -r -a vars <<<"$vars"
    read -r -a files <<<"$files"
    lane "$name" "${vars[@]}" .venv/bin/python -m pytest "${files[@]}" --junitxml="$LANES/$name.xml" \
        >"$LANES/$name.log" 2>&1 &
    NAMES+=("$name")
    PIDS+=($!)
done
log "pytest, ${#PLAN[@]} lanes: ${NAMES[*]} (logs in $LANES/), ${PLAN[0]%%|*} (here)"
# Ctrl-C or a failed host lane never leaves the others running (SIGINT: their clusters go down).
trap 'kill -INT "${PIDS[@]}" 2>/dev/null || true' EXIT
IFS='|' read -r here here_vars here_files <<<"${PLAN[0]}"
read -r -a here_vars <<<"$here_vars"
read -r -a here_files <<<"$here_files"
rc_here=0
(
    cpu_group "$here"
    exec env "$LANE_CPU" "${here_vars[@]}" .venv/bin/python -m pytest \
        "${here_files[@]}" --junitxml="$LANES/$here.xml"
) || rc_here=$?
RESULTS=("$here=$rc_here:$LANES/$here.xml")
for i in "${!PIDS[@]}"; do
    rc=0
    wait "${PIDS[$i]}" || rc=$?
    RESULTS+=("${NAMES[$i]}=$rc:$LANES/${NAMES[$i]}.xml")
done
trap - EXIT
# A few failed tests are rerun alone, now that the lanes have ended: on 2 cores the lanes keep
# the load at 10-20, and a test whose process misses a bound of Ray's own (a node's 30 s to
# register) or of the test's there passes alone. scripts/lanes.py lists each such test as
# flaky under load, never silently; one that fails again fails the suite. More failures than
# RERUN_MAX are not rerun: that is a broken change, not load (a run whose machine was busy with
# other work beside the suite, load 13-20, had 9: five of them one module's local Ray head).
RERUN_MAX=10
mapfile -t failed < <(.venv/bin/python scripts/lanes.py --print-failed "${RESULTS[@]}")
RERUN=()
if [ "${#failed[@]}" -ge 1 ] && [ "${#failed[@]}" -le "$RERUN_MAX" ]; then
    log "rerunning the ${#failed[@]} failed tests alone (log: $LANES/rerun.log)"
    .venv/bin/python -m pytest "${failed[@]}" --junitxml="$LANES/rerun.xml" \
        >"$LANES/rerun.log" 2>&1 || true
    RERUN=(--log "$LANES/rerun.log" --rerun "$LANES/rerun.xml")
fi
mv "$LOAD_LOG" "$LANES/load.txt"
echo "(the whole run: $(($(date +%s) - STARTED)) s)"
LOGS=()
for name in "${NAMES[@]}"; do LOGS+=(--log "$LANES/$name.log"); done
CPU=()
[ -n "$CPU_GROUPS" ] && CPU=(--cpu "$CPU_GROUPS")
rc=0
.venv/bin/python scripts/lanes.py --load "$LANES/load.txt" "${CPU[@]}" "${LOGS[@]}" \
    "${RERUN[@]}" "${RESULTS[@]}" || rc=$?
# The groups go once empty (a process a lane left running keeps its own: say so).
if [ -n "$CPU_GROUPS" ]; then
    rmdir "$CPU_GROUPS"/*/ "$CPU_GROUPS" 2>/dev/null ||
        echo "(processes the lanes left running: $(cat "$CPU_GROUPS"/*/cgroup.procs | xargs))" >&2
fi
exit "$rc"
