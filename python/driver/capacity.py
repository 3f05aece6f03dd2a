"""What Azure would refuse before a deployment: vCPU quota and VM size availability.

``up`` and ``price`` ask two Compute APIs about the cluster at its maximum size (the head and every
worker pool at its ``maxCount``) and refuse a deployment Azure would refuse, before anything is
created:

* **Usages** (``GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{l}/usages``,
  api-version :data:`USAGES_API_VERSION`, paged by ``nextLink``): ``{"value": [{"name":
  {"value": "standardDSv5Family"}, "currentValue": N, "limit": M, "unit": "Count"}, ...]}``.
  Azure's rule, as its quota documentation states it: a regular VM counts against its family's
  quota and the region's total (``cores``); a Spot VM counts against the region's Spot quota
  (``lowPriorityCores``) only.
* **Resource SKUs** (``GET /subscriptions/{sub}/providers/Microsoft.Compute/skus?$filter=location
  eq '{l}'``, api-version :data:`SKUS_API_VERSION`): each size's ``family``, its ``vCPUs`` and
  ``LowPriorityCapable`` capabilities, its zones (``locationInfo``) and its ``restrictions``
  (``type`` Location or Zone, ``restrictionInfo.locations``/``zones``, ``reasonCode``
  ``QuotaId`` or ``NotAvailableForSubscription``). A size the answer does not list is not offered
  in the region.
* **Spot placement scores** (``POST .../locations/{l}/placementScores/spot/generate``,
  api-version :data:`PLACEMENT_API_VERSION`, Azure's RecommenderRP specification): for each Spot
  pool, its size and maximum count per zone (the published, zonal form). Information only: a score
  is never a reason to refuse; without the role it needs (Azure answers 403) it is "not checked".

A regional pool (no ``zones``, the default) and the head are placed by Azure, so a size restricted
in some zones of the region is a note for them (Azure places the VMs in the others); a pool with
``zones`` has its VMs in exactly those zones, so there a size restricted (or not offered) in one of
the pool's zones is refused for that pool. Restricted in every zone it offers, or in the whole
region, a size is refused for every pool. In a resource group that already holds the cluster (an
update), its own VMs already count in Azure's usage: there the need is compared with the quota's
limit alone.

The functions that read and judge are pure (:func:`usages`, :func:`skus`, :func:`judge`);
:func:`ask` does the asking through :class:`driver.arm.ResourceManager`. Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from driver import price, untrusted
from driver.errors import DriverError, shaped

USAGES_API_VERSION = "2024-07-01"
SKUS_API_VERSION = "2021-07-01"
PLACEMENT_API_VERSION = "2025-06-05"
TOTAL = "cores"
"""The usage that counts every regular VM's vCPUs in the region."""
SPOT = "lowPriorityCores"
"""The usage that counts every Spot VM's vCPUs in the region."""
MAX_PAGES = 20
"""One region's usages and VM sizes are one page each; more is a broken link."""
WORKER_POOLS = "worker_pools"
"""The Terraform variable of the worker pools (``workerPools`` in Bicep/ARM)."""


