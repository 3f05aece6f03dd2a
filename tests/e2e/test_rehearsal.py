"""The committed cloud-init documents, booted for real: a head and two workers forming a Ray
cluster in Debian 12 containers (see tests/rehearsal_fixture.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest
import yaml

from driver import layout
from nodekit import render
from rehearsal_cluster import RehearsalCluster, leftovers
from support import REPO, error_lines

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]


def test_cloud_init_finished_without_errors_on_every_node(rehearsal: RehearsalCluster) -> None:
    for ip in (rehearsal.head_ip, *rehearsal.worker_ips):
        _, out, err = rehearsal.ssh(ip, "cloud-init status --format json")
        status = json.loads(out)
        assert status["status"] == "done", (ip, out, err)
        assert status["errors"] == [], (ip, status["errors"])
        _, out, _ = rehearsal.ssh(ip, "systemctl --failed --no-legend --plain")
        assert out.strip() == "", f"{ip} has failed units: {out}"
        _, out, _ = rehearsal.ssh(ip, f"cat {layout.READY_MARKER}")
        marker = json.loads(out)
        assert marker["ray_version"] == render.cluster_pins().versions["ray"]
        assert marker["node_ip"] == ip
        # The session's nodes boot from the node image (`rehearse up` bakes the install phase
        # once per digest): each found there the install its bootstrap expects and skipped it.
        # (The cold path: test_node_image.py's worker whose install digest differs installs at
        # boot; the bake runs the install phase on the bare root filesystem whenever it changes.)
        assert marker["install"] == "image", (ip, marker.get("install"))
        _, out, _ = rehearsal.ssh(ip, f"cat {layout.INSTALL_MARKER}")
        installed = json.loads(out)
        assert (
            installed["digest"] == marker["install_digest"] == _expected_install_digest(rehearsal)
        )
        assert installed["ray_version"] == render.cluster_pins().versions["ray"]
        assert installed["torch_version"].split("+")[0] == render.cluster_pins().versions["torch"]


def _expected_install_digest(rehearsal: RehearsalCluster) -> str:
    """What render.install_digest says for the committed bootstrap and this cluster's values."""
    from nodekit.rehearsal.cluster import Rehearsal

    bootstrap = render.document_files((REPO / "cloud-init/rendered/worker.yaml").read_text())[
        render.BOOTSTRAP_PATH
    ]
    inputs = next(
        ln.split("=", 1)[1]
        for ln in bootstrap.splitlines()
        if ln.startswith("INSTALL_INPUTS_DIGEST=")
    )
    cluster = Rehearsal(rehearsal.name)
    state = cluster.load()
    assert state is not None
    return render.install_digest(inputs, cluster.deploy_values(state))


def test_a_node_whose_image_holds_its_install_skips_it(rehearsal: RehearsalCluster) -> None:
    """The bootstrap run again on a worker that has its install (as a node booted from a baked
    image has it): it skips the install phase, configures and finds Ray registered."""
    ip = rehearsal.worker_ips[0]
    code, out, _ = rehearsal.ssh(
        ip, "sudo /usr/local/sbin/ray-cluster-bootstrap worker 2>&1", timeout=600
    )
    assert code == 0, out[-3000:]
    digest = _expected_install_digest(rehearsal)
    assert f"install: image holds digest {digest}, skipping" in out
    assert "phase install_" not in out and "install_torch" not in out
    _, ready, _ = rehearsal.ssh(ip, f"cat {layout.READY_MARKER}")
    marker = json.loads(ready)
    assert marker["install"] == "image" and marker["install_digest"] == digest
    assert not [k for k in marker["phases"] if k.startswith("install_")]
    assert marker["node_ip"] == ip


