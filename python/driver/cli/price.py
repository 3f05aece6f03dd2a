"""The price verb, and the price table ``up`` shows before it asks for a yes."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Mapping
from typing import Any

from driver import arm, capacity, price
from driver.cli import capacity as capacity_cli
from driver.cli.options import Verbs, azure_options, parse_pairs, terraform_vars, verb
from driver.cli.output import say
from driver.errors import EXIT_CAPACITY, EXIT_OK, DriverError
from driver.settings import (
    DEFAULT_PRICES_URL,
    PRICES_URL_ENV,
    SUBSCRIPTION_ENV,
    TERRAFORM_SUBSCRIPTION_ENV,
    prices_cache_dir,
    prices_url,
)

WHICH = ("at minimum", "at default", "at maximum")
NOT_INCLUDED = "Compute only: disks, public IP, NAT gateway, Key Vault and traffic come on top."
NOT_INCLUDED_WITH_STORAGE = (
    "Compute and the storage's private endpoint only: disks, public IP, NAT gateway, Key Vault, "
    "private DNS zones and traffic come on top."
)
NO_STORAGE = (
    "Cluster storage: none (no results storage account: cluster storage off, results stay on "
    "the head's disk). `up` creates the results storage first unless --no-results-storage, and "
    "its table then prices it."
)
UNITS = {"1 GB/Month": "per GB-month", "10K": "per 10,000", "1 Hour": "per hour", "1 GB": "per GB"}
"""The price list's ``unitOfMeasure`` of each storage meter, as the lines say it."""
TIER_UNITS = {"1 GB/Month": "GB", "1 GB": "GB"}
"""What a price tier of a meter in this unit counts."""


def add_price(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Show what a deployment would cost per hour, without deploying it.",
        "The hourly price of the head and of each worker pool at its minimum, default and "
        "maximum size (Spot prices for a Spot head and Spot workers), for the region and VM "
        "sizes of a "
        "Terraform configuration (--terraform-dir: its defaults, terraform.tfvars, --var-file, "
        "--var) or of an ARM parameters file (--parameters: azuredeploy.json's defaults under "
        "the file's values), from Azure's public Retail Prices API (no sign-in; env "
        f"{PRICES_URL_ENV}, default {DEFAULT_PRICES_URL}), pay-as-you-go Linux prices, "
        "cached for an hour. With results storage (cluster storage), its private endpoint "
        "counts in the hourly total, and the storage's own prices (per GB-month stored, per "
        "10,000 writes and reads, per GB through the endpoint) follow apart: the account "
        "outlives the cluster. `up` shows the same before it asks for a yes.",
        cluster=False,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--terraform-dir", metavar="DIR", help="the Terraform configuration (infra/terraform)"
    )
    where.add_argument(
        "--parameters",
        metavar="FILE",
        help="an ARM parameters file (see infra/bicep/azuredeploy.parameters.json)",
    )
    terraform_vars(p)
    g = p.add_argument_group("ARM (with --parameters)")
    g.add_argument(
        "--location",
        metavar="L",
        help="the region, when the parameters file has no location (the template's default "
        "is the resource group's region)",
    )
    g.add_argument(
        "--template",
        metavar="FILE",
        default=str(arm.DEFAULT_TEMPLATE),
        help="the ARM template whose defaults apply (default: %(default)s)",
    )
    g = p.add_argument_group(
        f"capacity (with a subscription: exit code {EXIT_CAPACITY} if Azure would refuse the "
        "cluster at its maximum size)"
    )
    azure_options(
        g,
        subscription=f"Azure subscription id (env {SUBSCRIPTION_ENV}; with --terraform-dir first "
        f"{TERRAFORM_SUBSCRIPTION_ENV}); without one the capacity is not checked",
    )
    p.set_defaults(func=cmd_price)


def cmd_price(args: argparse.Namespace) -> int:
    url = prices_url()
    if args.parameters:
        if args.var or args.var_file:
            raise DriverError("--var/--var-file are Terraform's: with --parameters edit the file")
        template = arm.load_template(args.template)
        values = arm.load_parameters(args.parameters)
        arm.check_parameters(template, values)
        full = arm.with_defaults(template, values)
        if args.location is None and price.arm_name(price.LOCATION) not in values:
            raise DriverError(
                f"{args.parameters} has no location and the template's default is the resource "
                "group's region: pass --location REGION"
            )
        deployment = capacity.sizing(full, arm=True, region=args.location)
    else:
        full = {}
        from driver import terraform

        if args.location is not None:
            raise DriverError(
                "--location is for --parameters: with --terraform-dir the region is the "
                "location variable (--var location=REGION)"
            )
        values = terraform.input_values(
            args.terraform_dir, parse_pairs(args.var, "--var"), args.var_file
        )
        try:
            deployment = capacity.sizing(values, arm=False)
        except DriverError as e:
            raise DriverError(f"{args.terraform_dir}: {e}") from None
    try:
        est = _estimate(deployment, url)
    except price.PricesUnavailable as e:
        raise DriverError(f"price unknown: {unknown_line(url, e)}") from None
    show(est)
    capacity_cli.check_with_subscription(
        args,
        full if args.parameters else values,
        bool(args.parameters),
        args.location,
        terraform=not args.parameters,
        existing=False,
        ignore=False,
        refused="counted as a new cluster: free = limit - in use",
    )
    return EXIT_OK