# -- the cluster at its maximum size ---------------------------------------------------------
def sizing(values: Mapping[str, Any], arm: bool, region: str | None = None) -> price.Sizing:
    """The head and every worker pool, with their counts (:func:`driver.price.sizing`), the
    pools of ``worker_pools``/``workerPools`` in place of the single ``workers`` pool when there
    are any (what a pool leaves out is the ``worker_*`` variable's)."""
    base = price.sizing(values, arm=arm, region=region)
    name = price.arm_name if arm else (lambda n: n)
    given = values.get(name(WORKER_POOLS))
    if not given:
        return base
    head, workers = base.pools[0], base.pools[1]
    entries: list[tuple[str, Mapping[str, Any]]]
    if isinstance(given, Mapping):  # Terraform: a map of pool name -> object
        entries = [(str(k), v) for k, v in given.items()]
    elif isinstance(given, list):  # ARM: a list of objects with a name
        entries = [(str(p.get("name")) if isinstance(p, Mapping) else "?", p) for p in given]
    else:
        raise DriverError(f"{name(WORKER_POOLS)} must be a list of pools, got {given!r}")
    pools = [head]
    for pool_name, pool in entries:
        if not isinstance(pool, Mapping):
            raise DriverError(f"{name(WORKER_POOLS)}: pool {pool_name} is not an object")

        def field_(key: str, default: Any, pool: Mapping[str, Any] = pool) -> Any:
            value = pool.get(name(key))
            return default if value is None else value

        size = field_("vm_size", workers.vm_size)
        spot = field_("spot_enabled", workers.spot)
        counts = tuple(
            field_(k, d)
            for k, d in zip(
                ("min_count", "default_count", "max_count"), workers.counts, strict=True
            )
        )
        zones = field_("zones", [])
        if not isinstance(size, str) or not isinstance(spot, bool):
            raise DriverError(f"{name(WORKER_POOLS)}: pool {pool_name} has a bad vmSize or Spot")
        if not isinstance(zones, list) or not all(isinstance(z, str) for z in zones):
            raise DriverError(
                f"{name(WORKER_POOLS)}: pool {pool_name}'s zones must be a list of zones"
            )
        if not all(_whole(c) for c in counts):
            raise DriverError(f"{name(WORKER_POOLS)}: pool {pool_name}'s counts must be whole")
        low, default, high = (int(c) for c in counts)
        pools.append(
            price.Pool(
                pool_name, size.strip(), spot, (low, default, high), tuple(zones),
                _priority_mix(pool_name, field_("priority_mix", None), spot, name),
                _mix_sizes(pool_name, field_("instance_mix", None), size.strip(), name),
            )
        )  # fmt: skip
    return dataclasses.replace(base, pools=tuple(pools))


def _priority_mix(pool_name: str, given: Any, spot: bool, name: Any) -> tuple[int, int] | None:
    """A pool's Spot Priority Mix as (base, percent), None without one (a regular pool has
    none: its VMs are all regular)."""
    if given is None:
        return None
    where = f"{name(WORKER_POOLS)}: pool {pool_name}'s {name('priority_mix')}"
    if not isinstance(given, Mapping):
        raise DriverError(f"{where} must be an object")
    values = [given.get(name(k)) for k in ("base_regular_count", "regular_percentage_above_base")]
    base, percent = (0 if v is None else v for v in values)
    if not all(_whole(v) and v <= 100 for v in (base, percent)):
        raise DriverError(f"{where}: its two numbers must be whole, 0 to 100")
    return (int(base), int(percent)) if spot else None


def _mix_sizes(pool_name: str, given: Any, size: str, name: Any) -> tuple[str, ...]:
    """A pool's Instance Mix sizes, () without one."""
    if given is None:
        return ()
    where = f"{name(WORKER_POOLS)}: pool {pool_name}'s {name('instance_mix')}"
    sizes = given.get(name("vm_sizes")) if isinstance(given, Mapping) else None
    if not isinstance(sizes, list) or not all(isinstance(s, str) and s.strip() for s in sizes):
        raise DriverError(f"{where} must list its VM sizes in {name('vm_sizes')}")
    found = tuple(dict.fromkeys(s.strip() for s in sizes))
    if size.lower() not in {s.lower() for s in found}:
        raise DriverError(f"{where} must include the pool's VM size {size}")
    return found


def _whole(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value == int(value)
        and 0 <= value <= price.MAX_COUNT
    )


# -- what Azure answers --------------------------------------------------------------------
@dataclass(frozen=True)
class Usage:
    name: str
    current: int
    limit: int

    @property
    def free(self) -> int:
        return max(self.limit - self.current, 0)


@dataclass(frozen=True)
class Sku:
    name: str
    family: str
    vcpus: int | None
    spot_capable: bool | None
    """``LowPriorityCapable``; None where Azure does not say."""
    zones: tuple[str, ...]
    """The zones of the region the size is offered in (none: a region without zones)."""
    region_restriction: str | None = None
    """The reason code of a Location restriction in this region."""
    zone_restrictions: dict[str, str] = field(default_factory=dict)
    """Zone -> the reason code of its restriction."""


