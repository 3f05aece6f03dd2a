"""``cluster up|down|use|ssh|exec|dashboard`` (``start`` and ``status`` are in :mod:`.power` and
:mod:`.jobs`, ``price`` in :mod:`.price`)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from driver import arm, layout, price, profiles, terraform
from driver.cli import capacity as capacity_cli
from driver.cli.options import (
    Verbs,
    azure_options,
    open_cluster,
    parse_pairs,
    port,
    settings_from,
    subscription_of,
    terraform_vars,
    verb,
)
from driver.cli.output import PROG, say, shown
from driver.cli.price import show_for_up
from driver.errors import EXIT_CAPACITY, EXIT_OK, DriverError
from driver.settings import prices_url


def add_dashboard(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
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


def add_ssh(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Open a shell on the head, or run one command there (after `--`).",
        "With no command: an interactive shell on the head. With `-- COMMAND...`: run it "
        "there and exit with its exit code. Works while the head is still bootstrapping.",
    )
    p.set_defaults(func=cmd_ssh, trailing_args=True)


def add_exec(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Run a local command with the cluster's Jobs API in its environment (after `--`).",
        "Open the way to the cluster (the SSH tunnel, or local Ray) and run COMMAND here with "
        "RAY_ADDRESS and RAY_API_SERVER_ADDRESS pointing at the Jobs API and the cluster token "
        "in RAY_AUTH_TOKEN (RAY_AUTH_MODE=token): Ray's Jobs and state CLI and the Jobs SDK "
        "work as they are, e.g. `cluster exec -- ray job list`, `... -- ray list nodes`, "
        "`... -- jupyter lab`. "
        "Ray commands that need the cluster's GCS, which only the head reaches ("
        + ", ".join(f"`ray {v}`" for v in GCS_RAY_VERBS)
        + "), are refused with what to run instead (`cluster ssh -- \"bash -lc 'ray "
        "status'\"`, `cluster status`). The token "
        "exists only in that command's environment: never on disk, never printed. Exits with "
        "the command's exit code.",
    )
    p.set_defaults(func=cmd_exec, trailing_args=True)


def add_use(verbs: Verbs, name: str) -> None:
    p = verb(
        verbs,
        name,
        "Save (or show, or forget) the cluster the other commands use by default.",
        "Remember the given cluster options (and -i) in the driver's profile, so later "
        "commands need none. With no options, show the saved profile. The cluster token is "
        "never saved: it stays on the head.",
    )
    p.add_argument("--forget", action="store_true", help="delete the saved profile")
    p.set_defaults(func=cmd_use)


UP = "Create or update the cluster: its plan shown, applied if you agree."
UP_DESCRIPTION = (
    f"{UP} --terraform-dir: `terraform plan` in DIR. --resource-group: the ARM template's "
    "what-if; a missing group is created (--location) and tagged for `cluster down`, and the "
    "cluster is saved as `cluster use` does. First the results storage the nodes mount as "
    "/mnt/cluster_storage (unless the inputs name one, or --no-results-storage), then what "
    f"Azure would refuse at the cluster's maximum size (exit code {EXIT_CAPACITY}, nothing "
    "created) and its hourly price. See docs/deploy-terraform.md and docs/deploy-bicep.md."
)
DOWN = "Delete the cluster: its plan shown, applied if you agree."
DOWN_DESCRIPTION = (
    f"{DOWN} --terraform-dir: `terraform plan -destroy` in DIR. --resource-group: the group "
    "and everything in it, only if `cluster up` created it (its tag). The results storage "
    "outlives the cluster: down keeps it and says how to delete it."
)


def add_up(verbs: Verbs, name: str) -> None:
    _add_up_or_down(verbs, name, up=True)


def add_down(verbs: Verbs, name: str) -> None:
    _add_up_or_down(verbs, name, up=False)


def _add_up_or_down(verbs: Verbs, name: str, up: bool) -> None:
    p = verb(
        verbs,
        name,
        UP if up else DOWN,
        UP_DESCRIPTION if up else DOWN_DESCRIPTION,
        cluster=False,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--terraform-dir", metavar="DIR", help="the Terraform configuration")
    where.add_argument(
        "--resource-group", metavar="RG", help="deploy the ARM template into RG (Bicep stack)"
    )
    terraform_vars(p)
    g = p.add_argument_group("ARM (with --resource-group)")
    if up:
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
            help="the ARM template (default: %(default)s)",
        )
    g.add_argument(
        "--deployment",
        metavar="NAME",
        default=arm.DEFAULT_DEPLOYMENT,
        help="the deployment's name (default: %(default)s)",
    )
    azure_options(g)
    g = p.add_argument_group("results storage (cluster storage)")
    g.add_argument(
        "--results-dir",
        metavar="DIR",
        help="with --terraform-dir: the results storage stack (default: "
        f"DIR/{terraform.RESULTS_DIR})",
    )
    if up:
        g.add_argument(
            "--no-results-storage",
            action="store_true",
            help="no cluster storage: results on the head's disk only",
        )
        g.add_argument(
            "--results-template",
            metavar="FILE",
            help=f"with --resource-group: its ARM template (default: {arm.RESULTS_TEMPLATE_NAME} "
            "beside --template)",
        )
        capacity_cli.add_flag(p)
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="apply without asking (for scripts; otherwise only 'yes' goes ahead)",
    )
    p.set_defaults(func=cmd_up if up else cmd_down)


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
        raise DriverError(
            f"exec needs a command after `--`, e.g. {PROG} cluster exec -- ray job list"
        )
    verb = _ray_verb(args.trailing)
    if verb in GCS_RAY_VERBS:
        # A login shell: the admin's profile on the head puts Ray and the token in reach. One
        # word for `ssh --`, which joins its words with spaces as OpenSSH does.
        remote = shlex.join(["bash", "-lc", shlex.join(["ray", *args.trailing[1:]])])
        plain = not any(c in remote for c in '"$`\\!')
        on_head = f'"{remote}"' if plain else shlex.quote(remote)
        raise DriverError(
            f"exec: `ray {verb}` needs the cluster's GCS, which only the head reaches (exec "
            f"passes on the Jobs API alone): run `{PROG} cluster ssh -- {on_head}` on the head, or "
            f"`{PROG} cluster status` for the cluster's nodes and resources"
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


NO_STORAGE = (
    "No results storage (--no-results-storage): the cluster has no cluster storage "
    "(/mnt/cluster_storage), results stay on the head's disk, and a multi-node Tune run needs a "
    "storage_path of its own (docs/results-and-storage.md)."
)


def _what_if(rm: arm.ResourceManager, group: str, name: str, template: dict[str, Any],
             values: dict[str, Any], what: str) -> str:  # fmt: skip
    """ARM's what-if, shown one line per change; its summary ("3 create")."""
    say(f"what-if: deployment {name} of {what} into {group}")
    changes = rm.what_if(group, name, template, values)
    counts: dict[str, int] = {}
    for c in changes:
        counts[c.change_type] = counts.get(c.change_type, 0) + 1
        print(f"  {shown(c.change_type, 40):<10} {shown(c.resource_id, 400)}")
    sys.stdout.flush()
    _refuse_mode_switch(group, [c for c in changes if c.mode_switch])
    return ", ".join(f"{n} {t.lower()}" for t, n in sorted(counts.items())) or "none"


