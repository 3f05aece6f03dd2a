"""What a deployment costs per hour, before it is deployed: Azure's public Retail Prices API.

The inputs are the stack's own values, after each stack has applied its defaults: Terraform's
variables as ``terraform plan`` resolved them (``up``), or as a plan of ``variables.tf`` and
``checks.tf`` alone resolves them (``price``, :func:`driver.terraform.input_values`); the ARM
template's parameters with ``azuredeploy.json``'s ``defaultValue`` under the parameters file.
:data:`HEAD` and :data:`POOLS` name the variables that size the cluster (Terraform names; the
Bicep/ARM parameter is the same name in camelCase, :func:`arm_name`): a further worker pool is
one more :class:`PoolVariables` there.

The price list (https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices)
is asked once per region with an OData ``$filter`` on ``serviceName``, ``priceType``,
``armRegionName`` and the VM sizes, following ``NextPageLink`` page by page. Of its meters only
Linux pay-as-you-go hours count: ``productName`` without "Windows", ``unitOfMeasure`` "1 Hour",
not "Low Priority"; Spot meters carry " Spot" in ``skuName``/``meterName``. The answer is kept
under the driver's home for :data:`~driver.settings.PRICES_CACHE_S`.

Library code: nothing here prints. A price list that cannot be had raises
:class:`PricesUnavailable`, which ``up`` reports in one line and goes on.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver import untrusted
from driver.errors import DriverError
from driver.settings import PRICES_CACHE_S

FETCH_TIMEOUT_S = 10.0
"""The longest one read from the API may wait."""
FETCH_DEADLINE_S = 2 * FETCH_TIMEOUT_S
"""The whole price list (every page, connections included) comes within this, or not at all."""
MAX_PAGE_BYTES = 4 << 20
"""A page of 100 items is ~70 KB."""
MAX_PAGES = 50
"""A filtered query for a few sizes in one region is one or two pages; more is a broken link."""


# -- which variables size the cluster ---------------------------------------------------------
@dataclass(frozen=True)
class PoolVariables:
    """The Terraform variables of one group of VMs of one size (camelCase in Bicep/ARM)."""

    name: str
    vm_size: str
    spot: str | None = None
    min_count: str | None = None
    default_count: str | None = None
    max_count: str | None = None
    """No count variables: exactly one VM (the head)."""


LOCATION = "location"
MAX_COUNT = 1000
"""A scale set holds at most 1,000 VMs."""
HEAD = PoolVariables("head", "head_vm_size")
POOLS = (
    PoolVariables(
        "workers",
        "worker_vm_size",
        spot="worker_spot_enabled",
        min_count="worker_min_count",
        default_count="worker_default_count",
        max_count="worker_max_count",
    ),
)
"""Worker pools, each priced at its minimum, default and maximum size."""


def arm_name(name: str) -> str:
    """A Terraform variable's Bicep/ARM parameter: ``worker_vm_size`` -> ``workerVmSize``."""
    first, *rest = name.split("_")
    return first + "".join(w.capitalize() for w in rest)


def variable_names() -> list[str]:
    """Every Terraform variable the price reads."""
    names = [LOCATION]
    for pool in (HEAD, *POOLS):
        names += [
            n
            for n in (pool.vm_size, pool.spot, pool.min_count, pool.default_count, pool.max_count)
            if n
        ]
    return names


@dataclass(frozen=True)
class Pool:
    name: str
    vm_size: str
    spot: bool
    counts: tuple[int, int, int]
    """(minimum, default, maximum) number of VMs."""


@dataclass(frozen=True)
class Sizing:
    region: str
    pools: tuple[Pool, ...]
    """The head first, then each worker pool."""

    @property
    def vm_sizes(self) -> list[str]:
        return sorted({p.vm_size for p in self.pools}, key=str.lower)


def _is_expression(value: Any) -> bool:
    """An ARM template expression (``[resourceGroup().location]``), known only at deployment."""
    return isinstance(value, str) and value.startswith("[") and value.endswith("]")