def usages(pages: Iterable[Any]) -> dict[str, Usage]:
    """The usages of the Usages API's pages, by name in lower case."""
    found: dict[str, Usage] = {}
    with shaped("the Compute usages"):
        for page in pages:
            for item in _items(page):
                name = item["name"]["value"]
                current, limit = item["currentValue"], item["limit"]
                if not isinstance(name, str) or not all(_count(v) for v in (current, limit)):
                    raise TypeError(f"usage {untrusted.shown(str(name), 60)}: not a count")
                found[name.lower()] = Usage(name, int(current), int(limit))
    return found


def _items(page: Any) -> list[Any]:
    items = page["value"]
    if not isinstance(items, list):
        raise TypeError(f"value is a {type(items).__name__}, not a list")
    return items


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def skus(pages: Iterable[Any], region: str) -> dict[str, Sku]:
    """The VM sizes offered in ``region`` of the Resource SKUs API's pages, by name in lower
    case."""
    found: dict[str, Sku] = {}
    with shaped("the Resource SKUs"):
        for page in pages:
            for item in _items(page):
                if str(item.get("resourceType", "")).lower() != "virtualmachines":
                    continue
                sku = _sku(item, region)
                if sku is not None:
                    found[sku.name.lower()] = sku
    return found


def _sku(item: Mapping[str, Any], region: str) -> Sku | None:
    infos = [
        i for i in item.get("locationInfo") or [] if str(i["location"]).lower() == region.lower()
    ]
    listed = [str(x).lower() for x in item.get("locations") or []]
    if not infos and region.lower() not in listed:
        return None
    zones = tuple(sorted({str(z) for i in infos for z in i.get("zones") or []}))
    capabilities = {str(c["name"]).lower(): c.get("value") for c in item.get("capabilities") or []}
    vcpus = capabilities.get("vcpus")
    spot = capabilities.get("lowprioritycapable")
    region_reason, zone_reasons = None, {}
    for r in item.get("restrictions") or []:
        info = r.get("restrictionInfo") or {}
        reason = str(r.get("reasonCode") or "restricted")
        kind = str(r.get("type", "")).lower()
        where = [str(x).lower() for x in (info.get("locations") or r.get("values") or [])]
        if where and region.lower() not in where:
            continue
        if kind == "location":
            region_reason = reason
        elif kind == "zone":
            for zone in info.get("zones") or []:
                zone_reasons[str(zone)] = reason
    return Sku(
        name=str(item["name"]),
        family=str(item.get("family") or ""),
        vcpus=int(vcpus) if isinstance(vcpus, str) and vcpus.isdigit() else None,
        spot_capable=None if not isinstance(spot, str) else spot.lower() == "true",
        zones=zones,
        region_restriction=region_reason,
        zone_restrictions=zone_reasons,
    )


def scores(answer: Any) -> dict[str, str]:
    """``{zone: score}`` of a placement scores answer (one size, one region)."""
    found: dict[str, str] = {}
    with shaped("the Spot placement scores"):
        for item in answer["placementScores"]:
            zone = item.get("availabilityZone") or "regional"
            found[untrusted.shown(str(zone), 10)] = untrusted.shown(str(item["score"]), 30)
    return found


# -- the judgement --------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """A pool's VMs of one size and priority at the cluster's maximum size: the pool itself, or
    with Spot Priority Mix its regular share and its Spot share, each of every size of an
    Instance Mix (any of its VMs may be of any of them)."""

    pool: price.Pool
    vm_size: str
    spot: bool
    count: int
    """How many of the pool's VMs may be of this size and priority (a mix's share: its most)."""
    sku: Sku | None
    quota: str
    """The usage these vCPUs count against (the size's family's, or :data:`SPOT`)."""
    available: str
    """What the Resource SKUs API says of the size here, in a few words."""
    score: str = ""
    """The Spot placement score per zone ("" for regular VMs)."""

    @property
    def vcpus(self) -> int | None:
        return None if self.sku is None or self.sku.vcpus is None else self.sku.vcpus * self.count


@dataclass(frozen=True)
class Quota:
    name: str
    need: int
    usage: Usage | None
    """None: Azure's usages do not list it."""
    existing: bool
    """The deployment updates a resource group: compared with the limit alone."""

    @property
    def room(self) -> int | None:
        if self.usage is None:
            return None
        return self.usage.limit if self.existing else self.usage.free

    @property
    def short(self) -> bool:
        return self.room is not None and self.need > self.room