def _refuse_mode_switch(group: str, switches: list[arm.Change]) -> None:
    """Azure fixes a scale set's orchestration mode when it creates it: a deployment that would
    switch one fails halfway, so ``up`` refuses it before anything is deployed."""
    if not switches:
        return
    said = ", ".join(
        f"{shown(c.name, 80)} ({c.mode_switch[0]} -> {c.mode_switch[1]})"
        for c in switches
        if c.mode_switch
    )
    first = shown(switches[0].name, 80)
    raise DriverError(
        f"what-if: the deployment would switch the orchestration mode of the existing scale set "
        f"{said}, which Azure cannot change in place (nothing deployed): pin the pool's "
        "orchestrationMode: 'Uniform' in --parameters (workerPools), or delete the scale set "
        f"first (az vmss delete -g {shown(group, 90)} -n {first}) and run up again to create "
        "it Flexible (docs/pools.md)"
    )


def _arm_results_template(
    args: argparse.Namespace, template: dict[str, Any], values: dict[str, Any]
) -> dict[str, Any] | None:
    """The results storage's template when ``up`` deploys it (read before anything is sent);
    None with --no-results-storage or an account the parameters file names (said here)."""
    key = price.arm_name(price.RESULTS_STORAGE)
    if key not in template.get("parameters", {}):
        raise DriverError(
            f"--template: {args.template} has no parameter {key}, so `up` cannot give the "
            "cluster its results storage: pass --no-results-storage"
        )
    if args.no_results_storage:
        say(NO_STORAGE)
        return None
    if values.get(key):
        say(f"Results storage: {values[key]} (from --parameters; nothing deployed for it).")
        return None
    path = args.results_template or str(Path(args.template).parent / arm.RESULTS_TEMPLATE_NAME)
    try:
        return arm.load_template(path)
    except DriverError as e:
        raise DriverError(
            f"{e} (the results storage; --no-results-storage deploys without it)"
        ) from None


