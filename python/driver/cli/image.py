"""``image build``: bake the node image (infra/bicep/image/) with Azure Image Builder and wait for
it, printing its progress and, at the end, the image version id for ``node_image_id`` /
``nodeImageId``."""

from __future__ import annotations

import argparse
import re
import time

from driver import arm, image
from driver.cli.options import Parser, Verbs, azure_options, subscription_of, verb
from driver.cli.output import PROG, say, shown
from driver.errors import EXIT_INTERRUPTED, EXIT_OK, DriverError

# Azure's rules for the names the command takes: a resource group (1-90 of letters, digits,
# '_', '-', '.', '(' and ')', not ending in '.') and an image template (1-64, the template's
# own limit, letters, digits, '_', '-', '.').
_GROUP = re.compile(r"^[-\w.()]{0,89}[-\w()]$")
_TEMPLATE_NAME = re.compile(r"^[A-Za-z0-9][-\w.]{0,63}$")


def register(verbs: Verbs) -> None:
    p = verbs.add_parser(
        "image",
        help="Bake the node image (Azure Image Builder) the stacks boot with node_image_id.",
        description="The node image: the nodes' install phase baked into a gallery image version.",
    )
    sub = p.add_subparsers(dest="image_verb", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    b = verb(
        sub,
        "build",
        "Build the node image and wait for it; print the image version id.",
        "Deploy infra/bicep/image/azuredeploy.json (a Compute Gallery, an image definition, "
        "Image Builder's identity and template) into --resource-group when its template is "
        "missing, start the template's build (or follow the one already running) and print its "
        "progress until it ends: the id of the new gallery image version, for node_image_id "
        "(Terraform) or nodeImageId (Bicep). Ctrl-C stops the waiting only: the build goes on "
        "in Azure, and running this again follows it. A template cannot be changed once "
        "created: to bake a new install (a new lock, other extras), use another --template "
        "name or delete the old template.",
        cluster=False,
    )
    b.add_argument("--resource-group", metavar="RG", required=True, help="where the image lives")
    b.add_argument(
        "--template",
        metavar="NAME",
        default=image.DEFAULT_IMAGE_TEMPLATE_NAME,
        help="the Image Builder template's name (default: %(default)s)",
    )
    b.add_argument(
        "--location", metavar="L", help="region for a resource group that does not exist"
    )
    b.add_argument(
        "--parameters",
        metavar="FILE",
        help="ARM parameters file for infra/bicep/image/azuredeploy.json (osImage, "
        "extraPipPackages, ...: the cluster's install values)",
    )
    azure_options(b)
    b.set_defaults(func=cmd_build)


def _check(args: argparse.Namespace) -> None:
    if not _GROUP.match(args.resource_group):
        raise DriverError(
            f"--resource-group {args.resource_group!r} is not a resource group name (1-90 "
            "letters, digits, '_', '-', '.', '(' or ')', not ending in '.')"
        )
    if not _TEMPLATE_NAME.match(args.template):
        raise DriverError(
            f"--template {args.template!r} is not an image template name (1-64 letters, "
            "digits, '_', '-' or '.', starting with a letter or digit)"
        )


def cmd_build(args: argparse.Namespace) -> int:
    _check(args)
    template = arm.load_template(image.IMAGE_TEMPLATE)
    values = arm.load_parameters(args.parameters)
    if "imageTemplateName" in values and values["imageTemplateName"] != args.template:
        raise DriverError(
            f"--parameters names the image template {values['imageTemplateName']!r} and "
            f"--template {args.template!r}: name it once"
        )
    values["imageTemplateName"] = args.template
    arm.check_parameters(template, values)
    subscription, endpoint = subscription_of(args, terraform=False)
    group, name = args.resource_group, args.template
    follow = f"{PROG} image build --resource-group {group} --template {name}"
    with arm.ResourceManager(subscription, endpoint) as rm:
        builder = image.ImageBuilder(rm, group, name)
        if rm.group(group) is None:
            if not args.location:
                raise DriverError(
                    f"resource group {group} does not exist in subscription {subscription}: "
                    "pass --location to create it"
                )
            rm.create_group(group, args.location)
            say(f"Created resource group {group} in {args.location}.")
        if builder.template() is None:
            say(f"Image template {name} is missing: deploying {image.IMAGE_TEMPLATE} into {group}")
            for op in rm.deploy(group, image.IMAGE_DEPLOYMENT, template, values):
                say(op.line())
            state, _, reason = rm.deployment(group, image.IMAGE_DEPLOYMENT)
            if state != "Succeeded":
                raise DriverError(
                    f"deployment {image.IMAGE_DEPLOYMENT} in {group} {state}: "
                    f"{reason or 'see its operations above'}"
                )
        build = None
        if builder.last_run().get("runState") == "Running":
            say(f"A build of {name} is already running: following it.")
        else:
            build = builder.start()
            say(f"Started the build of {name} (Image Builder takes 20-60 minutes).")
        started = time.monotonic()
        try:
            for step in builder.follow(build):
                minutes = (time.monotonic() - started) / 60
                # Image Builder's text, one line, no terminal control.
                detail = f" ({shown(step.sub_state, 80)})" if step.sub_state else ""
                message = f": {shown(step.message, 1000)}" if step.message else ""
                say(f"  {minutes:5.1f} min  {shown(step.state, 40)}{detail}{message}")
        except KeyboardInterrupt:
            say(
                f"\nStopped waiting; the build of {name} goes on in Azure. Follow it again "
                f"with:\n  {follow}"
            )
            return EXIT_INTERRUPTED
        version = builder.result()
    print(version, flush=True)
    say(
        'Boot the cluster from it: node_image_id = "..." (Terraform) or nodeImageId '
        "(Bicep), the id above."
    )
    return EXIT_OK
