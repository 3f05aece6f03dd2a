"""The inputs the stacks' validations are held to: the longest value each deploy-time
placeholder can receive, real SSH public keys, the required inputs, and the bad cases (each
with a fragment of its message) and good cases of the Terraform stack's variables, which the
Bicep stack's parameters answer alike (test_bicep_validations.py); and terraform console with
the required inputs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

from support import FIXTURES
from terraform_support import terraform_env

# Key Vault names: 3-24 characters (test_terraform_custom_data.py checks the stack's)
KEY_VAULT_NAME_MAX = 24
SECRET_NAME_MAX = 127  # Key Vault secret names: 1-127 letters, digits and '-'

POOLS_MAX = 4  # worker_pools validation
POOL_NAME_MAX = 10  # worker_pools validation: pool names of 1-10 characters
SCALE_SET_NAME_MAX = "p" * 16 + "-" + "q" * POOL_NAME_MAX  # name_prefix (2-16) and a pool name

POOL_JSON = '{"labels":"","max":,"min":,"name":"","resources":,"scale_set":"","vm_size":""}'
"""An entry of AUTOSCALER_POOLS without its values."""

MAX_VALUE_LENGTHS = {
    "RAY_HEAD_IP": len("255.255.255.255"),
    "KEY_VAULT_URL": len("https://") + KEY_VAULT_NAME_MAX + len(".vault.azure.net/"),
    "TOKEN_SECRET_NAME": SECRET_NAME_MAX,
    "IDENTITY_CLIENT_ID": len("00000000-0000-0000-0000-000000000000"),  # a GUID
    "RAY_ADMIN_USER": 32,  # admin_username validation
    "EXTRA_PIP_PACKAGES": 1024,  # extra_pip_packages validation (joined by spaces)
    "EXTRA_APT_PACKAGES": 1024,  # extra_apt_packages validation (joined by spaces)
    "PIP_INDEX_URL": 512,  # pip_index_url validation
    "TORCH_INDEX_URL": 512,  # torch_index_url validation
    "APT_SOURCE": 512,  # apt_source validation
    "SCALING_MODE": len("cpu"),  # scaling_mode validation: cpu or ray
    "WORKER_SCALE_SET_ID": len(
        "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/"
        + "g" * 90  # resource group names: 1-90 characters
        + "/providers/Microsoft.Compute/virtualMachineScaleSets/"
        + SCALE_SET_NAME_MAX
    ),
    "WORKER_VM_SIZE": 48,  # worker_vm_size and worker_pools' vm_size validations
    # Every pool's entry (at most 4): counts of 3 digits, name, scale set name, VM size, its
    # labels (key=value,...) and resources (a JSON object); each '"' escaped in the outer JSON.
    "AUTOSCALER_POOLS": 2
    + POOLS_MAX
    * (
        len(POOL_JSON)
        + POOL_JSON.count('"')
        + 2 * 3
        + POOL_NAME_MAX
        + len(SCALE_SET_NAME_MAX)
        + 48
        + 64  # its labels as RAY_LABELS: 64 characters of key=value pairs
        + 64
        + 2 * (64 // 6 + 1)
        + 1
    ),
    "AUTOSCALER_IDLE_TIMEOUT_MINUTES": 4,  # ray_idle_timeout_minutes: 1-1440
    "AUTOSCALER_CLIENT_ID": len("00000000-0000-0000-0000-000000000000"),  # a GUID or empty
    "ARM_ENDPOINT": 64,  # environment().resourceManager; Terraform: the same, by the vault's cloud
    "AUTOSTOP_IDLE_MINUTES": 5,  # autostop_idle_minutes: 0 or 10-10080
    # Every pool's, space separated (at most 4 pools, worker_pools validation), or empty.
    "WORKER_AUTOSCALE_NAME": POOLS_MAX * (len(SCALE_SET_NAME_MAX) + len("-autoscale") + 1) - 1,
    "WORKER_SCALE_SETS": POOLS_MAX * (len(SCALE_SET_NAME_MAX) + 1) - 1,
    "WORKER_POOL": POOL_NAME_MAX,
    # 64 characters of JSON (worker_pools validation), each '"' escaped in the outer JSON: an
    # entry ("a":1,) takes 6 characters or more, 2 of them quotes.
    "RAY_RESOURCES": 64 + 2 * (64 // 6 + 1),
    "RAY_LABELS": 64,  # worker_pools validation: 64 characters of key=value pairs
    # https://ACCOUNT.blob.SUFFIX/results: a 24-character account name (the
    # results_storage_account_id validation), the longest cloud's suffix (core.usgovcloudapi.net).
    "RESULTS_URL": len("https://") + 24 + len(".blob.core.usgovcloudapi.net/results"),
}
"""The longest value each placeholder can receive from the stack's validated variables."""


ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP4S9mbJDa3rbswrgZDZPW0SvS6zPUB0LvnB0IkRZLgc you@example"
)


# Real keys (tests/fixtures/ssh-public-keys.json: public halves only, made once with the
# cryptography package as ssh-keygen would): fixed, so that the terraform test file made of the
# cases below (scripts/terraform_validation_tests.py) stays the same from run to run.
_KEYS = json.loads((FIXTURES / "ssh-public-keys.json").read_text())
ED25519_REAL, RSA_1024, RSA_2047, RSA_2048, RSA_4096 = (
    _KEYS[k] for k in ("ed25519", "rsa-1024", "rsa-2047", "rsa-2048", "rsa-4096")
)
ED25519_BLOB = ED25519_REAL.split()[1]
RSA_BLOB = RSA_2048.split()[1]
# Base64 characters 4-7 carry bytes 3-5 of the blob: changing character 7 changes the second
# "s" of the key type string inside it, while the blob keeps its length.
ED25519_BAD_TYPE = ED25519_BLOB[:7] + ("A" if ED25519_BLOB[7] != "A" else "B") + ED25519_BLOB[8:]
REQUIRED = {
    "location": "westeurope",
    "allowed_ssh_cidrs": ["203.0.113.7/32"],
    "admin_ssh_public_key": ED25519,
}
REQUIRED_PARAMETERS = {"allowedSshCidrs": ["203.0.113.7/32"], "adminSshPublicKey": ED25519}
"""REQUIRED as the Bicep stack names its parameters."""

