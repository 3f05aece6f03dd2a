"""Building the node image (issue 20) through Azure Resource Manager: the Image Builder template
of infra/bicep/image/ deployed if it is missing, its build started and followed.

azure-mgmt-imagebuilder's client speaks Image Builder's wire format
(``Microsoft.VirtualMachineImages/imageTemplates``, api-version :data:`IMAGE_API_VERSION`):
``GET .../imageTemplates/{name}`` (404 when missing; its ``properties.lastRunStatus`` holds
``runState`` Running/Succeeded/PartiallySucceeded/Failed/Canceled, ``runSubState``
Queued/Building/Customizing/Optimizing/Validating/Distributing and ``message``); ``POST
.../imageTemplates/{name}/run`` answers 202 with an ``Azure-AsyncOperation`` URL whose document
says ``status`` InProgress/Succeeded/Failed/Canceled (and ``error``), which azure-core's ARM
poller follows; ``GET .../imageTemplates/{name}/runOutputs/{runOutputName}`` gives the image
version's id in ``properties.artifactId``.

A build already running is followed, not started again; Ctrl-C stops the following only (the
build goes on in Azure). Library code: nothing here prints; the CLI shows what it yields.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.arm import POLL_S, ResourceManager, watched
from driver.errors import DriverError, shaped

IMAGE_API_VERSION = "2024-02-01"
"""The imageTemplates api-version infra/bicep/image/main.bicep declares (a test holds them
equal); azure-mgmt-imagebuilder's client speaks it."""
IMAGEBUILDER_PACKAGE = "azure-mgmt-imagebuilder>=2,<3"
IMAGE_TEMPLATE = Path("infra") / "bicep" / "image" / "azuredeploy.json"
DEFAULT_IMAGE_TEMPLATE_NAME = "ray-node-image"
"""The image template's name for the default namePrefix (its imageTemplateName default)."""
IMAGE_DEPLOYMENT = "ray-node-image"
RUN_OUTPUT = "ray-node"
"""The distributor's runOutputName in infra/bicep/image/main.bicep."""


@dataclass(frozen=True)
class Progress:
    """One change seen while the build runs: the template's last run state and sub-state."""

    state: str
    sub_state: str
    message: str


@dataclass(frozen=True)
class Build:
    """A run started by :meth:`ImageBuilder.start`: azure-core's poller following its
    operation, and the template's run state read after each of its polls."""

    poller: Any
    seen: queue.Queue[dict[str, str]]


def _text(value: Any) -> str:
    """A field of Azure's answer as text (an enum's value: ``Running``, not
    ``RunState.RUNNING``)."""
    return str(getattr(value, "value", value) or "")


class ImageBuilder:
    """One image template in one resource group, through azure-mgmt-imagebuilder's client on a
    signed-in :class:`ResourceManager`."""

    def __init__(self, rm: ResourceManager, group: str, name: str) -> None:
        self.rm = rm
        self.group = group
        self.name = name
        self.url = (
            f"{rm.base}/subscriptions/{rm.subscription}/resourceGroups/{group}/providers/"
            f"Microsoft.VirtualMachineImages/imageTemplates/{name}"
        )
        try:
            from azure.mgmt.imagebuilder import ImageBuilderClient
        except ImportError:
            raise DriverError(
                "building the node image needs azure-mgmt-imagebuilder: "
                f"pip install '{IMAGEBUILDER_PACKAGE}'"
            ) from None
        client = rm.client(ImageBuilderClient, api_version=IMAGE_API_VERSION)
        self._templates = client.virtual_machine_image_templates

    def template(self) -> Any:
        """The image template (azure-mgmt-imagebuilder's ``ImageTemplate``), None when missing."""
        from azure.core.exceptions import ResourceNotFoundError

        def get() -> Any:
            try:
                return self._templates.get(self.group, self.name)
            except ResourceNotFoundError:
                return None

        return self.rm.call(f"GET {self.url}", get)

    def last_run(self) -> dict[str, str]:
        """The template's last run: ``runState``, ``runSubState`` and ``message`` (empty before
        its first run)."""
        doc = self.template()
        if doc is None:
            raise DriverError(f"image template {self.name} in {self.group} disappeared")
        with shaped(f"image template {self.name}"):
            status = doc.last_run_status
            if status is None:
                return {}
            return {
                "runState": _text(status.run_state),
                "runSubState": _text(status.run_sub_state),
                "message": _text(status.message),
            }

    def start(self) -> Build:
        """POST run, its operation (``Azure-AsyncOperation``) followed by azure-core's poller,
        which reads the template's run state after each poll for :meth:`follow`."""
        seen: queue.Queue[dict[str, str]] = queue.Queue()
        polling = watched(lambda: seen.put(self.last_run()), POLL_S)
        poller = self.rm.call(
            f"POST {self.url}/run",
            lambda: self._templates.begin_run(self.group, self.name, polling=polling),
        )
        return Build(poller, seen)

    def follow(self, build: Build | None) -> Iterator[Progress]:
        """Yield the template's run state whenever it changes, until the run ends (its
        lastRunStatus leaves Running). A build this command started is read after each poll of
        its operation; one already running, every ``Retry-After``. The end: :meth:`result`."""
        shown: tuple[str, str] | None = None
        run = self.last_run() if build is None else self._next(build)
        while True:
            state, sub = run.get("runState", ""), run.get("runSubState", "")
            if (state, sub) != shown and state:
                shown = (state, sub)
                yield Progress(state, sub, run.get("message", ""))
            if state and state != "Running":
                return
            run = self._next(build)

    def _next(self, build: Build | None) -> dict[str, str]:
        """The run state after the operation's next poll (or, without one, after a wait)."""
        if build is None:
            self.rm._wait({})
            return self.last_run()
        while True:
            try:
                return build.seen.get(timeout=POLL_S)
            except queue.Empty:
                pass
            if build.poller.done():
                # A failed operation raises here: the template's state says how and why.
                with contextlib.suppress(DriverError):
                    self.rm.call(f"POST {self.url}/run", lambda: build.poller.wait(0))
                return self.last_run()

    def result(self) -> str:
        """The image version id of a succeeded run, or a DriverError (exit 1) with Azure's
        message for a failed or canceled one."""
        run = self.last_run()
        state = run.get("runState", "")
        if state not in ("Succeeded", "PartiallySucceeded"):
            message = run.get("message") or "no message from Image Builder"
            raise DriverError(
                f"image build {state.lower() or 'ended'} ({run.get('runSubState') or '?'}): "
                f"{message}",
                exit_code=1,
            )
        out = self.rm.call(
            f"GET {self.url}/runOutputs/{RUN_OUTPUT}",
            lambda: self._templates.get_run_output(self.group, self.name, RUN_OUTPUT),
        )
        with shaped(f"run output {RUN_OUTPUT}"):
            artifact = out.artifact_id
        if not artifact:
            raise DriverError(f"the build succeeded but run output {RUN_OUTPUT} names no image")
        return str(artifact)
