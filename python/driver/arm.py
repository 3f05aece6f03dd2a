"""Deploying infra/bicep/azuredeploy.json through Azure Resource Manager, for ``up/down
--resource-group``: what-if first, then the deployment, its operations as they progress.

Typed Azure SDK clients do the asking: resource groups through azure-mgmt-resource's
``ResourceManagementClient``, deployments, what-if and a deployment's operations through
azure-mgmt-resource-deployments' ``DeploymentsMgmtClient`` (azure-mgmt-resource 26 moved them
there) at api-version :data:`API_VERSION` (the one discovery reads deployments at);
long-running operations are followed by azure-core's ARM poller (``Azure-AsyncOperation``/
``Location``, after ``Retry-After`` seconds, capped). :meth:`ResourceManager.client` gives
other modules a typed client on the same connection (:mod:`driver.power`'s Compute,
:mod:`driver.image`'s Image Builder);
:meth:`ResourceManager.request` stays for the calls no typed client covers (each says why).

Resource groups: ``up`` creates a missing one (with ``--location``) and tags it
:data:`CREATED_TAG`; ``down`` deletes a resource group only when it carries that tag, i.e. only
what ``up`` created. A group that existed before is never deleted by the driver. The results
storage ``up`` deploys first goes into a group of its own (:data:`RESULTS_GROUP_SUFFIX`), tagged
:data:`RESULTS_TAG`, which ``down`` never deletes.

Library code: nothing here prints; the CLI shows what these functions return or yield.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from driver import untrusted
from driver.discovery import (
    ANSWER_TIMEOUT_S,
    DEPLOYMENTS_PACKAGE,
    MAX_ANSWER_BYTES,
    _credential_error,
    _first_line,
)
from driver.discovery import DEPLOYMENTS_API_VERSION as API_VERSION
from driver.errors import DriverError, shaped
from driver.settings import DEFAULT_ARM_ENDPOINT, SUBSCRIPTION_ENV

CREATED_TAG = ("created-by", "python -m driver up")
"""The tag ``up`` puts on a resource group it creates; ``down`` deletes only such groups."""
RESULTS_TAG = ("raydriver-results", "kept by python -m driver down")
"""The tag ``up`` puts on the results storage's resource group it creates (never
:data:`CREATED_TAG`): ``down`` refuses to delete a group with it, results outlive clusters."""
RESULTS_GROUP_SUFFIX = "-results"
"""``up --resource-group RG`` deploys the results storage into ``RG-results``."""
RESULTS_DEPLOYMENT = "ray-results"
RESULTS_TEMPLATE_NAME = "results.json"
"""The results storage's template, beside the cluster's (infra/bicep/results.json)."""
RESULTS_OUTPUT = "storageAccountId"
"""Its output the cluster takes as ``resultsStorageAccountId``."""
DEFAULT_DEPLOYMENT = "ray-cluster"
DEFAULT_TEMPLATE = Path("infra") / "bicep" / "azuredeploy.json"
TERMINAL = {"Succeeded", "Failed", "Canceled"}
MAX_POLL_S = untrusted.MAX_RETRY_AFTER_S
READ_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 20.0
POLL_S = 5.0
"""How long to wait between polls when Resource Manager gives no ``Retry-After``."""
WATCH_S = 0.5
"""How often the driver looks whether azure-core's poller has seen an operation end."""

T = TypeVar("T")


