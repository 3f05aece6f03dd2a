"""The Bicep stand-in compiler (scripts/bicep_to_arm.py) against the real one: every file of the
corpus in tests/fixtures/bicep-corpus/ (public Bicep files next to the template `bicep build`
made of them) either compiles to the same template (scripts/compare_arm.py, across Bicep
versions) or is refused in one line naming the file, the line and the construct; none differs
silently. And each miscompile the review found (issue 19, finding 9), one file at a time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from bicep_to_arm import DEPLOYMENTS_API, BicepError, Compiler
from compare_arm import differences, normal

from support import REPO

CORPUS = REPO / "tests" / "fixtures" / "bicep-corpus"
FIXTURES = sorted(p.parent for p in CORPUS.rglob("main.json"))
REFUSAL = re.compile(r"^(?P<file>\S+\.bicep):(?P<line>\d+): construct not supported: (?P<what>.+)$")
README_ROW = re.compile(
    r"\| Bicep stand-in compiler \| (?P<total>\d+) public Bicep files .*?: "
    r"(?P<equal>\d+) compile to the same template, (?P<refused>\d+) are refused"
)


def _deployments_api(doc: dict[str, Any]) -> str:
    """The module deployments' api-version the fixture's Bicep version wrote (0.34: 2022-09-01)."""
    resources = doc.get("resources", [])
    for resource in resources.values() if isinstance(resources, dict) else resources:
        if resource.get("type") == "Microsoft.Resources/deployments":
            return str(resource["apiVersion"])
    return DEPLOYMENTS_API


@cache
def outcome(folder: Path) -> tuple[str, str]:
    """("equal", "") | ("refused", the line) | ("differs", where)."""
    real = json.loads((folder / "main.json").read_text())
    try:
        compiled = Compiler(folder / "main.bicep", _deployments_api(real)).template()
    except BicepError as error:
        return "refused", str(error)
    found = differences(normal(compiled, across_versions=True), normal(real, across_versions=True))
    return ("differs", "\n".join(found[:5])) if found else ("equal", "")


def test_the_corpus_is_large_and_names_its_sources() -> None:
    assert len(FIXTURES) >= 100
    readme = (CORPUS / "README.md").read_text()
    for repo in ("Azure/bicep", "Azure/bicep-registry-modules"):
        assert re.search(rf"{re.escape(repo)}\b.*\b[0-9a-f]{{40}}\b", readme), repo
    for folder in FIXTURES:
        assert (folder / "main.bicep").is_file(), folder


@pytest.mark.parametrize("folder", FIXTURES, ids=lambda p: p.relative_to(CORPUS).as_posix())
def test_each_file_compiles_as_bicep_build_does_or_is_refused_in_one_line(folder: Path) -> None:
    kind, detail = outcome(folder)
    assert kind != "differs", f"a silent miscompile:\n{detail}"
    if kind == "refused":
        match = REFUSAL.match(detail)
        assert match and "\n" not in detail, detail
        assert Path(match["file"]).is_file() and int(match["line"]) >= 1, detail


def test_the_docs_state_the_corpus_counts() -> None:
    kinds = [outcome(folder)[0] for folder in FIXTURES]
    match = README_ROW.search((REPO / "docs" / "testing.md").read_text())
    assert match, "docs/testing.md's Bicep stand-in compiler row is missing"
    assert int(match["total"]) == len(kinds)
    assert int(match["equal"]) == kinds.count("equal")
    assert int(match["refused"]) == kinds.count("refused")
    # both outcomes occur: the corpus proves compilation, not only refusals
    assert kinds.count("equal") >= 50 and kinds.count("refused") >= 50


# -- the review's findings, one file each ----------------------------------------------------
def compile_text(tmp_path: Path, text: str, **files: str) -> dict[str, Any]:
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    (tmp_path / "main.bicep").write_text(text)
    return Compiler(tmp_path / "main.bicep").template()


def refusal(tmp_path: Path, text: str, **files: str) -> tuple[str, int, str]:
    with pytest.raises(BicepError) as caught:
        compile_text(tmp_path, text, **files)
    match = REFUSAL.match(str(caught.value))
    assert match, str(caught.value)
    return Path(match["file"]).name, int(match["line"]), match["what"]


def test_a_reference_only_in_the_name_is_a_dependency(tmp_path: Path) -> None:
    doc = compile_text(
        tmp_path,
        """param name string
