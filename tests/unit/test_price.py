"""`python -m driver price`: the hourly price of a deployment from Azure's Retail Prices API,
asked of the fake API (tests/fakes/retail_prices.py: a real HTTP server on loopback with the
real wire format, paging by NextPageLink): the table for both stacks' inputs with their own
defaults, Spot pools, a size or region without a price, results storage (cluster storage) and
its meters or their absence, the hour-long cache, and the one-line answers when the API cannot
be reached or the input is wrong."""

from __future__ import annotations

import datetime
import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from azure_support import PARAMETERS, TEMPLATE
from driver import price
from driver.cli.price import NO_STORAGE
from driver.errors import DriverError
from fakes.retail_prices import FakeRetailPrices, blob_meters, private_link_meters, vm_meters
from price_support import HEADER, STORAGE_HEADER, closed_port_url, rows, storage
from support import REPO, error_lines, run_driver
from terraform_support import stack_of_inputs

TFVARS = REPO / "infra" / "terraform" / "terraform.tfvars.example"
STACK = REPO / "infra" / "terraform"

FSV2 = "Virtual Machines FSv2 Series"
NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)
ITEMS = [
    *vm_meters("westeurope", "Standard_D4s_v5", 0.23, spot=0.046),
    *vm_meters("westeurope", "Standard_F8s_v2", 0.40, spot=0.08, product=FSV2),
    *vm_meters("eastus", "Standard_D4s_v5", 0.192, spot=0.0192),
    # An older price, a price announced for later and a non-primary meter of the same size:
    # the price in effect now is the newest one already started, on the primary meter.
    *vm_meters("westeurope", "Standard_D4s_v5", 0.20, spot=0.04, effective="2024-01-01T00:00:00Z"),
    *vm_meters("westeurope", "Standard_D4s_v5", 0.50, spot=0.10, effective="2099-01-01T00:00:00Z"),
    *vm_meters("westeurope", "Standard_D4s_v5", 9.99, spot=9.99, primary=False),
    # F8s_v2 has no Spot meter in northeurope.
    *vm_meters("northeurope", "Standard_F8s_v2", 0.41, product=FSV2),
    # The results account's Hot LRS blob meters, as the real price list has them in some regions:
    # under "Blob Storage", and under "General Block Blob v2" only as a non-primary meter; and
    # the account's other redundancies and tiers, which are not its price.
    *blob_meters("westeurope"),
    *blob_meters("westeurope", product="General Block Blob v2", stored=9.0, primary=False),
    *blob_meters("westeurope", "Hot GRS", stored=0.0458, write=0.13),
    *blob_meters("westeurope", "Cool LRS", stored=0.0152, write=0.13, read=0.013),
    *blob_meters("eastus", stored=0.0184, write=0.055, read=0.0044),
    *private_link_meters(),
    # northeurope's block blobs lack a write meter; its private endpoints an hourly one.
    *blob_meters("northeurope", stored=0.0191, write=None),
]  # fmt: skip
ACCOUNT_ID = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-results/"
              "providers/Microsoft.Storage/storageAccounts/rayres0123456789abcdef")  # fmt: skip
WESTEUROPE_STORAGE = {
    "data stored (up to 51,200 GB)": "0.0208 per GB-month",
    "write operations": "0.0650 per 10,000",
    "read operations": "0.0052 per 10,000",
    "private endpoint, data in (up to 1,000,000 GB)": "0.0100 per GB",
    "private endpoint, data out (up to 1,000,000 GB)": "0.0100 per GB",
}
STORAGE_ROW = ["storage", "private endpoint", "regular", "0.0100", "1 = 0.0100", "1 = 0.0100",
               "1 = 0.0100"]  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeRetailPrices]:
    with FakeRetailPrices(ITEMS, page_size=4) as api:
        yield api


