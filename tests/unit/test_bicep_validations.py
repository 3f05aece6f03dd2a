"""The Bicep stack refuses what the Terraform stack refuses, before anything is created.

Every bad and good input of tests/unit/test_terraform_validations.py (its tables, names in
camelCase) is deployed here with azuredeploy.json through tests/armeval.py: a bad value must be
refused by a parameter decorator of the same input, or by the input-checks module with the
Terraform stack's message (names in camelCase); a good value must deploy every resource. Rules of
Terraform-only inputs (bicep_support.TERRAFORM_ONLY) and of the Key Vault firewall Bicep does
not have are the exceptions, named below.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest
from terraform_docs import variables

from armeval import ArmError, deploy, is_expression, parse_expression
from bicep_support import (
    TERRAFORM_ONLY,
    camel,
    check_results,
    deploy_template,
    template,
    template_text,
)
from terraform_support import MODULE, error_messages, terraform_env
from validation_cases import BAD, GOOD, GPU_POOL, REQUIRED, SPOT_CPU_POOL, case_id, console

VARIABLES = set(variables())
# Terraform's rules about its Key Vault firewall: Bicep's vault has no public endpoint.
TERRAFORM_ONLY_RULES = ("The Key Vault's firewall would admit no address",)


def to_bicep(variables: dict[str, Any]) -> dict[str, Any]:
    """Terraform's variables as Bicep's parameters: names in camelCase; head_max_price as text;
    worker_pools, a map of pools by name, as workerPools, an array of pools each with its name."""
    found = {camel(k): v for k, v in variables.items() if k not in TERRAFORM_ONLY}
    if isinstance(found.get("headMaxPrice"), (int, float)):
        # Terraform's number is Bicep's text (bicep_support.DIFFERENT).
        price = found["headMaxPrice"]
        found["headMaxPrice"] = str(int(price)) if price == int(price) else repr(price)
    if "workerPools" in found:
        found["workerPools"] = [
            {"name": name, **{camel(k): camel_keys(k, v) for k, v in pool.items()}}
            for name, pool in found["workerPools"].items()
        ]
    return found


# The attributes of a worker pool, which the messages name too (vm_size -> vmSize), and those of
# its objects priority_mix and instance_mix (Bicep's names in camelCase too).
POOL_FIELDS = {
    "vm_size", "min_count", "default_count", "max_count", "spot_enabled", "eviction_policy",
    "max_price", "ray_resources", "ray_labels", "zones", "zone_balance", "orchestration_mode",
    "priority_mix", "instance_mix", "base_regular_count", "regular_percentage_above_base",
    "vm_sizes", "allocation_strategy",
}  # fmt: skip
# A pool's objects whose keys are the stack's own names (not Ray's, as in ray_resources).
POOL_OBJECTS = {"priority_mix", "instance_mix"}


def camel_keys(field: str, value: Any) -> Any:
    """A pool attribute's value in Bicep: the keys of priority_mix and instance_mix in camelCase."""
    if field in POOL_OBJECTS and isinstance(value, dict):
        return {camel(k): v for k, v in value.items()}
    return value


def bicep_message(terraform_message: str) -> str:
    """A Terraform message with the variable names it mentions in camelCase."""

    # Variable names, and a name cut short at the end of a fragment ("worker_default").
    def replace(m: re.Match[str]) -> str:
        word = m.group(0)
        names = VARIABLES | POOL_FIELDS
        if any(v == word or (v.startswith(word) and m.end() == len(m.string)) for v in names):
            return camel(word)
        return word

    return re.sub(r"\b[a-z]+(?:_[a-z0-9]+)+\b", replace, terraform_message)


BICEP_BAD = [
    (variables, expected)
    for variables, expected in BAD
    if not set(variables) <= set(TERRAFORM_ONLY) and not expected.startswith(TERRAFORM_ONLY_RULES)
]
# Accepted by Bicep although Terraform refuses them: only its firewall's rules.
BICEP_GOOD_TOO = [variables for variables, expected in BAD if expected in TERRAFORM_ONLY_RULES]