resource sa 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: 'westeurope'
  kind: 'StorageV2'
  sku: { name: 'Standard_LRS' }
}
resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  name: '${sa.name}/default/logs'
}
""",
    )
    child = doc["resources"][1]
    assert child["dependsOn"] == [
        "[resourceId('Microsoft.Storage/storageAccounts', parameters('name'))]"
    ]


def test_a_child_named_with_slashes_gets_one_resource_id_argument_per_segment(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        """param vnet string
resource subnet 'Microsoft.Network/virtualNetworks/subnets@2024-07-01' = {
  name: '${vnet}/default'
  properties: { addressPrefix: '10.0.0.0/24' }
}
output id string = subnet.id
""",
    )
    name = "format('{0}/default', parameters('vnet'))"
    assert doc["outputs"]["id"]["value"] == (
        f"[resourceId('Microsoft.Network/virtualNetworks/subnets', split({name}, '/')[0], "
        f"split({name}, '/')[1])]"
    )


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("param a string\ntargetScope = 'subscription'\n", 2, "targetScope other than"),
        (
            "module m 'm.bicep' = {\n  name: 'm'\n  scope: subscription('other')\n}\n",
            1,
            "a scope other than resourceGroup(rg) or resourceGroup(sub, rg)",
        ),
        (
            "module m 'm.bicep' = [for i in range(0, 2): {\n  name: 'm${i}'\n"
            "  scope: resourceGroup('other')\n}]\n",
            1,
            "a module collection with a scope",
        ),
        ("param p object\nvar v = any(p.x)\noutput o object = v\n", 2, "the function any()"),
        (
            "@description('d')\nresource r 'Microsoft.Network/virtualNetworks@2024-07-01' = {\n"
            "  name: 'v'\n}\n",
            2,
            "the decorator @description on a resource",
        ),
        (
            "resource r 'Microsoft.Network/virtualNetworks@2024-07-01' = {\n  name: 'v'\n"
            "  properties: {\n    subnets: [for i in range(0, 2): { name: 's${i}' }]\n  }\n}\n",
            1,
            "a for expression",
        ),
        (
            "param p bool\nresource r 'Microsoft.Network/virtualNetworks@2024-07-01' existing ="
            " if (p) {\n  name: 'v'\n}\n",
            2,
            "an existing resource with a condition or a loop",
        ),
        (
            "resource r 'Microsoft.Network/virtualNetworks@2024-07-01' existing = {\n"
            "  name: 'v'\n  location: 'x'\n}\n",
            1,
            "the resource property 'location'",
        ),
        (
            "resource v 'Microsoft.Network/virtualNetworks@2024-07-01' = {\n  name: 'v'\n}\n"
            "resource s 'Microsoft.Network/virtualNetworks/subnets@2024-07-01' existing = {\n"
            "  parent: v\n  name: 's'\n}\n",
            4,
            "an existing resource whose parent is deployed here",
        ),
        (
            "resource v 'Microsoft.Network/virtualNetworks@2024-07-01' existing = {\n"
            "  name: 'v'\n  scope: resourceGroup('other')\n}\n"
            "resource l 'Microsoft.Authorization/locks@2020-05-01' = {\n"
            "  name: 'l'\n  scope: v\n  properties: { level: 'CanNotDelete' }\n}\n",
            5,
            "scope: a resource in another resource group",
        ),
        ("param a string\nvar b = a =~ 'x'\noutput c bool = b\n", 2, "the =~ operator"),
        (
            "module m 'm.bicep' = {\n  name: 'm'\n  params: 'x'\n}\n",
            1,
            "module params that are not an object literal",
        ),
        ("var s = 'never closed\n", 1, "newline in a string"),
        ("var s = '''never closed\n", 1, "an unterminated string"),
    ],
)
def test_what_it_cannot_compile_exactly_is_refused_with_file_line_and_construct(
    tmp_path: Path, text: str, line: int, what: str
) -> None:
    name, found_line, found_what = refusal(tmp_path, text, **{"m.bicep": "param x string\n"})
    assert (name, found_line) == ("main.bicep", line)
    assert found_what.startswith(what), found_what


def test_a_refusal_inside_a_module_names_the_module_file(tmp_path: Path) -> None:
    name, line, what = refusal(
        tmp_path,
        "module m 'm.bicep' = {\n  name: 'm'\n}\n",
        **{"m.bicep": "param x string\n\nvar y = any(x)\n"},
    )
    assert (name, line, what) == ("m.bicep", 3, "the function any()")


def test_the_command_line_refuses_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    source = tmp_path / "main.bicep"
    source.write_text("param p object\nvar v = any(p)\noutput o object = v\n")
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bicep_to_arm.py"), str(source)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"{source}:2: construct not supported: the function any()\n"


def test_the_committed_template_is_what_the_compiler_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bicep_to_arm.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- loops: each form against the shape bicep build writes (languageVersion 1.0) --------------
# The shapes are those of the corpus files with loops (bicep/201/vm-copy-managed-disks,
# key-vault-secret-create, 301/log-analytics-with-datasources-solutions, 000/20-array-loop)
# and of Bicep's own loop baselines (Azure/bicep src/Bicep.Core.Samples/Files/baselines/
# Loops_LF and LoopsIndexed_LF at the corpus commit: module collections, @batchSize, filtered
# loops, indexed references and collection dependencies).
WORKERS = "param name string\nparam count int\noutput vmss string = '${name}-vmss'\n"
VNET = "Microsoft.Network/virtualNetworks"


def test_a_resource_loop_over_an_array_is_a_copy_loop_with_the_item_at_copy_index(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        f"""param names array
resource vnets '{VNET}@2024-07-01' = [for n in names: {{
  name: n
  location: 'westeurope'
}}]
""",
    )
    assert doc["resources"] == [
        {
            "copy": {"name": "vnets", "count": "[length(parameters('names'))]"},
            "type": VNET,
            "apiVersion": "2024-07-01",
            "name": "[parameters('names')[copyIndex()]]",
            "location": "westeurope",
        }
    ]


def test_the_index_of_a_loop_is_copy_index(tmp_path: Path) -> None:
    doc = compile_text(
        tmp_path,
        f"param names array\nresource vnets '{VNET}@2024-07-01' = [for (n, i) in names: {{\n"
        "  name: '${n}-${i}'\n}]\n",
    )
    assert doc["resources"][0]["name"] == (
        "[format('{0}-{1}', parameters('names')[copyIndex()], copyIndex())]"
    )


def test_a_range_loop_counts_the_range_and_its_item_is_the_range_at_copy_index(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        f"param count int\nresource vnets '{VNET}@2024-07-01' = [for i in range(0, count): {{\n"
        "  name: 'vnet${i + 1}'\n}]\n",
    )
    res = doc["resources"][0]
    assert res["copy"] == {"name": "vnets", "count": "[length(range(0, parameters('count')))]"}
    assert res["name"] == "[format('vnet{0}', add(range(0, parameters('count'))[copyIndex()], 1))]"


def test_a_filtered_loop_has_a_condition_and_batch_size_makes_it_serial(tmp_path: Path) -> None:
    doc = compile_text(
        tmp_path,
        f"""param accounts array
