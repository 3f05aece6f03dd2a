"""Which host key a head must have: the driver's known_hosts, then the user's, trust on first
use (or refusal with ``--strict-host-keys``), and the one-line refusal of a changed key."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import paramiko

from driver import hostkeys
from driver.address import HeadAddress
from driver.progress import Progress
from driver.ssh.options import SshOptions


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's format: ``SHA256:`` and unpadded base64, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def key_label(key: paramiko.PKey) -> str:
    name = key.get_name()
    return {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA"}.get(
        name, name.replace("ecdsa-sha2-", "ECDSA-").upper()
    )


class HostKeyRefused(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(hostname)
        self.hostname, self.key = hostname, key


class TrustOnFirstUse(paramiko.MissingHostKeyPolicy):
    """Store a new head's key in the driver's known_hosts and say so; or refuse when strict."""

    def __init__(self, known_hosts: Path, strict: bool, progress: Progress) -> None:
        self.known_hosts, self.strict, self.progress = known_hosts, strict, progress

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey):  # type: ignore[no-untyped-def]
        if self.strict:
            raise HostKeyRefused(hostname, key)
        hostkeys.add(hostname, [(key.get_name(), key.get_base64())], self.known_hosts)
        self.progress(
            f"first connection to {hostname}: trusting its {key_label(key)} host key "
            f"{fingerprint(key)} (stored in {self.known_hosts})"
        )


def load_host_keys(
    keys: paramiko.HostKeys, options: SshOptions, target: str, progress: Progress
) -> None:
    """The keys the head ``target`` (known_hosts' name for it) is checked against: the driver's
    own known_hosts, then the user's ~/.ssh/known_hosts for every host the driver's file does
    not name. The driver's file wins for a head it knows: ``rehearse up`` replaces a re-created
    head's key there, and an old entry in the user's file (hashed ones too, which paramiko
    cannot override by name) would otherwise read as a changed key."""
    add_known_hosts(keys, options.driver_known_hosts(), progress)
    skip = target if keys.lookup(target) is not None else None
    add_known_hosts(keys, options.user_known_hosts(), progress, skip=skip)


def _names(hostname: str, target: str) -> bool:
    """Does this known_hosts name (plain or hashed ``|1|salt|hash``) name ``target``?"""
    if hostname.startswith("|1|"):
        return paramiko.HostKeys.hash_host(target, hostname) == hostname
    return hostname == target


def add_known_hosts(
    keys: paramiko.HostKeys, path: Path, progress: Progress, skip: str | None = None
) -> None:
    """Add the readable entries of an OpenSSH known_hosts file (less those naming ``skip``);
    say how many lines were not readable.

    paramiko's own loader stops with a traceback at the first malformed line; one bad line in a
    user's ~/.ssh/known_hosts must not keep the driver from every head.
    """
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    bad = 0
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
        except Exception:  # paramiko's InvalidHostKey is no SSHException: any malformed line
            entry = None
        if entry is None:
            bad += 1
            continue
        for host in entry.hostnames:
            if skip is not None and _names(host, skip):
                continue
            keys.add(host, entry.key.get_name(), entry.key)
    if bad:
        progress(f"skipped {bad} unreadable line{'s' if bad > 1 else ''} in {path}")


def changed_key_message(
    head: HeadAddress,
    e: paramiko.BadHostKeyException,
    options: SshOptions,
) -> str:
    name = head.host if head.port == 22 else f"[{head.host}]:{head.port}"
    where = options.driver_known_hosts()
    system = options.user_known_hosts()
    keys = paramiko.HostKeys()
    add_known_hosts(keys, system, lambda _: None)
    if keys.lookup(name) is not None:
        where = system
    return (
        f"REFUSING the head {head.endpoint}: its host key changed — expected "
        f"{key_label(e.expected_key)} {fingerprint(e.expected_key)} (from {where}), got "
        f"{key_label(e.key)} {fingerprint(e.key)}. If the head was redeployed, remove the old "
        f"key with `ssh-keygen -R '{name}' -f {where}`; otherwise someone may be intercepting "
        "the connection"
    )
