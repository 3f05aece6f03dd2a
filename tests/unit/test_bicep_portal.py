"""The portal's files next to the template: azuredeploy.parameters.json (only the required
values, and they deploy), createUiDefinition.json (each field's limits are the template's, its
outputs exactly template parameters; its patterns refuse what the template refuses and accept
what it accepts, on Terraform's own samples), metadata.json (the quickstarts' fields) and
bicepconfig.json (every suppression in the Bicep files names a rule and gives its reason)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from bicep_support import BICEP, MAIN, MODULES, check_results, deploy_template, template
from validation_cases import ED25519, RSA_4096

UI = BICEP / "createUiDefinition.json"


def ui() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(UI.read_text())
    return loaded


def elements() -> dict[str, dict[str, Any]]:
    params = ui()["parameters"]
    found = {e["name"]: e for e in params["basics"]}
    for step in params["steps"]:
        found.update({e["name"]: e for e in step["elements"]})
    return found


def required() -> set[str]:
    return {n for n, p in template()["parameters"].items() if "defaultValue" not in p}


def test_the_parameters_file_holds_exactly_the_required_values_and_they_deploy() -> None:
    doc = json.loads((BICEP / "azuredeploy.parameters.json").read_text())
    assert doc["$schema"].endswith("/deploymentParameters.json#")
    assert set(doc["parameters"]) == required()
    values = {k: v["value"] for k, v in doc["parameters"].items()}
    assert check_results(deploy_template(values)) == []


def test_ui_outputs_are_template_parameters_and_include_every_required_one() -> None:
    outputs = ui()["parameters"]["outputs"]
    assert set(outputs) <= set(template()["parameters"])
    assert required() | {"location"} <= set(outputs)
    assert ui()["handler"] == "Microsoft.Azure.CreateUIDef"


def test_each_ui_limit_and_default_is_the_template_s() -> None:
    params = template()["parameters"]
    sliders = {n: e for n, e in elements().items() if e["type"] == "Microsoft.Common.Slider"}
    gpu = {"gpuMinCount", "gpuDefaultCount", "gpuMaxCount"}
    mix = {"workerBaseRegularCount", "workerRegularPercentage"}
    assert set(sliders) == {"workerMinCount", "workerDefaultCount", "workerMaxCount"} | gpu | mix
    # Spot Priority Mix takes what a pool's priorityMix takes (the rule: 0-100 each), off first.
    assert [(sliders[n]["min"], sliders[n]["max"], sliders[n]["defaultValue"]) for n in mix] == [
        (0, 100, 0), (0, 100, 0)
    ]  # fmt: skip
    # The GPU pool's counts take what a pool's counts take (the workerPools rules: 0-100, the
    # most 1-100), and start in order.
    assert [(sliders[n]["min"], sliders[n]["max"]) for n in sorted(gpu)] == [
        (0, 100),
        (1, 100),
        (0, 100),
    ]
    assert sliders["gpuMinCount"]["defaultValue"] <= sliders["gpuDefaultCount"]["defaultValue"]
    assert sliders["gpuDefaultCount"]["defaultValue"] <= sliders["gpuMaxCount"]["defaultValue"]
    for name, e in {n: e for n, e in sliders.items() if n not in gpu | mix}.items():
        p = params[name]
        assert (e["min"], e["max"], e["defaultValue"]) == (
            p["minValue"], p["maxValue"], p["defaultValue"]
        ), name  # fmt: skip
    assert (
        elements()["workerSpotEnabled"]["defaultValue"]
        is params["workerSpotEnabled"]["defaultValue"]
    )
    for name in ("headVmSize", "workerVmSize"):
        assert elements()[name]["recommendedSizes"][0] == params[name]["defaultValue"]
    mode = elements()["scalingMode"]
    assert mode["defaultValue"] == params["scalingMode"]["defaultValue"]
    assert [v["value"] for v in mode["constraints"]["allowedValues"]] == (
        params["scalingMode"]["allowedValues"]
    )


def test_a_drifted_limit_would_be_seen() -> None:
    doc = template()
    assert elements()["workerMaxCount"]["max"] == doc["parameters"]["workerMaxCount"]["maxValue"]
    assert (
        elements()["workerMaxCount"]["max"] != doc["parameters"]["workerMaxCount"]["maxValue"] + 1
    )


def pattern(name: str) -> re.Pattern[str]:
    return re.compile(elements()[name]["constraints"]["regex"])


GOOD = {"allowedSshCidrs": ["203.0.113.7/32", "198.51.100.0/24, 192.0.2.0/28"]}
BAD = {"allowedSshCidrs": ["0.0.0.0/0", "203.0.113.7", "300.1.2.3/32", "1.2.3.4/33", "*",
                           "Internet", ""]}  # fmt: skip
KEYS_GOOD = [ED25519, RSA_4096]
KEYS_BAD = ["ssh-dss AAAAB3NzaC1kc3MAAACBAP", ED25519 + "\n" + ED25519, "", "AAAAC3Nza"]


@pytest.mark.parametrize("text", GOOD["allowedSshCidrs"])
def test_cidrs_the_form_accepts_deploy(text: str) -> None:
    assert pattern("allowedSshCidrs").match(text)
    cidrs = text.replace(" ", "").split(",")  # the form's output expression
    assert (
        check_results(deploy_template({"allowedSshCidrs": cidrs, "adminSshPublicKey": ED25519}))
        == []
    )


@pytest.mark.parametrize("text", BAD["allowedSshCidrs"])
def test_cidrs_the_form_refuses_the_template_refuses(text: str) -> None:
    assert not pattern("allowedSshCidrs").match(text)
    d = deploy_template({"allowedSshCidrs": text.replace(" ", "").split(","),
                         "adminSshPublicKey": ED25519})  # fmt: skip
    assert d.refused or check_results(d)


@pytest.mark.parametrize("key", KEYS_GOOD)
def test_keys_the_form_accepts_deploy(key: str) -> None:
    assert pattern("adminSshPublicKey").match(key)
    assert check_results(deploy_template({"allowedSshCidrs": ["203.0.113.7/32"],
                                          "adminSshPublicKey": key})) == []  # fmt: skip


@pytest.mark.parametrize("key", KEYS_BAD)
def test_keys_the_form_refuses_the_template_refuses(key: str) -> None:
    assert not pattern("adminSshPublicKey").match(key)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": key})
    assert d.refused or check_results(d)


def test_metadata_is_what_the_quickstarts_keep() -> None:
    doc = json.loads((BICEP / "metadata.json").read_text())
    assert doc["$schema"] == "https://aka.ms/azure-quickstart-templates-metadata-schema#"
    assert {"itemDisplayName", "description", "summary", "githubUsername", "dateUpdated",
            "type", "environments"} <= set(doc)  # fmt: skip
    assert len(doc["itemDisplayName"]) <= 60 and 10 <= len(doc["description"]) <= 1000
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", doc["dateUpdated"])


def test_bicepconfig_raises_the_rules_and_every_suppression_has_a_reason() -> None:
    config = json.loads((BICEP / "bicepconfig.json").read_text())
    rules = config["analyzers"]["core"]["rules"]
    errors = {n for n, r in rules.items() if r["level"] == "error"}
    assert {"secure-parameter-default", "outputs-should-not-contain-secrets", "no-unused-params",
            "no-unused-vars", "no-hardcoded-env-urls", "use-stable-vm-image",
            "no-unnecessary-dependson", "secure-secrets-in-params"} <= errors  # fmt: skip
    found = 0
    for path in [MAIN, *MODULES.glob("*.bicep"), BICEP / "image" / "main.bicep"]:
        for line in path.read_text().splitlines():
            m = re.search(r"#disable-next-line ([a-z-]+)(.*)$", line)
            if m:
                found += 1
                assert m[1] in rules, f"{path.name}: {m[1]} is not a configured rule"
                assert re.match(r"\s*//\s*\S.{30,}", m[2]), f"{path.name}: {m[1]} has no reason"
    assert found >= 1


# The node image field (issue 20): optional; what it accepts deploys and boots the nodes from
# that image, what it refuses the template refuses.
NODE_IMAGE = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-ray/providers/"
    "Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/1.0.3"
)
NODE_IMAGES_BAD = [
    NODE_IMAGE.rsplit("/versions/", 1)[0],  # the definition, no version
    NODE_IMAGE.replace("/1.0.3", "/latest"),
    "Canonical:ubuntu-24_04-lts:server:latest",  # a marketplace URN
    NODE_IMAGE.replace("galleries/ray_nodes/images", "images"),  # a managed image
    NODE_IMAGE + "/",
]


def test_the_node_image_field_is_optional_and_a_template_parameter() -> None:
    field = elements()["nodeImageId"]
    assert field["constraints"]["required"] is False
    assert field["defaultValue"] == template()["parameters"]["nodeImageId"]["defaultValue"] == ""
    assert ui()["parameters"]["outputs"]["nodeImageId"] == "[steps('vms').nodeImageId]"


@pytest.mark.parametrize("value", [NODE_IMAGE, ""])
def test_node_images_the_form_accepts_deploy(value: str) -> None:
    assert pattern("nodeImageId").match(value)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "nodeImageId": value})  # fmt: skip
    assert check_results(d) == []


@pytest.mark.parametrize("value", NODE_IMAGES_BAD)
def test_node_images_the_form_refuses_the_template_refuses(value: str) -> None:
    assert not pattern("nodeImageId").match(value)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "nodeImageId": value})  # fmt: skip
    assert d.refused or check_results(d)


def test_the_autostop_field_takes_exactly_what_the_template_takes() -> None:
    """A text box (a slider cannot leave out 1-9): its pattern admits 0 and 10-10080, the
    template's @minValue/@maxValue and its input rule; its default is the template's, and the
    form hands the template an int."""
    params = template()["parameters"]["autostopIdleMinutes"]
    field = elements()["autostopIdleMinutes"]
    assert field["defaultValue"] == str(params["defaultValue"]) == "60"
    accepted = {v for v in range(0, 20000) if pattern("autostopIdleMinutes").match(str(v))}
    assert accepted == {0} | set(range(10, params["maxValue"] + 1))
    assert params["minValue"] == 0
    for text in ("", "010", "5", "10081", "60.5", "-1", " 60"):
        assert not pattern("autostopIdleMinutes").match(text), text
    outputs = json.loads((BICEP / "createUiDefinition.json").read_text())["parameters"]["outputs"]
    assert outputs["autostopIdleMinutes"] == "[int(steps('workers').autostopIdleMinutes)]"
    for minutes in (0, 10, 10080):
        d = deploy_template(
            {
                "allowedSshCidrs": ["203.0.113.7/32"],
                "adminSshPublicKey": ED25519,
                "autostopIdleMinutes": minutes,
            }
        )
        assert not d.refused and check_results(d) == [], minutes
    d = deploy_template(
        {
            "allowedSshCidrs": ["203.0.113.7/32"],
            "adminSshPublicKey": ED25519,
            "autostopIdleMinutes": 9,
        }
    )
    assert any("autostopIdleMinutes must be 0" in r for r in d.refused), d.refused


# -- the GPU pool: the form's workerPools output, evaluated as the portal would ------------------
def ui_value(expression: str, steps: dict[str, dict[str, Any]]) -> Any:
    """A createUiDefinition output expression with the steps' values: the functions the form
    uses (if, parse, concat, string (JSON for an array), equals, steps, and, or, not, empty,
    coalesce, length, greater, replace, toLower, contains (of a string))."""
    from armeval import parse_expression

    def ev(node: Any) -> Any:
        if node[0] == "lit":
            return node[1]
        if node[0] == "prop":
            return ev(node[1])[node[2]]
        assert node[0] == "call", node
        name, args = node[1].lower(), node[2]
        if name == "if":
            return ev(args[1]) if ev(args[0]) else ev(args[2])
        values = [ev(a) for a in args]
        if name == "steps":
            return steps[values[0]]
        if name == "parse":
            return json.loads(values[0])
        if name == "concat":
            return "".join(values)
        if name == "string":
            return json.dumps(values[0]) if isinstance(values[0], list) else str(values[0])
        if name in ("and", "or"):
            return all(values) if name == "and" else any(values)
        if name == "not":
            return not values[0]
        if name == "empty":
            return not values[0]
        if name == "coalesce":
            return next((v for v in values if v is not None), None)
        if name == "length":
            return len(values[0])
        if name == "greater":
            return values[0] > values[1]
        if name == "equals":
            return values[0] == values[1]
        if name == "replace":
            return values[0].replace(values[1], values[2])
        if name == "tolower":
            return values[0].lower()
        if name == "contains":
            assert isinstance(values[0], str), "the form's contains() is of a string"
            return values[1] in values[0]
        raise AssertionError(f"{name}() is not a function the form's outputs use")

    return ev(parse_expression(expression))


GPU_STEP = {"gpuPoolEnabled": True, "gpuVmSize": "Standard_NC4as_T4_v3", "gpuMinCount": 0,
            "gpuDefaultCount": 1, "gpuMaxCount": 2, "gpuSpotEnabled": True, "gpuZones": None,
            "gpuZoneBalance": False}  # fmt: skip
WORKERS_STEP = {"workerZones": None, "workerZoneBalance": False, "workerSpotEnabled": False,
                "workerOrchestrationMode": "Flexible", "workerBaseRegularCount": 0,
                "workerRegularPercentage": 0, "workerMixSizes": "",
                "workerMixStrategy": "LowestPrice"}  # fmt: skip
"""The form's defaults. No zone chosen: the multi-select drop-down's value is left out (None),
or []. No Instance Mix: no more size."""


def test_zones_chosen_in_the_form_reach_each_pool_and_deploy_zonal_scale_sets() -> None:
    expression = ui()["parameters"]["outputs"]["workerPools"]
    for none in (None, []):
        steps = {"gpuPool": {**GPU_STEP, "gpuPoolEnabled": False},
                 "workers": {**WORKERS_STEP, "workerZones": none,
                             "workerZoneBalance": True}}  # fmt: skip
        assert ui_value(expression, steps) == []  # regional, as before zones
    steps = {
        "gpuPool": {**GPU_STEP, "gpuZones": ["2"], "gpuZoneBalance": True},  # one zone: no balance
        "workers": {**WORKERS_STEP, "workerZones": ["1", "2", "3"], "workerZoneBalance": True},
    }
    pools = ui_value(expression, steps)
    assert [(p["name"], p["zones"], p["zoneBalance"]) for p in pools] == [
        ("workers", ["1", "2", "3"], True), ("gpu", ["2"], False)
    ]  # fmt: skip
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "workerPools": pools})  # fmt: skip
    assert not d.refused and check_results(d) == []
    zonal = {
        r["name"]: (r["zones"], r["properties"]["zoneBalance"])
        for r in d.resources
        if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
    }
    assert zonal == {"ray-workers": (["1", "2", "3"], True), "ray-gpu": (["2"], None)}
    # The form offers exactly Azure's zone names, which the template's rule admits.
    for name in ("workerZones", "gpuZones"):
        field = elements()[name]
        assert field["multiselect"] is True and field["constraints"]["required"] is False
        assert [v["value"] for v in field["constraints"]["allowedValues"]] == ["1", "2", "3"]


def _scale_sets(pools: list[dict[str, Any]], **given: Any) -> dict[str, dict[str, Any]]:
    """The scale sets the template deploys with the form's workerPools (and ``given``)."""
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "workerPools": pools, **given})  # fmt: skip
    assert not d.refused and check_results(d) == []
    return {r["name"]: r for r in d.resources
            if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"}  # fmt: skip


def test_the_forms_default_scale_set_is_the_templates_flexible_and_uniform_is_pinned() -> None:
    """The form's default mode is the template's (Flexible): it hands no pool over and the
    template's default makes the scale set; Uniform is handed over as a pin, which the
    template keeps."""
    expression = ui()["parameters"]["outputs"]["workerPools"]
    gpu_off = {**GPU_STEP, "gpuPoolEnabled": False}
    mode = elements()["workerOrchestrationMode"]
    assert mode["defaultValue"] == WORKERS_STEP["workerOrchestrationMode"] == "Flexible"
    assert [v["value"] for v in mode["constraints"]["allowedValues"]] == ["Flexible", "Uniform"]
    pools = ui_value(expression, {"gpuPool": gpu_off, "workers": WORKERS_STEP})
    assert pools == []
    [vmss] = _scale_sets(pools).values()
    assert vmss["properties"]["orchestrationMode"] == mode["defaultValue"]
    # Uniform chosen: the pool "workers" pinned to it (the scale set of a cluster made before).
    uniform = {**WORKERS_STEP, "workerOrchestrationMode": "Uniform"}
    pools = ui_value(expression, {"gpuPool": gpu_off, "workers": uniform})
    assert pools == [
        {"name": "workers", "zones": [], "zoneBalance": False, "orchestrationMode": "Uniform"}
    ]
    assert _scale_sets(pools)["ray-workers"]["properties"]["orchestrationMode"] == "Uniform"
    # ... and the GPU pool next to it takes the template's default.
    pools = ui_value(expression, {"gpuPool": GPU_STEP, "workers": uniform})
    modes = {n: r["properties"]["orchestrationMode"] for n, r in _scale_sets(pools).items()}
    assert modes == {"ray-workers": "Uniform", "ray-gpu": "Flexible"}


def test_a_flexible_spot_pool_chosen_in_the_form_deploys_with_its_priority_mix() -> None:
    expression = ui()["parameters"]["outputs"]["workerPools"]
    gpu_off = {**GPU_STEP, "gpuPoolEnabled": False}
    # Spot workers with both sliders at 0: all Spot, no mix handed over.
    spot = {**WORKERS_STEP, "workerSpotEnabled": True}
    assert ui_value(expression, {"gpuPool": gpu_off, "workers": spot}) == []
    spot = {**spot, "workerBaseRegularCount": 2, "workerRegularPercentage": 25}
    pools = ui_value(expression, {"gpuPool": gpu_off, "workers": spot})
    assert pools == [
        {
            "name": "workers",
            "zones": [],
            "zoneBalance": False,
            "priorityMix": {"baseRegularCount": 2, "regularPercentageAboveBase": 25},
        }
    ]
    # Regular workers: no mix (Spot Priority Mix is for Spot pools), whatever the sliders say.
    regular = {**spot, "workerSpotEnabled": False}
    assert ui_value(expression, {"gpuPool": gpu_off, "workers": regular}) == []
    [vmss] = _scale_sets(pools, workerSpotEnabled=True).values()
    assert vmss["properties"]["orchestrationMode"] == "Flexible"
    assert vmss["properties"]["priorityMixPolicy"] == {
        "baseRegularPriorityCount": 2, "regularPriorityPercentageAboveBase": 25
    }  # fmt: skip
    # The sliders show only where the mix applies.
    for name in ("workerBaseRegularCount", "workerRegularPercentage"):
        assert "workerOrchestrationMode" in elements()[name]["visible"]


# -- Instance Mix: more worker sizes, the worker VM size first -------------------------------------
def mix_sizes_valid(text: str, worker_vm_size: str = "Standard_D4s_v5") -> bool:
    """The more-sizes field's own validations (the documented TextBox constraints.validations:
    a regex and an isValid expression), as the portal judges them."""
    steps = {"vms": {"workerVmSize": worker_vm_size},
             "workers": {**WORKERS_STEP, "workerMixSizes": text}}  # fmt: skip
    checks = elements()["workerMixSizes"]["constraints"]["validations"]
    return all(
        re.search(c["regex"], text) if "regex" in c else ui_value(c["isValid"], steps)
        for c in checks
    )


def test_without_more_sizes_the_form_hands_over_what_it_did_before() -> None:
    """No more size (the default, or only blanks), or Uniform whatever the hidden field holds:
    no pool is handed over for the mix and no pool has instanceMix; the other choices' outputs are
    the ones the tests above pin."""
    expression = ui()["parameters"]["outputs"]["workerPools"]
    gpu_off = {**GPU_STEP, "gpuPoolEnabled": False}
    vms = {"workerVmSize": "Standard_D4s_v5"}
    variants = [
        WORKERS_STEP,
        {**WORKERS_STEP, "workerZones": ["1", "2"], "workerZoneBalance": True},
        {**WORKERS_STEP, "workerSpotEnabled": True, "workerBaseRegularCount": 1},
        {**WORKERS_STEP, "workerOrchestrationMode": "Uniform"},
    ]
    for workers in variants:
        for gpu in (gpu_off, GPU_STEP):
            before = ui_value(expression, {"vms": vms, "gpuPool": gpu, "workers": workers})
            assert all("instanceMix" not in p for p in before)
            for blank in ("  ", None):
                mixed = {**workers, "workerMixSizes": blank}
                steps = {"vms": vms, "gpuPool": gpu, "workers": mixed}
                assert ui_value(expression, steps) == before
    assert ui_value(expression, {"vms": vms, "gpuPool": gpu_off, "workers": WORKERS_STEP}) == []
    uniform = {
        **WORKERS_STEP,
        "workerOrchestrationMode": "Uniform",
        "workerMixSizes": "Standard_D4as_v5",
        "workerMixStrategy": "CapacityOptimized",
    }
    assert ui_value(expression, {"vms": vms, "gpuPool": gpu_off, "workers": uniform}) == [
        {"name": "workers", "zones": [], "zoneBalance": False, "orchestrationMode": "Uniform"}
    ]  # fmt: skip
    # Uniform hides both fields (Azure has Instance Mix on Flexible scale sets only).
    flexible = {**uniform, "workerOrchestrationMode": "Flexible"}
    for name in ("workerMixSizes", "workerMixStrategy"):
        assert ui_value(elements()[name]["visible"], {"workers": uniform}) is False, name
        assert ui_value(elements()[name]["visible"], {"workers": flexible}) is True, name


def test_more_sizes_chosen_in_the_form_deploy_an_instance_mix_with_the_worker_size_first() -> None:
    expression = ui()["parameters"]["outputs"]["workerPools"]
    strategy = elements()["workerMixStrategy"]
    values = [v["value"] for v in strategy["constraints"]["allowedValues"]]
    assert values == ["LowestPrice", "CapacityOptimized"]
    assert strategy["defaultValue"] == WORKERS_STEP["workerMixStrategy"] == "LowestPrice"
    size = "Standard_D4s_v5"
    for text, allocation in ((" Standard_D4as_v5 ,Standard_D4ds_v5", "CapacityOptimized"),
                             ("Standard_D4as_v5", "LowestPrice")):  # fmt: skip
        assert mix_sizes_valid(text, size)
        workers = {**WORKERS_STEP, "workerSpotEnabled": True, "workerBaseRegularCount": 1,
                   "workerMixSizes": text, "workerMixStrategy": allocation}  # fmt: skip
        steps = {"vms": {"workerVmSize": size}, "gpuPool": GPU_STEP, "workers": workers}
        pools = ui_value(expression, steps)
        sizes = [size, *text.replace(" ", "").split(",")]
        assert pools[0] == {
            "name": "workers", "zones": [], "zoneBalance": False,
            "priorityMix": {"baseRegularCount": 1, "regularPercentageAboveBase": 0},
            "instanceMix": {"vmSizes": sizes, "allocationStrategy": allocation},
        }  # fmt: skip
        assert "instanceMix" not in pools[1]  # the GPU pool keeps its one size
        scale_sets = _scale_sets(pools, workerVmSize=size, workerSpotEnabled=True)
        vmss = scale_sets["ray-workers"]
        assert vmss["sku"]["name"] == "Mix"
        assert vmss["properties"]["skuProfile"] == {
            "vmSizes": [{"name": s} for s in sizes], "allocationStrategy": allocation
        }  # fmt: skip
        assert scale_sets["ray-gpu"]["properties"]["skuProfile"] is None


MIX_SIZES_BAD = [
    "Standard_A1, Standard_A2, Standard_A3, Standard_A4, Standard_A5",  # 6 sizes with the worker's
    "Standard_D4s_v5",  # the worker VM size itself: always in the mix
    "standard_d4S_V5, Standard_D4as_v5",  # ... in any case
    "Standard_D4as_v5,",
    "D4as_v5",
    "Standard_D4as_v5; Standard_D4ds_v5",
    '"Standard_D4as_v5"',
    "Standard_" + "a" * 40,  # over 48 characters
]


@pytest.mark.parametrize("text", MIX_SIZES_BAD)
def test_more_sizes_the_form_refuses_the_template_refuses(text: str) -> None:
    """What the field's validations refuse, handed over as the output expression would, the
    template refuses too."""
    size = "Standard_D4s_v5"
    assert not mix_sizes_valid(text, size)
    sizes = [size, *text.replace(" ", "").split(",")]
    pools = [{"name": "workers", "instanceMix": {"vmSizes": sizes}}]
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "workerVmSize": size, "workerPools": pools})  # fmt: skip
    assert d.refused or check_results(d)


