"""The typed Azure clients the driver calls (azure-mgmt-resource-deployments, azure-mgmt-compute,
azure-mgmt-imagebuilder): each is a core requirement of pyproject.toml, written as the driver
names it in the line it says when the client is missing (two copies of one fact, held equal
here), and that line is all a user without it sees; what they read from the fake Resource
Manager (tests/fakes/fake_arm.py) is bounded in size and nesting before the SDK parses it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from azure_support import CREDENTIAL_ENV, SUB, VM_ID
from driver import arm, image, power, untrusted
from driver.errors import DriverError
from fakes.fake_arm import FakeAzure
from support import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NAMED = {
    "azure.mgmt.resource.deployments": arm.DEPLOYMENTS_PACKAGE,
    "azure.mgmt.compute": power.COMPUTE_PACKAGE,
    "azure.mgmt.imagebuilder": image.IMAGEBUILDER_PACKAGE,
}


def test_each_client_the_driver_names_is_a_core_requirement() -> None:
    core = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    required = {Requirement(r).name: str(Requirement(r).specifier) for r in core}
    for spec in NAMED.values():
        named = Requirement(spec)
        assert required.get(named.name) == str(named.specifier), (spec, required.get(named.name))


@pytest.mark.parametrize("module", sorted(NAMED))
def test_a_missing_client_is_one_line_naming_what_to_install(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import` of it raises ImportError
    rm = arm.ResourceManager(SUB, "https://127.0.0.1:1")  # not entered: nothing is sent
    use = {
        "azure.mgmt.resource.deployments": lambda: rm.deployments,
        "azure.mgmt.compute": lambda: power.power_state(rm, power.HeadVm(VM_ID)),
        "azure.mgmt.imagebuilder": lambda: image.ImageBuilder(rm, "rg", "ray-node-image"),
    }[module]
    with pytest.raises(DriverError) as raised:
        use()
    message = str(raised.value)
    assert "\n" not in message
    assert message.endswith(f"pip install '{NAMED[module]}'"), message


# -- what the typed clients read is bounded as the hand-written calls' answers are --------------
@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAzure]:
    azure = FakeAzure(tmp_path)
    for name in CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    for k, v in azure.env().items():
        monkeypatch.setenv(k, v)
    azure.vms[VM_ID.lower()] = "deallocated"
    try:
        yield azure
    finally:
        azure.close()


def nested(levels: int) -> Any:
    doc: Any = "PowerState/running"
    for _ in range(levels):
        doc = {"statuses": [doc]}
    return doc


def test_a_typed_clients_answer_nested_too_deep_is_one_line(fake: FakeAzure) -> None:
    path = f"{VM_ID}/instanceView"
    with arm.ResourceManager(SUB, fake.endpoint, sleep=lambda _: None) as rm:
        fake.answers[path.lower()] = nested(
            20
        )  # 40 deep, within the bound: read, the SDK parses it
        assert power.power_state(rm, power.HeadVm(VM_ID)) == "unknown"
        fake.answers[path.lower()] = nested(200)
        with pytest.raises(DriverError) as raised:
            power.power_state(rm, power.HeadVm(VM_ID))
    assert str(raised.value) == (
        f"GET {fake.endpoint}{path}: Resource Manager's answer: JSON nested deeper than "
        f"{untrusted.MAX_DEPTH} levels"
    )


def test_a_typed_clients_answer_longer_than_the_bound_is_cut(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arm, "MAX_ANSWER_BYTES", 4096)
    path = f"{VM_ID}/instanceView"
    fake.answers[path.lower()] = {"statuses": [{"code": "x" * 8192}]}
    with (
        arm.ResourceManager(SUB, fake.endpoint, sleep=lambda _: None) as rm,
        pytest.raises(DriverError) as raised,
    ):
        power.power_state(rm, power.HeadVm(VM_ID))
    assert str(raised.value) == (
        f"GET {fake.endpoint}{path}: Resource Manager's answer: longer than 4096 bytes: "
        "stopped reading"
    )


@pytest.mark.timeout(60)
def test_a_followed_operation_whose_poll_trickles_is_given_up_at_the_bound(
    fake: FakeAzure, monkeypatch: pytest.MonkeyPatch
) -> None:
    """azure-core's poller waits on a poll as long as bytes come (each read's timeout is 60 s);
    the driver gives up when no poll is answered whole within the bound (120 s: 2 s here)."""
    monkeypatch.setattr(arm, "ANSWER_TIMEOUT_S", 2.0)
    monkeypatch.setattr(arm, "MAX_POLL_S", 0.5)
    fake.resource_groups.add((SUB.lower(), "rg-gone"))
    fake.trickle.add("/operationresults/")  # the deletion's Location: accepted, never answered
    start = time.monotonic()
    with (
        arm.ResourceManager(SUB, fake.endpoint, sleep=lambda _: None) as rm,
        pytest.raises(DriverError) as raised,
    ):
        rm.delete_group("rg-gone")
    assert str(raised.value) == (
        f"DELETE {fake.endpoint}/subscriptions/{SUB}/resourcegroups/rg-gone: Resource Manager's "
        "answer: no whole answer within 2 s"
    )
    assert time.monotonic() - start < 2 + 0.5 + 5