def test_workers_tell_the_health_extension_they_are_healthy(rehearsal: RehearsalCluster) -> None:
    """What the scale set's Application Health extension reads (from inside the VM): a worker
    whose Ray is ready says Healthy; the endpoint is not reachable from another node."""
    url = f"http://127.0.0.1:{layout.HEALTH_PORT}{layout.HEALTH_PATH}"
    probe = (
        "python3 -c 'import urllib.request; "
        f'print(urllib.request.urlopen("{url}", timeout=5).read().decode())\''
    )
    for ip in rehearsal.worker_ips:
        code, out, err = rehearsal.ssh(ip, probe)
        assert code == 0, (ip, err)
        answer = json.loads(out)
        assert answer["ApplicationHealthState"] == "Healthy", (ip, answer)
        # The extension's grace period ends at the latest 30 minutes after creation: an answer
        # stuck in Initializing on a ready worker would get it replaced.
        # ... and one that cannot see ray-worker.service fail would never be replaced.
        assert "ray-worker.service is active" in answer["Reason"], (ip, answer)
    head_to_worker = (
        f"timeout 5 bash -c 'exec 3<>/dev/tcp/{rehearsal.worker_ips[0]}/{layout.HEALTH_PORT}'"
    )
    code, _, _ = rehearsal.ssh(rehearsal.head_ip, head_to_worker)
    assert code != 0, "a worker's health endpoint answered another node"


def test_ray_status_shows_three_nodes_with_the_expected_cpus(
    rehearsal: RehearsalCluster,
) -> None:
    _, nproc, _ = rehearsal.ssh(rehearsal.worker_ips[0], "nproc")
    head_cpus = yaml.safe_load((REPO / "cloud-init" / "config.yaml").read_text())["head_num_cpus"]
    expected = head_cpus + len(rehearsal.worker_ips) * int(nproc)
    # `ray status` reads the autoscaler's view, which follows node registration by a few seconds
    # (a bound on a hang: on a loaded machine each `ray status` itself takes seconds).
    deadline = time.monotonic() + 300
    while True:
        code, out, err = rehearsal.ssh(rehearsal.head_ip, "ray status")
        assert code == 0, err
        active = out.split("Active:")[1].split("Pending:")[0]
        if len([ln for ln in active.splitlines() if "node_" in ln]) == 3:
            break
        assert time.monotonic() < deadline, f"ray status never showed 3 nodes:\n{out}"
        time.sleep(3)
    assert f"0.0/{expected:.1f} CPU" in out, out
    # Per node, from Ray's state API: the head carries the `head` resource, workers the CPUs.
    code, out, err = rehearsal.ssh(rehearsal.head_ip, "ray list nodes --format json")
    assert code == 0, err
    nodes = {n["node_ip"]: n for n in json.loads(out) if n["state"] == "ALIVE"}
    assert set(nodes) == {rehearsal.head_ip, *rehearsal.worker_ips}
    head = nodes[rehearsal.head_ip]
    assert head["is_head_node"] and head["resources_total"]["head"] == 1.0
    assert head["resources_total"].get("CPU", 0) == head_cpus
    for ip in rehearsal.worker_ips:
        assert nodes[ip]["resources_total"]["CPU"] == int(nproc)