def test_four_more_sizes_the_form_accepts_deploy() -> None:
    """The field takes up to four more sizes: five in all, Azure's most."""
    text = "Standard_D4as_v5, Standard_D4ds_v5, Standard_D4s_v4, Standard_D4_v5"
    assert mix_sizes_valid(text)
    steps = {"vms": {"workerVmSize": "Standard_D4s_v5"},
             "gpuPool": {**GPU_STEP, "gpuPoolEnabled": False},
             "workers": {**WORKERS_STEP, "workerMixSizes": text}}  # fmt: skip
    pools = ui_value(ui()["parameters"]["outputs"]["workerPools"], steps)
    assert len(pools[0]["instanceMix"]["vmSizes"]) == 5
    _scale_sets(pools, workerVmSize="Standard_D4s_v5")


def test_the_gpu_pool_field_adds_a_pool_next_to_the_cpu_workers_and_it_deploys() -> None:
    expression = ui()["parameters"]["outputs"]["workerPools"]
    off = {"gpuPool": {**GPU_STEP, "gpuPoolEnabled": False}, "workers": WORKERS_STEP}
    assert ui_value(expression, off) == []
    pools = ui_value(expression, {"gpuPool": GPU_STEP, "workers": WORKERS_STEP})
    assert pools == [
        {"name": "workers", "zones": [], "zoneBalance": False},
        {"name": "gpu", "vmSize": "Standard_NC4as_T4_v3", "minCount": 0, "defaultCount": 1,
         "maxCount": 2, "spotEnabled": True, "rayLabels": {"accelerator": "gpu"}, "zones": [],
         "zoneBalance": False},
    ]  # fmt: skip
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "workerPools": pools})  # fmt: skip
    assert not d.refused and check_results(d) == []
    scale_sets = {
        r["name"]: r
        for r in d.resources
        if r["type"] == "Microsoft.Compute/virtualMachineScaleSets"
    }
    assert set(scale_sets) == {"ray-workers", "ray-gpu"}
    gpu = scale_sets["ray-gpu"]
    assert gpu["sku"]["name"] == "Standard_NC4as_T4_v3" and gpu["sku"]["capacity"] == 1
    assert gpu["properties"]["virtualMachineProfile"]["priority"] == "Spot"
    # In scaling mode ray too: Ray's autoscaler has a node type per pool, and the head's
    # identity may change both scale sets.
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "workerPools": pools, "scalingMode": "ray"})  # fmt: skip
    assert not d.refused and check_results(d) == []
    vm_contributor = "/roleDefinitions/9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
    assert sorted(
        r["scope"].rsplit("/", 1)[-1]
        for r in d.resources
        if r["type"] == "Microsoft.Authorization/roleAssignments"
        and r["properties"]["roleDefinitionId"].endswith(vm_contributor)
    ) == ["ray-gpu", "ray-workers"]
    assert "gpuPoolInRayMode" not in elements()


