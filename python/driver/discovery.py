"""Which cluster a command means: the first of five sources that names one wins.

1. ``--head [USER@]HOST[:PORT]`` or ``$RAYDRIVER_HEAD``;
2. ``--terraform-dir DIR``: ``terraform output -json`` there (python-terraform);
3. ``--resource-group RG --deployment NAME``: the ARM deployment's outputs (azure-mgmt-resource,
   signed in with azure-identity's DefaultAzureCredential, as a "Deploy to Azure" user is);
4. the profile saved by ``python -m driver use``;
5. otherwise local Ray.

Sources 2 and 3 are read on every command rather than cached, so a redeployed head (new IP) is
found without anyone editing a file. Nothing here opens an SSH connection.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver import layout
from driver.errors import DriverError

DEFAULT_USER = layout.ADMIN_USER
"""The admin user both stacks create when none is given."""
DEFAULT_SSH_PORT = 22
HEAD_ENV = "RAYDRIVER_HEAD"
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
ARM_ENDPOINT_ENV = "AZURE_RESOURCE_MANAGER_ENDPOINT"
DEFAULT_ARM_ENDPOINT = "https://management.azure.com"
DEPLOYMENTS_API_VERSION = "2024-03-01"
"""api-version for GET .../providers/Microsoft.Resources/deployments/{name}."""

# The output names each stack promises (infra/terraform/outputs.tf, the Bicep template).
TERRAFORM_HEAD_IP = "head_public_ip"
TERRAFORM_ADMIN_USER = "admin_username"
ARM_HEAD_IP = "headPublicIp"
ARM_ADMIN_USER = "adminUsername"

_HOST_RE = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class HeadAddress:
    """Where the head's sshd listens and as whom to log in."""

    host: str
    port: int = DEFAULT_SSH_PORT
    user: str = DEFAULT_USER

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port == DEFAULT_SSH_PORT else f":{self.port}"
        return f"{self.user}@{host}{port}"

    @property
    def endpoint(self) -> str:
        """``host:port`` for messages."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class ClusterOptions:
    """The cluster options a verb was given (flags already merged with their env variables)."""

    head: str | None = None
    head_from_env: bool = False
    terraform_dir: str | None = None
    resource_group: str | None = None
    deployment: str | None = None
    subscription: str | None = None
    arm_endpoint: str | None = None

    @classmethod
    def from_flags(
        cls,
        head: str | None = None,
        terraform_dir: str | None = None,
        resource_group: str | None = None,
        deployment: str | None = None,
        subscription: str | None = None,
        arm_endpoint: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ClusterOptions:
        env = os.environ if environ is None else environ
        from_env = not head and bool(env.get(HEAD_ENV))
        return cls(
            head=head or env.get(HEAD_ENV) or None,
            head_from_env=from_env,
            terraform_dir=terraform_dir,
            resource_group=resource_group,
            deployment=deployment,
            subscription=subscription or env.get(SUBSCRIPTION_ENV) or None,
            arm_endpoint=arm_endpoint or env.get(ARM_ENDPOINT_ENV) or None,
        )

    def any(self) -> bool:
        return bool(self.head or self.terraform_dir or self.resource_group or self.deployment)

    def as_profile(self) -> dict[str, str]:
        """What ``use`` saves: the source, never anything secret."""
        if self.head:
            return {"head": self.head}
        if self.terraform_dir:
            return {"terraform_dir": str(Path(self.terraform_dir).expanduser().resolve())}
        if self.resource_group or self.deployment:
            saved = {
                "resource_group": self.resource_group or "",
                "deployment": self.deployment or "",
            }
            if self.subscription:
                saved["subscription"] = self.subscription
            if self.arm_endpoint:
                saved["arm_endpoint"] = self.arm_endpoint
            return saved
        return {}


@dataclass(frozen=True)
class Target:
    """The cluster a command will use, and how the user can name it again."""

    head: HeadAddress | None
    """None means local Ray."""
    source: str
    """Where it came from, for messages ("--head", "terraform outputs in infra/terraform", ...)."""
    hint: list[str] = field(default_factory=list)
    """Options that reach the same cluster next time (empty if env or profile do it anyway)."""

    @property
    def is_local(self) -> bool:
        return self.head is None


# -- 1. --head ---------------------------------------------------------------------------------
def parse_head(spec: str, default_user: str = DEFAULT_USER) -> HeadAddress:
    """``[user@]host[:port]``; an IPv6 address goes in brackets: ``user@[2001:db8::1]:22``."""
    text = spec.strip()
    expected = "expected [USER@]HOST[:PORT], e.g. azureuser@20.1.2.3 or 20.1.2.3:2222"
    if not text or any(c.isspace() for c in text):
        raise DriverError(f"--head: {expected}, got {spec!r}")
    user, sep, rest = text.rpartition("@")
    if sep and not user:
        raise DriverError(f"--head: empty user in {spec!r} ({expected})")
    user = user or default_user
    port_text = ""
    if rest.startswith("["):
        host, bracket, tail = rest[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise DriverError(f"--head: {expected}, got {spec!r}")
        port_text = tail[1:]
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host = rest
    if not host or (":" not in host and not _HOST_RE.match(host)):
        raise DriverError(f"--head: {expected}, got {spec!r}")
    port = DEFAULT_SSH_PORT
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise DriverError(f"--head: port must be 1-65535, got {port_text!r} in {spec!r}")
        port = int(port_text)
    return HeadAddress(host=host, port=port, user=user)


# -- 2. terraform ------------------------------------------------------------------------------
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
    outputs = terraform_outputs(directory)
    if not outputs:
        raise DriverError(
            f"no Terraform outputs in {directory}: expected {TERRAFORM_HEAD_IP} after "
            "`terraform apply` (is this the right folder, with its state?)"
        )
    return _head_from_outputs(
        outputs, f"Terraform outputs in {directory}", TERRAFORM_HEAD_IP, TERRAFORM_ADMIN_USER
    )


# -- 3. ARM deployment -------------------------------------------------------------------------
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
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:300]


def arm_deployment_outputs(
    resource_group: str,
    deployment: str,
    subscription: str | None,
    endpoint: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(provisioningState, outputs)`` of an ARM deployment, read through Resource Manager.

    The deployment is read as a generic resource by its id (``resources.get_by_id``): the same
    ``GET .../providers/Microsoft.Resources/deployments/{name}`` the portal makes, and it works
    with azure-mgmt-resource 23 through 26 (26 moved the typed deployments client to another
    package).
    """
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
    from azure.identity import CredentialUnavailableError, DefaultAzureCredential

    try:
        from azure.mgmt.resource.resources import ResourceManagementClient
    except ImportError:  # pragma: no cover - azure-mgmt-resource < 24
        from azure.mgmt.resource import ResourceManagementClient  # type: ignore[no-redef]

    where = f"ARM deployment {deployment} in resource group {resource_group}"
    resource_id = (
        f"/subscriptions/{subscription}/resourcegroups/{resource_group}"
        f"/providers/Microsoft.Resources/deployments/{deployment}"
    )
    try:
        with (
            DefaultAzureCredential() as credential,
            ResourceManagementClient(
                credential,
                subscription,
                base_url=base,
                credential_scopes=[f"{base}/.default"],
            ) as client,
        ):
            resource = client.resources.get_by_id(resource_id, api_version=DEPLOYMENTS_API_VERSION)
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
    properties = resource.properties or {}
    if not isinstance(properties, dict):  # older SDK models
        properties = properties.as_dict() if hasattr(properties, "as_dict") else dict(properties)
    state = str(properties.get("provisioningState") or "Unknown")
    outputs = properties.get("outputs") or {}
    return state, {k: (v.get("value") if isinstance(v, dict) else v) for k, v in outputs.items()}


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
    where = f"ARM deployment {deployment} in resource group {resource_group}"
    if state != "Succeeded" and not outputs:
        raise DriverError(f"{where} is {state}: it has no outputs yet (expected {ARM_HEAD_IP})")
    return _head_from_outputs(outputs, f"the outputs of {where}", ARM_HEAD_IP, ARM_ADMIN_USER)