WINDOW_PROBE = r"""
import json, ray, subprocess, time
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(logging_level="ERROR")

def xmessage():
    return subprocess.Popen(["xmessage", "-name", "rehearsal-probe", "hello from Ray"],
                            stderr=subprocess.PIPE, text=True)

@ray.remote(num_cpus=1)
def open_window():
    import os
    win = xmessage()
    try:
        # Up to 60 s: on a loaded machine (2 cores, three containers) xmessage can take more
        # than the 10 s this waited before (CI saw no window and no error once). A display that
        # cannot be opened is tried again within that time: ray-xvfb.service restarts the X
        # server 2 s after it ends (a loaded run saw "Can't open display" once).
        deadline = time.monotonic() + 60
        while True:
            tree = subprocess.run(["xwininfo", "-root", "-tree"], capture_output=True, text=True)
            if "rehearsal-probe" in tree.stdout:
                return {"display": os.environ.get("DISPLAY"), "window": True,
                        "node": ray.util.get_node_ip_address()}
            ended = win.poll() is not None
            if ended and time.monotonic() < deadline:
                err = win.stderr.read()
                if "open display" in err:
                    print("PROBE-RETRY " + err.strip(), flush=True)
                    time.sleep(1)
                    win = xmessage()
                    continue
                return {"display": os.environ.get("DISPLAY"), "window": False, "err": tree.stderr,
                        "xmessage_exit": win.poll(), "xmessage_err": err}
            if ended or time.monotonic() > deadline:
                return {"display": os.environ.get("DISPLAY"), "window": False,
                        "err": tree.stderr, "xmessage_exit": win.poll(),
                        "xmessage_err": win.stderr.read() if ended else ""}
            time.sleep(0.2)
    finally:
        win.kill()

worker = [n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == "WORKER_IP"][0]
strategy = NodeAffinitySchedulingStrategy(worker["NodeID"], soft=False)
print("PROBE " + json.dumps(ray.get(open_window.options(scheduling_strategy=strategy).remote())))
"""


def test_a_ray_task_opens_a_window_on_a_workers_virtual_display(
    rehearsal: RehearsalCluster,
) -> None:
    """A job (`ray job submit` in the admin's shell on the head) runs a task on a worker."""
    worker = rehearsal.worker_ips[1]
    script = WINDOW_PROBE.replace("WORKER_IP", worker)
    code, out, err = rehearsal.ssh(
        rehearsal.head_ip,
        f"mkdir -p /tmp/window-probe && cat > /tmp/window-probe/probe.py <<'EOF'\n{script}\nEOF\n"
        "ray job submit --working-dir /tmp/window-probe -- python probe.py",
    )
    assert code == 0, out[-3000:] + err
    line = next(ln for ln in out.splitlines() if ln.startswith("PROBE "))
    assert json.loads(line[len("PROBE ") :]) == {
        "display": layout.XVFB_DISPLAY,
        "window": True,
        "node": worker,
    }


def test_each_node_read_the_token_from_key_vault_not_from_custom_data(
    rehearsal: RehearsalCluster,
) -> None:
    """The token reaches a node only through Key Vault, read with the node's managed identity
    via its own metadata service; the user data (custom data on Azure) does not hold it."""
    nodes = sorted((rehearsal.dir / "nodes").iterdir())
    assert len(nodes) == 1 + len(rehearsal.worker_ips)
    client_id = json.loads((rehearsal.dir / "state.json").read_text())["identity_client_id"]
    for node in nodes:
        root = node / "root"
        assert (root / layout.TOKEN_FILE.lstrip("/")).read_text() == rehearsal.token, node.name
        user_data = (root / "var/lib/cloud/seed/nocloud/user-data").read_text()
        assert rehearsal.token not in user_data
        deploy = (root / layout.DEPLOY_VALUES.lstrip("/")).read_text()
        assert rehearsal.token not in deploy
        assert json.loads(deploy)["IDENTITY_CLIENT_ID"] == client_id
        calls = [
            json.loads(line) for line in (node / "imds" / "requests.jsonl").read_text().splitlines()
        ]
        # The vault's token, with the node's identity (jobs also ask for storage tokens now:
        # the results storage is on, so the last call need not be the vault's).
        token_calls = [c for c in calls if c["path"] == "/metadata/identity/oauth2/token"]
        vault = [c for c in token_calls if c["query"]["resource"] == "https://vault.azure.net"]
        assert vault and all(c["query"]["client_id"] == client_id for c in vault), vault
    vault_calls = [
        json.loads(line)
        for line in (rehearsal.dir / "azure" / "vault" / "requests.jsonl").read_text().splitlines()
    ]
    readers = {c["client"] for c in vault_calls if c["path"] == "/secrets/ray-cluster-token"}
    # Every node read it; any other reader is a node the session added and removed again
    # (test_node_image.py's worker), never the host.
    assert {rehearsal.head_ip, *rehearsal.worker_ips} <= readers
    state = json.loads((rehearsal.dir / "state.json").read_text())
    subnet = ipaddress.ip_network(state["subnet"])
    host = state["host_ip"]
    assert all(ipaddress.ip_address(r) in subnet and r != host for r in readers), readers
    assert all(c["authorization"] for c in vault_calls)


