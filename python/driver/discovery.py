"""Find the head a :class:`~driver.settings.ClusterSpec` names.

- ``head``: the address as given (``--head``, ``$RAYDRIVER_HEAD`` or the profile);
- ``terraform_dir``: ``terraform output -json`` there (python-terraform);
- ``resource_group`` + ``deployment``: the ARM deployment's outputs (azure-mgmt-resource, signed
  in with azure-identity's DefaultAzureCredential, as a "Deploy to Azure" user is);
- none of them: local Ray.

Terraform outputs and ARM deployments are read on every command rather than cached, so a
redeployed head (new IP) is found without anyone editing a file; and once per command: the
:class:`Target` carries the outputs it was found in, and what else the command needs from them
(the head VM's id, :func:`driver.power.head_vm`) is taken from there, not read again.
Nothing here opens an SSH connection.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver import untrusted
from driver.address import DEFAULT_USER, HeadAddress, parse_head
from driver.errors import DriverError, one_line, shaped
from driver.settings import DEFAULT_ARM_ENDPOINT, SUBSCRIPTION_ENV, ClusterSpec

DEPLOYMENTS_API_VERSION = "2024-03-01"
"""api-version of Microsoft.Resources/deployments, as the driver reads and makes them."""
DEPLOYMENTS_PACKAGE = "azure-mgmt-resource-deployments>=2,<3"
"""The typed deployments client (azure-mgmt-resource 26 moved it out of that package)."""
MAX_ANSWER_BYTES = 32 << 20
"""One answer of Resource Manager, read whole at most (what-if and operations answers of this
template are well under a megabyte)."""
ANSWER_TIMEOUT_S = 120.0
"""One exchange with Resource Manager, whole: the token, the request, the answer (the SDK's own
timeouts bound each socket read only)."""

# The output names each stack promises (infra/terraform/outputs.tf, the Bicep template).
TERRAFORM_HEAD_IP = "head_public_ip"
TERRAFORM_ADMIN_USER = "admin_username"
ARM_HEAD_IP = "headPublicIp"
ARM_ADMIN_USER = "adminUsername"


# -- Terraform ----------------------------------------------------------------------------------
def terraform_outputs(directory: str | Path) -> dict[str, Any]:
    """``terraform output -json`` in ``directory``, as ``{name: value}``."""
    from python_terraform import IsFlagged, Terraform

    path = Path(directory).expanduser()
    if not path.is_dir():
        raise DriverError(f"--terraform-dir: no such folder: {directory}")
    binary = shutil.which("terraform")
    if binary is None:
        raise DriverError(
            "--terraform-dir needs the terraform CLI on PATH (https://developer.hashicorp.com/"
            "terraform/install), or name the head with --head"
        )
    tf = Terraform(working_dir=str(path), terraform_bin_path=binary)
    code, out, err = tf.output_cmd(json=IsFlagged, no_color=IsFlagged)
    if code != 0:
        detail = " ".join((err or out or "").split())[:300]
        raise DriverError(f"terraform output -json failed in {directory} (exit {code}): {detail}")
    try:
        raw = json.loads(out or "{}")
    except ValueError:
        raise DriverError(
            f"terraform output -json in {directory} did not print JSON: {out[:200]!r}"
        ) from None
    return {name: entry.get("value") for name, entry in raw.items() if isinstance(entry, dict)}


def from_terraform(directory: str | Path) -> HeadAddress:
    return _head_from_terraform(terraform_outputs(directory), directory)


def _head_from_terraform(outputs: Mapping[str, Any], directory: str | Path) -> HeadAddress:
    if not outputs:
        raise DriverError(
            f"no Terraform outputs in {directory}: expected {TERRAFORM_HEAD_IP} after "
            "`terraform apply` (is this the right folder, with its state?)"
        )
    return _head_from_outputs(
        outputs, f"Terraform outputs in {directory}", TERRAFORM_HEAD_IP, TERRAFORM_ADMIN_USER
    )


# -- ARM deployment --------------------------------------------------------------------------
def _normal(name: str) -> str:
    return name.replace("_", "").lower()


def _head_from_outputs(
    outputs: Mapping[str, Any], where: str, ip_name: str, user_name: str
) -> HeadAddress:
    """Find the head's IP and admin user; camelCase and snake_case names both count."""
    by_norm = {_normal(k): v for k, v in outputs.items()}
    ip = by_norm.get(_normal(ip_name))
    if isinstance(ip, dict):  # an ARM output entry: {"type": "String", "value": ...}
        ip = ip.get("value")
    if not ip or not isinstance(ip, str):
        names = ", ".join(sorted(outputs)) or "none"
        raise DriverError(f"{where} have no {ip_name} (outputs: {names})")
    user = by_norm.get(_normal(user_name))
    if isinstance(user, dict):
        user = user.get("value")
    return parse_head(ip, default_user=user if isinstance(user, str) and user else DEFAULT_USER)


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return one_line(lines[0] if lines else e)


