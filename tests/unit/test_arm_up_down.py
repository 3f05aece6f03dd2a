"""`up/down --resource-group`: infra/bicep/azuredeploy.json deployed through the fake Resource
Manager (tests/fakes/fake_arm.py, the real wire format over HTTPS, the real azure-identity and
azure-mgmt-resource in the driver): what-if first and shown, nothing deployed without a yes,
operations streamed, the cluster remembered as `use` remembers it, bad input refused in one line
before anything is sent, and `down` deleting only the resource group `up` created. By default
`up` deploys infra/bicep/results.json first into a group of its own, which `down` keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from azure_support import SUB, TEMPLATE, deploy_requests, driver
from driver import arm
from driver.cli.cluster import NO_STORAGE
from driver.cli.price import NO_STORAGE as NO_STORAGE_PRICE
from fakes.fake_arm import FakeAzure
from fakes.retail_prices import FakeRetailPrices, blob_meters, private_link_meters
from price_support import HEADER, closed_port_url, rows, storage
from support import error_lines

RESULTS_TEMPLATE = TEMPLATE.parent / "results.json"
pytestmark = pytest.mark.usefixtures("prices")
"""Azure's Retail Prices API, which `up` asks before it asks for a yes."""


def test_up_creates_the_group_shows_what_if_deploys_and_remembers(
    fake: FakeAzure, tmp_path: Path, params: Path, prices: FakeRetailPrices
) -> None:
    """By default the results storage first (results.json in a group of its own, tagged to
    outlive the cluster), then the cluster with the storage's id, priced with it."""
    prices.items += [*blob_meters("westeurope"), *private_link_meters()]
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    # what-if shown first (one line per change), then the PUT, then the operations.
    assert (
        "Create" in r.stdout and "/providers/Microsoft.Resources/deployments/ray-head" in r.stdout
    )
    assert deploy_requests(fake) == [
        ("PUT", "rg-ray-results"), ("POST", "whatIf"), ("PUT", "ray-results"),
        ("PUT", "rg-ray"), ("POST", "whatIf"), ("PUT", "ray-cluster"),
    ]  # fmt: skip
    _, _, results_group = fake.bodies[0]
    assert results_group == {"location": "westeurope", "tags": dict([arm.RESULTS_TAG])}
    _, _, results = fake.bodies[2]
    assert results["properties"]["template"] == json.loads(RESULTS_TEMPLATE.read_text())
    assert results["properties"]["parameters"] == {}
    # Resource Manager's answer for results.json: its outputs, computed in rg-ray-results.
    deployed = fake.deployments[(SUB, "rg-ray-results", "ray-results")]["properties"]["outputs"]
    account = deployed["storageAccountId"]["value"]
    name = account.rsplit("/", 1)[1]
    assert account == (
        f"/subscriptions/{SUB}/resourceGroups/rg-ray-results/providers/"
        f"Microsoft.Storage/storageAccounts/{name}"
    )
    assert deployed["containerUrl"] == {
        "type": "String", "value": f"https://{name}.blob.core.windows.net/results"
    }  # fmt: skip
    assert f"Results storage: {account} in resource group rg-ray-results" in r.stderr
    _, _, group = fake.bodies[3]
    assert group == {"location": "westeurope", "tags": {"created-by": "python -m driver up"}}
    _, _, body = fake.bodies[5]
    assert body["properties"]["mode"] == "Incremental"
    assert body["properties"]["template"] == json.loads(TEMPLATE.read_text())
    given = json.loads(params.read_text())["parameters"]
    assert body["properties"]["parameters"] == {
        **given, "resultsStorageAccountId": {"value": account}
    }  # fmt: skip
    assert fake.bodies[4][2] == body  # what-if saw exactly what was deployed
    assert "Succeeded  Microsoft.Resources/deployments ray-workers" in r.stderr
    assert "head azureuser@20.1.2.3" in r.stderr
    # The cluster's price counts the storage: its private endpoint, then its own prices.
    out = r.stdout[r.stdout.index("Hourly price") :]
    assert rows(out)[3][:2] == ["storage", "private endpoint"]
    assert storage(out)["data stored (up to 51,200 GB)"] == "0.0208 per GB-month"
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile == {"resource_group": "rg-ray", "deployment": "ray-cluster", "subscription": SUB,
                       "arm_endpoint": fake.endpoint}  # fmt: skip
    # Again: the storage is reused (its deployment is incremental), the same id given.
    fake.bodies.clear()
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(params),
               "--yes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert deploy_requests(fake) == [
        ("POST", "whatIf"), ("PUT", "ray-results"), ("POST", "whatIf"), ("PUT", "ray-cluster")
    ]  # fmt: skip
    assert fake.bodies[3][2]["properties"]["parameters"]["resultsStorageAccountId"] == {
        "value": account
    }


