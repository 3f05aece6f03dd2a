"""``up``/``down``: ``terraform apply``/``destroy`` through python-terraform, output streamed.

Kept tiny on purpose: the Terraform configuration is the source of truth for the cluster, and a
user who wants plans, workspaces or remote state runs terraform directly. Terraform's own output
goes straight to the terminal (it is the progress a person waits on).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from driver.errors import DriverError


def _terraform(directory: str, variables: dict[str, str], var_files: list[str]):  # type: ignore[no-untyped-def]
    from python_terraform import Terraform

    path = Path(directory).expanduser()
    if not path.is_dir():
        raise DriverError(f"--terraform-dir: no such folder: {directory}")
    binary = shutil.which("terraform")
    if binary is None:
        raise DriverError("up/down need the terraform CLI on PATH")
    for f in var_files:
        if not Path(f).is_file():
            raise DriverError(f"--var-file: no such file: {f}")
    return Terraform(
        working_dir=str(path),
        terraform_bin_path=binary,
        variables=variables or None,
        var_file=[str(Path(f).resolve()) for f in var_files] or None,
    )


def _check(code: int | None, what: str, directory: str) -> None:
    if code != 0:
        raise DriverError(f"{what} failed in {directory} (exit {code}): see its output above")


def apply(directory: str, variables: dict[str, str], var_files: list[str]) -> None:
    from python_terraform import IsNotFlagged

    tf = _terraform(directory, variables, var_files)
    code, _, _ = tf.init(capture_output=False, reconfigure=IsNotFlagged, var=None, var_file=None)
    _check(code, "terraform init", directory)
    code, _, _ = tf.apply(capture_output=False, skip_plan=True)
    _check(code, "terraform apply", directory)


def destroy(directory: str, variables: dict[str, str], var_files: list[str]) -> None:
    from python_terraform import IsFlagged, IsNotFlagged

    tf = _terraform(directory, variables, var_files)
    code, _, _ = tf.destroy(capture_output=False, force=IsNotFlagged, auto_approve=IsFlagged)
    _check(code, "terraform destroy", directory)