RESULTS_ACCOUNT = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/"
    "Microsoft.Storage/storageAccounts/rayres0123456789abcdef01"
)
RESULTS_ACCOUNTS_BAD = [
    RESULTS_ACCOUNT + "/",
    RESULTS_ACCOUNT.replace("rayres0123456789abcdef01", "RayRes01"),  # upper case
    RESULTS_ACCOUNT.replace("rayres0123456789abcdef01", "ra"),  # too short
    RESULTS_ACCOUNT.replace("rayres0123456789abcdef01", "a" * 25),  # too long
    RESULTS_ACCOUNT.replace("Microsoft.Storage/storageAccounts", "Microsoft.KeyVault/vaults"),
    RESULTS_ACCOUNT + "/blobServices/default/containers/results",  # the container, not the account
    "rayres0123456789abcdef01",  # a name, not an id
]


def test_the_results_field_is_optional_and_a_template_parameter() -> None:
    field = elements()["resultsStorageAccountId"]
    assert field["constraints"]["required"] is False
    assert (
        field["defaultValue"]
        == template()["parameters"]["resultsStorageAccountId"]["defaultValue"]
        == ""
    )
    outputs = ui()["parameters"]["outputs"]
    assert outputs["resultsStorageAccountId"] == "[steps('results').resultsStorageAccountId]"