SANDBOX_PROBE = r"""
import json, os, ray, subprocess
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

def attempts():
    def write(path):
        try:
            with open(path, "w") as f:
                f.write("x")
            os.remove(path)
            return "written"
        except OSError as e:
            return type(e).__name__
    def listing(path):
        try:
            return sorted(os.listdir(path))
        except OSError as e:
            return type(e).__name__
    sudo = subprocess.run(["sudo", "-n", "true"], capture_output=True, text=True)
    status = open("/proc/self/status").read()
    return {
        "/etc": write("/etc/pwned"),
        "/usr/local/bin": write("/usr/local/bin/pwned"),
        "venv": write("/opt/ray-cluster/venv/pwned"),
        "/root": write("/root/pwned"),
        "home": listing("/home"),
        "results": write("/var/lib/ray-cluster/results/sandbox-probe"),
        "tmp": write("/tmp/sandbox-probe"),
        "sudo": sudo.returncode,
        "no_new_privs": "NoNewPrivs:	1" in status,
        "node": ray.util.get_node_ip_address(),
    }

ray.init(logging_level="ERROR")
probe = ray.remote(num_cpus=1)(attempts)
worker = [n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == "WORKER_IP"][0]
strategy = NodeAffinitySchedulingStrategy(worker["NodeID"], soft=False)
print("PROBE " + json.dumps({"driver": attempts(),
      "task": ray.get(probe.options(scheduling_strategy=strategy).remote())}))
"""


def test_jobs_cannot_write_outside_their_paths(rehearsal: RehearsalCluster) -> None:
    """The Ray units' systemd sandbox, on the head (the job's driver) and on a worker (a task):
    the system, the admin's home and the environment are read-only or hidden, no privilege can
    be gained; results and /tmp stay writable."""
    worker = rehearsal.worker_ips[0]
    script = SANDBOX_PROBE.replace("WORKER_IP", worker)
    code, out, err = rehearsal.ssh(
        rehearsal.head_ip,
        "mkdir -p /tmp/sandbox-probe-job && "
        f"cat > /tmp/sandbox-probe-job/probe.py <<'EOF'\n{script}\nEOF\n"
        "ray job submit --working-dir /tmp/sandbox-probe-job -- python probe.py",
    )
    assert code == 0, out[-3000:] + err
    line = next(ln for ln in out.splitlines() if ln.startswith("PROBE "))
    seen = json.loads(line[len("PROBE ") :])
    assert seen["task"]["node"] == worker
    for where in ("driver", "task"):
        got = seen[where]
        for path in ("/etc", "/usr/local/bin", "venv"):
            assert got[path] == "OSError", (where, path, got)  # EROFS: read-only file system
        assert got["/root"] in ("PermissionError", "OSError"), (where, got)
        assert got["home"] == "PermissionError", (where, got)  # ProtectHome: out of reach
        assert (got["results"], got["tmp"]) == ("written", "written"), (where, got)
        assert got["sudo"] != 0 and got["no_new_privs"] is True, (where, got)