@dataclass(frozen=True)
class Check:
    region: str
    rows: tuple[Row, ...]
    quotas: tuple[Quota, ...]
    problems: tuple[str, ...]
    """What Azure would refuse, a line each."""
    notes: tuple[str, ...]
    """What the check could not see, or what does not stop a deployment."""

    @property
    def fits(self) -> bool:
        return not self.problems


QUOTA_NAMES = {TOTAL: "regional vCPUs", SPOT: "Spot vCPUs"}


def judge(
    deployment: price.Sizing,
    found_usages: Mapping[str, Usage],
    found_skus: Mapping[str, Sku],
    spot_scores: Mapping[str, str] | None = None,
    existing: bool = False,
) -> Check:
    """The rows, the quota sums and the problems of the cluster at its maximum size.
    ``spot_scores``: size (lower case) -> its score text; ``existing``: the resource group
    already exists (its VMs count in Azure's usage already)."""
    region = deployment.region
    rows: list[Row] = []
    problems: list[str] = []
    notes: list[str] = []
    needs: dict[str, int] = {}
    for pool in deployment.pools:
        for size in pool.sizes:
            sku = found_skus.get(size.lower())
            available, problem, said = _availability(pool, size, sku, region)
            problems += [problem] if problem and problem not in problems else []
            notes += [n for n in said if n not in notes]
            for spot, count in _shares(pool):
                quota = SPOT if spot else (sku.family if sku and sku.family else "?")
                shown = available
                if spot and problem is None and sku is not None and sku.spot_capable is False:
                    # A Priority Mix's Spot share (a pool all Spot is judged so above).
                    shown = _NOT_SPOT
                    problems.append(_not_spot(pool, size, region))
                score = (spot_scores or {}).get(size.lower(), "") if spot else ""
                rows.append(Row(pool, size, spot, count, sku, quota, shown, score))
        for spot, count in _shares(pool):
            _need(needs, pool, spot, count, found_skus)
    quotas: list[Quota] = []
    for name, need in needs.items():
        sums = Quota(name, need, found_usages.get(name.lower()), existing)
        quotas.append(sums)
        label = _quota_label(name)
        if sums.usage is None:
            if need:
                notes.append(f"Azure's usages list no quota {label}: not checked")
        elif sums.short:
            usage = sums.usage
            have = (
                f"the limit is {usage.limit}" if existing else f"{usage.free} of {usage.limit} free"
            )
            problems.append(
                f"quota {label} in {region}: the cluster needs {need} vCPUs at its maximum size, "
                f"{have}"
            )
    return Check(region, tuple(rows), tuple(quotas), tuple(problems), tuple(notes))


def _shares(pool: price.Pool) -> list[tuple[bool, int]]:
    """(Spot, how many VMs at most) of the pool at its maximum: all of its priority, or with
    Spot Priority Mix its regular share and its Spot share, each rounded the way that needs more
    of its quota (Azure publishes no rounding: both quotas must hold either)."""
    count = pool.counts[2]
    if not pool.spot or pool.priority_mix is None:
        return [(pool.spot, count)]
    fewest, most = pool.regular(count)
    return [(False, most), (True, count - fewest)]


