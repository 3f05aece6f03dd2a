"""Print the "Deploy to Azure" links for a repository and branch: the portal's template URL with
the URL-encoded raw address of infra/bicep/azuredeploy.json and of createUiDefinition.json, and
the README badge in Markdown. Forks run it with their own address to get a working button.

    python scripts/deploy_button.py                                   # this repository, main
    python scripts/deploy_button.py https://github.com/you/fork my-branch
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PORTAL = "https://portal.azure.com/#create/Microsoft.Template/uri/"
BADGE = "https://aka.ms/deploytoazurebutton"
TEMPLATE = "infra/bicep/azuredeploy.json"
UI = "infra/bicep/createUiDefinition.json"


def repository() -> str:
    """pyproject.toml's [project.urls] Repository."""
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    url: str = doc["project"]["urls"]["Repository"]
    return url


def raw(repo_url: str, branch: str, path: str) -> str:
    """https://github.com/OWNER/NAME -> https://raw.githubusercontent.com/OWNER/NAME/BRANCH/PATH"""
    prefix = "https://github.com/"
    if not repo_url.startswith(prefix):
        raise SystemExit(f"expected a https://github.com/OWNER/NAME address, got {repo_url!r}")
    owner_name = repo_url.removeprefix(prefix).removesuffix(".git").strip("/")
    if owner_name.count("/") != 1:
        raise SystemExit(f"expected https://github.com/OWNER/NAME, got {repo_url!r}")
    return f"https://raw.githubusercontent.com/{owner_name}/{branch}/{path}"


def portal_link(repo_url: str, branch: str = "main") -> str:
    template = quote(raw(repo_url, branch, TEMPLATE), safe="")
    ui = quote(raw(repo_url, branch, UI), safe="")
    return f"{PORTAL}{template}/createUIDefinitionUri/{ui}"


def badge(repo_url: str, branch: str = "main") -> str:
    return f"[![Deploy to Azure]({BADGE})]({portal_link(repo_url, branch)})"


def main(argv: list[str]) -> int:
    repo_url = argv[0] if argv else repository()
    branch = argv[1] if len(argv) > 1 else "main"
    print(f"template: {raw(repo_url, branch, TEMPLATE)}")
    print(f"portal:   {portal_link(repo_url, branch)}")
    print(f"badge:    {badge(repo_url, branch)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