def test_ssh_takes_the_users_key_and_refuses_passwords(rehearsal: RehearsalCluster) -> None:
    code, out, _ = rehearsal.ssh(rehearsal.head_ip, "id -un; id -Gn")
    assert code == 0
    user, groups = out.split("\n")[:2]
    assert user == rehearsal.admin_user
    assert "ray" in groups.split()  # so it may read the token and the results
    transport = paramiko.Transport((rehearsal.head_ip, 22))
    try:
        transport.connect()
        with pytest.raises(paramiko.BadAuthenticationType) as e:
            transport.auth_password(rehearsal.admin_user, "any-password")
        assert e.value.allowed_types == ["publickey"]
    finally:
        transport.close()
    # A wrong key is refused too.
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    with pytest.raises(paramiko.AuthenticationException):
        client.connect(
            rehearsal.head_ip,
            username=rehearsal.admin_user,
            pkey=paramiko.ECDSAKey.generate(),
            allow_agent=False,
            look_for_keys=False,
            timeout=15,
        )
    client.close()


def _connect_from_netns(netns: str, host: str, port: int) -> str:
    code = (
        "import socket; s = socket.socket(); s.settimeout(5)\n"
        f"try:\n    s.connect(({host!r}, {port})); print('open')\n"
        "except OSError as e:\n    print(type(e).__name__)\n"
    )
    p = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return p.stdout.strip()


def test_jobs_api_is_not_reachable_from_a_worker(rehearsal: RehearsalCluster) -> None:
    worker_ns = rehearsal.netns[1]
    assert (
        _connect_from_netns(worker_ns, rehearsal.head_ip, layout.RAY_DASHBOARD_PORT)
        == "ConnectionRefusedError"
    )
    assert (
        _connect_from_netns(worker_ns, rehearsal.head_ip, layout.TENSORBOARD_PORT)
        == "ConnectionRefusedError"
    )
    # The GCS is reachable from workers (they join there), and the Jobs API is up on loopback.
    assert _connect_from_netns(worker_ns, rehearsal.head_ip, layout.RAY_GCS_PORT) == "open"
    _, out, _ = rehearsal.ssh(
        rehearsal.head_ip,
        'python -c "import urllib.request as u; '
        f"print(u.urlopen('http://127.0.0.1:{layout.RAY_DASHBOARD_PORT}/api/gcs_healthz')"
        '.status)"',
    )
    assert out.strip() == "200", out


def test_a_ray_client_without_the_token_is_refused(rehearsal: RehearsalCluster) -> None:
    worker = rehearsal.worker_ips[0]
    address = f"{rehearsal.head_ip}:{layout.RAY_GCS_PORT}"
    code, out, err = rehearsal.ssh(
        worker,
        f"env -u RAY_AUTH_TOKEN_PATH -u RAY_AUTH_TOKEN RAY_AUTH_MODE=token HOME=/tmp "
        f"timeout 120 ray status --address {address}",
    )
    assert code != 0
    assert "InvalidAuthToken" in out + err or "token" in (out + err).lower()
    code, out, err = rehearsal.ssh(
        worker,
        f"echo -n wrong-token-0123456789abcdef0123456789 > /tmp/bad; "
        f"RAY_AUTH_TOKEN_PATH=/tmp/bad timeout 120 ray status --address {address}",
    )
    assert code != 0 and "InvalidAuthToken" in out + err, out + err
    # The same client with the cluster's token gets in.
    code, out, err = rehearsal.ssh(worker, f"timeout 120 ray status --address {address}")
    assert code == 0 and "Active:" in out, err
    # And the Jobs API over the head's loopback refuses a request without the token.
    code, out, _ = rehearsal.ssh(
        rehearsal.head_ip,
        'python -c "import urllib.request as u, urllib.error as e\n'
        f"try: u.urlopen('http://127.0.0.1:{layout.RAY_DASHBOARD_PORT}/api/jobs/'); print(200)\n"
        'except e.HTTPError as x: print(x.code)"',
    )
    assert out.strip() == "401"


