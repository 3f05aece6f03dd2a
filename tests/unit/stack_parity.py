"""What the two stacks decide besides their parameters, read from each stack the same way, so
that a difference between them is found: every fact that differs must be listed, with its
reason, in bicep_support.BEHAVIOUR_DIFFERENT (shown in infra/bicep/README.md).

The facts, each computed from a Terraform directory and from a compiled ARM template (so a test
can hand in a copy of either with a difference put back):

- ``tags <ARM type>``: for every Azure resource type both stacks create, whether its resources
  carry the stack's tags input (``var.tags`` / ``parameters('tags')``), not some other or none.
- ``arm_endpoint <cloud>``: the autoscaler's Resource Manager endpoint (deploy value
  ARM_ENDPOINT) in each of Azure's clouds: Bicep deployed by tests/armeval.py with that cloud's
  environment(); Terraform's expression evaluated by the real ``terraform console`` with a vault
  URI of that cloud (the only place the azurerm provider shows which cloud it talks to).
- ``cluster_token``: the length and alphabet of the generated token (Terraform: the ephemeral
  random_password's arguments as the random provider reads them; Bicep: the parameter's default
  evaluated with random GUIDs).
- ``key_vault_name``: the vault name's shape for one prefix and which inputs change it
  (Terraform evaluated by ``terraform console``; Bicep deployed by armeval).
- ``node_image <case>``: what the head and the workers boot without a node image and with one
  (the gallery image version's id, or a marketplace image): Terraform's ``source_image_id`` and
  its dynamic ``source_image_reference``'s ``for_each`` evaluated by ``terraform console``;
  Bicep deployed by armeval, the image reference each module receives.
- ``head_rights <case>``: for scaling mode cpu/ray with autostop on, and cpu with it off, the
  roles the head's own identity holds and the one resource each is assigned on (head VM, scale
  set, autoscale setting): Terraform's assignments kept by their ``count`` (evaluated by
  ``terraform console``), Bicep's deployed by armeval.
- ``autostop_role <case>``: the autostop custom role in each case (or none): its actions, not
  actions, assignable scopes and name, for armeval's subscription and resource group.
- ``head_priority <case>``: the head VM's priority, eviction policy and max price for a regular
  head, a Spot head up to the regular price and a Spot head with a price of its own: Terraform's
  arguments evaluated by ``terraform console``; Bicep deployed by armeval, the VM's properties.
- ``pool_zones <case>``: a worker pool's scale set's zones and zone balance for a regional pool,
  one zone, and three zones balanced: Terraform's module arguments (modules/worker_pool)
  evaluated by ``terraform console``; Bicep deployed by armeval, the scale set's ``zones`` and
  ``properties.zoneBalance``.
- ``pool_flexible <case>``: a worker pool's scale set in each orchestration mode: which kind
  exists, its size, fault domain count, Spot Priority Mix and Instance Mix, for a Uniform pool, a
  plain Flexible pool and a Flexible Spot pool with both mixes: Terraform's module arguments
  (modules/worker_pool, both scale set resources) evaluated by ``terraform console``; Bicep
  deployed by armeval, the scale set's ``orchestrationMode``, ``sku.name``,
  ``platformFaultDomainCount``, ``priorityMixPolicy`` and ``skuProfile``.
- ``pool_mode <case>``: every pool's orchestration mode where the inputs leave it out (no pools:
  the pool "workers"; pools without one) and where one pins Uniform: Terraform's
  ``local.worker_pool_settings`` (what the worker_pool module is handed) planned by the real
  ``terraform console`` from the stack's variables.tf and checks.tf (the variable type's optional
  default and the default pool's included); Bicep deployed by armeval, each scale set's
  ``orchestrationMode``.
- ``interface_reader_role <case>``: the custom role reading network interfaces that a Flexible
  pool in scaling mode ray needs (or none), as ``autostop_role``.
- ``start_outputs <case>``: what the outputs ``python -m driver start`` reads (head VM, scale
  set, autoscale setting ids) name, in each case: the resource kind, or "" where there is none.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import uuid
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import yaml

from armeval import CLOUDS
from bicep_support import camel, deploy_template
from nodekit import render

# Every resource type of the Terraform stack and the Azure resource type it creates (None: no
# Azure resource of its own: a property of another, or not Azure at all). A test holds this
# table to the types the stack declares.
TF_TO_ARM: dict[str, str | None] = {
    "azurerm_resource_group": "Microsoft.Resources/resourceGroups",
    "azurerm_virtual_network": "Microsoft.Network/virtualNetworks",
    "azurerm_subnet": "Microsoft.Network/virtualNetworks/subnets",
    "azurerm_network_security_group": "Microsoft.Network/networkSecurityGroups",
    "azurerm_subnet_network_security_group_association": None,
    "azurerm_public_ip": "Microsoft.Network/publicIPAddresses",
    "azurerm_nat_gateway": "Microsoft.Network/natGateways",
    "azurerm_nat_gateway_public_ip_association": None,
    "azurerm_subnet_nat_gateway_association": None,
    "azurerm_network_interface": "Microsoft.Network/networkInterfaces",
    "azurerm_linux_virtual_machine": "Microsoft.Compute/virtualMachines",
    "azurerm_linux_virtual_machine_scale_set": "Microsoft.Compute/virtualMachineScaleSets",
    "azurerm_orchestrated_virtual_machine_scale_set": "Microsoft.Compute/virtualMachineScaleSets",
    "azurerm_monitor_autoscale_setting": "Microsoft.Insights/autoscalesettings",
    "azurerm_user_assigned_identity": "Microsoft.ManagedIdentity/userAssignedIdentities",
    "azurerm_role_assignment": "Microsoft.Authorization/roleAssignments",
    "azurerm_role_definition": "Microsoft.Authorization/roleDefinitions",
    "azurerm_key_vault": "Microsoft.KeyVault/vaults",
    "azurerm_key_vault_secret": "Microsoft.KeyVault/vaults/secrets",
    "azurerm_private_dns_zone": "Microsoft.Network/privateDnsZones",
    "azurerm_private_dns_zone_virtual_network_link": (
        "Microsoft.Network/privateDnsZones/virtualNetworkLinks"
    ),
    "azurerm_private_endpoint": "Microsoft.Network/privateEndpoints",
    "azurerm_shared_image_gallery": "Microsoft.Compute/galleries",
    "azurerm_shared_image": "Microsoft.Compute/galleries/images",
    "terraform_data": None,
    "time_sleep": None,
    "time_offset": None,
}

# A gallery image version id for the node image facts.
NODE_IMAGE_ID = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-ray/providers/"
    "Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/1.0.3"
)
NODE_IMAGE_CASES = {"without": None, "with": NODE_IMAGE_ID}
# Scaling mode and autostop minutes for the head's rights, the autostop role and the outputs.
AUTOSTOP_CASES = {
    "cpu autostop": ("cpu", 60),
    "ray autostop": ("ray", 60),
    "cpu no autostop": ("cpu", 0),
}
# The resources the head's rights and the start outputs name, by Terraform address and by ARM type.
# (The scale set and autoscale setting: the default pool's, in modules/worker_pool.)
TARGETS = {
    "azurerm_linux_virtual_machine.head": "head VM",
    "azurerm_linux_virtual_machine_scale_set.this": "scale set",
    "azurerm_orchestrated_virtual_machine_scale_set.this": "scale set",
    "azurerm_monitor_autoscale_setting.this": "autoscale setting",
}
ARM_TARGETS = {
    "Microsoft.Compute/virtualMachines": "head VM",
    "Microsoft.Compute/virtualMachineScaleSets": "scale set",
    "Microsoft.Insights/autoscalesettings": "autoscale setting",
}
START_OUTPUTS = {"head_vm_id": "headVmId", "scale_set_id": "scaleSetId",
                 "autoscale_setting_id": "autoscaleSettingId"}  # fmt: skip
# Built-in roles by id (Azure's built-in role definitions).
BUILT_IN_ROLES = {
    "9980e02c-c2be-4d73-94e8-173b1dc7cf3c": "Virtual Machine Contributor",
    "ba92f5b4-2d11-453d-a403-e96b0029c9fe": "Storage Blob Data Contributor",
}
# head_priority and head_max_price for the head's priority facts.
HEAD_PRIORITY_CASES: dict[str, tuple[str, float]] = {
    "regular": ("Regular", -1),
    "spot": ("Spot", -1),
    "spot capped": ("Spot", 0.125),
}
# A pool's zones and zone balance for the pool zones facts.
POOL_ZONES_CASES: dict[str, tuple[list[str], bool]] = {
    "regional": ([], False),
    "one zone": (["2"], False),
    "three balanced": (["1", "2", "3"], True),
}
# A pool's orchestration mode, Spot Priority Mix and Instance Mix for the pool flexible facts
# (Terraform's names; Bicep's are the same in camelCase).
POOL_FLEXIBLE_CASES: dict[str, dict[str, Any]] = {
    "uniform": {"orchestration_mode": "Uniform"},
    "flexible": {"orchestration_mode": "Flexible"},
    "flexible mixed": {
        "orchestration_mode": "Flexible",
        "vm_size": "Standard_D4s_v5",
        "spot_enabled": True,
        "priority_mix": {"base_regular_count": 2, "regular_percentage_above_base": 25},
        "instance_mix": {
            "vm_sizes": ["Standard_D4s_v5", "Standard_D4as_v5"],
            "allocation_strategy": "CapacityOptimized",
        },
    },
}
# worker_pools (Terraform's names) for the pool mode facts: the mode left out, and pinned.
POOL_MODE_CASES: dict[str, dict[str, Any]] = {
    "no pools": {},
    "pools leaving it out": {
        "cpu": {"spot_enabled": True},
        "gpu": {"vm_size": "Standard_NC4as_T4_v3"},
    },
    "workers pinned uniform": {"workers": {"orchestration_mode": "Uniform"}, "gpu": {}},
}
# A results storage account in a resource group of its own (the results stacks'), for the nodes'
# rights on it: with it and without one.
RESULTS_ACCOUNT = (
    "/subscriptions/00000000-0000-4000-8000-000000000003/resourceGroups/rg-ray-results/providers/"
    "Microsoft.Storage/storageAccounts/rayresults0123"
)
RESULTS_CASES = {"with account": RESULTS_ACCOUNT, "without": ""}
# The random provider's own default set of special characters (random_password, 3.7).
RANDOM_SPECIAL = "!@#$%&*()-_=+[]{}<>:?"
REQUIRED = {
    "allowedSshCidrs": ["203.0.113.7/32"],
    "adminSshPublicKey": (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkRZLgc a@b"
    ),
}
# The inputs a vault name may follow, and two values of each.
NAME_INPUTS = {
    "subscription": (
        "00000000-0000-4000-8000-000000000002",
        "00000000-0000-4000-8000-00000000000f",
    ),
    "resource_group": ("ray-rl-rg", "other-rg"),
    "name_prefix": ("ray", "rlx"),
}


def _unquote(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


# -- Terraform ------------------------------------------------------------------------------------
@cache
def _parse(text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = hcl2.loads(text)
    return parsed


def terraform_blocks(stack: Path, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, name, body) of every ``kind`` block (resource, ephemeral) in the stack's .tf files,
    and in those of each local child module it calls (../worker_pool), as the stack would write
    them: the module's ``var.X`` replaced by the call's argument (module_body())."""
    found = []
    for path in sorted(stack.glob("*.tf")):
        for block in _parse(path.read_text()).get(kind, []):
            for rtype, instances in block.items():
                for name, body in instances.items():
                    found.append((_unquote(rtype), _unquote(name), body))
    for directory, arguments in module_calls(stack).values():
        for path in sorted(directory.glob("*.tf")):
            for block in _parse(path.read_text()).get(kind, []):
                for rtype, instances in block.items():
                    for name, body in instances.items():
                        found.append(
                            (_unquote(rtype), _unquote(name), module_body(body, arguments))
                        )
    return found


