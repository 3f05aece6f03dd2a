"""Every setting the driver reads, where it comes from, and in which order.

One place owns the precedence (flag → environment → saved profile → default) and every
environment variable name the client reads or sets. Verbs receive a resolved :class:`Settings`
and never look at ``os.environ`` themselves.

The cluster is chosen by a separate order, "first match wins", because its sources are not
values of one setting but different ways of finding a head (see :data:`CLUSTER_ORDER`):
explicit flags, then ``$RAYDRIVER_HEAD``, then the saved profile, then local Ray.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from driver.errors import DriverError

# -- environment variables the driver reads --------------------------------------------------
HOME_ENV = "RAYDRIVER_HOME"
"""The driver's own folder (local Ray state, known_hosts, profile); tests point it elsewhere."""
HEAD_ENV = "RAYDRIVER_HEAD"
"""``[USER@]HOST[:PORT]`` of the head, like ``--head``."""
READY_TIMEOUT_ENV = "RAYDRIVER_READY_TIMEOUT"
"""Seconds to wait for a head that is still bootstrapping, like ``--ready-timeout``."""
RECONNECT_TIMEOUT_ENV = "RAYDRIVER_RECONNECT_TIMEOUT"
"""Seconds to keep reconnecting after the connection to the head broke, like
``--reconnect-timeout``."""
KEEP_CONNECTION_ENV = "RAYDRIVER_KEEP_CONNECTION"
"""Seconds an idle kept SSH connection stays for the next commands, like ``--keep-connection``."""
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
TERRAFORM_SUBSCRIPTION_ENV = "ARM_SUBSCRIPTION_ID"
"""The subscription the azurerm provider deploys into (infra/terraform/versions.tf): with
--terraform-dir it comes before ``$AZURE_SUBSCRIPTION_ID``."""
ARM_ENDPOINT_ENV = "AZURE_RESOURCE_MANAGER_ENDPOINT"
PRICES_URL_ENV = "RAYDRIVER_PRICES_URL"
HEAD_VM_ID_ENV = "RAYDRIVER_HEAD_VM_ID"
"""The head VM's resource id, for ``start`` (and ``submit``/``status`` on a stopped cluster) when
the cluster is named by its address; the stacks' outputs give it otherwise."""
WORKER_AUTOSCALE_ID_ENV = "RAYDRIVER_WORKER_AUTOSCALE_ID"
"""With ``$RAYDRIVER_HEAD_VM_ID``: the workers' autoscale setting's id (scaling mode cpu)."""
"""The Azure Retail Prices API that ``up`` and ``price`` ask (tests point it at a fake)."""
XDG_STATE_ENV = "XDG_STATE_HOME"
XDG_CONFIG_ENV = "XDG_CONFIG_HOME"
XDG_RUNTIME_ENV = "XDG_RUNTIME_DIR"

# -- environment variables the driver sets ---------------------------------------------------
RESULTS_ENV = "RAYDRIVER_RESULTS_DIR"
"""Set for every job: the folder where it writes results and checkpoints."""
RAY_CLIENT_OVERRIDES = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")
"""Ray's client SDK prefers these over the address it is given: cleared in the driver's process
so a job never goes to another cluster than the one the driver found."""

# -- defaults ----------------------------------------------------------------------------------
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_RETRIES = 3
MAX_RETRIES = 100
"""With back-off up to 15 s between them, 100 retries are about 25 minutes of trying: more is a
typo, not a plan (``--ready-timeout`` is the way to wait long for a head)."""
DEFAULT_READY_TIMEOUT_S = 900.0
"""A fresh VM installs Python, Ray and torch before Ray starts: several minutes."""
DEFAULT_RECONNECT_TIMEOUT_S = 300.0
"""Long enough for a Wi-Fi change or a VPN reconnect; a laptop that slept longer reconnects
when it wakes (the budget starts when the loss is noticed)."""
DEFAULT_KEEP_CONNECTION_S = 600.0
"""As long as people commonly set OpenSSH's ControlPersist: a session of commands reuses one
connection, and a forgotten one goes by itself."""
DEFAULT_ARM_ENDPOINT = "https://management.azure.com"
DEFAULT_PRICES_URL = "https://prices.azure.com/api/retail/prices"
"""Azure's public Retail Prices API: no credentials, OData ``$filter``, paged by NextPageLink."""
PRICES_CACHE_S = 3600.0
"""How long a price list fetched from the Retail Prices API is reused (Azure changes prices
monthly at most; an hour keeps repeated ``up``/``price`` runs quick and off the network)."""
MAX_SECONDS = 7 * 24 * 3600.0
"""No timeout a person means is longer than a week; larger values are typos (or ``inf``)."""

