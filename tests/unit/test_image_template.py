"""The node image pipeline, infra/bicep/image/ (issue 20): its compiled template against Azure's
resource type definitions (the Compute Gallery, image definition and Image Builder types of
../shared/azure-types), its references, the base image table it shares with both cluster stacks,
and its customizer deployed with tests/armeval.py and then run by a real /bin/sh as Image
Builder's Packer runs the inline lines: the script that arrives is the file the template names,
and each install value reaches it exactly as given."""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest

from arm_template_support import problems, resource_errors, scopes
from armeval import deploy
from bicep_support import REPO, context, template
from checkov_support import checkov_binary, run_checkov

IMAGE = REPO / "infra" / "bicep" / "image"
IMAGE_TEMPLATE = IMAGE / "azuredeploy.json"
# The image customizer `python -m nodekit render` writes (tests/unit/test_install_phase.py proves it
# is the install phase of the nodes' bootstrap).
CUSTOMIZER = REPO / "cloud-init" / "rendered" / "install.sh"
INSTALL_VALUES = ("PIP_INDEX_URL", "TORCH_INDEX_URL", "APT_SOURCE", "EXTRA_PIP_PACKAGES",
                  "EXTRA_APT_PACKAGES")  # fmt: skip
# Azure Resource Manager's limit on one resource definition once expanded (Template limits,
# learn.microsoft.com/azure/azure-resource-manager/templates/best-practices): the image
# template carries the customizer inline, base64-encoded.
RESOURCE_LIMIT = 1024 * 1024
# Compute Gallery Artifacts Publisher, built in.
GALLERY_PUBLISHER = "85a2d0d9-2eba-4c9c-b355-11c2cc0788ab"


def image_template() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(IMAGE_TEMPLATE.read_text())
    return loaded


def by_type(resources: list[dict[str, Any]], rtype: str) -> dict[str, Any]:
    [found] = [r for r in resources if r["type"] == rtype]
    return found


def test_every_image_resource_is_valid_for_its_type_and_api_version(types: dict[str, Any]) -> None:
    doc = image_template()
    assert sorted(r["type"] for r in doc["resources"]) == [
        "Microsoft.Authorization/roleAssignments",
        "Microsoft.Compute/galleries",
        "Microsoft.Compute/galleries/images",
        "Microsoft.ManagedIdentity/userAssignedIdentities",
        "Microsoft.VirtualMachineImages/imageTemplates",
    ]
    errors, unchecked = resource_errors(doc, types)
    assert errors == []
    assert unchecked == set()  # every one checked property by property, none by name only


@pytest.mark.parametrize(
    ("edit", "reported"),
    [
        (lambda t: t["properties"]["customize"][0].update(type="Shel"), "'Shel' is none of"),
        (lambda t: t["properties"]["customize"][0].update(inline="echo"), "is not an array"),
        (lambda t: t["properties"]["distribute"][0].pop("galleryImageId"), "galleryImageId: req"),
        (lambda t: t["properties"]["source"].update(image="x"), "source.image: no such property"),
        (lambda t: t["properties"]["vmProfile"].update(osDiskSizeGB="64"), "is not an int"),
    ],
)
def test_a_wrong_image_template_property_is_found(
    types: dict[str, Any], edit: Any, reported: str
) -> None:
    """Image Builder's sources, customizers and distributors are discriminated objects: the
    checker follows the discriminator, so a wrong variant or a wrong property in one is seen."""
    doc = copy.deepcopy(image_template())
    edit(by_type(doc["resources"], "Microsoft.VirtualMachineImages/imageTemplates"))
    errors, _ = resource_errors(doc, types)
    assert any(reported in e for e in errors), errors


def test_every_image_reference_resolves() -> None:
    assert problems(image_template()) == []
    assert [name for name, _, _ in scopes(image_template())] == ["Ray node image"]


def test_the_base_image_table_is_one_table_in_three_places() -> None:
    """The image is built on the marketplace image the cluster stacks boot without it:
    infra/terraform/modules/cluster/locals.tf, infra/bicep/main.bicep and
    infra/bicep/image/main.bicep hold the same os image -> publisher/offer/sku table."""
    terraform: dict[str, Any] = {}
    for block in hcl2.load((REPO / "infra/terraform/modules/cluster/locals.tf").open())["locals"]:
        terraform.update(block)
    tf = {
        json.loads(os_image): {**{k: json.loads(x) for k, x in v.items()}, "version": "latest"}
        for os_image, v in terraform["os_images"].items()
    }
    cluster = template()["variables"]["osImages"]
    image = image_template()["variables"]["osImages"]
    assert tf == cluster == image
    assert set(image) == set(image_template()["parameters"]["osImage"]["allowedValues"])
    assert set(image) == set(template()["parameters"]["osImage"]["allowedValues"])


def deployed(parameters: dict[str, Any]) -> dict[str, dict[str, Any]]:
    d = deploy(image_template(), parameters, context())
    assert not d.refused, d.refused
    return {r["type"]: r for r in d.resources}


