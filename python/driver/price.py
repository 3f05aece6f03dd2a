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

A cluster with results storage (:data:`RESULTS_STORAGE`, mounted as its cluster storage) is
priced with it: the account the results stack creates (:data:`RESULTS_ACCOUNT`) per GB-month
stored and per 10,000 writes and reads, and the cluster's private endpoint to it per hour and per
GB processed (:func:`storage_prices`: two more queries, cached alike). A meter the price list
lacks stays ``None``: never a guessed number.

Library code: nothing here prints. A price list that cannot be had raises
:class:`PricesUnavailable`, which ``up`` reports in one line and goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
    """A variable true for Spot VMs (the workers' ``worker_spot_enabled``)."""
    priority: str | None = None
    """A variable ``"Regular"`` or ``"Spot"`` (the head's ``head_priority``); a stack without it
    (made before the head could be Spot) has a regular head."""
    min_count: str | None = None
    default_count: str | None = None
    max_count: str | None = None
    """No count variables: exactly one VM (the head)."""


LOCATION = "location"
MAX_COUNT = 1000
"""A scale set holds at most 1,000 VMs."""
HEAD = PoolVariables("head", "head_vm_size", priority="head_priority")
SPOT_PRIORITY = "Spot"
"""The value of a priority variable (:attr:`PoolVariables.priority`) that makes the VM Spot."""
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


RESULTS_STORAGE = "results_storage_account_id"
"""The results storage account's id, empty without one (cluster storage off)."""


def variable_names() -> list[str]:
    """Every Terraform variable the price reads."""
    names = [LOCATION, RESULTS_STORAGE]
    for pool in (HEAD, *POOLS):
        names += [
            n
            for n in (
                pool.vm_size,
                pool.spot,
                pool.priority,
                pool.min_count,
                pool.default_count,
                pool.max_count,
            )
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
    zones: tuple[str, ...] = ()
    """The availability zones the pool's VMs are placed in; none: regional (Azure chooses)."""
    priority_mix: tuple[int, int] | None = None
    """A Spot pool's Spot Priority Mix (Flexible scale sets): (regular VMs first, percent of the
    VMs above them that are regular too); None: every VM of the pool's priority."""
    mix_sizes: tuple[str, ...] = ()
    """Instance Mix (Flexible scale sets): every size the pool's VMs may take, ``vm_size``
    among them; (): ``vm_size`` only."""

    @property
    def sizes(self) -> tuple[str, ...]:
        """The sizes the pool's VMs may have."""
        return self.mix_sizes or (self.vm_size,)

    def regular(self, count: int) -> tuple[int, int]:
        """(fewest, most) regular VMs among ``count`` VMs of the pool. Spot Priority Mix, as
        Azure states it: the first ``base`` VMs regular, then ``percent`` % of those above them
        (its example: base 10, 50 %, 30 VMs = 20 regular). Azure publishes no rounding of a
        split that is not a whole number of VMs: the two bounds are both ways of rounding."""
        if not self.spot:
            return count, count
        if self.priority_mix is None:
            return 0, 0
        base, percent = self.priority_mix
        first = min(count, base)
        above = (count - first) * percent
        return first + above // 100, first + -(-above // 100)


@dataclass(frozen=True)
class Sizing:
    region: str
    pools: tuple[Pool, ...]
    """The head first, then each worker pool."""
    results_storage: bool = False
    """Whether the cluster has results storage (:data:`RESULTS_STORAGE` set)."""

    @property
    def vm_sizes(self) -> list[str]:
        return sorted({s for p in self.pools for s in p.sizes}, key=str.lower)


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

    def priority(variable: str | None) -> bool:
        if variable is None or values.get(name(variable)) is None:
            return False
        value = get(variable)
        if value not in ("Regular", SPOT_PRIORITY):
            raise DriverError(f'{name(variable)} must be "Regular" or "Spot", got {value!r}')
        return bool(value == SPOT_PRIORITY)

    given = values.get(name(LOCATION))
    if given is not None and not _is_expression(given):
        region = text(LOCATION)
    if not region:
        raise DriverError(f"no value for {name(LOCATION)}")
    pools = tuple(
        Pool(
            p.name,
            text(p.vm_size),
            flag(p.spot) or priority(p.priority),
            (count(p.min_count), count(p.default_count), count(p.max_count)),
        )
        for p in (HEAD, *POOLS)
    )
    # Declared with default "" in both stacks; a stack without it has no results storage.
    storage = values.get(name(RESULTS_STORAGE))
    if storage is not None and not isinstance(storage, str):
        raise DriverError(f"{name(RESULTS_STORAGE)} must be a string, got {storage!r}")
    if storage and _is_expression(storage):
        raise DriverError(f"no value for {name(RESULTS_STORAGE)}")
    return Sizing(region.lower(), pools, bool(storage and storage.strip()))


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


def _first_url(url: str, odata_filter: str) -> str:
    sep = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{sep}{urllib.parse.urlencode({'$filter': odata_filter})}"


# Hand-written: the Retail Prices API is public and unauthenticated, and no Azure SDK covers it.
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


def _better(new: Meter | Rate, old: Meter | Rate, today: str) -> bool:
    """Prices in effect before future ones, the newest of those, then the higher one."""
    new_now, old_now = new.effective[:19] <= today, old.effective[:19] <= today
    if new_now != old_now:
        return new_now
    if new.effective != old.effective:
        return (new.effective > old.effective) == new_now
    return new.price > old.price


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _cached_items(
    first: str,
    keep: Callable[[Mapping[str, Any]], bool],
    cache_dir: Path,
    moment: datetime.datetime,
    max_age_s: float,
) -> tuple[list[dict[str, Any]], datetime.datetime, bool]:
    """The items of the query ``first`` that ``keep`` keeps, from the cache when it is younger
    than ``max_age_s``, else from the API (and cached): (items, fetched at, from the cache)."""
    cache = cache_dir / f"{hashlib.sha256(first.encode()).hexdigest()[:32]}.json"
    try:
        saved = json.loads(cache.read_text())
        fetched = datetime.datetime.fromisoformat(saved["fetched_at"])
        age = (moment - fetched).total_seconds()
        if saved.get("url") == first and 0 <= age <= max_age_s and isinstance(saved["items"], list):
            return [i for i in saved["items"] if isinstance(i, dict)], fetched, True
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache, or one we cannot use: ask the API
    kept = [i for i in fetch_items(first) if keep(i)]
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"url": first, "fetched_at": moment.isoformat(), "items": kept}))
        tmp.replace(cache)
    except OSError:
        # A cache we cannot write only costs the next run a fetch; a half-written one goes.
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return kept, moment, False


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
    wanted = {s.lower() for s in sizes}
    moment = now()
    items, fetched, cached = _cached_items(
        _first_url(url, query(region, sizes)),
        lambda i: _is_linux_hour(i, region.lower(), wanted),
        cache_dir,
        moment,
        max_age_s,
    )
    return PriceList(region, select(items, region, sizes, moment), fetched, cached)


