"""The bootstrap's two phases and the image customizer (cloud-init/rendered/install.sh).

The customizer must be the install phase of the rendered bootstrap, not a copy: it is run here
(``--files-only``, which writes the files and installs nothing) and what it writes is compared,
byte for byte and mode for mode, with the files of both rendered documents (those of their
archives). The install digest and the skip decision are the bootstrap's own shell code, cut out
of the rendered script and run with bash.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from driver import layout
from node_support import probe_tree
from nodekit import render
from support import REPO

RENDERED = REPO / "cloud-init" / "rendered"
CUSTOMIZER = RENDERED / render.CUSTOMIZER
INSTALL_START = "# ---- The INSTALL phase"
INSTALL_END = "# ---- end of the INSTALL phase"


def _documents() -> dict[str, str]:
    return {role: (RENDERED / f"{role}.yaml").read_text() for role in render.ROLES}


def _node_files(text: str) -> dict[str, dict]:
    """A document's files by path (its write_files and its archive's, as the node has them),
    with their contents and modes."""
    modes = render.document_permissions(text)
    return {
        path: {"content": content, "permissions": modes[path]}
        for path, content in render.document_files(text).items()
    }


def _bootstrap() -> str:
    return render.document_files(_documents()["worker"])[render.BOOTSTRAP_PATH]


def _install_code(bootstrap: str) -> str:
    start, end = bootstrap.index(INSTALL_START), bootstrap.index(INSTALL_END)
    return bootstrap[start:end]


def _customizer_files(tmp_path: Path) -> dict[str, tuple[bytes, int]]:
    root = tmp_path / "root"
    root.mkdir()
    p = subprocess.run(
        ["bash", str(CUSTOMIZER), "--files-only", str(root)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    return {
        "/" + str(f.relative_to(root)): (f.read_bytes(), stat.S_IMODE(f.stat().st_mode))
        for f in root.rglob("*")
        if f.is_file()
    }


# -- the customizer is the install phase of the rendered documents --------------------------------
def test_the_customizer_writes_the_documents_install_files_byte_for_byte(tmp_path: Path) -> None:
    written = _customizer_files(tmp_path)
    install_code = _install_code(_bootstrap())
    for role, text in _documents().items():
        files = _node_files(text)
        # Every file of the document that the install phase reads (it names it), and the
        # bootstrap that runs it.
        read = {p for p in files if p in install_code} | {render.BOOTSTRAP_PATH}
        assert {layout.OS_PACKAGES, render.LOCK_PATH, render.AUTOSCALER_LOCK_PATH} <= read
        assert read <= set(written), f"{role}: the customizer does not write {read - set(written)}"
        for path, (content, mode) in written.items():
            assert path in files, f"{path} is in the image but not in {role}.yaml"
            assert content == files[path]["content"].encode(), f"{role}: {path} differs"
            assert mode == int(files[path]["permissions"], 8), f"{role}: {path}'s mode differs"
    # Nothing of one deployment goes into the image.
    assert layout.DEPLOY_VALUES not in written and layout.TOKEN_FILE not in written


def test_the_customizer_runs_the_install_phase_of_that_bootstrap() -> None:
    script = CUSTOMIZER.read_text()
    commands = [ln for ln in script.splitlines() if ln and not ln.startswith(("#", " "))]
    assert commands[-1] == f'{render.BOOTSTRAP_PATH} install "$values"'
    bootstrap = _bootstrap()
    assert bootstrap.startswith("#!/bin/bash\n")
    # The same bootstrap in both documents: the install phase knows no role.
    heads = render.document_files(_documents()["head"])[render.BOOTSTRAP_PATH]
    assert heads == bootstrap
    assert "$ROLE" not in _install_code(bootstrap) and "role" not in _install_code(bootstrap)


def test_the_customizer_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    for args in (["--files-only"], ["--files-only", str(tmp_path / "none")], ["a", "b"]):
        p = subprocess.run(["bash", str(CUSTOMIZER), *args], capture_output=True, text=True)
        assert p.returncode == 64 and p.stderr.startswith("usage: install.sh"), (args, p.stderr)
        assert len(p.stderr.splitlines()) == 1
    if os.geteuid() != 0:
        p = subprocess.run(["bash", str(CUSTOMIZER)], capture_output=True, text=True)
        assert p.returncode == 1 and "run it as root" in p.stderr


def test_the_customizers_default_values_are_the_stacks_defaults() -> None:
    script = CUSTOMIZER.read_text()
    block = script[script.index("defaults = {") : script.index("}\n", script.index("defaults = {"))]
    found = dict(re.findall(r'^    "([A-Z_]+)": (".*"),$', block, re.M))
    assert list(found) == list(render.INSTALL_VALUE_NAMES)
    defaults = render.deploy_value_defaults()
    assert {n: json.loads(v) for n, v in found.items()} == {
        n: defaults[n] for n in render.INSTALL_VALUE_NAMES
    }


# -- the install phase needs nothing of one cluster, and no running systemd ------------------------
def test_the_install_phase_runs_no_service_and_reads_only_install_values() -> None:
    code = "\n".join(
        ln for ln in _install_code(_bootstrap()).splitlines() if not ln.lstrip().startswith("#")
    )
    assert "systemctl" not in code and "service " not in code
    others = set(render.deploy_value_names()) - set(render.INSTALL_VALUE_NAMES)
    used = {n for n in render.deploy_value_names() if f"${n}" in code or f"${{{n}" in code}
    assert used and not used & others, f"the install phase reads {used & others}"
    assert set(render.INSTALL_DIGEST_VALUES) <= set(render.INSTALL_VALUE_NAMES)
    assert set(render.INSTALL_VALUE_NAMES) <= set(render.deploy_value_names())


# -- the install digest ----------------------------------------------------------------------------
def _bash(snippet: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The rendered install code with the bootstrap's helpers as stubs, then ``snippet``."""
    bootstrap = _bootstrap()
    digest = re.search(r"^INSTALL_INPUTS_DIGEST=([0-9a-f]{64})$", bootstrap, re.M)
    assert digest, "the bootstrap no longer carries INSTALL_INPUTS_DIGEST"
    prelude = (
        "set -Eeuo pipefail\n"
        'log() { echo "LOG: $*" >&2; }\nfail() { echo "FAIL: $*" >&2; exit 1; }\n'
        'phase() { :; }\nretry() { "$@"; }\n'
        f"INSTALL_INPUTS_DIGEST={digest.group(1)}\n"
    )
    return subprocess.run(
        ["bash", "-c", prelude + _install_code(bootstrap) + snippet],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _values(**changes: str) -> dict[str, str]:
    values = {n: render.deploy_value_defaults()[n] for n in render.INSTALL_VALUE_NAMES}
    return {**values, **changes}


def _inputs_digest() -> str:
    m = re.search(r"^INSTALL_INPUTS_DIGEST=([0-9a-f]{64})$", _bootstrap(), re.M)
    assert m
    return m.group(1)


@pytest.mark.parametrize(
    "values",
    [
        _values(),
        _values(EXTRA_PIP_PACKAGES="minigrid==3.0.0 ale-py", EXTRA_APT_PACKAGES="libosmesa6"),
        _values(TORCH_INDEX_URL="https://download.pytorch.org/whl/cu128"),
    ],
)
@pytest.mark.parametrize(("gpus", "kind"), [(0, "none"), (2, "nvidia")])
def test_the_shell_digest_is_render_install_digest(
    tmp_path: Path, values: dict[str, str], gpus: int, kind: str
) -> None:
    root = probe_tree(tmp_path / "node", gpus=gpus)
    p = _bash(
        'detect_gpu\necho "$NODE_GPU $NODE_GPU_COUNT $(install_digest)"',
        env={**values, "RAY_NODE_PROBE_ROOT": str(root)},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [
        kind,
        str(gpus),
        render.install_digest(_inputs_digest(), values, kind),
    ]


def test_the_digest_moves_with_every_install_input_and_only_with_those() -> None:
    base = render.install_digest(_inputs_digest(), _values())
    for name in render.INSTALL_DIGEST_VALUES:
        assert render.install_digest(_inputs_digest(), _values(**{name: "x"})) != base, name
    # An image baked without a GPU is not a GPU node's install (no driver, no CUDA lock).
    assert render.install_digest(_inputs_digest(), _values(), "nvidia") != base
    # Where packages come from is no part of what is installed (the lock holds the hashes).
    same = _values(PIP_INDEX_URL="http://10.0.0.5/simple/", APT_SOURCE="deb http://m/ ./")
    assert render.install_digest(_inputs_digest(), same) == base


@pytest.mark.parametrize(
    "config",
    [
        {"os_packages": ["python3-venv", "xvfb"]},
        {"env_packages": ["minigrid==3.0.0"]},
        {"uv_version": "0.13.8"},
    ],
)
def test_the_render_time_digest_moves_with_the_install_inputs(config: dict) -> None:
    ours = render.render()
    theirs = render.render({**render.load_config(), **config})
    digests = [
        re.search(
            r"^INSTALL_INPUTS_DIGEST=(\S+)$",
            render.document_files(d["worker.yaml"])[render.BOOTSTRAP_PATH],
            re.M,
        ).group(1)  # type: ignore[union-attr]
        for d in (ours, theirs)
    ]
    assert digests[0] != digests[1]
    # The configure part alone (here: the head's CPUs) leaves an image's install valid.
    other = render.render({**render.load_config(), "head_num_cpus": 3})
    assert re.search(
        rf"^INSTALL_INPUTS_DIGEST={digests[0]}$",
        render.document_files(other["worker.yaml"])[render.BOOTSTRAP_PATH],
        re.M,
    )


# -- install or skip -------------------------------------------------------------------------------
def _decide(
    tmp_path: Path, marker: str | None, venv: bool, gpus: int = 0, **values: str
) -> tuple[str, str]:
    """Run the bootstrap's install_or_skip with a stub install: (INSTALL_KIND, its log)."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    venv_dir = tmp_path / "venv"
    if venv:
        (venv_dir / "bin").mkdir(parents=True, exist_ok=True)
        (venv_dir / "bin" / "python").write_text("#!/bin/sh\n")
        (venv_dir / "bin" / "python").chmod(0o755)
    if marker is not None:
        (state / "installed.json").write_text(marker)
    root = tmp_path / "node"
    if not root.exists():
        probe_tree(root, gpus=gpus)
    snippet = (
        f"INSTALL_MARKER={state}/installed.json\nVENV={venv_dir}\n"
        'install_phase() { echo "STUB INSTALL" >&2; }\n'
        'detect_gpu\ninstall_or_skip\necho "$INSTALL_KIND $EXPECTED_DIGEST"\n'
    )
    p = _bash(snippet, env={**_values(**values), "RAY_NODE_PROBE_ROOT": str(root)})
    assert p.returncode == 0, p.stderr
    kind, digest = p.stdout.split()
    gpu = "nvidia" if gpus else "none"
    assert digest == render.install_digest(_inputs_digest(), _values(**values), gpu)
    if kind == "image":
        assert "STUB INSTALL" not in p.stderr
    else:
        assert "STUB INSTALL" in p.stderr
    return kind, p.stderr


def test_an_image_with_the_expected_digest_skips_the_install(tmp_path: Path) -> None:
    digest = render.install_digest(_inputs_digest(), _values())
    kind, log = _decide(tmp_path, json.dumps({"digest": digest}), venv=True)
    assert kind == "image"
    assert f"install: image holds digest {digest}, skipping" in log


def test_a_gpu_node_installs_over_an_image_baked_without_a_gpu(tmp_path: Path) -> None:
    cpu_image = json.dumps({"digest": render.install_digest(_inputs_digest(), _values())})
    kind, log = _decide(tmp_path, cpu_image, venv=True, gpus=1)
    assert kind == "fresh" and "!= expected" in log
    gpu_image = json.dumps({"digest": render.install_digest(_inputs_digest(), _values(), "nvidia")})
    assert _decide(tmp_path, gpu_image, venv=True, gpus=1)[0] == "image"


@pytest.mark.parametrize(
    ("marker", "venv", "values", "says"),
    [
        (None, True, {}, "no readable install marker"),
        ("{not json", True, {}, "no readable install marker"),
        ('{"ray": "2.60.0"}', True, {}, "no readable install marker"),
        (json.dumps({"digest": "0" * 64}), True, {}, f"image digest {'0' * 64} != expected"),
        ("SAME", True, {"EXTRA_PIP_PACKAGES": "minigrid==3.0.0"}, "!= expected"),
        ("SAME", True, {"EXTRA_APT_PACKAGES": "libosmesa6"}, "!= expected"),
        ("SAME", True, {"TORCH_INDEX_URL": "https://x.example/cu"}, "!= expected"),
        ("SAME", False, {}, "but no environment"),
    ],
)
def test_any_other_image_installs_as_without_one(
    tmp_path: Path, marker: str | None, venv: bool, values: dict[str, str], says: str
) -> None:
    if marker == "SAME":  # the digest of an image baked with the default values
        marker = json.dumps({"digest": render.install_digest(_inputs_digest(), _values())})
    kind, log = _decide(tmp_path, marker, venv, **values)
    assert kind == "fresh"
    assert says in log and "installing" in log


# -- EXTRA_APT_PACKAGES ---------------------------------------------------------------------------
def test_the_bootstrap_checks_debian_names_as_render_does() -> None:
    code = _install_code(_bootstrap())
    pattern = re.search(r'\[\[ "\$p" =~ (\S+) \]\]', code)
    assert pattern and pattern.group(1) == render.DEB_NAME.pattern


@pytest.mark.parametrize("bad", ["-oAPT::X=1", "Lib", "a;b", "x"])
def test_a_bad_extra_apt_package_fails_the_node_with_its_name(bad: str) -> None:
    p = _bash("check_install_values\necho checked", env=_values(EXTRA_APT_PACKAGES=f"libgl1 {bad}"))
    assert p.returncode == 1 and "checked" not in p.stdout
    assert f"FAIL: EXTRA_APT_PACKAGES: '{bad}' is not a Debian package name" in p.stderr


def test_good_extra_packages_become_arrays() -> None:
    p = _bash(
        'check_install_values\necho "${#EXTRA_APT[@]} ${EXTRA_APT[1]} ${#EXTRA_PIP[@]}"',
        env=_values(EXTRA_APT_PACKAGES="libosmesa6 g++", EXTRA_PIP_PACKAGES=""),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["2", "g++", "0"]
