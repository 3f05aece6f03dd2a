"""Cluster verbs: dashboard, ssh, use, up, down."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

from driver import arm, layout, profiles
from driver.cli import capacity as capacity_cli
from driver.cli.options import Verbs, open_cluster, parse_pairs, port, settings_from, verb
from driver.cli.output import PROG, say, shown
from driver.cli.price import show_for_up
from driver.errors import EXIT_CAPACITY, EXIT_OK, DriverError
from driver.settings import ARM_ENDPOINT_ENV, DEFAULT_ARM_ENDPOINT, SUBSCRIPTION_ENV, prices_url


def register(verbs: Verbs) -> None:
    p = verb(
        verbs,
        "dashboard",
        "Tunnel the Ray dashboard and TensorBoard to this machine until Ctrl-C.",
    )
    p.add_argument(
        "--port", type=port, default=0, help="local port for the dashboard (default: any free)"
    )
    p.add_argument(
        "--tensorboard-port",
        type=port,
        default=0,
        help="local port for TensorBoard (default: any free)",
    )
    p.set_defaults(func=cmd_dashboard)

    p = verb(
        verbs,
        "ssh",
        "Open a shell on the head, or run one command there (after `--`).",
        "With no command: an interactive shell on the head. With `-- COMMAND...`: run it "
        "there and exit with its exit code. Works while the head is still bootstrapping.",
    )
    p.set_defaults(func=cmd_ssh, trailing_args=True)

    p = verb(
        verbs,
        "exec",
        "Run a local command with the cluster's Jobs API in its environment (after `--`).",
        "Open the way to the cluster (the SSH tunnel, or local Ray) and run COMMAND here with "
        "RAY_ADDRESS and RAY_API_SERVER_ADDRESS pointing at the Jobs API and the cluster token "
        "in RAY_AUTH_TOKEN (RAY_AUTH_MODE=token): Ray's Jobs and state CLI and the Jobs SDK "
        "work as they are, e.g. `exec -- ray job list`, `exec -- ray list nodes`, "
        "`exec -- ray job submit --working-dir . -- python x.py`, `exec -- jupyter lab`. "
        "Ray commands that need the cluster's GCS, which only the head reaches ("
        + ", ".join(f"`ray {v}`" for v in GCS_RAY_VERBS)
        + "), are refused with what to run instead (`ssh -- \"bash -lc 'ray status'\"`, "
        "`status`). The token "
        "exists only in that command's environment: never on disk, never printed. Exits with "
        "the command's exit code.",
    )
    p.set_defaults(func=cmd_exec, trailing_args=True)

    p = verb(
        verbs,
        "use",
        "Save (or show, or forget) the cluster the other commands use by default.",
        "Remember the given cluster options (and -i) in the driver's profile, so later "
        "commands need none. With no options, show the saved profile. The cluster token is "
        "never saved: it stays on the head.",
    )
    p.add_argument("--forget", action="store_true", help="delete the saved profile")
    p.set_defaults(func=cmd_use)

    for name, what in (
        (
            "up",
            "Create or update the cluster: a plan (Terraform) or what-if (ARM), shown, "
            "applied if you agree",
        ),
        ("down", "Delete the cluster: the plan shown first, applied if you agree"),
    ):
        p = verb(
            verbs,
            name,
            f"{what}.",
            f"{what}. With --terraform-dir: `terraform plan` in DIR, then apply. `up` shows the "
            "cluster's hourly price before it asks (as the price command does), and first what "
            "Azure would refuse of the cluster at its maximum size (vCPU quota, VM sizes not "
            f"offered or restricted in the region: exit code {EXIT_CAPACITY} before anything is "
            f"created; {capacity_cli.IGNORE_FLAG} deploys anyway). With "
            "--resource-group: infra/bicep/azuredeploy.json deployed through Azure Resource "
            "Manager (what-if first, then its operations as progress), and the cluster "
            "remembered as `use` does; a missing resource group is created (--location) and "
            f"tagged {arm.CREATED_TAG[0]}={arm.CREATED_TAG[1]!r}. `down --resource-group` "
            "deletes only a resource group `up` created (that tag), with everything in it.",
            cluster=False,
        )
        where = p.add_mutually_exclusive_group(required=True)
        where.add_argument("--terraform-dir", metavar="DIR", help="the Terraform configuration")
        where.add_argument(
            "--resource-group", metavar="RG", help="deploy the ARM template into RG (Bicep stack)"
        )
        p.add_argument(
            "--var",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a Terraform input variable (repeatable)",
        )
        p.add_argument(
            "--var-file", action="append", default=[], metavar="FILE", help="a .tfvars file"
        )
        g = p.add_argument_group("ARM (with --resource-group)")
        if name == "up":
            g.add_argument(
                "--location", metavar="L", help="region for a resource group that does not exist"
            )
            g.add_argument(
                "--parameters",
                metavar="FILE",
                help="ARM parameters file (see infra/bicep/azuredeploy.parameters.json)",
            )
            g.add_argument(
                "--template",
                metavar="FILE",
                default=str(arm.DEFAULT_TEMPLATE),
                help="the ARM template (default: %(default)s, from the repository checkout)",
            )
        g.add_argument(
            "--deployment",
            metavar="NAME",
            default=arm.DEFAULT_DEPLOYMENT,
            help="the deployment's name (default: %(default)s)",
        )
        g.add_argument(
            "--subscription", metavar="ID", help=f"Azure subscription id (env {SUBSCRIPTION_ENV})"
        )
        g.add_argument(
            "--arm-endpoint",
            metavar="URL",
            help=f"Resource Manager endpoint (env {ARM_ENDPOINT_ENV}; "
            f"default {DEFAULT_ARM_ENDPOINT})",
        )
        if name == "up":
            capacity_cli.add_flag(p)
        p.add_argument(
            "-y",
            "--yes",
            action="store_true",
            help="apply without asking (for scripts; otherwise the plan is shown and "
            "only 'yes' goes ahead)",
        )
        p.set_defaults(func=cmd_up if name == "up" else cmd_down)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from driver.cluster import DASHBOARD, TENSORBOARD

    with open_cluster(args) as cluster:
        shown = cluster.dashboard({DASHBOARD: args.port, TENSORBOARD: args.tensorboard_port})
        for ui in shown:
            print(f"{ui.name}: {ui.url}" + (f"  ({ui.down})" if ui.down else ""))
        sys.stdout.flush()
        if not any(ui.tunnelled for ui in shown):
            return EXIT_OK
        say(
            f"The dashboard asks for the cluster token ({layout.TOKEN_FILE} on the head). "
            "Press Ctrl-C to close the tunnel."
        )
        try:
            while cluster.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            say("\nClosed the tunnel.")
            return EXIT_OK
        raise DriverError(f"the connection to {cluster.description} was lost")


def cmd_ssh(args: argparse.Namespace) -> int:
    # Like OpenSSH: the words are joined with spaces, so `-- 'ls | wc -l'` runs a pipeline there.
    command = " ".join(args.trailing) if args.trailing else None
    with open_cluster(args) as cluster:
        return cluster.shell(command, sys.stdin, sys.stdout, sys.stderr)


GCS_RAY_VERBS = (
    "status",
    "memory",
    "timeline",
    "debug",
    "drain-node",
    "kill-actor",
    "global-gc",
    "health-check",
)
"""Ray CLI commands that connect to the GCS (a bootstrap address, HOST:6379), never to the Jobs
API: `exec` gives them only the Jobs API's URL, on which they fail with a traceback."""