def arm_deployment_outputs(
    resource_group: str,
    deployment: str,
    subscription: str | None,
    endpoint: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(provisioningState, outputs)`` of an ARM deployment, read through Resource Manager
    with azure-mgmt-resource-deployments' client (``deployments.get``: ``GET .../providers/
    Microsoft.Resources/deployments/{name}``, api-version :data:`DEPLOYMENTS_API_VERSION`)."""
    if not subscription:
        raise DriverError(
            "--resource-group/--deployment need a subscription: pass --subscription ID "
            f"or set {SUBSCRIPTION_ENV}"
        )
    base = (endpoint or DEFAULT_ARM_ENDPOINT).rstrip("/")
    if not base.startswith("https://"):
        raise DriverError(f"--arm-endpoint must be an https:// URL, got {base!r}")
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
    )
    from azure.identity import CredentialUnavailableError

    try:
        from azure.mgmt.resource.deployments import DeploymentsMgmtClient
    except ImportError:
        name = DEPLOYMENTS_PACKAGE.split(">")[0]
        raise DriverError(
            f"reading an ARM deployment needs {name}: pip install '{DEPLOYMENTS_PACKAGE}'"
        ) from None

    where = f"ARM deployment {deployment} in resource group {resource_group}"
    try:
        with (
            untrusted.credential() as credential,
            DeploymentsMgmtClient(
                credential,
                subscription,
                base_url=base,
                credential_scopes=[f"{base}/.default"],
                retry_policy=untrusted.retry_policy(),
                transport=untrusted.transport(max_bytes=MAX_ANSWER_BYTES),
                api_version=DEPLOYMENTS_API_VERSION,
            ) as client,
        ):
            resource = untrusted.within(
                ANSWER_TIMEOUT_S, lambda: client.deployments.get(resource_group, deployment)
            )
    except ResourceNotFoundError as e:
        raise DriverError(
            f"{where} not found (subscription {subscription}): {_arm_message(e)}"
        ) from None
    except (CredentialUnavailableError, ClientAuthenticationError) as e:
        raise DriverError(
            f"cannot sign in to Azure to read {where}: {_credential_error(e)} (expected `az "
            "login`, a managed identity, or AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
        ) from None
    except ServiceRequestError as e:
        raise DriverError(
            f"cannot reach Azure Resource Manager at {base}: {_first_line(e)}"
        ) from None
    except HttpResponseError as e:
        raise DriverError(
            f"reading {where} failed: HTTP {e.status_code} {_arm_message(e)}"
        ) from None
    except untrusted.Unreadable as e:
        raise DriverError(f"reading {where}: Resource Manager's answer: {e}") from None
    with shaped(where):
        properties = resource.get("properties") or {}
        state = str(properties.get("provisioningState") or "Unknown")
        outputs = properties.get("outputs") or {}
        return state, {
            k: (v.get("value") if isinstance(v, dict) else v) for k, v in outputs.items()
        }


_UNAVAILABLE = ("unavailable", "not found", "not installed", "could not be found", "requires")


def _credential_error(e: BaseException) -> str:
    """DefaultAzureCredential lists every credential it tried; keep the one that really failed."""
    for line in str(e).splitlines():
        name, sep, detail = line.strip().partition(": ")
        if sep and name.endswith("Credential") and "Token request error" in detail:
            return f"{name}: {detail.split('Token request error')[-1].strip(' :')[:200]}"
    for line in str(e).splitlines():
        name, sep, detail = line.strip().partition(": ")
        if sep and name.endswith("Credential") and not any(u in detail for u in _UNAVAILABLE):
            return f"{name}: {detail[:200]}"
    return _first_line(e)


def _arm_message(e: Any) -> str:
    error = getattr(e, "error", None)
    code = getattr(error, "code", None)
    message = getattr(error, "message", None) or _first_line(e)
    return f"{code}: {message}" if code else message


def from_arm(
    resource_group: str, deployment: str, subscription: str | None, endpoint: str | None = None
) -> HeadAddress:
    state, outputs = arm_deployment_outputs(resource_group, deployment, subscription, endpoint)
    return _head_from_arm(state, outputs, resource_group, deployment)


def _head_from_arm(
    state: str, outputs: Mapping[str, Any], resource_group: str, deployment: str
) -> HeadAddress:
    where = f"ARM deployment {deployment} in resource group {resource_group}"
    if state != "Succeeded" and not outputs:
        raise DriverError(f"{where} is {state}: it has no outputs yet (expected {ARM_HEAD_IP})")
    return _head_from_outputs(outputs, f"the outputs of {where}", ARM_HEAD_IP, ARM_ADMIN_USER)


# -- all of them -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """The head a command will use (None: local Ray) and where it was found, for messages."""

    head: HeadAddress | None
    source: str
    outputs: Mapping[str, Any] = field(default_factory=dict)
    """The stack outputs the head was found in (Terraform's or the ARM deployment's); empty for
    a head named by address and for local Ray. A command reads them once, here."""
    stack: str = ""
    """Those outputs, for messages: "the Terraform outputs", "ARM deployment NAME"."""

    @property
    def is_local(self) -> bool:
        return self.head is None


def locate(spec: ClusterSpec) -> Target:
    """Find the head the user named (see :data:`driver.settings.CLUSTER_ORDER`): one read of
    the stack's outputs at most; hand the Target on rather than locating again."""
    what = spec.source if spec.source.startswith("$") else "--head"
    if spec.head:
        return Target(parse_head(spec.head, what=what), spec.source)
    if spec.terraform_dir:
        outputs = terraform_outputs(spec.terraform_dir)
        head = _head_from_terraform(outputs, spec.terraform_dir)
        where = f"Terraform outputs in {spec.terraform_dir}"
        return Target(head, _via(spec, where), outputs, "the Terraform outputs")
    if spec.resource_group and spec.deployment:
        state, outputs = arm_deployment_outputs(
            spec.resource_group, spec.deployment, spec.subscription, spec.arm_endpoint
        )
        head = _head_from_arm(state, outputs, spec.resource_group, spec.deployment)
        where = f"ARM deployment {spec.deployment} in {spec.resource_group}"
        return Target(head, _via(spec, where), outputs, f"ARM deployment {spec.deployment}")
    return Target(None, "local Ray")


def _via(spec: ClusterSpec, where: str) -> str:
    return f"saved profile ({where})" if spec.source == "saved profile" else where
