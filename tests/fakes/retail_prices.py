"""A fake of Azure's Retail Prices API (https://prices.azure.com/api/retail/prices): a real HTTP
server on loopback answering what the driver asks, in the real wire format.

* ``GET /api/retail/prices?$filter=...`` → ``{"BillingCurrency", "CustomerEntityId",
  "CustomerEntityType", "Items": [...], "NextPageLink": URL or null, "Count": n}``, where
  ``Count`` is the number of items on this page and ``NextPageLink`` repeats the query with
  ``$skip`` (the real API pages by 100 items; this one by :attr:`FakeRetailPrices.page_size`
  so that every query pages).
* ``$filter``: OData ``FIELD eq 'VALUE'`` terms joined by ``and``/``or`` with parentheses, as
  the real API takes them; ``priceType`` filters the items' ``type`` field (the real API's
  filter name and field name differ so). Values compare case-insensitively (the API before
  2023-01-01-preview). An unknown field is ``400``, as the real API answers.
* Items carry the real field names: ``currencyCode``, ``tierMinimumUnits``, ``retailPrice``,
  ``unitPrice``, ``armRegionName``, ``location``, ``effectiveStartDate``, ``meterId``,
  ``meterName``, ``productId``, ``skuId``, ``productName``, ``skuName``, ``serviceName``,
  ``serviceId``, ``serviceFamily``, ``unitOfMeasure`` ("1 Hour"), ``type``,
  ``isPrimaryMeterRegion``, ``armSkuName`` (plus ``reservationTerm`` on reservations). Made by
  :func:`vm_meters`: per size and region the Linux and Windows meters, regular, Spot and Low
  Priority, and 1-year reservations, as the real price list has them; :func:`blob_meters`: a
  storage account's block blob meters of one tier and redundancy in one region (data stored in
  three price tiers, writes, reads and the other operations, serviceName "Storage"); and
  :func:`private_link_meters`: private endpoints' hours and the data they process in and out
  (serviceName "Virtual Network", region "Global", tiered), as the real price list has them.

:attr:`FakeRetailPrices.requests` records every query (path and parameters);
:attr:`FakeRetailPrices.fail_with` makes every answer that HTTP status.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

FIELDS = {
    "armRegionName": "armRegionName",
    "armSkuName": "armSkuName",
    "serviceName": "serviceName",
    "serviceFamily": "serviceFamily",
    "priceType": "type",
    "skuName": "skuName",
    "meterName": "meterName",
    "productName": "productName",
    "currencyCode": "currencyCode",
    "location": "location",
}
"""$filter names -> item fields."""

_TOKEN = re.compile(r"\s*(?:(\()|(\))|(and)\b|(or)\b|(\w+) eq '((?:[^']|'')*)')", re.IGNORECASE)


def vm_meters(
    region: str,
    arm_sku: str,
    linux: float,
    spot: float | None = None,
    effective: str = "2025-06-01T00:00:00Z",
    primary: bool = True,
    product: str = "Virtual Machines DSv5 Series",
) -> list[dict[str, Any]]:
    """The price list's meters of one VM size in one region: Linux and Windows (at twice the
    price), regular, Spot and Low Priority (at a tenth), and a 1-year reservation."""
    short = arm_sku.removeprefix("Standard_").replace("_", " ")  # "D4s v5"
    items = []
    variants: list[tuple[str, float | None, str]] = [
        ("", linux, "Consumption"),
        (" Spot", spot, "Consumption"),
        (" Low Priority", linux / 10, "Consumption"),
        ("", linux * 6000 / 8760, "Reservation"),
    ]
    for windows in (False, True):
        for suffix, price, kind in variants:
            if price is None:
                continue
            amount = price * (2 if windows else 1)
            item = {
                "currencyCode": "USD",
                "tierMinimumUnits": 0.0,
                "retailPrice": round(amount, 6),
                "unitPrice": round(amount, 6),
                "armRegionName": region,
                "location": region,
                "effectiveStartDate": effective,
                "meterId": str(uuid.uuid4()),
                "meterName": f"{short}{suffix}",
                "productId": "DZH318Z0BQ4W",
                "skuId": f"DZH318Z0BQ4W/{len(items):04d}",
                "productName": product + (" Windows" if windows else ""),
                "skuName": f"{short}{suffix}",
                "serviceName": "Virtual Machines",
                "serviceId": "DZH313Z7MMC8",
                "serviceFamily": "Compute",
                "unitOfMeasure": "1 Hour",
                "type": kind,
                "isPrimaryMeterRegion": primary,
                "armSkuName": arm_sku,
            }
            if kind == "Reservation":
                item["reservationTerm"] = "1 Year"
            items.append(item)
    return items


def _meter(
    service: tuple[str, str, str],
    product: tuple[str, str],
    region: str,
    sku: str,
    meter: str,
    unit: str,
    tiers: list[tuple[float, float]],
    effective: str,
    primary: bool = True,
) -> list[dict[str, Any]]:
    """One meter's items, one per price tier ((tierMinimumUnits, price))."""
    meter_id = str(uuid.uuid4())
    return [
        {
            "currencyCode": "USD",
            "tierMinimumUnits": float(minimum),
            "retailPrice": price,
            "unitPrice": price,
            "armRegionName": region,
            "location": "Global" if region == "Global" else region,
            "effectiveStartDate": effective,
            "meterId": meter_id,
            "meterName": meter,
            "productId": product[1],
            "skuId": f"{product[1]}/{meter_id[:4].upper()}",
            "productName": product[0],
            "skuName": sku,
            "serviceName": service[0],
            "serviceId": service[1],
            "serviceFamily": service[2],
            "unitOfMeasure": unit,
            "type": "Consumption",
            "isPrimaryMeterRegion": primary,
            "armSkuName": "",
        }
        for minimum, price in tiers
    ]