def test_no_results_storage_deploys_the_cluster_alone_and_says_so(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes", "--no-results-storage")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert NO_STORAGE in error_lines(r.stderr)
    assert "multi-node Tune run needs a storage_path of its own" in NO_STORAGE
    assert deploy_requests(fake) == [("PUT", "rg-ray"), ("POST", "whatIf"), ("PUT", "ray-cluster")]
    assert "resultsStorageAccountId" not in fake.bodies[2][2]["properties"]["parameters"]
    assert (SUB, "rg-ray-results") not in fake.resource_groups
    assert NO_STORAGE_PRICE in r.stdout


def test_a_refused_results_storage_deploys_nothing_and_deletes_its_new_group(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params))  # fmt: skip
    assert r.returncode == 2
    assert "Microsoft.Storage/storageAccounts/rayres" in r.stdout  # its what-if was shown
    [line] = [x for x in error_lines(r.stderr) if x.startswith("error:")]
    assert line.startswith("error: results storage: Deploy the results storage first: ")
    assert line.endswith("pass --yes to apply the plan shown above — the cluster was not deployed")
    assert "Deleted the resource group rg-ray-results created for the results storage." in r.stderr
    assert deploy_requests(fake) == [("PUT", "rg-ray-results"), ("POST", "whatIf")]
    assert fake.resource_groups == set()
    assert "Hourly price" not in r.stdout
    assert not (tmp_path / "profile.json").exists()


def test_a_failed_results_storage_deploys_nothing_of_the_cluster(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    fake.fail_with = "StorageAccountAlreadyTaken: the storage account name is taken"
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes")  # fmt: skip
    assert r.returncode == 2
    assert error_lines(r.stderr)[-1] == (
        "error: results storage: deployment ray-results in rg-ray-results Failed: "
        "DeploymentFailed: StorageAccountAlreadyTaken: the storage account name is taken — "
        "the cluster was not deployed"
    )
    assert deploy_requests(fake) == [
        ("PUT", "rg-ray-results"), ("POST", "whatIf"), ("PUT", "ray-results")
    ]  # fmt: skip
    assert fake.resource_groups == set()  # the results group made in this run is gone again


def test_a_results_group_that_exists_is_reused_and_kept_on_refusal(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    fake.resource_groups.add((SUB, "rg-ray-results"))
    fake.groups[(SUB, "rg-ray-results")] = {"location": "westeurope", "tags": {}}
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params))  # fmt: skip
    assert r.returncode == 2 and "the cluster was not deployed" in error_lines(r.stderr)[-1]
    assert deploy_requests(fake) == [("POST", "whatIf")]
    assert fake.resource_groups == {(SUB, "rg-ray-results")}