def _need(
    needs: dict[str, int], pool: price.Pool, spot: bool, count: int, found: Mapping[str, Sku]
) -> None:
    """Add what ``count`` VMs of the pool of this priority need of each quota: Spot VMs the
    Spot quota, regular ones their family's and the region's total; with Instance Mix any VM
    may be of any of its sizes, so each family needs them all at its largest size there, and
    each total all of them at the largest size of the mix (Azure asks for quota for every size
    of a mix)."""
    known = [
        s for s in (found.get(size.lower()) for size in pool.sizes)
        if s is not None and s.vcpus is not None and (spot or s.family)
    ]  # fmt: skip
    if not known:
        return
    largest = max(s.vcpus or 0 for s in known)
    if spot:
        needs[SPOT] = needs.get(SPOT, 0) + count * largest
        return
    for family in dict.fromkeys(s.family for s in known):
        most = max(s.vcpus or 0 for s in known if s.family == family)
        needs[family] = needs.get(family, 0) + count * most
    needs[TOTAL] = needs.get(TOTAL, 0) + count * largest


_NOT_SPOT = "not as Spot"


def _not_spot(pool: price.Pool, size: str, region: str) -> str:
    return f"{pool.name}: {size} cannot run as Spot in {region} (LowPriorityCapable False)"


def _availability(
    pool: price.Pool, size: str, sku: Sku | None, region: str
) -> tuple[str, str | None, list[str]]:
    """What the Resource SKUs API says of one size of the pool: (in a few words, the problem
    or None, the notes)."""
    who = f"{pool.name}: {size}"
    notes = []
    if sku is not None and sku.vcpus is None and pool.counts[2]:
        notes.append(f"{who}: the Resource SKUs API gives no vCPUs: its quota is not checked")
    if sku is None:
        return "not offered", f"{who} is not offered in {region}", notes
    if sku.region_restriction:
        return (
            f"restricted ({sku.region_restriction})",
            f"{who} is restricted in {region} for this subscription ({sku.region_restriction})",
            notes,
        )
    if sku.zones and not open_zones(sku):
        return (
            "restricted in every zone",
            f"{who} is restricted in every zone of {region} ({_reasons(sku)})",
            notes,
        )
    if pool.zones and (refused := _zones_refused(pool, sku)):
        return (
            f"not in zone {', '.join(refused)}",
            f"{who} is {_zone_reasons(sku, refused)} of {region}, one of the pool's zones "
            f"({', '.join(pool.zones)})",
            notes,
        )
    if pool.spot and pool.priority_mix is None and sku.spot_capable is False:
        return _NOT_SPOT, _not_spot(pool, size, region), notes
    if sku.zone_restrictions and not pool.zones:
        closed = ", ".join(sorted(sku.zone_restrictions))
        notes.insert(
            0,
            f"{who} is restricted in zone {closed} of {region} ({_reasons(sku)}); its VMs are "
            f"regional (no zones given), so Azure places them in zone "
            f"{', '.join(open_zones(sku))}",
        )
        return f"not in zone {closed}", None, notes
    return "yes", None, notes


def _quota_label(name: str) -> str:
    plain = QUOTA_NAMES.get(name)
    return f"{name} ({plain})" if plain else name


def _reasons(sku: Sku) -> str:
    return ", ".join(sorted(set(sku.zone_restrictions.values())))


def _zones_refused(pool: price.Pool, sku: Sku) -> tuple[str, ...]:
    """The pool's zones where the size is restricted or not offered."""
    return tuple(z for z in pool.zones if z in sku.zone_restrictions or z not in sku.zones)


def _zone_reasons(sku: Sku, zones: tuple[str, ...]) -> str:
    """The zones' refusal in words: restricted in zone 2 (QuotaId), not offered in zone 3, or
    both joined."""
    restricted = [z for z in zones if z in sku.zone_restrictions]
    absent = [z for z in zones if z not in sku.zone_restrictions]
    parts = []
    if restricted:
        reasons = ", ".join(sorted({sku.zone_restrictions[z] for z in restricted}))
        parts.append(f"restricted in zone {', '.join(restricted)} ({reasons})")
    if absent:
        parts.append(f"not offered in zone {', '.join(absent)}")
    return " and ".join(parts)


