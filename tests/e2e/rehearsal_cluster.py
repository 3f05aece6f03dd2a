"""One rehearsal cluster per test run, booted the way a user boots it, torn down and checked.

The ``rehearsal`` fixture (session scope, in conftest.py) runs ``python -m driver rehearse up
--name pytest --workers 2`` from the committed rendered documents (the nodes boot from the node
image, baked once per install digest), hands the tests what they need to reach it, and at the end
runs ``rehearse down`` and asserts that no namespace, link, mount, process or folder of the cluster
is left (set RAYDRIVER_KEEP_REHEARSAL=1 to keep it running for a look after a failure). Tests reach
the nodes over real SSH as the admin user, like a person would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from driver.procs import pids_with_cmdline
from support import driver_timeout

NAME = os.environ.get("RAYDRIVER_E2E_NAME", "") or "pytest"
SUBNET = os.environ.get("RAYDRIVER_E2E_SUBNET", "") or "10.214.0.0/24"
"""The session's cluster (env RAYDRIVER_E2E_NAME / RAYDRIVER_E2E_SUBNET: another one, so that
two test runs on one machine do not take each other's)."""
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RehearsalCluster:
    name: str
    dir: Path
    head_ip: str
    worker_ips: tuple[str, ...]
    admin_user: str
    ssh_key: Path
    token: str
    netns: tuple[str, ...]

    @property
    def head(self) -> str:
        return f"{self.admin_user}@{self.head_ip}"

    def ssh(self, host: str, command: str, timeout: float = 300) -> tuple[int, str, str]:
        """Run ``command`` in a login shell on ``host`` as the admin user. A connection the
        node closes before it is made (seen once at a load of 15, in the key exchange) is tried
        again, twice at most; the command itself runs once."""
        for attempt in range(3):
            client = paramiko.SSHClient()
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # test hosts, fresh keys
            try:
                client.connect(
                    host,
                    username=self.admin_user,
                    key_filename=str(self.ssh_key),
                    timeout=15,
                    allow_agent=False,
                    look_for_keys=False,
                )
                break
            except (EOFError, paramiko.SSHException, ConnectionError):
                client.close()
                if attempt == 2:
                    raise
                time.sleep(2)
        try:
            _, out, err = client.exec_command(f"bash -lc {_quote(command)}", timeout=timeout)
            code = out.channel.recv_exit_status()
            return code, out.read().decode(), err.read().decode()
        finally:
            client.close()

    def ray_list(
        self, what: str, *, detail: bool = False, limit: int = 10000, timeout: float = 60
    ) -> list[dict[str, Any]]:
        """The rows ``ray list <what> --format json`` prints on the head, from Ray's state API
        (which the CLI calls; without ``detail`` the API leaves out the CLI's start and end
        times), asked of the head's dashboard with the cluster token by the node's own python3:
        ~0.2 s of CPU where the CLI takes ~1.6 s, for the tests that poll."""
        code, out, err = self.ssh(
            self.head_ip,
            f"python3 -c {_quote(_RAY_LIST)} {what} {limit} {int(detail)}",
            timeout=timeout,
        )
        if code != 0:
            raise RuntimeError(f"ray list {what} on the head: {err.strip()[-2000:]}")
        return list(json.loads(out))


_RAY_LIST = """
import json, os, sys, urllib.request
what, limit, detail = sys.argv[1:]
token = open(os.environ["RAY_AUTH_TOKEN_PATH"]).read().strip()
url = f"{os.environ['RAY_API_SERVER_ADDRESS']}/api/v0/{what}?limit={limit}&detail={detail}"
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the head's own port
with direct.open(request, timeout=30) as answer:
    reply = json.load(answer)
if not reply["result"]:
    sys.exit(reply["msg"])
print(json.dumps(reply["data"]["result"]["result"]))
"""


def results_container(url: str, ca: Path, token_key: bytes) -> Any:
    """The rehearsal's results container (Azurite on the bridge, ``url``: the container's URL),
    read and written from this machine with a token its metadata service would issue."""
    import time

    from azure.core.credentials import AccessToken
    from azure.storage.blob import ContainerClient

    from nodekit.rehearsal.standins.azure_node import STORAGE_RESOURCE, issue_token

    class Credential:
        def get_token(self, *scopes: str, **_: Any) -> AccessToken:
            token = issue_token(token_key, CLIENT_ID, "principal-test", STORAGE_RESOURCE)
            return AccessToken(token, int(time.time()) + 3600)

    account, container = url.rsplit("/", 1)
    return ContainerClient(account, container, credential=Credential(), connection_verify=str(ca))


CLIENT_ID = "5b0c9d7e-3f1a-4c2b-8e6d-0a9f8b7c6d5e"
"""The identity the tests' tokens name (a person's on a laptop, on Azure)."""


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def driver(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=driver_timeout(args, timeout),
        env=dict(os.environ),
    )


def leftovers(name: str, cluster_dir: Path) -> list[str]:
    """Anything of the cluster still on this machine: netns, links, mounts, processes, files."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"netns {ln.split()[0]}" for ln in netns.splitlines() if ln.startswith(f"rh-{name}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for ln in links.splitlines():
        link = ln.split(":")[1].strip().split("@")[0]
        if link == f"rh-{name}" or link.startswith(f"rh-{name}-"):
            found.append(f"link {link}")
    mounts = Path("/proc/mounts").read_text()
    found += [
        f"mount {m.split()[1]}"
        for m in mounts.splitlines()
        if m.split()[1].startswith(str(cluster_dir))
    ]
    found += [f"process {pid}" for pid in pids_with_cmdline(str(cluster_dir))]
    # The results storage's data is kept (documented), its server is not.
    results = cluster_dir.parent.parent / "results" / name
    found += [f"process {pid}" for pid in pids_with_cmdline(f"--location {results}")]
    if cluster_dir.exists():
        found.append(f"folder {cluster_dir}")
    return found


def down_and_check(cluster_dir: Path) -> None:
    state = json.loads((cluster_dir / "state.json").read_text())
    head_ip = next(n["ip"] for n in state["nodes"] if n["role"] == "head")
    down = driver("rehearse", "down", "--name", NAME, "--subnet", SUBNET, timeout=600)
    assert down.returncode == 0, down.stderr
    left = leftovers(NAME, cluster_dir)
    # The head's host keys `up` recorded for the driver go with the cluster (issue 19,
    # finding 7): the next `up` at this address gets new keys, and an old one would lock it out.
    known_hosts = Path(state["known_hosts"])
    left += [
        f"known_hosts line {ln[:60]}"
        for ln in (known_hosts.read_text().splitlines() if known_hosts.exists() else [])
        if ln.split() and head_ip in ln.split()[0].split(",")
    ]
    assert state["known_hosts"], "up recorded no host keys for the driver"
    assert left == [], f"rehearse down left things behind: {left}"
    # What `down` keeps, as documented: the results storage's data, outside the cluster folder
    # (the next `up` of this name serves it again); `down --delete-results` removes it too.
    results = cluster_dir.parent.parent / "results" / NAME
    if state.get("results_url"):
        assert results.is_dir() and any(results.iterdir()), f"down lost the results: {results}"
    again = driver(
        "rehearse", "down", "--name", NAME, "--subnet", SUBNET, "--delete-results", timeout=600
    )
    assert again.returncode == 0, again.stderr
    assert not results.exists(), f"down --delete-results left {results}"