CLUSTER_ORDER = """which cluster (first match wins):
  1. --head [USER@]HOST[:PORT], --terraform-dir DIR, or --resource-group RG --deployment NAME
     (Terraform: head_public_ip, admin_username from `terraform output -json`; ARM: headPublicIp,
     adminUsername from the deployment's outputs, signed in with DefaultAzureCredential)
  2. $RAYDRIVER_HEAD
  3. the profile saved by `python -m driver cluster use ...`
  4. otherwise local Ray on 127.0.0.1 (started by submit)"""


# -- the driver's folders ------------------------------------------------------------------------
def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkdir's mode does not apply to a folder that existed: keep it private anyway.
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def driver_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$RAYDRIVER_HOME``, else ``$XDG_STATE_HOME/ray-azure-rl`` (``~/.local/state/...``).

    Holds the local Ray head's state and token and the driver's own known_hosts: mode 0700.
    """
    env = os.environ if environ is None else environ
    explicit = env.get(HOME_ENV)
    if explicit:
        return _private_dir(Path(explicit).expanduser())
    state = env.get(XDG_STATE_ENV) or str(Path.home() / ".local" / "state")
    return _private_dir(Path(state) / "ray-azure-rl")


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``use`` saves the profile: ``$RAYDRIVER_HOME``, else ``$XDG_CONFIG_HOME/ray-azure-rl``.

    A profile is configuration the user chose, not state the driver keeps.
    """
    env = os.environ if environ is None else environ
    explicit = env.get(HOME_ENV)
    if explicit:
        return _private_dir(Path(explicit).expanduser())
    config = env.get(XDG_CONFIG_ENV) or str(Path.home() / ".config")
    return _private_dir(Path(config) / "ray-azure-rl")


def owned_private_dir(path: Path) -> Path:
    """``path`` as a folder of this user's, mode 0700 (made so); refused when it is anything
    else: another user may have made it, to read or plant what goes there."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise DriverError(
            f"{path} is not a folder of yours: remove it (another user may have made it) and "
            "try again"
        )
    if st.st_mode & 0o077:
        path.chmod(0o700)
    return path


def private_tmp() -> Path:
    """``/tmp/raydriver-UID``, this user's alone: local Ray's session folders, and kept
    connections' sockets where there is no ``$XDG_RUNTIME_DIR``."""
    return owned_private_dir(Path("/tmp") / f"raydriver-{os.getuid()}")


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_RUNTIME_DIR/raydriver``, else ``/tmp/raydriver-UID/ssh``: where kept connections'
    sockets live, this user's alone (whoever can enter it can use the connections and get the
    cluster tokens they hand out)."""
    env = os.environ if environ is None else environ
    base = env.get(XDG_RUNTIME_ENV)
    if base and Path(base).is_dir():
        return owned_private_dir(Path(base) / "raydriver")
    return owned_private_dir(private_tmp() / "ssh")


def known_hosts_file() -> Path:
    """The driver's own known_hosts: heads it trusted on first use."""
    return driver_home() / "known_hosts"


def prices_url(environ: Mapping[str, str] | None = None) -> str:
    """``$RAYDRIVER_PRICES_URL``, else :data:`DEFAULT_PRICES_URL`; an http(s) URL."""
    from urllib.parse import urlsplit

    env = os.environ if environ is None else environ
    url = env.get(PRICES_URL_ENV, "").strip() or DEFAULT_PRICES_URL
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DriverError(
            f"${PRICES_URL_ENV}: expected the http(s):// URL of a Retail Prices API, got {url!r} "
            f"(default {DEFAULT_PRICES_URL})"
        )
    return url


def prices_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Price lists fetched within :data:`PRICES_CACHE_S`, under the driver's home."""
    return _private_dir(driver_home(environ) / "prices")