def open_zones(sku: Sku) -> tuple[str, ...]:
    """The zones of the region where the size is offered and not restricted."""
    return tuple(z for z in sku.zones if z not in sku.zone_restrictions)


# -- asking Azure ---------------------------------------------------------------------------
# Hand-written REST, not azure-mgmt-compute's usage/resource_skus pagers: those would follow a
# nextLink to any host with the token, and Spot placement scores have no typed client there.
class Requester(Protocol):
    """What :func:`ask` needs of :class:`driver.arm.ResourceManager`."""

    base: str
    subscription: str

    def request(
        self, method: str, url: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 202)
    ) -> tuple[int, dict[str, str], Any]: ...


class Unchecked(Exception):
    """Azure's usages or VM sizes could not be had: the check cannot say."""


_REGION = re.compile(r"^[a-z0-9]{1,40}$")


def ask(rm: Requester, deployment: price.Sizing, existing: bool = False) -> Check:
    """Ask Azure and judge. Raises :class:`Unchecked` when the usages or the sizes cannot be
    had (a refusal such as 403, another shape than Azure's, a network error)."""
    region = deployment.region.replace(" ", "").lower()
    if not _REGION.match(region):
        raise Unchecked(f"{untrusted.shown(region, 60)} is not a region name such as westeurope")
    where = f"{rm.base}/subscriptions/{rm.subscription}/providers/Microsoft.Compute"
    try:
        usage_pages = _pages(rm, f"{where}/locations/{region}/usages", USAGES_API_VERSION)
        found_usages = usages(usage_pages)
        query = urllib.parse.urlencode(
            {"api-version": SKUS_API_VERSION, "$filter": f"location eq '{region}'"},
            quote_via=urllib.parse.quote,
        )
        found_skus = skus(_pages(rm, f"{where}/skus?{query}", None), region)
    except DriverError as e:
        raise Unchecked(e.message) from None
    spot_scores = {}
    for pool in deployment.pools:
        spot_count = sum(count for spot, count in _shares(pool) if spot)
        for size in pool.sizes if spot_count else ():
            if size.lower() not in spot_scores:
                spot_scores[size.lower()] = _score(rm, where, region, size, spot_count)
    return judge(deployment, found_usages, found_skus, spot_scores, existing)


def _pages(rm: Requester, url: str, api_version: str | None) -> list[Any]:
    """Every page of a list, following ``nextLink`` on Resource Manager's own origin only."""
    if api_version is not None:
        url = f"{url}?api-version={api_version}"
    pages: list[Any] = []
    next_url: str | None = url
    for _ in range(MAX_PAGES):
        if next_url is None:
            return pages
        _, _, page = rm.request("GET", next_url, ok=(200,))
        if not isinstance(page, dict):
            raise DriverError(f"GET {untrusted.redact_url(url.split('?')[0])}: no answer")
        pages.append(page)
        link = page.get("nextLink")
        next_url = link if isinstance(link, str) and link else None
        if next_url and not untrusted.same_origin(rm.base, next_url):
            raise DriverError(
                f"a nextLink leads elsewhere ({untrusted.redact_url(next_url, 120)}): not followed"
            )
    raise DriverError(f"more than {MAX_PAGES} pages: stopped following them")


def _score(rm: Requester, where: str, region: str, size: str, count: int) -> str:
    """The Spot placement score of a size at a pool's most Spot VMs, per zone, as text."""
    body = {
        "desiredLocations": [region],
        "desiredSizes": [{"sku": size}],
        "desiredCount": count,
        "availabilityZones": True,
    }
    url = f"{where}/locations/{region}/placementScores/spot/generate"
    try:
        _, _, answer = rm.request(
            "POST", f"{url}?api-version={PLACEMENT_API_VERSION}", body, ok=(200,)
        )
        found = scores(answer)
    except DriverError as e:
        status = re.search(r"HTTP (\d{3})", e.message)
        return f"not checked ({f'HTTP {status[1]}' if status else 'no answer'})"
    if not found:
        return "none given"
    return ", ".join(f"{z} {s}" for z, s in sorted(found.items()))