NODE_IMAGE_ID = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-ray/providers/"
    "Microsoft.Compute/galleries/ray_nodes/images/ray-node-ubuntu-22.04/versions/1.0.3"
)

RESULTS_ACCOUNT_ID = (
    "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/ray-results/providers/"
    "Microsoft.Storage/storageAccounts/rayres0123456789abcdef01"
)

CHECKS = "terraform_data.input_checks"
"""The provider-less resource whose preconditions are checks.tf's rules across inputs."""


class Refused(NamedTuple):
    """A bad case: its variables, a fragment of the message that refuses them, and what
    refuses them as `terraform test`'s expect_failures names it (``var.NAME``, :data:`CHECKS`)."""

    variables: dict[str, Any]
    message: str
    fails: tuple[str, ...]


BOTH_NETWORKS = ("var.vnet_address_space", "var.subnet_address_prefix")
"""A virtual network and its subnet in the same public range: both are refused."""


def _refused(variables: dict[str, Any], message: str, *fails: str) -> Refused:
    """A row of :data:`REFUSED`: what refuses a case of one variable is that variable, unless
    the row names it."""
    if not fails:
        [name] = variables  # a case of several variables says which of them refuse it
        fails = (f"var.{name}",)
    return Refused(variables, message, fails)


_BAD: list[tuple[Any, ...]] = [
    # a storage account's id, nothing else: not its container, not a name, not upper case
    (
        {
            "results_storage_account_id": RESULTS_ACCOUNT_ID
            + "/blobServices/default/containers/results"
        },
        "results_storage_account_id must be",
    ),
    (
        {"results_storage_account_id": "rayres0123456789abcdef01"},
        "results_storage_account_id must be",
    ),
    (
        {"results_storage_account_id": RESULTS_ACCOUNT_ID.replace("rayres0123", "RayRes0123")},
        "results_storage_account_id must be",
    ),
    (
        {
            "results_storage_account_id": RESULTS_ACCOUNT_ID.replace(
                "Microsoft.Storage/storageAccounts", "Microsoft.KeyVault/vaults"
            )
        },
        "results_storage_account_id must be",
    ),
    # a gallery image version's id, nothing else: not its definition (no version), not a
    # managed image, not a marketplace URN
    ({"node_image_id": NODE_IMAGE_ID.rsplit("/versions/", 1)[0]}, "node_image_id must be"),
    ({"node_image_id": NODE_IMAGE_ID.replace("/1.0.3", "/latest")}, "node_image_id must be"),
    ({"node_image_id": "Canonical:ubuntu-24_04-lts:server:latest"}, "node_image_id must be"),
    (
        {"node_image_id": NODE_IMAGE_ID.replace("galleries/ray_nodes/images", "images")},
        "node_image_id must be",
    ),
    ({"location": "West Europe"}, "location must be an Azure region name"),
    ({"allowed_ssh_cidrs": []}, "allowed_ssh_cidrs must list at least one IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["0.0.0.0/0"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["*"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["203.0.113.7/32", "*"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["Internet"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["any"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["10.1.2.3/0"]}, "must not open SSH to the whole Internet"),
    ({"allowed_ssh_cidrs": ["203.0.113.7"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["300.1.1.1/32"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["2001:db8::/32"]}, "every entry must be an IPv4 CIDR"),
    # ... and the whole Internet by other spellings: numbers, not strings, decide.
    ({"allowed_ssh_cidrs": ["0.0.0.0/00"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["010.0.0.1/32"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["203.0.113.7/032"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": [" 203.0.113.7/32"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["203.0.113.7/33"]}, "every entry must be an IPv4 CIDR"),
    ({"allowed_ssh_cidrs": ["1.2.3.4/1"]}, "every entry must be a network address"),
    ({"allowed_ssh_cidrs": ["198.51.100.7/24"]}, "every entry must be a network address"),
    ({"allowed_ssh_cidrs": ["0.0.0.0/1", "128.0.0.0/1"]}, "every entry must be /8 or narrower"),
    ({"allowed_ssh_cidrs": ["8.0.0.0/7"]}, "every entry must be /8 or narrower"),
    (
        {"allowed_ssh_cidrs": ["10.0.0.0/8", "11.0.0.0/8"]},
        "allowed_ssh_cidrs must cover at most 16,777,216 addresses",
    ),
    (
        {"allowed_ssh_cidrs": ["10.0.0.0/8", "203.0.113.7/32"]},
        "allowed_ssh_cidrs must cover at most 16,777,216 addresses",
    ),
    ({"admin_ssh_public_key": ""}, "admin_ssh_public_key must be one OpenSSH public key line"),
    ({"admin_ssh_public_key": "~/.ssh/id_ed25519.pub"}, "admin_ssh_public_key must be one"),
    ({"admin_ssh_public_key": "ecdsa-sha2-nistp256 AAAAE2Vj"}, "admin_ssh_public_key must be"),
    ({"admin_ssh_public_key": ED25519 + "\n" + ED25519}, "admin_ssh_public_key must be one"),
    # The key blob is decoded (SSH wire format, RFC 4253 6.6) and must match its type word.
    ({"admin_ssh_public_key": RSA_1024}, "RSA keys must have 2048 bits or more"),
    ({"admin_ssh_public_key": RSA_2047}, "RSA keys must have 2048 bits or more"),
    ({"admin_ssh_public_key": f"ssh-rsa {ED25519_BLOB}"}, "the key data is not a valid"),
    ({"admin_ssh_public_key": f"ssh-ed25519 {RSA_BLOB}"}, "the key data is not a valid"),
    ({"admin_ssh_public_key": f"ssh-ed25519 {ED25519_BLOB[:-4]}"}, "the key data is not a"),
    ({"admin_ssh_public_key": f"ssh-ed25519 {ED25519_BLOB}AAAA"}, "the key data is not a"),
    ({"admin_ssh_public_key": f"ssh-ed25519 {ED25519_BLOB[:-1]}"}, "the key data is not a"),
    ({"admin_ssh_public_key": f"ssh-ed25519 {ED25519_BAD_TYPE}"}, "the key data is not a"),
    ({"admin_ssh_public_key": f"ssh-rsa {RSA_BLOB[:-8]}"}, "the key data is not a valid"),
    ({"admin_ssh_public_key": "ssh-ed25519 AAAA"}, "the key data is not a valid"),
    ({"resource_group_name": "rg with spaces"}, "resource_group_name must be 1-90"),
    ({"resource_group_name": "ends-in-dot."}, "resource_group_name must be 1-90"),
    ({"resource_group_name": "r" * 91}, "resource_group_name must be 1-90"),
    ({"name_prefix": "Ray"}, "name_prefix must be 2-16 lower-case"),
    ({"name_prefix": "r"}, "name_prefix must be 2-16 lower-case"),
    ({"name_prefix": "ray-"}, "name_prefix must be 2-16 lower-case"),
    ({"name_prefix": "r" * 17}, "name_prefix must be 2-16 lower-case"),
    ({"vnet_address_space": "10.0.0.0/7"}, "vnet_address_space must be an IPv4 network"),
    ({"vnet_address_space": "10.42.0.0/29"}, "vnet_address_space must be an IPv4 network"),
    ({"vnet_address_space": "ten.0.0.0/16"}, "vnet_address_space must be an IPv4 network"),
    ({"vnet_address_space": "10.42.0.5/16"}, "vnet_address_space must be an IPv4 network"),
    ({"vnet_address_space": "010.42.0.0/16"}, "vnet_address_space must be an IPv4 network"),
    ({"subnet_address_prefix": "10.42.1.5/24"}, "subnet_address_prefix must be an IPv4 network"),
    ({"subnet_address_prefix": "10.42.1.0/29"}, "subnet_address_prefix must be an IPv4 network"),
    ({"subnet_address_prefix": "10.42.01.0/24"}, "subnet_address_prefix must be an IPv4 network"),
    # Only private ranges: a public one would shadow real Internet addresses; Azure refuses the
    # special ones late (virtual network FAQ).
    (
        {"vnet_address_space": "20.42.0.0/16", "subnet_address_prefix": "20.42.1.0/24"},
        "vnet_address_space must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "172.32.0.0/16", "subnet_address_prefix": "172.32.1.0/24"},
        "vnet_address_space must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "100.128.0.0/16", "subnet_address_prefix": "100.128.1.0/24"},
        "vnet_address_space must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "127.0.0.0/8", "subnet_address_prefix": "127.0.0.0/24"},
        "vnet_address_space must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "169.254.0.0/16", "subnet_address_prefix": "169.254.1.0/24"},
        "vnet_address_space must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "224.0.0.0/8", "subnet_address_prefix": "224.0.1.0/24"},
        "vnet_address_space must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "168.63.128.0/22", "subnet_address_prefix": "168.63.129.0/24"},
        "subnet_address_prefix must lie in a private range",
        *BOTH_NETWORKS,
    ),
    (
        {"vnet_address_space": "8.0.0.0/8", "subnet_address_prefix": "8.8.8.0/24"},
        "subnet_address_prefix must lie in a private range",
        *BOTH_NETWORKS,
    ),
    ({"tcp_idle_timeout_minutes": 3}, "tcp_idle_timeout_minutes must be a whole number"),
    ({"tcp_idle_timeout_minutes": 31}, "tcp_idle_timeout_minutes must be a whole number"),
    ({"tcp_idle_timeout_minutes": 4.5}, "tcp_idle_timeout_minutes must be a whole number"),
    ({"admin_username": "AzureUser"}, "admin_username must be 1-32 lower-case"),
    ({"admin_username": "a" * 33}, "admin_username must be 1-32 lower-case"),
    ({"admin_username": "o'brien"}, "admin_username must be 1-32 lower-case"),
    ({"admin_username": "root"}, "admin_username must not be a name Azure reserves"),
    ({"admin_username": "admin"}, "admin_username must not be a name Azure reserves"),
    # The Ray service user and the images' own accounts and groups.
    ({"admin_username": "ray"}, "admin_username must not be ray"),
    ({"admin_username": "root"}, "admin_username must not be ray"),
    ({"admin_username": "ubuntu"}, "admin_username must not be ray"),
    ({"admin_username": "debian"}, "admin_username must not be ray"),
    ({"admin_username": "daemon"}, "admin_username must not be ray"),
    ({"admin_username": "www-data"}, "admin_username must not be ray"),
    ({"admin_username": "nobody"}, "admin_username must not be ray"),
    ({"admin_username": "sshd"}, "admin_username must not be ray"),
    ({"admin_username": "syslog"}, "admin_username must not be ray"),
    ({"admin_username": "polkitd"}, "admin_username must not be ray"),
    ({"admin_username": "sudo"}, "admin_username must not be ray"),
    ({"admin_username": "systemd-network"}, "admin_username must not be ray"),
    ({"admin_username": "systemd-anything"}, "admin_username must not be ray"),
    ({"admin_username": "_apt"}, "admin_username must not be ray"),
    ({"admin_username": "_chrony"}, "admin_username must not be ray"),
    ({"os_image": "ubuntu-20.04"}, "os_image must be one of"),
    ({"head_vm_size": "D4s_v5"}, "head_vm_size must be an Azure VM size"),
    ({"worker_vm_size": "Standard D4s v5"}, "worker_vm_size must be an Azure VM size"),
    ({"worker_vm_size": "Standard_" + "D" * 792}, "worker_vm_size must be an Azure VM size"),
    ({"scaling_mode": "memory"}, 'scaling_mode must be "cpu" or "ray"'),
    ({"scaling_mode": "Ray"}, 'scaling_mode must be "cpu" or "ray"'),
    ({"ray_idle_timeout_minutes": 0}, "ray_idle_timeout_minutes must be a whole number from 1"),
    ({"ray_idle_timeout_minutes": 1441}, "ray_idle_timeout_minutes must be a whole number"),
    ({"ray_idle_timeout_minutes": 2.5}, "ray_idle_timeout_minutes must be a whole number"),
    ({"autostop_idle_minutes": -1}, "autostop_idle_minutes must be 0 (autostop off) or a whole"),
    ({"autostop_idle_minutes": 1}, "autostop_idle_minutes must be 0 (autostop off) or a whole"),
    ({"autostop_idle_minutes": 9}, "autostop_idle_minutes must be 0 (autostop off) or a whole"),
    ({"autostop_idle_minutes": 10081}, "autostop_idle_minutes must be 0 (autostop off)"),
    ({"autostop_idle_minutes": 30.5}, "autostop_idle_minutes must be 0 (autostop off)"),
    ({"worker_min_count": -1}, "worker_min_count must be a whole number from 0 to 100"),
    ({"worker_min_count": 1.5}, "worker_min_count must be a whole number from 0 to 100"),
    ({"worker_default_count": 101}, "worker_default_count must be a whole number from 0 to 100"),
    ({"worker_max_count": 0}, "worker_max_count must be a whole number from 1 to 100"),
    ({"worker_max_count": 101}, "worker_max_count must be a whole number from 1 to 100"),
    ({"scale_out_cpu_percent": 0}, "scale_out_cpu_percent must be between 1 and 100"),
    ({"scale_out_cpu_percent": 101}, "scale_out_cpu_percent must be between 1 and 100"),
    ({"scale_in_cpu_percent": -1}, "scale_in_cpu_percent must be between 0 and 99"),
    ({"scale_in_cpu_percent": 100}, "scale_in_cpu_percent must be between 0 and 99"),
    ({"scale_out_cooldown_minutes": 0}, "scale_out_cooldown_minutes must be a whole number"),
    ({"scale_out_cooldown_minutes": 2.5}, "scale_out_cooldown_minutes must be a whole number"),
    ({"scale_in_cooldown_minutes": 61}, "scale_in_cooldown_minutes must be a whole number"),
    # the head on Spot
    ({"head_priority": "spot"}, "head_priority must be"),
    ({"head_priority": "Low"}, "head_priority must be"),
    (
        {"head_priority": "Spot", "head_max_price": 0},
        "head_max_price must be -1",
        "var.head_max_price",
    ),
    (
        {"head_priority": "Spot", "head_max_price": -0.5},
        "head_max_price must be -1",
        "var.head_max_price",
    ),
    (
        {"head_priority": "Spot", "head_max_price": 1000.5},
        "head_max_price must be -1",
        "var.head_max_price",
    ),
    ({"head_max_price": 0.5}, "head_max_price applies to a Spot head only"),
    ({"worker_termination_notice_minutes": 4}, "worker_termination_notice_minutes must be"),
    ({"worker_termination_notice_minutes": 16}, "worker_termination_notice_minutes must be"),
    (
        {"worker_automatic_repair_grace_period_minutes": 9},
        "worker_automatic_repair_grace_period_minutes must be a whole number from 10 to 90",
    ),
    (
        {"worker_automatic_repair_grace_period_minutes": 91},
        "worker_automatic_repair_grace_period_minutes must be a whole number from 10 to 90",
    ),
    (
        {"worker_automatic_repair_grace_period_minutes": 30.5},
        "worker_automatic_repair_grace_period_minutes must be a whole number from 10 to 90",
    ),
    (
        {"worker_automatic_repair_action": "Restart"},
        "worker_automatic_repair_action must be Replace or Reimage (Restart keeps",
    ),
    (
        {"worker_automatic_repair_action": "replace"},
        "worker_automatic_repair_action must be Replace or Reimage",
    ),
    ({"extra_pip_packages": ["minigrid 3.0.0"]}, "extra_pip_packages: each entry must be one"),
    ({"extra_pip_packages": ["it's"]}, "extra_pip_packages: each entry must be one"),
    ({"extra_pip_packages": ["back\\slash"]}, "extra_pip_packages: each entry must be one"),
    ({"extra_pip_packages": ["--index-url=https://x.example/"]}, "not pip options"),
    ({"extra_pip_packages": ["minigrid", "-e"]}, "not pip options"),
    ({"extra_pip_packages": ["-rrequirements.txt"]}, "not pip options"),
    (
        {"extra_pip_packages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_PIP_PACKAGES"] - 600)]},
        "extra_pip_packages must come to 1,024 characters or fewer",
    ),
    (
        {"extra_apt_packages": ["libosmesa6", "-oAPT::Get::AllowUnauthenticated=1"]},
        "Debian package name",
    ),
    ({"extra_apt_packages": ["libgl1 mesa"]}, "extra_apt_packages: each entry must be one Debian"),
    ({"extra_apt_packages": ["LibGL1"]}, "extra_apt_packages: each entry must be one Debian"),
    ({"extra_apt_packages": ["x"]}, "extra_apt_packages: each entry must be one Debian"),
    ({"extra_apt_packages": ["a;rm"]}, "extra_apt_packages: each entry must be one Debian"),
    (
        {"extra_apt_packages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_APT_PACKAGES"] - 600)]},
        "extra_apt_packages must come to 1,024 characters or fewer",
    ),
    ({"pip_index_url": "ftp://mirror.example/simple"}, "pip_index_url must be one http(s) URL"),
    ({"pip_index_url": "https://pypi.org/simple'"}, "pip_index_url must be one http(s) URL"),
    ({"pip_index_url": "https://pypi.org/ simple"}, "pip_index_url must be one http(s) URL"),
    (
        {"pip_index_url": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["PIP_INDEX_URL"] - 17)},
        "pip_index_url must be one http(s) URL",
    ),
    ({"torch_index_url": "download.pytorch.org/whl/cpu"}, "torch_index_url must be one http(s)"),
    ({"torch_index_url": "https://x\\y"}, "torch_index_url must be one http(s) URL"),
    ({"apt_source": "http://10.0.0.5/debian ./"}, "apt_source must be empty or one line"),
    ({"apt_source": "deb http://a ./\ndeb http://b ./"}, "apt_source must be empty or one line"),
    ({"apt_source": "deb 'http://a' ./"}, "apt_source must be empty or one line"),
    (
        {"apt_source": "deb http://a/" + "a" * (MAX_VALUE_LENGTHS["APT_SOURCE"] - 12)},
        "apt_source must be empty or one line",
    ),
    # worker_pools
    ({"worker_pools": {f"p{i}": {} for i in range(5)}}, "worker_pools: at most 4 pools"),
    ({"worker_pools": {"GPU": {}}}, "worker_pools: at most 4 pools with distinct names"),
    ({"worker_pools": {"gpu-": {}}}, "worker_pools: at most 4 pools with distinct names"),
    ({"worker_pools": {"a" * 11: {}}}, "worker_pools: at most 4 pools with distinct names"),
    ({"worker_pools": {"gpu": {"vm_size": "Standard NC4"}}}, "worker_pools: every vm_size must"),
    ({"worker_pools": {"gpu": {"vm_size": "Standard_" + "N" * 40}}}, "worker_pools: every vm_size"),
    (
        {"worker_pools": {"gpu": {"max_count": 0}}},
        "worker_pools: min_count and default_count must be whole numbers",
    ),
    (
        {"worker_pools": {"gpu": {"min_count": 101}}},
        "worker_pools: min_count and default_count must be whole numbers",
    ),
    (
        {"worker_pools": {"cpu": {"spot_enabled": True, "eviction_policy": "Stop"}}},
        "worker_pools: eviction_policy must be",
    ),
    (
        {"worker_pools": {"cpu": {"spot_enabled": True, "max_price": 0}}},
        "worker_pools: eviction_policy must be",
    ),
    (
        {"worker_pools": {"cpu": {"max_price": 0.5}}},
        "worker_pools: eviction_policy and max_price apply to Spot pools only",
    ),
    (
        {"worker_pools": {"cpu": {"eviction_policy": "Deallocate"}}},
        "worker_pools: eviction_policy and max_price apply to Spot pools only",
    ),
    ({"worker_pools": {"cpu": {"zones": ["4"]}}}, "worker_pools: zones must list distinct"),
    ({"worker_pools": {"cpu": {"zones": ["1", "1"]}}}, "worker_pools: zones must list distinct"),
    ({"worker_pools": {"cpu": {"zones": ["zone1"]}}}, "worker_pools: zones must list distinct"),
    (
        {"worker_pools": {"cpu": {"zones": ["1"], "zone_balance": True}}},
        "worker_pools: zone_balance needs two zones or more",
    ),
    ({"worker_pools": {"cpu": {"zone_balance": True}}}, "worker_pools: zone_balance needs two"),
    (
        {"worker_pools": {"cpu": {"orchestration_mode": "flexible"}}},
        "worker_pools: orchestration_mode must be",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Uniform",
                    "spot_enabled": True,
                    "priority_mix": {"base_regular_count": 1},
                }
            }
        },
        "worker_pools: priority_mix and instance_mix need orchestration_mode",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Uniform",
                    "instance_mix": {"vm_sizes": ["Standard_D4s_v5", "Standard_D4as_v5"]},
                }
            }
        },
        "worker_pools: priority_mix and instance_mix need orchestration_mode",
    ),
    (
        {"worker_pools": {"cpu": {"orchestration_mode": "Flexible", "priority_mix": {}}}},
        "worker_pools: priority_mix mixes regular VMs into a Spot pool",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Flexible",
                    "spot_enabled": True,
                    "priority_mix": {"regular_percentage_above_base": 101},
                }
            }
        },
        "worker_pools: priority_mix needs base_regular_count",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Flexible",
                    "spot_enabled": True,
                    "priority_mix": {"base_regular_count": -1},
                }
            }
        },
        "worker_pools: priority_mix needs base_regular_count",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Flexible",
                    "instance_mix": {"vm_sizes": ["Standard_D4s_v5"]},
                }
            }
        },
        "worker_pools: instance_mix needs 2-5 distinct",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Flexible",
                    "vm_size": "Standard_D4s_v5",
                    "instance_mix": {
                        "vm_sizes": ["Standard_D4s_v5", "Standard_D4as_v5"],
                        "allocation_strategy": "Prioritized",
                    },
                }
            }
        },
        "worker_pools: instance_mix needs 2-5 distinct",
    ),
    (
        {
            "worker_pools": {
                "cpu": {
                    "orchestration_mode": "Flexible",
                    "vm_size": "Standard_F8s_v2",
                    "instance_mix": {"vm_sizes": ["Standard_D4s_v5", "Standard_D4as_v5"]},
                }
            }
        },
        "worker_pools: instance_mix's vm_sizes must include the pool's vm_size",
    ),
    ({"worker_pools": {"cpu": {"ray_resources": {"CPU": 2}}}}, "worker_pools: ray_resources must"),
    (
        {"worker_pools": {"cpu": {"ray_resources": {"simulator": -1}}}},
        "worker_pools: ray_resources",
    ),
    ({"worker_pools": {"cpu": {"ray_resources": {"a b": 1}}}}, "worker_pools: ray_resources must"),
    ({"worker_pools": {"cpu": {"ray_resources": {"r" * 70: 1}}}}, "worker_pools: ray_resources"),
    ({"worker_pools": {"gpu": {"ray_labels": {"pool": "x"}}}}, "worker_pools: ray_labels must"),
    ({"worker_pools": {"gpu": {"ray_labels": {"a b": "x"}}}}, "worker_pools: ray_labels must"),
    ({"worker_pools": {"gpu": {"ray_labels": {"k": "v" * 70}}}}, "worker_pools: ray_labels must"),
    # checks.tf: rules that compare two inputs
    (
        {"worker_pools": {"gpu": {"min_count": 3, "default_count": 1}}},
        "worker_pools: every pool's counts must satisfy min_count <= default_count <= max_count",
        CHECKS,
    ),
    (
        {
            "subnet_address_prefix": "10.42.1.0/28",
            "worker_pools": {"a": {"max_count": 5}, "b": {"max_count": 5}},
        },
        "has room for 9 workers",
        CHECKS,
    ),
    (
        {"worker_min_count": 3, "worker_default_count": 2},
        "worker_min_count <= worker_default",
        CHECKS,
    ),
    (
        {"worker_default_count": 5, "worker_max_count": 4},
        "worker_min_count <= worker_default",
        CHECKS,
    ),
    (
        {"scale_in_cpu_percent": 70, "scale_out_cpu_percent": 70},
        "scale_in_cpu_percent (70) must be below scale_out_cpu_percent (70)",
        CHECKS,
    ),
    ({"subnet_address_prefix": "10.43.1.0/24"}, "must lie inside vnet_address_space", CHECKS),
    (
        {"vnet_address_space": "10.42.1.0/24", "subnet_address_prefix": "10.42.0.0/16"},
        "must lie inside vnet_address_space",
        CHECKS,
    ),
    # 16 addresses: Azure keeps 5, the head and the Key Vault's private endpoint take 2.
    (
        {"subnet_address_prefix": "10.42.1.0/28", "worker_max_count": 10},
        "has room for 9 workers",
        CHECKS,
    ),
    # the results storage's private endpoint takes one more address
    (
        {
            "subnet_address_prefix": "10.42.1.0/28",
            "worker_max_count": 9,
            "results_storage_account_id": RESULTS_ACCOUNT_ID,
        },
        "has room for 8 workers",
        CHECKS,
    ),
    # The vault's firewall must admit the deployer: only public addresses can be named.
    (
        {"allowed_ssh_cidrs": ["10.0.0.0/8"]},
        "The Key Vault's firewall would admit no address",
        CHECKS,
    ),
    (
        {"allowed_ssh_cidrs": ["192.168.1.0/24", "100.64.0.0/16"]},
        "The Key Vault's firewall would admit no address",
        CHECKS,
    ),
    # the Key Vault's variables
    ({"key_vault_allowed_cidrs": []}, "key_vault_allowed_cidrs must be null"),
    (
        {"key_vault_allowed_cidrs": ["203.0.113.07/32"]},
        "key_vault_allowed_cidrs: every entry must be an IPv4",
    ),
    ({"key_vault_allowed_cidrs": ["198.51.100.7/24"]}, "must be a network address whose host bits"),
    ({"key_vault_allowed_cidrs": ["0.0.0.0/0"]}, "key_vault_allowed_cidrs: every entry must be /8"),
    (
        {"key_vault_allowed_cidrs": ["11.0.0.0/8", "12.0.0.0/8"]},
        "key_vault_allowed_cidrs must cover at most 16,777,216 addresses",
    ),
    ({"key_vault_allowed_cidrs": ["10.1.0.0/16"]}, "firewall admits public addresses only"),
    ({"key_vault_allowed_cidrs": ["172.0.0.0/8"]}, "firewall admits public addresses only"),
    ({"key_vault_allowed_cidrs": ["100.64.0.1/32"]}, "firewall admits public addresses only"),
    ({"key_vault_allowed_cidrs": ["127.0.0.1/32"]}, "firewall admits public addresses only"),
    ({"cluster_token_version": 0}, "cluster_token_version must be a whole number from 1"),
    ({"cluster_token_version": 1.5}, "cluster_token_version must be a whole number from 1"),
    ({"cluster_token_expiration_days": 0}, "cluster_token_expiration_days must be a whole"),
    ({"cluster_token_expiration_days": 3651}, "cluster_token_expiration_days must be a whole"),
    ({"rbac_propagation_wait_seconds": -1}, "rbac_propagation_wait_seconds must be a whole"),
    ({"rbac_propagation_wait_seconds": 901}, "rbac_propagation_wait_seconds must be a whole"),
    ({"rbac_propagation_wait_seconds": 2.5}, "rbac_propagation_wait_seconds must be a whole"),
]