def driver(url: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_driver(
        "price", *args, home=home, env={"RAYDRIVER_PRICES_URL": url, "CHECKPOINT_DISABLE": "1"},
        timeout=120,
    )  # fmt: skip


def parameters(tmp_path: Path, **values: Any) -> Path:
    doc = json.loads(PARAMETERS.read_text())
    doc["parameters"].update({k: {"value": v} for k, v in values.items()})
    path = tmp_path / "my.parameters.json"
    path.write_text(json.dumps(doc))
    return path


def priced(fake: FakeRetailPrices, tmp_path: Path, **values: Any) -> str:
    """What ``price --parameters`` says of the template's parameters with ``values`` (exit 0)."""
    r = driver(fake.url, tmp_path, "--parameters", str(parameters(tmp_path, **values)))
    assert r.returncode == 0, r.stderr
    return r.stdout


# -- the table -------------------------------------------------------------------------------
def test_bicep_defaults_priced_page_by_page(fake: FakeRetailPrices, tmp_path: Path) -> None:
    r = driver(fake.url, tmp_path, "--parameters", str(PARAMETERS), "--location", "westeurope")
    assert r.returncode == 0, r.stderr
    header = HEADER.match(r.stdout.splitlines()[0])
    assert header and header["region"] == "westeurope" and not header["cached"]
    assert header["effective"] == "2025-06-01"
    # azuredeploy.json's defaults: D4s_v5 head, 0/2/4 regular D4s_v5 workers; Windows, Low
    # Priority, reservations, the non-primary meter, the old and the future price left out.
    assert rows(r.stdout) == [
        ["pool", "VM size", "priced", "per VM", "at minimum", "at default", "at maximum"],
        ["head", "Standard_D4s_v5", "regular", "0.2300", "1 = 0.2300", "1 = 0.2300", "1 = 0.2300"],
        ["workers", "Standard_D4s_v5", "regular", "0.2300", "0 = 0.0000", "2 = 0.4600",
         "4 = 0.9200"],
        ["total", "0.2300", "0.6900", "1.1500"],
    ]  # fmt: skip
    assert r.stdout.splitlines()[-2].startswith("Compute only: disks, public IP")
    assert r.stdout.splitlines()[-1] == NO_STORAGE  # no results storage: nothing more asked
    # One query, followed through its pages: the filter the real API takes, then NextPageLink.
    filters = fake.filters()
    assert filters[0] == (
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and "
        "armRegionName eq 'westeurope' and (armSkuName eq 'Standard_D4s_v5')"
    )
    assert len(fake.requests) >= 3 and set(filters) == {filters[0]}
    assert [r.get("$skip") for r in fake.requests] == [None] + [
        [str(4 * i)] for i in range(1, len(fake.requests))
    ]


def test_worker_pools_with_a_priority_mix_and_an_instance_mix_are_priced_by_share(
    fake: FakeRetailPrices, tmp_path: Path
) -> None:
    """Every pool is priced (not only the worker_* one); a Spot Priority Mix's regular share at
    the regular price and the rest at Spot (a split that is not whole rounded the dearer way),
    an Instance Mix at its dearest size, each said under the table."""
    pool = {"name": "cpu", "vmSize": "Standard_D4s_v5", "spotEnabled": True, "minCount": 0,
            "defaultCount": 2, "maxCount": 10,
            "priorityMix": {"baseRegularCount": 1, "regularPercentageAboveBase": 25},
            "instanceMix": {"vmSizes": ["Standard_D4s_v5", "Standard_F8s_v2"]}}  # fmt: skip
    out = priced(fake, tmp_path, location="westeurope", workerPools=[pool])
    # At 2 VMs: 1 first, then 25 % of 1 (0.25): 2 regular at most; at 10: 1 + 2.25, 4 at most.
    assert rows(out) == [
        ["pool", "VM size", "priced", "per VM", "at minimum", "at default", "at maximum"],
        ["head", "Standard_D4s_v5", "regular", "0.2300", "1 = 0.2300", "1 = 0.2300", "1 = 0.2300"],
        ["cpu regular", "Standard_F8s_v2", "regular", "0.4000", "0 = 0.0000", "2 = 0.8000",
         "4 = 1.6000"],
        ["cpu Spot", "Standard_F8s_v2", "Spot", "0.0800", "0 = 0.0000", "0 = 0.0000",
         "6 = 0.4800"],
        ["total", "0.2300", "1.0300", "2.3100"],
    ]  # fmt: skip
    assert "cpu: Spot Priority Mix (1 regular VMs first, then 25 % of those above them " in out
    assert "cpu: Instance Mix of Standard_D4s_v5, Standard_F8s_v2: priced at the dearest" in out
    # Both sizes were asked for.
    assert "armSkuName eq 'Standard_F8s_v2'" in fake.filters()[0]


def test_a_mix_size_without_a_price_makes_the_totals_unknown() -> None:
    """A size of an Instance Mix the price list lacks: its line names that size, no price."""
    d4 = price.Meter("Standard_D4s_v5", False, 0.23, "USD", "2025-06-01")
    prices = price.PriceList("westeurope", {("standard_d4s_v5", False): d4}, NOW, False)
    pool = price.Pool("cpu", "Standard_D4s_v5", False, (0, 1, 2),
                      mix_sizes=("Standard_D4s_v5", "Standard_D4as_v5"))  # fmt: skip
    head = price.Pool("head", "Standard_D4s_v5", False, (1, 1, 1))
    est = price.estimate(price.Sizing("westeurope", (head, pool)), prices)
    assert [(line.pool.name, line.pool.vm_size, line.meter) for line in est.lines] == [
        ("head", "Standard_D4s_v5", d4), ("cpu", "Standard_D4as_v5", None)
    ]  # fmt: skip
    assert est.total(2) is None and est.total(0) == 0.23  # none of them at the minimum
    assert [p.vm_size for p in est.missing] == ["Standard_D4as_v5"]


def test_spot_workers_are_priced_at_spot(fake: FakeRetailPrices, tmp_path: Path) -> None:
    out = priced(
        fake, tmp_path, location="westeurope", workerVmSize="Standard_F8s_v2",
        workerSpotEnabled=True, workerMinCount=1, workerDefaultCount=3, workerMaxCount=6,
    )  # fmt: skip
    assert rows(out)[1:] == [
        ["head", "Standard_D4s_v5", "regular", "0.2300", "1 = 0.2300", "1 = 0.2300", "1 = 0.2300"],
        ["workers", "Standard_F8s_v2", "Spot", "0.0800", "1 = 0.0800", "3 = 0.2400", "6 = 0.4800"],
        ["total", "0.3100", "0.4700", "0.7100"],
    ]  # fmt: skip
    [query] = {f for f in fake.filters()}
    assert "(armSkuName eq 'Standard_D4s_v5' or armSkuName eq 'Standard_F8s_v2')" in query


def test_a_spot_head_is_priced_at_spot(fake: FakeRetailPrices, tmp_path: Path) -> None:
    """headPriority / head_priority "Spot": the head's row at Spot's rate, in both stacks."""
    out = priced(fake, tmp_path, location="westeurope", headPriority="Spot")
    assert rows(out)[1:] == [
        ["head", "Standard_D4s_v5", "Spot", "0.0460", "1 = 0.0460", "1 = 0.0460", "1 = 0.0460"],
        ["workers", "Standard_D4s_v5", "regular", "0.2300", "0 = 0.0000", "2 = 0.4600",
         "4 = 0.9200"],
        ["total", "0.0460", "0.5060", "0.9660"],
    ]  # fmt: skip
    r = driver(fake.url, tmp_path, "--terraform-dir", str(STACK), "--var-file", str(TFVARS),
               "--var", "head_priority=Spot")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout)[1][:4] == ["head", "Standard_D4s_v5", "Spot", "0.0460"]