@pytest.mark.parametrize("value", [RESULTS_ACCOUNT, ""])
def test_results_accounts_the_form_accepts_deploy(value: str) -> None:
    assert pattern("resultsStorageAccountId").match(value)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "resultsStorageAccountId": value})  # fmt: skip
    assert check_results(d) == []


@pytest.mark.parametrize("value", RESULTS_ACCOUNTS_BAD)
def test_results_accounts_the_form_refuses_the_template_refuses(value: str) -> None:
    assert not pattern("resultsStorageAccountId").match(value)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "resultsStorageAccountId": value})  # fmt: skip
    assert d.refused or check_results(d)


# -- the head on Spot ------------------------------------------------------------------------------
HEAD_PRICES_GOOD = ["-1", "0.12", "0.000001", "1", "999.5", "1000"]
HEAD_PRICES_BAD = ["0", "0.0", "-0.5", "1000.5", "1001", ".5", "5.", "1e2", " 1", "-2", ""]


def test_the_head_priority_field_is_the_template_s_choice() -> None:
    params = template()["parameters"]
    field = elements()["headPriority"]
    values = [v["value"] for v in field["constraints"]["allowedValues"]]
    assert values == params["headPriority"]["allowedValues"] == ["Regular", "Spot"]
    assert field["defaultValue"] == params["headPriority"]["defaultValue"] == "Regular"
    assert elements()["headMaxPrice"]["defaultValue"] == params["headMaxPrice"]["defaultValue"]
    outputs = ui()["parameters"]["outputs"]
    # A regular head gets -1 whatever the hidden price box holds (the template refuses a price
    # for a regular head).
    for priority, box, sent in (("Regular", "0.5", "-1"), ("Spot", "0.5", "0.5")):
        steps = {"vms": {"headPriority": priority, "headMaxPrice": box}}
        assert ui_value(outputs["headMaxPrice"], steps) == sent
        assert ui_value(outputs["headPriority"], steps) == priority


@pytest.mark.parametrize("value", HEAD_PRICES_GOOD)
def test_head_prices_the_form_accepts_deploy(value: str) -> None:
    assert pattern("headMaxPrice").match(value)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "headPriority": "Spot", "headMaxPrice": value})  # fmt: skip
    assert not d.refused and check_results(d) == []


@pytest.mark.parametrize("value", HEAD_PRICES_BAD)
def test_head_prices_the_form_refuses_the_template_refuses(value: str) -> None:
    assert not pattern("headMaxPrice").match(value)
    d = deploy_template({"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519,
                         "headPriority": "Spot", "headMaxPrice": value})  # fmt: skip
    assert d.refused or check_results(d)
