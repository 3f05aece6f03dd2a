"""``start``, and what ``submit`` and ``status`` do about a cluster that autostop stopped; the
rate and the idle time ``status`` adds (see :mod:`driver.power`)."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from driver import power, price
from driver.cli.options import (
    HEAD_STARTED,
    Verbs,
    find_cluster,
    open_cluster,
    settings_from,
    verb,
)
from driver.cli.output import say, shown
from driver.discovery import Target
from driver.errors import EXIT_OK, DriverError
from driver.settings import HEAD_VM_ID_ENV, prices_cache_dir, prices_url


def add_start(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Start a cluster that autostop stopped, and wait until its Jobs API answers.",
        "Start the head VM with your own Azure credential (DefaultAzureCredential: `az login`, "
        "...), wait until it runs, enable the workers' autoscale setting again (scaling mode "
        "cpu: the workers return to its minimum; in mode ray Ray adds them for the jobs that "
        "need them), then wait for SSH, the head's Ray and its Jobs API. The head VM comes from "
        "the stack's outputs (--terraform-dir: head_vm_id, autoscale_setting_id; --resource-group "
        f"/--deployment: headVmId, autoscaleSettingId) or ${HEAD_VM_ID_ENV}. `submit` does the "
        "same by itself on a stopped cluster.",
    )
    p.set_defaults(func=cmd_start)


def _manager(args: argparse.Namespace, vm: power.HeadVm) -> Any:
    from driver.arm import ResourceManager

    return ResourceManager(vm.subscription, settings_from(args).cluster.arm_endpoint)


def cmd_start(args: argparse.Namespace) -> int:
    target = find_cluster(args)
    vm = power.head_vm(target, os.environ)
    if vm is None:
        raise DriverError(
            "start needs the head VM's resource id: name the cluster with --terraform-dir or "
            f"--resource-group/--deployment (their outputs carry it), or set ${HEAD_VM_ID_ENV}"
        )
    with _manager(args, vm) as arm:
        state = power.power_state(arm, vm)
        if state == "running":
            say(f"The head VM {vm.name} runs already")
        else:
            power.start(arm, vm, say)
            setattr(args, HEAD_STARTED, True)
    with open_cluster(args, target=target) as cluster:
        cluster.jobs()  # SSH, the head's Ray (a fresh boot is waited for), the Jobs API
        say(f"{cluster.description}: Ray's Jobs API answers; the cluster is ready")
    return EXIT_OK


def start_if_stopped(args: argparse.Namespace, target: Target) -> None:
    """Before ``submit``: a head that autostop deallocated is started first (one line says so).
    When the head VM or its power state cannot be known, nothing is said: the SSH connection
    then tells whether the head answers. A start that fails is an error."""
    down = stopped(args, target)
    if down is None:
        return
    vm, state = down
    say(f"The cluster is stopped (its head VM is {state}): starting it first")
    with _manager(args, vm) as arm:
        power.start(arm, vm, say)
    setattr(args, HEAD_STARTED, True)


def stopped(args: argparse.Namespace, target: Target) -> tuple[power.HeadVm, str] | None:
    """``(vm, power state)`` when the head VM is known not to run; None when it runs or when
    that cannot be known (no head VM id, no credential, Resource Manager unreachable)."""
    try:
        vm = power.head_vm(target, os.environ)
        if vm is None:
            return None
        with _manager(args, vm) as arm:
            state = power.power_state(arm, vm)
    except DriverError as e:
        if os.environ.get(HEAD_VM_ID_ENV, "").strip():
            # Named on purpose: a wrong id is said, not dropped for an SSH error later.
            say(f"note: cannot tell whether the head VM is stopped: {shown(e.message, 500)}")
        return None
    return (vm, state) if state in power.STOPPED else None


def report_stopped(args: argparse.Namespace, vm: power.HeadVm, state: str) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"state": "stopped", "head_vm": vm.vm_id, "power_state": state}))
    else:
        print(
            f"stopped: the head VM {vm.name} is {state} (autostop, or stopped by hand); nothing "
            "is billed for its compute. `python -m driver cluster start` (or `job submit`) starts "
            "it again."
        )
    return EXIT_OK


# -- what status adds --------------------------------------------------------------------------
def idle_line(state: dict[str, Any], now: float | None = None) -> str:
    """How long the cluster has been idle, from the head's autostop state file."""
    now = time.time() if now is None else now
    decision = state.get("decision")
    minutes = int(state.get("idle_minutes") or 0)
    since = state.get("idle_since")
    if decision == "busy" or since is None:
        return f"Busy: {state.get('reason', '')}"
    idle = max(0.0, now - float(since)) / 60
    if minutes == 0:
        return f"Idle for {idle:.0f} min (autostop is off)"
    if decision in ("stopping", "stopped"):
        return f"Idle for {idle:.0f} min: autostop is stopping the cluster"
    left = max(0.0, minutes - idle)
    return f"Idle for {idle:.0f} min; autostop stops the cluster in {left:.0f} min"


def rate_line(state: dict[str, Any], workers: int) -> str:
    """The hourly rate of what runs: the head, and ``workers`` workers of the workers' size
    (regular prices: a Spot pool costs less), from the Retail Prices API; one line either
    way."""
    sizes = state.get("sizes") or {}
    region, head, worker = (
        sizes.get(k, "") for k in ("location", "head_vm_size", "worker_vm_size")
    )
    if not (region and head and (worker or workers == 0)):
        return "Rate unknown: the head did not say its region and VM sizes"
    url = prices_url()
    wanted = [head] + ([worker] if workers else [])
    try:
        prices = price.price_list(region, wanted, url, prices_cache_dir())
    except price.PricesUnavailable as e:
        return f"Rate unknown: the Retail Prices API at {url} did not answer ({e})"
    except OSError as e:
        return f"Rate unknown: {e.strerror}: {e.filename}"
    head_meter = prices.meter(head, spot=False)
    worker_meter = prices.meter(worker, spot=False) if workers else None
    if head_meter is None or (workers and worker_meter is None):
        missing = head if head_meter is None else worker
        return f"Rate unknown: no price for {missing} in {region}"
    total = head_meter.price + (worker_meter.price * workers if worker_meter else 0.0)
    parts = f"head {head} {head_meter.price:.4f}"
    if workers and worker_meter:
        parts += f" + {workers} × {worker} {worker_meter.price:.4f}"
    return (
        f"Rate: {total:.4f} {head_meter.currency}/hour ({parts}; pay-as-you-go Linux compute, "
        f"prices of {head_meter.effective[:10]}; a Spot head or Spot workers cost less)"
    )