# -- the results storage ---------------------------------------------------------------------
@dataclass(frozen=True)
class StorageAccount:
    """The results storage account, as the results stacks create it (infra/terraform/results,
    infra/bicep/results.bicep: a test holds both to this)."""

    kind: str
    performance: str
    access_tier: str
    replication: str

    @property
    def sku_name(self) -> str:
        """The price list's ``skuName`` of its blobs: "Hot LRS"."""
        return f"{self.access_tier} {self.replication}"

    def __str__(self) -> str:
        return f"{self.performance} {self.kind}, {self.access_tier} {self.replication}"


RESULTS_ACCOUNT = StorageAccount("StorageV2", "Standard", "Hot", "LRS")
BLOB_PRODUCTS = ("General Block Blob v2", "Blob Storage")
"""A general-purpose v2 account's block blobs, in order of preference: in some regions the
price list has its Hot LRS meters only under "Blob Storage" (the same meters and prices)."""
PRIVATE_LINK = ("Virtual Network", "Virtual Network Private Link")
"""(serviceName, productName) of private endpoints; their meters are region "Global"."""
GLOBAL_REGION = "global"


@dataclass(frozen=True)
class Wanted:
    """One meter of the price list."""

    label: str
    service: str
    products: tuple[str, ...]
    sku: str
    meter: str
    unit: str
    """``unitOfMeasure``; a meter in another unit is not this one."""


