"""The capacity table and verdict ``up`` and ``price`` show: what Azure would refuse of the
cluster at its maximum size (:mod:`driver.capacity`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from driver import capacity
from driver.cli.options import subscription_of
from driver.cli.output import say
from driver.errors import EXIT_CAPACITY, DriverError, one_line
from driver.settings import SUBSCRIPTION_ENV, TERRAFORM_SUBSCRIPTION_ENV
from driver.untrusted import shown

IGNORE_FLAG = "--ignore-capacity"
HEADER = ("pool", "VM size", "priority", "VMs", "vCPUs", "quota", "needs", "free/limit",
          "zones",
          "available", "Spot score")  # fmt: skip
NUMERIC = {3, 4, 6}


def add_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        IGNORE_FLAG,
        action="store_true",
        help="deploy even when Azure would refuse the cluster at its maximum size (quota, VM "
        f"size; otherwise exit code {EXIT_CAPACITY})",
    )


def check_with_subscription(
    args: argparse.Namespace,
    values: Mapping[str, Any],
    arm_names: bool,
    region: str | None,
    terraform: bool,
    existing: bool,
    ignore: bool,
    refused: str,
) -> None:
    """:func:`check` in the subscription of the flags or the environment, where there is one."""
    from driver import arm

    subscription, endpoint = subscription_of(args, terraform)
    if not subscription:
        env = (
            f"${TERRAFORM_SUBSCRIPTION_ENV} or ${SUBSCRIPTION_ENV}"
            if terraform
            else (f"${SUBSCRIPTION_ENV}")
        )
        not_checked(f"no subscription to ask (pass --subscription ID or set {env})")
        return
    try:
        rm = arm.ResourceManager(subscription, endpoint)
    except DriverError as e:
        not_checked(e)
        return
    with rm:
        check(rm, values, arm_names, region, existing, ignore, refused=refused)


def not_checked(reason: object) -> None:
    say(f"Capacity not checked: {one_line(str(reason), 500)}; going on without it.")


def check(
    rm: capacity.Requester,
    values: Mapping[str, Any],
    arm_names: bool,
    region: str | None,
    existing: bool,
    ignore: bool,
    refused: str = f"nothing created; {IGNORE_FLAG} deploys anyway",
) -> None:
    """Show the table and the verdict; raise :class:`DriverError` with :data:`EXIT_CAPACITY`
    when Azure would refuse the cluster and ``ignore`` is not set. Usages or sizes that cannot
    be had are one line, and the command goes on (Azure still refuses at deployment)."""
    try:
        deployment = capacity.sizing(values, arm=arm_names, region=region)
        found = capacity.ask(rm, deployment, existing)
    except (DriverError, capacity.Unchecked) as e:
        not_checked(e)
        return
    print("\n".join(table(found)))
    sys.stdout.flush()
    for note in found.notes:
        say(f"Capacity note: {note}.")
    if found.fits:
        say(f"Capacity: the cluster fits in {found.region} at its maximum size.")
        return
    refusal = f"Azure would refuse the cluster at its maximum size: {'; '.join(found.problems)}"
    if ignore:
        say(f"Capacity: {refusal}; deploying anyway ({IGNORE_FLAG}).")
        return
    raise DriverError(f"capacity: {refusal} ({refused})", EXIT_CAPACITY)


def table(found: capacity.Check) -> list[str]:
    """The capacity table's lines."""
    scope = (
        "against the limits alone: the resource group exists, its VMs count in use already"
        if any(q.existing for q in found.quotas)
        else "free = limit - in use"
    )
    lines = [
        f"Capacity in {found.region} at the cluster's maximum size (Azure's Compute usages and "
        f"Resource SKUs; {scope}):"
    ]
    quotas = {q.name: q for q in found.quotas}
    rows = [list(HEADER)]
    for row in found.rows:
        quota = quotas.get(row.quota)
        zones = ",".join(capacity.open_zones(row.sku)) if row.sku and row.sku.zones else "-"
        rows.append(
            [
                shown(row.pool.name, 20),
                shown(row.vm_size, 48),
                "Spot" if row.spot else "regular",
                str(row.count),
                "?" if row.vcpus is None else str(row.vcpus),
                shown(row.quota, 60),
                "" if quota is None else str(quota.need),
                _room(quota),
                zones,
                row.available,
                row.score or ("-" if not row.spot else "not checked"),
            ]
        )
    total = quotas.get(capacity.TOTAL)
    if total is not None:
        rows.append(["all regular", "", "", "", "", total.name, str(total.need), _room(total),
                     "", "", ""])  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for cells_in in rows:
        cells = [
            cell.rjust(w) if i in NUMERIC else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells_in, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _room(quota: capacity.Quota | None) -> str:
    if quota is None:
        return ""
    if quota.usage is None:
        return "unknown"
    room = f"limit {quota.usage.limit}" if quota.existing else f"{quota.room}/{quota.usage.limit}"
    return f"{room} SHORT" if quota.short else room
