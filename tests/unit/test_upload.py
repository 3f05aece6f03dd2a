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


# -- symlinks (Ray's packaging follows them) ----------------------------------------------------
KEY = (
    b"-----BEGIN OPENSSH PRIVATE KEY-----\n"
    b"b3BlbnNzaC1rZXktdjEAAAAA\n"
    b"-----END OPENSSH PRIVATE KEY-----\n"
)


def _zip_sizes(plan: upload.UploadPlan) -> dict[str, bytes]:
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    target = plan.root.parent / f"{plan.root.name}.zip"
    create_package(str(plan.root), target, include_gitignore=True, excludes=plan.excludes)
    with zipfile.ZipFile(target) as z:
        return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


def test_a_symlink_with_an_innocent_name_to_a_key_outside_is_refused(tmp_path: Path) -> None:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_ed25519").write_bytes(KEY)
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("print(1)\n")
    (job / "notes.txt").symlink_to(ssh / "id_ed25519")
    for allow in (False, True):
        with pytest.raises(DriverError) as e:
            upload.plan(job, allow_sensitive=allow)
        assert e.value.message == (
            f"the working directory {job} holds a symlink notes.txt -> {ssh / 'id_ed25519'} "
            f"that leads outside it ({ssh / 'id_ed25519'}): Ray would upload what it points "
            "to; copy the file in, or list the link in .rayignore"
        )
    (job / ".rayignore").write_text("notes.txt\n")
    plan = upload.plan(job)
    assert KEY not in b"".join(_zip_sizes(plan).values())


def test_a_symlink_to_an_ignored_secret_inside_is_judged_by_its_target(tmp_path: Path) -> None:
    (tmp_path / ".rayignore").write_text(".ssh/\n")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_bytes(KEY)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "notes.txt").symlink_to(".ssh/id_ed25519")
    with pytest.raises(DriverError, match="holds files that look secret") as e:
        upload.plan(tmp_path)
    assert "notes.txt (-> .ssh/id_ed25519)" in e.value.message
    plan = upload.plan(tmp_path, allow_sensitive=True)  # asked for: it goes, and is counted
    zipped = _zip_sizes(plan)
    assert zipped["notes.txt"] == KEY
    assert (plan.files, plan.bytes, plan.links) == (
        len(zipped),
        sum(len(b) for b in zipped.values()),
        1,
    )
    assert plan.summary() == (
        f"3 files, {upload.human_size(plan.bytes)}, 1 of them through a symlink, uploaded as a copy"
    )


def test_the_count_is_what_the_package_holds_with_a_link_to_a_file_inside(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "table.csv").write_bytes(b"a,b\n" * 1000)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "table.csv").symlink_to("data/table.csv")
    plan = upload.plan(tmp_path)
    zipped = _zip_sizes(plan)
    assert sorted(zipped) == ["data/table.csv", "table.csv", "train.py"]
    assert (plan.files, plan.bytes) == (3, sum(len(b) for b in zipped.values()))


@pytest.mark.parametrize("target", [".", "..", "sub"])
def test_a_symlink_to_a_folder_is_refused(tmp_path: Path, target: str) -> None:
    job = tmp_path / "job"
    (job / "sub").mkdir(parents=True)
    (job / "train.py").write_text("print(1)\n")
    (job / "loop").symlink_to(target)
    with pytest.raises(DriverError) as e:
        upload.plan(job)
    assert e.value.message.startswith(f"the working directory {job} holds a symlink loop -> ")
    assert ("leads outside it" if target == ".." else "to a folder") in e.value.message


def test_a_broken_link_and_a_loop_of_links_are_left_out_and_said(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "gone").symlink_to("nothing-here")
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    plan = upload.plan(tmp_path)
    assert sorted(plan.broken) == ["a", "b", "gone"]
    assert _packaged(plan) == {"train.py"}
    assert plan.summary() == "1 file, 9 B, 3 broken symlink(s) left out: a, b, gone"


def test_submit_of_a_folder_with_a_symlink_loop_is_one_line_and_uploads_nothing(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("print(1)\n")
    (job / "loop").symlink_to(".")
    r = run_driver("submit", str(job / "train.py"), home=tmp_path / "driver")
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"error: the working directory {job} holds a symlink loop -> . to a folder (the folder "
        "itself): Ray would upload that folder again under the link's name (a link to an "
        "enclosing folder over and over); remove the link or list it in .rayignore"
    ]
    assert not (tmp_path / "driver" / "local").exists()  # no local Ray was started


def test_submit_of_a_fifo_named_train_py_is_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    os.mkfifo(job / "train.py")
    r = run_driver("submit", str(job / "train.py"), home=tmp_path / "driver")
    assert r.returncode == 2
    assert error_lines(r.stderr) == [
        f"error: {job / 'train.py'} is not a regular file (expected a Python script)"
    ]
    assert not (tmp_path / "driver" / "local").exists()


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