def test_a_head_priority_that_is_neither_is_refused() -> None:
    values = {"location": "westeurope", "head_vm_size": "Standard_D4s_v5",
              "worker_vm_size": "Standard_D4s_v5", "worker_spot_enabled": False,
              "worker_min_count": 0, "worker_default_count": 2, "worker_max_count": 4}  # fmt: skip
    assert not price.sizing(values, arm=False).pools[0].spot  # a stack from before: regular
    assert price.sizing({**values, "head_priority": "Spot"}, arm=False).pools[0].spot
    with pytest.raises(DriverError, match='head_priority must be "Regular" or "Spot"'):
        price.sizing({**values, "head_priority": "spot"}, arm=False)


def test_terraform_inputs_with_their_defaults_price_like_the_bicep_stack(
    fake: FakeRetailPrices, tmp_path: Path
) -> None:
    """variables.tf's defaults under the tfvars file, resolved by terraform itself; `-var`
    values (text on the command line) take the variable's type."""
    r = driver(fake.url, tmp_path, "--terraform-dir", str(STACK), "--var-file", str(TFVARS))
    assert r.returncode == 0, r.stderr
    bicep = driver(fake.url, tmp_path, "--parameters", str(PARAMETERS), "--location", "westeurope")
    assert rows(r.stdout) == rows(bicep.stdout)  # both stacks' defaults are the same cluster
    r = driver(fake.url, tmp_path, "--terraform-dir", str(STACK), "--var-file", str(TFVARS),
               "--var", "worker_spot_enabled=true", "--var", "worker_max_count=8")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout)[2] == [
        "workers", "Standard_D4s_v5", "Spot", "0.0460", "0 = 0.0000", "2 = 0.0920", "8 = 0.3680"
    ]  # fmt: skip