def test_without_a_yes_nothing_is_deployed_and_the_new_group_is_deleted(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--no-results-storage")  # fmt: skip
    assert r.returncode == 2
    assert "Create" in r.stdout  # the what-if was shown
    assert "pass --yes" in error_lines(r.stderr)[-1]
    assert deploy_requests(fake) == [("PUT", "rg-ray"), ("POST", "whatIf")]
    assert (SUB, "rg-ray") not in fake.resource_groups
    assert not (tmp_path / "profile.json").exists()
    # The price came after the what-if, before the question: the template's defaults in the
    # new group's region.
    out = r.stdout
    assert out.index("Create") < out.index("Hourly price in westeurope (USD;")
    assert rows(out[out.index("Hourly price") :])[1:] == [
        ["head", "Standard_D4s_v5", "regular", "0.2300", "1 = 0.2300", "1 = 0.2300", "1 = 0.2300"],
        ["workers", "Standard_D4s_v5", "regular", "0.2300", "0 = 0.0000", "2 = 0.4600",
         "4 = 0.9200"],
        ["total", "0.2300", "0.6900", "1.1500"],
    ]  # fmt: skip


def test_up_prices_in_the_existing_groups_region_with_the_parameters_file(
    fake: FakeAzure, tmp_path: Path, params: Path, prices: FakeRetailPrices
) -> None:
    fake.resource_groups.add((SUB, "rg-east"))
    fake.groups[(SUB, "rg-east")] = {"location": "eastus", "tags": {}}
    doc = json.loads(params.read_text())
    doc["parameters"]["workerSpotEnabled"] = {"value": True}
    doc["parameters"]["workerMaxCount"] = {"value": 10}
    params.write_text(json.dumps(doc))
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-east", "--parameters", str(params),
               "--no-results-storage")  # fmt: skip
    assert r.returncode == 2 and "pass --yes" in error_lines(r.stderr)[-1]
    out = r.stdout[r.stdout.index("Hourly price") :]
    assert HEADER.match(out.splitlines()[0])["region"] == "eastus"  # type: ignore[index]
    assert rows(out)[2] == [
        "workers", "Standard_D4s_v5", "Spot", "0.0192", "0 = 0.0000", "2 = 0.0384", "10 = 0.1920"
    ]  # fmt: skip
    assert "armRegionName eq 'eastus'" in prices.filters()[0]


def test_up_shows_the_results_storage_price_before_asking(
    fake: FakeAzure, tmp_path: Path, params: Path, prices: FakeRetailPrices
) -> None:
    """An account the parameters file names: nothing deployed for it, and the private endpoint
    counts in the hourly total and the storage's own prices follow (tests/unit/test_price.py
    has the cases)."""
    prices.items += [*blob_meters("westeurope"), *private_link_meters()]
    doc = json.loads(params.read_text())
    doc["parameters"]["resultsStorageAccountId"] = {
        "value": f"/subscriptions/{SUB}/resourceGroups/rg-results/providers/"
        "Microsoft.Storage/storageAccounts/rayres0123456789abcdef"
    }
    params.write_text(json.dumps(doc))
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params))  # fmt: skip
    assert r.returncode == 2 and "pass --yes" in error_lines(r.stderr)[-1]
    out = r.stdout[r.stdout.index("Hourly price") :]
    assert rows(out)[3:] == [
        ["storage", "private endpoint", "regular", "0.0100", "1 = 0.0100", "1 = 0.0100",
         "1 = 0.0100"],
        ["total", "0.2400", "0.7000", "1.1600"],
    ]  # fmt: skip
    assert storage(out)["data stored (up to 51,200 GB)"] == "0.0208 per GB-month"
    assert deploy_requests(fake) == [("PUT", "rg-ray"), ("POST", "whatIf")]  # nothing deployed
    named = doc["parameters"]["resultsStorageAccountId"]["value"]
    assert f"Results storage: {named} (from --parameters; nothing deployed for it)." in r.stderr