REFUSED = [_refused(*row) for row in _BAD]
"""The bad cases: the one table that test_terraform_validations.py plans case by case and
infra/terraform/tests/validations.tftest.hcl (made of it by scripts/terraform_validation_tests.py)
runs with `terraform test`; test_bicep_validations.py holds the Bicep stack to them too."""
BAD = [(r.variables, r.message) for r in REFUSED]
"""(variables, fragment of the expected error message) of each bad case."""

SPOT_CPU_POOL: dict[str, Any] = {
    "vm_size": "Standard_F8s_v2",
    "spot_enabled": True,
    "eviction_policy": "Deallocate",
    "max_price": 0.25,
    "max_count": 20,
    "ray_resources": {"simulator": 2},
}
"""A Spot CPU pool with a price cap and a Ray resource (a good case; test_bicep_validations.py
compares it, and GPU_POOL, across the stacks)."""
GPU_POOL: dict[str, Any] = {
    "vm_size": "Standard_NC4as_T4_v3",
    "min_count": 0,
    "default_count": 0,
    "max_count": 2,
    "ray_labels": {"accelerator": "t4"},
}
"""A GPU pool that scales from zero, labelled for Ray."""

GOOD: list[dict[str, Any]] = [
    {},  # the defaults
    {"results_storage_account_id": RESULTS_ACCOUNT_ID},
    {"results_storage_account_id": RESULTS_ACCOUNT_ID.replace("resourceGroups", "resourcegroups")},
    {"allowed_ssh_cidrs": ["203.0.113.7/32", "198.51.100.0/24", "192.0.2.128/25"]},
    # a whole /8, the most allowed in all (private: the vault then needs its own address)
    {"allowed_ssh_cidrs": ["10.0.0.0/8"], "key_vault_allowed_cidrs": ["203.0.113.7/32"]},
    {"allowed_ssh_cidrs": ["20.0.0.0/8"]},
    {"allowed_ssh_cidrs": ["255.255.255.255/32", "198.51.100.0/24"]},
    {"allowed_ssh_cidrs": ["10.0.0.0/9", "10.128.0.0/10", "203.0.113.7/32"]},
    {"key_vault_allowed_cidrs": ["203.0.113.7/32", "198.51.100.0/24", "20.0.0.0/9"]},
    {"key_vault_allowed_cidrs": None},
    {"cluster_token_version": 7, "cluster_token_expiration_days": 1},
    {"cluster_token_expiration_days": 3650, "rbac_propagation_wait_seconds": 0},
    {"rbac_propagation_wait_seconds": 900},
    {"admin_ssh_public_key": ED25519 + "\n"},
    {"admin_ssh_public_key": ED25519_REAL},
    {"admin_ssh_public_key": RSA_2048},
    {"admin_ssh_public_key": RSA_4096},
    {"admin_ssh_public_key": "  " + RSA_2048.split(" you@")[0] + "\n"},  # no comment
    {"location": "eastus2", "resource_group_name": "My_RG-(ray).1", "create_resource_group": False},
    {"name_prefix": "ab"},
    {"name_prefix": "ray-cluster-2026"},
    {"vnet_address_space": "10.0.0.0/8", "subnet_address_prefix": "10.200.0.0/16"},
    {"vnet_address_space": "192.168.0.0/24", "subnet_address_prefix": "192.168.0.16/28"},
    {"vnet_address_space": "192.168.0.0/16", "subnet_address_prefix": "192.168.255.0/24"},
    {"vnet_address_space": "172.16.0.0/12", "subnet_address_prefix": "172.31.255.0/24"},
    {"vnet_address_space": "100.64.0.0/10", "subnet_address_prefix": "100.127.255.0/24"},
    {"tcp_idle_timeout_minutes": 4},
    {"tcp_idle_timeout_minutes": 30},
    {"admin_username": "ray_ops"},
    {"admin_username": "rayadmin"},
    {"admin_username": "systemd"},
    {"admin_username": "a" * MAX_VALUE_LENGTHS["RAY_ADMIN_USER"]},
    {"os_image": "ubuntu-24.04"},
    {"os_image": "debian-12"},
    {"node_image_id": NODE_IMAGE_ID},
    {"node_image_id": NODE_IMAGE_ID.lower(), "create_image_gallery": True},
    {"head_vm_size": "Standard_NC4as_T4_v3", "worker_vm_size": "standard_f8s_v2"},
    {"head_priority": "Spot"},
    {"head_priority": "Spot", "head_max_price": 0.125},
    {"head_priority": "Spot", "head_max_price": 1000, "head_vm_size": "Standard_NC4as_T4_v3"},
    {"head_priority": "Regular", "head_max_price": -1},
    {"scaling_mode": "ray", "worker_min_count": 0, "worker_default_count": 0},
    {"scaling_mode": "ray", "ray_idle_timeout_minutes": 1},
    {"scaling_mode": "cpu", "ray_idle_timeout_minutes": 1440},
    {"autostop_idle_minutes": 0},
    {"autostop_idle_minutes": 10, "scaling_mode": "ray"},
    {"autostop_idle_minutes": 10080},
    {"worker_min_count": 0, "worker_default_count": 0, "worker_max_count": 1},
    # worker pools: a Spot CPU pool and a GPU pool; one pool named as before; ray mode
    {"worker_pools": {"cpu": SPOT_CPU_POOL, "gpu": GPU_POOL}},
    {"worker_pools": {"workers": {}}},
    # zones per pool: three balanced, one, and a regional pool beside them
    {
        "worker_pools": {
            "cpu": {"zones": ["1", "2", "3"], "zone_balance": True, "spot_enabled": True},
            "gpu": {"zones": ["2"]},
            "big": {"zones": []},
        }
    },
    # Flexible pools: plain, with Spot Priority Mix and Instance Mix in three zones, beside a
    # Uniform one
    {
        "worker_pools": {
            "flex": {"orchestration_mode": "Flexible"},
            "mix": {
                "orchestration_mode": "Flexible",
                "vm_size": "Standard_D4s_v5",
                "spot_enabled": True,
                "zones": ["1", "2", "3"],
                "priority_mix": {"base_regular_count": 1, "regular_percentage_above_base": 25},
                "instance_mix": {
                    "vm_sizes": ["Standard_D4s_v5", "Standard_D4as_v5", "Standard_D4ds_v5"],
                    "allocation_strategy": "CapacityOptimized",
                },
            },
            "uni": {"orchestration_mode": "Uniform"},
        }
    },
    # ... and the mixes on pools that leave the mode out (Flexible, the default)
    {
        "worker_pools": {
            "cpu": {
                "spot_enabled": True,
                "priority_mix": {"base_regular_count": 2},
                "instance_mix": {"vm_sizes": ["Standard_D4s_v5", "Standard_D4as_v5"]},
            },
        }
    },
    {"scaling_mode": "ray", "worker_pools": {"gpu": {"min_count": 0, "default_count": 0}}},
    # ray mode with several pools: a node type each (AUTOSCALER_POOLS)
    {
        "scaling_mode": "ray",
        "worker_pools": {
            "cpu": {"spot_enabled": True, "min_count": 0, "default_count": 0},
            "gpu": {"vm_size": "Standard_NC4as_T4_v3", "min_count": 0, "default_count": 0},
        },
    },
    {
        "worker_spot_enabled": True,
        "worker_pools": {
            "a": {"max_price": 1000},
            "b-2": {},
            "c": {},
            "d": {"eviction_policy": "Delete"},
        },
    },
    {"subnet_address_prefix": "10.42.1.0/28", "worker_max_count": 9},
    {"worker_min_count": 100, "worker_default_count": 100, "worker_max_count": 100},
    {"scale_out_cpu_percent": 100, "scale_in_cpu_percent": 99},
    {"scale_out_cooldown_minutes": 60, "scale_in_cooldown_minutes": 1},
    {"worker_spot_enabled": True, "worker_termination_notice_minutes": 15},
    {
        "worker_automatic_repair_grace_period_minutes": 10,
        "worker_automatic_repair_action": "Reimage",
    },
    {"worker_automatic_repair_grace_period_minutes": 90, "worker_automatic_repair_enabled": False},
    {"encryption_at_host_enabled": True, "tags": {"project": "ray-rl"}},
    {"extra_pip_packages": ["minigrid==3.0.0", "gymnasium[atari]>=1.0", "ale-py"]},
    {"extra_pip_packages": ["ale-py>=0.9,!=0.10.0", "torch-geometric==2.6.1"]},
    {"extra_pip_packages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_PIP_PACKAGES"] - 601)]},
    {"extra_apt_packages": ["libosmesa6", "libstdc++6", "python3.11-dev", "g++"]},
    {"extra_apt_packages": ["a" * 600, "b" * (MAX_VALUE_LENGTHS["EXTRA_APT_PACKAGES"] - 601)]},
    {"pip_index_url": "http://10.0.0.5:8080/simple/"},
    {"pip_index_url": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["PIP_INDEX_URL"] - 18)},
    {"torch_index_url": "https://download.pytorch.org/whl/cu128"},
    {"torch_index_url": "https://x.example/" + "a" * (MAX_VALUE_LENGTHS["TORCH_INDEX_URL"] - 18)},
    {"apt_source": "deb [trusted=yes] http://10.0.0.5/debian ./"},
    {"apt_source": "deb http://a/" + "a" * (MAX_VALUE_LENGTHS["APT_SOURCE"] - 13)},
]


def case_id(case: tuple[Any, ...] | dict[str, Any]) -> str:
    """A test id that is the same in every process that collects it (pytest-xdist's workers
    compare their collections): the keys made fresh for each run show their first 16
    characters only, which hold the key type."""
    variables = case[0] if isinstance(case, tuple) else case
    text = ",".join(f"{k}={json.dumps(v)}" for k, v in variables.items()) or "defaults"
    text = re.sub(r"([A-Za-z0-9+/]{16})[A-Za-z0-9+/=]{8,}", r"\1~", text)
    return text if len(text) < 60 else text[:57] + "..."


def console(work: Path, variables: dict[str, Any], expression: str) -> Any:
    """``expression`` evaluated by ``terraform console`` with the required inputs plus
    ``variables``."""
    var_file = work / "console.tfvars.json"
    var_file.write_text(json.dumps({**REQUIRED, **variables}))
    result = subprocess.run(
        ["terraform", "console", "-no-color", f"-var-file={var_file.name}"],
        input=f"jsonencode({expression})\n",
        cwd=work, env=terraform_env(work), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(json.loads(result.stdout))