def test_a_var_beats_a_var_file_as_the_help_says(fake: FakeRetailPrices, tmp_path: Path) -> None:
    """--var is the last word (Terraform takes its command line's -var/-var-file in order)."""
    r = driver(fake.url, tmp_path, "--terraform-dir", str(STACK), "--var-file", str(TFVARS),
               "--var", "location=eastus")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert HEADER.match(r.stdout.splitlines()[0])["region"] == "eastus"  # type: ignore[index]


def test_the_folders_own_tfvars_count_as_terraform_counts_them(
    fake: FakeRetailPrices, tmp_path: Path
) -> None:
    # The root's variables and the checks of the module it calls (a copied stack of one folder).
    stack = stack_of_inputs(tmp_path / "stack", head=False)
    (stack / "spot.auto.tfvars").write_text('worker_spot_enabled = true\nlocation = "eastus"\n')
    r = driver(fake.url, tmp_path, "--terraform-dir", str(stack))
    assert r.returncode == 0, r.stderr
    assert HEADER.match(r.stdout.splitlines()[0])["region"] == "eastus"  # type: ignore[index]
    assert rows(r.stdout)[2][:4] == ["workers", "Standard_D4s_v5", "Spot", "0.0192"]


def test_a_size_or_region_without_a_price(fake: FakeRetailPrices, tmp_path: Path) -> None:
    out = priced(fake, tmp_path, location="northeurope", headVmSize="Standard_F8s_v2",
                 workerVmSize="Standard_F8s_v2", workerSpotEnabled=True)  # fmt: skip
    assert rows(out)[1:] == [
        ["head", "Standard_F8s_v2", "regular", "0.4100", "1 = 0.4100", "1 = 0.4100", "1 = 0.4100"],
        ["workers", "Standard_F8s_v2", "Spot", "no price", "0 = 0.0000", "2 = ?", "4 = ?"],
        ["total", "0.4100", "unknown", "unknown"],
    ]  # fmt: skip
    assert (
        "No Linux Spot price for Standard_F8s_v2 in northeurope in Azure's retail prices: the "
        "totals with one or more of these VMs are unknown."
    ) in out.splitlines()
    r = driver(fake.url, tmp_path, "--parameters", str(PARAMETERS), "--location", "nowhere")
    assert r.returncode == 0, r.stderr
    assert [row[3] for row in rows(r.stdout)[1:3]] == ["no price", "no price"]
    assert rows(r.stdout)[3] == ["total", "unknown", "unknown", "unknown"]
    assert HEADER.match(r.stdout.splitlines()[0])["effective"] is None  # type: ignore[index]