_REACHABLE_ANSWERS = r"""
import json, sys, urllib.error, urllib.request
LOOPBACK = ("0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F")
ports = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port = local.split(":")
        if state == "0A" and address not in LOOPBACK:  # listening, reachable from elsewhere
            ports.add(int(port, 16))
answers = {}
for port in sorted(ports):
    try:
        with urllib.request.urlopen(f"http://{sys.argv[1]}:{port}/metrics", timeout=5) as r:
            answers[port] = f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        answers[port] = f"HTTP {e.code}"
    except Exception as e:  # gRPC, SSH, closed, reset, timed out
        answers[port] = type(e).__name__
print(json.dumps(answers))
"""
"""Each TCP port that listens on a node's address (not its loopback) and what a plain HTTP
request for ``/metrics`` without the token gets there, from the node itself: JSON."""


def test_nothing_another_vm_can_reach_answers_without_the_token(
    rehearsal: RehearsalCluster,
) -> None:
    """Ray's Prometheus endpoints answer anyone: each node's agent, and the head's dashboard
    (44227) and autoscaler monitor (44217). The nodes run Ray without them
    (layout.RAY_NO_METRICS_ENV), so every port another VM of the network can reach (Ray's GCS,
    raylet, agents and workers, SSH) refuses a request without the token."""
    for ip in (rehearsal.head_ip, rehearsal.worker_ips[0]):
        code, out, err = rehearsal.ssh(ip, f"python3 -c {shlex.quote(_REACHABLE_ANSWERS)} {ip}")
        assert code == 0, err
        answers = {int(port): answer for port, answer in json.loads(out).items()}
        assert 22 in answers, answers  # the check found the node's listeners
        if ip == rehearsal.head_ip:
            assert layout.RAY_GCS_PORT in answers, answers
        assert not {p: a for p, a in answers.items() if a.startswith("HTTP 2")}, (ip, answers)