def test_the_definition_is_generalized_gen2_linux_and_trusted_launch_supported() -> None:
    resources = deployed({"osImage": "debian-12"})
    definition = resources["Microsoft.Compute/galleries/images"]["properties"]
    assert (definition["osType"], definition["osState"], definition["hyperVGeneration"]) == (
        "Linux",
        "Generalized",
        "V2",
    )
    # A Trusted Launch VM boots only from a definition that says so; TrustedLaunchSupported
    # serves standard VMs (what the stacks create) as well.
    assert {"name": "SecurityType", "value": "TrustedLaunchSupported"} in definition["features"]
    assert definition["identifier"]["sku"] == "debian-12"
    built = resources["Microsoft.VirtualMachineImages/imageTemplates"]["properties"]
    assert built["source"] == {
        "type": "PlatformImage",
        "publisher": "Debian",
        "offer": "debian-12",
        "sku": "12-gen2",
        "version": "latest",
    }
    [dist] = built["distribute"]
    gallery = resources["Microsoft.Compute/galleries"]["name"]
    assert dist["type"] == "SharedImage"
    assert dist["galleryImageId"].endswith(
        f"/providers/Microsoft.Compute/galleries/{gallery}/images/ray-node-debian-12"
    )
    assert [r["name"] for r in dist["targetRegions"]] == ["westeurope"]  # the deployment's


def test_the_builder_identity_gets_the_gallery_publisher_role_on_the_resource_group() -> None:
    resources = deployed({})
    role = resources["Microsoft.Authorization/roleAssignments"]
    assert "scope" not in role  # the deployment's resource group, the gallery's
    assert role["properties"]["roleDefinitionId"].endswith(
        f"/providers/Microsoft.Authorization/roleDefinitions/{GALLERY_PUBLISHER}"
    )
    built = resources["Microsoft.VirtualMachineImages/imageTemplates"]
    identity = resources["Microsoft.ManagedIdentity/userAssignedIdentities"]
    [assigned] = built["identity"]["userAssignedIdentities"]
    assert assigned.endswith(f"/userAssignedIdentities/{identity['name']}")
    # Image Builder checks the identity's rights when the template is created.
    raw = by_type(image_template()["resources"], "Microsoft.VirtualMachineImages/imageTemplates")
    assert any("roleAssignments" in d for d in raw["dependsOn"])


def customizer_lines(parameters: dict[str, Any]) -> list[str]:
    built = deployed(parameters)["Microsoft.VirtualMachineImages/imageTemplates"]
    [shell] = built["properties"]["customize"]
    assert shell["type"] == "Shell"
    lines: list[str] = shell["inline"]
    return lines


def test_the_customizer_is_the_named_script_inline() -> None:
    lines = customizer_lines({})
    [encoded] = re.findall(r"^printf %s '([A-Za-z0-9+/=]+)' \| base64 -d > ", lines[0])
    assert base64.b64decode(encoded) == CUSTOMIZER.read_bytes()
    # One resource definition may take 1 MB: the customizer leaves room for ten times itself.
    resource = json.dumps(deployed({})["Microsoft.VirtualMachineImages/imageTemplates"])
    assert len(resource) < RESOURCE_LIMIT / 10 + len(encoded), len(resource)


def test_the_customizer_runs_the_script_as_root_with_every_install_value(tmp_path: Path) -> None:
    """The inline lines, evaluated by armeval, run by a real /bin/sh -e as Packer runs them (as
    the build user; `sudo` here a stand-in that records it was asked and runs the command). The
    script that runs is a probe that writes its environment: each install value arrives exactly
    as given, quotes, spaces and dollar signs included."""
    values = {
        "pipIndexUrl": "https://user:t0k'en$HOME@pkgs.example.com/simple",
        "torchIndexUrl": "https://download.pytorch.org/whl/cu124",
        "aptSource": 'deb [trusted=yes] http://10.0.0.5/debian ./ "x"',
        "extraPipPackages": ["minigrid==3.0.0", "shimmy>=2"],
        "extraAptPackages": ["libglu1-mesa", "xvfb"],
    }
    lines = customizer_lines(values)
    script = tmp_path / "ray-node-install.sh"
    lines = [line.replace("/tmp/ray-node-install.sh", str(script)) for line in lines]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sudo = bin_dir / "sudo"
    sudo.write_text(f'#!/bin/sh\ntouch {tmp_path}/sudo-called\nexec "$@"\n')
    sudo.chmod(sudo.stat().st_mode | stat.S_IXUSR)
    # The same lines with a probe in place of the customizer (its base64 swapped).
    probe = "#!/bin/bash\nset -eu\n" + "".join(
        f'printf "%s\\0" "${name}" >> {tmp_path}/env\n' for name in INSTALL_VALUES
    )
    encoded = base64.b64encode(CUSTOMIZER.read_bytes()).decode()
    assert encoded in lines[0]
    lines[0] = lines[0].replace(encoded, base64.b64encode(probe.encode()).decode())
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    result = subprocess.run(
        ["/bin/sh", "-e", "-c", "\n".join(lines)], env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "sudo-called").exists()
    got = (tmp_path / "env").read_text().split("\0")[:-1]
    assert dict(zip(INSTALL_VALUES, got, strict=True)) == {
        "PIP_INDEX_URL": values["pipIndexUrl"],
        "TORCH_INDEX_URL": values["torchIndexUrl"],
        "APT_SOURCE": values["aptSource"],
        "EXTRA_PIP_PACKAGES": "minigrid==3.0.0 shimmy>=2",
        "EXTRA_APT_PACKAGES": "libglu1-mesa xvfb",
    }
    assert not script.exists()  # the last line removes it