# -- results storage (cluster storage) ------------------------------------------------------------
def test_results_storage_is_priced_apart_and_its_endpoint_by_the_hour(
    fake: FakeRetailPrices, tmp_path: Path
) -> None:
    out = priced(fake, tmp_path, location="westeurope", resultsStorageAccountId=ACCOUNT_ID)
    # The private endpoint is the cluster's: one more hourly row, in the totals.
    assert rows(out)[1:] == [
        ["head", "Standard_D4s_v5", "regular", "0.2300", "1 = 0.2300", "1 = 0.2300", "1 = 0.2300"],
        ["workers", "Standard_D4s_v5", "regular", "0.2300", "0 = 0.0000", "2 = 0.4600",
         "4 = 0.9200"],
        STORAGE_ROW,
        ["total", "0.2400", "0.7000", "1.1600"],
    ]  # fmt: skip
    # The storage outlives the cluster: its own lines, per GB-month and per operation, the
    # account's Hot LRS from the primary "Blob Storage" meters (first tier), not GRS, not Cool.
    assert STORAGE_HEADER in out.splitlines()
    assert storage(out) == WESTEUROPE_STORAGE
    assert NO_STORAGE not in out
    filters = set(fake.filters())
    assert filters == {
        "serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and "
        "armRegionName eq 'westeurope' and (armSkuName eq 'Standard_D4s_v5')",
        "serviceName eq 'Storage' and priceType eq 'Consumption' and armRegionName eq "
        "'westeurope' and skuName eq 'Hot LRS' and (productName eq 'General Block Blob v2' or "
        "productName eq 'Blob Storage')",
        "serviceName eq 'Virtual Network' and priceType eq 'Consumption' and productName eq "
        "'Virtual Network Private Link' and (armRegionName eq 'westeurope' or armRegionName eq "
        "'Global')",
    }
    # Cached like the VM prices: asked again within the hour, the API is not.
    asked = len(fake.requests)
    again = priced(fake, tmp_path, location="westeurope", resultsStorageAccountId=ACCOUNT_ID)
    assert len(fake.requests) == asked
    assert storage(again) == WESTEUROPE_STORAGE and rows(again)[3] == STORAGE_ROW


def test_terraform_results_storage_prices_like_the_bicep_stack(
    fake: FakeRetailPrices, tmp_path: Path
) -> None:
    args = ("--terraform-dir", str(STACK), "--var-file", str(TFVARS))
    r = driver(fake.url, tmp_path, *args, "--var", f"results_storage_account_id={ACCOUNT_ID}")
    assert r.returncode == 0, r.stderr
    bicep = parameters(tmp_path, location="westeurope", resultsStorageAccountId=ACCOUNT_ID)
    arm = driver(fake.url, tmp_path, "--parameters", str(bicep))
    assert rows(r.stdout) == rows(arm.stdout) and rows(r.stdout)[3] == STORAGE_ROW
    assert storage(r.stdout) == storage(arm.stdout) == WESTEUROPE_STORAGE
    # The variable's default, "": no results storage, one line says so, nothing more asked.
    asked = len(fake.requests)
    r = driver(fake.url, tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout)[-1] == ["total", "0.2300", "0.6900", "1.1500"]
    assert r.stdout.splitlines()[-1] == NO_STORAGE and STORAGE_HEADER not in r.stdout
    assert len(fake.requests) == asked  # the VM prices from the cache, no storage query


def test_a_storage_meter_the_price_list_lacks_is_not_found(tmp_path: Path) -> None:
    """northeurope's blobs have no write meter, and this price list no private endpoint hour:
    "not found" and "no price", the totals unknown, never a number from elsewhere."""
    items = [i for i in ITEMS if i["meterName"] != "Standard Private Endpoint"]
    given = parameters(
        tmp_path, location="northeurope", headVmSize="Standard_F8s_v2",
        workerVmSize="Standard_F8s_v2", resultsStorageAccountId=ACCOUNT_ID,
    )  # fmt: skip
    with FakeRetailPrices(items) as api:
        r = driver(api.url, tmp_path, "--parameters", str(given))
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout)[3:] == [
        ["storage", "private endpoint", "regular", "no price", "1 = ?", "1 = ?", "1 = ?"],
        ["total", "unknown", "unknown", "unknown"],
    ]
    lines = r.stdout.splitlines()
    assert (
        "No Standard Private Endpoint price in Azure's retail prices (in northeurope or Global): "
        "the totals are unknown."
    ) in lines
    assert storage(r.stdout) == {
        "data stored (up to 51,200 GB)": "0.0191 per GB-month",
        "write operations": "not found",
        "read operations": "0.0052 per 10,000",
        "private endpoint, data in (up to 1,000,000 GB)": "0.0100 per GB",
        "private endpoint, data out (up to 1,000,000 GB)": "0.0100 per GB",
    }
    assert (
        "Not found in Azure's retail prices for northeurope: Hot LRS Write Operations, "
        "Standard Private Endpoint."
    ) in lines