def _estimate(deployment: price.Sizing, url: str) -> price.Estimate:
    """The deployment's prices: its VMs, and with results storage the storage's."""
    cache = prices_cache_dir()
    prices = price.price_list(deployment.region, deployment.vm_sizes, url, cache)
    storage = None
    if deployment.results_storage:
        storage = price.storage_prices(deployment.region, url, cache)
    return price.estimate(deployment, prices, storage)


def unknown_line(url: str, reason: object) -> str:
    return f"the Retail Prices API at {url} did not answer ({reason})"


def show_for_up(values: Mapping[str, Any], arm_names: bool, url: str, region: str | None) -> None:
    """The table before ``up`` asks for a yes; whatever goes wrong is one line and ``up`` goes
    on (a price is information, never a reason to stop a deployment)."""
    try:
        deployment = capacity.sizing(values, arm=arm_names, region=region)
    except DriverError as e:
        say(f"Price unknown: {e}; going on without it.")
        return
    try:
        est = _estimate(deployment, url)
    except price.PricesUnavailable as e:
        say(f"Price unknown: {unknown_line(url, e)}; going on without it.")
        return
    except OSError as e:  # the driver's home cannot be made
        say(f"Price unknown: {e.strerror}: {e.filename}; going on without it.")
        return
    show(est)


def _money(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"


def table(est: price.Estimate) -> list[str]:
    """The price table's lines."""
    prices = est.prices
    when = prices.fetched_at.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    source = f"fetched {when} UTC" + (", cached" if prices.cached else "")
    effective = f"effective {est.effective}; " if est.effective else ""
    lines = [
        f"Hourly price in {est.sizing.region} ({est.currency}; Azure retail prices, "
        f"pay-as-you-go Linux VMs; {effective}{source}):"
    ]
    rows = [["pool", "VM size", "priced", "per VM", *WHICH]]
    for line in est.lines:
        pool = line.pool
        rows.append(
            [
                pool.name,
                pool.vm_size,
                "Spot" if pool.spot else "regular",
                "no price" if line.meter is None else _money(line.meter.price),
                *(f"{n} = {_money(line.at(n))}" for n in pool.counts),
            ]
        )
    if est.storage is not None:
        endpoint = est.endpoint
        hourly = None if endpoint is None else endpoint.price
        rows.append(
            [
                "storage",
                "private endpoint",
                "regular",
                "no price" if hourly is None else _money(hourly),
                *(f"1 = {_money(hourly)}" for _ in WHICH),
            ]
        )
    totals = [est.total(i) for i in range(3)]
    rows.append(["total", "", "", "", *("unknown" if t is None else _money(t) for t in totals)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [
            cell.ljust(w) if i < 3 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    lines += mix_notes(est.sizing)
    for pool in est.missing:
        kind = "Spot" if pool.spot else "pay-as-you-go"
        lines.append(
            f"No Linux {kind} price for {pool.vm_size} in {est.sizing.region} in Azure's retail "
            "prices: the totals with one or more of these VMs are unknown."
        )
    if est.storage is not None and est.endpoint is None:
        lines.append(
            "No Standard Private Endpoint price in Azure's retail prices (in "
            f"{est.sizing.region} or Global): the totals are unknown."
        )
    if est.storage is None:
        return [*lines, NOT_INCLUDED, NO_STORAGE]
    return [*lines, NOT_INCLUDED_WITH_STORAGE, *storage_table(est.storage)]


def mix_notes(deployment: price.Sizing) -> list[str]:
    """How the pools with Spot Priority Mix or Instance Mix are priced, a line each."""
    lines = []
    for pool in deployment.pools:
        if pool.spot and pool.priority_mix is not None:
            base, percent = pool.priority_mix
            lines.append(
                f"{pool.name}: Spot Priority Mix ({base} regular VMs first, then {percent} % of "
                "those above them regular): its regular share at the regular price, the rest at "
                "the Spot price (a split that is not a whole number of VMs rounded the dearer "
                "way: Azure publishes no rounding)."
            )
        if pool.mix_sizes:
            lines.append(
                f"{pool.name}: Instance Mix of {', '.join(pool.mix_sizes)}: priced at the "
                "dearest of them (Azure picks each VM's size): at most."
            )
    return lines


def storage_table(storage: price.StoragePrices) -> list[str]:
    """The results storage's own prices, apart from the hourly total: it outlives the cluster."""
    lines = [
        f"Cluster storage (the results storage account: {storage.account}), billed apart from "
        "the cluster: it outlives it.",
    ]
    rows = []
    for key, want in storage.wanted.items():
        if key == "endpoint":
            continue  # the cluster's, in its hourly total
        rate = storage.rates[key]
        label = want.label
        if rate is not None and rate.up_to is not None:
            label += f" (up to {rate.up_to:,.0f} {TIER_UNITS.get(rate.unit, rate.unit)})"
        rows.append(
            [label, "not found" if rate is None else f"{_money(rate.price)} {UNITS[rate.unit]}"]
        )
    width = max(len(r[0]) for r in rows)
    lines += [f"  {label.ljust(width)}  {value}" for label, value in rows]
    missing = [storage.wanted[k].meter for k, r in storage.rates.items() if r is None]
    if missing:
        lines.append(
            f"Not found in Azure's retail prices for {storage.region}: {', '.join(missing)}."
        )
    lines.append(
        "Deleted blobs are billed as stored while soft delete keeps them (the results stack's "
        "soft_delete_days)."
    )
    return lines


def show(est: price.Estimate) -> None:
    print("\n".join(table(est)))
    sys.stdout.flush()