@batchSize(2)
resource zones '{VNET}@2024-07-01' = [for (a, i) in accounts: if (a.enabled) {{
  name: 'zone-${{a.name}}-${{i}}'
}}]
@sys.batchSize(1)
module pool 'workers.bicep' = [for i in range(0, 6): if (i % 2 == 0) {{
  name: 'pool${{i}}'
}}]
""",
        **{"workers.bicep": WORKERS},
    )
    zones, pool = doc["resources"]
    assert zones["copy"] == {
        "name": "zones",
        "count": "[length(parameters('accounts'))]",
        "mode": "serial",
        "batchSize": 2,
    }
    assert zones["condition"] == "[parameters('accounts')[copyIndex()].enabled]"
    assert zones["name"] == (
        "[format('zone-{0}-{1}', parameters('accounts')[copyIndex()].name, copyIndex())]"
    )
    assert pool["copy"] == {
        "name": "pool",
        "count": "[length(range(0, 6))]",
        "mode": "serial",
        "batchSize": 1,
    }
    assert pool["condition"] == "[equals(mod(range(0, 6)[copyIndex()], 2), 0)]"


def test_a_module_loop_passes_its_item_to_the_module_and_is_named_by_index(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        """param pools array
module pool 'workers.bicep' = [for p in pools: {
  name: 'pool-${p.name}'
  params: {
    name: p.name
    count: p.count
  }
}]
output first string = pool[0].outputs.vmss
output all array = [for (p, i) in pools: pool[i].outputs.vmss]
""",
        **{"workers.bicep": WORKERS},
    )
    (pool,) = doc["resources"]
    assert pool["copy"] == {"name": "pool", "count": "[length(parameters('pools'))]"}
    assert pool["name"] == "[format('pool-{0}', parameters('pools')[copyIndex()].name)]"
    assert pool["properties"]["parameters"] == {
        "name": {"value": "[parameters('pools')[copyIndex()].name]"},
        "count": {"value": "[parameters('pools')[copyIndex()].count]"},
    }
    assert pool["properties"]["template"]["outputs"]["vmss"]["type"] == "string"

    def deployment(index: str) -> str:
        name = f"format('pool-{{0}}', parameters('pools')[{index}].name)"
        return (
            f"reference(resourceId('Microsoft.Resources/deployments', {name}), '{DEPLOYMENTS_API}')"
        )

    assert doc["outputs"]["first"] == {
        "type": "string",
        "value": f"[{deployment('0')}.outputs.vmss.value]",
    }
    assert doc["outputs"]["all"] == {
        "type": "array",
        "copy": {
            "count": "[length(parameters('pools'))]",
            "input": f"[{deployment('copyIndex()')}.outputs.vmss.value]",
        },
    }


def test_a_collection_in_depends_on_is_its_loop_name_and_one_item_is_its_resource_id(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        f"""param names array
resource vnets '{VNET}@2024-07-01' = [for n in names: {{
  name: n
}}]
resource paired 'Microsoft.Network/networkSecurityGroups@2024-07-01' = [for (n, i) in names: {{
  name: 'nsg-${{n}}'
  tags: {{ vnet: vnets[i].id }}
}}]
resource whole 'Microsoft.Network/networkSecurityGroups@2024-07-01' = {{
  name: 'whole'
  tags: {{ first: vnets[0].id }}
  dependsOn: [vnets]
}}
resource second 'Microsoft.Network/networkSecurityGroups@2024-07-01' = [for (n, i) in names: {{
  name: 'second-${{n}}'
  dependsOn: [paired[i]]
}}]
module pool 'workers.bicep' = [for n in names: {{
  name: n
  params: {{ name: vnets[1].name }}
  dependsOn: [paired]
}}]
""",
        **{"workers.bicep": WORKERS},
    )
    _, paired, whole, second, pool = doc["resources"]
    assert second["dependsOn"] == [
        "[resourceId('Microsoft.Network/networkSecurityGroups', "
        "format('nsg-{0}', parameters('names')[copyIndex()]))]"
    ]
    assert paired["dependsOn"] == [
        f"[resourceId('{VNET}', parameters('names')[copyIndex()])]",
    ]
    assert paired["tags"]["vnet"] == paired["dependsOn"][0]
    # named whole and by index: the whole collection only
    assert whole["dependsOn"] == ["vnets"]
    assert whole["tags"]["first"] == f"[resourceId('{VNET}', parameters('names')[0])]"
    assert pool["dependsOn"] == ["paired", f"[resourceId('{VNET}', parameters('names')[1])]"]
    assert pool["properties"]["parameters"]["name"] == {"value": "[parameters('names')[1]]"}


def test_a_variable_for_expression_names_its_copy_index(tmp_path: Path) -> None:
    doc = compile_text(
        tmp_path,
        "param names array\nvar v = [for (n, i) in names: { n: n, i: i }]\noutput o array = v\n",
    )
    assert doc["variables"]["copy"] == [
        {
            "name": "v",
            "count": "[length(parameters('names'))]",
            "input": {
                "n": "[parameters('names')[copyIndex('v')]]",
                "i": "[copyIndex('v')]",
            },
        }
    ]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (  # bicep build lists each indexed reference, in an order of a hash set's
            "param names array\n"
            f"resource vnets '{VNET}@2024-07-01' = [for n in names: {{\n  name: n\n}}]\n"
            "resource r 'Microsoft.Network/networkSecurityGroups@2024-07-01' = {\n"
            "  name: 'r'\n  tags: { a: vnets[0].id, b: vnets[1].id }\n}\n",
            "the collection vnets named by different indices",
        ),
        (
            "param names array\n"
            f"resource vnets '{VNET}@2024-07-01' = [for n in names: {{\n  name: n\n}}]\n"
            "output o string = vnets.id\n",
            "the resource collection vnets without an index",
        ),
        (
            "param names array\n"
            f"resource vnets '{VNET}@2024-07-01' = [for n in names: {{\n  name: n\n}}]\n"
            f"resource subnets '{VNET}/subnets@2024-07-01' = {{\n"
            "  parent: vnets\n  name: 's'\n}\n",
            "a parent that is a resource collection",
        ),
        (
            "var names = ['a']\n"
            f"resource vnets '{VNET}@2024-07-01' = [for names in ['b']: {{\n  name: names\n}}]\n",
            "the loop variable names named as a symbol",
        ),
        (
            "param names array\nvar v = [for n in names: if (n != 'x') n]\noutput o array = v\n",
            "a condition in a for-expression",
        ),
        (  # a dependsOn cannot name the item a lambda's (or for-expression's) variable picks
            "param names array\n"
            f"resource vnets '{VNET}@2024-07-01' = [for n in names: {{\n  name: n\n}}]\n"
            "resource r 'Microsoft.Network/networkSecurityGroups@2024-07-01' = {\n"
            "  name: 'r'\n  tags: { ids: map(range(0, 2), i => vnets[i].id) }\n}\n",
            "the collection vnets named by index inside a lambda or for-expression",
        ),
        (
            f"@batchSize(2)\nresource vnet '{VNET}@2024-07-01' = {{\n  name: 'v'\n}}\n",
            "the decorator @batchSize on a resource",
        ),
        (
            "param n int\n"
            f"@batchSize(n)\nresource vnets '{VNET}@2024-07-01' = [for i in range(0, 2): {{\n"
            "  name: 'v${i}'\n}]\n",
            "@batchSize without one integer literal",
        ),
        (
            "module m 'workers.bicep' = {\n  name: 'm'\n}\n"
            f"resource vnets '{VNET}@2024-07-01' = [for n in m.outputs.names: {{\n"
            "  name: n\n}]\n",
            "a loop over an array that reads a resource or module",
        ),
    ],
)
def test_loops_it_cannot_compile_exactly_are_refused(tmp_path: Path, text: str, what: str) -> None:
    _, _, found = refusal(tmp_path, text, **{"workers.bicep": WORKERS})
    assert found.startswith(what), found


def test_a_scope_on_an_extension_resource_is_refused_and_its_id_hangs_off_its_scope(
    tmp_path: Path,
) -> None:
    lock = (
        f"resource vnet '{VNET}@2024-07-01' = {{\n  name: 'v'\n}}\n"
        "resource lock 'Microsoft.Authorization/locks@2020-05-01' = {\n"
        "  name: 'l'\n  scope: vnet\n  properties: { level: 'CanNotDelete' }\n}\n"
    )
    doc = compile_text(tmp_path, lock + "output id string = lock.id\n")
    assert doc["outputs"]["id"]["value"] == (
        f"[extensionResourceId(resourceId('{VNET}', 'v'), 'Microsoft.Authorization/locks', 'l')]"
    )
    _, _, what = refusal(
        tmp_path,
        lock + "resource lock2 'Microsoft.Authorization/locks@2020-05-01' = {\n"
        "  name: 'l2'\n  scope: lock\n}\n",
    )
    assert what.startswith("scope: an extension resource"), what


# The shapes of module scope and `existing` are the real compiler's: a module with
# `scope: resourceGroup(rg)` as corpus bicep/201/wvd-create-hostpool's main.json (its
# "resourceGroup" and the extensionResourceId of its dependsOn), `resourceGroup(sub, rg)` as the
# Bicep repository's baselines/ModulesWithScopes_LF ("subscriptionId" after "name") and corpus
# bicep/101/template-spec-deploy (an existing resource in another group), and a role assignment
# on an existing container as AVM's storage-account/blob-service/container main.json.
CONTAINERS = "Microsoft.Storage/storageAccounts/blobServices/containers"


def test_a_module_in_another_resource_group_is_a_deployment_with_its_group(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        "param id string\n"
        "module m 'm.bicep' = {\n  name: 'm'\n"
        "  scope: resourceGroup(split(id, '/')[2], split(id, '/')[4])\n}\n"
        "module n 'm.bicep' = {\n  name: 'n'\n  scope: resourceGroup('other')\n"
        "  params: { x: m.outputs.o }\n}\n"
        "output o string = n.outputs.o\n",
        **{"m.bicep": "param x string = ''\noutput o string = x\n"},
    )
    m, n = doc["resources"]
    assert list(m)[:5] == ["type", "apiVersion", "name", "subscriptionId", "resourceGroup"]
    assert m["subscriptionId"] == "[split(parameters('id'), '/')[2]]"
    assert m["resourceGroup"] == "[split(parameters('id'), '/')[4]]"
    assert "subscriptionId" not in n and n["resourceGroup"] == "other"
    m_id = (
        "extensionResourceId(format('/subscriptions/{0}/resourceGroups/{1}', "
        "split(parameters('id'), '/')[2], split(parameters('id'), '/')[4]), "
        "'Microsoft.Resources/deployments', 'm')"
    )
    assert n["dependsOn"] == [f"[{m_id}]"]
    assert n["properties"]["parameters"]["x"]["value"] == (
        f"[reference({m_id}, '{DEPLOYMENTS_API}').outputs.o.value]"
    )
    assert doc["outputs"]["o"]["value"] == (
        "[reference(extensionResourceId(format('/subscriptions/{0}/resourceGroups/{1}', "
        "subscription().subscriptionId, 'other'), 'Microsoft.Resources/deployments', 'n'), "
        f"'{DEPLOYMENTS_API}').outputs.o.value]"
    )


def test_an_existing_resource_is_not_emitted_and_what_names_it_gets_its_id(
    tmp_path: Path,
) -> None:
    doc = compile_text(
        tmp_path,
        "param account string\nparam principal string\n"
        "resource a 'Microsoft.Storage/storageAccounts@2024-01-01' existing = {\n"
        "  name: account\n}\n"
        "resource b 'Microsoft.Storage/storageAccounts/blobServices@2024-01-01' existing = {\n"
        "  parent: a\n  name: 'default'\n}\n"
        f"resource c '{CONTAINERS}@2024-01-01' existing = {{\n"
        "  parent: b\n  name: 'results'\n}\n"
        "resource r 'Microsoft.Authorization/roleAssignments@2022-04-01' = {\n"
        "  name: guid(c.id, principal)\n  scope: c\n"
        "  properties: { principalId: principal, roleDefinitionId: 'x' }\n}\n"
        "resource g 'Microsoft.Storage/storageAccounts@2024-01-01' existing = {\n"
        "  name: 'g'\n  scope: resourceGroup('s', 'other')\n}\n"
        "output name string = c.name\noutput g string = g.id\n",
    )
    (r,) = doc["resources"]
    assert r["scope"] == (
        "[format('Microsoft.Storage/storageAccounts/{0}/blobServices/{1}/containers/{2}', "
        "parameters('account'), 'default', 'results')]"
    )
    assert r["name"] == (
        f"[guid(resourceId('{CONTAINERS}', parameters('account'), 'default', 'results'), "
        "parameters('principal'))]"
    )
    assert "dependsOn" not in r
    assert doc["outputs"]["name"]["value"] == "results"
    assert doc["outputs"]["g"]["value"] == (
        "[extensionResourceId(format('/subscriptions/{0}/resourceGroups/{1}', 's', 'other'), "
        "'Microsoft.Storage/storageAccounts', 'g')]"
    )


def test_a_literal_is_escaped_only_where_arm_would_read_an_expression(tmp_path: Path) -> None:
    doc = compile_text(
        tmp_path,
        "var a = '[1, 2]'\nvar b = '''\n[\n  1\n]\n'''\noutput o array = [a, b]\n",
    )
    assert doc["variables"] == {"a": "[[1, 2]", "b": "[\n  1\n]\n"}


def test_a_variable_calling_a_runtime_function_is_inlined(tmp_path: Path) -> None:
    doc = compile_text(
        tmp_path,
        "resource sa 'Microsoft.Storage/storageAccounts@2023-05-01' = {\n  name: 'sa'\n}\n"
        "var key = listKeys(sa.id, '2023-05-01').keys[0].value\n"
        "var state = reference(sa.id, '2023-05-01').provisioningState\n"
        "output key string = key\noutput state string = state\n",
    )
    assert "variables" not in doc
    sa = "resourceId('Microsoft.Storage/storageAccounts', 'sa')"
    assert doc["outputs"]["key"]["value"] == f"[listKeys({sa}, '2023-05-01').keys[0].value]"
    assert doc["outputs"]["state"]["value"] == (
        f"[reference({sa}, '2023-05-01').provisioningState]"
    )


def test_crlf_multiline_strings_a_byte_order_mark_and_surrogate_escapes(tmp_path: Path) -> None:
    source = tmp_path / "main.bicep"
    source.write_bytes(
        b"\xef\xbb\xbfvar text = '''\r\na\r\nb\r\n'''\r\nvar pair = '\\u{D801}\\u{DC37}'\r\n"
        b"output o array = [text, pair]\r\n"
    )
    doc = Compiler(source).template()
    assert doc["variables"] == {"text": "a\r\nb\r\n", "pair": "\U00010437"}
    source.write_bytes(b"var lone = '\\u{D801}'\n")
    with pytest.raises(BicepError, match="a lone surrogate escape"):
        Compiler(source).template()


def test_load_text_content_of_a_missing_or_crlf_file_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    text = "var t = loadTextContent('t.txt')\noutput o string = t\n"
    assert refusal(tmp_path, text)[1:] == (
        1,
        "loadTextContent() of a file that cannot be read (No such file or directory)",
    )
    (tmp_path / "t.txt").write_bytes(b"a\r\nb\r\n")
    assert refusal(tmp_path, text)[2] == "loadTextContent() of a file with carriage returns"
    (tmp_path / "t.txt").write_bytes(b"a\nb\n")
    assert compile_text(tmp_path, text)["variables"] == {"t": "a\nb\n"}


def test_each_indexed_reference_is_one_depends_on_entry_as_bicep_build_lists_them(
    tmp_path: Path,
) -> None:
    """Bicep keeps a dependency per indexed reference in the source (Loops_LF's
    indexedResourceCollectionDependency has two alike), a variable's once."""
    doc = compile_text(
        tmp_path,
        f"""param names array
resource vnets '{VNET}@2024-07-01' = [for n in names: {{
  name: n
}}]
var first = vnets[0].id
resource twice 'Microsoft.Network/networkSecurityGroups@2024-07-01' = {{
  name: 'twice'
  tags: {{ a: vnets[0].id, b: vnets[0].id }}
}}
resource viaVariable 'Microsoft.Network/networkSecurityGroups@2024-07-01' = {{
  name: 'via'
  tags: {{ a: first, b: first }}
}}
""",
    )
    entry = f"[resourceId('{VNET}', parameters('names')[0])]"
    _, twice, via = doc["resources"]
    assert twice["dependsOn"] == [entry, entry]
    assert via["dependsOn"] == [entry]