def sizing(values: Mapping[str, Any], arm: bool, region: str | None = None) -> Sizing:
    """The sizes and counts of a deployment from its resolved variables (Terraform names) or
    parameters (``arm``: camelCase). ``region`` stands in for a location the values leave to the
    deployment (the ARM template's default: the resource group's region)."""
    name = arm_name if arm else (lambda n: n)

    def get(variable: str) -> Any:
        key = name(variable)
        if key not in values or values[key] is None or _is_expression(values[key]):
            raise DriverError(f"no value for {key}")
        value = values[key]
        if not arm and isinstance(value, str) and value.strip() not in ("", "null"):
            # A plan keeps `-var NAME=VALUE` as the text given; Terraform has already checked
            # that it converts to the variable's type, and converts it so.
            with contextlib.suppress(ValueError):
                value = json.loads(value.strip())
            if not isinstance(value, (bool, int, float)):
                value = values[key]
        return value

    def text(variable: str) -> str:
        value = get(variable)
        if not isinstance(value, str) or not value.strip():
            raise DriverError(f"{name(variable)} must be a string, got {value!r}")
        return value.strip()

    def count(variable: str | None) -> int:
        if variable is None:
            return 1
        value = get(variable)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)  # 1e400 and NaN in a JSON file: inf and nan
            or value != int(value)
        ):
            raise DriverError(f"{name(variable)} must be a whole number, got {value!r}")
        if value < 0:
            raise DriverError(f"{name(variable)} must be 0 or more, got {value!r}")
        if value > MAX_COUNT:
            raise DriverError(f"{name(variable)} must be at most {MAX_COUNT}, got {value!r}")
        return int(value)

    def flag(variable: str | None) -> bool:
        if variable is None:
            return False
        value = get(variable)
        if not isinstance(value, bool):
            raise DriverError(f"{name(variable)} must be true or false, got {value!r}")
        return value

    given = values.get(name(LOCATION))
    if given is not None and not _is_expression(given):
        region = text(LOCATION)
    if not region:
        raise DriverError(f"no value for {name(LOCATION)}")
    pools = tuple(
        Pool(
            p.name,
            text(p.vm_size),
            flag(p.spot),
            (count(p.min_count), count(p.default_count), count(p.max_count)),
        )
        for p in (HEAD, *POOLS)
    )
    return Sizing(region.lower(), pools)


# -- the price list ------------------------------------------------------------------------
class PricesUnavailable(Exception):
    """The Retail Prices API could not be asked or did not answer with a price list."""


@dataclass(frozen=True)
class Meter:
    vm_size: str
    spot: bool
    price: float
    """Per hour, in :attr:`currency`."""
    currency: str
    effective: str
    """``effectiveStartDate`` of this price."""


@dataclass(frozen=True)
class PriceList:
    region: str
    meters: dict[tuple[str, bool], Meter]
    """(VM size in lower case, Spot) -> its Linux hourly meter."""
    fetched_at: datetime.datetime
    cached: bool

    def meter(self, vm_size: str, spot: bool) -> Meter | None:
        return self.meters.get((vm_size.lower(), spot))


def query(region: str, vm_sizes: Iterable[str]) -> str:
    """The OData ``$filter`` for the Linux and Windows, regular and Spot meters of these sizes."""
    sizes = " or ".join(f"armSkuName eq '{s}'" for s in vm_sizes)
    return (
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and "
        f"armRegionName eq '{region}' and ({sizes})"
    )


def _first_url(url: str, region: str, vm_sizes: Iterable[str]) -> str:
    sep = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{sep}{urllib.parse.urlencode({'$filter': query(region, vm_sizes)})}"


def _get_json(url: str, timeout: float, read_timeout: float = FETCH_TIMEOUT_S) -> dict[str, Any]:
    try:
        body = untrusted.fetch(
            url, timeout, MAX_PAGE_BYTES, {"Accept": "application/json"}, read_timeout
        )
        doc = untrusted.loads(body)
    except untrusted.Unreadable as e:
        raise PricesUnavailable(str(e)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("Items"), list):
        raise PricesUnavailable("the answer has no Items list")
    return doc


def fetch_items(url: str, timeout: float = FETCH_DEADLINE_S) -> list[dict[str, Any]]:
    """Every item of a query, page after page (``NextPageLink``, followed only on the API's own
    scheme and host), all of them within ``timeout`` seconds."""
    items: list[dict[str, Any]] = []
    next_url: str | None = url
    end = time.monotonic() + timeout
    for _ in range(MAX_PAGES):
        if not next_url:
            return items
        left = end - time.monotonic()
        if left <= 0:
            raise PricesUnavailable(f"no whole price list within {timeout:g} s")
        try:
            doc = _get_json(next_url, left, min(left, FETCH_TIMEOUT_S))
        except PricesUnavailable as e:
            if str(e).startswith("no whole answer within"):
                raise PricesUnavailable(f"no whole price list within {timeout:g} s") from None
            raise
        items += [i for i in doc["Items"] if isinstance(i, dict)]
        link = doc.get("NextPageLink")
        next_url = link if isinstance(link, str) and link else None
        if next_url and not untrusted.same_origin(url, next_url):
            raise PricesUnavailable(
                f"its NextPageLink leads elsewhere ({untrusted.redact_url(next_url, 120)}): "
                "not followed"
            )
    raise PricesUnavailable(f"more than {MAX_PAGES} pages of prices: stopped following them")


