"""What the tests that play Azure share: the subscription, resource ids and names they deploy
and ask for, the credentials a test keeps out of the driver's environment, and the driver run
against the fake Resource Manager (tests/fakes/fake_arm.py). Its fixtures are in conftest.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from support import REPO, run_driver

if TYPE_CHECKING:
    from fakes.fake_arm import FakeAzure

TEMPLATE = REPO / "infra" / "bicep" / "azuredeploy.json"
PARAMETERS = REPO / "infra" / "bicep" / "azuredeploy.parameters.json"
SUB = "00000000-1111-2222-3333-444444444444"
CREDENTIAL_ENV = (
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_USERNAME",
    "AZURE_PASSWORD",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_CERTIFICATE_PATH",
)
"""azure-identity's variables: a developer's credentials never reach the fake."""

GROUP = "rg-ray"
VM_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
    "/providers/Microsoft.Compute/virtualMachines/ray-head"
)
AUTOSCALE_ID = (
    f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
    "/providers/Microsoft.Insights/autoscalesettings/ray-workers-autoscale"
)
CLOSED = "azureuser@127.0.0.1:1"
"""A head whose SSH port refuses at once: what follows the start fails fast, after it."""

# checkov:skip=CKV_SECRET_6:The name of the token's Key Vault secret, not a secret value
TOKEN_SECRET = "ray-cluster-token"


def driver(fake: FakeAzure, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m driver ARGS`` against the fake Resource Manager, in subscription SUB."""
    env = {**fake.env(), "AZURE_SUBSCRIPTION_ID": SUB}
    return run_driver(*args, home=home, env=env)


def deploy_requests(fake: FakeAzure) -> list[tuple[str, str]]:
    """(method, last path segment) of every request with a body the fake received."""
    return [(m, p.rsplit("/", 1)[-1]) for m, p, _ in fake.bodies]