# -- inputs, checked before anything is sent --------------------------------------------------
def load_template(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise DriverError(
            f"--template: cannot read {path}: {e.strerror} (expected infra/bicep/azuredeploy.json "
            "of a checkout, or --template FILE)"
        ) from None
    except json.JSONDecodeError as e:
        raise DriverError(f"--template: {path} is not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(doc, dict) or "deploymentTemplate.json" not in str(doc.get("$schema", "")):
        raise DriverError(f"--template: {path} is not an ARM deployment template")
    return doc


def results_group(group: str) -> str:
    """The resource group of the results storage ``up`` makes for the cluster in ``group``."""
    return f"{group}{RESULTS_GROUP_SUFFIX}"


def load_parameters(path: str | Path | None) -> dict[str, Any]:
    """An ARM parameters file (``{"parameters": {"name": {"value": ...}}}``) as
    ``{name: value}``."""
    if path is None:
        return {}
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise DriverError(f"--parameters: cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise DriverError(f"--parameters: {path} is not JSON: {e.msg} at line {e.lineno}") from None
    entries = doc.get("parameters") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise DriverError(
            f'--parameters: {path} has no "parameters" object (expected an ARM parameters '
            'file: {"parameters": {"allowedSshCidrs": {"value": ["203.0.113.7/32"]}}})'
        )
    values = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict) or "value" not in entry:
            raise DriverError(
                f'--parameters: {path}: {name} has no "value" (Key Vault references are not '
                "supported here)"
            )
        values[name] = entry["value"]
    return values


def check_parameters(template: dict[str, Any], values: dict[str, Any]) -> None:
    declared = template.get("parameters", {})
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise DriverError(
            f"--parameters: the template has no parameter {', '.join(unknown)} "
            f"(it has {', '.join(sorted(declared))})"
        )
    missing = sorted(n for n, p in declared.items() if "defaultValue" not in p and n not in values)
    if missing:
        raise DriverError(
            f"--parameters: required {', '.join(missing)} not given (see "
            "infra/bicep/azuredeploy.parameters.json)"
        )
    for name, value in values.items():
        _check_value(name, value, declared[name])


def _check_value(name: str, value: Any, declared: dict[str, Any]) -> None:
    """What Resource Manager would refuse after the resource group exists: a value of another
    type, an int that is not one (``1e400``, ``NaN`` and ``1.5`` in JSON), outside
    ``minValue``/``maxValue``, not in ``allowedValues``."""
    kind = str(declared.get("type", "")).lower()
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DriverError(f"--parameters: {name} must be a whole number, got {value!r}")
        if not math.isfinite(value) or value != int(value):
            raise DriverError(f"--parameters: {name} must be a whole number, got {value!r}")
        low, high = declared.get("minValue"), declared.get("maxValue")
        if (isinstance(low, int) and value < low) or (isinstance(high, int) and value > high):
            raise DriverError(
                f"--parameters: {name} must be from {low if low is not None else '-inf'} to "
                f"{high if high is not None else 'inf'}, got {value!r}"
            )
    elif kind == "bool" and not isinstance(value, bool):
        raise DriverError(f"--parameters: {name} must be true or false, got {value!r}")
    elif kind in ("string", "securestring") and not isinstance(value, str):
        raise DriverError(f"--parameters: {name} must be a string, got {value!r}")
    allowed = declared.get("allowedValues")
    if isinstance(allowed, list) and value not in allowed and kind != "array":
        raise DriverError(
            f"--parameters: {name} must be one of {', '.join(map(repr, allowed))}, got {value!r}"
        )


def with_defaults(template: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Every parameter's value for a deployment: the template's ``defaultValue`` under the given
    values (a default that is an expression, ``[resourceGroup().location]``, stays as text)."""
    declared = template.get("parameters", {})
    defaults = {n: p["defaultValue"] for n, p in declared.items() if "defaultValue" in p}
    return {**defaults, **values}


# -- the wire -------------------------------------------------------------------------------
SCALE_SET_TYPE = "Microsoft.Compute/virtualMachineScaleSets"
MODE_PATH = "properties.orchestrationMode"
"""Where a what-if's ``delta`` says a scale set's mode changes, which Azure cannot do in place
(a scale set's orchestrationMode is fixed when it is created)."""


@dataclass(frozen=True)
class Change:
    change_type: str
    resource_id: str
    mode_switch: tuple[str, str] | None = None
    """(before, after) where the change would switch an existing scale set's orchestration
    mode."""

    @property
    def name(self) -> str:
        return self.resource_id.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Operation:
    operation_id: str
    state: str
    action: str
    resource_type: str
    resource_name: str
    message: str

    def line(self) -> str:
        """The operation as a progress line: Resource Manager's text, one line, no terminal
        control."""
        shown = untrusted.shown
        line = f"  {shown(self.state, 40):<10} {shown(self.resource_type, 200)} "
        line += shown(self.resource_name, 200)
        return line + (f": {shown(self.message, 1000)}" if self.message else "")


class ResourceManager:
    """One signed-in connection to Resource Manager for one subscription (a context manager)."""

    def __init__(
        self,
        subscription: str | None,
        endpoint: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not subscription:
            raise DriverError(
                f"--resource-group needs a subscription: pass --subscription ID or set "
                f"{SUBSCRIPTION_ENV}"
            )
        self.subscription = subscription
        self.base = (endpoint or DEFAULT_ARM_ENDPOINT).rstrip("/")
        if not self.base.startswith("https://"):
            raise DriverError(f"--arm-endpoint must be an https:// URL, got {self.base!r}")
        self._sleep = sleep
        self._credential: Any = None
        self._client: Any = None
        self._deployments: Any = None

    def __enter__(self) -> ResourceManager:
        from azure.mgmt.resource.resources import ResourceManagementClient

        self._credential = untrusted.credential()
        self._clients: list[Any] = []
        self._made: dict[Any, Any] = {}
        self._client = self.client(ResourceManagementClient)
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self._clients:
            client.close()
        self._credential.close()

    def client(self, kind: Callable[..., T], **settings: Any) -> T:
        """A typed Azure client of ``kind`` (``ComputeManagementClient``, ...) on this connection:
        the same credential, endpoint and retries; its long-running operations' polls wait
        through this manager's ``sleep``, capped. One per kind and settings, closed with the
        manager."""
        key = (kind, tuple(sorted(settings.items())))
        if key in self._made:
            return self._made[key]
        made = kind(
            self._credential,
            self.subscription,
            base_url=self.base,
            credential_scopes=[f"{self.base}/.default"],
            retry_policy=untrusted.retry_policy(),
            transport=untrusted.transport(MAX_ANSWER_BYTES, self._sleep),
            polling_interval=POLL_S,
            **settings,
        )
        self._clients.append(made)
        self._made[key] = made
        return made

    @property
    def deployments(self) -> Any:
        """azure-mgmt-resource-deployments' client, made on first use."""
        if self._deployments is None:
            try:
                from azure.mgmt.resource.deployments import DeploymentsMgmtClient
            except ImportError:
                raise DriverError(
                    f"deploying needs {DEPLOYMENTS_PACKAGE.split('>')[0]}: "
                    f"pip install '{DEPLOYMENTS_PACKAGE}'"
                ) from None
            self._deployments = self.client(DeploymentsMgmtClient, api_version=API_VERSION)
        return self._deployments

    # -- requests --------------------------------------------------------------------------
    def call(self, what: str, send: Callable[[], T], timeout: float | None = None) -> T:
        """``send()``, a typed client's call, within ``timeout`` (the SDK's own timeouts bound
        each socket read only), its failures as one line; ``what`` (``GET URL``) names it when
        the SDK's error does not. ``timeout``: :data:`ANSWER_TIMEOUT_S` unless given."""
        try:
            return untrusted.within(ANSWER_TIMEOUT_S if timeout is None else timeout, send)
        except Exception as e:
            raise self._failure(what, e) from None

    def _failure(self, what: str, e: Exception) -> Exception:
        """The one line a failed call to Resource Manager shows (``e`` itself when it is not
        Azure's)."""
        from azure.core.exceptions import (
            AzureError,
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
        )
        from azure.identity import CredentialUnavailableError

        if isinstance(e, DriverError):
            return e
        if isinstance(e, (CredentialUnavailableError, ClientAuthenticationError)):
            return DriverError(
                f"cannot sign in to Azure: {_credential_error(e)} (expected `az login`, a "
                "managed identity, or AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
            )
        if isinstance(e, ServiceRequestError):
            return DriverError(
                f"cannot reach Azure Resource Manager at {self.base}: {_first_line(e)}"
            )
        if isinstance(e, HttpResponseError) and e.response is not None:
            return DriverError(_http_error(e.response, e))
        if isinstance(e, untrusted.Unreadable):
            return DriverError(f"{what}: Resource Manager's answer: {e}")
        if isinstance(e, AzureError):  # the answer broke off (ServiceResponseError, ...)
            return DriverError(f"{what}: {_first_line(e)}")
        if isinstance(e, (AttributeError, TypeError, KeyError, ValueError)):
            # The SDK read an answer of another shape than Azure's.
            return DriverError(
                f"{what}: not in the shape Azure answers in ({type(e).__name__}: "
                f"{untrusted.one_line(e, 120)})"
            )
        return e

    def request(
        self, method: str, url: str, body: Any = None, ok: tuple[int, ...] = (200, 201, 202)
    ) -> tuple[int, dict[str, str], Any]:
        """One hand-written REST call to ``url`` (with its api-version), for what no typed client
        covers (each caller says why)."""
        from azure.core.rest import HttpRequest

        def send() -> tuple[Any, bytes]:
            response = self._client.send_request(
                HttpRequest(method, url, json=body),
                stream=True,
                connection_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S,
            )
            try:
                return response, _read(response)
            finally:
                response.close()

        response, content = self.call(f"{method} {_shown_url(url)}", send)
        data: Any = None
        if content:
            try:
                data = untrusted.loads(content)
            except untrusted.TooDeep as e:
                raise DriverError(
                    f"{method} {_shown_url(url)}: Resource Manager's answer: {e}"
                ) from None
            except untrusted.Unreadable:
                data = None  # not JSON: said below when the status is not one asked for
            if data is not None and not isinstance(data, dict):
                raise DriverError(
                    f"{method} {_shown_url(url)}: Resource Manager's answer is not a JSON object"
                )
        if response.status_code not in ok:
            raise DriverError(_http_error(response, None, content, data))
        return response.status_code, dict(response.headers), data

    def follow(self, what: str, begin: Callable[[Any], Any]) -> Any:
        """The result of the long-running operation ``begin(polling)`` starts, followed by
        azure-core's ARM poller (``polling``, which ``begin`` hands to a typed client's
        ``begin_*``). Each of its polls, like every other exchange, is answered whole within
        :data:`ANSWER_TIMEOUT_S` (after the ``Retry-After`` it waited), or this gives up."""
        polled = [time.monotonic()]
        polling = watched(lambda: polled.__setitem__(0, time.monotonic()), POLL_S)
        poller = self.call(what, lambda: begin(polling))
        while not poller.done():
            self.call(what, lambda: poller.wait(WATCH_S), WATCH_S + ANSWER_TIMEOUT_S)
            if time.monotonic() - polled[0] > ANSWER_TIMEOUT_S + MAX_POLL_S:
                raise DriverError(
                    f"{what}: Resource Manager's answer: no whole answer within "
                    f"{ANSWER_TIMEOUT_S:g} s"
                )
        return self.call(what, lambda: poller.result(0))

    def _wait(self, headers: dict[str, str]) -> None:
        self._sleep(untrusted.retry_after(headers.get("Retry-After"), POLL_S, 0.0, MAX_POLL_S))

    # -- resource groups ---------------------------------------------------------------------
    def _group_path(self, group: str) -> str:
        return f"/subscriptions/{self.subscription}/resourcegroups/{group}"

    def group(self, group: str) -> dict[str, Any] | None:
        from azure.core.exceptions import ResourceNotFoundError

        def get() -> dict[str, Any] | None:
            try:
                return self._client.resource_groups.get(group).as_dict()
            except ResourceNotFoundError:
                return None

        return self.call(f"GET {self.base}{self._group_path(group)}", get)

    def create_group(self, group: str, location: str, tag: tuple[str, str] = CREATED_TAG) -> None:
        body = {"location": location, "tags": {tag[0]: tag[1]}}
        self.call(
            f"PUT {self.base}{self._group_path(group)}",
            lambda: self._client.resource_groups.create_or_update(group, body),
        )

    def delete_group(self, group: str) -> None:
        groups = self._client.resource_groups
        self.follow(
            f"DELETE {self.base}{self._group_path(group)}",
            lambda polling: groups.begin_delete(group, polling=polling),
        )

    # -- deployments ---------------------------------------------------------------------------
    def _deployment_url(self, group: str, name: str) -> str:
        return (
            f"{self.base}{self._group_path(group)}/providers/Microsoft.Resources/deployments/{name}"
        )

    @staticmethod
    def _body(template: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
        return {
            "properties": {
                "mode": "Incremental",
                "template": template,
                "parameters": {k: {"value": v} for k, v in values.items()},
            }
        }

    def what_if(
        self, group: str, name: str, template: dict[str, Any], values: dict[str, Any]
    ) -> list[Change]:
        client = self.deployments
        result = self.follow(
            f"POST {self._deployment_url(group, name)}/whatIf",
            lambda polling: client.deployments.begin_what_if(
                group, name, self._body(template, values), polling=polling
            ),
        )
        if not result:
            raise DriverError("what-if returned no result")
        with shaped("the what-if result"):
            if result.get("status") != "Succeeded":
                error = result.get("error") or {}
                raise DriverError(
                    f"what-if {untrusted.shown(str(result.get('status')), 40)}: "
                    + untrusted.one_line(f"{error.get('code')}: {error.get('message')}", 500)
                )
            return [
                Change(str(c.get("changeType")), str(c.get("resourceId")), _mode_switch(c))
                for c in (result.get("properties") or {}).get("changes", [])
            ]

    def deploy(
        self, group: str, name: str, template: dict[str, Any], values: dict[str, Any]
    ) -> Iterator[Operation]:
        """PUT the deployment, then yield each operation whenever its state changes, until the
        deployment ends. Its end state and outputs: :meth:`deployment`. The deployment is
        followed here, not by the SDK's poller: its operations are read between the polls."""
        client = self.deployments
        url = self._deployment_url(group, name)

        def with_headers(response: Any, model: Any, headers: Any) -> tuple[Any, dict[str, str]]:
            return model, dict(response.http_response.headers)

        _, headers = self.call(
            f"PUT {url}",
            lambda: client.deployments.begin_create_or_update(
                group, name, self._body(template, values), polling=False, cls=with_headers
            ).result(),
        )
        seen: dict[str, str] = {}
        while True:
            self._wait(headers)
            deployment, headers = self.call(
                f"GET {url}", lambda: client.deployments.get(group, name, cls=with_headers)
            )
            ops = self.call(
                f"GET {url}/operations",
                lambda: list(client.deployment_operations.list(group, name)),
            )
            with shaped("the deployment's operations"):
                changed = list(self._changed(ops, seen))
            yield from changed
            with shaped("the deployment"):
                if deployment["properties"].get("provisioningState") in TERMINAL:
                    return

    @staticmethod
    def _changed(ops: Iterable[Any], seen: dict[str, str]) -> Iterator[Operation]:
        """The operations of ``ops`` (the deployment's operations) whose state differs from
        what ``seen`` holds, which they update."""
        for op in ops:
            props = op.get("properties", {})
            target = props.get("targetResource") or {}
            state = str(props.get("provisioningState", ""))
            oid = str(op.get("operationId"))
            if seen.get(oid) == state or not target:
                continue
            seen[oid] = state
            message = props.get("statusMessage") or {}
            error = message.get("error", {}) if isinstance(message, dict) else {}
            yield Operation(
                oid,
                state,
                str(props.get("provisioningOperation", "")),
                str(target.get("resourceType", "")),
                str(target.get("resourceName", "")),
                f"{error.get('code')}: {error.get('message')}" if error else "",
            )

    def deployment(self, group: str, name: str) -> tuple[str, dict[str, Any], str]:
        """``(provisioningState, outputs as plain values, error)``."""
        client = self.deployments
        data = self.call(
            f"GET {self._deployment_url(group, name)}",
            lambda: client.deployments.get(group, name),
        )
        with shaped("Resource Manager's result"):
            props = data.get("properties", {})
            error = props.get("error") or {}
            outputs = {k: v.get("value") for k, v in (props.get("outputs") or {}).items()}
            reason = f"{error.get('code')}: {error.get('message')}" if error else ""
            return str(props.get("provisioningState")), outputs, reason


def _mode_switch(change: Any) -> tuple[str, str] | None:
    """(before, after) of a what-if change (``WhatIfChange``) whose ``delta`` changes a scale
    set's ``properties.orchestrationMode``; None for any other. Read inside ``shaped``: a
    ``delta`` of another shape than Azure's is one line."""
    rid = str(change.get("resourceId") or "")
    if f"/providers/{SCALE_SET_TYPE}/".lower() not in rid.lower():
        return None
    for path, kind, before, after in _property_changes(change.get("delta") or [], ""):
        if path.lower() == MODE_PATH.lower() and kind != "NoEffect" and before != after:
            return _mode(before), _mode(after)
    return None


def _property_changes(delta: Any, prefix: str) -> Iterator[tuple[str, str, Any, Any]]:
    """(full path, propertyChangeType, before, after) of each ``WhatIfPropertyChange`` of
    ``delta``, its ``children`` under their parent's path."""
    if not isinstance(delta, list):
        raise TypeError(f"delta is a {type(delta).__name__}, not a list")
    for entry in delta:
        path = entry.get("path")
        if not isinstance(path, str):
            raise TypeError(f"a delta's path is a {type(path).__name__}, not a string")
        full = f"{prefix}.{path}" if prefix else path
        yield full, str(entry.get("propertyChangeType")), entry.get("before"), entry.get("after")
        yield from _property_changes(entry.get("children") or [], full)


def _mode(value: Any) -> str:
    return "not set" if value is None else untrusted.shown(str(value), 40)


def watched(after_poll: Callable[[], None], interval: float) -> Any:
    """azure-mgmt-core's ARM poller (``interval``: its wait when no ``Retry-After`` is given)
    that calls ``after_poll`` once the operation is accepted and after each of its polls (in
    the poller's thread)."""
    from azure.mgmt.core.polling.arm_polling import ARMPolling

    class Watched(ARMPolling):
        def initialize(self, *args: Any, **kwargs: Any) -> None:
            super().initialize(*args, **kwargs)
            after_poll()

        def update_status(self) -> None:
            super().update_status()
            after_poll()

    return Watched(interval)


def _http_error(
    response: Any, e: Any = None, content: bytes | None = None, data: Any = None
) -> str:
    """``METHOD URL: HTTP 409 Code: message`` of a refused request (or ``METHOD URL: Code:
    message`` of a long-running operation that ended Failed), from ARM's error body."""
    request = response.request
    where = f"{request.method} {_shown_url(str(request.url))}"
    if content is None:
        try:
            content = response.body() if hasattr(response, "body") else response.content
        except Exception:  # a streamed answer already closed
            content = b""
        try:
            data = untrusted.loads(content) if content else None
        except untrusted.Unreadable:
            data = None
    error = data.get("error", {}) if isinstance(data, dict) else {}
    if isinstance(error, dict) and error:
        what = f"{error.get('code')}: {error.get('message')}"
    elif e is not None:
        what = _first_line(e)
    else:
        what = (content or b"").decode("utf-8", "replace")
    status = response.status_code
    if 200 <= status < 300:
        return f"{where}: {untrusted.one_line(what, 500)}"
    return f"{where}: HTTP {status} {untrusted.one_line(what, 500)}"


def _shown_url(url: str) -> str:
    return untrusted.redact_url(url.split("?")[0], 300)


def _read(response: Any) -> bytes:
    """A streamed answer's body: at most MAX_ANSWER_BYTES, within ANSWER_TIMEOUT_S."""
    body = bytearray()
    with untrusted.deadline_check(ANSWER_TIMEOUT_S) as check:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise untrusted.Unreadable(f"longer than {MAX_ANSWER_BYTES} bytes: stopped reading")
            check()
    return bytes(body)