def _is_linux_hour(item: Mapping[str, Any], region: str, vm_sizes: set[str]) -> bool:
    def field(key: str) -> str:
        value = item.get(key)
        return value if isinstance(value, str) else ""

    names = f"{field('skuName')} {field('meterName')}".lower()
    price = item.get("retailPrice")
    return (
        field("serviceName") == "Virtual Machines"
        and item.get("type", item.get("priceType", "Consumption")) == "Consumption"
        and field("armRegionName").lower() == region
        and field("armSkuName").lower() in vm_sizes
        and field("unitOfMeasure") == "1 Hour"
        and "windows" not in field("productName").lower()
        and "low priority" not in names
        and item.get("isPrimaryMeterRegion", True) is not False
        and isinstance(price, (int, float))
        and not isinstance(price, bool)
        and price >= 0
    )


def select(
    items: Iterable[Mapping[str, Any]], region: str, vm_sizes: Iterable[str], now: datetime.datetime
) -> dict[tuple[str, bool], Meter]:
    """The Linux hourly meter of each (size, Spot): the newest price already in effect."""
    wanted = {s.lower() for s in vm_sizes}
    today = now.strftime("%Y-%m-%dT%H:%M:%S")
    best: dict[tuple[str, bool], Meter] = {}
    for item in items:
        if not _is_linux_hour(item, region.lower(), wanted):
            continue
        names = f" {item.get('skuName', '')} {item.get('meterName', '')} ".lower()
        meter = Meter(
            vm_size=str(item["armSkuName"]),
            spot=" spot " in names,
            price=float(item["retailPrice"]),
            currency=str(item.get("currencyCode") or "USD"),
            effective=str(item.get("effectiveStartDate") or ""),
        )
        key = (meter.vm_size.lower(), meter.spot)
        old = best.get(key)
        if old is None or _better(meter, old, today):
            best[key] = meter
    return best


def _better(new: Meter, old: Meter, today: str) -> bool:
    """Prices in effect before future ones, the newest of those, then the higher one."""
    new_now, old_now = new.effective[:19] <= today, old.effective[:19] <= today
    if new_now != old_now:
        return new_now
    if new.effective != old.effective:
        return (new.effective > old.effective) == new_now
    return new.price > old.price


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def price_list(
    region: str,
    vm_sizes: Iterable[str],
    url: str,
    cache_dir: Path,
    now: Callable[[], datetime.datetime] = _utcnow,
    max_age_s: float = PRICES_CACHE_S,
) -> PriceList:
    """The Linux hourly prices of these sizes in this region, from the cache when it is younger
    than ``max_age_s``, else from the API (and cached)."""
    sizes = sorted({s for s in vm_sizes}, key=str.lower)
    first = _first_url(url, region, sizes)
    cache = cache_dir / f"{hashlib.sha256(first.encode()).hexdigest()[:32]}.json"
    moment = now()
    try:
        saved = json.loads(cache.read_text())
        fetched = datetime.datetime.fromisoformat(saved["fetched_at"])
        age = (moment - fetched).total_seconds()
        if saved.get("url") == first and 0 <= age <= max_age_s:
            meters = select(saved["items"], region, sizes, moment)
            return PriceList(region, meters, fetched, cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache, or one we cannot use: ask the API
    items = fetch_items(first)
    kept = [i for i in items if _is_linux_hour(i, region.lower(), {s.lower() for s in sizes})]
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"url": first, "fetched_at": moment.isoformat(), "items": kept}))
        tmp.replace(cache)
    except OSError:
        # A cache we cannot write only costs the next run a fetch; a half-written one goes.
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return PriceList(region, select(kept, region, sizes, moment), moment, cached=False)


# -- the estimate -------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    pool: Pool
    meter: Meter | None

    def at(self, count: int) -> float | None:
        if count == 0:
            return 0.0
        return None if self.meter is None else self.meter.price * count


@dataclass(frozen=True)
class Estimate:
    sizing: Sizing
    prices: PriceList
    lines: tuple[Line, ...]

    def total(self, which: int) -> float | None:
        """The cluster's hourly price at the pools' minimum (0), default (1) or maximum (2)."""
        parts = [line.at(line.pool.counts[which]) for line in self.lines]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)

    @property
    def currency(self) -> str:
        found = {line.meter.currency for line in self.lines if line.meter}
        return found.pop() if len(found) == 1 else "USD"

    @property
    def effective(self) -> str:
        """The newest ``effectiveStartDate`` among the prices used (a date)."""
        dates = [line.meter.effective[:10] for line in self.lines if line.meter]
        return max(dates) if dates else ""

    @property
    def missing(self) -> list[Pool]:
        return [line.pool for line in self.lines if line.meter is None]


def estimate(deployment: Sizing, prices: PriceList) -> Estimate:
    lines = tuple(Line(p, prices.meter(p.vm_size, p.spot)) for p in deployment.pools)
    return Estimate(deployment, prices, lines)
