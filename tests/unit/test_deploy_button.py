"""The "Deploy to Azure" button (docs/deploy-bicep.md) opens the portal on this repository's raw
azuredeploy.json and createUiDefinition.json (pyproject.toml's Repository, branch main), and
scripts/deploy_button.py makes it for any repository."""

from __future__ import annotations

import re
from urllib.parse import unquote

import deploy_button

from support import REPO

PORTAL = "https://portal.azure.com/#create/Microsoft.Template/uri/"


def readme_link() -> str:
    text = (REPO / "docs" / "deploy-bicep.md").read_text()
    [link] = re.findall(
        r"\[!\[Deploy to Azure\]\(https://aka\.ms/deploytoazurebutton\)\]\(([^)]+)\)", text
    )
    return link


def test_the_readme_button_decodes_to_this_repository_s_raw_template() -> None:
    link = readme_link()
    assert link.startswith(PORTAL)
    template, ui = link.removeprefix(PORTAL).split("/createUIDefinitionUri/")
    assert "/" not in template and "/" not in ui  # URL-encoded, as the portal wants
    owner_name = deploy_button.repository().removeprefix("https://github.com/")
    raw = f"https://raw.githubusercontent.com/{owner_name}/main/infra/bicep/"
    assert unquote(template) == raw + "azuredeploy.json"
    assert unquote(ui) == raw + "createUiDefinition.json"
    assert (REPO / "infra/bicep/azuredeploy.json").is_file()
    assert (REPO / "infra/bicep/createUiDefinition.json").is_file()


def test_the_script_makes_links_for_a_fork_and_branch() -> None:
    link = deploy_button.portal_link("https://github.com/you/fork.git", "my-branch")
    template, ui = link.removeprefix(PORTAL).split("/createUIDefinitionUri/")
    assert unquote(template) == (
        "https://raw.githubusercontent.com/you/fork/my-branch/infra/bicep/azuredeploy.json"
    )
    assert unquote(ui).endswith("/you/fork/my-branch/infra/bicep/createUiDefinition.json")
    assert (
        deploy_button.badge(deploy_button.repository())
        in (REPO / "docs" / "deploy-bicep.md").read_text()
    )