def test_up_without_the_price_says_so_in_one_line_and_deploys(
    fake: FakeAzure, tmp_path: Path, params: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = closed_port_url()
    monkeypatch.setenv("RAYDRIVER_PRICES_URL", url)
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Hourly price" not in r.stdout
    [line] = [x for x in error_lines(r.stderr) if x.startswith("Price")]
    assert line.startswith(f"Price unknown: the Retail Prices API at {url} did not answer (")
    assert line.endswith("; going on without it.")
    assert deploy_requests(fake)[-1] == ("PUT", "ray-cluster")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), "required adminSshPublicKey, allowedSshCidrs not given"),
        (("--parameters", "/nonexistent.json"), "--parameters: cannot read /nonexistent.json"),
        (("--template", "/nonexistent.json"), "--template: cannot read /nonexistent.json"),
        (("--var", "a=b"), "--var/--var-file/--results-dir are Terraform's"),
        (("--results-dir", "x"), "--var/--var-file/--results-dir are Terraform's"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_sent(
    fake: FakeAzure, tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               *args)  # fmt: skip
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert expected in line
    assert fake.requests == []


def test_a_results_template_that_cannot_be_read_sends_nothing(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--results-template", "/nonexistent.json")  # fmt: skip
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert line.startswith("error: --template: cannot read /nonexistent.json")
    assert line.endswith("(the results storage; --no-results-storage deploys without it)")
    assert fake.requests == []


def test_unknown_parameter_and_missing_location_send_nothing(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    doc = json.loads(params.read_text())
    doc["parameters"]["workerCount"] = {"value": 3}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(bad))
    [line] = error_lines(r.stderr)
    assert "the template has no parameter workerCount" in line
    assert fake.requests == []
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-new", "--parameters", str(params))
    [line] = error_lines(r.stderr)
    assert "resource group rg-new does not exist" in line and "--location" in line
    assert fake.bodies == []


def test_a_failed_deployment_says_why(fake: FakeAzure, tmp_path: Path, params: Path) -> None:
    fake.fail_with = "OperationNotAllowed: quota exceeded for standardDSv5Family"
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes", "--no-results-storage")  # fmt: skip
    assert r.returncode == 2
    assert "Failed" in r.stderr and "quota exceeded" in error_lines(r.stderr)[-1]
    assert not (tmp_path / "profile.json").exists()


def test_down_deletes_only_a_group_up_created(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    fake.add_deployment(SUB, "rg-theirs", "ray-cluster", {"headPublicIp": "20.1.2.4"})
    r = driver(fake, tmp_path, "down", "--resource-group", "rg-theirs", "--yes")
    assert r.returncode == 2
    assert "was not created by" in error_lines(r.stderr)[-1]
    assert (SUB, "rg-theirs") in fake.resource_groups
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = driver(fake, tmp_path, "down", "--resource-group", "rg-ray")
    assert r.returncode == 2 and "pass --yes" in error_lines(r.stderr)[-1]
    assert (SUB, "rg-ray") in fake.resource_groups
    r = driver(fake, tmp_path, "down", "--resource-group", "rg-ray", "--yes")
    assert r.returncode == 0, r.stderr
    assert (SUB, "rg-ray") not in fake.resource_groups
    assert not (tmp_path / "profile.json").exists()  # the remembered cluster is gone too
    # The results storage `up` made stays, and down says where and how to delete it.
    assert (SUB, "rg-ray-results") in fake.resource_groups
    assert error_lines(r.stderr)[-1] == (
        "The results storage stays in resource group rg-ray-results (it outlives clusters; `up` "
        "reuses it): `az group delete --name rg-ray-results` deletes it with every result."
    )
    r = driver(fake, tmp_path, "down", "--resource-group", "rg-ray-results", "--yes")
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert line == (
        "error: resource group rg-ray-results holds results storage (tag raydriver-results="
        "'kept by python -m driver down'), which outlives clusters: down never deletes it; "
        "`az group delete --name rg-ray-results` deletes it with every result"
    )
    assert (SUB, "rg-ray-results") in fake.resource_groups


SCALE_SET = "Microsoft.Compute/virtualMachineScaleSets"


def _uniform_cluster(fake: FakeAzure, mode: str = "Uniform") -> str:
    """rg-ray as a cluster made while Uniform was the default left it: its pool's scale set
    ray-workers (the default pool's name) in ``mode``."""
    fake.groups[(SUB, "rg-ray")] = {"location": "westeurope", "tags": dict([arm.CREATED_TAG])}
    return fake.add_resource(SUB, "rg-ray", SCALE_SET, "ray-workers", {"orchestrationMode": mode})


def test_a_scale_set_whose_mode_would_switch_is_refused_in_one_line_before_deploying(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    """The default template makes the pool Flexible: over a Uniform scale set of the same name
    Azure would fail halfway (a scale set's mode is fixed at creation), so nothing is sent."""
    rid = _uniform_cluster(fake)
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(params),
               "--yes", "--no-results-storage")  # fmt: skip
    assert r.returncode == 2
    assert f"Modify     {rid}" in r.stdout  # the what-if is shown, the scale set as modified
    [line] = [x for x in error_lines(r.stderr) if x.startswith("error:")]
    assert line == (
        "error: what-if: the deployment would switch the orchestration mode of the existing "
        "scale set ray-workers (Uniform -> Flexible), which Azure cannot change in place (nothing "
        "deployed): pin the pool's orchestrationMode: 'Uniform' in --parameters (workerPools), "
        "or delete the scale set first (az vmss delete -g rg-ray -n ray-workers) and run up "
        "again to create it Flexible (docs/pools.md)"
    )
    assert "Traceback" not in r.stderr
    assert deploy_requests(fake) == [("POST", "whatIf")]  # nothing PUT
    assert (SUB, "rg-ray") in fake.resource_groups  # it existed before: kept
    assert not (tmp_path / "profile.json").exists()


def test_the_refusal_deletes_a_group_up_created_in_that_run(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    """The refusal takes the way of every refusal after the group was made: a group `up`
    created in this run is deleted again. (A new group holds no scale set in Azure; the fake
    holds one in a group `up` finds missing only to walk that way.)"""
    _uniform_cluster(fake)
    fake.resource_groups.discard((SUB, "rg-ray"))
    fake.groups.pop((SUB, "rg-ray"))
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--location", "westeurope",
               "--parameters", str(params), "--yes", "--no-results-storage")  # fmt: skip
    assert r.returncode == 2
    assert "(Uniform -> Flexible)" in error_lines(r.stderr)[-1]
    assert "Deleted the resource group rg-ray created for this deployment." in r.stderr
    assert deploy_requests(fake) == [("PUT", "rg-ray"), ("POST", "whatIf")]
    assert (SUB, "rg-ray") not in fake.resource_groups


def test_a_pool_pinned_uniform_keeps_its_scale_set_and_deploys(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    rid = _uniform_cluster(fake)
    doc = json.loads(params.read_text())
    doc["parameters"]["workerPools"] = {
        "value": [{"name": "workers", "orchestrationMode": "Uniform"}]
    }
    params.write_text(json.dumps(doc))
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(params),
               "--yes", "--no-results-storage")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"NoChange   {rid}" in r.stdout
    assert deploy_requests(fake) == [("POST", "whatIf"), ("PUT", "ray-cluster")]


def test_a_scale_set_already_flexible_deploys(
    fake: FakeAzure, tmp_path: Path, params: Path
) -> None:
    rid = _uniform_cluster(fake, "Flexible")
    r = driver(fake, tmp_path, "up", "--resource-group", "rg-ray", "--parameters", str(params),
               "--yes", "--no-results-storage")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"NoChange   {rid}" in r.stdout
    assert deploy_requests(fake) == [("POST", "whatIf"), ("PUT", "ray-cluster")]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"resourceId": f"/x/providers/{SCALE_SET}/w", "delta": [
            {"path": "properties.orchestrationMode", "propertyChangeType": "Modify",
             "before": "Uniform", "after": "Flexible"}]}, ("Uniform", "Flexible")),
        # the same change written as a parent with children
        ({"resourceId": f"/x/providers/{SCALE_SET}/w", "delta": [
            {"path": "properties", "propertyChangeType": "Modify", "children": [
                {"path": "orchestrationMode", "propertyChangeType": "Create",
                 "after": "Flexible"}]}]}, ("not set", "Flexible")),
        ({"resourceId": f"/x/providers/{SCALE_SET}/w", "delta": [
            {"path": "properties.orchestrationMode", "propertyChangeType": "NoEffect",
             "before": "Uniform", "after": "Flexible"}]}, None),
        ({"resourceId": "/x/providers/Microsoft.Network/virtualNetworks/w", "delta": [
            {"path": "properties.orchestrationMode", "propertyChangeType": "Modify",
             "before": "Uniform", "after": "Flexible"}]}, None),
        ({"resourceId": f"/x/providers/{SCALE_SET}/w", "changeType": "NoChange"}, None),
    ],
)  # fmt: skip
def test_a_mode_switch_is_read_from_the_what_if_delta(change: dict, expected: object) -> None:
    assert arm._mode_switch(change) == expected


@pytest.mark.parametrize(
    "delta",
    [5, "properties.orchestrationMode", [5], [{"path": 5}], [{"path": "p", "children": {"x": 1}}]],
)
def test_a_delta_of_another_shape_is_one_line(delta: object) -> None:
    from driver.errors import DriverError, shaped

    change = {"resourceId": f"/x/providers/{SCALE_SET}/w", "delta": delta}
    with pytest.raises(DriverError) as e, shaped("the what-if result"):
        arm._mode_switch(change)
    assert str(e.value).startswith("the what-if result: not in the shape Azure answers in (")
    assert "\n" not in str(e.value)