_RAY_OPTIONS_WITH_VALUE = ("--logging-level", "--logging-format")


def _ray_verb(command: list[str]) -> str | None:
    """The subcommand of a `ray ...` command line (after Ray's own top-level options)."""
    if not command or command[0].rsplit("/", 1)[-1] != "ray":
        return None
    words = iter(command[1:])
    for word in words:
        if word in _RAY_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def cmd_exec(args: argparse.Namespace) -> int:
    import os
    import signal
    import subprocess

    if not args.trailing:
        raise DriverError(f"exec needs a command after `--`, e.g. {PROG} exec -- ray job list")
    verb = _ray_verb(args.trailing)
    if verb in GCS_RAY_VERBS:
        # A login shell: the admin's profile on the head puts Ray and the token in reach. One
        # word for `ssh --`, which joins its words with spaces as OpenSSH does.
        remote = shlex.join(["bash", "-lc", shlex.join(["ray", *args.trailing[1:]])])
        plain = not any(c in remote for c in '"$`\\!')
        on_head = f'"{remote}"' if plain else shlex.quote(remote)
        raise DriverError(
            f"exec: `ray {verb}` needs the cluster's GCS, which only the head reaches (exec "
            f"passes on the Jobs API alone): run `{PROG} ssh -- {on_head}` on the head, or "
            f"`{PROG} status` for the cluster's nodes and resources"
        )
    with open_cluster(args) as cluster:
        client = cluster.jobs()
        env = {
            **os.environ,
            "RAY_ADDRESS": client.address,
            "RAY_API_SERVER_ADDRESS": client.address,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": client.token or "",
        }
        env.pop("RAY_AUTH_TOKEN_PATH", None)  # the token above, not a file of another cluster
        say(
            f"{cluster.description}: Jobs API at {client.address} for `{shlex.join(args.trailing)}`"
        )
        try:
            proc = subprocess.Popen(args.trailing, env=env)
        except OSError as e:
            raise DriverError(f"cannot run {args.trailing[0]}: {e.strerror}") from None
        # Ctrl-C reaches the command through the terminal; this process waits for it.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return proc.wait()
        finally:
            signal.signal(signal.SIGINT, previous)