STORAGE = ("Storage", "DZH317F1HKN0", "Storage")
BLOB_PRODUCTS = {"Blob Storage": "DZH318Z0BNVX", "General Block Blob v2": "DZH318Z0BPH7"}


def blob_meters(
    region: str,
    sku: str = "Hot LRS",
    stored: float = 0.0208,
    write: float | None = 0.065,
    read: float = 0.0052,
    product: str = "Blob Storage",
    effective: str = "2025-06-01T00:00:00Z",
    primary: bool = True,
) -> list[dict[str, Any]]:
    """A storage account's block blob meters of one ``sku`` ("Hot LRS": access tier and
    redundancy) in one region: data stored per GB-month in three tiers (the first 50 TB, the
    next 450 TB, beyond: 4 % and 8 % less), writes and reads per 10,000 (``write`` None: no
    write meter), list/create-container and other operations. The read meter names the tier
    alone ("Hot Read Operations"), as the real price list does."""
    tier, redundancy = sku.split(" ", 1)
    where = (product, BLOB_PRODUCTS[product])

    def one(meter: str, unit: str, tiers: list[tuple[float, float]]) -> list[dict[str, Any]]:
        return _meter(STORAGE, where, region, sku, meter, unit, tiers, effective, primary)

    items = one(
        f"{sku} Data Stored",
        "1 GB/Month",
        [(0, stored), (51200, round(stored * 0.96, 6)), (512000, round(stored * 0.92, 6))],
    )
    if write is not None:
        items += one(f"{sku} Write Operations", "10K", [(0, write)])
    items += one(f"{tier} Read Operations", "10K", [(0, read)])
    items += one(f"{sku} List and Create Container Operations", "10K", [(0, write or 0.065)])
    items += one("All Other Operations", "10K", [(0, read)])
    items += one(f"{redundancy} Early Hot To Cool Tier Down", "1 GB", [(0, 0.0)])
    return items


NETWORK = ("Virtual Network", "DZH3180KKTJN", "Networking")
PRIVATE_LINK = ("Virtual Network Private Link", "DZH318Z0BQTS")