# -- the cache and the fallbacks ---------------------------------------------------------------
def test_prices_are_cached_for_an_hour(fake: FakeRetailPrices, tmp_path: Path) -> None:
    args = ("--parameters", str(PARAMETERS), "--location", "westeurope")
    first = driver(fake.url, tmp_path, *args)
    assert first.returncode == 0, first.stderr
    asked = len(fake.requests)
    fake.fail_with = 503
    again = driver(fake.url, tmp_path, *args)
    assert again.returncode == 0, again.stderr
    assert len(fake.requests) == asked  # not asked again
    assert HEADER.match(again.stdout.splitlines()[0])["cached"]  # type: ignore[index]
    assert rows(again.stdout) == rows(first.stdout)
    # An hour later the cache is stale: the API is asked, and its failure is one line.
    [cache] = (tmp_path / "prices").iterdir()
    saved = json.loads(cache.read_text())
    fetched = datetime.datetime.fromisoformat(saved["fetched_at"])
    saved["fetched_at"] = (fetched - datetime.timedelta(seconds=3601)).isoformat()
    cache.write_text(json.dumps(saved))
    late = driver(fake.url, tmp_path, *args)
    assert late.returncode == 2 and late.stdout == ""
    assert error_lines(late.stderr) == [
        f"error: price unknown: the Retail Prices API at {fake.url} did not answer "
        "(HTTP 503 Service Unavailable)"
    ]
    assert len(fake.requests) == asked + 1