def clear_ray_client_overrides() -> None:
    for var in RAY_CLIENT_OVERRIDES:
        os.environ.pop(var, None)


# -- value parsers (shared by argparse types and environment variables) ------------------------
def parse_seconds(text: str) -> float:
    """A finite number of seconds from 0 to a week."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS:
        raise ValueError(f"expected seconds from 0 to {MAX_SECONDS:.0f}, got {text}")
    return value


def parse_timeout(text: str) -> float:
    """Seconds to wait for an answer: like :func:`parse_seconds`, but 0 would fail every try."""
    value = parse_seconds(text)
    if value <= 0:
        raise ValueError(f"expected seconds above 0 (every attempt would fail), got {text}")
    return value


def parse_retries(text: str) -> int:
    value = parse_count(text)
    if value > MAX_RETRIES:
        raise ValueError(f"expected at most {MAX_RETRIES} retries, got {value}")
    return value


def parse_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"expected a number >= 0, got {value}")
    return value


# -- resolution --------------------------------------------------------------------------------
T = TypeVar("T")


@dataclass(frozen=True)
class Resolved:
    """A value and where it came from (for messages and ``use``)."""

    value: Any
    source: str


def pick(
    name: str,
    flag: T | None,
    env_name: str | None,
    environ: Mapping[str, str],
    profile: Mapping[str, str] | None,
    profile_key: str | None,
    default: T | None,
    parse: Callable[[str], T] | None = None,
) -> Resolved:
    """flag → environment → profile → default; an empty environment variable counts as unset."""
    if flag is not None:
        return Resolved(flag, f"--{name}")
    if env_name and environ.get(env_name):
        text = environ[env_name]
        try:
            return Resolved(parse(text) if parse else text, f"${env_name}")
        except ValueError as e:
            raise DriverError(f"${env_name}: {e}") from None
    if profile and profile_key and profile.get(profile_key):
        return Resolved(profile[profile_key], "saved profile")
    return Resolved(default, "default")


@dataclass(frozen=True)
class ClusterSpec:
    """Where the cluster is, as the user named it (nothing resolved over the network yet)."""

    head: str | None = None
    terraform_dir: str | None = None
    resource_group: str | None = None
    deployment: str | None = None
    subscription: str | None = None
    arm_endpoint: str | None = None
    source: str = "local Ray"
    """"--head", "$RAYDRIVER_HEAD", "saved profile", ... or "local Ray"."""
    explicit: bool = False
    """Named by flags on this command line (so the next commands need them too)."""

    @property
    def is_local(self) -> bool:
        return not (self.head or self.terraform_dir or self.resource_group or self.deployment)

    def as_profile(self) -> dict[str, str]:
        """What ``use`` saves: how to find the cluster, never anything secret."""
        if self.head:
            return {"head": self.head}
        if self.terraform_dir:
            return {"terraform_dir": str(Path(self.terraform_dir).expanduser().resolve())}
        saved = {"resource_group": self.resource_group or "", "deployment": self.deployment or ""}
        if self.subscription:
            saved["subscription"] = self.subscription
        if self.arm_endpoint:
            saved["arm_endpoint"] = self.arm_endpoint
        return saved


@dataclass(frozen=True)
class Settings:
    """Everything a verb that talks to a cluster needs, resolved."""

    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    identity: Path | None = None
    identity_explicit: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S
    reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S
    strict_host_keys: bool = False
    keep_connection: float = DEFAULT_KEEP_CONNECTION_S
    """Seconds an idle kept connection waits for the next command; 0: none is kept."""
    hint: tuple[str, ...] = ()
    """Options that reach the same cluster again, for the next commands printed after submit
    (empty when the environment or the saved profile finds it anyway)."""


def _flag_text(name: str, value: str | None) -> str | None:
    """A flag given on the command line must not be empty (``--head "$UNSET"``)."""
    if value is None:
        return None
    if not value.strip():
        raise DriverError(
            f"--{name} is empty (an unset shell variable?): give a value, or leave the flag out"
        )
    return value.strip()


def resolve(
    *,
    head: str | None = None,
    terraform_dir: str | None = None,
    resource_group: str | None = None,
    deployment: str | None = None,
    subscription: str | None = None,
    arm_endpoint: str | None = None,
    identity: str | None = None,
    connect_timeout: float | None = None,
    retries: int | None = None,
    ready_timeout: float | None = None,
    reconnect_timeout: float | None = None,
    strict_host_keys: bool = False,
    keep_connection: float | None = None,
    environ: Mapping[str, str] | None = None,
    load_profile: Callable[[], Mapping[str, str] | None] | None = None,
) -> Settings:
    """Apply the precedence rules to what a verb was given."""
    env = os.environ if environ is None else environ
    head = _flag_text("head", head)
    terraform_dir = _flag_text("terraform-dir", terraform_dir)
    resource_group = _flag_text("resource-group", resource_group)
    deployment = _flag_text("deployment", deployment)
    subscription = _flag_text("subscription", subscription)
    arm_endpoint = _flag_text("arm-endpoint", arm_endpoint)
    identity = _flag_text("identity", identity)
    named = [n for n, v in (("--head", head), ("--terraform-dir", terraform_dir)) if v]
    if resource_group or deployment:
        if not (resource_group and deployment):
            raise DriverError("--resource-group and --deployment go together: give both")
        named.append("--resource-group/--deployment")
    if len(named) > 1:
        raise DriverError(f"name one cluster, not several: got {' and '.join(named)}")

    profile: Mapping[str, str] | None = None
    if named:
        spec_source, spec_values = (
            named[0],
            {
                "head": head,
                "terraform_dir": terraform_dir,
                "resource_group": resource_group,
                "deployment": deployment,
            },
        )
    elif env.get(HEAD_ENV, "").strip():
        spec_source, spec_values = f"${HEAD_ENV}", {"head": env[HEAD_ENV].strip()}
    else:
        profile = load_profile() if load_profile else None
        if profile:
            spec_source = "saved profile"
            spec_values = {
                k: profile.get(k) for k in ("head", "terraform_dir", "resource_group", "deployment")
            }
        else:
            spec_source, spec_values = "local Ray", {}
    sub = pick("subscription", subscription, SUBSCRIPTION_ENV, env, profile, "subscription", None)
    arm = pick("arm-endpoint", arm_endpoint, ARM_ENDPOINT_ENV, env, profile, "arm_endpoint", None)
    spec = ClusterSpec(
        **{k: v or None for k, v in spec_values.items()},
        subscription=sub.value,
        arm_endpoint=arm.value,
        source=spec_source,
        explicit=bool(named),
    )
    key = pick("identity", identity, None, env, profile, "identity", None)
    hint: list[str] = []
    if head:
        hint += ["--head", head]
    elif terraform_dir:
        hint += ["--terraform-dir", terraform_dir]
    elif resource_group and deployment:
        hint += ["--resource-group", resource_group, "--deployment", deployment]
        if subscription:
            hint += ["--subscription", subscription]
        if arm_endpoint:
            hint += ["--arm-endpoint", arm_endpoint]
    if identity:
        hint += ["-i", identity]
    return Settings(
        cluster=spec,
        identity=Path(key.value).expanduser() if key.value else None,
        identity_explicit=identity is not None,
        connect_timeout=pick(
            "connect-timeout", connect_timeout, None, env, None, None, DEFAULT_CONNECT_TIMEOUT_S
        ).value,
        retries=pick("retries", retries, None, env, None, None, DEFAULT_RETRIES).value,
        ready_timeout=pick(
            "ready-timeout",
            ready_timeout,
            READY_TIMEOUT_ENV,
            env,
            None,
            None,
            DEFAULT_READY_TIMEOUT_S,
            parse_seconds,
        ).value,
        reconnect_timeout=pick(
            "reconnect-timeout",
            reconnect_timeout,
            RECONNECT_TIMEOUT_ENV,
            env,
            None,
            None,
            DEFAULT_RECONNECT_TIMEOUT_S,
            parse_seconds,
        ).value,
        strict_host_keys=strict_host_keys,
        keep_connection=pick(
            "keep-connection",
            keep_connection,
            KEEP_CONNECTION_ENV,
            env,
            None,
            None,
            DEFAULT_KEEP_CONNECTION_S,
            parse_seconds,
        ).value,
        hint=tuple(hint),
    )
