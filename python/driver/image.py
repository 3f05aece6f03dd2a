"""Building the node image (issue 20) through Azure Resource Manager: the Image Builder template
of infra/bicep/image/ deployed if it is missing, its build started and followed.

Image Builder's wire format (``Microsoft.VirtualMachineImages/imageTemplates``, api-version
:data:`IMAGE_API_VERSION`): ``GET .../imageTemplates/{name}`` (404 when missing; its
``properties.lastRunStatus`` holds ``runState`` Running/Succeeded/PartiallySucceeded/Failed/
Canceled, ``runSubState`` Queued/Building/Customizing/Optimizing/Validating/Distributing and
``message``); ``POST .../imageTemplates/{name}/run`` answers 202 with an
``Azure-AsyncOperation`` URL whose document says ``status`` InProgress/Succeeded/Failed/Canceled
(and ``error``); ``GET .../imageTemplates/{name}/runOutputs/{runOutputName}`` gives the image
version's id in ``properties.artifactId``.

A build already running is followed, not started again; Ctrl-C stops the following only (the
build goes on in Azure). Library code: nothing here prints; the CLI shows what it yields.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.arm import ResourceManager
from driver.errors import DriverError, shaped

IMAGE_API_VERSION = "2024-02-01"
"""The imageTemplates api-version infra/bicep/image/main.bicep declares (a test holds them
equal)."""
IMAGE_TEMPLATE = Path("infra") / "bicep" / "image" / "azuredeploy.json"
DEFAULT_IMAGE_TEMPLATE_NAME = "ray-node-image"
"""The image template's name for the default namePrefix (its imageTemplateName default)."""
IMAGE_DEPLOYMENT = "ray-node-image"
RUN_OUTPUT = "ray-node"
"""The distributor's runOutputName in infra/bicep/image/main.bicep."""
DONE = {"Succeeded", "Failed", "Canceled"}


@dataclass(frozen=True)
class Progress:
    """One change seen while the build runs: the template's last run state and sub-state."""

    state: str
    sub_state: str
    message: str


class ImageBuilder:
    """One image template in one resource group, through a signed-in :class:`ResourceManager`."""

    def __init__(self, rm: ResourceManager, group: str, name: str) -> None:
        self.rm = rm
        self.group = group
        self.name = name
        self.path = (
            f"/subscriptions/{rm.subscription}/resourceGroups/{group}/providers/"
            f"Microsoft.VirtualMachineImages/imageTemplates/{name}"
        )

    def _url(self, tail: str = "") -> str:
        return f"{self.rm.base}{self.path}{tail}?api-version={IMAGE_API_VERSION}"

    def template(self) -> dict[str, Any] | None:
        status, _, data = self.rm.request("GET", self._url(), ok=(200, 404))
        return data if status == 200 and isinstance(data, dict) else None

    def last_run(self) -> dict[str, Any]:
        doc = self.template()
        if doc is None:
            raise DriverError(f"image template {self.name} in {self.group} disappeared")
        with shaped(f"image template {self.name}"):
            status = (doc.get("properties") or {}).get("lastRunStatus")
        return status if isinstance(status, dict) else {}

    def start(self) -> str:
        """POST run: the URL of its Azure-AsyncOperation to follow."""
        _, headers, _ = self.rm.request("POST", self._url("/run"), ok=(202,))
        found = {k.lower(): v for k, v in headers.items()}
        url = found.get("azure-asyncoperation") or found.get("location")
        if not url:
            raise DriverError("Image Builder accepted the run without an operation to follow")
        return url

    def follow(self, operation: str | None) -> Iterator[Progress]:
        """Yield the template's run state whenever it changes, until the run ends (its
        lastRunStatus leaves Running). The operation, when there is one to follow, paces the
        polls (its Retry-After) and says when the run is over. The end: :meth:`result`."""
        shown: tuple[str, str] | None = None
        headers: dict[str, str] = {}
        while True:
            run = self.last_run()
            state, sub = str(run.get("runState", "")), str(run.get("runSubState", ""))
            if (state, sub) != shown and state:
                shown = (state, sub)
                yield Progress(state, sub, str(run.get("message") or ""))
            if state and state != "Running":
                return
            self.rm._wait(headers)
            if operation is not None:
                _, headers, doc = self.rm.request("GET", operation, ok=(200,))
                if str((doc or {}).get("status", "")) in DONE:
                    operation = None  # over: the template's next read shows how it ended

    def result(self) -> str:
        """The image version id of a succeeded run, or a DriverError (exit 1) with Azure's
        message for a failed or canceled one."""
        run = self.last_run()
        state = str(run.get("runState", ""))
        if state not in ("Succeeded", "PartiallySucceeded"):
            message = run.get("message") or "no message from Image Builder"
            raise DriverError(
                f"image build {state.lower() or 'ended'} ({run.get('runSubState', '?')}): "
                f"{message}",
                exit_code=1,
            )
        _, _, out = self.rm.request("GET", self._url(f"/runOutputs/{RUN_OUTPUT}"), ok=(200,))
        with shaped(f"run output {RUN_OUTPUT}"):
            artifact = ((out or {}).get("properties") or {}).get("artifactId")
        if not artifact:
            raise DriverError(f"the build succeeded but run output {RUN_OUTPUT} names no image")
        return str(artifact)