def module_calls(stack: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """name -> (directory, arguments) of each module block with a local source."""
    found = {}
    for path in sorted(stack.glob("*.tf")):
        for block in _parse(path.read_text()).get("module", []):
            for name, body in block.items():
                source = _unquote(str(body.get("source", "")))
                if source.startswith(("./", "../")):
                    found[_unquote(name)] = (stack / source, body)
    return found


def _argument_text(value: Any) -> str:
    """A module argument as an expression: a bare reference as it is, anything else in ()."""
    text = _hcl(value)
    inner = text[1:-1] if text.startswith("(") and text.endswith(")") else text
    return inner if re.fullmatch(r"[\w.\[\]\"]+", inner) else f"({inner})"


def module_body(body: Any, arguments: dict[str, Any]) -> Any:
    """A child module's block with each ``var.X`` (``var.X.Y``: the argument's attribute Y when
    the argument is an object) replaced by the module call's argument."""
    if isinstance(body, dict):
        return {k: module_body(v, arguments) for k, v in body.items()}
    if isinstance(body, list):
        return [module_body(v, arguments) for v in body]
    if not isinstance(body, str):
        return body

    def replace(m: re.Match[str]) -> str:
        value: Any = arguments
        parts = m[1].split(".")
        for used, part in enumerate(parts):
            if not isinstance(value, dict) or part not in value:
                rest = ".".join(parts[used:])
                return f"{_argument_text(value)}.{rest}" if used else m[0]
            value = value[part]
        return _argument_text(value)

    return re.sub(r"(?<![\w.])var\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)", replace, body)


def module_output(stack: Path, text: str) -> str:
    """``module.NAME[KEY].OUTPUT`` in a root expression replaced by that output's expression
    in the module (its ``var.X`` replaced as module_body() does)."""
    calls = module_calls(stack)

    def replace(m: re.Match[str]) -> str:
        directory, arguments = calls[m[1]]
        for path in sorted(directory.glob("*.tf")):
            for block in _parse(path.read_text()).get("output", []):
                for name, spec in block.items():
                    if _unquote(name) == m[2]:
                        value = module_body(spec["value"], arguments)
                        inner = _single_interpolation(value) if isinstance(value, str) else None
                        return inner if inner is not None else str(value)
        return m[0]

    return re.sub(r"module\.(\w+)(?:\[[^\]]*\])?\.(\w+)", replace, text)


def terraform_locals(stack: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in sorted(stack.glob("*.tf")):
        for block in _parse(path.read_text()).get("locals", []):
            found.update({k: v for k, v in block.items() if not k.startswith("__")})
    return found


def _single_interpolation(text: str) -> str | None:
    """The inner expression of ``${...}`` when the whole text is one interpolation."""
    if not (text.startswith("${") and text.endswith("}")):
        return None
    depth = 0
    for i, c in enumerate(text[1:], 1):
        depth += c == "{"
        depth -= c == "}"
        if depth == 0:
            return text[2:-1] if i == len(text) - 1 else None
    return None


def _hcl(value: Any) -> str:
    """hcl2's rendering of a value -> HCL expression text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        inner = _single_interpolation(value)
        return f"({inner})" if inner is not None else value
    if isinstance(value, list):
        return "[" + ", ".join(_hcl(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{k} = {_hcl(v)}" for k, v in value.items() if not k.startswith("__")]
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"no HCL for {value!r}")


def expand(text: str, local_values: Mapping[str, Any], given: Mapping[str, str]) -> str:
    """An expression with its references replaced: ``given`` (a reference -> a string value),
    then ``local.X`` by X's own expression, recursively. Any reference left over stays, and
    terraform console refuses it: nothing is guessed."""
    for ref in sorted(given, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.]){re.escape(ref)}(?![\w])", f"({json.dumps(given[ref])})", text)

    def local(m: re.Match[str]) -> str:
        return f"({expand(_hcl(local_values[m[1]]), local_values, given)})"

    return re.sub(r"(?<![\w.])local\.([A-Za-z0-9_]+)", local, text)


def terraform_console(expressions: list[str]) -> list[Any]:
    """The values of pure expressions, by the real terraform binary (an empty configuration
    needs no provider and no init). Read from a pipe, the console prints its last answer only:
    one list holds them all."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            ["terraform", "console"],
            input=f"jsonencode([{', '.join(expressions)}])\n",
            capture_output=True,
            text=True,
            cwd=tmp,
            timeout=120,
            env={
                "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                "TF_CLI_CONFIG_FILE": "/dev/null",
                "CHECKPOINT_DISABLE": "1",
                "HOME": tmp,
            },
        )
    assert result.returncode == 0, f"terraform console: {result.stderr[-2000:]}"
    values: list[Any] = json.loads(json.loads(result.stdout))
    assert len(values) == len(expressions), result.stdout
    return values


def _tag_state(value: Any, stack_tags: str) -> str:
    if value is None:
        return "no tags"
    return "the stack's tags" if value == stack_tags else f"other tags: {value}"


def terraform_tags(stack: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for rtype, _, body in terraform_blocks(stack, "resource"):
        arm = TF_TO_ARM[rtype]
        if arm is not None:
            found.setdefault(arm, set()).add(_tag_state(body.get("tags"), "${var.tags}"))
    return found


def terraform_token(stack: Path) -> dict[str, Any]:
    [body] = [b for t, n, b in terraform_blocks(stack, "ephemeral") if t == "random_password"]
    [secret] = [b for t, _, b in terraform_blocks(stack, "resource") if t.endswith("_secret")]
    source = secret.get("value_wo", secret.get("value"))
    if source != "${ephemeral.random_password.cluster_token.result}":
        return {"length": None, "alphabet": f"not the password as it is: {source}"}
    classes = {
        "upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "lower": "abcdefghijklmnopqrstuvwxyz",
        "numeric": "0123456789",
        "special": _unquote(body.get("override_special", json.dumps(RANDOM_SPECIAL))),
    }
    alphabet = "".join(chars for name, chars in classes.items() if body.get(name, True))
    return {"length": body["length"], "alphabet": "".join(sorted(set(alphabet)))}


def terraform_node_image_expressions(stack: Path) -> tuple[list[str], list[str]]:
    """(keys, expressions): per case and role, the image id and the number of marketplace
    references (the dynamic block's for_each)."""
    values = terraform_locals(stack)
    roles = {"azurerm_linux_virtual_machine": "head",
             "azurerm_linux_virtual_machine_scale_set": "workers"}  # fmt: skip
    keys, expressions = [], []
    for rtype, _, body in terraform_blocks(stack, "resource"):
        if rtype not in roles:
            continue
        dynamic = [
            v["for_each"]
            for d in body.get("dynamic", [])
            for k, v in d.items()
            if _unquote(k) == "source_image_reference"
        ]
        # a dynamic block's for_each, or the static blocks written out
        count = (
            f"length({_hcl(dynamic[0])})"
            if dynamic
            else str(len(body.get("source_image_reference", [])))
        )
        for case, image in NODE_IMAGE_CASES.items():
            given = {"var.node_image_id": image, "var.os_image": "ubuntu-22.04"}
            keys.append(f"node_image {case} {roles[rtype]}")
            image_id = _hcl(body.get("source_image_id", "${null}"))
            expressions.append(
                f"[{expand(image_id, values, given)}, {expand(count, values, given)}]"
            )
    return keys, expressions


def terraform_head_priority(stack: Path) -> dict[str, Any]:
    """``head_priority <case>``: the head VM's priority arguments in each case."""
    values = terraform_locals(stack)
    [body] = [b for t, n, b in terraform_blocks(stack, "resource")
              if (t, n) == ("azurerm_linux_virtual_machine", "head")]  # fmt: skip
    arguments = ("priority", "eviction_policy", "max_bid_price")
    expressions = []
    for priority, price in HEAD_PRIORITY_CASES.values():
        given = {"var.head_priority": priority}
        parts = [
            expand(_hcl(body.get(a, "${null}")), values, given).replace(
                "var.head_max_price", f"({price})"
            )
            for a in arguments
        ]
        expressions.append(f"[{', '.join(parts)}]")
    answers = terraform_console(expressions)
    names = ("priority", "eviction policy", "max price")
    return {
        f"head_priority {case}": dict(zip(names, answer, strict=True))
        for case, answer in zip(HEAD_PRIORITY_CASES, answers, strict=True)
    }


def terraform_pool_zones(stack: Path) -> dict[str, Any]:
    """``pool_zones <case>``: the scale set's zones arguments of the worker_pool module (the
    cluster module hands it the pool's settings as they are: checks.tf, workers.tf)."""
    pool = stack.parent / "worker_pool"
    [body] = [b for path in sorted(pool.glob("*.tf"))
              for block in _parse(path.read_text()).get("resource", [])
              for t, instances in block.items()
              if _unquote(t) == "azurerm_linux_virtual_machine_scale_set"
              for b in instances.values()]  # fmt: skip
    expressions = []
    for zones, balance in POOL_ZONES_CASES.values():
        given = {"var.zones": zones, "var.zone_balance": balance}
        parts = [expand(_hcl(body.get(a, "${null}")), {}, given) for a in ("zones", "zone_balance")]
        expressions.append(f"[{', '.join(parts)}]")
    answers = terraform_console(expressions)
    return {
        f"pool_zones {case}": {"zones": zones, "zone balance": balance}
        for case, (zones, balance) in zip(POOL_ZONES_CASES, answers, strict=True)
    }


def _pool_resource(stack: Path, rtype: str) -> dict[str, Any]:
    """The body of the worker_pool module's resource of type ``rtype`` (its one of that type)."""
    pool = stack.parent / "worker_pool"
    [body] = [b for path in sorted(pool.glob("*.tf"))
              for block in _parse(path.read_text()).get("resource", [])
              for t, instances in block.items()
              if _unquote(t) == rtype
              for b in instances.values()]  # fmt: skip
    return body


def _dynamic(body: dict[str, Any], name: str) -> str:
    """A dynamic block as a list expression of its contents, in ARM's words for the two mixes."""
    arm = {"base_regular_count": "baseRegularPriorityCount",
           "regular_percentage_above_base": "regularPriorityPercentageAboveBase",
           "allocation_strategy": "allocationStrategy", "vm_sizes": "vmSizes"}  # fmt: skip
    [spec] = [d[k] for d in body.get("dynamic", []) for k in d if _unquote(k) == name]
    [content] = spec["content"]
    fields = ", ".join(
        f"{arm[k]} = {_hcl(v).replace(f'{name}.value', 'each_value')}"
        for k, v in content.items() if k != "__is_block__"
    )  # fmt: skip
    return f"[for each_value in {_hcl(spec['for_each'])} : {{ {fields} }}]"


def terraform_pool_flexible(stack: Path) -> dict[str, Any]:
    """``pool_flexible <case>``: the worker_pool module's two scale set resources for a pool of
    each case (the module's ``var.X`` given as the cluster module hands them: checks.tf)."""
    uniform = _pool_resource(stack, "azurerm_linux_virtual_machine_scale_set")
    flexible = _pool_resource(stack, "azurerm_orchestrated_virtual_machine_scale_set")
    expressions = []
    for pool in POOL_FLEXIBLE_CASES.values():
        given = {"var.orchestration_mode": pool["orchestration_mode"],
                 "var.vm_size": pool.get("vm_size", "Standard_D4s_v5")}  # fmt: skip
        mixes = {"var.priority_mix": pool.get("priority_mix"),
                 "var.instance_mix": pool.get("instance_mix")}  # fmt: skip
        texts = [_hcl(uniform["count"]), _hcl(flexible["count"]), _hcl(flexible["sku_name"]),
                 _hcl(uniform["sku"]),
                 _hcl(flexible["platform_fault_domain_count"]),
                 _dynamic(flexible, "priority_mix"), _dynamic(flexible, "sku_profile")]  # fmt: skip
        parts = [expand(t, {}, given) for t in texts]
        # The mixes are objects: written as HCL, not as the JSON text expand() gives a string.
        for ref, value in mixes.items():
            parts = [re.sub(rf"(?<![\w.]){re.escape(ref)}(?![\w])", f"({_hcl_value(value)})", t)
                     for t in parts]  # fmt: skip
        expressions.append(f"[{', '.join(parts)}]")
    answers = terraform_console(expressions)
    facts = {}
    for case, (n_uniform, n_flexible, sku, uniform_sku, domains, mix, profile) in zip(
        POOL_FLEXIBLE_CASES, answers, strict=True
    ):
        facts[f"pool_flexible {case}"] = {
            "mode": "Flexible" if n_flexible else "Uniform",
            "scale sets": n_uniform + n_flexible,
            "sku": sku if n_flexible else uniform_sku,
            "fault domains": domains if n_flexible else None,
            "priority mix": (mix[0] if mix else None) if n_flexible else None,
            "sku profile": _arm_sku_profile(profile[0]) if n_flexible and profile else None,
        }
    return facts


def terraform_pool_mode(stack: Path) -> dict[str, Any]:
    """``pool_mode <case>``: each pool's orchestration_mode in ``local.worker_pool_settings``,
    planned by the real terraform from the stack's variables.tf and checks.tf alone (they need no
    provider): the variable type's optional default and the default pool's both count."""
    import shutil
    import tempfile

    from terraform_support import terraform_env
    from validation_cases import console

    facts = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("variables.tf", "checks.tf"):
            shutil.copy(stack / name, work / name)
        init = subprocess.run(
            ["terraform", "init", "-input=false", "-no-color"], cwd=work,
            env=terraform_env(work), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert init.returncode == 0, init.stderr
        for case, pools in POOL_MODE_CASES.items():
            modes = "{ for n, p in local.worker_pool_settings : n => p.orchestration_mode }"
            facts[f"pool_mode {case}"] = console(work, {"worker_pools": pools}, modes)
    return facts


def _arm_sku_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """Terraform's sku_profile as ARM's skuProfile: the sizes as objects with a name."""
    return {
        "vmSizes": [{"name": v} for v in profile["vmSizes"]],
        "allocationStrategy": profile["allocationStrategy"],
    }


def _hcl_value(value: Any) -> str:
    """A Python value as an HCL expression (objects with ``=``)."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_hcl_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_hcl_value(v) for v in value) + "]"
    return json.dumps(value)


def terraform_outputs(stack: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(stack.glob("*.tf")):
        for block in _parse(path.read_text()).get("output", []):
            found.update({_unquote(k): v for k, v in block.items()})
    return found


def _target(text: str) -> str | None:
    """The resource kind a Terraform expression names (an address of TARGETS), if one."""
    found = {
        kind for address, kind in TARGETS.items() if re.search(rf"\b{re.escape(address)}\b", text)
    }
    return found.pop() if len(found) == 1 else None


def _autostop_given(mode: str, minutes: int) -> dict[str, str]:
    from armeval import Context

    c = Context()
    return {
        "var.scaling_mode": mode,
        "var.autostop_idle_minutes": str(minutes),
        "var.name_prefix": "ray",
        "data.azurerm_client_config.current.subscription_id": c.subscription_id,
        "local.resource_group_name": c.resource_group,
        # The default pool "workers" (the one these facts are about) is a Flexible scale set
        # (pool_mode no pools holds both stacks to it): the module's counts of its two kinds of
        # scale set read the pool's mode ...
        "each.value.orchestration_mode": "Flexible",
        # ... and the only pool: no worker_pools (its mode also decides the interface reader
        # role, through local.worker_pool_modes).
        "var.worker_pools": {},
    }


def terraform_autostop_expressions(stack: Path) -> tuple[list[str], list[str]]:
    """(keys, expressions) whose answers terraform_autostop_facts() reads."""
    values = terraform_locals(stack)
    blocks = terraform_blocks(stack, "resource")
    keys, expressions = [], []
    for case, (mode, minutes) in AUTOSTOP_CASES.items():
        given = _autostop_given(mode, minutes)
        for rtype, name, body in blocks:
            count = _hcl(body.get("count", 1))
            if rtype == "azurerm_role_assignment" and _target(_hcl(body.get("scope", ""))):
                role = body.get("role_definition_name") or _hcl(body.get("role_definition_id"))
                keys.append(f"{case}|assignment|{_target(_hcl(body['scope']))}|{role}")
                expressions.append(expand(count, values, given))
            elif rtype == "azurerm_role_definition":
                [permissions] = body["permissions"]
                keys.append(f"{case}|role|{name}")
                expressions.append(
                    "[" + ", ".join(expand(_hcl(v), values, given) for v in (
                        count, permissions["actions"], permissions.get("not_actions", []),
                        body["assignable_scopes"], body["name"],
                    )) + "]"
                )  # fmt: skip
            elif f"{rtype}.{name}" in TARGETS:
                keys.append(f"{case}|count|{TARGETS[f'{rtype}.{name}']}")
                expressions.append(expand(count, values, given))
    return keys, expressions


def terraform_autostop_facts(stack: Path, keys: list[str], answers: list[Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for case in AUTOSTOP_CASES:
        rights, counts = [], {}
        roles: dict[str, Any] = {}
        for key, answer in zip(keys, answers, strict=True):
            kase, kind, *rest = key.split("|")
            if kase != case:
                continue
            if kind == "assignment" and answer:
                target, source = rest
                named = "autostop" if "azurerm_role_definition.autostop" in source else source
                rights.append(f"{named.strip(chr(34))} on {target}")
            elif kind == "role" and answer[0]:
                roles[rest[0]] = {"actions": sorted(answer[1]), "not actions": answer[2],
                                  "assignable scopes": answer[3], "name": answer[4]}  # fmt: skip
            elif kind == "count":
                # A target of two kinds (the scale set: Uniform or Flexible): how many of either.
                counts[rest[0]] = counts.get(rest[0], 0) + answer
        facts[f"head_rights {case}"] = sorted(rights)
        facts[f"autostop_role {case}"] = roles.pop("autostop", None)
        facts[f"interface_reader_role {case}"] = roles.pop("interface_reader", None)
        assert not roles, f"a role definition the facts do not know: {sorted(roles)}"
        found = {}
        for name, spec in terraform_outputs(stack).items():
            if name not in START_OUTPUTS:
                continue
            value = _unquote(spec["value"]) if isinstance(spec["value"], str) else spec["value"]
            if isinstance(value, str) and "module." in value:
                value = module_output(stack, value)
            target = _target(str(value))
            if target is None:
                found[name] = f"not a target: {value}"
            elif counts.get(target, 1) == 0:
                found[name] = (
                    ""
                    if str(value).startswith("${try(") and ', "")}' in str(value)
                    else f"an absent {target}"
                )
            else:
                found[name] = target
        facts[f"start_outputs {case}"] = found
    return facts


def terraform_results_rights(stack: Path) -> dict[str, Any]:
    """The role assignments whose scope reads results_storage_account_id: for each case, each
    one's "role on scope (principal type)" where its count is not 0, by terraform console."""
    values = terraform_locals(stack)
    keys, expressions = [], []
    for case, account in RESULTS_CASES.items():
        given = {"var.results_storage_account_id": account}
        for rtype, _, body in terraform_blocks(stack, "resource"):
            scope = _hcl(body.get("scope", ""))
            if rtype != "azurerm_role_assignment" or "var.results_storage_account_id" not in (
                expand(scope, values, {})
            ):
                continue
            role = body.get("role_definition_name") or _hcl(body.get("role_definition_id"))
            principal = str(body.get("principal_type")).strip('"')
            keys.append((case, f"{role.strip(chr(34))} on {{}} ({principal})"))
            count = _hcl(body.get("count", 1))
            expressions.append(f"[{expand(count, values, given)}, {expand(scope, values, given)}]")
    facts: dict[str, Any] = {f"results_rights {case}": [] for case in RESULTS_CASES}
    for (case, right), (count, scope) in zip(keys, terraform_console(expressions), strict=True):
        if count:
            facts[f"results_rights {case}"].append(right.format(scope))
    return {k: sorted(v) for k, v in facts.items()}


def bicep_results_rights(text: str) -> dict[str, Any]:
    """The role assignments on the results account (deployed in its resource group, their scope
    relative to it): "role on full scope (principal type)", for each case."""
    facts: dict[str, Any] = {}
    for case, account in RESULTS_CASES.items():
        d = deploy_template({**REQUIRED, "resultsStorageAccountId": account}, text)
        assert not d.refused, d.refused
        rights = []
        for r in d.resources:
            scope = str(r.get("scope", ""))
            if r["type"] != "Microsoft.Authorization/roleAssignments" or "Storage" not in scope:
                continue
            sub, group = d.module_groups[r["_deployment"]]
            role = r["properties"]["roleDefinitionId"].rsplit("/", 1)[-1]
            rights.append(
                f"{BUILT_IN_ROLES.get(role, role)} on "
                f"/subscriptions/{sub}/resourceGroups/{group}/providers/{scope} "
                f"({r['properties'].get('principalType')})"
            )
        facts[f"results_rights {case}"] = sorted(rights)
    return facts


def terraform_facts(stack: Path) -> dict[str, Any]:
    facts: dict[str, Any] = {f"tags {t}": sorted(s) for t, s in terraform_tags(stack).items()}
    facts.update(terraform_results_rights(stack))
    values = terraform_locals(stack)
    endpoint = _hcl(values["deploy_values"]["ARM_ENDPOINT"])
    name = _hcl(values["key_vault_name"])
    clouds = list(CLOUDS)
    expressions = [
        expand(endpoint, values, {"azurerm_key_vault.this.vault_uri":
                                  f"https://ray-kv-0123{CLOUDS[c]['suffixes']['keyvaultDns']}/"})
        for c in clouds
    ]  # fmt: skip
    variants = _name_variants()
    for inputs in variants:
        given = {
            "data.azurerm_client_config.current.subscription_id": inputs["subscription"],
            "local.resource_group_name": inputs["resource_group"],
            "var.name_prefix": inputs["name_prefix"],
        }
        expressions.append(expand(name, values, given))
    image_keys, image_expressions = terraform_node_image_expressions(stack)
    autostop_keys, autostop_expressions = terraform_autostop_expressions(stack)
    answers = terraform_console(expressions + image_expressions + autostop_expressions)
    facts.update(
        terraform_autostop_facts(
            stack, autostop_keys, answers[len(answers) - len(autostop_expressions) :]
        )
    )
    answers = answers[: len(answers) - len(autostop_expressions)]
    image_answers = answers[len(answers) - len(image_expressions) :]
    answers = answers[: len(answers) - len(image_expressions)]
    for key, (image_id, marketplace) in zip(image_keys, image_answers, strict=True):
        facts[key] = {"image id": image_id, "marketplace images": marketplace}
    facts.update({f"arm_endpoint {c}": v for c, v in zip(clouds, answers, strict=False)})
    facts["cluster_token"] = terraform_token(stack)
    facts.update(terraform_head_priority(stack))
    facts.update(terraform_pool_zones(stack))
    facts.update(terraform_pool_flexible(stack))
    facts.update(terraform_pool_mode(stack))
    facts["key_vault_name"] = _name_fact(variants, answers[len(clouds) :])
    return facts


# -- Bicep (the compiled template) ----------------------------------------------------------------
def bicep_tags(doc: dict[str, Any]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def walk(template: dict[str, Any]) -> None:
        for r in template["resources"]:
            inner = r.get("properties", {}).get("template")
            if r["type"] == "Microsoft.Resources/deployments" and inner is not None:
                walk(inner)
                continue
            state = _tag_state(r.get("tags"), "[parameters('tags')]")
            found.setdefault(r["type"], set()).add(state)
            for _ in r.get("properties", {}).get("subnets", []):
                found.setdefault(f"{r['type']}/subnets", set()).add("no tags")

    walk(doc)
    return found


def _deploy_values(d: Any) -> dict[str, str]:
    [module] = [n for n in d.module_parameters if n.endswith("-head")]
    document = yaml.safe_load(base64.b64decode(d.module_parameters[module]["customData"]))
    [entry] = [e for e in document["write_files"] if e["path"].endswith("/deploy.json")]
    return render.decode_deploy_values(entry["content"])


def bicep_token(doc: dict[str, Any], samples: int = 8) -> dict[str, Any]:
    tokens = []
    for _ in range(samples):
        d = deploy_template(REQUIRED, json.dumps(doc), new_guids=[str(uuid.uuid4()) for _ in "ab"])
        assert not d.refused, d.refused
        [module] = [n for n in d.module_parameters if n.endswith("-keyvault")]
        tokens.append(d.module_parameters[module]["clusterToken"])
    lengths = {len(t) for t in tokens}
    return {
        "length": lengths.pop() if len(lengths) == 1 else sorted(lengths),
        "alphabet": "".join(sorted(set("".join(tokens)))),
    }


def _arm_target(resource_id: str) -> str | None:
    for rtype, kind in ARM_TARGETS.items():
        if re.search(rf"(^|/providers/){re.escape(rtype)}/[^/]+$", resource_id, re.I):
            return kind
    return None


def bicep_autostop_facts(text: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for case, (mode, minutes) in AUTOSTOP_CASES.items():
        d = deploy_template({**REQUIRED, "scalingMode": mode, "autostopIdleMinutes": minutes}, text)
        assert not d.refused, d.refused
        every = [r for r in d.resources if r["type"] == "Microsoft.Authorization/roleDefinitions"]
        kinds = {"Ray cluster autostop ": "autostop", "Ray cluster interface reader ": "reader"}
        by_kind = {k: [r for r in every if r["properties"]["roleName"].startswith(prefix)]
                   for prefix, k in kinds.items()}  # fmt: skip
        assert sum(map(len, by_kind.values())) == len(every), "a role the facts do not know"
        roles = by_kind["autostop"]
        role_names = {r["name"]: "autostop" for r in roles}
        rights = []
        for r in d.resources:
            if r["type"] != "Microsoft.Authorization/roleAssignments":
                continue
            target = _arm_target(str(r.get("scope", "")))
            if target is None:
                continue
            role = r["properties"]["roleDefinitionId"].rsplit("/", 1)[-1]
            rights.append(f"{role_names.get(role, BUILT_IN_ROLES.get(role, role))} on {target}")
        facts[f"head_rights {case}"] = sorted(rights)
        role_fact = None
        if roles:
            [role] = roles
            [permission] = role["properties"]["permissions"]
            role_fact = {
                "actions": sorted(permission["actions"]),
                "not actions": permission.get("notActions", []),
                "assignable scopes": role["properties"]["assignableScopes"],
                "name": role["properties"]["roleName"],
            }
        facts[f"autostop_role {case}"] = role_fact
        reader = None
        if by_kind["reader"]:
            [role] = by_kind["reader"]
            [permission] = role["properties"]["permissions"]
            reader = {
                "actions": sorted(permission["actions"]),
                "not actions": permission.get("notActions", []),
                "assignable scopes": role["properties"]["assignableScopes"],
                "name": role["properties"]["roleName"],
            }
        facts[f"interface_reader_role {case}"] = reader
        facts[f"start_outputs {case}"] = {
            tf: (_arm_target(d.outputs[arm]) or f"not a target: {d.outputs[arm]}")
            if d.outputs[arm]
            else ""
            for tf, arm in START_OUTPUTS.items()
        }
    return facts


def bicep_facts(doc: dict[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {f"tags {t}": sorted(s) for t, s in bicep_tags(doc).items()}
    text = json.dumps(doc)
    facts.update(bicep_results_rights(text))
    for cloud in CLOUDS:
        d = deploy_template(REQUIRED, text, cloud=cloud)
        assert not d.refused, d.refused
        facts[f"arm_endpoint {cloud}"] = _deploy_values(d)["ARM_ENDPOINT"]
    facts["cluster_token"] = bicep_token(doc)
    variants = _name_variants()
    names = []
    for inputs in variants:
        d = deploy_template(
            {**REQUIRED, "namePrefix": inputs["name_prefix"]},
            text,
            subscription_id=inputs["subscription"],
            resource_group=inputs["resource_group"],
        )
        [vault] = [r for r in d.resources if r["type"] == "Microsoft.KeyVault/vaults"]
        names.append(vault["name"])
    facts["key_vault_name"] = _name_fact(variants, names)
    facts.update(bicep_autostop_facts(text))
    for case, (priority, price) in HEAD_PRIORITY_CASES.items():
        given = {"headPriority": priority, "headMaxPrice": str(price)}
        d = deploy_template({**REQUIRED, **given}, text)
        assert not d.refused, d.refused
        [vm] = [r for r in d.resources if r["type"] == "Microsoft.Compute/virtualMachines"]
        props = vm["properties"]
        facts[f"head_priority {case}"] = {
            "priority": props.get("priority"),
            "eviction policy": props.get("evictionPolicy"),
            "max price": (props.get("billingProfile") or {}).get("maxPrice"),
        }
    for case, (zones, balance) in POOL_ZONES_CASES.items():
        pools = [{"name": "workers", "zones": zones, "zoneBalance": balance}]
        d = deploy_template({**REQUIRED, "workerPools": pools}, text)
        assert not d.refused, d.refused
        [vmss] = [
            r for r in d.resources if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
        ]
        facts[f"pool_zones {case}"] = {
            "zones": vmss.get("zones"),
            "zone balance": vmss["properties"].get("zoneBalance"),
        }
    for case, pool in POOL_FLEXIBLE_CASES.items():
        given = {"name": "workers", **{camel(k): v for k, v in pool.items()}}
        for k in ("priorityMix", "instanceMix"):
            if k in given:
                given[k] = {camel(a): v for a, v in given[k].items()}
        d = deploy_template({**REQUIRED, "workerPools": [given]}, text)
        assert not d.refused, d.refused
        [vmss] = [
            r for r in d.resources if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
        ]
        props = vmss["properties"]
        facts[f"pool_flexible {case}"] = {
            "mode": props["orchestrationMode"],
            "scale sets": 1,
            "sku": vmss["sku"]["name"],
            "fault domains": props.get("platformFaultDomainCount"),
            "priority mix": props.get("priorityMixPolicy"),
            "sku profile": props.get("skuProfile"),
        }
    for case, given_pools in POOL_MODE_CASES.items():
        pools = [{"name": name, **{camel(k): v for k, v in pool.items()}}
                 for name, pool in given_pools.items()]  # fmt: skip
        d = deploy_template({**REQUIRED, "workerPools": pools}, text)
        assert not d.refused, d.refused
        facts[f"pool_mode {case}"] = {
            r["name"].removeprefix("ray-"): r["properties"]["orchestrationMode"]
            for r in d.resources
            if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
        }
    for case, image in NODE_IMAGE_CASES.items():
        d = deploy_template({**REQUIRED, **({"nodeImageId": image} if image else {})}, text)
        assert not d.refused, d.refused
        for role in ("head", "workers"):
            [module] = [n for n in d.module_parameters if n.endswith(f"-{role}")]
            ref = d.module_parameters[module]["imageReference"]
            facts[f"node_image {case} {role}"] = {
                "image id": ref.get("id"),
                "marketplace images": int("publisher" in ref),
            }
    return facts


# -- the comparison -------------------------------------------------------------------------------
def _name_variants() -> list[dict[str, str]]:
    """The first value of every input, then each input changed alone."""
    base = {k: v[0] for k, v in NAME_INPUTS.items()}
    return [base] + [{**base, k: v[1]} for k, v in NAME_INPUTS.items()]


def _name_fact(variants: list[dict[str, str]], names: list[str]) -> dict[str, Any]:
    """The name for the first variant with its hash shown as '#', and the inputs that change it
    besides the prefix written into it."""
    prefix = variants[0]["name_prefix"]
    first = names[0]
    shape = first
    if first.startswith(f"{prefix}-kv-"):
        shape = f"{prefix}-kv-" + "#" * (len(first) - len(prefix) - 4)
    suffix = [n.rsplit("-", 1)[-1] for n in names]
    follows = sorted(k for k, s in zip(NAME_INPUTS, suffix[1:], strict=False) if s != suffix[0])
    return {"shape": shape, "length": len(first), "hash follows": follows}


@cache
def _template_facts(text: str) -> dict[str, Any]:
    return bicep_facts(json.loads(text))


def parity_differences(stack: Path, doc: dict[str, Any]) -> dict[str, str]:
    """fact -> what each stack decides, for the facts where they differ (a type only one stack
    creates is not a difference of tagging)."""
    tf = terraform_facts(stack)
    bicep = _template_facts(json.dumps(doc, sort_keys=True))
    out = {}
    for key in sorted(set(tf) | set(bicep)):
        if key.startswith("tags ") and (key not in tf or key not in bicep):
            continue
        if tf.get(key) != bicep.get(key):
            out[key] = f"Terraform {tf.get(key)!r}, Bicep {bicep.get(key)!r}"
    return out