def _arm_results(
    args: argparse.Namespace,
    rm: arm.ResourceManager,
    results: dict[str, Any],
    group: str,
    region: str | None,
) -> str:
    """The results storage for the cluster in ``group``, deployed first into its own group:
    its id. A failure or refusal deletes the results group when this run created it, and stops
    ``up`` before the cluster."""
    path = args.results_template or str(Path(args.template).parent / arm.RESULTS_TEMPLATE_NAME)
    rgroup, name = arm.results_group(group), arm.RESULTS_DEPLOYMENT
    created = False
    try:
        found = rm.group(rgroup)
        if found is None:
            if region is None:
                raise DriverError(f"resource group {group} has no location for {rgroup}")
            rm.create_group(rgroup, region, arm.RESULTS_TAG)
            created = True
            tag = f"{arm.RESULTS_TAG[0]}={arm.RESULTS_TAG[1]!r}"
            say(f"Created resource group {rgroup} in {region} for the results storage ({tag}).")
        summary = _what_if(rm, rgroup, name, results, {}, path)
        _confirm(args, f"Deploy the results storage first: {summary}?")
        for op in rm.deploy(rgroup, name, results, {}):
            say(op.line())
        state, outputs, reason = rm.deployment(rgroup, name)
        if state != "Succeeded":
            raise DriverError(f"deployment {name} in {rgroup} {state}: {reason or 'see above'}")
        account = outputs.get(arm.RESULTS_OUTPUT)
        if not isinstance(account, str) or not account:
            raise DriverError(f"deployment {name} in {rgroup} has no output {arm.RESULTS_OUTPUT}")
    except (DriverError, KeyboardInterrupt) as e:
        if created:
            rm.delete_group(rgroup)
            say(f"Deleted the resource group {rgroup} created for the results storage.")
        if isinstance(e, DriverError):
            raise DriverError(f"results storage: {e} — the cluster was not deployed") from None
        raise
    say(f"Results storage: {account} in resource group {rgroup} (outlives the cluster).")
    return account


