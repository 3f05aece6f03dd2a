"""Finding the cluster: --head, real `terraform output -json`, an ARM deployment read from a fake
Resource Manager (tests/fakes/fake_arm.py, real azure SDK and credential chain), the saved
profile, local Ray — in that order, first match wins."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.address import HeadAddress
from driver.discovery import from_arm, from_terraform
from driver.errors import DriverError
from fakes.fake_arm import FakeAzure
from headhost import HeadHost, driver_env
from support import FIXTURES, error_lines, run_driver

AZURE_CREDENTIAL_ENV = (
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_USERNAME",
    "AZURE_PASSWORD",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "MSI_ENDPOINT",
    "MSI_SECRET",
    "IMDS_ENDPOINT",
    "IDENTITY_SERVER_THUMBPRINT",
    "AZURE_SUBSCRIPTION_ID",
)

PROVIDER_FREE_CONFIG = """
# Only Terraform's built-in pieces: no provider to download.
variable "head_ip" {
  type = string
}

resource "terraform_data" "head" {
  input = var.head_ip
}

output "head_public_ip" {
  value = terraform_data.head.output
}

output "admin_username" {
  value = "root"
}

output "head_private_ip" {
  value = "10.0.1.4"
}

output "ssh_command" {
  value = "ssh root@${terraform_data.head.output}"
}
"""


# -- Terraform ---------------------------------------------------------------------------------
def _terraform(folder: Path, *args: str) -> None:
    subprocess.run(
        ["terraform", *args, "-no-color", "-input=false"],
        cwd=folder,
        check=True,
        capture_output=True,
        env={**os.environ, "CHECKPOINT_DISABLE": "1"},
        timeout=120,
    )


@pytest.fixture(scope="module")
def applied_terraform(
    tmp_path_factory: pytest.TempPathFactory, head_host: HeadHost
) -> Iterator[Path]:
    """A provider-free configuration applied for real; its outputs name the test head."""
    folder = tmp_path_factory.mktemp("terraform")
    (folder / "main.tf").write_text(PROVIDER_FREE_CONFIG)
    _terraform(folder, "init")
    _terraform(folder, "apply", "-auto-approve", f"-var=head_ip={head_host.ip}")
    yield folder


def test_terraform_outputs_name_the_head(applied_terraform: Path, head_host: HeadHost) -> None:
    assert from_terraform(applied_terraform) == HeadAddress(head_host.ip, 22, "root")


def test_terraform_dir_reaches_the_cluster(
    applied_terraform: Path, head_host: HeadHost, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    r = run_driver(
        "submit",
        "--no-wait",
        "--terraform-dir",
        str(applied_terraform),
        "-i",
        str(head_host.user_key),
        "--submission-id",
        "tf-discovered-1",
        str(FIXTURES / "jobs" / "succeed.py"),
        home=home,
        env=driver_env(home),
    )
    assert r.returncode == 0, r.stderr
    assert f"to the head {head_host.target} (Terraform outputs in {applied_terraform})" in r.stderr
    hint = f"--terraform-dir {applied_terraform} -i {head_host.user_key}"
    assert f"python -m driver job status tf-discovered-1 {hint}" in r.stderr
    # `use` remembers the folder (absolute), not the address: a redeploy is found next time.
    r = run_driver(
        "use", "--terraform-dir", str(applied_terraform), home=home, env=driver_env(home)
    )
    assert r.returncode == 0, r.stderr
    saved = json.loads((home / "profile.json").read_text())
    assert saved == {"terraform_dir": str(applied_terraform.resolve())}
    r = run_driver("list", "-i", str(head_host.user_key), home=home, env=driver_env(home))
    assert r.returncode == 0, r.stderr
    assert "tf-discovered-1" in r.stdout


def test_terraform_without_state_or_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(PROVIDER_FREE_CONFIG)
    r = run_driver(
        "list", "--terraform-dir", str(tmp_path), home=tmp_path, env=driver_env(tmp_path)
    )
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"error: no Terraform outputs in {tmp_path}: expected head_public_ip after `terraform "
        "apply` (is this the right folder, with its state?)"
    ]
    r = run_driver("list", "--terraform-dir", str(tmp_path / "x"), home=tmp_path)
    assert error_lines(r.stderr) == [f"error: --terraform-dir: no such folder: {tmp_path / 'x'}"]


def test_up_and_down_wrap_terraform(tmp_path: Path) -> None:
    folder = tmp_path / "tf"
    folder.mkdir()
    (folder / "main.tf").write_text(PROVIDER_FREE_CONFIG)
    env = driver_env(tmp_path)

    def terraform(verb: str, *args: str) -> subprocess.CompletedProcess[str]:
        return run_driver(
            verb, "--yes", "--terraform-dir", str(folder), *args, home=tmp_path, env=env
        )

    r = terraform("up", "--no-results-storage", "--var", "head_ip=203.0.113.9")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Apply complete! Resources: 1 added" in r.stdout
    assert "Cluster is up: head root@203.0.113.9." in r.stderr
    assert f"python -m driver cluster use --terraform-dir {folder}" in r.stderr
    assert from_terraform(folder) == HeadAddress("203.0.113.9", 22, "root")
    r = terraform("down", "--var", "head_ip=x")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Apply complete! Resources: 0 added, 0 changed, 1 destroyed." in r.stdout
    with pytest.raises(DriverError, match="no Terraform outputs"):
        from_terraform(folder)
    r = terraform("up", "--no-results-storage")  # no head_ip
    assert r.returncode == 2
    assert error_lines(r.stderr)[-1].startswith(f"error: terraform plan failed in {folder}")


# -- ARM ---------------------------------------------------------------------------------------
@pytest.fixture
def fake_azure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAzure]:
    fake = FakeAzure(tmp_path)
    for name in AZURE_CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    try:
        yield fake
    finally:
        fake.close()


def test_arm_outputs_camel_case(fake_azure: FakeAzure) -> None:
    fake_azure.add_deployment(
        "sub-1",
        "rg-ray",
        "ray-cluster",
        {"headPublicIp": "20.1.2.3", "adminUsername": "rayadmin", "headPrivateIp": "10.0.1.4"},
    )
    assert from_arm("rg-ray", "ray-cluster", "sub-1", fake_azure.endpoint) == HeadAddress(
        "20.1.2.3", 22, "rayadmin"
    )
    token_call, deployment_call = fake_azure.requests
    assert token_call[0] == "/msi/token"
    assert f"resource={fake_azure.endpoint}" in token_call[1].replace("%3A", ":").replace(
        "%2F", "/"
    )
    assert deployment_call[0] == (
        "/subscriptions/sub-1/resourcegroups/rg-ray/providers/Microsoft.Resources/deployments/"
        "ray-cluster"
    )
    assert "api-version=" in deployment_call[1]
    assert deployment_call[2]["Authorization"] == f"Bearer {fake_azure.access_token}"


def test_arm_outputs_snake_case_and_default_user(fake_azure: FakeAzure) -> None:
    fake_azure.add_deployment("sub-1", "RG-Ray", "ray", {"head_public_ip": "20.1.2.4"})
    # ARM matches names case-insensitively; no admin user output means the default, azureuser.
    assert from_arm("rg-ray", "RAY", "sub-1", fake_azure.endpoint) == HeadAddress("20.1.2.4")


@pytest.mark.parametrize(
    ("setup", "args", "expected"),
    [
        (
            None,
            ("rg-ray", "nope", "sub-1"),
            "ARM deployment nope in resource group rg-ray not found (subscription sub-1): "
            "DeploymentNotFound: Deployment 'nope' could not be found.",
        ),
        (
            None,
            ("rg-other", "ray", "sub-1"),
            "ARM deployment ray in resource group rg-other not found (subscription sub-1): "
            "ResourceGroupNotFound: Resource group 'rg-other' could not be found.",
        ),
        (
            {"sshCommand": "ssh x"},
            ("rg-ray", "bare", "sub-1"),
            "the outputs of ARM deployment bare in resource group rg-ray have no headPublicIp "
            "(outputs: sshCommand)",
        ),
        (
            None,
            ("rg-ray", "ray", None),
            "--resource-group/--deployment need a subscription: pass --subscription ID or set "
            "AZURE_SUBSCRIPTION_ID",
        ),
    ],
)
def test_arm_errors(
    fake_azure: FakeAzure,
    setup: dict[str, str] | None,
    args: tuple[str, str, str | None],
    expected: str,
) -> None:
    fake_azure.add_deployment("sub-1", "rg-ray", "ray", {"headPublicIp": "20.1.2.3"})
    if setup:
        fake_azure.add_deployment("sub-1", "rg-ray", "bare", setup)
    with pytest.raises(DriverError) as e:
        from_arm(*args, endpoint=fake_azure.endpoint)
    assert e.value.message == expected


def test_arm_running_deployment_without_outputs(fake_azure: FakeAzure) -> None:
    fake_azure.add_deployment("sub-1", "rg-ray", "ray", {}, state="Running")
    with pytest.raises(DriverError) as e:
        from_arm("rg-ray", "ray", "sub-1", fake_azure.endpoint)
    assert e.value.message == (
        "ARM deployment ray in resource group rg-ray is Running: it has no outputs yet "
        "(expected headPublicIp)"
    )


def test_arm_sign_in_failure_is_one_line(
    fake_azure: FakeAzure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_azure.add_deployment("sub-1", "rg-ray", "ray", {"headPublicIp": "20.1.2.3"})
    env = {**driver_env(tmp_path), **fake_azure.env(), "IDENTITY_HEADER": "wrong"}
    where = ("--resource-group", "rg-ray", "--deployment", "ray", "--subscription", "sub-1")
    r = run_driver("list", *where, home=tmp_path, env=env)
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        "error: cannot sign in to Azure to read ARM deployment ray in resource group rg-ray: "
        "ManagedIdentityCredential: (invalid_scope) 401, Unauthorized: bad identity header "
        "(expected `az login`, a managed identity, or "
        "AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
    ]
    r = run_driver("list", *where, "--arm-endpoint", "http://127.0.0.1:9", home=tmp_path, env=env)
    assert error_lines(r.stderr) == [
        "error: --arm-endpoint must be an https:// URL, got 'http://127.0.0.1:9'"
    ]


def test_arm_deployment_reaches_the_cluster(
    fake_azure: FakeAzure, head_host: HeadHost, tmp_path: Path
) -> None:
    fake_azure.add_deployment(
        "sub-1", "rg-ray", "ray-cluster", {"headPublicIp": head_host.ip, "adminUsername": "root"}
    )
    home = tmp_path / "home"
    # The endpoint comes from AZURE_RESOURCE_MANAGER_ENDPOINT (fake_azure.env()).
    r = run_driver(
        "submit",
        "--no-wait",
        "--resource-group",
        "rg-ray",
        "--deployment",
        "ray-cluster",
        "--subscription",
        "sub-1",
        "-i",
        str(head_host.user_key),
        "--submission-id",
        "arm-discovered-1",
        str(FIXTURES / "jobs" / "succeed.py"),
        home=home,
        env={**driver_env(home), **fake_azure.env()},
    )
    assert r.returncode == 0, r.stderr
    assert f"to the head {head_host.target} (ARM deployment ray-cluster in rg-ray)" in r.stderr
    hint = (
        "--resource-group rg-ray --deployment ray-cluster --subscription sub-1 "
        f"-i {head_host.user_key}"
    )
    assert f"python -m driver job status arm-discovered-1 {hint}" in r.stderr
    assert fake_azure.access_token not in r.stderr + r.stdout