def refusals(variables: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(parameter decorator refusals, input rule messages) for Terraform-style variables."""
    decorators, rules = _refusals(json.dumps(variables, sort_keys=True))
    return list(decorators), list(rules)


@cache
def _refusals(variables_json: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`refusals` of the variables in JSON, each case evaluated once per session (the
    per-case tests and the every-rule test ask for the same cases; the template does not change
    while the tests run)."""
    d = deploy_template(to_bicep({**REQUIRED, **json.loads(variables_json)}))
    rules = (
        check_results(d) if any(n.endswith("-input-checks") for n in d.module_parameters) else []
    )
    decorators = [r for r in d.refused if "'results'" not in r]
    return tuple(decorators), tuple(rules)


def test_the_tables_are_the_terraform_ones_and_nothing_is_dropped_silently() -> None:
    dropped = [c for c in BAD if c not in BICEP_BAD]
    assert len(BICEP_BAD) >= 120
    for case, expected in dropped:
        assert set(case) <= set(TERRAFORM_ONLY) or expected in TERRAFORM_ONLY_RULES, (
            case,
            expected,
        )


@pytest.mark.parametrize("case", BICEP_BAD, ids=[case_id(c) for c in BICEP_BAD])
def test_bad_value_is_refused_before_anything_is_created(case: tuple[dict, str]) -> None:
    variables, expected = case
    decorators, rules = refusals(variables)
    message = bicep_message(expected)
    assert decorators or rules, f"{variables} was accepted"
    if rules:
        assert any(message in r for r in rules), f"expected {message!r} among {rules}"
    else:
        # A decorator (@minValue, @maxLength, @allowed, the type) refused the input the
        # Terraform message is about, before the rules ran.
        named = re.search(r"\b([a-z]+(?:_[a-z0-9]+)+|location)\b", expected)
        assert named, expected
        parameter = camel(named.group(1))
        assert any(f"'{parameter}'" in r for r in decorators), (parameter, decorators)


@pytest.mark.parametrize(
    "variables",
    GOOD + BICEP_GOOD_TOO,
    ids=[case_id(c) for c in GOOD + BICEP_GOOD_TOO],
)
def test_good_value_deploys_every_resource(variables: dict[str, Any]) -> None:
    d = deploy_template(to_bicep({**REQUIRED, **variables}))
    assert not d.refused, d.refused
    assert check_results(d) == []
    types = {r["type"] for r in d.resources}
    assert "Microsoft.Compute/virtualMachines" in types
    assert "Microsoft.Compute/virtualMachineScaleSets" in types
    # scaling_mode ray: no CPU autoscale setting; an autoscaler identity and its role instead.
    # Autostop (on by default): the head's own identity too, the custom role, and its
    # assignments on the head VM, the scale set (Virtual Machine Contributor's there in ray
    # mode) and the autoscale setting (cpu mode).
    ray = variables.get("scaling_mode") == "ray"
    autostop = variables.get("autostop_idle_minutes", 60) > 0
    pools = len(variables.get("worker_pools") or {"workers": {}})
    # Ray mode with a Flexible pool (every pool that does not pin Uniform, the default pool
    # too): the custom role reading network interfaces, assigned on the resource group.
    modes = [p.get("orchestration_mode", "Flexible")
             for p in (variables.get("worker_pools") or {"workers": {}}).values()]  # fmt: skip
    reader = ray and "Flexible" in modes
    assert ("Microsoft.Insights/autoscalesettings" in types) is not ray
    scale_sets = [
        r for r in d.resources if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
    ]
    assert len(scale_sets) == pools
    assignments = [r for r in d.resources if r["type"] == "Microsoft.Authorization/roleAssignments"]
    on_scale_set = [r for r in assignments if "virtualMachineScaleSets" in str(r.get("scope"))]
    assert len(on_scale_set) == (pools if ray or autostop else 0)
    on_head = [r for r in assignments if "virtualMachines/" in str(r.get("scope"))]
    assert len(on_head) == int(autostop)
    on_autoscale = [r for r in assignments if "autoscalesettings" in str(r.get("scope"))]
    assert len(on_autoscale) == (pools if autostop and not ray else 0)
    roles = [r for r in d.resources if r["type"] == "Microsoft.Authorization/roleDefinitions"]
    assert len(roles) == int(autostop) + int(reader)
    identities = [r for r in d.resources if r["type"].endswith("userAssignedIdentities")]
    assert len(identities) == (2 if ray or autostop else 1)
    # 17 resources in cpu mode without autostop; ray mode takes the autoscale setting away and
    # adds an identity and its role assignment; autostop adds its role, the head's assignment,
    # and the scale set's and autoscale setting's in cpu mode (the identity too, in cpu mode).
    # Each further pool (cpu mode) adds its scale set and autoscale setting, and with autostop
    # their two assignments; ray mode with a Flexible pool the interface reader role and its
    # assignment.
    expected = 17 + (1 if ray else 0) + (pools - 1) * 2 + (2 if reader else 0)
    if autostop:
        expected += 2 + (0 if ray else 1 + 2 * pools)
    # Results storage by id: the blob private endpoint, its DNS zone group, the zone and its
    # link, and in the account's own resource group the nodes' role on its results container.
    account_id = variables.get("results_storage_account_id", "")
    results = bool(account_id)
    endpoints = [r["name"] for r in d.resources if r["type"].endswith("/privateEndpoints")]
    assert ("ray-blob-pe" in endpoints) is results
    on_results = [r for r in assignments if r["_deployment"] == "ray-results-role"]
    assert len(on_results) == int(results)
    if results:
        parts = account_id.split("/")
        assert d.module_groups["ray-results-role"] == (parts[2], parts[4])
        [role] = on_results
        assert role["scope"] == (
            f"Microsoft.Storage/storageAccounts/{parts[8]}/blobServices/default/containers/results"
        )
        assert role["properties"]["roleDefinitionId"].endswith(
            "/roleDefinitions/ba92f5b4-2d11-453d-a403-e96b0029c9fe"
        )
        assert role["properties"]["principalType"] == "ServicePrincipal"
    else:
        assert "ray-results-role" not in d.module_groups
    expected += 5 if results else 0
    assert len(d.resources) == expected


def test_required_inputs_have_no_default() -> None:
    d = deploy_template({})
    assert sorted(d.refused) == [
        "main: the template parameter 'adminSshPublicKey' has no value",
        "main: the template parameter 'allowedSshCidrs' has no value",
    ]


def rule_messages() -> dict[str, str]:
    """Each rule of the template's `check` variable: its name and the literal start of its
    message (up to the first interpolated value)."""
    found = {}
    for name, value in template()["variables"]["check"].items():
        assert is_expression(value), name
        node = parse_expression(value)
        assert node[0] == "call" and node[1] == "if", name
        ok, message = node[2][1], node[2][2]
        assert ok == ("lit", "ok"), name
        if message[0] == "lit":
            found[name] = message[1]
        else:
            assert message[:2] == ("call", "format"), name
            found[name] = message[2][0][1].split("{")[0]
    return found


def test_every_rule_is_exercised() -> None:
    """No rule of the template goes without a bad case that triggers it."""
    seen = [r for variables, _ in BICEP_BAD for r in refusals(variables)[1]]
    rules = rule_messages()
    assert len(rules) >= 29
    untested = [name for name, start in rules.items() if not any(start in s for s in seen)]
    assert not untested, untested


def test_every_message_is_terraform_s_in_camel_case() -> None:
    """The rules speak like the Terraform stack's validations and preconditions (names in
    camelCase), up to the first interpolated value."""
    terraform = [
        bicep_message(m.replace('\\"', '"')).split("${")[0]
        for path, kind in ((MODULE / "variables.tf", "validation"), (MODULE / "checks.tf", "p"))
        for m in error_messages(path, kind)
    ]
    for name, start in rule_messages().items():
        assert any(t.startswith(start) or start.startswith(t) for t in terraform), name


def test_a_rule_taken_out_lets_its_bad_value_through() -> None:
    """The evaluation can fail: with the /8 rule's condition replaced by true, the input it
    exists for is no longer refused by it."""
    doc = template()
    rule = doc["variables"]["check"]["allowedSshCidrsPrefixLength"]
    doc["variables"]["check"]["allowedSshCidrsPrefixLength"] = (
        "[if(true(), 'ok'" + rule[rule.index(", 'ok'") + len(", 'ok'") :]
    )
    variables = to_bicep({**REQUIRED, "allowed_ssh_cidrs": ["8.0.0.0/7"]})
    rules = check_results(deploy_template(variables, text=json.dumps(doc)))
    assert not any("every entry must be /8 or narrower" in r for r in rules), rules
    assert any("every entry must be /8 or narrower" in r for r in refusals(
        {"allowed_ssh_cidrs": ["8.0.0.0/7"]})[1])  # fmt: skip


def test_an_unguarded_int_would_fail_the_deployment_instead_of_refusing() -> None:
    """The evaluator fails where Resource Manager fails: int() of a bad octet outside its ?:
    guard is an error, not a message (so the guards in main.bicep are load-bearing)."""
    text = template_text().replace(
        "if(variables('cidrShapes')[copyIndex('cidrForms')].shaped, ", "if(true(), ", 1
    )
    assert text != template_text()
    with pytest.raises(ArmError, match=r"int\(\)"):
        deploy_template(to_bicep({**REQUIRED, "allowed_ssh_cidrs": ["*"]}), text=text)


def test_every_input_rule_runs_before_any_resource() -> None:
    """Every nested deployment depends, directly or through another, on the input checks, so
    a refused input stops the deployment before anything is created."""
    resources = template()["resources"]
    by_name = {r["name"]: r for r in resources}
    [checks] = [n for n in by_name if "input-checks" in n]

    def reaches(name: str) -> bool:
        deps = by_name[name].get("dependsOn", [])
        targets = [n for n in by_name if any(n[1:-1] in d for d in deps)]
        return any(t == checks or reaches(t) for t in targets)

    for name in by_name:
        if name != checks:
            assert reaches(name), f"{name} does not wait for the input checks"


def test_the_checks_module_receives_every_rule() -> None:
    """main.bicep lists the rules for the checks module by hand (pycep-parser 0.5.1, checkov's
    Bicep parser, knows no items()/map()): the list is exactly the rules, in order."""
    doc = template()
    [checks] = [
        r
        for r in doc["resources"]
        if r["name"].endswith("-input-checks', parameters('namePrefix'))]")
    ]
    given = checks["properties"]["parameters"]["results"]["value"]
    assert given == [f"[variables('check').{name}]" for name in doc["variables"]["check"]]
    inner = checks["properties"]["template"]["parameters"]["results"]
    assert inner["type"] == "array" and inner["allowedValues"] == ["ok"]


# -- worker pools: the same pools from both stacks ---------------------------------------------
TWO_POOLS = {
    "autostop_idle_minutes": 30,
    "worker_pools": {
        "cpu": {**SPOT_CPU_POOL, "zones": ["1", "3"], "zone_balance": True},
        "gpu": GPU_POOL,
    },
}


@pytest.fixture(scope="module")
def terraform_inputs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """variables.tf and checks.tf alone, initialised (no provider), for terraform console."""
    import shutil
    import subprocess

    work = tmp_path_factory.mktemp("tf-pools")
    for name in ("variables.tf", "checks.tf"):
        shutil.copy(MODULE / name, work / name)
    init = subprocess.run(
        ["terraform", "init", "-input=false", "-no-color"],
        cwd=work, env=terraform_env(work), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    return work


def test_two_pools_are_the_same_scale_sets_in_both_stacks(terraform_inputs: Any) -> None:
    """Terraform's pools (local.worker_pool_settings, by the real terraform) and the scale sets,
    autoscale settings and custom data Bicep deploys (armeval) for the same Spot CPU + GPU
    pools: names, host name prefixes, sizes, counts, Spot settings, each pool's own values."""
    import base64

    import yaml

    from nodekit import render

    tf = console(terraform_inputs, TWO_POOLS, "local.worker_pool_settings")
    d = deploy_template(to_bicep({**REQUIRED, **TWO_POOLS}))
    assert not d.refused and check_results(d) == []
    scale_sets = {
        r["name"]: r
        for r in d.resources
        if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
    }
    autoscale = {
        r["name"]: r for r in d.resources if r["type"] == "Microsoft.Insights/autoscalesettings"
    }
    assert set(scale_sets) == {p["scale_set_name"] for p in tf.values()}
    assert tf["cpu"]["zones"] == ["1", "3"] and tf["gpu"]["zones"] == []
    assert set(autoscale) == {p["autoscale_name"] for p in tf.values()}
    for name, pool in tf.items():
        vmss = scale_sets[pool["scale_set_name"]]
        profile = vmss["properties"]["virtualMachineProfile"]
        assert vmss["sku"]["name"] == pool["vm_size"]
        assert vmss["sku"]["capacity"] == pool["default_count"]
        assert profile["osProfile"]["computerNamePrefix"] == pool["computer_name_prefix"]
        assert profile["priority"] == ("Spot" if pool["spot_enabled"] else "Regular")
        # The pool's zones (none: regional, no zones property), balanced with two or more.
        assert vmss["zones"] == (pool["zones"] or None)
        assert vmss["properties"]["zoneBalance"] == (
            pool["zone_balance"] if len(pool["zones"]) > 1 else None
        )
        if pool["spot_enabled"]:
            assert profile["evictionPolicy"] == pool["eviction_policy"]
            assert profile["billingProfile"] == {"maxPrice": pool["max_price"]}
            assert profile["scheduledEventsProfile"] is None
        capacity = autoscale[pool["autoscale_name"]]["properties"]["profiles"][0]["capacity"]
        assert capacity == {
            "minimum": str(pool["min_count"]),
            "default": str(pool["default_count"]),
            "maximum": str(pool["max_count"]),
        }
        [module] = [n for n, p in d.module_parameters.items() if p.get("name") == vmss["name"]]
        document = base64.b64decode(d.module_parameters[module]["customData"]).decode()
        [entry] = [
            e for e in yaml.safe_load(document)["write_files"] if e["path"].endswith("deploy.json")
        ]
        values = render.decode_deploy_values(entry["content"])
        assert {k: values[k] for k in pool["deploy_values"]} == pool["deploy_values"], name
        assert values["WORKER_SCALE_SETS"] == "ray-cpu ray-gpu"
        assert values["WORKER_AUTOSCALE_NAME"] == "ray-cpu-autoscale ray-gpu-autoscale"


def test_a_nested_deployment_runs_in_its_own_resource_group_or_is_refused() -> None:
    """armeval deploys a module scoped to another group there (resourceGroup() and resourceId()
    answer there, its id is off that group), and refuses in one line a group it cannot name."""
    inner = {
        "resources": [],
        "outputs": {
            "group": {"type": "string", "value": "[resourceGroup().id]"},
            "id": {
                "type": "string",
                "value": "[resourceId('Microsoft.Storage/storageAccounts', 'a')]",
            },
        },
    }
    doc = {
        "parameters": {"group": {"type": "string"}},
        "resources": [
            {
                "type": "Microsoft.Resources/deployments",
                "apiVersion": "2022-09-01",
                "name": "m",
                "subscriptionId": "00000000-0000-4000-8000-000000000009",
                "resourceGroup": "[parameters('group')]",
                "properties": {
                    "expressionEvaluationOptions": {"scope": "inner"},
                    "mode": "Incremental",
                    "template": inner,
                },
            }
        ],
        "outputs": {
            "id": {
                "type": "string",
                "value": "[reference(extensionResourceId(format('/subscriptions/{0}/resourceGroups/"
                "{1}', '00000000-0000-4000-8000-000000000009', parameters('group')), "
                "'Microsoft.Resources/deployments', 'm'), '2022-09-01').outputs.id.value]",
            }
        },
    }
    d = deploy(doc, {"group": "rg-other"})
    group = "/subscriptions/00000000-0000-4000-8000-000000000009/resourceGroups/rg-other"
    assert d.module_groups["m"] == ("00000000-0000-4000-8000-000000000009", "rg-other")
    assert d.outputs["id"] == f"{group}/providers/Microsoft.Storage/storageAccounts/a"
    with pytest.raises(
        ArmError, match=r"^a nested deployment's resourceGroup 'a/b' is not a name$"
    ):
        deploy(doc, {"group": "a/b"})
