"""examples/pixels on the rehearsal cluster: simulators rendering into the workers' own `:99`.

The nodes get what miniworld needs (libglu1-mesa, Mesa, the pinned miniworld and pyglet) from
the rendered cloud-init alone: the job brings no packages. While it trains, the test finds the
simulator processes on the workers and proves where they render: their DISPLAY is `:99` and
their X connection ends at the worker's own ray-xvfb.service.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from driver import layout
from nodekit import render
from rehearsal_cluster import RehearsalCluster
from support import run_driver

pytestmark = [pytest.mark.slow, pytest.mark.rehearsal]

SID = f"pixels-rehearsal-{int(time.time())}"
"""Unique per session: a reused cluster (RAYDRIVER_REUSE_REHEARSAL) refuses a repeated id."""

PROBE = r"""
import json, os, re, subprocess
def environ(pid):
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(i.decode().split("=", 1) for i in raw if b"=" in i)
sims = []
for pid in os.listdir("/proc"):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if any(c.endswith(b"/simulator.py") for c in cmd) and b"--port" in cmd:
        sims.append(int(pid))
xvfb = int(subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", "ray-xvfb"],
                          capture_output=True, text=True).stdout.strip() or 0)
ss = subprocess.run(["ss", "-xpH"], capture_output=True, text=True).stdout
owner, peer = {}, {}
for line in ss.splitlines():
    parts = line.split()
    if len(parts) < 8:
        continue
    pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
    owner.setdefault(parts[5], set()).update(pids)
    peer[parts[5]] = parts[7]
out = []
for pid in sims:
    peers = set()
    for inode, pids in owner.items():
        if pid in pids:
            peers |= owner.get(peer[inode], set())
    try:  # a simulator may end while this looks (its job's last iteration is done)
        seen = {"pid": pid, "display": environ(pid).get("DISPLAY"),
                "user": os.stat(f"/proc/{pid}").st_uid,
                "x_server": xvfb if xvfb in peers else None}
    except OSError:
        continue
    out.append(seen)
print(json.dumps({"xvfb": xvfb, "xvfb_cmd": open(f"/proc/{xvfb}/cmdline").read().split("\0")
                  if xvfb else None, "simulators": out}))
"""


def probe(rehearsal: RehearsalCluster, ip: str) -> dict:
    code, out, err = rehearsal.ssh(ip, f"sudo -n python3 - <<'EOF'\n{PROBE}\nEOF", timeout=60)
    assert code == 0, out + err
    return json.loads(out.strip().splitlines()[-1])


def connected(got: dict | None) -> bool:
    return bool(got and got["simulators"] and all(s["x_server"] for s in got["simulators"]))


def test_pixels_trains_with_simulators_on_the_workers_virtual_displays(
    rehearsal: RehearsalCluster, tmp_path: Path
) -> None:
    # What miniworld needs comes with the nodes' rendered cloud-init, not with the job.
    worker_doc = render.document_files((render.rendered_dir() / "worker.yaml").read_text())
    assert "libglu1-mesa" in worker_doc[layout.OS_PACKAGES].split()
    # The rehearsal's image (a bare Debian 12, as an Azure image) does not have GLU: the
    # node's cloud-init installed it.
    image = Path(json.loads((rehearsal.dir / "state.json").read_text())["rootfs"])
    assert "Package: libglu1-mesa\n" not in (image / "var/lib/dpkg/status").read_text()
    for ip in rehearsal.worker_ips:
        code, out, err = rehearsal.ssh(
            ip,
            "dpkg-query -W -f='${Status}\\n' libglu1-mesa && "
            f"{layout.VENV_DIR}/bin/python -c 'import importlib.metadata as m; "
            'print(m.version("miniworld"), m.version("pyglet"))\'',
        )
        assert code == 0, out + err
        assert out.split("\n")[0] == "install ok installed"
        assert out.split("\n")[1] == "2.1.0 1.5.31"

    # Each worker offers one simulator slot per CPU.
    code, out, err = rehearsal.ssh(rehearsal.head_ip, "ray list nodes --format json")
    assert code == 0, err
    nodes = {n["node_ip"]: n for n in json.loads(out) if n["state"] == "ALIVE"}
    for ip in rehearsal.worker_ips:
        total = nodes[ip]["resources_total"]
        assert total[layout.SIMULATOR_RESOURCE] == total["CPU"] >= 1
    assert layout.SIMULATOR_RESOURCE not in nodes[rehearsal.head_ip]["resources_total"]

    home = tmp_path / "home"
    done: dict = {}

    def submit() -> None:
        done["r"] = run_driver(
            "submit",
            "--head",
            rehearsal.head,
            "-i",
            str(rehearsal.ssh_key),
            "--submission-id",
            SID,
            "examples/pixels/train.py",
            "--",
            "--num-env-runners",
            "2",
            "--envs-per-env-runner",
            "1",
            "--max-iterations",
            "2",
            "--train-batch-size",
            "400",
            home=home,
            timeout=2400,
        )

    job = threading.Thread(target=submit)
    job.start()
    seen: dict[str, dict] = {}
    on_head: list[dict] = []
    deadline = time.monotonic() + 2400
    while job.is_alive() and time.monotonic() < deadline:
        for ip in rehearsal.worker_ips:
            got = probe(rehearsal, ip)
            # A simulator opens its display a moment after it starts: keep looking until
            # every one seen on the worker has its X connection.
            if got["simulators"] and not connected(seen.get(ip)):
                seen[ip] = got
        on_head += probe(rehearsal, rehearsal.head_ip)["simulators"]
        if len(seen) == len(rehearsal.worker_ips) and all(map(connected, seen.values())):
            break
        time.sleep(3)
    job.join(2400)
    r = done["r"]
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    result = json.loads(
        next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :]
    )
    assert (result["iterations"], result["stopped_by"]) == (2, "max_iterations")
    assert result["node"] == rehearsal.head_ip
    assert result["checkpoint"] == f"{layout.RESULTS_DIR}/{SID}/checkpoint"

    # Simulators ran on the workers (on at least one), rendering into that worker's own :99.
    assert seen, "no simulator process was seen on any worker while the job ran"
    assert on_head == []  # none on the head (no simulator resource, no CPUs for runners)
    for ip, got in seen.items():
        assert got["xvfb"] and got["xvfb_cmd"][:2] == ["/usr/bin/Xvfb", layout.XVFB_DISPLAY]
        for sim in got["simulators"]:
            assert sim["display"] == layout.XVFB_DISPLAY, (ip, sim)
            assert sim["x_server"] == got["xvfb"], (ip, sim)  # connected to ray-xvfb's Xvfb
            assert sim["user"] != 0  # run by the ray user's env runner

    print("seen on the workers:", json.dumps(seen))
    # The env runners are gone with the job, and their simulators with them.
    for ip in rehearsal.worker_ips:
        for _ in range(30):
            if not probe(rehearsal, ip)["simulators"]:
                break
            time.sleep(2)
        assert not probe(rehearsal, ip)["simulators"], f"simulators left on {ip}"