def cmd_up_arm(args: argparse.Namespace) -> int:
    from driver.discovery import ARM_ADMIN_USER, ARM_HEAD_IP, _head_from_outputs
    from driver.settings import ClusterSpec

    if args.var or args.var_file or args.results_dir:
        raise DriverError(
            "--var/--var-file/--results-dir are Terraform's: with --resource-group use --parameters"
        )
    template = arm.load_template(args.template)
    values = arm.load_parameters(args.parameters)
    arm.check_parameters(template, values)
    results = _arm_results_template(args, template, values)
    url = prices_url()
    subscription, endpoint = subscription_of(args, terraform=False)
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
        deployed = results is not None
        if results is not None:
            where = region if isinstance(region, str) else None
            account = _arm_results(args, rm, results, group, where)
            values = {**values, price.arm_name(price.RESULTS_STORAGE): account}
            full = arm.with_defaults(template, values)
        if found is None:
            rm.create_group(group, args.location)
            created = True
            say(f"Created resource group {group} in {args.location} (down deletes it).")
        try:
            summary = _what_if(rm, group, name, template, values, args.template)
            show_for_up(full, True, url, region)
            _confirm(args, f"Deploy: {summary}?")
        except (DriverError, KeyboardInterrupt):
            if created:
                rm.delete_group(group)
                say(f"Deleted the resource group {group} created for this deployment.")
            if deployed:
                say(_results_kept_arm(group))
            raise
        for op in rm.deploy(group, name, template, values):
            say(op.line())
        state, outputs, reason = rm.deployment(group, name)
    if state != "Succeeded":
        if deployed:
            say(_results_kept_arm(group))
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
    say(f"Next:\n  {PROG} job submit examples/cartpole/train.py")
    return EXIT_OK


def _results_kept_arm(group: str) -> str:
    rgroup = arm.results_group(group)
    return (
        f"The results storage stays in resource group {rgroup} (it outlives clusters; `up` "
        f"reuses it): `az group delete --name {rgroup}` deletes it with every result."
    )


def cmd_down_arm(args: argparse.Namespace) -> int:
    if args.results_dir:
        raise DriverError("--results-dir is Terraform's: with --resource-group leave it out")
    subscription, endpoint = subscription_of(args, terraform=False)
    group = args.resource_group
    with arm.ResourceManager(subscription, endpoint) as rm:
        found = rm.group(group)
        if found is None:
            raise DriverError(
                f"resource group {group} does not exist in subscription {subscription}"
            )
        tags = found.get("tags") or {}
        kept, kept_value = arm.RESULTS_TAG
        if tags.get(kept) == kept_value:
            raise DriverError(
                f"resource group {group} holds results storage (tag {kept}={kept_value!r}), "
                f"which outlives clusters: down never deletes it; `az group delete --name "
                f"{group}` deletes it with every result"
            )
        tag, value = arm.CREATED_TAG
        if tags.get(tag) != value:
            raise DriverError(
                f"resource group {group} was not created by `{PROG} up` (no tag {tag}={value!r}): "
                "down deletes only groups it created; delete the cluster's resources yourself"
            )
        results = rm.group(arm.results_group(group)) is not None
        _confirm(
            args,
            f"Delete the resource group {group} and everything in it, the head's disk with its "
            "results among them"
            + (f" ({arm.results_group(group)} stays)" if results else "")
            + "?",
        )
        rm.delete_group(group)
    saved = profiles.load() or {}
    if saved.get("resource_group", "").lower() == group.lower():
        profiles.forget()
    say(f"Deleted the resource group {group}.")
    if results:
        say(_results_kept_arm(group))
    return EXIT_OK


