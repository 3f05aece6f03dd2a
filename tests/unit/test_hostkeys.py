"""The driver's known_hosts writer: what trust on first use and a rehearsal's up/down do to it."""

from __future__ import annotations

from pathlib import Path

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
