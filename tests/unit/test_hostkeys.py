"""The driver's known_hosts writer: what trust on first use and a rehearsal's up/down do to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver import hostkeys

OLD = ("ssh-ed25519", "AAAAold")
NEW = ("ssh-ed25519", "AAAAnew")
RSA = ("ssh-rsa", "AAAArsa")


def test_replace_leaves_only_the_new_keys_of_that_host_and_every_other_line(
    tmp_path: Path,
) -> None:
    known = tmp_path / "home" / "known_hosts"
    hostkeys.add("10.213.0.10", [OLD], known)
    hostkeys.add("[10.213.0.10]:2222", [OLD], known)
    hostkeys.add("20.1.2.3", [OLD], known)
    hostkeys.replace("10.213.0.10", [NEW, RSA], known)
    assert known.read_text().splitlines() == [
        "[10.213.0.10]:2222 ssh-ed25519 AAAAold",
        "20.1.2.3 ssh-ed25519 AAAAold",
        "10.213.0.10 ssh-ed25519 AAAAnew",
        "10.213.0.10 ssh-rsa AAAArsa",
    ]
    assert known.stat().st_mode & 0o777 == 0o600


def test_remove_takes_exactly_the_given_keys_of_that_host(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(
        "# a comment\n10.213.0.10 ssh-ed25519 AAAAnew\n10.213.0.10 ssh-rsa AAAArsa\n"
        "20.1.2.3 ssh-ed25519 AAAAnew\n"
    )
    assert hostkeys.remove("10.213.0.10", [NEW], known) == 1
    assert known.read_text() == (
        "# a comment\n10.213.0.10 ssh-rsa AAAArsa\n20.1.2.3 ssh-ed25519 AAAAnew\n"
    )
    assert hostkeys.remove("10.213.0.10", [NEW], known) == 0
    assert hostkeys.remove("10.213.0.10", [NEW], tmp_path / "none") == 0
    assert not (tmp_path / "none").exists()


def test_a_rehearsal_records_the_keys_sshd_serves_ed25519_first(tmp_path: Path) -> None:
    from nodekit.rehearsal.trust import head_keys

    ssh = tmp_path / "etc" / "ssh"
    ssh.mkdir(parents=True)
    for kind, name in (("ssh-dss", "dsa"), ("ssh-rsa", "rsa"), ("ssh-ed25519", "ed25519")):
        (ssh / f"ssh_host_{name}_key.pub").write_text(f"{kind} AAAA{name} root@head\n")
    assert head_keys(tmp_path) == [("ssh-ed25519", "AAAAed25519"), ("ssh-rsa", "AAAArsa")]


def _node_root(tmp_path: Path, name: str, blob: str) -> Path:
    ssh = tmp_path / name / "etc" / "ssh"
    ssh.mkdir(parents=True)
    (ssh / "ssh_host_ed25519_key.pub").write_text(f"ssh-ed25519 {blob} root@{name}\n")
    return tmp_path / name


def test_a_rehearsal_worker_is_known_to_the_cluster_folder_only_while_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `worker` ssh line checks the worker against the cluster folder's known_hosts: its
    keys are there once it is ready, an address a scale set reuses gets the new worker's
    keys, and a removed worker's leave; the head's stay, and the driver's file is untouched."""
    from nodekit.rehearsal import trust

    monkeypatch.setenv("RAYDRIVER_HOME", str(tmp_path / "driver"))
    cluster = tmp_path / "cluster"
    known = cluster / trust.KNOWN_HOSTS
    trust.record("10.213.0.10", _node_root(tmp_path, "head", "AAAAhead"), cluster)
    driver_file = (tmp_path / "driver" / "known_hosts").read_text()
    trust.record_worker("10.213.0.11", _node_root(tmp_path, "w1", "AAAAw1"), cluster)
    trust.record_worker("10.213.0.12", _node_root(tmp_path, "w2", "AAAAw2"), cluster)
    trust.record_worker("10.213.0.11", _node_root(tmp_path, "w1b", "AAAAw1b"), cluster)
    assert known.read_text().splitlines() == [
        "10.213.0.10 ssh-ed25519 AAAAhead",
        "10.213.0.12 ssh-ed25519 AAAAw2",
        "10.213.0.11 ssh-ed25519 AAAAw1b",
    ]
    trust.forget_node("10.213.0.12", cluster)
    assert known.read_text().splitlines() == [
        "10.213.0.10 ssh-ed25519 AAAAhead",
        "10.213.0.11 ssh-ed25519 AAAAw1b",
    ]
    assert (tmp_path / "driver" / "known_hosts").read_text() == driver_file
    assert "AAAAw" not in driver_file
    trust.forget_node("10.213.0.11", tmp_path / "gone")  # a cluster folder down removed
    assert not (tmp_path / "gone").exists()