def storage_meters(account: StorageAccount = RESULTS_ACCOUNT) -> dict[str, Wanted]:
    """The results storage's meters: data stored, writes and reads (the account's region), the
    private endpoint's hours and the data it processes (region "Global")."""
    blob = ("Storage", BLOB_PRODUCTS, account.sku_name)
    link = (*PRIVATE_LINK[:1], PRIVATE_LINK[1:], "Standard")
    return {
        "stored": Wanted("data stored", *blob, f"{account.sku_name} Data Stored", "1 GB/Month"),
        "write": Wanted("write operations", *blob, f"{account.sku_name} Write Operations", "10K"),
        "read": Wanted("read operations", *blob, f"{account.access_tier} Read Operations", "10K"),
        "endpoint": Wanted("private endpoint", *link, "Standard Private Endpoint", "1 Hour"),
        "ingress": Wanted(
            "private endpoint, data in", *link, "Standard Data Processed - Ingress", "1 GB"
        ),
        "egress": Wanted(
            "private endpoint, data out", *link, "Standard Data Processed - Egress", "1 GB"
        ),
    }


@dataclass(frozen=True)
class Rate:
    price: float
    """Per :attr:`unit`, in :attr:`currency`."""
    unit: str
    currency: str
    effective: str
    region: str
    """``armRegionName``: the account's region or "Global"."""
    up_to: float | None = None
    """Where the next, lower price tier starts (in units of :attr:`unit`); ``None``: no tier."""


@dataclass(frozen=True)
class StoragePrices:
    region: str
    account: StorageAccount
    wanted: dict[str, Wanted]
    rates: dict[str, Rate | None]
    """:func:`storage_meters`' keys -> the rate, ``None``: not in the price list."""
    fetched_at: datetime.datetime
    cached: bool


def storage_queries(region: str, account: StorageAccount = RESULTS_ACCOUNT) -> list[str]:
    """The OData ``$filter`` of the account's blob meters in its region, and of private
    endpoints' meters (in the region, or "Global" where the price list keeps them)."""
    products = " or ".join(f"productName eq '{p}'" for p in BLOB_PRODUCTS)
    return [
        "serviceName eq 'Storage' and priceType eq 'Consumption' and "
        f"armRegionName eq '{region}' and skuName eq '{account.sku_name}' and ({products})",
        f"serviceName eq '{PRIVATE_LINK[0]}' and priceType eq 'Consumption' and "
        f"productName eq '{PRIVATE_LINK[1]}' and "
        f"(armRegionName eq '{region}' or armRegionName eq 'Global')",
    ]


def _rate_rank(item: Mapping[str, Any], want: Wanted, region: str) -> tuple[int, int] | None:
    """Whether ``item`` is a price (any tier) of ``want`` in ``region`` (or Global), and how good
    a match it is (lower is better: the region before Global, then the product's order)."""

    def field(key: str) -> str:
        value = item.get(key)
        return value if isinstance(value, str) else ""

    price = item.get("retailPrice")
    where = field("armRegionName").lower()
    product = field("productName").lower()
    products = [p.lower() for p in want.products]
    if not (
        field("serviceName") == want.service
        and item.get("type", item.get("priceType", "Consumption")) == "Consumption"
        and where in (region, GLOBAL_REGION)
        and product in products
        and field("skuName").lower() == want.sku.lower()
        and field("meterName").lower() == want.meter.lower()
        and field("unitOfMeasure") == want.unit
        and _tier(item) is not None
        and item.get("isPrimaryMeterRegion", True) is not False
        and isinstance(price, (int, float))
        and not isinstance(price, bool)
        and price >= 0
    ):
        return None
    return (0 if where == region else 1, products.index(product))


