"""``python -m nodekit``: render the cloud-init documents and rehearse a cluster locally.

The node toolkit's command line, for whoever maintains the cluster image. ``python -m driver
render|rehearse`` are aliases that run it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from driver.errors import EXIT_JOB_FAILED, EXIT_OK, EXIT_USAGE, DriverError, run_main

PROG = "python -m nodekit"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise DriverError(f"{self.prog}: {message} (see {self.prog} --help)", EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=Parser)
    verbs.required = True
    p = verbs.add_parser(
        "render",
        help="Render the cloud-init documents for head and workers.",
        description=(
            "Render cloud-init/templates/ into cloud-init/rendered/{head,worker}.yaml and the "
            "image customizer cloud-init/rendered/install.sh. Settings "
            "come from cloud-init/config.yaml, with the keys of --config FILE over them; the "
            "Ray/torch/gymnasium pins come from pyproject.toml. Deploy-time values stay "
            "placeholders (cloud-init/placeholders.yaml) for Terraform and Bicep to fill."
        ),
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="YAML settings over the defaults")
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="output folder (default: cloud-init/rendered)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the output folder's documents differ from a fresh render",
    )
    p.set_defaults(func=cmd_render)
    register_rehearse(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def command() -> int:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        return int(args.func(args))

    return run_main(command, say)


def cmd_render(args: argparse.Namespace) -> int:
    from nodekit import render

    documents = render.render(render.load_config(args.config))
    out = args.out or render.rendered_dir()
    if args.check:
        stale = [
            n for n, t in documents.items() if not (out / n).exists() or (out / n).read_text() != t
        ]
        if stale:
            say(f"out of date in {out}: {', '.join(stale)} (run: python -m nodekit render)")
            return EXIT_JOB_FAILED
        say(f"{out}: up to date")
        return EXIT_OK
    for path in render.write(documents, out):
        if path.name == render.CUSTOMIZER:
            say(f"wrote {path} (the image customizer)")
            continue
        size = render.custom_data_size(path.read_text())
        say(f"wrote {path} ({size} of {render.CUSTOM_DATA_LIMIT} base64 characters)")
    return EXIT_OK


def register_rehearse(verbs: Any) -> None:
    from nodekit.rehearsal.cluster import DEFAULT_BAKE_SUBNET, DEFAULT_HTTP_PORT, DEFAULT_SUBNET
    from nodekit.rehearsal.standins.azure_compute import ORCHESTRATION_MODES
    from nodekit.rehearsal.state import DEFAULT_ORCHESTRATION_MODE

    p = verbs.add_parser(
        "rehearse",
        help="Boot a local rehearsal cluster from the rendered cloud-init (root, Linux).",
        description=(
            "Boot one head and N workers as Debian 12 systemd-nspawn containers, each in its own "
            "network namespace on a private bridge, each seeded (NoCloud) with "
            "cloud-init/rendered/*.yaml filled like Terraform and Bicep fill them. Packages come "
            "only from what this machine serves on the bridge (an apt repository and a Python "
            "index it builds from the registries and caches under "
            "$RAYDRIVER_REHEARSAL_DIR, default /var/lib/ray-azure-rl/rehearsal). Needs root."
        ),
    )
    actions = p.add_subparsers(dest="rehearse_verb", metavar="ACTION", parser_class=type(p))
    actions.required = True
    up = actions.add_parser("up", help="Build what is missing and boot the cluster.")
    up.add_argument("--name", default="rehearsal", help="cluster name (default: rehearsal)")
    up.add_argument("--workers", type=int, default=2, help="number of workers (default: 2; 0-50)")
    up.add_argument(
        "--pip",
        action="append",
        default=[],
        metavar="REQ",
        help="extra pip requirement for every node, like EXTRA_PIP_PACKAGES",
    )
    up.add_argument(
        "--apt",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="extra Debian package for every node, like EXTRA_APT_PACKAGES",
    )
    up.add_argument(
        "--ssh-public-key",
        type=Path,
        metavar="FILE",
        help="admin user's public key (default: a new key in the cluster folder)",
    )
    up.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"default: {DEFAULT_SUBNET}")
    up.add_argument(
        "--http-port",
        type=int,
        default=DEFAULT_HTTP_PORT,
        help=f"port of the package server on the bridge (default: {DEFAULT_HTTP_PORT})",
    )
    up.add_argument(
        "--torch-index-url",
        default=None,
        help="where the host fetches torch for the wheelhouse (default: the nodes' own "
        "default, TORCH_INDEX_URL in cloud-init/placeholders.yaml; pip's own find-links are "
        "used too)",
    )
    up.add_argument(
        "--warm-node-cache",
        action="store_true",
        help="share a persistent package cache with the nodes, as a custom image "
        "would carry one (benchmarks)",
    )
    up.add_argument(
        "--no-image",
        dest="image",
        action="store_false",
        help="boot the nodes without the node image: each installs at boot, as a VM from the "
        "stacks' base image (default: the install phase baked once per install digest, "
        "cloud-init/rendered/install.sh run in a container, under every node's disk)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds to wait for every node to be ready (default: 1800)",
    )
    up.add_argument(
        "--scaling-mode",
        choices=("cpu", "ray"),
        default="cpu",
        help="ray: Ray's autoscaler on the head drives a fake scale set (Azure Compute played on "
        "the bridge) whose new instances boot as worker containers here and whose deleted "
        "ones are removed (default: cpu, no autoscaler)",
    )
    up.add_argument("--min-workers", type=int, default=0, help="ray mode: min_workers (0)")
    up.add_argument("--max-workers", type=int, default=4, help="ray mode: max_workers (4)")
    up.add_argument(
        "--idle-timeout-minutes", type=int, default=5, help="ray mode: idle_timeout_minutes (5)"
    )
    up.add_argument(
        "--gpu-pool-max",
        type=int,
        default=0,
        help="ray mode: a second worker pool 'gpu' (min 0, max N, its own fake scale set, size "
        "Standard_NC4as_T4_v3) whose containers declare one GPU to Ray without hardware "
        "(default: 0, the default pool alone)",
    )
    up.add_argument(
        "--orchestration-mode",
        choices=ORCHESTRATION_MODES,
        default=DEFAULT_ORCHESTRATION_MODE,
        help="the worker pools' scale sets' orchestration mode, as a stack's pool's: Flexible "
        "(each worker a VM of its own, named rh-NAME-POOL_ and 8 hexadecimal characters, its "
        "instance id) or Uniform (rh-NAME-POOL_N); the fake Compute, the metadata service and "
        f"Scheduled Events answer as Azure does for it (default: {DEFAULT_ORCHESTRATION_MODE}, "
        "the stacks' default)",
    )
    up.add_argument(
        "--autostop-idle-minutes",
        type=int,
        default=0,
        help="the head's autostop: after N idle minutes the workers go to zero and the head is "
        "deallocated (its container powers off; the fake Compute's start boots it again); "
        "default 0, off",
    )
    up.add_argument(
        "--no-results-storage",
        dest="results_storage",
        action="store_false",
        help="no Blob storage for results: jobs keep their results on the head's disk only, as "
        "a stack deployed with results storage none (default: Azurite on the bridge, its "
        "container the nodes' RESULTS_URL, its data kept by down)",
    )
    up.set_defaults(func=cmd_rehearse_up)
    hook = actions.add_parser(
        "scale-set",
        help="What the fake scale set runs when it creates or deletes an instance (ray mode).",
    )
    hook.add_argument("action", choices=("create", "delete"))
    hook.add_argument("--name", default="rehearsal")
    hook.add_argument(
        "--scale-set", default="", help="the instance's scale set (default: the default pool's)"
    )
    hook.add_argument(
        "--instance-id",
        required=True,
        help="a Uniform scale set's instance number, or a Flexible scale set's VM name",
    )
    hook.add_argument("--ip", required=True)
    hook.set_defaults(func=cmd_rehearse_scale_set)
    vm = actions.add_parser(
        "vm",
        help="What the fake Compute runs when the head's VM is deallocated or started (autostop).",
    )
    vm.add_argument("action", choices=("deallocate", "start"))
    vm.add_argument("--name", default="rehearsal")
    vm.set_defaults(func=cmd_rehearse_vm)
    add = actions.add_parser(
        "add-worker",
        help="Boot more workers into the running cluster (a scale-out, as autoscale does).",
    )
    add.add_argument("--name", default="rehearsal")
    add.add_argument("--count", type=int, default=1, help="how many workers (default: 1)")
    add.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds to wait for the new workers (default: 1800)",
    )
    add.add_argument(
        "--no-image",
        dest="image",
        action="store_false",
        help="boot them without the cluster's node image (they install at boot)",
    )
    add.set_defaults(func=cmd_rehearse_add_worker)
    for verb, what in (
        ("reboot", "Reboot one node, as `sudo reboot` on a VM (it boots again)."),
        ("poweroff", "Power one node off, as a VM switched off: it shuts down (it stays down)."),
        (
            "crash",
            "Lose one node at once, as a VM whose host failed: its network goes silent and "
            "every process in it is killed, nothing shuts down (it stays down).",
        ),
    ):
        power = actions.add_parser(verb, help=what)
        power.add_argument("--name", default="rehearsal")
        power.add_argument("--node", required=True, help="head, worker-1, worker-2, ...")
        power.set_defaults(func=cmd_rehearse_power, power=verb)
    replace = actions.add_parser(
        "replace-head",
        help="Delete the head with its disk and boot a fresh one from the same documents (as a "
        "head VM re-created on Azure); the workers rejoin it at the same address.",
    )
    replace.add_argument("--name", default="rehearsal")
    replace.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds to wait for the new head to be ready (default: 1800)",
    )
    replace.set_defaults(func=cmd_rehearse_replace_head)
    down = actions.add_parser("down", help="Remove every container, namespace, mount and file.")
    down.add_argument("--name", default="rehearsal")
    down.add_argument("--subnet", default=DEFAULT_SUBNET)
    down.add_argument(
        "--delete-results",
        action="store_true",
        help="remove the cluster's results storage too (default: kept, as a storage account "
        "outlives the compute; `rehearse storage` serves it)",
    )
    down.set_defaults(func=cmd_rehearse_down)
    storage = actions.add_parser(
        "storage",
        help="Serve the results storage a cluster kept after down, on loopback, until Ctrl-C.",
        description=(
            "Serve the results storage (Azurite's data) that `rehearse down` kept for the "
            "cluster NAME, with the cluster down, on 127.0.0.1 over HTTPS with OAuth, with a "
            "metadata service on loopback for tokens (as `az login` for a storage account on "
            "Azure). Prints the container's URL and the environment for `python -m driver "
            "runs|download|plot --results-url URL`."
        ),
    )
    storage.add_argument("--name", default="rehearsal")
    storage.add_argument(
        "--port", type=int, default=0, help="Azurite's port on 127.0.0.1 (default: a free one)"
    )
    storage.set_defaults(func=cmd_rehearse_storage)
    prep = actions.add_parser(
        "prepare",
        help="Build what every cluster boots from, once per machine, without booting anything.",
        description=(
            "Build into the cache what every `up` needs first and otherwise builds itself: the "
            "Debian 12 root filesystem (debootstrap), the index with the documents' torch and "
            "the PyPI mirror's tool environment. A second `prepare` or `up` meanwhile waits for "
            "it; later ones find it built."
        ),
    )
    prep.add_argument(
        "--torch-index-url",
        default=None,
        help="where the host fetches torch for the nodes (default: as for up)",
    )
    prep.add_argument(
        "--bake",
        action="store_true",
        help="also bake the node image of an `up` with default values, on a bridge of its own "
        "(--name, --subnet) that is removed again; its PyPI mirror then seeds every cluster's",
    )
    prep.add_argument("--name", default="bake", help="with --bake: the bridge's cluster name")
    prep.add_argument("--subnet", default=DEFAULT_BAKE_SUBNET, help="with --bake: its subnet")
    prep.set_defaults(func=cmd_rehearse_prepare)
    st = actions.add_parser("status", help="Show the cluster's nodes (JSON).")
    st.add_argument("--name", default="rehearsal")
    st.set_defaults(func=cmd_rehearse_status)


def cmd_rehearse_prepare(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    t0 = time.monotonic()
    rootfs, _ = Rehearsal().prepare(torch_index_url=args.torch_index_url, progress=say)
    print(f"ready in {time.monotonic() - t0:.0f} s: {rootfs}")
    if args.bake:
        layer = Rehearsal(args.name, subnet=args.subnet).bake_image(
            torch_index_url=args.torch_index_url, progress=say
        )
        print(f"node image ready in {time.monotonic() - t0:.0f} s: {layer}")
    return EXIT_OK


def cmd_rehearse_up(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal
    from nodekit.rehearsal.trust import KNOWN_HOSTS

    r = Rehearsal(args.name, subnet=args.subnet, http_port=args.http_port)
    state = r.up(
        workers=args.workers,
        extra_pip=args.pip,
        extra_apt=args.apt,
        ssh_public_key=args.ssh_public_key,
        torch_index_url=args.torch_index_url,
        warm_node_cache=args.warm_node_cache,
        timeout=args.timeout,
        progress=say,
        scaling_mode=args.scaling_mode,
        min_workers=args.min_workers,
        max_workers=args.max_workers,
        idle_timeout_minutes=args.idle_timeout_minutes,
        image=args.image,
        autostop_idle_minutes=args.autostop_idle_minutes,
        results_storage=args.results_storage,
        gpu_pool_max=args.gpu_pool_max,
        orchestration_mode=args.orchestration_mode,
    )
    head = state.head
    print(f"head: {state.admin_user}@{head.ip}")
    for n in state.nodes[1:]:
        print(f"{n.name}: {state.admin_user}@{n.ip}")
    known = r.dir / KNOWN_HOSTS
    print(f"ssh:    {ssh_command(state.ssh_key, known, state.admin_user, head.ip)}")
    if state.nodes[1:]:
        worker = state.nodes[1]
        line = ssh_command(state.ssh_key, known, state.admin_user, worker.ip, via=head.ip)
        print(f"worker: {line}")
    print(
        f"driver: python -m driver submit examples/cartpole/train.py "
        f"--head {state.admin_user}@{head.ip} -i {state.ssh_key}"
    )
    print(f"down:   {down_command(r.name, str(r.subnet), r.base)}")
    return EXIT_OK


def ssh_command(key: str, known: Path, user: str, host: str, via: str | None = None) -> str:
    """OpenSSH's command to reach ``host`` with the cluster's key, its host key checked against
    the cluster folder's known_hosts; with ``via``, through that head as a worker on Azure is
    reached (a ProxyCommand, not -J: -J would not pass -i and the known_hosts to the head)."""
    words = ["ssh", "-i", key, "-o", f"UserKnownHostsFile={known}"]
    if via is not None:
        jump = shlex.join([*words, "-W", "%h:%p", f"{user}@{via}"])
        words += ["-o", f"ProxyCommand={jump}"]
    return shlex.join([*words, f"{user}@{host}"])


def down_command(name: str, subnet: str, base: Path) -> str:
    """The ``rehearse down`` that addresses the cluster ``up`` booted, to paste as it is: its
    name, its subnet (what down falls back to when the state file is gone) and, when the
    cluster lives under another ``$RAYDRIVER_REHEARSAL_DIR``, that folder too."""
    from nodekit.rehearsal.state import BASE_ENV, DEFAULT_BASE

    words = [*PROG.split(), "rehearse", "down", "--name", name, "--subnet", subnet]
    line = shlex.join(words)
    if base != DEFAULT_BASE:
        line = f"{BASE_ENV}={shlex.quote(str(base))} {line}"
    return line


def cmd_rehearse_add_worker(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    r = Rehearsal(args.name)
    nodes = r.add_workers(args.count, timeout=args.timeout, progress=say, image=args.image)
    state = r.load()
    assert state is not None  # add_workers refuses a cluster without state
    for node in nodes:
        print(f"{node.name}: {state.admin_user}@{node.ip}")
    return EXIT_OK


def cmd_rehearse_scale_set(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    r = Rehearsal(args.name)
    if args.action == "create":
        node = r.scale_set_create(args.instance_id, args.ip, scale_set=args.scale_set)
        say(f"scale set: instance {args.instance_id} is {node.name} at {node.ip}")
    else:
        acknowledged = r.scale_set_delete(args.instance_id, scale_set=args.scale_set)
        notice = "acknowledged" if acknowledged else "not acknowledged"
        say(f"scale set: instance {args.instance_id} deleted (its Terminate notice {notice})")
    return EXIT_OK


def cmd_rehearse_vm(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    r = Rehearsal(args.name)
    if args.action == "deallocate":
        r.vm_deallocate()
        say("head VM: deallocated (its container is powered off)")
    else:
        r.vm_start()
        say("head VM: started (its container boots)")
    return EXIT_OK


def cmd_rehearse_power(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    r = Rehearsal(args.name)
    getattr(r, args.power)(args.node)
    done = {"reboot": "rebooted", "poweroff": "powered off", "crash": "crashed"}[args.power]
    say(f"rehearsal node {args.node}: {done}")
    return EXIT_OK


def cmd_rehearse_replace_head(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    head = Rehearsal(args.name).replace_head(timeout=args.timeout, progress=say)
    say(f"rehearsal cluster {args.name!r}: a fresh head runs at {head.ip}")
    return EXIT_OK


def cmd_rehearse_down(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    removed = Rehearsal(args.name, subnet=args.subnet).down(
        progress=say, delete_results=args.delete_results
    )
    say(f"rehearsal cluster {args.name!r}: removed {len(removed)} item(s)")
    return EXIT_OK


def cmd_rehearse_storage(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal
    from nodekit.rehearsal.services import azurite

    r = Rehearsal(args.name)  # a checked name
    azurite.serve(r.base, r.name, args.port, say=lambda line: print(line, flush=True))
    return EXIT_OK


def cmd_rehearse_status(args: argparse.Namespace) -> int:
    from nodekit.rehearsal.cluster import Rehearsal

    status = Rehearsal(args.name).status()
    print(json.dumps(status, indent=2))
    return EXIT_OK if status["up"] else EXIT_JOB_FAILED