# -- all of them -------------------------------------------------------------------------------
SOURCES_HELP = (
    "The cluster is the first of: --head (or $RAYDRIVER_HEAD); --terraform-dir (terraform "
    "output -json); --resource-group with --deployment (the ARM deployment's outputs); the "
    "profile saved by `python -m driver use`; otherwise local Ray."
)


def resolve(options: ClusterOptions, profile: Mapping[str, str] | None) -> Target:
    """Apply the discovery order. ``profile`` is the saved profile (or None)."""
    if options.head:
        head = parse_head(options.head)
        if options.head_from_env:
            return Target(head, f"${HEAD_ENV}")
        return Target(head, "--head", ["--head", str(head)])
    if options.terraform_dir:
        head = from_terraform(options.terraform_dir)
        return Target(
            head,
            f"Terraform outputs in {options.terraform_dir}",
            ["--terraform-dir", options.terraform_dir],
        )
    if options.resource_group or options.deployment:
        if not (options.resource_group and options.deployment):
            raise DriverError("--resource-group and --deployment go together: give both")
        head = from_arm(
            options.resource_group, options.deployment, options.subscription, options.arm_endpoint
        )
        hint = ["--resource-group", options.resource_group, "--deployment", options.deployment]
        if options.subscription and not os.environ.get(SUBSCRIPTION_ENV):
            hint += ["--subscription", options.subscription]
        if options.arm_endpoint and not os.environ.get(ARM_ENDPOINT_ENV):
            hint += ["--arm-endpoint", options.arm_endpoint]
        return Target(
            head, f"ARM deployment {options.deployment} in {options.resource_group}", hint
        )
    if profile:
        saved = ClusterOptions(
            head=profile.get("head"),
            terraform_dir=profile.get("terraform_dir"),
            resource_group=profile.get("resource_group"),
            deployment=profile.get("deployment"),
            subscription=profile.get("subscription") or options.subscription,
            arm_endpoint=profile.get("arm_endpoint") or options.arm_endpoint,
        )
        if saved.any():
            inner = resolve(saved, None)
            return Target(inner.head, f"saved profile ({inner.source})")
    return Target(None, "local Ray")


def hint_text(hint: list[str]) -> str:
    return shlex.join(hint)