def test_a_worker_refuses_a_head_with_another_python(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    """The preflight every worker runs before joining, run from this machine's own Python."""
    files = render.document_files((REPO / "cloud-init/rendered/worker.yaml").read_text())
    check = tmp_path / "node_check.py"
    check.write_text(files[render.NODE_CHECK_PATH])
    token = tmp_path / "token"
    token.write_text(rehearsal.token)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env.pop("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", None)
    head = f"{rehearsal.head_ip}:{layout.RAY_GCS_PORT}"
    _, node_python, _ = rehearsal.ssh(
        rehearsal.head_ip, "python -c 'import platform; print(platform.python_version())'"
    )
    p = subprocess.run(
        [sys.executable, str(check), "preflight", "--head", head],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    import platform

    if platform.python_version() != node_python.strip():
        assert p.returncode == 78, p.stdout + p.stderr
        assert p.stdout.strip() == (
            f"refusing to join the Ray head at {head}: it runs Ray "
            f"{render.cluster_pins().versions['ray']} with Python {node_python.strip()}, this "
            f"node has Ray {render.cluster_pins().versions['ray']} with Python "
            f"{platform.python_version()}"
        )
    # Relaxed to the minor version (Ray's own switch), the same node may join.
    p = subprocess.run(
        [sys.executable, str(check), "preflight", "--head", head],
        capture_output=True,
        text=True,
        timeout=180,
        env={**env, "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor"},
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_down_cleans_up_after_a_failed_up(rehearsal: RehearsalCluster) -> None:
    """`up` that fails half-way (its package server cannot bind) leaves what `down` removes."""
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "driver", "rehearse"]
    try:
        up = subprocess.run(
            [
                *cmd,
                "up",
                "--name",
                "rhfail",
                "--workers",
                "1",
                "--subnet",
                "10.219.0.0/24",
                "--http-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=REPO,
        )
    finally:
        busy.close()
    assert up.returncode == 2
    assert error_lines(up.stderr)[-1].startswith("error: the package server on 10.219.0.1")
    from nodekit.rehearsal.cluster import Rehearsal

    cluster_dir = Rehearsal("rhfail").dir
    assert leftovers("rhfail", cluster_dir) != []  # the failed up did leave something
    down = subprocess.run(
        [*cmd, "down", "--name", "rhfail", "--subnet", "10.219.0.0/24"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    assert down.returncode == 0, down.stderr
    assert leftovers("rhfail", cluster_dir) == []


def test_up_recorded_the_heads_current_host_keys_for_the_driver_and_openssh(
    rehearsal: RehearsalCluster,
) -> None:
    """Every `rehearse up` boots a head with new host keys at the same address (issue 19,
    finding 7): `up` puts exactly the keys on the head's disk into the driver's known_hosts and
    the cluster folder's (in place of any earlier key for that address), so the driver and the
    printed `ssh` line reach it with strict checking; `down` takes them away again (checked by
    the session's teardown, down_and_check). Up replaces and down removes: a second up with the
    same name starts from no key for the address, without booting twice here."""
    from driver import hostkeys
    from nodekit.rehearsal import trust

    state = json.loads((rehearsal.dir / "state.json").read_text())
    head_root = Path(next(n["dir"] for n in state["nodes"] if n["role"] == "head")) / "root"
    on_disk = sorted(trust.head_keys(head_root))
    for known_hosts in (hostkeys.default_file(), rehearsal.dir / trust.KNOWN_HOSTS):
        recorded = sorted(
            (f[1], f[2])
            for f in (ln.split() for ln in known_hosts.read_text().splitlines())
            if len(f) >= 3 and rehearsal.head_ip in f[0].split(",")
        )
        assert recorded == on_disk, (known_hosts, recorded, on_disk)
    target = f"{rehearsal.admin_user}@{rehearsal.head_ip}"
    r = subprocess.run(
        [sys.executable, "-m", "driver", "ssh", "--head", target, "-i", str(rehearsal.ssh_key),
         "--strict-host-keys", "--", "true"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    ssh = subprocess.run(
        ["ssh", "-i", str(rehearsal.ssh_key), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={rehearsal.dir / trust.KNOWN_HOSTS}",
         "-o", "StrictHostKeyChecking=yes", target, "true"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ssh.returncode == 0, ssh.stderr[-2000:]


def test_add_worker_scales_the_running_cluster_out(rehearsal: RehearsalCluster) -> None:
    """`rehearse add-worker` boots one more worker that joins the running head (a scale-out),
    from the cluster's node image, as a scale set's new VM boots from the stacks' image id.
    (The suite's cold-path boot, installing at boot: test_node_image.py.)

    Last in this module: the cluster has one more node afterwards."""
    p = subprocess.run(
        [sys.executable, "-m", "driver", "rehearse", "add-worker", "--name", rehearsal.name],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    new_ip = p.stdout.strip().split("@")[-1]
    assert new_ip not in (rehearsal.head_ip, *rehearsal.worker_ips)
    _, out, _ = rehearsal.ssh(new_ip, f"cat {layout.READY_MARKER}")
    marker = json.loads(out)
    assert marker["install"] == "image", marker.get("install")
    assert marker["install_digest"] == _expected_install_digest(rehearsal)
    assert marker["node_ip"] == new_ip
    # Its disk is the image layer over the bare root filesystem, its own writes above them.
    state = json.loads((rehearsal.dir / "state.json").read_text())
    root = next(f"{n['dir']}/root" for n in state["nodes"] if n["ip"] == new_ip)
    mount = next(m for m in Path("/proc/mounts").read_text().splitlines() if m.split()[1] == root)
    lower = mount.split()[3].split("lowerdir=")[1].split(",")[0]
    assert lower == f"{state['image']}:{state['rootfs']}", lower
    code, out, err = rehearsal.ssh(rehearsal.head_ip, "ray list nodes --format json")
    assert code == 0, err
    alive = {n["node_ip"] for n in json.loads(out) if n["state"] == "ALIVE"}
    assert alive == {rehearsal.head_ip, *rehearsal.worker_ips, new_ip}
