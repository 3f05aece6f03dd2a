"""``up``/``down``: a Terraform plan shown first, applied only when the user agrees.

``terraform plan -out`` writes the plan a person reads (streamed to the terminal, it is the
progress they wait on); ``terraform show -json`` of that very file says what it would replace;
``terraform apply PLANFILE`` applies exactly what was shown, nothing newer. The Terraform
configuration stays the source of truth: a user who wants workspaces or remote state runs
terraform directly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.errors import DriverError

INPUT_FILES = ("variables.tf", "checks.tf")
"""The stack's variables and the checks between them: they plan alone, without providers. A file
the folder lacks is taken from its :data:`CLUSTER_MODULE_DIR` (infra/terraform keeps its checks
in the module it calls; its variables.tf is a copy of the module's)."""
CLUSTER_MODULE_DIR = Path("modules") / "cluster"
"""Where infra/terraform's cluster module lives, relative to the root that calls it."""
CLUSTER_MODULE = "module.cluster"
SCALE_SET_TYPES = (
    "azurerm_linux_virtual_machine_scale_set",
    "azurerm_orchestrated_virtual_machine_scale_set",
)
"""The worker pools' scale sets: Uniform and Flexible (infra/terraform/modules/worker_pool)."""
"""The address of that module call in infra/terraform (its resources are under it)."""
AUTO_VAR_FILES = (
    "terraform.tfvars",
    "terraform.tfvars.json",
    "*.auto.tfvars",
    "*.auto.tfvars.json",
)
"""The variable files Terraform loads by itself from the configuration's folder."""
RESULTS_DIR = "results"
"""The results storage stack's folder inside the cluster's (infra/terraform/results): ``up``
applies it first, in its own state, unless told otherwise."""
RESULTS_OUTPUT = "storage_account_id"
"""The results stack's output the cluster takes as ``results_storage_account_id``."""
HEAD_VM = "azurerm_linux_virtual_machine.head"
"""The head VM of the cluster module: replacing it loses what is on its disk."""


def is_head_vm(address: str) -> bool:
    """Whether ``address`` is the head VM: at the root (a configuration made before the module)
    or in :data:`CLUSTER_MODULE`."""
    return address in (HEAD_VM, f"{CLUSTER_MODULE}.{HEAD_VM}")


@dataclass(frozen=True)
class PlanSummary:
    add: int = 0
    change: int = 0
    destroy: int = 0
    replaced_head: tuple[str, ...] = field(default_factory=tuple)
    """Addresses of resources named ``head`` (at the root or in :data:`CLUSTER_MODULE`) that the
    plan deletes or replaces."""
    variables: dict[str, Any] = field(default_factory=dict, compare=False)
    """The root module's input variables as the plan resolved them (defaults included)."""
    replaced_scale_sets: tuple[str, ...] = field(default_factory=tuple)
    """Addresses of worker pools' scale sets the plan deletes (a pool gone, or replaced: a
    changed orchestration_mode deletes the one kind of scale set and creates the other)."""

    @property
    def empty(self) -> bool:
        return not (self.add or self.change or self.destroy)


def scale_set_warning(address: str) -> str:
    """What ``up`` says of a worker scale set the plan deletes: a Uniform one (a cluster made
    before Flexible became the default, or a pool whose mode changed) can be kept by pinning its
    pool's mode; a pool removed takes its scale set with it."""
    said = (
        f"WARNING: this plan deletes the worker scale set {address}: its workers go (running "
        "jobs lose them)"
    )
    pool = re.search(r'module\.worker_pool\["([^"]+)"\]\.(\w+)\.', address)
    if pool is None:
        return said
    name, kind = pool[1], pool[2]
    other = "Uniform" if kind == SCALE_SET_TYPES[0] else "Flexible"
    return (
        f"{said}; if pool {name!r} stays, it gets a new scale set: to keep this one, set its "
        f'orchestration_mode = "{other}" (worker_pools = {{ {name} = {{ orchestration_mode = '
        f'"{other}" }} }})'
    )


def _terraform_binary() -> str:
    binary = shutil.which("terraform")
    if binary is None:
        raise DriverError("up/down need the terraform CLI on PATH (terraform >= 1.11)")
    return binary


def _check_inputs(directory: str, var_files: list[str]) -> Path:
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise DriverError(f"--terraform-dir: no such folder: {directory}")
    for f in var_files:
        if not Path(f).is_file():
            raise DriverError(f"--var-file: no such file: {f}")
    return path


def _env() -> dict[str, str]:
    """Terraform's environment: no prompts meant for people, no call home for updates."""
    return {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}


def _run(path: Path, args: list[str], what: str, capture: bool = False) -> str:
    env = _env()
    if capture or not sys.stdout.isatty():  # colours only for a person's terminal
        args = [*args, "-no-color"]
    p = subprocess.run(
        [_terraform_binary(), *args],
        cwd=path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=capture,
        text=True,
    )
    if p.returncode != 0:
        detail = (
            f": {' '.join((p.stderr or '').split())[:300]}" if capture else ": see its output above"
        )
        raise DriverError(f"{what} failed in {path} (exit {p.returncode}){detail}")
    return p.stdout if capture else ""


def _var_args(variables: dict[str, str], var_files: list[str]) -> list[str]:
    """Terraform reads its command line's ``-var-file`` and ``-var`` in order, the later
    winning: ``--var`` comes last, the last word, as the commands' help says."""
    return [
        *(f"-var-file={Path(f).resolve()}" for f in var_files),
        *(f"-var={k}={v}" for k, v in variables.items()),
    ]


def summarize(plan: dict[str, Any]) -> PlanSummary:
    """What a plan (``terraform show -json`` of a plan file) does, and to the head."""
    add = change = destroy = 0
    replaced: list[str] = []
    scale_sets: list[str] = []
    for rc in plan.get("resource_changes", []):
        actions = rc.get("change", {}).get("actions", [])
        if actions in (["no-op"], ["read"]):
            continue
        if "create" in actions:
            add += 1
        if "delete" in actions:
            destroy += 1
            if rc.get("name") == "head" and rc.get("module_address", "") in ("", CLUSTER_MODULE):
                replaced.append(rc["address"])
            if rc.get("type") in SCALE_SET_TYPES:
                scale_sets.append(rc["address"])
        if actions == ["update"]:
            change += 1
    variables = {
        name: entry.get("value")
        for name, entry in (plan.get("variables") or {}).items()
        if isinstance(entry, dict)
    }
    return PlanSummary(add, change, destroy, tuple(replaced), variables, tuple(scale_sets))


@contextmanager
def planned(
    directory: str, variables: dict[str, str], var_files: list[str], destroy: bool = False
) -> Iterator[tuple[Path, PlanSummary]]:
    """``terraform init`` and ``plan`` (shown on the terminal); yields the plan file and what
    it does. The plan file is deleted afterwards: it may hold sensitive values."""
    path = _check_inputs(directory, var_files)
    _run(path, ["init", "-input=false"], "terraform init")
    with tempfile.TemporaryDirectory(prefix="raydriver-plan-") as tmp:
        planfile = Path(tmp) / "cluster.tfplan"
        args = ["plan", "-input=false", f"-out={planfile}"]
        _run(
            path,
            [*args, *(["-destroy"] if destroy else []), *_var_args(variables, var_files)],
            "terraform plan",
        )
        shown = _run(path, ["show", "-json", str(planfile)], "terraform show", capture=True)
        try:
            summary = summarize(json.loads(shown))
        except ValueError:
            raise DriverError(f"terraform show -json printed no JSON in {path}") from None
        yield planfile, summary


def apply_plan(directory: str, planfile: Path) -> None:
    """Apply exactly the saved plan (its output streams to the terminal)."""
    _run(Path(directory).expanduser(), ["apply", "-input=false", str(planfile)], "terraform apply")


def outputs(directory: str | Path) -> dict[str, Any]:
    """The root module's outputs in ``directory``'s state (``terraform output -json``), as
    plain values."""
    path = Path(directory).expanduser()
    shown = _run(path, ["output", "-json"], "terraform output", capture=True)
    try:
        doc = json.loads(shown or "{}")
    except ValueError:
        raise DriverError(f"terraform output -json printed no JSON in {path}") from None
    if not isinstance(doc, dict):
        raise DriverError(f"terraform output -json in {path} is not a JSON object")
    return {k: v.get("value") for k, v in doc.items() if isinstance(v, dict)}


def input_values(directory: str, variables: dict[str, str], var_files: list[str]) -> dict[str, Any]:
    """The values Terraform gives the configuration's input variables — defaults, the folder's
    own ``terraform.tfvars``/``*.auto.tfvars``, ``TF_VAR_*``, ``-var-file``, ``-var``, with every
    validation and cross-input check run — without providers or Azure: :data:`INPUT_FILES`
    (the folder's own, else its cluster module's) and the auto-loaded variable files planned
    alone in a scratch folder."""
    path = _check_inputs(directory, var_files)
    if not (path / INPUT_FILES[0]).is_file():
        raise DriverError(f"--terraform-dir: {path} has no {INPUT_FILES[0]}")
    with tempfile.TemporaryDirectory(prefix="raydriver-inputs-") as tmp:
        scratch = Path(tmp)
        copied = []
        for name in INPUT_FILES:
            own, module = path / name, path / CLUSTER_MODULE_DIR / name
            copied += [own] if own.is_file() else [module] if module.is_file() else []
        for pattern in AUTO_VAR_FILES:
            copied += sorted(path.glob(pattern))
        for f in copied:
            shutil.copyfile(f, scratch / f.name)
        _run(scratch, ["init", "-input=false"], "terraform init", capture=True)
        planfile = scratch / "inputs.tfplan"
        args = ["plan", "-input=false", "-lock=false", "-json", f"-out={planfile}"]
        p = subprocess.run(
            [_terraform_binary(), *args, *_var_args(variables, var_files)],
            cwd=scratch,
            env=_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise DriverError(f"terraform: {_first_diagnostic(p.stdout, p.stderr)}")
        shown = _run(scratch, ["show", "-json", str(planfile)], "terraform show", capture=True)
        try:
            return summarize(json.loads(shown)).variables
        except ValueError:
            raise DriverError("terraform show -json printed no JSON") from None


def _first_diagnostic(stdout: str, stderr: str) -> str:
    """The first error of ``terraform plan -json`` on one line ("summary: detail")."""
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        diagnostic = message.get("diagnostic") if isinstance(message, dict) else None
        if isinstance(diagnostic, dict) and diagnostic.get("severity") == "error":
            text = f"{diagnostic.get('summary', '')}: {diagnostic.get('detail', '')}"
            return " ".join(text.split())[:400]
    return " ".join(stderr.split())[:300] or "plan failed"
