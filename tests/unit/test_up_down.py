"""up/down show Terraform's plan first and apply it only on a yes: --yes for scripts, a refusal
without a terminal, a warning when the head would be replaced. Real terraform on a configuration
of Terraform's built-in resources (no provider to download)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from driver.cli.cluster import NO_STORAGE
from driver.terraform import summarize
from fakes.retail_prices import FakeRetailPrices, blob_meters, private_link_meters, vm_meters
from price_support import closed_port_url, rows, storage
from support import REPO, error_lines, run_driver
from terraform_support import CONFIG, stack_of_inputs


@pytest.fixture
def stack(tmp_path: Path) -> Path:
    folder = tmp_path / "tf"
    folder.mkdir()
    (folder / "main.tf").write_text(CONFIG)
    return folder


def _driver(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_driver(*args, home=home, env={"CHECKPOINT_DISABLE": "1"})


def test_up_without_a_terminal_shows_the_plan_and_applies_nothing(
    stack: Path, tmp_path: Path
) -> None:
    r = _driver(tmp_path, "up", "--terraform-dir", str(stack), "--var", "head_ip=203.0.113.9",
                "--no-results-storage")  # fmt: skip
    assert r.returncode == 2
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in r.stdout
    assert error_lines(r.stderr)[-1] == (
        "error: Apply: 2 to add, 0 to change, 0 to destroy: not without a yes — stdin is not a "
        "terminal, so pass --yes to apply the plan shown above"
    )
    assert not (stack / "terraform.tfstate").exists()


def test_up_yes_applies_and_a_replaced_head_is_warned_about(stack: Path, tmp_path: Path) -> None:
    up = ("up", "--yes", "--no-results-storage", "--terraform-dir", str(stack))
    r = _driver(tmp_path, *up, "--var", "head_ip=203.0.113.9")
    assert r.returncode == 0, r.stderr
    assert "Cluster is up: head root@203.0.113.9." in r.stderr
    r = _driver(tmp_path, *up, "--var", "head_ip=203.0.113.9")
    assert r.returncode == 0 and "No changes: the cluster already matches" in r.stderr
    r = _driver(tmp_path, *up, "--var", "head_ip=203.0.113.10")
    assert r.returncode == 0, r.stderr
    assert "WARNING: this plan replaces terraform_data.head" in r.stderr
    assert "Cluster is up: head root@203.0.113.10." in r.stderr
    r = _driver(tmp_path, "down", "--terraform-dir", str(stack), "--var", "head_ip=x")
    assert r.returncode == 2 and "not without a yes" in r.stderr
    r = _driver(tmp_path, "down", "--yes", "--terraform-dir", str(stack), "--var", "head_ip=x")
    assert r.returncode == 0, r.stderr
    assert "Apply complete! Resources: 0 added, 0 changed, 2 destroyed." in r.stdout


@pytest.mark.parametrize(("answer", "applied"), [("yes", True), ("y", False)])
def test_up_asks_on_a_terminal_and_only_yes_goes_ahead(
    stack: Path, tmp_path: Path, answer: str, applied: bool
) -> None:
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "driver",
            "up",
            "--terraform-dir",
            str(stack),
            "--var",
            "head_ip=1.2.3.4",
            "--no-results-storage",
        ],
        cwd=REPO,
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "RAYDRIVER_HOME": str(tmp_path), "CHECKPOINT_DISABLE": "1"},
        text=True,
    )
    os.close(secondary)
    try:
        time.sleep(0.5)
        os.write(primary, f"{answer}\n".encode())  # waits in the terminal until input() reads
        out, err = proc.communicate(timeout=300)
    finally:
        os.close(primary)
    assert "Only 'yes' goes ahead." in err
    assert ((stack / "terraform.tfstate").exists() and "Apply complete" in out) == applied
    assert proc.returncode == (0 if applied else 2), err
    if not applied:
        assert (
            error_lines(err)[-1] == "error: not applied: the answer was not yes (nothing changed)"
        )


def test_summarize_counts_and_names_the_replaced_head() -> None:
    plan = {
        "resource_changes": [
            {
                "address": "azurerm_linux_virtual_machine.head",
                "name": "head",
                "change": {"actions": ["delete", "create"]},
            },
            {
                "address": "azurerm_public_ip.head",
                "name": "head",
                "change": {"actions": ["update"]},
            },
            {
                "address": "azurerm_key_vault.this",
                "name": "this",
                "change": {"actions": ["create"]},
            },
            {
                "address": "module.x.thing.head",
                "name": "head",
                "module_address": "module.x",
                "change": {"actions": ["delete"]},
            },
            {"address": "data.x.y", "name": "y", "change": {"actions": ["read"]}},
        ]
    }
    s = summarize(plan)
    assert (s.add, s.change, s.destroy) == (2, 1, 2)
    assert s.replaced_head == ("azurerm_linux_virtual_machine.head",)


def test_summarize_names_a_worker_scale_set_a_changed_orchestration_mode_replaces() -> None:
    pool = 'module.cluster.module.worker_pool["cpu"]'
    plan = {
        "resource_changes": [
            {
                "address": f"{pool}.azurerm_linux_virtual_machine_scale_set.this[0]",
                "type": "azurerm_linux_virtual_machine_scale_set",
                "name": "this",
                "module_address": pool,
                "change": {"actions": ["delete"]},
            },
            {
                "address": f"{pool}.azurerm_orchestrated_virtual_machine_scale_set.this[0]",
                "type": "azurerm_orchestrated_virtual_machine_scale_set",
                "name": "this",
                "module_address": pool,
                "change": {"actions": ["create"]},
            },
            {
                "address": f"{pool}.azurerm_monitor_autoscale_setting.this[0]",
                "type": "azurerm_monitor_autoscale_setting",
                "name": "this",
                "module_address": pool,
                "change": {"actions": ["update"]},
            },
        ]
    }
    s = summarize(plan)
    assert (s.add, s.change, s.destroy) == (1, 1, 1)
    assert s.replaced_scale_sets == (f"{pool}.azurerm_linux_virtual_machine_scale_set.this[0]",)
    assert s.replaced_head == ()


def test_the_warning_of_a_deleted_scale_set_names_the_pin_that_keeps_it() -> None:
    """A cluster made while Uniform was the default: ``up`` names the pool's pin that keeps its
    Uniform scale set (the pool "workers" of a cluster without pools too); a Flexible one deleted
    by a pin to Uniform gets the way back; an address outside a pool only the warning."""
    from driver.terraform import scale_set_warning

    pool = 'module.cluster.module.worker_pool["workers"]'
    said = scale_set_warning(f"{pool}.azurerm_linux_virtual_machine_scale_set.this[0]")
    assert said.startswith("WARNING: this plan deletes the worker scale set module.cluster.")
    assert said.endswith(
        'to keep this one, set its orchestration_mode = "Uniform" '
        '(worker_pools = { workers = { orchestration_mode = "Uniform" } })'
    )
    said = scale_set_warning(
        'module.worker_pool["cpu"].azurerm_orchestrated_virtual_machine_scale_set.this[0]'
    )
    assert 'worker_pools = { cpu = { orchestration_mode = "Flexible" } }' in said
    said = scale_set_warning("azurerm_linux_virtual_machine_scale_set.workers")
    assert "orchestration_mode" not in said and said.endswith("(running jobs lose them)")


def test_up_shows_the_price_of_the_planned_variables_before_asking(tmp_path: Path) -> None:
    """The stack's own variables.tf and checks.tf (they need no provider) with a head resource:
    the plan's variables (defaults, terraform.tfvars, -var) are what is priced."""
    stack = stack_of_inputs(tmp_path / "tf")
    items = vm_meters("westeurope", "Standard_D4s_v5", 0.23, spot=0.046)
    env = {"CHECKPOINT_DISABLE": "1"}
    with FakeRetailPrices(items) as api:
        r = run_driver("up", "--terraform-dir", str(stack), "--var", "worker_spot_enabled=true",
                       "--no-results-storage", home=tmp_path,
                       env={**env, "RAYDRIVER_PRICES_URL": api.url}, timeout=300)  # fmt: skip
    assert r.returncode == 2
    out = r.stdout
    assert out.index("Plan: 3 to add") < out.index("Hourly price in westeurope (USD;")
    assert rows(out[out.index("Hourly price") :])[1:] == [
        ["head", "Standard_D4s_v5", "regular", "0.2300", "1 = 0.2300", "1 = 0.2300", "1 = 0.2300"],
        ["workers", "Standard_D4s_v5", "Spot", "0.0460", "0 = 0.0000", "2 = 0.0920", "4 = 0.1840"],
        ["total", "0.2300", "0.3220", "0.4140"],
    ]  # fmt: skip
    assert "not without a yes" in error_lines(r.stderr)[-1]
    assert not (stack / "terraform.tfstate").exists()
    url = closed_port_url()
    r = run_driver("up", "--yes", "--terraform-dir", str(stack), "--no-results-storage",
                   home=tmp_path, env={**env, "RAYDRIVER_PRICES_URL": url},
                   timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    [line] = [x for x in error_lines(r.stderr) if x.startswith("Price")]
    assert line.startswith(f"Price unknown: the Retail Prices API at {url} did not answer (")
    assert "Cluster is up: head root@203.0.113.9." in r.stderr


# -- results storage: up applies its stack first, in its own state ----------------------------
HEAD_IP_VARIABLE = """
variable "head_ip" {
  type = string
}
"""
STORED_VARIABLES = (
    HEAD_IP_VARIABLE
    + """
variable "location" {
  type    = string
  default = "westeurope"
}

variable "results_storage_account_id" {
  type    = string
  default = ""
}
"""
)
STORED_CONFIG = (
    CONFIG.replace(HEAD_IP_VARIABLE, "")
    + """
resource "terraform_data" "storage" {
  input = var.results_storage_account_id
}

output "results_storage_account_id" {
  value = terraform_data.storage.output
}
"""
)
"""The cluster of CONFIG with the inputs `up` reads (variables.tf) and the storage id it took."""
RESULTS_CONFIG = """
variable "location" {
  type = string
}

resource "terraform_data" "account" {
  input = "rayres0123456789abcdef"
}

output "storage_account_id" {
  value = join("/", [
    "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups",
    "ray-results-${var.location}/providers/Microsoft.Storage/storageAccounts",
    terraform_data.account.output,
  ])
}
"""
"""The results stack of built-in resources: an output shaped as the real one's, naming the
location it was given."""
ACCOUNT = (
    "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/ray-results-westeurope/"
    "providers/Microsoft.Storage/storageAccounts/rayres0123456789abcdef"
)


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    folder = tmp_path / "tf"
    (folder / "results").mkdir(parents=True)
    (folder / "variables.tf").write_text(STORED_VARIABLES)
    (folder / "main.tf").write_text(STORED_CONFIG)
    (folder / "results" / "main.tf").write_text(RESULTS_CONFIG)
    return folder


def _taken(folder: Path) -> str:
    """The storage id the applied cluster took (its state's output)."""
    state = json.loads((folder / "terraform.tfstate").read_text())
    return str(state["outputs"]["results_storage_account_id"]["value"])


def test_up_applies_the_results_storage_first_and_down_keeps_it(
    stored: Path, tmp_path: Path
) -> None:
    results = stored / "results"
    r = _driver(tmp_path, "up", "--yes", "--terraform-dir", str(stored), "--var", "head_ip=1.2.3.4")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # Its plan, then the cluster's: one to add there, three here.
    assert out.index("Plan: 1 to add") < out.index("Plan: 3 to add")
    assert f"Results storage: {ACCOUNT} (state in {results}; outlives the cluster)." in r.stderr
    assert (results / "terraform.tfstate").is_file()
    assert _taken(stored) == ACCOUNT  # the cluster's plan got the id
    assert "Cluster is up: head root@1.2.3.4." in r.stderr
    r = _driver(tmp_path, "up", "--yes", "--terraform-dir", str(stored), "--var", "head_ip=1.2.3.4")
    assert r.returncode == 0, r.stderr
    assert "Results storage: no changes (it exists and is reused)." in r.stderr
    assert "No changes: the cluster already matches the configuration." in r.stderr
    r = _driver(tmp_path, "down", "--yes", "--terraform-dir", str(stored), "--var", "head_ip=x")
    assert r.returncode == 0, r.stderr
    assert "Apply complete! Resources: 0 added, 0 changed, 3 destroyed." in r.stdout
    assert error_lines(r.stderr)[-1] == (
        f"The results storage stays (its own state in {results}; `up` reuses it): "
        f"`terraform -chdir={results} destroy` deletes it with every result."
    )
    state = json.loads((results / "terraform.tfstate").read_text())
    assert state["outputs"]["storage_account_id"]["value"] == ACCOUNT


def test_an_account_the_inputs_name_is_used_and_nothing_applied_for_it(
    stored: Path, tmp_path: Path
) -> None:
    named = ACCOUNT.replace("ray-results-westeurope", "rg-mine")
    (stored / "terraform.tfvars").write_text(f'results_storage_account_id = "{named}"\n')
    r = _driver(tmp_path, "up", "--yes", "--terraform-dir", str(stored), "--var", "head_ip=1.2.3.4")
    assert r.returncode == 0, r.stderr
    assert f"Results storage: {named} (from the cluster's inputs; nothing applied for it)." in (
        r.stderr
    )
    assert not (stored / "results" / "terraform.tfstate").exists()
    assert _taken(stored) == named


def test_no_results_storage_says_so_and_applies_the_cluster_alone(
    stored: Path, tmp_path: Path
) -> None:
    r = _driver(tmp_path, "up", "--yes", "--no-results-storage", "--terraform-dir", str(stored),
                "--var", "head_ip=1.2.3.4")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert error_lines(r.stderr)[0] == NO_STORAGE
    assert not (stored / "results" / "terraform.tfstate").exists()
    assert _taken(stored) == ""


def test_a_refused_or_failed_results_storage_applies_nothing_of_the_cluster(
    stored: Path, tmp_path: Path
) -> None:
    r = _driver(tmp_path, "up", "--terraform-dir", str(stored), "--var", "head_ip=1.2.3.4")
    assert r.returncode == 2
    assert "Plan: 1 to add" in r.stdout and "Plan: 3 to add" not in r.stdout
    assert error_lines(r.stderr)[-1] == (
        "error: results storage: Apply the results storage first: 1 to add, 0 to change, 0 to "
        "destroy: not without a yes — stdin is not a terminal, so pass --yes to apply the plan "
        "shown above — the cluster was not deployed"
    )
    assert not (stored / "results" / "terraform.tfstate").exists()
    assert not (stored / "terraform.tfstate").exists()
    # A results stack whose plan fails (a precondition): one line, the cluster not planned.
    (stored / "results" / "main.tf").write_text(
        RESULTS_CONFIG.replace(
            'input = "rayres0123456789abcdef"',
            'input = "rayres0123456789abcdef"\n  lifecycle {\n    precondition {\n'
            '      condition     = var.location == "eastus"\n'
            '      error_message = "results go to eastus only."\n    }\n  }',
        )
    )
    r = _driver(tmp_path, "up", "--yes", "--terraform-dir", str(stored), "--var", "head_ip=1.2.3.4")
    assert r.returncode == 2
    assert "results go to eastus only." in r.stdout + r.stderr
    assert error_lines(r.stderr)[-1] == (
        f"error: results storage: terraform plan failed in {stored / 'results'} (exit 1): see "
        "its output above — the cluster was not deployed"
    )
    assert not (stored / "terraform.tfstate").exists()
    # No results folder: one line naming the way out.
    r = _driver(tmp_path, "up", "--yes", "--terraform-dir", str(stored), "--var", "head_ip=1.2.3.4",
                "--results-dir", str(tmp_path / "none"))  # fmt: skip
    assert r.returncode == 2
    [line] = error_lines(r.stderr)
    assert line.startswith(f"error: --results-dir: no such folder: {tmp_path / 'none'}")
    assert "--no-results-storage" in line


def test_up_prices_the_results_storage_it_made(tmp_path: Path) -> None:
    """The stack's own variables.tf and checks.tf: the id the results stack gave is in the
    plan's variables, so the price table counts the storage."""
    stack = stack_of_inputs(tmp_path / "tf")
    (stack / "results").mkdir()
    (stack / "results" / "main.tf").write_text(RESULTS_CONFIG)
    items = [*vm_meters("westeurope", "Standard_D4s_v5", 0.23), *blob_meters("westeurope"),
             *private_link_meters()]  # fmt: skip
    with FakeRetailPrices(items) as api:
        r = run_driver("up", "--yes", "--terraform-dir", str(stack), home=tmp_path,
                       env={"CHECKPOINT_DISABLE": "1", "RAYDRIVER_PRICES_URL": api.url},
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout[r.stdout.index("Hourly price") :]
    assert rows(out)[3] == ["storage", "private endpoint", "regular", "0.0100", "1 = 0.0100",
                            "1 = 0.0100", "1 = 0.0100"]  # fmt: skip
    assert storage(out)["data stored (up to 51,200 GB)"] == "0.0208 per GB-month"
