"""The settings resolver: flag → environment → profile → default, the cluster order, and the
head address parser. Pure functions, no network."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.address import HeadAddress, parse_head
from driver.cli import build_parser
from driver.cli.options import CLUSTER_GROUP
from driver.errors import DriverError
from driver.settings import (
    DEFAULT_READY_TIMEOUT_S,
    MAX_SECONDS,
    parse_seconds,
    resolve,
)
from support import FIXTURES, run_driver


# -- the head's address ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("20.1.2.3", HeadAddress("20.1.2.3", 22, "azureuser")),
        ("ray@20.1.2.3", HeadAddress("20.1.2.3", 22, "ray")),
        ("20.1.2.3:2222", HeadAddress("20.1.2.3", 2222, "azureuser")),
        ("me@head.example.org:2200", HeadAddress("head.example.org", 2200, "me")),
        ("me@[2001:db8::7]:22", HeadAddress("2001:db8::7", 22, "me")),
        ("2001:db8::7", HeadAddress("2001:db8::7", 22, "azureuser")),
        ("a" * 63 + ".example.org", HeadAddress("a" * 63 + ".example.org", 22, "azureuser")),
    ],
)
def test_parse_head(spec: str, expected: HeadAddress) -> None:
    assert parse_head(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "a b",
        "@host",
        "host:0",
        "host:99999",
        "host:ssh",
        "host:",
        "me@[::1",
        "host/x",
        "a" * 64 + ".example.org",  # a DNS label is at most 63 characters
        ("abcdefghi." * 26) + "org",  # a name is at most 253
        "-host.example.org",
        "host..example.org",
        "bad user@host",
        "host\x1b[31m",
    ],
)
def test_parse_head_rejects(spec: str) -> None:
    with pytest.raises(DriverError) as e:
        parse_head(spec)
    assert e.value.message.startswith("--head:")
    assert "\n" not in e.value.message


def test_head_address_round_trips_through_its_text() -> None:
    for text in ("azureuser@20.1.2.3", "me@20.1.2.3:2222", "me@[2001:db8::7]:2200"):
        assert str(parse_head(text)) == text


# -- precedence ----------------------------------------------------------------------------------
def _profile(**values: str):  # type: ignore[no-untyped-def]
    return lambda: values


def test_cluster_order_flags_then_environment_then_profile_then_local(tmp_path: Path) -> None:
    env = {"RAYDRIVER_HEAD": "5.6.7.8"}
    profile = _profile(head="x@9.9.9.9", identity="/keys/saved")
    # An explicit flag beats the environment and the profile, whichever flag it is.
    s = resolve(terraform_dir=str(tmp_path), environ=env, load_profile=profile)
    assert (s.cluster.terraform_dir, s.cluster.head, s.cluster.source) == (
        str(tmp_path),
        None,
        "--terraform-dir",
    )
    assert s.hint == ("--terraform-dir", str(tmp_path))
    # Then $RAYDRIVER_HEAD (no need to repeat it in the next commands).
    s = resolve(environ=env, load_profile=profile)
    assert (s.cluster.head, s.cluster.source, s.hint) == ("5.6.7.8", "$RAYDRIVER_HEAD", ())
    # Then the profile, with its key.
    s = resolve(environ={}, load_profile=profile)
    assert (s.cluster.head, s.cluster.source, s.identity) == (
        "x@9.9.9.9",
        "saved profile",
        Path("/keys/saved"),
    )
    # Then local Ray.
    s = resolve(environ={}, load_profile=lambda: None)
    assert s.cluster.is_local and s.cluster.source == "local Ray"


def test_an_empty_environment_variable_counts_as_unset() -> None:
    s = resolve(environ={"RAYDRIVER_HEAD": "  "}, load_profile=lambda: None)
    assert s.cluster.is_local


def test_the_profile_is_not_read_when_a_cluster_is_named() -> None:
    def boom() -> None:
        raise AssertionError("profile read")

    s = resolve(head="1.2.3.4", environ={}, load_profile=boom)
    assert s.cluster.head == "1.2.3.4"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"head": ""}, "--head is empty"),
        ({"head": "   "}, "--head is empty"),
        ({"terraform_dir": ""}, "--terraform-dir is empty"),
        ({"identity": ""}, "--identity is empty"),
        ({"resource_group": "rg"}, "--resource-group and --deployment go together"),
        ({"head": "h", "terraform_dir": "d"}, "name one cluster, not several"),
        ({"head": "h", "resource_group": "g", "deployment": "n"}, "name one cluster"),
    ],
)
def test_bad_cluster_flags_are_one_line(flags: dict, message: str) -> None:
    with pytest.raises(DriverError, match=message):
        resolve(**flags, environ={}, load_profile=lambda: None)


def test_subscription_flag_then_environment_then_profile() -> None:
    profile = _profile(resource_group="rg", deployment="d", subscription="from-profile")
    env = {"AZURE_SUBSCRIPTION_ID": "from-env"}
    assert resolve(environ={}, load_profile=profile).cluster.subscription == "from-profile"
    assert resolve(environ=env, load_profile=profile).cluster.subscription == "from-env"
    s = resolve(resource_group="rg", deployment="d", subscription="from-flag", environ=env)
    assert s.cluster.subscription == "from-flag"
    assert s.hint == ("--resource-group", "rg", "--deployment", "d", "--subscription", "from-flag")


def test_ready_timeout_flag_then_environment_then_default() -> None:
    assert resolve(environ={}).ready_timeout == DEFAULT_READY_TIMEOUT_S
    assert resolve(environ={"RAYDRIVER_READY_TIMEOUT": "12"}).ready_timeout == 12
    assert resolve(ready_timeout=3, environ={"RAYDRIVER_READY_TIMEOUT": "12"}).ready_timeout == 3
    with pytest.raises(DriverError, match=r"^\$RAYDRIVER_READY_TIMEOUT: expected seconds"):
        resolve(environ={"RAYDRIVER_READY_TIMEOUT": "nan"})


@pytest.mark.parametrize(
    "text", ["nan", "inf", "-inf", "1e400", "-1", "soon", str(MAX_SECONDS + 1)]
)
def test_seconds_must_be_finite_and_bounded(text: str) -> None:
    with pytest.raises(ValueError, match="expected seconds"):
        parse_seconds(text)


@pytest.mark.parametrize("flag", ["--connect-timeout", "--ready-timeout"])
@pytest.mark.parametrize("value", ["inf", "nan", "1e400"])
def test_timeouts_refuse_non_finite_values_in_one_line(
    tmp_path: Path, flag: str, value: str
) -> None:
    r = run_driver("status", "j", flag, value, home=tmp_path)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "expected seconds" in lines[0], r.stderr


def test_help_states_the_order_and_every_job_verb_takes_the_options(tmp_path: Path) -> None:
    r = run_driver("--help", home=tmp_path)
    assert r.returncode == 0
    order = [
        "1. --head [USER@]HOST[:PORT], --terraform-dir DIR, or --resource-group RG",
        "2. $RAYDRIVER_HEAD",
        "3. the profile saved by `python -m driver cluster use ...`",
        "4. otherwise local Ray",
    ]
    positions = [r.stdout.index(step) for step in order]
    assert positions == sorted(positions)
    parser = build_parser()
    script = str(FIXTURES / "jobs" / "succeed.py")
    every_cluster_option = [
        *("--head", "h", "--terraform-dir", "d", "--resource-group", "g", "--deployment", "n"),
        *("--subscription", "s", "--arm-endpoint", "https://e", "-i", "k"),
        *("--connect-timeout", "3", "--retries", "1", "--ready-timeout", "9"),
        "--strict-host-keys",
    ]
    for verb, rest in [
        ("submit", [script]),
        ("status", ["j"]),
        ("logs", ["j"]),
        ("stop", ["j"]),
        ("list", []),
        ("download", ["j"]),
        ("dashboard", []),
        ("ssh", []),
    ]:
        ns = parser.parse_args([verb, *every_cluster_option, *rest])
        assert (ns.head, ns.terraform_dir, ns.resource_group, ns.deployment) == ("h", "d", "g", "n")
        assert (ns.identity, ns.connect_timeout, ns.retries, ns.ready_timeout) == ("k", 3, 1, 9)
        help_text = run_driver(verb, "--help", home=tmp_path).stdout
        assert CLUSTER_GROUP in help_text, verb  # the order in a line; the top level's in full
        assert "--terraform-dir DIR" in help_text and "RAYDRIVER_HEAD" in help_text, verb
