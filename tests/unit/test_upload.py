"""What submit uploads: git-ignored and special files left out, home folders and secret-looking
files refused, count and size reported; runtime_env.yaml with py_modules."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from driver import upload
from driver.errors import DriverError
from driver.workdir import load_runtime_env, resolve, runtime_env_for
from support import error_lines, run_driver


def _git_repo(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def _packaged(plan: upload.UploadPlan) -> set[str]:
    """The files Ray's own packaging puts in the zip, with the plan's excludes."""
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    target = plan.root.parent / f"{plan.root.name}.zip"
    create_package(str(plan.root), target, include_gitignore=True, excludes=plan.excludes)
    with zipfile.ZipFile(target) as z:
        return {n for n in z.namelist() if not n.endswith("/")}


def test_the_repositorys_gitignore_applies_to_a_subfolder(tmp_path: Path) -> None:
    _git_repo(tmp_path)
    (tmp_path / ".gitignore").write_text("*.ckpt\nbig/\n")
    job = tmp_path / "examples" / "job"
    (job / "big").mkdir(parents=True)
    (job / "train.py").write_text("print(1)\n")
    (job / "model.ckpt").write_bytes(b"x" * 1000)
    (job / "big" / "data.bin").write_bytes(b"x" * 1000)
    (job / "weird [name]*.txt").write_text("kept\n")
    plan = upload.plan(job)
    assert _packaged(plan) == {"train.py", "weird [name]*.txt"}
    assert (plan.files, plan.git_ignored) == (2, 2)
    assert "2 files" in plan.summary() and "2 git-ignored path(s) left out" in plan.summary()


def test_a_fifo_is_left_out_instead_of_hanging_the_upload(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    os.mkfifo(tmp_path / "pipe")
    plan = upload.plan(tmp_path)
    assert plan.special == ["pipe"]
    assert _packaged(plan) == {"train.py"}  # create_package would block on the FIFO otherwise


@pytest.mark.parametrize(
    "secret",
    [
        ".ssh/id_ed25519",
        ".azure/msal_token_cache.json",
        "terraform.tfstate",
        "prod.tfvars",
        "key.pem",
        ".env",
    ],
)
def test_secret_looking_files_are_refused_unless_asked(tmp_path: Path, secret: str) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    path = tmp_path / secret
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("secret\n")
    with pytest.raises(DriverError, match="holds files that look secret") as e:
        upload.plan(tmp_path)
    assert secret.split("/")[0] in e.value.message and "--allow-sensitive" in e.value.message
    assert upload.plan(tmp_path, allow_sensitive=True).files == 2


def test_ignored_secrets_are_fine(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "terraform.tfstate").write_text("{}")
    (tmp_path / ".rayignore").write_text("terraform.tfstate\n")
    assert upload.plan(tmp_path).sensitive == []


def test_a_home_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DriverError, match="holds your home folder"):
        upload.plan(tmp_path)
    with pytest.raises(DriverError, match="holds your home folder"):
        upload.plan(Path("/"))


def test_submit_of_a_script_in_the_home_folder_is_one_line_and_starts_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "train.py").write_text("print(1)\n")
    r = run_driver(
        "submit", str(home / "train.py"), home=tmp_path / "driver", env={"HOME": str(home)}
    )
    assert r.returncode == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "holds your home folder" in lines[0], r.stderr
    assert not (tmp_path / "driver" / "local").exists()  # no local Ray was started


# -- runtime_env.yaml -------------------------------------------------------------------------
def test_runtime_env_yaml_next_to_the_script(tmp_path: Path) -> None:
    (tmp_path / "lib" / "harness").mkdir(parents=True)
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("print(1)\n")
    (job / "runtime_env.yaml").write_text(
        "py_modules: [../lib/harness]\npip: [pillow==11.0.0]\nenv_vars: {A: '1'}\n"
    )
    spec = runtime_env_for(resolve(str(job / "train.py")), None)
    assert spec.py_modules == ((tmp_path / "lib" / "harness").resolve(),)
    assert (spec.pip, spec.env_vars) == (("pillow==11.0.0",), {"A": "1"})
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "main.py").write_text("print(1)\n")
    assert runtime_env_for(resolve(str(tmp_path / "alone")), None).source is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("conda: x\n", r"unknown conda \(known: py_modules, pip, env_vars\)"),
        ("working_dir: .\n", "unknown working_dir"),
        ("py_modules: ../nowhere\n", "py_modules must be a list"),
        ("py_modules: [../nowhere]\n", "is not a folder"),
        ("pip: [1]\n", "pip must be a list of requirements"),
        ("env_vars: [a]\n", "env_vars must map names to strings"),
        ("[unclosed\n", "is not valid YAML"),
        ("- a\n", "must be a mapping"),
    ],
)
def test_a_bad_runtime_env_yaml_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text(text)
    with pytest.raises(DriverError, match=message) as e:
        load_runtime_env(path)
    assert "\n" not in e.value.message and str(path) in e.value.message