def private_link_meters(
    hourly: float | None = 0.01,
    per_gb: float = 0.01,
    region: str = "Global",
    effective: str = "2025-06-01T00:00:00Z",
) -> list[dict[str, Any]]:
    """Private endpoints' meters (the real price list keeps them in region "Global"): per hour
    (``hourly`` None: no hourly meter), and per GB processed in and out, each in three tiers
    (the first 1 PB, the next 4 PB, beyond)."""
    tiers: list[tuple[float, float]] = [
        (0, per_gb),
        (1_000_000, round(per_gb * 0.6, 6)),
        (5_000_000, round(per_gb * 0.4, 6)),
    ]
    items = []
    if hourly is not None:
        items += _meter(NETWORK, PRIVATE_LINK, region, "Standard", "Standard Private Endpoint",
                        "1 Hour", [(0, hourly)], effective)  # fmt: skip
    for way in ("Ingress", "Egress"):
        items += _meter(NETWORK, PRIVATE_LINK, region, "Standard",
                        f"Standard Data Processed - {way}", "1 GB", tiers, effective)  # fmt: skip
    return items


def _matches(filter_text: str, item: dict[str, Any]) -> bool:
    """Evaluate an OData filter of eq terms, and/or and parentheses on ``item``."""
    tokens: list[tuple[str, Any]] = []
    pos = 0
    text = filter_text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot parse the filter at {text[pos : pos + 30]!r}")
        if m.group(1):
            tokens.append(("(", None))
        elif m.group(2):
            tokens.append((")", None))
        elif m.group(3):
            tokens.append(("and", None))
        elif m.group(4):
            tokens.append(("or", None))
        else:
            name, value = m.group(5), m.group(6).replace("''", "'")
            if name not in FIELDS:
                raise ValueError(f"Invalid filter: unknown field {name}")
            actual = str(item.get(FIELDS[name], ""))
            tokens.append(("term", actual.lower() == value.lower()))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1

    def expr(i: int) -> tuple[bool, int]:  # or of ands
        value, i = conj(i)
        while i < len(tokens) and tokens[i][0] == "or":
            right, i = conj(i + 1)
            value = value or right
        return value, i

    def conj(i: int) -> tuple[bool, int]:
        value, i = atom(i)
        while i < len(tokens) and tokens[i][0] == "and":
            right, i = atom(i + 1)
            value = value and right
        return value, i

    def atom(i: int) -> tuple[bool, int]:
        kind, value = tokens[i]
        if kind == "(":
            inner, i = expr(i + 1)
            if i >= len(tokens) or tokens[i][0] != ")":
                raise ValueError("unbalanced parentheses")
            return inner, i + 1
        if kind != "term":
            raise ValueError(f"unexpected {kind}")
        return bool(value), i + 1

    result, end = expr(0)
    if end != len(tokens):
        raise ValueError("trailing tokens in the filter")
    return result


class FakeRetailPrices:
    """The fake API on 127.0.0.1, serving ``items``; a context manager."""

    def __init__(self, items: list[dict[str, Any]], page_size: int = 4) -> None:
        self.items = items
        self.page_size = page_size
        self.requests: list[dict[str, list[str]]] = []
        self.fail_with: int | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                params = parse_qs(parts.query)
                fake.requests.append(params)
                if parts.path != "/api/retail/prices":
                    return self._send(404, {"Error": {"Code": "NotFound"}})
                if fake.fail_with:
                    return self._send(fake.fail_with, {"Error": {"Code": "ServiceUnavailable"}})
                filter_text = params.get("$filter", [""])[0]
                try:
                    found = [i for i in fake.items if not filter_text or _matches(filter_text, i)]
                except ValueError as e:
                    return self._send(400, {"Error": {"Code": "BadRequest", "Message": str(e)}})
                skip = int(params.get("$skip", ["0"])[0])
                page = found[skip : skip + fake.page_size]
                more = skip + fake.page_size < len(found)
                link = None
                if more:
                    query = urlencode({"$filter": filter_text, "$skip": skip + fake.page_size})
                    link = f"{fake.url}?{query}"
                self._send(
                    200,
                    {
                        "BillingCurrency": "USD",
                        "CustomerEntityId": "Default",
                        "CustomerEntityType": "Retail",
                        "Items": page,
                        "NextPageLink": link,
                        "Count": len(page),
                    },
                )

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/retail/prices"

    def filters(self) -> list[str]:
        return [r.get("$filter", [""])[0] for r in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeRetailPrices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