def cmd_use(args: argparse.Namespace) -> int:
    from driver.discovery import locate

    if args.forget:
        path = profiles.profile_path()
        say(f"Forgot the saved profile {path}." if profiles.forget() else "No saved profile.")
        return EXIT_OK
    settings = settings_from(args)
    if not settings.cluster.explicit:
        saved = profiles.load()
        if not saved:
            say("No saved profile: commands use local Ray unless given a cluster.")
            return EXIT_OK
        print(json.dumps(saved, indent=2))
        return EXIT_OK
    target = locate(settings.cluster)  # fails now, not on the next command
    profile = settings.cluster.as_profile()
    if settings.identity is not None:
        if not settings.identity.is_file():
            raise DriverError(f"-i: no such key file: {args.identity} (expected a private key)")
        profile["identity"] = str(settings.identity.resolve())
    path = profiles.save(profile)
    say(f"Saved to {path}: later commands use {target.head} ({target.source}).")
    return EXIT_OK


def _confirm(args: argparse.Namespace, question: str) -> None:
    """Ask on the terminal (Terraform's own rule: only "yes" goes ahead); --yes answers."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise DriverError(
            f"{question.rstrip('?')}: not without a yes — stdin is not a terminal, so pass --yes "
            "to apply the plan shown above"
        )
    say(f"{question} Only 'yes' goes ahead.")
    try:
        answer = input("  Enter a value: ")
    except EOFError:
        answer = ""
    if answer.strip() != "yes":
        raise DriverError("not applied: the answer was not yes (nothing changed)")


def _arm_target(args: argparse.Namespace) -> tuple[str | None, str | None]:
    import os

    return (
        args.subscription or os.environ.get(SUBSCRIPTION_ENV),
        args.arm_endpoint or os.environ.get(ARM_ENDPOINT_ENV),
    )


def cmd_up_arm(args: argparse.Namespace) -> int:
    from driver.discovery import ARM_ADMIN_USER, ARM_HEAD_IP, _head_from_outputs
    from driver.settings import ClusterSpec

    if args.var or args.var_file:
        raise DriverError(
            "--var/--var-file are Terraform's: with --resource-group use --parameters"
        )
    template = arm.load_template(args.template)
    values = arm.load_parameters(args.parameters)
    arm.check_parameters(template, values)
    url = prices_url()
    subscription, endpoint = _arm_target(args)
    group, name = args.resource_group, args.deployment
    with arm.ResourceManager(subscription, endpoint) as rm:
        created = False
        found = rm.group(group)
        region = args.location if found is None else found.get("location")
        if found is None and not args.location:
            raise DriverError(
                f"resource group {group} does not exist in subscription {subscription}: "
                "pass --location to create it"
            )
        full = arm.with_defaults(template, values)
        if not isinstance(region, str):
            capacity_cli.not_checked(f"resource group {group} has no location")
        else:
            capacity_cli.check(rm, full, True, region, found is not None, args.ignore_capacity)
        if found is None:
            rm.create_group(group, args.location)
            created = True
            say(f"Created resource group {group} in {args.location} (down deletes it).")
        try:
            say(f"what-if: deployment {name} of {args.template} into {group}")
            changes = rm.what_if(group, name, template, values)
            counts: dict[str, int] = {}
            for c in changes:
                counts[c.change_type] = counts.get(c.change_type, 0) + 1
                print(f"  {shown(c.change_type, 40):<10} {shown(c.resource_id, 400)}")
            sys.stdout.flush()
            summary = ", ".join(f"{n} {t.lower()}" for t, n in sorted(counts.items())) or "none"
            show_for_up(full, True, url, region)
            _confirm(args, f"Deploy: {summary}?")
        except (DriverError, KeyboardInterrupt):
            if created:
                rm.delete_group(group)
                say(f"Deleted the resource group {group} created for this deployment.")
            raise
        for op in rm.deploy(group, name, template, values):
            say(op.line())
        state, outputs, reason = rm.deployment(group, name)
    if state != "Succeeded":
        raise DriverError(
            f"deployment {name} in {group} {state}: {reason or 'see its operations above'}"
        )
    head = _head_from_outputs(outputs, f"the outputs of {name}", ARM_HEAD_IP, ARM_ADMIN_USER)
    spec = ClusterSpec(
        resource_group=group, deployment=name, subscription=subscription, arm_endpoint=endpoint
    )
    path = profiles.save(spec.as_profile())
    say(f"Cluster is up: head {head}. It bootstraps for a few minutes; the driver waits for it.")
    say(f"Saved to {path}: later commands use it.")
    say(f"Next:\n  {PROG} submit examples/cartpole/train.py")
    return EXIT_OK


def cmd_down_arm(args: argparse.Namespace) -> int:
    subscription, endpoint = _arm_target(args)
    group = args.resource_group
    with arm.ResourceManager(subscription, endpoint) as rm:
        found = rm.group(group)
        if found is None:
            raise DriverError(
                f"resource group {group} does not exist in subscription {subscription}"
            )
        tag, value = arm.CREATED_TAG
        if (found.get("tags") or {}).get(tag) != value:
            raise DriverError(
                f"resource group {group} was not created by `{PROG} up` (no tag {tag}={value!r}): "
                "down deletes only groups it created; delete the cluster's resources yourself"
            )
        _confirm(
            args,
            f"Delete the resource group {group} and everything in it, the head's disk with its "
            "results among them?",
        )
        rm.delete_group(group)
    saved = profiles.load() or {}
    if saved.get("resource_group", "").lower() == group.lower():
        profiles.forget()
    say(f"Deleted the resource group {group}.")
    return EXIT_OK


def cmd_up(args: argparse.Namespace) -> int:
    from driver import terraform

    if args.resource_group:
        return cmd_up_arm(args)
    from driver.discovery import from_terraform

    variables = parse_pairs(args.var, "--var")
    url = prices_url()
    say(f"terraform init + plan in {args.terraform_dir} (its output follows)")
    with terraform.planned(args.terraform_dir, variables, args.var_file) as (plan, summary):
        if summary.empty:
            say("No changes: the cluster already matches the configuration.")
        else:
            for address in summary.replaced_head:
                say(
                    f"WARNING: this plan REPLACES {address}: the head's disk goes with it — "
                    f"results and checkpoints under {layout.RESULTS_DIR} are lost; download "
                    "them first (python -m driver download ID)"
                    if terraform.is_head_vm(address)
                    else f"WARNING: this plan replaces {address} (the head's address may change)"
                )
            show_for_up(summary.variables, False, url, None)
            # The plan does not say whether the cluster's VMs exist (and count in Azure's
            # usage already): the check compares with the quota limits alone.
            capacity_cli.check_with_subscription(
                args, summary.variables, False, None, terraform=True, existing=True,
                ignore=args.ignore_capacity,
                refused=f"nothing applied; {capacity_cli.IGNORE_FLAG} applies anyway",
            )  # fmt: skip
            _confirm(
                args,
                f"Apply: {summary.add} to add, {summary.change} to change, {summary.destroy} "
                "to destroy?",
            )
            terraform.apply_plan(args.terraform_dir, plan)
    head = from_terraform(args.terraform_dir)
    hint = shlex.join(["--terraform-dir", args.terraform_dir])
    say(f"Cluster is up: head {head}. It bootstraps for a few minutes; the driver waits for it.")
    say(f"Next:\n  {PROG} submit examples/cartpole/train.py {hint}\n  {PROG} use {hint}")
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from driver import terraform

    if args.resource_group:
        return cmd_down_arm(args)

    variables = parse_pairs(args.var, "--var")
    say(f"terraform init + plan -destroy in {args.terraform_dir} (its output follows)")
    with terraform.planned(args.terraform_dir, variables, args.var_file, destroy=True) as (
        plan,
        summary,
    ):
        if summary.empty:
            say("Nothing to delete.")
            return EXIT_OK
        _confirm(
            args,
            f"Delete the cluster: {summary.destroy} resources, the head's disk with its results "
            "among them?",
        )
        terraform.apply_plan(args.terraform_dir, plan)
    say("Cluster deleted.")
    return EXIT_OK