def _tier(item: Mapping[str, Any]) -> float | None:
    """The units from which this price applies (``tierMinimumUnits``; absent: 0)."""
    value = item.get("tierMinimumUnits", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        return None
    return float(value)


def select_rates(
    items: Iterable[Mapping[str, Any]],
    region: str,
    wanted: Mapping[str, Wanted],
    now: datetime.datetime,
) -> dict[str, Rate | None]:
    """Each wanted meter's first tier (``tierMinimumUnits`` 0) in effect now (as :func:`select`),
    up to where its next tier starts; ``None`` where the price list has none."""
    today = now.strftime("%Y-%m-%dT%H:%M:%S")
    region = region.lower()
    found: dict[str, Rate | None] = {}
    for key, want in wanted.items():
        ranked = [(r, i) for i in items if (r := _rate_rank(i, want, region)) is not None]
        best: tuple[tuple[int, int], Rate] | None = None
        for rank, item in ranked:
            if _tier(item) != 0:
                continue
            rate = Rate(
                price=float(item["retailPrice"]),
                unit=want.unit,
                currency=str(item.get("currencyCode") or "USD"),
                effective=str(item.get("effectiveStartDate") or ""),
                region=str(item.get("armRegionName")),
            )
            if (
                best is None
                or rank < best[0]
                or (rank == best[0] and _better(rate, best[1], today))
            ):
                best = (rank, rate)
        if best is None:
            found[key] = None
            continue
        higher = [t for r, i in ranked if r == best[0] and (t := _tier(i))]
        found[key] = dataclasses.replace(best[1], up_to=min(higher) if higher else None)
    return found


def storage_prices(
    region: str,
    url: str,
    cache_dir: Path,
    now: Callable[[], datetime.datetime] = _utcnow,
    max_age_s: float = PRICES_CACHE_S,
    account: StorageAccount = RESULTS_ACCOUNT,
) -> StoragePrices:
    """The results storage's prices in this region (:func:`storage_meters`), each query from
    the cache when it is younger than ``max_age_s``, else from the API (and cached)."""
    wanted = storage_meters(account)
    region_l = region.lower()
    moment = now()
    items: list[dict[str, Any]] = []
    oldest, all_cached = moment, True
    for q in storage_queries(region, account):
        got, fetched, cached = _cached_items(
            _first_url(url, q),
            lambda i: any(_rate_rank(i, w, region_l) is not None for w in wanted.values()),
            cache_dir,
            moment,
            max_age_s,
        )
        items += got
        oldest, all_cached = min(oldest, fetched), all_cached and cached
    rates = select_rates(items, region, wanted, moment)
    return StoragePrices(region, account, wanted, rates, oldest, all_cached)


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
    storage: StoragePrices | None = None
    """The results storage's prices; ``None`` without results storage."""

    @property
    def endpoint(self) -> Rate | None:
        """The private endpoint's hourly rate (with results storage; ``None``: not found)."""
        return None if self.storage is None else self.storage.rates["endpoint"]

    def total(self, which: int) -> float | None:
        """The cluster's hourly price at the pools' minimum (0), default (1) or maximum (2):
        its VMs, and its private endpoint to the results storage."""
        parts = [line.at(line.pool.counts[which]) for line in self.lines]
        if self.storage is not None:
            parts.append(None if self.endpoint is None else self.endpoint.price)
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)

    @property
    def currency(self) -> str:
        found = {line.meter.currency for line in self.lines if line.meter}
        return found.pop() if len(found) == 1 else "USD"

    @property
    def effective(self) -> str:
        """The newest ``effectiveStartDate`` among the prices used (a date)."""
        dates = [line.meter.effective[:10] for line in self.lines if line.meter]
        dates += [self.endpoint.effective[:10]] if self.endpoint else []
        return max(dates) if dates else ""

    @property
    def missing(self) -> list[Pool]:
        return [line.pool for line in self.lines if line.meter is None]


def estimate(
    deployment: Sizing, prices: PriceList, storage: StoragePrices | None = None
) -> Estimate:
    """The deployment's price; ``storage``: the results storage's prices (with results storage,
    :attr:`Sizing.results_storage`)."""
    if deployment.results_storage and storage is None:
        raise ValueError("a deployment with results storage needs its prices")
    lines = tuple(line for p in deployment.pools for line in _lines(p, prices))
    return Estimate(deployment, prices, lines, storage if deployment.results_storage else None)


def _lines(pool: Pool, prices: PriceList) -> list[Line]:
    """A pool's price lines: the pool, or with Spot Priority Mix its regular share and its Spot
    share at each count (the most regular VMs a split may have: the dearer rounding), each at
    its size's price, or with Instance Mix at the dearest of its sizes (an upper bound: which
    sizes Azure takes is its choice). A line whose price the list lacks names that size."""
    parts = [pool]
    if pool.spot and pool.priority_mix is not None:
        low, default, high = (pool.regular(n)[1] for n in pool.counts)
        most = (low, default, high)
        left = (pool.counts[0] - low, pool.counts[1] - default, pool.counts[2] - high)
        parts = [
            dataclasses.replace(pool, name=f"{pool.name} regular", spot=False, counts=most),
            dataclasses.replace(pool, name=f"{pool.name} Spot", counts=left),
        ]
    lines = []
    for part in parts:
        meters = [(size, prices.meter(size, part.spot)) for size in pool.sizes]
        absent = [size for size, meter in meters if meter is None]
        if absent:
            lines.append(Line(dataclasses.replace(part, vm_size=absent[0]), None))
            continue
        size, meter = max(meters, key=lambda m: m[1].price if m[1] else 0.0)
        lines.append(Line(dataclasses.replace(part, vm_size=size), meter))
    return lines