def test_check_finds_a_stale_image_template(tmp_path: Path, monkeypatch: Any) -> None:
    """scripts/bicep_to_arm.py --check covers the image template too."""
    import bicep_to_arm

    stale = tmp_path / "azuredeploy.json"
    doc = image_template()
    doc["resources"][0]["apiVersion"] = "2023-07-03"
    stale.write_text(json.dumps(doc, indent=2) + "\n")
    fresh = tmp_path / "fresh.json"
    shutil.copy(IMAGE_TEMPLATE, fresh)
    monkeypatch.setattr(bicep_to_arm, "TARGETS", ((bicep_to_arm.IMAGE_MAIN, fresh),))
    assert bicep_to_arm.main(["--check"]) == 0
    monkeypatch.setattr(bicep_to_arm, "TARGETS", ((bicep_to_arm.IMAGE_MAIN, stale),))
    assert bicep_to_arm.main(["--check"]) == 1


def test_checkov_passes_the_image_template_and_its_bicep(tmp_path: Path) -> None:
    """The bicep framework reads infra/bicep/image/main.bicep (every resource, no parsing
    error, 0 failed: its one skip is the secure parameter's public default, with its reason);
    the arm framework on the compiled template where the workflow puts it fails nothing
    (checkov 3.3 has no ARM check for galleries, image definitions, identities, role
    assignments or image templates, so it reports no resource there at all)."""
    bicep = run_checkov(IMAGE, "bicep")
    assert bicep["summary"]["failed"] == 0, bicep["results"]["failed_checks"]
    assert bicep["summary"]["parsing_errors"] == 0
    assert bicep["summary"]["resource_count"] >= 5
    assert [c["check_id"] for c in bicep["results"]["skipped_checks"]] == ["CKV_AZURE_131"]
    compiled = tmp_path / "bicep-image"
    compiled.mkdir()
    shutil.copy(IMAGE_TEMPLATE, compiled / "azuredeploy.json")
    result = subprocess.run(
        [str(checkov_binary()), "--config-file", str(REPO / ".checkov.yaml"),
         "--directory", str(compiled), "--framework", "arm", "--output", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    summary = report.get("summary", report)  # an empty report is its summary alone
    assert (summary["failed"], summary["parsing_errors"]) == (0, 0), report
    assert '"checkov"' not in IMAGE_TEMPLATE.read_text()


@pytest.mark.parametrize("prefix,os_image", [("ray", "ubuntu-22.04"), ("rl-x2", "debian-12")])
def test_terraform_creates_the_gallery_and_definition_the_image_template_builds_into(
    prefix: str, os_image: str
) -> None:
    """create_image_gallery (infra/terraform/modules/cluster/image.tf) makes what
    infra/bicep/image/ declares, so the image template deployed into the cluster's resource
    group adds its versions there: names (evaluated by terraform console) and every property
    both set."""
    from stack_parity import _hcl, expand, terraform_blocks, terraform_console

    stack = REPO / "infra" / "terraform" / "modules" / "cluster"
    bodies = {t: b for t, _, b in terraform_blocks(stack, "resource") if "shared_image" in t}
    gallery, definition = bodies["azurerm_shared_image_gallery"], bodies["azurerm_shared_image"]
    given = {"var.name_prefix": prefix, "var.os_image": os_image}
    texts = [b[k] for b in (gallery, definition) for k in ("name", "description")]
    texts += [definition["identifier"][0][k] for k in ("publisher", "offer", "sku")]
    names = terraform_console([expand(_hcl(t), {}, given) for t in texts])
    arm = deployed({"namePrefix": prefix, "osImage": os_image})
    g, d = arm["Microsoft.Compute/galleries"], arm["Microsoft.Compute/galleries/images"]
    props = d["properties"]
    assert names == [
        g["name"],
        g["properties"]["description"],
        d["name"].split("/")[-1],
        props["description"],
        *props["identifier"].values(),
    ]
    unquote = {k: v.strip('"') if isinstance(v, str) else v for k, v in definition.items()}
    assert (unquote["os_type"], unquote["hyper_v_generation"], unquote["architecture"]) == (
        props["osType"],
        props["hyperVGeneration"],
        props["architecture"],
    )
    assert unquote["specialized"] is (props["osState"] == "Specialized")
    assert unquote["trusted_launch_supported"] is (
        {"name": "SecurityType", "value": "TrustedLaunchSupported"} in props["features"]
    )
