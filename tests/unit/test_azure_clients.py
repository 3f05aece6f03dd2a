"""The typed Azure clients the driver calls (azure-mgmt-resource-deployments, azure-mgmt-compute,
azure-mgmt-imagebuilder): each is a core requirement of pyproject.toml, written as the driver
names it in the line it says when the client is missing (two copies of one fact, held equal
here), and that line is all a user without it sees."""

from __future__ import annotations

import sys

import pytest
from packaging.requirements import Requirement

from azure_support import SUB, VM_ID
from driver import arm, image, power
from driver.errors import DriverError
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