def _terraform_results(args: argparse.Namespace, variables: dict[str, str]) -> str | None:
    """The results storage's id for the cluster in --terraform-dir, its stack (--results-dir)
    planned, shown and applied first when the cluster's inputs name no account; None when
    nothing was applied here (--no-results-storage, or an account named by the inputs)."""
    if args.no_results_storage:
        say(NO_STORAGE)
        return None
    values = terraform.input_values(args.terraform_dir, variables, args.var_file)
    if price.RESULTS_STORAGE not in values:
        raise DriverError(
            f"--terraform-dir: {args.terraform_dir} declares no {price.RESULTS_STORAGE}, so `up` "
            "cannot give the cluster its results storage: pass --no-results-storage"
        )
    named = values[price.RESULTS_STORAGE]
    if named:
        say(f"Results storage: {named} (from the cluster's inputs; nothing applied for it).")
        return None
    folder = args.results_dir or str(Path(args.terraform_dir) / terraform.RESULTS_DIR)
    if not Path(folder).expanduser().is_dir():
        raise DriverError(
            f"--results-dir: no such folder: {folder} (the results storage stack, "
            "infra/terraform/results; --no-results-storage deploys the cluster without it)"
        )
    # The cluster's location only: its var files and --var set the cluster's variables (its
    # resource_group_name among them), not the results stack's; that reads its own tfvars.
    location = values.get(price.LOCATION)
    try:
        say(
            f"Results storage first: terraform init + plan in {folder} with location={location} "
            "(its output follows)"
        )
        with terraform.planned(folder, {price.LOCATION: str(location)}, []) as (plan, summary):
            if summary.empty:
                say("Results storage: no changes (it exists and is reused).")
            else:
                if summary.destroy:
                    say(
                        f"WARNING: this plan deletes {summary.destroy} resources of the results "
                        "storage: the results in it may go with them"
                    )
                _confirm(
                    args,
                    f"Apply the results storage first: {summary.add} to add, {summary.change} "
                    f"to change, {summary.destroy} to destroy?",
                )
                terraform.apply_plan(folder, plan)
        account = terraform.outputs(folder).get(terraform.RESULTS_OUTPUT)
        if not isinstance(account, str) or not account:
            raise DriverError(f"{folder} has no output {terraform.RESULTS_OUTPUT}")
    except DriverError as e:
        raise DriverError(f"results storage: {e} — the cluster was not deployed") from None
    say(f"Results storage: {account} (state in {folder}; outlives the cluster).")
    return account


def _results_kept_terraform(folder: str) -> str:
    return (
        f"The results storage stays (its own state in {folder}; `up` reuses it): "
        f"`terraform -chdir={shlex.quote(folder)} destroy` deletes it with every result."
    )


def cmd_up(args: argparse.Namespace) -> int:
    if args.resource_group:
        return cmd_up_arm(args)
    from driver.discovery import from_terraform

    if args.results_template:
        raise DriverError("--results-template is ARM's: with --terraform-dir use --results-dir")
    variables = parse_pairs(args.var, "--var")
    url = prices_url()
    account = _terraform_results(args, variables)
    if account is not None:
        variables = {**variables, price.RESULTS_STORAGE: account}
    folder = args.results_dir or str(Path(args.terraform_dir) / terraform.RESULTS_DIR)
    say(f"terraform init + plan in {args.terraform_dir} (its output follows)")
    try:
        with terraform.planned(args.terraform_dir, variables, args.var_file) as (plan, summary):
            if summary.empty:
                say("No changes: the cluster already matches the configuration.")
            else:
                for address in summary.replaced_head:
                    say(
                        f"WARNING: this plan REPLACES {address}: the head's disk goes with it — "
                        f"results and checkpoints under {layout.RESULTS_DIR} are lost; download "
                        "them first (python -m driver results download ID)"
                        if terraform.is_head_vm(address)
                        else f"WARNING: this plan replaces {address} (the head's address may "
                        "change)"
                    )
                for address in summary.replaced_scale_sets:
                    say(terraform.scale_set_warning(address))
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
    except (DriverError, KeyboardInterrupt):
        if account is not None:
            say(_results_kept_terraform(folder))
        raise
    head = from_terraform(args.terraform_dir)
    hint = shlex.join(["--terraform-dir", args.terraform_dir])
    say(f"Cluster is up: head {head}. It bootstraps for a few minutes; the driver waits for it.")
    say(
        f"Next:\n  {PROG} job submit examples/cartpole/train.py {hint}\n  {PROG} cluster use {hint}"
    )
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    if args.resource_group:
        return cmd_down_arm(args)

    variables = parse_pairs(args.var, "--var")
    folder = args.results_dir or str(Path(args.terraform_dir) / terraform.RESULTS_DIR)
    results = (Path(folder).expanduser() / "terraform.tfstate").is_file()
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
            "among them" + (f" (the results storage in {folder} stays)" if results else "") + "?",
        )
        terraform.apply_plan(args.terraform_dir, plan)
    say("Cluster deleted.")
    if results:
        say(_results_kept_terraform(folder))
    return EXIT_OK
