"""A fake of the two Azure endpoints ARM discovery talks to, over HTTPS like the real ones.

Azure Resource Manager and Azure's identity service cannot exist on this machine, so this module
stands in for exactly the calls the driver makes, with the real wire format:

* **Managed identity token** (App Service flavour, what ``IDENTITY_ENDPOINT`` +
  ``IDENTITY_HEADER`` select in azure-identity's ``DefaultAzureCredential``):
  ``GET {IDENTITY_ENDPOINT}?api-version=2019-08-01&resource=R`` with header
  ``X-IDENTITY-HEADER`` → ``{"access_token", "expires_on", "resource", "token_type",
  "client_id"}``. A wrong header gets 401, as the real endpoint answers.
* **Deployments** — ``GET /subscriptions/{sub}/resourcegroups/{rg}/providers/
  Microsoft.Resources/deployments/{name}?api-version=...`` with ``Authorization: Bearer`` the
  token handed out above → a ``DeploymentExtended`` document whose ``properties.outputs`` holds
  ``{"type": "String", "value": ...}`` entries. Path segments are matched case-insensitively, as
  ARM does; errors use ARM's ``{"error": {"code", "message"}}`` body (``AuthenticationFailed``,
  ``ResourceGroupNotFound``, ``DeploymentNotFound``, ``MissingApiVersionParameter``).
* **Deploying** (what ``up/down --resource-group`` send through azure-mgmt-resource's and
  azure-mgmt-resource-deployments' clients, deployments at api-version 2024-03-01):
  ``GET/PUT/DELETE /subscriptions/{sub}/resourcegroups/{rg}`` (PUT ``{"location", "tags"}`` →
  201; DELETE → 202 + ``Location``, polled until 200); ``POST .../deployments/{name}/whatIf``
  → 202 + ``Location`` + ``Retry-After``, the operation result first 202 again, then 200 with a
  ``WhatIfOperationResult`` (``status``, ``properties.changes[]`` with ``resourceId`` and
  ``changeType``: ``Create`` for each of the template's own resources; for each resource the
  group already holds, :meth:`FakeAzure.add_resource`, ``Modify`` with a ``delta`` of
  ``WhatIfPropertyChange`` entries (``path``, ``propertyChangeType``, ``before``, ``after``)
  where the deployment, nested deployments evaluated, gives one of its held properties another
  value, ``NoChange`` where it gives them all the same, ``Ignore`` where it does not deploy it;
  only the properties the test gave are compared); ``PUT .../deployments/{name}`` (body
  recorded in :attr:`FakeAzure.bodies`)
  → 201 with ``provisioningState: Accepted``, then ``Running`` and ``Succeeded`` (or
  ``Failed``, :attr:`FakeAzure.fail_with`) on the next GETs, with the outputs the test gave in
  :attr:`FakeAzure.next_outputs` (a template whose outputs need no more of its resources than
  a storage account's endpoints, infra/bicep/results.json, gets its own outputs, evaluated
  with tests/armeval.py as Resource Manager would); ``GET .../deployments/{name}/operations``
  (the REST specification's path, without ``/providers/Microsoft.Resources``, as the SDK sends
  it) → ``{"value": [DeploymentOperation]}``, one per resource of the template, following the
  deployment's state. A PUT without a required template parameter gets 400
  ``InvalidTemplateDeployment``.
* **Image Builder** (``python -m driver image build``, api-version 2024-02-01, the section
  "Image Builder" below): a deployment that succeeds creates the image templates
  (``Microsoft.VirtualMachineImages/imageTemplates``) its template declares; ``GET
  .../imageTemplates/{name}`` → the template (``properties.lastRunStatus`` once it ran) or 404
  ``ResourceNotFound``; ``POST .../imageTemplates/{name}/run`` → 202 with
  ``Azure-AsyncOperation`` (and ``Location``) naming ``/subscriptions/{sub}/providers/
  Microsoft.VirtualMachineImages/locations/{loc}/operations/{id}``, whose document is
  ``{"name", "status": "InProgress"|"Succeeded"|"Failed", "startTime", "endTime", "error"}``;
  each poll of it moves the run one step through :attr:`FakeAzure.build_steps` (runState
  Running with runSubState Queued, Building, Customizing, Distributing), then Succeeded, or
  Failed at Customizing with :attr:`FakeAzure.build_fails_with`; ``GET .../imageTemplates/
  {name}/runOutputs/{runOutputName}`` → ``properties.artifactId``, the new gallery image
  version's id (versions 1.0.1, 1.0.2, ... per template).
* **A stopped cluster** (``python -m driver start``, api-versions 2024-11-01 and 2022-10-01):
  the VMs of :attr:`FakeAzure.vms` (resource id → power state): ``GET {vm}/instanceView`` →
  ``{"statuses": [{"code": "ProvisioningState/succeeded"}, {"code": "PowerState/STATE"}]}``;
  ``POST {vm}/start`` → 202 with ``Azure-AsyncOperation`` (``.../providers/Microsoft.Compute/
  locations/L/operations/ID``) and ``Retry-After``, the VM ``starting``; the operation's
  document says ``InProgress`` for :attr:`FakeAzure.start_polls` polls, then ``Succeeded`` and
  the VM is ``running``. ``PATCH {autoscale setting}`` with ``{"properties": {"enabled": B}}``
  sets :attr:`FakeAzure.autoscale` (resource id → enabled) and answers the setting.
* **Capacity** (what ``up`` and ``price`` check before anything is created):
  ``GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{l}/usages?api-version=
  2024-07-01`` → ``{"value": [{"unit": "Count", "currentValue", "limit", "name": {"value",
  "localizedValue"}}], "nextLink"}`` from :attr:`FakeAzure.usages` (name → (in use, limit), the
  same in every region), :attr:`FakeAzure.page_size` items a page; ``GET .../Microsoft.Compute/
  skus?api-version=2021-07-01&$filter=location eq 'L'`` → the ``ResourceSku`` documents of
  :attr:`FakeAzure.skus` (:func:`vm_sku`) offered in L, ``locations`` and ``locationInfo`` cut to
  L as Azure's filtered answer is, restrictions included; ``POST .../locations/{l}/
  placementScores/spot/generate?api-version=2025-06-05`` (``desiredLocations``,
  ``desiredSizes[].sku``, ``desiredCount``, ``availabilityZones``) → ``placementScores[]`` per
  size, region and zone with :attr:`FakeAzure.spot_scores`' score (default "High") and
  ``isQuotaAvailable`` from ``lowPriorityCores``. The fake refuses (400) what Azure's
  specifications do not show an answer for: another api-version, another ``$filter`` than one
  location, the regional scope (``availabilityZones: false``) of placement scores.
  :attr:`FakeAzure.errors` answers a path with an ARM error of the test's own (a 403
  ``AuthorizationFailed``, as Azure answers a caller without the role).
* **Throttling**: with :attr:`FakeAzure.throttle` set, the next requests are ``429`` with
  ``{"error": {"code": "TooManyRequests"}}`` and the ``Retry-After`` given (any text: Azure
  sends seconds; a hostile or broken server may send anything); :attr:`FakeAzure.token_throttle`
  does the same for the token endpoint (App Service's identity answer: ``{"statusCode": 429,
  "message": ...}``).
* **A broken or hostile Resource Manager**: :attr:`FakeAzure.answers` gives a path a JSON answer
  of the test's own (another shape than Azure's); a path in :attr:`FakeAzure.trickle` is
  answered a byte every half second, for ever (a status line that never ends).

Why HTTPS with a throwaway self-signed certificate: azure-core refuses to send a bearer token
over plain http, so the real SDK only talks to an https endpoint. :meth:`FakeAzure.env` gives
the variables a client process needs: ``REQUESTS_CA_BUNDLE`` (trust the throwaway CA),
``IDENTITY_ENDPOINT``/``IDENTITY_HEADER`` and ``AZURE_RESOURCE_MANAGER_ENDPOINT``.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import secrets
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import armeval

_DEPLOYMENT_PATH = re.compile(
    # A deployment's operations are listed without the provider segment (the REST
    # specification's path, what azure-mgmt-resource-deployments sends); ARM takes both.
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)"
    r"(?:/providers/microsoft\.resources)?/deployments/(?P<name>[^/]+)"
    r"(?P<tail>/whatIf|/operations)?$",
    re.IGNORECASE,
)
_GROUP_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)$", re.IGNORECASE
)
_RESULT_PATH = re.compile(r"^/operationresults/(?P<id>[0-9a-f-]+)$")
_IMAGE_TEMPLATE_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/"
    r"microsoft\.virtualmachineimages/imagetemplates/(?P<name>[^/]+)"
    r"(?P<tail>/run|/runoutputs/[^/]+)?$",
    re.IGNORECASE,
)
_IMAGE_OPERATION_PATH = re.compile(
    r"^/subscriptions/[^/]+/providers/microsoft\.virtualmachineimages/locations/[^/]+"
    r"/operations/(?P<id>[0-9a-f-]+)$",
    re.IGNORECASE,
)
IMAGE_API_VERSION = "2024-02-01"
_VM_PATH = re.compile(
    r"^(?P<id>/subscriptions/[^/]+/resourcegroups/[^/]+/providers/microsoft\.compute"
    r"/virtualmachines/[^/]+)(?P<tail>/instanceview|/start)$",
    re.IGNORECASE,
)
_COMPUTE_OPERATION_PATH = re.compile(
    r"^/subscriptions/[^/]+/providers/microsoft\.compute/locations/[^/]+/operations/(?P<id>[0-9a-f-]+)$",
    re.IGNORECASE,
)
_USAGES_PATH = re.compile(
    r"^/subscriptions/[^/]+/providers/microsoft\.compute/locations/(?P<loc>[^/]+)/usages$",
    re.IGNORECASE,
)
_SKUS_PATH = re.compile(r"^/subscriptions/[^/]+/providers/microsoft\.compute/skus$", re.IGNORECASE)
_PLACEMENT_PATH = re.compile(
    r"^/subscriptions/[^/]+/providers/microsoft\.compute/locations/(?P<loc>[^/]+)"
    r"/placementscores/spot/generate$",
    re.IGNORECASE,
)
USAGES_API_VERSION = "2024-07-01"
SKUS_API_VERSION = "2021-07-01"
PLACEMENT_API_VERSION = "2025-06-05"
_AUTOSCALE_PATH = re.compile(
    r"^/subscriptions/[^/]+/resourcegroups/[^/]+/providers/microsoft\.insights"
    r"/autoscalesettings/[^/]+$",
    re.IGNORECASE,
)


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1/localhost and its key (PEM), valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-azure.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "fake-azure.crt", folder / "fake-azure.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass
class FakeAzure:
    """An HTTPS server on 127.0.0.1 playing Resource Manager and the identity endpoint."""

    folder: Path
    identity_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    access_token: str = field(default_factory=lambda: "fake-arm-token-" + secrets.token_hex(16))
    deployments: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    resource_groups: set[tuple[str, str]] = field(default_factory=set)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """Resource groups as PUT/GET see them ({"location", "tags"}); add_deployment adds bare ones."""
    bodies: list[tuple[str, str, Any]] = field(default_factory=list)
    """(method, path, JSON body) of every PUT and POST, in order."""
    next_outputs: dict[str, str] = field(default_factory=dict)
    fail_with: str | None = None
    """A message: the next deployment fails with it (code ResourceDeploymentFailure)."""
    image_templates: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    """Image Builder templates by (subscription, resource group, name), lower case."""
    build_steps: tuple[str, ...] = ("Queued", "Building", "Customizing", "Distributing")
    """The runSubStates a build goes through, one per poll of its operation."""
    build_fails_with: str | None = None
    """A message: the next build fails in Customizing with it."""
    build_retry_after: str = "1"
    """The Retry-After (seconds) the build's operation answers with."""
    runs: list[tuple[str, str, str]] = field(default_factory=list)
    """(subscription, resource group, name) of every build started (POST run)."""
    vms: dict[str, str] = field(default_factory=dict)
    """VM resource id (lower case) → power state (``deallocated``, ``running``, ...)."""
    autoscale: dict[str, bool] = field(default_factory=dict)
    """Autoscale setting resource id (lower case) → enabled."""
    start_polls: int = 2
    """How many polls a VM start's operation says InProgress."""
    start_fails_with: str | None = None
    """A message: the next start's operation ends ``Failed`` with it (the VM stays as it was)."""
    throttle: list[str] = field(default_factory=list)
    """Retry-After values: each next request to Resource Manager (not the token endpoint) is
    answered ``429 TooManyRequests`` with the first, which goes."""
    token_throttle: list[str] = field(default_factory=list)
    """Retry-After values: each next token request is answered ``429`` with the first."""
    usages: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {
            "cores": (0, 100),
            "lowPriorityCores": (0, 100),
            "standardDSv5Family": (0, 100),
            "standardFSv2Family": (0, 100),
            "standardNCASv3_T4Family": (0, 8),
            "virtualMachines": (0, 25000),
        }
    )
    """Compute usages (name → (currentValue, limit)), the same in every region."""
    skus: list[dict[str, Any]] = field(
        default_factory=lambda: [
            vm_sku("Standard_D4s_v5", "standardDSv5Family", 4),
            vm_sku("Standard_D8s_v5", "standardDSv5Family", 8),
            vm_sku("Standard_F8s_v2", "standardFSv2Family", 8),
            vm_sku("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, spot=False),
        ]
    )
    """The Resource SKUs catalogue (:func:`vm_sku` documents)."""
    page_size: int = 100
    """Usages and SKUs per page (``nextLink`` to the next)."""
    spot_scores: dict[str, str] = field(default_factory=dict)
    """VM size (lower case) → its Spot placement score (default "High")."""
    errors: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    """Path (lower case) → (status, code, message): an ARM error answered in place of the
    fake's own."""
    answers: dict[str, Any] = field(default_factory=dict)
    """Path (lower case) → the JSON answered (200) in place of the fake's own."""
    trickle: set[str] = field(default_factory=set)
    """Paths (lower case; one that ends in ``/``, every path under it) whose answer trickles, a
    byte every half second, for ever."""
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Resources that exist in a group before a deployment (:meth:`add_resource`): resource id
    (lower case) → ``{"id", "type", "name", "properties"}``, what a what-if compares with."""
    _starts: dict[str, list[Any]] = field(default_factory=dict)
    _builds: dict[str, dict[str, Any]] = field(default_factory=dict)
    _results: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    _polls: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._closed = threading.Event()
        self.cert, key = self_signed_cert(self.folder)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake._handle(self)

            def do_PUT(self) -> None:
                fake._handle(self)

            def do_POST(self) -> None:
                fake._handle(self)

            def do_DELETE(self) -> None:
                fake._handle(self)

            def do_PATCH(self) -> None:
                fake._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # -- what a test sets up -----------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    @property
    def identity_endpoint(self) -> str:
        return f"{self.endpoint}/msi/token"

    def env(self) -> dict[str, str]:
        return {
            "REQUESTS_CA_BUNDLE": str(self.cert),
            "IDENTITY_ENDPOINT": self.identity_endpoint,
            "IDENTITY_HEADER": self.identity_secret,
            "AZURE_RESOURCE_MANAGER_ENDPOINT": self.endpoint,
        }

    def add_deployment(
        self,
        subscription: str,
        resource_group: str,
        name: str,
        outputs: dict[str, str],
        state: str = "Succeeded",
    ) -> None:
        rg = resource_group.lower()
        self.resource_groups.add((subscription.lower(), rg))
        deployment_id = (
            f"/subscriptions/{subscription}/resourceGroups/{resource_group}"
            f"/providers/Microsoft.Resources/deployments/{name}"
        )
        self.deployments[(subscription.lower(), rg, name.lower())] = {
            "id": deployment_id,
            "name": name,
            "type": "Microsoft.Resources/deployments",
            "tags": {},
            "properties": {
                "templateHash": "9158714738399846447",
                "parameters": {"adminUsername": {"type": "String", "value": "azureuser"}},
                "mode": "Incremental",
                "provisioningState": state,
                "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                "duration": "PT3M12.5S",
                "correlationId": str(uuid.uuid4()),
                "providers": [
                    {
                        "namespace": "Microsoft.Compute",
                        "resourceTypes": [
                            {"resourceType": "virtualMachines", "locations": ["westeurope"]}
                        ],
                    }
                ],
                "dependencies": [],
                "outputs": {k: {"type": "String", "value": v} for k, v in outputs.items()},
                "outputResources": [],
            },
        }

    def add_resource(
        self,
        subscription: str,
        resource_group: str,
        rtype: str,
        name: str,
        properties: dict[str, Any],
    ) -> str:
        """A resource that exists in the group (made there before, by an older template or by
        hand), with the properties Azure reports for it; the group too. Its id."""
        rg = resource_group.lower()
        self.resource_groups.add((subscription.lower(), rg))
        self.groups.setdefault((subscription.lower(), rg), {"location": "westeurope", "tags": {}})
        group = f"/subscriptions/{subscription}/resourceGroups/{resource_group}"
        rid = f"{group}/providers/{rtype}/{name}"
        self.resources[rid.lower()] = {
            "id": rid, "type": rtype, "name": name, "properties": properties
        }  # fmt: skip
        return rid

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- the wire ------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append((url.path, url.query, dict(h.headers.items())))
        if url.path == "/msi/token":
            if self.token_throttle:
                message = "Too many requests to the identity endpoint."
                after = self.token_throttle.pop(0)
                self._send(h, 429, {"statusCode": 429, "message": message}, {"Retry-After": after})
                return
            self._token(h, query)
            return
        if self.throttle:
            self._send(
                h,
                429,
                _error("TooManyRequests", "The request is being throttled."),
                {"Retry-After": self.throttle.pop(0)},
            )
            return
        if h.headers.get("Authorization") != f"Bearer {self.access_token}":
            self._send(
                h,
                401,
                _error(
                    "AuthenticationFailed",
                    "Authentication failed. The 'Authorization' header is missing or invalid.",
                ),
            )
            return
        if "api-version" not in query:
            self._send(
                h,
                400,
                _error(
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required for all requests.",
                ),
            )
            return
        if any(
            url.path.lower() == t or (t.endswith("/") and url.path.lower().startswith(t))
            for t in self.trickle
        ):
            self._trickle(h)
            return
        if url.path.lower() in self.answers:
            self._send(h, 200, self.answers[url.path.lower()])
            return
        if url.path.lower() in self.errors:
            status, code, message = self.errors[url.path.lower()]
            self._send(h, status, _error(code, message))
            return
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length)) if length else None
        if h.command in ("PUT", "POST", "PATCH"):
            self.bodies.append((h.command, url.path, body))
        usages = _USAGES_PATH.match(url.path)
        if usages is not None and h.command == "GET":
            self._usages(h, url.path, query)
            return
        if _SKUS_PATH.match(url.path) and h.command == "GET":
            self._skus(h, url.path, query)
            return
        if _PLACEMENT_PATH.match(url.path) and h.command == "POST":
            self._placement(h, query, body)
            return
        vm = _VM_PATH.match(url.path)
        if vm is not None:
            self._vm(h, vm["id"].lower(), vm["tail"].lower())
            return
        compute_op = _COMPUTE_OPERATION_PATH.match(url.path)
        if compute_op is not None:
            self._start_operation(h, compute_op["id"])
            return
        if _AUTOSCALE_PATH.match(url.path):
            self._autoscale(h, url.path, body)
            return
        result = _RESULT_PATH.match(url.path)
        if result is not None:
            self._result(h, result["id"])
            return
        image_op = _IMAGE_OPERATION_PATH.match(url.path)
        if image_op is not None:
            self._build_operation(h, image_op["id"])
            return
        image = _IMAGE_TEMPLATE_PATH.match(url.path)
        if image is not None:
            self._image_template(h, image, query)
            return
        group = _GROUP_PATH.match(url.path)
        if group is not None:
            self._group(h, group["sub"].lower(), group["rg"], body)
            return
        match = _DEPLOYMENT_PATH.match(url.path)
        if match is not None and "/providers/" not in url.path.lower() and match["tail"] is None:
            match = None  # only the operations' list has a path without the provider
        if match is None:
            self._send(h, 404, _error("InvalidResourceType", f"No route for {url.path}"))
            return
        sub, rg, name = (match[g].lower() for g in ("sub", "rg", "name"))
        if (sub, rg) not in self.resource_groups:
            self._send(
                h,
                404,
                _error(
                    "ResourceGroupNotFound", f"Resource group '{match['rg']}' could not be found."
                ),
            )
            return
        if h.command == "POST" and (match["tail"] or "").lower() == "/whatif":
            self._what_if(h, match["sub"], match["rg"], match["name"], body)
            return
        if h.command == "PUT" and not match["tail"]:
            self._put_deployment(h, (sub, rg, name), match, body)
            return
        deployment = self.deployments.get((sub, rg, name))
        if deployment is not None and (match["tail"] or "").lower() == "/operations":
            self._send(h, 200, {"value": deployment.get("_operations", [])})
            return
        if deployment is not None and "_operations" in deployment:
            self._advance((sub, rg, name))
            shown = {k: v for k, v in deployment.items() if not k.startswith("_")}
            self._send(h, 200, shown, {"Retry-After": "0"})
            return
        if deployment is None:
            self._send(
                h,
                404,
                _error("DeploymentNotFound", f"Deployment '{match['name']}' could not be found."),
            )
            return
        self._send(h, 200, deployment)

    # -- deploying ---------------------------------------------------------------------------
    def _group(self, h: BaseHTTPRequestHandler, sub: str, rg: str, body: Any) -> None:
        key = (sub, rg.lower())
        if h.command == "PUT":
            created = key not in self.resource_groups
            self.resource_groups.add(key)
            self.groups[key] = {"location": body["location"], "tags": body.get("tags", {})}
            self._send(h, 201 if created else 200, self._group_doc(sub, rg))
            return
        if key not in self.resource_groups:
            self._send(
                h,
                404,
                _error("ResourceGroupNotFound", f"Resource group '{rg}' could not be found."),
            )
            return
        if h.command == "DELETE":
            self.resource_groups.discard(key)
            self.groups.pop(key, None)
            for k in [k for k in self.deployments if k[:2] == key]:
                del self.deployments[k]
            self._send(h, 202, None, self._later([(200, None)]))
            return
        self._send(h, 200, self._group_doc(sub, rg))

    def _group_doc(self, sub: str, rg: str) -> dict[str, Any]:
        group = self.groups.get((sub, rg.lower()), {"location": "westeurope", "tags": {}})
        return {
            "id": f"/subscriptions/{sub}/resourceGroups/{rg}",
            "name": rg,
            "type": "Microsoft.Resources/resourceGroups",
            "properties": {"provisioningState": "Succeeded"},
            **group,
        }

    def _later(self, answers: list[tuple[int, Any]]) -> dict[str, str]:
        """Headers of a 202: the Location that answers 202 once, then each of ``answers``."""
        op = str(uuid.uuid4())
        self._results[op] = [(202, None), *answers]
        return {
            "Location": f"{self.endpoint}/operationresults/{op}?api-version=2024-03-01",
            "Retry-After": "1",
        }

    def _result(self, h: BaseHTTPRequestHandler, op: str) -> None:
        queue = self._results.get(op)
        if not queue:
            self._send(h, 404, _error("NotFound", f"operation {op}"))
            return
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        headers = {
            "Location": f"{self.endpoint}/operationresults/{op}?api-version=2024-03-01",
            "Retry-After": "1",
        }
        self._send(h, status, body, headers if status == 202 else {})

    @staticmethod
    def _resources(template: dict[str, Any], values: dict[str, Any]) -> list[tuple[str, str]]:
        """(type, name) of the template's own resources as Resource Manager expands them: copy
        loops item by item, conditions applied, names evaluated (tests/armeval.py)."""
        return armeval.top_level_resources(template, values)

    def _refuse(self, template: dict[str, Any], values: dict[str, Any]) -> str | None:
        missing = [
            n for n, p in template.get("parameters", {}).items()
            if "defaultValue" not in p and n not in values
        ]  # fmt: skip
        if missing:
            return f"The value for the template parameter '{missing[0]}' is not provided."
        try:
            armeval.top_level_resources(template, values)
        except armeval.ArmError as e:
            return str(e)
        return None

    def _what_if(self, h: BaseHTTPRequestHandler, sub: str, rg: str, name: str, body: Any) -> None:
        props = body["properties"]
        values = {k: v["value"] for k, v in props.get("parameters", {}).items()}
        refused = self._refuse(props["template"], values)
        if refused:
            self._send(h, 400, _error("InvalidTemplate", refused))
            return
        held = {
            k: r for k, r in self.resources.items()
            if k.startswith(f"/subscriptions/{sub}/resourcegroups/{rg}/".lower())
        }  # fmt: skip
        changes = [
            {"resourceId": rid, "changeType": "Create"}
            for t, n in self._resources(props["template"], values)
            if (rid := f"/subscriptions/{sub}/resourceGroups/{rg}/providers/{t}/{n}").lower()
            not in held
        ]
        if held:
            try:
                deployed = self._deployed(sub, rg, props["template"], values)
            except armeval.ArmError as e:
                message = f"The fake cannot evaluate the template over the group's resources: {e}"
                self._send(h, 400, _error("NotPlayedByTheFake", message))
                return
            changes += [_held_change(r, deployed.get(k)) for k, r in held.items()]
        result = {"status": "Succeeded", "properties": {"changes": changes}}
        self._send(h, 202, None, self._later([(200, result)]))

    def _deployed(
        self, sub: str, rg: str, template: dict[str, Any], values: dict[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Every resource the deployment would deploy into the group ``rg``, nested deployments'
        included, by id (lower case), its properties evaluated (tests/armeval.py); a
        ``reference()`` to a resource not held answers :class:`armeval.Unresolved`."""

        def runtime(rtype: str, rid: str) -> Any:
            held = self.resources.get(rid.lower())
            return held["properties"] if held else armeval.Unresolved(f"[reference('{rid}')]")

        group = self.groups.get((sub.lower(), rg.lower()), {})
        context = armeval.Context(
            subscription_id=sub,
            resource_group=rg,
            location=group.get("location", "westeurope"),
            runtime=runtime,
        )
        deployment = armeval.deploy(template, values, context)
        found = {}
        for r in deployment.resources:
            where, what = deployment.module_groups.get(r["_deployment"], (sub, rg)), r["type"]
            rid = (
                f"/subscriptions/{where[0]}/resourceGroups/{where[1]}/providers/{what}/{r['name']}"
            )
            found[rid.lower()] = r
        return found

    def _put_deployment(
        self, h: BaseHTTPRequestHandler, key: tuple[str, str, str], match: Any, body: Any
    ) -> None:
        props = body["properties"]
        values = {k: v["value"] for k, v in props.get("parameters", {}).items()}
        refused = self._refuse(props["template"], values)
        if refused:
            self._send(h, 400, _error("InvalidTemplateDeployment", refused))
            return
        self.add_deployment(match["sub"], match["rg"], match["name"], {}, state="Accepted")
        deployment = self.deployments[key]
        deployment["properties"]["parameters"] = props.get("parameters", {})
        deployment["_operations"] = [
            {
                "id": f"{deployment['id']}/operations/{i:016X}",
                "operationId": f"{i:016X}",
                "properties": {
                    "provisioningOperation": "Create",
                    "provisioningState": "Accepted",
                    "targetResource": {"resourceType": t, "resourceName": n, "id": f"/x/{t}/{n}"},
                },
            }
            for i, (t, n) in enumerate(self._resources(props["template"], values))
        ]
        deployment["_image_templates"] = _image_templates(props["template"], values)
        deployment["_outputs"] = self._template_outputs(
            match["sub"], match["rg"], props["template"], values
        )
        self._polls[key] = 0
        shown = {k: v for k, v in deployment.items() if not k.startswith("_")}
        self._send(h, 201, shown, {"Retry-After": "0"})

    def _template_outputs(
        self, sub: str, rg: str, template: dict[str, Any], values: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The template's outputs as Resource Manager computes them after the deployment
        (tests/armeval.py in the group's subscription, name and region), where they need no
        more of the deployed resources than a storage account's ``primaryEndpoints``
        (infra/bicep/results.json's). None where they need more (the cluster's head address):
        then :attr:`next_outputs` stands in for them."""

        def runtime(rtype: str, rid: str) -> dict[str, Any]:
            if rtype.lower() != "microsoft.storage/storageaccounts":
                raise armeval.ArmError(f"the fake deploys no {rtype}")
            account = rid.rsplit("/", 1)[1]
            return {"primaryEndpoints": {"blob": f"https://{account}.blob.core.windows.net/"}}

        group = self.groups.get((sub.lower(), rg.lower()), {})
        context = armeval.Context(
            subscription_id=sub,
            resource_group=rg,
            location=group.get("location", "westeurope"),
            runtime=runtime,
        )
        try:
            deployed = armeval.deploy(template, values, context)
        except armeval.ArmError:
            return None
        return None if deployed.refused else deployed.outputs

    def _advance(self, key: tuple[str, str, str]) -> None:
        """Each GET of a deployment moves it on: Running, then Succeeded or Failed."""
        deployment = self.deployments[key]
        self._polls[key] += 1
        done = self._polls[key] >= 2
        failed = done and self.fail_with is not None
        state = ("Failed" if failed else "Succeeded") if done else "Running"
        deployment["properties"]["provisioningState"] = state
        for i, op in enumerate(deployment["_operations"]):
            last = i == len(deployment["_operations"]) - 1
            op_state = "Failed" if failed and last else ("Succeeded" if done else "Running")
            op["properties"]["provisioningState"] = op_state
            if op_state == "Failed":
                op["properties"]["statusMessage"] = {
                    "error": {"code": "ResourceDeploymentFailure", "message": self.fail_with}
                }
        if done and not failed:
            outputs = deployment.get("_outputs")
            deployment["properties"]["outputs"] = {
                k: {"type": "String", "value": v}
                for k, v in (self.next_outputs if outputs is None else outputs).items()
            }
            if deployment.get("_image_templates"):
                self._create_image_templates(key, deployment.pop("_image_templates"))
        if failed:
            deployment["properties"]["error"] = {
                "code": "DeploymentFailed",
                "message": self.fail_with,
            }

    # -- Image Builder ---------------------------------------------------------------------------
    def _create_image_templates(
        self, key: tuple[str, str, str], templates: list[tuple[str, str, str]]
    ) -> None:
        sub, rg, _ = key
        for name, location, run_output in templates:
            self.image_templates[(sub, rg, name.lower())] = {
                "id": f"/subscriptions/{sub}/resourceGroups/{rg}/providers/"
                f"Microsoft.VirtualMachineImages/imageTemplates/{name}",
                "name": name,
                "type": "Microsoft.VirtualMachineImages/imageTemplates",
                "location": location,
                "properties": {"provisioningState": "Succeeded"},
                "_run_output": run_output,
                "_versions": 0,
            }

    def _image_template(self, h: BaseHTTPRequestHandler, match: Any, query: dict[str, str]) -> None:
        if query.get("api-version") != IMAGE_API_VERSION:
            self._send(
                h,
                400,
                _error(
                    "InvalidApiVersionParameter",
                    f"api-version {query.get('api-version')} is not supported",
                ),
            )
            return
        sub, rg, name = (match[g].lower() for g in ("sub", "rg", "name"))
        template = self.image_templates.get((sub, rg, name))
        tail = (match["tail"] or "").lower()
        if template is None:
            self._send(
                h,
                404,
                _error(
                    "ResourceNotFound",
                    f"The Resource 'Microsoft.VirtualMachineImages/imageTemplates/{match['name']}' "
                    f"under resource group '{match['rg']}' was not found.",
                ),
            )
            return
        if h.command == "POST" and tail == "/run":
            self.runs.append((sub, rg, name))
            op = str(uuid.uuid4())
            self._builds[op] = {"template": template, "step": 0, "start": _now()}
            template["properties"]["lastRunStatus"] = {
                "startTime": _now(),
                "runState": "Running",
                "runSubState": "Queued",
                "message": "",
            }
            url = (
                f"{self.endpoint}/subscriptions/{match['sub']}/providers/"
                f"Microsoft.VirtualMachineImages/locations/{template['location']}/operations/"
                f"{op}?api-version={IMAGE_API_VERSION}"
            )
            self._send(
                h, 202, None, {"Azure-AsyncOperation": url, "Location": url, "Retry-After": "0"}
            )
            return
        if h.command == "GET" and tail.startswith("/runoutputs/"):
            wanted = tail.rsplit("/", 1)[1]
            if wanted != template["_run_output"].lower() or not template["_versions"]:
                self._send(h, 404, _error("ResourceNotFound", f"run output {wanted} not found"))
                return
            gallery = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute"
            artifact = (
                f"{gallery}/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/"
                f"1.0.{template['_versions']}"
            )
            self._send(
                h,
                200,
                {
                    "id": f"{template['id']}/runOutputs/{template['_run_output']}",
                    "name": template["_run_output"],
                    "properties": {"artifactId": artifact, "provisioningState": "Succeeded"},
                },
            )
            return
        if h.command == "GET" and not tail:
            self._send(h, 200, {k: v for k, v in template.items() if not k.startswith("_")})
            return
        self._send(h, 405, _error("MethodNotAllowed", f"{h.command} {match['tail'] or ''}"))

    def _build_operation(self, h: BaseHTTPRequestHandler, op: str) -> None:
        """Each poll moves the build one step on (the template's lastRunStatus follows)."""
        build = self._builds.get(op)
        if build is None:
            self._send(h, 404, _error("NotFound", f"operation {op}"))
            return
        template, status = build["template"], build["template"]["properties"]["lastRunStatus"]
        doc: dict[str, Any] = {"name": op, "status": "InProgress", "startTime": build["start"]}
        if status["runState"] == "Running":
            build["step"] += 1
            step = build["step"]
            if self.build_fails_with is not None and step >= self.build_steps.index("Customizing"):
                status.update(
                    runState="Failed",
                    runSubState="Customizing",
                    message=self.build_fails_with,
                    endTime=_now(),
                )
            elif step < len(self.build_steps):
                status["runSubState"] = self.build_steps[step]
            else:
                template["_versions"] += 1
                status.update(runState="Succeeded", runSubState="Distributing", endTime=_now())
        if status["runState"] == "Succeeded":
            doc.update(status="Succeeded", endTime=status["endTime"])
        elif status["runState"] == "Failed":
            doc.update(
                status="Failed",
                endTime=status["endTime"],
                error={"code": "Failed", "message": status["message"]},
            )
        self._send(h, 200, doc, {"Retry-After": self.build_retry_after})

    # -- capacity ---------------------------------------------------------------------------
    def _api_version(self, h: BaseHTTPRequestHandler, query: dict[str, str], wanted: str) -> bool:
        """Only the api-version whose answer Azure's specification shows; another is refused."""
        if query.get("api-version") == wanted:
            return True
        message = f"The fake plays api-version {wanted} only, not {query.get('api-version')}."
        self._send(h, 400, _error("InvalidApiVersionParameter", message))
        return False

    def _page(
        self, h: BaseHTTPRequestHandler, path: str, query: dict[str, str], items: list[Any]
    ) -> None:
        start = int(query.get("$skiptoken", "0") or 0)
        doc: dict[str, Any] = {"value": items[start : start + self.page_size]}
        if start + self.page_size < len(items):
            rest = {k: v for k, v in query.items() if k != "$skiptoken"}
            rest["$skiptoken"] = str(start + self.page_size)
            doc["nextLink"] = f"{self.endpoint}{path}?{urlencode(rest)}"
        self._send(h, 200, doc)

    def _usages(self, h: BaseHTTPRequestHandler, path: str, query: dict[str, str]) -> None:
        if not self._api_version(h, query, USAGES_API_VERSION):
            return
        items = [
            {
                "unit": "Count",
                "currentValue": current,
                "limit": limit,
                "name": {"value": name, "localizedValue": _localized(name)},
            }
            for name, (current, limit) in self.usages.items()
        ]
        self._page(h, path, query, items)

    def _skus(self, h: BaseHTTPRequestHandler, path: str, query: dict[str, str]) -> None:
        if not self._api_version(h, query, SKUS_API_VERSION):
            return
        wanted = re.fullmatch(r"location eq '([a-z0-9]+)'", query.get("$filter", ""))
        if wanted is None:
            message = (
                "The fake answers $filter=location eq '<region>' only (what Azure answers "
                f"otherwise is not published), not {query.get('$filter')!r}."
            )
            self._send(h, 400, _error("InvalidFilter", message))
            return
        region = wanted[1]
        items = [_in_region(s, region) for s in self.skus]
        self._page(h, path, query, [s for s in items if s is not None])

    def _placement(self, h: BaseHTTPRequestHandler, query: dict[str, str], body: Any) -> None:
        if not self._api_version(h, query, PLACEMENT_API_VERSION):
            return
        body = body if isinstance(body, dict) else {}
        regions, sizes = body.get("desiredLocations"), body.get("desiredSizes")
        count = body.get("desiredCount")
        if body.get("availabilityZones") is not True:
            message = (
                "The fake plays the zonal scope only (availabilityZones: true): the answer to "
                "the regional scope is not in Azure's published examples."
            )
            self._send(h, 400, _error("BadRequest", message))
            return
        if not (regions and sizes and isinstance(count, int) and count > 0):
            self._send(h, 400, _error("BadRequest", "desiredLocations, desiredSizes, desiredCount"))
            return
        current, limit = self.usages.get("lowPriorityCores", (0, 0))
        scores = []
        for region in regions:
            for size in sizes:
                sku = next(
                    (s for s in self.skus if s["name"].lower() == str(size["sku"]).lower()), None
                )
                offered = None if sku is None else _in_region(sku, str(region))
                zones = offered["locationInfo"][0]["zones"] if offered else ["1", "2", "3"]
                restricted = {
                    z
                    for r in (offered or {}).get("restrictions", [])
                    for z in r["restrictionInfo"].get("zones", zones)
                }
                vcpus = int(_capability(sku, "vCPUs") or 0) if sku else 0
                for zone in zones:
                    scores.append(
                        {
                            "sku": size["sku"],
                            "region": region,
                            "availabilityZone": zone,
                            "score": (
                                self.spot_scores.get(str(size["sku"]).lower(), "High")
                                if offered and zone not in restricted
                                else "RestrictedSkuNotAvailable"
                            ),
                            "isQuotaAvailable": limit - current >= vcpus * count,
                        }
                    )
        self._send(h, 200, {**body, "placementScores": scores})

    # -- a stopped cluster ------------------------------------------------------------------
    def _vm(self, h: BaseHTTPRequestHandler, vm_id: str, tail: str) -> None:
        if vm_id not in self.vms:
            self._send(h, 404, _error("ResourceNotFound", f"The Resource '{vm_id}' was not found."))
            return
        if h.command == "GET" and tail == "/instanceview":
            statuses = [
                {"code": "ProvisioningState/succeeded", "level": "Info"},
                {"code": f"PowerState/{self.vms[vm_id]}", "level": "Info"},
            ]
            self._send(h, 200, {"statuses": statuses})
            return
        if h.command == "POST" and tail == "/start":
            op = str(uuid.uuid4())
            if self.vms[vm_id] != "running":
                self.vms[vm_id] = "starting"
            self._starts[op] = [vm_id, self.start_polls]
            sub = vm_id.split("/")[2]
            url = (
                f"{self.endpoint}/subscriptions/{sub}/providers/Microsoft.Compute/locations/"
                f"westeurope/operations/{op}?api-version=2024-11-01"
            )
            self._send(h, 202, None, {"Azure-AsyncOperation": url, "Retry-After": "0"})
            return
        self._send(h, 405, _error("MethodNotAllowed", f"{h.command} {tail}"))

    def _start_operation(self, h: BaseHTTPRequestHandler, op: str) -> None:
        entry = self._starts.get(op)
        if entry is None:
            self._send(h, 404, _error("NotFound", f"Operation {op} was not found."))
            return
        entry[1] -= 1
        done = entry[1] < 0
        doc: dict[str, Any] = {"name": op, "status": "InProgress", "startTime": _now()}
        if done and self.start_fails_with is not None:
            self.vms[entry[0]] = "deallocated"
            doc.update(
                status="Failed",
                error={"code": "AllocationFailed", "message": self.start_fails_with},
            )
        elif done:
            self.vms[entry[0]] = "running"
            doc["status"] = "Succeeded"
        self._send(h, 200, doc, {"Retry-After": "0"})

    def _autoscale(self, h: BaseHTTPRequestHandler, path: str, body: Any) -> None:
        key = path.lower()
        if key not in self.autoscale:
            self._send(h, 404, _error("ResourceNotFound", f"The Resource '{path}' was not found."))
            return
        if h.command == "PATCH":
            enabled = ((body or {}).get("properties") or {}).get("enabled")
            if not isinstance(enabled, bool):
                self._send(h, 400, _error("InvalidRequestContent", "properties.enabled"))
                return
            self.autoscale[key] = enabled
        doc = {"id": path, "properties": {"enabled": self.autoscale[key]}}
        self._send(h, 200, doc)

    def _token(self, h: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        if h.headers.get("X-IDENTITY-HEADER") != self.identity_secret:
            self._send(h, 401, {"statusCode": 401, "message": "Unauthorized: bad identity header"})
            return
        if query.get("api-version") != "2019-08-01" or not query.get("resource"):
            self._send(h, 400, {"statusCode": 400, "message": "api-version and resource needed"})
            return
        self._send(
            h,
            200,
            {
                "access_token": self.access_token,
                "expires_on": str(int(time.time()) + 3600),
                "resource": query["resource"],
                "token_type": "Bearer",
                "client_id": "00000000-0000-0000-0000-00000000f4ce",
            },
        )

    def _trickle(self, h: BaseHTTPRequestHandler) -> None:
        """A status line and headers that never end, a byte every half second, until the
        client hangs up or the fake closes."""
        line = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"a" * 10**6
        for byte in line:
            if self._closed.is_set():
                return
            try:
                h.wfile.write(bytes([byte]))
                h.wfile.flush()
            except OSError:
                return  # the client hung up: what it should do
            time.sleep(0.5)

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler,
        status: int,
        body: dict[str, Any] | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        h.send_response(status)
        h.send_header("Content-Type", "application/json; charset=utf-8")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("x-ms-request-id", str(uuid.uuid4()))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)


def _held_change(held: dict[str, Any], deployed: dict[str, Any] | None) -> dict[str, Any]:
    """The what-if change (``WhatIfChange``) of a resource that exists: ``Ignore`` where the
    deployment leaves it out (incremental mode), else ``Modify`` with a ``delta`` of each
    property the fake holds whose deployed value differs (``WhatIfPropertyChange``: ``path``,
    ``propertyChangeType`` ``Modify``, ``before``, ``after``), or ``NoChange``. Only the
    properties the test gave are compared: the fake knows no more of what Azure reports."""
    change: dict[str, Any] = {"resourceId": held["id"], "changeType": "Ignore"}
    if deployed is None:
        return change
    delta = [
        {"path": path, "propertyChangeType": "Modify", "before": before, "after": after}
        for path, before, after in _differences("properties", held["properties"],
                                                deployed.get("properties") or {})
    ]  # fmt: skip
    before = {k: held[k] for k in ("id", "type", "name", "properties")}
    change.update(changeType="Modify" if delta else "NoChange", before=before)
    if delta:
        change["delta"] = delta
    return change


def _differences(path: str, held: Any, deployed: Any) -> list[tuple[str, Any, Any]]:
    """(dotted path, held value, deployed value) of each leaf of ``held`` that ``deployed``
    gives another value."""
    if isinstance(held, dict) and isinstance(deployed, dict):
        return [d for k, v in held.items() for d in _differences(f"{path}.{k}", v, deployed.get(k))]
    return [] if held == deployed else [(path, held, deployed)]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _image_templates(
    template: dict[str, Any], values: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """(name, location, runOutputName) of the image templates a deployment creates: names
    written as a parameter (``[parameters('imageTemplateName')]``) take the given value or the
    parameter's literal default."""
    declared = template.get("parameters", {})
    found = []
    for r in template.get("resources", []):
        if r["type"].lower() != "microsoft.virtualmachineimages/imagetemplates":
            continue
        m = re.fullmatch(r"\[parameters\('(\w+)'\)\]", r["name"])
        name = r["name"] if m is None else values.get(m[1], declared[m[1]].get("defaultValue"))
        location = values.get("location", "westeurope")
        [dist] = r["properties"]["distribute"]
        found.append((str(name), str(location), str(dist["runOutputName"])))
    return found


def vm_sku(
    name: str,
    family: str,
    vcpus: int,
    locations: tuple[str, ...] = ("westeurope", "eastus"),
    zones: tuple[str, ...] = ("1", "2", "3"),
    spot: bool = True,
    restrictions: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    """A VM size as the Resource SKUs API lists it (api-version 2021-07-01), offered in
    ``locations``, each with ``zones``."""
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "family": family,
        "locations": list(locations),
        "locationInfo": [{"location": loc, "zones": list(zones)} for loc in locations],
        "capabilities": [
            {"name": "vCPUs", "value": str(vcpus)},
            {"name": "MemoryGB", "value": str(vcpus * 4)},
            {"name": "LowPriorityCapable", "value": "True" if spot else "False"},
            {"name": "vCPUsAvailable", "value": str(vcpus)},
        ],
        "restrictions": list(restrictions),
    }


def zone_restriction(location: str, zones: list[str]) -> dict[str, Any]:
    """A size not available to the subscription in these zones of ``location``."""
    return {
        "type": "Zone",
        "values": [location],
        "restrictionInfo": {"locations": [location], "zones": zones},
        "reasonCode": "NotAvailableForSubscription",
    }


def location_restriction(location: str) -> dict[str, Any]:
    """A size not available to the subscription in ``location`` at all."""
    return {
        "type": "Location",
        "values": [location],
        "restrictionInfo": {"locations": [location]},
        "reasonCode": "NotAvailableForSubscription",
    }


def _in_region(sku: dict[str, Any], region: str) -> dict[str, Any] | None:
    """The SKU as a ``$filter=location eq 'region'`` answer lists it, or None."""
    if region.lower() not in [loc.lower() for loc in sku["locations"]]:
        return None
    return {
        **sku,
        "locations": [region],
        "locationInfo": [i for i in sku["locationInfo"] if i["location"].lower() == region.lower()],
        "restrictions": [
            r for r in sku["restrictions"] if region.lower() in [v.lower() for v in r["values"]]
        ],
    }


def _capability(sku: dict[str, Any], name: str) -> str | None:
    return next((c["value"] for c in sku["capabilities"] if c["name"] == name), None)


def _localized(name: str) -> str:
    known = {"cores": "Total Regional vCPUs", "lowPriorityCores": "Total Regional Spot vCPUs"}
    if name in known:
        return known[name]
    family = re.fullmatch(r"standard(\w+)Family", name)
    return f"Standard {family[1]} Family vCPUs" if family else name


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