def test_without_network_the_price_is_unknown_in_one_line(tmp_path: Path) -> None:
    url = closed_port_url()
    r = driver(url, tmp_path, "--parameters", str(PARAMETERS), "--location", "westeurope")
    assert r.returncode == 2 and r.stdout == ""
    [line] = error_lines(r.stderr)
    assert line.startswith(f"error: price unknown: the Retail Prices API at {url} did not answer (")
    assert "Connection refused" in line


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"hello\r\n\r\n", "BadStatusLine"),  # not HTTP at all
        (b'HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n{"Items": [', "IncompleteRead"),
    ],
)
def test_a_server_that_breaks_http_is_one_line_not_a_traceback(
    answer: bytes, why: str, tmp_path: Path
) -> None:
    """http.client's own exceptions are no OSError: a proxy answering garbage or cutting the
    body short must read as an unknown price, never as a traceback (up would stop there)."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/api/retail/prices"
    try:
        r = driver(url, tmp_path, "--parameters", str(PARAMETERS), "--location", "westeurope")
    finally:
        server.close()
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2 and r.stdout == ""
    [line] = error_lines(r.stderr)
    assert line.startswith(f"error: price unknown: the Retail Prices API at {url} did not answer (")
    assert line.endswith(f"(a broken HTTP answer: {why})"), line


def test_a_cache_that_cannot_be_written_leaves_no_temporary_file(
    fake: FakeRetailPrices, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while caching (the write fails half-way): the price is still given, and the
    half-written temporary file goes."""
    real = Path.write_text

    def full(self: Path, data: str, *a: Any, **k: Any) -> int:
        if self.suffix == ".tmp":
            real(self, data[:10])
            raise OSError(28, "No space left on device")
        return real(self, data, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    cache = tmp_path / "prices"
    cache.mkdir()
    got = price.price_list("westeurope", ["Standard_D4s_v5"], fake.url, cache)
    assert got.meter("Standard_D4s_v5", spot=False) is not None
    assert [p.name for p in cache.iterdir()] == []


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("--parameters", str(PARAMETERS)), {},
         "has no location and the template's default is the resource group's region: pass "
         "--location REGION"),
        (("--parameters", "/nonexistent.json", "--location", "x"), {},
         "--parameters: cannot read /nonexistent.json"),
        (("--parameters", str(PARAMETERS), "--var", "a=b"), {}, "--var/--var-file are Terraform's"),
        (("--terraform-dir", str(STACK), "--location", "westeurope"), {},
         "--location is for --parameters"),
        (("--terraform-dir", "/nonexistent"), {}, "--terraform-dir: no such folder"),
        (("--terraform-dir", str(STACK), "--var-file", str(TFVARS), "--var", "worker_max_count=0"),
         {}, "worker_max_count must be a whole number from 1 to 100."),
        (("--terraform-dir", str(STACK)), {}, "No value for required variable"),
        ((), {}, "one of the arguments --terraform-dir --parameters is required"),
        (("--parameters", str(PARAMETERS), "--location", "westeurope"),
         {"RAYDRIVER_PRICES_URL": "ftp://example.org/prices"},
         "$RAYDRIVER_PRICES_URL: expected the http(s):// URL of a Retail Prices API"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_asks_nothing(
    fake: FakeRetailPrices, tmp_path: Path, args: tuple[str, ...], env: dict[str, str],
    expected: str,
) -> None:  # fmt: skip
    r = run_driver("price", *args, home=tmp_path,
                   env={"RAYDRIVER_PRICES_URL": fake.url, **env}, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stdout
    [line] = error_lines(r.stderr)
    assert expected in line, line
    assert fake.requests == []


# -- the library -----------------------------------------------------------------------------
def test_select_keeps_the_linux_pay_as_you_go_hour_in_effect() -> None:
    meters = price.select(ITEMS, "westeurope", ["standard_d4s_v5"], NOW)
    assert {k: (m.price, m.effective[:10]) for k, m in meters.items()} == {
        ("standard_d4s_v5", False): (0.23, "2025-06-01"),
        ("standard_d4s_v5", True): (0.046, "2025-06-01"),
    }
    windows_only = [i for i in ITEMS if "Windows" in i["productName"]]
    assert price.select(windows_only, "westeurope", ["Standard_D4s_v5"], NOW) == {}


def test_select_rates_prefers_the_region_the_product_and_the_first_tier() -> None:
    wanted = price.storage_meters()
    regional = private_link_meters(hourly=0.02, per_gb=0.02, region="westeurope")
    rates = price.select_rates([*ITEMS, *regional], "westeurope", wanted, NOW)
    assert {k: (r.price, r.region, r.up_to) for k, r in rates.items() if r} == {
        "stored": (0.0208, "westeurope", 51200.0),
        "write": (0.065, "westeurope", None),
        "read": (0.0052, "westeurope", None),
        "endpoint": (0.02, "westeurope", None),  # the region's own before Global's
        "ingress": (0.02, "westeurope", 1_000_000.0),
        "egress": (0.02, "westeurope", 1_000_000.0),
    }
    # "General Block Blob v2" before "Blob Storage" where both are primary meters.
    gpv2 = blob_meters("westeurope", product="General Block Blob v2", stored=0.02)
    assert price.select_rates([*ITEMS, *gpv2], "westeurope", wanted, NOW)["stored"].price == 0.02  # type: ignore[union-attr]
    assert price.select_rates([], "westeurope", wanted, NOW) == {k: None for k in wanted}


def test_the_priced_account_is_the_one_the_results_stacks_create() -> None:
    """price.RESULTS_ACCOUNT is what both results stacks create: a test, not a second copy."""
    account = price.RESULTS_ACCOUNT
    tf = (REPO / "infra" / "terraform" / "results" / "main.tf").read_text()
    settings = dict(re.findall(r'^\s*(account_kind|account_tier|account_replication_type|'
                               r'access_tier)\s*=\s*"([^"]*)"', tf, re.M))  # fmt: skip
    assert settings == {
        "account_kind": account.kind,
        "account_tier": account.performance,
        "account_replication_type": account.replication,
        "access_tier": account.access_tier,
    }
    bicep = (REPO / "infra" / "bicep" / "results.bicep").read_text()
    assert re.findall(r"^\s*kind: '(\w+)'", bicep, re.M) == [account.kind]
    assert re.findall(r"^\s*sku: \{\s*name: '(\w+)'", bicep, re.M) == [
        f"{account.performance}_{account.replication}"
    ]
    assert re.findall(r"^\s*accessTier: '(\w+)'", bicep, re.M) == [account.access_tier]


def test_the_priced_variables_exist_in_both_stacks() -> None:
    """price.HEAD and price.POOLS name Terraform variables; their camelCase is the Bicep/ARM
    parameter. Both must exist, with the same defaults."""
    declared_tf = re.findall(r'^variable "(\w+)"', (STACK / "variables.tf").read_text(), re.M)
    arm = json.loads(TEMPLATE.read_text())["parameters"]
    names = price.variable_names()
    assert "worker_spot_enabled" in names and "head_vm_size" in names
    for name in names:
        assert name in declared_tf, name
        assert price.arm_name(name) in arm, price.arm_name(name)
